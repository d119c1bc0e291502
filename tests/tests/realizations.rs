//! Every kernel of examples/kernels/gnn.rs over every realization of
//! `Realizer::all()`, in f32 and f64, under the JIT and the default back
//! end, against the f64 reference interpreter (see the crate doc for what
//! each call asserts). Each test then checks the tally: every realization
//! that holds a graph ran every call, or refused exactly the calls it
//! must, so nothing passes by being skipped.

use tiga::compiler::ir::Role;
use tiga::{Graph, Kernel, Renumber, Tensor};
use tiga_conformance::{
    assert_bits, assert_close, calls_of, check_cases, known_backend_differences, Case, Count, Realizer, Rng, Tally, BACKENDS,
};

/// Every call ran forward and backward on every realization but the
/// generated one, which holds none of these graphs.
fn ran_everywhere_but_generated(tally: &Tally, cases: usize) {
    let calls = calls_of(|_| true) * cases * BACKENDS.len();
    for r in Realizer::all() {
        let want = match r {
            Realizer::Generated => Count { not_held: calls, ..Count::default() },
            _ => Count { forward_ran: calls, backward_ran: calls, ..Count::default() },
        };
        assert_eq!(tally.of(&r), want, "{r}");
    }
    assert!(tally.backends_differ.is_subset(&known_backend_differences()), "{:?}", tally.backends_differ);
}

fn reads_edges(k: &Kernel) -> bool {
    k.fields().iter().any(|f| f.role == Role::Edge)
}

/// Random graphs with an empty last row, a multi-edge and a self loop; the
/// sparse one leaves most nodes isolated.
#[test]
fn random_graphs() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let cases = [Case::random("random", &mut rng, 40, 40, 160), Case::random("sparse-with-isolated", &mut rng, 50, 50, 30)];
    assert!(cases[1].graph.offsets().windows(2).filter(|w| w[0] == w[1]).count() > 20, "rows without edges");
    let tally = check_cases(&cases, &Realizer::all(), 1);
    ran_everywhere_but_generated(&tally, cases.len());
    // The one known difference between back ends shows on these graphs; a
    // fix (or a new difference) changes this set.
    assert_eq!(tally.backends_differ, known_backend_differences());
}

/// Bipartite graphs: fewer sources than destinations, and more. Renumbering
/// by RCM or clusters refuses them (one node set needed); by degree, the
/// rows are renumbered.
#[test]
fn bipartite_graphs() {
    let mut rng = Rng(0x5eed_1234_abcd);
    let cases = [Case::random("bipartite 13->29", &mut rng, 13, 29, 70), Case::random("bipartite 31->11", &mut rng, 31, 11, 60)];
    let tally = check_cases(&cases, &Realizer::all(), 2);
    let calls = calls_of(|_| true) * cases.len() * BACKENDS.len();
    for r in Realizer::all() {
        let want = match r {
            Realizer::Generated => Count { not_held: calls, ..Count::default() },
            Realizer::Renumbered(Renumber::Rcm | Renumber::Cluster)
            | Realizer::PagedRenumbered(Renumber::Rcm | Renumber::Cluster) => {
                Count { forward_refused: calls, backward_refused: calls, ..Count::default() }
            }
            _ => Count { forward_ran: calls, backward_ran: calls, ..Count::default() },
        };
        assert_eq!(tally.of(&r), want, "{r}");
    }
}

/// One node with two self loops (a multi-edge), and one with no edge; three
/// ranks over one row leave two ranks without rows.
#[test]
fn one_node_graphs() {
    let cases = [
        Case::from_edges("one node, two self loops", 1, 1, &[0, 0], &[0, 0]),
        Case::from_edges("one node, no edge", 1, 1, &[], &[]),
    ];
    let tally = check_cases(&cases, &Realizer::all(), 3);
    ran_everywhere_but_generated(&tally, cases.len());
}

/// Four-neighbour grids that do not wrap, generated and as their CSR: the
/// generated stencil runs every kernel without edge fields forward, and a
/// sum's, a mean's and a softmax's backward; it refuses the rest.
#[test]
fn stencils() {
    let cases = [
        Case::stencil_4("grid 5x7", 5, 7, false),
        Case::stencil_4("grid 1x7", 1, 7, false),
        Case::stencil_4("cell 1x1", 1, 1, false),
    ];
    // The first is Graph::stencil_2d_4's graph.
    let g = Graph::stencil_2d_4(5, 7).expect("stencil_2d_4");
    assert_eq!((cases[0].graph.offsets(), cases[0].graph.cols()), (g.offsets(), g.cols()));
    let tally = check_cases(&cases, &Realizer::all(), 4);
    let n = cases.len() * BACKENDS.len();
    let generated_backward = |k: &Kernel| {
        !reads_edges(k) && ["NeighborSum", "Smoothing", "VecSum", "SageMean", "GinSum", "GatAttention"].contains(&k.name())
    };
    let want = Count {
        forward_ran: calls_of(|k| !reads_edges(k)) * n,
        forward_refused: calls_of(reads_edges) * n,
        backward_ran: calls_of(generated_backward) * n,
        backward_refused: calls_of(|k| !generated_backward(k)) * n,
        not_held: 0,
    };
    assert_eq!(tally.of(&Realizer::Generated), want);
    for r in Realizer::all().iter().filter(|r| **r != Realizer::Generated) {
        let all = calls_of(|_| true) * n;
        assert_eq!(tally.of(r), Count { forward_ran: all, backward_ran: all, ..Count::default() }, "{r}");
    }
    assert!(tally.backends_differ.is_subset(&known_backend_differences()), "{:?}", tally.backends_differ);
}

/// Grids that wrap (a 1x1 torus is one node with four self loops): the
/// generated stencil runs forward, and refuses every backward (its
/// transpose is not a stencil in CSR order).
#[test]
fn periodic_stencils() {
    let cases = [Case::stencil_4("torus 4x6", 4, 6, true), Case::stencil_4("torus 1x1", 1, 1, true)];
    assert_eq!(cases[1].graph.cols(), &[0, 0, 0, 0]);
    let tally = check_cases(&cases, &Realizer::all(), 5);
    let n = cases.len() * BACKENDS.len();
    let want = Count {
        forward_ran: calls_of(|k| !reads_edges(k)) * n,
        forward_refused: calls_of(reads_edges) * n,
        backward_ran: 0,
        backward_refused: calls_of(|_| true) * n,
        not_held: 0,
    };
    assert_eq!(tally.of(&Realizer::Generated), want);
    for r in Realizer::all().iter().filter(|r| **r != Realizer::Generated) {
        let all = calls_of(|_| true) * n;
        assert_eq!(tally.of(r), Count { forward_ran: all, backward_ran: all, ..Count::default() }, "{r}");
    }
}

/// The comparisons the suite rests on catch what they must: one ulp in
/// the bits, a relative error over the tolerance.
#[test]
fn the_comparisons_catch_one_ulp_and_a_tolerance_crossed() {
    let t = |x: f32| Tensor::from_f32(vec![2], vec![1.0, x]).expect("tensor");
    let one_ulp = f32::from_bits(0.75f32.to_bits() + 1);
    assert_bits(&t(0.75), &t(0.75), "same");
    let caught = std::panic::catch_unwind(|| assert_bits(&t(one_ulp), &t(0.75), "one ulp"));
    assert!(caught.is_err(), "a one-ulp difference passed the bit comparison");
    let y = Tensor::from_f64(vec![2], vec![1.0, 0.75]).expect("tensor");
    assert_close(&t(one_ulp), &y, 1e-5, "within");
    let caught = std::panic::catch_unwind(|| assert_close(&t(0.75 + 2e-5), &y, 1e-5, "outside"));
    assert!(caught.is_err(), "an error of 2e-5 passed a tolerance of 1e-5");
}
