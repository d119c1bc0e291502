//! The entry points of a call, and the call as the runtime's layers see
//! it ([`tiga_runtime::Call`]): the layers a realization asks for
//! (`tiga_runtime::layer`: a shard's halo exchange, a renumbering's
//! permutation) run the kernel again through it over the rows they
//! contribute, and this file does not know which layers exist. Binding is
//! `bind.rs`; running the rows is `rows.rs`.

use std::ops::Range;

use tiga_compiler::bind::{output_shapes, Extents};
use tiga_compiler::ir::Role;
use tiga_dist::shard::Sharded;
use tiga_runtime::abi::RawArgs;
use tiga_runtime::exec::{self, ParamPartials, RowRunner, Side};
use tiga_runtime::fields::{Tape, Wrt};
use tiga_runtime::layer::{Layered, Purpose};
use tiga_runtime::realization::{BoxError, Grads, Named, RowRuns, Sizes};
use tiga_runtime::{Backend, DType, Graph, Realization, Schedule, Tensor, TensorView};

use crate::bind::{bind_extents, output_buffers, stored_fields, with_stored_fields, Prepared};
use crate::error::{CotangentError, Error, Result};
use crate::fields::{Inputs, Outputs};
use crate::kernel::Kernel;

impl Kernel {
    /// Run the kernel over a realization of a graph (a [`Graph`](crate::Graph) in memory,
    /// a `.gfg` file read in pages, a generated [`Stencil2d`](crate::Stencil2d), an offloaded
    /// [`tiga_storage::offload::AnyGraph`], or any other [`Realization`]) with these
    /// fields, as [`Schedule::default`] says. Fields the call does not pass
    /// come from the realization's own (a `.gfg`'s stored fields). Returns
    /// the outputs in the call's dtype; every realization gives the same
    /// numbers, bit for bit.
    pub fn run(&self, r: &dyn Realization, inputs: &Inputs<'_>) -> Result<Outputs> {
        self.run_with(r, inputs, &Schedule::default())
    }

    /// [`Kernel::run`] as `schedule` says (threads, page plan, read-ahead,
    /// back end, RAM budget for row outputs).
    pub fn run_with(&self, r: &dyn Realization, inputs: &Inputs<'_>, schedule: &Schedule) -> Result<Outputs> {
        self.run_side(r, Side::Forward, inputs, schedule)
    }

    /// Run the f64 reference interpreter on the same call (slow; for tests
    /// and for checking a result): [`Kernel::run_with`] with
    /// [`Backend::Reference`].
    pub fn run_reference(&self, r: &dyn Realization, inputs: &Inputs<'_>) -> Result<Outputs> {
        self.run_with(r, inputs, &Schedule::new().backend(Backend::Reference))
    }

    /// Run over the rows of `side` of `r` (an adjoint stage's graph):
    /// through the layer `r` asks for, if any, else over its rows.
    pub(crate) fn run_side(&self, r: &dyn Realization, side: Side, inputs: &Inputs<'_>, schedule: &Schedule) -> Result<Outputs> {
        let purpose = Purpose::Run { side, param_outputs: self.has_param_outputs() };
        if let Some(layer) = Layered::of(r, purpose, schedule)? {
            return Ok(Outputs { items: layer.run(self, side, inputs, schedule)? });
        }
        // Fields not given are the realization's own (a forward run's;
        // adjoint stages get theirs from the VJP).
        let handles = if side == Side::Forward { stored_fields(self.captured(), r, inputs) } else { Vec::new() };
        let all = with_stored_fields(inputs, &handles)?;
        let out = self.run_over(r, side, &all, schedule);
        // A field read from the file does not stay resident after the call.
        for (_, _, h) in &handles {
            h.release();
        }
        out
    }

    /// Whether this kernel writes parameter outputs (sums across rows).
    pub(crate) fn has_param_outputs(&self) -> bool {
        self.captured().outputs.iter().any(|o| o.role == Role::Param)
    }

    /// `steps` applications of the kernel over a sharded graph, output
    /// `feed` (a destination row output) becoming source field `into`
    /// after each, with one halo exchange for every `depth` steps (a shard
    /// of depth k computes its ghost rows too, so k steps need no other
    /// exchange). Returns the last step's outputs as [`Kernel::run`] over
    /// the sharded graph does; k steps at depth k give the bits of k steps
    /// at depth 1.
    pub fn iterate(
        &self,
        sh: &Sharded,
        inputs: &Inputs<'_>,
        feed: &str,
        into: &str,
        steps: usize,
        schedule: &Schedule,
    ) -> Result<Outputs> {
        match self.captured().outputs.iter().find(|o| o.name == feed) {
            Some(o) if o.role == Role::Dst => {}
            _ => return Err(Error::NoOutput { name: feed.into(), outputs: self.output_names().join(", ") }),
        }
        Ok(Outputs { items: sh.iterate(self, inputs, feed, into, steps, schedule)? })
    }

    /// Run over the rows of `side` of `r` as they are, every field given.
    fn run_over(&self, r: &dyn Realization, side: Side, all: &Inputs<'_>, schedule: &Schedule) -> Result<Outputs> {
        let (ns, nd) = match side {
            Side::Transposed => (r.num_dst(), r.num_src()),
            _ => (r.num_src(), r.num_dst()),
        };
        let extents = Extents { num_src: ns, num_dst: nd, num_edges: r.num_edges() };
        r.rows(side, self.reads_edge_ids()).map_err(Error::from).and_then(|rows| self.run_rows(&rows, extents, all, schedule))
    }
}

fn extents(s: Sizes) -> Extents {
    Extents { num_src: s.num_src, num_dst: s.num_dst, num_edges: s.num_edges }
}

fn boxed(e: Error) -> BoxError {
    Box::new(e)
}

impl tiga_runtime::Call for Kernel {
    fn kernel_name(&self) -> &str {
        self.name()
    }
    fn content_hash(&self) -> Result<u64, BoxError> {
        u64::from_str_radix(&self.hash, 16).map_err(|e| boxed(Error::Internal(format!("a kernel hash: {e}"))))
    }
    fn field_roles(&self) -> Vec<(Role, String)> {
        self.captured().fields.iter().map(|f| (f.role, f.name.clone())).collect()
    }
    fn output_roles(&self) -> Vec<(Role, String)> {
        self.captured().outputs.iter().map(|o| (o.role, o.name.clone())).collect()
    }
    fn half_outputs(&self) -> bool {
        self.captured().outputs.iter().any(|o| o.declared.is_half())
    }
    fn run_call(&self, r: &dyn Realization, side: Side, inputs: &Inputs<'_>, schedule: &Schedule) -> Result<Named, BoxError> {
        self.run_side(r, side, inputs, schedule).map(|o| o.items).map_err(boxed)
    }
    fn vjp_call(
        &self,
        r: &dyn Realization,
        inputs: &Inputs<'_>,
        cotangents: &[(&str, TensorView<'_>)],
        wrt: &Wrt,
        tape: Option<&Tape>,
        schedule: &Schedule,
    ) -> Result<Grads, BoxError> {
        let grads = match tape {
            Some(t) => self.vjp_from_tape(r, inputs, t, cotangents, wrt, schedule),
            None => self.vjp_wrt(r, inputs, cotangents, wrt, schedule),
        };
        grads.map(|g| g.items).map_err(boxed)
    }
    fn check_cotangents(&self, names: &[&str]) -> Result<(), BoxError> {
        let k = self.captured();
        crate::vjp::check_cotangent_names(k, names.iter().copied()).map_err(boxed)?;
        match k.outputs.iter().find(|o| !names.contains(&o.name.as_str())) {
            Some(o) => Err(boxed(CotangentError::Missing { name: o.name.clone(), shape: None }.into())),
            None => Ok(()),
        }
    }
    fn check_output(&self, name: &str) -> Result<(), BoxError> {
        match self.captured().outputs.iter().any(|o| o.name == name) {
            true => Ok(()),
            false => Err(boxed(Error::NoOutput { name: name.into(), outputs: self.output_names().join(", ") })),
        }
    }
    fn output_shapes_at(&self, sizes: Sizes, inputs: &Inputs<'_>) -> Result<(DType, Vec<Vec<usize>>), BoxError> {
        let k = self.captured();
        let b = bind_extents(k, extents(sizes), inputs).map_err(boxed)?;
        Ok((b.dtype, output_shapes(k, &b.extents, &b.widths)))
    }
    fn prepare_runs<'g>(
        &'g self,
        rows: &'g Graph,
        sizes: Sizes,
        inputs: &Inputs<'_>,
        schedule: &Schedule,
    ) -> Result<Box<dyn RowRuns + 'g>, BoxError> {
        let prepared = (|| {
            let b = bind_extents(self.captured(), extents(sizes), inputs)?;
            let p = self.prepare(&b, false, None, schedule.backend)?;
            let mut outs = output_buffers(self.loop_kernel(), b.dtype, &p.shapes)?;
            let partials = ParamPartials::new(rows.num_dst(), &p.param_outs);
            let runner = RowRunner::new(p.entry, p.shapes.clone(), b.dtype, &mut outs, partials);
            Ok::<_, Error>(LocalRuns {
                kernel: self,
                rows,
                sizes,
                dtype: b.dtype,
                widths: b.widths,
                _p: p,
                outs,
                runner,
                threads: schedule.threads,
            })
        })();
        Ok(Box::new(prepared.map_err(boxed)?))
    }
}

/// A call over a shard's local rows prepared once (its variant and output
/// buffers from the fields over every slot) and run in runs: the interior
/// rows while the halo travels, the boundary rows after.
struct LocalRuns<'g> {
    kernel: &'g Kernel,
    rows: &'g Graph,
    sizes: Sizes,
    dtype: DType,
    widths: Vec<usize>,
    /// Holds the variant the runner's entry points into.
    _p: Prepared,
    outs: Vec<Tensor>,
    runner: RowRunner<'static>,
    threads: Option<usize>,
}

impl RowRuns for LocalRuns<'_> {
    fn run(&self, ins: &Inputs<'_>, runs: &[Range<usize>], num_src: usize) -> Result<(), BoxError> {
        let b = bind_extents(self.kernel.captured(), Extents { num_src, ..extents(self.sizes) }, ins).map_err(boxed)?;
        if b.widths != self.widths || b.dtype != self.dtype {
            return Err(boxed(Error::Internal("sharded widths differ between the interior and boundary rows".into())));
        }
        let ptrs = b.field_ptrs();
        let g = self.rows;
        let raw = RawArgs { offsets: g.offsets().as_ptr(), cols: g.cols().as_ptr(), fields: ptrs.as_ptr(), ..RawArgs::empty() };
        // SAFETY: the variant was compiled for this kernel, dtype and
        // widths without edge ids (edge fields are in local CSR order);
        // `bind_extents` checked every field against these extents, and
        // interior rows read only the `num_src` owned slots they are given
        // (the plan put every row that reads a ghost in a boundary run,
        // which runs once the ghost slots are filled); the CSR was
        // validated when built; `outs` lives as long as the runner (their
        // elements do not move with them); the kernel has no parameter
        // outputs.
        unsafe { exec::execute_row_runs(&self.runner, raw, g.offsets(), runs, self.threads)? };
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<Named, BoxError> {
        let LocalRuns { kernel, mut outs, runner, .. } = *self;
        runner.finish(&mut outs);
        Ok(kernel.outputs(outs).items)
    }
}
