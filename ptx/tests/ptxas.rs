//! Assembles the test kernels with NVIDIA's `ptxas` where one is found
//! (see `tiga_ptx::find_ptxas`); prints why and passes where none is.

mod common;

use tiga_ptx::{find_ptxas, validate, FunctionBuilder, Module};

type Kernel = (&'static str, fn(u32) -> Module);
type Body = (&'static str, fn(&mut FunctionBuilder));

#[test]
fn ptxas_accepts_kernels_for_sm80_and_sm90() {
    let Some(ptxas) = find_ptxas() else {
        eprintln!("skipped: no ptxas ($TIGA_PTXAS, PATH, or pip's nvidia-cuda-nvcc wheel)");
        return;
    };
    let dir = std::env::temp_dir().join(format!("tiga-ptx-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let kernels: [Kernel; 3] = [("saxpy", common::saxpy), ("reduce_sum", common::reduce_sum), ("assorted", common::assorted)];
    let mut failures = Vec::new();
    for sm in [80, 90] {
        for (name, build) in kernels {
            let module = build(sm);
            validate(&module).expect("validates");
            let file = dir.join(format!("{name}_sm{sm}.ptx"));
            std::fs::write(&file, module.print()).expect("write ptx");
            if let Err(e) = tiga_ptx::assemble(&ptxas, &file, sm) {
                failures.push(format!("{name} sm_{sm}: {e}"));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "ptxas ({}) refused:\n{}", ptxas.display(), failures.join("\n"));
    eprintln!("ptxas {} assembled 3 kernels for sm_80 and sm_90", ptxas.display());
}

/// The validator's refusals are ptxas's: each of these modules, printed
/// anyway, is refused by ptxas too. (The validator is stricter in one
/// place: ptxas lets a `%r` register, declared `.b32`, stand for an `.f32`
/// operand; the validator wants a `mov.b32` cast, which is what a back end
/// means.)
#[test]
fn ptxas_refuses_what_the_validator_refuses() {
    use tiga_ptx::{BinOp, Op, Type};
    let Some(ptxas) = find_ptxas() else {
        eprintln!("skipped: no ptxas ($TIGA_PTXAS, PATH, or pip's nvidia-cuda-nvcc wheel)");
        return;
    };
    let bad: [Body; 3] = [
        ("add_b32", |b| {
            let r = b.reg(Type::U32);
            b.push(Op::Mov { ty: Type::U32, dst: r, src: 1.into() });
            b.push(Op::Binary { op: BinOp::Add, ty: Type::B32, dst: r, a: r.into(), b: r.into() });
        }),
        ("cvt_no_round", |b| {
            let (f, d) = (b.reg(Type::F32), b.reg(Type::F64));
            b.push(Op::Mov { ty: Type::F64, dst: d, src: 1.0f64.into() });
            b.push(Op::Cvt { round: None, dst_ty: Type::F32, src_ty: Type::F64, dst: f, src: d.into() });
        }),
        ("f32_into_u32", |b| {
            let (f, r) = (b.reg(Type::F32), b.reg(Type::U32));
            b.push(Op::Mov { ty: Type::F32, dst: f, src: 1.0f32.into() });
            b.push(Op::Binary { op: BinOp::Add, ty: Type::U32, dst: r, a: f.into(), b: f.into() });
        }),
    ];
    let dir = std::env::temp_dir().join(format!("tiga-ptx-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for (name, body) in bad {
        let mut b = FunctionBuilder::entry(name);
        body(&mut b);
        b.push(Op::Ret);
        let mut module = Module::new(80);
        module.functions.push(b.finish());
        assert!(validate(&module).is_err(), "{name} validated");
        let file = dir.join(format!("{name}.ptx"));
        std::fs::write(&file, module.print()).expect("write ptx");
        assert!(tiga_ptx::assemble(&ptxas, &file, 80).is_err(), "ptxas accepted {name}:\n{}", module.print());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
