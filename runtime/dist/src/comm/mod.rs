//! Communicators: how cooperating processes (ranks) exchange bytes.
//!
//! A sharded run needs four collective operations, and nothing else: a
//! variable-count all-to-all of bytes that can be left in flight while
//! rows that need no remote data compute (the halo exchange), an all-gather
//! (setup checks, and the fixed-order all-reduce built on it), a barrier,
//! and a split into node-local groups. Partitioned tensors
//! (`crate::partitioned`) add two: a split by colour (the cross-node group
//! of [`NodeGroups`]) and memory shared by the ranks of one node
//! ([`SharedMemory`]). [`Communicator`] is that contract; two engines
//! implement it:
//!
//! - [`InProcess`]: ranks as threads of one process, over channels. It is
//!   what the default test suite and the single-binary examples use, and it
//!   needs no system library.
//! - `Mpi` (cargo feature `mpi`, module `comm/mpi.rs`): processes and
//!   hosts launched by `mpirun`, through the `mpi` tiga_runtime over the system's
//!   MPI library. [`launched_by_mpirun`] tells, without the feature and
//!   without initializing MPI, whether a launcher started this process.
//!   MPI has no timeouts: a rank that dies ends the whole job through the
//!   launcher instead of returning [`CommError::PeerFailed`].
//!
//! Collectives are called by every rank of a communicator in the same
//! order, as in MPI. Every failure is an error value ([`CommError`]): a
//! peer that went away, a message of the wrong size, a wait that timed
//! out. None of them panics or hangs.
//!
//! Nodes can be simulated on one host, so that the cross-node paths run in
//! tests: `InProcess::world_on_hosts` gives each rank a host number, and
//! `Mpi::init` reads `TIGA_RANKS_PER_NODE` (consecutive world ranks in
//! groups of that many, within each real host) — see [`NodeGroups`].
//!
//! All-reduce sums in rank order on every rank (gather every contribution,
//! then add them 0, 1, 2, ...), so every rank holds the same bits whatever
//! the timing: parameter gradients of a sharded backward must not depend on
//! which message arrived first.

mod communicator;
mod groups;
mod in_process;
#[cfg(feature = "mpi")]
mod mpi;

#[cfg(feature = "mpi")]
pub use self::mpi::{Mpi, DEFAULT_MAX_MESSAGE_BYTES, RANKS_PER_NODE_VAR};
pub use communicator::{
    all_reduce, check_same, launched_by_mpirun, read_u64s, write_u64s, CommError, Communicator, Pending, PendingExchange,
    SharedBacking, SharedMemory, Summable,
};
pub use groups::NodeGroups;
pub use in_process::InProcess;
