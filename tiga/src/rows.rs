//! Running a bound call over its rows: the arms of the executor's one
//! shape (rows + fields + schedule), each handing the runtime what it
//! runs. In memory and on a generated stencil the row executor runs the
//! compiled entry over row chunks; pages stream through the runtime's page
//! stream (`exec::run_pages`), which releases each page once its rows are
//! done, with outputs bit-identical to the in-memory run for any page
//! plan; on a GPU or the simulator the kernel is lowered to PTX (once per
//! device, dtype and widths) and the device runtime streams the rows
//! (`tiga_device::run_rows`); the reference back end interprets in f64.
//!
//! A kernel the PTX back end does not lower is an error naming the kernel
//! and what is missing ([`Error::GpuLowering`]); a call never falls back to
//! the CPU on its own.

use std::sync::Arc;

use tiga_compiler::back::ptx::lower_kernel;
use tiga_compiler::bind::{output_shapes, Extents};
use tiga_compiler::interp::{interpret_in_order, Array};
use tiga_compiler::ir::Role;
use tiga_device::{CallArrays, EntryLaunch, GpuContext, GpuError, LoadedKernel, ModuleKey};
use tiga_runtime::abi::{RawArgs, RawStencil, Stencil2d};
use tiga_runtime::exec::{self, ParamPartials, RowRunner};
use tiga_runtime::{Backend, DType, Graph, PagedRows, Rows, Schedule, Tensor};

use crate::bind::{bind, bind_extents, output_buffers, output_buffers_of, splittable, stencil_extents};
use crate::error::{Error, Result, Unsupported};
use crate::fields::{Inputs, Outputs};
use crate::kernel::Kernel;

impl Kernel {
    /// The one shape of a call, once its rows are known: bind, pick the
    /// variant, shape the outputs, build the arguments, execute, collect.
    /// The reference back end runs on the CPU whatever the device (it is
    /// the check); otherwise the schedule's device runs the rows.
    pub(crate) fn run_rows(
        &self,
        rows: &Rows<'_>,
        extents: Extents,
        inputs: &Inputs<'_>,
        schedule: &Schedule,
    ) -> Result<Outputs> {
        if schedule.backend == Backend::Reference {
            let g = rows.to_graph(extents.num_src, schedule)?;
            return self.interpret(&g, inputs);
        }
        // A GPU or the simulator, when the schedule names one.
        if let Some(ctx) = tiga_device::open(schedule.device)? {
            return self.run_device(&ctx, rows, extents, inputs, schedule);
        }
        match rows {
            Rows::Memory(g) => self.run_memory(g, inputs, schedule),
            Rows::Pages(p) => self.run_pages(p.as_ref(), extents, inputs, schedule),
            Rows::Generated(st) => self.run_generated(st, inputs, schedule),
        }
    }

    fn run_memory(&self, graph: &Graph, inputs: &Inputs<'_>, schedule: &Schedule) -> Result<Outputs> {
        let b = bind(self.captured(), graph, inputs)?;
        let p = self.prepare(&b, graph.edge_ids().is_some(), None, schedule.backend)?;
        let out_types = b.output_types(self.loop_kernel());
        let mut outs = output_buffers_of(self.loop_kernel(), &out_types, &p.shapes)?;
        let field_ptrs = b.field_ptrs();
        let raw = RawArgs {
            offsets: graph.offsets().as_ptr(),
            cols: graph.cols().as_ptr(),
            edge_ids: graph.edge_ids().map(|e| e.as_ptr()).unwrap_or(std::ptr::null()),
            fields: field_ptrs.as_ptr(),
            outputs: std::ptr::null(),
            stencil: std::ptr::null(),
        };
        // A long row split in segments sums its partial outputs in the
        // call's dtype; a half-width output is stored once, rounded.
        let split = splittable(self.captured()) && out_types.iter().all(|t| !t.is_half());
        let partials = ParamPartials::new(graph.num_dst(), &p.param_outs).with_split(split);
        let runner = RowRunner::new(p.entry, &p.shapes, b.dtype, &mut outs, partials);
        // SAFETY: the variant was compiled for this kernel, dtype, widths and
        // edge-order flag; `bind` checked every field's length against the
        // graph, and the graph's CSR was validated when built; `outs` lives
        // until the runner is finished.
        unsafe { exec::execute_rows(&runner, raw, graph.offsets(), 0, schedule.threads)? };
        runner.finish(&mut outs);
        Ok(self.outputs(outs))
    }

    /// A generated stencil: each node's neighbours are computed from its
    /// index (no CSR is built or read), with the numbers of the same
    /// stencil's CSR (`Graph::stencil`) bit for bit. Kernels with edge
    /// fields need the CSR realization.
    fn run_generated(&self, st: &Stencil2d, inputs: &Inputs<'_>, schedule: &Schedule) -> Result<Outputs> {
        let k = self.captured();
        let extents = stencil_extents(k, st)?;
        let n = extents.num_dst;
        let b = bind_extents(k, extents, inputs)?;
        if !k.outputs_of(Role::Param).is_empty() {
            return Err(Unsupported::StencilParamOutputs.into());
        }
        let p = self.prepare(&b, false, Some(st), schedule.backend)?;
        let mut outs = output_buffers_of(self.loop_kernel(), &b.output_types(self.loop_kernel()), &p.shapes)?;
        let field_ptrs = b.field_ptrs();
        let out_ptrs: Vec<*mut u8> = outs.iter_mut().map(exec::data_ptr).collect();
        // The grid for the ahead-of-time variant (the JIT's has it baked in
        // and ignores it); `pairs` outlives the call.
        let pairs = st.offset_pairs();
        let grid = RawStencil::new(st, &pairs);
        let raw = RawArgs { fields: field_ptrs.as_ptr(), outputs: out_ptrs.as_ptr(), stencil: &grid, ..RawArgs::empty() };
        // SAFETY: compiled for this kernel, dtype and widths, and for this
        // stencil or for any (reading `grid`, whose rows and columns
        // `stencil_extents` checked are non-zero and fit memory);
        // `bind_extents` checked every field against the grid's size.
        unsafe { exec::execute_generated(p.entry, raw, n, schedule.threads)? };
        Ok(self.outputs(outs))
    }

    /// The f64 reference interpreter over one CSR in RAM.
    fn interpret(&self, graph: &Graph, inputs: &Inputs<'_>) -> Result<Outputs> {
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
        let tensors =
            outs.into_iter().map(|a| Tensor::from_f64(a.shape, a.data).map_err(Error::from)).collect::<Result<Vec<_>>>()?;
        Ok(self.outputs(tensors))
    }
}

impl Kernel {
    /// The paged arm of a call: pages from `pages` (the schedule's plan and
    /// read-ahead) through the runtime's page stream. Row outputs (a row per
    /// page row) over the RAM budget together go to a file mapping,
    /// released page by page as the rows are done (a paged backward's
    /// source gradient over the budget).
    pub(crate) fn run_pages(
        &self,
        pages: &dyn PagedRows,
        extents: Extents,
        inputs: &Inputs<'_>,
        schedule: &Schedule,
    ) -> Result<Outputs> {
        let k = self.captured();
        let nd = extents.num_dst;
        let b = bind_extents(k, extents, inputs)?;
        b.full_width_only(self.loop_kernel(), "paged")?;
        let p = self.prepare(&b, pages.edge_ids(), None, schedule.backend)?;
        let shapes = &p.shapes;
        let is_row_output = |i: usize| is_row_output(k, shapes, nd, i);
        let mut outs = self.row_output_buffers(shapes, b.dtype, nd, pages.out_of_core(), schedule)?;
        let field_ptrs = b.field_ptrs();
        let plan = pages.plan(schedule)?;
        exec::check_plan(&plan, nd)?;
        let partials = ParamPartials::new(nd, &p.param_outs).with_split(splittable(k));
        // Destination outputs (a row per page row), for the read-ahead.
        let touch: Vec<(usize, usize)> = (0..shapes.len())
            .filter(|&i| is_row_output(i))
            .map(|i| (exec::data_ptr(&mut outs[i]) as usize, shapes[i][1..].iter().product::<usize>() * b.dtype.size()))
            .collect();
        let runner = RowRunner::new(p.entry, shapes, b.dtype, &mut outs, partials);
        // The file-backed outputs, whose rows leave the resident set with
        // their page (only their residency is touched, never their bytes).
        let spilled: Vec<&Tensor> = outs.iter().filter(|t| t.is_file_backed()).collect();
        // SAFETY: the variant matches the kernel, dtype, widths and the
        // pages' edge ids; every page is checked by its source; fields and
        // outputs were checked against the realization's sizes; `outs`
        // outlives the runner.
        let ran = unsafe { exec::run_pages(pages, &plan, schedule, &runner, field_ptrs.as_ptr(), &touch, &spilled) };
        for t in &spilled {
            t.release_rows(0..nd);
        }
        drop(spilled);
        ran?;
        runner.finish(&mut outs);
        Ok(self.outputs(outs))
    }
}

impl Kernel {
    /// Output buffers for a call over `nd` rows that may come from a file
    /// (`out_of_core`): row outputs (a row per destination row) together over
    /// the schedule's RAM budget go to file-backed tensors in the spill
    /// directory; the rest are [`output_buffers`]' (zeros, or left as they
    /// are where every row overwrites them).
    pub(crate) fn row_output_buffers(
        &self,
        shapes: &[Vec<usize>],
        dtype: tiga_runtime::DType,
        nd: usize,
        out_of_core: bool,
        schedule: &Schedule,
    ) -> Result<Vec<Tensor>> {
        let k = self.captured();
        let is_row_output = |i: usize| is_row_output(k, shapes, nd, i);
        let row_output_bytes: u64 = (0..shapes.len())
            .filter(|&i| is_row_output(i))
            .map(|i| (shapes[i].iter().product::<usize>() * dtype.size()) as u64)
            .sum();
        let spill = if out_of_core { tiga_storage::offload::output_spill_dir(row_output_bytes, schedule) } else { None };
        match spill {
            None => output_buffers(self.loop_kernel(), dtype, shapes),
            Some(dir) => {
                std::fs::create_dir_all(&dir)
                    .map_err(|source| Error::Io { what: format!("spill directory {}", dir.display()), source })?;
                (0..shapes.len())
                    .map(|i| match is_row_output(i) {
                        true => Tensor::zeros_in_file(dtype, shapes[i].clone(), &dir),
                        false => Tensor::zeros(dtype, shapes[i].clone()),
                    })
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(Error::from)
            }
        }
    }
}

impl Kernel {
    /// This kernel's module on `ctx`'s device for `dtype` and `widths`:
    /// lowered and loaded on first use, then cached on the device. Returns
    /// it and whether it was cached.
    pub(crate) fn device_kernel(&self, ctx: &GpuContext, dtype: DType, widths: &[usize]) -> Result<(Arc<LoadedKernel>, bool)> {
        let sm = ctx.device().sm();
        let key = ModuleKey { kernel: format!("{}#{}", self.name(), self.hash), dtype, widths: widths.to_vec(), sm };
        ctx.module(key, || {
            let pk = lower_kernel(self.loop_kernel(), dtype, widths, sm)
                .map_err(|source| Error::GpuLowering { kernel: self.name().to_string(), source })?;
            let launch = EntryLaunch { entry: pk.entry, block: pk.block, threads_per_row: pk.threads_per_row };
            Ok((pk.module, launch))
        })
    }

    /// Lower and load this kernel for `device`, `dtype` and `widths`
    /// ahead of a call (what `tigac run --timing` reports as its compile
    /// time on a GPU). Returns whether the module was cached already.
    pub fn prepare_device(&self, device: tiga_runtime::Device, dtype: DType, widths: &[usize]) -> Result<bool> {
        let ctx = tiga_device::open(device)?.ok_or(Unsupported::NotADevice)?;
        Ok(self.device_kernel(&ctx, dtype, widths)?.1)
    }

    /// Run over `rows` on `ctx`'s device (see the module doc).
    pub(crate) fn run_device(
        &self,
        ctx: &GpuContext,
        rows: &Rows<'_>,
        extents: Extents,
        inputs: &Inputs<'_>,
        schedule: &Schedule,
    ) -> Result<Outputs> {
        if let Rows::Generated(st) = rows {
            // The device walks a CSR: the stencil's, built once (the same
            // numbers as Graph::stencil's).
            stencil_extents(self.captured(), st)?;
            let g = rows.to_graph(extents.num_src, schedule)?;
            return self.run_device(ctx, &Rows::Memory(g), extents, inputs, schedule);
        }
        let k = self.captured();
        let b = bind_extents(k, extents, inputs)?;
        // The PTX back end has no half-width loads or stores.
        b.full_width_only(self.loop_kernel(), "GPU")?;
        let (kernel, _) = self.device_kernel(ctx, b.dtype, &b.widths)?;
        let shapes = output_shapes(k, &b.extents, &b.widths);
        let out_of_core = matches!(rows, Rows::Pages(p) if p.out_of_core());
        let mut outs = self.row_output_buffers(&shapes, b.dtype, extents.num_dst, out_of_core, schedule)?;
        let _held = ctx.begin_call();
        if let (Some(p), Rows::Pages(_)) = (&schedule.progress, rows) {
            p.announce(extents.num_dst as u64);
        }
        let arrays = CallArrays {
            name: self.name(),
            fields: &b.views,
            field_roles: k.fields.iter().map(|f| f.role).collect(),
            output_roles: k.outputs.iter().map(|o| o.role).collect(),
            shapes: &shapes,
            dtype: b.dtype,
        };
        tiga_device::run_rows(ctx.device(), &kernel, &arrays, rows, schedule, &mut outs).map_err(|e| match e {
            GpuError::Rows(e) => Error::Exec(e),
            GpuError::Internal(m) => Error::Internal(m),
            e => Error::Gpu(e),
        })?;
        Ok(self.outputs(outs))
    }
}

/// Whether output `i` of `k` (of these `shapes`) has a row per destination
/// row of a call over `nd` rows: what a paged call spills and releases page
/// by page.
fn is_row_output(k: &tiga_compiler::ir::Kernel, shapes: &[Vec<usize>], nd: usize, i: usize) -> bool {
    k.outputs[i].role == Role::Dst && shapes[i].first() == Some(&nd)
}
