//! Link prediction through a graph store: 2 storage servers and 2 compute
//! ranks on loopback.
//!
//! - The graph: a stochastic block model of 20,000 nodes in two
//!   communities (each node links to 3 random nodes of its own community
//!   and, one time in ten, to one of the other; every link both ways),
//!   written as a `.gfg` and served by two storage servers (ranks 0 and 1
//!   of 2, in-process here, as `tigac serve` runs them), which also make
//!   the node-anchor link split (80/10/10, by anchor).
//! - Two compute ranks (threads here: each its own [`RemoteDataset`], as a
//!   separate process would hold) each take their anchors of the train
//!   split ([`AblpLoader`]: anchors, their positive labels, 4 random
//!   negatives each), sample one hop of neighbours through the store.
//! - The model: a node embedding table (64 wide) with lazy Adam (only the
//!   rows a batch touches move; a plain dense table written here, shared by
//!   the two ranks, until the partitioned embedding lands), a SAGE-mean
//!   aggregation by a tiga kernel over each sampled block
//!   (`z = e + mean of the sampled neighbours' e`), dot-product scores of
//!   anchor/positive and anchor/negative pairs, and the logistic loss. Its
//!   derivative with respect to the scores is written here; everything
//!   below the scores goes through tiga's VJP of the kernel and the sparse
//!   optimizer. The supervision edges stay in the message-passing graph
//!   (the transductive setting).
//!
//! It prints the loss per epoch and the validation AUC, checks that the
//! loss went down and the AUC is above 0.85 (a non-zero exit otherwise),
//! and shuts down in order: loaders, datasets, then servers.

use std::sync::{Arc, Mutex, PoisonError};

use tiga::runtime::{save_gfg, FieldRole};
use tiga::{message_passing, Graph, Inputs, Tensor};
use tiga_graph_store::{
    AblpBatch, AblpLoader, AblpOptions, ConnectOptions, LoaderOptions, RemoteDataset, ServeOptions, ServerHandle, SplitKind,
    SplitSpec,
};

/// out[i] = mean over the sampled j → i of h[j] (0 for a row with none).
#[message_passing(reduce = mean)]
pub mod SageMean {
    use tiga::lang::*;
    pub struct Src {
        pub h: Vector<f32>,
    }
    pub fn edge(src: &Src) -> Vector<f32> {
        src.h.clone()
    }
}

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const NODES: usize = 20_000;
const DIM: usize = 64;
const EPOCHS: u64 = 5;
const RANKS: u32 = 2;
const SERVERS: usize = 2;

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The two-community stochastic block model (see the module doc).
fn sbm(seed: u64) -> Res<Graph> {
    let mut s = seed;
    let community = |i: usize| (i * 7919) % 2;
    let members: [Vec<u32>; 2] = [0, 1].map(|c| (0..NODES).filter(|&i| community(i) == c).map(|i| i as u32).collect());
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    let mut link = |a: u32, b: u32| {
        src.extend([a, b]);
        dst.extend([b, a]);
    };
    for i in 0..NODES {
        let own = &members[community(i)];
        for _ in 0..3 {
            let j = own[(splitmix(&mut s) % own.len() as u64) as usize];
            if j as usize != i {
                link(i as u32, j);
            }
        }
        if splitmix(&mut s).is_multiple_of(10) {
            let other = &members[1 - community(i)];
            link(i as u32, other[(splitmix(&mut s) % other.len() as u64) as usize]);
        }
    }
    Ok(Graph::from_edges(NODES, NODES, &src, &dst)?)
}

/// A dense embedding table with lazy Adam: a step moves only the rows it
/// has gradients for (their moments too); bias correction uses the
/// table's step count, as TensorFlow's LazyAdam does.
struct Embedding {
    rows: Vec<f32>,
    m: Vec<f32>,
    v: Vec<f32>,
    step: i32,
    lr: f32,
}

impl Embedding {
    fn new(seed: u64) -> Embedding {
        let mut s = seed;
        let scale = 1.0 / (DIM as f32).sqrt();
        let rows =
            (0..NODES * DIM).map(|_| ((splitmix(&mut s) >> 11) as f32 / (1u64 << 53) as f32 - 0.5) * 2.0 * scale).collect();
        Embedding { rows, m: vec![0.0; NODES * DIM], v: vec![0.0; NODES * DIM], step: 0, lr: 0.005 }
    }

    fn gather(&self, ids: &[i64]) -> Vec<f32> {
        ids.iter().flat_map(|&i| self.rows[i as usize * DIM..(i as usize + 1) * DIM].iter().copied()).collect()
    }

    /// `grads[k]` is the gradient of row `ids[k]` (ids distinct).
    fn lazy_adam(&mut self, ids: &[i64], grads: &[f32]) {
        let (b1, b2, eps) = (0.9f32, 0.999f32, 1e-8f32);
        self.step += 1;
        let c1 = 1.0 - b1.powi(self.step);
        let c2 = 1.0 - b2.powi(self.step);
        for (k, &i) in ids.iter().enumerate() {
            for d in 0..DIM {
                let (at, g) = (i as usize * DIM + d, grads[k * DIM + d]);
                self.m[at] = b1 * self.m[at] + (1.0 - b1) * g;
                self.v[at] = b2 * self.v[at] + (1.0 - b2) * g * g;
                self.rows[at] -= self.lr * (self.m[at] / c1) / ((self.v[at] / c2).sqrt() + eps);
            }
        }
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// The pairs of a batch: (anchor, label, 1 for a positive or 0).
fn pairs(b: &AblpBatch) -> Vec<(usize, usize, f32)> {
    let mut out = Vec::new();
    for a in 0..b.num_anchors {
        out.extend(b.positives[b.positive_offsets[a]..b.positive_offsets[a + 1]].iter().map(|&p| (a, p, 1.0)));
        out.extend(b.negatives[b.negative_offsets[a]..b.negative_offsets[a + 1]].iter().map(|&n| (a, n, 0.0)));
    }
    out
}

/// z = e + SageMean(e) over the batch's block; also returns e.
fn forward(b: &AblpBatch, table: &Mutex<Embedding>) -> Res<(Tensor, Vec<f32>)> {
    let n = b.batch.nodes.len();
    let e = Tensor::from_f32(vec![n, DIM], table.lock().unwrap_or_else(PoisonError::into_inner).gather(&b.batch.nodes))?;
    let agg = SageMean::kernel().run(&b.batch, &Inputs::new().src("h", &e))?;
    let agg = agg.out().ok_or("SageMean gave no output")?.as_f32().ok_or("SageMean's output is not f32")?.to_vec();
    let e_rows = e.as_f32().ok_or("not f32")?;
    let z: Vec<f32> = e_rows.iter().zip(&agg).map(|(a, b)| a + b).collect();
    Ok((e, z))
}

/// One training step on a batch: returns the summed loss and the pairs.
fn train_step(b: &AblpBatch, table: &Mutex<Embedding>) -> Res<(f64, usize)> {
    let (e, z) = forward(b, table)?;
    let n = b.batch.nodes.len();
    let ps = pairs(b);
    let mut dz = vec![0.0f32; n * DIM];
    let mut loss = 0.0f64;
    let scale = 1.0 / ps.len().max(1) as f32;
    for &(a, l, y) in &ps {
        let (za, zl) = (&z[a * DIM..(a + 1) * DIM], &z[l * DIM..(l + 1) * DIM]);
        let s = dot(za, zl);
        // Logistic loss: softplus(-s) for a positive, softplus(s) for a negative; d/ds = sigmoid(s) - y.
        loss += f64::from(if y > 0.5 { (-s).exp().ln_1p() } else { s.exp().ln_1p() });
        let g = (sigmoid(s) - y) * scale;
        for d in 0..DIM {
            dz[a * DIM + d] += g * zl[d];
            dz[l * DIM + d] += g * za[d];
        }
    }
    // Below the scores: z = e + SageMean(e), so de = dz + the kernel's VJP of dz.
    let dz_t = Tensor::from_f32(vec![n, DIM], dz.clone())?;
    let grads = SageMean::kernel().vjp(&b.batch, &Inputs::new().src("h", &e), &[("out", dz_t.view())])?;
    let dh = grads.src("h").ok_or("no gradient for h")?.as_f32().ok_or("not f32")?;
    let de: Vec<f32> = dz.iter().zip(dh).map(|(a, b)| a + b).collect();
    table.lock().unwrap_or_else(PoisonError::into_inner).lazy_adam(&b.batch.nodes, &de);
    Ok((loss, ps.len()))
}

/// Scores of the validation pairs of one rank: (score, label).
fn scores(ds: &RemoteDataset, rank: u32, table: &Mutex<Embedding>) -> Res<Vec<(f32, f32)>> {
    let mut val = AblpLoader::new(ds, ablp_options("val", rank, 99))?;
    let mut out = Vec::new();
    for b in val.epoch(0)? {
        let b = b?;
        let (_, z) = forward(&b, table)?;
        for (a, l, y) in pairs(&b) {
            out.push((dot(&z[a * DIM..(a + 1) * DIM], &z[l * DIM..(l + 1) * DIM]), y));
        }
    }
    val.close()?;
    Ok(out)
}

/// The area under the ROC curve (Mann-Whitney, ties counted half).
fn auc(mut s: Vec<(f32, f32)>) -> f64 {
    s.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut rank_sum, mut pos) = (0.0f64, 0.0f64);
    let mut i = 0;
    while i < s.len() {
        let mut j = i;
        while j < s.len() && s[j].0 == s[i].0 {
            j += 1;
        }
        let mid = (i + j + 1) as f64 / 2.0;
        for x in &s[i..j] {
            if x.1 > 0.5 {
                rank_sum += mid;
                pos += 1.0;
            }
        }
        i = j;
    }
    let neg = s.len() as f64 - pos;
    (rank_sum - pos * (pos + 1.0) / 2.0) / (pos * neg)
}

fn ablp_options(split: &str, rank: u32, negative_seed: u64) -> AblpOptions {
    AblpOptions {
        loader: LoaderOptions {
            batch_size: 512,
            fanouts: vec![10],
            shuffle: true,
            seed: 5 + u64::from(rank),
            prefetch: 2,
            ..LoaderOptions::default()
        },
        split: split.into(),
        rank,
        world: RANKS,
        num_negatives: 4,
        negative_seed,
    }
}

/// Compute rank `rank`: trains `EPOCHS` epochs, reporting each epoch's
/// (loss sum, pairs) through `report`, and returns its validation scores.
fn compute_rank(
    addrs: Vec<String>,
    rank: u32,
    table: Arc<Mutex<Embedding>>,
    barrier: Arc<std::sync::Barrier>,
    report: std::sync::mpsc::Sender<(u64, f64, usize)>,
) -> Res<Vec<(f32, f32)>> {
    let opts = ConnectOptions { client_name: format!("compute rank {rank} of {RANKS}"), ..ConnectOptions::default() };
    let ds = RemoteDataset::connect(&addrs, &opts)?;
    let mut train = AblpLoader::new(&ds, ablp_options("train", rank, 1000))?;
    for epoch in 0..EPOCHS {
        let (mut loss, mut count) = (0.0, 0);
        for b in train.epoch(epoch)? {
            let (l, c) = train_step(&b?, &table)?;
            loss += l;
            count += c;
        }
        report.send((epoch, loss, count))?;
        barrier.wait();
    }
    // Shut down in order: the loader, then (after validation) the dataset.
    train.close()?;
    let s = scores(&ds, rank, &table)?;
    ds.close()?;
    Ok(s)
}

fn main() -> Res<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("sbm.gfg");
    let g = sbm(17)?;
    save_gfg(&path, &g, false, &[] as &[(FieldRole, &str, tiga::TensorView<'_>)])?;
    println!("graph: stochastic block model, {} nodes in 2 communities, {} edges", g.num_dst(), g.num_edges());

    let servers: Vec<ServerHandle> = (0..SERVERS)
        .map(|r| {
            let mut o = ServeOptions::new(&path, r, SERVERS);
            o.splits = vec![SplitSpec { kind: SplitKind::Link, train: 0.8, val: 0.1, test: 0.1, seed: 1 }];
            ServerHandle::start(&o)
        })
        .collect::<Result<_, _>>()?;
    let addrs: Vec<String> = servers.iter().map(|s| s.addr().to_string()).collect();
    println!("storage servers: {}", addrs.join(", "));

    let table = Arc::new(Mutex::new(Embedding::new(3)));
    let barrier = Arc::new(std::sync::Barrier::new(RANKS as usize));
    let (tx, rx) = std::sync::mpsc::channel();
    let workers: Vec<_> = (0..RANKS)
        .map(|rank| {
            let (addrs, table, barrier, tx) = (addrs.clone(), table.clone(), barrier.clone(), tx.clone());
            std::thread::spawn(move || compute_rank(addrs, rank, table, barrier, tx))
        })
        .collect();
    drop(tx);
    let mut per_epoch = vec![(0.0f64, 0usize, 0u32); EPOCHS as usize];
    for (epoch, loss, count) in rx {
        let e = &mut per_epoch[epoch as usize];
        e.0 += loss;
        e.1 += count;
        e.2 += 1;
        if e.2 == RANKS {
            println!("epoch {epoch}: loss {:.4} over {} pairs", e.0 / e.1.max(1) as f64, e.1);
        }
    }
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.join().map_err(|_| "a compute rank panicked")??);
    }
    let area = auc(all.clone());
    println!("validation AUC: {area:.4} over {} pairs", all.len());
    for s in servers {
        s.stop()?;
    }
    let losses: Vec<f64> = per_epoch.iter().map(|e| e.0 / e.1.max(1) as f64).collect();
    if losses.last() >= losses.first() {
        return Err(format!("the loss did not go down: {losses:?}").into());
    }
    if area.is_nan() || area <= 0.85 {
        return Err(format!("validation AUC {area:.4} is not above 0.85").into());
    }
    println!(
        "checked: the loss went down ({:.4} -> {:.4}) and the validation AUC is above 0.85",
        losses[0],
        losses[losses.len() - 1]
    );
    Ok(())
}
