//! Partitioned tensors over in-process ranks, against a plain array: every
//! memory type (hierarchy on two simulated nodes), 1 to 4 ranks, every
//! element type; uneven splits, records of several rows, ranks with no
//! rows, empty and bad index lists, duplicates, sub-tensors, files and the
//! node cache.

mod common;

use std::sync::Mutex;

use common::Rng;
use tiga_dist::comm::{Communicator, InProcess};
use tiga_dist::partitioned::{
    part_path, CacheMode, CachePolicy, Capability, Location, MemoryType, Options, PartitionedError, PartitionedTensor, RowSplit,
};
use tiga_runtime::element::{bytes_of, Element};
use tiga_runtime::ElementType;
use tiga_storage::npy::{read_npy_array, write_npy_array, NpyArray};

/// The hosts of `ranks` ranks for `memory`: one host, except hierarchy,
/// which runs on two simulated nodes when the ranks split evenly (else one
/// node per rank).
fn hosts(memory: MemoryType, ranks: usize) -> Vec<usize> {
    match memory {
        MemoryType::Hierarchy if ranks.is_multiple_of(2) => (0..ranks).map(|r| r / (ranks / 2)).collect(),
        MemoryType::Hierarchy => (0..ranks).collect(),
        MemoryType::Distributed if ranks == 4 => vec![0, 0, 1, 1],
        _ => vec![0; ranks],
    }
}

/// Run `f` on every rank and unwrap every rank's result.
fn on_ranks<T: Send>(hosts: &[usize], f: impl Fn(&dyn Communicator) -> T + Sync) -> Vec<T> {
    InProcess::run_on_hosts(hosts, |c| f(&c)).into_iter().map(|r| r.expect("rank thread")).collect()
}

/// A value of element type `T` made from `x`.
trait Make: Element {
    fn make(x: u64) -> Self;
}
impl Make for f32 {
    fn make(x: u64) -> f32 {
        (x % 1000) as f32 * 0.25 - 100.0
    }
}
impl Make for f64 {
    fn make(x: u64) -> f64 {
        (x % 100_000) as f64 * 0.125 - 1000.0
    }
}
impl Make for i32 {
    fn make(x: u64) -> i32 {
        x as i32
    }
}
impl Make for i64 {
    fn make(x: u64) -> i64 {
        x as i64
    }
}

/// Scatter `plain` (rows × `width`) into `t`, each rank writing the rows
/// `r, r + R, r + 2R, ...` (so that most writes are remote).
fn fill<T: Element>(t: &PartitionedTensor, plain: &[T], width: usize) {
    let (r, n) = (t.rank(), t.ranks());
    let rows: Vec<i64> = (r..t.shape()[0]).step_by(n).map(|i| i as i64).collect();
    let vals: Vec<T> = rows.iter().flat_map(|&i| plain[i as usize * width..(i as usize + 1) * width].to_vec()).collect();
    t.scatter(&rows, &vals).expect("scatter");
}

fn expected<T: Element>(plain: &[T], width: usize, idx: &[i64]) -> Vec<T> {
    idx.iter().flat_map(|&i| plain[i as usize * width..(i as usize + 1) * width].to_vec()).collect()
}

fn roundtrip_case<T: Make>(memory: MemoryType, ranks: usize, shape: &[usize], options: &Options) {
    let width: usize = shape[1..].iter().product();
    let n = shape[0];
    let plain: Vec<T> = (0..n * width).map(|i| T::make(i as u64 * 7 + 3)).collect();
    let res = on_ranks(&hosts(memory, ranks), |c| {
        let t = PartitionedTensor::new(c, T::TYPE, shape, options).expect("tensor");
        fill(&t, &plain, width);
        let mut rng = Rng(c.rank() as u64 + 11);
        // Random rows with duplicates, every row once, and nothing.
        let random: Vec<i64> = (0..3 * n + usize::from(n > 0)).map(|_| rng.below(n) as i64).collect();
        let all: Vec<i64> = (0..n as i64).rev().collect();
        let mut ok = true;
        for idx in [random, all, Vec::new()] {
            let got: Vec<T> = t.gather(&idx).expect("gather");
            ok &= got == expected(&plain, width, &idx);
        }
        // The local view holds this rank's rows.
        let local = t.local_rows();
        let view_ok = t
            .with_local::<T, _>(|v| {
                (0..v.rows()).all(|i| v.row(i) == &plain[(local.start + i) * width..(local.start + i + 1) * width])
            })
            .expect("local view");
        (ok, view_ok, local.len())
    });
    let total: usize = res.iter().map(|r| r.2).sum();
    assert_eq!(total, n, "{memory:?} {ranks} ranks: the partitions cover the rows");
    for (r, (ok, view_ok, _)) in res.into_iter().enumerate() {
        assert!(ok, "{memory:?}, {ranks} ranks, {:?}, rank {r}: gathered rows differ from the plain array", T::TYPE);
        assert!(view_ok, "{memory:?}, {ranks} ranks, rank {r}: local view differs");
    }
}

#[test]
fn every_memory_type_and_rank_count_matches_a_plain_array() {
    for memory in MemoryType::ALL {
        for ranks in 1..=4 {
            let o = Options::memory(memory);
            roundtrip_case::<f32>(memory, ranks, &[37, 5], &o);
            roundtrip_case::<f64>(memory, ranks, &[11, 2, 3], &o);
            roundtrip_case::<i32>(memory, ranks, &[9], &o);
            roundtrip_case::<i64>(memory, ranks, &[3, 1, 1, 1, 1, 1, 1, 2], &o);
        }
    }
}

#[test]
fn uneven_splits_records_and_empty_ranks() {
    for memory in MemoryType::ALL {
        // Records of 3 rows; rank 1 holds none, rank 2 most.
        let o = Options { granularity: 3, split: RowSplit::Rows(vec![6, 0, 15, 3]), ..Options::memory(memory) };
        roundtrip_case::<f32>(memory, 4, &[24, 4], &o);
        let even = Options { granularity: 3, ..Options::memory(memory) };
        roundtrip_case::<i64>(memory, 4, &[21, 2], &even);
        // More ranks than rows.
        roundtrip_case::<f64>(memory, 4, &[2, 3], &Options::memory(memory));
        roundtrip_case::<f64>(memory, 2, &[0, 3], &Options::memory(memory));
    }
}

#[test]
fn every_rank_can_ask_every_partition() {
    let res = on_ranks(&[0, 0, 0], |c| {
        let o = Options { granularity: 2, ..Options::default() };
        let t = PartitionedTensor::new(c, ElementType::F32, &[10, 1], &o).expect("tensor");
        ((0..3).map(|r| t.partition(r)).collect::<Vec<_>>(), t.local_rows())
    });
    for (r, (parts, local)) in res.into_iter().enumerate() {
        assert_eq!(parts, vec![0..4, 4..8, 8..10]);
        assert_eq!(local, parts[r]);
    }
}

#[test]
fn out_of_range_indices_are_refused_by_name_on_every_rank() {
    for memory in MemoryType::ALL {
        let res = on_ranks(&hosts(memory, 4), |c| {
            let t = PartitionedTensor::new(c, ElementType::I64, &[8, 2], &Options::memory(memory)).expect("tensor");
            let plain: Vec<i64> = (0..16).collect();
            fill(&t, &plain, 2);
            let idx: Vec<i64> = match c.rank() {
                1 => vec![3, 8, 2],
                2 => vec![-1],
                _ => vec![7, 0],
            };
            let g = t.gather::<i64>(&idx).map_err(|e| e.to_string());
            let s = t.scatter::<i64>(&idx, &vec![5; idx.len() * 2]).map_err(|e| e.to_string());
            let wrong_type = t.gather::<f32>(&[0]).map_err(|e| e.to_string());
            // The ranks are still in step: a good gather works everywhere,
            // and the refused scatter wrote nothing.
            let after = t.gather::<i64>(&[7]).expect("gather after the errors");
            (g, s, wrong_type, after)
        });
        // Gathers that send nothing fail on their rank alone.
        let local = matches!(memory, MemoryType::Continuous | MemoryType::Chunked);
        for (r, (g, s, wt, after)) in res.into_iter().enumerate() {
            let s = s.expect_err("a scatter is refused everywhere");
            match r {
                1 => {
                    let e = g.expect_err("8 is out of range");
                    assert!(e.contains("index 8 (position 1)") && e.contains("8 rows"), "{e}");
                    assert!(s.contains("index 8"), "{s}");
                }
                2 => {
                    assert!(g.expect_err("-1 is out of range").contains("index -1 (position 0)"));
                    assert!(s.contains("index -1"), "{s}");
                }
                _ if local => assert_eq!(g.expect("rows"), vec![14, 15, 0, 1], "{memory:?} rank {r}"),
                _ => {
                    let e = g.expect_err("another rank's bad index");
                    assert!(e.starts_with("rank 1 failed: index 8 (position 1)"), "{memory:?} rank {r}: {e}");
                    assert!(s.starts_with("rank 1 failed"), "{s}");
                }
            }
            assert!(wt.expect_err("wrong type").contains("holds i64, but f32"));
            assert_eq!(after, vec![14, 15]);
        }
    }
}

#[test]
fn duplicate_writes_end_with_the_last_in_index_order() {
    for memory in MemoryType::ALL {
        let res = on_ranks(&hosts(memory, 4), |c| {
            let t = PartitionedTensor::new(c, ElementType::I32, &[6], &Options::memory(memory)).expect("tensor");
            let r = c.rank() as i32;
            // Every rank writes row 4 twice (10r, then 10r + 1); row 1 is
            // written by ranks 0 and 2 only.
            let (idx, vals): (Vec<i64>, Vec<i32>) = if r % 2 == 0 {
                (vec![4, 1, 4], vec![10 * r, 100 + r, 10 * r + 1])
            } else {
                (vec![4, 4], vec![10 * r, 10 * r + 1])
            };
            t.scatter(&idx, &vals).expect("scatter");
            t.gather::<i32>(&[4, 1, 0]).expect("gather")
        });
        for got in res {
            // The highest rank's last write wins.
            assert_eq!(got, vec![31, 102, 0], "{memory:?}");
        }
    }
}

#[test]
fn sub_tensors_read_and_write_through_to_the_root() {
    for memory in MemoryType::ALL {
        let res = on_ranks(&hosts(memory, 4), |c| {
            let t = PartitionedTensor::new(c, ElementType::F64, &[10, 4, 2], &Options::memory(memory)).expect("tensor");
            let plain: Vec<f64> = (0..80).map(|i| i as f64).collect();
            fill(&t, &plain, 8);
            let sub = t.rows(3..9).expect("rows").columns(1..3).expect("columns");
            assert_eq!(sub.shape(), &[6, 2, 2]);
            assert!(!sub.is_root());
            let got: Vec<f64> = sub.gather(&[0, 5]).expect("gather");
            // Root rows 3 and 8, elements 2..6 of each.
            let want: Vec<f64> = [3usize, 8].iter().flat_map(|&r| (r * 8 + 2..r * 8 + 6).map(|i| i as f64)).collect();
            let read_ok = got == want;
            // Rank 3 writes sub row 2 (root row 5), columns 1..3 only.
            let (idx, vals) = if c.rank() == 3 { (vec![2i64], vec![-1.0f64; 4]) } else { (Vec::new(), Vec::new()) };
            sub.scatter(&idx, &vals).expect("scatter");
            let row5: Vec<f64> = t.gather(&[5]).expect("gather");
            let mut want5: Vec<f64> = (40..48).map(|i| i as f64).collect();
            want5[2..6].fill(-1.0);
            let bad = sub.gather::<f64>(&[6]).map_err(|e| e.to_string());
            let partition = sub.partition(c.rank());
            (read_ok, row5 == want5, bad, partition)
        });
        let parts: usize = res.iter().map(|r| r.3.len()).sum();
        assert_eq!(parts, 6);
        for (read_ok, write_ok, bad, _) in res {
            assert!(read_ok && write_ok, "{memory:?}");
            assert!(bad.expect_err("6 is past the sub-tensor").contains("index 6"));
        }
    }
}

#[test]
fn pointer_views_on_shared_memory() {
    let res = on_ranks(&[0, 0, 0], |c| {
        let t = PartitionedTensor::new(c, ElementType::I32, &[7, 2], &Options::memory(MemoryType::Continuous)).expect("tensor");
        let plain: Vec<i32> = (0..14).collect();
        fill(&t, &plain, 2);
        let all = t.with_all::<i32, _>(|v| v.contiguous().map(<[i32]>::to_vec)).expect("with_all");
        let chunk =
            t.with_chunk::<i32, _>(2, |v| (0..v.rows()).flat_map(|i| v.row(i).to_vec()).collect::<Vec<_>>()).expect("chunk");
        let cols = t.columns(1..2).expect("columns");
        let col = cols.with_all::<i32, _>(|v| (0..v.rows()).map(|i| v.row(i)[0]).collect::<Vec<_>>()).expect("column view");
        (all, chunk, col)
    });
    for (all, chunk, col) in res {
        assert_eq!(all, Some((0..14).collect::<Vec<_>>()));
        assert_eq!(chunk, (10..14).collect::<Vec<_>>());
        assert_eq!(col, vec![1, 3, 5, 7, 9, 11, 13]);
    }
    let res = on_ranks(&[0, 0], |c| {
        let t = PartitionedTensor::new(c, ElementType::I32, &[4], &Options::memory(MemoryType::Distributed)).expect("tensor");
        (t.with_all::<i32, _>(|_| ()).map_err(|e| e.to_string()), t.with_chunk::<i32, _>(0, |_| ()).map_err(|e| e.to_string()))
    });
    for (a, b) in res {
        assert!(a.expect_err("distributed").contains("continuous"));
        assert!(b.expect_err("distributed").contains("chunked"));
    }
}

#[test]
fn local_writes_are_seen_by_every_rank() {
    for memory in MemoryType::ALL {
        let res = on_ranks(&hosts(memory, 4), |c| {
            let t = PartitionedTensor::new(c, ElementType::F32, &[9, 2], &Options::memory(memory)).expect("tensor");
            let start = t.local_rows().start;
            t.with_local_mut::<f32, _>(|mut v| {
                for i in 0..v.rows() {
                    v.row_mut(i).copy_from_slice(&[(start + i) as f32, -((start + i) as f32)]);
                }
            })
            .expect("local write");
            t.gather::<f32>(&(0..9).collect::<Vec<i64>>()).expect("gather")
        });
        let want: Vec<f32> = (0..9).flat_map(|i| [i as f32, -(i as f32)]).collect();
        for got in res {
            assert_eq!(got, want, "{memory:?}");
        }
    }
}

#[test]
fn capability_refuses_what_cannot_work() {
    let res = on_ranks(&[0, 0, 1, 1], |c| {
        let m: Vec<String> = [
            (MemoryType::Continuous, Location::Host),
            (MemoryType::Chunked, Location::Host),
            (MemoryType::Distributed, Location::Device),
            (MemoryType::Hierarchy, Location::Host),
            (MemoryType::Distributed, Location::Host),
        ]
        .iter()
        .map(|&(m, l)| match Capability::check_on(m, l, c) {
            Ok(()) => "ok".to_string(),
            Err(e) => e.to_string(),
        })
        .collect();
        let made = PartitionedTensor::new(c, ElementType::F32, &[4], &Options::memory(MemoryType::Continuous)).map(|_| ());
        (m, made.map_err(|e| e.to_string()))
    });
    for (m, made) in res {
        assert!(m[0].contains("spans 2 nodes; use hierarchy or distributed"), "{}", m[0]);
        assert!(m[1].contains("spans 2 nodes"));
        assert!(m[2].contains("arrives with the CUDA runtime"), "{}", m[2]);
        assert_eq!(m[3], "ok");
        assert_eq!(m[4], "ok");
        assert!(made.expect_err("refused").contains("spans 2 nodes"));
    }
    let res = on_ranks(&[0, 0, 1], |c| Capability::check_on(MemoryType::Hierarchy, Location::Host, c).map_err(|e| e.to_string()));
    for r in res {
        assert!(r.expect_err("uneven nodes").contains("these nodes have [2, 1]"));
    }
    for (shape, opts) in [
        (vec![], Options::default()),
        (vec![1; 9], Options::default()),
        (vec![5, 2], Options { granularity: 2, ..Options::default() }),
        (vec![4], Options { cache: CachePolicy::LocalNode { ratio: 0.0, mode: CacheMode::ReadOnly }, ..Options::default() }),
    ] {
        let res = on_ranks(&[0, 1], |c| PartitionedTensor::new(c, ElementType::F32, &shape, &opts).map(|_| ()));
        for r in res {
            assert!(r.is_err(), "{shape:?} {opts:?}");
        }
    }
}

#[test]
fn files_round_trip_whole_and_per_rank() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plain: Vec<f32> = (0..60).map(|i| i as f32 * 0.5).collect();
    let whole = dir.path().join("table.npy");
    write_npy_array(&whole, &NpyArray::new(ElementType::F32, vec![20, 3], bytes_of(&plain).to_vec()).expect("array"))
        .expect("write");
    let out = dir.path().join("out.npy");
    let prefix = dir.path().join("parts");
    for memory in MemoryType::ALL {
        for ranks in 1..=4 {
            let res = on_ranks(&hosts(memory, ranks), |c| {
                let o = Options {
                    split: RowSplit::Rows((0..ranks).map(|r| if r == 0 { 20 - 5 * (ranks - 1) } else { 5 }).collect()),
                    ..Options::memory(memory)
                };
                let t = PartitionedTensor::new(c, ElementType::F32, &[20, 3], &o).expect("tensor");
                t.load_npy(&whole).expect("load");
                let got: Vec<f32> = t.gather(&(0..20).collect::<Vec<i64>>()).expect("gather");
                t.store_npy(&out).expect("store");
                t.store_per_rank(&prefix).expect("store per rank");
                let back = PartitionedTensor::new(c, ElementType::F32, &[20, 3], &o).expect("tensor");
                back.load_per_rank(&prefix).expect("load per rank");
                let again: Vec<f32> = back.gather(&(0..20).collect::<Vec<i64>>()).expect("gather");
                got == plain && again == plain
            });
            assert!(res.iter().all(|&ok| ok), "{memory:?} {ranks}");
            assert_eq!(std::fs::read(&out).expect("out"), std::fs::read(&whole).expect("whole"), "{memory:?} {ranks}");
            let part = read_npy_array(part_path(&prefix, ranks - 1, ranks)).expect("part");
            assert_eq!(part.shape, vec![if ranks == 1 { 20 } else { 5 }, 3]);
        }
    }
}

#[test]
fn file_errors_reach_every_rank() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wrong = dir.path().join("wrong.npy");
    write_npy_array(&wrong, &NpyArray::new(ElementType::I32, vec![4], vec![0; 16]).expect("array")).expect("write");
    let missing = dir.path().join("nothing");
    let res = on_ranks(&[0, 0, 0], |c| {
        let t = PartitionedTensor::new(c, ElementType::F32, &[4, 2], &Options::default()).expect("tensor");
        let a = t.load_npy(&wrong).map_err(|e| e.to_string());
        let b = t.load_per_rank(&missing).map_err(|e| e.to_string());
        let c2 = t.store_npy(dir.path().join("no/such/dir/x.npy")).map_err(|e| e.to_string());
        let sub = t.rows(0..2).expect("rows").store_npy(dir.path().join("sub.npy")).map_err(|e| e.to_string());
        (a, b, c2, sub)
    });
    for (r, (a, b, c, sub)) in res.into_iter().enumerate() {
        assert!(a.expect_err("wrong type").contains("holds i32 [4]"), "rank {r}");
        assert!(b.expect_err("missing").contains(&format!("nothing_part_{r}_of_3.npy")), "rank {r}");
        let c = c.expect_err("no dir");
        if r == 0 {
            assert!(c.contains("no/such/dir"), "{c}");
        } else {
            assert!(c.starts_with("rank 0 failed"), "{c}");
        }
        assert!(sub.expect_err("sub-tensor").contains("not a sub-tensor"));
    }
}

/// The node cache changes no result, under reads and writes, and counts.
#[test]
fn the_node_cache_changes_no_result() {
    for memory in [MemoryType::Distributed, MemoryType::Hierarchy] {
        for mode in [CacheMode::ReadOnly, CacheMode::ReadWrite] {
            let log = Mutex::new(Vec::new());
            let run = |cache: CachePolicy| {
                on_ranks(&[0, 0, 1, 1], |c| {
                    let o = Options { cache, ..Options::memory(memory) };
                    let t = PartitionedTensor::new(c, ElementType::F32, &[50, 3], &o).expect("tensor");
                    let plain: Vec<f32> = (0..150).map(|i| i as f32).collect();
                    fill(&t, &plain, 3);
                    let mut rng = Rng(c.rank() as u64);
                    let mut seen = Vec::new();
                    for round in 0..6 {
                        let idx: Vec<i64> = (0..40).map(|_| rng.below(50) as i64).collect();
                        seen.push(t.gather::<f32>(&idx).expect("gather"));
                        seen.push(t.gather::<f32>(&idx[..20]).expect("gather"));
                        let (wi, wv): (Vec<i64>, Vec<f32>) =
                            (0..5).map(|k| (rng.below(50) as i64, (round * 100 + k) as f32)).unzip();
                        let wv: Vec<f32> = wv.iter().flat_map(|&v| [v, v + 0.5, -v]).collect();
                        t.scatter(&wi, &wv).expect("scatter");
                    }
                    if let Some(s) = t.cache_stats() {
                        log.lock().expect("log").push(s);
                    }
                    seen
                })
            };
            let plain = run(CachePolicy::None);
            let cached = run(CachePolicy::LocalNode { ratio: 0.5, mode });
            assert_eq!(plain, cached, "{memory:?} {mode:?}");
            let stats = log.into_inner().expect("log");
            assert_eq!(stats.len(), 4);
            assert!(stats.iter().all(|s| s.slots == 25));
            let hits: u64 = stats.iter().map(|s| s.hits).sum();
            assert!(hits > 0, "{memory:?} {mode:?}: {stats:?}");
        }
    }
}

#[test]
fn stale_caches_are_refused_until_refreshed() {
    let res = on_ranks(&[0, 1], |c| {
        let o = Options {
            cache: CachePolicy::LocalNode { ratio: 1.0, mode: CacheMode::ReadWrite },
            ..Options::memory(MemoryType::Distributed)
        };
        let t = PartitionedTensor::new(c, ElementType::I64, &[4], &o).expect("tensor");
        // Filled through local views before any gather: nothing is stale.
        let start = t.local_rows().start;
        t.with_local_mut::<i64, _>(|mut v| (0..v.rows()).for_each(|i| v.row_mut(i)[0] = (start + i) as i64 + 1)).expect("fill");
        let first = t.gather::<i64>(&[0, 1, 2, 3]).expect("gather");
        t.with_local_mut::<i64, _>(|mut v| {
            for i in 0..v.rows() {
                v.row_mut(i)[0] *= 10;
            }
        })
        .expect("write");
        let stale = matches!(t.gather::<i64>(&[0]), Err(PartitionedError::StaleCache));
        let refreshed = t.writeback_all_cache().expect("refresh");
        let after = t.gather::<i64>(&[0, 1, 2, 3]).expect("gather");
        let stats = t.cache_stats().expect("stats");
        t.drop_all_cache().expect("drop");
        let again = t.gather::<i64>(&[3, 0]).expect("gather");
        (first, stale, refreshed, after, stats, again, t.cache_stats().expect("stats"))
    });
    for (r, (first, stale, refreshed, after, stats, again, later)) in res.into_iter().enumerate() {
        assert_eq!(first, vec![1, 2, 3, 4]);
        assert!(stale);
        assert_eq!(refreshed, 2, "rank {r}: the two remote rows in its slots");
        assert_eq!(after, vec![10, 20, 30, 40]);
        assert_eq!((stats.hits, stats.misses), (2, 2), "rank {r}");
        assert_eq!(again, vec![40, 10]);
        assert_eq!(later.misses, 3, "rank {r}: after the drop, the remote row is fetched again");
    }
}
