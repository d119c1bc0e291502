//! Every kernel of examples/kernels/gnn.rs sharded over the ranks of an
//! MPI job (run under `mpirun -n R`; `.ci/feature-suite` runs it on 2, 3 and 4
//! ranks): each rank computes the single-process answer itself and checks
//! its own rows against it, forward bit for bit and backward within 1e-6
//! (f32) / 1e-12 (f64); contiguous and METIS partitions (when built with
//! `metis`), from memory and from a `.gfg` every rank opens, on random
//! graphs with empty rows, isolated nodes, self loops, multi-edges, a
//! bipartite graph, and more ranks than some graph has rows. Exits non-zero
//! on the first mismatch.

use std::sync::Arc;

use tiga::compiler::ir::Role;
use tiga::runtime::comm::Mpi;
use tiga::runtime::{save_gfg, GfgFile};
use tiga::{Communicator, Graph, Kernel, PartitionChoice, ShardOptions, Sharded, Tensor};

mod common;
use common::{disk_fields, inputs, random_fields, rows_of, tensors, Rng};

#[path = "common/gnn.rs"]
mod gnn;

fn graph(rng: &mut Rng, ns: usize, nd: usize, ne: usize) -> Graph {
    common::random_graph(rng, ns, nd, ne, true)
}

/// One kernel on one sharded graph against one process: the number of
/// values checked.
fn check(k: &Kernel, g: &Graph, sh: &Sharded, rng: &mut Rng, what: &str) -> Result<usize, String> {
    let mut checked = 0;
    for (f, is_f32) in [(3usize, true), (5, false)] {
        // Every rank draws the same fields: one stream, same seed.
        let fields = random_fields(k, g, f, || rng.uniform() - 0.5);
        let ts = tensors(&fields, is_f32);
        let all = inputs(&fields, &ts);
        let want = k.run(g, &all).map_err(|e| format!("{what}: one process: {e}"))?;
        let want_g = k.grad(g, &all, "out").map_err(|e| format!("{what}: one-process grad: {e}"))?;
        let given = &all;
        let out = k.run(sh, given).map_err(|e| format!("{what}: sharded run: {e}"))?;
        let grads = k.grad(sh, given, "out").map_err(|e| format!("{what}: sharded grad: {e}"))?;
        for (o, (name, t)) in k.captured().outputs.iter().zip(&out.items) {
            let w = want.tensor(name).map_err(|e| e.to_string())?;
            let expect = match o.role {
                Role::Dst => rows_of(w, sh.owned_dst().iter().map(|&u| u as usize)),
                Role::Edge => rows_of(w, sh.owned_edges().iter().map(|&e| e as usize)),
                _ => w.to_f64_vec(),
            };
            let got = t.to_f64_vec();
            if got.iter().map(|x| x.to_bits()).ne(expect.iter().map(|x| x.to_bits())) && o.role != Role::Param {
                return Err(format!("{what}: F={f}: output {name} differs from one process: {got:?} vs {expect:?}"));
            }
            checked += got.len();
        }
        checked += check_grads(&want_g, &grads, sh, if is_f32 { 1e-6 } else { 1e-12 }, &format!("{what}: F={f}"))?;
    }
    Ok(checked)
}

fn main() {
    let mpi = match Mpi::init() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("mpi_sharded: {e}");
            std::process::exit(1);
        }
    };
    let comm: Arc<dyn Communicator> = Arc::new(mpi);
    let (rank, world) = (comm.rank(), comm.size());
    let dir = std::env::temp_dir().join(format!("tiga-mpi-sharded-{}", std::process::id()));
    let result = (|| -> Result<usize, String> {
        let mut rng = Rng(0x0123_4567_89ab_cdef);
        let graphs = vec![
            ("random", graph(&mut rng, 40, 40, 160)),
            ("sparse", graph(&mut rng, 50, 50, 30)),
            ("bipartite", graph(&mut rng, 13, 29, 70)),
            ("three-nodes", graph(&mut rng, 3, 3, 5)),
        ];
        let mut partitions = vec![("contiguous", PartitionChoice::Contiguous), ("balanced", PartitionChoice::Balanced)];
        if cfg!(feature = "metis") {
            partitions.push(("metis", PartitionChoice::Metis));
        }
        let mut checked = 0;
        for (gname, g) in &graphs {
            for (pname, p) in &partitions {
                if matches!(p, PartitionChoice::Metis) && g.num_src() != g.num_dst() {
                    continue; // METIS partitions square graphs.
                }
                let opts = ShardOptions { partition: p.clone(), depth: 1 };
                let sh = Sharded::from_graph(g, comm.clone(), &opts).map_err(|e| format!("{gname}/{pname}: {e}"))?;
                for k in gnn::all() {
                    checked += check(k, g, &sh, &mut rng, &format!("{} on {gname}, {pname}, {world} ranks", k.name()))?;
                }
            }
            // From a file every rank opens (each process writes its own
            // copy, so no rank reads a file another is writing).
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            for k in gnn::all() {
                if g.num_src() != g.num_dst() && k.name() == "GinSum" {
                    continue;
                }
                let mut frng = Rng(rng.0);
                let fields = random_fields(k, g, 3, || frng.uniform() - 0.5);
                let ts = tensors(&fields, true);
                let named: Vec<(Role, String, Tensor)> =
                    fields.iter().zip(&ts).map(|((r, n, _, _), t)| (*r, n.clone(), t.clone())).collect();
                let path = dir.join(format!("{gname}-{}-rank{rank}.gfg", k.name()));
                save_gfg(&path, g, false, &disk_fields(&named)).map_err(|e| e.to_string())?;
                for (pname, p) in &partitions {
                    if matches!(p, PartitionChoice::Metis) && g.num_src() != g.num_dst() {
                        continue;
                    }
                    let file = GfgFile::open(&path).map_err(|e| e.to_string())?;
                    let sh = Sharded::from_gfg_with(file, comm.clone(), p).map_err(|e| format!("{gname} file: {e}"))?;
                    // Replay the stored fields' draw.
                    let mut crng = Rng(rng.0);
                    let what = format!("{} on {gname}, from a .gfg, {pname}, {world} ranks", k.name());
                    checked += check_file(k, g, &sh, &mut crng, &what)?;
                }
                rng.next();
            }
        }
        Ok(checked)
    })();
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(n) => println!("mpi_sharded: rank {rank} of {world}: {n} values match one process"),
        Err(e) => {
            eprintln!("mpi_sharded: rank {rank} of {world}: {e}");
            std::process::exit(1);
        }
    }
}

/// The forward from a file holding the fields drawn from `rng`.
fn check_file(k: &Kernel, g: &Graph, sh: &Sharded, rng: &mut Rng, what: &str) -> Result<usize, String> {
    let fields = random_fields(k, g, 3, || rng.uniform() - 0.5);
    let ts = tensors(&fields, true);
    let all = inputs(&fields, &ts);
    let want = k.run(g, &all).map_err(|e| format!("{what}: one process: {e}"))?;
    let named: Vec<(Role, String, Tensor)> = fields.iter().zip(&ts).map(|((r, n, _, _), t)| (*r, n.clone(), t.clone())).collect();
    let params = common::params_only(&named);
    let out = k.run(sh, &params).map_err(|e| format!("{what}: sharded run: {e}"))?;
    let got = out.tensor("out").map_err(|e| e.to_string())?.to_f64_vec();
    let expect = rows_of(want.tensor("out").map_err(|e| e.to_string())?, sh.owned_dst().iter().map(|&u| u as usize));
    if got.iter().map(|x| x.to_bits()).ne(expect.iter().map(|x| x.to_bits())) {
        return Err(format!("{what}: output differs from one process"));
    }
    // The backward, the fields read from the file again.
    let want_g = k.grad(g, &all, "out").map_err(|e| format!("{what}: one-process grad: {e}"))?;
    let grads = k.grad(sh, &params, "out").map_err(|e| format!("{what}: sharded grad: {e}"))?;
    Ok(got.len() + check_grads(&want_g, &grads, sh, 1e-6, what)?)
}

/// This rank's gradients against one process's (relative to each
/// gradient's largest magnitude): the number of values checked.
fn check_grads(want: &tiga::Gradients, got: &tiga::Gradients, sh: &Sharded, tol: f64, what: &str) -> Result<usize, String> {
    let mut checked = 0;
    for (role, name, t) in &got.items {
        let w = want.get(*role, name).ok_or("a gradient is missing")?;
        let expect = match role {
            Role::Src => rows_of(w, sh.owned_src().iter().map(|&u| u as usize)),
            Role::Dst => rows_of(w, sh.owned_dst().iter().map(|&u| u as usize)),
            Role::Edge => rows_of(w, sh.owned_edges().iter().map(|&e| e as usize)),
            Role::Param => w.to_f64_vec(),
        };
        let got = t.to_f64_vec();
        let scale = expect.iter().fold(1.0f64, |m, x| m.max(x.abs()));
        if let Some((i, (x, y))) = got.iter().zip(&expect).enumerate().find(|(_, (x, y))| (*x - *y).abs() > tol * scale) {
            return Err(format!("{what}: gradient of {} {name}[{i}]: sharded {x}, one process {y}", role.name()));
        }
        checked += got.len();
    }
    Ok(checked)
}
