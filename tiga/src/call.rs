//! A kernel call: binding named fields to the kernel's declaration, checking
//! every size, and running the JIT variant over row chunks in parallel.

use std::collections::BTreeMap;

use tiga_compiler::back::abi::Stencil2d;
use tiga_compiler::back::cranelift::{RawArgs, VariantKey};
use tiga_compiler::bind::{bind_shapes, output_shapes, Extents};
use tiga_compiler::interp::{interpret_in_order, Array};
use tiga_compiler::ir::{self, Role};
use tiga_compiler::loops::LoopKernel;
use tiga_runtime::{DType, Data, Graph, Tensor, TensorView};

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

/// Output arrays for a call of `k` that runs every row: zeros, except for
/// outputs the kernel overwrites in every row
/// ([`LoopKernel::overwrites_output`]), which may hold a reused buffer's
/// old values ([`Tensor::for_overwrite`]; no zero pass). Other outputs
/// must start at zero: parameter outputs accumulate, and compiled kernels
/// may skip writing zeros.
pub(crate) fn output_buffers(k: &LoopKernel, dtype: DType, shapes: &[Vec<usize>]) -> Result<Vec<Tensor>> {
    (0..shapes.len())
        .map(|o| {
            let shape = shapes[o].clone();
            let t = if k.overwrites_output(o as u32) { Tensor::for_overwrite(dtype, shape) } else { Tensor::zeros(dtype, shape) };
            t.map_err(|e| Error::Call(e.to_string()))
        })
        .collect()
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

pub(crate) fn data_ptr(t: &mut Tensor) -> *mut u8 {
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
// SAFETY: only copied per piece of work; each piece swaps in its own
// parameter buffers and writes destination/edge rows no other piece writes.
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
    parts: Vec<std::sync::Mutex<BlockPart>>,
    /// Whether rows longer than [`SPLIT_EDGES`] may be cut into segments
    /// summed afterwards (see [`splittable`]).
    split: bool,
}

/// One block's partial sums, and the row its next piece must start at: a
/// block cut by a page boundary is run as two pieces, which may be picked by
/// two workers, and the second waits for the first so that the block's rows
/// are added in order.
struct BlockPart {
    next_row: usize,
    sums: Option<Vec<Tensor>>,
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

/// `BlockPart::next_row` of a block whose earlier piece failed.
const FAILED_BLOCK: usize = usize::MAX;

/// One piece of a call's rows (absolute row numbers), in the order a paged
/// run claims them.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Work {
    /// Whole rows.
    Rows(std::ops::Range<usize>),
    /// Rows of one parameter block (its index), added to that block's sums.
    Block(usize, std::ops::Range<usize>),
    /// One row longer than [`SPLIT_EDGES`], cut into edge segments.
    Split(usize),
}

impl ParamPartials {
    pub(crate) fn new(num_rows: usize, param_outs: &[usize]) -> ParamPartials {
        let block_rows = num_rows.div_ceil(PARAM_CHUNKS).max(1);
        let blocks = num_rows.div_ceil(block_rows);
        let parts = (0..blocks).map(|b| std::sync::Mutex::new(BlockPart { next_row: b * block_rows, sums: None })).collect();
        ParamPartials { block_rows, outs: param_outs.to_vec(), parts, split: false }
    }

    /// Allow cutting huge rows (for kernels that are [`splittable`]).
    pub(crate) fn with_split(mut self, split: bool) -> ParamPartials {
        self.split = split;
        self
    }

    /// The work for rows `base .. base + offsets.len() - 1` (`offsets` is
    /// their slice of row offsets), in row order: the parameter blocks they
    /// meet when the kernel has parameter outputs; otherwise chunks balanced
    /// by edge count (about four per thread), huge rows apart.
    pub(crate) fn work(&self, offsets: &[u64], base: usize) -> Vec<Work> {
        let n = offsets.len().saturating_sub(1);
        let end = base + n;
        if !self.outs.is_empty() {
            let br = self.block_rows;
            return (base / br..end.div_ceil(br))
                .map(|b| Work::Block(b, (b * br).max(base)..((b + 1) * br).min(end)))
                .filter(|w| matches!(w, Work::Block(_, r) if !r.is_empty()))
                .collect();
        }
        let mut work = Vec::new();
        for rows in tiga_runtime::exec::row_chunks(offsets) {
            let mut s = rows.start;
            if self.split {
                for r in rows.clone() {
                    if offsets[r + 1] - offsets[r] > SPLIT_EDGES {
                        if s < r {
                            work.push(Work::Rows(base + s..base + r));
                        }
                        work.push(Work::Split(base + r));
                        s = r + 1;
                    }
                }
            }
            if s < rows.end {
                work.push(Work::Rows(base + s..base + rows.end));
            }
        }
        work
    }

    /// Add every block's partials into `outs`, in block order.
    pub(crate) fn finish(self, outs: &mut [Tensor]) {
        for part in self.parts {
            let part = part.into_inner().unwrap_or_else(|p| p.into_inner());
            for (t, &o) in part.sums.iter().flatten().zip(&self.outs) {
                add_into(&mut outs[o], t);
            }
        }
    }
}

/// What runs pieces of work: the compiled entry, the output buffers and the
/// parameter partials. Shared by the workers of a call.
pub(crate) struct RowRunner<'a> {
    pub(crate) entry: tiga_compiler::back::abi::EntryFn,
    pub(crate) shapes: &'a [Vec<usize>],
    pub(crate) dtype: DType,
    out_ptrs: SharedPtrs,
    pub(crate) partials: ParamPartials,
}

impl<'a> RowRunner<'a> {
    /// A runner writing `outs`, which must outlive every [`RowRunner::run`]
    /// and not be touched otherwise until the runner is finished.
    pub(crate) fn new(
        entry: tiga_compiler::back::abi::EntryFn,
        shapes: &'a [Vec<usize>],
        dtype: DType,
        outs: &mut [Tensor],
        partials: ParamPartials,
    ) -> RowRunner<'a> {
        RowRunner { entry, shapes, dtype, out_ptrs: SharedPtrs(outs.iter_mut().map(data_ptr).collect()), partials }
    }

    /// Run one piece of work. `offsets` is the slice of row offsets for the
    /// rows `base ..` that hold the piece's rows.
    ///
    /// # Safety
    /// `raw` (except `outputs`, set here) must hold pointers valid for every
    /// row and edge position of the piece's rows, as `entry`'s variant
    /// expects; pieces running at the same time must not share rows; the
    /// outputs given to [`RowRunner::new`] must still be alive.
    pub(crate) unsafe fn run(&self, mut raw: RawArgs, offsets: &[u64], base: usize, work: &Work) -> Result<()> {
        match work {
            Work::Rows(rows) => {
                raw.outputs = self.out_ptrs.0.as_ptr();
                // SAFETY: the caller's contract; these rows are this piece's.
                unsafe { (self.entry)(&raw, rows.start as u64, rows.end as u64) };
                Ok(())
            }
            Work::Split(r) => {
                let (first, last) = (offsets[r - base], offsets[r - base + 1]);
                // SAFETY: the caller's contract, for the row's edge segments.
                unsafe { self.split_row(raw, first, last, *r) }
            }
            Work::Block(b, rows) => {
                let slot = self.partials.parts.get(*b).ok_or_else(|| Error::Call("internal: missing partials".into()))?;
                // The block's earlier piece runs first (it was claimed
                // first, and is running or done).
                let mut part = loop {
                    let part = slot.lock().map_err(|_| Error::Call("internal: a worker panicked".into()))?;
                    if part.next_row == rows.start {
                        break part;
                    }
                    if part.next_row == FAILED_BLOCK {
                        return Err(Error::Call(format!("rows {rows:?}: an earlier piece of their parameter block failed")));
                    }
                    drop(part);
                    std::thread::yield_now();
                };
                if part.sums.is_none() {
                    let sums = self
                        .partials
                        .outs
                        .iter()
                        .map(|&o| Tensor::zeros(self.dtype, self.shapes[o].clone()).map_err(|er| Error::Call(er.to_string())))
                        .collect::<Result<_>>();
                    match sums {
                        Ok(s) => part.sums = Some(s),
                        Err(e) => {
                            // The block's later pieces would wait forever.
                            part.next_row = FAILED_BLOCK;
                            return Err(e);
                        }
                    }
                }
                let mut ptrs = self.out_ptrs.0.clone();
                for (t, &o) in part.sums.iter_mut().flatten().zip(&self.partials.outs) {
                    ptrs[o] = data_ptr(t);
                }
                raw.outputs = ptrs.as_ptr();
                // SAFETY: the caller's contract; this block's parameter
                // outputs point at buffers only this piece writes now (the
                // lock is held), its rows are its own.
                unsafe { (self.entry)(&raw, rows.start as u64, rows.end as u64) };
                part.next_row = rows.end;
                Ok(())
            }
        }
    }

    /// One huge row `i` of a [`splittable`] kernel, in segments of
    /// [`SPLIT_EDGES`] edges run in parallel: each sees a one-row CSR (its
    /// `offsets[i], offsets[i+1]` are the segment's bounds) and writes row
    /// `i` of private outputs; the segments' rows are then added in order.
    ///
    /// # Safety
    /// As [`RowRunner::run`].
    unsafe fn split_row(&self, raw: RawArgs, first: u64, last: u64, i: usize) -> Result<()> {
        use rayon::prelude::*;
        let (entry, dtype) = (self.entry, self.dtype);
        let widths: Vec<usize> = self.shapes.iter().map(|s| s.iter().skip(1).product::<usize>()).collect();
        let segs: Vec<(u64, u64)> =
            (first..last).step_by(SPLIT_EDGES as usize).map(|a| (a, (a + SPLIT_EDGES).min(last))).collect();
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
                let ptrs: Vec<*mut u8> =
                    mine.iter_mut().zip(&widths).map(|(t, &w)| data_ptr(t).wrapping_sub(i * w * dtype.size())).collect();
                let mut args = shared.0;
                args.offsets = bounds.as_ptr().wrapping_sub(i);
                args.outputs = ptrs.as_ptr();
                // SAFETY: the kernel reads offsets[i], offsets[i+1] (the
                // bounds), edges a..b of the real CSR and row i of the real
                // fields, and writes row i of the outputs (the private
                // buffers).
                unsafe { entry(&args, i as u64, i as u64 + 1) };
                Ok(mine)
            })
            .collect();
        let parts = parts.into_iter().collect::<Result<Vec<_>>>()?;
        for (o, (&out, &w)) in self.out_ptrs.0.iter().zip(&widths).enumerate() {
            // Row i starts from zero here, not from what the output held: an
            // output the kernel overwrites comes without a zero fill
            // (`output_buffers`).
            // SAFETY: row i of each output is this piece's alone, and the
            // output holds it (the caller's contract).
            match dtype {
                DType::F32 => {
                    let row = unsafe { std::slice::from_raw_parts_mut((out as *mut f32).add(i * w), w) };
                    sum_into(row, parts.iter().filter_map(|p| p[o].as_f32()));
                }
                DType::F64 => {
                    let row = unsafe { std::slice::from_raw_parts_mut((out as *mut f64).add(i * w), w) };
                    sum_into(row, parts.iter().filter_map(|p| p[o].as_f64()));
                }
            }
        }
        Ok(())
    }

    /// Add the parameter partials into the outputs.
    pub(crate) fn finish(self, outs: &mut [Tensor]) {
        self.partials.finish(outs);
    }
}

/// `row = Σ parts`, in order, from zero.
fn sum_into<'p, T: Copy + Default + std::ops::AddAssign + 'p>(row: &mut [T], parts: impl Iterator<Item = &'p [T]>) {
    row.fill(T::default());
    for p in parts {
        row.iter_mut().zip(p).for_each(|(x, y)| *x += *y);
    }
}

/// Run `entry` over the rows `base .. base + offsets.len() - 1` (absolute
/// row numbers; `offsets` is the slice of row offsets for them), every piece
/// of [`ParamPartials::work`] in parallel.
///
/// # Safety
/// As [`RowRunner::run`], for every row.
pub(crate) unsafe fn execute_rows(runner: &RowRunner<'_>, raw: RawArgs, offsets: &[u64], base: usize) -> Result<()> {
    use rayon::prelude::*;
    let shared = SharedArgs(raw);
    let shared = &shared;
    runner
        .partials
        .work(offsets, base)
        .into_par_iter()
        // SAFETY: the caller's contract; pieces have disjoint rows.
        .map(|w| unsafe { runner.run(shared.0, offsets, base, &w) })
        .collect::<Result<Vec<()>>>()?;
    Ok(())
}

/// Raw pointers handed to compiled code. Rows are disjoint across chunks, so
/// concurrent calls write disjoint output rows.
pub(crate) struct SharedArgs(pub(crate) RawArgs);
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
        let mut outs = output_buffers(self.loop_kernel(), b.dtype, &shapes)?;
        let field_ptrs = b.field_ptrs();
        let param_outs: Vec<usize> = self.captured().outputs_of(Role::Param).iter().map(|(i, _)| *i).collect();
        let raw = RawArgs {
            offsets: graph.offsets().as_ptr(),
            cols: graph.cols().as_ptr(),
            edge_ids: graph.edge_ids().map(|e| e.as_ptr()).unwrap_or(std::ptr::null()),
            fields: field_ptrs.as_ptr(),
            outputs: std::ptr::null(),
        };
        let partials = ParamPartials::new(graph.num_dst(), &param_outs).with_split(splittable(self.captured()));
        let runner = RowRunner::new(entry, &shapes, b.dtype, &mut outs, partials);
        // SAFETY: the variant was compiled for this kernel, dtype, widths and
        // edge-order flag; `bind` checked every field's length against the
        // graph, and the graph's CSR was validated when built; `outs` lives
        // until the runner is finished.
        unsafe { execute_rows(&runner, raw, graph.offsets(), 0)? };
        runner.finish(&mut outs);
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
        .map(|&(dr, dc)| if st.periodic { (r * c) as usize } else { ((r - dr.abs()).max(0) * (c - dc.abs()).max(0)) as usize })
        .sum()
}

/// The extents of kernel `k`'s call on a generated stencil (checked: a
/// non-empty grid, no edge fields).
pub(crate) fn stencil_extents(k: &ir::Kernel, st: &Stencil2d) -> Result<Extents> {
    if k.fields.iter().any(|f| f.role == Role::Edge) {
        return Err(Error::Call(format!(
            "kernel `{}` reads edge fields; a generated stencil has none (build the CSR with Graph::stencil)",
            k.name
        )));
    }
    if st.rows == 0 || st.cols == 0 {
        return Err(Error::Call("a generated stencil needs rows > 0 and cols > 0".into()));
    }
    let n = usize::try_from(st.rows)
        .ok()
        .zip(usize::try_from(st.cols).ok())
        .and_then(|(r, c)| r.checked_mul(c))
        .ok_or_else(|| Error::Call(format!("a {}x{} stencil is too large for this machine", st.rows, st.cols)))?;
    Ok(Extents { num_src: n, num_dst: n, num_edges: stencil_edges(st) })
}

impl Kernel {
    /// Run on a generated two-dimensional stencil: each node's neighbours are
    /// computed from its index (no CSR is built or read). Gives the same
    /// numbers, bit for bit, as [`Kernel::run`] on `Graph::stencil` of the same
    /// shape and offsets. Kernels with edge fields need the CSR realization.
    pub fn run_stencil(&self, st: &Stencil2d, inputs: &Inputs<'_>) -> Result<Outputs> {
        let k = self.captured();
        let extents = stencil_extents(k, st)?;
        let n = extents.num_dst;
        let b = bind_extents(k, extents, inputs)?;
        let key = VariantKey { stencil: Some(st.clone()), ..self.variant_key(ir_dtype(b.dtype), b.widths.clone(), false) };
        let (variant, _) = crate::jit().variant(self.loop_kernel(), &key)?;
        let shapes = output_shapes(k, &b.extents, &b.widths);
        let mut outs = output_buffers(self.loop_kernel(), b.dtype, &shapes)?;
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
