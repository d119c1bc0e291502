//! The generated-stencil realization (neighbours computed from the index)
//! against the CSR realization of the same stencil: bit-identical outputs.

use tiga::{Graph, Inputs, Kernel, Stencil2d, Tensor};

const GNN: &str = include_str!("../../examples/kernels/gnn.rs");

#[test]
fn generated_stencil_equals_csr_stencil() {
    // The four-neighbour stencil, and a lopsided one (interior rows take a
    // branch-free path whose border is as wide as the largest offset; rows
    // are cut in chunks that start mid grid row).
    let four = vec![(-1i64, 0i64), (1, 0), (0, -1), (0, 1)];
    let lopsided = vec![(-2i64, 1i64), (1, 0), (0, -1), (0, 3), (1, 1)];
    for (offsets, periodic) in [(&four, false), (&four, true), (&lopsided, false), (&lopsided, true)] {
        for (rows, cols) in [(1usize, 1usize), (1, 7), (5, 1), (13, 17), (4, 5), (61, 67)] {
            let st = Stencil2d { rows: rows as u64, cols: cols as u64, offsets: offsets.clone(), periodic };
            let neigh: Vec<Vec<i64>> = offsets.iter().map(|&(r, c)| vec![r, c]).collect();
            let g = Graph::stencil(&[rows, cols], &neigh, periodic).expect("stencil graph");
            let n = rows * cols;
            for name in ["Smoothing", "NeighborSum", "VecSum", "SageMean", "MaxPool", "GatAttention", "Top2Sum"] {
                let k = Kernel::from_source(GNN, name).expect("kernel");
                let mut ts: Vec<(tiga::compiler::ir::Role, String, Tensor)> = Vec::new();
                for fd in k.fields() {
                    let len = match fd.ty {
                        tiga::compiler::ir::Type::Vector(_) => n * 3,
                        _ => n,
                    };
                    let shape = if len == n { vec![n] } else { vec![n, 3] };
                    let data: Vec<f32> = (0..len).map(|i| ((i * 37 % 101) as f32) * 0.01 - 0.5).collect();
                    ts.push((fd.role, fd.name.clone(), Tensor::from_f32(shape, data).expect("tensor")));
                }
                let mut ins = Inputs::new();
                for (r, nm, t) in &ts {
                    ins = ins.with_role(*r, nm, t);
                }
                let csr = k.run(&g, &ins).expect("csr run");
                let gen = k.run_stencil(&st, &ins).expect("generated run");
                for ((o, a), (_, b)) in csr.items.iter().zip(&gen.items) {
                    assert_eq!(a.as_f32(), b.as_f32(), "{name} {rows}x{cols} periodic={periodic}: output {o}");
                }
            }
        }
    }
}
