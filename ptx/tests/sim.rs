//! The simulator computes what PTX specifies: kernels built here run on the
//! CPU and their results are checked against closed forms.

mod common;

use tiga_ptx::sim::{self, launch, launch_with_limit, Arg, Fault, LaunchConfig, Memory, SimError};
use tiga_ptx::{
    Address, AtomOp, BinOp, Cmp, FunctionBuilder, Instruction, Module, Op, Operand, Reg, Round, ShflMode, Space, Special, Type,
    UnOp,
};

fn module(f: tiga_ptx::Function) -> Module {
    let mut m = Module::new(80);
    m.functions.push(f);
    m
}

fn load_param(b: &mut FunctionBuilder, ty: Type, name: &str) -> Reg {
    let r = b.reg(ty);
    b.push(Op::Ld { space: Space::Param, nc: false, ty, dst: vec![r], addr: Address::symbol(name, 0) });
    r
}

/// `ctaid * ntid + tid`.
fn global_id(b: &mut FunctionBuilder) -> Reg {
    let ctaid = b.mov(Type::U32, Special::CtaidX);
    let ntid = b.mov(Type::U32, Special::NtidX);
    let tid = b.mov(Type::U32, Special::TidX);
    let i = b.reg(Type::U32);
    b.push(Op::Mad { ty: Type::U32, dst: i, a: ctaid.into(), b: ntid.into(), c: tid.into() });
    i
}

/// `base + 4 * i` (or `size * i`).
fn element(b: &mut FunctionBuilder, base: Reg, i: Reg, size: i64) -> Reg {
    let off = b.reg(Type::U64);
    b.push(Op::MulWide { ty: Type::U32, dst: off, a: i.into(), b: size.into() });
    b.binary(BinOp::Add, Type::U64, base, off)
}

fn cfg(grid: u32, block: u32) -> LaunchConfig {
    LaunchConfig { grid, block }
}

fn upload_f32(mem: &mut Memory, xs: &[f32]) -> u64 {
    let addr = mem.alloc(xs.len() * 4);
    let bytes: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
    mem.write(addr, &bytes).expect("in bounds");
    addr
}

fn download_f32(mem: &Memory, addr: u64, n: usize) -> Vec<f32> {
    let mut bytes = vec![0u8; n * 4];
    mem.read(addr, &mut bytes).expect("in bounds");
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

fn download_u32(mem: &Memory, addr: u64, n: usize) -> Vec<u32> {
    let mut bytes = vec![0u8; n * 4];
    mem.read(addr, &mut bytes).expect("in bounds");
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// A one-thread kernel `k(out)`: `body` computes a value of the type it
/// returns, which is stored at `out` (a predicate as 1 or 0); its bits.
fn eval(body: impl FnOnce(&mut FunctionBuilder) -> (Reg, Type)) -> u64 {
    let mut b = FunctionBuilder::entry("k");
    let out = b.param("out", Type::U64);
    let out = load_param(&mut b, Type::U64, &out);
    let (mut r, mut ty) = body(&mut b);
    if ty == Type::Pred {
        let v = b.reg(Type::U32);
        b.push(Op::Selp { ty: Type::U32, dst: v, a: 1.into(), b: 0.into(), pred: r });
        (r, ty) = (v, Type::U32);
    }
    b.push(Op::St { space: Space::Global, ty, addr: Address::reg(out, 0), src: vec![r.into()] });
    b.push(Op::Ret);
    let m = module(b.finish());
    let mut mem = Memory::new();
    let buf = mem.alloc(8);
    launch(&m, "k", cfg(1, 1), &[Arg::U64(buf)], &mut mem).expect("runs");
    let mut bytes = [0u8; 8];
    mem.read(buf, &mut bytes).expect("in bounds");
    u64::from_le_bytes(bytes)
}

fn cvt(round: Option<Round>, dst_ty: Type, src_ty: Type, src: impl Into<Operand>) -> u64 {
    let src = src.into();
    eval(|b| {
        let dst = b.reg(dst_ty);
        b.push(Op::Cvt { round, dst_ty, src_ty, dst, src });
        (dst, dst_ty)
    })
}

fn bin(op: BinOp, ty: Type, a: impl Into<Operand>, b: impl Into<Operand>) -> u64 {
    let (a, bb) = (a.into(), b.into());
    eval(|b| {
        let dst = b.reg(ty);
        b.push(Op::Binary { op, ty, dst, a, b: bb });
        (dst, ty)
    })
}

fn un(op: UnOp, ty: Type, a: impl Into<Operand>) -> u64 {
    let a = a.into();
    eval(|b| {
        let dst = b.reg(ty);
        b.push(Op::Unary { op, ty, dst, a });
        (dst, ty)
    })
}

fn setp(cmp: Cmp, ty: Type, a: impl Into<Operand>, b: impl Into<Operand>) -> bool {
    let (a, bb) = (a.into(), b.into());
    eval(|b| {
        let dst = b.reg(Type::Pred);
        b.push(Op::Setp { cmp, ty, dst, a, b: bb });
        (dst, Type::Pred)
    }) == 1
}

fn f32_bits(v: u64) -> f32 {
    f32::from_bits(v as u32)
}

fn fault_of(e: SimError) -> (sim::Site, Fault) {
    match e {
        SimError::Fault { site, fault } => (site, fault),
        other => panic!("expected a fault, got {other}"),
    }
}

#[test]
fn grid_stride_saxpy_over_1000_elements() {
    let m = common::saxpy(80);
    let n = 1000;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 - 7.0).collect();
    let y: Vec<f32> = (0..n).map(|i| 1.0 / (i as f32 + 1.0)).collect();
    let a = 1.5f32;
    let mut mem = Memory::new();
    let (xd, yd) = (upload_f32(&mut mem, &x), upload_f32(&mut mem, &y));
    let args = [Arg::U32(n as u32), Arg::F32(a), Arg::U64(xd), Arg::U64(yd)];
    let stats = launch(&m, "saxpy", cfg(3, 64), &args, &mut mem).expect("runs");
    let got = download_f32(&mem, yd, n);
    for i in 0..n {
        assert_eq!(got[i].to_bits(), a.mul_add(x[i], y[i]).to_bits(), "y[{i}]");
    }
    assert_eq!(stats.threads, 192);
    // Deterministic: the same launch counts the same instructions.
    let again = launch(&m, "saxpy", cfg(3, 64), &args, &mut mem).expect("runs");
    assert_eq!(again, stats);
    assert_eq!(download_f32(&mem, xd, n), x, "x is only read");
}

#[test]
fn shuffle_reduction_with_shared_partials_and_red() {
    let m = common::reduce_sum(80);
    let n = 1000u32;
    let x: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let mut mem = Memory::new();
    let xd = upload_f32(&mut mem, &x);
    let out = upload_f32(&mut mem, &[0.5]);
    launch(&m, "reduce_sum", cfg(4, 256), &[Arg::U32(n), Arg::U64(xd), Arg::U64(out)], &mut mem).expect("runs");
    let expected: f32 = 0.5 + x.iter().sum::<f32>();
    assert_eq!(download_f32(&mem, out, 1), vec![expected]);
}

#[test]
fn every_instruction_form_runs() {
    let m = common::assorted(80);
    let mut mem = Memory::new();
    let x = upload_f32(&mut mem, &[0.0, 0.0, 0.0, 0.0, 2.0, 3.0, 4.0, 5.0, 0.0, 0.0, 0.0, 0.0]);
    launch(&m, "assorted", cfg(1, 32), &[Arg::U64(x)], &mut mem).expect("runs");
    let words = download_u32(&mem, x, 12);
    // `mad(q, q, NaN)` is NaN, so the `@!%p` atom is skipped.
    assert_eq!(words[0], 0);
    // `max(min(-inf, 5), -0.0)` is -0.0, stored beside 1.5.
    assert_eq!(words[8..10], [0x8000_0000, 1.5f32.to_bits()]);
}

#[test]
fn cvt_between_integers_truncates_or_extends_by_the_source() {
    assert_eq!(cvt(None, Type::S64, Type::S32, -1), u64::MAX);
    assert_eq!(cvt(None, Type::U64, Type::S32, -2), (-2i64) as u64);
    assert_eq!(cvt(None, Type::U64, Type::U32, -1), 0xffff_ffff);
    assert_eq!(cvt(None, Type::S64, Type::U32, 0x8000_0000), 0x8000_0000);
    assert_eq!(cvt(None, Type::U32, Type::U64, 0x1_2345_6789), 0x2345_6789);
    assert_eq!(cvt(None, Type::S32, Type::S64, -2), 0xffff_fffe);
    assert_eq!(cvt(None, Type::S32, Type::U32, 7), 7);
}

#[test]
fn cvt_float_to_integer_rounds_by_its_mode_and_saturates() {
    let s32 = |round, v: f32| cvt(Some(round), Type::S32, Type::F32, v) as u32 as i32;
    let u32_ = |round, v: f32| cvt(Some(round), Type::U32, Type::F32, v) as u32;
    assert_eq!(s32(Round::Rni, 2.5), 2);
    assert_eq!(s32(Round::Rni, 3.5), 4);
    assert_eq!(s32(Round::Rni, -2.5), -2);
    assert_eq!(s32(Round::Rzi, -2.7), -2);
    assert_eq!(s32(Round::Rzi, 2.7), 2);
    assert_eq!(s32(Round::Rmi, -2.2), -3);
    assert_eq!(s32(Round::Rmi, 2.7), 2);
    assert_eq!(s32(Round::Rpi, 2.2), 3);
    assert_eq!(s32(Round::Rpi, -2.7), -2);
    assert_eq!(s32(Round::Rzi, f32::NAN), 0);
    assert_eq!(s32(Round::Rni, f32::INFINITY), i32::MAX);
    assert_eq!(s32(Round::Rni, f32::NEG_INFINITY), i32::MIN);
    assert_eq!(s32(Round::Rzi, 1e10), i32::MAX);
    assert_eq!(u32_(Round::Rzi, -1.0), 0);
    assert_eq!(u32_(Round::Rzi, f32::NAN), 0);
    assert_eq!(u32_(Round::Rzi, 4e9), 4_000_000_000);
    assert_eq!(u32_(Round::Rzi, 5e9), u32::MAX);
    assert_eq!(cvt(Some(Round::Rzi), Type::S64, Type::F64, f64::NAN), 0);
    assert_eq!(cvt(Some(Round::Rmi), Type::S64, Type::F64, -1e300), i64::MIN as u64);
    assert_eq!(cvt(Some(Round::Rpi), Type::U64, Type::F64, 1e300), u64::MAX);
    assert_eq!(cvt(Some(Round::Rni), Type::U64, Type::F64, 4503599627370497.5f64), 4503599627370498);
}

#[test]
fn cvt_to_float_rounds_exactly_in_every_mode() {
    let f32_of = |round, src_ty, v: i64| f32_bits(cvt(Some(round), Type::F32, src_ty, v));
    // 2^24 + 1 lies halfway between 2^24 and 2^24 + 2.
    assert_eq!(f32_of(Round::Rn, Type::U32, 16_777_217), 16_777_216.0);
    assert_eq!(f32_of(Round::Rz, Type::U32, 16_777_217), 16_777_216.0);
    assert_eq!(f32_of(Round::Rm, Type::U32, 16_777_217), 16_777_216.0);
    assert_eq!(f32_of(Round::Rp, Type::U32, 16_777_217), 16_777_218.0);
    assert_eq!(f32_of(Round::Rn, Type::U32, 16_777_219), 16_777_220.0);
    assert_eq!(f32_of(Round::Rz, Type::U32, 16_777_219), 16_777_218.0);
    assert_eq!(f32_of(Round::Rn, Type::S32, -16_777_217), -16_777_216.0);
    assert_eq!(f32_of(Round::Rm, Type::S32, -16_777_217), -16_777_218.0);
    assert_eq!(f32_of(Round::Rp, Type::S32, -16_777_217), -16_777_216.0);
    assert_eq!(f32_of(Round::Rz, Type::S32, -16_777_217), -16_777_216.0);
    assert_eq!(f32_of(Round::Rn, Type::S32, -1), -1.0);
    let f64_of = |round, src_ty, v: i64| f64::from_bits(cvt(Some(round), Type::F64, src_ty, v));
    assert_eq!(f64_of(Round::Rn, Type::U64, -1), 18_446_744_073_709_551_616.0);
    assert_eq!(f64_of(Round::Rz, Type::U64, -1), 18_446_744_073_709_549_568.0);
    // -2^63 + 1 lies between -2^63 and -2^63 + 1024.
    assert_eq!(f64_of(Round::Rm, Type::S64, i64::MIN + 1), -9_223_372_036_854_775_808.0);
    assert_eq!(f64_of(Round::Rp, Type::S64, i64::MIN + 1), -9_223_372_036_854_774_784.0);
    assert_eq!(f64_of(Round::Rz, Type::S64, i64::MIN + 1), -9_223_372_036_854_774_784.0);
    assert_eq!(f64_of(Round::Rn, Type::S64, i64::MIN + 1), -9_223_372_036_854_775_808.0);

    let narrow = |round, v: f64| f32_bits(cvt(Some(round), Type::F32, Type::F64, v));
    let below = f32::from_bits(0.1f32.to_bits() - 1);
    assert!(f64::from(0.1f32) > 0.1f64);
    assert_eq!(narrow(Round::Rn, 0.1), 0.1f32);
    assert_eq!(narrow(Round::Rz, 0.1), below);
    assert_eq!(narrow(Round::Rm, 0.1), below);
    assert_eq!(narrow(Round::Rp, 0.1), 0.1f32);
    assert_eq!(narrow(Round::Rz, -0.1), -below);
    assert_eq!(narrow(Round::Rm, -0.1), -0.1f32);
    assert_eq!(narrow(Round::Rp, -0.1), -below);
    assert_eq!(narrow(Round::Rn, 1e300), f32::INFINITY);
    assert_eq!(narrow(Round::Rz, 1e300), f32::MAX);
    assert_eq!(narrow(Round::Rm, 1e300), f32::MAX);
    assert_eq!(narrow(Round::Rp, 1e300), f32::INFINITY);
    assert_eq!(narrow(Round::Rz, -1e300), -f32::MAX);
    assert_eq!(narrow(Round::Rp, 1e-300), f32::from_bits(1));
    assert_eq!(narrow(Round::Rm, -1e-300), -f32::from_bits(1));
    assert_eq!(narrow(Round::Rz, 1e-300).to_bits(), 0);
    assert!(narrow(Round::Rn, f64::NAN).is_nan());
    assert_eq!(f64::from_bits(cvt(None, Type::F64, Type::F32, 0.1f32)), f64::from(0.1f32));
}

#[test]
fn float_min_max_return_the_number_when_one_side_is_nan() {
    let nan = f32::NAN;
    assert_eq!(f32_bits(bin(BinOp::Min, Type::F32, nan, 1.0f32)), 1.0);
    assert_eq!(f32_bits(bin(BinOp::Min, Type::F32, 1.0f32, nan)), 1.0);
    assert_eq!(f32_bits(bin(BinOp::Max, Type::F32, nan, -3.0f32)), -3.0);
    assert_eq!(f32_bits(bin(BinOp::Max, Type::F32, -3.0f32, nan)), -3.0);
    assert!(f32_bits(bin(BinOp::Min, Type::F32, nan, nan)).is_nan());
    assert!(f32_bits(bin(BinOp::Max, Type::F32, nan, nan)).is_nan());
    assert_eq!(f32_bits(bin(BinOp::Min, Type::F32, 2.0f32, -1.0f32)), -1.0);
    assert_eq!(f32_bits(bin(BinOp::Max, Type::F32, 2.0f32, -1.0f32)), 2.0);
    assert_eq!(f32_bits(bin(BinOp::Min, Type::F32, 0.0f32, -0.0f32)).to_bits(), (-0.0f32).to_bits());
    assert_eq!(f32_bits(bin(BinOp::Max, Type::F32, -0.0f32, 0.0f32)).to_bits(), 0.0f32.to_bits());
    assert_eq!(f64::from_bits(bin(BinOp::Min, Type::F64, f64::NAN, 5.0f64)), 5.0);
    assert!(f64::from_bits(bin(BinOp::Max, Type::F64, f64::NAN, f64::NAN)).is_nan());
    // Integers by their signedness.
    assert_eq!(bin(BinOp::Min, Type::S32, -1, 1) as u32 as i32, -1);
    assert_eq!(bin(BinOp::Min, Type::U32, -1, 1), 1);
    assert_eq!(bin(BinOp::Max, Type::S64, -1, 1), 1);
    assert_eq!(bin(BinOp::Max, Type::U64, -1, 1), u64::MAX);
}

#[test]
fn setp_ordered_and_unordered_comparisons() {
    let nan = f32::NAN;
    for (cmp, on_nan) in [(Cmp::Eq, false), (Cmp::Ne, false), (Cmp::Lt, false), (Cmp::Ge, false), (Cmp::Equ, true)] {
        assert_eq!(setp(cmp, Type::F32, nan, 1.0f32), on_nan, "{cmp:?}");
    }
    for cmp in [Cmp::Neu, Cmp::Ltu, Cmp::Leu, Cmp::Gtu, Cmp::Geu, Cmp::Nan] {
        assert!(setp(cmp, Type::F32, 1.0f32, nan), "{cmp:?}");
    }
    assert!(!setp(Cmp::Num, Type::F32, 1.0f32, nan));
    assert!(setp(Cmp::Num, Type::F64, 1.0f64, 2.0f64));
    assert!(setp(Cmp::Ne, Type::F32, 1.0f32, 2.0f32));
    assert!(!setp(Cmp::Ltu, Type::F32, 2.0f32, 1.0f32));
    assert!(setp(Cmp::Eq, Type::F32, 0.0f32, -0.0f32));
    assert!(setp(Cmp::Lt, Type::S32, -1, 0));
    assert!(!setp(Cmp::Lt, Type::U32, -1, 0));
    assert!(setp(Cmp::Gt, Type::U64, -1, 0));
}

#[test]
fn integer_arithmetic_wraps_and_shifts_clamp() {
    assert_eq!(bin(BinOp::Add, Type::U32, 0xffff_ffff, 2), 1);
    assert_eq!(bin(BinOp::Mul, Type::S32, 0x10000, 0x10000), 0);
    assert_eq!(bin(BinOp::Sub, Type::U64, 0, 1), u64::MAX);
    assert_eq!(bin(BinOp::Div, Type::S32, -7, 2) as u32 as i32, -3);
    assert_eq!(bin(BinOp::Rem, Type::S32, -7, 2) as u32 as i32, -1);
    assert_eq!(bin(BinOp::Div, Type::U32, -7, 2), 0x7fff_fffc);
    assert_eq!(bin(BinOp::Shl, Type::B32, 1, 31), 0x8000_0000);
    assert_eq!(bin(BinOp::Shl, Type::B32, 1, 32), 0);
    assert_eq!(bin(BinOp::Shl, Type::B64, 1, 100), 0);
    assert_eq!(bin(BinOp::Shr, Type::S32, -8, 1) as u32 as i32, -4);
    assert_eq!(bin(BinOp::Shr, Type::S32, -8, 40) as u32 as i32, -1);
    assert_eq!(bin(BinOp::Shr, Type::S64, 8, 64), 0);
    assert_eq!(bin(BinOp::Shr, Type::U32, -8, 1), 0x7fff_fffc);
    assert_eq!(bin(BinOp::Shr, Type::U32, -8, 32), 0);
    assert_eq!(bin(BinOp::Xor, Type::B32, 0b1100, 0b1010), 0b0110);
    assert_eq!(un(UnOp::Not, Type::B32, 0), 0xffff_ffff);
    assert_eq!(un(UnOp::Neg, Type::S32, 5) as u32 as i32, -5);
    assert_eq!(un(UnOp::Abs, Type::S64, -5), 5);
    let wide = |ty, a: i64, b: i64| {
        eval(|bld| {
            let dst_ty = if ty == Type::U32 { Type::U64 } else { Type::S64 };
            let dst = bld.reg(dst_ty);
            bld.push(Op::MulWide { ty, dst, a: a.into(), b: b.into() });
            (dst, dst_ty)
        })
    };
    assert_eq!(wide(Type::U32, 0xffff_ffff, 0xffff_ffff), 0xffff_fffe_0000_0001);
    assert_eq!(wide(Type::S32, -3, 0x4000_0000) as i64, -3 * 0x4000_0000);
    let mad = eval(|b| {
        let dst = b.reg(Type::U32);
        b.push(Op::Mad { ty: Type::U32, dst, a: 0x10000.into(), b: 0x10001.into(), c: 5.into() });
        (dst, Type::U32)
    });
    assert_eq!(mad, 0x10005);
}

#[test]
fn float_unary_operations_and_fma() {
    assert_eq!(f32_bits(un(UnOp::Neg, Type::F32, 0.0f32)).to_bits(), (-0.0f32).to_bits());
    assert_eq!(f32_bits(un(UnOp::Abs, Type::F32, -0.0f32)).to_bits(), 0);
    let neg_nan = f32_bits(un(UnOp::Neg, Type::F32, f32::NAN));
    assert!(neg_nan.is_nan() && neg_nan.is_sign_negative());
    assert_eq!(f32_bits(un(UnOp::SqrtRn, Type::F32, 2.0f32)), 2.0f32.sqrt());
    assert_eq!(f32_bits(un(UnOp::RcpRn, Type::F32, 3.0f32)), 1.0 / 3.0f32);
    assert_eq!(f64::from_bits(un(UnOp::RcpRn, Type::F64, 3.0f64)), 1.0 / 3.0f64);
    assert_eq!(f32_bits(un(UnOp::Ex2Approx, Type::F32, 3.0f32)), 8.0);
    assert_eq!(f32_bits(un(UnOp::Lg2Approx, Type::F32, 0.125f32)), -3.0);
    assert_eq!(f32_bits(bin(BinOp::DivApprox, Type::F32, 1.0f32, 4.0f32)), 0.25);
    assert_eq!(f32_bits(bin(BinOp::Div, Type::F32, 1.0f32, 3.0f32)), 1.0 / 3.0f32);
    // Fused: a*b+c rounded once.
    let (a, b, c) = (1.0f32 + f32::EPSILON, 1.0f32 - f32::EPSILON, -1.0f32);
    let fma = eval(|bld| {
        let dst = bld.reg(Type::F32);
        bld.push(Op::Fma { ty: Type::F32, dst, a: a.into(), b: b.into(), c: c.into() });
        (dst, Type::F32)
    });
    assert_eq!(f32_bits(fma), a.mul_add(b, c));
    assert_ne!(f32_bits(fma), a * b + c);
}

#[test]
fn mov_b32_is_a_bit_cast() {
    let bits = eval(|b| {
        let f = b.mov(Type::F32, 1.5f32);
        let r = b.mov(Type::B32, f);
        (r, Type::U32)
    });
    assert_eq!(bits, u64::from(1.5f32.to_bits()));
}

/// `k(x, y)`: each thread copies 4 floats from `x + 16 i + skew` to `y + 16 i` with
/// one `.v4` load and one `.v4` store.
fn copy_v4(skew: i64) -> Module {
    let mut b = FunctionBuilder::entry("copy");
    let x = b.param("x", Type::U64);
    let y = b.param("y", Type::U64);
    let x = load_param(&mut b, Type::U64, &x);
    let y = load_param(&mut b, Type::U64, &y);
    let i = global_id(&mut b);
    let xp = element(&mut b, x, i, 16);
    let yp = element(&mut b, y, i, 16);
    let v: Vec<Reg> = (0..4).map(|_| b.reg(Type::F32)).collect();
    b.push(Op::Ld { space: Space::Global, nc: true, ty: Type::F32, dst: v.clone(), addr: Address::reg(xp, skew) });
    b.push(Op::St {
        space: Space::Global,
        ty: Type::F32,
        addr: Address::reg(yp, 0),
        src: v.iter().map(|r| (*r).into()).collect(),
    });
    b.push(Op::Ret);
    module(b.finish())
}

#[test]
fn v4_loads_and_stores_copy_and_must_be_aligned() {
    let n = 2 * 32 * 4;
    let x: Vec<f32> = (0..n + 4).map(|i| i as f32 + 0.5).collect();
    let mut mem = Memory::new();
    let xd = upload_f32(&mut mem, &x);
    let yd = mem.alloc(n * 4);
    launch(&copy_v4(0), "copy", cfg(2, 32), &[Arg::U64(xd), Arg::U64(yd)], &mut mem).expect("runs");
    assert_eq!(download_f32(&mem, yd, n), x[..n]);

    let e = launch(&copy_v4(4), "copy", cfg(2, 32), &[Arg::U64(xd), Arg::U64(yd)], &mut mem).expect_err("misaligned");
    let text = e.to_string();
    let (site, fault) = fault_of(e);
    assert_eq!(site.instruction, "ld.global.nc.v4.f32 {%f0, %f1, %f2, %f3}, [%rd3+4];");
    assert_eq!(site.thread, Some((0, 0)));
    assert!(matches!(fault, Fault::Misaligned { space: Space::Global, bytes: 16, .. }), "{fault:?}");
    assert!(text.starts_with(&format!("copy, statement {} `ld.global.nc.v4.f32", site.index)), "{text}");
}

/// `local(out)`: each thread puts `tid + k` in `scratch[k]`, `k < 4`, and
/// stores their sum (read back with two `.v2` loads) at `out[i]`.
fn local_kernel() -> Module {
    let mut b = FunctionBuilder::entry("local");
    let out = b.param("out", Type::U64);
    let arr = b.local("scratch", 16, 16);
    let out = load_param(&mut b, Type::U64, &out);
    let i = global_id(&mut b);
    let tid = b.mov(Type::U32, Special::TidX);
    let base = b.mov(Type::U64, Operand::Symbol(arr.clone()));
    for k in 0..4 {
        let v = b.binary(BinOp::Add, Type::U32, tid, k);
        b.push(Op::St { space: Space::Local, ty: Type::U32, addr: Address::reg(base, 4 * k), src: vec![v.into()] });
    }
    let vals: Vec<Reg> = (0..4).map(|_| b.reg(Type::U32)).collect();
    b.push(Op::Ld {
        space: Space::Local,
        nc: false,
        ty: Type::U32,
        dst: vals[..2].to_vec(),
        addr: Address::symbol(arr.clone(), 0),
    });
    b.push(Op::Ld { space: Space::Local, nc: false, ty: Type::U32, dst: vals[2..].to_vec(), addr: Address::symbol(arr, 8) });
    let s = b.binary(BinOp::Add, Type::U32, vals[0], vals[1]);
    let s = b.binary(BinOp::Add, Type::U32, s, vals[2]);
    let s = b.binary(BinOp::Add, Type::U32, s, vals[3]);
    let p = element(&mut b, out, i, 4);
    b.push(Op::St { space: Space::Global, ty: Type::U32, addr: Address::reg(p, 0), src: vec![s.into()] });
    b.push(Op::Ret);
    module(b.finish())
}

#[test]
fn local_arrays_are_per_thread() {
    let m = local_kernel();
    let mut mem = Memory::new();
    let out = mem.alloc(128 * 4);
    launch(&m, "local", cfg(2, 64), &[Arg::U64(out)], &mut mem).expect("runs");
    let expected: Vec<u32> = (0..128).map(|g| 4 * (g % 64) + 6).collect();
    assert_eq!(download_u32(&mem, out, 128), expected);
}

/// `k(out)`: every lane of one warp starts from `value(lane)` and writes what
/// `shuffles` leave it with to `out[lane]`.
fn warp_kernel(shuffles: &[(ShflMode, i64, i64)]) -> Module {
    let mut b = FunctionBuilder::entry("warp");
    let out = b.param("out", Type::U64);
    let out = load_param(&mut b, Type::U64, &out);
    let lane = b.mov(Type::U32, Special::LaneId);
    let sq = b.binary(BinOp::Mul, Type::U32, lane, lane);
    let sq = b.binary(BinOp::Add, Type::U32, sq, 1);
    let mut v = b.cvt(Type::F32, Type::U32, sq);
    if shuffles.iter().any(|s| s.0 != ShflMode::Bfly) {
        v = b.cvt(Type::F32, Type::U32, lane);
    }
    for &(mode, offset, clamp) in shuffles {
        let t = b.reg(Type::F32);
        b.push(Op::Shfl { mode, dst: t, src: v.into(), lane: offset.into(), clamp: clamp.into(), mask: (-1).into() });
        if mode == ShflMode::Bfly {
            b.push(Op::Binary { op: BinOp::Add, ty: Type::F32, dst: v, a: v.into(), b: t.into() });
        } else {
            v = t;
        }
    }
    let tid = b.mov(Type::U32, Special::TidX);
    let p = element(&mut b, out, tid, 4);
    b.push(Op::St { space: Space::Global, ty: Type::F32, addr: Address::reg(p, 0), src: vec![v.into()] });
    b.push(Op::Ret);
    module(b.finish())
}

fn run_warp(shuffles: &[(ShflMode, i64, i64)], block: u32) -> Result<Vec<f32>, SimError> {
    let mut mem = Memory::new();
    let out = mem.alloc(block as usize * 4);
    launch(&warp_kernel(shuffles), "warp", cfg(1, block), &[Arg::U64(out)], &mut mem)?;
    Ok(download_f32(&mem, out, block as usize))
}

#[test]
fn butterfly_sum_reaches_every_lane() {
    let bfly: Vec<_> = [16, 8, 4, 2, 1].iter().map(|&o| (ShflMode::Bfly, o, 31)).collect();
    let sum: u32 = (0..32).map(|l| l * l + 1).sum();
    assert_eq!(sum, 10448);
    assert_eq!(run_warp(&bfly, 32).expect("runs"), vec![sum as f32; 32]);
    // Two warps, each its own sum.
    assert_eq!(run_warp(&bfly, 64).expect("runs"), vec![sum as f32; 64]);
}

#[test]
fn shuffle_modes_follow_the_clamp_operand() {
    let lanes = |f: &dyn Fn(u32) -> u32| (0..32).map(|l| f(l) as f32).collect::<Vec<_>>();
    // Down by one: lane 31 keeps its own value.
    assert_eq!(run_warp(&[(ShflMode::Down, 1, 31)], 32).expect("runs"), lanes(&|l| (l + 1).min(31)));
    assert_eq!(run_warp(&[(ShflMode::Down, 4, 31)], 32).expect("runs"), lanes(&|l| if l + 4 > 31 { l } else { l + 4 }));
    // Width 16: c = ((32 - 16) << 8) | 0x1f, and for up ((32 - 16) << 8).
    let seg = (16 << 8) | 0x1f;
    assert_eq!(run_warp(&[(ShflMode::Down, 1, seg)], 32).expect("runs"), lanes(&|l| if l % 16 == 15 { l } else { l + 1 }));
    assert_eq!(run_warp(&[(ShflMode::Up, 1, 16 << 8)], 32).expect("runs"), lanes(&|l| if l % 16 == 0 { l } else { l - 1 }));
    assert_eq!(run_warp(&[(ShflMode::Up, 2, 0)], 32).expect("runs"), lanes(&|l| if l < 2 { l } else { l - 2 }));
    assert_eq!(run_warp(&[(ShflMode::Idx, 3, seg)], 32).expect("runs"), lanes(&|l| (l & 16) | 3));
    assert_eq!(run_warp(&[(ShflMode::Idx, 35, 31)], 32).expect("runs"), lanes(&|_| 3));
    // A lane may read an earlier segment but not a later one (its own value
    // instead): the ISA's `j <= maxLane`.
    let own = |l: u32| l * l + 1;
    let expected: Vec<f32> = (0..32).map(|l| (own(l) + if l < 16 { own(l) } else { own(l - 16) }) as f32).collect();
    assert_eq!(run_warp(&[(ShflMode::Bfly, 16, seg)], 32).expect("runs"), expected);
    // In a partial warp, a lane the block does not have cannot be read.
    let e = run_warp(&[(ShflMode::Down, 1, 31)], 48).expect_err("lane 48 does not exist");
    let (site, fault) = fault_of(e);
    assert_eq!(fault, Fault::ShflInactiveSource { source_lane: 16, mask: 0xffff });
    assert_eq!(site.thread, Some((0, 47)));
}

#[test]
fn shuffle_refuses_exited_and_diverged_lanes() {
    // Lane 0 returns before the shuffle the others wait at.
    let mut b = FunctionBuilder::entry("k");
    let lane = b.mov(Type::U32, Special::LaneId);
    let first = b.reg(Type::Pred);
    b.push(Op::Setp { cmp: Cmp::Eq, ty: Type::U32, dst: first, a: lane.into(), b: 0.into() });
    b.push(Instruction::from(Op::Ret).when(first));
    let t = b.reg(Type::B32);
    b.push(Op::Shfl { mode: ShflMode::Down, dst: t, src: lane.into(), lane: 1.into(), clamp: 31.into(), mask: (-1).into() });
    b.push(Op::Ret);
    let e = launch(&module(b.finish()), "k", cfg(1, 32), &[], &mut Memory::new()).expect_err("lane 0 exited");
    let (site, fault) = fault_of(e);
    assert_eq!(fault, Fault::ShflExited { lane: 0, mask: u32::MAX });
    assert_eq!((site.index, site.thread), (3, Some((0, 1))));

    // Odd lanes shuffle at one statement, even lanes at another.
    let mut b = FunctionBuilder::entry("k");
    let lane = b.mov(Type::U32, Special::LaneId);
    let odd = b.binary(BinOp::And, Type::B32, lane, 1);
    let p = b.reg(Type::Pred);
    b.push(Op::Setp { cmp: Cmp::Ne, ty: Type::U32, dst: p, a: odd.into(), b: 0.into() });
    let (other, done) = (b.label(), b.label());
    b.push(Instruction::from(Op::Bra { target: other, uni: false }).when(p));
    let t = b.reg(Type::B32);
    b.push(Op::Shfl { mode: ShflMode::Idx, dst: t, src: lane.into(), lane: 0.into(), clamp: 31.into(), mask: (-1).into() });
    b.push(Op::Bra { target: done, uni: false });
    b.place(other);
    b.push(Op::Shfl { mode: ShflMode::Idx, dst: t, src: lane.into(), lane: 0.into(), clamp: 31.into(), mask: (-1).into() });
    b.place(done);
    b.push(Op::Ret);
    let e = launch(&module(b.finish()), "k", cfg(1, 32), &[], &mut Memory::new()).expect_err("diverged");
    let (_, fault) = fault_of(e);
    assert!(matches!(fault, Fault::ShflDiverged { lane: 1, index: 7, .. }), "{fault:?}");

    // A half-warp mask is fine when those lanes take part.
    let mut b = FunctionBuilder::entry("k");
    let out = b.param("out", Type::U64);
    let out = load_param(&mut b, Type::U64, &out);
    let lane = b.mov(Type::U32, Special::LaneId);
    let low = b.reg(Type::Pred);
    b.push(Op::Setp { cmp: Cmp::Lt, ty: Type::U32, dst: low, a: lane.into(), b: 16.into() });
    let t = b.mov(Type::U32, 99);
    b.push(
        Instruction::from(Op::Shfl {
            mode: ShflMode::Bfly,
            dst: t,
            src: lane.into(),
            lane: 1.into(),
            clamp: 31.into(),
            mask: 0xffff.into(),
        })
        .when(low),
    );
    let p = element(&mut b, out, lane, 4);
    b.push(Op::St { space: Space::Global, ty: Type::U32, addr: Address::reg(p, 0), src: vec![t.into()] });
    b.push(Op::Ret);
    let mut mem = Memory::new();
    let out = mem.alloc(128);
    launch(&module(b.finish()), "k", cfg(1, 32), &[Arg::U64(out)], &mut mem).expect("runs");
    let expected: Vec<u32> = (0..32).map(|l| if l < 16 { l ^ 1 } else { 99 }).collect();
    assert_eq!(download_u32(&mem, out, 32), expected);
}

/// `reverse(x, y)`: each block reverses its part of `x` into `y` through
/// a shared tile, with a `bar.sync` between the writes and the reads.
fn reverse_kernel() -> Module {
    let mut b = FunctionBuilder::entry("reverse");
    let x = b.param("x", Type::U64);
    let y = b.param("y", Type::U64);
    let smem = b.shared("tile", 4, 64 * 4);
    let x = load_param(&mut b, Type::U64, &x);
    let y = load_param(&mut b, Type::U64, &y);
    let i = global_id(&mut b);
    let tid = b.mov(Type::U32, Special::TidX);
    let ntid = b.mov(Type::U32, Special::NtidX);
    let xp = element(&mut b, x, i, 4);
    let v = b.reg(Type::F32);
    b.push(Op::Ld { space: Space::Global, nc: true, ty: Type::F32, dst: vec![v], addr: Address::reg(xp, 0) });
    let base = b.mov(Type::U64, Operand::Symbol(smem));
    let mine = element(&mut b, base, tid, 4);
    b.push(Op::St { space: Space::Shared, ty: Type::F32, addr: Address::reg(mine, 0), src: vec![v.into()] });
    b.push(Op::BarSync(0));
    let last = b.binary(BinOp::Sub, Type::U32, ntid, 1);
    let other = b.binary(BinOp::Sub, Type::U32, last, tid);
    let theirs = element(&mut b, base, other, 4);
    let w = b.reg(Type::F32);
    b.push(Op::Ld { space: Space::Shared, nc: false, ty: Type::F32, dst: vec![w], addr: Address::reg(theirs, 0) });
    let yp = element(&mut b, y, i, 4);
    b.push(Op::St { space: Space::Global, ty: Type::F32, addr: Address::reg(yp, 0), src: vec![w.into()] });
    b.push(Op::Ret);
    module(b.finish())
}

#[test]
fn bar_sync_with_shared_memory_reverses_each_block() {
    let m = reverse_kernel();
    let x: Vec<f32> = (0..128).map(|i| i as f32 * 1.25).collect();
    let mut mem = Memory::new();
    let xd = upload_f32(&mut mem, &x);
    let yd = mem.alloc(128 * 4);
    launch(&m, "reverse", cfg(2, 64), &[Arg::U64(xd), Arg::U64(yd)], &mut mem).expect("runs");
    let expected: Vec<f32> = (0..128).map(|g| x[(g / 64) * 64 + 63 - g % 64]).collect();
    assert_eq!(download_f32(&mem, yd, 128), expected);
}

#[test]
fn a_shuffle_waiting_on_a_barrier_is_a_deadlock() {
    let mut b = FunctionBuilder::entry("k");
    let tid = b.mov(Type::U32, Special::TidX);
    let p = b.reg(Type::Pred);
    b.push(Op::Setp { cmp: Cmp::Ne, ty: Type::U32, dst: p, a: tid.into(), b: 0.into() });
    b.push(Instruction::from(Op::BarSync(0)).when(p));
    let t = b.reg(Type::B32);
    b.push(Op::Shfl { mode: ShflMode::Bfly, dst: t, src: tid.into(), lane: 1.into(), clamp: 31.into(), mask: (-1).into() });
    b.push(Op::Ret);
    let e = launch(&module(b.finish()), "k", cfg(1, 32), &[], &mut Memory::new()).expect_err("deadlock");
    let (site, fault) = fault_of(e);
    assert_eq!(site.thread, Some((0, 0)));
    assert!(
        matches!(&fault, Fault::Deadlock(what) if what.contains("lane 1, which waits at `bar.sync` (statement 2)")),
        "{fault}"
    );
}

#[test]
fn atomics_act_one_thread_at_a_time() {
    let mut b = FunctionBuilder::entry("k");
    let out = b.param("out", Type::U64);
    let out = load_param(&mut b, Type::U64, &out);
    let i = global_id(&mut b);
    let old = b.reg(Type::U32);
    b.push(Op::Atom {
        op: AtomOp::Add,
        space: Space::Global,
        ty: Type::U32,
        dst: old,
        addr: Address::reg(out, 0),
        src: 1.into(),
    });
    let slot = b.binary(BinOp::Add, Type::U32, old, 4);
    let p = element(&mut b, out, slot, 4);
    b.push(Op::St { space: Space::Global, ty: Type::U32, addr: Address::reg(p, 0), src: vec![i.into()] });
    let neg = b.reg(Type::S32);
    b.push(Op::Unary { op: UnOp::Neg, ty: Type::S32, dst: neg, a: i.into() });
    b.push(Op::Red { op: AtomOp::Min, space: Space::Global, ty: Type::S32, addr: Address::reg(out, 4), src: neg.into() });
    let f = b.cvt(Type::F32, Type::U32, i);
    b.push(Op::Red { op: AtomOp::Add, space: Space::Global, ty: Type::F32, addr: Address::reg(out, 8), src: f.into() });
    let prev = b.reg(Type::B32);
    b.push(Op::Atom {
        op: AtomOp::Exch,
        space: Space::Global,
        ty: Type::B32,
        dst: prev,
        addr: Address::reg(out, 12),
        src: i.into(),
    });
    b.push(Op::Ret);
    let m = module(b.finish());
    let mut mem = Memory::new();
    let out = mem.alloc((4 + 96) * 4);
    launch(&m, "k", cfg(3, 32), &[Arg::U64(out)], &mut mem).expect("runs");
    let words = download_u32(&mem, out, 100);
    assert_eq!(words[0], 96);
    assert_eq!(words[1] as i32, -95);
    assert_eq!(f32::from_bits(words[2]), (0..96).sum::<u32>() as f32);
    assert_eq!(words[3], 95, "the last thread's exchange");
    assert_eq!(words[4..], (0..96).collect::<Vec<u32>>(), "thread order");
}

#[test]
fn out_of_bounds_store_names_the_statement() {
    let mut b = FunctionBuilder::entry("k");
    let out = b.param("out", Type::U64);
    let out = load_param(&mut b, Type::U64, &out);
    let tid = b.mov(Type::U32, Special::TidX);
    let p = element(&mut b, out, tid, 4);
    b.push(Op::St { space: Space::Global, ty: Type::U32, addr: Address::reg(p, 0), src: vec![tid.into()] });
    b.push(Op::Ret);
    let m = module(b.finish());
    let mut mem = Memory::new();
    let buf = mem.alloc(10 * 4);
    let e = launch(&m, "k", cfg(1, 32), &[Arg::U64(buf)], &mut mem).expect_err("thread 10 is outside");
    assert_eq!(
        e.to_string(),
        format!(
            "k, statement 4 `st.global.u32 [%rd2], %r0;` (block 0, thread 10): `.global` access of 4 bytes at {:#x} \
             is outside every live buffer of that space",
            buf + 40
        )
    );
    // Threads before it ran.
    assert_eq!(download_u32(&mem, buf, 10), (0..10).collect::<Vec<u32>>());

    // A freed buffer is gone.
    mem.free(buf).expect("live");
    let (_, fault) = fault_of(launch(&m, "k", cfg(1, 1), &[Arg::U64(buf)], &mut mem).expect_err("freed"));
    assert!(matches!(fault, Fault::OutOfBounds { space: Space::Global, .. }));
}

#[test]
fn shared_and_local_accesses_stay_in_their_arrays() {
    for space in [Space::Shared, Space::Local] {
        let mut b = FunctionBuilder::entry("k");
        let arr = if space == Space::Shared { b.shared("a", 4, 8) } else { b.local("a", 4, 8) };
        let base = b.mov(Type::U64, Operand::Symbol(arr));
        b.push(Op::St { space, ty: Type::U32, addr: Address::reg(base, 8), src: vec![1.into()] });
        b.push(Op::Ret);
        let (site, fault) = fault_of(launch(&module(b.finish()), "k", cfg(1, 1), &[], &mut Memory::new()).expect_err("outside"));
        assert_eq!(site.index, 1);
        assert!(matches!(fault, Fault::OutOfBounds { space: s, bytes: 4, .. } if s == space), "{fault:?}");
    }
    // A shared address is no global one.
    let mut b = FunctionBuilder::entry("k");
    let arr = b.shared("a", 4, 8);
    let base = b.mov(Type::U64, Operand::Symbol(arr));
    b.push(Op::St { space: Space::Global, ty: Type::U32, addr: Address::reg(base, 0), src: vec![1.into()] });
    b.push(Op::Ret);
    let (_, fault) = fault_of(launch(&module(b.finish()), "k", cfg(1, 1), &[], &mut Memory::new()).expect_err("wrong space"));
    assert!(matches!(fault, Fault::OutOfBounds { space: Space::Global, .. }));
}

#[test]
fn arguments_must_match_the_parameters() {
    let m = common::saxpy(80);
    let mut mem = Memory::new();
    let e = launch(&m, "saxpy", cfg(1, 32), &[Arg::U32(1), Arg::F32(1.0), Arg::U64(0)], &mut mem).expect_err("three");
    assert!(matches!(e, SimError::ArgumentCount { expected: 4, given: 3, .. }), "{e}");
    let e = launch(&m, "saxpy", cfg(1, 32), &[Arg::U32(1), Arg::F64(1.0), Arg::U64(0), Arg::U64(0)], &mut mem).expect_err("f64");
    assert_eq!(e.to_string(), "saxpy: argument 1 (F64(1.0)) does not fit parameter `a` of type `.f32`");
    let e = launch(&m, "saxpy", cfg(1, 32), &[Arg::U64(1), Arg::F32(1.0), Arg::U64(0), Arg::U64(0)], &mut mem).expect_err("u64");
    assert!(matches!(e, SimError::ArgumentType { index: 0, .. }), "{e}");
    let e = launch(&m, "nope", cfg(1, 32), &[], &mut mem).expect_err("no such entry");
    assert!(matches!(e, SimError::UnknownEntry(_)));
    let e = launch(&m, "saxpy", cfg(1, 2000), &[], &mut mem).expect_err("block too big");
    assert!(matches!(e, SimError::LaunchConfig { .. }));
}

#[test]
fn ld_param_reads_whole_parameters_of_their_type() {
    let run = |ty: Type, offset: i64| {
        let mut b = FunctionBuilder::entry("k");
        let n = b.param("n", Type::U32);
        let r = b.reg(ty);
        b.push(Op::Ld { space: Space::Param, nc: false, ty, dst: vec![r], addr: Address::symbol(n, offset) });
        b.push(Op::Ret);
        launch(&module(b.finish()), "k", cfg(1, 1), &[Arg::U32(3)], &mut Memory::new())
    };
    run(Type::U32, 0).expect("u32");
    run(Type::S32, 0).expect("s32");
    run(Type::B32, 0).expect("b32");
    let (_, fault) = fault_of(run(Type::F32, 0).expect_err("float"));
    assert!(matches!(&fault, Fault::ParamLoad { reason, .. } if reason == "`n` is declared `.u32`, loaded as `.f32`"), "{fault}");
    let (_, fault) = fault_of(run(Type::U64, 0).expect_err("wider"));
    assert!(matches!(fault, Fault::ParamLoad { .. }));
    let (_, fault) = fault_of(run(Type::U32, 4).expect_err("past it"));
    assert!(matches!(fault, Fault::ParamLoad { .. }));

    // The address of a parameter, through a register.
    let v = eval(|b| {
        let p = b.mov(Type::U64, Operand::Symbol("out".into()));
        let r = b.reg(Type::U64);
        b.push(Op::Ld { space: Space::Param, nc: false, ty: Type::U64, dst: vec![r], addr: Address::reg(p, 0) });
        (r, Type::U64)
    });
    assert!(v >= 1 << 32 && v.is_multiple_of(256), "the buffer's own address: {v:#x}");
}

#[test]
fn undefined_behaviour_is_an_error() {
    let (site, fault) = fault_of(
        launch(
            &{
                let mut b = FunctionBuilder::entry("k");
                let r = b.reg(Type::U32);
                b.binary(BinOp::Add, Type::U32, r, 1);
                b.push(Op::Ret);
                module(b.finish())
            },
            "k",
            cfg(1, 1),
            &[],
            &mut Memory::new(),
        )
        .expect_err("never written"),
    );
    assert_eq!((site.index, fault), (0, Fault::Uninitialized(Reg { class: tiga_ptx::RegClass::R, index: 0 })));

    let mut b = FunctionBuilder::entry("k");
    let tid = b.mov(Type::U32, Special::TidX);
    b.binary(BinOp::Div, Type::U32, 1, tid);
    b.push(Op::Ret);
    let (site, fault) = fault_of(launch(&module(b.finish()), "k", cfg(1, 4), &[], &mut Memory::new()).expect_err("1 / 0"));
    assert_eq!((site.index, site.thread, fault), (1, Some((0, 0)), Fault::DivisionByZero));

    // A module that does not validate is refused before it runs.
    let mut b = FunctionBuilder::entry("k");
    let f = b.reg(Type::F32);
    b.push(Op::Mov { ty: Type::F32, dst: f, src: 1.into() });
    let e = launch(&module(b.finish()), "k", cfg(1, 1), &[], &mut Memory::new()).expect_err("invalid");
    assert!(matches!(e, SimError::Invalid(_)), "{e}");
}

#[test]
fn an_endless_loop_hits_the_step_limit() {
    let mut b = FunctionBuilder::entry("spin");
    let top = b.label();
    b.place(top);
    b.push(Op::Bra { target: top, uni: true });
    b.push(Op::Ret);
    let e = launch_with_limit(&module(b.finish()), "spin", cfg(2, 32), &[], &mut Memory::new(), 10_000).expect_err("spins");
    assert!(matches!(&e, SimError::StepLimit { limit: 10_000, site } if site.index == 1), "{e}");
    assert!(e.to_string().contains("step limit of 10000 instructions"), "{e}");
}

#[test]
fn guards_skip_instructions_and_count_as_reached() {
    let mut b = FunctionBuilder::entry("k");
    let out = b.param("out", Type::U64);
    let out = load_param(&mut b, Type::U64, &out);
    let tid = b.mov(Type::U32, Special::TidX);
    let odd = b.binary(BinOp::And, Type::B32, tid, 1);
    let p = b.reg(Type::Pred);
    b.push(Op::Setp { cmp: Cmp::Eq, ty: Type::U32, dst: p, a: odd.into(), b: 1.into() });
    let v = b.mov(Type::U32, 10);
    b.push(Instruction::from(Op::Mov { ty: Type::U32, dst: v, src: 20.into() }).when(p));
    b.push(Instruction::from(Op::Binary { op: BinOp::Add, ty: Type::U32, dst: v, a: v.into(), b: 1.into() }).unless(p));
    let q = element(&mut b, out, tid, 4);
    b.push(Op::St { space: Space::Global, ty: Type::U32, addr: Address::reg(q, 0), src: vec![v.into()] });
    b.push(Op::Ret);
    let m = module(b.finish());
    let mut mem = Memory::new();
    let out = mem.alloc(4 * 4);
    let stats = launch(&m, "k", cfg(1, 4), &[Arg::U64(out)], &mut mem).expect("runs");
    assert_eq!(download_u32(&mem, out, 4), vec![11, 20, 11, 20]);
    assert_eq!(stats.instructions, 4 * 11);
    assert_eq!(stats.threads, 4);
}

#[test]
fn memory_buffers_are_apart_aligned_and_checked() {
    let mut mem = Memory::default();
    let a = mem.alloc(10);
    let b = mem.alloc(0);
    let c = mem.alloc(1000);
    for addr in [a, b, c] {
        assert!(addr != 0 && addr.is_multiple_of(256), "{addr:#x}");
    }
    assert!(a + 10 < b && b < c);
    assert_eq!(mem.bytes_allocated(), 1010);
    mem.write(c + 996, &[1, 2, 3, 4]).expect("inside");
    let mut four = [0u8; 4];
    mem.read(c + 996, &mut four).expect("inside");
    assert_eq!(four, [1, 2, 3, 4]);
    assert!(mem.write(c + 997, &[0; 4]).is_err());
    assert!(mem.read(a + 8, &mut four).is_err());
    assert!(mem.read(a - 4, &mut four).is_err());
    mem.read(b, &mut []).expect("an empty read of an empty buffer");
    assert!(mem.free(c + 4).is_err());
    mem.free(c).expect("live");
    assert!(mem.free(c).is_err(), "twice");
    assert!(mem.read(c, &mut four).is_err());
    assert_eq!(mem.bytes_allocated(), 10);
    let d = mem.alloc(4);
    assert!(d > c, "addresses are not reused");
    let e = mem.free(12345).expect_err("no buffer");
    assert_eq!(e.to_string(), "0x3039 is not the start of a live buffer");
}

/// `k(x, out, n)`: thread `i < n` converts `x[i]` (of `src_ty`) to `dst_ty`
/// in each of `.rn .rz .rm .rp`, into `out[4i..4i+4]`.
fn cvt_sweep_kernel(dst_ty: Type, src_ty: Type) -> Module {
    let mut b = FunctionBuilder::entry("sweep");
    let x = b.param("x", Type::U64);
    let out = b.param("out", Type::U64);
    let n = b.param("n", Type::U32);
    let x = load_param(&mut b, Type::U64, &x);
    let out = load_param(&mut b, Type::U64, &out);
    let n = load_param(&mut b, Type::U32, &n);
    let i = global_id(&mut b);
    let done = b.label();
    let past = b.reg(Type::Pred);
    b.push(Op::Setp { cmp: Cmp::Ge, ty: Type::U32, dst: past, a: i.into(), b: n.into() });
    b.push(Instruction::from(Op::Bra { target: done, uni: false }).when(past));
    let xp = element(&mut b, x, i, 8);
    let v = b.reg(src_ty);
    b.push(Op::Ld { space: Space::Global, nc: false, ty: src_ty, dst: vec![v], addr: Address::reg(xp, 0) });
    let size = i64::from(dst_ty.bits() / 8);
    let op = element(&mut b, out, i, 4 * size);
    for (k, round) in [Round::Rn, Round::Rz, Round::Rm, Round::Rp].into_iter().enumerate() {
        let r = b.reg(dst_ty);
        b.push(Op::Cvt { round: Some(round), dst_ty, src_ty, dst: r, src: v.into() });
        b.push(Op::St { space: Space::Global, ty: dst_ty, addr: Address::reg(op, k as i64 * size), src: vec![r.into()] });
    }
    b.place(done);
    b.push(Op::Ret);
    module(b.finish())
}

/// Runs the sweep over `inputs` (as 8-byte words); the four results per input.
fn cvt_sweep(dst_ty: Type, src_ty: Type, inputs: &[u64]) -> Vec<[u64; 4]> {
    let mut mem = Memory::new();
    let x = mem.alloc(inputs.len() * 8);
    mem.write(x, &inputs.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).expect("in bounds");
    let size = dst_ty.bits() as usize / 8;
    let out = mem.alloc(inputs.len() * 4 * size);
    let n = inputs.len() as u32;
    launch(
        &cvt_sweep_kernel(dst_ty, src_ty),
        "sweep",
        cfg(n.div_ceil(128), 128),
        &[Arg::U64(x), Arg::U64(out), Arg::U32(n)],
        &mut mem,
    )
    .expect("runs");
    let mut bytes = vec![0u8; inputs.len() * 4 * size];
    mem.read(out, &mut bytes).expect("in bounds");
    let words: Vec<u64> = bytes
        .chunks_exact(size)
        .map(|c| {
            let mut w = [0u8; 8];
            w[..size].copy_from_slice(c);
            u64::from_le_bytes(w)
        })
        .collect();
    words.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]).collect()
}

fn xorshift(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// The directed modes bracket the exact value with adjacent floats, `.rz`
/// is the one nearer zero and `.rn` the nearer one (`cmp(r)` compares a
/// result with the exact value; `up` is the next float above).
fn check_bracket<F: Copy + PartialEq + std::fmt::Debug>(
    what: &str,
    [rn, rz, rm, rp]: [F; 4],
    positive: bool,
    cmp: impl Fn(F) -> std::cmp::Ordering,
    up: impl Fn(F) -> F,
    closer: impl Fn(F, F) -> bool,
) {
    use std::cmp::Ordering::*;
    assert_ne!(cmp(rm), Greater, "{what}: rm {rm:?}");
    assert_ne!(cmp(rp), Less, "{what}: rp {rp:?}");
    if cmp(rm) == Equal || cmp(rp) == Equal {
        assert!(rm == rp && rn == rm && rz == rm, "{what}: exact but {rn:?} {rz:?} {rm:?} {rp:?}");
    } else {
        assert_eq!(up(rm), rp, "{what}: rm and rp are not adjacent");
        assert_eq!(rz, if positive { rm } else { rp }, "{what}: rz");
        assert!(rn == rm || rn == rp, "{what}: rn {rn:?}");
        let other = if rn == rm { rp } else { rm };
        assert!(closer(rn, other), "{what}: rn {rn:?} is not the nearer");
    }
}

fn next_up_f32(x: f32) -> f32 {
    if x == 0.0 {
        f32::from_bits(1)
    } else if x > 0.0 {
        f32::from_bits(x.to_bits() + 1)
    } else {
        f32::from_bits(x.to_bits() - 1)
    }
}

#[test]
fn directed_roundings_bracket_the_exact_value() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    // f64 to f32: random bits, magnitudes around f32's range and its subnormals.
    let mut inputs: Vec<u64> = (0..3000)
        .map(|k| {
            let r = xorshift(&mut seed);
            let exp = [1023u64 - 160, 1023 - 130, 1023, 1023 + 127, 1023 + 129][k % 5] + (r >> 60) % 8;
            (r & (1 << 63)) | (exp << 52) | (r & ((1 << 52) - 1))
        })
        .collect();
    inputs.extend([0.1f64, -0.1, 1.0, 0.0, -0.0, 1e-46, -1e-46].map(f64::to_bits));
    let results = cvt_sweep(Type::F32, Type::F64, &inputs);
    for (x, r) in inputs.iter().zip(&results) {
        let x = f64::from_bits(*x);
        let r = r.map(|w| f32::from_bits(w as u32));
        let cmp = |f: f32| f64::from(f).partial_cmp(&x).expect("no NaN");
        // Rounding to nearest treats infinity as 2^128 (IEEE 754's unbounded exponent).
        let value = |f: f32| if f.is_infinite() { 2f64.powi(128).copysign(f64::from(f)) } else { f64::from(f) };
        let closer = |a: f32, b: f32| {
            let (da, db) = ((value(a) - x).abs(), (value(b) - x).abs());
            // A tie goes to the even one.
            da < db || (da == db && a.to_bits().is_multiple_of(2))
        };
        check_bracket(&format!("f64 {x:e}"), r, x > 0.0, cmp, next_up_f32, closer);
    }

    // s64 and u64 to f32 and f64.
    let ints: Vec<u64> =
        (0..3000).map(|k| xorshift(&mut seed) >> (k % 40)).chain([0, 1, u64::MAX, 1 << 63, (1 << 24) + 1]).collect();
    for src_ty in [Type::S64, Type::U64] {
        let exact = |w: u64| if src_ty == Type::S64 { i128::from(w as i64) } else { i128::from(w) };
        for (w, r) in ints.iter().zip(cvt_sweep(Type::F32, src_ty, &ints)) {
            let x = exact(*w);
            let r = r.map(|w| f32::from_bits(w as u32));
            let closer = |a: f32, b: f32| {
                let (da, db) = ((a as i128 - x).abs(), (b as i128 - x).abs());
                da < db || (da == db && a.to_bits().is_multiple_of(2))
            };
            check_bracket(&format!("{src_ty} {x} to f32"), r, x > 0, |f| (f as i128).cmp(&x), next_up_f32, closer);
        }
        for (w, r) in ints.iter().zip(cvt_sweep(Type::F64, src_ty, &ints)) {
            let x = exact(*w);
            let r = r.map(f64::from_bits);
            let up = |f: f64| if f >= 0.0 { f64::from_bits(f.to_bits() + 1) } else { f64::from_bits(f.to_bits() - 1) };
            let closer = |a: f64, b: f64| {
                let (da, db) = ((a as i128 - x).abs(), (b as i128 - x).abs());
                da < db || (da == db && a.to_bits().is_multiple_of(2))
            };
            check_bracket(&format!("{src_ty} {x} to f64"), r, x > 0, |f| (f as i128).cmp(&x), up, closer);
        }
    }
}

/// The multi-thread kernels above are PTX that ptxas takes (where a ptxas
/// is found; see `tiga_ptx::find_ptxas`), so what they simulate is real.
#[test]
fn simulated_kernels_assemble() {
    let Some(ptxas) = tiga_ptx::find_ptxas() else {
        eprintln!("skipped: no ptxas");
        return;
    };
    let bfly: Vec<_> = [16, 8, 4, 2, 1].iter().map(|&o| (ShflMode::Bfly, o, 31)).collect();
    let kernels = [
        ("copy", copy_v4(0)),
        ("local", local_kernel()),
        ("reverse", reverse_kernel()),
        ("bfly", warp_kernel(&bfly)),
        ("shuffles", warp_kernel(&[(ShflMode::Up, 1, 16 << 8), (ShflMode::Down, 2, 31), (ShflMode::Idx, 3, (16 << 8) | 0x1f)])),
        ("sweep_f32_f64", cvt_sweep_kernel(Type::F32, Type::F64)),
        ("sweep_f64_s64", cvt_sweep_kernel(Type::F64, Type::S64)),
    ];
    let dir = std::env::temp_dir().join(format!("tiga-ptx-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut failures = Vec::new();
    for (name, m) in &kernels {
        tiga_ptx::validate(m).expect("validates");
        let file = dir.join(format!("{name}.ptx"));
        std::fs::write(&file, m.print()).expect("write ptx");
        if let Err(e) = tiga_ptx::assemble(&ptxas, &file, 80) {
            failures.push(format!("{name}: {e}"));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "ptxas refused:\n{}", failures.join("\n"));
}
