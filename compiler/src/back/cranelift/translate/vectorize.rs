//! Vector code: which feature loops run as SIMD (unit stride, no
//! cross-lane dependence), feature blocking when a row's accumulators do not
//! fit the registers, scratch accumulators promoted to vector registers, and
//! the SIMD form of each instruction.

use super::*;

impl Translator<'_> {
    /// Whether `a` steps with `lane` (unit stride), is invariant in it, or
    /// steps with a stride other than 1 (then the loop stays scalar).
    pub(super) fn stride(a: &Addr, lane: LoopVar) -> Option<bool> {
        match a {
            Addr::Field { lanes, .. } => match lanes.iter().position(|l| *l == lane) {
                None => Some(false),
                Some(p) if p + 1 == lanes.len() => Some(true),
                Some(_) => None,
            },
            Addr::Scratch { lane: l, .. } => Some(*l == lane),
            Addr::Output { lane: l, .. } => Some(*l == Some(lane)),
            Addr::OutputMatrix { row, col, .. } => {
                if *row == lane {
                    None
                } else {
                    Some(*col == lane)
                }
            }
        }
    }

    /// [`Translator::stride`] along `axis`. Across rows, a scalar source or
    /// destination field and a destination output step by one element
    /// (the stencil's source of row `i + 1` is its source of row `i`, plus
    /// one); a scalar parameter is invariant; anything else has no vector
    /// form.
    pub(super) fn axis_stride(&self, a: &Addr, axis: Axis) -> Option<bool> {
        match axis {
            Axis::Lane(lane) => Self::stride(a, lane),
            Axis::Rows => match a {
                Addr::Field { field, lanes } if lanes.is_empty() => match self.k.fields.get(field.0 as usize)?.role {
                    Role::Src | Role::Dst => Some(true),
                    Role::Param => Some(false),
                    Role::Edge => None,
                },
                Addr::Output { out, lane: None } => (self.k.outputs.get(*out as usize)?.role == Role::Dst).then_some(true),
                _ => None,
            },
        }
    }

    /// Scalar accumulators of a loop body: `acc = acc + x`, the only
    /// statement touching `acc` in the body. The SIMD path keeps a vector of
    /// partial sums and adds them up after the loop (a different summation
    /// order than the scalar loop: equal up to rounding).
    pub(super) fn reductions(body: &[Stmt]) -> std::collections::HashSet<u32> {
        let mut out = std::collections::HashSet::new();
        for st in body {
            if let Stmt::Set(acc, Inst::Binary(BinOp::Add, a, x)) = st {
                if a == acc && x != acc {
                    let touches = body
                        .iter()
                        .filter(|o| match o {
                            Stmt::Set(v, i) => v == acc || inst_reads(i, *acc),
                            Stmt::Store(_, v) => v == acc,
                            Stmt::Loop { .. } => true,
                        })
                        .count();
                    if touches == 1 {
                        out.insert(acc.0);
                    }
                }
            }
        }
        out
    }

    /// A body the SIMD path can take: straight-line numeric code whose
    /// loop-carried values are only memory (no scalar accumulators), with
    /// unit-stride or invariant addresses and operations that have vector
    /// forms with the scalar path's exact semantics.
    pub(super) fn vectorizable(&self, lane: LoopVar, body: &[Stmt]) -> bool {
        let mut defined: std::collections::HashSet<u32> = std::collections::HashSet::new();
        let assigned: std::collections::HashSet<u32> = body
            .iter()
            .filter_map(|s| match s {
                Stmt::Set(v, _) => Some(v.0),
                _ => None,
            })
            .collect();
        // A value read here must be loop-local (defined earlier in this
        // iteration) or loop-invariant (never assigned in the loop).
        let readable = |v: &Var, defined: &std::collections::HashSet<u32>| defined.contains(&v.0) || !assigned.contains(&v.0);
        let num = |v: &Var| self.k.vars.get(v.0 as usize) == Some(&VarKind::Num);
        let reductions = Self::reductions(body);
        for st in body {
            match st {
                Stmt::Set(acc, Inst::Binary(BinOp::Add, a, x)) if reductions.contains(&acc.0) && a == acc => {
                    if !readable(x, &defined) || !num(x) {
                        return false;
                    }
                }
                Stmt::Loop { .. } => return false,
                Stmt::Store(a, v) => {
                    if Self::stride(a, lane).is_none() || !readable(v, &defined) || !num(v) {
                        return false;
                    }
                }
                Stmt::Set(v, inst) => {
                    // Booleans inside the loop are lane masks: comparisons
                    // and their logic.
                    if !num(v) {
                        let ok = match inst {
                            Inst::Cmp(_, x, y) => readable(x, &defined) && readable(y, &defined) && num(x) && num(y),
                            Inst::Unary(UnOp::Not, x) => defined.contains(&x.0),
                            Inst::Binary(BinOp::And | BinOp::Or, x, y) => defined.contains(&x.0) && defined.contains(&y.0),
                            _ => false,
                        };
                        if !ok {
                            return false;
                        }
                        defined.insert(v.0);
                        continue;
                    }
                    let ok = match inst {
                        Inst::Const(_) | Inst::Degree | Inst::Rank => true,
                        Inst::Load(a) => Self::stride(a, lane).is_some(),
                        Inst::Copy(x) => readable(x, &defined) && num(x),
                        Inst::Unary(_, x) => has_vector_form(inst) && readable(x, &defined),
                        Inst::Binary(_, x, y) => has_vector_form(inst) && readable(x, &defined) && readable(y, &defined),
                        // A loop-invariant boolean selects whole vectors; a mask
                        // made in the loop selects lane by lane.
                        Inst::Select(c, x, y) => {
                            (!assigned.contains(&c.0) || defined.contains(&c.0)) && readable(x, &defined) && readable(y, &defined)
                        }
                        Inst::Powi(..) | Inst::Cmp(..) => false,
                    };
                    if !ok {
                        return false;
                    }
                    defined.insert(v.0);
                }
            }
        }
        true
    }

    /// Vector length for the dtype.
    pub(super) fn vlen(&self) -> (ir::Type, i64) {
        match self.key.dtype {
            DType::F32 => (types::F32X4, 4),
            DType::F64 => (types::F64X2, 2),
        }
    }

    /// The lanes a feature loop of `width` (`n` lanes) covers in the code
    /// being emitted: its block under feature blocking, else all of them.
    pub(super) fn lane_range(&self, width: WidthId, n: i64) -> (i64, i64) {
        match (self.blocking, self.block_start) {
            (Some((w, _, bl)), Some(start)) if w == width => (start, bl),
            _ => (0, n),
        }
    }

    /// Lanes of `width` handled per pass over a row's edges.
    pub(super) fn lanes_per_pass(&self, width: WidthId) -> TResult<i64> {
        match self.blocking {
            Some((w, _, bl)) if w == width && self.split.is_none() => Ok(bl),
            _ => self.width(width),
        }
    }

    /// Whether the edge body is feature loops that only load and add into
    /// scratch accumulators (a sum aggregation): its SIMD code needs no
    /// vector register besides the accumulators.
    pub(super) fn edges_only_add(&self) -> bool {
        self.edges_are(false)
    }

    /// Whether the edge body is a weighted sum: scalar loads, and feature
    /// loops that only load, multiply and add into scratch accumulators
    /// (a mean's or a normalized sum's backward): one temporary per vector.
    pub(super) fn edges_weighted_sum(&self) -> bool {
        self.edges_are(true)
    }

    pub(super) fn edges_are(&self, weighted: bool) -> bool {
        let lane_op = |b: &Stmt| {
            matches!(
                b,
                Stmt::Set(_, Inst::Load(Addr::Field { .. } | Addr::Scratch { .. }) | Inst::Binary(BinOp::Add, ..))
                    | Stmt::Store(Addr::Scratch { .. }, _)
            ) || (weighted && matches!(b, Stmt::Set(_, Inst::Binary(BinOp::Mul, ..))))
        };
        // A split body's blocks run its loops alone (the carried weights
        // are loaded like a scalar field).
        if let Some(split) = &self.split {
            return weighted && split.loops.iter().all(|st| matches!(st, Stmt::Loop { body, .. } if body.iter().all(lane_op)));
        }
        self.k.body.iter().all(|st| match st {
            Stmt::Loop { body, .. } => body.iter().all(lane_op),
            Stmt::Set(_, Inst::Load(Addr::Field { lanes, .. })) => weighted && lanes.is_empty(),
            _ => false,
        })
    }

    /// Feature blocking: when a row's accumulators would need more vector
    /// registers than x64 has (16 xmm; past about 8 vectors of accumulators
    /// the temporaries spill), the row's init, edge loop and finish run once
    /// per block of [`BLOCK_VECTORS`] (or [`BLOCK_VECTORS_ADD_ONLY`]) vectors of lanes, each pass re-reading
    /// the row's (cached) columns. Only for kernels whose lanes are
    /// independent: every feature loop has the same width symbol, none sits
    /// in another or reduces across lanes, scratch arrays have that width,
    /// and no store outside a feature loop accumulates (a parameter output),
    /// so that running scalar statements once per block changes nothing.
    /// Measured (F = 64 / 128 f32 sum, power-law graph): 227 -> 185 ms and
    /// 645 -> 372 ms.
    pub(super) fn blocking_plan(&self) -> TResult<Option<(WidthId, i64, i64)>> {
        // A pre-pass would be redone per block (unless the blocks are
        // those of a split body's tiles, which run its loops alone).
        if self.key.stencil.is_some() || (!self.k.pre_body.is_empty() && self.split.is_none()) {
            return Ok(None);
        }
        let (_, vl) = self.vlen();
        let block = vl
            * if self.edges_only_add() {
                BLOCK_VECTORS_ADD_ONLY
            } else if self.edges_weighted_sum() {
                BLOCK_VECTORS_WEIGHTED
            } else {
                BLOCK_VECTORS
            };
        let mut width: Option<WidthId> = None;
        for list in [&self.k.init, &self.k.pre_body, &self.k.body, &self.k.finish] {
            for st in list.iter() {
                match st {
                    Stmt::Loop { lane, width: w, body } => {
                        if width.is_some_and(|x| x != *w)
                            || body.iter().any(|b| matches!(b, Stmt::Loop { .. }))
                            || !Self::reductions(body).is_empty()
                            || !self.vectorizable(*lane, body)
                        {
                            return Ok(None);
                        }
                        width = Some(*w);
                    }
                    Stmt::Store(Addr::Output { out, lane: None }, _) => {
                        let role = self.k.outputs.get(*out as usize).map(|o| o.role);
                        if role == Some(Role::Param) {
                            return Ok(None);
                        }
                    }
                    // Per-edge scalar work that is dear (an attention score's
                    // exp) would be redone in every block.
                    Stmt::Set(
                        _,
                        Inst::Unary(UnOp::Exp | UnOp::Ln | UnOp::Tanh | UnOp::Sigmoid | UnOp::Sqrt, _) | Inst::Powi(..),
                    ) if std::ptr::eq(list, &self.k.body) && self.split.is_none() => {
                        return Ok(None);
                    }
                    Stmt::Store(..) | Stmt::Set(..) => {}
                }
            }
        }
        let Some(w) = width else { return Ok(None) };
        let n = self.width(w)?;
        if n <= block || n % block != 0 || self.k.scratch.iter().any(|s| *s != w) {
            return Ok(None);
        }
        Ok(Some((w, n, block)))
    }

    /// Keep a scratch array (an accumulator) in vector registers instead of
    /// the stack when every access to it sits in a SIMD loop short enough to
    /// unroll (at most [`MAX_UNROLL`] vectors) and indexes it by that loop's
    /// own lane. The edge loop then updates registers, not memory.
    pub(super) fn promote_scratch(&mut self) -> TResult<()> {
        let (vty, vl) = self.vlen();
        let n = self.k.scratch.len();
        let mut ok: Vec<bool> = self
            .k
            .scratch
            .iter()
            .map(|w| self.lanes_per_pass(*w).map(|w| w >= vl && w % vl == 0 && w / vl <= MAX_UNROLL).unwrap_or(false))
            .collect();
        fn walk(t: &Translator<'_>, list: &[Stmt], ok: &mut [bool], vl: i64) {
            for st in list {
                if let Stmt::Loop { lane, width, body } = st {
                    let w = t.lanes_per_pass(*width).unwrap_or(0);
                    let unrollable = w >= vl && w % vl == 0 && w / vl <= MAX_UNROLL && t.vectorizable(*lane, body);
                    for inner in body {
                        let addrs: Vec<&Addr> = match inner {
                            Stmt::Set(_, Inst::Load(a)) => vec![a],
                            Stmt::Store(a, _) => vec![a],
                            _ => vec![],
                        };
                        for a in addrs {
                            if let Addr::Scratch { buf, lane: l } = a {
                                if !unrollable || l != lane {
                                    if let Some(x) = ok.get_mut(*buf as usize) {
                                        *x = false;
                                    }
                                }
                            }
                        }
                    }
                    walk(t, body, ok, vl);
                }
            }
        }
        for list in [&self.k.init, &self.k.pre_body, &self.k.body, &self.k.finish] {
            walk(self, list, &mut ok, vl);
        }
        self.promoted = vec![None; n];
        for (b, promote) in ok.into_iter().enumerate() {
            if !promote {
                continue;
            }
            let w = self.lanes_per_pass(self.k.scratch[b])?;
            let vars: Vec<Variable> = (0..w / vl)
                .map(|_| {
                    let v = self.b.declare_var(vty);
                    let z = self.fconst(0.0);
                    let zv = self.b.ins().splat(vty, z);
                    self.b.def_var(v, zv);
                    v
                })
                .collect();
            self.promoted[b] = Some(vars);
        }
        Ok(())
    }

    /// The promoted variable of a scratch access at vector chunk `c`.
    pub(super) fn promoted_var(&self, a: &Addr, c: Option<usize>) -> Option<Variable> {
        match (a, c) {
            (Addr::Scratch { buf, .. }, Some(c)) => self.promoted.get(*buf as usize)?.as_ref()?.get(c).copied(),
            _ => None,
        }
    }

    /// The loop as SIMD code (`f32x4`/`f64x2`, 128-bit like every x64
    /// Cranelift vector) when [`Translator::vectorizable`] holds and the
    /// width is a multiple of the vector length. Returns whether it did.
    pub(super) fn vector_loop(&mut self, lane: LoopVar, start: i64, n: i64, body: &[Stmt]) -> TResult<bool> {
        let (vty, vl) = match self.key.dtype {
            DType::F32 => (types::F32X4, 4i64),
            DType::F64 => (types::F64X2, 2i64),
        };
        if n < vl || n % vl != 0 || !self.vectorizable(lane, body) {
            return Ok(false);
        }
        let l = lane.0 as usize;
        let touches_promoted = body.iter().any(|st| match st {
            Stmt::Set(_, Inst::Load(Addr::Scratch { buf, .. })) | Stmt::Store(Addr::Scratch { buf, .. }, _) => {
                self.promoted.get(*buf as usize).is_some_and(|p| p.is_some())
            }
            _ => false,
        });
        // Vector partial sums of the loop's scalar accumulators.
        let mut partial: Vec<(Var, Variable)> = Vec::new();
        let mut red: Vec<u32> = Self::reductions(body).into_iter().collect();
        red.sort_unstable();
        for acc in red {
            let pv = self.b.declare_var(vty);
            let z = self.fconst(0.0);
            let zv = self.b.ins().splat(vty, z);
            self.b.def_var(pv, zv);
            partial.push((Var(acc), pv));
        }
        let vflags = MemFlagsData::new().with_notrap();
        let little = MemFlagsData::new().with_endianness(ir::Endianness::Little);
        // Fully unrolled (constant lanes) when an accumulator lives in
        // registers; otherwise a counted loop.
        // Promoted registers cover a pass's lanes: a block's under row
        // blocking (reused by every block), all of them under a split
        // body's tile blocks (a block uses its own).
        let base = if self.split.is_some() { (start / vl) as usize } else { 0 };
        let chunks: Vec<Option<usize>> =
            if touches_promoted { (base..base + (n / vl) as usize).map(Some).collect() } else { vec![None] };
        let mut loop_blocks = None;
        if !touches_promoted {
            let first = self.b.ins().iconst(types::I64, start);
            loop_blocks = Some(self.open_loop(first, Bound::Imm(start + n)));
        }
        let prev = self.lanes[l];
        for chunk in chunks {
            let k = match (chunk, &loop_blocks) {
                (Some(c), _) => self.b.ins().iconst(types::I64, start + (c - base) as i64 * vl),
                (None, Some(lp)) => lp.counter,
                (None, None) => return Err("internal: no loop counter".into()),
            };
            self.lanes[l] = Some(k);
            // Loop-local values live in SSA here: each assignment defines the
            // vector value of its variable for the rest of the iteration.
            let mut local: std::collections::HashMap<u32, Value> = std::collections::HashMap::new();
            for st in body {
                match st {
                    Stmt::Set(v, Inst::Load(a)) if self.promoted_var(a, chunk).is_some() => {
                        let pv = self.promoted_var(a, chunk).ok_or("promoted scratch")?;
                        let val = self.b.use_var(pv);
                        local.insert(v.0, val);
                    }
                    Stmt::Store(a, v) if self.promoted_var(a, chunk).is_some() => {
                        let pv = self.promoted_var(a, chunk).ok_or("promoted scratch")?;
                        let val = self.vector_operand(*v, vty, &local)?;
                        self.b.def_var(pv, val);
                    }
                    Stmt::Set(acc, Inst::Binary(BinOp::Add, _, x)) if partial.iter().any(|(a, _)| a == acc) => {
                        let pv = partial.iter().find(|(a, _)| a == acc).map(|(_, p)| *p).ok_or("accumulator")?;
                        let xv = self.vector_operand(*x, vty, &local)?;
                        let cur = self.b.use_var(pv);
                        let sum = self.b.ins().fadd(cur, xv);
                        self.b.def_var(pv, sum);
                    }
                    Stmt::Set(v, inst) => {
                        let val = self.vector_inst(inst, Axis::Lane(lane), vty, vflags, little, &local)?;
                        local.insert(v.0, val);
                    }
                    Stmt::Store(a, v) => {
                        let val = self.vector_operand(*v, vty, &local)?;
                        let addr = self.addr(a)?;
                        match Self::stride(a, lane) {
                            Some(true) => {
                                self.b.ins().store(vflags, val, addr, 0);
                            }
                            _ => {
                                // An invariant address: every lane stores the same
                                // value; the last store wins, as in the scalar loop.
                                let x = self.b.ins().extractlane(val, (vl - 1) as u8);
                                self.b.ins().store(flags(), x, addr, 0);
                            }
                        }
                    }
                    Stmt::Loop { .. } => return Err("nested loop in a SIMD feature loop".into()),
                }
            }
        }
        self.lanes[l] = prev;
        if let Some(lp) = loop_blocks {
            self.close_loop(lp, vl);
        }
        // acc += the partial sums, lane by lane.
        for (acc, pv) in partial {
            let v = self.b.use_var(pv);
            let mut total = self.num_var(acc)?;
            for lane_ix in 0..vl {
                let x = self.b.ins().extractlane(v, lane_ix as u8);
                total = self.b.ins().fadd(total, x);
            }
            let var = self.var(acc)?;
            self.b.def_var(var, total);
        }
        Ok(true)
    }

    pub(super) fn vector_operand(
        &mut self,
        v: Var,
        vty: ir::Type,
        local: &std::collections::HashMap<u32, Value>,
    ) -> TResult<Value> {
        match local.get(&v.0) {
            Some(x) => Ok(*x),
            None => {
                let x = self.num_var(v)?;
                Ok(self.b.ins().splat(vty, x))
            }
        }
    }

    pub(super) fn vector_inst(
        &mut self,
        inst: &Inst,
        axis: Axis,
        vty: ir::Type,
        vflags: MemFlagsData,
        little: MemFlagsData,
        local: &std::collections::HashMap<u32, Value>,
    ) -> TResult<Value> {
        let op = |t: &mut Self, v: &Var| t.vector_operand(*v, vty, local);
        // fcmp yields an integer lane mask; bitselect wants the value's type.
        let mask = |t: &mut Self, cc: FloatCC, x: Value, y: Value| {
            let m = fcmp(&mut t.b, cc, x, y);
            t.b.ins().bitcast(vty, little, m)
        };
        Ok(match inst {
            Inst::Unary(UnOp::Not, x) => {
                let m = *local.get(&x.0).ok_or("mask operand")?;
                self.b.ins().bnot(m)
            }
            Inst::Binary(BinOp::And, x, y) | Inst::Binary(BinOp::Or, x, y) => {
                let a = *local.get(&x.0).ok_or("mask operand")?;
                let b2 = *local.get(&y.0).ok_or("mask operand")?;
                if matches!(inst, Inst::Binary(BinOp::And, ..)) {
                    self.b.ins().band(a, b2)
                } else {
                    self.b.ins().bor(a, b2)
                }
            }
            Inst::Const(c) => {
                let x = self.fconst(*c);
                self.b.ins().splat(vty, x)
            }
            Inst::Degree | Inst::Rank => {
                let x = self.inst(inst, VarKind::Num)?;
                self.b.ins().splat(vty, x)
            }
            Inst::Load(a) => {
                let addr = self.addr(a)?;
                if self.axis_stride(a, axis) == Some(true) {
                    self.b.ins().load(vty, vflags, addr, 0)
                } else {
                    let x = self.b.ins().load(self.num, flags(), addr, 0);
                    self.b.ins().splat(vty, x)
                }
            }
            Inst::Copy(x) => op(self, x)?,
            Inst::Unary(u, x) => {
                let x = op(self, x)?;
                match u {
                    UnOp::Neg => self.b.ins().fneg(x),
                    UnOp::Abs => self.b.ins().fabs(x),
                    UnOp::Sqrt => self.b.ins().sqrt(x),
                    UnOp::Relu => {
                        let z = self.fconst(0.0);
                        let zero = self.b.ins().splat(vty, z);
                        let pos = mask(self, FloatCC::GreaterThan, x, zero);
                        self.b.ins().bitselect(pos, x, zero)
                    }
                    _ => return Err("no vector form".into()),
                }
            }
            Inst::Binary(o, xv, yv) => {
                let (x, y) = (op(self, xv)?, op(self, yv)?);
                match o {
                    BinOp::Add => self.b.ins().fadd(x, y),
                    BinOp::Sub => self.b.ins().fsub(x, y),
                    BinOp::Mul => self.b.ins().fmul(x, y),
                    BinOp::Div => self.b.ins().fdiv(x, y),
                    BinOp::Min | BinOp::Max => {
                        // As the scalar path: x if (x < y) (resp. >), else y;
                        // and x when y is NaN. One compare and select when
                        // an operand is never NaN.
                        let cc = if *o == BinOp::Min { FloatCC::LessThan } else { FloatCC::GreaterThan };
                        if self.never_nan(*xv) {
                            let take_y = mask(self, cc, y, x);
                            self.b.ins().bitselect(take_y, y, x)
                        } else {
                            let take_x = mask(self, cc, x, y);
                            let r = self.b.ins().bitselect(take_x, x, y);
                            if self.never_nan(*yv) {
                                r
                            } else {
                                let y_nan = mask(self, FloatCC::Unordered, y, y);
                                self.b.ins().bitselect(y_nan, x, r)
                            }
                        }
                    }
                    BinOp::LeakyRelu => {
                        let z = self.fconst(0.0);
                        let zero = self.b.ins().splat(vty, z);
                        let pos = mask(self, FloatCC::GreaterThan, x, zero);
                        let scaled = self.b.ins().fmul(y, x);
                        self.b.ins().bitselect(pos, x, scaled)
                    }
                    _ => return Err("no vector form".into()),
                }
            }
            Inst::Select(c, x, y) => {
                let (xv, yv) = (op(self, x)?, op(self, y)?);
                match local.get(&c.0) {
                    // A lane mask (all-ones / all-zeros bits per lane).
                    Some(m) => self.b.ins().bitselect(*m, xv, yv),
                    None => {
                        let c = self.bool_var(*c)?;
                        self.b.ins().select(c, xv, yv)
                    }
                }
            }
            Inst::Cmp(c, x, y) => {
                let (x, y) = (op(self, x)?, op(self, y)?);
                mask(self, float_cc(*c), x, y)
            }
            Inst::Powi(..) => return Err("no vector form".into()),
        })
    }
}
