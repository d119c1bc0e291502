// User-defined reducers, in one kernel file.
//
// examples/user_reducer.rs runs them and checks them against closed forms;
// tiga/tests/vjp_fd.rs checks their gradients against finite differences.
// `tigac` reads this file directly (`tigac explain
// examples/kernels/reducers.rs --kernel LogSumExp`), and the example and the
// tests include it under `#[message_passing]`, so both paths compile the
// same text.
//
// j→i is an edge from source j to destination i; the output is `out`.

/// Log-sum-exp pooling, a smooth maximum, as a monoid.
///
/// out[i] = ln Σ_{j→i} exp(x[j]), computed stably: the state is (running max
/// m, Σ exp(x - m)), `combine` rescales both partial sums to the larger max,
/// and `finalize` returns m + ln(s). An empty row gives 0.
#[message_passing(reduce = monoid(associative, commutative))]
pub mod LogSumExp {
    use tiga::lang::*;
    pub struct Src {
        pub x: f64,
    }
    pub fn edge(src: &Src) -> (f64, f64) {
        (src.x, 1.0)
    }
    pub fn identity() -> (f64, f64) {
        (f64::NEG_INFINITY, 0.0)
    }
    pub fn combine(a: (f64, f64), b: (f64, f64)) -> (f64, f64) {
        let m = max(a.0, b.0);
        let sa = if a.1 == 0.0 { 0.0 } else { a.1 * exp(a.0 - m) };
        let sb = if b.1 == 0.0 { 0.0 } else { b.1 * exp(b.0 - m) };
        (m, sa + sb)
    }
    pub fn finalize(s: (f64, f64)) -> f64 {
        if s.1 == 0.0 {
            0.0
        } else {
            s.0 + ln(s.1)
        }
    }
}
