//! Locality by renumbering: a graph's nodes given new ids so that the
//! sources a row reads, and the rows that run together, sit near each other
//! in memory.
//!
//! A destination-major kernel gathers each row's source fields by column
//! index. On a graph whose heavy sources are scattered over the ids (a
//! social network, the benchmark's power-law graph), most of those gathers
//! miss the cache; after renumbering by degree the sources most rows read
//! fill a few megabytes at the front of the field. On a mesh whose natural
//! order is already local, renumbering buys nothing, and the benchmark
//! shows that too.
//!
//! The renumbering is invisible to the caller (its layer,
//! [`crate::layer`], does the permutations; see `docs/renumbering.md`):
//!
//! - An [`Order`] maps old ids to new (`new = perm[old]`). A square graph
//!   has one order for both sides; a graph with `num_src != num_dst` is
//!   renumbered by rows only (its sources keep their ids), and only by
//!   [`Renumber::Degree`] (in-degree): RCM and clusters need one node set.
//! - [`Renumbered`] holds the graph in the new numbering: new row
//!   `perm[i]` holds old row `i`'s edges *in their old order*, columns
//!   renamed, and edge ids naming the caller's edges, so edge fields are
//!   read in the caller's order and each row's reduction meets its
//!   messages in the same order: the outputs are bit-identical.
//! - Its transpose is the renumbered *old* transpose (not the transpose of
//!   the renumbered graph, whose rows would list their edges in the new
//!   order), so a backward's source gradients are bit-identical too.
//! - A graph keeps its renumberings, one per method, built on first use
//!   ([`Graph::renumbered`]): a second call pays only for permuting its
//!   fields.
//! - A `.gfg` can be written in an order (`tiga_storage::GfgWriter::renumbered`,
//!   format version 3): its CSRs are the renumbered ones and it stores the
//!   order, read back as a [`Renumbered`] without in-memory rows
//!   (`tiga_storage::GfgFile::node_order`); a [`RenumberedGraph`](crate::RenumberedGraph) over it reads
//!   its pages, and its base reads them in the caller's order.
//!
//! The orders:
//! - `degree`: in- plus out-degree, highest first, ties in old order
//!   (a stable sort); on a non-square graph, in-degree of the rows.
//! - `rcm`: reverse Cuthill–McKee over the edges taken both ways: each
//!   connected component from its lowest-degree node (ties: lowest id),
//!   breadth first, a node's unvisited neighbours by degree then id; the
//!   whole order reversed.
//! - `cluster`: label propagation (Raghavan, Albert and Kumara, 2007) over
//!   the edges taken both ways, [`LABEL_ROUNDS`] sweeps in id order, each
//!   node taking the label most of its neighbours hold (ties: the smallest
//!   label; a node without neighbours keeps its own); clusters ordered by
//!   their smallest member, each cluster's nodes in old order. It needs no
//!   METIS, and it is deterministic (sequential sweeps), so a saved order
//!   is the same on every machine.

use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;

use crate::exec::Side;
use crate::fields::Inputs;
use crate::schedule::Renumber;
use crate::tensor::{Data, DataMut, Tensor, TensorError, TensorView};
use crate::{graph::Graph, graph::GraphError};

/// Label propagation sweeps for [`Renumber::Cluster`]: most labels settle
/// in the first few (Raghavan et al. report 95% of nodes labelled as they
/// end up after 5 iterations).
pub const LABEL_ROUNDS: usize = 5;

/// What a renumbering cannot do.
#[derive(Debug, thiserror::Error)]
pub enum RenumberError {
    #[error("renumbering by {method} needs a square graph (one node set), but this one has {num_src} sources and {num_dst} destinations; `degree` renumbers the rows of any graph")]
    NotSquare { method: &'static str, num_src: usize, num_dst: usize },
    #[error("a node order must be a permutation of 0..{len}: entry {position} is {value}, which is {problem}")]
    NotPermutation { len: usize, position: usize, value: u64, problem: &'static str },
    #[error("a node order of {actual} entries for {expected} nodes")]
    Length { expected: usize, actual: usize },
    #[error("a field of {actual} rows renumbered by an order of {expected}")]
    FieldRows { expected: usize, actual: usize },
    #[error("a {field} field moved into a reused {buffer} buffer")]
    BufferType { field: &'static str, buffer: &'static str },
    #[error("{path} is laid out in its stored node order (by {stored}); it cannot be renumbered by {asked} as well: run it with renumbering `none` or `{stored}`, or convert the input again with `--renumber {asked}`")]
    StoredOrder { path: String, stored: &'static str, asked: &'static str },
    #[error("a renumbering made for a graph of {made_for:?} (sources, destinations, edges) given with a graph of {given:?}")]
    OtherGraph { made_for: (usize, usize, usize), given: (usize, usize, usize) },
    #[error("this renumbering is a file's stored layout: its rows are read from the file, not built in memory")]
    StoredLayout,
    #[error("a graph's kept renumbering is not a renumbering (a bug in tiga; please report it)")]
    Cache,
    /// The storage holding the stored order failed (a `.gfg` file's
    /// error, boxed: storage lives in a crate above this one).
    #[error(transparent)]
    Storage(Box<dyn std::error::Error + Send + Sync>),
    #[error(transparent)]
    Graph(#[from] GraphError),
    #[error(transparent)]
    Tensor(#[from] TensorError),
}

/// A node renumbering: `new = perm[old]`, and back, `old = inv[new]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    perm: Vec<u32>,
    inv: Vec<u32>,
}

impl Order {
    /// The order with these new ids (`perm[old] = new`), checked to be a
    /// permutation (a `.gfg`'s stored order is user input).
    pub fn from_perm(perm: Vec<u32>) -> Result<Order, RenumberError> {
        let len = perm.len();
        let mut inv = vec![u32::MAX; len];
        for (old, &new) in perm.iter().enumerate() {
            let problem = match inv.get(new as usize) {
                None => "out of range",
                Some(&u32::MAX) => {
                    inv[new as usize] = old as u32;
                    continue;
                }
                Some(_) => "a duplicate",
            };
            return Err(RenumberError::NotPermutation { len, position: old, value: u64::from(new), problem });
        }
        Ok(Order { perm, inv })
    }

    /// The order that lists old ids in `sequence` order (`sequence[new] =
    /// old`), as the methods build it.
    fn from_sequence(sequence: Vec<u32>) -> Order {
        let mut perm = vec![0u32; sequence.len()];
        for (new, &old) in sequence.iter().enumerate() {
            perm[old as usize] = new as u32;
        }
        Order { perm, inv: sequence }
    }

    /// `perm[old] = new`.
    pub fn perm(&self) -> &[u32] {
        &self.perm
    }
    /// `inv[new] = old`.
    pub fn inv(&self) -> &[u32] {
        &self.inv
    }
    pub fn len(&self) -> usize {
        self.perm.len()
    }
    pub fn is_empty(&self) -> bool {
        self.perm.is_empty()
    }
    /// The order `method` gives `g`'s rows (see the module doc); `None`
    /// for [`Renumber::None`].
    pub fn compute(g: &Graph, method: Renumber) -> Result<Option<Order>, RenumberError> {
        let square = g.num_src() == g.num_dst();
        let not_square = |method: &'static str| RenumberError::NotSquare { method, num_src: g.num_src(), num_dst: g.num_dst() };
        Ok(Some(match method {
            Renumber::None => return Ok(None),
            Renumber::Degree => degree_order(g, square),
            Renumber::Rcm if square => rcm_order(&Both::new(g)?),
            Renumber::Cluster if square => cluster_order(&Both::new(g)?),
            Renumber::Rcm | Renumber::Cluster => return Err(not_square(method.name())),
        }))
    }

    /// A field in the old numbering, rows moved to their new ids.
    pub fn to_new(&self, field: &TensorView<'_>) -> Result<Tensor, RenumberError> {
        gather_rows(field, &self.inv, None)
    }

    /// A field in the new numbering, rows moved back to their old ids.
    pub fn to_old(&self, field: &TensorView<'_>) -> Result<Tensor, RenumberError> {
        gather_rows(field, &self.perm, None)
    }

    /// [`Order::to_new`] or [`Order::to_old`] (`to_new`), into `out` when
    /// it has the field's dtype and shape (a reused buffer, see
    /// [`Renumbered::scratch`]; or a tensor in a file, for a field over a
    /// RAM budget), else into a new tensor.
    pub fn moved_into(&self, field: &TensorView<'_>, to_new: bool, out: Option<Tensor>) -> Result<Tensor, RenumberError> {
        let out = out.filter(|t| t.field_type() == field.field_type() && t.shape() == field.shape());
        gather_rows(field, if to_new { &self.inv } else { &self.perm }, out)
    }
}

/// `out[r] = field[index[r]]`, row by row, in parallel (into `out`, whose
/// dtype and shape the caller checked, when given).
fn gather_rows(field: &TensorView<'_>, index: &[u32], out: Option<Tensor>) -> Result<Tensor, RenumberError> {
    let rows = field.shape().first().copied().unwrap_or(1);
    if rows != index.len() {
        return Err(RenumberError::FieldRows { expected: index.len(), actual: rows });
    }
    let width = field.shape().iter().skip(1).product::<usize>();
    let mut out = match out {
        Some(t) => t,
        None => Tensor::for_overwrite_of(field.field_type(), field.shape().to_vec())?,
    };
    fn gather<T: Copy + Send + Sync>(out: &mut [T], src: &[T], index: &[u32], width: usize) {
        // Blocks of rows of about 16 KiB of output each: one task per row
        // would cost more than a narrow row's copy.
        let block = (4096 / width.max(1)).max(1);
        out.par_chunks_mut(block * width.max(1)).zip(index.par_chunks(block)).for_each(|(o, ix)| {
            for (row, &from) in o.chunks_exact_mut(width.max(1)).zip(ix) {
                let from = from as usize * width;
                row.copy_from_slice(&src[from..from + width]);
            }
        });
    }
    if width > 0 {
        match (out.data_mut(), field.data()) {
            (DataMut::F32(o), Data::F32(s)) => gather(o, s, index, width),
            (DataMut::F64(o), Data::F64(s)) => gather(o, s, index, width),
            (DataMut::F16(o), Data::F16(s)) => gather(o, s, index, width),
            (DataMut::BF16(o), Data::BF16(s)) => gather(o, s, index, width),
            // A fresh buffer takes the field's type; a reused one is the
            // caller's, checked here rather than trusted.
            _ => return Err(RenumberError::BufferType { field: field.field_type().name(), buffer: out.field_type().name() }),
        }
    }
    Ok(out)
}

/// Each node's neighbours with edges taken both ways (out-neighbours then
/// in-neighbours, duplicates kept: a multi-edge counts as often as it
/// occurs), of a square graph.
struct Both {
    offsets: Vec<u64>,
    adj: Vec<u32>,
}

impl Both {
    fn new(g: &Graph) -> Result<Both, RenumberError> {
        let t = g.try_transposed()?;
        let n = g.num_dst();
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0u64);
        for i in 0..n {
            let len = (g.row(i).len() + t.row(i).len()) as u64;
            offsets.push(offsets[i] + len);
        }
        let mut adj = vec![0u32; g.num_edges() * 2];
        let mut rest = adj.as_mut_slice();
        let mut rows: Vec<&mut [u32]> = Vec::with_capacity(n);
        for i in 0..n {
            let (row, tail) = rest.split_at_mut((offsets[i + 1] - offsets[i]) as usize);
            rows.push(row);
            rest = tail;
        }
        rows.into_par_iter().enumerate().for_each(|(i, row)| {
            let (a, b) = row.split_at_mut(g.row(i).len());
            a.copy_from_slice(&g.cols()[g.row(i)]);
            b.copy_from_slice(&t.cols()[t.row(i)]);
        });
        Ok(Both { offsets, adj })
    }
    fn n(&self) -> usize {
        self.offsets.len() - 1
    }
    fn neighbours(&self, i: usize) -> &[u32] {
        &self.adj[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }
    fn degree(&self, i: usize) -> u64 {
        self.offsets[i + 1] - self.offsets[i]
    }
}

/// Degree, highest first, ties in old order.
fn degree_order(g: &Graph, square: bool) -> Order {
    let mut degree = crate::graph_ops::in_degree(g);
    if square {
        for (d, out) in degree.iter_mut().zip(crate::graph_ops::out_degree(g)) {
            *d += out;
        }
    }
    let mut sequence: Vec<u32> = (0..g.num_dst() as u32).collect();
    sequence.par_sort_by_key(|&i| (std::cmp::Reverse(degree[i as usize]), i));
    Order::from_sequence(sequence)
}

/// Reverse Cuthill–McKee (see the module doc).
fn rcm_order(b: &Both) -> Order {
    let n = b.n();
    let mut by_degree: Vec<u32> = (0..n as u32).collect();
    by_degree.par_sort_by_key(|&i| (b.degree(i as usize), i));
    let mut visited = vec![false; n];
    let mut sequence: Vec<u32> = Vec::with_capacity(n);
    let mut next: Vec<u32> = Vec::new();
    for &start in &by_degree {
        if visited[start as usize] {
            continue;
        }
        visited[start as usize] = true;
        let mut head = sequence.len();
        sequence.push(start);
        while head < sequence.len() {
            let v = sequence[head] as usize;
            head += 1;
            next.clear();
            for &u in b.neighbours(v) {
                if !visited[u as usize] {
                    visited[u as usize] = true;
                    next.push(u);
                }
            }
            next.sort_unstable_by_key(|&u| (b.degree(u as usize), u));
            sequence.extend_from_slice(&next);
        }
    }
    sequence.reverse();
    Order::from_sequence(sequence)
}

/// Clusters by label propagation (see the module doc).
fn cluster_order(b: &Both) -> Order {
    let n = b.n();
    let mut label: Vec<u32> = (0..n as u32).collect();
    let mut count = vec![0u32; n];
    let mut touched: Vec<u32> = Vec::new();
    for _ in 0..LABEL_ROUNDS {
        let mut changed = false;
        for v in 0..n {
            let nb = b.neighbours(v);
            if nb.is_empty() {
                continue;
            }
            touched.clear();
            for &u in nb {
                let l = label[u as usize];
                if count[l as usize] == 0 {
                    touched.push(l);
                }
                count[l as usize] += 1;
            }
            let mut best = (0u32, u32::MAX);
            for &l in &touched {
                let c = count[l as usize];
                if c > best.0 || (c == best.0 && l < best.1) {
                    best = (c, l);
                }
                count[l as usize] = 0;
            }
            if best.1 != label[v] {
                label[v] = best.1;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    // Each cluster's smallest member, then nodes by (that, their own id).
    let mut first = vec![u32::MAX; n];
    for (v, &l) in label.iter().enumerate() {
        first[l as usize] = first[l as usize].min(v as u32);
    }
    let mut sequence: Vec<u32> = (0..n as u32).collect();
    sequence.par_sort_by_key(|&v| (first[label[v as usize] as usize], v));
    Order::from_sequence(sequence)
}

/// `g` with rows moved to `rows`' new ids and columns renamed by `cols`
/// (`None`: kept), each row's edges in their old order, edge ids naming
/// the caller's edges.
fn permute_csr(g: &Graph, rows: &Order, cols: Option<&Order>) -> Result<Graph, RenumberError> {
    let n = g.num_dst();
    if rows.len() != n {
        return Err(RenumberError::Length { expected: n, actual: rows.len() });
    }
    let mut offsets = Vec::with_capacity(n + 1);
    offsets.push(0u64);
    for new in 0..n {
        let len = g.row(rows.inv[new] as usize).len() as u64;
        offsets.push(offsets[new] + len);
    }
    let e = g.num_edges();
    let mut new_cols = vec![0u32; e];
    let mut ids = vec![0u64; e];
    // Balanced chunks of new rows, each writing its own slice.
    let chunks = crate::exec::balanced_row_chunks(&offsets, rayon::current_num_threads() * 8);
    let mut pieces = Vec::with_capacity(chunks.len());
    let (mut c_rest, mut i_rest) = (new_cols.as_mut_slice(), ids.as_mut_slice());
    for r in &chunks {
        let len = (offsets[r.end] - offsets[r.start]) as usize;
        let (c, ct) = c_rest.split_at_mut(len);
        let (i, it) = i_rest.split_at_mut(len);
        pieces.push((r.clone(), c, i));
        c_rest = ct;
        i_rest = it;
    }
    pieces.into_par_iter().for_each(|(r, c, i)| {
        let mut at = 0;
        for new in r {
            let old = g.row(rows.inv[new] as usize);
            let len = old.len();
            match cols {
                Some(o) => c[at..at + len].iter_mut().zip(&g.cols()[old.clone()]).for_each(|(d, &s)| *d = o.perm[s as usize]),
                None => c[at..at + len].copy_from_slice(&g.cols()[old.clone()]),
            }
            for (k, p) in old.enumerate() {
                i[at + k] = g.edge_id(p);
            }
            at += len;
        }
    });
    Ok(Graph::from_trusted(g.num_src(), n, offsets, new_cols, ids))
}

/// A graph in a new numbering, with what a call needs to run on it and to
/// move fields in and out (see the module doc). Built by
/// [`Graph::renumbered`], which keeps it, or read from a `.gfg` written in
/// that numbering (`tiga_storage::GfgFile::node_order`).
#[derive(Debug)]
pub struct Renumbered {
    pub method: Renumber,
    /// The rows' order (a square graph's one order).
    pub dst: Order,
    /// Whether the sources share the rows' order (a square graph's do; a
    /// non-square graph's keep their ids).
    square: bool,
    rows: RenumberedRows,
    /// Milliseconds to compute the order and to build the renumbered graph.
    pub build_ms: f64,
    /// Buffers that held fields in the new numbering during a call (moved
    /// inputs, outputs before they were moved back), kept for the next
    /// call: at most [`SCRATCH_BUFFERS`].
    scratch: std::sync::Mutex<Vec<Tensor>>,
}

/// How many field-sized buffers a renumbered graph keeps between calls.
/// A call moves each node field into a fresh buffer and each output back
/// into another; in fresh memory every page of those faults on first touch
/// (in 4 KiB pages, 8192 faults for two 16 MiB fields: on the benchmark's
/// machine a 250×250 grid's VecSum at F = 64 took 20 ms instead of 3).
/// Kept buffers are written again without faults; the price is their
/// memory, held with the graph's renumbering.
pub const SCRATCH_BUFFERS: usize = 4;

/// Where a renumbered graph's rows are.
#[derive(Debug)]
enum RenumberedRows {
    /// Built in memory from the caller's graph: the renumbered CSR, and the
    /// renumbered old transpose, built on first use.
    Memory { forward: Arc<Graph>, transposed: std::sync::OnceLock<Arc<Graph>> },
    /// A file written in this numbering: its own CSRs are the renumbered
    /// ones.
    Stored,
}

/// Which way a call's fields move through a renumbering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// The caller's numbering to the renumbered one.
    ToNew,
    /// Back.
    ToOld,
}

impl Way {
    /// The other way (a call's outputs go back the way its fields came).
    pub fn back(self) -> Way {
        match self {
            Way::ToNew => Way::ToOld,
            Way::ToOld => Way::ToNew,
        }
    }
}

/// The order a field of `role` moves by, given the orders of the sources
/// and destinations of the rows it is read over (edge fields and
/// parameters never move: renumbered rows read edges through the caller's
/// edge ids).
pub fn order_of<'o>(role: tiga_abi::Role, src: Option<&'o Order>, dst: Option<&'o Order>) -> Option<&'o Order> {
    match role {
        tiga_abi::Role::Src => src,
        tiga_abi::Role::Dst => dst,
        tiga_abi::Role::Edge | tiga_abi::Role::Param => None,
    }
}

impl Renumbered {
    /// `t` moved by `order` (`None`: ids kept, no copy made), into one of
    /// the kept buffers where one fits.
    pub fn moved(&self, order: Option<&Order>, way: Way, t: &TensorView<'_>) -> Result<Option<Tensor>, RenumberError> {
        let Some(o) = order else { return Ok(None) };
        let out = self.scratch(t.field_type(), t.shape());
        Ok(Some(o.moved_into(t, way == Way::ToNew, out)?))
    }

    /// [`Renumbered::moved`] for a result of a call: one in a file (a paged
    /// call's row output or gradient over its RAM budget) is moved into a
    /// file too, beside it, so that the budget still holds.
    pub fn moved_result(&self, order: Option<&Order>, way: Way, t: &Tensor) -> Result<Option<Tensor>, RenumberError> {
        let Some(o) = order else { return Ok(None) };
        let Some(dir) = t.file_dir() else {
            return self.moved(Some(o), way, &t.view());
        };
        let out = Tensor::zeros_in_file(t.dtype(), t.shape().to_vec(), dir)?;
        Ok(Some(o.moved_into(&t.view(), way == Way::ToNew, Some(out))?))
    }

    /// The source and destination fields of `inputs` moved (`None` where a
    /// field stays as it is: edge fields, parameters, sides that keep
    /// their ids); [`Inputs::with_moved`] puts them in the call.
    pub fn move_inputs(
        &self,
        inputs: &Inputs<'_>,
        src: Option<&Order>,
        dst: Option<&Order>,
        way: Way,
    ) -> Result<Vec<Option<Tensor>>, RenumberError> {
        inputs.fields.iter().map(|(role, _, v)| self.moved(order_of(*role, src, dst), way, &v.view())).collect()
    }

    /// Keep the buffers a call moved its fields into for the next call.
    pub fn keep_all(&self, moved: Vec<Option<Tensor>>) {
        moved.into_iter().flatten().for_each(|t| self.keep(t));
    }

    /// `g` renumbered by `method` (`None` for [`Renumber::None`]).
    pub fn build(g: &Graph, method: Renumber) -> Result<Option<Renumbered>, RenumberError> {
        let start = Instant::now();
        let Some(dst) = Order::compute(g, method)? else { return Ok(None) };
        // A square graph's sources share the rows' order; a non-square
        // graph's keep their ids.
        let square = g.num_src() == g.num_dst();
        let forward = Arc::new(permute_csr(g, &dst, square.then_some(&dst))?);
        let build_ms = start.elapsed().as_secs_f64() * 1e3;
        let scratch = std::sync::Mutex::new(Vec::new());
        let rows = RenumberedRows::Memory { forward, transposed: std::sync::OnceLock::new() };
        Ok(Some(Renumbered { method, dst, square, rows, build_ms, scratch }))
    }

    /// The renumbering a file was written in (its rows are the file's):
    /// `dst` for the rows, and for the sources too when `square`.
    pub fn stored(method: Renumber, dst: Order, square: bool) -> Renumbered {
        let scratch = std::sync::Mutex::new(Vec::new());
        Renumbered { method, dst, square, rows: RenumberedRows::Stored, build_ms: 0.0, scratch }
    }

    /// The caller's graph from `stored`, the rows as laid out in this
    /// order (a `.gfg` written with a node order, read whole): each row
    /// moved back to the caller's id, its edges and edge ids as stored
    /// (the caller's order), and on a square graph its sources renamed
    /// back too. What a whole-graph reader of such a file needs (a
    /// partitioner, which cuts the caller's numbering).
    pub fn caller_graph(&self, stored: &Graph) -> Result<Graph, RenumberError> {
        let back = Order { perm: self.dst.inv.clone(), inv: self.dst.perm.clone() };
        permute_csr(stored, &back, self.square.then_some(&back))
    }

    /// The renumbered CSR, when it was built in memory (`None` for a
    /// file's stored order, whose rows are the file's).
    pub fn forward(&self) -> Option<&Arc<Graph>> {
        match &self.rows {
            RenumberedRows::Memory { forward, .. } => Some(forward),
            RenumberedRows::Stored => None,
        }
    }

    /// A kept buffer of this dtype and shape, if there is one (see
    /// [`SCRATCH_BUFFERS`]); its values are stale and must be overwritten.
    pub fn scratch(&self, ty: crate::tensor::FieldType, shape: &[usize]) -> Option<Tensor> {
        let mut kept = self.scratch.lock().unwrap_or_else(|p| p.into_inner());
        // By stored type: an f16 and an f32 field compute alike but are
        // stored apart.
        let i = kept.iter().position(|t| t.field_type() == ty && t.shape() == shape)?;
        Some(kept.swap_remove(i))
    }

    /// Keep `t` for a later call (dropped when [`SCRATCH_BUFFERS`] are
    /// kept already, or when it lives in a file).
    pub fn keep(&self, t: Tensor) {
        if t.is_file_backed() {
            return;
        }
        let mut kept = self.scratch.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() < SCRATCH_BUFFERS {
            kept.push(t);
        }
    }

    /// The sources' order: the rows' on a square graph, none (ids kept)
    /// otherwise.
    pub fn src_order(&self) -> Option<&Order> {
        self.square.then_some(&self.dst)
    }

    /// The renumbered transpose of `base` (the graph this was built from).
    pub fn transposed(&self, base: &Graph) -> Result<Arc<Graph>, RenumberError> {
        let RenumberedRows::Memory { transposed, .. } = &self.rows else { return Err(RenumberError::StoredLayout) };
        if let Some(t) = transposed.get() {
            return Ok(t.clone());
        }
        let t = base.try_transposed()?;
        let built = match self.src_order() {
            Some(o) => permute_csr(&t, o, Some(&self.dst))?,
            // Sources keep their ids: the transpose's rows stay, its
            // columns (old rows) take the new row ids.
            None => permute_csr(&t, &identity(t.num_dst()), Some(&self.dst))?,
        };
        Ok(transposed.get_or_init(|| Arc::new(built)).clone())
    }

    /// The orders of the sources and destinations of `side`'s rows
    /// (`None`: ids kept).
    pub fn side_orders(&self, side: Side) -> (Option<&Order>, Option<&Order>) {
        match side {
            Side::Forward | Side::RowReversed => (self.src_order(), Some(&self.dst)),
            Side::Transposed => (Some(&self.dst), self.src_order()),
        }
    }
}

fn identity(n: usize) -> Order {
    Order::from_sequence((0..n as u32).collect())
}

impl Graph {
    /// This graph renumbered by `method`, built on first use and kept with
    /// the graph (`None` for [`Renumber::None`]).
    pub fn renumbered(&self, method: Renumber) -> Result<Option<Arc<Renumbered>>, RenumberError> {
        let Some(slot) = self.renumbered_slot(method) else { return Ok(None) };
        let kept = match slot.get() {
            Some(r) => r.clone(),
            None => {
                let Some(built) = Renumbered::build(self, method)? else { return Ok(None) };
                slot.get_or_init(|| Arc::new(built)).clone()
            }
        };
        // Only this function fills the slot, always with a `Renumbered`.
        kept.downcast::<Renumbered>().map(Some).map_err(|_| RenumberError::Cache)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small square graph with a multi-edge, a self loop and an isolated
    /// node (4), edges given out of CSR order.
    fn sample() -> Graph {
        let src = [3u32, 0, 2, 2, 1, 0, 5, 3, 3];
        let dst = [0u32, 1, 1, 1, 2, 3, 3, 5, 5];
        Graph::from_edges(6, 6, &src, &dst).expect("valid")
    }

    #[test]
    fn every_method_is_a_permutation_and_keeps_row_order() {
        let g = sample();
        for method in [Renumber::Degree, Renumber::Rcm, Renumber::Cluster] {
            let r = g.renumbered(method).expect("renumbers").expect("a method");
            let o = &r.dst;
            assert!(Order::from_perm(o.perm().to_vec()).is_ok(), "{method:?}");
            // Row perm[i] holds row i's edges, in order, renamed.
            for i in 0..g.num_dst() {
                let new = o.perm()[i] as usize;
                let want: Vec<(u32, u64)> = g.row(i).map(|p| (o.perm()[g.cols()[p] as usize], g.edge_id(p))).collect();
                let f = r.forward().expect("built in memory");
                let got: Vec<(u32, u64)> = f.row(new).map(|p| (f.cols()[p], f.edge_id(p))).collect();
                assert_eq!(got, want, "{method:?} row {i}");
            }
            // The transpose: row perm[j] holds the old transpose's row j.
            let t = g.transposed();
            let rt = r.transposed(&g).expect("transpose");
            for j in 0..g.num_src() {
                let want: Vec<u64> = t.row(j).map(|p| t.edge_id(p)).collect();
                let got: Vec<u64> = rt.row(o.perm()[j] as usize).map(|p| rt.edge_id(p)).collect();
                assert_eq!(got, want, "{method:?} transposed row {j}");
            }
            // Kept: the second request is the same value.
            assert!(Arc::ptr_eq(&r, &g.renumbered(method).expect("again").expect("a method")));
        }
        assert!(g.renumbered(Renumber::None).expect("none").is_none());
    }

    #[test]
    fn degree_puts_hubs_first() {
        // Node 3: out-degree 3 (rows 0, 5, 5) + in-degree 2 = 5, the most.
        let o = Order::compute(&sample(), Renumber::Degree).expect("ok").expect("order");
        assert_eq!(o.inv()[0], 3);
        // Node 4 has no edges: last.
        assert_eq!(o.perm()[4], 5);
    }

    #[test]
    fn rcm_gives_a_scrambled_path_a_small_bandwidth() {
        // A path 0-1-...-99 under a scrambled numbering: RCM restores a
        // bandwidth of 1 (neighbours get adjacent ids).
        let n = 100u32;
        let scramble: Vec<u32> = (0..n).map(|i| (i * 37) % n).collect();
        let (mut s, mut d) = (Vec::new(), Vec::new());
        for i in 0..n - 1 {
            s.push(scramble[i as usize]);
            d.push(scramble[i as usize + 1]);
        }
        let g = Graph::from_edges(n as usize, n as usize, &s, &d).expect("valid");
        let o = Order::compute(&g, Renumber::Rcm).expect("ok").expect("order");
        let band = (0..g.num_dst())
            .flat_map(|i| g.row(i).map(move |p| (i, p)))
            .map(|(i, p)| (o.perm()[i] as i64 - o.perm()[g.cols()[p] as usize] as i64).abs())
            .max();
        assert_eq!(band, Some(1));
    }

    #[test]
    fn clusters_are_contiguous() {
        // Two 4-cliques joined by one edge, ids interleaved: each clique
        // ends up in one run of ids.
        let a = [0u32, 2, 4, 6];
        let b = [1u32, 3, 5, 7];
        let (mut s, mut d) = (Vec::new(), Vec::new());
        for c in [a, b] {
            for &x in &c {
                for &y in &c {
                    if x != y {
                        s.push(x);
                        d.push(y);
                    }
                }
            }
        }
        s.push(0);
        d.push(1);
        let g = Graph::from_edges(8, 8, &s, &d).expect("valid");
        let o = Order::compute(&g, Renumber::Cluster).expect("ok").expect("order");
        let mut first: Vec<u32> = a.iter().map(|&x| o.perm()[x as usize]).collect();
        first.sort_unstable();
        assert!(first == [0, 1, 2, 3] || first == [4, 5, 6, 7], "{first:?}");
    }

    #[test]
    fn fields_round_trip_and_bad_orders_are_refused() {
        let o = Order::compute(&sample(), Renumber::Degree).expect("ok").expect("order");
        let x: Vec<f32> = (0..12).map(|i| i as f32).collect();
        let v = TensorView::from_slice_f32(vec![6, 2], &x).expect("view");
        let moved = o.to_new(&v).expect("in");
        // Node 3's row is now row 0.
        assert_eq!(&moved.as_f32().expect("f32")[..2], &[6.0, 7.0]);
        let back = o.to_old(&moved.view()).expect("out");
        assert_eq!(back.as_f32().expect("f32"), x.as_slice());
        assert!(o.to_new(&TensorView::from_slice_f32(vec![4], &x[..4]).expect("view")).is_err());
        assert!(matches!(Order::from_perm(vec![0, 0]), Err(RenumberError::NotPermutation { position: 1, .. })));
        assert!(matches!(Order::from_perm(vec![0, 2]), Err(RenumberError::NotPermutation { problem: "out of range", .. })));
    }

    #[test]
    fn non_square_graphs_renumber_rows_by_degree_only() {
        let g = Graph::from_edges(3, 2, &[0, 1, 2, 2], &[1, 1, 1, 0]).expect("valid");
        let r = g.renumbered(Renumber::Degree).expect("ok").expect("order");
        assert_eq!(r.dst.perm(), &[1, 0]);
        assert!(r.src_order().is_none());
        assert_eq!(r.forward().expect("in memory").cols(), &[0, 1, 2, 2]);
        assert!(matches!(g.renumbered(Renumber::Rcm), Err(RenumberError::NotSquare { .. })));
    }
}
