//! A forward that keeps what its backward needs, and the backward that
//! reads it.
//!
//! The recomputing backward's first stage (stats, `adjoint/stages/stats.rs`)
//! refolds every row over the forward graph with the reducer rule's
//! augmented reducer: a max/min's value and winning rank per lane, a
//! softmax's running maximum, denominator and weighted sum. That pass reads
//! every edge, as the forward did. A forward that keeps residuals folds
//! that same augmented state instead of the plain one, writes the forward's
//! outputs from it, and writes the state's components the backward reads
//! as per-row outputs (`residual.<name>`). The backward then replaces the
//! stats stage by a node-wise stage over the destinations
//! (`GraphUse::DestinationRows`, no edges) that computes what the stats
//! node computed from the state, reading the residuals as fields; a
//! statistic that *is* a state component (a max's winner, a softmax's
//! maximum and denominator) is read by later stages as the residual
//! itself, and when nothing else is left the stage goes.
//!
//! ```text
//! forward (keeps residuals)      edge: the forward's messages, as the stats stage augments them, and a 1
//!                                reduce: the stats reducer, and a count of the row's edges
//!                                node: node(forward aggregate from the state) ; the kept state components
//! backward                       stats stage (forward graph)  ==>  saved statistics (destination rows, no edges)
//! ```
//!
//! Bits. The residuals are the stats fold's state: the same combine over
//! the same messages in the same order, so every statistic and every
//! gradient has the recomputing backward's bits. The forward's outputs come
//! from that state through the plain forward's finish (the reducer rule's
//! `forward_aggregate`, its empty-row test on the count, which
//! `count-edges-by-degree` turns into the row's degree), so they have the
//! plain forward's bits where the two folds agree: a max/min's value is the
//! same `max(state, message)` in the same order (the rank beside it does
//! not touch it); a softmax's online fold is the forward's step with
//! `exp(s − m')·1` for `exp(s − m')` and `v·w` for `w·v`, exact
//! rewrites. Tests pin both (`tiga/tests/residuals.rs`), on every back end.
//!
//! Which reducers keep residuals is their rule's word
//! (`ReducerRule::residual_names`): max, min and softmax do; a sum or mean
//! has no fold statistic worth a buffer, a product's forward is not rebuilt
//! bit for bit from its (non-zero product, zero count) fold, and a user
//! monoid replays its fold per edge, which no per-row residual replaces.

use super::builder::{builtin, monoid, FieldSet, B};
use super::operation_rules::AdjointError;
use super::plan::{Adjoint, Binding, FoldedPlan, GradientPlan, GraphUse, Residual, ResidualPlan, SourceSides, Stage, StageKind};
use super::stages::{Forward, STATS_STAGE};
use crate::ir::{CmpOp, FieldId, Kernel, Op, OutputDecl, Region, Role, Type, ValueId, WidthDecl};

/// Whether a kernel keeps residuals, and if not, why.
#[derive(Clone, Debug)]
pub enum ResidualChoice {
    Keep(Box<ResidualPlan>),
    /// Its backward recomputes its statistics; the reason, for `explain`.
    Recompute(String),
}

/// The saved-residual plan of `k`, from its recomputing plan `plain`
/// (`generate_adjoint`'s, which it leaves as it is).
pub fn residual_plan(k: &Kernel, plain: &Adjoint) -> Result<ResidualChoice, AdjointError> {
    let fwd = Forward::new(k);
    let names = match fwd.rule.residual_names(k, &fwd.state_types) {
        Ok(n) => n,
        Err(why) => return Ok(ResidualChoice::Recompute(why.into())),
    };
    if k.outputs.iter().any(|o| o.role != Role::Dst) {
        return Ok(ResidualChoice::Recompute("the forward writes edge or parameter outputs".into()));
    }
    let Some(stats) = plain.stages.get(STATS_STAGE).filter(|s| s.kind == StageKind::RowStatistics) else {
        return Ok(ResidualChoice::Recompute("the plan has no row-statistics stage to replace".into()));
    };
    let Some(node) = stats.kernel.node.as_ref().filter(|_| stats.kernel.outputs.iter().all(|o| o.role != Role::Edge)) else {
        return Ok(ResidualChoice::Recompute("the row-statistics stage writes per-edge values".into()));
    };
    // A softmax whose node function reads a parameter (its gradient summed
    // in the stats stage): the saved statistics gave gradients a few ulps
    // from the recomputing ones (and finite values where those are NaN,
    // for infinite inputs), so such a kernel recomputes until the saved
    // stage is shown to rebuild them bit for bit. (A max's or min's kept
    // their bits; `tiga/tests/residuals.rs` holds both.)
    let param_sums = stats.kernel.outputs.iter().any(|o| o.role == Role::Param);
    if param_sums && k.reducer.kind == crate::ir::ReducerKind::Softmax {
        return Ok(ResidualChoice::Recompute(
            "a softmax whose node function reads a parameter: the saved statistics do not rebuild its gradients bit \
             for bit yet"
                .into(),
        ));
    }
    // The state components the stats node still reads.
    let live = node.live_from(node.outputs.iter().copied());
    let mut components: Vec<usize> = node
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| match n.op {
            Op::Input(c) if live[i] => Some(c as usize),
            _ => None,
        })
        .collect();
    components.sort_unstable();
    components.dedup();
    let residuals: Vec<Residual> =
        components.iter().map(|&c| Residual { name: names[c].clone(), ty: fwd.state_types[c], component: c }).collect();
    let forward = residual_forward(&fwd, &residuals)?;
    let Some(saved) = saved_statistics(k, stats, &residuals) else {
        return Ok(ResidualChoice::Recompute(
            "a width of the statistics is bound only by a source or edge field, which a node-wise stage does not have".into(),
        ));
    };
    // Then, where it can be, the edge side folded into the source side
    // (its stages' origins in `plain`) and the stats stage replaced there
    // too: the plan for graphs in memory.
    let in_memory = super::edge_terms::fold_edge_side(&fwd, plain)?.map(|(fused, fused_origin)| {
        let (adjoint, origin) = replace_stats(&fused, saved.clone(), &residuals, &names);
        let origin = origin.into_iter().map(|o| o.and_then(|i| fused_origin.get(i).copied().flatten())).collect();
        Box::new(FoldedPlan { adjoint, origin })
    });
    let (adjoint, origin) = replace_stats(plain, saved, &residuals, &names);
    Ok(ResidualChoice::Keep(Box::new(ResidualPlan { forward, residuals, adjoint, origin, in_memory })))
}

/// The forward that folds the stats state (and the row's edge count) and
/// writes the forward's outputs, then the residuals.
fn residual_forward(fwd: &Forward<'_>, residuals: &[Residual]) -> Result<Kernel, AdjointError> {
    let k = fwd.k;
    let sp = k.span;
    let st = &fwd.state_types;
    let n = st.len();
    // The edge: the stats stage's messages, and a 1 to count the edges.
    let mut edge = Region::new(vec![]);
    let msgs = fwd.messages(&mut edge, &k.fields);
    let mut b = B { r: &mut edge, sp };
    let mut outs = fwd.rule.stats_messages(&mut b, &msgs);
    outs.push(b.c(1.0));
    edge.outputs = outs;
    // The reducer: the stats reducer, and a sum of the ones beside it.
    let base = fwd.rule.stats_reducer(k, st);
    let (Some(id), Some(comb)) = (&base.identity, &base.combine) else {
        return Err(AdjointError::Unsupported { op: "a stats reducer without identity and combine", span: sp });
    };
    let mut identity = Region::new(vec![]);
    let mut ids = identity.inline(id, &[]);
    ids.push(identity.push(Op::Const(0.0), Type::Scalar, sp));
    identity.outputs = ids;
    let both: Vec<Type> = st.iter().copied().chain([Type::Scalar]).collect();
    let mut combine = Region::new(both.iter().chain(&both).copied().collect());
    let ins: Vec<ValueId> = (0..2 * (n + 1)).map(|i| combine.push(Op::Input(i as u32), both[i % (n + 1)], sp)).collect();
    let args: Vec<ValueId> = ins[..n].iter().chain(&ins[n + 1..2 * n + 1]).copied().collect();
    let mut folded = combine.inline(comb, &args);
    folded.push(combine.push(Op::Binary(crate::ir::BinOp::Add, ins[n], ins[2 * n + 1]), Type::Scalar, sp));
    combine.outputs = folded;
    let reducer = monoid(sp, identity, combine, base.declared.associative, base.declared.commutative);
    // The node: the forward's finish and node, then the residuals.
    let mut node = Region::new(both.clone());
    let state: Vec<ValueId> = both.iter().enumerate().map(|(i, t)| node.push(Op::Input(i as u32), *t, sp)).collect();
    let mut b = B { r: &mut node, sp };
    let zero = b.c(0.0);
    let empty = b.cmp(CmpOp::Eq, state[n], zero);
    let agg = fwd.rule.forward_aggregate(k, &mut b, &state[..n], empty)?;
    let mut outs = match &k.node {
        Some(user) => node.inline(user, &agg),
        None => agg,
    };
    outs.extend(residuals.iter().map(|r| state[r.component]));
    node.outputs = outs;
    let mut outputs = k.outputs.clone();
    outputs.extend(residuals.iter().map(|r| OutputDecl::new(r.output_name(), r.ty, Role::Dst)));
    Ok(Kernel {
        name: format!("{}.residuals", k.name),
        span: sp,
        fields: k.fields.clone(),
        widths: k.widths.clone(),
        outputs,
        edge,
        reducer,
        node: Some(node),
        segment: None,
    })
}

/// The stats stage's node over the destination rows, reading the state's
/// components from the residuals; `None` when a width cannot be bound
/// there.
fn saved_statistics(k: &Kernel, stats: &Stage, residuals: &[Residual]) -> Option<Stage> {
    let node = stats.kernel.node.as_ref()?;
    let sp = k.span;
    let live = node.live_from(node.outputs.iter().copied());
    let mut fs = FieldSet { fields: Vec::new(), bindings: Vec::new() };
    // The stats fields its node reads (destination fields, cotangents,
    // parameters), then the residuals.
    let mut fmap: Vec<Option<usize>> = vec![None; stats.kernel.fields.len()];
    for (i, n) in node.nodes.iter().enumerate() {
        if let (true, Op::Field(f)) = (live[i], &n.op) {
            let f = f.0 as usize;
            if fmap[f].is_none() {
                let d = &stats.kernel.fields[f];
                fmap[f] = Some(fs.add(&d.name, d.role, d.ty, d.declared, stats.bindings[f].clone()));
            }
        }
    }
    let mut rmap: Vec<Option<usize>> = vec![None; residuals.iter().map(|r| r.component + 1).max().unwrap_or(0)];
    for r in residuals {
        rmap[r.component] =
            Some(fs.add(&r.output_name(), Role::Dst, r.ty, crate::ir::DType::F32, Binding::Residual(r.name.clone())));
    }
    // Each width bound by one of these fields.
    let mut widths: Vec<WidthDecl> = Vec::with_capacity(k.widths.len());
    for (w, decl) in k.widths.iter().enumerate() {
        let bound = fs.fields.iter().enumerate().find_map(|(f, d)| match (d.ty, d.role) {
            (Type::Vector(v), Role::Param) if v.0 as usize == w => Some((f, 0)),
            (Type::Vector(v), _) if v.0 as usize == w => Some((f, 1)),
            (Type::Matrix(r, _), _) if r.0 as usize == w => Some((f, 0)),
            (Type::Matrix(_, c), _) if c.0 as usize == w => Some((f, 1)),
            _ => None,
        })?;
        widths.push(WidthDecl { name: decl.name.clone(), bound_by: (FieldId(bound.0 as u32), bound.1) });
    }
    let mut sk = stats.kernel.clone();
    sk.name = format!("{}.vjp.saved_stats", k.name);
    sk.fields = fs.fields;
    sk.widths = widths;
    sk.reducer = builtin(crate::ir::ReducerKind::Sum, k.reducer.span);
    // No edges are read: one scalar message of 0, and a 0 for each
    // parameter output, as the stats stage's edges gave.
    let mut edge = Region::new(vec![]);
    let mut b = B { r: &mut edge, sp };
    let zeros: Vec<ValueId> =
        std::iter::once(()).chain(sk.outputs.iter().filter(|o| o.role == Role::Param).map(|_| ())).map(|_| b.c(0.0)).collect();
    edge.outputs = zeros;
    sk.edge = edge;
    let mut out = Region::new(vec![Type::Scalar]);
    let live_nodes: Vec<usize> = (0..node.nodes.len()).filter(|&i| live[i]).collect();
    let map = out.append_copies(node, live_nodes, |r, n, _| match n.op {
        Op::Field(f) => fmap[f.0 as usize].map(|g| r.push(Op::Field(FieldId(g as u32)), n.ty, n.span)),
        Op::Input(c) => rmap.get(c as usize).copied().flatten().map(|g| r.push(Op::Field(FieldId(g as u32)), n.ty, n.span)),
        _ => None,
    });
    out.outputs = node.outputs.iter().map(|o| map[o.0 as usize]).collect();
    sk.node = Some(out);
    Some(Stage {
        kind: StageKind::SavedStatistics,
        purpose: "row statistics and node adjoint from the forward's residuals".into(),
        graph: GraphUse::DestinationRows,
        kernel: sk,
        bindings: fs.bindings,
    })
}

/// Later stages' reads of stage 0's `output` become reads of a residual.
fn rebind(b: &mut Binding, to_residual: &[(String, String)], removed: bool) {
    match b {
        Binding::Stage { stage: 0, output } => {
            if let Some((_, r)) = to_residual.iter().find(|(o, _)| o == output) {
                *b = Binding::Residual(r.clone());
            }
        }
        Binding::Stage { stage, .. } if removed => *stage -= 1,
        Binding::WinnerScatter { winner, value } => {
            rebind(winner, to_residual, removed);
            rebind(value, to_residual, removed);
        }
        _ => {}
    }
}

/// `plain` with its stats stage replaced by `saved`: the statistics that
/// are state components as they are become residual reads, and a saved
/// stage left with nothing to write goes. Returns the plan and each
/// stage's origin in `plain`.
fn replace_stats(plain: &Adjoint, mut saved: Stage, residuals: &[Residual], names: &[String]) -> (Adjoint, Vec<Option<usize>>) {
    let mut to_residual: Vec<(String, String)> = Vec::new();
    if let Some(node) = &mut saved.kernel.node {
        // An output that is a residual field read as it is.
        let field_of = |v: ValueId, node: &Region| match node.nodes[v.0 as usize].op {
            Op::Field(f) => match &saved.bindings[f.0 as usize] {
                Binding::Residual(r) => Some(r.clone()),
                _ => None,
            },
            _ => None,
        };
        let mut keep = Vec::with_capacity(node.outputs.len());
        for (o, &v) in saved.kernel.outputs.iter().zip(&node.outputs) {
            match field_of(v, &*node) {
                Some(r) if o.role == Role::Dst && !o.name.starts_with("grad.") => {
                    to_residual.push((o.name.clone(), r));
                    keep.push(false);
                }
                _ => keep.push(true),
            }
        }
        let mut kept = keep.iter();
        node.outputs.retain(|_| kept.next().copied().unwrap_or(true));
        let mut kept = keep.iter();
        saved.kernel.outputs.retain(|_| kept.next().copied().unwrap_or(true));
    }
    let removed = saved.kernel.outputs.is_empty();
    let mut stages = Vec::with_capacity(plain.stages.len());
    let mut origin = Vec::with_capacity(plain.stages.len());
    if !removed {
        stages.push(saved);
        origin.push(None);
    }
    for (i, st) in plain.stages.iter().enumerate().skip(1) {
        let mut st = st.clone();
        for b in &mut st.bindings {
            rebind(b, &to_residual, removed);
        }
        stages.push(st);
        origin.push(Some(i));
    }
    let shift = |s: usize| if removed { s - 1 } else { s };
    let gradients = plain
        .gradients
        .iter()
        .map(|g| GradientPlan {
            role: g.role,
            name: g.name.clone(),
            parts: g.parts.iter().filter(|(s, _)| !(removed && *s == 0)).map(|(s, n)| (shift(*s), n.clone())).collect(),
        })
        .collect();
    let source_sides = plain.source_sides.map(|s| SourceSides { scatter: shift(s.scatter), transposed: shift(s.transposed) });
    let mut notes = plain.notes.clone();
    let kept: Vec<&str> = residuals.iter().map(|r| r.name.as_str()).collect();
    let unused: Vec<&str> = names.iter().map(String::as_str).filter(|n| !kept.contains(n)).collect();
    notes.push(format!(
        "saved residuals: the forward keeps {} per destination row{}; {}",
        kept.join(", "),
        if unused.is_empty() { String::new() } else { format!(" (not {}: no stage reads it)", unused.join(", ")) },
        if removed {
            "every statistic is a residual as it is: no row-statistics pass".to_string()
        } else {
            "the row-statistics stage reads them per destination row instead of refolding every edge".to_string()
        }
    ));
    (Adjoint { stages, gradients, notes, source_sides }, origin)
}
