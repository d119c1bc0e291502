//! Halo-sharded calls, ranks as threads (the in-process communicator):
//! every kernel of examples/kernels/gnn.rs, forward bit-identical to one
//! process and backward within 1e-6 (f32) / 1e-12 (f64) of it, over 2, 3
//! and 4 ranks, contiguous, edge-balanced and scattered partitions, on
//! graphs with empty rows, isolated nodes, self loops, multi-edges, a
//! bipartite graph and a rank that owns no rows; the seed's ring; deep
//! halos; and the refusals and failures a job can meet.

use std::sync::Arc;

use tiga::compiler::ir::Role;
use tiga::{Graph, InProcess, Inputs, Partition, PartitionChoice, ShardOptions, Sharded, Tensor};

mod common;
use common::{inputs, random_fields, rows_of, tensors, Rng};

#[path = "common/gnn.rs"]
mod gnn;

fn random_graph(rng: &mut Rng, ns: usize, nd: usize, ne: usize) -> Graph {
    common::random_graph(rng, ns, nd, ne, false)
}

/// The 8-node ring, each node reading itself and both neighbours.
fn ring() -> Graph {
    let (mut s, mut d) = (Vec::new(), Vec::new());
    for i in 0..8u32 {
        for j in [(i + 7) % 8, i, (i + 1) % 8] {
            s.push(j);
            d.push(i);
        }
    }
    Graph::from_edges(8, 8, &s, &d).expect("ring")
}

/// `f` on every rank of an in-process world over `g`.
fn on_ranks<T: Send>(world: usize, g: &Graph, opts: &ShardOptions, f: impl Fn(&Sharded) -> T + Sync) -> Vec<T> {
    InProcess::run(world, |c| {
        let sh = Sharded::from_graph(g, Arc::new(c), opts).expect("shard");
        f(&sh)
    })
    .into_iter()
    .map(|r| r.expect("rank"))
    .collect()
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_f64_vec().iter().map(|x| x.to_bits()).collect()
}

fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = want.iter().fold(1.0f64, |m, x| m.max(x.abs()));
    for (i, (x, y)) in got.iter().zip(want).enumerate() {
        assert!((x - y).abs() <= tol * scale, "{what}[{i}]: sharded {x}, one process {y}");
    }
}

#[test]
fn ring_outputs_and_gradients() {
    let g = ring();
    let x: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let k = gnn::NeighborSum::kernel();
    let got = on_ranks(2, &g, &ShardOptions::default(), |sh| {
        let ins = Inputs::new().src("x", &x);
        let out = k.run(sh, &ins).expect("run").f32("out").expect("out").to_vec();
        let grad = k.grad(sh, &ins, "out").expect("grad").src("x").expect("dx").as_f32().expect("f32").to_vec();
        (out, grad)
    });
    assert_eq!(got[0], (vec![8.0, 3.0, 6.0, 9.0], vec![3.0; 4]));
    assert_eq!(got[1], (vec![12.0, 15.0, 18.0, 13.0], vec![3.0; 4]));
}

/// Every gnn.rs kernel, forward and backward, against one process.
fn check_kernels(g: &Graph, gname: &str, world: usize, opts: &ShardOptions, rng: &mut Rng) {
    for k in gnn::all() {
        for (f, is_f32) in [(3usize, true), (8, false)] {
            let fields = random_fields(k, g, f, || rng.uniform() * 2.0 - 1.0);
            let ts = tensors(&fields, is_f32);
            let ins = inputs(&fields, &ts);
            let want = k.run(g, &ins).expect("one process");
            // Cotangents: random, one per output.
            let cots: Vec<(String, Tensor)> = want
                .items
                .iter()
                .map(|(n, t)| {
                    let data: Vec<f64> = (0..t.len()).map(|_| rng.uniform() - 0.5).collect();
                    (n.clone(), common::tensor(t.shape(), &data, is_f32))
                })
                .collect();
            let cot_views: Vec<(&str, tiga::TensorView<'_>)> = cots.iter().map(|(n, t)| (n.as_str(), t.view())).collect();
            let want_g = k.vjp(g, &ins, &cot_views).expect("one-process vjp");
            let what = format!("{} on {gname}, {world} ranks, {:?}, F={f}", k.name(), opts.partition);
            let per_rank = on_ranks(world, g, opts, |sh| {
                let out = k.run(sh, &ins).expect("sharded run");
                let grads = k.vjp(sh, &ins, &cot_views).expect("sharded vjp");
                (sh.owned_dst().to_vec(), sh.owned_src().to_vec(), sh.owned_edges().to_vec(), out, grads)
            });
            for (dsts, srcs, edges, out, grads) in &per_rank {
                for (o, (name, t)) in k.captured().outputs.iter().zip(&out.items) {
                    let w = want.tensor(name).expect("output");
                    let expect = match o.role {
                        Role::Dst => rows_of(w, dsts.iter().map(|&u| u as usize)),
                        Role::Edge => rows_of(w, edges.iter().map(|&e| e as usize)),
                        _ => w.to_f64_vec(),
                    };
                    if o.role == Role::Param {
                        close(&t.to_f64_vec(), &expect, 1e-6, &format!("{what}: output {name}"));
                    } else {
                        let e: Vec<u64> = expect.iter().map(|x| x.to_bits()).collect();
                        assert_eq!(bits(t), e, "{what}: output {name} differs from one process");
                    }
                }
                let tol = if is_f32 { 1e-6 } else { 1e-12 };
                for (role, name, t) in &grads.items {
                    let w = want_g.get(*role, name).expect("gradient");
                    let expect = match role {
                        Role::Src => rows_of(w, srcs.iter().map(|&u| u as usize)),
                        Role::Dst => rows_of(w, dsts.iter().map(|&u| u as usize)),
                        Role::Edge => rows_of(w, edges.iter().map(|&e| e as usize)),
                        Role::Param => w.to_f64_vec(),
                    };
                    close(&t.to_f64_vec(), &expect, tol, &format!("{what}: gradient of {} {name}", role.name()));
                }
            }
            // Every rank holds the same parameter gradients, bit for bit.
            for (role, name, t) in &per_rank[0].4.items {
                if *role == Role::Param {
                    for other in &per_rank[1..] {
                        assert_eq!(bits(other.4.get(*role, name).expect("param")), bits(t), "{what}: {name} per rank");
                    }
                }
            }
        }
    }
}

#[test]
fn gnn_kernels_match_one_process_on_random_graphs() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ 11);
    let g = random_graph(&mut rng, 40, 40, 160);
    let sparse = random_graph(&mut rng, 50, 50, 30);
    for world in [2, 3, 4] {
        check_kernels(&g, "random", world, &ShardOptions::default(), &mut rng);
        let opts = ShardOptions { partition: PartitionChoice::Balanced, depth: 1 };
        check_kernels(&sparse, "sparse-with-isolated", world, &opts, &mut rng);
    }
}

#[test]
fn scattered_partitions_and_a_rank_without_rows() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ 12);
    let g = random_graph(&mut rng, 40, 40, 120);
    // Nodes dealt round-robin to 3 of 4 ranks: rank 3 owns nothing.
    let parts: Vec<u32> = (0..40).map(|i| (i * 7 % 3) as u32).collect();
    let p = Partition::from_parts(parts, 4).expect("partition");
    check_kernels(&g, "scattered", 4, &ShardOptions { partition: PartitionChoice::Given(p), depth: 1 }, &mut rng);
    // More ranks than rows.
    let tiny = random_graph(&mut rng, 3, 3, 5);
    check_kernels(&tiny, "three-nodes", 4, &ShardOptions::default(), &mut rng);
}

#[test]
fn bipartite_graphs_shard_sources_apart() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ 13);
    let g = random_graph(&mut rng, 13, 29, 70);
    check_kernels(&g, "bipartite", 3, &ShardOptions::default(), &mut rng);
}

#[test]
fn inputs_per_rank_equal_inputs_whole() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ 14);
    let g = random_graph(&mut rng, 30, 30, 90);
    let k = gnn::GcnNorm::kernel();
    let fields = random_fields(k, &g, 4, || rng.uniform());
    let ts = tensors(&fields, true);
    let ins = inputs(&fields, &ts);
    let opts = ShardOptions {
        partition: PartitionChoice::Given(Partition::from_parts((0..30).map(|i| (i % 2) as u32).collect(), 2).expect("p")),
        depth: 1,
    };
    let res = on_ranks(2, &g, &opts, |sh| {
        let whole = k.run(sh, &ins).expect("whole").f32("out").expect("out").to_vec();
        // The same fields cut to this rank's rows, in owned order.
        let mut own = Vec::new();
        for ((role, name, _, _), t) in fields.iter().zip(&ts) {
            let rows: Vec<usize> = match role {
                Role::Src => sh.owned_src().iter().map(|&u| u as usize).collect(),
                Role::Dst => sh.owned_dst().iter().map(|&u| u as usize).collect(),
                Role::Edge => sh.owned_edges().iter().map(|&e| e as usize).collect(),
                Role::Param => (0..t.shape()[0]).collect(),
            };
            let mut shape = t.shape().to_vec();
            shape[0] = rows.len();
            own.push((*role, name.clone(), common::tensor(&shape, &rows_of(t, rows.into_iter()), true)));
        }
        let mut mine = Inputs::new();
        for (r, n, t) in &own {
            mine = mine.with_role(*r, n, t);
        }
        let local = k.run(sh, &mine).expect("per rank").f32("out").expect("out").to_vec();
        (whole, local)
    });
    for (whole, local) in res {
        assert_eq!(whole, local);
    }
}

#[test]
fn deep_halo_steps_equal_shallow_steps_bit_for_bit() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ 15);
    let g = random_graph(&mut rng, 60, 60, 240);
    let k = gnn::Smoothing::kernel();
    let x: Vec<f32> = (0..60).map(|_| rng.uniform() as f32).collect();
    let ins = Inputs::new().src("x", &x);
    // One process, two steps.
    let one = k.run(&g, &ins).expect("step 1");
    let two = k.run(&g, &Inputs::new().src("x", one.f32("out").expect("out"))).expect("step 2");
    for depth in [1, 2] {
        let opts = ShardOptions { partition: PartitionChoice::Contiguous, depth };
        let res = on_ranks(3, &g, &opts, |sh| {
            let out = k.iterate(sh, &ins, "out", "x", 2, &tiga::Schedule::default()).expect("iterate");
            (sh.owned_dst().to_vec(), out.f32("out").expect("out").to_vec())
        });
        for (ids, out) in res {
            let want: Vec<u32> = ids.iter().map(|&u| two.f32("out").expect("out")[u as usize].to_bits()).collect();
            assert_eq!(out.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), want, "depth {depth}");
        }
    }
}

#[test]
fn ranks_with_different_graphs_are_refused_naming_the_rank() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ 16);
    let a = random_graph(&mut rng, 20, 20, 50);
    let b = random_graph(&mut rng, 20, 20, 50);
    let res = InProcess::run(2, |c| {
        let g = if c_rank(&c) == 1 { &b } else { &a };
        Sharded::from_graph(g, Arc::new(c), &ShardOptions::default()).map(|_| ())
    });
    for r in res {
        let e = r.expect("thread").expect_err("graphs differ");
        let msg = e.to_string();
        assert!(msg.contains("different graphs") && msg.contains("rank 1"), "{msg}");
    }
}

fn c_rank(c: &InProcess) -> usize {
    use tiga::Communicator;
    c.rank()
}

#[test]
fn ranks_with_different_kernels_are_refused() {
    let g = ring();
    let x: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let res = on_ranks(2, &g, &ShardOptions::default(), |sh| {
        let k = if sh.rank() == 0 { gnn::NeighborSum::kernel() } else { gnn::Smoothing::kernel() };
        k.run(sh, &Inputs::new().src("x", &x)).map(|_| ())
    });
    for r in res {
        let msg = r.expect_err("kernels differ").to_string();
        assert!(msg.contains("different kernel"), "{msg}");
    }
}

#[test]
fn a_rank_that_dies_fails_its_peers_without_a_hang() {
    let g = ring();
    let x: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let t = std::time::Instant::now();
    let res = InProcess::run(2, |c| {
        let sh = Sharded::from_graph(&g, Arc::new(c), &ShardOptions::default()).expect("shard");
        if sh.rank() == 1 {
            panic!("rank 1 dies before its exchange");
        }
        gnn::NeighborSum::kernel().run(&sh, &Inputs::new().src("x", &x)).map(|_| ())
    });
    assert!(t.elapsed() < std::time::Duration::from_secs(30));
    let msg = res[0].as_ref().expect("rank 0 returns").as_ref().expect_err("peer died").to_string();
    assert!(msg.contains("rank 1 failed"), "{msg}");
    assert!(res[1].is_err());
}

#[cfg(feature = "metis")]
#[test]
fn metis_partitions_shard_every_kernel() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ 17);
    let g = random_graph(&mut rng, 60, 60, 200);
    for world in [2, 3, 4] {
        check_kernels(&g, "random", world, &ShardOptions { partition: PartitionChoice::Metis, depth: 1 }, &mut rng);
    }
}
