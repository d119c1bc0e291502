use tiga::message_passing;

#[message_passing(reduce = sum)]
pub mod K {
    use tiga::lang::*;
    pub struct Dst {
        pub d: f32,
    }
    pub fn node(dst: &Dst, agg: f32) -> f32 {
        dst.d * agg
    }
}

fn main() {}
