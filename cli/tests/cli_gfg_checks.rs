//! `tigac run` and `tigac info` on `.gfg` files that are corrupt under
//! valid-looking checksums: a block whose bytes changed under a recomputed
//! whole-section checksum, and contents that break the format's invariants
//! under recomputed checksums. Each is exit 1 naming the file and section
//! (and block), never a silent answer.

mod common;
use common::*;

#[path = "../../runtime/storage/tests/gfg_raw/mod.rs"]
mod gfg_raw;
use gfg_raw::*;

/// `tigac run KERNELS --kernel VecSum --graph FILE --out OUT` (the file's
/// own `h` field).
fn vec_sum(d: &std::path::Path, file: &str, out: &str) -> std::process::Output {
    let gnn = gnn_path();
    let gnn = gnn.to_str().expect("utf8 path");
    tigac(d, &["run", gnn, "--kernel", "VecSum", "--graph", file, "--out", out, "--page-rows", "2"])
}

#[test]
fn a_flipped_bit_in_cols_under_a_recomputed_checksum_fails_the_run_naming_the_block() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (_, bytes) = sample(d, true);
    ok(&vec_sum(d, "sample.gfg", "good.npy"));
    let cols = read_raw(&bytes).section("cols").clone();
    let mut bad = bytes.clone();
    bad[cols.offset as usize + 5] ^= 0x04;
    fix_whole_crcs_only(&mut bad);
    std::fs::write(d.join("bad.gfg"), &bad).expect("write");
    let o = vec_sum(d, "bad.gfg", "bad.npy");
    fails_with(&o, &["bad.gfg", "checksum mismatch in section `cols`, block 0 (bytes "]);
    assert!(!d.join("bad.npy").exists(), "no output from a corrupt file");
    let o = tigac(d, &["info", "bad.gfg"]);
    fails_with(&o, &["bad.gfg", "section `cols`, block 0"]);
    assert!(stdout(&o).contains("cols                     FAILED: "), "{}", stdout(&o));
    // In version 1 the same file has no block table: the run cannot tell
    // (documented), and `info` compares the whole-section checksums.
    let mut v1 = to_version_1(&bytes);
    let at = read_raw(&v1).section("cols").offset as usize + 5;
    v1[at] ^= 0x04;
    std::fs::write(d.join("v1.gfg"), &v1).expect("write");
    fails_with(&tigac(d, &["info", "v1.gfg"]), &["v1.gfg", "checksum mismatch in section `cols`"]);
}

#[test]
fn info_reports_each_broken_invariant_and_runs_refuse_what_they_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (_, bytes) = sample(d, true);
    let o = tigac(d, &["info", "sample.gfg"]);
    ok(&o);
    assert_eq!(stdout(&o).matches(" ok\n").count(), 11, "{}", stdout(&o));
    let set = |b: &mut Vec<u8>, name: &str, byte: usize, v: &[u8]| {
        let k = at(b, name) + byte;
        b[k..k + v.len()].copy_from_slice(v);
    };
    // (patch, section, what info and the error say, whether VecSum reads it)
    type Patch = Box<dyn Fn(&mut Vec<u8>)>;
    let cases: Vec<(Patch, &str, &str, bool)> = vec![
        (Box::new(move |b| set(b, "offsets", 0, &1u64.to_le_bytes())), "offsets", "offsets[0] = 1, not 0", true),
        (Box::new(move |b| set(b, "offsets", 40, &7u64.to_le_bytes())), "offsets", "offsets[5] = 7, not num_edges = 8", true),
        (
            Box::new(move |b| set(b, "offsets", 8, &6u64.to_le_bytes())),
            "offsets",
            "offsets decrease at row 2: offsets[1] = 6 > offsets[2] = 5",
            true,
        ),
        (Box::new(move |b| set(b, "cols", 12, &4u32.to_le_bytes())), "cols", "cols[3] = 4 is out of range for 4 sources", true),
        (
            Box::new(move |b| set(b, "edge_ids", 8, &0u64.to_le_bytes())),
            "edge_ids",
            "edge_ids[1] = 0 repeats edge_ids[0]: not a permutation",
            false,
        ),
        (
            Box::new(move |b| set(b, "t_cols", 28, &5u32.to_le_bytes())),
            "t_cols",
            "t_cols[7] = 5 is out of range for 5 destinations",
            false,
        ),
        (
            Box::new(move |b| set(b, "t_offsets", 8, &3u64.to_le_bytes())),
            "t_cols",
            "source 0 has 2 out-edge(s) in the graph but 3 in its transposed row",
            false,
        ),
    ];
    for (patch, section, detail, read_by_run) in cases {
        let mut b = bytes.clone();
        patch(&mut b);
        fix_section_crcs(&mut b);
        std::fs::write(d.join("broken.gfg"), &b).expect("write");
        let o = tigac(d, &["info", "broken.gfg"]);
        fails_with(&o, &["broken.gfg", &format!("invariant violated (section `{section}`)"), detail]);
        let out = stdout(&o);
        assert!(out.contains("checksums: ok"), "{out}");
        assert!(out.contains(&format!("VIOLATED: {detail}")), "{out}");
        let lines = out.lines().skip_while(|l| *l != "invariants:").count();
        assert_eq!(lines, 12, "a heading and one line per invariant:\n{out}");
        let o = vec_sum(d, "broken.gfg", "out.npy");
        if read_by_run {
            fails_with(&o, &["broken.gfg", &format!("section `{section}`"), detail]);
            assert!(!d.join("out.npy").exists());
        } else {
            // A forward kernel with no edge fields reads neither the edge
            // ids nor the transpose: its answer does not depend on them.
            ok(&o);
        }
    }
}
