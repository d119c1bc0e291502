//! The assertions: every realization's forward against the f64 reference
//! interpreter and, bit for bit, against the in-memory run under the same
//! back end (the in-memory JIT run under the JIT); its
//! backward against the reference VJP; its refusals against what it is
//! expected to refuse. A tally of what ran lets a test say that nothing
//! was skipped.

use std::collections::{BTreeMap, BTreeSet};

use tiga::{Backend, DType, Kernel, Schedule, Tensor};

use crate::case::{has_width, Call, Case, Rng};
use crate::realizer::{Grads, Outs, Realizer};

/// Forward tolerance, relative to `max(|reference|, 1)`, per dtype.
pub fn forward_tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-5,
        DType::F64 => 1e-12,
    }
}

/// Backward tolerance, relative to `max(|reference|, 1)`, per dtype.
pub fn backward_tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-5,
        DType::F64 => 1e-10,
    }
}

/// How many calls a realization ran, and refused as expected, per
/// direction (each call once per back end of [`BACKENDS`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Count {
    pub forward_ran: usize,
    pub forward_refused: usize,
    pub backward_ran: usize,
    pub backward_refused: usize,
    /// Calls on cases the realization does not hold.
    pub not_held: usize,
}

/// What a run of the suite did: [`Count`]s by realization name
/// ([`Realizer`]'s `Display`), and the calls (kernel, width, dtype) whose
/// in-memory forward differs in its bits between the back ends.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    pub counts: BTreeMap<String, Count>,
    pub backends_differ: BTreeSet<(String, usize, String)>,
}

impl Tally {
    /// The count of a realization (zero if it never came up).
    pub fn of(&self, r: &Realizer) -> Count {
        self.counts.get(&r.to_string()).copied().unwrap_or_default()
    }
}

/// The back ends every realization runs each call with: the JIT (the
/// in-memory JIT run is the baseline the promise names) and the default
/// (`Auto`: the macro's ahead-of-time variants where it has one for the
/// call's dtype and widths).
pub const BACKENDS: [Backend; 2] = [Backend::Jit, Backend::Auto];

/// `got` against `want` elementwise: `|x - y| <= tol * max(|y|, 1)`.
pub fn assert_close(got: &Tensor, want: &Tensor, tol: f64, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let (x, y) = (got.to_f64_vec(), want.to_f64_vec());
    for (i, (a, b)) in x.iter().zip(&y).enumerate() {
        let ok = (a - b).abs() <= tol * b.abs().max(1.0) || (a.is_nan() && b.is_nan());
        assert!(ok, "{what}: element {i} is {a}, the reference {b} (tolerance {tol:e})");
    }
}

/// `got` and `want` hold the same bits (and dtype and shape).
pub fn assert_bits(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!((got.dtype(), got.shape()), (want.dtype(), want.shape()), "{what}: dtype and shape");
    let (x, y) = (got.to_f64_vec(), want.to_f64_vec());
    if let Some(i) = x.iter().zip(&y).position(|(a, b)| a.to_bits() != b.to_bits()) {
        panic!("{what}: element {i} is {}, against {} (bits differ)", x[i], y[i]);
    }
}

fn outputs_close(got: &Outs, want: &Outs, tol: f64, what: &str) {
    let names = |o: &Outs| o.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(got), names(want), "{what}: outputs");
    for ((n, a), (_, b)) in got.iter().zip(want) {
        assert_close(a, b, tol, &format!("{what}: output {n}"));
    }
}

/// The gradients as a map by (role, name): every realization must give the
/// reference's set, whatever its order.
fn gradients_close(got: &Grads, want: &Grads, tol: f64, what: &str) {
    let keys = |g: &Grads| {
        let mut k: Vec<(&'static str, String)> = g.iter().map(|(r, n, _)| (r.name(), n.clone())).collect();
        k.sort();
        k
    };
    assert_eq!(keys(got), keys(want), "{what}: gradients");
    for (role, name, b) in want {
        let a = got.iter().find(|(r, n, _)| r == role && n == name).map(|(_, _, t)| t);
        let a = a.unwrap_or_else(|| panic!("{what}: no gradient of {} {name}", role.name()));
        assert_close(a, b, tol, &format!("{what}: gradient of {} {name}", role.name()));
    }
}

/// The gradients hold the bits of `want`'s, field by field.
fn gradients_bits(got: &Grads, want: &Grads, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: gradients");
    for (role, name, b) in want {
        let a = got.iter().find(|(r, n, _)| r == role && n == name).map(|(_, _, t)| t);
        let a = a.unwrap_or_else(|| panic!("{what}: no gradient of {} {name}", role.name()));
        assert_bits(a, b, &format!("{what}: gradient of {} {name}, against the in-memory backward", role.name()));
    }
}

/// A realization's answer against what it was expected to give: the
/// results (checked by `check`) or a refusal with this message.
fn expect<T>(got: &Result<T, String>, refusal: Option<&str>, what: &str) -> Option<T>
where
    T: Clone,
{
    match (got, refusal) {
        (Ok(v), None) => Some(v.clone()),
        (Err(e), Some(s)) => {
            assert!(e.contains(s), "{what}: refused with `{e}`, expected a refusal saying `{s}`");
            None
        }
        (Ok(_), Some(s)) => panic!("{what}: ran, expected a refusal saying `{s}`"),
        (Err(e), None) => panic!("{what}: {e}"),
    }
}

/// One call of `k` on `case` over every realization in `realizers`, under
/// each back end of [`BACKENDS`]: forward within tolerance of the reference
/// and bit-identical to the in-memory run under the same back end (the
/// in-memory JIT run under the JIT); backward within tolerance of the
/// reference VJP, and bit-identical to the in-memory backward where
/// [`Realizer::backward_bits`] says so; refusals as [`Realizer::refusals`]
/// says.
pub fn check_call(k: &Kernel, case: &Case, call: &Call, realizers: &[Realizer], tally: &mut Tally) {
    let g = &case.graph;
    let what = format!("{} on {}, F={}, {}", k.name(), case.name, call.width, call.dtype);
    let ins = call.inputs();
    let wide = call.in_f64();
    let (ref_ins, ref_cots) = (wide.inputs(), wide.cotangent_views());
    let reference: Outs = k.run_reference(g, &ref_ins).unwrap_or_else(|e| panic!("{what}: reference: {e}")).items;
    let ref_grads: Grads = k.vjp_reference(g, &ref_ins, &ref_cots).unwrap_or_else(|e| panic!("{what}: reference vjp: {e}")).items;
    let (ftol, btol) = (forward_tolerance(call.dtype), backward_tolerance(call.dtype));
    let mut baselines: Vec<Outs> = Vec::new();
    let cots = call.cotangent_views();
    for backend in BACKENDS {
        let schedule = Schedule::new().backend(backend);
        let what = format!("{what}, {backend:?}");
        let baseline: Outs =
            k.run_with(g, &ins, &schedule).unwrap_or_else(|e| panic!("{what}: the in-memory baseline: {e}")).items;
        // The in-memory backward, for the realizations held to its bits.
        let grad_baseline: Option<Grads> = realizers.iter().any(Realizer::backward_bits).then(|| {
            k.vjp_with(g, &ins, &cots, &schedule).unwrap_or_else(|e| panic!("{what}: the in-memory backward: {e}")).items
        });
        outputs_close(&baseline, &reference, ftol, &format!("{what}, in memory"));
        for r in realizers {
            let count = tally.counts.entry(r.to_string()).or_default();
            let Some(res) = r.results(k, case, call, &schedule) else {
                count.not_held += 1;
                continue;
            };
            let what = format!("{what}, {r}");
            let refusals = r.refusals(k, case);
            match expect(&res.forward, refusals.forward, &format!("{what} forward")) {
                Some(outs) => {
                    outputs_close(&outs, &reference, ftol, &what);
                    for ((n, a), (_, b)) in outs.iter().zip(&baseline) {
                        assert_bits(a, b, &format!("{what}: output {n}, against the in-memory run"));
                    }
                    count.forward_ran += 1;
                }
                None => count.forward_refused += 1,
            }
            match expect(&res.backward, refusals.backward, &format!("{what} backward")) {
                Some(grads) => {
                    for (_, _, t) in &grads {
                        assert_eq!(t.dtype(), call.dtype, "{what}: gradient dtype");
                    }
                    gradients_close(&grads, &ref_grads, btol, &what);
                    if let (true, Some(base)) = (r.backward_bits(), &grad_baseline) {
                        gradients_bits(&grads, base, &what);
                    }
                    count.backward_ran += 1;
                }
                None => count.backward_refused += 1,
            }
        }
        baselines.push(baseline);
    }
    let bits = |o: &Outs| o.iter().map(|(_, t)| t.to_f64_vec().iter().map(|x| x.to_bits()).collect()).collect::<Vec<Vec<u64>>>();
    if baselines.windows(2).any(|w| bits(&w[0]) != bits(&w[1])) {
        tally.backends_differ.insert((k.name().to_string(), call.width, call.dtype.to_string()));
    }
}

/// Widths the suite calls vector kernels at: 3 (no ahead-of-time variant:
/// the JIT runs it), 8 (the macro's ahead-of-time variant where there is
/// one; the JIT's SIMD feature loops) and 1 (one lane: scalar feature
/// loops).
pub const WIDTHS: [usize; 3] = [3, 8, 1];

/// Every kernel of gnn.rs on every case, in f32 and f64, at every width of
/// [`WIDTHS`] (kernels without vectors once), over `realizers`.
pub fn check_cases(cases: &[Case], realizers: &[Realizer], seed: u64) -> Tally {
    let mut rng = Rng(seed);
    let mut tally = Tally::default();
    for case in cases {
        for k in crate::kernels() {
            let widths: &[usize] = if has_width(k) { &WIDTHS } else { &WIDTHS[..1] };
            for &width in widths {
                for dtype in [DType::F32, DType::F64] {
                    let call = Call::random(k, case, width, dtype, &mut rng);
                    check_call(k, case, &call, realizers, &mut tally);
                }
            }
        }
    }
    tally
}

/// How many calls [`check_cases`] makes per case for the kernels that
/// `keep` selects: one per kernel, dtype and width (one width for kernels
/// without vectors).
pub fn calls_of(keep: impl Fn(&Kernel) -> bool) -> usize {
    crate::kernels().iter().filter(|k| keep(k)).map(|k| if has_width(k) { WIDTHS.len() } else { 1 }).sum::<usize>() * 2
}

/// The calls (kernel, width, dtype) whose in-memory forward is known to
/// differ in its bits between the JIT and the macro's ahead-of-time
/// variant: `EdgeGate`'s `dot(p, h[j])` at F = 8, where the Cranelift back
/// end sums the feature loop in vector partial sums (four f32 or two f64
/// lanes, added at the end) while the ahead-of-time variant adds in the
/// loop's order (1 ulp apart; both within tolerance of the reference).
pub fn known_backend_differences() -> BTreeSet<(String, usize, String)> {
    [("EdgeGate", 8, "f32"), ("EdgeGate", 8, "f64")].iter().map(|&(k, w, d)| (k.to_string(), w, d.to_string())).collect()
}
