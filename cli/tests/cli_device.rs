//! `tigac run --device`: the CPU by default; `sim`, the PTX simulator, runs
//! the GPU path on the CPU with the CPU's numbers; a GPU asked of a tigac
//! built without the `cuda` feature, or of a machine without a driver, is
//! refused with a message saying which, before any input is read; a
//! malformed device is a usage error.

use std::path::Path;
use std::process::Command;

fn tigac(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tigac")).args(args).output().expect("tigac runs")
}

fn kernels() -> String {
    format!("{}/../examples/kernels/gnn.rs", env!("CARGO_MANIFEST_DIR"))
}

/// Run NeighborSum with `--device cuda` / `cuda:1` on inputs that do not
/// exist: the refusal must come first.
fn refused(device: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let graph = dir.path().join("g.txt");
    std::fs::write(&graph, "0 1\n1 0\n").expect("graph");
    let out = dir.path().join("o.npy");
    let k = kernels();
    let o = tigac(&[
        "run",
        &k,
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
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!err.contains("nonexistent") && !err.contains("panicked"), "{device}: {err}");
    assert!(!out.exists());
    err
}

#[cfg(not(feature = "cuda"))]
#[test]
fn device_cuda_without_the_feature_is_refused_clearly() {
    for device in ["cuda", "cuda:1"] {
        let err = refused(device);
        assert!(
            err.contains("built without the `cuda` feature") && err.contains("cargo build --release -p tigac --features cuda"),
            "{device}: {err}"
        );
    }
}

/// With the feature, on a machine without a driver (or without that GPU):
/// a clear message, exit 1, no panic.
#[cfg(feature = "cuda")]
#[test]
fn device_cuda_without_a_driver_is_refused_clearly() {
    if tiga::runtime::gpu::open(tiga::Device::Cuda(0)).is_ok() {
        eprintln!("skipped: this machine has a CUDA GPU");
        return;
    }
    for device in ["cuda", "cuda:1"] {
        let err = refused(device);
        assert!(err.contains("no CUDA driver") || err.contains("no CUDA device"), "{device}: {err}");
    }
}

#[test]
fn malformed_device_is_a_usage_error() {
    let k = kernels();
    let o = tigac(&["run", &k, "--kernel", "NeighborSum", "--graph", "g", "--out", "o.npy", "--device", "gpu0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("expected cpu, cuda, cuda:N"));
}

fn write_f32(path: &Path, data: &[f32]) {
    let t = tiga::Tensor::from_f32(vec![data.len()], data.to_vec()).expect("tensor");
    tiga::write_npy(path, &t.view()).expect("npy");
}

/// `--device sim` gives `--device cpu`'s bits, forward and with `--grads`,
/// and `--timing` adds the device and its kernel time.
#[test]
fn device_sim_matches_cpu() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let edges: String = (0..40u32).map(|i| format!("{} {}\n", (i * 7) % 13, (i * 5) % 11)).collect();
    std::fs::write(d.join("g.txt"), format!("{edges}3 3\n3 3\n")).expect("graph");
    let x: Vec<f32> = (0..13).map(|i| (i as f32 * 0.7).sin()).collect();
    write_f32(&d.join("x.npy"), &x);
    let k = kernels();
    let p = |name: &str| d.join(name).to_str().expect("path").to_string();
    let mut results = Vec::new();
    for device in ["cpu", "sim"] {
        let (out, grads) = (p(&format!("out-{device}.npy")), p(&format!("grads-{device}")));
        let o = tigac(&[
            "run",
            &k,
            "--kernel",
            "Smoothing",
            "--graph",
            &p("g.txt"),
            "--num-nodes",
            "13",
            "--src",
            &format!("x={}", p("x.npy")),
            "--out",
            &out,
            "--grads",
            &grads,
            "--device",
            device,
            "--timing",
        ]);
        assert!(o.status.success(), "{device}: {}", String::from_utf8_lossy(&o.stderr));
        let line: serde_json::Value = serde_json::from_slice(&o.stdout).expect("timing JSON");
        for key in ["compile_ms", "run_ms_median", "runs", "vjp_ms_median"] {
            assert!(line.get(key).is_some(), "{device}: no {key} in {line}");
        }
        if device == "sim" {
            assert_eq!(line["device"], "sim", "{line}");
            assert!(line["kernel_ms"].as_f64().is_some_and(|t| t >= 0.0), "{line}");
        } else {
            assert!(line.get("device").is_none(), "{line}");
        }
        let out = tiga::read_npy(Path::new(&out)).expect("out");
        let grad = tiga::read_npy(Path::new(&grads).join("src.x.npy")).expect("gradient");
        results.push((out, grad));
    }
    let bits = |t: &tiga::Tensor| t.to_f64_vec().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&results[0].0), bits(&results[1].0), "forward");
    assert_eq!(bits(&results[0].1), bits(&results[1].1), "gradient");
}
