//! End-to-end tests of `tigac run --grads` and the adjoint section of
//! `tigac explain`: the built executable, run in a temporary directory, its
//! gradient files compared with the facade's f64 reference VJP (or a closed
//! form), its messages checked from the outside.

use std::path::Path;

use tiga::{Gradients, Inputs, Kernel, TensorView};
use tiga_storage::read_npy;

mod common;
use common::*;

#[track_caller]
fn close(what: &str, actual: &[f64], expected: &[f64], rel: f64) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!((a - e).abs() <= rel * e.abs().max(1e-3), "{what} element {i}: got {a}, expected {e}");
    }
}

/// The `.npy` files in a folder, sorted (to catch stray temp files too).
fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Every gradient file in `dir` against `expected` (same role and name):
/// shape, dtype and values.
#[track_caller]
fn check_grads(dir: &Path, expected: &Gradients, dtype: tiga::DType, rel: f64) {
    let mut names: Vec<String> = expected.items.iter().map(|(r, n, _)| format!("{}.{n}.npy", r.name())).collect();
    names.sort();
    assert_eq!(files_in(dir), names, "exactly one file per gradient in {}", dir.display());
    for (role, name, want) in &expected.items {
        let path = dir.join(format!("{}.{name}.npy", role.name()));
        let got = read_npy(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(got.shape(), want.shape(), "{}: shape", path.display());
        assert_eq!(got.dtype(), dtype, "{}: dtype", path.display());
        close(&path.display().to_string(), &got.to_f64_vec(), &want.to_f64_vec(), rel);
    }
}

/// An edge list with comments, a self loop, a multi-edge (4→2 twice), an
/// edge order that differs from CSR order, and (with N = 6) node 5 with
/// an empty row and no out-edges; node 3's only in-edge is its self loop.
const EDGES: &str = "# FromNodeId\tToNodeId\n0 1\n2 1\n1 0\n3 3\n3 2\n4 2\n% dup\n4 2\n0 4\n";
const EDGE_PAIRS: [(usize, usize); 8] = [(0, 1), (2, 1), (1, 0), (3, 3), (3, 2), (4, 2), (4, 2), (0, 4)];
const N: usize = 6;

fn graph(d: &Path) -> tiga::Graph {
    tiga::read_edge_list(d.join("g.txt"), Some(N)).expect("graph")
}

#[test]
fn gcn_norm_gradients_match_the_reference_vjp() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("g.txt"), EDGES).expect("write graph");
    let (e, f) = (EDGE_PAIRS.len(), 3);
    // Positive data: every gradient entry is a sum of positive terms, so an
    // elementwise relative tolerance is meaningful in f32 (no cancellation).
    let h: Vec<f32> = (0..N * f).map(|i| ((i * 7) % 11) as f32 * 0.3 + 0.2).collect();
    let cs: Vec<f32> = (0..N).map(|i| 1.0 / (1.0 + i as f32)).collect();
    let cd: Vec<f32> = (0..N).map(|i| 0.5 + i as f32).collect();
    let w: Vec<f32> = (0..e).map(|i| 0.1 * (i as f32 + 1.0)).collect();
    let c: Vec<f32> = (0..N * f).map(|i| ((i * 5) % 7) as f32 * 0.5 + 0.25).collect();
    npy_f32(&d.join("h.npy"), &[N, f], &h);
    npy_f32(&d.join("cs.npy"), &[N], &cs);
    npy_f32(&d.join("cd.npy"), &[N], &cd);
    npy_f32(&d.join("w.npy"), &[e], &w);
    npy_f32(&d.join("c.npy"), &[N, f], &c);
    let gnn = gnn_path();
    let gnn = gnn.to_str().expect("utf8 path");
    let base = [
        "run",
        gnn,
        "--kernel",
        "GcnNorm",
        "--graph",
        "g.txt",
        "--num-nodes",
        "6",
        "--src",
        "h=h.npy",
        "--src",
        "cs=cs.npy",
        "--dst",
        "cd=cd.npy",
        "--edge",
        "w=w.npy",
        "--out",
        "out.npy",
    ];
    // The folder does not exist yet (nested): it is created.
    let o = tigac(d, &[&base[..], &["--cotangent", "c.npy", "--grads", "grads/gcn"]].concat());
    ok(&o);
    assert!(stdout(&o).is_empty(), "without --timing, stdout stays empty: {}", stdout(&o));
    assert!(stderr(&o).contains("src.h -> grads/gcn/src.h.npy"), "{}", stderr(&o));

    let k = Kernel::from_source(GNN, "GcnNorm").expect("kernel");
    let g = graph(d);
    let hv = TensorView::from_slice_f32([N, f], &h).expect("h");
    let inputs = Inputs::new().src("h", hv).src("cs", &cs).dst("cd", &cd).edge("w", &w);
    let cv = TensorView::from_slice_f32([N, f], &c).expect("c");
    let reference = k.vjp_reference(&g, &inputs, &[("out", cv.clone())]).expect("reference vjp");
    assert_eq!(reference.items.len(), 4, "h, cs, cd, w");
    check_grads(&d.join("grads/gcn"), &reference, tiga::DType::F32, 1e-5);
    // Not trivially zero, and the edge gradient depends on the edge order.
    let gw = reference.edge("w").expect("w").to_f64_vec();
    assert!(gw.iter().any(|v| v.abs() > 0.1), "{gw:?}");
    // The two copies of 4→2 get equal gradients (d out / d w[e] does not depend on w[e]), each its own entry.
    assert_eq!(gw.len(), e);
    assert_eq!(gw[5], gw[6], "{gw:?}");

    // Without --cotangent, a single-output kernel uses ones: d sum(out).
    let o = tigac(d, &[&base[..], &["--grads", "ones"]].concat());
    ok(&o);
    let ones = vec![1.0f32; N * f];
    let ov = TensorView::from_slice_f32([N, f], &ones).expect("ones");
    let reference = k.vjp_reference(&g, &inputs, &[("out", ov)]).expect("reference vjp");
    check_grads(&d.join("ones"), &reference, tiga::DType::F32, 1e-5);

    // `--cotangent out=FILE` names the single output; rerunning into the same
    // folder overwrites the files.
    ok(&tigac(d, &[&base[..], &["--cotangent", "out=c.npy", "--grads", "ones"]].concat()));
    let reference = k.vjp_reference(&g, &inputs, &[("out", cv)]).expect("reference vjp");
    check_grads(&d.join("ones"), &reference, tiga::DType::F32, 1e-5);

    // f64 inputs and cotangent: f64 gradients.
    let to64 = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
    npy_f64(&d.join("h.npy"), &[N, f], &to64(&h));
    npy_f64(&d.join("cs.npy"), &[N], &to64(&cs));
    npy_f64(&d.join("cd.npy"), &[N], &to64(&cd));
    npy_f64(&d.join("w.npy"), &[e], &to64(&w));
    npy_f64(&d.join("c.npy"), &[N, f], &to64(&c));
    ok(&tigac(d, &[&base[..], &["--cotangent", "c.npy", "--grads", "g64"]].concat()));
    check_grads(&d.join("g64"), &reference, tiga::DType::F64, 1e-12);
}

#[test]
fn neighbor_sum_gradient_is_the_sum_of_out_edge_cotangents() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("g.txt"), EDGES).expect("write graph");
    let x: Vec<f32> = (0..N).map(|i| 1.0 + i as f32).collect();
    let c: Vec<f32> = (0..N).map(|i| 10f32.powi(i as i32 % 4) * if i % 2 == 0 { 1.0 } else { -0.5 }).collect();
    npy_f32(&d.join("x.npy"), &[N], &x);
    npy_f32(&d.join("c.npy"), &[N], &c);
    let gnn = gnn_path();
    let o = tigac(
        d,
        &[
            "run",
            gnn.to_str().expect("utf8"),
            "--kernel",
            "NeighborSum",
            "--graph",
            "g.txt",
            "--num-nodes",
            "6",
            "--src",
            "x=x.npy",
            "--out",
            "y.npy",
            "--cotangent",
            "c.npy",
            "--grads",
            "gr",
        ],
    );
    ok(&o);
    assert_eq!(files_in(&d.join("gr")), vec!["src.x.npy".to_string()]);
    // d/dx[j] Σ_i c[i]·out[i] = Σ_{edges j→i} c[i] (the multi-edge counts twice).
    let mut expected = vec![0.0f64; N];
    for (s, t) in EDGE_PAIRS {
        expected[s] += f64::from(c[t]);
    }
    assert_eq!(expected[5], 0.0, "node 5 has no out-edges");
    let t = read_npy(d.join("gr/src.x.npy")).expect("read");
    assert_eq!(t.shape(), &[N]);
    close("src.x", &t.to_f64_vec(), &expected, 1e-6);
}

/// `--grads` runs the forward that keeps its residuals: MaxPool's `--timing`
/// line says `"residuals": true` with their bytes (a winner rank per row
/// and lane, f32), and its gradient has the bits of the library's
/// recomputing backward; the stderr summary names the residual.
#[test]
fn grads_keep_residuals_of_a_max() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("g.txt"), EDGES).expect("write graph");
    let f = 4;
    // Ties across rows and lanes (values on a coarse grid), negatives.
    let h: Vec<f32> = (0..N * f).map(|i| ((i * 7 % 5) as f32 - 1.0) * 0.5).collect();
    let c: Vec<f32> = (0..N * f).map(|i| 0.25 + (i % 3) as f32).collect();
    npy_f32(&d.join("h.npy"), &[N, f], &h);
    npy_f32(&d.join("c.npy"), &[N, f], &c);
    let gnn = gnn_path();
    let args = [
        "run",
        gnn.to_str().expect("utf8"),
        "--kernel",
        "MaxPool",
        "--graph",
        "g.txt",
        "--num-nodes",
        "6",
        "--src",
        "h=h.npy",
        "--out",
        "y.npy",
        "--cotangent",
        "c.npy",
        "--grads",
        "gr",
    ];
    let o = tigac(d, &[&args[..], &["--timing"]].concat());
    ok(&o);
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("JSON");
    assert_eq!(v["residuals"].as_bool(), Some(true), "{v}");
    assert_eq!(v["residual_bytes"].as_u64(), Some((N * f * 4) as u64), "{v}");
    let k = Kernel::from_source(&std::fs::read_to_string(&gnn).expect("gnn.rs"), "MaxPool").expect("kernel");
    let g = graph(d);
    let ht = tiga::Tensor::from_f32(vec![N, f], h).expect("h");
    let ct = tiga::Tensor::from_f32(vec![N, f], c).expect("c");
    let want = k.vjp(&g, &Inputs::new().src("h", &ht), &[("out", ct.view())]).expect("recomputing vjp");
    let got = read_npy(d.join("gr/src.h.npy")).expect("read");
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(got.as_f32().expect("f32")), bits(want.src("h").expect("grad").as_f32().expect("f32")));
    let o = tigac(d, &args);
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("read the forward's residuals winner0"), "{err}");
}

#[test]
fn multi_output_kernel_needs_a_cotangent_per_output() {
    const MULTI: &str = r#"
#[message_passing(reduce = sum)]
pub mod SumAndTotal {
    use tiga::lang::*;
    pub struct Src { pub h: Vector<f32> }
    pub struct Params { pub s: f32 }
    pub struct Out { pub scaled: Vector<f32>, pub total: f32 }
    pub fn edge(src: &Src) -> Vector<f32> { src.h.clone() }
    pub fn node(params: &Params, agg: Vector<f32>) -> Out {
        Out { scaled: params.s * &agg, total: sum(&agg) }
    }
}
"#;
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("multi.rs"), MULTI).expect("write kernel");
    std::fs::write(d.join("g.txt"), EDGES).expect("write graph");
    let f = 4;
    let h: Vec<f32> = (0..N * f).map(|i| i as f32 * 0.25 - 2.0).collect();
    let ca: Vec<f32> = (0..N * f).map(|i| (i % 5) as f32 - 2.0).collect();
    let cb: Vec<f32> = (0..N).map(|i| 0.5 * i as f32).collect();
    npy_f32(&d.join("h.npy"), &[N, f], &h);
    npy_f32(&d.join("s.npy"), &[1], &[3.0]);
    npy_f32(&d.join("ca.npy"), &[N, f], &ca);
    npy_f32(&d.join("cb.npy"), &[N], &cb);
    let base = [
        "run",
        "multi.rs",
        "--kernel",
        "SumAndTotal",
        "--graph",
        "g.txt",
        "--num-nodes",
        "6",
        "--src",
        "h=h.npy",
        "--param",
        "s=s.npy",
        "--out",
        "scaled=a.npy",
        "--out",
        "total=b.npy",
    ];
    // No default cotangent for two outputs; a plain file is ambiguous; each is needed.
    fails_with(&tigac(d, &[&base[..], &["--grads", "gr"]].concat()), &["--cotangent NAME=FILE.npy", "scaled", "total"]);
    fails_with(
        &tigac(d, &[&base[..], &["--grads", "gr", "--cotangent", "ca.npy"]].concat()),
        &["--cotangent NAME=FILE.npy", "scaled, total"],
    );
    fails_with(
        &tigac(d, &[&base[..], &["--grads", "gr", "--cotangent", "scaled=ca.npy"]].concat()),
        &["missing --cotangent", "total"],
    );
    fails_with(
        &tigac(d, &[&base[..], &["--grads", "gr", "--cotangent", "scaled=ca.npy", "--cotangent", "scaled=ca.npy"]].concat()),
        &["given twice"],
    );
    assert!(!d.join("gr").exists(), "nothing is created for a refused call");

    let o = tigac(d, &[&base[..], &["--grads", "gr", "--cotangent", "total=cb.npy", "--cotangent", "scaled=ca.npy"]].concat());
    ok(&o);
    let k = Kernel::from_source(MULTI, "SumAndTotal").expect("kernel");
    let g = graph(d);
    let s = [3.0f32];
    let inputs = Inputs::new().src("h", TensorView::from_slice_f32([N, f], &h).expect("h")).param("s", &s[..]);
    let reference = k
        .vjp_reference(
            &g,
            &inputs,
            &[
                ("scaled", TensorView::from_slice_f32([N, f], &ca).expect("ca")),
                ("total", TensorView::from_slice_f32([N], &cb).expect("cb")),
            ],
        )
        .expect("reference vjp");
    check_grads(&d.join("gr"), &reference, tiga::DType::F32, 1e-5);
    assert_eq!(read_npy(d.join("gr/param.s.npy")).expect("s").shape(), &[1], "shaped like the parameter file");
}

#[test]
fn timing_with_grads_prints_one_json_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("g.txt"), EDGES).expect("write graph");
    npy_f32(&d.join("x.npy"), &[5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
    npy_f32(&d.join("c.npy"), &[5], &[1.0; 5]);
    let gnn = gnn_path();
    let base =
        ["run", gnn.to_str().expect("utf8"), "--kernel", "NeighborSum", "--graph", "g.txt", "--src", "x=x.npy", "--out", "y.npy"];
    let o = tigac(d, &[&base[..], &["--repeat", "3", "--timing", "--cotangent", "c.npy", "--grads", "gr"]].concat());
    ok(&o);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "exactly one line on stdout: {out:?}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).expect("JSON");
    let obj = v.as_object().expect("object");
    let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["compile_ms", "residual_bytes", "residuals", "run_ms_median", "runs", "vjp_ms_median"], "{v}");
    assert_eq!(v["runs"].as_u64(), Some(3), "{v}");
    // A sum keeps no residuals: its backward reads no statistic of the fold.
    assert_eq!((v["residuals"].as_bool(), v["residual_bytes"].as_u64()), (Some(false), Some(0)), "{v}");
    assert!(v["run_ms_median"].as_f64().expect("run_ms_median") >= 0.0, "{v}");
    assert!(v["vjp_ms_median"].as_f64().expect("vjp_ms_median") > 0.0, "{v}");
    // Out-degrees in EDGES (N = 5 here): 0→{1, 4}, 1→0, 2→1, 3→{3, 2}, 4→2 twice.
    let t = read_npy(d.join("gr/src.x.npy")).expect("read");
    assert_eq!(t.as_f32().expect("f32"), &[2.0, 1.0, 1.0, 2.0, 2.0]);

    // Without --grads the line keeps its three keys.
    let o = tigac(d, &[&base[..], &["--timing"]].concat());
    ok(&o);
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("JSON");
    assert!(v.get("vjp_ms_median").is_none(), "{v}");
}

#[test]
fn grads_errors_are_clear() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("g.txt"), EDGES).expect("write graph");
    npy_f32(&d.join("x.npy"), &[N], &[1.0; N]);
    npy_f32(&d.join("c.npy"), &[N], &[1.0; N]);
    npy_f32(&d.join("c_short.npy"), &[N - 1], &[1.0; N - 1]);
    npy_f32(&d.join("c_2d.npy"), &[N, 2], &[1.0; 2 * N]);
    npy_f64(&d.join("c64.npy"), &[N], &[1.0; N]);
    std::fs::write(d.join("junk.npy"), b"not an npy file").expect("write");
    let gnn = gnn_path();
    let gnn = gnn.to_str().expect("utf8");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            gnn,
            "--kernel",
            "NeighborSum",
            "--graph",
            "g.txt",
            "--num-nodes",
            "6",
            "--src",
            "x=x.npy",
            "--out",
            "y.npy",
        ];
        args.extend_from_slice(extra);
        tigac(d, &args)
    };
    // Wrong shape, wrong dtype: the output, the file, expected and actual.
    fails_with(&run(&["--cotangent", "c_short.npy", "--grads", "gr"]), &["cotangent", "`out`", "c_short.npy", "[5]", "[6]"]);
    fails_with(&run(&["--cotangent", "c_2d.npy", "--grads", "gr"]), &["cotangent", "c_2d.npy", "[6, 2]", "[6]"]);
    fails_with(&run(&["--cotangent", "c64.npy", "--grads", "gr"]), &["cotangent", "c64.npy", "f64", "f32"]);
    // Unknown output name; unreadable files.
    fails_with(&run(&["--cotangent", "bogus=c.npy", "--grads", "gr"]), &["bogus", "no output", "out"]);
    fails_with(&run(&["--cotangent", "missing.npy", "--grads", "gr"]), &["cotangent", "missing.npy"]);
    fails_with(&run(&["--cotangent", "junk.npy", "--grads", "gr"]), &["cotangent", "junk.npy"]);
    assert!(!d.join("gr").exists(), "a refused call creates no folder");
    // --cotangent alone: --grads is needed too.
    fails_with(&run(&["--cotangent", "c.npy"]), &["--cotangent", "--grads"]);
    // DIR is a file, or lies under one.
    fails_with(&run(&["--cotangent", "c.npy", "--grads", "g.txt"]), &["--grads", "g.txt", "not a directory"]);
    fails_with(&run(&["--cotangent", "c.npy", "--grads", "g.txt/sub"]), &["--grads", "g.txt/sub"]);
    // An unwritable folder (skipped where permissions do not bind, e.g. root).
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let ro = d.join("ro");
        std::fs::create_dir(&ro).expect("mkdir");
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).expect("chmod");
        if tempfile::NamedTempFile::new_in(&ro).is_err() {
            fails_with(&run(&["--cotangent", "c.npy", "--grads", "ro"]), &["--grads", "ro", "cannot write"]);
        }
        let _ = std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755));
    }
    // A matrix parameter differentiates too: its gradient is written with
    // the matrix's shape.
    const LINEAR: &str = r#"
#[message_passing(reduce = sum)]
pub mod Linear {
    use tiga::lang::*;
    pub struct Src { pub h: Vector<f32> }
    pub struct Params { pub m: Matrix<f32> }
    pub fn edge(src: &Src, params: &Params) -> Vector<f32> { matvec(&params.m, &src.h) }
}
"#;
    std::fs::write(d.join("linear.rs"), LINEAR).expect("write kernel");
    npy_f32(&d.join("h.npy"), &[N, 2], &[1.0; 2 * N]);
    npy_f32(&d.join("m.npy"), &[3, 2], &[1.0; 6]);
    let lin = [
        "run",
        "linear.rs",
        "--kernel",
        "Linear",
        "--graph",
        "g.txt",
        "--num-nodes",
        "6",
        "--src",
        "h=h.npy",
        "--param",
        "m=m.npy",
        "--out",
        "y.npy",
    ];
    ok(&tigac(d, &lin));
    ok(&tigac(d, &[&lin[..], &["--grads", "lin"]].concat()));
    let m_grad = tiga::read_npy(d.join("lin").join("param.m.npy")).expect("matrix gradient written");
    assert_eq!(m_grad.shape(), &[3, 2]);
    let o = tigac(d, &["explain", "linear.rs"]);
    ok(&o);
    let text = stdout(&o);
    assert!(text.contains("passes (in order):") && text.contains("loop nest:"), "the forward part stays:\n{text}");
    assert!(text.contains("adjoint") && !text.contains("not available"), "{text}");
}

#[test]
fn explain_shows_the_adjoint_stages() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let o = tigac(&root, &["explain", "examples/kernels/gnn.rs", "--kernel", "GatAttention"]);
    ok(&o);
    let text = stdout(&o);
    // The forward part first, unchanged, then the adjoint.
    let fwd = text.find("passes (in order):").expect("forward passes");
    let loops = text.find("loop nest:").expect("loop nest");
    let adj = text.find("\nadjoint").expect("adjoint section");
    assert!(fwd < loops && loops < adj, "{text}");
    let adjoint = &text[adj..];
    for stage in ["GatAttention.vjp.stats", "GatAttention.vjp.edge", "GatAttention.vjp.src"] {
        assert!(adjoint.contains(&format!(": {stage}\n")), "stage {stage} missing:\n{adjoint}");
    }
    assert!(adjoint.contains("src gradients (h, a_src): transposed graph, no atomics"), "{adjoint}");
    assert!(adjoint.contains("grad.src.h") && adjoint.contains("grad.dst.a_dst"), "{adjoint}");
    assert!(adjoint.contains("cotangent of `out`"), "bindings:\n{adjoint}");
    assert!(adjoint.contains("row statistics") && adjoint.contains("notes:"), "{adjoint}");
    // The transposed stage is the one that says so, and each stage lists its passes with remarks.
    let src_stage = &adjoint[adjoint.find(": GatAttention.vjp.src\n").expect("src stage")..];
    let graph_line = src_stage.lines().find(|l| l.trim_start().starts_with("graph:")).expect("graph line");
    assert!(graph_line.contains("transposed"), "{graph_line}");
    assert_eq!(adjoint.matches("capture-message-passing-udf").count(), 3, "{adjoint}");
    assert!(adjoint.contains("[applied]"), "{adjoint}");
    // Then what a forward that keeps residuals keeps, and what it costs.
    let saved = &text[text.find("\nsaved residuals").expect("saved-residuals section")..];
    assert!(saved.contains("kept:      max: scalar, denominator: scalar, weighted_sum: vector<F>"), "{saved}");
    assert!(saved.contains("cost:      2 + F values per destination row"), "{saved}");
    assert!(saved.contains("GatAttention.vjp.saved_stats [per destination node]"), "{saved}");
    let o = tigac(&root, &["explain", "examples/kernels/gnn.rs", "--kernel", "Top2Sum"]);
    ok(&o);
    assert!(stdout(&o).contains("saved residuals") && stdout(&o).contains("  none: monoid"), "{}", stdout(&o));
    // Explain for several kernels (an artifact too) keeps every adjoint section.
    let o = tigac(&root, &["explain", "examples/kernels/gnn.rs"]);
    ok(&o);
    assert!(stdout(&o).contains("NeighborSum.vjp.src") && stdout(&o).contains("EdgeGate.vjp.edge"));

    // `run --help` documents both flags and the default.
    let o = tigac(&root, &["run", "--help"]);
    ok(&o);
    let help = stdout(&o);
    assert!(help.contains("--grads") && help.contains("--cotangent") && help.contains("ones"), "{help}");
}
