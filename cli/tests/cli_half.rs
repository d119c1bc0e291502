//! `tigac run` with half-precision fields: `.npy` inputs of dtype `<f2`
//! read as f16 (and `|V2` as bf16), kernel files declaring `f16`/`bf16`
//! fields and outputs, and gradients written in the fields' types; every
//! number against a sum computed here in f64 from the stored values.

use std::path::Path;

use tiga::{FieldType, Tensor};
use tiga_storage::{read_npy, write_npy};

mod common;
use common::*;

/// An edge list with a self loop, a multi-edge (4→2 twice) and, with N = 6,
/// node 5 with an empty row and no out-edges.
const EDGES: &str = "0 1\n2 1\n1 0\n3 3\n3 2\n4 2\n4 2\n0 4\n";
const EDGE_PAIRS: [(usize, usize); 8] = [(0, 1), (2, 1), (1, 0), (3, 3), (3, 2), (4, 2), (4, 2), (0, 4)];
const N: usize = 6;
const F: usize = 4;

fn half_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/kernels/gnn_half.rs")
}

/// Features that are not exact in f16 or bf16 (so rounding shows), saved as
/// `ty` with tiga's writer; returns the stored values widened to f64.
fn features(path: &Path, ty: FieldType) -> Vec<f64> {
    let x: Vec<f64> = (0..N * F).map(|i| (i as f64 * 0.37).sin() * 3.0 + 0.01).collect();
    let t = Tensor::from_f64(vec![N, F], x).expect("shape").converted(ty);
    write_npy(path, &t.view()).expect("write");
    let bytes = std::fs::read(path).expect("read back");
    let descr = if ty == FieldType::F16 { "'<f2'" } else { "'|V2'" };
    assert!(String::from_utf8_lossy(&bytes[..128]).contains(descr), "{ty} is saved as {descr}");
    t.to_f64_vec()
}

fn sums(x: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0f64; N * F];
    for (s, t) in EDGE_PAIRS {
        for c in 0..F {
            out[t * F + c] += x[s * F + c];
        }
    }
    out
}

#[test]
fn half_npy_inputs_and_half_kernel_files_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("g.txt"), EDGES).expect("write graph");
    let h16 = features(&d.join("h16.npy"), FieldType::F16);
    let hb = features(&d.join("hb.npy"), FieldType::BF16);
    let half = half_path();
    let half = half.to_str().expect("utf8");
    let gnn = gnn_path();
    let gnn = gnn.to_str().expect("utf8");
    let run = |file: &str, kernel: &str, src: &str, out: &str, extra: &[&str]| {
        let mut args = vec!["run", file, "--kernel", kernel, "--graph", "g.txt", "--num-nodes", "6", "--src", src, "--out", out];
        args.extend_from_slice(extra);
        let o = tigac(d, &args);
        ok(&o);
    };

    // gnn.rs's VecSum (declared f32) on an f16 file: f32 output, the sum
    // of the f16 values.
    run(gnn, "VecSum", "h=h16.npy", "a.npy", &["--grads", "ga"]);
    let a = read_npy(d.join("a.npy")).expect("output");
    assert_eq!(a.field_type(), FieldType::F32);
    for (i, (x, y)) in a.to_f64_vec().iter().zip(sums(&h16)).enumerate() {
        assert!((x - y).abs() <= 1e-6 * y.abs().max(1.0), "a[{i}]: {x} vs {y}");
    }
    // The gradient of out.sum() is each source's out-degree, in f16.
    let g = read_npy(d.join("ga/src.h.npy")).expect("gradient");
    assert_eq!(g.field_type(), FieldType::F16);
    let mut outdeg = [0.0f64; N];
    EDGE_PAIRS.iter().for_each(|&(s, _)| outdeg[s] += 1.0);
    let want: Vec<f64> = (0..N * F).map(|i| outdeg[i / F]).collect();
    assert_eq!(g.to_f64_vec(), want);

    // The kernel file declaring bf16: HalfVecSum on a bf16 (`|V2`) file.
    run(half, "HalfVecSum", "h=hb.npy", "b.npy", &[]);
    let b = read_npy(d.join("b.npy")).expect("output");
    assert_eq!(b.field_type(), FieldType::F32, "HalfVecSum's output is declared f32");
    for (i, (x, y)) in b.to_f64_vec().iter().zip(sums(&hb)).enumerate() {
        assert!((x - y).abs() <= 1e-6 * y.abs().max(1.0), "b[{i}]: {x} vs {y}");
    }

    // HalfMaxPool: bf16 in, bf16 out (written as `|V2`), each element the
    // largest relu of its row's stored values, exactly (max and relu do
    // not round).
    run(half, "HalfMaxPool", "h=hb.npy", "m.npy", &[]);
    let m = read_npy(d.join("m.npy")).expect("output");
    assert_eq!(m.field_type(), FieldType::BF16);
    let mut want = [f64::NEG_INFINITY; N * F];
    for (s, t) in EDGE_PAIRS {
        for c in 0..F {
            want[t * F + c] = want[t * F + c].max(hb[s * F + c].max(0.0));
        }
    }
    let want: Vec<f64> = want.iter().map(|&v| if v == f64::NEG_INFINITY { 0.0 } else { v }).collect();
    assert_eq!(m.to_f64_vec(), want);

    // A file of a dtype no field can be: the message names what is accepted.
    let ids = tiga_storage::encode_npy_ids(&[1, 2, 3]).expect("ids");
    std::fs::write(d.join("i.npy"), ids).expect("write");
    let o = tigac(d, &["run", gnn, "--kernel", "VecSum", "--graph", "g.txt", "--src", "h=i.npy", "--out", "z.npy"]);
    fails_with(&o, &["'<i8'", "'<f2' (float16)", "'|V2'"]);
}
