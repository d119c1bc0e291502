//! Link prediction through a graph store: 2 storage servers and 2 compute
//! ranks on loopback.
//!
//! ```text
//! cargo run --release -p tiga-graph-store --example graph_store_link_prediction
//! cargo build --release -p tiga-graph-store --features mpi --example graph_store_link_prediction
//! mpirun -n 2 target/release/examples/graph_store_link_prediction
//! ```
//!
//! - The graph: a stochastic block model of 20,000 nodes in two
//!   communities (each node links to 3 random nodes of its own community
//!   and, one time in ten, to one of the other; every link both ways),
//!   written as a `.gfg` and served by two storage servers (ranks 0 and 1
//!   of 2, in-process in the first compute process here, as `tigac serve`
//!   runs them), which also make the node-anchor link split (80/10/10, by
//!   anchor).
//! - Two compute ranks: threads of this process by default (each its own
//!   [`RemoteDataset`] and its own rank of an in-process communicator),
//!   or, built with `--features mpi` and started by `mpirun -n 2`, two
//!   processes on MPI. Each takes its anchors of the train split
//!   ([`AblpLoader`]: anchors, their positive labels, 4 random negatives
//!   each) and samples one hop of neighbours through the store.
//! - The model: a node embedding table (64 wide), a partitioned embedding
//!   ([`Embedding`], distributed over the compute ranks) trained with lazy
//!   Adam (only the rows a step touches move; each rank's gradient rows go
//!   to the rank that owns the row, where they are summed), a SAGE-mean
//!   aggregation by a tiga kernel over each sampled block
//!   (`z = e + mean of the sampled neighbours' e`), dot-product scores of
//!   anchor/positive and anchor/negative pairs, and the logistic loss. Its
//!   derivative with respect to the scores is written here; everything
//!   below the scores goes through tiga's VJP of the kernel and the sparse
//!   optimizer. The supervision edges stay in the message-passing graph
//!   (the transductive setting).
//!
//! Gathers and optimizer steps are collective, so every rank takes as
//! many steps per epoch as the rank with the most batches (a rank out of
//! batches takes empty ones).
//!
//! It prints the loss per epoch and the validation AUC, checks that the
//! loss went down and the AUC is above 0.85 (a non-zero exit otherwise),
//! and shuts down in order: loaders, datasets, then servers.

use std::path::Path;

use tiga::runtime::comm::{Communicator, InProcess};
use tiga::runtime::embedding::{Embedding, Optimizer};
use tiga::runtime::partitioned::Options;
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
/// Compute ranks when they run as threads (under mpirun: the world size).
const RANKS: usize = 2;
const LR: f64 = 0.005;
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

/// Rows `ids` of the embedding as an `[n, DIM]` tensor (collective).
fn gather(emb: &Embedding<f32>, ids: &[i64]) -> Res<Tensor> {
    Ok(Tensor::from_f32(vec![ids.len(), DIM], emb.gather(ids)?)?)
}

/// A reproducible start: row `i` depends only on `i` (and the seed), so
/// the table is the same however many ranks hold it.
fn initialize(emb: &Embedding<f32>, seed: u64) -> Res<()> {
    let first = emb.table().local_rows().start;
    let scale = 1.0 / (DIM as f32).sqrt();
    emb.table().with_local_mut::<f32, _>(|mut rows| {
        for i in 0..rows.rows() {
            let mut s = seed ^ ((first + i) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            for x in rows.row_mut(i) {
                *x = ((splitmix(&mut s) >> 11) as f32 / (1u64 << 53) as f32 - 0.5) * 2.0 * scale;
            }
        }
    })?;
    Ok(())
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

/// z = e + SageMean(e) over the batch's block, with e the batch's rows.
fn forward(b: &AblpBatch, e: &Tensor) -> Res<Vec<f32>> {
    let agg = SageMean::kernel().run(&b.batch, &Inputs::new().src("h", e))?;
    let agg = agg.out().ok_or("SageMean gave no output")?.as_f32().ok_or("SageMean's output is not f32")?;
    let e_rows = e.as_f32().ok_or("not f32")?;
    Ok(e_rows.iter().zip(agg).map(|(a, b)| a + b).collect())
}

/// One training step on a batch: the rows' gradients go into the
/// embedding (the step is taken by the caller); returns the summed loss
/// and the pairs.
fn train_step(b: &AblpBatch, e: &Tensor, emb: &mut Embedding<f32>) -> Res<(f64, usize)> {
    let z = forward(b, e)?;
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
    let grads = SageMean::kernel().vjp(&b.batch, &Inputs::new().src("h", e), &[("out", dz_t.view())])?;
    let dh = grads.src("h").ok_or("no gradient for h")?.as_f32().ok_or("not f32")?;
    let de: Vec<f32> = dz.iter().zip(dh).map(|(a, b)| a + b).collect();
    emb.accumulate(&b.batch.nodes, &de)?;
    Ok((loss, ps.len()))
}

/// The most batches any rank has (collective): every rank takes that
/// many gathers and steps.
fn steps(comm: &dyn Communicator, batches: usize) -> Res<usize> {
    let all = comm.all_gather_bytes(&(batches as u64).to_le_bytes())?;
    Ok(all.iter().filter_map(|b| b.as_slice().try_into().ok().map(u64::from_le_bytes)).max().unwrap_or(0) as usize)
}

/// One epoch of training on this rank: (loss sum, pairs).
fn train_epoch(comm: &dyn Communicator, train: &mut AblpLoader, epoch: u64, emb: &mut Embedding<f32>) -> Res<(f64, usize)> {
    let n = steps(comm, train.num_batches())?;
    let mut batches = train.epoch(epoch)?;
    let (mut loss, mut count) = (0.0, 0);
    for _ in 0..n {
        match batches.next().transpose()? {
            Some(b) => {
                let e = gather(emb, &b.batch.nodes)?;
                let (l, c) = train_step(&b, &e, emb)?;
                loss += l;
                count += c;
            }
            None => {
                gather(emb, &[])?;
            }
        }
        emb.step(LR)?;
    }
    Ok((loss, count))
}

/// Scores of this rank's validation pairs: (score, label).
fn scores(comm: &dyn Communicator, ds: &RemoteDataset, emb: &Embedding<f32>) -> Res<Vec<(f32, f32)>> {
    let mut val = AblpLoader::new(ds, ablp_options("val", comm, 99))?;
    let n = steps(comm, val.num_batches())?;
    let mut batches = val.epoch(0)?;
    let mut out = Vec::new();
    for _ in 0..n {
        match batches.next().transpose()? {
            Some(b) => {
                let z = forward(&b, &gather(emb, &b.batch.nodes)?)?;
                for (a, l, y) in pairs(&b) {
                    out.push((dot(&z[a * DIM..(a + 1) * DIM], &z[l * DIM..(l + 1) * DIM]), y));
                }
            }
            None => {
                gather(emb, &[])?;
            }
        }
    }
    drop(batches);
    val.close()?;
    Ok(out)
}

/// The area under the ROC curve (Mann-Whitney, ties counted half).
fn auc(mut s: Vec<(f32, f32)>) -> f64 {
    s.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
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

fn ablp_options(split: &str, comm: &dyn Communicator, negative_seed: u64) -> AblpOptions {
    AblpOptions {
        loader: LoaderOptions {
            batch_size: 512,
            fanouts: vec![10],
            shuffle: true,
            seed: 5 + comm.rank() as u64,
            prefetch: 2,
            ..LoaderOptions::default()
        },
        split: split.into(),
        rank: comm.rank() as u32,
        world: comm.size() as u32,
        num_negatives: 4,
        negative_seed,
    }
}

/// What every rank learns: the mean loss per epoch and the validation AUC.
struct Outcome {
    losses: Vec<f64>,
    auc: f64,
    pairs: usize,
}

/// One compute rank: connects to the servers, trains `EPOCHS` epochs,
/// scores the validation pairs, and shuts its side down in order (the
/// loader, then the dataset). Rank 0 prints.
fn compute_rank(comm: &dyn Communicator, addrs: &[String]) -> Res<Outcome> {
    let (rank, size) = (comm.rank(), comm.size());
    let opts = ConnectOptions { client_name: format!("compute rank {rank} of {size}"), ..ConnectOptions::default() };
    let ds = RemoteDataset::connect(addrs, &opts)?;
    let options = Options::default();
    let mut emb = Embedding::<f32>::new(comm, ds.num_nodes() as usize, DIM, &options, Optimizer::lazy_adam())?;
    initialize(&emb, 3)?;
    let mut train = AblpLoader::new(&ds, ablp_options("train", comm, 1000))?;
    let mut losses = Vec::new();
    for epoch in 0..EPOCHS {
        let (loss, count) = train_epoch(comm, &mut train, epoch, &mut emb)?;
        let mut sums = [loss, count as f64];
        comm.all_reduce_f64(&mut sums)?;
        losses.push(sums[0] / sums[1].max(1.0));
        if rank == 0 {
            println!("epoch {epoch}: loss {:.4} over {} pairs", sums[0] / sums[1].max(1.0), sums[1]);
        }
    }
    train.close()?;
    let mine = scores(comm, &ds, &emb)?;
    ds.close()?;
    // Every rank scores the union, so every rank reaches the same verdict.
    let bytes: Vec<u8> = mine.iter().flat_map(|(s, y)| s.to_le_bytes().into_iter().chain(y.to_le_bytes())).collect();
    let all: Vec<(f32, f32)> = comm
        .all_gather_bytes(&bytes)?
        .iter()
        .flat_map(|b| {
            b.chunks_exact(8)
                .map(|c| (f32::from_le_bytes([c[0], c[1], c[2], c[3]]), f32::from_le_bytes([c[4], c[5], c[6], c[7]])))
        })
        .collect::<Vec<_>>();
    let pairs = all.len();
    Ok(Outcome { losses, auc: auc(all), pairs })
}

/// The graph file and its storage servers.
fn start_servers(dir: &Path) -> Res<Vec<ServerHandle>> {
    let path = dir.join("sbm.gfg");
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
    println!("storage servers: {}", servers.iter().map(|s| s.addr().to_string()).collect::<Vec<_>>().join(", "));
    Ok(servers)
}

fn stop_servers(servers: Vec<ServerHandle>) -> Res<()> {
    for s in servers {
        s.stop()?;
    }
    Ok(())
}

/// Checks what rank 0 reports, after everything has shut down.
fn check(o: &Outcome) -> Res<()> {
    println!("validation AUC: {:.4} over {} pairs", o.auc, o.pairs);
    let (first, last) = (o.losses.first().copied().unwrap_or(f64::NAN), o.losses.last().copied().unwrap_or(f64::NAN));
    if last.partial_cmp(&first) != Some(std::cmp::Ordering::Less) {
        return Err(format!("the loss did not go down: {:?}", o.losses).into());
    }
    if o.auc.is_nan() || o.auc <= 0.85 {
        return Err(format!("validation AUC {:.4} is not above 0.85", o.auc).into());
    }
    println!("checked: the loss went down ({first:.4} -> {last:.4}) and the validation AUC is above 0.85");
    Ok(())
}

/// Compute ranks as threads of this process, which also runs the servers.
fn in_process() -> Res<Outcome> {
    let dir = tempfile::tempdir()?;
    let servers = start_servers(dir.path())?;
    let addrs: Vec<String> = servers.iter().map(|s| s.addr().to_string()).collect();
    println!("compute: {RANKS} ranks, in-process");
    let mut outcomes = InProcess::run(RANKS, |c| compute_rank(&c, &addrs));
    stop_servers(servers)?;
    let mut first = None;
    for (r, o) in outcomes.drain(..).enumerate() {
        let o = o?.map_err(|e| format!("compute rank {r}: {e}"))?;
        first.get_or_insert(o);
    }
    first.ok_or_else(|| "no compute rank ran".into())
}

/// Compute ranks as MPI processes; rank 0 also runs the servers and tells
/// the others their addresses.
#[cfg(feature = "mpi")]
fn under_mpi() -> Res<Option<Outcome>> {
    let comm = tiga::runtime::comm::Mpi::init()?;
    let dir = tempfile::tempdir()?;
    let started = if comm.rank() == 0 { start_servers(dir.path()).map_err(|e| e.to_string()) } else { Ok(Vec::new()) };
    let addrs = match &started {
        Ok(s) => s.iter().map(|s| s.addr().to_string()).collect::<Vec<_>>().join(","),
        Err(_) => String::new(),
    };
    // Every rank learns rank 0's addresses, or that it could not start them.
    let told = comm.all_gather_bytes(addrs.as_bytes())?;
    let servers = started?;
    let addrs: Vec<String> = String::from_utf8_lossy(&told[0]).split(',').filter(|a| !a.is_empty()).map(str::to_string).collect();
    if addrs.is_empty() {
        return Err("rank 0 could not start the storage servers".into());
    }
    if comm.rank() == 0 {
        println!("compute: {} ranks, on {}", comm.size(), comm.engine());
    }
    let outcome = compute_rank(&comm, &addrs);
    // The servers stop after every rank has closed its session.
    comm.barrier()?;
    stop_servers(servers)?;
    let outcome = outcome?;
    Ok((comm.rank() == 0).then_some(outcome))
}

fn main() -> Res<()> {
    if tiga::runtime::comm::launched_by_mpirun() {
        #[cfg(feature = "mpi")]
        {
            match under_mpi()? {
                Some(o) => check(&o),
                None => Ok(()),
            }
        }
        #[cfg(not(feature = "mpi"))]
        {
            Err("started by mpirun, but built without the mpi feature: rebuild with --features mpi".into())
        }
    } else {
        check(&in_process()?)
    }
}
