//! Memory that the ranks of one node map together: what continuous,
//! chunked and hierarchy partitioned tensors, and the node-local cache,
//! stand on.
//!
//! [`Communicator::allocate_shared`](super::Communicator::allocate_shared)
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

use super::{CommError, Communicator};

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
