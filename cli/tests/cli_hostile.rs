//! `tigac` on hostile and careless input, from the outside: every case
//! ends with exit 1 and a message that names the file and the problem,
//! never a signal, a panic, a hang or a silently different answer.

use std::path::Path;

mod common;
use common::*;

fn neighbor_sum(d: &Path, graph: &str, extra: &[&str]) -> std::process::Output {
    let gnn = gnn_path();
    let mut args = vec!["run", gnn.to_str().expect("utf8"), "--kernel", "NeighborSum", "--graph", graph, "--src", "x=x.npy"];
    args.extend_from_slice(extra);
    tigac(d, &args)
}

fn out_of(d: &Path, name: &str) -> Vec<f32> {
    tiga_runtime::read_npy(d.join(name)).expect("output").as_f32().expect("f32").to_vec()
}

#[test]
fn edge_lists_end_lines_at_cr_lf_or_crlf_and_refuse_extra_columns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    npy_f32(&d.join("x.npy"), &[4], &[1.0, 10.0, 100.0, 1000.0]);
    std::fs::write(d.join("lf.txt"), "0 1\n1 2\n2 3\n3 0\n").expect("write");
    ok(&neighbor_sum(d, "lf.txt", &["--out", "lf.npy"]));
    let want = out_of(d, "lf.npy");
    assert_eq!(want, vec![1000.0, 1.0, 10.0, 100.0]);
    // CR only (as old Mac editors write): four edges, not one line with
    // extra columns.
    std::fs::write(d.join("cr.txt"), "0 1\r1 2\r2 3\r3 0\r").expect("write");
    ok(&neighbor_sum(d, "cr.txt", &["--out", "cr.npy"]));
    assert_eq!(out_of(d, "cr.npy"), want);
    // A weight column is refused by default (the kernel would not see it);
    // --ignore-extra-columns reads the first two columns.
    std::fs::write(d.join("w.txt"), "0 1 0.5\n1 2 0.5\n2 3 0.5\n3 0 0.5\n").expect("write");
    fails_with(&neighbor_sum(d, "w.txt", &["--out", "w.npy"]), &["w.txt:1", "column 3", "--ignore-extra-columns"]);
    assert!(!d.join("w.npy").exists());
    ok(&neighbor_sum(d, "w.txt", &["--out", "w.npy", "--ignore-extra-columns"]));
    assert_eq!(out_of(d, "w.npy"), want);
    // convert follows the same rules.
    fails_with(&tigac(d, &["convert", "w.txt", "w.gfg"]), &["w.txt:1", "column 3"]);
    ok(&tigac(d, &["convert", "w.txt", "w.gfg", "--ignore-extra-columns"]));
    ok(&tigac(d, &["convert", "cr.txt", "cr.gfg"]));
    ok(&neighbor_sum(d, "cr.gfg", &["--out", "crg.npy"]));
    assert_eq!(out_of(d, "crg.npy"), want);
}

#[cfg(unix)]
#[test]
fn endless_inputs_are_refused_after_their_first_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    npy_f32(&d.join("x.npy"), &[4], &[1.0, 2.0, 3.0, 4.0]);
    std::fs::write(d.join("g.txt"), "0 1\n1 2\n2 3\n3 0\n").expect("write");
    let start = std::time::Instant::now();
    fails_with(&neighbor_sum(d, "/dev/zero", &["--out", "y.npy"]), &["/dev/zero:1", "longer than 65536 bytes"]);
    let gnn = gnn_path();
    let run = |src: &str| {
        tigac(
            d,
            &["run", gnn.to_str().expect("utf8"), "--kernel", "NeighborSum", "--graph", "g.txt", "--src", src, "--out", "y.npy"],
        )
    };
    fails_with(&run("x=/dev/zero"), &["/dev/zero", "not a .npy file"]);
    // A header that promises far more data than the file holds is refused
    // from the file's size, before the data is allocated.
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (4000000000, 64), }";
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    let padded = format!("{header:<117}\n");
    bytes.extend_from_slice(&(padded.len() as u16).to_le_bytes());
    bytes.extend_from_slice(padded.as_bytes());
    bytes.extend_from_slice(&[0u8; 16]);
    std::fs::write(d.join("huge.npy"), bytes).expect("write");
    fails_with(&run("x=huge.npy"), &["huge.npy", "truncated", "1024000000000 bytes"]);
    assert!(start.elapsed().as_secs() < 60, "refusals took {:?}", start.elapsed());
}

#[test]
fn a_damaged_artifact_is_an_error_in_explain_and_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::copy(gnn_path(), d.join("gnn.rs")).expect("copy");
    ok(&tigac(d, &["compile", "gnn.rs", "--kernel", "NeighborSum", "-o", "k.tiga"]));
    let text = std::fs::read_to_string(d.join("k.tiga")).expect("read");
    // The edge region's first output names a value past its end (the
    // checksum dropped, as in a file from before checksums).
    let mut v: serde_json::Value = serde_json::from_str(&text).expect("json");
    v.as_object_mut().expect("object").remove("checksum");
    *v.pointer_mut("/kernels/0/captured/edge/outputs/0").expect("edge outputs") = serde_json::json!(4096);
    std::fs::write(d.join("bad.tiga"), serde_json::to_string(&v).expect("json")).expect("write");
    fails_with(&tigac(d, &["explain", "bad.tiga"]), &["bad.tiga", "%4096"]);
    npy_f32(&d.join("x.npy"), &[2], &[1.0, 2.0]);
    std::fs::write(d.join("g.txt"), "0 1\n1 0\n").expect("write");
    let o = tigac(d, &["run", "bad.tiga", "--kernel", "NeighborSum", "--graph", "g.txt", "--src", "x=x.npy", "--out", "y.npy"]);
    fails_with(&o, &["bad.tiga", "%4096"]);
    // An edited constant fails the checksum.
    let edited = text.replacen("\"outputs\":[", "\"outputs\":[ ", 1);
    std::fs::write(d.join("edited.tiga"), edited).expect("write");
    fails_with(&tigac(d, &["explain", "edited.tiga"]), &["edited.tiga", "checksum mismatch"]);
}
