//! `lower-csr-to-gather-segment`: the reduction over a destination row becomes
//! an explicit segment: accumulator state, `init` (the identity), `step` (fold
//! one message into the state) and `finish` (state to aggregate). Messages are
//! still read from a materialized buffer (`message k`) here; the next pass
//! fuses them away.
//!
//! ```text
//! reduce sum                 segment state (vector<F>)
//! edge() { .. yield %m }  ==>  init()   { %0 = const 0.0; yield %0 }
//!                              step()   { %0 = state 0; %1 = message 0; %2 = add %0, %1; yield %2 }
//!                              finish() { %0 = state 0; yield %0 }
//! ```
//!
//! The loop order is destination-major: rows of the CSR are destinations, so
//! every row writes its own outputs and needs no atomics.

use super::{PassError, Remarks};
use crate::ir::print::TypeIn;
use crate::ir::{BinOp, CmpOp, Kernel, Op, ReducerKind, Region, Role, Segment, Type, UnOp, ValueId};

/// Build the segment for a builtin reducer, componentwise over the message.
fn builtin_segment(k: &Kernel, kind: ReducerKind) -> Segment {
    let sp = k.reducer.span;
    let msg = k.message_types();
    let mut init = Region::new(vec![]);
    let mut step = Region::new(vec![]);
    let mut finish = Region::new(vec![]);
    let state = msg.clone();
    let identity = match kind {
        ReducerKind::Max => f64::NEG_INFINITY,
        ReducerKind::Min => f64::INFINITY,
        ReducerKind::Prod => 1.0,
        _ => 0.0,
    };
    let mut init_outs = Vec::new();
    // Scalar constants: the scheduler broadcasts them into vector state.
    for _ in &msg {
        init_outs.push(init.push(Op::Const(identity), Type::Scalar, sp));
    }
    init.outputs = init_outs;
    let mut step_outs = Vec::new();
    for (c, &t) in msg.iter().enumerate() {
        let s = step.push(Op::State(c as u32), t, sp);
        let m = step.push(Op::Message(c as u32), t, sp);
        let op = match kind {
            ReducerKind::Max => BinOp::Max,
            ReducerKind::Min => BinOp::Min,
            ReducerKind::Prod => BinOp::Mul,
            _ => BinOp::Add,
        };
        step_outs.push(step.push(Op::Binary(op, s, m), t, sp));
    }
    step.outputs = step_outs;
    let mut fin_outs = Vec::new();
    for (c, &t) in msg.iter().enumerate() {
        let s = finish.push(Op::State(c as u32), t, sp);
        let v = match kind {
            ReducerKind::Mean => {
                let d = finish.push(Op::Degree, Type::Scalar, sp);
                let one = finish.push(Op::Const(1.0), Type::Scalar, sp);
                let n = finish.push(Op::Binary(BinOp::Max, d, one), Type::Scalar, sp);
                finish.push(Op::Binary(BinOp::Div, s, n), t, sp)
            }
            ReducerKind::Max | ReducerKind::Min => {
                let d = finish.push(Op::Degree, Type::Scalar, sp);
                let zero = finish.push(Op::Const(0.0), Type::Scalar, sp);
                let empty = finish.push(Op::Cmp(CmpOp::Eq, d, zero), Type::Bool, sp);
                finish.push(Op::Select(empty, zero, s), t, sp)
            }
            _ => s,
        };
        fin_outs.push(v);
    }
    finish.outputs = fin_outs;
    Segment { state, init, step, finish, fused: false, pre_step: None }
}

/// Online softmax: state (running max, denominator, weighted sum).
fn softmax_segment(k: &Kernel) -> Segment {
    let sp = k.reducer.span;
    let msg = k.message_types();
    let vt = msg[1];
    let state = vec![Type::Scalar, Type::Scalar, vt];
    let mut init = Region::new(vec![]);
    let a = init.push(Op::Const(f64::NEG_INFINITY), Type::Scalar, sp);
    let b = init.push(Op::Const(0.0), Type::Scalar, sp);
    init.outputs = vec![a, b, b];
    let mut step = Region::new(vec![]);
    let mx = step.push(Op::State(0), Type::Scalar, sp);
    let den = step.push(Op::State(1), Type::Scalar, sp);
    let acc = step.push(Op::State(2), vt, sp);
    let score = step.push(Op::Message(0), Type::Scalar, sp);
    let val = step.push(Op::Message(1), vt, sp);
    let nm = step.push(Op::Binary(BinOp::Max, mx, score), Type::Scalar, sp);
    let d_old = step.push(Op::Binary(BinOp::Sub, mx, nm), Type::Scalar, sp);
    let scale = step.push(Op::Unary(UnOp::Exp, d_old), Type::Scalar, sp);
    let d_new = step.push(Op::Binary(BinOp::Sub, score, nm), Type::Scalar, sp);
    let w = step.push(Op::Unary(UnOp::Exp, d_new), Type::Scalar, sp);
    let den_s = step.push(Op::Binary(BinOp::Mul, den, scale), Type::Scalar, sp);
    let den2 = step.push(Op::Binary(BinOp::Add, den_s, w), Type::Scalar, sp);
    let acc_s = step.push(Op::Binary(BinOp::Mul, acc, scale), vt, sp);
    let wv = step.push(Op::Binary(BinOp::Mul, w, val), vt, sp);
    let acc2 = step.push(Op::Binary(BinOp::Add, acc_s, wv), vt, sp);
    step.outputs = vec![nm, den2, acc2];
    let mut finish = Region::new(vec![]);
    let den = finish.push(Op::State(1), Type::Scalar, sp);
    let acc = finish.push(Op::State(2), vt, sp);
    let d = finish.push(Op::Degree, Type::Scalar, sp);
    let zero = finish.push(Op::Const(0.0), Type::Scalar, sp);
    let empty = finish.push(Op::Cmp(CmpOp::Eq, d, zero), Type::Bool, sp);
    let one = finish.push(Op::Const(1.0), Type::Scalar, sp);
    let safe = finish.push(Op::Select(empty, one, den), Type::Scalar, sp);
    let q = finish.push(Op::Binary(BinOp::Div, acc, safe), vt, sp);
    let out = finish.push(Op::Select(empty, zero, q), vt, sp);
    finish.outputs = vec![out];
    Segment { state, init, step, finish, fused: false, pre_step: None }
}

fn monoid_segment(k: &Kernel) -> Result<Segment, PassError> {
    let (Some(id), Some(comb)) = (&k.reducer.identity, &k.reducer.combine) else {
        return Err(PassError::refused("a monoid needs `identity` and `combine`", Some(k.reducer.span)));
    };
    let state = id.output_types();
    let n = state.len();
    let init = id.clone();
    let mut step = Region::new(vec![]);
    let sp = k.reducer.span;
    let mut ins: Vec<ValueId> = (0..n).map(|c| step.push(Op::State(c as u32), state[c], sp)).collect();
    ins.extend((0..n).map(|c| step.push(Op::Message(c as u32), state[c], sp)));
    let outs = step.inline(comb, &ins);
    step.outputs = outs;
    let mut finish = Region::new(vec![]);
    let sts: Vec<ValueId> = (0..n).map(|c| finish.push(Op::State(c as u32), state[c], sp)).collect();
    finish.outputs = match &k.reducer.finalize {
        Some(f) => finish.inline(f, &sts),
        None => sts,
    };
    Ok(Segment { state, init, step, finish, fused: false, pre_step: None })
}

pub fn lower_csr_to_gather_segment(k: &mut Kernel, r: &mut Remarks<'_>) -> Result<(), PassError> {
    let seg = match k.reducer.kind {
        ReducerKind::Softmax => softmax_segment(k),
        ReducerKind::Monoid => monoid_segment(k)?,
        kind => builtin_segment(k, kind),
    };
    let sp = Some(k.span);
    r.applied(sp, "destination-major CSR traversal: one row per destination, u64 row offsets, u32 source ids; rows write disjoint outputs, no atomics");
    let gathered: Vec<&str> = k.fields.iter().filter(|f| f.role == Role::Src).map(|f| f.name.as_str()).collect();
    if !gathered.is_empty() {
        r.applied(sp, format!("source fields gathered through col[p]: {}", gathered.join(", ")));
    }
    let edge: Vec<&str> = k.fields.iter().filter(|f| f.role == Role::Edge).map(|f| f.name.as_str()).collect();
    if !edge.is_empty() {
        r.applied(sp, format!("edge fields read through edge_id[p] (the user's edge order): {}", edge.join(", ")));
    }
    let st: Vec<String> = seg.state.iter().map(|t| TypeIn(k, *t).to_string()).collect();
    r.applied(
        Some(k.reducer.span),
        format!("segment reduction `{}` with accumulator state ({})", k.reducer.kind.name(), st.join(", ")),
    );
    k.segment = Some(seg);
    Ok(())
}
