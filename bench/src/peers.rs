//! The peers: the tools a user would pick instead of tiga (SciPy,
//! `torch.sparse`, PyG-style gather/scatter), timed by
//! `bench/peers/peers.py` (the benchmark's own script, found next to this
//! crate's manifest unless `--peers-script` names another) on the very
//! graph this run built.
//!
//! The graph is written in peers.py's layout (`rowptr.npy` int64, `col.npy`
//! int32, `x.npy` f32, `a_src.npy`/`a_dst.npy` f32) to a temporary directory
//! and the script's JSON lines are parsed back. Nothing is installed: when
//! python3 or a package is missing, each affected peer is reported as missing
//! with the reason, so a table without peers says why.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use tiga_runtime::{Graph, TensorView};
use tiga_storage::write_npy;

/// The peers peers.py knows, and the cases each of them offers.
pub const PEERS: [(&str, &[&str]); 3] = [
    ("scipy", &["sum", "scaled", "mean"]),
    ("torch_sparse", &["sum", "scaled", "mean"]),
    ("pyg_scatter", &["sum", "scaled", "mean", "max", "gat"]),
];

/// One peer's times for one case.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PeerTimes {
    pub fwd_ms: Option<f64>,
    pub bwd_ms: Option<f64>,
    /// peers.py times SciPy's backward alone ("backward") but the torch
    /// peers' as one autograd step ("forward+backward").
    pub bwd_pass: Option<String>,
    /// Why peers.py stopped after timing some of this peer's passes (a
    /// process killed for memory mid-case).
    pub stopped: Option<String>,
}

/// A peer's times, or why there are none.
pub type PeerResult = Result<PeerTimes, String>;

/// Which peers can run here, by name; `Err` holds why one cannot.
#[derive(Debug, Clone)]
pub struct Availability {
    pub script: PathBuf,
    pub peers: BTreeMap<&'static str, Result<(), String>>,
}

fn python_imports(module: &str) -> Result<(), String> {
    match Command::new("python3").arg("-c").arg(format!("import {module}")).output() {
        Err(e) => Err(format!("python3 could not be started ({e})")),
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let last = err.lines().last().unwrap_or("").trim().to_string();
            Err(format!("python3 cannot `import {module}`: {last}"))
        }
    }
}

/// Asks python3 which packages import (installing nothing).
pub fn detect(script: &Path) -> Availability {
    let mut peers = BTreeMap::new();
    // Where a missing package's reason points: the script's requirements.
    let requirements = script.with_file_name("requirements.txt");
    let install = |e: String| {
        if requirements.exists() {
            format!("{e} (not installed by the benchmark: python3 -m pip install -r {})", requirements.display())
        } else {
            format!("{e} (not installed by the benchmark)")
        }
    };
    let base = if !script.exists() {
        Err(format!("{} not found (--peers-script names another peers.py, --no-peers runs none)", script.display()))
    } else {
        python_imports("numpy").map_err(|e| install(format!("{e}; peers.py needs numpy")))
    };
    let scipy = base.clone().and_then(|_| python_imports("scipy.sparse").map_err(install));
    let torch = base.clone().and_then(|_| python_imports("torch").map_err(install));
    peers.insert("scipy", scipy);
    peers.insert("torch_sparse", torch.clone());
    peers.insert("pyg_scatter", torch);
    Availability { script: script.to_path_buf(), peers }
}

impl Availability {
    pub fn any(&self) -> bool {
        self.peers.values().any(|r| r.is_ok())
    }
}

/// A `.npy` (version 1.0) of a 1-D integer array: `descr` is `<i8` or `<i4`.
fn write_int_npy<const N: usize>(
    path: &Path,
    descr: &str,
    len: usize,
    items: impl Iterator<Item = [u8; N]>,
) -> std::io::Result<()> {
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({len},), }}");
    let unpadded = 6 + 2 + 2 + dict.len() + 1;
    let pad = (64 - unpadded % 64) % 64;
    let header = format!("{dict}{}\n", " ".repeat(pad));
    let len16 = u16::try_from(header.len()).map_err(|_| std::io::Error::other("npy header too long"))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    w.write_all(b"\x93NUMPY\x01\x00")?;
    w.write_all(&len16.to_le_bytes())?;
    w.write_all(header.as_bytes())?;
    for b in items {
        w.write_all(&b)?;
    }
    w.flush()
}

/// A temporary directory, removed when dropped.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> std::io::Result<TempDir> {
        let p = std::env::temp_dir().join(format!("tiga-bench-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&p)?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A temporary directory holding the graph and fields in peers.py's layout
/// (removed when dropped).
pub fn graph_dir(tag: &str, g: &Graph, x: &[f32], f: usize, attention: Option<(&[f32], &[f32])>) -> Result<TempDir, String> {
    let dir = TempDir::new(tag).map_err(|e| format!("peers: temporary directory: {e}"))?;
    write_graph_dir(&dir.0, g, x, f, attention)?;
    Ok(dir)
}

/// Writes the graph and fields in peers.py's layout.
fn write_graph_dir(dir: &Path, g: &Graph, x: &[f32], f: usize, attention: Option<(&[f32], &[f32])>) -> Result<(), String> {
    let io = |e: std::io::Error| format!("writing the peers' graph to {}: {e}", dir.display());
    if g.num_src() > i32::MAX as usize {
        return Err("col.npy is int32: more than 2^31 source nodes".into());
    }
    write_int_npy(&dir.join("rowptr.npy"), "<i8", g.offsets().len(), g.offsets().iter().map(|&o| (o as i64).to_le_bytes()))
        .map_err(io)?;
    write_int_npy(&dir.join("col.npy"), "<i4", g.cols().len(), g.cols().iter().map(|&c| (c as i32).to_le_bytes())).map_err(io)?;
    let shape = if f == 1 { vec![g.num_src()] } else { vec![g.num_src(), f] };
    let view = TensorView::from_slice_f32(shape, x).map_err(|e| e.to_string())?;
    write_npy(dir.join("x.npy"), &view).map_err(|e| e.to_string())?;
    if let Some((a_src, a_dst)) = attention {
        write_npy(dir.join("a_src.npy"), &TensorView::from(a_src)).map_err(|e| e.to_string())?;
        write_npy(dir.join("a_dst.npy"), &TensorView::from(a_dst)).map_err(|e| e.to_string())?;
    }
    if g.num_src() != g.num_dst() {
        std::fs::write(dir.join("num_src.txt"), g.num_src().to_string()).map_err(io)?;
    }
    Ok(())
}

/// Runs peers.py on `dir` for these peers.py cases; returns, per case and
/// peer, the times or why there are none.
pub fn run(
    avail: &Availability,
    dir: &Path,
    cases: &[&str],
    threads: usize,
    repeat: usize,
) -> BTreeMap<(String, String), PeerResult> {
    let mut out = BTreeMap::new();
    let runnable: Vec<&str> = PEERS
        .iter()
        .filter(|(p, offered)| matches!(avail.peers.get(p), Some(Ok(()))) && cases.iter().any(|c| offered.contains(c)))
        .map(|(p, _)| *p)
        .collect();
    for (peer, offered) in PEERS {
        for case in cases {
            let why = match avail.peers.get(peer) {
                Some(Err(e)) => Some(e.clone()),
                None => Some("unknown peer".to_string()),
                Some(Ok(())) if !offered.contains(case) => Some(format!("peers.py has no `{case}` for {peer}")),
                Some(Ok(())) => None,
            };
            if let Some(why) = why {
                out.insert(((*case).to_string(), peer.to_string()), Err(why));
            }
        }
    }
    if runnable.is_empty() {
        return out;
    }
    let output = Command::new("python3")
        .arg(&avail.script)
        .arg(dir)
        .args(["--threads", &threads.to_string()])
        .args(["--cases", &cases.join(",")])
        .args(["--peers", &runnable.join(",")])
        .args(["--repeat", &repeat.to_string()])
        .output();
    let output = match output {
        Ok(o) => o,
        Err(e) => {
            for peer in &runnable {
                for case in cases {
                    out.insert(((*case).to_string(), peer.to_string()), Err(format!("python3 failed to start: {e}")));
                }
            }
            return out;
        }
    };
    let mut found: BTreeMap<(String, String), PeerTimes> = BTreeMap::new();
    let mut skipped: BTreeMap<String, String> = BTreeMap::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let peer = v["peer"].as_str().unwrap_or("").to_string();
        if let Some(why) = v["skipped"].as_str() {
            skipped.insert(peer, why.to_string());
            continue;
        }
        let (Some(case), Some(pass), Some(ms)) = (v["case"].as_str(), v["pass"].as_str(), v["median_ms"].as_f64()) else {
            continue;
        };
        let t = found.entry((case.to_string(), peer)).or_default();
        if pass == "forward" {
            t.fwd_ms = Some(ms);
        } else {
            t.bwd_ms = Some(ms);
            t.bwd_pass = Some(pass.to_string());
        }
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let tail = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string();
    for peer in &runnable {
        for case in cases {
            let key = ((*case).to_string(), peer.to_string());
            if out.contains_key(&key) {
                continue;
            }
            let r = match (found.remove(&key), skipped.get(*peer)) {
                (Some(mut t), _) => {
                    if !output.status.success() {
                        t.stopped = Some(format!("peers.py failed ({}): {tail}", output.status));
                    }
                    Ok(t)
                }
                (None, Some(why)) => Err(why.clone()),
                (None, None) if !output.status.success() => Err(format!("peers.py failed ({}): {tail}", output.status)),
                (None, None) => Err("peers.py printed no time for it".to_string()),
            };
            out.insert(key, r);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_npy_header_is_aligned_and_readable() {
        let dir = TempDir::new("npytest").expect("temp dir");
        let p = dir.0.join("a.npy");
        let vals: [i64; 3] = [0, 5, 1 << 40];
        write_int_npy(&p, "<i8", 3, vals.iter().map(|v| v.to_le_bytes())).expect("written");
        let bytes = std::fs::read(&p).expect("read back");
        assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
        let hlen = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0);
        let header = std::str::from_utf8(&bytes[10..10 + hlen]).expect("ascii");
        assert!(header.starts_with("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }"));
        assert!(header.ends_with('\n'));
        let data: Vec<i64> =
            bytes[10 + hlen..].chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
        assert_eq!(data, vals);
    }

    /// A stand-in for peers.py (plain python3, no numpy) that prints what
    /// the real one prints, to check the parsing end to end.
    #[test]
    fn parses_peers_py_lines() {
        if Command::new("python3").arg("-c").arg("pass").output().map_or(true, |o| !o.status.success()) {
            return; // no python3 here: nothing to parse
        }
        let dir = TempDir::new("fakepeers").expect("temp dir");
        let script = dir.0.join("fake_peers.py");
        std::fs::write(
            &script,
            r#"import json, sys
args = sys.argv[1:]
assert args[1:3] == ["--threads", "3"], args
assert args[3:5] == ["--cases", "sum,max"], args
assert args[5:7] == ["--peers", "scipy,pyg_scatter"], args
print("some noise")
print(json.dumps({"case": "sum", "peer": "scipy", "pass": "forward", "median_ms": 1.5, "min_ms": 1.0, "runs": 2, "threads": 3}))
print(json.dumps({"case": "sum", "peer": "scipy", "pass": "backward", "median_ms": 2.5, "min_ms": 2.0, "runs": 2, "threads": 3}))
print(json.dumps({"case": "max", "peer": "pyg_scatter", "pass": "forward", "median_ms": 10.0, "min_ms": 9.0, "runs": 2, "threads": 3}))
print(json.dumps({"case": "max", "peer": "pyg_scatter", "pass": "forward+backward", "median_ms": 30.0, "min_ms": 29.0, "runs": 2, "threads": 3}))
"#,
        )
        .expect("script written");
        let mut peers = BTreeMap::new();
        peers.insert("scipy", Ok(()));
        peers.insert("torch_sparse", Err("no torch".to_string()));
        peers.insert("pyg_scatter", Ok(()));
        let a = Availability { script, peers };
        let r = run(&a, &dir.0, &["sum", "max"], 3, 2);
        let get = |c: &str, p: &str| r.get(&(c.to_string(), p.to_string())).cloned().expect("an entry");
        assert_eq!(
            get("sum", "scipy"),
            Ok(PeerTimes { fwd_ms: Some(1.5), bwd_ms: Some(2.5), bwd_pass: Some("backward".into()), stopped: None })
        );
        assert!(get("max", "scipy").is_err_and(|e| e.contains("has no `max`")));
        assert_eq!(get("sum", "torch_sparse"), Err("no torch".into()));
        assert_eq!(
            get("max", "pyg_scatter"),
            Ok(PeerTimes { fwd_ms: Some(10.0), bwd_ms: Some(30.0), bwd_pass: Some("forward+backward".into()), stopped: None })
        );
        assert!(get("sum", "pyg_scatter").is_err_and(|e| e.contains("no time")));
    }

    #[test]
    fn missing_script_makes_every_peer_missing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = detect(&dir.path().join("missing").join("peers.py"));
        assert!(!a.any());
        let r = run(&a, Path::new("/tmp"), &["sum", "max"], 2, 1);
        assert_eq!(r.len(), 6);
        assert!(r.values().all(|v| v.as_ref().is_err_and(|e| e.contains("not found") || e.contains("has no"))));
    }
}
