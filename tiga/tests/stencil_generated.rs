//! The generated-stencil realization (neighbours computed from the index)
//! against the CSR realization of the same stencil: bit-identical outputs
//! and gradients.

use tiga::{Kernel, Tensor};

mod common;
use common::{cotangents, inputs_of, stencil_and_csr, stencil_fields};

const GNN: &str = include_str!("../../examples/kernels/gnn.rs");

/// Bit-for-bit equality of two tensors of either dtype.
fn same_bits(a: &Tensor, b: &Tensor) -> bool {
    a.shape() == b.shape() && a.to_f64_vec().iter().zip(b.to_f64_vec()).all(|(x, y)| x.to_bits() == y.to_bits())
}

#[test]
fn generated_stencil_equals_csr_stencil() {
    // The four-neighbour stencil, and a lopsided one (interior rows take a
    // branch-free path whose border is as wide as the largest offset, four
    // (f32) or two (f64) rows per vector for scalar kernels; rows are cut
    // in chunks that start mid grid row).
    let four = vec![(-1i64, 0i64), (1, 0), (0, -1), (0, 1)];
    let lopsided = vec![(-2i64, 1i64), (1, 0), (0, -1), (0, 3), (1, 1)];
    for (offsets, periodic) in [(&four, false), (&four, true), (&lopsided, false), (&lopsided, true)] {
        for (rows, cols) in [(1usize, 1usize), (1, 7), (5, 1), (13, 17), (4, 5), (61, 67)] {
            let (st, g) = stencil_and_csr(offsets, rows, cols, periodic);
            for name in ["Smoothing", "NeighborSum", "VecSum", "SageMean", "MaxPool", "GatAttention", "Top2Sum"] {
                let k = Kernel::from_source(GNN, name).expect("kernel");
                for f64 in [false, true] {
                    let ts = stencil_fields(&k, rows * cols, 3, f64);
                    let ins = inputs_of(&ts);
                    let csr = k.run(&g, &ins).expect("csr run");
                    let gen = k.run(&st, &ins).expect("generated run");
                    for ((o, a), (_, b)) in csr.items.iter().zip(&gen.items) {
                        assert!(same_bits(a, b), "{name} {rows}x{cols} periodic={periodic} f64={f64}: output {o}");
                    }
                }
            }
        }
    }
}

/// The backward on a generated stencil (every stage generated too, source
/// gradients on the transposed stencil) against the backward on the CSR
/// stencil: bit-identical gradients. Kernels whose backward needs what a
/// generated stencil does not build (degrees, edge ranks, parameter
/// outputs) and periodic grids get an error naming the CSR realization.
#[test]
fn generated_stencil_vjp_equals_csr_stencil_vjp() {
    let four = vec![(-1i64, 0i64), (1, 0), (0, -1), (0, 1)];
    let lopsided = vec![(-2i64, 1i64), (1, 0), (0, -1), (0, 3), (1, 1), (1, 0)];
    // Kernels whose backward must run generated.
    let must = ["Smoothing", "NeighborSum", "VecSum"];
    for (offsets, periodic) in [(&four, false), (&lopsided, false), (&four, true)] {
        for (rows, cols) in [(1usize, 1usize), (1, 7), (5, 1), (13, 17), (61, 67)] {
            let (st, g) = stencil_and_csr(offsets, rows, cols, periodic);
            for name in ["Smoothing", "NeighborSum", "VecSum", "SageMean", "MaxPool", "GatAttention", "Top2Sum"] {
                let k = Kernel::from_source(GNN, name).expect("kernel");
                let ts = stencil_fields(&k, rows * cols, 3, false);
                let ins = inputs_of(&ts);
                let cots = cotangents(&k, &g, &ins);
                let cot_views: Vec<(&str, tiga::TensorView<'_>)> = cots.iter().map(|(o, t)| (o.as_str(), t.view())).collect();
                let csr = k.vjp(&g, &ins, &cot_views).expect("csr vjp");
                match k.vjp(&st, &ins, &cot_views) {
                    Ok(gen) => {
                        assert!(!periodic, "{name}: a periodic stencil's backward ran generated");
                        assert_eq!(csr.items.len(), gen.items.len(), "{name}: gradient count");
                        for ((r, nm, a), (r2, nm2, b)) in csr.items.iter().zip(&gen.items) {
                            assert_eq!((r, nm), (r2, nm2), "{name}: gradient order");
                            assert_eq!(a.as_f32(), b.as_f32(), "{name} {rows}x{cols}: gradient {nm}");
                        }
                    }
                    Err(e) => {
                        let msg = e.to_string();
                        assert!(
                            msg.contains("CSR realization") || msg.contains("parameter outputs"),
                            "{name} {rows}x{cols} periodic={periodic}: unexpected error {msg}"
                        );
                        assert!(periodic || !must.contains(&name), "{name} {rows}x{cols}: {msg}");
                    }
                }
            }
        }
    }
}

/// The backward from saved residuals on a generated stencil: GAT's runs its
/// plan with the edge side there (a generated stencil has no edge ids to
/// write folded edge terms by), the same bits as the recomputing backward
/// on the CSR stencil.
#[test]
fn generated_stencil_taped_vjp_equals_csr_stencil_vjp() {
    let four = vec![(-1i64, 0i64), (1, 0), (0, -1), (0, 1)];
    for (rows, cols) in [(1usize, 7usize), (13, 17), (61, 67)] {
        let (st, g) = stencil_and_csr(&four, rows, cols, false);
        let k = Kernel::from_source(GNN, "GatAttention").expect("kernel");
        let ts = stencil_fields(&k, rows * cols, 3, false);
        let ins = inputs_of(&ts);
        let cots = cotangents(&k, &g, &ins);
        let cot_views: Vec<(&str, tiga::TensorView<'_>)> = cots.iter().map(|(o, t)| (o.as_str(), t.view())).collect();
        let keeping = tiga::Schedule::new().residuals(true);
        let (_, tape) = k.forward(&st, &ins, &keeping).expect("generated forward keeping residuals");
        assert!(!tape.is_empty(), "GatAttention keeps residuals");
        let csr = k.vjp(&g, &ins, &cot_views).expect("csr vjp");
        let gen = k.vjp_taped(&st, &ins, &tape, &cot_views, &keeping).expect("generated taped vjp");
        assert_eq!(csr.items.len(), gen.items.len());
        for ((_, nm, a), (_, _, b)) in csr.items.iter().zip(&gen.items) {
            assert!(same_bits(a, b), "{rows}x{cols}: gradient {nm}");
        }
    }
}
