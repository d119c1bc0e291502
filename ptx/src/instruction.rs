//! Instructions: one [`Op`] per PTX opcode family, with an optional
//! predicate [`Guard`]. `Display` writes the instruction without its
//! indentation or trailing newline (`@%p1 bra $L_0;`).

use std::fmt;

use crate::operand::{Address, Operand, Reg, Space, Type};

/// A branch target, local to its function; printed `$L_<id>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Label(pub u32);

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "$L_{}", self.0)
    }
}

/// `@%p` (run when the predicate is true) or `@!%p` (when false).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Guard {
    pub pred: Reg,
    pub negated: bool,
}

/// Two-operand arithmetic and logic. Float `add sub mul div` print `.rn`
/// (IEEE rounding, and it keeps ptxas from fusing a mul and add into an fma);
/// integer `mul` prints `.lo`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    /// `div.rn` for floats, `div` for integers.
    Div,
    /// `div.approx.f32`.
    DivApprox,
    Rem,
    Min,
    Max,
    And,
    Or,
    Xor,
    /// The shift amount is always a `.u32` operand.
    Shl,
    Shr,
}

impl BinOp {
    pub fn name(self) -> &'static str {
        match self {
            BinOp::Add => "add",
            BinOp::Sub => "sub",
            BinOp::Mul => "mul",
            BinOp::Div | BinOp::DivApprox => "div",
            BinOp::Rem => "rem",
            BinOp::Min => "min",
            BinOp::Max => "max",
            BinOp::And => "and",
            BinOp::Or => "or",
            BinOp::Xor => "xor",
            BinOp::Shl => "shl",
            BinOp::Shr => "shr",
        }
    }
}

/// One-operand operations, with their rounding or approximation mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Abs,
    Not,
    Ex2Approx,
    Lg2Approx,
    RcpApprox,
    RcpRn,
    SqrtApprox,
    SqrtRn,
}

impl UnOp {
    pub fn name(self) -> &'static str {
        match self {
            UnOp::Neg => "neg",
            UnOp::Abs => "abs",
            UnOp::Not => "not",
            UnOp::Ex2Approx => "ex2.approx",
            UnOp::Lg2Approx => "lg2.approx",
            UnOp::RcpApprox => "rcp.approx",
            UnOp::RcpRn => "rcp.rn",
            UnOp::SqrtApprox => "sqrt.approx",
            UnOp::SqrtRn => "sqrt.rn",
        }
    }
}

/// `setp` comparisons. The `u` forms (true when either side is NaN),
/// `num` and `nan` are for floats only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Equ,
    Neu,
    Ltu,
    Leu,
    Gtu,
    Geu,
    Num,
    Nan,
}

impl Cmp {
    pub fn name(self) -> &'static str {
        match self {
            Cmp::Eq => "eq",
            Cmp::Ne => "ne",
            Cmp::Lt => "lt",
            Cmp::Le => "le",
            Cmp::Gt => "gt",
            Cmp::Ge => "ge",
            Cmp::Equ => "equ",
            Cmp::Neu => "neu",
            Cmp::Ltu => "ltu",
            Cmp::Leu => "leu",
            Cmp::Gtu => "gtu",
            Cmp::Geu => "geu",
            Cmp::Num => "num",
            Cmp::Nan => "nan",
        }
    }

    pub fn float_only(self) -> bool {
        !matches!(self, Cmp::Eq | Cmp::Ne | Cmp::Lt | Cmp::Le | Cmp::Gt | Cmp::Ge)
    }
}

/// `cvt` rounding: the float modes for a float result, the integer modes for
/// a float-to-integer conversion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Round {
    Rn,
    Rz,
    Rm,
    Rp,
    Rni,
    Rzi,
    Rmi,
    Rpi,
}

impl Round {
    pub fn name(self) -> &'static str {
        match self {
            Round::Rn => "rn",
            Round::Rz => "rz",
            Round::Rm => "rm",
            Round::Rp => "rp",
            Round::Rni => "rni",
            Round::Rzi => "rzi",
            Round::Rmi => "rmi",
            Round::Rpi => "rpi",
        }
    }

    pub fn is_integer(self) -> bool {
        matches!(self, Round::Rni | Round::Rzi | Round::Rmi | Round::Rpi)
    }
}

/// What a conversion from `src` to `dst` needs, per the PTX ISA: float to
/// narrower float and integer to float need a float mode, float to integer
/// an integer mode; the rest (widening floats, integer to integer) take none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoundRule {
    None,
    Float,
    Integer,
}

pub fn round_rule(dst: Type, src: Type) -> RoundRule {
    match (dst.is_float(), src.is_float()) {
        (true, true) if dst.bits() < src.bits() => RoundRule::Float,
        (true, true) => RoundRule::None,
        (true, false) => RoundRule::Float,
        (false, true) => RoundRule::Integer,
        (false, false) => RoundRule::None,
    }
}

/// The usual rounding for a conversion: `.rn` to floats, `.rzi` (C's
/// truncation) to integers, none where PTX takes none.
pub fn default_round(dst: Type, src: Type) -> Option<Round> {
    match round_rule(dst, src) {
        RoundRule::None => None,
        RoundRule::Float => Some(Round::Rn),
        RoundRule::Integer => Some(Round::Rzi),
    }
}

/// `shfl.sync` modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShflMode {
    Up,
    Down,
    Bfly,
    Idx,
}

impl ShflMode {
    pub fn name(self) -> &'static str {
        match self {
            ShflMode::Up => "up",
            ShflMode::Down => "down",
            ShflMode::Bfly => "bfly",
            ShflMode::Idx => "idx",
        }
    }
}

/// `red` / `atom` operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomOp {
    Add,
    Min,
    Max,
    And,
    Or,
    Xor,
    /// `atom` only.
    Exch,
}

impl AtomOp {
    pub fn name(self) -> &'static str {
        match self {
            AtomOp::Add => "add",
            AtomOp::Min => "min",
            AtomOp::Max => "max",
            AtomOp::And => "and",
            AtomOp::Or => "or",
            AtomOp::Xor => "xor",
            AtomOp::Exch => "exch",
        }
    }
}

/// An opcode with its operands. Vector loads and stores carry 1 (scalar),
/// 2 (`.v2`) or 4 (`.v4`) registers; the validator refuses any other count.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Ld {
        space: Space,
        nc: bool,
        ty: Type,
        dst: Vec<Reg>,
        addr: Address,
    },
    St {
        space: Space,
        ty: Type,
        addr: Address,
        src: Vec<Operand>,
    },
    Mov {
        ty: Type,
        dst: Reg,
        src: Operand,
    },
    /// `cvta.to.<space>.u64`: a generic address (what a kernel parameter
    /// holds) to one in `space`, as `ld.global` wants.
    CvtaTo {
        space: Space,
        dst: Reg,
        src: Operand,
    },
    Cvt {
        round: Option<Round>,
        dst_ty: Type,
        src_ty: Type,
        dst: Reg,
        src: Operand,
    },
    Binary {
        op: BinOp,
        ty: Type,
        dst: Reg,
        a: Operand,
        b: Operand,
    },
    Unary {
        op: UnOp,
        ty: Type,
        dst: Reg,
        a: Operand,
    },
    /// `mad.lo` for integers, `mad.rn` for floats.
    Mad {
        ty: Type,
        dst: Reg,
        a: Operand,
        b: Operand,
        c: Operand,
    },
    /// `fma.rn`, floats only.
    Fma {
        ty: Type,
        dst: Reg,
        a: Operand,
        b: Operand,
        c: Operand,
    },
    /// `mul.wide.u32` / `mul.wide.s32`: a 64-bit product of 32-bit operands.
    MulWide {
        ty: Type,
        dst: Reg,
        a: Operand,
        b: Operand,
    },
    Setp {
        cmp: Cmp,
        ty: Type,
        dst: Reg,
        a: Operand,
        b: Operand,
    },
    Selp {
        ty: Type,
        dst: Reg,
        a: Operand,
        b: Operand,
        pred: Reg,
    },
    /// `shfl.sync.<mode>.b32 dst, src, lane, clamp, mask;`
    Shfl {
        mode: ShflMode,
        dst: Reg,
        src: Operand,
        lane: Operand,
        clamp: Operand,
        mask: Operand,
    },
    BarSync(u32),
    Red {
        op: AtomOp,
        space: Space,
        ty: Type,
        addr: Address,
        src: Operand,
    },
    Atom {
        op: AtomOp,
        space: Space,
        ty: Type,
        dst: Reg,
        addr: Address,
        src: Operand,
    },
    Bra {
        target: Label,
        uni: bool,
    },
    Ret,
}

/// An [`Op`] with its optional guard.
#[derive(Clone, Debug, PartialEq)]
pub struct Instruction {
    pub guard: Option<Guard>,
    pub op: Op,
}

impl Instruction {
    /// Runs only where `pred` is true (`@%p`).
    pub fn when(self, pred: Reg) -> Self {
        Instruction { guard: Some(Guard { pred, negated: false }), ..self }
    }

    /// Runs only where `pred` is false (`@!%p`).
    pub fn unless(self, pred: Reg) -> Self {
        Instruction { guard: Some(Guard { pred, negated: true }), ..self }
    }
}

impl From<Op> for Instruction {
    fn from(op: Op) -> Self {
        Instruction { guard: None, op }
    }
}

fn vector_suffix(n: usize) -> String {
    if n == 1 {
        String::new()
    } else {
        format!(".v{n}")
    }
}

fn list<T: fmt::Display>(items: &[T]) -> String {
    let inner: Vec<String> = items.iter().map(|x| x.to_string()).collect();
    if items.len() == 1 {
        inner.join("")
    } else {
        format!("{{{}}}", inner.join(", "))
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Ld { space, nc, ty, dst, addr } => {
                let nc = if *nc { ".nc" } else { "" };
                write!(f, "ld{space}{nc}{}{ty} {}, {addr};", vector_suffix(dst.len()), list(dst))
            }
            Op::St { space, ty, addr, src } => {
                write!(f, "st{space}{}{ty} {addr}, {};", vector_suffix(src.len()), list(src))
            }
            Op::Mov { ty, dst, src } => write!(f, "mov{ty} {dst}, {src};"),
            Op::CvtaTo { space, dst, src } => write!(f, "cvta.to{space}.u64 {dst}, {src};"),
            Op::Cvt { round, dst_ty, src_ty, dst, src } => {
                let round = round.map(|r| format!(".{}", r.name())).unwrap_or_default();
                write!(f, "cvt{round}{dst_ty}{src_ty} {dst}, {src};")
            }
            Op::Binary { op, ty, dst, a, b } => {
                let modifier = match op {
                    BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div if ty.is_float() => ".rn",
                    BinOp::DivApprox => ".approx",
                    BinOp::Mul => ".lo",
                    _ => "",
                };
                write!(f, "{}{modifier}{ty} {dst}, {a}, {b};", op.name())
            }
            Op::Unary { op, ty, dst, a } => write!(f, "{}{ty} {dst}, {a};", op.name()),
            Op::Mad { ty, dst, a, b, c } => {
                let modifier = if ty.is_float() { ".rn" } else { ".lo" };
                write!(f, "mad{modifier}{ty} {dst}, {a}, {b}, {c};")
            }
            Op::Fma { ty, dst, a, b, c } => write!(f, "fma.rn{ty} {dst}, {a}, {b}, {c};"),
            Op::MulWide { ty, dst, a, b } => write!(f, "mul.wide{ty} {dst}, {a}, {b};"),
            Op::Setp { cmp, ty, dst, a, b } => write!(f, "setp.{}{ty} {dst}, {a}, {b};", cmp.name()),
            Op::Selp { ty, dst, a, b, pred } => write!(f, "selp{ty} {dst}, {a}, {b}, {pred};"),
            Op::Shfl { mode, dst, src, lane, clamp, mask } => {
                write!(f, "shfl.sync.{}.b32 {dst}, {src}, {lane}, {clamp}, {mask};", mode.name())
            }
            Op::BarSync(id) => write!(f, "bar.sync {id};"),
            Op::Red { op, space, ty, addr, src } => write!(f, "red{space}.{}{ty} {addr}, {src};", op.name()),
            Op::Atom { op, space, ty, dst, addr, src } => {
                write!(f, "atom{space}.{}{ty} {dst}, {addr}, {src};", op.name())
            }
            Op::Bra { target, uni } => write!(f, "bra{} {target};", if *uni { ".uni" } else { "" }),
            Op::Ret => f.write_str("ret;"),
        }
    }
}

impl fmt::Display for Instruction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(g) = &self.guard {
            write!(f, "@{}{} ", if g.negated { "!" } else { "" }, g.pred)?;
        }
        self.op.fmt(f)
    }
}
