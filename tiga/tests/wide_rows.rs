//! Wide rows through the JIT: F = 64 and 128, f32 and f64 (256 to 1024
//! bytes a row), where the edge loops prefetch source rows 32 edges ahead (byte loads
//! rewritten into `prefetcht0` in the machine code), feature blocks run
//! several passes over each row's edges, and the backward's transposed
//! rows are long. Every gnn kernel, forward and VJP, in f32 and f64 against
//! the f64 reference interpreter and its adjoint, on a graph with a hub source (a
//! transposed row of 3,000 edges) and enough edges per chunk that the
//! prefetches run ahead; and the variant notes must show the prefetches
//! (on x86-64), so a change in Cranelift's encoding of the touch loads does
//! not silently turn them back into loads.

use tiga::{Graph, Kernel, Tensor};

mod common;
use common::{inputs, random_edges, random_fields, tensor, tensors, Rng};

const GNN: &str = include_str!("../../examples/kernels/gnn.rs");

#[test]
fn wide_rows_match_reference_forward_and_backward() {
    let mut rng = Rng(0x51de_5eed_0064);
    let n = 600;
    let (mut src, mut dst) = random_edges(&mut rng, n, n - 1, 6_000);
    for i in 0..3_000 {
        src.push(5);
        dst.push((i % n) as u32);
    }
    let g = Graph::from_edges(n, n, &src, &dst).expect("graph");
    let kernels = Kernel::all_from_source(GNN).expect("kernels compile");
    for f in [64usize, 128] {
        for k in &kernels {
            let fields = random_fields(k, &g, f, || rng.uniform() - 0.5);
            let (t64, t32) = (tensors(&fields, false), tensors(&fields, true));
            let (i64_, i32_) = (inputs(&fields, &t64), inputs(&fields, &t32));
            let want = k.run_reference(&g, &i64_).expect("reference");
            let got = k.run(&g, &i32_).expect("jit");
            for ((name, a), (_, b)) in got.items.iter().zip(&want.items) {
                for (x, y) in a.to_f64_vec().iter().zip(b.to_f64_vec()) {
                    assert!((x - y).abs() <= 1e-4 * y.abs().max(1.0), "{} F={f} {name}: {x} vs {y}", k.name());
                }
            }
            // f64 variants (rows of 512 and 1024 bytes) too.
            let got64 = k.run(&g, &i64_).expect("jit f64");
            for ((name, a), (_, b)) in got64.items.iter().zip(&want.items) {
                for (x, y) in a.to_f64_vec().iter().zip(b.to_f64_vec()) {
                    assert!((x - y).abs() <= 1e-9 * y.abs().max(1.0), "{} F={f} f64 {name}: {x} vs {y}", k.name());
                }
            }
            let shapes = k.output_shapes(&g, &i64_).expect("shapes");
            let cots: Vec<Vec<f64>> =
                shapes.iter().map(|(_, s)| (0..s.iter().product::<usize>()).map(|_| rng.uniform() - 0.5).collect()).collect();
            let c64: Vec<Tensor> = shapes.iter().zip(&cots).map(|((_, s), c)| tensor(s, c, false)).collect();
            let c32: Vec<Tensor> = shapes.iter().zip(&cots).map(|((_, s), c)| tensor(s, c, true)).collect();
            let r64: Vec<(&str, tiga::TensorView<'_>)> =
                shapes.iter().zip(&c64).map(|((n, _), t)| (n.as_str(), t.view())).collect();
            let r32: Vec<(&str, tiga::TensorView<'_>)> =
                shapes.iter().zip(&c32).map(|((n, _), t)| (n.as_str(), t.view())).collect();
            let gw = k.vjp_reference(&g, &i64_, &r64).expect("vjp reference");
            let gj = k.vjp(&g, &i32_, &r32).expect("vjp jit");
            let gj64 = k.vjp(&g, &i64_, &r64).expect("vjp jit f64");
            for ((role, name, _, _), _) in fields.iter().zip(&t64) {
                let a = gj64.get(*role, name).expect("jit f64 gradient").to_f64_vec();
                let b = gw.get(*role, name).expect("reference gradient").to_f64_vec();
                for (x, y) in a.iter().zip(&b) {
                    assert!(
                        (x - y).abs() <= 1e-9 * y.abs().max(1.0),
                        "{} F={f} f64 d/d {}.{name}: {x} vs {y}",
                        k.name(),
                        role.name()
                    );
                }
            }
            for ((role, name, _, _), _) in fields.iter().zip(&t64) {
                let a = gj.get(*role, name).expect("jit gradient").to_f64_vec();
                let b = gw.get(*role, name).expect("reference gradient").to_f64_vec();
                for (x, y) in a.iter().zip(&b) {
                    assert!(
                        (x - y).abs() <= 1e-3 * y.abs().max(1.0),
                        "{} F={f} d/d {}.{name}: {x} vs {y}",
                        k.name(),
                        role.name()
                    );
                }
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        let text = kernels.iter().find(|k| k.name() == "VecSum").expect("VecSum").explain();
        assert!(text.contains("widths [64]") && text.contains("emitted as prefetcht0"), "no prefetch notes:\n{text}");
        assert!(!text.contains("touches: 0 emitted"), "touch loads were not rewritten:\n{text}");
        assert!(text.contains("0 run(s) of another shape left as loads"), "a touch run was left as loads:\n{text}");
        // GatAttention: edge tiles, and its pre-pass touches `a_src` ahead
        // (a scalar field's touch is rewritten like a row's).
        let text = kernels.iter().find(|k| k.name() == "GatAttention").expect("GatAttention").explain();
        assert!(text.contains("edge tiles: 64 edges") && text.contains("pre-pass over the edges: touches 1"), "{text}");
        assert!(text.contains("0 run(s) of another shape left as loads"), "a touch run was left as loads:\n{text}");
    }
}
