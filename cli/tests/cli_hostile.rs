//! `tigac` on hostile and careless input, from the outside: every case
//! ends with exit 1 and a message that names the file and the problem,
//! never a signal, a panic, a hang or a silently different answer.

use std::path::Path;

mod common;
use common::*;

fn neighbor_sum(d: &Path, graph: &str, extra: &[&str]) -> std::process::Output {
    sum_of(d, graph, "x=x.npy", extra)
}

/// `tigac run` of NeighborSum over `graph` with `--src SRC`.
fn sum_of(d: &Path, graph: &str, src: &str, extra: &[&str]) -> std::process::Output {
    let gnn = gnn_path();
    let mut args = vec!["run", gnn.to_str().expect("utf8"), "--kernel", "NeighborSum", "--graph", graph, "--src", src];
    args.extend_from_slice(extra);
    tigac(d, &args)
}

fn out_of(d: &Path, name: &str) -> Vec<f32> {
    tiga_storage::read_npy(d.join(name)).expect("output").as_f32().expect("f32").to_vec()
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
    let run = |src: &str| sum_of(d, "g.txt", src, &["--out", "y.npy"]);
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

#[cfg(unix)]
#[test]
fn outputs_never_replace_inputs_devices_or_links() {
    use std::os::unix::fs::FileTypeExt as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    npy_f32(&d.join("x.npy"), &[4], &[1.0, 10.0, 100.0, 1000.0]);
    std::fs::write(d.join("g.txt"), "0 1\n1 2\n2 3\n3 0\n").expect("write");
    let x = std::fs::read(d.join("x.npy")).expect("read");
    // An output that is an input, however it is spelled: refused, the input
    // untouched.
    std::fs::create_dir(d.join("sub")).expect("mkdir");
    std::fs::hard_link(d.join("x.npy"), d.join("hard.npy")).expect("hard link");
    for out in ["x.npy", "sub/../x.npy", "./x.npy", "hard.npy", "g.txt"] {
        fails_with(&neighbor_sum(d, "g.txt", &["--out", out]), &[out, "is the input", "overwrite"]);
    }
    assert_eq!(std::fs::read(d.join("x.npy")).expect("read"), x);
    // A device is not replaced by a regular file.
    fails_with(&neighbor_sum(d, "g.txt", &["--out", "/dev/null"]), &["/dev/null", "not a regular file"]);
    assert!(std::fs::symlink_metadata("/dev/null").expect("stat").file_type().is_char_device());
    // A symbolic link stays a link; the file it names gets the output.
    std::os::unix::fs::symlink("real.npy", d.join("link.npy")).expect("symlink");
    ok(&neighbor_sum(d, "g.txt", &["--out", "link.npy"]));
    assert!(std::fs::symlink_metadata(d.join("link.npy")).expect("stat").file_type().is_symlink());
    assert_eq!(out_of(d, "real.npy"), vec![1000.0, 1.0, 10.0, 100.0]);
    // Gradients that would land on an input.
    std::fs::create_dir(d.join("grads")).expect("mkdir");
    std::fs::copy(d.join("x.npy"), d.join("grads/src.x.npy")).expect("copy");
    let o = sum_of(d, "g.txt", "x=grads/src.x.npy", &["--out", "y.npy", "--grads", "grads"]);
    fails_with(&o, &["--grads", "src.x.npy", "is the input"]);
    assert_eq!(std::fs::read(d.join("grads/src.x.npy")).expect("read"), x);
    assert!(!d.join("y.npy").exists(), "nothing is written when an output is refused");
    // An output and a gradient on one file, however spelled.
    std::fs::create_dir(d.join("g2")).expect("mkdir");
    for out in ["g2/src.x.npy", "./g2/../g2/src.x.npy"] {
        let o = neighbor_sum(d, "g.txt", &["--out", out, "--grads", "g2"]);
        fails_with(&o, &["would both be written", "output `out`", "gradient of src field `x`"]);
    }
    let abs = d.join("g2/src.x.npy");
    let o = neighbor_sum(d, "g.txt", &["--out", abs.to_str().expect("utf8"), "--grads", "./g2"]);
    fails_with(&o, &["would both be written"]);
    assert!(!d.join("g2/src.x.npy").exists());
    // compile and convert: the output may not be the input either.
    std::fs::copy(gnn_path(), d.join("k.rs")).expect("copy");
    let k = std::fs::read(d.join("k.rs")).expect("read");
    fails_with(&tigac(d, &["compile", "k.rs", "-o", "k.rs"]), &["k.rs", "is the input"]);
    assert_eq!(std::fs::read(d.join("k.rs")).expect("read"), k);
    let g = std::fs::read(d.join("g.txt")).expect("read");
    fails_with(&tigac(d, &["convert", "g.txt", "g.txt"]), &["g.txt", "is the input"]);
    assert_eq!(std::fs::read(d.join("g.txt")).expect("read"), g);
}

/// `tigac ARGS` in `d` with its address space capped at 1 GiB
/// (`ulimit -v`): an allocation past that fails instead of succeeding.
#[cfg(unix)]
fn tigac_within_1gib(d: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new("sh")
        .current_dir(d)
        .arg("-c")
        .arg("ulimit -v 1048576 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_tigac"))
        .args(args)
        .output()
        .expect("spawn sh")
}

#[cfg(unix)]
#[test]
fn small_inputs_never_need_more_than_1_gib_before_running_or_refusing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let gnn = gnn_path();
    let gnn = gnn.to_str().expect("utf8");
    npy_f32(&d.join("x.npy"), &[2], &[1.0, 2.0]);
    npy_f32(&d.join("x50.npy"), &[50], &[1.0; 50]);
    npy_f32(&d.join("w.npy"), &[1], &[0.5]);
    std::fs::write(d.join("big.txt"), "0 4294967295\n").expect("write");
    std::fs::write(d.join("g.txt"), "0 1\n1 0\n").expect("write");
    std::fs::write(
        d.join("big.mtx"),
        "%%MatrixMarket matrix coordinate real general\n4294967296 4294967296 2\n1 1 1.0\n4294967296 4294967296 2.0\n",
    )
    .expect("write");
    std::fs::write(
        d.join("edge_only.rs"),
        "#[message_passing(reduce = sum)]\npub mod EdgeOnly {\n    use tiga::lang::*;\n    pub struct Edge { pub w: f32 }\n    pub fn edge(edge: &Edge) -> f32 { edge.w }\n}\n",
    )
    .expect("write");
    // Node fields that cannot fit the graph's node count are refused before
    // the graph is built (2^32 nodes from one edge; 300 million given).
    let run = |graph: &str, field: &str, extra: &[&str]| {
        let mut args = vec!["run", gnn, "--kernel", "NeighborSum", "--graph", graph, "--src", field, "--out", "y.npy"];
        args.extend_from_slice(extra);
        tigac_within_1gib(d, &args)
    };
    let start = std::time::Instant::now();
    fails_with(&run("big.txt", "x=x.npy", &[]), &["`x`", "x.npy", "4294967296"]);
    fails_with(&run("g.txt", "x=x50.npy", &["--num-nodes", "300000000"]), &["`x`", "x50.npy", "300000000"]);
    assert!(start.elapsed().as_secs() < 20, "shape refusals took {:?}", start.elapsed());
    // Where every field fits, the CSR of 2^32 rows (32 GiB of offsets) is
    // asked for fallibly and refused with its size.
    let o = tigac_within_1gib(
        d,
        &["run", "edge_only.rs", "--kernel", "EdgeOnly", "--graph", "big.txt", "--edge", "w=w.npy", "--out", "y.npy"],
    );
    fails_with(&o, &["could not allocate", "GiB"]);
    fails_with(&run("big.mtx", "x=x.npy", &[]), &["big.mtx"]);
    fails_with(
        &tigac_within_1gib(d, &["explain", gnn, "--kernel", "NeighborSum", "--graph", "big.txt"]),
        &["could not allocate"],
    );
    assert!(!d.join("y.npy").exists());
    // A .gfg's row offsets grow with the node count a three-line input
    // declares: convert refuses past its output limit instead of writing
    // 64 GiB, and nothing is left behind.
    for input in ["big.txt", "big.mtx"] {
        let o = tigac_within_1gib(d, &["convert", input, "big.gfg", "--transpose"]);
        fails_with(&o, &[input, "would take up to 64.0 GiB", "--max-output 65G"]);
    }
    assert!(!d.join("big.gfg").exists());
    assert_eq!(
        std::fs::read_dir(d)
            .expect("ls")
            .filter(|e| e.as_ref().is_ok_and(|e| e.file_name().to_string_lossy().starts_with('.')))
            .count(),
        0
    );
    // convert's --memory is an upper bound: a budget far beyond the input
    // (and the machine) is cut to what the input can need.
    for budget in ["100G", "1T", "18446744073709551615"] {
        let o = tigac_within_1gib(d, &["convert", "g.txt", "g.gfg", "--memory", budget]);
        ok(&o);
        assert!(stderr(&o).contains("cut to what the input and this machine can use"), "{}", stderr(&o));
    }
}

#[cfg(target_os = "linux")]
#[test]
fn convert_works_in_a_private_folder_and_clears_what_killed_runs_left() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let mut text = String::new();
    for i in 0..20_000u32 {
        text.push_str(&format!("{} {}\n", (i * 7919) % 5000, i % 5000));
    }
    std::fs::write(d.join("g.txt"), &text).expect("write");
    // What a convert killed by a signal leaves: its folder, with a sorted
    // run and a half-written file; its process is gone (no such pid).
    let dead = d.join(".tigac-convert.4194304999.AbC123");
    std::fs::create_dir(&dead).expect("mkdir");
    std::fs::write(dead.join("lock"), b"").expect("write");
    std::fs::write(dead.join(".g.gfg.x.run"), vec![7u8; 4096]).expect("write");
    std::fs::write(dead.join(".g.gfg.y.tmp"), vec![7u8; 4096]).expect("write");
    // A folder of a conversion still running (this test's own process) and
    // an unrelated dot-folder stay.
    let live = d.join(format!(".tigac-convert.{}.XyZ789", std::process::id()));
    std::fs::create_dir(&live).expect("mkdir");
    std::fs::create_dir(d.join(".tigac-convert-notes")).expect("mkdir");
    // A folder whose pid this /proc does not show but whose lock is held
    // (a conversion in another PID namespace, or on another host) stays.
    let held = d.join(".tigac-convert.4194304998.Held00");
    std::fs::create_dir(&held).expect("mkdir");
    let lock = std::fs::File::create(held.join("lock")).expect("lock file");
    {
        use std::os::fd::AsRawFd as _;
        // SAFETY: flock on a descriptor this test owns and keeps open.
        assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
    }
    // A small budget: several sorted runs.
    ok(&tigac(d, &["convert", "g.txt", "g.gfg", "--transpose", "--memory", "64K"]));
    assert!(!dead.exists(), "the folder of a dead conversion is removed");
    assert!(live.exists() && held.exists() && d.join(".tigac-convert-notes").exists());
    drop(lock);
    let mut names: Vec<String> =
        std::fs::read_dir(d).expect("ls").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    let own = format!(".tigac-convert.{}.XyZ789", std::process::id());
    let mut want =
        vec![".tigac-convert-notes".to_string(), own, ".tigac-convert.4194304998.Held00".into(), "g.gfg".into(), "g.txt".into()];
    want.sort();
    assert_eq!(names, want);
    // The same file as converting in memory would write.
    let g = tiga_storage::read_edge_list(d.join("g.txt"), None).expect("graph");
    let want = d.join("want.gfg");
    let none: [(tiga_storage::FieldRole, &str, tiga::TensorView<'_>); 0] = [];
    tiga_storage::save_gfg(&want, &g, true, &none).expect("save");
    assert_eq!(std::fs::read(d.join("g.gfg")).expect("read"), std::fs::read(&want).expect("read"));
}
