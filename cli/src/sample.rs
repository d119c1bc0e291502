//! `tigac sample`: multi-hop neighbour sampling from seed nodes
//! (`tiga::runtime::sampling`), written as `.npy` for a training loop in any
//! language: `DIR/nodes.npy` (int64 global ids: the seeds first, then each
//! new node in order of first appearance over the hops) and per hop `k`
//! `DIR/hop{k}.src.npy`, `DIR/hop{k}.dst.npy` (int64 indices into
//! nodes.npy: dst the centre, src the sampled neighbour) and
//! `DIR/hop{k}.edge_ids.npy` (int64 positions in the graph's edge order).
//!
//! Any graph `tigac run` reads; a `.gfg` is read a row at a time. Under
//! `mpirun -n R` (a tigac built with `--features mpi`) each rank samples the
//! centres it owns and rank 0 writes the files, which are the bytes a single
//! process writes: a centre's sample depends only on (seed, centre, hop).

use std::path::{Path, PathBuf};

use tiga::runtime::sampling::sample_multi_hop;
use tiga::runtime::{read_npy, read_npy_ids, write_npy_ids, Realization};

use crate::inputs::{open_graph, GraphSource};
use crate::output_paths::output_path;
use crate::report::Failure;

/// What `tigac sample` was asked.
pub struct SampleRequest {
    pub graph: PathBuf,
    pub edges: tiga::EdgeListOptions,
    pub seeds: PathBuf,
    pub fanout: Vec<i64>,
    pub weight: Option<PathBuf>,
    pub seed: u64,
    pub out: PathBuf,
}

/// `--fanout 10,5`: counts per hop, −1 for every edge.
pub fn parse_fanout(s: &str) -> Result<Vec<i64>, String> {
    let hops: Vec<i64> = s
        .split(',')
        .map(|p| {
            let n: i64 = p.trim().parse().map_err(|_| format!("`{p}` is not a whole number"))?;
            if n < -1 {
                return Err(format!("{n}: a fanout is a count ≥ 0, or -1 for every edge"));
            }
            Ok(n)
        })
        .collect::<Result<_, String>>()?;
    if hops.is_empty() {
        return Err("give at least one hop".into());
    }
    Ok(hops)
}

pub fn sample(req: &SampleRequest) -> Result<(), Failure> {
    let comm = crate::run_sharded::world()?;
    let rank = comm.as_ref().map_or(0, |c| c.rank());
    let graph = open_graph(&req.graph, &req.edges, &crate::inputs::any_size)?;
    let r: &dyn Realization = match &graph {
        GraphSource::Memory(g) => g,
        GraphSource::Paged(f) => f,
    };
    let seeds = read_npy_ids(&req.seeds).map_err(|e| Failure::new(format!("--seeds: {e}")))?;
    let n = r.num_dst();
    let seeds: Vec<u32> = seeds
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            u32::try_from(s).ok().filter(|&s| (s as usize) < n).ok_or_else(|| {
                Failure::new(format!("--seeds: seed {s} (at index {i}) is not a node of the graph (it has {n} nodes)"))
            })
        })
        .collect::<Result<_, _>>()?;
    let weights = match &req.weight {
        None => None,
        Some(p) => {
            let t = read_npy(p).map_err(|e| Failure::new(format!("--weight: {e}")))?;
            let shape = t.shape().to_vec();
            if !(shape.len() == 1 || shape.len() == 2 && shape[1] == 1) || shape[0] != r.num_edges() {
                return Err(Failure::new(format!(
                    "--weight {}: shape {shape:?}; expected [{}] (one weight per edge, in the graph's edge order)",
                    p.display(),
                    r.num_edges()
                )));
            }
            Some(t.view().to_f64_vec())
        }
    };
    let result = sample_multi_hop(r, &seeds, &req.fanout, req.seed, weights.as_deref(), comm.as_deref())
        .map_err(|e| Failure::new(format!("rank {rank}: {e}")))?;
    if rank != 0 {
        return Ok(());
    }
    std::fs::create_dir_all(&req.out).map_err(|e| Failure::new(format!("--out {}: {e}", req.out.display())))?;
    let mut inputs: Vec<&Path> = vec![&req.graph, &req.seeds];
    if let Some(w) = &req.weight {
        inputs.push(w);
    }
    let write = |name: String, ids: Vec<i64>| -> Result<(), Failure> {
        let path = output_path("--out", &req.out.join(&name), &inputs)?;
        write_npy_ids(&path, &ids).map_err(|e| Failure::new(e.to_string()))
    };
    let widen = |v: &[u32]| v.iter().map(|&x| i64::from(x)).collect::<Vec<i64>>();
    // Check every target before writing any, so a refused one leaves nothing half-written.
    for k in 0..result.hops.len() {
        for part in ["src", "dst", "edge_ids"] {
            output_path("--out", &req.out.join(format!("hop{k}.{part}.npy")), &inputs)?;
        }
    }
    output_path("--out", &req.out.join("nodes.npy"), &inputs)?;
    write("nodes.npy".into(), widen(&result.nodes))?;
    for (k, h) in result.hops.iter().enumerate() {
        write(format!("hop{k}.src.npy"), widen(&h.src))?;
        write(format!("hop{k}.dst.npy"), widen(&h.dst))?;
        write(format!("hop{k}.edge_ids.npy"), h.edge_ids.iter().map(|&e| e as i64).collect())?;
    }
    let edges: usize = result.hops.iter().map(|h| h.src.len()).sum();
    println!(
        "sampled {} hops from {} seeds: {} nodes, {edges} edges; wrote {}",
        result.hops.len(),
        seeds.len(),
        result.nodes.len(),
        req.out.display()
    );
    Ok(())
}
