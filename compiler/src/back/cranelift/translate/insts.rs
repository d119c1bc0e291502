//! Scalar instruction selection: the loop IR's instructions as CLIF,
//! math functions through the registered Rust symbols (`math`).

use super::*;

impl Translator<'_> {
    pub(super) fn inst(&mut self, inst: &Inst, kind: VarKind) -> TResult<Value> {
        use VarKind::{Bool, Num};
        let want = |k: VarKind, what: &str| -> TResult<()> {
            if k == kind {
                Ok(())
            } else {
                Err(format!("{what} assigned to a {kind:?} variable"))
            }
        };
        Ok(match inst {
            Inst::Const(c) => match kind {
                Num => self.fconst(*c),
                Bool => self.b.ins().iconst(types::I8, i64::from(*c != 0.0)),
            },
            Inst::Load(a) => {
                want(Num, "a load")?;
                let addr = self.addr(a)?;
                self.load_num(a, addr, flags())?
            }
            Inst::Copy(v) => {
                want(self.kind(*v)?, "a copy")?;
                self.use_var(*v)?
            }
            Inst::Degree => {
                want(Num, "the degree")?;
                let deg = self.cur.deg.ok_or("degree outside a row")?;
                self.b.ins().fcvt_from_uint(self.num, deg)
            }
            Inst::Rank => {
                want(Num, "the rank")?;
                let (p, first) = self.cur.rank.ok_or("rank outside the edge loop")?;
                let rank = self.b.ins().isub(p, first);
                self.b.ins().fcvt_from_uint(self.num, rank)
            }
            Inst::Unary(UnOp::Not, v) => {
                let vk = self.kind(*v)?;
                want(vk, "not")?;
                let x = self.use_var(*v)?;
                match vk {
                    Bool => self.b.ins().icmp_imm_u(IntCC::Equal, x, 0),
                    // `not` of a number is the number (interp::apply_unary).
                    Num => x,
                }
            }
            Inst::Unary(u, v) => {
                want(Num, "a unary operation")?;
                let x = self.num_var(*v)?;
                self.unary(*u, x)?
            }
            Inst::Binary(op @ (BinOp::And | BinOp::Or), x, y) => {
                want(Bool, "and/or")?;
                let (x, y) = (self.bool_var(*x)?, self.bool_var(*y)?);
                if *op == BinOp::And {
                    self.b.ins().band(x, y)
                } else {
                    self.b.ins().bor(x, y)
                }
            }
            Inst::Binary(op @ (BinOp::Min | BinOp::Max), xv, yv) => {
                want(Num, "a binary operation")?;
                let (x, y) = (self.num_var(*xv)?, self.num_var(*yv)?);
                let cc = if *op == BinOp::Min { FloatCC::LessThan } else { FloatCC::GreaterThan };
                match (self.never_nan(*xv), self.never_nan(*yv)) {
                    // The never-NaN operand is kept when the compare fails
                    // (NaN compares false), as Rust's max/min keep it.
                    (true, _) => {
                        let take_y = fcmp(&mut self.b, cc, y, x);
                        self.b.ins().select(take_y, y, x)
                    }
                    (false, true) => {
                        let take_x = fcmp(&mut self.b, cc, x, y);
                        self.b.ins().select(take_x, x, y)
                    }
                    (false, false) => self.binary(*op, x, y),
                }
            }
            Inst::Binary(op, x, y) => {
                want(Num, "a binary operation")?;
                let (x, y) = (self.num_var(*x)?, self.num_var(*y)?);
                self.binary(*op, x, y)
            }
            Inst::Powi(v, n) => {
                want(Num, "powi")?;
                let x = self.num_var(*v)?;
                self.powi(x, *n)
            }
            Inst::Cmp(c, x, y) => {
                want(Bool, "a comparison")?;
                let (x, y) = (self.num_var(*x)?, self.num_var(*y)?);
                fcmp(&mut self.b, float_cc(*c), x, y)
            }
            Inst::Select(c, x, y) => {
                want(self.kind(*x)?, "a select")?;
                want(self.kind(*y)?, "a select")?;
                let c = self.bool_var(*c)?;
                let (x, y) = (self.use_var(*x)?, self.use_var(*y)?);
                self.b.ins().select(c, x, y)
            }
        })
    }

    pub(super) fn unary(&mut self, u: UnOp, x: Value) -> TResult<Value> {
        let call = |t: &mut Self, f: Option<ir::FuncRef>, x: Value| -> TResult<Value> {
            let f = f.ok_or("math function not declared")?;
            let inst = t.b.ins().call(f, &[x]);
            t.b.inst_results(inst).first().copied().ok_or_else(|| "math call has no result".into())
        };
        let math = self.math;
        Ok(match u {
            UnOp::Neg => self.b.ins().fneg(x),
            UnOp::Abs => self.b.ins().fabs(x),
            UnOp::Sqrt => self.b.ins().sqrt(x),
            UnOp::Exp => call(self, math.exp, x)?,
            UnOp::Ln => call(self, math.ln, x)?,
            UnOp::Tanh => call(self, math.tanh, x)?,
            UnOp::Sigmoid => {
                // 1 / (1 + exp(-x)), in interp's order.
                let n = self.b.ins().fneg(x);
                let e = call(self, math.exp, n)?;
                let one = self.fconst(1.0);
                let d = self.b.ins().fadd(one, e);
                self.b.ins().fdiv(one, d)
            }
            UnOp::Relu => {
                // x if x > 0 else 0 (so NaN and -0 give +0).
                let zero = self.fconst(0.0);
                let pos = fcmp(&mut self.b, FloatCC::GreaterThan, x, zero);
                self.b.ins().select(pos, x, zero)
            }
            UnOp::Not => x,
        })
    }

    pub(super) fn binary(&mut self, op: BinOp, x: Value, y: Value) -> Value {
        match op {
            BinOp::Add => self.b.ins().fadd(x, y),
            BinOp::Sub => self.b.ins().fsub(x, y),
            BinOp::Mul => self.b.ins().fmul(x, y),
            BinOp::Div => self.b.ins().fdiv(x, y),
            // Rust's f64::min/max: the ordinary comparison, and a NaN
            // operand yields the other one.
            BinOp::Min => self.min_max(FloatCC::LessThan, x, y),
            BinOp::Max => self.min_max(FloatCC::GreaterThan, x, y),
            BinOp::LeakyRelu => {
                // x if x > 0 else slope * x.
                let zero = self.fconst(0.0);
                let pos = fcmp(&mut self.b, FloatCC::GreaterThan, x, zero);
                let scaled = self.b.ins().fmul(y, x);
                self.b.ins().select(pos, x, scaled)
            }
            // Booleans are handled by the caller.
            BinOp::And | BinOp::Or => x,
        }
    }

    /// `if x cc y { x } else { y }`, then `x` when `y` is NaN.
    pub(super) fn min_max(&mut self, cc: FloatCC, x: Value, y: Value) -> Value {
        let take_x = fcmp(&mut self.b, cc, x, y);
        let r = self.b.ins().select(take_x, x, y);
        let y_nan = self.b.ins().fcmp(FloatCC::Unordered, y, y);
        self.b.ins().select(y_nan, x, r)
    }

    /// `x.powi(n)` as compiler-rt's `__powidf2` computes it: square and
    /// multiply over the bits of |n|, then the reciprocal for negative n.
    pub(super) fn powi(&mut self, x: Value, n: i32) -> Value {
        let mut bits = n.unsigned_abs();
        let mut a = x;
        let mut r: Option<Value> = None;
        loop {
            if bits & 1 == 1 {
                r = Some(match r {
                    None => a,
                    Some(r) => self.b.ins().fmul(r, a),
                });
            }
            bits >>= 1;
            if bits == 0 {
                break;
            }
            a = self.b.ins().fmul(a, a);
        }
        let r = match r {
            Some(r) => r,
            None => self.fconst(1.0),
        };
        if n < 0 {
            let one = self.fconst(1.0);
            self.b.ins().fdiv(one, r)
        } else {
            r
        }
    }

    pub(super) fn fconst(&mut self, c: f64) -> Value {
        match self.key.dtype {
            DType::F32 => self.b.ins().f32const(c as f32),
            DType::F64 => self.b.ins().f64const(c),
        }
    }
}
