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
    let scope = Scope::with_store(8192, 1 << 20, Eviction::Lru, st);
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
