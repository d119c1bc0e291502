//! The compute side's handle on the store: one connection and one session
//! per storage server, the partition book (which server owns which rows),
//! and the calls a loader makes, each bounded by a deadline and, on
//! failure, an error naming the server.
//!
//! The API is blocking (tiga's is); the calls run on a small tokio runtime
//! the dataset owns, and calls to several servers run concurrently.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::try_join_all;
use thiserror::Error;
use tiga_runtime::{DType, Tensor, TensorError};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};

use crate::proto::graph_store_client::GraphStoreClient;
use crate::proto::*;
use crate::server::MAX_MESSAGE_BYTES;

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("storage server {addr}: cannot connect after {attempts} attempts over {waited:?}: {source}")]
    Connect {
        addr: String,
        attempts: u32,
        waited: Duration,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("storage server {addr}: `{addr}` is not an address (give host:port): {source}")]
    Address {
        addr: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("storage server {rank} ({addr}): {method} failed: {status}", status = show(.status))]
    Call { rank: u32, addr: String, method: &'static str, status: Box<Status> },
    #[error("storage server {rank} ({addr}): {method} did not answer within its deadline of {deadline:?}")]
    Deadline { rank: u32, addr: String, method: &'static str, deadline: Duration },
    #[error("the storage servers do not make one store: {0}")]
    Cluster(String),
    #[error("no storage servers given")]
    NoServers,
    #[error("storage server {rank} ({addr}): {message}")]
    Reply { rank: u32, addr: String, message: String },
    #[error("the dataset was closed; its loaders end")]
    Closed,
    #[error("node {node} is not a node of the graph ({num_nodes} nodes)")]
    NodeOutOfRange { node: i64, num_nodes: i64 },
    #[error("unknown feature `{name}`; the store serves: {available}")]
    UnknownFeature { name: String, available: String },
    #[error("feature `{name}` is a {kind} feature; {hint}")]
    FeatureKind { name: String, kind: String, hint: &'static str },
    #[error("building a tensor from the rows received: {0}")]
    Tensor(#[source] TensorError),
    #[error("building the mini-batch's block: {0}")]
    Block(#[source] tiga_runtime::GraphError),
    #[error("starting the client's threads: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("loader options: {0}")]
    Options(String),
}

fn show(s: &Status) -> String {
    format!("{:?}: {}", s.code(), s.message())
}

/// How a [`RemoteDataset`] connects and calls.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Sent as `authorization: Bearer TOKEN` on every call.
    pub token: Option<String>,
    /// Per connection attempt.
    pub connect_timeout: Duration,
    /// Attempts after the first, 100 ms apart doubling (a server still
    /// starting).
    pub connect_retries: u32,
    /// Every call's deadline (also sent as `grpc-timeout`).
    pub call_deadline: Duration,
    /// Shown in the servers' logs.
    pub client_name: String,
    /// The protocol version announced at `OpenSession` (tests set another
    /// to see it refused).
    pub protocol_version: u32,
}

impl Default for ConnectOptions {
    fn default() -> ConnectOptions {
        ConnectOptions {
            token: None,
            connect_timeout: Duration::from_secs(5),
            connect_retries: 5,
            call_deadline: Duration::from_secs(30),
            client_name: String::new(),
            protocol_version: PROTOCOL_VERSION,
        }
    }
}

/// A feature the store serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureMeta {
    pub name: String,
    /// "node" or "edge".
    pub kind: String,
    pub dtype: DType,
    pub dim: usize,
}

/// Link-prediction input: anchors with their labels.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AblpInput {
    pub anchors: Vec<i64>,
    /// One more than the anchors.
    pub positive_offsets: Vec<usize>,
    pub positives: Vec<i64>,
    /// One more than the anchors (all zero without negatives).
    pub negative_offsets: Vec<usize>,
    pub negatives: Vec<i64>,
}

/// Adds the token to every call.
#[derive(Clone)]
pub(crate) struct Auth(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

pub(crate) type Client = GraphStoreClient<InterceptedService<Channel, Auth>>;

/// One server as the client sees it.
#[derive(Clone)]
pub(crate) struct Server {
    pub rank: u32,
    pub addr: String,
    pub owned: Range<i64>,
    pub client: Client,
    pub session: u64,
}

/// What the loaders' background tasks share with the dataset: the
/// connections and the partition book (no runtime, so a task never holds
/// the thing that runs it).
pub(crate) struct Ctx {
    pub servers: Vec<Server>,
    pub num_nodes: i64,
    pub num_edges: i64,
    pub features: Vec<FeatureMeta>,
    pub deadline: Duration,
    pub closed: AtomicBool,
}

impl Ctx {
    /// The server owning node `n`.
    pub fn owner(&self, n: i64) -> Result<usize, StoreError> {
        if n < 0 || n >= self.num_nodes {
            return Err(StoreError::NodeOutOfRange { node: n, num_nodes: self.num_nodes });
        }
        Ok(self.servers.partition_point(|s| s.owned.end <= n))
    }

    pub fn check_open(&self) -> Result<(), StoreError> {
        if self.closed.load(Ordering::Acquire) {
            Err(StoreError::Closed)
        } else {
            Ok(())
        }
    }

    /// A call to server `k`, bounded by the deadline, errors naming it.
    pub async fn call<T, F, Fut>(&self, k: usize, method: &'static str, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(Client, Duration) -> Fut,
        Fut: std::future::Future<Output = Result<T, Status>>,
    {
        let s = &self.servers[k];
        let d = self.deadline;
        match tokio::time::timeout(d, f(s.client.clone(), d)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(status)) => Err(StoreError::Call { rank: s.rank, addr: s.addr.clone(), method, status: Box::new(status) }),
            Err(_) => Err(StoreError::Deadline { rank: s.rank, addr: s.addr.clone(), method, deadline: d }),
        }
    }

    fn reply_error(&self, k: usize, message: String) -> StoreError {
        StoreError::Reply { rank: self.servers[k].rank, addr: self.servers[k].addr.clone(), message }
    }

    /// One hop for `centres` (global ids, any order, repeats allowed),
    /// each routed to its owner; the answer in request order.
    pub async fn sample_hop(
        &self,
        centres: &[i64],
        fanout: i64,
        seed: u64,
        hop: u32,
        loaders: &[u64],
    ) -> Result<(Vec<usize>, Vec<i64>, Vec<i64>), StoreError> {
        self.check_open()?;
        let mut per: Vec<Vec<usize>> = vec![Vec::new(); self.servers.len()];
        for (i, &c) in centres.iter().enumerate() {
            per[self.owner(c)?].push(i);
        }
        let calls = per.iter().enumerate().filter(|(_, idx)| !idx.is_empty()).map(|(k, idx)| {
            let req = SampleNeighborsRequest {
                centers: idx.iter().map(|&i| centres[i]).collect(),
                fanout,
                seed,
                with_edge_ids: true,
                hop,
                session_id: self.servers[k].session,
                loader_id: loaders.get(k).copied().unwrap_or(0),
            };
            async move {
                let reply = self
                    .call(k, "SampleNeighbors", move |mut c, d| async move {
                        let mut r = Request::new(req);
                        r.set_timeout(d);
                        let mut s = c.sample_neighbors(r).await?.into_inner();
                        let mut all = SampleNeighborsReply::default();
                        while let Some(m) = s.message().await? {
                            all.offsets.extend(m.offsets);
                            all.neighbors.extend(m.neighbors);
                            all.edge_ids.extend(m.edge_ids);
                        }
                        Ok(all)
                    })
                    .await?;
                if reply.offsets.len() != idx.len() + 1
                    || reply.edge_ids.len() != reply.neighbors.len()
                    || reply.offsets.windows(2).any(|w| w[0] > w[1])
                    || reply.offsets.first() != Some(&0)
                    || reply.offsets.last().copied() != Some(reply.neighbors.len() as i64)
                {
                    return Err(self.reply_error(
                        k,
                        format!(
                            "SampleNeighbors answered {} offsets, {} neighbours and {} edge ids for {} centres",
                            reply.offsets.len(),
                            reply.neighbors.len(),
                            reply.edge_ids.len(),
                            idx.len()
                        ),
                    ));
                }
                Ok::<_, StoreError>((k, reply))
            }
        });
        let replies = try_join_all(calls).await?;
        // Back into request order.
        let mut runs: Vec<(usize, usize, usize)> = vec![(0, 0, 0); centres.len()];
        for (slot, (k, reply)) in replies.iter().enumerate() {
            for (j, &i) in per[*k].iter().enumerate() {
                runs[i] = (slot, reply.offsets[j] as usize, reply.offsets[j + 1] as usize);
            }
        }
        let mut offsets = Vec::with_capacity(centres.len() + 1);
        offsets.push(0);
        let (mut neighbors, mut edge_ids) = (Vec::new(), Vec::new());
        for &(slot, a, b) in &runs {
            let r = &replies[slot].1;
            neighbors.extend_from_slice(&r.neighbors[a..b]);
            edge_ids.extend_from_slice(&r.edge_ids[a..b]);
            offsets.push(neighbors.len());
        }
        if let Some(&n) = neighbors.iter().find(|&&n| n < 0 || n >= self.num_nodes) {
            return Err(StoreError::Cluster(format!("a server sampled neighbour {n}, not a node of the graph")));
        }
        Ok((offsets, neighbors, edge_ids))
    }

    pub fn feature(&self, name: &str) -> Result<&FeatureMeta, StoreError> {
        self.features.iter().find(|f| f.name == name).ok_or_else(|| StoreError::UnknownFeature {
            name: name.to_string(),
            available: if self.features.is_empty() {
                "none".into()
            } else {
                self.features.iter().map(|f| f.name.as_str()).collect::<Vec<_>>().join(", ")
            },
        })
    }

    /// Rows `ids` of feature `name`, row `i` from server `owners[i]`.
    pub async fn fetch_rows(&self, name: &str, ids: &[i64], owners: &[usize], loaders: &[u64]) -> Result<Tensor, StoreError> {
        self.check_open()?;
        let meta = self.feature(name)?.clone();
        let mut per: Vec<Vec<usize>> = vec![Vec::new(); self.servers.len()];
        for (i, &k) in owners.iter().enumerate() {
            per[k].push(i);
        }
        let row_bytes = meta.dim * meta.dtype.size();
        let calls = per.iter().enumerate().filter(|(_, idx)| !idx.is_empty()).map(|(k, idx)| {
            let req = FetchFeaturesRequest {
                name: name.to_string(),
                ids: idx.iter().map(|&i| ids[i]).collect(),
                session_id: self.servers[k].session,
                loader_id: loaders.get(k).copied().unwrap_or(0),
            };
            let meta = &meta;
            async move {
                let data = self
                    .call(k, "FetchFeatures", move |mut c, d| async move {
                        let mut r = Request::new(req);
                        r.set_timeout(d);
                        let mut s = c.fetch_features(r).await?.into_inner();
                        let mut data = Vec::new();
                        while let Some(m) = s.message().await? {
                            if m.dim as usize != meta.dim || m.dtype != crate::features::dtype_name(meta.dtype) {
                                return Err(Status::internal(format!(
                                    "rows of dim {} and dtype {} for a feature of dim {} and dtype {}",
                                    m.dim,
                                    m.dtype,
                                    meta.dim,
                                    crate::features::dtype_name(meta.dtype)
                                )));
                            }
                            data.extend_from_slice(&m.data);
                        }
                        Ok(data)
                    })
                    .await?;
                if data.len() != idx.len() * row_bytes {
                    return Err(self.reply_error(
                        k,
                        format!("FetchFeatures `{}` sent {} bytes for {} rows of {row_bytes}", meta.name, data.len(), idx.len()),
                    ));
                }
                Ok::<_, StoreError>((k, data))
            }
        });
        let replies = try_join_all(calls).await?;
        let mut out = vec![0u8; ids.len() * row_bytes];
        for (k, data) in &replies {
            for (j, &i) in per[*k].iter().enumerate() {
                out[i * row_bytes..(i + 1) * row_bytes].copy_from_slice(&data[j * row_bytes..(j + 1) * row_bytes]);
            }
        }
        let shape = if meta.dim == 1 { vec![ids.len()] } else { vec![ids.len(), meta.dim] };
        let t = match meta.dtype {
            DType::F32 => {
                Tensor::from_f32(shape, out.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
            }
            DType::F64 => Tensor::from_f64(
                shape,
                out.chunks_exact(8).map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect(),
            ),
        };
        t.map_err(StoreError::Tensor)
    }
}

struct Inner {
    /// Dropped after `ctx`'s last use by this handle (field order).
    ctx: Arc<Ctx>,
    rt: tokio::runtime::Runtime,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle: close the sessions (bounded by the deadline; a
        // server gone is no reason to wait).
        if !self.ctx.closed.swap(true, Ordering::AcqRel) {
            let _ = self.rt.block_on(close_sessions(&self.ctx));
        }
    }
}

async fn close_sessions(ctx: &Ctx) -> Result<Vec<u32>, StoreError> {
    let calls = (0..ctx.servers.len()).map(|k| {
        let session_id = ctx.servers[k].session;
        ctx.call(k, "CloseSession", move |mut c, d| async move {
            let mut r = Request::new(CloseSessionRequest { session_id });
            r.set_timeout(d);
            Ok(c.close_session(r).await?.into_inner().loaders_released)
        })
    });
    futures_util::future::join_all(calls).await.into_iter().collect()
}

/// A handle on every storage server (see the module doc). Cheap to clone:
/// clones share the connections and sessions, which close with the last.
#[derive(Clone)]
pub struct RemoteDataset {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RemoteDataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let addrs: Vec<&str> = self.inner.ctx.servers.iter().map(|s| s.addr.as_str()).collect();
        write!(f, "RemoteDataset({addrs:?})")
    }
}

impl RemoteDataset {
    /// Connects to every server (`host:port`, in any order), opens a
    /// session on each, and checks that together they hold one graph: the
    /// same node and edge counts, ranks 0..W each once, owned ranges that
    /// cover the nodes.
    pub fn connect<S: AsRef<str>>(addrs: &[S], opts: &ConnectOptions) -> Result<RemoteDataset, StoreError> {
        if addrs.is_empty() {
            return Err(StoreError::NoServers);
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tiga-store-client")
            .enable_all()
            .build()
            .map_err(StoreError::Runtime)?;
        let auth = match &opts.token {
            Some(t) => Some(
                format!("Bearer {t}")
                    .parse()
                    .map_err(|_| StoreError::Options("the token has characters that cannot travel in gRPC metadata".into()))?,
            ),
            None => None,
        };
        let results =
            rt.block_on(futures_util::future::join_all(addrs.iter().map(|a| connect_one(a.as_ref(), opts, Auth(auth.clone())))));
        // One server refused or unreachable: close the sessions the others
        // opened before reporting it.
        if let Some(k) = results.iter().position(Result::is_err) {
            let opened: Vec<Server> = results.iter().filter_map(|r| r.as_ref().ok().map(|(s, _)| s.clone())).collect();
            if !opened.is_empty() {
                let ctx = Ctx {
                    servers: opened,
                    num_nodes: 0,
                    num_edges: 0,
                    features: Vec::new(),
                    deadline: opts.call_deadline,
                    closed: AtomicBool::new(true),
                };
                let _ = rt.block_on(close_sessions(&ctx));
            }
            return Err(results.into_iter().nth(k).and_then(Result::err).unwrap_or(StoreError::NoServers));
        }
        let connected: Vec<(Server, InfoReply)> = results.into_iter().filter_map(Result::ok).collect();
        let mut servers = Vec::new();
        let mut infos = Vec::new();
        for (server, info) in connected {
            servers.push(server);
            infos.push(info);
        }
        let mut order: Vec<usize> = (0..servers.len()).collect();
        order.sort_by_key(|&k| infos[k].rank);
        let servers: Vec<Server> = order.iter().map(|&k| servers[k].clone()).collect();
        let infos: Vec<InfoReply> = order.iter().map(|&k| infos[k].clone()).collect();
        let ctx = Arc::new(Ctx {
            num_nodes: infos[0].num_nodes,
            num_edges: infos[0].num_edges,
            features: Vec::new(),
            servers,
            deadline: opts.call_deadline,
            closed: AtomicBool::new(false),
        });
        // From here on, a failure closes the sessions opened (Inner's drop).
        let mut inner = Inner { ctx, rt };
        let features = check_cluster(&infos)?;
        if let Some(ctx) = Arc::get_mut(&mut inner.ctx) {
            ctx.features = features;
        }
        Ok(RemoteDataset { inner: Arc::new(inner) })
    }

    pub(crate) fn ctx(&self) -> &Arc<Ctx> {
        &self.inner.ctx
    }

    pub(crate) fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.inner.rt
    }

    pub fn num_nodes(&self) -> i64 {
        self.inner.ctx.num_nodes
    }

    pub fn num_edges(&self) -> i64 {
        self.inner.ctx.num_edges
    }

    /// The servers, by rank: address and owned node range.
    pub fn servers(&self) -> Vec<(String, Range<i64>)> {
        self.inner.ctx.servers.iter().map(|s| (s.addr.clone(), s.owned.clone())).collect()
    }

    /// The features every server serves.
    pub fn features(&self) -> &[FeatureMeta] {
        &self.inner.ctx.features
    }

    /// The rank of the server that owns node `n`.
    pub fn owner(&self, n: i64) -> Result<usize, StoreError> {
        self.inner.ctx.owner(n)
    }

    /// Compute rank `rank` of `world`'s node ids (of split `split`, or
    /// every node), from every server, in server order; servers are
    /// assigned to compute ranks in contiguous blocks
    /// ([`crate::split::share`]), so every id goes to exactly one rank.
    pub fn fetch_node_ids(&self, rank: u32, world: u32, split: Option<&str>) -> Result<Vec<i64>, StoreError> {
        let ctx = &self.inner.ctx;
        ctx.check_open()?;
        let split = split.unwrap_or("").to_string();
        let per = self.inner.rt.block_on(try_join_all((0..ctx.servers.len()).map(|k| {
            let req = FetchNodeIdsRequest {
                rank,
                world_size: world,
                split: split.clone(),
                node_type: String::new(),
                session_id: ctx.servers[k].session,
            };
            ctx.call(k, "FetchNodeIds", move |mut c, d| async move {
                let mut r = Request::new(req);
                r.set_timeout(d);
                let mut s = c.fetch_node_ids(r).await?.into_inner();
                let mut ids = Vec::new();
                while let Some(m) = s.message().await? {
                    ids.extend(m.ids);
                }
                Ok(ids)
            })
        })))?;
        Ok(per.concat())
    }

    /// Compute rank `rank` of `world`'s anchors of `split` with their
    /// positive labels and, with `negatives = Some((k, seed))`, `k` random
    /// negative labels each.
    pub fn fetch_ablp_input(
        &self,
        split: &str,
        rank: u32,
        world: u32,
        negatives: Option<(u32, u64)>,
    ) -> Result<AblpInput, StoreError> {
        let ctx = &self.inner.ctx;
        ctx.check_open()?;
        let (k, seed) = negatives.unwrap_or((0, 0));
        let per = self.inner.rt.block_on(try_join_all((0..ctx.servers.len()).map(|s| {
            let req = FetchAblpInputRequest {
                split: split.to_string(),
                rank,
                world_size: world,
                num_negatives: k,
                negative_seed: seed,
                session_id: ctx.servers[s].session,
                node_type: String::new(),
            };
            ctx.call(s, "FetchAblpInput", move |mut c, d| async move {
                let mut r = Request::new(req);
                r.set_timeout(d);
                let mut st = c.fetch_ablp_input(r).await?.into_inner();
                let mut all = FetchAblpInputReply::default();
                while let Some(m) = st.message().await? {
                    all.anchors.extend(m.anchors);
                    all.positive_offsets.extend(m.positive_offsets);
                    all.positives.extend(m.positives);
                    all.negative_offsets.extend(m.negative_offsets);
                    all.negatives.extend(m.negatives);
                }
                Ok(all)
            })
        })))?;
        let mut out = AblpInput { positive_offsets: vec![0], negative_offsets: vec![0], ..AblpInput::default() };
        for (s, r) in per.into_iter().enumerate() {
            let n = r.anchors.len();
            let ok_offsets = |o: &[i64], len: usize| {
                o.len() == n + 1 && o[0] == 0 && o.windows(2).all(|w| w[0] <= w[1]) && o[n] as usize == len
            };
            let neg_ok = if k == 0 {
                r.negative_offsets.is_empty() || ok_offsets(&r.negative_offsets, r.negatives.len())
            } else {
                ok_offsets(&r.negative_offsets, r.negatives.len())
            };
            if !ok_offsets(&r.positive_offsets, r.positives.len()) || !neg_ok {
                return Err(ctx.reply_error(s, format!("FetchAblpInput's offsets do not fit its {n} anchors")));
            }
            let (pb, nb) = (out.positives.len(), out.negatives.len());
            out.anchors.extend(r.anchors);
            out.positive_offsets.extend(r.positive_offsets[1..].iter().map(|&o| pb + o as usize));
            out.positives.extend(r.positives);
            if k > 0 {
                out.negative_offsets.extend(r.negative_offsets[1..].iter().map(|&o| nb + o as usize));
                out.negatives.extend(r.negatives);
            } else {
                out.negative_offsets.extend(std::iter::repeat_n(nb, n));
            }
        }
        Ok(out)
    }

    /// Rows of node feature `name` for nodes `ids` (each fetched from its
    /// owner), as a tensor `[ids.len()]` or `[ids.len(), dim]`.
    pub fn fetch_node_features(&self, name: &str, ids: &[i64]) -> Result<Tensor, StoreError> {
        let ctx = &self.inner.ctx;
        if ctx.feature(name)?.kind != "node" {
            return Err(StoreError::FeatureKind {
                name: name.into(),
                kind: "edge".into(),
                hint: "fetch it with fetch_edge_features",
            });
        }
        let owners: Vec<usize> = ids.iter().map(|&i| ctx.owner(i)).collect::<Result<_, _>>()?;
        self.inner.rt.block_on(ctx.fetch_rows(name, ids, &owners, &[]))
    }

    /// Rows of edge feature `name` for edges `ids`, edge `ids[i]` pointing
    /// into node `dsts[i]` (whose owner holds the edge).
    pub fn fetch_edge_features(&self, name: &str, ids: &[i64], dsts: &[i64]) -> Result<Tensor, StoreError> {
        let ctx = &self.inner.ctx;
        if ctx.feature(name)?.kind != "edge" {
            return Err(StoreError::FeatureKind {
                name: name.into(),
                kind: "node".into(),
                hint: "fetch it with fetch_node_features",
            });
        }
        if ids.len() != dsts.len() {
            return Err(StoreError::Options(format!("{} edge ids but {} destinations", ids.len(), dsts.len())));
        }
        let owners: Vec<usize> = dsts.iter().map(|&i| ctx.owner(i)).collect::<Result<_, _>>()?;
        self.inner.rt.block_on(ctx.fetch_rows(name, ids, &owners, &[]))
    }

    /// Closes the sessions now. Loaders still open are released at the
    /// servers and fail with [`StoreError::Closed`] from then on (see the
    /// crate doc); returns, per server, how many loaders that released.
    pub fn close(self) -> Result<Vec<u32>, StoreError> {
        let ctx = &self.inner.ctx;
        if ctx.closed.swap(true, Ordering::AcqRel) {
            return Ok(vec![0; ctx.servers.len()]);
        }
        self.inner.rt.block_on(close_sessions(ctx))
    }
}

async fn connect_one(addr: &str, opts: &ConnectOptions, auth: Auth) -> Result<(Server, InfoReply), StoreError> {
    let uri = if addr.contains("://") { addr.to_string() } else { format!("http://{addr}") };
    let endpoint = Endpoint::from_shared(uri)
        .map_err(|source| StoreError::Address { addr: addr.to_string(), source })?
        .connect_timeout(opts.connect_timeout)
        .tcp_nodelay(true);
    let started = std::time::Instant::now();
    let mut wait = Duration::from_millis(100);
    let mut attempt = 0;
    let channel = loop {
        attempt += 1;
        match endpoint.connect().await {
            Ok(c) => break c,
            Err(source) if attempt > opts.connect_retries => {
                return Err(StoreError::Connect { addr: addr.to_string(), attempts: attempt, waited: started.elapsed(), source })
            }
            Err(_) => {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(2));
            }
        }
    };
    let mut client = GraphStoreClient::with_interceptor(channel, auth)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let d = opts.call_deadline;
    let call_err = |method: &'static str, rank: u32| {
        let addr = addr.to_string();
        move |status: Status| StoreError::Call { rank, addr, method, status: Box::new(status) }
    };
    let timed = |method: &'static str| {
        let addr = addr.to_string();
        move |_| StoreError::Deadline { rank: u32::MAX, addr, method, deadline: d }
    };
    let mut r = Request::new(InfoRequest {});
    r.set_timeout(d);
    let info =
        tokio::time::timeout(d, client.info(r)).await.map_err(timed("Info"))?.map_err(call_err("Info", u32::MAX))?.into_inner();
    let mut r = Request::new(OpenSessionRequest { protocol_version: opts.protocol_version, client: opts.client_name.clone() });
    r.set_timeout(d);
    let session = tokio::time::timeout(d, client.open_session(r))
        .await
        .map_err(timed("OpenSession"))?
        .map_err(call_err("OpenSession", info.rank))?
        .into_inner()
        .session_id;
    let server = Server { rank: info.rank, addr: addr.to_string(), owned: info.owned_begin..info.owned_end, client, session };
    Ok((server, info))
}

/// The servers' infos (sorted by rank) make one store: returns the
/// features they serve.
fn check_cluster(infos: &[InfoReply]) -> Result<Vec<FeatureMeta>, StoreError> {
    let first = &infos[0];
    let world = first.world as usize;
    if infos.len() != world {
        let ranks: Vec<u32> = infos.iter().map(|i| i.rank).collect();
        return Err(StoreError::Cluster(format!(
            "{} servers given, but they say the store has {world} (ranks given: {ranks:?})",
            infos.len()
        )));
    }
    let mut at = 0i64;
    for (k, i) in infos.iter().enumerate() {
        if i.rank as usize != k || i.world != first.world {
            return Err(StoreError::Cluster(format!(
                "expected rank {k} of {world}; a server says rank {} of {}",
                i.rank, i.world
            )));
        }
        if i.num_nodes != first.num_nodes || i.num_edges != first.num_edges {
            return Err(StoreError::Cluster(format!(
                "server {k} serves {} nodes and {} edges, server 0 {} and {}",
                i.num_nodes, i.num_edges, first.num_nodes, first.num_edges
            )));
        }
        if i.partition != "contiguous" || i.owned_begin != at || i.owned_end < at {
            return Err(StoreError::Cluster(format!(
                "server {k} owns [{}, {}) ({}); expected a contiguous block starting at {at}",
                i.owned_begin, i.owned_end, i.partition
            )));
        }
        at = i.owned_end;
        if i.features != first.features {
            return Err(StoreError::Cluster(format!("server {k} serves other features than server 0")));
        }
    }
    if at != first.num_nodes {
        return Err(StoreError::Cluster(format!("the servers own nodes [0, {at}) of {}", first.num_nodes)));
    }
    first
        .features
        .iter()
        .map(|f| {
            let dtype = match f.dtype.as_str() {
                "f32" => DType::F32,
                "f64" => DType::F64,
                other => return Err(StoreError::Cluster(format!("feature {} has dtype `{other}`", f.name))),
            };
            Ok(FeatureMeta { name: f.name.clone(), kind: f.kind.clone(), dtype, dim: f.dim as usize })
        })
        .collect()
}
