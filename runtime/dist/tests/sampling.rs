//! Neighbour sampling, `append_unique` and `add_self_loops_first` against
//! closed forms and statistics: every sampled edge is a graph edge, no
//! centre gets more than its fanout or an edge twice, a row of degree ≤
//! fanout gives all of it, uniform draws pass a chi-square test on a star
//! graph, weighted draws follow the weights, and results are the same for
//! any thread count, any number of ranks (a whole graph on every rank, or
//! a halo-sharded one), and paged or in memory, from a file stored in a
//! node order or not.

use std::collections::HashSet;
use std::sync::Arc;

use tiga_dist::comm::{Communicator, InProcess};
use tiga_dist::sampling::{append_unique, sample_multi_hop, sample_neighbors, HopRequest, SampleError};
use tiga_dist::shard::{PartitionChoice, ShardOptions, Sharded};
use tiga_runtime::Renumber;
use tiga_runtime::{add_self_loops_first, ExistingLoops, Graph};
use tiga_storage::{save_gfg, GfgFile, GfgWriter};

/// xorshift64, for graphs.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// A power-law-ish random graph with empty rows, self loops and repeated edges.
fn random_graph(n: usize, e: usize, seed: u64) -> Graph {
    let mut rng = Rng(seed);
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    for _ in 0..e {
        let d = (rng.below(n) * rng.below(n)) / n; // skewed to low ids
        let s = if rng.below(7) == 0 { d } else { rng.below(n) };
        src.push(s as u32);
        dst.push(d as u32);
    }
    Graph::from_edges(n, n, &src, &dst).expect("graph")
}

/// The star: node 0's in-edges from 1..=k, in that order.
fn star(k: usize) -> Graph {
    let src: Vec<u32> = (1..=k as u32).collect();
    let dst = vec![0u32; k];
    Graph::from_edges(k + 1, k + 1, &src, &dst).expect("star")
}

fn req(fanout: i64, seed: u64, weights: Option<&[f64]>) -> HopRequest<'_> {
    HopRequest { fanout, seed, hop: 0, weights }
}

#[test]
fn samples_are_edges_at_most_fanout_without_repeats() {
    let g = random_graph(300, 4000, 7);
    let centres: Vec<u32> = (0..300).collect();
    let (src_all, dst_all) = g.coo_in_user_order();
    for fanout in [0i64, 1, 3, 10, -1] {
        let s = sample_neighbors(&g, &centres, &req(fanout, 42, None)).expect("samples");
        assert_eq!(s.offsets.len(), centres.len() + 1);
        for (k, &c) in centres.iter().enumerate() {
            let run = s.offsets[k]..s.offsets[k + 1];
            let degree = g.row(c as usize).len();
            let expected = if fanout < 0 { degree } else { degree.min(fanout as usize) };
            assert_eq!(run.len(), expected, "centre {c} fanout {fanout}");
            let ids: HashSet<u64> = s.edge_ids[run.clone()].iter().copied().collect();
            assert_eq!(ids.len(), run.len(), "an edge sampled twice at centre {c}");
            for p in run {
                let e = s.edge_ids[p] as usize;
                assert_eq!((src_all[e], dst_all[e]), (s.sources[p], c), "edge {e} is not {} -> {c}", s.sources[p]);
            }
            // Degree ≤ fanout: the whole row, in row order.
            if expected == degree {
                let row: Vec<u64> = g.row(c as usize).map(|p| g.edge_id(p)).collect();
                assert_eq!(&s.edge_ids[s.offsets[k]..s.offsets[k + 1]], &row[..]);
            }
        }
    }
}

/// Chi-square statistic of `counts` against equal expectations.
fn chi_square(counts: &[f64], expected: &[f64]) -> f64 {
    counts.iter().zip(expected).map(|(c, e)| (c - e) * (c - e) / e).sum()
}

#[test]
fn uniform_draws_pass_a_chi_square_test_on_a_star() {
    // 20 neighbours, 5 drawn, 20,000 seeds: each neighbour is drawn 5,000
    // times in expectation. Critical value of chi-square with 19 degrees of
    // freedom at p = 0.001: 43.82.
    let g = star(20);
    let mut counts = vec![0.0; 20];
    for seed in 0..20_000u64 {
        let s = sample_neighbors(&g, &[0], &req(5, seed, None)).expect("samples");
        for &n in &s.sources {
            counts[n as usize - 1] += 1.0;
        }
    }
    let chi = chi_square(&counts, &[5000.0; 20]);
    assert!(chi < 43.82, "chi-square {chi} over {counts:?}");
}

#[test]
fn weighted_draws_follow_the_weights() {
    // One draw among weights 1..=5 (and a zero weight, never drawn):
    // frequencies w / 15; chi-square with 4 degrees of freedom at p = 0.001: 18.47.
    let g = star(6);
    let weights = [1.0, 2.0, 3.0, 4.0, 5.0, 0.0];
    let mut counts = vec![0.0; 6];
    let trials = 30_000u64;
    for seed in 0..trials {
        let s = sample_neighbors(&g, &[0], &req(1, seed, Some(&weights))).expect("samples");
        counts[s.sources[0] as usize - 1] += 1.0;
    }
    assert_eq!(counts[5], 0.0, "a zero-weight edge was drawn");
    let expected: Vec<f64> = weights[..5].iter().map(|w| trials as f64 * w / 15.0).collect();
    let chi = chi_square(&counts[..5], &expected);
    assert!(chi < 18.47, "chi-square {chi} over {counts:?}");
    // Fewer positive weights than the fanout: just those.
    let s = sample_neighbors(&g, &[0], &req(5, 1, Some(&[0.0, 1.0, 0.0, 0.0, 2.0, 0.0]))).expect("samples");
    assert_eq!(s.sources, vec![2, 5]);
}

#[test]
fn bad_requests_are_errors() {
    let g = star(4);
    assert!(matches!(sample_neighbors(&g, &[5], &req(2, 0, None)), Err(SampleError::CentreOutOfRange { centre: 5, .. })));
    assert!(matches!(sample_neighbors(&g, &[0], &req(-2, 0, None)), Err(SampleError::BadFanout(-2))));
    assert!(matches!(
        sample_neighbors(&g, &[0], &req(2, 0, Some(&[1.0; 3]))),
        Err(SampleError::WeightsLength { expected: 4, got: 3 })
    ));
    assert!(matches!(
        sample_neighbors(&g, &[0], &req(2, 0, Some(&[1.0, f64::NAN, 1.0, 1.0]))),
        Err(SampleError::BadWeight { edge: 1, .. })
    ));
    let bipartite = Graph::from_edges(3, 2, &[2], &[1]).expect("graph");
    assert!(matches!(sample_multi_hop(&bipartite, &[1], &[1, 1], 0, None, None), Err(SampleError::NotSquare { .. })));
    // An empty batch is a normal answer.
    let s = sample_neighbors(&g, &[], &req(2, 0, None)).expect("samples");
    assert_eq!(s.offsets, vec![0]);
}

#[test]
fn append_unique_keeps_targets_then_first_appearances() {
    let (list, at) = append_unique(&[7, 3, 7], &[3, 9, 1, 9, 7, 4]);
    assert_eq!(list, vec![7, 3, 7, 9, 1, 4]);
    assert_eq!(at, vec![1, 3, 4, 3, 0, 5]);
    let (list, at) = append_unique::<u32>(&[], &[]);
    assert!(list.is_empty() && at.is_empty());
}

#[test]
fn self_loops_go_first_in_each_row() {
    // Edges (user order): 1->0, 0->0, 2->1.
    let g = Graph::from_edges(3, 3, &[1, 0, 2], &[0, 0, 1]).expect("graph");
    let all = add_self_loops_first(&g, ExistingLoops::Insert).expect("loops");
    assert_eq!(all.offsets(), &[0, 3, 5, 6]);
    assert_eq!(all.cols(), &[0, 1, 0, 1, 2, 2]);
    let ids: Vec<u64> = (0..all.num_edges()).map(|p| all.edge_id(p)).collect();
    assert_eq!(ids, vec![3, 0, 1, 4, 2, 5]);
    let some = add_self_loops_first(&g, ExistingLoops::Skip).expect("loops");
    assert_eq!(some.offsets(), &[0, 2, 4, 5]);
    assert_eq!(some.cols(), &[1, 0, 1, 2, 2]);
    assert!(add_self_loops_first(&Graph::from_edges(2, 3, &[0], &[2]).expect("graph"), ExistingLoops::Insert).is_err());
}

#[test]
fn multi_hop_is_the_same_for_threads_ranks_and_pages() {
    let g = random_graph(500, 6000, 11);
    let seeds = [3u32, 17, 3, 250, 499];
    let weights: Vec<f64> = (0..g.num_edges()).map(|e| (e % 7) as f64).collect();
    for w in [None, Some(weights.as_slice())] {
        let one = sample_multi_hop(&g, &seeds, &[4, 3, -1], 99, w, None).expect("samples");
        // Seeds first, as given; then nodes in order of first appearance.
        assert_eq!(&one.nodes[..5], &seeds);
        assert_eq!(one.nodes.iter().collect::<HashSet<_>>().len(), one.nodes.len() - 1, "only the repeated seed repeats");
        for h in &one.hops {
            for ((&s, &d), &e) in h.src.iter().zip(&h.dst).zip(&h.edge_ids) {
                let (src, dst) = g.coo_in_user_order();
                assert_eq!((src[e as usize], dst[e as usize]), (one.nodes[s as usize], one.nodes[d as usize]));
            }
        }
        for threads in [1, 3] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
            let again = pool.install(|| sample_multi_hop(&g, &seeds, &[4, 3, -1], 99, w, None)).expect("samples");
            assert_eq!(again, one, "{threads} threads");
        }
        for ranks in [2, 3] {
            let results = InProcess::run(ranks, |c| {
                let comm: &dyn Communicator = &c;
                sample_multi_hop(&g, &seeds, &[4, 3, -1], 99, w, Some(comm)).expect("samples")
            });
            for r in results {
                assert_eq!(r.expect("rank"), one, "{ranks} ranks");
            }
        }
        // A halo-sharded graph: each rank samples the centres it owns from
        // its own rows.
        for (ranks, partition) in [(2, PartitionChoice::Contiguous), (3, PartitionChoice::Balanced)] {
            let results = InProcess::run(ranks, |c| {
                let comm: Arc<dyn Communicator> = Arc::new(c);
                let options = ShardOptions { partition: partition.clone(), depth: 1 };
                let sh = Sharded::from_graph(&g, comm, &options).expect("shard");
                sample_multi_hop(&sh, &seeds, &[4, 3, -1], 99, w, None).expect("samples")
            });
            for r in results {
                assert_eq!(r.expect("rank"), one, "sharded over {ranks} ranks");
            }
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("g.gfg");
        save_gfg(&path, &g, false, &[]).expect("save");
        let file = GfgFile::open(&path).expect("open");
        let paged = sample_multi_hop(&file, &seeds, &[4, 3, -1], 99, w, None).expect("samples");
        assert_eq!(paged, one, "paged");
        // Written in a node order: sampled in the caller's numbering, the
        // same sample, paged and in memory.
        for method in [Renumber::Degree, Renumber::Rcm, Renumber::Cluster] {
            let r = g.renumbered(method).expect("renumbers").expect("an order");
            let path = dir.path().join(format!("{}.gfg", method.name()));
            GfgWriter::renumbered(&g, &r).expect("writer").save(&path).expect("save");
            let file = GfgFile::open(&path).expect("open");
            assert!(file.has_node_order());
            let stored = sample_multi_hop(&file, &seeds, &[4, 3, -1], 99, w, None).expect("samples");
            assert_eq!(stored, one, "stored in {} order", method.name());
            let whole = file.load_caller_graph().expect("caller graph");
            assert_eq!(whole, g, "{} order read back whole", method.name());
        }
    }
}
