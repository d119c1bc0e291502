//! `tiga-bench graph-store`: mini-batches sampled through the graph store
//! over loopback against colocated sampling, side by side in one run.
//!
//! The graph: the power-law graph of `graphs.rs` (200k nodes, 3.2M edges
//! by default) saved as a `.gfg` with a node feature `x` of F = 128 f32.
//! Every configuration makes the same batches: 1024 seeds each (a fixed
//! shuffle of all nodes), fanouts 15, 10, the features of every node of the
//! batch gathered.
//!
//! - `colocated`: this process samples from the `.gfg` itself
//!   (`sample_multi_hop` over the file, rows read from its pages) and
//!   gathers the feature rows from the file's field, one batch after the
//!   other;
//! - `graph-store, S servers`: S storage servers (`ServerHandle`, what
//!   `tigac serve` runs, in this process on their own threads) and one
//!   compute client ([`NeighborLoader`], prefetch 4) over loopback gRPC.
//!
//! - `colocated, in RAM`: the same after loading the graph into memory
//!   (what a storage server holds of its rows), the load reported apart.
//!
//! Reported per configuration: mini-batches per second, fetched feature
//! GB/s (the feature bytes of the batches over the time), nodes and edges
//! per batch, and whether the batches equal the colocated ones (nodes,
//! hops and feature bits; a difference is an error and a non-zero exit).
//! Both sides share this machine's cores: over loopback the servers, the
//! client and its decoding compete for the same two CPUs.
//!
//! ```sh
//! cargo run --release -p tiga-bench -- graph-store [--quick] [--json PATH] [--table PATH]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use serde_json::{json, Value};
use tiga::runtime::sampling::sample_multi_hop;
use tiga::runtime::{save_gfg, FieldRole, GfgFile};
use tiga::Tensor;
use tiga_graph_store::{ConnectOptions, LoaderOptions, NeighborLoader, RemoteDataset, ServeOptions, ServerHandle};

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// A smaller graph (25k nodes, 400k edges) and 4 batches
    #[arg(long)]
    quick: bool,
    /// Nodes [default: 200000, or 25000 with --quick]
    #[arg(long, value_name = "N", value_parser = crate::timing::positive)]
    nodes: Option<usize>,
    /// Edges [default: 3200000, or 400000 with --quick]
    #[arg(long, value_name = "N", value_parser = crate::timing::positive)]
    edges: Option<usize>,
    /// Batches per configuration, all timed
    #[arg(long, value_name = "N", value_parser = crate::timing::positive)]
    batches: Option<usize>,
    /// Seeds per batch
    #[arg(long, value_name = "N", default_value_t = 1024, value_parser = crate::timing::positive)]
    batch_size: usize,
    /// Feature width
    #[arg(long, value_name = "F", default_value_t = 128, value_parser = crate::timing::positive)]
    width: usize,
    /// Where the JSON goes, written atomically
    #[arg(long, value_name = "PATH", default_value = "target/bench/graph-store.json")]
    json: PathBuf,
    /// Where the table goes, written atomically
    #[arg(long, value_name = "PATH", default_value = "target/bench/graph-store.txt")]
    table: PathBuf,
}

const FANOUTS: [i64; 2] = [15, 10];
const SAMPLE_SEED: u64 = 11;

/// One configuration's measurements.
struct Row {
    name: String,
    batches: usize,
    seconds: f64,
    nodes: usize,
    edges: usize,
    feature_bytes: usize,
    same: Option<bool>,
}

impl Row {
    fn per_s(&self) -> f64 {
        self.batches as f64 / self.seconds
    }
    fn gbs(&self) -> f64 {
        self.feature_bytes as f64 / self.seconds / 1e9
    }
    fn json(&self) -> Value {
        json!({
            "configuration": self.name,
            "batches": self.batches,
            "seconds": self.seconds,
            "batches_per_s": self.per_s(),
            "feature_gb_per_s": self.gbs(),
            "nodes_per_batch": self.nodes as f64 / self.batches as f64,
            "edges_per_batch": self.edges as f64 / self.batches as f64,
            "feature_bytes": self.feature_bytes,
            "equal_to_colocated": self.same,
        })
    }
}

/// What a batch is, for comparing configurations.
#[derive(PartialEq)]
struct Made {
    nodes: Vec<i64>,
    hops: Vec<tiga::runtime::sampling::Hop>,
    x: Vec<f32>,
}

pub fn main(args: &Args) -> ExitCode {
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tiga-bench graph-store: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(a: &Args) -> Result<ExitCode, String> {
    let nodes = a.nodes.unwrap_or(if a.quick { 25_000 } else { 200_000 });
    let edges = a.edges.unwrap_or(if a.quick { 400_000 } else { 3_200_000 });
    let batches = a.batches.unwrap_or(if a.quick { 4 } else { 12 });
    let f = a.width;
    let started = Instant::now();
    let dir = tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?;
    let path = dir.path().join("powerlaw.gfg");
    {
        let g = crate::graphs::powerlaw(nodes, edges, 7).map_err(|e| e.to_string())?;
        let x = Tensor::from_f32(vec![nodes, f], crate::graphs::uniform(nodes * f, 3)).map_err(|e| e.to_string())?;
        save_gfg(&path, &g, false, &[(FieldRole::Src, "x", x.view())]).map_err(|e| e.to_string())?;
    }
    eprintln!(
        "[graph-store] power-law graph, {nodes} nodes, {edges} edges, x: F = {f} f32; saved in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // The seeds: a fixed shuffle of every node, cut into batches.
    let mut order: Vec<i64> = (0..nodes as i64).collect();
    let mut rng = crate::graphs::SplitMix::new(5);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let want = batches * a.batch_size;
    if want > order.len() {
        return Err(format!("{batches} batches of {} need {want} seeds; the graph has {nodes} nodes", a.batch_size));
    }
    let seeds: Vec<i64> = order[..want].to_vec();

    let mut rows = Vec::new();
    let mut errors = Vec::new();
    let colocated = colocated(&path, &seeds, a.batch_size, false)?;
    rows.push(colocated.0);
    let (mut row, made) = self::colocated(&path, &seeds, a.batch_size, true)?;
    row.same = Some(made == colocated.1);
    rows.push(row);
    for servers in [1usize, 2] {
        let (mut row, made) = store(&path, &seeds, a.batch_size, servers)?;
        let same = made == colocated.1;
        if !same {
            errors.push(format!("{}: the batches differ from the colocated ones", row.name));
        }
        row.same = Some(same);
        rows.push(row);
    }

    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut table = format!(
        "graph store over loopback against colocated sampling: batch {}, fanouts {FANOUTS:?}, F = {f} f32, {batches} batches, each timed from the first request to the last batch in hand\n\
         power-law graph: {nodes} nodes, {edges} edges (sources Zipf 1.1, seed 7), as a .gfg; {cpus} CPUs shared by servers and client; {:.0} s in all\n\n",
        a.batch_size,
        started.elapsed().as_secs_f64()
    );
    table += &format!(
        "{:<36} {:>10} {:>12} {:>12} {:>13} {:>12}  {}\n",
        "configuration", "batches/s", "feature GB/s", "nodes/batch", "edges/batch", "ms/batch", "same as colocated"
    );
    for r in &rows {
        table += &format!(
            "{:<36} {:>10.2} {:>12.3} {:>12.0} {:>13.0} {:>12.1}  {}\n",
            r.name,
            r.per_s(),
            r.gbs(),
            r.nodes as f64 / r.batches as f64,
            r.edges as f64 / r.batches as f64,
            1e3 * r.seconds / r.batches as f64,
            match r.same {
                None => "ref",
                Some(true) => "yes",
                Some(false) => "NO",
            }
        );
    }
    for e in &errors {
        table += &format!("error: {e}\n");
    }
    print!("{table}");
    let doc = json!({
        "benchmark": "graph-store",
        "nodes": nodes,
        "edges": edges,
        "batch_size": a.batch_size,
        "fanouts": FANOUTS,
        "width": f,
        "dtype": "f32",
        "timed_batches": batches,
        "cpus": cpus,
        "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
        "errors": errors,
    });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())? + "\n";
    crate::report::write_atomic(&a.json, &text)?;
    crate::report::write_atomic(&a.table, &table)?;
    println!("wrote {} and {}", a.json.display(), a.table.display());
    Ok(if errors.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Colocated: sample from the file in this process, gather rows from its field.
fn colocated(path: &std::path::Path, seeds: &[i64], size: usize, memory: bool) -> Result<(Row, Vec<Made>), String> {
    let file = GfgFile::open(path).map_err(|e| e.to_string())?;
    let load = Instant::now();
    let in_memory = if memory { Some(file.load_graph().map_err(|e| e.to_string())?) } else { None };
    let load_s = load.elapsed().as_secs_f64();
    let x = file.field(FieldRole::Src, "x").map_err(|e| e.to_string())?;
    let xs = match x.view().map_err(|e| e.to_string())?.data() {
        tiga::Data::F32(v) => v,
        _ => return Err("x is not f32".into()),
    };
    let f = x.row_width();
    let mut made = Vec::new();
    let name = if memory { format!("colocated, in RAM (+{load_s:.1} s load)") } else { "colocated, paged .gfg".to_string() };
    let mut row = Row { name: name.clone(), batches: 0, seconds: 0.0, nodes: 0, edges: 0, feature_bytes: 0, same: None };
    let t = Instant::now();
    for chunk in seeds.chunks(size) {
        let s: Vec<u32> = chunk.iter().map(|&v| v as u32).collect();
        let m = match &in_memory {
            Some(g) => sample_multi_hop(g, &s, &FANOUTS, SAMPLE_SEED, None, None),
            None => sample_multi_hop(&file, &s, &FANOUTS, SAMPLE_SEED, None, None),
        }
        .map_err(|e| e.to_string())?;
        let mut feat = Vec::with_capacity(m.nodes.len() * f);
        for &n in &m.nodes {
            feat.extend_from_slice(&xs[n as usize * f..(n as usize + 1) * f]);
        }
        row.batches += 1;
        row.nodes += m.nodes.len();
        row.edges += m.hops.iter().map(|h| h.src.len()).sum::<usize>();
        row.feature_bytes += feat.len() * 4;
        made.push(Made { nodes: m.nodes.iter().map(|&n| i64::from(n)).collect(), hops: m.hops, x: feat });
    }
    row.seconds = t.elapsed().as_secs_f64();
    eprintln!("[graph-store] {name}: {:.2} batches/s", row.per_s());
    Ok((row, made))
}

/// Through `servers` storage servers over loopback.
fn store(path: &std::path::Path, seeds: &[i64], size: usize, servers: usize) -> Result<(Row, Vec<Made>), String> {
    let handles: Vec<ServerHandle> = (0..servers)
        .map(|r| ServerHandle::start(&ServeOptions::new(path, r, servers)).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let addrs: Vec<String> = handles.iter().map(|h| h.addr().to_string()).collect();
    let ds = RemoteDataset::connect(&addrs, &ConnectOptions::default()).map_err(|e| e.to_string())?;
    let opts = LoaderOptions {
        batch_size: size,
        fanouts: FANOUTS.to_vec(),
        prefetch: 4,
        sample_seed: SAMPLE_SEED,
        node_features: vec!["x".into()],
        ..LoaderOptions::default()
    };
    let loader = NeighborLoader::new(&ds, seeds.to_vec(), opts).map_err(|e| e.to_string())?;
    let name = format!("graph-store, {servers} server{}", if servers == 1 { "" } else { "s" });
    let mut row = Row { name: name.clone(), batches: 0, seconds: 0.0, nodes: 0, edges: 0, feature_bytes: 0, same: None };
    let mut made = Vec::new();
    let t = Instant::now();
    for b in loader.epoch(0) {
        let b = b.map_err(|e| e.to_string())?;
        let x = b.node_feature("x").and_then(Tensor::as_f32).ok_or("no f32 x in the batch")?.to_vec();
        row.batches += 1;
        row.nodes += b.nodes.len();
        row.edges += b.num_block_edges();
        row.feature_bytes += x.len() * 4;
        made.push(Made { nodes: b.nodes.clone(), hops: b.hops.clone(), x });
    }
    row.seconds = t.elapsed().as_secs_f64();
    eprintln!("[graph-store] {name}: {:.2} batches/s", row.per_s());
    drop(loader);
    ds.close().map_err(|e| e.to_string())?;
    for h in handles {
        h.stop().map_err(|e| e.to_string())?;
    }
    Ok((row, made))
}
