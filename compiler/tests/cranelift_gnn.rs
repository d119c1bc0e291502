//! Every kernel of examples/kernels/gnn.rs through front end → passes →
//! scheduler → Cranelift, against the reference interpreter, in f32 and f64,
//! with and without edge ids, on graphs with empty rows, self loops and
//! multi-edges, run in row chunks.

#![cfg(feature = "cranelift")]

use tiga_compiler::back::cranelift::{Jit, RawArgs, VariantKey};
use tiga_compiler::front::parse_kernel_file;
use tiga_compiler::interp::{interpret, Array};
use tiga_compiler::ir::{DType, Role, Type};
use tiga_compiler::loops::schedule;
use tiga_compiler::passes::run_pipeline;

const GNN: &str = include_str!("../../examples/kernels/gnn.rs");

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn f(&mut self) -> f64 {
        (self.next() % 2000) as f64 / 1000.0 - 1.0
    }
}

fn csr(num_dst: usize, edges: &[(u32, u32)]) -> (Vec<u64>, Vec<u32>, Vec<u64>) {
    let mut order: Vec<usize> = (0..edges.len()).collect();
    order.sort_by_key(|&e| edges[e].1);
    let mut off = vec![0u64; num_dst + 1];
    for &(_, d) in edges {
        off[d as usize + 1] += 1;
    }
    for i in 0..num_dst {
        off[i + 1] += off[i];
    }
    (off, order.iter().map(|&e| edges[e].0).collect(), order.iter().map(|&e| e as u64).collect())
}

enum Buf {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

impl Buf {
    fn new(dtype: DType, data: &[f64]) -> Buf {
        match dtype {
            DType::F32 => Buf::F32(data.iter().map(|&x| x as f32).collect()),
            DType::F64 => Buf::F64(data.to_vec()),
        }
    }
    fn ptr(&mut self) -> *mut u8 {
        match self {
            Buf::F32(v) => v.as_mut_ptr() as *mut u8,
            Buf::F64(v) => v.as_mut_ptr() as *mut u8,
        }
    }
    fn values(&self) -> Vec<f64> {
        match self {
            Buf::F32(v) => v.iter().map(|&x| x as f64).collect(),
            Buf::F64(v) => v.clone(),
        }
    }
}

#[test]
fn gnn_kernels_match_reference() {
    let ks = parse_kernel_file(GNN).expect("parses");
    let jit = Jit::new();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let f = 3usize;
    for (num_src, num_dst, ne) in [(7usize, 7usize, 20usize), (5, 9, 12), (1, 1, 3), (6, 6, 0)] {
        let mut edges: Vec<(u32, u32)> = (0..ne)
            .map(|_| ((rng.next() % num_src as u64) as u32, (rng.next() % (num_dst as u64 - 1).max(1)) as u32))
            .collect();
        if ne > 3 {
            edges.push(edges[0]); // a multi-edge
            edges.push((0, 0)); // a self loop
        }
        let (off, cols, ids) = csr(num_dst, &edges);
        for k in &ks {
            let fields: Vec<Array> = k
                .fields
                .iter()
                .map(|fd| {
                    let rows = match fd.role {
                        Role::Src => Some(num_src),
                        Role::Dst => Some(num_dst),
                        Role::Edge => Some(edges.len()),
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
                .collect();
            let want = interpret(k, num_src, num_dst, &edges, &fields).expect("reference runs");
            let compiled = run_pipeline(k.clone()).expect("passes");
            let lk = schedule(&compiled.lowered).expect("schedules");
            for dtype in [DType::F32, DType::F64] {
                for edge_ids in [true, false] {
                    let key = VariantKey {
                        kernel: format!("{}#gnn", k.name),
                        dtype,
                        widths: vec![f; k.widths.len()],
                        edge_ids,
                        stencil: None,
                    };
                    let (var, _) = jit.variant(&lk, &key).unwrap_or_else(|e| panic!("{e}\n{lk}"));
                    let mut bufs: Vec<Buf> = k
                        .fields
                        .iter()
                        .zip(&fields)
                        .map(|(fd, a)| {
                            if fd.role == Role::Edge && !edge_ids && !edges.is_empty() {
                                let per = a.data.len() / edges.len();
                                let permuted: Vec<f64> =
                                    ids.iter().flat_map(|&e| a.data[e as usize * per..(e as usize + 1) * per].to_vec()).collect();
                                Buf::new(dtype, &permuted)
                            } else {
                                Buf::new(dtype, &a.data)
                            }
                        })
                        .collect();
                    let mut outs: Vec<Buf> = want.iter().map(|a| Buf::new(dtype, &vec![f64::NAN; a.data.len()])).collect();
                    let field_ptrs: Vec<*const u8> = bufs.iter_mut().map(|b| b.ptr() as *const u8).collect();
                    let out_ptrs: Vec<*mut u8> = outs.iter_mut().map(Buf::ptr).collect();
                    let args = RawArgs {
                        offsets: off.as_ptr(),
                        cols: cols.as_ptr(),
                        edge_ids: if edge_ids { ids.as_ptr() } else { std::ptr::null() },
                        fields: field_ptrs.as_ptr(),
                        outputs: out_ptrs.as_ptr(),
                    };
                    let n = num_dst as u64;
                    for rows in [0..n / 2, n / 2..n] {
                        // SAFETY: arrays shaped as the kernel declares, CSR valid.
                        unsafe { var.run(&args, rows) };
                    }
                    let tol = if dtype == DType::F32 { 1e-4 } else { 1e-12 };
                    for (w, g) in want.iter().zip(&outs) {
                        for (x, y) in w.data.iter().zip(g.values()) {
                            assert!(
                                (x - y).abs() <= tol * (1.0 + x.abs()),
                                "{} {dtype:?} edge_ids={edge_ids}: {x} vs {y}\n{lk}\n{}",
                                k.name,
                                var.clif
                            );
                        }
                    }
                }
            }
        }
    }
    let s = jit.stats();
    assert!(ks.len() >= 10, "gnn.rs has {} kernels", ks.len());
    // Four variants per kernel, compiled for the first graph, reused after.
    assert_eq!(s.variants.len(), ks.len() * 4);
    assert_eq!(s.misses as usize, s.variants.len());
    assert!(s.hits > 0);
}
