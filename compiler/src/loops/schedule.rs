//! The loop scheduler: a fused segment (init, step, finish regions) becomes
//! scalar statements and feature loops.
//!
//! Each value gets a *phase*: leaves are phase 0; an elementwise operation
//! takes the largest phase of its operands; a reduction over the feature axis
//! (`sum`, `dot`) is available one phase after the loop that accumulates it,
//! and so is a `matvec` (it needs its whole operand). For each phase the
//! scheduler emits, in order: the scalar work of that phase, its `matvec`s,
//! then one feature loop per width symbol holding every vector operation of
//! that phase (so `w·cs·h[j]` folded into an accumulator is one loop with no
//! temporary). A vector needed in a later loop is stored to a per-row scratch
//! array in its own loop and reloaded. Accumulator vectors are updated in
//! place when no later loop reads the old value; otherwise through a scratch
//! copy.

// Values are indexed by position in several side tables at once.
#![allow(clippy::needless_range_loop)]

use std::collections::{BTreeMap, BTreeSet};

use super::{Addr, Inst, LoopKernel, LoopVar, Stmt, Var, VarKind};
use crate::ir::{BinOp, CmpOp, Kernel, Op, Region, Role, Type, WidthId};

#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("kernel `{0}` has not been lowered and fused; run the pass pipeline first")]
    NotFused(String),
    #[error("kernel `{kernel}`: {message}")]
    Unsupported { kernel: String, message: String },
    /// The scheduler produced a loop kernel its verifier refuses (a bug).
    #[error(transparent)]
    Verify(#[from] super::LoopVerifyError),
}

#[derive(Clone, Copy, Debug)]
enum Slot {
    Scalar(Var),
    Vector(u32, WidthId),
}

#[derive(Clone, Copy, PartialEq)]
enum SinkKind {
    Init,
    Step,
    Finish,
}

struct Builder {
    vars: Vec<VarKind>,
    loops: u32,
    scratch: Vec<WidthId>,
}

impl Builder {
    fn var(&mut self, kind: VarKind) -> Var {
        self.vars.push(kind);
        Var(self.vars.len() as u32 - 1)
    }
    fn lane(&mut self) -> LoopVar {
        self.loops += 1;
        LoopVar(self.loops - 1)
    }
    fn scratch(&mut self, w: WidthId) -> u32 {
        self.scratch.push(w);
        self.scratch.len() as u32 - 1
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// Scalar or boolean, computed outside feature loops.
    Top,
    /// A vector read lane by lane from memory (a field or the state).
    LeafVec,
    /// A vector computed lane by lane in its home loop.
    Home,
    /// A vector computed whole into scratch before its phase's loops.
    MatVec,
    /// A matrix parameter (only `matvec` reads it).
    Matrix,
    /// An outer product or a sum of them: only written to a matrix
    /// parameter output, by nested loops at the end of the region.
    Outer,
}

/// Position of a loop (or a phase's matvec prelude) in emission order.
type Pos = (u32, u32);
fn loop_pos(phase: u32, w: WidthId) -> Pos {
    (phase, 1 + w.0)
}

fn width_of(t: Type) -> Option<WidthId> {
    t.width()
}

struct Analysis {
    kind: Vec<Kind>,
    phase: Vec<u32>,
}

fn analyze(k: &Kernel, r: &Region) -> Result<Analysis, ScheduleError> {
    let n = r.nodes.len();
    let mut kind = Vec::with_capacity(n);
    let mut phase: Vec<u32> = Vec::with_capacity(n);
    for node in &r.nodes {
        let is_vec = node.ty.width().is_some();
        let (kd, ph) = match &node.op {
            Op::Const(_) | Op::Degree | Op::Rank => (Kind::Top, 0),
            Op::Field(f) => match k.field(*f).ty {
                Type::Vector(_) => (Kind::LeafVec, 0),
                Type::Matrix(..) => (Kind::Matrix, 0),
                _ => (Kind::Top, 0),
            },
            Op::State(_) => (if is_vec { Kind::LeafVec } else { Kind::Top }, 0),
            Op::Input(_) | Op::Message(_) => {
                return Err(ScheduleError::Unsupported {
                    kernel: k.name.clone(),
                    message: "a fused region still reads an input or a message".into(),
                })
            }
            Op::Sum(a) => (Kind::Top, phase[a.0 as usize] + 1),
            Op::Dot(a, b) => (Kind::Top, phase[a.0 as usize].max(phase[b.0 as usize]) + 1),
            Op::MatVec(_, v) | Op::MatTVec(_, v) => (Kind::MatVec, phase[v.0 as usize] + 1),
            Op::Outer(..) => (Kind::Outer, 0),
            Op::Binary(BinOp::Add, ..) if matches!(node.ty, Type::Matrix(..)) => (Kind::Outer, 0),
            op => {
                let p = op.operands().iter().map(|a| phase[a.0 as usize]).max().unwrap_or(0);
                (if is_vec { Kind::Home } else { Kind::Top }, p)
            }
        };
        kind.push(kd);
        phase.push(ph);
    }
    Ok(Analysis { kind, phase })
}

/// Schedule one region. `slots` are the state slots (init/step write them,
/// step/finish read them); finish writes the kernel outputs.
/// A region's plan: every choice its emission follows, made before any
/// statement is written (as Cranelift keeps a function's layout apart from
/// its emission): the values' classes and phases, the variables of its
/// top-level values, the loops that need each vector lane by lane, where
/// each output goes, and the scratch buffers vectors are kept in.
struct RegionPlan {
    a: Analysis,
    top_var: Vec<Option<Var>>,
    demands: BTreeMap<Pos, BTreeSet<usize>>,
    home_of: Vec<Option<Pos>>,
    max_phase: u32,
    vec_sinks: Vec<VecSink>,
    scalar_sinks: Vec<(usize, Slot)>,
    scalar_outputs: Vec<(usize, u32, bool)>,
    copies: Vec<(u32, u32, WidthId)>,
    /// (value node, output) of matrix parameter outputs (sums of outer products).
    matrix_sinks: Vec<(usize, u32)>,
    /// The scratch buffer of each vector kept in memory.
    mat: Vec<Option<u32>>,
}

struct VecSink {
    node: usize,
    target: SinkTarget,
    pos: Pos,
}
#[derive(Clone, Copy)]
enum SinkTarget {
    Scratch(u32),
    /// Output index, and whether to accumulate (parameter sums).
    Output(u32, bool),
}
fn schedule_region(b: &mut Builder, k: &Kernel, r: &Region, slots: &[Slot], sink: SinkKind) -> Result<Vec<Stmt>, ScheduleError> {
    let plan = plan_region(b, k, r, slots, sink)?;
    emit_region(b, k, r, slots, plan)
}

/// Plan region `r` (see [`RegionPlan`]), its state in `slots`, its sink `sink`.
fn plan_region(b: &mut Builder, k: &Kernel, r: &Region, slots: &[Slot], sink: SinkKind) -> Result<RegionPlan, ScheduleError> {
    let a = analyze(k, r)?;
    let n = r.nodes.len();
    let ty = |i: usize| r.nodes[i].ty;
    // Scalar variables of top-level values.
    let mut top_var: Vec<Option<Var>> = vec![None; n];
    for i in 0..n {
        if a.kind[i] == Kind::Top {
            let vk = if ty(i) == Type::Bool { VarKind::Bool } else { VarKind::Num };
            top_var[i] = Some(match &r.nodes[i].op {
                Op::State(s) => match slots.get(*s as usize) {
                    Some(Slot::Scalar(v)) => *v,
                    _ => b.var(vk),
                },
                _ => b.var(vk),
            });
        }
    }
    // Where each vector is needed lane by lane.
    let mut demands: BTreeMap<Pos, BTreeSet<usize>> = BTreeMap::new();
    let mut home_of: Vec<Option<Pos>> = vec![None; n];
    let mut max_phase = 0;
    for i in 0..n {
        max_phase = max_phase.max(a.phase[i]);
        let op = &r.nodes[i].op;
        match a.kind[i] {
            Kind::Home => {
                let w = width_of(ty(i)).unwrap_or(WidthId(0));
                let pos = loop_pos(a.phase[i], w);
                home_of[i] = Some(pos);
                let set = demands.entry(pos).or_default();
                set.insert(i);
                for o in op.operands() {
                    if matches!(a.kind[o.0 as usize], Kind::Home | Kind::LeafVec | Kind::MatVec) {
                        set.insert(o.0 as usize);
                    }
                }
            }
            Kind::Top => {
                if let Op::Sum(x) | Op::Dot(x, _) = op {
                    let w = width_of(ty(x.0 as usize)).unwrap_or(WidthId(0));
                    let set = demands.entry(loop_pos(a.phase[i] - 1, w)).or_default();
                    for o in op.operands() {
                        set.insert(o.0 as usize);
                    }
                }
            }
            _ => {}
        }
    }
    // Sinks: which value goes where, and in which loop vector sinks store.
    let mut vec_sinks: Vec<VecSink> = Vec::new();
    let mut scalar_sinks: Vec<(usize, Slot)> = Vec::new();
    let mut scalar_outputs: Vec<(usize, u32, bool)> = Vec::new();
    let mut copies: Vec<(u32, u32, WidthId)> = Vec::new();
    // (value node, output) of matrix parameter outputs (sums of outer products).
    let mut matrix_sinks: Vec<(usize, u32)> = Vec::new();
    // Which kernel output each region output beyond the state feeds: the
    // step feeds edge outputs then parameter sums; the finish feeds
    // destination outputs then parameter sums.
    let role_outs = |role: Role| -> Vec<usize> { k.outputs_of(role).iter().map(|(i, _)| *i).collect() };
    let extra_targets: Vec<usize> = match sink {
        SinkKind::Init => vec![],
        SinkKind::Step => role_outs(Role::Edge).into_iter().chain(role_outs(Role::Param)).collect(),
        SinkKind::Finish => role_outs(Role::Dst).into_iter().chain(role_outs(Role::Param)).collect(),
    };
    let num_state = if sink == SinkKind::Finish { 0 } else { slots.len() };
    for (o, &v) in r.outputs.iter().enumerate() {
        let i = v.0 as usize;
        let slot_vec: Option<(WidthId, SinkTarget)> = if o < num_state {
            match slots.get(o) {
                Some(Slot::Vector(buf, w)) => Some((*w, SinkTarget::Scratch(*buf))),
                _ => None,
            }
        } else {
            let Some(&out) = extra_targets.get(o - num_state) else {
                return Err(ScheduleError::Unsupported {
                    kernel: k.name.clone(),
                    message: "a region yields more values than it has sinks".into(),
                });
            };
            let decl = &k.outputs[out];
            let acc = decl.role == Role::Param;
            // Outputs arrive zeroed: a constant zero writes nothing.
            if matches!(r.nodes[i].op, Op::Const(c) if c == 0.0) {
                continue;
            }
            match decl.ty {
                Type::Matrix(..) => {
                    matrix_sinks.push((i, out as u32));
                    continue;
                }
                Type::Vector(w) => Some((w, SinkTarget::Output(out as u32, acc))),
                _ => {
                    scalar_outputs.push((i, out as u32, acc));
                    continue;
                }
            }
        };
        match slot_vec {
            None => {
                if let Some(s) = slots.get(o) {
                    scalar_sinks.push((i, *s));
                }
            }
            Some((w, target)) => {
                // A vector state that is written back unchanged needs nothing.
                if sink == SinkKind::Step {
                    if let (Op::State(s), SinkTarget::Scratch(_)) = (&r.nodes[i].op, target) {
                        if *s as usize == o {
                            continue;
                        }
                    }
                }
                let pos = match a.kind[i] {
                    Kind::Home => home_of[i].unwrap_or(loop_pos(a.phase[i], w)),
                    _ => loop_pos(a.phase[i], w),
                };
                demands.entry(pos).or_default();
                if matches!(a.kind[i], Kind::LeafVec | Kind::MatVec) {
                    demands.entry(pos).or_default().insert(i);
                }
                vec_sinks.push(VecSink { node: i, target, pos });
            }
        }
    }
    // In-place accumulator update is safe when no loop after the writer reads
    // the old state.
    if sink == SinkKind::Step {
        for s in &mut vec_sinks {
            let SinkTarget::Scratch(buf) = s.target else { continue };
            let Some(state_ix) = slots.iter().position(|sl| matches!(sl, Slot::Vector(b2, _) if *b2 == buf)) else {
                continue;
            };
            let readers: Vec<Pos> = demands
                .iter()
                .filter(|(_, set)| set.iter().any(|&j| matches!(r.nodes[j].op, Op::State(x) if x as usize == state_ix)))
                .map(|(p, _)| *p)
                .chain((0..n).filter_map(|j| match r.nodes[j].op {
                    Op::MatVec(_, v) if matches!(r.nodes[v.0 as usize].op, Op::State(x) if x as usize == state_ix) => {
                        Some((a.phase[j], 0))
                    }
                    _ => None,
                }))
                .collect();
            if readers.iter().any(|p| *p > s.pos) {
                let w = width_of(ty(s.node)).or(match slots[state_ix] {
                    Slot::Vector(_, w) => Some(w),
                    _ => None,
                });
                let w = w.unwrap_or(WidthId(0));
                let tmp = b.scratch(w);
                copies.push((tmp, buf, w));
                s.target = SinkTarget::Scratch(tmp);
            }
        }
    }
    // Materialize home vectors needed outside their loop, and matvec results.
    let mut mat: Vec<Option<u32>> = vec![None; n];
    for (pos, set) in &demands {
        for &i in set {
            if a.kind[i] == Kind::Home && home_of[i] != Some(*pos) && mat[i].is_none() {
                mat[i] = Some(b.scratch(width_of(ty(i)).unwrap_or(WidthId(0))));
            }
        }
    }
    for i in 0..n {
        if a.kind[i] == Kind::Home && mat[i].is_none() {
            let used_by_matvec = (0..n).any(|j| match r.nodes[j].op {
                Op::MatVec(_, v) | Op::MatTVec(_, v) => v.0 as usize == i,
                Op::Outer(x, y) => x.0 as usize == i || y.0 as usize == i,
                _ => false,
            });
            if used_by_matvec {
                mat[i] = Some(b.scratch(width_of(ty(i)).unwrap_or(WidthId(0))));
            }
        }
        if a.kind[i] == Kind::MatVec {
            mat[i] = Some(b.scratch(width_of(ty(i)).unwrap_or(WidthId(0))));
        }
    }
    Ok(RegionPlan { a, top_var, demands, home_of, max_phase, vec_sinks, scalar_sinks, scalar_outputs, copies, matrix_sinks, mat })
}

/// The statements of region `r` (its state in `slots`) as `plan` says.
fn emit_region(b: &mut Builder, k: &Kernel, r: &Region, slots: &[Slot], plan: RegionPlan) -> Result<Vec<Stmt>, ScheduleError> {
    let RegionPlan {
        a,
        top_var,
        demands,
        home_of,
        max_phase,
        vec_sinks,
        scalar_sinks,
        scalar_outputs,
        copies,
        matrix_sinks,
        mat,
    } = plan;
    let n = r.nodes.len();
    let ty = |i: usize| r.nodes[i].ty;
    let mut out: Vec<Stmt> = Vec::new();
    let field_addr = |f: crate::ir::FieldId, lanes: Vec<LoopVar>| Addr::Field { field: f, lanes };
    // Address of a vector's lane when it lives in memory (leaf, matvec, materialized).
    let mem_addr = |i: usize, lane: LoopVar, mat: &Vec<Option<u32>>| -> Option<Addr> {
        match (&r.nodes[i].op, a.kind[i]) {
            (Op::Field(f), Kind::LeafVec) => Some(field_addr(*f, vec![lane])),
            (Op::State(s), Kind::LeafVec) => match slots.get(*s as usize) {
                Some(Slot::Vector(buf, _)) => Some(Addr::Scratch { buf: *buf, lane }),
                _ => None,
            },
            _ => mat[i].map(|buf| Addr::Scratch { buf, lane }),
        }
    };
    let unsupported = |m: &str| ScheduleError::Unsupported { kernel: k.name.clone(), message: m.to_string() };
    for p in 0..=max_phase {
        // Scalar work of this phase.
        for i in 0..n {
            if a.kind[i] != Kind::Top || a.phase[i] != p {
                continue;
            }
            let v = top_var[i].ok_or_else(|| unsupported("scalar without a variable"))?;
            let tv = |x: crate::ir::ValueId| top_var[x.0 as usize];
            let inst = match &r.nodes[i].op {
                Op::Const(c) => Inst::Const(*c),
                Op::Degree => Inst::Degree,
                Op::Rank => Inst::Rank,
                Op::Field(f) => Inst::Load(field_addr(*f, vec![])),
                Op::State(_) => continue,
                Op::Sum(_) | Op::Dot(..) => continue,
                op => {
                    let mut missing = false;
                    let mut g = |x: crate::ir::ValueId| {
                        tv(x).unwrap_or_else(|| {
                            missing = true;
                            Var(0)
                        })
                    };
                    let inst = match *op {
                        Op::Unary(u, x) => Inst::Unary(u, g(x)),
                        Op::Binary(o, x, y) => Inst::Binary(o, g(x), g(y)),
                        Op::Powi(x, e) => Inst::Powi(g(x), e),
                        Op::Cmp(c, x, y) => Inst::Cmp(c, g(x), g(y)),
                        Op::Select(c, x, y) => Inst::Select(g(c), g(x), g(y)),
                        _ => return Err(unsupported("unexpected scalar operation")),
                    };
                    if missing {
                        return Err(unsupported("a scalar operation reads a vector"));
                    }
                    inst
                }
            };
            out.push(Stmt::Set(v, inst));
        }
        // Matvecs of this phase: y[r] = Σ_c M[r, c] · v[c] (transposed:
        // y[c] = Σ_r M[r, c] · v[r]).
        for i in 0..n {
            if a.kind[i] != Kind::MatVec || a.phase[i] != p {
                continue;
            }
            let (m, v, transposed) = match r.nodes[i].op {
                Op::MatVec(m, v) => (m, v, false),
                Op::MatTVec(m, v) => (m, v, true),
                _ => continue,
            };
            let (Type::Matrix(rw, cw), Op::Field(mf)) = (ty(m.0 as usize), &r.nodes[m.0 as usize].op) else {
                return Err(unsupported("matvec needs a matrix parameter"));
            };
            let (out_w, in_w) = if transposed { (cw, rw) } else { (rw, cw) };
            let buf = mat[i].ok_or_else(|| unsupported("matvec without scratch"))?;
            let (lo, li) = (b.lane(), b.lane());
            let m_lanes = if transposed { vec![li, lo] } else { vec![lo, li] };
            let acc = b.var(VarKind::Num);
            let (mv, xv, t) = (b.var(VarKind::Num), b.var(VarKind::Num), b.var(VarKind::Num));
            let x_addr = mem_addr(v.0 as usize, li, &mat).ok_or_else(|| unsupported("matvec operand not in memory"))?;
            out.push(Stmt::Loop {
                lane: lo,
                width: out_w,
                body: vec![
                    Stmt::Set(acc, Inst::Const(0.0)),
                    Stmt::Loop {
                        lane: li,
                        width: in_w,
                        body: vec![
                            Stmt::Set(mv, Inst::Load(field_addr(*mf, m_lanes))),
                            Stmt::Set(xv, Inst::Load(x_addr)),
                            Stmt::Set(t, Inst::Binary(BinOp::Mul, mv, xv)),
                            Stmt::Set(acc, Inst::Binary(BinOp::Add, acc, t)),
                        ],
                    },
                    Stmt::Store(Addr::Scratch { buf, lane: lo }, acc),
                ],
            });
        }
        // Feature loops of this phase, one per width.
        let positions: Vec<Pos> = demands.keys().copied().filter(|pos| pos.0 == p).collect();
        for pos in positions {
            let set = demands.get(&pos).cloned().unwrap_or_default();
            let w = WidthId(pos.1 - 1);
            let lane = b.lane();
            let mut body = Vec::new();
            let mut lane_var: BTreeMap<usize, Var> = BTreeMap::new();
            // Reductions accumulated in this loop.
            let reductions: Vec<usize> = (0..n)
                .filter(|&i| {
                    matches!(r.nodes[i].op, Op::Sum(_) | Op::Dot(..))
                        && a.phase[i] == p + 1
                        && width_of(match r.nodes[i].op {
                            Op::Sum(x) | Op::Dot(x, _) => ty(x.0 as usize),
                            _ => Type::Scalar,
                        }) == Some(w)
                })
                .collect();
            for &i in &reductions {
                if let Some(v) = top_var[i] {
                    out.push(Stmt::Set(v, Inst::Const(0.0)));
                }
            }
            for &i in &set {
                let v = b.var(if matches!(ty(i), Type::Mask(_)) { VarKind::Bool } else { VarKind::Num });
                let inst = if a.kind[i] == Kind::Home && home_of[i] == Some(pos) {
                    let mut bad = false;
                    let mut g = |x: crate::ir::ValueId| {
                        let xi = x.0 as usize;
                        match a.kind[xi] {
                            Kind::Top => top_var[xi].unwrap_or_else(|| {
                                bad = true;
                                Var(0)
                            }),
                            _ => lane_var.get(&xi).copied().unwrap_or_else(|| {
                                bad = true;
                                Var(0)
                            }),
                        }
                    };
                    let inst = match r.nodes[i].op {
                        Op::Unary(u, x) => Inst::Unary(u, g(x)),
                        Op::Binary(o, x, y) => Inst::Binary(o, g(x), g(y)),
                        Op::Powi(x, e) => Inst::Powi(g(x), e),
                        Op::Select(c, x, y) => Inst::Select(g(c), g(x), g(y)),
                        Op::Cmp(c, x, y) => Inst::Cmp(c, g(x), g(y)),
                        Op::Broadcast(x, _) => Inst::Copy(g(x)),
                        _ => return Err(unsupported("unexpected vector operation")),
                    };
                    if bad {
                        return Err(unsupported("a vector operand is not available in its loop"));
                    }
                    inst
                } else {
                    let addr = mem_addr(i, lane, &mat).ok_or_else(|| unsupported("vector value not in memory"))?;
                    if matches!(ty(i), Type::Mask(_)) {
                        // Scratch holds numbers: a mask lane is stored as 1 or 0.
                        let (stored, zero) = (b.var(VarKind::Num), b.var(VarKind::Num));
                        body.push(Stmt::Set(stored, Inst::Load(addr)));
                        body.push(Stmt::Set(zero, Inst::Const(0.0)));
                        Inst::Cmp(CmpOp::Ne, stored, zero)
                    } else {
                        Inst::Load(addr)
                    }
                };
                body.push(Stmt::Set(v, inst));
                lane_var.insert(i, v);
            }
            for &i in &reductions {
                let Some(acc) = top_var[i] else { continue };
                match r.nodes[i].op {
                    Op::Sum(x) => {
                        let xv = *lane_var.get(&(x.0 as usize)).ok_or_else(|| unsupported("sum operand missing"))?;
                        body.push(Stmt::Set(acc, Inst::Binary(BinOp::Add, acc, xv)));
                    }
                    Op::Dot(x, y) => {
                        let xv = *lane_var.get(&(x.0 as usize)).ok_or_else(|| unsupported("dot operand missing"))?;
                        let yv = *lane_var.get(&(y.0 as usize)).ok_or_else(|| unsupported("dot operand missing"))?;
                        let t = b.var(VarKind::Num);
                        body.push(Stmt::Set(t, Inst::Binary(BinOp::Mul, xv, yv)));
                        body.push(Stmt::Set(acc, Inst::Binary(BinOp::Add, acc, t)));
                    }
                    _ => {}
                }
            }
            for &i in &set {
                if a.kind[i] == Kind::Home && home_of[i] == Some(pos) {
                    if let (Some(buf), Some(&v)) = (mat[i], lane_var.get(&i)) {
                        let v = if matches!(ty(i), Type::Mask(_)) {
                            let (one, zero, n) = (b.var(VarKind::Num), b.var(VarKind::Num), b.var(VarKind::Num));
                            body.push(Stmt::Set(one, Inst::Const(1.0)));
                            body.push(Stmt::Set(zero, Inst::Const(0.0)));
                            body.push(Stmt::Set(n, Inst::Select(v, one, zero)));
                            n
                        } else {
                            v
                        };
                        body.push(Stmt::Store(Addr::Scratch { buf, lane }, v));
                    }
                }
            }
            for s in vec_sinks.iter().filter(|s| s.pos == pos) {
                let v = match lane_var.get(&s.node) {
                    Some(v) => *v,
                    None => top_var[s.node].ok_or_else(|| unsupported("sink value missing"))?,
                };
                match s.target {
                    SinkTarget::Scratch(buf) => body.push(Stmt::Store(Addr::Scratch { buf, lane }, v)),
                    SinkTarget::Output(o, false) => body.push(Stmt::Store(Addr::Output { out: o, lane: Some(lane) }, v)),
                    SinkTarget::Output(o, true) => {
                        let addr = Addr::Output { out: o, lane: Some(lane) };
                        let (old, new) = (b.var(VarKind::Num), b.var(VarKind::Num));
                        body.push(Stmt::Set(old, Inst::Load(addr.clone())));
                        body.push(Stmt::Set(new, Inst::Binary(BinOp::Add, old, v)));
                        body.push(Stmt::Store(addr, new));
                    }
                }
            }
            out.push(Stmt::Loop { lane, width: w, body });
        }
    }
    // Outputs first: an edge output may read the state before this edge's
    // update (a scan), which the state sinks below overwrite.
    for &(i, o, accumulate) in &scalar_outputs {
        let v = top_var[i].ok_or_else(|| unsupported("scalar output from a vector"))?;
        let addr = Addr::Output { out: o, lane: None };
        if accumulate {
            let (old, new) = (b.var(VarKind::Num), b.var(VarKind::Num));
            out.push(Stmt::Set(old, Inst::Load(addr.clone())));
            out.push(Stmt::Set(new, Inst::Binary(BinOp::Add, old, v)));
            out.push(Stmt::Store(addr, new));
        } else {
            out.push(Stmt::Store(addr, v));
        }
    }
    // Scalar sinks, through temporaries so that swaps read old values.
    let mut temps = Vec::new();
    for &(i, slot) in &scalar_sinks {
        let src = top_var[i].ok_or_else(|| unsupported("scalar state from a vector"))?;
        if let Slot::Scalar(dst) = slot {
            if src == dst {
                continue;
            }
            let t = b.var(VarKind::Num);
            out.push(Stmt::Set(t, Inst::Copy(src)));
            temps.push((dst, t));
        }
    }
    for (dst, t) in temps {
        out.push(Stmt::Set(dst, Inst::Copy(t)));
    }
    // Matrix parameter outputs: out[r, c] += Σ_terms x[r]·y[c].
    for &(node, o) in &matrix_sinks {
        let mut terms = Vec::new();
        let mut stack = vec![node];
        while let Some(t) = stack.pop() {
            match r.nodes[t].op {
                Op::Outer(x, y) => terms.push((x.0 as usize, y.0 as usize)),
                Op::Binary(BinOp::Add, x, y) if matches!(ty(t), Type::Matrix(..)) => {
                    stack.push(y.0 as usize);
                    stack.push(x.0 as usize);
                }
                _ => return Err(unsupported("a matrix output must be a sum of outer products")),
            }
        }
        for (x, y) in terms {
            let (Some(rw), Some(cw)) = (width_of(ty(x)), width_of(ty(y))) else {
                return Err(unsupported("outer product of non-vectors"));
            };
            let (lr, lc) = (b.lane(), b.lane());
            let xa = mem_addr(x, lr, &mat).ok_or_else(|| unsupported("outer operand not in memory"))?;
            let ya = mem_addr(y, lc, &mat).ok_or_else(|| unsupported("outer operand not in memory"))?;
            let (xv, yv, t, old, new) =
                (b.var(VarKind::Num), b.var(VarKind::Num), b.var(VarKind::Num), b.var(VarKind::Num), b.var(VarKind::Num));
            let dst = Addr::OutputMatrix { out: o, row: lr, col: lc };
            out.push(Stmt::Loop {
                lane: lr,
                width: rw,
                body: vec![
                    Stmt::Set(xv, Inst::Load(xa)),
                    Stmt::Loop {
                        lane: lc,
                        width: cw,
                        body: vec![
                            Stmt::Set(yv, Inst::Load(ya)),
                            Stmt::Set(t, Inst::Binary(BinOp::Mul, xv, yv)),
                            Stmt::Set(old, Inst::Load(dst.clone())),
                            Stmt::Set(new, Inst::Binary(BinOp::Add, old, t)),
                            Stmt::Store(dst.clone(), new),
                        ],
                    },
                ],
            });
        }
    }
    for (from, to, w) in copies {
        let lane = b.lane();
        let v = b.var(VarKind::Num);
        out.push(Stmt::Loop {
            lane,
            width: w,
            body: vec![
                Stmt::Set(v, Inst::Load(Addr::Scratch { buf: from, lane })),
                Stmt::Store(Addr::Scratch { buf: to, lane }, v),
            ],
        });
    }
    Ok(out)
}

/// Build the loop IR of a lowered, fused kernel.
pub fn schedule(k: &Kernel) -> Result<LoopKernel, ScheduleError> {
    let seg = match &k.segment {
        Some(s) if s.fused => s,
        _ => return Err(ScheduleError::NotFused(k.name.clone())),
    };
    let mut b = Builder { vars: Vec::new(), loops: 0, scratch: Vec::new() };
    let slots: Vec<Slot> = seg
        .state
        .iter()
        .map(|t| match t {
            Type::Vector(w) => Slot::Vector(b.scratch(*w), *w),
            _ => Slot::Scalar(b.var(VarKind::Num)),
        })
        .collect();
    let init = schedule_region(&mut b, k, &seg.init, &slots, SinkKind::Init)?;
    let pre_body = match &seg.pre_step {
        Some(pre) => schedule_region(&mut b, k, pre, &slots, SinkKind::Step)?,
        None => Vec::new(),
    };
    let body = schedule_region(&mut b, k, &seg.step, &slots, SinkKind::Step)?;
    let finish = schedule_region(&mut b, k, &seg.finish, &slots, SinkKind::Finish)?;
    let mut lk = LoopKernel {
        name: k.name.clone(),
        fields: k.fields.clone(),
        widths: k.widths.clone(),
        outputs: k.outputs.clone(),
        vars: b.vars,
        num_loop_vars: b.loops,
        scratch: b.scratch,
        init,
        pre_body,
        body,
        finish,
    };
    hoist_row_loads(&mut lk);
    super::verify(&lk)?;
    Ok(lk)
}

/// Scalar loads of the row's own destination fields and of parameters in
/// the edge loops (GatAttention's `a_dst[i]`, read by every edge's score in
/// both passes) move to the end of `init`: their value is the row's, and a
/// back end cannot hoist a load past the loop's stores itself. Only a
/// variable assigned by that load alone moves; every reader of it is in
/// the edge loops or the finish, after `init`.
fn hoist_row_loads(k: &mut LoopKernel) {
    let mut sets = vec![0usize; k.vars.len()];
    for list in [&k.init, &k.pre_body, &k.body, &k.finish] {
        super::for_each_stmt(list, &mut |st| {
            if let Stmt::Set(v, _) = st {
                if let Some(n) = sets.get_mut(v.0 as usize) {
                    *n += 1;
                }
            }
        });
    }
    let fields = &k.fields;
    let movable = |st: &Stmt| match st {
        Stmt::Set(v, Inst::Load(Addr::Field { field, lanes })) => {
            lanes.is_empty()
                && sets.get(v.0 as usize) == Some(&1)
                && fields.get(field.0 as usize).is_some_and(|f| matches!(f.role, Role::Dst | Role::Param))
        }
        _ => false,
    };
    let mut hoisted = Vec::new();
    for list in [&mut k.pre_body, &mut k.body] {
        let (moved, kept): (Vec<Stmt>, Vec<Stmt>) = std::mem::take(list).into_iter().partition(|st| movable(st));
        hoisted.extend(moved);
        *list = kept;
    }
    k.init.extend(hoisted);
}
