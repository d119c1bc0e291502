//! End-to-end tests of `tigac convert`, `tigac info` and paged `tigac run`
//! / `tigac explain` on `.gfg` files: the built executable, run in a
//! temporary directory, checked from the outside.

use std::path::Path;

use tiga::TensorView;
use tiga_runtime::Graph;
use tiga_storage::{read_edge_list, read_matrix_market};
use tiga_storage::{save_gfg, FieldRole, GfgFile};

mod common;
use common::*;

/// A random edge list over `n` nodes with `m` edges: comments (`#`, `%`,
/// indented), blank lines, CRLF endings, weight columns, self loops,
/// repeated (multi-)edges, and nodes with no in-edges (ids are drawn from
/// the even nodes only as destinations).
fn random_edge_list(seed: u64, n: u64, m: usize) -> String {
    let mut rng = Rng(seed | 1);
    let mut text = String::from("# FromNodeId\tToNodeId\n% another comment\n");
    let mut last = (0, 0);
    for k in 0..m {
        let (src, dst) = match rng.next() % 10 {
            0 if k > 0 => last, // a multi-edge, right after its twin
            1 => {
                let v = rng.next() % n;
                (v, v - v % 2) // a self loop when v is even
            }
            _ => (rng.next() % n, (rng.next() % n) & !1), // odd nodes have empty rows
        };
        last = (src, dst);
        match rng.next() % 12 {
            0 => text.push_str(&format!("{src}\t{dst}\r")),
            1 => text.push_str(&format!("  {src} {dst}\r\n")),
            2 => text.push_str(&format!("\n   # indented comment\n{src}  {dst}\n")),
            _ => text.push_str(&format!("{src} {dst}\n")),
        }
    }
    text
}

fn temp_leftovers(d: &Path) -> Vec<String> {
    std::fs::read_dir(d)
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') && (n.ends_with(".tmp") || n.ends_with(".run")))
        .collect()
}

#[test]
fn convert_under_a_tiny_budget_matches_the_in_memory_reader() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    for (case, (n, m, num_nodes)) in
        [(40u64, 3000usize, None), (7, 500, Some(12usize)), (1, 0, None), (300, 2000, None)].into_iter().enumerate()
    {
        let txt = format!("g{case}.txt");
        std::fs::write(d.join(&txt), random_edge_list(case as u64 + 1, n, m)).expect("write");
        let expected: Graph = read_edge_list(d.join(&txt), num_nodes).expect("reference");
        for transpose in [false, true] {
            let out = format!("g{case}{}.gfg", if transpose { "t" } else { "" });
            let mut args = vec!["convert", txt.as_str(), out.as_str(), "--memory", "4096"];
            let nn = num_nodes.map(|v| v.to_string());
            if let Some(v) = &nn {
                args.extend(["--num-nodes", v.as_str()]);
            }
            if transpose {
                args.push("--transpose");
            }
            let o = tigac(d, &args);
            ok(&o);
            assert!(stderr(&o).contains(&format!("wrote {out}")), "{}", stderr(&o));
            if m >= 1000 {
                // 4096 bytes hold 128 edges per run: many runs, several passes.
                assert!(stderr(&o).contains(" merge pass(es)") && !stderr(&o).contains(" 1 merge pass(es)"), "{}", stderr(&o));
            }
            let f = GfgFile::open(d.join(&out)).expect("open");
            f.verify().expect("checksums");
            let g = f.load_graph().expect("load");
            assert_eq!(g.offsets(), expected.offsets(), "case {case}: offsets");
            assert_eq!(g.cols(), expected.cols(), "case {case}: cols");
            assert_eq!(g.edge_ids(), expected.edge_ids(), "case {case}: edge ids (the user's edge order)");
            assert_eq!(g, expected);
            if transpose {
                assert_eq!(f.load_transposed().expect("load").expect("stored"), expected.transpose(), "case {case}");
                f.validate().expect("valid");
            } else {
                assert!(!f.has_transpose());
            }
            // The same bytes as the in-memory writer's.
            let reference = d.join("reference.gfg");
            save_gfg(&reference, &expected, transpose, &[]).expect("save");
            assert!(std::fs::read(d.join(&out)).expect("read") == std::fs::read(&reference).expect("read"), "case {case}");
        }
    }
    assert!(temp_leftovers(d).is_empty(), "{:?}", temp_leftovers(d));
}

#[test]
fn convert_reads_matrix_market() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let mtx = "%%MatrixMarket matrix coordinate real symmetric\n% c\n5 5 6\n2 1 0.5\n1 1 2\n5 3 1.5\n4 2 -1\n3 3 1e2\n5 1 7\n";
    std::fs::write(d.join("a.mtx"), mtx).expect("write");
    let (expected, _) = read_matrix_market(d.join("a.mtx")).expect("reference");
    ok(&tigac(d, &["convert", "a.mtx", "a.gfg", "--memory", "100", "--transpose"]));
    let f = GfgFile::open(d.join("a.gfg")).expect("open");
    assert_eq!(f.load_graph().expect("load"), expected);
    assert_eq!(f.load_transposed().expect("load").expect("stored"), expected.transpose());

    std::fs::write(d.join("b.mtx"), "%%MatrixMarket matrix coordinate pattern general\n3 4 2\n1 4\n9 1\n").expect("write");
    fails_with(&tigac(d, &["convert", "b.mtx", "b.gfg"]), &["b.mtx:4:", "row index 9 is out of range 1..=3"]);
    fails_with(&tigac(d, &["convert", "a.mtx", "c.gfg", "--num-nodes", "4"]), &["--num-nodes 4 does not match"]);
    assert!(!d.join("b.gfg").exists() && !d.join("c.gfg").exists());
}

#[test]
fn info_prints_the_manifest_and_names_a_corrupt_section() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("g.txt"), random_edge_list(9, 30, 400)).expect("write");
    ok(&tigac(d, &["convert", "g.txt", "g.gfg", "--transpose"]));
    // A field, to see it listed by role.
    let g = read_edge_list(d.join("g.txt"), None).expect("graph");
    let h: Vec<f32> = (0..g.num_src() * 3).map(|i| i as f32).collect();
    save_gfg(
        d.join("f.gfg"),
        &g,
        false,
        &[(FieldRole::Src, "h", TensorView::from_slice_f32(vec![g.num_src(), 3], &h).expect("view"))],
    )
    .expect("save");

    let o = tigac(d, &["info", "g.gfg"]);
    ok(&o);
    let out = stdout(&o);
    for w in [
        "format: gfg 2.0",
        &format!("edges: {}", g.num_edges()),
        "offsets",
        "cols",
        "edge_ids",
        "t_offsets",
        "t_cols",
        "crc32",
        "offset",
        "length",
        "fields: none",
        "transpose: stored",
        "checksums: ok (6 sections verified, 6 blocks)",
        "invariants:",
        "t_offsets[num_src] = num_edges",
    ] {
        assert!(out.contains(w), "info lacks `{w}`:\n{out}");
    }
    let o = tigac(d, &["info", "f.gfg"]);
    ok(&o);
    assert!(stdout(&o).contains("src  h") && stdout(&o).contains(&format!("f32  [{}, 3]", g.num_src())), "{}", stdout(&o));

    // Flip one byte inside `cols`.
    let f = GfgFile::open(d.join("g.gfg")).expect("open");
    let cols = f.sections().iter().find(|s| s.name == "cols").expect("cols").clone();
    drop(f);
    let mut bytes = std::fs::read(d.join("g.gfg")).expect("read");
    bytes[(cols.offset + cols.length / 2) as usize] ^= 0x40;
    std::fs::write(d.join("bad.gfg"), &bytes).expect("write");
    let o = tigac(d, &["info", "bad.gfg"]);
    fails_with(&o, &["bad.gfg", "section `cols`", "checksum mismatch"]);
    assert!(stdout(&o).contains("sections:"), "the manifest is printed before the check: {}", stdout(&o));

    // Not a .gfg; truncated; missing.
    fails_with(&tigac(d, &["info", "g.txt"]), &["g.txt", "not a .gfg file"]);
    std::fs::write(d.join("short.gfg"), &bytes[..100]).expect("write");
    fails_with(&tigac(d, &["info", "short.gfg"]), &["short.gfg", "truncated"]);
    fails_with(&tigac(d, &["info", "missing.gfg"]), &["missing.gfg"]);
}

/// The graph the run tests use: random, with an isolated node (N = 40 > largest id + 1).
fn run_fixture(d: &Path) -> (Graph, usize) {
    std::fs::write(d.join("g.txt"), random_edge_list(5, 37, 300)).expect("write");
    let n = 40;
    let g = read_edge_list(d.join("g.txt"), Some(n)).expect("graph");
    (g, n)
}

#[test]
fn paged_runs_match_in_memory_runs_bit_for_bit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (g, n) = run_fixture(d);
    let e = g.num_edges();
    let f = 4;
    ok(&tigac(d, &["convert", "g.txt", "g.gfg", "--num-nodes", "40", "--memory", "2048"]));
    let h: Vec<f32> = (0..n * f).map(|i| ((i * 7) % 11) as f32 * 0.37 - 1.3).collect();
    let cs: Vec<f32> = (0..n).map(|i| 1.0 / (1.0 + i as f32)).collect();
    let cd: Vec<f32> = (0..n).map(|i| 0.5 + i as f32 * 0.1).collect();
    let w: Vec<f32> = (0..e).map(|i| 0.1 * (i as f32 + 1.0).sqrt()).collect();
    npy_f32(&d.join("h.npy"), &[n, f], &h);
    npy_f32(&d.join("cs.npy"), &[n], &cs);
    npy_f32(&d.join("cd.npy"), &[n], &cd);
    npy_f32(&d.join("w.npy"), &[e], &w);
    let gnn = gnn_path();
    let gnn = gnn.to_str().expect("utf8 path");
    let fields = ["--src", "h=h.npy", "--src", "cs=cs.npy", "--dst", "cd=cd.npy", "--edge", "w=w.npy"];
    let run = |graph: &str, kernel: &str, fields: &[&str], out: &str, extra: &[&str]| {
        let mut args = vec!["run", gnn, "--kernel", kernel, "--graph", graph];
        if graph.ends_with(".txt") {
            args.extend(["--num-nodes", "40"]);
        }
        args.extend(fields);
        args.extend(["--out", out]);
        args.extend(extra);
        let o = tigac(d, &args);
        ok(&o);
        o
    };
    let read = |p: &str| std::fs::read(d.join(p)).expect("read output");

    run("g.txt", "GcnNorm", &fields, "mem.npy", &[]);
    let o = run("g.gfg", "GcnNorm", &fields, "paged.npy", &["--page-rows", "3", "--prefetch", "2"]);
    assert!(
        stderr(&o).contains("paged from g.gfg: 14 page(s), 3 rows per page (last page 1 rows), prefetch depth 2"),
        "{}",
        stderr(&o)
    );
    assert!(read("mem.npy") == read("paged.npy"), "GcnNorm: paged output differs from in-memory");
    for extra in [&["--page-rows", "1", "--prefetch", "0"][..], &["--page-bytes", "64", "--prefetch", "4"], &[]] {
        run("g.gfg", "GcnNorm", &fields, "paged2.npy", extra);
        assert!(read("mem.npy") == read("paged2.npy"), "GcnNorm {extra:?}");
    }

    run("g.txt", "VecSum", &["--src", "h=h.npy"], "vmem.npy", &[]);
    run("g.gfg", "VecSum", &["--src", "h=h.npy"], "vpaged.npy", &["--page-rows", "3", "--prefetch", "2"]);
    assert!(read("vmem.npy") == read("vpaged.npy"), "VecSum: paged output differs from in-memory");

    // Fields stored in the file are used when not given; given ones override them.
    let zeros = vec![0.0f32; n * f];
    save_gfg(
        d.join("fields.gfg"),
        &g,
        false,
        &[
            (FieldRole::Src, "h", TensorView::from_slice_f32(vec![n, f], &h).expect("view")),
            (FieldRole::Edge, "w", TensorView::from_slice_f32(vec![e], &w).expect("view")),
        ],
    )
    .expect("save");
    run("fields.gfg", "GcnNorm", &["--src", "cs=cs.npy", "--dst", "cd=cd.npy"], "ffile.npy", &["--page-rows", "5"]);
    assert!(read("mem.npy") == read("ffile.npy"), "fields read from the file");
    save_gfg(
        d.join("zeros.gfg"),
        &g,
        false,
        &[(FieldRole::Src, "h", TensorView::from_slice_f32(vec![n, f], &zeros).expect("view"))],
    )
    .expect("save");
    run("zeros.gfg", "VecSum", &["--src", "h=h.npy"], "voverride.npy", &[]);
    assert!(read("vmem.npy") == read("voverride.npy"), "a given field overrides the file's");

    // --timing still prints one JSON line.
    let o = run("g.gfg", "VecSum", &["--src", "h=h.npy"], "vt.npy", &["--timing", "--repeat", "2"]);
    let line: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("json");
    assert_eq!(line["runs"], 2);
}

/// The run fixture converted to `g.gfg` in a new directory, and the path
/// of the kernel file.
fn converted_fixture() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    run_fixture(dir.path());
    ok(&tigac(dir.path(), &["convert", "g.txt", "g.gfg", "--num-nodes", "40"]));
    let gnn = gnn_path().to_str().expect("utf8 path").to_string();
    (dir, gnn)
}

#[test]
fn explain_shows_the_realization() {
    let (dir, gnn) = converted_fixture();
    let d = dir.path();
    let gnn = gnn.as_str();
    let o = tigac(d, &["explain", gnn, "--kernel", "VecSum", "--graph", "g.gfg", "--page-rows", "16", "--prefetch", "3"]);
    ok(&o);
    let out = stdout(&o);
    for w in ["kernel VecSum", "realization: paged_csr", "backing file: g.gfg", "3 page(s), 16 rows per page", "prefetch depth 3"]
    {
        assert!(out.contains(w), "explain lacks `{w}`:\n{out}");
    }
    // VecSum has no edge fields: its pages leave the stored edge ids out
    // (and a byte budget holds more of its rows); EdgeGate reads them.
    assert!(out.contains("edge ids stored"), "the fixture's edges are not in CSR order:\n{out}");
    assert!(out.contains("edge ids not read (no edge fields or outputs)"), "{out}");
    let bytes = |kernel: &str| {
        let o = tigac(d, &["explain", gnn, "--kernel", kernel, "--graph", "g.gfg", "--page-bytes", "96"]);
        ok(&o);
        stdout(&o)
    };
    let (vec_sum, gate) = (bytes("VecSum"), bytes("EdgeGate"));
    assert!(!gate.contains("edge ids not read"), "{gate}");
    let pages = |out: &str| -> usize {
        let at = out.find(" page(s)").expect("page count");
        out[..at].rsplit(' ').next().and_then(|n| n.parse().ok()).expect("a number of pages")
    };
    assert!(pages(&vec_sum) < pages(&gate), "96 bytes hold 24 edges without ids, 8 with:\n{vec_sum}\n{gate}");
    let o = tigac(d, &["explain", gnn, "--kernel", "VecSum"]);
    ok(&o);
    assert!(stdout(&o).contains("realization: in_memory"), "{}", stdout(&o));
    let o = tigac(d, &["explain", gnn, "--kernel", "VecSum", "--graph", "g.txt"]);
    ok(&o);
    assert!(stdout(&o).contains("realization: in_memory") && stdout(&o).contains("graph: g.txt"), "{}", stdout(&o));
    fails_with(&tigac(d, &["explain", gnn, "--kernel", "VecSum", "--page-rows", "3"]), &["--page-rows", "--graph FILE.gfg"]);
}

#[test]
fn bad_inputs_are_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("bad.txt"), "0 1\n# ok\n2 x\n").expect("write");
    fails_with(
        &tigac(d, &["convert", "bad.txt", "bad.gfg"]),
        &["bad.txt:3:", "destination id `x` is not a non-negative integer"],
    );
    std::fs::write(d.join("col.txt"), "0 1\n1 2 w\n").expect("write");
    fails_with(&tigac(d, &["convert", "col.txt", "col.gfg"]), &["col.txt:2:", "column 3 is `w`"]);
    std::fs::write(d.join("range.txt"), "0 1\n\n1 7\n").expect("write");
    fails_with(
        &tigac(d, &["convert", "range.txt", "range.gfg", "--num-nodes", "5"]),
        &["range.txt:3:", "node id 7 is out of range for 5 nodes"],
    );
    std::fs::write(d.join("big.txt"), "4294967296 0\n").expect("write");
    fails_with(&tigac(d, &["convert", "big.txt", "big.gfg"]), &["big.txt:1:", "does not fit in 32 bits"]);
    std::fs::write(d.join("utf.txt"), b"0 1\n\xff 2\n").expect("write");
    fails_with(&tigac(d, &["convert", "utf.txt", "utf.gfg"]), &["utf.txt:2:", "not valid UTF-8"]);
    fails_with(&tigac(d, &["convert", "missing.txt", "m.gfg"]), &["missing.txt"]);
    for out in ["bad.gfg", "col.gfg", "range.gfg", "big.gfg", "utf.gfg", "m.gfg"] {
        assert!(!d.join(out).exists(), "{out} was written");
    }

    // Unwritable destinations: a missing folder, a directory.
    std::fs::write(d.join("g.txt"), "0 1\n1 2\n").expect("write");
    fails_with(&tigac(d, &["convert", "g.txt", "nowhere/g.gfg"]), &["nowhere/g.gfg", "cannot create a temporary"]);
    std::fs::create_dir(d.join("adir")).expect("mkdir");
    fails_with(&tigac(d, &["convert", "g.txt", "adir"]), &["adir", "is a directory"]);
    // A bad budget is a usage error (exit 2).
    let o = tigac(d, &["convert", "g.txt", "g.gfg", "--memory", "lots"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(temp_leftovers(d).is_empty(), "{:?}", temp_leftovers(d));

    // A failed convert leaves an existing OUT as it was.
    ok(&tigac(d, &["convert", "g.txt", "keep.gfg"]));
    let before = std::fs::read(d.join("keep.gfg")).expect("read");
    fails_with(&tigac(d, &["convert", "bad.txt", "keep.gfg"]), &["bad.txt:3:"]);
    assert!(std::fs::read(d.join("keep.gfg")).expect("read") == before);

    // Paged runs: page flags need a .gfg; --grads runs paged too.
    let gnn = gnn_path();
    let gnn = gnn.to_str().expect("utf8 path");
    npy_f32(&d.join("h.npy"), &[3, 2], &[1.0; 6]);
    let base = ["run", gnn, "--kernel", "VecSum", "--src", "h=h.npy", "--out", "o.npy", "--graph"];
    // A paged backward needs the file's transpose.
    fails_with(&tigac(d, &[&base[..], &["keep.gfg", "--grads", "grads"]].concat()), &["keep.gfg", "transpose"]);
    ok(&tigac(d, &["convert", "g.txt", "keep_t.gfg", "--transpose"]));
    ok(&tigac(d, &[&base[..], &["keep_t.gfg", "--grads", "paged_grads", "--page-rows", "1"]].concat()));
    ok(&tigac(d, &[&base[..], &["g.txt", "--grads", "mem_grads"]].concat()));
    let a = std::fs::read(d.join("paged_grads").join("src.h.npy")).expect("paged gradient");
    let b = std::fs::read(d.join("mem_grads").join("src.h.npy")).expect("in-memory gradient");
    assert_eq!(a, b, "paged and in-memory gradients differ");
    fails_with(&tigac(d, &[&base[..], &["g.txt", "--page-rows", "2"]].concat()), &["--page-rows", "only to a .gfg"]);
    fails_with(&tigac(d, &[&base[..], &["keep.gfg", "--num-nodes", "9"]].concat()), &["--num-nodes 9 does not match"]);
    fails_with(&tigac(d, &[&base[..], &["short.gfg"]].concat()), &["short.gfg"]);
    std::fs::write(d.join("trunc.gfg"), &before[..200]).expect("write");
    fails_with(&tigac(d, &[&base[..], &["trunc.gfg"]].concat()), &["trunc.gfg", "truncated"]);
    // A kernel field that is neither given nor in the file.
    fails_with(&tigac(d, &["run", gnn, "--kernel", "VecSum", "--out", "o.npy", "--graph", "keep.gfg"]), &["h", "keep.gfg"]);
    let o = tigac(d, &[&base[..], &["keep.gfg", "--page-rows", "1", "--page-bytes", "8"]].concat());
    assert_eq!(o.status.code(), Some(2), "conflicting page flags are a usage error: {}", stderr(&o));
}

/// The `TIGA_*` variables are read by `tigac` (never by the library), with
/// the flags' rules: the page plan they describe shows in `explain`, with
/// the schedule, and a value that does not parse is an error naming it.
#[test]
fn environment_schedule_follows_the_flag_rules() {
    let (dir, gnn) = converted_fixture();
    let d = dir.path();
    let gnn = gnn.as_str();
    let explain = |vars: &[(&str, &str)], flags: &[&str]| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_tigac"));
        c.current_dir(d).args(["explain", gnn, "--kernel", "VecSum", "--graph", "g.gfg"]).args(flags);
        for (k, v) in vars {
            c.env(k, v);
        }
        c.output().expect("spawn tigac")
    };
    let o = explain(&[("TIGA_PAGED_PAGE_ROWS", "16"), ("TIGA_PAGED_PREFETCH_DEPTH", "3")], &[]);
    ok(&o);
    let out = stdout(&o);
    for w in
        ["3 page(s), 16 rows per page", "prefetch depth 3", "schedule: threads", "pages of 16 rows, prefetch 3, back end auto"]
    {
        assert!(out.contains(w), "explain lacks `{w}`:\n{out}");
    }
    // A flag wins over the environment.
    let out = stdout(&explain(&[("TIGA_PAGED_PAGE_ROWS", "16")], &["--page-rows", "20"]));
    assert!(out.contains("2 page(s), 20 rows per page"), "{out}");
    // `TIGA_PAGED_PAGE_ROWS=0` is refused as `--page-rows 0` is; junk is
    // never ignored.
    for (var, value) in [("TIGA_PAGED_PAGE_ROWS", "0"), ("TIGA_PAGED_PREFETCH_DEPTH", "two"), ("TIGA_GRAPH_RAM_BUDGET", "5Q")] {
        fails_with(&explain(&[(var, value)], &[]), &[var, value]);
    }
}
