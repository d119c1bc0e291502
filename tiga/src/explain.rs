//! `explain`: what the compiler did to a kernel, for a person at a terminal.

use std::fmt::Write as _;

use tiga_compiler::passes::RemarkKind;

use crate::Kernel;

pub(crate) fn explain(k: &Kernel) -> String {
    let mut s = String::new();
    let cap = k.captured();
    let low = k.lowered();
    let _ = writeln!(s, "kernel {}", cap.name);
    let isa = tiga_compiler::back::cranelift::host_isa_name().unwrap_or_else(|e| format!("unavailable: {e}"));
    let _ = writeln!(s, "  backend:   cranelift JIT ({isa}); one variant per (dtype, widths, edge order), cached per process");
    let _ = writeln!(
        s,
        "  lowering:  destination-major CSR gather/segment; edge and node regions {}",
        if low.segment.as_ref().is_some_and(|g| g.fused) { "fused (no message buffer)" } else { "not fused" }
    );
    let r = &low.reducer;
    let _ = writeln!(
        s,
        "  reducer:   {} (class {})",
        r.kind.name(),
        r.class.map(|c| c.name()).unwrap_or("unclassified")
    );
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
    for (i, p) in k.compiled().passes.iter().enumerate() {
        let _ = writeln!(s, "  {}. {}", i + 1, p.name);
        for rm in &p.remarks {
            let kind = match rm.kind {
                RemarkKind::Applied => "applied",
                RemarkKind::Missed => "missed",
                RemarkKind::Analysis => "analysis",
            };
            let at = rm.span.map(|sp| format!(" @{}:{}", sp.line, sp.col)).unwrap_or_default();
            let _ = writeln!(s, "       [{kind}]{at} {}", rm.message);
        }
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "loop nest:");
    for line in k.loop_kernel().to_string().lines() {
        let _ = writeln!(s, "  {line}");
    }
    let _ = writeln!(s);
    let stats = crate::jit().stats();
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
    }
    s
}
