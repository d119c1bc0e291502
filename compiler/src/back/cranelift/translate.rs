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
//! Errors are plain messages: the caller wraps them as
//! [`super::BackError::Malformed`]. Input the scheduler produces never
//! triggers one; hand-built kernels may.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{self, types, BlockArg, InstBuilder, MemFlagsData, StackSlotData, StackSlotKind, Value};
use cranelift_codegen::isa::TargetFrontendConfig;
use cranelift_frontend::{FunctionBuilder, Variable};

use super::math::MathRefs;
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

/// Trusted (cannot trap, aligned) accesses: the ABI guarantees both.
/// The most vectors a feature loop is unrolled into when its accumulator is
/// kept in registers (16 × 128 bits = 64 f32 lanes).
const MAX_UNROLL: i64 = 16;

/// Vectors of lanes per pass over a row's edges under feature blocking
/// (see `Translator::blocking_plan`): 4 of the 16 xmm registers hold
/// accumulators, the rest the loads and temporaries (Cranelift loads a
/// pass's source vectors up front: with 8 accumulators a max kernel
/// spilled two of them every edge; F = 64 max forward 183 -> 165 ms,
/// backward 1362 -> 1089 ms); all 16 when the edge body only adds loaded
/// values into them (each add reads memory, no temporary), which at F = 64
/// makes one pass over the edges instead of two.
const BLOCK_VECTORS: i64 = 4;

/// How many edges ahead the edge loop touches the source rows it will
/// gather ([`Translator::touch_ahead`]). Measured on the power-law graph
/// (F = 64 f32 sum, Cranelift; ahead 0 / 8 / 16 / 32 edges): backward
/// (transposed graph, uniform sources) 292 / 185 / 179 / 157 ms, forward
/// (Zipf sources, mostly cached) 118 / 116 / 116 / 106-126 ms; F = 128
/// backward 804-1062 / 780 / 720 / 538 ms.
const TOUCH_AHEAD_EDGES: i64 = 32;

/// Edges per iteration of a short edge loop ([`Translator::unrolls_edges`]),
/// a power of two. One edge per iteration spent as many instructions on
/// the loop (counter, compare, branch, the edge's column address) as on the
/// edge; LLVM unrolls the ahead-of-time variant's loop by 4 the same way.
/// Measured side by side on the 2000×2000 stencil (`Smoothing`, 4 edges a
/// row, F = 1), two alternating rounds: Cranelift forward 13.3 and 13.5 ->
/// 8.4 and 8.5 ms, backward 16.3 and 18.8 -> 9.1 and 8.2 ms (hand-written
/// loop 9.8 to 10.9 ms, rustc's variant 7.7 to 8.5 ms).
const EDGE_UNROLL: i64 = 4;

/// The most statements an unrolled edge body may hold.
const EDGE_UNROLL_MAX_STMTS: usize = 8;

/// The widest feature loop (in bytes: one cache line) an unrolled edge
/// body may hold.
const EDGE_UNROLL_MAX_ROW_BYTES: i64 = 64;

/// Source rows narrower than this are not touched ahead: at F = 16 f32 (one
/// line per row) touching took the forward from 39 to 62 ms.
const TOUCH_AHEAD_MIN_ROW_BYTES: i64 = 256;
const BLOCK_VECTORS_ADD_ONLY: i64 = 16;
/// A weighted sum (`acc += w · x`) needs a temporary per vector: 8.
const BLOCK_VECTORS_WEIGHTED: i64 = 8;

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

/// A numeric operation that [`Translator::vector_inst`] has a lane-wise
/// form of, with the scalar path's exact semantics.
fn has_vector_form(inst: &Inst) -> bool {
    matches!(
        inst,
        Inst::Unary(UnOp::Neg | UnOp::Abs | UnOp::Sqrt | UnOp::Relu, _)
            | Inst::Binary(BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Min | BinOp::Max | BinOp::LeakyRelu, ..)
    )
}

fn flags() -> MemFlagsData {
    MemFlagsData::trusted()
}

/// A loop's end: a value, or a constant (a feature width).
#[derive(Clone, Copy)]
enum Bound {
    Value(Value),
    Imm(i64),
}

/// What the lanes of a SIMD vector run over: the lanes of a feature loop,
/// or consecutive destination rows (a generated stencil's interior, where
/// row `i + 1`'s neighbours are row `i`'s shifted by one).
#[derive(Clone, Copy)]
enum Axis {
    Lane(LoopVar),
    Rows,
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
    /// Scratch arrays kept in registers: one vector variable per chunk of
    /// lanes, when every access is in an unrollable SIMD loop (see
    /// [`Translator::promote_scratch`]).
    promoted: Vec<Option<Vec<Variable>>>,
    /// Feature blocking (see [`Translator::blocking_plan`]): the width
    /// symbol, its lane count and the block size, when the row's work runs
    /// once per block of lanes.
    blocking: Option<(WidthId, i64, i64)>,
    /// The block being emitted: its first lane.
    block_start: Option<i64>,
    /// Variables that are never NaN ([`crate::loops::never_nan`]): a `max`
    /// or `min` with such an operand is one compare and select.
    not_nan: Vec<bool>,
    /// The source fields touched ahead (field, width) and the chunk's end
    /// in the CSR (`off[row_end]`), when the edge loop touches ahead
    /// ([`Translator::touch_ahead`]).
    touch: Option<(Vec<(usize, i64)>, Value)>,
    /// Rows per vector in a generated stencil's interior, when vectorized
    /// across rows.
    row_vectors: Option<i64>,
    /// The edge body cut into a scalar part with calls and feature loops
    /// without ([`crate::loops::split_calls`]), run in edge tiles.
    split: Option<crate::loops::SplitBody>,
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
            blocking: None,
            block_start: None,
            not_nan: crate::loops::never_nan(k),
            row_vectors: None,
            touch: None,
            // A generated stencil's neighbours are not tiled.
            split: crate::loops::split_calls(k).filter(|_| key.stencil.is_none()),
            tile_slot: None,
            simd_loops: 0,
            scalar_loops: 0,
            cur: Cursor::default(),
        }
    }

    /// Build the whole function and finalize the builder. Returns what code
    /// generation chose (vector width, registers, feature blocks), for
    /// `explain`.
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
        for list in [&self.k.init, &self.k.pre_body, &self.k.body, &self.k.finish] {
            mark_used(list, &mut used_fields, &mut used_outputs)?;
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
        self.blocking = self.blocking_plan()?;
        self.promote_scratch()?;

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
        let touched = self.touched_fields();
        if self.key.stencil.is_none() && reads_src && !touched.is_empty() {
            let a = self.b.ins().ishl_imm_u(row_end, 3);
            let a = self.b.ins().iadd(offsets, a);
            let chunk_end = self.b.ins().load(types::I64, flags(), a, 0);
            self.touch = Some((touched, chunk_end));
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
            let next = match self.row_vector_lanes(st) {
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
        } else if let Some(vl) = self.row_only_lanes() {
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
            let blocks: Vec<Option<i64>> = match self.blocking {
                // A split body's blocks are passes over each tile instead.
                Some((_, w, bl)) if self.split.is_none() => (0..w / bl).map(|b| Some(b * bl)).collect(),
                _ => vec![None],
            };
            for start in blocks {
                self.block_start = start;
                // The edge loop is skipped when the body is empty (a kernel
                // whose rows need no edges, like an adjoint's row stage).
                self.row_pass(i, Some(deg), |t| {
                    if !k.pre_body.is_empty() {
                        t.csr_edges(first, end, cols, edge_ids, &k.pre_body)?;
                    }
                    if k.body.is_empty() {
                        Ok(())
                    } else {
                        t.csr_edges(first, end, cols, edge_ids, &k.body)
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
        self.stmts(&k.init)?;
        edges(self)?;
        self.cur.src = None;
        self.cur.edge = None;
        self.cur.rank = None;
        self.stmts(&k.finish)
    }

    fn notes(&self) -> Vec<String> {
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
            if let Some(vl) = self.row_vectors {
                notes.push(format!(
                    "interior rows: {vl} at a time as {vty} SIMD lanes (one unaligned load per neighbour), border rows scalar"
                ));
            }
        }
        if let (None, Some(vl)) = (&self.key.stencil, self.row_vectors) {
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
        if let Some((fields, _)) = &self.touch {
            notes.push(format!(
                "edge loop: touches the source rows {TOUCH_AHEAD_EDGES} edges ahead ({} field(s); one prefetch per 64-byte line)",
                fields.len()
            ));
            if !self.k.pre_body.is_empty() {
                notes.push(format!(
                    "pre-pass over the edges: touches {} source field(s) it reads {TOUCH_AHEAD_EDGES} edges ahead",
                    self.pre_touched_fields().len()
                ));
            }
        }
        if self.key.stencil.is_none() && self.row_vectors.is_none() {
            let k = self.k;
            // The main body of a split kernel runs in tiles, not `csr_edges`.
            let passes = [(&k.pre_body, "pre-pass", true), (&k.body, "edge loop", self.split.is_none())];
            for (list, what, plain) in passes {
                if plain && !list.is_empty() && self.unrolls_edges(list) {
                    notes.push(format!("{what}: {EDGE_UNROLL} edges per iteration (a short body, rows of at most {EDGE_UNROLL_MAX_ROW_BYTES} bytes; the first degree % {EDGE_UNROLL} edges one at a time)"));
                }
            }
        }
        for (b, p) in self.promoted.iter().enumerate() {
            if let Some(vars) = p {
                notes.push(format!("accumulator scratch{b}: in {} vector registers (not the stack)", vars.len()));
            }
        }
        if self.split.is_some() {
            let n = self.split.as_ref().map(|s| s.carried.len()).unwrap_or(0);
            notes.push(format!(
                "edge tiles: {} edges at a time, the scalar part (with its math calls) first, then the feature loops with none ({n} value(s) kept per edge)",
                crate::loops::EDGE_TILE
            ));
        }
        if let Some((_, n, bl)) = self.blocking {
            let touch = if self.touch.is_some() { "" } else { " (the first touches the source lines the later ones read)" };
            let over = if self.split.is_some() { "each tile's edges" } else { "each row's edges" };
            notes.push(format!("feature blocks: {bl} of {n} lanes, {} passes over {over}{touch}", n / bl));
        }
        notes
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
                self.b.ins().store(flags(), value, a, 0);
                Ok(())
            }
            Stmt::Loop { lane, width, body } => {
                let n = self.width(*width)?;
                let (start, len) = self.lane_range(*width, n);
                self.feature_loop(*lane, start, len, body)
            }
        }
    }

    /// `for lane in 0..n { body }` as a header-style loop (straight-line
    /// code when `n` is 0 or 1; SIMD when the body allows, see
    /// [`Translator::vector_loop`]).
    fn feature_loop(&mut self, lane: LoopVar, start: i64, n: i64, body: &[Stmt]) -> TResult<()> {
        let l = lane.0 as usize;
        if l >= self.lanes.len() {
            self.lanes.resize(l + 1, None);
        }
        if n == 0 {
            return Ok(());
        }
        if self.vector_loop(lane, start, n, body)? {
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

    /// Whether `a` steps with `lane` (unit stride), is invariant in it, or
    /// steps with a stride other than 1 (then the loop stays scalar).
    fn stride(a: &Addr, lane: LoopVar) -> Option<bool> {
        match a {
            Addr::Field { lanes, .. } => match lanes.iter().position(|l| *l == lane) {
                None => Some(false),
                Some(p) if p + 1 == lanes.len() => Some(true),
                Some(_) => None,
            },
            Addr::Scratch { lane: l, .. } => Some(*l == lane),
            Addr::Output { lane: l, .. } => Some(*l == Some(lane)),
            Addr::OutputMatrix { row, col, .. } => {
                if *row == lane {
                    None
                } else {
                    Some(*col == lane)
                }
            }
        }
    }

    /// [`Translator::stride`] along `axis`. Across rows, a scalar source or
    /// destination field and a destination output step by one element
    /// (the stencil's source of row `i + 1` is its source of row `i`, plus
    /// one); a scalar parameter is invariant; anything else has no vector
    /// form.
    fn axis_stride(&self, a: &Addr, axis: Axis) -> Option<bool> {
        match axis {
            Axis::Lane(lane) => Self::stride(a, lane),
            Axis::Rows => match a {
                Addr::Field { field, lanes } if lanes.is_empty() => match self.k.fields.get(field.0 as usize)?.role {
                    Role::Src | Role::Dst => Some(true),
                    Role::Param => Some(false),
                    Role::Edge => None,
                },
                Addr::Output { out, lane: None } => (self.k.outputs.get(*out as usize)?.role == Role::Dst).then_some(true),
                _ => None,
            },
        }
    }

    /// Scalar accumulators of a loop body: `acc = acc + x`, the only
    /// statement touching `acc` in the body. The SIMD path keeps a vector of
    /// partial sums and adds them up after the loop (a different summation
    /// order than the scalar loop: equal up to rounding).
    fn reductions(body: &[Stmt]) -> std::collections::HashSet<u32> {
        let mut out = std::collections::HashSet::new();
        for st in body {
            if let Stmt::Set(acc, Inst::Binary(BinOp::Add, a, x)) = st {
                if a == acc && x != acc {
                    let touches = body
                        .iter()
                        .filter(|o| match o {
                            Stmt::Set(v, i) => v == acc || inst_reads(i, *acc),
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

    /// A body the SIMD path can take: straight-line numeric code whose
    /// loop-carried values are only memory (no scalar accumulators), with
    /// unit-stride or invariant addresses and operations that have vector
    /// forms with the scalar path's exact semantics.
    fn vectorizable(&self, lane: LoopVar, body: &[Stmt]) -> bool {
        let mut defined: std::collections::HashSet<u32> = std::collections::HashSet::new();
        let assigned: std::collections::HashSet<u32> = body
            .iter()
            .filter_map(|s| match s {
                Stmt::Set(v, _) => Some(v.0),
                _ => None,
            })
            .collect();
        // A value read here must be loop-local (defined earlier in this
        // iteration) or loop-invariant (never assigned in the loop).
        let readable = |v: &Var, defined: &std::collections::HashSet<u32>| defined.contains(&v.0) || !assigned.contains(&v.0);
        let num = |v: &Var| self.k.vars.get(v.0 as usize) == Some(&VarKind::Num);
        let reductions = Self::reductions(body);
        for st in body {
            match st {
                Stmt::Set(acc, Inst::Binary(BinOp::Add, a, x)) if reductions.contains(&acc.0) && a == acc => {
                    if !readable(x, &defined) || !num(x) {
                        return false;
                    }
                }
                Stmt::Loop { .. } => return false,
                Stmt::Store(a, v) => {
                    if Self::stride(a, lane).is_none() || !readable(v, &defined) || !num(v) {
                        return false;
                    }
                }
                Stmt::Set(v, inst) => {
                    // Booleans inside the loop are lane masks: comparisons
                    // and their logic.
                    if !num(v) {
                        let ok = match inst {
                            Inst::Cmp(_, x, y) => readable(x, &defined) && readable(y, &defined) && num(x) && num(y),
                            Inst::Unary(UnOp::Not, x) => defined.contains(&x.0),
                            Inst::Binary(BinOp::And | BinOp::Or, x, y) => defined.contains(&x.0) && defined.contains(&y.0),
                            _ => false,
                        };
                        if !ok {
                            return false;
                        }
                        defined.insert(v.0);
                        continue;
                    }
                    let ok = match inst {
                        Inst::Const(_) | Inst::Degree | Inst::Rank => true,
                        Inst::Load(a) => Self::stride(a, lane).is_some(),
                        Inst::Copy(x) => readable(x, &defined) && num(x),
                        Inst::Unary(_, x) => has_vector_form(inst) && readable(x, &defined),
                        Inst::Binary(_, x, y) => has_vector_form(inst) && readable(x, &defined) && readable(y, &defined),
                        // A loop-invariant boolean selects whole vectors; a mask
                        // made in the loop selects lane by lane.
                        Inst::Select(c, x, y) => {
                            (!assigned.contains(&c.0) || defined.contains(&c.0)) && readable(x, &defined) && readable(y, &defined)
                        }
                        Inst::Powi(..) | Inst::Cmp(..) => false,
                    };
                    if !ok {
                        return false;
                    }
                    defined.insert(v.0);
                }
            }
        }
        true
    }

    /// Vector length for the dtype.
    fn vlen(&self) -> (ir::Type, i64) {
        match self.key.dtype {
            DType::F32 => (types::F32X4, 4),
            DType::F64 => (types::F64X2, 2),
        }
    }

    /// The lanes a feature loop of `width` (`n` lanes) covers in the code
    /// being emitted: its block under feature blocking, else all of them.
    fn lane_range(&self, width: WidthId, n: i64) -> (i64, i64) {
        match (self.blocking, self.block_start) {
            (Some((w, _, bl)), Some(start)) if w == width => (start, bl),
            _ => (0, n),
        }
    }

    /// Lanes of `width` handled per pass over a row's edges.
    fn lanes_per_pass(&self, width: WidthId) -> TResult<i64> {
        match self.blocking {
            Some((w, _, bl)) if w == width && self.split.is_none() => Ok(bl),
            _ => self.width(width),
        }
    }

    /// Whether the edge body is feature loops that only load and add into
    /// scratch accumulators (a sum aggregation): its SIMD code needs no
    /// vector register besides the accumulators.
    fn edges_only_add(&self) -> bool {
        self.edges_are(false)
    }

    /// Whether the edge body is a weighted sum: scalar loads, and feature
    /// loops that only load, multiply and add into scratch accumulators
    /// (a mean's or a normalized sum's backward): one temporary per vector.
    fn edges_weighted_sum(&self) -> bool {
        self.edges_are(true)
    }

    fn edges_are(&self, weighted: bool) -> bool {
        let lane_op = |b: &Stmt| {
            matches!(
                b,
                Stmt::Set(_, Inst::Load(Addr::Field { .. } | Addr::Scratch { .. }) | Inst::Binary(BinOp::Add, ..))
                    | Stmt::Store(Addr::Scratch { .. }, _)
            ) || (weighted && matches!(b, Stmt::Set(_, Inst::Binary(BinOp::Mul, ..))))
        };
        // A split body's blocks run its loops alone (the carried weights
        // are loaded like a scalar field).
        if let Some(split) = &self.split {
            return weighted && split.loops.iter().all(|st| matches!(st, Stmt::Loop { body, .. } if body.iter().all(lane_op)));
        }
        self.k.body.iter().all(|st| match st {
            Stmt::Loop { body, .. } => body.iter().all(lane_op),
            Stmt::Set(_, Inst::Load(Addr::Field { lanes, .. })) => weighted && lanes.is_empty(),
            _ => false,
        })
    }

    /// Feature blocking: when a row's accumulators would need more vector
    /// registers than x64 has (16 xmm; past about 8 vectors of accumulators
    /// the temporaries spill), the row's init, edge loop and finish run once
    /// per block of [`BLOCK_VECTORS`] (or [`BLOCK_VECTORS_ADD_ONLY`]) vectors of lanes, each pass re-reading
    /// the row's (cached) columns. Only for kernels whose lanes are
    /// independent: every feature loop has the same width symbol, none sits
    /// in another or reduces across lanes, scratch arrays have that width,
    /// and no store outside a feature loop accumulates (a parameter output),
    /// so that running scalar statements once per block changes nothing.
    /// Measured (F = 64 / 128 f32 sum, power-law graph): 227 -> 185 ms and
    /// 645 -> 372 ms.
    fn blocking_plan(&self) -> TResult<Option<(WidthId, i64, i64)>> {
        // A pre-pass would be redone per block (unless the blocks are
        // those of a split body's tiles, which run its loops alone).
        if self.key.stencil.is_some() || (!self.k.pre_body.is_empty() && self.split.is_none()) {
            return Ok(None);
        }
        let (_, vl) = self.vlen();
        let block = vl
            * if self.edges_only_add() {
                BLOCK_VECTORS_ADD_ONLY
            } else if self.edges_weighted_sum() {
                BLOCK_VECTORS_WEIGHTED
            } else {
                BLOCK_VECTORS
            };
        let mut width: Option<WidthId> = None;
        for list in [&self.k.init, &self.k.pre_body, &self.k.body, &self.k.finish] {
            for st in list.iter() {
                match st {
                    Stmt::Loop { lane, width: w, body } => {
                        if width.is_some_and(|x| x != *w)
                            || body.iter().any(|b| matches!(b, Stmt::Loop { .. }))
                            || !Self::reductions(body).is_empty()
                            || !self.vectorizable(*lane, body)
                        {
                            return Ok(None);
                        }
                        width = Some(*w);
                    }
                    Stmt::Store(Addr::Output { out, lane: None }, _) => {
                        let role = self.k.outputs.get(*out as usize).map(|o| o.role);
                        if role == Some(Role::Param) {
                            return Ok(None);
                        }
                    }
                    // Per-edge scalar work that is dear (an attention score's
                    // exp) would be redone in every block.
                    Stmt::Set(
                        _,
                        Inst::Unary(UnOp::Exp | UnOp::Ln | UnOp::Tanh | UnOp::Sigmoid | UnOp::Sqrt, _) | Inst::Powi(..),
                    ) if std::ptr::eq(list, &self.k.body) && self.split.is_none() => {
                        return Ok(None);
                    }
                    Stmt::Store(..) | Stmt::Set(..) => {}
                }
            }
        }
        let Some(w) = width else { return Ok(None) };
        let n = self.width(w)?;
        if n <= block || n % block != 0 || self.k.scratch.iter().any(|s| *s != w) {
            return Ok(None);
        }
        Ok(Some((w, n, block)))
    }

    /// Keep a scratch array (an accumulator) in vector registers instead of
    /// the stack when every access to it sits in a SIMD loop short enough to
    /// unroll (at most [`MAX_UNROLL`] vectors) and indexes it by that loop's
    /// own lane. The edge loop then updates registers, not memory.
    fn promote_scratch(&mut self) -> TResult<()> {
        let (vty, vl) = self.vlen();
        let n = self.k.scratch.len();
        let mut ok: Vec<bool> = self
            .k
            .scratch
            .iter()
            .map(|w| self.lanes_per_pass(*w).map(|w| w >= vl && w % vl == 0 && w / vl <= MAX_UNROLL).unwrap_or(false))
            .collect();
        fn walk(t: &Translator<'_>, list: &[Stmt], ok: &mut [bool], vl: i64) {
            for st in list {
                if let Stmt::Loop { lane, width, body } = st {
                    let w = t.lanes_per_pass(*width).unwrap_or(0);
                    let unrollable = w >= vl && w % vl == 0 && w / vl <= MAX_UNROLL && t.vectorizable(*lane, body);
                    for inner in body {
                        let addrs: Vec<&Addr> = match inner {
                            Stmt::Set(_, Inst::Load(a)) => vec![a],
                            Stmt::Store(a, _) => vec![a],
                            _ => vec![],
                        };
                        for a in addrs {
                            if let Addr::Scratch { buf, lane: l } = a {
                                if !unrollable || l != lane {
                                    if let Some(x) = ok.get_mut(*buf as usize) {
                                        *x = false;
                                    }
                                }
                            }
                        }
                    }
                    walk(t, body, ok, vl);
                }
            }
        }
        for list in [&self.k.init, &self.k.pre_body, &self.k.body, &self.k.finish] {
            walk(self, list, &mut ok, vl);
        }
        self.promoted = vec![None; n];
        for (b, promote) in ok.into_iter().enumerate() {
            if !promote {
                continue;
            }
            let w = self.lanes_per_pass(self.k.scratch[b])?;
            let vars: Vec<Variable> = (0..w / vl)
                .map(|_| {
                    let v = self.b.declare_var(vty);
                    let z = self.fconst(0.0);
                    let zv = self.b.ins().splat(vty, z);
                    self.b.def_var(v, zv);
                    v
                })
                .collect();
            self.promoted[b] = Some(vars);
        }
        Ok(())
    }

    /// The promoted variable of a scratch access at vector chunk `c`.
    fn promoted_var(&self, a: &Addr, c: Option<usize>) -> Option<Variable> {
        match (a, c) {
            (Addr::Scratch { buf, .. }, Some(c)) => self.promoted.get(*buf as usize)?.as_ref()?.get(c).copied(),
            _ => None,
        }
    }

    /// The loop as SIMD code (`f32x4`/`f64x2`, 128-bit like every x64
    /// Cranelift vector) when [`Translator::vectorizable`] holds and the
    /// width is a multiple of the vector length. Returns whether it did.
    fn vector_loop(&mut self, lane: LoopVar, start: i64, n: i64, body: &[Stmt]) -> TResult<bool> {
        let (vty, vl) = match self.key.dtype {
            DType::F32 => (types::F32X4, 4i64),
            DType::F64 => (types::F64X2, 2i64),
        };
        if n < vl || n % vl != 0 || !self.vectorizable(lane, body) {
            return Ok(false);
        }
        let l = lane.0 as usize;
        let touches_promoted = body.iter().any(|st| match st {
            Stmt::Set(_, Inst::Load(Addr::Scratch { buf, .. })) | Stmt::Store(Addr::Scratch { buf, .. }, _) => {
                self.promoted.get(*buf as usize).is_some_and(|p| p.is_some())
            }
            _ => false,
        });
        // Vector partial sums of the loop's scalar accumulators.
        let mut partial: Vec<(Var, Variable)> = Vec::new();
        let mut red: Vec<u32> = Self::reductions(body).into_iter().collect();
        red.sort_unstable();
        for acc in red {
            let pv = self.b.declare_var(vty);
            let z = self.fconst(0.0);
            let zv = self.b.ins().splat(vty, z);
            self.b.def_var(pv, zv);
            partial.push((Var(acc), pv));
        }
        let vflags = MemFlagsData::new().with_notrap();
        let little = MemFlagsData::new().with_endianness(ir::Endianness::Little);
        // Fully unrolled (constant lanes) when an accumulator lives in
        // registers; otherwise a counted loop.
        // Promoted registers cover a pass's lanes: a block's under row
        // blocking (reused by every block), all of them under a split
        // body's tile blocks (a block uses its own).
        let base = if self.split.is_some() { (start / vl) as usize } else { 0 };
        let chunks: Vec<Option<usize>> =
            if touches_promoted { (base..base + (n / vl) as usize).map(Some).collect() } else { vec![None] };
        let mut loop_blocks = None;
        if !touches_promoted {
            let first = self.b.ins().iconst(types::I64, start);
            loop_blocks = Some(self.open_loop(first, Bound::Imm(start + n)));
        }
        let prev = self.lanes[l];
        for chunk in chunks {
            let k = match (chunk, &loop_blocks) {
                (Some(c), _) => self.b.ins().iconst(types::I64, start + (c - base) as i64 * vl),
                (None, Some(lp)) => lp.counter,
                (None, None) => return Err("internal: no loop counter".into()),
            };
            self.lanes[l] = Some(k);
            // Loop-local values live in SSA here: each assignment defines the
            // vector value of its variable for the rest of the iteration.
            let mut local: std::collections::HashMap<u32, Value> = std::collections::HashMap::new();
            for st in body {
                match st {
                    Stmt::Set(v, Inst::Load(a)) if self.promoted_var(a, chunk).is_some() => {
                        let pv = self.promoted_var(a, chunk).ok_or("promoted scratch")?;
                        let val = self.b.use_var(pv);
                        local.insert(v.0, val);
                    }
                    Stmt::Store(a, v) if self.promoted_var(a, chunk).is_some() => {
                        let pv = self.promoted_var(a, chunk).ok_or("promoted scratch")?;
                        let val = self.vector_operand(*v, vty, &local)?;
                        self.b.def_var(pv, val);
                    }
                    Stmt::Set(acc, Inst::Binary(BinOp::Add, _, x)) if partial.iter().any(|(a, _)| a == acc) => {
                        let pv = partial.iter().find(|(a, _)| a == acc).map(|(_, p)| *p).ok_or("accumulator")?;
                        let xv = self.vector_operand(*x, vty, &local)?;
                        let cur = self.b.use_var(pv);
                        let sum = self.b.ins().fadd(cur, xv);
                        self.b.def_var(pv, sum);
                    }
                    Stmt::Set(v, inst) => {
                        let val = self.vector_inst(inst, Axis::Lane(lane), vty, vflags, little, &local)?;
                        local.insert(v.0, val);
                    }
                    Stmt::Store(a, v) => {
                        let val = self.vector_operand(*v, vty, &local)?;
                        let addr = self.addr(a)?;
                        match Self::stride(a, lane) {
                            Some(true) => {
                                self.b.ins().store(vflags, val, addr, 0);
                            }
                            _ => {
                                // An invariant address: every lane stores the same
                                // value; the last store wins, as in the scalar loop.
                                let x = self.b.ins().extractlane(val, (vl - 1) as u8);
                                self.b.ins().store(flags(), x, addr, 0);
                            }
                        }
                    }
                    Stmt::Loop { .. } => return Err("nested loop in a SIMD feature loop".into()),
                }
            }
        }
        self.lanes[l] = prev;
        if let Some(lp) = loop_blocks {
            self.close_loop(lp, vl);
        }
        // acc += the partial sums, lane by lane.
        for (acc, pv) in partial {
            let v = self.b.use_var(pv);
            let mut total = self.num_var(acc)?;
            for lane_ix in 0..vl {
                let x = self.b.ins().extractlane(v, lane_ix as u8);
                total = self.b.ins().fadd(total, x);
            }
            let var = self.var(acc)?;
            self.b.def_var(var, total);
        }
        Ok(true)
    }

    fn vector_operand(&mut self, v: Var, vty: ir::Type, local: &std::collections::HashMap<u32, Value>) -> TResult<Value> {
        match local.get(&v.0) {
            Some(x) => Ok(*x),
            None => {
                let x = self.num_var(v)?;
                Ok(self.b.ins().splat(vty, x))
            }
        }
    }

    fn vector_inst(
        &mut self,
        inst: &Inst,
        axis: Axis,
        vty: ir::Type,
        vflags: MemFlagsData,
        little: MemFlagsData,
        local: &std::collections::HashMap<u32, Value>,
    ) -> TResult<Value> {
        let op = |t: &mut Self, v: &Var| t.vector_operand(*v, vty, local);
        // fcmp yields an integer lane mask; bitselect wants the value's type.
        let mask = |t: &mut Self, cc: FloatCC, x: Value, y: Value| {
            let m = fcmp(&mut t.b, cc, x, y);
            t.b.ins().bitcast(vty, little, m)
        };
        Ok(match inst {
            Inst::Unary(UnOp::Not, x) => {
                let m = *local.get(&x.0).ok_or("mask operand")?;
                self.b.ins().bnot(m)
            }
            Inst::Binary(BinOp::And, x, y) | Inst::Binary(BinOp::Or, x, y) => {
                let a = *local.get(&x.0).ok_or("mask operand")?;
                let b2 = *local.get(&y.0).ok_or("mask operand")?;
                if matches!(inst, Inst::Binary(BinOp::And, ..)) {
                    self.b.ins().band(a, b2)
                } else {
                    self.b.ins().bor(a, b2)
                }
            }
            Inst::Const(c) => {
                let x = self.fconst(*c);
                self.b.ins().splat(vty, x)
            }
            Inst::Degree | Inst::Rank => {
                let x = self.inst(inst, VarKind::Num)?;
                self.b.ins().splat(vty, x)
            }
            Inst::Load(a) => {
                let addr = self.addr(a)?;
                if self.axis_stride(a, axis) == Some(true) {
                    self.b.ins().load(vty, vflags, addr, 0)
                } else {
                    let x = self.b.ins().load(self.num, flags(), addr, 0);
                    self.b.ins().splat(vty, x)
                }
            }
            Inst::Copy(x) => op(self, x)?,
            Inst::Unary(u, x) => {
                let x = op(self, x)?;
                match u {
                    UnOp::Neg => self.b.ins().fneg(x),
                    UnOp::Abs => self.b.ins().fabs(x),
                    UnOp::Sqrt => self.b.ins().sqrt(x),
                    UnOp::Relu => {
                        let z = self.fconst(0.0);
                        let zero = self.b.ins().splat(vty, z);
                        let pos = mask(self, FloatCC::GreaterThan, x, zero);
                        self.b.ins().bitselect(pos, x, zero)
                    }
                    _ => return Err("no vector form".into()),
                }
            }
            Inst::Binary(o, xv, yv) => {
                let (x, y) = (op(self, xv)?, op(self, yv)?);
                match o {
                    BinOp::Add => self.b.ins().fadd(x, y),
                    BinOp::Sub => self.b.ins().fsub(x, y),
                    BinOp::Mul => self.b.ins().fmul(x, y),
                    BinOp::Div => self.b.ins().fdiv(x, y),
                    BinOp::Min | BinOp::Max => {
                        // As the scalar path: x if (x < y) (resp. >), else y;
                        // and x when y is NaN. One compare and select when
                        // an operand is never NaN.
                        let cc = if *o == BinOp::Min { FloatCC::LessThan } else { FloatCC::GreaterThan };
                        if self.never_nan(*xv) {
                            let take_y = mask(self, cc, y, x);
                            self.b.ins().bitselect(take_y, y, x)
                        } else {
                            let take_x = mask(self, cc, x, y);
                            let r = self.b.ins().bitselect(take_x, x, y);
                            if self.never_nan(*yv) {
                                r
                            } else {
                                let y_nan = mask(self, FloatCC::Unordered, y, y);
                                self.b.ins().bitselect(y_nan, x, r)
                            }
                        }
                    }
                    BinOp::LeakyRelu => {
                        let z = self.fconst(0.0);
                        let zero = self.b.ins().splat(vty, z);
                        let pos = mask(self, FloatCC::GreaterThan, x, zero);
                        let scaled = self.b.ins().fmul(y, x);
                        self.b.ins().bitselect(pos, x, scaled)
                    }
                    _ => return Err("no vector form".into()),
                }
            }
            Inst::Select(c, x, y) => {
                let (xv, yv) = (op(self, x)?, op(self, y)?);
                match local.get(&c.0) {
                    // A lane mask (all-ones / all-zeros bits per lane).
                    Some(m) => self.b.ins().bitselect(*m, xv, yv),
                    None => {
                        let c = self.bool_var(*c)?;
                        self.b.ins().select(c, xv, yv)
                    }
                }
            }
            Inst::Cmp(c, x, y) => {
                let (x, y) = (op(self, x)?, op(self, y)?);
                mask(self, float_cc(*c), x, y)
            }
            Inst::Powi(..) => return Err("no vector form".into()),
        })
    }

    fn inst(&mut self, inst: &Inst, kind: VarKind) -> TResult<Value> {
        use VarKind::{Bool, Num};
        let want = |k: VarKind, what: &str| -> TResult<()> {
            if k == kind {
                Ok(())
            } else {
                Err(format!("{what} assigned to a {kind:?} variable"))
            }
        };
        Ok(match inst {
            Inst::Const(c) => match kind {
                Num => self.fconst(*c),
                Bool => self.b.ins().iconst(types::I8, i64::from(*c != 0.0)),
            },
            Inst::Load(a) => {
                want(Num, "a load")?;
                let a = self.addr(a)?;
                self.b.ins().load(self.num, flags(), a, 0)
            }
            Inst::Copy(v) => {
                want(self.kind(*v)?, "a copy")?;
                self.use_var(*v)?
            }
            Inst::Degree => {
                want(Num, "the degree")?;
                let deg = self.cur.deg.ok_or("degree outside a row")?;
                self.b.ins().fcvt_from_uint(self.num, deg)
            }
            Inst::Rank => {
                want(Num, "the rank")?;
                let (p, first) = self.cur.rank.ok_or("rank outside the edge loop")?;
                let rank = self.b.ins().isub(p, first);
                self.b.ins().fcvt_from_uint(self.num, rank)
            }
            Inst::Unary(UnOp::Not, v) => {
                let vk = self.kind(*v)?;
                want(vk, "not")?;
                let x = self.use_var(*v)?;
                match vk {
                    Bool => self.b.ins().icmp_imm_u(IntCC::Equal, x, 0),
                    // `not` of a number is the number (interp::apply_unary).
                    Num => x,
                }
            }
            Inst::Unary(u, v) => {
                want(Num, "a unary operation")?;
                let x = self.num_var(*v)?;
                self.unary(*u, x)?
            }
            Inst::Binary(op @ (BinOp::And | BinOp::Or), x, y) => {
                want(Bool, "and/or")?;
                let (x, y) = (self.bool_var(*x)?, self.bool_var(*y)?);
                if *op == BinOp::And {
                    self.b.ins().band(x, y)
                } else {
                    self.b.ins().bor(x, y)
                }
            }
            Inst::Binary(op @ (BinOp::Min | BinOp::Max), xv, yv) => {
                want(Num, "a binary operation")?;
                let (x, y) = (self.num_var(*xv)?, self.num_var(*yv)?);
                let cc = if *op == BinOp::Min { FloatCC::LessThan } else { FloatCC::GreaterThan };
                match (self.never_nan(*xv), self.never_nan(*yv)) {
                    // The never-NaN operand is kept when the compare fails
                    // (NaN compares false), as Rust's max/min keep it.
                    (true, _) => {
                        let take_y = fcmp(&mut self.b, cc, y, x);
                        self.b.ins().select(take_y, y, x)
                    }
                    (false, true) => {
                        let take_x = fcmp(&mut self.b, cc, x, y);
                        self.b.ins().select(take_x, x, y)
                    }
                    (false, false) => self.binary(*op, x, y),
                }
            }
            Inst::Binary(op, x, y) => {
                want(Num, "a binary operation")?;
                let (x, y) = (self.num_var(*x)?, self.num_var(*y)?);
                self.binary(*op, x, y)
            }
            Inst::Powi(v, n) => {
                want(Num, "powi")?;
                let x = self.num_var(*v)?;
                self.powi(x, *n)
            }
            Inst::Cmp(c, x, y) => {
                want(Bool, "a comparison")?;
                let (x, y) = (self.num_var(*x)?, self.num_var(*y)?);
                fcmp(&mut self.b, float_cc(*c), x, y)
            }
            Inst::Select(c, x, y) => {
                want(self.kind(*x)?, "a select")?;
                want(self.kind(*y)?, "a select")?;
                let c = self.bool_var(*c)?;
                let (x, y) = (self.use_var(*x)?, self.use_var(*y)?);
                self.b.ins().select(c, x, y)
            }
        })
    }

    fn unary(&mut self, u: UnOp, x: Value) -> TResult<Value> {
        let call = |t: &mut Self, f: Option<ir::FuncRef>, x: Value| -> TResult<Value> {
            let f = f.ok_or("math function not declared")?;
            let inst = t.b.ins().call(f, &[x]);
            t.b.inst_results(inst).first().copied().ok_or_else(|| "math call has no result".into())
        };
        let math = self.math;
        Ok(match u {
            UnOp::Neg => self.b.ins().fneg(x),
            UnOp::Abs => self.b.ins().fabs(x),
            UnOp::Sqrt => self.b.ins().sqrt(x),
            UnOp::Exp => call(self, math.exp, x)?,
            UnOp::Ln => call(self, math.ln, x)?,
            UnOp::Tanh => call(self, math.tanh, x)?,
            UnOp::Sigmoid => {
                // 1 / (1 + exp(-x)), in interp's order.
                let n = self.b.ins().fneg(x);
                let e = call(self, math.exp, n)?;
                let one = self.fconst(1.0);
                let d = self.b.ins().fadd(one, e);
                self.b.ins().fdiv(one, d)
            }
            UnOp::Relu => {
                // x if x > 0 else 0 (so NaN and -0 give +0).
                let zero = self.fconst(0.0);
                let pos = fcmp(&mut self.b, FloatCC::GreaterThan, x, zero);
                self.b.ins().select(pos, x, zero)
            }
            UnOp::Not => x,
        })
    }

    fn binary(&mut self, op: BinOp, x: Value, y: Value) -> Value {
        match op {
            BinOp::Add => self.b.ins().fadd(x, y),
            BinOp::Sub => self.b.ins().fsub(x, y),
            BinOp::Mul => self.b.ins().fmul(x, y),
            BinOp::Div => self.b.ins().fdiv(x, y),
            // Rust's f64::min/max: the ordinary comparison, and a NaN
            // operand yields the other one.
            BinOp::Min => self.min_max(FloatCC::LessThan, x, y),
            BinOp::Max => self.min_max(FloatCC::GreaterThan, x, y),
            BinOp::LeakyRelu => {
                // x if x > 0 else slope * x.
                let zero = self.fconst(0.0);
                let pos = fcmp(&mut self.b, FloatCC::GreaterThan, x, zero);
                let scaled = self.b.ins().fmul(y, x);
                self.b.ins().select(pos, x, scaled)
            }
            // Booleans are handled by the caller.
            BinOp::And | BinOp::Or => x,
        }
    }

    /// `if x cc y { x } else { y }`, then `x` when `y` is NaN.
    fn min_max(&mut self, cc: FloatCC, x: Value, y: Value) -> Value {
        let take_x = fcmp(&mut self.b, cc, x, y);
        let r = self.b.ins().select(take_x, x, y);
        let y_nan = self.b.ins().fcmp(FloatCC::Unordered, y, y);
        self.b.ins().select(y_nan, x, r)
    }

    /// `x.powi(n)` as compiler-rt's `__powidf2` computes it: square and
    /// multiply over the bits of |n|, then the reciprocal for negative n.
    fn powi(&mut self, x: Value, n: i32) -> Value {
        let mut bits = n.unsigned_abs();
        let mut a = x;
        let mut r: Option<Value> = None;
        loop {
            if bits & 1 == 1 {
                r = Some(match r {
                    None => a,
                    Some(r) => self.b.ins().fmul(r, a),
                });
            }
            bits >>= 1;
            if bits == 0 {
                break;
            }
            a = self.b.ins().fmul(a, a);
        }
        let r = match r {
            Some(r) => r,
            None => self.fconst(1.0),
        };
        if n < 0 {
            let one = self.fconst(1.0);
            self.b.ins().fdiv(one, r)
        } else {
            r
        }
    }

    fn fconst(&mut self, c: f64) -> Value {
        match self.key.dtype {
            DType::F32 => self.b.ins().f32const(c as f32),
            DType::F64 => self.b.ins().f64const(c),
        }
    }

    /// Open `for counter in start..end` as a header-style loop (the shape
    /// that lets Cranelift fold loads into arithmetic and keep accumulators
    /// in registers): jump to a header taking the counter as a block
    /// parameter, branch to the body or the exit, and leave the builder in
    /// the body.
    fn open_loop(&mut self, start: Value, end: Bound) -> OpenLoop {
        let header = self.b.create_block();
        let body = self.b.create_block();
        let exit = self.b.create_block();
        let counter = self.b.append_block_param(header, types::I64);
        self.b.ins().jump(header, &[BlockArg::Value(start)]);
        self.b.switch_to_block(header);
        let more = match end {
            Bound::Value(v) => self.b.ins().icmp(IntCC::UnsignedLessThan, counter, v),
            Bound::Imm(n) => self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, counter, n),
        };
        self.b.ins().brif(more, body, &[], exit, &[]);
        self.b.seal_block(body);
        self.b.seal_block(exit);
        self.b.switch_to_block(body);
        OpenLoop { header, exit, counter }
    }

    /// Step the counter, jump back to the header and continue after the loop.
    fn close_loop(&mut self, l: OpenLoop, step: i64) {
        let next = self.b.ins().iadd_imm_s(l.counter, step);
        self.close_loop_at(l, next);
    }

    /// Jump back to the header with the counter's next value `next` and
    /// continue after the loop.
    fn close_loop_at(&mut self, l: OpenLoop, next: Value) {
        self.b.ins().jump(l.header, &[BlockArg::Value(next)]);
        self.b.seal_block(l.header);
        self.b.switch_to_block(l.exit);
    }

    /// The CSR edge loop of one row: `for p in first..end`, with `j` and
    /// `e` loaded for `list` (the body, or the pre-pass, which touches
    /// ahead the source fields it reads when the body touches its rows:
    /// it is the first to gather them).
    fn csr_edges(
        &mut self,
        first: Value,
        end: Value,
        cols: Option<Value>,
        edge_ids: Option<Value>,
        list: &[Stmt],
    ) -> TResult<()> {
        let main = std::ptr::eq(list, self.k.body.as_slice());
        if main && self.split.is_some() {
            return self.tiled_edges(first, end, cols, edge_ids);
        }
        let touch = if main { Touch::Main } else { Touch::Pre };
        let unroll = if self.unrolls_edges(list) { EDGE_UNROLL } else { 1 };
        let mut start = first;
        if unroll > 1 {
            // The first `degree % unroll` edges one at a time, the rest
            // `unroll` per iteration: the edges in order, as LLVM unrolls
            // the ahead-of-time variant's loop.
            let n = self.b.ins().isub(end, first);
            let rest = self.b.ins().band_imm_s(n, unroll - 1);
            start = self.b.ins().iadd(first, rest);
            let edge = self.open_loop(first, Bound::Value(start));
            self.edge_cursor(edge.counter, first, cols, edge_ids, touch)?;
            self.stmts(list)?;
            self.close_loop(edge, 1);
        }
        let edge = self.open_loop(start, Bound::Value(end));
        for k in 0..unroll {
            let p = if k == 0 { edge.counter } else { self.b.ins().iadd_imm_s(edge.counter, k) };
            self.edge_cursor(p, first, cols, edge_ids, touch)?;
            self.stmts(list)?;
        }
        self.close_loop(edge, unroll);
        Ok(())
    }

    /// Whether an edge loop over `list` runs [`EDGE_UNROLL`] edges per
    /// iteration: a body of a few statements whose feature loops are at
    /// most a cache line wide ([`EDGE_UNROLL_MAX_ROW_BYTES`]) and call no
    /// math function, with no rows touched ahead and no feature blocking,
    /// where the loop's own compare, branch and counter are a large part
    /// of each edge's instructions. F = 16 f32 sum on the power-law graph,
    /// Cranelift over rustc's variant in the same run: forward 1.46 ->
    /// 1.32, backward 1.45 -> 1.16.
    fn unrolls_edges(&self, list: &[Stmt]) -> bool {
        let size = self.key.dtype.size() as i64;
        let narrow = |st: &Stmt| match st {
            Stmt::Loop { width, body, .. } => {
                self.width(*width).is_ok_and(|n| n * size <= EDGE_UNROLL_MAX_ROW_BYTES)
                    && body.iter().all(|b| !matches!(b, Stmt::Loop { .. }))
            }
            _ => true,
        };
        self.touch.is_none()
            && self.blocking.is_none()
            && list.len() <= EDGE_UNROLL_MAX_STMTS
            && list.iter().all(narrow)
            && !crate::loops::calls_math(list)
    }

    /// The main edge loop of a split body ([`crate::loops::split_calls`]):
    /// per tile of [`crate::loops::EDGE_TILE`] edges, the scalar part for
    /// each edge (its carried values stored in a stack buffer), then the
    /// feature loops for each edge with no call among them, so promoted
    /// accumulators stay in registers (GatAttention's weights: one `exp`
    /// call per edge, which clobbers every vector register).
    fn tiled_edges(&mut self, first: Value, end: Value, cols: Option<Value>, edge_ids: Option<Value>) -> TResult<()> {
        let split = self.split.clone().ok_or("internal: no split body")?;
        let tile = crate::loops::EDGE_TILE as i64;
        let size = 1i64 << self.shift;
        let n = split.carried.len() as i64;
        let slot = match self.tile_slot {
            Some(s) => s,
            None => {
                let bytes = u32::try_from((tile * n * size).max(size)).map_err(|_| "tile buffer too large")?;
                let s = self.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, bytes, 4));
                self.tile_slot = Some(s);
                s
            }
        };
        let outer = self.open_loop(first, Bound::Value(end));
        let p0 = outer.counter;
        let p0t = self.b.ins().iadd_imm_s(p0, tile);
        let p1 = self.b.ins().umin(p0t, end);
        let base = self.b.ins().stack_addr(types::I64, slot, 0);
        let at = |t: &mut Self, p: Value| {
            let k = t.b.ins().isub(p, p0);
            let k = t.b.ins().imul_imm_s(k, n * size);
            t.b.ins().iadd(base, k)
        };
        // The scalar part, keeping the carried values.
        let l1 = self.open_loop(p0, Bound::Value(p1));
        self.edge_cursor(l1.counter, first, cols, edge_ids, Touch::Nothing)?;
        let run = self.stmts(&split.scalar).and_then(|_| {
            let a = at(self, l1.counter);
            for (c, v) in split.carried.iter().enumerate() {
                let x = self.use_var(*v)?;
                self.b.ins().store(flags(), x, a, c as i32 * size as i32);
            }
            Ok(())
        });
        self.close_loop(l1, 1);
        // The loops, reading them back: once per feature block (each pass
        // over the tile's edges updates its block's registers), or once.
        let blocks: Vec<Option<i64>> = match self.blocking {
            Some((_, w, bl)) => (0..w / bl).map(|b| Some(b * bl)).collect(),
            None => vec![None],
        };
        let mut run = run;
        for start in blocks {
            self.block_start = start;
            let l2 = self.open_loop(p0, Bound::Value(p1));
            run = run.and_then(|_| self.edge_cursor(l2.counter, first, cols, edge_ids, Touch::Main)).and_then(|_| {
                let a = at(self, l2.counter);
                for (c, v) in split.carried.iter().enumerate() {
                    let x = self.b.ins().load(self.num, flags(), a, c as i32 * size as i32);
                    let var = self.var(*v)?;
                    self.b.try_def_var(var, x).map_err(|e| format!("v{}: {e}", v.0))?;
                }
                self.stmts(&split.loops)
            });
            self.close_loop(l2, 1);
        }
        self.block_start = None;
        self.close_loop_at(outer, p1);
        run
    }

    /// Inside an edge loop at position `p` of a row starting at `first`:
    /// load `j` and `e`, set the cursor, and (`touch`) touch rows ahead.
    fn edge_cursor(&mut self, p: Value, first: Value, cols: Option<Value>, edge_ids: Option<Value>, touch: Touch) -> TResult<()> {
        if let Some(cols) = cols {
            let a = self.b.ins().ishl_imm_u(p, 2);
            let a = self.b.ins().iadd(cols, a);
            let j = self.b.ins().uload32(flags(), a, 0);
            self.cur.src = Some(j);
            match (self.touch.clone(), touch) {
                (Some((fields, chunk_end)), Touch::Main) => self.touch_ahead(p, cols, &fields, chunk_end)?,
                (None, Touch::Main) => self.touch_later_blocks(j)?,
                (Some((_, chunk_end)), Touch::Pre) => {
                    let fields = self.pre_touched_fields();
                    self.touch_ahead(p, cols, &fields, chunk_end)?
                }
                _ => {}
            }
        }
        self.cur.edge = Some(match edge_ids {
            Some(ids) => {
                let a = self.b.ins().ishl_imm_u(p, 3);
                let a = self.b.ins().iadd(ids, a);
                self.b.ins().load(types::I64, flags(), a, 0)
            }
            None => p,
        });
        self.cur.rank = Some((p, first));
        Ok(())
    }

    /// Whether the edge body calls a math library function (`exp`, `ln`,
    /// `tanh`): a call clobbers every vector register, so whatever the edge
    /// loop keeps live across it is spilled and reloaded per edge.
    fn edges_call_math(&self) -> bool {
        use crate::loops::calls_math;
        match &self.split {
            // The tiles' loops (where the rows are read) call nothing.
            Some(split) => calls_math(&split.loops),
            None => calls_math(&self.k.pre_body) || calls_math(&self.k.body),
        }
    }

    /// The source fields whose rows [`Translator::touch_ahead`] touches:
    /// vectors of at least [`TOUCH_AHEAD_MIN_ROW_BYTES`], with their width,
    /// when the edge body calls no math function
    /// ([`Translator::edges_call_math`]: the touch's column pointer, chunk
    /// end and row base would be spilled around each call; attention
    /// measured 380 -> 494..619 ms forward with touches).
    fn touched_fields(&self) -> Vec<(usize, i64)> {
        if self.edges_call_math() {
            return Vec::new();
        }
        let size = self.key.dtype.size() as i64;
        (0..self.k.fields.len())
            .filter_map(|f| {
                let decl = &self.k.fields[f];
                let n = match decl.ty {
                    Type::Vector(w) if decl.role == Role::Src => self.width(w).ok()?,
                    _ => return None,
                };
                (self.fields[f].is_some() && n * size >= TOUCH_AHEAD_MIN_ROW_BYTES).then_some((f, n))
            })
            .collect()
    }

    /// The source fields the pre-pass reads (with their row width), which
    /// it touches ahead when the body touches its rows: a softmax's score
    /// reads `a_src[j]` first in the pre-pass.
    fn pre_touched_fields(&self) -> Vec<(usize, i64)> {
        // Not across math calls (the touch state would be spilled).
        if crate::loops::calls_math(&self.k.pre_body) {
            return Vec::new();
        }
        let read = crate::loops::fields_read(&self.k.pre_body, self.k.fields.len());
        (0..self.k.fields.len())
            .filter(|&f| read[f] && self.k.fields[f].role == Role::Src && self.fields[f].is_some())
            .filter_map(|f| match self.k.fields[f].ty {
                Type::Scalar => Some((f, 1)),
                Type::Vector(w) => self.width(w).ok().map(|n| (f, n)),
                _ => None,
            })
            .collect()
    }

    /// At edge `p`, touch the source rows of the edge [`TOUCH_AHEAD_EDGES`]
    /// further on in the chunk (past this row's end too; the chunk's last
    /// edge at most): one byte load per 64-byte line, which becomes a
    /// `prefetcht0` after code generation (`prefetch`), so that when the
    /// edge comes its row is in cache. Under feature blocking each pass
    /// touches its own block's lines. Wide rows only (a row of a line or
    /// two gained nothing: F = 16 sum 39-45 ms either way). Measured with
    /// prefetches, side by side: sum F = 64 forward 112 -> 62 ms (ahead
    /// 16/32/64 edges: 70/57/83 ms), max F = 64 forward 155 -> 83-90 ms,
    /// sum F = 128 backward 400 -> 290 ms (per-block touches).
    fn touch_ahead(&mut self, p: Value, cols: Value, fields: &[(usize, i64)], chunk_end: Value) -> TResult<()> {
        let size = self.key.dtype.size() as i64;
        // Under feature blocking each pass touches the lines of its own
        // block: a hub row's edges outrun the cache, so lines touched by
        // the first pass for a later one are gone by the time it comes.
        let mut spans = Vec::new();
        for &(f, n) in fields {
            let Type::Vector(w) = self.k.fields[f].ty else {
                // A scalar field's element, once per edge.
                if self.block_start.unwrap_or(0) == 0 {
                    spans.push((f, n, 0, size));
                }
                continue;
            };
            let (start, lanes) = self.lane_range(w, n);
            let blocked = lanes < n;
            if blocked || self.block_start.unwrap_or(0) == 0 {
                spans.push((f, n, start * size, (start + lanes) * size));
            }
        }
        if spans.is_empty() {
            return Ok(());
        }
        let last = self.b.ins().iadd_imm_s(chunk_end, -1);
        let q = self.b.ins().iadd_imm_s(p, TOUCH_AHEAD_EDGES);
        let q = self.b.ins().umin(q, last);
        let a = self.b.ins().ishl_imm_u(q, 2);
        let a = self.b.ins().iadd(cols, a);
        let j = self.b.ins().uload32(flags(), a, 0);
        for (f, n, lo, hi) in spans {
            self.touch_lines(f, j, n, (lo..hi).step_by(64))?;
        }
        Ok(())
    }

    /// One kept (possibly trapping, so never removed) byte load at each of
    /// `offsets` in row `j` of field `f`, `n` elements wide; after code
    /// generation each becomes a `prefetcht0` where its machine code allows
    /// (`prefetch::rewrite_touch`).
    fn touch_lines(&mut self, f: usize, j: Value, n: i64, offsets: impl IntoIterator<Item = i64>) -> TResult<()> {
        let base = self.fields.get(f).copied().flatten().ok_or("touched field not loaded")?;
        let row = self.b.ins().imul_imm_s(j, n * self.key.dtype.size() as i64);
        let row = self.b.ins().iadd(base, row);
        for off in offsets {
            let off = i32::try_from(off).map_err(|_| "row too wide")?;
            // Marked for the rewrite into `prefetcht0` (see `prefetch`).
            self.b.set_srcloc(super::prefetch::touch_srcloc());
            self.b.ins().load(types::I8, MemFlagsData::new(), row, off);
            self.b.set_srcloc(ir::SourceLoc::default());
        }
        Ok(())
    }

    /// In the first feature-block pass over a row's edges, touch the cache
    /// lines of source row `j` that the later blocks will read: one
    /// prefetch per 64-byte line (a marked byte load, see `prefetch`), for
    /// kernels without touch-ahead (math calls). The lines then arrive while
    /// the first block waits for its own, and the later passes, which
    /// re-walk the row's edges, find them in cache instead of paying a
    /// second round of random misses.
    fn touch_later_blocks(&mut self, j: Value) -> TResult<()> {
        let (Some((w, n, bl)), Some(0)) = (self.blocking, self.block_start) else { return Ok(()) };
        let size = self.key.dtype.size() as i64;
        for f in 0..self.k.fields.len() {
            let decl = &self.k.fields[f];
            if decl.role != Role::Src || decl.ty != Type::Vector(w) || self.fields[f].is_none() {
                continue;
            }
            let (first, end) = (bl * size, n * size);
            let mut at: Vec<i64> = (first..end).step_by(64).collect();
            at.push(end - size);
            at.dedup();
            self.touch_lines(f, j, n, at)?;
        }
        Ok(())
    }

    /// The edge loop of the generated-stencil realization: each neighbour
    /// offset in turn, its border test on the grid coordinates `(r, c)`, the
    /// body when the neighbour exists. The degree is the count of
    /// neighbours visited. Rows whose every neighbour is inside the grid
    /// (all but a border as wide as the largest offset) take a copy of the
    /// body with no tests and a constant degree; the rest take the tested
    /// (or, periodic, wrapped) path.
    fn generated_neighbours(&mut self, st: &tiga_abi::Stencil2d, i: Value, r: Value, c: Value) -> TResult<()> {
        let k = self.k;
        if k.reads_role(Role::Edge) {
            return Err("a generated stencil has no edge fields: use the CSR realization".into());
        }
        for list in k.edge_passes() {
            self.generated_pass(st, i, r, c, list)?;
        }
        Ok(())
    }

    /// One pass of [`Translator::generated_neighbours`] running `list` per
    /// neighbour; it leaves the degree (the neighbours visited) set.
    fn generated_pass(&mut self, st: &tiga_abi::Stencil2d, i: Value, r: Value, c: Value, list: &[Stmt]) -> TResult<()> {
        let (rows, cols) = (st.rows as i64, st.cols as i64);
        let count = self.b.declare_var(types::I64);
        let zero = self.b.ins().iconst(types::I64, 0);
        let (dr_lo, dc_lo, inner_r, inner_c) = st.interior();
        let join = self.b.create_block();
        if inner_r > 0 && inner_c > 0 && !st.offsets.is_empty() {
            // Interior: -dr_lo <= r < rows - dr_hi and likewise for c, as
            // one unsigned compare each.
            let fast = self.b.create_block();
            let slow = self.b.create_block();
            let rr = self.b.ins().iadd_imm_s(r, dr_lo);
            let ok_r = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, rr, inner_r);
            let cc = self.b.ins().iadd_imm_s(c, dc_lo);
            let ok_c = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, cc, inner_c);
            let inside = self.b.ins().band(ok_r, ok_c);
            self.b.ins().brif(inside, fast, &[], slow, &[]);
            self.b.seal_block(fast);
            self.b.seal_block(slow);
            self.b.switch_to_block(fast);
            for (n, &(dr, dc)) in st.offsets.iter().enumerate() {
                let j = self.b.ins().iadd_imm_s(i, dr * cols + dc);
                let seen = self.b.ins().iconst(types::I64, n as i64);
                self.cur.src = Some(j);
                self.cur.edge = None;
                self.cur.rank = Some((seen, zero));
                self.stmts(list)?;
            }
            let all = self.b.ins().iconst(types::I64, st.offsets.len() as i64);
            self.b.def_var(count, all);
            self.b.ins().jump(join, &[]);
            self.b.switch_to_block(slow);
        }
        self.b.def_var(count, zero);
        for &(dr, dc) in &st.offsets {
            let body = self.b.create_block();
            let next = self.b.create_block();
            let r2 = self.b.ins().iadd_imm_s(r, dr);
            let c2 = self.b.ins().iadd_imm_s(c, dc);
            let j = if st.periodic {
                // x mod n in [0, n) (an offset may exceed the grid: a
                // remainder, not one add or subtract).
                let wrap = |b: &mut FunctionBuilder<'_>, x: Value, n: i64| {
                    let m = b.ins().srem_imm_s(x, n);
                    let neg = b.ins().icmp_imm_s(IntCC::SignedLessThan, m, 0);
                    let up = b.ins().iadd_imm_s(m, n);
                    b.ins().select(neg, up, m)
                };
                let r3 = wrap(&mut self.b, r2, rows);
                let c3 = wrap(&mut self.b, c2, cols);
                let rr = self.b.ins().imul_imm_s(r3, cols);
                let j = self.b.ins().iadd(rr, c3);
                self.b.ins().jump(body, &[]);
                j
            } else {
                // Unsigned compares reject negatives too.
                let ok_r = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, r2, rows);
                let ok_c = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, c2, cols);
                let ok = self.b.ins().band(ok_r, ok_c);
                let j = self.b.ins().iadd_imm_s(i, dr * cols + dc);
                self.b.ins().brif(ok, body, &[], next, &[]);
                j
            };
            self.b.seal_block(body);
            self.b.switch_to_block(body);
            let seen = self.b.use_var(count);
            self.cur.src = Some(j);
            self.cur.edge = None;
            self.cur.rank = Some((seen, zero));
            self.stmts(list)?;
            let seen = self.b.use_var(count);
            let more = self.b.ins().iadd_imm_s(seen, 1);
            self.b.def_var(count, more);
            self.b.ins().jump(next, &[]);
            self.b.seal_block(next);
            self.b.switch_to_block(next);
        }
        self.b.ins().jump(join, &[]);
        self.b.seal_block(join);
        self.b.switch_to_block(join);
        self.cur.deg = Some(self.b.use_var(count));
        Ok(())
    }

    /// Whether a generated stencil's interior can run `vl` consecutive
    /// rows as the lanes of one vector ([`Translator::vector_rows`]): the
    /// row's code is straight-line (no feature loops, no scratch), every
    /// access steps with the row or is invariant, every operation has a
    /// lane-wise form with the scalar path's exact semantics, and every
    /// value read was set earlier in the row (`init`, then the body once per
    /// neighbour, then `finish`). Each lane then does the scalar row's
    /// operations in the scalar row's order: the same bits.
    fn rows_vectorizable(&self) -> bool {
        let k = self.k;
        // One straight pass of neighbours per row only.
        if !k.pre_body.is_empty() {
            return false;
        }
        let mut defined = vec![false; k.vars.len()];
        let num = |v: &Var| k.vars.get(v.0 as usize) == Some(&VarKind::Num);
        let list = k.init.iter().chain(&k.body).chain(&k.finish);
        for st in list {
            let is = |v: &Var| defined.get(v.0 as usize).copied().unwrap_or(false);
            let ok = match st {
                Stmt::Loop { .. } => false,
                Stmt::Store(a, v) => self.axis_stride(a, Axis::Rows) == Some(true) && is(v) && num(v),
                Stmt::Set(v, inst) => {
                    let (vn, reads) = (num(v), inst.operands());
                    reads.iter().all(is)
                        && match inst {
                            Inst::Const(_) | Inst::Degree | Inst::Rank => vn,
                            Inst::Load(a) => vn && self.axis_stride(a, Axis::Rows).is_some(),
                            Inst::Copy(x) => num(x) == vn,
                            Inst::Unary(UnOp::Not, x) => !vn && !num(x),
                            Inst::Unary(..) => vn && has_vector_form(inst),
                            Inst::Binary(BinOp::And | BinOp::Or, x, y) => !vn && !num(x) && !num(y),
                            Inst::Binary(_, x, y) => vn && has_vector_form(inst) && num(x) && num(y),
                            Inst::Cmp(_, x, y) => !vn && num(x) && num(y),
                            Inst::Select(c, x, y) => !num(c) && vn && num(x) && num(y),
                            Inst::Powi(..) => false,
                        }
                }
            };
            if !ok {
                return false;
            }
            if let Stmt::Set(v, _) = st {
                defined[v.0 as usize] = true;
            }
        }
        true
    }

    /// The rows per vector of a generated stencil's interior, when it has
    /// room for one and the kernel allows ([`Translator::rows_vectorizable`]).
    fn row_vector_lanes(&mut self, st: &tiga_abi::Stencil2d) -> Option<i64> {
        let (_, vl) = self.vlen();
        let (_, _, inner_r, inner_c) = st.interior();
        let ok = inner_r > 0 && inner_c >= vl && !st.offsets.is_empty() && self.rows_vectorizable();
        self.row_vectors = ok.then_some(vl);
        self.row_vectors
    }

    /// The rows per vector of a CSR kernel with no edge work and no use of
    /// the degree or ranks (elementwise over rows, like an adjoint's row
    /// stage), when its statements vectorize across rows.
    fn row_only_lanes(&mut self) -> Option<i64> {
        let k = self.k;
        if self.key.stencil.is_some() || !k.body.is_empty() || !k.pre_body.is_empty() {
            return None;
        }
        let mut counts = false;
        for list in [&k.init, &k.finish] {
            crate::loops::for_each_stmt(list, &mut |st| counts |= matches!(st, Stmt::Set(_, Inst::Degree | Inst::Rank)));
        }
        let (_, vl) = self.vlen();
        let ok = !counts && self.rows_vectorizable();
        self.row_vectors = ok.then_some(vl);
        self.row_vectors
    }

    /// Rows `i .. i + vl` of a generated stencil's interior as one vector
    /// pass: the row's statements with every variable a vector, one lane
    /// per row, and the body once per neighbour offset (whose source rows
    /// `i + off .. i + off + vl` are one unaligned load).
    fn vector_rows(&mut self, st: Option<&tiga_abi::Stencil2d>, i: Value) -> TResult<()> {
        let k = self.k;
        let (vty, _) = self.vlen();
        let vflags = MemFlagsData::new().with_notrap();
        let little = MemFlagsData::new().with_endianness(ir::Endianness::Little);
        let mut local: std::collections::HashMap<u32, Value> = std::collections::HashMap::new();
        let deg = st.map(|st| self.b.ins().iconst(types::I64, st.offsets.len() as i64));
        let zero = self.b.ins().iconst(types::I64, 0);
        self.cur = Cursor { row: Some(i), deg, src: None, edge: None, rank: None };
        let run = |t: &mut Self, list: &[Stmt], local: &mut std::collections::HashMap<u32, Value>| -> TResult<()> {
            for s in list {
                match s {
                    Stmt::Set(v, inst) => {
                        let val = t.vector_inst(inst, Axis::Rows, vty, vflags, little, local)?;
                        local.insert(v.0, val);
                    }
                    Stmt::Store(a, v) => {
                        let val = *local.get(&v.0).ok_or("a row vector stored before it was set")?;
                        let addr = t.addr(a)?;
                        t.b.ins().store(vflags, val, addr, 0);
                    }
                    Stmt::Loop { .. } => return Err("a feature loop in a row-vector pass".into()),
                }
            }
            Ok(())
        };
        run(self, &k.init, &mut local)?;
        let (cols, offsets) = st.map(|st| (st.cols as i64, &st.offsets[..])).unwrap_or((0, &[]));
        for (n, &(dr, dc)) in offsets.iter().enumerate() {
            let j = self.b.ins().iadd_imm_s(i, dr * cols + dc);
            let seen = self.b.ins().iconst(types::I64, n as i64);
            self.cur.src = Some(j);
            self.cur.rank = Some((seen, zero));
            run(self, &k.body, &mut local)?;
        }
        self.cur.src = None;
        self.cur.rank = None;
        run(self, &k.finish, &mut local)
    }

    // --- addresses -------------------------------------------------------

    fn addr(&mut self, a: &Addr) -> TResult<Value> {
        match a {
            Addr::Field { field, lanes } => {
                let f = field.0 as usize;
                let decl = self.k.fields.get(f).ok_or_else(|| format!("unknown field {f}"))?;
                let base = self.fields.get(f).copied().flatten().ok_or_else(|| format!("field {} not loaded", decl.name))?;
                let row = match decl.role {
                    Role::Src => Some(self.cur.src.ok_or_else(|| format!("src.{} read outside the edge loop", decl.name))?),
                    Role::Edge => Some(self.cur.edge.ok_or_else(|| format!("edge.{} read outside the edge loop", decl.name))?),
                    Role::Dst => Some(self.cur.row.ok_or("row index missing")?),
                    Role::Param => None,
                };
                self.element(base, decl.ty, row, lanes).map_err(|e| format!("{}.{}: {e}", decl.role.name(), decl.name))
            }
            Addr::Scratch { buf, lane } => {
                let base = *self.scratch.get(*buf as usize).ok_or_else(|| format!("unknown scratch{buf}"))?;
                let idx = self.lane(*lane)?;
                let bytes = self.b.ins().ishl_imm_u(idx, self.shift);
                Ok(self.b.ins().iadd(base, bytes))
            }
            Addr::Output { out, lane } => {
                let o = *out as usize;
                let decl = self.k.outputs.get(o).ok_or_else(|| format!("unknown output {o}"))?;
                let base = self.outputs.get(o).copied().flatten().ok_or_else(|| format!("output {} not loaded", decl.name))?;
                // Destination outputs are written per row, edge outputs per
                // edge (user order), parameter outputs as one array.
                let row = match decl.role {
                    Role::Edge => {
                        Some(self.cur.edge.ok_or_else(|| format!("edge output {} written outside the edge loop", decl.name))?)
                    }
                    Role::Param => None,
                    _ => Some(self.cur.row.ok_or("row index missing")?),
                };
                let lanes: Vec<LoopVar> = lane.iter().copied().collect();
                self.element(base, decl.ty, row, &lanes).map_err(|e| format!("output {}: {e}", decl.name))
            }
            Addr::OutputMatrix { out, row, col } => {
                let o = *out as usize;
                let decl = self.k.outputs.get(o).ok_or_else(|| format!("unknown output {o}"))?;
                let base = self.outputs.get(o).copied().flatten().ok_or_else(|| format!("output {} not loaded", decl.name))?;
                self.element(base, decl.ty, None, &[*row, *col]).map_err(|e| format!("output {}: {e}", decl.name))
            }
        }
    }

    /// The address of element `lanes` of row `row` of an array at `base`
    /// with `ty` elements per row (`None`: the array's first row), as
    /// `(base + row · row_bytes) + lane_bytes`: the row's address is shared
    /// by every lane of the row (one multiply and add per row, not per
    /// lane), and a constant lane (an unrolled feature loop) becomes the
    /// load's displacement instead of an address computed in a register.
    fn element(&mut self, base: Value, ty: Type, row: Option<Value>, lanes: &[LoopVar]) -> TResult<Value> {
        let (per_row, inner) = match (ty, lanes) {
            (Type::Scalar, []) => (1, None),
            (Type::Vector(w), [k]) => (self.width(w)?, Some(self.lane(*k)?)),
            (Type::Matrix(r, c), [a, b]) => {
                let cols = self.width(c)?;
                let per_row = self.width(r)?.checked_mul(cols).ok_or("matrix too large")?;
                let a = self.lane(*a)?;
                let b = self.lane(*b)?;
                let a = self.scale(a, cols);
                (per_row, Some(self.b.ins().iadd(a, b)))
            }
            _ => return Err(format!("{} lane(s) for a {ty:?}", lanes.len())),
        };
        let mut addr = base;
        if let Some(row) = row {
            let row_bytes = per_row.checked_mul(1 << self.shift).ok_or("row too large")?;
            let off = self.scale(row, row_bytes);
            addr = self.b.ins().iadd(addr, off);
        }
        if let Some(inner) = inner {
            let off = self.b.ins().ishl_imm_u(inner, self.shift);
            addr = self.b.ins().iadd(addr, off);
        }
        Ok(addr)
    }

    fn scale(&mut self, x: Value, by: i64) -> Value {
        if by == 1 {
            x
        } else if by > 0 && by.count_ones() == 1 {
            self.b.ins().ishl_imm_u(x, i64::from(by.trailing_zeros()))
        } else {
            self.b.ins().imul_imm_s(x, by)
        }
    }

    // --- names -----------------------------------------------------------

    fn width(&self, w: WidthId) -> TResult<i64> {
        let n = self.key.widths.get(w.0 as usize).ok_or_else(|| format!("unknown width {}", w.0))?;
        i64::try_from(*n).map_err(|_| format!("width {n} too large"))
    }

    fn lane(&self, l: LoopVar) -> TResult<Value> {
        self.lanes.get(l.0 as usize).copied().flatten().ok_or_else(|| format!("k{} used outside its loop", l.0))
    }

    fn never_nan(&self, v: Var) -> bool {
        self.not_nan.get(v.0 as usize).copied().unwrap_or(false)
    }

    fn kind(&self, v: Var) -> TResult<VarKind> {
        self.k.vars.get(v.0 as usize).copied().ok_or_else(|| format!("unknown variable v{}", v.0))
    }

    fn var(&self, v: Var) -> TResult<Variable> {
        self.vars.get(v.0 as usize).copied().ok_or_else(|| format!("unknown variable v{}", v.0))
    }

    fn use_var(&mut self, v: Var) -> TResult<Value> {
        let var = self.var(v)?;
        self.b.try_use_var(var).map_err(|e| format!("v{}: {e}", v.0))
    }

    fn num_var(&mut self, v: Var) -> TResult<Value> {
        match self.kind(v)? {
            VarKind::Num => self.use_var(v),
            VarKind::Bool => Err(format!("boolean v{} used as a number", v.0)),
        }
    }

    fn bool_var(&mut self, v: Var) -> TResult<Value> {
        match self.kind(v)? {
            VarKind::Bool => self.use_var(v),
            VarKind::Num => Err(format!("number v{} used as a boolean", v.0)),
        }
    }
}

/// Which fields and outputs `list` touches.
fn mark_used(list: &[Stmt], fields: &mut [bool], outputs: &mut [bool]) -> TResult<()> {
    let mut mark = |a: &Addr| -> TResult<()> {
        match a {
            Addr::Field { field, .. } => {
                *fields.get_mut(field.0 as usize).ok_or_else(|| format!("unknown field {}", field.0))? = true
            }
            Addr::Output { out, .. } | Addr::OutputMatrix { out, .. } => {
                *outputs.get_mut(*out as usize).ok_or_else(|| format!("unknown output {out}"))? = true
            }
            Addr::Scratch { .. } => {}
        }
        Ok(())
    };
    fn walk(list: &[Stmt], mark: &mut dyn FnMut(&Addr) -> TResult<()>) -> TResult<()> {
        for s in list {
            match s {
                Stmt::Set(_, Inst::Load(a)) | Stmt::Store(a, _) => mark(a)?,
                Stmt::Loop { body, .. } => walk(body, mark)?,
                Stmt::Set(..) => {}
            }
        }
        Ok(())
    }
    walk(list, &mut mark)
}

/// Whether an instruction reads variable `v`.
fn inst_reads(i: &Inst, v: Var) -> bool {
    i.operands().contains(&v)
}
