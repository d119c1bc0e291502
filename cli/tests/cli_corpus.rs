//! `tigac` on the corpus of hostile files in `cli/tests/hostile/`: every
//! command that reads a file of that kind, on every file, ends by itself
//! within a time limit with exit code 0, 1 or 2 (a result, an error, a
//! usage error), never a signal or a panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::*;

/// How long one command may take before it counts as a hang.
const LIMIT: Duration = Duration::from_secs(60);

fn corpus() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("corpus folder")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e != "md"))
        .collect();
    files.sort();
    files
}

/// The commands that read `file`, by its kind.
fn commands(file: &str, gnn: &str) -> Vec<Vec<String>> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let run =
        |graph: &str, src: &str| s(&["run", gnn, "--kernel", "NeighborSum", "--graph", graph, "--src", src, "--out", "y.npy"]);
    if file.ends_with(".gfg") {
        vec![
            s(&["info", file]),
            run(file, "x=x.npy"),
            s(&["run", gnn, "--kernel", "NeighborSum", "--graph", file, "--src", "x=x.npy", "--out", "y.npy", "--grads", "g"]),
            s(&["explain", gnn, "--kernel", "NeighborSum", "--graph", file]),
        ]
    } else if file.ends_with(".npy") {
        vec![run("g.txt", &format!("x={file}"))]
    } else if file.ends_with(".txt") || file.ends_with(".mtx") {
        vec![
            run(file, "x=x.npy"),
            s(&["convert", file, "out.gfg", "--transpose"]),
            s(&["explain", gnn, "--kernel", "NeighborSum", "--graph", file]),
        ]
    } else {
        vec![
            s(&["explain", file]),
            s(&["compile", file, "-o", "out.tiga"]),
            s(&["run", file, "--kernel", "NeighborSum", "--graph", "g.txt", "--src", "x=x.npy", "--out", "y.npy"]),
        ]
    }
}

#[test]
fn every_hostile_file_ends_in_a_result_or_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    npy_f32(&d.join("x.npy"), &[4], &[1.0, 2.0, 3.0, 4.0]);
    std::fs::write(d.join("g.txt"), "0 1\n1 2\n2 3\n3 0\n").expect("write");
    let gnn = gnn_path();
    let gnn = gnn.to_str().expect("utf8");
    let files = corpus();
    assert!(files.len() >= 40, "{} files", files.len());
    let mut ran = 0;
    for f in &files {
        // A copy in the work folder: no command may touch the corpus.
        let name = f.file_name().expect("name").to_string_lossy().into_owned();
        std::fs::copy(f, d.join(&name)).expect("copy");
        for args in commands(&name, gnn) {
            let start = Instant::now();
            let mut child = Command::new(env!("CARGO_BIN_EXE_tigac"))
                .current_dir(d)
                .args(&args)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn tigac");
            let status = loop {
                if let Some(s) = child.try_wait().expect("wait") {
                    break s;
                }
                if start.elapsed() > LIMIT {
                    let _ = child.kill();
                    panic!("tigac {args:?} ran past {LIMIT:?}");
                }
                std::thread::sleep(Duration::from_millis(10));
            };
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                use std::io::Read as _;
                let _ = e.read_to_string(&mut err);
            }
            assert!(
                matches!(status.code(), Some(0..=2)) && !err.contains("panicked"),
                "tigac {args:?} ended with {status:?}:\n{err}"
            );
            ran += 1;
        }
    }
    assert!(ran >= 100, "{ran} commands");
}
