//! The canonical kernels (examples/kernels/gnn.rs, under the macro), and
//! the list of them, for the suites that run every one.
#![allow(clippy::all)]

use tiga::message_passing;
include!("../../../examples/kernels/gnn.rs");

/// Every kernel of gnn.rs.
pub fn all() -> Vec<&'static tiga::Kernel> {
    vec![
        NeighborSum::kernel(),
        Smoothing::kernel(),
        VecSum::kernel(),
        GcnNorm::kernel(),
        SageMean::kernel(),
        MaxPool::kernel(),
        GinSum::kernel(),
        GatAttention::kernel(),
        Top2Sum::kernel(),
        EdgeGate::kernel(),
    ]
}
