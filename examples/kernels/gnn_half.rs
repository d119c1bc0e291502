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

/// out[i] = Σ_{j→i} x[j], x stored as f16, out in f32.
#[message_passing(reduce = sum)]
pub mod HalfNeighborSum {
    use tiga::lang::*;
    pub struct Src {
        pub x: f16,
    }
    pub fn edge(src: &Src) -> f32 {
        src.x
    }
}

/// out[i] = 0.25 · Σ_{j→i} x[j], x and out in bf16.
#[message_passing(reduce = sum)]
pub mod HalfSmoothing {
    use tiga::lang::*;
    pub struct Src {
        pub x: bf16,
    }
    pub fn edge(src: &Src) -> f32 {
        src.x
    }
    pub fn node(agg: f32) -> bf16 {
        0.25 * agg
    }
}

/// out[i] = mean_{j→i} h[j], h in f16, out in f16.
#[message_passing(reduce = mean)]
pub mod HalfSageMean {
    use tiga::lang::*;
    pub struct Src {
        pub h: Vector<f16>,
    }
    pub fn edge(src: &Src) -> Vector<f16> {
        src.h.clone()
    }
}

/// out[i] = 1.1 · h[i] + Σ_{j→i} h[j]: the source rows in bf16, the
/// destination rows in f16, out in f32.
#[message_passing(reduce = sum)]
pub mod HalfGinSum {
    use tiga::lang::*;
    pub struct Src {
        pub h: Vector<bf16>,
    }
    pub struct Dst {
        pub h: Vector<f16>,
    }
    pub fn edge(src: &Src) -> Vector<f32> {
        src.h.clone()
    }
    pub fn node(dst: &Dst, agg: Vector<f32>) -> Vector<f32> {
        1.1 * &dst.h + agg
    }
}

/// The sum of the two largest x[j] over j→i (a user monoid), x in bf16.
#[message_passing(reduce = monoid(associative, commutative))]
pub mod HalfTop2Sum {
    use tiga::lang::*;
    pub struct Src {
        pub x: bf16,
    }
    pub fn edge(src: &Src) -> (f32, f32) {
        (src.x, f32::NEG_INFINITY)
    }
    pub fn identity() -> (f32, f32) {
        (f32::NEG_INFINITY, f32::NEG_INFINITY)
    }
    pub fn combine(a: (f32, f32), b: (f32, f32)) -> (f32, f32) {
        (max(a.0, b.0), max(min(a.0, b.0), max(a.1, b.1)))
    }
    pub fn finalize(s: (f32, f32)) -> f32 {
        if s.0 == f32::NEG_INFINITY {
            0.0
        } else if s.1 == f32::NEG_INFINITY {
            s.0
        } else {
            s.0 + s.1
        }
    }
}

/// out[i] = Σ_{e=j→i} sigmoid(p · h[j] + w[e]) · h[j]: h in bf16, w in
/// f16, the parameter p in f32, out in bf16.
#[message_passing(reduce = sum)]
pub mod HalfEdgeGate {
    use tiga::lang::*;
    pub struct Src {
        pub h: Vector<bf16>,
    }
    pub struct Edge {
        pub w: f16,
    }
    pub struct Params {
        pub p: Vector<f32>,
    }
    pub fn edge(src: &Src, edge: &Edge, params: &Params) -> Vector<bf16> {
        sigmoid(dot(&params.p, &src.h) + edge.w) * &src.h
    }
}
