//! `mpirun -n R tigac run` (a tigac built with `--features mpi`): rank 0
//! writes the bytes one process writes, from an edge list and from a
//! `.gfg` (one hop deep and two), contiguous and METIS; and the job refuses ranks that opened
//! different graphs or kernels, naming what differs, without hanging.
#![cfg(feature = "mpi")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn tigac() -> &'static str {
    env!("CARGO_BIN_EXE_tigac")
}

fn mpirun(n: usize) -> Command {
    let mut c = Command::new("mpirun");
    c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
        .args(["-n", &n.to_string()]);
    c
}

fn kernels() -> String {
    format!("{}/../examples/kernels/gnn.rs", env!("CARGO_MANIFEST_DIR"))
}

fn ok(o: &Output, what: &str) {
    assert!(o.status.success(), "{what}: {}\n{}", String::from_utf8_lossy(&o.stderr), String::from_utf8_lossy(&o.stdout));
}

/// A random graph of `n` nodes with isolated nodes and a self loop, and
/// fields for GcnNorm (h [n,8], cs [n], cd [n], w [e]).
fn inputs(dir: &Path, n: usize, e: usize) -> (PathBuf, Vec<String>) {
    let mut s: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut text = String::new();
    for _ in 0..e {
        text.push_str(&format!("{} {}\n", next() % n as u64, next() % (n as u64 - 3)));
    }
    text.push_str("0 0\n");
    let graph = dir.join("g.txt");
    std::fs::write(&graph, text).expect("graph");
    let mut uni = |len: usize| -> Vec<f32> { (0..len).map(|_| (next() % 1000) as f32 / 1000.0 - 0.5).collect() };
    let save = |name: &str, shape: Vec<usize>, data: Vec<f32>| -> String {
        let p = dir.join(format!("{name}.npy"));
        let t = tiga::Tensor::from_f32(shape, data).expect("tensor");
        tiga::write_npy(&p, &t.view()).expect("npy");
        p.display().to_string()
    };
    let h = save("h", vec![n, 8], uni(n * 8));
    let cs = save("cs", vec![n], uni(n));
    let cd = save("cd", vec![n], uni(n));
    let w = save("w", vec![e + 1], uni(e + 1));
    let args = vec![
        "--src".into(),
        format!("h={h}"),
        "--src".into(),
        format!("cs={cs}"),
        "--dst".into(),
        format!("cd={cd}"),
        "--edge".into(),
        format!("w={w}"),
        "--num-nodes".into(),
        n.to_string(),
    ];
    (graph, args)
}

fn run_args(graph: &Path, fields: &[String], out: &Path, grads: &Path) -> Vec<String> {
    let mut a: Vec<String> = vec!["run".into(), kernels(), "--kernel".into(), "GcnNorm".into(), "--graph".into()];
    a.push(graph.display().to_string());
    a.extend(fields.iter().cloned());
    a.extend(["--out".into(), out.display().to_string(), "--grads".into(), grads.display().to_string()]);
    a
}

/// The gradient files in `got` equal those in `want` to 1e-6 of the largest.
fn grads_close(got: &Path, want: &Path, what: &str) {
    for g in ["src.h", "src.cs", "dst.cd", "edge.w"] {
        let a = npy_f32(&got.join(format!("{g}.npy")));
        let b = npy_f32(&want.join(format!("{g}.npy")));
        assert_eq!(a.len(), b.len(), "{what}: gradient {g}");
        let scale = b.iter().fold(1.0f32, |m, x| m.max(x.abs()));
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!((x - y).abs() <= 1e-6 * scale, "{what}: gradient {g}[{i}]: {x} vs {y}");
        }
    }
}

fn npy_f32(p: &Path) -> Vec<f32> {
    tiga::read_npy(p).expect("npy").as_f32().expect("f32").to_vec()
}

#[test]
fn sharded_tigac_run_writes_the_single_process_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (graph, fields) = inputs(dir.path(), 300, 2000);
    let one_out = dir.path().join("one.npy");
    let one_grads = dir.path().join("one-grads");
    let o = Command::new(tigac()).args(run_args(&graph, &fields, &one_out, &one_grads)).output().expect("tigac");
    ok(&o, "one process");
    let mut cases: Vec<(usize, &str)> = vec![(2, "contiguous"), (3, "balanced"), (4, "contiguous")];
    if cfg!(feature = "metis") {
        cases.push((2, "metis"));
        cases.push((4, "metis"));
    }
    for (n, partition) in cases {
        let out = dir.path().join(format!("out-{n}-{partition}.npy"));
        let grads = dir.path().join(format!("grads-{n}-{partition}"));
        let mut args = run_args(&graph, &fields, &out, &grads);
        args.extend(["--partition".into(), partition.into()]);
        let o = mpirun(n).arg(tigac()).args(&args).output().expect("mpirun");
        ok(&o, &format!("{n} ranks, {partition}"));
        assert_eq!(
            std::fs::read(&out).expect("out"),
            std::fs::read(&one_out).expect("one"),
            "{n} ranks, {partition}: output bytes"
        );
        grads_close(&grads, &one_grads, &format!("{n} ranks, {partition}"));
    }
    // From a .gfg (each rank reads its rows), with --timing's per-rank figures.
    let gfg = dir.path().join("g.gfg");
    ok(
        &Command::new(tigac())
            .args(["convert", graph.to_str().expect("path"), gfg.to_str().expect("path"), "--num-nodes", "300"])
            .output()
            .expect("convert"),
        "convert",
    );
    let out = dir.path().join("out-gfg.npy");
    let grads = dir.path().join("grads-gfg");
    let mut args = run_args(&gfg, &fields, &out, &grads);
    let at = args.iter().position(|a| a == "--num-nodes").expect("flag");
    args.drain(at..at + 2);
    args.push("--timing".into());
    if cfg!(feature = "metis") {
        let mut m = args.clone();
        let out_m = dir.path().join("out-gfg-metis.npy");
        let at = m.iter().position(|a| a == "--out").expect("flag");
        m[at + 1] = out_m.display().to_string();
        let gat = m.iter().position(|a| a == "--grads").expect("flag");
        m[gat + 1] = dir.path().join("grads-gfg-metis").display().to_string();
        m.extend(["--partition".into(), "metis".into()]);
        let o = mpirun(3).arg(tigac()).args(&m).output().expect("mpirun");
        ok(&o, "3 ranks from a .gfg, METIS");
        assert_eq!(std::fs::read(&out_m).expect("out"), std::fs::read(&one_out).expect("one"), "from a .gfg, METIS");
    }
    // A halo two hops deep, read from the .gfg: each rank reads its rows,
    // then its first ghosts' rows.
    let mut deep = args.clone();
    let out_d = dir.path().join("out-gfg-deep.npy");
    let at = deep.iter().position(|a| a == "--out").expect("flag");
    deep[at + 1] = out_d.display().to_string();
    let gat = deep.iter().position(|a| a == "--grads").expect("flag");
    deep[gat + 1] = dir.path().join("grads-gfg-deep").display().to_string();
    deep.extend(["--halo-depth".into(), "2".into()]);
    let o = mpirun(3).arg(tigac()).args(&deep).output().expect("mpirun");
    ok(&o, "3 ranks from a .gfg, halo depth 2");
    assert_eq!(std::fs::read(&out_d).expect("out"), std::fs::read(&one_out).expect("one"), "from a .gfg, halo depth 2");
    // A .gfg written in a node order, sharded in the caller's numbering.
    let rcm = dir.path().join("g-rcm.gfg");
    ok(
        &Command::new(tigac())
            .args([
                "convert",
                graph.to_str().expect("path"),
                rcm.to_str().expect("path"),
                "--num-nodes",
                "300",
                "--renumber",
                "rcm",
            ])
            .output()
            .expect("convert"),
        "convert --renumber rcm",
    );
    let mut renumbered = deep.clone();
    let gat = renumbered.iter().position(|a| a == "--graph").expect("flag");
    renumbered[gat + 1] = rcm.display().to_string();
    let out_r = dir.path().join("out-gfg-rcm.npy");
    let at = renumbered.iter().position(|a| a == "--out").expect("flag");
    renumbered[at + 1] = out_r.display().to_string();
    let gat = renumbered.iter().position(|a| a == "--grads").expect("flag");
    renumbered[gat + 1] = dir.path().join("grads-gfg-rcm").display().to_string();
    let o = mpirun(3).arg(tigac()).args(&renumbered).output().expect("mpirun");
    ok(&o, "3 ranks from a renumbered .gfg, halo depth 2");
    assert_eq!(std::fs::read(&out_r).expect("out"), std::fs::read(&one_out).expect("one"), "from a renumbered .gfg");
    // Each rank's rows paged from a file of its own, a deep halo too.
    let spill = dir.path().join("spill");
    std::fs::create_dir_all(&spill).expect("spill dir");
    let mut paged = renumbered.clone();
    let out_p = dir.path().join("out-gfg-paged.npy");
    let at = paged.iter().position(|a| a == "--out").expect("flag");
    paged[at + 1] = out_p.display().to_string();
    let gat = paged.iter().position(|a| a == "--grads").expect("flag");
    let grads_p = dir.path().join("grads-gfg-paged");
    paged[gat + 1] = grads_p.display().to_string();
    paged.extend(["--page-rows".into(), "7".into(), "--prefetch".into(), "1".into()]);
    let o = mpirun(3).env("TIGA_SPILL_DIR", &spill).arg(tigac()).args(&paged).output().expect("mpirun");
    ok(&o, "3 ranks, rows paged inside each");
    assert_eq!(std::fs::read(&out_p).expect("out"), std::fs::read(&one_out).expect("one"), "rows paged inside each rank");
    grads_close(&grads_p, &one_grads, "rows paged inside each rank");
    assert_eq!(std::fs::read_dir(&spill).expect("spill").count(), 0, "each rank removed its local file");
    let o = mpirun(2).arg(tigac()).args(&args).output().expect("mpirun");
    ok(&o, "2 ranks from a .gfg");
    assert_eq!(std::fs::read(&out).expect("out"), std::fs::read(&one_out).expect("one"), "from a .gfg: output bytes");
    let line = String::from_utf8_lossy(&o.stdout);
    let json: serde_json::Value = serde_json::from_str(line.trim()).expect("one JSON line");
    assert_eq!(json["ranks"], 2);
    assert_eq!(json["ghost_rows"].as_array().map(|a| a.len()), Some(2), "{json}");
    assert_eq!(json["exchange_ms_median"].as_array().map(|a| a.len()), Some(2), "{json}");
}

#[test]
fn ranks_that_opened_different_graphs_or_kernels_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (graph, fields) = inputs(dir.path(), 100, 500);
    let (other, _) = {
        let d2 = dir.path().join("other");
        std::fs::create_dir_all(&d2).expect("dir");
        inputs(&d2, 100, 400)
    };
    let out = dir.path().join("o.npy");
    let grads = dir.path().join("gr");
    let a = run_args(&graph, &fields, &out, &grads);
    let b = run_args(&other, &fields, &out, &grads);
    let t = Instant::now();
    let o = mpirun(1).arg(tigac()).args(&a).arg(":").args(["-n", "1", tigac()]).args(&b).output().expect("mpirun");
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("different graphs") && err.contains("rank 1"), "{err}");
    // Different kernels on one graph.
    let mut c = a.clone();
    let at = c.iter().position(|x| x == "GcnNorm").expect("kernel");
    c[at] = "GatAttention".into();
    let o = mpirun(1).arg(tigac()).args(&a).arg(":").args(["-n", "1", tigac()]).args(&c).output().expect("mpirun");
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("different kernel") || err.contains("GatAttention"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(120));
}

/// The sharded run takes its schedule where the single-process run does
/// (the `TIGA_*` environment, then the flags): a variable that does not
/// parse fails both, naming it, and a valid one leaves the bytes alone.
#[test]
fn sharded_tigac_run_reads_the_schedule_from_the_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (graph, fields) = inputs(dir.path(), 100, 500);
    let one = dir.path().join("one.npy");
    let o = Command::new(tigac()).args(run_args(&graph, &fields, &one, &dir.path().join("g1"))).output().expect("tigac");
    ok(&o, "one process");
    let out = dir.path().join("o.npy");
    let args = run_args(&graph, &fields, &out, &dir.path().join("g2"));
    let o = mpirun(2).arg(tigac()).args(&args).env("TIGA_GRAPH_RAM_BUDGET", "lots").output().expect("mpirun");
    assert!(!o.status.success(), "a bad TIGA_GRAPH_RAM_BUDGET was ignored");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("TIGA_GRAPH_RAM_BUDGET"), "{err}");
    assert!(!out.exists());
    let o = mpirun(2).arg(tigac()).args(&args).env("TIGA_GRAPH_RAM_BUDGET", "1073741824").output().expect("mpirun");
    ok(&o, "2 ranks with a RAM budget");
    assert_eq!(std::fs::read(&out).expect("out"), std::fs::read(&one).expect("one"));
}

/// `mpirun -n R tigac sample`: every rank samples the centres it owns, and
/// rank 0 writes the bytes one process writes, from an edge list and from
/// its `.gfg`, weighted and not.
#[test]
fn sharded_tigac_sample_writes_the_single_process_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (graph, _) = inputs(dir.path(), 400, 5000);
    let gfg = dir.path().join("g.gfg");
    let o = Command::new(tigac()).args(["convert", "--num-nodes", "400"]).arg(&graph).arg(&gfg).output().expect("convert");
    ok(&o, "convert");
    let seeds = dir.path().join("seeds.npy");
    tiga::runtime::write_npy_ids(&seeds, &[0, 17, 399, 250, 17]).expect("seeds");
    let weights = dir.path().join("w.npy");
    let w: Vec<f32> = (0..5001).map(|e| (e % 4) as f32).collect();
    tiga::write_npy(&weights, &tiga::Tensor::from_f32(vec![5001], w).expect("w").view()).expect("npy");
    let files =
        ["nodes.npy", "hop0.src.npy", "hop0.dst.npy", "hop0.edge_ids.npy", "hop1.src.npy", "hop1.dst.npy", "hop1.edge_ids.npy"];
    for g in [&graph, &gfg] {
        for weighted in [false, true] {
            let mut args: Vec<String> = vec!["sample".into(), "--graph".into(), g.display().to_string()];
            if g == &graph {
                args.extend(["--num-nodes".into(), "400".into()]);
            }
            args.extend([
                "--seeds".into(),
                seeds.display().to_string(),
                "--fanout".into(),
                "5,3".into(),
                "--seed".into(),
                "3".into(),
            ]);
            if weighted {
                args.extend(["--weight".into(), weights.display().to_string()]);
            }
            let one = dir.path().join("one");
            let o = Command::new(tigac()).args(&args).arg("--out").arg(&one).output().expect("tigac");
            ok(&o, "one process");
            for ranks in [2, 3] {
                let many = dir.path().join(format!("many{ranks}"));
                let o = mpirun(ranks).arg(tigac()).args(&args).arg("--out").arg(&many).output().expect("mpirun");
                ok(&o, &format!("{ranks} ranks"));
                for f in files {
                    assert_eq!(
                        std::fs::read(one.join(f)).expect("one"),
                        std::fs::read(many.join(f)).expect("many"),
                        "{f}, {ranks} ranks"
                    );
                }
            }
        }
    }
}
