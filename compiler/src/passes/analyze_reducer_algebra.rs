//! `analyze-reducer-algebra`: what the reducer allows later passes to do.
//!
//! Builtin reducers have known algebra. A user monoid's `associative` and
//! `commutative` are declarations; this pass cannot prove them for arbitrary
//! code, so it tries to refute them: it evaluates the identity law and the
//! declared laws on sampled states with the reference interpreter and refuses
//! the kernel if any sample breaks one ("prove or refuse": refuted laws are
//! errors, unrefuted ones are kept with a remark saying they were sampled,
//! not proved).

use super::{PassError, Remarks};
use crate::interp::{eval_region, InterpError, Value};
use crate::ir::{Kernel, Properties, ReducerClass, ReducerKind, Region, Type};

fn classify(kind: ReducerKind) -> ReducerClass {
    match kind {
        ReducerKind::Sum | ReducerKind::Mean => ReducerClass::Additive,
        ReducerKind::Prod => ReducerClass::Multiplicative,
        ReducerKind::Max | ReducerKind::Min => ReducerClass::Idempotent,
        ReducerKind::Softmax => ReducerClass::Softmax,
        ReducerKind::Monoid => ReducerClass::General,
    }
}

/// A deterministic pseudo-random stream (no dependency for a few samples).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        // Small integers and halves: exact in f64, so laws are tested without rounding noise.
        (((self.0 >> 33) % 41) as f64 - 20.0) / 2.0
    }
}

const SAMPLE_WIDTH: usize = 3;

fn sample_state(types: &[Type], rng: &mut Lcg) -> Vec<Value> {
    types
        .iter()
        .map(|t| match t {
            Type::Vector(_) => Value::Vector((0..SAMPLE_WIDTH).map(|_| rng.next()).collect()),
            _ => Value::Scalar(rng.next()),
        })
        .collect()
}

fn combine(r: &Region, a: &[Value], b: &[Value]) -> Result<Vec<Value>, InterpError> {
    let both: Vec<Value> = a.iter().chain(b).cloned().collect();
    eval_region(r, &[SAMPLE_WIDTH; 64], &mut |op| match op {
        crate::ir::Op::Input(k) => both.get(*k as usize).cloned().ok_or_else(|| InterpError::Internal("input".into())),
        _ => Err(InterpError::Internal("combine reads only its inputs".into())),
    })
}

/// Equal up to rounding: float monoids (log-sum-exp, say) are associative
/// in exact arithmetic but not bit for bit, so the sampled laws allow a
/// relative 1e-9.
fn same(a: &[Value], b: &[Value]) -> bool {
    let close = |p: f64, q: f64| p == q || (p.is_nan() && q.is_nan()) || (p - q).abs() <= 1e-9 * p.abs().max(q.abs());
    a.iter().zip(b).all(|(x, y)| match (x, y) {
        (Value::Scalar(p), Value::Scalar(q)) => close(*p, *q),
        (Value::Vector(p), Value::Vector(q)) => p.iter().zip(q).all(|(p, q)| close(*p, *q)),
        _ => x == y,
    })
}

fn show(v: &[Value]) -> String {
    let parts: Vec<String> = v
        .iter()
        .map(|x| match x {
            Value::Scalar(s) => format!("{s}"),
            Value::Vector(v) => format!("{v:?}"),
            other => format!("{other:?}"),
        })
        .collect();
    format!("({})", parts.join(", "))
}

fn check_monoid(k: &Kernel, r: &mut Remarks<'_>) -> Result<Properties, PassError> {
    let span = Some(k.reducer.span);
    let (Some(id_r), Some(comb)) = (&k.reducer.identity, &k.reducer.combine) else {
        return Err(PassError::refused("a monoid needs `identity` and `combine`", span));
    };
    // A law that fails is reported where it fails: the identity law at what
    // `identity` returns, the others at what `combine` returns.
    let at = |r: &crate::ir::Region| r.outputs.first().map(|v| r.node(*v).span).or(span);
    let (id_span, comb_span) = (at(id_r), at(comb));
    let internal = |e: InterpError| PassError::refused(format!("could not evaluate the monoid: {e}"), span);
    let id = eval_region(id_r, &[SAMPLE_WIDTH; 64], &mut |_| Err(InterpError::Internal("identity reads nothing".into())))
        .map_err(internal)?;
    let types = id_r.output_types();
    let mut rng = Lcg(0x7167_a5eed);
    const SAMPLES: usize = 64;
    let declared = k.reducer.declared;
    for _ in 0..SAMPLES {
        let a = sample_state(&types, &mut rng);
        let b = sample_state(&types, &mut rng);
        let c = sample_state(&types, &mut rng);
        let left = combine(comb, &id, &a).map_err(internal)?;
        let right = combine(comb, &a, &id).map_err(internal)?;
        // The identity law is checked on states the monoid can reach from
        // the identity: fold `a` in first, so "top-2" style states are valid.
        let reached = combine(comb, &id, &a).map_err(internal)?;
        let again = combine(comb, &reached, &id).map_err(internal)?;
        if !same(&again, &reached) || (!same(&left, &right) && declared.commutative) {
            return Err(PassError::refused(
                format!(
                    "`identity()` = {} is not an identity of `combine`: combine(identity, {}) = {}, combine({}, identity) = {}",
                    show(&id),
                    show(&a),
                    show(&left),
                    show(&a),
                    show(&right)
                ),
                id_span,
            ));
        }
        if declared.commutative {
            let ab = combine(comb, &reached, &combine(comb, &id, &b).map_err(internal)?).map_err(internal)?;
            let rb = combine(comb, &id, &b).map_err(internal)?;
            let ba = combine(comb, &rb, &reached).map_err(internal)?;
            if !same(&ab, &ba) {
                return Err(PassError::refused(
                    format!(
                        "the monoid is declared commutative, but combine(a, b) = {} and combine(b, a) = {} for a = {}, b = {}",
                        show(&ab),
                        show(&ba),
                        show(&reached),
                        show(&rb)
                    ),
                    comb_span,
                ));
            }
        }
        if declared.associative {
            let ra = combine(comb, &id, &a).map_err(internal)?;
            let rb = combine(comb, &id, &b).map_err(internal)?;
            let rc = combine(comb, &id, &c).map_err(internal)?;
            let l = combine(comb, &combine(comb, &ra, &rb).map_err(internal)?, &rc).map_err(internal)?;
            let rr = combine(comb, &ra, &combine(comb, &rb, &rc).map_err(internal)?).map_err(internal)?;
            if !same(&l, &rr) {
                return Err(PassError::refused(
                    format!(
                        "the monoid is declared associative, but combine(combine(a, b), c) = {} and combine(a, combine(b, c)) = {} for a = {}, b = {}, c = {}",
                        show(&l),
                        show(&rr),
                        show(&ra),
                        show(&rb),
                        show(&rc)
                    ),
                    comb_span,
                ));
            }
        }
    }
    r.analysis(
        span,
        format!(
            "monoid laws (identity{}{}) hold on {SAMPLES} sampled states; declared, not proved",
            if declared.associative { ", associativity" } else { "" },
            if declared.commutative { ", commutativity" } else { "" }
        ),
    );
    if !declared.commutative {
        r.missed(span, "not declared commutative: rows are folded in CSR order (the user's edge order within a row)");
    }
    Ok(Properties {
        associative: declared.associative,
        commutative: declared.commutative,
        idempotent: declared.idempotent,
        invertible: false,
        linear: false,
    })
}

pub fn analyze_reducer_algebra(k: &mut Kernel, r: &mut Remarks<'_>) -> Result<(), PassError> {
    let kind = k.reducer.kind;
    let span = Some(k.reducer.span);
    let class = classify(kind);
    let proved = match kind {
        ReducerKind::Sum => {
            Properties { associative: true, commutative: true, idempotent: false, invertible: true, linear: true }
        }
        ReducerKind::Mean => {
            Properties { associative: true, commutative: true, idempotent: false, invertible: true, linear: true }
        }
        ReducerKind::Prod => {
            Properties { associative: true, commutative: true, idempotent: false, invertible: false, linear: false }
        }
        ReducerKind::Max | ReducerKind::Min => {
            Properties { associative: true, commutative: true, idempotent: true, invertible: false, linear: false }
        }
        ReducerKind::Softmax => {
            Properties { associative: true, commutative: true, idempotent: false, invertible: false, linear: false }
        }
        ReducerKind::Monoid => check_monoid(k, r)?,
    };
    r.analysis(span, format!("reducer `{}` is {}", kind.name(), class.name()));
    let what = match kind {
        ReducerKind::Sum => "partial sums over pages and halos combine by addition; the adjoint broadcasts the cotangent to every edge (linear)",
        ReducerKind::Mean => "carried as (sum, degree): partials combine by addition and divide once; an empty row gives 0",
        ReducerKind::Prod => "partials combine by multiplication; an empty row gives 1; zero messages make the product non-invertible",
        ReducerKind::Max => "partials combine by max; an empty row gives 0; the adjoint routes the cotangent to the winning edge",
        ReducerKind::Min => "partials combine by min; an empty row gives 0; the adjoint routes the cotangent to the winning edge",
        ReducerKind::Softmax => "online softmax: state (running max, denominator, weighted sum); partials merge by rescaling to the larger max; an empty row gives 0",
        ReducerKind::Monoid => "partials merge with `combine`; the row fold starts at `identity()`",
    };
    r.analysis(span, what);
    if proved.associative && proved.commutative {
        r.applied(span, "rows may be split across workers, pages and halos and merged in any order (associative, commutative)");
    } else if proved.associative {
        r.applied(span, "rows may be split, but partials must merge in edge order (associative, not commutative)");
    }
    if !proved.linear {
        r.missed(span, "not linear: the backward pass needs the forward state (saved or recomputed)");
    }
    if matches!(kind, ReducerKind::Sum | ReducerKind::Mean) {
        r.analysis(
            span,
            "floating-point addition is associative only up to rounding: results are deterministic for a fixed schedule",
        );
    }
    k.reducer.class = Some(class);
    k.reducer.proved = Some(proved);
    Ok(())
}
