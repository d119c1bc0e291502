//! `.gfg` robustness: truncated files, flipped bytes, wrong versions,
//! manifests that contradict their sections, fuzzed input (never a panic),
//! and saves interrupted by a crash (the old file survives intact).
//!
//! The manifest is edited here through a small reader/writer written from
//! `docs/gfg.md` alone (`gfg_raw`), independent of the crate's own: it also
//! checks that the document is enough to read and write the format.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use tiga_runtime::exec::{ExecError, Side};
use tiga_runtime::{FieldRole, Graph, Realization, Schedule};
use tiga_storage::{GfgError, GfgFile, GfgWriter};

mod gfg_raw;

use gfg_raw::*;

/// What a page (of any path) hands a kernel must hold the invariants the
/// kernel relies on.
fn assert_sound(rows: usize, offsets: &[u64], cols: &[u32], ids: Option<&[u64]>, bound: usize, edges: usize) {
    assert_eq!(offsets.len(), rows + 1, "a page of {rows} rows has {} offsets", offsets.len());
    assert!(offsets.windows(2).all(|w| w[0] <= w[1]), "a page's offsets decrease: {offsets:?}");
    assert_eq!(cols.len() as u64, offsets[rows] - offsets[0]);
    assert!(cols.iter().all(|&c| (c as usize) < bound), "a column out of range: {cols:?} (bound {bound})");
    if let Some(ids) = ids {
        assert_eq!(ids.len(), cols.len());
        assert!(ids.iter().all(|&e| (e as usize) < edges), "an edge id out of range: {ids:?}");
    }
}

/// Uses everything a reader offers; only errors are allowed, never a panic,
/// and nothing it hands out breaks an invariant: a page returned holds the
/// page invariants, a paged walk that completes saw every edge once with
/// distinct ids, and a file whose full check passes loads and validates.
fn exercise(path: &Path) {
    let Ok(f) = GfgFile::open(path) else { return };
    let _ = f.manifest().to_string();
    let _ = f.verify();
    let _ = f.validate();
    let _ = f.load_graph();
    let _ = f.load_transposed();
    let _ = (f.offsets(), f.cols(), f.edge_ids(), f.t_offsets(), f.t_cols(), f.t_edge_ids());
    for s in f.sections() {
        let _ = f.verify_section(&s.name);
    }
    for info in f.fields() {
        if let Ok(h) = f.field(info.role, &info.name) {
            let _ = h.to_tensor();
            let _ = h.rows(0..h.num_rows().min(2));
            let _ = h.rows(h.num_rows()..h.num_rows() + 1);
        }
    }
    let _ = f.field(FieldRole::Src, "nope");
    let (ns, nd, ne) = (f.num_src(), f.num_dst(), f.num_edges());
    for (n, transposed) in [(nd, false), (ns, true)] {
        let bound = if transposed { nd } else { ns };
        for size in [1, 2, 7, n.max(1)] {
            let mut start = 0;
            while start < n.min(200) {
                let end = (start + size).min(n);
                let p = if transposed { f.transposed_page(start..end) } else { f.page(start..end) };
                if let Ok(p) = p {
                    assert_sound(p.num_rows(), p.offsets, p.cols, p.edge_ids, bound, ne);
                    for local in 0..p.num_edges() {
                        let _ = p.edge_id(local);
                    }
                    for k in 0..p.num_rows() {
                        let _ = &p.cols[p.local_row(k)];
                    }
                }
                if let Ok(p) = f.page_without_ids(start..end, transposed) {
                    assert_sound(p.num_rows(), p.offsets, p.cols, None, bound, ne);
                }
                start = end;
            }
        }
    }
    // The paged walk a kernel's run makes, on every side.
    for side in [Side::Forward, Side::Transposed, Side::RowReversed] {
        let bound = if side == Side::Transposed { nd } else { ns };
        let Ok(rows) = Realization::rows(&f, side, true) else { continue };
        let mut seen = Vec::new();
        let walk = rows.for_each_page(&Schedule::new().page_rows(3), |v| {
            let n = v.offsets.len().saturating_sub(1);
            assert_sound(n, v.offsets, v.cols, v.edge_ids, bound, ne);
            seen.extend(v.edge_ids.map(<[u64]>::to_vec).unwrap_or_else(|| (v.offsets[0]..v.offsets[n]).collect()));
            Ok::<(), ExecError>(())
        });
        if let Some(Ok(())) = walk {
            seen.sort_unstable();
            assert_eq!(seen, (0..ne as u64).collect::<Vec<_>>(), "a completed {side:?} walk is not every edge once");
        }
    }
    let report = f.check();
    let _ = report.to_string();
    if report.is_ok() && f.verify().is_ok() {
        f.validate().expect("a file whose full check passes validates");
        let g = f.load_graph().expect("a file whose full check passes loads");
        if let Some(t) = f.load_transposed().expect("its transpose loads") {
            let (src, dst) = g.coo_in_user_order();
            assert_eq!(t.coo_in_user_order(), (dst, src), "the full check passed a transpose that is not one");
        }
    }
}

// ---------------------------------------------------------------------------
// Tests.

#[test]
fn the_documented_example_has_the_documented_layout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = Graph::from_edges(2, 2, &[1, 0, 0], &[0, 1, 0]).expect("graph");
    let path = dir.path().join("ex.gfg");
    GfgWriter::new(&g).field(FieldRole::Src, "x", &[1.0f32, 2.0][..]).save(&path).expect("save");
    let bytes = std::fs::read(&path).expect("read");
    let m = read_raw(&bytes);
    assert_eq!((m.num_src, m.num_dst, m.num_edges, m.widths), (2, 2, 3, [8, 4, 8, 20]));
    let layout: Vec<_> = m.sections.iter().map(|s| (s.name.as_str(), s.code, s.offset, s.length)).collect();
    assert_eq!(
        layout,
        [("offsets", 2, 4096, 24), ("cols", 1, 8192, 12), ("edge_ids", 2, 12288, 24), ("field.src.x", 3, 16384, 8)]
    );
    assert_eq!(manifest_range(&bytes).0, 16392);
    assert_eq!((u16_at(&bytes, 8), u16_at(&bytes, 10)), (2, 0));
    let u64s =
        |s: &RawSection| -> Vec<u64> { (0..s.length as usize / 8).map(|k| u64_at(&bytes, s.offset as usize + 8 * k)).collect() };
    assert_eq!(u64s(&m.sections[0]), [0, 2, 3]);
    assert_eq!(u64s(&m.sections[2]), [0, 2, 1]);
    let cols: Vec<u32> = (0..3).map(|k| u32_at(&bytes, 8192 + 4 * k)).collect();
    assert_eq!(cols, [1, 0, 0]);
    for s in &m.sections {
        assert_eq!(s.crc, crc32fast::hash(&bytes[s.offset as usize..(s.offset + s.length) as usize]));
        // Each section is shorter than a block: one block, its CRC the whole one.
        assert_eq!(s.blocks, [s.crc]);
    }
    // The check value the document gives for its CRC.
    assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
}

#[test]
fn every_prefix_is_refused_as_truncated() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, bytes) = sample(dir.path(), false);
    let file = std::fs::OpenOptions::new().write(true).open(&path).expect("open for truncation");
    for len in (0..bytes.len()).rev() {
        file.set_len(len as u64).expect("truncate");
        match GfgFile::open(&path) {
            Ok(_) => panic!("a {len}-byte prefix of a {}-byte file was accepted", bytes.len()),
            Err(GfgError::Truncated { path: p, actual, .. }) => {
                assert_eq!(actual, len as u64);
                assert!(p.ends_with("sample.gfg"));
            }
            Err(e) => panic!("a {len}-byte prefix gave {e}, expected a truncation error"),
        }
    }
    let e = open_err(&path, &bytes[..1000]).to_string();
    assert!(e.contains("sample.gfg: truncated: the manifest needs the file to be at least"), "{e}");
    let e = open_err(&path, &bytes[..10]).to_string();
    assert!(e.contains("truncated: the header needs the file to be at least 64 bytes long, but it has 10"), "{e}");
}

#[test]
fn a_flipped_byte_in_each_section_is_named_by_verify() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, bytes) = sample(dir.path(), true);
    let m = read_raw(&bytes);
    let names: Vec<&str> = m.sections.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["offsets", "cols", "edge_ids", "t_offsets", "t_cols", "t_edge_ids", "field.src.h", "field.dst.d", "field.edge.w"]
    );
    for s in &m.sections {
        for at in [s.offset, s.offset + s.length / 2, s.offset + s.length - 1] {
            let mut bad = bytes.clone();
            bad[at as usize] ^= 0x10;
            // Open reads the header, the manifest and the ends of the
            // offsets: it succeeds, unless the flip is in those ends, whose
            // block it then names.
            let f = match open_bytes(&path, &bad) {
                Ok(f) => f,
                Err(GfgError::BlockChecksum { section, block: 0, .. }) if s.name.contains("offsets") => {
                    assert_eq!(section, s.name);
                    continue;
                }
                Err(e) => panic!("byte {at} of {}: {e}", s.name),
            };
            match f.verify() {
                Err(GfgError::BlockChecksum { section, block: 0, .. }) => assert_eq!(section, s.name),
                other => panic!("byte {at} of {}: verify gave {other:?}", s.name),
            }
            let e = f.verify_section(&s.name).expect_err("section crc");
            assert_eq!(e.section(), Some(s.name.as_str()));
            assert!(e.to_string().contains(&format!("checksum mismatch in section `{}`", s.name)), "{e}");
            for other in m.sections.iter().filter(|o| o.name != s.name) {
                f.verify_section(&other.name).expect("other sections intact");
            }
        }
    }
    let f = open_bytes(&path, &bytes).expect("open");
    assert!(matches!(f.verify_section("nope"), Err(GfgError::MissingSection { .. })));
}

#[test]
fn a_flipped_byte_in_the_header_or_manifest_is_refused_on_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, bytes) = sample(dir.path(), true);
    for at in 0..64 {
        let mut bad = bytes.clone();
        bad[at] ^= 0x01;
        let e = open_err(&path, &bad);
        let ok = match at {
            0..=7 => matches!(e, GfgError::BadMagic { .. }),
            // 2 ^ 1 = 3, a major version this reader knows: the header's
            // CRC catches it.
            8 => matches!(e, GfgError::Checksum { what: "the header", .. }),
            9 => matches!(e, GfgError::UnsupportedVersion { .. }),
            _ => matches!(e, GfgError::Checksum { what: "the header", .. }),
        };
        assert!(ok, "header byte {at}: {e}");
    }
    let (mo, ml) = manifest_range(&bytes);
    for at in mo..mo + ml {
        let mut bad = bytes.clone();
        bad[at] ^= 0x80;
        let e = open_err(&path, &bad);
        assert!(matches!(e, GfgError::Checksum { what: "the manifest", .. }), "manifest byte {at}: {e}");
    }
    let e = open_err(&path, b"PK\x03\x04 not a graph at all").to_string();
    assert!(e.ends_with("sample.gfg: not a .gfg file (it does not start with the magic bytes TIGAGFG\\0)"), "{e}");
}

#[test]
fn versions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, bytes) = sample(dir.path(), false);
    let with_version = |bytes: &[u8], major: u16, minor: u16, fix: bool| {
        let mut b = bytes.to_vec();
        b[8..10].copy_from_slice(&major.to_le_bytes());
        b[10..12].copy_from_slice(&minor.to_le_bytes());
        if fix {
            fix_header_crc(&mut b);
        }
        b
    };
    for fix in [true, false] {
        let e = open_err(&path, &with_version(&bytes, 4, 0, fix));
        assert!(matches!(e, GfgError::UnsupportedVersion { major: 4, minor: 0, .. }), "{e}");
        assert!(
            e.to_string().contains(
                "format version 4.0 is not supported: this reader reads major versions 1, 2 and 3 (the file was written by a newer tiga)"
            ),
            "{e}"
        );
    }
    // Version 3 is version 2 with a stored node order, which it must hold.
    let e = open_err(&path, &with_version(&bytes, 3, 0, true)).to_string();
    assert!(e.contains("a version 3 file stores its node order: `node_order` and `node_order_method` are required"), "{e}");
    let e = open_err(&path, &with_version(&bytes, 0, 9, true)).to_string();
    assert!(e.contains("version 0.9 is not supported") && !e.contains("newer"), "{e}");
    // A newer minor version of the same major is read, and may append to
    // the manifest; the same minor version may not.
    let f = open_bytes(&path, &with_version(&bytes, 2, 3, true)).expect("2.3");
    assert_eq!(f.version(), (2, 3));
    f.validate().expect("valid");
    let (mo, ml) = manifest_range(&bytes);
    let mut longer = bytes[mo..mo + ml].to_vec();
    longer.extend_from_slice(b"future");
    let mut b = with_version(&bytes, 2, 3, true);
    replace_manifest_bytes(&mut b, &longer);
    open_bytes(&path, &b).expect("2.3 with a longer manifest").verify().expect("verify");
    let mut b = bytes.clone();
    replace_manifest_bytes(&mut b, &longer);
    let e = open_err(&path, &b).to_string();
    assert!(e.contains("the manifest contradicts the file: 6 unexpected bytes after the section table"), "{e}");
    // Version 1 files keep loading: the writer's and one rewritten from
    // the document's description.
    let g = sample_graph();
    GfgWriter::new(&g).with_transpose(true).version_1().save(&path).expect("save v1");
    let v1 = std::fs::read(&path).expect("read");
    assert_eq!(u16_at(&v1, 8), 1);
    assert_eq!(read_raw(&v1).widths[3], 0);
    let f = GfgFile::open(&path).expect("v1");
    assert_eq!((f.version(), f.manifest().block_size()), ((1, 0), None));
    f.validate().expect("a valid v1 file");
    assert_eq!(f.load_graph().expect("load"), g);
    assert_eq!(to_version_1(&bytes)[..], with_version(&to_version_1(&bytes), 1, 0, true)[..]);
    let f = open_bytes(&path, &to_version_1(&bytes)).expect("v1 from the document");
    f.validate().expect("valid");
    assert!(f.manifest().to_string().contains("block checksums: none (version 1"));
    // A version 2 block size out of range.
    let mut m = read_raw(&bytes);
    m.widths[3] = 40;
    let mut b = bytes.clone();
    write_raw(&mut b, &m);
    let e = open_err(&path, &b).to_string();
    assert!(e.contains("the block size is 2^40 bytes; a reader accepts 2^12 to 2^30"), "{e}");
}

#[test]
fn a_missing_field_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, _) = sample(dir.path(), false);
    let f = GfgFile::open(&path).expect("open");
    let e = f.field(FieldRole::Src, "x").expect_err("missing").to_string();
    assert!(e.ends_with("sample.gfg: has no src field `x` (its src fields are: h)"), "{e}");
    let e = f.field(FieldRole::Edge, "h").expect_err("missing").to_string();
    assert!(e.ends_with("has no edge field `h` (its edge fields are: w)"), "{e}");
    let z = Graph::from_edges(1, 1, &[0], &[0]).expect("g");
    GfgWriter::new(&z).save(&path).expect("save");
    let e = GfgFile::open(&path).expect("open").field(FieldRole::Dst, "d").expect_err("missing").to_string();
    assert!(e.ends_with("has no dst field `d` (the file has no dst fields)"), "{e}");
}

#[test]
fn manifests_that_contradict_the_file_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, bytes) = sample(dir.path(), true);
    let base = read_raw(&bytes);
    let idx = |m: &RawManifest, name: &str| m.sections.iter().position(|s| s.name == name).expect("section");
    fn sec<'m>(m: &'m mut RawManifest, name: &str) -> &'m mut RawSection {
        m.sections.iter_mut().find(|s| s.name == name).expect("section")
    }
    let check = |what: &str, edit: &dyn Fn(&mut RawManifest), expected: &str| {
        let mut m = base.clone();
        edit(&mut m);
        let mut b = bytes.clone();
        write_raw(&mut b, &m);
        let e = open_err(&path, &b).to_string();
        assert!(e.contains(expected), "{what}: got `{e}`, expected it to contain `{expected}`");
        assert!(e.contains("sample.gfg"), "{what}: {e}");
    };
    check("cols length", &|m| sec(m, "cols").length += 4, "section `cols` is 36 bytes long, but its shape [8] of u32 needs 32");
    check(
        "cols shape",
        &|m| {
            let k = idx(m, "cols");
            m.sections[k].shape = vec![9];
            m.sections[k].length = 36;
        },
        "section `cols` has shape [9], but the column indices (num_edges) must have shape [8]",
    );
    check("num_edges", &|m| m.num_edges = 7, "but the column indices (num_edges) must have shape [7]");
    check("num_dst", &|m| m.num_dst = 4, "the row offsets (num_dst + 1) must have shape [5]");
    check("cols type", &|m| sec(m, "cols").code = 2, "needs 64");
    check(
        "field rows",
        &|m| {
            let k = idx(m, "field.dst.d");
            m.sections[k].shape = vec![1, 5];
        },
        "section `field.dst.d` has shape [1, 5], but a dst field (num_dst rows) must have shape [5] or [5, F]",
    );
    check(
        "field type",
        &|m| {
            let k = idx(m, "field.edge.w");
            m.sections[k].code = 1;
        },
        "section `field.edge.w` holds u32, but a edge field (num_edges rows) must be f32 or f64",
    );
    check("misaligned", &|m| sec(m, "cols").offset += 8, "which is not a non-zero multiple of 4096");
    check("at zero", &|m| sec(m, "cols").offset = 0, "which is not a non-zero multiple of 4096");
    check(
        "overlap",
        &|m| {
            let o = sec(m, "cols").offset;
            sec(m, "t_cols").offset = o;
        },
        "overlaps section",
    );
    check("past the end", &|m| sec(m, "cols").offset = 1 << 40, "truncated: section `cols` needs");
    check(
        "over the manifest",
        &|m| {
            let k = idx(m, "field.edge.w");
            m.sections[k].shape = vec![8, 2];
            m.sections[k].length = 64;
        },
        "overlaps section",
    );
    check("no offsets", &|m| m.sections.retain(|s| s.name != "offsets"), "the required section `offsets` is missing");
    // A field name with a control character (the writer refuses it; a file
    // that has one anyway is refused on open).
    check("control character", &|m| sec(m, "field.dst.d").name = "field.dst.d\nx".into(), "breaks the name rule");
    check(
        "half a transpose",
        &|m| m.sections.retain(|s| s.name != "t_cols"),
        "the transposed CSR needs both `t_offsets` and `t_cols`",
    );
    check(
        "twice",
        &|m| {
            let s = m.sections[0].clone();
            m.sections.push(s);
        },
        "section `offsets` appears twice",
    );
    check("element code", &|m| m.sections[1].code = 9, "section `cols` has unknown element type code 9");
    check("widths", &|m| m.widths = [8, 8, 8, 20], "index widths are 8/8/8 bytes");
    check("bad role", &|m| sec(m, "field.src.h").name = "field.node.h".into(), "unknown role `node`");
    check("too many nodes", &|m| m.num_src = 1 << 40, "num_src = 1099511627776 exceeds the maximum");
    check(
        "huge shape",
        &|m| {
            let k = idx(m, "field.src.h");
            m.sections[k].shape = vec![4, u64::MAX];
        },
        "too large to address",
    );
    // Sections with names a newer minor version might add are ignored.
    let mut m = base.clone();
    let cols = m.sections[idx(&m, "cols")].clone();
    m.sections.push(RawSection { name: "future.index".into(), shape: vec![0], length: 0, crc: 0, blocks: vec![], ..cols });
    let mut b = bytes.clone();
    write_raw(&mut b, &m);
    open_bytes(&path, &b).expect("unknown section").validate().expect("valid");
    // Bytes after the manifest.
    let mut b = bytes.clone();
    b.extend_from_slice(&[0; 3]);
    let e = open_err(&path, &b).to_string();
    assert!(e.contains("3 unexpected bytes after the manifest (it must end the file)"), "{e}");
    // A header pointing the manifest into itself.
    let mut b = bytes.clone();
    b[16..24].copy_from_slice(&8u64.to_le_bytes());
    fix_header_crc(&mut b);
    let e = open_err(&path, &b).to_string();
    assert!(e.contains("the header puts the manifest at offset 8, inside the header"), "{e}");
}

#[test]
fn corrupt_contents_with_valid_checksums_are_errors_not_panics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, bytes) = sample(dir.path(), true);
    let m = read_raw(&bytes);
    let at = |name: &str| m.sections.iter().find(|s| s.name == name).expect("section").offset as usize;
    let edit = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = bytes.clone();
        f(&mut b);
        fix_section_crcs(&mut b);
        let file = open_bytes(&path, &b).expect("open");
        file.verify().expect("checksums were fixed");
        file
    };
    // offsets[2] = 100: past num_edges, and decreasing after it.
    let f = edit(&|b| b[at("offsets") + 16..at("offsets") + 24].copy_from_slice(&100u64.to_le_bytes()));
    let e = f.page(0..5).expect_err("bad offsets").to_string();
    assert!(e.contains("section `offsets` is corrupt: offsets decrease at row 3: offsets[2] = 100 > offsets[3] = "), "{e}");
    let e = f.page(0..2).expect_err("bad offsets").to_string();
    assert!(e.contains("offsets[2] = 100 exceeds num_edges = 8"), "{e}");
    assert!(f.page(0..1).is_ok());
    let e = f.load_graph().expect_err("bad offsets").to_string();
    assert!(e.contains("the stored graph is invalid: CSR offsets decrease"), "{e}");
    assert!(f.validate().is_err());
    // cols[0] = 4 with num_src = 4.
    let f = edit(&|b| b[at("cols")..at("cols") + 4].copy_from_slice(&4u32.to_le_bytes()));
    let e = f.page(0..1).expect_err("bad cols").to_string();
    assert!(e.contains("section `cols` is corrupt: cols[0] = 4 is out of range for 4 sources"), "{e}");
    assert!(f.load_graph().is_err());
    // A duplicate edge id: each page is fine, the whole graph is not.
    let f = edit(&|b| {
        let first = u64_at(b, at("edge_ids"));
        b[at("edge_ids") + 8..at("edge_ids") + 16].copy_from_slice(&first.to_le_bytes());
    });
    // Each page's ids are in range; the whole section is checked before the
    // first page that carries ids, which is refused.
    let e = f.page(0..5).expect_err("duplicate id").to_string();
    assert!(e.contains("section `edge_ids` is corrupt: edge_ids[1] = 0 repeats edge_ids[0]: not a permutation"), "{e}");
    assert!(f.page_without_ids(0..5, false).is_ok(), "without ids the page is sound");
    let e = f.load_graph().expect_err("duplicate id").to_string();
    assert!(e.contains("is a duplicate"), "{e}");
    // An edge id out of range.
    let f = edit(&|b| b[at("edge_ids")..at("edge_ids") + 8].copy_from_slice(&99u64.to_le_bytes()));
    // Without its ids the page is fine (they are not read); checked
    // without them, it is still checked with them.
    assert!(f.page_without_ids(0..1, false).is_ok_and(|p| p.edge_ids.is_none()));
    let e = f.page(0..1).expect_err("bad id").to_string();
    assert!(e.contains("edge_ids[0] = 99 is out of range for 8 edges"), "{e}");
    // A transpose that is not the transpose.
    let f = edit(&|b| {
        let (x, y) = (u32_at(b, at("t_cols")), u32_at(b, at("t_cols") + 4));
        b[at("t_cols")..at("t_cols") + 4].copy_from_slice(&y.to_le_bytes());
        b[at("t_cols") + 4..at("t_cols") + 8].copy_from_slice(&x.to_le_bytes());
    });
    f.load_transposed().expect("a valid graph on its own");
    let e = f.validate().expect_err("not the transpose").to_string();
    assert!(e.contains("the transposed CSR does not hold the reversed edges"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn fuzz_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..3000), magic in any::<bool>()) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("fuzz.gfg");
        let mut b = bytes;
        if magic && b.len() >= 12 {
            b[..8].copy_from_slice(b"TIGAGFG\0");
            b[8..10].copy_from_slice(&1u16.to_le_bytes());
            if b.len() >= 64 {
                fix_header_crc(&mut b);
            }
        }
        std::fs::write(&path, &b).expect("write");
        exercise(&path);
    }

    #[test]
    fn fuzz_mutations_of_a_valid_file(
        transpose in any::<bool>(),
        mode in 0u8..5,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..12),
        cut in proptest::option::of(any::<prop::sample::Index>()),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("fuzz.gfg");
        let bytes = sample_bytes(transpose);
        let mut b = bytes.clone();
        let (mo, ml) = manifest_range(&bytes);
        match mode {
            // Anywhere, no checksum fixed: refused on open or by verify.
            0 => {
                for (i, v) in &edits {
                    let k = i.index(b.len());
                    b[k] = *v;
                }
                if let Some(c) = cut {
                    b.truncate(c.index(b.len()));
                }
            }
            // In the manifest, checksums fixed: the manifest checks run.
            1 => {
                for (i, v) in &edits {
                    b[mo + i.index(ml)] = *v;
                }
                fix_manifest_crc(&mut b);
            }
            // Manifest numbers aimed at: small values in u64 fields.
            2 => {
                for (i, v) in &edits {
                    let k = mo + (i.index(ml) & !7);
                    if k + 8 <= mo + ml {
                        b[k..k + 8].copy_from_slice(&u64::from(*v % 16).to_le_bytes());
                    }
                }
                fix_manifest_crc(&mut b);
            }
            // CSR elements aimed at (offsets, columns, edge ids of both
            // sides), set to small values, every checksum fixed: each
            // invariant check runs, and whatever passes them must hold.
            4 => {
                let m = read_raw(&bytes);
                let csr: Vec<&RawSection> = m.sections.iter().filter(|s| !s.name.starts_with("field.")).collect();
                for (i, v) in &edits {
                    let s = csr[i.index(csr.len())];
                    let width = if s.code == 1 { 4 } else { 8 };
                    let count = (s.length / width) as usize;
                    if count == 0 {
                        continue;
                    }
                    let k = s.offset as usize + (usize::from(*v) * 7 % count) * width as usize;
                    let value = u64::from(*v % 10);
                    b[k..k + width as usize].copy_from_slice(&value.to_le_bytes()[..width as usize]);
                }
                fix_section_crcs(&mut b);
            }
            // In the sections, checksums fixed: the content checks run.
            _ => {
                for (i, v) in &edits {
                    let k = 64 + i.index(mo - 64);
                    b[k] = *v % 12;
                }
                fix_section_crcs(&mut b);
            }
        }
        std::fs::write(&path, &b).expect("write");
        exercise(&path);
        if mode == 0 && b != bytes {
            // Any change to the checked bytes is caught; padding is not checked.
            let m = read_raw(&bytes);
            let in_section = |k: usize| m.sections.iter().any(|s| (s.offset..s.offset + s.length).contains(&(k as u64)));
            let checked = b.len() != bytes.len()
                || (0..b.len()).any(|k| b[k] != bytes[k] && (k < 64 || k >= mo || in_section(k)));
            if checked {
                let caught = match GfgFile::open(&path) {
                    Err(_) => true,
                    Ok(f) => f.verify().is_err(),
                };
                prop_assert!(caught, "a mutation of checked bytes went unnoticed");
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Crashes during save.

#[test]
fn a_pending_save_that_is_dropped_leaves_the_old_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, old) = sample(dir.path(), false);
    let g = Graph::stencil_2d_4(30, 30).expect("stencil");
    let pending = GfgWriter::new(&g).with_transpose(true).write_pending(&path).expect("pending");
    let tmp = pending.temp_path().to_path_buf();
    assert_eq!(tmp.parent(), path.parent());
    assert!(tmp.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(".sample.gfg.") && n.ends_with(".tmp")));
    // The temporary file is complete, but the destination is untouched.
    assert_eq!(GfgFile::open(&tmp).expect("complete temp").load_graph().expect("graph"), g);
    assert_eq!(std::fs::read(&path).expect("read"), old);
    drop(pending);
    assert!(!tmp.exists());
    assert_eq!(std::fs::read(&path).expect("read"), old);
    // Committing replaces it.
    GfgWriter::new(&g).write_pending(&path).expect("pending").commit().expect("commit");
    assert_eq!(GfgFile::open(&path).expect("open").load_graph().expect("graph"), g);
}

#[test]
fn a_save_interrupted_at_any_byte_leaves_the_old_file_intact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, old) = sample(dir.path(), true);
    let g = Graph::from_edges(6, 6, &[5, 4, 3, 2, 1, 0, 0], &[0, 1, 2, 3, 4, 5, 5]).expect("graph");
    let x = [1.0f64; 6];
    let writer = GfgWriter::new(&g).with_transpose(true).field(FieldRole::Dst, "x", &x[..]);
    let full = {
        let p = writer.write_pending(dir.path().join("full.gfg")).expect("full");
        std::fs::read(p.temp_path()).expect("read").len() as u64
    };
    let cuts: Vec<u64> = [0, 1, 63, 64, 100, 4095, 4096, 5000, 12_000, full / 2, full - 40, full - 1, full, full + 10, full + 63]
        .into_iter()
        .chain((0..full).step_by(997))
        .collect();
    for cut in cuts {
        let tmp = writer.write_interrupted(&path, cut).expect("interrupted");
        assert_eq!(std::fs::read(&path).expect("read"), old, "cut at {cut}");
        GfgFile::open(&path).expect("old file").validate().expect("old file valid");
        // What the crash left behind is not a valid file (it has no header yet).
        assert!(GfgFile::open(&tmp).is_err(), "a save cut at {cut} of {full} bytes left a readable file");
        std::fs::remove_file(&tmp).expect("clean up");
    }
    // Not interrupted (the header is written twice: its place first, then
    // itself): a complete temporary file, still not renamed.
    let tmp = writer.write_interrupted(&path, full + 64).expect("complete");
    assert_eq!(GfgFile::open(&tmp).expect("complete temp").load_graph().expect("graph"), g);
    assert_eq!(std::fs::read(&path).expect("read"), old);
}

/// The graph a crash-test child saves: large enough that a save takes a
/// while, deterministic so the parent can rebuild it.
fn crash_graph(seed: u64) -> (Graph, Vec<f32>) {
    let n = 1 << 18;
    let e = 1 << 21;
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as u32
    };
    let (src, dst): (Vec<u32>, Vec<u32>) = (0..e).map(|_| (next(), next())).unzip();
    let g = Graph::from_edges(n, n, &src, &dst).expect("graph");
    let w = (0..e).map(|k| (k as f32) * 0.25 + seed as f32).collect();
    (g, w)
}

fn save_crash_graph(path: &Path, seed: u64) {
    let (g, w) = crash_graph(seed);
    GfgWriter::new(&g).with_transpose(seed == 2).field(FieldRole::Edge, "w", &w).save(path).expect("save");
}

const CHILD_ENV: &str = "TIGA_GFG_CRASH_CHILD_TARGET";

/// Not a test on its own: the child process of
/// `a_process_killed_during_save_leaves_a_valid_file`, which saves two
/// graphs in turn over one path until it is killed.
#[test]
fn crash_child_saver() {
    let Some(target) = std::env::var_os(CHILD_ENV) else { return };
    let target = PathBuf::from(target);
    let graphs = [crash_graph(1), crash_graph(2)];
    let start = Instant::now();
    // Bounded, in case the parent dies before killing this process.
    for k in 0..200 {
        if start.elapsed() > Duration::from_secs(60) {
            break;
        }
        let (g, w) = &graphs[(k + 1) % 2];
        let seed = ((k + 1) % 2 + 1) as u64;
        GfgWriter::new(g).with_transpose(seed == 2).field(FieldRole::Edge, "w", w).save(&target).expect("save");
    }
}

/// Kills the child when the test ends, whatever happens.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn temp_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(".g.gfg.") && n.ends_with(".tmp")))
        .collect()
}

#[test]
fn a_process_killed_during_save_leaves_a_valid_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let refs = [dir.path().join("ref1.gfg"), dir.path().join("ref2.gfg")];
    save_crash_graph(&refs[0], 1);
    save_crash_graph(&refs[1], 2);
    let expected = [std::fs::read(&refs[0]).expect("ref 1"), std::fs::read(&refs[1]).expect("ref 2")];
    let target = dir.path().join("g.gfg");
    std::fs::copy(&refs[0], &target).expect("initial file");
    let exe = std::env::current_exe().expect("test binary");
    let mut interrupted = 0;
    for round in 0..4u64 {
        let child = Command::new(&exe)
            .args(["crash_child_saver", "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &target)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the child");
        let mut child = KillOnDrop(child);
        // Wait until a save is under way, then let it run a little.
        let deadline = Instant::now() + Duration::from_secs(60);
        while temp_files(dir.path()).is_empty() {
            assert!(Instant::now() < deadline, "the child never started a save");
            assert!(child.0.try_wait().expect("child status").is_none(), "the child exited");
            std::thread::sleep(Duration::from_micros(200));
        }
        std::thread::sleep(Duration::from_millis(round * 7 % 25));
        child.0.kill().expect("kill");
        child.0.wait().expect("wait");
        let left = temp_files(dir.path());
        if !left.is_empty() {
            interrupted += 1;
        }
        for t in left {
            std::fs::remove_file(t).expect("clean up");
        }
        let now = std::fs::read(&target).expect("target");
        assert!(
            now == expected[0] || now == expected[1],
            "round {round}: after the kill the file is neither the old nor the new graph ({} bytes)",
            now.len()
        );
        GfgFile::open(&target).expect("open").verify().expect("verify");
    }
    assert!(interrupted > 0, "no kill landed during a save");
}
