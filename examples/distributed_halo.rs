//! The halo-sharded ring: 8 nodes, x[i] = i, each output the sum of the
//! node and its two neighbours, split over 2 ranks (rank 0 owns nodes 0–3,
//! rank 1 nodes 4–7). Each rank's edges that cross the boundary read a
//! ghost copied from the other rank before the kernel runs; the backward
//! sends each ghost's gradient back to its owner.
//!
//! Expected, and checked (a non-zero exit otherwise):
//! rank 0 outputs [8, 3, 6, 9], rank 1 outputs [12, 15, 18, 13], and both
//! ranks' gradients of sum(out) with respect to x are [3, 3, 3, 3].
//!
//! Run in one process, ranks as threads:
//!     cargo run --release --example distributed_halo
//! or as two processes under MPI (a `tiga` built with `--features mpi`):
//!     cargo build --release --features mpi --example distributed_halo
//!     mpirun -n 2 target/release/examples/distributed_halo

use std::sync::Arc;

use tiga::{message_passing, Communicator, Graph, InProcess, Inputs, ShardOptions, Sharded};

/// out[i] = Σ_{j→i} x[j]; on the ring, j ∈ {i-1, i, i+1} mod 8.
#[message_passing(reduce = sum)]
pub mod RingSum {
    use tiga::lang::*;
    pub struct Src {
        pub x: f32,
    }
    pub fn edge(src: &Src) -> f32 {
        src.x
    }
}

fn ring() -> Result<Graph, tiga::GraphError> {
    let (mut s, mut d) = (Vec::new(), Vec::new());
    for i in 0..8u32 {
        for j in [(i + 7) % 8, i, (i + 1) % 8] {
            s.push(j);
            d.push(i);
        }
    }
    Graph::from_edges(8, 8, &s, &d)
}

/// One rank's part: run, differentiate, check, print.
fn rank_main(comm: Arc<dyn Communicator>) -> Result<(), String> {
    let g = ring().map_err(|e| e.to_string())?;
    let x: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let sh = Sharded::from_graph(&g, comm, &ShardOptions::default()).map_err(|e| e.to_string())?;
    let k = RingSum::kernel();
    let ins = Inputs::new().src("x", &x);
    let out = k.run(&sh, &ins).map_err(|e| e.to_string())?;
    let out = out.f32("out").map_err(|e| e.to_string())?.to_vec();
    let grads = k.grad(&sh, &ins, "out").map_err(|e| e.to_string())?;
    let dx = grads.src("x").and_then(|t| t.as_f32()).ok_or("no gradient for x")?.to_vec();
    let rank = sh.rank();
    println!(
        "rank {rank} ({}): owns nodes {:?}, {} ghosts; out = {out:?}, d sum(out)/dx = {dx:?}",
        sh.comm().engine(),
        sh.owned_dst(),
        sh.plan().ghost_rows()
    );
    let want: [Vec<f32>; 2] = [vec![8.0, 3.0, 6.0, 9.0], vec![12.0, 15.0, 18.0, 13.0]];
    if sh.world() != 2 {
        return Err(format!("this example runs on 2 ranks, not {}", sh.world()));
    }
    if out != want[rank] || dx != vec![3.0; 4] {
        return Err(format!("rank {rank}: expected out {:?} and gradients [3, 3, 3, 3]", want[rank]));
    }
    Ok(())
}

fn main() {
    #[cfg(feature = "mpi")]
    if tiga::runtime::comm::launched_by_mpirun() {
        let result = tiga::runtime::comm::Mpi::init().map_err(|e| e.to_string()).and_then(|mpi| rank_main(Arc::new(mpi)));
        if let Err(e) = result {
            eprintln!("distributed_halo: {e}");
            std::process::exit(1);
        }
        return;
    }
    let results = InProcess::run(2, |c| rank_main(Arc::new(c)));
    let mut failed = false;
    for r in results {
        if let Err(e) = r.map_err(|e| e.to_string()).and_then(|r| r) {
            eprintln!("distributed_halo: {e}");
            failed = true;
        }
    }
    if failed {
        std::process::exit(1);
    }
    println!("distributed_halo: both ranks match the closed form");
}
