//! The node-local cache: copies of remote rows in memory that the ranks of
//! one node share, so that a row another rank of the node already fetched
//! is read by pointer instead of asked for again.
//!
//! It serves the memory types whose rows can be remote (distributed,
//! hierarchy); on continuous and chunked memory every row is in the
//! node's shared memory already and the cache stays empty. Its size is a
//! ratio of the tensor's rows; slots are direct-mapped (row `i` can only
//! sit in slot `i % slots`), spread over the node's ranks in contiguous
//! blocks, each slot a tag (the row + 1; 0 is empty) and the row's bytes.
//!
//! The cache never changes a result, only where bytes come from:
//! - a gather looks up each remote row (a hit is copied from the slot),
//!   fetches the misses, and then fills slots with them. Filling is
//!   collective over the node: the ranks share their lists of misses, and
//!   a slot several misses map to takes the last of them in (node rank,
//!   position) order, so that one rank writes each slot;
//! - read-only ([`CacheMode::ReadOnly`], frozen features): a write to the
//!   tensor empties every cache, which therefore never holds an old row;
//! - read-write ([`CacheMode::ReadWrite`], trained embeddings): each owner
//!   remembers which nodes fetched its rows (a bit per node and row, in
//!   its group's shared memory), and a write (a scatter, an optimizer
//!   step) sends each changed row to those nodes, whose caches take the
//!   new bytes when the slot still holds that row. The caches are written
//!   back at each step and never hold an old row either.
//!
//! Writes behind the cache's back (`with_local_mut`) leave it stale when
//! any node's cache holds a row: the tensor then refuses cached gathers,
//! on every rank alike, until `writeback_all_cache` (which reads every
//! cached row again from its owner) or `drop_all_cache`. Filling a fresh
//! tensor through `with_local_mut` before any gather leaves nothing stale.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::error::PartitionedError;
use super::layout::Blocks;
use crate::comm::{read_u64s, write_u64s, CommError, Communicator, SharedMemory};

/// How a partitioned tensor caches remote rows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CachePolicy {
    /// No cache: every remote row is fetched from its owner.
    None,
    /// A node-local cache of `ratio` (in (0, 1]) times the tensor's rows.
    LocalNode { ratio: f64, mode: CacheMode },
}

/// Whether the cached tensor is written while cached (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheMode {
    ReadOnly,
    ReadWrite,
}

impl CacheMode {
    pub fn name(self) -> &'static str {
        match self {
            CacheMode::ReadOnly => "read-only",
            CacheMode::ReadWrite => "read-write",
        }
    }
}

/// What this rank's lookups found, since the tensor was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Remote rows read from the node cache.
    pub hits: u64,
    /// Remote rows fetched from their owners.
    pub misses: u64,
    /// Slots of the node's cache.
    pub slots: usize,
}

impl CacheStats {
    /// Hits over lookups (0 when there were none).
    pub fn hit_rate(&self) -> f64 {
        let all = self.hits + self.misses;
        if all == 0 {
            0.0
        } else {
            self.hits as f64 / all as f64
        }
    }
}

/// A node's cache, as one rank holds it (module doc).
pub(crate) struct Cache {
    pub(crate) mode: CacheMode,
    node: Arc<dyn Communicator>,
    /// Slots per node rank.
    blocks: Blocks,
    mem: SharedMemory,
    row_bytes: usize,
    /// Read-write: which nodes fetched each row, `words` u64s per root
    /// row, over the storage group (each rank's segment its own rows).
    directory: Option<Directory>,
    /// Whether any slot of the node's cache may hold a row (set by a fill
    /// that inserted one, cleared by `clear`; the same on every rank of
    /// the node, as both are collective over it).
    holds: AtomicBool,
    stale: AtomicBool,
    hits: AtomicU64,
    misses: AtomicU64,
}

pub(crate) struct Directory {
    pub(crate) mem: SharedMemory,
    pub(crate) words: usize,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cache({}, {} slots)", self.mode.name(), self.blocks.total())
    }
}

impl Cache {
    /// Make a node's cache of `ratio` × `rows` slots of `row_bytes` bytes
    /// (collective over `node`); `directory` for read-write caches.
    pub(crate) fn new(
        node: Arc<dyn Communicator>,
        rows: usize,
        row_bytes: usize,
        ratio: f64,
        mode: CacheMode,
        directory: Option<Directory>,
    ) -> Result<Cache, PartitionedError> {
        if !(ratio > 0.0 && ratio <= 1.0) {
            return Err(PartitionedError::BadOptions(format!("a cache ratio must be in (0, 1], not {ratio}")));
        }
        let slots = ((rows as f64 * ratio).ceil() as usize).clamp(1, rows.max(1));
        let blocks = Blocks::even(slots, node.size());
        let mine = blocks.block(node.rank()).len();
        let bytes = mine
            .checked_mul(8 + row_bytes)
            .and_then(|b| b.checked_next_multiple_of(64))
            .ok_or_else(|| PartitionedError::BadOptions(format!("a cache of {slots} slots of {row_bytes} bytes is too large")))?;
        let mem = node.allocate_shared(bytes)?;
        Ok(Cache {
            mode,
            node,
            blocks,
            mem,
            row_bytes,
            directory,
            holds: AtomicBool::new(false),
            stale: AtomicBool::new(false),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        })
    }

    pub(crate) fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            slots: self.blocks.total(),
        }
    }

    pub(crate) fn directory(&self) -> Option<&Directory> {
        self.directory.as_ref()
    }

    pub(crate) fn is_stale(&self) -> bool {
        self.stale.load(Ordering::Relaxed)
    }

    pub(crate) fn mark_stale(&self) {
        self.stale.store(true, Ordering::Relaxed);
    }

    /// Whether the node's cache may hold a row.
    pub(crate) fn holds_rows(&self) -> bool {
        self.holds.load(Ordering::Relaxed)
    }

    pub(crate) fn clear_stale(&self) {
        self.stale.store(false, Ordering::Relaxed);
    }

    pub(crate) fn count(&self, hits: usize, misses: usize) {
        self.hits.fetch_add(hits as u64, Ordering::Relaxed);
        self.misses.fetch_add(misses as u64, Ordering::Relaxed);
    }

    /// Slot `s`'s tag and row addresses.
    fn slot(&self, s: usize) -> (*mut u8, *mut u8) {
        let q = self.blocks.part_of(s);
        let block = self.blocks.block(q);
        let j = s - block.start;
        // The segment exists: `q` is a node rank (blocks has one per rank).
        let (base, _) = self.mem.segment(q).unwrap_or((std::ptr::null_mut(), 0));
        // SAFETY (of the offsets): inside segment q, which holds
        // `block.len()` tags then as many rows.
        unsafe { (base.add(j * 8), base.add(block.len() * 8 + j * self.row_bytes)) }
    }

    fn tag(&self, s: usize) -> &AtomicU64 {
        // SAFETY: the tag is 8 bytes inside the cache's shared memory,
        // 8-aligned (segments are multiples of 64 bytes from an aligned
        // base), alive while `self` is; shared access is atomic.
        unsafe { &*(self.slot(s).0 as *const AtomicU64) }
    }

    /// The cached bytes of root row `row`, if its slot holds it.
    pub(crate) fn lookup(&self, row: usize) -> Option<&[u8]> {
        let s = row % self.blocks.total();
        if self.tag(s).load(Ordering::Relaxed) != row as u64 + 1 {
            return None;
        }
        // SAFETY: `row_bytes` bytes of the slot, written before the fence
        // that ended the last fill or write; nobody writes them until the
        // next collective fill, which this rank also has to enter.
        Some(unsafe { std::slice::from_raw_parts(self.slot(s).1, self.row_bytes) })
    }

    /// Write `bytes` into slot `s` under tag `row`.
    fn put(&self, s: usize, row: usize, bytes: &[u8]) {
        let (_, data) = self.slot(s);
        // SAFETY: the slot's row area, `row_bytes` long; this rank is the
        // slot's only writer in this collective (the caller's rule).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), data, self.row_bytes) };
        self.tag(s).store(row as u64 + 1, Ordering::Relaxed);
    }

    /// Fill slots with this rank's fetched misses (root row, full row
    /// bytes): collective over the node (module doc).
    pub(crate) fn fill(&self, fetched: &[(usize, &[u8])]) -> Result<(), PartitionedError> {
        let mine: Vec<u64> = fetched.iter().map(|&(r, _)| r as u64).collect();
        let all = self.node.all_gather_bytes(&write_u64s(&mine))?;
        let slots = self.blocks.total();
        let mut winner: HashMap<usize, (usize, usize)> = HashMap::new();
        if all.iter().any(|b| !b.is_empty()) {
            self.holds.store(true, Ordering::Relaxed);
        }
        for (q, bytes) in all.iter().enumerate() {
            let rows = read_u64s(bytes).ok_or_else(|| CommError::WrongSize {
                peer: q,
                during: "a cache fill".into(),
                expected: 8,
                got: bytes.len(),
            })?;
            for (i, r) in rows.into_iter().enumerate() {
                winner.insert((r % slots as u64) as usize, (q, i));
            }
        }
        let me = self.node.rank();
        for (i, &(row, bytes)) in fetched.iter().enumerate() {
            let s = row % slots;
            if winner.get(&s) == Some(&(me, i)) && bytes.len() == self.row_bytes {
                self.put(s, row, bytes);
            }
        }
        self.mem.fence(self.node.as_ref()).map_err(Into::into)
    }

    /// Take new bytes for rows this rank was sent by their owners after a
    /// write, where the slot still holds that row; collective over the
    /// node (each (row, node) pair is sent to one rank, so one rank writes
    /// each slot).
    pub(crate) fn refresh(&self, rows: &[(usize, &[u8])]) -> Result<(), PartitionedError> {
        let slots = self.blocks.total();
        for &(row, bytes) in rows {
            let s = row % slots;
            if self.tag(s).load(Ordering::Relaxed) == row as u64 + 1 && bytes.len() == self.row_bytes {
                self.put(s, row, bytes);
            }
        }
        self.mem.fence(self.node.as_ref()).map_err(Into::into)
    }

    /// The rows this rank's own slots hold (for a refresh of all of them).
    pub(crate) fn own_rows(&self) -> Vec<usize> {
        let block = self.blocks.block(self.node.rank());
        block.filter_map(|s| self.tag(s).load(Ordering::Relaxed).checked_sub(1).map(|r| r as usize)).collect()
    }

    /// Empty every slot and forget which nodes fetched which row
    /// (collective over the node and the storage group).
    pub(crate) fn clear(&self, store: &dyn Communicator) -> Result<(), PartitionedError> {
        for s in self.blocks.block(self.node.rank()) {
            self.tag(s).store(0, Ordering::Relaxed);
        }
        if let Some(d) = &self.directory {
            let (ptr, len) = d.mem.own();
            // SAFETY: this rank's own directory segment, `len` bytes; only
            // its owner writes it outside fills, and fills are collective.
            unsafe { std::ptr::write_bytes(ptr, 0, len) };
            d.mem.fence(store)?;
        }
        self.stale.store(false, Ordering::Relaxed);
        self.holds.store(false, Ordering::Relaxed);
        self.mem.fence(self.node.as_ref()).map_err(Into::into)
    }
}

impl Directory {
    /// The atomic words of root row `row`, found in the segment of its
    /// owner's storage rank `store_rank`, at its place `local` in the
    /// owner's rows.
    pub(crate) fn words(&self, store_rank: usize, local: usize) -> &[AtomicU64] {
        let (base, len) = self.mem.segment(store_rank).unwrap_or((std::ptr::null_mut(), 0));
        let at = local * self.words * 8;
        if base.is_null() || at + self.words * 8 > len {
            return &[];
        }
        // SAFETY: `words` u64s inside the segment (checked above), 8-aligned
        // (rows of whole u64s from an aligned base), alive with `self`;
        // shared access is atomic.
        unsafe { std::slice::from_raw_parts(base.add(at) as *const AtomicU64, self.words) }
    }
}
