//! `tigac run --device`: the CPU by default; a GPU asked of a tigac without
//! a CUDA runtime is refused with a message saying so, before any input is
//! read; a malformed device is a usage error.

use std::process::Command;

fn tigac(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tigac")).args(args).output().expect("tigac runs")
}

#[test]
fn device_cuda_without_a_runtime_is_refused_clearly() {
    let kernels = format!("{}/../examples/kernels/gnn.rs", env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("tempdir");
    let graph = dir.path().join("g.txt");
    std::fs::write(&graph, "0 1\n1 0\n").expect("graph");
    let out = dir.path().join("o.npy");
    for device in ["cuda", "cuda:1"] {
        let o = tigac(&[
            "run",
            &kernels,
            "--kernel",
            "NeighborSum",
            "--graph",
            graph.to_str().expect("path"),
            "--src",
            "x=/nonexistent/x.npy",
            "--out",
            out.to_str().expect("path"),
            "--device",
            device,
        ]);
        assert_eq!(o.status.code(), Some(1), "{device}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("no CUDA runtime") && !err.contains("nonexistent"), "{device}: {err}");
        assert!(!out.exists());
    }
    let o = tigac(&["run", &kernels, "--kernel", "NeighborSum", "--graph", "g", "--out", "o.npy", "--device", "gpu0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("expected cpu, cuda or cuda:N"));
}
