//! Binding a call: the given fields checked against the kernel's
//! declaration and the rows' sizes (`compiler::bind`), the widths solved,
//! the compiled variant picked and the output buffers made. Every way of
//! running a kernel starts here; what runs the rows is `rows.rs`.

use tiga_compiler::back::cranelift::VariantKey;
use tiga_compiler::bind::{bind_fields, output_shapes, Extents, Given};
use tiga_compiler::ir::{self, Role};
use tiga_compiler::loops::{LoopKernel, Storage};
use tiga_runtime::abi::{EntryFn, Stencil2d};
use tiga_runtime::StoredField;
use tiga_runtime::{Backend, DType, FieldType, Graph, Realization, Tensor, TensorView};

use crate::error::{Error, Result, Unsupported};
use crate::fields::{Inputs, Outputs};
use crate::kernel::Kernel;

/// Fields in declaration order, checked against the kernel and the graph.
pub(crate) struct Bound<'b> {
    pub views: Vec<TensorView<'b>>,
    /// The dtype the call computes in.
    pub dtype: DType,
    /// How each field is stored (its dtype, or a half type in an f32
    /// call), in declaration order.
    pub types: Vec<FieldType>,
    pub widths: Vec<usize>,
    pub extents: Extents,
}

impl Bound<'_> {
    /// The fields' base pointers, in declaration order (`RawArgs::fields`).
    pub(crate) fn field_ptrs(&self) -> Vec<*const u8> {
        self.views.iter().map(|v| v.data().as_ptr()).collect()
    }

    /// How `k`'s outputs are stored in this call: at half width where the
    /// kernel declares a half type and the call computes in f32, else in
    /// the call's dtype.
    pub(crate) fn output_types(&self, k: &LoopKernel) -> Vec<FieldType> {
        k.outputs.iter().map(|o| o.stored_as(self.dtype)).collect()
    }

    /// The variant's storage key: fields as given, outputs as declared.
    pub(crate) fn storage(&self, k: &LoopKernel) -> Storage {
        Storage::of(&self.types, &self.output_types(k))
    }

    /// An error for a way of running that has no half-width fields or
    /// outputs yet (`what`: paged, sharded, GPU), when this call has some:
    /// their loads and stores are compiled by the CPU back ends for calls
    /// over rows in memory (a CSR or a generated stencil).
    pub(crate) fn full_width_only(&self, k: &LoopKernel, what: &'static str) -> Result<()> {
        let s = self.storage(k);
        if s.has_half() {
            return Err(Unsupported::HalfStorage { kernel: k.name.clone(), storage: s.describe(k), what }.into());
        }
        Ok(())
    }
}

/// [`output_buffers`] with each output in its own element type (`types`,
/// [`Bound::output_types`]: half width where declared).
pub(crate) fn output_buffers_of(k: &LoopKernel, types: &[FieldType], shapes: &[Vec<usize>]) -> Result<Vec<Tensor>> {
    (0..shapes.len())
        .map(|o| {
            let shape = shapes[o].clone();
            let ty = types.get(o).copied().unwrap_or(FieldType::F32);
            let t = if k.overwrites_output(o as u32) { Tensor::for_overwrite_of(ty, shape) } else { Tensor::zeros_of(ty, shape) };
            t.map_err(Error::from)
        })
        .collect()
}

/// Output arrays for a call of `k` that runs every row: zeros, except for
/// outputs the kernel overwrites in every row
/// ([`LoopKernel::overwrites_output`]), which may hold a reused buffer's
/// old values ([`Tensor::for_overwrite`]; no zero pass). Other outputs
/// must start at zero: parameter outputs accumulate, and compiled kernels
/// may skip writing zeros.
pub(crate) fn output_buffers(k: &LoopKernel, dtype: DType, shapes: &[Vec<usize>]) -> Result<Vec<Tensor>> {
    output_buffers_of(k, &vec![FieldType::from(dtype); shapes.len()], shapes)
}

pub(crate) fn bind<'b>(k: &ir::Kernel, graph: &Graph, inputs: &'b Inputs<'_>) -> Result<Bound<'b>> {
    let extents = Extents { num_src: graph.num_src(), num_dst: graph.num_dst(), num_edges: graph.num_edges() };
    bind_extents(k, extents, inputs)
}

/// Bind `inputs` to kernel `k` (every check is `compiler::bind`'s).
pub(crate) fn bind_extents<'b>(k: &ir::Kernel, extents: Extents, inputs: &'b Inputs<'_>) -> Result<Bound<'b>> {
    let views: Vec<TensorView<'b>> = inputs.fields.iter().map(|(_, _, v)| v.view()).collect();
    let given: Vec<Given<'_>> = inputs
        .fields
        .iter()
        .zip(&views)
        .map(|((role, name, _), v)| Given { role: *role, name, ty: v.field_type(), shape: v.shape() })
        .collect();
    let b = bind_fields(k, &extents, &given)?;
    let views = b.order.iter().map(|&j| views[j].clone()).collect();
    Ok(Bound { views, dtype: b.dtype, types: b.types, widths: b.widths, extents })
}

/// A kernel whose output row is the plain sum of its messages (reducer
/// `sum`, no `node` or an identity one, destination outputs only): a row's
/// edges can be cut into segments whose partial outputs add up
/// ([`ParamPartials::with_split`]).
pub(crate) fn splittable(k: &ir::Kernel) -> bool {
    let identity_node = match &k.node {
        None => true,
        Some(n) => n.outputs.iter().enumerate().all(|(i, v)| matches!(n.node(*v).op, ir::Op::Input(j) if j as usize == i)),
    };
    // A segment starts its own row: an edge's rank or a scan would restart.
    let row_relative = k.edge.nodes.iter().any(|n| matches!(n.op, ir::Op::Rank | ir::Op::Scan(_)));
    k.reducer.kind == ir::ReducerKind::Sum
        && !row_relative
        && identity_node
        && k.outputs.iter().all(|o| o.role == Role::Dst)
        && k.outputs.len() == k.message_types().len()
}

/// What every call shares once its fields are bound: the compiled entry
/// (the macro's ahead-of-time variant, or the JIT's, as the schedule
/// prefers), the output shapes and buffers, and the row executor's
/// partials. The JIT variant is held so that its code outlives the call.
pub(crate) struct Prepared {
    pub entry: EntryFn,
    _jit: Option<std::sync::Arc<tiga_compiler::back::cranelift::Variant>>,
    pub shapes: Vec<Vec<usize>>,
    pub param_outs: Vec<usize>,
}

impl Kernel {
    /// Pick the variant for a bound call: `edge_ids` whether edge fields go
    /// through the realization's edge ids, `stencil` the generated
    /// realization (see [`Kernel::aot_entry`] for which back end runs it).
    pub(crate) fn prepare(
        &self,
        b: &Bound<'_>,
        edge_ids: bool,
        stencil: Option<&Stencil2d>,
        backend: Backend,
    ) -> Result<Prepared> {
        let storage = b.storage(self.loop_kernel());
        // The macro's ahead-of-time variants store every field and output
        // in the call's dtype, or (f32) as the kernel declares them; a call
        // with another mix of half-width ones takes the JIT's.
        let aot = self.aot_entry_stored(b.dtype, &b.widths, &storage, stencil.is_some(), backend);
        let (entry, jit) = match (aot, backend) {
            (Some(entry), _) => (entry, None),
            (None, Backend::Aot) => {
                return Err(Unsupported::NoAotVariant {
                    kernel: self.name().to_string(),
                    dtype: b.dtype,
                    widths: b.widths.clone(),
                    on_stencil: stencil.is_some(),
                    half_storage: storage.has_half().then(|| storage.describe(self.loop_kernel())),
                }
                .into())
            }
            (None, _) => {
                let key =
                    VariantKey { stencil: stencil.cloned(), storage, ..self.variant_key(b.dtype, b.widths.clone(), edge_ids) };
                let v = crate::kernel::jit().variant(self.loop_kernel(), &key)?.0;
                (v.entry(), Some(v))
            }
        };
        let shapes = output_shapes(self.captured(), &b.extents, &b.widths);
        let param_outs = self.captured().outputs_of(Role::Param).iter().map(|(i, _)| *i).collect();
        Ok(Prepared { entry, _jit: jit, shapes, param_outs })
    }

    /// The outputs, named in declaration order.
    pub(crate) fn outputs(&self, outs: Vec<Tensor>) -> Outputs {
        let names = self.captured().outputs.iter().map(|o| o.name.clone());
        Outputs { items: names.zip(outs).collect() }
    }
}

impl Kernel {
    /// Whether a call reads the graph's edge ids: only a kernel with edge
    /// fields or edge outputs looks at them (they are 8 bytes per edge,
    /// twice the column indices, so a page of the others is smaller).
    pub fn reads_edge_ids(&self) -> bool {
        let k = self.captured();
        k.fields.iter().any(|f| f.role == Role::Edge) || k.outputs.iter().any(|o| o.role == Role::Edge)
    }
}

/// The extents of kernel `k`'s call on a generated stencil (checked: a
/// non-empty grid, no edge fields, no edge outputs). Checked here, before
/// a back end is picked, so that every back end refuses such a kernel with
/// the same message (an adjoint stage writing per-edge values reached the
/// JIT's translator, which refused it as an internal error).
pub(crate) fn stencil_extents(k: &ir::Kernel, st: &Stencil2d) -> Result<Extents> {
    if k.fields.iter().any(|f| f.role == Role::Edge) {
        return Err(Unsupported::StencilEdgeFields { kernel: k.name.clone() }.into());
    }
    if k.outputs.iter().any(|o| o.role == Role::Edge) {
        return Err(Unsupported::StencilEdgeOutputs { kernel: k.name.clone() }.into());
    }
    if st.rows == 0 || st.cols == 0 {
        return Err(Unsupported::EmptyStencil.into());
    }
    let n = usize::try_from(st.rows)
        .ok()
        .zip(usize::try_from(st.cols).ok())
        .and_then(|(r, c)| r.checked_mul(c))
        .ok_or(Unsupported::StencilTooLarge { rows: st.rows, cols: st.cols })?;
    Ok(Extents { num_src: n, num_dst: n, num_edges: tiga_runtime::realization::stencil_edges(st) })
}

/// The realization's own fields for the kernel's fields not in `inputs`
/// (a file's are mapped lazily, when viewed).
pub(crate) fn stored_fields(
    k: &ir::Kernel,
    r: &dyn Realization,
    inputs: &Inputs<'_>,
) -> Vec<(Role, String, Box<dyn StoredField>)> {
    tiga_runtime::layer::stored_fields(k.fields.iter().map(|f| (f.role, f.name.as_str())), r, inputs)
}

/// `inputs` plus the views of these stored fields.
pub(crate) fn with_stored_fields<'a>(
    inputs: &Inputs<'a>,
    handles: &'a [(Role, String, Box<dyn StoredField>)],
) -> Result<Inputs<'a>> {
    Ok(tiga_runtime::layer::with_stored_fields(inputs, handles)?)
}
