// A min pooling kernel, beside gnn.rs's max (gnn.rs has no min): the
// saved-residual tests (tiga/tests/residuals.rs) and `tiga-bench
// residuals` read it as a kernel file (the JIT) and include it under
// `#[message_passing]` (the macro's ahead-of-time variants).

/// out[i] = min_{j→i} h[j], elementwise   (an empty row gives 0)
#[message_passing(reduce = min)]
pub mod MinPool {
    use tiga::lang::*;
    pub struct Src {
        pub h: Vector<f32>,
    }
    pub fn edge(src: &Src) -> Vector<f32> {
        src.h.clone()
    }
}
