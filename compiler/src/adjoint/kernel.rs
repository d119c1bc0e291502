//! `generate-adjoint`: the vector-Jacobian product of a kernel, as kernels.
//!
//! The VJP of `out[i] = node(dst_i, P, R_{e=j→i} edge(src_j, dst_i, e, P))`
//! is built from up to four ordinary kernels (captured IR: they go through
//! the same passes, scheduler and back end as any kernel):
//!
//! 1. **stats** (forward graph): refolds each row with an augmented reducer
//!    that keeps what the reducer's adjoint needs (the count for `mean`, the
//!    winning edge's rank per feature for `max`/`min`, the product of
//!    non-zero messages and the zero count for `prod`, the running max and
//!    denominator for `softmax`, the exclusive prefix of a monoid's fold),
//!    rebuilds the forward aggregate, and differentiates `node` against the
//!    output cotangents: it writes the aggregate's cotangent and row
//!    statistics per destination, the destination-field gradient from
//!    `node`, and parameter-gradient sums from `node`.
//! 2. **suffix** (row-reversed graph, user monoids only): the exclusive
//!    suffix of each edge, folded with the opposite monoid.
//! 3. **edge side** (forward graph): per edge, the message cotangent from the
//!    row statistics, then the edge function's adjoint: destination-field
//!    gradients summed over the row, edge-field gradients written per edge in
//!    the user's order, parameter-gradient sums.
//! 4. **source side** (transposed graph): the same message cotangent seen
//!    from the source: `src` gradients are a sum over each source's out-edges,
//!    a message-passing kernel over the transposed graph, so the backward needs
//!    no atomics.
//!
//! Conventions at non-differentiable points (one set, everywhere): relu'(0) =
//! 0, |x|'(0) = 0, leaky_relu'(0) = slope; `max`/`min` of two operands split
//! the gradient evenly on a tie (so `max(a, b) + min(a, b)` is exact); an `if`
//! differentiates the branch taken; and a `max`/`min` *reduction* gives each
//! feature's gradient to the first edge in CSR order (the user's order within
//! a row) that attains it.

use super::operation_rules::{vjp_region, AdjointError};
use crate::ir::{
    BinOp, CmpOp, DType, FieldDecl, FieldId, Kernel, Op, OutputDecl, Properties, Reducer, ReducerKind, Region, Role, Span, Type,
    UnOp, ValueId,
};

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
    /// A max/min's source gradients from the scattered winners, once per
    /// source.
    PerSource,
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

/// A small builder with the verifier's typing rules.
pub(super) struct B<'r> {
    pub(super) r: &'r mut Region,
    pub(super) sp: Span,
}

fn ew(a: Type, b: Type) -> Type {
    match (a, b) {
        (Type::Vector(w), _) | (_, Type::Vector(w)) => Type::Vector(w),
        (Type::Mask(w), _) | (_, Type::Mask(w)) => Type::Vector(w),
        _ => Type::Scalar,
    }
}

impl B<'_> {
    pub(super) fn c(&mut self, v: f64) -> ValueId {
        self.r.push(Op::Const(v), Type::Scalar, self.sp)
    }
    fn ty(&self, v: ValueId) -> Type {
        self.r.ty(v)
    }
    fn bin(&mut self, op: BinOp, a: ValueId, b: ValueId) -> ValueId {
        let t = match op {
            BinOp::And | BinOp::Or => self.ty(a),
            _ => ew(self.ty(a), self.ty(b)),
        };
        self.r.push(Op::Binary(op, a, b), t, self.sp)
    }
    fn un(&mut self, op: UnOp, a: ValueId) -> ValueId {
        let t = self.ty(a);
        self.r.push(Op::Unary(op, a), t, self.sp)
    }
    fn cmp(&mut self, c: CmpOp, a: ValueId, b: ValueId) -> ValueId {
        let t = match ew(self.ty(a), self.ty(b)) {
            Type::Vector(w) => Type::Mask(w),
            _ => Type::Bool,
        };
        self.r.push(Op::Cmp(c, a, b), t, self.sp)
    }
    fn sel(&mut self, c: ValueId, a: ValueId, b: ValueId) -> ValueId {
        let t = match (self.ty(c), ew(self.ty(a), self.ty(b))) {
            (Type::Mask(w), _) => Type::Vector(w),
            (_, t) => t,
        };
        self.r.push(Op::Select(c, a, b), t, self.sp)
    }
    /// A constant of type `t` (broadcast for vectors).
    fn fill(&mut self, v: f64, t: Type) -> ValueId {
        let c = self.c(v);
        match t {
            Type::Vector(w) => self.r.push(Op::Broadcast(c, w), Type::Vector(w), self.sp),
            _ => c,
        }
    }
    pub(super) fn field(&mut self, f: usize, t: Type) -> ValueId {
        self.r.push(Op::Field(FieldId(f as u32)), t, self.sp)
    }
    fn dot_or_mul(&mut self, a: ValueId, b: ValueId) -> ValueId {
        match (self.ty(a), self.ty(b)) {
            (Type::Vector(_), Type::Vector(_)) => self.r.push(Op::Dot(a, b), Type::Scalar, self.sp),
            _ => self.bin(BinOp::Mul, a, b),
        }
    }
}

/// Fields of a stage kernel under construction, with their bindings.
pub(super) struct FieldSet {
    pub(super) fields: Vec<FieldDecl>,
    pub(super) bindings: Vec<Binding>,
}

impl FieldSet {
    pub(super) fn add(&mut self, name: &str, role: Role, ty: Type, declared: DType, b: Binding) -> usize {
        self.fields.push(FieldDecl { name: name.to_string(), role, ty, declared, span: Span::default() });
        self.bindings.push(b);
        self.fields.len() - 1
    }
}

/// The forward fields copied first, so widths (bound by field index) stay valid.
fn forward_fields(k: &Kernel, role_map: impl Fn(Role) -> Role) -> FieldSet {
    let mut fs = FieldSet { fields: Vec::new(), bindings: Vec::new() };
    for f in &k.fields {
        fs.add(&f.name, role_map(f.role), f.ty, f.declared, Binding::Forward(f.role, f.name.clone()));
    }
    fs
}

/// What a stats stage writes per row for the reducer's adjoint.
#[derive(Clone, Debug)]
struct RowStat {
    name: String,
    ty: Type,
}

pub(super) fn empty_kernel(
    k: &Kernel,
    name: String,
    fs: FieldSet,
    reducer: Reducer,
    outputs: Vec<OutputDecl>,
) -> (Kernel, Vec<Binding>) {
    let kernel = Kernel {
        name,
        span: k.span,
        fields: fs.fields,
        widths: k.widths.clone(),
        outputs,
        edge: Region::new(vec![]),
        reducer,
        node: None,
        segment: None,
    };
    (kernel, fs.bindings)
}

pub(super) fn builtin(kind: ReducerKind, span: Span) -> Reducer {
    Reducer {
        kind,
        span,
        declared: Properties::default(),
        proved: None,
        class: None,
        identity: None,
        combine: None,
        finalize: None,
    }
}

fn monoid(span: Span, identity: Region, combine: Region, associative: bool, commutative: bool) -> Reducer {
    Reducer {
        kind: ReducerKind::Monoid,
        span,
        declared: Properties { associative, commutative, ..Properties::default() },
        proved: None,
        class: None,
        identity: Some(identity),
        combine: Some(combine),
        finalize: None,
    }
}

/// Inline `src` into `out`, mapping its field reads through `fmap` and
/// answering `Input`/`Scan`/`Rank` reads with `leaf`.
fn inline_mapped(
    out: &mut Region,
    src: &Region,
    fmap: &[usize],
    fields: &[FieldDecl],
    mut leaf: impl FnMut(&Op) -> Option<ValueId>,
) -> Vec<ValueId> {
    let sp = Span::default();
    let pre: Vec<Option<ValueId>> = (0..fmap.len())
        .map(|f| {
            let used = src.nodes.iter().any(|n| n.op == Op::Field(FieldId(f as u32)));
            used.then(|| out.push(Op::Field(FieldId(fmap[f] as u32)), fields[fmap[f]].ty, sp))
        })
        .collect();
    out.inline_with(src, |op| match op {
        Op::Field(f) => pre.get(f.0 as usize).copied().flatten(),
        other => leaf(other),
    })
}

/// The forward aggregate and the reducer's per-row statistics, from the
/// augmented state a stats stage folds.
struct StatsReducer {
    reducer: Reducer,
    /// Extra message components appended to the forward message (by kind).
    edge_extra: fn(&mut B<'_>, &[ValueId], &Kernel) -> Vec<ValueId>,
}

fn state_types_for(k: &Kernel) -> Vec<Type> {
    let m = k.message_types();
    match k.reducer.kind {
        ReducerKind::Sum => m,
        ReducerKind::Mean => m.into_iter().chain([Type::Scalar]).collect(),
        ReducerKind::Max | ReducerKind::Min | ReducerKind::Prod => m.iter().flat_map(|t| [*t, *t]).collect(),
        ReducerKind::Softmax => vec![Type::Scalar, Type::Scalar, m[1]],
        ReducerKind::Monoid => k.reducer.identity.as_ref().map(|r| r.output_types()).unwrap_or_default(),
    }
}

/// Builds a combine region's outputs from the builder and the two states.
type CombineBody<'a> = dyn Fn(&mut B<'_>, &[ValueId], &[ValueId]) -> Vec<ValueId> + 'a;

/// The augmented reducer of the stats stage and how its messages are made.
fn stats_reducer(k: &Kernel) -> StatsReducer {
    let sp = k.reducer.span;
    let st = state_types_for(k);
    let n = st.len();
    // combine(a, b) with a = inputs 0..n, b = inputs n..2n.
    let comb = |f: &CombineBody<'_>| -> Region {
        let mut r = Region::new(st.iter().chain(st.iter()).copied().collect());
        let ins: Vec<ValueId> = (0..2 * n).map(|i| r.push(Op::Input(i as u32), st[i % n], sp)).collect();
        let mut b = B { r: &mut r, sp };
        let outs = f(&mut b, &ins[..n], &ins[n..]);
        r.outputs = outs;
        r
    };
    let ident = |vals: &[f64]| -> Region {
        let mut r = Region::new(vec![]);
        let mut b = B { r: &mut r, sp };
        let outs: Vec<ValueId> = vals.iter().zip(&st).map(|(v, t)| b.fill(*v, *t)).collect();
        r.outputs = outs;
        r
    };
    match k.reducer.kind {
        ReducerKind::Sum => StatsReducer { reducer: builtin(ReducerKind::Sum, sp), edge_extra: |_, _, _| vec![] },
        ReducerKind::Mean => StatsReducer { reducer: builtin(ReducerKind::Sum, sp), edge_extra: |b, _, _| vec![b.c(1.0)] },
        kind @ (ReducerKind::Max | ReducerKind::Min) => {
            let is_max = kind == ReducerKind::Max;
            let inf = if is_max { f64::NEG_INFINITY } else { f64::INFINITY };
            let idv: Vec<f64> = (0..n).map(|i| if i % 2 == 0 { inf } else { 0.0 }).collect();
            let c = comb(&|b, a, bb| {
                let mut outs = Vec::new();
                for p in 0..a.len() / 2 {
                    let (sa, ra, sb, rb) = (a[2 * p], a[2 * p + 1], bb[2 * p], bb[2 * p + 1]);
                    let s = b.bin(if is_max { BinOp::Max } else { BinOp::Min }, sa, sb);
                    // Strictly better: the earlier edge keeps ties.
                    let better = b.cmp(if is_max { CmpOp::Gt } else { CmpOp::Lt }, sb, sa);
                    let r = b.sel(better, rb, ra);
                    outs.push(s);
                    outs.push(r);
                }
                outs
            });
            StatsReducer {
                reducer: monoid(sp, ident(&idv), c, true, false),
                edge_extra: |b, msgs, _| {
                    // Each component becomes (m, rank): interleaved below.
                    let rank = b.r.push(Op::Rank, Type::Scalar, b.sp);
                    msgs.iter()
                        .map(|&m| match b.ty(m) {
                            Type::Vector(w) => b.r.push(Op::Broadcast(rank, w), Type::Vector(w), b.sp),
                            _ => rank,
                        })
                        .collect()
                },
            }
        }
        ReducerKind::Prod => {
            let idv: Vec<f64> = (0..n).map(|i| if i % 2 == 0 { 1.0 } else { 0.0 }).collect();
            let c = comb(&|b, a, bb| {
                let mut outs = Vec::new();
                for p in 0..a.len() / 2 {
                    outs.push(b.bin(BinOp::Mul, a[2 * p], bb[2 * p]));
                    outs.push(b.bin(BinOp::Add, a[2 * p + 1], bb[2 * p + 1]));
                }
                outs
            });
            StatsReducer { reducer: monoid(sp, ident(&idv), c, true, true), edge_extra: |_, _, _| vec![] }
        }
        ReducerKind::Softmax => {
            let c = comb(&|b, a, bb| {
                let m = b.bin(BinOp::Max, a[0], bb[0]);
                let da = b.bin(BinOp::Sub, a[0], m);
                let ea = b.un(UnOp::Exp, da);
                let db = b.bin(BinOp::Sub, bb[0], m);
                let eb = b.un(UnOp::Exp, db);
                let d1 = b.bin(BinOp::Mul, a[1], ea);
                let d2 = b.bin(BinOp::Mul, bb[1], eb);
                let d = b.bin(BinOp::Add, d1, d2);
                let x1 = b.bin(BinOp::Mul, a[2], ea);
                let x2 = b.bin(BinOp::Mul, bb[2], eb);
                let x = b.bin(BinOp::Add, x1, x2);
                vec![m, d, x]
            });
            StatsReducer {
                reducer: monoid(sp, ident(&[f64::NEG_INFINITY, 0.0, 0.0]), c, true, true),
                edge_extra: |_, _, _| vec![],
            }
        }
        ReducerKind::Monoid => {
            let mut r = k.reducer.clone();
            r.finalize = None;
            r.proved = None;
            r.class = None;
            StatsReducer { reducer: r, edge_extra: |_, _, _| vec![] }
        }
    }
}

/// The stats stage's messages from the forward messages (kind-specific).
fn stats_messages(k: &Kernel, b: &mut B<'_>, msgs: &[ValueId], extra: Vec<ValueId>) -> Vec<ValueId> {
    match k.reducer.kind {
        ReducerKind::Max | ReducerKind::Min => msgs.iter().zip(extra).flat_map(|(&m, r)| [m, r]).collect(),
        ReducerKind::Prod => msgs
            .iter()
            .flat_map(|&m| {
                let zero = b.c(0.0);
                let one = b.c(1.0);
                let is0 = b.cmp(CmpOp::Eq, m, zero);
                let nz = b.sel(is0, one, m);
                let z = b.sel(is0, one, zero);
                let t = b.ty(m);
                let z = if let Type::Vector(w) = t {
                    if b.ty(z) == Type::Scalar {
                        b.r.push(Op::Broadcast(z, w), t, b.sp)
                    } else {
                        z
                    }
                } else {
                    z
                };
                [nz, z]
            })
            .collect(),
        ReducerKind::Softmax => {
            let one = b.c(1.0);
            vec![msgs[0], one, msgs[1]]
        }
        ReducerKind::Sum | ReducerKind::Mean | ReducerKind::Monoid => msgs.iter().copied().chain(extra).collect(),
    }
}

/// The forward aggregate from the stats state (inside the stats node).
fn aggregate_from_state(k: &Kernel, b: &mut B<'_>, s: &[ValueId]) -> Result<Vec<ValueId>, AdjointError> {
    let msgs = k.message_types();
    Ok(match k.reducer.kind {
        ReducerKind::Sum => s.to_vec(),
        ReducerKind::Mean => {
            let cnt = s[msgs.len()];
            let one = b.c(1.0);
            let n = b.bin(BinOp::Max, cnt, one);
            s[..msgs.len()].iter().map(|&x| b.bin(BinOp::Div, x, n)).collect()
        }
        kind @ (ReducerKind::Max | ReducerKind::Min) => {
            let inf = if kind == ReducerKind::Max { f64::NEG_INFINITY } else { f64::INFINITY };
            (0..msgs.len())
                .map(|p| {
                    let x = s[2 * p];
                    let i = b.c(inf);
                    let zero = b.c(0.0);
                    let empty = b.cmp(CmpOp::Eq, x, i);
                    b.sel(empty, zero, x)
                })
                .collect()
        }
        ReducerKind::Prod => (0..msgs.len())
            .map(|p| {
                let zero = b.c(0.0);
                let has0 = b.cmp(CmpOp::Gt, s[2 * p + 1], zero);
                b.sel(has0, zero, s[2 * p])
            })
            .collect(),
        ReducerKind::Softmax => {
            let zero = b.c(0.0);
            let empty = b.cmp(CmpOp::Eq, s[1], zero);
            let one = b.c(1.0);
            let d = b.sel(empty, one, s[1]);
            let q = b.bin(BinOp::Div, s[2], d);
            vec![b.sel(empty, zero, q)]
        }
        ReducerKind::Monoid => match &k.reducer.finalize {
            Some(f) => b.r.inline(f, s),
            None => s.to_vec(),
        },
    })
}

pub(super) fn zero_of(b: &mut B<'_>, t: Type) -> ValueId {
    b.fill(0.0, t)
}

fn grad_name(role: Role, name: &str) -> String {
    format!("grad.{}.{}", role.name(), name)
}

/// A mean whose stages read the output's cotangent and the inverse degree
/// per edge (see `generate_adjoint`), rather than a row-scaled cotangent
/// from the stats stage.
fn mean_reads_cotangent(k: &Kernel) -> bool {
    k.reducer.kind == ReducerKind::Mean && k.node.is_none() && k.message_types().iter().all(|t| *t == Type::Scalar)
}

/// `c` for a stats output named `abar{c}` (the aggregate's cotangent).
fn abar_index(name: &str) -> Option<usize> {
    name.strip_prefix("abar").and_then(|c| c.parse::<usize>().ok())
}

/// Later stages that read the stats stage's `abar{c}` read the cotangent
/// of output `c` instead: without a `node` function they are equal.
fn read_cotangent_for_abar(k: &Kernel, stages: &mut [Stage]) {
    for st in stages.iter_mut().skip(1) {
        for bnd in &mut st.bindings {
            if let Binding::Stage { stage: 0, output } = bnd {
                if let Some(o) = abar_index(output).and_then(|c| k.outputs.get(c)) {
                    *bnd = Binding::Cotangent(o.name.clone());
                }
            }
        }
        // (Scattered bindings are built after this runs: see `scatter`.)
    }
}

/// A rewrite of the adjoint plan: it changes the stages when it applies
/// and returns the note that says what it did.
type PlanRewrite = fn(&Kernel, &mut Vec<Stage>, &mut Option<SourceSides>) -> Result<Option<String>, AdjointError>;

/// The plan rewrites, in the order they run; every stage kernel is
/// verified after each.
const PLAN_REWRITES: [(&str, PlanRewrite); 4] = [
    ("read-cotangent-directly", read_cotangent_directly),
    ("drop-copied-cotangents", drop_copied_cotangents),
    ("recompute-row-statistics", recompute_row_statistics),
    ("scatter-winning-cotangents", scatter_winning_cotangents),
];

/// A sum without `node`: the aggregate's cotangent is the output's, so
/// stages read the cotangent directly, and a stats stage left with nothing
/// else to do is dropped.
#[allow(clippy::ptr_arg)] // every rewrite has `PlanRewrite`'s signature; some remove stages
fn read_cotangent_directly(
    k: &Kernel,
    stages: &mut Vec<Stage>,
    _: &mut Option<SourceSides>,
) -> Result<Option<String>, AdjointError> {
    if !((k.reducer.kind == ReducerKind::Sum && k.node.is_none()) || mean_reads_cotangent(k)) {
        return Ok(None);
    }
    read_cotangent_for_abar(k, stages);
    let still_bound = stages.iter().skip(1).any(|st| st.bindings.iter().any(|b| matches!(b, Binding::Stage { stage: 0, .. })));
    let stats_needed = still_bound || stages[0].kernel.outputs.iter().any(|o| o.name.starts_with("grad."));
    if stats_needed {
        return Ok(None);
    }
    stages.remove(0);
    for st in stages.iter_mut() {
        for bnd in &mut st.bindings {
            if let Binding::Stage { stage, .. } = bnd {
                *stage -= 1;
            }
        }
    }
    Ok(Some("sum/mean without `node`: each message's cotangent is the output's (over the row's degree for mean), read directly; no row-statistics stage".into()))
}

/// Max, min, prod or softmax without `node`: likewise the stats stage's
/// `abar` outputs are copies of the cotangent; later stages read the
/// cotangent, and the stats stage no longer writes the copies (a row of
/// the output's width per node, written and read back).
#[allow(clippy::ptr_arg)] // every rewrite has `PlanRewrite`'s signature; some remove stages
fn drop_copied_cotangents(
    k: &Kernel,
    stages: &mut Vec<Stage>,
    _: &mut Option<SourceSides>,
) -> Result<Option<String>, AdjointError> {
    if !(matches!(k.reducer.kind, ReducerKind::Max | ReducerKind::Min | ReducerKind::Prod | ReducerKind::Softmax)
        && k.node.is_none()
        && stages.len() > 1)
    {
        return Ok(None);
    }
    read_cotangent_for_abar(k, stages);
    let bound: Vec<String> = stages
        .iter()
        .skip(1)
        .flat_map(|st| st.bindings.iter())
        .filter_map(|b| match b {
            Binding::Stage { stage: 0, output } => Some(output.clone()),
            _ => None,
        })
        .collect();
    let stats = &mut stages[0].kernel;
    let keep: Vec<bool> = stats.outputs.iter().map(|o| abar_index(&o.name).is_none() || bound.contains(&o.name)).collect();
    if !keep.iter().any(|k| !k) {
        return Ok(None);
    }
    if let Some(node) = &mut stats.node {
        let mut kept = keep.iter();
        node.outputs.retain(|_| kept.next().copied().unwrap_or(true));
    }
    let mut kept = keep.iter();
    stats.outputs.retain(|_| kept.next().copied().unwrap_or(true));
    Ok(Some(
        "no `node`: the aggregate's cotangent is the output's; later stages read it directly, the stats stage does not copy it"
            .into(),
    ))
}

/// Scalar row statistics that are short expressions of the row's fields:
/// the source stage recomputes them per edge (same bits), and the stats
/// pass and its buffer go.
#[allow(clippy::ptr_arg)] // every rewrite has `PlanRewrite`'s signature; some remove stages
fn recompute_row_statistics(
    _: &Kernel,
    stages: &mut Vec<Stage>,
    _: &mut Option<SourceSides>,
) -> Result<Option<String>, AdjointError> {
    let is_stats = stages.first().is_some_and(|s| s.kind == StageKind::RowStatistics);
    Ok(super::inline_stats::recompute_row_statistics(stages, is_stats).then(|| {
        "the row statistics are short scalar expressions of each row's fields: the source stage recomputes them per edge (same operations, same bits) instead of a stats pass writing them".into()
    }))
}

/// Max/min whose messages depend on the source alone: the source side
/// scatters each lane's winning cotangent to its source node and
/// differentiates the edge function once per node.
#[allow(clippy::ptr_arg)] // every rewrite has `PlanRewrite`'s signature; some remove stages
fn scatter_winning_cotangents(
    k: &Kernel,
    stages: &mut Vec<Stage>,
    sides: &mut Option<SourceSides>,
) -> Result<Option<String>, AdjointError> {
    *sides = super::scatter::scatter_winning_cotangents(k, stages)?;
    Ok(sides.is_some().then(|| super::scatter::NOTE.into()))
}

/// Build the adjoint stages of a captured kernel.
pub fn generate_adjoint(k: &Kernel) -> Result<Adjoint, AdjointError> {
    let sp = k.span;
    let nf = k.fields.len();
    let msg_types = k.message_types();
    let nm = msg_types.len();
    let agg_types = k.aggregate_types();
    let uses = |role: Role| k.fields.iter().any(|f| f.role == role);
    let params: Vec<(usize, &FieldDecl)> = k.fields.iter().enumerate().filter(|(_, f)| f.role == Role::Param).collect();
    let dsts: Vec<(usize, &FieldDecl)> = k.fields.iter().enumerate().filter(|(_, f)| f.role == Role::Dst).collect();
    let srcs: Vec<(usize, &FieldDecl)> = k.fields.iter().enumerate().filter(|(_, f)| f.role == Role::Src).collect();
    let edges: Vec<(usize, &FieldDecl)> = k.fields.iter().enumerate().filter(|(_, f)| f.role == Role::Edge).collect();
    let mut stages: Vec<Stage> = Vec::new();
    let mut notes = Vec::new();
    let is_monoid = k.reducer.kind == ReducerKind::Monoid;
    let mono_state = state_types_for(k);

    // ---- 1. stats ------------------------------------------------------
    let mut fs = forward_fields(k, |r| r);
    let cot: Vec<usize> = k
        .outputs
        .iter()
        .map(|o| fs.add(&format!("cot.{}", o.name), Role::Dst, o.ty, DType::F32, Binding::Cotangent(o.name.clone())))
        .collect();
    let sr = stats_reducer(k);
    // Row statistics by kind.
    let mut stats: Vec<RowStat> = Vec::new();
    for (c, t) in agg_types.iter().enumerate() {
        if !is_monoid {
            stats.push(RowStat { name: format!("abar{c}"), ty: *t });
        }
    }
    match k.reducer.kind {
        ReducerKind::Max | ReducerKind::Min => {
            for (c, t) in msg_types.iter().enumerate() {
                stats.push(RowStat { name: format!("winner{c}"), ty: *t });
            }
        }
        ReducerKind::Prod => {
            for (c, t) in msg_types.iter().enumerate() {
                stats.push(RowStat { name: format!("nonzero_product{c}"), ty: *t });
                stats.push(RowStat { name: format!("zero_count{c}"), ty: *t });
            }
        }
        ReducerKind::Softmax => {
            stats.push(RowStat { name: "max".into(), ty: Type::Scalar });
            stats.push(RowStat { name: "denominator".into(), ty: Type::Scalar });
            stats.push(RowStat { name: "abar_dot_out".into(), ty: Type::Scalar });
        }
        ReducerKind::Monoid => {
            for (c, t) in mono_state.iter().enumerate() {
                stats.push(RowStat { name: format!("sbar{c}"), ty: *t });
            }
        }
        // The aggregate's cotangent (`abar`) is all a sum or a mean needs.
        ReducerKind::Sum | ReducerKind::Mean => {}
    }
    let mut outputs: Vec<OutputDecl> =
        stats.iter().map(|s| OutputDecl { name: s.name.clone(), ty: s.ty, role: Role::Dst }).collect();
    for (_, f) in &dsts {
        outputs.push(OutputDecl { name: grad_name(Role::Dst, &f.name), ty: f.ty, role: Role::Dst });
    }
    if is_monoid {
        for (c, t) in mono_state.iter().enumerate() {
            outputs.push(OutputDecl { name: format!("prefix{c}"), ty: *t, role: Role::Edge });
        }
    }
    for (_, f) in &params {
        outputs.push(OutputDecl { name: grad_name(Role::Param, &f.name), ty: f.ty, role: Role::Param });
    }
    let fmap_id: Vec<usize> = (0..nf).collect();
    let (mut stats_k, stats_b) = empty_kernel(k, format!("{}.vjp.stats", k.name), fs, sr.reducer, outputs);
    {
        let mut edge = Region::new(vec![]);
        let msgs = inline_mapped(&mut edge, &k.edge, &fmap_id, &stats_k.fields, |_| None);
        let msgs = msgs[..nm].to_vec();
        let mut b = B { r: &mut edge, sp };
        let extra = (sr.edge_extra)(&mut b, &msgs, k);
        let mut outs = stats_messages(k, &mut b, &msgs, extra);
        if is_monoid {
            for (c, t) in mono_state.iter().enumerate() {
                outs.push(b.r.push(Op::Scan(c as u32), *t, sp));
            }
        }
        for _ in &params {
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
        let agg = aggregate_from_state(k, &mut b, &s)?;
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
        let mut outs: Vec<ValueId> = Vec::new();
        match k.reducer.kind {
            ReducerKind::Mean if k.node.is_none() => {
                // No `node`: `a · (1 / max(n, 1))`, the product the per-edge
                // form computes with `Binding::InvDegree`, so a vector mean's
                // row-scaled cotangent has that form's bits (up to 2^24
                // edges in a row in f32, where `n` here is the forward's
                // rounded degree and `InvDegree` the exact one's reciprocal).
                let one = b.c(1.0);
                let n = b.bin(BinOp::Max, s[nm], one);
                let inv = b.bin(BinOp::Div, one, n);
                for &a in &abar {
                    outs.push(b.bin(BinOp::Mul, a, inv));
                }
            }
            ReducerKind::Mean => {
                let one = b.c(1.0);
                let n = b.bin(BinOp::Max, s[nm], one);
                for &a in &abar {
                    outs.push(b.bin(BinOp::Div, a, n));
                }
            }
            ReducerKind::Monoid => {}
            ReducerKind::Sum | ReducerKind::Max | ReducerKind::Min | ReducerKind::Prod | ReducerKind::Softmax => {
                outs.extend(abar.iter().copied())
            }
        }
        match k.reducer.kind {
            ReducerKind::Max | ReducerKind::Min => {
                for p in 0..nm {
                    outs.push(s[2 * p + 1]);
                }
            }
            ReducerKind::Prod => {
                for p in 0..nm {
                    outs.push(s[2 * p]);
                    outs.push(s[2 * p + 1]);
                }
            }
            ReducerKind::Softmax => {
                outs.push(s[0]);
                outs.push(s[1]);
                let c = b.dot_or_mul(abar[0], agg[0]);
                outs.push(c);
            }
            ReducerKind::Monoid => {
                // Through `finalize`: the state's cotangent.
                match &k.reducer.finalize {
                    Some(f) => {
                        let seeds: Vec<Option<ValueId>> = abar.iter().map(|a| Some(*a)).collect();
                        let fv = vjp_region(
                            f,
                            b.r,
                            |op| match op {
                                Op::Input(i) => s.get(*i as usize).copied(),
                                _ => None,
                            },
                            &seeds,
                        )?;
                        let mut b = B { r: &mut node, sp };
                        for (c, t) in mono_state.iter().enumerate() {
                            let g = fv.leaves.iter().find(|(o, _)| *o == Op::Input(c as u32)).map(|(_, x)| *x);
                            outs.push(g.unwrap_or_else(|| zero_of(&mut b, *t)));
                        }
                    }
                    None => outs.extend(abar.iter().copied()),
                }
            }
            // A sum's or a mean's row statistic is `abar` alone (above).
            ReducerKind::Sum | ReducerKind::Mean => {}
        }
        let mut b = B { r: &mut node, sp };
        for (f, decl) in &dsts {
            let g = leaf(Op::Field(FieldId(*f as u32)));
            outs.push(g.unwrap_or_else(|| zero_of(&mut b, decl.ty)));
        }
        for (f, _) in &params {
            let g = leaf(Op::Field(FieldId(*f as u32)));
            outs.push(g.unwrap_or_else(|| b.c(0.0)));
        }
        node.outputs = outs;
        stats_k.node = Some(node);
    }
    stages.push(Stage {
        kind: StageKind::RowStatistics,
        purpose: "row statistics and node adjoint".into(),
        graph: GraphUse::Forward,
        kernel: stats_k,
        bindings: stats_b,
    });
    let stats_stage = 0usize;

    // ---- 2. suffix (monoids) -------------------------------------------
    let mut suffix_stage = None;
    if is_monoid {
        let fs = forward_fields(k, |r| r);
        let (Some(id), Some(comb)) = (&k.reducer.identity, &k.reducer.combine) else {
            return Err(AdjointError::Unsupported { op: "a monoid without identity/combine", span: sp });
        };
        let n = mono_state.len();
        // The opposite monoid: combine'(a, b) = combine(b, a).
        let mut opp = Region::new(mono_state.iter().chain(mono_state.iter()).copied().collect());
        let ins: Vec<ValueId> = (0..2 * n).map(|i| opp.push(Op::Input(i as u32), mono_state[i % n], sp)).collect();
        let swapped: Vec<ValueId> = ins[n..].iter().chain(&ins[..n]).copied().collect();
        let outs = opp.inline(comb, &swapped);
        opp.outputs = outs;
        let red = monoid(k.reducer.span, id.clone(), opp, true, k.reducer.declared.commutative);
        let outputs: Vec<OutputDecl> = mono_state
            .iter()
            .enumerate()
            .map(|(c, t)| OutputDecl { name: format!("suffix{c}"), ty: *t, role: Role::Edge })
            .collect();
        let (mut sk, sb) = empty_kernel(k, format!("{}.vjp.suffix", k.name), fs, red, outputs);
        let mut edge = Region::new(vec![]);
        let msgs = inline_mapped(&mut edge, &k.edge, &fmap_id, &sk.fields, |_| None);
        let mut outs = msgs[..nm].to_vec();
        for (c, t) in mono_state.iter().enumerate() {
            outs.push(edge.push(Op::Scan(c as u32), *t, sp));
        }
        edge.outputs = outs;
        sk.edge = edge;
        let mut node = Region::new(mono_state.clone());
        node.outputs = vec![];
        sk.node = Some(node);
        stages.push(Stage {
            kind: StageKind::MonoidSuffixes,
            purpose: "monoid suffixes (row-reversed graph)".into(),
            graph: GraphUse::RowReversed,
            kernel: sk,
            bindings: sb,
        });
        suffix_stage = Some(stages.len() - 1);
    }

    // ---- 3 and 4: message cotangents, then the edge function's adjoint ----
    // `side` = Forward: edge side (dst, edge, param gradients);
    // `side` = Transposed: source side (src gradients).
    for side in [GraphUse::Forward, GraphUse::Transposed] {
        let wanted: Vec<(usize, &FieldDecl)> = match side {
            GraphUse::Forward => dsts.iter().chain(&edges).chain(&params).copied().collect(),
            _ => srcs.clone(),
        };
        let reads_any = wanted.iter().any(|(f, _)| k.edge.nodes.iter().any(|n| n.op == Op::Field(FieldId(*f as u32))));
        if !reads_any {
            continue;
        }
        let swap = |r: Role| match (side, r) {
            (GraphUse::Transposed, Role::Src) => Role::Dst,
            (GraphUse::Transposed, Role::Dst) => Role::Src,
            _ => r,
        };
        let mut fs = forward_fields(k, swap);
        let stat_role = swap(Role::Dst);
        // A mean without `node` and with scalar messages: each message's
        // cotangent is the output's cotangent times the row's inverse
        // degree, read directly (no stats stage). With vector messages the
        // stats stage scales each row once instead: per edge, `w · x` needs
        // a register for the weight and a random read of it, which halves
        // the accumulators a pass keeps (two passes over a 64-wide row),
        // where a plain sum keeps all of them (one pass).
        let mean_direct = mean_reads_cotangent(k);
        let stat_fields: Vec<usize> = if mean_direct {
            k.outputs
                .iter()
                .map(|o| fs.add(&format!("cot.{}", o.name), stat_role, o.ty, DType::F32, Binding::Cotangent(o.name.clone())))
                .collect()
        } else {
            stages[stats_stage]
                .kernel
                .outputs
                .iter()
                .filter(|o| o.role == Role::Dst && !o.name.starts_with("grad."))
                .map(|o| {
                    fs.add(&o.name, stat_role, o.ty, DType::F32, Binding::Stage { stage: stats_stage, output: o.name.clone() })
                })
                .collect()
        };
        let inv_deg_f = mean_direct.then(|| fs.add("inv_degree", stat_role, Type::Scalar, DType::F32, Binding::InvDegree));
        let mut prefix_f = Vec::new();
        let mut suffix_f = Vec::new();
        if is_monoid {
            for (c, t) in mono_state.iter().enumerate() {
                prefix_f.push(fs.add(
                    &format!("prefix{c}"),
                    Role::Edge,
                    *t,
                    DType::F32,
                    Binding::Stage { stage: stats_stage, output: format!("prefix{c}") },
                ));
            }
            if let Some(ss) = suffix_stage {
                for (c, t) in mono_state.iter().enumerate() {
                    suffix_f.push(fs.add(
                        &format!("suffix{c}"),
                        Role::Edge,
                        *t,
                        DType::F32,
                        Binding::Stage { stage: ss, output: format!("suffix{c}") },
                    ));
                }
            }
        }
        let rank_f = (side == GraphUse::Transposed && matches!(k.reducer.kind, ReducerKind::Max | ReducerKind::Min))
            .then(|| fs.add("rank", Role::Edge, Type::Scalar, DType::F32, Binding::EdgeRank));
        // Outputs.
        let mut outputs = Vec::new();
        let msg_out: Vec<(usize, &FieldDecl)> = match side {
            GraphUse::Forward => dsts.clone(),
            _ => srcs.clone(),
        };
        for (_, f) in &msg_out {
            outputs.push(OutputDecl { name: grad_name(f.role, &f.name), ty: f.ty, role: Role::Dst });
        }
        if side == GraphUse::Forward {
            for (_, f) in &edges {
                outputs.push(OutputDecl { name: grad_name(Role::Edge, &f.name), ty: f.ty, role: Role::Edge });
            }
            for (_, f) in &params {
                outputs.push(OutputDecl { name: grad_name(Role::Param, &f.name), ty: f.ty, role: Role::Param });
            }
        }
        let (mut ak, ab) = empty_kernel(
            k,
            format!("{}.vjp.{}", k.name, if side == GraphUse::Forward { "edge" } else { "src" }),
            fs,
            builtin(ReducerKind::Sum, k.reducer.span),
            outputs,
        );
        let fields = ak.fields.clone();
        let mut edge = Region::new(vec![]);
        // The forward message, recomputed.
        let m_all = inline_mapped(&mut edge, &k.edge, &fmap_id, &fields, |_| None);
        let m = m_all[..nm].to_vec();
        let mut b = B { r: &mut edge, sp };
        let st: Vec<ValueId> = stat_fields.iter().map(|&f| b.field(f, fields[f].ty)).collect();
        let rank = match rank_f {
            Some(f) => b.field(f, Type::Scalar),
            None => b.r.push(Op::Rank, Type::Scalar, sp),
        };
        // The message cotangent.
        let mbar: Vec<ValueId> = match k.reducer.kind {
            ReducerKind::Mean if inv_deg_f.is_some() => {
                let inv = b.field(inv_deg_f.unwrap_or(0), Type::Scalar);
                (0..nm).map(|c| b.bin(BinOp::Mul, st[c], inv)).collect()
            }
            ReducerKind::Sum | ReducerKind::Mean => st[..nm].to_vec(),
            ReducerKind::Max | ReducerKind::Min => (0..nm)
                .map(|c| {
                    let win = b.cmp(CmpOp::Eq, rank, st[nm + c]);
                    let zero = b.c(0.0);
                    b.sel(win, st[c], zero)
                })
                .collect(),
            ReducerKind::Prod => (0..nm)
                .map(|c| {
                    let (abar, p, z) = (st[c], st[nm + 2 * c], st[nm + 2 * c + 1]);
                    let zero = b.c(0.0);
                    let one = b.c(1.0);
                    let z0 = b.cmp(CmpOp::Eq, z, zero);
                    let z1 = b.cmp(CmpOp::Eq, z, one);
                    let m0 = b.cmp(CmpOp::Eq, m[c], zero);
                    let only = b.bin(BinOp::And, z1, m0);
                    let safe_m = b.sel(m0, one, m[c]);
                    let excl = b.bin(BinOp::Div, p, safe_m);
                    let inner = b.sel(only, p, zero);
                    let factor = b.sel(z0, excl, inner);
                    b.bin(BinOp::Mul, abar, factor)
                })
                .collect(),
            ReducerKind::Softmax => {
                let (abar, mx, den, c) = (st[0], st[1], st[2], st[3]);
                let d = b.bin(BinOp::Sub, m[0], mx);
                let e = b.un(UnOp::Exp, d);
                let p = b.bin(BinOp::Div, e, den);
                let av = b.dot_or_mul(abar, m[1]);
                let diff = b.bin(BinOp::Sub, av, c);
                let sbar = b.bin(BinOp::Mul, p, diff);
                let vbar = b.bin(BinOp::Mul, p, abar);
                vec![sbar, vbar]
            }
            ReducerKind::Monoid => {
                let Some(comb) = &k.reducer.combine else {
                    return Err(AdjointError::Unsupported { op: "a monoid without combine", span: sp });
                };
                let n = mono_state.len();
                let pre: Vec<ValueId> = prefix_f.iter().map(|&f| b.field(f, fields[f].ty)).collect();
                let suf: Vec<ValueId> = suffix_f.iter().map(|&f| b.field(f, fields[f].ty)).collect();
                // f(m) = combine(combine(prefix, m), suffix), seeded with the state cotangent.
                let mut whole = Region::new(mono_state.iter().cycle().take(3 * n).copied().collect());
                let ins: Vec<ValueId> = (0..3 * n).map(|i| whole.push(Op::Input(i as u32), mono_state[i % n], sp)).collect();
                let t: Vec<ValueId> = ins[..2 * n].to_vec();
                let mid = whole.inline(comb, &t);
                let last: Vec<ValueId> = mid.iter().chain(&ins[2 * n..]).copied().collect();
                let outs = whole.inline(comb, &last);
                whole.outputs = outs;
                let seeds: Vec<Option<ValueId>> = st[..n].iter().map(|x| Some(*x)).collect();
                let args: Vec<ValueId> = pre.iter().chain(&m).chain(&suf).copied().collect();
                let v = vjp_region(
                    &whole,
                    b.r,
                    |op| match op {
                        Op::Input(i) => args.get(*i as usize).copied(),
                        _ => None,
                    },
                    &seeds,
                )?;
                let mut b2 = B { r: &mut edge, sp };
                (0..n)
                    .map(|c| {
                        v.leaves
                            .iter()
                            .find(|(o, _)| *o == Op::Input((n + c) as u32))
                            .map(|(_, x)| *x)
                            .unwrap_or_else(|| zero_of(&mut b2, mono_state[c]))
                    })
                    .collect()
            }
        };
        // The edge function's adjoint, seeded with the message cotangent.
        let mut seeds: Vec<Option<ValueId>> = mbar.iter().map(|x| Some(*x)).collect();
        seeds.resize(k.edge.outputs.len(), None);
        // Field ids are the forward's (its fields come first), so the edge
        // region is copied as it is.
        let v = vjp_region(&k.edge, &mut edge, |_| None, &seeds)?;
        let leaf = |f: usize| v.leaves.iter().find(|(o, _)| *o == Op::Field(FieldId(f as u32))).map(|(_, x)| *x);
        let mut b = B { r: &mut edge, sp };
        let mut outs = Vec::new();
        for (f, decl) in &msg_out {
            outs.push(leaf(*f).unwrap_or_else(|| zero_of(&mut b, decl.ty)));
        }
        if outs.is_empty() {
            outs.push(b.c(0.0));
        }
        let n_msgs = outs.len();
        if side == GraphUse::Forward {
            for (f, _) in edges.iter().chain(&params) {
                // Outputs arrive zeroed: an unreached field contributes nothing.
                outs.push(leaf(*f).unwrap_or_else(|| b.c(0.0)));
            }
        }
        edge.outputs = outs;
        let agg_t: Vec<Type> = edge.output_types()[..n_msgs].to_vec();
        ak.edge = edge;
        let mut node = Region::new(agg_t.clone());
        let ins: Vec<ValueId> = agg_t.iter().enumerate().map(|(i, t)| node.push(Op::Input(i as u32), *t, sp)).collect();
        let mut outs: Vec<ValueId> = if msg_out.is_empty() { vec![] } else { ins };
        if side == GraphUse::Forward {
            let mut b = B { r: &mut node, sp };
            for _ in &params {
                outs.push(b.c(0.0));
            }
        }
        node.outputs = outs;
        ak.node = Some(node);
        let (kind, purpose) = if side == GraphUse::Forward {
            (StageKind::EdgeSide, "edge side: destination, edge and parameter gradients")
        } else {
            (StageKind::SourceSide, "source side: source gradients over the transposed graph")
        };
        stages.push(Stage { kind, purpose: purpose.into(), graph: side, kernel: ak, bindings: ab });
    }

    // ---- the plan rewrites, in order, each verified after ---------------
    let mut source_sides = None;
    for (name, rewrite) in PLAN_REWRITES {
        if let Some(note) = rewrite(k, &mut stages, &mut source_sides)? {
            notes.push(note);
        }
        for st in &stages {
            crate::ir::verify(&st.kernel).map_err(|source| AdjointError::Rewrite { rewrite: name, source: Box::new(source) })?;
        }
    }

    // ---- gradients ------------------------------------------------------
    let mut gradients = Vec::new();
    for f in &k.fields {
        let name = grad_name(f.role, &f.name);
        let parts: Vec<(usize, String)> = stages
            .iter()
            .enumerate()
            .filter(|(_, s)| s.kernel.outputs.iter().any(|o| o.name == name))
            .map(|(i, _)| (i, name.clone()))
            .collect();
        gradients.push(GradientPlan { role: f.role, name: f.name.clone(), parts });
    }
    if !uses(Role::Src) {
        notes.push("no source fields: no transposed-graph stage".into());
    }
    notes.push(match k.reducer.kind {
        ReducerKind::Sum => "sum: each message's cotangent is the row's aggregate cotangent (linear)".into(),
        ReducerKind::Mean => "mean: the aggregate cotangent divided by the row's degree (empty rows contribute nothing)".into(),
        ReducerKind::Max | ReducerKind::Min => "max/min: the stats stage records, per feature, the rank of the first winning edge in CSR order; only that edge receives the cotangent".into(),
        ReducerKind::Prod => "prod: the stats stage keeps the product of non-zero messages and the zero count, so zero messages differentiate exactly".into(),
        ReducerKind::Softmax => "softmax: the Jacobian uses the per-row max and denominator, recomputed by the stats stage (schedule choice: recompute, not saved from the forward)".into(),
        ReducerKind::Monoid => "monoid: the row's fold is replayed as prefix (stats stage) and suffix (row-reversed graph) scans; each message's cotangent is the VJP of combine(combine(prefix, m), suffix)".into(),
    });
    notes.push(format!(
        "{} stage(s): {}",
        stages.len(),
        stages.iter().map(|s| format!("{} [{:?}]", s.kernel.name, s.graph)).collect::<Vec<_>>().join(", ")
    ));
    Ok(Adjoint { stages, gradients, notes, source_sides })
}
