//! What one run measured, as a table for people and as JSON for tools.
//!
//! Derived numbers (edges per second, GB/s under the case's traffic model,
//! fraction of STREAM, the tiga/hand-written and tiga/peer ratios) are
//! computed here from the raw medians, in one place, so the table and the
//! JSON can never disagree. A case tiga cannot run yet stays in both, marked
//! absent with the reason, next to the hand-written time that exists.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value};

use crate::peers::PeerResult;

/// How far a baseline's result is from tiga's.
#[derive(Debug, Clone)]
pub struct Check {
    pub max_abs: f64,
    /// max |a - b| / max(|b|, 1) over the elements.
    pub max_rel: f64,
}

/// One measured case.
#[derive(Debug, Clone, Default)]
pub struct Case {
    pub case: String,
    /// Which back end ran tiga's numbers ("cranelift" or "rust-aot").
    pub backend: &'static str,
    pub f: usize,
    pub nodes: usize,
    pub edges: usize,
    /// Why tiga has no number for this case.
    pub absent: Option<String>,
    pub fwd_ms: Option<f64>,
    pub bwd_ms: Option<f64>,
    /// The first call of each (JIT compile, transposes, page faults included).
    pub fwd_first_ms: Option<f64>,
    pub bwd_first_ms: Option<f64>,
    /// Bytes the forward pass must move at least, and the model in words.
    pub model_bytes: u64,
    pub model: String,
    /// JIT compile time of the forward variant, and of the adjoint stages'.
    pub compile_ms: Option<f64>,
    pub bwd_compile_ms: Option<f64>,
    pub hand_fwd_ms: Option<f64>,
    pub hand_bwd_ms: Option<f64>,
    /// Why there is no hand-written backward, when there is none.
    pub hand_bwd_absent: Option<String>,
    /// `tigac run --timing` on the same graph and kernel (run_ms_median,
    /// vjp_ms_median), or why it did not run.
    pub tigac: Option<Result<(f64, f64), String>>,
    pub check_fwd: Option<Check>,
    pub check_bwd: Option<Check>,
    /// The case's name in peers.py, if it has one.
    pub peer_case: Option<&'static str>,
    pub peers: BTreeMap<String, PeerResult>,
}

/// `threads` → (tiga fwd, tiga bwd, hand fwd) for one case.
#[derive(Debug, Clone, Default)]
pub struct Scaling {
    pub case: String,
    pub f: usize,
    /// Rounds the thread counts took turns over, and timed calls per round.
    pub rounds: usize,
    pub repeat: usize,
    pub rows: Vec<ScalingRow>,
}

/// One thread count's medians (over the rounds); the macro back end's
/// figures are absent when it has no variant for the width.
#[derive(Debug, Clone)]
pub struct ScalingRow {
    pub threads: usize,
    pub fwd_ms: f64,
    pub bwd_ms: f64,
    pub aot_fwd_ms: Option<f64>,
    pub aot_bwd_ms: Option<f64>,
    pub hand_fwd_ms: f64,
}

#[derive(Debug, Clone, Default)]
pub struct Machine {
    pub threads: usize,
    pub cpus: usize,
    pub stream_copy_gbs: f64,
    pub stream_copy_median_gbs: f64,
    pub stream_mib: usize,
    pub hand_isa: String,
    pub quick: bool,
    pub repeat: usize,
    pub load_avg: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Report {
    pub machine: Machine,
    pub cases: Vec<Case>,
    pub scaling: Option<Scaling>,
    pub notes: Vec<String>,
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

impl Case {
    pub fn bwd_over_fwd(&self) -> Option<f64> {
        ratio(self.bwd_ms, self.fwd_ms)
    }
    pub fn edges_per_s(&self) -> Option<f64> {
        self.fwd_ms.map(|ms| self.edges as f64 / (ms / 1e3))
    }
    fn gbs_of(&self, ms: Option<f64>) -> Option<f64> {
        ms.map(|ms| self.model_bytes as f64 / (ms / 1e3) / 1e9)
    }
    pub fn gbs(&self) -> Option<f64> {
        self.gbs_of(self.fwd_ms)
    }
    pub fn hand_gbs(&self) -> Option<f64> {
        self.gbs_of(self.hand_fwd_ms)
    }
    pub fn tiga_over_hand(&self) -> Option<f64> {
        ratio(self.fwd_ms, self.hand_fwd_ms)
    }
    pub fn tiga_over_hand_bwd(&self) -> Option<f64> {
        ratio(self.bwd_ms, self.hand_bwd_ms)
    }
    /// tiga over a peer, forward and backward. A peer whose backward was
    /// timed as forward+backward is compared with tiga's forward + backward.
    pub fn tiga_over_peer(&self, peer: &str) -> (Option<f64>, Option<f64>) {
        let Some(Ok(p)) = self.peers.get(peer) else { return (None, None) };
        let fwd = ratio(self.fwd_ms, p.fwd_ms);
        let tiga_bwd = if p.bwd_pass.as_deref() == Some("forward+backward") {
            self.fwd_ms.zip(self.bwd_ms).map(|(a, b)| a + b)
        } else {
            self.bwd_ms
        };
        (fwd, ratio(tiga_bwd, p.bwd_ms))
    }
}

fn num(v: Option<f64>, digits: u32) -> Value {
    match v {
        Some(x) if x.is_finite() => {
            let s = 10f64.powi(digits as i32);
            json!((x * s).round() / s)
        }
        _ => Value::Null,
    }
}

fn check_json(c: &Option<Check>) -> Value {
    match c {
        Some(c) => json!({"max_abs_diff": c.max_abs, "max_rel_diff": c.max_rel}),
        None => Value::Null,
    }
}

impl Report {
    pub fn to_json(&self) -> Value {
        let m = &self.machine;
        let cases: Vec<Value> = self
            .cases
            .iter()
            .map(|c| {
                let mut peers = serde_json::Map::new();
                for (name, r) in &c.peers {
                    let (rf, rb) = c.tiga_over_peer(name);
                    let v = match r {
                        Ok(p) => json!({
                            "fwd_ms": num(p.fwd_ms, 3), "bwd_ms": num(p.bwd_ms, 3), "bwd_pass": p.bwd_pass,
                            "tiga_over_peer_fwd": num(rf, 4), "tiga_over_peer_bwd": num(rb, 4),
                        }),
                        Err(why) => json!({"missing": why}),
                    };
                    peers.insert(name.clone(), v);
                }
                let mut o = json!({
                    "case": c.case, "F": c.f, "nodes": c.nodes, "edges": c.edges,
                    "backend": if c.absent.is_some() { Value::Null } else { json!(if c.backend.is_empty() { "cranelift" } else { c.backend }) },
                    "fwd_ms": num(c.fwd_ms, 3), "bwd_ms": num(c.bwd_ms, 3),
                    "bwd_over_fwd": num(c.bwd_over_fwd(), 3),
                    "fwd_first_ms": num(c.fwd_first_ms, 3), "bwd_first_ms": num(c.bwd_first_ms, 3),
                    "edges_per_s": num(c.edges_per_s(), 0),
                    "model_bytes": c.model_bytes, "model": c.model,
                    "gbs": num(c.gbs(), 3), "of_stream": num(c.gbs().map(|g| g / m.stream_copy_gbs), 4),
                    "compile_ms": num(c.compile_ms, 3), "bwd_compile_ms": num(c.bwd_compile_ms, 3),
                    "hand_fwd_ms": num(c.hand_fwd_ms, 3), "hand_bwd_ms": num(c.hand_bwd_ms, 3),
                    "hand_gbs": num(c.hand_gbs(), 3),
                    "tiga_over_hand": num(c.tiga_over_hand(), 4),
                    "tiga_over_hand_bwd": num(c.tiga_over_hand_bwd(), 4),
                    "check_fwd": check_json(&c.check_fwd), "check_bwd": check_json(&c.check_bwd),
                    "peer_case": c.peer_case,
                    "peers": if c.peer_case.is_some() { Value::Object(peers) } else { json!({"missing": "peers.py has no such case"}) },
                });
                match &c.tigac {
                    Some(Ok((f, b))) => {
                        o["tigac_run_ms_median"] = json!(f);
                        o["tigac_vjp_ms_median"] = json!(b);
                    }
                    Some(Err(why)) => o["tigac_missing"] = json!(why),
                    None => {}
                }
                if let Some(why) = &c.hand_bwd_absent {
                    o["hand_bwd_absent"] = json!(why);
                }
                if let Some(why) = &c.absent {
                    o["absent"] = json!(why);
                }
                o
            })
            .collect();
        let scaling = self.scaling.as_ref().map(|s| {
            let base = s.rows.iter().find(|r| r.threads == 1);
            let speedup = |b: Option<f64>, t: Option<f64>| num(b.zip(t).map(|(b, t)| b / t), 3);
            let rows: Vec<Value> = s
                .rows
                .iter()
                .map(|r| {
                    json!({
                        "threads": r.threads, "fwd_ms": num(Some(r.fwd_ms), 3), "bwd_ms": num(Some(r.bwd_ms), 3),
                        "aot_fwd_ms": num(r.aot_fwd_ms, 3), "aot_bwd_ms": num(r.aot_bwd_ms, 3),
                        "hand_fwd_ms": num(Some(r.hand_fwd_ms), 3),
                        "fwd_speedup": speedup(base.map(|b| b.fwd_ms), Some(r.fwd_ms)),
                        "bwd_speedup": speedup(base.map(|b| b.bwd_ms), Some(r.bwd_ms)),
                        "aot_fwd_speedup": speedup(base.and_then(|b| b.aot_fwd_ms), r.aot_fwd_ms),
                        "aot_bwd_speedup": speedup(base.and_then(|b| b.aot_bwd_ms), r.aot_bwd_ms),
                        "hand_fwd_speedup": speedup(base.map(|b| b.hand_fwd_ms), Some(r.hand_fwd_ms)),
                    })
                })
                .collect();
            json!({
                "case": s.case, "F": s.f, "rounds": s.rounds, "repeat_per_round": s.repeat,
                "timing": "thread counts take turns, once per round; each figure is the median over the rounds of each round's median",
                "runs": rows,
            })
        });
        json!({
            "machine": {
                "threads": m.threads, "cpus": m.cpus, "stream_copy_gbs": num(Some(m.stream_copy_gbs), 3),
                "stream_copy_median_gbs": num(Some(m.stream_copy_median_gbs), 3),
                "stream_copy_mib": m.stream_mib, "hand_isa": m.hand_isa, "load_avg_at_start": m.load_avg,
            },
            "quick": m.quick,
            "repeat": m.repeat,
            "timing": "median of the repeats after one warm-up call; backward = gradient of out.sum() w.r.t. the source field (Kernel::grad)",
            "cases": cases,
            "scaling": scaling,
            "notes": self.notes,
        })
    }

    /// Writes the JSON atomically (see [`write_atomic`]).
    pub fn write_json(&self, path: &Path) -> Result<(), String> {
        let text = serde_json::to_string_pretty(&self.to_json()).map_err(|e| e.to_string())?;
        write_atomic(path, &format!("{text}\n"))
    }

    pub fn table(&self) -> String {
        let m = &self.machine;
        let f = |v: Option<f64>, d: usize| v.map_or("-".to_string(), |x| format!("{x:.d$}"));
        let mut s = String::new();
        s.push_str(&format!(
            "machine: {} threads ({} CPUs), STREAM copy {:.1} GB/s (best of 5; median {:.1}; {} MiB), hand-written loops: {}{}\n\n",
            m.threads,
            m.cpus,
            m.stream_copy_gbs,
            m.stream_copy_median_gbs,
            m.stream_mib,
            m.hand_isa,
            if m.quick { ", --quick (graphs 16x smaller)" } else { "" },
        ));
        s.push_str(&format!(
            "{:<18} {:>4} {:>8} {:>9} {:>9} {:>9} {:>5} {:>8} {:>6} {:>6} {:>6} {:>9} {:>9} {:>6} {:>6} {:>8}\n",
            "case",
            "F",
            "nodes",
            "edges",
            "fwd ms",
            "bwd ms",
            "b/f",
            "Medge/s",
            "GB/s",
            "%STRM",
            "jit ms",
            "hand fwd",
            "hand bwd",
            "t/h f",
            "t/h b",
            "check"
        ));
        for c in &self.cases {
            let check = c.check_fwd.as_ref().map_or("-".to_string(), |k| {
                let d = k.max_abs.max(c.check_bwd.as_ref().map_or(0.0, |b| b.max_abs));
                if d == 0.0 {
                    "exact".to_string()
                } else {
                    format!("{d:.0e}")
                }
            });
            s.push_str(&format!(
                "{:<18} {:>4} {:>8} {:>9} {:>9} {:>9} {:>5} {:>8} {:>6} {:>6} {:>6} {:>9} {:>9} {:>6} {:>6} {:>8}\n",
                if c.backend == "rust-aot" { format!("{} [aot]", c.case) } else { c.case.clone() },
                c.f,
                c.nodes,
                c.edges,
                if c.absent.is_some() { "absent".to_string() } else { f(c.fwd_ms, 2) },
                if c.absent.is_some() { "absent".to_string() } else { f(c.bwd_ms, 2) },
                f(c.bwd_over_fwd(), 2),
                f(c.edges_per_s().map(|e| e / 1e6), 0),
                f(c.gbs(), 1),
                f(c.gbs().map(|g| 100.0 * g / m.stream_copy_gbs), 0),
                f(c.compile_ms, 2),
                f(c.hand_fwd_ms, 2),
                f(c.hand_bwd_ms, 2),
                f(c.tiga_over_hand(), 2),
                f(c.tiga_over_hand_bwd(), 2),
                check,
            ));
        }
        s.push_str(
            "\n(t/h f, t/h b: tiga time / hand-written time, forward and backward; check: max |hand - tiga| over both passes)\n",
        );
        for c in &self.cases {
            if let Some(why) = &c.absent {
                s.push_str(&format!(
                    "absent: {} — {why}; hand-written: fwd {} ms ({} GB/s), bwd {} ms\n",
                    c.case,
                    f(c.hand_fwd_ms, 2),
                    f(c.hand_gbs(), 1),
                    f(c.hand_bwd_ms, 2)
                ));
            }
        }
        // Peers: a row per timed peer, the missing ones grouped by reason.
        let mut rows = String::new();
        let mut missing: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for c in &self.cases {
            for (peer, r) in &c.peers {
                match r {
                    Ok(p) => {
                        let (rf, rb) = c.tiga_over_peer(peer);
                        rows.push_str(&format!(
                            "{:<18} {:>4} {:<13} {:>10} {:>10} {:<17} {:>10} {:>10}\n",
                            c.case,
                            c.f,
                            peer,
                            f(p.fwd_ms, 1),
                            f(p.bwd_ms, 1),
                            p.bwd_pass.clone().unwrap_or_default(),
                            f(rf, 3),
                            f(rb, 3)
                        ));
                    }
                    Err(why) => missing.entry(why.clone()).or_default().push(format!("{}/{}", c.case, peer)),
                }
            }
        }
        if !rows.is_empty() {
            s.push_str(&format!(
                "\n{:<18} {:>4} {:<13} {:>10} {:>10} {:<17} {:>10} {:>10}\n{rows}",
                "case", "F", "peer", "fwd ms", "bwd ms", "bwd pass", "tiga/peer f", "tiga/peer b"
            ));
            s.push_str("(a peer's forward+backward is compared with tiga's fwd + bwd)\n");
        }
        if !missing.is_empty() {
            s.push('\n');
            for (why, who) in &missing {
                let peers: std::collections::BTreeSet<&str> = who.iter().filter_map(|w| w.split('/').nth(1)).collect();
                s.push_str(&format!(
                    "peers missing ({}): {why} [{} case/peer pairs]\n",
                    peers.into_iter().collect::<Vec<_>>().join(", "),
                    who.len()
                ));
            }
        }
        if let Some(sc) = &self.scaling {
            let base = sc.rows.iter().find(|r| r.threads == 1);
            let x = |b: Option<f64>, t: Option<f64>| f(b.zip(t).map(|(b, t)| b / t), 2);
            s.push_str(&format!(
                "\nthread scaling, {} F={} (thread counts in turn over {} rounds of {} calls; medians):\n",
                sc.case, sc.f, sc.rounds, sc.repeat
            ));
            for r in &sc.rows {
                let aot = match (r.aot_fwd_ms, r.aot_bwd_ms) {
                    (Some(af), Some(ab)) => format!(
                        "; aot fwd {af:.2} ms (x{}), bwd {ab:.2} ms (x{})",
                        x(base.and_then(|b| b.aot_fwd_ms), Some(af)),
                        x(base.and_then(|b| b.aot_bwd_ms), Some(ab))
                    ),
                    _ => String::new(),
                };
                s.push_str(&format!(
                    "  {} thread(s): cranelift fwd {:.2} ms (x{}), bwd {:.2} ms (x{}){aot}; hand fwd {:.2} ms (x{})\n",
                    r.threads,
                    r.fwd_ms,
                    x(base.map(|b| b.fwd_ms), Some(r.fwd_ms)),
                    r.bwd_ms,
                    x(base.map(|b| b.bwd_ms), Some(r.bwd_ms)),
                    r.hand_fwd_ms,
                    x(base.map(|b| b.hand_fwd_ms), Some(r.hand_fwd_ms)),
                ));
            }
        }
        for n in &self.notes {
            s.push_str(&format!("note: {n}\n"));
        }
        s
    }
}

/// Writes `text` next to `path`, syncs it and renames it over `path`, so a
/// reader sees the old file or the new one, never half of one.
pub fn write_atomic(path: &Path, text: &str) -> Result<(), String> {
    use std::io::Write as _;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "bench".into());
    // The default outputs live under target/bench/, which a fresh checkout lacks.
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let io = |e: std::io::Error| format!("writing {}: {e}", path.display());
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(e)
    })
}
