//! Paged execution: a kernel over rows that come in pages (a graph that
//! stays on disk as a `.gfg`, or any [`PagedRows`]), streamed through the
//! unchanged compiled kernel one page of destination rows at a time. The
//! facade binds the call, picks the variant and shapes the outputs; the
//! pages run through the runtime's page stream
//! ([`tiga_runtime::exec::run_pages`]), which releases each page once its
//! rows are done. Outputs are bit-identical to the in-memory run for any
//! page plan. The same runner walks the file's stored transpose (a paged
//! backward's source stage) and rows in reverse edge order (a monoid's
//! suffix stage).

use tiga_compiler::bind::Extents;
use tiga_compiler::ir::Role;
use tiga_runtime::exec::{self, ParamPartials, RowRunner};
use tiga_runtime::{PagedRows, Schedule, Tensor};

use crate::call::{bind_extents, output_buffers, splittable};
use crate::error::{Error, Result};
use crate::fields::{Inputs, Outputs};
use crate::kernel::Kernel;

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
        let is_row_output = |i: usize| k.outputs[i].role == Role::Dst && shapes[i].first() == Some(&nd);
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
        let is_row_output = |i: usize| k.outputs[i].role == Role::Dst && shapes[i].first() == Some(&nd);
        let row_output_bytes: u64 = (0..shapes.len())
            .filter(|&i| is_row_output(i))
            .map(|i| (shapes[i].iter().product::<usize>() * dtype.size()) as u64)
            .sum();
        let spill = if out_of_core { crate::offload::output_spill_dir(row_output_bytes, schedule) } else { None };
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
