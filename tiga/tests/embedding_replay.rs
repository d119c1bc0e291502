//! The `embedding_replay` example from outside: its files against the same
//! replay through the library on in-process ranks, the same bytes for
//! every memory type and cache policy, refusals of bad input, and (built
//! with `--features mpi`, where `mpirun` exists) `mpirun -n R` writing the
//! bytes of one process, hierarchy on two simulated nodes included.
//!
//! The example's binary is the one `cargo test` builds beside this test
//! (`target/<profile>/examples/embedding_replay`); a filtered run
//! (`--test embedding_replay`) needs `cargo build --example
//! embedding_replay` first, as `.ci/feature-suite` does.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tiga::runtime::comm::InProcess;
use tiga::runtime::element::bytes_of;
use tiga::runtime::embedding::{Embedding, Optimizer};
use tiga::runtime::npy::{read_npy_array, write_npy_array, NpyArray};
use tiga::runtime::partition::owned_range;
use tiga::runtime::partitioned::{CacheMode, CachePolicy, MemoryType, Options};
use tiga::runtime::ElementType;

const N: usize = 50;
const D: usize = 6;
const S: usize = 8;
const B: usize = 20;

fn example() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    let dir = exe.parent().and_then(Path::parent).expect("target profile directory");
    let bin = dir.join("examples").join("embedding_replay");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --example embedding_replay` (plain `cargo test` builds it)",
        bin.display()
    );
    bin
}

struct Files {
    table: PathBuf,
    indices: PathBuf,
    grads: PathBuf,
    table_vals: Vec<f32>,
    idx: Vec<i64>,
    g: Vec<f32>,
}

fn inputs(dir: &Path) -> Files {
    let mut s: u64 = 0x9e37_79b9;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let table_vals: Vec<f32> = (0..N * D).map(|_| (next() % 2000) as f32 / 1000.0 - 1.0).collect();
    // Indices from the first 30 rows, so that batches repeat rows.
    let idx: Vec<i64> = (0..S * B).map(|_| (next() % 30) as i64).collect();
    let g: Vec<f32> = (0..S * B * D).map(|_| (next() % 2000) as f32 / 1000.0 - 1.0).collect();
    let save = |name: &str, t: ElementType, shape: Vec<usize>, bytes: &[u8]| {
        let p = dir.join(name);
        write_npy_array(&p, &NpyArray::new(t, shape, bytes.to_vec()).expect("array")).expect("write");
        p
    };
    Files {
        table: save("table.npy", ElementType::F32, vec![N, D], bytes_of(&table_vals)),
        indices: save("idx.npy", ElementType::I64, vec![S, B], bytes_of(&idx)),
        grads: save("grads.npy", ElementType::F32, vec![S, B, D], bytes_of(&g)),
        table_vals,
        idx,
        g,
    }
}

fn args(f: &Files, opt: &str, memory: &str, cache: &str, out: &Path, gathered: &Path) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "--table".into(),
        f.table.display().to_string(),
        "--indices".into(),
        f.indices.display().to_string(),
        "--grads".into(),
        f.grads.display().to_string(),
        "--optimizer".into(),
        opt.into(),
        "--lr".into(),
        "0.03".into(),
        "--memory".into(),
        memory.into(),
        "--cache".into(),
        cache.into(),
        "--out".into(),
        out.display().to_string(),
        "--gathered".into(),
        gathered.display().to_string(),
    ];
    if opt == "adagrad" {
        a.extend(["--weight-decay".into(), "0.01".into()]);
    }
    a
}

fn ok(o: &Output, what: &str) {
    assert!(o.status.success(), "{what}: {}\n{}", String::from_utf8_lossy(&o.stderr), String::from_utf8_lossy(&o.stdout));
}

/// The replay through the library on four in-process ranks on two nodes
/// (hierarchy, read-write cache): the final table and the gathered rows.
fn library(f: &Files, opt: Optimizer) -> (Vec<f32>, Vec<f32>) {
    let res = InProcess::run_on_hosts(&[0, 0, 1, 1], |c| {
        let o = Options {
            cache: CachePolicy::LocalNode { ratio: 0.3, mode: CacheMode::ReadWrite },
            ..Options::memory(MemoryType::Hierarchy)
        };
        let mut e = Embedding::<f32>::new(&c, N, D, &o, opt).expect("embedding");
        e.table().load_npy(&f.table).expect("load");
        let block = owned_range(B, 4, tiga::Communicator::rank(&c));
        let mut gathered = Vec::new();
        for s in 0..S {
            let idx = &f.idx[s * B + block.start..s * B + block.end];
            gathered.push(e.gather(idx).expect("gather"));
            e.accumulate(idx, &f.g[(s * B + block.start) * D..(s * B + block.end) * D]).expect("grads");
            e.step(0.03).expect("step");
        }
        (e.gather(&(0..N as i64).collect::<Vec<_>>()).expect("table"), gathered)
    });
    let per_rank: Vec<(Vec<f32>, Vec<Vec<f32>>)> = res.into_iter().map(|r| r.expect("rank")).collect();
    let table = per_rank[0].0.clone();
    let gathered = (0..S).flat_map(|s| per_rank.iter().flat_map(move |(_, g)| g[s].clone())).collect();
    (table, gathered)
}

fn f32s(path: &Path) -> (Vec<usize>, Vec<f32>) {
    let a = read_npy_array(path).expect("npy");
    (a.shape.clone(), a.values::<f32>().expect("f32"))
}

#[test]
fn replay_matches_the_library_and_every_memory_type_and_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = inputs(dir.path());
    let bin = example();
    for opt in ["sgd", "adagrad", "rmsprop", "lazy_adam"] {
        let out = dir.path().join(format!("{opt}.out.npy"));
        let gathered = dir.path().join(format!("{opt}.gathered.npy"));
        ok(&Command::new(&bin).args(args(&f, opt, "distributed", "none", &out, &gathered)).output().expect("run"), opt);
        let mut o = Optimizer::parse(opt).expect("optimizer");
        if opt == "adagrad" {
            o = o.with_weight_decay(0.01);
        }
        let (table, rows) = library(&f, o);
        let (shape, got) = f32s(&out);
        assert_eq!(shape, vec![N, D]);
        assert!(
            got.iter().map(|x| x.to_bits()).eq(table.iter().map(|x| x.to_bits())),
            "{opt}: the table differs from the library's"
        );
        assert!(got != f.table_vals, "{opt}: the table did not move");
        let (gshape, grows) = f32s(&gathered);
        assert_eq!(gshape, vec![S, B, D]);
        assert!(grows.iter().map(|x| x.to_bits()).eq(rows.iter().map(|x| x.to_bits())), "{opt}: gathered rows differ");
        // The first step gathers the initial table's rows.
        let first: Vec<f32> =
            f.idx[..B].iter().flat_map(|&i| f.table_vals[i as usize * D..(i as usize + 1) * D].to_vec()).collect();
        assert_eq!(&grows[..B * D], first.as_slice());
        let want = (std::fs::read(&out).expect("out"), std::fs::read(&gathered).expect("gathered"));
        for memory in ["continuous", "chunked", "distributed", "hierarchy"] {
            for cache in ["none", "local_node"] {
                let (o2, g2) = (dir.path().join("x.npy"), dir.path().join("y.npy"));
                ok(&Command::new(&bin).args(args(&f, opt, memory, cache, &o2, &g2)).output().expect("run"), memory);
                assert!(std::fs::read(&o2).expect("out") == want.0, "{opt} {memory} {cache}: other bytes");
                assert!(std::fs::read(&g2).expect("gathered") == want.1, "{opt} {memory} {cache}: other gathered bytes");
            }
        }
    }
}

#[test]
fn bad_input_is_refused_with_a_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = inputs(dir.path());
    let bin = example();
    let out = dir.path().join("o.npy");
    let g = dir.path().join("g.npy");
    let run = |a: Vec<String>| Command::new(&bin).args(a).output().expect("run");
    // Indices as float32.
    let bad_idx = dir.path().join("bad_idx.npy");
    write_npy_array(&bad_idx, &NpyArray::new(ElementType::F32, vec![S, B], vec![0; S * B * 4]).expect("array")).expect("write");
    let mut a = args(&f, "sgd", "distributed", "none", &out, &g);
    a[3] = bad_idx.display().to_string();
    let o = run(a);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("must be int64"), "{o:?}");
    // An index past the table.
    let far = dir.path().join("far.npy");
    let mut idx = f.idx.clone();
    idx[B + 3] = N as i64;
    write_npy_array(&far, &NpyArray::new(ElementType::I64, vec![S, B], bytes_of(&idx).to_vec()).expect("array")).expect("write");
    let mut a = args(&f, "sgd", "distributed", "none", &out, &g);
    a[3] = far.display().to_string();
    let o = run(a);
    assert!(String::from_utf8_lossy(&o.stderr).contains("index 50 at step 1, position 3"), "{o:?}");
    // Gradients of the wrong width; an unknown optimizer; no --out.
    let mut a = args(&f, "sgd", "distributed", "none", &out, &g);
    a[5] = f.table.display().to_string();
    assert!(String::from_utf8_lossy(&run(a).stderr).contains("the gradients must be float32 [8, 20, 6]"));
    let o = run(args(&f, "adam", "distributed", "none", &out, &g));
    assert!(o.status.code() == Some(2) && String::from_utf8_lossy(&o.stderr).contains("unknown optimizer \"adam\""));
    let mut a = args(&f, "sgd", "distributed", "none", &out, &g);
    a.truncate(14);
    assert!(String::from_utf8_lossy(&run(a).stderr).contains("--out is required"));
    assert!(!out.exists(), "no output on refusal");
}

/// `mpirun -n R` writes the bytes one process writes.
#[cfg(feature = "mpi")]
#[test]
fn mpirun_writes_the_bytes_of_one_process() {
    if Command::new("mpirun").arg("--version").output().is_err() {
        eprintln!("mpirun not found: skipped");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let f = inputs(dir.path());
    let bin = example();
    let mpirun = |n: usize, per_node: Option<usize>| {
        let mut c = Command::new("mpirun");
        c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
            .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
            .args(["-n", &n.to_string()]);
        if let Some(k) = per_node {
            c.args(["-x", &format!("TIGA_RANKS_PER_NODE={k}")]);
        }
        c.arg(&bin);
        c
    };
    for opt in ["adagrad", "lazy_adam"] {
        let (out, gathered) = (dir.path().join("one.npy"), dir.path().join("one.g.npy"));
        ok(&Command::new(&bin).args(args(&f, opt, "distributed", "none", &out, &gathered)).output().expect("run"), "one process");
        let want = (std::fs::read(&out).expect("out"), std::fs::read(&gathered).expect("gathered"));
        let mut runs: Vec<(usize, Option<usize>, &str, &str)> = Vec::new();
        for n in [2, 3, 4] {
            for memory in ["continuous", "chunked", "distributed", "hierarchy"] {
                for cache in ["none", "local_node"] {
                    runs.push((n, None, memory, cache));
                }
            }
        }
        for memory in ["distributed", "hierarchy"] {
            for cache in ["none", "local_node"] {
                runs.push((4, Some(2), memory, cache));
            }
        }
        for (n, per_node, memory, cache) in runs {
            let (o2, g2) = (dir.path().join("m.npy"), dir.path().join("m.g.npy"));
            let o = mpirun(n, per_node).args(args(&f, opt, memory, cache, &o2, &g2)).output().expect("mpirun");
            let what = format!("{opt} on {n} ranks ({per_node:?} per node), {memory}, {cache}");
            ok(&o, &what);
            assert!(std::fs::read(&o2).expect("out") == want.0, "{what}: other bytes than one process");
            assert!(std::fs::read(&g2).expect("gathered") == want.1, "{what}: other gathered bytes");
        }
    }
}
