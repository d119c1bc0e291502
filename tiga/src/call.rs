//! The entry points of a call and the realization layers it passes
//! through before its rows: a sharded graph's halo exchange (`sharded.rs`),
//! a renumbered view's permutation (`renumber.rs`), and a realization's
//! stored fields joining the given ones. Binding is `bind.rs`; running the
//! rows is `rows.rs`.

use tiga_compiler::bind::Extents;
use tiga_runtime::exec::Side;
use tiga_runtime::{Backend, Realization, Schedule};

use crate::bind::{stored_fields, with_stored_fields};
use crate::error::{Error, Result};
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

    /// Run over the rows of `side` of `r` (an adjoint stage's graph).
    pub(crate) fn run_side(&self, r: &dyn Realization, side: Side, inputs: &Inputs<'_>, schedule: &Schedule) -> Result<Outputs> {
        if let (Side::Forward, Some(sh)) = (side, tiga_dist::shard::sharded(r)) {
            return self.run_sharded(sh, inputs, schedule);
        }
        // Renumbered for locality: a forward where the schedule asks and the
        // realization can (a forward with parameter sums is not: they would
        // add rows in another order; see `crate::renumber`), and every call
        // over a realization laid out in a node order (a file written
        // renumbered).
        let wanted = side == Side::Forward && !self.has_param_outputs();
        if let Some(view) = crate::renumber::view_for(r, schedule, wanted)? {
            return self.run_renumbered(&view, side, inputs, schedule);
        }
        // Fields not given are the realization's own (a forward run's;
        // adjoint stages get theirs from the VJP).
        let handles = if side == Side::Forward { stored_fields(self.captured(), r, inputs) } else { Vec::new() };
        let all = with_stored_fields(inputs, &handles)?;
        let out = match r.renumbering() {
            // Parameter sums over a renumbered graph (an adjoint stage's;
            // a forward's over a file laid out in a node order) add their
            // rows in the caller's order.
            Some(view) if self.has_param_outputs() => self.run_in_user_order(view, side, &all, schedule),
            _ => self.run_over(r, side, &all, schedule),
        };
        // A field read from the file does not stay resident after the call.
        for (_, _, h) in &handles {
            h.release();
        }
        out
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
