//! The benchmark's graphs and fields, generated in this process.
//!
//! Every number in a run must come from the same inputs, so the graphs are
//! built here rather than read from files another tool wrote: the stencil is
//! the runtime's own `Graph::stencil_2d_4`, and the power-law graph follows
//! `bench/peers/make_graph.py` (sources Zipf-like with exponent 1.1 over a
//! random permutation of the nodes, destinations uniform, rows sorted by
//! destination with the generation order kept inside a row, duplicates kept)
//! with a small inline RNG, so no crate is needed and a seed always gives
//! the same graph. The draws are split into a fixed number of chunks, each
//! with its own stream, so the graph does not depend on the thread count.
//! The numbers differ from numpy's (another generator), the law does not.

use rayon::prelude::*;
use tiga_runtime::{Graph, GraphError};

/// SplitMix64: tiny, fast, good enough to draw a benchmark graph.
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64) -> SplitMix {
        SplitMix(seed)
    }

    /// An independent stream for chunk `k` of a seeded job.
    pub fn stream(seed: u64, k: u64) -> SplitMix {
        let mut s = SplitMix(seed ^ k.wrapping_add(1).wrapping_mul(0xD1B5_4A32_D192_ED03));
        s.next_u64();
        s
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in 0..n (multiply-shift; the bias is below 2^-32 for our n).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// Draws are made in this many chunks whatever the thread count.
const CHUNKS: usize = 64;

/// The 2-D four-neighbour grid, not periodic (what `make_graph.py stencil`
/// writes): node `r·side + c` receives from up, down, left, right.
pub fn stencil(side: usize) -> Result<Graph, GraphError> {
    Graph::stencil_2d_4(side, side)
}

/// The power-law graph: `edges` edges over `nodes` nodes, CSR by destination.
pub fn powerlaw(nodes: usize, edges: usize, seed: u64) -> Result<Graph, GraphError> {
    assert!(nodes > 0 && nodes <= u32::MAX as usize, "node ids are u32");
    // Inverse-CDF table of the Zipf-like law p(k) ∝ k^-1.1, k = 1..=nodes.
    let mut cdf = Vec::with_capacity(nodes);
    let mut total = 0.0f64;
    for k in 1..=nodes {
        total += (k as f64).powf(-1.1);
        cdf.push(total);
    }
    // A random permutation, so the heavy sources are scattered over the ids.
    let mut rng = SplitMix::new(seed);
    let mut perm: Vec<u32> = (0..nodes as u32).collect();
    for i in (1..nodes).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        perm.swap(i, j);
    }
    let per = edges.div_ceil(CHUNKS).max(1);
    let mut src = vec![0u32; edges];
    let mut dst = vec![0u32; edges];
    src.par_chunks_mut(per).zip(dst.par_chunks_mut(per)).enumerate().for_each(|(k, (s, d))| {
        let mut rng = SplitMix::stream(seed, k as u64);
        for (s, d) in s.iter_mut().zip(d.iter_mut()) {
            let u = rng.unit() * total;
            let rank = cdf.partition_point(|&c| c <= u).min(nodes - 1);
            *s = perm[rank];
            *d = rng.below(nodes as u64) as u32;
        }
    });
    // Stable counting sort by destination (make_graph.py: argsort, stable).
    let mut offsets = vec![0u64; nodes + 1];
    for &d in &dst {
        offsets[d as usize + 1] += 1;
    }
    for i in 0..nodes {
        offsets[i + 1] += offsets[i];
    }
    let mut cursor = offsets[..nodes].to_vec();
    let mut cols = vec![0u32; edges];
    for (&s, &d) in src.iter().zip(&dst) {
        let c = &mut cursor[d as usize];
        cols[*c as usize] = s;
        *c += 1;
    }
    Graph::from_csr(nodes, nodes, offsets, cols)
}

/// `len` values uniform in [-1, 1).
pub fn uniform(len: usize, seed: u64) -> Vec<f32> {
    let mut v = vec![0.0f32; len];
    let per = len.div_ceil(CHUNKS).max(1);
    v.par_chunks_mut(per).enumerate().for_each(|(k, c)| {
        let mut rng = SplitMix::stream(seed, k as u64);
        c.iter_mut().for_each(|x| *x = (rng.unit() * 2.0 - 1.0) as f32);
    });
    v
}

/// `len` standard normal values (Box–Muller), like `rng.normal` in make_graph.py.
pub fn normal(len: usize, seed: u64) -> Vec<f32> {
    let mut v = vec![0.0f32; len];
    let per = len.div_ceil(CHUNKS).max(1);
    v.par_chunks_mut(per).enumerate().for_each(|(k, c)| {
        let mut rng = SplitMix::stream(seed, k as u64);
        c.iter_mut().for_each(|x| {
            let u1 = 1.0 - rng.unit(); // (0, 1]
            let u2 = rng.unit();
            *x = ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32;
        });
    });
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn powerlaw_is_deterministic_and_skewed() {
        let a = powerlaw(1000, 20_000, 7).expect("valid graph");
        let b = powerlaw(1000, 20_000, 7).expect("valid graph");
        assert_eq!(a, b);
        assert_eq!(a.num_edges(), 20_000);
        // The most frequent source takes about 1/H(1000, 1.1) ≈ 16% of edges.
        let mut count = vec![0usize; 1000];
        a.cols().iter().for_each(|&c| count[c as usize] += 1);
        let top = count.iter().max().copied().unwrap_or(0);
        assert!((2000..5000).contains(&top), "top source has {top} edges");
    }

    #[test]
    fn fields_do_not_depend_on_threads() {
        let a = uniform(10_000, 3);
        let b = rayon::ThreadPoolBuilder::new().num_threads(1).build().expect("pool").install(|| uniform(10_000, 3));
        assert_eq!(a, b);
        assert!(a.iter().all(|x| (-1.0..1.0).contains(x)));
        let n = normal(10_000, 3);
        let mean = n.iter().map(|&x| f64::from(x)).sum::<f64>() / 1e4;
        assert!(mean.abs() < 0.05, "mean {mean}");
    }
}
