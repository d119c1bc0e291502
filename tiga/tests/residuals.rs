//! A forward that keeps what its backward needs (`Schedule::residuals`,
//! `Kernel::forward`, `Kernel::vjp_taped`): for every kernel of
//! examples/kernels/gnn.rs, a min pooling (min_pool.rs) and the
//! user-monoid examples, the forward's
//! outputs against the plain forward's and the saved-residual gradients
//! against the recomputing backward's, bit for bit, on the JIT, the
//! macro's ahead-of-time variants and the f64 reference; a max's residual
//! winners against the closed-form argmax; the residuals in a scope's
//! memory report, spilled and reloaded; and a paged call.

use tiga::compiler::ir::Role;
use tiga::memory::{Eviction, Scope, Tier};
use tiga::{Backend, Graph, Inputs, Kernel, Residuals, Schedule, Tensor};

mod common;
use common::{cotangents, random_fields, random_graph, tensors, Rng};

#[path = "common/gnn.rs"]
mod gnn;

#[allow(clippy::all)]
mod min_pool {
    use tiga::message_passing;
    include!("../../examples/kernels/min_pool.rs");
}

#[allow(clippy::all)]
mod reducers {
    use tiga::message_passing;
    include!("../../examples/kernels/reducers.rs");
}

#[allow(clippy::all)]
mod scaled {
    use tiga::message_passing;
    /// out[i] = s · max_{j→i} h[j] (param s): a max whose node function
    /// reads a parameter.
    #[message_passing(reduce = max)]
    pub mod ScaledMax {
        use tiga::lang::*;
        pub struct Src {
            pub h: Vector<f32>,
        }
        pub struct Params {
            pub s: f32,
        }
        pub fn edge(src: &Src) -> Vector<f32> {
            src.h.clone()
        }
        pub fn node(params: &Params, agg: Vector<f32>) -> Vector<f32> {
            params.s * &agg
        }
    }
    /// GAT's attention with out[i] = s · Σ softmax · h[j] (param s): the
    /// parameter's gradient is summed in the row-statistics stage, which
    /// its backward recomputes (it keeps no residuals).
    #[message_passing(reduce = softmax)]
    pub mod ScaledAttention {
        use tiga::lang::*;
        pub struct Src {
            pub h: Vector<f32>,
            pub a_src: f32,
        }
        pub struct Dst {
            pub a_dst: f32,
        }
        pub struct Params {
            pub s: f32,
        }
        pub fn edge(src: &Src, dst: &Dst) -> (f32, Vector<f32>) {
            (leaky_relu(src.a_src + dst.a_dst, 0.2), src.h.clone())
        }
        pub fn node(params: &Params, agg: Vector<f32>) -> Vector<f32> {
            params.s * &agg
        }
    }
}

#[allow(clippy::all)]
mod folded {
    use tiga::message_passing;
    /// A softmax whose score reads two destination scalars: the
    /// saved-residual backward's source side writes both terms per edge.
    #[message_passing(reduce = softmax)]
    pub mod TwoScoreAttention {
        use tiga::lang::*;
        pub struct Src {
            pub h: Vector<f32>,
            pub a_src: f32,
        }
        pub struct Dst {
            pub a_dst: f32,
            pub b_dst: f32,
        }
        pub fn edge(src: &Src, dst: &Dst) -> (f32, Vector<f32>) {
            (leaky_relu(src.a_src + dst.a_dst, 0.2) * dst.b_dst, src.h.clone())
        }
    }
}

/// The kernels that keep residuals; every other one's backward recomputes.
const KEEPS: [&str; 4] = ["MaxPool", "MinPool", "GatAttention", "TwoScoreAttention"];

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_f64_vec().iter().map(|x| x.to_bits()).collect()
}

/// Values on a grid of 1/4 in [-2, 2] (ties for max and softmax scores),
/// with a few -0, +inf and -inf.
fn value(rng: &mut Rng) -> f64 {
    match rng.below(40) {
        0 => -0.0,
        1 => f64::INFINITY,
        2 => f64::NEG_INFINITY,
        _ => (rng.below(17) as f64 - 8.0) * 0.25,
    }
}

fn graphs(rng: &mut Rng) -> Vec<(&'static str, Graph)> {
    vec![
        ("random", random_graph(rng, 30, 25, 140, false)),
        ("sparse", random_graph(rng, 20, 30, 12, false)),
        ("one-node", Graph::from_edges(1, 1, &[0, 0], &[0, 0]).expect("graph")),
        ("empty", Graph::from_edges(3, 2, &[], &[]).expect("graph")),
    ]
}

/// The plain forward and backward against the saved-residual ones, bit for
/// bit, for one kernel, graph, width and back end.
fn check(k: &Kernel, g: &Graph, gname: &str, f: usize, f32: bool, backend: Backend, rng: &mut Rng) {
    let fields = random_fields(k, g, f, || value(rng));
    let ts = tensors(&fields, f32);
    let ins = common::inputs(&fields, &ts);
    let at = format!("{} on {gname}, F = {f}, {}, {}", k.name(), if f32 { "f32" } else { "f64" }, backend.name());
    let plain = Schedule::new().backend(backend);
    let keeping = plain.clone().residuals(true);
    let want = k.run_with(g, &ins, &plain).expect("plain forward");
    let (got, tape) = k.forward(g, &ins, &keeping).expect("forward keeping residuals");
    assert_eq!(got.items.len(), want.items.len(), "{at}");
    for ((n, a), (_, b)) in got.items.iter().zip(&want.items) {
        assert_eq!(bits(a), bits(b), "{at}: output {n}: {:?} vs {:?}", a.to_f64_vec(), b.to_f64_vec());
    }
    assert_eq!(tape.is_empty(), !KEEPS.contains(&k.name()), "{at}: residuals kept");
    let cots: Vec<(String, Tensor)> = cotangents(k, g, &ins)
        .into_iter()
        .map(|(n, t)| (n, if f32 { t } else { Tensor::from_f64(t.shape().to_vec(), t.to_f64_vec()).expect("f64") }))
        .collect();
    let views: Vec<(&str, tiga::TensorView<'_>)> = cots.iter().map(|(n, t)| (n.as_str(), t.view())).collect();
    let want = k.vjp_with(g, &ins, &views, &plain).expect("recomputing backward");
    let got = k.vjp_taped(g, &ins, &tape, &views, &plain).expect("saved-residual backward");
    assert_eq!(got.items.len(), want.items.len(), "{at}");
    for ((role, n, a), (_, _, b)) in got.items.iter().zip(&want.items) {
        assert_eq!(bits(a), bits(b), "{at}: gradient {}.{n}: {:?} vs {:?}", role.name(), a.to_f64_vec(), b.to_f64_vec());
    }
}

fn gnn_kernels() -> Vec<&'static Kernel> {
    gnn::all().into_iter().chain([min_pool::MinPool::kernel()]).collect()
}

/// The macro's kernels: F = 8 runs their ahead-of-time variants (forward,
/// saved-residual forward and every stage), F = 3 the JIT's; both dtypes.
#[test]
fn gnn_kernels_macro_path() {
    let mut rng = Rng(0x7e51_d0a1);
    for k in gnn_kernels() {
        if KEEPS.contains(&k.name()) {
            let Ok(Residuals::Kept(st)) = k.residuals() else { panic!("{} keeps residuals", k.name()) };
            assert!(!st.forward.aot_variants().is_empty(), "{}: the macro compiled the saved-residual forward", k.name());
            assert!(
                st.forward.backend_for(tiga::DType::F32, &[8]).starts_with("rust-aot"),
                "{}: {}",
                k.name(),
                st.forward.backend_for(tiga::DType::F32, &[8])
            );
        }
        for (gname, g) in graphs(&mut rng) {
            for (f, f32) in [(8, true), (8, false), (3, true)] {
                check(k, &g, gname, f, f32, Backend::Auto, &mut rng);
            }
        }
    }
}

/// The kernel file's kernels (the JIT's variants) and the f64 reference.
#[test]
fn gnn_kernels_kernel_file_and_reference() {
    let mut kernels = Kernel::all_from_source(include_str!("../../examples/kernels/gnn.rs")).expect("kernel file");
    kernels.extend(Kernel::all_from_source(include_str!("../../examples/kernels/min_pool.rs")).expect("kernel file"));
    let mut rng = Rng(0x0dd_ba11);
    for k in &kernels {
        for (gname, g) in graphs(&mut rng) {
            check(k, &g, gname, 8, true, Backend::Jit, &mut rng);
            check(k, &g, gname, 5, false, Backend::Reference, &mut rng);
        }
    }
}

/// The user monoids keep no residuals: their plan is the recomputing one,
/// `explain` says "none" and why, and the backward from their (empty) tape
/// is the recomputing backward.
#[test]
fn user_monoids_keep_none() {
    let kernels = Kernel::all_from_source(include_str!("../../examples/kernels/reducers.rs")).expect("kernel file");
    let mut rng = Rng(0x3030_7070);
    assert!(!kernels.is_empty());
    for k in kernels.iter().chain([gnn::Top2Sum::kernel()]) {
        match k.residuals().expect("residual plan") {
            Residuals::Recomputed(why) => assert!(why.starts_with("monoid"), "{}: {why}", k.name()),
            Residuals::Kept(_) => panic!("{} keeps residuals", k.name()),
        }
        let ex = k.explain();
        assert!(ex.contains("saved residuals") && ex.contains("  none: monoid"), "{}:\n{ex}", k.name());
        for (gname, g) in graphs(&mut rng) {
            check(k, &g, gname, 4, false, Backend::Jit, &mut rng);
        }
    }
    let k = reducers::LogSumExp::kernel();
    for (gname, g) in graphs(&mut rng) {
        check(k, &g, gname, 4, false, Backend::Auto, &mut rng);
    }
}

/// MaxPool's residual `winner0` is, per row and lane, the rank within the
/// row of the first edge (in the user's order) attaining the maximum of
/// relu(h), as `torch_scatter.scatter_max` returns its argmax (0 for an
/// empty row); `explain` lists it and its cost.
#[test]
fn max_residual_is_the_first_argmax() {
    let mut rng = Rng(0xa4a4_0001);
    let f = 8;
    let g = random_graph(&mut rng, 12, 10, 60, false);
    let h: Vec<f64> = (0..12 * f).map(|_| value(&mut rng)).collect();
    let t = Tensor::from_f32(vec![12, f], h.iter().map(|&x| x as f32).collect()).expect("h");
    let k = gnn::MaxPool::kernel();
    let (_, tape) = k.forward(&g, &Inputs::new().src("h", &t), &Schedule::new().residuals(true)).expect("forward");
    let names: Vec<&str> = tape.residuals().map(|(n, _)| n).collect();
    assert_eq!(names, ["winner0"]);
    let (_, won) = tape.residuals().next().expect("winner0");
    assert_eq!(tape.bytes(), (10 * f * 4) as u64);
    let won = won.to_f64_vec();
    for i in 0..g.num_dst() {
        let row: Vec<usize> = g.row(i).map(|p| g.cols()[p] as usize).collect();
        for l in 0..f {
            let relu = |j: usize| f64::from(h[j * f + l] as f32).max(0.0);
            let best = row.iter().map(|&j| relu(j)).fold(f64::NEG_INFINITY, f64::max);
            let first = row.iter().position(|&j| relu(j) == best).unwrap_or(0);
            assert_eq!(won[i * f + l], first as f64, "row {i} lane {l}: {row:?}");
        }
    }
    let ex = k.explain();
    assert!(ex.contains("kept:      winner0: vector<F>") && ex.contains("cost:      F values per destination row"), "{ex}");
    assert!(ex.contains("no row-statistics pass"), "{ex}");
}

/// GAT's saved-residual backward has no edge side: its source side writes
/// each edge's `a_dst` term and a scalar pass sums them per row (the
/// recomputing plan keeps its edge side); `explain` says so. Its bits are
/// held to the recomputing backward's with every other kernel's above.
#[test]
fn gat_backward_folds_its_edge_side() {
    let k = gnn::GatAttention::kernel();
    let ex = k.explain();
    assert!(
        ex.contains(
            "3 stage(s): GatAttention.vjp.stats [Forward], GatAttention.vjp.edge [Forward], GatAttention.vjp.src [Transposed]"
        ),
        "{ex}"
    );
    assert!(
        ex.contains(
            "backward:  3 stage(s) (the recomputing plan: 3): GatAttention.vjp.saved_stats [per destination node], \
             GatAttention.vjp.edge [forward graph], GatAttention.vjp.src [transposed graph]"
        ),
        "{ex}"
    );
    assert!(
        ex.contains(
            "in memory: 3 stage(s) (a CSR in RAM on the CPU; paged, offloaded and generated graphs run the above): \
             GatAttention.vjp.saved_stats [per destination node], GatAttention.vjp.src_terms [transposed graph], \
             GatAttention.vjp.dst_sums [forward graph]"
        ),
        "{ex}"
    );
    assert!(
        ex.contains("note:      edge side folded into the source side (graphs in memory): it writes each edge's a_dst term"),
        "{ex}"
    );
    // MaxPool's edge function reads no destination field: nothing to fold.
    assert!(!gnn::MaxPool::kernel().explain().contains("edge side folded"));
}

/// Two destination scalars folded into the source side: both terms per
/// edge, both row sums, the recomputing backward's bits on the AOT
/// variants (F = 8), the JIT's (F = 3) and the f64 reference.
#[test]
fn two_folded_terms_keep_the_bits() {
    let k = folded::TwoScoreAttention::kernel();
    let ex = k.explain();
    assert!(ex.contains("it writes each edge's a_dst, b_dst term"), "{ex}");
    assert!(ex.contains("TwoScoreAttention.vjp.dst_sums [forward graph]"), "{ex}");
    let mut rng = Rng(0x2f01_de55);
    for (gname, g) in graphs(&mut rng) {
        for (f, f32) in [(8, true), (8, false), (3, true)] {
            check(k, &g, gname, f, f32, Backend::Auto, &mut rng);
        }
        check(k, &g, gname, 5, false, Backend::Reference, &mut rng);
    }
}

/// A hub row longer than the runtime cuts plain sums at (65,536 edges):
/// the folded row sums still add its terms in the row's order from +0, as
/// the recomputing backward's edge side does, in f32 and f64.
#[test]
fn hub_rows_keep_the_row_order() {
    let mut rng = Rng(0x4b0b_0001);
    let (ns, hub) = (300usize, 140_000usize);
    let mut src: Vec<u32> = (0..hub).map(|_| rng.below(ns) as u32).collect();
    let mut dst = vec![0u32; hub];
    for _ in 0..2_000 {
        src.push(rng.below(ns) as u32);
        dst.push(1 + rng.below(ns - 1) as u32);
    }
    let g = Graph::from_edges(ns, ns, &src, &dst).expect("graph");
    let k = gnn::GatAttention::kernel();
    for f32 in [true, false] {
        let fields = random_fields(k, &g, 1, || rng.uniform() * 4.0 - 2.0);
        let ts = tensors(&fields, f32);
        let ins = common::inputs(&fields, &ts);
        let cots: Vec<(String, Tensor)> = cotangents(k, &g, &ins)
            .into_iter()
            .map(|(n, t)| (n, if f32 { t } else { Tensor::from_f64(t.shape().to_vec(), t.to_f64_vec()).expect("f64") }))
            .collect();
        let views: Vec<(&str, tiga::TensorView<'_>)> = cots.iter().map(|(n, t)| (n.as_str(), t.view())).collect();
        let keeping = Schedule::new().residuals(true);
        let (_, tape) = k.forward(&g, &ins, &keeping).expect("forward keeping residuals");
        let want = k.vjp_with(&g, &ins, &views, &Schedule::new()).expect("recomputing backward");
        let got = k.vjp_taped(&g, &ins, &tape, &views, &keeping).expect("saved-residual backward");
        for ((role, n, a), (_, _, b)) in got.items.iter().zip(&want.items) {
            assert_eq!(bits(a), bits(b), "f32 = {f32}: gradient {}.{n}", role.name());
        }
    }
}

/// The residuals in a scope: its memory report lists them with their bytes,
/// counted against the host budget; spilled by the budget and brought
/// back, they give the same gradients.
#[test]
fn residuals_live_in_a_scope() {
    let mut rng = Rng(0x5c09_e000);
    let f = 8;
    let g = random_graph(&mut rng, 40, 40, 200, false);
    let k = gnn::GatAttention::kernel();
    let fields = random_fields(k, &g, f, || value(&mut rng));
    let ts = tensors(&fields, true);
    let ins = common::inputs(&fields, &ts);
    let (_, tape) = k.forward(&g, &ins, &Schedule::new().residuals(true)).expect("forward");
    let names: Vec<&str> = tape.residuals().map(|(n, _)| n).collect();
    assert_eq!(names, ["max", "denominator", "weighted_sum"]);
    let bytes = tape.bytes();
    assert_eq!(bytes, (40 * (2 + f) * 4) as u64);
    let cots = cotangents(k, &g, &ins);
    let views: Vec<(&str, tiga::TensorView<'_>)> = cots.iter().map(|(n, t)| (n.as_str(), t.view())).collect();
    let want = k.vjp_with(&g, &ins, &views, &Schedule::new()).expect("recomputing backward");
    // Room for the residuals and one more tensor of their size: adding a
    // second spills the least recently used.
    let scope = Scope::new(bytes + 400 * 4 + 64, 1 << 30, Eviction::Lru).expect("scope");
    let kept = tape.keep_in(&scope, "gat").expect("keep");
    let report = scope.memory_report();
    let listed: u64 = report.entries.iter().filter(|e| e.name.starts_with("gat.")).map(|e| e.bytes).sum();
    assert_eq!(listed, bytes, "{report}");
    assert_eq!(report.host_used, bytes);
    scope.add("other", Tensor::from_f32(vec![400], vec![1.0; 400]).expect("t")).expect("add");
    scope.add("more", Tensor::from_f32(vec![400], vec![1.0; 400]).expect("t")).expect("add");
    let report = scope.memory_report();
    assert!(report.entries.iter().any(|e| e.name.starts_with("gat.") && e.tier == Tier::Disk), "{report}");
    let tape = kept.tape(&scope).expect("reload");
    let got = k.vjp_taped(&g, &ins, &tape, &views, &Schedule::new()).expect("saved-residual backward");
    for ((_, n, a), (_, _, b)) in got.items.iter().zip(&want.items) {
        assert_eq!(bits(a), bits(b), "gradient {n}");
    }
    // A tape is its kernel's: another kernel refuses it.
    let other = gnn::MaxPool::kernel();
    let h = Tensor::from_f32(vec![40, f], vec![0.5; 40 * f]).expect("h");
    let c = Tensor::from_f32(vec![40, f], vec![1.0; 40 * f]).expect("c");
    let e = other
        .vjp_taped(&g, &Inputs::new().src("h", &h), &tape, &[("out", c.view())], &Schedule::new())
        .expect_err("another kernel's tape");
    assert!(e.to_string().contains("another kernel"), "{e}");
    assert_eq!(want.items.iter().filter(|(r, _, _)| *r == Role::Src).count(), 2);
}

/// Over a `.gfg` file read in pages, the forward keeping residuals writes
/// the in-memory forward's outputs; under a RAM budget smaller than its
/// outputs they (the residuals with them) are file-backed; the backward
/// from them gives the in-memory recomputing backward's gradients, bit for
/// bit (max: the scatter over the forward pages; GAT: the file's stored
/// transpose); over a plain file and over files written in node orders
/// (the residuals moved in and out with the fields; a parameter's gradient
/// summed over the rows in the caller's order).
#[test]
fn paged_calls_keep_residuals() {
    use tiga::runtime::storage::{save_gfg, GfgFile, GfgWriter};
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rng = Rng(0x9a9e_d000);
    let g = random_graph(&mut rng, 60, 60, 400, true);
    let kernels = [
        gnn::MaxPool::kernel(),
        min_pool::MinPool::kernel(),
        gnn::GatAttention::kernel(),
        scaled::ScaledMax::kernel(),
        scaled::ScaledAttention::kernel(),
    ];
    for k in kernels {
        let f = 8;
        let fields = random_fields(k, &g, f, || value(&mut rng));
        let ts = tensors(&fields, true);
        let ins = common::inputs(&fields, &ts);
        let want_out = k.run(&g, &ins).expect("in-memory forward");
        let cots = cotangents(k, &g, &ins);
        let views: Vec<(&str, tiga::TensorView<'_>)> = cots.iter().map(|(n, t)| (n.as_str(), t.view())).collect();
        let want = k.vjp(&g, &ins, &views).expect("in-memory backward");
        // A softmax whose node function reads a parameter keeps no
        // residuals (its saved statistics missed the recomputing bits by a
        // few ulps): its tape is empty and its backward recomputes.
        let keeps = k.name() != "ScaledAttention";
        assert_eq!(matches!(k.residuals().expect("plan"), Residuals::Kept(_)), keeps, "{}", k.name());
        let mut plain_placed: Option<Vec<bool>> = None;
        for order in [tiga::Renumber::None, tiga::Renumber::Degree, tiga::Renumber::Cluster] {
            let what = format!("{} in order {}", k.name(), order.name());
            let path = dir.path().join(format!("{}.{}.gfg", k.name(), order.name()));
            match g.renumbered(order).expect("renumbers") {
                None => save_gfg(&path, &g, true, &[]).expect("save"),
                Some(r) => GfgWriter::renumbered(&g, &r).expect("writer").with_transpose(true).save(&path).expect("save"),
            }
            let file = GfgFile::open(&path).expect("open");
            let schedule = Schedule::new().page_rows(7).prefetch(1).ram_budget(1024).spill_dir(dir.path()).residuals(true);
            let (out, tape) = k.forward(&file, &ins, &schedule).expect("paged forward");
            assert_eq!(!tape.is_empty(), keeps, "{what}");
            assert!(!keeps || tape.residuals().any(|(_, t)| t.is_file_backed()), "{what}: residuals over the budget go to files");
            for ((n, a), (_, b)) in out.items.iter().zip(&want_out.items) {
                assert_eq!(bits(a), bits(b), "{what}: output {n}");
            }
            // Outputs over the budget stay in files when moved back.
            let placed: Vec<bool> = out.items.iter().map(|(_, t)| t.is_file_backed()).collect();
            assert_eq!(placed, *plain_placed.get_or_insert_with(|| placed.clone()), "{what}: outputs in files");
            let got = k.vjp_taped(&file, &ins, &tape, &views, &schedule).expect("paged backward");
            assert_eq!(got.items.len(), want.items.len(), "{what}");
            for ((_, n, a), (_, _, b)) in got.items.iter().zip(&want.items) {
                assert_eq!(bits(a), bits(b), "{what}: gradient {n}");
            }
        }
    }
}

/// A sharded forward keeps the residuals of each rank's owned rows, and the
/// backward over the shard reads them: gradients bit for bit those of the
/// recomputing sharded backward, outputs those of one process.
#[test]
fn sharded_calls_keep_residuals() {
    use std::sync::Arc;
    use tiga::{InProcess, ShardOptions, Sharded};
    let mut rng = Rng(0x5a4d_0001);
    let g = random_graph(&mut rng, 40, 40, 200, false);
    for k in gnn_kernels() {
        let fields = random_fields(k, &g, 4, || value(&mut rng));
        let ts = tensors(&fields, true);
        let ins = common::inputs(&fields, &ts);
        let whole = k.run(&g, &ins).expect("one process");
        let keeping = Schedule::new().residuals(true);
        let per_rank = InProcess::run(3, |c| {
            let sh = Sharded::from_graph(&g, Arc::new(c), &ShardOptions::default()).expect("shard");
            let (out, tape) = k.forward(&sh, &ins, &keeping).expect("sharded forward");
            let taped = k.grad_taped(&sh, &ins, &tape, "out", &keeping).expect("saved-residual backward");
            let recomputed = k.grad_with(&sh, &ins, "out", &keeping).expect("recomputing backward");
            (sh.owned_dst().to_vec(), out, tape.is_empty(), taped, recomputed)
        });
        for r in per_rank {
            let (ids, out, empty, taped, recomputed) = r.expect("rank");
            assert_eq!(empty, !KEEPS.contains(&k.name()), "{}: residuals kept on a shard", k.name());
            let got = bits(out.tensor("out").expect("out"));
            let w = whole.tensor("out").expect("out");
            let width = w.shape().get(1).copied().unwrap_or(1);
            let all = bits(w);
            let want: Vec<u64> = ids.iter().flat_map(|&u| all[u as usize * width..(u as usize + 1) * width].to_vec()).collect();
            assert_eq!(got, want, "{}: sharded forward keeping residuals", k.name());
            assert_eq!(taped.items.len(), recomputed.items.len(), "{}", k.name());
            for ((role, n, a), (_, _, b)) in taped.items.iter().zip(&recomputed.items) {
                assert_eq!(bits(a), bits(b), "{}: gradient {}.{n} on a shard", k.name(), role.name());
            }
        }
    }
}
