//! Partitioned tensors: one logical tensor whose first dimension is split
//! over the ranks of a communicator, every row readable and writable by
//! global index from every rank (WholeGraph's WholeMemory, on the CPU).
//!
//! Node features and learned embeddings of a large graph outgrow one
//! process's memory. A [`PartitionedTensor`] holds an element type
//! ([`ElementType`]: f32, f64, i32, i64) and up to [`MAX_DIMS`] dimensions;
//! rank `r` owns a contiguous block of rows ([`RowLayout`]), whole records
//! of `granularity` rows, and every rank knows every block. Where the
//! bytes live is the [`MemoryType`]:
//!
//! - **continuous**: the ranks of the node map one shared allocation (an
//!   MPI shared-memory window; in process, one heap block), laid out in
//!   row order, so any rank reads any row by pointer ([`PartitionedTensor::with_all`]);
//! - **chunked**: the same allocation, seen as one chunk per rank
//!   ([`PartitionedTensor::with_chunk`]);
//! - **distributed**: each rank maps only its own rows; other rows move by
//!   explicit gather and scatter messages;
//! - **hierarchy**: the ranks of each node share their rows as continuous
//!   memory does, and rows of other nodes move by messages between the
//!   ranks with the same place on their nodes (`topology`).
//!
//! Continuous and chunked memory need every rank on one node; hierarchy
//! needs the same number of ranks on every node; device memory arrives
//! with the CUDA runtime. [`Capability::check`] says so before anything is
//! allocated, as an error, never a crash.
//!
//! Operations, all collective (every rank calls them in the same order,
//! each with its own arguments, possibly empty), except where said:
//! - [`PartitionedTensor::gather`]: rows by global index, in any order,
//!   duplicates allowed; an index out of range is an error naming it. On
//!   continuous and chunked memory a gather reads by pointer and sends
//!   nothing, so it need not be collective there.
//! - [`PartitionedTensor::scatter`]: rows by global index. Writes meet at
//!   the row's owner and are applied in (writing rank, position) order, so
//!   among duplicates the last in index order wins — the last of the
//!   highest rank's list when several ranks write one row.
//! - local views ([`PartitionedTensor::with_local`], `with_local_mut`),
//!   sub-tensors that keep their root (a row range, a column range of the
//!   second dimension; [`PartitionedTensor::rows`], `columns`), and files
//!   (`files.rs`: one `.npy` or per-rank files, written crash-safe).
//! - a node-local cache of remote rows (`cache.rs`).
//!
//! Errors are agreed: when one rank's input is bad (an index out of
//! range, a slice of the wrong length) or its file fails, every rank
//! returns an error — that rank its own, the others
//! [`PartitionedError::PeerFailed`] naming it — before anything moved,
//! so that a program that returns on an error leaves every rank in step.
//! (Gathers on continuous and chunked memory, which send nothing, fail on
//! the rank alone.) This matters on MPI, where memory is dropped
//! collectively (freeing a window waits for the node): ranks drop their
//! tensors in the same order, as they call every collective.

mod cache;
mod error;
mod files;
mod layout;
mod memory;
mod topology;

use std::ops::Range;
use std::sync::Arc;

pub use cache::{CacheMode, CachePolicy, CacheStats};
use error::agree;
pub use error::PartitionedError;
pub use layout::{part_path, Blocks, RowLayout, RowSplit};
pub use memory::{Capability, Location, MemoryType};
pub use topology::Topology;

use crate::comm::{read_u64s, write_u64s, Communicator, SharedMemory};
use cache::{Cache, Directory};
use tiga_runtime::element::{bytes_of, bytes_of_mut, Element, ElementType};
pub(crate) use topology::Writes;
use topology::{exchange_records, route_to_owners};

/// The most dimensions a partitioned tensor has.
pub const MAX_DIMS: usize = 8;

/// How to make a partitioned tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub memory: MemoryType,
    pub location: Location,
    /// Rows per record: a block boundary never falls inside a record.
    pub granularity: usize,
    pub split: RowSplit,
    pub cache: CachePolicy,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            memory: MemoryType::Distributed,
            location: Location::Host,
            granularity: 1,
            split: RowSplit::Even,
            cache: CachePolicy::None,
        }
    }
}

impl Options {
    pub fn memory(memory: MemoryType) -> Options {
        Options { memory, ..Options::default() }
    }
}

/// What a tensor and its sub-tensors share.
struct Root {
    dtype: ElementType,
    shape: Vec<usize>,
    row_bytes: usize,
    layout: RowLayout,
    topo: Arc<Topology>,
    /// The storage group's rows (topology): each rank's segment its rows.
    store: SharedMemory,
    cache: Option<Cache>,
}

/// A tensor whose first dimension is split over ranks (module doc). A
/// sub-tensor shares its root's rows: reads and writes go through.
#[derive(Clone)]
pub struct PartitionedTensor {
    root: Arc<Root>,
    /// This view's rows, as root rows.
    rows: Range<usize>,
    /// This view's bytes of each root row.
    cols: Range<usize>,
    shape: Vec<usize>,
}

impl std::fmt::Debug for PartitionedTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PartitionedTensor({} {:?}, {}, rank {} of {})",
            self.root.dtype,
            self.shape,
            self.root.topo.memory.name(),
            self.rank(),
            self.ranks()
        )
    }
}

/// Rows of a local view: `rows` rows of `cols` elements, each `stride`
/// elements after the last in `data` (a column view skips the others).
#[derive(Debug)]
pub struct LocalView<'a, T> {
    data: &'a [T],
    rows: usize,
    stride: usize,
    cols: Range<usize>,
}

impl<'a, T> LocalView<'a, T> {
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Row `i`'s elements.
    pub fn row(&self, i: usize) -> &'a [T] {
        let at = i * self.stride;
        &self.data[at + self.cols.start..at + self.cols.end]
    }

    /// The elements of every row, contiguous when the view has every
    /// column (`None` for a column view).
    pub fn contiguous(&self) -> Option<&'a [T]> {
        (self.cols.len() == self.stride).then_some(self.data)
    }
}

/// A writable local view (see [`LocalView`]).
#[derive(Debug)]
pub struct LocalViewMut<'a, T> {
    data: &'a mut [T],
    rows: usize,
    stride: usize,
    cols: Range<usize>,
}

impl<T> LocalViewMut<'_, T> {
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Row `i`'s elements, writable.
    pub fn row_mut(&mut self, i: usize) -> &mut [T] {
        let at = i * self.stride;
        &mut self.data[at + self.cols.start..at + self.cols.end]
    }
}

impl PartitionedTensor {
    /// A zeroed tensor of `shape` over the ranks of `comm` (collective).
    pub fn new(
        comm: &dyn Communicator,
        dtype: ElementType,
        shape: &[usize],
        options: &Options,
    ) -> Result<PartitionedTensor, PartitionedError> {
        let topo = Topology::new(comm, options.memory, options.location)?;
        Self::with_topology(topo, dtype, shape, options)
    }

    /// A zeroed tensor beside this one: the same ranks, memory type and
    /// row split, another element type and trailing shape (an optimizer's
    /// states beside an embedding). No cache. Collective.
    pub fn new_beside(&self, dtype: ElementType, shape: &[usize]) -> Result<PartitionedTensor, PartitionedError> {
        let root = &self.root;
        if shape.first() != root.shape.first() {
            return Err(PartitionedError::BadShape {
                shape: shape.to_vec(),
                reason: format!("a tensor beside one of shape {:?} has its {} rows", root.shape, root.shape[0]),
            });
        }
        let sizes: Vec<usize> = (0..root.layout.ranks()).map(|r| root.layout.rows_of(r).len()).collect();
        let options = Options {
            memory: root.topo.memory,
            location: Location::Host,
            granularity: root.layout.granularity(),
            split: RowSplit::Rows(sizes),
            cache: CachePolicy::None,
        };
        Self::with_topology(root.topo.clone(), dtype, shape, &options)
    }

    fn with_topology(
        topo: Arc<Topology>,
        dtype: ElementType,
        shape: &[usize],
        options: &Options,
    ) -> Result<PartitionedTensor, PartitionedError> {
        let bad = |reason: &str| PartitionedError::BadShape { shape: shape.to_vec(), reason: reason.into() };
        if shape.is_empty() || shape.len() > MAX_DIMS {
            return Err(bad(&format!("a partitioned tensor has 1 to {MAX_DIMS} dimensions")));
        }
        let row_elems = shape[1..].iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or_else(|| bad("a row is too large"))?;
        let row_bytes = row_elems.checked_mul(dtype.size()).ok_or_else(|| bad("a row is too large"))?;
        let layout = RowLayout::new(shape[0], topo.size(), options.granularity, &options.split)?;
        let mine = layout.rows_of(topo.rank()).len();
        let bytes = mine.checked_mul(row_bytes).ok_or_else(|| bad("this rank's rows are too large"))?;
        let store = topo.store.allocate_shared(bytes)?;
        let cache = match options.cache {
            CachePolicy::LocalNode { ratio, mode } if topo.has_remote() => {
                let directory = match mode {
                    CacheMode::ReadWrite => {
                        let words = topo.nodes.nodes().div_ceil(64);
                        let mem = topo.store.allocate_shared(mine * words * 8)?;
                        Some(Directory { mem, words })
                    }
                    CacheMode::ReadOnly => None,
                };
                Some(Cache::new(topo.nodes.local.clone(), shape[0], row_bytes, ratio, mode, directory)?)
            }
            CachePolicy::LocalNode { ratio, .. } if !(ratio > 0.0 && ratio <= 1.0) => {
                return Err(PartitionedError::BadOptions(format!("a cache ratio must be in (0, 1], not {ratio}")))
            }
            // Every row is in the node's shared memory: nothing to cache.
            _ => None,
        };
        let root = Arc::new(Root { dtype, shape: shape.to_vec(), row_bytes, layout, topo, store, cache });
        Ok(PartitionedTensor { rows: 0..shape[0], cols: 0..row_bytes, shape: shape.to_vec(), root })
    }

    pub fn dtype(&self) -> ElementType {
        self.root.dtype
    }

    /// This view's shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn memory(&self) -> MemoryType {
        self.root.topo.memory
    }

    pub fn rank(&self) -> usize {
        self.root.topo.rank()
    }

    pub fn ranks(&self) -> usize {
        self.root.topo.size()
    }

    /// The communicators this tensor uses.
    pub fn topology(&self) -> &Arc<Topology> {
        &self.root.topo
    }

    /// The root's row split.
    pub fn layout(&self) -> &RowLayout {
        &self.root.layout
    }

    /// Whether this is a root (not a sub-tensor).
    pub fn is_root(&self) -> bool {
        self.rows == (0..self.root.shape[0]) && self.cols == (0..self.root.row_bytes)
    }

    /// Rank `r`'s rows of this view, in this view's row numbers (its
    /// partition: `start` is the offset, `len()` the size).
    pub fn partition(&self, r: usize) -> Range<usize> {
        let own = self.root.layout.rows_of(r);
        let a = own.start.clamp(self.rows.start, self.rows.end);
        let b = own.end.clamp(self.rows.start, self.rows.end);
        a - self.rows.start..b - self.rows.start
    }

    /// This rank's rows of this view.
    pub fn local_rows(&self) -> Range<usize> {
        self.partition(self.rank())
    }

    /// Elements of one row of this view.
    pub fn row_len(&self) -> usize {
        self.cols.len() / self.root.dtype.size()
    }

    fn view_header(&self) -> [u64; 2] {
        [self.cols.start as u64, self.cols.end as u64]
    }

    fn check_type<T: Element>(&self) -> Result<(), PartitionedError> {
        if T::TYPE != self.root.dtype {
            return Err(PartitionedError::WrongType { tensor: self.root.dtype, asked: T::TYPE });
        }
        Ok(())
    }

    /// Root row `r`'s bytes, when its owner is in this rank's storage
    /// group.
    pub(crate) fn stored_row(&self, r: usize) -> Option<*mut u8> {
        let root = &self.root;
        let owner = root.layout.owner(r);
        if root.topo.group_of(owner) != root.topo.my_group() {
            return None;
        }
        let (base, len) = root.store.segment(root.topo.store_rank_of(owner))?;
        let at = (r - root.layout.rows_of(owner).start) * root.row_bytes;
        // SAFETY (of the offset): the row lies inside its owner's segment,
        // which holds the owner's rows.
        (at + root.row_bytes <= len).then(|| unsafe { base.add(at) })
    }

    /// `indices` (this view's rows) as root rows, or the first one out of
    /// range.
    pub(crate) fn root_rows(&self, indices: &[i64]) -> Result<Vec<usize>, PartitionedError> {
        let n = self.rows.len();
        indices
            .iter()
            .enumerate()
            .map(|(position, &index)| match usize::try_from(index) {
                Ok(i) if i < n => Ok(self.rows.start + i),
                _ => Err(PartitionedError::IndexOutOfRange { index, position, rows: n }),
            })
            .collect()
    }

    /// Rows `indices` of this view, in order (see the module doc).
    pub fn gather<T: Element>(&self, indices: &[i64]) -> Result<Vec<T>, PartitionedError> {
        self.check_type::<T>()?;
        let mut out = vec![T::default(); indices.len() * self.row_len()];
        self.gather_bytes_into(indices, bytes_of_mut(&mut out))?;
        Ok(out)
    }

    /// [`PartitionedTensor::gather`] into `out`, which holds
    /// `indices.len()` rows.
    pub fn gather_into<T: Element>(&self, indices: &[i64], out: &mut [T]) -> Result<(), PartitionedError> {
        self.check_type::<T>()?;
        self.gather_bytes_into(indices, bytes_of_mut(out))
    }

    /// [`PartitionedTensor::gather`] as bytes (this machine's byte order).
    pub fn gather_bytes_into(&self, indices: &[i64], out: &mut [u8]) -> Result<(), PartitionedError> {
        let vb = self.cols.len();
        let checked = if out.len() != indices.len() * vb {
            Err(PartitionedError::WrongLength { what: "gather output bytes", expected: indices.len() * vb, got: out.len() })
        } else {
            self.root_rows(indices)
        };
        if !self.root.topo.has_remote() {
            // Continuous and chunked: every row is mapped here; where the
            // segments lie end to end in rank order, which is row order,
            // row r is at base + r · row bytes.
            let rows = checked?;
            let rb = self.root.row_bytes;
            match self.root.store.contiguous() {
                Some(base) if self.root.store.ranks() == self.ranks() => {
                    for (o, &r) in out.chunks_exact_mut(vb.max(1)).zip(&rows) {
                        // SAFETY: row r of the one address range that holds
                        // rows 0..rows() (`contiguous` checked the segments
                        // touch, in rank order: row order); read-only while
                        // no collective write runs.
                        unsafe { std::ptr::copy_nonoverlapping(base.add(r * rb + self.cols.start), o.as_mut_ptr(), vb) };
                    }
                }
                _ => {
                    for (o, &r) in out.chunks_exact_mut(vb.max(1)).zip(&rows) {
                        self.copy_stored(r, o);
                    }
                }
            }
            return Ok(());
        }
        if self.root.cache.as_ref().is_some_and(Cache::is_stale) {
            // Every rank's cache went stale in the same collective, so every
            // rank returns here.
            return Err(PartitionedError::StaleCache);
        }
        // Agreed, so that every rank leaves together on anyone's bad input.
        let rows = agree(self.root.topo.world.as_ref(), checked)?;
        self.gather_remote(&rows, out, true)
    }

    /// Copy root row `r`'s view bytes (stored in this rank's group) into `out`.
    fn copy_stored(&self, r: usize, out: &mut [u8]) {
        if let Some(p) = self.stored_row(r) {
            // SAFETY: the view's bytes of a stored row (`stored_row`
            // checked the row lies in its segment); no rank writes it
            // outside a collective write, which this rank is not in.
            unsafe { std::ptr::copy_nonoverlapping(p.add(self.cols.start), out.as_mut_ptr(), self.cols.len()) };
        }
    }

    /// The gather of rows that may lie in other storage groups: local rows
    /// by pointer, cached rows from the node cache (`use_cache`), the rest
    /// by request to their group over the route communicator. Collective.
    fn gather_remote(&self, rows: &[usize], out: &mut [u8], use_cache: bool) -> Result<(), PartitionedError> {
        let root = &self.root;
        let topo = &root.topo;
        let vb = self.cols.len();
        let cache = root.cache.as_ref().filter(|_| use_cache);
        // With a cache, whole rows travel so that they can be cached.
        let fetch = if cache.is_some() { 0..root.row_bytes } else { self.cols.clone() };
        let fb = fetch.len();
        let mut asks: Vec<Vec<(usize, usize)>> = vec![Vec::new(); topo.route.size()];
        let (mut hits, mut misses) = (0, 0);
        for (pos, &r) in rows.iter().enumerate() {
            let o = &mut out[pos * vb..(pos + 1) * vb];
            let owner = root.layout.owner(r);
            if topo.group_of(owner) == topo.my_group() {
                self.copy_stored(r, o);
            } else if let Some(bytes) = cache.and_then(|c| c.lookup(r)) {
                o.copy_from_slice(&bytes[self.cols.clone()]);
                hits += 1;
            } else {
                asks[topo.group_of(owner)].push((pos, r));
                misses += 1;
            }
        }
        if let Some(c) = cache {
            c.count(hits, misses);
        }
        let sends: Vec<Vec<u8>> =
            asks.iter().map(|a| write_u64s(&a.iter().map(|&(_, r)| r as u64).collect::<Vec<_>>())).collect();
        let header = [fetch.start as u64, fetch.end as u64];
        let requests = exchange_records(topo.route.as_ref(), sends, 8, header)?;
        // Serve: read each asked row from this group's memory.
        let mut replies = Vec::with_capacity(requests.len());
        let mut bad = None;
        for (g, req) in requests.iter().enumerate() {
            let ids = read_u64s(req).unwrap_or_default();
            let mut reply = vec![0u8; ids.len() * fb];
            for (k, &r) in ids.iter().enumerate() {
                let r = r as usize;
                match (r < root.layout.rows()).then(|| self.stored_row(r)).flatten() {
                    Some(p) => {
                        // SAFETY: as in `copy_stored`, for the fetched bytes.
                        unsafe { std::ptr::copy_nonoverlapping(p.add(fetch.start), reply[k * fb..].as_mut_ptr(), fb) };
                        if let Some(d) = cache.and_then(Cache::directory) {
                            self.mark_fetched(d, r, g);
                        }
                    }
                    None => {
                        bad = Some(PartitionedError::Mismatch(format!(
                            "rank group {g} asked for row {r}, which is not stored here"
                        )))
                    }
                }
            }
            replies.push(reply);
        }
        let lens: Vec<usize> = asks.iter().map(|a| a.len() * fb).collect();
        let answers = topo.route.all_to_all_v(replies, lens)?;
        let mut fetched: Vec<(usize, &[u8])> = Vec::new();
        for (a, bytes) in asks.iter().zip(&answers) {
            for (k, &(pos, r)) in a.iter().enumerate() {
                let row = &bytes[k * fb..(k + 1) * fb];
                let from = self.cols.start - fetch.start;
                out[pos * vb..(pos + 1) * vb].copy_from_slice(&row[from..from + vb]);
                if cache.is_some() {
                    fetched.push((r, row));
                }
            }
        }
        if let Some(c) = cache {
            fetched.sort_by_key(|f| f.0);
            fetched.dedup_by_key(|f| f.0);
            c.fill(&fetched)?;
        }
        match bad {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Note in the read-write directory that the node of route rank `g`
    /// fetched root row `r` (stored in this group).
    fn mark_fetched(&self, d: &Directory, r: usize, g: usize) {
        let root = &self.root;
        let topo = &root.topo;
        let requester = match topo.memory {
            // The route communicator is the world: `g` is a world rank.
            MemoryType::Distributed => g,
            // The cross communicator: `g` is a node; its rank there with
            // this rank's place.
            _ => {
                let local = topo.nodes.placement(topo.rank()).map_or(0, |p| p.1);
                topo.nodes.members(g).get(local).copied().unwrap_or(0)
            }
        };
        let node = topo.nodes.placement(requester).map_or(0, |p| p.0);
        let owner = root.layout.owner(r);
        let words = d.words(topo.store_rank_of(owner), r - root.layout.rows_of(owner).start);
        if let Some(w) = words.get(node / 64) {
            w.fetch_or(1 << (node % 64), std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Write rows `indices` of this view from `values` (see the module
    /// doc for duplicates).
    pub fn scatter<T: Element>(&self, indices: &[i64], values: &[T]) -> Result<(), PartitionedError> {
        self.check_type::<T>()?;
        self.scatter_bytes(indices, bytes_of(values))
    }

    /// [`PartitionedTensor::scatter`] from bytes (this machine's order).
    pub fn scatter_bytes(&self, indices: &[i64], values: &[u8]) -> Result<(), PartitionedError> {
        let vb = self.cols.len();
        let checked = if values.len() != indices.len() * vb {
            Err(PartitionedError::WrongLength { what: "scatter input bytes", expected: indices.len() * vb, got: values.len() })
        } else {
            self.root_rows(indices)
        };
        // Agreed, so that every rank leaves together on anyone's bad input.
        let rows = agree(self.root.topo.world.as_ref(), checked)?;
        let mine = self.route_writes(&rows, values)?;
        // The last write of each row wins: apply them in key order.
        let mut written: Vec<usize> = Vec::new();
        for (i, k) in mine.keys.iter().enumerate() {
            self.write_own(k.row as usize, mine.payload(i))?;
            if written.last() != Some(&(k.row as usize)) {
                written.push(k.row as usize);
            }
        }
        self.after_write(&written)
    }

    /// Route this rank's writes of this view's columns of root rows `rows`
    /// (the i-th from `payload[i * width..]`) to their owners; returns the
    /// writes this rank owns, in key order (collective).
    pub(crate) fn route_writes<'a>(&self, rows: &[usize], payload: &'a [u8]) -> Result<Writes<'a>, PartitionedError> {
        let layout = &self.root.layout;
        let writes = Writes::mine(self.rank(), rows, payload, self.cols.len());
        route_to_owners(&self.root.topo, writes, self.view_header(), |r| layout.owner(r))
    }

    /// Write this view's columns of root row `r`, owned by this rank.
    fn write_own(&self, r: usize, bytes: &[u8]) -> Result<(), PartitionedError> {
        let root = &self.root;
        if root.layout.owner(r) != self.rank() || bytes.len() != self.cols.len() {
            return Err(PartitionedError::Mismatch(format!("row {r} was routed to rank {}, which does not own it", self.rank())));
        }
        if let Some(p) = self.stored_row(r) {
            // SAFETY: this rank's own row (checked above), written only by
            // its owner, inside a collective write that every reader of
            // the group passes a fence after.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.add(self.cols.start), bytes.len()) };
        }
        Ok(())
    }

    /// After this rank wrote the root rows `written` it owns (in a
    /// collective write): let the group see them, and keep the caches
    /// true (module doc of `cache.rs`). Collective.
    pub(crate) fn after_write(&self, written: &[usize]) -> Result<(), PartitionedError> {
        let root = &self.root;
        let topo = &root.topo;
        root.store.fence(topo.store.as_ref())?;
        let Some(cache) = &root.cache else { return Ok(()) };
        match cache.mode {
            CacheMode::ReadOnly => cache.clear(topo.store.as_ref()),
            CacheMode::ReadWrite => self.push_to_caches(cache, written),
        }
    }

    /// Send each written row to the nodes that fetched it, whose caches
    /// take it where they still hold it (collective).
    fn push_to_caches(&self, cache: &Cache, written: &[usize]) -> Result<(), PartitionedError> {
        let root = &self.root;
        let topo = &root.topo;
        let rb = root.row_bytes;
        let mut sends: Vec<Vec<u8>> = vec![Vec::new(); topo.route.size()];
        if let Some(d) = cache.directory() {
            let local = topo.nodes.placement(topo.rank()).map_or(0, |p| p.1);
            for &r in written {
                let own = r - root.layout.rows_of(self.rank()).start;
                let Some(p) = self.stored_row(r) else { continue };
                // SAFETY: this rank's own row, just written by it.
                let bytes = unsafe { std::slice::from_raw_parts(p, rb) };
                for (wi, w) in d.words(topo.store_rank_of(self.rank()), own).iter().enumerate() {
                    let mut bits = w.load(std::sync::atomic::Ordering::Relaxed);
                    while bits != 0 {
                        let node = wi * 64 + bits.trailing_zeros() as usize;
                        bits &= bits - 1;
                        let members = topo.nodes.members(node);
                        let to = match topo.memory {
                            MemoryType::Distributed => members.get(r % members.len().max(1)),
                            _ => members.get(local),
                        };
                        if let Some(&t) = to {
                            let s = &mut sends[topo.group_of(t)];
                            s.extend_from_slice(&(r as u64).to_le_bytes());
                            s.extend_from_slice(bytes);
                        }
                    }
                }
            }
        }
        let got = exchange_records(topo.route.as_ref(), sends, 8 + rb, [0, rb as u64])?;
        let mut rows: Vec<(usize, &[u8])> = Vec::new();
        for bytes in &got {
            for rec in bytes.chunks_exact(8 + rb) {
                let r = read_u64s(&rec[..8]).and_then(|v| v.first().copied()).unwrap_or(u64::MAX);
                rows.push((r as usize, &rec[8..]));
            }
        }
        cache.refresh(&rows)
    }

    /// Run `f` on this rank's rows of this view. Not collective.
    pub fn with_local<T: Element, R>(&self, f: impl FnOnce(LocalView<'_, T>) -> R) -> Result<R, PartitionedError> {
        self.check_type::<T>()?;
        let rows = self.local_rows();
        Ok(f(self.view_of(rows.start, rows.len())))
    }

    /// A view of `n` rows of this view from its row `first`, all stored in
    /// this rank's group and contiguous in one segment (the caller's rule).
    fn view_of<T: Element>(&self, first: usize, n: usize) -> LocalView<'_, T> {
        let es = self.root.dtype.size();
        let stride = self.root.row_bytes / es;
        let cols = self.cols.start / es..self.cols.end / es;
        let data: &[T] = match (n > 0).then(|| self.stored_row(self.rows.start + first)).flatten() {
            // SAFETY: `n` rows from a stored row, inside one segment (the
            // caller's rule), aligned (segments of whole rows from an
            // aligned base); read-only while no collective write runs.
            Some(p) => unsafe { std::slice::from_raw_parts(p as *const T, n * stride) },
            None => &[],
        };
        LocalView { data, rows: n, stride, cols }
    }

    /// Run `f` on this rank's rows of this view, writable: collective, with
    /// a fence before (no rank still reads) and after (every rank sees
    /// the writes). Caches are not told: when any holds a row, the caches
    /// go stale until `writeback_all_cache` or `drop_all_cache`.
    pub fn with_local_mut<T: Element, R>(&self, f: impl FnOnce(LocalViewMut<'_, T>) -> R) -> Result<R, PartitionedError> {
        self.check_type::<T>()?;
        let root = &self.root;
        root.store.fence(root.topo.store.as_ref())?;
        let rows = self.local_rows();
        let es = root.dtype.size();
        let stride = root.row_bytes / es;
        let data: &mut [T] = match (!rows.is_empty()).then(|| self.stored_row(self.rows.start + rows.start)).flatten() {
            // SAFETY: this rank's own rows, written by no other rank and
            // read by none until the fence below; aligned as in `view_of`.
            Some(p) => unsafe { std::slice::from_raw_parts_mut(p as *mut T, rows.len() * stride) },
            None => &mut [],
        };
        let out = f(LocalViewMut { data, rows: rows.len(), stride, cols: self.cols.start / es..self.cols.end / es });
        root.store.fence(root.topo.store.as_ref())?;
        if let Some(c) = &root.cache {
            // Stale everywhere if any node's cache may hold a row, so that
            // every rank refuses (or serves) the next cached gather alike.
            let any = root.topo.world.all_gather_bytes(&[u8::from(c.holds_rows())])?;
            if any.iter().any(|b| b.as_slice() != [0]) {
                c.mark_stale();
            }
        }
        Ok(out)
    }

    /// Run `f` on every row of this view by pointer: continuous memory
    /// only (one address range). Not collective.
    pub fn with_all<T: Element, R>(&self, f: impl FnOnce(LocalView<'_, T>) -> R) -> Result<R, PartitionedError> {
        self.check_type::<T>()?;
        if self.memory() != MemoryType::Continuous {
            return Err(PartitionedError::NotAvailable(format!(
                "with_all reads every row by pointer, which continuous memory offers; this tensor is {}",
                self.memory().name()
            )));
        }
        if self.rows.is_empty() {
            return Ok(f(LocalView { data: &[], rows: 0, stride: 0, cols: 0..0 }));
        }
        if self.root.store.contiguous().is_none() {
            return Err(PartitionedError::NotAvailable(
                "the shared allocation's segments do not lie end to end; read it by chunk (with_chunk)".into(),
            ));
        }
        Ok(f(self.view_of(0, self.rows.len())))
    }

    /// Run `f` on rank `r`'s chunk of this view by pointer: continuous or
    /// chunked memory. Not collective.
    pub fn with_chunk<T: Element, R>(&self, r: usize, f: impl FnOnce(LocalView<'_, T>) -> R) -> Result<R, PartitionedError> {
        self.check_type::<T>()?;
        if !matches!(self.memory(), MemoryType::Continuous | MemoryType::Chunked) {
            return Err(PartitionedError::NotAvailable(format!(
                "with_chunk maps another rank's rows, which continuous and chunked memory offer; this tensor is {}",
                self.memory().name()
            )));
        }
        if r >= self.ranks() {
            return Err(PartitionedError::NotAvailable(format!("there is no rank {r} of {}", self.ranks())));
        }
        let rows = self.partition(r);
        Ok(f(self.view_of(rows.start, rows.len())))
    }

    /// Rows `range` of this view, as a tensor sharing this one's root.
    pub fn rows(&self, range: Range<usize>) -> Result<PartitionedTensor, PartitionedError> {
        if range.start > range.end || range.end > self.shape[0] {
            return Err(PartitionedError::BadShape {
                shape: self.shape.clone(),
                reason: format!("rows {}..{} are not inside it", range.start, range.end),
            });
        }
        let mut shape = self.shape.clone();
        shape[0] = range.len();
        Ok(PartitionedTensor {
            root: self.root.clone(),
            rows: self.rows.start + range.start..self.rows.start + range.end,
            cols: self.cols.clone(),
            shape,
        })
    }

    /// Columns `range` of the second dimension, as a tensor sharing this
    /// one's root (each row's elements `range` × the trailing dimensions).
    pub fn columns(&self, range: Range<usize>) -> Result<PartitionedTensor, PartitionedError> {
        if self.shape.len() < 2 || range.start > range.end || range.end > self.shape[1] {
            return Err(PartitionedError::BadShape {
                shape: self.shape.clone(),
                reason: format!("columns {}..{} of the second dimension are not inside it", range.start, range.end),
            });
        }
        let inner: usize = self.shape[2..].iter().product::<usize>() * self.root.dtype.size();
        let mut shape = self.shape.clone();
        shape[1] = range.len();
        Ok(PartitionedTensor {
            root: self.root.clone(),
            rows: self.rows.clone(),
            cols: self.cols.start + range.start * inner..self.cols.start + range.end * inner,
            shape,
        })
    }

    /// What this rank's cache lookups found (`None` without a cache, or
    /// where every row is node-local).
    pub fn cache_stats(&self) -> Option<CacheStats> {
        self.root.cache.as_ref().map(Cache::stats)
    }

    /// Empty every node's cache (collective).
    pub fn drop_all_cache(&self) -> Result<(), PartitionedError> {
        match &self.root.cache {
            Some(c) => c.clear(self.root.topo.store.as_ref()),
            None => Ok(()),
        }
    }

    /// Make every cache agree with the rows: each rank reads the rows its
    /// share of the node's slots holds again from their owners and writes
    /// them into the slots (collective). Steps and scatters keep the
    /// caches current themselves (they are written back at each write);
    /// this is for rows written behind the caches (`with_local_mut`).
    /// Returns how many slots this rank refreshed.
    pub fn writeback_all_cache(&self) -> Result<usize, PartitionedError> {
        let Some(cache) = &self.root.cache else { return Ok(0) };
        let rows = cache.own_rows();
        let root_view = PartitionedTensor {
            root: self.root.clone(),
            rows: 0..self.root.shape[0],
            cols: 0..self.root.row_bytes,
            shape: self.root.shape.clone(),
        };
        let mut bytes = vec![0u8; rows.len() * self.root.row_bytes];
        // Read around the cache: it may be stale.
        root_view.gather_remote(&rows, &mut bytes, false)?;
        let fetched: Vec<(usize, &[u8])> =
            rows.iter().zip(bytes.chunks_exact(self.root.row_bytes.max(1))).map(|(&r, b)| (r, b)).collect();
        cache.refresh(&fetched)?;
        cache.clear_stale();
        Ok(rows.len())
    }
}
