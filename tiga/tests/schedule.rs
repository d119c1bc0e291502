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

/// A ring with chords of `n` nodes, in memory and saved as a `.gfg` (with
/// its transpose) in a temporary directory, and an `[n, f]` field `h`.
fn vecsum_case(n: usize, f: usize) -> (Graph, Tensor, tempfile::TempDir, GfgFile) {
    let g = ring_with_chords(n);
    let h = Tensor::from_f64(vec![n, f], (0..n * f).map(|i| (i % 13) as f64 * 0.25).collect()).expect("h");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("g.gfg");
    save_gfg(&path, &g, true, &[]).expect("save");
    let file = GfgFile::open(&path).expect("open");
    (g, h, dir, file)
}

#[test]
fn a_schedule_budget_spills_row_outputs() {
    let n = 2000;
    let (g, h, dir, file) = vecsum_case(n, 8);
    let k = Kernel::from_source(GNN, "VecSum").expect("kernel");
    let ins = Inputs::new().src("h", &h);
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

#[test]
fn with_ram_budget_reaches_the_rayon_workers_of_its_closure() {
    use rayon::prelude::*;
    // Graphs built inside a parallel iterator of the closure see the budget:
    // a 30 × 40 stencil is over 1000 bytes, so every one is offloaded.
    let neigh: Vec<Vec<i64>> = vec![vec![-1, 0], vec![1, 0], vec![0, -1], vec![0, 1]];
    let graphs = tiga::with_ram_budget(1000, || {
        (0..6).into_par_iter().map(|_| tiga::offload::build::stencil(&[30, 40], &neigh, false)).collect::<Vec<_>>()
    });
    for g in graphs {
        assert!(g.expect("stencil").is_paged(), "a graph built on a worker is over the budget");
    }
    // Scopes entered at once on two threads each see their own budget, on
    // every worker, and nothing is left behind.
    let seen: Vec<Vec<Option<u64>>> = std::thread::scope(|s| {
        let hs: Vec<_> = [111u64, 222]
            .into_iter()
            .map(|b| {
                s.spawn(move || {
                    tiga::with_ram_budget(b, || (0..64).into_par_iter().map(|_| tiga::offload::ram_budget()).collect::<Vec<_>>())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("scope thread")).collect()
    });
    assert!(seen[0].iter().all(|b| *b == Some(111)), "{:?}", seen[0]);
    assert!(seen[1].iter().all(|b| *b == Some(222)), "{:?}", seen[1]);
    let outside: Vec<Option<u64>> = (0..64).into_par_iter().map(|_| tiga::offload::ram_budget()).collect();
    assert!(outside.iter().all(Option::is_none));
    // A nested scope on a worker of the outer one wins there.
    let inner = tiga::with_ram_budget(4096, || {
        (0..8).into_par_iter().map(|_| tiga::with_ram_budget(5, tiga::offload::ram_budget)).collect::<Vec<_>>()
    });
    assert!(inner.iter().all(|b| *b == Some(5)));
}

#[test]
fn a_paged_call_counts_its_rows_in_the_schedules_progress() {
    let n = 2000;
    let (g, h, _dir, file) = vecsum_case(n, 4);
    let k = Kernel::from_source(GNN, "VecSum").expect("kernel");
    let ins = Inputs::new().src("h", &h);
    let progress = tiga::Progress::new();
    let s = Schedule::new().page_rows(300).progress(progress.clone());
    let out = k.run_with(&file, &ins, &s).expect("paged");
    // Seven pages of at most 300 rows: every destination row, once.
    assert_eq!(progress.rows(), (n as u64, n as u64));
    assert_eq!(out.items[0].1.as_f64(), k.run(&g, &ins).expect("in memory").items[0].1.as_f64());
    // The backward's paged stages add their rows: the source stage runs over
    // the transpose (n rows again); all of it is finished when the call is.
    let cot = Tensor::from_f64(vec![n, 4], vec![1.0; n * 4]).expect("cot");
    k.vjp_with(&file, &ins, &[("out", cot.view())], &s).expect("paged vjp");
    let (done, total) = progress.rows();
    assert_eq!(done, total);
    assert!(total >= 2 * n as u64 && total % n as u64 == 0, "{total}");
    // A schedule without a count, and in-memory calls, count nothing.
    let quiet = tiga::Progress::new();
    k.run_with(&g, &ins, &Schedule::new().progress(quiet.clone())).expect("in memory");
    assert_eq!(quiet.rows(), (0, 0));
}
