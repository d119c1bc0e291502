//! What happens to the MPI engine when a rank dies: rank 1 kills itself
//! (SIGKILL, no cleanup) midway through a loop of collectives while the
//! other ranks keep calling them. MPI has no timeouts, so the engine cannot
//! report the loss itself; the launcher must end the job. `.ci/feature-suite`
//! runs this under `timeout 60 mpirun -n 2` and checks that `mpirun` exits
//! non-zero, and how soon after the kill (the time of which rank 1 prints
//! as `killing rank 1 at <unix ms>`).
//!
//! `TIGA_FAULT=panic` makes rank 1 panic instead: its communicator is
//! dropped while panicking, which aborts the job (`MPI_Abort`) rather than
//! finalizing (that would wait for the other ranks forever).
//!
//! Without `mpirun` (one rank) nobody dies: the loop runs to its end and
//! the program exits 0.

use std::io::Write;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use tiga_dist::comm::{Communicator, Mpi};

const ROUNDS: usize = 200;
const DIES_AT: usize = 50;

fn main() -> ExitCode {
    let world = match Mpi::init() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("mpi_fault: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (r, n) = (world.rank(), world.size());
    let panic_mode = std::env::var("TIGA_FAULT").is_ok_and(|v| v == "panic");
    for round in 0..ROUNDS {
        if r == 1 && round == DIES_AT {
            let ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
            println!("killing rank 1 at {ms}");
            let _ = std::io::stdout().flush();
            if panic_mode {
                panic!("rank 1 panics on purpose in round {round}");
            }
            // SAFETY: sends SIGKILL to this very process; nothing after it runs.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
        let sends: Vec<Vec<u8>> = (0..n).map(|p| vec![round as u8; 64 * (p + 1)]).collect();
        let lens: Vec<usize> = (0..n).map(|_| 64 * (r + 1)).collect();
        let step = world
            .all_to_all_v(sends, lens)
            .and_then(|_| world.all_gather_bytes(&[r as u8]))
            .and_then(|_| world.barrier())
            .and_then(|_| {
                let mut x = [1.0f64];
                world.all_reduce_f64(&mut x)
            });
        if let Err(e) = step {
            eprintln!("mpi_fault: rank {r}, round {round}: {e}");
            return ExitCode::FAILURE;
        }
    }
    if r == 0 {
        println!("mpi_fault: {ROUNDS} rounds on {n} rank(s) and nobody died (fewer than 2 ranks)");
    }
    drop(world);
    if n > 1 {
        // Rank 1 should have died; reaching here means it did not.
        eprintln!("mpi_fault: rank {r} finished every round although rank 1 should have died");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
