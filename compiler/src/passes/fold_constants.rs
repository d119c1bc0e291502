//! `fold-constants`: operations whose operands are all constants become
//! constants, and a `select` on a constant condition becomes its arm.
//!
//! ```text
//! %0 = const 0.5          %0 = const 0.5
//! %1 = const 2.0    ==>   %1 = const 2.0
//! %2 = mul %0, %1         %2 = const 1.0
//! ```
//! Folding happens in f64; an f32 variant then rounds the folded constant
//! once, which can differ from f32 evaluation in the last bit.

use super::{PassError, Remarks};
use crate::interp::{apply_binary, apply_cmp, apply_unary};
use crate::ir::{BinOp, Kernel, Op, Region, Type, UnOp};

fn fold_region(reg: &mut Region) -> usize {
    let mut folded = 0;
    // Replacement table: a value may be forwarded to an earlier one.
    let mut fwd: Vec<crate::ir::ValueId> = Vec::with_capacity(reg.nodes.len());
    let mut consts: Vec<Option<f64>> = Vec::with_capacity(reg.nodes.len());
    let mut bools: Vec<Option<bool>> = Vec::with_capacity(reg.nodes.len());
    for i in 0..reg.nodes.len() {
        let op = reg.nodes[i].op.map_operands(|a| fwd[a.0 as usize]);
        reg.nodes[i].op = op.clone();
        let c = |v: crate::ir::ValueId| consts[v.0 as usize];
        let b = |v: crate::ir::ValueId| bools[v.0 as usize];
        let scalar = reg.nodes[i].ty == Type::Scalar;
        let mut new_c = None;
        let mut new_b = None;
        let mut forward = None;
        match op {
            Op::Const(x) => new_c = Some(x),
            Op::Unary(UnOp::Not, a) => new_b = b(a).map(|x| !x),
            Op::Unary(u, a) if scalar => new_c = c(a).map(|x| apply_unary(u, x)),
            Op::Binary(BinOp::And, x, y) => new_b = b(x).zip(b(y)).map(|(p, q)| p && q),
            Op::Binary(BinOp::Or, x, y) => new_b = b(x).zip(b(y)).map(|(p, q)| p || q),
            Op::Binary(o, x, y) if scalar => new_c = c(x).zip(c(y)).map(|(p, q)| apply_binary(o, p, q)),
            Op::Powi(a, n) if scalar => new_c = c(a).map(|x| x.powi(n)),
            Op::Cmp(o, x, y) => new_b = c(x).zip(c(y)).map(|(p, q)| apply_cmp(o, p, q)),
            Op::Select(cond, x, y) => {
                if let Some(t) = b(cond) {
                    let pick = if t { x } else { y };
                    // Only forward when the arm already has the select's type
                    // (a scalar arm of a vector select must stay broadcast).
                    if reg.nodes[pick.0 as usize].ty == reg.nodes[i].ty {
                        forward = Some(pick);
                    }
                }
            }
            _ => {}
        }
        if let Some(v) = new_c {
            if !matches!(reg.nodes[i].op, Op::Const(_)) {
                reg.nodes[i].op = Op::Const(v);
                folded += 1;
            }
        }
        match forward {
            Some(p) => {
                folded += 1;
                fwd.push(p);
            }
            None => fwd.push(crate::ir::ValueId(i as u32)),
        }
        consts.push(new_c);
        bools.push(new_b);
    }
    for o in &mut reg.outputs {
        *o = fwd[o.0 as usize];
    }
    folded
}

pub fn fold_constants(k: &mut Kernel, r: &mut Remarks<'_>) -> Result<(), PassError> {
    super::rewrite_regions(
        k,
        r,
        fold_region,
        |n, name| format!("folded {n} operation(s) in `{name}`"),
        "no constant subexpressions to fold",
    )
}
