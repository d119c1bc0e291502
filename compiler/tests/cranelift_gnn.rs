//! Every kernel of examples/kernels/gnn.rs through front end → passes →
//! scheduler → Cranelift, against the reference interpreter, in f32 and f64,
//! with and without edge ids, on graphs with empty rows, self loops and
//! multi-edges, run in row chunks.

#![cfg(feature = "cranelift")]

use tiga_compiler::back::cranelift::{Jit, VariantKey};
use tiga_compiler::front::parse_kernel_file;
use tiga_compiler::interp::interpret;
use tiga_compiler::ir::{DType, Role};
use tiga_compiler::loops::schedule;
use tiga_compiler::passes::run_pipeline;

mod common;
use common::{csr, random_fields, run_over_csr, Rng, GNN};

#[test]
fn gnn_kernels_match_reference() {
    let ks = parse_kernel_file(GNN).expect("parses");
    let jit = Jit::new();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // F = 64 runs every lane-independent kernel in feature blocks (32 f32
    // or 16 f64 lanes per pass over a row's edges).
    for f in [3usize, 64] {
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
                let fields = random_fields(k, num_src, num_dst, edges.len(), f, &mut rng);
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
                            storage: Default::default(),
                        };
                        let (var, _) = jit.variant(&lk, &key).unwrap_or_else(|e| panic!("{e}\n{lk}"));
                        if k.name == "VecSum" {
                            // A sum keeps 16 vectors of accumulators in
                            // registers: one pass up to 64 f32 or 32 f64
                            // lanes, blocks past that.
                            let blocked = var.notes.iter().any(|n| n.starts_with("feature blocks:"));
                            let one_pass = if dtype == DType::F32 { 64 } else { 32 };
                            assert_eq!(blocked, f > one_pass, "{dtype:?} F={f}: {:?}", var.notes);
                        }
                        let inputs: Vec<(Role, &[f64])> =
                            k.fields.iter().zip(&fields).map(|(fd, a)| (fd.role, &a.data[..])).collect();
                        let out_lens: Vec<usize> = want.iter().map(|a| a.data.len()).collect();
                        let n = num_dst as u64;
                        let outs = run_over_csr(
                            dtype,
                            edge_ids,
                            (&off, &cols, &ids),
                            &inputs,
                            &out_lens,
                            &[0..n / 2, n / 2..n],
                            |args, rows| {
                                // SAFETY: arrays shaped as the kernel declares, CSR valid.
                                unsafe { var.run(args, rows) }
                            },
                        );
                        let tol = if dtype == DType::F32 { 1e-4 } else { 1e-12 };
                        for (w, g) in want.iter().zip(&outs) {
                            for (x, y) in w.data.iter().zip(g) {
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
    }
    let s = jit.stats();
    assert!(ks.len() >= 10, "gnn.rs has {} kernels", ks.len());
    // Four variants per kernel and width (kernels without a width symbol
    // have one width), compiled for the first graph, reused after.
    let widths: usize = ks.iter().map(|k| if k.widths.is_empty() { 1 } else { 2 }).sum();
    assert_eq!(s.variants.len(), widths * 4);
    assert_eq!(s.misses as usize, s.variants.len());
    assert!(s.hits > 0);
}
