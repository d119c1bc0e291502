//! A graph with heads (`Graph::with_heads`) runs a kernel once per head in
//! one call, its fields in PyG's multi-head layout (`[N, H, F]`, `[E, H]`):
//! multi-head attention against its closed form per head in f64, and a
//! backward (source, destination, edge and parameter gradients) against
//! the f64 reference interpreter run head by head on the graph without
//! heads.

use tiga::compiler::ir::Role;
use tiga::{Graph, GraphError, Inputs, Kernel, Tensor};

mod common;
use common::{random_edges, Rng};

const GNN: &str = include_str!("../../examples/kernels/gnn.rs");

/// Head `h` of a `[rows, heads, width]` array, as `[rows, width]`.
fn head(x: &[f64], rows: usize, heads: usize, width: usize, h: usize) -> Vec<f64> {
    (0..rows).flat_map(|r| x[(r * heads + h) * width..(r * heads + h + 1) * width].iter().copied()).collect()
}

fn random(rng: &mut Rng, len: usize, scale: f64) -> Vec<f64> {
    (0..len).map(|_| (rng.uniform() - 0.5) * scale).collect()
}

fn graph(rng: &mut Rng, ns: usize, nd: usize, m: usize) -> Graph {
    // Destinations below nd - 1: the last row is empty.
    let (src, dst) = random_edges(rng, ns, nd - 1, m);
    Graph::from_edges(ns, nd, &src, &dst).expect("graph")
}

#[test]
fn the_heads_of_one_node_are_consecutive_rows_and_edges_keep_their_order() {
    let g = Graph::from_edges(3, 2, &[2, 0, 1], &[1, 0, 1]).expect("graph");
    let h = g.with_heads(2).expect("heads");
    assert_eq!((h.num_src(), h.num_dst(), h.num_edges()), (6, 4, 6));
    // Row (i, h) = i * 2 + h holds the sources j * 2 + h of row i.
    assert_eq!(h.offsets(), &[0, 1, 2, 4, 6]);
    assert_eq!(h.cols(), &[0, 1, 4, 2, 5, 3]);
    // Edge e of head h is user edge e * 2 + h.
    let ids: Vec<u64> = (0..6).map(|p| h.edge_id(p)).collect();
    assert_eq!(ids, [2, 3, 0, 4, 1, 5]);
    assert_eq!(g.with_heads(1).expect("one head"), g);
    assert!(matches!(g.with_heads(0), Err(GraphError::NoHeads)));
    let wide = Graph::from_edges(1 << 31, 1, &[0], &[0]).expect("graph");
    assert!(matches!(wide.with_heads(3), Err(GraphError::TooManyNodes { side: "source", .. })));
}

/// GatAttention on a graph with heads: per head, a softmax over the row's
/// in-edges of that head's scores, weighting that head's slice of `h`.
#[test]
fn multi_head_attention_is_one_call_with_a_softmax_per_head() {
    let mut rng = Rng(0x4ead_5001);
    let (ns, nd, m, heads, f) = (40usize, 30usize, 300usize, 3usize, 8usize);
    let g = graph(&mut rng, ns, nd, m);
    let hg = g.with_heads(heads).expect("heads");
    let x = random(&mut rng, ns * heads * f, 2.0);
    let a_src = random(&mut rng, ns * heads, 6.0);
    let a_dst = random(&mut rng, nd * heads, 6.0);
    let (src, dst) = g.coo_in_user_order();
    let mut want = vec![0.0f64; nd * heads * f];
    for i in 0..nd {
        for h in 0..heads {
            let edges: Vec<usize> = (0..src.len()).filter(|&e| dst[e] as usize == i).collect();
            let score = |e: usize| {
                let z = a_src[src[e] as usize * heads + h] + a_dst[i * heads + h];
                if z > 0.0 {
                    z
                } else {
                    0.2 * z
                }
            };
            let mx = edges.iter().map(|&e| score(e)).fold(f64::NEG_INFINITY, f64::max);
            let den: f64 = edges.iter().map(|&e| (score(e) - mx).exp()).sum();
            for &e in &edges {
                let w = (score(e) - mx).exp() / den;
                for c in 0..f {
                    want[(i * heads + h) * f + c] += w * x[(src[e] as usize * heads + h) * f + c];
                }
            }
        }
    }
    let k = Kernel::from_source(GNN, "GatAttention").expect("kernel");
    let to32 = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
    let (xt, at, dt) = (
        Tensor::from_f32(vec![ns * heads, f], to32(&x)).expect("h"),
        Tensor::from_f32(vec![ns * heads], to32(&a_src)).expect("a_src"),
        Tensor::from_f32(vec![nd * heads], to32(&a_dst)).expect("a_dst"),
    );
    let out = k.run(&hg, &Inputs::new().src("h", &xt).src("a_src", &at).dst("a_dst", &dt)).expect("run");
    let got = out.f32("out").expect("out");
    assert_eq!(got.len(), want.len());
    for (p, (x, y)) in got.iter().zip(&want).enumerate() {
        assert!((f64::from(*x) - y).abs() <= 1e-5 * y.abs().max(1.0), "element {p}: got {x}, closed form {y}");
    }
}

/// A backward on a graph with heads equals the reference backward of each
/// head on the graph without heads: source and edge gradients per head,
/// a parameter's gradient summed over the heads.
#[test]
fn the_backward_with_heads_is_each_heads_backward() {
    let mut rng = Rng(0x4ead_5002);
    let (n, m, heads, f) = (50usize, 400usize, 4usize, 4usize);
    let g = graph(&mut rng, n, n, m);
    let e = g.num_edges();
    let hg = g.with_heads(heads).expect("heads");
    let k = Kernel::from_source(GNN, "EdgeGate").expect("kernel");
    let x = random(&mut rng, n * heads * f, 2.0);
    let w = random(&mut rng, e * heads, 2.0);
    let p = random(&mut rng, f, 1.0);
    let cot = random(&mut rng, n * heads * f, 1.0);
    let t = |shape: Vec<usize>, v: &[f64]| Tensor::from_f64(shape, v.to_vec()).expect("tensor");
    let (xt, wt, pt, ct) = (t(vec![n * heads, f], &x), t(vec![e * heads], &w), t(vec![f], &p), t(vec![n * heads, f], &cot));
    let ins = Inputs::new().src("h", &xt).edge("w", &wt).param("p", &pt);
    let grads = k.vjp(&hg, &ins, &[("out", ct.view())]).expect("vjp with heads");
    let out = k.run(&hg, &ins).expect("run with heads");
    let mut dp = vec![0.0f64; f];
    for h in 0..heads {
        let (xh, wh, ch) = (
            t(vec![n, f], &head(&x, n, heads, f, h)),
            t(vec![e], &head(&w, e, heads, 1, h)),
            t(vec![n, f], &head(&cot, n, heads, f, h)),
        );
        let ins_h = Inputs::new().src("h", &xh).edge("w", &wh).param("p", &pt);
        let want = k.vjp_reference(&g, &ins_h, &[("out", ch.view())]).expect("reference vjp");
        let want_out = k.run_reference(&g, &ins_h).expect("reference run");
        let close = |what: &str, got: &[f64], want: &[f64]| {
            assert_eq!(got.len(), want.len(), "{what}");
            for (q, (a, b)) in got.iter().zip(want).enumerate() {
                assert!((a - b).abs() <= 1e-12 * b.abs().max(1.0), "head {h}, {what}[{q}]: {a} against {b}");
            }
        };
        let all = |role: Role, name: &str| grads.get(role, name).expect("gradient").to_f64_vec();
        close("out", &head(out.f64("out").expect("out"), n, heads, f, h), want_out.f64("out").expect("out"));
        close("dh", &head(&all(Role::Src, "h"), n, heads, f, h), &want.src("h").expect("dh").to_f64_vec());
        close("dw", &head(&all(Role::Edge, "w"), e, heads, 1, h), &want.edge("w").expect("dw").to_f64_vec());
        for (s, v) in dp.iter_mut().zip(want.param("p").expect("dp").to_f64_vec()) {
            *s += v;
        }
    }
    let got = grads.param("p").expect("dp").to_f64_vec();
    for (a, b) in got.iter().zip(&dp) {
        assert!((a - b).abs() <= 1e-11 * b.abs().max(1.0), "dp: {a} against the heads' sum {b}");
    }
}
