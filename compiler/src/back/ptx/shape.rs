//! How many threads share a destination row, and how many consecutive
//! features each of them loads at once.
//!
//! A scalar kernel runs one thread per row. A vector kernel whose feature
//! loops are independent lane by lane runs a group of `G` threads per row
//! (a power of two up to a warp): thread `t` of the group takes features
//! `t·V .. t·V + V`, then `t·V + G·V ..`, and so on, so a group reads a
//! row's features in consecutive, coalesced bytes, `V` at a time
//! (`ld.global.nc.v4.f32` / `.v2.f64`, 16 bytes) when the width is a
//! multiple of `V`. Every thread of the group walks the row's edges in CSR
//! order, so each feature is reduced in the same order as on the CPU: the
//! split is over features, never over edges.
//!
//! A group is only possible when values cross lanes in one way: a feature
//! loop reducing into a number (a dot product's running sum, a row
//! maximum: `x = x + z`, `max`, `min`, where nothing else in the loop reads
//! `x`) becomes per-thread partial reductions combined across the group
//! with `shfl.sync.bfly` ([`group_reductions`]); sums then add in a tree
//! instead of lane order (within f32/f64 rounding of the CPU's result, not
//! bit for bit; max and min stay exact). Any other value carried from one
//! lane to the next or out of a loop, kernels with several widths or nested
//! (matrix) loops, and kernels that read back a destination or edge output
//! outside a feature loop run one thread per row. Scalar statements run in
//! every thread of a group; only the group's first thread stores their
//! results.

use std::collections::HashSet;

use crate::ir::{BinOp, Role};
use crate::loops::{for_each_stmt, Addr, Inst, LoopKernel, Stmt, Var};

/// The launch shape of one lowered kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaneShape {
    /// Threads per destination row (`G`, a power of two, 1 to 32).
    pub threads: u32,
    /// Consecutive features a thread loads with one instruction (`V`).
    pub vector: u32,
}

impl LaneShape {
    pub const ONE: LaneShape = LaneShape { threads: 1, vector: 1 };
}

/// The shape for `k` at these width values and an element of `size` bytes.
pub fn lane_shape(k: &LoopKernel, widths: &[usize], size: usize) -> LaneShape {
    if k.widths.len() != 1 || widths.len() != 1 || !lanes_independent(k) {
        return LaneShape::ONE;
    }
    let w = widths[0];
    let v = 16 / size;
    let vector = if w.is_multiple_of(v) { v } else { 1 };
    let per_thread_units = w.div_ceil(vector).max(1);
    let threads = per_thread_units.next_power_of_two().min(32) as u32;
    LaneShape { threads, vector: vector as u32 }
}

/// The reductions of a feature loop's `body` a lane group can split:
/// variables `x` set once in the body, by `x = x ⊕ z` (⊕ one of add, max,
/// min; `z` not `x`), and read by no other statement of the body.
pub fn group_reductions(body: &[Stmt]) -> Vec<(Var, BinOp)> {
    let mut out = Vec::new();
    for st in body {
        let Stmt::Set(x, Inst::Binary(op @ (BinOp::Add | BinOp::Max | BinOp::Min), a, b)) = st else { continue };
        let other = if a == x {
            b
        } else if b == x {
            a
        } else {
            continue;
        };
        if other == x || out.iter().any(|(v, _)| v == x) {
            continue;
        }
        let mut sets = 0;
        let mut other_reads = 0;
        for_each_stmt(body, &mut |s| {
            if let Stmt::Set(v, _) = s {
                sets += usize::from(v == x);
            }
            let reads = match s {
                Stmt::Set(_, i) => i.operands(),
                Stmt::Store(_, v) => vec![*v],
                Stmt::Loop { .. } => Vec::new(),
            };
            if !std::ptr::eq(s, st) {
                other_reads += reads.iter().filter(|r| *r == x).count();
            }
        });
        if sets == 1 && other_reads == 0 {
            out.push((*x, *op));
        }
    }
    out
}

/// Whether every feature loop is lane-independent but for its group
/// reductions (see the module doc).
fn lanes_independent(k: &LoopKernel) -> bool {
    let lists = [&k.init, &k.pre_body, &k.body, &k.finish];
    let mut reductions: HashSet<Var> = HashSet::new();
    let mut plain: HashSet<Var> = HashSet::new();
    for list in lists {
        for st in list.iter() {
            if let Stmt::Loop { body, .. } = st {
                let r = group_reductions(body);
                for s in body {
                    if let Stmt::Set(v, _) = s {
                        if r.iter().any(|(x, _)| x == v) {
                            reductions.insert(*v);
                        } else {
                            plain.insert(*v);
                        }
                    }
                }
            }
        }
    }
    // A variable both reduced in one loop and set otherwise in another is
    // carried in the plain sense.
    if reductions.iter().any(|v| plain.contains(v)) {
        return false;
    }
    let mut in_loops: HashSet<Var> = HashSet::new();
    for list in lists {
        for st in list.iter() {
            if let Stmt::Loop { body, .. } = st {
                if body.iter().any(|s| matches!(s, Stmt::Loop { .. })) {
                    return false;
                }
                for_each_stmt(body, &mut |s| {
                    if let Stmt::Set(v, _) = s {
                        in_loops.insert(*v);
                    }
                });
            }
        }
    }
    for list in lists {
        for st in list.iter() {
            match st {
                Stmt::Loop { body, .. } => {
                    // Within one iteration, a loop-assigned variable is
                    // written before it is read (a reduction reads itself).
                    let reduced: Vec<Var> = group_reductions(body).into_iter().map(|(x, _)| x).collect();
                    let mut written: HashSet<Var> = reduced.iter().copied().collect();
                    for s in body {
                        let reads = match s {
                            Stmt::Set(_, i) => i.operands(),
                            Stmt::Store(_, x) => vec![*x],
                            Stmt::Loop { .. } => return false,
                        };
                        if reads.iter().any(|r| in_loops.contains(r) && !written.contains(r)) {
                            return false;
                        }
                        if let Stmt::Set(v, _) = s {
                            written.insert(*v);
                        }
                    }
                }
                Stmt::Set(_, i) => {
                    if i.operands().iter().any(|r| in_loops.contains(r) && !reductions.contains(r)) {
                        return false;
                    }
                    if let Inst::Load(Addr::Output { out, .. }) = i {
                        if k.outputs.get(*out as usize).map(|o| o.role) != Some(Role::Param) {
                            return false;
                        }
                    }
                }
                Stmt::Store(_, x) => {
                    if in_loops.contains(x) && !reductions.contains(x) {
                        return false;
                    }
                }
            }
        }
    }
    true
}
