//! `precompute-row-max`: a running maximum that other accumulators are
//! rescaled by (online softmax) is computed by a first pass over the row's
//! edges instead, so the main pass sees the row's final maximum from its
//! first edge.
//!
//! An online softmax folds each edge as `m' = max(m, s)`, rescales the
//! denominator and the weighted sum by `exp(m - m')` and adds `exp(s - m')`:
//! two exponentials per edge and a multiply per lane to rescale. When `s`
//! reads no accumulator (it is the edge's score), a pre-pass can fold
//! `m = max(m, s)` alone; in the main pass `max(m, s)` is then `m` itself,
//! `exp(m - m)` is `1` and the rescaling multiplies disappear: one
//! exponential per edge, and the vector update is `acc + w·v`. The score's
//! few scalar operations are computed twice (once per pass); the wide rows
//! are read once.
//!
//! Bits: the result is the same softmax with the row's maximum subtracted
//! everywhere (the textbook form), not the online form's rounding: the
//! weights differ by rounding from the online ones. Every back end runs the
//! same loops, so they still agree bit for bit with each other and with a
//! paged run.
//!
//! ```text
//! step { %m = state 0; %s = <score>        pre_step { %m = state 0; %s = <score>
//!        %n = max %m, %s                ==>            %n = max %m, %s }
//!        %c = exp (sub %m, %n)            step { %m = state 0; %s = <score>
//!        %w = exp (sub %s, %n)                   %w = exp (sub %s, %m)
//!        %d = add (mul %d0, %c), %w              %d = add %d0, %w
//!        %a = add (mul %a0, %c), (mul %w, %v) }  %a = add %a0, (mul %w, %v) }
//! ```

use super::eliminate_dead_code::dce_region;
use super::{beside_state, is_const, is_state, PassError, Remarks};
use crate::ir::{BinOp, Kernel, Node, Op, Region, Segment, Type, UnOp, ValueId};

/// The most operations (besides field reads and constants) a score may
/// take to be computed in both passes.
const MAX_SCORE_OPS: usize = 8;

/// Live `exp` nodes of the region (what the rewrite must reduce).
fn exps(r: &Region) -> usize {
    let live = r.live_from(r.outputs.iter().copied());
    r.nodes.iter().zip(live).filter(|(n, l)| *l && matches!(n.op, Op::Unary(UnOp::Exp, _))).count()
}

/// `step` for the main pass, where accumulator `c` holds the row's final
/// maximum: `out` (its `max`) becomes `state c`, `exp(state c - state c)`
/// becomes `1`, and products by that `1` become their other operand.
fn main_step(step: &Region, c: u32, out: ValueId) -> Region {
    let mut r = step.clone();
    r.nodes[out.0 as usize].op = Op::State(c);
    let mut fwd: Vec<ValueId> = (0..r.nodes.len() as u32).map(ValueId).collect();
    for i in 0..r.nodes.len() {
        let op = r.nodes[i].op.map_operands(|a| fwd[a.0 as usize]);
        let ty = r.nodes[i].ty;
        r.nodes[i].op = match op {
            Op::Unary(UnOp::Exp, d)
                if matches!(r.nodes[d.0 as usize].op, Op::Binary(BinOp::Sub, x, y)
                    if is_state(&r, x, c) && is_state(&r, y, c)) =>
            {
                Op::Const(1.0)
            }
            Op::Binary(BinOp::Mul, x, y) if is_const(&r, y, 1.0) && r.nodes[x.0 as usize].ty == ty => {
                fwd[i] = x;
                op
            }
            Op::Binary(BinOp::Mul, x, y) if is_const(&r, x, 1.0) && r.nodes[y.0 as usize].ty == ty => {
                fwd[i] = y;
                op
            }
            op => op,
        };
    }
    r.outputs = r.outputs.iter().map(|o| fwd[o.0 as usize]).collect();
    dce_region(&mut r);
    r
}

/// The pre-pass: `step`'s update of component `c` alone, every other
/// component passed through.
fn pre_step(step: &Region, state: &[Type], c: usize, out: ValueId) -> Region {
    let mut r = step.clone();
    let span = r.nodes[out.0 as usize].span;
    r.outputs = (0..state.len()).map(|k| if k == c { out } else { r.push(Op::State(k as u32), state[k], span) }).collect();
    dce_region(&mut r);
    r
}

/// Whether `score` (in `step`) reads no accumulator and is a short scalar
/// computation, cheap to compute in both passes.
fn precomputable(step: &Region, score: ValueId) -> bool {
    let cone = step.cone(score);
    let stateless = cone.iter().all(|&i| !matches!(step.nodes[i].op, Op::State(_)));
    stateless && step.scalar_cone_ops(&cone).is_some_and(|ops| ops <= MAX_SCORE_OPS)
}

/// Whether the rest of the step uses the running maximum exactly as an
/// online softmax does, so that the final maximum gives the same sums:
/// `state c` is read only by its `max` and by `state c - max` feeding
/// `exp` (a rescale R); the new maximum only by those and by `x - max`
/// (x stateless) feeding `exp` (a weight W); each R only by `state k · R`
/// for components k that start at +0, read nowhere else, whose update is
/// `state k · R + t` with t = W or W · v (v stateless); and W only in
/// such terms. Then every component fed by a weight is rescaled along with
/// it, and both forms give Σ exp(s - M)·v over the row. Anything else (a
/// sum of running maxima, a component from 1, a prefix maximum read by
/// another accumulator) is left alone.
fn online_softmax_shape(seg: &Segment, c: u32, out: ValueId) -> bool {
    let r = &seg.step;
    let n = r.nodes.len();
    // Live nodes only: CSE leaves dead copies behind until the last DCE.
    let live = r.live_from(r.outputs.iter().copied());
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, node) in r.nodes.iter().enumerate().filter(|(i, _)| live[*i]) {
        for a in node.op.operands() {
            users[a.0 as usize].push(i);
        }
    }
    let output_of = |v: usize| r.outputs.iter().position(|o| o.0 as usize == v);
    let stateless = |v: ValueId| r.cone(v).iter().all(|&i| !matches!(r.nodes[i].op, Op::State(_)));
    let is_out = |v: ValueId| v == out;
    let op = |v: usize| &r.nodes[v].op;
    let exps_of = |d: usize| -> Option<Vec<usize>> {
        (output_of(d).is_none() && users[d].iter().all(|&u| matches!(op(u), Op::Unary(UnOp::Exp, _)))).then(|| users[d].clone())
    };
    let (mut rescales, mut weights) = (Vec::new(), Vec::new());
    for (i, node) in r.nodes.iter().enumerate().filter(|(i, _)| live[*i]) {
        match node.op {
            Op::State(s) if s == c => {
                if output_of(i).is_some() {
                    return false;
                }
                for &u in &users[i] {
                    let ok =
                        u == out.0 as usize || matches!(op(u), Op::Binary(BinOp::Sub, x, y) if x.0 as usize == i && is_out(*y));
                    if !ok {
                        return false;
                    }
                }
            }
            _ if i == out.0 as usize => {
                if r.outputs.iter().enumerate().any(|(o, v)| v.0 as usize == i && o != c as usize) {
                    return false;
                }
                for &u in &users[i] {
                    match *op(u) {
                        Op::Binary(BinOp::Sub, x, y) if is_out(y) && is_state(r, x, c) => match exps_of(u) {
                            Some(e) => rescales.extend(e),
                            None => return false,
                        },
                        Op::Binary(BinOp::Sub, x, y) if is_out(y) && stateless(x) => match exps_of(u) {
                            Some(e) => weights.extend(e),
                            None => return false,
                        },
                        _ => return false,
                    }
                }
            }
            _ => {}
        }
    }
    // Each rescale multiplies a component from +0 that nothing else reads,
    // and that product plus a weighted term is the component's update.
    let mut updates: Vec<(usize, usize)> = Vec::new(); // (add, term)
    for &rs in &rescales {
        if output_of(rs).is_some() {
            return false;
        }
        for &m in &users[rs] {
            let Op::Binary(BinOp::Mul, x, y) = *op(m) else { return false };
            let st = if x.0 as usize == rs { y } else { x };
            let Op::State(k) = *op(st.0 as usize) else { return false };
            // +0, or +0 broadcast to a vector.
            let starts_at_zero =
                seg.init.outputs.get(k as usize).is_some_and(|&v| match seg.init.nodes.get(v.0 as usize).map(|n| &n.op) {
                    Some(Op::Broadcast(z, _)) => is_const(&seg.init, *z, 0.0),
                    _ => is_const(&seg.init, v, 0.0),
                });
            if k == c || !starts_at_zero || users[st.0 as usize] != [m] || output_of(st.0 as usize).is_some() {
                return false;
            }
            let [add] = users[m][..] else { return false };
            let Op::Binary(BinOp::Add, a, b) = *op(add) else { return false };
            if output_of(m).is_some() || output_of(add) != Some(k as usize) || !users[add].is_empty() {
                return false;
            }
            updates.push((add, if a.0 as usize == m { b.0 as usize } else { a.0 as usize }));
        }
    }
    // Each term is a weight, or a weight times a stateless value read by
    // that update alone; each weight feeds such terms only.
    for &(add, t) in &updates {
        let ok = weights.contains(&t)
            || match *op(t) {
                Op::Binary(BinOp::Mul, x, y) => {
                    users[t] == [add]
                        && ((weights.contains(&(x.0 as usize)) && stateless(y))
                            || (weights.contains(&(y.0 as usize)) && stateless(x)))
                }
                _ => false,
            };
        if !ok {
            return false;
        }
    }
    let in_term = |w: usize, u: usize| updates.iter().any(|&(add, t)| (t == w && u == add) || (t == u && t != w));
    !rescales.is_empty() && weights.iter().all(|&w| output_of(w).is_none() && users[w].iter().all(|&u| in_term(w, u)))
}

pub fn precompute_row_max(k: &mut Kernel, r: &mut Remarks<'_>) -> Result<(), PassError> {
    let span = k.span;
    let Some(seg) = k.segment.as_mut().filter(|s| s.fused && s.pre_step.is_none()) else {
        r.analysis(Some(span), "not a fused segment without a pre-pass: nothing to precompute");
        return Ok(());
    };
    // Edge and parameter outputs (extra step outputs) must be written once
    // per edge, by the main pass: the pre-pass computes state only.
    if seg.step.outputs.len() != seg.state.len() {
        r.analysis(Some(span), "the step writes edge or parameter outputs: one pass over the edges");
        return Ok(());
    }
    for c in 0..seg.state.len() {
        let (Some(&init), Some(&out)) = (seg.init.outputs.get(c), seg.step.outputs.get(c)) else { continue };
        if seg.state[c] != Type::Scalar || !is_const(&seg.init, init, f64::NEG_INFINITY) {
            continue;
        }
        let Op::Binary(BinOp::Max, a, b) = seg.step.nodes[out.0 as usize].op else { continue };
        let Some((score, _)) = beside_state(&seg.step, a, b, c as u32) else { continue };
        if !precomputable(&seg.step, score) || !online_softmax_shape(seg, c as u32, out) {
            continue;
        }
        let main = main_step(&seg.step, c as u32, out);
        let (before, after) = (exps(&seg.step), exps(&main));
        // Worth a second pass only when the rescaling goes away.
        if after >= before {
            continue;
        }
        let pre = pre_step(&seg.step, &seg.state, c, out);
        let score_ops = pre.nodes.iter().filter(|n: &&Node| !matches!(n.op, Op::Field(_) | Op::Const(_) | Op::State(_))).count();
        seg.pre_step = Some(pre);
        seg.step = main;
        r.applied(
            Some(span),
            format!(
                "accumulator component {c}: the row maximum is folded by a first pass over the row's edges \
                 ({score_ops} scalar op(s) per edge); the main pass sees the final maximum: {before} -> {after} \
                 exponential(s) per edge, no rescaling of the other accumulators"
            ),
        );
        return Ok(());
    }
    r.analysis(Some(span), "no running maximum rescales other accumulators");
    Ok(())
}
