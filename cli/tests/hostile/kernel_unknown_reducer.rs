#[message_passing(reduce = median)]
pub mod M {
    use tiga::lang::*;
    pub struct Src { pub x: f32 }
    pub fn edge(src: &Src) -> f32 { src.x }
}
