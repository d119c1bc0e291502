//! The Cranelift back end runs short edge loops 4 edges per iteration, the
//! first `degree % 4` edges one at a time (`translate::unrolls_edges`).
//! A sum must still add its terms in CSR order from +0: the reference here
//! is that sum written out in plain Rust, compared bit for bit, on rows of
//! every degree from 0 to 13 (every remainder, with and without whole
//! groups) and with terms whose order changes the rounding.

use tiga::{Graph, Inputs, Kernel, Tensor};

const GNN: &str = include_str!("../../examples/kernels/gnn.rs");

/// Row `i` has degree `i % 14`; sources cycle through every node.
fn graph(rows: usize, sources: usize) -> Graph {
    let mut offsets = vec![0u64];
    let mut cols = Vec::new();
    let mut next = 0u32;
    for i in 0..rows {
        for _ in 0..i % 14 {
            cols.push(next % sources as u32);
            next = next.wrapping_mul(7).wrapping_add(3) % sources as u32;
        }
        offsets.push(cols.len() as u64);
    }
    Graph::from_csr(sources, rows, offsets, cols).expect("graph")
}

/// Values whose sums depend on the order of their terms: large terms of
/// both signs beside small ones.
fn values(n: usize) -> Vec<f32> {
    (0..n)
        .map(|k| {
            let k = k as u64;
            let mag = [1.0e8f32, 3.0, 0.1, 7.5e3, 1.0e-3][(k % 5) as usize];
            let sign = if (k * 2654435761).is_multiple_of(3) { -1.0 } else { 1.0 };
            sign * mag * (1.0 + (k % 11) as f32 / 16.0)
        })
        .collect()
}

/// `out[i][f] = Σ_p x[col[p]][f]` over row `i`'s edges in CSR order, from +0.
fn sums_in_order(g: &Graph, x: &[f32], width: usize) -> Vec<f32> {
    let (off, cols) = (g.offsets(), g.cols());
    let mut out = vec![0.0f32; g.num_dst() * width];
    for i in 0..g.num_dst() {
        for f in 0..width {
            let mut s = 0.0f32;
            for &j in &cols[off[i] as usize..off[i + 1] as usize] {
                s += x[j as usize * width + f];
            }
            out[i * width + f] = s;
        }
    }
    out
}

fn check(kernel: &Kernel, g: &Graph, field: &str, width: usize) {
    let n = g.num_src();
    let x = values(n * width);
    let shape = if width == 1 { vec![n] } else { vec![n, width] };
    let t = Tensor::from_f32(shape, x.clone()).expect("tensor");
    let out = kernel.run(g, &Inputs::new().src(field, &t)).expect("run");
    let got = out.out().and_then(|o| o.as_f32()).expect("f32 output");
    let want = sums_in_order(g, &x, width);
    for (k, (a, b)) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            a.to_bits(),
            b.to_bits(),
            "{} F={width}: row {} lane {} (degree {}): got {a}, want {b} (the sum in CSR order)",
            kernel.name(),
            k / width,
            k % width,
            (k / width) % 14
        );
    }
}

#[test]
fn unrolled_edge_loops_add_in_csr_order() {
    let g = graph(14 * 9, 37);
    let scalar = Kernel::from_source(GNN, "NeighborSum").expect("kernel");
    let vector = Kernel::from_source(GNN, "VecSum").expect("kernel");
    // The JIT runs these (kernel files have no ahead-of-time variants).
    assert_eq!(scalar.backend_for(tiga::DType::F32, &[]), "cranelift (JIT)");
    let notes = |k: &Kernel, w: &[usize]| {
        let (v, _) = k.variant(tiga::DType::F32, w, false).expect("variant");
        v.notes.join("\n")
    };
    assert!(notes(&scalar, &[]).contains("4 edges per iteration"), "{}", notes(&scalar, &[]));
    check(&scalar, &g, "x", 1);
    for width in [4, 16] {
        assert!(notes(&vector, &[width]).contains("4 edges per iteration"), "F={width}: {}", notes(&vector, &[width]));
        check(&vector, &g, "h", width);
    }
    // Rows of 256 bytes are touched ahead and keep one edge per iteration;
    // their sums are in CSR order too.
    assert!(!notes(&vector, &[64]).contains("edges per iteration"));
    check(&vector, &g, "h", 64);
}
