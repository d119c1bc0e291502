//! tiga's runtime: what a compiled kernel runs *on*.
//!
//! It holds graphs (CSR by destination, with the user's edge order kept
//! beside it; transposes for backward passes; stencils; graphs read from edge
//! lists and Matrix Market files), dense fields (`Tensor`, `TensorView`) and
//! their `.npy` files, and the parallel row executor that splits destination
//! rows across rayon workers by edge count. `storage` holds graphs and
//! fields on disk in the versioned `.gfg` format (`docs/gfg.md`), memory-mapped
//! and read in pages. `partitioned` holds tensors whose rows are split over
//! the ranks of a communicator (WholeGraph's WholeMemory on the CPU), and
//! `embedding` trains two-dimensional ones with sparse optimizers
//! (`docs/partitioned.md`).
//!
//! `gpu` holds the device layer: buffers, modules, launches and events on a
//! CUDA GPU (feature `cuda`) or on the PTX simulator.
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
pub mod comm;
pub mod element;
pub mod embedding;
pub mod exec;
pub mod gpu;
pub mod graph;
pub mod graph_ops;
pub mod io;
pub mod npy;
pub mod partition;
pub mod partitioned;
pub mod realization;
pub mod renumber;
pub mod sampling;
pub mod schedule;
pub mod shard;
pub mod storage;
pub mod tensor;

pub use element::{Element, ElementType};
pub use exec::{balanced_row_chunks, for_each_row_chunk};
pub use graph::{Graph, GraphError, StencilPlan, MAX_NODES};
pub use graph_ops::{
    add_self_loops, add_self_loops_first, from_edge_index, from_edge_index_sized, gcn_norm, in_degree, out_degree, Batch,
    BatchError, ExistingLoops, GcnNormError, GcnNormOptions,
};
pub use io::{parse_edge_list, parse_matrix_market, read_edge_list, read_edge_list_with, read_matrix_market, EdgeListOptions};
pub use npy::{
    encode_npy, encode_npy_ids, npy_layout, parse_npy, parse_npy_ids, read_npy, read_npy_array, read_npy_ids, write_npy,
    write_npy_array, write_npy_ids, NpyArray, NpyError, NpyFile, NpyLayout, NpyWriter,
};
pub use petgraph;
pub use realization::{GraphRows, PagedRows, Realization, Rows};
pub use renumber::{Order, RenumberError, Renumbered, RenumberedGraph};
pub use schedule::{Backend, Device, DeviceTimer, DeviceTimes, Progress, Renumber, Schedule, ScheduleError};
pub use storage::tensor_store::{tensor_crc32, MappedTensor, SpilledTensor, TensorStore, TensorStoreError};
pub use storage::{save_gfg, FieldHandle, FieldInfo, FieldRole, GfgError, GfgFile, GfgWriter, Page, PendingGfg};
pub use tensor::{bf16, f16, round_to_odd_f32, Buffer, DType, Data, DataMut, FieldType, Tensor, TensorError, TensorView};
