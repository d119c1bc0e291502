//! A schedule changes how a call runs, never its numbers: thread counts
//! give the same bits (the row executor reduces parameter partials in a
//! fixed order), the reference back end gives the interpreter's numbers,
//! asking for an ahead-of-time variant a kernel file does not have is an
//! error, and the RAM budget of a schedule sends a paged call's row outputs
//! to a file as `with_ram_budget` does, whose scope ends with its closure.

use tiga::runtime::storage::{save_gfg, GfgFile};
use tiga::{Backend, Graph, Inputs, Kernel, Schedule, Tensor};

const GNN: &str = include_str!("../../examples/kernels/gnn.rs");

fn ring_with_chords(n: usize) -> Graph {
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    for i in 0..n {
        for d in [1, 7, 31] {
            src.push(((i + d) % n) as u32);
            dst.push(i as u32);
        }
    }
    Graph::from_edges(n, n, &src, &dst).expect("graph")
}

#[test]
fn threads_and_back_ends_keep_the_numbers() {
    let n = 3000;
    let g = ring_with_chords(n);
    let f = 4;
    let h = Tensor::from_f32(vec![n, f], (0..n * f).map(|i| ((i * 37 % 101) as f32) / 101.0 - 0.5).collect()).expect("h");
    let k = Kernel::from_source(GNN, "VecSum").expect("kernel");
    let ins = Inputs::new().src("h", &h);
    let all = k.run(&g, &ins).expect("run");
    for threads in [1, 2, 3] {
        let got = k.run_with(&g, &ins, &Schedule::new().threads(threads)).expect("run");
        assert_eq!(got.items[0].1.as_f32(), all.items[0].1.as_f32(), "{threads} threads");
    }
    let jit = k.run_with(&g, &ins, &Schedule::new().backend(Backend::Jit)).expect("jit");
    assert_eq!(jit.items[0].1.as_f32(), all.items[0].1.as_f32());
    // The reference works in f64: a sum of three f32 values rounds once.
    let reference = k.run_with(&g, &ins, &Schedule::new().backend(Backend::Reference)).expect("reference");
    for (a, b) in all.items[0].1.to_f64_vec().iter().zip(reference.items[0].1.to_f64_vec()) {
        assert!((a - b).abs() <= 1e-6 * b.abs().max(1.0), "{a} vs {b}");
    }
    let e = k.run_with(&g, &ins, &Schedule::new().backend(Backend::Aot)).expect_err("a kernel file has no AOT variant");
    assert!(e.to_string().contains("ahead-of-time"), "{e}");

    // Gradients with parameter outputs (GatAttention's attention vectors)
    // at 1 and 2 threads: the same bits.
    let k = Kernel::from_source(GNN, "GcnNorm").expect("kernel");
    let cs = Tensor::from_f32(vec![n], (0..n).map(|i| (i % 5) as f32 * 0.1 + 0.2).collect()).expect("cs");
    let cd = Tensor::from_f32(vec![n], (0..n).map(|i| (i % 3) as f32 * 0.5 + 0.1).collect()).expect("cd");
    let w = Tensor::from_f32(vec![g.num_edges()], (0..g.num_edges()).map(|i| (i % 7) as f32 * 0.01).collect()).expect("w");
    let ins = Inputs::new().src("h", &h).src("cs", &cs).dst("cd", &cd).edge("w", &w);
    let cot = Tensor::from_f32(vec![n, f], vec![1.0; n * f]).expect("cot");
    let one = k.vjp_with(&g, &ins, &[("out", cot.view())], &Schedule::new().threads(1)).expect("vjp");
    let two = k.vjp_with(&g, &ins, &[("out", cot.view())], &Schedule::new().threads(2)).expect("vjp");
    for ((_, name, a), (_, _, b)) in one.items.iter().zip(&two.items) {
        assert_eq!(a.as_f32(), b.as_f32(), "gradient {name}");
    }
}

#[test]
fn a_schedule_budget_spills_row_outputs() {
    let n = 2000;
    let g = ring_with_chords(n);
    let f = 8;
    let h = Tensor::from_f64(vec![n, f], (0..n * f).map(|i| (i % 13) as f64 * 0.25).collect()).expect("h");
    let k = Kernel::from_source(GNN, "VecSum").expect("kernel");
    let ins = Inputs::new().src("h", &h);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("g.gfg");
    save_gfg(&path, &g, true, &[]).expect("save");
    let file = GfgFile::open(&path).expect("open");
    let want = k.run(&g, &ins).expect("run");
    let spill = dir.path().join("spill");
    let plain = Schedule::new().page_rows(300);
    let tight = plain.clone().ram_budget(1024).spill_dir(&spill);
    let kept = k.run_with(&file, &ins, &plain).expect("paged");
    let spilled = k.run_with(&file, &ins, &tight).expect("paged, spilled");
    assert!(!kept.items[0].1.is_file_backed());
    assert!(spilled.items[0].1.is_file_backed(), "the output is 128 KB, over a 1 KiB budget");
    assert_eq!(kept.items[0].1.as_f64(), want.items[0].1.as_f64());
    assert_eq!(spilled.items[0].1.as_f64(), want.items[0].1.as_f64());
}

#[test]
fn with_ram_budget_ends_with_its_closure_even_on_a_panic() {
    assert_eq!(tiga::with_ram_budget(4096, || tiga::with_ram_budget(5, tiga::offload::ram_budget)), Some(5));
    let r = std::panic::catch_unwind(|| tiga::with_ram_budget(77, || panic!("inside")));
    assert!(r.is_err());
    assert_eq!(tiga::offload::ram_budget(), None);
    let s = Schedule::new().ram_budget(9).spill_dir("elsewhere");
    assert_eq!(tiga::with_schedule(&s, tiga::offload::ram_budget), Some(9));
}
