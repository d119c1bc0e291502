//! The shard's layer: a call over a halo-sharded graph is the unchanged
//! kernel, run on this rank's local rows between the steps this layer
//! contributes (its fields placed on the rank, [`Sharded::localize`]; the
//! halo exchanged; outputs and gradients put back in owned order).
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

use tiga_runtime::exec::{ExecError, Side};
use tiga_runtime::fields::{Inputs, Seed, Tape, Wrt};
use tiga_runtime::realization::{BoxError, Call, Grads, Layer, Named, Sizes};
use tiga_runtime::{Backend, DataMut, Device, FieldType, Role, Schedule, Tensor, TensorView};

use super::call::copy_rows_to;
use super::{take_rows, ShardError, Sharded};

impl Sharded {
    /// `inputs` plus this rank's rows of the fields the call does not
    /// pass and the sharded graph's file stores.
    fn with_stored_of<'a>(&self, call: &dyn Call, inputs: &Inputs<'a>) -> Result<Inputs<'a>, ShardError> {
        self.with_stored(call.field_roles().into_iter(), inputs)
    }

    /// Check (once per sharded graph) that every rank runs this kernel: the
    /// content hash of its lowered IR, which the variant cache keys on too.
    fn check_same_kernel(&self, call: &dyn Call) -> Result<(), BoxError> {
        let hash = call.content_hash()?;
        Ok(self.check_once(&format!("kernel `{}`", call.kernel_name()), hash)?)
    }

    /// Refuse half-precision fields and outputs before anything is
    /// exchanged: halo rows, partial sums and ghost slots are moved and
    /// added in the call's dtype.
    fn check_field_types(&self, call: &dyn Call, inputs: &Inputs<'_>) -> Result<(), ShardError> {
        let half_in = inputs.field_types().any(|t| t.is_half());
        let f64_call = inputs.field_types().any(|t| t == FieldType::F64);
        if half_in || (!f64_call && call.half_outputs()) {
            return Err(ShardError::HalfCall { kernel: call.kernel_name().to_string() });
        }
        Ok(())
    }

    /// The extents of the local rows (sources over every slot).
    fn local_sizes(&self) -> Sizes {
        let l = self.local();
        Sizes { num_src: l.slots.len(), num_dst: l.rows.len(), num_edges: l.local_edges }
    }

    /// Run one call over the local rows (see the module doc): outputs per
    /// local row and edge, parameter outputs this rank's part.
    fn run_local(&self, call: &dyn Call, inputs: &Inputs<'_>, schedule: &Schedule) -> Result<Named, BoxError> {
        self.check_same_kernel(call)?;
        let inputs = &self.with_stored_of(call, inputs)?;
        let mut local = self.localize(inputs)?;
        let l = self.local();
        let param_outputs = call.output_roles().iter().any(|(r, _)| *r == Role::Param);
        // On a device the local rows run after the exchange, uploaded whole:
        // the overlap below runs the interior rows on this CPU.
        let overlap = schedule.backend != Backend::Reference
            && !l.interior.is_empty()
            && !local.exchanges_dst()
            && !param_outputs
            && schedule.device == Device::Cpu;
        // Paged local rows (no CSR in memory) stream from their file after
        // the exchange too.
        let Some(g) = l.graph.as_ref().filter(|_| overlap) else {
            local.exchange(self)?;
            let out = call.run_call(self.local_rows()?, Side::Forward, &local.inputs(), schedule);
            local.recycle(self);
            return out;
        };
        // The variant and shapes from the fields over every slot (ghosts'
        // rows still zero); each step binds its own views.
        let runs = call.prepare_runs(g, self.local_sizes(), &local.inputs(), schedule)?;
        local.overlapped(self, |ins, rows, num_src| runs.run(ins, rows, num_src))?;
        runs.finish()
    }

    /// Local outputs → this rank's owned rows and edges, in owned order;
    /// parameter outputs all-reduced.
    fn owned_outputs_of(&self, call: &dyn Call, outs: Named) -> Result<Named, ShardError> {
        self.owned_outputs(outs, call.output_roles().into_iter().map(|(r, _)| r))
    }

    /// `steps` applications of `call`, output `feed` (a destination row
    /// output) becoming source field `into` after each, with one halo
    /// exchange for every `depth` steps (a shard of depth k: its ghost rows
    /// are computed too, so k steps need no other exchange). Returns the
    /// last step's outputs as a forward over the shard does; k steps at
    /// depth k give the bits of k steps at depth 1.
    pub fn iterate(
        &self,
        call: &dyn Call,
        inputs: &Inputs<'_>,
        feed: &str,
        into: &str,
        steps: usize,
        schedule: &Schedule,
    ) -> Result<Named, BoxError> {
        let l = self.local();
        let row_slot = l.row_slot.clone().ok_or(ShardError::IterateNotSquare)?;
        let inputs = &self.with_stored_of(call, inputs)?;
        if !inputs.has(Role::Src, into) {
            return Err(ShardError::IterateNoField { into: into.to_string() }.into());
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
                match &state {
                    Some(s) if *role == Role::Src && name == into => ins = ins.with_role(*role, name, s.view()),
                    _ => ins = ins.with_role(*role, name, input.view()),
                }
            }
            let mut local = self.localize(&ins)?;
            self.check_same_kernel(call)?;
            local.exchange(self)?;
            for _ in 0..burst {
                let outs = call.run_call(self.local_rows()?, Side::Forward, &local.inputs(), schedule)?;
                let out = outs.iter().find(|(n, _)| n == feed).map(|(_, t)| t).ok_or(ShardError::Lost("the fed output"))?;
                // Each computed row's output becomes its node's slot.
                let slot =
                    local.src.iter_mut().find(|(n, _)| n == into).map(|(_, t)| t).ok_or(ShardError::Lost("the fed field"))?;
                if slot.shape()[1..] != out.shape()[1..] || slot.dtype() != out.dtype() {
                    return Err(ShardError::IterateMismatch {
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
            if let Some((_, t)) = local.src.iter().find(|(n, _)| n == into) {
                state = Some(take_rows(t.data(), t.shape(), 0..l.owned_slots)?);
            }
        }
        match last {
            Some(outs) => Ok(self.owned_outputs_of(call, outs)?),
            None => self.run(call, Side::Forward, inputs, schedule),
        }
    }

    /// The cotangents of the local call's outputs: the owned rows' and
    /// edges' from the seed, the ghost rows' zero (their outputs are their
    /// owners').
    fn local_cotangents(&self, call: &dyn Call, ins: &Inputs<'_>, seed: Seed<'_, '_>) -> Result<Named, BoxError> {
        let mut cots = Vec::new();
        match seed {
            Seed::Cotangents(given) => {
                call.check_cotangents(&given.iter().map(|(n, _)| *n).collect::<Vec<_>>())?;
                for (role, name) in call.output_roles() {
                    let v = given.iter().find(|(n, _)| *n == name).map(|(_, v)| v).ok_or(ShardError::Lost("a cotangent"))?;
                    let t = self.local_cotangent(role, &name, v)?;
                    cots.push((name, t));
                }
            }
            Seed::SumOf(output) => {
                call.check_output(output)?;
                let (dtype, shapes) = call.output_shapes_at(self.local_sizes(), ins)?;
                for ((role, name), shape) in call.output_roles().into_iter().zip(shapes) {
                    let ones = if name == output { self.ones_in_sum(role, &shape) } else { 0 };
                    let mut t = Tensor::zeros(dtype, shape)?;
                    match t.data_mut() {
                        DataMut::F32(d) => d[..ones].fill(1.0),
                        DataMut::F64(d) => d[..ones].fill(1.0),
                        // `Tensor::zeros` of a dtype is f32 or f64.
                        DataMut::F16(_) | DataMut::BF16(_) => return Err(ShardError::Half("a cotangent").into()),
                    }
                    cots.push((name, t));
                }
            }
        }
        Ok(cots)
    }
}

impl Layer for Sharded {
    /// A forward over the shard (see the module doc): this rank's outputs,
    /// destination rows in [`Sharded::owned_dst`] order, edge outputs in
    /// [`Sharded::owned_edges`] order, parameter outputs summed over the
    /// ranks. Other sides run only as the backward's stages, over the
    /// local rows.
    fn run(&self, call: &dyn Call, side: Side, inputs: &Inputs<'_>, schedule: &Schedule) -> Result<Named, BoxError> {
        if side != Side::Forward {
            return Err(ExecError::Unavailable(
                "a sharded graph's rows are run through its halo exchange, not walked directly".into(),
            )
            .into());
        }
        self.check_field_types(call, inputs)?;
        let outs = self.run_local(call, inputs, schedule)?;
        Ok(self.owned_outputs_of(call, outs)?)
    }

    /// The backward over the shard: this rank's gradients (source ones
    /// complete, with the peers' contributions to its sources added in rank
    /// order), from cotangents per owned row and edge (or whole arrays), or
    /// the gradient of the sum of one output over every rank's rows. A tape
    /// of a shard one hop deep holds the residuals of its owned rows, which
    /// are its local rows, in order (the forward gave its outputs so).
    fn vjp(
        &self,
        call: &dyn Call,
        inputs: &Inputs<'_>,
        seed: Seed<'_, '_>,
        wrt: &Wrt,
        tape: Option<&Tape>,
        schedule: &Schedule,
    ) -> Result<Grads, BoxError> {
        if tape.is_some_and(|t| !t.is_empty()) && !self.keeps_residuals() {
            return Err(ShardError::DeepTape { depth: self.local().depth }.into());
        }
        self.check_field_types(call, inputs)?;
        self.check_same_kernel(call)?;
        let inputs = &self.with_stored_of(call, inputs)?;
        let mut local = self.localize(inputs)?;
        local.exchange(self)?;
        let ins = local.inputs();
        let cots = self.local_cotangents(call, &ins, seed)?;
        let views: Vec<(&str, TensorView<'_>)> = cots.iter().map(|(n, t)| (n.as_str(), t.view())).collect();
        let grads = call.vjp_call(self.local_rows()?, &ins, &views, wrt, tape, schedule)?;
        Ok(self.owned_gradients(grads)?)
    }

    /// A shard deeper than one hop computes ghost rows too, whose residuals
    /// its forward does not return: its backward recomputes.
    fn keeps_residuals(&self) -> bool {
        self.local().depth <= 1
    }
}
