//! tiga's runtime: what a compiled kernel runs *on*.
//!
//! This is the core every path needs: graphs (CSR by destination, with
//! the user's edge order kept beside it; transposes for backward passes;
//! stencils; renumberings), dense fields (`Tensor`, `TensorView`), the
//! [`Realization`] trait that says where a call's rows come from, the
//! [`Schedule`] that says how they run, and the parallel row executor that
//! splits destination rows across rayon workers by edge count and streams
//! pages of rows.
//!
//! What realizes a graph elsewhere lives in the crates beside it, which
//! depend on this one and never the reverse: `tiga_storage` (the `.gfg`
//! format, `.npy`, edge lists, Matrix Market), `tiga_dist` (communicators,
//! MPI, partitioners, halo shards, partitioned tensors, embeddings,
//! sampling) and `tiga_device` (CUDA and the PTX simulator).
//!
//! It knows nothing of Cranelift, PTX lowering or the kernel IR: back ends produce
//! code, and the facade (`tiga`) hands that code the arrays defined here. This
//! keeps the runtime testable on its own and lets every back end share one
//! notion of a graph and a field.
//!
//! Invariants are checked once, at construction: a `Graph` or `Tensor` that
//! exists is valid, so kernels index them without further checks. Every user
//! mistake (a bad file, a wrong length, an id out of range) is an error value
//! whose message names the problem, never a panic.

pub use tiga_abi as abi;
pub use tiga_abi::Role;
pub mod element;
pub mod exec;
pub mod fields;
pub mod graph;
pub mod graph_ops;
pub mod layer;
pub mod realization;
pub mod renumber;
pub mod schedule;
pub mod tensor;

pub use element::{Element, ElementType};
pub use exec::{balanced_row_chunks, for_each_row_chunk};
pub use graph::{Graph, GraphError, StencilPlan, MAX_NODES};
pub use graph_ops::{
    add_self_loops, add_self_loops_first, from_edge_index, from_edge_index_sized, gcn_norm, in_degree, out_degree, Batch,
    BatchError, ExistingLoops, GcnNormError, GcnNormOptions,
};
pub use petgraph;
pub use realization::{
    BoxError, Call, FieldRole, GraphRows, Layer, PagedRows, Realization, RenumberedGraph, RowRuns, Rows, Sizes, StoredField,
};
pub use renumber::{Order, RenumberError, Renumbered, Way};
pub use schedule::{Backend, Device, DeviceTimer, DeviceTimes, Progress, Renumber, Schedule, ScheduleError};
pub use tensor::{bf16, f16, round_to_odd_f32, Buffer, DType, Data, DataMut, FieldType, Tensor, TensorError, TensorView};
