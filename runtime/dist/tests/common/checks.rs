//! The verdicts of an MPI suite (a program run by `mpirun`, not a test
//! harness): each rank records its checks and goes on whatever they find,
//! so that every rank runs the same collectives; at the end the ranks
//! agree on the number of failures.

use tiga_dist::comm::Communicator;

/// A rank's checks.
pub struct Checks {
    pub rank: usize,
    pub failed: Vec<String>,
    pub passed: usize,
}

impl Checks {
    pub fn new(rank: usize) -> Checks {
        Checks { rank, failed: Vec::new(), passed: 0 }
    }

    /// Record a check; a failure is printed at once, naming the rank.
    pub fn check(&mut self, name: &str, ok: bool, detail: impl FnOnce() -> String) {
        if ok {
            self.passed += 1;
        } else {
            let msg = format!("rank {}: {name}: {}", self.rank, detail());
            eprintln!("FAIL {msg}");
            self.failed.push(msg);
        }
    }

    /// The failures of every rank (collective); a rank whose count cannot
    /// be read counts as one, and a failed gather as one.
    pub fn total_failures(&self, world: &dyn Communicator) -> u64 {
        match world.all_gather_bytes(&(self.failed.len() as u64).to_le_bytes()) {
            Ok(all) => all.iter().map(|b| <[u8; 8]>::try_from(b.as_slice()).map(u64::from_le_bytes).unwrap_or(1)).sum(),
            Err(e) => {
                eprintln!("gathering the verdicts failed: {e}");
                1
            }
        }
    }
}
