//! The edge side and the source side: each message's cotangent, then the
//! edge function's adjoint.
//!
//! Both stages recompute the forward message per edge, form its cotangent
//! from the row's statistics (the reducer rule's `message_cotangent`) and
//! differentiate the edge function against it. They differ in the graph
//! they run over and in which gradients they keep:
//!
//! - the **edge side** (forward graph) sums destination-field gradients over
//!   each row, writes edge-field gradients per edge in the user's order and
//!   sums parameter gradients;
//! - the **source side** (transposed graph) sums source-field gradients over
//!   each source's out-edges: a message-passing kernel over the transposed
//!   graph, so the backward needs no atomics.
//!
//! A side whose fields the edge function never reads is not built.

use super::{Forward, STATS_STAGE};
use crate::adjoint::builder::{builtin, empty_kernel, forward_fields, grad_name, zero_of, B};
use crate::adjoint::operation_rules::{vjp_region, AdjointError};
use crate::adjoint::plan::{Binding, GraphUse, Stage, StageKind};
use crate::adjoint::reducer_rules::Edge;
use crate::ir::{DType, FieldDecl, FieldId, Op, OutputDecl, ReducerKind, Region, Role, Type, ValueId};

/// Build the edge side, where the edge function reads a destination, edge
/// or parameter field. `stats` is the plan's stats stage, `suffix` the
/// index of its suffix stage if it has one.
pub(in crate::adjoint) fn edge_side(
    fwd: &Forward<'_>,
    stats: &Stage,
    suffix: Option<usize>,
) -> Result<Option<Stage>, AdjointError> {
    let side = Side {
        graph: GraphUse::Forward,
        summed: &fwd.dsts,
        edges: &fwd.edges,
        params: &fwd.params,
        name: "edge",
        kind: StageKind::EdgeSide,
        purpose: "edge side: destination, edge and parameter gradients",
    };
    side_stage(fwd, &side, stats, suffix)
}

/// Build the source side, where the edge function reads a source field.
/// `stats` and `suffix` as for [`edge_side`].
pub(in crate::adjoint) fn source_side(
    fwd: &Forward<'_>,
    stats: &Stage,
    suffix: Option<usize>,
) -> Result<Option<Stage>, AdjointError> {
    let side = Side {
        graph: GraphUse::Transposed,
        summed: &fwd.srcs,
        edges: &[],
        params: &[],
        name: "src",
        kind: StageKind::SourceSide,
        purpose: "source side: source gradients over the transposed graph",
    };
    side_stage(fwd, &side, stats, suffix)
}

/// The source side that also writes, per edge (by edge id), each term of
/// the destination-field gradients in `dsts` that the edge side would sum
/// over the edge's row: the same values, formed where the source side
/// already forms the message cotangent (see `adjoint/edge_terms.rs`). The
/// terms are its edge outputs, in `dsts`' order, named by
/// [`edge_term_name`].
pub(in crate::adjoint) fn source_side_with_edge_terms(
    fwd: &Forward<'_>,
    stats: &Stage,
    suffix: Option<usize>,
    dsts: &[(usize, &FieldDecl)],
) -> Result<Option<Stage>, AdjointError> {
    let side = Side {
        graph: GraphUse::Transposed,
        summed: &fwd.srcs,
        edges: dsts,
        params: &[],
        name: "src_terms",
        kind: StageKind::SourceSide,
        purpose: "source side: source gradients over the transposed graph, and each edge's destination-gradient terms",
    };
    let Some(mut stage) = side_stage(fwd, &side, stats, suffix)? else { return Ok(None) };
    let mut terms = dsts.iter();
    for o in stage.kernel.outputs.iter_mut().filter(|o| o.role == Role::Edge) {
        if let Some((_, f)) = terms.next() {
            o.name = edge_term_name(&f.name);
        }
    }
    Ok(Some(stage))
}

/// The edge output of [`source_side_with_edge_terms`] that holds the terms
/// of destination field `name`'s gradient.
pub(in crate::adjoint) fn edge_term_name(name: &str) -> String {
    format!("term.{}", grad_name(Role::Dst, name))
}

/// What tells the two sides apart.
struct Side<'a, 'k> {
    graph: GraphUse,
    /// Fields whose gradients are summed over each of the stage's rows.
    summed: &'a [(usize, &'k FieldDecl)],
    /// Fields whose gradients are written per edge (the edge side; the
    /// source side only for [`source_side_with_edge_terms`]).
    edges: &'a [(usize, &'k FieldDecl)],
    /// Parameters, whose gradients are summed over all edges (the edge
    /// side only).
    params: &'a [(usize, &'k FieldDecl)],
    /// The stage kernel's name after `<kernel>.vjp.`.
    name: &'static str,
    kind: StageKind,
    purpose: &'static str,
}

/// Build either side: they share every step but what `side` names.
fn side_stage(
    fwd: &Forward<'_>,
    side: &Side<'_, '_>,
    stats: &Stage,
    suffix: Option<usize>,
) -> Result<Option<Stage>, AdjointError> {
    let k = fwd.k;
    let sp = k.span;
    let reads_any = side
        .summed
        .iter()
        .chain(side.edges)
        .chain(side.params)
        .any(|(f, _)| k.edge.nodes.iter().any(|n| n.op == Op::Field(FieldId(*f as u32))));
    if !reads_any {
        return Ok(None);
    }
    let swap = |r: Role| match (side.graph, r) {
        (GraphUse::Transposed, Role::Src) => Role::Dst,
        (GraphUse::Transposed, Role::Dst) => Role::Src,
        _ => r,
    };
    let mut fs = forward_fields(k, swap);
    let stat_role = swap(Role::Dst);
    // A rule that scales the cotangent per edge reads the output's
    // cotangent and the inverse degree, not the stats stage's statistics.
    let reads_inverse_degree = fwd.needs.reads_inverse_degree;
    let stat_fields: Vec<usize> = if reads_inverse_degree {
        k.outputs
            .iter()
            .map(|o| fs.add(&format!("cot.{}", o.name), stat_role, o.ty, DType::F32, Binding::Cotangent(o.name.clone())))
            .collect()
    } else {
        stats
            .kernel
            .outputs
            .iter()
            .filter(|o| o.role == Role::Dst && !o.name.starts_with("grad."))
            .map(|o| fs.add(&o.name, stat_role, o.ty, DType::F32, Binding::Stage { stage: STATS_STAGE, output: o.name.clone() }))
            .collect()
    };
    let inv_deg_f = reads_inverse_degree.then(|| fs.add("inv_degree", stat_role, Type::Scalar, DType::F32, Binding::InvDegree));
    let mut prefix_f = Vec::new();
    let mut suffix_f = Vec::new();
    if fwd.needs.replays_fold {
        for (c, t) in fwd.state_types.iter().enumerate() {
            prefix_f.push(fs.add(
                &format!("prefix{c}"),
                Role::Edge,
                *t,
                DType::F32,
                Binding::Stage { stage: STATS_STAGE, output: format!("prefix{c}") },
            ));
        }
        if let Some(ss) = suffix {
            for (c, t) in fwd.state_types.iter().enumerate() {
                suffix_f.push(fs.add(
                    &format!("suffix{c}"),
                    Role::Edge,
                    *t,
                    DType::F32,
                    Binding::Stage { stage: ss, output: format!("suffix{c}") },
                ));
            }
        }
    }
    let rank_f = (side.graph == GraphUse::Transposed && fwd.needs.gives_lanes_to_winners)
        .then(|| fs.add("rank", Role::Edge, Type::Scalar, DType::F32, Binding::EdgeRank));
    // Outputs.
    let mut outputs = Vec::new();
    for (_, f) in side.summed {
        outputs.push(OutputDecl::new(grad_name(f.role, &f.name), f.ty, Role::Dst));
    }
    for (_, f) in side.edges {
        outputs.push(OutputDecl::new(grad_name(Role::Edge, &f.name), f.ty, Role::Edge));
    }
    for (_, f) in side.params {
        outputs.push(OutputDecl::new(grad_name(Role::Param, &f.name), f.ty, Role::Param));
    }
    let (mut ak, ab) =
        empty_kernel(k, format!("{}.vjp.{}", k.name, side.name), fs, builtin(ReducerKind::Sum, k.reducer.span), outputs);
    let fields = ak.fields.clone();
    let mut edge = Region::new(vec![]);
    // The forward message, recomputed.
    let m = fwd.messages(&mut edge, &fields);
    let mut b = B { r: &mut edge, sp };
    let st: Vec<ValueId> = stat_fields.iter().map(|&f| b.field(f, fields[f].ty)).collect();
    let rank = match rank_f {
        Some(f) => b.field(f, Type::Scalar),
        None => b.r.push(Op::Rank, Type::Scalar, sp),
    };
    // The message cotangent.
    let at = Edge {
        state_types: &fwd.state_types,
        messages: &m,
        statistics: &st,
        rank,
        inv_degree: inv_deg_f,
        prefix: &prefix_f,
        suffix: &suffix_f,
        fields: &fields,
    };
    let mbar = fwd.rule.message_cotangent(k, &mut b, &at)?;
    // The edge function's adjoint, seeded with the message cotangent.
    let mut seeds: Vec<Option<ValueId>> = mbar.iter().map(|x| Some(*x)).collect();
    seeds.resize(k.edge.outputs.len(), None);
    // Field ids are the forward's (its fields come first), so the edge
    // region is copied as it is.
    let v = vjp_region(&k.edge, &mut edge, |_| None, &seeds)?;
    let leaf = |f: usize| v.leaves.iter().find(|(o, _)| *o == Op::Field(FieldId(f as u32))).map(|(_, x)| *x);
    let mut b = B { r: &mut edge, sp };
    let mut outs = Vec::new();
    for (f, decl) in side.summed {
        outs.push(leaf(*f).unwrap_or_else(|| zero_of(&mut b, decl.ty)));
    }
    if outs.is_empty() {
        outs.push(b.c(0.0));
    }
    let n_msgs = outs.len();
    for (f, _) in side.edges.iter().chain(side.params) {
        // Outputs arrive zeroed: an unreached field contributes nothing.
        outs.push(leaf(*f).unwrap_or_else(|| b.c(0.0)));
    }
    edge.outputs = outs;
    let agg_t: Vec<Type> = edge.output_types()[..n_msgs].to_vec();
    ak.edge = edge;
    let mut node = Region::new(agg_t.clone());
    let ins: Vec<ValueId> = agg_t.iter().enumerate().map(|(i, t)| node.push(Op::Input(i as u32), *t, sp)).collect();
    let mut outs: Vec<ValueId> = if side.summed.is_empty() { vec![] } else { ins };
    let mut b = B { r: &mut node, sp };
    for _ in side.params {
        outs.push(b.c(0.0));
    }
    node.outputs = outs;
    ak.node = Some(node);
    Ok(Some(Stage { kind: side.kind, purpose: side.purpose.into(), graph: side.graph, kernel: ak, bindings: ab }))
}
