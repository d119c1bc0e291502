use tiga::message_passing;

#[message_passing(reduce = sum)]
pub mod K {
    use tiga::lang::*;
    pub struct Src {
        pub x: f32,
    }
    pub fn edge(src: &Src) -> f32 {
        src.x.cosh()
    }
}

fn main() {}
