//! The GPU conformance checks, for any device: the simulator here
//! (`gpu_sim.rs`), a CUDA GPU where there is one (`gpu_cuda.rs`, feature
//! `cuda`). Every check compares the device against the f64 reference
//! interpreter within the CPU suites' tolerances (tests/ crate: 1e-5 in
//! f32; 1e-12 forward and 1e-10 backward in f64) and, where the lowering
//! promises it (sums in CSR order, no contraction), against the CPU JIT bit
//! for bit.
#![allow(dead_code)]

use tiga::compiler::back::ptx::PtxError;
use tiga::compiler::ir::Role;
use tiga::runtime::storage::{save_gfg, GfgFile};
use tiga::{Backend, Device, Error, Graph, Inputs, Kernel, Schedule, Tensor};

use crate::common::{disk_fields, random_fields, random_graph, tensor, Rng};

pub fn forward_tol(f32: bool) -> f64 {
    if f32 {
        1e-5
    } else {
        1e-12
    }
}

pub fn backward_tol(f32: bool) -> f64 {
    if f32 {
        1e-5
    } else {
        1e-10
    }
}

/// `|x - y| <= tol · max(|y|, 1)` elementwise (NaN matches NaN).
pub fn assert_close(got: &Tensor, want: &Tensor, tol: f64, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    for (i, (a, b)) in got.to_f64_vec().iter().zip(want.to_f64_vec()).enumerate() {
        let ok = (a - b).abs() <= tol * b.abs().max(1.0) || (a.is_nan() && b.is_nan());
        assert!(ok, "{what}: element {i} is {a}, the reference {b} (tolerance {tol:e})");
    }
}

pub fn assert_bits(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!((got.dtype(), got.shape()), (want.dtype(), want.shape()), "{what}: dtype and shape");
    let (x, y) = (got.to_f64_vec(), want.to_f64_vec());
    if let Some(i) = x.iter().zip(&y).position(|(a, b)| a.to_bits() != b.to_bits()) {
        panic!("{what}: element {i} is {}, the CPU's {} (bits differ)", x[i], y[i]);
    }
}

/// Graphs with the shapes the CPU suites cover: empty rows, isolated
/// nodes, self loops, multi-edges, a bipartite shape, one node (with and
/// without edges).
pub fn graphs(rng: &mut Rng) -> Vec<(&'static str, Graph)> {
    vec![
        ("random", random_graph(rng, 40, 40, 160, false)),
        ("sparse-with-isolated", random_graph(rng, 50, 50, 30, false)),
        ("bipartite", random_graph(rng, 13, 29, 70, false)),
        ("one-node", Graph::from_edges(1, 1, &[0, 0], &[0, 0]).expect("graph")),
        ("one-node-empty", Graph::from_edges(1, 1, &[], &[]).expect("graph")),
    ]
}

/// The fields of `k` on `g` (vectors `f` wide), in f32 or f64.
pub fn fields(k: &Kernel, g: &Graph, f: usize, f32: bool, rng: &mut Rng) -> Vec<(Role, String, Tensor)> {
    random_fields(k, g, f, || rng.uniform() * 2.0 - 1.0)
        .into_iter()
        .map(|(role, name, shape, data)| (role, name, tensor(&shape, &data, f32)))
        .collect()
}

pub fn inputs(ts: &[(Role, String, Tensor)]) -> Inputs<'_> {
    ts.iter().fold(Inputs::new(), |i, (r, n, t)| i.with_role(*r, n, t))
}

/// Whether `e` is the lowering's refusal, and then its message, which
/// must name the kernel.
pub fn refusal(e: &Error, kernel: &str) -> Option<String> {
    match e {
        Error::GpuLowering { kernel: k, source: PtxError::Unsupported(_) } => {
            let msg = e.to_string();
            assert_eq!(k, kernel, "the refusal names another kernel: {msg}");
            assert!(msg.contains(kernel) && msg.contains("does not lower"), "{msg}");
            Some(msg)
        }
        _ => None,
    }
}

/// What one kernel did on the device.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Matched,
    Refused(String),
}

/// Forward on `device` against the reference (and, `bits`, against the
/// CPU JIT bit for bit), over every graph, f32 and f64, vectors `f` wide.
pub fn forward(k: &Kernel, device: Device, f: usize, bits: bool, rng: &mut Rng) -> Outcome {
    let sched = Schedule::new().device(device);
    for (gname, g) in graphs(rng) {
        for f32 in [true, false] {
            let ts = fields(k, &g, f, f32, rng);
            let ins = inputs(&ts);
            let got = match k.run_with(&g, &ins, &sched) {
                Ok(o) => o,
                Err(e) => match refusal(&e, k.name()) {
                    Some(msg) => return Outcome::Refused(msg),
                    None => panic!("{} on {gname} on {}: {e}", k.name(), device.name()),
                },
            };
            let want = k.run_reference(&g, &ins).expect("reference");
            let what = format!("{} forward on {gname}, F={f}, {}, {}", k.name(), if f32 { "f32" } else { "f64" }, device.name());
            for ((n, a), (_, b)) in got.items.iter().zip(&want.items) {
                assert_close(a, b, forward_tol(f32), &format!("{what}: {n}"));
            }
            if bits {
                let cpu = k.run_with(&g, &ins, &Schedule::new().backend(Backend::Jit)).expect("jit");
                for ((n, a), (_, b)) in got.items.iter().zip(&cpu.items) {
                    assert_bits(a, b, &format!("{what}: {n} against the JIT"));
                }
            }
        }
    }
    Outcome::Matched
}

/// The VJP on `device` (cotangents with both signs) against the reference
/// VJP, over every graph, f32 and f64.
pub fn backward(k: &Kernel, device: Device, f: usize, rng: &mut Rng) -> Outcome {
    let sched = Schedule::new().device(device);
    if k.adjoint_plan().is_err() {
        return Outcome::Refused(format!("{} has no adjoint", k.name()));
    }
    for (gname, g) in graphs(rng) {
        for f32 in [true, false] {
            let ts = fields(k, &g, f, f32, rng);
            let ins = inputs(&ts);
            let shapes = k.output_shapes(&g, &ins).expect("shapes");
            let cots: Vec<(String, Tensor)> = shapes
                .iter()
                .map(|(n, s)| {
                    let len: usize = s.iter().product();
                    let data: Vec<f64> = (0..len).map(|i| ((i * 53 % 97) as f64) * 0.02 - 1.0).collect();
                    (n.clone(), tensor(s, &data, f32))
                })
                .collect();
            let views: Vec<(&str, tiga::TensorView<'_>)> = cots.iter().map(|(n, t)| (n.as_str(), t.view())).collect();
            let got = match k.vjp_with(&g, &ins, &views, &sched) {
                Ok(gr) => gr,
                Err(e) => match find_refusal(&e) {
                    Some(msg) => return Outcome::Refused(msg),
                    None => panic!("{} backward on {gname} on {}: {e}", k.name(), device.name()),
                },
            };
            let want = k.vjp_reference(&g, &ins, &views).expect("reference vjp");
            let what = format!("{} backward on {gname}, F={f}, {}, {}", k.name(), if f32 { "f32" } else { "f64" }, device.name());
            assert_eq!(got.items.len(), want.items.len(), "{what}: gradients");
            for (role, name, b) in &want.items {
                let a = got.get(*role, name).unwrap_or_else(|| panic!("{what}: no gradient of {name}"));
                assert_close(a, b, backward_tol(f32), &format!("{what}: d{name}"));
            }
        }
    }
    Outcome::Matched
}

/// A refusal by the lowering of any kernel (an adjoint stage's names the
/// stage).
pub fn find_refusal(e: &Error) -> Option<String> {
    match e {
        Error::GpuLowering { kernel, source: PtxError::Unsupported(_) } => refusal(e, &kernel.clone()),
        _ => None,
    }
}

/// A paged `.gfg` run on `device` (pages of 7 rows, and a device budget
/// small enough that pages are cut into sub-pages) against the in-memory
/// run on the same device, bit for bit, forward and backward.
pub fn paged_matches_in_memory(k: &Kernel, device: Device, rng: &mut Rng) {
    let g = random_graph(rng, 60, 50, 400, true);
    let ts = fields(k, &g, 4, true, rng);
    let ins = inputs(&ts);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("g.gfg");
    save_gfg(&path, &g, true, &disk_fields(&ts)).expect("save");
    let file = GfgFile::open(&path).expect("open");
    let memory = Schedule::new().device(device);
    let want = k.run_with(&g, &ins, &memory).expect("in memory");
    let want_grads = k.grad_with(&g, &ins, "out", &memory).expect("in-memory grad");
    let reference = k.run_reference(&g, &ins).expect("reference");
    // Small budgets that split pages further: four times larger for
    // kernels with vector fields (4 wide here) or a backward with more
    // per-row state than a scalar sum's.
    let scale = if ["NeighborSum", "Smoothing"].contains(&k.name()) { 1 } else { 4 };
    for sched in [
        Schedule::new().device(device).page_rows(7),
        Schedule::new().device(device).page_rows(1000).device_budget(scale * (8 << 10)),
        Schedule::new().device(device).page_rows(3).device_budget(scale * (4 << 10)),
    ] {
        let what = format!("{} paged on {} ({sched})", k.name(), device.name());
        // The file stores node and edge fields; parameters are passed.
        let params: Vec<(Role, String, Tensor)> = ts.iter().filter(|(r, ..)| *r == Role::Param).cloned().collect();
        let got = k.run_with(&file, &inputs(&params), &sched).unwrap_or_else(|e| panic!("{what}: {e}"));
        for ((n, a), (_, b)) in got.items.iter().zip(&want.items) {
            assert_bits(a, b, &format!("{what}: {n}"));
        }
        for ((n, a), (_, b)) in got.items.iter().zip(&reference.items) {
            assert_close(a, b, forward_tol(true), &format!("{what}: {n} against the reference"));
        }
        let grads = k.grad_with(&file, &ins, "out", &sched).unwrap_or_else(|e| panic!("{what}: backward: {e}"));
        for (role, name, b) in &want_grads.items {
            let a = grads.get(*role, name).unwrap_or_else(|| panic!("{what}: no gradient of {name}"));
            assert_bits(a, b, &format!("{what}: d{name}"));
        }
    }
}
