//! `eliminate-dead-state`: accumulator components that no output needs are
//! removed from the segment (their init, their per-edge update and their
//! reads), so a kernel folds only what it uses. Adjoint stages rely on this:
//! the row-statistics stage of a `sum` kernel refolds nothing at all.
//!
//! ```text
//! segment state (vector<F>, scalar)        segment state (scalar)
//! step { ..; yield %acc, %cnt }     ==>     step { ..; yield %cnt }
//! finish { %0 = state 1; .. }               finish { %0 = state 0; .. }
//! ```

use std::collections::BTreeSet;

use super::eliminate_dead_code::dce_region;
use super::{PassError, Remarks};
use crate::ir::{Kernel, Op, Region, ValueId};

/// State components that `outputs` of `r` depend on.
fn states_used(r: &Region, outputs: &[ValueId]) -> BTreeSet<u32> {
    let live = r.live_from(outputs.iter().copied());
    r.nodes
        .iter()
        .zip(live)
        .filter_map(|(n, l)| match n.op {
            Op::State(k) if l => Some(k),
            _ => None,
        })
        .collect()
}

pub fn eliminate_dead_state(k: &mut Kernel, r: &mut Remarks<'_>) -> Result<(), PassError> {
    let Some(seg) = k.segment.as_mut() else {
        r.analysis(Some(k.span), "no segment");
        return Ok(());
    };
    if seg.pre_step.is_some() {
        // Its own pass over the edges reads and writes the state too; the
        // pre-pass is introduced after this pass, which does not follow it.
        r.analysis(Some(k.span), "the segment has a pre-pass over the edges: not analyzed");
        return Ok(());
    }
    let n = seg.state.len();
    // Live: read by the finish or by the step's extra outputs, then closed
    // under "the update of a live component reads it".
    let mut live: BTreeSet<u32> = states_used(&seg.finish, &seg.finish.outputs.clone());
    live.extend(states_used(&seg.step, &seg.step.outputs[n.min(seg.step.outputs.len())..]));
    loop {
        let before = live.len();
        let outs: Vec<ValueId> = live.iter().filter_map(|&c| seg.step.outputs.get(c as usize).copied()).collect();
        live.extend(states_used(&seg.step, &outs));
        if live.len() == before {
            break;
        }
    }
    let dead: Vec<u32> = (0..n as u32).filter(|c| !live.contains(c)).collect();
    if dead.is_empty() {
        r.analysis(Some(k.span), "every accumulator component is used");
        return Ok(());
    }
    // Drop the dead components' updates, then their (now dead) readers,
    // then renumber the survivors.
    let keep: Vec<u32> = (0..n as u32).filter(|c| live.contains(c)).collect();
    let pick = |v: &Vec<ValueId>| -> Vec<ValueId> {
        let mut out: Vec<ValueId> = keep.iter().filter_map(|&c| v.get(c as usize).copied()).collect();
        out.extend(v.iter().skip(n).copied());
        out
    };
    seg.init.outputs = pick(&seg.init.outputs);
    seg.step.outputs = pick(&seg.step.outputs);
    for reg in [&mut seg.init, &mut seg.step, &mut seg.finish] {
        dce_region(reg);
    }
    for reg in [&mut seg.step, &mut seg.finish] {
        for node in &mut reg.nodes {
            if let Op::State(c) = node.op {
                let p = keep.iter().position(|&x| x == c).ok_or_else(|| {
                    PassError::refused(format!("internal: dead accumulator component {c} is still read"), Some(k.span))
                })?;
                node.op = Op::State(p as u32);
            }
        }
    }
    seg.state = keep.iter().map(|&c| seg.state[c as usize]).collect();
    r.applied(
        Some(k.span),
        format!("removed {} unused accumulator component(s) ({:?}); {} remain", dead.len(), dead, seg.state.len()),
    );
    Ok(())
}
