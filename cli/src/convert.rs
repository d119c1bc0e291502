//! `tigac convert`: an edge list (or a `.mtx`) to a `.gfg`, out of core.
//!
//! The input is read once, line by line, with the same rules and messages as
//! the runtime's readers (`tiga::read_edge_list`, `tiga::read_matrix_market`:
//! `path:line: message`, out-of-range ids with `--num-nodes`); each edge
//! goes to a [`GfgBuilder`], which keeps at most half the `--memory` budget
//! of edges in RAM, spills sorted runs beside OUT and merges them into the
//! file's sections (see `tiga_storage::GfgBuilder`). The `.gfg`
//! keeps the input's edge order as its edge ids, so edge fields given for
//! the text file line up with the converted graph. OUT is replaced
//! atomically: a failed or interrupted convert leaves no partial OUT.
//!
//! On a terminal, a progress bar on stderr (reading by input bytes, then the
//! merges by edges); nothing of it when stderr is redirected.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use tiga_runtime::{GraphError, MAX_NODES};
use tiga_storage::io::{MatrixMarketLines, MtxLine};
use tiga_storage::{BuildOptions, BuildPhase, GfgBuilder};

use crate::report::Failure;

/// Everything `tigac convert` was asked to do.
#[derive(Debug)]
pub struct ConvertRequest {
    pub input: PathBuf,
    pub out: PathBuf,
    /// How an edge list is read (its node count, extra columns).
    pub edges: tiga::EdgeListOptions,
    pub transpose: bool,
    pub memory: u64,
    /// The largest output to write (`None`: 64 times the input, at least
    /// 1 GiB).
    pub max_output: Option<u64>,
    /// The node order to write the graph in (`--renumber`).
    pub renumber: tiga::Renumber,
}

fn gfg_failure(e: tiga_storage::GfgError) -> Failure {
    Failure::new(e.to_string())
}

/// One Matrix Market line (checked as `tiga::read_matrix_market` checks
/// it); entries go straight to the builder (`A[i][j]` is an edge from source
/// `j` to destination `i`; a symmetric file's mirror follows its entry).
fn mtx_line(
    mtx: &mut MatrixMarketLines<'_>,
    num_nodes: Option<usize>,
    line: usize,
    text: &str,
    b: &mut GfgBuilder,
) -> Result<(), Failure> {
    match mtx.line(line, text).map_err(|e| Failure::new(e.to_string()))? {
        MtxLine::Skip => {}
        MtxLine::Size { rows, cols, .. } => {
            if let Some(n) = num_nodes.filter(|&n| rows != n || cols != n) {
                return Err(Failure::new(format!(
                    "--num-nodes {n} does not match {}, which declares a {rows} x {cols} matrix ({rows} destination rows, {cols} source columns)",
                    mtx.path()
                )));
            }
        }
        MtxLine::Entry { src, dst, mirrored, .. } => {
            b.push(src, dst).map_err(gfg_failure)?;
            if mirrored {
                b.push(dst, src).map_err(gfg_failure)?;
            }
        }
    }
    Ok(())
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

pub fn convert(req: &ConvertRequest) -> Result<(), Failure> {
    let start = Instant::now();
    let input = req.input.display().to_string();
    let out = req.out.display().to_string();
    if req.out.is_dir() {
        return Err(Failure::new(format!("{out}: is a directory; give the path of the .gfg file to write")));
    }
    if let Some(n) = req.edges.num_nodes {
        if n > MAX_NODES {
            return Err(Failure::new(GraphError::TooManyNodes { side: "edge list", count: n }.to_string()));
        }
    }
    // The input must be readable before any temporary file is made.
    let meta =
        std::fs::metadata(&req.input).map_err(|e| Failure::new(GraphError::Io { path: input.clone(), source: e }.to_string()))?;
    if meta.is_dir() {
        return Err(Failure::new(format!("{input}: is a directory, not an edge list")));
    }
    let total_bytes = meta.len();
    // The file the rename replaces (through symbolic links); never the input.
    let out_path = crate::output_paths::output_path("OUT", &req.out, &[&req.input])?;
    let is_mtx = req.input.extension().is_some_and(|e| e.eq_ignore_ascii_case("mtx"));
    let memory = usize::try_from(working_memory(req.memory, &meta)).unwrap_or(usize::MAX);
    // Sorted runs and the file being written live in one private folder
    // beside OUT, removed on every way out of this function; the finished
    // file is renamed from it over OUT (one file system, so atomic).
    let work = WorkDir::new(&out_path)?;
    let staged = work.path().join(out_path.file_name().unwrap_or(std::ffi::OsStr::new("out.gfg")));
    // A graph written in a node order is built plain first (its transpose,
    // if asked, is the renumbered one, written with the order).
    let renumber = req.renumber != tiga::Renumber::None;
    let mut builder = GfgBuilder::new(&staged, BuildOptions { memory_bytes: memory, transpose: req.transpose && !renumber })
        .map_err(gfg_failure)?;
    let mut bar = crate::progress::Bar::new();
    let reading = format!("reading {}", req.input.file_name().map(|f| f.to_string_lossy()).unwrap_or_default());
    let reading: String = reading.chars().take(24).collect();

    let (num_src, num_dst) = if is_mtx {
        let mut mtx = MatrixMarketLines::new(&input);
        let lines = {
            let b = &mut builder;
            let bar = &mut bar;
            tiga_storage::io::walk_file_lines(
                &req.input,
                |line, text| mtx_line(&mut mtx, req.edges.num_nodes, line, text, b),
                |bytes| bar.update(&reading, bytes, total_bytes),
            )?
        };
        let (rows, cols, _) = mtx.finish(lines).map_err(|e| Failure::new(e.to_string()))?;
        (cols as u64, rows as u64)
    } else {
        {
            let b = &mut builder;
            let bar = &mut bar;
            tiga_storage::io::walk_file_lines(
                &req.input,
                |line, text| {
                    let parsed = tiga_storage::io::parse_edge_line(&input, &req.edges, line, text);
                    if let Some((s, d)) = parsed.map_err(|e| Failure::new(e.to_string()))? {
                        b.push(s, d).map_err(gfg_failure)?;
                    }
                    Ok::<(), Failure>(())
                },
                |bytes| bar.update(&reading, bytes, total_bytes),
            )?;
        }
        let n = match req.edges.num_nodes {
            Some(n) => n as u64,
            None => {
                let (s, d) = builder.max_ids();
                s.max(d).map_or(0, |m| u64::from(m) + 1)
            }
        };
        (n, n)
    };

    check_output_size(req, &meta, num_src, num_dst, builder.num_edges())?;
    if renumber {
        check_renumber_fits(req, num_src, num_dst, builder.num_edges())?;
    }
    let (pending, stats) = builder
        .finish(num_src, num_dst, &mut |phase: BuildPhase, done, total| bar.update(phase.name(), done, total))
        .map_err(gfg_failure)?;
    pending.commit().map_err(gfg_failure)?;
    let renumbered = if renumber { Some(renumber_staged(req, &staged, work.path())?) } else { None };
    work.publish(renumbered.as_ref().map_or(&staged, |r| &r.path), &out_path)?;
    bar.clear();
    let size = std::fs::metadata(&out_path).map(|m| m.len()).unwrap_or(0);
    let _ = writeln!(
        std::io::stderr(),
        "wrote {out} ({}): {} sources, {} destinations, {} edges{}{}{}; {} sorted run(s) of at most {} edges, {} merge pass(es), memory budget {}, {:.2} s",
        human_bytes(size),
        stats.num_src,
        stats.num_dst,
        stats.num_edges,
        if renumbered.as_ref().map_or(stats.edge_ids, |r| r.edge_ids) { ", edge ids stored" } else { "" },
        if req.transpose { ", with transpose" } else { "" },
        renumbered.as_ref().map_or(String::new(), |r| format!(", in node order `{}` ({:.0} ms)", req.renumber.name(), r.build_ms)),
        stats.runs,
        stats.chunk_edges,
        stats.merge_passes,
        if memory as u64 == req.memory {
            human_bytes(req.memory)
        } else {
            format!("{} (--memory {}, cut to what the input and this machine can use)", human_bytes(memory as u64), human_bytes(req.memory))
        },
        start.elapsed().as_secs_f64()
    );
    report_peak_memory();
    Ok(())
}

/// Bytes per edge and per node that renumbering a graph in memory holds at
/// its peak: the graph, its renumbered CSR, both transposes (12 bytes an
/// edge each: a column and an edge id) and, for `rcm` and `cluster`, the
/// neighbour lists taken both ways; the order and row offsets per node.
const RENUMBER_BYTES_PER_EDGE: u64 = 64;
const RENUMBER_BYTES_PER_NODE: u64 = 48;

/// Refuses, before the graph is built, a `--renumber` that cannot finish:
/// an order that needs a square graph on another, or a graph whose
/// renumbering in memory would not fit the `--memory` budget (as cut to
/// half of this machine's memory).
fn check_renumber_fits(req: &ConvertRequest, num_src: u64, num_dst: u64, num_edges: u64) -> Result<(), Failure> {
    let method = req.renumber.name();
    if num_src != num_dst && req.renumber != tiga::Renumber::Degree {
        let (num_src, num_dst) = (usize::try_from(num_src).unwrap_or(usize::MAX), usize::try_from(num_dst).unwrap_or(usize::MAX));
        let e = tiga_runtime::RenumberError::NotSquare { method, num_src, num_dst };
        return Err(Failure::new(format!("--renumber {method}: {}: {e}", req.input.display())));
    }
    let budget = physical_memory().map_or(req.memory, |total| req.memory.min(total / 2));
    let nodes = num_src.saturating_add(num_dst);
    let need = num_edges.saturating_mul(RENUMBER_BYTES_PER_EDGE).saturating_add(nodes.saturating_mul(RENUMBER_BYTES_PER_NODE));
    if need > budget {
        let cut = if budget < req.memory {
            format!(" (--memory {}, cut to half of this machine's memory)", human_bytes(req.memory))
        } else {
            String::new()
        };
        return Err(Failure::new(format!(
            "--renumber {method}: renumbering holds the graph in memory, about {} for {num_edges} edges and {nodes} \
             nodes, over the memory budget of {}{cut}; pass --memory {} or more, or convert without --renumber",
            human_bytes(need),
            human_bytes(budget),
            need.div_ceil(1 << 20).to_string() + "M"
        )));
    }
    Ok(())
}

/// The plain file `staged` read back into memory, renumbered as `--renumber`
/// says, and written in that order into `work` (with the renumbered
/// transpose when asked).
fn renumber_staged(req: &ConvertRequest, staged: &std::path::Path, work: &std::path::Path) -> Result<RenumberedFile, Failure> {
    let method = req.renumber.name();
    let file = tiga_storage::GfgFile::open(staged).map_err(gfg_failure)?;
    let g = file.load_graph().map_err(gfg_failure)?;
    drop(file);
    // The plain file is in memory now: its disk space is freed before the
    // renumbered one is written beside it (the work folder goes anyway).
    let _ = std::fs::remove_file(staged);
    let r = g
        .renumbered(req.renumber)
        .map_err(|e| Failure::new(format!("--renumber {method}: {}: {e}", req.input.display())))?
        .ok_or_else(|| Failure::new(format!("--renumber {method}: no order")))?;
    let out = work.join("renumbered.gfg");
    tiga_storage::GfgWriter::renumbered(&g, &r)
        .map_err(gfg_failure)?
        .with_transpose(req.transpose)
        .save(&out)
        .map_err(gfg_failure)?;
    // The renumbered CSR stores edge ids where the plain one did not
    // (its positions are no longer the user's edge order), and may drop
    // them where they became the identity.
    let edge_ids = tiga_storage::GfgFile::open(&out).map_err(gfg_failure)?.has_edge_ids();
    Ok(RenumberedFile { path: out, build_ms: r.build_ms, edge_ids })
}

/// What [`renumber_staged`] wrote.
struct RenumberedFile {
    path: PathBuf,
    /// The order's cost in ms.
    build_ms: f64,
    /// Whether the file stores edge ids.
    edge_ids: bool,
}

/// The private folder of one conversion: `.tigac-convert.<pid>.<random>`
/// in OUT's folder, removed when dropped (on success, on an error, on a
/// panic). A conversion killed outright leaves it behind; the next one in
/// that folder removes such a folder when it can prove no conversion uses
/// it: the process named is gone (Linux: no `/proc/<pid>`) *and* the lock
/// that a running conversion holds on the folder's `lock` file (an
/// exclusive `flock`, released by the kernel when its process dies) is
/// free. The lock covers what the pid cannot: a folder shared between PID
/// namespaces or hosts, where another conversion's pid is not in this
/// `/proc`. Where either proof is missing the folder stays.
struct WorkDir {
    dir: tempfile::TempDir,
    /// Holds the folder's lock while the conversion runs.
    _lock: std::fs::File,
}

const WORK_PREFIX: &str = ".tigac-convert.";
/// The file in a work folder that its conversion holds locked.
const LOCK_FILE: &str = "lock";

/// Take the exclusive lock of `f` without waiting: whether it was free.
#[cfg(unix)]
fn try_lock(f: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd as _;
    // SAFETY: flock on a file descriptor this process owns and keeps open
    // for the call; it touches no memory.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

#[cfg(not(unix))]
fn try_lock(_: &std::fs::File) -> bool {
    false
}

impl WorkDir {
    fn new(out: &std::path::Path) -> Result<WorkDir, Failure> {
        let dir = match out.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        remove_abandoned(&dir);
        let prefix = format!("{WORK_PREFIX}{}.", std::process::id());
        let fail = |e: std::io::Error| {
            Failure::new(format!("{}: cannot create a temporary folder in {}: {e}", out.display(), dir.display()))
        };
        let made = tempfile::Builder::new().prefix(&prefix).tempdir_in(&dir).map_err(fail)?;
        let lock = std::fs::File::create(made.path().join(LOCK_FILE)).map_err(fail)?;
        if !try_lock(&lock) {
            return Err(fail(std::io::Error::other("cannot lock its lock file")));
        }
        Ok(WorkDir { dir: made, _lock: lock })
    }

    fn path(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Rename the finished file over `out` and make the rename durable.
    fn publish(&self, staged: &std::path::Path, out: &std::path::Path) -> Result<(), Failure> {
        std::fs::rename(staged, out)
            .map_err(|e| Failure::new(format!("{}: cannot move the finished file into place: {e}", out.display())))?;
        #[cfg(unix)]
        if let Ok(d) =
            std::fs::File::open(out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new(".")))
        {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

/// Remove the private folders of conversions in `dir` whose process is
/// gone (see [`WorkDir`]). Best effort: a folder that cannot be removed is
/// left for later.
fn remove_abandoned(dir: &std::path::Path) {
    if !std::path::Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) =
            name.strip_prefix(WORK_PREFIX).and_then(|rest| rest.split('.').next()).and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
        if !is_dir || pid == std::process::id() || std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        // Held while this check runs, so no conversion can take the folder
        // back between the check and the removal.
        let Ok(lock) = std::fs::OpenOptions::new().write(true).open(e.path().join(LOCK_FILE)) else { continue };
        if try_lock(&lock) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Refuses a `.gfg` larger than the output limit before its sections are
/// written (the sorted runs already in the work folder go with it): its row offsets grow with the node count, which a file declares
/// (a `.mtx` header) or implies (an edge list's largest id), not with its
/// edges, so a three-line input can ask for tens of GiB. The size counted
/// covers the sections (offsets, columns, edge ids, and the transpose's),
/// not the manifest and block tables, which are a few bytes per MiB.
fn check_output_size(
    req: &ConvertRequest,
    input: &std::fs::Metadata,
    num_src: u64,
    num_dst: u64,
    edges: u64,
) -> Result<(), Failure> {
    let side = |rows: u64| rows.saturating_add(1).saturating_mul(8).saturating_add(edges.saturating_mul(12));
    let mut bytes = side(num_dst);
    if req.transpose {
        bytes = bytes.saturating_add(side(num_src));
    }
    let limit = req.max_output.unwrap_or_else(|| input.len().saturating_mul(64).max(1 << 30));
    if bytes <= limit {
        return Ok(());
    }
    Err(Failure::new(format!(
        "{}: the .gfg would take up to {} ({num_dst} destination rows, {num_src} sources, {edges} edges{}), over the {} limit; \
         row offsets grow with the node count ({}); if this is meant, pass --max-output {}",
        req.input.display(),
        human_bytes(bytes),
        if req.transpose { ", with transpose" } else { "" },
        human_bytes(limit),
        match req.edges.num_nodes {
            Some(_) => "given by --num-nodes or declared by the file".to_string(),
            None => "declared by the file, or an edge list's largest id + 1".to_string(),
        },
        bytes.div_ceil(1 << 30).max(1).to_string() + "G"
    )))
}

/// The memory the builder may hold: `--memory` is an upper bound, not a
/// size to allocate (the sort's chunk is allocated at its full size up
/// front). So it is cut to what the input can need, 32 bytes per edge it
/// can hold (a line of an edge list or a `.mtx` is at least four bytes: `0
/// 1` and its end; the chunk holds half the budget, 16 bytes an edge), and
/// to half of this machine's memory. Never raised: a small budget stays
/// small (many sorted runs).
fn working_memory(requested: u64, input: &std::fs::Metadata) -> u64 {
    let mut bytes = requested;
    if input.is_file() {
        bytes = bytes.min((input.len() / 4 + 1).saturating_mul(32));
    }
    if let Some(total) = physical_memory() {
        bytes = bytes.min(total / 2);
    }
    bytes
}

/// This machine's memory in bytes, where the system says (Linux's
/// `/proc/meminfo`).
fn physical_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// With `TIGAC_REPORT_RSS` set, prints the process's peak resident set
/// (`VmHWM`, Linux) on stderr: how a budget is checked.
fn report_peak_memory() {
    if std::env::var_os("TIGAC_REPORT_RSS").is_none() {
        return;
    }
    let hwm = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).map(|l| l.trim_start_matches("VmHWM:").trim().to_string()));
    let _ = writeln!(std::io::stderr(), "peak RSS (VmHWM): {}", hwm.as_deref().unwrap_or("unknown"));
}
