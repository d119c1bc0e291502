//! `tiga-bench half`: the power-law sum (`VecSum`, F = 64) with source
//! features stored as f32, bf16 and f16, on both CPU back ends (the
//! Cranelift JIT, as a kernel file runs; rustc/LLVM, as the macro path runs
//! a kernel that declares its field's type), side by side in one run, forward
//! and backward (the gradient of `out.sum()` with respect to the features,
//! written in the features' type), with the error of each against an f64
//! sum of the same stored values and against the unrounded features, and
//! the peers that have half types (`bench/peers/half_peers.py`: SciPy,
//! `torch.sparse.mm` and a PyG-style gather/scatter, each in f32 and in
//! whichever of bf16/f16 it runs; skipped with the reason where the
//! Python packages are missing).
//!
//! The target (in the JSON, with its value and whether it is met): the
//! bf16 forward at least 1.6× faster than the f32 one. A memory-bound
//! gather of 64-wide rows reads 256 bytes per edge in f32 and 128 in bf16;
//! the CSR columns (4 bytes per edge) and the output (written once) are the
//! same for both.
//!
//! The error bound (docs/half_precision.md): against the f64 sum of the
//! same stored values, f32 accumulation alone: |y - ŷ| ≤ γ_d · Σ|x| per
//! element, with γ_d = d·2^-24 / (1 - d·2^-24) for a row of d edges; against
//! the unrounded features, u · Σ|x| more (u = 2^-8 bf16, 2^-11 f16). The
//! JSON gives the largest ratio of error to bound over all elements.
//!
//! ```sh
//! cargo run --release -p tiga-bench -- half --quick
//! cargo run --release -p tiga-bench -- half --json bench/results/DATE-COMMIT-half.json
//! ```

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Instant;

use rayon::prelude::*;
use serde_json::{json, Value};
use tiga::{FieldType, Graph, Inputs, Kernel, Tensor};

use crate::graphs;

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Nodes of the power-law graph
    #[arg(long, value_name = "N", default_value_t = 1_000_000, value_parser = crate::timing::positive)]
    nodes: usize,
    /// Edges per node on average
    #[arg(long, value_name = "K", default_value_t = 16, value_parser = crate::timing::positive)]
    degree: usize,
    /// Feature width
    #[arg(long, value_name = "F", default_value_t = 64, value_parser = crate::timing::positive)]
    width: usize,
    /// 16× fewer nodes, 3 timed rounds
    #[arg(long)]
    quick: bool,
    /// Timed rounds (each contender called once per round, in turn) after 2 untimed ones
    #[arg(long, value_name = "N", default_value_t = 7, value_parser = crate::timing::positive)]
    repeat: usize,
    /// Worker threads (default: rayon's, every core)
    #[arg(long, value_name = "N", value_parser = crate::timing::positive)]
    threads: Option<usize>,
    /// Where to write the JSON
    #[arg(long, value_name = "PATH", default_value = "target/bench/half.json")]
    json: PathBuf,
    /// Where to write the table
    #[arg(long, value_name = "PATH", default_value = "target/bench/half.txt")]
    table: PathBuf,
    /// Skip the Python peers
    #[arg(long)]
    no_peers: bool,
    #[arg(long, value_name = "SEED", default_value_t = 0x5eed)]
    seed: u64,
}

/// The target the JSON carries.
const SPEEDUP_TARGET: f64 = 1.6;

/// The sum with its field declared in each type, for the macro's
/// ahead-of-time variants (the macro compiles a kernel's declared half
/// storage; `VecSum` of gnn.rs declares f32).
#[allow(clippy::all)]
mod sums {
    use tiga::message_passing;

    #[message_passing(reduce = sum)]
    pub mod SumBf16 {
        use tiga::lang::*;
        pub struct Src {
            pub h: Vector<bf16>,
        }
        pub fn edge(src: &Src) -> Vector<f32> {
            src.h.clone()
        }
    }

    #[message_passing(reduce = sum)]
    pub mod SumF16 {
        use tiga::lang::*;
        pub struct Src {
            pub h: Vector<f16>,
        }
        pub fn edge(src: &Src) -> Vector<f32> {
            src.h.clone()
        }
    }
}

/// The back ends compared, as the JSON names them.
const JIT: &str = "cranelift";
const AOT: &str = "rust-aot";

/// One storage type's measurements on one back end.
struct Row {
    ty: FieldType,
    backend: &'static str,
    fwd_ms: f64,
    bwd_ms: f64,
    /// Largest |y - f64 sum of the stored values| / γ_d·Σ|x|.
    fwd_err_over_bound: f64,
    /// Largest |y - f64 sum of the unrounded values| / (γ_d + u)·Σ|x|.
    fwd_err_over_loose_bound: f64,
    bwd_err_over_bound: f64,
    /// Gradient elements beyond the type's range (stored as infinity).
    bwd_overflow: usize,
    max_rel: f64,
}

pub fn main(args: &Args) -> ExitCode {
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tiga-bench half: {e}");
            ExitCode::FAILURE
        }
    }
}

fn unit_roundoff(t: FieldType) -> f64 {
    match t {
        FieldType::BF16 => 2f64.powi(-8),
        FieldType::F16 => 2f64.powi(-11),
        FieldType::F32 => 0.0,
        FieldType::F64 => 0.0,
    }
}

/// Per destination row and feature: the f64 sum of `x` over the row's
/// sources, and the sum of |x| (the error bound's scale).
fn f64_sums(g: &Graph, x: &[f64], f: usize) -> (Vec<f64>, Vec<f64>) {
    let mut sum = vec![0.0f64; g.num_dst() * f];
    let mut abs = vec![0.0f64; g.num_dst() * f];
    sum.par_chunks_mut(f).zip(abs.par_chunks_mut(f)).enumerate().for_each(|(i, (s, a))| {
        for p in g.row(i) {
            let j = g.cols()[p] as usize;
            for k in 0..f {
                s[k] += x[j * f + k];
                a[k] += x[j * f + k].abs();
            }
        }
    });
    (sum, abs)
}

/// γ_d, the relative bound of a sum of `d` terms accumulated in f32.
fn gamma(d: usize) -> f64 {
    let nu = d as f64 * 2f64.powi(-24);
    nu / (1.0 - nu).max(f64::MIN_POSITIVE)
}

/// The largest |got - want| / (factor(row) · scale) over every element
/// (rows of `f` elements; `degree(i)` the row's count of terms).
fn worst(got: &[f64], want: &[f64], scale: &[f64], f: usize, factor: impl Fn(usize) -> f64 + Sync) -> (f64, f64) {
    got.par_chunks(f)
        .zip(want.par_chunks(f))
        .zip(scale.par_chunks(f))
        .enumerate()
        .map(|(i, ((a, b), s))| {
            let mut w = (0.0f64, 0.0f64);
            for k in 0..f {
                let err = (a[k] - b[k]).abs();
                let bound = factor(i) * s[k];
                let ratio = if err == 0.0 { 0.0 } else { err / bound.max(f64::MIN_POSITIVE) };
                w = (w.0.max(ratio), w.1.max(err / b[k].abs().max(1.0)));
            }
            w
        })
        .reduce(|| (0.0, 0.0), |a, b| (a.0.max(b.0), a.1.max(b.1)))
}

fn run(args: &Args) -> Result<ExitCode, String> {
    let nodes = if args.quick { (args.nodes / 16).max(1) } else { args.nodes };
    let repeat = if args.quick { 3 } else { args.repeat };
    let f = args.width;
    if let Some(t) = args.threads {
        rayon::ThreadPoolBuilder::new().num_threads(t).build_global().map_err(|e| e.to_string())?;
    }
    let threads = rayon::current_num_threads();
    eprintln!("half: building the power-law graph ({nodes} nodes, {} edges)", nodes * args.degree);
    let g = graphs::powerlaw(nodes, nodes * args.degree, args.seed).map_err(|e| e.to_string())?;
    let gt = g.transpose();
    let x32 = Tensor::from_f32(vec![nodes, f], graphs::uniform(nodes * f, args.seed ^ 0x4a1f)).map_err(|e| e.to_string())?;
    let types = [FieldType::F32, FieldType::BF16, FieldType::F16];
    let xs: Vec<Tensor> = types.iter().map(|&t| x32.converted(t)).collect();
    let file_kernel = Kernel::from_source(crate::kernels::GNN, "VecSum").map_err(|e| e.to_string())?;
    let f32_macro = crate::kernels::macro_kernel("VecSum").ok_or("no macro-path VecSum")?;
    // (back end, type, kernel): the kernel file's VecSum on the JIT for
    // every type; on the macro path the kernel declaring that type.
    let contenders: Vec<(&'static str, FieldType, &Kernel)> = vec![
        (JIT, FieldType::F32, &file_kernel),
        (JIT, FieldType::BF16, &file_kernel),
        (JIT, FieldType::F16, &file_kernel),
        (AOT, FieldType::F32, f32_macro),
        (AOT, FieldType::BF16, sums::SumBf16::kernel()),
        (AOT, FieldType::F16, sums::SumF16::kernel()),
    ];
    let schedule =
        |backend: &str| tiga::Schedule::new().backend(if backend == AOT { tiga::Backend::Aot } else { tiga::Backend::Jit });
    let x_of = |t: FieldType| types.iter().position(|&u| u == t).map(|i| &xs[i]).ok_or("no tensor of that type");

    // Side by side: each round calls every contender once, forward then
    // backward.
    let call_fwd = |(b, t, k): &(&'static str, FieldType, &Kernel)| -> Result<tiga::Outputs, String> {
        k.run_with(&g, &Inputs::new().src("h", x_of(*t)?), &schedule(b))
            .map_err(|e| format!("{} {t} forward on {b}: {e}", k.name()))
    };
    let call_bwd = |(b, t, k): &(&'static str, FieldType, &Kernel)| -> Result<tiga::Gradients, String> {
        k.grad_with(&g, &Inputs::new().src("h", x_of(*t)?), "out", &schedule(b))
            .map_err(|e| format!("{} {t} backward on {b}: {e}", k.name()))
    };
    let mut fwd_t = vec![Vec::new(); contenders.len()];
    let mut bwd_t = vec![Vec::new(); contenders.len()];
    let mut outs: Vec<Option<tiga::Outputs>> = contenders.iter().map(|_| None).collect();
    let mut grads: Vec<Option<tiga::Gradients>> = contenders.iter().map(|_| None).collect();
    for round in 0..repeat + 2 {
        for (i, c) in contenders.iter().enumerate() {
            drop(outs[i].take());
            let start = Instant::now();
            let o = call_fwd(c)?;
            let ms = start.elapsed().as_secs_f64() * 1e3;
            outs[i] = Some(o);
            drop(grads[i].take());
            let start = Instant::now();
            let gr = call_bwd(c)?;
            let bms = start.elapsed().as_secs_f64() * 1e3;
            grads[i] = Some(gr);
            if round >= 2 {
                fwd_t[i].push(ms);
                bwd_t[i].push(bms);
            }
        }
    }

    // Errors against f64 sums: of the stored values (the tight bound), and
    // of the unrounded features (the loose one).
    let unrounded = x32.to_f64_vec();
    let (exact_u, _) = f64_sums(&g, &unrounded, f);
    let ones = vec![1.0f64; nodes];
    let (dx_exact, dx_abs) = f64_sums(&gt, &ones, 1);
    let deg = |i: usize| g.row(i).len();
    let tdeg = |j: usize| gt.row(j).len();
    let mut rows = Vec::new();
    for (i, &(backend, ty, _)) in contenders.iter().enumerate() {
        let stored = x_of(ty)?.to_f64_vec();
        let (exact, abs) = f64_sums(&g, &stored, f);
        let got = outs[i].as_ref().ok_or("no output")?.items[0].1.to_f64_vec();
        let u = unit_roundoff(ty);
        let (tight, max_rel) = worst(&got, &exact, &abs, f, |r| gamma(deg(r)));
        let (loose, _) = worst(&got, &exact_u, &abs, f, |r| gamma(deg(r)) + u * (1.0 + gamma(deg(r))));
        // d out.sum() / d x[j, k] = out-degree of j: exact in f32 below
        // 2^24 edges per source, then rounded once to the field's type.
        let grad = grads[i].as_ref().and_then(|gr| gr.src("h")).ok_or("no gradient")?;
        if grad.field_type() != ty {
            return Err(format!("the {ty} field's gradient is {}", grad.field_type()));
        }
        // A value beyond the type's range (an f16 gradient above 65504, a
        // hub's out-degree) is stored as infinity: counted, and left out of
        // the bound, which is about precision.
        let max = if ty == FieldType::F16 { 65504.0 } else { f64::MAX };
        let gv = grad.to_f64_vec();
        let overflow = (0..nodes * f).filter(|&e| dx_exact[e / f] > max).count();
        let keep = |e: usize| dx_exact[e / f] <= max;
        let gv: Vec<f64> = gv.iter().enumerate().map(|(e, &v)| if keep(e) { v } else { 0.0 }).collect();
        let want: Vec<f64> = (0..nodes * f).map(|e| if keep(e) { dx_exact[e / f] } else { 0.0 }).collect();
        let scale: Vec<f64> = (0..nodes * f).map(|e| dx_abs[e / f]).collect();
        let (bwd, _) = worst(&gv, &want, &scale, f, |r| gamma(tdeg(r)) + u);
        if overflow > 0 && !grad.to_f64_vec().iter().enumerate().all(|(e, v)| keep(e) || v.is_infinite()) {
            return Err(format!("a {ty} gradient beyond the type's range is not infinity"));
        }
        rows.push(Row {
            ty,
            backend,
            fwd_ms: crate::timing::median(fwd_t[i].clone()),
            bwd_ms: crate::timing::median(bwd_t[i].clone()),
            fwd_err_over_bound: tight,
            fwd_err_over_loose_bound: loose,
            bwd_err_over_bound: bwd,
            bwd_overflow: overflow,
            max_rel,
        });
    }

    // What the memory system does on this machine now: whether the sum is
    // memory-bound here (a half-width gather pays only where it is).
    let (copy_best, copy_median) = crate::hand::stream_copy_gbs(256);
    let peers = if args.no_peers { json!({"skipped": "--no-peers"}) } else { run_peers(&g, &x32, f, repeat, threads) };

    // Each type against f32 on the same back end.
    let fwd_of = |b: &str, t: FieldType| rows.iter().find(|r| r.backend == b && r.ty == t).map(|r| r.fwd_ms);
    let speedup = |b: &str, t: FieldType| Some(fwd_of(b, FieldType::F32)? / fwd_of(b, t)?);
    let within =
        rows.iter().all(|r| r.fwd_err_over_bound <= 1.0 && r.fwd_err_over_loose_bound <= 1.0 && r.bwd_err_over_bound <= 1.0);
    let (bf16_aot, bf16_jit) = (speedup(AOT, FieldType::BF16), speedup(JIT, FieldType::BF16));
    let targets = json!({
        "bf16_sum_fwd_speedup": {
            "value": bf16_aot,
            "target": format!(
                "power-law sum F = {f} forward with bf16 source features >= {SPEEDUP_TARGET}x faster than f32 (macro path, \
                 rust-aot against rust-aot)"
            ),
            "met": bf16_aot.map(|s| s >= SPEEDUP_TARGET),
        },
        "bf16_sum_fwd_speedup_cranelift": {
            "value": bf16_jit,
            "target": format!("the same on the Cranelift JIT (kernel files): >= {SPEEDUP_TARGET}x"),
            "met": bf16_jit.map(|s| s >= SPEEDUP_TARGET),
        },
        "f16_sum_fwd_speedup": {
            "value": speedup(AOT, FieldType::F16),
            "target": "reported beside bf16, rust-aot (no target of its own)",
            "met": Value::Null,
        },
        "f16_sum_fwd_speedup_cranelift": {
            "value": speedup(JIT, FieldType::F16),
            "target": "reported beside bf16, cranelift (no target of its own)",
            "met": Value::Null,
        },
        "error_within_bound": {
            "value": rows.iter().map(|r| r.fwd_err_over_bound.max(r.fwd_err_over_loose_bound).max(r.bwd_err_over_bound)).fold(0.0, f64::max),
            "target": "every element within the stated bound (largest error / bound <= 1), forward and backward",
            "met": within,
        },
    });

    let model_bytes = |t: FieldType| (g.num_edges() * (f * t.size() + 4) + nodes * f * 4 + (nodes + 1) * 8) as f64;
    let mut table = format!(
        "half-precision fields: power-law sum (VecSum), {nodes} nodes, {} edges, F = {f}, {threads} threads, {repeat} rounds\n",
        g.num_edges()
    );
    table += "back end   type   fwd ms   bwd ms   fwd GB/s (model)  speedup fwd  err/bound fwd (tight, loose)  bwd  max rel\n";
    for r in &rows {
        table += &format!(
            "{:<9}  {:<5} {:>8.2} {:>8.2} {:>12.1}      {:>8.2}x     {:>8.3} {:>8.3}            {:>8.3}  {:.2e}\n",
            r.backend,
            r.ty.name(),
            r.fwd_ms,
            r.bwd_ms,
            model_bytes(r.ty) / (r.fwd_ms * 1e6),
            speedup(r.backend, r.ty).unwrap_or(f64::NAN),
            r.fwd_err_over_bound,
            r.fwd_err_over_loose_bound,
            r.bwd_err_over_bound,
            r.max_rel
        );
    }
    for (name, t) in targets.as_object().into_iter().flatten() {
        let value = t["value"].as_f64().map_or("not measured".to_string(), |v| format!("{v:.3}"));
        let met = match t["met"].as_bool() {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "-",
        };
        table += &format!("target {name}: {value} ({}) {met}\n", t["target"].as_str().unwrap_or(""));
    }
    for b in [JIT, AOT] {
        if let Some(ms) = fwd_of(b, FieldType::F32) {
            table += &format!(
                "STREAM copy: {copy_best:.1} GB/s best, {copy_median:.1} median; f32 forward on {b} at {:.2} of the best copy\n",
                model_bytes(FieldType::F32) / (ms * 1e6) / copy_best
            );
        }
    }
    table += &format!("peers: {peers}\n");
    print!("{table}");
    let doc = json!({
        "benchmark": "half",
        "case": "powerlaw-sum",
        "kernel": "VecSum (examples/kernels/gnn.rs) on the Cranelift JIT; on rust-aot the macro's VecSum (f32) and sums declaring Vector<bf16> / Vector<f16>",
        "nodes": nodes,
        "edges": g.num_edges(),
        "width": f,
        "threads": threads,
        "rounds": repeat,
        "isa": crate::hand::isa(),
        "copy_gbs_best": copy_best,
        "copy_gbs_median": copy_median,
        "rows": rows.iter().map(|r| json!({
            "backend": r.backend,
            "type": r.ty.name(),
            "fwd_ms": r.fwd_ms,
            "bwd_ms": r.bwd_ms,
            "fwd_model_bytes": model_bytes(r.ty),
            "fwd_gbs": model_bytes(r.ty) / (r.fwd_ms * 1e6),
            "fwd_err_over_bound": r.fwd_err_over_bound,
            "fwd_err_over_loose_bound": r.fwd_err_over_loose_bound,
            "bwd_err_over_bound": r.bwd_err_over_bound,
            "bwd_overflow_to_infinity": r.bwd_overflow,
            "fwd_max_rel_diff": r.max_rel,
        })).collect::<Vec<_>>(),
        "peers": peers,
        "targets": targets,
    });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    crate::report::write_atomic(&args.json, &text)?;
    crate::report::write_atomic(&args.table, &table)?;
    eprintln!("wrote {} and {}", args.json.display(), args.table.display());
    Ok(if within { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// `bench/peers/half_peers.py` on the same graph and features: its JSON,
/// or why it did not run.
fn run_peers(g: &Graph, x: &Tensor, f: usize, repeat: usize, threads: usize) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("peers").join("half_peers.py");
    let Some(xs) = x.as_f32() else { return json!({"skipped": "features are not f32"}) };
    let dir = match crate::peers::graph_dir("half", g, xs, f, None) {
        Ok(d) => d,
        Err(e) => return json!({"skipped": e}),
    };
    let out = Command::new("python3")
        .arg(&script)
        .arg(&dir.0)
        .args(["--repeat", &repeat.to_string(), "--threads", &threads.to_string()])
        .output();
    match out {
        Err(e) => json!({"skipped": format!("python3 failed to start: {e}")}),
        Ok(o) => {
            let text = String::from_utf8_lossy(&o.stdout);
            match serde_json::from_str::<Value>(text.trim()) {
                Ok(v) => v,
                Err(_) => json!({"skipped": format!("half_peers.py: {}", String::from_utf8_lossy(&o.stderr).trim())}),
            }
        }
    }
}
