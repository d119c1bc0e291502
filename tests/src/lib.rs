//! The cross-realization conformance suite: every kernel of
//! `examples/kernels/gnn.rs` (compiled by `#[message_passing]`) over every
//! realization of a graph, against the f64 reference interpreter.
//!
//! The realizations are the entries of [`Realizer::all`] (in memory,
//! generated stencil, paged `.gfg`, halo-sharded over in-process ranks);
//! each gives its results in the user's numbering ([`Realizer::results`]),
//! so [`check_call`] compares them all the same way:
//!
//! - forward outputs within 1e-5 (f32) / 1e-12 (f64) of the reference,
//!   relative to `max(|reference|, 1)`, and bit-identical to the in-memory
//!   run under the same back end ([`BACKENDS`]: the JIT, whose in-memory
//!   run is the baseline, and the default, which takes the macro's
//!   ahead-of-time variants): the product's promise that a realization
//!   never changes the numbers. Where the two back ends' in-memory runs
//!   differ, the call is recorded ([`Tally::backends_differ`]) and the
//!   tests hold it to [`known_backend_differences`];
//! - backward (a VJP with random cotangents) within 1e-5 / 1e-10 of the
//!   reference VJP;
//! - where a realization cannot run a call (a generated stencil has no edge
//!   fields, no winning edges or per-edge stage outputs for a max's or a
//!   monoid's backward, and no transpose in CSR order when it wraps), the
//!   error it must give ([`Realizer::refusals`]), asserted rather than
//!   skipped.
//!
//! The test files (`tests/tests/`) pick the graphs; a new realization (a
//! GPU) is one more variant of [`Realizer`] and one more entry in its list.

pub mod case;
pub mod check;
pub mod realizer;

pub use case::{Call, Case, Rng};
pub use check::{
    assert_bits, assert_close, calls_of, check_call, check_cases, known_backend_differences, Count, Tally, BACKENDS, WIDTHS,
};
pub use realizer::{Cut, Realizer, Refusals, Results};

use tiga::Kernel;

/// The kernels of examples/kernels/gnn.rs, through the macro path.
#[allow(clippy::all)]
pub mod gnn {
    use tiga::message_passing;
    include!("../../examples/kernels/gnn.rs");
}

/// Every kernel of gnn.rs, in file order.
pub fn kernels() -> Vec<&'static Kernel> {
    vec![
        gnn::NeighborSum::kernel(),
        gnn::Smoothing::kernel(),
        gnn::VecSum::kernel(),
        gnn::GcnNorm::kernel(),
        gnn::SageMean::kernel(),
        gnn::MaxPool::kernel(),
        gnn::GinSum::kernel(),
        gnn::GatAttention::kernel(),
        gnn::Top2Sum::kernel(),
        gnn::EdgeGate::kernel(),
    ]
}
