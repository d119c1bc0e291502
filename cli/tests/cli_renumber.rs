//! End-to-end tests of `tigac run --renumber`: the built executable's
//! outputs and gradients under each renumbering hold the bytes of the
//! plain run's files, `--timing` reports `renumber_ms`, and what cannot be
//! renumbered is refused by name.

mod common;
use common::*;

/// A small square graph with a hub (node 0), a multi-edge and a self loop.
const EDGES: &str = "0 1\n0 2\n0 3\n0 4\n3 1\n2 2\n4 0\n1 0\n1 0\n3 4\n";
const N: usize = 5;
const F: usize = 3;

fn setup(d: &std::path::Path) {
    std::fs::write(d.join("g.txt"), EDGES).expect("write graph");
    let mut rng = Rng(11);
    let h: Vec<f32> = (0..N * F).map(|_| rng.uniform() as f32).collect();
    npy_f32(&d.join("h.npy"), &[N, F], &h);
}

fn run_args(gnn: &str, out: &str, grads: &str) -> Vec<String> {
    ["run", gnn, "--kernel", "MaxPool", "--graph", "g.txt", "--src", "h=h.npy", "--out", out, "--grads", grads]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

#[test]
fn renumbered_runs_write_the_plain_runs_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    setup(d);
    let gnn = gnn_path();
    let gnn = gnn.to_str().expect("utf8");
    ok(&tigac(d, &run_args(gnn, "plain.npy", "gplain")));
    let plain = std::fs::read(d.join("plain.npy")).expect("plain output");
    let plain_grad = std::fs::read(d.join("gplain/src.h.npy")).expect("plain gradient");
    for method in ["none", "degree", "rcm", "cluster"] {
        let out = format!("{method}.npy");
        let grads = format!("g{method}");
        let mut args = run_args(gnn, &out, &grads);
        args.extend(["--renumber", method, "--timing"].iter().map(|s| s.to_string()));
        let o = tigac(d, &args);
        ok(&o);
        assert_eq!(std::fs::read(d.join(&out)).expect("output"), plain, "{method}: output bytes");
        assert_eq!(std::fs::read(d.join(&grads).join("src.h.npy")).expect("gradient"), plain_grad, "{method}: gradient bytes");
        let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON line");
        match method {
            "none" => assert!(v.get("renumber_ms").is_none(), "{v}"),
            _ => {
                let ms = v["renumber_ms"].as_f64().unwrap_or(-1.0);
                assert!(ms >= 0.0, "{method}: renumber_ms {v}");
                assert_eq!(v["renumber"], method);
            }
        }
    }
}

#[test]
fn what_cannot_be_renumbered_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    setup(d);
    let gnn = gnn_path();
    let gnn = gnn.to_str().expect("utf8");
    let base = ["run", gnn, "--kernel", "VecSum", "--graph", "g.txt", "--src", "h=h.npy", "--out", "o.npy"];
    // A method that does not exist is a usage error (clap's exit 2).
    let o = tigac(d, &[&base[..], &["--renumber", "random"]].concat());
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("expected none, degree, rcm or cluster"), "{}", stderr(&o));
    // A bipartite graph (3 sources, 5 rows): RCM needs one node set.
    npy_f32(&d.join("h3.npy"), &[3, F], &[0.5; 3 * F]);
    std::fs::write(d.join("b.mtx"), "%%MatrixMarket matrix coordinate pattern general\n5 3 3\n1 1\n2 2\n5 3\n").expect("mtx");
    let bip = ["run", gnn, "--kernel", "VecSum", "--graph", "b.mtx", "--src", "h=h3.npy", "--out", "o.npy"];
    fails_with(&tigac(d, &[&bip[..], &["--renumber", "rcm"]].concat()), &["--renumber rcm", "square graph"]);
    ok(&tigac(d, &[&bip[..], &["--renumber", "degree"]].concat()));
}
