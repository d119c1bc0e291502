//! Automatic offload: under a RAM budget, builders return a paged graph
//! (persisted with its transpose) and kernels give the same numbers.

use tiga::{with_ram_budget, Inputs, Kernel, Schedule, Tensor};

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
    let opts = Schedule::new().page_rows(100).prefetch(2);
    let a = k.run_with(&small, &ins, &opts).expect("in memory");
    let b = k.run_with(&big, &ins, &opts).expect("paged");
    assert_eq!(a.items[0].1.as_f64(), b.items[0].1.as_f64());
    let cot = Tensor::from_f64(vec![n, 3], vec![1.0; n * 3]).expect("cot");
    let ga = k.vjp_with(&small, &ins, &[("out", cot.view())], &opts).expect("vjp in memory");
    let gb = k.vjp_with(&big, &ins, &[("out", cot.view())], &opts).expect("vjp paged");
    for ((_, name, x), (_, _, y)) in ga.items.iter().zip(&gb.items) {
        assert_eq!(x.as_f64(), y.as_f64(), "gradient {name}");
    }
    // The private spill directory goes with the last handle.
    drop(big);
    assert!(!path.exists(), "the offloaded file is removed with its graph");
}

/// The bytes of the file `save_gfg` writes for `g` (with its transpose).
fn saved_bytes(g: &tiga::Graph) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("dir");
    let p = dir.path().join("g.gfg");
    let none: [(tiga::runtime::storage::FieldRole, &str, tiga::TensorView<'_>); 0] = [];
    tiga::runtime::save_gfg(&p, g, true, &none).expect("save");
    std::fs::read(&p).expect("read")
}

#[test]
fn builders_over_the_budget_stream_to_the_same_file() {
    // Under a budget of a few hundred bytes every builder streams its edges
    // through the external sort (many sorted runs) instead of building the
    // CSR; the file must be what saving the in-memory graph writes.
    let budget = 600;
    let neigh: Vec<Vec<i64>> = vec![vec![0, 1], vec![-1, 0], vec![1, 1], vec![0, -2]];
    for periodic in [false, true] {
        let want = tiga::Graph::stencil(&[9, 11], &neigh, periodic).expect("stencil");
        let got = with_ram_budget(budget, || tiga::offload::build::stencil(&[9, 11], &neigh, periodic)).expect("stencil");
        let path = got.path().expect("offloaded");
        assert_eq!(std::fs::read(path).expect("read"), saved_bytes(&want), "stencil, periodic {periodic}");
    }
    // Edges out of CSR order: the file keeps the user's edge ids.
    let n = 40u32;
    let (src, dst): (Vec<u32>, Vec<u32>) = (0..300u32).map(|i| ((i * 7 + 3) % n, (i * 13 + i / 5) % n)).unzip();
    let want = tiga::Graph::from_edges(n as usize, n as usize, &src, &dst).expect("edges");
    assert!(want.edge_ids().is_some());
    let got = with_ram_budget(budget, || tiga::offload::build::from_edges(n as usize, n as usize, &src, &dst)).expect("edges");
    assert_eq!(std::fs::read(got.path().expect("offloaded")).expect("read"), saved_bytes(&want), "from_edges");
    // The in-memory path's offload streams too (from_csr).
    let csr = with_ram_budget(budget, || {
        tiga::offload::build::from_csr(n as usize, n as usize, want.offsets().to_vec(), want.cols().to_vec())
    })
    .expect("csr");
    let plain = tiga::Graph::from_csr(n as usize, n as usize, want.offsets().to_vec(), want.cols().to_vec()).expect("csr");
    assert_eq!(std::fs::read(csr.path().expect("offloaded")).expect("read"), saved_bytes(&plain), "from_csr");
    // Concatenation: block-diagonal, the second part with edge ids.
    let ring = tiga::Graph::from_edges(5, 5, &[0, 1, 2, 3, 4], &[1, 2, 3, 4, 0]).expect("ring");
    let cat = with_ram_budget(budget, || tiga::offload::build::concat(&[&ring, &want])).expect("concat");
    let (mut s, mut d) = (vec![0, 1, 2, 3, 4], vec![1, 2, 3, 4, 0]);
    s.extend(src.iter().map(|x| x + 5));
    d.extend(dst.iter().map(|x| x + 5));
    let whole = tiga::Graph::from_edges(n as usize + 5, n as usize + 5, &s, &d).expect("whole");
    assert_eq!(std::fs::read(cat.path().expect("offloaded")).expect("read"), saved_bytes(&whole), "concat");
    // Bad input is refused as the in-memory builder refuses it.
    let e = with_ram_budget(budget, || tiga::offload::build::from_edges(4, 4, &[0, 9], &[1, 2])).expect_err("bad id");
    assert!(e.to_string().contains('9'), "{e}");
}
