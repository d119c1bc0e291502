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

mod groups;
mod in_process;
#[cfg(feature = "mpi")]
mod mpi;
mod shared;

use std::fmt;
use std::sync::Arc;

#[cfg(feature = "mpi")]
pub use self::mpi::{Mpi, DEFAULT_MAX_MESSAGE_BYTES, RANKS_PER_NODE_VAR};
pub use groups::NodeGroups;
pub use in_process::InProcess;
pub use shared::{SharedBacking, SharedMemory};

/// Whether this process was started by an MPI launcher (`mpirun`,
/// `mpiexec`, `srun`), judged from the environment the launcher sets and
/// without initializing MPI, so that a program can decide whether to
/// initialize it (and say so when it was built without the `mpi` feature).
/// Looks at Open MPI's `OMPI_COMM_WORLD_SIZE`, MPICH's and Slurm's
/// `PMI_SIZE`, and PMIx's `PMIX_RANK`.
pub fn launched_by_mpirun() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"].iter().any(|v| std::env::var_os(v).is_some())
}

/// What can go wrong in a collective.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CommError {
    /// A peer stopped taking part: its process died, its thread ended, or
    /// it dropped its communicator mid-collective.
    #[error("rank {peer} failed during {during}: {reason}")]
    PeerFailed { peer: usize, during: String, reason: String },
    /// A peer's message is not the size the receiver's plan expects (the
    /// ranks disagree on the plan: different graphs, kernels or inputs).
    #[error("rank {peer} sent {got} bytes during {during}, but {expected} were expected")]
    WrongSize { peer: usize, during: String, expected: usize, got: usize },
    /// No message came within the communicator's timeout.
    #[error("no message from rank {peer} within {seconds} s during {during} (a rank stuck or gone)")]
    Timeout { peer: usize, during: String, seconds: f64 },
    /// A call that makes no sense for this communicator (a rank out of
    /// range, a send list of the wrong length).
    #[error("{0}")]
    Usage(String),
    /// The ranks hold different things that must be the same everywhere
    /// (the graph, the kernel): the message names what and where.
    #[error("{0}")]
    Mismatch(String),
    /// The MPI library refused an operation.
    #[error("MPI: {0}")]
    Mpi(String),
}

/// A collective all-to-all started and not yet finished. The sends left
/// when it was started; [`PendingExchange::wait`] collects what each peer
/// sent. Dropping it without waiting still completes it (its buffers must
/// outlive the engine's use of them) and discards what arrived.
pub struct PendingExchange {
    inner: Box<dyn Pending>,
}

impl fmt::Debug for PendingExchange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PendingExchange")
    }
}

/// The engine's side of a [`PendingExchange`].
pub trait Pending: Send {
    /// Block until every peer's message is here; `result[p]` is what rank
    /// `p` sent to this rank (empty where it sent nothing).
    fn wait(self: Box<Self>) -> Result<Vec<Vec<u8>>, CommError>;
}

impl PendingExchange {
    pub fn new(inner: Box<dyn Pending>) -> PendingExchange {
        PendingExchange { inner }
    }
    /// Wait for every peer's message (see [`Pending::wait`]).
    pub fn wait(self) -> Result<Vec<Vec<u8>>, CommError> {
        self.inner.wait()
    }
}

/// The collectives a sharded run needs (see the module doc). Object safe:
/// a sharded realization holds an `Arc<dyn Communicator>`.
pub trait Communicator: Send + Sync + fmt::Debug {
    /// This process's rank, in `0..size()`.
    fn rank(&self) -> usize;
    /// How many ranks take part.
    fn size(&self) -> usize;

    /// Start a variable-count all-to-all: `sends[p]` goes to rank `p`
    /// (`sends.len() == size()`; the entry for this rank comes back as it
    /// is), and `recv_lens[p]` bytes are expected from rank `p`. A peer's
    /// message of another length is [`CommError::WrongSize`].
    fn start_all_to_all_v(&self, sends: Vec<Vec<u8>>, recv_lens: Vec<usize>) -> Result<PendingExchange, CommError>;

    /// Every rank's `data`, by rank (sizes may differ between ranks).
    fn all_gather_bytes(&self, data: &[u8]) -> Result<Vec<Vec<u8>>, CommError>;

    /// Wait until every rank has called it.
    fn barrier(&self) -> Result<(), CommError>;

    /// The ranks that share this one's host (node), as a communicator of
    /// their own, ranked in this communicator's order.
    fn split_local(&self) -> Result<Arc<dyn Communicator>, CommError>;

    /// The ranks that passed the same `color`, as a communicator of their
    /// own, ranked by (`key`, rank in this communicator). Collective: every
    /// rank calls it (with its own colour and key).
    fn split(&self, color: usize, key: usize) -> Result<Arc<dyn Communicator>, CommError>;

    /// Memory shared by the ranks of this communicator, which must all run
    /// on one host: each rank asks for `bytes` (zeroed), and every rank can
    /// address every rank's segment ([`SharedMemory`]). Collective. An MPI
    /// communicator spanning hosts is refused by the library
    /// ([`CommError::Mpi`]); use it on [`Communicator::split_local`]'s group.
    fn allocate_shared(&self, bytes: usize) -> Result<SharedMemory, CommError>;

    /// A name for messages and `explain` ("in-process", "MPI (Open MPI 4.1)").
    fn engine(&self) -> String;

    /// [`Communicator::start_all_to_all_v`], waited for.
    fn all_to_all_v(&self, sends: Vec<Vec<u8>>, recv_lens: Vec<usize>) -> Result<Vec<Vec<u8>>, CommError> {
        self.start_all_to_all_v(sends, recv_lens)?.wait()
    }

    /// Element-wise sum over ranks, added in rank order on every rank, so
    /// that all hold the same bits.
    fn all_reduce_f64(&self, data: &mut [f64]) -> Result<(), CommError> {
        all_reduce(self, data, "all-reduce (f64)")
    }
    /// [`Communicator::all_reduce_f64`] in f32.
    fn all_reduce_f32(&self, data: &mut [f32]) -> Result<(), CommError> {
        all_reduce(self, data, "all-reduce (f32)")
    }
    /// [`Communicator::all_reduce_f64`] for counts (wrapping on overflow is
    /// an error).
    fn all_reduce_u64(&self, data: &mut [u64]) -> Result<(), CommError> {
        all_reduce(self, data, "all-reduce (u64)")
    }
}

/// A number all-reduce adds, as little-endian bytes.
pub trait Summable: Copy {
    const BYTES: usize;
    fn put(self, out: &mut Vec<u8>);
    fn get(b: &[u8]) -> Self;
    fn add(self, other: Self) -> Option<Self>;
}

macro_rules! summable {
    ($t:ty, $n:expr, $add:expr) => {
        impl Summable for $t {
            const BYTES: usize = $n;
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn get(b: &[u8]) -> Self {
                let mut a = [0u8; $n];
                a.copy_from_slice(&b[..$n]);
                <$t>::from_le_bytes(a)
            }
            fn add(self, other: Self) -> Option<Self> {
                let f: fn($t, $t) -> Option<$t> = $add;
                f(self, other)
            }
        }
    };
}
summable!(f32, 4, |a, b| Some(a + b));
summable!(f64, 8, |a, b| Some(a + b));
summable!(u64, 8, |a: u64, b| a.checked_add(b));

/// Sum `data` over the ranks of `comm` in rank order (see
/// [`Communicator::all_reduce_f64`]).
pub fn all_reduce<T: Summable, C: Communicator + ?Sized>(comm: &C, data: &mut [T], during: &str) -> Result<(), CommError> {
    let mut mine = Vec::with_capacity(data.len() * T::BYTES);
    for &x in data.iter() {
        x.put(&mut mine);
    }
    let all = comm.all_gather_bytes(&mine)?;
    for (peer, bytes) in all.iter().enumerate() {
        if bytes.len() != mine.len() {
            return Err(CommError::WrongSize { peer, during: during.to_string(), expected: mine.len(), got: bytes.len() });
        }
    }
    for (i, x) in data.iter_mut().enumerate() {
        let at = i * T::BYTES;
        let mut acc = T::get(&all[0][at..]);
        for (peer, bytes) in all.iter().enumerate().skip(1) {
            acc = acc
                .add(T::get(&bytes[at..]))
                .ok_or_else(|| CommError::Usage(format!("{during}: the sum overflows at element {i} (rank {peer})")))?;
        }
        *x = acc;
    }
    Ok(())
}

/// `bytes` as little-endian u64s, or `None` when its length is not a
/// multiple of 8 (a peer's message of the wrong size).
pub fn read_u64s(bytes: &[u8]) -> Option<Vec<u64>> {
    if !bytes.len().is_multiple_of(8) {
        return None;
    }
    Some(bytes.chunks_exact(8).map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect())
}

/// `values` as little-endian bytes (what [`read_u64s`] reads).
pub fn write_u64s(values: &[u64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Check that every rank holds the same `value` for `what` (a graph's or
/// a kernel's checksum): an error on every rank naming the ranks that
/// differ, never a hang or a silent mismatch.
pub fn check_same(comm: &dyn Communicator, what: &str, value: u64) -> Result<(), CommError> {
    let all = comm.all_gather_bytes(&value.to_le_bytes())?;
    let values: Vec<Option<u64>> = all.iter().map(|b| <[u8; 8]>::try_from(b.as_slice()).ok().map(u64::from_le_bytes)).collect();
    if values.iter().all(|v| *v == Some(value)) {
        return Ok(());
    }
    let listed: Vec<String> = values
        .iter()
        .enumerate()
        .map(|(r, v)| match v {
            Some(v) => format!("rank {r}: {v:016x}"),
            None => format!("rank {r}: (malformed)"),
        })
        .collect();
    Err(CommError::Mismatch(format!("the ranks opened different {what}s (checksums differ: {})", listed.join(", "))))
}
