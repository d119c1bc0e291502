//! The stats stage: per destination row, what the reducer's adjoint needs
//! and the node function's adjoint.
//!
//! It refolds each row over the forward graph with the reducer rule's
//! augmented reducer, rebuilds the forward aggregate from the folded state,
//! and differentiates `node` (the identity when absent) against the output
//! cotangents. It writes the rule's row statistics, the destination-field
//! gradients and parameter-gradient sums from `node`, and a replayed fold's
//! exclusive prefix per edge.

use super::Forward;
use crate::adjoint::builder::{empty_kernel, forward_fields, grad_name, zero_of, B};
use crate::adjoint::operation_rules::{vjp_region, AdjointError};
use crate::adjoint::plan::{Binding, GraphUse, Stage, StageKind};
use crate::adjoint::reducer_rules::Row;
use crate::ir::{DType, FieldId, Op, OutputDecl, Region, Role, ValueId};

/// Build the stats stage.
pub(in crate::adjoint) fn stats(fwd: &Forward<'_>) -> Result<Stage, AdjointError> {
    let k = fwd.k;
    let sp = k.span;
    let agg_types = k.aggregate_types();
    let replays_fold = fwd.needs.replays_fold;
    let mut fs = forward_fields(k, |r| r);
    let cot: Vec<usize> = k
        .outputs
        .iter()
        .map(|o| fs.add(&format!("cot.{}", o.name), Role::Dst, o.ty, DType::F32, Binding::Cotangent(o.name.clone())))
        .collect();
    let reducer = fwd.rule.stats_reducer(k, &fwd.state_types);
    let stats = fwd.rule.row_statistics(k, &fwd.state_types);
    let mut outputs: Vec<OutputDecl> = stats.iter().map(|s| OutputDecl::new(s.name.clone(), s.ty, Role::Dst)).collect();
    for (_, f) in &fwd.dsts {
        outputs.push(OutputDecl::new(grad_name(Role::Dst, &f.name), f.ty, Role::Dst));
    }
    if replays_fold {
        for (c, t) in fwd.state_types.iter().enumerate() {
            outputs.push(OutputDecl::new(format!("prefix{c}"), *t, Role::Edge));
        }
    }
    for (_, f) in &fwd.params {
        outputs.push(OutputDecl::new(grad_name(Role::Param, &f.name), f.ty, Role::Param));
    }
    let (mut stats_k, stats_b) = empty_kernel(k, format!("{}.vjp.stats", k.name), fs, reducer, outputs);
    {
        let mut edge = Region::new(vec![]);
        let msgs = fwd.messages(&mut edge, &stats_k.fields);
        let mut b = B { r: &mut edge, sp };
        let mut outs = fwd.rule.stats_messages(&mut b, &msgs);
        if replays_fold {
            for (c, t) in fwd.state_types.iter().enumerate() {
                outs.push(b.r.push(Op::Scan(c as u32), *t, sp));
            }
        }
        for _ in &fwd.params {
            // No contribution from edges here: a scalar zero writes nothing.
            outs.push(b.c(0.0));
        }
        edge.outputs = outs;
        stats_k.edge = edge;
    }
    {
        let state_t = stats_k.aggregate_types();
        let mut node = Region::new(state_t.clone());
        let s: Vec<ValueId> = state_t.iter().enumerate().map(|(i, t)| node.push(Op::Input(i as u32), *t, sp)).collect();
        let mut b = B { r: &mut node, sp };
        let agg = fwd.rule.aggregate(k, &mut b, &s)?;
        let seeds: Vec<Option<ValueId>> = cot.iter().map(|&f| Some(b.field(f, stats_k.fields[f].ty))).collect();
        // The forward node (identity when absent), differentiated.
        let fwd_node = match &k.node {
            Some(n) => n.clone(),
            None => {
                let mut r = Region::new(agg_types.clone());
                let ins: Vec<ValueId> = agg_types.iter().enumerate().map(|(i, t)| r.push(Op::Input(i as u32), *t, sp)).collect();
                r.outputs = ins;
                r
            }
        };
        let v = vjp_region(
            &fwd_node,
            &mut node,
            |op| match op {
                Op::Input(i) => agg.get(*i as usize).copied(),
                _ => None,
            },
            &seeds,
        )?;
        let leaf = |op: Op| v.leaves.iter().find(|(o, _)| *o == op).map(|(_, x)| *x);
        let mut b = B { r: &mut node, sp };
        let abar: Vec<ValueId> =
            agg_types.iter().enumerate().map(|(i, t)| leaf(Op::Input(i as u32)).unwrap_or_else(|| zero_of(&mut b, *t))).collect();
        let row = Row { state_types: &fwd.state_types, state: &s, aggregate: &agg, abar: &abar };
        let mut outs = fwd.rule.row_statistic_values(k, &mut b, &row)?;
        for (f, decl) in &fwd.dsts {
            let g = leaf(Op::Field(FieldId(*f as u32)));
            outs.push(g.unwrap_or_else(|| zero_of(&mut b, decl.ty)));
        }
        for (f, _) in &fwd.params {
            let g = leaf(Op::Field(FieldId(*f as u32)));
            outs.push(g.unwrap_or_else(|| b.c(0.0)));
        }
        node.outputs = outs;
        stats_k.node = Some(node);
    }
    Ok(Stage {
        kind: StageKind::RowStatistics,
        purpose: "row statistics and node adjoint".into(),
        graph: GraphUse::Forward,
        kernel: stats_k,
        bindings: stats_b,
    })
}
