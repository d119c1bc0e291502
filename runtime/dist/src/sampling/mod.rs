//! Neighbour sampling for mini-batch training (GraphSAGE, PyG's
//! `NeighborLoader`, WholeGraph's `unweighted_sample_without_replacement`):
//! for a batch of centre nodes, up to `fanout` of each centre's incoming
//! edges, without replacement, uniformly or weighted by an edge field;
//! several hops in a row; and `append_unique`, which numbers the nodes a
//! mini-batch touches. [`sample_mini_batch`] gives a training step's
//! input as one value, a [`MiniBatch`]: the sampled block as a graph that
//! kernels run on (laid out as PyG's
//! `NeighborLoader` batch), and [`epoch_order`] the seeds' order per epoch.
//!
//! Centres are destination rows: a centre `i`'s candidates are the edges
//! `j → i` of its CSR row, and a sampled edge gives the neighbour `j`.
//!
//! **Reproducible by construction.** Each centre's random numbers come from
//! a stream keyed by (seed, centre id, hop) alone, so a centre's sample is
//! the same whatever batch it is in, however the rows are split over
//! threads or ranks, and whether the graph is in memory or paged from a
//! `.gfg`. The sampled edges of a centre are listed in the order of its row
//! (the graph's edge order within the row), not in the order drawn.
//!
//! - Uniform: `k` of the row's `d` positions by Floyd's algorithm (each
//!   `k`-subset equally likely).
//! - Weighted: Efraimidis–Spirakis: each edge of positive weight `w` draws
//!   `u` in (0, 1] and gets the key `ln(u) / w`; the `k` largest keys win
//!   (ties to the earlier position). Edges of weight 0 are never drawn, so
//!   a row with fewer than `k` positive weights gives just those. Weights
//!   must be finite and non-negative.
//! - A row of degree ≤ fanout gives all its edges (weights or not); a
//!   fanout of −1 means all edges.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use rayon::prelude::*;
use thiserror::Error;

use crate::comm::{CommError, Communicator};
use tiga_runtime::exec::ExecError;
use tiga_runtime::exec::Side;
use tiga_runtime::realization::{Realization, Rows};
use tiga_runtime::{GraphError, RenumberError, Renumbered};

mod batch;
pub use batch::{Hop, MiniBatch};

#[derive(Debug, Error)]
pub enum SampleError {
    #[error("centre {centre} is not a node of the graph ({num_rows} destination rows)")]
    CentreOutOfRange { centre: i64, num_rows: usize },
    #[error("fanout {0} is not a count: give a number ≥ 0, or -1 for every edge")]
    BadFanout(i64),
    #[error("the edge weights have {got} values for {expected} edges")]
    WeightsLength { expected: usize, got: usize },
    #[error("edge {edge} has weight {value}; weights must be finite and non-negative")]
    BadWeight { edge: u64, value: f64 },
    #[error(
        "multi-hop sampling needs a square graph (a sampled neighbour is the next hop's centre); this one has {num_src} \
         sources and {num_dst} destinations"
    )]
    NotSquare { num_src: usize, num_dst: usize },
    #[error("a generated stencil has no stored rows to sample; build its CSR (Graph::stencil)")]
    Generated,
    #[error("reading the stored node order of {what}: {source}")]
    Order {
        what: String,
        #[source]
        source: RenumberError,
    },
    #[error(
        "this sharded graph runs its rows from a local file's pages (Sharded::page_local); sampling reads a shard's rows \
         in memory: sample a shard that was not paged"
    )]
    PagedShard,
    #[error("reading rows: {0}")]
    Rows(#[from] ExecError),
    #[error("ranks disagree: {0}")]
    Comm(#[from] CommError),
    #[error("a rank sent sampling results that do not parse ({0})")]
    Corrupt(String),
    #[error("building the mini-batch's block: {0}")]
    Block(#[source] GraphError),
}

/// One hop of sampling: per centre (in request order) a run of sampled
/// edges, `offsets[c]..offsets[c + 1]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sampled {
    /// One more than the centres.
    pub offsets: Vec<usize>,
    /// The sampled neighbours (source ids).
    pub sources: Vec<u32>,
    /// The user edge id of each sampled edge.
    pub edge_ids: Vec<u64>,
}

/// Several hops: the nodes touched, numbered, and per hop the sampled
/// edges as local indices into `nodes`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MultiHop {
    /// The seeds first (as given), then each new node in order of first
    /// appearance over the hops.
    pub nodes: Vec<u32>,
    pub hops: Vec<Hop>,
}

/// SplitMix64's finalizer: the one hash every random stream of sampling,
/// shuffling and splitting is keyed through, so that a sample is a function
/// of its keys alone.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The random stream of one (seed, centre, hop): SplitMix64.
struct Stream(u64);

impl Stream {
    fn new(seed: u64, centre: u32, hop: u32) -> Stream {
        Stream(mix(mix(seed) ^ mix(u64::from(centre) ^ (u64::from(hop) << 32) ^ 0x5A4D_504C_4500_0000)))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform in `0..n` (n ≥ 1), by the high half of a 128-bit product.
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next()) * n as u128) >> 64) as usize
    }

    /// Uniform in (0, 1].
    fn unit_open(&mut self) -> f64 {
        ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
}

/// Which of a row's `d` positions a centre keeps, ascending.
fn choose(d: usize, fanout: i64, weights: Option<&[f64]>, stream: &mut Stream) -> Vec<usize> {
    let k = if fanout < 0 { d } else { (fanout as usize).min(d) };
    if k == d {
        return (0..d).collect();
    }
    let mut chosen = match weights {
        None => {
            // Floyd: for j in d-k..d, draw t in 0..=j; keep t, or j if t is kept.
            let mut set: HashSet<usize> = HashSet::with_capacity(k * 2);
            for j in d - k..d {
                let t = stream.below(j + 1);
                if !set.insert(t) {
                    set.insert(j);
                }
            }
            set.into_iter().collect::<Vec<_>>()
        }
        Some(w) => {
            let mut keys: Vec<(f64, usize)> = Vec::with_capacity(d);
            for (p, &wp) in w.iter().enumerate() {
                // One draw per edge, in row order, so the stream does not
                // depend on which edges have weight.
                let u = stream.unit_open();
                if wp > 0.0 {
                    keys.push((u.ln() / wp, p));
                }
            }
            keys.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            keys.truncate(k);
            keys.into_iter().map(|(_, p)| p).collect()
        }
    };
    chosen.sort_unstable();
    chosen
}

/// Row `k` of a page (counted from its first row): its sources and user
/// edge ids (a page without ids numbers edges by position).
fn page_row(v: &tiga_runtime::exec::PageView<'_>, k: usize) -> Row {
    let base = v.offsets.first().copied().unwrap_or(0);
    let (s, e) = (v.offsets[k], v.offsets[k + 1]);
    let local = (s - base) as usize..(e - base) as usize;
    let ids = match v.edge_ids {
        Some(ids) => ids[local.clone()].to_vec(),
        None => (s..e).collect(),
    };
    Row { cols: v.cols[local].to_vec(), ids }
}

/// Rows of a paged graph read per block in [`RowReader::prefetch`].
const PREFETCH_BLOCK: usize = 4096;

/// A row's source ids and user edge ids.
#[derive(Clone)]
struct Row {
    cols: Vec<u32>,
    ids: Vec<u64>,
}

/// Reads rows of a realization for sampling: any row of a graph in memory
/// or paged, or the owned rows of this rank's shard (global ids in, global
/// ids out).
enum RowReader<'r> {
    /// `order`: the node order of a file laid out in one (written with
    /// `--renumber`): the caller's row `i` is stored row `perm[i]`, its
    /// edges in the caller's order with the caller's edge ids, and (on a
    /// square graph) stored source ids map back through `inv`. Sampled in
    /// the caller's numbering, so a sample is the one the file without an
    /// order gives.
    Rows {
        rows: Rows<'r>,
        order: Option<std::sync::Arc<Renumbered>>,
    },
    Shard {
        local: &'r crate::shard::LocalShard,
        graph: &'r tiga_runtime::Graph,
        row_of: HashMap<u32, usize>,
    },
}

impl<'r> RowReader<'r> {
    fn new(r: &'r dyn Realization) -> Result<RowReader<'r>, SampleError> {
        if r.renumbered_layout() {
            let order_error = |source| SampleError::Order { what: r.describe(), source };
            let view = r.renumbered(tiga_runtime::schedule::Renumber::None).map_err(order_error)?;
            let order = view.map(|v| v.renumbered.clone()).ok_or_else(|| order_error(RenumberError::StoredLayout))?;
            return Ok(RowReader::Rows { rows: r.rows(Side::Forward, true)?, order: Some(order) });
        }
        Ok(match crate::shard::sharded(r) {
            Some(sh) => {
                let local = sh.local();
                let graph = local.graph.as_ref().ok_or(SampleError::PagedShard)?;
                let row_of = local.rows[..local.owned_rows].iter().enumerate().map(|(k, &g)| (g, k)).collect();
                RowReader::Shard { local, graph, row_of }
            }
            None => RowReader::Rows { rows: r.rows(Side::Forward, true)?, order: None },
        })
    }

    /// For a paged graph, the rows of `centres`, read a block of
    /// [`PREFETCH_BLOCK`] aligned rows at a time (each block once); `None`
    /// where rows are read directly.
    fn prefetch(&self, centres: &[u32], num_rows: usize) -> Result<Option<HashMap<u32, Row>>, SampleError> {
        let RowReader::Rows { rows: Rows::Pages(p), order } = self else { return Ok(None) };
        let order = order.as_deref();
        // (stored row, centre), in stored order: each block read once.
        let mut wanted: Vec<(u32, u32)> = centres.iter().map(|&c| (stored_row(order, c), c)).collect();
        wanted.sort_unstable();
        wanted.dedup();
        let mut out = HashMap::with_capacity(wanted.len());
        let mut at = 0;
        while at < wanted.len() {
            let block = wanted[at].0 as usize / PREFETCH_BLOCK;
            let rows = block * PREFETCH_BLOCK..((block + 1) * PREFETCH_BLOCK).min(num_rows);
            let page = p.page(rows.clone())?;
            let v = page.view();
            while at < wanted.len() && (wanted[at].0 as usize) < rows.end {
                let (stored, centre) = wanted[at];
                out.insert(centre, in_caller_ids(page_row(&v, stored as usize - rows.start), order));
                at += 1;
            }
        }
        Ok(Some(out))
    }

    /// Whether this reader can give row `i` (a shard: the rows it owns).
    fn holds(&self, i: u32) -> bool {
        match self {
            RowReader::Rows { .. } => true,
            RowReader::Shard { row_of, .. } => row_of.contains_key(&i),
        }
    }

    fn row(&self, i: usize) -> Result<Row, SampleError> {
        match self {
            RowReader::Rows { rows, order } => {
                let order = order.as_deref();
                Ok(in_caller_ids(rows_row(rows, stored_row(order, i as u32) as usize)?, order))
            }
            RowReader::Shard { local, graph, row_of } => {
                let k = *row_of.get(&(i as u32)).ok_or_else(|| SampleError::Corrupt(format!("row {i} is not on this rank")))?;
                let range = graph.row(k);
                Ok(Row {
                    cols: graph.cols()[range.clone()].iter().map(|&slot| local.slots[slot as usize]).collect(),
                    ids: local.edge_ids[range].to_vec(),
                })
            }
        }
    }
}

/// Row `i` of `rows`: its sources and user edge ids.
fn rows_row(rows: &Rows<'_>, i: usize) -> Result<Row, SampleError> {
    match rows {
        Rows::Memory(g) => {
            let r = g.row(i);
            Ok(Row { cols: g.cols()[r.clone()].to_vec(), ids: r.map(|p| g.edge_id(p)).collect() })
        }
        Rows::Pages(p) => {
            let page = p.page(i..i + 1)?;
            Ok(page_row(&page.view(), 0))
        }
        Rows::Generated(_) => Err(SampleError::Generated),
    }
}

/// The stored row of the caller's row `i` (itself without an order).
fn stored_row(order: Option<&Renumbered>, i: u32) -> u32 {
    order.map_or(i, |o| o.dst.perm()[i as usize])
}

/// A stored row with its sources in the caller's ids (a square graph's
/// sources share the rows' order; a non-square one's keep their ids).
fn in_caller_ids(mut row: Row, order: Option<&Renumbered>) -> Row {
    if let Some(src) = order.and_then(|o| o.src_order()) {
        row.cols.iter_mut().for_each(|c| *c = src.inv()[*c as usize]);
    }
    row
}

/// What to sample in one hop.
#[derive(Clone, Copy, Debug)]
pub struct HopRequest<'a> {
    pub fanout: i64,
    pub seed: u64,
    pub hop: u32,
    /// One weight per edge in the user's edge order, or uniform.
    pub weights: Option<&'a [f64]>,
}

fn check_request(r: &dyn Realization, req: &HopRequest<'_>) -> Result<(), SampleError> {
    if req.fanout < -1 {
        return Err(SampleError::BadFanout(req.fanout));
    }
    if let Some(w) = req.weights {
        if w.len() != r.num_edges() {
            return Err(SampleError::WeightsLength { expected: r.num_edges(), got: w.len() });
        }
        if let Some((e, &v)) = w.iter().enumerate().find(|(_, v)| !v.is_finite() || **v < 0.0) {
            return Err(SampleError::BadWeight { edge: e as u64, value: v });
        }
    }
    Ok(())
}

/// One hop: up to `fanout` incoming edges of every centre (see the module
/// doc), centres in any order, repeats allowed.
///
/// On a sharded graph ([`crate::shard::sharded`]) every centre must be one
/// this rank owns; [`sample_multi_hop`] samples any centres on one.
pub fn sample_neighbors(r: &dyn Realization, centres: &[u32], req: &HopRequest<'_>) -> Result<Sampled, SampleError> {
    check_request(r, req)?;
    let reader = RowReader::new(r)?;
    sample_rows(&reader, r.num_dst(), centres, req)
}

fn sample_rows(reader: &RowReader<'_>, num_rows: usize, centres: &[u32], req: &HopRequest<'_>) -> Result<Sampled, SampleError> {
    if let Some(&c) = centres.iter().find(|&&c| c as usize >= num_rows) {
        return Err(SampleError::CentreOutOfRange { centre: i64::from(c), num_rows });
    }
    // A paged graph: read each aligned block of rows holding a centre once,
    // not one page per centre.
    let prefetched = reader.prefetch(centres, num_rows)?;
    let per: Vec<(Vec<u32>, Vec<u64>)> = centres
        .par_iter()
        .map(|&c| {
            let row = match &prefetched {
                Some(rows) => rows.get(&c).cloned().ok_or_else(|| SampleError::Corrupt(format!("row {c} was not read")))?,
                None => reader.row(c as usize)?,
            };
            let w: Option<Vec<f64>> = req.weights.map(|w| row.ids.iter().map(|&e| w[e as usize]).collect());
            let mut stream = Stream::new(req.seed, c, req.hop);
            let keep = choose(row.cols.len(), req.fanout, w.as_deref(), &mut stream);
            Ok((keep.iter().map(|&p| row.cols[p]).collect(), keep.iter().map(|&p| row.ids[p]).collect()))
        })
        .collect::<Result<_, SampleError>>()?;
    let mut out = Sampled { offsets: Vec::with_capacity(centres.len() + 1), ..Sampled::default() };
    out.offsets.push(0);
    for (s, e) in per {
        out.sources.extend(s);
        out.edge_ids.extend(e);
        out.offsets.push(out.sources.len());
    }
    Ok(out)
}

/// `targets` first and unchanged, then each element of `neighbors` not
/// seen before, in order of first appearance; and for every neighbour its
/// index in that list (a neighbour equal to a target gets the target's
/// first index).
pub fn append_unique<T: Copy + Eq + std::hash::Hash>(targets: &[T], neighbors: &[T]) -> (Vec<T>, Vec<usize>) {
    let mut list = targets.to_vec();
    let mut index: HashMap<T, usize> = HashMap::with_capacity(targets.len() + neighbors.len());
    for (i, &t) in targets.iter().enumerate() {
        index.entry(t).or_insert(i);
    }
    let at = neighbors
        .iter()
        .map(|&n| {
            *index.entry(n).or_insert_with(|| {
                list.push(n);
                list.len() - 1
            })
        })
        .collect();
    (list, at)
}

/// The centres this rank samples: those its shard owns, or (a graph every
/// rank reads whole) contiguous blocks of rows
/// ([`crate::partition::owned_range`]); the results of all ranks gathered
/// into centre order on every rank.
fn sample_hop_sharded(
    reader: &RowReader<'_>,
    num_rows: usize,
    centres: &[u32],
    req: &HopRequest<'_>,
    comm: &dyn Communicator,
) -> Result<Sampled, SampleError> {
    // Refuse out-of-range centres on every rank alike.
    if let Some(&c) = centres.iter().find(|&&c| c as usize >= num_rows) {
        return Err(SampleError::CentreOutOfRange { centre: i64::from(c), num_rows });
    }
    let owned: Range<usize> = crate::partition::owned_range(num_rows, comm.size(), comm.rank());
    let mine: Vec<usize> = (0..centres.len())
        .filter(|&i| match reader {
            RowReader::Shard { .. } => reader.holds(centres[i]),
            RowReader::Rows { .. } => owned.contains(&(centres[i] as usize)),
        })
        .collect();
    let mine_centres: Vec<u32> = mine.iter().map(|&i| centres[i]).collect();
    let local = sample_rows(reader, num_rows, &mine_centres, req)?;
    // Per owned centre: its index in `centres`, its count, then (source, edge id) pairs.
    let mut bytes = Vec::new();
    for (k, &i) in mine.iter().enumerate() {
        let run = local.offsets[k]..local.offsets[k + 1];
        bytes.extend_from_slice(&(i as u64).to_le_bytes());
        bytes.extend_from_slice(&(run.len() as u64).to_le_bytes());
        for p in run {
            bytes.extend_from_slice(&u64::from(local.sources[p]).to_le_bytes());
            bytes.extend_from_slice(&local.edge_ids[p].to_le_bytes());
        }
    }
    let all = comm.all_gather_bytes(&bytes)?;
    let mut per: Vec<Option<(Vec<u32>, Vec<u64>)>> = vec![None; centres.len()];
    for part in &all {
        let words: Vec<u64> = part.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect();
        if part.len() % 8 != 0 {
            return Err(SampleError::Corrupt("a message is not a whole number of words".into()));
        }
        let mut at = 0;
        while at < words.len() {
            let (i, n) = match (words.get(at), words.get(at + 1)) {
                (Some(&i), Some(&n)) => (i as usize, n as usize),
                _ => return Err(SampleError::Corrupt("a message ends inside a centre".into())),
            };
            let pairs = words.get(at + 2..at + 2 + 2 * n).ok_or_else(|| SampleError::Corrupt("a short centre".into()))?;
            let slot = per.get_mut(i).ok_or_else(|| SampleError::Corrupt(format!("centre index {i}")))?;
            *slot =
                Some((pairs.iter().step_by(2).map(|&s| s as u32).collect(), pairs.iter().skip(1).step_by(2).copied().collect()));
            at += 2 + 2 * n;
        }
    }
    let mut out = Sampled { offsets: vec![0], ..Sampled::default() };
    for (i, slot) in per.into_iter().enumerate() {
        let (s, e) = slot.ok_or_else(|| SampleError::Corrupt(format!("no rank sampled centre {}", centres[i])))?;
        out.sources.extend(s);
        out.edge_ids.extend(e);
        out.offsets.push(out.sources.len());
    }
    Ok(out)
}

/// The order in which epoch `epoch` visits `n` seeds: a Fisher–Yates
/// permutation of `0..n` keyed by (`seed`, `epoch`) alone, the same for a
/// loader over an in-process graph and one over a graph store.
pub fn epoch_order(n: usize, seed: u64, epoch: u64) -> Vec<usize> {
    let mut p: Vec<usize> = (0..n).collect();
    let mut state = mix(mix(seed) ^ mix(epoch ^ 0x5348_5546_464C_4500));
    for i in (1..n).rev() {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let j = ((u128::from(mix(state)) * (i as u128 + 1)) >> 64) as usize;
        p.swap(i, j);
    }
    p
}

/// [`sample_multi_hop`] as a [`MiniBatch`]: the block kernels run on, the
/// seeds its first `seeds.len()` nodes, `seed` recorded as its sample seed.
pub fn sample_mini_batch(
    r: &dyn Realization,
    seeds: &[u32],
    fanouts: &[i64],
    seed: u64,
    weights: Option<&[f64]>,
    comm: Option<&dyn Communicator>,
) -> Result<MiniBatch, SampleError> {
    let m = sample_multi_hop(r, seeds, fanouts, seed, weights, comm)?;
    let nodes = m.nodes.iter().map(|&n| i64::from(n)).collect();
    MiniBatch::new(nodes, seeds.len(), m.hops, seed).map_err(SampleError::Block)
}

/// Samples `fanouts.len()` hops from `seeds` (PyG's `num_neighbors`): hop
/// 0's centres are the seeds, hop k's the nodes first reached at hop k − 1.
/// With a communicator, each rank samples the centres it owns and every
/// rank ends with the same result, the one a single process computes; on
/// a sharded graph its own communicator is used and `comm` is ignored.
pub fn sample_multi_hop(
    r: &dyn Realization,
    seeds: &[u32],
    fanouts: &[i64],
    seed: u64,
    weights: Option<&[f64]>,
    comm: Option<&dyn Communicator>,
) -> Result<MultiHop, SampleError> {
    if fanouts.len() > 1 && r.num_src() != r.num_dst() {
        return Err(SampleError::NotSquare { num_src: r.num_src(), num_dst: r.num_dst() });
    }
    let mut out = MultiHop { nodes: seeds.to_vec(), hops: Vec::new() };
    let mut index: HashMap<u32, usize> = HashMap::new();
    for (i, &s) in seeds.iter().enumerate() {
        index.entry(s).or_insert(i);
    }
    let reader = RowReader::new(r)?;
    let comm = match crate::shard::sharded(r) {
        Some(sh) => Some(sh.comm().as_ref()),
        None => comm,
    };
    let mut frontier: Vec<usize> = (0..seeds.len()).collect();
    for (hop, &fanout) in fanouts.iter().enumerate() {
        let centres: Vec<u32> = frontier.iter().map(|&i| out.nodes[i]).collect();
        let req = HopRequest { fanout, seed, hop: hop as u32, weights };
        check_request(r, &req)?;
        let s = match comm {
            Some(c) if c.size() > 1 => sample_hop_sharded(&reader, r.num_dst(), &centres, &req, c)?,
            _ => sample_rows(&reader, r.num_dst(), &centres, &req)?,
        };
        let mut h = Hop::default();
        let mut next = Vec::new();
        for (k, &centre_local) in frontier.iter().enumerate() {
            for p in s.offsets[k]..s.offsets[k + 1] {
                let n = s.sources[p];
                let local = *index.entry(n).or_insert_with(|| {
                    out.nodes.push(n);
                    next.push(out.nodes.len() - 1);
                    out.nodes.len() - 1
                });
                h.src.push(local as u32);
                h.dst.push(centre_local as u32);
                h.edge_ids.push(s.edge_ids[p]);
            }
        }
        out.hops.push(h);
        frontier = next;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_order_is_a_permutation() {
        let mut p = epoch_order(1000, 3, 1);
        assert_ne!(p, (0..1000).collect::<Vec<_>>());
        assert_ne!(p, epoch_order(1000, 3, 2));
        p.sort_unstable();
        assert_eq!(p, (0..1000).collect::<Vec<_>>());
    }
}
