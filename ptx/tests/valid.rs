//! The validator refuses what ptxas would, with the place and the reason.

use tiga_ptx::{
    validate, validate_function, Address, AtomOp, BinOp, ErrorKind, Function, FunctionBuilder, Instruction, Label, Module, Op,
    Operand, Reg, RegClass, Round, Space, Type, UnOp,
};

/// A kernel `k` with one register of each class, then `ops`.
fn kernel(ops: Vec<Instruction>) -> Function {
    let mut b = FunctionBuilder::entry("k");
    b.param("x", Type::U64);
    for ty in [Type::Pred, Type::U32, Type::U64, Type::F32, Type::F64] {
        b.reg(ty);
    }
    for op in ops {
        b.push(op);
    }
    b.finish()
}

fn reg(class: RegClass) -> Reg {
    Reg { class, index: 0 }
}

fn refusal(ops: Vec<Instruction>) -> String {
    match validate_function(&kernel(ops)) {
        Ok(()) => panic!("validated"),
        Err(e) => e.to_string(),
    }
}

fn op(op: Op) -> Vec<Instruction> {
    vec![op.into()]
}

const P: RegClass = RegClass::P;
const R: RegClass = RegClass::R;
const RD: RegClass = RegClass::Rd;
const F: RegClass = RegClass::F;
const FD: RegClass = RegClass::Fd;

#[test]
fn operand_type_must_match_the_instruction_type() {
    let add = Op::Binary { op: BinOp::Add, ty: Type::F32, dst: reg(F), a: reg(R).into(), b: reg(F).into() };
    assert_eq!(refusal(op(add)), "k, statement 0: operand `%r0` does not fit type `.f32`");
    let dst = Op::Binary { op: BinOp::Add, ty: Type::F32, dst: reg(FD), a: reg(F).into(), b: reg(F).into() };
    assert_eq!(refusal(op(dst)), "k, statement 0: operand `%fd0` does not fit type `.f32`");
    let imm = Op::Mov { ty: Type::F32, dst: reg(F), src: Operand::Int(1) };
    assert_eq!(refusal(op(imm)), "k, statement 0: operand `1` does not fit type `.f32`");
    let wrong_float = Op::Mov { ty: Type::F64, dst: reg(FD), src: Operand::F32(1.0) };
    assert_eq!(refusal(op(wrong_float)), "k, statement 0: operand `0f3F800000` does not fit type `.f64`");
    let shift = Op::Binary { op: BinOp::Shl, ty: Type::B64, dst: reg(RD), a: reg(RD).into(), b: reg(RD).into() };
    assert_eq!(refusal(op(shift)), "k, statement 0: operand `%rd0` does not fit type `.u32`");
    let wide = Op::MulWide { ty: Type::U32, dst: reg(R), a: reg(R).into(), b: reg(R).into() };
    assert_eq!(refusal(op(wide)), "k, statement 0: operand `%r0` does not fit type `.u64`");
    let setp = Op::Setp { cmp: tiga_ptx::Cmp::Lt, ty: Type::U32, dst: reg(R), a: reg(R).into(), b: 0.into() };
    assert_eq!(refusal(op(setp)), "k, statement 0: operand `%r0` does not fit type `.pred`");
    // A bit type takes any register of its width: this is a bit cast.
    let cast = Op::Mov { ty: Type::B32, dst: reg(R), src: reg(F).into() };
    assert_eq!(validate_function(&kernel(op(cast))), Ok(()));
}

#[test]
fn opcodes_refuse_types_they_do_not_take() {
    let add = Op::Binary { op: BinOp::Add, ty: Type::B32, dst: reg(R), a: reg(R).into(), b: reg(R).into() };
    assert_eq!(refusal(op(add)), "k, statement 0: `add` does not take type `.b32`");
    let ex2 = Op::Unary { op: UnOp::Ex2Approx, ty: Type::F64, dst: reg(FD), a: reg(FD).into() };
    assert_eq!(refusal(op(ex2)), "k, statement 0: `ex2.approx` does not take type `.f64`");
    let setp = Op::Setp { cmp: tiga_ptx::Cmp::Nan, ty: Type::U32, dst: reg(P), a: reg(R).into(), b: reg(R).into() };
    assert_eq!(refusal(op(setp)), "k, statement 0: `setp` does not take type `.u32`");
    let red =
        Op::Red { op: AtomOp::Exch, space: Space::Global, ty: Type::B32, addr: Address::reg(reg(RD), 0), src: reg(R).into() };
    assert_eq!(refusal(op(red)), "k, statement 0: `exch` is not a `red` operation");
}

#[test]
fn cvt_rounding_is_required_where_ptx_requires_it_and_refused_elsewhere() {
    let cvt = |round, dst_ty, src_ty, dst, src: Reg| Op::Cvt { round, dst_ty, src_ty, dst, src: src.into() };
    assert_eq!(
        refusal(op(cvt(None, Type::F32, Type::F64, reg(F), reg(FD)))),
        "k, statement 0: `cvt.f32.f64` needs a rounding mode, one of .rn .rz .rm .rp"
    );
    assert_eq!(
        refusal(op(cvt(Some(Round::Rn), Type::U32, Type::F32, reg(R), reg(F)))),
        "k, statement 0: `cvt.u32.f32` needs a rounding mode, one of .rni .rzi .rmi .rpi"
    );
    assert_eq!(
        refusal(op(cvt(Some(Round::Rn), Type::F64, Type::F32, reg(FD), reg(F)))),
        "k, statement 0: `cvt.f64.f32` takes no `.rn` rounding mode"
    );
    // The builder picks what PTX requires.
    let mut b = FunctionBuilder::entry("k");
    let (d, r) = (b.reg(Type::F64), b.reg(Type::U32));
    let f = b.cvt(Type::F32, Type::F64, d);
    b.cvt(Type::U64, Type::U32, r);
    b.cvt(Type::S32, Type::F32, f);
    b.cvt(Type::F64, Type::F32, f);
    b.cvt(Type::F32, Type::S32, r);
    let text = b.finish().to_string();
    let body: Vec<&str> = text.lines().filter(|l| l.contains("cvt")).map(str::trim).collect();
    assert_eq!(
        body,
        [
            "cvt.rn.f32.f64 %f0, %fd0;",
            "cvt.u64.u32 %rd0, %r0;",
            "cvt.rzi.s32.f32 %r1, %f0;",
            "cvt.f64.f32 %fd1, %f0;",
            "cvt.rn.f32.s32 %f1, %r0;"
        ]
    );
}

#[test]
fn labels_must_be_placed_once() {
    let bra = Op::Bra { target: Label(5), uni: false };
    assert_eq!(refusal(op(bra)), "k, statement 0: branch to undefined label `$L_5`");
    let mut b = FunctionBuilder::entry("k");
    let l = b.label();
    b.place(l);
    b.push(Op::Ret);
    b.place(l);
    let e = validate_function(&b.finish()).expect_err("duplicate");
    assert_eq!(e.kind, ErrorKind::DuplicateLabel("$L_0".into()));
    assert_eq!(e.location.index, 2);
}

#[test]
fn vectors_are_v2_or_v4_and_at_most_128_bits() {
    let ld = |ty, dst: Vec<Reg>| Op::Ld { space: Space::Global, nc: true, ty, dst, addr: Address::reg(reg(RD), 0) };
    assert_eq!(refusal(op(ld(Type::F32, vec![reg(F); 3]))), "k, statement 0: vector of 3 elements (PTX has .v2 and .v4)");
    assert_eq!(refusal(op(ld(Type::F32, vec![]))), "k, statement 0: vector of 0 elements (PTX has .v2 and .v4)");
    assert_eq!(
        refusal(op(ld(Type::F64, vec![reg(FD); 4]))),
        "k, statement 0: vector of 4 `.f64` elements is wider than 128 bits"
    );
    let st = Op::St { space: Space::Global, ty: Type::F32, addr: Address::reg(reg(RD), 0), src: vec![reg(F).into(); 8] };
    assert_eq!(refusal(op(st)), "k, statement 0: vector of 8 elements (PTX has .v2 and .v4)");
    let ok = ld(Type::F32, vec![reg(F); 4]);
    assert_eq!(ok.to_string(), "ld.global.nc.v4.f32 {%f0, %f0, %f0, %f0}, [%rd0];");
    assert_eq!(validate_function(&kernel(op(ok))), Ok(()));
}

#[test]
fn registers_must_be_declared() {
    let mov = Op::Mov { ty: Type::F32, dst: Reg { class: F, index: 1 }, src: 0.5f32.into() };
    assert_eq!(refusal(op(mov)), "k, statement 0: register `%f1` used but only 1 declared");
    let guard = Instruction::from(Op::Ret).when(Reg { class: P, index: 4 });
    assert_eq!(refusal(vec![guard]), "k, statement 0: register `%p4` used but only 1 declared");
}

#[test]
fn guards_symbols_addresses_and_nc() {
    let guarded = Instruction::from(Op::Ret).unless(reg(R));
    assert_eq!(refusal(vec![guarded]), "k, statement 0: guard `%r0` is not a predicate register");
    let ld = Op::Ld { space: Space::Param, nc: false, ty: Type::U64, dst: vec![reg(RD)], addr: Address::symbol("y", 0) };
    assert_eq!(refusal(op(ld)), "k, statement 0: unknown symbol `y`");
    let ld = Op::Ld { space: Space::Global, nc: false, ty: Type::F32, dst: vec![reg(F)], addr: Address::reg(reg(F), 0) };
    assert_eq!(refusal(op(ld)), "k, statement 0: address base `%f0` is not a 32- or 64-bit integer register");
    let cvta = Op::CvtaTo { space: Space::Param, dst: reg(RD), src: reg(RD).into() };
    assert_eq!(refusal(op(cvta)), "k, statement 0: `cvta.to.param` is not a PTX instruction");
    let cvta = Op::CvtaTo { space: Space::Global, dst: reg(R), src: reg(RD).into() };
    assert_eq!(refusal(op(cvta)), "k, statement 0: operand `%r0` does not fit type `.u64`");
    let ld = Op::Ld { space: Space::Shared, nc: true, ty: Type::F32, dst: vec![reg(F)], addr: Address::reg(reg(R), 0) };
    assert_eq!(refusal(op(ld)), "k, statement 0: `.nc` is only for `ld.global`, not `ld.shared`");
}

#[test]
fn module_errors_name_the_function_and_statement() {
    let good = kernel(vec![Op::Ret.into()]);
    let mut bad = kernel(vec![Op::Ret.into(), Op::Bra { target: Label(0), uni: true }.into()]);
    bad.name = "second".into();
    let mut m = Module::new(90);
    m.functions.extend([good, bad]);
    assert_eq!(validate(&m).expect_err("bad").to_string(), "second, statement 1: branch to undefined label `$L_0`");
}
