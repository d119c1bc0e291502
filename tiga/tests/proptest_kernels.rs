//! Property tests over random kernels built from the language's building
//! blocks: random expression trees (scalar and vector operations,
//! broadcasting, `if`, per-feature `select` on masks, `elu`, reductions
//! over the feature axis, `let`) with a random builtin reducer and an
//! optional `node`, compiled from source text through the front end, the
//! passes, the scheduler and the JIT, against the f64 reference interpreter
//! on a random graph.

use proptest::prelude::*;
use tiga::{Graph, Inputs, Kernel, Tensor};

fn scalar_leaf() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("src.x".to_string()),
        Just("dst.y".to_string()),
        Just("edge.w".to_string()),
        (-20i32..20).prop_map(|c| format!("{:.2}", f64::from(c) / 4.0)),
    ]
}

fn vector_leaf() -> impl Strategy<Value = String> {
    prop_oneof![Just("src.h.clone()".to_string()), Just("dst.g.clone()".to_string())]
}

/// (scalar expression, vector expression) strategies, built together so each
/// can use the other.
fn exprs() -> (BoxedStrategy<String>, BoxedStrategy<String>) {
    let scalar = scalar_leaf().prop_recursive(4, 24, 3, |inner| {
        let vec_of = vector_leaf().boxed();
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} + {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} - {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} * {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} / (1.5 + {b} * {b}))")),
            inner.clone().prop_map(|a| format!("(-{a})")),
            inner.clone().prop_map(|a| format!("abs({a})")),
            inner.clone().prop_map(|a| format!("exp(tanh({a}))")),
            inner.clone().prop_map(|a| format!("sigmoid({a})")),
            inner.clone().prop_map(|a| format!("relu({a})")),
            inner.clone().prop_map(|a| format!("sqrt(abs({a}))")),
            inner.clone().prop_map(|a| format!("ln(abs({a}) + 1.0)")),
            (inner.clone(), 0i32..4).prop_map(|(a, n)| format!("powi(tanh({a}), {n})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("max({a}, {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("min({a}, {b})")),
            inner.clone().prop_map(|a| format!("leaky_relu({a}, 0.2)")),
            inner.clone().prop_map(|a| format!("elu({a}, 1.5)")),
            (inner.clone(), inner.clone(), inner.clone(), inner.clone())
                .prop_map(|(c, d, a, b)| format!("(if {c} > {d} {{ {a} }} else {{ {b} }})")),
            vec_of.clone().prop_map(|v| format!("sum({v})")),
            (vec_of.clone(), vec_of).prop_map(|(a, b)| format!("dot({a}, {b})")),
            (inner.clone(), inner).prop_map(|(a, b)| format!("{{ let t = {a}; t * t + {b} }}")),
        ]
    });
    let s2 = scalar.clone();
    let vector = vector_leaf().prop_recursive(3, 12, 2, move |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} + {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} * {b})")),
            (s2.clone(), inner.clone()).prop_map(|(s, v)| format!("({s} * {v})")),
            (inner.clone(), s2.clone()).prop_map(|(v, s)| format!("({v} - {s})")),
            inner.clone().prop_map(|a| format!("relu({a})")),
            inner.clone().prop_map(|a| format!("tanh({a})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("max({a}, {b})")),
            (s2.clone(), inner.clone(), inner.clone()).prop_map(|(c, a, b)| format!("(if {c} > 0.0 {{ {a} }} else {{ {b} }})")),
            (inner.clone(), inner.clone(), inner.clone(), inner.clone())
                .prop_map(|(c, d, a, b)| format!("select(gt({c}, {d}), {a}, {b})")),
            (inner.clone(), s2.clone(), inner.clone(), s2.clone())
                .prop_map(|(c, t, a, b)| format!("select(le({c}, {t}) | !ge({a}, 0.0), {a}, {b})")),
            (inner.clone(), inner.clone()).prop_map(|(c, a)| format!("select(lt({c}, 0.5) & gt({a}, -0.5), 1.0, {a})")),
            inner.prop_map(|a| format!("elu({a}, 0.5)")),
        ]
    });
    (scalar.boxed(), vector.boxed())
}

fn kernel_source() -> impl Strategy<Value = String> {
    let (scalar, vector) = exprs();
    let reducer = prop_oneof![Just("sum"), Just("mean"), Just("max"), Just("min"), Just("prod")];
    let message =
        prop_oneof![scalar.clone().prop_map(|s| ("f64".to_string(), s)), vector.prop_map(|v| ("Vector<f64>".to_string(), v)),];
    (reducer, message, any::<bool>(), scalar).prop_map(|(red, (mty, m), with_node, s)| {
        let body = if red == "prod" { format!("tanh({m}) * 0.5 + 1.0") } else { m };
        let node = if with_node {
            let s = s.replace("src.", "dst.").replace("edge.w", "dst.y").replace("dst.x", "dst.y").replace("dst.h", "dst.g");
            format!("pub fn node(dst: &Dst, agg: {mty}) -> {mty} {{ agg * sigmoid({s}) + dst.y }}")
        } else {
            String::new()
        };
        format!(
            "#[message_passing(reduce = {red})]
pub mod Random {{
    use tiga::lang::*;
    pub struct Src {{ pub x: f64, pub h: Vector<f64> }}
    pub struct Dst {{ pub y: f64, pub g: Vector<f64> }}
    pub struct Edge {{ pub w: f64 }}
    pub fn edge(src: &Src, dst: &Dst, edge: &Edge) -> {mty} {{ {body} }}
    {node}
}}"
        )
    })
}

fn graph_strategy() -> impl Strategy<Value = (usize, Vec<u32>, Vec<u32>)> {
    (1usize..12).prop_flat_map(|n| {
        let e = proptest::collection::vec((0..n as u32, 0..n as u32), 0..40);
        (Just(n), e).prop_map(|(n, e)| {
            let (s, d): (Vec<u32>, Vec<u32>) = e.into_iter().unzip();
            (n, s, d)
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn random_kernels_match_reference(src in kernel_source(), (n, s, d) in graph_strategy(), f in 1usize..6, seed in any::<u64>()) {
        let kernel = Kernel::from_source(&src, "Random").map_err(|e| TestCaseError::fail(format!("{e}\n{src}")))?;
        let g = Graph::from_edges(n, n, &s, &d).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut state = seed | 1;
        let mut rnd = |len: usize| -> Vec<f64> {
            (0..len).map(|_| { state ^= state << 13; state ^= state >> 7; state ^= state << 17; (state % 4000) as f64 / 1000.0 - 2.0 }).collect()
        };
        let x = Tensor::from_f64(vec![n], rnd(n)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let h = Tensor::from_f64(vec![n, f], rnd(n * f)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let y = Tensor::from_f64(vec![n], rnd(n)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let gg = Tensor::from_f64(vec![n, f], rnd(n * f)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let w = Tensor::from_f64(vec![s.len()], rnd(s.len())).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let inputs = Inputs::new().src("x", &x).src("h", &h).dst("y", &y).dst("g", &gg).edge("w", &w);
        let got = kernel.run(&g, &inputs).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let want = kernel.run_reference(&g, &inputs).map_err(|e| TestCaseError::fail(e.to_string()))?;
        for ((_, a), (_, b)) in got.items.iter().zip(&want.items) {
            for (p, q) in a.to_f64_vec().iter().zip(b.to_f64_vec()) {
                let ok = (p - q).abs() <= 1e-12 * q.abs().max(1.0) || (p.is_nan() && q.is_nan()) || p == &q;
                prop_assert!(ok, "JIT {} vs reference {}\n{}\n{}", p, q, src, kernel.loop_kernel());
            }
        }
    }
}
