//! A kernel call: binding named fields to the kernel's declaration, checking
//! every size, and running the JIT variant over row chunks in parallel.

use std::collections::BTreeMap;

use tiga_compiler::back::abi::Stencil2d;
use tiga_compiler::back::cranelift::{RawArgs, VariantKey};
use tiga_compiler::bind::{bind_shapes, output_shapes, Extents};
use tiga_compiler::interp::{interpret_in_order, Array};
use tiga_compiler::ir::{self, Role};
use tiga_runtime::{Data, DType, Graph, Tensor, TensorView};

use crate::{Error, Kernel, Result};

pub(crate) fn ir_dtype(d: DType) -> ir::DType {
    match d {
        DType::F32 => ir::DType::F32,
        DType::F64 => ir::DType::F64,
    }
}

/// The fields and parameters of one call, by role and name.
#[derive(Debug, Default, Clone)]
pub struct Inputs<'a> {
    fields: BTreeMap<(Role, String), TensorView<'a>>,
}

impl<'a> Inputs<'a> {
    pub fn new() -> Inputs<'a> {
        Inputs::default()
    }
    fn with(mut self, role: Role, name: &str, v: impl Into<TensorView<'a>>) -> Self {
        self.fields.insert((role, name.to_string()), v.into());
        self
    }
    /// A source-node field (`[num_src]` or `[num_src, F]`).
    pub fn src(self, name: &str, v: impl Into<TensorView<'a>>) -> Self {
        self.with(Role::Src, name, v)
    }
    /// A destination-node field (`[num_dst]` or `[num_dst, F]`).
    pub fn dst(self, name: &str, v: impl Into<TensorView<'a>>) -> Self {
        self.with(Role::Dst, name, v)
    }
    /// An edge field in the user's edge order (`[num_edges]` or `[num_edges, F]`).
    pub fn edge(self, name: &str, v: impl Into<TensorView<'a>>) -> Self {
        self.with(Role::Edge, name, v)
    }
    /// A parameter (`[]`/`[1]`, `[F]` or `[R, C]`).
    pub fn param(self, name: &str, v: impl Into<TensorView<'a>>) -> Self {
        self.with(Role::Param, name, v)
    }
    /// Whether a field of this role and name was given.
    pub fn has(&self, role: Role, name: &str) -> bool {
        self.fields.contains_key(&(role, name.to_string()))
    }

    /// Add a field by role (for tools that read roles from flags).
    pub fn with_role(self, role: Role, name: &str, v: impl Into<TensorView<'a>>) -> Self {
        self.with(role, name, v)
    }
}

/// A call's outputs, by name, in declaration order.
#[derive(Debug, Clone)]
pub struct Outputs {
    pub items: Vec<(String, Tensor)>,
}

impl Outputs {
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.items.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }
    /// The only output, or the one named `out`.
    pub fn out(&self) -> Option<&Tensor> {
        self.get("out").or(if self.items.len() == 1 { self.items.first().map(|(_, t)| t) } else { None })
    }
}

/// Fields in declaration order, checked against the kernel and the graph.
pub(crate) struct Bound<'b, 'a> {
    pub views: Vec<&'b TensorView<'a>>,
    pub dtype: DType,
    pub widths: Vec<usize>,
    pub extents: Extents,
}

impl Bound<'_, '_> {
    /// The fields' base pointers, in declaration order (`RawArgs::fields`).
    pub(crate) fn field_ptrs(&self) -> Vec<*const u8> {
        self.views
            .iter()
            .map(|v| match v.data() {
                Data::F32(s) => s.as_ptr() as *const u8,
                Data::F64(s) => s.as_ptr() as *const u8,
            })
            .collect()
    }
}

/// Zeroed output arrays (compiled kernels may skip writing zeros).
pub(crate) fn zeroed_outputs(dtype: DType, shapes: &[Vec<usize>]) -> Result<Vec<Tensor>> {
    shapes.iter().map(|s| Tensor::zeros(dtype, s.clone()).map_err(|e| Error::Call(e.to_string()))).collect()
}

fn describe_missing(k: &ir::Kernel, i: usize, e: &Extents) -> String {
    tiga_compiler::bind::expected_shape(k, i, e)
}

pub(crate) fn bind<'b, 'a>(k: &ir::Kernel, graph: &Graph, inputs: &'b Inputs<'a>) -> Result<Bound<'b, 'a>> {
    let extents = Extents { num_src: graph.num_src(), num_dst: graph.num_dst(), num_edges: graph.num_edges() };
    bind_extents(k, extents, inputs)
}

pub(crate) fn bind_extents<'b, 'a>(k: &ir::Kernel, extents: Extents, inputs: &'b Inputs<'a>) -> Result<Bound<'b, 'a>> {
    for (role, name) in inputs.fields.keys() {
        if k.field_by_name(*role, name).is_none() {
            let known: Vec<String> = k.fields.iter().filter(|f| f.role == *role).map(|f| f.name.clone()).collect();
            let hint = if known.is_empty() {
                format!(" (it has no {} fields)", role.name())
            } else {
                format!(" (its {} fields: {})", role.name(), known.join(", "))
            };
            return Err(Error::Bind(tiga_compiler::bind::BindError::UnknownField {
                kernel: k.name.clone(),
                role: role.name(),
                name: name.clone(),
                hint,
            }));
        }
    }
    let mut views = Vec::with_capacity(k.fields.len());
    for (i, f) in k.fields.iter().enumerate() {
        match inputs.fields.get(&(f.role, f.name.clone())) {
            Some(v) => views.push(v),
            None => {
                return Err(Error::Bind(tiga_compiler::bind::BindError::MissingField {
                    kernel: k.name.clone(),
                    role: f.role.name(),
                    name: f.name.clone(),
                    expected: describe_missing(k, i, &extents),
                }))
            }
        }
    }
    let dtype = views.first().map(|v| v.dtype()).unwrap_or(DType::F32);
    for (f, v) in k.fields.iter().zip(&views) {
        if v.dtype() != dtype {
            return Err(Error::Call(format!(
                "{} field `{}` is {}, but `{}` is {}: a call runs in one dtype, pass every field as f32 or every field as f64",
                f.role.name(),
                f.name,
                v.dtype(),
                k.fields[0].name,
                dtype
            )));
        }
    }
    let shapes: Vec<&[usize]> = views.iter().map(|v| v.shape()).collect();
    let widths = bind_shapes(k, &extents, &shapes)?;
    Ok(Bound { views, dtype, widths, extents })
}

/// How many row chunks a call with parameter outputs uses: fixed, so that
/// parameter sums are reduced in the same order on every machine.
const PARAM_CHUNKS: usize = 64;

fn data_ptr(t: &mut Tensor) -> *mut u8 {
    match t.data_mut() {
        tiga_runtime::DataMut::F32(s) => s.as_mut_ptr() as *mut u8,
        tiga_runtime::DataMut::F64(s) => s.as_mut_ptr() as *mut u8,
    }
}

fn add_into(acc: &mut Tensor, part: &Tensor) {
    match (acc.data_mut(), part.data()) {
        (tiga_runtime::DataMut::F32(a), Data::F32(p)) => a.iter_mut().zip(p).for_each(|(x, y)| *x += y),
        (tiga_runtime::DataMut::F64(a), Data::F64(p)) => a.iter_mut().zip(p).for_each(|(x, y)| *x += y),
        _ => {}
    }
}

struct SharedPtrs(Vec<*mut u8>);
// SAFETY: only copied per chunk; each chunk swaps in its own parameter
// buffers and writes destination/edge rows no other chunk writes.
unsafe impl Sync for SharedPtrs {}
unsafe impl Send for SharedPtrs {}

/// Partial sums of parameter outputs: one set of buffers per fixed block of
/// rows. Blocks depend only on the number of rows (64 of them), each block
/// accumulates its rows in order, and the blocks are added in order at the
/// end, so a parameter gradient has the same bits however the rows were
/// visited: all at once in memory, or page by page from disk.
pub(crate) struct ParamPartials {
    block_rows: usize,
    outs: Vec<usize>,
    parts: Vec<Option<Vec<Tensor>>>,
    /// Whether rows longer than [`SPLIT_EDGES`] may be cut into segments
    /// summed afterwards (see [`splittable`]).
    split: bool,
}

/// A row with more edges than this is cut into segments of this many edges
/// (when the kernel allows it), so one huge row (a power-law hub, or the
/// transpose of one) does not leave one worker doing it alone. Fixed, so
/// results do not depend on the machine.
const SPLIT_EDGES: u64 = 1 << 16;

/// A kernel whose output row is the plain sum of its messages (reducer
/// `sum`, no `node` or an identity one, destination outputs only): a row's
/// edges can be cut into segments whose partial outputs add up.
pub(crate) fn splittable(k: &ir::Kernel) -> bool {
    let identity_node = match &k.node {
        None => true,
        Some(n) => n.outputs.iter().enumerate().all(|(i, v)| matches!(n.node(*v).op, ir::Op::Input(j) if j as usize == i)),
    };
    // A segment starts its own row: an edge's rank or a scan would restart.
    let row_relative = k.edge.nodes.iter().any(|n| matches!(n.op, ir::Op::Rank | ir::Op::Scan(_)));
    k.reducer.kind == ir::ReducerKind::Sum
        && !row_relative
        && identity_node
        && k.outputs.iter().all(|o| o.role == Role::Dst)
        && k.outputs.len() == k.message_types().len()
}

impl ParamPartials {
    pub(crate) fn new(num_rows: usize, param_outs: &[usize]) -> ParamPartials {
        let block_rows = num_rows.div_ceil(PARAM_CHUNKS).max(1);
        let blocks = num_rows.div_ceil(block_rows);
        ParamPartials { block_rows, outs: param_outs.to_vec(), parts: (0..blocks).map(|_| None).collect(), split: false }
    }

    /// Allow cutting huge rows (for kernels that are [`splittable`]).
    pub(crate) fn with_split(mut self, split: bool) -> ParamPartials {
        self.split = split;
        self
    }

    /// Add every block's partials into `outs`, in block order.
    pub(crate) fn finish(self, outs: &mut [Tensor]) {
        for part in self.parts.into_iter().flatten() {
            for (t, &o) in part.iter().zip(&self.outs) {
                add_into(&mut outs[o], t);
            }
        }
    }
}

/// Run `entry` over the rows `base .. base + offsets.len() - 1` (absolute
/// row numbers; `offsets` is the slice of row offsets for them), in parallel
/// chunks balanced by edge count, writing `outs`. Parameter outputs go to
/// `partials` (per fixed row block; see [`ParamPartials`]).
///
/// # Safety
/// `raw` (except `outputs`, set here) must hold pointers valid for every row
/// and edge position of these rows, as `entry`'s variant expects.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn execute_rows(
    entry: tiga_compiler::back::abi::EntryFn,
    mut raw: RawArgs,
    offsets: &[u64],
    base: usize,
    partials: &mut ParamPartials,
    shapes: &[Vec<usize>],
    dtype: DType,
    outs: &mut [Tensor],
) -> Result<()> {
    let out_ptrs: Vec<*mut u8> = outs.iter_mut().map(data_ptr).collect();
    raw.outputs = out_ptrs.as_ptr();
    if partials.outs.is_empty() {
        let n = offsets.len().saturating_sub(1);
        let huge: Vec<usize> =
            if partials.split { (0..n).filter(|&r| offsets[r + 1] - offsets[r] > SPLIT_EDGES).collect() } else { vec![] };
        let args = SharedArgs(raw);
        let args = &args;
        tiga_runtime::for_each_row_chunk(offsets, |rows| {
            if huge.is_empty() {
                // SAFETY: the caller's contract; chunks write disjoint rows.
                unsafe { entry(&args.0, (base + rows.start) as u64, (base + rows.end) as u64) };
                return;
            }
            // Whole rows, skipping the ones cut into segments below.
            let mut s = rows.start;
            for r in rows.clone() {
                if huge.binary_search(&r).is_ok() {
                    if s < r {
                        // SAFETY: the caller's contract; chunks write disjoint rows.
                        unsafe { entry(&args.0, (base + s) as u64, (base + r) as u64) };
                    }
                    s = r + 1;
                }
            }
            if s < rows.end {
                // SAFETY: as above.
                unsafe { entry(&args.0, (base + s) as u64, (base + rows.end) as u64) };
            }
        });
        for &r in &huge {
            // SAFETY: the caller's contract, for the row's edge segments.
            unsafe { split_row(entry, raw, offsets[r], offsets[r + 1], base + r, shapes, dtype, outs)? };
        }
        return Ok(());
    }
    let end = base + offsets.len().saturating_sub(1);
    let br = partials.block_rows;
    let param_outs = partials.outs.clone();
    use rayon::prelude::*;
    let shared = SharedArgs(raw);
    let out_ptrs_base = SharedPtrs(out_ptrs.clone());
    let (shared, ptrs_base) = (&shared, &out_ptrs_base);
    partials
        .parts
        .par_iter_mut()
        .enumerate()
        .filter(|(b, _)| b * br < end && (b + 1) * br > base)
        .map(|(b, slot)| -> Result<()> {
            let (s, e) = ((b * br).max(base), ((b + 1) * br).min(end));
            if slot.is_none() {
                *slot = Some(
                    param_outs
                        .iter()
                        .map(|&o| Tensor::zeros(dtype, shapes[o].clone()).map_err(|er| Error::Call(er.to_string())))
                        .collect::<Result<_>>()?,
                );
            }
            let mine = slot.as_mut().ok_or_else(|| Error::Call("internal: missing partials".into()))?;
            let mut ptrs = ptrs_base.0.clone();
            for (t, &o) in mine.iter_mut().zip(&param_outs) {
                ptrs[o] = data_ptr(t);
            }
            let mut args = shared.0;
            args.outputs = ptrs.as_ptr();
            // SAFETY: the caller's contract; this block's parameter outputs
            // point at buffers only this block writes, its rows are its own.
            unsafe { entry(&args, s as u64, e as u64) };
            Ok(())
        })
        .collect::<Result<Vec<()>>>()?;
    Ok(())
}

/// One huge row `i` of a [`splittable`] kernel, in segments of
/// [`SPLIT_EDGES`] edges run in parallel: each sees a one-row CSR (its
/// `offsets[i], offsets[i+1]` are the segment's bounds) and writes row `i`
/// of private outputs; the segments' rows are then added in order.
///
/// # Safety
/// As [`execute_rows`].
#[allow(clippy::too_many_arguments)]
unsafe fn split_row(
    entry: tiga_compiler::back::abi::EntryFn,
    raw: RawArgs,
    first: u64,
    last: u64,
    i: usize,
    shapes: &[Vec<usize>],
    dtype: DType,
    outs: &mut [Tensor],
) -> Result<()> {
    use rayon::prelude::*;
    let widths: Vec<usize> = shapes.iter().map(|s| s.iter().skip(1).product::<usize>()).collect();
    let segs: Vec<(u64, u64)> = (first..last).step_by(SPLIT_EDGES as usize).map(|a| (a, (a + SPLIT_EDGES).min(last))).collect();
    let shared = SharedArgs(raw);
    let shared = &shared;
    let parts: Vec<Result<Vec<Tensor>>> = segs
        .par_iter()
        .map(|&(a, b)| -> Result<Vec<Tensor>> {
            let mut mine: Vec<Tensor> = widths
                .iter()
                .map(|&w| Tensor::zeros(dtype, vec![w.max(1)]).map_err(|e| Error::Call(e.to_string())))
                .collect::<Result<_>>()?;
            let bounds = [a, b];
            // Row i of these arrays is element 0 of the segment's buffers.
            let ptrs: Vec<*mut u8> = mine
                .iter_mut()
                .zip(&widths)
                .map(|(t, &w)| data_ptr(t).wrapping_sub(i * w * dtype.size()))
                .collect();
            let mut args = shared.0;
            args.offsets = bounds.as_ptr().wrapping_sub(i);
            args.outputs = ptrs.as_ptr();
            // SAFETY: the kernel reads offsets[i], offsets[i+1] (the bounds),
            // edges a..b of the real CSR and row i of the real fields, and
            // writes row i of the outputs (the private buffers).
            unsafe { entry(&args, i as u64, i as u64 + 1) };
            Ok(mine)
        })
        .collect();
    for part in parts {
        for ((t, out), &w) in part?.iter().zip(outs.iter_mut()).zip(&widths) {
            match (out.data_mut(), t.data()) {
                (tiga_runtime::DataMut::F32(o), Data::F32(p)) => {
                    o[i * w..(i + 1) * w].iter_mut().zip(p).for_each(|(x, y)| *x += y)
                }
                (tiga_runtime::DataMut::F64(o), Data::F64(p)) => {
                    o[i * w..(i + 1) * w].iter_mut().zip(p).for_each(|(x, y)| *x += y)
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Raw pointers handed to compiled code. Rows are disjoint across chunks, so
/// concurrent calls write disjoint output rows.
struct SharedArgs(RawArgs);
// SAFETY: the pointers stay valid for the whole parallel loop (they borrow
// buffers owned by the caller's frame), inputs are only read, and each chunk
// writes only its own output rows.
unsafe impl Sync for SharedArgs {}
unsafe impl Send for SharedArgs {}

impl Kernel {
    /// Run the kernel on `graph` with these fields. Returns the outputs in
    /// the call's dtype.
    pub fn run(&self, graph: &Graph, inputs: &Inputs<'_>) -> Result<Outputs> {
        let b = bind(self.captured(), graph, inputs)?;
        // The macro's ahead-of-time variant when one fits, else the JIT's.
        let jit_variant;
        let entry: tiga_compiler::back::abi::EntryFn = match self.aot_variant(b.dtype, &b.widths) {
            Some(v) => v.entry,
            None => {
                jit_variant = self.variant(b.dtype, &b.widths, graph.edge_ids().is_some())?.0;
                jit_variant.entry()
            }
        };
        let shapes = output_shapes(self.captured(), &b.extents, &b.widths);
        let mut outs = zeroed_outputs(b.dtype, &shapes)?;
        let field_ptrs = b.field_ptrs();
        let param_outs: Vec<usize> = self.captured().outputs_of(Role::Param).iter().map(|(i, _)| *i).collect();
        let raw = RawArgs {
            offsets: graph.offsets().as_ptr(),
            cols: graph.cols().as_ptr(),
            edge_ids: graph.edge_ids().map(|e| e.as_ptr()).unwrap_or(std::ptr::null()),
            fields: field_ptrs.as_ptr(),
            outputs: std::ptr::null(),
        };
        let mut partials = ParamPartials::new(graph.num_dst(), &param_outs).with_split(splittable(self.captured()));
        // SAFETY: the variant was compiled for this kernel, dtype, widths and
        // edge-order flag; `bind` checked every field's length against the
        // graph, and the graph's CSR was validated when built.
        unsafe { execute_rows(entry, raw, graph.offsets(), 0, &mut partials, &shapes, b.dtype, &mut outs)? };
        partials.finish(&mut outs);
        let names = self.captured().outputs.iter().map(|o| o.name.clone());
        Ok(Outputs { items: names.zip(outs).collect() })
    }

    /// Run the f64 reference interpreter on the same call (slow; for tests
    /// and for checking a result).
    pub fn run_reference(&self, graph: &Graph, inputs: &Inputs<'_>) -> Result<Outputs> {
        let b = bind(self.captured(), graph, inputs)?;
        // Rows are visited in this graph's CSR order (a row-reversed graph
        // folds right to left); edge fields follow the user's edge ids.
        let mut edges: Vec<(u32, u32)> = Vec::with_capacity(graph.num_edges());
        let mut ids: Vec<usize> = Vec::with_capacity(graph.num_edges());
        for i in 0..graph.num_dst() {
            for p in graph.row(i) {
                edges.push((graph.cols()[p], i as u32));
                ids.push(graph.edge_id(p) as usize);
            }
        }
        let arrays: Vec<Array> = b.views.iter().map(|v| Array::new(v.shape().to_vec(), v.to_f64_vec())).collect();
        let outs = interpret_in_order(self.captured(), graph.num_src(), graph.num_dst(), &edges, Some(&ids), &arrays)?;
        let names = self.captured().outputs.iter().map(|o| o.name.clone());
        let tensors = outs
            .into_iter()
            .map(|a| Tensor::from_f64(a.shape, a.data).map_err(|e| Error::Call(e.to_string())))
            .collect::<Result<Vec<_>>>()?;
        Ok(Outputs { items: names.zip(tensors).collect() })
    }
}

/// The number of in-grid neighbours of a generated stencil: its edge count.
fn stencil_edges(st: &Stencil2d) -> usize {
    let (r, c) = (st.rows as i64, st.cols as i64);
    st.offsets
        .iter()
        .map(|&(dr, dc)| {
            if st.periodic {
                (r * c) as usize
            } else {
                ((r - dr.abs()).max(0) * (c - dc.abs()).max(0)) as usize
            }
        })
        .sum()
}

impl Kernel {
    /// Run on a generated two-dimensional stencil: each node's neighbours are
    /// computed from its index (no CSR is built or read). Gives the same
    /// numbers, bit for bit, as [`Kernel::run`] on `Graph::stencil` of the same
    /// shape and offsets. Kernels with edge fields need the CSR realization.
    pub fn run_stencil(&self, st: &Stencil2d, inputs: &Inputs<'_>) -> Result<Outputs> {
        let k = self.captured();
        if k.fields.iter().any(|f| f.role == Role::Edge) {
            return Err(Error::Call(format!(
                "kernel `{}` reads edge fields; a generated stencil has none (build the CSR with Graph::stencil)",
                k.name
            )));
        }
        if st.rows == 0 || st.cols == 0 {
            return Err(Error::Call("a generated stencil needs rows > 0 and cols > 0".into()));
        }
        let n = (st.rows as usize).checked_mul(st.cols as usize).ok_or_else(|| Error::Call("stencil too large".into()))?;
        let extents = Extents { num_src: n, num_dst: n, num_edges: stencil_edges(st) };
        let b = bind_extents(k, extents, inputs)?;
        let key = VariantKey { stencil: Some(st.clone()), ..self.variant_key(ir_dtype(b.dtype), b.widths.clone(), false) };
        let (variant, _) = crate::jit().variant(self.loop_kernel(), &key)?;
        let shapes = output_shapes(k, &b.extents, &b.widths);
        let mut outs = zeroed_outputs(b.dtype, &shapes)?;
        if !k.outputs_of(Role::Param).is_empty() {
            return Err(Error::Call("parameter outputs are not supported on generated stencils yet".into()));
        }
        let field_ptrs = b.field_ptrs();
        let out_ptrs: Vec<*mut u8> = outs.iter_mut().map(data_ptr).collect();
        let args = SharedArgs(RawArgs {
            offsets: std::ptr::null(),
            cols: std::ptr::null(),
            edge_ids: std::ptr::null(),
            fields: field_ptrs.as_ptr(),
            outputs: out_ptrs.as_ptr(),
        });
        let args = &args;
        // Uniform rows: equal row ranges balance.
        let parts = (rayon::current_num_threads() * 4).max(1);
        let step = n.div_ceil(parts).max(1);
        use rayon::prelude::*;
        (0..n).step_by(step).collect::<Vec<_>>().par_iter().for_each(|&start| {
            let end = (start + step).min(n);
            // SAFETY: compiled for this kernel, dtype, widths and stencil;
            // `bind_extents` checked every field against the grid's size.
            unsafe { variant.run(&args.0, start as u64..end as u64) };
        });
        let names = k.outputs.iter().map(|o| o.name.clone());
        Ok(Outputs { items: names.zip(outs).collect() })
    }
}
