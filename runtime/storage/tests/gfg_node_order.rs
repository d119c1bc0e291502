//! A `.gfg` written in a node order (format version 3): the order survives
//! the round trip, the file holds the renumbered CSR, the renumbered old
//! transpose and node fields in the new numbering (edge fields in the
//! caller's order), the rows read back in the caller's order are the
//! caller's graph on every side, and a broken or misplaced order is
//! refused.

mod gfg_raw;

use gfg_raw::*;
use tiga_runtime::exec::Side;
use tiga_runtime::{FieldRole, Graph, Realization, Renumber, Schedule, Tensor};
use tiga_storage::NODE_ORDER;
use tiga_storage::{GfgError, GfgFile, GfgWriter};

/// A square graph with a hub, a multi-edge, a self loop and an isolated
/// node (5), edges given out of CSR order.
fn square() -> Graph {
    let src = [3u32, 0, 2, 2, 1, 0, 6, 3, 3, 0, 0];
    let dst = [0u32, 1, 1, 1, 2, 3, 3, 6, 6, 4, 2];
    Graph::from_edges(7, 7, &src, &dst).expect("valid")
}

/// (offsets, (column, edge id) per position) of a CSR.
fn csr(g: &Graph) -> (Vec<u64>, Vec<(u32, u64)>) {
    (g.offsets().to_vec(), (0..g.num_edges()).map(|p| (g.cols()[p], g.edge_id(p))).collect())
}

fn values(n: usize, width: usize, seed: f32) -> Tensor {
    Tensor::from_f32(vec![n, width], (0..n * width).map(|i| seed + i as f32 * 0.25).collect()).expect("tensor")
}

/// Writes `g` in `method`'s order with a source, a destination and an edge
/// field, and checks what the file holds.
fn round_trip(g: &Graph, method: Renumber) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("g.gfg");
    let r = g.renumbered(method).expect("renumbers").expect("an order");
    let (x, y, w) = (values(g.num_src(), 2, 1.0), values(g.num_dst(), 1, -3.0), values(g.num_edges(), 1, 7.0));
    GfgWriter::renumbered(g, &r)
        .expect("a renumbering of g")
        .with_transpose(true)
        .field(FieldRole::Src, "x", x.view())
        .field(FieldRole::Dst, "y", y.view())
        .field(FieldRole::Edge, "w", w.view())
        .save(&path)
        .expect("save");
    let f = GfgFile::open(&path).expect("open");
    let what = format!("{method:?}");
    assert_eq!(f.version(), (3, 0), "{what}");
    f.validate().expect("every checksum and invariant");
    let stored = f.node_order().expect("reads").expect("an order");
    assert_eq!((stored.method, &stored.dst), (method, &r.dst), "{what}: the order survives");
    assert_eq!(stored.src_order().is_some(), g.num_src() == g.num_dst(), "{what}");
    // The file's CSRs are the renumbered ones.
    let forward = r.forward().expect("in memory");
    assert_eq!(csr(&f.load_graph().expect("load")), csr(forward), "{what}: forward");
    let t = f.load_transposed().expect("load").expect("stored");
    assert_eq!(csr(&t), csr(&r.transposed(g).expect("transpose")), "{what}: the renumbered old transpose");
    // Node fields in the new numbering; the edge field as given.
    let field = |role, name| f.field(role, name).expect("field").to_tensor().expect("read");
    let moved_x = match stored.src_order() {
        Some(o) => o.to_new(&x.view()).expect("move"),
        None => x.clone(),
    };
    let f32s = |t: &Tensor| t.as_f32().expect("f32").to_vec();
    assert_eq!(f32s(&field(FieldRole::Src, "x")), f32s(&moved_x), "{what}: source field");
    assert_eq!(f32s(&field(FieldRole::Dst, "y")), f32s(&r.dst.to_new(&y.view()).expect("move")), "{what}: destination field");
    assert_eq!(f32s(&field(FieldRole::Edge, "w")), f32s(&w), "{what}: edge field");
    // Read back in the caller's order, two rows a page: the caller's graph
    // on every side, each row's edges in their order.
    let view = Realization::renumbered(&f, Renumber::None).expect("view").expect("a stored order");
    assert!(view.is_layout());
    let schedule = Schedule::new().page_rows(2);
    for (side, want, sources) in [
        (Side::Forward, g.clone(), g.num_src()),
        (Side::Transposed, g.transpose(), g.num_dst()),
        (Side::RowReversed, (*g.row_reversed()).clone(), g.num_src()),
    ] {
        let rows = view.base().rows(side, true).expect("rows");
        let got = rows.to_graph(sources, &schedule).expect("collect");
        assert_eq!(csr(&got), csr(&want), "{what}: {side:?} in the caller's order");
    }
    // Another method than the stored one is refused; none and the same
    // one give the stored view.
    let other = if method == Renumber::Degree { Renumber::Cluster } else { Renumber::Degree };
    if g.num_src() == g.num_dst() {
        let e = Realization::renumbered(&f, other).expect_err("another order").to_string();
        assert!(e.contains(&format!("node order (by {})", method.name())), "{e}");
    }
    assert!(Realization::renumbered(&f, method).expect("same").is_some());
}

#[test]
fn a_node_order_survives_a_round_trip_on_every_side() {
    let g = square();
    for method in [Renumber::Degree, Renumber::Rcm, Renumber::Cluster] {
        round_trip(&g, method);
    }
    // A bipartite graph: rows renumbered by in-degree, sources keep ids.
    let b = Graph::from_edges(3, 5, &[0, 1, 2, 2, 1], &[4, 4, 4, 0, 2]).expect("valid");
    round_trip(&b, Renumber::Degree);
}

#[test]
fn a_broken_or_misplaced_order_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("g.gfg");
    let g = square();
    let r = g.renumbered(Renumber::Degree).expect("renumbers").expect("an order");
    GfgWriter::renumbered(&g, &r).expect("writer").save(&path).expect("save");
    let bytes = std::fs::read(&path).expect("read");
    // Two nodes given the same id, every checksum recomputed: refused when
    // the order is read, naming the section and the position.
    let mut dup = bytes.clone();
    let k = at(&dup, NODE_ORDER);
    let first = u32_at(&dup, k);
    dup[k + 4..k + 8].copy_from_slice(&first.to_le_bytes());
    fix_section_crcs(&mut dup);
    let f = open_bytes(&path, &dup).expect("opens: the order is read on first use");
    let e = f.node_order().expect_err("not a permutation");
    assert!(matches!(&e, GfgError::Corrupt { section, .. } if section == NODE_ORDER), "{e}");
    assert!(e.to_string().contains("entry 1 is"), "{e}");
    assert!(Realization::renumbered(&f, Renumber::None).is_err());
    // The same sections in a version 2 file: refused on open (a version 2
    // reader would ignore them and read the wrong numbering).
    let mut v2 = bytes.clone();
    v2[8..10].copy_from_slice(&2u16.to_le_bytes());
    fix_header_crc(&mut v2);
    let e = open_err(&path, &v2).to_string();
    assert!(e.contains("belong to version 3 files"), "{e}");
    // A method number no method has.
    let mut bad = bytes.clone();
    let k = at(&bad, "node_order_method");
    bad[k..k + 4].copy_from_slice(&9u32.to_le_bytes());
    fix_section_crcs(&mut bad);
    let e = open_bytes(&path, &bad).expect("opens").node_order().expect_err("no method 9").to_string();
    assert!(e.contains("9 is not a renumbering method"), "{e}");
    // A renumbering of another graph is refused by the writer.
    let other = Graph::from_edges(7, 7, &[0], &[1]).expect("valid");
    let e = GfgWriter::renumbered(&other, &r).expect_err("another graph").to_string();
    assert!(e.contains("given with a graph of (7, 7, 1)"), "{e}");
}
