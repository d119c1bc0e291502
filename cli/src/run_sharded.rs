//! `mpirun -n R tigac run ...`: the same command, sharded over the ranks.
//!
//! When the MPI world has more than one rank (a tigac built with
//! `--features mpi`), each rank owns a block of destination rows
//! (`--partition`, `--halo-depth`): a `.gfg` is read by each rank for its
//! own rows only (for METIS or edge-balanced blocks, rank 0 first reads the
//! adjacency to partition it), any other graph is read by every rank and
//! sharded in memory. Every rank reads the `.npy` fields (the user's
//! numbering) and keeps its rows. Rank 0 gathers the outputs and gradients
//! back into the user's numbering and writes the same `--out` and
//! `--grads` files, bit for bit for outputs, that one process writes.
//! A page plan (`--page-rows`, `--page-bytes`, `--prefetch`) or a RAM
//! budget makes each rank write its local rows to a `.gfg` of its own in
//! the spill directory and run them page by page, as one process runs a
//! file, around the same halo exchange.
//! `--timing` adds, per rank (arrays indexed by rank), `exchange_ms_median`
//! (the halo exchange of one run, start to ghosts written) and
//! `ghost_rows`.
//!
//! A rank that fails says why on its stderr and exits non-zero; under MPI
//! that ends the job (mpirun stops the other ranks), so nothing hangs.

use std::io::Write as _;
use std::sync::Arc;
use std::time::Instant;

use tiga::compiler::ir::Role;
use tiga::runtime::shard::{ShardOptions, Sharded};
use tiga::{Communicator, Inputs, Outputs, Tensor};

use crate::inputs::{is_gfg, load_field, load_kernels, open_graph, GraphSource};
use crate::report::Failure;
use crate::run::{
    check_cotangent, load_cotangent, median_ms, output_targets, plan_cotangents, plan_outputs, prepare_dir, print_json_line,
    Cotangents, RunRequest,
};

/// The MPI world when this process runs under `mpirun` with more than one
/// rank; `None` otherwise (and always without the `mpi` feature).
pub fn world() -> Result<Option<Arc<dyn Communicator>>, Failure> {
    #[cfg(feature = "mpi")]
    if tiga::runtime::comm::launched_by_mpirun() {
        let mpi = tiga::runtime::comm::Mpi::init().map_err(|e| Failure::new(format!("MPI: {e}")))?;
        if mpi.size() > 1 {
            return Ok(Some(Arc::new(mpi)));
        }
    }
    Ok(None)
}

/// Why [`world`] found no sharded run, for a flag that needs one.
pub fn why_one_process() -> &'static str {
    if cfg!(feature = "mpi") {
        "not launched by mpirun with more than one rank"
    } else {
        "this tigac is built without --features mpi"
    }
}

fn fail(rank: usize) -> impl Fn(String) -> Failure {
    move |m| Failure::new(format!("rank {rank}: {m}"))
}

pub fn run(req: &RunRequest, comm: Arc<dyn Communicator>) -> Result<(), Failure> {
    let rank = comm.rank();
    let f = fail(rank);
    // The single-process run's schedule (the environment, then the flags):
    // one command line runs under one schedule, sharded or not.
    let schedule = crate::run::schedule_of(req)?;
    let mut kernels = load_kernels(&req.file, Some(&req.kernel))?;
    let kernel = kernels.pop().ok_or_else(|| f(format!("no kernel named `{}`", req.kernel)))?;
    let plan = plan_outputs(&kernel, &req.outs)?;
    let backward = plan_cotangents(&kernel, req)?;
    if backward.is_some() {
        kernel.adjoint_plan().map_err(|e| f(format!("kernel `{}`: cannot compute gradients: {e}", kernel.name())))?;
    }
    let targets = output_targets(&kernel, req, &plan, backward.as_ref().map(|(dir, _)| dir.as_path()))?;
    let tensors: Vec<(Role, String, Tensor)> =
        req.fields.iter().map(|(r, b)| Ok((*r, b.name.clone(), load_field(*r, b)?))).collect::<Result<_, Failure>>()?;
    let inputs = tensors.iter().fold(Inputs::new(), |acc, (r, n, t)| acc.with_role(*r, n, t));
    let partition = crate::partition_report::choice(&req.partition)?;
    let opts = ShardOptions { partition, depth: req.halo_depth };
    let mut sh = if is_gfg(&req.graph) {
        let file = tiga::runtime::GfgFile::open(&req.graph).map_err(|e| f(e.to_string()))?;
        Sharded::from_gfg_options(file, comm.clone(), &opts).map_err(|e| f(e.to_string()))?
    } else {
        let g = match open_graph(&req.graph, &req.edges, &crate::inputs::any_size)? {
            GraphSource::Memory(g) => g,
            GraphSource::Paged(_) => return Err(f("a .gfg reached the in-memory path".into())),
        };
        Sharded::from_graph(&g, comm.clone(), &opts).map_err(|e| f(e.to_string()))?
    };
    // A page plan or a RAM budget: each rank runs its rows from a file of
    // its own, page by page, under the same schedule.
    if req.paging.given().is_some() || schedule.ram_budget.is_some() {
        let dir = tiga::offload::spill_dir(&schedule);
        sh.page_local(&dir).map_err(|e| f(e.to_string()))?;
    }
    if rank == 0 {
        if let Some((dir, _)) = &backward {
            prepare_dir(dir)?;
        }
    }
    let mut times = Vec::new();
    let mut exchange = Vec::new();
    let mut outputs = None;
    let mut compile_ms = 0.0;
    for i in 0..req.repeat.max(1) {
        let before = sh.stats();
        let start = Instant::now();
        let o = kernel.run_with(&sh, &inputs, &schedule).map_err(|e| f(e.to_string()))?;
        let ms = start.elapsed().as_secs_f64() * 1e3;
        // The first run compiles the variant; later ones reuse it.
        if i == 0 && req.repeat > 1 {
            compile_ms = ms;
        } else {
            times.push(ms);
        }
        exchange.push(sh.stats().total_ms - before.total_ms);
        outputs = Some(o);
    }
    let outputs = outputs.ok_or_else(|| f("the kernel did not run".into()))?;
    let gathered = gather_outputs(&kernel, &sh, &outputs).map_err(&f)?;
    if let Some(all) = &gathered {
        for (name, path) in &targets.outs {
            let t =
                all.get(name).ok_or_else(|| Failure::new(format!("kernel `{}` produced no output `{name}`", kernel.name())))?;
            tiga::write_npy(path, &t.view()).map_err(|e| Failure::new(format!("output `{name}`: {e}")))?;
        }
    }
    let mut vjp_times = Vec::new();
    let mut written = Vec::new();
    if let Some((_, source)) = &backward {
        let cot_files: Vec<(String, Tensor)> = match source {
            Cotangents::Ones => Vec::new(),
            Cotangents::Files(files) => {
                files
                    .iter()
                    .map(|(n, p)| Ok((n.clone(), p.clone(), load_cotangent(n, p)?)))
                    .collect::<Result<Vec<_>, Failure>>()?
                    .into_iter()
                    .map(|(n, p, t)| {
                        // Whole arrays, in the user's numbering: shaped like
                        // the gathered output.
                        if let Some(all) = &gathered {
                            if let Some(out) = all.get(&n) {
                                check_cotangent(&n, &p, &t, out.shape(), out.dtype())?;
                            }
                        }
                        Ok((n, t))
                    })
                    .collect::<Result<_, Failure>>()?
            }
        };
        let mut grads = None;
        for _ in 0..req.repeat.max(1) {
            let start = Instant::now();
            let g = match source {
                Cotangents::Ones => {
                    let name = kernel.output_names().first().map(|s| s.to_string()).unwrap_or_default();
                    kernel.grad_with(&sh, &inputs, &name, &schedule)
                }
                Cotangents::Files(_) => {
                    let views: Vec<(&str, tiga::TensorView<'_>)> =
                        cot_files.iter().map(|(n, t)| (n.as_str(), t.view())).collect();
                    kernel.vjp_with(&sh, &inputs, &views, &schedule)
                }
            }
            .map_err(|e| f(format!("gradients of kernel `{}`: {e}", kernel.name())))?;
            vjp_times.push(start.elapsed().as_secs_f64() * 1e3);
            grads = Some(g);
        }
        let grads = grads.ok_or_else(|| f("the vjp did not run".into()))?;
        for (role, name, t) in &grads.items {
            let all = gather(&sh, *role, t).map_err(&f)?;
            if let Some(all) = all {
                let path = targets
                    .grads
                    .iter()
                    .find(|(r, n, _)| *r == role.name() && n == name)
                    .map(|(_, _, p)| p.clone())
                    .ok_or_else(|| Failure::new(format!("no --grads file planned for {} field `{name}`", role.name())))?;
                tiga::write_npy(&path, &all.view())
                    .map_err(|e| Failure::new(format!("gradient of {} field `{name}`: {e}", role.name())))?;
                written.push(format!("{}.{name} -> {}", role.name(), path.display()));
            }
        }
    }
    // Per-rank figures, gathered at rank 0 in rank order.
    let mine = [median_ms(exchange), sh.plan().ghost_rows() as f64];
    let bytes: Vec<u8> = mine.iter().flat_map(|x| x.to_le_bytes()).collect();
    let all = comm.all_gather_bytes(&bytes).map_err(|e| f(e.to_string()))?;
    if rank != 0 {
        return Ok(());
    }
    let per_rank = |i: usize| -> Vec<f64> {
        all.iter()
            .map(|b| b.get(i * 8..i * 8 + 8).and_then(|s| <[u8; 8]>::try_from(s).ok()).map_or(f64::NAN, f64::from_le_bytes))
            .collect()
    };
    let runs = times.len();
    if req.timing {
        let mut line = serde_json::json!({
            "compile_ms": compile_ms,
            "run_ms_median": median_ms(times),
            "runs": runs,
            "ranks": comm.size(),
            "exchange_ms_median": per_rank(0),
            "ghost_rows": per_rank(1).iter().map(|&x| x as u64).collect::<Vec<_>>(),
        });
        if backward.is_some() {
            line["vjp_ms_median"] = serde_json::json!(median_ms(vjp_times));
        }
        print_json_line(&line);
    } else {
        let wrote: Vec<String> = targets.outs.iter().map(|(n, p)| format!("{n} -> {}", p.display())).collect();
        let _ = writeln!(
            std::io::stderr(),
            "ran {} sharded over {} ranks ({}, {}): {runs} run(s), median {:.3} ms; wrote {}{}",
            kernel.name(),
            comm.size(),
            comm.engine(),
            sh.method().name(),
            median_ms(times),
            wrote.join(", "),
            if written.is_empty() { String::new() } else { format!("; gradients: {}", written.join(", ")) }
        );
    }
    Ok(())
}

/// Every output in the user's numbering at rank 0 (`None` elsewhere).
fn gather_outputs(k: &tiga::Kernel, sh: &Sharded, outs: &Outputs) -> Result<Option<Outputs>, String> {
    let mut items = Vec::new();
    for (o, (name, t)) in k.captured().outputs.iter().zip(&outs.items) {
        if let Some(all) = gather(sh, o.role, t)? {
            items.push((name.clone(), all));
        }
    }
    Ok((sh.rank() == 0).then_some(Outputs { items }))
}

/// One tensor of this rank's rows (owned order) gathered at rank 0.
fn gather(sh: &Sharded, role: Role, t: &Tensor) -> Result<Option<Tensor>, String> {
    let l = sh.local();
    let (ids, total): (Vec<u64>, usize) = match role {
        Role::Src => (sh.owned_src().iter().map(|&u| u64::from(u)).collect(), l.num_src),
        Role::Dst => (sh.owned_dst().iter().map(|&u| u64::from(u)).collect(), l.num_dst),
        Role::Edge => (sh.owned_edges().to_vec(), l.num_edges),
        // Summed over the ranks already: every rank holds the same bits.
        Role::Param => return Ok((sh.rank() == 0).then(|| t.clone())),
    };
    sh.gather(t, &ids, total).map_err(|e| e.to_string())
}
