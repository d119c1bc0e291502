//! `tiga-bench sharded`: halo-sharded execution against one process, side
//! by side in one run, on two ranks.
//!
//! Cases (graphs from `graphs.rs`, kernels from `examples/kernels/gnn.rs`
//! through `#[message_passing]`, `Backend::Auto`):
//! - `stencil`: Jacobi smoothing (`Smoothing`, f32, scalar) on a 2000×2000
//!   four-neighbour grid as CSR; each step's output is the next step's `x`;
//! - `powerlaw-sum`: `VecSum` at F = 64 on a power-law graph (250k nodes,
//!   4M edges by default: the main benchmark's law at a size two cores
//!   run in minutes); every step reads the same `h`.
//!
//! Configurations:
//! - one process, `Schedule::threads(2)` (the reference: its last output
//!   is what every rank's rows must equal, bit for bit);
//! - two ranks × one thread in this process (`InProcess::run`), each rank
//!   on a one-thread rayon pool of its own with `Schedule::threads(1)`;
//! - on the stencil, the same with `Schedule::threads(1)` alone, no pool
//!   installed: the runtime runs a one-thread schedule on the calling
//!   thread, so each rank computes on its own thread;
//! - two ranks × one thread under `mpirun -n 2` (built with `--features
//!   mpi`): this binary re-launched as `tiga-bench sharded --mpi-worker
//!   CASE ...`; each rank builds the graph itself, runs, checks its rows
//!   against the reference (a `.npy` the parent wrote) and rank 0 prints
//!   one `SHARDED_RESULT` JSON line with every rank's numbers; without
//!   mpirun on the PATH the table says so;
//! - on the power-law graph, contiguous blocks against METIS
//!   (`--features metis`), in-process and under mpirun, with the edge cut
//!   of each partition (`shard::edge_cut`, checked against the ranks' own
//!   count of edges that read a ghost).
//!
//! The configurations take turns, once per round (`--rounds`, 3), as the
//! main benchmark's contenders do: this machine's speed drifts over
//! minutes. Each turn sets up afresh (`Sharded::from_graph`, or a new
//! mpirun job), runs `--warmup` untimed and `--steps` timed steps, then,
//! per rank, `--exchanges` bare exchanges (`start_halo` then `finish` at
//! once, nothing to overlap) and the kernel alone over the rank's local
//! CSR with its ghosts filled (what a step would cost without the sharded
//! call's own copies and exchange). A barrier precedes every timed call,
//! so the ranks start each together; a job's time is its slowest rank's,
//! and every figure is a median over all rounds.
//!
//! Per configuration and rank: ghost rows, rows sent, bytes sent per step
//! (`Sharded::stats`), the exchange's time per step (start to ghosts
//! written, `total_ms`, interior rows included) and the part of it the
//! rank was blocked (`wait_ms`), the bare exchange's time, the hidden
//! share 1 − (wait per step) / (bare exchange), and the time per step.
//!
//! Targets (reported, not asserted): bytes per exchange = ghost rows × row
//! bytes + a 16-byte header per peer; hidden share ≥ 0.5 on the stencil;
//! two ranks × one thread within 1.2× of one process × two threads on the
//! stencil; METIS below contiguous in edge cut and bytes on the power-law
//! graph. A rank whose rows differ from the reference is an error: the run
//! exits non-zero after writing its table and JSON (atomically).
//!
//! mpirun as root in a container needs `OMPI_ALLOW_RUN_AS_ROOT=1
//! OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1` and, without CMA,
//! `OMPI_MCA_btl_vader_single_copy_mechanism=none` (as `.ci/feature-suite`
//! sets); the workers inherit the environment.
//!
//! ```sh
//! cargo run --release -p tiga-bench --features mpi,metis -- sharded [--quick] [--json PATH] [--table PATH]
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::timing::median;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tiga::runtime::shard::{edge_cut, partitions, take_rows, take_rows_padded, HEADER_BYTES};
use tiga::{Communicator, Graph, InProcess, Inputs, Kernel, PartitionChoice, Schedule, ShardOptions, Sharded, Tensor};

/// Ranks of every sharded configuration.
const RANKS: usize = 2;
/// Where a worker's result line starts.
const RESULT_TAG: &str = "SHARDED_RESULT ";
/// How long one mpirun job may take before it is stopped.
const MPIRUN_DEADLINE: Duration = Duration::from_secs(150);
const HIDDEN_TARGET: f64 = 0.5;
const TIME_TARGET: f64 = 1.2;

/// `tiga-bench sharded`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Smaller graphs (a 500x500 stencil, 31,250 nodes and 500k edges)
    #[arg(long)]
    quick: bool,
    /// The stencil's side [default: 2000, or 500 with --quick]
    #[arg(long, value_name = "N", value_parser = crate::timing::positive)]
    side: Option<usize>,
    /// Power-law nodes [default: 250000, or 31250 with --quick]
    #[arg(long, value_name = "N", value_parser = crate::timing::positive)]
    nodes: Option<usize>,
    /// Power-law edges [default: 4000000, or 500000 with --quick]
    #[arg(long, value_name = "N", value_parser = crate::timing::positive)]
    edges: Option<usize>,
    /// Feature width of the power-law sum
    #[arg(long, value_name = "F", default_value_t = 64, value_parser = crate::timing::positive)]
    width: usize,
    /// Rounds: every configuration runs once per round, in turn
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = crate::timing::positive)]
    rounds: usize,
    /// Timed steps per configuration and round (the median over all is reported)
    #[arg(long, value_name = "N", default_value_t = 7, value_parser = crate::timing::positive)]
    steps: usize,
    /// Untimed steps before them, in every round
    #[arg(long, value_name = "N", default_value_t = 3)]
    warmup: usize,
    /// Timed bare exchanges per rank and round (after --warmup untimed ones)
    #[arg(long, value_name = "N", default_value_t = 7, value_parser = crate::timing::positive)]
    exchanges: usize,
    /// Graph and field seed
    #[arg(long, value_name = "N", default_value_t = 7)]
    seed: u64,
    /// Skip the mpirun configurations
    #[arg(long)]
    no_mpi: bool,
    /// The MPI launcher
    #[arg(long, value_name = "PATH", default_value = "mpirun")]
    mpirun: PathBuf,
    /// Where the JSON goes, written atomically
    #[arg(long, value_name = "PATH", default_value = "target/bench/sharded.json")]
    json: PathBuf,
    /// Where the table goes, written atomically
    #[arg(long, value_name = "PATH", default_value = "target/bench/sharded.txt")]
    table: PathBuf,
    /// (Internal) run as one rank of an mpirun job on this case
    #[arg(long, value_name = "CASE", hide = true, requires = "reference", value_parser = CaseKind::parse)]
    mpi_worker: Option<CaseKind>,
    /// (Internal) the worker's partition: contiguous or metis
    #[arg(long, value_name = "P", hide = true, default_value = "contiguous", value_parser = Part::parse)]
    partition: Part,
    /// (Internal) the one-process output the worker checks its rows against
    #[arg(long, value_name = "PATH", hide = true)]
    reference: Option<PathBuf>,
}

/// The sizes and counts every process of a run agrees on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sizes {
    pub(crate) side: usize,
    pub(crate) nodes: usize,
    pub(crate) edges: usize,
    pub(crate) width: usize,
    pub(crate) steps: usize,
    pub(crate) warmup: usize,
    pub(crate) exchanges: usize,
    pub(crate) seed: u64,
}

impl From<&Args> for Sizes {
    fn from(a: &Args) -> Sizes {
        Sizes {
            side: a.side.unwrap_or(if a.quick { 500 } else { 2000 }),
            nodes: a.nodes.unwrap_or(if a.quick { 31_250 } else { 250_000 }),
            edges: a.edges.unwrap_or(if a.quick { 500_000 } else { 4_000_000 }),
            width: a.width,
            steps: a.steps,
            warmup: a.warmup,
            exchanges: a.exchanges,
            seed: a.seed,
        }
    }
}

impl Sizes {
    /// The flags that give these sizes (what a worker is launched with).
    fn flags(&self) -> Vec<String> {
        let mut v = Vec::new();
        for (k, x) in [
            ("--side", self.side as u64),
            ("--nodes", self.nodes as u64),
            ("--edges", self.edges as u64),
            ("--width", self.width as u64),
            ("--steps", self.steps as u64),
            ("--warmup", self.warmup as u64),
            ("--exchanges", self.exchanges as u64),
            ("--seed", self.seed),
        ] {
            v.push(k.to_string());
            v.push(x.to_string());
        }
        v
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CaseKind {
    Stencil,
    PowerLaw,
}

impl CaseKind {
    fn name(self) -> &'static str {
        match self {
            CaseKind::Stencil => "stencil",
            CaseKind::PowerLaw => "powerlaw-sum",
        }
    }
    fn parse(s: &str) -> Result<CaseKind, String> {
        [CaseKind::Stencil, CaseKind::PowerLaw]
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| format!("unknown case `{s}` (stencil, powerlaw-sum)"))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Contiguous,
    Metis,
}

impl Part {
    fn name(self) -> &'static str {
        match self {
            Part::Contiguous => "contiguous",
            Part::Metis => "metis",
        }
    }
    fn parse(s: &str) -> Result<Part, String> {
        [Part::Contiguous, Part::Metis]
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown partition `{s}` (contiguous, metis)"))
    }
    fn choice(self) -> PartitionChoice {
        match self {
            Part::Contiguous => PartitionChoice::Contiguous,
            Part::Metis => PartitionChoice::Metis,
        }
    }
    /// Why this partition cannot run in this build, if it cannot.
    fn unavailable(self) -> Option<String> {
        (self == Part::Metis && !cfg!(feature = "metis")).then(|| "not built with --features metis".to_string())
    }
}

/// How a configuration runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    /// One process, `Schedule::threads(2)`.
    OneProcess,
    /// Two in-process ranks, each on a one-thread pool of its own.
    InProcess,
    /// Two in-process ranks with `Schedule::threads(1)` only (each runs on
    /// its own thread, the caller's).
    InProcessSharedPool,
    /// Two processes under mpirun.
    Mpi,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Config {
    engine: Engine,
    part: Part,
}

impl Config {
    fn label(&self) -> String {
        let part = if self.part == Part::Metis { ", METIS" } else { "" };
        match self.engine {
            Engine::OneProcess => "1 process x 2 threads".to_string(),
            Engine::InProcess => format!("2 ranks x 1 thread, in-process{part}"),
            Engine::InProcessSharedPool => format!("2 ranks x 1 thread, in-process, threads(1){part}"),
            Engine::Mpi => format!("2 ranks x 1 thread, mpirun{part}"),
        }
    }
    fn engine_key(&self) -> &'static str {
        match self.engine {
            Engine::OneProcess => "one_process",
            Engine::InProcess => "in_process",
            Engine::InProcessSharedPool => "in_process_shared_pool",
            Engine::Mpi => "mpirun",
        }
    }
    fn sharded(&self) -> bool {
        self.engine != Engine::OneProcess
    }
}

/// A case's graph, field and kernel.
struct CaseData {
    kind: CaseKind,
    graph: Graph,
    /// The source field over every node.
    x: Tensor,
    field: &'static str,
    width: usize,
    kernel: &'static Kernel,
    /// Each step's output is the next step's input (Jacobi).
    chained: bool,
    build_ms: f64,
}

impl CaseData {
    fn build(kind: CaseKind, s: &Sizes) -> Result<CaseData, String> {
        let t = Instant::now();
        let e = |e: &dyn std::fmt::Display| format!("{}: {e}", kind.name());
        let (graph, x, field, width, kernel, chained) = match kind {
            CaseKind::Stencil => {
                let g = crate::graphs::stencil(s.side).map_err(|x| e(&x))?;
                let n = g.num_src();
                let x = Tensor::from_f32(vec![n], crate::graphs::uniform(n, s.seed)).map_err(|x| e(&x))?;
                (g, x, "x", 1, crate::kernels::gnn::Smoothing::kernel(), true)
            }
            CaseKind::PowerLaw => {
                let g = crate::graphs::powerlaw(s.nodes, s.edges, s.seed).map_err(|x| e(&x))?;
                let n = g.num_src();
                let h = crate::graphs::uniform(n * s.width, s.seed + s.width as u64);
                let x = Tensor::from_f32(vec![n, s.width], h).map_err(|x| e(&x))?;
                (g, x, "h", s.width, crate::kernels::gnn::VecSum::kernel(), false)
            }
        };
        Ok(CaseData { kind, graph, x, field, width, kernel, chained, build_ms: ms_since(t) })
    }

    fn row_bytes(&self) -> usize {
        self.width * 4
    }

    fn describe(&self, s: &Sizes) -> String {
        let (g, n, m) = (&self.graph, self.graph.num_dst(), self.graph.num_edges());
        match self.kind {
            CaseKind::Stencil => format!(
                "{}: {}x{} four-neighbour grid as CSR ({n} nodes, {m} edges), Smoothing (f32, scalar), Jacobi: each step's output is the next x",
                self.kind.name(),
                s.side,
                s.side
            ),
            CaseKind::PowerLaw => format!(
                "{}: power-law graph ({} nodes, {m} edges, sources Zipf 1.1, seed {}), VecSum (f32, F = {}), the same h every step",
                self.kind.name(),
                g.num_src(),
                s.seed,
                self.width
            ),
        }
    }
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn first_output(o: tiga::Outputs) -> Result<Tensor, String> {
    o.items.into_iter().next().map(|(_, t)| t).ok_or_else(|| "the kernel returned no output".to_string())
}

/// Rows of `a` and `b` (f32, same shape) whose bits differ: how many, and
/// the first.
fn bit_mismatches(a: &Tensor, b: &Tensor) -> Result<(usize, Option<usize>), String> {
    if a.shape() != b.shape() {
        return Err(format!("output shape {:?}, reference rows {:?}", a.shape(), b.shape()));
    }
    let (Some(x), Some(y)) = (a.as_f32(), b.as_f32()) else { return Err("an output is not f32".into()) };
    let w: usize = a.shape().iter().skip(1).product::<usize>().max(1);
    let mut count = 0;
    let mut first = None;
    for (r, (p, q)) in x.chunks(w).zip(y.chunks(w)).enumerate() {
        if p.iter().zip(q).any(|(u, v)| u.to_bits() != v.to_bits()) {
            count += 1;
            first.get_or_insert(r);
        }
    }
    Ok((count, first))
}

/// One rank's measurements (the worker sends them to the parent as JSON).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RankStats {
    rank: usize,
    world: usize,
    /// The communicator's engine ("in-process", "MPI (Open MPI ...)").
    engine: String,
    /// `Sharded::from_graph` (checksum, partition, plan).
    setup_ms: f64,
    owned_rows: usize,
    /// Owned rows that read no ghost (they run while the ghosts travel).
    interior_rows: usize,
    ghost_rows: usize,
    sent_rows: usize,
    /// Owned edges whose source another rank owns.
    cut_edges: usize,
    row_bytes: usize,
    steps: usize,
    /// Over the timed steps.
    exchanges: u64,
    bytes_sent: u64,
    exchange_ms_total: f64,
    wait_ms_total: f64,
    /// Each bare exchange's wall time (start_halo + finish), and the part
    /// `Sharded::stats` counts as waiting.
    bare_ms: Vec<f64>,
    bare_wait_ms: Vec<f64>,
    bare_exchange_ms_total: f64,
    bare_wait_ms_total: f64,
    bare_bytes_sent: u64,
    step_ms: Vec<f64>,
    /// Each timed step's exchange time (`total_ms`) and waiting (`wait_ms`).
    step_exchange_ms: Vec<f64>,
    step_wait_ms: Vec<f64>,
    /// The kernel alone over the local CSR (`Kernel::run_with` on
    /// `LocalShard::graph`, ghosts filled), per timed run.
    kernel_ms: Vec<f64>,
    /// Rows of the last output whose bits differ from the reference's.
    mismatched_rows: usize,
    first_mismatch: Option<usize>,
}

impl RankStats {
    fn per_exchange(&self, total: f64) -> f64 {
        total / self.exchanges.max(1) as f64
    }
    fn bytes_per_step(&self) -> f64 {
        self.bytes_sent as f64 / self.steps.max(1) as f64
    }
    fn bytes_per_exchange(&self) -> f64 {
        self.bytes_sent as f64 / self.exchanges.max(1) as f64
    }
    /// What this rank must send per exchange: the rows its peers read as
    /// ghosts, and a header to every peer.
    fn expected_bytes(&self) -> u64 {
        (self.sent_rows * self.row_bytes + HEADER_BYTES * (self.world - 1)) as u64
    }
    /// The median step's exchange time (one exchange per step).
    fn exchange_ms(&self) -> f64 {
        median(self.step_exchange_ms.clone())
    }
    /// The median step's waiting.
    fn wait_ms(&self) -> f64 {
        median(self.step_wait_ms.clone())
    }
    fn bare_ms_median(&self) -> f64 {
        median(self.bare_ms.clone())
    }
    /// 1 − (wait per overlapped exchange) / (a bare exchange's time).
    fn hidden(&self) -> f64 {
        1.0 - self.wait_ms() / self.bare_ms_median()
    }
    fn step_ms_median(&self) -> f64 {
        median(self.step_ms.clone())
    }
    fn kernel_ms_median(&self) -> f64 {
        median(self.kernel_ms.clone())
    }
    /// Another round's numbers of the same rank (same plan) added to these.
    fn merge(&mut self, o: RankStats) -> Result<(), String> {
        let plan = |r: &RankStats| (r.rank, r.owned_rows, r.interior_rows, r.ghost_rows, r.sent_rows, r.cut_edges);
        if plan(self) != plan(&o) {
            return Err(format!("rank {}: the plan differs between rounds ({:?} and {:?})", self.rank, plan(self), plan(&o)));
        }
        self.setup_ms = self.setup_ms.max(o.setup_ms);
        self.steps += o.steps;
        self.exchanges += o.exchanges;
        self.bytes_sent += o.bytes_sent;
        self.exchange_ms_total += o.exchange_ms_total;
        self.wait_ms_total += o.wait_ms_total;
        self.bare_exchange_ms_total += o.bare_exchange_ms_total;
        self.bare_wait_ms_total += o.bare_wait_ms_total;
        self.bare_bytes_sent += o.bare_bytes_sent;
        self.bare_ms.extend(o.bare_ms);
        self.bare_wait_ms.extend(o.bare_wait_ms);
        self.step_ms.extend(o.step_ms);
        self.step_exchange_ms.extend(o.step_exchange_ms);
        self.step_wait_ms.extend(o.step_wait_ms);
        self.kernel_ms.extend(o.kernel_ms);
        self.mismatched_rows = self.mismatched_rows.max(o.mismatched_rows);
        self.first_mismatch = self.first_mismatch.or(o.first_mismatch);
        Ok(())
    }

    fn bytes_match(&self) -> bool {
        self.exchanges == self.steps as u64 && self.bytes_sent == self.expected_bytes() * self.exchanges
    }
}

/// One rank's run of a case: setup, `warmup` + `steps` kernel calls over
/// the sharded graph (overlapped: interior rows run while the ghosts
/// travel), then bare exchanges, then its last output against the
/// reference's rows.
fn measure_rank(
    case: &CaseData,
    comm: Arc<dyn Communicator>,
    part: Part,
    s: &Sizes,
    reference: &Tensor,
) -> Result<RankStats, String> {
    let t = Instant::now();
    let opts = ShardOptions { partition: part.choice(), depth: 1 };
    let sh = Sharded::from_graph(&case.graph, comm.clone(), &opts).map_err(|e| format!("Sharded::from_graph: {e}"))?;
    let setup_ms = ms_since(t);
    if sh.owned_src() != sh.owned_dst() {
        return Err("a square graph's owned sources and rows differ: outputs cannot feed back as inputs".into());
    }
    let l = sh.local();
    let x = take_rows(case.x.data(), case.x.shape(), sh.owned_src().iter().map(|&u| u as usize)).map_err(|e| e.to_string())?;
    let schedule = Schedule::new().threads(1);
    let barrier = || comm.barrier().map_err(|e| format!("barrier: {e}"));
    let mut step_ms = Vec::with_capacity(s.steps);
    let mut step_exchange_ms = Vec::with_capacity(s.steps);
    let mut step_wait_ms = Vec::with_capacity(s.steps);
    let mut last: Option<Tensor> = None;
    for i in 0..s.warmup + s.steps {
        if i == s.warmup {
            sh.reset_stats();
        }
        let input = if case.chained { last.as_ref().unwrap_or(&x) } else { &x };
        let ins = Inputs::new().src(case.field, input);
        barrier()?;
        let before = sh.stats();
        let t = Instant::now();
        let out = case.kernel.run_with(&sh, &ins, &schedule).map_err(|e| format!("sharded step {i}: {e}"))?;
        let ms = ms_since(t);
        let after = sh.stats();
        if i >= s.warmup {
            step_ms.push(ms);
            step_exchange_ms.push(after.total_ms - before.total_ms);
            step_wait_ms.push(after.wait_ms - before.wait_ms);
        }
        // The previous output is dropped here, outside the clock.
        last = Some(first_output(out)?);
    }
    let overlapped = sh.stats();

    // Bare exchanges: the same field, nothing to overlap.
    let ghosts = l.slots.len() - l.owned_slots;
    let mut fields = vec![take_rows_padded(x.data(), x.shape(), 0..x.shape()[0], ghosts).map_err(|e| e.to_string())?];
    let mut bare_ms = Vec::with_capacity(s.exchanges);
    let mut bare_wait_ms = Vec::with_capacity(s.exchanges);
    for i in 0..s.warmup + s.exchanges {
        if i == s.warmup {
            sh.reset_stats();
        }
        barrier()?;
        let before = sh.stats();
        let t = Instant::now();
        let halo = sh.start_halo(&[&fields[0]]).map_err(|e| format!("bare exchange: {e}"))?;
        halo.finish(&sh, &mut fields).map_err(|e| format!("bare exchange: {e}"))?;
        if i >= s.warmup {
            bare_ms.push(ms_since(t));
            bare_wait_ms.push(sh.stats().wait_ms - before.wait_ms);
        }
    }
    let bare = sh.stats();

    // The kernel alone over this rank's local CSR, its ghosts filled: what
    // a step costs without the sharded call's own work (copies into slots,
    // the exchange, outputs put in owned order).
    let mut kernel_ms = Vec::with_capacity(s.steps);
    let local_graph = l.graph.as_ref().ok_or("the local rows are not in memory")?;
    let local_ins = Inputs::new().src(case.field, &fields[0]);
    for i in 0..s.warmup + s.steps {
        barrier()?;
        let t = Instant::now();
        let out = case.kernel.run_with(local_graph, &local_ins, &schedule).map_err(|e| format!("local kernel: {e}"))?;
        let ms = ms_since(t);
        drop(out);
        if i >= s.warmup {
            kernel_ms.push(ms);
        }
    }

    let want =
        take_rows(reference.data(), reference.shape(), sh.owned_dst().iter().map(|&u| u as usize)).map_err(|e| e.to_string())?;
    let got = last.ok_or("no step ran")?;
    let (mismatched_rows, first_mismatch) = bit_mismatches(&got, &want)?;
    let owned_edges = local_graph.offsets()[l.owned_rows] as usize;
    let cut_edges = local_graph.cols()[..owned_edges].iter().filter(|&&c| c as usize >= l.owned_slots).count();
    Ok(RankStats {
        rank: sh.rank(),
        world: sh.world(),
        engine: comm.engine(),
        setup_ms,
        owned_rows: l.owned_rows,
        interior_rows: l.interior.iter().map(|r| r.len()).sum(),
        ghost_rows: sh.plan().ghost_rows(),
        sent_rows: sh.plan().sent_rows(),
        cut_edges,
        row_bytes: case.row_bytes(),
        steps: s.steps,
        exchanges: overlapped.exchanges,
        bytes_sent: overlapped.bytes_sent,
        exchange_ms_total: overlapped.total_ms,
        wait_ms_total: overlapped.wait_ms,
        bare_ms,
        bare_wait_ms,
        bare_exchange_ms_total: bare.total_ms,
        bare_wait_ms_total: bare.wait_ms,
        bare_bytes_sent: bare.bytes_sent,
        step_ms,
        step_exchange_ms,
        step_wait_ms,
        kernel_ms,
        mismatched_rows,
        first_mismatch: first_mismatch.map(|r| sh.owned_dst()[r] as usize),
    })
}

/// One process, two threads: the times per step and the last output.
fn one_process(case: &CaseData, s: &Sizes) -> Result<(Vec<f64>, Tensor), String> {
    let schedule = Schedule::new().threads(2);
    let mut times = Vec::with_capacity(s.steps);
    let mut last: Option<Tensor> = None;
    for i in 0..s.warmup + s.steps {
        let input = if case.chained { last.as_ref().unwrap_or(&case.x) } else { &case.x };
        let ins = Inputs::new().src(case.field, input);
        let t = Instant::now();
        let out = case.kernel.run_with(&case.graph, &ins, &schedule).map_err(|e| format!("one process, step {i}: {e}"))?;
        let ms = ms_since(t);
        if i >= s.warmup {
            times.push(ms);
        }
        last = Some(first_output(out)?);
    }
    Ok((times, last.ok_or("no step ran")?))
}

/// Two ranks as threads of this process; with `own_pools`, each rank runs
/// on a one-thread rayon pool of its own, else with `Schedule::threads(1)`
/// alone (which the runtime runs on the calling thread).
fn in_process(case: &CaseData, part: Part, s: &Sizes, reference: &Tensor, own_pools: bool) -> Result<Vec<RankStats>, String> {
    let results = InProcess::run(RANKS, |c| {
        let comm: Arc<dyn Communicator> = Arc::new(c);
        if !own_pools {
            return measure_rank(case, comm, part, s, reference);
        }
        let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().map_err(|e| format!("a rank's pool: {e}"))?;
        pool.install(|| measure_rank(case, comm, part, s, reference))
    });
    let mut ranks = Vec::with_capacity(RANKS);
    for (r, res) in results.into_iter().enumerate() {
        ranks.push(res.map_err(|e| format!("rank {r}: {e}"))?.map_err(|e| format!("rank {r}: {e}"))?);
    }
    Ok(ranks)
}

/// What an mpirun configuration gave.
enum MpiOutcome {
    Ran(Vec<RankStats>),
    /// Not run, and why (not built with the feature, no mpirun).
    Absent(String),
}

/// Run a case on two ranks under mpirun (see the module doc).
fn under_mpirun(o: &Opts, kind: CaseKind, part: Part, reference: &Path) -> Result<MpiOutcome, String> {
    if let Some(why) = part.unavailable().filter(|_| cfg!(feature = "mpi")) {
        return Ok(MpiOutcome::Absent(why));
    }
    let mut args: Vec<String> =
        ["sharded", "--mpi-worker", kind.name(), "--partition", part.name(), "--reference"].map(String::from).to_vec();
    args.push(reference.display().to_string());
    args.extend(o.sizes.flags());
    let line = match crate::mpirun::run(&o.mpirun, RANKS, &args, &[], RESULT_TAG, MPIRUN_DEADLINE)? {
        crate::mpirun::Job::Ran(line) => line,
        crate::mpirun::Job::Absent(why) => return Ok(MpiOutcome::Absent(why)),
    };
    let v: Value = serde_json::from_str(&line).map_err(|e| format!("the ranks' result: {e}"))?;
    let ranks: Vec<RankStats> = serde_json::from_value(v["ranks"].clone()).map_err(|e| format!("the ranks' result: {e}"))?;
    Ok(MpiOutcome::Ran(ranks))
}

/// A rank of an mpirun job (`--mpi-worker CASE`): build the case, run,
/// and print every rank's numbers at rank 0. On an error the rank exits
/// at once (skipping `MPI_Finalize`), so mpirun ends the whole job rather
/// than leaving the other rank waiting in a collective.
fn worker(a: &Args, kind: CaseKind) -> ExitCode {
    #[cfg(feature = "mpi")]
    {
        let r = (|| -> Result<Option<String>, String> {
            let part = a.partition;
            let s = Sizes::from(a);
            let path = a.reference.as_ref().ok_or("--reference is missing")?;
            let comm: Arc<dyn Communicator> = Arc::new(tiga::runtime::comm::Mpi::init().map_err(|e| format!("MPI: {e}"))?);
            let data = CaseData::build(kind, &s)?;
            let reference = tiga::read_npy(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let stats = measure_rank(&data, comm.clone(), part, &s, &reference)?;
            let mine = serde_json::to_vec(&stats).map_err(|e| e.to_string())?;
            let all = comm.all_gather_bytes(&mine).map_err(|e| format!("gathering the ranks' numbers: {e}"))?;
            if comm.rank() != 0 {
                return Ok(None);
            }
            let ranks: Vec<Value> = all
                .iter()
                .map(|b| serde_json::from_slice(b))
                .collect::<Result<_, _>>()
                .map_err(|e| format!("a rank's numbers: {e}"))?;
            Ok(Some(json!({ "ranks": ranks }).to_string()))
        })();
        crate::mpirun::finish_worker("tiga-bench sharded", RESULT_TAG, r)
    }
    #[cfg(not(feature = "mpi"))]
    {
        let _ = a;
        eprintln!("tiga-bench sharded --mpi-worker {}: this binary was built without --features mpi", kind.name());
        ExitCode::FAILURE
    }
}

/// The flags, resolved.
#[derive(Debug, Clone)]
pub(crate) struct Opts {
    pub(crate) sizes: Sizes,
    pub(crate) rounds: usize,
    pub(crate) mpi: bool,
    pub(crate) mpirun: PathBuf,
    pub(crate) json: PathBuf,
    pub(crate) table: PathBuf,
}

impl From<&Args> for Opts {
    fn from(a: &Args) -> Opts {
        Opts {
            sizes: Sizes::from(a),
            rounds: a.rounds,
            mpi: !a.no_mpi,
            mpirun: a.mpirun.clone(),
            json: a.json.clone(),
            table: a.table.clone(),
        }
    }
}

/// One configuration's outcome.
struct ConfigResult {
    config: Config,
    /// Ranks' numbers (empty for one process).
    ranks: Vec<RankStats>,
    /// Per step: one process's time, or the slowest rank's.
    step_ms: Vec<f64>,
    /// Why there are no numbers (not built, no mpirun, or an error).
    absent: Option<String>,
    wall_ms: f64,
}

impl ConfigResult {
    fn step_ms_median(&self) -> Option<f64> {
        (!self.step_ms.is_empty()).then(|| median(self.step_ms.clone()))
    }
    fn bytes_per_exchange(&self) -> Option<f64> {
        (!self.ranks.is_empty()).then(|| self.ranks.iter().map(RankStats::bytes_per_exchange).sum())
    }
    fn ghost_rows(&self) -> usize {
        self.ranks.iter().map(|r| r.ghost_rows).sum()
    }
    /// Every rank sends what the plan says, and the job's bytes per
    /// exchange are its ghost rows' bytes and a header per peer per rank.
    fn bytes_match(&self) -> Option<bool> {
        let world = self.ranks.first()?.world;
        let rb = self.ranks.first()?.row_bytes;
        let job = (self.ghost_rows() * rb + HEADER_BYTES * world * (world - 1)) as f64;
        Some(self.ranks.iter().all(RankStats::bytes_match) && self.bytes_per_exchange() == Some(job))
    }
    fn min_hidden(&self) -> Option<f64> {
        self.ranks.iter().map(RankStats::hidden).min_by(f64::total_cmp)
    }
    /// The kernel alone over the local rows: the slowest rank's time of
    /// each run, median (ranks that share a pool take turns, and this
    /// shows it where each rank's median does not).
    fn job_kernel_ms(&self) -> Option<f64> {
        let n = self.ranks.iter().map(|r| r.kernel_ms.len()).min()?;
        (n > 0).then(|| median((0..n).map(|i| self.ranks.iter().map(|r| r.kernel_ms[i]).fold(0.0, f64::max)).collect()))
    }
    fn cut_edges(&self) -> Option<usize> {
        (!self.ranks.is_empty()).then(|| self.ranks.iter().map(|r| r.cut_edges).sum())
    }
}

/// The slowest rank's time of each step.
fn job_steps(ranks: &[RankStats]) -> Vec<f64> {
    let n = ranks.iter().map(|r| r.step_ms.len()).min().unwrap_or(0);
    (0..n).map(|i| ranks.iter().map(|r| r.step_ms[i]).fold(0.0, f64::max)).collect()
}

/// A case's partitions: edge cut from `shard::edge_cut`.
struct PartStat {
    part: Part,
    edge_cut: Option<usize>,
    partition_ms: f64,
    absent: Option<String>,
}

/// One case measured.
struct CaseResult {
    kind: CaseKind,
    describe: String,
    nodes: usize,
    edges: usize,
    build_ms: f64,
    configs: Vec<ConfigResult>,
    parts: Vec<PartStat>,
}

impl CaseResult {
    fn find(&self, engine: Engine, part: Part) -> Option<&ConfigResult> {
        self.configs.iter().find(|c| c.config.engine == engine && c.config.part == part && c.absent.is_none())
    }
}

/// Entry point of `tiga-bench sharded ARGS...` (and of its mpirun workers).
pub fn main(args: &Args) -> ExitCode {
    if let Some(kind) = args.mpi_worker {
        return worker(args, kind);
    }
    match parent(&Opts::from(args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tiga-bench sharded: {e}");
            ExitCode::FAILURE
        }
    }
}

fn load_avg() -> Option<String> {
    std::fs::read_to_string("/proc/loadavg").ok().map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

fn parent(o: &Opts) -> Result<ExitCode, String> {
    let started = Instant::now();
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let load_start = load_avg();
    eprintln!("[sharded] {cpus} CPUs, load average {}", load_start.as_deref().unwrap_or("?"));
    let dir = tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?;
    let mut errors: Vec<String> = Vec::new();
    let mut cases = Vec::new();
    for kind in [CaseKind::Stencil, CaseKind::PowerLaw] {
        cases.push(run_case(o, kind, dir.path(), &mut errors)?);
    }
    let load_end = load_avg();
    let total_s = started.elapsed().as_secs_f64();

    let targets = targets(&cases);
    let notes = notes(&cases, cpus);
    let table = table(o, &cases, &targets, &notes, cpus, (&load_start, &load_end), total_s, &errors);
    print!("{table}");
    let doc = to_json(o, &cases, &targets, &notes, cpus, (&load_start, &load_end), total_s, &errors);
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())? + "\n";
    crate::report::write_atomic(&o.json, &text)?;
    crate::report::write_atomic(&o.table, &table)?;
    println!("wrote {} and {}", o.json.display(), o.table.display());
    if errors.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        for e in &errors {
            eprintln!("tiga-bench sharded: error: {e}");
        }
        Ok(ExitCode::FAILURE)
    }
}

fn run_case(o: &Opts, kind: CaseKind, dir: &Path, errors: &mut Vec<String>) -> Result<CaseResult, String> {
    let s = &o.sizes;
    let case = CaseData::build(kind, s)?;
    let describe = case.describe(s);
    eprintln!("[sharded] {describe}; built in {:.0} ms", case.build_ms);
    let ref_path = dir.join(format!("{}-reference.npy", kind.name()));
    let mut parts_wanted = vec![Part::Contiguous];
    if kind == CaseKind::PowerLaw {
        parts_wanted.push(Part::Metis);
    }
    let mut list = vec![Config { engine: Engine::OneProcess, part: Part::Contiguous }];
    for &part in &parts_wanted {
        list.push(Config { engine: Engine::InProcess, part });
        if kind == CaseKind::Stencil {
            list.push(Config { engine: Engine::InProcessSharedPool, part });
        }
    }
    if o.mpi {
        list.extend(parts_wanted.iter().map(|&part| Config { engine: Engine::Mpi, part }));
    }
    let mut configs: Vec<ConfigResult> = list
        .into_iter()
        .map(|config| {
            let mut absent = config.part.unavailable();
            if config.engine == Engine::Mpi && absent.is_none() && !cfg!(feature = "mpi") {
                absent = Some("not built with --features mpi".into());
            }
            ConfigResult { config, ranks: Vec::new(), step_ms: Vec::new(), absent, wall_ms: 0.0 }
        })
        .collect();
    // Configurations take turns, once per round: this machine's speed
    // drifts over minutes, and rows measured in blocks would compare
    // different weather.
    let mut reference: Option<Tensor> = None;
    for round in 0..o.rounds {
        for c in configs.iter_mut().filter(|c| c.absent.is_none()) {
            let label = c.config.label();
            let t = Instant::now();
            if c.config.engine == Engine::OneProcess {
                let (times, out) = one_process(&case, s)?;
                match &reference {
                    None => {
                        if configs_want_file(o) {
                            tiga::write_npy(&ref_path, &out.view()).map_err(|e| format!("{}: {e}", ref_path.display()))?;
                        }
                        reference = Some(out);
                    }
                    Some(r) => {
                        if bit_mismatches(&out, r)?.0 != 0 {
                            return Err(format!("{}: one process gave other bits in round {}", kind.name(), round + 1));
                        }
                    }
                }
                eprintln!("[sharded]   round {}: {label}: {:.2} ms per step", round + 1, median(times.clone()));
                c.step_ms.extend(times);
                c.wall_ms += ms_since(t);
                continue;
            }
            let reference = reference.as_ref().ok_or("no reference output")?;
            let outcome = match c.config.engine {
                Engine::InProcess => in_process(&case, c.config.part, s, reference, true).map(MpiOutcome::Ran),
                Engine::InProcessSharedPool => in_process(&case, c.config.part, s, reference, false).map(MpiOutcome::Ran),
                Engine::Mpi => under_mpirun(o, kind, c.config.part, &ref_path),
                Engine::OneProcess => Err("one process is not sharded".into()),
            };
            c.wall_ms += ms_since(t);
            match outcome {
                Ok(MpiOutcome::Ran(ranks)) => {
                    for r in &ranks {
                        if r.mismatched_rows > 0 {
                            errors.push(format!(
                                "{} {label}, round {}: rank {}: {} of {} rows differ from one process's (first: node {})",
                                kind.name(),
                                round + 1,
                                r.rank,
                                r.mismatched_rows,
                                r.owned_rows,
                                r.first_mismatch.map_or("?".into(), |n| n.to_string())
                            ));
                        }
                    }
                    let steps = job_steps(&ranks);
                    eprintln!(
                        "[sharded]   round {}: {label}: {:.2} ms per step; ghosts {:?}, hidden {:?}; {:.1} s",
                        round + 1,
                        median(steps.clone()),
                        ranks.iter().map(|r| r.ghost_rows).collect::<Vec<_>>(),
                        ranks.iter().map(|r| (r.hidden() * 100.0).round() / 100.0).collect::<Vec<_>>(),
                        ms_since(t) / 1e3
                    );
                    c.step_ms.extend(steps);
                    if c.ranks.is_empty() {
                        c.ranks = ranks;
                    } else if let Err(e) = c.ranks.iter_mut().zip(ranks).try_for_each(|(a, b)| a.merge(b)) {
                        errors.push(format!("{} {label}, round {}: {e}", kind.name(), round + 1));
                        c.absent = Some(format!("failed: {e}"));
                    }
                }
                Ok(MpiOutcome::Absent(why)) => {
                    eprintln!("[sharded]   {label}: not run ({why})");
                    c.absent = Some(why);
                }
                Err(e) => {
                    eprintln!("[sharded]   round {}: {label}: ERROR {e}", round + 1);
                    errors.push(format!("{} {label}, round {}: {e}", kind.name(), round + 1));
                    c.absent = Some(format!("failed: {e}"));
                }
            }
        }
    }

    // Edge cuts, from the partitions themselves; each must equal the sum
    // of the ranks' cut edges.
    let mut parts = Vec::new();
    for &part in &parts_wanted {
        if let Some(why) = part.unavailable() {
            parts.push(PartStat { part, edge_cut: None, partition_ms: 0.0, absent: Some(why) });
            continue;
        }
        let t = Instant::now();
        let stat = match partitions(&case.graph, &part.choice(), RANKS) {
            Ok((dst, src)) => {
                let partition_ms = ms_since(t);
                let cut = edge_cut(&case.graph, &dst, &src);
                for c in configs.iter().filter(|c| c.config.part == part) {
                    if let Some(ranks_cut) = c.cut_edges().filter(|&r| r != cut) {
                        errors.push(format!(
                            "{} {}: the ranks' cut edges sum to {ranks_cut}, edge_cut says {cut}",
                            kind.name(),
                            c.config.label()
                        ));
                    }
                }
                PartStat { part, edge_cut: Some(cut), partition_ms, absent: None }
            }
            Err(e) => {
                errors.push(format!("{} partition {}: {e}", kind.name(), part.name()));
                PartStat { part, edge_cut: None, partition_ms: 0.0, absent: Some(e.to_string()) }
            }
        };
        parts.push(stat);
    }
    Ok(CaseResult {
        kind,
        describe,
        nodes: case.graph.num_dst(),
        edges: case.graph.num_edges(),
        build_ms: case.build_ms,
        configs,
        parts,
    })
}

/// Whether the mpirun workers will need the reference as a file.
fn configs_want_file(o: &Opts) -> bool {
    o.mpi && cfg!(feature = "mpi")
}

/// A target's outcome.
struct Target {
    key: String,
    what: String,
    /// None: not measured.
    met: Option<bool>,
    value: String,
    data: Value,
}

fn met_word(m: Option<bool>) -> &'static str {
    match m {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "not measured",
    }
}

fn targets(cases: &[CaseResult]) -> Vec<Target> {
    let mut out = Vec::new();
    // Bytes per exchange.
    let mut rows = Vec::new();
    let mut all = Some(true);
    for c in cases {
        for r in c.configs.iter().filter(|r| r.config.sharded() && r.absent.is_none()) {
            let m = r.bytes_match();
            all = match (all, m) {
                (Some(a), Some(b)) => Some(a && b),
                _ => None,
            };
            rows.push(json!({
                "case": c.kind.name(), "configuration": r.config.label(), "bytes_match": m,
                "bytes_per_exchange": r.bytes_per_exchange(), "ghost_rows": r.ghost_rows(),
                "row_bytes": r.ranks.first().map(|x| x.row_bytes),
                "per_rank": r.ranks.iter().map(|x| json!({
                    "rank": x.rank, "bytes_per_exchange": x.bytes_per_exchange(), "expected": x.expected_bytes(),
                    "sent_rows": x.sent_rows, "ghost_rows": x.ghost_rows,
                })).collect::<Vec<_>>(),
            }));
        }
    }
    let value = cases
        .iter()
        .flat_map(|c| c.configs.iter().filter(|r| r.config.sharded() && r.absent.is_none()).map(move |r| (c, r)))
        .filter(|(_, r)| r.config.engine != Engine::InProcessSharedPool)
        .map(|(c, r)| {
            let rb = r.ranks.first().map_or(0, |x| x.row_bytes);
            format!(
                "{} {}: {:.0} B = {} ghost rows x {rb} B + {} x 16 B",
                c.kind.name(),
                r.config.label(),
                r.bytes_per_exchange().unwrap_or(f64::NAN),
                r.ghost_rows(),
                r.ranks.len() * (r.ranks.len().max(1) - 1)
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    out.push(Target {
        key: "bytes_match".into(),
        what: "bytes per exchange == ghost rows x row bytes + 16-byte header per peer (every rank, every sharded run)".into(),
        met: if rows.is_empty() { None } else { all },
        value,
        data: json!({ "bytes_match": if rows.is_empty() { None } else { all }, "runs": rows }),
    });
    // Hidden share and time on the stencil.
    if let Some(st) = cases.iter().find(|c| c.kind == CaseKind::Stencil) {
        let one = st.find(Engine::OneProcess, Part::Contiguous).and_then(ConfigResult::step_ms_median);
        for engine in [Engine::InProcess, Engine::InProcessSharedPool, Engine::Mpi] {
            let cfg = Config { engine, part: Part::Contiguous };
            let r = st.find(engine, Part::Contiguous);
            let hidden: Vec<f64> = r.map(|r| r.ranks.iter().map(RankStats::hidden).collect()).unwrap_or_default();
            let min = r.and_then(ConfigResult::min_hidden);
            out.push(Target {
                key: format!("hidden_share_stencil_{}", cfg.engine_key()),
                what: format!("hidden share >= {HIDDEN_TARGET} on the stencil, {}", cfg.label()),
                met: min.map(|m| m >= HIDDEN_TARGET),
                value: if hidden.is_empty() {
                    "-".into()
                } else {
                    let per: Vec<String> = r
                        .map(|r| {
                            r.ranks
                                .iter()
                                .map(|x| {
                                    format!(
                                        "rank {}: {:.2} (wait {:.3} ms of a {:.3} ms bare exchange)",
                                        x.rank,
                                        x.hidden(),
                                        x.wait_ms(),
                                        x.bare_ms_median()
                                    )
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    per.join(", ")
                },
                data: json!({ "target": HIDDEN_TARGET, "per_rank": hidden, "min": min }),
            });
            let two = r.and_then(ConfigResult::step_ms_median);
            let ratio = one.zip(two).map(|(a, b)| b / a);
            out.push(Target {
                key: format!("time_stencil_{}_over_one_process", cfg.engine_key()),
                what: format!("{} within {TIME_TARGET}x of 1 process x 2 threads on the stencil", cfg.label()),
                met: ratio.map(|x| x <= TIME_TARGET),
                value: match (ratio, one, two) {
                    (Some(x), Some(a), Some(b)) => format!("{x:.3}x ({b:.2} ms against {a:.2} ms per step)"),
                    _ => "-".into(),
                },
                data: json!({ "target": TIME_TARGET, "ratio": ratio, "two_ranks_ms": two, "one_process_ms": one }),
            });
        }
    }
    // METIS against contiguous on the power-law graph.
    if let Some(pl) = cases.iter().find(|c| c.kind == CaseKind::PowerLaw) {
        let cut = |p: Part| pl.parts.iter().find(|x| x.part == p).and_then(|x| x.edge_cut);
        let bytes = |p: Part| pl.find(Engine::InProcess, p).and_then(ConfigResult::bytes_per_exchange);
        let step = |e: Engine, p: Part| pl.find(e, p).and_then(ConfigResult::step_ms_median);
        let (cc, cm) = (cut(Part::Contiguous), cut(Part::Metis));
        let (bc, bm) = (bytes(Part::Contiguous), bytes(Part::Metis));
        let met = match (cc, cm, bc, bm) {
            (Some(cc), Some(cm), Some(bc), Some(bm)) => Some(cm < cc && bm < bc),
            _ => None,
        };
        let f = |v: Option<f64>, d: usize| v.map_or("-".to_string(), |x| format!("{x:.d$}"));
        out.push(Target {
            key: "metis_below_contiguous_powerlaw".into(),
            what: "METIS edge cut and bytes per exchange below contiguous on the power-law graph".into(),
            met,
            value: format!(
                "edge cut {} against {}; bytes per exchange {} against {}; step (in-process) {} ms against {} ms",
                cm.map_or("-".into(), |x| x.to_string()),
                cc.map_or("-".into(), |x| x.to_string()),
                f(bm, 0),
                f(bc, 0),
                f(step(Engine::InProcess, Part::Metis), 2),
                f(step(Engine::InProcess, Part::Contiguous), 2)
            ),
            data: json!({
                "edge_cut": { "contiguous": cc, "metis": cm },
                "bytes_per_exchange": { "contiguous": bc, "metis": bm },
                "step_ms_in_process": { "contiguous": step(Engine::InProcess, Part::Contiguous), "metis": step(Engine::InProcess, Part::Metis) },
                "step_ms_mpirun": { "contiguous": step(Engine::Mpi, Part::Contiguous), "metis": step(Engine::Mpi, Part::Metis) },
            }),
        });
    }
    out
}

/// What the numbers mean, measured reasons included.
fn notes(cases: &[CaseResult], cpus: usize) -> Vec<String> {
    let mut n = vec![
        "hidden share = 1 - (median over the timed steps of the step's Sharded::stats().wait_ms) / (median wall time of a \
         bare exchange: start_halo then finish at once, after a barrier); negative when a rank waits longer than a bare \
         exchange takes (its peer is still computing)"
            .to_string(),
        "exch ms = the median step's Sharded::stats().total_ms (one exchange per step): from start_halo to the ghosts \
         written, interior rows included"
            .to_string(),
        "a barrier precedes every timed step and bare exchange; job step = the slowest rank's time of each step, median over \
         the steps"
            .to_string(),
        "threads(1): two in-process ranks with Schedule::threads(1) alone, which the runtime runs on the calling thread \
         (each rank's own); the other in-process rows install a one-thread rayon pool per rank"
            .to_string(),
    ];
    if cpus <= 2 {
        n.push(format!(
            "{cpus} CPUs: two ranks use every core, so anything else running (mpirun's own processes, other builds) takes \
             time from a rank and shows up as waiting in its peer"
        ));
    }
    for c in cases {
        let one = c.find(Engine::OneProcess, Part::Contiguous).and_then(ConfigResult::step_ms_median);
        for r in c.configs.iter().filter(|r| r.absent.is_none() && !r.ranks.is_empty()) {
            let (Some(step), Some(one)) = (r.step_ms_median(), one) else { continue };
            let Some(kernel) = r.job_kernel_ms() else { continue };
            let wait = r.ranks.iter().map(RankStats::wait_ms).fold(0.0, f64::max);
            n.push(format!(
                "{} {}: a step takes {step:.2} ms ({:.2}x one process's {one:.2} ms); the kernel alone over the ranks' \
                 local rows takes {kernel:.2} ms (slowest rank per run, median), the exchange's waiting {wait:.3} ms \
                 (median, the most waiting rank), so about {:.2} ms per step is the sharded call's own work (the source \
                 field copied into slots, the halo packed and unpacked, the output put in owned order, and the page \
                 faults of the buffers it allocates)",
                c.kind.name(),
                r.config.label(),
                step / one,
                step - kernel - wait
            ));
        }
        for r in c.configs.iter().filter(|r| r.absent.is_none() && !r.ranks.is_empty()) {
            let interior: Vec<String> = r.ranks.iter().map(|x| format!("{}/{}", x.interior_rows, x.owned_rows)).collect();
            if r.ranks.iter().any(|x| x.interior_rows * 2 < x.owned_rows) {
                n.push(format!(
                    "{} {}: interior rows (run while the ghosts travel) {} per rank: most rows read a ghost, so little \
                     compute can hide the exchange",
                    c.kind.name(),
                    r.config.label(),
                    interior.join(", ")
                ));
            }
        }
    }
    if cases.iter().any(|c| c.find(Engine::Mpi, Part::Contiguous).is_some()) {
        n.push(
            "mpirun: each rank is bound to a core of its own (Open MPI's default for 2 ranks) and spins while it waits; the \
             MPI engine posts its receives inside finish (after the all-to-all of lengths), and Open MPI moves messages \
             only inside MPI calls, so a rank that reaches finish first waits for its peer to reach its own: under mpirun \
             the waiting is the ranks' skew, which the interior rows cannot hide (in-process, a peer's rows are in the \
             channel from its start_halo on)"
                .to_string(),
        );
    }
    n
}

/// One line of a case's table: the cells right-aligned in their columns
/// (the first left-aligned).
fn row(cells: &[String]) -> String {
    const WIDTHS: [usize; 16] = [44, 4, 8, 8, 7, 7, 10, 10, 8, 8, 8, 7, 9, 8, 8, 6];
    let mut line = String::new();
    for (i, (c, w)) in cells.iter().zip(WIDTHS).enumerate() {
        if i == 0 {
            line.push_str(&format!("{c:<w$}"));
        } else {
            line.push_str(&format!(" {c:>w$}"));
        }
    }
    line.push('\n');
    line
}

#[allow(clippy::too_many_arguments)]
fn table(
    o: &Opts,
    cases: &[CaseResult],
    targets: &[Target],
    notes: &[String],
    cpus: usize,
    (load_start, load_end): (&Option<String>, &Option<String>),
    total_s: f64,
    errors: &[String],
) -> String {
    let s = &o.sizes;
    let f = |v: Option<f64>, d: usize| v.filter(|x| x.is_finite()).map_or("-".to_string(), |x| format!("{x:.d$}"));
    let mut t = String::new();
    t.push_str(&format!(
        "sharded execution on {RANKS} ranks (halo depth 1) against one process; kernels from examples/kernels/gnn.rs \
         (#[message_passing], Backend::Auto)\n{} rounds, the configurations in turn in each; per round and configuration {} \
         warm-up + {} timed steps, then {} warm-up + {} bare exchanges and {} + {} runs of the kernel alone per rank; medians \
         over all rounds\n{cpus} CPUs; load average {} at the start, {} at the end; {total_s:.0} s in all\n",
        o.rounds,
        s.warmup,
        s.steps,
        s.warmup,
        s.exchanges,
        s.warmup,
        s.steps,
        load_start.as_deref().unwrap_or("?"),
        load_end.as_deref().unwrap_or("?")
    ));
    for c in cases {
        t.push_str(&format!("\n{}\n", c.describe));
        let head = [
            "configuration",
            "rank",
            "rows",
            "interior",
            "ghosts",
            "sent",
            "bytes/step",
            "expected",
            "exch ms",
            "wait ms",
            "bare ms",
            "hidden",
            "kernel ms",
            "step ms",
            "job ms",
            "bits",
        ];
        t.push_str(&row(&head.map(String::from)));
        for r in &c.configs {
            let label = r.config.label();
            if let Some(why) = &r.absent {
                t.push_str(&format!("{label:<44} {why}\n"));
                continue;
            }
            if r.ranks.is_empty() {
                let mut cells = vec![label.clone(), "-".into(), c.nodes.to_string()];
                cells.extend(std::iter::repeat_n("-".to_string(), 10));
                cells.extend([f(r.step_ms_median(), 2), f(r.step_ms_median(), 2), "ref".into()]);
                t.push_str(&row(&cells));
                continue;
            }
            for (i, x) in r.ranks.iter().enumerate() {
                t.push_str(&row(&[
                    if i == 0 { label.clone() } else { String::new() },
                    x.rank.to_string(),
                    x.owned_rows.to_string(),
                    x.interior_rows.to_string(),
                    x.ghost_rows.to_string(),
                    x.sent_rows.to_string(),
                    format!("{:.0}", x.bytes_per_step()),
                    x.expected_bytes().to_string(),
                    format!("{:.3}", x.exchange_ms()),
                    format!("{:.3}", x.wait_ms()),
                    format!("{:.3}", x.bare_ms_median()),
                    format!("{:.2}", x.hidden()),
                    format!("{:.2}", x.kernel_ms_median()),
                    format!("{:.2}", x.step_ms_median()),
                    if i == 0 { f(r.step_ms_median(), 2) } else { String::new() },
                    (if x.mismatched_rows == 0 { "exact" } else { "DIFFER" }).to_string(),
                ]));
            }
        }
        if c.parts.len() > 1 || c.kind == CaseKind::PowerLaw {
            t.push_str(&format!(
                "\n{:<12} {:>12} {:>8} {:>12} {:>10} {:>16} {:>14} {:>14} {:>12}\n",
                "partition",
                "edge cut",
                "cut %",
                "ghost rows",
                "bytes/exch",
                "step ms in-proc",
                "step ms mpirun",
                "setup ms",
                "part. ms"
            ));
            for p in &c.parts {
                let ip = c.find(Engine::InProcess, p.part);
                let mp = c.find(Engine::Mpi, p.part);
                if let Some(why) = &p.absent {
                    t.push_str(&format!("{:<12} {why}\n", p.part.name()));
                    continue;
                }
                t.push_str(&format!(
                    "{:<12} {:>12} {:>8} {:>12} {:>10} {:>16} {:>14} {:>14} {:>12.0}\n",
                    p.part.name(),
                    p.edge_cut.map_or("-".into(), |x| x.to_string()),
                    f(p.edge_cut.map(|x| 100.0 * x as f64 / c.edges.max(1) as f64), 1),
                    ip.map_or("-".into(), |r| r.ghost_rows().to_string()),
                    f(ip.and_then(ConfigResult::bytes_per_exchange), 0),
                    f(ip.and_then(ConfigResult::step_ms_median), 2),
                    f(mp.and_then(ConfigResult::step_ms_median), 2),
                    f(ip.map(|r| r.ranks.iter().map(|x| x.setup_ms).fold(0.0, f64::max)), 0),
                    p.partition_ms
                ));
            }
        }
    }
    t.push_str(
        "\n(rows: owned rows; interior: rows that read no ghost; ghosts: ghost rows received; sent: rows sent per exchange;\n \
         bytes/step: bytes sent per step, headers included; expected: sent rows x row bytes + 16 B per peer; exch ms, wait ms:\n \
         the median step's; bare ms: a bare exchange's wall time; kernel ms: the kernel alone over the rank's local CSR\n \
         (ghosts filled); step ms: the rank's median; job ms: the slowest rank's per step, median; bits: last output against\n \
         one process's)\n\n",
    );
    for x in targets {
        t.push_str(&format!("target: {}: {} ({})\n", x.what, met_word(x.met), x.value));
    }
    for n in notes {
        t.push_str(&format!("note: {n}\n"));
    }
    for e in errors {
        t.push_str(&format!("error: {e}\n"));
    }
    t
}

#[allow(clippy::too_many_arguments)]
fn to_json(
    o: &Opts,
    cases: &[CaseResult],
    targets: &[Target],
    notes: &[String],
    cpus: usize,
    (load_start, load_end): (&Option<String>, &Option<String>),
    total_s: f64,
    errors: &[String],
) -> Value {
    let s = &o.sizes;
    let cases: Vec<Value> = cases
        .iter()
        .map(|c| {
            let configs: Vec<Value> = c
                .configs
                .iter()
                .map(|r| {
                    let ranks: Vec<Value> = r
                        .ranks
                        .iter()
                        .map(|x| {
                            json!({
                                "rank": x.rank, "engine": x.engine, "setup_ms": x.setup_ms,
                                "owned_rows": x.owned_rows, "interior_rows": x.interior_rows,
                                "ghost_rows": x.ghost_rows, "sent_rows": x.sent_rows, "cut_edges": x.cut_edges,
                                "row_bytes": x.row_bytes, "exchanges": x.exchanges,
                                "bytes_sent_per_step": x.bytes_per_step(), "bytes_per_exchange": x.bytes_per_exchange(),
                                "expected_bytes_per_exchange": x.expected_bytes(), "bytes_match": x.bytes_match(),
                                "exchange_ms_median": x.exchange_ms(), "wait_ms_median": x.wait_ms(),
                                "exchange_ms_mean": x.per_exchange(x.exchange_ms_total),
                                "wait_ms_mean": x.per_exchange(x.wait_ms_total),
                                "exchange_ms": x.step_exchange_ms, "wait_ms": x.step_wait_ms,
                                "bare_exchange_ms_median": x.bare_ms_median(), "bare_exchange_ms": x.bare_ms,
                                "bare_wait_ms": x.bare_wait_ms,
                                "bare_stats_total_ms_per_exchange": x.bare_exchange_ms_total / x.bare_ms.len().max(1) as f64,
                                "bare_stats_wait_ms_per_exchange": x.bare_wait_ms_total / x.bare_ms.len().max(1) as f64,
                                "bare_bytes_per_exchange": x.bare_bytes_sent as f64 / x.bare_ms.len().max(1) as f64,
                                "hidden_share": x.hidden(),
                                "step_ms_median": x.step_ms_median(), "step_ms": x.step_ms,
                                "local_kernel_ms_median": x.kernel_ms_median(), "local_kernel_ms": x.kernel_ms,
                                "mismatched_rows": x.mismatched_rows, "first_mismatch_node": x.first_mismatch,
                            })
                        })
                        .collect();
                    json!({
                        "configuration": r.config.label(),
                        "engine": r.config.engine_key(),
                        "partition": if r.config.sharded() { Some(r.config.part.name()) } else { None },
                        "ranks": if r.config.sharded() { RANKS } else { 1 },
                        "threads_per_rank": if r.config.sharded() { 1 } else { 2 },
                        "absent": r.absent,
                        "step_ms_median": r.step_ms_median(),
                        "step_ms": r.step_ms,
                        "bytes_per_exchange": r.bytes_per_exchange(),
                        "ghost_rows": if r.ranks.is_empty() { None } else { Some(r.ghost_rows()) },
                        "bytes_match": r.bytes_match(),
                        "local_kernel_ms_job_median": r.job_kernel_ms(),
                        "bit_identical": if r.ranks.is_empty() { None } else { Some(r.ranks.iter().all(|x| x.mismatched_rows == 0)) },
                        "wall_ms": r.wall_ms,
                        "per_rank": ranks,
                    })
                })
                .collect();
            let parts: Vec<Value> = c
                .parts
                .iter()
                .map(|p| {
                    let ip = c.find(Engine::InProcess, p.part);
                    json!({
                        "partition": p.part.name(), "edge_cut": p.edge_cut, "absent": p.absent,
                        "edge_cut_fraction": p.edge_cut.map(|x| x as f64 / c.edges.max(1) as f64),
                        "partition_ms": p.partition_ms,
                        "ghost_rows": ip.map(ConfigResult::ghost_rows),
                        "bytes_per_exchange": ip.and_then(ConfigResult::bytes_per_exchange),
                        "step_ms_in_process": ip.and_then(ConfigResult::step_ms_median),
                        "step_ms_mpirun": c.find(Engine::Mpi, p.part).and_then(ConfigResult::step_ms_median),
                    })
                })
                .collect();
            json!({
                "case": c.kind.name(), "description": c.describe, "nodes": c.nodes, "edges": c.edges,
                "build_ms": c.build_ms, "configurations": configs, "partitions": parts,
            })
        })
        .collect();
    let mut tg = serde_json::Map::new();
    for x in targets {
        tg.insert(x.key.clone(), json!({ "what": x.what, "met": x.met, "value": x.value, "data": x.data }));
    }
    let ompi: serde_json::Map<String, Value> =
        std::env::vars().filter(|(k, _)| k.starts_with("OMPI_MCA_")).map(|(k, v)| (k, json!(v))).collect();
    json!({
        "benchmark": "sharded",
        "ranks": RANKS,
        "halo_depth": 1,
        "sizes": {
            "stencil_side": s.side, "powerlaw_nodes": s.nodes, "powerlaw_edges": s.edges, "width": s.width,
            "rounds": o.rounds, "steps_per_round": s.steps, "warmup_per_round": s.warmup,
            "bare_exchanges_per_round": s.exchanges, "seed": s.seed,
        },
        "built_with": { "mpi": cfg!(feature = "mpi"), "metis": cfg!(feature = "metis") },
        "machine": { "cpus": cpus, "load_avg_start": load_start, "load_avg_end": load_end, "ompi_mca": ompi },
        "total_s": total_s,
        "timing": "a barrier before each timed step; per rank: median of its steps; job: median over steps of the slowest rank's time",
        "hidden_share": "1 - (median over the timed steps of each step's Sharded::stats().wait_ms) / (median wall time of a bare exchange: start_halo then finish at once, after a barrier)",
        "bytes_target": "each rank sends sent_rows x row_bytes + 16 per peer; the job sends its ghost rows x row_bytes + 16 per peer per rank",
        "cases": cases,
        "targets": Value::Object(tg),
        "notes": notes,
        "errors": errors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Sizes {
        Sizes { side: 12, nodes: 300, edges: 3000, width: 4, steps: 2, warmup: 1, exchanges: 2, seed: 3 }
    }

    /// Both cases on two in-process ranks, with pools of their own and
    /// with the shared one: every rank's rows are one process's bits, and
    /// every exchange sends what the plan says.
    #[test]
    fn in_process_ranks_match_one_process() {
        let s = tiny();
        for kind in [CaseKind::Stencil, CaseKind::PowerLaw] {
            let case = CaseData::build(kind, &s).expect("case");
            let (times, reference) = one_process(&case, &s).expect("one process");
            assert_eq!(times.len(), s.steps);
            for own_pools in [true, false] {
                let ranks = in_process(&case, Part::Contiguous, &s, &reference, own_pools).expect("two ranks");
                assert_eq!(ranks.len(), RANKS);
                for r in &ranks {
                    assert_eq!(r.mismatched_rows, 0, "{kind:?} rank {}", r.rank);
                    assert!(r.bytes_match(), "{kind:?} rank {}: {} bytes, {} expected", r.rank, r.bytes_sent, r.expected_bytes());
                    assert_eq!((r.step_ms.len(), r.bare_ms.len(), r.kernel_ms.len()), (s.steps, s.exchanges, s.steps));
                    assert_eq!(r.exchanges, s.steps as u64);
                }
                let job = ConfigResult {
                    config: Config { engine: Engine::InProcess, part: Part::Contiguous },
                    step_ms: job_steps(&ranks),
                    ranks,
                    absent: None,
                    wall_ms: 0.0,
                };
                assert_eq!(job.bytes_match(), Some(true));
                let (dst, src) = partitions(&case.graph, &PartitionChoice::Contiguous, RANKS).expect("partition");
                assert_eq!(job.cut_edges(), Some(edge_cut(&case.graph, &dst, &src)));
                if kind == CaseKind::Stencil {
                    // One grid row of ghosts each side of the cut.
                    assert!(job.ranks.iter().all(|r| r.ghost_rows == s.side && r.sent_rows == s.side));
                }
            }
        }
    }

    /// A second round's numbers append to the first's; a different plan
    /// is refused.
    #[test]
    fn rounds_merge() {
        let s = tiny();
        let case = CaseData::build(CaseKind::Stencil, &s).expect("case");
        let (_, reference) = one_process(&case, &s).expect("one process");
        let mut a = in_process(&case, Part::Contiguous, &s, &reference, true).expect("round 1");
        let b = in_process(&case, Part::Contiguous, &s, &reference, true).expect("round 2");
        let mut other = b[1].clone();
        for (x, y) in a.iter_mut().zip(b) {
            x.merge(y).expect("same plan");
        }
        assert!(a.iter().all(|r| r.step_ms.len() == 2 * s.steps && r.bytes_match()));
        other.ghost_rows += 1;
        assert!(a[1].merge(other).is_err());
    }

    /// The flags a worker is launched with give the parent's sizes.
    #[test]
    fn worker_flags_round_trip() {
        #[derive(Debug, clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            args: Args,
        }
        let s = Sizes { side: 77, nodes: 1234, edges: 5678, width: 16, steps: 5, warmup: 2, exchanges: 9, seed: 11 };
        let argv = ["x", "--mpi-worker", "stencil", "--reference", "r.npy"].into_iter().map(String::from).chain(s.flags());
        let w = <Wrap as clap::Parser>::try_parse_from(argv).expect("parses");
        assert_eq!(Sizes::from(&w.args), s);
        assert_eq!((w.args.mpi_worker, w.args.partition), (Some(CaseKind::Stencil), Part::Contiguous));
        assert_eq!(CaseKind::parse("powerlaw-sum"), Ok(CaseKind::PowerLaw));
        assert!(CaseKind::parse("nope").is_err() && Part::parse("nope").is_err());
    }
}
