//! tiga's distributed runtime: what runs one kernel over more than one
//! process or host.
//!
//! - [`comm`]: communicators (threads of one process as ranks, MPI through
//!   the `mpi` crate over Open MPI with feature `mpi`), with deadlines;
//! - [`partition`]: node partitions (contiguous ranges, METIS k-way with
//!   feature `metis`);
//! - [`shard`]: halo shards, a rank's rows and ghosts of a partitioned
//!   graph with the plan that exchanges them ([`shard::Sharded`] is a
//!   [`tiga_runtime::Realization`]);
//! - [`partitioned`]: tensors whose rows are split over the ranks of a
//!   communicator (WholeGraph's WholeMemory on the CPU), and [`embedding`]
//!   tables trained with sparse optimizers over them;
//! - [`sampling`]: neighbour sampling and mini-batch blocks, local or over
//!   a sharded graph.
//!
//! It depends on the core (`tiga_runtime`) and on storage (`tiga_storage`),
//! whose `.gfg` and `.npy` files a rank's shard and a partitioned tensor
//! are read from and written to; neither depends on it.

pub mod comm;
pub mod embedding;
pub mod partition;
pub mod partitioned;
pub mod sampling;
pub mod shard;
