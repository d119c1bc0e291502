//! Replays a recorded training run of an embedding table: for each of S
//! steps, gather a batch of B rows, apply their recorded gradients, take
//! one optimizer step; write the final table (and, if asked, every batch
//! as gathered).
//!
//! ```text
//! cargo run --release --example embedding_replay [--features mpi] -- \
//!     --table TABLE.npy --indices IDX.npy --grads GRADS.npy \
//!     --optimizer sgd|adagrad|rmsprop|lazy_adam --lr LR [--weight-decay WD] \
//!     [--memory continuous|chunked|distributed|hierarchy] [--cache none|local_node] \
//!     --out OUT.npy [--gathered GATHERED.npy]
//! ```
//!
//! TABLE is f32 [N, D], IDX int64 [S, B], GRADS f32 [S, B, D]. OUT is the
//! final table, f32 [N, D]; GATHERED the rows each step gathered before
//! its update, f32 [S, B, D] (collected on rank 0, which writes it). The memory type defaults to distributed;
//! `local_node` is a read-write node cache of half the table's rows.
//!
//! In one process it runs as one rank. Under `mpirun -n R` (built with
//! `--features mpi`) the table is split over the R ranks, each rank
//! gathers and applies a contiguous block of every batch, and rank 0
//! writes the files: the same bytes as one process, for every memory type
//! and cache policy (`TIGA_RANKS_PER_NODE=k` groups the ranks into
//! simulated nodes, for hierarchy memory on one host).

use std::path::PathBuf;
use std::process::ExitCode;

use tiga::runtime::comm::{Communicator, InProcess};
use tiga::runtime::element::bytes_of;
use tiga::runtime::embedding::{Embedding, Optimizer};
use tiga::runtime::npy::{read_npy_array, NpyFile, NpyWriter};
use tiga::runtime::partition::owned_range;
use tiga::runtime::partitioned::{CacheMode, CachePolicy, MemoryType, Options, PartitionedTensor};
use tiga::runtime::ElementType;

const USAGE: &str = "usage: embedding_replay --table TABLE.npy --indices IDX.npy --grads GRADS.npy \
--optimizer sgd|adagrad|rmsprop|lazy_adam --lr LR [--weight-decay WD] \
[--memory continuous|chunked|distributed|hierarchy] [--cache none|local_node] --out OUT.npy [--gathered GATHERED.npy]";

#[derive(Debug)]
struct Args {
    table: PathBuf,
    indices: PathBuf,
    grads: PathBuf,
    optimizer: Optimizer,
    lr: f64,
    memory: MemoryType,
    cache: CachePolicy,
    out: PathBuf,
    gathered: Option<PathBuf>,
}

fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut table, mut indices, mut grads, mut optimizer, mut lr, mut wd, mut out, mut gathered) =
        (None, None, None, None, None, 0.0, None, None);
    let (mut memory, mut cache) = (MemoryType::Distributed, CachePolicy::None);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let number = |v: String| {
            v.parse::<f64>().ok().filter(|x| x.is_finite()).ok_or_else(|| format!("{flag} wants a number, not {v:?}"))
        };
        match flag.as_str() {
            "--table" => table = Some(PathBuf::from(value()?)),
            "--indices" => indices = Some(PathBuf::from(value()?)),
            "--grads" => grads = Some(PathBuf::from(value()?)),
            "--out" => out = Some(PathBuf::from(value()?)),
            "--gathered" => gathered = Some(PathBuf::from(value()?)),
            "--lr" => lr = Some(number(value()?)?),
            "--weight-decay" => wd = number(value()?)?,
            "--optimizer" => {
                let v = value()?;
                optimizer = Some(
                    Optimizer::parse(&v).ok_or_else(|| format!("unknown optimizer {v:?}: sgd, adagrad, rmsprop or lazy_adam"))?,
                );
            }
            "--memory" => {
                let v = value()?;
                memory = MemoryType::parse(&v)
                    .ok_or_else(|| format!("unknown memory type {v:?}: continuous, chunked, distributed or hierarchy"))?;
            }
            "--cache" => {
                cache = match value()?.as_str() {
                    "none" => CachePolicy::None,
                    "local_node" => CachePolicy::LocalNode { ratio: 0.5, mode: CacheMode::ReadWrite },
                    v => return Err(format!("unknown cache policy {v:?}: none or local_node")),
                }
            }
            "-h" | "--help" => return Err(String::new()),
            _ => return Err(format!("unknown argument {flag:?}")),
        }
    }
    let need = |v: Option<PathBuf>, flag: &str| v.ok_or_else(|| format!("{flag} is required"));
    Ok(Args {
        table: need(table, "--table")?,
        indices: need(indices, "--indices")?,
        grads: need(grads, "--grads")?,
        optimizer: optimizer.ok_or("--optimizer is required")?.with_weight_decay(wd),
        lr: lr.ok_or("--lr is required")?,
        memory,
        cache,
        out: need(out, "--out")?,
        gathered,
    })
}

/// The recorded run, as every rank reads it.
struct Inputs {
    rows: usize,
    dim: usize,
    indices: Vec<i64>,
    grads: Vec<f32>,
    steps: usize,
    batch: usize,
}

fn read_inputs(a: &Args) -> Result<Inputs, String> {
    let table = NpyFile::open(&a.table).map_err(|e| e.to_string())?;
    let [rows, dim] = table.shape() else {
        return Err(format!("{}: the table must be 2-D [N, D], not {:?}", a.table.display(), table.shape()));
    };
    if table.dtype() != ElementType::F32 {
        return Err(format!("{}: the table must be float32, not {}", a.table.display(), table.dtype()));
    }
    let idx = read_npy_array(&a.indices).map_err(|e| e.to_string())?;
    let (indices, [steps, batch]) = (idx.values::<i64>(), idx.shape.as_slice()) else {
        return Err(format!("{}: the indices must be int64 [S, B], not {} {:?}", a.indices.display(), idx.dtype, idx.shape));
    };
    let grads = read_npy_array(&a.grads).map_err(|e| e.to_string())?;
    let want = [*steps, *batch, *dim];
    let (Some(g), true) = (grads.values::<f32>(), grads.shape == want) else {
        return Err(format!(
            "{}: the gradients must be float32 {want:?}, not {} {:?}",
            a.grads.display(),
            grads.dtype,
            grads.shape
        ));
    };
    let indices = indices.ok_or_else(|| format!("{}: the indices must be int64, not {}", a.indices.display(), idx.dtype))?;
    if let Some((p, &i)) = indices.iter().enumerate().find(|(_, &i)| i < 0 || i as usize >= *rows) {
        return Err(format!(
            "{}: index {i} at step {}, position {} is not a row of the {rows}-row table",
            a.indices.display(),
            p / batch,
            p % batch
        ));
    }
    Ok(Inputs { rows: *rows, dim: *dim, indices, grads: g, steps: *steps, batch: *batch })
}

/// One rank's part of the replay (module doc).
fn replay(comm: &dyn Communicator, a: &Args) -> Result<(), String> {
    // Every rank reads the inputs; all go on only if all could.
    let inputs = read_inputs(a);
    let verdicts = comm.all_gather_bytes(&[u8::from(inputs.is_ok())]).map_err(|e| e.to_string())?;
    let inputs = inputs?;
    if let Some(r) = verdicts.iter().position(|v| v.as_slice() != [1]) {
        return Err(format!("rank {r} could not read the inputs"));
    }
    let Inputs { rows, dim, indices, grads, steps, batch } = inputs;
    let options = Options { cache: a.cache, ..Options::memory(a.memory) };
    let mut emb = Embedding::<f32>::new(comm, rows, dim, &options, a.optimizer).map_err(|e| e.to_string())?;
    emb.table().load_npy(&a.table).map_err(|e| e.to_string())?;
    // The gathered rows, one per (step, position) in a tensor of S·B rows;
    // each rank writes its block of every step.
    let block = owned_range(batch, comm.size(), comm.rank());
    let gathered = match &a.gathered {
        Some(_) => Some(
            PartitionedTensor::new(comm, ElementType::F32, &[steps * batch, dim], &Options::memory(MemoryType::Distributed))
                .map_err(|e| e.to_string())?,
        ),
        None => None,
    };
    for s in 0..steps {
        let idx = &indices[s * batch + block.start..s * batch + block.end];
        let rows_got = emb.gather(idx).map_err(|e| e.to_string())?;
        if let Some(g) = &gathered {
            let at: Vec<i64> = (s * batch + block.start..s * batch + block.end).map(|i| i as i64).collect();
            g.scatter(&at, &rows_got).map_err(|e| e.to_string())?;
        }
        let g = &grads[(s * batch + block.start) * dim..(s * batch + block.end) * dim];
        emb.accumulate(idx, g).map_err(|e| e.to_string())?;
        emb.step(a.lr).map_err(|e| e.to_string())?;
    }
    emb.table().store_npy(&a.out).map_err(|e| e.to_string())?;
    if let (Some(g), Some(path)) = (&gathered, &a.gathered) {
        // Rank 0 reads every row and writes them as [S, B, D].
        let all: Vec<i64> = if comm.rank() == 0 { (0..(steps * batch) as i64).collect() } else { Vec::new() };
        let rows_all: Vec<f32> = g.gather(&all).map_err(|e| e.to_string())?;
        if comm.rank() == 0 {
            let mut w = NpyWriter::create(path, ElementType::F32, &[steps, batch, dim]).map_err(|e| e.to_string())?;
            w.write(bytes_of(&rows_all)).and_then(|_| w.finish()).map_err(|e| e.to_string())?;
        }
    }
    if comm.rank() == 0 {
        let cache = emb
            .table()
            .cache_stats()
            .map(|s| format!(", cache hits {} misses {} on rank 0", s.hits, s.misses))
            .unwrap_or_default();
        println!(
            "embedding_replay: {steps} steps of {batch} rows over a {rows} x {dim} table, {} on {} {} rank(s){cache}; wrote {}",
            a.optimizer.name(),
            comm.size(),
            a.memory.name(),
            a.out.display()
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("embedding_replay: {e}");
            }
            eprintln!("{USAGE}");
            return if e.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(2) };
        }
    };
    let result = if tiga::runtime::comm::launched_by_mpirun() {
        #[cfg(feature = "mpi")]
        {
            tiga::runtime::comm::Mpi::init().map_err(|e| e.to_string()).and_then(|mpi| replay(&mpi, &args))
        }
        #[cfg(not(feature = "mpi"))]
        {
            Err("started by mpirun, but built without the mpi feature: rebuild with --features mpi".to_string())
        }
    } else {
        InProcess::run(1, |c| replay(&c, &args))
            .pop()
            .map_or(Err("no rank ran".into()), |r| r.map_err(|e| e.to_string()).and_then(|r| r))
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("embedding_replay: {e}");
            ExitCode::FAILURE
        }
    }
}
