//! `exp`, `ln`, `tanh` and `sigmoid` as inline PTX.
//!
//! PTX has no correctly rounded transcendental instructions (`ex2.approx`
//! and `lg2.approx` are approximations with no bound on the f32 result once
//! scaled, and none exist for f64), and the CPU back ends call the host's
//! libm. So each function is written here once, for both dtypes, from
//! round-to-nearest operations only (`add.rn`, `mul.rn`, `fma.rn`,
//! `div.rn`, integer bit manipulation): the same PTX gives the same bits on
//! every GPU, and the CPU simulator computes those bits too.
//!
//! Accuracy against the correctly rounded result: the bound stated (and
//! asserted by `compiler/tests/ptx_math.rs` over dense sweeps of each
//! domain, about 60,000 inputs per function and dtype, specials included),
//! and the worst case those sweeps found:
//!
//! | function  | bound  | measured f32 | measured f64 |
//! |-----------|--------|--------------|--------------|
//! | `exp`     | 2 ulp  | 1 ulp        | 1 ulp        |
//! | `ln`      | 2 ulp  | 1 ulp        | 1 ulp        |
//! | `tanh`    | 4 ulp  | 2 ulp        | 3 ulp        |
//! | `sigmoid` | 4 ulp  | 3 ulp        | 2 ulp        |
//!
//! (ulps of the result; sigmoid against its formula `1 / (1 + exp(-x))`
//! evaluated in the dtype, so that where `exp(-x)` overflows f32 the
//! result is 0 as on the CPU). The CPU's libm is itself within about 1 ulp, so a
//! GPU result is within these bounds plus 1 ulp of the CPU's; the
//! conformance tolerance of kernels that call these functions follows.
//!
//! - `exp`: Cody–Waite reduction `x = n·ln2 + r`, |r| ≤ ln2/2, with the
//!   products inside `fma`; Taylor polynomial (degree 7 / 13) in Horner
//!   form; `2^n` applied as two exact power-of-two factors so results that
//!   round to subnormals are rounded once. x is clamped to [-104, 89]
//!   (f32) / [-746, 710] (f64), beyond which the result is 0 or ∞ anyway;
//!   NaN passes through.
//! - `ln`: fdlibm's `log`: x = 2^e·m with m in [√½, √2), s = f/(2+f) for
//!   f = m − 1, the odd series of atanh in s (5 / 10 terms), recombined
//!   as `e·ln2_hi − ((hfsq − (s·(hfsq + R) + e·ln2_lo)) − f)`. Subnormal
//!   inputs are scaled first; 0 gives −∞, negatives NaN, +∞ gives +∞.
//! - `tanh`: sign(x)·t/(t + 2) with t = expm1(2|x|), expm1 by its Taylor
//!   series below 1 and exp − 1 above; ±1 beyond 10 (f32) / 22 (f64);
//!   the sign bit is copied, so tanh(−0) = −0.
//! - `sigmoid`: 1/(1 + exp(−x)), the CPU back ends' formula.

use tiga_ptx::{BinOp as PBin, Cmp, FunctionBuilder, Op, Operand, Reg, Round, Type as PTy, UnOp as PUn};

/// The float dtype a sequence computes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Float {
    F32,
    F64,
}

impl Float {
    pub(super) fn ty(self) -> PTy {
        match self {
            Float::F32 => PTy::F32,
            Float::F64 => PTy::F64,
        }
    }

    fn bits_ty(self) -> PTy {
        match self {
            Float::F32 => PTy::B32,
            Float::F64 => PTy::B64,
        }
    }

    fn uint_ty(self) -> PTy {
        match self {
            Float::F32 => PTy::U32,
            Float::F64 => PTy::U64,
        }
    }

    pub(super) fn num(self, c: f64) -> Operand {
        match self {
            Float::F32 => Operand::F32(c as f32),
            Float::F64 => Operand::F64(c),
        }
    }

    /// A literal given by its f32 and f64 bit patterns.
    fn bits(self, b32: u32, b64: u64) -> Operand {
        match self {
            Float::F32 => Operand::F32(f32::from_bits(b32)),
            Float::F64 => Operand::F64(f64::from_bits(b64)),
        }
    }

    fn mantissa_bits(self) -> i64 {
        match self {
            Float::F32 => 23,
            Float::F64 => 52,
        }
    }

    fn bias(self) -> i64 {
        match self {
            Float::F32 => 127,
            Float::F64 => 1023,
        }
    }
}

/// Small helpers over the builder for one float type.
struct Seq<'b> {
    b: &'b mut FunctionBuilder,
    f: Float,
}

impl Seq<'_> {
    fn t(&self) -> PTy {
        self.f.ty()
    }

    fn bin(&mut self, op: PBin, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        let t = self.t();
        self.b.binary(op, t, a, b)
    }

    fn fma(&mut self, a: impl Into<Operand>, b: impl Into<Operand>, c: impl Into<Operand>) -> Reg {
        let t = self.t();
        let dst = self.b.reg(t);
        self.b.push(Op::Fma { ty: t, dst, a: a.into(), b: b.into(), c: c.into() });
        dst
    }

    fn setp(&mut self, cmp: Cmp, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        let t = self.t();
        let dst = self.b.reg(PTy::Pred);
        self.b.push(Op::Setp { cmp, ty: t, dst, a: a.into(), b: b.into() });
        dst
    }

    /// `pred ? a : b`.
    fn select(&mut self, pred: Reg, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        let t = self.t();
        let dst = self.b.reg(t);
        self.b.push(Op::Selp { ty: t, dst, a: a.into(), b: b.into(), pred });
        dst
    }

    /// `p(x)` for coefficients `c[0] + c[1]·x + …`, in Horner form with fma.
    fn horner(&mut self, x: Reg, c: &[f64]) -> Reg {
        let n = c.len();
        let last = self.f.num(c[n - 1]);
        let mut acc = self.b.mov(self.t(), last);
        for k in (0..n - 1).rev() {
            let ck = self.f.num(c[k]);
            acc = self.fma(acc, x, ck);
        }
        acc
    }

    /// The float with the bits of integer register `i` (a `u32`/`u64` of the
    /// float's width).
    fn float_of_bits(&mut self, i: Reg) -> Reg {
        let t = self.t();
        let dst = self.b.reg(t);
        self.b.push(Op::Mov { ty: self.f.bits_ty(), dst, src: i.into() });
        dst
    }

    fn bits_of(&mut self, x: Reg) -> Reg {
        let dst = self.b.reg(self.f.uint_ty());
        self.b.push(Op::Mov { ty: self.f.bits_ty(), dst, src: x.into() });
        dst
    }

    /// `2^e` for an `s32` register `e` within the normal exponent range.
    fn pow2(&mut self, e: Reg) -> Reg {
        let bias = self.f.bias();
        let biased = self.b.binary(PBin::Add, PTy::S32, e, bias);
        let wide = match self.f {
            Float::F32 => biased,
            Float::F64 => {
                let w = self.b.reg(PTy::S64);
                self.b.push(Op::Cvt { round: None, dst_ty: PTy::S64, src_ty: PTy::S32, dst: w, src: biased.into() });
                w
            }
        };
        let shifted = self.b.binary(PBin::Shl, self.f.bits_ty(), wide, self.f.mantissa_bits());
        self.float_of_bits(shifted)
    }
}

fn factorials(n: usize) -> Vec<f64> {
    let mut c = vec![1.0];
    for k in 1..n {
        let prev = c[k - 1];
        c.push(prev / k as f64);
    }
    c
}

/// `exp(x)`.
pub(super) fn exp(b: &mut FunctionBuilder, f: Float, x: Reg) -> Reg {
    let mut s = Seq { b, f };
    let (lo, hi) = match f {
        Float::F32 => (-104.0, 89.0),
        Float::F64 => (-746.0, 710.0),
    };
    // Clamp with ordered comparisons, which are false for NaN.
    let p_hi = s.setp(Cmp::Gt, x, f.num(hi));
    let x1 = s.select(p_hi, f.num(hi), x);
    let p_lo = s.setp(Cmp::Lt, x1, f.num(lo));
    let x2 = s.select(p_lo, f.num(lo), x1);
    let log2e = f.bits(0x3FB8_AA3B, 0x3FF7_1547_652B_82FE);
    let scaled = s.bin(PBin::Mul, x2, log2e);
    let t = s.t();
    let kn = s.b.reg(t);
    s.b.push(Op::Cvt { round: Some(Round::Rni), dst_ty: t, src_ty: t, dst: kn, src: scaled.into() });
    let neg_kn = s.b.reg(t);
    s.b.push(Op::Unary { op: PUn::Neg, ty: t, dst: neg_kn, a: kn.into() });
    let ln2_hi = f.bits(0x3F31_7218, 0x3FE6_2E42_FEFA_39EF);
    let ln2_lo = f.bits(0xB102_E308, 0x3C7A_BC9E_3B39_803F);
    let r0 = s.fma(neg_kn, ln2_hi, x2);
    let r = s.fma(neg_kn, ln2_lo, r0);
    let degree = match f {
        Float::F32 => 8,
        Float::F64 => 14,
    };
    let p = s.horner(r, &factorials(degree));
    // n = kn as an integer (exact: kn is integral and small); 2^n as two
    // factors 2^(n>>1) and 2^(n - (n>>1)), each a normal number.
    let n = s.b.reg(PTy::S32);
    s.b.push(Op::Cvt { round: Some(Round::Rzi), dst_ty: PTy::S32, src_ty: t, dst: n, src: kn.into() });
    let n1 = s.b.binary(PBin::Shr, PTy::S32, n, 1);
    let n2 = s.b.binary(PBin::Sub, PTy::S32, n, n1);
    let f1 = s.pow2(n1);
    let f2 = s.pow2(n2);
    let y = s.bin(PBin::Mul, p, f1);
    s.bin(PBin::Mul, y, f2)
}

/// `ln(x)`.
pub(super) fn ln(b: &mut FunctionBuilder, f: Float, x: Reg) -> Reg {
    let mut s = Seq { b, f };
    let ut = f.uint_ty();
    let (min_normal, sub_scale, sub_shift) = match f {
        Float::F32 => (f.bits(0x0080_0000, 0), f.num(8_388_608.0), -23),
        Float::F64 => (f.bits(0, 0x0010_0000_0000_0000), f.num(4_503_599_627_370_496.0), -52),
    };
    let p_sub = s.setp(Cmp::Lt, x, min_normal);
    let xs = s.bin(PBin::Mul, x, sub_scale);
    let x1 = s.select(p_sub, xs, x);
    let e_adj = s.b.reg(PTy::S32);
    s.b.push(Op::Selp { ty: PTy::S32, dst: e_adj, a: Operand::Int(sub_shift), b: Operand::Int(0), pred: p_sub });

    let bits = s.bits_of(x1);
    let mb = f.mantissa_bits();
    let (exp_mask, mant_mask, one_bits, sqrt2_bits) = match f {
        Float::F32 => (0xff_i64, 0x007f_ffff_i64, 0x3f80_0000_i64, 0x3fb5_04f3_i64),
        Float::F64 => (0x7ff, 0x000f_ffff_ffff_ffff, 0x3ff0_0000_0000_0000, 0x3ff6_a09e_667f_3bcd),
    };
    let shifted = s.b.binary(PBin::Shr, ut, bits, mb);
    let biased = s.b.binary(PBin::And, f.bits_ty(), shifted, exp_mask);
    let biased32 = match f {
        Float::F32 => biased,
        Float::F64 => {
            let r = s.b.reg(PTy::U32);
            s.b.push(Op::Cvt { round: None, dst_ty: PTy::U32, src_ty: PTy::U64, dst: r, src: biased.into() });
            r
        }
    };
    let e0 = s.b.binary(PBin::Sub, PTy::S32, biased32, f.bias());
    let e1 = s.b.binary(PBin::Add, PTy::S32, e0, e_adj);
    let mant = s.b.binary(PBin::And, f.bits_ty(), bits, mant_mask);
    let m_bits = s.b.binary(PBin::Or, f.bits_ty(), mant, one_bits);
    // m in [1, 2); above √2, halve it and count one more in e.
    let p_big = s.b.reg(PTy::Pred);
    s.b.push(Op::Setp { cmp: Cmp::Gt, ty: ut, dst: p_big, a: m_bits.into(), b: Operand::Int(sqrt2_bits) });
    let half_bits = s.b.binary(PBin::Sub, ut, m_bits, 1_i64 << mb);
    let m_sel = s.b.reg(ut);
    s.b.push(Op::Selp { ty: ut, dst: m_sel, a: half_bits.into(), b: m_bits.into(), pred: p_big });
    let e_plus = s.b.binary(PBin::Add, PTy::S32, e1, 1);
    let e = s.b.reg(PTy::S32);
    s.b.push(Op::Selp { ty: PTy::S32, dst: e, a: e_plus.into(), b: e1.into(), pred: p_big });
    let m = s.float_of_bits(m_sel);

    let t = s.t();
    let fm = s.bin(PBin::Sub, m, f.num(1.0));
    let two_f = s.bin(PBin::Add, fm, f.num(2.0));
    let sv = s.bin(PBin::Div, fm, two_f);
    let z = s.bin(PBin::Mul, sv, sv);
    let terms = match f {
        Float::F32 => 5,
        Float::F64 => 10,
    };
    // R = z·(2/3 + z·(2/5 + …)).
    let coeffs: Vec<f64> = (1..=terms).map(|k| 2.0 / (2 * k + 1) as f64).collect();
    let poly = s.horner(z, &coeffs);
    let rr = s.bin(PBin::Mul, poly, z);
    let ff = s.bin(PBin::Mul, fm, fm);
    let hfsq = s.bin(PBin::Mul, ff, f.num(0.5));
    let dk = s.b.reg(t);
    s.b.push(Op::Cvt { round: Some(Round::Rn), dst_ty: t, src_ty: PTy::S32, dst: dk, src: e.into() });
    let (ln2_hi, ln2_lo) = match f {
        Float::F32 => (f.bits(0x3f31_7180, 0), f.bits(0x3717_f7d1, 0)),
        Float::F64 => (f.bits(0, 0x3fe6_2e42_fee0_0000), f.bits(0, 0x3dea_39ef_3579_3c76)),
    };
    let hr = s.bin(PBin::Add, hfsq, rr);
    let shr = s.bin(PBin::Mul, sv, hr);
    let dlo = s.bin(PBin::Mul, dk, ln2_lo);
    let inner = s.bin(PBin::Add, shr, dlo);
    let a = s.bin(PBin::Sub, hfsq, inner);
    let bq = s.bin(PBin::Sub, a, fm);
    let dhi = s.bin(PBin::Mul, dk, ln2_hi);
    let res = s.bin(PBin::Sub, dhi, bq);

    // Special inputs, in increasing priority: +∞, 0, negative, NaN.
    let inf = f.num(f64::INFINITY);
    let p_inf = s.setp(Cmp::Eq, x, inf.clone());
    let r1 = s.select(p_inf, inf, res);
    let p_zero = s.setp(Cmp::Eq, x, f.num(0.0));
    let r2 = s.select(p_zero, f.num(f64::NEG_INFINITY), r1);
    let p_neg = s.setp(Cmp::Lt, x, f.num(0.0));
    let r3 = s.select(p_neg, f.num(f64::NAN), r2);
    let p_nan = s.setp(Cmp::Nan, x, x);
    s.select(p_nan, x, r3)
}

/// `expm1(y)` for y ≥ 0 (NaN passes through).
fn expm1_nonneg(b: &mut FunctionBuilder, f: Float, y: Reg) -> Reg {
    let e = exp(b, f, y);
    let mut s = Seq { b, f };
    let big = s.bin(PBin::Sub, e, f.num(1.0));
    let terms = match f {
        Float::F32 => 11,
        Float::F64 => 19,
    };
    // expm1(y) = y·Σ y^k/(k+1)!.
    let coeffs: Vec<f64> = factorials(terms + 1).into_iter().skip(1).collect();
    let q = s.horner(y, &coeffs);
    let small = s.bin(PBin::Mul, y, q);
    let p_small = s.setp(Cmp::Lt, y, f.num(1.0));
    s.select(p_small, small, big)
}

/// `tanh(x)`.
pub(super) fn tanh(b: &mut FunctionBuilder, f: Float, x: Reg) -> Reg {
    let t = f.ty();
    let a = b.reg(t);
    b.push(Op::Unary { op: PUn::Abs, ty: t, dst: a, a: x.into() });
    let y = b.binary(PBin::Add, t, a, a);
    let em1 = expm1_nonneg(b, f, y);
    let mut s = Seq { b, f };
    let den = s.bin(PBin::Add, em1, f.num(2.0));
    let q = s.bin(PBin::Div, em1, den);
    let limit = match f {
        Float::F32 => 10.0,
        Float::F64 => 22.0,
    };
    let p_sat = s.setp(Cmp::Gt, a, f.num(limit));
    let mag = s.select(p_sat, f.num(1.0), q);
    // Copy x's sign bit onto the magnitude (the bits of x as a signed
    // integer are negative exactly when its sign bit is set, -0 included).
    let xb = s.bits_of(x);
    let signed = match f {
        Float::F32 => PTy::S32,
        Float::F64 => PTy::S64,
    };
    let p_neg = s.b.reg(PTy::Pred);
    s.b.push(Op::Setp { cmp: Cmp::Lt, ty: signed, dst: p_neg, a: xb.into(), b: Operand::Int(0) });
    let neg = s.b.reg(t);
    s.b.push(Op::Unary { op: PUn::Neg, ty: t, dst: neg, a: mag.into() });
    s.select(p_neg, neg, mag)
}

/// `sigmoid(x) = 1 / (1 + exp(-x))`.
pub(super) fn sigmoid(b: &mut FunctionBuilder, f: Float, x: Reg) -> Reg {
    let t = f.ty();
    let nx = b.reg(t);
    b.push(Op::Unary { op: PUn::Neg, ty: t, dst: nx, a: x.into() });
    let e = exp(b, f, nx);
    let den = b.binary(PBin::Add, t, e, f.num(1.0));
    b.binary(PBin::Div, t, f.num(1.0), den)
}
