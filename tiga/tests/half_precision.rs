//! Half-precision fields: every kernel of examples/kernels/gnn.rs, through
//! the macro path and the kernel-file path, with every field stored as
//! bf16 or f16, forward and backward, against the f64 reference
//! interpreter (docs/half_precision.md states the bounds):
//!
//! * tight: against the reference fed the same half-rounded inputs, the only
//!   differences are f32 arithmetic (the f32 tolerance of the other suites:
//!   1e-5 forward, 1e-4 backward, relative to max(|y|, 1)) and the final
//!   round to the output's or gradient's type (u·|y|, u = 2^-8 for bf16 and
//!   2^-11 for f16);
//! * loose: against the f32 call on the unrounded inputs, where the
//!   inputs' own rounding is added. For the kernels that are sums of
//!   products of at most m field values (and max/min/top-2, m = 1), each
//!   value rounded by at most u relatively moves the output by at most
//!   (1+u)^m - 1 ≈ m·u times the same kernel on |inputs| (the reference on
//!   absolute values, which sums |terms|); gradients of the multilinear
//!   kernels likewise. The others (softmax, sigmoid) have no such closed
//!   bound and are held to the tight one.
//!
//! Half-width outputs (examples/kernels/gnn_half.rs) are checked the same
//! way, and a half output equals the f32 result rounded once.

use tiga::{FieldType, Graph, Inputs, Kernel, Tensor};

mod common;
use common::{random_fields, Field, Rng};

// The kernels of gnn.rs under the macro, compiled once in the
// conformance crate rather than into every test binary.
use tiga_conformance::gnn;

#[allow(clippy::all)]
mod gnn_half {
    use tiga::message_passing;
    include!("../../examples/kernels/gnn_half.rs");
}

/// Unit roundoff of a storage type (half the distance from 1 to the next
/// value).
fn unit_roundoff(t: FieldType) -> f64 {
    match t {
        FieldType::BF16 => 2f64.powi(-8),
        FieldType::F16 => 2f64.powi(-11),
        FieldType::F32 => 2f64.powi(-24),
        FieldType::F64 => 2f64.powi(-53),
    }
}

/// The field-value factors per term of each kernel with a closed bound
/// (see the module doc), forward and backward; `None`: held to the tight
/// bound only.
fn factors(name: &str) -> (Option<f64>, Option<f64>) {
    match name {
        "NeighborSum" | "Smoothing" | "VecSum" | "SageMean" | "GinSum" => (Some(1.0), Some(1.0)),
        "GcnNorm" => (Some(4.0), Some(3.0)),
        // A rounded value can tie with another and move a winner's gradient.
        "MaxPool" | "Top2Sum" => (Some(1.0), None),
        _ => (None, None),
    }
}

fn graphs(rng: &mut Rng) -> Vec<(&'static str, Graph)> {
    let mut random = |ns: usize, nd: usize, ne: usize| {
        let (mut src, mut dst) = common::random_edges(rng, ns, nd - 1, ne);
        src.extend([0, src[0]]);
        dst.extend([0, dst[0]]); // a self loop and a multi-edge
        Graph::from_edges(ns, nd, &src, &dst).expect("valid graph")
    };
    vec![
        ("random", random(40, 40, 160)),
        ("bipartite-sparse", random(13, 29, 20)),
        ("one-node-empty", Graph::from_edges(1, 1, &[], &[]).expect("valid")),
        ("stencil", Graph::stencil_2d_4(5, 7).expect("valid")),
    ]
}

fn tensors(fields: &[Field], ty: FieldType, abs: bool) -> Vec<Tensor> {
    fields
        .iter()
        .map(|(_, _, shape, data)| {
            let v: Vec<f64> = data.iter().map(|x| if abs { x.abs() } else { *x }).collect();
            Tensor::from_f64(shape.clone(), v).expect("shape").converted(ty)
        })
        .collect()
}

fn inputs<'a>(fields: &[Field], ts: &'a [Tensor]) -> Inputs<'a> {
    let mut i = Inputs::new();
    for ((role, name, _, _), t) in fields.iter().zip(ts) {
        i = i.with_role(*role, name, t);
    }
    i
}

fn outputs(o: &tiga::Outputs) -> Vec<(String, FieldType, Vec<f64>)> {
    o.items.iter().map(|(n, t)| (n.clone(), t.field_type(), t.to_f64_vec())).collect()
}

/// Forward and backward of `k` on `g` with every field stored as `ty`.
fn check(k: &Kernel, g: &Graph, gname: &str, f: usize, ty: FieldType, rng: &mut Rng) {
    let u = unit_roundoff(ty);
    let (m_fwd, m_bwd) = factors(k.name());
    let fields = random_fields(k, g, f, || rng.unit() * 2.0 - 1.0);
    let half = tensors(&fields, ty, false);
    let full32 = tensors(&fields, FieldType::F32, false);
    let abs64 = tensors(&fields, FieldType::F64, true);
    let what = |name: &str| format!("{} on {gname}, F={f}, {ty}: {name}", k.name());

    // Forward.
    let got = k.run(g, &inputs(&fields, &half)).unwrap_or_else(|e| panic!("{}: {e}", what("run")));
    let want = k.run_reference(g, &inputs(&fields, &half)).expect("reference");
    let f32_run = k.run(g, &inputs(&fields, &full32)).expect("f32 run");
    let abs_ref = k.run_reference(g, &inputs(&fields, &abs64)).expect("reference on |x|");
    let (got, want, f32_run, abs_ref) = (outputs(&got), outputs(&want), outputs(&f32_run), outputs(&abs_ref));
    for (o, (name, out_ty, x)) in got.iter().enumerate() {
        let (_, _, y) = &want[o];
        let u_out = if out_ty.is_half() { unit_roundoff(*out_ty) } else { 0.0 };
        for (i, (a, b)) in x.iter().zip(y).enumerate() {
            let tight = u_out * b.abs() + 1e-5 * b.abs().max(1.0);
            assert!((a - b).abs() <= tight, "{}[{i}]: got {a}, reference on the rounded inputs {b}", what(name));
            if let Some(m) = m_fwd {
                let r = abs_ref[o].2[i];
                let c = f32_run[o].2[i];
                let loose = m * u * (1.0 + u).powf(m) * r + tight + 1e-5 * c.abs().max(1.0);
                assert!((a - c).abs() <= loose, "{}[{i}]: got {a}, f32 on the unrounded inputs {c} (bound {loose})", what(name));
            }
        }
    }

    // Backward, with random f32 cotangents.
    let shapes = k.output_shapes(g, &inputs(&fields, &half)).expect("shapes");
    let cots: Vec<Tensor> = shapes
        .iter()
        .map(|(_, s)| {
            let n: usize = s.iter().product();
            Tensor::from_f32(s.clone(), (0..n).map(|_| (rng.unit() * 2.0 - 1.0) as f32).collect()).expect("cot")
        })
        .collect();
    let abs_cots: Vec<Tensor> = cots
        .iter()
        .map(|t| Tensor::from_f64(t.shape().to_vec(), t.to_f64_vec().iter().map(|x| x.abs()).collect()).expect("cot"))
        .collect();
    let views =
        |ts: &'_ [Tensor]| -> Vec<(String, Tensor)> { shapes.iter().zip(ts).map(|((n, _), t)| (n.clone(), t.clone())).collect() };
    let (cv, acv) = (views(&cots), views(&abs_cots));
    let cot_v: Vec<(&str, tiga::TensorView<'_>)> = cv.iter().map(|(n, t)| (n.as_str(), t.view())).collect();
    let abs_v: Vec<(&str, tiga::TensorView<'_>)> = acv.iter().map(|(n, t)| (n.as_str(), t.view())).collect();
    let gh = k.vjp(g, &inputs(&fields, &half), &cot_v).unwrap_or_else(|e| panic!("{}: {e}", what("vjp")));
    let gr = k.vjp_reference(g, &inputs(&fields, &half), &cot_v).expect("vjp reference");
    let g32 = k.vjp(g, &inputs(&fields, &full32), &cot_v).expect("vjp f32");
    let gabs = k.vjp_reference(g, &inputs(&fields, &abs64), &abs_v).expect("vjp reference on |x|");
    for (role, name, _, _) in &fields {
        let a = gh.get(*role, name).expect("gradient");
        // A half field's gradient is written in its type.
        assert_eq!(a.field_type(), ty, "{}", what(name));
        let (a, b) = (a.to_f64_vec(), gr.get(*role, name).expect("gradient").to_f64_vec());
        let (c, r) =
            (g32.get(*role, name).expect("gradient").to_f64_vec(), gabs.get(*role, name).expect("gradient").to_f64_vec());
        for i in 0..a.len() {
            let tight = u * b[i].abs() + 1e-4 * b[i].abs().max(1.0);
            assert!((a[i] - b[i]).abs() <= tight, "{} gradient [{i}]: got {}, reference {}", what(name), a[i], b[i]);
            if let Some(m) = m_bwd {
                let loose = m * u * (1.0 + u).powf(m) * r[i] + tight + 1e-4 * c[i].abs().max(1.0);
                assert!(
                    (a[i] - c[i]).abs() <= loose,
                    "{} gradient [{i}]: got {}, f32 on the unrounded inputs {} (bound {loose})",
                    what(name),
                    a[i],
                    c[i]
                );
            }
        }
    }
}

/// Every kernel of gnn.rs, under the macro.
fn macro_kernels() -> Vec<&'static Kernel> {
    vec![
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
    ]
}

#[test]
fn macro_kernels_with_half_fields_match_the_reference() {
    let mut rng = Rng(0x4a1f_0001);
    for (gname, g) in graphs(&mut rng) {
        for k in macro_kernels() {
            for f in [3usize, 8, 64] {
                for ty in [FieldType::BF16, FieldType::F16] {
                    check(k, &g, gname, f, ty, &mut rng);
                }
            }
        }
    }
}

#[test]
fn kernel_file_kernels_with_half_fields_match_the_reference() {
    let kernels = Kernel::all_from_source(include_str!("../../examples/kernels/gnn.rs")).expect("kernel file compiles");
    let mut rng = Rng(0x4a1f_0002);
    for (gname, g) in graphs(&mut rng).into_iter().take(2) {
        for k in &kernels {
            for ty in [FieldType::BF16, FieldType::F16] {
                check(k, &g, gname, 8, ty, &mut rng);
            }
        }
    }
}

#[test]
fn half_declared_kernels_store_outputs_at_half_width() {
    let file = Kernel::all_from_source(include_str!("../../examples/kernels/gnn_half.rs")).expect("kernel file compiles");
    let macro_kernels = [
        gnn_half::HalfVecSum::kernel(),
        gnn_half::HalfGcnNorm::kernel(),
        gnn_half::HalfMaxPool::kernel(),
        gnn_half::HalfGatAttention::kernel(),
    ];
    let mut rng = Rng(0x4a1f_0003);
    let (_, g) = graphs(&mut rng).swap_remove(0);
    for k in macro_kernels.into_iter().chain(&file) {
        // Fields given as declared: the declared half ones at half width.
        let declared: Vec<FieldType> = k.fields().iter().map(|f| f.declared).collect();
        let fields = random_fields(k, &g, 16, || rng.unit() * 2.0 - 1.0);
        let ts: Vec<Tensor> = fields
            .iter()
            .zip(&declared)
            .map(|((_, _, s, d), t)| Tensor::from_f64(s.clone(), d.clone()).expect("shape").converted(*t))
            .collect();
        let got = k.run(&g, &inputs(&fields, &ts)).expect("run");
        let want = k.run_reference(&g, &inputs(&fields, &ts)).expect("reference");
        let f32s: Vec<Tensor> = ts.iter().map(|t| t.converted(FieldType::F32)).collect();
        let full = k.run(&g, &inputs(&fields, &f32s)).expect("f32 run");
        let out_decl = match k.name() {
            "HalfVecSum" | "HalfNeighborSum" | "HalfGinSum" | "HalfTop2Sum" => FieldType::F32,
            "HalfGcnNorm" | "HalfMaxPool" | "HalfSmoothing" | "HalfEdgeGate" => FieldType::BF16,
            "HalfGatAttention" | "HalfSageMean" => FieldType::F16,
            other => panic!("no declared output type for {other}"),
        };
        for (((name, a), (_, b)), (_, c)) in got.items.iter().zip(&want.items).zip(&full.items) {
            assert_eq!(a.field_type(), out_decl, "{} output {name}", k.name());
            let u = if out_decl.is_half() { unit_roundoff(out_decl) } else { 0.0 };
            for (i, (x, y)) in a.to_f64_vec().iter().zip(b.to_f64_vec()).enumerate() {
                assert!((x - y).abs() <= u * y.abs() + 1e-5 * y.abs().max(1.0), "{} {name}[{i}]: {x} vs {y}", k.name());
            }
            // The f32 call on the same (widened) values rounds to the same
            // half outputs: the stored output is the f32 result rounded once.
            if out_decl.is_half() {
                assert_eq!(&c.converted(out_decl), a, "{} output {name}", k.name());
            }
        }
    }
}

/// Every kernel of gnn.rs declared with half fields (gnn_half.rs), given
/// tensors of the declared types: the macro's ahead-of-time variant runs
/// (`Backend::Aot` refuses a call it has none for), forward and backward,
/// within the tight bound of the f64 reference on the same stored values.
/// Where the forward is elementwise per lane (no dot product, no
/// exponential), its outputs are the JIT's bits: both back ends widen and
/// round with `half_bits` and add in edge order. (A gradient's sum over
/// lanes, such as GcnNorm's `dcs`, is added in another order by the JIT's
/// vector lanes, so it is held to the bound only.)
#[test]
fn declared_half_kernels_run_ahead_of_time_within_the_bound() {
    let kernels = [
        gnn_half::HalfNeighborSum::kernel(),
        gnn_half::HalfSmoothing::kernel(),
        gnn_half::HalfVecSum::kernel(),
        gnn_half::HalfGcnNorm::kernel(),
        gnn_half::HalfSageMean::kernel(),
        gnn_half::HalfMaxPool::kernel(),
        gnn_half::HalfGinSum::kernel(),
        gnn_half::HalfGatAttention::kernel(),
        gnn_half::HalfTop2Sum::kernel(),
        gnn_half::HalfEdgeGate::kernel(),
    ];
    let aot = tiga::Schedule::new().backend(tiga::Backend::Aot);
    let jit = tiga::Schedule::new().backend(tiga::Backend::Jit);
    let mut rng = Rng(0x4a1f_0021);
    let mut checked = 0usize;
    for (gname, g) in graphs(&mut rng).into_iter().take(2) {
        for k in kernels {
            let declared: Vec<FieldType> = k.fields().iter().map(|f| f.declared).collect();
            assert!(declared.iter().any(|t| t.is_half()), "{} declares a half field", k.name());
            let same_bits = !matches!(k.name(), "HalfGatAttention" | "HalfEdgeGate");
            for f in [1usize, 8, 64] {
                let what = format!("{} on {gname}, F={f}", k.name());
                let fields = random_fields(k, &g, f, || rng.unit() * 2.0 - 1.0);
                let ts: Vec<Tensor> = fields
                    .iter()
                    .zip(&declared)
                    .map(|((_, _, s, d), t)| Tensor::from_f64(s.clone(), d.clone()).expect("shape").converted(*t))
                    .collect();
                let ins = inputs(&fields, &ts);
                let got = k.run_with(&g, &ins, &aot).unwrap_or_else(|e| panic!("{what}: ahead of time: {e}"));
                let want = k.run_reference(&g, &ins).expect("reference");
                let by_jit = k.run_with(&g, &ins, &jit).expect("jit");
                for (((name, a), (_, b)), (_, c)) in got.items.iter().zip(&want.items).zip(&by_jit.items) {
                    let u = if a.field_type().is_half() { unit_roundoff(a.field_type()) } else { 0.0 };
                    for (i, (x, y)) in a.to_f64_vec().iter().zip(b.to_f64_vec()).enumerate() {
                        let tight = u * y.abs() + 1e-5 * y.abs().max(1.0);
                        assert!((x - y).abs() <= tight, "{what}: {name}[{i}]: ahead of time {x}, reference {y}");
                    }
                    if same_bits {
                        assert_eq!(a, c, "{what}: {name}: ahead of time against the JIT");
                    }
                }
                // Backward, with random f32 cotangents.
                let shapes = k.output_shapes(&g, &ins).expect("shapes");
                let cots: Vec<(String, Tensor)> = shapes
                    .iter()
                    .map(|(n, s)| {
                        let len: usize = s.iter().product();
                        let v = (0..len).map(|_| (rng.unit() * 2.0 - 1.0) as f32).collect();
                        (n.clone(), Tensor::from_f32(s.clone(), v).expect("cot"))
                    })
                    .collect();
                let cot_v: Vec<(&str, tiga::TensorView<'_>)> = cots.iter().map(|(n, t)| (n.as_str(), t.view())).collect();
                let ga = k.vjp_with(&g, &ins, &cot_v, &aot).unwrap_or_else(|e| panic!("{what}: vjp ahead of time: {e}"));
                let gr = k.vjp_reference(&g, &ins, &cot_v).expect("vjp reference");
                for ((role, name, _, _), t) in fields.iter().zip(&declared) {
                    let a = ga.get(*role, name).expect("gradient");
                    assert_eq!(a.field_type(), if t.is_half() { *t } else { FieldType::F32 }, "{what}: d{name}");
                    let u = if t.is_half() { unit_roundoff(*t) } else { 0.0 };
                    let b = gr.get(*role, name).expect("gradient").to_f64_vec();
                    for (i, (x, y)) in a.to_f64_vec().iter().zip(&b).enumerate() {
                        let tight = u * y.abs() + 1e-4 * y.abs().max(1.0);
                        assert!((x - y).abs() <= tight, "{what}: d{name}[{i}]: ahead of time {x}, reference {y}");
                    }
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 2 * kernels.len() * 3);
    // `explain` names the declared storage the ahead-of-time variants have.
    let text = gnn_half::HalfGcnNorm::kernel().explain();
    assert!(text.contains("with fields stored as declared (src.h: f16, edge.w: f16, out: bf16) for widths [1]"), "{text}");
}

#[test]
fn half_fields_are_refused_where_they_do_not_run() {
    let k = gnn::VecSum::kernel();
    let g = Graph::from_edges(3, 3, &[0, 1, 2], &[1, 2, 0]).expect("valid");
    let h = Tensor::from_f64(vec![3, 4], (0..12).map(f64::from).collect()).expect("shape");
    let h16 = h.converted(FieldType::BF16);
    // Mixing a half field with an f64 one: the call computes in f32 or f64.
    let gcn = gnn::GcnNorm::kernel();
    let cs = Tensor::from_f64(vec![3], vec![1.0; 3]).expect("shape");
    let cd = cs.clone();
    let w = cs.clone();
    let err = gcn.run(&g, &Inputs::new().src("h", &h16).src("cs", &cs).dst("cd", &cd).edge("w", &w)).expect_err("mixed");
    assert!(err.to_string().contains("is f64, but `h` is bf16"), "{err}");
    // The ahead-of-time variants store fields as the kernel declares them
    // (VecSum: f32); a bf16 `h` has none, and `Backend::Aot` says so.
    let aot = tiga::Schedule::new().backend(tiga::Backend::Aot);
    let err = k.run_with(&g, &Inputs::new().src("h", &h16), &aot).expect_err("no aot variant");
    assert!(err.to_string().contains("half-width storage (src.h: bf16)"), "{err}");
    // Written to a .gfg: refused (the format stores f32 and f64).
    let dir = tempfile::tempdir().expect("tempdir");
    let err = tiga::runtime::storage::GfgWriter::new(&g)
        .field(tiga::runtime::storage::FieldRole::Src, "h", &h16)
        .save(dir.path().join("g.gfg"))
        .expect_err("half field in a .gfg");
    assert!(err.to_string().contains("bf16"), "{err}");
    // In memory it runs, and an integer-valued bf16 field sums exactly.
    let out = k.run(&g, &Inputs::new().src("h", &h16)).expect("run");
    assert_eq!(out["out"].as_f32(), Some(&[8.0f32, 9.0, 10.0, 11.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0][..]));
}

/// A renumbered call moves half fields in at half width and gives the
/// plain call's bits, forward and backward (renumbering keeps each row's
/// edges in their order).
#[test]
fn renumbered_half_fields_give_the_plain_bits() {
    let mut rng = Rng(0x4a1f_0011);
    let (n, f) = (300, 8);
    let (src, dst) = common::random_edges(&mut rng, n, n, 2400);
    let g = Graph::from_edges(n, n, &src, &dst).expect("valid graph");
    let h: Vec<f32> = (0..n * f).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
    let cot: Vec<f32> = (0..n * f).map(|i| ((i * 13 % 29) as f32 - 14.0) / 3.0).collect();
    let cot = Tensor::from_f32(vec![n, f], cot).expect("shape");
    for ty in [FieldType::BF16, FieldType::F16] {
        let h = Tensor::from_f32(vec![n, f], h.clone()).expect("shape").converted(ty);
        for k in [gnn::VecSum::kernel(), gnn::MaxPool::kernel()] {
            let inputs = Inputs::new().src("h", &h);
            let plain = k.run(&g, &inputs).expect("plain run");
            let plain_g = k.vjp(&g, &inputs, &[("out", cot.view())]).expect("plain vjp");
            for method in [tiga::Renumber::Degree, tiga::Renumber::Rcm, tiga::Renumber::Cluster] {
                let s = tiga::Schedule::new().renumber(method);
                let out = k.run_with(&g, &inputs, &s).expect("renumbered run");
                assert_eq!(out["out"].data().as_bytes(), plain["out"].data().as_bytes(), "{} {ty:?} {method:?}", k.name());
                let gr = k.vjp_with(&g, &inputs, &[("out", cot.view())], &s).expect("renumbered vjp");
                let (a, b) = (gr.src("h").expect("grad"), plain_g.src("h").expect("grad"));
                assert_eq!(a.field_type(), ty, "the gradient of a {ty:?} field is stored as one");
                assert_eq!(a.data().as_bytes(), b.data().as_bytes(), "{} {ty:?} {method:?} gradient", k.name());
            }
        }
    }
}
