use tiga::message_passing;

#[message_passing(reduce = sum)]
pub mod K {
    use tiga::lang::*;
    pub struct Src {
        pub h: Vector<f32>,
    }
    pub fn edge(src: &Src) -> f32 {
        let mut acc = 0.0;
        for v in src.h.iter() {
            acc += *v;
        }
        acc
    }
}

fn main() {}
