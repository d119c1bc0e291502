//! The numbers: every operation on raw register bits (64 per register, a
//! 32-bit value in the low half), interpreted by the instruction's type.

use super::Fault;
use crate::instruction::{AtomOp, BinOp, Cmp, Round, ShflMode, UnOp};
use crate::operand::Type;

/// The canonical NaNs PTX returns from `min`/`max` of two NaNs.
const NAN32: u32 = 0x7fff_ffff;
const NAN64: u64 = 0x7fff_ffff_ffff_ffff;

fn f32_of(v: u64) -> f32 {
    f32::from_bits(v as u32)
}

fn f64_of(v: u64) -> f64 {
    f64::from_bits(v)
}

fn bits32(x: f32) -> u64 {
    u64::from(x.to_bits())
}

fn not_modelled(what: impl Into<String>) -> Fault {
    Fault::NotModelled(what.into())
}

/// The value of an integer-typed register as an `i128`, extended by the
/// type's signedness (`.b` types are unsigned).
fn int_value(ty: Type, v: u64) -> i128 {
    match ty {
        Type::S32 => i128::from(v as u32 as i32),
        Type::S64 => i128::from(v as i64),
        Type::U32 | Type::B32 => i128::from(v as u32),
        _ => i128::from(v),
    }
}

/// Truncates to the type's width.
fn int_bits(ty: Type, v: i128) -> u64 {
    if ty.bits() == 32 {
        u64::from(v as u32)
    } else {
        v as u64
    }
}

macro_rules! int_binary {
    ($t:ty, $bits:expr, $op:expr, $a:expr, $b:expr) => {{
        let (a, b) = ($a as $t, $b as $t);
        let shift = $b as u32;
        match $op {
            BinOp::Add => a.wrapping_add(b),
            BinOp::Sub => a.wrapping_sub(b),
            BinOp::Mul => a.wrapping_mul(b),
            BinOp::Div if b == 0 => return Err(Fault::DivisionByZero),
            BinOp::Div => a.wrapping_div(b),
            BinOp::Rem if b == 0 => return Err(Fault::DivisionByZero),
            BinOp::Rem => a.wrapping_rem(b),
            BinOp::Min => a.min(b),
            BinOp::Max => a.max(b),
            BinOp::And => a & b,
            BinOp::Or => a | b,
            BinOp::Xor => a ^ b,
            // PTX clamps shift amounts to the width: all bits shifted out.
            BinOp::Shl if shift >= $bits => 0,
            BinOp::Shl => a << shift,
            // `>>` is arithmetic on the signed types: the sign fills.
            BinOp::Shr if shift >= $bits => a >> ($bits - 1) >> 1,
            BinOp::Shr => a >> shift,
            BinOp::DivApprox => return Err(not_modelled("div.approx on integers")),
        }
    }};
}

macro_rules! float_binary {
    ($t:ty, $op:expr, $a:expr, $b:expr, $nan:expr) => {{
        let (a, b): ($t, $t) = ($a, $b);
        match $op {
            BinOp::Add => a + b,
            BinOp::Sub => a - b,
            BinOp::Mul => a * b,
            // The simulator does not model div.approx's error.
            BinOp::Div | BinOp::DivApprox => a / b,
            BinOp::Min | BinOp::Max => {
                let min = $op == BinOp::Min;
                match (a.is_nan(), b.is_nan()) {
                    (true, true) => $nan,
                    (true, false) => b,
                    (false, true) => a,
                    // -0.0 is below +0.0.
                    _ if a == b => {
                        if a.is_sign_negative() == min {
                            a
                        } else {
                            b
                        }
                    }
                    _ if (a < b) == min => a,
                    _ => b,
                }
            }
            op => return Err(not_modelled(format!("{} on floats", op.name()))),
        }
    }};
}

pub(super) fn binary(op: BinOp, ty: Type, a: u64, b: u64) -> Result<u64, Fault> {
    Ok(match ty {
        Type::F32 => bits32(float_binary!(f32, op, f32_of(a), f32_of(b), f32::from_bits(NAN32))),
        Type::F64 => float_binary!(f64, op, f64_of(a), f64_of(b), f64::from_bits(NAN64)).to_bits(),
        Type::U32 | Type::B32 => u64::from(int_binary!(u32, 32, op, a, b)),
        Type::S32 => u64::from(int_binary!(i32, 32, op, a, b) as u32),
        Type::U64 | Type::B64 => int_binary!(u64, 64, op, a, b),
        Type::S64 => int_binary!(i64, 64, op, a, b) as u64,
        Type::Pred => match op {
            BinOp::And => a & b & 1,
            BinOp::Or => (a | b) & 1,
            BinOp::Xor => (a ^ b) & 1,
            op => return Err(not_modelled(format!("{} on predicates", op.name()))),
        },
    })
}

pub(super) fn unary(op: UnOp, ty: Type, a: u64) -> Result<u64, Fault> {
    let sign = if ty.bits() == 32 { 1u64 << 31 } else { 1u64 << 63 };
    Ok(match (op, ty) {
        (UnOp::Neg, Type::F32 | Type::F64) => a ^ sign,
        (UnOp::Abs, Type::F32 | Type::F64) => a & !sign,
        (UnOp::Neg, Type::S32) => u64::from((a as i32).wrapping_neg() as u32),
        (UnOp::Neg, Type::S64) => (a as i64).wrapping_neg() as u64,
        (UnOp::Abs, Type::S32) => u64::from((a as i32).wrapping_abs() as u32),
        (UnOp::Abs, Type::S64) => (a as i64).wrapping_abs() as u64,
        (UnOp::Not, Type::Pred) => (a ^ 1) & 1,
        (UnOp::Not, Type::B32 | Type::U32 | Type::S32) => u64::from(!(a as u32)),
        (UnOp::Not, Type::B64 | Type::U64 | Type::S64) => !a,
        // The `.approx` forms are computed correctly rounded: the simulator
        // does not model their approximation error.
        (UnOp::Ex2Approx, Type::F32) => bits32(f32_of(a).exp2()),
        (UnOp::Lg2Approx, Type::F32) => bits32(f32_of(a).log2()),
        (UnOp::RcpApprox | UnOp::RcpRn, Type::F32) => bits32(1.0 / f32_of(a)),
        (UnOp::RcpRn, Type::F64) => (1.0 / f64_of(a)).to_bits(),
        (UnOp::SqrtApprox | UnOp::SqrtRn, Type::F32) => bits32(f32_of(a).sqrt()),
        (UnOp::SqrtRn, Type::F64) => f64_of(a).sqrt().to_bits(),
        (op, ty) => return Err(not_modelled(format!("{}{ty}", op.name()))),
    })
}

/// `mad.lo` (the low half of `a*b+c`) on integers, fused `mad.rn`/`fma.rn`
/// on floats.
pub(super) fn mad(ty: Type, a: u64, b: u64, c: u64) -> Result<u64, Fault> {
    Ok(match ty {
        Type::F32 => bits32(f32_of(a).mul_add(f32_of(b), f32_of(c))),
        Type::F64 => f64_of(a).mul_add(f64_of(b), f64_of(c)).to_bits(),
        Type::U32 | Type::S32 | Type::B32 => u64::from((a as u32).wrapping_mul(b as u32).wrapping_add(c as u32)),
        Type::U64 | Type::S64 | Type::B64 => a.wrapping_mul(b).wrapping_add(c),
        Type::Pred => return Err(not_modelled("mad.pred")),
    })
}

pub(super) fn mul_wide(ty: Type, a: u64, b: u64) -> Result<u64, Fault> {
    match ty {
        Type::U32 => Ok(u64::from(a as u32) * u64::from(b as u32)),
        Type::S32 => Ok((i64::from(a as u32 as i32) * i64::from(b as u32 as i32)) as u64),
        ty => Err(not_modelled(format!("mul.wide{ty}"))),
    }
}

pub(super) fn setp(cmp: Cmp, ty: Type, a: u64, b: u64) -> Result<bool, Fault> {
    if ty.is_float() {
        // f32 to f64 is exact and keeps order and NaN.
        let (a, b) = if ty == Type::F32 { (f64::from(f32_of(a)), f64::from(f32_of(b))) } else { (f64_of(a), f64_of(b)) };
        let nan = a.is_nan() || b.is_nan();
        return Ok(match cmp {
            Cmp::Eq => !nan && a == b,
            Cmp::Ne => !nan && a != b,
            Cmp::Lt => !nan && a < b,
            Cmp::Le => !nan && a <= b,
            Cmp::Gt => !nan && a > b,
            Cmp::Ge => !nan && a >= b,
            Cmp::Equ => nan || a == b,
            Cmp::Neu => nan || a != b,
            Cmp::Ltu => nan || a < b,
            Cmp::Leu => nan || a <= b,
            Cmp::Gtu => nan || a > b,
            Cmp::Geu => nan || a >= b,
            Cmp::Num => !nan,
            Cmp::Nan => nan,
        });
    }
    if ty == Type::Pred {
        return Err(not_modelled("setp.pred"));
    }
    let (a, b) = (int_value(ty, a), int_value(ty, b));
    Ok(match cmp {
        Cmp::Eq => a == b,
        Cmp::Ne => a != b,
        Cmp::Lt => a < b,
        Cmp::Le => a <= b,
        Cmp::Gt => a > b,
        Cmp::Ge => a >= b,
        cmp => return Err(not_modelled(format!("setp.{}{ty}", cmp.name()))),
    })
}

fn next_up32(x: f32) -> f32 {
    if x.is_nan() || x == f32::INFINITY {
        x
    } else if x == 0.0 {
        f32::from_bits(1)
    } else if x > 0.0 {
        f32::from_bits(x.to_bits() + 1)
    } else {
        f32::from_bits(x.to_bits() - 1)
    }
}

fn next_down32(x: f32) -> f32 {
    -next_up32(-x)
}

fn next_up64(x: f64) -> f64 {
    if x.is_nan() || x == f64::INFINITY {
        x
    } else if x == 0.0 {
        f64::from_bits(1)
    } else if x > 0.0 {
        f64::from_bits(x.to_bits() + 1)
    } else {
        f64::from_bits(x.to_bits() - 1)
    }
}

fn next_down64(x: f64) -> f64 {
    -next_up64(-x)
}

/// Which neighbour (if any) of the round-to-nearest result of an exact
/// value is the result of a directed mode: `positive` is the exact value's
/// sign, `above`/`below` whether the nearest result is greater/smaller.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    Keep,
    Up,
    Down,
}

fn step(round: Round, positive: bool, above: bool, below: bool) -> Step {
    match round {
        Round::Rm if above => Step::Down,
        Round::Rp if below => Step::Up,
        // Toward zero: above a positive value, or below a negative one, is
        // away from zero.
        Round::Rz if above && positive => Step::Down,
        Round::Rz if below && !positive => Step::Up,
        _ => Step::Keep,
    }
}

fn round_f32(r: f32, s: Step) -> f32 {
    match s {
        Step::Keep => r,
        Step::Up => next_up32(r),
        Step::Down => next_down32(r),
    }
}

fn round_f64(r: f64, s: Step) -> f64 {
    match s {
        Step::Keep => r,
        Step::Up => next_up64(r),
        Step::Down => next_down64(r),
    }
}

/// An integer (in `i128`, exact) to a float with a float rounding mode.
fn int_to_float(dst: Type, x: i128, round: Round) -> Result<u64, Fault> {
    if round.is_integer() {
        return Err(not_modelled(format!("cvt.{} to a float", round.name())));
    }
    // `as` rounds to nearest even; the result is an integer of at most
    // 2^65 in magnitude (or exactly 2^64), so `as i128` is exact.
    Ok(match dst {
        Type::F32 => {
            let r = x as f32;
            let ri = r as i128;
            bits32(round_f32(r, step(round, x > 0, ri > x, ri < x)))
        }
        Type::F64 => {
            let r = x as f64;
            let ri = r as i128;
            round_f64(r, step(round, x > 0, ri > x, ri < x)).to_bits()
        }
        ty => return Err(not_modelled(format!("cvt to {ty}"))),
    })
}

/// A float to an integer type: rounded to an integer by the mode, then
/// saturated to the type's range (Rust's `as` saturates, NaN to 0, as PTX).
fn float_to_int(dst: Type, x: f64, round: Round) -> Result<u64, Fault> {
    let r = match round {
        Round::Rni => x.round_ties_even(),
        Round::Rzi => x.trunc(),
        Round::Rmi => x.floor(),
        Round::Rpi => x.ceil(),
        r => return Err(not_modelled(format!("cvt.{} to an integer", r.name()))),
    };
    Ok(match dst {
        Type::U32 | Type::B32 => u64::from(r as u32),
        Type::S32 => u64::from(r as i32 as u32),
        Type::U64 | Type::B64 => r as u64,
        Type::S64 => r as i64 as u64,
        ty => return Err(not_modelled(format!("cvt to {ty}"))),
    })
}

pub(super) fn cvt(round: Option<Round>, dst: Type, src: Type, v: u64) -> Result<u64, Fault> {
    if dst == Type::Pred || src == Type::Pred {
        return Err(not_modelled("cvt of a predicate"));
    }
    let missing = || not_modelled(format!("cvt{dst}{src} without a rounding mode"));
    match (dst.is_float(), src.is_float()) {
        (false, false) => Ok(int_bits(dst, int_value(src, v))),
        (true, false) => int_to_float(dst, int_value(src, v), round.ok_or_else(missing)?),
        (false, true) => {
            let x = if src == Type::F32 { f64::from(f32_of(v)) } else { f64_of(v) };
            float_to_int(dst, x, round.ok_or_else(missing)?)
        }
        (true, true) => match (dst, src) {
            (Type::F64, Type::F32) => Ok(f64::from(f32_of(v)).to_bits()),
            (Type::F32, Type::F64) => {
                let x = f64_of(v);
                let round = round.ok_or_else(missing)?;
                if round.is_integer() {
                    return Err(not_modelled(format!("cvt.{}.f32.f64", round.name())));
                }
                let r = x as f32;
                let rx = f64::from(r);
                Ok(bits32(round_f32(r, step(round, x > 0.0, rx > x, rx < x))))
            }
            _ => Ok(v),
        },
    }
}

/// The value an atomic leaves in memory, given the old one.
pub(super) fn atom(op: AtomOp, ty: Type, old: u64, src: u64) -> Result<u64, Fault> {
    let bin = match op {
        AtomOp::Exch => return Ok(src),
        AtomOp::Add if ty == Type::F32 => {
            // `atom/red.add.f32` flush subnormal inputs and results to zero.
            let ftz = |x: f32| if x.is_subnormal() { 0.0f32.copysign(x) } else { x };
            return Ok(bits32(ftz(ftz(f32_of(old)) + ftz(f32_of(src)))));
        }
        AtomOp::Add => BinOp::Add,
        AtomOp::Min => BinOp::Min,
        AtomOp::Max => BinOp::Max,
        AtomOp::And => BinOp::And,
        AtomOp::Or => BinOp::Or,
        AtomOp::Xor => BinOp::Xor,
    };
    binary(bin, ty, old, src)
}

/// The lane a `shfl.sync` reads, per the ISA: `b` is the lane or offset,
/// `c` packs the clamp value (`c[4:0]`) and the segment mask (`c[12:8]`);
/// an out-of-range source reads the thread's own lane.
pub(super) fn shfl_source(mode: ShflMode, lane: u32, b: u32, c: u32) -> u32 {
    let bval = b & 0x1f;
    let cval = c & 0x1f;
    let segmask = (c >> 8) & 0x1f;
    let max_lane = (lane & segmask) | (cval & !segmask);
    let min_lane = lane & segmask;
    let (j, ok) = match mode {
        ShflMode::Up => {
            let j = i64::from(lane) - i64::from(bval);
            (j, j >= i64::from(max_lane))
        }
        ShflMode::Down => {
            let j = lane + bval;
            (i64::from(j), j <= max_lane)
        }
        ShflMode::Bfly => {
            let j = lane ^ bval;
            (i64::from(j), j <= max_lane)
        }
        ShflMode::Idx => {
            let j = min_lane | (bval & !segmask);
            (i64::from(j), j <= max_lane)
        }
    };
    if ok {
        j as u32
    } else {
        lane
    }
}
