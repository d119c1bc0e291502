//! Calls over a halo-sharded graph: the unchanged kernel, run per rank on
//! its local rows, with placement and exchange derived here.
//!
//! A call's fields come in either numbering, field by field: the whole
//! array in the user's numbering (each rank takes the rows it needs), or
//! this rank's rows only, in the order of [`Sharded::owned_src`],
//! [`Sharded::owned_dst`] or [`Sharded::owned_edges`]. Outputs and
//! gradients come out per rank in that owned order; parameter outputs and
//! parameter gradients are all-reduced in rank order, so every rank holds
//! the same bits. [`ShardedOutputs::gather`] puts a rank's results back in
//! the user's numbering at rank 0.
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
use tiga_dist::shard::{take_rows, take_rows_into, take_rows_padded, ShardError, Sharded};
use tiga_runtime::abi::RawArgs;
use tiga_runtime::exec::{self, ParamPartials, RowRunner};
use tiga_runtime::{Backend, Data, DataMut, Schedule, Tensor, TensorView};
use tiga_storage::FieldRole;

use crate::call::{bind_extents, output_buffers};
use crate::error::{Error, Result};
use crate::fields::{Gradients, Input, Inputs, Outputs};
use crate::kernel::Kernel;
use crate::residuals::Tape;
use crate::vjp::Seed;

impl From<ShardError> for Error {
    fn from(e: ShardError) -> Self {
        Error::Shard(e)
    }
}

/// A call's fields on this rank: source fields over the slots (owned rows
/// filled, ghosts to come), destination fields over the local rows, edge
/// fields over the local edges, parameters as given.
struct Local<'a> {
    /// (name, tensor) of each source field, in the order given.
    src: Vec<(String, Tensor)>,
    /// Destination fields of a deep halo, over the slots (their ghost rows
    /// come with the exchange, then are taken by [`Local::rows_of_slots`]).
    dst_slots: Vec<(String, Tensor)>,
    rest: Vec<(Role, String, Input<'a>)>,
}

fn leading(v: &TensorView<'_>, role: Role, name: &str) -> Result<usize> {
    v.shape()
        .first()
        .copied()
        .ok_or_else(|| Error::Unsupported(format!("{} field `{name}` is a scalar; a sharded call needs its rows", role.name())))
}

fn numbering_error(role: Role, name: &str, got: usize, global: usize, owned: usize, rank: usize) -> Error {
    Error::Unsupported(format!(
        "{} field `{name}` has {got} rows: a sharded call takes the whole array ({global} rows, the user's numbering) or \
         rank {rank}'s own rows ({owned})",
        role.name()
    ))
}

impl Kernel {
    /// `inputs` plus this rank's rows of the kernel's fields the call does
    /// not pass and the sharded graph's file stores.
    fn with_stored<'a>(&self, sh: &Sharded, inputs: &Inputs<'a>) -> Result<Inputs<'a>> {
        let mut all = inputs.clone();
        for f in &self.captured().fields {
            if inputs.has(f.role, &f.name) {
                continue;
            }
            let role = match f.role {
                Role::Src => FieldRole::Src,
                Role::Dst => FieldRole::Dst,
                Role::Edge => FieldRole::Edge,
                Role::Param => continue,
            };
            if let Some(t) = sh.stored_owned(role, &f.name) {
                all = all.with_role(f.role, &f.name, Input::Owned(t?));
            }
        }
        Ok(all)
    }

    /// Localize `inputs` for this rank (see the module doc).
    fn localize<'a>(&self, sh: &Sharded, inputs: &'a Inputs<'_>) -> Result<Local<'a>> {
        let l = sh.local();
        let deep = l.owned_rows < l.rows.len();
        let ghosts = l.slots.len() - l.owned_slots;
        let mut local = Local { src: Vec::new(), dst_slots: Vec::new(), rest: Vec::new() };
        for (role, name, input) in &inputs.fields {
            let v = input.view();
            match role {
                Role::Src => {
                    let n = leading(&v, *role, name)?;
                    // Over the slots: owned rows now, ghosts' by the
                    // exchange (every ghost slot is some peer's to fill).
                    let mut shape = v.shape().to_vec();
                    shape[0] = l.slots.len();
                    let mut t = sh.slot_buffer(v.dtype(), &shape)?;
                    if n == l.num_src {
                        take_rows_into(&mut t, v.data(), v.shape(), l.slots[..l.owned_slots].iter().map(|&u| u as usize))?
                    } else if n == l.owned_slots {
                        take_rows_into(&mut t, v.data(), v.shape(), 0..n)?
                    } else {
                        return Err(numbering_error(*role, name, n, l.num_src, l.owned_slots, l.rank));
                    };
                    local.src.push((name.clone(), t));
                }
                Role::Dst => {
                    let n = leading(&v, *role, name)?;
                    let t = if n == l.num_dst {
                        take_rows(v.data(), v.shape(), l.rows.iter().map(|&u| u as usize))?
                    } else if n == l.owned_rows && !deep {
                        // Owned local rows are in owned order.
                        v.to_tensor()
                    } else if n == l.owned_rows {
                        // A deep halo's ghost rows: exchanged as slots (a
                        // square graph's owned slots are its owned rows, in
                        // the same increasing order).
                        local.dst_slots.push((name.clone(), take_rows_padded(v.data(), v.shape(), 0..n, ghosts)?));
                        continue;
                    } else {
                        return Err(numbering_error(*role, name, n, l.num_dst, l.owned_rows, l.rank));
                    };
                    local.rest.push((*role, name.clone(), Input::Owned(t)));
                }
                Role::Edge => {
                    let n = leading(&v, *role, name)?;
                    let t = if n == l.num_edges {
                        take_rows(v.data(), v.shape(), l.edge_ids.iter().map(|&e| e as usize))?
                    } else if n == l.owned_edges && !deep {
                        match sh.edge_positions() {
                            Some(pos) => take_rows(v.data(), v.shape(), pos.iter().map(|&p| p as usize))?,
                            None => v.to_tensor(),
                        }
                    } else if n == l.owned_edges {
                        return Err(Error::Unsupported(format!(
                            "edge field `{name}`: a halo deeper than 1 computes ghost rows too, whose edges only the whole \
                             array has: pass it in the user's numbering ({} rows)",
                            l.num_edges
                        )));
                    } else {
                        return Err(numbering_error(*role, name, n, l.num_edges, l.owned_edges, l.rank));
                    };
                    local.rest.push((*role, name.clone(), Input::Owned(t)));
                }
                Role::Param => local.rest.push((*role, name.clone(), Input::View(v))),
            }
        }
        Ok(local)
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
        let mut local = self.localize(sh, inputs)?;
        let l = sh.local();
        // Moved out of `local`, exchanged, then handed back.
        let mut slot_fields = local.take_slot_fields()?;
        let halo = sh.start_halo(&slot_fields.iter().collect::<Vec<_>>())?;
        let extents = Extents { num_src: l.slots.len(), num_dst: l.rows.len(), num_edges: l.local_edges };
        let k = self.captured();
        let deep = !local.dst_slots.is_empty();
        let param_outputs = !k.outputs_of(Role::Param).is_empty();
        // On a device the local rows run after the exchange, uploaded whole:
        // the overlap below runs the interior rows on this CPU.
        let device = schedule.device != tiga_runtime::Device::Cpu;
        let overlap = schedule.backend != Backend::Reference && !l.interior.is_empty() && !deep && !param_outputs && !device;
        // Paged local rows (no CSR in memory) stream from their file after
        // the exchange too.
        let Some(g) = l.graph.as_ref().filter(|_| overlap) else {
            halo.finish(sh, &mut slot_fields)?;
            self.take_back(&mut local, slot_fields, sh)?;
            let out = self.run_with(sh.local_rows()?, &local.inputs(), schedule);
            for (_, t) in local.src {
                sh.recycle(t);
            }
            return out;
        };
        // The interior rows read owned slots only: they run on the owned
        // prefix of each source field while the ghosts travel.
        let (p, mut outs, dtype, widths) = {
            let ins = local.inputs_with_src(&slot_fields, Some(l.owned_slots))?;
            let b = bind_extents(k, Extents { num_src: l.owned_slots, ..extents }, &ins)?;
            let p = self.prepare(&b, false, None, schedule.backend)?;
            let outs = output_buffers(self.loop_kernel(), b.dtype, &p.shapes)?;
            (p, outs, b.dtype, b.widths.clone())
        };
        if output_shapes(k, &extents, &widths) != p.shapes {
            return Err(Error::Internal("sharded output shapes differ between the interior and boundary rows".into()));
        }
        let partials = ParamPartials::new(g.num_dst(), &p.param_outs);
        let runner = RowRunner::new(p.entry, &p.shapes, dtype, &mut outs, partials);
        let raw_for = |f: &[*const u8]| RawArgs {
            offsets: g.offsets().as_ptr(),
            cols: g.cols().as_ptr(),
            edge_ids: std::ptr::null(),
            fields: f.as_ptr(),
            outputs: std::ptr::null(),
            stencil: std::ptr::null(),
        };
        {
            let ins = local.inputs_with_src(&slot_fields, Some(l.owned_slots))?;
            let b = bind_extents(k, Extents { num_src: l.owned_slots, ..extents }, &ins)?;
            let ptrs = b.field_ptrs();
            // SAFETY: the variant was compiled for this kernel, dtype and
            // widths without edge ids (edge fields are in local CSR order);
            // `bind_extents` checked every field against these extents, and
            // the interior rows read only slots below `owned_slots` (the plan
            // put every row that reads a ghost in a boundary run); the CSR
            // was validated when built; `outs` lives until `finish`; the
            // kernel has no parameter outputs.
            unsafe { exec::execute_row_runs(&runner, raw_for(&ptrs), g.offsets(), &l.interior, schedule.threads)? };
        }
        halo.finish(sh, &mut slot_fields)?;
        {
            let ins = local.inputs_with_src(&slot_fields, None)?;
            let b = bind_extents(k, extents, &ins)?;
            if b.widths != widths || b.dtype != dtype {
                return Err(Error::Internal("sharded widths differ between the interior and boundary rows".into()));
            }
            let ptrs = b.field_ptrs();
            // SAFETY: as above, for the boundary rows, whose ghost slots
            // are now filled; every field covers all slots.
            unsafe { exec::execute_row_runs(&runner, raw_for(&ptrs), g.offsets(), &l.boundary, schedule.threads)? };
        }
        runner.finish(&mut outs);
        for t in slot_fields {
            sh.recycle(t);
        }
        Ok(self.outputs(outs))
    }

    /// Put the exchanged slot fields back where `local` keeps them, and a
    /// deep halo's destination fields as rows.
    fn take_back(&self, local: &mut Local<'_>, slot_fields: Vec<Tensor>, sh: &Sharded) -> Result<()> {
        let mut it = slot_fields.into_iter();
        for (_, t) in local.src.iter_mut() {
            *t = it.next().ok_or_else(|| Error::Internal("a halo field went missing".into()))?;
        }
        let row_slot = sh.local().row_slot.clone().unwrap_or_default();
        for (name, _) in std::mem::take(&mut local.dst_slots) {
            let t = it.next().ok_or_else(|| Error::Internal("a halo field went missing".into()))?;
            let rows = take_rows(t.data(), t.shape(), row_slot.iter().map(|&s| s as usize))?;
            local.rest.push((Role::Dst, name, Input::Owned(rows)));
        }
        Ok(())
    }

    /// Refuse half-precision fields and outputs on a sharded call before
    /// anything is exchanged: halo rows, partial sums and ghost slots are
    /// moved and added in the call's dtype.
    pub(crate) fn check_sharded_field_types(&self, inputs: &Inputs<'_>) -> Result<()> {
        let half_in = inputs.field_types().any(|t| t.is_half());
        let f64_call = inputs.field_types().any(|t| t == tiga_runtime::FieldType::F64);
        let half_out = !f64_call && self.captured().outputs.iter().any(|o| o.declared.is_half());
        if half_in || half_out {
            return Err(Error::Unsupported(format!(
                "kernel `{}`: sharded calls take f32 and f64 fields and outputs only (half-precision fields run over a \
                 graph or stencil in memory)",
                self.name()
            )));
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
        let l = sh.local();
        let mut items = Vec::with_capacity(outs.items.len());
        for ((name, t), o) in outs.items.into_iter().zip(&self.captured().outputs) {
            let t = match o.role {
                Role::Dst => owned_rows(t, l.owned_rows, None)?,
                Role::Edge => owned_rows(t, l.owned_edges, sh.edge_positions())?,
                _ => all_reduce(sh, t)?,
            };
            items.push((name, t));
        }
        Ok(Outputs { items })
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
        let row_slot = l.row_slot.clone().ok_or_else(|| {
            Error::Unsupported("iterating feeds an output back as a source field: the graph must be square".into())
        })?;
        match self.captured().outputs.iter().find(|o| o.name == feed) {
            Some(o) if o.role == Role::Dst => {}
            _ => return Err(Error::NoOutput { name: feed.into(), outputs: self.output_names().join(", ") }),
        }
        let inputs = &self.with_stored(sh, inputs)?;
        if !inputs.has(Role::Src, into) {
            return Err(Error::Unsupported(format!("iterate: source field `{into}` is not among the inputs")));
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
            let mut local = self.localize(sh, &ins)?;
            let mut slot_fields = local.take_slot_fields()?;
            self.check_same_kernel(sh)?;
            sh.start_halo(&slot_fields.iter().collect::<Vec<_>>())?.finish(sh, &mut slot_fields)?;
            self.take_back(&mut local, slot_fields, sh)?;
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
                    return Err(Error::Unsupported(format!(
                        "iterate: output `{feed}` is {} {:?} per row, source field `{into}` {} {:?}",
                        out.dtype(),
                        &out.shape()[1..],
                        slot.dtype(),
                        &slot.shape()[1..]
                    )));
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
        wrt: &crate::Wrt,
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
        wrt: &crate::Wrt,
        tape: Option<&Tape>,
    ) -> Result<Gradients> {
        self.check_sharded_field_types(inputs)?;
        self.check_same_kernel(sh)?;
        let l = sh.local();
        let inputs = &self.with_stored(sh, inputs)?;
        let mut local = self.localize(sh, inputs)?;
        let mut slot_fields = local.take_slot_fields()?;
        sh.start_halo(&slot_fields.iter().collect::<Vec<_>>())?.finish(sh, &mut slot_fields)?;
        self.take_back(&mut local, slot_fields, sh)?;
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
        // Source gradients over the slots: ghosts go home.
        let mut items = grads.items;
        let src_idx: Vec<usize> = items.iter().enumerate().filter(|(_, (r, _, _))| *r == Role::Src).map(|(i, _)| i).collect();
        let mut src_grads: Vec<Tensor> = src_idx.iter().map(|&i| items[i].2.clone()).collect();
        sh.return_ghosts(&mut src_grads)?;
        for (&i, g) in src_idx.iter().zip(src_grads) {
            items[i].2 = take_rows(g.data(), g.shape(), 0..l.owned_slots)?;
        }
        let mut out = Vec::with_capacity(items.len());
        for (role, name, t) in items {
            let t = match role {
                Role::Src => t,
                Role::Dst => owned_rows(t, l.owned_rows, None)?,
                Role::Edge => owned_rows(t, l.owned_edges, sh.edge_positions())?,
                Role::Param => all_reduce(sh, t)?,
            };
            out.push((role, name, t));
        }
        Ok(Gradients { items: out })
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
                for (n, _) in given {
                    if !k.outputs.iter().any(|o| o.name == *n) {
                        return Err(Error::Cotangent(format!("cotangent for `{n}`, but kernel `{}` has no such output", k.name)));
                    }
                }
                for o in &k.outputs {
                    let Some((_, v)) = given.iter().find(|(n, _)| *n == o.name) else {
                        return Err(Error::Cotangent(format!("missing the cotangent of output `{}`", o.name)));
                    };
                    let ids: Vec<u64> = l.rows.iter().map(|&u| u64::from(u)).collect();
                    let t = match o.role {
                        Role::Dst => local_rows(v, l.num_dst, &ids, l.owned_rows, None, &o.name)?,
                        Role::Edge => local_rows(v, l.num_edges, &l.edge_ids, l.owned_edges, sh.edge_positions(), &o.name)?,
                        _ => v.to_tensor(),
                    };
                    cots.push((o.name.clone(), t));
                }
            }
            Seed::SumOf(output) => {
                if !k.outputs.iter().any(|o| o.name == output) {
                    return Err(Error::NoOutput { name: output.into(), outputs: self.output_names().join(", ") });
                }
                let extents = Extents { num_src: l.slots.len(), num_dst: l.rows.len(), num_edges: l.local_edges };
                let b = bind_extents(k, extents, ins)?;
                for (o, shape) in k.outputs.iter().zip(output_shapes(k, &extents, &b.widths)) {
                    let w: usize = shape.iter().skip(1).product();
                    let ones = match o.role {
                        _ if o.name != output => 0,
                        Role::Dst => l.owned_rows * w,
                        Role::Edge => l.owned_edges * w,
                        // A parameter output is summed over the ranks: its
                        // cotangent counts once, on rank 0.
                        _ if sh.rank() == 0 => shape.iter().product(),
                        _ => 0,
                    };
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

impl<'a> Local<'a> {
    /// The source fields, then a deep halo's destination fields, moved out
    /// (for the exchange; [`Kernel::take_back`] returns them).
    fn take_slot_fields(&mut self) -> Result<Vec<Tensor>> {
        let mut out = Vec::with_capacity(self.src.len() + self.dst_slots.len());
        for (_, t) in self.src.iter_mut().chain(self.dst_slots.iter_mut()) {
            let empty = Tensor::zeros(t.dtype(), vec![0]).map_err(Error::from)?;
            out.push(std::mem::replace(t, empty));
        }
        Ok(out)
    }

    /// The local call's inputs, source fields from `local.src`.
    fn inputs(&self) -> Inputs<'_> {
        let mut ins = Inputs::new();
        for (name, t) in &self.src {
            ins = ins.with_role(Role::Src, name, t.view());
        }
        for (role, name, v) in &self.rest {
            ins = ins.with_role(*role, name, v.view());
        }
        ins
    }

    /// The local call's inputs with source fields from `slots` (in the
    /// order of `self.src`), each cut to its first `owned` rows if given.
    fn inputs_with_src<'s>(&'s self, slots: &'s [Tensor], owned: Option<usize>) -> Result<Inputs<'s>> {
        let mut ins = Inputs::new();
        for ((name, _), t) in self.src.iter().zip(slots) {
            let v = match owned {
                Some(n) => prefix_view(t, n)?,
                None => t.view(),
            };
            ins = ins.with_role(Role::Src, name, v);
        }
        for (role, name, v) in &self.rest {
            ins = ins.with_role(*role, name, v.view());
        }
        Ok(ins)
    }
}

/// The first `rows` rows of `t`, borrowed.
fn prefix_view(t: &Tensor, rows: usize) -> Result<TensorView<'_>> {
    let mut shape = t.shape().to_vec();
    let w: usize = shape.iter().skip(1).product();
    shape[0] = rows;
    let v = match t.data() {
        Data::F32(d) => TensorView::from_slice_f32(shape, &d[..rows * w]),
        Data::F64(d) => TensorView::from_slice_f64(shape, &d[..rows * w]),
        Data::F16(d) => TensorView::new(shape, Data::F16(&d[..rows * w])),
        Data::BF16(d) => TensorView::new(shape, Data::BF16(&d[..rows * w])),
    };
    v.map_err(Error::from)
}

/// Rows `0..n` of `t` (local order) placed at `pos[i]` (owned order); with
/// no `pos` (local order is owned order), `t` itself when it has `n` rows.
fn owned_rows(t: Tensor, n: usize, pos: Option<&[u32]>) -> Result<Tensor> {
    let Some(pos) = pos else {
        return match t.shape().first() {
            Some(&rows) if rows == n => Ok(t),
            _ => take_rows(t.data(), t.shape(), 0..n).map_err(Error::from),
        };
    };
    let mut inv = vec![0usize; n];
    for (i, &p) in pos.iter().enumerate().take(n) {
        inv[p as usize] = i;
    }
    take_rows(t.data(), t.shape(), inv.into_iter()).map_err(Error::from)
}

/// `src`'s rows written into `dst` at `slots[i]` for row i.
fn copy_rows_to(src: &Tensor, dst: &mut Tensor, slots: &[u32]) -> Result<()> {
    let w: usize = src.shape().iter().skip(1).product();
    match (src.data(), dst.data_mut()) {
        (Data::F32(s), DataMut::F32(d)) => {
            for (i, &sl) in slots.iter().enumerate() {
                d[sl as usize * w..(sl as usize + 1) * w].copy_from_slice(&s[i * w..(i + 1) * w]);
            }
        }
        (Data::F64(s), DataMut::F64(d)) => {
            for (i, &sl) in slots.iter().enumerate() {
                d[sl as usize * w..(sl as usize + 1) * w].copy_from_slice(&s[i * w..(i + 1) * w]);
            }
        }
        _ => return Err(Error::Internal("iterate: dtypes differ".into())),
    }
    Ok(())
}

/// A parameter output or gradient summed over the ranks in rank order.
fn all_reduce(sh: &Sharded, mut t: Tensor) -> Result<Tensor> {
    let comm = sh.comm();
    match t.data_mut() {
        DataMut::F32(d) => comm.all_reduce_f32(d),
        DataMut::F64(d) => comm.all_reduce_f64(d),
        // Sharded calls refuse half-precision outputs up front.
        DataMut::F16(_) | DataMut::BF16(_) => {
            return Err(Error::Internal("a half-precision parameter output of a sharded call".into()))
        }
    }
    .map_err(|e| Error::Shard(e.into()))?;
    Ok(t)
}

/// A cotangent over the local rows (or edges) `ids`: from the whole array
/// (`global` rows) or from this rank's owned ones (at `pos`, or in order);
/// the rest of the local rows (a deep halo's ghost rows) zero, in one copy.
fn local_rows(v: &TensorView<'_>, global: usize, ids: &[u64], owned: usize, pos: Option<&[u32]>, name: &str) -> Result<Tensor> {
    let n = v.shape().first().copied().unwrap_or(0);
    let rows: Vec<usize> = if n == global {
        ids[..owned].iter().map(|&u| u as usize).collect()
    } else if n == owned {
        match pos {
            Some(pos) => pos.iter().map(|&p| p as usize).collect(),
            None => (0..owned).collect(),
        }
    } else {
        return Err(Error::Cotangent(format!(
            "the cotangent of `{name}` has {n} rows: give the whole array ({global}) or this rank's own ({owned})"
        )));
    };
    take_rows_padded(v.data(), v.shape(), rows.into_iter(), ids.len() - owned).map_err(Error::from)
}
