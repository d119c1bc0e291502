//! Vector code, as the plan says: SIMD feature loops (counted, or unrolled
//! onto promoted accumulators), the lanes of each feature block, scratch
//! accumulators in vector registers, and the SIMD form of each
//! instruction.

use super::*;

impl Translator<'_> {
    /// The plan's vector type and lanes.
    pub(super) fn vlen(&self) -> (ir::Type, i64) {
        (self.plan.vector.ty(), self.plan.vector.lanes)
    }

    /// The lanes a feature loop of `width` (`n` lanes) covers in the code
    /// being emitted: its block under feature blocking, else all of them.
    pub(super) fn lane_range(&self, width: WidthId, n: i64) -> (i64, i64) {
        match (self.plan.feature_blocks, self.block_start) {
            (Some(b), Some(start)) if b.width == width => (start, b.block),
            _ => (0, n),
        }
    }

    /// The vector variables of the scratch arrays the plan keeps in
    /// registers (`CodegenPlan::promoted`), each zeroed in the entry block.
    pub(super) fn promote_scratch(&mut self) {
        let (vty, _) = self.vlen();
        let plan = self.plan;
        self.promoted = vec![None; plan.promoted.len()];
        for (b, registers) in plan.promoted.iter().enumerate() {
            let Some(registers) = *registers else { continue };
            let vars: Vec<Variable> = (0..registers)
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
    }

    /// The promoted variable of a scratch access at vector chunk `c`.
    pub(super) fn promoted_var(&self, a: &Addr, c: Option<usize>) -> Option<Variable> {
        match (a, c) {
            (Addr::Scratch { buf, .. }, Some(c)) => self.promoted.get(*buf as usize)?.as_ref()?.get(c).copied(),
            _ => None,
        }
    }

    /// The loop over lanes `start..start + n` as SIMD code (`f32x4` /
    /// `f64x2`, the plan's vector), fully unrolled with constant lanes
    /// when `unrolled` (a promoted accumulator), a counted loop otherwise,
    /// with a vector of partial sums for each of `partial_sums`.
    pub(super) fn vector_loop(
        &mut self,
        lane: LoopVar,
        start: i64,
        n: i64,
        body: &[Stmt],
        unrolled: bool,
        partial_sums: &[Var],
    ) -> TResult<()> {
        let (vty, vl) = self.vlen();
        if n < vl || n % vl != 0 {
            return Err(format!("internal: the plan has {n} lanes of k{} as vectors of {vl}", lane.0));
        }
        let l = lane.0 as usize;
        // Vector partial sums of the loop's scalar accumulators.
        let mut partial: Vec<(Var, Variable)> = Vec::new();
        for &acc in partial_sums {
            let pv = self.b.declare_var(vty);
            let z = self.fconst(0.0);
            let zv = self.b.ins().splat(vty, z);
            self.b.def_var(pv, zv);
            partial.push((acc, pv));
        }
        let vflags = MemFlagsData::new().with_notrap();
        let little = MemFlagsData::new().with_endianness(ir::Endianness::Little);
        // Fully unrolled (constant lanes) when an accumulator lives in
        // registers; otherwise a counted loop.
        // Promoted registers cover a pass's lanes: a block's under row
        // blocking (reused by every block), all of them under a split
        // body's tile blocks (a block uses its own).
        let base = if self.plan.tiles.is_some() { (start / vl) as usize } else { 0 };
        let chunks: Vec<Option<usize>> = if unrolled { (base..base + (n / vl) as usize).map(Some).collect() } else { vec![None] };
        let mut loop_blocks = None;
        if !unrolled {
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
                        match stride(a, lane) {
                            Some(true) => self.store_vector(a, addr, val, vty, vflags)?,
                            _ => {
                                // An invariant address: every lane stores the same
                                // value; the last store wins, as in the scalar loop.
                                let x = self.b.ins().extractlane(val, (vl - 1) as u8);
                                self.store_num(a, addr, x, flags())?;
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
        Ok(())
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
                if axis_stride(self.k, a, axis) == Some(true) {
                    self.load_vector(a, addr, vty, vflags)?
                } else {
                    let x = self.load_num(a, addr, flags())?;
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
