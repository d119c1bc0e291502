use tiga_ptx::{FunctionBuilder, Op, Operand, Type};

#[test]
fn f32_literals_print_their_bits() {
    let cases = [
        (0.1f32, "0f3DCCCCCD"),
        (-0.0, "0f80000000"),
        (0.0, "0f00000000"),
        (f32::NAN, "0f7FC00000"),
        (f32::INFINITY, "0f7F800000"),
        (f32::NEG_INFINITY, "0fFF800000"),
        (f32::from_bits(1), "0f00000001"),
        (f32::from_bits(0x7FC0_0001), "0f7FC00001"),
    ];
    for (v, text) in cases {
        assert_eq!(Operand::F32(v).to_string(), text);
    }
}

#[test]
fn f64_literals_print_their_bits() {
    let cases = [
        (0.1f64, "0d3FB999999999999A"),
        (-0.0, "0d8000000000000000"),
        (f64::NAN, "0d7FF8000000000000"),
        (f64::INFINITY, "0d7FF0000000000000"),
        (f64::NEG_INFINITY, "0dFFF0000000000000"),
        (f64::MIN_POSITIVE, "0d0010000000000000"),
    ];
    for (v, text) in cases {
        assert_eq!(Operand::F64(v).to_string(), text);
    }
}

#[test]
fn literals_in_instructions_and_addresses() {
    let mut b = FunctionBuilder::entry("k");
    b.mov(Type::F32, 0.1f32);
    b.mov(Type::F64, -0.0f64);
    b.mov(Type::S64, -5i64);
    let text = b.finish().to_string();
    let body: Vec<&str> = text.lines().filter(|l| l.contains("mov")).map(str::trim).collect();
    assert_eq!(body, ["mov.f32 %f0, 0f3DCCCCCD;", "mov.f64 %fd0, 0d8000000000000000;", "mov.s64 %rd0, -5;"]);
    let ld = Op::Ld {
        space: tiga_ptx::Space::Global,
        nc: false,
        ty: Type::F32,
        dst: vec![tiga_ptx::Reg { class: tiga_ptx::RegClass::F, index: 0 }],
        addr: tiga_ptx::Address::reg(tiga_ptx::Reg { class: tiga_ptx::RegClass::Rd, index: 2 }, -8),
    };
    assert_eq!(ld.to_string(), "ld.global.f32 %f0, [%rd2+-8];");
}
