//! `eliminate-dead-code`: values that no output depends on are dropped and the
//! region is renumbered (operands still precede uses).

use super::{PassError, Remarks};
use crate::ir::{Kernel, Region, ValueId};

/// Returns how many nodes were removed.
pub fn dce_region(reg: &mut Region) -> usize {
    let n = reg.nodes.len();
    let live = reg.live_from(reg.outputs.iter().copied());
    let removed = live.iter().filter(|l| !**l).count();
    if removed == 0 {
        return 0;
    }
    let mut map = vec![ValueId(u32::MAX); n];
    let mut nodes = Vec::with_capacity(n - removed);
    for (i, node) in reg.nodes.iter().enumerate() {
        if live[i] {
            map[i] = ValueId(nodes.len() as u32);
            let mut nn = node.clone();
            nn.op = node.op.map_operands(|a| map[a.0 as usize]);
            nodes.push(nn);
        }
    }
    reg.nodes = nodes;
    for o in &mut reg.outputs {
        *o = map[o.0 as usize];
    }
    removed
}

pub fn eliminate_dead_code(k: &mut Kernel, r: &mut Remarks<'_>) -> Result<(), PassError> {
    super::rewrite_regions(k, r, dce_region, |n, name| format!("removed {n} dead value(s) from `{name}`"), "every value is used")
}
