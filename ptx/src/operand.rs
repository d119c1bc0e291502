//! Types, registers, operands and addresses: the leaves of an instruction.

use std::fmt;

/// A PTX fundamental type as written after an instruction's modifiers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    Pred,
    B32,
    B64,
    U32,
    U64,
    S32,
    S64,
    F32,
    F64,
}

impl Type {
    /// The register class that holds values of this type.
    pub fn class(self) -> RegClass {
        match self {
            Type::Pred => RegClass::P,
            Type::B32 | Type::U32 | Type::S32 => RegClass::R,
            Type::B64 | Type::U64 | Type::S64 => RegClass::Rd,
            Type::F32 => RegClass::F,
            Type::F64 => RegClass::Fd,
        }
    }

    /// Width in bits (a predicate counts as 1).
    pub fn bits(self) -> u32 {
        match self {
            Type::Pred => 1,
            Type::B32 | Type::U32 | Type::S32 | Type::F32 => 32,
            Type::B64 | Type::U64 | Type::S64 | Type::F64 => 64,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, Type::F32 | Type::F64)
    }

    /// `.u*` or `.s*` (not `.b*`, which PTX arithmetic refuses).
    pub fn is_int(self) -> bool {
        matches!(self, Type::U32 | Type::U64 | Type::S32 | Type::S64)
    }

    pub fn is_signed(self) -> bool {
        matches!(self, Type::S32 | Type::S64)
    }

    pub fn is_bits(self) -> bool {
        matches!(self, Type::B32 | Type::B64)
    }

    /// Whether a register of `class` may stand where this type is expected.
    /// Bit types accept any register of their width (PTX's own rule), so
    /// `mov.b32 %r1, %f1` is a bit cast; every other type wants its own class.
    pub fn accepts(self, class: RegClass) -> bool {
        match self {
            Type::B32 => matches!(class, RegClass::R | RegClass::F),
            Type::B64 => matches!(class, RegClass::Rd | RegClass::Fd),
            _ => self.class() == class,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Type::Pred => "pred",
            Type::B32 => "b32",
            Type::B64 => "b64",
            Type::U32 => "u32",
            Type::U64 => "u64",
            Type::S32 => "s32",
            Type::S64 => "s64",
            Type::F32 => "f32",
            Type::F64 => "f64",
        }
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, ".{}", self.name())
    }
}

/// A register class: registers are numbered per class and declared per class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RegClass {
    /// `%p`, `.pred`.
    P,
    /// `%r`, `.b32`.
    R,
    /// `%rd`, `.b64`.
    Rd,
    /// `%f`, `.f32`.
    F,
    /// `%fd`, `.f64`.
    Fd,
}

impl RegClass {
    pub const ALL: [RegClass; 5] = [RegClass::P, RegClass::R, RegClass::Rd, RegClass::F, RegClass::Fd];

    pub fn prefix(self) -> &'static str {
        match self {
            RegClass::P => "%p",
            RegClass::R => "%r",
            RegClass::Rd => "%rd",
            RegClass::F => "%f",
            RegClass::Fd => "%fd",
        }
    }

    /// The type in the class's `.reg` declaration.
    pub fn decl_type(self) -> Type {
        match self {
            RegClass::P => Type::Pred,
            RegClass::R => Type::B32,
            RegClass::Rd => Type::B64,
            RegClass::F => Type::F32,
            RegClass::Fd => Type::F64,
        }
    }

    pub(crate) fn slot(self) -> usize {
        self as usize
    }
}

/// A virtual register: `%rd3` is `Reg { class: Rd, index: 3 }`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reg {
    pub class: RegClass,
    pub index: u32,
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.class.prefix(), self.index)
    }
}

/// A read-only special register (all are 32-bit unsigned).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Special {
    TidX,
    NtidX,
    CtaidX,
    NctaidX,
    LaneId,
}

impl fmt::Display for Special {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Special::TidX => "%tid.x",
            Special::NtidX => "%ntid.x",
            Special::CtaidX => "%ctaid.x",
            Special::NctaidX => "%nctaid.x",
            Special::LaneId => "%laneid",
        })
    }
}

/// A source operand.
#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    Reg(Reg),
    /// An integer literal, printed in decimal.
    Int(i64),
    /// An `f32` literal, printed as `0fXXXXXXXX` (its exact bits).
    F32(f32),
    /// An `f64` literal, printed as `0dXXXXXXXXXXXXXXXX` (its exact bits).
    F64(f64),
    Special(Special),
    /// The address of a `.shared` variable or a parameter (`mov.u64 %rd1, smem;`).
    Symbol(String),
}

impl From<Reg> for Operand {
    fn from(r: Reg) -> Self {
        Operand::Reg(r)
    }
}

impl From<Special> for Operand {
    fn from(s: Special) -> Self {
        Operand::Special(s)
    }
}

impl From<i64> for Operand {
    fn from(v: i64) -> Self {
        Operand::Int(v)
    }
}

impl From<f32> for Operand {
    fn from(v: f32) -> Self {
        Operand::F32(v)
    }
}

impl From<f64> for Operand {
    fn from(v: f64) -> Self {
        Operand::F64(v)
    }
}

impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operand::Reg(r) => r.fmt(f),
            Operand::Int(v) => write!(f, "{v}"),
            Operand::F32(v) => write!(f, "0f{:08X}", v.to_bits()),
            Operand::F64(v) => write!(f, "0d{:016X}", v.to_bits()),
            Operand::Special(s) => s.fmt(f),
            Operand::Symbol(s) => f.write_str(s),
        }
    }
}

/// What an address is relative to.
#[derive(Clone, Debug, PartialEq)]
pub enum Base {
    Reg(Reg),
    /// A parameter or `.shared` variable by name.
    Symbol(String),
}

/// `[base+offset]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Address {
    pub base: Base,
    pub offset: i64,
}

impl Address {
    pub fn reg(r: Reg, offset: i64) -> Self {
        Address { base: Base::Reg(r), offset }
    }

    pub fn symbol(name: impl Into<String>, offset: i64) -> Self {
        Address { base: Base::Symbol(name.into()), offset }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        match &self.base {
            Base::Reg(r) => r.fmt(f)?,
            Base::Symbol(s) => f.write_str(s)?,
        }
        if self.offset != 0 {
            write!(f, "+{}", self.offset)?;
        }
        f.write_str("]")
    }
}

/// A state space for loads, stores and atomics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Space {
    Global,
    Param,
    Shared,
    Local,
}

impl fmt::Display for Space {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Space::Global => ".global",
            Space::Param => ".param",
            Space::Shared => ".shared",
            Space::Local => ".local",
        })
    }
}
