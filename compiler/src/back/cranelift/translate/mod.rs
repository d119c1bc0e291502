//! Loop IR → CLIF, for one variant.
//!
//! The function built for a kernel with one vector source field `x` and a
//! scratch accumulator looks like (f32, F = 4, abridged):
//!
//! ```text
//! block0(v0: i64, v1: i64, v2: i64):        ; args, row_begin, row_end
//!     v3 = load.i64 notrap aligned v0       ; offsets
//!     ...                                   ; cols, field and output bases
//!     jump block1(v1)
//! block1(v10: i64):                         ; row header
//!     v11 = icmp ult v10, v2
//!     brif v11, block2, block3
//! block2:                                   ; row body: deg, <init>
//!     ...
//!     jump block4(v12)                      ; edge header (p = off[i])
//! block4(v20: i64):
//!     brif (p < off[i+1]), block5, block6
//! block5:                                   ; j = cols[p]; <body>
//!     ...                                   ; feature loops nest here
//!     jump block4(p + 1)
//! block6:                                   ; <finish>
//!     jump block1(v10 + 1)
//! block3:
//!     return
//! ```
//!
//! The translator decides nothing about how the variant runs: it follows
//! the [`CodegenPlan`] computed before it (module `plan`: SIMD width, each
//! feature loop's form, feature blocks, accumulators in registers, edges
//! per iteration, tiles, touches ahead, rows as vector lanes). Its methods
//! are grouped by what they emit: instruction selection (`insts`), SIMD
//! feature loops, feature blocks and promoted accumulators (`vectorize`),
//! loops and CSR edge loops (`edges`), touches ahead (`touch`), generated
//! stencils (`stencil`), and addresses and variables (`addr`); this module
//! holds the translator, the row skeleton and the statements.
//!
//! The caller runs the loop IR's verifier first, so a malformed kernel is
//! refused as [`super::BackError::Malformed`] before it gets here. The
//! translator's own errors are plain messages, wrapped as
//! [`super::BackError::Internal`]: a verified kernel that still cannot be
//! lowered is a bug, reported rather than a panic.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{self, types, BlockArg, InstBuilder, MemFlagsData, StackSlotData, StackSlotKind, Value};
use cranelift_codegen::isa::TargetFrontendConfig;
use cranelift_frontend::{FunctionBuilder, Variable};

mod addr;
mod edges;
mod half;
mod insts;
mod stencil;
mod touch;
mod vectorize;

use super::math::MathRefs;
use super::plan::{
    axis_stride, mark_used, stride, Axis, CodegenPlan, FeatureLoopPlan, LoopForm, StmtList, TouchedField,
    EDGE_UNROLL_MAX_ROW_BYTES,
};
use super::VariantKey;
use crate::ir::{BinOp, CmpOp, DType, Role, Type, UnOp, WidthId};
use crate::loops::{Addr, Inst, LoopKernel, LoopVar, Stmt, Var, VarKind};
use tiga_abi::RawArgs;

type TResult<T> = Result<T, String>;

/// The size in bytes of each scratch buffer of `k` in variant `key`.
pub(super) fn scratch_sizes(k: &LoopKernel, key: &VariantKey) -> TResult<Vec<u64>> {
    k.scratch
        .iter()
        .enumerate()
        .map(|(b, w)| {
            let n = key.widths.get(w.0 as usize).ok_or_else(|| format!("scratch{b} uses unknown width {}", w.0))?;
            (*n as u64).checked_mul(key.dtype.size() as u64).ok_or_else(|| format!("scratch{b} is too large"))
        })
        .collect()
}

/// The float condition of a comparison, scalar or lane-wise, with Rust's
/// semantics (ordered, except `!=`: unordered or unequal, true for NaN).
fn float_cc(c: CmpOp) -> FloatCC {
    match c {
        CmpOp::Lt => FloatCC::LessThan,
        CmpOp::Le => FloatCC::LessThanOrEqual,
        CmpOp::Gt => FloatCC::GreaterThan,
        CmpOp::Ge => FloatCC::GreaterThanOrEqual,
        CmpOp::Eq => FloatCC::Equal,
        CmpOp::Ne => FloatCC::NotEqual,
    }
}

/// `fcmp cc, x, y` with `>` and `>=` written as `<` and `<=` on swapped
/// operands (the same result for every input, NaN included): the x64
/// back end turns a select on `x < y` (scalar or lane-wise) into one
/// `minps`/`maxps` (`minss`/`maxss`), where a `>` compare stays a compare
/// and a blend.
fn fcmp(b: &mut FunctionBuilder<'_>, cc: FloatCC, x: Value, y: Value) -> Value {
    match cc {
        FloatCC::GreaterThan => b.ins().fcmp(FloatCC::LessThan, y, x),
        FloatCC::GreaterThanOrEqual => b.ins().fcmp(FloatCC::LessThanOrEqual, y, x),
        _ => b.ins().fcmp(cc, x, y),
    }
}

/// Trusted (cannot trap, aligned) accesses: the ABI guarantees both.
fn flags() -> MemFlagsData {
    MemFlagsData::trusted()
}

/// A loop's end: a value, or a constant (a feature width).
#[derive(Clone, Copy)]
enum Bound {
    Value(Value),
    Imm(i64),
}

/// An open header-style loop (see `Translator::open_loop`).
struct OpenLoop {
    header: ir::Block,
    exit: ir::Block,
    counter: Value,
}

/// The values of the current row and edge, where they exist.
#[derive(Clone, Copy, Default)]
struct Cursor {
    /// Destination row `i`.
    row: Option<Value>,
    /// Its degree, as i64.
    deg: Option<Value>,
    /// Source `j` and edge `e` (inside the edge loop only).
    src: Option<Value>,
    edge: Option<Value>,
    /// The edge's CSR position `p` and its row's first position `off[i]`
    /// (the rank `p - off[i]` is computed where a kernel asks for it).
    rank: Option<(Value, Value)>,
}

/// What an edge loop touches ahead ([`Translator::edge_cursor`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Touch {
    /// The body's source rows (or, under blocking without touch-ahead, the
    /// later blocks' lines).
    Main,
    /// The source fields the pre-pass reads.
    Pre,
    Nothing,
}

pub(super) struct Translator<'a> {
    b: FunctionBuilder<'a>,
    k: &'a LoopKernel,
    key: &'a VariantKey,
    plan: &'a CodegenPlan,
    num: ir::Type,
    /// log2 of the element size.
    shift: i64,
    math: MathRefs,
    vars: Vec<Variable>,
    /// Scratch byte sizes, then their base addresses (taken once, in the
    /// entry block).
    scratch_bytes: &'a [u64],
    scratch: Vec<Value>,
    /// Base pointers, loaded in the entry block when used.
    fields: Vec<Option<Value>>,
    outputs: Vec<Option<Value>>,
    /// The value of each feature-loop counter inside its loop.
    lanes: Vec<Option<Value>>,
    /// Scratch arrays kept in registers (`CodegenPlan::promoted`): one
    /// vector variable per chunk of lanes.
    promoted: Vec<Option<Vec<Variable>>>,
    /// The feature block being emitted (`CodegenPlan::feature_blocks`):
    /// its first lane.
    block_start: Option<i64>,
    /// The index in `CodegenPlan::feature_loops` of the next feature loop
    /// met, set at the start of each statement list.
    next_loop: usize,
    /// Variables that are never NaN ([`crate::loops::never_nan`]): a `max`
    /// or `min` with such an operand is one compare and select.
    not_nan: Vec<bool>,
    /// The chunk's end in the CSR (`off[row_end]`), when the edge loop
    /// touches ahead ([`Translator::touch_ahead`]).
    chunk_end: Option<Value>,
    /// The tiles' buffer of carried values, made on first use.
    tile_slot: Option<ir::StackSlot>,
    /// Feature loops emitted as SIMD and as scalar loops (for the notes).
    simd_loops: usize,
    scalar_loops: usize,
    cur: Cursor,
}

impl<'a> Translator<'a> {
    pub(super) fn new(
        mut b: FunctionBuilder<'a>,
        k: &'a LoopKernel,
        key: &'a VariantKey,
        plan: &'a CodegenPlan,
        scratch_bytes: &'a [u64],
        math: MathRefs,
    ) -> Translator<'a> {
        let (num, shift) = match key.dtype {
            DType::F32 => (types::F32, 2),
            DType::F64 => (types::F64, 3),
        };
        let vars = k
            .vars
            .iter()
            .map(|kind| {
                b.declare_var(match kind {
                    VarKind::Num => num,
                    VarKind::Bool => types::I8,
                })
            })
            .collect();
        Translator {
            b,
            k,
            key,
            plan,
            num,
            shift,
            math,
            vars,
            scratch_bytes,
            scratch: Vec::new(),
            fields: vec![None; k.fields.len()],
            outputs: vec![None; k.outputs.len()],
            lanes: vec![None; k.num_loop_vars as usize],
            promoted: Vec::new(),
            block_start: None,
            next_loop: 0,
            not_nan: crate::loops::never_nan(k),
            chunk_end: None,
            tile_slot: None,
            simd_loops: 0,
            scalar_loops: 0,
            cur: Cursor::default(),
        }
    }

    /// Build the whole function and finalize the builder. Returns the
    /// notes for `explain`: the plan's choices in words, with how many
    /// feature loops were emitted as SIMD.
    pub(super) fn run(mut self, config: TargetFrontendConfig) -> TResult<Vec<String>> {
        let entry = self.b.create_block();
        self.b.append_block_params_for_function_params(entry);
        self.b.switch_to_block(entry);
        self.b.seal_block(entry);
        let params = self.b.block_params(entry).to_vec();
        let [args, row_begin, row_end] = params[..] else {
            return Err("entry block has the wrong parameters".into());
        };

        // Base pointers, once per call.
        let offsets = self.b.ins().load(types::I64, flags(), args, RawArgs::OFFSETS);
        let (mut used_fields, mut used_outputs) = (vec![false; self.k.fields.len()], vec![false; self.k.outputs.len()]);
        for list in StmtList::ALL {
            mark_used(list.of(self.k), &mut used_fields, &mut used_outputs)?;
        }
        if used_fields.iter().any(|&u| u) {
            let table = self.b.ins().load(types::I64, flags(), args, RawArgs::FIELDS);
            for (f, _) in used_fields.iter().enumerate().filter(|(_, &u)| u) {
                let off = i32::try_from(f * 8).map_err(|_| "too many fields")?;
                self.fields[f] = Some(self.b.ins().load(types::I64, flags(), table, off));
            }
        }
        if used_outputs.iter().any(|&u| u) {
            let table = self.b.ins().load(types::I64, flags(), args, RawArgs::OUTPUTS);
            for (o, _) in used_outputs.iter().enumerate().filter(|(_, &u)| u) {
                let off = i32::try_from(o * 8).map_err(|_| "too many outputs")?;
                self.outputs[o] = Some(self.b.ins().load(types::I64, flags(), table, off));
            }
        }
        let reads_src = self.k.reads_role(Role::Src);
        let cols = if reads_src { Some(self.b.ins().load(types::I64, flags(), args, RawArgs::COLS)) } else { None };
        let edge_ids = if self.key.edge_ids && self.k.reads_role(Role::Edge) {
            Some(self.b.ins().load(types::I64, flags(), args, RawArgs::EDGE_IDS))
        } else {
            None
        };
        for &bytes in self.scratch_bytes {
            // Scratch sizes were capped at 1 MiB by the caller.
            let size = u32::try_from(bytes.max(1)).map_err(|_| "scratch too large")?;
            let slot = self.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, size, 4));
            let base = self.b.ins().stack_addr(types::I64, slot, 0);
            self.scratch.push(base);
        }
        self.promote_scratch();

        // A generated stencil's grid coordinates (r, c) of row i: one
        // division for the chunk's first row, then carried (c + 1, wrapping
        // to the next r), not a division per row.
        let coords = match &self.key.stencil {
            Some(st) => {
                let cols = st.cols as i64;
                let (r, c) = (self.b.declare_var(types::I64), self.b.declare_var(types::I64));
                let r0 = self.b.ins().udiv_imm_u(row_begin, cols);
                let rc = self.b.ins().imul_imm_s(r0, cols);
                let c0 = self.b.ins().isub(row_begin, rc);
                self.b.def_var(r, r0);
                self.b.def_var(c, c0);
                Some((r, c))
            }
            None => None,
        };
        if self.plan.touch_ahead.is_some() {
            let a = self.b.ins().ishl_imm_u(row_end, 3);
            let a = self.b.ins().iadd(offsets, a);
            self.chunk_end = Some(self.b.ins().load(types::I64, flags(), a, 0));
        }
        // for i in row_begin..row_end
        let row = self.open_loop(row_begin, Bound::Value(row_end));
        let i = row.counter;
        let (k, key) = (self.k, self.key);
        if let (Some(st), Some((rv, cv))) = (&key.stencil, coords) {
            // Carry the coordinates `step` rows on: c + step, wrapping to
            // column 0 of the next grid row (a step never crosses it).
            let advance = |t: &mut Self, step: Value| {
                let (r, c) = (t.b.use_var(rv), t.b.use_var(cv));
                let c1 = t.b.ins().iadd(c, step);
                let wrap = t.b.ins().icmp_imm_u(IntCC::Equal, c1, st.cols as i64);
                let zero = t.b.ins().iconst(types::I64, 0);
                let c2 = t.b.ins().select(wrap, zero, c1);
                let up = t.b.ins().uextend(types::I64, wrap);
                let r2 = t.b.ins().iadd(r, up);
                t.b.def_var(rv, r2);
                t.b.def_var(cv, c2);
            };
            // One row by the tested (or wrapped) neighbour path.
            let scalar_row = |t: &mut Self| -> TResult<Value> {
                t.row_pass(i, None, |t| {
                    let (r, c) = (t.b.use_var(rv), t.b.use_var(cv));
                    t.generated_neighbours(st, i, r, c)
                })?;
                let step = t.b.ins().iconst(types::I64, 1);
                advance(t, step);
                Ok(t.b.ins().iadd_imm_s(i, 1))
            };
            let next = match self.plan.row_vectors {
                Some(vl) => {
                    // Where `vl` rows from `i` on are interior and in the
                    // chunk, a run of whole vectors to the end of this grid
                    // row's interior (or of the chunk); one row otherwise.
                    let (dr_lo, dc_lo, inner_r, inner_c) = st.interior();
                    let (r, c) = (self.b.use_var(rv), self.b.use_var(cv));
                    let rr = self.b.ins().iadd_imm_s(r, dr_lo);
                    let ok_r = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, rr, inner_r);
                    let cc = self.b.ins().iadd_imm_s(c, dc_lo);
                    let ok_c = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThanOrEqual, cc, inner_c - vl);
                    let last = self.b.ins().iadd_imm_s(i, vl);
                    let ok_i = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, last, row_end);
                    let ok = self.b.ins().band(ok_r, ok_c);
                    let ok = self.b.ins().band(ok, ok_i);
                    let interior_run = |t: &mut Self| -> TResult<Value> {
                        let c = t.b.use_var(cv);
                        let edge = t.b.ins().iconst(types::I64, inner_c - dc_lo);
                        let to_edge = t.b.ins().isub(edge, c);
                        let to_end = t.b.ins().isub(row_end, i);
                        let run = t.b.ins().umin(to_edge, to_end);
                        let run = t.b.ins().band_imm_s(run, -vl);
                        let stop = t.b.ins().iadd(i, run);
                        // Two vectors per iteration, then the odd one.
                        let pairs = t.b.ins().band_imm_s(run, -2 * vl);
                        let pairs_end = t.b.ins().iadd(i, pairs);
                        let lp = t.open_loop(i, Bound::Value(pairs_end));
                        let at = lp.counter;
                        t.vector_rows(Some(st), at)?;
                        let at2 = t.b.ins().iadd_imm_s(at, vl);
                        t.vector_rows(Some(st), at2)?;
                        t.close_loop(lp, 2 * vl);
                        let (odd, done) = (t.b.create_block(), t.b.create_block());
                        let more = t.b.ins().icmp(IntCC::UnsignedLessThan, pairs_end, stop);
                        t.b.ins().brif(more, odd, &[], done, &[]);
                        t.b.seal_block(odd);
                        t.b.switch_to_block(odd);
                        t.vector_rows(Some(st), pairs_end)?;
                        t.b.ins().jump(done, &[]);
                        t.b.seal_block(done);
                        t.b.switch_to_block(done);
                        advance(t, run);
                        Ok(stop)
                    };
                    self.either_rows(ok, interior_run, scalar_row)?
                }
                None => scalar_row(&mut self)?,
            };
            self.close_loop_at(row, next);
        } else if let Some(vl) = self.plan.row_vectors {
            // A row-only kernel (an adjoint's row stage) is elementwise over
            // rows: `vl` rows per vector while the chunk has them, then one
            // at a time; no CSR read at all.
            let last = self.b.ins().iadd_imm_s(i, vl);
            let fits = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, last, row_end);
            let vector = |t: &mut Self| -> TResult<Value> {
                t.vector_rows(None, i)?;
                Ok(last)
            };
            let scalar = |t: &mut Self| -> TResult<Value> {
                t.row_pass(i, None, |_| Ok(()))?;
                Ok(t.b.ins().iadd_imm_s(i, 1))
            };
            let next = self.either_rows(fits, vector, scalar)?;
            self.close_loop_at(row, next);
        } else {
            let off_addr = self.b.ins().ishl_imm_u(i, 3);
            let off_addr = self.b.ins().iadd(offsets, off_addr);
            let first = self.b.ins().load(types::I64, flags(), off_addr, 0);
            let end = self.b.ins().load(types::I64, flags(), off_addr, 8);
            let deg = self.b.ins().isub(end, first);
            // One pass over the row's edges per feature block (one pass in
            // all without blocking).
            let blocks: Vec<Option<i64>> = match self.plan.feature_blocks {
                // A split body's blocks are passes over each tile instead.
                Some(b) if self.plan.tiles.is_none() => b.starts().map(Some).collect(),
                _ => vec![None],
            };
            for start in blocks {
                self.block_start = start;
                // The edge loop is skipped when the body is empty (a kernel
                // whose rows need no edges, like an adjoint's row stage).
                self.row_pass(i, Some(deg), |t| {
                    if !k.pre_body.is_empty() {
                        t.csr_edges(first, end, cols, edge_ids, StmtList::PreBody)?;
                    }
                    if k.body.is_empty() {
                        Ok(())
                    } else {
                        t.csr_edges(first, end, cols, edge_ids, StmtList::Body)
                    }
                })?;
            }
            self.block_start = None;
            self.close_loop(row, 1);
        }
        self.b.ins().return_(&[]);
        let notes = self.notes();
        self.b.finalize(config);
        Ok(notes)
    }

    /// Branch on `fits` to `vector` or else `scalar`: each emits rows from
    /// the row counter on and returns the counter's next value. Returns
    /// that value where the two paths join.
    fn either_rows(
        &mut self,
        fits: Value,
        vector: impl FnOnce(&mut Self) -> TResult<Value>,
        scalar: impl FnOnce(&mut Self) -> TResult<Value>,
    ) -> TResult<Value> {
        let (vb, sb, join) = (self.b.create_block(), self.b.create_block(), self.b.create_block());
        let next = self.b.append_block_param(join, types::I64);
        self.b.ins().brif(fits, vb, &[], sb, &[]);
        self.b.seal_block(vb);
        self.b.seal_block(sb);
        self.b.switch_to_block(vb);
        let n = vector(self)?;
        self.b.ins().jump(join, &[BlockArg::Value(n)]);
        self.b.switch_to_block(sb);
        let n = scalar(self)?;
        self.b.ins().jump(join, &[BlockArg::Value(n)]);
        self.b.seal_block(join);
        self.b.switch_to_block(join);
        Ok(next)
    }

    /// One pass over row `i`: its `init`, its edges (`edges`), its
    /// `finish`, with the cursor on the row (and its degree when known
    /// before the edges).
    fn row_pass(&mut self, i: Value, deg: Option<Value>, edges: impl FnOnce(&mut Self) -> TResult<()>) -> TResult<()> {
        let k = self.k;
        self.cur = Cursor { row: Some(i), deg, src: None, edge: None, rank: None };
        self.list(StmtList::Init, &k.init)?;
        edges(self)?;
        self.cur.src = None;
        self.cur.edge = None;
        self.cur.rank = None;
        self.list(StmtList::Finish, &k.finish)
    }

    /// The plan's choices in words (the lines `explain` showed before the
    /// plan was printed whole), with the feature loops as emitted.
    fn notes(&self) -> Vec<String> {
        let plan = self.plan;
        let (vty, vl) = self.vlen();
        let mut notes = Vec::new();
        if let Some(st) = &self.key.stencil {
            notes.push(format!(
                "realization: generated stencil {}x{} ({} offsets{}): neighbours from the row index, no CSR read",
                st.rows,
                st.cols,
                st.offsets.len(),
                if st.periodic { ", periodic" } else { "" }
            ));
            if let Some(vl) = plan.row_vectors {
                notes.push(format!(
                    "interior rows: {vl} at a time as {vty} SIMD lanes (one unaligned load per neighbour), border rows scalar"
                ));
            }
        }
        if let (None, Some(vl)) = (&self.key.stencil, plan.row_vectors) {
            notes.push(format!("row-only kernel: {vl} rows at a time as {vty} SIMD lanes, no CSR read"));
        }
        let loops = self.simd_loops + self.scalar_loops;
        if loops > 0 {
            notes.push(format!(
                "feature loops: {} of {loops} as {vty} SIMD ({} bits), the rest scalar",
                self.simd_loops,
                vl * self.key.dtype.size() as i64 * 8
            ));
        }
        if let Some(t) = &plan.touch_ahead {
            notes.push(format!(
                "edge loop: touches the source rows {} edges ahead ({} field(s); one prefetch per 64-byte line)",
                t.edges,
                t.fields.len()
            ));
            if !self.k.pre_body.is_empty() {
                notes.push(format!(
                    "pre-pass over the edges: touches {} source field(s) it reads {} edges ahead",
                    t.pre_fields.len(),
                    t.edges
                ));
            }
        }
        let passes = [(plan.edge_unroll.pre_pass, "pre-pass"), (plan.edge_unroll.body, "edge loop")];
        for (unroll, what) in passes {
            if let Some(unroll) = unroll.filter(|&n| n > 1) {
                notes.push(format!("{what}: {unroll} edges per iteration (a short body, rows of at most {EDGE_UNROLL_MAX_ROW_BYTES} bytes; the first degree % {unroll} edges one at a time)"));
            }
        }
        for (b, p) in self.promoted.iter().enumerate() {
            if let Some(vars) = p {
                notes.push(format!("accumulator scratch{b}: in {} vector registers (not the stack)", vars.len()));
            }
        }
        if let Some(t) = &plan.tiles {
            notes.push(format!(
                "edge tiles: {} edges at a time, the scalar part (with its math calls) first, then the feature loops with none ({} value(s) kept per edge)",
                t.edges,
                t.split.carried.len()
            ));
        }
        if let Some(b) = plan.feature_blocks {
            let touch = if plan.touch_ahead.is_some() { "" } else { " (the first touches the source lines the later ones read)" };
            let over = if plan.tiles.is_some() { "each tile's edges" } else { "each row's edges" };
            notes.push(format!(
                "feature blocks: {} of {} lanes, {} passes over {over}{touch}",
                b.block,
                b.lanes,
                b.lanes / b.block
            ));
        }
        notes
    }

    /// Statement list `which` of the kernel, or `stmts` standing for it
    /// (a split body's loops stand for the body's), with the plan's
    /// feature loops of that list.
    fn list(&mut self, which: StmtList, stmts: &[Stmt]) -> TResult<()> {
        self.next_loop = self.plan.first_loop(which);
        self.stmts(stmts)
    }

    fn stmts(&mut self, list: &[Stmt]) -> TResult<()> {
        list.iter().try_for_each(|s| self.stmt(s))
    }

    fn stmt(&mut self, s: &Stmt) -> TResult<()> {
        match s {
            Stmt::Set(v, inst) => {
                let kind = self.kind(*v)?;
                let value = self.inst(inst, kind)?;
                let var = self.var(*v)?;
                self.b.try_def_var(var, value).map_err(|e| format!("v{}: {e}", v.0))
            }
            Stmt::Store(addr, v) => {
                if self.kind(*v)? != VarKind::Num {
                    return Err(format!("store of boolean v{}", v.0));
                }
                let value = self.use_var(*v)?;
                let a = self.addr(addr)?;
                self.store_num(addr, a, value, flags())
            }
            Stmt::Loop { lane, width, body } => {
                let at = self.next_loop;
                let fl = self.plan.feature_loops.get(at).filter(|l| l.lane == *lane && l.width == *width);
                let fl = fl.ok_or_else(|| format!("internal: feature loop over k{} is not the plan's loop {at}", lane.0))?;
                let (start, len) = self.lane_range(*width, fl.lanes);
                self.next_loop = at + 1;
                self.feature_loop(fl, start, len, body)?;
                self.next_loop = fl.end;
                Ok(())
            }
        }
    }

    /// `for lane in start..start + n { body }` in the plan's form: SIMD
    /// ([`Translator::vector_loop`]), or a scalar header-style loop
    /// (straight-line code when `n` is 0 or 1).
    fn feature_loop(&mut self, fl: &FeatureLoopPlan, start: i64, n: i64, body: &[Stmt]) -> TResult<()> {
        let lane = fl.lane;
        let l = lane.0 as usize;
        if l >= self.lanes.len() {
            self.lanes.resize(l + 1, None);
        }
        if n == 0 {
            return Ok(());
        }
        if let LoopForm::Simd { unrolled, partial_sums } = &fl.form {
            self.vector_loop(lane, start, n, body, *unrolled, partial_sums)?;
            self.simd_loops += 1;
            return Ok(());
        }
        self.scalar_loops += 1;
        if n == 1 {
            let first = self.b.ins().iconst(types::I64, start);
            let prev = self.lanes[l].replace(first);
            self.stmts(body)?;
            self.lanes[l] = prev;
            return Ok(());
        }
        let first = self.b.ins().iconst(types::I64, start);
        let lp = self.open_loop(first, Bound::Imm(start + n));
        let prev = self.lanes[l].replace(lp.counter);
        self.stmts(body)?;
        self.lanes[l] = prev;
        self.close_loop(lp, 1);
        Ok(())
    }

    // --- SIMD feature loops ------------------------------------------------
}
