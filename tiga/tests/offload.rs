//! Automatic offload: under a RAM budget, builders return a paged graph
//! (persisted with its transpose) and kernels give the same numbers.

use tiga::{with_ram_budget, Inputs, Kernel, PageOptions, Tensor};

const GNN: &str = include_str!("../../examples/kernels/gnn.rs");

#[test]
fn graphs_over_the_budget_run_paged_with_the_same_numbers() {
    let neigh: Vec<Vec<i64>> = vec![vec![-1, 0], vec![1, 0], vec![0, -1], vec![0, 1]];
    let small = with_ram_budget(1 << 30, || tiga::offload::build::stencil(&[30, 40], &neigh, false)).expect("fits");
    assert!(!small.is_paged(), "a graph under the budget stays in memory");
    let big = with_ram_budget(1000, || tiga::offload::build::stencil(&[30, 40], &neigh, false)).expect("offloaded");
    assert!(big.is_paged(), "a graph over the budget is persisted");
    let path = big.path().expect("an offloaded graph has a file").to_path_buf();
    assert!(path.exists());
    let k = Kernel::from_source(GNN, "GcnNorm").expect("kernel");
    let n = 1200;
    let e = small.num_edges();
    let h = Tensor::from_f64(vec![n, 3], (0..n * 3).map(|i| (i % 13) as f64 * 0.1).collect()).expect("h");
    let cs = Tensor::from_f64(vec![n], (0..n).map(|i| (i % 5) as f64 * 0.2 + 0.1).collect()).expect("cs");
    let cd = Tensor::from_f64(vec![n], (0..n).map(|i| (i % 7) as f64 * 0.3).collect()).expect("cd");
    let w = Tensor::from_f64(vec![e], (0..e).map(|i| (i % 11) as f64 * 0.05).collect()).expect("w");
    let ins = Inputs::new().src("h", &h).src("cs", &cs).dst("cd", &cd).edge("w", &w);
    let opts = PageOptions { page_rows: Some(100), page_bytes: None, prefetch: Some(2) };
    let a = k.run_any(&small, &ins, &opts).expect("in memory");
    let b = k.run_any(&big, &ins, &opts).expect("paged");
    assert_eq!(a.items[0].1.as_f64(), b.items[0].1.as_f64());
    let cot = Tensor::from_f64(vec![n, 3], vec![1.0; n * 3]).expect("cot");
    let ga = k.vjp_any(&small, &ins, &[("out", cot.view())], &opts).expect("vjp in memory");
    let gb = k.vjp_any(&big, &ins, &[("out", cot.view())], &opts).expect("vjp paged");
    for ((_, name, x), (_, _, y)) in ga.items.iter().zip(&gb.items) {
        assert_eq!(x.as_f64(), y.as_f64(), "gradient {name}");
    }
    // The private spill directory goes with the last handle.
    drop(big);
    assert!(!path.exists(), "the offloaded file is removed with its graph");
}
