//! Helpers shared by the facade's tests: a small deterministic generator,
//! the shape each kernel field takes on a graph, and the split of a call's
//! fields into what goes in a `.gfg` file and what stays in RAM.
#![allow(dead_code)]

use tiga::compiler::bind::Extents;
use tiga::compiler::ir::{Role, Type};
use tiga::runtime::storage::FieldRole;
use tiga::{Graph, Inputs, Kernel, Tensor, TensorView};

#[path = "../../../compiler/tests/common/rng.rs"]
mod rng;
pub use rng::Rng;

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
    let e = Extents { num_src: g.num_src(), num_dst: g.num_dst(), num_edges: g.num_edges() };
    tiga::compiler::bind::field_shape(role, ty, &e, |_| f)
}

/// A call's field: role, name, shape and values.
pub type Field = (Role, String, Vec<usize>, Vec<f64>);

/// Every field of `k` on `g`, vectors `f` wide, its values drawn from
/// `value` in declaration order.
pub fn random_fields(k: &Kernel, g: &Graph, f: usize, mut value: impl FnMut() -> f64) -> Vec<Field> {
    k.fields()
        .iter()
        .map(|fd| {
            let shape = field_shape(fd.role, fd.ty, g, f);
            let len = shape.iter().product();
            (fd.role, fd.name.clone(), shape, (0..len).map(|_| value()).collect())
        })
        .collect()
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

/// A tensor of `shape` holding `data`, in f32 (rounded) or f64.
pub fn tensor(shape: &[usize], data: &[f64], f32: bool) -> Tensor {
    if f32 {
        Tensor::from_f32(shape.to_vec(), data.iter().map(|&x| x as f32).collect()).expect("shape")
    } else {
        Tensor::from_f64(shape.to_vec(), data.to_vec()).expect("shape")
    }
}

/// The fields' values as tensors, in f32 or f64.
pub fn tensors(fields: &[Field], f32: bool) -> Vec<Tensor> {
    fields.iter().map(|(_, _, s, d)| tensor(s, d, f32)).collect()
}

/// The fields bound by role and name to `ts` (one tensor per field).
pub fn inputs<'a>(fields: &[Field], ts: &'a [Tensor]) -> Inputs<'a> {
    let mut i = Inputs::new();
    for ((role, name, _, _), t) in fields.iter().zip(ts) {
        i = i.with_role(*role, name, t);
    }
    i
}

/// A generated stencil and its CSR realization (`Graph::stencil`).
pub fn stencil_and_csr(offsets: &[(i64, i64)], rows: usize, cols: usize, periodic: bool) -> (tiga::Stencil2d, Graph) {
    let st = tiga::Stencil2d { rows: rows as u64, cols: cols as u64, offsets: offsets.to_vec(), periodic };
    let neigh: Vec<Vec<i64>> = offsets.iter().map(|&(r, c)| vec![r, c]).collect();
    (st, Graph::stencil(&[rows, cols], &neigh, periodic).expect("stencil graph"))
}

/// Every field of `k` on `n` nodes of a stencil (vectors `f` wide), in f32
/// or f64, with values of both signs and repeats (max and top-2 see ties).
pub fn stencil_fields(k: &Kernel, n: usize, f: usize, f64: bool) -> Vec<(tiga::compiler::ir::Role, String, Tensor)> {
    k.fields()
        .iter()
        .map(|fd| {
            let shape = match fd.ty {
                Type::Vector(_) => vec![n, f],
                _ => vec![n],
            };
            let len: usize = shape.iter().product();
            let data = (0..len).map(|i| ((i * 37 % 101) as f64) * 0.01 - 0.5);
            let t = if f64 {
                Tensor::from_f64(shape, data.collect())
            } else {
                Tensor::from_f32(shape, data.map(|x| x as f32).collect())
            };
            (fd.role, fd.name.clone(), t.expect("tensor"))
        })
        .collect()
}

/// The inputs of a call with these fields, by role and name.
pub fn inputs_of(ts: &[(tiga::compiler::ir::Role, String, Tensor)]) -> Inputs<'_> {
    ts.iter().fold(Inputs::new(), |ins, (r, nm, t)| ins.with_role(*r, nm, t))
}

/// An f32 cotangent for each output of `k`'s call with `ins` on `g`,
/// shaped like it, with values of both signs.
pub fn cotangents(k: &Kernel, g: &Graph, ins: &Inputs<'_>) -> Vec<(String, Tensor)> {
    k.output_shapes(g, ins)
        .expect("shapes")
        .iter()
        .map(|(o, s)| {
            let len: usize = s.iter().product();
            let data = (0..len).map(|i| ((i * 53 % 97) as f32) * 0.02 - 1.0).collect();
            (o.clone(), Tensor::from_f32(s.clone(), data).expect("cotangent"))
        })
        .collect()
}

/// Rows `ids` of `t`, as f64.
pub fn rows_of(t: &Tensor, ids: impl Iterator<Item = usize>) -> Vec<f64> {
    let v = t.to_f64_vec();
    let w: usize = t.shape().iter().skip(1).product();
    ids.flat_map(|i| v[i * w..(i + 1) * w].to_vec()).collect()
}

/// A random graph with empty rows (the last destination), a multi-edge
/// and a self loop; `csr_order`: rebuilt so that its edge order is its CSR
/// order (no edge ids, as a `.gfg` stores it without them).
pub fn random_graph(rng: &mut Rng, ns: usize, nd: usize, ne: usize, csr_order: bool) -> Graph {
    let (mut src, mut dst) = random_edges(rng, ns, (nd - 1).max(1), ne);
    if ne > 2 {
        src.extend([src[0], 0]);
        dst.extend([dst[0], 0]);
    }
    let g = Graph::from_edges(ns, nd, &src, &dst).expect("graph");
    if csr_order {
        Graph::from_csr(ns, nd, g.offsets().to_vec(), g.cols().to_vec()).expect("csr")
    } else {
        g
    }
}
