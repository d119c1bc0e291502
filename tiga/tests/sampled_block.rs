//! A sampled mini-batch (`sampling::sample_mini_batch`) is a graph kernels
//! run on: with every edge taken at every hop (fanout −1), `L` layers of a
//! kernel over the block give the seeds the rows that `L` layers over the
//! whole graph give them, since the block then holds each seed's whole
//! `L`-hop neighbourhood. With a fanout, each seed row sums exactly the
//! neighbours the block lists for it.

use tiga::runtime::sampling::{epoch_order, sample_mini_batch};
use tiga::{Graph, Inputs, Kernel, Tensor};

const GNN: &str = include_str!("../../examples/kernels/gnn.rs");

fn graph(n: usize) -> Graph {
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    for i in 0..n {
        for d in [1, 4, 9, 30] {
            if (i + d) % 3 != 0 {
                src.push(((i * 7 + d) % n) as u32);
                dst.push(i as u32);
            }
        }
    }
    Graph::from_edges(n, n, &src, &dst).expect("graph")
}

fn values(len: usize, seed: usize) -> Vec<f64> {
    (0..len).map(|i| (((i * 7919 + seed * 104729) % 1009) as f64) / 1009.0 - 0.5).collect()
}

fn rows(t: &Tensor, f: usize, ids: impl Iterator<Item = usize>) -> Vec<f64> {
    let v = t.as_f64().expect("f64");
    ids.flat_map(|i| v[i * f..(i + 1) * f].to_vec()).collect()
}

#[test]
fn layers_over_a_full_block_equal_layers_over_the_graph_at_the_seeds() {
    let (n, f) = (400, 3);
    let g = graph(n);
    let k = Kernel::from_source(GNN, "VecSum").expect("kernel");
    let h = Tensor::from_f64(vec![n, f], values(n * f, 1)).expect("h");
    let seeds: Vec<u32> = epoch_order(n, 5, 0).into_iter().take(17).map(|i| i as u32).collect();
    let b = sample_mini_batch(&g, &seeds, &[-1, -1], 3, None, None).expect("sample");
    assert_eq!(b.num_seeds, seeds.len());
    assert_eq!(&b.nodes[..seeds.len()], seeds.iter().map(|&s| i64::from(s)).collect::<Vec<_>>().as_slice());
    let two = |r: &dyn tiga::Realization, x: &Tensor| {
        let once = k.run(r, &Inputs::new().src("h", x)).expect("layer 1");
        let once = once.out().expect("out").clone();
        k.run(r, &Inputs::new().src("h", &once)).expect("layer 2").out().expect("out").clone()
    };
    let full = two(&g, &h);
    let local_h = Tensor::from_f64(vec![b.nodes.len(), f], rows(&h, f, b.nodes.iter().map(|&i| i as usize))).expect("h");
    let block = two(&b, &local_h);
    let want = rows(&full, f, seeds.iter().map(|&s| s as usize));
    let got = rows(&block, f, 0..seeds.len());
    for (a, w) in got.iter().zip(&want) {
        assert!((a - w).abs() <= 1e-12 * w.abs().max(1.0), "{a} vs {w}");
    }
}

#[test]
fn a_fanout_block_sums_the_listed_neighbours() {
    let (n, f) = (300, 2);
    let g = graph(n);
    let k = Kernel::from_source(GNN, "VecSum").expect("kernel");
    let seeds: Vec<u32> = (0..40).map(|i| (i * 7) as u32).collect();
    let b = sample_mini_batch(&g, &seeds, &[2, 2], 11, None, None).expect("sample");
    let local = b.nodes.len();
    let x = Tensor::from_f64(vec![local, f], values(local * f, 2)).expect("x");
    let out = k.run(&b, &Inputs::new().src("h", &x)).expect("run");
    let out = out.out().expect("out").as_f64().expect("f64");
    let xv = x.as_f64().expect("f64");
    let mut want = vec![0.0; local * f];
    for hop in &b.hops {
        assert!(hop.src.len() <= 2 * local);
        for (&s, &d) in hop.src.iter().zip(&hop.dst) {
            for c in 0..f {
                want[d as usize * f + c] += xv[s as usize * f + c];
            }
        }
    }
    for (a, w) in out.iter().zip(&want) {
        assert!((a - w).abs() <= 1e-12, "{a} vs {w}");
    }
    // Each seed has at most two sampled neighbours at hop 0.
    let mut per = vec![0usize; seeds.len()];
    for &d in &b.hops[0].dst {
        per[d as usize] += 1;
    }
    assert!(per.iter().all(|&c| c <= 2) && per.contains(&2));
}
