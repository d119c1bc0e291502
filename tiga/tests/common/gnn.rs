//! The canonical kernels (examples/kernels/gnn.rs, under the macro), and
//! the list of them, for the suites that run every one. They are compiled
//! once, in the conformance crate (`tests/`), and shared by every test
//! binary here: each `#[message_passing]` kernel carries its ahead-of-time
//! variants, and compiling gnn.rs into each binary again cost about 20 s of
//! rustc per binary.

// A binary that only lists them (`all`) names no kernel module.
#[allow(unused_imports)]
pub use tiga_conformance::gnn::*;

/// Every kernel of gnn.rs.
pub fn all() -> Vec<&'static tiga::Kernel> {
    tiga_conformance::kernels()
}
