//! `tiga-bench residuals`: the backward of max, min and GAT with and
//! without the residuals its forward kept, against the forward, on the
//! power-law graph at F = 64.
//!
//! The recomputing backward's first stage refolds every row over the
//! forward graph (as costly as the forward) to find a max/min's winning
//! edges or a softmax's row maximum and denominator. A forward that keeps
//! them (`Schedule::residuals`, `Kernel::forward`) writes them per row and
//! the backward (`Kernel::vjp_taped`) reads them instead. Per kernel and
//! back end (the Cranelift JIT through the kernel file; rustc/LLVM through
//! the macro's ahead-of-time variants, `Backend::Aot`), four calls are
//! timed side by side in rounds: the plain forward, the forward keeping
//! residuals, the recomputing backward and the backward from the
//! residuals (the gradient of `out.sum()` with respect to every field).
//! Outputs and gradients are compared bit for bit (a difference fails the
//! run). The target: the backward from residuals at most 2.5× the forward
//! that kept them, for max, min and GAT on both back ends. A table goes to
//! stdout (and `--table`), the JSON to `--json`.
//!
//! The peers that have these cases time them on the same graph and fields
//! (`bench/peers/peers.py`: PyG-style gather/scatter for max and GAT; no
//! peer there has a min, and SciPy and `torch.sparse` have neither): their
//! forward and their forward+backward step (autograd, the gradient of
//! `out.sum()` with respect to the source features), set beside tiga's step
//! with residuals (forward keeping them, then the backward from them).
//! Their max is `scatter_reduce("amax")` of the gathered rows, MaxPool's
//! relu aside.
//!
//! ```sh
//! cargo run --release -p tiga-bench -- residuals [--quick] [--repeat N] [--json PATH] [--table PATH] [--no-peers]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{json, Value};
use tiga::{Backend, DType, Graph, Inputs, Kernel, Schedule, Tensor, TensorView};

use crate::graphs;
use crate::timing::{Contender, Produced, WARM_UPS};

/// The target: backward from residuals over the forward that kept them.
const TARGET: f64 = 2.5;

/// A min pooling kernel beside gnn.rs's max and GAT (gnn.rs has no min).
const MIN_POOL: &str = include_str!("../../examples/kernels/min_pool.rs");

/// The same, through the macro (its ahead-of-time variants).
#[allow(clippy::all)]
mod min_pool {
    use tiga::message_passing;
    include!("../../examples/kernels/min_pool.rs");
}

/// `tiga-bench residuals`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// A 16x smaller graph (62,500 nodes, 1M edges), 3 repeats unless --repeat
    #[arg(long)]
    quick: bool,
    /// Timed rounds after 3 warm-ups [default: 7, or 3 with --quick]
    #[arg(long, value_name = "N", value_parser = crate::timing::positive)]
    repeat: Option<usize>,
    /// Feature width
    #[arg(long, value_name = "F", default_value_t = 64, value_parser = crate::timing::positive)]
    width: usize,
    /// Where the JSON goes, written atomically
    #[arg(long, value_name = "PATH", default_value = "target/bench/residuals.json")]
    json: PathBuf,
    /// Where the table goes too (besides stdout)
    #[arg(long, value_name = "PATH")]
    table: Option<PathBuf>,
    /// Graph and field seed
    #[arg(long, value_name = "N", default_value_t = 7)]
    seed: u64,
    /// Skip the Python peers
    #[arg(long)]
    no_peers: bool,
    /// The peers script [default: bench/peers/peers.py of this checkout]
    #[arg(long, value_name = "P", default_value_os_t = crate::timing::default_peers_script())]
    peers_script: PathBuf,
}

/// The peers.py cases among this benchmark's.
const PEER_CASES: [&str; 2] = ["max", "gat"];

/// One kernel on one back end.
struct Row {
    case: &'static str,
    kernel: &'static str,
    backend: &'static str,
    residuals: Vec<String>,
    residual_bytes: u64,
    fwd_ms: f64,
    fwd_keep_ms: f64,
    bwd_recompute_ms: f64,
    bwd_saved_ms: f64,
}

impl Row {
    fn ratio(&self) -> f64 {
        self.bwd_saved_ms / self.fwd_keep_ms
    }
    fn met(&self) -> bool {
        self.ratio() <= TARGET
    }
    fn json(&self) -> Value {
        json!({
            "case": self.case,
            "kernel": self.kernel,
            "backend": self.backend,
            "residuals": self.residuals,
            "residual_bytes": self.residual_bytes,
            "fwd_ms": self.fwd_ms,
            "fwd_keeping_residuals_ms": self.fwd_keep_ms,
            "bwd_recompute_ms": self.bwd_recompute_ms,
            "bwd_from_residuals_ms": self.bwd_saved_ms,
            "bwd_recompute_over_fwd": self.bwd_recompute_ms / self.fwd_ms,
            "bwd_from_residuals_over_fwd": self.bwd_saved_ms / self.fwd_ms,
            "bwd_from_residuals_over_fwd_keeping": self.ratio(),
            "step_speedup": (self.fwd_ms + self.bwd_recompute_ms) / (self.fwd_keep_ms + self.bwd_saved_ms),
            "target": { "bwd_from_residuals_over_fwd_keeping": TARGET, "value": self.ratio(), "met": self.met() },
        })
    }
}

pub fn main(args: &Args) -> ExitCode {
    match run(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(2),
        Err(e) => {
            eprintln!("tiga-bench residuals: {e}");
            ExitCode::FAILURE
        }
    }
}

fn bits_equal(a: &Tensor, b: &Tensor) -> bool {
    a.shape() == b.shape() && a.to_f64_vec().iter().zip(b.to_f64_vec()).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Times the four calls of one kernel on one back end, side by side.
fn measure(
    case: &'static str,
    k: &Kernel,
    backend: &'static str,
    schedule: &Schedule,
    g: &Graph,
    ins: &Inputs<'_>,
    repeat: usize,
) -> Result<Row, String> {
    let e = |e: tiga::Error| format!("{case} ({backend}): {e}");
    let keeping = schedule.clone().residuals(true);
    let shape = k.output_shapes(g, ins).map_err(e)?.into_iter().find(|(n, _)| n == "out").ok_or("no output `out`")?.1;
    let ones = Tensor::from_f32(shape.clone(), vec![1.0; shape.iter().product()]).map_err(|er| er.to_string())?;
    let cot = [("out", ones.view())];
    let (kept_out, tape) = k.forward(g, ins, &keeping).map_err(e)?;
    if tape.is_empty() {
        return Err(format!("{case}: kernel `{}` kept no residuals", k.name()));
    }
    let mut fwd: Vec<Contender<'_>> = vec![
        Box::new(|| k.run_with(g, ins, schedule).map(Produced::Outputs).map_err(e)),
        Box::new(|| k.forward(g, ins, &keeping).map(|(o, _)| Produced::Outputs(o)).map_err(e)),
        Box::new(|| k.vjp_with(g, ins, &cot, schedule).map(Produced::Grads).map_err(e)),
        Box::new(|| k.vjp_taped(g, ins, &tape, &cot, schedule).map(Produced::Grads).map_err(e)),
    ];
    let timed = crate::timing::time_rounds(repeat, &mut fwd)?;
    let ms: Vec<f64> = timed.iter().map(|(t, _)| *t).collect();
    let mut it = timed.into_iter().map(|(_, p)| p);
    let (Some(Produced::Outputs(plain)), Some(Produced::Outputs(kept)), Some(Produced::Grads(gr)), Some(Produced::Grads(gs))) =
        (it.next(), it.next(), it.next(), it.next())
    else {
        return Err(format!("{case}: a call produced the wrong kind of result"));
    };
    for ((n, a), (_, b)) in plain.items.iter().zip(&kept.items).chain(plain.items.iter().zip(&kept_out.items)) {
        if !bits_equal(a, b) {
            return Err(format!(
                "{case} ({backend}): output `{n}` of the forward keeping residuals differs from the plain forward's"
            ));
        }
    }
    for ((r, n, a), (_, _, b)) in gr.items.iter().zip(&gs.items) {
        if !bits_equal(a, b) {
            return Err(format!(
                "{case} ({backend}): gradient {}.{n} from residuals differs from the recomputing backward's",
                r.name()
            ));
        }
    }
    let row = Row {
        case,
        kernel: match case {
            "max" => "MaxPool",
            "min" => "MinPool",
            _ => "GatAttention",
        },
        backend,
        residuals: tape.residuals().map(|(n, _)| n.to_string()).collect(),
        residual_bytes: tape.bytes(),
        fwd_ms: ms[0],
        fwd_keep_ms: ms[1],
        bwd_recompute_ms: ms[2],
        bwd_saved_ms: ms[3],
    };
    eprintln!(
        "[bench] residuals {case} ({backend}): fwd {:.1} ms, keeping {:.1} ms; bwd recompute {:.1} ms, from residuals {:.1} ms ({:.2}x the forward that kept them)",
        row.fwd_ms,
        row.fwd_keep_ms,
        row.bwd_recompute_ms,
        row.bwd_saved_ms,
        row.ratio()
    );
    Ok(row)
}

fn run(args: &Args) -> Result<bool, String> {
    let (nodes, edges) = if args.quick { (62_500, 1_000_000) } else { (1_000_000, 16_000_000) };
    let repeat = args.repeat.unwrap_or(if args.quick { 3 } else { 7 });
    let f = args.width;
    eprintln!("[bench] residuals: power-law graph, {nodes} nodes, {edges} edges, F = {f}");
    let g = graphs::powerlaw(nodes, edges, args.seed).map_err(|e| e.to_string())?;
    let h = graphs::normal(nodes * f, args.seed + 1);
    let a_src = graphs::normal(nodes, args.seed + 2);
    let a_dst = graphs::normal(nodes, args.seed + 3);
    let hv = TensorView::from_slice_f32(vec![nodes, f], &h).map_err(|e| e.to_string())?;
    let gnn = include_str!("../../examples/kernels/gnn.rs");
    let file = |src: &str, name: &str| Kernel::from_source(src, name).map_err(|e| format!("{name}: {e}"));
    let cases: Vec<(&'static str, Kernel, &'static Kernel)> = vec![
        ("max", file(gnn, "MaxPool")?, crate::kernels::gnn::MaxPool::kernel()),
        ("min", file(MIN_POOL, "MinPool")?, min_pool::MinPool::kernel()),
        ("gat", file(gnn, "GatAttention")?, crate::kernels::gnn::GatAttention::kernel()),
    ];
    let mut rows = Vec::new();
    for (case, jit, aot) in &cases {
        let ins = Inputs::new().src("h", hv.clone());
        let ins = if *case == "gat" { ins.src("a_src", &a_src).dst("a_dst", &a_dst) } else { ins };
        rows.push(measure(case, jit, "cranelift", &Schedule::new().backend(Backend::Jit), &g, &ins, repeat)?);
        if aot.aot_variant(DType::F32, &[f]).is_some() {
            rows.push(measure(case, aot, "rust-aot", &Schedule::new().backend(Backend::Aot), &g, &ins, repeat)?);
        }
    }
    let peers = if args.no_peers {
        Err("not run (--no-peers)".to_string())
    } else {
        run_peers(args, &g, &h, f, (&a_src, &a_dst), repeat.min(crate::timing::PEER_REPEATS))
    };
    let mut table = String::new();
    table.push_str(&format!(
        "backward with and without saved residuals: power-law graph, {nodes} nodes, {edges} edges, F = {f}, f32, {} thread(s), median of {repeat} after {WARM_UPS} warm-ups\n\n",
        rayon::current_num_threads()
    ));
    table.push_str(&format!(
        "{:<5} {:<10} {:>9} {:>9} {:>11} {:>11} {:>9} {:>9} {:>9} {:>8}  {}\n",
        "case",
        "backend",
        "fwd ms",
        "fwd+res",
        "bwd recomp",
        "bwd saved",
        "recomp/f",
        "saved/f+",
        "residMiB",
        "step x",
        "target saved/f+ <= 2.5"
    ));
    for r in &rows {
        table.push_str(&format!(
            "{:<5} {:<10} {:>9.1} {:>9.1} {:>11.1} {:>11.1} {:>9.2} {:>9.2} {:>9.1} {:>8.2}  {}\n",
            r.case,
            r.backend,
            r.fwd_ms,
            r.fwd_keep_ms,
            r.bwd_recompute_ms,
            r.bwd_saved_ms,
            r.bwd_recompute_ms / r.fwd_ms,
            r.ratio(),
            r.residual_bytes as f64 / (1u64 << 20) as f64,
            (r.fwd_ms + r.bwd_recompute_ms) / (r.fwd_keep_ms + r.bwd_saved_ms),
            if r.met() { "met" } else { "MISSED" }
        ));
    }
    table.push_str(
        "\nfwd+res: the forward keeping residuals; recomp/f: recomputing backward over the plain forward; saved/f+: backward from residuals over the forward that kept them (the target); step x: (fwd + bwd recompute) / (fwd+res + bwd saved)\n",
    );
    table.push_str(&peer_table(&peers, &rows));
    print!("{table}");
    if let Some(p) = &args.table {
        crate::report::write_atomic(p, &table)?;
    }
    let all_met = rows.iter().all(Row::met);
    let doc = json!({
        "benchmark": "residuals",
        "graph": { "kind": "powerlaw", "nodes": nodes, "edges": edges, "seed": args.seed },
        "width": f,
        "dtype": "f32",
        "threads": rayon::current_num_threads(),
        "repeat": repeat,
        "warm_ups": WARM_UPS,
        "load_avg": std::fs::read_to_string("/proc/loadavg").ok().map(|s| s.trim().to_string()),
        "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
        "peers": peer_json(&peers, &rows),
        "targets": {
            "bwd_from_residuals_over_fwd_keeping": { "target": TARGET, "met": all_met },
        },
    });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    crate::report::write_atomic(&args.json, &text)?;
    eprintln!("wrote {}", args.json.display());
    Ok(all_met)
}

/// What peers.py gave, per (case, peer).
type PeerResults = std::collections::BTreeMap<(String, String), crate::peers::PeerResult>;

/// Runs peers.py for the cases it has, on this run's graph and fields
/// (`Err`: the graph could not be written for it).
fn run_peers(
    args: &Args,
    g: &Graph,
    h: &[f32],
    f: usize,
    attention: (&[f32], &[f32]),
    repeat: usize,
) -> Result<PeerResults, String> {
    let avail = crate::peers::detect(&args.peers_script);
    if !avail.any() {
        return Ok(crate::peers::run(&avail, std::path::Path::new("."), &PEER_CASES, 1, 1));
    }
    let dir = crate::peers::graph_dir("residuals", g, h, f, Some(attention))?;
    // One peers.py process a case: PyTorch's gather/scatter holds several
    // edge-by-feature tensors at once, and where one case runs out of
    // memory the other is still measured.
    let mut out = PeerResults::new();
    for case in PEER_CASES {
        eprintln!("[bench] peers.py: {case}");
        out.extend(crate::peers::run(&avail, &dir.0, &[case], rayon::current_num_threads(), repeat));
    }
    Ok(out)
}

/// tiga's step with residuals (forward keeping them + backward from them)
/// for a case on a back end.
fn tiga_step(rows: &[Row], case: &str, backend: &str) -> Option<f64> {
    rows.iter().find(|r| r.case == case && r.backend == backend).map(|r| r.fwd_keep_ms + r.bwd_saved_ms)
}

const BACKENDS: [&str; 2] = ["cranelift", "rust-aot"];

fn peer_table(peers: &Result<PeerResults, String>, rows: &[Row]) -> String {
    let results = match peers {
        Err(why) => return format!("\npeers: {why}\n"),
        Ok(r) => r,
    };
    let mut t = format!(
        "\npeers (same graph and fields; their step is autograd's forward+backward, the gradient of out.sum() with respect to h)\n\
         {:<5} {:<13} {:>9} {:>12}  {}\n",
        "case", "peer", "fwd ms", "fwd+bwd ms", "step over tiga's step with residuals (cranelift, rust-aot)"
    );
    for ((case, peer), r) in results {
        match r {
            Ok(p) => {
                let over: Vec<String> = BACKENDS
                    .iter()
                    .map(|b| match (p.bwd_ms, tiga_step(rows, case, b)) {
                        (Some(s), Some(ts)) => format!("{:.2}x", s / ts),
                        _ => "-".into(),
                    })
                    .collect();
                let ms = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.1}"));
                let stopped = p.stopped.as_ref().map(|why| format!(" ({why})")).unwrap_or_default();
                t += &format!("{case:<5} {peer:<13} {:>9} {:>12}  {}{stopped}\n", ms(p.fwd_ms), ms(p.bwd_ms), over.join(", "));
            }
            Err(why) => t += &format!("{case:<5} {peer:<13} skipped: {why}\n"),
        }
    }
    t
}

fn peer_json(peers: &Result<PeerResults, String>, rows: &[Row]) -> Value {
    let results = match peers {
        Err(why) => return json!({ "skipped": why }),
        Ok(r) => r,
    };
    let items: Vec<Value> = results
        .iter()
        .map(|((case, peer), r)| match r {
            Ok(p) => {
                let over: serde_json::Map<String, Value> = BACKENDS
                    .iter()
                    .filter_map(|b| Some(((*b).to_string(), json!(p.bwd_ms? / tiga_step(rows, case, b)?))))
                    .collect();
                json!({
                    "case": case,
                    "peer": peer,
                    "fwd_ms": p.fwd_ms,
                    "step_ms": p.bwd_ms,
                    "step_pass": p.bwd_pass,
                    "step_over_tiga_step_with_residuals": over,
                    "stopped": p.stopped,
                })
            }
            Err(why) => json!({ "case": case, "peer": peer, "skipped": why }),
        })
        .collect();
    Value::Array(items)
}
