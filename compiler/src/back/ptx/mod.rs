//! The PTX back end (first increment): a loop-kernel variant as a
//! [`tiga_ptx::Module`] with one `.entry` per kernel.
//!
//! What lowers: kernels whose fields and outputs are all scalars (no
//! feature loops, no scratch arrays, no first pass), destination outputs
//! only, and the scalar operations below. The reducer is already spelled
//! out in the loop IR (identity in `init`, combine in `body`, finalize and
//! node in `finish`); [`lower_reducer`] additionally refuses reducers other
//! than sum, max, min and mean by name, for callers that know it.
//!
//! Launch shape: one thread per destination row, over a grid-stride loop,
//! so any grid covers any number of rows. Each thread walks its row's edges
//! in CSR order and keeps the reduction state in registers, so a row's
//! result is computed in the same order as on the CPU back ends; with
//! `add.rn`/`mul.rn`/`div.rn`/`sqrt.rn` (no contraction into `fma`) sums
//! match the CPU bit for bit.
//!
//! Parameters, in order (all pointers are device addresses):
//!
//! - `offsets` (`.u64`): CSR row offsets, `num_rows + 1` `u64`s;
//! - `cols` (`.u64`): source id per CSR position, `u32`s;
//! - `f0`, `f1`, … (`.u64`): one per kernel field, in declaration order;
//!   edge fields are indexed by CSR position (the `edge_ids = false`
//!   variant of the CPU ABI: the caller permutes them into CSR order);
//! - `o0`, `o1`, … (`.u64`): one per kernel output, in declaration order;
//! - `num_rows` (`.u32`).
//!
//! Scalar semantics follow the CPU back ends (`interp::apply_*`): relu and
//! leaky_relu by comparison, `!=` true on NaN (`setp.neu`), min/max as
//! PTX's `min`/`max` (the non-NaN operand when one is NaN, as Rust's).
//! Refused with [`PtxError::Unsupported`]: vectors and matrices (feature
//! loops), scratch arrays, two-pass reducers (`pre_body`), edge and
//! parameter outputs, the rank, `powi`, and the math-library functions
//! (`exp`, `ln`, `tanh`, `sigmoid`), which have no bit-exact PTX form.

use tiga_ptx::{
    Address, BinOp as PBin, Cmp, FunctionBuilder, Instruction, Module, Op, Operand, Reg, Space, Special, Type as PTy, UnOp as PUn,
};

use crate::ir::{BinOp, CmpOp, DType, ReducerKind, Role, Type, UnOp};
use crate::loops::{verify, Addr, Inst, LoopKernel, LoopVerifyError, Stmt, Var, VarKind};

#[derive(Debug, thiserror::Error)]
pub enum PtxError {
    /// Something this back end does not lower yet, named.
    #[error("the PTX back end does not lower {0}")]
    Unsupported(String),
    /// The loop kernel breaks a rule of the loop IR's verifier.
    #[error("malformed {source}")]
    Malformed {
        #[from]
        source: LoopVerifyError,
    },
}

/// The PTX entry's name for kernel `name`: a PTX identifier, so an adjoint
/// stage's `Kernel.vjp.src` becomes `Kernel_vjp_src` (PTX names take
/// letters, digits, `_` and `$`, and no dots).
pub fn entry_name(name: &str) -> String {
    let mut out: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '$' { c } else { '_' }).collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) || out.is_empty() {
        out.insert(0, '_');
    }
    out
}

fn unsupported<T>(what: impl Into<String>) -> Result<T, PtxError> {
    Err(PtxError::Unsupported(what.into()))
}

/// Threads per block of every launch of a lowered kernel.
pub const BLOCK: u32 = 128;

/// A loop kernel lowered for one dtype, set of widths and `sm_XX`: the
/// module, its entry and how to launch it.
///
/// Launch: a 1-D grid of `block`-thread blocks, any number of blocks (the
/// rows are walked with a grid stride); `threads_per_row` threads share a
/// destination row. Output buffers, per [`crate::ir::Role`] of the output:
/// destination outputs are `num_rows × len` (row-major); edge outputs
/// `num_edges × len` in CSR order; parameter outputs are per-thread partials,
/// `grid × block × len`, zero-filled by the caller, which adds them in
/// thread order (so the sum does not depend on timing). Outputs the loop
/// kernel does not overwrite ([`LoopKernel::overwrites_output`]) start from
/// what the caller put there (zeros, or what an adjoint stage adds into).
#[derive(Clone, Debug)]
pub struct PtxKernel {
    pub module: Module,
    pub entry: String,
    pub threads_per_row: u32,
    pub block: u32,
}

/// Lowers loop kernel `k` with width symbol values `widths` (indexed by
/// `WidthId`) to a PTX module for `sm_<sm>` in `dtype`.
pub fn lower_kernel(k: &LoopKernel, dtype: DType, widths: &[usize], sm: u32) -> Result<PtxKernel, PtxError> {
    if widths.len() != k.widths.len() {
        return unsupported(format!("{} width values for kernel `{}`'s {} width symbols", widths.len(), k.name, k.widths.len()));
    }
    let module = lower(k, dtype, sm)?;
    Ok(PtxKernel { module, entry: entry_name(&k.name), threads_per_row: 1, block: BLOCK })
}

/// [`lower`], after refusing reducers other than sum, max, min and mean.
pub fn lower_reducer(reducer: ReducerKind, k: &LoopKernel, dtype: DType, sm: u32) -> Result<Module, PtxError> {
    match reducer {
        ReducerKind::Sum | ReducerKind::Max | ReducerKind::Min | ReducerKind::Mean => lower(k, dtype, sm),
        other => unsupported(format!("reducer `{}` (kernel `{}`)", other.name(), k.name)),
    }
}

/// Lowers one loop kernel to a PTX module for `sm_<sm>` in `dtype`.
pub fn lower(k: &LoopKernel, dtype: DType, sm: u32) -> Result<Module, PtxError> {
    verify(k)?;
    check_shape(k)?;
    let mut l = Lowering::new(k, dtype);
    l.kernel()?;
    let mut m = Module::new(sm);
    m.functions.push(l.b.finish());
    Ok(m)
}

/// Refusals that do not depend on an instruction's position.
fn check_shape(k: &LoopKernel) -> Result<(), PtxError> {
    let name = &k.name;
    for f in &k.fields {
        if f.ty != Type::Scalar {
            return unsupported(format!("non-scalar field `{}` ({:?}) of kernel `{name}`", f.name, f.ty));
        }
    }
    for o in &k.outputs {
        if o.ty != Type::Scalar {
            return unsupported(format!("non-scalar output `{}` ({:?}) of kernel `{name}`", o.name, o.ty));
        }
        if o.role != Role::Dst {
            return unsupported(format!("{} output `{}` of kernel `{name}`", o.role.name(), o.name));
        }
    }
    if !k.scratch.is_empty() {
        return unsupported(format!("scratch arrays (kernel `{name}`)"));
    }
    if !k.pre_body.is_empty() {
        return unsupported(format!("a first pass over the edges (two-pass reducer, kernel `{name}`)"));
    }
    Ok(())
}

struct Lowering<'a> {
    k: &'a LoopKernel,
    b: FunctionBuilder,
    /// The float type of numbers.
    t: PTy,
    size: i64,
    /// One register per loop-IR variable.
    vars: Vec<Reg>,
    fields: Vec<Reg>,
    outputs: Vec<Reg>,
    /// The current row (`u32`), its first and end CSR positions (`u64`), its
    /// current position (`u64`) and source (`u32`).
    row: Reg,
    start: Reg,
    end: Reg,
    pos: Reg,
    src: Reg,
}

impl<'a> Lowering<'a> {
    fn new(k: &'a LoopKernel, dtype: DType) -> Self {
        let (t, size) = match dtype {
            DType::F32 => (PTy::F32, 4),
            DType::F64 => (PTy::F64, 8),
        };
        let mut b = FunctionBuilder::entry(entry_name(&k.name));
        let vars = k.vars.iter().map(|v| b.reg(if *v == VarKind::Bool { PTy::Pred } else { t })).collect();
        let (row, start, end, pos, src) = (b.reg(PTy::U32), b.reg(PTy::U64), b.reg(PTy::U64), b.reg(PTy::U64), b.reg(PTy::U32));
        Lowering { k, b, t, size, vars, fields: Vec::new(), outputs: Vec::new(), row, start, end, pos, src }
    }

    fn num(&self, c: f64) -> Operand {
        match self.t {
            PTy::F32 => Operand::F32(c as f32),
            _ => Operand::F64(c),
        }
    }

    fn var(&self, x: Var) -> Result<Reg, PtxError> {
        self.vars.get(x.0 as usize).copied().ok_or_else(|| PtxError::Unsupported(format!("undeclared variable v{}", x.0)))
    }

    fn is_bool(&self, x: Var) -> bool {
        self.k.vars.get(x.0 as usize) == Some(&VarKind::Bool)
    }

    /// A pointer parameter, loaded and converted to a global address.
    fn pointer(&mut self, name: String) -> Reg {
        let name = self.b.param(name, PTy::U64);
        let generic = self.b.reg(PTy::U64);
        self.b.push(Op::Ld { space: Space::Param, nc: false, ty: PTy::U64, dst: vec![generic], addr: Address::symbol(name, 0) });
        let r = self.b.reg(PTy::U64);
        self.b.push(Op::CvtaTo { space: Space::Global, dst: r, src: generic.into() });
        r
    }

    fn kernel(&mut self) -> Result<(), PtxError> {
        let b = PBin::Add;
        let offsets = self.pointer("offsets".into());
        let cols = self.pointer("cols".into());
        self.fields = (0..self.k.fields.len()).map(|f| self.pointer(format!("f{f}"))).collect();
        self.outputs = (0..self.k.outputs.len()).map(|o| self.pointer(format!("o{o}"))).collect();
        let n = self.b.param("num_rows", PTy::U32);
        let n_reg = self.b.reg(PTy::U32);
        self.b.push(Op::Ld { space: Space::Param, nc: false, ty: PTy::U32, dst: vec![n_reg], addr: Address::symbol(n, 0) });

        let ctaid = self.b.mov(PTy::U32, Special::CtaidX);
        let ntid = self.b.mov(PTy::U32, Special::NtidX);
        let tid = self.b.mov(PTy::U32, Special::TidX);
        let row = self.row;
        self.b.push(Op::Mad { ty: PTy::U32, dst: row, a: ctaid.into(), b: ntid.into(), c: tid.into() });
        let nctaid = self.b.mov(PTy::U32, Special::NctaidX);
        let stride = self.b.binary(PBin::Mul, PTy::U32, nctaid, ntid);
        let (row_top, edge_top, row_end, done) = (self.b.label(), self.b.label(), self.b.label(), self.b.label());
        let p_rows = self.b.reg(PTy::Pred);
        self.b.push(Op::Setp { cmp: Cmp::Ge, ty: PTy::U32, dst: p_rows, a: row.into(), b: n_reg.into() });
        self.b.push(Instruction::from(Op::Bra { target: done, uni: false }).when(p_rows));

        self.b.place(row_top);
        let off = self.b.reg(PTy::U64);
        self.b.push(Op::MulWide { ty: PTy::U32, dst: off, a: row.into(), b: 8.into() });
        let at = self.b.binary(b, PTy::U64, offsets, off);
        let (start, end) = (self.start, self.end);
        self.b.push(Op::Ld { space: Space::Global, nc: true, ty: PTy::U64, dst: vec![start], addr: Address::reg(at, 0) });
        self.b.push(Op::Ld { space: Space::Global, nc: true, ty: PTy::U64, dst: vec![end], addr: Address::reg(at, 8) });
        let k = self.k;
        self.stmts(&k.init)?;
        let pos = self.pos;
        self.b.push(Op::Mov { ty: PTy::U64, dst: pos, src: start.into() });
        let p_edges = self.b.reg(PTy::Pred);
        self.b.push(Op::Setp { cmp: Cmp::Ge, ty: PTy::U64, dst: p_edges, a: pos.into(), b: end.into() });
        self.b.push(Instruction::from(Op::Bra { target: row_end, uni: false }).when(p_edges));

        self.b.place(edge_top);
        if self.k.reads_role(Role::Src) {
            let coff = self.b.reg(PTy::U64);
            self.b.push(Op::Binary { op: PBin::Mul, ty: PTy::U64, dst: coff, a: pos.into(), b: 4.into() });
            let cat = self.b.binary(b, PTy::U64, cols, coff);
            let src = self.src;
            self.b.push(Op::Ld { space: Space::Global, nc: true, ty: PTy::U32, dst: vec![src], addr: Address::reg(cat, 0) });
        }
        self.stmts(&k.body)?;
        self.b.push(Op::Binary { op: b, ty: PTy::U64, dst: pos, a: pos.into(), b: 1.into() });
        let p_more = self.b.reg(PTy::Pred);
        self.b.push(Op::Setp { cmp: Cmp::Lt, ty: PTy::U64, dst: p_more, a: pos.into(), b: end.into() });
        self.b.push(Instruction::from(Op::Bra { target: edge_top, uni: false }).when(p_more));

        self.b.place(row_end);
        self.stmts(&k.finish)?;
        self.b.push(Op::Binary { op: b, ty: PTy::U32, dst: row, a: row.into(), b: stride.into() });
        let p_next = self.b.reg(PTy::Pred);
        self.b.push(Op::Setp { cmp: Cmp::Lt, ty: PTy::U32, dst: p_next, a: row.into(), b: n_reg.into() });
        self.b.push(Instruction::from(Op::Bra { target: row_top, uni: false }).when(p_next));
        self.b.place(done);
        self.b.push(Op::Ret);
        Ok(())
    }

    /// The global address of element `index` (`ity`: `u32` or `u64`) of the
    /// array at `base`, or `base` itself for `None`.
    fn element(&mut self, base: Reg, index: Option<(Reg, PTy)>) -> Reg {
        let Some((index, ity)) = index else { return base };
        let off = self.b.reg(PTy::U64);
        if ity == PTy::U32 {
            self.b.push(Op::MulWide { ty: PTy::U32, dst: off, a: index.into(), b: self.size.into() });
        } else {
            self.b.push(Op::Binary { op: PBin::Mul, ty: PTy::U64, dst: off, a: index.into(), b: self.size.into() });
        }
        self.b.binary(PBin::Add, PTy::U64, base, off)
    }

    /// The address of a scalar field or destination output, and whether it
    /// is read-only for the kernel's lifetime (`ld.global.nc`).
    fn addr(&mut self, a: &Addr) -> Result<(Reg, bool), PtxError> {
        match a {
            Addr::Field { field, lanes } => {
                let fd = self.k.fields.get(field.0 as usize).ok_or_else(|| PtxError::Unsupported("an unknown field".into()))?;
                if !lanes.is_empty() {
                    return unsupported(format!("a lane of field `{}`", fd.name));
                }
                let index = match fd.role {
                    Role::Src => Some((self.src, PTy::U32)),
                    Role::Dst => Some((self.row, PTy::U32)),
                    Role::Edge => Some((self.pos, PTy::U64)),
                    Role::Param => None,
                };
                let base = self.fields[field.0 as usize];
                Ok((self.element(base, index), true))
            }
            Addr::Output { out, lane: None } => {
                let base =
                    *self.outputs.get(*out as usize).ok_or_else(|| PtxError::Unsupported(format!("unknown output {out}")))?;
                let row = self.row;
                Ok((self.element(base, Some((row, PTy::U32))), false))
            }
            Addr::Output { lane: Some(_), .. } => unsupported("a lane of a vector output"),
            Addr::OutputMatrix { .. } => unsupported("a matrix output"),
            Addr::Scratch { .. } => unsupported("a scratch array"),
        }
    }

    fn stmts(&mut self, list: &[Stmt]) -> Result<(), PtxError> {
        for st in list {
            match st {
                Stmt::Set(d, i) => self.set(*d, i)?,
                Stmt::Store(a, x) => {
                    if matches!(a, Addr::Field { .. }) {
                        return unsupported("a store to a field");
                    }
                    let x = self.var(*x)?;
                    let (at, _) = self.addr(a)?;
                    self.b.push(Op::St { space: Space::Global, ty: self.t, addr: Address::reg(at, 0), src: vec![x.into()] });
                }
                Stmt::Loop { .. } => return unsupported(format!("a feature loop (kernel `{}`)", self.k.name)),
            }
        }
        Ok(())
    }

    fn set(&mut self, dv: Var, i: &Inst) -> Result<(), PtxError> {
        let d = self.var(dv)?;
        let t = self.t;
        if self.is_bool(dv) {
            return self.set_bool(d, i);
        }
        match i {
            Inst::Const(c) => self.b.push(Op::Mov { ty: t, dst: d, src: self.num(*c) }),
            Inst::Load(a) => {
                let (at, nc) = self.addr(a)?;
                self.b.push(Op::Ld { space: Space::Global, nc, ty: t, dst: vec![d], addr: Address::reg(at, 0) });
            }
            Inst::Copy(x) => {
                let x = self.var(*x)?;
                self.b.push(Op::Mov { ty: t, dst: d, src: x.into() });
            }
            Inst::Degree => {
                let deg = self.b.binary(PBin::Sub, PTy::U64, self.end, self.start);
                self.b.push(Op::Cvt {
                    round: tiga_ptx::default_round(t, PTy::U64),
                    dst_ty: t,
                    src_ty: PTy::U64,
                    dst: d,
                    src: deg.into(),
                });
            }
            Inst::Rank => return unsupported("the edge rank"),
            Inst::Unary(u, x) => {
                let x = self.var(*x)?;
                let op = match u {
                    UnOp::Neg => PUn::Neg,
                    UnOp::Abs => PUn::Abs,
                    UnOp::Sqrt => PUn::SqrtRn,
                    UnOp::Relu => {
                        let p = self.b.reg(PTy::Pred);
                        self.b.push(Op::Setp { cmp: Cmp::Gt, ty: t, dst: p, a: x.into(), b: self.num(0.0) });
                        self.b.push(Op::Selp { ty: t, dst: d, a: x.into(), b: self.num(0.0), pred: p });
                        return Ok(());
                    }
                    other => return unsupported(format!("unary `{other:?}`")),
                };
                self.b.push(Op::Unary { op, ty: t, dst: d, a: x.into() });
            }
            Inst::Binary(op, x, y) => {
                let (x, y) = (self.var(*x)?, self.var(*y)?);
                let op = match op {
                    BinOp::Add => PBin::Add,
                    BinOp::Sub => PBin::Sub,
                    BinOp::Mul => PBin::Mul,
                    BinOp::Div => PBin::Div,
                    BinOp::Min => PBin::Min,
                    BinOp::Max => PBin::Max,
                    BinOp::LeakyRelu => {
                        let p = self.b.reg(PTy::Pred);
                        self.b.push(Op::Setp { cmp: Cmp::Gt, ty: t, dst: p, a: x.into(), b: self.num(0.0) });
                        let scaled = self.b.binary(PBin::Mul, t, y, x);
                        self.b.push(Op::Selp { ty: t, dst: d, a: x.into(), b: scaled.into(), pred: p });
                        return Ok(());
                    }
                    other => return unsupported(format!("binary `{other:?}` on numbers")),
                };
                self.b.push(Op::Binary { op, ty: t, dst: d, a: x.into(), b: y.into() });
            }
            Inst::Powi(..) => return unsupported("powi"),
            Inst::Cmp(..) => return unsupported("a comparison into a number"),
            Inst::Select(c, x, y) => {
                let (c, x, y) = (self.var(*c)?, self.var(*x)?, self.var(*y)?);
                self.b.push(Op::Selp { ty: t, dst: d, a: x.into(), b: y.into(), pred: c });
            }
        }
        Ok(())
    }

    fn set_bool(&mut self, d: Reg, i: &Inst) -> Result<(), PtxError> {
        match i {
            Inst::Const(c) => {
                let bit = self.b.mov(PTy::U32, i64::from(*c != 0.0));
                self.b.push(Op::Setp { cmp: Cmp::Ne, ty: PTy::U32, dst: d, a: bit.into(), b: 0.into() });
            }
            Inst::Copy(x) => {
                let x = self.var(*x)?;
                self.b.push(Op::Binary { op: PBin::Or, ty: PTy::Pred, dst: d, a: x.into(), b: x.into() });
            }
            Inst::Cmp(op, x, y) => {
                let (x, y) = (self.var(*x)?, self.var(*y)?);
                let cmp = match op {
                    CmpOp::Lt => Cmp::Lt,
                    CmpOp::Le => Cmp::Le,
                    CmpOp::Gt => Cmp::Gt,
                    CmpOp::Ge => Cmp::Ge,
                    CmpOp::Eq => Cmp::Eq,
                    // Rust's `!=` is true when either side is NaN.
                    CmpOp::Ne => Cmp::Neu,
                };
                self.b.push(Op::Setp { cmp, ty: self.t, dst: d, a: x.into(), b: y.into() });
            }
            Inst::Unary(UnOp::Not, x) => {
                let x = self.var(*x)?;
                self.b.push(Op::Unary { op: PUn::Not, ty: PTy::Pred, dst: d, a: x.into() });
            }
            Inst::Binary(op @ (BinOp::And | BinOp::Or), x, y) => {
                let (x, y) = (self.var(*x)?, self.var(*y)?);
                let op = if *op == BinOp::And { PBin::And } else { PBin::Or };
                self.b.push(Op::Binary { op, ty: PTy::Pred, dst: d, a: x.into(), b: y.into() });
            }
            other => return unsupported(format!("`{other:?}` into a boolean")),
        }
        Ok(())
    }
}
