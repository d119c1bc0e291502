// The kernels tiga.nn's layers run (beside those of examples/kernels/gnn.rs:
// VecSum for GIN, SageMean for GraphSAGE, GatAttention for GAT). Shipped in
// the Python package, compiled on first use.

/// out[i] = Σ_{e=j→i} w[e] · h[j]   (GCN: w the normalized edge weights)
#[message_passing(reduce = sum)]
pub mod WeightedSum {
    use tiga::lang::*;
    pub struct Src {
        pub h: Vector<f32>,
    }
    pub struct Edge {
        pub w: f32,
    }
    pub fn edge(src: &Src, edge: &Edge) -> Vector<f32> {
        edge.w * &src.h
    }
}
