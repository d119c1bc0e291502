//! Sharded graphs read from a `.gfg` every rank opens: each rank reads its
//! own rows' pages and its own rows of the stored fields (counted through
//! the file's read blocks), and computes what one process computes from
//! memory, in contiguous, edge-balanced and METIS (feature `metis`) blocks.

use std::sync::Arc;

use tiga::compiler::ir::Role;
use tiga::runtime::{save_gfg, FieldRole, GfgFile};
use tiga::{Graph, InProcess, Inputs, PartitionChoice, ShardOptions, Sharded, Tensor, TensorView};

mod common;
use common::{disk_fields, random_fields, rows_of, tensors, Rng};

#[path = "common/gnn.rs"]
mod gnn;

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
            let path = dir.path().join(format!("g{gi}-{ki}.gfg"));
            let named: Vec<(Role, String, Tensor)> =
                fields.iter().zip(&ts).map(|((r, n, _, _), t)| (*r, n.clone(), t.clone())).collect();
            save_gfg(&path, &g, false, &disk_fields(&named)).expect("save");
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
                .flat_map(|choice| {
                    InProcess::run(3, |c| {
                        let file = GfgFile::open(&path).expect("open");
                        let sh = Sharded::from_gfg_with(file, Arc::new(c), choice).expect("shard");
                        let out = k.run(&sh, &params).expect("sharded run");
                        let grads = k.grad(&sh, &params, "out").expect("sharded grad");
                        (sh.owned_dst().to_vec(), sh.owned_src().to_vec(), out, grads)
                    })
                })
                .collect();
            for r in per_rank {
                let (dsts, srcs, out, grads) = r.expect("rank");
                let got: Vec<u64> = out.tensor("out").expect("out").to_f64_vec().iter().map(|x| x.to_bits()).collect();
                let exp: Vec<u64> = rows_of(want.tensor("out").expect("out"), dsts.iter().map(|&u| u as usize))
                    .iter()
                    .map(|x| x.to_bits())
                    .collect();
                assert_eq!(got, exp, "{} on graph {gi}", k.name());
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
    let k = gnn::Smoothing::kernel();
    let x: Vec<f32> = (0..60).map(|_| rng.uniform() as f32).collect();
    let ins = Inputs::new().src("x", &x);
    let mut want = x.clone();
    for _ in 0..3 {
        want = k.run(&g, &Inputs::new().src("x", &want)).expect("one process").f32("out").expect("out").to_vec();
    }
    for depth in [1, 2, 3] {
        for partition in [PartitionChoice::Contiguous, PartitionChoice::Balanced] {
            let opts = ShardOptions { partition, depth };
            let from_file = InProcess::run(3, |c| {
                let file = GfgFile::open(&path).expect("open");
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
                assert_eq!((&rows, &slots, &edges), (&m_rows, &m_slots, &m_edges), "depth {depth}: the file's plan");
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
