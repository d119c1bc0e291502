//! Tensors in the hierarchy: a scope with host/disk budgets spills and
//! reloads tensors (LRU) or refuses (error policy); a spilled tensor keeps
//! its identity and works as a kernel input and a VJP input.

use tiga::memory::{Eviction, Scope, Tier};
use tiga::runtime::storage::TensorStore;
use tiga::{Graph, Inputs, Kernel, Tensor};

const GNN: &str = include_str!("../../examples/kernels/gnn.rs");

fn store() -> (tempfile::TempDir, TensorStore) {
    let d = tempfile::tempdir().expect("tempdir");
    let s = TensorStore::at(d.path()).expect("store");
    (d, s)
}

#[test]
fn lru_spills_and_reloads_keeping_identity() {
    let (_d, st) = store();
    // Room for two 4 KB tensors on the host.
    let scope = Scope::with_store(8192, 1 << 20, Eviction::Lru, st.clone());
    let t = |v: f32| Tensor::from_f32(vec![1024], vec![v; 1024]).expect("tensor");
    let a = scope.add("a", t(1.0)).expect("a");
    let b = scope.add("b", t(2.0)).expect("b");
    assert_eq!(scope.tier(&a), Some(Tier::Host));
    let c = scope.add("c", t(3.0)).expect("c evicts a (least recently used)");
    assert_eq!(scope.tier(&a), Some(Tier::Disk));
    assert_eq!(scope.tier(&b), Some(Tier::Host));
    assert_eq!(scope.tier(&c), Some(Tier::Host));
    // Using `a` brings it back (and spills `b`, now the least recent).
    let av = scope.get(&a).expect("reload a");
    assert!(av.as_f32().expect("f32").iter().all(|&x| x == 1.0));
    assert_eq!(scope.tier(&b), Some(Tier::Disk));
    let r = scope.memory_report();
    assert_eq!((r.host_used, r.disk_used, r.spills, r.reloads), (8192, 4096, 2, 1));
    assert!(r.to_string().contains("b"), "{r}");
    // Spill files are exactly the disk tier's: `a`'s went with its reload,
    // `b`'s goes with its removal.
    assert_eq!(st.names().expect("names"), vec!["b".to_string()]);
    scope.remove(&b).expect("remove b");
    scope.spill(&a).expect("spill a again");
    scope.remove(&a).expect("remove a");
    assert!(st.names().expect("names").is_empty(), "{:?}", st.names());
    // Larger than the whole host tier: refused, and nothing is spilled for
    // it.
    let e = scope.add("huge", Tensor::from_f32(vec![4096], vec![0.0; 4096]).expect("tensor")).expect_err("over the budget");
    assert!(e.to_string().contains("more than the whole 8192-byte budget"), "{e}");
    assert_eq!(scope.tier(&c), Some(Tier::Host));
}

#[test]
fn error_policy_refuses_over_budget() {
    let (_d, st) = store();
    let scope = Scope::with_store(4096, 1 << 20, Eviction::Error, st);
    scope.add("a", Tensor::from_f32(vec![1024], vec![0.0; 1024]).expect("t")).expect("fits");
    let err = scope.add("b", Tensor::from_f32(vec![8], vec![0.0; 8]).expect("t")).expect_err("over budget");
    assert!(err.to_string().contains("host tier over budget"), "{err}");
    // The disk tier has a budget too.
    let (_d2, st2) = store();
    let small_disk = Scope::with_store(1 << 20, 100, Eviction::Lru, st2);
    let h = small_disk.add("x", Tensor::from_f32(vec![64], vec![0.0; 64]).expect("t")).expect("fits");
    let err = small_disk.spill(&h).expect_err("disk over budget");
    assert!(err.to_string().contains("disk tier over budget"), "{err}");
}

#[test]
fn a_spilled_tensor_is_still_a_kernel_and_vjp_input() {
    let (_d, st) = store();
    let scope = Scope::with_store(1 << 20, 1 << 20, Eviction::Lru, st);
    let g = Graph::from_edges(4, 4, &[0, 1, 2, 3, 0], &[1, 2, 3, 0, 2]).expect("graph");
    let k = Kernel::from_source(GNN, "NeighborSum").expect("kernel");
    let x = scope.add("x", Tensor::from_f64(vec![4], vec![1.0, 2.0, 3.0, 4.0]).expect("x")).expect("add");
    let before = {
        let xt = scope.get(&x).expect("x");
        k.run(&g, &Inputs::new().src("x", &*xt)).expect("run")
    };
    scope.spill(&x).expect("spill");
    assert_eq!(scope.tier(&x), Some(Tier::Disk));
    let xt = scope.get(&x).expect("reload");
    let after = k.run(&g, &Inputs::new().src("x", &*xt)).expect("run");
    assert_eq!(before.items[0].1.as_f64(), after.items[0].1.as_f64());
    let grads = k.grad(&g, &Inputs::new().src(x.name(), &*xt), "out").expect("grad");
    // d/dx_j of Σ out = out-degree of j.
    assert_eq!(grads.src("x").and_then(|t| t.as_f64()), Some(&[2.0, 1.0, 1.0, 1.0][..]));
}

#[test]
fn snapshots_save_every_tier_and_restore_lazily_elsewhere() {
    let (dir, st) = store();
    let scope = Scope::with_store(1 << 20, 1 << 20, Eviction::Lru, st.clone());
    let wv: Vec<f32> = (0..300).map(|i| i as f32 * 0.5 - 7.0).collect();
    let bv: Vec<f64> = (0..12).map(|i| f64::from(i).sqrt()).collect();
    let w = scope.add("w", Tensor::from_f32(vec![100, 3], wv.clone()).expect("w")).expect("w");
    let b = scope.add("b", Tensor::from_f64(vec![12], bv.clone()).expect("b")).expect("b");
    scope.spill(&b).expect("spill b");
    let snap = scope.snapshot("ckpt").expect("snapshot");
    assert_eq!((snap.generation(), snap.names().collect::<Vec<_>>()), (1, vec!["b", "w"]));
    // The scope is unchanged: nothing moved between tiers.
    assert_eq!((scope.tier(&w), scope.tier(&b)), (Some(Tier::Host), Some(Tier::Disk)));

    // Another "process": a new store on the same directory, a new scope.
    let other = Scope::with_store(1 << 20, 1 << 20, Eviction::Lru, TensorStore::at(dir.path()).expect("store"));
    let hs = other.restore_snapshot("ckpt").expect("restore");
    assert_eq!(hs.iter().map(|h| h.name()).collect::<Vec<_>>(), vec!["b", "w"]);
    for h in &hs {
        assert_eq!(other.tier(h), Some(Tier::Disk), "restored lazily");
    }
    assert_eq!(other.memory_report().reloads, 0);
    let w2 = other.get(&hs[1]).expect("w");
    assert_eq!(w2.shape(), &[100, 3]);
    assert_eq!(w2.as_f32().expect("f32"), &wv[..]);
    assert_eq!(other.get(&hs[0]).expect("b").as_f64().expect("f64"), &bv[..]);
    assert_eq!(other.memory_report().reloads, 2);
    // Removing a restored tensor leaves the snapshot's files alone.
    other.remove(&hs[0]).expect("remove");
    assert!(st.open_snapshot("ckpt").expect("still there").get("b").expect("b").load().is_ok());
    // A name clash is refused before anything is added.
    let e = other.restore_snapshot("ckpt").expect_err("w is already there");
    assert!(e.to_string().contains("`w`"), "{e}");
    assert!(other.tier(&hs[0]).is_none());

    // Saving again replaces the snapshot whole: generation 2, old files gone,
    // orphans of an interrupted save (generation 7, never committed) too.
    let orphan = Tensor::from_f32(vec![2], vec![9.0, 9.0]).expect("orphan");
    st.spill("ckpt@7@w", &orphan.view()).expect("orphan");
    assert_eq!(st.open_snapshot("ckpt").expect("open").generation(), 1, "the orphan is not part of it");
    scope.remove(&b).expect("remove b");
    let snap2 = scope.snapshot("ckpt").expect("snapshot again");
    assert_eq!((snap2.generation(), snap2.len()), (2, 1));
    let names = st.names().expect("names");
    assert_eq!(names, vec!["ckpt@2@w".to_string()], "only the committed generation's files remain");
    assert_eq!(st.snapshots().expect("list"), vec!["ckpt".to_string()]);

    // A member file swapped under the manifest is refused on open; a
    // flipped data byte is refused on load.
    let path = st.open_snapshot("ckpt").expect("open").get("w").expect("w").path().to_path_buf();
    let mut bytes = std::fs::read(&path).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&path, &bytes).expect("write");
    let lazy = st.open_snapshot("ckpt").expect("headers are intact");
    let e = lazy.get("w").expect("w").load().expect_err("data changed");
    assert!(e.to_string().contains("checksum") || e.to_string().contains("changed"), "{e}");
    st.spill("ckpt@2@w", &orphan.view()).expect("swap the member");
    let e = st.open_snapshot("ckpt").expect_err("another tensor under the member's name");
    assert!(e.to_string().contains("crc32"), "{e}");
    let e = st.open_snapshot("nope").expect_err("missing");
    assert!(e.to_string().contains("ckpt"), "names what is there: {e}");
    assert!(st.save_snapshot("a@b", &[]).is_err(), "`@` is refused in snapshot names");
    st.remove_snapshot("ckpt").expect("remove");
    assert!(st.names().expect("names").is_empty() && st.snapshots().expect("list").is_empty());
}
