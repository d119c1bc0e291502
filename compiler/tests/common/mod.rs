//! Shared by the compiler's tests that run every gnn.rs kernel on random
//! graphs: a seeded generator, a CSR builder and random fields shaped as a
//! kernel declares them.

#![allow(dead_code)]

use tiga_compiler::interp::Array;
use tiga_compiler::ir::{Kernel, Role, Type};

pub const GNN: &str = include_str!("../../../examples/kernels/gnn.rs");

/// xorshift64: fixed seeds, reproducible graphs and values.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// A value in [-1, 1) on a 1/1000 grid.
    pub fn f(&mut self) -> f64 {
        (self.next() % 2000) as f64 / 1000.0 - 1.0
    }
}

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
    k.fields
        .iter()
        .map(|fd| {
            let rows = match fd.role {
                Role::Src => Some(num_src),
                Role::Dst => Some(num_dst),
                Role::Edge => Some(num_edges),
                Role::Param => None,
            };
            let shape = match (rows, fd.ty) {
                (Some(n), Type::Scalar) => vec![n],
                (Some(n), _) => vec![n, f],
                (None, Type::Scalar) => vec![1],
                (None, Type::Vector(_)) => vec![f],
                (None, _) => vec![f, f],
            };
            let len = shape.iter().product();
            Array::new(shape, (0..len).map(|_| rng.f()).collect())
        })
        .collect()
}
