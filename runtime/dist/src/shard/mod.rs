//! Halo-sharded graphs: one realization per rank of a job.
//!
//! Each rank owns a block of destination rows (and of source rows) and a
//! local CSR over [owned sources | ghosts] (see [`plan`]). Before a kernel
//! runs, each rank sends the rows of its source fields that peers read and
//! receives its ghosts' rows (the halo exchange, [`Sharded::start_halo`]);
//! after a backward, each rank sends its ghosts' gradient rows back to
//! their owners, which add them in peer-rank order
//! ([`Sharded::return_ghosts`]), so the sum does not depend on timing.
//!
//! Every message is a 16-byte header (magic, kind, row bytes, rows) and
//! then the rows, slot by slot, each slot's fields one after the other:
//! ghost rows × row bytes + 16 bytes per peer and exchange. A message whose
//! size or header is not the one the plan expects is an error naming the
//! peer, never a misread.
//!
//! Ranks must agree on the graph: [`Sharded::from_graph`] compares a
//! checksum of it across ranks and refuses to build when they differ.

pub mod call;
pub mod file;
mod layer;
pub mod plan;

use std::sync::atomic::Ordering;
use std::sync::Arc;

pub use plan::{edge_cut, plan_all, LocalShard, PlanError, ShardPlan};

use crate::comm::{check_same, CommError, Communicator, PendingExchange};
use crate::partition::{Method, Partition, PartitionError};
use tiga_runtime::exec::{ExecError, Side};
use tiga_runtime::{Data, DataMut, Graph, Realization, Rows, Tensor};

/// Bytes of a halo message's header.
pub const HEADER_BYTES: usize = 16;
const MAGIC: u16 = 0x7467; // "tg"

/// What a message carries (its header's kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
enum Kind {
    Halo = 1,
    Gradients = 2,
    Gather = 3,
}

/// Why a sharded graph could not be built or exchanged.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error(transparent)]
    Comm(#[from] CommError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Partition(#[from] PartitionError),
    #[error("a malformed message from rank {peer}: {what}")]
    Malformed { peer: usize, what: String },
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Partitioned(#[from] crate::partitioned::PartitionedError),
    /// A call's field with no rows to place.
    #[error("{role} field `{name}` is a scalar; a sharded call needs its rows")]
    ScalarField { role: &'static str, name: String },
    /// A call's field in neither numbering.
    #[error(
        "{role} field `{name}` has {got} rows: a sharded call takes the whole array ({global} rows, the user's numbering) \
         or rank {rank}'s own rows ({owned})"
    )]
    FieldRows { role: &'static str, name: String, got: usize, global: usize, owned: usize, rank: usize },
    /// An edge field in owned order on a deep halo, whose ghost rows read
    /// edges no rank owns.
    #[error(
        "edge field `{name}`: a halo deeper than 1 computes ghost rows too, whose edges only the whole array has: pass \
         it in the user's numbering ({rows} rows)"
    )]
    DeepEdgeField { name: String, rows: usize },
    /// A cotangent in neither numbering.
    #[error("the cotangent of `{name}` has {got} rows: give the whole array ({global}) or this rank's own ({owned})")]
    CotangentRows { name: String, got: usize, global: usize, owned: usize },
    /// A half-precision value where a sharded call adds (refused up front).
    #[error("{0} in half precision: a sharded call adds f32 and f64 only")]
    Half(&'static str),
    /// Something a call moved out did not come back (a bug).
    #[error("{0} went missing")]
    Lost(&'static str),
    #[error(
        "kernel `{kernel}`: sharded calls take f32 and f64 fields and outputs only (half-precision fields run over a \
         graph or stencil in memory)"
    )]
    HalfCall { kernel: String },
    #[error(
        "this tape holds the residuals of a shard one hop deep; this shard's halo is {depth} deep (its backward \
         recomputes them): differentiate over the shard that ran the forward"
    )]
    DeepTape { depth: usize },
    #[error("iterating feeds an output back as a source field: the graph must be square")]
    IterateNotSquare,
    #[error("iterate: source field `{into}` is not among the inputs")]
    IterateNoField { into: String },
    #[error("iterate: output `{feed}` is {out_dtype} {out_row:?} per row, source field `{into}` {in_dtype} {in_row:?}")]
    IterateMismatch {
        feed: String,
        out_dtype: tiga_runtime::DType,
        out_row: Vec<usize>,
        into: String,
        in_dtype: tiga_runtime::DType,
        in_row: Vec<usize>,
    },
}

/// How to cut a graph across ranks.
#[derive(Debug, Clone, Default)]
pub enum PartitionChoice {
    /// Equal row counts ([`crate::partition::owned_range`]).
    #[default]
    Contiguous,
    /// Contiguous blocks of about equal edges.
    Balanced,
    /// METIS on the symmetrized graph (cargo feature `metis`).
    Metis,
    /// A partition made elsewhere (of the destination rows).
    Given(Partition),
}

/// How to shard: the partition of the rows and the halo depth.
#[derive(Debug, Clone)]
pub struct ShardOptions {
    pub partition: PartitionChoice,
    /// Hops of ghosts kept: k lets k chained steps run with one exchange.
    pub depth: usize,
}

impl Default for ShardOptions {
    fn default() -> Self {
        ShardOptions { partition: PartitionChoice::Contiguous, depth: 1 }
    }
}

/// The partitions of a graph's destinations and sources for `world` ranks:
/// a square graph's sources follow its destinations; a bipartite graph's
/// sources are cut in contiguous blocks.
pub fn partitions(graph: &Graph, choice: &PartitionChoice, world: usize) -> Result<(Partition, Partition), PartitionError> {
    let dst = match choice {
        PartitionChoice::Contiguous => Partition::contiguous(graph.num_dst(), world)?,
        PartitionChoice::Balanced => Partition::balanced(graph.offsets(), world)?,
        PartitionChoice::Metis => {
            if graph.num_src() != graph.num_dst() {
                return Err(PartitionError::NotSquare { num_src: graph.num_src(), num_dst: graph.num_dst() });
            }
            Partition::metis(graph.num_dst(), graph.offsets(), graph.cols(), world)?
        }
        PartitionChoice::Given(p) => p.clone(),
    };
    let src = if graph.num_src() == graph.num_dst() { dst.clone() } else { Partition::contiguous(graph.num_src(), world)? };
    Ok((dst, src))
}

/// A partition of `nodes` rows made once, at rank 0, by `make` (METIS,
/// which every rank would otherwise run for the same answer; or one that
/// needs a file's whole adjacency, which only rank 0 reads), and sent to
/// every rank. A failure at rank 0 is sent instead, so every rank fails
/// with its message.
pub fn partition_at_root(
    comm: &dyn Communicator,
    nodes: usize,
    method: Method,
    make: impl FnOnce() -> Result<Partition, ShardError>,
) -> Result<Partition, ShardError> {
    let mine: Vec<u8> = if comm.rank() == 0 {
        match make() {
            Ok(p) => std::iter::once(1u8).chain(p.parts_by_node().iter().flat_map(|x| x.to_le_bytes())).collect(),
            Err(e) => std::iter::once(0u8).chain(e.to_string().into_bytes()).collect(),
        }
    } else {
        Vec::new()
    };
    let all = comm.all_gather_bytes(&mine)?;
    let got = all.first().map(Vec::as_slice).unwrap_or_default();
    match got.split_first() {
        Some((1, body)) if body.len() == nodes * 4 => {
            let parts = body.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            Ok(Partition::from_parts(parts, comm.size())?.with_method(method))
        }
        Some((0, msg)) => Err(ShardError::Usage(format!("rank 0 could not partition: {}", String::from_utf8_lossy(msg)))),
        _ => Err(ShardError::Malformed { peer: 0, what: format!("a partition of {} bytes for {nodes} rows", got.len()) }),
    }
}

/// A checksum of a graph's CSR and edge order (ranks compare it at setup).
pub fn graph_checksum(graph: &Graph) -> u64 {
    let mut h = crc32fast::Hasher::new();
    for x in [graph.num_src(), graph.num_dst(), graph.num_edges()] {
        h.update(&(x as u64).to_le_bytes());
    }
    for &o in graph.offsets() {
        h.update(&o.to_le_bytes());
    }
    for &c in graph.cols() {
        h.update(&c.to_le_bytes());
    }
    if let Some(ids) = graph.edge_ids() {
        for &e in ids {
            h.update(&e.to_le_bytes());
        }
    }
    let crc = h.finalize() as u64;
    crc | ((graph.num_edges() as u64 & 0xffff_ffff) << 32)
}

/// One rank's part of a halo-sharded graph and the communicator its
/// exchanges go through (see the module doc).
#[derive(Debug)]
pub struct Sharded {
    plan: ShardPlan,
    comm: Arc<dyn Communicator>,
    method: Method,
    /// The owned edges' user ids, increasing, and each owned local edge's
    /// position among them; `None` when the local edges are in that order
    /// already (the graph's CSR order is its edge order). Owned rows need
    /// no such map: the plan numbers them in increasing user id.
    owned_edges: Vec<u64>,
    edge_pos: Option<Vec<u32>>,
    /// Values already found equal on every rank ([`Sharded::check_once`]).
    agreed: std::sync::Mutex<Vec<u64>>,
    /// Slot fields of finished calls, for the next call's
    /// ([`Sharded::slot_buffer`]).
    spare: std::sync::Mutex<Vec<Tensor>>,
    /// The file the graph was read from ([`Sharded::from_gfg`]).
    file: Option<tiga_storage::GfgFile>,
    /// The local CSR written to a file, its rows run from its pages
    /// ([`Sharded::page_local`]).
    paged: Option<PagedLocal>,
    stats: Stats,
}

/// A rank's local CSR in a file of its own, removed when the shard goes.
#[derive(Debug)]
struct PagedLocal {
    file: tiga_storage::GfgFile,
    path: std::path::PathBuf,
}

impl Drop for PagedLocal {
    fn drop(&mut self) {
        // A file this shard wrote for itself; nothing else reads it.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Halo exchanges so far ([`Sharded::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ExchangeStats {
    pub exchanges: u64,
    /// Bytes sent to peers (headers included).
    pub bytes_sent: u64,
    /// Time from each exchange's start to its rows written into the ghost
    /// slots, summed.
    pub total_ms: f64,
    /// Of which the caller was blocked waiting for peers' messages: what
    /// the interior rows did not hide.
    pub wait_ms: f64,
}

#[derive(Debug, Default)]
struct Stats {
    exchanges: std::sync::atomic::AtomicU64,
    bytes_sent: std::sync::atomic::AtomicU64,
    total_ns: std::sync::atomic::AtomicU64,
    wait_ns: std::sync::atomic::AtomicU64,
}

/// Positions of `local` in its sorted order, and that order.
fn sorted_positions<T: Ord + Copy>(local: &[T]) -> (Vec<T>, Vec<u32>) {
    let mut idx: Vec<u32> = (0..local.len() as u32).collect();
    idx.sort_by_key(|&i| local[i as usize]);
    let sorted = idx.iter().map(|&i| local[i as usize]).collect();
    let mut pos = vec![0u32; local.len()];
    for (k, &i) in idx.iter().enumerate() {
        pos[i as usize] = k as u32;
    }
    (sorted, pos)
}

/// A sharded graph is a realization whose calls run through the halo
/// path (the facade finds it with [`sharded`]); its sizes are this rank's
/// local ones (owned rows and ghosts).
impl Realization for Sharded {
    fn num_src(&self) -> usize {
        self.local().num_src
    }
    fn num_dst(&self) -> usize {
        self.local().num_dst
    }
    fn num_edges(&self) -> usize {
        self.local().num_edges
    }
    fn rows(&self, _side: Side, _edge_ids: bool) -> Result<Rows<'_>, ExecError> {
        Err(ExecError::Unavailable("a sharded graph's rows are run through its halo exchange, not walked directly".into()))
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
    fn layer(&self) -> Option<&dyn tiga_runtime::Layer> {
        Some(self)
    }
    fn describe(&self) -> String {
        Sharded::describe(self)
    }
}

/// This rank's shard when `r` is a halo-sharded graph: a call over it
/// localizes its inputs, exchanges ghosts and runs the local rows.
pub fn sharded(r: &dyn Realization) -> Option<&Sharded> {
    r.as_any()?.downcast_ref::<Sharded>()
}

impl Sharded {
    /// This rank's part of `graph` (every rank passes the same graph: a
    /// checksum is compared, and a rank whose graph differs makes every
    /// rank fail with a message naming it).
    pub fn from_graph(graph: &Graph, comm: Arc<dyn Communicator>, options: &ShardOptions) -> Result<Sharded, ShardError> {
        check_same(comm.as_ref(), "graph", graph_checksum(graph))?;
        let (dst, src) = match options.partition {
            // METIS once, at rank 0 (every rank would compute the same).
            PartitionChoice::Metis => {
                let dst = partition_at_root(comm.as_ref(), graph.num_dst(), Method::Metis, || {
                    Ok(partitions(graph, &options.partition, comm.size())?.0)
                })?;
                (dst.clone(), dst)
            }
            _ => partitions(graph, &options.partition, comm.size())?,
        };
        let local = LocalShard::build(graph, &dst, &src, comm.rank(), options.depth)?;
        let plan = exchange_requests(comm.as_ref(), local)?;
        Ok(Self::from_plan(plan, comm, dst.method()))
    }

    /// A sharded graph from a finished plan (whose rank and world are the
    /// communicator's).
    pub fn from_plan(plan: ShardPlan, comm: Arc<dyn Communicator>, method: Method) -> Sharded {
        let l = &plan.local;
        let (owned_edges, edge_pos) = sorted_positions(&l.edge_ids[..l.owned_edges]);
        let in_order = edge_pos.iter().enumerate().all(|(i, &p)| i == p as usize);
        Sharded {
            plan,
            comm,
            method,
            owned_edges,
            edge_pos: (!in_order).then_some(edge_pos),
            agreed: Default::default(),
            spare: Default::default(),
            file: None,
            paged: None,
            stats: Stats::default(),
        }
    }

    pub fn plan(&self) -> &ShardPlan {
        &self.plan
    }
    pub fn local(&self) -> &LocalShard {
        &self.plan.local
    }

    /// The rows this rank runs (owned, then a deep halo's ghost rows, over
    /// the slots): the local CSR in memory, or its file once paged.
    pub fn local_rows(&self) -> Result<&dyn Realization, ShardError> {
        match (&self.paged, &self.plan.local.graph) {
            (Some(p), _) => Ok(&p.file),
            (None, Some(g)) => Ok(g),
            (None, None) => Err(ShardError::Usage("this shard's local rows are neither in memory nor in a file".into())),
        }
    }

    /// Whether the local rows run from a file's pages ([`Sharded::page_local`]).
    pub fn is_paged(&self) -> bool {
        self.paged.is_some()
    }

    /// Write this rank's local CSR (and its transpose, for a backward) to a
    /// `.gfg` of its own in `dir` and drop it from memory: calls then run
    /// the local rows page by page as the schedule says (page rows,
    /// prefetch, RAM budget), as a single-process call over a file does,
    /// around the same halo exchange. The file is written whole beside its
    /// name, fsynced and renamed, and removed when the shard is dropped.
    /// Kept in memory: the plan's row and slot ids, each local edge's user
    /// id and the exchange lists (O(rows + edges) words, not the CSR).
    pub fn page_local(&mut self, dir: &std::path::Path) -> Result<(), ShardError> {
        static WRITTEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let Some(graph) = self.plan.local.graph.as_ref() else { return Ok(()) };
        let n = WRITTEN.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!("tiga-shard-{}-rank{}-{n}.gfg", std::process::id(), self.rank()));
        let written = tiga_storage::GfgWriter::new(graph).with_transpose(true).save(&path);
        let opened = written.and_then(|()| tiga_storage::GfgFile::open(&path));
        let file = opened.map_err(|e| {
            let _ = std::fs::remove_file(&path);
            ShardError::Usage(format!("writing rank {}'s rows to {}: {e}", self.rank(), dir.display()))
        })?;
        self.paged = Some(PagedLocal { file, path });
        self.plan.local.graph = None;
        Ok(())
    }
    pub fn comm(&self) -> &Arc<dyn Communicator> {
        &self.comm
    }
    pub fn method(&self) -> Method {
        self.method
    }
    pub fn rank(&self) -> usize {
        self.plan.local.rank
    }
    pub fn world(&self) -> usize {
        self.plan.local.world
    }
    /// The destination rows this rank owns, as user ids, increasing: the
    /// order of its outputs and of per-rank destination inputs.
    /// This rank's rows of a field held in a partitioned tensor (WholeMemory
    /// style): the rows of the role's owned ids, gathered by user id, in
    /// the owned order a sharded call takes a field in. Given to a call as
    /// that field, the run is the one with the dense field, bit for bit:
    /// ghosts then travel through the halo as for any field. Collective
    /// over the tensor's ranks.
    pub fn rows_from(
        &self,
        role: tiga_storage::FieldRole,
        t: &crate::partitioned::PartitionedTensor,
    ) -> Result<tiga_runtime::Tensor, ShardError> {
        use tiga_runtime::element::ElementType;
        let ids = self.owned_ids(role);
        if t.shape().first().copied() != Some(self.role_rows(role)) {
            return Err(ShardError::Usage(format!(
                "a partitioned tensor of shape {:?} for a field with {} rows",
                t.shape(),
                self.role_rows(role)
            )));
        }
        let mut shape = vec![ids.len()];
        shape.extend_from_slice(&t.shape()[1..]);
        let bad = |e: tiga_runtime::TensorError| ShardError::Usage(e.to_string());
        match t.dtype() {
            ElementType::F32 => tiga_runtime::Tensor::from_f32(shape, t.gather::<f32>(&ids)?).map_err(bad),
            ElementType::F64 => tiga_runtime::Tensor::from_f64(shape, t.gather::<f64>(&ids)?).map_err(bad),
            other => Err(ShardError::Usage(format!("a kernel field is f32 or f64; this partitioned tensor holds {other:?}"))),
        }
    }

    /// Writes this rank's owned rows (a sharded call's output or gradient
    /// of `role`, in owned order) into a partitioned tensor by user id.
    /// Collective over the tensor's ranks.
    pub fn rows_into(
        &self,
        role: tiga_storage::FieldRole,
        rows: &tiga_runtime::Tensor,
        t: &crate::partitioned::PartitionedTensor,
    ) -> Result<(), ShardError> {
        let ids = self.owned_ids(role);
        if rows.shape().first().copied() != Some(ids.len()) {
            return Err(ShardError::Usage(format!(
                "{} rows for this rank's {} owned rows",
                rows.shape().first().unwrap_or(&0),
                ids.len()
            )));
        }
        match rows.data() {
            tiga_runtime::Data::F32(d) => t.scatter(&ids, d)?,
            tiga_runtime::Data::F64(d) => t.scatter(&ids, d)?,
            tiga_runtime::Data::F16(d) => t.scatter(&ids, d)?,
            tiga_runtime::Data::BF16(d) => t.scatter(&ids, d)?,
        }
        Ok(())
    }

    fn owned_ids(&self, role: tiga_storage::FieldRole) -> Vec<i64> {
        use tiga_storage::FieldRole;
        match role {
            FieldRole::Src => self.owned_src().iter().map(|&i| i64::from(i)).collect(),
            FieldRole::Dst => self.owned_dst().iter().map(|&i| i64::from(i)).collect(),
            FieldRole::Edge => self.owned_edges().iter().map(|&e| e as i64).collect(),
        }
    }

    fn role_rows(&self, role: tiga_storage::FieldRole) -> usize {
        use tiga_storage::FieldRole;
        let l = self.local();
        match role {
            FieldRole::Src => l.num_src,
            FieldRole::Dst => l.num_dst,
            FieldRole::Edge => l.num_edges,
        }
    }

    pub fn owned_dst(&self) -> &[u32] {
        &self.plan.local.rows[..self.plan.local.owned_rows]
    }
    /// The sources this rank owns, as user ids, increasing: the order of
    /// its source gradients and of per-rank source inputs.
    pub fn owned_src(&self) -> &[u32] {
        &self.plan.local.slots[..self.plan.local.owned_slots]
    }
    /// The edges into the owned rows, as user edge ids, increasing: the
    /// order of per-rank edge inputs, edge outputs and edge gradients.
    pub fn owned_edges(&self) -> &[u64] {
        &self.owned_edges
    }
    /// For each owned local edge, its position in [`Sharded::owned_edges`];
    /// `None` when they are in that order already.
    pub fn edge_positions(&self) -> Option<&[u32]> {
        self.edge_pos.as_deref()
    }

    /// Start the halo exchange of source fields shaped [slots, ...] whose
    /// owned rows are filled: the peers' rows arrive in the background
    /// while the caller computes rows that read no ghost.
    pub fn start_halo(&self, fields: &[&Tensor]) -> Result<Halo, ShardError> {
        let l = &self.plan.local;
        let row_bytes = check_slot_fields(fields, l.slots.len())?;
        let sends: Vec<Vec<u8>> =
            self.plan.send.iter().map(|list| pack(Kind::Halo, row_bytes, list.iter().map(|&s| s as usize), fields)).collect();
        let recv_lens = l.recv.iter().map(|r| HEADER_BYTES + r.len() * row_bytes).collect();
        let sent: usize = sends.iter().enumerate().filter(|(p, _)| *p != l.rank).map(|(_, m)| m.len()).sum();
        let started = std::time::Instant::now();
        let pending = self.comm.start_all_to_all_v(sends, recv_lens)?;
        self.stats.bytes_sent.fetch_add(sent as u64, Ordering::Relaxed);
        Ok(Halo { pending, row_bytes, started })
    }

    /// The halo exchanges so far.
    pub fn stats(&self) -> ExchangeStats {
        let s = &self.stats;
        ExchangeStats {
            exchanges: s.exchanges.load(Ordering::Relaxed),
            bytes_sent: s.bytes_sent.load(Ordering::Relaxed),
            total_ms: s.total_ns.load(Ordering::Relaxed) as f64 / 1e6,
            wait_ms: s.wait_ns.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }

    /// Start counting [`Sharded::stats`] from zero.
    pub fn reset_stats(&self) {
        let s = &self.stats;
        for a in [&s.exchanges, &s.bytes_sent, &s.total_ns, &s.wait_ns] {
            a.store(0, Ordering::Relaxed);
        }
    }

    /// Send the ghost slots' gradient rows (fields shaped [slots, ...]) to
    /// their owners and add what peers sent into the owned slots, peer by
    /// peer in rank order. Ghost rows are left as they were.
    pub fn return_ghosts(&self, grads: &mut [Tensor]) -> Result<(), ShardError> {
        let l = &self.plan.local;
        let views: Vec<&Tensor> = grads.iter().collect();
        let row_bytes = check_slot_fields(&views, l.slots.len())?;
        let sends: Vec<Vec<u8>> = l.recv.iter().map(|r| pack(Kind::Gradients, row_bytes, r.clone(), &views)).collect();
        let recv_lens = self.plan.send.iter().map(|list| HEADER_BYTES + list.len() * row_bytes).collect();
        let got = self.comm.all_to_all_v(sends, recv_lens)?;
        for (peer, msg) in got.iter().enumerate() {
            if peer == self.rank() {
                continue;
            }
            let list = &self.plan.send[peer];
            let body = check_header(peer, msg, Kind::Gradients, row_bytes, list.len())?;
            let mut at = 0;
            for &slot in list {
                for g in grads.iter_mut() {
                    let rb = row_bytes_of(g);
                    add_row(g, slot as usize, &body[at..at + rb]);
                    at += rb;
                }
            }
        }
        Ok(())
    }

    /// Rows of `t` (one per entry of `ids`, the user ids of this rank's
    /// rows) gathered at rank 0 into a tensor of `total` rows in the user's
    /// numbering; `None` on the other ranks. Ranks' ids must not overlap.
    pub fn gather(&self, t: &Tensor, ids: &[u64], total: usize) -> Result<Option<Tensor>, ShardError> {
        let rows = t.shape().first().copied().unwrap_or(0);
        if rows != ids.len() {
            return Err(ShardError::Usage(format!("gather: {} rows but {} ids", rows, ids.len())));
        }
        let rb = row_bytes_of(t);
        let mut msg = Vec::with_capacity(HEADER_BYTES + ids.len() * (8 + rb));
        header(&mut msg, Kind::Gather, rb, ids.len());
        for &id in ids {
            msg.extend_from_slice(&id.to_le_bytes());
        }
        msg.extend_from_slice(t.data().as_bytes());
        let lens = self.comm.all_gather_bytes(&(msg.len() as u64).to_le_bytes())?;
        let world = self.world();
        let mut sends: Vec<Vec<u8>> = vec![Vec::new(); world];
        let mut recv_lens = vec![0usize; world];
        if self.rank() == 0 {
            for (p, l) in lens.iter().enumerate() {
                let l = <[u8; 8]>::try_from(l.as_slice())
                    .map_err(|_| ShardError::Malformed { peer: p, what: "a gather length that is not 8 bytes".into() })?;
                recv_lens[p] = u64::from_le_bytes(l) as usize;
            }
        }
        sends[0] = msg;
        let got = self.comm.all_to_all_v(sends, recv_lens)?;
        if self.rank() != 0 {
            return Ok(None);
        }
        let mut shape = t.shape().to_vec();
        shape[0] = total;
        let mut out = Tensor::zeros(t.dtype(), shape).map_err(|e| ShardError::Usage(e.to_string()))?;
        let mut filled = vec![false; total];
        for (peer, msg) in got.iter().enumerate() {
            let (prb, n) = read_header(peer, msg, Kind::Gather)?;
            if prb != rb || msg.len() != HEADER_BYTES + n * (8 + rb) {
                return Err(ShardError::Malformed {
                    peer,
                    what: format!("a gather of {n} rows of {prb} bytes in {} bytes", msg.len()),
                });
            }
            let (idb, body) = msg[HEADER_BYTES..].split_at(n * 8);
            for (k, idc) in idb.chunks_exact(8).enumerate() {
                let mut a = [0u8; 8];
                a.copy_from_slice(idc);
                let id = u64::from_le_bytes(a) as usize;
                if id >= total || std::mem::replace(&mut filled[id], true) {
                    return Err(ShardError::Malformed { peer, what: format!("row {id} out of range or sent twice") });
                }
                set_row(&mut out, id, &body[k * rb..(k + 1) * rb]);
            }
        }
        if let Some(missing) = filled.iter().position(|f| !f) {
            return Err(ShardError::Usage(format!("gather: no rank sent row {missing}")));
        }
        Ok(Some(out))
    }

    /// Check once per value that every rank holds the same `value` for
    /// `what` (a kernel's checksum before its first call): collective the
    /// first time, free after. Ranks must call it alike.
    pub fn check_once(&self, what: &str, value: u64) -> Result<(), ShardError> {
        let mut agreed = self.agreed.lock().map_err(|_| ShardError::Usage("a poisoned lock".into()))?;
        if !agreed.contains(&value) {
            check_same(self.comm.as_ref(), what, value)?;
            agreed.push(value);
        }
        Ok(())
    }

    /// A tensor for a call's slot field: a finished call's of the same
    /// dtype and shape ([`Sharded::recycle`]), its old values left for the
    /// caller to overwrite, or a new one. A chain of calls (each step's
    /// output the next one's input) then copies its owned rows into memory
    /// already mapped instead of faulting in a fresh buffer every step.
    pub fn slot_buffer(&self, dtype: tiga_runtime::DType, shape: &[usize]) -> Result<Tensor, ShardError> {
        if let Ok(mut spare) = self.spare.lock() {
            if let Some(i) = spare.iter().position(|t| t.dtype() == dtype && t.shape() == shape) {
                return Ok(spare.swap_remove(i));
            }
        }
        Tensor::for_overwrite(dtype, shape.to_vec()).map_err(|e| ShardError::Usage(e.to_string()))
    }

    /// Keep a finished call's slot field for the next call (at most a few).
    pub fn recycle(&self, t: Tensor) {
        const KEEP: usize = 8;
        if let Ok(mut spare) = self.spare.lock() {
            if spare.len() < KEEP && !t.is_file_backed() {
                spare.push(t);
            }
        }
    }

    /// One line for `explain`.
    pub fn describe(&self) -> String {
        let l = &self.plan.local;
        format!(
            "sharded (rank {} of {}, {}, {}; {} owned rows, {} edges, {} ghosts, depth {}{}; {} sources, {} destinations, {} edges in all)",
            l.rank,
            l.world,
            self.comm.engine(),
            self.method.name(),
            l.owned_rows,
            l.owned_edges,
            self.plan.ghost_rows(),
            l.depth,
            if self.paged.is_some() { ", rows paged from a local file" } else { "" },
            l.num_src,
            l.num_dst,
            l.num_edges
        )
    }
}

/// Send each rank the ids of the ghosts it owns for this one, and finish
/// the plan with what the peers asked of this rank.
pub fn exchange_requests(comm: &dyn Communicator, local: LocalShard) -> Result<ShardPlan, ShardError> {
    let reqs = local.requests();
    let counts: Vec<Vec<u8>> = reqs.iter().map(|r| (r.len() as u64).to_le_bytes().to_vec()).collect();
    let got = comm.all_to_all_v(counts, vec![8; comm.size()])?;
    let mut lens = Vec::with_capacity(got.len());
    for b in &got {
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        lens.push(u64::from_le_bytes(a) as usize * 4);
    }
    let sends = reqs.iter().map(|r| r.iter().flat_map(|u| u.to_le_bytes()).collect()).collect();
    let got = comm.all_to_all_v(sends, lens)?;
    let from: Vec<Vec<u32>> =
        got.iter().map(|b| b.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()).collect();
    Ok(ShardPlan::finish(local, from)?)
}

/// A halo exchange in flight ([`Sharded::start_halo`]).
#[derive(Debug)]
pub struct Halo {
    pending: PendingExchange,
    row_bytes: usize,
    started: std::time::Instant,
}

impl Halo {
    /// Wait for the peers' rows and write them into the ghost slots of
    /// `fields` (the tensors the exchange was started from, in order).
    pub fn finish(self, sharded: &Sharded, fields: &mut [Tensor]) -> Result<(), ShardError> {
        let waiting = std::time::Instant::now();
        let got = self.pending.wait()?;
        let waited = waiting.elapsed();
        let l = &sharded.plan.local;
        for (peer, msg) in got.iter().enumerate() {
            if peer == l.rank {
                continue;
            }
            let slots = l.recv[peer].clone();
            let body = check_header(peer, msg, Kind::Halo, self.row_bytes, slots.len())?;
            let mut at = 0;
            for slot in slots {
                for f in fields.iter_mut() {
                    let rb = row_bytes_of(f);
                    set_row(f, slot, &body[at..at + rb]);
                    at += rb;
                }
            }
        }
        let s = &sharded.stats;
        s.exchanges.fetch_add(1, Ordering::Relaxed);
        s.wait_ns.fetch_add(waited.as_nanos() as u64, Ordering::Relaxed);
        s.total_ns.fetch_add(self.started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(())
    }
}

fn row_bytes_of(t: &Tensor) -> usize {
    t.shape().iter().skip(1).product::<usize>() * t.dtype().size()
}

/// The bytes of one slot across `fields`, checking each has `slots` rows.
fn check_slot_fields(fields: &[&Tensor], slots: usize) -> Result<usize, ShardError> {
    let mut row_bytes = 0;
    for f in fields {
        if f.shape().first().copied() != Some(slots) {
            return Err(ShardError::Usage(format!("a halo field of shape {:?}, but this rank has {slots} slots", f.shape())));
        }
        row_bytes += row_bytes_of(f);
    }
    Ok(row_bytes)
}

fn header(out: &mut Vec<u8>, kind: Kind, row_bytes: usize, rows: usize) {
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&(kind as u16).to_le_bytes());
    out.extend_from_slice(&(row_bytes as u32).to_le_bytes());
    out.extend_from_slice(&(rows as u64).to_le_bytes());
}

fn read_header(peer: usize, msg: &[u8], kind: Kind) -> Result<(usize, usize), ShardError> {
    let bad = |what: String| ShardError::Malformed { peer, what };
    if msg.len() < HEADER_BYTES {
        return Err(bad(format!("{} bytes, shorter than a header", msg.len())));
    }
    let u16_at = |i: usize| u16::from_le_bytes([msg[i], msg[i + 1]]);
    if u16_at(0) != MAGIC || u16_at(2) != kind as u16 {
        return Err(bad(format!("header {:04x}/{} where {:04x}/{} was expected", u16_at(0), u16_at(2), MAGIC, kind as u16)));
    }
    let rb = u32::from_le_bytes([msg[4], msg[5], msg[6], msg[7]]) as usize;
    let mut r = [0u8; 8];
    r.copy_from_slice(&msg[8..16]);
    Ok((rb, u64::from_le_bytes(r) as usize))
}

/// The body of a message that must hold `rows` rows of `row_bytes`.
fn check_header(peer: usize, msg: &[u8], kind: Kind, row_bytes: usize, rows: usize) -> Result<&[u8], ShardError> {
    let (rb, n) = read_header(peer, msg, kind)?;
    if rb != row_bytes || n != rows || msg.len() != HEADER_BYTES + rows * row_bytes {
        return Err(ShardError::Malformed {
            peer,
            what: format!(
                "{n} rows of {rb} bytes in {} bytes, where the plan expects {rows} rows of {row_bytes} bytes",
                msg.len()
            ),
        });
    }
    Ok(&msg[HEADER_BYTES..])
}

fn pack(kind: Kind, row_bytes: usize, slots: impl ExactSizeIterator<Item = usize>, fields: &[&Tensor]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + slots.len() * row_bytes);
    header(&mut out, kind, row_bytes, slots.len());
    let bytes: Vec<(&[u8], usize)> = fields.iter().map(|f| (f.data().as_bytes(), row_bytes_of(f))).collect();
    for s in slots {
        for &(b, rb) in &bytes {
            out.extend_from_slice(&b[s * rb..(s + 1) * rb]);
        }
    }
    out
}

/// Row `row` of `t` set to (or, `add`, increased by) the elements in
/// `bytes` (this machine's byte order).
fn write_row(t: &mut Tensor, row: usize, bytes: &[u8], add: bool) {
    fn write<T: Copy + std::ops::AddAssign, const N: usize>(
        d: &mut [T],
        row: usize,
        bytes: &[u8],
        add: bool,
        from: fn([u8; N]) -> T,
    ) {
        let w = bytes.len() / N;
        for (x, c) in d[row * w..(row + 1) * w].iter_mut().zip(bytes.chunks_exact(N)) {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            if add {
                *x += from(a);
            } else {
                *x = from(a);
            }
        }
    }
    match t.data_mut() {
        DataMut::F32(d) => write(d, row, bytes, add, f32::from_ne_bytes),
        DataMut::F64(d) => write(d, row, bytes, add, f64::from_ne_bytes),
        // Sharded calls refuse half-precision fields before anything is
        // exchanged (`check_sharded_field_types`); a half row is written
        // as it came.
        DataMut::F16(d) => write(d, row, bytes, add, tiga_runtime::f16::from_ne_bytes),
        DataMut::BF16(d) => write(d, row, bytes, add, tiga_runtime::bf16::from_ne_bytes),
    }
}

fn set_row(t: &mut Tensor, row: usize, bytes: &[u8]) {
    write_row(t, row, bytes, false)
}

fn add_row(t: &mut Tensor, row: usize, bytes: &[u8]) {
    write_row(t, row, bytes, true)
}

/// Rows `ids` of `t` (a [rows, ...] tensor) in that order.
pub fn take_rows(t: Data<'_>, shape: &[usize], ids: impl ExactSizeIterator<Item = usize>) -> Result<Tensor, ShardError> {
    take_rows_padded(t, shape, ids, 0)
}

/// Rows `ids` of `t` and then `extra` zero rows (a source field over a
/// rank's slots: its owned rows, then its ghosts' to come).
pub fn take_rows_padded(
    t: Data<'_>,
    shape: &[usize],
    ids: impl ExactSizeIterator<Item = usize>,
    extra: usize,
) -> Result<Tensor, ShardError> {
    let Some(_) = shape.first() else { return Err(ShardError::Usage("a scalar has no rows to take".into())) };
    let mut out_shape = shape.to_vec();
    out_shape[0] = ids.len() + extra;
    let mut out = Tensor::zeros(t.dtype(), out_shape).map_err(|e| ShardError::Usage(e.to_string()))?;
    take_rows_into(&mut out, t, shape, ids)?;
    Ok(out)
}

/// Rows `ids` of `t` written into the first rows of `out` (whose rows are
/// as wide); its other rows are left as they are.
pub fn take_rows_into(
    out: &mut Tensor,
    t: Data<'_>,
    shape: &[usize],
    ids: impl ExactSizeIterator<Item = usize>,
) -> Result<(), ShardError> {
    let Some(&n) = shape.first() else { return Err(ShardError::Usage("a scalar has no rows to take".into())) };
    let w: usize = shape.iter().skip(1).product();
    let rows = ids.len();
    if out.shape().iter().skip(1).product::<usize>() != w || out.shape().first().is_none_or(|&r| r < rows) {
        return Err(ShardError::Usage(format!("rows of shape {shape:?} into a tensor of shape {:?}", out.shape())));
    }
    fn copy<T: Copy>(out: &mut [T], d: &[T], w: usize, n: usize, ids: impl Iterator<Item = usize>) -> Result<(), usize> {
        let (mut at, mut ids) = (0, ids.peekable());
        while let Some(start) = ids.next() {
            let mut end = start + 1;
            while ids.peek() == Some(&end) {
                ids.next();
                end += 1;
            }
            if end > n {
                return Err(start.max(n));
            }
            let len = (end - start) * w;
            out[at..at + len].copy_from_slice(&d[start * w..end * w]);
            at += len;
        }
        Ok(())
    }
    let bad = |i: usize| ShardError::Usage(format!("row {i} of a tensor with {n} rows"));
    match (out.data_mut(), t) {
        (DataMut::F32(o), Data::F32(d)) => copy(o, d, w, n, ids).map_err(bad),
        (DataMut::F64(o), Data::F64(d)) => copy(o, d, w, n, ids).map_err(bad),
        _ => Err(ShardError::Usage("rows of one dtype into a tensor of another".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: Kind, row_bytes: usize, rows: usize, body: usize) -> Vec<u8> {
        let mut m = Vec::new();
        header(&mut m, kind, row_bytes, rows);
        m.extend(std::iter::repeat_n(7u8, body));
        m
    }

    #[test]
    fn malformed_messages_are_errors_naming_the_peer() {
        let ok = message(Kind::Halo, 8, 2, 16);
        assert_eq!(check_header(3, &ok, Kind::Halo, 8, 2).map(<[u8]>::len).ok(), Some(16));
        let bad = |m: &[u8]| matches!(check_header(3, m, Kind::Halo, 8, 2), Err(ShardError::Malformed { peer: 3, .. }));
        assert!(bad(&ok[..10]), "shorter than a header");
        assert!(bad(&ok[..20]), "a truncated body");
        assert!(bad(&message(Kind::Halo, 8, 2, 17)), "a longer body");
        assert!(bad(&message(Kind::Gradients, 8, 2, 16)), "another kind");
        assert!(bad(&message(Kind::Halo, 4, 4, 16)), "other rows of the same bytes");
        let mut magic = ok.clone();
        magic[0] ^= 0xff;
        assert!(bad(&magic), "a wrong magic");
        assert!(bad(&[]), "empty");
    }
}
