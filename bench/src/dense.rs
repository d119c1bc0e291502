//! `tiga-bench dense`: a dense layer's matrix-parameter gradient against
//! its forward.
//!
//! The kernel is a dense layer written as message passing over the
//! identity graph (`out[i] = W·h[i]`, `W: [F, F]`), the shape of every
//! linear layer inside a kernel. Its forward is N matrix-vector products;
//! the gradient of `W` alone (`Kernel::vjp_wrt` with only `W` named) is
//! the sum over rows of outer products `ḡ[i]·h[i]ᵀ`, the same multiply-adds
//! as the forward. Per back end (the Cranelift JIT through the kernel
//! source; rustc/LLVM through the macro's ahead-of-time variant,
//! `Backend::Aot`) the forward and the gradient are timed side by side in
//! rounds, and the gradient is checked against `Hᵀ·Ḡ` summed in f64 (a
//! relative error above 1e-4 fails the run). The target: the gradient at
//! most 2× its forward. A table goes to stdout (and `--table`), the JSON to
//! `--json`.
//!
//! ```sh
//! cargo run --release -p tiga-bench -- dense [--rows N] [--width F] [--repeat N] [--json PATH] [--table PATH]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;
use tiga::compiler::ir::Role;
use tiga::{Backend, Graph, Inputs, Kernel, Schedule, Tensor, Wrt};

use crate::timing::{Contender, Produced};

/// The target: the matrix-parameter gradient over the forward.
const TARGET: f64 = 2.0;

/// The dense layer, as a kernel file (JIT) and through the macro (AOT).
const DENSE: &str = include_str!("../../examples/kernels/dense_layer.rs");

#[allow(clippy::all)]
mod dense_kernel {
    use tiga::message_passing;
    include!("../../examples/kernels/dense_layer.rs");
}

/// `tiga-bench dense`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Rows (nodes of the identity graph)
    #[arg(long, value_name = "N", default_value_t = 200_000, value_parser = crate::timing::positive)]
    rows: usize,
    /// Feature width F (W is [F, F]); the macro compiles ahead of time for 64
    #[arg(long, value_name = "F", default_value_t = 64, value_parser = crate::timing::positive)]
    width: usize,
    /// Timed rounds after the warm-ups
    #[arg(long, value_name = "N", default_value_t = 7, value_parser = crate::timing::positive)]
    repeat: usize,
    /// Where the JSON goes, written atomically
    #[arg(long, value_name = "PATH", default_value = "target/bench/dense.json")]
    json: PathBuf,
    /// Where the table goes too (besides stdout)
    #[arg(long, value_name = "PATH")]
    table: Option<PathBuf>,
    /// Field seed
    #[arg(long, value_name = "N", default_value_t = 7)]
    seed: u64,
}

pub fn main(args: &Args) -> ExitCode {
    crate::timing::exit_code("dense", run(args))
}

/// Uniform values in [-1, 1) from a splitmix64 stream.
fn values(seed: u64, len: usize) -> Vec<f32> {
    let mut s = seed;
    (0..len)
        .map(|_| {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn run(args: &Args) -> Result<bool, String> {
    let (n, f) = (args.rows, args.width);
    let ids: Vec<u32> = (0..u32::try_from(n).map_err(|_| format!("--rows {n}: at most {} rows", u32::MAX))?).collect();
    let g = Graph::from_edges(n, n, &ids, &ids).map_err(|e| e.to_string())?;
    let h_data = values(args.seed, n * f);
    let cot_data = values(args.seed ^ 0x5eed, n * f);
    let h = Tensor::from_f32(vec![n, f], h_data.clone()).map_err(|e| e.to_string())?;
    let w = Tensor::from_f32(vec![f, f], values(args.seed ^ 0x77, f * f)).map_err(|e| e.to_string())?;
    let cot = Tensor::from_f32(vec![n, f], cot_data.clone()).map_err(|e| e.to_string())?;
    // dW[r, c] = Σ_i ḡ[i, r]·h[i, c], in f64.
    let mut want = vec![0.0f64; f * f];
    for i in 0..n {
        for r in 0..f {
            let gr = f64::from(cot_data[i * f + r]);
            for c in 0..f {
                want[r * f + c] += gr * f64::from(h_data[i * f + c]);
            }
        }
    }
    let jit = Kernel::from_source(DENSE, "Dense").map_err(|e| e.to_string())?;
    let aot = dense_kernel::Dense::kernel();
    let wrt = Wrt::only([(Role::Param, "w")]);
    let mut table = format!(
        "dense layer out[i] = W·h[i], {n} rows, W [{f}, {f}]: the gradient of W alone against the forward\n{:<10} {:>10} {:>10} {:>8} {:>8} {:>10} {:>4}\n",
        "back end", "fwd ms", "dW ms", "ratio", "target", "rel err", "met"
    );
    let mut rows = Vec::new();
    let mut all_met = true;
    for (name, k, backend) in [("jit", &jit, Backend::Jit), ("aot", aot, Backend::Aot)] {
        let square = |v: &tiga::AotVariant| v.dtype == tiga::DType::F32 && v.widths.iter().all(|&w| w == f);
        if backend == Backend::Aot && !k.aot_variants().iter().any(square) {
            table.push_str(&format!("{name:<10} (no ahead-of-time variant at F = {f})\n"));
            continue;
        }
        let schedule = Schedule::new().backend(backend);
        let inputs = Inputs::new().src("h", &h).param("w", &w);
        let mut contenders: Vec<Contender<'_>> = vec![
            Box::new(|| k.run_with(&g, &inputs, &schedule).map(Produced::Outputs).map_err(|e| e.to_string())),
            Box::new(|| {
                k.vjp_wrt(&g, &inputs, &[("out", cot.view())], &wrt, &schedule).map(Produced::Grads).map_err(|e| e.to_string())
            }),
        ];
        let timed = crate::timing::time_rounds(args.repeat, &mut contenders)?;
        let Produced::Grads(grads) = &timed[1].1 else { return Err("the gradient call produced no gradients".into()) };
        let got = grads.param("w").ok_or("no gradient of w")?.to_f64_vec();
        let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1.0);
        let err = got.iter().zip(&want).fold(0.0f64, |m, (a, b)| m.max((a - b).abs())) / scale;
        if err > 1e-4 {
            return Err(format!("{name}: the gradient of W is off by {err:.2e} (relative to its largest entry)"));
        }
        let (fwd, bwd) = (timed[0].0, timed[1].0);
        let ratio = bwd / fwd;
        let met = ratio <= TARGET;
        all_met &= met;
        table.push_str(&format!(
            "{name:<10} {fwd:>10.2} {bwd:>10.2} {ratio:>7.2}x {TARGET:>7.1}x {err:>10.1e} {:>4}\n",
            if met { "yes" } else { "no" }
        ));
        rows.push(json!({ "backend": name, "forward_ms": fwd, "grad_w_ms": bwd, "ratio": ratio, "target": TARGET, "met": met, "relative_error": err }));
    }
    print!("{table}");
    if let Some(p) = &args.table {
        crate::report::write_atomic(p, &table)?;
    }
    let doc = json!({
        "benchmark": "dense",
        "kernel": "out[i] = W·h[i] over the identity graph; gradient of W alone",
        "rows": n, "width": f, "repeat": args.repeat, "threads": rayon::current_num_threads(),
        "results": rows,
    });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    crate::report::write_atomic(&args.json, &text)?;
    println!("wrote {}", args.json.display());
    Ok(all_met)
}
