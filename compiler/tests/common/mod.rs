//! Shared by the compiler's tests that run every gnn.rs kernel on random
//! graphs: a seeded generator, a CSR builder and random fields shaped as a
//! kernel declares them.

#![allow(dead_code)]

use tiga_compiler::interp::Array;
use tiga_compiler::bind::{field_shape, Extents};
use tiga_compiler::ir::Kernel;

pub const GNN: &str = include_str!("../../../examples/kernels/gnn.rs");

mod rng;
pub use rng::Rng;

/// The CSR of `edges` (src, dst) by destination, stable in edge order:
/// offsets, columns and each position's edge id.
pub fn csr(num_dst: usize, edges: &[(u32, u32)]) -> (Vec<u64>, Vec<u32>, Vec<u64>) {
    let mut order: Vec<usize> = (0..edges.len()).collect();
    order.sort_by_key(|&e| edges[e].1);
    let mut off = vec![0u64; num_dst + 1];
    for &(_, d) in edges {
        off[d as usize + 1] += 1;
    }
    for i in 0..num_dst {
        off[i + 1] += off[i];
    }
    let cols = order.iter().map(|&e| edges[e].0).collect();
    let ids = order.iter().map(|&e| e as u64).collect();
    (off, cols, ids)
}

/// Random values for every field of `k`, every width `f`.
pub fn random_fields(k: &Kernel, num_src: usize, num_dst: usize, num_edges: usize, f: usize, rng: &mut Rng) -> Vec<Array> {
    let e = Extents { num_src, num_dst, num_edges };
    k.fields
        .iter()
        .map(|fd| {
            let shape = field_shape(fd.role, fd.ty, &e, |_| f);
            let len = shape.iter().product();
            Array::new(shape, (0..len).map(|_| rng.f()).collect())
        })
        .collect()
}
