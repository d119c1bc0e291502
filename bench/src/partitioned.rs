//! `tiga-bench partitioned`: partitioned tensors' gathers and embedding
//! optimizer steps, by memory type and rank count, against a local
//! `memcpy` of the same rows.
//!
//! - gather: a `--rows` × `--dim` f32 table (1M × 128 by default, 512 MB)
//!   split over R ranks; each rank gathers `--batch` rows (64k) drawn with
//!   a skew (row ⌊N·u²⌋ for uniform u: a quarter of the rows take half the
//!   reads), fresh indices every repeat. Every memory type, R in
//!   `--ranks` (1, 2, 4), without a cache and, for distributed and
//!   hierarchy, with a read-only node cache of `--cache-ratio` (0.25) of
//!   the rows; hierarchy runs on two simulated nodes. The job's time is
//!   rank 0's from a barrier to a barrier after the gather (so the slowest
//!   rank's); rows/s and GB/s count every rank's rows. Every gathered row
//!   is checked against the values the table was filled with.
//! - memcpy: one thread copying rank 0's rows of each repeat out of a plain
//!   array of the same table: what a gather costs when every row is local.
//! - step: an embedding of the same size, batches of `--batch` indices
//!   (the whole batch split over the ranks in blocks), one
//!   `accumulate` + `step` per timing, for each optimizer (states
//!   included: lazy_adam keeps 1 GB of m and v beside the table).
//!
//! Configurations run in process (ranks as threads) and, built with
//! `--features mpi` and unless `--no-mpi`, under `mpirun -n R` (this
//! binary re-launched as `tiga-bench partitioned --mpi-worker ...`; the
//! hierarchy's simulated nodes through `TIGA_RANKS_PER_NODE`). Medians
//! over `--repeat` timings after `--warmup` untimed ones. Output: a table
//! and JSON, written atomically.
//!
//! ```sh
//! cargo run --release -p tiga-bench --features mpi -- partitioned [--quick] [--json PATH] [--table PATH]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::json;
use tiga::runtime::comm::{Communicator, InProcess};
use tiga::runtime::embedding::{Embedding, Optimizer};
use tiga::runtime::partition::owned_range;
use tiga::runtime::partitioned::{CacheMode, CachePolicy, MemoryType, Options, PartitionedTensor};
use tiga::runtime::ElementType;

const RESULT_TAG: &str = "PARTITIONED_RESULT ";
const MPIRUN_DEADLINE: Duration = Duration::from_secs(300);

/// `tiga-bench partitioned`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// 100k rows and batches of 8k
    #[arg(long)]
    quick: bool,
    /// Table rows [default: 1000000, or 100000 with --quick]
    #[arg(long, value_name = "N", value_parser = crate::timing::positive)]
    rows: Option<usize>,
    /// Row width (f32 elements)
    #[arg(long, value_name = "D", default_value_t = 128, value_parser = crate::timing::positive)]
    dim: usize,
    /// Indices per gather (per rank) and per step (in all) [default: 65536, or 8192 with --quick]
    #[arg(long, value_name = "B", value_parser = crate::timing::positive)]
    batch: Option<usize>,
    /// Rank counts, comma-separated
    #[arg(long, value_name = "LIST", default_value = "1,2,4", value_parser = parse_ranks)]
    ranks: RankList,
    /// Timed gathers or steps per configuration
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = crate::timing::positive)]
    repeat: usize,
    /// Untimed ones before them
    #[arg(long, value_name = "N", default_value_t = 2)]
    warmup: usize,
    /// The node cache's share of the rows
    #[arg(long, value_name = "R", default_value_t = 0.25)]
    cache_ratio: f64,
    /// Optimizers to time, comma-separated
    #[arg(long, value_name = "LIST", default_value = "sgd,adagrad,rmsprop,lazy_adam")]
    optimizers: String,
    /// Index and gradient seed
    #[arg(long, value_name = "N", default_value_t = 7)]
    seed: u64,
    /// Skip the mpirun configurations
    #[arg(long)]
    no_mpi: bool,
    /// The MPI launcher
    #[arg(long, value_name = "PATH", default_value = "mpirun")]
    mpirun: PathBuf,
    /// Where the JSON goes, written atomically
    #[arg(long, value_name = "PATH", default_value = "target/bench/partitioned.json")]
    json: PathBuf,
    /// Where the table goes, written atomically
    #[arg(long, value_name = "PATH", default_value = "target/bench/partitioned.txt")]
    table: PathBuf,
    /// (Internal) run as one rank of an mpirun job: gather or step
    #[arg(long, value_name = "WHAT", hide = true)]
    mpi_worker: Option<String>,
    /// (Internal) the worker's memory type
    #[arg(long, value_name = "M", hide = true, default_value = "distributed")]
    memory: String,
    /// (Internal) the worker's cache: none or local_node
    #[arg(long, value_name = "C", hide = true, default_value = "none")]
    cache: String,
    /// (Internal) the worker's optimizer
    #[arg(long, value_name = "O", hide = true, default_value = "sgd")]
    optimizer: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RankList(Vec<usize>);

fn parse_ranks(s: &str) -> Result<RankList, String> {
    let v: Result<Vec<usize>, String> = s.split(',').map(crate::timing::positive).collect();
    v.map(RankList)
}

/// The sizes every process of a run agrees on.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    rows: usize,
    dim: usize,
    batch: usize,
    repeat: usize,
    warmup: usize,
    ratio: f64,
    seed: u64,
}

impl Sizes {
    fn from(a: &Args) -> Sizes {
        Sizes {
            rows: a.rows.unwrap_or(if a.quick { 100_000 } else { 1_000_000 }),
            dim: a.dim,
            batch: a.batch.unwrap_or(if a.quick { 8192 } else { 65536 }),
            repeat: a.repeat,
            warmup: a.warmup,
            ratio: a.cache_ratio,
            seed: a.seed,
        }
    }

    /// The flags that give a worker these sizes.
    fn flags(&self) -> Vec<String> {
        let pairs = [
            ("--rows", self.rows.to_string()),
            ("--dim", self.dim.to_string()),
            ("--batch", self.batch.to_string()),
            ("--repeat", self.repeat.to_string()),
            ("--warmup", self.warmup.to_string()),
            ("--cache-ratio", self.ratio.to_string()),
            ("--seed", self.seed.to_string()),
        ];
        let mut f: Vec<String> = pairs.into_iter().flat_map(|(k, v)| [k.to_string(), v]).collect();
        f.push("--no-mpi".into());
        f
    }
}

/// The value of element `j` of row `i` (what the table is filled with and
/// gathers are checked against).
fn value(i: usize, j: usize) -> f32 {
    ((i * 31 + j * 7) % 8191) as f32
}

/// Repeat `k`'s skewed indices for rank `r`.
fn indices(s: &Sizes, r: usize, k: usize) -> Vec<i64> {
    let mut rng = crate::graphs::SplitMix::stream(s.seed ^ ((r as u64) << 32), k as u64);
    (0..s.batch)
        .map(|_| {
            let u = rng.unit();
            ((s.rows as f64 * u * u) as usize).min(s.rows - 1) as i64
        })
        .collect()
}

/// A rank's numbers from one configuration.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct RankNumbers {
    /// Rank 0: the job's time of each timed call, ms.
    times_ms: Vec<f64>,
    hits: u64,
    misses: u64,
    /// Rows that differed from the table's values (gathers).
    wrong_rows: usize,
}

fn options(memory: MemoryType, cached: bool, ratio: f64) -> Options {
    let cache = if cached { CachePolicy::LocalNode { ratio, mode: CacheMode::ReadOnly } } else { CachePolicy::None };
    Options { cache, ..Options::memory(memory) }
}

/// Time `f` from a barrier to a barrier (rank 0's clock), `warmup`
/// untimed and `repeat` timed calls (`f` gets the call's number).
fn timed(comm: &dyn Communicator, s: &Sizes, mut f: impl FnMut(usize) -> Result<(), String>) -> Result<Vec<f64>, String> {
    let mut times = Vec::with_capacity(s.repeat);
    for k in 0..s.warmup + s.repeat {
        comm.barrier().map_err(|e| e.to_string())?;
        let t = Instant::now();
        f(k)?;
        comm.barrier().map_err(|e| e.to_string())?;
        if k >= s.warmup {
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    Ok(times)
}

/// One rank's part of a gather configuration.
fn gather_rank(comm: &dyn Communicator, memory: MemoryType, cached: bool, s: &Sizes) -> Result<RankNumbers, String> {
    let t = PartitionedTensor::new(comm, ElementType::F32, &[s.rows, s.dim], &options(memory, cached, s.ratio))
        .map_err(|e| e.to_string())?;
    let start = t.local_rows().start;
    t.with_local_mut::<f32, _>(|mut v| {
        for i in 0..v.rows() {
            for (j, x) in v.row_mut(i).iter_mut().enumerate() {
                *x = value(start + i, j);
            }
        }
    })
    .map_err(|e| e.to_string())?;
    let mut out = vec![0.0f32; s.batch * s.dim];
    let mut wrong_rows = 0;
    // Drawn before the clock starts.
    let all: Vec<Vec<i64>> = (0..s.warmup + s.repeat).map(|k| indices(s, comm.rank(), k)).collect();
    let times = timed(comm, s, |k| {
        let idx = &all[k];
        t.gather_into(idx, &mut out).map_err(|e| e.to_string())?;
        if k == 0 {
            wrong_rows = idx
                .iter()
                .enumerate()
                .filter(|&(p, &i)| out[p * s.dim..(p + 1) * s.dim].iter().enumerate().any(|(j, &x)| x != value(i as usize, j)))
                .count();
        }
        Ok(())
    })?;
    let stats = t.cache_stats().unwrap_or_default();
    Ok(RankNumbers { times_ms: times, hits: stats.hits, misses: stats.misses, wrong_rows })
}

/// One rank's part of a step configuration.
fn step_rank(comm: &dyn Communicator, memory: MemoryType, opt: Optimizer, s: &Sizes) -> Result<RankNumbers, String> {
    let mut e = Embedding::<f32>::new(comm, s.rows, s.dim, &Options::memory(memory), opt).map_err(|e| e.to_string())?;
    let block = owned_range(s.batch, comm.size(), comm.rank());
    let grads: Vec<f32> = (0..block.len() * s.dim).map(|k| ((k % 97) as f32 - 48.0) * 1e-3).collect();
    let all: Vec<Vec<i64>> = (0..s.warmup + s.repeat).map(|k| indices(s, 0, k)).collect();
    let times = timed(comm, s, |k| {
        e.accumulate(&all[k][block.clone()], &grads).map_err(|e| e.to_string())?;
        e.step(0.01).map(|_| ()).map_err(|e| e.to_string())
    })?;
    Ok(RankNumbers { times_ms: times, ..RankNumbers::default() })
}

/// The hosts of an in-process world of `r` ranks for `memory` (hierarchy:
/// two simulated nodes when there are at least two ranks).
fn hosts(memory: MemoryType, r: usize) -> Vec<usize> {
    if memory == MemoryType::Hierarchy && r >= 2 && r.is_multiple_of(2) {
        (0..r).map(|i| i / (r / 2)).collect()
    } else {
        vec![0; r]
    }
}

/// What one configuration is.
#[derive(Debug, Clone)]
struct Config {
    what: &'static str,
    engine: &'static str,
    ranks: usize,
    memory: MemoryType,
    cached: bool,
    optimizer: Option<Optimizer>,
}

impl Config {
    fn run_in_process(&self, s: &Sizes) -> Result<Vec<RankNumbers>, String> {
        let res = InProcess::run_on_hosts(&hosts(self.memory, self.ranks), |c| match self.optimizer {
            None => gather_rank(&c, self.memory, self.cached, s),
            Some(o) => step_rank(&c, self.memory, o, s),
        });
        res.into_iter()
            .enumerate()
            .map(|(r, x)| x.map_err(|e| format!("rank {r}: {e}")).and_then(|x| x.map_err(|e| format!("rank {r}: {e}"))))
            .collect()
    }

    fn run_mpi(&self, a: &Args, s: &Sizes) -> Result<Option<Vec<RankNumbers>>, String> {
        let mut args: Vec<String> = vec![
            "partitioned".into(),
            "--mpi-worker".into(),
            self.what.into(),
            "--memory".into(),
            self.memory.name().into(),
            "--cache".into(),
            (if self.cached { "local_node" } else { "none" }).into(),
        ];
        if let Some(o) = self.optimizer {
            args.extend(["--optimizer".into(), o.name().into()]);
        }
        args.extend(s.flags());
        let per_node = hosts(self.memory, self.ranks).iter().filter(|&&h| h == 0).count();
        let env = [("TIGA_RANKS_PER_NODE", per_node.to_string())];
        match crate::mpirun::run(&a.mpirun, self.ranks, &args, &env, RESULT_TAG, MPIRUN_DEADLINE)? {
            crate::mpirun::Job::Ran(line) => serde_json::from_str(&line).map(Some).map_err(|e| format!("the ranks' result: {e}")),
            crate::mpirun::Job::Absent(_) => Ok(None),
        }
    }
}

/// A rank of an mpirun job: run the configuration, print every rank's
/// numbers at rank 0. On an error the rank exits at once, so mpirun ends
/// the job.
fn worker(a: &Args, what: &str) -> ExitCode {
    #[cfg(feature = "mpi")]
    {
        let r = (|| -> Result<Option<String>, String> {
            let s = Sizes::from(a);
            let memory = MemoryType::parse(&a.memory).ok_or_else(|| format!("unknown memory type {}", a.memory))?;
            let world = tiga::runtime::comm::Mpi::init().map_err(|e| format!("MPI: {e}"))?;
            let mine = match what {
                "gather" => gather_rank(&world, memory, a.cache == "local_node", &s)?,
                _ => step_rank(&world, memory, Optimizer::parse(&a.optimizer).ok_or("unknown optimizer")?, &s)?,
            };
            let all =
                world.all_gather_bytes(&serde_json::to_vec(&mine).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
            if world.rank() != 0 {
                return Ok(None);
            }
            let ranks: Vec<RankNumbers> =
                all.iter().map(|b| serde_json::from_slice(b)).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
            serde_json::to_string(&ranks).map(Some).map_err(|e| e.to_string())
        })();
        crate::mpirun::finish_worker("tiga-bench partitioned", RESULT_TAG, r)
    }
    #[cfg(not(feature = "mpi"))]
    {
        let _ = a;
        eprintln!("tiga-bench partitioned --mpi-worker {what}: this binary was built without --features mpi");
        ExitCode::FAILURE
    }
}

/// A row of the result.
struct Row {
    config: Config,
    job_ms: Option<f64>,
    hits: u64,
    misses: u64,
    wrong_rows: usize,
    note: Option<String>,
}

/// One thread copying each repeat's rows of rank 0 out of a plain array.
fn memcpy_ms(s: &Sizes) -> f64 {
    let table: Vec<f32> = (0..s.rows * s.dim).map(|k| value(k / s.dim, k % s.dim)).collect();
    let mut out = vec![0.0f32; s.batch * s.dim];
    let mut times = Vec::new();
    for k in 0..s.warmup + s.repeat {
        let idx = indices(s, 0, k);
        let t = Instant::now();
        for (o, &i) in out.chunks_exact_mut(s.dim).zip(&idx) {
            o.copy_from_slice(&table[i as usize * s.dim..(i as usize + 1) * s.dim]);
        }
        std::hint::black_box(&out);
        if k >= s.warmup {
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    crate::timing::median(times)
}

/// Entry point of `tiga-bench partitioned ARGS...` (and of its workers).
pub fn main(a: &Args) -> ExitCode {
    if let Some(what) = &a.mpi_worker {
        return worker(a, what);
    }
    let s = Sizes::from(a);
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let started = Instant::now();
    let mut configs = Vec::new();
    for engine in ["in-process", "mpirun"] {
        if engine == "mpirun" && (a.no_mpi || !cfg!(feature = "mpi")) {
            continue;
        }
        for &r in &a.ranks.0 {
            for memory in MemoryType::ALL {
                for cached in [false, true] {
                    if cached && !matches!(memory, MemoryType::Distributed | MemoryType::Hierarchy) {
                        continue;
                    }
                    configs.push(Config { what: "gather", engine, ranks: r, memory, cached, optimizer: None });
                }
            }
        }
        for name in a.optimizers.split(',').filter(|n| !n.is_empty()) {
            let Some(o) = Optimizer::parse(name) else {
                eprintln!("tiga-bench partitioned: unknown optimizer {name}");
                return ExitCode::FAILURE;
            };
            for &r in &a.ranks.0 {
                configs.push(Config {
                    what: "step",
                    engine,
                    ranks: r,
                    memory: MemoryType::Distributed,
                    cached: false,
                    optimizer: Some(o),
                });
            }
        }
    }
    let memcpy = memcpy_ms(&s);
    let mut rows = Vec::new();
    for c in configs {
        eprintln!(
            "tiga-bench partitioned: {} {} on {} rank(s), {}{}",
            c.what,
            c.engine,
            c.ranks,
            c.memory.name(),
            if c.cached { " + cache" } else { "" }
        );
        let got = if c.engine == "in-process" { c.run_in_process(&s).map(Some) } else { c.run_mpi(a, &s) };
        let row = match got {
            Ok(Some(ranks)) => Row {
                job_ms: Some(crate::timing::median(ranks[0].times_ms.clone())),
                hits: ranks.iter().map(|r| r.hits).sum(),
                misses: ranks.iter().map(|r| r.misses).sum(),
                wrong_rows: ranks.iter().map(|r| r.wrong_rows).sum(),
                note: None,
                config: c,
            },
            Ok(None) => Row { job_ms: None, hits: 0, misses: 0, wrong_rows: 0, note: Some("mpirun absent".into()), config: c },
            Err(e) => Row { job_ms: None, hits: 0, misses: 0, wrong_rows: 0, note: Some(e), config: c },
        };
        rows.push(row);
    }
    let load_after = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let row_bytes = (s.dim * 4) as f64;
    let mut table = format!(
        "partitioned tensors: a {} x {} f32 table ({:.0} MB); gathers of {} skewed rows per rank; steps of {} rows in all\n\
         {} timed after {} warm-up, medians; job time = rank 0 from barrier to barrier; load average {} at the start, {} at the end; {:.0} s in all\n\n",
        s.rows,
        s.dim,
        s.rows as f64 * row_bytes / 1e6,
        s.batch,
        s.batch,
        s.repeat,
        s.warmup,
        load_before.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        load_after.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        started.elapsed().as_secs_f64()
    );
    table.push_str(&format!(
        "{:<10} {:<11} {:>5} {:<12} {:>6} {:>10} {:>12} {:>8} {:>9} {:>8}  {}\n",
        "what", "engine", "ranks", "memory", "cache", "ms", "rows/s", "GB/s", "x memcpy", "hit %", "checked"
    ));
    let memcpy_rate = s.batch as f64 / (memcpy / 1e3);
    table.push_str(&format!(
        "{:<10} {:<11} {:>5} {:<12} {:>6} {:>10.3} {:>12.3e} {:>8.2} {:>9} {:>8}  {}\n",
        "memcpy",
        "1 thread",
        1,
        "plain array",
        "-",
        memcpy,
        memcpy_rate,
        memcpy_rate * row_bytes / 1e9,
        "1.00",
        "-",
        "-"
    ));
    let mut json_rows = Vec::new();
    let mut failed = false;
    for r in &rows {
        let c = &r.config;
        let label = match c.optimizer {
            Some(o) => o.name().to_string(),
            None => "gather".into(),
        };
        let total_rows = if c.optimizer.is_some() { s.batch } else { s.batch * c.ranks };
        let rate = r.job_ms.map(|ms| total_rows as f64 / (ms / 1e3));
        let hit = (r.hits + r.misses > 0).then(|| 100.0 * r.hits as f64 / (r.hits + r.misses) as f64);
        failed |= r.wrong_rows > 0 || (r.note.is_some() && r.note.as_deref() != Some("mpirun absent"));
        let fmt = |x: Option<f64>, p: usize| x.map_or("-".to_string(), |v| format!("{v:.p$}"));
        table.push_str(&format!(
            "{:<10} {:<11} {:>5} {:<12} {:>6} {:>10} {:>12} {:>8} {:>9} {:>8}  {}\n",
            label,
            c.engine,
            c.ranks,
            c.memory.name(),
            if c.cached { "node" } else { "none" },
            fmt(r.job_ms, 3),
            rate.map_or("-".into(), |v| format!("{v:.3e}")),
            if c.optimizer.is_some() { "-".into() } else { fmt(rate.map(|v| v * row_bytes / 1e9), 2) },
            if c.optimizer.is_some() { "-".into() } else { fmt(r.job_ms.map(|ms| memcpy / ms * c.ranks as f64), 2) },
            fmt(hit, 1),
            match (&r.note, c.optimizer) {
                (Some(n), _) => n.clone(),
                (None, None) if r.wrong_rows == 0 => "exact".into(),
                (None, None) => format!("{} wrong rows", r.wrong_rows),
                (None, Some(_)) => "-".into(),
            }
        ));
        json_rows.push(json!({
            "what": label, "engine": c.engine, "ranks": c.ranks, "memory": c.memory.name(), "cache": c.cached,
            "job_ms": r.job_ms, "rows_per_s": rate, "gb_per_s": if c.optimizer.is_some() { None } else { rate.map(|v| v * row_bytes / 1e9) },
            "hits": r.hits, "misses": r.misses, "wrong_rows": r.wrong_rows, "note": r.note,
        }));
    }
    table.push_str(
        "\nx memcpy: the job's rows/s over the memcpy's (one thread copying rank 0's rows of a plain array); \
         gathers of R ranks move R times the rows.\n",
    );
    let doc = json!({
        "bench": "partitioned", "rows": s.rows, "dim": s.dim, "batch": s.batch, "repeat": s.repeat, "warmup": s.warmup,
        "cache_ratio": s.ratio, "memcpy_ms": memcpy, "load_before": load_before.trim(), "load_after": load_after.trim(),
        "configs": json_rows,
    });
    print!("{table}");
    let text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    for (path, body) in [(&a.json, format!("{text}\n")), (&a.table, table)] {
        if let Err(e) = crate::report::write_atomic(path, &body) {
            eprintln!("tiga-bench partitioned: {e}");
            failed = true;
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
