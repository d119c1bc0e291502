//! Quickstart: Jacobi smoothing on a 1000×1000 four-neighbour stencil.
//!
//! The kernel is written once, in Rust, with `#[message_passing]`; tiga
//! checks and lowers it when this example is built, JIT-compiles it on the
//! first call, and runs it in parallel over the grid's CSR graph. The example
//! then checks the result against a plain Rust loop over the grid (an
//! independent reference that never builds a graph) and prints what it
//! checked.

use std::time::Instant;

use tiga::{message_passing, Graph, Inputs};

/// One Jacobi step for Laplace's equation: the average of the four
/// neighbours (missing neighbours on the border count as 0).
#[message_passing(reduce = sum)]
pub mod Smoothing {
    use tiga::lang::*;
    pub struct Src {
        pub x: f32,
    }
    pub fn edge(src: &Src) -> f32 {
        src.x
    }
    pub fn node(agg: f32) -> f32 {
        0.25 * agg
    }
}

/// The same step written by hand on the grid.
fn jacobi_by_hand(n: usize, x: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0f32; n * n];
    for r in 0..n {
        for c in 0..n {
            let mut s = 0.0f32;
            // Same summation order as the stencil's neighbour list.
            if r > 0 {
                s += x[(r - 1) * n + c];
            }
            if r + 1 < n {
                s += x[(r + 1) * n + c];
            }
            if c > 0 {
                s += x[r * n + c - 1];
            }
            if c + 1 < n {
                s += x[r * n + c + 1];
            }
            out[r * n + c] = 0.25 * s;
        }
    }
    out
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n = 1000;
    let steps = 20;
    let t = Instant::now();
    let graph = Graph::stencil_2d_4(n, n)?;
    println!(
        "graph: {n}x{n} four-neighbour stencil, {} nodes, {} edges (built in {:.1} ms)",
        graph.num_dst(),
        graph.num_edges(),
        t.elapsed().as_secs_f64() * 1e3
    );

    // A hot square in the middle of a cold plate.
    let mut x: Vec<f32> = (0..n * n)
        .map(|i| {
            let (r, c) = (i / n, i % n);
            if (400..600).contains(&r) && (400..600).contains(&c) {
                1.0
            } else {
                0.0
            }
        })
        .collect();
    let mut reference = x.clone();

    let kernel = Smoothing::kernel();
    let t = Instant::now();
    kernel.variant(tiga::DType::F32, &[], graph.edge_ids().is_some())?;
    let compile_ms = t.elapsed().as_secs_f64() * 1e3;

    let mut times = Vec::new();
    for _ in 0..steps {
        let t = Instant::now();
        let out = kernel.run(&graph, &Inputs::new().src("x", &x))?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        x = out.out().and_then(|o| o.as_f32()).ok_or("the kernel returned no f32 output")?.to_vec();
        reference = jacobi_by_hand(n, &reference);
    }
    times.sort_by(f64::total_cmp);
    let max_diff = x.iter().zip(&reference).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    let heat: f64 = x.iter().map(|&v| f64::from(v)).sum();
    println!("kernel: Smoothing, JIT compile {compile_ms:.2} ms, {steps} steps, median {:.2} ms per step", times[steps / 2]);
    println!(
        "checked: after {steps} steps, tiga and a hand-written grid loop differ by at most {max_diff:e} (bit-identical: {})",
        max_diff == 0.0
    );
    println!("checked: total heat {heat:.3} (started at 40000, a cold border drains it slowly)");
    if max_diff != 0.0 {
        return Err(format!("tiga's result differs from the hand-written loop by {max_diff}").into());
    }
    Ok(())
}
