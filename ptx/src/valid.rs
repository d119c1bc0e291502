//! The validator: what ptxas would refuse that the Rust types let through.
//!
//! [`validate`] checks every function of a module and returns the first
//! problem: an operand whose register class or literal kind does not fit the
//! instruction's type, a type the opcode does not take (`add.b32`,
//! `ex2.approx.f64`), a `cvt` rounding missing where PTX requires one or
//! present where it forbids one, a branch to an undefined (or twice-placed)
//! label, a vector width other than 1, 2 or 4 (or wider than 128 bits), a
//! register beyond its class's declaration, an unknown symbol, and `.nc` on
//! anything but a global load.
//!
//! It is stricter than ptxas in one place: ptxas lets a `%r` register
//! (declared `.b32`) stand for a `.f32` or `.u32` operand alike, as PTX's
//! bit types are compatible with every type of their size; here only
//! instructions of a bit type (`mov.b32`, `shfl.sync.b32`, `and.b32`) mix
//! classes, so an integer register in a float instruction is caught as the
//! back-end bug it almost always is.

use std::collections::HashSet;

use thiserror::Error;

use crate::instruction::{round_rule, AtomOp, BinOp, Op, RoundRule, UnOp};
use crate::module::{Function, Kind, Module, Stmt};
use crate::operand::{Address, Base, Operand, Reg, RegClass, Space, Type};

/// Where a problem is: the function and the statement's index in its body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    pub function: String,
    pub index: usize,
}

/// A module ptxas would refuse.
#[derive(Debug, Error, PartialEq)]
#[error("{}, statement {}: {kind}", location.function, location.index)]
pub struct ValidationError {
    pub location: Location,
    pub kind: ErrorKind,
}

#[derive(Debug, Error, PartialEq)]
pub enum ErrorKind {
    #[error("operand `{operand}` does not fit type `{ty}`")]
    OperandType { operand: String, ty: Type },
    #[error("`{opcode}` does not take type `{ty}`")]
    InstructionType { opcode: &'static str, ty: Type },
    #[error("`cvt{dst}{src}` needs a rounding mode, one of {rule}")]
    MissingRounding { dst: Type, src: Type, rule: &'static str },
    #[error("`cvt{dst}{src}` takes no `.{round}` rounding mode")]
    BadRounding { dst: Type, src: Type, round: &'static str },
    #[error("branch to undefined label `{0}`")]
    UndefinedLabel(String),
    #[error("label `{0}` placed twice")]
    DuplicateLabel(String),
    #[error("vector of {0} elements (PTX has .v2 and .v4)")]
    VectorWidth(usize),
    #[error("vector of {count} `{ty}` elements is wider than 128 bits")]
    VectorTooWide { count: usize, ty: Type },
    #[error("register `{reg}` used but only {declared} declared")]
    UndeclaredRegister { reg: Reg, declared: u32 },
    #[error("guard `{0}` is not a predicate register")]
    GuardNotPredicate(Reg),
    #[error("unknown symbol `{0}`")]
    UnknownSymbol(String),
    #[error("address base `{0}` is not a 32- or 64-bit integer register")]
    AddressBase(Reg),
    #[error("`.nc` is only for `ld.global`, not `ld{0}`")]
    NonCoherentSpace(Space),
    #[error("`cvta.to{0}` is not a PTX instruction")]
    CvtaSpace(Space),
    #[error("`{0}` is not a `red` operation")]
    RedOp(&'static str),
}

/// Checks every function of `module`; see the module docs for what.
pub fn validate(module: &Module) -> Result<(), ValidationError> {
    module.functions.iter().try_for_each(validate_function)
}

/// Checks one function.
pub fn validate_function(func: &Function) -> Result<(), ValidationError> {
    let mut placed = HashSet::new();
    for (index, stmt) in func.body.iter().enumerate() {
        if let Stmt::Label(l) = stmt {
            if !placed.insert(*l) {
                return Err(error(func, index, ErrorKind::DuplicateLabel(l.to_string())));
            }
        }
    }
    let mut symbols: HashSet<&str> = func.params.iter().map(|p| p.name.as_str()).collect();
    if let Kind::Func { returns } = &func.kind {
        symbols.extend(returns.iter().map(|p| p.name.as_str()));
    }
    symbols.extend(func.arrays.iter().map(|s| s.name.as_str()));
    let checker = Checker { func, symbols, placed };
    for (index, stmt) in func.body.iter().enumerate() {
        if let Stmt::Instr(instr) = stmt {
            let result = (|| {
                if let Some(g) = &instr.guard {
                    checker.declared(g.pred)?;
                    if g.pred.class != RegClass::P {
                        return Err(ErrorKind::GuardNotPredicate(g.pred));
                    }
                }
                checker.op(&instr.op)
            })();
            result.map_err(|kind| error(func, index, kind))?;
        }
    }
    Ok(())
}

fn error(func: &Function, index: usize, kind: ErrorKind) -> ValidationError {
    ValidationError { location: Location { function: func.name.clone(), index }, kind }
}

struct Checker<'a> {
    func: &'a Function,
    symbols: HashSet<&'a str>,
    placed: HashSet<crate::instruction::Label>,
}

type Check = Result<(), ErrorKind>;

fn need(ok: bool, opcode: &'static str, ty: Type) -> Check {
    if ok {
        Ok(())
    } else {
        Err(ErrorKind::InstructionType { opcode, ty })
    }
}

impl Checker<'_> {
    fn declared(&self, reg: Reg) -> Check {
        let declared = self.func.reg_count(reg.class);
        if reg.index < declared {
            Ok(())
        } else {
            Err(ErrorKind::UndeclaredRegister { reg, declared })
        }
    }

    /// A destination register of type `ty`.
    fn dst(&self, reg: Reg, ty: Type) -> Check {
        self.declared(reg)?;
        if ty.accepts(reg.class) {
            Ok(())
        } else {
            Err(ErrorKind::OperandType { operand: reg.to_string(), ty })
        }
    }

    /// A source operand read as `ty`.
    fn src(&self, op: &Operand, ty: Type) -> Check {
        let fits = match op {
            Operand::Reg(r) => {
                self.declared(*r)?;
                ty.accepts(r.class)
            }
            Operand::Int(_) => ty.is_int() || ty.is_bits(),
            Operand::F32(_) => matches!(ty, Type::F32 | Type::B32),
            Operand::F64(_) => matches!(ty, Type::F64 | Type::B64),
            Operand::Special(_) => matches!(ty, Type::U32 | Type::S32 | Type::B32),
            Operand::Symbol(s) => {
                if !self.symbols.contains(s.as_str()) {
                    return Err(ErrorKind::UnknownSymbol(s.clone()));
                }
                matches!(ty, Type::U32 | Type::U64 | Type::B32 | Type::B64)
            }
        };
        if fits {
            Ok(())
        } else {
            Err(ErrorKind::OperandType { operand: op.to_string(), ty })
        }
    }

    fn addr(&self, addr: &Address) -> Check {
        match &addr.base {
            Base::Reg(r) => {
                self.declared(*r)?;
                if matches!(r.class, RegClass::R | RegClass::Rd) {
                    Ok(())
                } else {
                    Err(ErrorKind::AddressBase(*r))
                }
            }
            Base::Symbol(s) if self.symbols.contains(s.as_str()) => Ok(()),
            Base::Symbol(s) => Err(ErrorKind::UnknownSymbol(s.clone())),
        }
    }

    fn vector(&self, count: usize, ty: Type) -> Check {
        if !matches!(count, 1 | 2 | 4) {
            return Err(ErrorKind::VectorWidth(count));
        }
        if count as u32 * ty.bits() > 128 {
            return Err(ErrorKind::VectorTooWide { count, ty });
        }
        need(ty != Type::Pred, "ld/st", ty)
    }

    fn op(&self, op: &Op) -> Check {
        match op {
            Op::Ld { space, nc, ty, dst, addr } => {
                if *nc && *space != Space::Global {
                    return Err(ErrorKind::NonCoherentSpace(*space));
                }
                self.vector(dst.len(), *ty)?;
                dst.iter().try_for_each(|r| self.dst(*r, *ty))?;
                self.addr(addr)
            }
            Op::St { ty, addr, src, .. } => {
                self.vector(src.len(), *ty)?;
                src.iter().try_for_each(|o| self.src(o, *ty))?;
                self.addr(addr)
            }
            Op::Mov { ty, dst, src } => {
                self.dst(*dst, *ty)?;
                self.src(src, *ty)
            }
            Op::CvtaTo { space, dst, src } => {
                if *space == Space::Param {
                    return Err(ErrorKind::CvtaSpace(*space));
                }
                self.dst(*dst, Type::U64)?;
                self.src(src, Type::U64)
            }
            Op::Cvt { round, dst_ty, src_ty, dst, src } => {
                need(*dst_ty != Type::Pred, "cvt", *dst_ty)?;
                need(*src_ty != Type::Pred, "cvt", *src_ty)?;
                let (dst_t, src_t) = (*dst_ty, *src_ty);
                match (round_rule(dst_t, src_t), round) {
                    (RoundRule::None, None) => {}
                    // Rounding a float to an integral value of the same type
                    // (`cvt.rni.f32.f32`).
                    (RoundRule::None, Some(r)) if r.is_integer() && dst_t == src_t && dst_t.is_float() => {}
                    (RoundRule::Float, Some(r)) if !r.is_integer() => {}
                    (RoundRule::Integer, Some(r)) if r.is_integer() => {}
                    (RoundRule::Float, _) => {
                        return Err(ErrorKind::MissingRounding { dst: dst_t, src: src_t, rule: ".rn .rz .rm .rp" })
                    }
                    (RoundRule::Integer, _) => {
                        return Err(ErrorKind::MissingRounding { dst: dst_t, src: src_t, rule: ".rni .rzi .rmi .rpi" })
                    }
                    (RoundRule::None, Some(r)) => return Err(ErrorKind::BadRounding { dst: dst_t, src: src_t, round: r.name() }),
                }
                self.dst(*dst, dst_t)?;
                self.src(src, src_t)
            }
            Op::Binary { op, ty, dst, a, b } => {
                let t = *ty;
                let ok = match op {
                    BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Min | BinOp::Max => t.is_int() || t.is_float(),
                    BinOp::DivApprox => t == Type::F32,
                    BinOp::Rem => t.is_int(),
                    BinOp::And | BinOp::Or | BinOp::Xor => t.is_bits() || t == Type::Pred,
                    BinOp::Shl => t.is_bits(),
                    BinOp::Shr => t.is_bits() || t.is_int(),
                };
                need(ok, op.name(), t)?;
                self.dst(*dst, t)?;
                self.src(a, t)?;
                let b_ty = if matches!(op, BinOp::Shl | BinOp::Shr) { Type::U32 } else { t };
                self.src(b, b_ty)
            }
            Op::Unary { op, ty, dst, a } => {
                let t = *ty;
                let ok = match op {
                    UnOp::Neg | UnOp::Abs => t.is_float() || t.is_signed(),
                    UnOp::Not => t.is_bits() || t == Type::Pred,
                    UnOp::Ex2Approx | UnOp::Lg2Approx | UnOp::RcpApprox | UnOp::SqrtApprox => t == Type::F32,
                    UnOp::RcpRn | UnOp::SqrtRn => t.is_float(),
                };
                need(ok, op.name(), t)?;
                self.dst(*dst, t)?;
                self.src(a, t)
            }
            Op::Mad { ty, dst, a, b, c } | Op::Fma { ty, dst, a, b, c } => {
                let fma = matches!(op, Op::Fma { .. });
                let ok = ty.is_float() || (!fma && ty.is_int());
                need(ok, if fma { "fma" } else { "mad" }, *ty)?;
                self.dst(*dst, *ty)?;
                [a, b, c].into_iter().try_for_each(|o| self.src(o, *ty))
            }
            Op::MulWide { ty, dst, a, b } => {
                need(matches!(ty, Type::U32 | Type::S32), "mul.wide", *ty)?;
                let wide = if *ty == Type::U32 { Type::U64 } else { Type::S64 };
                self.dst(*dst, wide)?;
                self.src(a, *ty)?;
                self.src(b, *ty)
            }
            Op::Setp { cmp, ty, dst, a, b } => {
                need(*ty != Type::Pred && (ty.is_float() || !cmp.float_only()), "setp", *ty)?;
                self.dst(*dst, Type::Pred)?;
                self.src(a, *ty)?;
                self.src(b, *ty)
            }
            Op::Selp { ty, dst, a, b, pred } => {
                need(*ty != Type::Pred, "selp", *ty)?;
                self.dst(*dst, *ty)?;
                self.src(a, *ty)?;
                self.src(b, *ty)?;
                self.src(&Operand::Reg(*pred), Type::Pred)
            }
            Op::Shfl { dst, src, lane, clamp, mask, .. } => {
                self.dst(*dst, Type::B32)?;
                self.src(src, Type::B32)?;
                [lane, clamp, mask].into_iter().try_for_each(|o| self.src(o, Type::U32))
            }
            Op::BarSync(_) | Op::Ret => Ok(()),
            Op::Red { op, ty, addr, src, .. } => {
                if *op == AtomOp::Exch {
                    return Err(ErrorKind::RedOp(op.name()));
                }
                atom_type(*op, *ty)?;
                self.addr(addr)?;
                self.src(src, *ty)
            }
            Op::Atom { op, ty, dst, addr, src, .. } => {
                atom_type(*op, *ty)?;
                self.dst(*dst, *ty)?;
                self.addr(addr)?;
                self.src(src, *ty)
            }
            Op::Bra { target, .. } => {
                if self.placed.contains(target) {
                    Ok(())
                } else {
                    Err(ErrorKind::UndefinedLabel(target.to_string()))
                }
            }
        }
    }
}

fn atom_type(op: AtomOp, ty: Type) -> Check {
    let ok = match op {
        AtomOp::Add => matches!(ty, Type::U32 | Type::S32 | Type::U64 | Type::F32 | Type::F64),
        AtomOp::Min | AtomOp::Max => ty.is_int(),
        AtomOp::And | AtomOp::Or | AtomOp::Xor | AtomOp::Exch => ty.is_bits(),
    };
    need(ok, op.name(), ty)
}
