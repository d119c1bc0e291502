#![allow(dead_code)]
//! The tests' random numbers: xorshift64 from a fixed seed, so graphs and
//! values are the same on every machine. Shared by the test suites of the
//! compiler, the facade and `tigac` (included by path).

/// xorshift64.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A value in [-1, 1) on a 1/1000 grid.
    pub fn f(&mut self) -> f64 {
        (self.next() % 2000) as f64 / 1000.0 - 1.0
    }

    /// Uniform in [0, 1), 53 bits.
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [-1, 1) on a 1/500,000 grid.
    pub fn uniform(&mut self) -> f64 {
        (self.next() % 1_000_000) as f64 / 500_000.0 - 1.0
    }
}
