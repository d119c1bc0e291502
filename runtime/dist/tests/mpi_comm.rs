//! The MPI engine's conformance checks, as a program rather than a test
//! harness (ranks are processes started by `mpirun`):
//!
//! ```text
//! mpirun -n 4 --oversubscribe target/release/deps/mpi_comm-<hash>
//! ```
//!
//! (`.ci/feature-suite` finds the binary and runs it on 2 and 4 ranks). Without
//! `mpirun` it runs as a world of one rank, so `cargo test --features mpi`
//! passes too. Every rank runs the same collectives in the same order
//! whatever a check finds, so a failed check never hangs the job; at the end
//! the ranks agree on the failures, rank 0 prints the summary, and every
//! rank exits non-zero if any rank saw one.

#[path = "common/checks.rs"]
mod checks;

use checks::Checks;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use tiga_dist::comm::{launched_by_mpirun, CommError, Communicator, Mpi};

/// A check's outcomes on this rank.
/// The bytes rank `from` sends rank `to` in exchange `round`: a length that
/// is zero for some pairs, and contents that name the pair.
fn message(from: usize, to: usize, round: usize, unit: usize) -> Vec<u8> {
    let len = ((from * 7 + to * 3 + round) % 5) * unit;
    (0..len).map(|i| (from * 31 + to * 17 + round * 5 + i) as u8).collect()
}

fn exchange(c: &dyn Communicator, round: usize, unit: usize) -> (Vec<Vec<u8>>, Vec<usize>) {
    let (r, n) = (c.rank(), c.size());
    let sends = (0..n).map(|p| message(r, p, round, unit)).collect();
    let lens = (0..n).map(|p| message(p, r, round, unit).len()).collect();
    (sends, lens)
}

fn got_expected(c: &dyn Communicator, got: &Result<Vec<Vec<u8>>, CommError>, round: usize, unit: usize) -> Result<(), String> {
    let got = got.as_ref().map_err(|e| e.to_string())?;
    for (p, bytes) in got.iter().enumerate() {
        if *bytes != message(p, c.rank(), round, unit) {
            return Err(format!(
                "from rank {p}: {} bytes, not the {} expected",
                bytes.len(),
                message(p, c.rank(), round, unit).len()
            ));
        }
    }
    Ok(())
}

fn hostname() -> Vec<u8> {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its whole length; gethostname writes at
    // most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if rc != 0 {
        return b"?".to_vec();
    }
    buf.iter().copied().take_while(|&b| b != 0).collect()
}

fn run(world: &Mpi, chunked: &Mpi, t: &mut Checks) {
    let (r, n) = (world.rank(), world.size());
    t.check("engine names MPI", world.engine().starts_with("MPI ("), || world.engine());
    t.check("launched_by_mpirun when there are peers", n == 1 || launched_by_mpirun(), || "no launcher variables".into());

    // All-to-all-v, with empty messages among them, on both communicators.
    for (name, c, unit) in [("all-to-all-v", world, 100usize), ("all-to-all-v in 1000-byte pieces", chunked, 1000)] {
        for round in 0..3 {
            let (sends, lens) = exchange(c, round, unit);
            let got = c.all_to_all_v(sends, lens);
            let verdict = got_expected(c, &got, round, unit);
            t.check(name, verdict.is_ok(), || format!("round {round}: {verdict:?}"));
        }
    }
    // Piece boundaries: lengths just under, at and over the piece size.
    for len in [999usize, 1000, 1001, 3000, 3500] {
        let sends: Vec<Vec<u8>> = (0..n).map(|p| (0..len).map(|i| (i + r * 3 + p) as u8).collect()).collect();
        let got = chunked.all_to_all_v(sends, vec![len; n]);
        let ok = match &got {
            Ok(g) => g.iter().enumerate().all(|(p, b)| *b == (0..len).map(|i| (i + p * 3 + r) as u8).collect::<Vec<u8>>()),
            Err(_) => false,
        };
        t.check("a message of several pieces", ok, || format!("{len} bytes: {:?}", got.map(|g| g.len())));
    }

    // Exchanges left in flight: two started, an all-gather between, waited
    // for in reverse order; then one dropped unwaited, then one more.
    let (s0, l0) = exchange(world, 10, 64);
    let (s1, l1) = exchange(world, 11, 64);
    let first = world.start_all_to_all_v(s0, l0);
    let second = world.start_all_to_all_v(s1, l1);
    let gathered = world.all_gather_bytes(&[r as u8]);
    t.check("all-gather while exchanges are in flight", gathered.as_ref().is_ok_and(|g| g.len() == n), || {
        format!("{gathered:?}")
    });
    match (first, second) {
        (Ok(first), Ok(second)) => {
            let g1 = second.wait();
            let g0 = first.wait();
            let v1 = got_expected(world, &g1, 11, 64);
            let v0 = got_expected(world, &g0, 10, 64);
            t.check("exchanges waited for out of order", v0.is_ok() && v1.is_ok(), || format!("{v0:?} {v1:?}"));
        }
        (a, b) => t.check("exchanges started", false, || format!("{a:?} {b:?}")),
    }
    let (s, l) = exchange(world, 12, 64);
    drop(world.start_all_to_all_v(s, l));
    let (s, l) = exchange(world, 13, 64);
    let got = world.all_to_all_v(s, l);
    let v = got_expected(world, &got, 13, 64);
    t.check("an exchange after one dropped unwaited", v.is_ok(), || format!("{v:?}"));

    // All-gather of different sizes (rank 0's empty), whole and in rounds.
    for (name, c) in [("all-gather", world), ("all-gather in rounds", chunked)] {
        let mine: Vec<u8> = (0..r * 1234).map(|i| (i * 7 + r) as u8).collect();
        let got = c.all_gather_bytes(&mine);
        let ok = got.as_ref().is_ok_and(|g| {
            g.len() == n && g.iter().enumerate().all(|(p, b)| *b == (0..p * 1234).map(|i| (i * 7 + p) as u8).collect::<Vec<u8>>())
        });
        t.check(name, ok, || format!("{:?}", got.map(|g| g.iter().map(Vec::len).collect::<Vec<_>>())));
    }
    let empty = world.all_gather_bytes(&[]);
    t.check("all-gather of nothing", empty.as_ref().is_ok_and(|g| g.len() == n && g.iter().all(Vec::is_empty)), || {
        format!("{empty:?}")
    });

    // All-reduce: the rank-order sum, with the same bits on every rank.
    let contribution = |p: usize| -> [f64; 3] {
        let big = match p % 3 {
            0 => 1e16,
            1 => 1.0,
            _ => -1e16,
        };
        [big, 0.1 * (p as f64 + 1.0), 1.0 / (p as f64 + 3.0)]
    };
    let mut x = contribution(r);
    let reduced = world.all_reduce_f64(&mut x);
    let mut want = contribution(0);
    for p in 1..n {
        for (w, c) in want.iter_mut().zip(contribution(p)) {
            *w += c;
        }
    }
    t.check("all-reduce (f64) adds in rank order", reduced.is_ok() && x.map(f64::to_bits) == want.map(f64::to_bits), || {
        format!("{reduced:?} {x:?} != {want:?}")
    });
    let bits: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let everyone = world.all_gather_bytes(&bits);
    t.check(
        "all-reduce (f64) gives every rank the same bits",
        everyone.as_ref().is_ok_and(|g| g.iter().all(|b| *b == bits)),
        || format!("{everyone:?}"),
    );
    let mut y = [0.1f32 * r as f32, 3.0];
    let reduced = world.all_reduce_f32(&mut y);
    let want32 = (1..n).fold(0.0f32, |acc, p| acc + 0.1 * p as f32);
    t.check("all-reduce (f32)", reduced.is_ok() && y[0].to_bits() == want32.to_bits() && y[1] == 3.0 * n as f32, || {
        format!("{reduced:?} {y:?}")
    });
    let mut z = [r as u64 + 1];
    let reduced = world.all_reduce_u64(&mut z);
    t.check("all-reduce (u64)", reduced.is_ok() && z[0] == (n * (n + 1) / 2) as u64, || format!("{reduced:?} {z:?}"));
    let mut big = [u64::MAX - 1];
    let overflow = world.all_reduce_u64(&mut big);
    t.check("all-reduce (u64) overflow is an error", n == 1 || matches!(overflow, Err(CommError::Usage(_))), || {
        format!("{overflow:?}")
    });

    // Node-local split: the ranks that share this one's host name.
    let hosts = world.all_gather_bytes(&hostname());
    let local: Result<Arc<dyn Communicator>, CommError> = world.split_local();
    match (hosts, local) {
        (Ok(hosts), Ok(local)) => {
            let mine = &hosts[r];
            let same: Vec<usize> = (0..n).filter(|&p| hosts[p] == *mine).collect();
            let want_rank = same.iter().position(|&p| p == r);
            t.check(
                "split_local groups the ranks of a host",
                local.size() == same.len() && Some(local.rank()) == want_rank,
                || format!("rank {} of {}, expected {want_rank:?} of {}", local.rank(), local.size(), same.len()),
            );
            let mut v = [r as f64];
            let reduced = local.all_reduce_f64(&mut v);
            let want: f64 = same.iter().map(|&p| p as f64).sum();
            t.check("an all-reduce on the local group", reduced.is_ok() && v[0] == want, || format!("{reduced:?} {v:?}"));
            t.check("the local group names its engine", local.engine() == world.engine(), || local.engine());
        }
        (h, l) => t.check("split_local", false, || format!("{:?} {:?}", h.map(|_| ()), l.map(|_| ()))),
    }

    // A plan the ranks disagree on: rank `liar` sends rank 0 a message of
    // another length than rank 0 expects; rank 0 alone gets WrongSize, and
    // the next exchange is clean (the odd message was drained).
    let liar = 1 % n;
    for (case, expected, sent) in [("longer", 40usize, 45usize), ("shorter", 40, 30), ("missing", 40, 0), ("unplanned", 0, 40)] {
        // On the chunked communicator, 100 times the bytes: several pieces.
        for (name, c, scale) in [("", world, 1), (" (pieces)", chunked, 100)] {
            let (expected, sent) = (expected * scale, sent * scale);
            let mut sends: Vec<Vec<u8>> = vec![Vec::new(); n];
            let mut lens = vec![0usize; n];
            if r == liar {
                sends[0] = vec![7; sent];
            }
            if r == 0 {
                lens[liar] = expected;
            }
            let got = c.all_to_all_v(sends, lens);
            let ok = if r == 0 {
                matches!(got, Err(CommError::WrongSize { peer, expected: e, got: g, .. }) if peer == liar && e == expected && g == sent)
            } else {
                got.is_ok()
            };
            t.check(&format!("WrongSize for a {case} message{name}"), ok, || format!("{got:?}"));
            let (s, l) = exchange(c, 20, 10);
            let after = c.all_to_all_v(s, l);
            let v = got_expected(c, &after, 20, 10);
            t.check(&format!("an exchange after a {case} message{name}"), v.is_ok(), || format!("{v:?}"));
        }
    }
    let usage = world.start_all_to_all_v(vec![Vec::new(); n + 1], vec![0; n + 1]);
    t.check("a send list of the wrong length is a usage error", matches!(usage, Err(CommError::Usage(_))), || {
        format!("{usage:?}")
    });

    let barrier = world.barrier();
    t.check("barrier", barrier.is_ok(), || format!("{barrier:?}"));
}

fn main() -> ExitCode {
    let world = match Mpi::init() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("mpi_comm: {e}");
            return ExitCode::FAILURE;
        }
    };
    // A second world communicator (MPI is initialized once, shared) whose
    // messages go in 1000-byte pieces.
    let chunked = Mpi::init().and_then(|mut c| c.set_max_message_bytes(1000).map(|_| c));
    let chunked = match chunked {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mpi_comm: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut t = Checks::new(world.rank());
    let started = Instant::now();
    run(&world, &chunked, &mut t);
    let total = t.total_failures(&world);
    if world.rank() == 0 {
        println!(
            "mpi_comm on {} rank(s) ({}): {} checks passed on rank 0, {total} failure(s) on all ranks, {:.2} s",
            world.size(),
            world.engine(),
            t.passed,
            started.elapsed().as_secs_f64()
        );
    }
    // Free the communicators (and finalize MPI) before the process ends.
    drop(chunked);
    drop(world);
    if total == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
