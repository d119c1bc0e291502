//! Rows with more edges than one worker should take alone (a hub
//! destination, and a hub source whose transposed row is huge in the
//! backward) are cut into segments for sum kernels; results match the
//! reference, and paged runs match in-memory runs bit for bit.

use tiga::runtime::storage::{save_gfg, GfgFile};
use tiga::{Graph, Inputs, Kernel, Schedule, Tensor};

const GNN: &str = include_str!("../../examples/kernels/gnn.rs");

#[test]
fn hub_rows_are_split_and_still_exact() {
    let n = 1000usize;
    let hub_edges = 200_000usize;
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    for e in 0..hub_edges {
        src.push((e % n) as u32); // into the hub destination 0
        dst.push(0);
        src.push(7); // out of the hub source 7
        dst.push((e % n) as u32);
    }
    let g = Graph::from_edges(n, n, &src, &dst).expect("graph");
    let f = 3;
    let h = Tensor::from_f64(vec![n, f], (0..n * f).map(|i| ((i * 31 % 97) as f64) / 97.0 - 0.5).collect()).expect("h");
    // MaxPool: its source gradient's relu mask is applied once per row, in
    // the finish (`hoist-row-masks`), after the split row's partial sums.
    for name in ["VecSum", "GcnNorm", "MaxPool"] {
        let k = Kernel::from_source(GNN, name).expect("kernel");
        let cs = Tensor::from_f64(vec![n], (0..n).map(|i| (i % 5) as f64 * 0.1 + 0.2).collect()).expect("cs");
        let cd = Tensor::from_f64(vec![n], (0..n).map(|i| (i % 3) as f64 * 0.5 + 0.1).collect()).expect("cd");
        let w = Tensor::from_f64(vec![g.num_edges()], (0..g.num_edges()).map(|i| (i % 7) as f64 * 0.01).collect()).expect("w");
        let ins = if name != "GcnNorm" {
            Inputs::new().src("h", &h)
        } else {
            Inputs::new().src("h", &h).src("cs", &cs).dst("cd", &cd).edge("w", &w)
        };
        let got = k.run(&g, &ins).expect("run");
        let want = k.run_reference(&g, &ins).expect("reference");
        for (a, b) in got.items[0].1.to_f64_vec().iter().zip(want.items[0].1.to_f64_vec()) {
            assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "{name}: {a} vs {b}");
        }
        let cot = Tensor::from_f64(vec![n, f], vec![1.0; n * f]).expect("cot");
        let gj = k.vjp(&g, &ins, &[("out", cot.view())]).expect("vjp");
        let gr = k.vjp_reference(&g, &ins, &[("out", cot.view())]).expect("vjp reference");
        for ((_, nm, a), (_, _, b)) in gj.items.iter().zip(&gr.items) {
            for (x, y) in a.to_f64_vec().iter().zip(b.to_f64_vec()) {
                assert!((x - y).abs() <= 1e-9 * y.abs().max(1.0), "{name} gradient {nm}: {x} vs {y}");
            }
        }
        // Paged: the same cuts, so the same bits.
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("g.gfg");
        save_gfg(&path, &g, true, &[]).expect("save");
        let file = GfgFile::open(&path).expect("open");
        let opts = Schedule::new().page_rows(100).prefetch(1);
        let paged = k.run_with(&file, &ins, &opts).expect("paged");
        assert_eq!(got.items[0].1.as_f64(), paged.items[0].1.as_f64(), "{name}");
        let gp = k.vjp_with(&file, &ins, &[("out", cot.view())], &opts).expect("paged vjp");
        for ((_, nm, a), (_, _, b)) in gj.items.iter().zip(&gp.items) {
            assert_eq!(a.as_f64(), b.as_f64(), "{name} gradient {nm}");
        }
    }
}
