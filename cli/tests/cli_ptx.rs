//! `tigac compile --target ptx --emit ptx`: the PTX of each kernel and of
//! each adjoint stage, written next to the artifact and (when ptxas is
//! found: $TIGA_PTXAS, PATH, or pip's nvidia-cuda-nvcc) assembled for sm_80
//! and sm_90.

use std::process::Command;

fn tigac(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tigac")).args(args).output().expect("tigac runs")
}

fn kernels() -> String {
    format!("{}/../examples/kernels/gnn.rs", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn ptx_of_every_kernel_and_adjoint_stage_assembles() {
    let ptxas = tiga_ptx::find_ptxas();
    for sm in ["80", "90"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("g.tiga");
        let o =
            tigac(&["compile", &kernels(), "--target", "ptx", "--sm", sm, "--emit", "ptx", "-o", out.to_str().expect("path")]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let mut files: Vec<String> = std::fs::read_dir(dir.path())
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".ptx"))
            .collect();
        files.sort();
        // Every kernel of gnn.rs, and the source stage of each.
        for kernel in [
            "NeighborSum",
            "Smoothing",
            "VecSum",
            "GcnNorm",
            "SageMean",
            "MaxPool",
            "GinSum",
            "GatAttention",
            "Top2Sum",
            "EdgeGate",
        ] {
            for file in [format!("g.{kernel}.ptx"), format!("g.{kernel}.vjp.src.ptx")] {
                assert!(files.contains(&file), "{file} missing from {files:?}");
            }
        }
        for file in &files {
            let path = dir.path().join(file);
            let text = std::fs::read_to_string(&path).expect("ptx written");
            assert!(text.contains(&format!(".target sm_{sm}")), "{file}");
            assert!(text.contains(".visible .entry"), "{file}");
            match &ptxas {
                Some(p) => {
                    let sm_n: u32 = sm.parse().expect("sm");
                    if let Err(e) = tiga_ptx::assemble(p, &path, sm_n) {
                        panic!("{file} sm_{sm}: {e}");
                    }
                }
                None => eprintln!("skipped: no ptxas ($TIGA_PTXAS, PATH, or pip's nvidia-cuda-nvcc wheel)"),
            }
        }
        eprintln!("sm_{sm}: {} PTX files", files.len());
    }
}

#[test]
fn emit_ptx_needs_target_ptx() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("g.tiga");
    let o = tigac(&["compile", &kernels(), "--emit", "ptx", "-o", out.to_str().expect("path")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--emit ptx needs --target ptx"));
}

#[test]
fn explain_shows_the_gpu_schedule() {
    let o = tigac(&["explain", &kernels(), "--kernel", "GcnNorm", "--target", "ptx", "--sm", "90", "--width", "64"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("gpu schedule (sm_90, f32, every width 64"), "{text}");
    // The forward and each adjoint stage: 16 threads of a row, 4 features per 16-byte load.
    for unit in ["GcnNorm:", "GcnNorm.vjp.stats:", "GcnNorm.vjp.src:"] {
        let line = text.lines().find(|l| l.trim_start().starts_with(unit)).unwrap_or_else(|| panic!("{unit} in {text}"));
        assert!(line.contains("16 threads per row") && line.contains("4 feature(s) per 16-byte load"), "{line}");
        if tiga_ptx::find_ptxas().is_some() {
            assert!(line.contains(" registers, ") && line.contains(" B spill stores"), "{line}");
        } else {
            eprintln!("skipped: no ptxas ($TIGA_PTXAS, PATH, or pip's nvidia-cuda-nvcc wheel)");
        }
    }
    // A scalar kernel: one thread per row.
    let o = tigac(&["explain", &kernels(), "--kernel", "NeighborSum", "--target", "ptx"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.lines().any(|l| l.contains("NeighborSum: entry NeighborSum, one thread per row")), "{text}");
}
