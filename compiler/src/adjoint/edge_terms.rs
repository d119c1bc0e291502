//! A saved-residual backward without its edge side, where the source side
//! can write the edge side's terms.
//!
//! The edge side (forward graph) and the source side (transposed graph)
//! both recompute every edge's message and its cotangent, and differentiate
//! the edge function against it: a backward with both reads every edge's
//! source row twice, once from each end. Where the edge side writes nothing
//! but scalar destination-field gradients (GAT's `a_dst`: one number per
//! edge, summed over the row), the source side forms the same per-edge
//! terms anyway (the edge function's adjoint gives a leaf for every field
//! it reads). So the source side writes them per edge, by edge id (its
//! edge outputs), and a stage over the forward graph that reads one scalar
//! per edge sums them over each row, in the row's order from +0, as the
//! edge side did: the same terms in the same order, the same bits.
//!
//! ```text
//! stats | edge side (forward, F-wide)  | source side (transposed)
//! stats | source side + edge terms (transposed) | row sums of the terms (forward, one scalar per edge)
//! ```
//!
//! The cost moved: the edge side's pass over every edge (a gather of the
//! source row, the cotangent row and the statistics per edge) becomes one
//! store per edge from the source side and one scalar pass; the terms
//! buffer (4 bytes per edge in f32, 8 in f64) lives in RAM from the one
//! stage to the next. So only the saved-residual plan's in-memory variant
//! ([`super::plan::ResidualPlan::in_memory`]) does this: a paged call
//! keeps its RAM to its budget and a generated stencil has no edge ids to
//! write by, and both, like the recomputing plan (which sharded and GPU
//! calls run), keep the edge side.
//!
//! The row sums run each row whole, as the edge side did: a plain sum
//! kernel's long rows may be cut into segments summed apart (see the
//! runtime's `splittable`), which would change the order of the additions;
//! the stage's edge function reads the edge's rank, which keeps a row
//! whole.

use super::builder::{builtin, empty_kernel, forward_fields, grad_name, passthrough_node, B};
use super::kernel::gradient_plans;
use super::operation_rules::AdjointError;
use super::plan::{Adjoint, Binding, GraphUse, Stage, StageKind};
use super::stages::{edge_term_name, source_side_with_edge_terms, Forward, STATS_STAGE};
use crate::ir::{DType, FieldDecl, Op, OutputDecl, ReducerKind, Region, Role, Type, ValueId};

/// A plan with its edge side folded, and each stage's origin in the plan
/// it was folded from.
pub(super) type Folded = (Adjoint, Vec<Option<usize>>);

/// `plain` (a recomputing plan, stats first) with its edge side replaced
/// by the source side's edge terms and their row sums, where that applies;
/// with each new stage's origin in `plain` (`None`: a stage built here).
pub(super) fn fold_edge_side(fwd: &Forward<'_>, plain: &Adjoint) -> Result<Option<Folded>, AdjointError> {
    let k = fwd.k;
    if plain.source_sides.is_some() || fwd.needs.replays_fold || fwd.needs.reads_inverse_degree {
        return Ok(None);
    }
    let find = |kind: StageKind, graph: GraphUse| plain.stages.iter().position(|s| s.kind == kind && s.graph == graph);
    let (Some(edge_at), Some(source_at)) =
        (find(StageKind::EdgeSide, GraphUse::Forward), find(StageKind::SourceSide, GraphUse::Transposed))
    else {
        return Ok(None);
    };
    // Bindings name stages by index: every stage the source side reads
    // (stats) comes before the edge side, so only reads of stages after
    // the source side would shift; the plans this applies to end with it.
    if source_at + 1 != plain.stages.len() || edge_at > source_at {
        return Ok(None);
    }
    let edge = &plain.stages[edge_at].kernel;
    // Only scalar destination gradients: a wide term per edge would cost
    // more to store than the edge side costs to recompute.
    if edge.outputs.is_empty() || edge.outputs.iter().any(|o| o.role != Role::Dst || o.ty != Type::Scalar) {
        return Ok(None);
    }
    // Worth it where the edge side gathers wide rows per edge.
    let wide = |t: Type| matches!(t, Type::Vector(_) | Type::Matrix(..));
    if !edge.edge.nodes.iter().any(|n| matches!(n.op, Op::Field(f) if wide(edge.fields[f.0 as usize].ty))) {
        return Ok(None);
    }
    let dsts: Vec<(usize, &FieldDecl)> =
        fwd.dsts.iter().copied().filter(|(_, f)| edge.outputs.iter().any(|o| o.name == grad_name(Role::Dst, &f.name))).collect();
    if dsts.len() != edge.outputs.len() {
        return Ok(None);
    }
    if plain.stages.get(STATS_STAGE).is_none_or(|s| s.kind != StageKind::RowStatistics) {
        return Ok(None);
    }
    // Built as the plan's stage builders built its source side (from the
    // stats stage as built, before the plan rewrites changed what it
    // writes), then given that side's bindings as the rewrites left them:
    // the same fields and regions, and edge outputs besides. Where a
    // rewrite changed more than bindings, nothing is folded.
    let Some(mut source) = source_side_with_edge_terms(fwd, &super::stages::stats(fwd)?, None, &dsts)? else {
        return Ok(None);
    };
    let was = &plain.stages[source_at].kernel;
    if source.kernel.fields != was.fields || source.kernel.edge.nodes != was.edge.nodes || source.kernel.node != was.node {
        return Ok(None);
    }
    source.bindings = plain.stages[source_at].bindings.clone();
    // The stages in plain's order, the edge side gone, the source side
    // (with its terms) where it was, and the row sums right after it.
    let mut stages = Vec::with_capacity(plain.stages.len());
    let mut origin = Vec::with_capacity(plain.stages.len());
    for (i, st) in plain.stages.iter().enumerate() {
        if i == edge_at {
            continue;
        }
        if i == source_at {
            stages.push(source.clone());
            origin.push(None);
            let at = stages.len() - 1;
            stages.push(row_sums(fwd, &dsts, at));
            origin.push(None);
        } else {
            stages.push(st.clone());
            origin.push(Some(i));
        }
    }
    for st in &stages {
        crate::ir::verify(&st.kernel)
            .map_err(|source| AdjointError::Rewrite { rewrite: "fold-edge-side", source: Box::new(source) })?;
    }
    let gradients = gradient_plans(k, &stages);
    // The recomputing plan's notes, but its list of stages.
    let mut notes: Vec<String> = plain.notes.iter().filter(|n| !n.contains(" stage(s): ")).cloned().collect();
    notes.push(format!(
        "edge side folded into the source side (graphs in memory): it writes each edge's {} term (4 bytes per edge in \
         f32, 8 in f64, by edge id), summed over each row by {} (one scalar per edge, in the row's order)",
        dsts.iter().map(|(_, f)| f.name.as_str()).collect::<Vec<_>>().join(", "),
        row_sums_name(k)
    ));
    Ok(Some((Adjoint { stages, gradients, notes, source_sides: None }, origin)))
}

/// A stage over the forward graph that sums, over each row, the terms the
/// source side (stage `terms_at`) wrote per edge: destination-field
/// gradients, as the edge side summed them.
fn row_sums(fwd: &Forward<'_>, dsts: &[(usize, &FieldDecl)], terms_at: usize) -> Stage {
    let k = fwd.k;
    let sp = k.span;
    let mut fs = forward_fields(k, |r| r);
    let term_fields: Vec<usize> = dsts
        .iter()
        .map(|(_, f)| {
            let name = edge_term_name(&f.name);
            fs.add(&name, Role::Edge, f.ty, DType::F32, Binding::Stage { stage: terms_at, output: name.clone() })
        })
        .collect();
    let outputs = dsts.iter().map(|(_, f)| OutputDecl::new(grad_name(Role::Dst, &f.name), f.ty, Role::Dst)).collect();
    let (mut ak, bindings) = empty_kernel(k, row_sums_name(k), fs, builtin(ReducerKind::Sum, k.reducer.span), outputs);
    let fields = ak.fields.clone();
    let mut edge = Region::new(vec![]);
    let mut b = B { r: &mut edge, sp };
    let terms: Vec<ValueId> = term_fields.iter().map(|&f| b.field(f, fields[f].ty)).collect();
    // Read, not used: a kernel whose edges read their rank runs each row
    // whole, so its sum adds the terms in the row's order from +0.
    b.r.push(Op::Rank, Type::Scalar, sp);
    edge.outputs = terms;
    let types = edge.output_types();
    ak.edge = edge;
    ak.node = Some(passthrough_node(&types, sp));
    Stage {
        kind: StageKind::DestinationSums,
        purpose: "destination gradients: the source side's per-edge terms summed over each row".into(),
        graph: GraphUse::Forward,
        kernel: ak,
        bindings,
    }
}

fn row_sums_name(k: &crate::ir::Kernel) -> String {
    format!("{}.vjp.dst_sums", k.name)
}
