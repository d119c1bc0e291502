// The canonical GNN kernels, in one kernel file.
//
// `tigac` reads this file directly (`tigac explain examples/kernels/gnn.rs
// --kernel GcnNorm`), and the examples and tests include it under
// `#[message_passing]`, so both paths compile the same text.
//
// Every field is `f32`; `h` is a vector field of width F, the rest are
// scalars; the output is `out`; j→i is an edge from source j to destination i.

/// out[i] = Σ_{j→i} x[j]
#[message_passing(reduce = sum)]
pub mod NeighborSum {
    use tiga::lang::*;
    pub struct Src {
        pub x: f32,
    }
    pub fn edge(src: &Src) -> f32 {
        src.x
    }
}

/// out[i] = 0.25 · Σ_{j→i} x[j]
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

/// out[i] = Σ_{j→i} h[j]
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

/// out[i] = cd[i] · Σ_{e=j→i} w[e] · cs[j] · h[j]
#[message_passing(reduce = sum)]
pub mod GcnNorm {
    use tiga::lang::*;
    pub struct Src {
        pub h: Vector<f32>,
        pub cs: f32,
    }
    pub struct Dst {
        pub cd: f32,
    }
    pub struct Edge {
        pub w: f32,
    }
    pub fn edge(src: &Src, edge: &Edge) -> Vector<f32> {
        edge.w * src.cs * &src.h
    }
    pub fn node(dst: &Dst, agg: Vector<f32>) -> Vector<f32> {
        dst.cd * agg
    }
}

/// out[i] = mean_{j→i} h[j]   (an empty row gives 0)
#[message_passing(reduce = mean)]
pub mod SageMean {
    use tiga::lang::*;
    pub struct Src {
        pub h: Vector<f32>,
    }
    pub fn edge(src: &Src) -> Vector<f32> {
        src.h.clone()
    }
}

/// out[i] = max_{j→i} relu(h[j]), elementwise   (an empty row gives 0)
#[message_passing(reduce = max)]
pub mod MaxPool {
    use tiga::lang::*;
    pub struct Src {
        pub h: Vector<f32>,
    }
    pub fn edge(src: &Src) -> Vector<f32> {
        relu(&src.h)
    }
}

/// out[i] = 1.1 · h_dst[i] + Σ_{j→i} h[j]
#[message_passing(reduce = sum)]
pub mod GinSum {
    use tiga::lang::*;
    pub struct Src {
        pub h: Vector<f32>,
    }
    pub struct Dst {
        pub h: Vector<f32>,
    }
    pub fn edge(src: &Src) -> Vector<f32> {
        src.h.clone()
    }
    pub fn node(dst: &Dst, agg: Vector<f32>) -> Vector<f32> {
        1.1 * &dst.h + agg
    }
}

/// s_e = leaky_relu(a_src[j] + a_dst[i], 0.2);
/// out[i] = Σ_{e=j→i} softmax_i(s)_e · h[j]
#[message_passing(reduce = softmax)]
pub mod GatAttention {
    use tiga::lang::*;
    pub struct Src {
        pub h: Vector<f32>,
        pub a_src: f32,
    }
    pub struct Dst {
        pub a_dst: f32,
    }
    pub fn edge(src: &Src, dst: &Dst) -> (f32, Vector<f32>) {
        (leaky_relu(src.a_src + dst.a_dst, 0.2), src.h.clone())
    }
}

/// A user monoid keeping the two largest incoming x[j];
/// out[i] = largest + second largest (one edge: that value; none: 0).
#[message_passing(reduce = monoid(associative, commutative))]
pub mod Top2Sum {
    use tiga::lang::*;
    pub struct Src {
        pub x: f32,
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

/// out[i] = Σ_{e=j→i} sigmoid(dot(p, h[j]) + w[e]) · h[j]   (param p of width F)
#[message_passing(reduce = sum)]
pub mod EdgeGate {
    use tiga::lang::*;
    pub struct Src {
        pub h: Vector<f32>,
    }
    pub struct Edge {
        pub w: f32,
    }
    pub struct Params {
        pub p: Vector<f32>,
    }
    pub fn edge(src: &Src, edge: &Edge, params: &Params) -> Vector<f32> {
        sigmoid(dot(&params.p, &src.h) + edge.w) * &src.h
    }
}
