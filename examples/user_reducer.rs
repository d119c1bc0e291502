//! A user-defined reducer: log-sum-exp pooling, a smooth maximum, as a monoid.
//!
//! out[i] = ln Σ_{j→i} exp(x[j]), computed stably: the state is (running max
//! m, Σ exp(x - m)), `combine` rescales both partial sums to the larger max,
//! and `finalize` returns m + ln(s). An empty row gives 0.
//!
//! The kernel lives in the kernel file examples/kernels/reducers.rs (which
//! `tigac` reads too); this example includes it under `#[message_passing]`.
//!
//! The monoid is declared associative and commutative; tiga checks the
//! identity law and both declarations on sampled states at build time (a
//! false declaration is a compile error), then folds rows in parallel.

use tiga::{Graph, Inputs};

#[allow(clippy::all)]
mod reducers {
    use tiga::message_passing;
    include!("kernels/reducers.rs");
}

use reducers::LogSumExp;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A small ring with chords, plus node 9 with no in-edges.
    let src: Vec<u32> = vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 3, 6, 2, 2];
    let dst: Vec<u32> = vec![1, 2, 3, 4, 5, 6, 7, 8, 0, 5, 8, 1, 3, 3];
    let graph = Graph::from_edges(10, 10, &src, &dst)?;
    let x: Vec<f64> = (0..10).map(|i| (i as f64) * 0.7 - 2.0).collect();
    let out = LogSumExp::kernel().run(&graph, &Inputs::new().src("x", &x))?;
    let got = out.out().and_then(|t| t.as_f64()).ok_or("no f64 output")?;

    let mut worst = 0.0f64;
    for i in 0..10u32 {
        let incoming: Vec<f64> = src.iter().zip(&dst).filter(|(_, &d)| d == i).map(|(&s, _)| x[s as usize]).collect();
        let want = if incoming.is_empty() { 0.0 } else { incoming.iter().map(|v| v.exp()).sum::<f64>().ln() };
        let err = (got[i as usize] - want).abs();
        worst = worst.max(err);
        println!("node {i}: {} in-edges, log-sum-exp {:.6} (closed form {:.6})", incoming.len(), got[i as usize], want);
    }
    println!("checked: every node within {worst:e} of ln Σ exp(x[j]) computed directly; node 9 (no in-edges) gives 0");
    if worst > 1e-12 {
        return Err(format!("log-sum-exp differs from the closed form by {worst}").into());
    }
    Ok(())
}
