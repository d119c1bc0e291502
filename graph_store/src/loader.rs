//! Loaders: mini-batches of seeds (or of link-prediction anchors) sampled
//! through the store, hop by hop, with their features, prefetched.
//!
//! A batch is made as [`tiga_dist::sampling::sample_multi_hop`] makes
//! it: hop `k`'s centres are the nodes first reached at hop `k − 1` (the
//! seeds at hop 0), each routed to the server that owns it, the answers
//! put back in centre order and merged with
//! [`tiga_dist::sampling::append_unique`]. So a batch equals the one a
//! single process samples from the whole file with the same seed.
//!
//! **Prefetch.** An epoch runs one task on the dataset's runtime that
//! makes up to `prefetch` batches at once (their calls to the servers
//! overlap) and hands them over, in order, through a queue of `prefetch`
//! places: memory is bounded by `2 × prefetch` batches, and a consumer
//! that stops reading stops the task. Dropping the epoch stops it too.
//!
//! **Seeds.** With `shuffle`, epoch `e` visits the seeds in the order of a
//! Fisher–Yates shuffle keyed by (`seed`, `e`); epoch `e` samples with
//! `sample_seed + e`, so epochs see different neighbourhoods and a batch
//! records the seed it was sampled with.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures_util::stream::StreamExt;
use tiga_dist::sampling::{append_unique, epoch_order, Hop, MiniBatch};
use tokio::sync::mpsc;
use tonic::Request;

use crate::client::{AblpInput, Ctx, RemoteDataset, StoreError};
use crate::proto::{CloseLoaderRequest, OpenLoaderRequest};

/// How a [`NeighborLoader`] batches and samples.
#[derive(Debug, Clone)]
pub struct LoaderOptions {
    pub batch_size: usize,
    /// Edges per centre at each hop (−1: all).
    pub fanouts: Vec<i64>,
    pub shuffle: bool,
    /// The shuffle's seed.
    pub seed: u64,
    /// Drop a last batch smaller than `batch_size`.
    pub drop_last: bool,
    /// Batches made ahead of the consumer (at least 1).
    pub prefetch: usize,
    /// The sampling seed of epoch 0 (epoch `e` uses `sample_seed + e`).
    pub sample_seed: u64,
    /// Node features gathered for every node of a batch.
    pub node_features: Vec<String>,
    /// Edge features gathered for every edge of a batch.
    pub edge_features: Vec<String>,
}

impl Default for LoaderOptions {
    fn default() -> LoaderOptions {
        LoaderOptions {
            batch_size: 1024,
            fanouts: vec![15, 10],
            shuffle: false,
            seed: 0,
            drop_last: false,
            prefetch: 4,
            sample_seed: 0,
            node_features: Vec::new(),
            edge_features: Vec::new(),
        }
    }
}

impl LoaderOptions {
    fn check(&self, ds: &RemoteDataset) -> Result<(), StoreError> {
        if self.batch_size == 0 {
            return Err(StoreError::Options("batch_size must be at least 1".into()));
        }
        if let Some(&f) = self.fanouts.iter().find(|&&f| f < -1) {
            return Err(StoreError::Options(format!("fanout {f}: a fanout is a count ≥ 0, or -1 for every edge")));
        }
        for (names, kind) in [(&self.node_features, "node"), (&self.edge_features, "edge")] {
            for n in names {
                let f = ds.ctx().feature(n)?;
                if f.kind != kind {
                    return Err(StoreError::FeatureKind {
                        name: n.clone(),
                        kind: f.kind.clone(),
                        hint: "list node features in node_features and edge features in edge_features",
                    });
                }
            }
        }
        Ok(())
    }
}

/// What one batch needs, shared by an epoch's task.
struct BatchSpec {
    ctx: Arc<Ctx>,
    fanouts: Vec<i64>,
    loaders: Vec<u64>,
    node_features: Vec<String>,
    edge_features: Vec<String>,
}

impl BatchSpec {
    async fn make(&self, seeds: Vec<i64>, sample_seed: u64) -> Result<MiniBatch, StoreError> {
        let ctx = &self.ctx;
        let num_seeds = seeds.len();
        let mut nodes = seeds;
        let mut frontier = 0..nodes.len();
        let mut hops = Vec::with_capacity(self.fanouts.len());
        for (hop, &fanout) in self.fanouts.iter().enumerate() {
            let centres: Vec<i64> = nodes[frontier.clone()].to_vec();
            let (offsets, neighbors, edge_ids) = ctx.sample_hop(&centres, fanout, sample_seed, hop as u32, &self.loaders).await?;
            let before = nodes.len();
            let (merged, at) = append_unique(&nodes, &neighbors);
            let mut h = Hop { src: Vec::with_capacity(at.len()), dst: Vec::with_capacity(at.len()), edge_ids: Vec::new() };
            for (k, c) in frontier.clone().enumerate() {
                for &a in &at[offsets[k]..offsets[k + 1]] {
                    h.src.push(a as u32);
                    h.dst.push(c as u32);
                }
            }
            h.edge_ids = edge_ids.iter().map(|&e| e as u64).collect();
            nodes = merged;
            frontier = before..nodes.len();
            hops.push(h);
        }
        let mut batch = MiniBatch::new(nodes, num_seeds, hops, sample_seed).map_err(StoreError::Block)?;
        if !self.node_features.is_empty() {
            let owners: Vec<usize> = batch.nodes.iter().map(|&n| ctx.owner(n)).collect::<Result<_, _>>()?;
            let fetched = futures_util::future::try_join_all(
                self.node_features.iter().map(|name| ctx.fetch_rows(name, &batch.nodes, &owners, &self.loaders)),
            )
            .await?;
            batch.node_features = self.node_features.iter().cloned().zip(fetched).collect();
        }
        if !self.edge_features.is_empty() {
            let ids: Vec<i64> = batch.block_edge_ids().into_iter().map(|e| e as i64).collect();
            let owners: Vec<usize> = batch
                .hops
                .iter()
                .flat_map(|h| h.dst.iter().map(|&d| batch.nodes[d as usize]))
                .map(|n| ctx.owner(n))
                .collect::<Result<_, _>>()?;
            let fetched = futures_util::future::try_join_all(
                self.edge_features.iter().map(|name| ctx.fetch_rows(name, &ids, &owners, &self.loaders)),
            )
            .await?;
            batch.edge_features = self.edge_features.iter().cloned().zip(fetched).collect();
        }
        Ok(batch)
    }
}

/// Registers a loader at every server; its ids, by server.
fn open_loaders(ds: &RemoteDataset, kind: &str, fanouts: &[i64]) -> Result<Vec<u64>, StoreError> {
    let ctx = ds.ctx();
    ctx.check_open()?;
    ds.runtime().block_on(futures_util::future::try_join_all((0..ctx.servers.len()).map(|k| {
        let req = OpenLoaderRequest { session_id: ctx.servers[k].session, kind: kind.to_string(), fanouts: fanouts.to_vec() };
        ctx.call(k, "OpenLoader", move |mut c, d| async move {
            let mut r = Request::new(req);
            r.set_timeout(d);
            Ok(c.open_loader(r).await?.into_inner().loader_id)
        })
    })))
}

/// What a loader asked of each server while open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoaderStats {
    pub sample_calls: u64,
    pub centers_sampled: u64,
    pub feature_calls: u64,
    pub feature_bytes: u64,
}

/// Releases a loader at every server (nothing to release once the
/// dataset was closed: the servers did it with the session).
fn close_loaders(ds: &RemoteDataset, ids: &[u64]) -> Result<Vec<LoaderStats>, StoreError> {
    let ctx = ds.ctx();
    if ctx.closed.load(Ordering::Acquire) {
        return Err(StoreError::Closed);
    }
    ds.runtime().block_on(futures_util::future::try_join_all((0..ctx.servers.len()).map(|k| {
        let req = CloseLoaderRequest { session_id: ctx.servers[k].session, loader_id: ids[k] };
        ctx.call(k, "CloseLoader", move |mut c, d| async move {
            let mut r = Request::new(req);
            r.set_timeout(d);
            let s = c.close_loader(r).await?.into_inner();
            Ok(LoaderStats {
                sample_calls: s.sample_calls,
                centers_sampled: s.centers_sampled,
                feature_calls: s.feature_calls,
                feature_bytes: s.feature_bytes,
            })
        })
    })))
}

/// One epoch's batches, in order (see the module doc). Ends after the
/// last batch, or after the first error.
pub struct Epoch<T> {
    rx: mpsc::Receiver<Result<T, StoreError>>,
    task: tokio::task::JoinHandle<()>,
    failed: bool,
}

impl<T> Iterator for Epoch<T> {
    type Item = Result<T, StoreError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let item = self.rx.blocking_recv();
        if matches!(item, Some(Err(_))) {
            self.failed = true;
        }
        item
    }
}

impl<T> Drop for Epoch<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Runs `make` over `jobs` on the dataset's runtime, `prefetch` at once,
/// results in order through a queue of `prefetch` places.
fn run_epoch<J, T, F, Fut>(ds: &RemoteDataset, jobs: Vec<J>, prefetch: usize, make: F) -> Epoch<T>
where
    J: Send + 'static,
    T: Send + 'static,
    F: Fn(J) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
{
    let depth = prefetch.max(1);
    let (tx, rx) = mpsc::channel(depth);
    let task = ds.runtime().spawn(async move {
        let mut batches = futures_util::stream::iter(jobs).map(make).buffered(depth);
        while let Some(b) = batches.next().await {
            let stop = b.is_err();
            if tx.send(b).await.is_err() || stop {
                return;
            }
        }
    });
    Epoch { rx, task, failed: false }
}

/// Mini-batches of seed nodes sampled through the store (see the module
/// doc).
pub struct NeighborLoader {
    ds: RemoteDataset,
    seeds: Vec<i64>,
    opts: LoaderOptions,
    loader_ids: Vec<u64>,
    open: bool,
}

impl std::fmt::Debug for NeighborLoader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NeighborLoader({} seeds, {:?})", self.seeds.len(), self.opts)
    }
}

impl NeighborLoader {
    /// A loader over `seeds` (global ids; checked against the graph).
    pub fn new(ds: &RemoteDataset, seeds: Vec<i64>, opts: LoaderOptions) -> Result<NeighborLoader, StoreError> {
        opts.check(ds)?;
        for &s in &seeds {
            ds.owner(s)?;
        }
        let loader_ids = open_loaders(ds, "neighbor", &opts.fanouts)?;
        Ok(NeighborLoader { ds: ds.clone(), seeds, opts, loader_ids, open: true })
    }

    /// Batches per epoch.
    pub fn num_batches(&self) -> usize {
        batches(self.seeds.len(), self.opts.batch_size, self.opts.drop_last)
    }

    /// The seeds of epoch `epoch`'s batches, in order.
    pub fn batch_seeds(&self, epoch: u64) -> Vec<Vec<i64>> {
        let order: Vec<usize> = if self.opts.shuffle {
            epoch_order(self.seeds.len(), self.opts.seed, epoch)
        } else {
            (0..self.seeds.len()).collect()
        };
        order.chunks(self.opts.batch_size).take(self.num_batches()).map(|c| c.iter().map(|&i| self.seeds[i]).collect()).collect()
    }

    /// Epoch `epoch`'s batches, made in the background.
    pub fn epoch(&self, epoch: u64) -> Epoch<MiniBatch> {
        let spec = Arc::new(BatchSpec {
            ctx: self.ds.ctx().clone(),
            fanouts: self.opts.fanouts.clone(),
            loaders: self.loader_ids.clone(),
            node_features: self.opts.node_features.clone(),
            edge_features: self.opts.edge_features.clone(),
        });
        let seed = self.opts.sample_seed.wrapping_add(epoch);
        run_epoch(&self.ds, self.batch_seeds(epoch), self.opts.prefetch, move |seeds| {
            let spec = spec.clone();
            async move { spec.make(seeds, seed).await }
        })
    }

    /// Releases this loader's state at the servers; what it asked of each.
    pub fn close(mut self) -> Result<Vec<LoaderStats>, StoreError> {
        self.open = false;
        close_loaders(&self.ds, &self.loader_ids)
    }
}

impl Drop for NeighborLoader {
    fn drop(&mut self) {
        if self.open {
            // Best effort: a server gone or a dataset closed is fine here.
            let _ = close_loaders(&self.ds, &self.loader_ids);
        }
    }
}

fn batches(n: usize, size: usize, drop_last: bool) -> usize {
    if drop_last {
        n / size
    } else {
        n.div_ceil(size)
    }
}

/// How an [`AblpLoader`] batches.
#[derive(Debug, Clone)]
pub struct AblpOptions {
    pub loader: LoaderOptions,
    /// "train", "val" or "test".
    pub split: String,
    /// This compute rank of `world`.
    pub rank: u32,
    pub world: u32,
    /// Random negatives per anchor (0: none), redrawn every epoch with
    /// `negative_seed + epoch`.
    pub num_negatives: u32,
    pub negative_seed: u64,
}

/// A link-prediction batch: the sampled neighbourhoods of the anchors and
/// their labels, and the labels as local indices into `batch.nodes`.
#[derive(Debug, Clone)]
pub struct AblpBatch {
    pub batch: MiniBatch,
    /// The anchors are `batch.nodes[..num_anchors]`.
    pub num_anchors: usize,
    /// Anchor `a`'s positives are `positives[positive_offsets[a]..positive_offsets[a + 1]]`.
    pub positive_offsets: Vec<usize>,
    pub positives: Vec<usize>,
    pub negative_offsets: Vec<usize>,
    pub negatives: Vec<usize>,
}

/// Anchors with positive (and negative) labels, batched, their
/// neighbourhoods and those of their labels sampled through the store
/// (as GiGL's ABLP loader: every label node is a seed of the batch).
pub struct AblpLoader {
    ds: RemoteDataset,
    opts: AblpOptions,
    input: AblpInput,
    input_epoch: Option<u64>,
    loader_ids: Vec<u64>,
    open: bool,
}

impl std::fmt::Debug for AblpLoader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AblpLoader({} anchors, {:?})", self.input.anchors.len(), self.opts)
    }
}

impl AblpLoader {
    pub fn new(ds: &RemoteDataset, opts: AblpOptions) -> Result<AblpLoader, StoreError> {
        opts.loader.check(ds)?;
        let input = ds.fetch_ablp_input(&opts.split, opts.rank, opts.world, negatives(&opts, 0))?;
        let loader_ids = open_loaders(ds, "ablp", &opts.loader.fanouts)?;
        Ok(AblpLoader { ds: ds.clone(), opts, input, input_epoch: Some(0), loader_ids, open: true })
    }

    /// This rank's anchors and labels (of the epoch last started).
    pub fn input(&self) -> &AblpInput {
        &self.input
    }

    pub fn num_batches(&self) -> usize {
        batches(self.input.anchors.len(), self.opts.loader.batch_size, self.opts.loader.drop_last)
    }

    /// Epoch `epoch`'s batches (negatives redrawn for it first).
    pub fn epoch(&mut self, epoch: u64) -> Result<Epoch<AblpBatch>, StoreError> {
        if self.opts.num_negatives > 0 && self.input_epoch != Some(epoch) {
            self.input =
                self.ds.fetch_ablp_input(&self.opts.split, self.opts.rank, self.opts.world, negatives(&self.opts, epoch))?;
            self.input_epoch = Some(epoch);
        }
        let lo = &self.opts.loader;
        let n = self.input.anchors.len();
        let order: Vec<usize> = if lo.shuffle { epoch_order(n, lo.seed, epoch) } else { (0..n).collect() };
        let jobs: Vec<Vec<usize>> = order.chunks(lo.batch_size).take(self.num_batches()).map(|c| c.to_vec()).collect();
        let input = Arc::new(self.input.clone());
        let spec = Arc::new(BatchSpec {
            ctx: self.ds.ctx().clone(),
            fanouts: lo.fanouts.clone(),
            loaders: self.loader_ids.clone(),
            node_features: lo.node_features.clone(),
            edge_features: lo.edge_features.clone(),
        });
        let seed = lo.sample_seed.wrapping_add(epoch);
        Ok(run_epoch(&self.ds, jobs, lo.prefetch, move |anchors: Vec<usize>| {
            let (spec, input) = (spec.clone(), input.clone());
            async move {
                let a: Vec<i64> = anchors.iter().map(|&i| input.anchors[i]).collect();
                let mut labels = Vec::new();
                for &i in &anchors {
                    labels.extend_from_slice(&input.positives[input.positive_offsets[i]..input.positive_offsets[i + 1]]);
                    labels.extend_from_slice(&input.negatives[input.negative_offsets[i]..input.negative_offsets[i + 1]]);
                }
                let (seeds, at) = append_unique(&a, &labels);
                let batch = spec.make(seeds, seed).await?;
                let mut out = AblpBatch {
                    num_anchors: a.len(),
                    positive_offsets: vec![0],
                    positives: Vec::new(),
                    negative_offsets: vec![0],
                    negatives: Vec::new(),
                    batch,
                };
                let mut p = 0;
                for &i in &anchors {
                    let np = input.positive_offsets[i + 1] - input.positive_offsets[i];
                    out.positives.extend_from_slice(&at[p..p + np]);
                    p += np;
                    out.positive_offsets.push(out.positives.len());
                    let nn = input.negative_offsets[i + 1] - input.negative_offsets[i];
                    out.negatives.extend_from_slice(&at[p..p + nn]);
                    p += nn;
                    out.negative_offsets.push(out.negatives.len());
                }
                Ok(out)
            }
        }))
    }

    pub fn close(mut self) -> Result<Vec<LoaderStats>, StoreError> {
        self.open = false;
        close_loaders(&self.ds, &self.loader_ids)
    }
}

impl Drop for AblpLoader {
    fn drop(&mut self) {
        if self.open {
            let _ = close_loaders(&self.ds, &self.loader_ids);
        }
    }
}

fn negatives(opts: &AblpOptions, epoch: u64) -> Option<(u32, u64)> {
    (opts.num_negatives > 0).then(|| (opts.num_negatives, opts.negative_seed.wrapping_add(epoch)))
}
