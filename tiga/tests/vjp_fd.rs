//! Gradients of every kernel in examples/kernels/gnn.rs and
//! examples/kernels/reducers.rs (the user reducer example's monoid) against
//! central finite differences of the f64 reference interpreter, on random
//! graphs with empty rows, isolated nodes, self loops, multi-edges and a
//! bipartite shape; and the JIT's f32 VJP against the f64 adjoint.

use tiga::{Graph, Inputs, Kernel, Tensor};

mod common;
use common::{inputs, random_edges, random_fields, tensor, tensors, Field, Rng};

const GNN: &str = include_str!("../../examples/kernels/gnn.rs");
const REDUCERS: &str = include_str!("../../examples/kernels/reducers.rs");

fn random_graph(rng: &mut Rng, ns: usize, nd: usize, ne: usize) -> Graph {
    let (mut src, mut dst) = random_edges(rng, ns, (nd - 1).max(1), ne);
    if ne > 2 {
        src.push(src[0]);
        dst.push(dst[0]);
        src.push(0);
        dst.push(0);
    }
    Graph::from_edges(ns, nd, &src, &dst).expect("valid graph")
}

/// Σ_o <cot_o, out_o> by the reference interpreter.
fn objective(k: &Kernel, g: &Graph, fields: &[Field], cots: &[Vec<f64>]) -> f64 {
    let ts = tensors(fields, false);
    let out = k.run_reference(g, &inputs(fields, &ts)).expect("reference");
    out.items.iter().zip(cots).map(|((_, t), c)| t.to_f64_vec().iter().zip(c).map(|(a, b)| a * b).sum::<f64>()).sum()
}

fn check_kernel(k: &Kernel, g: &Graph, gname: &str, rng: &mut Rng) {
    let f = 3;
    let mut fields = random_fields(k, g, f, || rng.uniform());
    // Keep max/min/top-2 away from ties and kinks: spread values apart.
    for fd in &mut fields {
        for (i, x) in fd.3.iter_mut().enumerate() {
            *x += (i as f64) * 1e-3;
        }
    }
    let ts = tensors(&fields, false);
    let shapes = k.output_shapes(g, &inputs(&fields, &ts)).expect("shapes");
    let cots: Vec<Vec<f64>> =
        shapes.iter().map(|(_, s)| (0..s.iter().product::<usize>()).map(|_| rng.uniform()).collect()).collect();
    let cot_t: Vec<Tensor> =
        shapes.iter().zip(&cots).map(|((_, s), c)| Tensor::from_f64(s.clone(), c.clone()).expect("cot")).collect();
    let cot_v: Vec<(&str, tiga::TensorView<'_>)> = shapes.iter().zip(&cot_t).map(|((n, _), t)| (n.as_str(), t.view())).collect();
    let grads = k.vjp_reference(g, &inputs(&fields, &ts), &cot_v).expect("vjp reference");
    let grads_jit64 = k.vjp(g, &inputs(&fields, &ts), &cot_v).expect("vjp jit f64");
    // Central differences on every input element.
    let h = 1e-6;
    for (fi, (role, name, _, data)) in fields.iter().enumerate() {
        let got = grads.get(*role, name).expect("gradient present").to_f64_vec();
        let jit = grads_jit64.get(*role, name).expect("gradient present").to_f64_vec();
        for idx in 0..data.len() {
            let mut plus = fields.clone();
            plus[fi].3[idx] += h;
            let mut minus = fields.clone();
            minus[fi].3[idx] -= h;
            let fd = (objective(k, g, &plus, &cots) - objective(k, g, &minus, &cots)) / (2.0 * h);
            let scale = fd.abs().max(got[idx].abs()).max(1.0);
            assert!(
                (fd - got[idx]).abs() <= 1e-6 * scale,
                "{} on {gname}: d/d {}.{name}[{idx}]: adjoint {} vs finite difference {fd}",
                k.name(),
                role.name(),
                got[idx]
            );
            assert!(
                (jit[idx] - got[idx]).abs() <= 1e-12 * scale,
                "{} on {gname}: JIT f64 {}.{name}[{idx}] = {} vs reference adjoint {}",
                k.name(),
                role.name(),
                jit[idx],
                got[idx]
            );
        }
    }
    // The JIT in f32 against the f64 adjoint.
    let ts32 = tensors(&fields, true);
    let cot32: Vec<Tensor> = shapes.iter().zip(&cots).map(|((_, s), c)| tensor(s, c, true)).collect();
    let cot32_v: Vec<(&str, tiga::TensorView<'_>)> =
        shapes.iter().zip(&cot32).map(|((n, _), t)| (n.as_str(), t.view())).collect();
    let g32 = k.vjp(g, &inputs(&fields, &ts32), &cot32_v).expect("vjp f32");
    for (role, name, _, _) in &fields {
        let a = g32.get(*role, name).expect("f32 gradient").to_f64_vec();
        let b = grads.get(*role, name).expect("gradient").to_f64_vec();
        for (x, y) in a.iter().zip(&b) {
            assert!(
                (x - y).abs() <= 1e-4 * y.abs().max(1.0),
                "{} on {gname}: f32 {}.{name}: {x} vs f64 {y}",
                k.name(),
                role.name()
            );
        }
    }
}

/// Every kernel on a random graph, a sparse one with isolated nodes, a
/// bipartite one and a one-node graph.
fn check_kernels_on_test_graphs(kernels: &[Kernel], mut rng: Rng) {
    let graphs = vec![
        ("random", random_graph(&mut rng, 9, 9, 24)),
        ("sparse-with-isolated", random_graph(&mut rng, 12, 12, 8)),
        ("bipartite", random_graph(&mut rng, 5, 8, 14)),
        ("one-node", Graph::from_edges(1, 1, &[0], &[0]).expect("valid")),
    ];
    for (gname, g) in &graphs {
        for k in kernels {
            check_kernel(k, g, gname, &mut rng);
        }
    }
}

#[test]
fn every_gnn_kernel_matches_finite_differences() {
    let kernels = Kernel::all_from_source(GNN).expect("kernels compile");
    check_kernels_on_test_graphs(&kernels, Rng(0xadd0_1234_5678));
}

#[test]
fn every_user_reducer_kernel_matches_finite_differences() {
    let kernels = Kernel::all_from_source(REDUCERS).expect("kernels compile");
    assert!(!kernels.is_empty(), "examples/kernels/reducers.rs holds no kernel");
    check_kernels_on_test_graphs(&kernels, Rng(0x5eed_cafe_f00d));
}

/// Exact ties inside a smooth combination: Top2Sum's output is the sum of the
/// two largest inputs, which is differentiable where they tie; `max`/`min`
/// split a tie evenly, so the gradient is exact there too.
#[test]
fn top2_sum_gradient_at_exact_ties() {
    let k = Kernel::from_source(GNN, "Top2Sum").expect("kernel");
    let g = Graph::from_edges(3, 1, &[0, 1, 2], &[0, 0, 0]).expect("graph");
    for (x, want) in [([1.0, 1.0, 0.0], [1.0, 1.0, 0.0]), ([1.0, 0.5, 1.0], [1.0, 0.0, 1.0])] {
        let xt = Tensor::from_f64(vec![3], x.to_vec()).expect("x");
        let ins = Inputs::new().src("x", &xt);
        for grads in [k.grad(&g, &ins, "out").expect("jit"), {
            let one = Tensor::from_f64(vec![1], vec![1.0]).expect("cot");
            k.vjp_reference(&g, &ins, &[("out", one.view())]).expect("reference")
        }] {
            let got = grads.src("x").expect("grad").to_f64_vec();
            let ok = got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-12);
            assert!(ok, "x = {x:?}: gradient {got:?}, expected {want:?}");
        }
    }
}

/// Matrix parameters: `matvec` differentiates into an outer product (the
/// matrix's gradient, a deterministic sum over edges and rows) and a
/// transposed product (the vector's).
#[test]
fn matrix_parameter_kernels_match_finite_differences() {
    let kernels = Kernel::all_from_source(include_str!("../../examples/kernels/dense.rs")).expect("kernels compile");
    let mut rng = Rng(0xdeed_5eed_0007);
    let graphs = vec![("random", random_graph(&mut rng, 9, 9, 24)), ("bipartite", random_graph(&mut rng, 5, 8, 14))];
    for (gname, g) in &graphs {
        for k in &kernels {
            check_kernel(k, g, gname, &mut rng);
        }
    }
}

/// Row statistics that are short scalar expressions of the cotangent are
/// recomputed by the source stage (one stage); longer ones, and ones that
/// read the aggregate, keep their stats stage. Both against finite
/// differences.
#[test]
fn recomputed_and_kept_row_statistics_match_finite_differences() {
    const SRC: &str = r#"
#[message_passing(reduce = sum)]
pub mod Affine {
    use tiga::lang::*;
    pub struct Src { pub x: f32 }
    pub fn edge(src: &Src) -> f32 { src.x }
    pub fn node(agg: f32) -> f32 { 2.0 * agg - 0.5 * agg + 1.0 }
}
#[message_passing(reduce = sum)]
pub mod LongAffine {
    use tiga::lang::*;
    pub struct Src { pub x: f32 }
    pub fn edge(src: &Src) -> f32 { src.x }
    pub fn node(agg: f32) -> f32 { 2.0 * agg - 0.5 * agg + 3.0 * agg - 0.25 * agg + 0.125 * agg }
}
#[message_passing(reduce = sum)]
pub mod Square {
    use tiga::lang::*;
    pub struct Src { pub x: f32 }
    pub fn edge(src: &Src) -> f32 { src.x }
    pub fn node(agg: f32) -> f32 { agg * agg }
}
"#;
    let kernels = Kernel::all_from_source(SRC).expect("kernels compile");
    for (name, stages) in [("Affine", 1), ("LongAffine", 2), ("Square", 2)] {
        let k = kernels.iter().find(|k| k.name() == name).expect("kernel");
        let text = k.explain();
        assert!(text.contains(&format!("  {stages} stage(s), run in order")), "{name}: expected {stages} stage(s):\n{text}");
    }
    check_kernels_on_test_graphs(&kernels, Rng(0x5747_5000_0001));
}

/// A max whose destination fields are named like the stats stage's
/// outputs (`abar0`, `winner0`): the source side's scatter must take the
/// stats stage's values, not the user's fields of the same names. A max of
/// `ln`: a source with no out-edge gets gradient 0 (no row in the
/// per-source stage), not the adjoint of `ln` at its value with a zero
/// cotangent (0 / 0 at x = 0). The first against finite differences, the
/// second against the closed form.
#[test]
fn max_scatter_reads_the_stats_stage_and_skips_isolated_sources() {
    const SRC: &str = r#"
#[message_passing(reduce = max)]
pub mod MaxNamedLikeStats {
    use tiga::lang::*;
    pub struct Src { pub x: f32 }
    pub struct Dst { pub abar0: f32, pub winner0: f32 }
    pub fn edge(src: &Src) -> f32 { src.x * src.x }
    pub fn node(dst: &Dst, agg: f32) -> f32 { agg * dst.abar0 + dst.winner0 }
}
#[message_passing(reduce = max)]
pub mod MaxLn {
    use tiga::lang::*;
    pub struct Src { pub x: f32 }
    pub fn edge(src: &Src) -> f32 { ln(src.x) }
}
"#;
    let kernels = Kernel::all_from_source(SRC).expect("kernels compile");
    for k in &kernels {
        assert!(k.explain().contains("[SelfLoops]"), "{}: expected the scatter:\n{}", k.name(), k.explain());
    }
    // (ln near 0 has no finite difference: the closed form below instead.)
    let named: Vec<Kernel> =
        Kernel::all_from_source(SRC).expect("kernels compile").into_iter().filter(|k| k.name() == "MaxNamedLikeStats").collect();
    check_kernels_on_test_graphs(&named, Rng(0x5ca7_7e40_0001));
    // Source 2 has no out-edge and x = 0.
    let k = kernels.iter().find(|k| k.name() == "MaxLn").expect("kernel");
    let g = Graph::from_edges(3, 2, &[0, 1, 1], &[0, 0, 1]).expect("graph");
    let x = Tensor::from_f64(vec![3], vec![2.0, 4.0, 0.0]).expect("x");
    let cot = Tensor::from_f64(vec![2], vec![1.0, 3.0]).expect("cot");
    for grads in [
        k.vjp(&g, &Inputs::new().src("x", &x), &[("out", cot.view())]).expect("vjp"),
        k.vjp_reference(&g, &Inputs::new().src("x", &x), &[("out", cot.view())]).expect("reference"),
    ] {
        // Both rows are won by source 1 (ln 4 > ln 2): (1 + 3) / 4.
        assert_eq!(grads.src("x").expect("grad").to_f64_vec(), vec![0.0, 1.0, 0.0]);
    }
}
