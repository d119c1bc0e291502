//! A forward that keeps what its backward needs.
//!
//! With [`Schedule::residuals`] set, [`Kernel::forward`] runs the
//! compiler's saved-residual forward (`adjoint/residuals.rs`): the same
//! outputs, bit for bit, and per destination row the state of the fold the
//! backward's statistics stage would otherwise recompute (a max/min's
//! winning edge per lane, a softmax's row maximum, denominator and weighted
//! sum). They come back in a [`Tape`]; [`Kernel::vjp_taped`] runs the
//! backward that reads them instead of refolding every row over the
//! forward graph, with the recomputing backward's gradients bit for bit.
//! Without the flag, or for a kernel that keeps none ([`Residuals`] says
//! why), the tape is empty and the backward recomputes.
//!
//! The residuals are row outputs of the forward, so a paged call counts
//! them with its outputs against the RAM budget and spills them to files
//! like any output over it; [`Tape::keep_in`] puts them in a
//! [`Scope`](tiga_storage::scope::Scope), whose memory report lists them and
//! whose budget may spill them. A shard deeper than one hop, and a GPU
//! call, keep none (their backward recomputes): the deep shard computes
//! ghost rows whose residuals its forward does not return, and the PTX
//! lowering of the saved-residual forward is not yet checked.
//!
//! Where the plan has an in-memory variant (an edge side folded into the
//! source side, `adjoint/edge_terms.rs`), a backward whose rows are a CSR
//! in RAM on the CPU runs it; paged, offloaded and generated graphs run
//! the plan with its edge side (`ResidualStages::backward_for`).

use std::sync::Arc;

use tiga_compiler::adjoint::kernel::{residual_plan, Adjoint, ResidualChoice};
use tiga_runtime::exec::Side;
use tiga_runtime::layer::{Layered, Purpose};
use tiga_runtime::{Realization, Rows, Schedule, Tensor, TensorView};

use crate::error::{Error, Result, Unsupported};
use crate::fields::{Gradients, Inputs, Outputs, Wrt};
use crate::kernel::{Kernel, ResidualStages, Residuals};
use tiga_storage::scope::{Scope, TensorHandle};

impl ResidualStages {
    /// The backward a call over `r` runs: without its edge side where the
    /// plan has that variant and the rows are a CSR in RAM on the CPU
    /// (paged rows take the other, even a file's that would fit: its
    /// terms buffer would sit outside the budget the pages keep to).
    fn backward_for(&self, r: &dyn Realization, schedule: &Schedule) -> Result<(&Adjoint, &[Kernel])> {
        if let (Some(plan), Some(stages)) = (&self.plan.in_memory, &self.in_memory) {
            let in_memory = matches!(r.rows(Side::Forward, false)?, Rows::Memory(_));
            if in_memory && schedule.device == tiga_runtime::Device::Cpu {
                return Ok((&plan.adjoint, stages));
            }
        }
        Ok((&self.plan.adjoint, &self.stages))
    }
}

/// What a forward kept for its backward: the residuals by name (empty
/// when it kept none).
#[derive(Debug, Clone, Default)]
pub struct Tape(tiga_runtime::fields::Tape);

impl Tape {
    /// Whether the forward kept nothing (the backward recomputes).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// The residuals, by name, as the plan names them.
    pub fn residuals(&self) -> impl Iterator<Item = (&str, &Tensor)> {
        self.0.items().iter().map(|(n, t)| (n.as_str(), t.as_ref()))
    }
    /// Their size in bytes.
    pub fn bytes(&self) -> u64 {
        self.residuals().map(|(_, t)| tiga_storage::scope::tensor_bytes(t)).sum()
    }

    /// Move the residuals into `scope`, each named `<prefix>.<residual>`:
    /// they count against its host budget, may be spilled like any of its
    /// tensors, and appear in its memory report.
    pub fn keep_in(self, scope: &Scope, prefix: &str) -> Result<ScopedTape> {
        let kernel = self.0.kernel().to_string();
        let mut handles = Vec::with_capacity(self.0.items().len());
        for (name, t) in self.0.into_items() {
            let t = Arc::try_unwrap(t).unwrap_or_else(|shared| (*shared).clone());
            handles.push((name.clone(), scope.add(&format!("{prefix}.{name}"), t)?));
        }
        Ok(ScopedTape { kernel, handles })
    }
}

/// A [`Tape`] whose residuals live in a [`Scope`].
#[derive(Debug, Clone)]
pub struct ScopedTape {
    kernel: String,
    handles: Vec<(String, TensorHandle)>,
}

impl ScopedTape {
    /// The tape again, its residuals brought back from wherever the scope
    /// moved them (checksums verified).
    pub fn tape(&self, scope: &Scope) -> Result<Tape> {
        let items = self.handles.iter().map(|(n, h)| Ok((n.clone(), scope.get(h)?))).collect::<Result<Vec<_>>>()?;
        Ok(Tape(tiga_runtime::fields::Tape::new(self.kernel.clone(), items)))
    }
}

impl Kernel {
    /// The saved-residual forward and backward, built and lowered on first
    /// use (after the recomputing plan, which they start from).
    pub fn residuals(&self) -> Result<Residuals> {
        let cached = self.residuals.get_or_init(|| {
            let plain = self.adjoint_plan().map_err(|e| e.to_string())?;
            let choice = residual_plan(self.captured(), &plain.adjoint).map_err(|e| format!("saved residuals: {e}"))?;
            let plan = match choice {
                ResidualChoice::Keep(p) => *p,
                ResidualChoice::Recompute(why) => return Ok(Residuals::Recomputed(why)),
            };
            // Where the macro compiled them ahead of time: after the
            // recomputing plan's stages, the forward, then the new stages
            // of the plan and of its in-memory variant, each in plan order
            // (a stage kept from the recomputing plan keeps its own
            // variants).
            let n = plain.stages.len();
            let mut new_stages = n + 1..;
            let aot = |i: usize| self.adjoint_aot.get(i).copied().unwrap_or(&[]);
            let mut forward = Kernel::from_ir(plan.forward.clone()).map_err(|e| format!("saved-residual forward: {e}"))?;
            forward.aot = aot(n);
            let mut compile = |stages: &[tiga_compiler::adjoint::kernel::Stage], origin: &[Option<usize>]| {
                stages
                    .iter()
                    .zip(origin)
                    .map(|(s, origin)| {
                        let mut stage =
                            Kernel::from_ir(s.kernel.clone()).map_err(|e| format!("adjoint stage `{}`: {e}", s.kernel.name))?;
                        stage.aot = aot(origin.or_else(|| new_stages.next()).unwrap_or(usize::MAX));
                        Ok(stage)
                    })
                    .collect::<std::result::Result<Vec<_>, String>>()
            };
            let stages = compile(&plan.adjoint.stages, &plan.origin)?;
            let in_memory = plan.in_memory.as_ref().map(|f| compile(&f.adjoint.stages, &f.origin)).transpose()?;
            Ok(Residuals::Kept(Arc::new(ResidualStages { plan, forward, stages, in_memory })))
        });
        cached.clone().map_err(Error::Adjoint)
    }

    /// The forward of a call that will be differentiated: the outputs of
    /// [`Kernel::run_with`] (the same bits) and, when `schedule` asks for
    /// residuals and the kernel keeps any, what its backward needs
    /// ([`Kernel::vjp_taped`]). Otherwise the tape is empty.
    pub fn forward(&self, r: &dyn Realization, inputs: &Inputs<'_>, schedule: &Schedule) -> Result<(Outputs, Tape)> {
        let empty = Tape(tiga_runtime::fields::Tape::new(self.hash.clone(), Vec::new()));
        // A layer that does not return every residual its backward reads
        // (a deep shard's ghost rows) recomputes them.
        let kept_by_layer = r.layer().is_none_or(|l| l.keeps_residuals());
        if !schedule.residuals || !kept_by_layer || schedule.device != tiga_runtime::Device::Cpu {
            return Ok((self.run_with(r, inputs, schedule)?, empty));
        }
        let stages = match self.residuals()? {
            Residuals::Kept(s) => s,
            Residuals::Recomputed(_) => return Ok((self.run_with(r, inputs, schedule)?, empty)),
        };
        let mut all = stages.forward.run_with(r, inputs, schedule)?.items;
        let n = self.captured().outputs.len();
        let kept = all.split_off(n.min(all.len()));
        // The reference interpreter folds a built-in softmax in two passes
        // (the row's maximum first), where the kept state is the online
        // fold's: its outputs come from the plain forward, run beside.
        // (The compiled back ends lower both to the same loops.)
        if schedule.backend == tiga_runtime::Backend::Reference {
            all = self.run_with(r, inputs, schedule)?.items;
        }
        // Moved, not cloned: a file-backed output (a paged call over its
        // RAM budget) stays in its file.
        let mut kept: Vec<Option<(String, Tensor)>> = kept.into_iter().map(Some).collect();
        let mut items = Vec::with_capacity(kept.len());
        for res in &stages.plan.residuals {
            let out = res.output_name();
            let t = kept
                .iter_mut()
                .find(|slot| slot.as_ref().is_some_and(|(name, _)| *name == out))
                .and_then(Option::take)
                .ok_or_else(|| Error::Internal(format!("the saved-residual forward wrote no `{out}`")))?;
            items.push((res.name.clone(), Arc::new(t.1)));
        }
        Ok((Outputs { items: all }, Tape(tiga_runtime::fields::Tape::new(self.hash.clone(), items))))
    }

    /// [`Kernel::vjp_with`] after [`Kernel::forward`]: with the residuals
    /// of `tape` the backward reads them instead of recomputing its row
    /// statistics (the same gradients, bit for bit); with an empty tape it
    /// is [`Kernel::vjp_with`].
    pub fn vjp_taped(
        &self,
        r: &dyn Realization,
        inputs: &Inputs<'_>,
        tape: &Tape,
        cotangents: &[(&str, TensorView<'_>)],
        schedule: &Schedule,
    ) -> Result<Gradients> {
        self.vjp_taped_wrt(r, inputs, tape, cotangents, &Wrt::All, schedule)
    }

    /// [`Kernel::vjp_taped`] computing only the gradients `wrt` names
    /// (see [`Kernel::vjp_wrt`]).
    pub fn vjp_taped_wrt(
        &self,
        r: &dyn Realization,
        inputs: &Inputs<'_>,
        tape: &Tape,
        cotangents: &[(&str, TensorView<'_>)],
        wrt: &Wrt,
        schedule: &Schedule,
    ) -> Result<Gradients> {
        self.vjp_from_tape(r, inputs, &tape.0, cotangents, wrt, schedule)
    }

    /// [`Kernel::vjp_taped_wrt`] from the runtime's tape (what a layer
    /// passes on, moved into its rows' numbering).
    pub(crate) fn vjp_from_tape(
        &self,
        r: &dyn Realization,
        inputs: &Inputs<'_>,
        tape: &tiga_runtime::fields::Tape,
        cotangents: &[(&str, TensorView<'_>)],
        wrt: &Wrt,
        schedule: &Schedule,
    ) -> Result<Gradients> {
        if tape.is_empty() {
            return self.vjp_wrt(r, inputs, cotangents, wrt, schedule);
        }
        self.check_wrt(wrt)?;
        if tape.kernel() != self.hash {
            return Err(Unsupported::OtherKernelsTape { kernel: self.name().to_string() }.into());
        }
        // A shard: its inputs localized and its halo exchanged, the stages
        // run over its local rows with the tape of its owned rows. A file
        // laid out in a node order: the stages run over it in its
        // numbering, the tape's residuals moved in with the fields and
        // cotangents.
        if let Some(layer) = Layered::of(r, Purpose::TapedVjp, schedule)? {
            return Ok(Gradients { items: layer.vjp(self, inputs, cotangents, wrt, Some(tape), schedule)? });
        }
        let Residuals::Kept(stages) = self.residuals()? else {
            return Err(Error::Internal(format!("kernel `{}` keeps no residuals, but a tape holds some", self.name())));
        };
        let (adjoint, stage_kernels) = stages.backward_for(r, schedule)?;
        // The tape's residuals are in the caller's numbering (the forward
        // moved them out with its outputs), and so is this backward: its
        // stages run over `r` as given, not each renumbering its own
        // fields in and out (the gradients are the same bits either way).
        let stage_schedule = schedule.clone().renumber(tiga_runtime::Renumber::None);
        self.run_plan(r, inputs, cotangents, &stage_schedule, adjoint, stage_kernels, Some(tape), wrt)
    }

    /// [`Kernel::grad_with`] after [`Kernel::forward`] (see
    /// [`Kernel::vjp_taped`]).
    pub fn grad_taped(
        &self,
        r: &dyn Realization,
        inputs: &Inputs<'_>,
        tape: &Tape,
        output: &str,
        schedule: &Schedule,
    ) -> Result<Gradients> {
        let cots = self.sum_cotangents(r, inputs, output)?;
        let views: Vec<(&str, TensorView<'_>)> = cots.iter().map(|(n, t)| (n.as_str(), t.view())).collect();
        self.vjp_taped(r, inputs, tape, &views, schedule)
    }
}
