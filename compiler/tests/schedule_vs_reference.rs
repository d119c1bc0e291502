//! Every kernel of gnn.rs, through the passes and the scheduler, evaluated by
//! the loop-IR evaluator, against the reference interpreter on random graphs
//! with empty rows, self loops, multi-edges and a bipartite shape.

use tiga_compiler::front::parse_kernel_file;
use tiga_compiler::interp::{interpret, Array};
use tiga_compiler::ir::{Role, Type};
use tiga_compiler::loops::{eval::eval_loop_kernel, schedule};
use tiga_compiler::passes::run_pipeline;

const GNN: &str = include_str!("../../examples/kernels/gnn.rs");

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn f(&mut self) -> f64 {
        (self.next() % 2000) as f64 / 1000.0 - 1.0
    }
}

fn csr(num_dst: usize, edges: &[(u32, u32)]) -> (Vec<u64>, Vec<u32>, Vec<u64>) {
    let mut order: Vec<usize> = (0..edges.len()).collect();
    order.sort_by_key(|&e| edges[e].1);
    let mut off = vec![0u64; num_dst + 1];
    for &(_, d) in edges {
        off[d as usize + 1] += 1;
    }
    for i in 0..num_dst {
        off[i + 1] += off[i];
    }
    let cols = order.iter().map(|&e| edges[e].0).collect();
    let ids = order.iter().map(|&e| e as u64).collect();
    (off, cols, ids)
}

#[test]
fn scheduled_kernels_match_reference() {
    let ks = parse_kernel_file(GNN).expect("parses");
    let mut rng = Rng(0x1234_5678_9abc);
    for (num_src, num_dst, ne) in [(7usize, 7usize, 20usize), (5, 9, 12), (1, 1, 3), (6, 6, 0)] {
        let mut edges: Vec<(u32, u32)> =
            (0..ne).map(|_| ((rng.next() % num_src as u64) as u32, (rng.next() % (num_dst as u64 - 1).max(1)) as u32)).collect();
        if ne > 3 {
            edges.push(edges[0]); // a multi-edge
            edges.push((0, 0)); // a self loop
        }
        let (off, cols, ids) = csr(num_dst, &edges);
        let f = 3usize;
        for k in &ks {
            let fields: Vec<Array> = k
                .fields
                .iter()
                .map(|fd| {
                    let rows = match fd.role {
                        Role::Src => Some(num_src),
                        Role::Dst => Some(num_dst),
                        Role::Edge => Some(edges.len()),
                        Role::Param => None,
                    };
                    let shape = match (rows, fd.ty) {
                        (Some(n), Type::Scalar) => vec![n],
                        (Some(n), _) => vec![n, f],
                        (None, Type::Scalar) => vec![1],
                        (None, Type::Vector(_)) => vec![f],
                        (None, _) => vec![f, f],
                    };
                    let len = shape.iter().product();
                    Array::new(shape, (0..len).map(|_| rng.f()).collect())
                })
                .collect();
            let want = interpret(k, num_src, num_dst, &edges, &fields).expect("reference runs");
            let compiled = run_pipeline(k.clone()).expect("passes");
            let lk = schedule(&compiled.lowered).expect("schedules");
            let mut got: Vec<Array> = want.iter().map(|a| Array::new(a.shape.clone(), vec![f64::NAN; a.data.len()])).collect();
            eval_loop_kernel(&lk, &[f; 4][..k.widths.len()], &off, &cols, Some(&ids), &fields, &mut got);
            for (w, g) in want.iter().zip(&got) {
                for (x, y) in w.data.iter().zip(&g.data) {
                    assert!((x - y).abs() <= 1e-12 * (1.0 + x.abs()), "{}: {x} vs {y}\n{lk}", k.name);
                }
            }
        }
    }
}
