//! The plan rewrites: shortcuts `generate-adjoint` takes after building
//! the stages, each a function run in the order of [`PLAN_REWRITES`] with
//! every stage kernel verified after it.
//!
//! The stage builders build the general plan; a rewrite changes it where
//! the kernel allows something cheaper (no `node`, so the aggregate's
//! cotangent is the output's; statistics cheap enough to recompute; a
//! max/min whose winners can be scattered) and returns the note that says
//! so. Which reducers allow which rewrite is the reducer rule's word
//! (`adjoint/reducer_rules.rs`).

use super::operation_rules::AdjointError;
use super::plan::{Binding, SourceSides, Stage, StageKind};
use super::reducer_rules::reducer_rule;
use crate::ir::Kernel;

/// `c` for a stats output named `abar{c}` (the aggregate's cotangent).
fn abar_index(name: &str) -> Option<usize> {
    name.strip_prefix("abar").and_then(|c| c.parse::<usize>().ok())
}

/// Later stages that read the stats stage's `abar{c}` read the cotangent
/// of output `c` instead: without a `node` function they are equal.
fn read_cotangent_for_abar(k: &Kernel, stages: &mut [Stage]) {
    for st in stages.iter_mut().skip(1) {
        for bnd in &mut st.bindings {
            if let Binding::Stage { stage: 0, output } = bnd {
                if let Some(o) = abar_index(output).and_then(|c| k.outputs.get(c)) {
                    *bnd = Binding::Cotangent(o.name.clone());
                }
            }
        }
        // (Scattered bindings are built after this runs: see `scatter`.)
    }
}

/// A rewrite of the adjoint plan: it changes the stages when it applies
/// and returns the note that says what it did.
pub(super) type PlanRewrite = fn(&Kernel, &mut Vec<Stage>, &mut Option<SourceSides>) -> Result<Option<String>, AdjointError>;

/// The plan rewrites, in the order they run; every stage kernel is
/// verified after each.
pub(super) const PLAN_REWRITES: [(&str, PlanRewrite); 4] = [
    ("read-cotangent-directly", read_cotangent_directly),
    ("drop-copied-cotangents", drop_copied_cotangents),
    ("recompute-row-statistics", recompute_row_statistics),
    ("scatter-winning-cotangents", scatter_winning_cotangents),
];

/// A sum without `node`: the aggregate's cotangent is the output's, so
/// stages read the cotangent directly, and a stats stage left with nothing
/// else to do is dropped.
#[allow(clippy::ptr_arg)] // every rewrite has `PlanRewrite`'s signature; some remove stages
fn read_cotangent_directly(
    k: &Kernel,
    stages: &mut Vec<Stage>,
    _: &mut Option<SourceSides>,
) -> Result<Option<String>, AdjointError> {
    if !reducer_rule(k.reducer.kind).needs(k).reads_cotangent_directly {
        return Ok(None);
    }
    read_cotangent_for_abar(k, stages);
    let still_bound = stages.iter().skip(1).any(|st| st.bindings.iter().any(|b| matches!(b, Binding::Stage { stage: 0, .. })));
    let stats_needed = still_bound || stages[0].kernel.outputs.iter().any(|o| o.name.starts_with("grad."));
    if stats_needed {
        return Ok(None);
    }
    stages.remove(0);
    for st in stages.iter_mut() {
        for bnd in &mut st.bindings {
            if let Binding::Stage { stage, .. } = bnd {
                *stage -= 1;
            }
        }
    }
    Ok(Some("sum/mean without `node`: each message's cotangent is the output's (over the row's degree for mean), read directly; no row-statistics stage".into()))
}

/// Max, min, prod or softmax without `node`: likewise the stats stage's
/// `abar` outputs are copies of the cotangent; later stages read the
/// cotangent, and the stats stage no longer writes the copies (a row of
/// the output's width per node, written and read back).
#[allow(clippy::ptr_arg)] // every rewrite has `PlanRewrite`'s signature; some remove stages
fn drop_copied_cotangents(
    k: &Kernel,
    stages: &mut Vec<Stage>,
    _: &mut Option<SourceSides>,
) -> Result<Option<String>, AdjointError> {
    if !(reducer_rule(k.reducer.kind).needs(k).copies_cotangent && stages.len() > 1) {
        return Ok(None);
    }
    read_cotangent_for_abar(k, stages);
    let bound: Vec<String> = stages
        .iter()
        .skip(1)
        .flat_map(|st| st.bindings.iter())
        .filter_map(|b| match b {
            Binding::Stage { stage: 0, output } => Some(output.clone()),
            _ => None,
        })
        .collect();
    let stats = &mut stages[0].kernel;
    let keep: Vec<bool> = stats.outputs.iter().map(|o| abar_index(&o.name).is_none() || bound.contains(&o.name)).collect();
    if !keep.iter().any(|k| !k) {
        return Ok(None);
    }
    if let Some(node) = &mut stats.node {
        let mut kept = keep.iter();
        node.outputs.retain(|_| kept.next().copied().unwrap_or(true));
    }
    let mut kept = keep.iter();
    stats.outputs.retain(|_| kept.next().copied().unwrap_or(true));
    Ok(Some(
        "no `node`: the aggregate's cotangent is the output's; later stages read it directly, the stats stage does not copy it"
            .into(),
    ))
}

/// Scalar row statistics that are short expressions of the row's fields:
/// the source stage recomputes them per edge (same bits), and the stats
/// pass and its buffer go.
#[allow(clippy::ptr_arg)] // every rewrite has `PlanRewrite`'s signature; some remove stages
fn recompute_row_statistics(
    _: &Kernel,
    stages: &mut Vec<Stage>,
    _: &mut Option<SourceSides>,
) -> Result<Option<String>, AdjointError> {
    let is_stats = stages.first().is_some_and(|s| s.kind == StageKind::RowStatistics);
    Ok(super::inline_stats::recompute_row_statistics(stages, is_stats).then(|| {
        "the row statistics are short scalar expressions of each row's fields: the source stage recomputes them per edge (same operations, same bits) instead of a stats pass writing them".into()
    }))
}

/// Max/min whose messages depend on the source alone: the source side
/// scatters each lane's winning cotangent to its source node and
/// differentiates the edge function once per node.
#[allow(clippy::ptr_arg)] // every rewrite has `PlanRewrite`'s signature; some remove stages
fn scatter_winning_cotangents(
    k: &Kernel,
    stages: &mut Vec<Stage>,
    sides: &mut Option<SourceSides>,
) -> Result<Option<String>, AdjointError> {
    *sides = super::scatter::scatter_winning_cotangents(k, stages)?;
    Ok(sides.is_some().then(|| super::scatter::NOTE.into()))
}
