//! The per-feature `if`: masks from `gt`/`ge`/`lt`/`le` of vectors, `!`,
//! `&`, `|` on masks, `select(mask, a, b)`, and `elu` built on it. Through
//! `#[message_passing]` (so rustc type-checks the bodies against
//! `tiga::lang` and the macro compiles ahead-of-time variants), each kernel
//! runs under the Cranelift JIT and the AOT variant against the f64
//! reference interpreter and the `tiga::lang` oracle called edge by edge;
//! gradients against central finite differences of the reference and, at
//! ELU's kink and far past its overflow, against the closed form.

use tiga::{Backend, DType, Graph, Inputs, Kernel, Schedule, Tensor};

mod common;
use common::Rng;

#[allow(clippy::all)]
mod kernels {
    use tiga::message_passing;

    /// out[i] = select(agg > g[i] & !(g[i] < -0.5), elu(agg, 0.5), 0.25 g[i]),
    /// agg = Σ_{j→i} 2 elu(h[j] − g[i], 1.5)
    #[message_passing(reduce = sum)]
    pub mod EluGate {
        use tiga::lang::*;
        pub struct Src {
            pub h: Vector<f32>,
        }
        pub struct Dst {
            pub g: Vector<f32>,
        }
        pub fn edge(src: &Src, dst: &Dst) -> Vector<f32> {
            elu(&src.h - &dst.g, 1.5) * 2.0
        }
        pub fn node(dst: &Dst, agg: Vector<f32>) -> Vector<f32> {
            select(gt(&agg, &dst.g) & !lt(&dst.g, -0.5), agg.elu(0.5), 0.25 * &dst.g)
        }
    }

    /// out[i] = max_{j→i} select(h[j] ≤ x[j] | h[j] ≥ 0.7, e^h[j], x[j])
    #[message_passing(reduce = max)]
    pub mod SelectMax {
        use tiga::lang::*;
        pub struct Src {
            pub h: Vector<f32>,
            pub x: f32,
        }
        pub fn edge(src: &Src) -> Vector<f32> {
            select(le(&src.h, src.x) | ge(&src.h, 0.7), src.h.exp(), src.x)
        }
    }

    /// out[i] = Σ_{j→i} w_e · select(h[j] > 0, 1, −1) + elu(3 w_e, 0.8): a
    /// mask choosing between two scalars, and the scalar `elu`.
    #[message_passing(reduce = sum)]
    pub mod SignSum {
        use tiga::lang::*;
        pub struct Src {
            pub h: Vector<f32>,
        }
        pub struct Edge {
            pub w: f32,
        }
        pub fn edge(src: &Src, edge: &Edge) -> Vector<f32> {
            edge.w * select(gt(&src.h, 0.0), 1.0f32, -1.0f32) + elu(3.0 * edge.w, 0.8)
        }
    }

    /// out[i] = Σ_{j→i} select(m, h[j] · s, −g[i]), s = Σ_f select(m, h[j], 0),
    /// m = h[j] > g[i] | h[j] ≥ 0.8: a mask needed on both sides of a
    /// feature reduction, so it is kept in scratch memory between them.
    #[message_passing(reduce = sum)]
    pub mod KeptMask {
        use tiga::lang::*;
        pub struct Src {
            pub h: Vector<f32>,
        }
        pub struct Dst {
            pub g: Vector<f32>,
        }
        pub fn edge(src: &Src, dst: &Dst) -> Vector<f32> {
            let m = gt(&src.h, &dst.g) | ge(&src.h, 0.8);
            let s = sum(select(&m, &src.h, 0.0));
            select(&m, &src.h * s, -&dst.g)
        }
    }

    /// out[i] = Σ_{j→i} elu(h[j], 2): gradients at the kink and past e^x's
    /// overflow.
    #[message_passing(reduce = sum)]
    pub mod Elu {
        use tiga::lang::*;
        pub struct Src {
            pub h: Vector<f32>,
        }
        pub fn edge(src: &Src) -> Vector<f32> {
            src.h.elu(2.0)
        }
    }
}

use kernels::{Elu, EluGate, KeptMask, SelectMax, SignSum};

const F: usize = 4;

fn graph(rng: &mut Rng, n: usize, m: usize) -> (Graph, Vec<u32>, Vec<u32>) {
    let (src, dst) = common::random_edges(rng, n, n - 1, m);
    (Graph::from_edges(n, n, &src, &dst).expect("valid graph"), src, dst)
}

fn values(rng: &mut Rng, len: usize) -> Vec<f64> {
    (0..len).map(|_| rng.uniform()).collect()
}

fn on(backend: Backend) -> Schedule {
    Schedule::new().backend(backend)
}

fn close(a: &[f64], b: &[f64], tol: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: length");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() <= tol * y.abs().max(1.0), "{what}[{i}]: {x} against {y}");
    }
}

/// The lang oracle, edge by edge, for EluGate: rustc-compiled f32 bodies.
fn elu_gate_oracle(n: usize, src: &[u32], dst: &[u32], h: &[f64], g: &[f64]) -> Vec<f64> {
    use tiga::lang::Vector;
    let row = |x: &[f64], i: usize| Vector::new(x[i * F..(i + 1) * F].iter().map(|&v| v as f32).collect());
    let mut agg = vec![Vector::zeros(F); n];
    for (&s, &d) in src.iter().zip(dst) {
        let m = EluGate::edge(&EluGate::Src { h: row(h, s as usize) }, &EluGate::Dst { g: row(g, d as usize) });
        agg[d as usize] = &agg[d as usize] + m;
    }
    let mut out = Vec::new();
    for (i, a) in agg.into_iter().enumerate() {
        out.extend(EluGate::node(&EluGate::Dst { g: row(g, i) }, a).iter().map(|&v| f64::from(v)));
    }
    out
}

#[test]
fn outputs_equal_the_reference_and_the_oracle_on_both_back_ends() {
    let mut rng = Rng(0x5e1e_c7ed);
    let (g, src, dst) = graph(&mut rng, 23, 90);
    let (n, e) = (g.num_src(), g.num_edges());
    let h = values(&mut rng, n * F);
    let gg = values(&mut rng, n * F);
    let x = values(&mut rng, n);
    let w = values(&mut rng, e);
    let kernels: [(&str, &Kernel); 4] = [
        ("EluGate", EluGate::kernel()),
        ("SelectMax", SelectMax::kernel()),
        ("SignSum", SignSum::kernel()),
        ("KeptMask", KeptMask::kernel()),
    ];
    for dtype in [DType::F32, DType::F64] {
        let t = |shape: Vec<usize>, v: &[f64]| match dtype {
            DType::F32 => Tensor::from_f32(shape, v.iter().map(|&a| a as f32).collect()).expect("tensor"),
            _ => Tensor::from_f64(shape, v.to_vec()).expect("tensor"),
        };
        let (th, tg, tx, tw) = (t(vec![n, F], &h), t(vec![n, F], &gg), t(vec![n], &x), t(vec![e], &w));
        for (name, k) in kernels {
            let inputs = match name {
                "EluGate" | "KeptMask" => Inputs::new().src("h", &th).dst("g", &tg),
                "SelectMax" => Inputs::new().src("h", &th).src("x", &tx),
                _ => Inputs::new().src("h", &th).edge("w", &tw),
            };
            assert!(k.aot_variant(dtype, &[F]).is_some(), "{name}: the macro compiled no {dtype} variant at F = {F}");
            let want = k.run_reference(&g, &inputs).expect("reference")["out"].to_f64_vec();
            let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
            for backend in [Backend::Jit, Backend::Aot] {
                let got = k.run_with(&g, &inputs, &on(backend)).expect("run")["out"].to_f64_vec();
                close(&got, &want, tol, &format!("{name} {dtype} {backend:?}"));
            }
            if name == "EluGate" && dtype == DType::F32 {
                close(&elu_gate_oracle(n, &src, &dst, &h, &gg), &want, 1e-5, "EluGate lang oracle");
            }
        }
    }
}

/// A field of a gradient case: role, name, shape, values.
type Field = (&'static str, &'static str, Vec<usize>, Vec<f64>);

#[test]
fn gradients_equal_finite_differences_on_both_back_ends() {
    let mut rng = Rng(0x9ad_5e1);
    let (g, _, _) = graph(&mut rng, 11, 40);
    let (n, e) = (g.num_src(), g.num_edges());
    // Values spread apart so no mask flips within the finite difference.
    let spread = |rng: &mut Rng, len: usize| -> Vec<f64> { values(rng, len).iter().map(|v| v * 1.3 + 0.01).collect() };
    let fields = [("h", vec![n, F], spread(&mut rng, n * F)), ("g", vec![n, F], spread(&mut rng, n * F))];
    let x = spread(&mut rng, n);
    let w = spread(&mut rng, e);
    let cases: [(&Kernel, Vec<Field>); 4] = [
        (
            KeptMask::kernel(),
            vec![("src", "h", fields[0].1.clone(), fields[0].2.clone()), ("dst", "g", fields[1].1.clone(), fields[1].2.clone())],
        ),
        (
            EluGate::kernel(),
            vec![("src", "h", fields[0].1.clone(), fields[0].2.clone()), ("dst", "g", fields[1].1.clone(), fields[1].2.clone())],
        ),
        (SelectMax::kernel(), vec![("src", "h", fields[0].1.clone(), fields[0].2.clone()), ("src", "x", vec![n], x.clone())]),
        (SignSum::kernel(), vec![("src", "h", fields[0].1.clone(), fields[0].2.clone()), ("edge", "w", vec![e], w.clone())]),
    ];
    for (k, fs) in cases {
        let tensors = |fs: &[Field]| -> Vec<Tensor> {
            fs.iter().map(|(_, _, s, v)| Tensor::from_f64(s.clone(), v.clone()).expect("tensor")).collect()
        };
        fn bind<'a>(ts: &'a [Tensor], fs: &[Field]) -> Inputs<'a> {
            let mut i = Inputs::new();
            for ((role, name, _, _), t) in fs.iter().zip(ts) {
                i = match *role {
                    "src" => i.src(name, t),
                    "dst" => i.dst(name, t),
                    _ => i.edge(name, t),
                };
            }
            i
        }
        let ts = tensors(&fs);
        let out_len = n * F;
        let cot: Vec<f64> = values(&mut rng, out_len);
        let cot_t = Tensor::from_f64(vec![n, F], cot.clone()).expect("cot");
        let objective = |fs: &[Field]| -> f64 {
            let ts = tensors(fs);
            let out = k.run_reference(&g, &bind(&ts, fs)).expect("reference")["out"].to_f64_vec();
            out.iter().zip(&cot).map(|(a, b)| a * b).sum()
        };
        let reference = k.vjp_reference(&g, &bind(&ts, &fs), &[("out", cot_t.view())]).expect("vjp reference");
        let jit = k.vjp_with(&g, &bind(&ts, &fs), &[("out", cot_t.view())], &on(Backend::Jit)).expect("vjp jit");
        let aot = k.vjp_with(&g, &bind(&ts, &fs), &[("out", cot_t.view())], &on(Backend::Aot)).expect("vjp aot");
        for (fi, (role, name, _, data)) in fs.iter().enumerate() {
            let r = match *role {
                "src" => tiga::compiler::ir::Role::Src,
                "dst" => tiga::compiler::ir::Role::Dst,
                _ => tiga::compiler::ir::Role::Edge,
            };
            let want = reference.get(r, name).expect("gradient").to_f64_vec();
            for (idx, wv) in want.iter().enumerate().take(data.len()) {
                let h = 1e-6;
                let (mut plus, mut minus) = (fs.clone(), fs.clone());
                plus[fi].3[idx] += h;
                minus[fi].3[idx] -= h;
                let fd = (objective(&plus) - objective(&minus)) / (2.0 * h);
                assert!(
                    (fd - wv).abs() <= 1e-6 * fd.abs().max(1.0),
                    "{} d/d {name}[{idx}]: adjoint {wv} vs finite difference {fd}",
                    k.name()
                );
            }
            close(&jit.get(r, name).expect("jit gradient").to_f64_vec(), &want, 1e-12, &format!("{} JIT d{name}", k.name()));
            close(&aot.get(r, name).expect("aot gradient").to_f64_vec(), &want, 1e-12, &format!("{} AOT d{name}", k.name()));
        }
    }
}

/// elu'(0) = alpha (PyTorch's convention), elu'(x) = 1 for x > 0 even where
/// e^x is infinite in f32, alpha·e^x below 0: one edge per source.
#[test]
fn elu_gradient_at_its_kink_and_past_overflow() {
    let xs = [0.0f32, 100.0, -1.0, 1e-3, -100.0, 89.0, 0.5, -0.25];
    let n = 2;
    let g = Graph::from_edges(n, n, &[0, 1], &[1, 0]).expect("graph");
    let h = Tensor::from_f32(vec![n, F], xs.to_vec()).expect("h");
    let ones = Tensor::from_f32(vec![n, F], vec![1.0; n * F]).expect("cot");
    let want: Vec<f64> = xs.iter().map(|&x| if x > 0.0 { 1.0 } else { 2.0 * f64::from(x).exp() }).collect();
    let out_want: Vec<f64> = [&xs[F..], &xs[..F]]
        .concat()
        .iter()
        .map(|&x| if x > 0.0 { f64::from(x) } else { 2.0 * (f64::from(x).exp() - 1.0) })
        .collect();
    for backend in [Backend::Jit, Backend::Aot] {
        let k = Elu::kernel();
        let inputs = Inputs::new().src("h", &h);
        let out = k.run_with(&g, &inputs, &on(backend)).expect("run")["out"].to_f64_vec();
        close(&out, &out_want, 1e-6, &format!("elu {backend:?}"));
        let grads = k.vjp_with(&g, &inputs, &[("out", ones.view())], &on(backend)).expect("vjp");
        let got = grads.get(tiga::compiler::ir::Role::Src, "h").expect("dh").to_f64_vec();
        assert!(got.iter().all(|v| v.is_finite()), "{backend:?}: {got:?}");
        close(&got, &want, 1e-6, &format!("elu gradient {backend:?}"));
    }
}

/// What the front end refuses, with the message a user reads.
#[test]
fn misuse_is_refused_with_a_message() {
    let cases = [
        (
            "if gt(&src.h, 0.0) { src.h.clone() } else { -&src.h }",
            "found a mask: choose feature by feature with select(mask, a, b)",
        ),
        ("select(src.x > 0.0, src.h.clone(), 0.0)", "`select` takes a mask (gt, ge, lt, le of vectors) first, found bool"),
        ("select(gt(src.x, 0.0), src.h.clone(), 0.0)", "compare scalars with `<`, `<=`, `>`, `>=`"),
        ("select(gt(&src.h, 0.0) && lt(&src.h, 1.0), src.h.clone(), 0.0)", "combine masks feature by feature with `&` and `|`"),
        (
            "select(gt(&src.h, 0.0) & (src.x > 1.0), src.h.clone(), 0.0)",
            "`&`/`|` combine two masks or two bools, found mask and bool",
        ),
        ("elu(src.h.clone(), src.h.clone())", "`elu`'s alpha"),
    ];
    for (body, want) in cases {
        let text = format!(
            "#[message_passing(reduce = sum)]
pub mod Bad {{
    use tiga::lang::*;
    pub struct Src {{ pub h: Vector<f32>, pub x: f32 }}
    pub fn edge(src: &Src) -> Vector<f32> {{ {body} }}
}}"
        );
        let err = Kernel::from_source(&text, "Bad").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains(want), "{body}: expected a message containing {want:?}, got {err:?}");
    }
}
