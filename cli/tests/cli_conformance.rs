//! Every kernel of examples/kernels/gnn.rs, run by the `tigac` binary on
//! graph and `.npy` files, against the f64 reference interpreter of the
//! facade on the same graph file: f32 and f64, vector widths 3 and 5, on a
//! random edge list (empty rows, trailing isolated nodes, self loops,
//! multi-edges), a bipartite Matrix Market file (rows ≠ columns) and two
//! one-node graphs (a single self loop; no edges at all).
//!
//! The reference reads the graph with the same readers (`read_edge_list`,
//! `read_matrix_market`), so both sides agree on the edge order, which is the
//! order of the lines; edge fields are written in that order. A closed-form
//! check per graph makes sure that order is the one this file wrote.

use std::path::Path;

use tiga::compiler::bind::{field_shape, Extents};
use tiga::compiler::ir::{Role, Type};
use tiga::{DType, Graph, Inputs, Kernel, Tensor};
use tiga_storage::{read_npy, write_npy};

mod common;
use common::*;

/// Every kernel in gnn.rs; `every_kernel_is_covered` keeps the list in step.
const KERNELS: [&str; 10] =
    ["NeighborSum", "Smoothing", "VecSum", "GcnNorm", "SageMean", "MaxPool", "GinSum", "GatAttention", "Top2Sum", "EdgeGate"];

/// A graph file and what it holds: the edges `(src, dst)` in line order.
struct GraphFile {
    name: &'static str,
    file: &'static str,
    text: String,
    num_nodes: Option<usize>,
    num_src: usize,
    num_dst: usize,
    edges: Vec<(usize, usize)>,
}

impl GraphFile {
    fn load(&self, dir: &Path) -> Graph {
        let path = dir.join(self.file);
        let g = if self.file.ends_with(".mtx") {
            tiga::read_matrix_market(&path).expect("read mtx").0
        } else {
            let options = tiga::EdgeListOptions { num_nodes: self.num_nodes, ignore_extra_columns: true };
            tiga::read_edge_list_with(&path, &options).expect("read edge list")
        };
        assert_eq!((g.num_src(), g.num_dst(), g.num_edges()), (self.num_src, self.num_dst, self.edges.len()), "{}", self.name);
        g
    }
}

/// 30 connected ids among 36 nodes: ids 30..36 are isolated (and, being the
/// largest, only exist through `--num-nodes`); destinations 5, 17 and 29
/// receive nothing (empty rows); node 0 and 3 have self loops, one repeated;
/// several edges appear twice. Comments, a blank line, tabs and weight columns
/// are mixed in, as SNAP files have them.
fn random_edge_list(rng: &mut Rng) -> GraphFile {
    let n_ids = 30;
    let num_nodes = 36;
    let mut edges = Vec::new();
    for _ in 0..140 {
        let s = rng.below(n_ids);
        let mut d = rng.below(n_ids);
        while [5, 17, 29].contains(&d) {
            d = rng.below(n_ids);
        }
        edges.push((s, d));
    }
    edges.extend([(0, 0), (3, 3), (3, 3), (29, 4)]);
    for k in [2, 11, 40, 77] {
        let e = edges[k];
        edges.push(e); // multi-edges
    }
    // Shuffle so repeats and self loops are spread through the file.
    for i in (1..edges.len()).rev() {
        let j = rng.below(i + 1);
        edges.swap(i, j);
    }
    let mut text = String::from("# Directed graph: random\n# FromNodeId\tToNodeId\n");
    for (i, (s, d)) in edges.iter().enumerate() {
        match i % 7 {
            0 => text.push_str(&format!("{s}\t{d}\n")),
            1 => text.push_str(&format!("{s} {d} {:.3}\n", rng.uniform())),
            2 => text.push_str(&format!("% a comment\n\n  {s}   {d}\n")),
            _ => text.push_str(&format!("{s} {d}\n")),
        }
    }
    GraphFile {
        name: "random",
        file: "random.txt",
        text,
        num_nodes: Some(num_nodes),
        num_src: num_nodes,
        num_dst: num_nodes,
        edges,
    }
}

/// A 9 × 14 Matrix Market file: 9 destinations (rows), 14 sources
/// (columns). Row 4 is empty, column 8 unused, some entries repeat, and the
/// entries come in no particular order. Entry `i j` is the edge j→i.
fn bipartite_mtx(rng: &mut Rng) -> GraphFile {
    let (rows, cols) = (9, 14);
    let mut edges = Vec::new();
    for _ in 0..45 {
        let mut i = rng.below(rows);
        while i == 3 {
            i = rng.below(rows);
        }
        let mut j = rng.below(cols);
        while j == 7 {
            j = rng.below(cols);
        }
        edges.push((j, i));
    }
    for k in [0, 9, 30] {
        let e = edges[k];
        edges.push(e);
    }
    let mut text = format!("%%MatrixMarket matrix coordinate real general\n% bipartite\n{rows} {cols} {}\n", edges.len());
    for (j, i) in &edges {
        text.push_str(&format!("{} {} {:.4}\n", i + 1, j + 1, rng.uniform()));
    }
    GraphFile { name: "bipartite", file: "bipartite.mtx", text, num_nodes: None, num_src: cols, num_dst: rows, edges }
}

fn one_node_self_loop() -> GraphFile {
    GraphFile {
        name: "one-node",
        file: "one.txt",
        text: "0 0\n".into(),
        num_nodes: None,
        num_src: 1,
        num_dst: 1,
        edges: vec![(0, 0)],
    }
}

fn one_node_no_edges() -> GraphFile {
    GraphFile {
        name: "one-node-empty",
        file: "empty.txt",
        text: "# Directed graph: one node, no edges\n% nothing else\n\n".into(),
        num_nodes: Some(1),
        num_src: 1,
        num_dst: 1,
        edges: Vec::new(),
    }
}

/// The kernel's fields for this graph and width, as (role, name, shape, data).
fn make_fields(k: &Kernel, g: &GraphFile, f: usize, rng: &mut Rng) -> Vec<(Role, String, Vec<usize>, Vec<f64>)> {
    let e = Extents { num_src: g.num_src, num_dst: g.num_dst, num_edges: g.edges.len() };
    k.fields()
        .iter()
        .map(|fd| {
            let shape = field_shape(fd.role, fd.ty, &e, |_| f);
            let len = shape.iter().product();
            (fd.role, fd.name.clone(), shape, (0..len).map(|_| rng.uniform()).collect())
        })
        .collect()
}

fn has_vector_field(k: &Kernel) -> bool {
    k.fields().iter().any(|fd| !matches!(fd.ty, Type::Scalar))
}

fn tensor(dtype: DType, shape: &[usize], data: &[f64]) -> Tensor {
    match dtype {
        DType::F32 => Tensor::from_f32(shape.to_vec(), data.iter().map(|&x| x as f32).collect()).expect("shape"),
        DType::F64 => Tensor::from_f64(shape.to_vec(), data.to_vec()).expect("shape"),
    }
}

/// Runs one kernel through `tigac run` and through the reference, and
/// compares every output.
fn check(dir: &Path, g: &GraphFile, graph: &Graph, name: &str, rng: &mut Rng) {
    let k = Kernel::from_source(GNN, name).expect("kernel compiles");
    let gnn = gnn_path();
    let widths: &[usize] = if has_vector_field(&k) { &[3, 5] } else { &[3] };
    for &f in widths {
        let fields = make_fields(&k, g, f, rng);
        for dtype in [DType::F32, DType::F64] {
            let tag = format!("{}_{name}_f{f}_{}", g.name, dtype.name());
            let tensors: Vec<Tensor> = fields.iter().map(|(_, _, shape, data)| tensor(dtype, shape, data)).collect();

            let mut args: Vec<String> =
                vec!["run".into(), gnn.to_str().expect("utf8 path").into(), "--kernel".into(), name.into()];
            args.extend(["--graph".into(), g.file.into()]);
            if let Some(n) = g.num_nodes {
                args.extend(["--num-nodes".into(), n.to_string()]);
            }
            if !g.file.ends_with(".mtx") {
                // SNAP files carry weight columns; the kernel reads the two ids.
                args.push("--ignore-extra-columns".into());
            }
            for ((role, fname, _, _), t) in fields.iter().zip(&tensors) {
                let file = format!("{tag}_{}_{fname}.npy", role.name());
                write_npy(dir.join(&file), &t.view()).expect("write npy");
                args.extend([format!("--{}", role.name()), format!("{fname}={file}")]);
            }
            let outs: Vec<(String, String)> =
                k.output_names().iter().map(|o| (o.to_string(), format!("{tag}_out_{o}.npy"))).collect();
            for (o, file) in &outs {
                args.extend(["--out".into(), format!("{o}={file}")]);
            }
            let o = tigac(dir, &args);
            assert!(
                o.status.success(),
                "{tag}: tigac failed ({:?})\nargs: {args:?}\nstderr:\n{}",
                o.status,
                String::from_utf8_lossy(&o.stderr)
            );

            let mut inputs = Inputs::new();
            for ((role, fname, _, _), t) in fields.iter().zip(&tensors) {
                inputs = inputs.with_role(*role, fname, t);
            }
            let want = k.run_reference(graph, &inputs).expect("reference run");
            assert_eq!(want.items.len(), outs.len(), "{tag}: outputs");
            let tol = match dtype {
                DType::F32 => 1e-5,
                DType::F64 => 1e-12,
            };
            for (oname, file) in &outs {
                let got = read_npy(dir.join(file)).unwrap_or_else(|e| panic!("{tag}: read {file}: {e}"));
                let reference = want.get(oname).unwrap_or_else(|| panic!("{tag}: reference has no output {oname}"));
                assert_eq!(got.dtype(), dtype, "{tag}: output {oname} dtype");
                assert_eq!(got.shape(), reference.shape(), "{tag}: output {oname} shape");
                for (i, (a, b)) in got.to_f64_vec().iter().zip(reference.to_f64_vec()).enumerate() {
                    assert!(
                        (a - b).abs() <= tol * b.abs().max(1.0),
                        "{name} on {}, F={f}, {}: output {oname}[{i}]: tigac {a}, reference {b}",
                        g.name,
                        dtype.name()
                    );
                }
            }
        }
    }
}

/// The reference on this graph file computes NeighborSum and GcnNorm as
/// their closed forms over the edges in the order this file wrote them, so
/// the edge fields really are lined up with the lines.
fn check_edge_order(g: &GraphFile, graph: &Graph, rng: &mut Rng) {
    let (ns, nd, ne, f) = (g.num_src, g.num_dst, g.edges.len(), 3);
    let x: Vec<f64> = (0..ns).map(|_| rng.uniform()).collect();
    let h: Vec<f64> = (0..ns * f).map(|_| rng.uniform()).collect();
    let cs: Vec<f64> = (0..ns).map(|_| rng.uniform()).collect();
    let cd: Vec<f64> = (0..nd).map(|_| rng.uniform()).collect();
    let w: Vec<f64> = (0..ne).map(|_| rng.uniform()).collect();
    let close = |what: &str, got: &[f64], want: &[f64]| {
        assert_eq!(got.len(), want.len(), "{} {what}", g.name);
        for (i, (a, b)) in got.iter().zip(want).enumerate() {
            assert!((a - b).abs() <= 1e-12 * b.abs().max(1.0), "{} {what}[{i}]: reference {a}, closed form {b}", g.name);
        }
    };

    let k = Kernel::from_source(GNN, "NeighborSum").expect("kernel");
    let got = k.run_reference(graph, &Inputs::new().src("x", &x)).expect("reference");
    let mut want = vec![0.0; nd];
    for &(s, d) in &g.edges {
        want[d] += x[s];
    }
    close("NeighborSum", &got.out().expect("out").to_f64_vec(), &want);

    let k = Kernel::from_source(GNN, "GcnNorm").expect("kernel");
    let hv = tiga::TensorView::from_slice_f64([ns, f], &h).expect("h");
    let inputs = Inputs::new().src("h", hv).src("cs", &cs).dst("cd", &cd).edge("w", &w);
    let got = k.run_reference(graph, &inputs).expect("reference");
    let mut want = vec![0.0; nd * f];
    for (e, &(s, d)) in g.edges.iter().enumerate() {
        for c in 0..f {
            want[d * f + c] += w[e] * cs[s] * h[s * f + c];
        }
    }
    for (i, v) in want.iter_mut().enumerate() {
        *v *= cd[i / f];
    }
    close("GcnNorm", &got.out().expect("out").to_f64_vec(), &want);
}

fn run_all_kernels(g: GraphFile, seed: u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join(g.file), &g.text).expect("write graph");
    let graph = g.load(d);
    let mut rng = Rng(seed);
    check_edge_order(&g, &graph, &mut rng);
    for name in KERNELS {
        check(d, &g, &graph, name, &mut rng);
    }
}

#[test]
fn every_kernel_is_covered() {
    let all = Kernel::all_from_source(GNN).expect("kernel file compiles");
    let names: Vec<&str> = all.iter().map(|k| k.name()).collect();
    assert_eq!(names, KERNELS, "gnn.rs and this test list different kernels");
}

#[test]
fn random_edge_list_matches_reference() {
    let mut rng = Rng(0x5eed_c110_0001);
    let g = random_edge_list(&mut rng);
    // The shapes this graph is meant to cover.
    let mut indeg = vec![0usize; g.num_dst];
    let mut touched = vec![false; g.num_dst];
    for &(s, d) in &g.edges {
        indeg[d] += 1;
        touched[s] = true;
        touched[d] = true;
    }
    assert!(indeg[..30].contains(&0), "an empty row among the connected ids");
    assert!(touched[30..].iter().all(|t| !t), "trailing isolated nodes");
    assert!(g.edges.iter().any(|(s, d)| s == d), "a self loop");
    let mut sorted = g.edges.clone();
    sorted.sort_unstable();
    assert!(sorted.windows(2).any(|w| w[0] == w[1]), "a multi-edge");
    run_all_kernels(g, 0xc0ff_ee00_1234);
}

#[test]
fn bipartite_matrix_market_matches_reference() {
    let mut rng = Rng(0x5eed_c110_0002);
    let g = bipartite_mtx(&mut rng);
    assert_ne!(g.num_src, g.num_dst);
    run_all_kernels(g, 0xc0ff_ee00_5678);
}

#[test]
fn one_node_self_loop_matches_reference() {
    run_all_kernels(one_node_self_loop(), 0xc0ff_ee00_9abc);
}

#[test]
fn one_node_without_edges_matches_reference() {
    run_all_kernels(one_node_no_edges(), 0xc0ff_ee00_def0);
}
