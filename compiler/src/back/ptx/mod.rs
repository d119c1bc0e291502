//! The PTX back end: a loop-kernel variant (one dtype, one value per width
//! symbol) as a [`tiga_ptx::Module`] with one `.entry`.
//!
//! Everything the loop IR expresses lowers: scalar and vector fields and
//! outputs (destination, edge and parameter outputs), scratch arrays, the
//! two-pass reducers' first pass, degrees, ranks, `powi` and the math
//! functions (module `math`, with their stated accuracy). So every
//! reducer lowers, since the loop IR already spells each one out (identity
//! in `init`, statistics in `pre_body`, combine in `body`, finalize and
//! node in `finish`), and so does every adjoint stage, whose source
//! gradients run over the transposed graph's rows like any other kernel:
//! no atomics anywhere.
//!
//! Launch shape (module `shape`): one thread per destination row for scalar
//! kernels, a group of up to 32 threads splitting a row's features for
//! vector kernels, over a grid-stride loop, so any grid covers any number
//! of rows. Each thread walks its row's edges in CSR order and keeps the
//! reduction state in registers: feature loops are unrolled (their widths
//! are constants of the variant), scratch arrays become registers. A row's
//! result is computed in the same order as on the CPU back ends, and with
//! `add.rn`/`mul.rn`/`div.rn`/`sqrt.rn` (no contraction into `fma`) every
//! result that calls no math function matches the CPU bit for bit.
//!
//! Parameters, in order (all pointers are device addresses):
//!
//! - `offsets` (`.u64`): CSR row offsets, `num_rows + 1` `u64`s;
//! - `cols` (`.u64`): source id per CSR position, `u32`s;
//! - `f0`, `f1`, … (`.u64`): one per kernel field, in declaration order;
//!   edge fields are indexed by CSR position (the `edge_ids = false`
//!   variant of the CPU ABI: the caller permutes them into CSR order);
//! - `o0`, `o1`, … (`.u64`): one per kernel output, in declaration order
//!   (see [`PtxKernel`] for their layouts);
//! - `num_rows` (`.u32`).
//!
//! Scalar semantics follow the CPU back ends (`interp::apply_*`): relu and
//! leaky_relu by comparison, `!=` true on NaN (`setp.neu`), min/max as
//! PTX's `min`/`max` (the non-NaN operand when one is NaN, as Rust's),
//! `powi` by squaring as compiler-rt's `__powidf2`. Refused with
//! [`PtxError::Unsupported`]: stores to fields (which the loop IR never
//! makes) and feature loops too wide to unroll.

mod math;
mod shape;

use std::collections::HashMap;

use tiga_ptx::{
    Address, BinOp as PBin, Cmp, FunctionBuilder, Instruction, Label, Module, Op, Operand, Reg, Space, Special, Type as PTy,
    UnOp as PUn,
};

use crate::ir::{BinOp, CmpOp, DType, Role, Type, UnOp};
use crate::loops::{verify, Addr, Inst, LoopKernel, LoopVar, LoopVerifyError, Stmt, Var, VarKind};
use math::Float;
pub use shape::{group_reductions, lane_shape, LaneShape};

#[derive(Debug, thiserror::Error)]
pub enum PtxError {
    /// Something this back end does not lower, named.
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

/// The most loop-body statements one kernel may unroll into: beyond it
/// the kernel is refused (a width of thousands on one thread per row),
/// rather than handing the driver a module it takes minutes to load.
const MAX_UNROLLED: usize = 1 << 18;

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
    /// Consecutive features one thread loads at once (1, 2 or 4).
    pub vector: u32,
}

/// Lowers loop kernel `k` with width symbol values `widths` (indexed by
/// `WidthId`) to a PTX module for `sm_<sm>` in `dtype`.
pub fn lower_kernel(k: &LoopKernel, dtype: DType, widths: &[usize], sm: u32) -> Result<PtxKernel, PtxError> {
    verify(k)?;
    if widths.len() != k.widths.len() {
        return unsupported(format!("{} width values for kernel `{}`'s {} width symbols", widths.len(), k.name, k.widths.len()));
    }
    let f = match dtype {
        DType::F32 => Float::F32,
        DType::F64 => Float::F64,
    };
    let size = match dtype {
        DType::F32 => 4,
        DType::F64 => 8,
    };
    let shape = lane_shape(k, widths, size);
    let mut l = Lowering::new(k, f, widths, shape);
    l.kernel()?;
    let mut module = Module::new(sm);
    module.functions.push(l.b.finish());
    Ok(PtxKernel { module, entry: entry_name(&k.name), threads_per_row: shape.threads, block: BLOCK, vector: shape.vector })
}

/// Per-thread registers of a lane group (none for one thread per row).
struct Group {
    /// This thread's first feature, `t·V` for thread `t` of the group (`u32`).
    first: Reg,
    /// The same in bytes (`u64`), added to every lane address.
    bytes: Reg,
    /// Whether this is the group's first thread (stores of scalars).
    lead: Reg,
    /// The group's lanes in its warp, for `shfl.sync`.
    mask: Reg,
}

struct Lowering<'a> {
    k: &'a LoopKernel,
    b: FunctionBuilder,
    f: Float,
    t: PTy,
    size: i64,
    widths: &'a [usize],
    shape: LaneShape,
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
    /// The global thread index (`u64`), for parameter partials.
    thread: Option<Reg>,
    group: Option<Group>,
    /// The lane each open feature loop is at (unrolled: a constant).
    lanes: HashMap<LoopVar, usize>,
    /// Inside a feature loop split across a lane group.
    in_group_loop: bool,
    /// Scratch elements, by buffer and lane.
    scratch: HashMap<(u32, usize), Reg>,
    /// Fields preloaded for the current lane (vector loads), by field.
    preloaded: HashMap<u32, Reg>,
    unrolled: usize,
}

impl<'a> Lowering<'a> {
    fn new(k: &'a LoopKernel, f: Float, widths: &'a [usize], shape: LaneShape) -> Self {
        let t = f.ty();
        let size = if t == PTy::F32 { 4 } else { 8 };
        let mut b = FunctionBuilder::entry(entry_name(&k.name));
        let vars = k.vars.iter().map(|v| b.reg(if *v == VarKind::Bool { PTy::Pred } else { t })).collect();
        let (row, start, end, pos, src) = (b.reg(PTy::U32), b.reg(PTy::U64), b.reg(PTy::U64), b.reg(PTy::U64), b.reg(PTy::U32));
        Lowering {
            k,
            b,
            f,
            t,
            size,
            widths,
            shape,
            vars,
            fields: Vec::new(),
            outputs: Vec::new(),
            row,
            start,
            end,
            pos,
            src,
            thread: None,
            group: None,
            lanes: HashMap::new(),
            in_group_loop: false,
            scratch: HashMap::new(),
            preloaded: HashMap::new(),
            unrolled: 0,
        }
    }

    fn var(&self, x: Var) -> Result<Reg, PtxError> {
        self.vars.get(x.0 as usize).copied().ok_or_else(|| PtxError::Unsupported(format!("undeclared variable v{}", x.0)))
    }

    fn is_bool(&self, x: Var) -> bool {
        self.k.vars.get(x.0 as usize) == Some(&VarKind::Bool)
    }

    fn width(&self, w: crate::ir::WidthId) -> usize {
        self.widths.get(w.0 as usize).copied().unwrap_or(0)
    }

    /// Elements of one row of a field or output of type `ty`.
    fn len(&self, ty: Type) -> usize {
        match ty {
            Type::Bool | Type::Scalar => 1,
            Type::Vector(w) | Type::Mask(w) => self.width(w),
            Type::Matrix(a, b) => self.width(a) * self.width(b),
        }
    }

    fn lane(&self, l: LoopVar) -> Result<usize, PtxError> {
        self.lanes.get(&l).copied().ok_or_else(|| PtxError::Unsupported(format!("feature lane k{} outside its loop", l.0)))
    }

    /// The element of a row of type `ty` at feature lanes `lanes`.
    fn element_index(&self, ty: Type, lanes: &[LoopVar]) -> Result<usize, PtxError> {
        match (lanes, ty) {
            ([], _) => Ok(0),
            ([l], _) => self.lane(*l),
            ([r, c], Type::Matrix(_, cols)) => Ok(self.lane(*r)? * self.width(cols) + self.lane(*c)?),
            _ => unsupported(format!("a {}-lane address of a {ty:?}", lanes.len())),
        }
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

    fn branch_if(&mut self, pred: Reg, target: Label) {
        self.b.push(Instruction::from(Op::Bra { target, uni: false }).when(pred));
    }

    fn setp(&mut self, cmp: Cmp, ty: PTy, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        let p = self.b.reg(PTy::Pred);
        self.b.push(Op::Setp { cmp, ty, dst: p, a: a.into(), b: b.into() });
        p
    }

    fn kernel(&mut self) -> Result<(), PtxError> {
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
        let global = self.b.reg(PTy::U32);
        self.b.push(Op::Mad { ty: PTy::U32, dst: global, a: ctaid.into(), b: ntid.into(), c: tid.into() });
        let nctaid = self.b.mov(PTy::U32, Special::NctaidX);
        let threads = self.b.binary(PBin::Mul, PTy::U32, nctaid, ntid);
        if self.k.outputs.iter().any(|o| o.role == Role::Param) {
            self.thread = Some(self.b.cvt(PTy::U64, PTy::U32, global));
        }
        let row = self.row;
        let g = self.shape.threads;
        let stride = if g > 1 {
            let log = i64::from(g.trailing_zeros());
            self.b.push(Op::Binary { op: PBin::Shr, ty: PTy::U32, dst: row, a: global.into(), b: log.into() });
            let in_group = self.b.binary(PBin::And, PTy::B32, tid, i64::from(g - 1));
            let first = self.b.binary(PBin::Mul, PTy::U32, in_group, i64::from(self.shape.vector));
            let bytes = self.b.reg(PTy::U64);
            self.b.push(Op::MulWide { ty: PTy::U32, dst: bytes, a: first.into(), b: self.size.into() });
            let lead = self.setp(Cmp::Eq, PTy::U32, in_group, 0);
            // Groups are aligned within their warp: lanes base .. base + g.
            let lane = self.b.binary(PBin::And, PTy::B32, tid, 31);
            let base = self.b.binary(PBin::And, PTy::B32, lane, i64::from(31 ^ (g - 1)));
            let ones = if g == 32 { 0xffff_ffff_i64 } else { (1_i64 << g) - 1 };
            let mask = self.b.binary(PBin::Shl, PTy::B32, ones, base);
            self.group = Some(Group { first, bytes, lead, mask });
            self.b.binary(PBin::Shr, PTy::U32, threads, log)
        } else {
            self.b.push(Op::Mov { ty: PTy::U32, dst: row, src: global.into() });
            threads
        };
        let (row_top, row_end, done) = (self.b.label(), self.b.label(), self.b.label());
        let p_rows = self.setp(Cmp::Ge, PTy::U32, row, n_reg);
        self.branch_if(p_rows, done);

        self.b.place(row_top);
        let off = self.b.reg(PTy::U64);
        self.b.push(Op::MulWide { ty: PTy::U32, dst: off, a: row.into(), b: 8.into() });
        let at = self.b.binary(PBin::Add, PTy::U64, offsets, off);
        let (start, end) = (self.start, self.end);
        self.b.push(Op::Ld { space: Space::Global, nc: true, ty: PTy::U64, dst: vec![start], addr: Address::reg(at, 0) });
        self.b.push(Op::Ld { space: Space::Global, nc: true, ty: PTy::U64, dst: vec![end], addr: Address::reg(at, 8) });
        let k = self.k;
        self.stmts(&k.init)?;
        if !k.pre_body.is_empty() {
            self.edge_loop(cols, &k.pre_body)?;
        }
        self.edge_loop(cols, &k.body)?;
        self.b.place(row_end);
        self.stmts(&k.finish)?;
        self.b.push(Op::Binary { op: PBin::Add, ty: PTy::U32, dst: row, a: row.into(), b: stride.into() });
        let p_next = self.setp(Cmp::Lt, PTy::U32, row, n_reg);
        self.branch_if(p_next, row_top);
        self.b.place(done);
        self.b.push(Op::Ret);
        Ok(())
    }

    /// `for pos in start..end { src = cols[pos]; list }`.
    fn edge_loop(&mut self, cols: Reg, list: &[Stmt]) -> Result<(), PtxError> {
        let (top, skip) = (self.b.label(), self.b.label());
        let (pos, start, end) = (self.pos, self.start, self.end);
        self.b.push(Op::Mov { ty: PTy::U64, dst: pos, src: start.into() });
        let p_empty = self.setp(Cmp::Ge, PTy::U64, pos, end);
        self.branch_if(p_empty, skip);
        self.b.place(top);
        if self.k.reads_role(Role::Src) {
            let coff = self.b.reg(PTy::U64);
            self.b.push(Op::Binary { op: PBin::Mul, ty: PTy::U64, dst: coff, a: pos.into(), b: 4.into() });
            let cat = self.b.binary(PBin::Add, PTy::U64, cols, coff);
            let src = self.src;
            self.b.push(Op::Ld { space: Space::Global, nc: true, ty: PTy::U32, dst: vec![src], addr: Address::reg(cat, 0) });
        }
        self.stmts(list)?;
        self.b.push(Op::Binary { op: PBin::Add, ty: PTy::U64, dst: pos, a: pos.into(), b: 1.into() });
        let p_more = self.setp(Cmp::Lt, PTy::U64, pos, end);
        self.branch_if(p_more, top);
        self.b.place(skip);
        Ok(())
    }

    /// `base + index·len·size`: the first element of a row of `len`
    /// elements (`index` a `u32` or `u64` register; `None`: `base`).
    fn row_base(&mut self, base: Reg, index: Option<(Reg, PTy)>, len: usize) -> Reg {
        let Some((index, ity)) = index else { return base };
        let stride = len as i64 * self.size;
        let off = self.b.reg(PTy::U64);
        if ity == PTy::U32 {
            self.b.push(Op::MulWide { ty: PTy::U32, dst: off, a: index.into(), b: stride.into() });
        } else {
            self.b.push(Op::Binary { op: PBin::Mul, ty: PTy::U64, dst: off, a: index.into(), b: stride.into() });
        }
        self.b.binary(PBin::Add, PTy::U64, base, off)
    }

    /// The address of element `index` of a row at `base`: within a group
    /// loop, offset by this thread's first feature.
    fn lane_address(&mut self, base: Reg, index: usize, lanes: bool) -> Address {
        let base = match (&self.group, self.in_group_loop && lanes) {
            (Some(g), true) => {
                let bytes = g.bytes;
                self.b.binary(PBin::Add, PTy::U64, base, bytes)
            }
            _ => base,
        };
        Address::reg(base, index as i64 * self.size)
    }

    /// The row index register of role `role` (`None` for parameters).
    fn role_index(&self, role: Role) -> Option<(Reg, PTy)> {
        match role {
            Role::Src => Some((self.src, PTy::U32)),
            Role::Dst => Some((self.row, PTy::U32)),
            Role::Edge => Some((self.pos, PTy::U64)),
            Role::Param => None,
        }
    }

    /// The first element of field `field`'s row for the current row, edge
    /// or source.
    fn field_row(&mut self, field: u32) -> Result<(Reg, Type), PtxError> {
        let fd = self.k.fields.get(field as usize).ok_or_else(|| PtxError::Unsupported("an unknown field".into()))?;
        let (ty, role) = (fd.ty, fd.role);
        let len = self.len(ty);
        let base = self.fields[field as usize];
        Ok((self.row_base(base, self.role_index(role), len), ty))
    }

    /// The address of an output element; parameter outputs address this
    /// thread's partials.
    fn output_address(&mut self, out: u32, lanes: &[LoopVar]) -> Result<Address, PtxError> {
        let od = self.k.outputs.get(out as usize).ok_or_else(|| PtxError::Unsupported(format!("unknown output {out}")))?;
        let (ty, role) = (od.ty, od.role);
        let index = match role {
            Role::Param => self.thread.map(|t| (t, PTy::U64)),
            other => self.role_index(other),
        };
        let len = self.len(ty);
        let base = self.row_base(self.outputs[out as usize], index, len);
        let element = self.element_index(ty, lanes)?;
        Ok(self.lane_address(base, element, !lanes.is_empty()))
    }

    fn address(&mut self, a: &Addr) -> Result<(Address, bool), PtxError> {
        match a {
            Addr::Field { field, lanes } => {
                let (base, ty) = self.field_row(field.0)?;
                let element = self.element_index(ty, lanes)?;
                Ok((self.lane_address(base, element, !lanes.is_empty()), true))
            }
            Addr::Output { out, lane } => {
                let lanes: Vec<LoopVar> = lane.iter().copied().collect();
                Ok((self.output_address(*out, &lanes)?, false))
            }
            Addr::OutputMatrix { out, row, col } => Ok((self.output_address(*out, &[*row, *col])?, false)),
            Addr::Scratch { .. } => unsupported("a scratch array in memory"),
        }
    }

    fn stmts(&mut self, list: &[Stmt]) -> Result<(), PtxError> {
        for st in list {
            match st {
                Stmt::Set(d, i) => self.set(*d, i)?,
                Stmt::Store(Addr::Field { .. }, _) => return unsupported("a store to a field"),
                Stmt::Store(Addr::Scratch { buf, lane }, x) => {
                    let x = self.var(*x)?;
                    let key = (*buf, self.lane(*lane)?);
                    let t = self.t;
                    let r = *self.scratch.entry(key).or_insert_with(|| self.b.reg(t));
                    self.b.push(Op::Mov { ty: t, dst: r, src: x.into() });
                }
                Stmt::Store(a, x) => {
                    let x = self.var(*x)?;
                    let (addr, _) = self.address(a)?;
                    let st = Instruction::from(Op::St { space: Space::Global, ty: self.t, addr, src: vec![x.into()] });
                    // Outside a group loop every thread of a group holds the
                    // same value; the first one stores it.
                    match (&self.group, self.in_group_loop) {
                        (Some(g), false) => self.b.push(st.when(g.lead)),
                        _ => self.b.push(st),
                    }
                }
                Stmt::Loop { lane, width, body } => self.feature_loop(*lane, self.width(*width), body)?,
            }
        }
        Ok(())
    }

    fn count(&mut self, body: &[Stmt]) -> Result<(), PtxError> {
        self.unrolled += body.len();
        if self.unrolled > MAX_UNROLLED {
            return unsupported(format!(
                "kernel `{}` at these widths: its feature loops unroll to more than {MAX_UNROLLED} statements",
                self.k.name
            ));
        }
        Ok(())
    }

    /// A feature loop, unrolled: lane by lane on one thread, or split across
    /// the lane group in chunks of `threads × vector` features.
    fn feature_loop(&mut self, lane: LoopVar, width: usize, body: &[Stmt]) -> Result<(), PtxError> {
        let Some((first, mask)) = self.group.as_ref().map(|g| (g.first, g.mask)) else {
            for index in 0..width {
                self.count(body)?;
                self.lanes.insert(lane, index);
                self.stmts(body)?;
            }
            self.lanes.remove(&lane);
            return Ok(());
        };
        let v = self.shape.vector as usize;
        let chunk = self.shape.threads as usize * v;
        // Each thread reduces its own features from the operation's
        // identity; the group combines the partials after the loop.
        let mut reductions = Vec::new();
        for (x, op) in shape::group_reductions(body) {
            let x = self.var(x)?;
            let saved = self.b.mov(self.t, x);
            let identity = match op {
                BinOp::Max => f64::NEG_INFINITY,
                BinOp::Min => f64::INFINITY,
                _ => 0.0,
            };
            self.b.push(Op::Mov { ty: self.t, dst: x, src: self.f.num(identity) });
            reductions.push((x, saved, binop(op)?));
        }
        for c in 0..width.div_ceil(chunk) {
            let at = c * chunk;
            let skip = self.b.label();
            if at + chunk > width {
                let feature = self.b.binary(PBin::Add, PTy::U32, first, at as i64);
                let p_out = self.setp(Cmp::Ge, PTy::U32, feature, width as i64);
                self.branch_if(p_out, skip);
            }
            self.in_group_loop = true;
            let mut loads: Vec<(u32, Vec<Reg>)> = Vec::new();
            if v > 1 {
                for field in vector_loads(body, lane) {
                    let (base, _) = self.field_row(field)?;
                    let addr = self.lane_address(base, at, true);
                    let regs: Vec<Reg> = (0..v).map(|_| self.b.reg(self.t)).collect();
                    self.b.push(Op::Ld { space: Space::Global, nc: true, ty: self.t, dst: regs.clone(), addr });
                    loads.push((field, regs));
                }
            }
            for q in 0..v {
                self.count(body)?;
                self.lanes.insert(lane, at + q);
                self.preloaded = loads.iter().map(|(f, regs)| (*f, regs[q])).collect();
                self.stmts(body)?;
            }
            self.preloaded.clear();
            self.in_group_loop = false;
            self.b.place(skip);
        }
        self.lanes.remove(&lane);
        for (x, saved, op) in reductions {
            let mut offset = self.shape.threads / 2;
            while offset > 0 {
                let other = self.shuffle_xor(x, offset, mask);
                self.b.push(Op::Binary { op, ty: self.t, dst: x, a: x.into(), b: other.into() });
                offset /= 2;
            }
            self.b.push(Op::Binary { op, ty: self.t, dst: x, a: saved.into(), b: x.into() });
        }
        Ok(())
    }

    /// `x` of the thread whose lane is this one's xor `offset`, within the
    /// group (`shfl.sync.bfly`; an f64 travels as two 32-bit halves).
    fn shuffle_xor(&mut self, x: Reg, offset: u32, mask: Reg) -> Reg {
        let shfl = |dst: Reg, src: Reg| Op::Shfl {
            mode: tiga_ptx::ShflMode::Bfly,
            dst,
            src: src.into(),
            lane: i64::from(offset).into(),
            clamp: 31.into(),
            mask: mask.into(),
        };
        if self.t == PTy::F32 {
            let out = self.b.reg(PTy::F32);
            self.b.push(shfl(out, x));
            return out;
        }
        let bits = self.b.reg(PTy::U64);
        self.b.push(Op::Mov { ty: PTy::B64, dst: bits, src: x.into() });
        let lo = self.b.cvt(PTy::U32, PTy::U64, bits);
        let high = self.b.binary(PBin::Shr, PTy::U64, bits, 32);
        let hi = self.b.cvt(PTy::U32, PTy::U64, high);
        let (lo2, hi2) = (self.b.reg(PTy::U32), self.b.reg(PTy::U32));
        self.b.push(shfl(lo2, lo));
        self.b.push(shfl(hi2, hi));
        let lo64 = self.b.cvt(PTy::U64, PTy::U32, lo2);
        let hi64 = self.b.cvt(PTy::U64, PTy::U32, hi2);
        let hi_up = self.b.binary(PBin::Shl, PTy::B64, hi64, 32);
        let joined = self.b.binary(PBin::Or, PTy::B64, hi_up, lo64);
        let out = self.b.reg(PTy::F64);
        self.b.push(Op::Mov { ty: PTy::B64, dst: out, src: joined.into() });
        out
    }

    fn unary(&mut self, u: UnOp, d: Reg, x: Reg) -> Result<(), PtxError> {
        let t = self.t;
        let op = match u {
            UnOp::Neg => PUn::Neg,
            UnOp::Abs => PUn::Abs,
            UnOp::Sqrt => PUn::SqrtRn,
            UnOp::Relu => {
                let p = self.setp(Cmp::Gt, t, x, self.f.num(0.0));
                self.b.push(Op::Selp { ty: t, dst: d, a: x.into(), b: self.f.num(0.0), pred: p });
                return Ok(());
            }
            UnOp::Exp | UnOp::Ln | UnOp::Tanh | UnOp::Sigmoid => {
                let r = match u {
                    UnOp::Exp => math::exp(&mut self.b, self.f, x),
                    UnOp::Ln => math::ln(&mut self.b, self.f, x),
                    UnOp::Tanh => math::tanh(&mut self.b, self.f, x),
                    _ => math::sigmoid(&mut self.b, self.f, x),
                };
                self.b.push(Op::Mov { ty: t, dst: d, src: r.into() });
                return Ok(());
            }
            UnOp::Not => return unsupported("`not` on a number"),
        };
        self.b.push(Op::Unary { op, ty: t, dst: d, a: x.into() });
        Ok(())
    }

    /// `x.powi(n)` as compiler-rt's `__powidf2`: square and multiply over
    /// the bits of |n|, then the reciprocal for negative n.
    fn powi(&mut self, d: Reg, x: Reg, n: i32) {
        let t = self.t;
        let mut bits = n.unsigned_abs();
        let mut a = x;
        let mut r: Option<Reg> = None;
        loop {
            if bits & 1 == 1 {
                r = Some(match r {
                    None => a,
                    Some(r) => self.b.binary(PBin::Mul, t, r, a),
                });
            }
            bits >>= 1;
            if bits == 0 {
                break;
            }
            a = self.b.binary(PBin::Mul, t, a, a);
        }
        let r = match r {
            Some(r) => r.into(),
            None => self.f.num(1.0),
        };
        if n < 0 {
            self.b.push(Op::Binary { op: PBin::Div, ty: t, dst: d, a: self.f.num(1.0), b: r });
        } else {
            self.b.push(Op::Mov { ty: t, dst: d, src: r });
        }
    }

    /// `d = (number) count` for a `u64` count register.
    fn count_to_number(&mut self, d: Reg, count: Reg) {
        let t = self.t;
        self.b.push(Op::Cvt {
            round: tiga_ptx::default_round(t, PTy::U64),
            dst_ty: t,
            src_ty: PTy::U64,
            dst: d,
            src: count.into(),
        });
    }

    fn set(&mut self, dv: Var, i: &Inst) -> Result<(), PtxError> {
        let d = self.var(dv)?;
        let t = self.t;
        if self.is_bool(dv) {
            return self.set_bool(d, i);
        }
        match i {
            Inst::Const(c) => self.b.push(Op::Mov { ty: t, dst: d, src: self.f.num(*c) }),
            Inst::Load(Addr::Scratch { buf, lane }) => {
                let key = (*buf, self.lane(*lane)?);
                let r = *self
                    .scratch
                    .get(&key)
                    .ok_or_else(|| PtxError::Unsupported(format!("scratch{buf}[{}] read before it is written", key.1)))?;
                self.b.push(Op::Mov { ty: t, dst: d, src: r.into() });
            }
            Inst::Load(Addr::Field { field, lanes }) if lanes.len() == 1 && self.preloaded.contains_key(&field.0) => {
                let r = self.preloaded[&field.0];
                self.b.push(Op::Mov { ty: t, dst: d, src: r.into() });
            }
            Inst::Load(a) => {
                let (addr, nc) = self.address(a)?;
                self.b.push(Op::Ld { space: Space::Global, nc, ty: t, dst: vec![d], addr });
            }
            Inst::Copy(x) => {
                let x = self.var(*x)?;
                self.b.push(Op::Mov { ty: t, dst: d, src: x.into() });
            }
            Inst::Degree => {
                let deg = self.b.binary(PBin::Sub, PTy::U64, self.end, self.start);
                self.count_to_number(d, deg);
            }
            Inst::Rank => {
                let rank = self.b.binary(PBin::Sub, PTy::U64, self.pos, self.start);
                self.count_to_number(d, rank);
            }
            Inst::Unary(u, x) => {
                let x = self.var(*x)?;
                self.unary(*u, d, x)?;
            }
            Inst::Binary(BinOp::LeakyRelu, x, y) => {
                let (x, y) = (self.var(*x)?, self.var(*y)?);
                let p = self.setp(Cmp::Gt, t, x, self.f.num(0.0));
                let scaled = self.b.binary(PBin::Mul, t, y, x);
                self.b.push(Op::Selp { ty: t, dst: d, a: x.into(), b: scaled.into(), pred: p });
            }
            Inst::Binary(op, x, y) => {
                let (x, y) = (self.var(*x)?, self.var(*y)?);
                let op = binop(*op)?;
                self.b.push(Op::Binary { op, ty: t, dst: d, a: x.into(), b: y.into() });
            }
            Inst::Powi(x, n) => {
                let x = self.var(*x)?;
                self.powi(d, x, *n);
            }
            Inst::Cmp(..) => return unsupported("a comparison into a number"),
            Inst::Select(c, x, y) => {
                let (c, x, y) = (self.var(*c)?, self.var(*x)?, self.var(*y)?);
                self.b.push(Op::Selp { ty: t, dst: d, a: x.into(), b: y.into(), pred: c });
            }
        }
        Ok(())
    }

    fn set_bool(&mut self, d: Reg, i: &Inst) -> Result<(), PtxError> {
        let pred = |op: PBin, a: Reg, b: Reg| Op::Binary { op, ty: PTy::Pred, dst: d, a: a.into(), b: b.into() };
        match i {
            Inst::Const(c) => {
                let bit = self.b.mov(PTy::U32, i64::from(*c != 0.0));
                self.b.push(Op::Setp { cmp: Cmp::Ne, ty: PTy::U32, dst: d, a: bit.into(), b: 0.into() });
            }
            Inst::Copy(x) => {
                let x = self.var(*x)?;
                self.b.push(pred(PBin::Or, x, x));
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
                self.b.push(pred(if *op == BinOp::And { PBin::And } else { PBin::Or }, x, y));
            }
            Inst::Select(c, x, y) => {
                // (c ∧ x) ∨ (¬c ∧ y).
                let (c, x, y) = (self.var(*c)?, self.var(*x)?, self.var(*y)?);
                let when = self.b.binary(PBin::And, PTy::Pred, c, x);
                let not_c = self.b.reg(PTy::Pred);
                self.b.push(Op::Unary { op: PUn::Not, ty: PTy::Pred, dst: not_c, a: c.into() });
                let otherwise = self.b.binary(PBin::And, PTy::Pred, not_c, y);
                self.b.push(pred(PBin::Or, when, otherwise));
            }
            other => return unsupported(format!("`{other:?}` into a boolean")),
        }
        Ok(())
    }
}

/// The PTX operation of an arithmetic loop-IR operation on numbers.
fn binop(op: BinOp) -> Result<PBin, PtxError> {
    Ok(match op {
        BinOp::Add => PBin::Add,
        BinOp::Sub => PBin::Sub,
        BinOp::Mul => PBin::Mul,
        BinOp::Div => PBin::Div,
        BinOp::Min => PBin::Min,
        BinOp::Max => PBin::Max,
        other => return unsupported(format!("binary `{other:?}` on numbers")),
    })
}

/// The fields `body` loads at lane `lane` of a vector (each once, in
/// order of first load): what a group loop loads `V` lanes at a time.
fn vector_loads(body: &[Stmt], lane: LoopVar) -> Vec<u32> {
    let mut out = Vec::new();
    for st in body {
        if let Stmt::Set(_, Inst::Load(Addr::Field { field, lanes })) = st {
            if lanes.as_slice() == [lane] && !out.contains(&field.0) {
                out.push(field.0);
            }
        }
    }
    out
}
