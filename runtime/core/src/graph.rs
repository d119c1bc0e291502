//! Graphs in compressed sparse rows, by destination.
//!
//! Kernels are destination-major: a destination row gathers the messages of
//! its in-edges and folds them, so the one layout every back end reads is CSR
//! with one row per destination and the edge sources as columns. This keeps
//! the reduction free of atomics and lets the executor split rows across
//! workers.
//!
//! Edge fields arrive in the *user's* edge order, which generally is not the
//! CSR order; `edge_ids` carries the permutation (CSR position to the user's
//! edge index) so that an `Edge` field can be read in place without being
//! reordered first.
//!
//! Invariants held by every `Graph` (the constructors check them, so later
//! code may index without checks):
//! - `offsets.len() == num_dst + 1`, `offsets[0] == 0`, non-decreasing, and
//!   `offsets[num_dst] == cols.len()`;
//! - every column is `< num_src`;
//! - `edge_ids`, when present, is a permutation of `0..num_edges` and is not
//!   the identity (the identity is stored as `None`, so the common sorted case
//!   costs nothing);
//! - `num_src` and `num_dst` are at most 2^32: node ids are `u32` on both
//!   sides, so that the transpose (which swaps the sides) always exists.

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use thiserror::Error;

/// The largest node count on either side: ids are `u32`, so `0..=u32::MAX`.
pub const MAX_NODES: usize = u32::MAX as usize + 1;

/// Why a graph could not be built or read.
#[derive(Debug, Error)]
pub enum GraphError {
    #[error("{side} node count {count} exceeds the maximum of {max} (node ids are u32)", max = MAX_NODES)]
    TooManyNodes { side: &'static str, count: usize },
    #[error("CSR offsets have length {actual}, expected num_dst + 1 = {expected}")]
    OffsetsLength { expected: usize, actual: usize },
    #[error("CSR offsets[0] is {first}, expected 0")]
    OffsetsStart { first: u64 },
    #[error("CSR offsets decrease at index {index}: offsets[{prev_index}] = {prev} > offsets[{index}] = {value}", prev_index = .index - 1)]
    OffsetsDecreasing { index: usize, prev: u64, value: u64 },
    #[error("CSR offsets end at {last} (offsets[{num_dst}]), but cols has {num_cols} entries")]
    OffsetsEnd { last: u64, num_dst: usize, num_cols: usize },
    #[error("CSR cols[{position}] = {src} is out of range for num_src = {num_src}")]
    ColumnOutOfRange { position: usize, src: u32, num_src: usize },
    #[error("edge ids have length {actual}, expected num_edges = {expected}")]
    EdgeIdsLength { expected: usize, actual: usize },
    #[error("edge ids are not a permutation of 0..{num_edges}: edge_ids[{position}] = {id} is {problem}")]
    EdgeIdsNotPermutation { position: usize, id: u64, num_edges: usize, problem: &'static str },
    #[error("edge lists differ in length: src has {src_len} entries, dst has {dst_len}")]
    EdgeListLengths { src_len: usize, dst_len: usize },
    #[error("edge {edge}: source {src} is out of range for num_src = {num_src}")]
    EdgeSourceOutOfRange { edge: usize, src: u32, num_src: usize },
    #[error("edge {edge}: destination {dst} is out of range for num_dst = {num_dst}")]
    EdgeDestinationOutOfRange { edge: usize, dst: u32, num_dst: usize },
    #[error("an edge_index holds two rows of equal length ([2, E]), but this one has {len} entries")]
    EdgeIndexShape { len: usize },
    #[error("edge_index edge {edge}: {row} {id} is not a node id below {num_nodes}")]
    EdgeIndexNode { edge: usize, row: &'static str, id: i64, num_nodes: usize },
    #[error("this needs a square graph (as many sources as destinations), not {num_src} sources and {num_dst} destinations")]
    NotSquare { num_src: usize, num_dst: usize },
    #[error("a graph with heads needs at least one head")]
    NoHeads,
    #[error("stencil shape is empty; it needs at least one dimension")]
    StencilEmptyShape,
    #[error("stencil neighbour offset {index} has {actual} components, expected {expected} (the shape's dimensions)")]
    StencilOffsetDims { index: usize, expected: usize, actual: usize },
    #[error("stencil shape {shape:?} has too many nodes (more than {max})", max = MAX_NODES)]
    StencilTooLarge { shape: Vec<usize> },
    #[error("stencil on shape {shape:?} with {offsets} offsets has too many edges")]
    StencilTooManyEdges { shape: Vec<usize>, offsets: usize },
    #[error(
        "{what} need {bytes} bytes ({gib:.1} GiB), which this process could not allocate",
        gib = *bytes as f64 / (1u64 << 30) as f64
    )]
    OutOfMemory { what: &'static str, bytes: u64 },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Parse { path: String, line: usize, message: String },
    #[error("{path}:{line}: node id {id} is out of range for {num_nodes} nodes")]
    NodeIdOutOfRange { path: String, line: usize, id: u64, num_nodes: usize },
}

/// A directed graph in CSR by destination row; see the module doc for its
/// invariants.
#[derive(Debug, Clone)]
pub struct Graph {
    num_src: usize,
    num_dst: usize,
    offsets: Vec<u64>,
    cols: Vec<u32>,
    edge_ids: Option<Vec<u64>>,
    /// Realizations derived on demand and kept (a backward pass reuses them).
    derived: Derived,
}

/// Graphs derived from this one, built once on first use.
#[derive(Debug, Clone, Default)]
struct Derived {
    transposed: OnceLock<Arc<Graph>>,
    row_reversed: OnceLock<Arc<Graph>>,
    /// Renumberings by degree, RCM and clusters ([`Graph::renumbered`]).
    /// Held as `Any` so that the graph, below every realization, need not
    /// know the renumbered realization's type (`crate::renumber` does,
    /// and is the only writer and reader of these slots).
    renumbered: [OnceLock<Arc<dyn std::any::Any + Send + Sync>>; 3],
}

/// Equality is of the graph itself, not of what has been derived from it.
impl PartialEq for Graph {
    fn eq(&self, o: &Graph) -> bool {
        self.num_src == o.num_src
            && self.num_dst == o.num_dst
            && self.offsets == o.offsets
            && self.cols == o.cols
            && self.edge_ids == o.edge_ids
    }
}
impl Eq for Graph {}

fn check_node_count(side: &'static str, count: usize) -> Result<(), GraphError> {
    if count > MAX_NODES {
        return Err(GraphError::TooManyNodes { side, count });
    }
    Ok(())
}

impl Graph {
    /// Takes CSR arrays as they are (edge order = CSR order), after checking
    /// every invariant, because later loops index them without bounds checks.
    pub fn from_csr(num_src: usize, num_dst: usize, offsets: Vec<u64>, cols: Vec<u32>) -> Result<Graph, GraphError> {
        check_node_count("source", num_src)?;
        check_node_count("destination", num_dst)?;
        let expected = num_dst + 1;
        if offsets.len() != expected {
            return Err(GraphError::OffsetsLength { expected, actual: offsets.len() });
        }
        if offsets[0] != 0 {
            return Err(GraphError::OffsetsStart { first: offsets[0] });
        }
        for index in 1..offsets.len() {
            if offsets[index] < offsets[index - 1] {
                return Err(GraphError::OffsetsDecreasing { index, prev: offsets[index - 1], value: offsets[index] });
            }
        }
        let last = offsets[num_dst];
        if last != cols.len() as u64 {
            return Err(GraphError::OffsetsEnd { last, num_dst, num_cols: cols.len() });
        }
        if let Some(position) = cols.iter().position(|&c| c as usize >= num_src) {
            return Err(GraphError::ColumnOutOfRange { position, src: cols[position], num_src });
        }
        Ok(Graph { num_src, num_dst, offsets, cols, edge_ids: None, derived: Derived::default() })
    }

    /// CSR arrays that hold every invariant by construction (a
    /// renumbering of a valid graph): `edge_ids` a permutation, dropped
    /// when it is the identity. Checked in debug builds only, since the
    /// check costs as much as the renumbering.
    pub(crate) fn from_trusted(num_src: usize, num_dst: usize, offsets: Vec<u64>, cols: Vec<u32>, ids: Vec<u64>) -> Graph {
        debug_assert!(offsets.len() == num_dst + 1 && offsets.last() == Some(&(cols.len() as u64)));
        debug_assert!(cols.iter().all(|&c| (c as usize) < num_src) && ids.len() == cols.len());
        let identity = ids.iter().enumerate().all(|(p, &id)| id == p as u64);
        let edge_ids = if identity { None } else { Some(ids) };
        Graph { num_src, num_dst, offsets, cols, edge_ids, derived: Derived::default() }
    }

    /// Where [`Graph::renumbered`] keeps the renumbering by `method`.
    pub(crate) fn renumbered_slot(
        &self,
        method: crate::schedule::Renumber,
    ) -> Option<&OnceLock<Arc<dyn std::any::Any + Send + Sync>>> {
        use crate::schedule::Renumber;
        match method {
            Renumber::None => None,
            Renumber::Degree => Some(&self.derived.renumbered[0]),
            Renumber::Rcm => Some(&self.derived.renumbered[1]),
            Renumber::Cluster => Some(&self.derived.renumbered[2]),
        }
    }

    /// One node per entry of `has_loop`, the row of each node with `true`
    /// holding the single edge from it to itself and the others empty: a
    /// node-wise computation run as a message-passing kernel (the
    /// backward's per-source stage of a max or min, over the sources with
    /// out-edges).
    pub fn self_loops(has_loop: &[bool]) -> Result<Graph, GraphError> {
        let n = has_loop.len();
        check_node_count("source", n)?;
        let mut offsets = Vec::with_capacity(n + 1);
        let mut cols = Vec::with_capacity(n);
        offsets.push(0u64);
        for (j, &l) in has_loop.iter().enumerate() {
            if l {
                cols.push(j as u32);
            }
            offsets.push(cols.len() as u64);
        }
        Ok(Graph { num_src: n, num_dst: n, offsets, cols, edge_ids: None, derived: Derived::default() })
    }

    /// Takes CSR arrays together with the CSR-position-to-user-edge-index
    /// map (`None`: CSR order is the user's order), checking every
    /// invariant; an identity map is stored as `None`. This is how a graph
    /// read back from storage keeps its original edge order.
    pub fn from_csr_with_edge_ids(
        num_src: usize,
        num_dst: usize,
        offsets: Vec<u64>,
        cols: Vec<u32>,
        edge_ids: Option<Vec<u64>>,
    ) -> Result<Graph, GraphError> {
        let mut g = Graph::from_csr(num_src, num_dst, offsets, cols)?;
        let Some(ids) = edge_ids else { return Ok(g) };
        let num_edges = g.num_edges();
        if ids.len() != num_edges {
            return Err(GraphError::EdgeIdsLength { expected: num_edges, actual: ids.len() });
        }
        let mut seen = vec![false; num_edges];
        for (position, &id) in ids.iter().enumerate() {
            let problem = if id >= num_edges as u64 {
                "out of range"
            } else if seen[id as usize] {
                "a duplicate"
            } else {
                seen[id as usize] = true;
                continue;
            };
            return Err(GraphError::EdgeIdsNotPermutation { position, id, num_edges, problem });
        }
        let identity = ids.iter().enumerate().all(|(p, &id)| id == p as u64);
        g.edge_ids = if identity { None } else { Some(ids) };
        Ok(g)
    }

    /// Builds CSR from edges `src[e] -> dst[e]` in the user's order. The sort
    /// by destination is a stable counting sort, so parallel edges and the
    /// edges of one row keep their input order: reducers that are not
    /// commutative (a user monoid) see messages in the order the user gave.
    pub fn from_edges(num_src: usize, num_dst: usize, src: &[u32], dst: &[u32]) -> Result<Graph, GraphError> {
        Graph::check_edges(num_src, num_dst, src, dst)?;
        // A node count comes from user input (one edge `0 4294967295`): the
        // arrays sized by it are asked for fallibly, so that a graph too
        // large for this machine is an error saying how large, not an abort.
        let mut offsets = zeroed::<u64>(num_dst + 1, "the CSR row offsets (one per destination node)")?;
        for &d in dst {
            offsets[d as usize + 1] += 1;
        }
        for i in 0..num_dst {
            offsets[i + 1] += offsets[i];
        }
        let edges = src.iter().zip(dst).enumerate().map(|(e, (&s, &d))| (s, d, e as u64));
        let mut cursor = zeroed::<u64>(num_dst, "the CSR row cursors")?;
        cursor.copy_from_slice(&offsets[..num_dst]);
        let cols = zeroed::<u32>(src.len(), "the CSR columns")?;
        let ids = zeroed::<u64>(src.len(), "the CSR edge ids")?;
        let (cols, edge_ids) = scatter_by_row(cursor, edges, cols, ids);
        Ok(Graph { num_src, num_dst, offsets, cols, edge_ids, derived: Derived::default() })
    }

    /// What [`Graph::from_edges`] refuses: node counts over the limit,
    /// lists of different lengths, ids out of range (naming the first edge).
    pub fn check_edges(num_src: usize, num_dst: usize, src: &[u32], dst: &[u32]) -> Result<(), GraphError> {
        check_node_count("source", num_src)?;
        check_node_count("destination", num_dst)?;
        if src.len() != dst.len() {
            return Err(GraphError::EdgeListLengths { src_len: src.len(), dst_len: dst.len() });
        }
        for (edge, (&s, &d)) in src.iter().zip(dst).enumerate() {
            if s as usize >= num_src {
                return Err(GraphError::EdgeSourceOutOfRange { edge, src: s, num_src });
            }
            if d as usize >= num_dst {
                return Err(GraphError::EdgeDestinationOutOfRange { edge, dst: d, num_dst });
            }
        }
        Ok(())
    }

    /// Edge `a -> b` of a petgraph graph becomes an edge from source `a` to
    /// destination `b`; the user's edge order is petgraph's edge index order,
    /// so petgraph edge weights can be laid out as an `Edge` field directly.
    pub fn from_petgraph<N, E, Ix: petgraph::graph::IndexType>(
        g: &petgraph::Graph<N, E, petgraph::Directed, Ix>,
    ) -> Result<Graph, GraphError> {
        let n = g.node_count();
        check_node_count("source", n)?;
        let (src, dst): (Vec<u32>, Vec<u32>) =
            g.raw_edges().iter().map(|e| (e.source().index() as u32, e.target().index() as u32)).unzip();
        Graph::from_edges(n, n, &src, &dst)
    }

    /// A regular grid in row-major order: node `p` receives one edge from
    /// `p + d` for every offset `d` in `neighbors`, in the order the offsets
    /// are given. Without `periodic`, neighbours outside the grid are skipped
    /// (border rows are shorter); with it, coordinates wrap, so on a small
    /// dimension two offsets may name the same neighbour (a multi-edge) or the
    /// node itself (a self loop), exactly as the offsets say.
    pub fn stencil(shape: &[usize], neighbors: &[Vec<i64>], periodic: bool) -> Result<Graph, GraphError> {
        let plan = StencilPlan::new(shape, neighbors, periodic)?;
        let n = plan.nodes();
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0u64);
        let mut cols = Vec::with_capacity(plan.max_edges());
        let Ok(()) = plan.rows(|row| -> Result<(), std::convert::Infallible> {
            cols.extend_from_slice(row);
            offsets.push(cols.len() as u64);
            Ok(())
        });
        Ok(Graph { num_src: n, num_dst: n, offsets, cols, edge_ids: None, derived: Derived::default() })
    }

    /// The 4-neighbour grid (up, down, left, right), the common case of
    /// diffusion and image kernels.
    pub fn stencil_2d_4(rows: usize, cols: usize) -> Result<Graph, GraphError> {
        Graph::stencil(&[rows, cols], &[vec![-1, 0], vec![1, 0], vec![0, -1], vec![0, 1]], false)
    }

    pub fn num_src(&self) -> usize {
        self.num_src
    }

    pub fn num_dst(&self) -> usize {
        self.num_dst
    }

    pub fn num_edges(&self) -> usize {
        self.cols.len()
    }

    pub fn offsets(&self) -> &[u64] {
        &self.offsets
    }

    pub fn cols(&self) -> &[u32] {
        &self.cols
    }

    /// CSR position to the user's edge index; `None` when they coincide.
    pub fn edge_ids(&self) -> Option<&[u64]> {
        self.edge_ids.as_deref()
    }

    /// The CSR's row offsets, columns and edge ids, moved out (no copy),
    /// for a caller that builds another graph from them.
    pub fn into_csr(self) -> (Vec<u64>, Vec<u32>, Option<Vec<u64>>) {
        (self.offsets, self.cols, self.edge_ids)
    }

    /// The user's edge index of CSR position `pos`.
    ///
    /// # Panics
    /// If `pos >= num_edges()`, like slice indexing.
    pub fn edge_id(&self, pos: usize) -> u64 {
        match &self.edge_ids {
            Some(ids) => ids[pos],
            None => {
                assert!(pos < self.cols.len(), "CSR position {pos} out of range");
                pos as u64
            }
        }
    }

    /// The CSR positions of destination `i`'s in-edges.
    ///
    /// # Panics
    /// If `i >= num_dst()`, like slice indexing.
    pub fn row(&self, i: usize) -> Range<usize> {
        self.offsets[i] as usize..self.offsets[i + 1] as usize
    }

    /// The edges as `(src, dst)` arrays in the user's original order: the
    /// form the reference interpreter walks, independent of CSR.
    pub fn coo_in_user_order(&self) -> (Vec<u32>, Vec<u32>) {
        let e = self.num_edges();
        let mut src = vec![0u32; e];
        let mut dst = vec![0u32; e];
        for i in 0..self.num_dst {
            for pos in self.row(i) {
                let id = self.edge_id(pos) as usize;
                src[id] = self.cols[pos];
                dst[id] = i as u32;
            }
        }
        (src, dst)
    }

    /// The reversed graph (every edge `j -> i` becomes `i -> j`) in CSR by
    /// its own destinations, with each edge keeping its original user index:
    /// the source-field gradient of a kernel is a message-passing kernel over
    /// this graph, and it must read the same `Edge` fields.
    /// The transpose, built on first use and kept with this graph.
    pub fn transposed(&self) -> Arc<Graph> {
        self.derived.transposed.get_or_init(|| Arc::new(self.transpose())).clone()
    }

    /// [`Graph::transposed`], or an error when its arrays (sized by the
    /// source count, which user input sets: a `.mtx` declaring 2^32
    /// columns) cannot be allocated.
    pub fn try_transposed(&self) -> Result<Arc<Graph>, GraphError> {
        if let Some(t) = self.derived.transposed.get() {
            return Ok(t.clone());
        }
        let t = Arc::new(self.try_transpose()?);
        Ok(self.derived.transposed.get_or_init(|| t).clone())
    }

    /// The same rows with each row's edges in reverse order (edge ids kept):
    /// a right-to-left fold of a row is a left-to-right fold of this one.
    /// Built on first use and kept.
    pub fn row_reversed(&self) -> Arc<Graph> {
        self.derived
            .row_reversed
            .get_or_init(|| {
                let mut cols = self.cols.clone();
                let mut ids: Vec<u64> = (0..self.num_edges()).map(|p| self.edge_id(p)).collect();
                for i in 0..self.num_dst {
                    let r = self.row(i);
                    cols[r.clone()].reverse();
                    ids[r].reverse();
                }
                let identity = ids.iter().enumerate().all(|(p, &e)| p as u64 == e);
                Arc::new(Graph {
                    num_src: self.num_src,
                    num_dst: self.num_dst,
                    offsets: self.offsets.clone(),
                    cols,
                    edge_ids: if identity { None } else { Some(ids) },
                    derived: Derived::default(),
                })
            })
            .clone()
    }

    /// The graph of `heads` independent copies of this one, interleaved:
    /// node `(v, h)` is `v * heads + h`, and each edge `e: j -> i` becomes
    /// the `heads` edges `j * heads + h -> i * heads + h`, of user index
    /// `e * heads + h`. A field laid out `[N, H, ...]` (PyG's multi-head
    /// layout) is this graph's `[N * H, ...]` field without a copy, and an
    /// edge field `[E, H, ...]` its `[E * H, ...]` one, so any kernel run on
    /// it runs once per head in one call: a softmax normalises over each
    /// head's own in-edges of a row, a sum sums per head, and a parameter
    /// (shared by the heads) gets the sum of every head's gradient.
    ///
    /// Rows `(i, 0..H)` are consecutive, so one destination's heads are
    /// computed together and their sources are the same nodes' slices. The
    /// CSR arrays are `heads` times this graph's (the cost of the head
    /// axis); `heads == 1` is an equal graph.
    pub fn with_heads(&self, heads: usize) -> Result<Graph, GraphError> {
        if heads == 0 {
            return Err(GraphError::NoHeads);
        }
        let too_many = |side, n: usize| GraphError::TooManyNodes { side, count: n.saturating_mul(heads) };
        let num_src = self.num_src.checked_mul(heads).ok_or_else(|| too_many("source", self.num_src))?;
        let num_dst = self.num_dst.checked_mul(heads).ok_or_else(|| too_many("destination", self.num_dst))?;
        check_node_count("source", num_src)?;
        check_node_count("destination", num_dst)?;
        let e = self.num_edges().checked_mul(heads).ok_or(GraphError::OutOfMemory {
            what: "the CSR columns and edge ids of every head",
            bytes: (self.num_edges() as u64).saturating_mul(heads as u64).saturating_mul(12),
        })?;
        let mut offsets = zeroed::<u64>(num_dst + 1, "the CSR row offsets of every head")?;
        let mut cols = zeroed::<u32>(e, "the CSR columns of every head")?;
        let mut ids = zeroed::<u64>(e, "the edge ids of every head")?;
        let h64 = heads as u64;
        let mut pos = 0usize;
        for i in 0..self.num_dst {
            let row = self.row(i);
            for h in 0..heads {
                for p in row.clone() {
                    // num_src * heads <= 2^32 was checked: the id fits u32.
                    cols[pos] = (self.cols[p] as u64 * h64 + h as u64) as u32;
                    ids[pos] = self.edge_id(p) * h64 + h as u64;
                    pos += 1;
                }
                offsets[i * heads + h + 1] = pos as u64;
            }
        }
        Ok(Graph::from_trusted(num_src, num_dst, offsets, cols, ids))
    }

    /// The reversed graph (see [`Graph::transposed`]); aborts when its
    /// memory cannot be had, as a `Vec` does ([`Graph::try_transpose`] says
    /// so instead).
    pub fn transpose(&self) -> Graph {
        self.try_transpose().unwrap_or_else(|_| std::alloc::handle_alloc_error(std::alloc::Layout::new::<u64>()))
    }

    /// The reversed graph, or an error naming the array that could not be
    /// allocated.
    pub fn try_transpose(&self) -> Result<Graph, GraphError> {
        let mut offsets = zeroed::<u64>(self.num_src + 1, "the transposed CSR row offsets (one per source node)")?;
        for &c in &self.cols {
            offsets[c as usize + 1] += 1;
        }
        for j in 0..self.num_src {
            offsets[j + 1] += offsets[j];
        }
        let edges = (0..self.num_dst).flat_map(|i| self.row(i).map(move |pos| (i as u32, self.cols[pos], self.edge_id(pos))));
        let mut cursor = zeroed::<u64>(self.num_src, "the transposed CSR row cursors")?;
        cursor.copy_from_slice(&offsets[..self.num_src]);
        let cols = zeroed::<u32>(self.num_edges(), "the transposed CSR columns")?;
        let ids = zeroed::<u64>(self.num_edges(), "the transposed CSR edge ids")?;
        let (cols, edge_ids) = scatter_by_row(cursor, edges, cols, ids);
        Ok(Graph { num_src: self.num_dst, num_dst: self.num_src, offsets, cols, edge_ids, derived: Derived::default() })
    }
}

/// `n` zeros, or an error naming `what` when the memory cannot be had.
fn zeroed<T: Clone + Default>(n: usize, what: &'static str) -> Result<Vec<T>, GraphError> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| GraphError::OutOfMemory { what, bytes: (n as u64).saturating_mul(std::mem::size_of::<T>() as u64) })?;
    v.resize(n, T::default());
    Ok(v)
}

/// Places `(src, dst, id)` edges into their destination rows in arrival order
/// (a stable counting sort: `cursor` starts at each row's first position,
/// `cols` and `ids` hold one slot per edge), and drops the id array when it
/// turns out to be the identity.
fn scatter_by_row(
    mut cursor: Vec<u64>,
    edges: impl Iterator<Item = (u32, u32, u64)>,
    mut cols: Vec<u32>,
    mut ids: Vec<u64>,
) -> (Vec<u32>, Option<Vec<u64>>) {
    for (s, d, id) in edges {
        let pos = cursor[d as usize] as usize;
        cursor[d as usize] += 1;
        cols[pos] = s;
        ids[pos] = id;
    }
    let identity = ids.iter().enumerate().all(|(p, &id)| id == p as u64);
    (cols, if identity { None } else { Some(ids) })
}

/// A stencil of [`Graph::stencil`], checked against its limits: its node
/// count, its most edges (nodes × offsets), and its rows in order without
/// holding the graph (what a builder that streams to disk reads).
#[derive(Clone, Debug)]
pub struct StencilPlan<'a> {
    shape: &'a [usize],
    neighbors: &'a [Vec<i64>],
    periodic: bool,
    nodes: usize,
    max_edges: usize,
}

impl<'a> StencilPlan<'a> {
    pub fn new(shape: &'a [usize], neighbors: &'a [Vec<i64>], periodic: bool) -> Result<StencilPlan<'a>, GraphError> {
        if shape.is_empty() {
            return Err(GraphError::StencilEmptyShape);
        }
        for (index, d) in neighbors.iter().enumerate() {
            if d.len() != shape.len() {
                return Err(GraphError::StencilOffsetDims { index, expected: shape.len(), actual: d.len() });
            }
        }
        let nodes = shape
            .iter()
            .try_fold(1usize, |acc, &s| acc.checked_mul(s))
            .filter(|&n| n <= MAX_NODES)
            .ok_or_else(|| GraphError::StencilTooLarge { shape: shape.to_vec() })?;
        let max_edges = nodes
            .checked_mul(neighbors.len())
            .ok_or_else(|| GraphError::StencilTooManyEdges { shape: shape.to_vec(), offsets: neighbors.len() })?;
        Ok(StencilPlan { shape, neighbors, periodic, nodes, max_edges })
    }

    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// Nodes × offsets: the edge count without borders.
    pub fn max_edges(&self) -> usize {
        self.max_edges
    }

    /// Calls `row` on each row in order, as its columns (the neighbours in
    /// `neighbors` order); the first error stops it.
    pub fn rows<E>(&self, mut row: impl FnMut(&[u32]) -> Result<(), E>) -> Result<(), E> {
        let shape = self.shape;
        let mut cols = Vec::with_capacity(self.neighbors.len());
        let mut coord = vec![0usize; shape.len()];
        for _ in 0..self.nodes {
            cols.clear();
            'offset: for d in self.neighbors {
                let mut id: usize = 0;
                for ((&c, &s), &dk) in coord.iter().zip(shape).zip(d) {
                    let target = c as i128 + dk as i128;
                    let wrapped = if self.periodic {
                        target.rem_euclid(s as i128)
                    } else if target < 0 || target >= s as i128 {
                        continue 'offset;
                    } else {
                        target
                    };
                    id = id * s + wrapped as usize;
                }
                cols.push(id as u32);
            }
            row(&cols)?;
            // Advance the row-major coordinate, last dimension fastest.
            for k in (0..shape.len()).rev() {
                coord[k] += 1;
                if coord[k] < shape[k] {
                    break;
                }
                coord[k] = 0;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(r: Result<Graph, GraphError>) -> String {
        match r {
            Ok(g) => panic!("expected an error, got {g:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn csr_validation_messages() {
        assert_eq!(err(Graph::from_csr(2, 2, vec![0, 1], vec![0])), "CSR offsets have length 2, expected num_dst + 1 = 3");
        assert_eq!(err(Graph::from_csr(2, 1, vec![1, 1], vec![0])), "CSR offsets[0] is 1, expected 0");
        assert_eq!(
            err(Graph::from_csr(2, 3, vec![0, 2, 1, 2], vec![0, 1])),
            "CSR offsets decrease at index 2: offsets[1] = 2 > offsets[2] = 1"
        );
        assert_eq!(
            err(Graph::from_csr(2, 2, vec![0, 1, 3], vec![0, 1])),
            "CSR offsets end at 3 (offsets[2]), but cols has 2 entries"
        );
        assert_eq!(err(Graph::from_csr(2, 2, vec![0, 1, 2], vec![0, 2])), "CSR cols[1] = 2 is out of range for num_src = 2");
        assert_eq!(
            err(Graph::from_csr(MAX_NODES + 1, 0, vec![0], vec![])),
            "source node count 4294967297 exceeds the maximum of 4294967296 (node ids are u32)"
        );
        assert_eq!(err(Graph::from_csr(1, 0, vec![], vec![])), "CSR offsets have length 0, expected num_dst + 1 = 1");
    }

    #[test]
    fn csr_with_edge_ids() {
        let g = Graph::from_csr_with_edge_ids(3, 2, vec![0, 2, 3], vec![2, 0, 1], Some(vec![2, 0, 1])).expect("valid");
        assert_eq!(g.edge_ids(), Some(&[2u64, 0, 1][..]));
        assert_eq!(g.coo_in_user_order(), (vec![0, 1, 2], vec![0, 1, 0]));
        let id = Graph::from_csr_with_edge_ids(3, 2, vec![0, 2, 3], vec![2, 0, 1], Some(vec![0, 1, 2])).expect("valid");
        assert_eq!(id.edge_ids(), None);
        let csr = || (vec![0u64, 2, 3], vec![2u32, 0, 1]);
        let (o, c) = csr();
        assert_eq!(
            err(Graph::from_csr_with_edge_ids(3, 2, o, c, Some(vec![0, 1]))),
            "edge ids have length 2, expected num_edges = 3"
        );
        let (o, c) = csr();
        assert_eq!(
            err(Graph::from_csr_with_edge_ids(3, 2, o, c, Some(vec![0, 1, 1]))),
            "edge ids are not a permutation of 0..3: edge_ids[2] = 1 is a duplicate"
        );
        let (o, c) = csr();
        assert_eq!(
            err(Graph::from_csr_with_edge_ids(3, 2, o, c, Some(vec![0, 7, 1]))),
            "edge ids are not a permutation of 0..3: edge_ids[1] = 7 is out of range"
        );
    }

    #[test]
    fn csr_accepts_valid_input() {
        let g = Graph::from_csr(3, 2, vec![0, 2, 3], vec![2, 0, 1]).expect("valid");
        assert_eq!((g.num_src(), g.num_dst(), g.num_edges()), (3, 2, 3));
        assert_eq!(g.row(0), 0..2);
        assert_eq!(g.row(1), 2..3);
        assert_eq!(g.edge_ids(), None);
        assert_eq!(g.coo_in_user_order(), (vec![2, 0, 1], vec![0, 0, 1]));
    }

    #[test]
    fn coo_to_csr_small() {
        // Edges (user order): 0:1->0, 1:2->3, 2:0->0, 3:3->1, 4:1->3, 5:2->0.
        // Rows by destination, stable:
        //   row 0: edges 0 (src 1), 2 (src 0), 5 (src 2)
        //   row 1: edge 3 (src 3)
        //   row 2: empty
        //   row 3: edges 1 (src 2), 4 (src 1)
        let src = [1, 2, 0, 3, 1, 2];
        let dst = [0, 3, 0, 1, 3, 0];
        let g = Graph::from_edges(4, 4, &src, &dst).expect("valid");
        assert_eq!(g.offsets(), &[0, 3, 4, 4, 6]);
        assert_eq!(g.cols(), &[1, 0, 2, 3, 2, 1]);
        assert_eq!(g.edge_ids(), Some(&[0u64, 2, 5, 3, 1, 4][..]));
        assert_eq!(g.row(2), 4..4);
        assert_eq!(g.coo_in_user_order(), (src.to_vec(), dst.to_vec()));
    }

    #[test]
    fn sorted_input_has_identity_ids() {
        let g = Graph::from_edges(3, 3, &[2, 1, 0], &[0, 1, 1]).expect("valid");
        assert_eq!(g.edge_ids(), None);
        assert_eq!(g.offsets(), &[0, 1, 3, 3]);
        assert_eq!(g.edge_id(2), 2);
    }

    #[test]
    fn multi_edges_and_self_loops() {
        // 0->0 twice (self loop, multi-edge), 1->0, 1->1.
        let g = Graph::from_edges(2, 2, &[0, 1, 0, 1], &[0, 0, 0, 1]).expect("valid");
        assert_eq!(g.offsets(), &[0, 3, 4]);
        assert_eq!(g.cols(), &[0, 1, 0, 1]);
        assert_eq!(g.edge_ids(), None);
        let g = Graph::from_edges(2, 2, &[1, 0, 0], &[1, 0, 0]).expect("valid");
        assert_eq!(g.offsets(), &[0, 2, 3]);
        assert_eq!(g.cols(), &[0, 0, 1]);
        assert_eq!(g.edge_ids(), Some(&[1u64, 2, 0][..]));
    }

    #[test]
    fn bipartite_and_empty() {
        // 5 sources, 2 destinations.
        let g = Graph::from_edges(5, 2, &[4, 0, 3], &[1, 1, 0]).expect("valid");
        assert_eq!((g.num_src(), g.num_dst()), (5, 2));
        assert_eq!(g.offsets(), &[0, 1, 3]);
        assert_eq!(g.cols(), &[3, 4, 0]);
        let t = g.transpose();
        assert_eq!((t.num_src(), t.num_dst()), (2, 5));
        assert_eq!(t.offsets(), &[0, 1, 1, 1, 2, 3]);
        assert_eq!(t.cols(), &[1, 0, 1]);
        assert_eq!(t.edge_ids(), Some(&[1u64, 2, 0][..]));

        let e = Graph::from_edges(0, 0, &[], &[]).expect("valid");
        assert_eq!(e.offsets(), &[0]);
        assert_eq!(e.num_edges(), 0);
        assert_eq!(e.transpose(), e);
    }

    #[test]
    fn edge_validation_messages() {
        assert_eq!(err(Graph::from_edges(3, 3, &[0, 1], &[0])), "edge lists differ in length: src has 2 entries, dst has 1");
        assert_eq!(err(Graph::from_edges(3, 3, &[0, 3], &[0, 0])), "edge 1: source 3 is out of range for num_src = 3");
        assert_eq!(err(Graph::from_edges(3, 2, &[0, 1, 2], &[0, 1, 2])), "edge 2: destination 2 is out of range for num_dst = 2");
    }

    #[test]
    fn petgraph_edges_in_index_order() {
        let mut pg = petgraph::graph::DiGraph::<(), f32>::new();
        let a = pg.add_node(());
        let b = pg.add_node(());
        let c = pg.add_node(());
        pg.add_edge(a, b, 1.0);
        pg.add_edge(c, a, 2.0);
        pg.add_edge(a, a, 3.0);
        let g = Graph::from_petgraph(&pg).expect("valid");
        assert_eq!(g.num_src(), 3);
        assert_eq!(g.offsets(), &[0, 2, 3, 3]);
        assert_eq!(g.cols(), &[2, 0, 0]);
        assert_eq!(g.edge_ids(), Some(&[1u64, 2, 0][..]));
        assert_eq!(g.coo_in_user_order(), (vec![0, 2, 0], vec![1, 0, 0]));
    }

    fn degrees(g: &Graph) -> Vec<usize> {
        (0..g.num_dst()).map(|i| g.row(i).len()).collect()
    }

    #[test]
    fn stencil_3x3() {
        let g = Graph::stencil_2d_4(3, 3).expect("valid");
        // Corners 2, edge midpoints 3, centre 4.
        assert_eq!(degrees(&g), vec![2, 3, 2, 3, 4, 3, 2, 3, 2]);
        assert_eq!(g.num_edges(), 24);
        // Centre node 4 = (1,1): up (0,1)=1, down (2,1)=7, left (1,0)=3, right (1,2)=5.
        assert_eq!(&g.cols()[g.row(4)], &[1, 7, 3, 5]);
        // Node 0 = (0,0): down (1,0)=3, right (0,1)=1.
        assert_eq!(&g.cols()[g.row(0)], &[3, 1]);

        let offs = [vec![-1, 0], vec![1, 0], vec![0, -1], vec![0, 1]];
        let p = Graph::stencil(&[3, 3], &offs, true).expect("valid");
        assert_eq!(degrees(&p), vec![4; 9]);
        // Node 0 = (0,0) wraps: up (2,0)=6, down (1,0)=3, left (0,2)=2, right (0,1)=1.
        assert_eq!(&p.cols()[p.row(0)], &[6, 3, 2, 1]);
        // Every node has in-degree 4 and out-degree 4 under wrapping.
        assert_eq!(degrees(&p.transpose()), vec![4; 9]);
    }

    #[test]
    fn stencil_1d_and_3d() {
        // 1-D periodic ring of 2: offsets -1 and +1 both name the other node.
        let g = Graph::stencil(&[2], &[vec![-1], vec![1]], true).expect("valid");
        assert_eq!(g.cols(), &[1, 1, 0, 0]);
        // 2x2x2 non-periodic 6-neighbour: every node is a corner with 3 neighbours.
        let six = [vec![-1, 0, 0], vec![1, 0, 0], vec![0, -1, 0], vec![0, 1, 0], vec![0, 0, -1], vec![0, 0, 1]];
        let g = Graph::stencil(&[2, 2, 2], &six, false).expect("valid");
        assert_eq!(degrees(&g), vec![3; 8]);
        // Node 7 = (1,1,1): (0,1,1)=3, (1,0,1)=5, (1,1,0)=6.
        assert_eq!(&g.cols()[g.row(7)], &[3, 5, 6]);
        // Huge offsets wrap without overflow.
        let g = Graph::stencil(&[3], &[vec![i64::MAX]], true).expect("valid");
        // i64::MAX mod 3 = 1.
        assert_eq!(g.cols(), &[1, 2, 0]);
    }

    #[test]
    fn stencil_errors() {
        assert_eq!(err(Graph::stencil(&[], &[], false)), "stencil shape is empty; it needs at least one dimension");
        assert_eq!(
            err(Graph::stencil(&[3, 3], &[vec![1, 0], vec![1]], false)),
            "stencil neighbour offset 1 has 1 components, expected 2 (the shape's dimensions)"
        );
        assert_eq!(
            err(Graph::stencil(&[1 << 20, 1 << 20], &[], false)),
            "stencil shape [1048576, 1048576] has too many nodes (more than 4294967296)"
        );
        assert!(matches!(Graph::stencil(&[usize::MAX, 2], &[], false), Err(GraphError::StencilTooLarge { .. })));
    }

    fn edge_set(g: &Graph) -> Vec<(u32, u32, u64)> {
        let mut v: Vec<_> = (0..g.num_dst()).flat_map(|i| g.row(i).map(move |p| (g.cols()[p], i as u32, g.edge_id(p)))).collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn transpose_twice_is_original() {
        let src = [1, 2, 0, 3, 1, 2, 2];
        let dst = [0, 3, 0, 1, 3, 0, 0];
        let g = Graph::from_edges(4, 4, &src, &dst).expect("valid");
        let t = g.transpose();
        // Reversed edges with the same ids.
        let mut reversed: Vec<_> = edge_set(&g).into_iter().map(|(s, d, id)| (d, s, id)).collect();
        reversed.sort_unstable();
        assert_eq!(edge_set(&t), reversed);
        let tt = t.transpose();
        assert_eq!(edge_set(&tt), edge_set(&g));
        assert_eq!(tt.coo_in_user_order(), (src.to_vec(), dst.to_vec()));
        // Out-degrees of g: node 0:1, 1:2, 2:3, 3:1.
        assert_eq!(t.offsets(), &[0, 1, 3, 6, 7]);
    }

    proptest::proptest! {
        #[test]
        fn coo_round_trip(
            n in 1usize..20,
            edges in proptest::collection::vec((0u32..20, 0u32..20), 0..60),
        ) {
            let src: Vec<u32> = edges.iter().map(|e| e.0 % n as u32).collect();
            let dst: Vec<u32> = edges.iter().map(|e| e.1 % n as u32).collect();
            let g = Graph::from_edges(n, n, &src, &dst).expect("valid");
            proptest::prop_assert_eq!(g.coo_in_user_order(), (src.clone(), dst.clone()));
            proptest::prop_assert_eq!(g.transpose().coo_in_user_order(), (dst, src));
            proptest::prop_assert_eq!(edge_set(&g.transpose().transpose()), edge_set(&g));
        }
    }
}
