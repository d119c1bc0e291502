//! Partitioned tensors and embeddings on the MPI engine, as a program (ranks
//! are processes started by `mpirun`; `.ci/feature-suite` runs it on 1, 2 and
//! 4 ranks, and on 4 with `TIGA_RANKS_PER_NODE=2`, two simulated nodes):
//!
//! ```text
//! TIGA_RANKS_PER_NODE=2 mpirun -n 4 target/release/deps/mpi_partitioned-<hash>
//! ```
//!
//! Every memory type the nodes allow (continuous and chunked through an
//! `MPI_Win_allocate_shared` window, hierarchy across the simulated
//! nodes) against a plain array: gathers with duplicates, scatters,
//! sub-tensors, pointer views, files, the node cache; and embedding
//! training against the same training in one in-process rank, bit for
//! bit. Every rank runs the same collectives whatever a check finds; at
//! the end the ranks agree on the failures and exit non-zero if any.

#[path = "common/checks.rs"]
mod checks;

use checks::Checks;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use tiga_dist::comm::{Communicator, InProcess, Mpi, NodeGroups};
use tiga_dist::embedding::{Embedding, Optimizer};
use tiga_dist::partition::owned_range;
use tiga_dist::partitioned::{CacheMode, CachePolicy, Capability, Location, MemoryType, Options, PartitionedTensor, RowSplit};
use tiga_runtime::ElementType;

fn value(i: usize) -> f32 {
    (i % 997) as f32 * 0.5 - 7.0
}

/// A directory every rank can use: rank 0 makes it, the others learn its
/// name (one host).
fn shared_dir(world: &Mpi) -> Option<PathBuf> {
    let made = if world.rank() == 0 {
        tempfile::Builder::new().prefix("mpi-partitioned").tempdir().ok().map(|d| d.keep())
    } else {
        None
    };
    let name = made.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
    let all = world.all_gather_bytes(name.as_bytes()).ok()?;
    let dir = PathBuf::from(String::from_utf8_lossy(&all[0]).into_owned());
    (!all[0].is_empty()).then_some(dir)
}

fn tensors(world: &Mpi, nodes: &NodeGroups, dir: &Option<PathBuf>, t: &mut Checks) {
    let (r, n) = (world.rank(), world.size());
    let rows = 41;
    let width = 6;
    let plain: Vec<f32> = (0..rows * width).map(value).collect();
    for memory in MemoryType::ALL {
        let allowed = Capability::check(memory, Location::Host, nodes).is_ok();
        for cache in [CachePolicy::None, CachePolicy::LocalNode { ratio: 0.4, mode: CacheMode::ReadWrite }] {
            // Rank 0 holds no rows when there are several ranks.
            let split = RowSplit::Rows(
                (0..n)
                    .map(|p| {
                        if n == 1 {
                            rows
                        } else if p == 0 {
                            0
                        } else {
                            owned_range(rows, n - 1, p - 1).len()
                        }
                    })
                    .collect(),
            );
            let o = Options { split, cache, ..Options::memory(memory) };
            let made = PartitionedTensor::new(world, ElementType::F32, &[rows, width], &o);
            let name = format!("{} ({cache:?})", memory.name());
            let tensor = match made {
                Ok(x) => {
                    t.check(&format!("{name}: made where the capability allows"), allowed, || {
                        "made, but refused by the check".into()
                    });
                    x
                }
                Err(e) => {
                    t.check(&format!("{name}: refused only where the capability refuses"), !allowed, || e.to_string());
                    continue;
                }
            };
            // Each rank writes every n-th row.
            let mine: Vec<i64> = (r..rows).step_by(n).map(|i| i as i64).collect();
            let vals: Vec<f32> =
                mine.iter().flat_map(|&i| plain[i as usize * width..(i as usize + 1) * width].to_vec()).collect();
            let s = tensor.scatter(&mine, &vals);
            t.check(&format!("{name}: scatter"), s.is_ok(), || format!("{s:?}"));
            for round in 0..3 {
                let idx: Vec<i64> = (0..50).map(|k| ((k * 7 + r * 13 + round * 5) % rows) as i64).collect();
                let got = tensor.gather::<f32>(&idx);
                let want: Vec<f32> =
                    idx.iter().flat_map(|&i| plain[i as usize * width..(i as usize + 1) * width].to_vec()).collect();
                t.check(&format!("{name}: gather round {round}"), got.as_ref().is_ok_and(|g| *g == want), || {
                    format!("{:?}", got.map(|g| g.len()))
                });
            }
            if let Some(stats) = tensor.cache_stats() {
                // A rank that fetched rows hits on the rounds that repeat them.
                t.check(&format!("{name}: the cache hits on repeated rows"), stats.misses == 0 || stats.hits > 0, || {
                    format!("{stats:?}")
                });
            }
            // Duplicates: every rank writes row 5 (the highest rank's value wins).
            let dup = tensor.scatter(&[5, 5], &[vec![r as f32; width], vec![r as f32 + 0.5; width]].concat());
            let row5 = tensor.gather::<f32>(&[5]);
            t.check(
                &format!("{name}: the last write wins"),
                dup.is_ok() && row5.as_ref().is_ok_and(|v| v[0] == n as f32 - 0.5),
                || format!("{row5:?}"),
            );
            let restore =
                if r == 0 { tensor.scatter(&[5], &plain[5 * width..6 * width]) } else { tensor.scatter::<f32>(&[], &[]) };
            t.check(&format!("{name}: restore"), restore.is_ok(), || format!("{restore:?}"));
            // A column sub-tensor of a row range.
            let sub = tensor.rows(10..30).and_then(|s| s.columns(2..5));
            let got = sub.as_ref().map_err(|e| e.to_string()).and_then(|s| s.gather::<f32>(&[0, 19]).map_err(|e| e.to_string()));
            let want: Vec<f32> = [10usize, 29].iter().flat_map(|&i| plain[i * width + 2..i * width + 5].to_vec()).collect();
            t.check(&format!("{name}: sub-tensor"), got.as_ref().is_ok_and(|g| *g == want), || format!("{got:?}"));
            let bad = tensor.gather::<f32>(&[rows as i64]);
            t.check(&format!("{name}: out of range refused"), bad.is_err(), || "accepted".into());
            if memory == MemoryType::Continuous {
                // The window's segments lie end to end: one address range.
                let all = tensor.with_all::<f32, _>(|v| v.contiguous().map(|d| d == plain.as_slice()));
                t.check(&format!("{name}: one address range"), matches!(all, Ok(Some(true))), || format!("{all:?}"));
            }
            if matches!(memory, MemoryType::Continuous | MemoryType::Chunked) {
                let last = tensor.with_chunk::<f32, _>(n - 1, |v| {
                    v.rows() == 0 || v.row(0)[0] == plain[tensor.partition(n - 1).start * width]
                });
                t.check(&format!("{name}: another rank's chunk by pointer"), matches!(last, Ok(true)), || format!("{last:?}"));
            }
            if let Some(dir) = dir {
                let path = dir.join(format!("{}-{}.npy", memory.name(), cache != CachePolicy::None));
                let stored = tensor.store_npy(&path);
                let back =
                    PartitionedTensor::new(world, ElementType::F32, &[rows, width], &Options::memory(memory)).and_then(|b| {
                        b.load_npy(&path)?;
                        b.store_per_rank(dir.join(format!("{}-parts", memory.name())))?;
                        b.gather::<f32>(&(0..rows as i64).collect::<Vec<_>>())
                    });
                t.check(&format!("{name}: store and load"), stored.is_ok() && back.as_ref().is_ok_and(|b| *b == plain), || {
                    format!("{stored:?} {:?}", back.map(|b| b.len()))
                });
            }
        }
    }
}

/// An empty tensor on every memory type, and a bad index on one rank that
/// every rank hears of.
fn edges(world: &Mpi, nodes: &NodeGroups, t: &mut Checks) {
    let (r, n) = (world.rank(), world.size());
    for memory in MemoryType::ALL {
        if Capability::check(memory, Location::Host, nodes).is_err() {
            continue;
        }
        let name = memory.name();
        let empty = PartitionedTensor::new(world, ElementType::I32, &[0, 4], &Options::memory(memory));
        let used = empty.as_ref().map_err(|e| e.to_string()).and_then(|e| {
            e.scatter::<i32>(&[], &[]).map_err(|x| x.to_string())?;
            e.gather::<i32>(&[]).map_err(|x| x.to_string())
        });
        t.check(&format!("{name}: an empty tensor"), used.as_ref().is_ok_and(Vec::is_empty), || format!("{used:?}"));
        let Ok(x) = PartitionedTensor::new(world, ElementType::I64, &[6], &Options::memory(memory)) else {
            t.check(&format!("{name}: made"), false, || "refused".into());
            continue;
        };
        let idx: Vec<i64> = if r == n - 1 { vec![0, 6] } else { vec![1] };
        let s = x.scatter(&idx, &vec![9i64; idx.len()]);
        let agreed = match &s {
            Err(e) if r == n - 1 => e.to_string().contains("index 6 (position 1)"),
            Err(e) => e.to_string().starts_with(&format!("rank {} failed: index 6", n - 1)),
            Ok(()) => false,
        };
        t.check(&format!("{name}: a bad index is every rank's error"), agreed, || format!("{s:?}"));
        let after = x.gather::<i64>(&[0, 1]);
        t.check(&format!("{name}: nothing was written, the ranks are in step"), matches!(after.as_deref(), Ok([0, 0])), || {
            format!("{after:?}")
        });
    }
}

const ROWS: usize = 29;
const DIM: usize = 8;
const BATCH: usize = 24;
const STEPS: usize = 12;

fn batch(step: usize) -> (Vec<i64>, Vec<f32>) {
    let idx = (0..BATCH).map(|k| ((k * k + step * 3) % 15) as i64).collect();
    let grads = (0..BATCH * DIM).map(|k| ((k * 31 + step * 7) % 19) as f32 * 0.1 - 0.9).collect();
    (idx, grads)
}

/// Train on `comm`, each rank its block of every batch; the final table.
fn train(comm: &dyn Communicator, o: &Options, opt: Optimizer) -> Result<Vec<f32>, String> {
    let mut e = Embedding::<f32>::new(comm, ROWS, DIM, o, opt).map_err(|e| e.to_string())?;
    let (idx, vals): (Vec<i64>, Vec<f32>) = if comm.rank() == 0 {
        ((0..ROWS as i64).collect(), (0..ROWS * DIM).map(value).collect())
    } else {
        (Vec::new(), Vec::new())
    };
    e.table().scatter(&idx, &vals).map_err(|e| e.to_string())?;
    let block = owned_range(BATCH, comm.size(), comm.rank());
    for step in 0..STEPS {
        let (idx, grads) = batch(step);
        e.gather(&idx[block.clone()]).map_err(|e| e.to_string())?;
        e.accumulate(&idx[block.clone()], &grads[block.start * DIM..block.end * DIM]).map_err(|e| e.to_string())?;
        e.step(0.05).map_err(|e| e.to_string())?;
    }
    e.gather(&(0..ROWS as i64).collect::<Vec<_>>()).map_err(|e| e.to_string())
}

fn embeddings(world: &Mpi, nodes: &NodeGroups, t: &mut Checks) {
    for opt in [Optimizer::adagrad().with_weight_decay(0.01), Optimizer::lazy_adam()] {
        let want = InProcess::run(1, |c| train(&c, &Options::default(), opt)).pop().and_then(Result::ok).and_then(Result::ok);
        for memory in MemoryType::ALL {
            if Capability::check(memory, Location::Host, nodes).is_err() {
                continue;
            }
            for cache in [CachePolicy::None, CachePolicy::LocalNode { ratio: 0.5, mode: CacheMode::ReadWrite }] {
                let got = train(world, &Options { cache, ..Options::memory(memory) }, opt);
                let same = match (&got, &want) {
                    (Ok(g), Some(w)) => g.iter().map(|x| x.to_bits()).eq(w.iter().map(|x| x.to_bits())),
                    _ => false,
                };
                t.check(&format!("{} on {} ({cache:?}): the bits of one rank", opt.name(), memory.name()), same, || {
                    format!("{got:?}")
                });
            }
        }
    }
}

fn main() -> ExitCode {
    let world = match Mpi::init() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("mpi_partitioned: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut t = Checks::new(world.rank());
    let started = Instant::now();
    let nodes = match NodeGroups::new(&world) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("mpi_partitioned: node groups: {e}");
            return ExitCode::FAILURE;
        }
    };
    let dir = shared_dir(&world);
    t.check("a shared directory", dir.is_some(), || "none".into());
    tensors(&world, &nodes, &dir, &mut t);
    edges(&world, &nodes, &mut t);
    embeddings(&world, &nodes, &mut t);
    let total = t.total_failures(&world);
    if world.rank() == 0 {
        if let Some(d) = &dir {
            let _ = std::fs::remove_dir_all(d);
        }
        println!(
            "mpi_partitioned on {} rank(s), {} node(s) ({}): {} checks passed on rank 0, {total} failure(s) on all ranks, {:.2} s",
            world.size(),
            nodes.nodes(),
            world.engine(),
            t.passed,
            started.elapsed().as_secs_f64()
        );
    }
    drop(nodes);
    drop(world);
    if total == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
