//! The source side of a max/min by scattering each lane's winner.
//!
//! A max (or min) row gives each lane's cotangent to one edge: the first
//! that attains the lane's extremum. Over the transposed graph, the source
//! stage finds those edges by gathering, per edge, the destination row's
//! cotangent and winner ranks (two random rows of the output's width per
//! edge) and keeping the lanes whose rank is the edge's own: at F = 64 on
//! a graph of average degree 16, about one lane in sixteen is kept.
//!
//! When the messages depend on the source alone (`edge` reads source fields
//! and parameters, no destination or edge field), every out-edge of a
//! source sends the same message `m(h_j)`, so the source's gradient is
//! `J_m(h_j)ᵀ Σ_e mbar_e`: the edge function's adjoint applies once per
//! source to the sum of the cotangents its edges won. That sum is a
//! scatter of one value per destination row and lane (a sequential read of
//! the winner ranks and cotangents, one add at the winner's source), which
//! the runtime does in row order, lanes split between threads so no two
//! write one place (`Binding::WinnerScatter`). What remains is a node-wise
//! stage over the sources (`GraphUse::SelfLoops`), an ordinary kernel.
//!
//! The transposed stage stays in the plan beside it (`SourceSides`): the
//! scatter's sums and the per-source stage's gradient live in RAM, where a
//! paged call over the RAM budget needs its source gradient in a file,
//! which the transposed stage writes row by row.
//!
//! Each source's sum adds the same cotangents in the same order as the
//! transposed stage did (rows in increasing order; the transposed stage
//! added zeros between them). Where the edge function's adjoint selects or
//! passes its cotangent through (relu, identity, a select), the gradients
//! keep their bits; where it scales it (`x * p`), `J(Σ mbar)` rounds
//! differently from `Σ J(mbar)`, within the sum's rounding. A source with
//! no out-edge gets no row in the per-source stage (the runtime builds the
//! self-loop graph from the sources it saw), so its gradient is 0 as
//! before, not the edge adjoint of a zero cotangent (NaN for `ln` at 0).

use super::builder::{builtin, empty_kernel, passthrough_node, zero_of, FieldSet, B};
use super::operation_rules::{vjp_region, AdjointError};
use super::plan::{Binding, GraphUse, SourceSides, Stage, StageKind};
use super::reducer_rules::reducer_rule;
use crate::ir::{FieldId, Kernel, Op, ReducerKind, Region, Role, ValueId, WidthDecl};

/// The plan's note when it has both source sides.
pub(crate) const NOTE: &str = "max/min of messages that depend on the source alone: the source side adds each row's winning \
     cotangents at their source nodes (a scatter in row order, lanes split between threads) and applies the edge function's \
     adjoint once per source, instead of gathering two rows per edge over the transposed graph (which still runs for a paged \
     call whose source gradient is over the RAM budget, so that the gradient goes to a file)";

/// Add, beside the transposed source stage of a max/min whose messages
/// depend on the source alone, the scatter's node-wise stage (appended).
/// Returns the two when it did; the stages are unchanged when it did not.
pub(crate) fn scatter_winning_cotangents(k: &Kernel, stages: &mut Vec<Stage>) -> Result<Option<SourceSides>, AdjointError> {
    if !reducer_rule(k.reducer.kind).needs(k).gives_lanes_to_winners {
        return Ok(None);
    }
    let src_name = format!("{}.vjp.src", k.name);
    let Some(at) = stages.iter().position(|s| s.graph == GraphUse::Transposed && s.kernel.name == src_name) else {
        return Ok(None);
    };
    // Messages of the source alone: no destination or edge field, no edge
    // position.
    let reads_other = k.edge.nodes.iter().any(|n| match n.op {
        Op::Field(f) => matches!(k.field(f).role, Role::Dst | Role::Edge),
        Op::Rank | Op::Scan(_) | Op::Input(_) => true,
        _ => false,
    });
    if reads_other {
        return Ok(None);
    }
    // The new stage keeps the source fields and parameters; each width must
    // still be bound by one of them.
    let mut fs = FieldSet { fields: Vec::new(), bindings: Vec::new() };
    let mut fmap: Vec<Option<usize>> = vec![None; k.fields.len()];
    for (f, decl) in k.fields.iter().enumerate() {
        let role = match decl.role {
            Role::Src => Role::Dst,
            Role::Param => Role::Param,
            _ => continue,
        };
        fmap[f] = Some(fs.add(&decl.name, role, decl.ty, decl.declared, Binding::Forward(decl.role, decl.name.clone())));
    }
    let mut widths: Vec<WidthDecl> = Vec::with_capacity(k.widths.len());
    for w in &k.widths {
        let Some(f) = fmap.get(w.bound_by.0 .0 as usize).copied().flatten() else { return Ok(None) };
        widths.push(WidthDecl { name: w.name.clone(), bound_by: (FieldId(f as u32), w.bound_by.1) });
    }
    // What the transposed stage gathered per edge: each message
    // component's cotangent (`abar{c}`) and winner rank (`winner{c}`).
    let old = &stages[at];
    // (Not the forward fields copied first, which a user may have named so
    // too: a destination field `abar0` becomes a source field there.)
    let bound = |name: &str| {
        old.kernel
            .fields
            .iter()
            .zip(&old.bindings)
            .find(|(f, b)| f.role == Role::Src && f.name == name && !matches!(b, Binding::Forward(..)))
            .map(|(_, b)| b.clone())
    };
    let msg_types = k.message_types();
    let mut mbar_f = Vec::with_capacity(msg_types.len());
    for (c, t) in msg_types.iter().enumerate() {
        let (Some(winner), Some(value)) = (bound(&format!("winner{c}")), bound(&format!("abar{c}"))) else {
            return Ok(None);
        };
        // The new stage's source fields are these alone (forward source
        // fields become its destination fields), so the name is free.
        let name = format!("mbar{c}");
        let scatter = Binding::WinnerScatter { winner: Box::new(winner), value: Box::new(value) };
        mbar_f.push(fs.add(&name, Role::Src, *t, crate::ir::DType::F32, scatter));
    }
    let srcs: Vec<usize> = (0..k.fields.len()).filter(|&f| k.fields[f].role == Role::Src).collect();
    // The same gradients as the transposed stage's, one per source field.
    let outputs = old.kernel.outputs.clone();
    let (mut sk, sb) = empty_kernel(k, format!("{}.vjp.scatter", k.name), fs, builtin(ReducerKind::Sum, k.reducer.span), outputs);
    sk.widths = widths;
    // The forward edge function over the new field ids, differentiated
    // with the scattered sums as its messages' cotangents.
    let fwd = k.edge.rewrite(|r, n| match n.op {
        Op::Field(f) => fmap[f.0 as usize].map(|g| r.push(Op::Field(FieldId(g as u32)), n.ty, n.span)),
        _ => None,
    });
    let sp = k.span;
    let mut edge = Region::new(vec![]);
    let mut b = B { r: &mut edge, sp };
    let mut seeds: Vec<Option<ValueId>> = mbar_f.iter().zip(&msg_types).map(|(&f, &t)| Some(b.field(f, t))).collect();
    seeds.resize(fwd.outputs.len(), None);
    let v = vjp_region(&fwd, &mut edge, |_| None, &seeds)?;
    let mut b = B { r: &mut edge, sp };
    let mut outs = Vec::with_capacity(srcs.len());
    for &f in &srcs {
        let id = fmap[f].map(|g| Op::Field(FieldId(g as u32)));
        let leaf = v.leaves.iter().find(|(o, _)| id.as_ref() == Some(o)).map(|(_, x)| *x);
        outs.push(leaf.unwrap_or_else(|| zero_of(&mut b, k.fields[f].ty)));
    }
    edge.outputs = outs;
    let agg_t = edge.output_types();
    sk.edge = edge;
    sk.node = Some(passthrough_node(&agg_t, sp));
    stages.push(Stage {
        kind: StageKind::PerSource,
        purpose:
            "source side: each lane's winning cotangent scattered to its source, then the edge function's adjoint once per source"
                .into(),
        graph: GraphUse::SelfLoops,
        kernel: sk,
        bindings: sb,
    });
    Ok(Some(SourceSides { scatter: stages.len() - 1, transposed: at }))
}
