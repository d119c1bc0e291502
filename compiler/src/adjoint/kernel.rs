//! `generate-adjoint`: the vector-Jacobian product of a kernel, as kernels.
//!
//! The VJP of `out[i] = node(dst_i, P, R_{e=j→i} edge(src_j, dst_i, e, P))`
//! is built from up to four ordinary kernels (captured IR: they go through
//! the same passes, scheduler and back end as any kernel):
//!
//! 1. **stats** (forward graph): refolds each row with an augmented reducer
//!    that keeps what the reducer's adjoint needs (the count for `mean`, the
//!    winning edge's rank per feature for `max`/`min`, the product of
//!    non-zero messages and the zero count for `prod`, the running max and
//!    denominator for `softmax`, the exclusive prefix of a monoid's fold),
//!    rebuilds the forward aggregate, and differentiates `node` against the
//!    output cotangents: it writes the aggregate's cotangent and row
//!    statistics per destination, the destination-field gradient from
//!    `node`, and parameter-gradient sums from `node`.
//! 2. **suffix** (row-reversed graph, user monoids only): the exclusive
//!    suffix of each edge, folded with the opposite monoid.
//! 3. **edge side** (forward graph): per edge, the message cotangent from the
//!    row statistics, then the edge function's adjoint: destination-field
//!    gradients summed over the row, edge-field gradients written per edge in
//!    the user's order, parameter-gradient sums.
//! 4. **source side** (transposed graph): the same message cotangent seen
//!    from the source: `src` gradients are a sum over each source's out-edges,
//!    a message-passing kernel over the transposed graph, so the backward needs
//!    no atomics.
//!
//! Conventions at non-differentiable points (one set, everywhere): relu'(0) =
//! 0, |x|'(0) = 0, leaky_relu'(0) = slope; `max`/`min` of two operands split
//! the gradient evenly on a tie (so `max(a, b) + min(a, b)` is exact); an `if`
//! differentiates the branch taken; and a `max`/`min` *reduction* gives each
//! feature's gradient to the first edge in CSR order (the user's order within
//! a row) that attains it.
//!
//! Where each piece lives: the plan's types in `adjoint/plan.rs`; what each
//! reducer's adjoint needs, in one exhaustive match, in
//! `adjoint/reducer_rules.rs`; one builder per stage in `adjoint/stages/`;
//! the plan rewrites in `adjoint/rewrites.rs` (with `inline_stats.rs` and
//! `scatter.rs`). This file is the pass itself: it builds the stages in
//! order and runs the rewrites over them.

pub use super::plan::{
    Adjoint, Binding, FoldedPlan, GradientPlan, GraphUse, Residual, ResidualPlan, SourceSides, Stage, StageKind,
};
pub use super::residuals::{residual_plan, ResidualChoice};

use super::builder::grad_name;
use super::operation_rules::AdjointError;
use super::rewrites::PLAN_REWRITES;
use super::stages::{self, Forward, STATS_STAGE};
use crate::ir::{Kernel, Role};

/// Build the adjoint stages of a captured kernel.
pub fn generate_adjoint(k: &Kernel) -> Result<Adjoint, AdjointError> {
    let fwd = Forward::new(k);

    // ---- the stages, in the order they run ------------------------------
    let mut stages: Vec<Stage> = vec![stages::stats(&fwd)?];
    let suffix = match stages::suffix(&fwd)? {
        Some(stage) => {
            stages.push(stage);
            Some(stages.len() - 1)
        }
        None => None,
    };
    for side in [stages::edge_side, stages::source_side] {
        let built = side(&fwd, &stages[STATS_STAGE], suffix)?;
        stages.extend(built);
    }

    // ---- the plan rewrites, in order, each verified after ---------------
    let mut notes = Vec::new();
    let mut source_sides = None;
    for (name, rewrite) in PLAN_REWRITES {
        if let Some(note) = rewrite(k, &mut stages, &mut source_sides)? {
            notes.push(note);
        }
        for st in &stages {
            crate::ir::verify(&st.kernel).map_err(|source| AdjointError::Rewrite { rewrite: name, source: Box::new(source) })?;
        }
    }

    let gradients = gradient_plans(k, &stages);
    if !k.fields.iter().any(|f| f.role == Role::Src) {
        notes.push("no source fields: no transposed-graph stage".into());
    }
    notes.push(fwd.needs.note.into());
    notes.push(format!(
        "{} stage(s): {}",
        stages.len(),
        stages.iter().map(|s| format!("{} [{:?}]", s.kernel.name, s.graph)).collect::<Vec<_>>().join(", ")
    ));
    Ok(Adjoint { stages, gradients, notes, source_sides })
}

/// Each forward field's gradient: the stage outputs that carry its name.
pub(super) fn gradient_plans(k: &Kernel, stages: &[Stage]) -> Vec<GradientPlan> {
    k.fields
        .iter()
        .map(|f| {
            let name = grad_name(f.role, &f.name);
            let parts: Vec<(usize, String)> = stages
                .iter()
                .enumerate()
                .filter(|(_, s)| s.kernel.outputs.iter().any(|o| o.name == name))
                .map(|(i, _)| (i, name.clone()))
                .collect();
            GradientPlan { role: f.role, name: f.name.clone(), parts }
        })
        .collect()
}
