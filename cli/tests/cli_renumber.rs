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
    // Converting it in such an order is refused before the build, and
    // nothing is written.
    fails_with(&tigac(d, &["convert", "b.mtx", "b.gfg", "--renumber", "cluster"]), &["--renumber cluster", "square graph"]);
    assert!(!d.join("b.gfg").exists(), "a refused conversion wrote its output");
}

/// `tigac convert --renumber` writes the graph in a node order; runs over
/// it (paged, two rows a page) write the bytes of the runs over the plain
/// conversion, forward and gradients: a max (winner scatter in the
/// caller's order), a kernel with destination and edge fields, and one
/// with a parameter (its gradient a sum over rows in the caller's order).
#[test]
fn graphs_written_in_a_node_order_run_with_the_plain_runs_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    setup(d);
    let gnn = gnn_path();
    let gnn = gnn.to_str().expect("utf8");
    let mut rng = Rng(5);
    let mut vec = |n: usize| -> Vec<f32> { (0..n).map(|_| rng.uniform() as f32 + 0.1).collect() };
    let edges = EDGES.lines().count();
    npy_f32(&d.join("cs.npy"), &[N], &vec(N));
    npy_f32(&d.join("cd.npy"), &[N], &vec(N));
    npy_f32(&d.join("w.npy"), &[edges], &vec(edges));
    npy_f32(&d.join("p.npy"), &[F], &vec(F));
    let kernels: [(&str, &[&str]); 3] = [
        ("MaxPool", &["--src", "h=h.npy"]),
        ("GcnNorm", &["--src", "h=h.npy", "--src", "cs=cs.npy", "--dst", "cd=cd.npy", "--edge", "w=w.npy"]),
        ("EdgeGate", &["--src", "h=h.npy", "--edge", "w=w.npy", "--param", "p=p.npy"]),
    ];
    let run = |graph: &str, kernel: &str, fields: &[&str], tag: &str, extra: &[&str]| {
        let out = format!("{kernel}.{tag}.npy");
        let grads = format!("{kernel}.{tag}.grads");
        let args = [
            &["run", gnn, "--kernel", kernel, "--graph", graph, "--out", &out, "--grads", &grads, "--page-rows", "2"][..],
            fields,
            extra,
        ]
        .concat();
        let o = tigac(d, &args);
        ok(&o);
        let mut files = vec![std::fs::read(d.join(&out)).expect("output")];
        let mut names: Vec<_> = std::fs::read_dir(d.join(&grads)).expect("grads").flatten().map(|e| e.path()).collect();
        names.sort();
        files.extend(names.iter().map(|p| std::fs::read(p).expect("gradient")));
        (files, names.len(), stdout(&o))
    };
    ok(&tigac(d, &["convert", "g.txt", "plain.gfg", "--transpose"]));
    for method in ["degree", "rcm", "cluster"] {
        let file = format!("{method}.gfg");
        let o = tigac(d, &["convert", "g.txt", &file, "--transpose", "--renumber", method]);
        ok(&o);
        assert!(stderr(&o).contains(&format!("in node order `{method}`")), "{}", stderr(&o));
        let info = tigac(d, &["info", &file]);
        ok(&info);
        assert!(stdout(&info).contains(&format!("node order: {method} (")), "{}", stdout(&info));
        assert!(stdout(&info).contains("format: gfg 3.0"), "{}", stdout(&info));
        for (kernel, fields) in kernels {
            let (plain, n, _) = run("plain.gfg", kernel, fields, "plain", &[]);
            let (got, m, timing) = run(&file, kernel, fields, method, &["--timing"]);
            assert!(n >= 1 && n == m, "{kernel}: {n} and {m} gradient files");
            assert_eq!(got, plain, "{method} {kernel}: output and gradient bytes");
            let v: serde_json::Value = serde_json::from_str(timing.trim()).expect("one JSON line");
            assert_eq!((v["renumber"].as_str(), v["renumber_stored"].as_bool()), (Some(method), Some(true)), "{v}");
        }
    }
    assert!(stdout(&tigac(d, &["info", "plain.gfg"])).contains("node order: none"));
    // Renumbering in memory over the budget is refused before the build
    // (10 edges and 10 nodes need 10 * 64 + 10 * 48 = 1120 bytes), and
    // nothing is written.
    let o = tigac(d, &["convert", "g.txt", "small.gfg", "--renumber", "degree", "--memory", "1K"]);
    fails_with(&o, &["--renumber degree", "about 1.1 KiB", "10 edges and 10 nodes", "--memory 1M"]);
    assert!(!d.join("small.gfg").exists(), "a refused conversion wrote its output");
    // A file in a node order says so in convert's summary, with the edge
    // ids it stores.
    let summary = stderr(&tigac(d, &["convert", "g.txt", "deg2.gfg", "--renumber", "degree"]));
    let stored = tiga_storage::GfgFile::open(d.join("deg2.gfg")).expect("open").has_edge_ids();
    assert_eq!(summary.contains("edge ids stored"), stored, "{summary}");
    // A file runs in its stored order: another method is refused by name.
    let base = ["run", gnn, "--kernel", "VecSum", "--graph", "degree.gfg", "--src", "h=h.npy", "--out", "o.npy"];
    fails_with(&tigac(d, &[&base[..], &["--renumber", "rcm"]].concat()), &["--renumber rcm", "node order `degree`"]);
    let o = tigac(d, &[&base[..], &["--renumber", "degree", "--timing"]].concat());
    ok(&o);
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON line");
    assert_eq!((v["renumber"].as_str(), v["renumber_ms"].as_f64()), (Some("degree"), Some(0.0)), "{v}");
    // Sampling reads a file in a node order in the caller's ids: the plain
    // file's sample, byte for byte.
    tiga_storage::write_npy_ids(d.join("seeds.npy"), &[0, 1]).expect("seeds");
    for (file, out) in [("plain.gfg", "s-plain"), ("degree.gfg", "s-degree")] {
        ok(&tigac(d, &["sample", "--graph", file, "--seeds", "seeds.npy", "--fanout", "2", "--out", out]));
    }
    for name in ["nodes.npy", "hop0.src.npy", "hop0.dst.npy", "hop0.edge_ids.npy"] {
        let read = |dir: &str| std::fs::read(d.join(dir).join(name)).expect("sample file");
        assert_eq!(read("s-plain"), read("s-degree"), "{name}");
    }
}
