// Kernels with small dense parameters (matrix-vector products), in one
// kernel file that `tigac` reads and the tests include.

/// out[i] = g[i] ⊙ Σ_{j→i} tanh(W·h[j] + b) + W·g[i]   (W: [F, F], b: [F])
#[message_passing(reduce = sum)]
pub mod Linear {
    use tiga::lang::*;
    pub struct Src {
        pub h: Vector<f32>,
    }
    pub struct Dst {
        pub g: Vector<f32>,
    }
    pub struct Params {
        pub w: Matrix<f32>,
        pub b: Vector<f32>,
    }
    pub fn edge(src: &Src, params: &Params) -> Vector<f32> {
        tanh(matvec(&params.w, &src.h) + &params.b)
    }
    pub fn node(dst: &Dst, params: &Params, agg: Vector<f32>) -> Vector<f32> {
        agg * &dst.g + matvec(&params.w, &dst.g)
    }
}
