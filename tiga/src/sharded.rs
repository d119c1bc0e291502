//! Calls over a halo-sharded graph: the unchanged kernel, run per rank on
//! its local rows. The shard layer (`tiga_dist::shard`'s `LocalCall`)
//! places the call's fields on the rank, exchanges the halo and puts
//! outputs and gradients back in owned order; this file binds and runs the
//! local call between those steps.
//!
//! Forward: the source fields' owned rows go out to the peers that read
//! them while the rows that read no ghost run; the boundary rows run once
//! the ghosts are in. Each row sees its edges in the whole graph's order,
//! so a destination row's output is bit-identical to one process's.
//!
//! Backward: the adjoint's stages run on the local graph (every stage is a
//! kernel over its rows, its transpose or its rows reversed, and rows are
//! owned whole); each ghost's source gradient goes back to its owner, which
//! adds the peers' parts in rank order after its own.

use tiga_compiler::bind::{output_shapes, Extents};
use tiga_compiler::ir::Role;
use tiga_dist::shard::{copy_rows_to, take_rows, Sharded};
use tiga_runtime::abi::RawArgs;
use tiga_runtime::exec::{self, ParamPartials, RowRunner};
use tiga_runtime::{Backend, DataMut, Schedule, Tensor, TensorView};

use crate::bind::{bind_extents, output_buffers};
use crate::error::{CotangentError, Error, Result, Unsupported};
use crate::fields::{Gradients, Inputs, Outputs};
use crate::kernel::Kernel;
use crate::residuals::Tape;
use crate::vjp::Seed;

impl Kernel {
    /// `inputs` plus this rank's rows of the fields the call does not
    /// pass and the sharded graph's file stores.
    fn with_stored<'a>(&self, sh: &Sharded, inputs: &Inputs<'a>) -> Result<Inputs<'a>> {
        Ok(sh.with_stored(self.captured().fields.iter().map(|f| (f.role, f.name.clone())), inputs)?)
    }

    /// Check (once per sharded graph) that every rank runs this kernel: the
    /// content hash of its lowered IR, which the variant cache keys on too.
    fn check_same_kernel(&self, sh: &Sharded) -> Result<()> {
        let hash = u64::from_str_radix(&self.hash, 16).map_err(|e| Error::Internal(format!("a kernel hash: {e}")))?;
        sh.check_once(&format!("kernel `{}`", self.name()), hash).map_err(Error::from)
    }

    /// Run one call over the local rows (see the module doc): `Outputs` per
    /// local row and edge, parameter outputs this rank's part.
    fn run_local(&self, sh: &Sharded, inputs: &Inputs<'_>, schedule: &Schedule) -> Result<Outputs> {
        self.check_same_kernel(sh)?;
        let inputs = &self.with_stored(sh, inputs)?;
        let mut local = sh.localize(inputs)?;
        let l = sh.local();
        let extents = Extents { num_src: l.slots.len(), num_dst: l.rows.len(), num_edges: l.local_edges };
        let k = self.captured();
        let param_outputs = !k.outputs_of(Role::Param).is_empty();
        // On a device the local rows run after the exchange, uploaded whole:
        // the overlap below runs the interior rows on this CPU.
        let device = schedule.device != tiga_runtime::Device::Cpu;
        let overlap = schedule.backend != Backend::Reference
            && !l.interior.is_empty()
            && !local.exchanges_dst()
            && !param_outputs
            && !device;
        // Paged local rows (no CSR in memory) stream from their file after
        // the exchange too.
        let Some(g) = l.graph.as_ref().filter(|_| overlap) else {
            local.exchange(sh)?;
            let out = self.run_with(sh.local_rows()?, &local.inputs(), schedule);
            local.recycle(sh);
            return out;
        };
        // The variant and shapes from the fields over every slot (ghosts'
        // rows still zero); each step binds its own views.
        let (p, dtype, widths) = {
            let ins = local.inputs();
            let b = bind_extents(k, extents, &ins)?;
            (self.prepare(&b, false, None, schedule.backend)?, b.dtype, b.widths.clone())
        };
        let mut outs = output_buffers(self.loop_kernel(), dtype, &p.shapes)?;
        let runner = RowRunner::new(p.entry, &p.shapes, dtype, &mut outs, ParamPartials::new(g.num_dst(), &p.param_outs));
        local.overlapped(sh, |ins, runs, num_src| -> Result<()> {
            let b = bind_extents(k, Extents { num_src, ..extents }, ins)?;
            if b.widths != widths || b.dtype != dtype {
                return Err(Error::Internal("sharded widths differ between the interior and boundary rows".into()));
            }
            let ptrs = b.field_ptrs();
            let raw =
                RawArgs { offsets: g.offsets().as_ptr(), cols: g.cols().as_ptr(), fields: ptrs.as_ptr(), ..RawArgs::empty() };
            // SAFETY: the variant was compiled for this kernel, dtype and
            // widths without edge ids (edge fields are in local CSR order);
            // `bind_extents` checked every field against these extents, and
            // interior rows read only the `num_src` owned slots they are given
            // (the plan put every row that reads a ghost in a boundary run,
            // which runs once the ghost slots are filled); the CSR was
            // validated when built; `outs` lives until `finish`; the kernel
            // has no parameter outputs.
            unsafe { exec::execute_row_runs(&runner, raw, g.offsets(), runs, schedule.threads)? };
            Ok(())
        })?;
        runner.finish(&mut outs);
        Ok(self.outputs(outs))
    }

    /// Refuse half-precision fields and outputs on a sharded call before
    /// anything is exchanged: halo rows, partial sums and ghost slots are
    /// moved and added in the call's dtype.
    pub(crate) fn check_sharded_field_types(&self, inputs: &Inputs<'_>) -> Result<()> {
        let half_in = inputs.field_types().any(|t| t.is_half());
        let f64_call = inputs.field_types().any(|t| t == tiga_runtime::FieldType::F64);
        let half_out = !f64_call && self.captured().outputs.iter().any(|o| o.declared.is_half());
        if half_in || half_out {
            return Err(Unsupported::HalfSharded { kernel: self.name().to_string() }.into());
        }
        Ok(())
    }

    /// A forward call over a sharded graph (see the module doc): this
    /// rank's outputs, destination rows in [`Sharded::owned_dst`] order,
    /// edge outputs in [`Sharded::owned_edges`] order, parameter outputs
    /// summed over the ranks.
    pub(crate) fn run_sharded(&self, sh: &Sharded, inputs: &Inputs<'_>, schedule: &Schedule) -> Result<Outputs> {
        self.check_sharded_field_types(inputs)?;
        let outs = self.run_local(sh, inputs, schedule)?;
        self.owned_outputs(sh, outs)
    }

    /// Local outputs → this rank's owned rows and edges, in owned order;
    /// parameter outputs all-reduced.
    fn owned_outputs(&self, sh: &Sharded, outs: Outputs) -> Result<Outputs> {
        Ok(Outputs { items: sh.owned_outputs(outs.items, self.captured().outputs.iter().map(|o| o.role))? })
    }

    /// `steps` applications of the kernel, output `feed` becoming source
    /// field `into` after each, with one halo exchange for every `depth`
    /// steps (a shard of depth k: its ghost rows are computed too, so k
    /// steps need no other exchange). Returns the last step's outputs as
    /// [`Kernel::run`] over the sharded graph does; k steps at depth k give
    /// the bits of k steps at depth 1.
    pub fn iterate(
        &self,
        sh: &Sharded,
        inputs: &Inputs<'_>,
        feed: &str,
        into: &str,
        steps: usize,
        schedule: &Schedule,
    ) -> Result<Outputs> {
        let l = sh.local();
        let row_slot = l.row_slot.clone().ok_or(Unsupported::IterateNotSquare)?;
        match self.captured().outputs.iter().find(|o| o.name == feed) {
            Some(o) if o.role == Role::Dst => {}
            _ => return Err(Error::NoOutput { name: feed.into(), outputs: self.output_names().join(", ") }),
        }
        let inputs = &self.with_stored(sh, inputs)?;
        if !inputs.has(Role::Src, into) {
            return Err(Unsupported::IterateNoField { into: into.to_string() }.into());
        }
        // The fed field in owned order, replaced after every step.
        let mut state: Option<Tensor> = None;
        let mut last = None;
        let mut step = 0;
        while step < steps {
            let burst = l.depth.min(steps - step);
            // One exchange, then `burst` steps on the local rows.
            let mut ins = Inputs::new();
            for (role, name, input) in &inputs.fields {
                if *role == Role::Src && name == into {
                    if let Some(s) = &state {
                        ins = ins.with_role(*role, name, s.view());
                        continue;
                    }
                }
                ins = ins.with_role(*role, name, input.view());
            }
            let mut local = sh.localize(&ins)?;
            self.check_same_kernel(sh)?;
            local.exchange(sh)?;
            for _ in 0..burst {
                let ins = local.inputs();
                let outs = self.run_with(sh.local_rows()?, &ins, schedule)?;
                let out = outs.tensor(feed)?;
                // Each computed row's output becomes its node's slot.
                let slot = local
                    .src
                    .iter_mut()
                    .find(|(n, _)| n == into)
                    .map(|(_, t)| t)
                    .ok_or_else(|| Error::Internal("the fed field went missing".into()))?;
                if slot.shape()[1..] != out.shape()[1..] || slot.dtype() != out.dtype() {
                    return Err(Unsupported::IterateMismatch {
                        feed: feed.to_string(),
                        out_dtype: out.dtype(),
                        out_row: out.shape()[1..].to_vec(),
                        into: into.to_string(),
                        in_dtype: slot.dtype(),
                        in_row: slot.shape()[1..].to_vec(),
                    }
                    .into());
                }
                copy_rows_to(out, slot, &row_slot)?;
                last = Some(outs);
            }
            step += burst;
            let slot = local.src.iter().find(|(n, _)| n == into).map(|(_, t)| t);
            if let Some(t) = slot {
                state = Some(take_rows(t.data(), t.shape(), 0..l.owned_slots)?);
            }
        }
        match last {
            Some(outs) => self.owned_outputs(sh, outs),
            None => self.run_sharded(sh, inputs, schedule),
        }
    }

    /// [`Kernel::vjp_taped_wrt`] over a shard one hop deep: the tape holds
    /// the residuals of this rank's owned rows.
    pub(crate) fn vjp_sharded_taped(
        &self,
        sh: &Sharded,
        inputs: &Inputs<'_>,
        cotangents: &[(&str, TensorView<'_>)],
        schedule: &Schedule,
        wrt: &crate::fields::Wrt,
        tape: &Tape,
    ) -> Result<Gradients> {
        self.vjp_sharded(sh, inputs, Seed::Cotangents(cotangents), schedule, wrt, Some(tape))
    }

    /// The VJP over a sharded graph: this rank's gradients (source ones
    /// complete, with the peers' contributions to its sources added in rank
    /// order), from cotangents per owned row and edge (or whole arrays), or
    /// the gradient of the sum of one output over every rank's rows.
    pub(crate) fn vjp_sharded(
        &self,
        sh: &Sharded,
        inputs: &Inputs<'_>,
        seed: Seed<'_, '_>,
        schedule: &Schedule,
        wrt: &crate::fields::Wrt,
        tape: Option<&Tape>,
    ) -> Result<Gradients> {
        self.check_sharded_field_types(inputs)?;
        self.check_same_kernel(sh)?;
        let inputs = &self.with_stored(sh, inputs)?;
        let mut local = sh.localize(inputs)?;
        local.exchange(sh)?;
        let ins = local.inputs();
        let cots = self.local_cotangents(sh, &ins, seed)?;
        let views: Vec<(&str, TensorView<'_>)> = cots.iter().map(|(n, t)| (n.as_str(), t.view())).collect();
        // A tape of a shard one hop deep holds the residuals of its owned
        // rows, which are its local rows, in order (the forward gave its
        // outputs so).
        let grads = match tape {
            Some(t) => self.vjp_taped_wrt(sh.local_rows()?, &ins, t, &views, wrt, schedule)?,
            None => self.vjp_wrt(sh.local_rows()?, &ins, &views, wrt, schedule)?,
        };
        Ok(Gradients { items: sh.owned_gradients(grads.items)? })
    }

    /// The cotangents of the local call's outputs: the owned rows' and
    /// edges' from the seed, the ghost rows' zero (their outputs are their
    /// owners').
    fn local_cotangents(&self, sh: &Sharded, ins: &Inputs<'_>, seed: Seed<'_, '_>) -> Result<Vec<(String, Tensor)>> {
        let l = sh.local();
        let k = self.captured();
        let mut cots = Vec::new();
        match seed {
            Seed::Cotangents(given) => {
                crate::vjp::check_cotangent_names(k, given.iter().map(|(n, _)| *n))?;
                for o in &k.outputs {
                    let Some((_, v)) = given.iter().find(|(n, _)| *n == o.name) else {
                        return Err(CotangentError::Missing { name: o.name.clone(), shape: None }.into());
                    };
                    cots.push((o.name.clone(), sh.local_cotangent(o.role, &o.name, v)?));
                }
            }
            Seed::SumOf(output) => {
                if !k.outputs.iter().any(|o| o.name == output) {
                    return Err(Error::NoOutput { name: output.into(), outputs: self.output_names().join(", ") });
                }
                let extents = Extents { num_src: l.slots.len(), num_dst: l.rows.len(), num_edges: l.local_edges };
                let b = bind_extents(k, extents, ins)?;
                for (o, shape) in k.outputs.iter().zip(output_shapes(k, &extents, &b.widths)) {
                    let ones = if o.name == output { sh.ones_in_sum(o.role, &shape) } else { 0 };
                    let mut t = Tensor::zeros(b.dtype, shape).map_err(Error::from)?;
                    match t.data_mut() {
                        DataMut::F32(d) => d[..ones].fill(1.0),
                        DataMut::F64(d) => d[..ones].fill(1.0),
                        // `Tensor::zeros` of a dtype is f32 or f64.
                        DataMut::F16(_) | DataMut::BF16(_) => {
                            return Err(Error::Internal("a half-precision cotangent of a sharded call".into()))
                        }
                    }
                    cots.push((o.name.clone(), t));
                }
            }
        }
        Ok(cots)
    }
}
