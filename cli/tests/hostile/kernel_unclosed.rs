#[message_passing(reduce = sum)]
pub mod M {
    pub fn edge(