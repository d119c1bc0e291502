//! The Cranelift back end on hand-built loop kernels, in f32 and f64, against
//! values computed directly in Rust; plus the variant cache and the errors.

#![cfg(feature = "cranelift")]

use tiga_compiler::back::cranelift::{compile, BackError, Jit, VariantKey};
use tiga_compiler::interp::{apply_binary, apply_unary};
use tiga_compiler::ir::{BinOp, CmpOp, DType, FieldDecl, FieldId, OutputDecl, Role, Span, Type, UnOp, WidthDecl, WidthId};
use tiga_compiler::loops::{Addr, Inst, LoopKernel, LoopVar, Stmt, Var, VarKind};

mod common;
use common::run_over_csr;

// --- building loop kernels ----------------------------------------------

fn field(name: &str, role: Role, ty: Type) -> FieldDecl {
    FieldDecl { name: name.into(), role, ty, declared: DType::F64.into(), span: Span::default() }
}
fn width(name: &str, f: u32, dim: usize) -> WidthDecl {
    WidthDecl { name: name.into(), bound_by: (FieldId(f), dim) }
}
fn output(name: &str, ty: Type) -> OutputDecl {
    OutputDecl::new(name.into(), ty, Role::Dst)
}
fn v(n: u32) -> Var {
    Var(n)
}
const K0: LoopVar = LoopVar(0);
const K1: LoopVar = LoopVar(1);
const W0: WidthId = WidthId(0);
const W1: WidthId = WidthId(1);
fn set(x: u32, i: Inst) -> Stmt {
    Stmt::Set(v(x), i)
}
fn load_f(f: u32, lanes: &[LoopVar]) -> Inst {
    Inst::Load(Addr::Field { field: FieldId(f), lanes: lanes.to_vec() })
}
fn scratch(buf: u32, lane: LoopVar) -> Addr {
    Addr::Scratch { buf, lane }
}
fn out(o: u32, lane: Option<LoopVar>) -> Addr {
    Addr::Output { out: o, lane }
}
fn bin(op: BinOp, a: u32, b: u32) -> Inst {
    Inst::Binary(op, v(a), v(b))
}
fn lp(lane: LoopVar, w: WidthId, body: Vec<Stmt>) -> Stmt {
    Stmt::Loop { lane, width: w, body }
}

#[allow(clippy::too_many_arguments)]
fn kernel(
    name: &str,
    fields: Vec<FieldDecl>,
    widths: Vec<WidthDecl>,
    outputs: Vec<OutputDecl>,
    vars: Vec<VarKind>,
    scratch: Vec<WidthId>,
    init: Vec<Stmt>,
    body: Vec<Stmt>,
    finish: Vec<Stmt>,
) -> LoopKernel {
    LoopKernel {
        name: name.into(),
        fields,
        widths,
        outputs,
        vars,
        num_loop_vars: 2,
        scratch,
        init,
        pre_body: Vec::new(),
        body,
        finish,
    }
}

// --- graphs and running --------------------------------------------------

struct Graph {
    num_src: usize,
    num_dst: usize,
    /// (source, destination) in the user's edge order.
    edges: Vec<(u32, u32)>,
}

impl Graph {
    /// Rows 2 and 4 are empty; row 1 has a multi-edge.
    fn small() -> Graph {
        Graph {
            num_src: 6,
            num_dst: 5,
            edges: vec![(0, 1), (2, 1), (3, 0), (5, 3), (1, 1), (4, 3), (2, 0), (0, 3), (5, 1), (2, 1)],
        }
    }
    /// (offsets, cols, CSR position → user edge).
    fn csr(&self) -> (Vec<u64>, Vec<u32>, Vec<u64>) {
        common::csr(self.num_dst, &self.edges)
    }
    /// The user edges into `i`, in order: (edge, source).
    fn in_edges(&self, i: usize) -> Vec<(usize, usize)> {
        self.edges.iter().enumerate().filter(|(_, &(_, d))| d as usize == i).map(|(e, &(s, _))| (e, s as usize)).collect()
    }
}

/// Compile `k` for (`dtype`, `widths`, `edge_ids`) and run it over `g`, row
/// chunk by row chunk. `fields` are in declaration order, edge fields in
/// the user's edge order (permuted here when the variant has no edge ids).
fn run(
    k: &LoopKernel,
    dtype: DType,
    widths: &[usize],
    edge_ids: bool,
    g: &Graph,
    fields: &[Vec<f64>],
    out_lens: &[usize],
) -> Vec<Vec<f64>> {
    let key = VariantKey {
        kernel: format!("{}#test", k.name),
        dtype,
        widths: widths.to_vec(),
        edge_ids,
        stencil: None,
        storage: Default::default(),
    };
    let var = compile(k, &key).unwrap_or_else(|e| panic!("{}: {e}", k.name));
    assert!(var.clif.contains("function"), "{}", var.clif);
    assert!(var.asm.as_deref().is_some_and(|a| !a.is_empty()));
    let (off, cols, ids) = g.csr();
    let inputs: Vec<(Role, &[f64])> = k.fields.iter().zip(fields).map(|(fd, d)| (fd.role, &d[..])).collect();
    let n = g.num_dst as u64;
    run_over_csr(dtype, edge_ids, (&off, &cols, &ids), &inputs, out_lens, &[0..2, 2..2, 2..n], |args, rows| {
        // SAFETY: the arrays above are shaped as the kernel declares.
        unsafe { var.run(args, rows) }
    })
}

fn close(what: &str, dtype: DType, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}");
    let tol = match dtype {
        DType::F32 => 2e-5,
        DType::F64 => 1e-12,
    };
    for (n, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= tol * (1.0 + w.abs()) || (g.is_nan() && w.is_nan()) || g == w;
        assert!(ok, "{what} ({dtype:?}) [{n}]: got {g}, want {w}\n  got  {got:?}\n  want {want:?}");
    }
}

fn data(n: usize, seed: u64) -> Vec<f64> {
    // Small, varied, never zero.
    (0..n).map(|i| ((i as u64 * 7 + seed * 13) % 23) as f64 / 10.0 - 1.05).collect()
}

// --- kernels ---------------------------------------------------------------

#[test]
fn scalar_neighbour_sum() {
    let k = kernel(
        "scalar_sum",
        vec![field("x", Role::Src, Type::Scalar)],
        vec![],
        vec![output("y", Type::Scalar)],
        vec![VarKind::Num, VarKind::Num],
        vec![],
        vec![set(1, Inst::Const(0.0))],
        vec![set(0, load_f(0, &[])), set(1, bin(BinOp::Add, 1, 0))],
        vec![Stmt::Store(out(0, None), v(1))],
    );
    let g = Graph::small();
    let x = data(g.num_src, 1);
    let want: Vec<f64> = (0..g.num_dst).map(|i| g.in_edges(i).iter().map(|&(_, s)| x[s]).sum()).collect();
    for dtype in [DType::F32, DType::F64] {
        let got = run(&k, dtype, &[], false, &g, std::slice::from_ref(&x), &[g.num_dst]);
        close("scalar sum", dtype, &got[0], &want);
    }
}

#[test]
fn vector_sum_and_mean_with_scratch() {
    let k = kernel(
        "vector_sum",
        vec![field("h", Role::Src, Type::Vector(W0))],
        vec![width("F", 0, 1)],
        vec![output("sum", Type::Vector(W0)), output("mean", Type::Vector(W0))],
        vec![VarKind::Num; 4],
        vec![W0],
        vec![lp(K0, W0, vec![set(0, Inst::Const(0.0)), Stmt::Store(scratch(0, K0), v(0))])],
        vec![lp(
            K0,
            W0,
            vec![
                set(1, load_f(0, &[K0])),
                set(2, Inst::Load(scratch(0, K0))),
                set(2, bin(BinOp::Add, 2, 1)),
                Stmt::Store(scratch(0, K0), v(2)),
            ],
        )],
        vec![
            set(3, Inst::Degree),
            set(0, Inst::Const(1.0)),
            set(3, bin(BinOp::Max, 3, 0)),
            lp(
                K0,
                W0,
                vec![
                    set(2, Inst::Load(scratch(0, K0))),
                    Stmt::Store(out(0, Some(K0)), v(2)),
                    set(2, bin(BinOp::Div, 2, 3)),
                    Stmt::Store(out(1, Some(K0)), v(2)),
                ],
            ),
        ],
    );
    let g = Graph::small();
    for f in [1usize, 3, 8] {
        let h = data(g.num_src * f, f as u64);
        let mut sum = vec![0.0; g.num_dst * f];
        let mut mean = vec![0.0; g.num_dst * f];
        for i in 0..g.num_dst {
            let into = g.in_edges(i);
            for c in 0..f {
                let s: f64 = into.iter().map(|&(_, j)| h[j * f + c]).sum();
                sum[i * f + c] = s;
                mean[i * f + c] = s / (into.len() as f64).max(1.0);
            }
        }
        for dtype in [DType::F32, DType::F64] {
            let got = run(&k, dtype, &[f], false, &g, std::slice::from_ref(&h), &[g.num_dst * f; 2]);
            close(&format!("sum F={f}"), dtype, &got[0], &sum);
            close(&format!("mean F={f}"), dtype, &got[1], &mean);
        }
    }
}

#[test]
fn edge_weighted_sum_with_permuted_edge_ids() {
    // y[i] = b[i] + sum over edges of w[e] * a[e] * x[j]
    let k = kernel(
        "edge_weighted",
        vec![
            field("x", Role::Src, Type::Vector(W0)),
            field("w", Role::Edge, Type::Scalar),
            field("a", Role::Edge, Type::Vector(W0)),
            field("b", Role::Dst, Type::Vector(W0)),
        ],
        vec![width("F", 0, 1)],
        vec![output("y", Type::Vector(W0))],
        vec![VarKind::Num; 5],
        vec![W0],
        vec![lp(K0, W0, vec![set(0, load_f(3, &[K0])), Stmt::Store(scratch(0, K0), v(0))])],
        vec![
            set(1, load_f(1, &[])),
            lp(
                K0,
                W0,
                vec![
                    set(2, load_f(0, &[K0])),
                    set(4, load_f(2, &[K0])),
                    set(2, bin(BinOp::Mul, 1, 2)),
                    set(2, bin(BinOp::Mul, 2, 4)),
                    set(3, Inst::Load(scratch(0, K0))),
                    set(3, bin(BinOp::Add, 3, 2)),
                    Stmt::Store(scratch(0, K0), v(3)),
                ],
            ),
        ],
        vec![lp(K0, W0, vec![set(3, Inst::Load(scratch(0, K0))), Stmt::Store(out(0, Some(K0)), v(3))])],
    );
    let g = Graph::small();
    let f = 3;
    let ne = g.edges.len();
    let x = data(g.num_src * f, 2);
    let w = data(ne, 3);
    let a = data(ne * f, 4);
    let b = data(g.num_dst * f, 5);
    let mut want = b.clone();
    for i in 0..g.num_dst {
        for (e, j) in g.in_edges(i) {
            for c in 0..f {
                want[i * f + c] += w[e] * x[j * f + c] * a[e * f + c];
            }
        }
    }
    // The CSR order really permutes the edges here.
    assert_ne!(g.csr().2, (0..ne as u64).collect::<Vec<_>>());
    for dtype in [DType::F32, DType::F64] {
        for edge_ids in [true, false] {
            let got = run(&k, dtype, &[f], edge_ids, &g, &[x.clone(), w.clone(), a.clone(), b.clone()], &[g.num_dst * f]);
            close(&format!("edge weighted, edge_ids={edge_ids}"), dtype, &got[0], &want);
        }
    }
}

#[test]
fn math_comparisons_and_selects() {
    use VarKind::{Bool, Num};
    // vars: 0..=20 numbers, 30.. booleans.
    let mut vars = vec![Num; 30];
    vars.extend([Bool; 10]);
    let k = kernel(
        "math",
        vec![field("x", Role::Src, Type::Scalar), field("d", Role::Dst, Type::Scalar)],
        vec![],
        vec![output("o1", Type::Scalar), output("o2", Type::Scalar), output("o3", Type::Scalar)],
        vars,
        vec![],
        vec![set(10, Inst::Const(0.0)), set(11, Inst::Const(f64::NEG_INFINITY)), set(7, Inst::Const(0.25))],
        vec![
            set(0, load_f(0, &[])),
            set(1, Inst::Unary(UnOp::Tanh, v(0))),
            set(2, Inst::Unary(UnOp::Exp, v(0))),
            set(3, Inst::Powi(v(0), 3)),
            set(4, bin(BinOp::Mul, 2, 3)),
            set(5, Inst::Powi(v(0), -2)),
            set(6, bin(BinOp::Min, 1, 5)),
            set(30, Inst::Cmp(CmpOp::Gt, v(0), v(7))),
            set(8, Inst::Select(v(30), v(4), v(6))),
            set(10, bin(BinOp::Add, 10, 8)),
            set(9, bin(BinOp::Mul, 0, 1)),
            set(11, bin(BinOp::Max, 11, 9)),
        ],
        vec![
            set(12, load_f(1, &[])),
            set(13, Inst::Unary(UnOp::Abs, v(12))),
            set(13, Inst::Unary(UnOp::Sqrt, v(13))),
            set(14, Inst::Unary(UnOp::Ln, v(13))),
            set(15, Inst::Unary(UnOp::Sigmoid, v(10))),
            set(16, Inst::Unary(UnOp::Relu, v(12))),
            set(17, bin(BinOp::LeakyRelu, 12, 7)),
            set(18, Inst::Unary(UnOp::Neg, v(16))),
            set(20, bin(BinOp::Add, 15, 14)),
            Stmt::Store(out(0, None), v(20)),
            set(31, Inst::Cmp(CmpOp::Lt, v(12), v(7))),
            set(32, Inst::Cmp(CmpOp::Ne, v(12), v(12))),
            set(33, bin(BinOp::Or, 31, 32)),
            set(34, Inst::Unary(UnOp::Not, v(33))),
            set(21, Inst::Const(-0.5)),
            set(35, Inst::Cmp(CmpOp::Ge, v(12), v(21))),
            set(36, bin(BinOp::And, 34, 35)),
            set(37, bin(BinOp::Or, 36, 31)),
            set(19, Inst::Select(v(37), v(17), v(18))),
            Stmt::Store(out(1, None), v(19)),
            set(22, Inst::Degree),
            set(23, Inst::Const(0.0)),
            set(38, Inst::Cmp(CmpOp::Gt, v(22), v(23))),
            set(24, Inst::Select(v(38), v(11), v(23))),
            set(25, Inst::Powi(v(12), 0)),
            set(26, Inst::Powi(v(12), 5)),
            set(24, bin(BinOp::Add, 24, 25)),
            set(24, bin(BinOp::Add, 24, 26)),
            set(27, bin(BinOp::Min, 12, 7)),
            set(24, bin(BinOp::Add, 24, 27)),
            Stmt::Store(out(2, None), v(24)),
        ],
    );
    let g = Graph::small();
    let x: Vec<f64> = vec![0.7, -0.4, 1.3, -1.1, 0.5, 0.2];
    let d: Vec<f64> = vec![0.8, -0.3, 0.1, -0.9, 2.0];
    let (u, b) = (apply_unary, apply_binary);
    let mut want = vec![vec![0.0; g.num_dst]; 3];
    for i in 0..g.num_dst {
        let (mut s, mut m) = (0.0, f64::NEG_INFINITY);
        for (_, j) in g.in_edges(i) {
            let x = x[j];
            let t = u(UnOp::Tanh, x);
            let a = u(UnOp::Exp, x) * x.powi(3);
            let c = b(BinOp::Min, t, x.powi(-2));
            s += if x > 0.25 { a } else { c };
            m = b(BinOp::Max, m, x * t);
        }
        let d = d[i];
        want[0][i] = u(UnOp::Sigmoid, s) + u(UnOp::Ln, u(UnOp::Sqrt, d.abs()));
        let lt = d < 0.25;
        let sel = lt || (!d.is_nan() && d >= -0.5);
        want[1][i] = if sel { b(BinOp::LeakyRelu, d, 0.25) } else { -u(UnOp::Relu, d) };
        let deg = g.in_edges(i).len();
        want[2][i] = (if deg > 0 { m } else { 0.0 }) + 1.0 + d.powi(5) + b(BinOp::Min, d, 0.25);
    }
    for dtype in [DType::F32, DType::F64] {
        let got = run(&k, dtype, &[], false, &g, &[x.clone(), d.clone()], &[g.num_dst; 3]);
        for o in 0..3 {
            close(&format!("math o{}", o + 1), dtype, &got[o], &want[o]);
        }
    }
}

#[test]
fn param_matrix_times_vector() {
    // y[i] = s * (bias + W · sum over edges of h[j]),  W: [G, F]
    let k = kernel(
        "matvec",
        vec![
            field("h", Role::Src, Type::Vector(W0)),
            field("W", Role::Param, Type::Matrix(W1, W0)),
            field("bias", Role::Param, Type::Vector(W1)),
            field("s", Role::Param, Type::Scalar),
        ],
        vec![width("F", 0, 1), width("G", 1, 0)],
        vec![output("y", Type::Vector(W1))],
        vec![VarKind::Num; 4],
        vec![W1],
        vec![lp(K0, W1, vec![set(0, Inst::Const(0.0)), Stmt::Store(scratch(0, K0), v(0))])],
        vec![lp(
            K0,
            W1,
            vec![
                set(0, Inst::Load(scratch(0, K0))),
                lp(
                    K1,
                    W0,
                    vec![
                        set(1, load_f(1, &[K0, K1])),
                        set(2, load_f(0, &[K1])),
                        set(1, bin(BinOp::Mul, 1, 2)),
                        set(0, bin(BinOp::Add, 0, 1)),
                    ],
                ),
                Stmt::Store(scratch(0, K0), v(0)),
            ],
        )],
        vec![
            set(3, load_f(3, &[])),
            lp(
                K0,
                W1,
                vec![
                    set(0, Inst::Load(scratch(0, K0))),
                    set(1, load_f(2, &[K0])),
                    set(0, bin(BinOp::Add, 0, 1)),
                    set(0, bin(BinOp::Mul, 0, 3)),
                    Stmt::Store(out(0, Some(K0)), v(0)),
                ],
            ),
        ],
    );
    let g = Graph::small();
    for (f, gw) in [(3usize, 2usize), (5, 4), (1, 3)] {
        let h = data(g.num_src * f, 6);
        let wm = data(gw * f, 7);
        let bias = data(gw, 8);
        let s = vec![1.5];
        let mut want = vec![0.0; g.num_dst * gw];
        for i in 0..g.num_dst {
            for r in 0..gw {
                let mut acc = 0.0;
                for (_, j) in g.in_edges(i) {
                    for c in 0..f {
                        acc += wm[r * f + c] * h[j * f + c];
                    }
                }
                want[i * gw + r] = (acc + bias[r]) * s[0];
            }
        }
        for dtype in [DType::F32, DType::F64] {
            let fields = [h.clone(), wm.clone(), bias.clone(), s.clone()];
            let got = run(&k, dtype, &[f, gw], false, &g, &fields, &[g.num_dst * gw]);
            close(&format!("matvec F={f} G={gw}"), dtype, &got[0], &want);
        }
    }
}

// --- cache and errors ------------------------------------------------------

fn tiny() -> LoopKernel {
    kernel(
        "tiny",
        vec![field("x", Role::Src, Type::Vector(W0))],
        vec![width("F", 0, 1)],
        vec![output("y", Type::Vector(W0))],
        vec![VarKind::Num],
        vec![W0],
        vec![lp(K0, W0, vec![set(0, Inst::Const(0.0)), Stmt::Store(scratch(0, K0), v(0))])],
        vec![],
        vec![lp(K0, W0, vec![set(0, Inst::Load(scratch(0, K0))), Stmt::Store(out(0, Some(K0)), v(0))])],
    )
}

#[test]
fn cache_hits_and_misses() {
    let jit = Jit::new();
    let k = tiny();
    let key = VariantKey {
        kernel: "tiny#1".into(),
        dtype: DType::F32,
        widths: vec![4],
        edge_ids: false,
        stencil: None,
        storage: Default::default(),
    };
    let (a, hit_a) = jit.variant(&k, &key).expect("compiles");
    let (b, hit_b) = jit.variant(&k, &key).expect("cached");
    assert!(!hit_a && hit_b);
    assert!(std::sync::Arc::ptr_eq(&a, &b));
    let s = jit.stats();
    assert_eq!((s.hits, s.misses, s.variants.len()), (1, 1, 1));
    let other = VariantKey { dtype: DType::F64, ..key.clone() };
    let (_, hit) = jit.variant(&k, &other).expect("compiles");
    assert!(!hit);
    let s = jit.stats();
    assert_eq!((s.hits, s.misses, s.variants.len()), (1, 2, 2));
    assert!(s.variants.iter().all(|(_, ms)| *ms > 0.0));
}

#[test]
fn variants_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<tiga_compiler::back::cranelift::Variant>();
    check::<Jit>();
    let jit = std::sync::Arc::new(Jit::new());
    let k = tiny();
    let key = VariantKey {
        kernel: "tiny#threads".into(),
        dtype: DType::F64,
        widths: vec![2],
        edge_ids: false,
        stencil: None,
        storage: Default::default(),
    };
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| jit.variant(&k, &key).expect("compiles"));
        }
    });
    let s = jit.stats();
    assert_eq!(s.hits + s.misses, 2);
    assert_eq!(s.variants.len(), 1);
}

#[test]
fn errors_instead_of_panics() {
    let k = tiny();
    let key = |widths: Vec<usize>| VariantKey {
        kernel: "tiny#e".into(),
        dtype: DType::F64,
        widths,
        edge_ids: false,
        stencil: None,
        storage: Default::default(),
    };
    assert!(matches!(compile(&k, &key(vec![])), Err(BackError::Widths { expected: 1, got: 0, .. })));
    match compile(&k, &key(vec![1 << 20])) {
        Err(e @ BackError::ScratchTooLarge { .. }) => assert!(e.to_string().contains("1 MiB"), "{e}"),
        other => panic!("expected ScratchTooLarge, got {other:?}"),
    }
    // A source field read in the finish (outside the edge loop).
    let mut bad = tiny();
    bad.finish.insert(0, lp(K0, W0, vec![set(0, load_f(0, &[K0]))]));
    assert!(matches!(compile(&bad, &key(vec![2])), Err(BackError::Malformed { .. })));
    // A loop variable used outside its loop, and a boolean stored.
    let mut bad = tiny();
    bad.finish.push(Stmt::Store(out(0, Some(K1)), v(0)));
    assert!(matches!(compile(&bad, &key(vec![2])), Err(BackError::Malformed { .. })));
    let mut bad = tiny();
    bad.vars.push(VarKind::Bool);
    bad.finish.push(lp(K0, W0, vec![Stmt::Store(out(0, Some(K0)), v(1))]));
    assert!(matches!(compile(&bad, &key(vec![2])), Err(BackError::Malformed { .. })));
    // Wrong lane count for a vector field.
    let mut bad = tiny();
    bad.body.push(set(0, load_f(0, &[])));
    assert!(matches!(compile(&bad, &key(vec![2])), Err(BackError::Malformed { .. })));
}
