//! Gradients: `kernel.grad(&graph, &inputs, "out")` is the gradient of
//! `sum(out)` with respect to every input, computed by the adjoint stages
//! tiga builds from the kernel (ordinary kernels over the forward and the
//! transposed graph, JIT-compiled like any other).
//!
//! The example checks two closed forms, in f32 and in f64, and fails (a
//! non-zero exit) if either is violated:
//!
//! - on an 8-node ring where each node sums itself and its two neighbours,
//!   every x[j] reaches exactly three outputs, so d sum(out) / dx = 3;
//! - with out[i] = x[i]·x[i] (one self loop per node), d sum(out) / dx = 2x.
//!
//! It then prints the backward/forward time ratio of a sum aggregation at
//! F = 64 on a random graph of 100k nodes and 1.6M edges (informative only).

use std::time::Instant;

use tiga::{message_passing, DType, Graph, Inputs, Tensor};

/// out[i] = Σ_{j→i} x[j]; on the ring, j ∈ {i-1, i, i+1} mod 8.
#[message_passing(reduce = sum)]
pub mod RingSum {
    use tiga::lang::*;
    pub struct Src {
        pub x: f32,
    }
    pub fn edge(src: &Src) -> f32 {
        src.x
    }
}

/// out[i] = Σ_{j→i} x[j]·x[j]; with one self loop per node, out[i] = x[i]².
#[message_passing(reduce = sum)]
pub mod Square {
    use tiga::lang::*;
    pub struct Src {
        pub x: f32,
    }
    pub fn edge(src: &Src) -> f32 {
        src.x * src.x
    }
}

/// out[i] = Σ_{j→i} h[j], h of width F.
#[message_passing(reduce = sum)]
pub mod VecSum {
    use tiga::lang::*;
    pub struct Src {
        pub h: Vector<f32>,
    }
    pub fn edge(src: &Src) -> Vector<f32> {
        src.h.clone()
    }
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn tensor(dtype: DType, shape: Vec<usize>, data: &[f64]) -> Res<Tensor> {
    Ok(match dtype {
        DType::F32 => Tensor::from_f32(shape, data.iter().map(|&v| v as f32).collect())?,
        DType::F64 => Tensor::from_f64(shape, data.to_vec())?,
    })
}

/// The 8-node ring: edges j→i for j ∈ {i-1, i, i+1} mod 8 (self loops included).
fn ring(n: usize) -> Res<Graph> {
    let mut src = Vec::new();
    let mut dst = Vec::new();
    for i in 0..n {
        for j in [(i + n - 1) % n, i, (i + 1) % n] {
            src.push(j as u32);
            dst.push(i as u32);
        }
    }
    Ok(Graph::from_edges(n, n, &src, &dst)?)
}

fn check_ring(dtype: DType) -> Res<()> {
    let n = 8;
    let g = ring(n)?;
    let x: Vec<f64> = (0..n).map(|i| 0.5 * i as f64 - 1.25).collect();
    let xt = tensor(dtype, vec![n], &x)?;
    let grads = RingSum::kernel().grad(&g, &Inputs::new().src("x", &xt), "out")?;
    let gx = grads.src("x").ok_or("no gradient for src.x")?;
    if gx.dtype() != dtype {
        return Err(format!("RingSum {dtype}: the gradient is {}, expected {dtype}", gx.dtype()).into());
    }
    let gx = gx.to_f64_vec();
    if gx.len() != n {
        return Err(format!("RingSum {dtype}: gradient has {} entries, expected {n}", gx.len()).into());
    }
    for (j, &v) in gx.iter().enumerate() {
        if v != 3.0 {
            return Err(format!("RingSum {dtype}: d sum(out) / dx[{j}] = {v}, expected 3").into());
        }
    }
    println!("checked ({dtype}): RingSum on an 8-node ring ({} edges, self loops included): d sum(out)/dx = 3 for all {n} nodes, exactly", g.num_edges());
    Ok(())
}

fn check_square(dtype: DType) -> Res<()> {
    let n = 8;
    // One in-edge per node, from itself.
    let ids: Vec<u32> = (0..n as u32).collect();
    let g = Graph::from_edges(n, n, &ids, &ids)?;
    let x: Vec<f64> = (0..n).map(|i| 0.75 * i as f64 - 2.5).collect();
    let xt = tensor(dtype, vec![n], &x)?;
    let k = Square::kernel();
    let inputs = Inputs::new().src("x", &xt);
    // The forward first: out = x², so the closed form below is about this kernel.
    let out = k.run(&g, &inputs)?;
    let out = out.out().ok_or("no output")?.to_f64_vec();
    let grads = k.grad(&g, &inputs, "out")?;
    let gx = grads.src("x").ok_or("no gradient for src.x")?;
    if gx.dtype() != dtype {
        return Err(format!("Square {dtype}: the gradient is {}, expected {dtype}", gx.dtype()).into());
    }
    let gx = gx.to_f64_vec();
    // x is exactly representable in f32, so x², 2x are exact in either dtype.
    let xr = xt.to_f64_vec();
    if out.len() != n || gx.len() != n {
        return Err(format!("Square {dtype}: {} outputs and {} gradient entries, expected {n}", out.len(), gx.len()).into());
    }
    for (i, &xi) in xr.iter().enumerate() {
        if out[i] != xi * xi {
            return Err(format!("Square {dtype}: out[{i}] = {}, expected x² = {}", out[i], xi * xi).into());
        }
        if gx[i] != 2.0 * xi {
            return Err(format!("Square {dtype}: d sum(out) / dx[{i}] = {}, expected 2x = {}", gx[i], 2.0 * xi).into());
        }
    }
    println!(
        "checked ({dtype}): Square (out = x·x over self loops): out = x² and d sum(out)/dx[i] = 2·x[i] for all {n} nodes (x from {} to {}), exactly",
        xr[0],
        xr[n - 1]
    );
    Ok(())
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn time_backward_vs_forward() -> Res<()> {
    let (n, ne, f) = (100_000usize, 1_600_000usize, 64usize);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let src: Vec<u32> = (0..ne).map(|_| (rng.next() % n as u64) as u32).collect();
    let dst: Vec<u32> = (0..ne).map(|_| (rng.next() % n as u64) as u32).collect();
    let g = Graph::from_edges(n, n, &src, &dst)?;
    let h: Vec<f32> = (0..n * f).map(|i| ((i % 97) as f32) * 0.01 - 0.5).collect();
    let ht = Tensor::from_f32(vec![n, f], h)?;
    let inputs = Inputs::new().src("h", &ht);
    let k = VecSum::kernel();
    // Warm up: JIT-compile the forward and the adjoint stages, build the
    // transposed graph.
    k.run(&g, &inputs)?;
    k.grad(&g, &inputs, "out")?;
    let runs = 5;
    let mut fwd = Vec::new();
    let mut bwd = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let out = k.run(&g, &inputs)?;
        fwd.push(t.elapsed().as_secs_f64() * 1e3);
        drop(out);
        let t = Instant::now();
        let gr = k.grad(&g, &inputs, "out")?;
        bwd.push(t.elapsed().as_secs_f64() * 1e3);
        drop(gr);
    }
    let (mf, mb) = (median(fwd), median(bwd));
    println!(
        "timing (informative, not checked): VecSum f32, F = {f}, random graph of {n} nodes and {} edges: forward {mf:.2} ms, grad {mb:.2} ms (median of {runs}), backward/forward = {:.2}",
        g.num_edges(),
        mb / mf
    );
    Ok(())
}

fn main() -> Res<()> {
    for dtype in [DType::F32, DType::F64] {
        check_ring(dtype)?;
        check_square(dtype)?;
    }
    time_backward_vs_forward()?;
    Ok(())
}
