//! A realization written from outside the library: a graph whose rows come
//! in two pages, each half of the rows copied out of the whole graph (of
//! its transpose, or of its rows reversed, for a backward's stages). Every
//! kernel of gnn.rs runs over it forward and backward through the ordinary
//! `run` and `vjp`, and matches the in-memory graph bit for bit.

use std::ops::Range;

use tiga::compiler::ir::Role;
use tiga::runtime::exec::{ExecError, PageData, PageSource, PageView};
use tiga::{Graph, GraphRows, Inputs, Kernel, PagedRows, Realization, Rows, Schedule, Side, Tensor};

mod common;
use common::{random_edges, random_fields, Rng};

const GNN: &str = include_str!("../../examples/kernels/gnn.rs");

/// The graph, served in two halves (with this many rows left out between
/// them: 0, except to check that a plan with a gap is refused).
struct Halves(Graph, usize);

/// One side's rows, in two pages.
struct HalfPages<'g>(GraphRows<'g>, usize);

/// A page's own copy of its rows.
struct Copied {
    first_row: usize,
    offsets: Vec<u64>,
    cols: Vec<u32>,
    edge_ids: Option<Vec<u64>>,
}

impl PageData for Copied {
    fn view(&self) -> PageView<'_> {
        PageView { first_row: self.first_row, offsets: &self.offsets, cols: &self.cols, edge_ids: self.edge_ids.as_deref() }
    }
}

// SAFETY: every page is a slice of a validated `Graph`'s CSR (or of its
// transpose or reversed rows), rows as asked.
unsafe impl PageSource for HalfPages<'_> {
    fn page(&self, rows: Range<usize>) -> Result<Box<dyn PageData + '_>, ExecError> {
        let g = &*self.0;
        let offsets = g.offsets()[rows.start..=rows.end].to_vec();
        let (a, b) = (offsets[0] as usize, offsets[rows.len()] as usize);
        let edge_ids = g.edge_ids().map(|e| e[a..b].to_vec());
        Ok(Box::new(Copied { first_row: rows.start, offsets, cols: g.cols()[a..b].to_vec(), edge_ids }))
    }
}

impl PagedRows for HalfPages<'_> {
    fn edge_ids(&self) -> bool {
        self.0.edge_ids().is_some()
    }
    fn plan(&self, _: &Schedule) -> Result<Vec<Range<usize>>, ExecError> {
        let n = self.0.num_dst();
        Ok(vec![0..n / 2, n / 2 + self.1..n])
    }
    fn out_of_core(&self) -> bool {
        false
    }
}

impl Realization for Halves {
    fn num_src(&self) -> usize {
        self.0.num_src()
    }
    fn num_dst(&self) -> usize {
        self.0.num_dst()
    }
    fn num_edges(&self) -> usize {
        self.0.num_edges()
    }
    fn rows(&self, side: Side, edge_ids: bool) -> Result<Rows<'_>, ExecError> {
        match self.0.rows(side, edge_ids)? {
            Rows::Memory(whole) => Ok(Rows::Pages(Box::new(HalfPages(whole, self.1)))),
            _ => Err(ExecError::Internal("a graph's rows are in memory")),
        }
    }
}

#[test]
fn every_kernel_runs_over_two_halves_with_the_in_memory_bits() {
    // Empty rows, multi-edges and permuted edge ids; a bipartite graph too.
    let mut rng = Rng(41);
    for (ns, nd) in [(29usize, 29usize), (17, 31)] {
        let (src, dst) = random_edges(&mut rng, ns, nd - 4, 140);
        let g = Graph::from_edges(ns, nd, &src, &dst).expect("graph");
        let halves = Halves(g.clone(), 0);
        for k in Kernel::all_from_source(GNN).expect("kernels") {
            let fields: Vec<(Role, String, Tensor)> = random_fields(&k, &g, 3, || rng.f())
                .into_iter()
                .map(|(r, nm, s, d)| (r, nm, Tensor::from_f32(s, d.iter().map(|&x| x as f32).collect()).expect("tensor")))
                .collect();
            let ins = fields.iter().fold(Inputs::new(), |i, (r, nm, t)| i.with_role(*r, nm, t));
            let (want, got) = (k.run(&g, &ins).expect("in memory"), k.run(&halves, &ins).expect("two halves"));
            for ((o, a), (_, b)) in want.items.iter().zip(&got.items) {
                assert_eq!(a.as_f32(), b.as_f32(), "{} output {o}", k.name());
            }
            let cots: Vec<(&str, tiga::TensorView<'_>)> = want.items.iter().map(|(n, t)| (n.as_str(), t.view())).collect();
            let (gw, gg) = (k.vjp(&g, &ins, &cots), k.vjp(&halves, &ins, &cots));
            let (gw, gg) = (gw.expect("in-memory vjp"), gg.expect("two-halves vjp"));
            assert_eq!(gw.items.len(), gg.items.len());
            for ((role, name, a), (_, _, b)) in gw.items.iter().zip(&gg.items) {
                assert_eq!(a.as_f32(), b.as_f32(), "{} gradient of {role:?} {name}", k.name());
            }
        }
    }
}

/// A realization whose plan skips a row is refused, never run with the row
/// left unwritten.
#[test]
fn a_plan_with_a_gap_is_an_error() {
    let g = Graph::from_edges(5, 5, &[0, 1, 2, 3, 4], &[1, 2, 3, 4, 0]).expect("ring");
    let k = Kernel::from_source(GNN, "NeighborSum").expect("kernel");
    let x = Tensor::from_f32(vec![5], vec![1.0; 5]).expect("x");
    let e = k.run(&Halves(g, 1), &Inputs::new().src("x", &x)).expect_err("a gap in the plan");
    assert!(e.to_string().contains("page plan must cover rows 0..5"), "{e}");
}
