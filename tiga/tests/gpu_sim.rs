//! The GPU path on the PTX simulator (`Device::Simulated`): the kernels of
//! examples/kernels/gnn.rs lowered to PTX, uploaded, launched, downloaded
//! and (paged) streamed through a device budget, against the f64 reference
//! interpreter and the CPU JIT. The same checks run on a CUDA GPU in
//! `gpu_cuda.rs`.

mod common;
#[path = "common/gnn.rs"]
mod gnn;
#[path = "common/gpu_suite.rs"]
mod gpu_suite;

use common::Rng;
use gpu_suite::Outcome;
use tiga::{Device, DeviceTimer, Graph, Inputs, Schedule, Tensor};

const SIM: Device = Device::Simulated;

/// The scalar kernels the lowering handles today: forward against the
/// reference and bit for bit against the JIT, backward against the
/// reference VJP (their source stages run on the device too).
#[test]
fn scalar_kernels_match_reference_and_jit() {
    let mut rng = Rng(0x9e3779b97f4a7c15);
    for k in [gnn::NeighborSum::kernel(), gnn::Smoothing::kernel()] {
        assert_eq!(gpu_suite::forward(k, SIM, 1, true, &mut rng), Outcome::Matched, "{}", k.name());
        assert_eq!(gpu_suite::backward(k, SIM, 1, &mut rng), Outcome::Matched, "{}", k.name());
    }
}

/// Every kernel of gnn.rs, forward and backward, vectors 3 wide: each
/// either matches the reference or is refused by the lowering with an
/// error naming the kernel (so this starts passing kernel by kernel as the
/// lowering grows, and says which).
#[test]
fn every_gnn_kernel_matches_the_reference() {
    let mut rng = Rng(0x51ed_2701);
    let mut ran = Vec::new();
    for k in gnn::all() {
        for (dir, outcome) in
            [("forward", gpu_suite::forward(k, SIM, 3, false, &mut rng)), ("backward", gpu_suite::backward(k, SIM, 3, &mut rng))]
        {
            match outcome {
                Outcome::Matched => {
                    eprintln!("{} {dir}: matches the reference on the simulator", k.name());
                    ran.push((k.name().to_string(), dir));
                }
                Outcome::Refused(why) => panic!("{} {dir}: refused: {why}", k.name()),
            }
        }
    }
    assert_eq!(ran.len(), 2 * gnn::all().len());
}

/// A `.gfg` file streamed in pages (and in sub-pages cut by a small device
/// budget) gives the in-memory device run's bits, forward and backward.
#[test]
fn paged_runs_match_in_memory() {
    let mut rng = Rng(0xfeed_0017);
    for k in gnn::all() {
        gpu_suite::paged_matches_in_memory(k, SIM, &mut rng);
    }
}

/// A kernel the lowering refuses is an error naming it and what is not
/// lowered; nothing runs on the CPU instead.
#[test]
fn refused_kernel_is_named() {
    // Feature loops unrolled past the lowering's limit: 2^21 features.
    let k = gnn::VecSum::kernel();
    let g = Graph::from_edges(2, 2, &[0, 1], &[1, 0]).expect("graph");
    let f = 1usize << 21;
    let h = tiga::Tensor::from_f32(vec![2, f], vec![0.5; 2 * f]).expect("h");
    let ins = Inputs::new().src("h", &h);
    match k.run_with(&g, &ins, &Schedule::new().device(SIM)) {
        Err(e) => {
            let msg = gpu_suite::refusal(&e, "VecSum").unwrap_or_else(|| panic!("not the lowering's refusal: {e}"));
            assert!(msg.contains("unroll"), "{msg}");
        }
        Ok(_) => panic!("a 2^21-wide VecSum was lowered"),
    }
}

/// A device budget too small for the resident source fields is an error
/// that says so; one that fits only a row at a time still gives the same
/// bits; the timer counts the launches.
#[test]
fn device_budget_and_timer() {
    let mut rng = Rng(0xb0d9e7);
    let k = gnn::NeighborSum::kernel();
    let g = common::random_graph(&mut rng, 100, 80, 600, false);
    let x: Vec<f32> = (0..100).map(|i| (i as f32 * 0.37).sin()).collect();
    let ins = Inputs::new().src("x", &x);
    let whole = k.run_with(&g, &ins, &Schedule::new().device(SIM)).expect("whole");
    let timer = DeviceTimer::new();
    let tight = Schedule::new().device(SIM).device_budget(3 << 10).device_timer(timer.clone());
    let cut = k.run_with(&g, &ins, &tight).expect("in sub-pages");
    gpu_suite::assert_bits(&cut.items[0].1, &whole.items[0].1, "sub-pages against one page");
    let t = timer.times();
    assert!(t.launches > 1, "a 3 KiB budget cuts 80 rows into several launches: {t:?}");
    assert!(t.copied_bytes > 0 && t.kernel_ms >= 0.0, "{t:?}");
    let err = k.run_with(&g, &ins, &Schedule::new().device(SIM).device_budget(64)).expect_err("64 bytes hold nothing");
    assert!(err.to_string().contains("over the budget of 64 bytes"), "{err}");
}

/// A generated stencil runs on the device as its CSR, with the CSR's bits.
#[test]
fn generated_stencil_runs_as_its_csr() {
    let (st, g) = common::stencil_and_csr(&[(0, 1), (1, 0), (0, -1), (-1, 0)], 6, 5, false);
    let x: Vec<f64> = (0..30).map(|i| f64::from(i) * 0.5 - 3.0).collect();
    let t = Tensor::from_f64(vec![30], x).expect("x");
    let ins = Inputs::new().src("x", &t);
    let k = gnn::Smoothing::kernel();
    let sched = Schedule::new().device(SIM);
    let a = k.run_with(&st, &ins, &sched).expect("stencil on the simulator");
    let b = k.run_with(&g, &ins, &Schedule::new()).expect("csr on the cpu");
    gpu_suite::assert_bits(&a.items[0].1, &b.items[0].1, "generated stencil on the simulator");
}

/// Under sharding, each rank's local rows run on the device after the halo
/// exchange: the bits of the sharded CPU run, with launches counted.
#[test]
fn sharded_runs_go_to_the_device() {
    use std::sync::Arc;
    use tiga::{InProcess, ShardOptions, Sharded};
    let mut rng = Rng(0x5d_a7ed);
    let g = common::random_graph(&mut rng, 90, 90, 500, false);
    let x: Vec<f32> = (0..90).map(|i| (i as f32 * 0.21).cos()).collect();
    let ins = Inputs::new().src("x", &x);
    for k in [gnn::NeighborSum::kernel(), gnn::Smoothing::kernel()] {
        let res = InProcess::run(3, |c| {
            let sh = Sharded::from_graph(&g, Arc::new(c), &ShardOptions::default()).expect("shard");
            let cpu = k.run(&sh, &ins).expect("on the CPU");
            let timer = DeviceTimer::new();
            let dev = k.run_with(&sh, &ins, &Schedule::new().device(SIM).device_timer(timer.clone())).expect("on the device");
            (cpu, dev, timer.times().launches)
        });
        for r in res {
            let (cpu, dev, launches) = r.expect("rank");
            gpu_suite::assert_bits(&dev.items[0].1, &cpu.items[0].1, k.name());
            assert!(launches > 0, "{}: a sharded run on the device launched nothing", k.name());
        }
    }
}
