//! The adjoint rule of every row reducer.
//!
//! A reducer's adjoint is spread over the plan's stages: the stats stage
//! folds an augmented state that keeps what the adjoint needs and writes it
//! per row, the edge and source stages turn those row statistics into each
//! message's cotangent, a user monoid replays its fold as prefix and suffix
//! scans, and the plan rewrites ask which shortcuts a reducer allows. All of
//! that is said here, per reducer, and [`reducer_rule`] picks a reducer's
//! rule in one exhaustive `match` over [`ReducerKind`] without a catch-all
//! arm: a new reducer does not compile until its rule says what each stage
//! needs (as `adjoint/operation_rules.rs` does for operations).
//!
//! The order in which a rule pushes its operations is part of the stage
//! kernels' printed IR and of the golden files: a change that only
//! reorders them is still a change to the plan.

use super::builder::{builtin, monoid, zero_of, B};
use super::operation_rules::{vjp_region, AdjointError};
use crate::ir::{BinOp, CmpOp, FieldDecl, Kernel, Op, Reducer, ReducerKind, Region, Span, Type, UnOp, ValueId};

/// What a stats stage writes per row for the reducer's adjoint.
#[derive(Clone, Debug)]
pub(super) struct RowStat {
    pub(super) name: String,
    pub(super) ty: Type,
}

/// What the stats node holds when it writes a row's statistics.
pub(super) struct Row<'a> {
    /// The types of the folded state (see [`ReducerRule::state_types`]).
    pub(super) state_types: &'a [Type],
    /// The folded state.
    pub(super) state: &'a [ValueId],
    /// The forward aggregate, rebuilt from the state.
    pub(super) aggregate: &'a [ValueId],
    /// The aggregate's cotangent, through `node`'s adjoint.
    pub(super) abar: &'a [ValueId],
}

/// What an edge of the edge or source stage holds when it forms its
/// message's cotangent.
pub(super) struct Edge<'a> {
    /// The types of the stats stage's folded state.
    pub(super) state_types: &'a [Type],
    /// The forward messages, recomputed.
    pub(super) messages: &'a [ValueId],
    /// The row statistics the stage reads (from the stats stage, or the
    /// output's cotangents where the rule reads them directly).
    pub(super) statistics: &'a [ValueId],
    /// The edge's rank within its forward row.
    pub(super) rank: ValueId,
    /// The stage's `1 / max(degree, 1)` field, where it reads one.
    pub(super) inv_degree: Option<usize>,
    /// The stage's fields holding a replayed fold's exclusive prefix and
    /// suffix of the edge.
    pub(super) prefix: &'a [usize],
    pub(super) suffix: &'a [usize],
    /// The stage's fields.
    pub(super) fields: &'a [FieldDecl],
}

/// What a reducer's adjoint asks of the plan beyond the regions its rule
/// builds: which stages and fields it needs, which plan rewrites it
/// allows, and the plan's note on it.
pub(super) struct Needs {
    /// The row's fold is replayed as scans: an exclusive prefix from the
    /// stats stage and an exclusive suffix from a stage over the
    /// row-reversed graph, read by every edge.
    pub(super) replays_fold: bool,
    /// Each lane's cotangent goes to the one edge that wins it, named by
    /// its rank in the row: the source stage, over the transposed graph,
    /// reads the rank as a field, and the scatter of winners applies.
    pub(super) gives_lanes_to_winners: bool,
    /// The edge and source stages read the output's cotangent and the row's
    /// inverse degree per edge instead of a row-scaled cotangent from the
    /// stats stage.
    pub(super) reads_inverse_degree: bool,
    /// The aggregate's cotangent is the output's and later stages read it
    /// directly, the stats stage dropped where nothing else needs it
    /// (read-cotangent-directly).
    pub(super) reads_cotangent_directly: bool,
    /// The stats stage's `abar` outputs are copies of the output's
    /// cotangent written beside other statistics (drop-copied-cotangents).
    pub(super) copies_cotangent: bool,
    /// The plan's note on the reducer's adjoint.
    pub(super) note: &'static str,
}

impl Needs {
    /// A reducer whose adjoint needs only the row statistics the stats
    /// stage recomputes (prod, softmax): no replayed fold, no winners, no
    /// inverse degree; its `abar` outputs are copies of the cotangent when
    /// there is no `node`.
    fn row_statistics(k: &Kernel, note: &'static str) -> Needs {
        Needs {
            replays_fold: false,
            gives_lanes_to_winners: false,
            reads_inverse_degree: false,
            reads_cotangent_directly: false,
            copies_cotangent: k.node.is_none(),
            note,
        }
    }
}

/// What a reducer's adjoint needs from each stage. No method has a default
/// (and [`Needs`] none), so a reducer's rule says all of it.
pub(super) trait ReducerRule {
    /// The state the stats stage folds per row.
    fn state_types(&self, k: &Kernel) -> Vec<Type>;
    /// The stats stage's reducer over that state: the forward's, augmented
    /// with what the adjoint reads back.
    fn stats_reducer(&self, k: &Kernel, state_types: &[Type]) -> Reducer;
    /// The stats stage's messages, from the forward messages.
    fn stats_messages(&self, b: &mut B<'_>, messages: &[ValueId]) -> Vec<ValueId>;
    /// The forward aggregate, from the folded state (in the stats node).
    fn aggregate(&self, k: &Kernel, b: &mut B<'_>, state: &[ValueId]) -> Result<Vec<ValueId>, AdjointError>;
    /// The row statistics the stats stage writes, in order.
    fn row_statistics(&self, k: &Kernel, state_types: &[Type]) -> Vec<RowStat>;
    /// Their values, in the same order (in the stats node).
    fn row_statistic_values(&self, k: &Kernel, b: &mut B<'_>, row: &Row<'_>) -> Result<Vec<ValueId>, AdjointError>;
    /// Each message's cotangent, from its row's statistics (per edge, in
    /// the edge and source stages).
    fn message_cotangent(&self, k: &Kernel, b: &mut B<'_>, edge: &Edge<'_>) -> Result<Vec<ValueId>, AdjointError>;
    /// What the reducer's adjoint asks of the plan beyond these regions.
    fn needs(&self, k: &Kernel) -> Needs;
    /// A name per component of the folded state, as a forward that keeps
    /// residuals writes them (`adjoint/residuals.rs`); or why this
    /// reducer's backward recomputes its statistics instead.
    fn residual_names(&self, k: &Kernel, state_types: &[Type]) -> Result<Vec<String>, &'static str>;
    /// The forward aggregate from the folded state, with the plain
    /// forward's own arithmetic (`lower-csr-to-gather-segment`'s finish,
    /// its empty-row test on the row's edge count `empty`), so a forward
    /// that keeps residuals writes the plain forward's bits. Asked only of
    /// a reducer with [`ReducerRule::residual_names`].
    ///
    /// A reducer that keeps no residuals is refused (the default).
    fn forward_aggregate(
        &self,
        k: &Kernel,
        _b: &mut B<'_>,
        _state: &[ValueId],
        _empty: ValueId,
    ) -> Result<Vec<ValueId>, AdjointError> {
        Err(keeps_no_residuals(k))
    }
}

/// The error of [`ReducerRule::forward_aggregate`] for a reducer that keeps
/// no residuals.
fn keeps_no_residuals(k: &Kernel) -> AdjointError {
    AdjointError::Unsupported { op: "a saved-residual forward of this reducer", span: k.reducer.span }
}

/// The adjoint rule of a reducer.
pub(super) fn reducer_rule(kind: ReducerKind) -> &'static dyn ReducerRule {
    match kind {
        ReducerKind::Sum => &Sum,
        ReducerKind::Mean => &Mean,
        ReducerKind::Max => &Extremum { max: true },
        ReducerKind::Min => &Extremum { max: false },
        ReducerKind::Prod => &Prod,
        ReducerKind::Softmax => &Softmax,
        ReducerKind::Monoid => &Monoid,
    }
}

/// Builds a combine region's outputs from the builder and the two states.
type CombineBody<'a> = dyn Fn(&mut B<'_>, &[ValueId], &[ValueId]) -> Vec<ValueId> + 'a;

/// `combine(a, b)` over states of types `st`, with a = inputs 0..n and
/// b = inputs n..2n.
fn combine_region(sp: Span, st: &[Type], f: &CombineBody<'_>) -> Region {
    let n = st.len();
    let mut r = Region::new(st.iter().chain(st.iter()).copied().collect());
    let ins: Vec<ValueId> = (0..2 * n).map(|i| r.push(Op::Input(i as u32), st[i % n], sp)).collect();
    let mut b = B { r: &mut r, sp };
    let outs = f(&mut b, &ins[..n], &ins[n..]);
    r.outputs = outs;
    r
}

/// The identity region of a state of types `st`, one constant a component.
fn identity_region(sp: Span, st: &[Type], vals: &[f64]) -> Region {
    let mut r = Region::new(vec![]);
    let mut b = B { r: &mut r, sp };
    let outs: Vec<ValueId> = vals.iter().zip(st).map(|(v, t)| b.fill(*v, *t)).collect();
    r.outputs = outs;
    r
}

/// The aggregate's cotangent, `abar{c}` per aggregate component: the first
/// row statistics of every reducer but a user monoid's.
fn abar_statistics(k: &Kernel) -> Vec<RowStat> {
    k.aggregate_types().iter().enumerate().map(|(c, t)| RowStat { name: format!("abar{c}"), ty: *t }).collect()
}

/// Two state components per message component, of its type.
fn two_per_message(k: &Kernel) -> Vec<Type> {
    k.message_types().iter().flat_map(|t| [*t, *t]).collect()
}

/// `sum`: linear, so each message's cotangent is the row's aggregate
/// cotangent.
struct Sum;

impl ReducerRule for Sum {
    fn state_types(&self, k: &Kernel) -> Vec<Type> {
        k.message_types()
    }
    fn stats_reducer(&self, k: &Kernel, _: &[Type]) -> Reducer {
        builtin(ReducerKind::Sum, k.reducer.span)
    }
    fn stats_messages(&self, _: &mut B<'_>, messages: &[ValueId]) -> Vec<ValueId> {
        messages.to_vec()
    }
    fn aggregate(&self, _: &Kernel, _: &mut B<'_>, state: &[ValueId]) -> Result<Vec<ValueId>, AdjointError> {
        Ok(state.to_vec())
    }
    fn row_statistics(&self, k: &Kernel, _: &[Type]) -> Vec<RowStat> {
        // The aggregate's cotangent (`abar`) is all a sum needs.
        abar_statistics(k)
    }
    fn row_statistic_values(&self, _: &Kernel, _: &mut B<'_>, row: &Row<'_>) -> Result<Vec<ValueId>, AdjointError> {
        Ok(row.abar.to_vec())
    }
    fn message_cotangent(&self, _: &Kernel, _: &mut B<'_>, edge: &Edge<'_>) -> Result<Vec<ValueId>, AdjointError> {
        Ok(edge.statistics[..edge.messages.len()].to_vec())
    }
    fn needs(&self, k: &Kernel) -> Needs {
        Needs {
            replays_fold: false,
            gives_lanes_to_winners: false,
            reads_inverse_degree: false,
            reads_cotangent_directly: k.node.is_none(),
            // Without `node` the stats stage writes nothing but the
            // copies: read-cotangent-directly drops it whole.
            copies_cotangent: false,
            note: "sum: each message's cotangent is the row's aggregate cotangent (linear)",
        }
    }
    fn residual_names(&self, _: &Kernel, _: &[Type]) -> Result<Vec<String>, &'static str> {
        Err("sum: the backward reads no statistic of the forward's fold")
    }
}

/// `mean`: a sum that also counts the row's edges; each message's
/// cotangent is the aggregate's over the row's degree.
struct Mean;

impl ReducerRule for Mean {
    fn state_types(&self, k: &Kernel) -> Vec<Type> {
        k.message_types().into_iter().chain([Type::Scalar]).collect()
    }
    fn stats_reducer(&self, k: &Kernel, _: &[Type]) -> Reducer {
        builtin(ReducerKind::Sum, k.reducer.span)
    }
    fn stats_messages(&self, b: &mut B<'_>, messages: &[ValueId]) -> Vec<ValueId> {
        let one = b.c(1.0);
        messages.iter().copied().chain([one]).collect()
    }
    fn aggregate(&self, k: &Kernel, b: &mut B<'_>, state: &[ValueId]) -> Result<Vec<ValueId>, AdjointError> {
        let nm = k.message_types().len();
        let cnt = state[nm];
        let one = b.c(1.0);
        let n = b.bin(BinOp::Max, cnt, one);
        Ok(state[..nm].iter().map(|&x| b.bin(BinOp::Div, x, n)).collect())
    }
    fn row_statistics(&self, k: &Kernel, _: &[Type]) -> Vec<RowStat> {
        // The aggregate's cotangent (`abar`), row-scaled, is all a mean
        // needs.
        abar_statistics(k)
    }
    fn row_statistic_values(&self, k: &Kernel, b: &mut B<'_>, row: &Row<'_>) -> Result<Vec<ValueId>, AdjointError> {
        let nm = k.message_types().len();
        let one = b.c(1.0);
        let n = b.bin(BinOp::Max, row.state[nm], one);
        Ok(if k.node.is_none() {
            // No `node`: `a · (1 / max(n, 1))`, the product the per-edge
            // form computes with `Binding::InvDegree`, so a vector mean's
            // row-scaled cotangent has that form's bits (up to 2^24
            // edges in a row in f32, where `n` here is the forward's
            // rounded degree and `InvDegree` the exact one's reciprocal).
            let inv = b.bin(BinOp::Div, one, n);
            row.abar.iter().map(|&a| b.bin(BinOp::Mul, a, inv)).collect()
        } else {
            row.abar.iter().map(|&a| b.bin(BinOp::Div, a, n)).collect()
        })
    }
    fn message_cotangent(&self, _: &Kernel, b: &mut B<'_>, edge: &Edge<'_>) -> Result<Vec<ValueId>, AdjointError> {
        let nm = edge.messages.len();
        Ok(match edge.inv_degree {
            Some(f) => {
                let inv = b.field(f, Type::Scalar);
                (0..nm).map(|c| b.bin(BinOp::Mul, edge.statistics[c], inv)).collect()
            }
            None => edge.statistics[..nm].to_vec(),
        })
    }
    fn needs(&self, k: &Kernel) -> Needs {
        // Without `node` and with scalar messages: each message's cotangent
        // is the output's cotangent times the row's inverse degree, read
        // directly (no stats stage). With vector messages the stats stage
        // scales each row once instead: per edge, `w · x` needs a register
        // for the weight and a random read of it, which halves the
        // accumulators a pass keeps (two passes over a 64-wide row), where a
        // plain sum keeps all of them (one pass).
        let per_edge = k.node.is_none() && k.message_types().iter().all(|t| *t == Type::Scalar);
        Needs {
            replays_fold: false,
            gives_lanes_to_winners: false,
            reads_inverse_degree: per_edge,
            reads_cotangent_directly: per_edge,
            // The stats stage writes the cotangent scaled, not copied.
            copies_cotangent: false,
            note: "mean: the aggregate cotangent divided by the row's degree (empty rows contribute nothing)",
        }
    }
    fn residual_names(&self, _: &Kernel, _: &[Type]) -> Result<Vec<String>, &'static str> {
        Err("mean: the backward's only statistic is the row's degree, two row offsets")
    }
}

/// `max` or `min`: each lane's cotangent goes to the first edge in CSR
/// order (the user's order within a row) that attains the lane's extremum;
/// the stats stage folds, per component, the extremum and its winner's
/// rank.
struct Extremum {
    max: bool,
}

impl ReducerRule for Extremum {
    fn state_types(&self, k: &Kernel) -> Vec<Type> {
        two_per_message(k)
    }
    fn stats_reducer(&self, k: &Kernel, st: &[Type]) -> Reducer {
        let sp = k.reducer.span;
        let is_max = self.max;
        let inf = if is_max { f64::NEG_INFINITY } else { f64::INFINITY };
        let idv: Vec<f64> = (0..st.len()).map(|i| if i % 2 == 0 { inf } else { 0.0 }).collect();
        let c = combine_region(sp, st, &|b, a, bb| {
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
        monoid(sp, identity_region(sp, st, &idv), c, true, false)
    }
    fn stats_messages(&self, b: &mut B<'_>, messages: &[ValueId]) -> Vec<ValueId> {
        // Each component becomes (m, rank).
        let rank = b.r.push(Op::Rank, Type::Scalar, b.sp);
        let ranks: Vec<ValueId> = messages
            .iter()
            .map(|&m| match b.ty(m) {
                Type::Vector(w) => b.r.push(Op::Broadcast(rank, w), Type::Vector(w), b.sp),
                _ => rank,
            })
            .collect();
        messages.iter().zip(ranks).flat_map(|(&m, r)| [m, r]).collect()
    }
    fn aggregate(&self, k: &Kernel, b: &mut B<'_>, state: &[ValueId]) -> Result<Vec<ValueId>, AdjointError> {
        let inf = if self.max { f64::NEG_INFINITY } else { f64::INFINITY };
        Ok((0..k.message_types().len())
            .map(|p| {
                let x = state[2 * p];
                let i = b.c(inf);
                let zero = b.c(0.0);
                let empty = b.cmp(CmpOp::Eq, x, i);
                b.sel(empty, zero, x)
            })
            .collect())
    }
    fn row_statistics(&self, k: &Kernel, _: &[Type]) -> Vec<RowStat> {
        let mut stats = abar_statistics(k);
        for (c, t) in k.message_types().iter().enumerate() {
            stats.push(RowStat { name: format!("winner{c}"), ty: *t });
        }
        stats
    }
    fn row_statistic_values(&self, k: &Kernel, _: &mut B<'_>, row: &Row<'_>) -> Result<Vec<ValueId>, AdjointError> {
        let mut outs = row.abar.to_vec();
        for p in 0..k.message_types().len() {
            outs.push(row.state[2 * p + 1]);
        }
        Ok(outs)
    }
    fn message_cotangent(&self, _: &Kernel, b: &mut B<'_>, edge: &Edge<'_>) -> Result<Vec<ValueId>, AdjointError> {
        let (nm, st) = (edge.messages.len(), edge.statistics);
        Ok((0..nm)
            .map(|c| {
                let win = b.cmp(CmpOp::Eq, edge.rank, st[nm + c]);
                let zero = b.c(0.0);
                b.sel(win, st[c], zero)
            })
            .collect())
    }
    fn needs(&self, k: &Kernel) -> Needs {
        Needs {
            replays_fold: false,
            gives_lanes_to_winners: true,
            reads_inverse_degree: false,
            reads_cotangent_directly: false,
            copies_cotangent: k.node.is_none(),
            note: "max/min: the stats stage records, per feature, the rank of the first winning edge in CSR order; only that edge receives the cotangent",
        }
    }
    fn residual_names(&self, k: &Kernel, _: &[Type]) -> Result<Vec<String>, &'static str> {
        let which = if self.max { "max" } else { "min" };
        Ok((0..k.message_types().len()).flat_map(|c| [format!("{which}{c}"), format!("winner{c}")]).collect())
    }
    fn forward_aggregate(
        &self,
        k: &Kernel,
        b: &mut B<'_>,
        state: &[ValueId],
        empty: ValueId,
    ) -> Result<Vec<ValueId>, AdjointError> {
        // The forward's finish: 0 for a row without edges, else the fold
        // (a row of -inf messages keeps its -inf, where the stats stage's
        // `aggregate` would write 0).
        Ok((0..k.message_types().len())
            .map(|p| {
                let zero = b.c(0.0);
                b.sel(empty, zero, state[2 * p])
            })
            .collect())
    }
}

/// `prod`: the stats stage folds the product of the non-zero messages and
/// the zero count, so zero messages differentiate exactly.
struct Prod;

impl ReducerRule for Prod {
    fn state_types(&self, k: &Kernel) -> Vec<Type> {
        two_per_message(k)
    }
    fn stats_reducer(&self, k: &Kernel, st: &[Type]) -> Reducer {
        let sp = k.reducer.span;
        let idv: Vec<f64> = (0..st.len()).map(|i| if i % 2 == 0 { 1.0 } else { 0.0 }).collect();
        let c = combine_region(sp, st, &|b, a, bb| {
            let mut outs = Vec::new();
            for p in 0..a.len() / 2 {
                outs.push(b.bin(BinOp::Mul, a[2 * p], bb[2 * p]));
                outs.push(b.bin(BinOp::Add, a[2 * p + 1], bb[2 * p + 1]));
            }
            outs
        });
        monoid(sp, identity_region(sp, st, &idv), c, true, true)
    }
    fn stats_messages(&self, b: &mut B<'_>, messages: &[ValueId]) -> Vec<ValueId> {
        messages
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
            .collect()
    }
    fn aggregate(&self, k: &Kernel, b: &mut B<'_>, state: &[ValueId]) -> Result<Vec<ValueId>, AdjointError> {
        Ok((0..k.message_types().len())
            .map(|p| {
                let zero = b.c(0.0);
                let has0 = b.cmp(CmpOp::Gt, state[2 * p + 1], zero);
                b.sel(has0, zero, state[2 * p])
            })
            .collect())
    }
    fn row_statistics(&self, k: &Kernel, _: &[Type]) -> Vec<RowStat> {
        let mut stats = abar_statistics(k);
        for (c, t) in k.message_types().iter().enumerate() {
            stats.push(RowStat { name: format!("nonzero_product{c}"), ty: *t });
            stats.push(RowStat { name: format!("zero_count{c}"), ty: *t });
        }
        stats
    }
    fn row_statistic_values(&self, k: &Kernel, _: &mut B<'_>, row: &Row<'_>) -> Result<Vec<ValueId>, AdjointError> {
        let mut outs = row.abar.to_vec();
        for p in 0..k.message_types().len() {
            outs.push(row.state[2 * p]);
            outs.push(row.state[2 * p + 1]);
        }
        Ok(outs)
    }
    fn message_cotangent(&self, _: &Kernel, b: &mut B<'_>, edge: &Edge<'_>) -> Result<Vec<ValueId>, AdjointError> {
        let (nm, st, m) = (edge.messages.len(), edge.statistics, edge.messages);
        Ok((0..nm)
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
            .collect())
    }
    fn needs(&self, k: &Kernel) -> Needs {
        Needs::row_statistics(k, "prod: the stats stage keeps the product of non-zero messages and the zero count, so zero messages differentiate exactly")
    }
    fn residual_names(&self, _: &Kernel, _: &[Type]) -> Result<Vec<String>, &'static str> {
        // The forward's plain product and the stats fold's (non-zero
        // product, zero count) differ in the sign of a zero and in
        // `inf · 0`, so the forward's outputs could not come from that fold.
        Err("prod: the forward's product is not rebuilt bit for bit from the (non-zero product, zero count) fold")
    }
}

/// `softmax` of (score, value) messages: the Jacobian uses the row's
/// maximum score and denominator, which the stats stage recomputes.
struct Softmax;

impl ReducerRule for Softmax {
    fn state_types(&self, k: &Kernel) -> Vec<Type> {
        vec![Type::Scalar, Type::Scalar, k.message_types()[1]]
    }
    fn stats_reducer(&self, k: &Kernel, st: &[Type]) -> Reducer {
        let sp = k.reducer.span;
        let c = combine_region(sp, st, &|b, a, bb| {
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
        monoid(sp, identity_region(sp, st, &[f64::NEG_INFINITY, 0.0, 0.0]), c, true, true)
    }
    fn stats_messages(&self, b: &mut B<'_>, messages: &[ValueId]) -> Vec<ValueId> {
        let one = b.c(1.0);
        vec![messages[0], one, messages[1]]
    }
    fn aggregate(&self, _: &Kernel, b: &mut B<'_>, state: &[ValueId]) -> Result<Vec<ValueId>, AdjointError> {
        let zero = b.c(0.0);
        let empty = b.cmp(CmpOp::Eq, state[1], zero);
        let one = b.c(1.0);
        let d = b.sel(empty, one, state[1]);
        let q = b.bin(BinOp::Div, state[2], d);
        Ok(vec![b.sel(empty, zero, q)])
    }
    fn row_statistics(&self, k: &Kernel, _: &[Type]) -> Vec<RowStat> {
        let mut stats = abar_statistics(k);
        stats.push(RowStat { name: "max".into(), ty: Type::Scalar });
        stats.push(RowStat { name: "denominator".into(), ty: Type::Scalar });
        stats.push(RowStat { name: "abar_dot_out".into(), ty: Type::Scalar });
        stats
    }
    fn row_statistic_values(&self, _: &Kernel, b: &mut B<'_>, row: &Row<'_>) -> Result<Vec<ValueId>, AdjointError> {
        let mut outs = row.abar.to_vec();
        outs.push(row.state[0]);
        outs.push(row.state[1]);
        let c = b.dot_or_mul(row.abar[0], row.aggregate[0]);
        outs.push(c);
        Ok(outs)
    }
    fn message_cotangent(&self, _: &Kernel, b: &mut B<'_>, edge: &Edge<'_>) -> Result<Vec<ValueId>, AdjointError> {
        let (st, m) = (edge.statistics, edge.messages);
        let (abar, mx, den, c) = (st[0], st[1], st[2], st[3]);
        let d = b.bin(BinOp::Sub, m[0], mx);
        let e = b.un(UnOp::Exp, d);
        let p = b.bin(BinOp::Div, e, den);
        let av = b.dot_or_mul(abar, m[1]);
        let diff = b.bin(BinOp::Sub, av, c);
        let sbar = b.bin(BinOp::Mul, p, diff);
        let vbar = b.bin(BinOp::Mul, p, abar);
        Ok(vec![sbar, vbar])
    }
    fn needs(&self, k: &Kernel) -> Needs {
        Needs::row_statistics(
            k,
            "softmax: the Jacobian uses the per-row max and denominator, recomputed by the stats stage (a schedule with saved residuals reads them from the forward)",
        )
    }
    fn residual_names(&self, _: &Kernel, _: &[Type]) -> Result<Vec<String>, &'static str> {
        Ok(vec!["max".into(), "denominator".into(), "weighted_sum".into()])
    }
    fn forward_aggregate(
        &self,
        _: &Kernel,
        b: &mut B<'_>,
        state: &[ValueId],
        empty: ValueId,
    ) -> Result<Vec<ValueId>, AdjointError> {
        // The forward's finish, operation for operation.
        let one = b.c(1.0);
        let safe = b.sel(empty, one, state[1]);
        let q = b.bin(BinOp::Div, state[2], safe);
        let zero = b.c(0.0);
        Ok(vec![b.sel(empty, zero, q)])
    }
}

/// A user monoid: the row's fold is replayed as the exclusive prefix and
/// suffix of each edge, and each message's cotangent is the VJP of
/// `combine(combine(prefix, m), suffix)` seeded with the state's
/// cotangent.
struct Monoid;

impl ReducerRule for Monoid {
    fn state_types(&self, k: &Kernel) -> Vec<Type> {
        k.reducer.identity.as_ref().map(|r| r.output_types()).unwrap_or_default()
    }
    fn stats_reducer(&self, k: &Kernel, _: &[Type]) -> Reducer {
        let mut r = k.reducer.clone();
        r.finalize = None;
        r.proved = None;
        r.class = None;
        r
    }
    fn stats_messages(&self, _: &mut B<'_>, messages: &[ValueId]) -> Vec<ValueId> {
        messages.to_vec()
    }
    fn aggregate(&self, k: &Kernel, b: &mut B<'_>, state: &[ValueId]) -> Result<Vec<ValueId>, AdjointError> {
        Ok(match &k.reducer.finalize {
            Some(f) => b.r.inline(f, state),
            None => state.to_vec(),
        })
    }
    fn row_statistics(&self, _: &Kernel, state_types: &[Type]) -> Vec<RowStat> {
        // The state's cotangent, not the aggregate's.
        state_types.iter().enumerate().map(|(c, t)| RowStat { name: format!("sbar{c}"), ty: *t }).collect()
    }
    fn row_statistic_values(&self, k: &Kernel, b: &mut B<'_>, row: &Row<'_>) -> Result<Vec<ValueId>, AdjointError> {
        // Through `finalize`: the state's cotangent.
        let Some(f) = &k.reducer.finalize else {
            return Ok(row.abar.to_vec());
        };
        let seeds: Vec<Option<ValueId>> = row.abar.iter().map(|a| Some(*a)).collect();
        let fv = vjp_region(
            f,
            b.r,
            |op| match op {
                Op::Input(i) => row.state.get(*i as usize).copied(),
                _ => None,
            },
            &seeds,
        )?;
        let mut outs = Vec::new();
        for (c, t) in row.state_types.iter().enumerate() {
            let g = fv.leaves.iter().find(|(o, _)| *o == Op::Input(c as u32)).map(|(_, x)| *x);
            outs.push(g.unwrap_or_else(|| zero_of(b, *t)));
        }
        Ok(outs)
    }
    fn message_cotangent(&self, k: &Kernel, b: &mut B<'_>, edge: &Edge<'_>) -> Result<Vec<ValueId>, AdjointError> {
        let sp = b.sp;
        let Some(comb) = &k.reducer.combine else {
            return Err(AdjointError::Unsupported { op: "a monoid without combine", span: sp });
        };
        let mono_state = edge.state_types;
        let n = mono_state.len();
        let pre: Vec<ValueId> = edge.prefix.iter().map(|&f| b.field(f, edge.fields[f].ty)).collect();
        let suf: Vec<ValueId> = edge.suffix.iter().map(|&f| b.field(f, edge.fields[f].ty)).collect();
        // f(m) = combine(combine(prefix, m), suffix), seeded with the state cotangent.
        let mut whole = Region::new(mono_state.iter().cycle().take(3 * n).copied().collect());
        let ins: Vec<ValueId> = (0..3 * n).map(|i| whole.push(Op::Input(i as u32), mono_state[i % n], sp)).collect();
        let t: Vec<ValueId> = ins[..2 * n].to_vec();
        let mid = whole.inline(comb, &t);
        let last: Vec<ValueId> = mid.iter().chain(&ins[2 * n..]).copied().collect();
        let outs = whole.inline(comb, &last);
        whole.outputs = outs;
        let seeds: Vec<Option<ValueId>> = edge.statistics[..n].iter().map(|x| Some(*x)).collect();
        let args: Vec<ValueId> = pre.iter().chain(edge.messages).chain(&suf).copied().collect();
        let v = vjp_region(
            &whole,
            b.r,
            |op| match op {
                Op::Input(i) => args.get(*i as usize).copied(),
                _ => None,
            },
            &seeds,
        )?;
        Ok((0..n)
            .map(|c| {
                v.leaves
                    .iter()
                    .find(|(o, _)| *o == Op::Input((n + c) as u32))
                    .map(|(_, x)| *x)
                    .unwrap_or_else(|| zero_of(b, mono_state[c]))
            })
            .collect())
    }
    fn needs(&self, _: &Kernel) -> Needs {
        Needs {
            replays_fold: true,
            gives_lanes_to_winners: false,
            reads_inverse_degree: false,
            reads_cotangent_directly: false,
            // The stats stage writes the state's cotangent, not the
            // output's.
            copies_cotangent: false,
            note: "monoid: the row's fold is replayed as prefix (stats stage) and suffix (row-reversed graph) scans; each message's cotangent is the VJP of combine(combine(prefix, m), suffix)",
        }
    }
    fn residual_names(&self, _: &Kernel, _: &[Type]) -> Result<Vec<String>, &'static str> {
        // Its stats stage writes a prefix per edge as well as the row's
        // state: a residual would be an edge tensor, the size of the
        // graph, where the stats pass it saves reads the same edges.
        Err("monoid: the backward replays the fold per edge (prefix and suffix scans); no per-row residual replaces that pass")
    }
}
