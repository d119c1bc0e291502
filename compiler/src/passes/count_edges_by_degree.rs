//! `count-edges-by-degree`: an accumulator component that starts at 0 and
//! adds 1 per edge, and that nothing but the finish reads, is the row's
//! degree. The finish reads `degree` instead, and `eliminate-dead-state`
//! then drops the component with its per-edge update. The row-statistics
//! stage of a mean's adjoint counts its edges this way; after the pass it
//! reads two row offsets instead of looping over the row.
//!
//! Bits: a count held in f32 stops at 2^24 (adding 1 no longer changes it),
//! where the degree is exact until it is converted; the forward `mean`
//! divides by the converted degree, so the count now agrees with it on
//! every row. Below 2^24 (f32) or 2^53 (f64) both are the same number.
//!
//! ```text
//! init   { yield 0.0 }                         finish { %d = degree
//! step   { %c = state 0; %1 = add %c, 1.0  ==>          .. %d .. }
//!          yield %1 }
//! finish { %c = state 0; .. %c .. }
//! ```

use super::{beside_state, is_const, state_feeds_only, PassError, Remarks};
use crate::ir::{BinOp, Kernel, Op, Region, Type};

/// Whether step output `c` is `state c + 1` (either operand order).
fn adds_one(step: &Region, c: u32) -> bool {
    let Some(&out) = step.outputs.get(c as usize) else { return false };
    let Some(Op::Binary(BinOp::Add, a, b)) = step.nodes.get(out.0 as usize).map(|n| n.op.clone()) else {
        return false;
    };
    beside_state(step, a, b, c).is_some_and(|(one, _)| is_const(step, one, 1.0))
}

pub fn count_edges_by_degree(k: &mut Kernel, r: &mut Remarks<'_>) -> Result<(), PassError> {
    let Some(seg) = k.segment.as_mut() else {
        r.analysis(Some(k.span), "no segment");
        return Ok(());
    };
    let counts: Vec<u32> = (0..seg.state.len() as u32)
        .filter(|&c| {
            seg.state[c as usize] == Type::Scalar
                && seg.init.outputs.get(c as usize).is_some_and(|&v| is_const(&seg.init, v, 0.0))
                && adds_one(&seg.step, c)
                && state_feeds_only(&seg.step, c, seg.step.outputs[c as usize])
        })
        .collect();
    if counts.is_empty() {
        r.analysis(Some(k.span), "no accumulator counts the row's edges");
        return Ok(());
    }
    for node in &mut seg.finish.nodes {
        if matches!(node.op, Op::State(c) if counts.contains(&c)) {
            node.op = Op::Degree;
        }
    }
    r.applied(
        Some(k.span),
        format!("accumulator component(s) {counts:?} count the row's edges: the finish reads the row's degree (two row offsets) instead"),
    );
    Ok(())
}
