//! `tigac explain --ranks`: the partition report, checked against counts
//! made by hand on the 8-node ring (each node reads itself and both
//! neighbours), and its refusals.

use std::process::Command;

fn tigac(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tigac")).args(args).output().expect("tigac runs")
}

fn ring_file(dir: &std::path::Path) -> std::path::PathBuf {
    let mut text = String::new();
    for i in 0..8u32 {
        for j in [(i + 7) % 8, i, (i + 1) % 8] {
            text.push_str(&format!("{j} {i}\n"));
        }
    }
    let p = dir.join("ring.txt");
    std::fs::write(&p, text).expect("write");
    p
}

fn kernels() -> String {
    format!("{}/../examples/kernels/gnn.rs", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn explain_ranks_reports_rows_ghosts_bytes_and_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ring = ring_file(dir.path());
    let out = tigac(&[
        "explain",
        &kernels(),
        "--kernel",
        "VecSum",
        "--graph",
        ring.to_str().expect("path"),
        "--ranks",
        "2",
        "--width",
        "16",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    // Each rank: 4 rows, 12 edges, 2 ghosts (the neighbours across each
    // end), 2 rows sent; 2 × 64 bytes (16 f32) + one 16-byte header.
    let rows: Vec<Vec<u64>> = text
        .lines()
        .skip_while(|l| !l.contains("owned rows"))
        .skip(1)
        .take(2)
        .map(|l| l.split_whitespace().map(|x| x.parse().expect("number")).collect())
        .collect();
    assert_eq!(rows, vec![vec![0, 4, 12, 2, 2, 144, 144], vec![1, 4, 12, 2, 2, 144, 144]], "{text}");
    assert!(text.contains("edge cut: 4 of 24 edges"), "{text}");
    // Three ranks: 3, 3, 2 rows; every boundary cut both ways.
    let out = tigac(&["explain", &kernels(), "--kernel", "NeighborSum", "--graph", ring.to_str().expect("path"), "--ranks", "3"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("edge cut: 6 of 24 edges"), "{text}");
}

/// A `.gfg` stored in a node order is partitioned in the caller's
/// numbering: the same report as the file without an order.
#[test]
fn explain_ranks_of_a_renumbered_file_is_the_callers_partition() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ring = ring_file(dir.path());
    let report = |graph: &std::path::Path, partition: &str| {
        let g = graph.to_str().expect("path");
        let out = tigac(&["explain", &kernels(), "--kernel", "VecSum", "--graph", g, "--ranks", "3", "--partition", partition]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        text.lines().skip_while(|l| !l.starts_with("partition:")).collect::<Vec<_>>().join("\n")
    };
    let plain = dir.path().join("plain.gfg");
    let ok = |o: std::process::Output| assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    ok(tigac(&["convert", ring.to_str().expect("path"), plain.to_str().expect("path")]));
    for method in ["degree", "rcm", "cluster"] {
        let stored = dir.path().join(format!("{method}.gfg"));
        ok(tigac(&["convert", ring.to_str().expect("path"), stored.to_str().expect("path"), "--renumber", method]));
        for partition in ["contiguous", "balanced"] {
            let want = report(&plain, partition);
            assert!(want.contains("edge cut: 6 of 24 edges"), "{want}");
            assert_eq!(report(&stored, partition), want, "{method}, {partition}");
        }
    }
}

#[test]
fn explain_ranks_refusals() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ring = ring_file(dir.path());
    let out = tigac(&["explain", &kernels(), "--ranks", "2"]);
    assert!(!out.status.success());
    let out = tigac(&["explain", &kernels(), "--graph", ring.to_str().expect("path"), "--ranks", "0"]);
    assert!(!out.status.success());
    #[cfg(not(feature = "metis"))]
    {
        let out =
            tigac(&["explain", &kernels(), "--graph", ring.to_str().expect("path"), "--ranks", "2", "--partition", "metis"]);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("--features metis"));
    }
}

/// Sharding flags where no sharding happens are refused by name, before
/// anything runs or is written: one process (no mpirun) does not shard,
/// and `explain` only shards for `--ranks`.
#[test]
fn sharding_flags_without_a_sharded_run_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ring = ring_file(dir.path());
    let x = dir.path().join("x.npy");
    let t = tiga::Tensor::from_f32(vec![8], (0..8).map(|i| i as f32).collect()).expect("tensor");
    tiga::write_npy(&x, &t.view()).expect("write x");
    let out = dir.path().join("out.npy");
    let (ring, x_arg, out_s) = (ring.to_str().expect("path"), format!("x={}", x.display()), out.to_str().expect("path"));
    let base = ["run", &kernels(), "--kernel", "Smoothing", "--graph", ring, "--src", &x_arg, "--out", out_s];
    // The same call without the flags runs, so the refusals below are the flags'.
    let ok = tigac(&base);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    std::fs::remove_file(&out).expect("remove out");
    for (flags, named) in [
        (&["--partition", "metis"][..], "--partition metis"),
        (&["--partition", "balanced"][..], "--partition balanced"),
        (&["--halo-depth", "2"][..], "--halo-depth 2"),
    ] {
        let args: Vec<&str> = base.iter().copied().chain(flags.iter().copied()).collect();
        let o = tigac(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{flags:?}: {err}");
        assert!(err.contains(&format!("{named}: applies to a sharded run only")), "{flags:?}: {err}");
        assert!(!out.exists(), "{flags:?}: an output was written");
    }
    let o = tigac(&["explain", &kernels(), "--kernel", "Smoothing", "--partition", "balanced"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--partition balanced: says how --ranks R would shard"));
}
