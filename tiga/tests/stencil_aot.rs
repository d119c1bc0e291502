//! The macro's ahead-of-time generated-stencil variants (the grid read from
//! `RawArgs::stencil` at run time) against the JIT's stencil variants (the
//! grid baked in) and the CSR realization of the same stencil: bit-identical
//! outputs and gradients, for the scalar kernels of examples/kernels/gnn.rs
//! and a few more (a mean and a max, which read the degree; a softmax, with
//! a pre-pass over the neighbours, a destination field and `exp`) through
//! `#[message_passing]`, on grids with one row or one column, periodic or
//! not, with offsets larger than the grid.

use tiga::{Backend, DType, Inputs, Kernel, Schedule, Tensor};

mod common;
use common::{cotangents, inputs_of, stencil_and_csr, stencil_fields};

// The kernels of gnn.rs under the macro, compiled once in the
// conformance crate rather than into every test binary.
use tiga_conformance::gnn;

#[allow(clippy::all)]
mod scalar {
    use tiga::message_passing;

    /// out[i] = mean_{j→i} x[j]
    #[message_passing(reduce = mean)]
    pub mod ScalarMean {
        use tiga::lang::*;
        pub struct Src {
            pub x: f32,
        }
        pub fn edge(src: &Src) -> f32 {
            src.x
        }
    }

    /// out[i] = max_{j→i} (2 x[j] - 1)   (an empty row gives 0)
    #[message_passing(reduce = max)]
    pub mod ScalarMax {
        use tiga::lang::*;
        pub struct Src {
            pub x: f32,
        }
        pub fn edge(src: &Src) -> f32 {
            2.0 * src.x - 1.0
        }
    }

    /// out[i] = Σ_{j→i} softmax_i(leaky_relu(a[j] + b[i], 0.2)) · x[j]
    #[message_passing(reduce = softmax)]
    pub mod ScalarSoftmax {
        use tiga::lang::*;
        pub struct Src {
            pub x: f32,
            pub a: f32,
        }
        pub struct Dst {
            pub b: f32,
        }
        pub fn edge(src: &Src, dst: &Dst) -> (f32, f32) {
            (leaky_relu(src.a + dst.b, 0.2), src.x)
        }
    }
}

/// The macro kernels with an AOT stencil variant (scalar values per row,
/// no edge fields).
fn kernels() -> Vec<(&'static str, &'static Kernel)> {
    vec![
        ("NeighborSum", gnn::NeighborSum::kernel()),
        ("Smoothing", gnn::Smoothing::kernel()),
        ("Top2Sum", gnn::Top2Sum::kernel()),
        ("ScalarMean", scalar::ScalarMean::kernel()),
        ("ScalarMax", scalar::ScalarMax::kernel()),
        ("ScalarSoftmax", scalar::ScalarSoftmax::kernel()),
    ]
}

/// Macro kernels with feature loops: no AOT stencil variant (the JIT's
/// runs them faster), so `Backend::Aot` refuses them on a stencil and
/// `Backend::Auto` takes the JIT.
fn vector_kernels() -> Vec<(&'static str, &'static Kernel)> {
    vec![
        ("VecSum", gnn::VecSum::kernel()),
        ("SageMean", gnn::SageMean::kernel()),
        ("MaxPool", gnn::MaxPool::kernel()),
        ("GinSum", gnn::GinSum::kernel()),
        ("GatAttention", gnn::GatAttention::kernel()),
    ]
}

/// Offsets: four neighbours; a lopsided set with a repeated offset; and
/// offsets larger than most grids below (a skipped neighbour, or one that
/// wraps more than once).
fn offset_sets() -> Vec<Vec<(i64, i64)>> {
    vec![
        vec![(-1, 0), (1, 0), (0, -1), (0, 1)],
        vec![(-2, 1), (1, 0), (0, -1), (0, 3), (1, 1), (1, 0)],
        vec![(0, 0), (7, -1), (-1, 40), (0, 1), (-150, -2)],
    ]
}

/// Grids: a single cell, one row, one column, small ones with no interior,
/// and wider ones whose interior runs whole blocks of rows (32 rows in f32,
/// 16 in f64) and leftovers.
const GRIDS: [(usize, usize); 7] = [(1, 1), (1, 7), (5, 1), (4, 5), (13, 17), (9, 70), (61, 67)];

/// Bit-for-bit equality of two tensors (of either dtype); the message
/// names the first element that differs.
fn assert_same(a: &Tensor, b: &Tensor, what: &str) {
    assert_eq!(a.shape(), b.shape(), "{what}: shape");
    let (x, y) = (a.to_f64_vec(), b.to_f64_vec());
    if let Some(i) = x.iter().zip(&y).position(|(p, q)| p.to_bits() != q.to_bits()) {
        panic!("{what}: element {i} is {} against {}", x[i], y[i]);
    }
}

fn on(backend: Backend) -> Schedule {
    // Two threads: the rows are cut into chunks that start mid grid row.
    let mut s = Schedule::new().backend(backend);
    s.threads = Some(2);
    s
}

#[test]
fn which_kernels_have_an_aot_stencil_variant() {
    for (name, k) in kernels() {
        for dtype in [DType::F32, DType::F64] {
            assert!(k.aot_entry(dtype, &[], true, Backend::Aot).is_some(), "{name} {dtype}");
            // Auto takes it too (tiga::STENCIL_AUTO_AOT).
            assert!(k.stencil_backend_for(dtype, &[], Backend::Auto).starts_with("rust-aot"), "{name} {dtype}");
        }
    }
    for (name, k) in vector_kernels() {
        for w in [1usize, 4, 64] {
            assert!(k.aot_variant(DType::F32, &[w]).is_some_and(|v| v.stencil.is_none()), "{name} F={w}");
            assert!(k.stencil_backend_for(DType::F32, &[w], Backend::Auto).starts_with("cranelift"), "{name} F={w}");
        }
    }
    // Kernels with edge fields have none (and their CSR variant stays).
    let g = gnn::GcnNorm::kernel();
    assert!(g.aot_variant(DType::F32, &[8]).is_some_and(|v| v.stencil.is_none()));
    assert!(g.aot_entry(DType::F32, &[8], false, Backend::Auto).is_some());
}

#[test]
fn aot_stencil_equals_jit_stencil_and_csr() {
    for offsets in offset_sets() {
        for periodic in [false, true] {
            for (rows, cols) in GRIDS {
                let (st, g) = stencil_and_csr(&offsets, rows, cols, periodic);
                for (name, k) in kernels() {
                    {
                        let f = 1;
                        for f64 in [false, true] {
                            let ts = stencil_fields(k, rows * cols, f, f64);
                            let ins = inputs_of(&ts);
                            let what = format!("{name} F={f} {rows}x{cols} {offsets:?} periodic={periodic} f64={f64}");
                            let csr = k.run_with(&g, &ins, &on(Backend::Jit)).expect("csr run");
                            let jit = k.run_with(&st, &ins, &on(Backend::Jit)).expect("jit stencil run");
                            let aot = k.run_with(&st, &ins, &on(Backend::Aot)).unwrap_or_else(|e| panic!("{what}: {e}"));
                            for (((o, c), (_, j)), (_, a)) in csr.items.iter().zip(&jit.items).zip(&aot.items) {
                                assert_same(j, c, &format!("{what}: output {o}, JIT stencil against CSR"));
                                assert_same(a, c, &format!("{what}: output {o}, AOT stencil against CSR"));
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The backward: every stage on the generated stencil (source gradients on
/// the transposed stencil) by the AOT stencil variants, against the JIT's
/// and against the backward on the CSR; where the JIT refuses a generated
/// backward (periodic grids, degrees or ranks), the AOT path refuses too.
#[test]
fn aot_stencil_vjp_equals_jit_stencil_and_csr() {
    for offsets in offset_sets() {
        for periodic in [false, true] {
            for (rows, cols) in GRIDS {
                let (st, g) = stencil_and_csr(&offsets, rows, cols, periodic);
                // Kernels whose backward must run generated (and so by the
                // AOT stencil variants of every stage) where not periodic.
                let must = ["Smoothing", "NeighborSum"];
                for (name, k) in kernels() {
                    let f = 1;
                    let ts = stencil_fields(k, rows * cols, f, false);
                    let ins = inputs_of(&ts);
                    let cots = cotangents(k, &g, &ins);
                    let cot: Vec<(&str, tiga::TensorView<'_>)> = cots.iter().map(|(o, t)| (o.as_str(), t.view())).collect();
                    let what = format!("{name} {rows}x{cols} {offsets:?} periodic={periodic}");
                    let csr = k.vjp_with(&g, &ins, &cot, &on(Backend::Jit)).expect("csr vjp");
                    let jit = k.vjp_with(&st, &ins, &cot, &on(Backend::Jit));
                    let aot = k.vjp_with(&st, &ins, &cot, &on(Backend::Aot));
                    match (jit, aot) {
                        (Ok(jit), Ok(aot)) => {
                            assert!(!periodic, "{what}: a periodic backward ran generated");
                            for ((c, j), a) in csr.items.iter().zip(&jit.items).zip(&aot.items) {
                                assert_same(&j.2, &c.2, &format!("{what}: gradient {}, JIT stencil against CSR", c.1));
                                assert_same(&a.2, &c.2, &format!("{what}: gradient {}, AOT stencil against CSR", c.1));
                            }
                        }
                        (Err(j), Err(a)) => {
                            let (j, a) = (j.to_string(), a.to_string());
                            assert!(j.contains("CSR realization") || j.contains("parameter outputs"), "{what}: {j}");
                            assert!(a.contains("CSR realization") || a.contains("parameter outputs"), "{what}: {a}");
                            assert!(periodic || !must.contains(&name), "{what}: {a}");
                        }
                        (j, a) => {
                            panic!("{what}: JIT {:?}, AOT {:?}", j.err().map(|e| e.to_string()), a.err().map(|e| e.to_string()))
                        }
                    }
                }
            }
        }
    }
}

/// `Backend::Aot` on a generated stencil runs the macro's variant; a kernel
/// file has none, and says so.
#[test]
fn aot_backend_on_a_stencil() {
    let (st, _) = stencil_and_csr(&[(-1, 0), (1, 0), (0, -1), (0, 1)], 6, 9, false);
    let x: Vec<f32> = (0..54).map(|i| i as f32).collect();
    let ins = Inputs::new().src("x", &x);
    let k = gnn::Smoothing::kernel();
    let out = k.run_with(&st, &ins, &Schedule::new().backend(Backend::Aot)).expect("AOT stencil run");
    // Cell (0, 0) has the neighbours below (9) and to the right (1).
    assert_eq!(out.f32("out").expect("out")[0], 0.25 * 10.0);
    assert!(k.stencil_backend_for(DType::F32, &[], Backend::Aot).starts_with("rust-aot"));
    let auto = k.stencil_backend_for(DType::F32, &[], Backend::Auto);
    assert_eq!(auto.starts_with("rust-aot"), tiga::STENCIL_AUTO_AOT, "{auto}");
    let file = Kernel::from_source(include_str!("../../examples/kernels/gnn.rs"), "Smoothing").expect("kernel");
    let e = file.run_with(&st, &ins, &Schedule::new().backend(Backend::Aot)).expect_err("a kernel file has no AOT variant");
    assert!(e.to_string().contains("no ahead-of-time variant") && e.to_string().contains("generated stencil"), "{e}");
    // A vector kernel: no AOT stencil variant, so Aot refuses and Auto runs
    // the JIT's.
    let h: Vec<f32> = (0..54 * 4).map(|i| i as f32).collect();
    let ins = Inputs::new().src("h", tiga::TensorView::from_slice_f32(vec![54, 4], &h).expect("shape"));
    let v = gnn::VecSum::kernel();
    let e = v.run_with(&st, &ins, &Schedule::new().backend(Backend::Aot)).expect_err("no AOT stencil variant");
    assert!(e.to_string().contains("generated stencil"), "{e}");
    v.run(&st, &ins).expect("Auto runs the JIT's stencil variant");
    // `explain` says which back end runs each on a stencil.
    let said = k.explain();
    assert!(said.contains("stencils:  rust-aot stencil variant"), "{said}");
    let said = v.explain();
    assert!(said.contains("stencils:  cranelift JIT") && said.contains("feature loops"), "{said}");
}
