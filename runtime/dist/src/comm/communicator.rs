//! The contract every engine implements ([`Communicator`]), what it hands
//! out (an exchange left in flight, [`PendingExchange`]; errors,
//! [`CommError`]) and the collectives built on it (rank-order
//! [`all_reduce`], [`check_same`]).
//!
//! ## Shared memory
//!
//! Memory that the ranks of one node map together: what continuous,
//! chunked and hierarchy partitioned tensors, and the node-local cache,
//! stand on.
//!
//! [`Communicator::allocate_shared`]
//! makes one: every rank of the communicator asks for its own segment, and
//! every rank gets the address of every segment. On MPI it is one
//! `MPI_Win_allocate_shared` window, mapped by each process of the node; in
//! process it is one heap allocation. Segments lie in rank order; when they
//! touch end to end ([`SharedMemory::contiguous`], MPI's default layout
//! and always the in-process one) the whole is one address range.
//!
//! The memory is plain bytes behind raw pointers: the type does not know
//! who writes what. Its users keep the rule that makes that sound — a byte
//! is written by one rank at a time, and between a write and another
//! rank's read of the same byte every rank of the group passes
//! [`SharedMemory::fence`] (on MPI, `MPI_Win_sync`, a barrier,
//! `MPI_Win_sync`; in process, a barrier, whose channel messages order the
//! threads' memory).
//!
//! Dropping it is collective on MPI (`MPI_Win_free` waits for the group):
//! every rank drops its handles in the same order, as it calls every other
//! collective.

use std::fmt;
use std::sync::Arc;

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

/// What keeps a [`SharedMemory`] mapped, and how its writes become visible
/// to the other ranks.
pub trait SharedBacking: Send + Sync {
    /// Make this rank's writes visible to the group's other processes and
    /// theirs to this one (half of a fence; the barrier is the other half).
    fn sync(&self) -> Result<(), CommError>;
}

/// Node-shared memory: one segment per rank of the communicator that made
/// it (see the module doc).
pub struct SharedMemory {
    /// Each rank's segment: its address and its length in bytes.
    segments: Vec<(usize, usize)>,
    rank: usize,
    backing: Box<dyn SharedBacking>,
}

impl fmt::Debug for SharedMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lens: Vec<usize> = self.segments.iter().map(|s| s.1).collect();
        write!(f, "SharedMemory(rank {}, segments {lens:?})", self.rank)
    }
}

// SAFETY: the segments are addresses of memory owned by `backing` (Send +
// Sync), valid while it lives; the type hands out raw pointers only, and
// its users order their accesses with `fence` (see the module doc).
unsafe impl Send for SharedMemory {}
// SAFETY: as for Send.
unsafe impl Sync for SharedMemory {}

impl SharedMemory {
    /// Wrap the segments `segments` (address, length) of a group in which
    /// this process is `rank`, kept alive by `backing`. Each address must
    /// be valid for reads and writes of its length for as long as
    /// `backing` lives, from every rank of the group.
    ///
    /// # Safety
    /// As above: the caller vouches for the addresses.
    pub unsafe fn new(segments: Vec<(usize, usize)>, rank: usize, backing: Box<dyn SharedBacking>) -> SharedMemory {
        SharedMemory { segments, rank, backing }
    }

    /// How many ranks (segments).
    pub fn ranks(&self) -> usize {
        self.segments.len()
    }

    /// Rank `r`'s segment: its first byte and its length.
    pub fn segment(&self, r: usize) -> Option<(*mut u8, usize)> {
        self.segments.get(r).map(|&(a, l)| (a as *mut u8, l))
    }

    /// This rank's own segment.
    pub fn own(&self) -> (*mut u8, usize) {
        let (a, l) = self.segments[self.rank];
        (a as *mut u8, l)
    }

    /// The first byte of the whole, when the segments lie end to end in
    /// rank order (empty segments anywhere); `None` otherwise.
    pub fn contiguous(&self) -> Option<*mut u8> {
        let first = self.segments.iter().find(|s| s.1 > 0).map(|s| s.0)?;
        let mut at = first;
        for &(a, l) in &self.segments {
            if l == 0 {
                continue;
            }
            if a != at {
                return None;
            }
            at = a + l;
        }
        Some(first as *mut u8)
    }

    /// Order every rank's writes before every rank's later reads:
    /// collective over `comm`, the communicator that allocated this memory.
    pub fn fence(&self, comm: &dyn Communicator) -> Result<(), CommError> {
        self.backing.sync()?;
        comm.barrier()?;
        self.backing.sync()
    }
}

/// A zeroed heap block shared by the threads of an in-process group; freed
/// when the last rank drops its [`SharedMemory`].
pub(crate) struct HeapBlock {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

// SAFETY: the block is plain bytes owned by this value; threads access it
// through raw pointers under the fence discipline of the module doc.
unsafe impl Send for HeapBlock {}
// SAFETY: as for Send.
unsafe impl Sync for HeapBlock {}

/// The alignment of an in-process block: a cache line, more than any
/// element type needs (segments inside it lie end to end, as on MPI, so
/// their users keep segment sizes multiples of the alignment they need).
pub(crate) const SEGMENT_ALIGN: usize = 64;

impl HeapBlock {
    /// `bytes` zeroed bytes (at least one, so that the pointer is real),
    /// aligned to [`SEGMENT_ALIGN`]; an error when memory is short.
    pub(crate) fn zeroed(bytes: usize) -> Result<HeapBlock, CommError> {
        let layout = std::alloc::Layout::from_size_align(bytes.max(1), SEGMENT_ALIGN)
            .map_err(|_| CommError::Usage(format!("shared memory of {bytes} bytes is too large")))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(CommError::Usage(format!("could not allocate {bytes} bytes of shared memory")));
        }
        Ok(HeapBlock { ptr, layout })
    }

    pub(crate) fn addr(&self) -> usize {
        self.ptr as usize
    }
}

impl Drop for HeapBlock {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

/// The segments of sizes `sizes` laid end to end from `base`.
pub(crate) fn packed_segments(base: usize, sizes: &[usize]) -> Vec<(usize, usize)> {
    let mut at = base;
    sizes
        .iter()
        .map(|&l| {
            let s = (at, l);
            at += l;
            s
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nothing;
    impl SharedBacking for Nothing {
        fn sync(&self) -> Result<(), CommError> {
            Ok(())
        }
    }

    #[test]
    fn contiguous_skips_empty_segments_and_finds_gaps() {
        // SAFETY: the addresses are never dereferenced here.
        let m = unsafe { SharedMemory::new(vec![(0, 0), (64, 8), (72, 0), (72, 4)], 0, Box::new(Nothing)) };
        assert_eq!(m.contiguous(), Some(64 as *mut u8));
        // SAFETY: as above.
        let gap = unsafe { SharedMemory::new(vec![(64, 8), (80, 4)], 1, Box::new(Nothing)) };
        assert_eq!(gap.contiguous(), None);
        assert_eq!(gap.own(), (80 as *mut u8, 4));
        // SAFETY: as above.
        let empty = unsafe { SharedMemory::new(vec![(0, 0), (0, 0)], 1, Box::new(Nothing)) };
        assert_eq!(empty.contiguous(), None);
    }

    #[test]
    fn packed_segments_lie_end_to_end() {
        assert_eq!(packed_segments(100, &[4, 0, 8]), vec![(100, 4), (104, 0), (104, 8)]);
    }
}
