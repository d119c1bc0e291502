//! `.gfg` files whose checksums are right but whose contents break the
//! format, and version 2 block checksums: a broken file is refused before
//! any kernel reads it, never run to a silent wrong answer.
//!
//! Broken files are made by writing a valid one and patching bytes, then
//! recomputing every checksum (whole-section and block) so that only the
//! invariant checks can catch the patch; or recomputing only the
//! whole-section checksums, so that only the block table can.

mod gfg_raw;

use gfg_raw::*;
use tiga_runtime::exec::{ExecError, Side};
use tiga_runtime::{FieldRole, Graph, Realization, Schedule, TensorView};
use tiga_storage::{save_gfg, GfgError, GfgFile, GfgWriter};
use tiga_storage::{Checked, Invariant};

/// Sets the u64 at byte `off` of section `name`.
fn set64(b: &mut [u8], name: &str, off: usize, v: u64) {
    let k = at(b, name) + off;
    b[k..k + 8].copy_from_slice(&v.to_le_bytes());
}
fn set32(b: &mut [u8], name: &str, off: usize, v: u32) {
    let k = at(b, name) + off;
    b[k..k + 4].copy_from_slice(&v.to_le_bytes());
}

/// A patch to a file's bytes.
type Edit = Box<dyn Fn(&mut Vec<u8>)>;

/// The sample with a transpose, patched, every checksum recomputed.
fn patched(edit: impl Fn(&mut Vec<u8>)) -> Vec<u8> {
    let mut b = sample_bytes(true);
    edit(&mut b);
    fix_section_crcs(&mut b);
    b
}

/// Pages a paged walk over `side` handed out before it stopped, and how
/// it ended.
fn walk(f: &GfgFile, side: Side) -> (usize, Result<(), ExecError>) {
    let mut pages = 0;
    let rows = match Realization::rows(f, side, true) {
        Ok(r) => r,
        Err(e) => return (0, Err(e)),
    };
    let r = rows
        .for_each_page(&Schedule::new().page_rows(2), |_| {
            pages += 1;
            Ok::<(), ExecError>(())
        })
        .expect("a file has pages");
    (pages, r)
}

/// Checks that the full check reports `broken` violated at `position`
/// with `detail`, and every invariant before it in the report fine.
fn expect_violation(f: &GfgFile, broken: Invariant, position: Option<u64>, detail: &str) {
    let report = f.check();
    let text = report.to_string();
    assert!(!report.is_ok(), "{text}");
    let v = report.first_violation().expect("a violation");
    assert_eq!((v.invariant, v.position), (broken, position), "{text}");
    assert!(v.detail.contains(detail), "`{}` does not contain `{detail}`\n{text}", v.detail);
    assert!(text.contains(&format!("VIOLATED: {}", v.detail)), "{text}");
    assert_eq!(text.lines().count(), Invariant::ALL.len(), "one line per invariant:\n{text}");
    let e = f.validate().expect_err("validate refuses it");
    assert!(matches!(&e, GfgError::Invariant { violation, .. } if violation.invariant == broken), "{e}");
    assert!(e.to_string().contains("sample.gfg: section `"), "{e}");
}

#[test]
fn a_valid_file_passes_every_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    for transpose in [false, true] {
        let f = open_bytes(&dir.path().join("sample.gfg"), &sample_bytes(transpose)).expect("open");
        let report = f.check();
        assert!(report.is_ok(), "{report}");
        assert_eq!(report.get(Invariant::TransposeMatches) == Some(&Checked::Ok), transpose, "{report}");
        f.validate().expect("valid");
        for side in [Side::Forward, Side::RowReversed] {
            assert!(walk(&f, side).1.is_ok());
        }
        assert_eq!(walk(&f, Side::Transposed).1.is_ok(), transpose);
    }
}

#[test]
fn offsets_that_do_not_start_at_0_or_end_at_num_edges_are_refused_on_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("sample.gfg");
    let cases: [(&str, Edit, Invariant, u64, &str); 4] = [
        ("offsets", Box::new(|b| set64(b, "offsets", 0, 1)), Invariant::OffsetsStart, 0, "offsets[0] = 1, not 0"),
        ("offsets", Box::new(|b| set64(b, "offsets", 5 * 8, 7)), Invariant::OffsetsEnd, 5, "offsets[5] = 7, not num_edges = 8"),
        ("t_offsets", Box::new(|b| set64(b, "t_offsets", 0, 2)), Invariant::TOffsetsStart, 0, "t_offsets[0] = 2, not 0"),
        (
            "t_offsets",
            Box::new(|b| set64(b, "t_offsets", 4 * 8, 9)),
            Invariant::TOffsetsEnd,
            4,
            "t_offsets[4] = 9, not num_edges = 8",
        ),
    ];
    for (section, edit, inv, position, detail) in cases {
        let b = patched(edit);
        let e = open_err(&path, &b);
        match &e {
            GfgError::Invariant { violation, .. } => {
                assert_eq!((violation.invariant, violation.section, violation.position), (inv, section, Some(position)))
            }
            other => panic!("{other}"),
        }
        assert!(e.to_string().contains(detail), "{e}");
        // Opened for inspection, the full check reports it, and pages are
        // still refused.
        let f = GfgFile::open_for_inspection(&path).expect("inspect");
        expect_violation(&f, inv, Some(position), detail);
        let side = if section == "offsets" { Side::Forward } else { Side::Transposed };
        let (pages, r) = walk(&f, side);
        assert_eq!(pages, 0);
        assert!(r.expect_err("refused").to_string().contains(detail));
    }
}

#[test]
fn broken_csr_contents_under_valid_checksums_never_reach_a_kernel() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("sample.gfg");
    // The sample's offsets are [0, 4, 5, 5, 7, 8]; t_offsets [0, 2, 4, 7, 8].
    let base = sample_bytes(true);
    assert_eq!((0..6).map(|k| u64_at(&base, at(&base, "offsets") + 8 * k)).collect::<Vec<_>>(), [0, 4, 5, 5, 7, 8]);
    let cases: Vec<(Edit, Invariant, Option<u64>, &str, Side)> = vec![
        (
            Box::new(|b| set64(b, "offsets", 8, 6)),
            Invariant::OffsetsMonotone,
            Some(2),
            "offsets decrease at row 2: offsets[1] = 6 > offsets[2] = 5",
            Side::Forward,
        ),
        (
            Box::new(|b| set32(b, "cols", 3 * 4, 4)),
            Invariant::ColsInRange,
            Some(3),
            "cols[3] = 4 is out of range for 4 sources",
            Side::Forward,
        ),
        (
            Box::new(|b| {
                let first = u64_at(b, at(b, "edge_ids") + 8 * 2);
                set64(b, "edge_ids", 8 * 6, first)
            }),
            Invariant::EdgeIdsPermutation,
            Some(6),
            "edge_ids[6] = 5 repeats edge_ids[2]: not a permutation",
            Side::Forward,
        ),
        (
            Box::new(|b| set64(b, "t_offsets", 8, 5)),
            Invariant::TOffsetsMonotone,
            Some(2),
            "offsets decrease at row 2: t_offsets[1] = 5 > t_offsets[2] = 4",
            Side::Transposed,
        ),
        (
            Box::new(|b| set32(b, "t_cols", 7 * 4, 5)),
            Invariant::TColsInRange,
            Some(7),
            "t_cols[7] = 5 is out of range for 5 destinations",
            Side::Transposed,
        ),
        (
            Box::new(|b| {
                let x = u64_at(b, at(b, "t_edge_ids"));
                set64(b, "t_edge_ids", 8, x)
            }),
            Invariant::TEdgeIdsPermutation,
            Some(1),
            "t_edge_ids[1] = 2 repeats t_edge_ids[0]",
            Side::Transposed,
        ),
        // Two edges of source 0's transposed row swap destinations: every
        // count agrees, the triples do not.
        (
            Box::new(|b| {
                let t = at(b, "t_cols");
                let (x, y) = (u32_at(b, t), u32_at(b, t + 4));
                set32(b, "t_cols", 0, y);
                set32(b, "t_cols", 4, x);
            }),
            Invariant::TransposeMatches,
            None,
            "the hashes of their (source, destination, edge id) triples differ",
            Side::Transposed,
        ),
        // An edge moves from source 1's row to source 0's: the counts tell.
        (
            Box::new(|b| set64(b, "t_offsets", 8, 3)),
            Invariant::TransposeMatches,
            Some(0),
            "source 0 has 2 out-edge(s) in the graph but 3 in its transposed row",
            Side::Transposed,
        ),
    ];
    for (edit, inv, position, detail, side) in cases {
        let b = patched(edit);
        let f = open_bytes(&path, &b).expect("the ends are intact: open succeeds");
        f.verify().expect("every checksum was recomputed");
        expect_violation(&f, inv, position, detail);
        // The walk that would feed a kernel stops with the violation,
        // before the page that holds it (whole-file properties: before
        // the first page).
        let (pages, r) = walk(&f, side);
        let e = r.expect_err("the walk is refused").to_string();
        assert!(e.contains(detail), "{e}");
        assert!(e.contains("sample.gfg"), "{e}");
        if matches!(inv, Invariant::EdgeIdsPermutation | Invariant::TEdgeIdsPermutation | Invariant::TransposeMatches) {
            assert_eq!(pages, 0, "{inv:?}: a page was handed out before the whole-file check");
        }
        // A transpose that is not one does not stop a forward run.
        if matches!(inv, Invariant::TransposeMatches | Invariant::TEdgeIdsPermutation | Invariant::TColsInRange) {
            assert!(walk(&f, Side::Forward).1.is_ok());
        }
    }
}

/// A graph whose `cols` spans several 1 MiB blocks.
fn big_graph() -> Graph {
    Graph::stencil_2d_4(400, 400).expect("stencil")
}

#[test]
fn a_flipped_bit_under_a_recomputed_section_checksum_is_caught_by_its_block() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big.gfg");
    let g = big_graph();
    let x: Vec<f32> = (0..g.num_src()).map(|i| i as f32).collect();
    save_gfg(&path, &g, false, &[(FieldRole::Src, "x", TensorView::from_slice_f32(vec![g.num_src()], &x).expect("x"))])
        .expect("save");
    let good = std::fs::read(&path).expect("read");
    let m = read_raw(&good);
    let cols = m.section("cols");
    assert!(cols.blocks.len() >= 2, "cols has {} block(s)", cols.blocks.len());
    for (k, b) in cols.blocks.iter().enumerate() {
        let lo = cols.offset as usize + (k << 20);
        let hi = (lo + (1 << 20)).min((cols.offset + cols.length) as usize);
        assert_eq!(*b, crc32fast::hash(&good[lo..hi]), "block {k} of cols");
    }
    // A bit of block 1 flips; a v1-style tool recomputes the section's CRC.
    let flip = cols.offset as usize + (1 << 20) + 12;
    let mut bad = good.clone();
    bad[flip] ^= 0x01;
    fix_whole_crcs_only(&mut bad);
    let f = open_bytes(&path, &bad).expect("open");
    let e = f.verify().expect_err("verify");
    assert!(matches!(&e, GfgError::BlockChecksum { section, block: 1, .. } if section == "cols"), "{e}");
    // Pages before the block read fine; the page over it is refused.
    let rows_before = (0..g.num_dst()).take_while(|&r| (g.offsets()[r + 1] as usize) * 4 < (1 << 20)).count();
    f.page(0..rows_before).expect("rows before the corrupt block");
    let e = f.page(0..g.num_dst()).expect_err("the corrupt block");
    let text = e.to_string();
    assert!(text.contains("big.gfg: checksum mismatch in section `cols`, block 1 (bytes "), "{text}");
    let (_, r) = walk(&f, Side::Forward);
    assert!(r.expect_err("refused").to_string().contains("section `cols`, block 1"));
    // Re-reading pages costs no re-hash but still refuses the bad block.
    f.page(0..rows_before).expect("again");
    assert!(f.page(0..g.num_dst()).is_err());
    // A flipped bit of a field is caught when its rows are read.
    let xs = m.section("field.src.x");
    let mut bad = good.clone();
    bad[xs.offset as usize + 3] ^= 0x40;
    fix_whole_crcs_only(&mut bad);
    let f = open_bytes(&path, &bad).expect("open");
    let h = f.field(FieldRole::Src, "x").expect("x");
    let e = h.rows(0..1).expect_err("corrupt field block").to_string();
    assert!(e.contains("section `field.src.x`, block 0"), "{e}");
}

#[test]
fn version_1_files_run_without_block_checks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("v1.gfg");
    let g = big_graph();
    GfgWriter::new(&g).version_1().save(&path).expect("save v1");
    let good = std::fs::read(&path).expect("read");
    let f = GfgFile::open(&path).expect("open v1");
    assert!(f.check().is_ok());
    assert!(walk(&f, Side::Forward).1.is_ok());
    // The same flip: version 1 has no block table, so only the
    // whole-section CRC (verify, `tigac info`) can tell, and here it was
    // recomputed: what docs/gfg.md says a version 1 file cannot catch.
    let cols = read_raw(&good).section("cols").clone();
    let mut bad = good;
    bad[cols.offset as usize + (1 << 20) + 12] ^= 0x01;
    fix_whole_crcs_only(&mut bad);
    let f = open_bytes(&path, &bad).expect("open");
    f.verify().expect("no block table to disagree");
    assert!(walk(&f, Side::Forward).1.is_ok());
}

#[test]
fn writers_store_every_block_of_every_section() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = big_graph();
    let path = dir.path().join("t.gfg");
    save_gfg(&path, &g, true, &[]).expect("save");
    let bytes = std::fs::read(&path).expect("read");
    let m = read_raw(&bytes);
    assert_eq!((m.major, m.widths[3]), (2, 20));
    for s in &m.sections {
        let data = &bytes[s.offset as usize..(s.offset + s.length) as usize];
        let want: Vec<u32> = data.chunks(1 << 20).map(crc32fast::hash).collect();
        assert_eq!(s.blocks, want, "section {}", s.name);
        assert_eq!(s.crc, crc32fast::hash(data));
    }
    let f = GfgFile::open(&path).expect("open");
    assert!(f.check().is_ok());
    assert_eq!(walk(&f, Side::Transposed).1.map_err(|e| e.to_string()), Ok(()));
}
