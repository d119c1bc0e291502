//! The suffix stage of a replayed fold (user monoids).
//!
//! A monoid's message cotangent needs the fold of everything before the
//! edge in its row (the stats stage's exclusive prefix) and of everything
//! after it. The second is an exclusive prefix too, over the row-reversed
//! graph and folded with the opposite monoid, `combine'(a, b) =
//! combine(b, a)`, so it is an ordinary kernel with a scan.

use super::Forward;
use crate::adjoint::builder::{empty_kernel, forward_fields, monoid};
use crate::adjoint::operation_rules::AdjointError;
use crate::adjoint::plan::{GraphUse, Stage, StageKind};
use crate::ir::{Op, OutputDecl, Region, Role, ValueId};

/// Build the suffix stage, where the reducer's rule replays the fold.
pub(in crate::adjoint) fn suffix(fwd: &Forward<'_>) -> Result<Option<Stage>, AdjointError> {
    if !fwd.needs.replays_fold {
        return Ok(None);
    }
    let k = fwd.k;
    let sp = k.span;
    let mono_state = &fwd.state_types;
    let fs = forward_fields(k, |r| r);
    let (Some(id), Some(comb)) = (&k.reducer.identity, &k.reducer.combine) else {
        return Err(AdjointError::Unsupported { op: "a monoid without identity/combine", span: sp });
    };
    let n = mono_state.len();
    // The opposite monoid: combine'(a, b) = combine(b, a).
    let mut opp = Region::new(mono_state.iter().chain(mono_state.iter()).copied().collect());
    let ins: Vec<ValueId> = (0..2 * n).map(|i| opp.push(Op::Input(i as u32), mono_state[i % n], sp)).collect();
    let swapped: Vec<ValueId> = ins[n..].iter().chain(&ins[..n]).copied().collect();
    let outs = opp.inline(comb, &swapped);
    opp.outputs = outs;
    let red = monoid(k.reducer.span, id.clone(), opp, true, k.reducer.declared.commutative);
    let outputs: Vec<OutputDecl> =
        mono_state.iter().enumerate().map(|(c, t)| OutputDecl::new(format!("suffix{c}"), *t, Role::Edge)).collect();
    let (mut sk, sb) = empty_kernel(k, format!("{}.vjp.suffix", k.name), fs, red, outputs);
    let mut edge = Region::new(vec![]);
    let mut outs = fwd.messages(&mut edge, &sk.fields);
    for (c, t) in mono_state.iter().enumerate() {
        outs.push(edge.push(Op::Scan(c as u32), *t, sp));
    }
    edge.outputs = outs;
    sk.edge = edge;
    let mut node = Region::new(mono_state.clone());
    node.outputs = vec![];
    sk.node = Some(node);
    Ok(Some(Stage {
        kind: StageKind::MonoidSuffixes,
        purpose: "monoid suffixes (row-reversed graph)".into(),
        graph: GraphUse::RowReversed,
        kernel: sk,
        bindings: sb,
    }))
}
