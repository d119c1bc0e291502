//! Paged execution: a kernel over a graph that stays on disk (`.gfg`),
//! streamed through the unchanged compiled kernel one page of destination
//! rows at a time. The facade binds the call (fields from the caller, or
//! the file's own), picks the variant and shapes the outputs; the pages
//! come from [`GfgPages`] and run through the runtime's page stream
//! ([`tiga_runtime::exec::run_pages`]), which releases each page once its
//! rows are done. Outputs are bit-identical to the in-memory run for any
//! page plan. The same runner walks the file's stored transpose (a paged
//! backward's source stage) and rows in reverse edge order (a monoid's
//! suffix stage).

use tiga_compiler::bind::Extents;
use tiga_compiler::ir::Role;
use tiga_runtime::exec::{self, GfgPages, ParamPartials, RowRunner, Side};
use tiga_runtime::storage::{FieldHandle, FieldRole, GfgFile};
use tiga_runtime::{Backend, Schedule, Tensor};

use crate::call::{bind_extents, output_buffers, splittable, Inputs, Outputs};
use crate::{Error, Kernel, Result};

/// The file's own fields for the kernel's fields not in `inputs` (mapped
/// lazily when viewed).
pub(crate) fn file_fields(
    k: &tiga_compiler::ir::Kernel,
    file: &GfgFile,
    inputs: &Inputs<'_>,
) -> Vec<(Role, String, FieldHandle)> {
    k.fields
        .iter()
        .filter(|f| !inputs.has(f.role, &f.name))
        .filter_map(|f| {
            let role = match f.role {
                Role::Src => FieldRole::Src,
                Role::Dst => FieldRole::Dst,
                Role::Edge => FieldRole::Edge,
                Role::Param => return None,
            };
            file.field(role, &f.name).ok().map(|h| (f.role, f.name.clone(), h))
        })
        .collect()
}

/// `inputs` plus the views of these file fields.
pub(crate) fn with_file_fields<'a>(inputs: &Inputs<'a>, handles: &'a [(Role, String, FieldHandle)]) -> Result<Inputs<'a>> {
    let mut all = inputs.clone();
    for (r, n, h) in handles {
        all = all.with_role(*r, n, h.view().map_err(|e| Error::Call(e.to_string()))?);
    }
    Ok(all)
}

impl Kernel {
    /// Whether a paged run reads the graph's edge ids: only a kernel with
    /// edge fields or edge outputs looks at them (they are 8 bytes per
    /// edge, twice the column indices, so a page of the others is smaller).
    pub fn reads_edge_ids(&self) -> bool {
        let k = self.captured();
        k.fields.iter().any(|f| f.role == Role::Edge) || k.outputs.iter().any(|o| o.role == Role::Edge)
    }

    /// Run over a graph on disk, in pages (the schedule's page plan and
    /// read-ahead). Fields come from `inputs`, or, when absent there, from
    /// the file's own fields of the same role and name.
    pub fn run_paged(&self, file: &GfgFile, inputs: &Inputs<'_>, schedule: &Schedule) -> Result<Outputs> {
        self.run_paged_side(file, Side::Forward, inputs, schedule)
    }

    pub(crate) fn run_paged_side(&self, file: &GfgFile, side: Side, inputs: &Inputs<'_>, schedule: &Schedule) -> Result<Outputs> {
        let k = self.captured();
        let gfg_err = |e: tiga_runtime::storage::GfgError| Error::Call(e.to_string());
        // Fields not given are the file's own (a forward run's; adjoint
        // stages get theirs from the VJP).
        let handles = if side == Side::Forward { file_fields(k, file, inputs) } else { Vec::new() };
        let all = with_file_fields(inputs, &handles)?;
        let (ns, nd) = match side {
            Side::Transposed => (file.num_dst(), file.num_src()),
            _ => (file.num_src(), file.num_dst()),
        };
        if schedule.backend == Backend::Reference {
            let g = match side {
                Side::Forward => file.load_graph().map_err(gfg_err)?,
                Side::Transposed => file.load_transposed().map_err(gfg_err)?.ok_or_else(|| no_transpose(file))?,
                Side::RowReversed => std::sync::Arc::unwrap_or_clone(file.load_graph().map_err(gfg_err)?.row_reversed()),
            };
            return self.run_reference(&g, &all);
        }
        let extents = Extents { num_src: ns, num_dst: nd, num_edges: file.num_edges() };
        let b = bind_extents(k, extents, &all)?;
        if side == Side::Transposed && !file.has_transpose() {
            return Err(no_transpose(file));
        }
        // A kernel with no edge fields or outputs never looks at edge ids:
        // pages are read without them (8 bytes per edge, twice the columns).
        let uses_ids = self.reads_edge_ids();
        let has_ids = match side {
            Side::Forward => uses_ids && file.has_edge_ids(),
            Side::Transposed => uses_ids && file.t_edge_ids().map_err(gfg_err)?.is_some(),
            Side::RowReversed => true,
        };
        let p = self.prepare(&b, has_ids, None, schedule.backend)?;
        let shapes = &p.shapes;
        // Row outputs (a row per page row) over the RAM budget together go
        // to a file mapping, released page by page as the rows are done (a
        // paged backward's source gradient over the budget).
        let is_row_output = |i: usize| k.outputs[i].role == Role::Dst && shapes[i].first() == Some(&nd);
        let row_output_bytes: u64 = (0..shapes.len())
            .filter(|&i| is_row_output(i))
            .map(|i| (shapes[i].iter().product::<usize>() * b.dtype.size()) as u64)
            .sum();
        let mut outs = match crate::offload::output_spill_dir(row_output_bytes, schedule) {
            None => output_buffers(self.loop_kernel(), b.dtype, shapes)?,
            Some(dir) => {
                std::fs::create_dir_all(&dir).map_err(|e| Error::Call(format!("spill directory {}: {e}", dir.display())))?;
                (0..shapes.len())
                    .map(|i| match is_row_output(i) {
                        true => Tensor::zeros_in_file(b.dtype, shapes[i].clone(), &dir),
                        false => Tensor::zeros(b.dtype, shapes[i].clone()),
                    })
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| Error::Call(e.to_string()))?
            }
        };
        let field_ptrs = b.field_ptrs();
        // Plan pages. By rows, only the row count is needed; by bytes, the
        // mapped offsets are scanned once (no copy).
        let plan = if schedule.page_bytes.is_some() {
            let offs: &[u64] = match side {
                Side::Transposed => file.t_offsets().map_err(gfg_err)?.unwrap_or(&[]),
                _ => file.offsets().map_err(gfg_err)?,
            };
            schedule.plan(offs, 4 + if has_ids { 8 } else { 0 })
        } else {
            exec::plan_rows(nd, schedule.rows_per_page())
        };
        let source = GfgPages::new(file, side, has_ids);
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
        // SAFETY: the variant matches the kernel, dtype, widths and edge-id
        // realization; every page is checked against the file's sizes when
        // read; fields and outputs were checked against the file's sizes;
        // `outs` outlives the runner.
        let ran = unsafe { exec::run_pages(&source, &plan, schedule, &runner, field_ptrs.as_ptr(), &touch, &spilled) };
        drop(source);
        for t in &spilled {
            t.release_rows(0..nd);
        }
        drop(spilled);
        ran?;
        runner.finish(&mut outs);
        // A field read from the file does not stay resident after the call.
        for (_, _, h) in &handles {
            h.release();
        }
        Ok(self.outputs(outs))
    }
}

fn no_transpose(file: &GfgFile) -> Error {
    Error::Call(format!(
        "{} has no transposed CSR, which a paged backward reads: rebuild it with `tigac convert --transpose` (or save with a transpose)",
        file.path().display()
    ))
}
