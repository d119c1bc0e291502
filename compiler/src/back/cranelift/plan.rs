//! The code-generation plan: every choice the Cranelift translator makes
//! about how a variant runs, decided before a single instruction is built.
//!
//! [`plan_codegen`] reads the loop kernel, the [`VariantKey`] and the
//! [`Target`] and returns a [`CodegenPlan`], a plain value: the SIMD shape,
//! each feature loop's form (SIMD or scalar, a counted loop or unrolled
//! onto registers, vector partial sums), feature blocking, the scratch
//! accumulators kept in registers, edges per iteration of each edge loop,
//! edge tiles, the source rows touched ahead, and rows run as vector lanes.
//! The translator (`translate`) then only follows it, so what a variant
//! does is readable without reading the CLIF: [`Variant::plan`] keeps it,
//! `explain` prints it (its [`Display`] is one block of text) and
//! `compiler/tests/codegen_plan.rs` pins it. Cranelift splits lowering from
//! emission the same way.
//!
//! The thresholds below were measured on x86-64 (16 xmm registers, 64-byte
//! cache lines); the numbers quoted are Cranelift variants on the
//! power-law and stencil graphs of the benchmark suite.
//!
//! [`Variant::plan`]: super::Variant::plan
//! [`Display`]: std::fmt::Display

use std::collections::HashSet;
use std::fmt;

use cranelift_codegen::ir::{self, types};

use super::VariantKey;
use crate::ir::{BinOp, DType, Role, Type, UnOp, WidthId};
use crate::loops::{sum_accumulators as reductions, Addr, Inst, LoopKernel, LoopVar, SplitBody, Stmt, Var, VarKind};

/// The most vectors a feature loop is unrolled into when its accumulator is
/// kept in registers (16 × 128 bits = 64 f32 lanes).
const MAX_UNROLL: i64 = 16;

/// Vectors of lanes per pass over a row's edges under feature blocking
/// (see [`feature_blocks`]): 4 of the 16 xmm registers hold
/// accumulators, the rest the loads and temporaries (Cranelift loads a
/// pass's source vectors up front: with 8 accumulators a max kernel
/// spilled two of them every edge; F = 64 max forward 183 -> 165 ms,
/// backward 1362 -> 1089 ms); all 16 when the edge body only adds loaded
/// values into them (each add reads memory, no temporary), which at F = 64
/// makes one pass over the edges instead of two.
const BLOCK_VECTORS: i64 = 4;
const BLOCK_VECTORS_ADD_ONLY: i64 = 16;
/// A weighted sum (`acc += w · x`) needs a temporary per vector: 8.
const BLOCK_VECTORS_WEIGHTED: i64 = 8;

/// How many edges ahead the edge loop touches the source rows it will
/// gather ([`TouchAhead`]). Measured on the power-law graph (F = 64 f32
/// sum, Cranelift; ahead 0 / 8 / 16 / 32 edges): backward (transposed
/// graph, uniform sources) 292 / 185 / 179 / 157 ms, forward (Zipf
/// sources, mostly cached) 118 / 116 / 116 / 106-126 ms; F = 128 backward
/// 804-1062 / 780 / 720 / 538 ms.
const TOUCH_AHEAD_EDGES: i64 = 32;

/// Source rows narrower than this are not touched ahead: at F = 16 f32 (one
/// line per row) touching took the forward from 39 to 62 ms.
const TOUCH_AHEAD_MIN_ROW_BYTES: i64 = 256;

/// The same for a row stored at half width: bf16 at F = 64 is 128 bytes,
/// and without touches its power-law sum forward took 126 ms where f32's,
/// touched, took 55 ms (62.5k nodes, 1M edges, 2 threads).
const TOUCH_AHEAD_MIN_HALF_ROW_BYTES: i64 = 128;

/// Edges per iteration of a short edge loop ([`unrolled_edges`]), a power
/// of two. One edge per iteration spent as many instructions on the loop
/// (counter, compare, branch, the edge's column address) as on the edge;
/// LLVM unrolls the ahead-of-time variant's loop by 4 the same way.
/// Measured side by side on the 2000×2000 stencil (`Smoothing`, 4 edges a
/// row, F = 1), two alternating rounds: Cranelift forward 13.3 and 13.5 ->
/// 8.4 and 8.5 ms, backward 16.3 and 18.8 -> 9.1 and 8.2 ms (hand-written
/// loop 9.8 to 10.9 ms, rustc's variant 7.7 to 8.5 ms).
const EDGE_UNROLL: i64 = 4;

/// The most statements an unrolled edge body may hold.
const EDGE_UNROLL_MAX_STMTS: usize = 8;

/// The widest feature loop (in bytes: one cache line) an unrolled edge
/// body may hold.
pub(super) const EDGE_UNROLL_MAX_ROW_BYTES: i64 = 64;

/// What the planner needs to know of the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// Bits of one SIMD vector. Cranelift's vector types are 128 bits on
    /// every ISA it vectorizes for (x64 SSE, aarch64 NEON), and the
    /// translator's vector types are built from this.
    pub vector_bits: u32,
}

impl Target {
    /// The target every Cranelift variant is compiled for.
    pub const CRANELIFT: Target = Target { vector_bits: 128 };
}

/// A kernel the planner cannot read: a width, field or output it names is
/// not declared. The loop IR's verifier refuses such kernels first; a
/// hand-built one may still reach here.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot plan code generation for `{kernel}`: {message}")]
pub struct PlanError {
    pub kernel: String,
    pub message: String,
}

/// The statement lists of a loop kernel, in the order they run in a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StmtList {
    Init,
    PreBody,
    Body,
    Finish,
}

impl StmtList {
    pub const ALL: [StmtList; 4] = [StmtList::Init, StmtList::PreBody, StmtList::Body, StmtList::Finish];

    pub fn name(self) -> &'static str {
        match self {
            StmtList::Init => "init",
            StmtList::PreBody => "pre-pass",
            StmtList::Body => "body",
            StmtList::Finish => "finish",
        }
    }

    /// The list of `k` this names.
    pub fn of(self, k: &LoopKernel) -> &[Stmt] {
        match self {
            StmtList::Init => &k.init,
            StmtList::PreBody => &k.pre_body,
            StmtList::Body => &k.body,
            StmtList::Finish => &k.finish,
        }
    }
}

/// The SIMD vector of the variant: `lanes` elements of its dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VectorShape {
    pub dtype: DType,
    pub lanes: i64,
    pub bits: u32,
}

impl VectorShape {
    /// The Cranelift type (`f32x4`, `f64x2`).
    pub fn ty(&self) -> ir::Type {
        let scalar = match self.dtype {
            DType::F32 => types::F32,
            DType::F64 => types::F64,
        };
        // `lanes` is a power of two from 2 to 256 (`plan_codegen`), which
        // Cranelift's vector types all have.
        scalar.by(self.lanes as u32).unwrap_or(scalar)
    }
}

/// Why a feature loop stays scalar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScalarWhy {
    /// Its width is 0: nothing is emitted.
    Empty,
    /// Fewer lanes than a vector holds.
    Narrow,
    /// A width that is not a multiple of the vector's lanes.
    Ragged,
    /// A body with a loop-carried scalar, a nested loop, a stride other
    /// than 1, or an operation with no lane-wise form of the scalar path's
    /// exact semantics.
    Body,
}

/// How one feature loop is emitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoopForm {
    /// One lane per iteration (straight-line code for one lane).
    Scalar(ScalarWhy),
    /// A vector of lanes per iteration.
    Simd {
        /// Fully unrolled with constant lanes (the body reads or writes a
        /// scratch accumulator kept in registers, one register per
        /// vector); otherwise a counted loop.
        unrolled: bool,
        /// Scalar accumulators (`acc = acc + x`) summed as vector partial
        /// sums, added up lane by lane after the loop: a different
        /// summation order than the scalar loop (equal up to rounding).
        partial_sums: Vec<Var>,
    },
}

/// One feature loop of the kernel and how it is emitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureLoopPlan {
    pub list: StmtList,
    /// Loops around this one.
    pub depth: usize,
    pub lane: LoopVar,
    pub width: WidthId,
    /// The width's value in this variant.
    pub lanes: i64,
    pub form: LoopForm,
    /// The index (in [`CodegenPlan::feature_loops`]) just past this loop
    /// and the loops nested in it.
    pub end: usize,
}

/// Feature blocking: a row's (or a tile's) work runs once per block of
/// lanes of one width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeatureBlocks {
    pub width: WidthId,
    /// The width's lanes.
    pub lanes: i64,
    /// Lanes per block (a multiple of the vector's lanes that divides
    /// `lanes`).
    pub block: i64,
}

impl FeatureBlocks {
    /// The first lane of each block.
    pub fn starts(&self) -> impl Iterator<Item = i64> {
        let block = self.block;
        (0..self.lanes / block).map(move |b| b * block)
    }
}

/// A source field whose rows the edge loop touches ahead of reading them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TouchedField {
    /// Index into the kernel's fields.
    pub field: usize,
    /// `src.x`, for the printed plan.
    pub name: String,
    /// Elements per row.
    pub lanes: i64,
}

/// Touching the source rows of the edge `edges` positions further on in
/// the row chunk, so that its row is in cache when that edge comes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TouchAhead {
    pub edges: i64,
    /// The body's source rows.
    pub fields: Vec<TouchedField>,
    /// The source fields the pre-pass reads, touched by the pre-pass (it
    /// is the first to gather them).
    pub pre_fields: Vec<TouchedField>,
}

/// The edges each CSR edge loop runs per iteration (1: not unrolled;
/// `None`: no such loop, as for an empty list, a generated stencil or a
/// body run in edge tiles).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EdgeUnroll {
    pub pre_pass: Option<i64>,
    pub body: Option<i64>,
}

/// The edge body cut into tiles ([`crate::loops::split_calls`]).
#[derive(Clone, Debug, PartialEq)]
pub struct EdgeTiles {
    pub edges: usize,
    pub split: SplitBody,
}

/// Every code-generation choice for one variant (see the module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct CodegenPlan {
    pub kernel: String,
    pub widths: Vec<usize>,
    pub stencil: Option<tiga_abi::Stencil2d>,
    pub vector: VectorShape,
    /// Every feature loop of `init`, `pre_body`, `body` and `finish`, in
    /// that order, each followed by the loops nested in it.
    pub feature_loops: Vec<FeatureLoopPlan>,
    pub feature_blocks: Option<FeatureBlocks>,
    /// Per scratch buffer: the vector registers it is kept in (`None`: on
    /// the stack).
    pub promoted: Vec<Option<i64>>,
    pub edge_unroll: EdgeUnroll,
    pub tiles: Option<EdgeTiles>,
    pub touch_ahead: Option<TouchAhead>,
    /// Under feature blocking without touch-ahead: the source fields whose
    /// later blocks' lines the first block's pass touches.
    pub touch_later_blocks: Vec<TouchedField>,
    /// Rows per vector when rows run as vector lanes: a generated stencil's
    /// interior (two vectors per iteration), or a kernel with no edge work.
    pub row_vectors: Option<i64>,
    /// Whether a generated stencil's interior rows (every neighbour inside
    /// the grid) take a copy of the body with no border tests and a
    /// constant degree, where the grid has an interior.
    pub untested_interior: bool,
    /// The fields and outputs stored at half width (`src.h: bf16`; empty:
    /// none), which loads widen and stores round.
    pub half_width: String,
}

impl CodegenPlan {
    /// The index of the first feature loop of `list` in
    /// [`CodegenPlan::feature_loops`] (where it would be when it has none).
    pub fn first_loop(&self, list: StmtList) -> usize {
        self.feature_loops.iter().position(|l| l.list >= list).unwrap_or(self.feature_loops.len())
    }
}

/// Decide how variant `key` of `k` is emitted for `target` (see the module
/// doc).
pub fn plan_codegen(k: &LoopKernel, key: &VariantKey, target: &Target) -> Result<CodegenPlan, PlanError> {
    let err = |message: String| PlanError { kernel: k.name.clone(), message };
    if key.widths.len() != k.widths.len() {
        return Err(err(format!("the variant gives {} widths, the kernel declares {}", key.widths.len(), k.widths.len())));
    }
    let size = key.dtype.size() as u32;
    let lanes = target.vector_bits / (8 * size);
    if !lanes.is_power_of_two() || !(2..=256).contains(&lanes) {
        return Err(err(format!("{}-bit vectors hold no whole number of {} lanes", target.vector_bits, key.dtype.name())));
    }
    let vector = VectorShape { dtype: key.dtype, lanes: i64::from(lanes), bits: target.vector_bits };
    Planner::new(k, key, vector).map_err(err)?.plan().map_err(err)
}

/// The facts every decision reads: the kernel, the key, the vector and
/// which fields the kernel touches.
struct Planner<'a> {
    k: &'a LoopKernel,
    key: &'a VariantKey,
    vector: VectorShape,
    used_fields: Vec<bool>,
    tiles: Option<EdgeTiles>,
}

type PResult<T> = Result<T, String>;

impl<'a> Planner<'a> {
    fn new(k: &'a LoopKernel, key: &'a VariantKey, vector: VectorShape) -> PResult<Planner<'a>> {
        let (mut used_fields, mut used_outputs) = (vec![false; k.fields.len()], vec![false; k.outputs.len()]);
        for list in StmtList::ALL {
            mark_used(list.of(k), &mut used_fields, &mut used_outputs)?;
        }
        // A generated stencil's neighbours are not tiled.
        let tiles = crate::loops::split_calls(k)
            .filter(|_| key.stencil.is_none())
            .map(|split| EdgeTiles { edges: crate::loops::EDGE_TILE, split });
        Ok(Planner { k, key, vector, used_fields, tiles })
    }

    fn plan(self) -> PResult<CodegenPlan> {
        let feature_blocks = self.feature_blocks()?;
        let promoted = self.promoted(feature_blocks)?;
        let feature_loops = self.feature_loops(&promoted)?;
        let reads_src = self.k.reads_role(Role::Src);
        let touched = self.touched_fields();
        let touch_ahead = (self.key.stencil.is_none() && reads_src && !touched.is_empty()).then(|| TouchAhead {
            edges: TOUCH_AHEAD_EDGES,
            fields: touched,
            pre_fields: self.pre_touched_fields(),
        });
        let touch_later_blocks = match feature_blocks {
            Some(b) if touch_ahead.is_none() && reads_src => self.later_block_fields(b),
            _ => Vec::new(),
        };
        let unrolls = |list: StmtList, plain: bool| {
            let stmts = list.of(self.k);
            if self.key.stencil.is_some() || !plain || stmts.is_empty() {
                return None;
            }
            let unrolled = touch_ahead.is_none() && feature_blocks.is_none() && self.unrolled_edges(stmts);
            Some(if unrolled { EDGE_UNROLL } else { 1 })
        };
        let edge_unroll =
            EdgeUnroll { pre_pass: unrolls(StmtList::PreBody, true), body: unrolls(StmtList::Body, self.tiles.is_none()) };
        let row_vectors = match &self.key.stencil {
            Some(st) => self.stencil_row_vectors(st),
            None => self.row_only_vectors(),
        };
        let untested_interior = self.key.stencil.as_ref().is_some_and(|st| {
            let (_, _, inner_r, inner_c) = st.interior();
            inner_r > 0 && inner_c > 0 && !st.offsets.is_empty()
        });
        Ok(CodegenPlan {
            kernel: self.k.name.clone(),
            widths: self.key.widths.clone(),
            stencil: self.key.stencil.clone(),
            vector: self.vector,
            feature_loops,
            feature_blocks,
            promoted,
            edge_unroll,
            tiles: self.tiles,
            touch_ahead,
            touch_later_blocks,
            row_vectors,
            untested_interior,
            half_width: self.key.storage.describe(self.k),
        })
    }

    fn width(&self, w: WidthId) -> PResult<i64> {
        let n = self.key.widths.get(w.0 as usize).ok_or_else(|| format!("unknown width {}", w.0))?;
        i64::try_from(*n).map_err(|_| format!("width {n} too large"))
    }

    /// Lanes of `width` handled per pass over a row's edges: a block's
    /// under row blocking, else all (a split body's tile blocks keep every
    /// lane in registers, a block using its own).
    fn lanes_per_pass(&self, blocks: Option<FeatureBlocks>, width: WidthId) -> PResult<i64> {
        match blocks {
            Some(b) if b.width == width && self.tiles.is_none() => Ok(b.block),
            _ => self.width(width),
        }
    }

    /// Each feature loop's form, in the order of
    /// [`CodegenPlan::feature_loops`]. A loop's form does not depend on
    /// the lanes of the pass that emits it: a block is a multiple of the
    /// vector that divides the width.
    fn feature_loops(&self, promoted: &[Option<i64>]) -> PResult<Vec<FeatureLoopPlan>> {
        fn walk(
            p: &Planner<'_>,
            list: StmtList,
            stmts: &[Stmt],
            depth: usize,
            promoted: &[Option<i64>],
            out: &mut Vec<FeatureLoopPlan>,
        ) -> PResult<()> {
            for st in stmts {
                let Stmt::Loop { lane, width, body } = st else { continue };
                let n = p.width(*width)?;
                let vl = p.vector.lanes;
                let form = if n == 0 {
                    LoopForm::Scalar(ScalarWhy::Empty)
                } else if n < vl {
                    LoopForm::Scalar(ScalarWhy::Narrow)
                } else if n % vl != 0 {
                    LoopForm::Scalar(ScalarWhy::Ragged)
                } else if !p.vectorizable(*lane, body) {
                    LoopForm::Scalar(ScalarWhy::Body)
                } else {
                    let unrolled = body.iter().any(|st| match st {
                        Stmt::Set(_, Inst::Load(Addr::Scratch { buf, .. })) | Stmt::Store(Addr::Scratch { buf, .. }, _) => {
                            promoted.get(*buf as usize).is_some_and(|p| p.is_some())
                        }
                        _ => false,
                    });
                    let mut partial_sums: Vec<Var> = reductions(body).into_iter().map(Var).collect();
                    partial_sums.sort_unstable();
                    LoopForm::Simd { unrolled, partial_sums }
                };
                let at = out.len();
                out.push(FeatureLoopPlan { list, depth, lane: *lane, width: *width, lanes: n, form, end: at + 1 });
                walk(p, list, body, depth + 1, promoted, out)?;
                let end = out.len();
                if let Some(l) = out.get_mut(at) {
                    l.end = end;
                }
            }
            Ok(())
        }
        let mut out = Vec::new();
        for list in StmtList::ALL {
            walk(self, list, list.of(self.k), 0, promoted, &mut out)?;
        }
        Ok(out)
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
    fn feature_blocks(&self) -> PResult<Option<FeatureBlocks>> {
        // A pre-pass would be redone per block (unless the blocks are
        // those of a split body's tiles, which run its loops alone).
        if self.key.stencil.is_some() || (!self.k.pre_body.is_empty() && self.tiles.is_none()) {
            return Ok(None);
        }
        let vl = self.vector.lanes;
        let block = vl
            * if self.edges_are(false) {
                BLOCK_VECTORS_ADD_ONLY
            } else if self.edges_are(true) {
                BLOCK_VECTORS_WEIGHTED
            } else {
                BLOCK_VECTORS
            };
        let mut width: Option<WidthId> = None;
        for list in StmtList::ALL {
            for st in list.of(self.k) {
                match st {
                    Stmt::Loop { lane, width: w, body } => {
                        if width.is_some_and(|x| x != *w)
                            || body.iter().any(|b| matches!(b, Stmt::Loop { .. }))
                            || !reductions(body).is_empty()
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
                    ) if list == StmtList::Body && self.tiles.is_none() => {
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
        Ok(Some(FeatureBlocks { width: w, lanes: n, block }))
    }

    /// Whether the edge body is feature loops that only load and add into
    /// scratch accumulators (a sum aggregation: its SIMD code needs no
    /// vector register besides the accumulators), or, `weighted`, a
    /// weighted sum: scalar loads, and feature loops that only load,
    /// multiply and add into scratch accumulators (a mean's or a
    /// normalized sum's backward: one temporary per vector).
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
        if let Some(t) = &self.tiles {
            return weighted && t.split.loops.iter().all(|st| matches!(st, Stmt::Loop { body, .. } if body.iter().all(lane_op)));
        }
        self.k.body.iter().all(|st| match st {
            Stmt::Loop { body, .. } => body.iter().all(lane_op),
            Stmt::Set(_, Inst::Load(Addr::Field { lanes, .. })) => weighted && lanes.is_empty(),
            _ => false,
        })
    }

    /// Keep a scratch array (an accumulator) in vector registers instead of
    /// the stack when every access to it sits in a SIMD loop short enough to
    /// unroll (at most [`MAX_UNROLL`] vectors) and indexes it by that loop's
    /// own lane. The edge loop then updates registers, not memory. Returns
    /// the registers of each buffer.
    fn promoted(&self, blocks: Option<FeatureBlocks>) -> PResult<Vec<Option<i64>>> {
        let vl = self.vector.lanes;
        let fits = |w: i64| w >= vl && w % vl == 0 && w / vl <= MAX_UNROLL;
        let mut ok: Vec<bool> =
            self.k.scratch.iter().map(|w| self.lanes_per_pass(blocks, *w).map(fits).unwrap_or(false)).collect();
        fn walk(p: &Planner<'_>, blocks: Option<FeatureBlocks>, list: &[Stmt], ok: &mut [bool], fits: &dyn Fn(i64) -> bool) {
            for st in list {
                if let Stmt::Loop { lane, width, body } = st {
                    let w = p.lanes_per_pass(blocks, *width).unwrap_or(0);
                    let unrollable = fits(w) && p.vectorizable(*lane, body);
                    for inner in body {
                        let a = match inner {
                            Stmt::Set(_, Inst::Load(a)) | Stmt::Store(a, _) => a,
                            _ => continue,
                        };
                        if let Addr::Scratch { buf, lane: l } = a {
                            if !unrollable || l != lane {
                                if let Some(x) = ok.get_mut(*buf as usize) {
                                    *x = false;
                                }
                            }
                        }
                    }
                    walk(p, blocks, body, ok, fits);
                }
            }
        }
        for list in StmtList::ALL {
            walk(self, blocks, list.of(self.k), &mut ok, &fits);
        }
        self.k
            .scratch
            .iter()
            .zip(ok)
            .map(|(w, promote)| Ok(if promote { Some(self.lanes_per_pass(blocks, *w)? / vl) } else { None }))
            .collect()
    }

    /// A body the SIMD path can take: straight-line numeric code whose
    /// loop-carried values are only memory (no scalar accumulators but the
    /// [`reductions`]), with unit-stride or invariant addresses and
    /// operations that have vector forms with the scalar path's exact
    /// semantics.
    fn vectorizable(&self, lane: LoopVar, body: &[Stmt]) -> bool {
        let mut defined: HashSet<u32> = HashSet::new();
        let assigned: HashSet<u32> = body
            .iter()
            .filter_map(|s| match s {
                Stmt::Set(v, _) => Some(v.0),
                _ => None,
            })
            .collect();
        // A value read here must be loop-local (defined earlier in this
        // iteration) or loop-invariant (never assigned in the loop).
        let readable = |v: &Var, defined: &HashSet<u32>| defined.contains(&v.0) || !assigned.contains(&v.0);
        let num = |v: &Var| self.k.vars.get(v.0 as usize) == Some(&VarKind::Num);
        let reductions = reductions(body);
        for st in body {
            match st {
                Stmt::Set(acc, Inst::Binary(BinOp::Add, a, x)) if reductions.contains(&acc.0) && a == acc => {
                    if !readable(x, &defined) || !num(x) {
                        return false;
                    }
                }
                Stmt::Loop { .. } => return false,
                Stmt::Store(a, v) => {
                    if stride(a, lane).is_none() || !readable(v, &defined) || !num(v) {
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
                        Inst::Load(a) => stride(a, lane).is_some(),
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

    /// Whether an edge loop over `list` runs [`EDGE_UNROLL`] edges per
    /// iteration (given no rows touched ahead and no feature blocking): a
    /// body of a few statements whose feature loops are at most a cache
    /// line wide ([`EDGE_UNROLL_MAX_ROW_BYTES`]) and call no math function,
    /// where the loop's own compare, branch and counter are a large part
    /// of each edge's instructions. F = 16 f32 sum on the power-law graph,
    /// Cranelift over rustc's variant in the same run: forward 1.46 ->
    /// 1.32, backward 1.45 -> 1.16.
    fn unrolled_edges(&self, list: &[Stmt]) -> bool {
        let size = self.key.dtype.size() as i64;
        let narrow = |st: &Stmt| match st {
            Stmt::Loop { width, body, .. } => {
                self.width(*width).is_ok_and(|n| n * size <= EDGE_UNROLL_MAX_ROW_BYTES)
                    && body.iter().all(|b| !matches!(b, Stmt::Loop { .. }))
            }
            _ => true,
        };
        list.len() <= EDGE_UNROLL_MAX_STMTS && list.iter().all(narrow) && !crate::loops::calls_math(list)
    }

    /// Whether the edge loops call a math library function (`exp`, `ln`,
    /// `tanh`): a call clobbers every vector register, so whatever the edge
    /// loop keeps live across it is spilled and reloaded per edge.
    fn edges_call_math(&self) -> bool {
        use crate::loops::calls_math;
        match &self.tiles {
            // The tiles' loops (where the rows are read) call nothing.
            Some(t) => calls_math(&t.split.loops),
            None => calls_math(&self.k.pre_body) || calls_math(&self.k.body),
        }
    }

    fn touched(&self, field: usize, lanes: i64) -> TouchedField {
        let name = self.k.fields.get(field).map(|f| format!("{}.{}", f.role.name(), f.name)).unwrap_or_default();
        TouchedField { field, name, lanes }
    }

    /// The source fields whose rows the edge loop touches ahead: vectors of
    /// at least [`TOUCH_AHEAD_MIN_ROW_BYTES`], when the edge loops call no
    /// math function ([`Planner::edges_call_math`]: the touch's column
    /// pointer, chunk end and row base would be spilled around each call;
    /// attention measured 380 -> 494..619 ms forward with touches).
    fn touched_fields(&self) -> Vec<TouchedField> {
        if self.edges_call_math() {
            return Vec::new();
        }
        (0..self.k.fields.len())
            .filter_map(|f| {
                let size = self.key.storage.field(f, self.key.dtype).size() as i64;
                let decl = &self.k.fields[f];
                let n = match decl.ty {
                    Type::Vector(w) if decl.role == Role::Src => self.width(w).ok()?,
                    _ => return None,
                };
                let min = if size == 2 { TOUCH_AHEAD_MIN_HALF_ROW_BYTES } else { TOUCH_AHEAD_MIN_ROW_BYTES };
                (self.used_fields[f] && n * size >= min).then(|| self.touched(f, n))
            })
            .collect()
    }

    /// The source fields the pre-pass reads (with their row width), which
    /// it touches ahead when the body touches its rows: a softmax's score
    /// reads `a_src[j]` first in the pre-pass.
    fn pre_touched_fields(&self) -> Vec<TouchedField> {
        // Not across math calls (the touch state would be spilled).
        if crate::loops::calls_math(&self.k.pre_body) {
            return Vec::new();
        }
        let read = crate::loops::fields_read(&self.k.pre_body, self.k.fields.len());
        (0..self.k.fields.len())
            .filter(|&f| read[f] && self.k.fields[f].role == Role::Src && self.used_fields[f])
            .filter_map(|f| match self.k.fields[f].ty {
                Type::Scalar => Some(self.touched(f, 1)),
                Type::Vector(w) => self.width(w).ok().map(|n| self.touched(f, n)),
                _ => None,
            })
            .collect()
    }

    /// The source fields of the blocked width, whose later blocks' lines
    /// the first block's pass touches when there is no touch-ahead (math
    /// calls): the lines then arrive while the first block waits for its
    /// own, and the later passes, which re-walk the row's edges, find them
    /// in cache instead of paying a second round of random misses.
    fn later_block_fields(&self, b: FeatureBlocks) -> Vec<TouchedField> {
        (0..self.k.fields.len())
            .filter(|&f| {
                let decl = &self.k.fields[f];
                decl.role == Role::Src && decl.ty == Type::Vector(b.width) && self.used_fields[f]
            })
            .map(|f| self.touched(f, b.lanes))
            .collect()
    }

    /// The rows per vector of a generated stencil's interior, when it has
    /// room for one and the kernel allows ([`Planner::rows_vectorizable`]).
    fn stencil_row_vectors(&self, st: &tiga_abi::Stencil2d) -> Option<i64> {
        let vl = self.vector.lanes;
        let (_, _, inner_r, inner_c) = st.interior();
        (inner_r > 0 && inner_c >= vl && !st.offsets.is_empty() && self.rows_vectorizable()).then_some(vl)
    }

    /// The rows per vector of a CSR kernel with no edge work and no use of
    /// the degree or ranks (elementwise over rows, like an adjoint's row
    /// stage), when its statements vectorize across rows.
    fn row_only_vectors(&self) -> Option<i64> {
        let k = self.k;
        if !k.body.is_empty() || !k.pre_body.is_empty() {
            return None;
        }
        let mut counts = false;
        for list in [&k.init, &k.finish] {
            crate::loops::for_each_stmt(list, &mut |st| counts |= matches!(st, Stmt::Set(_, Inst::Degree | Inst::Rank)));
        }
        (!counts && self.rows_vectorizable()).then_some(self.vector.lanes)
    }

    /// Whether consecutive rows can run as the lanes of one vector: the
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
                Stmt::Store(a, v) => axis_stride(k, a, Axis::Rows) == Some(true) && is(v) && num(v),
                Stmt::Set(v, inst) => {
                    let (vn, reads) = (num(v), inst.operands());
                    reads.iter().all(is)
                        && match inst {
                            Inst::Const(_) | Inst::Degree | Inst::Rank => vn,
                            Inst::Load(a) => vn && axis_stride(k, a, Axis::Rows).is_some(),
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
                if let Some(d) = defined.get_mut(v.0 as usize) {
                    *d = true;
                }
            }
        }
        true
    }
}

/// What the lanes of a SIMD vector run over: the lanes of a feature loop,
/// or consecutive destination rows (a generated stencil's interior, where
/// row `i + 1`'s neighbours are row `i`'s shifted by one).
#[derive(Clone, Copy)]
pub(super) enum Axis {
    Lane(LoopVar),
    Rows,
}

/// Whether `a` steps with `lane` (unit stride), is invariant in it, or
/// steps with a stride other than 1 (`None`: the loop stays scalar).
pub(super) fn stride(a: &Addr, lane: LoopVar) -> Option<bool> {
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

/// [`stride`] along `axis`. Across rows, a scalar source or destination
/// field and a destination output step by one element (the stencil's
/// source of row `i + 1` is its source of row `i`, plus one); a scalar
/// parameter is invariant; anything else has no vector form.
pub(super) fn axis_stride(k: &LoopKernel, a: &Addr, axis: Axis) -> Option<bool> {
    match axis {
        Axis::Lane(lane) => stride(a, lane),
        Axis::Rows => match a {
            Addr::Field { field, lanes } if lanes.is_empty() => match k.fields.get(field.0 as usize)?.role {
                Role::Src | Role::Dst => Some(true),
                Role::Param => Some(false),
                Role::Edge => None,
            },
            Addr::Output { out, lane: None } => (k.outputs.get(*out as usize)?.role == Role::Dst).then_some(true),
            _ => None,
        },
    }
}

/// A numeric operation that the translator has a lane-wise form of, with
/// the scalar path's exact semantics.
fn has_vector_form(inst: &Inst) -> bool {
    matches!(
        inst,
        Inst::Unary(UnOp::Neg | UnOp::Abs | UnOp::Sqrt | UnOp::Relu, _)
            | Inst::Binary(BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Min | BinOp::Max | BinOp::LeakyRelu, ..)
    )
}

/// Which fields and outputs `list` touches.
pub(super) fn mark_used(list: &[Stmt], fields: &mut [bool], outputs: &mut [bool]) -> PResult<()> {
    for st in list {
        match st {
            Stmt::Set(_, Inst::Load(a)) | Stmt::Store(a, _) => match a {
                Addr::Field { field, .. } => {
                    *fields.get_mut(field.0 as usize).ok_or_else(|| format!("unknown field {}", field.0))? = true
                }
                Addr::Output { out, .. } | Addr::OutputMatrix { out, .. } => {
                    *outputs.get_mut(*out as usize).ok_or_else(|| format!("unknown output {out}"))? = true
                }
                Addr::Scratch { .. } => {}
            },
            Stmt::Loop { body, .. } => mark_used(body, fields, outputs)?,
            Stmt::Set(..) => {}
        }
    }
    Ok(())
}

/// One line per choice that applies (a choice not made prints nothing:
/// no feature blocks, no tiles, no touches).
impl fmt::Display for CodegenPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = &self.vector;
        let dtype = v.dtype.name();
        let realization = match &self.stencil {
            Some(st) => format!(
                "generated stencil {}x{} ({} offsets{})",
                st.rows,
                st.cols,
                st.offsets.len(),
                if st.periodic { ", periodic" } else { "" }
            ),
            None => "CSR rows".to_string(),
        };
        writeln!(f, "code-generation plan for {} ({dtype}, widths {:?}, {realization}):", self.kernel, self.widths)?;
        writeln!(f, "  vector: {dtype}x{} ({} bits)", v.lanes, v.bits)?;
        if !self.half_width.is_empty() {
            writeln!(f, "  half-width storage: {} (widened to f32 on load, rounded to nearest even on store)", self.half_width)?;
        }
        if self.untested_interior {
            writeln!(f, "  interior rows: the body without border tests")?;
        }
        if let Some(n) = self.row_vectors {
            let what = if self.stencil.is_some() { "interior rows, two vectors per iteration" } else { "no edge work" };
            writeln!(f, "  rows as vector lanes: {n} per vector ({what})")?;
        }
        if !self.feature_loops.is_empty() {
            writeln!(f, "  feature loops:")?;
        }
        for l in &self.feature_loops {
            let form = match &l.form {
                LoopForm::Scalar(why) => format!(
                    "scalar ({})",
                    match why {
                        ScalarWhy::Empty => "no lanes: nothing emitted",
                        ScalarWhy::Narrow => "narrower than a vector",
                        ScalarWhy::Ragged => "not a whole number of vectors",
                        ScalarWhy::Body => "the body has no SIMD form",
                    }
                ),
                LoopForm::Simd { unrolled, partial_sums } => {
                    let how = if *unrolled { "unrolled (an accumulator in registers)" } else { "a counted loop" };
                    let mut s = format!("SIMD, {how}");
                    if !partial_sums.is_empty() {
                        let vars: Vec<String> = partial_sums.iter().map(|x| format!("v{}", x.0)).collect();
                        s.push_str(&format!(", vector partial sums of {}", vars.join(", ")));
                    }
                    s
                }
            };
            writeln!(
                f,
                "    {:indent$}{} k{} over w{} ({}): {form}",
                "",
                l.list.name(),
                l.lane.0,
                l.width.0,
                count(l.lanes, "lane"),
                indent = 2 * l.depth
            )?;
        }
        if let Some(b) = &self.feature_blocks {
            writeln!(
                f,
                "  feature blocks: w{} in blocks of {} lanes, {} passes over each {}'s edges",
                b.width.0,
                b.block,
                b.lanes / b.block,
                if self.tiles.is_some() { "tile" } else { "row" }
            )?;
        }
        let promoted: Vec<String> = self
            .promoted
            .iter()
            .enumerate()
            .filter_map(|(b, r)| r.map(|r| format!("scratch{b} ({})", count(r, "vector"))))
            .collect();
        if !promoted.is_empty() {
            writeln!(f, "  accumulators in registers: {}", promoted.join(", "))?;
        }
        let per = |n: i64| format!("{} per iteration", count(n, "edge"));
        if let Some(n) = self.edge_unroll.pre_pass {
            writeln!(f, "  pre-pass edge loop: {}", per(n))?;
        }
        if let Some(n) = self.edge_unroll.body {
            writeln!(f, "  edge loop: {}", per(n))?;
        }
        if let Some(t) = &self.tiles {
            writeln!(f, "  edge tiles: {} edges, {} carried per edge", t.edges, count(t.split.carried.len() as i64, "value"))?;
        }
        let fields = |fs: &[TouchedField]| -> String {
            fs.iter().map(|t| format!("{} ({})", t.name, count(t.lanes, "lane"))).collect::<Vec<_>>().join(", ")
        };
        if let Some(t) = &self.touch_ahead {
            writeln!(f, "  touches ahead: {} edges, the rows of {}", t.edges, fields(&t.fields))?;
            if !t.pre_fields.is_empty() {
                writeln!(f, "  pre-pass touches ahead: {}", fields(&t.pre_fields))?;
            }
        }
        if !self.touch_later_blocks.is_empty() {
            writeln!(f, "  the first block touches the later blocks' lines of {}", fields(&self.touch_later_blocks))?;
        }
        Ok(())
    }
}

/// `1 lane`, `4 lanes`.
fn count(n: i64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}
