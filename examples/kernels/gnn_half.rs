// Half-precision kernels, in one kernel file: fields stored as bf16 or f16,
// computed and accumulated in f32, outputs in the declared type (rounded
// to nearest even). `tigac` reads this file directly, and the tests
// include it under `#[message_passing]`.

/// out[i] = Σ_{j→i} h[j], h stored as bf16, out in f32.
#[message_passing(reduce = sum)]
pub mod HalfVecSum {
    use tiga::lang::*;
    pub struct Src {
        pub h: Vector<bf16>,
    }
    pub fn edge(src: &Src) -> Vector<f32> {
        src.h.clone()
    }
}

/// out[i] = cd[i] · Σ_{e=j→i} w[e] · cs[j] · h[j]; h and w in f16, the
/// output stored as bf16.
#[message_passing(reduce = sum)]
pub mod HalfGcnNorm {
    use tiga::lang::*;
    pub struct Src {
        pub h: Vector<f16>,
        pub cs: f32,
    }
    pub struct Dst {
        pub cd: f32,
    }
    pub struct Edge {
        pub w: f16,
    }
    pub fn edge(src: &Src, edge: &Edge) -> Vector<f32> {
        edge.w * src.cs * &src.h
    }
    pub fn node(dst: &Dst, agg: Vector<f32>) -> Vector<bf16> {
        dst.cd * agg
    }
}

/// out[i] = max_{j→i} relu(h[j]) in bf16, in and out.
#[message_passing(reduce = max)]
pub mod HalfMaxPool {
    use tiga::lang::*;
    pub struct Src {
        pub h: Vector<bf16>,
    }
    pub fn edge(src: &Src) -> Vector<bf16> {
        relu(&src.h)
    }
}

/// s_e = leaky_relu(a_src[j] + a_dst[i], 0.2);
/// out[i] = Σ_{e=j→i} softmax_i(s)_e · h[j], h in f16, out in f16.
#[message_passing(reduce = softmax)]
pub mod HalfGatAttention {
    use tiga::lang::*;
    pub struct Src {
        pub h: Vector<f16>,
        pub a_src: f32,
    }
    pub struct Dst {
        pub a_dst: f32,
    }
    pub fn edge(src: &Src, dst: &Dst) -> (f32, Vector<f16>) {
        (leaky_relu(src.a_src + dst.a_dst, 0.2), src.h.clone())
    }
}
