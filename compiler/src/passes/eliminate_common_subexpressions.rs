//! `eliminate-common-subexpressions`: an operation equal to an earlier one
//! (same operation, same operands, same type) is replaced by it. Fusion and
//! adjoint construction inline regions that read the same fields and
//! recompute the same message; this pass makes each computed once.
//!
//! ```text
//! %0 = field src.x        %0 = field src.x
//! %1 = field src.x   ==>  %1 = mul %0, %0
//! %2 = mul %0, %1
//! ```

use std::collections::HashMap;

use super::{PassError, Remarks};
use crate::ir::{Kernel, Region, ValueId};

/// Returns how many values were merged (dead copies remain for DCE).
pub fn cse_region(reg: &mut Region) -> usize {
    let mut seen: HashMap<String, ValueId> = HashMap::new();
    let mut fwd: Vec<ValueId> = Vec::with_capacity(reg.nodes.len());
    let mut merged = 0;
    for i in 0..reg.nodes.len() {
        let op = reg.nodes[i].op.map_operands(|a| fwd[a.0 as usize]);
        reg.nodes[i].op = op.clone();
        // Debug text is a faithful key: it spells every operand and constant
        // (constants by value, so -0.0 and 0.0 stay apart).
        let key = format!("{:?}|{:?}", op, reg.nodes[i].ty);
        match seen.get(&key) {
            Some(&v) => {
                fwd.push(v);
                merged += 1;
            }
            None => {
                let v = ValueId(i as u32);
                seen.insert(key, v);
                fwd.push(v);
            }
        }
    }
    for o in &mut reg.outputs {
        *o = fwd[o.0 as usize];
    }
    merged
}

pub fn eliminate_common_subexpressions(k: &mut Kernel, r: &mut Remarks<'_>) -> Result<(), PassError> {
    super::rewrite_regions(k, r, cse_region, |n, name| format!("merged {n} repeated value(s) in `{name}`"), "no repeated values")
}
