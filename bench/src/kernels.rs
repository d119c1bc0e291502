//! The canonical kernels (`examples/kernels/gnn.rs`) the benchmarks run:
//! as a kernel file for the JIT, and through `#[message_passing]` with the
//! macro's ahead-of-time variants.

use tiga::Kernel;

/// The canonical kernels, as a kernel file (no ahead-of-time variants, so
/// every variant is the JIT's).
pub(crate) const GNN: &str = include_str!("../../examples/kernels/gnn.rs");

/// The same kernels through `#[message_passing]`: the macro compiled their
/// loops ahead of time with rustc/LLVM for common widths.
#[allow(clippy::all)]
pub(crate) mod gnn {
    use tiga::message_passing;
    include!("../../examples/kernels/gnn.rs");
}

/// The macro-path kernel of this name (ahead-of-time variants).
pub(crate) fn macro_kernel(name: &str) -> Option<&'static Kernel> {
    Some(match name {
        "Smoothing" => gnn::Smoothing::kernel(),
        "VecSum" => gnn::VecSum::kernel(),
        "SageMean" => gnn::SageMean::kernel(),
        "MaxPool" => gnn::MaxPool::kernel(),
        "GatAttention" => gnn::GatAttention::kernel(),
        _ => return None,
    })
}

/// The kernel file's kernel of this name, for the JIT.
pub(crate) fn kernel(name: &str) -> Result<Kernel, String> {
    Kernel::from_source(GNN, name).map_err(|e| format!("examples/kernels/gnn.rs, kernel {name}: {e}"))
}
