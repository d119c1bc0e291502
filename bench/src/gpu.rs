//! `tiga-bench gpu`: the GPU path on a power-law graph, timed with device
//! events, against what the same device copies in the same run.
//!
//! A kernel's time alone says little; next to the device-to-device copy
//! bandwidth measured minutes apart on the same GPU it says how far the
//! kernel is from the memory system. So one run builds the power-law graph
//! (`graphs::powerlaw`, Zipf sources; 1M nodes and 16M edges by default),
//! times a copy of 1 GiB between two device buffers (bytes read + written
//! over the events' time), then, per case, lowers the kernel (a refusal of
//! the PTX back end is a row that says so), runs it forward and backward
//! with a [`tiga::DeviceTimer`] (events around each launch), and compares
//! the forward with the CPU JIT's (relative difference above 1e-3 fails
//! the run). Bytes moved are the least a kernel must touch: row offsets,
//! columns, each node field once, each output once; effective bandwidth is
//! that over the kernel time, and its share of the copy bandwidth.
//!
//! With `--peers`, PyTorch on the same GPU (`bench/gpu/torch_peer.py`:
//! `torch.sparse.mm` over the CSR and a PyG-style gather/index_add, CUDA
//! events) when `torch` imports and sees a GPU; a row says why not
//! otherwise.
//!
//! The simulator (`--device sim --nodes 1000`) runs the same path at tiny
//! sizes, so the subcommand is tested without a GPU; its times are the
//! simulator's, not a GPU's.
//!
//! ```sh
//! cargo run --release -p tiga-bench --features cuda -- gpu --device cuda:0 --json gpu.json --table gpu.txt
//! cargo run --release -p tiga-bench -- gpu --device sim --nodes 1000 --repeat 1
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use crate::timing::median;
use serde_json::{json, Value};
use tiga::compiler::ir::{Role, Type};
use tiga::runtime::gpu::{self, Stream};
use tiga::{Backend, Device, DeviceTimer, Error, Graph, Inputs, Kernel, Schedule, Tensor};

/// `tiga-bench gpu`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The device: cuda, cuda:N (a tiga-bench built with --features cuda) or sim (the PTX simulator; tiny
    /// sizes only)
    #[arg(long, value_name = "DEVICE", default_value = "cuda:0", value_parser = Device::parse)]
    device: Device,
    /// Nodes of the power-law graph
    #[arg(long, value_name = "N", default_value_t = 1_000_000, value_parser = crate::timing::positive)]
    nodes: usize,
    /// Edges per node on average
    #[arg(long, value_name = "K", default_value_t = 16, value_parser = crate::timing::positive)]
    degree: usize,
    /// Feature width of the vector cases
    #[arg(long, value_name = "F", default_value_t = 64, value_parser = crate::timing::positive)]
    width: usize,
    /// Timed calls per measurement after one warm-up; the median is reported
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = crate::timing::positive)]
    repeat: usize,
    /// Also run PyTorch on the same GPU (bench/gpu/torch_peer.py), if it imports
    #[arg(long)]
    peers: bool,
    /// Where the JSON goes, written atomically
    #[arg(long, value_name = "PATH", default_value = "target/bench/gpu.json")]
    json: PathBuf,
    /// Where the table goes (it is printed too)
    #[arg(long, value_name = "PATH", default_value = "target/bench/gpu.txt")]
    table: PathBuf,
    /// Graph and field seed
    #[arg(long, value_name = "N", default_value_t = 7)]
    seed: u64,
}

/// The cases: (name, kernel of gnn.rs, whether its fields are F wide).
const CASES: [(&str, &str, bool); 5] = [
    ("powerlaw-neighbor-sum", "NeighborSum", false),
    ("powerlaw-sum", "VecSum", true),
    ("powerlaw-mean", "SageMean", true),
    ("powerlaw-max", "MaxPool", true),
    ("powerlaw-gat", "GatAttention", true),
];

pub fn main(args: &Args) -> ExitCode {
    match run(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("tiga-bench gpu: a result differs from the CPU's (see the table)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("tiga-bench gpu: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Median of the values (0 for none).
/// Device-to-device copy bandwidth: bytes read plus written per second,
/// the median of `repeat` copies of `bytes`.
fn copy_gbs(device: Device, bytes: usize, repeat: usize) -> Result<f64, String> {
    let ctx = gpu::open(device).map_err(|e| e.to_string())?.ok_or("the copy needs a device")?;
    let d = ctx.device();
    let a = d.alloc(bytes).map_err(|e| e.to_string())?;
    let b = d.alloc(bytes).map_err(|e| e.to_string())?;
    let mut ms = Vec::new();
    for i in 0..=repeat {
        let t0 = d.record(Stream::Compute).map_err(|e| e.to_string())?;
        d.copy(Stream::Compute, &b, 0, &a, 0, bytes).map_err(|e| e.to_string())?;
        let t1 = d.record(Stream::Compute).map_err(|e| e.to_string())?;
        let t = d.elapsed_ms(&t0, &t1).map_err(|e| e.to_string())?;
        if i > 0 {
            ms.push(t);
        }
    }
    d.synchronize().map_err(|e| e.to_string())?;
    let t = median(ms);
    Ok(if t > 0.0 { 2.0 * bytes as f64 / (t * 1e6) } else { 0.0 })
}

/// The fields of `k` on `g`, `f` wide, values in [-1, 1).
fn fields(k: &Kernel, g: &Graph, f: usize, seed: u64) -> Result<Vec<(Role, String, Tensor)>, String> {
    k.fields()
        .iter()
        .enumerate()
        .map(|(i, fd)| {
            let rows = match fd.role {
                Role::Src => g.num_src(),
                Role::Dst => g.num_dst(),
                Role::Edge => g.num_edges(),
                Role::Param => 1,
            };
            let shape = match (fd.role, fd.ty) {
                (Role::Param, Type::Vector(_)) => vec![f],
                (Role::Param, _) => vec![1],
                (_, Type::Vector(_)) => vec![rows, f],
                _ => vec![rows],
            };
            let len = shape.iter().product();
            let t = Tensor::from_f32(shape, crate::graphs::uniform(len, seed + i as u64)).map_err(|e| e.to_string())?;
            Ok((fd.role, fd.name.clone(), t))
        })
        .collect()
}

/// The least bytes a call must move: offsets, columns, each field and
/// each output once.
fn bytes_moved(g: &Graph, fields: &[(Role, String, Tensor)], out_elems: usize) -> u64 {
    let f: usize = fields.iter().map(|(_, _, t)| t.len() * 4).sum();
    ((g.num_dst() + 1) * 8 + g.num_edges() * 4 + f + out_elems * 4) as u64
}

/// One case's row of the table and the JSON.
struct Row {
    case: &'static str,
    kernel: &'static str,
    width: usize,
    status: String,
    fwd_kernel_ms: Option<f64>,
    fwd_wall_ms: Option<f64>,
    bwd_kernel_ms: Option<f64>,
    bwd_status: String,
    bytes: u64,
    max_rel_diff: Option<f64>,
}

fn run(args: &Args) -> Result<bool, String> {
    let device = args.device;
    if device == Device::Cpu {
        return Err("--device cpu: this benchmark times a GPU (cuda:N) or the simulator (sim)".into());
    }
    gpu::open(device).map_err(|e| format!("--device {}: {e}", device.name()))?;
    let edges = args.nodes.saturating_mul(args.degree);
    let t0 = Instant::now();
    let g = crate::graphs::powerlaw(args.nodes, edges, args.seed).map_err(|e| e.to_string())?;
    eprintln!("power-law graph: {} nodes, {} edges ({:.1} s)", g.num_dst(), g.num_edges(), t0.elapsed().as_secs_f64());
    let copy_bytes = if device == Device::Simulated { 1 << 20 } else { 1 << 30 };
    let copy = copy_gbs(device, copy_bytes, args.repeat)?;
    eprintln!("device-to-device copy: {copy:.1} GB/s ({} MiB)", copy_bytes >> 20);
    let kernels = Kernel::all_from_source(crate::kernels::GNN).map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    let mut all_ok = true;
    for (case, name, wide) in CASES {
        let k = kernels.iter().find(|k| k.name() == name).ok_or(format!("no kernel {name} in gnn.rs"))?;
        let f = if wide { args.width } else { 1 };
        let ts = fields(k, &g, f, args.seed)?;
        let ins = ts.iter().fold(Inputs::new(), |i, (r, n, t)| i.with_role(*r, n, t));
        let mut row = Row {
            case,
            kernel: name,
            width: f,
            status: String::new(),
            fwd_kernel_ms: None,
            fwd_wall_ms: None,
            bwd_kernel_ms: None,
            bwd_status: String::new(),
            bytes: 0,
            max_rel_diff: None,
        };
        let timer = DeviceTimer::new();
        let sched = Schedule::new().device(device).device_timer(timer.clone());
        // Warm-up: lowering, loading, first touch.
        let out = match k.run_with(&g, &ins, &sched) {
            Ok(o) => o,
            Err(e @ Error::GpuLowering { .. }) => {
                row.status = format!("refused: {e}");
                eprintln!("{case}: {}", row.status);
                rows.push(row);
                continue;
            }
            Err(e) => return Err(format!("{case}: {e}")),
        };
        let (mut kms, mut wall) = (Vec::new(), Vec::new());
        for _ in 0..args.repeat {
            timer.reset();
            let t = Instant::now();
            k.run_with(&g, &ins, &sched).map_err(|e| format!("{case}: {e}"))?;
            wall.push(t.elapsed().as_secs_f64() * 1e3);
            kms.push(timer.times().kernel_ms);
        }
        row.fwd_kernel_ms = Some(median(kms));
        row.fwd_wall_ms = Some(median(wall));
        let out_elems: usize = out.items.iter().map(|(_, t)| t.len()).sum();
        row.bytes = bytes_moved(&g, &ts, out_elems);
        let cpu = k.run_with(&g, &ins, &Schedule::new().backend(Backend::Jit)).map_err(|e| format!("{case} on the CPU: {e}"))?;
        let mut diff = 0.0f64;
        for ((_, a), (_, b)) in out.items.iter().zip(&cpu.items) {
            for (x, y) in a.to_f64_vec().iter().zip(b.to_f64_vec()) {
                diff = diff.max((x - y).abs() / y.abs().max(1.0));
            }
        }
        row.max_rel_diff = Some(diff);
        row.status = if diff <= 1e-3 { "ok".into() } else { format!("DIFFERS from the CPU JIT by {diff:e}") };
        all_ok &= diff <= 1e-3;
        let out_name = k.output_names().first().map(|s| s.to_string()).unwrap_or_default();
        match k.grad_with(&g, &ins, &out_name, &sched) {
            Ok(_) => {
                let mut bms = Vec::new();
                for _ in 0..args.repeat {
                    timer.reset();
                    k.grad_with(&g, &ins, &out_name, &sched).map_err(|e| format!("{case} backward: {e}"))?;
                    bms.push(timer.times().kernel_ms);
                }
                row.bwd_kernel_ms = Some(median(bms));
                row.bwd_status = "ok".into();
            }
            Err(e @ Error::GpuLowering { .. }) => row.bwd_status = format!("refused: {e}"),
            Err(e) => return Err(format!("{case} backward: {e}")),
        }
        eprintln!(
            "{case}: {} forward {:.3} ms (device), backward {}",
            row.status,
            row.fwd_kernel_ms.unwrap_or(0.0),
            row.bwd_status
        );
        rows.push(row);
    }
    let peers = if args.peers { torch_peer(args, &g)? } else { Vec::new() };
    let goals = targets(args, &rows, copy, &peers);
    let mut table = table(args, &g, copy, &rows, &peers);
    for (name, t) in goals.as_object().into_iter().flatten().filter(|(_, t)| t.is_object()) {
        let value = t["value"].as_f64().map_or("not measured".to_string(), |v| format!("{v:.3}"));
        let met = match t["met"].as_bool() {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "-",
        };
        table += &format!("target {name}: {value} ({}) {met}\n", t["target"].as_str().unwrap_or(""));
    }
    print!("{table}");
    let doc = json!({
        "benchmark": "gpu",
        "device": device.name(),
        "nodes": g.num_dst(),
        "edges": g.num_edges(),
        "width": args.width,
        "repeat": args.repeat,
        "copy_gbs": copy,
        "copy_bytes": copy_bytes,
        "rows": rows.iter().map(|r| row_json(r, copy)).collect::<Vec<_>>(),
        "peers": peers,
        "targets": goals,
    });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    crate::report::write_atomic(&args.json, &text)?;
    crate::report::write_atomic(&args.table, &table)?;
    eprintln!("wrote {} and {}", args.json.display(), args.table.display());
    Ok(all_ok)
}

/// The issue's targets, each with its measured value (null where the run
/// could not measure it: no peer, a refused kernel) and whether it is met.
fn targets(args: &Args, rows: &[Row], copy: f64, peers: &[Value]) -> Value {
    let row = |case: &str| rows.iter().find(|r| r.case == case);
    let ratio = |case: &str| row(case).and_then(|r| Some(r.bwd_kernel_ms? / r.fwd_kernel_ms?));
    let sum_share = row("powerlaw-sum").and_then(|r| gbs(r.bytes, r.fwd_kernel_ms)).filter(|_| copy > 0.0).map(|e| e / copy);
    let gat_ours = row("powerlaw-gat").and_then(|r| Some(r.fwd_kernel_ms? + r.bwd_kernel_ms?));
    let gat_peer = peers.iter().find(|p| p["case"] == "powerlaw-gat").and_then(|p| p["fwd_bwd_ms"].as_f64());
    let speedup = gat_ours.zip(gat_peer).map(|(ours, peer)| peer / ours);
    let target =
        |value: Option<f64>, rule: &str, met: fn(f64) -> bool| json!({"value": value, "target": rule, "met": value.map(met)});
    json!({
        "width": args.width,
        "sum_copy_share": target(sum_share, "power-law sum F = 64 at >= 0.70 of the copy bandwidth", |v| v >= 0.70),
        "sum_bwd_over_fwd": target(ratio("powerlaw-sum"), "<= 2.5", |v| v <= 2.5),
        "mean_bwd_over_fwd": target(ratio("powerlaw-mean"), "<= 2.5", |v| v <= 2.5),
        "gat_fwd_bwd_speedup_vs_pyg": target(speedup, ">= 2 (PyG-style peer's fwd+bwd time over ours)", |v| v >= 2.0),
    })
}

fn gbs(bytes: u64, ms: Option<f64>) -> Option<f64> {
    ms.filter(|&t| t > 0.0).map(|t| bytes as f64 / (t * 1e6))
}

fn row_json(r: &Row, copy: f64) -> Value {
    let eff = gbs(r.bytes, r.fwd_kernel_ms);
    json!({
        "case": r.case,
        "kernel": r.kernel,
        "width": r.width,
        "status": r.status,
        "fwd_kernel_ms": r.fwd_kernel_ms,
        "fwd_wall_ms": r.fwd_wall_ms,
        "bwd_kernel_ms": r.bwd_kernel_ms,
        "bwd_status": r.bwd_status,
        "bytes_moved": r.bytes,
        "effective_gbs": eff,
        "of_copy_bandwidth": eff.filter(|_| copy > 0.0).map(|e| e / copy),
        "max_rel_diff_vs_cpu": r.max_rel_diff,
    })
}

fn table(args: &Args, g: &Graph, copy: f64, rows: &[Row], peers: &[Value]) -> String {
    let opt = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.3}"));
    let mut s = format!(
        "tiga-bench gpu on {}: power-law graph, {} nodes, {} edges, F = {}; device-to-device copy {copy:.1} GB/s\n",
        args.device.name(),
        g.num_dst(),
        g.num_edges(),
        args.width
    );
    s += &format!(
        "{:<24} {:<13} {:>4} {:>12} {:>12} {:>12} {:>9} {:>8}  {}\n",
        "case", "kernel", "F", "fwd ms (ev)", "fwd ms wall", "bwd ms (ev)", "GB/s", "of copy", "status"
    );
    for r in rows {
        let eff = gbs(r.bytes, r.fwd_kernel_ms);
        s += &format!(
            "{:<24} {:<13} {:>4} {:>12} {:>12} {:>12} {:>9} {:>8}  {}{}\n",
            r.case,
            r.kernel,
            r.width,
            opt(r.fwd_kernel_ms),
            opt(r.fwd_wall_ms),
            opt(r.bwd_kernel_ms),
            eff.map_or("-".into(), |e| format!("{e:.1}")),
            eff.filter(|_| copy > 0.0).map_or("-".into(), |e| format!("{:.0}%", 100.0 * e / copy)),
            r.status,
            if r.bwd_status.is_empty() || r.bwd_status == "ok" { String::new() } else { format!("; backward {}", r.bwd_status) }
        );
    }
    for p in peers {
        s += &format!("peer: {p}\n");
    }
    s
}

/// PyTorch on the same GPU, when it imports and sees one (a row saying why
/// not otherwise).
fn torch_peer(args: &Args, g: &Graph) -> Result<Vec<Value>, String> {
    if !matches!(args.device, Device::Cuda(_)) {
        return Ok(vec![json!({"peer": "torch", "status": "skipped: the peers run on a CUDA device only"})]);
    }
    // From the repository root (a prebuilt binary on a GPU machine), else
    // next to this crate's sources.
    let here = std::path::Path::new("bench/gpu/torch_peer.py");
    let script = if here.is_file() {
        here.to_path_buf()
    } else {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("gpu").join("torch_peer.py")
    };
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let write = |name: &str, bytes: &[u8]| std::fs::write(dir.path().join(name), bytes).map_err(|e| e.to_string());
    let as_bytes = |v: &[u64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    write("offsets.bin", &as_bytes(g.offsets()))?;
    write("cols.bin", &g.cols().iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>())?;
    let h = crate::graphs::uniform(g.num_src() * args.width, args.seed);
    write("h.bin", &h.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>())?;
    let out = std::process::Command::new("python3")
        .arg(&script)
        .arg(dir.path())
        .args(["--nodes", &g.num_dst().to_string(), "--edges", &g.num_edges().to_string()])
        .args(["--width", &args.width.to_string(), "--repeat", &args.repeat.to_string()])
        .output();
    match out {
        Ok(o) if o.status.success() => {
            Ok(String::from_utf8_lossy(&o.stdout).lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).collect())
        }
        Ok(o) => Ok(vec![json!({"peer": "torch", "status": format!("failed: {}", String::from_utf8_lossy(&o.stderr).trim())})]),
        Err(e) => Ok(vec![json!({"peer": "torch", "status": format!("python3 did not start: {e}")})]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole subcommand on the simulator at a tiny size: the copy, the
    /// cases (refusals included), the table and the JSON.
    #[test]
    fn runs_on_the_simulator() {
        let dir = tempfile::tempdir().expect("tempdir");
        let args = Args {
            device: Device::Simulated,
            nodes: 300,
            degree: 4,
            width: 4,
            repeat: 1,
            peers: true,
            json: dir.path().join("gpu.json"),
            table: dir.path().join("gpu.txt"),
            seed: 3,
        };
        assert!(run(&args).expect("runs"), "results match the CPU");
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&args.json).expect("json")).expect("parses");
        assert_eq!(doc["device"], "sim");
        let rows = doc["rows"].as_array().expect("rows");
        assert_eq!(rows.len(), CASES.len());
        let ns = rows.iter().find(|r| r["kernel"] == "NeighborSum").expect("NeighborSum row");
        assert_eq!(ns["status"], "ok", "{ns}");
        assert_eq!(ns["bwd_status"], "ok", "{ns}");
        assert!(ns["fwd_kernel_ms"].as_f64().is_some(), "{ns}");
        for r in rows {
            let s = r["status"].as_str().expect("status");
            assert!(s == "ok" || s.starts_with("refused: kernel `"), "{r}");
        }
        assert!(std::fs::read_to_string(&args.table).expect("table").contains("powerlaw-neighbor-sum"));
    }
}
