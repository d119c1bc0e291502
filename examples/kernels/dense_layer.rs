// A dense layer as message passing over the identity graph: the shape of
// every linear layer inside a kernel (the dense benchmark times its
// matrix-parameter gradient against its forward).

/// out[i] = W·h[i]   (W: [F, F])
#[message_passing(reduce = sum)]
pub mod Dense {
    use tiga::lang::*;
    pub struct Src {
        pub h: Vector<f32>,
    }
    pub struct Params {
        pub w: Matrix<f32>,
    }
    pub fn edge(src: &Src, params: &Params) -> Vector<f32> {
        matvec(&params.w, &src.h)
    }
}
