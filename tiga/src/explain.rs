//! `explain`: what the compiler did to a kernel, for a person at a terminal.

use std::fmt::Write as _;

use tiga_compiler::explain;

use crate::kernel::Kernel;

/// Which back end runs the kernel on a generated stencil under
/// `Backend::Auto`, and why.
fn stencil_backend(k: &Kernel) -> String {
    let with_stencil: Vec<String> = k
        .aot_variants()
        .iter()
        .filter(|v| v.dtype == tiga_runtime::DType::F32 && v.stencil.is_some())
        .map(|v| format!("{:?}", v.widths))
        .collect();
    if with_stencil.is_empty() {
        let why = match tiga_compiler::back::rust_source::stencil_refusal(k.loop_kernel()) {
            _ if k.aot_variants().is_empty() => "no ahead-of-time variants".to_string(),
            Some(why) => format!("no ahead-of-time stencil variant: {why}"),
            None => "no ahead-of-time stencil variant".to_string(),
        };
        format!("cranelift JIT, one variant per grid with the grid baked in ({why})")
    } else if crate::kernel::STENCIL_AUTO_AOT {
        format!(
            "rust-aot stencil variant (the grid read at run time, interior rows in blocks) for f32/f64 with widths {}; cranelift JIT for every other width",
            with_stencil.join(" ")
        )
    } else {
        "cranelift JIT, one variant per grid (Backend::Aot selects the rust-aot stencil variant)".to_string()
    }
}

pub(crate) fn explain(k: &Kernel) -> String {
    let mut s = String::new();
    let cap = k.captured();
    let low = k.lowered();
    let _ = writeln!(s, "kernel {}", cap.name);
    let isa = tiga_compiler::back::cranelift::host_isa_name().unwrap_or_else(|e| format!("unavailable: {e}"));
    if k.aot_variants().is_empty() {
        let _ = writeln!(
            s,
            "  backend:   cranelift JIT ({isa}); one variant per (dtype, widths, edge order), cached per process (kernel files and artifacts have no ahead-of-time variants; `#[message_passing]` kernels do)"
        );
    } else {
        let f32_widths = |half: bool| -> Vec<String> {
            k.aot_variants()
                .iter()
                .filter(|v| v.dtype == tiga_runtime::DType::F32 && v.storage.is_empty() != half)
                .map(|v| format!("{:?}", v.widths))
                .collect()
        };
        let half = f32_widths(true);
        let declared = if half.is_empty() {
            String::new()
        } else {
            let storage = tiga_compiler::loops::Storage::declared(k.loop_kernel());
            format!(", and with fields stored as declared ({}) for widths {}", storage.describe(k.loop_kernel()), half.join(" "))
        };
        let _ = writeln!(
            s,
            "  backend:   rust-aot (the macro's loops compiled by rustc/LLVM, AVX2+FMA chosen at run time) for f32/f64 with widths {}{declared}; cranelift JIT ({isa}) for every other width or storage",
            f32_widths(false).join(" ")
        );
    }
    let _ = writeln!(s, "  stencils:  {}", stencil_backend(k));
    let _ = writeln!(
        s,
        "  lowering:  destination-major CSR gather/segment; edge and node regions {}",
        if low.segment.as_ref().is_some_and(|g| g.fused) { "fused (no message buffer)" } else { "not fused" }
    );
    let r = &low.reducer;
    let _ = writeln!(s, "  reducer:   {} (class {})", r.kind.name(), r.class.map(|c| c.name()).unwrap_or("unclassified"));
    let fields: Vec<String> = cap
        .fields
        .iter()
        .map(|f| format!("{}.{}: {}", f.role.name(), f.name, tiga_compiler::ir::print::TypeIn(cap, f.ty)))
        .collect();
    let _ = writeln!(s, "  fields:    {}", if fields.is_empty() { "none".into() } else { fields.join(", ") });
    let outs: Vec<String> =
        cap.outputs.iter().map(|o| format!("{}: {}", o.name, tiga_compiler::ir::print::TypeIn(cap, o.ty))).collect();
    let _ = writeln!(s, "  outputs:   {}", outs.join(", "));
    let _ = writeln!(s);
    let _ = writeln!(s, "passes (in order):");
    explain::write_passes(&mut s, &k.compiled().passes, "  ");
    let _ = writeln!(s);
    let _ = writeln!(s, "loop nest:");
    for line in k.loop_kernel().to_string().lines() {
        let _ = writeln!(s, "  {line}");
    }
    let _ = writeln!(s);
    let stats = crate::kernel::jit().stats();
    let mine: Vec<_> = stats.variants.iter().filter(|(key, _)| key.kernel.starts_with(&format!("{}#", cap.name))).collect();
    let _ = writeln!(s, "variant cache (this process): {} hit(s), {} miss(es) over all kernels", stats.hits, stats.misses);
    if mine.is_empty() {
        let _ = writeln!(s, "  no variant of {} compiled yet (variants compile on first call)", cap.name);
    }
    for (key, ms) in mine {
        let _ = writeln!(
            s,
            "  {} {} widths {:?} edge order {}: compiled in {:.2} ms",
            cap.name,
            key.dtype.name(),
            key.widths,
            if key.edge_ids { "permuted" } else { "identity" },
            ms
        );
        if let Some(v) = crate::kernel::jit().get(key) {
            for note in &v.notes {
                let _ = writeln!(s, "    {note}");
            }
            // Every choice behind the notes, decided before translation.
            for line in v.plan.to_string().lines() {
                let _ = writeln!(s, "    {line}");
            }
        }
    }
    let _ = writeln!(s);
    adjoint(&mut s, k);
    let _ = writeln!(s);
    residuals(&mut s, k);
    s
}

/// The saved-residuals section: which residuals a forward that keeps them
/// writes, what they cost per destination row, and the backward's stages.
fn residuals(s: &mut String, k: &Kernel) {
    let _ = writeln!(s, "saved residuals (`Schedule::residuals`, `Kernel::forward`, `tigac run --grads`):");
    match k.residuals() {
        Ok(crate::kernel::Residuals::Kept(st)) => {
            let plain = k.adjoint_plan().ok();
            explain::residual_plan(s, k.captured(), &st.plan, st.forward.name(), plain.as_ref().map(|p| &p.adjoint))
        }
        Ok(crate::kernel::Residuals::Recomputed(why)) => {
            let _ = writeln!(s, "  none: {why}; the backward recomputes its statistics");
        }
        Err(e) => {
            let _ = writeln!(s, "  none: {e}");
        }
    }
}

/// The adjoint section: the VJP's stages (each a kernel with its own passes),
/// which graph each runs over, what it produces, and the plan's notes.
fn adjoint(s: &mut String, k: &Kernel) {
    let _ = writeln!(s, "adjoint (vector-Jacobian product: `Kernel::vjp`, `tigac run --grads`):");
    match k.adjoint_plan() {
        Ok(plan) => explain::adjoint(s, &plan.adjoint, &plan.stages.iter().map(|k| k.compiled()).collect::<Vec<_>>()),
        Err(e) => {
            let _ = writeln!(s, "  not available: {e}");
            let _ = writeln!(s, "  (the forward kernel above is unaffected; only its gradients cannot be computed)");
        }
    }
}

impl Kernel {
    /// A human-readable account of what the compiler did.
    pub fn explain(&self) -> String {
        explain(self)
    }
}
