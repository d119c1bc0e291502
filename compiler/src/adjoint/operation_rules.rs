//! The reverse-mode rule of every operation of the kernel IR.
//!
//! [`vjp_region`] copies a region into another (the forward sweep) and then
//! walks it backwards, pushing for each node that received a cotangent ḡ the
//! contributions ḡ·∂y/∂operand into its operands' cotangents. The rules sit
//! in one exhaustive `match` over [`Op`] without a catch-all arm, so adding an
//! operation to the IR does not compile until its adjoint is written here.
//!
//! Conventions (matching [`crate::interp`]'s semantics):
//! - kinks take the derivative of the branch the forward pass takes at the
//!   tie: relu'(0) = 0, leaky_relu'(0) = slope, |x|'(0) = 0; binary `min`
//!   and `max` split the cotangent evenly between equal operands (half to
//!   each; a row reducer's max/min instead gives a lane's whole cotangent to
//!   its first winning edge, `generate-adjoint`'s rule);
//! - an elementwise operation that broadcasts a scalar against a vector sums
//!   the vector cotangent back into the scalar (the adjoint of broadcasting),
//!   and a scalar contribution to a vector is broadcast; both happen in one
//!   place, [`Sweep::accumulate`];
//! - booleans (`Bool`, `Mask`) carry no cotangent.
//!
//! Every node pushed is typed as the verifier ([`crate::ir::verify`]) types it.

use std::collections::HashMap;

use crate::ir::{BinOp, CmpOp, Op, Region, Span, Type, UnOp, ValueId};

/// The result of differentiating a region into another.
#[derive(Clone, Debug, PartialEq)]
pub struct RegionVjp {
    /// For each node of the source region, its primal value in `out`.
    pub primal: Vec<ValueId>,
    /// The cotangent (in `out`) of each leaf operation of the source region
    /// that received one, keyed by the leaf op as written in the source
    /// (`Op::Field(f)`, `Op::Input(k)`, `Op::State(k)`, `Op::Message(k)`,
    /// `Op::Scan(k)`), in order of first appearance in the source; several
    /// source nodes with the same leaf op are summed into one entry.
    /// Const/Degree/Rank leaves have none. Each cotangent has the type of its
    /// leaf in the source region.
    pub leaves: Vec<(Op, ValueId)>,
}

impl RegionVjp {
    /// The cotangent of one leaf op, if it received one.
    pub fn leaf(&self, op: &Op) -> Option<ValueId> {
        self.leaves.iter().find(|(o, _)| o == op).map(|(_, v)| *v)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AdjointError {
    /// An operation whose adjoint is not built yet (today: `matvec`, whose
    /// adjoint needs matrix-parameter gradients and a transposed product).
    #[error("line {}, column {}: the adjoint of `{op}` is not supported yet", span.line, span.col)]
    Unsupported { op: &'static str, span: Span },
    #[error("{given} seeds given for a region with {outputs} outputs")]
    SeedCount { given: usize, outputs: usize },
    #[error("seed {index} has type {seed:?}, which cannot seed an output of type {output:?}")]
    SeedType { index: usize, seed: Type, output: Type },
    /// The source region is ill-typed (a verified region never yields this).
    #[error("line {}, column {}: ill-typed region: {message}", span.line, span.col)]
    IllTyped { span: Span, message: String },
    /// A plan rewrite left a stage the verifier refuses (a bug).
    #[error("after plan rewrite `{rewrite}`: {source}")]
    Rewrite {
        rewrite: &'static str,
        #[source]
        source: Box<crate::ir::VerifyError>,
    },
}

fn ill(span: Span, message: String) -> AdjointError {
    AdjointError::IllTyped { span, message }
}

/// Pushes typed nodes into the output region.
struct Sweep<'o> {
    out: &'o mut Region,
    /// Constants already pushed (by bit pattern), reused by later rules.
    consts: HashMap<u64, ValueId>,
}

impl Sweep<'_> {
    fn ty(&self, v: ValueId) -> Type {
        self.out.ty(v)
    }

    fn konst(&mut self, c: f64, span: Span) -> ValueId {
        if let Some(v) = self.consts.get(&c.to_bits()) {
            return *v;
        }
        let v = self.out.push(Op::Const(c), Type::Scalar, span);
        self.consts.insert(c.to_bits(), v);
        v
    }

    fn bin(&mut self, op: BinOp, a: ValueId, b: ValueId, span: Span) -> Result<ValueId, AdjointError> {
        let (ta, tb) = (self.ty(a), self.ty(b));
        let t = Type::elementwise(ta, tb).ok_or_else(|| ill(span, format!("{op:?} of {ta:?} and {tb:?}")))?;
        Ok(self.out.push(Op::Binary(op, a, b), t, span))
    }

    fn add(&mut self, a: ValueId, b: ValueId, span: Span) -> Result<ValueId, AdjointError> {
        // Matrix cotangents (of matrix parameters) add as matrices.
        if let (t @ Type::Matrix(..), u) = (self.ty(a), self.ty(b)) {
            if t != u {
                return Err(ill(span, format!("adding a {u:?} to a {t:?} cotangent")));
            }
            return Ok(self.out.push(Op::Binary(BinOp::Add, a, b), t, span));
        }
        self.bin(BinOp::Add, a, b, span)
    }

    fn mul(&mut self, a: ValueId, b: ValueId, span: Span) -> Result<ValueId, AdjointError> {
        self.bin(BinOp::Mul, a, b, span)
    }

    fn un(&mut self, u: UnOp, a: ValueId, span: Span) -> Result<ValueId, AdjointError> {
        let t = self.ty(a);
        if !matches!(t, Type::Scalar | Type::Vector(_)) {
            return Err(ill(span, format!("{u:?} of {t:?}")));
        }
        Ok(self.out.push(Op::Unary(u, a), t, span))
    }

    fn powi(&mut self, a: ValueId, n: i32, span: Span) -> Result<ValueId, AdjointError> {
        let t = self.ty(a);
        if !matches!(t, Type::Scalar | Type::Vector(_)) {
            return Err(ill(span, format!("powi of {t:?}")));
        }
        Ok(self.out.push(Op::Powi(a, n), t, span))
    }

    fn cmp(&mut self, c: CmpOp, a: ValueId, b: ValueId, span: Span) -> Result<ValueId, AdjointError> {
        let (ta, tb) = (self.ty(a), self.ty(b));
        let t = match Type::elementwise(ta, tb) {
            Some(Type::Scalar) => Type::Bool,
            Some(Type::Vector(w)) => Type::Mask(w),
            _ => return Err(ill(span, format!("comparison of {ta:?} and {tb:?}"))),
        };
        Ok(self.out.push(Op::Cmp(c, a, b), t, span))
    }

    /// `x > 0`, a `Bool` or a `Mask`.
    fn positive(&mut self, x: ValueId, span: Span) -> Result<ValueId, AdjointError> {
        let zero = self.konst(0.0, span);
        self.cmp(CmpOp::Gt, x, zero, span)
    }

    fn select(&mut self, c: ValueId, a: ValueId, b: ValueId, span: Span) -> Result<ValueId, AdjointError> {
        let (tc, ta, tb) = (self.ty(c), self.ty(a), self.ty(b));
        let t = match (tc, Type::elementwise(ta, tb)) {
            (Type::Bool, Some(t)) => t,
            // The interpreter cannot pick between two scalars by a mask; the
            // rules below always pass a vector (the cotangent) when `c` is one.
            (Type::Mask(w), Some(Type::Vector(v))) if v == w => Type::Vector(w),
            _ => return Err(ill(span, format!("select by {tc:?} between {ta:?} and {tb:?}"))),
        };
        Ok(self.out.push(Op::Select(c, a, b), t, span))
    }

    /// `select(c, g, 0)`.
    fn keep_if(&mut self, c: ValueId, g: ValueId, span: Span) -> Result<ValueId, AdjointError> {
        let zero = self.konst(0.0, span);
        self.select(c, g, zero, span)
    }

    /// `select(c, 0, g)`.
    fn keep_unless(&mut self, c: ValueId, g: ValueId, span: Span) -> Result<ValueId, AdjointError> {
        let zero = self.konst(0.0, span);
        self.select(c, zero, g, span)
    }

    /// Cotangents of `min`/`max`: the strict winner (`wins` = Lt for min, Gt
    /// for max) takes ḡ, and a tie gives each operand half, so that smooth
    /// combinations such as `max(a, b) + min(a, b)` differentiate exactly.
    fn split_ties(
        &mut self,
        wins: CmpOp,
        a: ValueId,
        b: ValueId,
        g: ValueId,
        span: Span,
    ) -> Result<(ValueId, ValueId), AdjointError> {
        let loses = if wins == CmpOp::Lt { CmpOp::Gt } else { CmpOp::Lt };
        let a_wins = self.cmp(wins, a, b, span)?;
        let b_wins = self.cmp(loses, a, b, span)?;
        let tie = self.cmp(CmpOp::Eq, a, b, span)?;
        let half_c = self.konst(0.5, span);
        let half = self.mul(g, half_c, span)?;
        let on_tie = self.keep_if(tie, half, span)?;
        let ca = self.select(a_wins, g, on_tie, span)?;
        let cb = self.select(b_wins, g, on_tie, span)?;
        Ok((ca, cb))
    }

    /// Add `contrib` to the cotangent `adj` of a node of type `target`,
    /// reconciling shapes: a scalar contribution to a vector is broadcast, a
    /// vector contribution to a scalar is summed (the adjoint of the implicit
    /// scalar → vector broadcast of elementwise operations). Booleans take
    /// no cotangent.
    fn accumulate(&mut self, adj: &mut Option<ValueId>, target: Type, contrib: ValueId, span: Span) -> Result<(), AdjointError> {
        let c = match (target, self.ty(contrib)) {
            (Type::Bool | Type::Mask(_), _) => return Ok(()),
            (t, c) if t == c => contrib,
            (Type::Vector(w), Type::Scalar) => self.out.push(Op::Broadcast(contrib, w), Type::Vector(w), span),
            (Type::Scalar, Type::Vector(_)) => self.out.push(Op::Sum(contrib), Type::Scalar, span),
            (t, c) => return Err(ill(span, format!("a {c:?} cotangent for a {t:?} value"))),
        };
        *adj = Some(match *adj {
            Some(prev) => self.add(prev, c, span)?,
            None => c,
        });
        Ok(())
    }
}

/// Copy `src` into `out` (leaf ops answered by `subst` like
/// [`Region::inline_with`], others copied), then append the reverse sweep:
/// `seeds[k]` is the cotangent of `src.outputs[k]` (`None` = zero), with the
/// same type as that output (or a `Scalar` for a `Vector` output, meaning
/// broadcast). Returns the primal images of `src`'s nodes and the cotangents
/// of its leaves. `out.outputs` is left untouched.
///
/// Only nodes some seeded output depends on receive a cotangent, and only
/// those get adjoint code. A matrix parameter's cotangent is an outer
/// product (`outer`), which is never differentiated again.
pub fn vjp_region(
    src: &Region,
    out: &mut Region,
    mut subst: impl FnMut(&Op) -> Option<ValueId>,
    seeds: &[Option<ValueId>],
) -> Result<RegionVjp, AdjointError> {
    if seeds.len() != src.outputs.len() {
        return Err(AdjointError::SeedCount { given: seeds.len(), outputs: src.outputs.len() });
    }
    // Forward sweep: the primal image of every node.
    let primal = out.append_copies(src, 0..src.nodes.len(), |_, n, _| subst(&n.op));
    let mut b = Sweep { out, consts: HashMap::new() };
    let mut adj: Vec<Option<ValueId>> = vec![None; src.nodes.len()];
    let sty = |v: ValueId| src.nodes[v.0 as usize].ty;

    for (k, (o, seed)) in src.outputs.iter().zip(seeds).enumerate() {
        let Some(s) = *seed else { continue };
        let (ts, to) = (b.ty(s), sty(*o));
        let fits =
            (ts == to && matches!(to, Type::Scalar | Type::Vector(_))) || (ts == Type::Scalar && matches!(to, Type::Vector(_)));
        if !fits {
            return Err(AdjointError::SeedType { index: k, seed: ts, output: to });
        }
        let span = src.nodes[o.0 as usize].span;
        b.accumulate(&mut adj[o.0 as usize], to, s, span)?;
    }

    // Reverse sweep. Users follow their operands, so when node i is reached
    // every contribution to its cotangent has been added.
    let mut leaf_cots: Vec<(usize, ValueId)> = Vec::new();
    for i in (0..src.nodes.len()).rev() {
        let Some(g) = adj[i] else { continue };
        let node = &src.nodes[i];
        let sp = node.span;
        let y = primal[i];
        let p = |v: ValueId| primal[v.0 as usize];
        // `acc!(a, c)`: add contribution `c` to the cotangent of source node `a`.
        macro_rules! acc {
            ($a:expr, $c:expr) => {{
                let a: ValueId = $a;
                let c: ValueId = $c;
                b.accumulate(&mut adj[a.0 as usize], sty(a), c, sp)?;
            }};
        }
        match node.op {
            // Leaves: the cotangent is the result (none for constants and the
            // per-row/edge integers).
            Op::Field(_) | Op::Input(_) | Op::State(_) | Op::Message(_) | Op::Scan(_) => leaf_cots.push((i, g)),
            Op::Const(_) | Op::Degree | Op::Rank => {}
            // y = a·1_w: ā += Σ_l ḡ_l
            Op::Broadcast(a, _) => {
                let s = b.out.push(Op::Sum(g), Type::Scalar, sp);
                acc!(a, s)
            }
            // y = −x: x̄ += −ḡ
            Op::Unary(UnOp::Neg, x) => {
                let c = b.un(UnOp::Neg, g, sp)?;
                acc!(x, c)
            }
            // y = |x|: x̄ += ḡ·sign(x), sign(0) = 0
            Op::Unary(UnOp::Abs, x) => {
                let px = p(x);
                let pos = b.positive(px, sp)?;
                let zero = b.konst(0.0, sp);
                let neg = b.cmp(CmpOp::Lt, px, zero, sp)?;
                let ng = b.un(UnOp::Neg, g, sp)?;
                let inner = b.keep_if(neg, ng, sp)?;
                let c = b.select(pos, g, inner, sp)?;
                acc!(x, c)
            }
            // y = eˣ: x̄ += ḡ·y
            Op::Unary(UnOp::Exp, x) => {
                let c = b.mul(g, y, sp)?;
                acc!(x, c)
            }
            // y = ln x: x̄ += ḡ/x
            Op::Unary(UnOp::Ln, x) => {
                let c = b.bin(BinOp::Div, g, p(x), sp)?;
                acc!(x, c)
            }
            // y = √x: x̄ += ḡ·0.5/y
            Op::Unary(UnOp::Sqrt, x) => {
                let half = b.konst(0.5, sp);
                let t = b.mul(g, half, sp)?;
                let c = b.bin(BinOp::Div, t, y, sp)?;
                acc!(x, c)
            }
            // y = tanh x: x̄ += ḡ·(1 − y²)
            Op::Unary(UnOp::Tanh, x) => {
                let one = b.konst(1.0, sp);
                let yy = b.mul(y, y, sp)?;
                let d = b.bin(BinOp::Sub, one, yy, sp)?;
                let c = b.mul(g, d, sp)?;
                acc!(x, c)
            }
            // y = σ(x): x̄ += ḡ·y·(1 − y)
            Op::Unary(UnOp::Sigmoid, x) => {
                let one = b.konst(1.0, sp);
                let d = b.bin(BinOp::Sub, one, y, sp)?;
                let t = b.mul(g, y, sp)?;
                let c = b.mul(t, d, sp)?;
                acc!(x, c)
            }
            // y = relu x: x̄ += select(x > 0, ḡ, 0)  (relu'(0) = 0)
            Op::Unary(UnOp::Relu, x) => {
                let pos = b.positive(p(x), sp)?;
                let c = b.keep_if(pos, g, sp)?;
                acc!(x, c)
            }
            // y = ¬x: boolean, no cotangent
            Op::Unary(UnOp::Not, _) => {}
            // y = a + b: ā += ḡ, b̄ += ḡ
            Op::Binary(BinOp::Add, l, r) => {
                acc!(l, g);
                acc!(r, g)
            }
            // y = a − b: ā += ḡ, b̄ += −ḡ
            Op::Binary(BinOp::Sub, l, r) => {
                acc!(l, g);
                let ng = b.un(UnOp::Neg, g, sp)?;
                acc!(r, ng)
            }
            // y = a·b: ā += ḡ·b, b̄ += ḡ·a
            Op::Binary(BinOp::Mul, l, r) => {
                let cl = b.mul(g, p(r), sp)?;
                acc!(l, cl);
                let cr = b.mul(g, p(l), sp)?;
                acc!(r, cr)
            }
            // y = a/b: ā += ḡ/b, b̄ += −ḡ·y/b
            Op::Binary(BinOp::Div, l, r) => {
                let cl = b.bin(BinOp::Div, g, p(r), sp)?;
                acc!(l, cl);
                let gy = b.mul(g, y, sp)?;
                let q = b.bin(BinOp::Div, gy, p(r), sp)?;
                let cr = b.un(UnOp::Neg, q, sp)?;
                acc!(r, cr)
            }
            // y = min(a, b), ties split evenly: ā += ḡ·[a<b] + ½ḡ·[a=b], b̄ += ḡ·[a>b] + ½ḡ·[a=b]
            Op::Binary(BinOp::Min, l, r) => {
                let (cl, cr) = b.split_ties(CmpOp::Lt, p(l), p(r), g, sp)?;
                acc!(l, cl);
                acc!(r, cr)
            }
            // y = max(a, b), ties split evenly: ā += ḡ·[a>b] + ½ḡ·[a=b], b̄ += ḡ·[a<b] + ½ḡ·[a=b]
            Op::Binary(BinOp::Max, l, r) => {
                let (cl, cr) = b.split_ties(CmpOp::Gt, p(l), p(r), g, sp)?;
                acc!(l, cl);
                acc!(r, cr)
            }
            // y = x > 0 ? x : s·x: x̄ += select(x > 0, ḡ, ḡ·s), s̄ += select(x > 0, 0, ḡ·x)
            Op::Binary(BinOp::LeakyRelu, x, s) => {
                let pos = b.positive(p(x), sp)?;
                let gs = b.mul(g, p(s), sp)?;
                let cx = b.select(pos, g, gs, sp)?;
                acc!(x, cx);
                let gx = b.mul(g, p(x), sp)?;
                let cs = b.keep_unless(pos, gx, sp)?;
                acc!(s, cs)
            }
            // y = a ∧ b, a ∨ b: boolean, no cotangent
            Op::Binary(BinOp::And | BinOp::Or, _, _) => {}
            // y = xⁿ: x̄ += ḡ·n·xⁿ⁻¹ (nothing for n = 0)
            Op::Powi(x, n) => {
                if n == 1 {
                    acc!(x, g)
                } else if n != 0 {
                    let pw = b.powi(p(x), n - 1, sp)?;
                    let kn = b.konst(f64::from(n), sp);
                    let d = b.mul(pw, kn, sp)?;
                    let c = b.mul(g, d, sp)?;
                    acc!(x, c)
                }
            }
            // y = a ⋚ b: boolean, no cotangent
            Op::Cmp(..) => {}
            // y = c ? a : b: ā += select(c, ḡ, 0), b̄ += select(c, 0, ḡ)
            Op::Select(c, l, r) => {
                let cl = b.keep_if(p(c), g, sp)?;
                acc!(l, cl);
                let cr = b.keep_unless(p(c), g, sp)?;
                acc!(r, cr)
            }
            // y = Σ_l v_l: v̄ += ḡ·1_w
            Op::Sum(v) => {
                let Type::Vector(w) = sty(v) else {
                    return Err(ill(sp, format!("sum of {:?}", sty(v))));
                };
                let c = b.out.push(Op::Broadcast(g, w), Type::Vector(w), sp);
                acc!(v, c)
            }
            // y = a·b (dot): ā += ḡ·b, b̄ += ḡ·a
            Op::Dot(l, r) => {
                let cl = b.mul(g, p(r), sp)?;
                acc!(l, cl);
                let cr = b.mul(g, p(l), sp)?;
                acc!(r, cr)
            }
            // y = M·v: M̄ += ḡ·vᵀ (an outer product), v̄ += Mᵀ·ḡ
            Op::MatVec(m, v) => {
                let (Type::Matrix(_, cw), Type::Vector(rw)) = (sty(m), b.ty(g)) else {
                    return Err(ill(sp, "matvec cotangent of the wrong shape".to_string()));
                };
                let cv = b.out.push(Op::MatTVec(p(m), g), Type::Vector(cw), sp);
                acc!(v, cv);
                let Type::Vector(vw) = sty(v) else { return Err(ill(sp, "matvec of a non-vector".to_string())) };
                let cm = b.out.push(Op::Outer(g, p(v)), Type::Matrix(rw, vw), sp);
                acc!(m, cm)
            }
            // y = Mᵀ·v: M̄ += v·ḡᵀ, v̄ += M·ḡ
            Op::MatTVec(m, v) => {
                let (Type::Matrix(rw, _), Type::Vector(cw)) = (sty(m), b.ty(g)) else {
                    return Err(ill(sp, "mattvec cotangent of the wrong shape".to_string()));
                };
                let cv = b.out.push(Op::MatVec(p(m), g), Type::Vector(rw), sp);
                acc!(v, cv);
                let cm = b.out.push(Op::Outer(p(v), g), Type::Matrix(rw, cw), sp);
                acc!(m, cm)
            }
            // y = a·bᵀ (a matrix, only ever a parameter's gradient): not
            // differentiated again (second derivatives are not built).
            Op::Outer(..) => return Err(AdjointError::Unsupported { op: "outer (second derivatives)", span: sp }),
        }
    }

    // Leaf cotangents, merged per leaf op, in source order.
    let mut leaves: Vec<(Op, ValueId)> = Vec::new();
    for &(i, g) in leaf_cots.iter().rev() {
        let n = &src.nodes[i];
        match leaves.iter_mut().find(|(op, _)| *op == n.op) {
            Some((_, prev)) => *prev = b.add(*prev, g, n.span)?,
            None => leaves.push((n.op.clone(), g)),
        }
    }
    Ok(RegionVjp { primal, leaves })
}
