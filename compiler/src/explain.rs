//! What the compiler did to a kernel, in words for a person at a terminal:
//! its passes with their remarks, its adjoint's stages and what each reads,
//! and a saved-residual plan. The facade's `Kernel::explain` adds what only
//! a running process knows (back ends, the variant cache) around these.

use std::fmt::Write as _;

use crate::adjoint::kernel::{Adjoint, Binding, GraphUse, Residual, ResidualPlan};
use crate::ir::{self, FieldDecl, Role};
use crate::passes::{Compiled, PassRecord, RemarkKind};

/// The saved-residuals section's body for `plan` (the residuals kept by
/// the forward `forward` of `cap`, their cost per row, the backward's
/// stages), beside the recomputing adjoint `plain` where there is one.
pub fn residual_plan(s: &mut String, cap: &ir::Kernel, plan: &ResidualPlan, forward: &str, plain: Option<&Adjoint>) {
    let kept: Vec<String> = plan.residuals.iter().map(|r| format!("{}: {}", r.name, ir::print::TypeIn(cap, r.ty))).collect();
    let _ = writeln!(s, "  kept:      {} (outputs `residual.<name>` of `{}`)", kept.join(", "), forward);
    let _ = writeln!(
        s,
        "  cost:      {} values per destination row (4 bytes each in f32, 8 in f64), held from the forward to the backward",
        residual_values(cap, &plan.residuals)
    );
    let plain_len = plain.map(|p| p.stages.len()).unwrap_or(0);
    let plain_notes: &[String] = plain.map(|p| p.notes.as_slice()).unwrap_or(&[]);
    let names: Vec<String> =
        plan.adjoint.stages.iter().map(|st| format!("{} [{}]", st.kernel.name, graph_short(st.graph))).collect();
    let _ = writeln!(s, "  backward:  {} stage(s) (the recomputing plan: {plain_len}): {}", names.len(), names.join(", "));
    for st in plan.adjoint.stages.iter().filter(|st| st.graph == GraphUse::DestinationRows) {
        let reads: Vec<String> = st
            .kernel
            .fields
            .iter()
            .zip(&st.bindings)
            .map(|(f, b)| format!("{}.{} <- {}", f.role.name(), f.name, b_words(b)))
            .collect();
        let _ = writeln!(s, "    {} reads: {}", st.kernel.name, reads.join(", "));
    }
    if let Some(folded) = &plan.in_memory {
        let names: Vec<String> =
            folded.adjoint.stages.iter().map(|st| format!("{} [{}]", st.kernel.name, graph_short(st.graph))).collect();
        let _ = writeln!(
            s,
            "  in memory: {} stage(s) (a CSR in RAM on the CPU; paged, offloaded and generated graphs run the above): {}",
            names.len(),
            names.join(", ")
        );
    }
    // What these plans say that the recomputing one does not: which
    // statistics they read, and a stage folded away (once each).
    let saved_notes = &plan.adjoint.notes;
    let folded_notes = plan.in_memory.iter().flat_map(|f| f.adjoint.notes.iter()).filter(|n| !saved_notes.contains(n));
    for note in saved_notes.iter().chain(folded_notes).filter(|n| !plain_notes.contains(n)) {
        let _ = writeln!(s, "  note:      {note}");
    }
}

/// A binding of the saved-statistics stage, in words (no stage numbers).
fn b_words(b: &Binding) -> String {
    match b {
        Binding::Forward(role, name) => format!("forward {}.{name}", role.name()),
        Binding::Cotangent(name) => format!("cotangent of `{name}`"),
        Binding::Residual(name) => format!("residual `{name}`"),
        other => format!("{other:?}"),
    }
}

/// The residuals' values per row, as a sum over width symbols (`1 + F`).
fn residual_values(k: &ir::Kernel, rs: &[Residual]) -> String {
    use crate::ir::Type;
    let mut scalars = 0usize;
    let mut per_width: Vec<(String, usize)> = Vec::new();
    for r in rs {
        let width = |w: ir::WidthId| k.widths.get(w.0 as usize).map(|d| d.name.clone()).unwrap_or_else(|| "?".into());
        let key = match r.ty {
            Type::Vector(w) | Type::Mask(w) => width(w),
            Type::Matrix(a, b) => format!("{}·{}", width(a), width(b)),
            Type::Scalar | Type::Bool => {
                scalars += 1;
                continue;
            }
        };
        match per_width.iter_mut().find(|(n, _)| *n == key) {
            Some((_, c)) => *c += 1,
            None => per_width.push((key, 1)),
        }
    }
    let mut terms: Vec<String> = Vec::new();
    if scalars > 0 {
        terms.push(scalars.to_string());
    }
    terms.extend(per_width.into_iter().map(|(w, c)| if c == 1 { w } else { format!("{c}·{w}") }));
    if terms.is_empty() {
        "0".into()
    } else {
        terms.join(" + ")
    }
}

/// Each pass, numbered, with every remark indented under it.
pub fn write_passes(s: &mut String, passes: &[PassRecord], indent: &str) {
    for (i, p) in passes.iter().enumerate() {
        let _ = writeln!(s, "{indent}{}. {}", i + 1, p.name);
        for rm in &p.remarks {
            let kind = match rm.kind {
                RemarkKind::Applied => "applied",
                RemarkKind::Missed => "missed",
                RemarkKind::Analysis => "analysis",
            };
            let at = rm.span.map(|sp| format!(" @{}:{}", sp.line, sp.col)).unwrap_or_default();
            let _ = writeln!(s, "{indent}     [{kind}]{at} {}", rm.message);
        }
    }
}

fn graph_words(g: GraphUse) -> &'static str {
    match g {
        GraphUse::Forward => "forward graph",
        GraphUse::Transposed => "transposed graph (sources and destinations swapped, edge ids kept)",
        GraphUse::RowReversed => "row-reversed graph (each row's edges in reverse order, edge ids kept)",
        GraphUse::SelfLoops => "one row per source node (its single edge from itself): node-wise",
        GraphUse::DestinationRows => "one row per destination node, no edges: node-wise",
    }
}

fn graph_short(g: GraphUse) -> &'static str {
    match g {
        GraphUse::Forward => "forward graph",
        GraphUse::Transposed => "transposed graph",
        GraphUse::RowReversed => "row-reversed graph",
        GraphUse::SelfLoops => "per source node",
        GraphUse::DestinationRows => "per destination node",
    }
}

/// A stage field's binding, in short form: `stage field <- where it comes from`.
fn binding_short(plan: &Adjoint, field: &FieldDecl, b: &Binding) -> String {
    format!("{}.{} <- {}", field.role.name(), field.name, binding_source(plan, b))
}

/// Where a binding's values come from, in words.
fn binding_source(plan: &Adjoint, b: &Binding) -> String {
    match b {
        Binding::Forward(role, name) => format!("forward {}.{name}", role.name()),
        Binding::Cotangent(name) => format!("cotangent of `{name}`"),
        Binding::Stage { stage, output } => {
            let stage_name = plan.stages.get(*stage).map(|s| s.kernel.name.as_str()).unwrap_or("?");
            format!("{stage_name}:{output}")
        }
        Binding::EdgeRank => "edge rank within its forward row".to_string(),
        Binding::InvDegree => "1 / max(degree, 1) of each forward row".to_string(),
        Binding::WinnerScatter { winner, value } => format!(
            "per source, the sum of {} over the rows whose winning edge ({}) comes from it",
            binding_source(plan, value),
            binding_source(plan, winner)
        ),
        Binding::Residual(name) => format!("the forward's residual `{name}`"),
    }
}

/// The adjoint section's body: the VJP's stages (`compiled`, one each, in
/// order), which graph each runs over, what it produces, and the plan's
/// notes.
pub fn adjoint(s: &mut String, plan: &Adjoint, compiled: &[&Compiled]) {
    let stages = &plan.stages;
    let _ =
        writeln!(s, "  {} stage(s), run in order; each is an ordinary kernel (same passes, scheduler, back end)", stages.len());
    if let Some(sides) = plan.source_sides {
        let _ = writeln!(
            s,
            "  stages {} and {} are two ways to the source gradients, and a call runs one: stage {} (a scatter, no transposed \
             graph), except a paged call whose source gradient is over the RAM budget on a file with a stored transpose, \
             which runs stage {} (its gradient goes to a file as its rows are done)",
            sides.transposed + 1,
            sides.scatter + 1,
            sides.scatter + 1,
            sides.transposed + 1
        );
    }

    // Which gradients come from which graph, by forward role.
    let _ = writeln!(s, "  gradients:");
    if plan.gradients.is_empty() {
        let _ = writeln!(s, "    none (the kernel reads no fields)");
    }
    for role in [Role::Src, Role::Dst, Role::Edge, Role::Param] {
        let grads: Vec<_> = plan.gradients.iter().filter(|g| g.role == role).collect();
        if grads.is_empty() {
            continue;
        }
        let names: Vec<&str> = grads.iter().map(|g| g.name.as_str()).collect();
        let mut from: Vec<usize> = grads.iter().flat_map(|g| g.parts.iter().map(|(i, _)| *i)).collect();
        from.sort_unstable();
        from.dedup();
        let graphs: Vec<GraphUse> = {
            let mut v: Vec<GraphUse> = Vec::new();
            for &i in &from {
                if let Some(st) = stages.get(i) {
                    if !v.contains(&st.graph) {
                        v.push(st.graph);
                    }
                }
            }
            v
        };
        let stage_names: Vec<&str> = from.iter().filter_map(|&i| stages.get(i)).map(|st| st.kernel.name.as_str()).collect();
        let how = match role {
            Role::Src if graphs == [GraphUse::Transposed] => {
                "transposed graph, no atomics (a sum over each source's out-edges is a row of the transposed graph)".to_string()
            }
            Role::Src if plan.source_sides.is_some() => "each row's winning cotangents scattered to their sources \
                 (rows in order, lanes split between threads: no atomics), then the edge function's adjoint per source; \
                 or, paged over the RAM budget, the transposed graph"
                .to_string(),
            Role::Edge => format!("{}, one value per edge, in the graph file's edge order", graphs_text(&graphs)),
            Role::Dst => format!("{}, summed over each destination's row", graphs_text(&graphs)),
            Role::Param => format!("{}, summed over every row and edge", graphs_text(&graphs)),
            Role::Src => graphs_text(&graphs),
        };
        let _ = writeln!(
            s,
            "    {} gradients ({}): {how}; from {}",
            role.name(),
            names.join(", "),
            match (stage_names.is_empty(), plan.source_sides.is_some() && role == Role::Src) {
                (true, _) => "no stage (zero)".to_string(),
                (false, true) => stage_names.join(" or "),
                (false, false) => stage_names.join(" + "),
            }
        );
    }

    for (i, (stage, compiled)) in stages.iter().zip(compiled).enumerate() {
        let _ = writeln!(s);
        let _ = writeln!(s, "  stage {}: {}", i + 1, stage.kernel.name);
        let _ = writeln!(s, "    purpose:   {}", stage.purpose);
        let _ = writeln!(s, "    graph:     {}", graph_words(stage.graph));
        let produced: Vec<&str> =
            stage.kernel.outputs.iter().map(|o| o.name.as_str()).filter(|n| n.starts_with("grad.")).collect();
        let _ = writeln!(
            s,
            "    produces:  {}",
            if produced.is_empty() {
                "no gradients (intermediate values for later stages)".to_string()
            } else {
                produced.join(", ")
            }
        );
        let other: Vec<&str> = stage.kernel.outputs.iter().map(|o| o.name.as_str()).filter(|n| !n.starts_with("grad.")).collect();
        if !other.is_empty() {
            let _ = writeln!(s, "    also:      {} (for later stages)", other.join(", "));
        }
        let lk = &compiled.lowered;
        let _ = writeln!(
            s,
            "    reducer:   {} (class {}); edge and node regions {}",
            lk.reducer.kind.name(),
            lk.reducer.class.map(|c| c.name()).unwrap_or("unclassified"),
            if lk.segment.as_ref().is_some_and(|g| g.fused) { "fused" } else { "not fused" }
        );
        let _ = writeln!(s, "    bindings:");
        for (f, b) in stage.kernel.fields.iter().zip(&stage.bindings) {
            let _ = writeln!(s, "      {}", binding_short(plan, f, b));
        }
        let _ = writeln!(s, "    passes (in order):");
        write_passes(s, &compiled.passes, "      ");
    }
    let _ = writeln!(s);
    if plan.notes.is_empty() {
        let _ = writeln!(s, "  notes: none");
    } else {
        let _ = writeln!(s, "  notes:");
        for n in &plan.notes {
            let _ = writeln!(s, "    - {n}");
        }
    }
}

fn graphs_text(graphs: &[GraphUse]) -> String {
    if graphs.is_empty() {
        return "no stage".to_string();
    }
    graphs.iter().map(|g| graph_short(*g)).collect::<Vec<_>>().join(" and ")
}
