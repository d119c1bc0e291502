//! The conversions between f32 and the half types, as every back end
//! performs them: the Cranelift back end emits these exact integer
//! sequences, the Rust source of the macro path calls these functions, and
//! the reference interpreter widens with them. Widening is exact; narrowing
//! rounds to nearest, ties to even (IEEE 754's default), overflows to
//! infinity, and keeps NaN a NaN. One definition keeps the back ends bit
//! for bit identical, NaN payloads included (the `half` crate's, which the
//! runtime's tensors use, agrees on every non-NaN value; the tests say so).

/// The f32 of IEEE binary16 bits `h`: exact (every f16 is an f32).
///
/// The exponent and mantissa shifted into an f32's place read as an f32
/// scaled by 2^-112 (a subnormal f16 as an f32 subnormal); multiplying by
/// 2^112 is exact. Infinity and NaN take the f32's all-ones exponent (a NaN
/// made quiet).
#[inline]
pub fn f16_bits_to_f32(h: u16) -> f32 {
    let h = u32::from(h);
    let sign = (h & 0x8000) << 16;
    let em = h & 0x7fff;
    let shifted = em << 13;
    let value = if em > 0x7c00 {
        // NaN, made quiet (as F16C's `vcvtph2ps` and the `half` crate do).
        f32::from_bits(shifted | 0x7fc0_0000)
    } else if em == 0x7c00 {
        f32::INFINITY
    } else {
        f32::from_bits(shifted) * TWO_POW_112
    };
    f32::from_bits(value.to_bits() | sign)
}

/// 2^112, the scale between an f16's exponent placed in an f32 and its
/// value.
pub const TWO_POW_112: f32 = 5.192_297e33;

/// The IEEE binary16 bits nearest `x` (ties to even): values from 65520
/// up become infinity, values below the smallest subnormal's half become
/// zero, every NaN becomes the quiet NaN `0x7e00` (with `x`'s sign).
///
/// Three cases computed branch-free (F. Giesen's `float_to_half_fast3_rtne`):
/// a subnormal result is the low bits of `|x| + 0.5` (the addition rounds,
/// to nearest even, at the f16 subnormal's last place); a normal one
/// rebiases the exponent and adds a rounding bias of `0xfff` plus the kept
/// mantissa's last bit (ties to even) before shifting 13 bits away.
#[inline]
pub fn f32_to_f16_bits(x: f32) -> u16 {
    let u = x.to_bits();
    let sign = u & 0x8000_0000;
    let a = u ^ sign;
    let big = if a > 0x7f80_0000 { 0x7e00 } else { 0x7c00 };
    let small = (f32::from_bits(a) + 0.5).to_bits().wrapping_sub(0x3f00_0000);
    let normal = a.wrapping_add(F16_REBIAS).wrapping_add((a >> 13) & 1) >> 13;
    let o = if a >= 0x4780_0000 {
        big
    } else if a < 0x3880_0000 {
        small
    } else {
        normal
    };
    (o | (sign >> 16)) as u16
}

/// `((15 - 127) << 23) + 0xfff` as a wrapping u32: rebias an f32 exponent
/// to an f16's and add the rounding bias below the kept mantissa.
pub const F16_REBIAS: u32 = 0xc800_0fff;

/// The f32 of bfloat16 bits `b`: exact (a bf16 is an f32's upper half).
#[inline]
pub fn bf16_bits_to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// The bfloat16 bits nearest `x` (ties to even); a NaN stays a NaN, quiet
/// (its upper half with the quiet bit set), as the `half` crate does.
#[inline]
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    let u = x.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 0x40) as u16;
    }
    (u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every f16 widens to the `half` crate's value, bit for bit (NaNs
    /// to a NaN of the same payload).
    #[test]
    fn every_f16_widens_exactly() {
        for h in 0..=u16::MAX {
            let want = half::f16::from_bits(h).to_f32();
            let got = f16_bits_to_f32(h);
            assert_eq!(got.to_bits(), want.to_bits(), "f16 {h:#06x}");
        }
        assert_eq!(f16_bits_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(bf16_bits_to_f32(0x3f80), 1.0);
    }

    /// Narrowing agrees with the `half` crate's round-to-nearest-even on
    /// every f16 and bf16 value, on every midpoint between neighbours
    /// (ties), and just either side of each midpoint; NaN stays NaN.
    #[test]
    fn narrowing_rounds_to_nearest_even() {
        let check = |x: f32| {
            if x.is_nan() {
                assert!(f16_bits_to_f32(f32_to_f16_bits(x)).is_nan());
                assert!(bf16_bits_to_f32(f32_to_bf16_bits(x)).is_nan());
                return;
            }
            assert_eq!(f32_to_f16_bits(x), half::f16::from_f32(x).to_bits(), "f16 of {x:e} ({:#010x})", x.to_bits());
            assert_eq!(f32_to_bf16_bits(x), half::bf16::from_f32(x).to_bits(), "bf16 of {x:e} ({:#010x})", x.to_bits());
        };
        for h in 0..=u16::MAX {
            for v in [f16_bits_to_f32(h), bf16_bits_to_f32(h)] {
                check(v);
                let next = f32::from_bits(v.to_bits().wrapping_add(1 << 13));
                if v.is_finite() && next.is_finite() {
                    let mid = ((f64::from(v) + f64::from(next)) / 2.0) as f32;
                    for d in [-1i32, 0, 1] {
                        check(f32::from_bits(mid.to_bits().wrapping_add_signed(d)));
                    }
                }
                check(f32::from_bits(v.to_bits().wrapping_add(0x8000)));
            }
        }
        // Ties to even, overflow and underflow, stated outright.
        assert_eq!(f32_to_f16_bits(1.0 + 2f32.powi(-11)), 0x3c00);
        assert_eq!(f32_to_f16_bits(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
        assert_eq!(f32_to_f16_bits(65520.0), 0x7c00);
        assert_eq!(f32_to_f16_bits(65519.0), 0x7bff);
        assert_eq!(f32_to_f16_bits(2f32.powi(-25)), 0x0000);
        assert_eq!(f32_to_f16_bits(-2f32.powi(-25) * 1.5), 0x8001);
        assert_eq!(f32_to_bf16_bits(1.0 + 2f32.powi(-8)), 0x3f80);
        assert_eq!(f32_to_bf16_bits(f32::MAX), 0x7f80);
        assert_eq!(f32_to_f16_bits(f32::NAN) & 0x7e00, 0x7e00);
    }
}
