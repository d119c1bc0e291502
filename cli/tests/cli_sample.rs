//! `tigac sample`: the files of the contract (nodes.npy, hop{k}.src/dst/
//! edge_ids.npy, int64) on a small graph against the graph itself; the same
//! bytes from an edge list and from its .gfg; and bad seeds, fanouts,
//! weights and outputs refused without writing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tiga_runtime::Tensor;
use tiga_storage::{read_npy_ids, write_npy, write_npy_ids};

fn tigac(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tigac")).args(args).output().expect("tigac runs")
}

/// A 200-node graph with a hub, empty rows, self loops and repeated edges.
fn graph(dir: &Path) -> (PathBuf, Vec<(u32, u32)>) {
    let mut s: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: u64| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s % n
    };
    let mut edges = Vec::new();
    for _ in 0..1500 {
        let d = if next(4) == 0 { 0 } else { next(150) as u32 };
        let src = if next(9) == 0 { d } else { next(200) as u32 };
        edges.push((src, d));
    }
    edges.push((199, 199));
    let text: String = edges.iter().map(|(a, b)| format!("{a} {b}\n")).collect();
    let path = dir.join("g.txt");
    std::fs::write(&path, text).expect("graph");
    (path, edges)
}

fn ok(o: &Output) {
    assert!(o.status.success(), "{}\n{}", String::from_utf8_lossy(&o.stderr), String::from_utf8_lossy(&o.stdout));
}

fn read_all(dir: &Path, hops: usize) -> Vec<(String, Vec<i64>)> {
    let mut names = vec!["nodes".to_string()];
    for k in 0..hops {
        for part in ["src", "dst", "edge_ids"] {
            names.push(format!("hop{k}.{part}"));
        }
    }
    names.into_iter().map(|n| (n.clone(), read_npy_ids(dir.join(format!("{n}.npy"))).expect("ids"))).collect()
}

#[test]
fn files_describe_sampled_edges_of_the_graph() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (g, edges) = graph(dir.path());
    let seeds = dir.path().join("seeds.npy");
    write_npy_ids(&seeds, &[0, 5, 199, 5]).expect("seeds");
    let out = dir.path().join("out");
    let s = |p: &Path| p.to_str().expect("path").to_string();
    ok(&tigac(&["sample", "--graph", &s(&g), "--seeds", &s(&seeds), "--fanout", "10,3", "--seed", "7", "--out", &s(&out)]));
    let files = read_all(&out, 2);
    let nodes = &files[0].1;
    assert_eq!(&nodes[..4], &[0, 5, 199, 5], "seeds first, as given");
    let degree = |d: i64| edges.iter().filter(|e| i64::from(e.1) == d).count();
    for k in 0..2 {
        let (src, dst, ids) = (&files[1 + 3 * k].1, &files[2 + 3 * k].1, &files[3 + 3 * k].1);
        assert_eq!(src.len(), dst.len());
        assert_eq!(src.len(), ids.len());
        for ((&s, &d), &e) in src.iter().zip(dst).zip(ids) {
            let (es, ed) = edges[e as usize];
            assert_eq!((i64::from(es), i64::from(ed)), (nodes[s as usize], nodes[d as usize]), "hop {k} edge {e}");
        }
        // Each centre: min(degree, fanout) edges, none twice.
        let fanout = if k == 0 { 10 } else { 3 };
        let mut centres: Vec<i64> = dst.clone();
        centres.dedup();
        for c in centres {
            let mine: Vec<i64> = ids.iter().zip(dst).filter(|(_, &d)| d == c).map(|(&e, _)| e).collect();
            let mut unique = mine.clone();
            unique.sort();
            unique.dedup();
            assert_eq!(unique.len(), mine.len());
            if k == 0 {
                assert_eq!(mine.len(), degree(nodes[c as usize]).min(fanout), "centre {}", nodes[c as usize]);
            }
        }
    }
    // The hub (node 0, ~375 in-edges) gets exactly 10 at hop 0.
    assert_eq!(files[2].1.iter().filter(|&&d| d == 0).count(), 10);

    // The same bytes from the .gfg of the same graph, read a row at a time.
    let gfg = dir.path().join("g.gfg");
    ok(&tigac(&["convert", &s(&g), &s(&gfg)]));
    let out2 = dir.path().join("out2");
    ok(&tigac(&["sample", "--graph", &s(&gfg), "--seeds", &s(&seeds), "--fanout", "10,3", "--seed", "7", "--out", &s(&out2)]));
    for name in ["nodes.npy", "hop0.src.npy", "hop0.dst.npy", "hop0.edge_ids.npy", "hop1.src.npy", "hop1.edge_ids.npy"] {
        assert_eq!(std::fs::read(out.join(name)).expect("a"), std::fs::read(out2.join(name)).expect("b"), "{name}");
    }
    // And from files stored in a node order: sampled in the caller's ids.
    for method in ["degree", "rcm", "cluster"] {
        let gfg = dir.path().join(format!("{method}.gfg"));
        ok(&tigac(&["convert", &s(&g), &s(&gfg), "--renumber", method]));
        let out3 = dir.path().join(format!("out-{method}"));
        ok(&tigac(&[
            "sample",
            "--graph",
            &s(&gfg),
            "--seeds",
            &s(&seeds),
            "--fanout",
            "10,3",
            "--seed",
            "7",
            "--out",
            &s(&out3),
        ]));
        for name in ["nodes.npy", "hop0.src.npy", "hop0.dst.npy", "hop0.edge_ids.npy", "hop1.src.npy", "hop1.edge_ids.npy"] {
            assert_eq!(std::fs::read(out.join(name)).expect("a"), std::fs::read(out3.join(name)).expect("b"), "{method}: {name}");
        }
    }

    // Weighted: a zero-weight edge is never sampled (from the hub, whose
    // degree is over the fanout; a smaller row gives all its edges).
    let hub = dir.path().join("hub.npy");
    write_npy_ids(&hub, &[0]).expect("seeds");
    let w: Vec<f32> = (0..edges.len()).map(|e| (e % 3) as f32).collect();
    let wp = dir.path().join("w.npy");
    write_npy(&wp, &Tensor::from_f32(vec![edges.len()], w).expect("w").view()).expect("write");
    let out3 = dir.path().join("out3");
    ok(&tigac(&["sample", "--graph", &s(&g), "--seeds", &s(&hub), "--fanout", "4", "--weight", &s(&wp), "--out", &s(&out3)]));
    let ids = read_npy_ids(out3.join("hop0.edge_ids.npy")).expect("ids");
    assert!(ids.len() == 4 && ids.iter().all(|e| e % 3 != 0), "{ids:?}");
}

#[test]
fn bad_inputs_are_refused_without_writing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (g, _) = graph(dir.path());
    let s = |p: &Path| p.to_str().expect("path").to_string();
    let seeds = dir.path().join("seeds.npy");
    write_npy_ids(&seeds, &[3, 200]).expect("seeds");
    let out = dir.path().join("out");
    let o = tigac(&["sample", "--graph", &s(&g), "--seeds", &s(&seeds), "--fanout", "2", "--out", &s(&out)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("seed 200 (at index 1) is not a node of the graph (it has 200 nodes)"));
    assert!(!out.exists());
    write_npy_ids(&seeds, &[3]).expect("seeds");
    let o = tigac(&["sample", "--graph", &s(&g), "--seeds", &s(&seeds), "--fanout", "2,x", "--out", &s(&out)]);
    assert_eq!(o.status.code(), Some(2));
    let wp = dir.path().join("w.npy");
    write_npy(&wp, &Tensor::from_f32(vec![3], vec![1.0; 3]).expect("w").view()).expect("write");
    let o = tigac(&["sample", "--graph", &s(&g), "--seeds", &s(&seeds), "--fanout", "2", "--weight", &s(&wp), "--out", &s(&out)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("one weight per edge"), "{}", String::from_utf8_lossy(&o.stderr));
    // A float array is not a seed list.
    let o = tigac(&["sample", "--graph", &s(&g), "--seeds", &s(&wp), "--fanout", "2", "--out", &s(&out)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("ids must be integers"));
    // The output folder holding an input of the same name: refused, input intact.
    let before = std::fs::read(&seeds).expect("seeds");
    std::fs::copy(&seeds, dir.path().join("nodes.npy")).expect("copy");
    let o = tigac(&[
        "sample",
        "--graph",
        &s(&g),
        "--seeds",
        &s(&dir.path().join("nodes.npy")),
        "--fanout",
        "2",
        "--out",
        &s(dir.path()),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("would overwrite the input"));
    assert_eq!(std::fs::read(dir.path().join("nodes.npy")).expect("seeds"), before);
}
