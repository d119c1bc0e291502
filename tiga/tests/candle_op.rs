//! tiga kernels as candle operations: candle's backprop through them equals
//! tiga's VJP (bit for bit: the same stages run) and the f64 reference
//! interpreter's (to f32 rounding); one, two and three tensor arguments;
//! f64; a non-contiguous argument; bad calls are errors, not panics.

use std::sync::Arc;

use candle_core::{DType, Device, Tensor as CTensor, Var};
use tiga::candle::MessagePassing;
use tiga::{Graph, Role, Tensor, TensorView};
use tiga_conformance::gnn;

const N: usize = 7;
const F: usize = 3;

fn graph() -> Arc<Graph> {
    // A directed 7-node graph with a self loop, a repeated edge and an
    // isolated destination (node 6 has no in-edge).
    let src = [0u32, 1, 2, 3, 4, 5, 0, 2, 2, 3, 5, 1];
    let dst = [1u32, 2, 3, 4, 5, 0, 2, 2, 4, 1, 1, 1];
    Arc::new(Graph::from_edges(N, N, &src, &dst).expect("graph"))
}

fn values(n: usize, seed: f64) -> Vec<f32> {
    (0..n).map(|i| ((i as f64 * 0.37 + seed).sin() * 1.5) as f32).collect()
}

fn close(got: &[f32], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let tol = 1e-5 * w.abs().max(1.0);
        assert!((g as f64 - w).abs() <= tol, "{what}[{i}]: candle {g}, reference {w}");
    }
}

fn flat(t: &CTensor) -> Vec<f32> {
    t.flatten_all().expect("flatten").to_vec1::<f32>().expect("f32")
}

/// One argument (the features), the rest bound: the gradient candle's
/// backprop gives equals `Kernel::vjp` exactly and the reference closely.
#[test]
fn gcn_norm_gradient_equals_the_vjp() {
    let g = graph();
    let dev = Device::Cpu;
    let (cs, cd, w) = (values(N, 0.1), values(N, 0.2), values(g.num_edges(), 0.3));
    let k = gnn::GcnNorm::kernel();
    let op = MessagePassing::new(k, g.clone())
        .bind(Role::Src, "cs", Tensor::from_f32(vec![N], cs.clone()).expect("cs"))
        .bind(Role::Dst, "cd", Tensor::from_f32(vec![N], cd.clone()).expect("cd"))
        .bind(Role::Edge, "w", Tensor::from_f32(vec![w.len()], w.clone()).expect("w"));
    let hv = values(N * F, 0.4);
    let h = Var::from_vec(hv.clone(), (N, F), &dev).expect("h");
    let out = op.apply(&[(Role::Src, "h", h.as_tensor())]).expect("forward");
    let c = CTensor::from_vec(values(N * F, 0.5), (N, F), &dev).expect("c");
    let loss = (&out * &c).expect("mul").sum_all().expect("sum");
    let grads = loss.backward().expect("backward");
    let gh = flat(grads.get(h.as_tensor()).expect("gradient of h"));

    let inputs = tiga::Inputs::new()
        .src("h", TensorView::from_slice_f32(vec![N, F], &hv).expect("h"))
        .src("cs", &cs)
        .dst("cd", &cd)
        .edge("w", &w);
    let fwd = k.run(g.as_ref(), &inputs).expect("run");
    assert_eq!(flat(&out), fwd.f32("out").expect("out").to_vec(), "the forward is the kernel's");
    let cv = flat(&c);
    let cot = [("out", TensorView::from_slice_f32(vec![N, F], &cv).expect("cot"))];
    let direct = k.vjp(g.as_ref(), &inputs, &cot).expect("vjp");
    assert_eq!(gh, direct.src("h").expect("h").as_f32().expect("f32").to_vec(), "candle's gradient is tiga's VJP");
    let reference = k.vjp_reference(g.as_ref(), &inputs, &cot).expect("reference");
    close(&gh, &reference.src("h").expect("h").to_f64_vec(), "dh");
}

/// Three arguments (h, cs and w; cd bound): every gradient against the
/// reference; an argument that is a plain tensor (no variable reaches it)
/// gets no gradient.
#[test]
fn three_arguments_and_a_constant_one() {
    let g = graph();
    let dev = Device::Cpu;
    let k = gnn::GcnNorm::kernel();
    let cd = values(N, 0.6);
    let op = MessagePassing::new(k, g.clone()).bind(Role::Dst, "cd", Tensor::from_f32(vec![N], cd.clone()).expect("cd"));
    let (hv, csv, wv) = (values(N * F, 0.7), values(N, 0.8), values(g.num_edges(), 0.9));
    let h = Var::from_vec(hv.clone(), (N, F), &dev).expect("h");
    let w = Var::from_vec(wv.clone(), g.num_edges(), &dev).expect("w");
    let cs = CTensor::from_vec(csv.clone(), N, &dev).expect("cs");
    let out =
        op.apply(&[(Role::Src, "h", h.as_tensor()), (Role::Src, "cs", &cs), (Role::Edge, "w", w.as_tensor())]).expect("forward");
    let grads = out.sqr().expect("sqr").sum_all().expect("sum").backward().expect("backward");
    assert!(grads.get(&cs).is_none(), "a constant argument has no gradient");

    let inputs = tiga::Inputs::new()
        .src("h", TensorView::from_slice_f32(vec![N, F], &hv).expect("h"))
        .src("cs", &csv)
        .dst("cd", &cd)
        .edge("w", &wv);
    let o = flat(&out);
    let cot: Vec<f32> = o.iter().map(|v| 2.0 * v).collect();
    let reference = k
        .vjp_reference(g.as_ref(), &inputs, &[("out", TensorView::from_slice_f32(vec![N, F], &cot).expect("cot"))])
        .expect("reference");
    close(&flat(grads.get(h.as_tensor()).expect("dh")), &reference.src("h").expect("h").to_f64_vec(), "dh");
    close(&flat(grads.get(w.as_tensor()).expect("dw")), &reference.edge("w").expect("w").to_f64_vec(), "dw");
}

/// Two arguments, one of them a parameter (EdgeGate's gate vector), in f64,
/// the features given transposed (a non-contiguous layout).
#[test]
fn a_parameter_in_f64_through_a_transposed_argument() {
    let g = graph();
    let dev = Device::Cpu;
    let k = gnn::EdgeGate::kernel();
    let wv: Vec<f64> = values(g.num_edges(), 1.1).iter().map(|&v| v as f64).collect();
    let op = MessagePassing::new(k, g.clone()).bind(Role::Edge, "w", Tensor::from_f64(vec![wv.len()], wv.clone()).expect("w"));
    let hv: Vec<f64> = values(N * F, 1.2).iter().map(|&v| v as f64).collect();
    let pv: Vec<f64> = values(F, 1.3).iter().map(|&v| v as f64).collect();
    // Held as [F, N], used as its transpose [N, F].
    let ht: Vec<f64> = (0..F * N).map(|k| hv[(k % N) * F + k / N]).collect();
    let h_t = Var::from_vec(ht, (F, N), &dev).expect("h");
    let p = Var::from_vec(pv.clone(), F, &dev).expect("p");
    let h = h_t.as_tensor().t().expect("transpose");
    assert!(!h.is_contiguous());
    let out = op.apply(&[(Role::Src, "h", &h), (Role::Param, "p", p.as_tensor())]).expect("forward");
    assert_eq!(out.dtype(), DType::F64);
    let grads = out.sum_all().expect("sum").backward().expect("backward");

    let inputs =
        tiga::Inputs::new().src("h", TensorView::from_slice_f64(vec![N, F], &hv).expect("h")).edge("w", &wv).param("p", &pv);
    let fwd = k.run_reference(g.as_ref(), &inputs).expect("reference forward");
    let o: Vec<f64> = out.flatten_all().expect("flat").to_vec1().expect("f64");
    for (a, b) in o.iter().zip(fwd.tensor("out").expect("out").to_f64_vec()) {
        assert!((a - b).abs() <= 1e-12 * b.abs().max(1.0), "forward {a} vs reference {b}");
    }
    let grad = k.grad(g.as_ref(), &inputs, "out").expect("grad");
    let reference = k
        .vjp_reference(g.as_ref(), &inputs, &[("out", TensorView::from_slice_f64(vec![N, F], &[1.0; N * F]).expect("ones"))])
        .expect("reference");
    // The gradient of the transposed variable is the transpose of tiga's.
    let dht: Vec<f64> = grads.get(h_t.as_tensor()).expect("dh").flatten_all().expect("flat").to_vec1().expect("f64");
    let dh = grad.src("h").expect("h").to_f64_vec();
    let dh_ref = reference.src("h").expect("h").to_f64_vec();
    for (k, &v) in dht.iter().enumerate() {
        let i = (k % N) * F + k / N;
        assert_eq!(v, dh[i], "dh[{i}] is tiga's");
        assert!((v - dh_ref[i]).abs() <= 1e-12 * dh_ref[i].abs().max(1.0), "dh[{i}]: {v} vs reference {}", dh_ref[i]);
    }
    let dp: Vec<f64> = grads.get(p.as_tensor()).expect("dp").to_vec1().expect("f64");
    for (a, b) in dp.iter().zip(reference.param("p").expect("p").to_f64_vec()) {
        assert!((a - b).abs() <= 1e-12 * b.abs().max(1.0), "dp {a} vs reference {b}");
    }
}

/// Bad calls are candle errors carrying tiga's message, before any work.
#[test]
fn bad_calls_are_errors() {
    let g = graph();
    let dev = Device::Cpu;
    let k = gnn::VecSum::kernel();
    let op = MessagePassing::new(k, g.clone());
    let h = CTensor::zeros((N, F), DType::F32, &dev).expect("h");
    let half = h.to_dtype(DType::F16).expect("f16");
    let e = op.apply(&[(Role::Src, "h", &half)]).expect_err("f16");
    assert!(e.to_string().contains("f32 or f64"), "{e}");
    let e = op.apply(&[(Role::Src, "x", &h)]).expect_err("no such field");
    assert!(e.to_string().contains('h'), "{e}");
    let e = op.apply(&[]).expect_err("no argument");
    assert!(e.to_string().contains("1 to 3"), "{e}");
    let short = CTensor::zeros((N - 1, F), DType::F32, &dev).expect("short");
    let e = op.apply(&[(Role::Src, "h", &short)]).expect_err("wrong rows");
    assert!(e.to_string().contains(&format!("{N}")), "{e}");
    let e = op.clone().output("nope").apply(&[(Role::Src, "h", &h)]).expect_err("no such output");
    assert!(e.to_string().contains("nope"), "{e}");
}
