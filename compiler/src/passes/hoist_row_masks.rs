//! `hoist-row-masks`: a sum whose every term is masked by the same
//! row-invariant condition, `acc + select(m, v, 0)` with `m` computed from
//! the row's own fields and constants, sums `v` instead and applies the
//! mask once in the finish: `select(m, acc, 0)`. The adjoint of a relu
//! (or of any select) of a destination field has this shape, e.g.
//! MaxPool's source gradient, `Σ_e select(h_i > 0, winner_e · cot, 0)`:
//! the row's `h` was loaded and compared in every edge and lane.
//!
//! Bits: where `m` holds, the terms and their order are the same; where it
//! does not, the old sum added `+0` to an accumulator that starts at `+0`
//! (so it stayed `+0`), and the new finish selects `+0`. The accumulator
//! must start at the constant zero and be read by nothing but its own
//! update and the finish; partial sums of split rows add before the finish
//! masks them, which is the same select of the same total.
//!
//! ```text
//! step   { %a = state 0; %m = cmp.gt (field dst.h), 0.0
//!          %t = select %m, %v, 0.0; %s = add %a, %t; yield %s }
//!   ==>  step   { ..; %s = add %a, %v; yield %s }
//!        finish { %a = state 0; %m = cmp.gt (field dst.h), 0.0
//!                 %g = select %m, %a, 0.0; .. %g .. }
//! ```

use super::{beside_state, is_const, state_feeds_only, PassError, Remarks};
use crate::ir::{BinOp, Kernel, Op, Region, ValueId};

fn op_of(r: &Region, v: ValueId) -> Option<&Op> {
    r.nodes.get(v.0 as usize).map(|n| &n.op)
}

/// The nodes `v` depends on, in order, when they read only destination and
/// parameter fields and constants (values the finish can recompute).
fn row_invariant_cone(r: &Region, v: ValueId, k: &Kernel) -> Option<Vec<usize>> {
    let cone = r.cone(v);
    r.reads_only_row(&cone, &k.fields).then_some(cone)
}

/// For accumulator `c`: the add node, which of its operands is the term,
/// the masked value, the mask and the mask's cone, when the step folds
/// `select(m, v, 0)` with a row-invariant `m`.
struct Masked {
    add: usize,
    term_slot: usize,
    value: ValueId,
    mask: ValueId,
    cone: Vec<usize>,
}

fn masked_fold(k: &Kernel, step: &Region, c: u32) -> Option<Masked> {
    let out = *step.outputs.get(c as usize)?;
    let Some(Op::Binary(BinOp::Add, a, b)) = op_of(step, out) else { return None };
    let (term, term_slot) = beside_state(step, *a, *b, c)?;
    let Some(Op::Select(m, v, z)) = op_of(step, term) else { return None };
    if !is_const(step, *z, 0.0) || step.nodes[v.0 as usize].ty != step.nodes[out.0 as usize].ty {
        return None;
    }
    // The accumulator is read by its own add only.
    if !state_feeds_only(step, c, out) {
        return None;
    }
    let cone = row_invariant_cone(step, *m, k)?;
    Some(Masked { add: out.0 as usize, term_slot, value: *v, mask: *m, cone })
}

/// `finish` with every read of `State(c)` replaced by `select(m, state, 0)`,
/// the mask recomputed from `cone` (nodes of `step`).
fn mask_in_finish(finish: &Region, step: &Region, c: u32, m: &Masked) -> Region {
    let mut masked: Option<ValueId> = None;
    finish.rewrite(|out, n| {
        if n.op != Op::State(c) {
            return None;
        }
        Some(*masked.get_or_insert_with(|| {
            let state = out.push(n.op.clone(), n.ty, n.span);
            let mask = out.copy_cone(step, &m.cone, Op::clone)[m.mask.0 as usize];
            let zero = out.push(Op::Const(0.0), crate::ir::Type::Scalar, n.span);
            out.push(Op::Select(mask, state, zero), n.ty, n.span)
        }))
    })
}

pub fn hoist_row_masks(k: &mut Kernel, r: &mut Remarks<'_>) -> Result<(), PassError> {
    let Some(seg) = k.segment.as_ref() else {
        r.analysis(Some(k.span), "no segment");
        return Ok(());
    };
    if !seg.fused || !matches!(k.reducer.kind, crate::ir::ReducerKind::Sum) {
        r.analysis(Some(k.span), "not a fused sum: nothing to hoist");
        return Ok(());
    }
    let mut hoisted = Vec::new();
    for c in 0..seg.state.len() as u32 {
        let Some(seg) = k.segment.as_ref() else { break };
        let zero_init = seg.init.outputs.get(c as usize).is_some_and(|&v| is_const(&seg.init, v, 0.0));
        let Some(m) = masked_fold(k, &seg.step, c).filter(|_| zero_init) else { continue };
        let finish = mask_in_finish(&seg.finish, &seg.step, c, &m);
        let Some(seg) = k.segment.as_mut() else { break };
        if let Op::Binary(BinOp::Add, a, b) = &mut seg.step.nodes[m.add].op {
            if m.term_slot == 0 {
                *a = m.value;
            } else {
                *b = m.value;
            }
        }
        seg.finish = finish;
        hoisted.push(c);
    }
    if hoisted.is_empty() {
        r.analysis(Some(k.span), "no sum term is masked by a row-invariant condition");
    } else {
        r.applied(
            Some(k.span),
            format!("accumulator component(s) {hoisted:?}: the row-invariant mask of every term is applied once in the finish, not per edge and lane"),
        );
    }
    Ok(())
}
