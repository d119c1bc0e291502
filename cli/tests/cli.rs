//! End-to-end tests of the `tigac` binary: each runs the built executable in
//! a temporary directory, as a user would, and checks files, numbers and
//! messages from the outside.

use std::path::Path;

use tiga::{Inputs, Kernel, TensorView};
use tiga_storage::read_npy;

mod common;
use common::*;

fn read_f32(path: &Path) -> (Vec<usize>, Vec<f32>) {
    let t = read_npy(path).expect("read output");
    (t.shape().to_vec(), t.as_f32().expect("f32 output").to_vec())
}

#[track_caller]
fn close(actual: &[f64], expected: &[f64], rel: f64) {
    assert_eq!(actual.len(), expected.len());
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!((a - e).abs() <= rel * e.abs().max(1e-3), "element {i}: got {a}, expected {e}");
    }
}

/// An edge list with comments, a self loop, a duplicate
/// edge and (with N = 6) an isolated node 5.
const EDGES: &str = "# FromNodeId\tToNodeId\n0 1\n2 1\n1 0\n3 3\n3 2\n4 2\n% dup\n4 2\n0 4\n";
const EDGE_PAIRS: [(usize, usize); 8] = [(0, 1), (2, 1), (1, 0), (3, 3), (3, 2), (4, 2), (4, 2), (0, 4)];

#[test]
fn compiled_artifact_runs_without_the_source() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::copy(gnn_path(), d.join("gnn.rs")).expect("copy");
    let o = tigac(d, &["compile", "gnn.rs", "--kernel", "Smoothing"]);
    ok(&o);
    assert!(stdout(&o).contains("gnn.tiga"), "{}", stdout(&o));
    std::fs::remove_file(d.join("gnn.rs")).expect("remove source");

    std::fs::write(d.join("g.txt"), EDGES).expect("write graph");
    let n = 6;
    let x: Vec<f32> = (0..n).map(|i| 1.0 + i as f32 * 0.5).collect();
    npy_f32(&d.join("x.npy"), &[n], &x);
    let o = tigac(
        d,
        &[
            "run",
            "gnn.tiga",
            "--kernel",
            "Smoothing",
            "--graph",
            "g.txt",
            "--num-nodes",
            "6",
            "--src",
            "x=x.npy",
            "--out",
            "y.npy",
        ],
    );
    ok(&o);
    assert!(stdout(&o).is_empty(), "without --timing, stdout stays empty: {}", stdout(&o));

    let (shape, y) = read_f32(&d.join("y.npy"));
    assert_eq!(shape, vec![n]);
    let mut expected = vec![0.0f64; n];
    for (s, t) in EDGE_PAIRS {
        expected[t] += f64::from(x[s]);
    }
    let expected: Vec<f64> = expected.iter().map(|v| 0.25 * v).collect();
    close(&y.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(), &expected, 1e-6);

    // Version 2 (segments may hold a pre-pass); a version-1 artifact (no
    // pre-pass) still runs, a newer one is refused by name and version.
    let text = std::fs::read_to_string(d.join("gnn.tiga")).expect("read artifact");
    assert!(text.contains("\"version\":2"), "{}", &text[..text.len().min(80)]);
    std::fs::write(d.join("v1.tiga"), text.replacen("\"version\":2", "\"version\":1", 1)).expect("write");
    let o = tigac(
        d,
        &[
            "run",
            "v1.tiga",
            "--kernel",
            "Smoothing",
            "--graph",
            "g.txt",
            "--num-nodes",
            "6",
            "--src",
            "x=x.npy",
            "--out",
            "y1.npy",
        ],
    );
    ok(&o);
    assert_eq!(read_f32(&d.join("y1.npy")).1, y, "a version-1 artifact gives the same bits");
    std::fs::write(d.join("v3.tiga"), text.replacen("\"version\":2", "\"version\":3", 1)).expect("write");
    let o = tigac(
        d,
        &[
            "run",
            "v3.tiga",
            "--kernel",
            "Smoothing",
            "--graph",
            "g.txt",
            "--num-nodes",
            "6",
            "--src",
            "x=x.npy",
            "--out",
            "y3.npy",
        ],
    );
    fails_with(&o, &["v3.tiga", "artifact version 3", "versions 1 to 2"]);

    // Without --kernel every kernel goes in; explain reads the artifact by content.
    std::fs::copy(gnn_path(), d.join("gnn.rs")).expect("copy");
    ok(&tigac(d, &["compile", "gnn.rs", "-o", "all.bin"]));
    let o = tigac(d, &["explain", "all.bin"]);
    ok(&o);
    for k in ["NeighborSum", "GcnNorm", "GatAttention", "EdgeGate"] {
        assert!(stdout(&o).contains(&format!("kernel {k}")), "{k} missing:\n{}", stdout(&o));
    }
}

/// A 4 × 6 matrix (4 destinations, 6 sources), entries in a scrambled order
/// so the edge order differs from CSR order.
const MTX: &str = "%%MatrixMarket matrix coordinate real general\n% a comment\n4 6 7\n3 1 0.5\n1 2 2.0\n4 6 1.5\n1 1 -1.0\n2 5 3.0\n3 3 0.25\n1 6 4.0\n";

#[test]
fn gcn_norm_on_matrix_market_matches_reference() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("a.mtx"), MTX).expect("write mtx");
    let (num_src, num_dst, e, f) = (6, 4, 7, 3);
    let h: Vec<f32> = (0..num_src * f).map(|i| ((i * 7) % 11) as f32 * 0.3 - 1.0).collect();
    let cs: Vec<f32> = (0..num_src).map(|i| 1.0 / (1.0 + i as f32)).collect();
    let cd: Vec<f32> = (0..num_dst).map(|i| 0.5 + i as f32).collect();
    let w: Vec<f32> = (0..e).map(|i| 0.1 * (i as f32 + 1.0)).collect();
    npy_f32(&d.join("h.npy"), &[num_src, f], &h);
    npy_f32(&d.join("cs.npy"), &[num_src], &cs);
    npy_f32(&d.join("cd.npy"), &[num_dst], &cd);
    npy_f32(&d.join("w.npy"), &[e], &w);
    let gnn = gnn_path();
    let o = tigac(
        d,
        &[
            "run",
            gnn.to_str().expect("utf8 path"),
            "--kernel",
            "GcnNorm",
            "--graph",
            "a.mtx",
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
        ],
    );
    ok(&o);
    let (shape, got) = read_f32(&d.join("out.npy"));
    assert_eq!(shape, vec![num_dst, f]);

    let k = Kernel::from_source(GNN, "GcnNorm").expect("kernel");
    let (g, _) = tiga::read_matrix_market(d.join("a.mtx")).expect("graph");
    let hv = TensorView::from_slice_f32([num_src, f], &h).expect("h");
    let inputs = Inputs::new().src("h", hv).src("cs", &cs).dst("cd", &cd).edge("w", &w);
    let reference = k.run_reference(&g, &inputs).expect("reference");
    let expected = reference.out().expect("out").to_f64_vec();
    close(&got.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(), &expected, 1e-5);
    // The reference is not trivially zero: the edge order matters here.
    assert!(expected.iter().any(|v| v.abs() > 0.1));

    // The same call in f64 writes f64 outputs.
    let to64 = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
    npy_f64(&d.join("h.npy"), &[num_src, f], &to64(&h));
    npy_f64(&d.join("cs.npy"), &[num_src], &to64(&cs));
    npy_f64(&d.join("cd.npy"), &[num_dst], &to64(&cd));
    npy_f64(&d.join("w.npy"), &[e], &to64(&w));
    let o = tigac(
        d,
        &[
            "run",
            gnn.to_str().expect("utf8 path"),
            "--kernel",
            "GcnNorm",
            "--graph",
            "a.mtx",
            "--src",
            "h=h.npy",
            "--src",
            "cs=cs.npy",
            "--dst",
            "cd=cd.npy",
            "--edge",
            "w=w.npy",
            "--out",
            "out64.npy",
        ],
    );
    ok(&o);
    let t = read_npy(d.join("out64.npy")).expect("read");
    close(t.as_f64().expect("f64 output"), &expected, 1e-12);
}

const MULTI: &str = r#"
/// Two outputs: the scaled neighbour sum of h, and its feature total.
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

#[test]
fn multi_output_and_vector_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("multi.rs"), MULTI).expect("write kernel");
    std::fs::write(d.join("g.txt"), EDGES).expect("write graph");
    let (n, f) = (6, 4);
    let h: Vec<f32> = (0..n * f).map(|i| i as f32 * 0.25 - 2.0).collect();
    npy_f32(&d.join("h.npy"), &[n, f], &h);
    npy_f32(&d.join("s.npy"), &[1], &[3.0]);
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
    ];
    let o = tigac(d, &[&base[..], &["--out", "scaled=a.npy", "--out", "total=b.npy"]].concat());
    ok(&o);
    let mut agg = vec![0.0f64; n * f];
    for (s, t) in EDGE_PAIRS {
        for c in 0..f {
            agg[t * f + c] += f64::from(h[s * f + c]);
        }
    }
    let (shape, a) = read_f32(&d.join("a.npy"));
    assert_eq!(shape, vec![n, f]);
    close(&a.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(), &agg.iter().map(|v| 3.0 * v).collect::<Vec<_>>(), 1e-6);
    let (shape, b) = read_f32(&d.join("b.npy"));
    assert_eq!(shape, vec![n]);
    let totals: Vec<f64> = agg.chunks(f).map(|r| r.iter().sum()).collect();
    close(&b.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(), &totals, 1e-6);

    // A 0-D parameter file (np.save of a numpy scalar) works too.
    let mut zero_d = b"\x93NUMPY\x01\x00".to_vec();
    let mut header = "{'descr': '<f4', 'fortran_order': False, 'shape': (), }".to_string();
    // Pad so that magic, version, length, header and newline fill whole 64-byte blocks.
    header.push_str(&" ".repeat(63 - (10 + header.len()) % 64));
    header.push('\n');
    zero_d.extend_from_slice(&(header.len() as u16).to_le_bytes());
    zero_d.extend_from_slice(header.as_bytes());
    zero_d.extend_from_slice(&(-2.0f32).to_le_bytes());
    std::fs::write(d.join("s0.npy"), zero_d).expect("write");
    let mut args0 = base.to_vec();
    let last = args0.len() - 1;
    args0[last] = "s=s0.npy";
    ok(&tigac(d, &[&args0[..], &["--out", "total=t.npy", "--out", "scaled=c.npy"]].concat()));
    let (_, c) = read_f32(&d.join("c.npy"));
    close(&c.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(), &agg.iter().map(|v| -2.0 * v).collect::<Vec<_>>(), 1e-6);

    // A plain --out is ambiguous with two outputs; a missing one is named.
    fails_with(&tigac(d, &[&base[..], &["--out", "a.npy"]].concat()), &["scaled", "total", "NAME=FILE.npy"]);
    fails_with(&tigac(d, &[&base[..], &["--out", "scaled=a.npy"]].concat()), &["missing", "total"]);
    fails_with(&tigac(d, &[&base[..], &["--out", "bogus=a.npy"]].concat()), &["bogus", "scaled, total"]);

    // A vector output from gnn.rs: VecSum, with N from the largest id (4) + 1.
    npy_f32(&d.join("h5.npy"), &[5, f], &h[..5 * f]);
    let gnn = gnn_path();
    let o = tigac(
        d,
        &["run", gnn.to_str().expect("utf8"), "--kernel", "VecSum", "--graph", "g.txt", "--src", "h=h5.npy", "--out", "v.npy"],
    );
    ok(&o);
    let (shape, v) = read_f32(&d.join("v.npy"));
    assert_eq!(shape, vec![5, f], "N defaults to the largest id + 1");
    close(&v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>(), &agg[..5 * f], 1e-6);
}

#[test]
fn timing_prints_one_json_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("g.txt"), EDGES).expect("write graph");
    npy_f32(&d.join("x.npy"), &[5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
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
            "--src",
            "x=x.npy",
            "--out",
            "y.npy",
            "--repeat",
            "3",
            "--timing",
        ],
    );
    ok(&o);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "exactly one line on stdout: {out:?}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).expect("JSON");
    assert!(v["compile_ms"].as_f64().expect("compile_ms") > 0.0, "{v}");
    assert!(v["run_ms_median"].as_f64().expect("run_ms_median") >= 0.0, "{v}");
    assert_eq!(v["runs"].as_u64(), Some(3), "{v}");
    assert_eq!(read_f32(&d.join("y.npy")).1, vec![2.0, 1.0 + 3.0, 4.0 + 5.0 + 5.0, 4.0, 1.0]);
}

#[test]
fn bad_inputs_are_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let gnn = gnn_path();
    let gnn = gnn.to_str().expect("utf8");
    std::fs::write(d.join("g.txt"), EDGES).expect("write graph");
    std::fs::write(d.join("bad.txt"), "0 1\n1 2\n2 x\n").expect("write graph");
    npy_f32(&d.join("x.npy"), &[5], &[1.0; 5]);
    npy_f32(&d.join("x2.npy"), &[5, 2], &[1.0; 10]);
    npy_f64(&d.join("x64.npy"), &[5], &[1.0; 5]);
    npy_f32(&d.join("h.npy"), &[5, 3], &[1.0; 15]);
    // An int64 .npy, as numpy writes np.arange(5).
    let mut int = b"\x93NUMPY\x01\x00".to_vec();
    let mut header = "{'descr': '<i8', 'fortran_order': False, 'shape': (5,), }".to_string();
    // Pad so that magic, version, length, header and newline fill whole 64-byte blocks.
    header.push_str(&" ".repeat(63 - (10 + header.len()) % 64));
    header.push('\n');
    int.extend_from_slice(&(header.len() as u16).to_le_bytes());
    int.extend_from_slice(header.as_bytes());
    int.extend_from_slice(&[0u8; 40]);
    std::fs::write(d.join("int.npy"), int).expect("write");

    let run = |extra: &[&str]| {
        let mut args = vec!["run", gnn, "--out", "y.npy"];
        args.extend_from_slice(extra);
        tigac(d, &args)
    };
    // Malformed edge list: path and line.
    fails_with(&run(&["--kernel", "NeighborSum", "--graph", "bad.txt", "--src", "x=x.npy"]), &["bad.txt:3", "`x`"]);
    // A field with more rows than the edge list's largest id + 1: the
    // message suggests --num-nodes.
    npy_f32(&d.join("x7.npy"), &[7], &[1.0; 7]);
    fails_with(
        &run(&["--kernel", "NeighborSum", "--graph", "g.txt", "--src", "x=x7.npy"]),
        &["shape [7], expected [5]", "largest id + 1 = 5", "pass --num-nodes 7"],
    );
    // Out-of-range node id with --num-nodes.
    fails_with(
        &run(&["--kernel", "NeighborSum", "--graph", "g.txt", "--num-nodes", "3", "--src", "x=x.npy"]),
        &["g.txt:5", "node id 3", "out of range", "3 nodes"],
    );
    // Missing graph file.
    fails_with(&run(&["--kernel", "NeighborSum", "--graph", "nope.txt", "--src", "x=x.npy"]), &["nope.txt"]);
    // Wrong shape: the field, expected and actual.
    fails_with(&run(&["--kernel", "NeighborSum", "--graph", "g.txt", "--src", "x=x2.npy"]), &["`x`", "[5]", "[5, 2]", "x2.npy"]);
    // Wrong dtype: an integer file, and mixed f32/f64 fields.
    fails_with(&run(&["--kernel", "NeighborSum", "--graph", "g.txt", "--src", "x=int.npy"]), &["`x`", "<i8", "<f4", "int.npy"]);
    fails_with(
        &run(&[
            "--kernel",
            "GatAttention",
            "--graph",
            "g.txt",
            "--src",
            "h=h.npy",
            "--src",
            "a_src=x.npy",
            "--dst",
            "a_dst=x64.npy",
        ]),
        &["a_dst", "f64", "f32"],
    );
    // Unknown kernel: the available ones are listed.
    fails_with(
        &run(&["--kernel", "Nope", "--graph", "g.txt", "--src", "x=x.npy"]),
        &["Nope", "NeighborSum", "GcnNorm", "EdgeGate"],
    );
    // Missing field: its name and expected shape.
    fails_with(
        &run(&["--kernel", "GcnNorm", "--graph", "g.txt", "--src", "h=h.npy", "--src", "cs=x.npy", "--dst", "cd=x.npy"]),
        &["`w`", "[8]", "--edge w="],
    );
    // Unknown field name.
    fails_with(&run(&["--kernel", "NeighborSum", "--graph", "g.txt", "--src", "x=x.npy", "--src", "z=x.npy"]), &["`z`", "x"]);
    // Missing .npy file.
    fails_with(&run(&["--kernel", "NeighborSum", "--graph", "g.txt", "--src", "x=missing.npy"]), &["`x`", "missing.npy"]);
    // Role flag without `=`: a usage error (exit 2), explained.
    let o = run(&["--kernel", "NeighborSum", "--graph", "g.txt", "--src", "x"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("NAME=FILE.npy") && !stderr(&o).contains("panicked"), "{}", stderr(&o));

    // A kernel file with a front-end error: file:line:col, the line, a caret.
    let broken = "#[message_passing(reduce = sum)]\npub mod Bad {\n    pub struct Src { pub x: f32 }\n    pub fn edge(src: &Src) -> f32 { for i in 0..3 {} src.x }\n}\n";
    std::fs::write(d.join("bad.rs"), broken).expect("write kernel");
    for cmd in ["explain", "compile"] {
        let o = tigac(d, &[cmd, "bad.rs"]);
        fails_with(&o, &["bad.rs:4:", "error:", "pub fn edge(src: &Src) -> f32 { for i in 0..3 {} src.x }", "^"]);
        let err = stderr(&o);
        let lines: Vec<&str> = err.lines().collect();
        let caret_line = lines.iter().position(|l| l.trim_end().ends_with('^')).expect("caret line");
        let src_line = lines[caret_line - 1];
        let caret_col = lines[caret_line].find('^').expect("caret");
        assert_eq!(&src_line[caret_col..caret_col + 3], "for", "caret under the loop:\n{err}");
    }
    let o = tigac(d, &["run", "bad.rs", "--kernel", "Bad", "--graph", "g.txt", "--src", "x=x.npy", "--out", "y.npy"]);
    fails_with(&o, &["bad.rs:4:"]);
    // Syntax errors too.
    std::fs::write(
        d.join("syntax.rs"),
        "#[message_passing(reduce = sum)]\npub mod Bad {\n    pub fn edge() -> f32 { let = 1.0; 2.0 }\n}\n",
    )
    .expect("write");
    fails_with(&tigac(d, &["explain", "syntax.rs"]), &["syntax.rs:3:", "^"]);
    // f32 and f64 meeting in one operation: rustc refuses this kernel on
    // the macro path, so tigac refuses the kernel file, at the operation.
    std::fs::write(
        d.join("mixed.rs"),
        "#[message_passing(reduce = sum)]\npub mod Mixed {\n    pub struct Src { pub x: f32 }\n    pub struct Dst { pub y: f64 }\n    pub fn edge(src: &Src, dst: &Dst) -> f32 { 2.0 * src.x + dst.y }\n}\n",
    )
    .expect("write");
    let o = tigac(d, &["explain", "mixed.rs"]);
    fails_with(&o, &["mixed.rs:5:", "mixes f32 and f64", "^"]);
    // Two kernels of one name: the second is an error.
    let one = "#[message_passing(reduce = sum)]\npub mod Twice {\n    pub struct Src { pub x: f32 }\n    pub fn edge(src: &Src) -> f32 { src.x }\n}\n";
    std::fs::write(d.join("twice.rs"), format!("{one}{one}")).expect("write");
    fails_with(&tigac(d, &["explain", "twice.rs"]), &["twice.rs:7:", "a second kernel named `Twice`"]);
    // A struct with two fields of one name: the second is an error.
    std::fs::write(
        d.join("dupfield.rs"),
        "#[message_passing(reduce = sum)]\npub mod Dup {\n    pub struct Src { pub x: f32, pub x: f32 }\n    pub fn edge(src: &Src) -> f32 { src.x }\n}\n",
    )
    .expect("write");
    fails_with(&tigac(d, &["explain", "dupfield.rs"]), &["dupfield.rs:3:", "field `x` is already declared in `Src`"]);
    // A damaged artifact names the artifact.
    std::fs::write(d.join("broken.tiga"), "{\"format\": \"tiga-artifact\", \"version\": 1, \"kernels\": [{}]}").expect("write");
    fails_with(&tigac(d, &["explain", "broken.tiga"]), &["broken.tiga"]);
}

#[test]
fn explain_lists_the_passes_in_order() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let o = tigac(&root, &["explain", "examples/kernels/gnn.rs", "--kernel", "Smoothing"]);
    ok(&o);
    let text = stdout(&o);
    let mut from = 0;
    for pass in
        ["capture-message-passing-udf", "analyze-reducer-algebra", "lower-csr-to-gather-segment", "fuse-edge-node-regions"]
    {
        let at = text[from..].find(pass).unwrap_or_else(|| panic!("`{pass}` missing or out of order:\n{text}"));
        from += at + pass.len();
    }
    assert!(!text.contains("kernel GcnNorm"), "only the named kernel");
}

#[test]
fn explain_with_a_width_shows_code_generation() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let o = tigac(&root, &["explain", "examples/kernels/gnn.rs", "--kernel", "VecSum", "--width", "128"]);
    ok(&o);
    let text = stdout(&o);
    for want in [
        "widths [128]",
        "as f32x4 SIMD (128 bits)",
        "in 16 vector registers",
        "feature blocks: 64 of 128 lanes, 2 passes",
        "touches the source rows 32 edges ahead",
        // The plan behind the notes, printed whole.
        "code-generation plan for VecSum (f32, widths [128], CSR rows):",
        "body k1 over w0 (128 lanes): SIMD, unrolled",
        "feature blocks: w0 in blocks of 64 lanes, 2 passes over each row's edges",
    ] {
        assert!(text.contains(want), "`{want}` missing:\n{text}");
    }
    let o = tigac(&root, &["explain", "examples/kernels/gnn.rs", "--kernel", "VecSum", "--width", "16", "--dtype", "f64"]);
    ok(&o);
    let text = stdout(&o);
    assert!(text.contains("f64 widths [16]") && text.contains("f64x2") && !text.contains("feature blocks"), "{text}");
    // A usage error (clap's exit status 2), naming the flag.
    let bad = tigac(&root, &["explain", "examples/kernels/gnn.rs", "--width", "0"]);
    assert!(!bad.status.success() && stderr(&bad).contains("--width"), "{}", stderr(&bad));
}

#[test]
fn emit_writes_each_stage() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::create_dir(d.join("build")).expect("mkdir");
    let gnn = gnn_path();
    let o = tigac(
        d,
        &["compile", gnn.to_str().expect("utf8"), "--kernel", "GcnNorm", "--emit", "ir,loop,clif,asm", "-o", "build/k.tiga"],
    );
    ok(&o);
    assert!(d.join("build/k.tiga").is_file());
    for stage in ["ir", "loop", "clif", "asm"] {
        let p = d.join(format!("build/k.GcnNorm.{stage}.txt"));
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(text.lines().count() > 3, "{stage} is nearly empty:\n{text}");
        assert!(stdout(&o).contains(&format!("k.GcnNorm.{stage}.txt")));
    }
    let ir = std::fs::read_to_string(d.join("build/k.GcnNorm.ir.txt")).expect("ir");
    assert!(ir.contains(";; after capture-message-passing-udf") && ir.contains(";; after fuse-edge-node-regions"));
    let clif = std::fs::read_to_string(d.join("build/k.GcnNorm.clif.txt")).expect("clif");
    assert!(clif.contains("f32") && clif.contains("F = 16"), "{}", clif.lines().next().unwrap_or(""));
    // The artifact then runs like the source.
    let o = tigac(d, &["explain", "build/k.tiga"]);
    ok(&o);
    assert!(stdout(&o).contains("kernel GcnNorm"));
}

#[test]
fn every_subcommand_has_help() {
    let d = std::env::temp_dir();
    for (cmd, word) in [("compile", "artifact"), ("explain", "compiler did"), ("run", "graph"), ("serve", "storage server")] {
        let o = tigac(&d, &[cmd, "--help"]);
        ok(&o);
        assert!(stdout(&o).contains(word), "{cmd} --help:\n{}", stdout(&o));
    }
    let o = tigac(&d, &["run", "--kernel"]);
    assert_eq!(o.status.code(), Some(2));
}
