//! The reverse-mode rules of `adjoint::vjp`, each checked against central
//! finite differences of the reference interpreter in f64, and every region
//! they produce checked by the IR verifier.

use tiga_compiler::adjoint::{vjp_region, AdjointError, RegionVjp};
use tiga_compiler::interp::{eval_region, InterpError, Value};
use tiga_compiler::ir::{
    verify, BinOp, CmpOp, DType, FieldDecl, FieldId, Kernel, Op, OutputDecl, Properties, Reducer, ReducerKind, Region, Role,
    Span, Type, UnOp, ValueId, WidthDecl, WidthId,
};

const W: usize = 3;
const F: Type = Type::Vector(WidthId(0));
const S: Type = Type::Scalar;
const H: f64 = 1e-6;
const TOL: f64 = 1e-6;

// ---------------------------------------------------------------- building

fn elementwise(a: Type, b: Type) -> Type {
    match (a, b) {
        (Type::Scalar, Type::Scalar) => Type::Scalar,
        (Type::Scalar, Type::Vector(w)) | (Type::Vector(w), Type::Scalar) => Type::Vector(w),
        (Type::Vector(x), Type::Vector(y)) if x == y => Type::Vector(x),
        _ => panic!("no elementwise type for {a:?}, {b:?}"),
    }
}

/// A region under construction, typed as the verifier types it.
struct B {
    r: Region,
}

impl B {
    fn new(inputs: &[Type]) -> B {
        B { r: Region::new(inputs.to_vec()) }
    }
    fn push(&mut self, op: Op, ty: Type) -> ValueId {
        self.r.push(op, ty, Span { line: 1, col: 0 })
    }
    fn ty(&self, v: ValueId) -> Type {
        self.r.ty(v)
    }
    fn input(&mut self, k: u32) -> ValueId {
        let t = self.r.inputs[k as usize];
        self.push(Op::Input(k), t)
    }
    fn c(&mut self, x: f64) -> ValueId {
        self.push(Op::Const(x), S)
    }
    fn un(&mut self, u: UnOp, a: ValueId) -> ValueId {
        let t = self.ty(a);
        self.push(Op::Unary(u, a), t)
    }
    fn bin(&mut self, o: BinOp, a: ValueId, b: ValueId) -> ValueId {
        let t = match o {
            BinOp::And | BinOp::Or => self.ty(a),
            _ => elementwise(self.ty(a), self.ty(b)),
        };
        self.push(Op::Binary(o, a, b), t)
    }
    fn powi(&mut self, a: ValueId, n: i32) -> ValueId {
        let t = self.ty(a);
        self.push(Op::Powi(a, n), t)
    }
    fn cmp(&mut self, o: CmpOp, a: ValueId, b: ValueId) -> ValueId {
        let t = match elementwise(self.ty(a), self.ty(b)) {
            Type::Vector(w) => Type::Mask(w),
            _ => Type::Bool,
        };
        self.push(Op::Cmp(o, a, b), t)
    }
    fn select(&mut self, c: ValueId, a: ValueId, b: ValueId) -> ValueId {
        let t = match self.ty(c) {
            Type::Mask(w) => Type::Vector(w),
            _ => elementwise(self.ty(a), self.ty(b)),
        };
        self.push(Op::Select(c, a, b), t)
    }
    fn sum(&mut self, a: ValueId) -> ValueId {
        self.push(Op::Sum(a), S)
    }
    fn dot(&mut self, a: ValueId, b: ValueId) -> ValueId {
        self.push(Op::Dot(a, b), S)
    }
    fn bcast(&mut self, a: ValueId) -> ValueId {
        self.push(Op::Broadcast(a, WidthId(0)), F)
    }
    fn done(mut self, outs: &[ValueId]) -> Region {
        self.r.outputs = outs.to_vec();
        self.r
    }
}

// ---------------------------------------------------------------- values

#[path = "common/rng.rs"]
mod rng;
use rng::Rng;

/// Values for the rules' checks, drawn from the tests' one generator.
trait Draw {
    fn range(&mut self, lo: f64, hi: f64) -> f64;
    fn away(&mut self) -> f64;
    fn value(&mut self, t: Type, positive: bool) -> Value;
}

impl Draw for Rng {
    fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
    /// A value in ±[0.2, 2], away from the kinks at 0.
    fn away(&mut self) -> f64 {
        let m = self.range(0.2, 2.0);
        if self.unit() < 0.5 {
            -m
        } else {
            m
        }
    }
    fn value(&mut self, t: Type, positive: bool) -> Value {
        let mut one = || if positive { self.range(0.5, 2.0) } else { self.away() };
        match t {
            Type::Scalar => Value::Scalar(one()),
            Type::Vector(_) => Value::Vector((0..W).map(|_| one()).collect()),
            _ => panic!("no random {t:?}"),
        }
    }
}

fn lanes(v: &Value) -> Vec<f64> {
    match v {
        Value::Scalar(x) => vec![*x],
        Value::Vector(x) => x.clone(),
        other => panic!("not a number: {other:?}"),
    }
}

fn with_lane(v: &Value, l: usize, x: f64) -> Value {
    match v {
        Value::Scalar(_) => Value::Scalar(x),
        Value::Vector(a) => {
            let mut a = a.clone();
            a[l] = x;
            Value::Vector(a)
        }
        other => panic!("not a number: {other:?}"),
    }
}

fn eval(r: &Region, vals: &[Value]) -> Vec<Value> {
    eval_region(r, &[W], &mut |op| match op {
        Op::Input(k) => Ok(vals[*k as usize].clone()),
        _ => Err(InterpError::Internal(format!("unexpected leaf {op:?}"))),
    })
    .expect("evaluation")
}

/// ⟨seed, outputs⟩, a scalar seed of a vector output meaning broadcast.
fn contract(outs: &[Value], seeds: &[Option<Value>]) -> f64 {
    outs.iter()
        .zip(seeds)
        .map(|(o, s)| match s {
            None => 0.0,
            Some(s) => {
                let (o, s) = (lanes(o), lanes(s));
                if s.len() == 1 {
                    o.iter().sum::<f64>() * s[0]
                } else {
                    o.iter().zip(&s).map(|(a, b)| a * b).sum()
                }
            }
        })
        .sum()
}

// ---------------------------------------------------------------- verifying

/// Run the real verifier over `r` by making it the `node` region of a
/// minimal kernel: one source vector field binds the width, the edge region
/// yields one message per input of `r` (a field read or a constant), and the
/// reducer sums them.
fn verify_region(r: &Region) {
    let sp = Span::default();
    let mut edge = Region::new(vec![]);
    for t in &r.inputs {
        let v = match t {
            Type::Vector(_) => edge.push(Op::Field(FieldId(0)), F, sp),
            _ => edge.push(Op::Const(0.0), S, sp),
        };
        edge.outputs.push(v);
    }
    let k = Kernel {
        name: "vjp".into(),
        span: sp,
        fields: vec![FieldDecl { name: "x".into(), role: Role::Src, ty: F, declared: DType::F64.into(), span: sp }],
        widths: vec![WidthDecl { name: "F".into(), bound_by: (FieldId(0), 1) }],
        outputs: r.output_types().iter().enumerate().map(|(i, t)| OutputDecl::new(format!("o{i}"), *t, Role::Dst)).collect(),
        edge,
        reducer: Reducer {
            kind: ReducerKind::Sum,
            span: sp,
            declared: Properties::default(),
            proved: None,
            class: None,
            identity: None,
            combine: None,
            finalize: None,
        },
        node: Some(r.clone()),
        segment: None,
    };
    if let Err(e) = verify(&k) {
        panic!("{e}\n{r:#?}");
    }
}

// ---------------------------------------------------------------- the check

/// The VJP region of `src`: inputs are `src`'s inputs then the seeds;
/// outputs are the cotangents of `src`'s inputs (zero when none flowed).
fn build_vjp(src: &Region, seed_types: &[Option<Type>]) -> (Region, RegionVjp) {
    let n = src.inputs.len() as u32;
    let mut inputs = src.inputs.clone();
    inputs.extend(seed_types.iter().flatten());
    let mut out = Region::new(inputs);
    let mut seeds = Vec::new();
    let mut next = n;
    for t in seed_types {
        seeds.push(t.map(|t| {
            next += 1;
            out.push(Op::Input(next - 1), t, Span::default())
        }));
    }
    let vjp = vjp_region(src, &mut out, |_| None, &seeds).expect("vjp");
    assert_eq!(vjp.primal.len(), src.nodes.len());
    for k in 0..n {
        let v = match vjp.leaf(&Op::Input(k)) {
            Some(v) => v,
            None => {
                let z = out.push(Op::Const(0.0), S, Span::default());
                match src.inputs[k as usize] {
                    Type::Vector(w) => out.push(Op::Broadcast(z, w), Type::Vector(w), Span::default()),
                    _ => z,
                }
            }
        };
        assert_eq!(out.ty(v), src.inputs[k as usize], "cotangent of input {k} has the input's type");
        out.outputs.push(v);
    }
    verify_region(src);
    verify_region(&out);
    (out, vjp)
}

/// Compare the VJP of `src` with central differences at random points and
/// random seeds (`positive`: inputs in [0.5, 2], else ±[0.2, 2]).
fn check(name: &str, src: &Region, positive: bool) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (name.len() as u64 * 0x1000_0000_01B3));
    for trial in 0..4 {
        // Seeds: the output's type; for vector outputs, every other trial a
        // broadcast scalar; the last trial drops the first seed (None).
        let seed_types: Vec<Option<Type>> = src
            .output_types()
            .iter()
            .enumerate()
            .map(|(k, t)| {
                if trial == 3 && k == 0 && src.outputs.len() > 1 {
                    None
                } else if matches!(t, Type::Vector(_)) && trial % 2 == 1 {
                    Some(S)
                } else {
                    Some(*t)
                }
            })
            .collect();
        let (vjp, _) = build_vjp(src, &seed_types);
        let x: Vec<Value> = src.inputs.iter().map(|t| rng.value(*t, positive)).collect();
        let seeds: Vec<Option<Value>> = seed_types.iter().map(|t| t.map(|t| rng.value(t, false))).collect();
        let mut all = x.clone();
        all.extend(seeds.iter().flatten().cloned());
        let got = eval(&vjp, &all);
        for (k, xk) in x.iter().enumerate() {
            let g = lanes(&got[k]);
            for (l, &xl) in lanes(xk).iter().enumerate() {
                let mut xp = x.clone();
                xp[k] = with_lane(xk, l, xl + H);
                let mut xm = x.clone();
                xm[k] = with_lane(xk, l, xl - H);
                let fd = (contract(&eval(src, &xp), &seeds) - contract(&eval(src, &xm), &seeds)) / (2.0 * H);
                let err = (g[l] - fd).abs() / fd.abs().max(g[l].abs()).max(1.0);
                assert!(
                    err <= TOL,
                    "{name}, trial {trial}: d/d input {k}[{l}]: vjp {} vs finite difference {fd} (rel. error {err:e})\nat {x:?}, seeds {seeds:?}",
                    g[l]
                );
            }
        }
    }
}

/// One binary op at every operand shape pair.
fn shapes() -> [(Type, Type); 4] {
    [(S, S), (S, F), (F, S), (F, F)]
}

// ---------------------------------------------------------------- rules

#[test]
fn unary_rules() {
    use UnOp::*;
    for t in [S, F] {
        for (u, positive) in
            [(Neg, false), (Abs, false), (Exp, false), (Ln, true), (Sqrt, true), (Tanh, false), (Sigmoid, false), (Relu, false)]
        {
            let mut b = B::new(&[t]);
            let x = b.input(0);
            let y = b.un(u, x);
            check(&format!("{u:?}({t:?})"), &b.done(&[y]), positive);
        }
    }
}

#[test]
fn binary_rules() {
    use BinOp::*;
    for (ta, tb) in shapes() {
        for (o, positive) in
            [(Add, false), (Sub, false), (Mul, false), (Div, false), (Min, false), (Max, false), (LeakyRelu, false)]
        {
            let mut b = B::new(&[ta, tb]);
            let (x, y) = (b.input(0), b.input(1));
            let z = b.bin(o, x, y);
            check(&format!("{o:?}({ta:?}, {tb:?})"), &b.done(&[z]), positive);
        }
    }
}

#[test]
fn same_operand_twice() {
    // x·x, x/x, max(x, x + 1): both contributions reach the one leaf node.
    for t in [S, F] {
        let mut b = B::new(&[t]);
        let x = b.input(0);
        let sq = b.bin(BinOp::Mul, x, x);
        let q = b.bin(BinOp::Div, sq, x);
        let one = b.c(1.0);
        let x1 = b.bin(BinOp::Add, x, one);
        let m = b.bin(BinOp::Max, x, x1);
        let y = b.bin(BinOp::Add, q, m);
        check(&format!("x·x/x + max(x, x+1) ({t:?})"), &b.done(&[y]), false);
    }
}

#[test]
fn powi_rules() {
    for t in [S, F] {
        for n in [-2, -1, 0, 1, 2, 3] {
            let mut b = B::new(&[t]);
            let x = b.input(0);
            let y = b.powi(x, n);
            check(&format!("powi({t:?}, {n})"), &b.done(&[y]), false);
        }
    }
}

#[test]
fn powi_zero_gives_no_cotangent() {
    let mut b = B::new(&[F]);
    let x = b.input(0);
    let y = b.powi(x, 0);
    let src = b.done(&[y]);
    let (_, vjp) = build_vjp(&src, &[Some(F)]);
    assert!(vjp.leaves.is_empty(), "{:?}", vjp.leaves);
}

#[test]
fn select_rules() {
    // A Bool condition (scalars compared) over every operand shape, and a
    // Mask condition (vectors compared) over vector/scalar operands.
    for (ta, tb) in shapes() {
        for (ca, cb) in [(S, S), (F, F), (S, F)] {
            let mut b = B::new(&[ta, tb, ca, cb]);
            let (x, y, p, q) = (b.input(0), b.input(1), b.input(2), b.input(3));
            let c = b.cmp(CmpOp::Lt, p, q);
            if b.ty(c) != Type::Bool && ta == S && tb == S {
                continue; // a mask cannot pick between two scalars in the interpreter
            }
            let z = b.select(c, x, y);
            check(&format!("select({ca:?}<{cb:?}, {ta:?}, {tb:?})"), &b.done(&[z]), false);
        }
    }
    // Boolean algebra on the way: select(a > 0 && !(b > 0), x, y).
    let mut b = B::new(&[F, F, F, S]);
    let (p, q, x, y) = (b.input(0), b.input(1), b.input(2), b.input(3));
    let zero = b.c(0.0);
    let c1 = b.cmp(CmpOp::Gt, p, zero);
    let c2 = b.cmp(CmpOp::Gt, q, zero);
    let n2 = b.un(UnOp::Not, c2);
    let c = b.bin(BinOp::And, c1, n2);
    let c = b.bin(BinOp::Or, c, c2);
    let z = b.select(c, x, y);
    check("select(mask algebra)", &b.done(&[z]), false);
}

#[test]
fn reductions_and_broadcast() {
    let mut b = B::new(&[F]);
    let x = b.input(0);
    let s = b.sum(x);
    check("sum", &b.done(&[s]), false);

    let mut b = B::new(&[S]);
    let x = b.input(0);
    let v = b.bcast(x);
    check("broadcast", &b.done(&[v]), false);

    let mut b = B::new(&[F, F]);
    let (x, y) = (b.input(0), b.input(1));
    let d = b.dot(x, y);
    check("dot", &b.done(&[d]), false);

    // dot(x, x) and sum(broadcast(s)·x).
    let mut b = B::new(&[F, S]);
    let (x, s) = (b.input(0), b.input(1));
    let d = b.dot(x, x);
    let bs = b.bcast(s);
    let m = b.bin(BinOp::Mul, bs, x);
    let t = b.sum(m);
    let y = b.bin(BinOp::Add, d, t);
    check("dot(x,x) + sum(bcast(s)·x)", &b.done(&[y]), false);
}

// ---------------------------------------------------------------- compositions

#[test]
fn sigmoid_dot_times_a() {
    // y = sigmoid(dot(a, b) + x)·a
    let mut b = B::new(&[F, F, S]);
    let (a, bb, x) = (b.input(0), b.input(1), b.input(2));
    let d = b.dot(a, bb);
    let z = b.bin(BinOp::Add, d, x);
    let s = b.un(UnOp::Sigmoid, z);
    let y = b.bin(BinOp::Mul, s, a);
    check("sigmoid(dot(a,b)+x)·a", &b.done(&[y]), false);
}

#[test]
fn gat_like_score_and_message() {
    // score = leaky_relu(dot(h_src, att) + e, 0.2), msg = exp(score)·tanh(h_src) / (1 + |score|)
    let mut b = B::new(&[F, F, S]);
    let (h, att, e) = (b.input(0), b.input(1), b.input(2));
    let d = b.dot(h, att);
    let z = b.bin(BinOp::Add, d, e);
    let slope = b.c(0.2);
    let score = b.bin(BinOp::LeakyRelu, z, slope);
    let ex = b.un(UnOp::Exp, score);
    let th = b.un(UnOp::Tanh, h);
    let num = b.bin(BinOp::Mul, ex, th);
    let ab = b.un(UnOp::Abs, score);
    let one = b.c(1.0);
    let den = b.bin(BinOp::Add, one, ab);
    let msg = b.bin(BinOp::Div, num, den);
    check("score and message", &b.done(&[score, msg]), false);
}

#[test]
fn leaky_relu_vector_slope_and_relu_mix() {
    // leaky_relu(x, s) with a vector slope, relu of a scalar broadcast in a product, min/max of mixed shapes.
    let mut b = B::new(&[F, F, S, S]);
    let (x, s, p, q) = (b.input(0), b.input(1), b.input(2), b.input(3));
    let l = b.bin(BinOp::LeakyRelu, x, s);
    let r = b.un(UnOp::Relu, p);
    let m = b.bin(BinOp::Mul, l, r);
    let lo = b.bin(BinOp::Min, q, m);
    let hi = b.bin(BinOp::Max, lo, x);
    let sq = b.powi(hi, 2);
    let n = b.un(UnOp::Neg, sq);
    let ls = b.bin(BinOp::LeakyRelu, p, s);
    check("leaky relu mix", &b.done(&[n, ls]), false);
}

#[test]
fn positive_domain_chain() {
    // sqrt(a)·ln(b) − a/b + powi(b, −2), scalar against vector.
    let mut b = B::new(&[S, F]);
    let (a, c) = (b.input(0), b.input(1));
    let sa = b.un(UnOp::Sqrt, a);
    let lc = b.un(UnOp::Ln, c);
    let t1 = b.bin(BinOp::Mul, sa, lc);
    let t2 = b.bin(BinOp::Div, a, c);
    let t3 = b.powi(c, -2);
    let d = b.bin(BinOp::Sub, t1, t2);
    let y = b.bin(BinOp::Add, d, t3);
    let s = b.sum(y);
    check("sqrt/ln/div/powi chain", &b.done(&[y, s]), true);
}

#[test]
fn repeated_leaf_nodes_are_summed() {
    // Input(0) written as two nodes: one leaf entry, the sum of both paths.
    let mut b = B::new(&[S, F]);
    let x1 = b.input(0);
    let v = b.input(1);
    let x2 = b.input(0);
    let e = b.un(UnOp::Exp, x1);
    let m = b.bin(BinOp::Mul, x2, v);
    let y = b.bin(BinOp::Add, e, m);
    let src = b.done(&[y]);
    let (_, vjp) = build_vjp(&src, &[Some(F)]);
    let keys: Vec<&Op> = vjp.leaves.iter().map(|(op, _)| op).collect();
    assert_eq!(keys, [&Op::Input(0), &Op::Input(1)]);
    check("repeated leaf", &src, false);
}

// ---------------------------------------------------------------- conventions

/// Evaluate the cotangents of `src`'s inputs at `x` with seeds `seeds`.
fn grads(src: &Region, x: &[Value], seeds: &[Value]) -> Vec<Value> {
    let types: Vec<Option<Type>> = seeds.iter().map(|s| Some(if matches!(s, Value::Vector(_)) { F } else { S })).collect();
    let (vjp, _) = build_vjp(src, &types);
    let mut all = x.to_vec();
    all.extend(seeds.iter().cloned());
    eval(&vjp, &all)
}

#[test]
fn kinks_take_the_forward_branch() {
    // relu'(0) = 0, |x|'(0) = 0, leaky_relu'(0) = slope.
    let mut b = B::new(&[F]);
    let x = b.input(0);
    let r = b.un(UnOp::Relu, x);
    let got = grads(&b.done(&[r]), &[Value::Vector(vec![0.0, 1.0, -1.0])], &[Value::Vector(vec![2.0, 3.0, 5.0])]);
    assert_eq!(got[0], Value::Vector(vec![0.0, 3.0, 0.0]));

    let mut b = B::new(&[S]);
    let x = b.input(0);
    let r = b.un(UnOp::Relu, x);
    assert_eq!(grads(&b.done(&[r]), &[Value::Scalar(0.0)], &[Value::Scalar(7.0)])[0], Value::Scalar(0.0));

    let mut b = B::new(&[F]);
    let x = b.input(0);
    let r = b.un(UnOp::Abs, x);
    let got = grads(&b.done(&[r]), &[Value::Vector(vec![0.0, 1.0, -1.0])], &[Value::Vector(vec![2.0, 3.0, 5.0])]);
    assert_eq!(got[0], Value::Vector(vec![0.0, 3.0, -5.0]));

    let mut b = B::new(&[F, S]);
    let (x, s) = (b.input(0), b.input(1));
    let r = b.bin(BinOp::LeakyRelu, x, s);
    let got =
        grads(&b.done(&[r]), &[Value::Vector(vec![0.0, 1.0, -1.0]), Value::Scalar(0.25)], &[Value::Vector(vec![2.0, 3.0, 5.0])]);
    assert_eq!(got[0], Value::Vector(vec![0.5, 3.0, 1.25]));
    assert_eq!(got[1], Value::Scalar(-5.0));
}

#[test]
fn ties_split_evenly() {
    for o in [BinOp::Max, BinOp::Min] {
        let mut b = B::new(&[F, F]);
        let (x, y) = (b.input(0), b.input(1));
        let m = b.bin(o, x, y);
        let got = grads(
            &b.done(&[m]),
            &[Value::Vector(vec![1.0, 2.0, 3.0]), Value::Vector(vec![1.0, 0.0, 4.0])],
            &[Value::Vector(vec![2.0, 3.0, 5.0])],
        );
        let (a, bb) = match o {
            BinOp::Max => (vec![1.0, 3.0, 0.0], vec![1.0, 0.0, 5.0]),
            _ => (vec![1.0, 0.0, 5.0], vec![1.0, 3.0, 0.0]),
        };
        assert_eq!(got[0], Value::Vector(a), "{o:?}");
        assert_eq!(got[1], Value::Vector(bb), "{o:?}");

        let mut b = B::new(&[S, S]);
        let (x, y) = (b.input(0), b.input(1));
        let m = b.bin(o, x, y);
        let got = grads(&b.done(&[m]), &[Value::Scalar(1.5), Value::Scalar(1.5)], &[Value::Scalar(4.0)]);
        assert_eq!(got, [Value::Scalar(2.0), Value::Scalar(2.0)], "{o:?}");
    }
}

// ---------------------------------------------------------------- errors, liveness, substitution

#[test]
fn matvec_gives_outer_product_and_transposed_product() {
    let m_ty = Type::Matrix(WidthId(0), WidthId(0));
    let mut b = B::new(&[m_ty, F]);
    let (m, v) = (b.input(0), b.input(1));
    let y = b.push(Op::MatVec(m, v), F);
    let src = b.done(&[y]);
    let mut out = Region::new(vec![m_ty, F, F]);
    let seed = out.push(Op::Input(2), F, Span::default());
    let got = vjp_region(&src, &mut out, |_| None, &[Some(seed)]).expect("matvec differentiates");
    let mut out_r = out.clone();
    let m_bar = got.leaf(&Op::Input(0)).expect("matrix cotangent");
    let v_bar = got.leaf(&Op::Input(1)).expect("vector cotangent");
    out_r.outputs = vec![m_bar, v_bar];
    let mat = Value::Matrix { rows: 3, cols: 3, data: vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 10.0] };
    let ins = [mat, Value::Vector(vec![1.0, -1.0, 2.0]), Value::Vector(vec![1.0, 2.0, 3.0])];
    let vals = tiga_compiler::interp::eval_region(&out_r, &[3], &mut |op| match op {
        Op::Input(k) => Ok(ins[*k as usize].clone()),
        _ => Err(tiga_compiler::interp::InterpError::Internal("leaf".into())),
    })
    .expect("evaluates");
    // M̄ = g vᵀ, v̄ = Mᵀ g.
    assert_eq!(vals[0], Value::Matrix { rows: 3, cols: 3, data: vec![1.0, -1.0, 2.0, 2.0, -2.0, 4.0, 3.0, -3.0, 6.0] });
    assert_eq!(vals[1], Value::Vector(vec![30.0, 36.0, 45.0]));
}

#[test]
fn dead_nodes_get_no_adjoint() {
    // A MatVec and an exp that no output depends on, and an unseeded output:
    // no error, and no cotangent reaches their leaves.
    let m_ty = Type::Matrix(WidthId(0), WidthId(0));
    let mut b = B::new(&[m_ty, F, S, S]);
    let (m, v, x, z) = (b.input(0), b.input(1), b.input(2), b.input(3));
    let _dead = b.push(Op::MatVec(m, v), F);
    let _dead2 = b.un(UnOp::Exp, x);
    let s = b.sum(v);
    let unseeded = b.un(UnOp::Tanh, z);
    let src = b.done(&[s, unseeded]);
    let mut out = Region::new(vec![m_ty, F, S, S, S]);
    let seed = out.push(Op::Input(4), S, Span::default());
    let before = out.nodes.len();
    let vjp = vjp_region(&src, &mut out, |_| None, &[Some(seed), None]).expect("vjp");
    let keys: Vec<&Op> = vjp.leaves.iter().map(|(op, _)| op).collect();
    assert_eq!(keys, [&Op::Input(1)]);
    // Forward copy (8 nodes) plus the reverse of `sum` alone: one broadcast.
    assert_eq!(out.nodes.len() - before, src.nodes.len() + 1);
}

#[test]
fn leaves_answered_by_subst() {
    // The primal copy reads substituted values: `src`'s inputs are the
    // *last* inputs of `out`, after the seed; states keep their own key.
    let mut b = B::new(&[F, S]);
    let (x, s) = (b.input(0), b.input(1));
    let st = b.push(Op::State(0), S);
    let m = b.bin(BinOp::Mul, x, s);
    let y = b.bin(BinOp::Mul, m, st);
    let src = b.done(&[y]);

    let mut out = Region::new(vec![F, F, S, S]);
    let seed = out.push(Op::Input(0), F, Span::default());
    let xi = out.push(Op::Input(1), F, Span::default());
    let si = out.push(Op::Input(2), S, Span::default());
    let sti = out.push(Op::Input(3), S, Span::default());
    let vjp = vjp_region(
        &src,
        &mut out,
        |op| match op {
            Op::Input(0) => Some(xi),
            Op::Input(1) => Some(si),
            Op::State(0) => Some(sti),
            _ => None,
        },
        &[Some(seed)],
    )
    .expect("vjp");
    assert_eq!(&vjp.primal[..3], &[xi, si, sti]);
    let gx = vjp.leaf(&Op::Input(0)).expect("x̄");
    let gs = vjp.leaf(&Op::Input(1)).expect("s̄");
    let gst = vjp.leaf(&Op::State(0)).expect("statē");
    out.outputs = vec![gx, gs, gst];
    verify_region(&out);
    let (xv, sv, stv, g) = (vec![1.0, -2.0, 0.5], 3.0, -1.5, vec![0.25, 2.0, -1.0]);
    let got = eval(&out, &[Value::Vector(g.clone()), Value::Vector(xv.clone()), Value::Scalar(sv), Value::Scalar(stv)]);
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(p, q)| p * q).sum::<f64>();
    assert_eq!(got[0], Value::Vector(g.iter().map(|gl| gl * sv * stv).collect()));
    assert_eq!(got[1], Value::Scalar(dot(&g, &xv) * stv));
    assert_eq!(got[2], Value::Scalar(dot(&g, &xv) * sv));
}

#[test]
fn seed_errors() {
    let mut b = B::new(&[S]);
    let x = b.input(0);
    let y = b.un(UnOp::Exp, x);
    let src = b.done(&[y]);
    let mut out = Region::new(vec![S, F]);
    let v = out.push(Op::Input(1), F, Span::default());
    assert!(matches!(vjp_region(&src, &mut out, |_| None, &[]), Err(AdjointError::SeedCount { given: 0, outputs: 1 })));
    assert!(matches!(
        vjp_region(&src, &mut out, |_| None, &[Some(v)]),
        Err(AdjointError::SeedType { index: 0, seed: Type::Vector(_), output: Type::Scalar })
    ));
}
