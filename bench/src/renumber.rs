//! `tiga-bench renumber`: locality by renumbering (`Schedule::renumber`)
//! against the caller's numbering, with what the ordering costs.
//!
//! Three graphs of about the same size, built in this process:
//! - `powerlaw`: the main benchmark's power-law graph (heavy sources
//!   scattered over the ids by a random permutation, `graphs.rs`);
//! - `rmat`: an R-MAT graph with the skew of a social network (the
//!   Graph500 parameters a = 0.57, b = c = 0.19, d = 0.05, edge factor 16),
//!   its ids shuffled as a crawl would hand them out;
//! - `mesh`: the 2-D four-neighbour grid in row-major order, whose natural
//!   order is already local: renumbering should not help there, and the
//!   table says whether it is worth skipping.
//!
//! For each graph, `VecSum` (out[i] = Σ h[j], F = 64, f32) forward, and
//! its gradient, through `Kernel::run_with` / `Kernel::vjp_with` under
//! each renumbering, side by side with the hand-written loop (`hand.rs`)
//! on the caller's numbering. Each call is timed whole (fields moved in,
//! outputs moved out); the one-off cost (the order and the renumbered
//! graph, `Renumbered::build_ms`) is reported apart, with the number of
//! calls after which it pays for itself: cost / (plain call - renumbered
//! call), forward. Every renumbered output and gradient is compared bit
//! for bit with the plain call's; a difference is an error.
//!
//! Paged: each graph is also written to `.gfg` files (with transposes), one
//! plain and one in each node order (`GfgWriter::renumbered`, format 3),
//! and `VecSum` runs over them paged (`--page-rows` rows a page, warm page
//! cache, the field given in memory in the caller's numbering). A paged
//! renumbered row's `x plain` is against the plain file's; its `build ms`
//! is the order and the file's writing, once; its bits are held to the
//! in-memory plain call's.
//!
//! The variants take turns, round after round, so that a noisy neighbour
//! slows them alike; medians are reported.
//!
//! ```sh
//! cargo run --release -p tiga-bench -- renumber [--quick] [--json PATH] [--table PATH]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use serde_json::json;
use tiga::{Graph, Inputs, Kernel, Renumber, Schedule, TensorView};

use crate::graphs::{powerlaw, uniform, SplitMix};
use crate::hand::{self, Post};

/// The target: the power-law sum forward at F = 64, renumbered, at least
/// this many times faster than the hand-written loop on the caller's
/// numbering.
pub const SPEEDUP_TARGET: f64 = 1.3;

/// `tiga-bench renumber`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Graphs 16x smaller
    #[arg(long)]
    quick: bool,
    /// Rounds (each times every variant once, after one warm-up round)
    #[arg(long, value_name = "N", default_value_t = 7, value_parser = crate::timing::positive)]
    rounds: usize,
    /// Feature width
    #[arg(long, value_name = "F", default_value_t = 64, value_parser = crate::timing::positive)]
    width: usize,
    /// Skip the backward
    #[arg(long)]
    no_backward: bool,
    /// Skip the paged variants
    #[arg(long)]
    no_paged: bool,
    /// Rows per page of the paged variants
    #[arg(long, value_name = "N", default_value_t = 100_000, value_parser = crate::timing::positive)]
    page_rows: usize,
    /// Where the JSON goes, written atomically
    #[arg(long, value_name = "PATH", default_value = "target/bench/renumber.json")]
    json: PathBuf,
    /// Where the table goes as well (written atomically)
    #[arg(long, value_name = "PATH")]
    table: Option<PathBuf>,
    /// Graph and field seed
    #[arg(long, value_name = "N", default_value_t = 7)]
    seed: u64,
}

pub fn main(args: &Args) -> ExitCode {
    crate::timing::exit_code("renumber", run(args))
}

/// An R-MAT graph of 2^scale nodes and `edges` edges (Chakrabarti, Zhan
/// and Faloutsos, 2004): each edge picks a quadrant of the adjacency
/// matrix `scale` times with probabilities a, b, c, d (no noise), and the
/// node ids are then shuffled. Rows keep the edges in generation order.
pub fn rmat(scale: u32, edges: usize, seed: u64) -> Result<Graph, String> {
    let n = 1usize << scale;
    let (a, b, c) = (0.57, 0.19, 0.19);
    let mut rng = SplitMix::new(seed ^ 0x52_4d_41_54);
    let mut shuffle: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        shuffle.swap(i, j);
    }
    let (mut src, mut dst) = (Vec::with_capacity(edges), Vec::with_capacity(edges));
    for _ in 0..edges {
        let (mut s, mut d) = (0usize, 0usize);
        for _ in 0..scale {
            let u = rng.unit();
            let (sb, db) = if u < a {
                (0, 0)
            } else if u < a + b {
                (0, 1)
            } else if u < a + b + c {
                (1, 0)
            } else {
                (1, 1)
            };
            s = (s << 1) | sb;
            d = (d << 1) | db;
        }
        src.push(shuffle[s]);
        dst.push(shuffle[d]);
    }
    Graph::from_edges(n, n, &src, &dst).map_err(|e| e.to_string())
}

/// One variant's medians.
#[derive(Debug, Clone)]
struct Row {
    graph: &'static str,
    variant: String,
    fwd_ms: f64,
    bwd_ms: Option<f64>,
    /// The order and the renumbered graph, once.
    build_ms: Option<f64>,
    /// Whether the outputs and gradients held the plain call's bits.
    bits: &'static str,
}

fn run(args: &Args) -> Result<bool, String> {
    let started = Instant::now();
    let load =
        || std::fs::read_to_string("/proc/loadavg").ok().map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
    let load_start = load();
    let div = if args.quick { 16 } else { 1 };
    let f = args.width;
    let side = if args.quick { 250 } else { 1000 };
    let graphs: Vec<(&'static str, Graph)> = vec![
        ("powerlaw", powerlaw(1_000_000 / div, 16_000_000 / div, args.seed).map_err(|e| e.to_string())?),
        ("rmat", rmat(if args.quick { 16 } else { 20 }, 16_000_000 / div, args.seed)?),
        ("mesh", crate::graphs::stencil(side).map_err(|e| e.to_string())?),
    ];
    let vec_sum = crate::kernels::macro_kernel("VecSum").ok_or("no macro kernel VecSum")?;
    let mut rows = Vec::new();
    let mut ok = true;
    for (name, g) in &graphs {
        eprintln!("[renumber] {name}: {} nodes, {} edges", g.num_dst(), g.num_edges());
        let (r, good) = measure(args, name, g, vec_sum, f)?;
        ok &= good;
        rows.extend(r);
    }
    // Derived: pay-off and speed-ups, per graph against its plain row.
    let mut table = format!(
        "renumbering: VecSum F = {f} f32, forward{}; {} rounds after one warm-up, medians; load average {} at the start, {} at the end; {:.0} s in all\n\n",
        if args.no_backward { "" } else { " and gradient" },
        args.rounds,
        load_start.as_deref().unwrap_or("?"),
        load().as_deref().unwrap_or("?"),
        started.elapsed().as_secs_f64()
    );
    table += &format!(
        "{:<9} {:<14} {:>9} {:>9} {:>10} {:>10} {:>10} {:>9}  {}\n",
        "graph", "variant", "fwd ms", "bwd ms", "x hand", "x plain", "build ms", "pays off", "bits"
    );
    let mut json_rows = Vec::new();
    let mut target_value = None;
    for r in &rows {
        let hand = rows.iter().find(|h| h.graph == r.graph && h.variant == "hand").map(|h| h.fwd_ms);
        let base = if r.variant.starts_with("paged ") { "paged none" } else { "tiga none" };
        let plain = rows.iter().find(|h| h.graph == r.graph && h.variant == base).map(|h| h.fwd_ms);
        let over_hand = hand.map(|h| h / r.fwd_ms);
        let over_plain = plain.map(|p| p / r.fwd_ms);
        let pays_off = match (r.build_ms, plain) {
            (Some(b), Some(p)) if p > r.fwd_ms => Some((b / (p - r.fwd_ms)).ceil()),
            _ => None,
        };
        let never = r.build_ms.is_some() && pays_off.is_none();
        if r.graph == "powerlaw" && r.variant.starts_with("tiga ") && r.variant != "tiga none" {
            target_value = match (target_value, over_hand) {
                (Some(t), Some(v)) if v > t => Some(v),
                (None, v) => v,
                (t, _) => t,
            };
        }
        let fmt = |x: Option<f64>, p: usize| x.map_or("-".to_string(), |v| format!("{v:.p$}"));
        table += &format!(
            "{:<9} {:<14} {:>9.2} {:>9} {:>10} {:>10} {:>10} {:>9}  {}\n",
            r.graph,
            r.variant,
            r.fwd_ms,
            fmt(r.bwd_ms, 2),
            fmt(over_hand, 2),
            fmt(over_plain, 2),
            fmt(r.build_ms, 1),
            if never { "never".to_string() } else { fmt(pays_off, 0) },
            r.bits
        );
        json_rows.push(json!({
            "graph": r.graph, "variant": r.variant, "fwd_ms": r.fwd_ms, "bwd_ms": r.bwd_ms,
            "fwd_over_hand": over_hand, "fwd_over_plain": over_plain, "build_ms": r.build_ms,
            "pays_off_after_calls": pays_off, "never_pays_off": never, "bits": r.bits,
            "paged": r.variant.starts_with("paged "),
        }));
    }
    let met = target_value.map(|v| v >= SPEEDUP_TARGET);
    table += &format!(
        "\ntarget powerlaw_sum_f{f}_renumbered_over_hand: {} (>= {SPEEDUP_TARGET}: the best renumbered forward against the hand-written loop on the caller's numbering) {}\n",
        target_value.map_or("-".into(), |v| format!("{v:.2}")),
        match met {
            Some(true) => "met",
            Some(false) => "missed",
            None => "absent",
        }
    );
    print!("{table}");
    let doc = json!({
        "benchmark": "renumber",
        "kernel": "VecSum (macro path, Backend::Auto)",
        "width": f,
        "rounds": args.rounds,
        "quick": args.quick,
        "page_rows": (!args.no_paged).then_some(args.page_rows),
        "threads": rayon::current_num_threads(),
        "load_avg_start": load_start,
        "load_avg_end": load(),
        "graphs": graphs.iter().map(|(n, g)| json!({"graph": n, "nodes": g.num_dst(), "edges": g.num_edges()})).collect::<Vec<_>>(),
        "rows": json_rows,
        "targets": {
            format!("powerlaw_sum_f{f}_renumbered_over_hand"): {
                "what": "the best renumbered VecSum forward on the power-law graph against the hand-written loop on the caller's numbering",
                "target": format!(">= {SPEEDUP_TARGET}"),
                "value": target_value,
                "met": met,
            }
        },
    });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    crate::report::write_atomic(&args.json, &text)?;
    if let Some(t) = &args.table {
        crate::report::write_atomic(t, &table)?;
    }
    println!("wrote {}", args.json.display());
    Ok(ok)
}

/// The hand-written loop, then tiga plain and under each renumbering, in
/// rounds; each renumbered result checked bit for bit against the plain.
fn measure(args: &Args, name: &'static str, g: &Graph, k: &Kernel, f: usize) -> Result<(Vec<Row>, bool), String> {
    let x = uniform(g.num_src() * f, args.seed ^ 0x5eed);
    let xv = TensorView::from_slice_f32(vec![g.num_src(), f], &x).map_err(|e| e.to_string())?;
    let inputs = Inputs::new().src("h", xv);
    let ones = vec![1.0f32; g.num_dst() * f];
    let cot = TensorView::from_slice_f32(vec![g.num_dst(), f], &ones).map_err(|e| e.to_string())?;
    let e = |e: tiga::Error| e.to_string();
    // The one-off cost of each renumbering, measured as a call meets it.
    let mut build = Vec::new();
    for m in [Renumber::Degree, Renumber::Rcm, Renumber::Cluster] {
        let r = g.renumbered(m).map_err(|e| e.to_string())?.ok_or("no renumbering")?;
        let t0 = Instant::now();
        if !args.no_backward {
            r.transposed(g).map_err(|e| e.to_string())?;
        }
        eprintln!(
            "[renumber] {name} {}: order and graph {:.1} ms, transpose {:.1} ms",
            m.name(),
            r.build_ms,
            t0.elapsed().as_secs_f64() * 1e3
        );
        build.push(r.build_ms);
    }
    if !args.no_backward {
        g.try_transposed().map_err(|e| e.to_string())?;
    }
    let plain_out = k.run_with(g, &inputs, &Schedule::new()).map_err(e)?;
    let plain_grad =
        if args.no_backward { None } else { Some(k.vjp_with(g, &inputs, &[("out", cot.clone())], &Schedule::new()).map_err(e)?) };
    let hand_out = hand::csr_sum(g, &x, f, Post::None)?;
    let mut bits = Vec::new();
    for m in Renumber::ALL {
        bits.push(same_bits(k, g, &inputs, &cot, &Schedule::new().renumber(m), &plain_out, plain_grad.as_ref())?);
    }
    let hand_close = hand_out.iter().zip(plain_out.f32("out").map_err(e)?).all(|(a, b)| (a - b).abs() <= 1e-3 * b.abs().max(1.0));
    if !hand_close {
        return Err(format!("{name}: the hand-written loop disagrees with tiga's plain run"));
    }
    // Rounds: hand, then each tiga variant forward (and backward).
    let n_var = 1 + Renumber::ALL.len();
    let mut fwd: Vec<Vec<f64>> = vec![Vec::new(); n_var];
    let mut bwd: Vec<Vec<f64>> = vec![Vec::new(); n_var];
    for round in 0..=args.rounds {
        let t = Instant::now();
        std::hint::black_box(hand::csr_sum(g, &x, f, Post::None)?);
        let hand_ms = t.elapsed().as_secs_f64() * 1e3;
        if round > 0 {
            fwd[0].push(hand_ms);
        }
        for (i, m) in Renumber::ALL.iter().enumerate() {
            let s = Schedule::new().renumber(*m);
            let t = Instant::now();
            std::hint::black_box(k.run_with(g, &inputs, &s).map_err(e)?);
            let ms = t.elapsed().as_secs_f64() * 1e3;
            if round > 0 {
                fwd[i + 1].push(ms);
            }
            if !args.no_backward {
                let t = Instant::now();
                std::hint::black_box(k.vjp_with(g, &inputs, &[("out", cot.clone())], &s).map_err(e)?);
                let ms = t.elapsed().as_secs_f64() * 1e3;
                if round > 0 {
                    bwd[i + 1].push(ms);
                }
            }
        }
    }
    let mut rows = vec![Row {
        graph: name,
        variant: "hand".into(),
        fwd_ms: crate::timing::median(fwd[0].clone()),
        bwd_ms: None,
        build_ms: None,
        bits: "-",
    }];
    for (i, m) in Renumber::ALL.iter().enumerate() {
        rows.push(Row {
            graph: name,
            variant: format!("tiga {}", m.name()),
            fwd_ms: crate::timing::median(fwd[i + 1].clone()),
            bwd_ms: (!args.no_backward).then(|| crate::timing::median(bwd[i + 1].clone())),
            build_ms: (i > 0).then(|| build[i - 1]),
            bits: bits[i],
        });
    }
    let mut good = bits.iter().all(|b| *b == "identical");
    if !args.no_paged {
        let (paged, paged_good) = measure_paged(args, name, g, k, &inputs, &cot, &plain_out, plain_grad.as_ref())?;
        rows.extend(paged);
        good &= paged_good;
    }
    Ok((rows, good))
}

/// Whether a call over `r` under `s` gives `plain_out` and (when given)
/// `plain_grad` bit for bit: "identical" or "DIFFER".
fn same_bits(
    k: &Kernel,
    r: &dyn tiga::Realization,
    inputs: &Inputs<'_>,
    cot: &TensorView<'_>,
    s: &Schedule,
    plain_out: &tiga::Outputs,
    plain_grad: Option<&tiga::Gradients>,
) -> Result<&'static str, String> {
    let e = |e: tiga::Error| e.to_string();
    let bits = |a: &[f32], b: &[f32]| a.iter().map(|v| v.to_bits()).eq(b.iter().map(|v| v.to_bits()));
    let o = k.run_with(r, inputs, s).map_err(e)?;
    let same_fwd = bits(o.f32("out").map_err(e)?, plain_out.f32("out").map_err(e)?);
    let same_bwd = match plain_grad {
        None => true,
        Some(pg) => {
            let gr = k.vjp_with(r, inputs, &[("out", cot.clone())], s).map_err(e)?;
            let a = gr.src("h").and_then(|t| t.as_f32()).ok_or("no gradient of h")?;
            let b = pg.src("h").and_then(|t| t.as_f32()).ok_or("no gradient of h")?;
            bits(a, b)
        }
    };
    Ok(if same_fwd && same_bwd { "identical" } else { "DIFFER" })
}

/// The graph written plain and in each node order, `VecSum` run paged
/// over each file in rounds; every result checked bit for bit against the
/// in-memory plain call's.
#[allow(clippy::too_many_arguments)] // the call `measure` made, and its answers
fn measure_paged(
    args: &Args,
    name: &'static str,
    g: &Graph,
    k: &Kernel,
    inputs: &Inputs<'_>,
    cot: &TensorView<'_>,
    plain_out: &tiga::Outputs,
    plain_grad: Option<&tiga::Gradients>,
) -> Result<(Vec<Row>, bool), String> {
    let e = |e: tiga::Error| e.to_string();
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut files = Vec::new();
    for m in Renumber::ALL {
        let path = dir.path().join(format!("{name}.{}.gfg", m.name()));
        let t0 = Instant::now();
        let built = match g.renumbered(m).map_err(|e| e.to_string())? {
            None => {
                tiga::runtime::storage::save_gfg(&path, g, !args.no_backward, &[]).map_err(|e| e.to_string())?;
                None
            }
            Some(r) => {
                tiga::runtime::storage::GfgWriter::renumbered(g, &r)
                    .and_then(|w| w.with_transpose(!args.no_backward).save(&path))
                    .map_err(|e| e.to_string())?;
                Some(r.build_ms)
            }
        };
        let write_ms = t0.elapsed().as_secs_f64() * 1e3;
        eprintln!("[renumber] {name} paged {}: written in {write_ms:.0} ms", m.name());
        let file = tiga::runtime::GfgFile::open(&path).map_err(|e| e.to_string())?;
        files.push((m, file, built.map(|b| b + write_ms)));
    }
    let schedule = Schedule::new().page_rows(args.page_rows);
    let mut bits = Vec::new();
    for (_, file, _) in &files {
        bits.push(same_bits(k, file, inputs, cot, &schedule, plain_out, plain_grad)?);
    }
    let mut fwd: Vec<Vec<f64>> = vec![Vec::new(); files.len()];
    let mut bwd: Vec<Vec<f64>> = vec![Vec::new(); files.len()];
    for round in 0..=args.rounds {
        for (i, (_, file, _)) in files.iter().enumerate() {
            let t = Instant::now();
            std::hint::black_box(k.run_with(file, inputs, &schedule).map_err(e)?);
            let ms = t.elapsed().as_secs_f64() * 1e3;
            if round > 0 {
                fwd[i].push(ms);
            }
            if !args.no_backward {
                let t = Instant::now();
                std::hint::black_box(k.vjp_with(file, inputs, &[("out", cot.clone())], &schedule).map_err(e)?);
                let ms = t.elapsed().as_secs_f64() * 1e3;
                if round > 0 {
                    bwd[i].push(ms);
                }
            }
        }
    }
    let rows = files
        .iter()
        .enumerate()
        .map(|(i, (m, _, built))| Row {
            graph: name,
            variant: format!("paged {}", m.name()),
            fwd_ms: crate::timing::median(fwd[i].clone()),
            bwd_ms: (!args.no_backward).then(|| crate::timing::median(bwd[i].clone())),
            build_ms: *built,
            bits: bits[i],
        })
        .collect();
    let good = bits.iter().all(|b| *b == "identical");
    Ok((rows, good))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rmat_is_deterministic_and_skewed() {
        let a = rmat(10, 16_000, 3).expect("graph");
        assert_eq!(a, rmat(10, 16_000, 3).expect("graph"));
        assert_eq!((a.num_dst(), a.num_edges()), (1024, 16_000));
        // The heaviest row holds far more than the mean of 15.6 edges.
        let max = a.offsets().windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        assert!(max > 150, "heaviest row {max}");
    }
}
