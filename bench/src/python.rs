//! `tiga-bench python`: what the Python package adds over calling the same
//! kernels from Rust.
//!
//! The same kernels of `examples/kernels/gnn.rs` (the Cranelift JIT on both
//! sides: Rust through `Kernel::from_source`, Python through `tiga.load`)
//! run on the same graph and fields: `VecSum` and `GcnNorm` forward, and
//! `VecSum`'s gradient of `h` (`vjp` with only `h` asked for). Rust times
//! `run_with` and `vjp_wrt` side by side in rounds; the graph and fields go
//! to `.npy` files in a temporary folder, and `bench/peers/python_overhead.py`
//! times the same calls in one Python process with NumPy arrays and with
//! torch tensors (`torch.from_numpy`, no copy; absent when torch is not
//! installed), the graph built once (`Graph.from_edge_index`) outside the
//! timing. Outputs are compared with Rust's (bit for bit: the same
//! compiled code on the same inputs). Graphs: the power-law graph (100k
//! nodes, 1.6M edges) and a small one (2,000 nodes, 20,000 edges) where the
//! fixed cost of a call shows. Target: Python ≤ 1.10× Rust on the power-law
//! graph. The table goes to stdout (and `--table`), the JSON to `--json`.
//!
//! ```sh
//! cargo run --release -p tiga-bench -- python [--repeat N] [--json PATH] [--table PATH] [--python PY]
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use serde_json::{json, Value};
use tiga::compiler::ir::Role;
use tiga::{Graph, Inputs, Kernel, Schedule, Tensor, Wrt};

use crate::graphs;
use crate::timing::{Contender, Produced};

/// The target: a Python call over the same call from Rust.
const TARGET: f64 = 1.10;

const GNN: &str = include_str!("../../examples/kernels/gnn.rs");

/// `tiga-bench python`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Timed rounds after the warm-ups
    #[arg(long, value_name = "N", default_value_t = 9, value_parser = crate::timing::positive)]
    repeat: usize,
    /// Feature width
    #[arg(long, value_name = "F", default_value_t = 64, value_parser = crate::timing::positive)]
    width: usize,
    /// The Python interpreter (with the `tiga` package installed)
    #[arg(long, value_name = "PY", default_value = "python3")]
    python: String,
    /// The Python side's script [default: bench/peers/python_overhead.py of this checkout]
    #[arg(long, value_name = "P")]
    script: Option<PathBuf>,
    /// Where the JSON goes, written atomically
    #[arg(long, value_name = "PATH", default_value = "target/bench/python.json")]
    json: PathBuf,
    /// Where the table goes too (besides stdout)
    #[arg(long, value_name = "PATH")]
    table: Option<PathBuf>,
    /// Graph and field seed
    #[arg(long, value_name = "N", default_value_t = 7)]
    seed: u64,
}

pub fn main(args: &Args) -> ExitCode {
    crate::timing::exit_code("python", run(args))
}

/// The calls timed, in the order both sides report them.
const CALLS: [&str; 3] = ["VecSum", "GcnNorm", "VecSum-vjp"];

fn e<E: std::fmt::Display>(x: E) -> String {
    x.to_string()
}

/// The graph and fields as `.npy` files for the Python side.
fn write_inputs(dir: &Path, g: &Graph, fields: &[(&str, &Tensor)]) -> Result<(), String> {
    let (src, dst) = g.coo_in_user_order();
    let ei: Vec<i64> = src.iter().chain(&dst).map(|&v| i64::from(v)).collect();
    tiga::runtime::write_npy_ids(dir.join("edge_index.npy"), &ei).map_err(e)?;
    for (name, t) in fields {
        tiga::write_npy(dir.join(format!("{name}.npy")), &t.view()).map_err(e)?;
    }
    Ok(())
}

fn run(args: &Args) -> Result<bool, String> {
    let script =
        args.script.clone().unwrap_or_else(|| crate::timing::default_peers_script().with_file_name("python_overhead.py"));
    let vec_sum = Kernel::from_source(GNN, "VecSum").map_err(e)?;
    let gcn = Kernel::from_source(GNN, "GcnNorm").map_err(e)?;
    let f = args.width;
    let schedule = Schedule::new();
    let wrt = Wrt::only([(Role::Src, "h")]);
    let mut table = format!(
        "the same kernel calls from Python and from Rust (JIT, F = {f}, {} threads)\n{:<9} {:>8} {:>9} {:<11} {:>9} {:>9} {:>9} {:>8} {:>8} {:>4}\n",
        rayon::current_num_threads(),
        "graph",
        "nodes",
        "edges",
        "call",
        "Rust ms",
        "NumPy ms",
        "torch ms",
        "NumPy/R",
        "torch/R",
        "met"
    );
    let mut rows = Vec::new();
    let mut all_met = true;
    for (graph, nodes, edges) in [("powerlaw", 100_000usize, 1_600_000usize), ("small", 2_000, 20_000)] {
        let g = graphs::powerlaw(nodes, edges, args.seed).map_err(e)?;
        let (n, m) = (g.num_src(), g.num_edges());
        let h = Tensor::from_f32(vec![n, f], graphs::uniform(n * f, args.seed ^ 1)).map_err(e)?;
        let cs = Tensor::from_f32(vec![n], graphs::uniform(n, args.seed ^ 2)).map_err(e)?;
        let cd = Tensor::from_f32(vec![n], graphs::uniform(n, args.seed ^ 3)).map_err(e)?;
        let w = Tensor::from_f32(vec![m], graphs::uniform(m, args.seed ^ 4)).map_err(e)?;
        let cot = Tensor::from_f32(vec![n, f], graphs::uniform(n * f, args.seed ^ 5)).map_err(e)?;
        let sum_in = Inputs::new().src("h", &h);
        let gcn_in = Inputs::new().src("h", &h).src("cs", &cs).dst("cd", &cd).edge("w", &w);
        let mut contenders: Vec<Contender<'_>> = vec![
            Box::new(|| vec_sum.run_with(&g, &sum_in, &schedule).map(Produced::Outputs).map_err(e)),
            Box::new(|| gcn.run_with(&g, &gcn_in, &schedule).map(Produced::Outputs).map_err(e)),
            Box::new(|| vec_sum.vjp_wrt(&g, &sum_in, &[("out", cot.view())], &wrt, &schedule).map(Produced::Grads).map_err(e)),
        ];
        let timed = crate::timing::time_rounds(args.repeat, &mut contenders)?;
        let dir = tempfile::tempdir().map_err(e)?;
        write_inputs(dir.path(), &g, &[("h", &h), ("cs", &cs), ("cd", &cd), ("w", &w), ("cot", &cot)])?;
        for (call, (_, produced)) in CALLS.iter().zip(&timed) {
            let t = match produced {
                Produced::Outputs(o) => o.get("out").ok_or("no output `out`")?.clone(),
                Produced::Grads(gr) => gr.src("h").ok_or("no gradient of h")?.clone(),
                Produced::Hand(_) => return Err("unexpected result".into()),
            };
            tiga::write_npy(dir.path().join(format!("want-{call}.npy")), &t.view()).map_err(e)?;
        }
        let out = Command::new(&args.python)
            .arg(&script)
            .arg("--dir")
            .arg(dir.path())
            .arg("--kernels")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/kernels/gnn.rs"))
            .arg("--repeat")
            .arg(args.repeat.to_string())
            .output()
            .map_err(|x| format!("{}: {x}", args.python))?;
        if !out.status.success() {
            return Err(format!("{} {}: {}", args.python, script.display(), String::from_utf8_lossy(&out.stderr).trim()));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let py: Value =
            serde_json::from_str(text.lines().last().unwrap_or("")).map_err(|x| format!("the Python side's JSON: {x}"))?;
        for (call, (rust_ms, _)) in CALLS.iter().zip(&timed) {
            let side = |lib: &str| py.get(lib).and_then(|v| v.get(call)).and_then(Value::as_f64);
            let (np_ms, torch_ms) = (side("numpy"), side("torch"));
            let ratio = |x: Option<f64>| x.map(|v| v / rust_ms);
            let met = graph != "powerlaw" || [ratio(np_ms), ratio(torch_ms)].iter().flatten().all(|&r| r <= TARGET);
            all_met &= met;
            let cell = |x: Option<f64>, p: usize| x.map(|v| format!("{v:.p$}")).unwrap_or_else(|| "-".into());
            table.push_str(&format!(
                "{graph:<9} {nodes:>8} {edges:>9} {call:<11} {rust_ms:>9.3} {:>9} {:>9} {:>8} {:>8} {:>4}\n",
                cell(np_ms, 3),
                cell(torch_ms, 3),
                cell(ratio(np_ms), 3),
                cell(ratio(torch_ms), 3),
                if graph != "powerlaw" {
                    "-"
                } else if met {
                    "yes"
                } else {
                    "no"
                }
            ));
            rows.push(json!({
                "graph": graph, "nodes": nodes, "edges": edges, "call": call, "rust_ms": rust_ms,
                "numpy_ms": np_ms, "torch_ms": torch_ms, "numpy_ratio": ratio(np_ms), "torch_ratio": ratio(torch_ms),
                "target": if graph == "powerlaw" { Some(TARGET) } else { None }, "met": met,
            }));
        }
        if let Some(Value::String(why)) = py.get("torch_absent") {
            table.push_str(&format!("  torch: {why}\n"));
        }
    }
    print!("{table}");
    if let Some(p) = &args.table {
        crate::report::write_atomic(p, &table)?;
    }
    let doc = json!({
        "benchmark": "python",
        "what": "the same kernel calls (examples/kernels/gnn.rs, JIT) from the Python package and from Rust",
        "width": f, "repeat": args.repeat, "threads": rayon::current_num_threads(), "target": TARGET,
        "results": rows,
    });
    let text = serde_json::to_string_pretty(&doc).map_err(e)?;
    crate::report::write_atomic(&args.json, &text)?;
    println!("wrote {}", args.json.display());
    Ok(all_met)
}
