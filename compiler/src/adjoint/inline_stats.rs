//! Row statistics recomputed where they are read.
//!
//! A stats stage whose every output is a short scalar expression of its
//! row's own fields (no aggregate, no degree) is a pass over the rows that
//! writes one number per row for the source stage to gather per edge:
//! `abar = 0.25 · cot` for Jacobi smoothing. The source stage can gather
//! the row's fields instead and compute the expression itself. Per edge that
//! is a few scalar operations more; per call it saves the stats pass, its
//! buffer, and one stage. Each edge evaluates the same operations on the
//! same operands in the same order as the stats stage did, so the gradients
//! keep their bits.
//!
//! Only scalar statistics are recomputed: a vector statistic costs a row of
//! operations per edge and a register per lane, where writing it once is
//! cheaper (the mean's row-scaled cotangent is kept as a stage for that
//! reason).

use super::plan::{Binding, GraphUse, Stage};
use crate::ir::{FieldDecl, FieldId, Op, Region, Role, Type};

/// The most operations (other than field reads and constants) a statistic
/// may take to be recomputed per edge.
const MAX_RECOMPUTED_OPS: usize = 4;

/// Whether the cone reads only the row's own scalar fields and constants,
/// computes only scalars, and is short enough to recompute per edge.
fn recomputable(r: &Region, cone: &[usize], fields: &[FieldDecl]) -> bool {
    // Scalars only: a vector read or reduction would be a row of work per
    // edge (and a lane order of its own).
    r.scalar_cone_ops(cone).is_some_and(|ops| ops <= MAX_RECOMPUTED_OPS) && r.reads_only_row(cone, fields)
}

/// The field of `consumer` that reads what `stats` field `g` reads, added
/// when the consumer has none. `row_role` is the role the stats stage's
/// destination rows have in the consumer. `None` on a name clash.
fn consumer_field(stats: &Stage, g: usize, consumer: &mut Stage, row_role: Role) -> Option<usize> {
    let decl = stats.kernel.fields.get(g)?;
    let binding = stats.bindings.get(g)?;
    let role = if decl.role == Role::Dst { row_role } else { decl.role };
    let same_name = consumer.kernel.fields.iter().position(|f| f.role == role && f.name == decl.name);
    match same_name {
        Some(i) if consumer.bindings.get(i) == Some(binding) => Some(i),
        Some(_) => None,
        None => {
            consumer.kernel.fields.push(FieldDecl { role, ..decl.clone() });
            consumer.bindings.push(binding.clone());
            Some(consumer.kernel.fields.len() - 1)
        }
    }
}

/// Field ids above `removed` move down by one.
fn drop_field_id(r: &mut Region, removed: u32) {
    for n in &mut r.nodes {
        if let Op::Field(FieldId(i)) = &mut n.op {
            if *i > removed {
                *i -= 1;
            }
        }
    }
}

/// When stage 0 is a stats stage (`is_stats`) whose outputs are all
/// recomputable scalars read only by transposed-graph stages, those stages
/// recompute them and stage 0 is removed. Returns whether it was; the
/// stages are unchanged when it was not.
pub(crate) fn recompute_row_statistics(stages: &mut Vec<Stage>, is_stats: bool) -> bool {
    if !is_stats || stages.len() < 2 {
        return false;
    }
    let stats = &stages[0];
    let Some(node) = &stats.kernel.node else { return false };
    let outs = &stats.kernel.outputs;
    if node.outputs.len() != outs.len()
        || outs.iter().any(|o| o.role != Role::Dst || o.ty != Type::Scalar || o.name.starts_with("grad."))
    {
        return false;
    }
    let cones: Vec<Vec<usize>> = node.outputs.iter().map(|&o| node.cone(o)).collect();
    if !cones.iter().all(|c| recomputable(node, c, &stats.kernel.fields)) {
        return false;
    }
    let reads_stats = |s: &Stage| s.bindings.iter().any(|b| matches!(b, Binding::Stage { stage: 0, .. }));
    if stages[1..].iter().any(|s| reads_stats(s) && s.graph != GraphUse::Transposed) {
        return false;
    }
    let stats = &stages[0];
    let mut rewritten = Vec::with_capacity(stages.len() - 1);
    for st in &stages[1..] {
        match recompute_in(stats, &cones, st.clone()) {
            Some(st) => rewritten.push(st),
            None => return false,
        }
    }
    *stages = rewritten;
    true
}

/// `st` reading the stats stage's expressions in place of its outputs, its
/// later stage references moved down by one; `None` if it cannot.
fn recompute_in(stats: &Stage, cones: &[Vec<usize>], mut st: Stage) -> Option<Stage> {
    let node = stats.kernel.node.as_ref()?;
    while let Some(f) = st.bindings.iter().position(|b| matches!(b, Binding::Stage { stage: 0, .. })) {
        let Binding::Stage { output, .. } = st.bindings[f].clone() else { return None };
        let o = stats.kernel.outputs.iter().position(|d| d.name == output)?;
        // Widths are bound by the forward fields, which come first.
        if st.kernel.widths.iter().any(|w| w.bound_by.0 .0 as usize >= f) {
            return None;
        }
        let row_role = st.kernel.fields[f].role;
        // The consumer's fields for every field the expression reads.
        let mut fmap: Vec<usize> = vec![0; stats.kernel.fields.len()];
        for &i in &cones[o] {
            if let Op::Field(g) = node.nodes[i].op {
                fmap[g.0 as usize] = consumer_field(stats, g.0 as usize, &mut st, row_role)?;
            }
        }
        // Each read of the statistic's field becomes the expression.
        let read = Op::Field(FieldId(f as u32));
        let recompute = |r: &mut Region, n: &crate::ir::Node| {
            (n.op == read).then(|| {
                let copies = r.copy_cone(node, &cones[o], |op| match op {
                    Op::Field(g) => Op::Field(FieldId(fmap[g.0 as usize] as u32)),
                    op => op.clone(),
                });
                copies[node.outputs[o].0 as usize]
            })
        };
        st.kernel.edge = st.kernel.edge.rewrite(recompute);
        if let Some(n) = &st.kernel.node {
            st.kernel.node = Some(n.rewrite(recompute));
        }
        // The statistic's field is read no more: drop it.
        st.kernel.fields.remove(f);
        st.bindings.remove(f);
        drop_field_id(&mut st.kernel.edge, f as u32);
        if let Some(n) = &mut st.kernel.node {
            drop_field_id(n, f as u32);
        }
    }
    for b in &mut st.bindings {
        if let Binding::Stage { stage, .. } = b {
            *stage -= 1;
        }
    }
    Some(st)
}
