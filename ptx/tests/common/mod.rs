//! Kernels shared by the golden and ptxas tests.
#![allow(dead_code)]

use tiga_ptx::{Address, AtomOp, BinOp, Cmp, FunctionBuilder, Module, Op, Param, Round, ShflMode, Space, Special, Type, UnOp};

/// `y[i] = a * x[i] + y[i]` for `i < n`, over a grid-stride loop.
pub fn saxpy(sm: u32) -> Module {
    let mut b = FunctionBuilder::entry("saxpy");
    let n = b.param("n", Type::U32);
    let a = b.param("a", Type::F32);
    let x = b.param("x", Type::U64);
    let y = b.param("y", Type::U64);
    let n = load_param(&mut b, Type::U32, &n);
    let a = load_param(&mut b, Type::F32, &a);
    let x = load_param(&mut b, Type::U64, &x);
    let y = load_param(&mut b, Type::U64, &y);
    let x = to_global(&mut b, x);
    let y = to_global(&mut b, y);
    let ctaid = b.mov(Type::U32, Special::CtaidX);
    let ntid = b.mov(Type::U32, Special::NtidX);
    let tid = b.mov(Type::U32, Special::TidX);
    let i = b.reg(Type::U32);
    b.push(Op::Mad { ty: Type::U32, dst: i, a: ctaid.into(), b: ntid.into(), c: tid.into() });
    let nctaid = b.mov(Type::U32, Special::NctaidX);
    let stride = b.binary(BinOp::Mul, Type::U32, nctaid, ntid);
    let (top, done) = (b.label(), b.label());
    let out = b.reg(Type::Pred);
    b.push(Op::Setp { cmp: Cmp::Ge, ty: Type::U32, dst: out, a: i.into(), b: n.into() });
    b.push(tiga_ptx::Instruction::from(Op::Bra { target: done, uni: false }).when(out));
    b.place(top);
    let off = b.reg(Type::U64);
    b.push(Op::MulWide { ty: Type::U32, dst: off, a: i.into(), b: 4.into() });
    let xp = b.binary(BinOp::Add, Type::U64, x, off);
    let yp = b.binary(BinOp::Add, Type::U64, y, off);
    let xv = b.reg(Type::F32);
    b.push(Op::Ld { space: Space::Global, nc: true, ty: Type::F32, dst: vec![xv], addr: Address::reg(xp, 0) });
    let yv = b.reg(Type::F32);
    b.push(Op::Ld { space: Space::Global, nc: false, ty: Type::F32, dst: vec![yv], addr: Address::reg(yp, 0) });
    let r = b.reg(Type::F32);
    b.push(Op::Fma { ty: Type::F32, dst: r, a: a.into(), b: xv.into(), c: yv.into() });
    b.push(Op::St { space: Space::Global, ty: Type::F32, addr: Address::reg(yp, 0), src: vec![r.into()] });
    b.push(Op::Binary { op: BinOp::Add, ty: Type::U32, dst: i, a: i.into(), b: stride.into() });
    let more = b.reg(Type::Pred);
    b.push(Op::Setp { cmp: Cmp::Lt, ty: Type::U32, dst: more, a: i.into(), b: n.into() });
    b.push(tiga_ptx::Instruction::from(Op::Bra { target: top, uni: false }).when(more));
    b.place(done);
    b.push(Op::Ret);
    let mut m = Module::new(sm);
    m.functions.push(b.finish());
    m
}

fn to_global(b: &mut FunctionBuilder, generic: tiga_ptx::Reg) -> tiga_ptx::Reg {
    let r = b.reg(Type::U64);
    b.push(Op::CvtaTo { space: Space::Global, dst: r, src: generic.into() });
    r
}

fn load_param(b: &mut FunctionBuilder, ty: Type, name: &str) -> tiga_ptx::Reg {
    let r = b.reg(ty);
    b.push(Op::Ld { space: Space::Param, nc: false, ty, dst: vec![r], addr: Address::symbol(name, 0) });
    r
}

/// `*out += sum(x[..n])`: a butterfly shuffle per warp, one partial per warp
/// in shared memory, thread 0 adds them and does one `red.global.add`.
pub fn reduce_sum(sm: u32) -> Module {
    let mut b = FunctionBuilder::entry("reduce_sum");
    let n = b.param("n", Type::U32);
    let x = b.param("x", Type::U64);
    let out = b.param("out", Type::U64);
    let smem = b.shared("partials", 4, 32 * 4);
    let n = load_param(&mut b, Type::U32, &n);
    let x = load_param(&mut b, Type::U64, &x);
    let out = load_param(&mut b, Type::U64, &out);
    let x = to_global(&mut b, x);
    let out = to_global(&mut b, out);
    let ctaid = b.mov(Type::U32, Special::CtaidX);
    let ntid = b.mov(Type::U32, Special::NtidX);
    let tid = b.mov(Type::U32, Special::TidX);
    let gid = b.reg(Type::U32);
    b.push(Op::Mad { ty: Type::U32, dst: gid, a: ctaid.into(), b: ntid.into(), c: tid.into() });
    let v = b.mov(Type::F32, 0.0f32);
    let inside = b.reg(Type::Pred);
    b.push(Op::Setp { cmp: Cmp::Lt, ty: Type::U32, dst: inside, a: gid.into(), b: n.into() });
    let off = b.reg(Type::U64);
    b.push(Op::MulWide { ty: Type::U32, dst: off, a: gid.into(), b: 4.into() });
    let xp = b.binary(BinOp::Add, Type::U64, x, off);
    b.push(
        tiga_ptx::Instruction::from(Op::Ld {
            space: Space::Global,
            nc: true,
            ty: Type::F32,
            dst: vec![v],
            addr: Address::reg(xp, 0),
        })
        .when(inside),
    );
    for lane in [16, 8, 4, 2, 1] {
        let t = b.reg(Type::F32);
        b.push(Op::Shfl { mode: ShflMode::Bfly, dst: t, src: v.into(), lane: lane.into(), clamp: 31.into(), mask: (-1).into() });
        b.push(Op::Binary { op: BinOp::Add, ty: Type::F32, dst: v, a: v.into(), b: t.into() });
    }
    let laneid = b.mov(Type::U32, Special::LaneId);
    let warp = b.binary(BinOp::Shr, Type::U32, tid, 5);
    let woff = b.binary(BinOp::Shl, Type::B32, warp, 2);
    let base = b.mov(Type::U32, tiga_ptx::Operand::Symbol(smem.clone()));
    let slot = b.binary(BinOp::Add, Type::U32, base, woff);
    let lane0 = b.reg(Type::Pred);
    b.push(Op::Setp { cmp: Cmp::Eq, ty: Type::U32, dst: lane0, a: laneid.into(), b: 0.into() });
    b.push(
        tiga_ptx::Instruction::from(Op::St {
            space: Space::Shared,
            ty: Type::F32,
            addr: Address::reg(slot, 0),
            src: vec![v.into()],
        })
        .when(lane0),
    );
    b.push(Op::BarSync(0));
    let done = b.label();
    let not0 = b.reg(Type::Pred);
    b.push(Op::Setp { cmp: Cmp::Ne, ty: Type::U32, dst: not0, a: tid.into(), b: 0.into() });
    b.push(tiga_ptx::Instruction::from(Op::Bra { target: done, uni: false }).when(not0));
    let warps = b.binary(BinOp::Shr, Type::U32, ntid, 5);
    let end = b.binary(BinOp::Shl, Type::B32, warps, 2);
    let end = b.binary(BinOp::Add, Type::U32, base, end);
    let sum = b.mov(Type::F32, 0.0f32);
    let top = b.label();
    b.place(top);
    let p = b.reg(Type::F32);
    b.push(Op::Ld { space: Space::Shared, nc: false, ty: Type::F32, dst: vec![p], addr: Address::reg(base, 0) });
    b.push(Op::Binary { op: BinOp::Add, ty: Type::F32, dst: sum, a: sum.into(), b: p.into() });
    b.push(Op::Binary { op: BinOp::Add, ty: Type::U32, dst: base, a: base.into(), b: 4.into() });
    let more = b.reg(Type::Pred);
    b.push(Op::Setp { cmp: Cmp::Lt, ty: Type::U32, dst: more, a: base.into(), b: end.into() });
    b.push(tiga_ptx::Instruction::from(Op::Bra { target: top, uni: false }).when(more));
    b.push(Op::Red { op: AtomOp::Add, space: Space::Global, ty: Type::F32, addr: Address::reg(out, 0), src: sum.into() });
    b.place(done);
    b.push(Op::Ret);
    let mut m = Module::new(sm);
    m.functions.push(b.finish());
    m
}

/// Every other instruction form once, in a kernel and a `.func` helper, so
/// ptxas sees each printed shape.
pub fn assorted(sm: u32) -> Module {
    let mut b = FunctionBuilder::entry("assorted");
    let x = b.param("x", Type::U64);
    let x = load_param(&mut b, Type::U64, &x);
    let v = [b.reg(Type::F32), b.reg(Type::F32), b.reg(Type::F32), b.reg(Type::F32)];
    b.push(Op::Ld { space: Space::Global, nc: true, ty: Type::F32, dst: v.to_vec(), addr: Address::reg(x, 16) });
    let d = b.cvt(Type::F64, Type::F32, v[0]);
    let d = b.binary(BinOp::Div, Type::F64, d, 3.0f64);
    let f = b.cvt(Type::F32, Type::F64, d);
    let ints = b.cvt(Type::S32, Type::F32, f);
    let wide = b.cvt(Type::S64, Type::S32, ints);
    let back = b.cvt(Type::F32, Type::S64, wide);
    let un = |b: &mut FunctionBuilder, op: UnOp, ty: Type, a: tiga_ptx::Reg| {
        let dst = b.reg(ty);
        b.push(Op::Unary { op, ty, dst, a: a.into() });
        dst
    };
    let e = un(&mut b, UnOp::Ex2Approx, Type::F32, back);
    let l = un(&mut b, UnOp::Lg2Approx, Type::F32, e);
    let r = un(&mut b, UnOp::RcpApprox, Type::F32, l);
    let r = un(&mut b, UnOp::RcpRn, Type::F32, r);
    let s = un(&mut b, UnOp::SqrtApprox, Type::F32, r);
    let s = un(&mut b, UnOp::SqrtRn, Type::F32, s);
    let s = un(&mut b, UnOp::Neg, Type::F32, s);
    let s = un(&mut b, UnOp::Abs, Type::F32, s);
    let q = b.binary(BinOp::DivApprox, Type::F32, s, v[1]);
    let q = b.binary(BinOp::Div, Type::F32, q, v[2]);
    let q = b.binary(BinOp::Sub, Type::F32, q, 0.1f32);
    let q = b.binary(BinOp::Mul, Type::F32, q, f32::INFINITY);
    let q = b.binary(BinOp::Min, Type::F32, q, v[3]);
    let q = b.binary(BinOp::Max, Type::F32, q, -0.0f32);
    let mq = b.reg(Type::F32);
    b.push(Op::Mad { ty: Type::F32, dst: mq, a: q.into(), b: q.into(), c: f32::NAN.into() });
    let nan = b.reg(Type::Pred);
    b.push(Op::Setp { cmp: Cmp::Nan, ty: Type::F32, dst: nan, a: mq.into(), b: mq.into() });
    let sel = b.reg(Type::F32);
    b.push(Op::Selp { ty: Type::F32, dst: sel, a: q.into(), b: mq.into(), pred: nan });
    let bits = b.mov(Type::B32, sel);
    let bits = b.binary(BinOp::Xor, Type::B32, bits, 0x7f);
    let nbits = un(&mut b, UnOp::Not, Type::B32, bits);
    let sh = b.binary(BinOp::Shr, Type::S32, nbits, 3);
    let rm = b.binary(BinOp::Rem, Type::S32, sh, 7);
    let dv = b.binary(BinOp::Div, Type::S32, rm, 3);
    let ng = un(&mut b, UnOp::Neg, Type::S32, dv);
    let ng = un(&mut b, UnOp::Abs, Type::S32, ng);
    let lane = b.mov(Type::U32, Special::LaneId);
    let dn = b.reg(Type::B32);
    b.push(Op::Shfl { mode: ShflMode::Down, dst: dn, src: ng.into(), lane: 1.into(), clamp: 31.into(), mask: (-1).into() });
    let ix = b.reg(Type::B32);
    b.push(Op::Shfl { mode: ShflMode::Idx, dst: ix, src: dn.into(), lane: lane.into(), clamp: 31.into(), mask: (-1).into() });
    let wide = b.reg(Type::S64);
    b.push(Op::MulWide { ty: Type::S32, dst: wide, a: ix.into(), b: (-4).into() });
    let both = b.binary(BinOp::And, Type::Pred, nan, nan);
    let either = b.binary(BinOp::Or, Type::Pred, both, nan);
    let old = b.reg(Type::U32);
    b.push(
        tiga_ptx::Instruction::from(Op::Atom {
            op: AtomOp::Add,
            space: Space::Global,
            ty: Type::U32,
            dst: old,
            addr: Address::reg(x, 0),
            src: 1.into(),
        })
        .unless(either),
    );
    let prev = b.reg(Type::B64);
    b.push(Op::Atom {
        op: AtomOp::Exch,
        space: Space::Global,
        ty: Type::B64,
        dst: prev,
        addr: Address::reg(x, 8),
        src: wide.into(),
    });
    b.push(Op::Red { op: AtomOp::Max, space: Space::Global, ty: Type::S32, addr: Address::reg(x, 4), src: ng.into() });
    b.push(Op::St { space: Space::Global, ty: Type::F32, addr: Address::reg(x, 32), src: vec![sel.into(), 1.5f32.into()] });
    let done = b.label();
    b.push(Op::Bra { target: done, uni: true });
    b.place(done);
    b.push(Op::Ret);

    let mut h = FunctionBuilder::func("twice", vec![Param { name: "ret".into(), ty: Type::F64 }]);
    let a = h.param("a", Type::F64);
    let a = load_param(&mut h, Type::F64, &a);
    let t = h.binary(BinOp::Add, Type::F64, a, a);
    let t2 = h.reg(Type::F64);
    h.push(Op::Cvt { round: Some(Round::Rz), dst_ty: Type::F64, src_ty: Type::S32, dst: t2, src: 3.into() });
    let t3 = h.reg(Type::F64);
    h.push(Op::Fma { ty: Type::F64, dst: t3, a: t.into(), b: t2.into(), c: 0.1f64.into() });
    h.push(Op::St { space: Space::Param, ty: Type::F64, addr: Address::symbol("ret", 0), src: vec![t3.into()] });
    h.push(Op::Ret);

    let mut m = Module::new(sm);
    m.functions.push(h.finish());
    m.functions.push(b.finish());
    m
}
