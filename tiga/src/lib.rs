//! tiga: message-passing graph kernels, compiled.
//!
//! Write a kernel once with [`message_passing`] (or in a kernel file for
//! `tigac`); tiga captures it into an IR at build time, lowers it through
//! named passes, JIT-compiles one variant per (kernel, dtype, widths, ISA)
//! with Cranelift and runs it over a [`Graph`] in parallel.
//!
//! ```ignore
//! use tiga::{message_passing, Graph, Inputs};
//!
//! #[message_passing(reduce = sum)]
//! pub mod Smoothing {
//!     use tiga::lang::*;
//!     pub struct Src { pub x: f32 }
//!     pub fn edge(src: &Src) -> f32 { src.x }
//!     pub fn node(agg: f32) -> f32 { 0.25 * agg }
//! }
//!
//! let g = Graph::stencil_2d_4(1000, 1000)?;
//! let x = vec![1.0f32; g.num_src()];
//! let out = Smoothing::kernel().run(&g, &Inputs::new().src("x", &x))?;
//! ```
//!
//! This crate is the seam between the compiler (which knows nothing of
//! graphs in memory) and the runtime (which knows nothing of Cranelift): it
//! binds a call's fields to a kernel's declared fields, picks the variant,
//! and hands the JIT-compiled code the runtime's arrays; on a GPU (the
//! schedule's [`Device`]), it lowers the kernel to PTX and hands the
//! runtime's device layer the module and the arrays (`rows.rs`).

pub mod artifact;
mod bind;
mod call;
#[cfg(feature = "candle")]
pub mod candle;
mod error;
mod explain;
mod fields;
mod kernel;
mod residuals;
mod rows;
mod vjp;

pub use tiga_macros::message_passing;
pub use tiga_runtime::{
    add_self_loops, from_edge_index, from_edge_index_sized, gcn_norm, in_degree, out_degree, petgraph, Batch, BatchError,
    GcnNormError, GcnNormOptions,
};
pub use tiga_runtime::{
    balanced_row_chunks, for_each_row_chunk, Buffer, DType, Data, FieldType, Graph, GraphError, Tensor, TensorView,
};
pub use tiga_storage::{read_edge_list, read_edge_list_with, read_matrix_market, read_npy, write_npy, EdgeListOptions, NpyError};
/// The half-precision element types of tensors (the `half` crate's): a
/// field given as `Tensor::from_bf16(..)` is stored at half width.
pub mod half {
    pub use tiga_runtime::{bf16, f16};
}

pub use fields::{Gradients, Input, Inputs, Outputs, Wrt};
pub use tiga_runtime::abi::{EntryFn, RawArgs, RawStencil, Stencil2d};

pub use error::{CotangentError, Error, FrontDiagnostic, Result, Unsupported};
pub use kernel::{jit, AdjointPlan, AotVariant, Kernel, ResidualStages, Residuals, STENCIL_AUTO_AOT};
pub use offload::{with_ram_budget, with_schedule, AnyGraph};
pub use residuals::{ScopedTape, Tape};
pub use tiga_compiler as compiler;
pub use tiga_compiler::ir::Role;
pub use tiga_device as device;
pub use tiga_dist as dist;
/// The kernel language as plain Rust (`tiga-lang`): what the user's
/// functions are written against.
pub mod lang {
    pub use tiga_lang::*;
}
pub use tiga_storage as storage;
/// Graphs over a RAM budget built on disk ([`with_ram_budget`]).
pub use tiga_storage::offload;
/// Tensors in the memory hierarchy (host and disk tiers under budgets).
pub use tiga_storage::scope as memory;

/// The runtime crates under one path, as a user of the facade reaches
/// them: the core's items (`tiga_runtime`), storage's (`tiga_storage`,
/// also as `runtime::storage`), and the distributed and device crates by
/// the module names they hold (`runtime::comm`, `runtime::gpu`, ...).
pub mod runtime {
    pub use tiga_device as gpu;
    pub use tiga_dist::{comm, embedding, partition, partitioned, sampling, shard};
    pub use tiga_runtime::*;
    pub use tiga_storage as storage;
    pub use tiga_storage::*;
}
pub use tiga_dist::comm::{CommError, Communicator, InProcess};
pub use tiga_dist::partition::{owned_range, Partition};
pub use tiga_dist::shard::{PartitionChoice, ShardOptions, Sharded};
pub use tiga_runtime::exec::Side;
pub use tiga_runtime::realization::{self, GraphRows, PagedRows, Realization, Rows};
pub use tiga_runtime::{
    Backend, Device, DeviceTimer, DeviceTimes, Order, Progress, Renumber, Renumbered, RenumberedGraph, Schedule,
};
