//! Helpers shared by the facade's tests: a small deterministic generator,
//! the shape each kernel field takes on a graph, and the split of a call's
//! fields into what goes in a `.gfg` file and what stays in RAM.
#![allow(dead_code)]

use tiga::compiler::ir::{Role, Type};
use tiga::runtime::storage::FieldRole;
use tiga::{Graph, Inputs, Tensor, TensorView};

/// xorshift64: the same numbers on every machine.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next() % 1_000_000) as f64 / 500_000.0 - 1.0
    }
}

/// `m` random edges: sources below `num_src`, destinations below
/// `dst_below` (so the rows from there on stay empty).
pub fn random_edges(rng: &mut Rng, num_src: usize, dst_below: usize, m: usize) -> (Vec<u32>, Vec<u32>) {
    let (mut src, mut dst) = (Vec::with_capacity(m), Vec::with_capacity(m));
    for _ in 0..m {
        src.push((rng.next() % num_src as u64) as u32);
        dst.push((rng.next() % dst_below as u64) as u32);
    }
    (src, dst)
}

/// The shape of a field of this role and type on `g`, vectors `f` wide.
pub fn field_shape(role: Role, ty: Type, g: &Graph, f: usize) -> Vec<usize> {
    let rows = match role {
        Role::Src => Some(g.num_src()),
        Role::Dst => Some(g.num_dst()),
        Role::Edge => Some(g.num_edges()),
        Role::Param => None,
    };
    match (rows, ty) {
        (Some(n), Type::Scalar) => vec![n],
        (Some(n), _) => vec![n, f],
        (None, Type::Scalar) => vec![1],
        (None, Type::Matrix(..)) => vec![f, f],
        (None, _) => vec![f],
    }
}

/// The node and edge fields of a call, as `.gfg` fields.
pub fn disk_fields(tensors: &[(Role, String, Tensor)]) -> Vec<(FieldRole, &str, TensorView<'_>)> {
    tensors
        .iter()
        .filter_map(|(r, nm, t)| {
            let role = match r {
                Role::Src => FieldRole::Src,
                Role::Dst => FieldRole::Dst,
                Role::Edge => FieldRole::Edge,
                Role::Param => return None,
            };
            Some((role, nm.as_str(), t.view()))
        })
        .collect()
}

/// Only the parameters of a call (the rest comes from a file).
pub fn params_only(tensors: &[(Role, String, Tensor)]) -> Inputs<'_> {
    let mut i = Inputs::new();
    for (r, nm, t) in tensors {
        if *r == Role::Param {
            i = i.with_role(*r, nm, t);
        }
    }
    i
}
