//! Every kernel of examples/kernels/gnn.rs, through the macro path and
//! through the kernel-file path, against the f64 reference interpreter, on
//! graphs with empty rows, isolated nodes, self loops, multi-edges, a
//! bipartite shape and a single node, in f32 and in f64.

use tiga::{Graph, Inputs, Kernel, Tensor};

mod common;
use common::{random_fields, Rng};

// The kernels of gnn.rs under the macro, compiled once in the
// conformance crate rather than into every test binary.
use tiga_conformance::gnn;

/// Random graphs covering the shapes the issue names.
fn graphs(rng: &mut Rng) -> Vec<(&'static str, Graph)> {
    let mut out = Vec::new();
    let random = |ns: usize, nd: usize, ne: usize, rng: &mut Rng| {
        let mut src = Vec::new();
        let mut dst = Vec::new();
        for _ in 0..ne {
            src.push((rng.next() % ns as u64) as u32);
            // Skip the last destination so some rows are empty.
            dst.push((rng.next() % (nd as u64 - 1).max(1)) as u32);
        }
        if ne > 2 {
            src.push(src[0]);
            dst.push(dst[0]); // multi-edge
            src.push(0);
            dst.push(0); // self loop
        }
        Graph::from_edges(ns, nd, &src, &dst).expect("valid graph")
    };
    out.push(("random", random(40, 40, 160, rng)));
    out.push(("sparse-with-isolated", random(50, 50, 30, rng)));
    out.push(("bipartite", random(13, 29, 70, rng)));
    out.push(("one-node", Graph::from_edges(1, 1, &[0, 0], &[0, 0]).expect("valid")));
    out.push(("one-node-empty", Graph::from_edges(1, 1, &[], &[]).expect("valid")));
    out.push(("stencil", Graph::stencil_2d_4(5, 7).expect("valid")));
    out
}

fn check(k: &Kernel, g: &Graph, gname: &str, rng: &mut Rng) {
    for f in [1usize, 3, 8, 64] {
        let fields = random_fields(k, g, f, || rng.uniform());
        for dtype in ["f32", "f64"] {
            let tensors: Vec<Tensor> = fields
                .iter()
                .map(|(_, _, shape, data)| match dtype {
                    "f32" => Tensor::from_f32(shape.clone(), data.iter().map(|&x| x as f32).collect()).expect("shape"),
                    _ => Tensor::from_f64(shape.clone(), data.clone()).expect("shape"),
                })
                .collect();
            let mut inputs = Inputs::new();
            for ((role, name, _, _), t) in fields.iter().zip(&tensors) {
                inputs = inputs.with_role(*role, name, t);
            }
            let got = k.run(g, &inputs).expect("jit run");
            let want = k.run_reference(g, &inputs).expect("reference run");
            let tol = if dtype == "f32" { 1e-5 } else { 1e-12 };
            for ((name, a), (_, b)) in got.items.iter().zip(&want.items) {
                assert_eq!(a.shape(), b.shape(), "{} {name}", k.name());
                for (x, y) in a.to_f64_vec().iter().zip(b.to_f64_vec()) {
                    assert!(
                        (x - y).abs() <= tol * y.abs().max(1.0),
                        "{} on {gname}, F={f}, {dtype}: output {name}: got {x}, reference {y}",
                        k.name()
                    );
                }
            }
        }
    }
}

#[test]
fn macro_kernels_match_reference() {
    let kernels: Vec<&Kernel> = vec![
        gnn::NeighborSum::kernel(),
        gnn::Smoothing::kernel(),
        gnn::VecSum::kernel(),
        gnn::GcnNorm::kernel(),
        gnn::SageMean::kernel(),
        gnn::MaxPool::kernel(),
        gnn::GinSum::kernel(),
        gnn::GatAttention::kernel(),
        gnn::Top2Sum::kernel(),
        gnn::EdgeGate::kernel(),
    ];
    // The macro compiled ahead-of-time variants: common widths run through
    // rustc/LLVM, others (F = 3 here) through the JIT; both are checked.
    for k in &kernels {
        assert!(!k.aot_variants().is_empty(), "{} has no ahead-of-time variants", k.name());
    }
    assert!(gnn::VecSum::kernel().backend_for(tiga::DType::F32, &[8]).starts_with("rust-aot"));
    assert!(gnn::VecSum::kernel().backend_for(tiga::DType::F32, &[3]).starts_with("cranelift"));
    let mut rng = Rng(0x5eed_1234_abcd);
    for (gname, g) in graphs(&mut rng) {
        for k in &kernels {
            check(k, &g, gname, &mut rng);
        }
    }
}

#[test]
fn kernel_file_path_matches_reference() {
    let src = include_str!("../../examples/kernels/gnn.rs");
    let kernels = Kernel::all_from_source(src).expect("kernel file compiles");
    assert_eq!(kernels.len(), 10);
    let mut rng = Rng(0xfeed_beef_0042);
    for (gname, g) in graphs(&mut rng).into_iter().take(3) {
        for k in &kernels {
            check(k, &g, gname, &mut rng);
        }
    }
}

#[test]
fn oracle_functions_agree_with_closed_form() {
    // The user's functions stay ordinary Rust: call them directly.
    use tiga::lang::Vector;
    let src = gnn::GcnNorm::Src { h: Vector::new(vec![1.0, 2.0]), cs: 0.5 };
    let e = gnn::GcnNorm::Edge { w: 4.0 };
    assert_eq!(gnn::GcnNorm::edge(&src, &e), Vector::new(vec![2.0, 4.0]));
    let s = gnn::Top2Sum::combine((5.0, 1.0), (3.0, 2.0));
    assert_eq!(s, (5.0, 3.0));
    assert_eq!(gnn::Top2Sum::finalize(s), 8.0);
}

/// MaxPool's max of relus, folded into a select from 0 (`fold-relu-into-max`),
/// keeps every bit of max(relu(h)): +0 (never -0) for rows with no positive
/// value (negative, -0, NaN), the largest positive value otherwise, 0 for an
/// empty row. Both back ends (macro path: rustc at F = 8; kernel file: JIT)
/// against this closed form, bit for bit.
#[test]
fn max_of_relus_keeps_its_bits() {
    // Rows: 0 <- {-1, -0, NaN}; 1 <- {NaN, 2, -0, 3}; 2 <- {} ; 3 <- {-0}.
    let h: Vec<f32> = vec![-1.0, -0.0, f32::NAN, 2.0, 3.0];
    let f = 8;
    let hv: Vec<f32> = h.iter().flat_map(|&x| (0..f).map(move |l| if l % 2 == 0 { x } else { -x })).collect();
    let (src, dst) = (vec![0u32, 1, 2, 2, 3, 1, 4, 1], vec![0u32, 0, 0, 1, 1, 1, 1, 3]);
    let g = Graph::from_edges(5, 4, &src, &dst).expect("graph");
    let t = Tensor::from_f32(vec![5, f], hv.clone()).expect("h");
    let ins = Inputs::new().src("h", &t);
    let mut want = vec![0.0f32; 4 * f];
    for (&s, &d) in src.iter().zip(&dst) {
        for l in 0..f {
            let x = hv[s as usize * f + l];
            let r = if x > 0.0 { x } else { 0.0 };
            if r > want[d as usize * f + l] {
                want[d as usize * f + l] = r;
            }
        }
    }
    let file = Kernel::from_source(include_str!("../../examples/kernels/gnn.rs"), "MaxPool").expect("kernel");
    assert!(gnn::MaxPool::kernel().backend_for(tiga::DType::F32, &[f]).starts_with("rust-aot"));
    assert!(file.backend_for(tiga::DType::F32, &[f]).starts_with("cranelift"));
    for (path, k) in [("macro", gnn::MaxPool::kernel()), ("kernel file", &file)] {
        let out = k.run(&g, &ins).expect("run");
        let got = out.items[0].1.as_f32().expect("f32").to_vec();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
        assert_eq!(bits(&got), bits(&want), "{path}: {got:?} vs {want:?}");
    }
}

/// MaxPool's source gradient comes from a scatter of each row's winning
/// cotangents to their sources, then relu' once per source
/// (`adjoint/scatter.rs`). Against the closed form: per row and lane, the
/// first edge in the row's order attaining the maximum of relu(h) gets the
/// lane's cotangent, times relu'(h) (0 at h <= 0); a source collects it from
/// every row it wins. Covered: exact ties (the first edge wins, including a
/// duplicate edge from the same source), a source winning several rows, an
/// empty row, a row of non-positive values only, and lanes split between
/// threads (F = 8 over 2 threads: each thread owns 4 lanes of every row).
/// Both back ends and the f64 reference give the same bits: each source's
/// sum adds its terms in row order.
#[test]
fn max_gradient_scatters_winners_to_sources() {
    let f = 8;
    // Sources 0..5; rows 0..5 (row 3 empty).
    let (src, dst) = (vec![0u32, 1, 0, 1, 2, 2, 2, 4, 3, 0], vec![0u32, 0, 0, 1, 1, 2, 2, 4, 4, 1]);
    let base: [f32; 5] = [1.5, 1.5, 0.25, -1.0, -0.0];
    let hv: Vec<f32> = (0..5)
        .flat_map(|s| (0..f).map(move |l| base[s] + if l % 3 == 0 { 0.0 } else { 0.125 * ((s * 7 + l) % 5) as f32 }))
        .collect();
    let g = Graph::from_edges(5, 5, &src, &dst).expect("graph");
    let cot: Vec<f32> = (0..5 * f).map(|x| 0.5 + (x % 7) as f32 * 0.25).collect();
    // Closed form, edges in each row's (user) order.
    let mut want = vec![0.0f64; 5 * f];
    for d in 0..5u32 {
        let row: Vec<u32> = src.iter().zip(&dst).filter(|(_, &t)| t == d).map(|(&s, _)| s).collect();
        for l in 0..f {
            let relu = |s: u32| f64::from(hv[s as usize * f + l]).max(0.0);
            let Some(best) = row.iter().map(|&s| relu(s)).reduce(f64::max) else { continue };
            let Some(&win) = row.iter().find(|&&s| relu(s) == best) else { continue };
            if hv[win as usize * f + l] > 0.0 {
                want[win as usize * f + l] += f64::from(cot[d as usize * f + l]);
            }
        }
    }
    assert!(want.iter().filter(|&&x| x != 0.0).count() > f, "the case must send cotangents to several sources");
    let file = Kernel::from_source(include_str!("../../examples/kernels/gnn.rs"), "MaxPool").expect("kernel");
    assert!(file.explain().contains("[SelfLoops]"), "MaxPool's source side should be the scatter:\n{}", file.explain());
    let t = Tensor::from_f32(vec![5, f], hv.clone()).expect("h");
    let c = Tensor::from_f32(vec![5, f], cot.clone()).expect("cot");
    let ins = Inputs::new().src("h", &t);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("pool");
    for (path, k) in [("macro", gnn::MaxPool::kernel()), ("kernel file", &file)] {
        let grads = pool.install(|| k.vjp(&g, &ins, &[("out", c.view())])).expect("vjp");
        let got = grads.src("h").expect("grad").to_f64_vec();
        assert_eq!(got, want, "{path}: got {got:?}, closed form {want:?}");
    }
    let h64 = Tensor::from_f64(vec![5, f], hv.iter().map(|&x| f64::from(x)).collect()).expect("h");
    let c64 = Tensor::from_f64(vec![5, f], cot.iter().map(|&x| f64::from(x)).collect()).expect("cot");
    let grads = file.vjp_reference(&g, &Inputs::new().src("h", &h64), &[("out", c64.view())]).expect("reference");
    assert_eq!(grads.src("h").expect("grad").to_f64_vec(), want, "reference");
}

/// GatAttention's softmax takes its row maximum from a first pass over the
/// row's edges (`precompute-row-max`), so its main pass computes one
/// exponential per edge, `exp(s - max)`. Scores of a few hundred (where
/// `exp(s)` overflows f32, and `exp(s - m)` for any `m` short of the row's
/// maximum would too) must give the closed-form softmax; both back ends
/// (macro path: rustc at F = 8; kernel file: JIT) run the same loops, so
/// they agree bit for bit. Row 0 has 200 edges: its weights (with their
/// `exp` calls) are computed in tiles of 64 edges ahead of the tile's
/// feature loops (`loops::split_calls`), so it spans four tiles, the last
/// one partial.
#[test]
fn softmax_row_maximum_comes_from_a_first_pass() {
    let mut rng = Rng(0x50f7_3a11);
    let (ns, nd, f) = (30usize, 20usize, 8usize);
    let mut src = Vec::new();
    let mut dst = Vec::new();
    for _ in 0..150 {
        src.push(rng.below(ns) as u32);
        dst.push(rng.below(nd - 1) as u32); // the last row is empty
    }
    for _ in 0..200 {
        src.push(rng.below(ns) as u32);
        dst.push(0);
    }
    let g = Graph::from_edges(ns, nd, &src, &dst).expect("graph");
    let a_src: Vec<f32> = (0..ns).map(|_| (rng.uniform() * 300.0) as f32).collect();
    let a_dst: Vec<f32> = (0..nd).map(|_| (rng.uniform() * 50.0) as f32).collect();
    let h: Vec<f32> = (0..ns * f).map(|_| rng.uniform() as f32).collect();
    // Closed form in f64: out[i] = Σ_e exp(s_e - max_i) h[j] / Σ_e exp(s_e - max_i).
    let score = |j: usize, i: usize| {
        let z = f64::from(a_src[j]) + f64::from(a_dst[i]);
        if z > 0.0 {
            z
        } else {
            0.2 * z
        }
    };
    let mut want = vec![0.0f64; nd * f];
    for i in 0..nd {
        let edges: Vec<usize> = (0..src.len()).filter(|&e| dst[e] as usize == i).collect();
        let m = edges.iter().map(|&e| score(src[e] as usize, i)).fold(f64::NEG_INFINITY, f64::max);
        let den: f64 = edges.iter().map(|&e| (score(src[e] as usize, i) - m).exp()).sum();
        for &e in &edges {
            let (j, w) = (src[e] as usize, (score(src[e] as usize, i) - m).exp() / den);
            for l in 0..f {
                want[i * f + l] += w * f64::from(h[j * f + l]);
            }
        }
    }
    let (ht, at, dt) = (
        Tensor::from_f32(vec![ns, f], h).expect("h"),
        Tensor::from_f32(vec![ns], a_src).expect("a_src"),
        Tensor::from_f32(vec![nd], a_dst).expect("a_dst"),
    );
    let ins = Inputs::new().src("h", &ht).src("a_src", &at).dst("a_dst", &dt);
    let file = Kernel::from_source(include_str!("../../examples/kernels/gnn.rs"), "GatAttention").expect("kernel");
    assert!(!file.loop_kernel().pre_body.is_empty(), "the row maximum has its own pass");
    assert!(file.explain().contains("first pass over the row's edges"));
    assert!(gnn::GatAttention::kernel().backend_for(tiga::DType::F32, &[f]).starts_with("rust-aot"));
    assert!(file.backend_for(tiga::DType::F32, &[f]).starts_with("cranelift"));
    let mut outs = Vec::new();
    for (path, k) in [("macro", gnn::GatAttention::kernel()), ("kernel file", &file)] {
        let got = k.run(&g, &ins).expect("run").items[0].1.as_f32().expect("f32").to_vec();
        for (x, y) in got.iter().zip(&want) {
            assert!((f64::from(*x) - y).abs() <= 1e-5 * y.abs().max(1.0), "{path}: got {x}, closed form {y}");
        }
        outs.push(got.iter().map(|x| x.to_bits()).collect::<Vec<u32>>());
    }
    assert_eq!(outs[0], outs[1], "rustc and the JIT run the same loops");
    let text = file.explain();
    assert!(text.contains("edge tiles: 64 edges at a time"), "the JIT variant tiles its edges:\n{text}");
}

/// `precompute-row-max` rewrites only the online-softmax shape. Two user
/// monoids with the same step, one whose denominator starts at 0 (an
/// online softmax's: the pass applies) and one whose starts at 1 (the 1 is
/// scaled away by the first edge's exp(-inf - m) = 0 in the online fold,
/// but would survive with the final maximum: the pass must leave it), each
/// against the f64 reference interpreter.
#[test]
fn row_max_precomputation_keeps_to_the_online_softmax_shape() {
    // The same online-softmax monoid, its denominator starting at `start`.
    let soft = |name: &str, start: &str| {
        format!(
            "#[message_passing(reduce = monoid(associative, commutative))]
pub mod {name} {{
    use tiga::lang::*;
    pub struct Src {{ pub x: f32 }}
    pub fn edge(src: &Src) -> (f32, f32) {{ (src.x, 1.0) }}
    pub fn identity() -> (f32, f32) {{ (f32::NEG_INFINITY, {start}) }}
    pub fn combine(a: (f32, f32), b: (f32, f32)) -> (f32, f32) {{
        (max(a.0, b.0), a.1 * exp(a.0 - max(a.0, b.0)) + b.1 * exp(b.0 - max(a.0, b.0)))
    }}
    pub fn finalize(s: (f32, f32)) -> f32 {{ s.1 }}
}}
"
        )
    };
    let kernels = soft("SoftFromZero", "0.0") + &soft("SoftFromOne", "1.0");
    let mut rng = Rng(0x0b1e_55ed);
    let (n, m) = (40usize, 200usize);
    let mut src = Vec::new();
    let mut dst = Vec::new();
    for _ in 0..m {
        src.push(rng.below(n) as u32);
        dst.push(rng.below(n - 3) as u32); // the last rows are empty
    }
    let g = Graph::from_edges(n, n, &src, &dst).expect("graph");
    let x = Tensor::from_f32(vec![n], (0..n).map(|_| (rng.uniform() * 20.0) as f32).collect()).expect("x");
    let ins = Inputs::new().src("x", &x);
    for (name, precomputed) in [("SoftFromZero", true), ("SoftFromOne", false)] {
        let k = Kernel::from_source(&kernels, name).expect("kernel");
        assert_eq!(!k.loop_kernel().pre_body.is_empty(), precomputed, "{name}: pre-pass\n{}", k.loop_kernel());
        let got = k.run(&g, &ins).expect("run").items[0].1.to_f64_vec();
        let want = k.run_reference(&g, &ins).expect("reference").items[0].1.to_f64_vec();
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{name} row {i}: got {a}, reference {b}");
        }
        // An empty row ends at the identity's denominator.
        assert_eq!(got[n - 1], if precomputed { 0.0 } else { 1.0 }, "{name}");
    }
}
