//! Gradients: the vector-Jacobian product of a kernel, run as the adjoint
//! stages `generate-adjoint` built (ordinary kernels over the forward,
//! transposed or row-reversed graph), then summed per input.

use std::sync::Arc;

use tiga_compiler::adjoint::kernel::{generate_adjoint, Adjoint, Binding, GraphUse};
use tiga_compiler::bind::{output_shapes, Extents};
use tiga_compiler::ir::{self, Role};
use tiga_runtime::exec::{PageView, Side};
use tiga_runtime::fields::{Seed, Tape};
use tiga_runtime::layer::{Layered, Purpose};
use tiga_runtime::{Backend, DType, DataMut, Graph, Realization, Rows, Schedule, Tensor, TensorView};

use crate::error::{CotangentError, Error, Result, Unsupported};
use crate::fields::{add_tensors, Gradients, Input, Inputs, Outputs, Wrt};
use crate::kernel::{AdjointPlan, Kernel};

/// Each output's name and shape, in declaration order.
pub type OutputShapes = Vec<(String, Vec<usize>)>;

/// Which stages a backward runs to give the gradients `wrt` names: those
/// whose outputs are parts of them, and the earlier stages those read.
fn needed_stages(adjoint: &Adjoint, wrt: &Wrt) -> Vec<bool> {
    fn mark(b: &Binding, needed: &mut [bool]) {
        match b {
            Binding::Stage { stage, .. } => {
                if let Some(n) = needed.get_mut(*stage) {
                    *n = true;
                }
            }
            Binding::WinnerScatter { winner, value } => {
                mark(winner, needed);
                mark(value, needed);
            }
            Binding::Forward(..) | Binding::Cotangent(_) | Binding::EdgeRank | Binding::InvDegree | Binding::Residual(_) => {}
        }
    }
    let mut needed = vec![false; adjoint.stages.len()];
    for gp in adjoint.gradients.iter().filter(|gp| wrt.wants(gp.role, &gp.name)) {
        for (s, _) in &gp.parts {
            if let Some(n) = needed.get_mut(*s) {
                *n = true;
            }
        }
    }
    // A stage reads only stages before it: one pass from the last.
    for si in (0..adjoint.stages.len()).rev() {
        if needed[si] {
            for b in &adjoint.stages[si].bindings {
                mark(b, &mut needed);
            }
        }
    }
    needed
}

fn to_f64(v: &TensorView<'_>) -> Result<Tensor> {
    Tensor::from_f64(v.shape().to_vec(), v.to_f64_vec()).map_err(Error::from)
}

/// Ones, written in parallel into a tensor from [`Tensor::zeros`] (large
/// ones in 2 MiB pages): built with `vec![1.0; n]`, a 256 MB cotangent took
/// 65,536 page faults and about 100 ms, as long as the backward it feeds.
fn ones_like(dtype: DType, shape: &[usize]) -> Result<Tensor> {
    use rayon::prelude::*;
    let mut t = Tensor::zeros(dtype, shape.to_vec()).map_err(Error::from)?;
    match t.data_mut() {
        DataMut::F32(d) => d.par_chunks_mut(1 << 18).for_each(|c| c.fill(1.0)),
        DataMut::F64(d) => d.par_chunks_mut(1 << 17).for_each(|c| c.fill(1.0)),
        // `Tensor::zeros` of a dtype is f32 or f64.
        DataMut::F16(_) | DataMut::BF16(_) => return Err(Error::Internal("half-precision ones of a dtype".into())),
    }
    Ok(t)
}

/// Drop the outputs of stages before `si` that no running stage from `si`
/// on reads (`current`: stage `si`'s bindings, scatters aside, as they are
/// computed by now) and no gradient takes.
fn release_unread(stage_outs: &mut [Outputs], adjoint: &Adjoint, si: usize, current: &[Binding], runs: &dyn Fn(usize) -> bool) {
    fn reads(b: &Binding, s: usize, name: &str) -> bool {
        match b {
            Binding::Stage { stage, output } => *stage == s && output == name,
            Binding::WinnerScatter { winner, value } => reads(winner, s, name) || reads(value, s, name),
            _ => false,
        }
    }
    for (s, outs) in stage_outs.iter_mut().enumerate().take(si) {
        outs.items.retain(|(name, _)| {
            let later = adjoint
                .stages
                .iter()
                .enumerate()
                .skip(si + 1)
                .any(|(t, st)| runs(t) && st.bindings.iter().any(|b| reads(b, s, name)));
            let now = current.iter().any(|b| !matches!(b, Binding::WinnerScatter { .. }) && reads(b, s, name));
            let gradient = adjoint.gradients.iter().any(|g| g.parts.iter().any(|(p, n)| *p == s && n == name));
            later || now || gradient
        });
    }
}

fn no_csr() -> Error {
    Unsupported::StencilBackward.into()
}

/// Each edge's position within its forward destination row, indexed by the
/// edge's user index, in the call's dtype.
fn ranks_tensor(r: &dyn Realization, schedule: &Schedule, num_edges: usize, dtype: DType) -> Result<Tensor> {
    let mut ranks = Tensor::zeros(dtype, vec![num_edges]).map_err(Error::from)?;
    // Written in place, in the call's dtype (a rank below 2^24 is exact in
    // f32).
    fn fill<T>(ranks: &mut [T], v: &PageView<'_>, rank: impl Fn(usize) -> T) {
        let first = v.offsets.first().copied().unwrap_or(0) as usize;
        for w in v.offsets.windows(2) {
            let (s, t) = (w[0] as usize, w[1] as usize);
            for p in s..t {
                let id = v.edge_ids.map(|e| e[p - first] as usize).unwrap_or(p);
                if let Some(r) = ranks.get_mut(id) {
                    *r = rank(p - s);
                }
            }
        }
    }
    let rows = r.rows(Side::Forward, true)?;
    rows.for_each_page(schedule, |v| {
        match ranks.data_mut() {
            DataMut::F32(d) => {
                tiga_runtime::exec::f32_ranks_exact(v.offsets)?;
                fill(d, &v, |r| r as f32)
            }
            DataMut::F64(d) => fill(d, &v, |r| r as f64),
            // `Tensor::zeros` of a dtype is f32 or f64.
            DataMut::F16(_) | DataMut::BF16(_) => return Err(Error::Internal("half-precision edge ranks".into())),
        }
        Ok::<(), Error>(())
    })
    .unwrap_or_else(|| Err(no_csr()))?;
    Ok(ranks)
}

/// One over each forward row's degree (1 for an empty row), in the call's
/// dtype.
fn inv_degree_tensor(r: &dyn Realization, schedule: &Schedule, dtype: DType) -> Result<Tensor> {
    let mut inv: Vec<f64> = Vec::new();
    let rows = r.rows(Side::Forward, false)?;
    rows.for_each_page(schedule, |v| {
        inv.extend(v.offsets.windows(2).map(|w| 1.0 / ((w[1] - w[0]).max(1) as f64)));
        Ok::<(), Error>(())
    })
    .unwrap_or_else(|| Err(no_csr()))?;
    match dtype {
        DType::F32 => Tensor::from_f32(vec![inv.len()], inv.iter().map(|&x| x as f32).collect()),
        DType::F64 => Tensor::from_f64(vec![inv.len()], inv),
    }
    .map_err(Error::from)
}

impl Kernel {
    /// The adjoint stages, built and lowered on first use.
    pub fn adjoint_plan(&self) -> Result<Arc<AdjointPlan>> {
        let cached = self.adjoint.get_or_init(|| {
            let adjoint = generate_adjoint(self.captured()).map_err(|e| format!("generate-adjoint: {e}"))?;
            let stages = adjoint
                .stages
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let mut stage =
                        Kernel::from_ir(s.kernel.clone()).map_err(|e| format!("adjoint stage `{}`: {e}", s.kernel.name))?;
                    // The macro compiled this stage ahead of time too.
                    stage.aot = self.adjoint_aot.get(i).copied().unwrap_or(&[]);
                    Ok(stage)
                })
                .collect::<std::result::Result<Vec<_>, String>>()?;
            Ok(Arc::new(AdjointPlan { adjoint, stages }))
        });
        cached.clone().map_err(Error::Adjoint)
    }

    /// The shapes of this call's outputs.
    pub fn output_shapes(&self, r: &dyn Realization, inputs: &Inputs<'_>) -> Result<OutputShapes> {
        Ok(self.bound_outputs(r, inputs)?.1)
    }

    /// The call's dtype and its outputs' shapes, binding once.
    fn bound_outputs(&self, r: &dyn Realization, inputs: &Inputs<'_>) -> Result<(DType, OutputShapes)> {
        let extents = Extents { num_src: r.num_src(), num_dst: r.num_dst(), num_edges: r.num_edges() };
        let handles = crate::bind::stored_fields(self.captured(), r, inputs);
        let all = crate::bind::with_stored_fields(inputs, &handles)?;
        let b = crate::bind::bind_extents(self.captured(), extents, &all)?;
        let shapes = output_shapes(self.captured(), &b.extents, &b.widths);
        Ok((b.dtype, self.captured().outputs.iter().map(|o| o.name.clone()).zip(shapes).collect()))
    }

    /// The vector-Jacobian product over any realization: given the
    /// cotangent of each output (by name), the gradient of every input
    /// (source, destination, edge and parameter fields) in the call's
    /// dtype. The stages run over the realization's rows of each side (the
    /// source stage over its transpose, a monoid's suffix stage over its
    /// rows reversed), so a `.gfg` file's backward runs paged and a
    /// generated stencil's on the transposed stencil.
    ///
    /// Over a file, gradients are accumulated in RAM, except a stage's row
    /// outputs over the RAM budget (the schedule's, or
    /// [`crate::with_ram_budget`]'s): those, such as a large source
    /// gradient, are file-backed tensors ([`Tensor::is_file_backed`]) whose
    /// pages leave the resident set as the rows are done. One exception: a
    /// max/min whose messages depend on the source alone takes its source
    /// gradient from a scatter over the forward pages and a per-source
    /// stage in memory (no stored transpose needed), unless that gradient is
    /// over the RAM budget and the file has its transpose: then from the
    /// transposed stage, into a file as above.
    ///
    /// Periodic generated stencils, and kernels whose backward reads
    /// degrees or edge ranks, need the CSR realization (a clear error says
    /// so).
    pub fn vjp(&self, r: &dyn Realization, inputs: &Inputs<'_>, cotangents: &[(&str, TensorView<'_>)]) -> Result<Gradients> {
        self.vjp_with(r, inputs, cotangents, &Schedule::default())
    }

    /// [`Kernel::vjp`] as `schedule` says (threads, pages, the back end of
    /// every stage, the reference interpreter included).
    pub fn vjp_with(
        &self,
        r: &dyn Realization,
        inputs: &Inputs<'_>,
        cotangents: &[(&str, TensorView<'_>)],
        schedule: &Schedule,
    ) -> Result<Gradients> {
        self.vjp_wrt(r, inputs, cotangents, &Wrt::All, schedule)
    }

    /// [`Kernel::vjp_with`] computing only the gradients `wrt` names (the
    /// others are absent from the result, and the stages that feed none
    /// of the named ones do not run). A name the kernel does not declare
    /// is an error.
    pub fn vjp_wrt(
        &self,
        r: &dyn Realization,
        inputs: &Inputs<'_>,
        cotangents: &[(&str, TensorView<'_>)],
        wrt: &Wrt,
        schedule: &Schedule,
    ) -> Result<Gradients> {
        self.check_wrt(wrt)?;
        if let Some(layer) = Layered::of(r, Purpose::Vjp, schedule)? {
            return Ok(Gradients { items: layer.vjp(self, inputs, cotangents, wrt, None, schedule)? });
        }
        self.run_vjp_on(r, inputs, cotangents, schedule, wrt)
    }

    /// Every field `wrt` names is one the kernel declares.
    pub(crate) fn check_wrt(&self, wrt: &Wrt) -> Result<()> {
        if let Wrt::Only(v) = wrt {
            for (role, name) in v {
                if self.captured().field_by_name(*role, name).is_none() {
                    return Err(Error::NoGradient { role: role.name(), name: name.clone() });
                }
            }
        }
        Ok(())
    }

    /// The same VJP, every stage run by the f64 reference interpreter.
    pub fn vjp_reference(
        &self,
        r: &dyn Realization,
        inputs: &Inputs<'_>,
        cotangents: &[(&str, TensorView<'_>)],
    ) -> Result<Gradients> {
        self.vjp_with(r, inputs, cotangents, &Schedule::new().backend(Backend::Reference))
    }

    /// The gradient of `sum(output)` with respect to every input, like
    /// `autograd.grad(out.sum(), inputs)` elsewhere.
    pub fn grad(&self, r: &dyn Realization, inputs: &Inputs<'_>, output: &str) -> Result<Gradients> {
        self.grad_with(r, inputs, output, &Schedule::default())
    }

    /// [`Kernel::grad`] as `schedule` says.
    pub fn grad_with(&self, r: &dyn Realization, inputs: &Inputs<'_>, output: &str, schedule: &Schedule) -> Result<Gradients> {
        // A realization whose own layer places the call (a shard) sums the
        // output over every part of it.
        if let Some(layer) = r.layer() {
            return Ok(Gradients { items: layer.vjp(self, inputs, Seed::SumOf(output), &Wrt::All, None, schedule)? });
        }
        let cots = self.sum_cotangents(r, inputs, output)?;
        let views: Vec<(&str, TensorView<'_>)> = cots.iter().map(|(n, t)| (n.as_str(), t.view())).collect();
        self.vjp_with(r, inputs, &views, schedule)
    }

    /// The cotangents of `sum(output)`: ones for `output`, zeros for the
    /// others.
    pub(crate) fn sum_cotangents(&self, r: &dyn Realization, inputs: &Inputs<'_>, output: &str) -> Result<Vec<(String, Tensor)>> {
        let (dtype, shapes) = self.bound_outputs(r, inputs)?;
        if !shapes.iter().any(|(n, _)| n == output) {
            let names: Vec<&str> = shapes.iter().map(|(n, _)| n.as_str()).collect();
            return Err(Error::NoOutput { name: output.to_string(), outputs: names.join(", ") });
        }
        let mut cots = Vec::new();
        for (name, shape) in &shapes {
            let t = if name == output {
                ones_like(dtype, shape)?
            } else {
                Tensor::zeros(dtype, shape.clone()).map_err(Error::from)?
            };
            cots.push((name.clone(), t));
        }
        Ok(cots)
    }

    /// The recomputing backward's plan run over `r` (the realization as
    /// given: renumbering is decided by the caller).
    pub(crate) fn run_vjp_on(
        &self,
        r: &dyn Realization,
        inputs: &Inputs<'_>,
        cotangents: &[(&str, TensorView<'_>)],
        schedule: &Schedule,
        wrt: &Wrt,
    ) -> Result<Gradients> {
        let plan = self.adjoint_plan()?;
        self.run_plan(r, inputs, cotangents, schedule, &plan.adjoint, &plan.stages, None, wrt)
    }

    /// Run an adjoint plan's stages (`stages`, compiled from `adjoint`'s),
    /// reading the forward's residuals through `residual` where the plan
    /// binds them (a saved-residual plan; `None` for the recomputing one),
    /// the stages that feed none of the gradients `wrt` names left out.
    #[allow(clippy::too_many_arguments)] // one call shape for both plans
    pub(crate) fn run_plan(
        &self,
        r: &dyn Realization,
        inputs: &Inputs<'_>,
        cotangents: &[(&str, TensorView<'_>)],
        schedule: &Schedule,
        adjoint: &Adjoint,
        stages: &[Kernel],
        residual: Option<&Tape>,
        wrt: &Wrt,
    ) -> Result<Gradients> {
        let reference = schedule.backend == Backend::Reference;
        let k = self.captured();
        let extents = Extents { num_src: r.num_src(), num_dst: r.num_dst(), num_edges: r.num_edges() };
        // Whether the forward rows come in pages (a file), and a generated
        // stencil's checks (no edge fields, a grid this machine can hold).
        let paged = match r.rows(Side::Forward, false)? {
            Rows::Generated(st) => {
                crate::bind::stencil_extents(k, &st)?;
                false
            }
            Rows::Pages(p) => p.out_of_core(),
            Rows::Memory(_) => false,
        };
        // Fields not given are the realization's own (a file's, mapped
        // lazily).
        let handles = crate::bind::stored_fields(k, r, inputs);
        let with_file = crate::bind::with_stored_fields(inputs, &handles)?;
        let inputs = &with_file;
        let b = crate::bind::bind_extents(k, extents, inputs)?;
        // Cotangents: one per output, shaped like it, in the call's dtype.
        let out_shapes = output_shapes(k, &extents, &b.widths);
        check_cotangents(k, &out_shapes, cotangents, b.dtype)?;
        let dtype = if reference { DType::F64 } else { b.dtype };
        let values = PlanValues::new(reference, &b.views, cotangents, residual, adjoint)?;
        let forward_view = |role: Role, name: &str| values.forward(k.field_by_name(role, name)?.0 as usize);
        let cot_view = |name: &str| values.cotangent(name);
        let residual_view = |name: &str| values.residual(name);
        // Of a max/min's two source sides, the one this call does not run.
        let skipped = adjoint.source_sides.map(|sides| match paged && r.has_side(Side::Transposed) {
            true if source_gradients_to_file(k, &b.views, dtype, schedule) => sides.scatter,
            _ => sides.transposed,
        });
        let needed = needed_stages(adjoint, wrt);
        let runs = |si: usize| Some(si) != skipped && needed[si];
        let needs_ranks = adjoint.stages.iter().enumerate().any(|(si, s)| runs(si) && s.bindings.contains(&Binding::EdgeRank));
        let needs_inv_deg = adjoint.stages.iter().enumerate().any(|(si, s)| runs(si) && s.bindings.contains(&Binding::InvDegree));
        let inv_deg = if needs_inv_deg {
            inv_degree_tensor(r, schedule, dtype)?
        } else {
            Tensor::zeros(dtype, vec![0]).map_err(Error::from)?
        };
        let ranks = if needs_ranks {
            ranks_tensor(r, schedule, extents.num_edges, dtype)?
        } else {
            Tensor::zeros(dtype, vec![0]).map_err(Error::from)?
        };
        let mut stage_outs: Vec<Outputs> = Vec::with_capacity(stages.len());
        for (si, stage) in adjoint.stages.iter().enumerate() {
            if !runs(si) {
                stage_outs.push(Outputs { items: Vec::new() });
                continue;
            }
            // A binding's values (a scatter's are computed below).
            macro_rules! simple_view {
                ($bnd:expr) => {
                    match $bnd {
                        Binding::Forward(role, name) => forward_view(*role, name),
                        Binding::Cotangent(name) => cot_view(name),
                        Binding::Stage { stage: s, output } => stage_outs.get(*s).and_then(|o| o.get(output)).map(|t| t.view()),
                        Binding::EdgeRank => Some(ranks.view()),
                        Binding::InvDegree => Some(inv_deg.view()),
                        Binding::WinnerScatter { .. } => None,
                        Binding::Residual(name) => residual_view(name),
                    }
                };
            }
            // Scattered sums first: the views below borrow them.
            let mut scattered: Vec<Tensor> = Vec::new();
            let mut sources_with_edges: Option<Vec<bool>> = None;
            for (fd, bnd) in stage.kernel.fields.iter().zip(&stage.bindings) {
                if let Binding::WinnerScatter { winner, value } = bnd {
                    let (Some(w), Some(v)) = (simple_view!(winner.as_ref()), simple_view!(value.as_ref())) else {
                        return Err(Error::Internal(format!(
                            "adjoint stage `{}` has no winners or cotangents to scatter for field `{}`",
                            stage.kernel.name, fd.name
                        )));
                    };
                    let (sums, has_edges) =
                        tiga_runtime::layer::winner_sums(r, schedule, extents.num_src, extents.num_dst, w, v)?
                            .ok_or_else(no_csr)?;
                    scattered.push(sums);
                    sources_with_edges.get_or_insert(has_edges);
                }
            }
            // Outputs that nothing from here on reads (this stage reads the
            // scattered sums, not what they were made of) go now: the next
            // buffer of their size reuses the mapping rather than faulting
            // in fresh memory (a stage output of a 64-wide graph is 256 MB).
            release_unread(&mut stage_outs, adjoint, si, &stage.bindings, &runs);
            let outs = {
                let mut ins = Inputs::new();
                let mut next_scattered = scattered.iter();
                for (fd, bnd) in stage.kernel.fields.iter().zip(&stage.bindings) {
                    let view = match bnd {
                        Binding::WinnerScatter { .. } => next_scattered.next().map(|t| t.view()),
                        other => simple_view!(other),
                    };
                    let view = view.ok_or_else(|| {
                        Error::Internal(format!("adjoint stage `{}` has no value for field `{}`", stage.kernel.name, fd.name))
                    })?;
                    ins = ins.with_role(fd.role, &fd.name, view);
                }
                let side = match stage.graph {
                    GraphUse::Forward => Some(Side::Forward),
                    GraphUse::Transposed => Some(Side::Transposed),
                    GraphUse::RowReversed => Some(Side::RowReversed),
                    GraphUse::SelfLoops | GraphUse::DestinationRows => None,
                };
                match side {
                    Some(side) => stages[si].run_side(r, side, &ins, schedule)?,
                    // Node-wise over the destinations, in memory whatever
                    // the realization: a row each, no edges.
                    None if stage.graph == GraphUse::DestinationRows => {
                        let g = Graph::self_loops(&vec![false; extents.num_dst]).map_err(Error::from)?;
                        // Its parameter sums add the rows in the caller's
                        // order (a file laid out in a node order gives this
                        // stage its inputs in the file's).
                        Outputs { items: tiga_runtime::layer::run_over_nodes(&stages[si], r, &g, &ins, schedule)? }
                    }
                    // Node-wise, in memory whatever the realization: one row
                    // per source, a self-loop for each source with
                    // out-edges.
                    None => {
                        let with_edges = sources_with_edges.take().unwrap_or_else(|| vec![true; extents.num_src]);
                        let g = Graph::self_loops(&with_edges).map_err(Error::from)?;
                        stages[si].run_with(&g, &ins, schedule)?
                    }
                }
            };
            stage_outs.push(outs);
        }
        let types = if reference { &[][..] } else { &b.types[..] };
        gradients(k, adjoint, wrt, &mut stage_outs, &b.views, types, dtype)
    }
}

/// Whether a paged backward's source gradients (of `views`' source
/// fields, in `dtype`) are over the schedule's RAM budget together, and so
/// go to a file as their rows are done (the transposed source side).
fn source_gradients_to_file(k: &ir::Kernel, views: &[TensorView<'_>], dtype: DType, schedule: &Schedule) -> bool {
    let bytes: u64 =
        k.fields.iter().zip(views).filter(|(f, _)| f.role == Role::Src).map(|(_, v)| (v.len() * dtype.size()) as u64).sum();
    tiga_storage::offload::output_spill_dir(bytes, schedule).is_some()
}

/// Refuse a cotangent named for no output of `k`.
pub(crate) fn check_cotangent_names<'n>(k: &ir::Kernel, names: impl Iterator<Item = &'n str>) -> Result<()> {
    for name in names {
        if !k.outputs.iter().any(|o| o.name == name) {
            let outputs = k.outputs.iter().map(|o| o.name.as_str()).collect::<Vec<_>>().join(", ");
            return Err(CotangentError::NoSuchOutput { name: name.into(), kernel: k.name.clone(), outputs }.into());
        }
    }
    Ok(())
}

/// Refuse cotangents that do not fit `k`'s outputs (of shapes
/// `out_shapes`, in `dtype`): one for each output, no other, each shaped
/// like it and in the call's dtype.
fn check_cotangents(
    k: &ir::Kernel,
    out_shapes: &[Vec<usize>],
    cotangents: &[(&str, TensorView<'_>)],
    dtype: DType,
) -> Result<()> {
    check_cotangent_names(k, cotangents.iter().map(|(n, _)| *n))?;
    for (o, shape) in k.outputs.iter().zip(out_shapes) {
        let name = o.name.clone();
        match cotangents.iter().find(|(n, _)| *n == o.name) {
            None => return Err(CotangentError::Missing { name, shape: Some(shape.clone()) }.into()),
            Some((_, v)) if v.shape() != shape.as_slice() => {
                return Err(CotangentError::Shape { name, got: v.shape().to_vec(), expected: shape.clone() }.into())
            }
            Some((_, v)) if v.dtype() != dtype => return Err(CotangentError::Dtype { name, got: v.dtype(), dtype }.into()),
            Some(_) => {}
        }
    }
    Ok(())
}

/// The gradients `wrt` asks for, each the sum of its parts among the
/// stages' outputs (the first taken as it is, no copy), zero where no
/// stage gives one, shaped like its field in `views`; a half-precision
/// field's (its type in `types`, empty in reference mode), accumulated in
/// f32, written in the field's type (rounded once, to nearest even).
fn gradients(
    k: &ir::Kernel,
    adjoint: &Adjoint,
    wrt: &Wrt,
    stage_outs: &mut [Outputs],
    views: &[TensorView<'_>],
    types: &[tiga_runtime::FieldType],
    dtype: DType,
) -> Result<Gradients> {
    let mut items = Vec::new();
    for gp in adjoint.gradients.iter().filter(|gp| wrt.wants(gp.role, &gp.name)) {
        let i = k.field_by_name(gp.role, &gp.name).map(|f| f.0 as usize).unwrap_or(0);
        let shape = views.get(i).map(|v| v.shape().to_vec()).unwrap_or_default();
        // The first part is taken as it is (no copy); the others add in.
        let mut acc: Option<Tensor> = None;
        for (s, name) in &gp.parts {
            let Some(slot) = stage_outs.get_mut(*s).and_then(|o| o.items.iter_mut().find(|(n, _)| n == name)) else {
                continue;
            };
            match &mut acc {
                None if slot.1.shape() == shape.as_slice() => {
                    let empty = Tensor::zeros(dtype, vec![0]).map_err(Error::from)?;
                    acc = Some(std::mem::replace(&mut slot.1, empty));
                }
                Some(a) if slot.1.len() == a.len() => add_tensors(a, &slot.1)?,
                _ => {}
            }
        }
        let acc = match acc {
            Some(a) => a,
            None => Tensor::zeros(dtype, shape).map_err(Error::from)?,
        };
        // A half-precision field's gradient, accumulated in f32, is
        // written in the field's type (rounded once, to nearest even).
        let acc = match types.get(i) {
            Some(&t) if t.is_half() => acc.converted(t),
            _ => acc,
        };
        items.push((gp.role, gp.name.clone(), acc));
    }
    Ok(Gradients { items })
}

/// What an adjoint's stages read besides each other's outputs: the
/// forward's fields (in field order), the cotangents and the saved
/// residuals, each in the dtype the stages run in. In reference mode
/// every one is widened to f64, once. Otherwise a half-precision cotangent
/// is widened to f32, once (every stage accumulates in f32, a winner
/// scatter adds cotangents up, and a cotangent is an output's size, not a
/// source field's), and the rest are read where they are.
struct PlanValues<'v> {
    forward: Vec<Input<'v>>,
    cotangents: Vec<(&'v str, Input<'v>)>,
    /// Widened residuals (reference mode), else none: read from `tape`.
    residuals: Vec<(String, Tensor)>,
    tape: Option<&'v Tape>,
}

impl<'v> PlanValues<'v> {
    fn new(
        reference: bool,
        views: &[TensorView<'v>],
        cotangents: &[(&'v str, TensorView<'v>)],
        tape: Option<&'v Tape>,
        adjoint: &Adjoint,
    ) -> Result<PlanValues<'v>> {
        let widened = |v: &TensorView<'v>| -> Result<Input<'v>> {
            Ok(match reference {
                true => Input::Owned(to_f64(v)?),
                false if v.field_type().is_half() => Input::Owned(v.converted(tiga_runtime::FieldType::F32)),
                false => Input::View(v.clone()),
            })
        };
        let forward =
            views.iter().map(|v| if reference { widened(v) } else { Ok(Input::View(v.clone())) }).collect::<Result<_>>()?;
        let cotangents = cotangents.iter().map(|(n, v)| Ok((*n, widened(v)?))).collect::<Result<_>>()?;
        let residuals = match tape {
            Some(tape) if reference => adjoint
                .stages
                .iter()
                .flat_map(|s| s.bindings.iter())
                .filter_map(|b| match b {
                    Binding::Residual(n) => Some(n.clone()),
                    _ => None,
                })
                .map(|n| {
                    let v = tape.view(&n).ok_or_else(|| Error::Internal(format!("the tape holds no residual `{n}`")))?;
                    Ok((n, to_f64(&v)?))
                })
                .collect::<Result<_>>()?,
            _ => vec![],
        };
        Ok(PlanValues { forward, cotangents, residuals, tape: tape.filter(|_| !reference) })
    }

    fn forward(&self, i: usize) -> Option<TensorView<'_>> {
        self.forward.get(i).map(|v| v.view())
    }

    fn cotangent(&self, name: &str) -> Option<TensorView<'_>> {
        self.cotangents.iter().find(|(n, _)| *n == name).map(|(_, v)| v.view())
    }

    fn residual(&self, name: &str) -> Option<TensorView<'_>> {
        match self.residuals.iter().find(|(n, _)| n == name) {
            Some((_, t)) => Some(t.view()),
            None => self.tape.and_then(|tape| tape.view(name)),
        }
    }
}
