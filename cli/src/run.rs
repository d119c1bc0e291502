//! `tigac run`: one kernel, one graph, `.npy` fields in, `.npy` outputs out.
//!
//! This is the path a user without a Rust toolchain takes to run a kernel on
//! their data, and the path benchmarks take (`--repeat`, `--timing`), so it
//! checks everything it can before any compile or run (outputs named, files
//! readable) and times only what it claims to: the JIT compile of the
//! variant, then each `Kernel::run` alone, never file I/O.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use tiga::compiler::bind::{bind_shapes, Extents};
use tiga::compiler::ir::Role;
use tiga::{Inputs, Kernel, Tensor};

use crate::inputs::{common_dtype, load_field, load_graph, load_kernels, Binding, OutSpec};
use crate::report::Failure;

/// Everything `tigac run` was asked to do.
#[derive(Debug)]
pub struct RunRequest {
    pub file: PathBuf,
    pub kernel: String,
    pub graph: PathBuf,
    pub num_nodes: Option<usize>,
    pub fields: Vec<(Role, Binding)>,
    pub outs: Vec<OutSpec>,
    pub repeat: usize,
    pub timing: bool,
}

/// Match `--out` flags to the kernel's outputs: a plain path for a kernel
/// with one output, `NAME=PATH` for each output otherwise.
fn plan_outputs(k: &Kernel, outs: &[OutSpec]) -> Result<Vec<(String, PathBuf)>, Failure> {
    let names: Vec<String> = k.output_names().iter().map(|s| s.to_string()).collect();
    let listed = names.join(", ");
    if outs.is_empty() {
        return Err(Failure::new(format!("kernel `{}` has outputs {listed}; pass --out", k.name())));
    }
    if let [OutSpec { name: None, path }] = outs {
        if names.len() == 1 {
            return Ok(vec![(names[0].clone(), path.clone())]);
        }
    }
    let mut plan: Vec<(String, PathBuf)> = Vec::new();
    for o in outs {
        let Some(name) = &o.name else {
            return Err(Failure::new(format!(
                "kernel `{}` has {} outputs ({listed}); name each one: --out NAME=FILE.npy (got `{}`)",
                k.name(),
                names.len(),
                o.path.display()
            )));
        };
        if !names.contains(name) {
            return Err(Failure::new(format!("kernel `{}` has no output `{name}`; its outputs: {listed}", k.name())));
        }
        if plan.iter().any(|(n, _)| n == name) {
            return Err(Failure::new(format!("--out {name}=... is given twice")));
        }
        plan.push((name.clone(), o.path.clone()));
    }
    let missing: Vec<&str> = names.iter().filter(|n| !plan.iter().any(|(p, _)| p == *n)).map(String::as_str).collect();
    if !missing.is_empty() {
        return Err(Failure::new(format!(
            "kernel `{}` has outputs {listed}; missing --out for {} (use --out NAME=FILE.npy for each)",
            k.name(),
            missing.join(", ")
        )));
    }
    Ok(plan)
}

fn median_ms(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    match xs.len() {
        0 => 0.0,
        n if n % 2 == 1 => xs[n / 2],
        n => 0.5 * (xs[n / 2 - 1] + xs[n / 2]),
    }
}

pub fn run(req: &RunRequest) -> Result<(), Failure> {
    let mut kernels = load_kernels(&req.file, Some(&req.kernel))?;
    let kernel = kernels.pop().ok_or_else(|| Failure::new(format!("no kernel named `{}`", req.kernel)))?;
    let plan = plan_outputs(&kernel, &req.outs)?;

    let mut seen: Vec<(Role, &str)> = Vec::new();
    for (role, b) in &req.fields {
        if seen.contains(&(*role, b.name.as_str())) {
            return Err(Failure::new(format!("{} field `{}` is given twice", role.name(), b.name)));
        }
        seen.push((*role, &b.name));
    }
    let graph = load_graph(&req.graph, req.num_nodes)?;
    let tensors: Vec<(Role, &Binding, Tensor)> =
        req.fields.iter().map(|(r, b)| Ok((*r, b, load_field(*r, b)?))).collect::<Result<_, Failure>>()?;
    let inputs = tensors.iter().fold(Inputs::new(), |acc, (r, b, t)| acc.with_role(*r, &b.name, t));
    let file_of = |role: &str, name: &str| {
        tensors.iter().find(|(r, b, _)| r.name() == role && b.name == name).map(|(_, b, _)| b.path.display().to_string())
    };
    let explain_call = |e: tiga::Error| -> Failure {
        use tiga::compiler::bind::BindError;
        let extra = match &e {
            tiga::Error::Bind(BindError::Shape { role, name, .. } | BindError::Width { role, name, .. }) => {
                file_of(role, name).map(|p| format!(" (read from {p})")).unwrap_or_default()
            }
            tiga::Error::Bind(BindError::MissingField { role, name, .. }) => format!("; pass it with --{role} {name}=FILE.npy"),
            _ => String::new(),
        };
        Failure::new(format!("{e}{extra}"))
    };

    // Compile the variant up front, so --timing reports the JIT compile on
    // its own. When the fields do not fit the kernel, skip this: the first
    // run then reports exactly what is wrong.
    let k_ir = kernel.captured();
    let extents = Extents { num_src: graph.num_src(), num_dst: graph.num_dst(), num_edges: graph.num_edges() };
    let declared: Option<Vec<&Tensor>> = k_ir
        .fields
        .iter()
        .map(|f| tensors.iter().find(|(r, b, _)| *r == f.role && b.name == f.name).map(|(_, _, t)| t))
        .collect();
    let mut compile_ms = None;
    let mut call = None;
    if let Some(ts) = declared.filter(|ts| ts.len() == tensors.len()) {
        let shapes: Vec<&[usize]> = ts.iter().map(|t| t.shape()).collect();
        if let (Some(dtype), Ok(widths)) = (common_dtype(ts.iter().copied()), bind_shapes(k_ir, &extents, &shapes)) {
            // The JIT's own time for this variant (measured when it was built).
            let (variant, _hit) = kernel.variant(dtype, &widths, graph.edge_ids().is_some()).map_err(explain_call)?;
            compile_ms = Some(variant.compile_ms);
            call = Some((dtype, widths));
        }
    }

    let mut times = Vec::with_capacity(req.repeat);
    let mut outputs = None;
    for _ in 0..req.repeat.max(1) {
        let start = Instant::now();
        let o = kernel.run(&graph, &inputs).map_err(explain_call)?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
        outputs = Some(o);
    }
    let outputs = outputs.ok_or_else(|| Failure::new("the kernel did not run"))?;

    for (name, path) in &plan {
        let t = outputs.get(name).ok_or_else(|| Failure::new(format!("kernel `{}` produced no output `{name}`", kernel.name())))?;
        tiga::write_npy(path, &t.view()).map_err(|e| Failure::new(format!("output `{name}`: {e}")))?;
    }

    let runs = times.len();
    let median = median_ms(times);
    if req.timing {
        let line = serde_json::json!({
            "compile_ms": compile_ms.unwrap_or(0.0),
            "run_ms_median": median,
            "runs": runs,
        });
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    } else {
        let (dtype, widths) = call.map(|(d, w)| (d.name(), format!("{w:?}"))).unwrap_or(("?", "?".into()));
        let wrote: Vec<String> = plan.iter().map(|(n, p)| format!("{n} -> {}", p.display())).collect();
        let _ = writeln!(
            std::io::stderr(),
            "ran {} ({dtype}, widths {widths}) on {} nodes / {} edges: {runs} run(s), median {median:.3} ms; wrote {}",
            kernel.name(),
            graph.num_dst(),
            graph.num_edges(),
            wrote.join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::median_ms;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median_ms(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median_ms(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median_ms(vec![]), 0.0);
    }
}
