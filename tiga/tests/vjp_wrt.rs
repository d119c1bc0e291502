//! A backward asked for some gradients only (`Kernel::vjp_wrt`) gives
//! those gradients with the full backward's bits, leaves the others out,
//! and runs only the stages that feed them: over a `.gfg` file, asking
//! for a parameter's gradient alone skips the source stage over the
//! transpose (its rows are never announced to the schedule's progress).

use tiga::compiler::ir::Role;
use tiga::runtime::storage::{save_gfg, GfgFile};
use tiga::{Graph, Inputs, Kernel, Progress, Schedule, Tensor, Wrt};

const GNN: &str = include_str!("../../examples/kernels/gnn.rs");

fn graph(n: usize) -> Graph {
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    for i in 0..n {
        for d in [1, 5, 17] {
            src.push(((i * 3 + d) % n) as u32);
            dst.push(i as u32);
        }
    }
    Graph::from_edges(n, n, &src, &dst).expect("graph")
}

fn values(len: usize, seed: usize) -> Vec<f64> {
    (0..len).map(|i| (((i * 7919 + seed * 104729) % 1009) as f64) / 1009.0 - 0.5).collect()
}

#[test]
fn a_named_subset_has_the_full_backwards_bits_and_nothing_else() {
    let (n, f) = (500, 4);
    let g = graph(n);
    let k = Kernel::from_source(GNN, "EdgeGate").expect("kernel");
    let h = Tensor::from_f64(vec![n, f], values(n * f, 1)).expect("h");
    let w = Tensor::from_f64(vec![g.num_edges()], values(g.num_edges(), 2)).expect("w");
    let p = Tensor::from_f64(vec![f], values(f, 3)).expect("p");
    let ins = Inputs::new().src("h", &h).edge("w", &w).param("p", &p);
    let cot = Tensor::from_f64(vec![n, f], values(n * f, 4)).expect("cot");
    let cots = [("out", cot.view())];
    let full = k.vjp(&g, &ins, &cots).expect("full");
    for wrt in
        [Wrt::only([(Role::Param, "p")]), Wrt::only([(Role::Src, "h")]), Wrt::only([(Role::Edge, "w"), (Role::Param, "p")])]
    {
        let part = k.vjp_wrt(&g, &ins, &cots, &wrt, &Schedule::default()).expect("subset");
        let Wrt::Only(names) = &wrt else { unreachable!() };
        assert_eq!(part.items.len(), names.len());
        for (role, name) in names {
            let got = part.get(*role, name).expect("asked for").as_f64().expect("f64");
            let want = full.get(*role, name).expect("full").as_f64().expect("f64");
            assert_eq!(got, want, "{name}");
        }
    }
    let none = k.vjp_wrt(&g, &ins, &cots, &Wrt::only([(Role::Src, "nope")]), &Schedule::default());
    assert!(none.expect_err("unknown field").to_string().contains("nope"));
}

#[test]
fn a_parameter_gradient_alone_skips_the_transposed_stage() {
    let (n, f) = (2000, 4);
    let g = graph(n);
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("g.gfg");
    save_gfg(&path, &g, true, &[]).expect("save");
    let file = GfgFile::open(&path).expect("open");
    let k = Kernel::from_source(GNN, "EdgeGate").expect("kernel");
    let h = Tensor::from_f64(vec![n, f], values(n * f, 5)).expect("h");
    let w = Tensor::from_f64(vec![g.num_edges()], values(g.num_edges(), 6)).expect("w");
    let p = Tensor::from_f64(vec![f], values(f, 7)).expect("p");
    let ins = Inputs::new().src("h", &h).edge("w", &w).param("p", &p);
    let cot = Tensor::from_f64(vec![n, f], values(n * f, 8)).expect("cot");
    let cots = [("out", cot.view())];
    let rows = |wrt: &Wrt| {
        let progress = Progress::new();
        let s = Schedule::new().page_rows(300).progress(progress.clone());
        let grads = k.vjp_wrt(&file, &ins, &cots, wrt, &s).expect("paged vjp");
        (progress.rows().1, grads)
    };
    let (all_rows, all) = rows(&Wrt::All);
    let (p_rows, only_p) = rows(&Wrt::only([(Role::Param, "p")]));
    // The full backward runs three stages of n rows (row statistics and the
    // edge side over the forward rows, the source side over the
    // transpose); the parameter's gradient needs the first two alone.
    assert_eq!(all_rows, 3 * n as u64, "full backward rows");
    assert_eq!(p_rows, 2 * n as u64, "parameter-only backward rows");
    assert_eq!(only_p.param("p").and_then(|t| t.as_f64()), all.param("p").and_then(|t| t.as_f64()));
    assert!(only_p.src("h").is_none());
}
