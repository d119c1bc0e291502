//! The GPU conformance checks of `gpu_sim.rs` on CUDA GPU 0 (feature
//! `cuda`): every kernel of examples/kernels/gnn.rs forward and backward
//! against the f64 reference (or the lowering's refusal, named), the scalar
//! kernels bit for bit against the CPU JIT, vectors 1, 3 and 64 wide, and a
//! paged `.gfg` run against the in-memory one. Without a driver or a GPU
//! each test prints `skipped: no CUDA GPU` and passes (bench/gpu/check.sh,
//! run where there is one, fails on that line).

mod common;
#[path = "common/gnn.rs"]
mod gnn;
#[path = "common/gpu_suite.rs"]
mod gpu_suite;

use common::Rng;
use gpu_suite::Outcome;
use tiga::Device;

const GPU: Device = Device::Cuda(0);

fn have_gpu() -> bool {
    match tiga::runtime::gpu::open(GPU) {
        Ok(_) => true,
        Err(e) => {
            eprintln!("skipped: no CUDA GPU: {e}");
            false
        }
    }
}

#[test]
fn every_gnn_kernel_on_cuda() {
    if !have_gpu() {
        return;
    }
    let mut rng = Rng(0xc0da_0001);
    let mut ran = Vec::new();
    for k in gnn::all() {
        for f in [1usize, 3, 64] {
            let bits = matches!(k.name(), "NeighborSum" | "Smoothing");
            for (dir, outcome) in [
                ("forward", gpu_suite::forward(k, GPU, f, bits, &mut rng)),
                ("backward", gpu_suite::backward(k, GPU, f, &mut rng)),
            ] {
                match outcome {
                    Outcome::Matched => {
                        eprintln!("{} {dir} F={f}: matches the reference on {}", k.name(), GPU.name());
                        ran.push((k.name().to_string(), dir));
                    }
                    Outcome::Refused(why) => eprintln!("{} {dir} F={f}: refused: {why}", k.name()),
                }
            }
        }
    }
    for k in ["NeighborSum", "Smoothing"] {
        for dir in ["forward", "backward"] {
            assert!(ran.contains(&(k.to_string(), dir)), "{k} {dir} did not run on {}", GPU.name());
        }
    }
}

#[test]
fn paged_runs_match_in_memory_on_cuda() {
    if !have_gpu() {
        return;
    }
    let mut rng = Rng(0xc0da_0002);
    for k in [gnn::NeighborSum::kernel(), gnn::Smoothing::kernel()] {
        gpu_suite::paged_matches_in_memory(k, GPU, &mut rng);
    }
}
