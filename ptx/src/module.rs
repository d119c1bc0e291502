//! Modules and functions, the [`FunctionBuilder`] that numbers registers and
//! labels for a back end, and the printer (`Display` for [`Module`]).

use std::fmt;

use crate::instruction::{default_round, BinOp, Instruction, Label, Op};
use crate::operand::{Operand, Reg, RegClass, Space, Type};

/// A `.param` of a kernel or helper.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: String,
    pub ty: Type,
}

/// A function-scope `.shared .align A .b8 name[bytes];` or
/// `.local .align A .b8 name[bytes];` array. Shared arrays are one per
/// block; local arrays one per thread (ptxas keeps them in registers when
/// every index is constant after unrolling).
#[derive(Clone, Debug, PartialEq)]
pub struct ArrayVar {
    /// `Space::Shared` or `Space::Local`.
    pub space: Space,
    pub name: String,
    pub align: u32,
    pub bytes: u32,
}

/// `.visible .entry` kernels and `.func` helpers (with their return parameters).
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    Entry,
    Func { returns: Vec<Param> },
}

/// One line of a body.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    Instr(Instruction),
    Label(Label),
}

/// A function: its signature, its register counts (one `.reg` declaration
/// per class with `%x<count>`, so `%x0..%x{count-1}` are declared), its
/// shared arrays and its body.
#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    pub name: String,
    pub kind: Kind,
    pub params: Vec<Param>,
    pub reg_counts: [u32; 5],
    /// Shared and local arrays, in declaration order.
    pub arrays: Vec<ArrayVar>,
    pub body: Vec<Stmt>,
}

impl Function {
    /// How many registers of `class` are declared.
    pub fn reg_count(&self, class: RegClass) -> u32 {
        self.reg_counts[class.slot()]
    }
}

/// A PTX module: `.version`, `.target`, `.address_size 64`, then functions.
#[derive(Clone, Debug, PartialEq)]
pub struct Module {
    /// PTX ISA version, e.g. `(8, 0)`.
    pub version: (u32, u32),
    /// The `sm_XX` number, e.g. `80`.
    pub sm: u32,
    pub functions: Vec<Function>,
}

impl Module {
    /// PTX ISA 8.0 (CUDA 12.0), which every ptxas from CUDA 12 on reads.
    pub fn new(sm: u32) -> Self {
        Module { version: (8, 0), sm, functions: Vec::new() }
    }

    /// The module as PTX text (same as `to_string()`).
    pub fn print(&self) -> String {
        self.to_string()
    }
}

/// Builds a [`Function`], handing out fresh registers per class and fresh
/// labels, so a back end never counts.
#[derive(Debug)]
pub struct FunctionBuilder {
    func: Function,
    next_label: u32,
}

impl FunctionBuilder {
    /// A `.visible .entry` kernel.
    pub fn entry(name: impl Into<String>) -> Self {
        Self::with_kind(name, Kind::Entry)
    }

    /// A `.func` helper returning `returns` (may be empty).
    pub fn func(name: impl Into<String>, returns: Vec<Param>) -> Self {
        Self::with_kind(name, Kind::Func { returns })
    }

    fn with_kind(name: impl Into<String>, kind: Kind) -> Self {
        let func =
            Function { name: name.into(), kind, params: Vec::new(), reg_counts: [0; 5], arrays: Vec::new(), body: Vec::new() };
        FunctionBuilder { func, next_label: 0 }
    }

    /// Adds a parameter; returns its name, for `Address::symbol`.
    pub fn param(&mut self, name: impl Into<String>, ty: Type) -> String {
        let name = name.into();
        self.func.params.push(Param { name: name.clone(), ty });
        name
    }

    /// Adds a `.shared` byte array; returns its name.
    pub fn shared(&mut self, name: impl Into<String>, align: u32, bytes: u32) -> String {
        self.array(Space::Shared, name.into(), align, bytes)
    }

    /// Adds a per-thread `.local` byte array; returns its name.
    pub fn local(&mut self, name: impl Into<String>, align: u32, bytes: u32) -> String {
        self.array(Space::Local, name.into(), align, bytes)
    }

    fn array(&mut self, space: Space, name: String, align: u32, bytes: u32) -> String {
        self.func.arrays.push(ArrayVar { space, name: name.clone(), align, bytes });
        name
    }

    /// A fresh register of the class that holds `ty`.
    pub fn reg(&mut self, ty: Type) -> Reg {
        let class = ty.class();
        let count = &mut self.func.reg_counts[class.slot()];
        let reg = Reg { class, index: *count };
        *count += 1;
        reg
    }

    /// A fresh label, not yet placed.
    pub fn label(&mut self) -> Label {
        let l = Label(self.next_label);
        self.next_label += 1;
        l
    }

    /// Places `label` before the next instruction.
    pub fn place(&mut self, label: Label) {
        self.func.body.push(Stmt::Label(label));
    }

    pub fn push(&mut self, instr: impl Into<Instruction>) {
        self.func.body.push(Stmt::Instr(instr.into()));
    }

    /// `mov` into a fresh register.
    pub fn mov(&mut self, ty: Type, src: impl Into<Operand>) -> Reg {
        let dst = self.reg(ty);
        self.push(Op::Mov { ty, dst, src: src.into() });
        dst
    }

    /// A two-operand op into a fresh register of `ty`.
    pub fn binary(&mut self, op: BinOp, ty: Type, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        let dst = self.reg(ty);
        self.push(Op::Binary { op, ty, dst, a: a.into(), b: b.into() });
        dst
    }

    /// `cvt` into a fresh register, with the rounding PTX requires
    /// ([`default_round`]).
    pub fn cvt(&mut self, dst_ty: Type, src_ty: Type, src: impl Into<Operand>) -> Reg {
        let dst = self.reg(dst_ty);
        self.push(Op::Cvt { round: default_round(dst_ty, src_ty), dst_ty, src_ty, dst, src: src.into() });
        dst
    }

    pub fn finish(self) -> Function {
        self.func
    }
}

fn write_params(f: &mut fmt::Formatter<'_>, params: &[Param], multiline: bool) -> fmt::Result {
    for (i, p) in params.iter().enumerate() {
        let sep = if i + 1 < params.len() { "," } else { "" };
        if multiline {
            writeln!(f, "    .param {} {}{sep}", p.ty, p.name)?;
        } else {
            write!(f, ".param {} {}{}", p.ty, p.name, if sep.is_empty() { "" } else { ", " })?;
        }
    }
    Ok(())
}

impl fmt::Display for Function {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Entry => write!(f, ".visible .entry {}(", self.name)?,
            Kind::Func { returns } if returns.is_empty() => write!(f, ".func {}(", self.name)?,
            Kind::Func { returns } => {
                f.write_str(".func (")?;
                write_params(f, returns, false)?;
                write!(f, ") {}(", self.name)?;
            }
        }
        if !self.params.is_empty() {
            f.write_str("\n")?;
            write_params(f, &self.params, true)?;
        }
        f.write_str(")\n{\n")?;
        for class in RegClass::ALL {
            let n = self.reg_count(class);
            if n > 0 {
                writeln!(f, "    .reg {} {}<{n}>;", class.decl_type(), class.prefix())?;
            }
        }
        for a in &self.arrays {
            writeln!(f, "    {} .align {} .b8 {}[{}];", a.space, a.align, a.name, a.bytes)?;
        }
        f.write_str("\n")?;
        for stmt in &self.body {
            match stmt {
                Stmt::Instr(i) => writeln!(f, "    {i}")?,
                Stmt::Label(l) => writeln!(f, "{l}:")?,
            }
        }
        f.write_str("}\n")
    }
}

impl fmt::Display for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, ".version {}.{}", self.version.0, self.version.1)?;
        writeln!(f, ".target sm_{}", self.sm)?;
        writeln!(f, ".address_size 64")?;
        for func in &self.functions {
            writeln!(f)?;
            func.fmt(f)?;
        }
        Ok(())
    }
}
