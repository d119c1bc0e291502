//! The user's side of a call, each against a closed form: parameters from
//! numbers and arrays, outputs read without unwraps, graphs from PyG's
//! `edge_index` and from petgraph, degrees, self loops and the GCN
//! normalization, a tensor given in two roles coming back as one gradient,
//! a batch of small graphs, and binding errors in the user's words.

use tiga::compiler::ir::Role;
use tiga::{Batch, DType, Graph, Inputs, Kernel, Tensor};

/// PageRank's step: out[i] = damping · Σ_j x[j] · w + (1 - damping) · t[i].
const KERNELS: &str = r#"
#[message_passing(reduce = sum)]
pub mod Damped {
    use tiga::lang::*;
    pub struct Src { pub x: f32 }
    pub struct Dst { pub t: f32 }
    pub struct Params { pub damping: f32, pub w: f32 }
    pub fn edge(src: &Src, params: &Params) -> f32 { src.x * params.w }
    pub fn node(dst: &Dst, params: &Params, agg: f32) -> f32 { params.damping * agg + (1.0 - params.damping) * dst.t }
}

/// Two vectors of one width.
#[message_passing(reduce = sum)]
pub mod Pair {
    use tiga::lang::*;
    pub struct Src { pub a: Vector<f32>, pub b: Vector<f32> }
    pub fn edge(src: &Src) -> Vector<f32> { &src.a + &src.b }
}

/// out[i] = h_dst[i] · Σ_{j→i} h[j]: with h given as both, d sum(out) / dh[k]
/// = Σ_{k→i} h[i] + Σ_{j→k} h[j].
#[message_passing(reduce = sum)]
pub mod TwoRoles {
    use tiga::lang::*;
    pub struct Src { pub h: f64 }
    pub struct Dst { pub h: f64 }
    pub fn edge(src: &Src) -> f64 { src.h }
    pub fn node(dst: &Dst, agg: f64) -> f64 { dst.h * agg }
}
"#;

fn ring() -> Graph {
    // 0→1, 1→2, 2→0, 0→2.
    Graph::from_edges(3, 3, &[0, 1, 2, 0], &[1, 2, 0, 2]).expect("graph")
}

#[test]
fn parameters_from_numbers_and_arrays_and_outputs_without_unwraps() {
    let k = Kernel::from_source(KERNELS, "Damped").expect("kernel");
    let g = ring();
    let (x, t) = ([1.0f32, 2.0, 4.0], [10.0f32, 20.0, 30.0]);
    let ins = Inputs::new().src("x", &x).dst("t", &t).param("damping", 0.5f32).param("w", 2.0f32);
    let out = k.run(&g, &ins).expect("run");
    // In-edges: 0 ← 2; 1 ← 0; 2 ← 1, 0. Aggregates 2·[4, 1, 3].
    assert_eq!(out.f32("out").expect("f32 output"), &[0.5 * 8.0 + 5.0, 0.5 * 2.0 + 10.0, 0.5 * 6.0 + 15.0]);
    assert_eq!(out["out"].shape(), &[3]);
    let e = out.f64("out").expect_err("an f32 call");
    assert!(e.to_string().contains("is f32, not f64"), "{e}");
    let e = out.f32("nope").expect_err("no such output");
    assert!(e.to_string().contains("no output `nope` (the outputs: out)"), "{e}");
    // A field given twice, and mixed dtypes, are binding errors.
    let e = k.run(&g, &ins.clone().param("damping", 0.7f32)).expect_err("twice");
    assert!(e.to_string().contains("param field `damping` is given twice"), "{e}");
    let e = k.run(&g, &Inputs::new().src("x", &x).dst("t", &t).param("damping", 0.5f64).param("w", 2.0f32)).expect_err("mixed");
    assert!(e.to_string().contains("a call runs in one dtype"), "{e}");

    // A vector parameter from an array, as from a slice.
    let k = Kernel::from_source(include_str!("../../examples/kernels/gnn.rs"), "EdgeGate").expect("kernel");
    let h = Tensor::from_f32(vec![3, 2], vec![1.0, -2.0, 0.5, 3.0, -1.0, 0.25]).expect("h");
    let w = [0.1f32, -0.2, 0.3, 0.0];
    let p = vec![0.5f32, -1.5];
    let from_array = k.run(&g, &Inputs::new().src("h", &h).edge("w", &w).param("p", &[0.5f32, -1.5])).expect("array");
    let from_vec = k.run(&g, &Inputs::new().src("h", &h).edge("w", &w).param("p", &p)).expect("vec");
    assert_eq!(from_array.f32("out").expect("out"), from_vec.f32("out").expect("out"));
}

#[test]
fn graphs_from_edge_index_and_petgraph() {
    let g = ring();
    let from_index = tiga::from_edge_index(3, &[0, 1, 2, 0, 1, 2, 0, 2]).expect("edge_index");
    assert_eq!(from_index, g);
    for (bad, words) in [(&[0i64, 1, 2][..], "two rows"), (&[0, -1, 1, 2][..], "source -1"), (&[0, 1, 1, 3][..], "destination 3")]
    {
        let e = tiga::from_edge_index(3, bad).expect_err("bad edge_index");
        assert!(e.to_string().contains(words), "{e}");
    }
    // Bipartite: 3 sources, 2 destinations; a destination id of 2 is out of range.
    let b = tiga::from_edge_index_sized(3, 2, &[2, 0, 1, 0, 1, 1]).expect("bipartite edge_index");
    assert_eq!((b.num_src(), b.num_dst()), (3, 2));
    assert_eq!(b.coo_in_user_order(), (vec![2, 0, 1], vec![0, 1, 1]));
    let e = tiga::from_edge_index_sized(3, 2, &[0, 1, 2, 0]).expect_err("destination 2 of 2");
    assert!(e.to_string().contains("destination 2 is not a node id below 2"), "{e}");
    let mut pg = tiga::petgraph::Graph::<(), ()>::new();
    let n: Vec<_> = (0..3).map(|_| pg.add_node(())).collect();
    for (a, b) in [(0, 1), (1, 2), (2, 0), (0, 2)] {
        pg.add_edge(n[a], n[b], ());
    }
    assert_eq!(Graph::from_petgraph(&pg).expect("petgraph"), g);
}

#[test]
fn degrees_self_loops_and_gcn_norm() {
    let g = ring();
    assert_eq!(tiga::in_degree(&g), vec![1, 1, 2]);
    assert_eq!(tiga::out_degree(&g), vec![2, 1, 1]);
    let looped = tiga::add_self_loops(&g).expect("self loops");
    assert_eq!(looped.coo_in_user_order(), (vec![0, 1, 2, 0, 0, 1, 2], vec![1, 2, 0, 2, 0, 1, 2]));
    // A graph with a loop at 1 already: gcn_norm drops it and appends one
    // loop per node after the other edges (PyG's add_remaining_self_loops);
    // in-degrees become [2, 2, 3].
    let h = Graph::from_edges(3, 3, &[0, 1, 2, 0, 1], &[1, 2, 0, 2, 1]).expect("graph");
    let (n, w) = tiga::gcn_norm(&h, None, DType::F64, tiga::GcnNormOptions::default()).expect("gcn_norm");
    let (ns, nd) = n.coo_in_user_order();
    assert_eq!((ns.clone(), nd.clone()), (vec![0, 1, 2, 0, 0, 1, 2], vec![1, 2, 0, 2, 0, 1, 2]));
    let d = [2.0f64, 2.0, 3.0];
    let want: Vec<f64> = ns.iter().zip(&nd).map(|(&s, &t)| 1.0 / (d[s as usize] * d[t as usize]).sqrt()).collect();
    let got = w.as_f64().expect("f64 weights");
    for (a, b) in got.iter().zip(&want) {
        assert!((a - b).abs() < 1e-15, "{got:?} vs {want:?}");
    }
    // Edge weights, improved: the existing loop at 1 keeps its weight 0.5,
    // the loops added at 0 and 2 weigh 2; weighted in-degrees of the edges
    // [0→1: 3, 1→2: 4, 2→0: 5, 0→2: 6] plus loops are [7, 3.5, 12].
    let ew = Tensor::from_f32(vec![5], vec![3.0, 4.0, 5.0, 6.0, 0.5]).expect("weights");
    let how = tiga::GcnNormOptions { add_self_loops: true, improved: true };
    let (n2, w2) = tiga::gcn_norm(&h, Some(ew.view()), DType::F32, how).expect("weighted gcn_norm");
    assert_eq!(n2.coo_in_user_order(), (ns.clone(), nd.clone()));
    let d = [7.0f64, 3.5, 12.0];
    let raw = [3.0, 4.0, 5.0, 6.0, 2.0, 0.5, 2.0];
    let got = w2.as_f32().expect("f32 weights, the dtype asked for");
    for (k, ((&s, &t), &r)) in ns.iter().zip(&nd).zip(&raw).enumerate() {
        let want = r / (d[s as usize] * d[t as usize]).sqrt();
        assert!((f64::from(got[k]) - want).abs() <= 1e-7 * want, "edge {k}: {} vs {want}", got[k]);
    }
    // Without loops: the graph as given, unweighted degrees [1, 2, 2].
    let bare = tiga::GcnNormOptions { add_self_loops: false, improved: false };
    let (n3, w3) = tiga::gcn_norm(&h, None, DType::F64, bare).expect("no loops");
    assert_eq!(n3.coo_in_user_order(), h.coo_in_user_order());
    let d = [1.0f64, 2.0, 2.0];
    for ((&s, &t), &got) in [0u32, 1, 2, 0, 1].iter().zip(&[1u32, 2, 0, 2, 1]).zip(w3.as_f64().expect("f64")) {
        let want = 1.0 / (d[s as usize] * d[t as usize]).sqrt();
        assert!((got - want).abs() < 1e-15, "{s}->{t}: {got} vs {want}");
    }
    let short = Tensor::from_f64(vec![4], vec![1.0; 4]).expect("weights");
    let e = tiga::gcn_norm(&h, Some(short.view()), DType::F64, how).expect_err("one weight short");
    assert!(e.to_string().contains("edge weights have shape [4], expected [5]"), "{e}");
    let e =
        tiga::gcn_norm(&Graph::from_edges(2, 3, &[0], &[1]).expect("bipartite"), None, DType::F32, how).expect_err("not square");
    assert!(e.to_string().contains("square"), "{e}");
}

#[test]
fn one_gradient_for_a_tensor_in_two_roles() {
    let k = Kernel::from_source(KERNELS, "TwoRoles").expect("kernel");
    let g = ring();
    let h = [1.0f64, 2.0, 5.0];
    let grads = k.grad(&g, &Inputs::new().src("h", &h).dst("h", &h), "out").expect("grad");
    let both = grads.summed(&[(Role::Src, "h"), (Role::Dst, "h")]).expect("summed");
    // Edges j→i: 0→1, 1→2, 2→0, 0→2. d/dh[k] = Σ_{k→i} h[i] + Σ_{j→k} h[j].
    let want = [h[1] + h[2] + h[2], h[2] + h[0], h[0] + h[1] + h[0]];
    assert_eq!(both.as_f64().expect("f64"), &want);
    let e = grads.summed(&[(Role::Src, "h"), (Role::Edge, "w")]).expect_err("no such gradient");
    assert!(e.to_string().contains("no gradient for edge field `w`"), "{e}");
}

#[test]
fn a_batch_of_graphs_runs_as_one_and_splits_back() {
    let k = Kernel::from_source(include_str!("../../examples/kernels/gnn.rs"), "VecSum").expect("kernel");
    let (a, b) = (ring(), Graph::from_edges(2, 2, &[1, 0, 1], &[0, 1, 1]).expect("graph"));
    let batch = Batch::new(&[&a, &b]).expect("batch");
    assert_eq!((batch.len(), batch.dst_offsets.clone(), batch.edge_offsets.clone()), (2, vec![0, 3, 5], vec![0, 4, 7]));
    let ha = Tensor::from_f32(vec![3, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).expect("ha");
    let hb = Tensor::from_f32(vec![2, 2], vec![0.5, 0.25, 8.0, 16.0]).expect("hb");
    let h = Batch::stack(&batch.src_offsets, &[ha.view(), hb.view()]).expect("stack");
    let out = k.run(&batch.graph, &Inputs::new().src("h", &h)).expect("batched run");
    let parts = Batch::split(&batch.dst_offsets, &out["out"]).expect("split");
    for (part, (g, h)) in parts.iter().zip([(&a, &ha), (&b, &hb)]) {
        let alone = k.run(g, &Inputs::new().src("h", h)).expect("one graph");
        assert_eq!(part.as_f32(), alone.f32("out").ok());
        assert_eq!(part.dtype(), DType::F32);
    }
    assert!(Batch::stack(&batch.src_offsets, &[ha.view()]).is_err(), "one part for two graphs");
}

#[test]
fn binding_errors_name_widths_by_their_fields() {
    let k = Kernel::from_source(KERNELS, "Pair").expect("kernel");
    let g = ring();
    let a = Tensor::from_f32(vec![3, 2], vec![0.0; 6]).expect("a");
    let b = Tensor::from_f32(vec![3, 4], vec![0.0; 12]).expect("b");
    let e = k.run(&g, &Inputs::new().src("a", &a).src("b", &b)).expect_err("widths differ");
    let msg = e.to_string();
    assert!(msg.contains("src field `b` has width 4, but the width of src `a` is 2"), "{msg}");
    let e = k.run(&g, &Inputs::new().src("a", &a)).expect_err("b missing");
    let msg = e.to_string();
    assert!(msg.contains("[3, the width of src `a`]") && !msg.contains("F1") && !msg.contains(", F]"), "{msg}");
}

#[test]
fn cotangents_that_do_not_fit_are_refused_with_what_would() {
    use tiga::CotangentError as C;
    let k = Kernel::from_source(KERNELS, "Damped").expect("kernel");
    let g = ring();
    let (x, t) = ([1.0f32, 2.0, 4.0], [10.0f32, 20.0, 30.0]);
    let ins = Inputs::new().src("x", &x).dst("t", &t).param("damping", 0.5f32).param("w", 2.0f32);
    let ones = Tensor::from_f32(vec![3], vec![1.0; 3]).expect("ones");
    let short = Tensor::from_f32(vec![2], vec![1.0; 2]).expect("short");
    let wide = Tensor::from_f64(vec![3], vec![1.0; 3]).expect("f64");
    let cases: Vec<(Vec<(&str, tiga::TensorView<'_>)>, &str)> = vec![
        (vec![("out", ones.view()), ("nope", ones.view())], "cotangent for `nope`, but kernel `Damped` has outputs: out"),
        (vec![], "missing the cotangent of output `out` (shape [3])"),
        (vec![("out", short.view())], "the cotangent of output `out` has shape [2], expected [3]"),
        (vec![("out", wide.view())], "the cotangent of output `out` is f64, but the inputs are f32"),
    ];
    for (cots, message) in cases {
        let e = k.vjp(&g, &ins, &cots).expect_err(message);
        assert!(matches!(e, tiga::Error::Cotangent(_)), "{e:?}");
        assert_eq!(e.to_string(), message);
    }
    // The one that fits gives d out / d x: damping · w summed over out-edges.
    let grads = k.vjp(&g, &ins, &[("out", ones.view())]).expect("vjp");
    assert_eq!(grads.src("x").and_then(|t| t.as_f32()), Some(&[2.0f32, 1.0, 1.0][..]));
    // A sharded call's missing cotangent names no shape (it takes either numbering).
    assert_eq!(C::Missing { name: "y".into(), shape: None }.to_string(), "missing the cotangent of output `y`");
}
