//! The front end on the canonical kernel file: every kernel captures and
//! verifies, and the interpreter agrees with closed forms on a tiny graph.

use tiga_compiler::front::parse_kernel_file;
use tiga_compiler::interp::{interpret, Array};

const GNN: &str = include_str!("../../examples/kernels/gnn.rs");

#[test]
fn every_gnn_kernel_captures() {
    let ks = parse_kernel_file(GNN).expect("gnn.rs parses");
    let names: Vec<&str> = ks.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(
        names,
        ["NeighborSum", "Smoothing", "VecSum", "GcnNorm", "SageMean", "MaxPool", "GinSum", "GatAttention", "Top2Sum", "EdgeGate"]
    );
    for k in &ks {
        tiga_compiler::ir::verify(k).expect("verifies");
    }
}

#[test]
fn interpreter_matches_closed_forms() {
    let ks = parse_kernel_file(GNN).expect("parses");
    let get = |n: &str| ks.iter().find(|k| k.name == n).expect("kernel");
    // 0→1, 2→1, 1→0, 1→1 (self loop); node 2 has no in-edges.
    let edges = [(0u32, 1u32), (2, 1), (1, 0), (1, 1)];
    let x = Array::new(vec![3], vec![1.0, 2.0, 4.0]);
    let out = interpret(get("NeighborSum"), 3, 3, &edges, std::slice::from_ref(&x)).expect("runs");
    assert_eq!(out[0].data, vec![2.0, 7.0, 0.0]);
    let out = interpret(get("Smoothing"), 3, 3, &edges, std::slice::from_ref(&x)).expect("runs");
    assert_eq!(out[0].data, vec![0.5, 1.75, 0.0]);
    let out = interpret(get("Top2Sum"), 3, 3, &edges, &[x]).expect("runs");
    assert_eq!(out[0].data, vec![2.0, 6.0, 0.0]);
    // GatAttention with equal scores is the mean.
    let h = Array::new(vec![3, 2], vec![1.0, 10.0, 2.0, 20.0, 4.0, 40.0]);
    let a_src = Array::new(vec![3], vec![0.3, 0.3, 0.3]);
    let a_dst = Array::new(vec![3], vec![0.0; 3]);
    let out = interpret(get("GatAttention"), 3, 3, &edges, &[h, a_src, a_dst]).expect("runs");
    let want = [2.0, 20.0, 7.0 / 3.0, 70.0 / 3.0, 0.0, 0.0];
    for (a, b) in out[0].data.iter().zip(want) {
        assert!((a - b).abs() < 1e-12, "{a} vs {b}");
    }
}
