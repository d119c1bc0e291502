//! `fold-relu-into-max`: a max of relus, `acc = max(acc, relu(v))` from
//! `-inf`, starts at `0` instead and keeps `v` only where it is larger:
//! `acc = select(v > acc, v, acc)`. One compare and select per lane and
//! edge instead of a relu, a compare and a select (MaxPool's forward).
//!
//! Bits: relu gives `+0` for `v <= 0`, `-0` and NaN, and a relu is never
//! `-0`, so the old fold's value is the largest positive `v` of the row, or
//! `+0` when there is none. The new fold starts at `+0` and moves only to a
//! strictly larger `v` (a NaN or `-0` compares false), so it ends at the
//! same value with the same sign. A row with no edges still ends at the
//! finish's empty-row value (the accumulator's start is not read there).
//!
//! ```text
//! init { %0 = const -inf }             init { %0 = const 0.0 }
//! step { %1 = relu %v; %s = state 0 ==> step { %s = state 0; %m = cmp.gt %v, %s
//!        %2 = max %s, %1 }                    %2 = select %m, %v, %s }
//! ```

use super::{beside_state, is_const, state_feeds_only, PassError, Remarks};
use crate::ir::{BinOp, CmpOp, Kernel, Op, ReducerKind, Type, UnOp};

pub fn fold_relu_into_max(k: &mut Kernel, r: &mut Remarks<'_>) -> Result<(), PassError> {
    let span = k.span;
    let Some(seg) = k.segment.as_mut().filter(|s| s.fused && k.reducer.kind == ReducerKind::Max) else {
        r.analysis(Some(span), "not a fused max: nothing to fold");
        return Ok(());
    };
    let mut folded = Vec::new();
    for c in 0..seg.state.len() {
        let (Some(&init), Some(&out)) = (seg.init.outputs.get(c), seg.step.outputs.get(c)) else { continue };
        if !is_const(&seg.init, init, f64::NEG_INFINITY) {
            continue;
        }
        let Op::Binary(BinOp::Max, a, b) = seg.step.nodes[out.0 as usize].op else { continue };
        let Some((relu, slot)) = beside_state(&seg.step, a, b, c as u32) else { continue };
        let state = if slot == 1 { a } else { b };
        let Op::Unary(UnOp::Relu, v) = seg.step.nodes[relu.0 as usize].op else { continue };
        // The accumulator feeds only this max.
        if !state_feeds_only(&seg.step, c as u32, out) {
            continue;
        }
        let (vty, sty) = (seg.step.nodes[v.0 as usize].ty, seg.step.nodes[out.0 as usize].ty);
        let mask_ty = match vty {
            Type::Vector(w) => Type::Mask(w),
            Type::Scalar => Type::Bool,
            _ => continue,
        };
        let sp = seg.step.nodes[out.0 as usize].span;
        let ity = seg.init.nodes[init.0 as usize].ty;
        let zero = seg.init.push(Op::Const(0.0), ity, sp);
        seg.init.outputs[c] = zero;
        let gt = seg.step.push(Op::Cmp(CmpOp::Gt, v, state), mask_ty, sp);
        let sel = seg.step.push(Op::Select(gt, v, state), sty, sp);
        seg.step.outputs[c] = sel;
        folded.push(c);
    }
    if folded.is_empty() {
        r.analysis(Some(span), "no accumulator folds relus from -inf");
    } else {
        r.applied(
            Some(span),
            format!(
                "accumulator component(s) {folded:?}: max of relus from -inf is a select of the larger value from 0 (same bits)"
            ),
        );
    }
    Ok(())
}
