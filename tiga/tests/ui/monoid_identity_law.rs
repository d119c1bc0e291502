use tiga::message_passing;

#[message_passing(reduce = monoid(associative, commutative))]
pub mod K {
    use tiga::lang::*;
    pub struct Src {
        pub x: f32,
    }
    pub fn edge(src: &Src) -> f32 {
        src.x
    }
    pub fn identity() -> f32 {
        1.0
    }
    pub fn combine(a: f32, b: f32) -> f32 {
        a + b
    }
}

fn main() {}
