//! The storage server: rank `R` of `W`, owning the contiguous block of
//! destination rows `owned_range(N, W, R)`, the edges into them, and those
//! rows of every node and edge feature; it answers the `GraphStore`
//! service of `proto/graph_store.proto`.
//!
//! **What it holds.** At start it reads its own rows of the `.gfg` (one
//! page: the blocks under the other servers' rows are never read; a file
//! that stores edge ids has its `edge_ids` section checked once to be a
//! permutation, which does read all of it) into an in-memory CSR whose
//! rows below `owned.start` are empty, so that a centre keeps its global
//! id and [`sample_neighbors`] draws the same sample as a process holding
//! the whole graph (a centre's sample depends only on seed, centre and
//! hop). Features stay on disk, mapped, and are read a row at a time.
//!
//! **What it checks.** Every method but `Info` and `OpenSession` names an
//! open session; every id is checked against the graph's size and this
//! server's ownership before anything is read; every answer is bounded by
//! the server's deadline (a stream that runs past it ends with
//! DEADLINE_EXCEEDED). A token file makes every call carry
//! `authorization: Bearer TOKEN`.
//!
//! **Streams.** Large replies go out in chunks of about [`CHUNK_BYTES`],
//! made one at a time by a blocking task that waits while two chunks are in
//! flight, so a server's memory per call is two chunks, not the reply.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use thiserror::Error;
use tiga_dist::partition::owned_range;
use tiga_dist::sampling::{sample_neighbors, HopRequest, SampleError};
use tiga_runtime::{Graph, GraphError};
use tiga_storage::{GfgError, GfgFile};
use tokio::sync::{mpsc, Notify};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::features::{dtype_name, Feature, FeatureError, FeatureKind};
use crate::proto::graph_store_server::{GraphStore, GraphStoreServer};
use crate::proto::*;
use crate::split::{negatives, share, Part, SplitKind, SplitSpec};

/// About this many bytes of arrays per streamed message.
pub const CHUNK_BYTES: usize = 1 << 20;

/// The largest message a server accepts or sends (gRPC's default is 4 MiB;
/// a request of a million centres is 8 MiB).
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// How `tigac serve` was asked to serve.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub graph: PathBuf,
    pub rank: usize,
    pub world: usize,
    /// `--features [node:|edge:]NAME=FILE.npy`: `kind` `None` is decided by
    /// the row count (nodes first).
    pub features: Vec<FeatureFile>,
    pub splits: Vec<SplitSpec>,
    pub listen: SocketAddr,
    pub token: Option<String>,
    /// Exit after this many sessions have opened and closed.
    pub sessions: Option<u64>,
    /// Every method's server-side deadline.
    pub deadline: Duration,
}

impl ServeOptions {
    /// Rank `rank` of `world` serving `graph` on an ephemeral loopback
    /// port, no token, no features, no splits, a 30 s deadline.
    pub fn new(graph: impl Into<PathBuf>, rank: usize, world: usize) -> ServeOptions {
        ServeOptions {
            graph: graph.into(),
            rank,
            world,
            features: Vec::new(),
            splits: Vec::new(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            token: None,
            sessions: None,
            deadline: Duration::from_secs(30),
        }
    }
}

/// A `--features` file.
#[derive(Debug, Clone)]
pub struct FeatureFile {
    pub kind: Option<FeatureKind>,
    pub name: String,
    pub path: PathBuf,
}

impl FeatureFile {
    /// `NAME=FILE.npy`, `node:NAME=FILE.npy` or `edge:NAME=FILE.npy`.
    pub fn parse(s: &str) -> Result<FeatureFile, String> {
        let (lhs, path) = s.split_once('=').ok_or_else(|| format!("`{s}`: expected [node:|edge:]NAME=FILE.npy"))?;
        let (kind, name) = match lhs.split_once(':') {
            Some((k, n)) => (Some(FeatureKind::parse(k).ok_or_else(|| format!("`{s}`: `{k}` is not `node` or `edge`"))?), n),
            None => (None, lhs),
        };
        if name.is_empty() || path.is_empty() {
            return Err(format!("`{s}`: expected [node:|edge:]NAME=FILE.npy"));
        }
        Ok(FeatureFile { kind, name: name.to_string(), path: PathBuf::from(path) })
    }
}

#[derive(Debug, Error)]
pub enum ServeError {
    #[error("--partition {rank}/{world}: the rank must be below the number of servers (and that at least 1)")]
    Partition { rank: usize, world: usize },
    #[error("{path}: {source}")]
    Graph {
        path: String,
        #[source]
        source: GfgError,
    },
    #[error(
        "{path}: the graph store serves graphs whose sources and destinations are the same nodes; this one has {num_src} \
         sources and {num_dst} destinations"
    )]
    NotSquare { path: String, num_src: usize, num_dst: usize },
    #[error("{path}: reading this server's rows in the caller's numbering: {source}")]
    CallerRows {
        path: String,
        #[source]
        source: tiga_dist::shard::ShardError,
    },
    #[error("{path}: {num} nodes do not fit the 32-bit node ids the sampler uses")]
    TooLarge { path: String, num: usize },
    #[error("building this server's rows: {0}")]
    Rows(#[source] GraphError),
    #[error(transparent)]
    Feature(#[from] FeatureError),
    #[error("--features {name}: {path} has {rows} rows; the graph has {nodes} nodes and {edges} edges (give node: or edge: to say which, with the matching row count)")]
    FeatureRows { name: String, path: String, rows: usize, nodes: usize, edges: usize },
    #[error("feature `{0}` is given twice (the .gfg stores fields by that name, or --features repeats it)")]
    DuplicateFeature(String),
    #[error("--split: two {0} splits; give at most one of each kind")]
    DuplicateSplit(&'static str),
    #[error("--listen {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("serving: {0}")]
    Transport(#[source] tonic::transport::Error),
    #[error("starting the server's threads: {0}")]
    Runtime(#[source] std::io::Error),
}

/// One registered loader's counters.
#[derive(Debug, Default, Clone)]
struct LoaderStats {
    sample_calls: u64,
    centers: u64,
    feature_calls: u64,
    feature_bytes: u64,
}

#[derive(Debug)]
struct Session {
    client: String,
    loaders: HashMap<u64, LoaderStats>,
}

#[derive(Debug, Default)]
struct Sessions {
    open: HashMap<u64, Session>,
    opened: u64,
    closed: u64,
}

/// A server's state (see the module doc).
pub struct Store {
    rank: usize,
    world: usize,
    num_nodes: usize,
    num_edges: usize,
    owned: Range<usize>,
    /// Rows `0..owned.end`, those below `owned.start` empty; columns are
    /// global node ids, edge ids local positions (see `global_edge`).
    local: Graph,
    /// Local CSR position → the graph's edge id.
    edge_ids: Vec<u64>,
    /// The owned edge ids, sorted, when an edge feature needs the check.
    owned_edges: Vec<u64>,
    features: Vec<Feature>,
    node_split: Option<SplitSpec>,
    link_split: Option<SplitSpec>,
    /// Per part of the node split: the owned nodes in it, ascending.
    node_parts: HashMap<Part, Vec<u32>>,
    /// Per part of the link split: the owned anchors in it, ascending.
    anchor_parts: HashMap<Part, Vec<u32>>,
    sessions: Mutex<Sessions>,
    session_limit: Option<u64>,
    next_id: AtomicU64,
    done: Arc<Notify>,
    deadline: Duration,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store(rank {} of {}, rows {:?})", self.rank, self.world, self.owned)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain counters behind: keep
    // serving them.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Store {
    /// Opens the graph and the features and reads this server's rows.
    pub fn open(opts: &ServeOptions) -> Result<Store, ServeError> {
        if opts.world == 0 || opts.rank >= opts.world {
            return Err(ServeError::Partition { rank: opts.rank, world: opts.world });
        }
        let path = opts.graph.display().to_string();
        let gfg = |source| ServeError::Graph { path: path.clone(), source };
        let file = GfgFile::open(&opts.graph).map_err(gfg)?;
        let (n, e) = (file.num_dst(), file.num_edges());
        if file.num_src() != n {
            return Err(ServeError::NotSquare { path, num_src: file.num_src(), num_dst: n });
        }
        if n > u32::MAX as usize {
            return Err(ServeError::TooLarge { path, num: n });
        }
        let owned = owned_range(n, opts.world, opts.rank);
        // The owned rows in the caller's ids, a run of stored rows at a
        // time: a file stored in a node order (written with --renumber)
        // has node u's row at its stored row, its sources mapped back, and
        // its node features read at stored rows.
        let order = file.node_order().map_err(gfg)?;
        let (local, edge_ids) = {
            let rows: Vec<u32> = (owned.start as u32..owned.end as u32).collect();
            let caller = |source| ServeError::CallerRows { path: path.clone(), source };
            let (g, ids) = tiga_dist::shard::file::read_caller_rows(&file, &rows).map_err(caller)?;
            // Rows past this server's are empty: the CSR up to its last row,
            // its arrays moved, not copied.
            let (mut offsets, cols, _) = g.into_csr();
            offsets.truncate(owned.end + 1);
            let g = Graph::from_csr_with_edge_ids(n, owned.end, offsets, cols, None).map_err(ServeError::Rows)?;
            (g, ids)
        };
        let mut features: Vec<Feature> = Vec::new();
        for info in file.fields() {
            let handle = file.field(info.role, &info.name).map_err(gfg)?;
            if features.iter().any(|f| f.name == info.name) {
                return Err(ServeError::DuplicateFeature(info.name));
            }
            features.push(Feature::stored(handle, order.clone()));
        }
        for ff in &opts.features {
            if features.iter().any(|f| f.name == ff.name) {
                return Err(ServeError::DuplicateFeature(ff.name.clone()));
            }
            let kind = match ff.kind {
                Some(k) => k,
                None => {
                    let rows = npy_rows(ff)?;
                    if rows == n {
                        FeatureKind::Node
                    } else if rows == e {
                        FeatureKind::Edge
                    } else {
                        return Err(ServeError::FeatureRows {
                            name: ff.name.clone(),
                            path: ff.path.display().to_string(),
                            rows,
                            nodes: n,
                            edges: e,
                        });
                    }
                }
            };
            let rows = if kind == FeatureKind::Node { n } else { e };
            features.push(Feature::npy(&ff.name, kind, &ff.path, rows)?);
        }
        let owned_edges = if features.iter().any(|f| f.kind == FeatureKind::Edge) {
            let mut v = edge_ids.clone();
            v.sort_unstable();
            v
        } else {
            Vec::new()
        };
        let (mut node_split, mut link_split) = (None, None);
        for s in &opts.splits {
            let slot = if s.kind == SplitKind::Node { &mut node_split } else { &mut link_split };
            if slot.is_some() {
                return Err(ServeError::DuplicateSplit(s.kind.name()));
            }
            *slot = Some(*s);
        }
        let mut node_parts: HashMap<Part, Vec<u32>> = HashMap::new();
        if let Some(s) = &node_split {
            for i in owned.clone() {
                if let Some(p) = s.part_of(i as u64) {
                    node_parts.entry(p).or_default().push(i as u32);
                }
            }
        }
        let mut anchor_parts: HashMap<Part, Vec<u32>> = HashMap::new();
        if let Some(s) = &link_split {
            for i in owned.clone() {
                if !local.row(i).is_empty() {
                    if let Some(p) = s.part_of(i as u64) {
                        anchor_parts.entry(p).or_default().push(i as u32);
                    }
                }
            }
        }
        // Session ids that a restarted server will not take for its own.
        let base = tiga_dist::sampling::mix(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
                ^ ((opts.rank as u64) << 48),
        ) >> 16;
        Ok(Store {
            rank: opts.rank,
            world: opts.world,
            num_nodes: n,
            num_edges: e,
            owned,
            local,
            edge_ids,
            owned_edges,
            features,
            node_split,
            link_split,
            node_parts,
            anchor_parts,
            sessions: Mutex::new(Sessions::default()),
            session_limit: opts.sessions,
            next_id: AtomicU64::new(base.max(1)),
            done: Arc::new(Notify::new()),
            deadline: opts.deadline,
        })
    }

    /// Sessions open now, and opened and closed so far.
    pub fn session_counts(&self) -> (usize, u64, u64) {
        let s = lock(&self.sessions);
        (s.open.len(), s.opened, s.closed)
    }

    /// This server's rows.
    pub fn owned(&self) -> Range<usize> {
        self.owned.clone()
    }

    fn who(&self) -> String {
        format!("storage server {} of {}", self.rank, self.world)
    }

    fn check_session(&self, id: u64) -> Result<(), Status> {
        if lock(&self.sessions).open.contains_key(&id) {
            Ok(())
        } else {
            Err(Status::failed_precondition(format!(
                "session {id} is not open on {} (call OpenSession first, and pass its session_id)",
                self.who()
            )))
        }
    }

    /// Adds to a loader's counters (loader 0: none).
    fn count(&self, session: u64, loader: u64, f: impl FnOnce(&mut LoaderStats)) -> Result<(), Status> {
        if loader == 0 {
            return Ok(());
        }
        let mut s = lock(&self.sessions);
        let stats = s.open.get_mut(&session).and_then(|s| s.loaders.get_mut(&loader)).ok_or_else(|| {
            Status::failed_precondition(format!("loader {loader} is not open in session {session} on {}", self.who()))
        })?;
        f(stats);
        Ok(())
    }

    fn check_node_type(&self, t: &str) -> Result<(), Status> {
        if t.is_empty() {
            Ok(())
        } else {
            Err(Status::invalid_argument(format!(
                "node_type `{t}`: this graph has one node type, named \"\" (leave node_type empty)"
            )))
        }
    }

    fn check_rank(rank: u32, world: u32) -> Result<(), Status> {
        if (world == 0 && rank != 0) || (world > 0 && rank >= world) {
            return Err(Status::invalid_argument(format!(
                "rank {rank} of world_size {world}: the rank must be below world_size (0 of 0 asks for every id)"
            )));
        }
        Ok(())
    }

    /// A centre or node id this server owns, as u32.
    fn owned_node(&self, id: i64, what: &str) -> Result<u32, Status> {
        if id < 0 || id as u64 >= self.num_nodes as u64 {
            return Err(Status::out_of_range(format!("{what} {id} is not a node (the graph has {} nodes)", self.num_nodes)));
        }
        if !self.owned.contains(&(id as usize)) {
            return Err(Status::invalid_argument(format!(
                "{what} {id} is not owned by {} (it owns nodes [{}, {})): send it to its owner",
                self.who(),
                self.owned.start,
                self.owned.end
            )));
        }
        Ok(id as u32)
    }

    fn feature(&self, name: &str) -> Result<&Feature, Status> {
        self.features.iter().find(|f| f.name == name).ok_or_else(|| {
            let names: Vec<&str> = self.features.iter().map(|f| f.name.as_str()).collect();
            Status::not_found(format!(
                "unknown feature `{name}` on {}; it serves: {}",
                self.who(),
                if names.is_empty() { "none".to_string() } else { names.join(", ") }
            ))
        })
    }

    fn info(&self) -> InfoReply {
        let features: Vec<FeatureInfo> = self
            .features
            .iter()
            .map(|f| FeatureInfo {
                name: f.name.clone(),
                kind: f.kind.name().into(),
                dtype: dtype_name(f.dtype).into(),
                dim: f.dim as u64,
                num_rows: f.num_rows as u64,
            })
            .collect();
        InfoReply {
            protocol_version: PROTOCOL_VERSION,
            num_nodes: self.num_nodes as i64,
            num_edges: self.num_edges as i64,
            rank: self.rank as u32,
            world: self.world as u32,
            partition: "contiguous".into(),
            owned_begin: self.owned.start as i64,
            owned_end: self.owned.end as i64,
            feature_names: features.iter().map(|f| f.name.clone()).collect(),
            features,
            edge_direction: "in".into(),
            splits: [self.node_split, self.link_split]
                .into_iter()
                .flatten()
                .map(|s| SplitInfo { kind: s.kind.name().into(), train: s.train, val: s.val, test: s.test, seed: s.seed })
                .collect(),
            owned_edges: self.edge_ids.len() as i64,
            node_types: vec![String::new()],
        }
    }

    fn part(&self, split: &str, kind: SplitKind) -> Result<Part, Status> {
        let p = Part::parse(split)
            .ok_or_else(|| Status::invalid_argument(format!("split `{split}`: expected \"train\", \"val\" or \"test\"")))?;
        let configured = match kind {
            SplitKind::Node => self.node_split.is_some(),
            SplitKind::Link => self.link_split.is_some(),
        };
        if !configured {
            return Err(Status::failed_precondition(format!(
                "{} has no {} split (start it with --split {}:TRAIN,VAL,TEST[:SEED])",
                self.who(),
                kind.name(),
                kind.name()
            )));
        }
        Ok(p)
    }
}

/// The rows of a `.npy` (its first dimension), for deciding its kind.
fn npy_rows(ff: &FeatureFile) -> Result<usize, ServeError> {
    let probe = Feature::npy(&ff.name, FeatureKind::Node, &ff.path, usize::MAX);
    match probe {
        Err(FeatureError::Shape { shape, .. }) if !shape.is_empty() => Ok(shape[0]),
        Err(e) => Err(e.into()),
        Ok(f) => Ok(f.num_rows),
    }
}

/// Where a streaming task sends its chunks: refuses once the deadline has
/// passed or the caller has gone.
struct Sink<T> {
    tx: mpsc::Sender<Result<T, Status>>,
    deadline: Instant,
    what: &'static str,
}

impl<T> Sink<T> {
    fn send(&self, msg: T) -> Result<(), Status> {
        if Instant::now() > self.deadline {
            return Err(Status::deadline_exceeded(format!("{}: the server's deadline passed mid-stream", self.what)));
        }
        self.tx.blocking_send(Ok(msg)).map_err(|_| Status::cancelled("the caller went away"))
    }
}

type Stream<T> = ReceiverStream<Result<T, Status>>;

/// Runs `produce` on a blocking thread, its chunks streamed as they come
/// (two in flight at most); an error ends the stream with its status.
fn stream<T: Send + 'static>(
    deadline: Duration,
    what: &'static str,
    produce: impl FnOnce(&Sink<T>) -> Result<(), Status> + Send + 'static,
) -> Response<Stream<T>> {
    let (tx, rx) = mpsc::channel(2);
    let sink = Sink { tx, deadline: Instant::now() + deadline, what };
    tokio::task::spawn_blocking(move || {
        if let Err(status) = produce(&sink) {
            // The caller may be gone already; nothing more to do then.
            let _ = sink.tx.blocking_send(Err(status));
        }
    });
    Response::new(ReceiverStream::new(rx))
}

/// Items per chunk for items of `bytes` each.
fn per_chunk(bytes: usize) -> usize {
    (CHUNK_BYTES / bytes.max(1)).max(1)
}

/// The service (an `Arc<Store>` shared with the session countdown).
#[derive(Debug, Clone)]
pub struct Service(pub Arc<Store>);

#[tonic::async_trait]
impl GraphStore for Service {
    async fn info(&self, _req: Request<InfoRequest>) -> Result<Response<InfoReply>, Status> {
        Ok(Response::new(self.0.info()))
    }

    async fn open_session(&self, req: Request<OpenSessionRequest>) -> Result<Response<OpenSessionReply>, Status> {
        let r = req.into_inner();
        let st = &self.0;
        if r.protocol_version != PROTOCOL_VERSION {
            return Err(Status::failed_precondition(format!(
                "protocol version {} refused: {} speaks graph-store protocol version {PROTOCOL_VERSION} \
                 (proto/graph_store.proto of the same tiga)",
                r.protocol_version,
                st.who()
            )));
        }
        let mut s = lock(&st.sessions);
        if let Some(limit) = st.session_limit {
            if s.opened >= limit {
                return Err(Status::resource_exhausted(format!(
                    "{} serves {limit} sessions and has opened them all; it exits once they close",
                    st.who()
                )));
            }
        }
        let id = st.next_id.fetch_add(1, Ordering::Relaxed);
        s.opened += 1;
        s.open.insert(id, Session { client: r.client.clone(), loaders: HashMap::new() });
        eprintln!("{}: session {id} opened ({})", st.who(), if r.client.is_empty() { "unnamed client" } else { &r.client });
        Ok(Response::new(OpenSessionReply { session_id: id, protocol_version: PROTOCOL_VERSION }))
    }

    async fn close_session(&self, req: Request<CloseSessionRequest>) -> Result<Response<CloseSessionReply>, Status> {
        let id = req.into_inner().session_id;
        let st = &self.0;
        let mut s = lock(&st.sessions);
        let Some(session) = s.open.remove(&id) else {
            return Err(Status::failed_precondition(format!("session {id} is not open on {}", st.who())));
        };
        s.closed += 1;
        let released = session.loaders.len() as u32;
        eprintln!(
            "{}: session {id} closed ({}; {released} loaders released with it)",
            st.who(),
            if session.client.is_empty() { "unnamed client" } else { &session.client }
        );
        if st.session_limit.is_some_and(|n| s.closed >= n) && s.open.is_empty() {
            st.done.notify_one();
        }
        Ok(Response::new(CloseSessionReply { loaders_released: released }))
    }

    async fn open_loader(&self, req: Request<OpenLoaderRequest>) -> Result<Response<OpenLoaderReply>, Status> {
        let r = req.into_inner();
        let st = &self.0;
        if let Some(&f) = r.fanouts.iter().find(|&&f| f < -1) {
            return Err(Status::invalid_argument(format!("fanout {f}: a fanout is a count ≥ 0, or -1 for every edge")));
        }
        let mut s = lock(&st.sessions);
        let session = s
            .open
            .get_mut(&r.session_id)
            .ok_or_else(|| Status::failed_precondition(format!("session {} is not open on {}", r.session_id, st.who())))?;
        let id = st.next_id.fetch_add(1, Ordering::Relaxed);
        session.loaders.insert(id, LoaderStats::default());
        Ok(Response::new(OpenLoaderReply { loader_id: id }))
    }

    async fn close_loader(&self, req: Request<CloseLoaderRequest>) -> Result<Response<CloseLoaderReply>, Status> {
        let r = req.into_inner();
        let st = &self.0;
        let mut s = lock(&st.sessions);
        let stats = s.open.get_mut(&r.session_id).and_then(|s| s.loaders.remove(&r.loader_id)).ok_or_else(|| {
            Status::failed_precondition(format!("loader {} is not open in session {} on {}", r.loader_id, r.session_id, st.who()))
        })?;
        Ok(Response::new(CloseLoaderReply {
            sample_calls: stats.sample_calls,
            centers_sampled: stats.centers,
            feature_calls: stats.feature_calls,
            feature_bytes: stats.feature_bytes,
        }))
    }

    type FetchNodeIdsStream = Stream<FetchNodeIdsReply>;

    async fn fetch_node_ids(&self, req: Request<FetchNodeIdsRequest>) -> Result<Response<Self::FetchNodeIdsStream>, Status> {
        let r = req.into_inner();
        let st = self.0.clone();
        st.check_session(r.session_id)?;
        st.check_node_type(&r.node_type)?;
        Store::check_rank(r.rank, r.world_size)?;
        let part = if r.split.is_empty() { None } else { Some(st.part(&r.split, SplitKind::Node)?) };
        let deadline = st.deadline;
        Ok(stream(deadline, "FetchNodeIds", move |sink| {
            let empty = Vec::new();
            let list: Option<&Vec<u32>> = part.map(|p| st.node_parts.get(&p).unwrap_or(&empty));
            let n = list.map_or(st.owned.len(), |l| l.len());
            let mine = share(st.rank, st.world, r.rank as usize, r.world_size as usize, n);
            let id_at = |k: usize| -> i64 { list.map_or((st.owned.start + k) as i64, |l| i64::from(l[k])) };
            let per = per_chunk(8);
            let mut at = mine.start;
            loop {
                let end = (at + per).min(mine.end);
                sink.send(FetchNodeIdsReply { ids: (at..end).map(id_at).collect() })?;
                at = end;
                if at >= mine.end {
                    return Ok(());
                }
            }
        }))
    }

    type FetchAblpInputStream = Stream<FetchAblpInputReply>;

    async fn fetch_ablp_input(
        &self,
        req: Request<FetchAblpInputRequest>,
    ) -> Result<Response<Self::FetchAblpInputStream>, Status> {
        let r = req.into_inner();
        let st = self.0.clone();
        st.check_session(r.session_id)?;
        st.check_node_type(&r.node_type)?;
        Store::check_rank(r.rank, r.world_size)?;
        let part = st.part(&r.split, SplitKind::Link)?;
        const MAX_NEGATIVES: u32 = 1 << 16;
        if r.num_negatives > MAX_NEGATIVES {
            return Err(Status::invalid_argument(format!(
                "num_negatives {}: at most {MAX_NEGATIVES} per anchor",
                r.num_negatives
            )));
        }
        let deadline = st.deadline;
        Ok(stream(deadline, "FetchAblpInput", move |sink| {
            let empty = Vec::new();
            let anchors = st.anchor_parts.get(&part).unwrap_or(&empty);
            let mine = share(st.rank, st.world, r.rank as usize, r.world_size as usize, anchors.len());
            let k = r.num_negatives as usize;
            let mut first = true;
            // Labels sent in earlier chunks: offsets are absolute.
            let (mut pos_sent, mut neg_sent) = (0i64, 0i64);
            let mut at = mine.start;
            loop {
                let mut msg = FetchAblpInputReply::default();
                if first {
                    msg.positive_offsets.push(0);
                    if k > 0 {
                        msg.negative_offsets.push(0);
                    }
                    first = false;
                }
                // Anchors per chunk: bounded by the labels they carry.
                while at < mine.end && (msg.positives.len() + msg.negatives.len() + msg.anchors.len()) * 8 < CHUNK_BYTES {
                    let a = anchors[at] as usize;
                    msg.anchors.push(a as i64);
                    let row = st.local.row(a);
                    msg.positives.extend(st.local.cols()[row].iter().map(|&c| i64::from(c)));
                    msg.positive_offsets.push(pos_sent + msg.positives.len() as i64);
                    if k > 0 {
                        let neg = negatives(r.negative_seed, a as u64, k, st.num_nodes as u64);
                        msg.negatives.extend(neg.into_iter().map(|x| x as i64));
                        msg.negative_offsets.push(neg_sent + msg.negatives.len() as i64);
                    }
                    at += 1;
                }
                pos_sent += msg.positives.len() as i64;
                neg_sent += msg.negatives.len() as i64;
                sink.send(msg)?;
                if at >= mine.end {
                    return Ok(());
                }
            }
        }))
    }

    type SampleNeighborsStream = Stream<SampleNeighborsReply>;

    async fn sample_neighbors(
        &self,
        req: Request<SampleNeighborsRequest>,
    ) -> Result<Response<Self::SampleNeighborsStream>, Status> {
        let r = req.into_inner();
        let st = self.0.clone();
        st.check_session(r.session_id)?;
        if r.fanout < -1 {
            return Err(Status::invalid_argument(format!("fanout {}: a fanout is a count ≥ 0, or -1 for every edge", r.fanout)));
        }
        let centres: Vec<u32> = r.centers.iter().map(|&c| st.owned_node(c, "centre")).collect::<Result<_, _>>()?;
        st.count(r.session_id, r.loader_id, |s| {
            s.sample_calls += 1;
            s.centers += centres.len() as u64;
        })?;
        let deadline = st.deadline;
        Ok(stream(deadline, "SampleNeighbors", move |sink| {
            // Centres per chunk: a full fanout's worth of edges in a chunk.
            let per = per_chunk(16 * usize::try_from(r.fanout.max(1)).unwrap_or(1)).max(64);
            let mut base = 0i64;
            let mut first = true;
            for chunk in centres.chunks(per).chain(std::iter::once(&[][..]).filter(|_| centres.is_empty())) {
                let req = HopRequest { fanout: r.fanout, seed: r.seed, hop: r.hop, weights: None };
                let s = sample_neighbors(&st.local, chunk, &req).map_err(|e| sample_status(&st, e))?;
                let mut msg = SampleNeighborsReply::default();
                let skip = if first { 0 } else { 1 };
                first = false;
                msg.offsets.extend(s.offsets.iter().skip(skip).map(|&o| base + o as i64));
                msg.neighbors.extend(s.sources.iter().map(|&x| i64::from(x)));
                if r.with_edge_ids {
                    msg.edge_ids.extend(s.edge_ids.iter().map(|&p| st.edge_ids[p as usize] as i64));
                }
                base += s.sources.len() as i64;
                sink.send(msg)?;
            }
            Ok(())
        }))
    }

    type FetchFeaturesStream = Stream<FetchFeaturesReply>;

    async fn fetch_features(&self, req: Request<FetchFeaturesRequest>) -> Result<Response<Self::FetchFeaturesStream>, Status> {
        let r = req.into_inner();
        let st = self.0.clone();
        st.check_session(r.session_id)?;
        let f = st.feature(&r.name)?;
        let ids: Vec<u64> = match f.kind {
            FeatureKind::Node => r.ids.iter().map(|&i| st.owned_node(i, "node").map(u64::from)).collect::<Result<_, _>>()?,
            FeatureKind::Edge => r
                .ids
                .iter()
                .map(|&i| {
                    if i < 0 || i as u64 >= st.num_edges as u64 {
                        return Err(Status::out_of_range(format!("edge {i} is not an edge (the graph has {} edges)", st.num_edges)));
                    }
                    if st.owned_edges.binary_search(&(i as u64)).is_err() {
                        return Err(Status::invalid_argument(format!(
                            "edge {i} is not owned by {} (it owns the edges into nodes [{}, {})): send it to the owner of its destination",
                            st.who(),
                            st.owned.start,
                            st.owned.end
                        )));
                    }
                    Ok(i as u64)
                })
                .collect::<Result<_, _>>()?,
        };
        let row_bytes = f.row_bytes();
        st.count(r.session_id, r.loader_id, |s| {
            s.feature_calls += 1;
            s.feature_bytes += (ids.len() * row_bytes) as u64;
        })?;
        let deadline = st.deadline;
        Ok(stream(deadline, "FetchFeatures", move |sink| {
            let f = st.feature(&r.name)?;
            let (dim, dtype) = (f.dim as u64, dtype_name(f.dtype).to_string());
            let per = per_chunk(row_bytes);
            let mut chunks = ids.chunks(per).peekable();
            if chunks.peek().is_none() {
                return sink.send(FetchFeaturesReply { dim, dtype, data: Vec::new() });
            }
            for chunk in chunks {
                let mut data = Vec::new();
                f.append_rows(chunk, &mut data).map_err(|e| Status::internal(format!("{}: {e}", st.who())))?;
                sink.send(FetchFeaturesReply { dim, dtype: dtype.clone(), data })?;
            }
            Ok(())
        }))
    }
}

fn sample_status(st: &Store, e: SampleError) -> Status {
    match e {
        SampleError::CentreOutOfRange { .. } | SampleError::BadFanout(_) => Status::invalid_argument(e.to_string()),
        other => Status::internal(format!("{}: sampling: {other}", st.who())),
    }
}

/// Checks `authorization: Bearer TOKEN` on every call.
#[derive(Clone)]
pub struct TokenCheck {
    token: Option<Arc<str>>,
}

impl tonic::service::Interceptor for TokenCheck {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        let Some(token) = &self.token else { return Ok(req) };
        let Some(value) = req.metadata().get("authorization") else {
            return Err(Status::unauthenticated(
                "this storage server needs a token: send `authorization: Bearer TOKEN` metadata",
            ));
        };
        let given = value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")).unwrap_or("");
        // Compare every byte whatever the first difference (no early exit).
        let same = given.len() == token.len() && given.bytes().zip(token.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
        if same {
            Ok(req)
        } else {
            Err(Status::unauthenticated("the `authorization` metadata does not carry this server's token"))
        }
    }
}

/// A server running on its own threads (tests, benchmarks, examples, and
/// `tigac serve` through [`serve_blocking`]).
pub struct ServerHandle {
    addr: SocketAddr,
    rt: Option<tokio::runtime::Runtime>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), tonic::transport::Error>>>,
    store: Arc<Store>,
}

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServerHandle({}, {:?})", self.addr, self.store)
    }
}

impl ServerHandle {
    /// Opens the store and starts serving it on `opts.listen`.
    pub fn start(opts: &ServeOptions) -> Result<ServerHandle, ServeError> {
        let store = Arc::new(Store::open(opts)?);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tiga-store")
            .enable_all()
            .build()
            .map_err(ServeError::Runtime)?;
        let listener = rt
            .block_on(tokio::net::TcpListener::bind(opts.listen))
            .map_err(|source| ServeError::Bind { addr: opts.listen, source })?;
        let addr = listener.local_addr().map_err(|source| ServeError::Bind { addr: opts.listen, source })?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let done = store.done.clone();
        let svc = tonic::service::interceptor::InterceptedService::new(
            GraphStoreServer::new(Service(store.clone()))
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            TokenCheck { token: opts.token.as_deref().map(Arc::from) },
        );
        let router = tonic::transport::Server::builder().timeout(opts.deadline).add_service(svc);
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let task = rt.spawn(router.serve_with_incoming_shutdown(incoming, async move {
            tokio::select! {
                _ = stop_rx => {}
                _ = done.notified() => {}
            }
        }));
        Ok(ServerHandle { addr, rt: Some(rt), stop: Some(stop_tx), task: Some(task), store })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its state (rows owned, sessions).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Waits until the server stops by itself (`--sessions N`), then
    /// returns how serving ended.
    pub fn wait(mut self) -> Result<(), ServeError> {
        let (Some(rt), Some(task)) = (self.rt.take(), self.task.take()) else { return Ok(()) };
        let r = rt.block_on(task);
        rt.shutdown_timeout(Duration::from_secs(1));
        match r {
            Ok(r) => r.map_err(ServeError::Transport),
            Err(join) => Err(ServeError::Runtime(std::io::Error::other(join.to_string()))),
        }
    }

    /// A graceful stop: in-flight calls finish, then the listener closes.
    pub fn stop(mut self) -> Result<(), ServeError> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.wait()
    }

    /// An abrupt stop, as if the process died: every connection is
    /// dropped at once (the fault tests' "killed server").
    pub fn kill(mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(2));
        }
    }
}

/// `tigac serve`: starts, prints `listening on ADDR` (a line on stdout, so
/// a script can start it on port 0 and read the port), and serves until
/// `--sessions N` sessions have opened and closed (or forever).
pub fn serve_blocking(opts: &ServeOptions) -> Result<(), ServeError> {
    let h = ServerHandle::start(opts)?;
    let st = h.store();
    println!(
        "listening on {} (storage server {} of {}: nodes [{}, {}) of {}, {} edges{})",
        h.addr(),
        st.rank,
        st.world,
        st.owned.start,
        st.owned.end,
        st.num_nodes,
        st.edge_ids.len(),
        match opts.sessions {
            Some(n) => format!("; exits after {n} sessions"),
            None => String::new(),
        }
    );
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    h.wait()
}
