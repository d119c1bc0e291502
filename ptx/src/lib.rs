//! A PTX syntax tree, builder, validator and printer.
//!
//! tiga's GPU back end (`compiler::back::ptx`) lowers loop IR to the types
//! here and prints PTX text, which the driver (or `ptxas`) assembles. The
//! crate exists so that that back end writes instructions, not strings:
//! registers are numbered per class by [`FunctionBuilder`] and declared from
//! its counts, literals print bit-exact (`0f3DCCCCCD`, never a rounded
//! decimal), and [`validate`] refuses what `ptxas` would (mismatched operand
//! types, missing `cvt` roundings, undefined labels, odd vector widths)
//! before a driver ever sees it.
//!
//! It knows nothing of tiga: no IR, no graphs, no kernels of its own. It
//! models only the subset of PTX ISA 8.x a graph-kernel back end needs
//! (loads and stores, integer and float arithmetic, `setp`/`selp`,
//! `shfl.sync`, `bar.sync`, `red`/`atom`, branches) for 64-bit addressing;
//! it has no parser, no `call`, no textures, and it does not know which
//! instructions a given `sm_XX` lacks.
//!
//! [`sim`] runs an `.entry` on the CPU, exactly per PTX semantics for every
//! [`Op`], so that what a module computes can be checked without a GPU.
//!
//! ```
//! use tiga_ptx::{validate, Address, FunctionBuilder, Module, Op, Space, Special, Type};
//!
//! let mut b = FunctionBuilder::entry("fill");
//! let out = b.param("out", Type::U64);
//! let base = b.reg(Type::U64);
//! b.push(Op::Ld { space: Space::Param, nc: false, ty: Type::U64, dst: vec![base], addr: Address::symbol(out, 0) });
//! let tid = b.mov(Type::U32, Special::TidX);
//! let off = b.reg(Type::U64);
//! b.push(Op::MulWide { ty: Type::U32, dst: off, a: tid.into(), b: 4.into() });
//! let p = b.reg(Type::U64);
//! b.push(Op::Binary { op: tiga_ptx::BinOp::Add, ty: Type::U64, dst: p, a: base.into(), b: off.into() });
//! b.push(Op::St { space: Space::Global, ty: Type::F32, addr: Address::reg(p, 0), src: vec![0.1f32.into()] });
//! b.push(Op::Ret);
//! let mut module = Module::new(80);
//! module.functions.push(b.finish());
//! validate(&module).unwrap();
//! assert!(module.print().contains("    st.global.f32 [%rd2], 0f3DCCCCCD;\n"));
//! ```

mod instruction;
mod module;
mod operand;
mod ptxas;
pub mod sim;
mod valid;

pub use instruction::{
    default_round, round_rule, AtomOp, BinOp, Cmp, Guard, Instruction, Label, Op, Round, RoundRule, ShflMode, UnOp,
};
pub use module::{ArrayVar, Function, FunctionBuilder, Kind, Module, Param, Stmt};
pub use operand::{Address, Base, Operand, Reg, RegClass, Space, Special, Type};
pub use ptxas::{assemble, find_ptxas};
pub use valid::{validate, validate_function, ErrorKind, Location, ValidationError};
