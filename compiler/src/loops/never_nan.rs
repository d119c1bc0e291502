//! Which loop-kernel variables can never hold NaN: lets a back end write
//! `max`/`min` as one compare and select when one operand is known not to
//! be NaN, instead of the NaN-aware form (compare, select, NaN test,
//! select) that matches Rust's `max`/`min` on any input.

use super::{for_each_stmt, Addr, Inst, LoopKernel, Stmt};
use crate::ir::{BinOp, UnOp};

/// `result[v]` is true when variable `v` is never NaN, whatever the inputs.
///
/// Never NaN: constants (not NaN), degrees and ranks, comparisons and
/// their logic, relu (NaN compares false, so it gives 0), scratch loads
/// whose buffer only ever stores never-NaN values, copies, selects and
/// sign/abs/exp/tanh/sigmoid/powi of never-NaN values, and `max`/`min`
/// with one never-NaN operand (Rust's `max`/`min` return the other operand
/// when one is NaN). Computed optimistically to a fixed point: everything
/// starts never-NaN and is cleared when one of its definitions may be NaN,
/// so an accumulator `acc = max(acc, x)` that starts at -inf stays never-NaN.
/// Arithmetic (+ - * /, leaky relu, ln, sqrt) and field loads may be NaN.
pub fn never_nan(k: &LoopKernel) -> Vec<bool> {
    let mut vars = vec![true; k.vars.len()];
    let mut bufs = vec![true; k.scratch.len()];
    // Flags only ever go from true to false: repeat until none does.
    let mut changed = true;
    while changed {
        changed = false;
        for part in [&k.init, &k.pre_body, &k.body, &k.finish] {
            for_each_stmt(part, &mut |st| match st {
                Stmt::Set(x, i) => {
                    let v = |y: &super::Var| vars.get(y.0 as usize).copied().unwrap_or(false);
                    let ok = match i {
                        Inst::Const(c) => !c.is_nan(),
                        Inst::Load(Addr::Scratch { buf, .. }) => bufs.get(*buf as usize).copied().unwrap_or(false),
                        Inst::Load(_) => false,
                        Inst::Copy(y) => v(y),
                        Inst::Degree | Inst::Rank | Inst::Cmp(..) => true,
                        Inst::Unary(u, y) => match u {
                            UnOp::Relu | UnOp::Not => true,
                            UnOp::Neg | UnOp::Abs | UnOp::Exp | UnOp::Tanh | UnOp::Sigmoid => v(y),
                            UnOp::Ln | UnOp::Sqrt => false,
                        },
                        Inst::Binary(b, y, z) => match b {
                            BinOp::Max | BinOp::Min => v(y) || v(z),
                            BinOp::And | BinOp::Or => true,
                            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::LeakyRelu => false,
                        },
                        Inst::Powi(y, _) => v(y),
                        Inst::Select(_, y, z) => v(y) && v(z),
                    };
                    if let Some(slot) = vars.get_mut(x.0 as usize).filter(|s| !ok && **s) {
                        *slot = false;
                        changed = true;
                    }
                }
                Stmt::Store(Addr::Scratch { buf, .. }, x) if !vars.get(x.0 as usize).copied().unwrap_or(false) => {
                    if let Some(slot) = bufs.get_mut(*buf as usize).filter(|s| **s) {
                        *slot = false;
                        changed = true;
                    }
                }
                _ => {}
            });
        }
    }
    vars
}
