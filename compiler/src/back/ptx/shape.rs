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
//! A group is only possible when no value crosses lanes: a feature loop
//! that carries a number from one lane to the next (a dot product's
//! running sum) or out of the loop would need a cross-thread reduction in
//! an order different from the CPU's, so such kernels, kernels with several
//! widths or nested (matrix) loops, and kernels that read back a
//! destination or edge output outside a feature loop run one thread per
//! row. Scalar statements run in every thread of a group; only the group's
//! first thread stores their results.

use std::collections::HashSet;

use crate::ir::Role;
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

/// Whether every feature loop is lane-independent (see the module doc).
fn lanes_independent(k: &LoopKernel) -> bool {
    let lists = [&k.init, &k.pre_body, &k.body, &k.finish];
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
                    // written before it is read.
                    let mut written: HashSet<Var> = HashSet::new();
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
                    if i.operands().iter().any(|r| in_loops.contains(r)) {
                        return false;
                    }
                    if let Inst::Load(Addr::Output { out, .. }) = i {
                        if k.outputs.get(*out as usize).map(|o| o.role) != Some(Role::Param) {
                            return false;
                        }
                    }
                }
                Stmt::Store(_, x) => {
                    if in_loops.contains(x) {
                        return false;
                    }
                }
            }
        }
    }
    true
}
