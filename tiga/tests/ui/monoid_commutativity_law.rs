use tiga::message_passing;

// Composition of affine maps x -> a x + b: associative, with the identity
// map, but not commutative.
#[message_passing(reduce = monoid(associative, commutative))]
pub mod K {
    use tiga::lang::*;
    pub struct Src {
        pub x: f32,
    }
    pub fn edge(src: &Src) -> (f32, f32) {
        (src.x, 1.0)
    }
    pub fn identity() -> (f32, f32) {
        (1.0, 0.0)
    }
    pub fn combine(a: (f32, f32), b: (f32, f32)) -> (f32, f32) {
        (a.0 * b.0, a.0 * b.1 + a.1)
    }
    pub fn finalize(s: (f32, f32)) -> f32 {
        s.0 + s.1
    }
}

fn main() {}
