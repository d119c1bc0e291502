//! `tiga-bench`: tiga's back ends against hand-written loops and the Python
//! peers, on the same graphs, side by side in one run on one machine; and,
//! as `tiga-bench paged`, paged execution against the in-memory run
//! (`paged.rs`); as `tiga-bench compile-time`, compile time against
//! kernel size (`compile_time.rs`); and, as `tiga-bench sharded`,
//! halo-sharded execution on two ranks (in-process and under mpirun)
//! against one process (`sharded.rs`); as `tiga-bench gpu`, the GPU
//! path timed with device events against a device-to-device copy
//! (`gpu.rs`); and, as `tiga-bench partitioned`, partitioned-tensor
//! gathers and embedding optimizer steps by memory type and rank count
//! against a local memcpy (`partitioned.rs`); as `tiga-bench renumber`,
//! renumbered runs against the caller's numbering (`renumber.rs`); as
//! `tiga-bench half`, the power-law sum with f32, bf16 and f16 features
//! side by side (`half.rs`); and, as `tiga-bench residuals`, the backward
//! of max, min and GAT with and without the residuals its forward kept
//! (`residuals.rs`).
//!
//! A number about a compiler means little alone: it needs the same
//! computation written by hand, the tools a user would otherwise pick, and
//! what the memory system can do, all measured on the same graphs in the
//! same process minutes apart, because these machines are shared and noisy.
//! So one run builds the graphs once and measures, for each case, tiga's
//! forward and backward (the gradient of `out.sum()` with respect to the
//! source field, through `Kernel::grad`) with the Cranelift JIT and, where
//! the macro compiled a variant, the ahead-of-time (rustc/LLVM) back end; a
//! hand-written Rust loop with the width fixed at compile time and AVX2+FMA
//! enabled (`hand.rs`); the Python peers (SciPy, `torch.sparse`, PyG-style
//! gather/scatter) through `bench/peers/peers.py` (`peers.rs`); and a STREAM
//! copy; then it prints a table and writes JSON (`report.rs`).
//!
//! Cases (graphs in `graphs.rs`; `--quick` makes them 16× smaller):
//! - `stencil-csr`: Jacobi smoothing (`Smoothing`, f32, scalar) on a
//!   2000×2000 four-neighbour grid materialized as CSR;
//! - `stencil-generated`: the same step with neighbours from index
//!   arithmetic (`Kernel::run` and `Kernel::vjp` over a `Stencil2d`),
//!   side by side with a hand-written grid loop and, as a second row, the
//!   macro's ahead-of-time stencil variant (the grid read at run time,
//!   `Backend::Aot`), checked bit for bit against the JIT's;
//! - `powerlaw-sum`/`-mean`/`-max` (`VecSum`, `SageMean`, `MaxPool`) and
//!   `powerlaw-gat` (`GatAttention`) at F = 64 on a 1M-node, 16M-edge
//!   power-law graph; `powerlaw-sum` again at F = 16 and F = 128; and
//!   `powerlaw-sum` F = 64 at 1 and 2 threads for the speedup.
//!
//! Every hand-written result is compared with tiga's (max |diff| printed; a
//! relative difference above 1e-3 is an error and the run exits non-zero,
//! after writing its table and JSON). The kernels are read from
//! `examples/kernels/gnn.rs` as a kernel file, so every call there runs the
//! Cranelift JIT (the back end the JSON names); the same file through
//! `#[message_passing]` gives the ahead-of-time rows.
//!
//! ```sh
//! cargo run --release -p tiga-bench -- --quick          # 16× smaller graphs, 3 repeats
//! cargo run --release -p tiga-bench -- --threads 2 --json target/bench/bench.json
//! cargo run --release -p tiga-bench -- paged --quick    # the paged benchmark
//! cargo run --release -p tiga-bench -- compile-time     # compile time against kernel size
//! cargo run --release -p tiga-bench --features mpi,metis -- sharded   # sharded against one process
//! cargo run --release -p tiga-bench --features cuda -- gpu             # the GPU path (bench/gpu/check.sh)
//! cargo run --release -p tiga-bench --features mpi -- partitioned     # partitioned tensors and embeddings
//! cargo run --release -p tiga-bench -- renumber                       # renumbering for locality
//! cargo run --release -p tiga-bench -- residuals                      # backward with and without saved residuals
//! cargo run --release -p tiga-bench -- half                           # f32 against bf16/f16 fields
//! ```

mod compile_time;
mod dense;
mod gpu;
mod graph_store;
mod graphs;
mod half;
mod hand;
mod kernels;
mod mpirun;
mod paged;
mod partitioned;
mod peers;
mod python;
mod renumber;
mod report;
mod residuals;
mod sharded;
mod timing;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};
use tiga::compiler::back::cranelift::VariantKey;
use tiga::{DType, Graph, Inputs, Kernel, TensorView};

use hand::Post;
use kernels::{kernel, macro_kernel};
use report::{Case, Check, Report};
use timing::{default_peers_script, median, positive, time_rounds, Contender, Produced, PEER_REPEATS, WARM_UPS};

/// The cases `--cases` takes.
const CASES: [&str; 6] = ["stencil-csr", "stencil-generated", "powerlaw-sum", "powerlaw-mean", "powerlaw-max", "powerlaw-gat"];

/// tiga's back ends against hand-written loops and the Python peers, on the
/// same graphs, side by side in one run (then a table, and JSON).
#[derive(Debug, Parser)]
#[command(
    name = "tiga-bench",
    version,
    args_conflicts_with_subcommands = true,
    args_override_self = true,
    disable_help_subcommand = true,
    after_help = "The paged benchmark: tiga-bench paged [--quick] [--json PATH] ... (see tiga-bench paged --help)\nCompile time against kernel size: tiga-bench compile-time [--terms LIST] (see tiga-bench compile-time --help)\nSharded against one process: tiga-bench sharded [--quick] [--json PATH] [--table PATH] (see tiga-bench sharded --help)\nThe GPU path: tiga-bench gpu [--device cuda:0|sim] [--nodes N] [--peers] (see tiga-bench gpu --help)\nPartitioned tensors and embeddings: tiga-bench partitioned [--quick] [--json PATH] [--table PATH] (see tiga-bench partitioned --help)\nRenumbering for locality: tiga-bench renumber [--quick] [--json PATH] [--table PATH] (see tiga-bench renumber --help)\nBackward with and without saved residuals: tiga-bench residuals [--quick] [--json PATH] [--table PATH] [--no-peers] (see tiga-bench residuals --help)\nHalf-precision fields: tiga-bench half [--quick] [--json PATH] [--table PATH] (see tiga-bench half --help)"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    bench: BenchArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The paged benchmark: a kernel over a `.gfg` file, paged, against the in-memory run on a
    /// stencil saved as a .gfg file, every row in a fresh child process
    #[command(args_override_self = true)]
    Paged(paged::Args),
    /// Compile time against kernel size: a chain of 1k to 10k terms through the front end and the
    /// passes (table and JSON)
    #[command(args_override_self = true)]
    CompileTime(compile_time::Args),
    /// Halo-sharded execution on 2 ranks (in-process, and under mpirun with --features mpi) against
    /// one process with 2 threads, on a stencil and a power-law graph (table and JSON)
    #[command(args_override_self = true)]
    Sharded(sharded::Args),
    /// The GPU path (CUDA events) on a power-law graph against a device-to-device copy in the same run;
    /// `--device sim --nodes 1000` runs it on the PTX simulator (table and JSON)
    #[command(args_override_self = true)]
    Gpu(gpu::Args),
    /// Mini-batches sampled through the graph store over loopback (1 and 2 storage servers) against
    /// colocated sampling from the .gfg: batches/s and fetched feature GB/s (table and JSON)
    #[command(args_override_self = true)]
    GraphStore(graph_store::Args),
    /// Partitioned tensors: gather throughput by memory type and rank count against a local memcpy
    /// (with and without the node cache), and embedding optimizer steps (table and JSON)
    #[command(args_override_self = true)]
    Partitioned(partitioned::Args),
    /// Locality by renumbering (degree, RCM, clusters) against the caller's numbering on a power-law, an
    /// R-MAT and a mesh graph, with the ordering's cost and when it pays off (table and JSON)
    #[command(args_override_self = true)]
    Renumber(renumber::Args),
    /// Half-precision fields: the power-law sum with f32, bf16 and f16 source features side by
    /// side, forward and backward, with each one's error against its bound (table and JSON)
    #[command(args_override_self = true)]
    Half(half::Args),
    /// The backward of max, min and GAT with and without the residuals its forward kept, against
    /// the forward, on the power-law graph at F = 64, both CPU back ends (table and JSON)
    #[command(args_override_self = true)]
    Residuals(residuals::Args),
    /// A dense layer's matrix-parameter gradient against its forward (out = W·h over the identity
    /// graph), both CPU back ends (table and JSON)
    #[command(args_override_self = true)]
    Dense(dense::Args),
    /// The same kernel calls from the Python package (NumPy and torch) and from Rust, on the
    /// power-law graph and a small one (table and JSON)
    #[command(args_override_self = true)]
    Python(python::Args),
}

/// The main benchmark's flags.
#[derive(Debug, Clone, clap::Args)]
struct BenchArgs {
    /// Graphs 16x smaller, 3 repeats (unless --repeat)
    #[arg(long)]
    quick: bool,
    /// Timed calls per measurement after 3 warm-ups [default: 7, or 3 with
    /// --quick] (peers: at most 3 after one warm-up)
    #[arg(long, value_name = "N", value_parser = positive)]
    repeat: Option<usize>,
    /// Rayon threads [default: all CPUs]; the peers get the same
    #[arg(long, value_name = "N", value_parser = positive)]
    threads: Option<usize>,
    /// Where the JSON goes, written atomically
    #[arg(long, value_name = "PATH", default_value = "target/bench/bench.json")]
    json: PathBuf,
    /// Only these cases, comma-separated: stencil-csr, stencil-generated,
    /// powerlaw-sum, powerlaw-mean, powerlaw-max, powerlaw-gat
    #[arg(long, value_name = "LIST", value_parser = parse_cases)]
    cases: Option<CaseList>,
    /// Do not run the Python peers (bench/peers/peers.py)
    #[arg(long)]
    no_peers: bool,
    /// The peers.py to run
    #[arg(long, value_name = "P", default_value_os_t = default_peers_script())]
    peers_script: PathBuf,
    /// Skip powerlaw-sum at 1 and 2 threads
    #[arg(long)]
    no_scaling: bool,
    /// Graph and field seed
    #[arg(long, value_name = "N", default_value_t = 7)]
    seed: u64,
}

/// A `--cases` list: names out of [`CASES`].
#[derive(Debug, Clone, PartialEq)]
struct CaseList(Vec<String>);

fn parse_cases(s: &str) -> Result<CaseList, String> {
    let list: Vec<String> = s.split(',').filter(|c| !c.is_empty()).map(String::from).collect();
    if let Some(bad) = list.iter().find(|c| !CASES.contains(&c.as_str())) {
        return Err(format!("unknown case `{bad}`; the cases are {}", CASES.join(", ")));
    }
    Ok(CaseList(list))
}

#[derive(Debug, Clone)]
struct Opts {
    quick: bool,
    repeat: usize,
    threads: Option<usize>,
    json: PathBuf,
    peers: bool,
    peers_script: PathBuf,
    cases: Option<Vec<String>>,
    scaling: bool,
    seed: u64,
}

impl From<BenchArgs> for Opts {
    fn from(a: BenchArgs) -> Opts {
        Opts {
            quick: a.quick,
            repeat: a.repeat.unwrap_or(if a.quick { 3 } else { 7 }),
            threads: a.threads,
            json: a.json,
            peers: !a.no_peers,
            peers_script: a.peers_script,
            cases: a.cases.map(|c| c.0),
            scaling: !a.no_scaling,
            seed: a.seed,
        }
    }
}

impl Opts {
    fn wants(&self, case: &str) -> bool {
        self.cases.as_ref().is_none_or(|c| c.iter().any(|x| x == case))
    }
}

/// The JIT's variants so far, with their compile times.
fn variants() -> HashMap<VariantKey, f64> {
    tiga::jit().stats().variants.into_iter().collect()
}

fn new_compile_ms(before: &HashMap<VariantKey, f64>) -> f64 {
    variants().iter().filter(|(k, _)| !before.contains_key(*k)).map(|(_, ms)| ms).sum()
}

/// tiga's side of a case.
struct TigaRun {
    fwd_first: f64,
    fwd_ms: f64,
    bwd_first: f64,
    bwd_ms: f64,
    compile_ms: f64,
    bwd_compile_ms: f64,
    out: Vec<f32>,
    grad: Vec<f32>,
}

/// A hand-written loop of a case.
type Hand<'h> = &'h dyn Fn() -> Result<Vec<f32>, String>;

/// One case timed side by side: each of tiga's back ends, and the
/// hand-written forward and backward where there are some.
struct SideBySide {
    tiga: Vec<TigaRun>,
    hand_fwd: Option<(f64, hand::Out)>,
    hand_bwd: Option<(f64, hand::Out)>,
}

#[allow(clippy::too_many_arguments)]
fn side_by_side(
    kernels: &[&Kernel],
    g: &Graph,
    ins: &Inputs<'_>,
    grad_field: &str,
    widths: &[usize],
    repeat: usize,
    hand_fwd: Option<Hand<'_>>,
    hand_bwd: Option<Hand<'_>>,
) -> Result<SideBySide, String> {
    fn e(k: &Kernel) -> impl Fn(tiga::Error) -> String + '_ {
        move |e| format!("{}: {e}", k.name())
    }
    // The gradient of the output's sum: the VJP with a cotangent of ones,
    // built once and outside the clock, as the hand-written backward gets
    // it (and as autograd's `sum().backward()` gets an expanded one).
    // `Kernel::grad` would build it in every call.
    let k0 = kernels.first().ok_or("no kernel")?;
    let shape = k0.output_shapes(g, ins).map_err(e(k0))?.into_iter().find(|(n, _)| n == "out").ok_or("no output `out`")?.1;
    let ones = tiga::Tensor::from_f32(shape.clone(), vec![1.0; shape.iter().product()]).map_err(|er| er.to_string())?;
    let cot = [("out", ones.view())];
    let cot = &cot[..];
    // First calls, one kernel at a time, so that each compile time is its
    // own: the forward variant compiled here, then the backward's stages.
    let mut firsts = Vec::new();
    for &k in kernels {
        let before = variants();
        let (v, _hit) = k.variant(DType::F32, widths, g.edge_ids().is_some()).map_err(e(k))?;
        let t = Instant::now();
        k.run(g, ins).map_err(e(k))?;
        let fwd_first = t.elapsed().as_secs_f64() * 1e3;
        // If `run` compiled anything else (it should not), count it too.
        let compile_ms = v.compile_ms.max(new_compile_ms(&before));
        let before = variants();
        let t = Instant::now();
        k.vjp(g, ins, cot).map_err(e(k))?;
        let bwd_first = t.elapsed().as_secs_f64() * 1e3;
        firsts.push((fwd_first, compile_ms, bwd_first, new_compile_ms(&before)));
    }
    let mut fwd: Vec<Contender<'_>> =
        kernels.iter().map(|&k| Box::new(move || k.run(g, ins).map(Produced::Outputs).map_err(e(k))) as Contender<'_>).collect();
    if let Some(h) = hand_fwd {
        fwd.push(Box::new(move || h().map(|v| Produced::Hand(hand::Out(v)))));
    }
    let mut fwd = time_rounds(repeat, &mut fwd)?;
    let mut bwd: Vec<Contender<'_>> = kernels
        .iter()
        .map(|&k| Box::new(move || k.vjp(g, ins, cot).map(Produced::Grads).map_err(e(k))) as Contender<'_>)
        .collect();
    if let Some(h) = hand_bwd {
        bwd.push(Box::new(move || h().map(|v| Produced::Hand(hand::Out(v)))));
    }
    let mut bwd = time_rounds(repeat, &mut bwd)?;
    // The hand-written loop, when given, is the last contender.
    let hand = |timed: &mut Vec<(f64, Produced)>, given: bool| match given.then(|| timed.pop()).flatten() {
        Some((ms, Produced::Hand(v))) => Some((ms, v)),
        _ => None,
    };
    let (hand_fwd, hand_bwd) = (hand(&mut fwd, hand_fwd.is_some()), hand(&mut bwd, hand_bwd.is_some()));
    let mut tiga = Vec::new();
    for (((f, b), first), k) in fwd.into_iter().zip(bwd).zip(firsts).zip(kernels) {
        let out = match &f.1 {
            Produced::Outputs(o) => o.out().and_then(|t| t.as_f32()).map(<[f32]>::to_vec),
            _ => None,
        };
        let grad = match &b.1 {
            Produced::Grads(gr) => gr.src(grad_field).and_then(|t| t.as_f32()).map(<[f32]>::to_vec),
            _ => None,
        };
        tiga.push(TigaRun {
            fwd_first: first.0,
            fwd_ms: f.0,
            bwd_first: first.2,
            bwd_ms: b.0,
            compile_ms: first.1,
            bwd_compile_ms: first.3,
            out: out.ok_or_else(|| format!("{}: no f32 output `out`", k.name()))?,
            grad: grad.ok_or_else(|| format!("{}: no f32 gradient of `{grad_field}`", k.name()))?,
        });
    }
    Ok(SideBySide { tiga, hand_fwd, hand_bwd })
}

impl TigaRun {
    /// A table row with this run's times: the forward and backward after
    /// warm-up and the first calls, and the compile times (none for the
    /// macro's ahead-of-time variants: compiled with the bench).
    fn case(
        &self,
        case: &str,
        backend: &'static str,
        f: usize,
        (nodes, edges): (usize, usize),
        (model_bytes, model): (u64, String),
    ) -> Case {
        let aot = backend == "rust-aot";
        Case {
            case: case.into(),
            backend,
            f,
            nodes,
            edges,
            fwd_ms: Some(self.fwd_ms),
            bwd_ms: Some(self.bwd_ms),
            fwd_first_ms: Some(self.fwd_first),
            bwd_first_ms: Some(self.bwd_first),
            model_bytes,
            model,
            compile_ms: Some(if aot { 0.0 } else { self.compile_ms }),
            bwd_compile_ms: Some(self.bwd_compile_ms),
            ..Case::default()
        }
    }
}

/// Compares a baseline with tiga; more than 1e-3 relative is an error.
fn check(what: &str, got: &[f32], want: &[f32]) -> Result<Check, String> {
    if got.len() != want.len() {
        return Err(format!("{what}: hand-written result has {} values, tiga's {}", got.len(), want.len()));
    }
    let (mut max_abs, mut max_rel, mut worst) = (0.0f64, 0.0f64, 0usize);
    for (i, (&a, &b)) in got.iter().zip(want).enumerate() {
        let d = (f64::from(a) - f64::from(b)).abs();
        let d = if d.is_nan() { f64::INFINITY } else { d };
        let r = d / f64::from(b).abs().max(1.0);
        if r > max_rel {
            worst = i;
        }
        max_abs = max_abs.max(d);
        max_rel = max_rel.max(r);
    }
    if max_rel > 1e-3 {
        return Err(format!(
            "{what}: hand-written and tiga differ by {max_rel:.3e} relative (element {worst}: {} vs tiga {})",
            got[worst], want[worst]
        ));
    }
    Ok(Check { max_abs, max_rel })
}

/// Minimum-traffic models (bytes the forward pass must move at least; f32
/// values, u32 columns, u64 offsets; writes counted once, no write-allocate).
mod model {
    /// CSR stencil, scalar: each `x` value is read once from memory (the
    /// three grid rows in flight stay in cache, so the 4 gathers per node
    /// hit it), plus `col` (E·4), `offsets` ((N+1)·8) and `out` (N·4).
    pub fn stencil_csr(n: usize, e: usize) -> (u64, String) {
        let b = n * 4 + e * 4 + (n + 1) * 8 + n * 4;
        (b as u64, "x once N*4 (stencil reuse hits cache) + col E*4 + offsets (N+1)*8 + out N*4".into())
    }
    /// Generated stencil: no graph arrays, `x` read once and `out` written.
    pub fn stencil_generated(n: usize) -> (u64, String) {
        ((n * 8) as u64, "x once N*4 + out N*4 (no graph arrays)".into())
    }
    /// Power-law sum/mean/max of width F: every edge gathers a fresh row of
    /// `x` (E·F·4: the rows are far larger than the caches and the sources
    /// random), plus `col`, `offsets` and `out` (N·F·4).
    pub fn gather(n: usize, e: usize, f: usize) -> (u64, String) {
        let b = e * f * 4 + e * 4 + (n + 1) * 8 + n * f * 4;
        (b as u64, "x gather per edge E*F*4 + col E*4 + offsets (N+1)*8 + out N*F*4".into())
    }
    /// GAT: the same, plus the per-edge `a_src[j]` gather (E·4) and `a_dst` (N·4).
    pub fn gat(n: usize, e: usize, f: usize) -> (u64, String) {
        let b = e * f * 4 + e * 4 + e * 4 + n * 4 + (n + 1) * 8 + n * f * 4;
        (b as u64, "x gather E*F*4 + a_src gather E*4 + col E*4 + a_dst N*4 + offsets (N+1)*8 + out N*F*4".into())
    }
}

/// Where a run stands: the report so far and the errors to exit with.
struct Run {
    o: Opts,
    report: Report,
    errors: Vec<String>,
    avail: Option<peers::Availability>,
}

impl Run {
    fn fail(&mut self, e: String) {
        eprintln!("[bench] ERROR: {e}");
        self.errors.push(e);
    }

    fn checked(&mut self, what: &str, got: &[f32], want: &[f32]) -> Option<Check> {
        match check(what, got, want) {
            Ok(c) => {
                eprintln!("[bench]   {what}: max |hand - tiga| = {:.3e} (relative {:.3e})", c.max_abs, c.max_rel);
                Some(c)
            }
            Err(e) => {
                self.fail(e);
                None
            }
        }
    }

    /// Runs peers.py for these case indices of the report (those that name a
    /// peers.py case), on a graph directory written for them.
    fn peers_for(&mut self, idx: &[usize], g: &Graph, x: &[f32], f: usize, attention: Option<(&[f32], &[f32])>) {
        // One run per peer case: both back ends of a case share its peers.
        let mut cases: Vec<&'static str> = Vec::new();
        for c in idx.iter().filter_map(|&i| self.report.cases[i].peer_case) {
            if !cases.contains(&c) {
                cases.push(c);
            }
        }
        if cases.is_empty() {
            return;
        }
        let results = match &self.avail {
            None => {
                for &i in idx {
                    let c = &mut self.report.cases[i];
                    for (p, _) in peers::PEERS {
                        c.peers.insert(p.to_string(), Err("not run (--no-peers)".into()));
                    }
                }
                return;
            }
            Some(a) if !a.any() => peers::run(a, std::path::Path::new("."), &cases, 1, 1),
            Some(a) => {
                eprintln!("[bench] peers.py on {} (F={f}): {}", self.report.cases[idx[0]].case, cases.join(","));
                let a = a.clone();
                let dir = match peers::graph_dir(&format!("f{f}"), g, x, f, attention) {
                    Ok(d) => d,
                    Err(e) => return self.fail(e),
                };
                // PyTorch's gather/scatter takes seconds per call on the
                // power-law graph: at most PEER_REPEATS timed calls each.
                peers::run(&a, &dir.0, &cases, self.report.machine.threads, self.o.repeat.min(PEER_REPEATS))
            }
        };
        for &i in idx {
            let c = &mut self.report.cases[i];
            let Some(pc) = c.peer_case else { continue };
            for ((case, peer), r) in &results {
                if case == pc {
                    c.peers.insert(peer.clone(), r.clone());
                }
            }
        }
    }
}

fn stencil_group(run: &mut Run) -> Result<(), String> {
    let (want_csr, want_gen) = (run.o.wants("stencil-csr"), run.o.wants("stencil-generated"));
    if !want_csr && !want_gen {
        return Ok(());
    }
    let side = if run.o.quick { 500 } else { 2000 };
    let repeat = run.o.repeat;
    let t = Instant::now();
    let g = graphs::stencil(side).map_err(|e| e.to_string())?;
    let (n, e) = (g.num_dst(), g.num_edges());
    eprintln!("[bench] stencil {side}x{side}: {n} nodes, {e} edges ({:.0} ms)", t.elapsed().as_secs_f64() * 1e3);
    let x = graphs::uniform(n, run.o.seed);
    let gout = vec![1.0f32; n];
    // tiga runs even when only the generated case is asked for: its output
    // is what the generated loop is checked against.
    let k = kernel("Smoothing")?;
    let ins = Inputs::new().src("x", &x[..]);
    let mk = macro_kernel("Smoothing").filter(|m| m.aot_variant(DType::F32, &[]).is_some());
    let gt = g.transposed();
    let hand_fwd = || hand::csr_sum(&g, &x, 1, Post::Scale(0.25));
    let hand_bwd = || hand::csr_sum_backward(&g, &gt, &gout, 1, Post::Scale(0.25));
    eprintln!(
        "[bench] stencil-csr: tiga (cranelift{}){}",
        if mk.is_some() { ", rust-aot" } else { "" },
        if want_csr { " and hand-written, side by side" } else { "" }
    );
    let kernels: Vec<&Kernel> = std::iter::once(&k).chain(mk).collect();
    let sbs = side_by_side(
        &kernels,
        &g,
        &ins,
        "x",
        &[],
        repeat,
        want_csr.then_some(&hand_fwd as Hand<'_>),
        want_csr.then_some(&hand_bwd as Hand<'_>),
    )?;
    let mut runs = sbs.tiga.into_iter();
    let t = runs.next().ok_or("no cranelift run")?;
    if let (true, Some((hf, hout)), Some((hb, hgrad))) = (want_csr, &sbs.hand_fwd, &sbs.hand_bwd) {
        let (hf, hb) = (*hf, *hb);
        let check_fwd = run.checked("stencil-csr forward", hout, &t.out);
        let check_bwd = run.checked("stencil-csr backward", hgrad, &t.grad);
        run.report.cases.push(Case {
            hand_fwd_ms: Some(hf),
            hand_bwd_ms: Some(hb),
            check_fwd,
            check_bwd,
            peer_case: Some("scaled"),
            tigac: Some(tigac_timing(&g, &x, repeat)),
            ..t.case("stencil-csr", "cranelift", 1, (n, e), model::stencil_csr(n, e))
        });
        if let Some(Some(Ok((f, b)))) = run.report.cases.last().map(|c| c.tigac.clone()) {
            eprintln!(
                "[bench] stencil-csr: tigac run --timing: run {f:.2} ms, vjp {b:.2} ms (bench: {:.2} / {:.2} ms)",
                t.fwd_ms, t.bwd_ms
            );
        }
        // The macro (rustc/LLVM) back end on the same stencil.
        if let Some(a) = runs.next() {
            let check_aot = run.checked("stencil-csr forward (rust-aot vs cranelift)", &a.out, &t.out);
            run.report.cases.push(Case {
                hand_fwd_ms: Some(hf),
                hand_bwd_ms: Some(hb),
                check_fwd: check_aot,
                peer_case: Some("scaled"),
                ..a.case("stencil-csr", "rust-aot", 1, (n, e), model::stencil_csr(n, e))
            });
        }
    }
    if want_gen {
        // tiga's generated-stencil realization (neighbours from the
        // index): first call (the compile) alone, then side by side with
        // the hand-written forward in rounds.
        eprintln!("[bench] stencil-generated: tiga and hand-written, side by side");
        let st = tiga::Stencil2d {
            rows: side as u64,
            cols: side as u64,
            offsets: vec![(-1, 0), (1, 0), (0, -1), (0, 1)],
            periodic: false,
        };
        let before = variants();
        let t0 = Instant::now();
        let first = k.run(&st, &ins).map_err(|e| e.to_string())?;
        let gen_first = t0.elapsed().as_secs_f64() * 1e3;
        drop(first);
        let gen_compile = new_compile_ms(&before);
        // The macro's ahead-of-time stencil variant (the grid read at run
        // time) in the same rounds, when the macro compiled one.
        let aot = tiga::Schedule::new().backend(tiga::Backend::Aot);
        let mks = mk.filter(|m| m.aot_entry(DType::F32, &[], true, tiga::Backend::Aot).is_some());
        let mut contenders: Vec<Contender<'_>> = vec![
            Box::new(|| k.run(&st, &ins).map(Produced::Outputs).map_err(|e| e.to_string())),
            Box::new(|| Ok(Produced::Hand(hand::Out(hand::stencil_generated(side, &x))))),
        ];
        if let Some(m) = mks {
            let (aot, st, ins) = (&aot, &st, &ins);
            contenders.push(Box::new(move || m.run_with(st, ins, aot).map(Produced::Outputs).map_err(|e| e.to_string())));
        }
        let mut timed = time_rounds(repeat, &mut contenders)?;
        drop(contenders);
        let aot_fwd = if mks.is_some() { timed.pop() } else { None };
        let [(gen_ms, Produced::Outputs(gen_out)), (hf, Produced::Hand(hout))] =
            <[_; 2]>::try_from(timed).map_err(|_| "two contenders")?
        else {
            return Err("stencil-generated: unexpected results".into());
        };
        // The backward: the VJP on the generated stencil (source gradients
        // on its transpose) with a ones cotangent built once, side by side
        // with the hand-written backward (the same stencil on the
        // cotangent: it is symmetric).
        let ones = tiga::Tensor::from_f32(vec![n], gout.clone()).map_err(|e| e.to_string())?;
        let cot = [("out", ones.view())];
        let before = variants();
        let t0 = Instant::now();
        let first = k.vjp(&st, &ins, &cot).map_err(|e| e.to_string())?;
        let gen_bwd_first = t0.elapsed().as_secs_f64() * 1e3;
        drop(first);
        let gen_bwd_compile = new_compile_ms(&before);
        let mut contenders: Vec<Contender<'_>> = vec![
            Box::new(|| k.vjp(&st, &ins, &cot).map(Produced::Grads).map_err(|e| e.to_string())),
            Box::new(|| Ok(Produced::Hand(hand::Out(hand::stencil_generated(side, &gout))))),
        ];
        if let Some(m) = mks {
            let (aot, cot, st, ins) = (&aot, &cot, &st, &ins);
            contenders.push(Box::new(move || m.vjp_with(st, ins, cot, aot).map(Produced::Grads).map_err(|e| e.to_string())));
        }
        let mut timed = time_rounds(repeat, &mut contenders)?;
        drop(contenders);
        let aot_bwd = if mks.is_some() { timed.pop() } else { None };
        let [(gen_bwd_ms, Produced::Grads(gen_grad)), (hb, Produced::Hand(hgrad))] =
            <[_; 2]>::try_from(timed).map_err(|_| "two contenders")?
        else {
            return Err("stencil-generated backward: unexpected results".into());
        };
        let check_fwd = run.checked("stencil-generated forward (vs tiga stencil-csr)", &hout, &t.out);
        let check_bwd = run.checked("stencil-generated backward (vs tiga stencil-csr)", &hgrad, &t.grad);
        let gen_out = gen_out.out().and_then(|o| o.as_f32()).ok_or("no f32 output")?.to_vec();
        let check_gen = run.checked("tiga stencil-generated forward (vs tiga stencil-csr)", &gen_out, &t.out);
        let gen_grad = gen_grad.src("x").and_then(|g| g.as_f32()).ok_or("no f32 gradient of x")?.to_vec();
        let check_gen_bwd = run.checked("tiga stencil-generated backward (vs tiga stencil-csr)", &gen_grad, &t.grad);
        let (model_bytes, model) = model::stencil_generated(n);
        run.report.cases.push(Case {
            case: "stencil-generated".into(),
            f: 1,
            nodes: n,
            edges: e,
            fwd_ms: Some(gen_ms),
            bwd_ms: Some(gen_bwd_ms),
            fwd_first_ms: Some(gen_first),
            bwd_first_ms: Some(gen_bwd_first),
            model_bytes,
            model,
            compile_ms: Some(gen_compile),
            bwd_compile_ms: Some(gen_bwd_compile),
            hand_fwd_ms: Some(hf),
            hand_bwd_ms: Some(hb),
            check_fwd: check_gen.or(check_fwd),
            check_bwd: check_gen_bwd.or(check_bwd),
            ..Case::default()
        });
        if let (Some((af, Produced::Outputs(aout))), Some((ab, Produced::Grads(agrad)))) = (aot_fwd, aot_bwd) {
            let aout = aout.out().and_then(|o| o.as_f32()).ok_or("no f32 output")?.to_vec();
            let agrad = agrad.src("x").and_then(|g| g.as_f32()).ok_or("no f32 gradient of x")?.to_vec();
            let check_fwd = run.checked("stencil-generated forward (rust-aot vs cranelift)", &aout, &gen_out);
            let check_bwd = run.checked("stencil-generated backward (rust-aot vs cranelift)", &agrad, &gen_grad);
            let bits = |a: &[f32], b: &[f32]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
            if !bits(&aout, &gen_out) || !bits(&agrad, &gen_grad) {
                run.fail("stencil-generated: rust-aot and cranelift differ in bits".into());
            }
            eprintln!(
                "[bench] stencil-generated: fwd cranelift {gen_ms:.2} ms, rust-aot {af:.2} ms ({:.2}x); bwd cranelift {gen_bwd_ms:.2} ms, rust-aot {ab:.2} ms ({:.2}x)",
                af / gen_ms,
                ab / gen_bwd_ms
            );
            let (model_bytes, model) = model::stencil_generated(n);
            run.report.cases.push(Case {
                case: "stencil-generated".into(),
                backend: "rust-aot",
                f: 1,
                nodes: n,
                edges: e,
                fwd_ms: Some(af),
                bwd_ms: Some(ab),
                model_bytes,
                model,
                hand_fwd_ms: Some(hf),
                hand_bwd_ms: Some(hb),
                check_fwd,
                check_bwd,
                ..Case::default()
            });
        }
    }
    if want_csr {
        let i = run.report.cases.iter().position(|c| c.case == "stencil-csr").into_iter().collect::<Vec<_>>();
        run.peers_for(&i, &g, &x, 1, None);
    }
    Ok(())
}

/// One power-law case: which kernel, which hand-written loops.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Pl {
    Sum,
    Mean,
    Max,
    Gat,
}

impl Pl {
    fn name(self) -> &'static str {
        match self {
            Pl::Sum => "powerlaw-sum",
            Pl::Mean => "powerlaw-mean",
            Pl::Max => "powerlaw-max",
            Pl::Gat => "powerlaw-gat",
        }
    }
    fn kernel(self) -> &'static str {
        match self {
            Pl::Sum => "VecSum",
            Pl::Mean => "SageMean",
            Pl::Max => "MaxPool",
            Pl::Gat => "GatAttention",
        }
    }
    fn peer_case(self) -> &'static str {
        match self {
            Pl::Sum => "sum",
            Pl::Mean => "mean",
            Pl::Max => "max",
            Pl::Gat => "gat",
        }
    }
}

struct PlInputs<'a> {
    g: &'a Graph,
    x: &'a [f32],
    f: usize,
    a_src: &'a [f32],
    a_dst: &'a [f32],
    gout: &'a [f32],
}

impl PlInputs<'_> {
    fn inputs(&self, which: Pl) -> Result<Inputs<'_>, String> {
        let h = TensorView::from_slice_f32(vec![self.g.num_src(), self.f], self.x).map_err(|e| e.to_string())?;
        let ins = Inputs::new().src("h", h);
        Ok(if which == Pl::Gat { ins.src("a_src", self.a_src).dst("a_dst", self.a_dst) } else { ins })
    }

    fn hand_fwd(&self, which: Pl) -> Result<Vec<f32>, String> {
        match which {
            Pl::Sum => hand::csr_sum(self.g, self.x, self.f, Post::None),
            Pl::Mean => hand::csr_sum(self.g, self.x, self.f, Post::Mean),
            Pl::Max => hand::csr_max_relu(self.g, self.x, self.f),
            Pl::Gat => hand::csr_gat(self.g, self.x, self.a_src, self.a_dst, self.f),
        }
    }

    fn hand_bwd(&self, which: Pl) -> Option<Result<Vec<f32>, String>> {
        let gt = self.g.transposed();
        match which {
            Pl::Sum => Some(hand::csr_sum_backward(self.g, &gt, self.gout, self.f, Post::None)),
            Pl::Mean => Some(hand::csr_sum_backward(self.g, &gt, self.gout, self.f, Post::Mean)),
            Pl::Max => Some(hand::csr_max_relu_backward(self.g, self.x, self.gout, self.f)),
            Pl::Gat => None,
        }
    }
}

fn powerlaw_case(run: &mut Run, p: &PlInputs<'_>, which: Pl) -> Result<(), String> {
    let (n, e, f, repeat) = (p.g.num_dst(), p.g.num_edges(), p.f, run.o.repeat);
    let k = kernel(which.kernel())?;
    let mk = macro_kernel(which.kernel()).filter(|m| m.aot_variant(DType::F32, &[f]).is_some());
    let ins = p.inputs(which)?;
    let hand_fwd = || p.hand_fwd(which);
    let hand_bwd = || p.hand_bwd(which).unwrap_or_else(|| Err("no backward".into()));
    let has_hand_bwd = matches!(which, Pl::Sum | Pl::Mean | Pl::Max);
    eprintln!(
        "[bench] {} F={f}: tiga (cranelift{}) and hand-written, side by side",
        which.name(),
        if mk.is_some() { ", rust-aot" } else { "" }
    );
    let kernels: Vec<&Kernel> = std::iter::once(&k).chain(mk).collect();
    let sbs = side_by_side(
        &kernels,
        p.g,
        &ins,
        "h",
        &[f],
        repeat,
        Some(&hand_fwd as Hand<'_>),
        has_hand_bwd.then_some(&hand_bwd as Hand<'_>),
    )?;
    let mut runs = sbs.tiga.into_iter();
    let t = runs.next().ok_or("no cranelift run")?;
    eprintln!("[bench] {} F={f}: cranelift fwd {:.2} ms, bwd {:.2} ms", which.name(), t.fwd_ms, t.bwd_ms);
    let (hf, hout) = sbs.hand_fwd.ok_or("no hand-written forward")?;
    let check_fwd = run.checked(&format!("{} F={f} forward", which.name()), &hout, &t.out);
    drop(hout);
    let (mut hand_bwd_ms, mut check_bwd, mut hand_bwd_absent) = (None, None, None);
    if let Some((hb, hgrad)) = sbs.hand_bwd {
        hand_bwd_ms = Some(hb);
        check_bwd = run.checked(&format!("{} F={f} backward", which.name()), &hgrad, &t.grad);
    } else {
        hand_bwd_absent = Some(
            "not hand-written: only the sum and mean backward (a pull over the transposed CSR) and max's \
             (a lane-split scatter of each row's winners) are; gat needs the softmax's adjoint"
                .to_string(),
        );
    }
    let model = if which == Pl::Gat { model::gat(n, e, f) } else { model::gather(n, e, f) };
    run.report.cases.push(Case {
        hand_fwd_ms: Some(hf),
        hand_bwd_ms,
        hand_bwd_absent,
        check_fwd,
        check_bwd,
        peer_case: Some(which.peer_case()),
        ..t.case(which.name(), "cranelift", f, (n, e), model.clone())
    });
    // The macro (rustc/LLVM) back end, where it has a variant for this width.
    if let Some(a) = runs.next() {
        eprintln!("[bench] {} F={f}: rust-aot fwd {:.2} ms, bwd {:.2} ms", which.name(), a.fwd_ms, a.bwd_ms);
        let check_aot = run.checked(&format!("{} F={f} forward (rust-aot vs cranelift)", which.name()), &a.out, &t.out);
        run.report.cases.push(Case {
            hand_fwd_ms: Some(hf),
            hand_bwd_ms,
            check_fwd: check_aot,
            peer_case: Some(which.peer_case()),
            ..a.case(which.name(), "rust-aot", f, (n, e), model)
        });
    }
    Ok(())
}

/// Rounds of the thread-scaling measurement: every thread count once per
/// round, so that they share the machine's drifting speed (this machine's
/// speed moves by half within a minute; measured one after the other, the
/// same build's 1 -> 2 thread speedup read 1.86 in one run and 1.37 in the
/// next).
const SCALING_ROUNDS: usize = 3;

/// powerlaw-sum at 1 and 2 threads (and at the run's thread count when it
/// is neither), each in its own rayon pool, both back ends and the
/// hand-written loop side by side, the thread counts taking turns over
/// [`SCALING_ROUNDS`] rounds; each figure is the median over the rounds of
/// each round's median.
fn scaling(run: &mut Run, p: &PlInputs<'_>) -> Result<(), String> {
    let k = kernel(Pl::Sum.kernel())?;
    let mk = macro_kernel(Pl::Sum.kernel()).filter(|m| m.aot_variant(DType::F32, &[p.f]).is_some());
    let kernels: Vec<&Kernel> = std::iter::once(&k).chain(mk).collect();
    let ins = p.inputs(Pl::Sum)?;
    let repeat = run.o.repeat.div_ceil(SCALING_ROUNDS).max(3);
    let mut counts = vec![1, 2];
    if !counts.contains(&run.report.machine.threads) {
        counts.push(run.report.machine.threads);
    }
    let pools = counts
        .iter()
        .map(|&t| rayon::ThreadPoolBuilder::new().num_threads(t).build().map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, String>>()?;
    // Per thread count, one row per round.
    let mut seen: Vec<Vec<report::ScalingRow>> = vec![Vec::new(); counts.len()];
    for round in 0..SCALING_ROUNDS {
        for (i, (&threads, pool)) in counts.iter().zip(&pools).enumerate() {
            eprintln!("[bench] scaling: powerlaw-sum F={} at {threads} thread(s), round {}/{SCALING_ROUNDS}", p.f, round + 1);
            let r = pool.install(|| -> Result<report::ScalingRow, String> {
                let hand_fwd = || p.hand_fwd(Pl::Sum);
                let sbs = side_by_side(&kernels, p.g, &ins, "h", &[p.f], repeat, Some(&hand_fwd as Hand<'_>), None)?;
                let cl = sbs.tiga.first().ok_or("no tiga run")?;
                let aot = sbs.tiga.get(1);
                Ok(report::ScalingRow {
                    threads,
                    fwd_ms: cl.fwd_ms,
                    bwd_ms: cl.bwd_ms,
                    aot_fwd_ms: aot.map(|a| a.fwd_ms),
                    aot_bwd_ms: aot.map(|a| a.bwd_ms),
                    hand_fwd_ms: sbs.hand_fwd.ok_or("no hand-written run")?.0,
                })
            })?;
            seen[i].push(r);
        }
    }
    // The median over the rounds of each figure.
    let rows = counts
        .iter()
        .zip(&seen)
        .map(|(&threads, rounds)| {
            let med = |f: fn(&report::ScalingRow) -> Option<f64>| {
                let v: Vec<f64> = rounds.iter().filter_map(f).collect();
                (!v.is_empty()).then(|| median(v))
            };
            report::ScalingRow {
                threads,
                fwd_ms: med(|r| Some(r.fwd_ms)).unwrap_or(f64::NAN),
                bwd_ms: med(|r| Some(r.bwd_ms)).unwrap_or(f64::NAN),
                aot_fwd_ms: med(|r| r.aot_fwd_ms),
                aot_bwd_ms: med(|r| r.aot_bwd_ms),
                hand_fwd_ms: med(|r| Some(r.hand_fwd_ms)).unwrap_or(f64::NAN),
            }
        })
        .collect();
    run.report.scaling = Some(report::Scaling { case: Pl::Sum.name().into(), f: p.f, rounds: SCALING_ROUNDS, repeat, rows });
    Ok(())
}

fn powerlaw_group(run: &mut Run) -> Result<(), String> {
    let want: Vec<Pl> = [Pl::Sum, Pl::Mean, Pl::Max, Pl::Gat].into_iter().filter(|w| run.o.wants(w.name())).collect();
    if want.is_empty() {
        return Ok(());
    }
    let (nodes, edges) = if run.o.quick { (62_500, 1_000_000) } else { (1_000_000, 16_000_000) };
    let t = Instant::now();
    let g = graphs::powerlaw(nodes, edges, run.o.seed).map_err(|e| e.to_string())?;
    let max_in = g.offsets().windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    let mut out_deg = vec![0u32; nodes];
    g.cols().iter().for_each(|&c| out_deg[c as usize] += 1);
    let max_out = out_deg.iter().max().copied().unwrap_or(0);
    drop(out_deg);
    eprintln!(
        "[bench] power-law graph: {nodes} nodes, {edges} edges, max in-degree {max_in}, max out-degree {max_out} ({:.0} ms)",
        t.elapsed().as_secs_f64() * 1e3
    );
    run.report.notes.push(format!(
        "power-law graph: {nodes} nodes, {edges} edges; largest in-degree {max_in}, largest out-degree {max_out} \
         (the backward's transposed rows inherit the Zipf skew)"
    ));
    let a_src = graphs::normal(nodes, run.o.seed + 2);
    let a_dst = graphs::normal(nodes, run.o.seed + 3);
    // (F, cases at this width)
    let plan: Vec<(usize, Vec<Pl>)> = vec![
        (64, want.clone()),
        (16, want.iter().copied().filter(|&w| w == Pl::Sum).collect()),
        (128, want.iter().copied().filter(|&w| w == Pl::Sum).collect()),
    ];
    for (f, cases) in plan {
        if cases.is_empty() {
            continue;
        }
        let x = graphs::uniform(nodes * f, run.o.seed + f as u64);
        let gout = vec![1.0f32; nodes * f];
        let p = PlInputs { g: &g, x: &x, f, a_src: &a_src, a_dst: &a_dst, gout: &gout };
        let first = run.report.cases.len();
        for &which in &cases {
            if let Err(e) = powerlaw_case(run, &p, which) {
                run.fail(format!("{} F={f}: {e}", which.name()));
            }
        }
        if f == 64 && run.o.scaling && cases.contains(&Pl::Sum) {
            if let Err(e) = scaling(run, &p) {
                run.fail(format!("scaling: {e}"));
            }
        }
        let idx: Vec<usize> = (first..run.report.cases.len()).collect();
        let attention = cases.contains(&Pl::Gat).then_some((&a_src[..], &a_dst[..]));
        run.peers_for(&idx, &g, &x, f, attention);
    }
    Ok(())
}

fn real_main(o: Opts) -> Result<ExitCode, String> {
    if let Some(t) = o.threads {
        rayon::ThreadPoolBuilder::new().num_threads(t).build_global().map_err(|e| e.to_string())?;
    }
    let threads = rayon::current_num_threads();
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let load_avg =
        std::fs::read_to_string("/proc/loadavg").ok().map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
    eprintln!("[bench] {threads} threads, load average {}", load_avg.as_deref().unwrap_or("?"));
    let stream_mib = 256;
    let (stream, stream_median) = hand::stream_copy_gbs(stream_mib);
    eprintln!("[bench] STREAM copy: best {stream:.1} GB/s, median {stream_median:.1} GB/s");
    let avail = if o.peers {
        let a = peers::detect(&o.peers_script);
        // Which peers are missing, grouped by reason (a missing script or
        // python3 takes them all).
        let mut missing: Vec<(&str, Vec<&str>)> = Vec::new();
        for (p, r) in &a.peers {
            if let Err(why) = r {
                match missing.iter_mut().find(|(w, _)| w == why) {
                    Some((_, who)) => who.push(p),
                    None => missing.push((why, vec![p])),
                }
            }
        }
        for (why, who) in &missing {
            let (s, list) = if who.len() == 1 { ("", who[0].to_string()) } else { ("s", who.join(", ")) };
            eprintln!("[bench] peer{s} {list} missing: {why}");
        }
        if !a.any() {
            eprintln!("[bench] no peer can run: the table lists them as missing");
        }
        Some(a)
    } else {
        None
    };
    let json = o.json.clone();
    let mut run = Run {
        report: Report {
            machine: report::Machine {
                threads,
                cpus,
                stream_copy_gbs: stream,
                stream_copy_median_gbs: stream_median,
                stream_mib,
                hand_isa: hand::isa().to_string(),
                quick: o.quick,
                repeat: o.repeat,
                load_avg,
            },
            ..Report::default()
        },
        o,
        errors: Vec::new(),
        avail,
    };
    run.report.notes.push(
        "tiga times include what a call does (binding, output allocation; for the backward the stages and the \
         per-input sums); the backward is the VJP with a cotangent of ones built once outside the clock, as the \
         hand-written backward gets it (Kernel::grad, which builds it per call, adds one write of the output's size)"
            .into(),
    );
    if let Err(e) = stencil_group(&mut run) {
        run.fail(format!("stencil: {e}"));
    }
    if let Err(e) = powerlaw_group(&mut run) {
        run.fail(format!("power-law: {e}"));
    }
    print!("{}", run.report.table());
    run.report.write_json(&json)?;
    println!("wrote {}", json.display());
    if run.errors.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        for e in &run.errors {
            eprintln!("tiga-bench: error: {e}");
        }
        Ok(ExitCode::FAILURE)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Paged(args)) => return paged::main(&args),
        Some(Command::Renumber(args)) => return renumber::main(&args),
        Some(Command::CompileTime(args)) => return compile_time::main(&args),
        Some(Command::Sharded(args)) => return sharded::main(&args),
        Some(Command::Gpu(args)) => return gpu::main(&args),
        Some(Command::GraphStore(args)) => return graph_store::main(&args),
        Some(Command::Partitioned(args)) => return partitioned::main(&args),
        Some(Command::Half(args)) => return half::main(&args),
        Some(Command::Residuals(args)) => return residuals::main(&args),
        Some(Command::Dense(args)) => return dense::main(&args),
        Some(Command::Python(args)) => return python::main(&args),
        None => {}
    }
    match real_main(cli.bench.into()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tiga-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The same graph and kernel through `tigac run --timing` (the binary next to
/// this one), so the CLI's kernel times can be compared with the bench's.
fn tigac_timing(g: &Graph, x: &[f32], repeat: usize) -> Result<(f64, f64), String> {
    use std::io::Write as _;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let tigac = exe.with_file_name("tigac");
    if !tigac.exists() {
        return Err(format!("{} not built (cargo build --release -p tigac)", tigac.display()));
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let edges = dir.path().join("edges.txt");
    {
        let f = std::fs::File::create(&edges).map_err(|e| e.to_string())?;
        let mut w = std::io::BufWriter::new(f);
        let (src, dst) = g.coo_in_user_order();
        for (s, d) in src.iter().zip(&dst) {
            writeln!(w, "{s} {d}").map_err(|e| e.to_string())?;
        }
        w.flush().map_err(|e| e.to_string())?;
    }
    let xp = dir.path().join("x.npy");
    tiga::write_npy(&xp, &tiga::TensorView::from(x)).map_err(|e| e.to_string())?;
    let kfile = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/kernels/gnn.rs");
    let out = std::process::Command::new(&tigac)
        .arg("run")
        .arg(&kfile)
        .args(["--kernel", "Smoothing", "--graph"])
        .arg(&edges)
        .arg("--num-nodes")
        .arg(g.num_dst().to_string())
        .arg("--src")
        .arg(format!("x={}", xp.display()))
        .arg("--out")
        .arg(dir.path().join("o.npy"))
        .arg("--grads")
        .arg(dir.path().join("grads"))
        .args(["--repeat", &(repeat + WARM_UPS).to_string(), "--timing"])
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("tigac failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let line = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(line.trim()).map_err(|e| format!("tigac --timing output: {e}"))?;
    let f = v["run_ms_median"].as_f64().ok_or("no run_ms_median")?;
    let b = v["vjp_ms_median"].as_f64().ok_or("no vjp_ms_median")?;
    Ok((f, b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use std::path::Path;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("tiga-bench").chain(args.iter().copied()))
    }

    fn opts(args: &[&str]) -> Opts {
        let cli = parse(args).expect("parses");
        assert!(cli.command.is_none(), "no subcommand");
        cli.bench.into()
    }

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults() {
        let o = opts(&[]);
        assert!(!o.quick);
        assert_eq!(o.repeat, 7);
        assert_eq!(o.threads, None);
        assert_eq!(o.json, PathBuf::from("target/bench/bench.json"));
        assert!(o.peers && o.scaling);
        assert_eq!(o.peers_script, Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/peers.py"));
        assert!(o.peers_script.exists(), "the benchmark's own peers.py");
        assert_eq!(o.cases, None);
        assert_eq!(o.seed, 7);
        assert_eq!(opts(&["--quick"]).repeat, 3);
        assert_eq!(opts(&["--quick", "--repeat", "5"]).repeat, 5);
    }

    #[test]
    fn every_flag() {
        let o = opts(&[
            "--repeat",
            "4",
            "--threads",
            "2",
            "--json",
            "out.json",
            "--cases",
            "powerlaw-sum,,stencil-csr",
            "--no-peers",
            "--peers-script",
            "elsewhere/peers.py",
            "--no-scaling",
            "--seed",
            "11",
        ]);
        assert_eq!((o.repeat, o.threads, o.seed), (4, Some(2), 11));
        assert_eq!(o.json, PathBuf::from("out.json"));
        assert_eq!(o.cases, Some(vec!["powerlaw-sum".to_string(), "stencil-csr".to_string()]));
        assert!(!o.peers && !o.scaling);
        assert_eq!(o.peers_script, PathBuf::from("elsewhere/peers.py"));
        assert!(o.wants("stencil-csr") && !o.wants("powerlaw-gat"));
        // The last of a repeated flag wins.
        assert_eq!(opts(&["--seed", "1", "--seed", "2"]).seed, 2);
    }

    #[test]
    fn bad_values_are_errors() {
        for bad in [
            &["--cases", "nope"][..],
            &["--cases", "powerlaw-sum,nope"],
            &["--repeat", "0"],
            &["--repeat", "x"],
            &["--threads", "0"],
            &["--seed", "-1"],
            &["--json"],
            &["--bogus"],
            &["--quick", "paged"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should not parse");
        }
        let e = parse(&["--cases", "nope"]).expect_err("unknown case").to_string();
        assert!(e.contains("unknown case `nope`") && e.contains("powerlaw-gat"), "{e}");
    }

    #[test]
    fn paged_subcommand() {
        let Some(Command::Paged(a)) = parse(&["paged"]).expect("parses").command else { panic!("paged") };
        let o = paged::Opts::from(&a);
        assert_eq!(o.side, 2000);
        assert_eq!((o.json.to_str(), o.table.to_str()), (Some("target/bench/paged.json"), Some("target/bench/paged.txt")));
        assert!(o.dir.is_none() && !o.keep && o.threads.is_none());
        let Some(Command::Paged(a)) = parse(&["paged", "--quick"]).expect("parses").command else { panic!("paged") };
        assert_eq!(paged::Opts::from(&a).side, 500);
        let args = ["paged", "--quick", "--side", "64", "--json", "j", "--table", "t", "--dir", "d", "--keep", "--threads", "3"];
        let Some(Command::Paged(a)) = parse(&args).expect("parses").command else { panic!("paged") };
        let o = paged::Opts::from(&a);
        assert_eq!((o.side, o.keep, o.threads), (64, true, Some(3)));
        assert_eq!((o.json, o.table, o.dir), (PathBuf::from("j"), PathBuf::from("t"), Some(PathBuf::from("d"))));
        for bad in [&["paged", "--side", "0"][..], &["paged", "--threads", "0"], &["paged", "--repeat", "3"], &["paged", "x"]] {
            assert!(parse(bad).is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn sharded_subcommand() {
        let Some(Command::Sharded(a)) = parse(&["sharded"]).expect("parses").command else { panic!("sharded") };
        let o = sharded::Opts::from(&a);
        assert_eq!((o.sizes.side, o.sizes.nodes, o.sizes.edges, o.sizes.width), (2000, 250_000, 4_000_000, 64));
        assert_eq!((o.rounds, o.sizes.steps, o.sizes.warmup, o.sizes.exchanges), (3, 7, 3, 7));
        assert_eq!((o.json.to_str(), o.table.to_str()), (Some("target/bench/sharded.json"), Some("target/bench/sharded.txt")));
        assert!(o.mpi);
        let Some(Command::Sharded(a)) = parse(&["sharded", "--quick", "--no-mpi"]).expect("parses").command else {
            panic!("sharded")
        };
        let o = sharded::Opts::from(&a);
        assert_eq!((o.sizes.side, o.sizes.nodes, o.sizes.edges), (500, 31_250, 500_000));
        assert!(!o.mpi);
        for bad in [
            &["sharded", "--steps", "0"][..],
            &["sharded", "--rounds", "0"],
            &["sharded", "--width", "x"],
            &["sharded", "--mpi-worker", "stencil"],
            &["sharded", "--mpi-worker", "nope", "--reference", "r.npy"],
            &["sharded", "--partition", "nope"],
            &["sharded", "x"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should not parse");
        }
    }
}
