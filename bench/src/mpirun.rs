//! Jobs under `mpirun`: the benchmark re-launches itself as the ranks of
//! a job (a hidden `--mpi-worker` flag of its subcommand), and rank 0
//! prints one line starting with a tag, holding every rank's numbers as
//! JSON. Shared by `tiga-bench sharded` and `tiga-bench partitioned`.

use std::io::Read as _;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// What an mpirun job gave.
pub enum Job {
    /// Rank 0's result line, without its tag.
    Ran(String),
    /// Not run, and why (not built with the feature, no mpirun).
    Absent(String),
}

/// Run this binary as `ranks` ranks under `mpirun` with `args` (and `-x`
/// for each of `env`), wait at most `deadline`, and return the line of
/// its standard output that starts with `tag`. A job that fails, hangs
/// past the deadline (stopped with SIGTERM, which mpirun forwards to its
/// ranks) or prints no such line is an error carrying the last lines it
/// printed.
pub fn run(
    mpirun: &Path,
    ranks: usize,
    args: &[String],
    env: &[(&str, String)],
    tag: &str,
    deadline: Duration,
) -> Result<Job, String> {
    if !cfg!(feature = "mpi") {
        return Ok(Job::Absent("not built with --features mpi".into()));
    }
    match Command::new(mpirun).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Job::Absent(format!("{} not found", mpirun.display()))),
        Err(e) => return Ok(Job::Absent(format!("{} cannot run: {e}", mpirun.display()))),
        Ok(_) => {}
    }
    let exe = std::env::current_exe().map_err(|e| format!("this binary: {e}"))?;
    let mut cmd = Command::new(mpirun);
    cmd.args(["-n", &ranks.to_string()]);
    for (k, v) in env {
        cmd.env(k, v).args(["-x", k]);
    }
    cmd.arg(&exe).args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("{}: {e}", mpirun.display()))?;
    let drain = |p: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut p) = p {
                let _ = p.read_to_string(&mut s);
            }
            s
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn std::io::Read + Send>));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn std::io::Read + Send>));
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            break Some(st);
        }
        if start.elapsed() > deadline {
            // mpirun forwards SIGTERM to its ranks; SIGKILL would orphan them.
            let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
            std::thread::sleep(Duration::from_secs(5));
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    // The last lines of what mpirun said, on one line (for the table).
    let tail = |s: &str| {
        let lines: Vec<&str> = s.lines().map(str::trim).filter(|l| !l.is_empty() && !l.chars().all(|c| c == '-')).collect();
        let text = lines[lines.len().saturating_sub(8)..].join(" / ");
        match text.char_indices().nth(600) {
            Some((at, _)) => format!("{}...", &text[..at]),
            None => text,
        }
    };
    let Some(status) = status else {
        return Err(format!("mpirun did not finish within {} s; stopped. stderr: {}", deadline.as_secs(), tail(&stderr)));
    };
    if !status.success() {
        return Err(format!("mpirun failed ({status}): {}", tail(&format!("{stdout}\n{stderr}"))));
    }
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix(tag))
        .ok_or_else(|| format!("no result line from the ranks: {}", tail(&stdout)))?;
    Ok(Job::Ran(line.to_string()))
}

/// End a worker rank: print rank 0's result line under `tag`, or, on an
/// error, say so under `who` and exit at once (skipping `MPI_Finalize`),
/// so that mpirun ends the whole job rather than leaving other ranks
/// waiting in a collective.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub fn finish_worker(who: &str, tag: &str, result: Result<Option<String>, String>) -> ExitCode {
    match result {
        Ok(line) => {
            if let Some(line) = line {
                println!("{tag}{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{who} (mpi worker): {e}");
            std::process::exit(1);
        }
    }
}
