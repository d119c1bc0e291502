//! The adjoint plan: the value `generate-adjoint` returns and the runtime
//! runs.
//!
//! A plan is data, apart from how it is built (`adjoint/stages/`) and
//! rewritten (`adjoint/rewrites.rs`): its stages are ordinary kernels, each
//! with the graph it runs over and where each of its fields comes from when
//! the VJP runs, and its gradients name the stage outputs they sum. The
//! runtime (`tiga`'s `vjp`), `explain` and the golden files read it as it
//! is, so a change to these types is a change to what they print.

use crate::ir::{Kernel, Role};

/// Which realization of the forward graph a stage runs over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum GraphUse {
    Forward,
    /// Sources and destinations swapped; edge ids kept.
    Transposed,
    /// The same rows, each row's edges in reverse order; edge ids kept.
    RowReversed,
    /// One row per forward source node, holding the single edge from that
    /// node to itself: a node-wise stage over the sources (see
    /// `adjoint/scatter.rs`).
    SelfLoops,
    /// One row per forward destination node and no edges: a node-wise
    /// stage over the destinations (a saved-residual plan's statistics,
    /// see `adjoint/residuals.rs`).
    DestinationRows,
}

/// Where a stage's field comes from when the VJP runs.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Binding {
    /// A field of the forward call, by its forward role and name.
    Forward(Role, String),
    /// The cotangent of a forward output.
    Cotangent(String),
    /// An output of an earlier stage.
    Stage { stage: usize, output: String },
    /// Each edge's position within its forward destination row, in the
    /// user's edge order.
    EdgeRank,
    /// `1 / max(degree, 1)` of each forward destination row.
    InvDegree,
    /// Per forward source node and lane, the sum of `value[i]` over the
    /// destination rows `i` whose winning edge in that lane (`winner[i]`, a
    /// rank within row `i`) comes from the node: `out[col(i, winner[i][f])][f]
    /// += value[i][f]`, rows in increasing order. A rank that names no edge
    /// of its row (an empty row) adds nothing.
    WinnerScatter { winner: Box<Binding>, value: Box<Binding> },
    /// A residual the forward kept (the [`ResidualPlan`]'s forward writes
    /// it), by its [`Residual::name`].
    Residual(String),
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Stage {
    /// What the stage computes, as a value the plan's rewrites match on.
    pub kind: StageKind,
    pub purpose: String,
    pub graph: GraphUse,
    pub kernel: Kernel,
    /// One per field of `kernel`, in declaration order.
    pub bindings: Vec<Binding>,
}

/// What an adjoint stage computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum StageKind {
    /// Per-row statistics of the forward (the aggregate's cotangent, a
    /// max's winners, a softmax's maximum and denominator) and the node
    /// function's adjoint.
    RowStatistics,
    /// A monoid's suffix folds, over the rows reversed.
    MonoidSuffixes,
    /// Destination, edge and parameter gradients, over the forward graph.
    EdgeSide,
    /// Source gradients, over the transposed graph.
    SourceSide,
    /// Destination gradients summed over each row from the per-edge terms
    /// a source side wrote (a saved-residual plan without its edge side,
    /// see `adjoint/edge_terms.rs`).
    DestinationSums,
    /// A max/min's source gradients from the scattered winners, once per
    /// source.
    PerSource,
    /// What the row statistics stage computes from the folded state, read
    /// from the residuals the forward kept instead of refolded (no edge
    /// is read).
    SavedStatistics,
}

/// A gradient: the sum of these stage outputs.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct GradientPlan {
    pub role: Role,
    pub name: String,
    pub parts: Vec<(usize, String)>,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Adjoint {
    pub stages: Vec<Stage>,
    pub gradients: Vec<GradientPlan>,
    pub notes: Vec<String>,
    /// Two stages of which a call runs one (see `adjoint/scatter.rs`).
    #[serde(default)]
    pub source_sides: Option<SourceSides>,
}

/// A max/min's source side, two ways: a scatter of the rows' winners and a
/// per-source stage (`scatter`: no transposed graph, its sums in RAM), or
/// the gather over the transposed graph (`transposed`: a paged call's
/// source gradient over the RAM budget goes to a file as its rows are
/// done). A call runs `scatter`, except a paged call whose source gradient
/// is over the RAM budget on a file with a stored transpose; the other
/// stage produces nothing, and each gradient takes its part from the stage
/// that ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SourceSides {
    pub scatter: usize,
    pub transposed: usize,
}

/// One component of the stats stage's folded state, written per
/// destination row by a forward that keeps residuals.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Residual {
    /// Its name: the forward's output `residual.<name>`, and the
    /// [`Binding::Residual`] that reads it.
    pub name: String,
    pub ty: crate::ir::Type,
    /// Which component of the folded state it is.
    pub component: usize,
}

impl Residual {
    /// The forward output that holds it.
    pub fn output_name(&self) -> String {
        format!("residual.{}", self.name)
    }
}

/// A forward that keeps what its backward needs, and the backward that
/// reads it (see `adjoint/residuals.rs`).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ResidualPlan {
    /// The forward kernel's outputs, then one destination output per
    /// residual ([`Residual::output_name`]), from the stats stage's fold.
    pub forward: Kernel,
    pub residuals: Vec<Residual>,
    /// The recomputing plan with its stats stage replaced: by a node-wise
    /// stage over the destinations that reads the residuals, or by
    /// nothing where every statistic is a residual as it is.
    pub adjoint: Adjoint,
    /// For each stage of `adjoint`, the stage of the recomputing plan it
    /// is (`None`: the node-wise stage, new), so that a stage compiled
    /// ahead of time for one serves the other.
    pub origin: Vec<Option<usize>>,
    /// The same backward without its edge side, where one can be folded
    /// into the source side (`adjoint/edge_terms.rs`): for graphs whose
    /// rows are in memory. Its per-edge terms are an edge-sized buffer in
    /// RAM, which a paged call's budget does not hold, and a generated
    /// stencil has no edge ids to write them by; those take `adjoint`.
    pub in_memory: Option<Box<FoldedPlan>>,
}

/// A saved-residual backward with its edge side folded into the source
/// side ([`ResidualPlan::in_memory`]).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct FoldedPlan {
    pub adjoint: Adjoint,
    /// As [`ResidualPlan::origin`] (`None` also for the source side that
    /// writes the terms and the stage that sums them).
    pub origin: Vec<Option<usize>>,
}
