//! `tiga-bench paged`: paged execution against the in-memory run, on a
//! 2000×2000 four-neighbour stencil (4M nodes, 16M edges; `--quick`:
//! 500×500) saved once as a `.gfg` file.
//!
//! Rows: the in-memory reference (`Kernel::run` on the graph loaded from the
//! file), then the kernel over the `GfgFile` with pages of all rows and of 100k rows,
//! each with prefetch off (0) and on (2), then two of them again over the
//! same graph saved in format version 1, which has no block checksums: the
//! side-by-side measure of what verifying each block as it is read costs
//! (the rows alternate in every round). "first run" is each child's
//! untimed warm-up, the run that hashes the blocks and checks the pages. Every row runs in a fresh child
//! process (this binary re-executed with `TIGA_BENCH_PAGED_CHILD` set), so
//! its peak RSS is its own: the child reads `VmHWM` from `/proc/self/status`
//! at the end. A child runs one untimed warm-up and 3 timed repeats of 5
//! Jacobi steps (`Smoothing`, f32, the macro path's ahead-of-time
//! variant); step 1 reads `x` from the file's own field, each later step
//! feeds the previous output back as `x`.
//! Each configuration runs in 7 children, in rounds (every configuration
//! once per round, so that they share the machine's drifting speed);
//! elapsed is the median of all their repeats, peak RSS the highest of
//! their peaks. The checksum is the sum of the
//! last output (and its CRC-32, which must be identical across rows: a
//! difference is an error and a non-zero exit).
//!
//! The file is written just before the children run, so its pages are in
//! the page cache: this measures paging from a warm cache (what the reader
//! costs in copies and in memory), not the disk.
//!
//! Targets (reported, not asserted): 100k-row pages use at most 35% of the
//! one-page peak RSS, and with prefetch take at most 1.15× the in-memory
//! time. The table goes to stdout and, with the JSON, to files written
//! atomically (temp + fsync + rename).
//!
//! ```sh
//! cargo run --release -p tiga-bench -- paged [--quick] [--json target/bench/paged.json]
//! ```

use crate::timing::median;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use serde_json::{json, Value};
use tiga::runtime::storage::{FieldRole, GfgFile, GfgWriter};
use tiga::runtime::{save_gfg, tensor_crc32};
use tiga::{Graph, Inputs, Outputs, Schedule, Tensor};

const CHILD_ENV: &str = "TIGA_BENCH_PAGED_CHILD";
const STEPS: usize = 5;
const REPEATS: usize = 3;
/// Untimed runs before the timed ones, in every child. A paged run's first
/// visit of a page checks it against the counts (once per open file), as
/// the in-memory child's `load_graph` checks the whole graph before its
/// clock starts; the warm-up takes that one-time cost out of both.
const WARMUPS: usize = 1;
const PAGE_ROWS: usize = 100_000;
const RSS_TARGET: f64 = 0.35;
const TIME_TARGET: f64 = 1.15;

/// `tiga-bench paged`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// A 500x500 stencil instead of 2000x2000
    #[arg(long)]
    quick: bool,
    /// An N x N stencil (overrides --quick)
    #[arg(long, value_name = "N", value_parser = crate::timing::positive)]
    side: Option<usize>,
    /// Where the JSON goes, written atomically
    #[arg(long, value_name = "PATH", default_value = "target/bench/paged.json")]
    json: PathBuf,
    /// Where the table goes, written atomically
    #[arg(long, value_name = "PATH", default_value = "target/bench/paged.txt")]
    table: PathBuf,
    /// Where the .gfg file is written [default: a new directory in the
    /// temporary directory, removed at the end]
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Keep the .gfg file
    #[arg(long)]
    keep: bool,
    /// Rayon threads in the children [default: all CPUs]
    #[arg(long, value_name = "N", value_parser = crate::timing::positive)]
    threads: Option<usize>,
}

/// The flags, resolved.
#[derive(Debug)]
pub(crate) struct Opts {
    pub(crate) side: usize,
    pub(crate) json: PathBuf,
    pub(crate) table: PathBuf,
    pub(crate) dir: Option<PathBuf>,
    pub(crate) keep: bool,
    pub(crate) threads: Option<usize>,
}

impl From<&Args> for Opts {
    fn from(a: &Args) -> Opts {
        Opts {
            side: a.side.unwrap_or(if a.quick { 500 } else { 2000 }),
            json: a.json.clone(),
            table: a.table.clone(),
            dir: a.dir.clone(),
            keep: a.keep,
            threads: a.threads,
        }
    }
}

/// One configuration a child runs.
#[derive(Debug, Clone)]
struct Config {
    label: &'static str,
    /// `None`: the in-memory reference.
    page_rows: Option<usize>,
    prefetch: usize,
    /// Over the version 1 file (no block checksums).
    v1: bool,
}

/// What a child measured.
#[derive(Debug, Clone)]
struct Measured {
    pages: Option<usize>,
    times_ms: Vec<f64>,
    median_ms: f64,
    /// The warm-up runs' times (the first run of a child: what the one-time
    /// checks cost lands there).
    first_ms: Vec<f64>,
    hwm_kib: u64,
    rss_open_kib: u64,
    sum: f64,
    crc32: u32,
}

/// Children per configuration, run in rounds.
const ROUNDS: usize = 7;

/// One configuration's children as one measurement: every run's time (the
/// median over all of them), the highest peak RSS; their checksums must
/// agree.
fn merge(list: &[Measured]) -> Result<Measured, String> {
    let first = list.first().ok_or("no child ran")?;
    if let Some(m) = list.iter().find(|m| m.crc32 != first.crc32 || m.sum.to_bits() != first.sum.to_bits()) {
        return Err(format!(
            "children disagree: checksum {:.6} (crc32 {:08x}) and {:.6} (crc32 {:08x})",
            first.sum, first.crc32, m.sum, m.crc32
        ));
    }
    let times: Vec<f64> = list.iter().flat_map(|m| m.times_ms.iter().copied()).collect();
    Ok(Measured {
        first_ms: list.iter().flat_map(|m| m.first_ms.iter().copied()).collect(),
        pages: first.pages,
        median_ms: median(times.clone()),
        times_ms: times,
        hwm_kib: list.iter().map(|m| m.hwm_kib).max().unwrap_or(0),
        rss_open_kib: list.iter().map(|m| m.rss_open_kib).max().unwrap_or(0),
        sum: first.sum,
        crc32: first.crc32,
    })
}

/// `VmHWM` / `VmRSS` etc. of this process, in KiB.
fn status_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')))
                .and_then(|r| r.split_whitespace().next().and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn take_out(o: Outputs) -> Result<Tensor, String> {
    o.items.into_iter().next().map(|(_, t)| t).ok_or_else(|| "the kernel returned no output".to_string())
}

/// What [`timed_steps`] measured: the warm-up and the timed runs' times
/// (ms), and the last output.
type Steps = (Vec<f64>, Vec<f64>, Option<Tensor>);

/// `WARMUPS` untimed and `REPEATS` timed runs of `STEPS` Jacobi steps,
/// each step's output the next one's `x` (`None` in step 1): the warm-up
/// runs' and the timed runs' times, and the last output.
fn timed_steps(mut step: impl FnMut(Option<&Tensor>) -> tiga::Result<Outputs>) -> Result<Steps, String> {
    let mut times = Vec::with_capacity(REPEATS);
    let mut first = Vec::with_capacity(WARMUPS);
    let mut last: Option<Tensor> = None;
    for run in 0..WARMUPS + REPEATS {
        drop(last.take()); // free the previous run's result first
        let t = Instant::now();
        let mut x: Option<Tensor> = None;
        for _ in 0..STEPS {
            let outs = step(x.as_ref()).map_err(|e| e.to_string())?;
            x = Some(take_out(outs)?);
        }
        let ms = t.elapsed().as_secs_f64() * 1e3;
        if run >= WARMUPS {
            times.push(ms);
        } else {
            first.push(ms);
        }
        last = x;
    }
    Ok((first, times, last))
}

/// The child: `MODE|PATH|PAGE_ROWS|PREFETCH`, MODE `memory` or `paged`.
fn child(spec: &str) -> Result<(), String> {
    let parts: Vec<&str> = spec.splitn(4, '|').collect();
    let [mode, rows, prefetch, path] = parts[..] else {
        return Err(format!("{CHILD_ENV}: bad spec `{spec}`"));
    };
    let num = |s: &str| s.parse::<usize>().map_err(|e| format!("{CHILD_ENV}: `{s}`: {e}"));
    let (rows, prefetch) = (num(rows)?, num(prefetch)?);
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let file = GfgFile::open(path).map_err(|x| e(&x))?;
    let kernel = crate::kernels::gnn::Smoothing::kernel();
    let x_field = file.field(FieldRole::Src, "x").map_err(|x| e(&x))?;
    let mut pages = None;
    let rss_open_kib;
    let (first_ms, times, last) = match mode {
        "paged" => {
            let opts = Schedule::new().page_rows(rows).prefetch(prefetch);
            pages = Some(opts.plan(file.offsets().map_err(|x| e(&x))?, 4).len());
            rss_open_kib = status_kib("VmRSS");
            // Step 1 reads `x` from the file's own field.
            timed_steps(|x| match x {
                None => kernel.run_with(&file, &Inputs::new(), &opts),
                Some(p) => kernel.run_with(&file, &Inputs::new().src("x", p), &opts),
            })?
        }
        "memory" => {
            let graph: Graph = file.load_graph().map_err(|x| e(&x))?;
            let x0 = x_field.view().map_err(|x| e(&x))?;
            rss_open_kib = status_kib("VmRSS");
            timed_steps(|x| kernel.run(&graph, &Inputs::new().src("x", x.map(Tensor::view).unwrap_or_else(|| x0.clone()))))?
        }
        other => return Err(format!("{CHILD_ENV}: unknown mode `{other}`")),
    };
    let hwm_kib = status_kib("VmHWM");
    let out = last.ok_or("no result")?;
    let values = out.as_f32().ok_or("the output is not f32")?;
    let sum: f64 = values.iter().map(|&v| f64::from(v)).sum();
    let line = json!({
        "pages": pages,
        "times_ms": times,
        "median_ms": median(times.clone()),
        "first_ms": first_ms,
        "hwm_kib": hwm_kib,
        "rss_open_kib": rss_open_kib,
        "sum": sum,
        "crc32": tensor_crc32(out.data()),
    });
    println!("PAGED_RESULT {line}");
    Ok(())
}

fn run_child(cfg: &Config, path: &Path, threads: Option<usize>) -> Result<Measured, String> {
    let exe = std::env::current_exe().map_err(|e| format!("this binary: {e}"))?;
    let spec = match cfg.page_rows {
        None => format!("memory|0|0|{}", path.display()),
        Some(r) => format!("paged|{r}|{}|{}", cfg.prefetch, path.display()),
    };
    let mut cmd = Command::new(exe);
    cmd.arg("paged").env(CHILD_ENV, spec).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(t) = threads {
        cmd.env("RAYON_NUM_THREADS", t.to_string());
    }
    let out = cmd.output().map_err(|e| format!("{}: cannot run the child: {e}", cfg.label))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "{}: the child failed ({}): {}{}",
            cfg.label,
            out.status,
            stdout.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("PAGED_RESULT "))
        .ok_or_else(|| format!("{}: the child printed no result: {stdout}", cfg.label))?;
    let v: Value = serde_json::from_str(line).map_err(|e| format!("{}: bad child result: {e}", cfg.label))?;
    let f = |k: &str| v[k].as_f64().ok_or_else(|| format!("{}: child result lacks `{k}`", cfg.label));
    let u = |k: &str| v[k].as_u64().ok_or_else(|| format!("{}: child result lacks `{k}`", cfg.label));
    Ok(Measured {
        pages: v["pages"].as_u64().map(|p| p as usize),
        times_ms: v["times_ms"].as_array().map(|a| a.iter().filter_map(Value::as_f64).collect()).unwrap_or_default(),
        median_ms: f("median_ms")?,
        first_ms: v["first_ms"].as_array().map(|a| a.iter().filter_map(Value::as_f64).collect()).unwrap_or_default(),
        hwm_kib: u("hwm_kib")?,
        rss_open_kib: u("rss_open_kib")?,
        sum: f("sum")?,
        crc32: u("crc32")? as u32,
    })
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Entry point of `tiga-bench paged ARGS...` (and of its children, which
/// run as `tiga-bench paged` with [`CHILD_ENV`] set and ignore the flags).
pub fn main(args: &Args) -> ExitCode {
    if let Some(spec) = std::env::var_os(CHILD_ENV) {
        return match child(&spec.to_string_lossy()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tiga-bench paged (child): {e}");
                ExitCode::FAILURE
            }
        };
    }
    match parent(&Opts::from(args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tiga-bench paged: {e}");
            ExitCode::FAILURE
        }
    }
}

fn parent(o: &Opts) -> Result<ExitCode, String> {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let threads = o.threads.unwrap_or(cpus);
    let load_avg =
        std::fs::read_to_string("/proc/loadavg").ok().map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
    eprintln!("[paged] {threads} threads, load average {}", load_avg.as_deref().unwrap_or("?"));

    let (dir, made_dir) = match &o.dir {
        Some(d) => (d.clone(), false),
        None => (std::env::temp_dir().join(format!("tiga-bench-paged-{}", std::process::id())), true),
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(format!("stencil-{}.gfg", o.side));
    let path_v1 = dir.join(format!("stencil-{}-v1.gfg", o.side));
    let n = o.side;
    let t = Instant::now();
    let (num_nodes, num_edges, build_ms) = {
        let graph = Graph::stencil_2d_4(n, n).map_err(|e| e.to_string())?;
        // A hot square in the middle of a cold plate.
        let (lo, hi) = (2 * n / 5, 3 * n / 5);
        let x: Vec<f32> =
            (0..n * n).map(|i| if (lo..hi).contains(&(i / n)) && (lo..hi).contains(&(i % n)) { 1.0 } else { 0.0 }).collect();
        let build_ms = t.elapsed().as_secs_f64() * 1e3;
        save_gfg(&path, &graph, false, &[(FieldRole::Src, "x", (&x).into())]).map_err(|e| e.to_string())?;
        GfgWriter::new(&graph).field(FieldRole::Src, "x", &x).version_1().save(&path_v1).map_err(|e| e.to_string())?;
        (graph.num_dst(), graph.num_edges(), build_ms)
    };
    let save_ms = t.elapsed().as_secs_f64() * 1e3 - build_ms;
    let file_bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "[paged] {n}x{n} stencil: {num_nodes} nodes, {num_edges} edges; saved {} ({:.1} MiB) in {save_ms:.0} ms",
        path.display(),
        file_bytes as f64 / (1 << 20) as f64
    );

    let configs = [
        Config { label: "in-memory (Kernel::run)", page_rows: None, prefetch: 0, v1: false },
        Config { label: "paged, all rows, prefetch 0", page_rows: Some(num_nodes.max(1)), prefetch: 0, v1: false },
        Config { label: "paged, all rows, prefetch 0, v1", page_rows: Some(num_nodes.max(1)), prefetch: 0, v1: true },
        Config { label: "paged, all rows, prefetch 2", page_rows: Some(num_nodes.max(1)), prefetch: 2, v1: false },
        Config { label: "paged, 100k rows, prefetch 0", page_rows: Some(PAGE_ROWS), prefetch: 0, v1: false },
        Config { label: "paged, 100k rows, prefetch 2", page_rows: Some(PAGE_ROWS), prefetch: 2, v1: false },
        Config { label: "paged, 100k rows, prefetch 2, v1", page_rows: Some(PAGE_ROWS), prefetch: 2, v1: true },
    ];
    // Children run in rounds, every configuration once per round: this
    // machine's speed drifts over minutes, and rows measured one after the
    // other in blocks compared different weather (the in-memory row took
    // 30 ms in one run and 44 ms in the next).
    let mut per: Vec<Result<Vec<Measured>, String>> = configs.iter().map(|_| Ok(Vec::new())).collect();
    for round in 0..ROUNDS {
        for (c, got) in configs.iter().zip(&mut per) {
            let Ok(list) = got else { continue };
            eprintln!("[paged] round {}/{ROUNDS}: {} ...", round + 1, c.label);
            match run_child(c, if c.v1 { &path_v1 } else { &path }, o.threads) {
                Ok(m) => {
                    eprintln!(
                        "[paged]   median {:.1} ms (runs {:?}), peak RSS {:.1} MiB",
                        m.median_ms,
                        m.times_ms.iter().map(|t| (t * 10.0).round() / 10.0).collect::<Vec<_>>(),
                        mib(m.hwm_kib)
                    );
                    list.push(m);
                }
                Err(e) => {
                    eprintln!("[paged]   ERROR: {e}");
                    *got = Err(e);
                }
            }
        }
    }
    let results: Vec<(Config, Result<Measured, String>)> =
        configs.iter().cloned().zip(per.into_iter().map(|r| r.and_then(|list| merge(&list)))).collect();
    if made_dir && !o.keep {
        let _ = std::fs::remove_dir_all(&dir);
    } else if !o.keep {
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(&path_v1);
    }

    let mut errors: Vec<String> = results.iter().filter_map(|(_, r)| r.as_ref().err().cloned()).collect();
    let ok: Vec<(&Config, &Measured)> = results.iter().filter_map(|(c, r)| r.as_ref().ok().map(|m| (c, m))).collect();
    if let Some((_, first)) = ok.first() {
        for (c, m) in &ok {
            if m.crc32 != first.crc32 || m.sum.to_bits() != first.sum.to_bits() {
                errors.push(format!(
                    "{}: checksum {:.6} (crc32 {:08x}) differs from {:.6} (crc32 {:08x}) of the first row",
                    c.label, m.sum, m.crc32, first.sum, first.crc32
                ));
            }
        }
    }
    let find = |rows: Option<usize>, prefetch: usize| {
        ok.iter().find(|(c, _)| !c.v1 && c.page_rows == rows && (rows.is_none() || c.prefetch == prefetch)).map(|(_, m)| *m)
    };
    let find_v1 = |rows: usize, prefetch: usize| {
        ok.iter().find(|(c, _)| c.v1 && c.page_rows == Some(rows) && c.prefetch == prefetch).map(|(_, m)| *m)
    };
    // What the block checks cost: version 2 over version 1, same rows.
    let block_ratio = |rows: usize, prefetch: usize, first: bool| {
        let (v2, v1) = (find(Some(rows), prefetch)?, find_v1(rows, prefetch)?);
        Some(if first { median(v2.first_ms.clone()) / median(v1.first_ms.clone()) } else { v2.median_ms / v1.median_ms })
    };
    let memory = find(None, 0);
    let all = |p| find(Some(num_nodes.max(1)), p);
    let paged = |p| find(Some(PAGE_ROWS), p);
    let rss_ratio = |p: usize| Some(paged(p)?.hwm_kib as f64 / all(p)?.hwm_kib as f64);
    let time_ratio = || Some(paged(2)?.median_ms / memory?.median_ms);

    // The table.
    let mut s = String::new();
    s.push_str(&format!(
        "paged execution: {n}x{n} four-neighbour stencil ({num_nodes} nodes, {num_edges} edges), .gfg {:.1} MiB \
         (warm page cache)\n{STEPS} Jacobi steps (Smoothing, f32) per run, elapsed = median of {REPEATS} runs after {WARMUPS} warm-up in each of {ROUNDS} children run in rounds; \
         each row in a fresh process; {threads} threads; load average {}\n\n",
        file_bytes as f64 / (1 << 20) as f64,
        load_avg.as_deref().unwrap_or("?")
    ));
    s.push_str(&format!(
        "{:<34} {:>6} {:>12} {:>14} {:>14} {:>16} {:>18}\n",
        "configuration", "pages", "elapsed ms", "first run ms", "peak RSS MiB", "RSS at start MiB", "checksum (sum)"
    ));
    for (c, r) in &results {
        match r {
            Ok(m) => s.push_str(&format!(
                "{:<34} {:>6} {:>12.1} {:>14.1} {:>14.1} {:>16.1} {:>18.6}\n",
                c.label,
                m.pages.map_or("-".to_string(), |p| p.to_string()),
                m.median_ms,
                median(m.first_ms.clone()),
                mib(m.hwm_kib),
                mib(m.rss_open_kib),
                m.sum
            )),
            Err(_) => s.push_str(&format!("{:<34} {:>6}\n", c.label, "failed")),
        }
    }
    let fmt_ratio = |r: Option<f64>, unit: &str| r.map_or("-".to_string(), |r| format!("{r:.3}{unit}"));
    let met = |r: Option<f64>, target: f64| match r {
        Some(r) if r <= target => "met",
        Some(_) => "NOT met",
        None => "not measured",
    };
    s.push_str(&format!(
        "\ntarget: 100k-row pages use <= {:.0}% of the one-page peak RSS: prefetch 0: {} ({}), prefetch 2: {} ({})\n",
        RSS_TARGET * 100.0,
        fmt_ratio(rss_ratio(0).map(|r| r * 100.0), "%"),
        met(rss_ratio(0), RSS_TARGET),
        fmt_ratio(rss_ratio(2).map(|r| r * 100.0), "%"),
        met(rss_ratio(2), RSS_TARGET),
    ));
    s.push_str(&format!(
        "target: 100k-row pages with prefetch take <= {TIME_TARGET}x the in-memory time: {} ({})\n",
        fmt_ratio(time_ratio(), "x"),
        met(time_ratio(), TIME_TARGET)
    ));
    for (rows, prefetch, what) in [(num_nodes.max(1), 0, "all rows, prefetch 0"), (PAGE_ROWS, 2, "100k rows, prefetch 2")] {
        s.push_str(&format!(
            "block checks (v2 over v1, {what}): timed runs {}, first run {}\n",
            fmt_ratio(block_ratio(rows, prefetch, false), "x"),
            fmt_ratio(block_ratio(rows, prefetch, true), "x"),
        ));
    }
    if let Some(first) = ok.first() {
        s.push_str(&format!(
            "checksums: {} of {} rows agree bit for bit (sum {:.6}, crc32 {:08x})\n",
            ok.iter().filter(|(_, m)| m.crc32 == first.1.crc32).count(),
            results.len(),
            first.1.sum,
            first.1.crc32
        ));
    }
    print!("{s}");

    let rows: Vec<Value> = results
        .iter()
        .map(|(c, r)| match r {
            Ok(m) => json!({
                "configuration": c.label,
                "realization": if c.page_rows.is_some() { "paged_csr" } else { "in_memory" },
                "page_rows": c.page_rows,
                "prefetch": c.page_rows.map(|_| c.prefetch),
                "pages": m.pages,
                "format_version": if c.v1 { 1 } else { 2 },
                "elapsed_ms_median": m.median_ms,
                "elapsed_ms_runs": m.times_ms,
                "first_run_ms": m.first_ms,
                "peak_rss_kib": m.hwm_kib,
                "rss_at_start_kib": m.rss_open_kib,
                "checksum_sum": m.sum,
                "checksum_crc32": format!("{:08x}", m.crc32),
            }),
            Err(e) => json!({ "configuration": c.label, "error": e }),
        })
        .collect();
    let doc = json!({
        "benchmark": "paged",
        "graph": { "kind": "stencil_2d_4", "side": n, "nodes": num_nodes, "edges": num_edges, "gfg_bytes": file_bytes },
        "kernel": "Smoothing (f32, macro path)",
        "steps_per_run": STEPS,
        "runs": REPEATS,
        "timing": "median of the timed runs of all children of a configuration (ROUNDS children each, run in rounds; each child's first run is an untimed warm-up); each run is STEPS chained calls (step 1 reads x from the file's field); peak RSS is the highest child's",
        "children_per_configuration": ROUNDS,
        "peak_rss": "VmHWM of a fresh child process per row, read at its end",
        "machine": { "threads": threads, "cpus": cpus, "load_avg": load_avg },
        "rows": rows,
        "targets": {
            "rss_100k_over_one_page": { "target": RSS_TARGET, "prefetch_0": rss_ratio(0), "prefetch_2": rss_ratio(2) },
            "time_100k_prefetch_over_in_memory": { "target": TIME_TARGET, "ratio": time_ratio() },
            "block_checks_v2_over_v1": {
                "all_rows_prefetch_0": { "timed": block_ratio(num_nodes.max(1), 0, false), "first_run": block_ratio(num_nodes.max(1), 0, true) },
                "100k_rows_prefetch_2": { "timed": block_ratio(PAGE_ROWS, 2, false), "first_run": block_ratio(PAGE_ROWS, 2, true) },
            },
        },
        "notes": [
            "the .gfg file is in the page cache (written just before): paged reads are copies from the cache, not disk reads",
            "peak RSS counts file-backed mapped pages too: the paged runner maps the offsets section and copies it whole, and step 1 maps the file's x field",
        ],
        "errors": errors,
    });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())? + "\n";
    crate::report::write_atomic(&o.json, &text)?;
    crate::report::write_atomic(&o.table, &s)?;
    println!("wrote {} and {}", o.json.display(), o.table.display());
    if errors.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        for e in &errors {
            eprintln!("tiga-bench paged: error: {e}");
        }
        Ok(ExitCode::FAILURE)
    }
}
