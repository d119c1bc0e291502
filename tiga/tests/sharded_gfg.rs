//! Sharded graphs read from a `.gfg` every rank opens: each rank reads its
//! own rows' pages and its own rows of the stored fields (counted through
//! the file's read blocks), and computes what one process computes from
//! memory, in contiguous, edge-balanced and METIS (feature `metis`) blocks,
//! from files in the caller's numbering and in node orders.

use std::sync::Arc;

use tiga::compiler::ir::Role;
use tiga::runtime::{save_gfg, FieldRole, GfgFile};
use tiga::{Graph, InProcess, Inputs, PartitionChoice, ShardOptions, Sharded, Tensor, TensorView};

mod common;
use common::{disk_fields, random_fields, rows_of, tensors, Rng};

#[path = "common/gnn.rs"]
mod gnn;

/// A rank's `out` has the bits of one process's rows `dsts`.
fn assert_owned_bits(got: &tiga::Outputs, want: &tiga::Outputs, dsts: &[u32], what: &str) {
    let got: Vec<u64> = got.tensor("out").expect("out").to_f64_vec().iter().map(|x| x.to_bits()).collect();
    let exp: Vec<u64> =
        rows_of(want.tensor("out").expect("out"), dsts.iter().map(|&u| u as usize)).iter().map(|x| x.to_bits()).collect();
    assert_eq!(got, exp, "{what}");
}

#[test]
fn every_gnn_kernel_from_a_shared_file() {
    let mut rng = Rng(0x5eed_0001);
    let dir = tempfile::tempdir().expect("tempdir");
    for (gi, (ns, nd, ne)) in [(40usize, 40usize, 150usize), (13, 29, 70)].into_iter().enumerate() {
        let g = common::random_graph(&mut rng, ns, nd, ne, true);
        for (ki, k) in gnn::all().into_iter().enumerate() {
            if ns != nd && k.captured().fields.iter().any(|f| f.role == Role::Dst && f.name == "h") {
                continue; // GinSum reads h as both sides: a square graph's.
            }
            let fields = random_fields(k, &g, 4, || rng.uniform() - 0.5);
            let ts = tensors(&fields, true);
            let named: Vec<(Role, String, Tensor)> =
                fields.iter().zip(&ts).map(|((r, n, _, _), t)| (*r, n.clone(), t.clone())).collect();
            // The caller's numbering, and node orders: a file written in
            // one is sharded in the caller's numbering. (Only `degree`
            // renumbers a non-square graph, by rows.)
            let mut paths = Vec::new();
            for order in [tiga::Renumber::None, tiga::Renumber::Degree, tiga::Renumber::Cluster] {
                let path = dir.path().join(format!("g{gi}-{ki}-{}.gfg", order.name()));
                match order {
                    tiga::Renumber::None => save_gfg(&path, &g, false, &disk_fields(&named)).expect("save"),
                    tiga::Renumber::Cluster if ns != nd => continue,
                    _ => save_renumbered(&path, &g, order, &disk_fields(&named)),
                }
                paths.push(path);
            }
            let all = common::inputs(&fields, &ts);
            let want = k.run(&g, &all).expect("one process");
            let want_g = k.grad(&g, &all, "out").expect("one-process grad");
            // Parameters are passed; every other field comes from the file.
            let params = common::params_only(&named);
            let mut choices = vec![PartitionChoice::Contiguous, PartitionChoice::Balanced];
            if cfg!(feature = "metis") && ns == nd {
                choices.push(PartitionChoice::Metis);
            }
            let per_rank: Vec<_> = choices
                .iter()
                .flat_map(|choice| paths.iter().map(move |path| (choice, path)))
                .flat_map(|(choice, path)| {
                    InProcess::run(3, |c| {
                        let file = GfgFile::open(path).expect("open");
                        let sh = Sharded::from_gfg_with(file, Arc::new(c), choice).expect("shard");
                        let out = k.run(&sh, &params).expect("sharded run");
                        let grads = k.grad(&sh, &params, "out").expect("sharded grad");
                        (sh.owned_dst().to_vec(), sh.owned_src().to_vec(), out, grads)
                    })
                })
                .collect();
            for r in per_rank {
                let (dsts, srcs, out, grads) = r.expect("rank");
                assert_owned_bits(&out, &want, &dsts, &format!("{} on graph {gi}", k.name()));
                for (role, name, t) in &grads.items {
                    if *role != Role::Src {
                        continue;
                    }
                    let w = rows_of(want_g.get(*role, name).expect("grad"), srcs.iter().map(|&u| u as usize));
                    for (x, y) in t.to_f64_vec().iter().zip(&w) {
                        assert!((x - y).abs() <= 1e-6 * y.abs().max(1.0), "{} d{name}: {x} vs {y}", k.name());
                    }
                }
            }
        }
    }
}

#[test]
fn each_rank_reads_its_own_part_of_the_file() {
    // A chain of 2^20 nodes, each reading itself and two neighbours each
    // side: 5 edges a row, 4 MiB of column indices per rank of two.
    let n = 1usize << 20;
    let mut offsets = vec![0u64];
    let mut cols = Vec::with_capacity(5 * n);
    for i in 0..n as i64 {
        for d in -2..=2 {
            let j = i + d;
            if j >= 0 && j < n as i64 {
                cols.push(j as u32);
            }
        }
        offsets.push(cols.len() as u64);
    }
    let g = Graph::from_csr(n, n, offsets, cols).expect("chain");
    let x: Vec<f32> = (0..n).map(|i| (i % 97) as f32).collect();
    let unused: Vec<f32> = vec![1.0; n];
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("chain.gfg");
    let fields = [(FieldRole::Src, "x", TensorView::from(&x)), (FieldRole::Src, "unused", TensorView::from(&unused))];
    save_gfg(&path, &g, true, &fields).expect("save");
    let k = gnn::NeighborSum::kernel();
    let want = k.run(&g, &Inputs::new().src("x", &x)).expect("one process");
    let res = InProcess::run(2, |c| {
        let file = GfgFile::open(&path).expect("open");
        let sections: Vec<(String, u64)> = file.sections().iter().map(|s| (s.name.clone(), s.length)).collect();
        let sh = Sharded::from_gfg(file, Arc::new(c)).expect("shard");
        let out = k.run(&sh, &Inputs::new()).expect("run");
        let read = sh.file().expect("file").bytes_read();
        (sh.owned_dst().to_vec(), out.f32("out").expect("out").to_vec(), sections, read)
    });
    const BLOCK: u64 = 1 << 20;
    for r in res {
        let (ids, out, sections, read) = r.expect("rank");
        let want_rows: Vec<f32> = ids.iter().map(|&u| want.f32("out").expect("out")[u as usize]).collect();
        assert_eq!(out, want_rows);
        for ((name, len), (rname, bytes)) in sections.iter().zip(&read) {
            assert_eq!(name, rname);
            let limit = if name.contains("unused") || name.starts_with("t_") { 0 } else { len / 2 + 2 * BLOCK };
            assert!(*bytes <= limit, "section {name}: read {bytes} of {len} bytes (limit {limit})");
        }
        let total: u64 = read.iter().map(|(_, b)| b).sum();
        eprintln!("rank owning {} rows read {read:?}", ids.len());
        let data: u64 = sections.iter().filter(|(n, _)| !n.contains("unused") && !n.starts_with("t_")).map(|(_, l)| l).sum();
        assert!(total < data / 2 + 8 * BLOCK, "read {total} of {data} bytes");
        assert!(total > data / 4, "read only {total} of {data} bytes: the count is not counting");
    }
}

#[test]
fn a_deep_halo_read_from_the_file_steps_as_one_process_and_plans_as_memory() {
    let mut rng = Rng(0x5eed_0003);
    let dir = tempfile::tempdir().expect("tempdir");
    // Edges out of CSR order: the file stores their user ids.
    let g = common::random_graph(&mut rng, 60, 60, 240, false);
    let path = dir.path().join("deep.gfg");
    save_gfg(&path, &g, false, &[]).expect("save");
    // The same graph in RCM order: sharded in the caller's numbering.
    let rcm = dir.path().join("deep-rcm.gfg");
    save_renumbered(&rcm, &g, tiga::Renumber::Rcm, &[]);
    let k = gnn::Smoothing::kernel();
    let x: Vec<f32> = (0..60).map(|_| rng.uniform() as f32).collect();
    let ins = Inputs::new().src("x", &x);
    let mut want = x.clone();
    for _ in 0..3 {
        want = k.run(&g, &Inputs::new().src("x", &want)).expect("one process").f32("out").expect("out").to_vec();
    }
    for depth in [1, 2, 3] {
        for (path, partition) in
            [(&path, PartitionChoice::Contiguous), (&path, PartitionChoice::Balanced), (&rcm, PartitionChoice::Balanced)]
        {
            let opts = ShardOptions { partition, depth };
            let from_file = InProcess::run(3, |c| {
                let file = GfgFile::open(path).expect("open");
                let sh = Sharded::from_gfg_options(file, Arc::new(c), &opts).expect("shard");
                let out = k.iterate(&sh, &ins, "out", "x", 3, &tiga::Schedule::default()).expect("iterate");
                let l = sh.local();
                (
                    sh.owned_dst().to_vec(),
                    l.rows.clone(),
                    l.slots.clone(),
                    l.edge_ids.clone(),
                    out.f32("out").expect("out").to_vec(),
                )
            });
            let from_memory = InProcess::run(3, |c| {
                let sh = Sharded::from_graph(&g, Arc::new(c), &opts).expect("shard");
                let l = sh.local();
                (l.rows.clone(), l.slots.clone(), l.edge_ids.clone())
            });
            for (f, m) in from_file.into_iter().zip(from_memory) {
                let (ids, rows, slots, edges, out) = f.expect("rank");
                let (m_rows, m_slots, m_edges) = m.expect("rank");
                assert_eq!((&rows, &slots, &edges), (&m_rows, &m_slots, &m_edges), "depth {depth}: {}'s plan", path.display());
                let exp: Vec<u32> = ids.iter().map(|&u| want[u as usize].to_bits()).collect();
                assert_eq!(out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), exp, "depth {depth}");
            }
        }
    }
}

#[test]
fn a_deep_halo_of_a_non_square_file_is_refused_before_reading() {
    let mut rng = Rng(0x5eed_0004);
    let dir = tempfile::tempdir().expect("tempdir");
    let g = common::random_graph(&mut rng, 13, 29, 70, true);
    let path = dir.path().join("rect.gfg");
    save_gfg(&path, &g, false, &[]).expect("save");
    let res = InProcess::run(2, |c| {
        let file = GfgFile::open(&path).expect("open");
        let opts = ShardOptions { partition: PartitionChoice::Contiguous, depth: 2 };
        Sharded::from_gfg_options(file, Arc::new(c), &opts).map(|_| ()).map_err(|e| e.to_string())
    });
    for r in res {
        let e = r.expect("rank").expect_err("refused");
        assert!(e.contains("13 sources") || e.contains("square"), "{e}");
    }
}

/// `g` written in `order`'s numbering with `fields` (given in the caller's).
fn save_renumbered(path: &std::path::Path, g: &Graph, order: tiga::Renumber, fields: &[(FieldRole, &str, TensorView<'_>)]) {
    let r = g.renumbered(order).expect("renumbers").expect("an order");
    let mut w = tiga::storage::GfgWriter::renumbered(g, &r).expect("writer");
    for (role, name, view) in fields {
        w = w.field(*role, *name, view.clone());
    }
    w.save(path).expect("save");
}

#[test]
fn paged_rows_inside_each_rank_compute_what_memory_does() {
    let mut rng = Rng(0x5eed_0007);
    let dir = tempfile::tempdir().expect("tempdir");
    let spill = tempfile::tempdir().expect("spill dir");
    let g = common::random_graph(&mut rng, 50, 50, 230, false);
    for (ki, k) in gnn::all().into_iter().enumerate() {
        let fields = random_fields(k, &g, 3, || rng.uniform() - 0.5);
        let ts = tensors(&fields, true);
        let named: Vec<(Role, String, Tensor)> =
            fields.iter().zip(&ts).map(|((r, n, _, _), t)| (*r, n.clone(), t.clone())).collect();
        let all = common::inputs(&fields, &ts);
        let want = k.run(&g, &all).expect("one process");
        let want_g = k.grad(&g, &all, "out").expect("one-process grad");
        let path = dir.path().join(format!("p{ki}.gfg"));
        save_gfg(&path, &g, false, &disk_fields(&named)).expect("save");
        let params = common::params_only(&named);
        // Pages of 4 rows, one ahead, under a 2 KiB budget (outputs spill).
        let schedule = tiga::Schedule::new().page_rows(4).prefetch(1).ram_budget(2048).spill_dir(spill.path());
        for from_file in [false, true] {
            let per_rank = InProcess::run(3, |c| {
                let mut sh = if from_file {
                    Sharded::from_gfg(GfgFile::open(&path).expect("open"), Arc::new(c)).expect("shard")
                } else {
                    Sharded::from_graph(&g, Arc::new(c), &ShardOptions { partition: PartitionChoice::Balanced, depth: 1 })
                        .expect("shard")
                };
                sh.page_local(spill.path()).expect("page the local rows");
                assert!(sh.is_paged() && sh.local().graph.is_none(), "the local CSR left memory");
                let ins = if from_file { params.clone() } else { all.clone() };
                let out = k.run_with(&sh, &ins, &schedule).expect("sharded paged run");
                let grads = k.grad_with(&sh, &ins, "out", &schedule).expect("sharded paged grad");
                (sh.owned_dst().to_vec(), sh.owned_src().to_vec(), out, grads)
            });
            let what = format!("{} ({})", k.name(), if from_file { "file" } else { "memory" });
            for r in per_rank {
                let (dsts, srcs, out, grads) = r.expect("rank");
                assert_owned_bits(&out, &want, &dsts, &what);
                for (role, name, t) in &grads.items {
                    let w = match role {
                        Role::Src => rows_of(want_g.get(*role, name).expect("grad"), srcs.iter().map(|&u| u as usize)),
                        Role::Param => want_g.get(*role, name).expect("grad").to_f64_vec(),
                        _ => continue,
                    };
                    for (x, y) in t.to_f64_vec().iter().zip(&w) {
                        assert!((x - y).abs() <= 1e-6 * y.abs().max(1.0), "{what} d{name}: {x} vs {y}");
                    }
                }
            }
        }
    }
    // Each shard removed its file when it went.
    assert_eq!(
        std::fs::read_dir(spill.path())
            .expect("spill dir")
            .filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "gfg"))
            .count(),
        0
    );
}
