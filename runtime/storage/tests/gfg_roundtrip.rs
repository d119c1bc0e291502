//! `.gfg` round trips: every array written comes back bit for bit, through
//! the mapped accessors, `load_graph`, field handles and pages of every size.

use std::path::Path;

use proptest::prelude::*;
use tiga_runtime::{DType, Data, FieldRole, Graph, Tensor, TensorView};
use tiga_storage::{save_gfg, GfgError, GfgFile, GfgWriter};
use tiga_storage::{ElemType, SECTION_ALIGN};

/// A field to save: role, name, and its data.
#[derive(Debug, Clone)]
struct Field {
    role: FieldRole,
    name: String,
    tensor: Tensor,
}

fn bits(d: Data<'_>) -> Vec<u64> {
    match d {
        Data::F32(v) => v.iter().map(|x| u64::from(x.to_bits())).collect(),
        Data::F64(v) => v.iter().map(|x| x.to_bits()).collect(),
        Data::F16(v) => v.iter().map(|x| u64::from(x.to_bits())).collect(),
        Data::BF16(v) => v.iter().map(|x| u64::from(x.to_bits())).collect(),
    }
}

/// Compares every array of `file` with `g` (and its transpose) and `fields`.
fn check_file(file: &GfgFile, g: &Graph, transpose: bool, fields: &[Field]) {
    assert_eq!((file.num_src(), file.num_dst(), file.num_edges()), (g.num_src(), g.num_dst(), g.num_edges()));
    assert_eq!(file.version(), (2, 0));
    assert_eq!(file.offsets().expect("offsets"), g.offsets());
    assert_eq!(file.cols().expect("cols"), g.cols());
    assert_eq!(file.edge_ids().expect("edge ids"), g.edge_ids());
    assert_eq!(file.has_edge_ids(), g.edge_ids().is_some());
    assert_eq!(file.has_transpose(), transpose);
    for s in file.sections() {
        assert_eq!(s.offset % SECTION_ALIGN, 0, "section {} is not aligned", s.name);
        assert_eq!(s.length, s.shape.iter().product::<u64>() * s.elem.size() as u64);
    }
    assert_eq!(&file.load_graph().expect("load"), g);
    let t = g.transpose();
    if transpose {
        assert_eq!(file.t_offsets().expect("t_offsets"), Some(t.offsets()));
        assert_eq!(file.t_cols().expect("t_cols"), Some(t.cols()));
        assert_eq!(file.t_edge_ids().expect("t_edge_ids"), t.edge_ids());
        assert_eq!(file.load_transposed().expect("load t"), Some(t.clone()));
    } else {
        assert_eq!(file.t_offsets().expect("t_offsets"), None);
        assert_eq!(file.load_transposed().expect("load t"), None);
        assert!(file.transposed_page(0..0).is_err());
    }
    let infos = file.fields();
    assert_eq!(infos.len(), fields.len());
    for (info, f) in infos.iter().zip(fields) {
        assert_eq!((info.role, info.name.as_str(), info.dtype), (f.role, f.name.as_str(), f.tensor.dtype()));
        assert_eq!(info.shape, f.tensor.shape());
        let h = file.field(f.role, &f.name).expect("field");
        assert_eq!(h.shape(), f.tensor.shape());
        assert_eq!(h.dtype(), f.tensor.dtype());
        let back = h.to_tensor().expect("to_tensor");
        assert_eq!(back.shape(), f.tensor.shape());
        assert_eq!(bits(back.data()), bits(f.tensor.data()));
        let w = h.row_width();
        let all = bits(f.tensor.data());
        for start in 0..=h.num_rows() {
            for end in start..=h.num_rows().min(start + 3) {
                assert_eq!(bits(h.rows(start..end).expect("rows")), all[start * w..end * w].to_vec());
            }
        }
        assert!(h.rows(0..h.num_rows() + 1).is_err());
        h.verify().expect("field crc");
    }
    file.verify().expect("verify");
    file.validate().expect("validate");
    check_pages(file, g, false);
    if transpose {
        check_pages(file, &t, true);
    }
}

/// Pages of every size from 1 row to all rows, in order, reproduce the CSR.
fn check_pages(file: &GfgFile, g: &Graph, transposed: bool) {
    let n = g.num_dst();
    let page = |r: std::ops::Range<usize>| {
        if transposed {
            file.transposed_page(r)
        } else {
            file.page(r)
        }
    };
    for size in 1..=n.max(1) {
        let mut cols = Vec::new();
        let mut ids = Vec::new();
        let mut start = 0;
        while start < n {
            let end = (start + size).min(n);
            let p = page(start..end).expect("page");
            assert_eq!(p.rows, start..end);
            assert_eq!(p.offsets, &g.offsets()[start..=end]);
            assert_eq!(p.edge_range(), g.offsets()[start] as usize..g.offsets()[end] as usize);
            for k in 0..p.num_rows() {
                assert_eq!(&p.cols[p.local_row(k)], &g.cols()[g.row(start + k)]);
            }
            for local in 0..p.num_edges() {
                ids.push(p.edge_id(local));
            }
            assert_eq!(p.edge_ids.is_some(), g.edge_ids().is_some());
            // The same page without its ids: same rows and columns, no ids.
            let bare = file.page_without_ids(start..end, transposed).expect("page without ids");
            assert_eq!((bare.rows.clone(), bare.offsets, bare.cols, bare.edge_ids), (p.rows.clone(), p.offsets, p.cols, None));
            cols.extend_from_slice(p.cols);
            start = end;
        }
        assert_eq!(cols, g.cols());
        let expected: Vec<u64> = (0..g.num_edges()).map(|p| g.edge_id(p)).collect();
        assert_eq!(ids, expected);
    }
    let empty = page(n..n).expect("empty page");
    assert_eq!((empty.num_rows(), empty.num_edges(), empty.offsets.len()), (0, 0, 1));
    assert!(page(0..n + 1).is_err());
    #[allow(clippy::reversed_empty_ranges)]
    let backwards = page(1..0);
    assert!(backwards.is_err());
}

fn save_and_check(dir: &Path, name: &str, g: &Graph, transpose: bool, fields: &[Field]) {
    let path = dir.join(name);
    let views: Vec<(FieldRole, &str, TensorView<'_>)> =
        fields.iter().map(|f| (f.role, f.name.as_str(), f.tensor.view())).collect();
    save_gfg(&path, g, transpose, &views).expect("save");
    let file = GfgFile::open(&path).expect("open");
    check_file(&file, g, transpose, fields);
    // Nothing but the file itself is left in the directory.
    let stray: Vec<_> = std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(stray.is_empty(), "temporary files left: {stray:?}");
}

fn field(role: FieldRole, name: &str, rows: usize, width: Option<usize>, dtype: DType, seed: u64) -> Field {
    let shape: Vec<usize> = match width {
        Some(w) => vec![rows, w],
        None => vec![rows],
    };
    let n: usize = shape.iter().product();
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let tensor = match dtype {
        DType::F32 => Tensor::from_f32(shape, (0..n).map(|_| f32::from_bits(next() as u32)).collect()),
        DType::F64 => Tensor::from_f64(shape, (0..n).map(|_| f64::from_bits(next())).collect()),
    }
    .expect("tensor");
    Field { role, name: name.to_string(), tensor }
}

#[test]
fn small_graphs_round_trip() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Empty rows, a multi-edge, a self loop, user order differing from CSR order.
    let g = Graph::from_edges(4, 5, &[1, 2, 0, 3, 1, 2, 2, 0], &[0, 3, 0, 1, 3, 0, 0, 0]).expect("graph");
    assert!(g.edge_ids().is_some());
    let fields = vec![
        field(FieldRole::Src, "h", 4, Some(3), DType::F32, 1),
        field(FieldRole::Src, "cs", 4, None, DType::F32, 2),
        field(FieldRole::Dst, "cd", 5, None, DType::F64, 3),
        field(FieldRole::Edge, "w", 8, None, DType::F32, 4),
        field(FieldRole::Edge, "e.with.dots", 8, Some(2), DType::F64, 5),
    ];
    save_and_check(dir.path(), "g.gfg", &g, true, &fields);
    save_and_check(dir.path(), "g_no_t.gfg", &g, false, &fields);
    // CSR order = user order: no edge ids stored.
    let s = Graph::stencil_2d_4(4, 3).expect("stencil");
    save_and_check(dir.path(), "s.gfg", &s, true, &[field(FieldRole::Src, "x", 12, None, DType::F64, 6)]);
    let file = GfgFile::open(dir.path().join("s.gfg")).expect("open");
    assert!(!file.has_edge_ids());
    assert!(file.manifest().section("edge_ids").is_none());
    // Bipartite, with more sources than destinations and the reverse.
    let b = Graph::from_edges(7, 2, &[6, 0, 3, 3], &[1, 1, 0, 1]).expect("bipartite");
    save_and_check(dir.path(), "b.gfg", &b, true, &[field(FieldRole::Dst, "y", 2, Some(4), DType::F32, 7)]);
    save_and_check(dir.path(), "bt.gfg", &b.transpose(), true, &[]);
    // Nothing at all, and nodes without edges (zero-length sections).
    let e = Graph::from_edges(0, 0, &[], &[]).expect("empty");
    save_and_check(dir.path(), "e.gfg", &e, true, &[field(FieldRole::Edge, "w", 0, Some(3), DType::F32, 8)]);
    let z = Graph::from_csr(3, 4, vec![0; 5], vec![]).expect("edgeless");
    save_and_check(dir.path(), "z.gfg", &z, true, &[field(FieldRole::Dst, "d", 4, Some(0), DType::F64, 9)]);
    let zf = GfgFile::open(dir.path().join("z.gfg")).expect("open");
    let cols = zf.manifest().section("cols").expect("cols");
    assert_eq!((cols.elem, cols.length, cols.shape.clone()), (ElemType::U32, 0, vec![0]));
}

#[test]
fn overwrite_replaces_atomically_and_old_maps_stay_valid() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("g.gfg");
    let a = Graph::from_edges(3, 3, &[0, 1, 2], &[1, 2, 0]).expect("a");
    let b = Graph::from_edges(5, 2, &[4, 4, 0], &[0, 1, 1]).expect("b");
    let x = [1.0f32, 2.0, 3.0];
    GfgWriter::new(&a).field(FieldRole::Src, "x", &x[..]).save(&path).expect("save a");
    let old = GfgFile::open(&path).expect("open a");
    let old_cols = old.cols().expect("cols").to_vec();
    let handle = old.field(FieldRole::Src, "x").expect("x");
    drop(old);
    GfgWriter::new(&b).with_transpose(true).save(&path).expect("save b");
    // The old handle still reads the old file (replaced by rename, not in place).
    assert_eq!(bits(handle.rows(0..3).expect("rows")), bits(Data::F32(&x)));
    assert_eq!(old_cols, a.cols());
    let new = GfgFile::open(&path).expect("open b");
    check_file(&new, &b, true, &[]);
    assert!(matches!(new.field(FieldRole::Src, "x"), Err(GfgError::MissingField { .. })));
}

#[test]
fn handles_are_send_and_sync() {
    fn check<T: Send + Sync + 'static>() {}
    check::<GfgFile>();
    check::<tiga_storage::FieldHandle>();
    check::<GfgError>();
}

#[test]
fn writer_refuses_bad_fields() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("g.gfg");
    let g = Graph::from_edges(3, 2, &[0, 1, 2], &[1, 1, 0]).expect("g");
    let three = [0.0f32; 3];
    let two = [0.0f64; 2];
    let msg = |w: GfgWriter<'_>| match w.save(&path) {
        Ok(()) => panic!("expected an error"),
        Err(e) => e.to_string(),
    };
    let e = msg(GfgWriter::new(&g).field(FieldRole::Dst, "d", &three[..]));
    assert!(e.contains("cannot save dst field `d`") && e.contains("[2] or [2, F]"), "{e}");
    let e = msg(GfgWriter::new(&g).field(FieldRole::Edge, "w", &two[..]));
    assert!(e.contains("edge field") && e.contains("num_edges = 3"), "{e}");
    let e = msg(GfgWriter::new(&g).field(FieldRole::Src, "", &three[..]));
    assert!(e.contains("the name is empty"), "{e}");
    let e = msg(GfgWriter::new(&g).field(FieldRole::Src, "x", &three[..]).field(FieldRole::Src, "x", &three[..]));
    assert!(e.contains("given twice"), "{e}");
    let rank3 = Tensor::zeros(DType::F32, vec![3, 1, 1]).expect("t");
    let e = msg(GfgWriter::new(&g).field(FieldRole::Src, "r", &rank3));
    assert!(e.contains("[3, 1, 1]"), "{e}");
    // The same name in two roles is two fields.
    GfgWriter::new(&g).field(FieldRole::Src, "x", &three[..]).field(FieldRole::Edge, "x", &three[..]).save(&path).expect("save");
    assert!(!path.with_file_name("missing").exists());
    let f = GfgFile::open(&path).expect("open");
    assert_eq!(f.fields().len(), 2);
}

#[test]
fn manifest_prints_a_summary() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("g.gfg");
    let g = Graph::from_edges(3, 2, &[0, 1, 2], &[1, 1, 0]).expect("g");
    save_gfg(&path, &g, true, &[(FieldRole::Src, "x", TensorView::from(&[1.0f32, 2.0, 3.0][..]))]).expect("save");
    let text = GfgFile::open(&path).expect("open").manifest().to_string();
    for needle in ["gfg 2.0", "3 sources, 2 destinations", "edges: 3", "t_offsets", "field.src.x"] {
        assert!(text.contains(needle), "{needle} missing from\n{text}");
    }
}

/// A graph and fields from proptest's choices.
fn arb_case() -> impl Strategy<Value = (Graph, bool, Vec<Field>)> {
    (0usize..9, 0usize..9, any::<bool>(), any::<bool>(), any::<u64>())
        .prop_flat_map(|(ns, nd, csr, transpose, seed)| {
            let edge = if ns == 0 || nd == 0 { Just(None).boxed() } else { (0..ns as u32, 0..nd as u32).prop_map(Some).boxed() };
            let widths = proptest::collection::vec((0usize..3, proptest::option::of(0usize..4), any::<bool>()), 0..4);
            (Just((ns, nd, csr, transpose, seed)), proptest::collection::vec(edge, 0..30), widths)
        })
        .prop_map(|((ns, nd, csr, transpose, seed), edges, specs)| {
            let (src, dst): (Vec<u32>, Vec<u32>) = edges.into_iter().flatten().unzip();
            let mut g = Graph::from_edges(ns, nd, &src, &dst).expect("graph");
            if csr {
                // The same rows without edge ids (CSR order = user order).
                g = Graph::from_csr(ns, nd, g.offsets().to_vec(), g.cols().to_vec()).expect("csr");
            }
            let fields = specs
                .into_iter()
                .enumerate()
                .map(|(k, (role, width, f64))| {
                    let (role, rows) = match role {
                        0 => (FieldRole::Src, ns),
                        1 => (FieldRole::Dst, nd),
                        _ => (FieldRole::Edge, g.num_edges()),
                    };
                    let dtype = if f64 { DType::F64 } else { DType::F32 };
                    field(role, &format!("f{k}"), rows, width, dtype, seed ^ k as u64)
                })
                .collect();
            (g, transpose, fields)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn random_graphs_round_trip((g, transpose, fields) in arb_case()) {
        let dir = tempfile::tempdir().expect("tempdir");
        save_and_check(dir.path(), "r.gfg", &g, transpose, &fields);
    }
}
