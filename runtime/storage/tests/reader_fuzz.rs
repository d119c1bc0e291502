//! The text and `.npy` readers on mangled input, for a fixed number of
//! cases (CI runs them every time): valid files with bytes flipped,
//! inserted, dropped and cut, and random bytes. A reader returns a value or
//! an error, never panics, and what it returns is sound: a graph passes its
//! own checks (ids below the node count, edges in order), a tensor holds as
//! many elements as its shape says. Files go through the file readers too,
//! which read in pieces and stop at what a header declares.

use proptest::prelude::*;
use tiga_runtime::Graph;
use tiga_storage::{
    parse_edge_list, parse_matrix_market, parse_npy, read_edge_list, read_matrix_market, read_npy, EdgeListOptions,
};

const EDGES: &str = "# FromNodeId\tToNodeId\n0 1\n2 1\n% dup\n1 0\r\n3 3\r2 0\n\n4 2\n";
const MTX: &str = "%%MatrixMarket matrix coordinate real general\n% c\n4 6 5\n3 1 0.5\n1 2 2.0\n4 6 1.5\n1 1 -1.0\n2 5 3.0\n";
const MTX_PATTERN: &str = "%%MatrixMarket matrix coordinate pattern symmetric\n3 3 3\n2 1\n3 3\n3 2\n";

fn npy_bytes() -> Vec<u8> {
    let t = tiga_runtime::Tensor::from_f32(vec![3, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).expect("tensor");
    tiga_storage::encode_npy(&t.view()).expect("encode")
}

/// A graph is sound: every column below its source count, offsets that
/// start at 0, never decrease and end at the edge count.
fn sound(g: &Graph) {
    let o = g.offsets();
    assert_eq!(o.len(), g.num_dst() + 1);
    assert_eq!(o[0], 0);
    assert!(o.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(o[g.num_dst()] as usize, g.num_edges());
    assert!(g.cols().iter().all(|&c| (c as usize) < g.num_src()));
}

/// `base` with `edits` applied: (position, kind, byte).
fn mangle(base: &[u8], edits: &[(prop::sample::Index, u8, u8)], cut: Option<prop::sample::Index>) -> Vec<u8> {
    let mut b = base.to_vec();
    for (at, kind, byte) in edits {
        if b.is_empty() {
            b.push(*byte);
            continue;
        }
        let i = at.index(b.len());
        match kind % 4 {
            0 => b[i] = *byte,
            1 => b.insert(i, *byte),
            2 => {
                b.remove(i);
            }
            _ => b[i] ^= 1 << (byte % 8),
        }
    }
    if let Some(c) = cut {
        b.truncate(c.index(b.len() + 1));
    }
    b
}

fn check_text(bytes: &[u8], dir: &std::path::Path) {
    let text = String::from_utf8_lossy(bytes);
    for ignore in [false, true] {
        let o = EdgeListOptions { num_nodes: None, ignore_extra_columns: ignore };
        if let Ok(g) = tiga_storage::io::parse_edge_list_with(&text, &o) {
            sound(&g);
        }
    }
    if let Ok(g) = parse_edge_list(&text, Some(9)) {
        sound(&g);
        assert_eq!(g.num_dst(), 9);
    }
    if let Ok((g, values)) = parse_matrix_market(&text) {
        sound(&g);
        if let Some(v) = values {
            assert_eq!(v.len(), g.num_edges());
        }
    }
    let path = dir.join("g.txt");
    std::fs::write(&path, bytes).expect("write");
    // The file readers agree with the in-memory ones on valid UTF-8 text.
    let from_file = read_edge_list(&path, None);
    if let Ok(g) = &from_file {
        sound(g);
    }
    if std::str::from_utf8(bytes).is_ok() {
        assert_eq!(from_file.is_ok(), parse_edge_list(&text, None).is_ok(), "{text:?}");
    }
    if let Ok((g, _)) = read_matrix_market(&path) {
        sound(&g);
    }
}

fn check_npy(bytes: &[u8], dir: &std::path::Path) {
    let parsed = parse_npy(bytes);
    if let Ok(t) = &parsed {
        assert_eq!(t.shape().iter().product::<usize>(), t.len());
    }
    let path = dir.join("x.npy");
    std::fs::write(&path, bytes).expect("write");
    let read = read_npy(&path);
    assert_eq!(read.is_ok(), parsed.is_ok(), "file and memory readers disagree");
    if let (Ok(a), Ok(b)) = (&read, &parsed) {
        assert_eq!(a.shape(), b.shape());
        assert_eq!(
            a.as_f64().map(|x| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>()),
            b.as_f64().map(|x| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>())
        );
        assert_eq!(
            a.as_f32().map(|x| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>()),
            b.as_f32().map(|x| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>())
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn mangled_text_graphs(
        which in 0usize..3,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), any::<u8>()), 0..10),
        cut in proptest::option::of(any::<prop::sample::Index>()),
    ) {
        let dir = tempfile::tempdir().expect("dir");
        let base = [EDGES, MTX, MTX_PATTERN][which].as_bytes();
        check_text(&mangle(base, &edits, cut), dir.path());
    }

    #[test]
    fn random_text(bytes in proptest::collection::vec(prop::sample::select(b" 0123456789\n\r\t#%-.e%".to_vec()), 0..200)) {
        let dir = tempfile::tempdir().expect("dir");
        check_text(&bytes, dir.path());
        let mut mtx = b"%%MatrixMarket matrix coordinate real general\n".to_vec();
        mtx.extend_from_slice(&bytes);
        check_text(&mtx, dir.path());
    }

    #[test]
    fn mangled_npy(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), any::<u8>()), 0..8),
        cut in proptest::option::of(any::<prop::sample::Index>()),
    ) {
        let dir = tempfile::tempdir().expect("dir");
        check_npy(&mangle(&npy_bytes(), &edits, cut), dir.path());
    }
}

#[test]
fn a_header_shorter_than_its_length_field_is_an_error() {
    let dir = tempfile::tempdir().expect("dir");
    for bytes in [
        &b"\x93NUMPY\x01\x00\x00\x00XX"[..],
        b"\x93NUMPY\x01\x00\x01\x00{XYZ",
        b"\x93NUMPY\x02\x00\x00\x00\x00\x00",
        b"\x93NUMPY\x01",
    ] {
        check_npy(bytes, dir.path());
        assert!(parse_npy(bytes).is_err());
    }
}
