//! `tigac convert`: an edge list (or a `.mtx`) to a `.gfg`, out of core.
//!
//! The input is read once, line by line, with the same rules and messages as
//! the runtime's readers (`tiga::read_edge_list`, `tiga::read_matrix_market`:
//! `path:line: message`, out-of-range ids with `--num-nodes`); each edge
//! goes to a [`GfgBuilder`], which keeps at most half the `--memory` budget
//! of edges in RAM, spills sorted runs beside OUT and merges them into the
//! file's sections (see `tiga_runtime::storage::GfgBuilder`). The `.gfg`
//! keeps the input's edge order as its edge ids, so edge fields given for
//! the text file line up with the converted graph. OUT is replaced
//! atomically: a failed or interrupted convert leaves no partial OUT.
//!
//! On a terminal, a progress bar on stderr (reading by input bytes, then the
//! merges by edges); nothing of it when stderr is redirected.

use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tiga_runtime::storage::{BuildOptions, BuildPhase, GfgBuilder};
use tiga_runtime::{GraphError, MAX_NODES};

use crate::report::Failure;

/// Everything `tigac convert` was asked to do.
#[derive(Debug)]
pub struct ConvertRequest {
    pub input: PathBuf,
    pub out: PathBuf,
    pub num_nodes: Option<usize>,
    pub transpose: bool,
    pub memory: u64,
}

/// clap value parser for `--memory`: bytes, with an optional binary suffix
/// (`K`/`KiB`, `M`/`MiB`, `G`/`GiB`, `T`/`TiB`; case-insensitive).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("`{s}` is not a byte count; expected e.g. 4096, 512M, 1G"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => return Err(format!("unknown unit `{other}` in `{s}`; use K, M, G or T (powers of 1024)")),
    };
    let bytes = n.checked_mul(1u64 << shift).ok_or_else(|| format!("`{s}` is too large"))?;
    if bytes == 0 {
        return Err("the memory budget must be at least 1 byte".into());
    }
    Ok(bytes)
}

/// A minimal progress bar on stderr, drawn only on a terminal.
struct Bar {
    on: bool,
    last: Option<Instant>,
    drawn: bool,
}

impl Bar {
    fn new() -> Bar {
        Bar { on: std::io::stderr().is_terminal(), last: None, drawn: false }
    }

    fn update(&mut self, label: &str, done: u64, total: u64) {
        if !self.on {
            return;
        }
        let now = Instant::now();
        if done < total && self.last.is_some_and(|t| now.duration_since(t) < Duration::from_millis(100)) {
            return;
        }
        self.last = Some(now);
        let frac = if total == 0 { 1.0 } else { (done as f64 / total as f64).clamp(0.0, 1.0) };
        const WIDTH: usize = 30;
        let filled = (frac * WIDTH as f64).round() as usize;
        let bar: String = "#".repeat(filled) + &"-".repeat(WIDTH - filled);
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{label:<24} [{bar}] {:>5.1}%", frac * 100.0);
        let _ = err.flush();
        self.drawn = true;
    }

    fn clear(&mut self) {
        if self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r{:60}\r", "");
            let _ = err.flush();
            self.drawn = false;
        }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Calls `f(line_number, line)` for every line (1-based, line endings
/// stripped; non-UTF-8 lines are errors naming path and line), and
/// `tick(bytes_read)` now and then.
fn for_each_line(
    path: &Path,
    mut f: impl FnMut(usize, &str) -> Result<(), Failure>,
    mut tick: impl FnMut(u64),
) -> Result<usize, Failure> {
    let name = path.display().to_string();
    let io = |e: std::io::Error| Failure::new(GraphError::Io { path: name.clone(), source: e }.to_string());
    let file = File::open(path).map_err(io)?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut buf = Vec::new();
    let mut line_no = 0usize;
    let mut bytes = 0u64;
    loop {
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf).map_err(io)?;
        if n == 0 {
            tick(bytes);
            return Ok(line_no);
        }
        bytes += n as u64;
        line_no += 1;
        if line_no & 0xffff == 0 {
            tick(bytes);
        }
        let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let text = std::str::from_utf8(line).map_err(|_| {
            Failure::new(
                GraphError::Parse { path: name.clone(), line: line_no, message: "line is not valid UTF-8".into() }
                    .to_string(),
            )
        })?;
        f(line_no, text)?;
    }
}

fn parse_error(path: &str, line: usize, message: impl Into<String>) -> Failure {
    Failure::new(GraphError::Parse { path: path.to_string(), line, message: message.into() }.to_string())
}

fn gfg_failure(e: tiga_runtime::storage::GfgError) -> Failure {
    Failure::new(e.to_string())
}

/// One SNAP edge-list line, as `tiga::read_edge_list` reads it: `None` for
/// comments and blank lines.
fn edge_line(path: &str, num_nodes: Option<usize>, line: usize, text: &str) -> Result<Option<(u32, u32)>, Failure> {
    let trimmed = text.trim_start();
    if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('%') {
        return Ok(None);
    }
    let id = |token: Option<&str>, what: &str| -> Result<u32, Failure> {
        let token =
            token.ok_or_else(|| parse_error(path, line, format!("expected `src dst`, but the {what} id is missing")))?;
        let id: u64 = token
            .parse()
            .map_err(|_| parse_error(path, line, format!("{what} id `{token}` is not a non-negative integer")))?;
        if let Some(n) = num_nodes {
            if id >= n as u64 {
                return Err(Failure::new(
                    GraphError::NodeIdOutOfRange { path: path.to_string(), line, id, num_nodes: n }.to_string(),
                ));
            }
        }
        u32::try_from(id).map_err(|_| {
            parse_error(path, line, format!("{what} id {id} does not fit in 32 bits (the largest id is {})", u32::MAX))
        })
    };
    let mut tokens = trimmed.split_whitespace();
    let s = id(tokens.next(), "source")?;
    let d = id(tokens.next(), "destination")?;
    for (k, extra) in tokens.enumerate() {
        if extra.parse::<f64>().is_err() {
            return Err(parse_error(
                path,
                line,
                format!("column {} is `{extra}`; columns after `src dst` must be numbers", k + 3),
            ));
        }
    }
    Ok(Some((s, d)))
}

/// Matrix Market state, as `tiga::read_matrix_market` reads it; entries go
/// straight to the builder (`A[i][j]` is an edge from source `j` to
/// destination `i`; a symmetric file's mirror follows its entry).
struct Mtx<'a> {
    path: &'a str,
    num_nodes: Option<usize>,
    /// (pattern, symmetric), once the banner is read.
    kind: Option<(bool, bool)>,
    /// Values are integers (`integer` files), else reals.
    integer: bool,
    size: Option<(usize, usize, usize)>,
    entries: usize,
}

impl Mtx<'_> {
    fn banner(&mut self, line: usize, text: &str) -> Result<(), Failure> {
        let tokens: Vec<String> = text.split_whitespace().map(str::to_ascii_lowercase).collect();
        let expected = "expected `%%MatrixMarket matrix coordinate <real|integer|pattern> <general|symmetric>`";
        let err = |m: String| parse_error(self.path, line, m);
        if tokens.first().map(String::as_str) != Some("%%matrixmarket") {
            return Err(err(format!("missing the Matrix Market header; {expected}")));
        }
        if tokens.len() != 5 {
            return Err(err(format!("the header has {} words; {expected}", tokens.len())));
        }
        if tokens[1] != "matrix" {
            return Err(err(format!("object `{}` is not supported; only `matrix` is", tokens[1])));
        }
        match tokens[2].as_str() {
            "coordinate" => {}
            "array" => return Err(err("dense `array` format is not supported; only sparse `coordinate` is".into())),
            other => return Err(err(format!("format `{other}` is not supported; only `coordinate` is"))),
        }
        let pattern = match tokens[3].as_str() {
            "real" | "double" | "integer" => false,
            "pattern" => true,
            "complex" => return Err(err("`complex` values are not supported; accepted: real, integer, pattern".into())),
            other => return Err(err(format!("field `{other}` is not supported; accepted: real, integer, pattern"))),
        };
        let integer = tokens[3] == "integer";
        let symmetric = match tokens[4].as_str() {
            "general" => false,
            "symmetric" => true,
            other => return Err(err(format!("symmetry `{other}` is not supported; accepted: general, symmetric"))),
        };
        self.integer = integer;
        self.kind = Some((pattern, symmetric));
        Ok(())
    }

    fn number(&self, line: usize, token: &str, what: &str) -> Result<usize, Failure> {
        token.parse().map_err(|_| parse_error(self.path, line, format!("{what} `{token}` is not a non-negative integer")))
    }

    fn line(&mut self, line: usize, text: &str, b: &mut GfgBuilder) -> Result<(), Failure> {
        let Some((pattern, symmetric)) = self.kind else {
            return self.banner(line, text);
        };
        let trimmed = text.trim();
        if trimmed.is_empty() || trimmed.starts_with('%') {
            return Ok(());
        }
        let tokens: Vec<&str> = trimmed.split_whitespace().collect();
        let Some((rows, cols, nnz)) = self.size else {
            if tokens.len() != 3 {
                return Err(parse_error(
                    self.path,
                    line,
                    format!("expected the size line `rows columns entries`, found {} fields", tokens.len()),
                ));
            }
            let rows = self.number(line, tokens[0], "row count")?;
            let cols = self.number(line, tokens[1], "column count")?;
            let nnz = self.number(line, tokens[2], "entry count")?;
            for (what, n) in [("rows", rows), ("columns", cols)] {
                if n > MAX_NODES {
                    return Err(parse_error(self.path, line, format!("the matrix has {n} {what}; at most {MAX_NODES} are supported")));
                }
            }
            if symmetric && rows != cols {
                return Err(parse_error(self.path, line, format!("a symmetric matrix must be square, but it is {rows} x {cols}")));
            }
            if let Some(n) = self.num_nodes {
                if rows != n || cols != n {
                    return Err(Failure::new(format!(
                        "--num-nodes {n} does not match {}, which declares a {rows} x {cols} matrix ({rows} destination rows, {cols} source columns)",
                        self.path
                    )));
                }
            }
            self.size = Some((rows, cols, nnz));
            return Ok(());
        };
        if self.entries == nnz {
            return Err(parse_error(self.path, line, format!("more entries than the {nnz} the size line declares")));
        }
        let want = if pattern { 2 } else { 3 };
        if tokens.len() != want {
            let form = if want == 2 { "`row column`" } else { "`row column value`" };
            return Err(parse_error(self.path, line, format!("expected an entry {form}, found {} fields", tokens.len())));
        }
        let i = self.number(line, tokens[0], "row index")?;
        let j = self.number(line, tokens[1], "column index")?;
        if i == 0 || i > rows {
            return Err(parse_error(self.path, line, format!("row index {i} is out of range 1..={rows}")));
        }
        if j == 0 || j > cols {
            return Err(parse_error(self.path, line, format!("column index {j} is out of range 1..={cols}")));
        }
        if !pattern {
            let integer = self.integer;
            let ok = if integer { tokens[2].parse::<i64>().is_ok() } else { tokens[2].parse::<f64>().is_ok() };
            if !ok {
                let what = if integer { "an integer" } else { "a real number" };
                return Err(parse_error(self.path, line, format!("value `{}` is not {what}", tokens[2])));
            }
        }
        let (r, c) = ((i - 1) as u32, (j - 1) as u32);
        b.push(c, r).map_err(gfg_failure)?;
        if symmetric && r != c {
            b.push(r, c).map_err(gfg_failure)?;
        }
        self.entries += 1;
        Ok(())
    }

    /// `(num_src, num_dst)` once the whole file is read.
    fn finish(&self, lines: usize) -> Result<(u64, u64), Failure> {
        if self.kind.is_none() {
            return Err(parse_error(self.path, 1, "the file is empty; expected a `%%MatrixMarket` header"));
        }
        let Some((rows, cols, nnz)) = self.size else {
            return Err(parse_error(self.path, lines, "the file ends before the size line `rows columns entries`"));
        };
        if self.entries < nnz {
            return Err(parse_error(
                self.path,
                lines,
                format!("the file ends after {} entries, but the size line declares {nnz}", self.entries),
            ));
        }
        Ok((cols as u64, rows as u64))
    }
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
    if let Some(n) = req.num_nodes {
        if n > MAX_NODES {
            return Err(Failure::new(GraphError::TooManyNodes { side: "edge list", count: n }.to_string()));
        }
    }
    // The input must be readable before any temporary file is made.
    let meta = std::fs::metadata(&req.input)
        .map_err(|e| Failure::new(GraphError::Io { path: input.clone(), source: e }.to_string()))?;
    if meta.is_dir() {
        return Err(Failure::new(format!("{input}: is a directory, not an edge list")));
    }
    let total_bytes = meta.len();
    let is_mtx = req.input.extension().is_some_and(|e| e.eq_ignore_ascii_case("mtx"));
    let memory = usize::try_from(req.memory).unwrap_or(usize::MAX);
    let mut builder = GfgBuilder::new(&req.out, BuildOptions { memory_bytes: memory, transpose: req.transpose })
        .map_err(gfg_failure)?;
    let mut bar = Bar::new();
    let reading = format!("reading {}", req.input.file_name().map(|f| f.to_string_lossy()).unwrap_or_default());
    let reading: String = reading.chars().take(24).collect();

    let (num_src, num_dst) = if is_mtx {
        let mut mtx = Mtx { path: &input, num_nodes: req.num_nodes, kind: None, integer: false, size: None, entries: 0 };
        let lines = {
            let b = &mut builder;
            let bar = &mut bar;
            for_each_line(
                &req.input,
                |line, text| mtx.line(line, text, b),
                |bytes| bar.update(&reading, bytes, total_bytes),
            )?
        };
        mtx.finish(lines)?
    } else {
        {
            let b = &mut builder;
            let bar = &mut bar;
            for_each_line(
                &req.input,
                |line, text| {
                    if let Some((s, d)) = edge_line(&input, req.num_nodes, line, text)? {
                        b.push(s, d).map_err(gfg_failure)?;
                    }
                    Ok(())
                },
                |bytes| bar.update(&reading, bytes, total_bytes),
            )?;
        }
        let n = match req.num_nodes {
            Some(n) => n as u64,
            None => {
                let (s, d) = builder.max_ids();
                s.max(d).map_or(0, |m| u64::from(m) + 1)
            }
        };
        (n, n)
    };

    let (pending, stats) = builder
        .finish(num_src, num_dst, &mut |phase: BuildPhase, done, total| bar.update(phase.name(), done, total))
        .map_err(gfg_failure)?;
    pending.commit().map_err(gfg_failure)?;
    bar.clear();
    let size = std::fs::metadata(&req.out).map(|m| m.len()).unwrap_or(0);
    let _ = writeln!(
        std::io::stderr(),
        "wrote {out} ({}): {} sources, {} destinations, {} edges{}{}; {} sorted run(s) of at most {} edges, {} merge pass(es), memory budget {}, {:.2} s",
        human_bytes(size),
        stats.num_src,
        stats.num_dst,
        stats.num_edges,
        if stats.edge_ids { ", edge ids stored" } else { "" },
        if req.transpose { ", with transpose" } else { "" },
        stats.runs,
        stats.chunk_edges,
        stats.merge_passes,
        human_bytes(req.memory),
        start.elapsed().as_secs_f64()
    );
    report_peak_memory();
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn byte_counts() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("512M"), Ok(512 << 20));
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_bytes("64k"), Ok(64 << 10));
        assert!(parse_bytes("0").is_err());
        assert!(parse_bytes("12X").is_err());
        assert!(parse_bytes("lots").is_err());
    }
}
