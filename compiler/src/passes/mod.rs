//! The pass pipeline: small named functions over the kernel IR, each
//! recording remarks, with the verifier run after each.
//!
//! ```text
//! capture-message-passing-udf   check what the front end captured
//! fold-constants                evaluate constant subtrees
//! eliminate-dead-code           drop values nothing uses
//! analyze-reducer-algebra       classify the reducer, prove or refuse properties
//! lower-csr-to-gather-segment   accumulator state + init/step/finish over CSR rows
//! fuse-edge-node-regions        edge into the step, node into the finish
//! fold-constants, eliminate-common-subexpressions
//!                               again, on the fused regions
//! fold-relu-into-max            a max of relus from -inf: from 0, no relu
//! hoist-row-masks               a row-invariant mask of every summed term
//!                               is applied once, in the finish
//! count-edges-by-degree         an accumulator of 1 per edge is the degree
//! eliminate-dead-state          drop the accumulators left unused
//! precompute-row-max            a softmax's running maximum from a first
//!                               pass over the row's edges, so the main pass
//!                               takes one exponential per edge
//! eliminate-dead-code           drop the values left unused
//! ```
//!
//! Each pass lives in the file of its name ([`PIPELINE`] is the list).

mod analyze_reducer_algebra;
mod capture_message_passing_udf;
mod count_edges_by_degree;
mod eliminate_common_subexpressions;
mod eliminate_dead_code;
mod eliminate_dead_state;
mod fold_constants;
mod fold_relu_into_max;
mod fuse_edge_node_regions;
mod hoist_row_masks;
mod lower_csr_to_gather_segment;
mod precompute_row_max;

use serde::{Deserialize, Serialize};

use crate::ir::{self, Kernel, Span};

pub use analyze_reducer_algebra::analyze_reducer_algebra;
pub use capture_message_passing_udf::capture_message_passing_udf;
pub use count_edges_by_degree::count_edges_by_degree;
pub use eliminate_common_subexpressions::eliminate_common_subexpressions;
pub use eliminate_dead_code::eliminate_dead_code;
pub use eliminate_dead_state::eliminate_dead_state;
pub use fold_constants::fold_constants;
pub use fold_relu_into_max::fold_relu_into_max;
pub use fuse_edge_node_regions::fuse_edge_node_regions;
pub use hoist_row_masks::hoist_row_masks;
pub use lower_csr_to_gather_segment::lower_csr_to_gather_segment;
pub use precompute_row_max::precompute_row_max;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RemarkKind {
    /// The pass changed the kernel.
    Applied,
    /// The pass could not do something, and says why.
    Missed,
    /// A fact the pass established.
    Analysis,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Remark {
    pub pass: String,
    pub kind: RemarkKind,
    pub span: Option<Span>,
    pub message: String,
}

/// Remarks of one pass run, and the IR text after it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PassRecord {
    pub name: String,
    pub remarks: Vec<Remark>,
    pub ir_after: String,
}

/// A user-facing failure of a pass (e.g. a reducer whose declared property is
/// refuted), or a verifier failure after a pass (a compiler bug).
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error("{span_text}{message}")]
    Refused { message: String, span: Option<Span>, span_text: String },
    #[error("after pass `{pass}`: {source}")]
    Verify {
        pass: String,
        #[source]
        source: ir::VerifyError,
    },
}

impl PassError {
    pub fn refused(message: impl Into<String>, span: Option<Span>) -> PassError {
        let span_text = span.map(|s| format!("{}:{}: ", s.line, s.col)).unwrap_or_default();
        PassError::Refused { message: message.into(), span, span_text }
    }
}

/// What a pass reports while running.
pub struct Remarks<'a> {
    pass: &'a str,
    out: Vec<Remark>,
}

impl Remarks<'_> {
    pub fn applied(&mut self, span: Option<Span>, message: impl Into<String>) {
        self.push(RemarkKind::Applied, span, message);
    }
    pub fn missed(&mut self, span: Option<Span>, message: impl Into<String>) {
        self.push(RemarkKind::Missed, span, message);
    }
    pub fn analysis(&mut self, span: Option<Span>, message: impl Into<String>) {
        self.push(RemarkKind::Analysis, span, message);
    }
    fn push(&mut self, kind: RemarkKind, span: Option<Span>, message: impl Into<String>) {
        self.out.push(Remark { pass: self.pass.to_string(), kind, span, message: message.into() });
    }
}

type PassFn = fn(&mut Kernel, &mut Remarks<'_>) -> Result<(), PassError>;

/// Whether `v` in `r` is the constant `x`, bit for bit (so `-0` is not `0`).
pub(crate) fn is_const(r: &ir::Region, v: ir::ValueId, x: f64) -> bool {
    matches!(r.nodes.get(v.0 as usize).map(|n| &n.op), Some(ir::Op::Const(c)) if c.to_bits() == x.to_bits())
}

/// Whether `v` in the segment step is accumulator `c`'s value.
pub(crate) fn is_state(step: &ir::Region, v: ir::ValueId, c: u32) -> bool {
    step.nodes.get(v.0 as usize).is_some_and(|n| n.op == ir::Op::State(c))
}

/// Of the operands `(a, b)` of a fold `a op b`, the one beside accumulator
/// `c`'s value and its position (0 for `a`, 1 for `b`); `None` when
/// neither is that value.
pub(crate) fn beside_state(step: &ir::Region, a: ir::ValueId, b: ir::ValueId, c: u32) -> Option<(ir::ValueId, usize)> {
    if is_state(step, a, c) {
        Some((b, 1))
    } else if is_state(step, b, c) {
        Some((a, 0))
    } else {
        None
    }
}

/// Whether accumulator `c` feeds nothing in the segment step but node
/// `user` (its own update): no other node reads a `State(c)` and no other
/// step output is one. The rewrites of a component's fold rely on it.
pub(crate) fn state_feeds_only(step: &ir::Region, c: u32, user: ir::ValueId) -> bool {
    let other_reader =
        step.nodes.iter().enumerate().any(|(i, n)| i != user.0 as usize && n.op.operands().iter().any(|v| is_state(step, *v, c)));
    let other_output = step.outputs.iter().enumerate().any(|(o, v)| o != c as usize && is_state(step, *v, c));
    !other_reader && !other_output
}

/// The pipeline as one readable list.
pub const PIPELINE: [(&str, PassFn); 14] = [
    ("capture-message-passing-udf", capture_message_passing_udf),
    ("fold-constants", fold_constants),
    ("eliminate-dead-code", eliminate_dead_code),
    ("analyze-reducer-algebra", analyze_reducer_algebra),
    ("lower-csr-to-gather-segment", lower_csr_to_gather_segment),
    ("fuse-edge-node-regions", fuse_edge_node_regions),
    ("fold-constants", fold_constants),
    ("eliminate-common-subexpressions", eliminate_common_subexpressions),
    ("fold-relu-into-max", fold_relu_into_max),
    ("hoist-row-masks", hoist_row_masks),
    ("count-edges-by-degree", count_edges_by_degree),
    ("eliminate-dead-state", eliminate_dead_state),
    ("precompute-row-max", precompute_row_max),
    ("eliminate-dead-code", eliminate_dead_code),
];

/// The result of running the pipeline.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Compiled {
    /// The kernel as captured (what the reference interpreter runs).
    pub captured: Kernel,
    /// The kernel after every pass (fused segment).
    pub lowered: Kernel,
    pub passes: Vec<PassRecord>,
}

/// Run every pass in order, verifying after each.
pub fn run_pipeline(captured: Kernel) -> Result<Compiled, PassError> {
    let mut k = captured.clone();
    let mut passes = Vec::new();
    for (name, pass) in PIPELINE {
        let mut r = Remarks { pass: name, out: Vec::new() };
        pass(&mut k, &mut r)?;
        ir::verify(&k).map_err(|source| PassError::Verify { pass: name.to_string(), source })?;
        passes.push(PassRecord { name: name.to_string(), remarks: r.out, ir_after: k.to_string() });
    }
    Ok(Compiled { captured, lowered: k, passes })
}

/// The driver of a pass that rewrites each live region on its own (fold,
/// CSE, DCE): `rewrite` returns how many values it changed in a region,
/// `applied` words one region's count as a remark, `nothing` is the remark
/// when no region changed.
pub(crate) fn rewrite_regions(
    k: &mut Kernel,
    r: &mut Remarks<'_>,
    mut rewrite: impl FnMut(&mut ir::Region) -> usize,
    applied: impl Fn(usize, &str) -> String,
    nothing: &str,
) -> Result<(), PassError> {
    let mut msgs = Vec::new();
    for_each_region(k, |name, reg| {
        let n = rewrite(reg);
        if n > 0 {
            msgs.push(applied(n, name));
        }
    });
    if msgs.is_empty() {
        r.analysis(Some(k.span), nothing);
    }
    for m in msgs {
        r.applied(Some(k.span), m);
    }
    Ok(())
}

/// Apply `f` to every region of the kernel that is live at this stage.
pub(crate) fn for_each_region(k: &mut Kernel, mut f: impl FnMut(&str, &mut ir::Region)) {
    let fused = k.segment.as_ref().is_some_and(|s| s.fused);
    if !fused {
        f("edge", &mut k.edge);
        if let Some(n) = &mut k.node {
            f("node", n);
        }
        for (name, r) in
            [("identity", &mut k.reducer.identity), ("combine", &mut k.reducer.combine), ("finalize", &mut k.reducer.finalize)]
        {
            if let Some(r) = r {
                f(name, r);
            }
        }
    }
    if let Some(seg) = &mut k.segment {
        f("init", &mut seg.init);
        if let Some(pre) = &mut seg.pre_step {
            f("pre_step", pre);
        }
        f("step", &mut seg.step);
        f("finish", &mut seg.finish);
    }
}
