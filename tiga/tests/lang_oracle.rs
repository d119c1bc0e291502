//! `tiga::lang` as the naive oracle: realistic kernel bodies must type-check
//! against it exactly as users write them, and compute the textbook values.

use tiga::lang::*;

pub struct Src {
    pub h: Vector<f32>,
    pub cs: f32,
    pub a_src: f32,
}
pub struct Dst {
    pub cd: f32,
    pub a_dst: f32,
}
pub struct Edge {
    pub w: f32,
}
pub struct Params {
    pub p: Vector<f32>,
    pub w: Matrix<f32>,
}

fn e1(src: &Src, edge: &Edge) -> Vector<f32> {
    edge.w * src.cs * &src.h
}
fn n1(dst: &Dst, agg: Vector<f32>) -> Vector<f32> {
    dst.cd * agg
}
fn e2(src: &Src) -> Vector<f32> {
    relu(src.h.clone())
}
fn e3(src: &Src, dst: &Dst) -> (f32, Vector<f32>) {
    (leaky_relu(src.a_src + dst.a_dst, 0.2), src.h.clone())
}
fn e4(src: &Src, edge: &Edge, params: &Params) -> Vector<f32> {
    sigmoid(dot(&params.p, &src.h) + edge.w) * &src.h
}
fn n5(dst_h: &Vector<f32>, agg: Vector<f32>) -> Vector<f32> {
    1.1 * dst_h + agg
}
fn e6(src: &Src, params: &Params) -> Vector<f32> {
    matvec(&params.w, &src.h).tanh()
}
fn c7(a: (f32, f32), b: (f32, f32)) -> (f32, f32) {
    (max(a.0, b.0), max(min(a.0, b.0), max(a.1, b.1)))
}
fn e8(src: &Src) -> f32 {
    let t = src.cs * 2.0;
    if t > 1.0 {
        t.exp()
    } else {
        powi(t, 3) + sum(&src.h)
    }
}

// More shapes users write: methods, literals on either side, f64, refs.
fn e9(src: &Src) -> Vector<f32> {
    src.h.exp().max(0.5) + src.h.powi(2).relu() - src.h.sigmoid() / 2.0
}
fn e10(src: &Src, dst: &Dst) -> f32 {
    let s = (src.a_src + dst.a_dst).relu();
    let (a, b) = (s.sigmoid(), s.leaky_relu(0.1));
    max(a, 0.0) + min(1.0, b) + abs(-s) + sqrt(4.0_f32) + ln(1.0_f32) + tanh(0.0_f32)
}
fn e11(src: &Src) -> Vector<f32> {
    let v = -&src.h;
    max(&v, 0.0) + min(0.0, v.clone()) + max(&src.h, &v) + min(v, src.h.clone())
}
fn e12(src: &Src, params: &Params) -> f32 {
    src.h.sum() + src.h.dot(&params.p) + sum(src.h.clone()) + dot(src.h.clone(), &params.p)
}
fn e13(h: &Vector<f64>, w: f64) -> Vector<f64> {
    leaky_relu(w * h - 1.0, 0.01) + exp(h) + h.abs() + 2.0 / h
}
fn e14(src: &Src) -> Vector<f32> {
    if src.cs > 0.0 {
        sigmoid(&src.h)
    } else {
        -src.h.clone()
    }
}
fn id_top2() -> (f32, f32) {
    (f32::NEG_INFINITY, f32::NEG_INFINITY)
}
fn fin_top2(s: (f32, f32)) -> f32 {
    if s.0 == f32::NEG_INFINITY {
        0.0
    } else if s.1 == f32::NEG_INFINITY {
        s.0
    } else {
        s.0 + s.1
    }
}

fn v32(xs: &[f32]) -> Vector<f32> {
    Vector::new(xs.to_vec())
}

fn close32(a: f32, b: f32) -> bool {
    (a - b).abs() <= 1e-6 * (1.0 + a.abs().max(b.abs()))
}

#[track_caller]
fn assert_vclose(got: &Vector<f32>, want: &[f32]) {
    assert_eq!(got.len(), want.len(), "width of {got:?} vs {want:?}");
    for (i, (&g, &w)) in got.as_slice().iter().zip(want).enumerate() {
        assert!(close32(g, w), "element {i}: got {g}, want {w} ({got:?} vs {want:?})");
    }
}

fn src() -> Src {
    Src { h: v32(&[1.0, -2.0, 3.0]), cs: 0.5, a_src: -3.0 }
}
fn dst() -> Dst {
    Dst { cd: 2.0, a_dst: 1.0 }
}
fn params() -> Params {
    Params { p: v32(&[0.5, 1.0, -1.0]), w: Matrix::new(2, 3, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]) }
}

#[test]
fn scalar_functions() {
    assert_eq!(sigmoid(0.0_f32), 0.5);
    assert_eq!(sigmoid(0.0_f64), 0.5);
    assert!(close32(sigmoid(2.0_f32), 1.0 / (1.0 + (-2.0_f32).exp())));
    assert!(close32(leaky_relu(-2.0_f32, 0.2), -0.4));
    assert_eq!(leaky_relu(3.0_f32, 0.2), 3.0);
    assert_eq!(leaky_relu(0.0_f64, 0.2), 0.0);
    assert_eq!(relu(-1.5_f32), 0.0);
    assert_eq!(relu(1.5_f64), 1.5);
    assert_eq!(powi(2.0_f32, 3), 8.0);
    assert_eq!(powi(2.0_f64, -1), 0.5);
    assert_eq!(abs(-3.0_f32), 3.0);
    assert_eq!(sqrt(9.0_f64), 3.0);
    assert_eq!(exp(0.0_f32), 1.0);
    assert_eq!(ln(1.0_f64), 0.0);
    assert_eq!(tanh(0.0_f32), 0.0);
    assert_eq!(max(1.0_f32, 2.0), 2.0);
    assert_eq!(min(1.0_f32, 2.0), 1.0);
    // Literal-only calls fall back to f64, as in Rust.
    assert_eq!(max(1.0, 2.0), 2.0_f64);
    // Method forms on scalars (RealExt adds the three std lacks).
    assert_eq!(0.0_f32.sigmoid(), 0.5);
    assert_eq!((-1.0_f64).relu(), 0.0);
    assert!(close32((-2.0_f32).leaky_relu(0.2), -0.4));
}

#[test]
fn vector_arithmetic_and_broadcasting() {
    let a = v32(&[1.0, 2.0, 3.0]);
    let b = v32(&[4.0, 5.0, 6.0]);
    assert_eq!(&a + &b, v32(&[5.0, 7.0, 9.0]));
    assert_eq!(a.clone() - &b, v32(&[-3.0, -3.0, -3.0]));
    assert_eq!(&a * b.clone(), v32(&[4.0, 10.0, 18.0]));
    assert_eq!(b.clone() / a.clone(), v32(&[4.0, 2.5, 2.0]));
    assert_eq!(2.0 * &a, v32(&[2.0, 4.0, 6.0]));
    assert_eq!(&a * 2.0, v32(&[2.0, 4.0, 6.0]));
    assert_eq!(1.0 - a.clone(), v32(&[0.0, -1.0, -2.0]));
    assert_eq!(a.clone() - 1.0, v32(&[0.0, 1.0, 2.0]));
    assert_eq!(6.0 / &a, v32(&[6.0, 3.0, 2.0]));
    assert_eq!(&a / 2.0, v32(&[0.5, 1.0, 1.5]));
    assert_eq!(1.0 + &a, v32(&[2.0, 3.0, 4.0]));
    assert_eq!(-&a, v32(&[-1.0, -2.0, -3.0]));
    assert_eq!(-a.clone(), v32(&[-1.0, -2.0, -3.0]));

    let mut c = a.clone();
    c += &b;
    c *= 2.0;
    c -= a.clone();
    c /= 3.0;
    assert_vclose(&c, &[3.0, 4.0, 5.0]);

    assert_eq!(max(&a, 2.0), v32(&[2.0, 2.0, 3.0]));
    assert_eq!(min(2.0, a.clone()), v32(&[1.0, 2.0, 2.0]));
    assert_eq!(max(&a, &v32(&[3.0, 0.0, 3.0])), v32(&[3.0, 2.0, 3.0]));
    assert_eq!(a.max(2.5), v32(&[2.5, 2.5, 3.0]));
    assert_eq!(a.min(&b), a);
    assert_eq!(a.len(), 3);
    assert_eq!(a[1], 2.0);
    assert_eq!(a.as_slice(), &[1.0, 2.0, 3.0]);
    assert_eq!(Vector::from(vec![1.0_f32, 2.0, 3.0]), a);

    // f64 works the same way.
    let d = Vector::new(vec![1.0_f64, 4.0]);
    assert_eq!(0.5 * &d + 1.0, Vector::new(vec![1.5, 3.0]));
    assert_eq!(sqrt(&d), Vector::new(vec![1.0, 2.0]));
}

#[test]
fn elementwise_functions_on_vectors() {
    let v = v32(&[-2.0, 0.0, 2.0]);
    assert_eq!(relu(&v), v32(&[0.0, 0.0, 2.0]));
    assert_eq!(v.relu(), relu(v.clone()));
    assert_vclose(&leaky_relu(&v, 0.2), &[-0.4, 0.0, 2.0]);
    assert_vclose(&v.leaky_relu(0.2), &[-0.4, 0.0, 2.0]);
    assert_eq!(sigmoid(&v)[1], 0.5);
    assert_vclose(&v.sigmoid(), &[1.0 / (1.0 + 2.0_f32.exp()), 0.5, 1.0 / (1.0 + (-2.0_f32).exp())]);
    assert_eq!(abs(&v), v32(&[2.0, 0.0, 2.0]));
    assert_eq!(powi(&v, 2), v32(&[4.0, 0.0, 4.0]));
    assert_eq!(v.powi(3), v32(&[-8.0, 0.0, 8.0]));
    assert_vclose(&exp(&v), &[(-2.0_f32).exp(), 1.0, 2.0_f32.exp()]);
    assert_vclose(&v.tanh(), &[(-2.0_f32).tanh(), 0.0, 2.0_f32.tanh()]);
    assert_vclose(&ln(v32(&[1.0, 4.0])), &[0.0, 4.0_f32.ln()]);
    assert_eq!(v32(&[9.0, 16.0]).sqrt(), v32(&[3.0, 4.0]));
}

#[test]
fn reductions_and_matvec() {
    let a = v32(&[1.0, 2.0, 3.0]);
    let b = v32(&[4.0, 5.0, 6.0]);
    assert_eq!(sum(&a), 6.0);
    assert_eq!(sum(a.clone()), 6.0);
    assert_eq!(a.sum(), 6.0);
    assert_eq!(dot(&a, &b), 32.0);
    assert_eq!(dot(a.clone(), &b), 32.0);
    assert_eq!(a.dot(&b), 32.0);
    assert_eq!(a.dot(b.clone()), 32.0);

    // [[1 2 3] [4 5 6]] · [1 0 -1] = [-2, -2]; · [1 2 3] = [14, 32]
    let w = Matrix::new(2, 3, vec![1.0_f32, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let x = v32(&[1.0, 0.0, -1.0]);
    assert_eq!(matvec(&w, &x), v32(&[-2.0, -2.0]));
    assert_eq!(matvec(&w, a), v32(&[14.0, 32.0]));
    assert_eq!(w[(1, 2)], 6.0);
    assert_eq!(Matrix::from_rows(vec![vec![1.0_f32, 2.0, 3.0], vec![4.0, 5.0, 6.0]]), w);
}

#[test]
fn kernel_bodies_compute_expected_values() {
    let (s, d, e, p) = (src(), dst(), Edge { w: 3.0 }, params());

    // w · cs · h = 1.5 · [1, -2, 3]
    let m = e1(&s, &e);
    assert_vclose(&m, &[1.5, -3.0, 4.5]);
    assert_vclose(&n1(&d, m), &[3.0, -6.0, 9.0]);

    assert_eq!(e2(&s), v32(&[1.0, 0.0, 3.0]));

    // a_src + a_dst = -2 → -0.4
    let (score, value) = e3(&s, &d);
    assert!(close32(score, -0.4));
    assert_eq!(value, s.h);

    // dot(p, h) = 0.5 - 2 - 3 = -4.5; + w = -1.5
    let g = 1.0 / (1.0 + 1.5_f32.exp());
    assert_vclose(&e4(&s, &e, &p), &[g, -2.0 * g, 3.0 * g]);

    assert_vclose(&n5(&v32(&[1.0, 2.0]), v32(&[0.5, 0.5])), &[1.6, 2.7]);

    // W·h = [1-4+9, 4-10+18] = [6, 12]
    assert_vclose(&e6(&s, &p), &[6.0_f32.tanh(), 12.0_f32.tanh()]);

    // Top-2 monoid: combine keeps the two largest.
    let folded = [5.0_f32, 1.0, 7.0, 3.0].iter().map(|&x| (x, f32::NEG_INFINITY)).fold(id_top2(), c7);
    assert_eq!(folded, (7.0, 5.0));
    assert_eq!(fin_top2(folded), 12.0);
    assert_eq!(fin_top2(id_top2()), 0.0);
    assert_eq!(fin_top2(c7(id_top2(), (2.0, f32::NEG_INFINITY))), 2.0);

    // cs·2 = 1, not > 1: 1^3 + (1 - 2 + 3) = 3
    assert_eq!(e8(&s), 3.0);
    let hot = Src { cs: 1.0, ..src() };
    assert!(close32(e8(&hot), 2.0_f32.exp()));

    let h = &s.h;
    let want9: Vec<f32> = h.iter().map(|&x| x.exp().max(0.5) + (x * x).max(0.0) - 1.0 / (1.0 + (-x).exp()) / 2.0).collect();
    assert_vclose(&e9(&s), &want9);

    // s = relu(-2) = 0: 0.5 + min(1, 0) + 0 + 2 + 0 + 0
    assert!(close32(e10(&s, &d), 2.5));

    // v = -h = [-1, 2, -3]
    // max(v,0) = [0,2,0]; min(0,v) = [-1,0,-3]; max(h,v) = [1,2,3]; min(v,h) = [-1,-2,-3]
    assert_eq!(e11(&s), v32(&[-1.0, 2.0, -3.0]));

    // 2 + (-4.5) + 2 + (-4.5)
    assert_eq!(e12(&s, &p), -5.0);

    let h64 = Vector::new(vec![1.0_f64, 2.0]);
    let want13 = [1.0 + 1.0_f64.exp() + 1.0 + 2.0, 3.0 + 2.0_f64.exp() + 2.0 + 1.0];
    let got13 = e13(&h64, 2.0);
    for (g, w) in got13.as_slice().iter().zip(want13) {
        assert!((g - w).abs() < 1e-12, "{got13:?} vs {want13:?}");
    }
    // 2·0.25 - 1 = -0.5 → leaky -0.005; + e^0.25 + 0.25 + 2/0.25
    let got = e13(&Vector::new(vec![0.25_f64]), 2.0);
    assert!((got[0] - (-0.005 + 0.25_f64.exp() + 0.25 + 8.0)).abs() < 1e-12, "{got:?}");

    assert_eq!(e14(&s), sigmoid(&s.h));
    assert_eq!(e14(&Src { cs: -1.0, ..src() }), v32(&[-1.0, 2.0, -3.0]));
}

#[test]
#[should_panic(expected = "width 3, right has width 2")]
fn mismatched_widths_panic() {
    let _ = v32(&[1.0, 2.0, 3.0]) + v32(&[1.0, 2.0]);
}

#[test]
#[should_panic(expected = "2x3 Matrix<f32> with a vector of width 2")]
fn matvec_width_mismatch_panics() {
    let w = Matrix::new(2, 3, vec![0.0_f32; 6]);
    let _ = matvec(&w, v32(&[1.0, 2.0]));
}

#[test]
#[should_panic(expected = "needs 2x2 values, got 3")]
fn matrix_new_checks_len() {
    let _ = Matrix::new(2, 2, vec![0.0_f64; 3]);
}
