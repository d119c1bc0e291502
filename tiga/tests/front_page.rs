//! The README's front-page example, as it is printed there: the test
//! below holds the README's Rust block line for line (checked by
//! `the_readme_shows_this_code`), runs it, and checks its outputs and
//! gradients against the closed form out[d] = Σ_{e=s→d} w[e]·h[s].

use tiga::{from_edge_index, message_passing, Inputs, Tensor};

/// out[i] = Σ_{e=j→i} w[e] · h[j]
#[message_passing(reduce = sum)]
#[rustfmt::skip]
pub mod WeightedSum {
    use tiga::lang::*;
    pub struct Src { pub h: Vector<f32> }
    pub struct Edge { pub w: f32 }
    pub fn edge(src: &Src, edge: &Edge) -> Vector<f32> { edge.w * &src.h }
}

#[rustfmt::skip]
fn front_page() -> Result<(tiga::Outputs, tiga::Gradients), Box<dyn std::error::Error>> {
let g = from_edge_index(3, &[0, 1, 2, 1, 2, 0])?;          // PyG's edge_index: 0→1, 1→2, 2→0
let h = Tensor::from_f32(vec![3, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])?;  // 3 nodes × 2 features
let inputs = Inputs::new().src("h", &h).edge("w", &[0.5f32, 1.0, 2.0]);
let out = WeightedSum::kernel().run(&g, &inputs)?;         // out[1] = 0.5·h[0] = [0.5, 1.0]
let grads = WeightedSum::kernel().grad(&g, &inputs, "out")?; // ∂Σout/∂h = [0.5, 0.5, 1, 1, 2, 2], derived
    Ok((out, grads))
}

#[test]
fn the_front_page_example_computes_its_closed_form() {
    let (out, grads) = front_page().expect("the README example runs");
    let (src, dst, w) = ([0usize, 1, 2], [1usize, 2, 0], [0.5f32, 1.0, 2.0]);
    let h = [[1.0f32, 2.0], [3.0, 4.0], [5.0, 6.0]];
    let mut want = [[0.0f32; 2]; 3];
    let mut dh = [[0.0f32; 2]; 3];
    let mut dw = [0.0f32; 3];
    for e in 0..3 {
        for k in 0..2 {
            want[dst[e]][k] += w[e] * h[src[e]][k];
            dh[src[e]][k] += w[e];
            dw[e] += h[src[e]][k];
        }
    }
    assert_eq!(out.f32("out").expect("out"), want.concat().as_slice());
    assert_eq!(grads.src("h").expect("dh").as_f32().expect("f32"), dh.concat().as_slice());
    assert_eq!(grads.edge("w").expect("dw").as_f32().expect("f32"), dw.as_slice());
}

/// The README's first Rust block, line for line, is the code above: the
/// front page cannot drift from what this test runs.
#[test]
fn the_readme_shows_this_code() {
    let readme = include_str!("../../README.md");
    let block: Vec<&str> = readme
        .split("```rust\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("the README has a Rust block")
        .lines()
        .collect();
    let here: Vec<&str> = include_str!("front_page.rs").lines().collect();
    let missing: Vec<&&str> = block.iter().filter(|l| !l.is_empty() && !here.contains(l)).collect();
    assert!(missing.is_empty(), "README lines this test does not run: {missing:#?}");
    // The block's lines come in the same order here.
    let positions: Vec<usize> =
        block.iter().filter(|l| !l.is_empty()).map(|l| here.iter().position(|h| h == l).unwrap_or(0)).collect();
    assert!(positions.windows(2).all(|p| p[0] < p[1]), "README lines out of order: {positions:?}");
}
