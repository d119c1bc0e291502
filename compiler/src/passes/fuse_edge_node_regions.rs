//! `fuse-edge-node-regions`: the edge region is inlined into the segment step
//! in place of its `message k` reads, and the node region into the finish in
//! place of its inputs. Afterwards no E×F message buffer exists: each message
//! is computed from gathered fields and folded into registers (or the row's
//! accumulator) in the same loop.
//!
//! ```text
//! step() { %0 = state 0; %1 = message 0; %2 = add %0, %1 }
//!   ==>  step() { %0 = state 0; %1 = field src.x; %2 = add %0, %1 }
//! ```

use super::{PassError, Remarks};
use crate::ir::{Kernel, Op, Region};

pub fn fuse_edge_node_regions(k: &mut Kernel, r: &mut Remarks<'_>) -> Result<(), PassError> {
    let Some(seg) = &k.segment else {
        return Err(PassError::refused("internal: fusion needs the segment form", Some(k.span)));
    };
    if seg.fused {
        r.analysis(Some(k.span), "already fused");
        return Ok(());
    }
    // Step: edge ops first (so each message is computed once), then the fold.
    // Edge outputs and per-edge parameter contributions ride along after
    // the new state.
    let mut step = Region::new(vec![]);
    // `scan k` in the edge region is the state before this edge: in the
    // fused step that is simply the state the step starts from.
    let uses_scan = k.edge.nodes.iter().any(|n| matches!(n.op, Op::Scan(_)));
    let scans: Vec<crate::ir::ValueId> = if uses_scan {
        seg.state.iter().enumerate().map(|(c, t)| step.push(Op::State(c as u32), *t, k.reducer.span)).collect()
    } else {
        vec![]
    };
    let mut msgs = step.inline_with(&k.edge, |op| match op {
        Op::Scan(c) => scans.get(*c as usize).copied(),
        _ => None,
    });
    let extras = msgs.split_off(k.num_messages().min(msgs.len()));
    let mut outs = step.inline_with(&seg.step, |op| match op {
        Op::Message(m) => msgs.get(*m as usize).copied(),
        _ => None,
    });
    outs.extend(extras);
    step.outputs = outs;
    let edge_ops = k.edge.nodes.len();
    // Finish: the aggregate, then the node region on it.
    let mut finish = Region::new(vec![]);
    let agg = finish.inline(&seg.finish, &[]);
    let outs = match &k.node {
        Some(n) => finish.inline(n, &agg),
        None => agg,
    };
    finish.outputs = outs;
    let seg = k.segment.as_mut().ok_or_else(|| PassError::refused("internal: segment vanished", None))?;
    seg.step = step;
    seg.finish = finish;
    seg.fused = true;
    r.applied(
        Some(k.span),
        format!("fused `edge` ({edge_ops} ops) into the segment step: messages are folded as they are computed, no E×F message buffer"),
    );
    match &k.node {
        Some(n) => r.applied(Some(k.span), format!("fused `node` ({} ops) into the row epilogue", n.nodes.len())),
        None => r.analysis(Some(k.span), "no `node` function: the row epilogue stores the aggregate"),
    }
    Ok(())
}
