//! Half-width fields and outputs: loads that widen f16/bf16 elements to
//! f32 and stores that round f32 to them, as integer sequences that are
//! exactly `tiga_abi::half_bits` (so this back end and the macro path's
//! Rust source give the same bits). A bf16 is the upper half of an f32
//! (a shift); an f16 widens by placing its exponent and mantissa in an
//! f32 and scaling by 2^112 (exact), and narrows with a rebias, a rounding
//! bias and a shift (round to nearest even). Vector loads widen four
//! elements at once (`uload16x4`); vector stores into a half output (once
//! per row) go lane by lane.

use super::*;
use crate::ir::FieldType;

impl Translator<'_> {
    /// How the memory `a` addresses is stored in this variant.
    pub(super) fn stored_type(&self, a: &Addr) -> FieldType {
        self.key.storage.stored(a, self.key.dtype)
    }

    /// log2 of the element size of what `a` addresses.
    pub(super) fn shift_of(&self, a: &Addr) -> i64 {
        i64::from(self.stored_type(a).size().trailing_zeros())
    }

    /// A number loaded from `addr` (what `a` addresses), widened to the
    /// variant's dtype when stored at half width.
    pub(super) fn load_num(&mut self, a: &Addr, addr: Value, fl: MemFlagsData) -> TResult<Value> {
        match self.stored_type(a) {
            FieldType::F32 | FieldType::F64 => Ok(self.b.ins().load(self.num, fl, addr, 0)),
            t => {
                let bits = self.b.ins().uload16(types::I32, fl, addr, 0);
                Ok(self.widen_half(t, bits, types::I32, types::F32))
            }
        }
    }

    /// Store number `v` at `addr` (what `a` addresses), rounded to nearest
    /// even when stored at half width.
    pub(super) fn store_num(&mut self, a: &Addr, addr: Value, v: Value, fl: MemFlagsData) -> TResult<()> {
        match self.stored_type(a) {
            FieldType::F32 | FieldType::F64 => {
                self.b.ins().store(fl, v, addr, 0);
            }
            t => {
                let bits = self.narrow_half(t, v, types::I32)?;
                self.b.ins().istore16(fl, bits, addr, 0);
            }
        }
        Ok(())
    }

    /// A vector of `vty` loaded from consecutive elements at `addr`.
    pub(super) fn load_vector(&mut self, a: &Addr, addr: Value, vty: ir::Type, vflags: MemFlagsData) -> TResult<Value> {
        let t = self.stored_type(a);
        if !t.is_half() {
            return Ok(self.b.ins().load(vty, vflags, addr, 0));
        }
        if vty == types::F32X4 {
            let bits = self.b.ins().uload16x4(vflags, addr, 0);
            return Ok(self.widen_half(t, bits, types::I32X4, types::F32X4));
        }
        // Another vector shape: lane by lane.
        let zero = self.fconst(0.0);
        let mut v = self.b.ins().splat(vty, zero);
        for lane in 0..vty.lane_count() {
            let bits = self.b.ins().uload16(types::I32, vflags, addr, (lane * 2) as i32);
            let x = self.widen_half(t, bits, types::I32, types::F32);
            v = self.b.ins().insertlane(v, x, lane as u8);
        }
        Ok(v)
    }

    /// Store vector `val` to consecutive elements at `addr`.
    pub(super) fn store_vector(&mut self, a: &Addr, addr: Value, val: Value, vty: ir::Type, vflags: MemFlagsData) -> TResult<()> {
        let t = self.stored_type(a);
        if !t.is_half() {
            self.b.ins().store(vflags, val, addr, 0);
            return Ok(());
        }
        for lane in 0..vty.lane_count() {
            let x = self.b.ins().extractlane(val, lane as u8);
            let bits = self.narrow_half(t, x, types::I32)?;
            self.b.ins().istore16(vflags, bits, addr, (lane * 2) as i32);
        }
        Ok(())
    }

    /// The f32 (`fty`, scalar or vector) of half bits `bits` (`ity`, the
    /// same lanes of i32, zero-extended): `half_bits::bf16_bits_to_f32` or
    /// `f16_bits_to_f32`.
    fn widen_half(&mut self, t: FieldType, bits: Value, ity: ir::Type, fty: ir::Type) -> Value {
        let little = MemFlagsData::new().with_endianness(ir::Endianness::Little);
        let int = |t: &mut Self, c: i64| {
            let x = t.b.ins().iconst(types::I32, c);
            if ity.is_vector() {
                t.b.ins().splat(ity, x)
            } else {
                x
            }
        };
        // A shift by a scalar amount (what a vector `ishl` takes).
        let shl = |t: &mut Self, x: Value, n: i64| {
            let n = t.b.ins().iconst(types::I32, n);
            t.b.ins().ishl(x, n)
        };
        if t == FieldType::BF16 {
            let shifted = shl(self, bits, 16);
            return self.b.ins().bitcast(fty, little, shifted);
        }
        // f16: sign, exponent and mantissa placed in an f32, scaled by 2^112;
        // infinity and (quiet) NaN take the all-ones exponent.
        let sign_mask = int(self, 0x8000);
        let sign = self.b.ins().band(bits, sign_mask);
        let sign = shl(self, sign, 16);
        let em_mask = int(self, 0x7fff);
        let em = self.b.ins().band(bits, em_mask);
        let shifted = shl(self, em, 13);
        let as_float = self.b.ins().bitcast(fty, little, shifted);
        let scale = self.b.ins().f32const(tiga_abi::half_bits::TWO_POW_112);
        let scale = if fty.is_vector() { self.b.ins().splat(fty, scale) } else { scale };
        let scaled = self.b.ins().fmul(as_float, scale);
        let scaled = self.b.ins().bitcast(ity, little, scaled);
        let inf_exp = int(self, 0x7f80_0000);
        let special = self.b.ins().bor(shifted, inf_exp);
        let quiet_bit = int(self, 0x0040_0000);
        let quiet = self.b.ins().bor(special, quiet_bit);
        let inf = int(self, 0x7c00);
        let is_nan = self.b.ins().icmp(IntCC::UnsignedGreaterThan, em, inf);
        let is_special = self.b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, em, inf);
        let special = self.sel(is_nan, quiet, special);
        let value = self.sel(is_special, special, scaled);
        let value = self.b.ins().bor(value, sign);
        self.b.ins().bitcast(fty, little, value)
    }

    /// `c ? x : y` for a scalar or lane-mask condition.
    fn sel(&mut self, c: Value, x: Value, y: Value) -> Value {
        if self.b.func.dfg.value_type(c).is_vector() {
            self.b.ins().bitselect(c, x, y)
        } else {
            self.b.ins().select(c, x, y)
        }
    }

    /// The half bits (in the low 16 bits of an i32) nearest f32 `x`:
    /// `half_bits::f32_to_bf16_bits` or `f32_to_f16_bits`.
    fn narrow_half(&mut self, t: FieldType, x: Value, ity: ir::Type) -> TResult<Value> {
        if self.b.func.dfg.value_type(x) != types::F32 {
            return Err("a half-width store of a value that is not f32".into());
        }
        let u = self.b.ins().bitcast(ity, MemFlagsData::new(), x);
        if t == FieldType::BF16 {
            let abs = self.b.ins().band_imm_u(u, 0x7fff_ffff);
            let is_nan = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThan, abs, 0x7f80_0000);
            let hi = self.b.ins().ushr_imm_u(u, 16);
            let nan = self.b.ins().bor_imm_u(hi, 0x40);
            let odd = self.b.ins().band_imm_u(hi, 1);
            let bias = self.b.ins().iadd_imm_s(odd, 0x7fff);
            let rounded = self.b.ins().iadd(u, bias);
            let rounded = self.b.ins().ushr_imm_u(rounded, 16);
            return Ok(self.b.ins().select(is_nan, nan, rounded));
        }
        let sign = self.b.ins().band_imm_u(u, 0x8000_0000);
        let a = self.b.ins().bxor(u, sign);
        // Overflow, infinity, NaN.
        let is_nan = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThan, a, 0x7f80_0000);
        let qnan = self.b.ins().iconst(types::I32, 0x7e00);
        let inf = self.b.ins().iconst(types::I32, 0x7c00);
        let big = self.b.ins().select(is_nan, qnan, inf);
        // Subnormal or zero: |x| + 0.5 rounds at the f16 subnormal's place.
        let af = self.b.ins().bitcast(types::F32, MemFlagsData::new(), a);
        let half = self.b.ins().f32const(0.5);
        let sum = self.b.ins().fadd(af, half);
        let sum = self.b.ins().bitcast(ity, MemFlagsData::new(), sum);
        let small = self.b.ins().iadd_imm_s(sum, -0x3f00_0000);
        // Normal: rebias, add the rounding bias and the kept mantissa's last
        // bit, shift.
        let odd = self.b.ins().ushr_imm_u(a, 13);
        let odd = self.b.ins().band_imm_u(odd, 1);
        let n = self.b.ins().iadd_imm_s(a, i64::from(tiga_abi::half_bits::F16_REBIAS as i32));
        let n = self.b.ins().iadd(n, odd);
        let normal = self.b.ins().ushr_imm_u(n, 13);
        let is_big = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, a, 0x4780_0000);
        let is_small = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, a, 0x3880_0000);
        let o = self.b.ins().select(is_small, small, normal);
        let o = self.b.ins().select(is_big, big, o);
        let s = self.b.ins().ushr_imm_u(sign, 16);
        Ok(self.b.ins().bor(o, s))
    }
}
