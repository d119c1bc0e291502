//! The loop IR: what the back ends compile.
//!
//! A [`LoopKernel`] is one destination-major loop nest over CSR rows, written
//! as four statement lists that the back end wraps in a fixed skeleton:
//!
//! ```text
//! for i in rows:                      (a chunk of rows; chunks run in parallel)
//!     deg = off[i+1] - off[i]
//!     <init>                          (accumulator state := identity)
//!     for p in off[i]..off[i+1]:      (only when <pre_body> is not empty)
//!         j = col[p]; e = edge_id[p]
//!         <pre_body>                  (a first pass: a row maximum, say)
//!     for p in off[i]..off[i+1]:
//!         j = col[p]; e = edge_id[p]  (edge_id is the identity when absent)
//!         <body>                      (gather from j, combine into the state)
//!     <finish>                        (finalize, node, store row i's outputs)
//! ```
//!
//! Statements are scalar: vector operations appear as feature loops
//! ([`Stmt::Loop`]) over a width symbol, which the back end knows as a
//! constant per variant. Variables ([`Var`]) are mutable scalars or booleans;
//! accumulator vectors and vectors needed across loops live in per-row
//! scratch arrays ([`Addr::Scratch`]).

pub mod eval;
mod never_nan;
mod print;
mod schedule;
mod storage;
mod tiles;
mod verify;

use serde::{Deserialize, Serialize};

use crate::ir::{BinOp, CmpOp, FieldDecl, FieldId, OutputDecl, UnOp, WidthDecl, WidthId};

pub use never_nan::never_nan;
pub use schedule::{schedule, ScheduleError};
pub use storage::Storage;
pub use tiles::{split_calls, SplitBody, EDGE_TILE};
pub use verify::{verify, LoopVerifyError};

/// Calls `f` on every statement of `list` that is not a loop, the bodies
/// of nested loops included, in program order.
pub fn for_each_stmt(list: &[Stmt], f: &mut impl FnMut(&Stmt)) {
    for st in list {
        match st {
            Stmt::Loop { body, .. } => for_each_stmt(body, f),
            other => f(other),
        }
    }
}

/// Calls `f` on the body of every feature loop in `list`, nested ones
/// included, outermost first.
pub fn for_each_loop(list: &[Stmt], f: &mut impl FnMut(&[Stmt])) {
    for st in list {
        if let Stmt::Loop { body, .. } = st {
            f(body);
            for_each_loop(body, f);
        }
    }
}

/// Whether any statement of `list` (nested loops included) calls a math
/// library function ([`Inst::calls_math`]).
pub fn calls_math(list: &[Stmt]) -> bool {
    let mut calls = false;
    for_each_stmt(list, &mut |st| calls |= matches!(st, Stmt::Set(_, i) if i.calls_math()));
    calls
}

/// Scalar accumulators of a feature loop's body: `acc = acc + x`, the
/// only statement touching `acc` in the body (and no nested loop), which
/// a back end may sum as partial sums in another order.
pub fn sum_accumulators(body: &[Stmt]) -> std::collections::HashSet<u32> {
    let mut out = std::collections::HashSet::new();
    for st in body {
        if let Stmt::Set(acc, Inst::Binary(BinOp::Add, a, x)) = st {
            if a == acc && x != acc {
                let touches = body
                    .iter()
                    .filter(|o| match o {
                        Stmt::Set(v, i) => v == acc || i.operands().contains(acc),
                        Stmt::Store(_, v) => v == acc,
                        Stmt::Loop { .. } => true,
                    })
                    .count();
                if touches == 1 {
                    out.insert(acc.0);
                }
            }
        }
    }
    out
}

/// Which of the kernel's `num_fields` fields `list` loads (nested loops
/// included).
pub fn fields_read(list: &[Stmt], num_fields: usize) -> Vec<bool> {
    let mut read = vec![false; num_fields];
    for_each_stmt(list, &mut |st| {
        if let Stmt::Set(_, Inst::Load(Addr::Field { field, .. })) = st {
            if let Some(r) = read.get_mut(field.0 as usize) {
                *r = true;
            }
        }
    });
    read
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Var(pub u32);

/// A feature-loop counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LoopVar(pub u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum VarKind {
    /// A number in the variant's dtype (f32 or f64).
    Num,
    Bool,
}

/// A memory location. Which element of a field is read follows from its role:
/// a source field at row `j`, a destination field at row `i`, an edge field
/// at edge `e`, a parameter as a whole. `lanes` index the feature axis: none
/// for scalars, one for vectors, two (row, column) for matrices.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Addr {
    Field {
        field: FieldId,
        lanes: Vec<LoopVar>,
    },
    Scratch {
        buf: u32,
        lane: LoopVar,
    },
    /// Output `out`: at row `i` for destination outputs, at edge `e` for edge
    /// outputs, whole for parameter outputs (which the scheduler accumulates
    /// with a load, an add and a store; the caller gives each row chunk its
    /// own parameter buffers and reduces them in chunk order). `lane` for
    /// vector outputs.
    Output {
        out: u32,
        lane: Option<LoopVar>,
    },
    /// Element `[row, col]` of a matrix parameter output (`row * C + col`).
    OutputMatrix {
        out: u32,
        row: LoopVar,
        col: LoopVar,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Inst {
    Const(f64),
    Load(Addr),
    Copy(Var),
    /// The current row's degree, as a number.
    Degree,
    /// The current edge's position within its row, as a number.
    Rank,
    Unary(UnOp, Var),
    Binary(BinOp, Var, Var),
    Powi(Var, i32),
    Cmp(CmpOp, Var, Var),
    Select(Var, Var, Var),
}

impl Inst {
    /// Whether a back end calls a math library function for it (`exp`,
    /// `ln`, `tanh`, `sigmoid`'s `exp`): a call clobbers every vector
    /// register.
    pub fn calls_math(&self) -> bool {
        matches!(self, Inst::Unary(UnOp::Exp | UnOp::Ln | UnOp::Tanh | UnOp::Sigmoid, _))
    }

    /// The variables this instruction reads.
    pub fn operands(&self) -> Vec<Var> {
        match self {
            Inst::Const(_) | Inst::Load(_) | Inst::Degree | Inst::Rank => Vec::new(),
            Inst::Copy(x) | Inst::Unary(_, x) | Inst::Powi(x, _) => vec![*x],
            Inst::Binary(_, x, y) | Inst::Cmp(_, x, y) => vec![*x, *y],
            Inst::Select(c, x, y) => vec![*c, *x, *y],
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Stmt {
    /// `var = inst` (variables are mutable; a back end maps them to SSA).
    Set(Var, Inst),
    Store(Addr, Var),
    /// `for lane in 0..width { body }`.
    Loop {
        lane: LoopVar,
        width: WidthId,
        body: Vec<Stmt>,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoopKernel {
    pub name: String,
    pub fields: Vec<FieldDecl>,
    pub widths: Vec<WidthDecl>,
    pub outputs: Vec<OutputDecl>,
    pub vars: Vec<VarKind>,
    pub num_loop_vars: u32,
    /// Per-row scratch arrays, each one width long.
    pub scratch: Vec<WidthId>,
    pub init: Vec<Stmt>,
    /// A first pass over the row's edges, before `body`'s (empty: none).
    /// `j`, `e` and the rank are the edge's, as in `body`.
    #[serde(default)]
    pub pre_body: Vec<Stmt>,
    pub body: Vec<Stmt>,
    pub finish: Vec<Stmt>,
}

impl LoopKernel {
    /// The statement lists run once per edge, in order: the pre-pass when
    /// there is one, then the body.
    pub fn edge_passes(&self) -> impl Iterator<Item = &Vec<Stmt>> {
        std::iter::once(&self.pre_body).filter(|l| !l.is_empty()).chain(std::iter::once(&self.body))
    }

    /// Whether every row stores every element of destination output `out`
    /// (a scalar stored outside feature loops, or a vector stored lane by
    /// lane in a feature loop over its width, in `init` or `finish`, which
    /// run once per row with no branches). Such an output needs no zero
    /// fill before a call that runs every row: the kernel overwrites it.
    pub fn overwrites_output(&self, out: u32) -> bool {
        let Some(decl) = self.outputs.get(out as usize) else { return false };
        if decl.role != crate::ir::Role::Dst {
            return false;
        }
        // An output the kernel reads (an adjoint stage adding into it) must
        // start from what the caller put there.
        let mut read = false;
        for list in [&self.init, &self.pre_body, &self.body, &self.finish] {
            for_each_stmt(list, &mut |st| {
                if let Stmt::Set(_, Inst::Load(Addr::Output { out: o, .. })) = st {
                    read |= *o == out;
                }
            });
        }
        if read {
            return false;
        }
        self.init.iter().chain(&self.finish).any(|st| match (st, decl.ty) {
            (Stmt::Store(Addr::Output { out: o, lane: None }, _), crate::ir::Type::Scalar) => *o == out,
            (Stmt::Loop { lane, width, body }, crate::ir::Type::Vector(w)) if *width == w => {
                body.iter().any(|s| matches!(s, Stmt::Store(Addr::Output { out: o, lane: Some(l) }, _) if *o == out && l == lane))
            }
            _ => false,
        })
    }

    /// Whether any statement reads a field of this role, or (for edges)
    /// writes an edge output: the back end skips loading `col` and `edge_id`
    /// when nothing needs them.
    pub fn reads_role(&self, role: crate::ir::Role) -> bool {
        fn walk(s: &[Stmt], k: &LoopKernel, role: crate::ir::Role) -> bool {
            let out_role = |o: &u32| k.outputs.get(*o as usize).map(|d| d.role);
            s.iter().any(|st| match st {
                Stmt::Set(_, Inst::Load(Addr::Field { field, .. })) => k.fields[field.0 as usize].role == role,
                Stmt::Set(_, Inst::Load(Addr::Output { out, .. } | Addr::OutputMatrix { out, .. }))
                | Stmt::Store(Addr::Output { out, .. } | Addr::OutputMatrix { out, .. }, _) => {
                    role == crate::ir::Role::Edge && out_role(out) == Some(role)
                }
                Stmt::Loop { body, .. } => walk(body, k, role),
                _ => false,
            })
        }
        walk(&self.init, self, role)
            || walk(&self.pre_body, self, role)
            || walk(&self.body, self, role)
            || walk(&self.finish, self, role)
    }
}
