//! Embeddings with sparse optimizers over in-process ranks: each optimizer
//! against an independent f64 reference of its formulas (written here,
//! from WholeGraph's definitions) over many steps with duplicate indices,
//! and the same bits for every memory type, cache policy and rank count.

mod common;

use common::Rng;
use tiga_dist::comm::{Communicator, InProcess};
use tiga_dist::embedding::{Embedding, Optimizer};
use tiga_dist::partition::owned_range;
use tiga_dist::partitioned::{CacheMode, CachePolicy, MemoryType, Options, RowSplit};

const ROWS: usize = 23;
const DIM: usize = 5;
const BATCH: usize = 17;
const STEPS: usize = 40;

/// The initial table, and per step a batch of indices (drawn from the
/// first 12 rows, so many repeat) and their gradients, all f32.
struct Data {
    table: Vec<f32>,
    indices: Vec<Vec<i64>>,
    grads: Vec<Vec<f32>>,
}

fn data() -> Data {
    let mut rng = Rng(42);
    let table = (0..ROWS * DIM).map(|_| (rng.unit() - 0.5) as f32).collect();
    let indices = (0..STEPS).map(|_| (0..BATCH).map(|_| (rng.next() % 12) as i64).collect()).collect();
    let grads = (0..STEPS).map(|_| (0..BATCH * DIM).map(|_| (rng.unit() * 2.0 - 1.0) as f32).collect()).collect();
    Data { table, indices, grads }
}

/// The optimizer formulas in f64, per touched row, written apart from the
/// library's (indexed loops, to read like the formulas).
#[allow(clippy::needless_range_loop)]
fn reference(opt: &str, wd: f64, adamw: bool, lr: f64, d: &Data) -> Vec<f64> {
    let mut w: Vec<f64> = d.table.iter().map(|&x| x as f64).collect();
    let mut s1 = vec![0.0f64; ROWS * DIM];
    let mut s2 = vec![0.0f64; ROWS * DIM];
    let mut t = [0i32; ROWS];
    let (b1, b2, eps, alpha) = (0.9f64, 0.999f64, 1e-8f64, 0.99f64);
    for step in 0..STEPS {
        let idx = &d.indices[step];
        let mut rows: Vec<usize> = idx.iter().map(|&i| i as usize).collect();
        rows.sort_unstable();
        rows.dedup();
        for &r in &rows {
            // Batch order.
            let mut g = [0.0f64; DIM];
            let mut first = true;
            for (p, &i) in idx.iter().enumerate() {
                if i as usize == r {
                    for j in 0..DIM {
                        let x = d.grads[step][p * DIM + j] as f64;
                        g[j] = if first { x } else { g[j] + x };
                    }
                    first = false;
                }
            }
            t[r] += 1;
            for j in 0..DIM {
                let k = r * DIM + j;
                let mut gj = g[j];
                match opt {
                    "sgd" => {
                        gj += wd * w[k];
                        w[k] -= lr * gj;
                    }
                    "adagrad" => {
                        gj += wd * w[k];
                        s1[k] += gj * gj;
                        w[k] -= lr * gj / (s1[k].sqrt() + eps);
                    }
                    "rmsprop" => {
                        gj += wd * w[k];
                        s1[k] = alpha * s1[k] + (1.0 - alpha) * gj * gj;
                        w[k] -= lr * gj / (s1[k].sqrt() + eps);
                    }
                    _ => {
                        if adamw {
                            w[k] -= lr * wd * w[k];
                        } else {
                            gj += wd * w[k];
                        }
                        s1[k] = b1 * s1[k] + (1.0 - b1) * gj;
                        s2[k] = b2 * s2[k] + (1.0 - b2) * gj * gj;
                        let mhat = s1[k] / (1.0 - b1.powi(t[r]));
                        let vhat = s2[k] / (1.0 - b2.powi(t[r]));
                        w[k] -= lr * mhat / (vhat.sqrt() + eps);
                    }
                }
            }
        }
    }
    w
}

/// What a training run gives: the rows gathered at each step (batch
/// order) and the final table, as rank 0 sees them.
#[derive(Debug, PartialEq)]
struct Run {
    gathered: Vec<u32>,
    table: Vec<u32>,
}

fn train(hosts: &[usize], options: &Options, opt: Optimizer, lr: f64, d: &Data) -> Run {
    let ranks = hosts.len();
    let res = InProcess::run_on_hosts(hosts, |c| {
        let comm: &dyn Communicator = &c;
        let e = Embedding::<f32>::new(comm, ROWS, DIM, options, opt).expect("embedding");
        // Rank 0 writes the initial table.
        let (idx, vals): (Vec<i64>, Vec<f32>) =
            if c.rank() == 0 { ((0..ROWS as i64).collect(), d.table.clone()) } else { (Vec::new(), Vec::new()) };
        e.table().scatter(&idx, &vals).expect("initial table");
        let mut e = e;
        let block = owned_range(BATCH, ranks, c.rank());
        let mut gathered = Vec::new();
        for step in 0..STEPS {
            let idx = &d.indices[step][block.clone()];
            gathered.extend(e.gather(idx).expect("gather"));
            e.accumulate(idx, &d.grads[step][block.start * DIM..block.end * DIM]).expect("accumulate");
            e.step(lr).expect("step");
        }
        let table: Vec<f32> = e.gather(&(0..ROWS as i64).collect::<Vec<_>>()).expect("table");
        (gathered, table)
    });
    let mut all = Vec::new();
    let mut table = Vec::new();
    let per_rank: Vec<(Vec<f32>, Vec<f32>)> = res.into_iter().map(|r| r.expect("rank")).collect();
    // Reassemble the gathered rows in batch order: step by step, rank by rank.
    for step in 0..STEPS {
        for (r, (g, _)) in per_rank.iter().enumerate() {
            let b = owned_range(BATCH, ranks, r).len();
            all.extend(g[step * b * DIM..(step + 1) * b * DIM].iter().map(|x| x.to_bits()));
        }
    }
    for (_, t) in &per_rank {
        if table.is_empty() {
            table = t.iter().map(|x| x.to_bits()).collect();
        }
        assert_eq!(table, t.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), "every rank reads the same table");
    }
    Run { gathered: all, table }
}

fn optimizers() -> Vec<(&'static str, f64, bool, Optimizer, f64)> {
    vec![
        ("sgd", 0.0, false, Optimizer::sgd(), 0.05),
        ("sgd", 0.01, false, Optimizer::sgd().with_weight_decay(0.01), 0.05),
        ("adagrad", 0.0, false, Optimizer::adagrad(), 0.02),
        ("adagrad", 0.05, false, Optimizer::adagrad().with_weight_decay(0.05), 0.02),
        ("rmsprop", 0.01, false, Optimizer::rmsprop().with_weight_decay(0.01), 0.002),
        ("lazy_adam", 0.0, false, Optimizer::lazy_adam(), 0.01),
        ("lazy_adam", 0.1, false, Optimizer::lazy_adam().with_weight_decay(0.1), 0.01),
        (
            "lazy_adam",
            0.1,
            true,
            Optimizer::LazyAdam { weight_decay: 0.1, beta1: 0.9, beta2: 0.999, eps: 1e-8, adamw: true },
            0.01,
        ),
    ]
}

#[test]
fn each_optimizer_matches_its_f64_reference() {
    let d = data();
    for (name, wd, adamw, opt, lr) in optimizers() {
        let want = reference(name, wd, adamw, lr, &d);
        let run = train(&[0, 0], &Options::memory(MemoryType::Distributed), opt, lr, &d);
        let worst = run.table.iter().zip(&want).map(|(&b, &w)| (f32::from_bits(b) as f64 - w).abs()).fold(0.0, f64::max);
        let moved = run.table.iter().zip(&d.table).map(|(&b, &w)| (f32::from_bits(b) - w).abs()).fold(0.0, f32::max);
        // Measured: max |diff| 1.2e-7 to 1.9e-7, rows moving 0.1 to 0.56.
        assert!(moved > 0.05, "{name}: the rows hardly moved ({moved}), so the check would be weak");
        assert!(worst <= 1e-6, "{name} (wd {wd}, adamw {adamw}): max |diff| {worst:e} over {STEPS} steps");
        // Untouched rows (12..) never move.
        for k in 12 * DIM..ROWS * DIM {
            assert_eq!(f32::from_bits(run.table[k]), d.table[k], "{name}: untouched row {} changed", k / DIM);
        }
    }
}

#[test]
fn every_memory_type_cache_and_rank_count_gives_the_same_bits() {
    let d = data();
    for (name, _, _, opt, lr) in [optimizers()[3], optimizers()[6]] {
        let base = train(&[0], &Options::memory(MemoryType::Continuous), opt, lr, &d);
        let caches = [
            CachePolicy::None,
            CachePolicy::LocalNode { ratio: 0.3, mode: CacheMode::ReadWrite },
            CachePolicy::LocalNode { ratio: 1.0, mode: CacheMode::ReadOnly },
        ];
        for memory in MemoryType::ALL {
            for hosts in [vec![0], vec![0, 0], vec![0, 0, 0], vec![0, 0, 1, 1], vec![0, 1, 2]] {
                let nodes = hosts.iter().max().map_or(1, |m| m + 1);
                let uniform = hosts.len() % nodes == 0;
                if (matches!(memory, MemoryType::Continuous | MemoryType::Chunked) && nodes > 1)
                    || (memory == MemoryType::Hierarchy && !uniform)
                {
                    continue;
                }
                for cache in caches {
                    let o = Options { cache, ..Options::memory(memory) };
                    let run = train(&hosts, &o, opt, lr, &d);
                    assert!(run == base, "{name}: {memory:?} on hosts {hosts:?} with {cache:?} differs from one rank");
                }
            }
        }
        // An uneven split with a rank of no rows, too.
        let o = Options { split: RowSplit::Rows(vec![10, 0, 13]), ..Options::memory(MemoryType::Distributed) };
        assert!(train(&[0, 0, 0], &o, opt, lr, &d) == base, "{name}: uneven split");
    }
}

#[test]
fn states_are_saved_and_loaded_with_the_table() {
    let d = data();
    let dir = tempfile::tempdir().expect("tempdir");
    let prefix = dir.path().join("emb");
    let opt = Optimizer::lazy_adam();
    let res = InProcess::run_on_hosts(&[0, 0, 1, 1], |c| {
        let comm: &dyn Communicator = &c;
        let o = Options::memory(MemoryType::Hierarchy);
        let mut e = Embedding::<f32>::new(comm, ROWS, DIM, &o, opt).expect("embedding");
        let block = owned_range(BATCH, 4, c.rank());
        for step in 0..3 {
            let idx = &d.indices[step][block.clone()];
            e.accumulate(idx, &d.grads[step][block.start * DIM..block.end * DIM]).expect("accumulate");
            e.step(0.01).expect("step");
        }
        e.store_npy(&prefix).expect("store");
        e.store_per_rank(&prefix).expect("store per rank");
        // Two fresh copies, loaded both ways, step on like the original.
        let mut a = Embedding::<f32>::new(comm, ROWS, DIM, &o, opt).expect("embedding");
        a.load_npy(&prefix).expect("load");
        let mut b = Embedding::<f32>::new(comm, ROWS, DIM, &Options::memory(MemoryType::Hierarchy), opt).expect("embedding");
        b.load_per_rank(&prefix).expect("load per rank");
        let all: Vec<i64> = (0..ROWS as i64).collect();
        for step in 3..6 {
            let idx = &d.indices[step][block.clone()];
            let g = &d.grads[step][block.start * DIM..block.end * DIM];
            for x in [&mut e, &mut a, &mut b] {
                x.accumulate(idx, g).expect("accumulate");
                x.step(0.01).expect("step");
            }
        }
        let t = |x: &Embedding<f32>| x.gather(&all).expect("gather");
        let powers: Vec<f64> = e.state("beta_powers").expect("powers").gather(&all).expect("gather");
        (t(&e) == t(&a) && t(&e) == t(&b), powers)
    });
    for r in res {
        let (same, powers) = r.expect("rank");
        assert!(same);
        // Row 0 was touched in some of the 6 steps: its powers are β^t.
        let t0 = d.indices[..6].iter().filter(|b| b.contains(&0)).count() as i32;
        assert_eq!(powers[0], (0..t0).fold(1.0, |p, _| p * 0.9));
        assert_eq!(powers[2 * 12 + 1], 1.0, "an untouched row keeps t = 0");
    }
    assert!(dir.path().join("emb.m.npy").exists() && dir.path().join("emb.beta_powers_part_3_of_4.npy").exists());
}

#[test]
fn bad_gradients_are_refused() {
    let res = InProcess::run(2, |c| {
        let comm: &dyn Communicator = &c;
        let mut e = Embedding::<f32>::new(comm, 4, 2, &Options::default(), Optimizer::sgd()).expect("embedding");
        let a = e.accumulate(&[0, 4], &[0.0; 4]).map_err(|x| x.to_string());
        let b = e.accumulate(&[0], &[0.0; 3]).map_err(|x| x.to_string());
        let s = e.step(0.1).expect("an empty step");
        (a, b, s.sent)
    });
    for r in res {
        let (a, b, sent) = r.expect("rank");
        assert!(a.expect_err("4 is out of range").contains("index 4 (position 1)"));
        assert!(b.expect_err("3 elements").contains("3 elements given, 2 expected"));
        assert_eq!(sent, 0);
    }
}
