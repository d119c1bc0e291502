//! Paged execution over a `.gfg` file against the in-memory run: identical
//! outputs (bit for bit) for every kernel of gnn.rs, for page sizes from one
//! row to the whole graph, prefetch 0 to 4, with fields in RAM and on disk.

use tiga::compiler::ir::Role;
use tiga::runtime::storage::{save_gfg, GfgFile};
use tiga::{Graph, Inputs, Kernel, Schedule, Tensor};

mod common;
use common::{disk_fields, params_only, random_edges, random_fields, Rng};

const GNN: &str = include_str!("../../examples/kernels/gnn.rs");

#[test]
fn paged_equals_in_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A graph with empty rows, multi-edges, self loops and permuted edge ids.
    let n = 23usize;
    let mut rng = Rng(99);
    let (mut src, mut dst) = random_edges(&mut rng, n, n - 3, 90);
    src.push(src[0]);
    dst.push(dst[0]);
    let g = Graph::from_edges(n, n, &src, &dst).expect("graph");
    let kernels = Kernel::all_from_source(GNN).expect("kernels");
    for k in &kernels {
        let f = 5;
        let tensors: Vec<(Role, String, Tensor)> = random_fields(k, &g, f, || rng.f())
            .into_iter()
            .map(|(r, nm, shape, d)| (r, nm, Tensor::from_f32(shape, d.iter().map(|&x| x as f32).collect()).expect("tensor")))
            .collect();
        let mut ins = Inputs::new();
        for (r, nm, t) in &tensors {
            ins = ins.with_role(*r, nm, t);
        }
        let want = k.run(&g, &ins).expect("in-memory run");
        // The file holds the graph and (for the "on disk" case) the fields.
        let path = dir.path().join(format!("{}.gfg", k.name()));
        let on_disk = disk_fields(&tensors);
        save_gfg(&path, &g, false, &on_disk).expect("save");
        let file = GfgFile::open(&path).expect("open");
        let params_only = params_only(&tensors);
        for rows in [1usize, 2, 7, n] {
            for prefetch in 0..=4usize {
                for fields_in_ram in [true, false] {
                    let opts = Schedule::new().page_rows(rows).prefetch(prefetch);
                    let inputs = if fields_in_ram { &ins } else { &params_only };
                    let got = k.run_with(&file, inputs, &opts).expect("paged run");
                    for ((o, a), (_, b)) in want.items.iter().zip(&got.items) {
                        assert_eq!(
                            a.as_f32(),
                            b.as_f32(),
                            "{} output {o}: pages of {rows} rows, prefetch {prefetch}, fields in RAM {fields_in_ram}",
                            k.name()
                        );
                    }
                }
            }
        }
        // A page budget in bytes plans pages too.
        let opts = Schedule::new().page_bytes(64).prefetch(1);
        let got = k.run_with(&file, &ins, &opts).expect("paged by bytes");
        assert_eq!(want.items[0].1.as_f32(), got.items[0].1.as_f32(), "{} by bytes", k.name());
    }
}

/// The paged backward: every adjoint stage runs over the file (the source
/// stage over its stored transpose, a monoid's suffix stage over reversed
/// rows). Every gradient (source, destination, edge and parameter) equals the
/// in-memory VJP bit for bit, over page sizes, prefetch depths, and fields in
/// RAM or in the file.
#[test]
fn paged_vjp_equals_in_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let n = 19usize;
    let mut rng = Rng(7);
    let (src, dst) = random_edges(&mut rng, n, n - 2, 70);
    let g = Graph::from_edges(n, n, &src, &dst).expect("graph");
    let mut kernels = Kernel::all_from_source(GNN).expect("kernels");
    kernels.extend(Kernel::all_from_source(include_str!("../../examples/kernels/dense.rs")).expect("dense"));
    for k in &kernels {
        let f = 4;
        let tensors: Vec<(Role, String, Tensor)> = random_fields(k, &g, f, || rng.f())
            .into_iter()
            .map(|(r, nm, shape, d)| (r, nm, Tensor::from_f64(shape, d).expect("tensor")))
            .collect();
        let mut ins = Inputs::new();
        for (r, nm, t) in &tensors {
            ins = ins.with_role(*r, nm, t);
        }
        let shapes = k.output_shapes(&g, &ins).expect("shapes");
        let cots: Vec<Tensor> = shapes
            .iter()
            .map(|(_, sh)| {
                let len: usize = sh.iter().product();
                Tensor::from_f64(sh.clone(), (0..len).map(|i| ((i * 7 % 11) as f64) / 5.0 - 1.0).collect()).expect("cot")
            })
            .collect();
        let cot_v: Vec<(&str, tiga::TensorView<'_>)> =
            shapes.iter().zip(&cots).map(|((nm, _), t)| (nm.as_str(), t.view())).collect();
        let want = k.vjp(&g, &ins, &cot_v).expect("in-memory vjp");
        // The graph with its transpose, and the fields, on disk.
        let path = dir.path().join(format!("{}.gfg", k.name()));
        let on_disk = disk_fields(&tensors);
        save_gfg(&path, &g, true, &on_disk).expect("save with transpose");
        let file = GfgFile::open(&path).expect("open");
        let params_only = params_only(&tensors);
        for rows in [1usize, 2, 7, n] {
            for prefetch in 0..=4usize {
                for fields_in_ram in [true, false] {
                    let opts = Schedule::new().page_rows(rows).prefetch(prefetch);
                    let inputs = if fields_in_ram { &ins } else { &params_only };
                    let got = k.vjp_with(&file, inputs, &cot_v, &opts).expect("paged vjp");
                    for ((role, name, a), (_, _, b)) in want.items.iter().zip(&got.items) {
                        assert_eq!(
                            a.to_f64_vec(),
                            b.to_f64_vec(),
                            "{} gradient {}.{name}: pages of {rows} rows, prefetch {prefetch}, fields in RAM {fields_in_ram}",
                            k.name(),
                            role.name()
                        );
                    }
                }
            }
        }
    }
}

/// A max whose messages depend on the source alone (MaxPool) takes its
/// source gradient from a scatter of each row's winners over the forward
/// pages and a per-source stage, so its paged backward runs on a file saved
/// without a transpose, with the in-memory gradient's bits; a kernel whose
/// source side is a transposed-graph stage (VecSum) still asks for the
/// stored transpose by name.
#[test]
fn paged_max_backward_needs_no_transpose() {
    let dir = tempfile::tempdir().expect("tempdir");
    let n = 23usize;
    let mut rng = Rng(11);
    let (src, dst) = random_edges(&mut rng, n, n - 3, 90);
    let g = Graph::from_edges(n, n, &src, &dst).expect("graph");
    let k = Kernel::from_source(GNN, "MaxPool").expect("kernel");
    let f = 6;
    let h = Tensor::from_f64(vec![n, f], (0..n * f).map(|_| rng.f() - 0.5).collect()).expect("h");
    let cot = Tensor::from_f64(vec![n, f], (0..n * f).map(|i| ((i * 5 % 13) as f64) / 4.0 - 1.0).collect()).expect("cot");
    let ins = Inputs::new().src("h", &h);
    let want = k.vjp(&g, &ins, &[("out", cot.view())]).expect("in-memory vjp");
    let nonzero = want.src("h").expect("grad").to_f64_vec().iter().filter(|x| **x != 0.0).count();
    assert!(nonzero > n, "too few winners to test the scatter: {nonzero}");
    let path = dir.path().join("no_transpose.gfg");
    save_gfg(&path, &g, false, &[]).expect("save without transpose");
    let file = GfgFile::open(&path).expect("open");
    assert!(!file.has_transpose());
    for rows in [1usize, 5, n] {
        for prefetch in [0usize, 2] {
            let opts = Schedule::new().page_rows(rows).prefetch(prefetch);
            let got = k.vjp_with(&file, &ins, &[("out", cot.view())], &opts).expect("paged max vjp without a transpose");
            assert_eq!(
                got.src("h").expect("grad").to_f64_vec(),
                want.src("h").expect("grad").to_f64_vec(),
                "pages of {rows} rows, prefetch {prefetch}"
            );
        }
    }
    let sum = Kernel::from_source(GNN, "VecSum").expect("kernel");
    let opts = Schedule::new().page_rows(4).prefetch(1);
    let err = sum.vjp_with(&file, &ins, &[("out", cot.view())], &opts).expect_err("VecSum's source side reads the transpose");
    assert!(err.to_string().contains("transpose"), "{err}");
}

/// MaxPool's paged source gradient over the RAM budget, on a file with its
/// transpose, comes from the transposed stage and lives in a file, as a
/// sum's does; under the budget, or without a stored transpose, from the
/// scatter, in RAM. Every way gives the in-memory gradient's bits (relu'
/// selects its cotangent, so the sums are the same).
#[test]
fn paged_max_source_gradient_over_the_budget_lives_in_a_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (n, f) = (300usize, 8usize);
    let mut rng = Rng(5);
    let (src, dst) = random_edges(&mut rng, n, n - 3, 2500);
    let g = Graph::from_edges(n, n, &src, &dst).expect("graph");
    let k = Kernel::from_source(GNN, "MaxPool").expect("kernel");
    let h = Tensor::from_f32(vec![n, f], (0..n * f).map(|_| rng.f() as f32 - 0.5).collect()).expect("h");
    let cot = Tensor::from_f32(vec![n, f], (0..n * f).map(|i| ((i * 3 % 7) as f32) / 2.0 - 1.0).collect()).expect("cot");
    let ins = Inputs::new().src("h", &h);
    let want = k.vjp(&g, &ins, &[("out", cot.view())]).expect("in-memory vjp");
    let want = want.src("h").expect("grad").to_f64_vec();
    let (with_t, without_t) = (dir.path().join("t.gfg"), dir.path().join("no_t.gfg"));
    save_gfg(&with_t, &g, true, &[]).expect("save");
    save_gfg(&without_t, &g, false, &[]).expect("save");
    let opts = Schedule::new().page_rows(41).prefetch(2);
    // The source gradient is 300 × 8 × 4 = 9,600 bytes.
    for (path, budget, on_disk) in [(&with_t, 4096u64, true), (&with_t, 1 << 20, false), (&without_t, 4096, false)] {
        let file = GfgFile::open(path).expect("open");
        let got = tiga::with_ram_budget(budget, || k.vjp_with(&file, &ins, &[("out", cot.view())], &opts)).expect("paged vjp");
        let grad = got.src("h").expect("grad");
        let label = format!("{} budget {budget}", path.display());
        assert_eq!(grad.is_file_backed(), on_disk, "{label}");
        assert_eq!(grad.to_f64_vec(), want, "{label}");
    }
}

/// The `EdgeGate` kernel (a parameter, an edge field, a source field) on a
/// random graph, with its in-memory VJP and the graph saved with its
/// transpose.
struct GateCase {
    dir: tempfile::TempDir,
    k: Kernel,
    h: Tensor,
    w: Tensor,
    p: Tensor,
    cot: Tensor,
    want: tiga::Gradients,
}

impl GateCase {
    fn new(n: usize, f: usize, m: usize, seed: u64) -> GateCase {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut rng = Rng(seed);
        let (src, dst) = random_edges(&mut rng, n, n, m);
        let g = Graph::from_edges(n, n, &src, &dst).expect("graph");
        let k = Kernel::all_from_source(GNN).expect("kernels").into_iter().find(|k| k.name() == "EdgeGate").expect("EdgeGate");
        let mut val = |len: usize| -> Vec<f32> { (0..len).map(|_| (rng.next() % 2000) as f32 / 1000.0 - 1.0).collect() };
        let h = Tensor::from_f32(vec![n, f], val(n * f)).expect("h");
        let w = Tensor::from_f32(vec![g.num_edges()], val(g.num_edges())).expect("w");
        let p = Tensor::from_f32(vec![f], val(f)).expect("p");
        let cot = Tensor::from_f32(vec![n, f], val(n * f)).expect("cotangent");
        let ins = Inputs::new().src("h", &h).edge("w", &w).param("p", &p);
        let want = k.vjp(&g, &ins, &[("out", cot.view())]).expect("in-memory vjp");
        save_gfg(dir.path().join("gate.gfg"), &g, true, &[]).expect("save");
        GateCase { dir, k, h, w, p, cot, want }
    }

    fn paged(&self, opts: &Schedule) -> tiga::Gradients {
        let file = GfgFile::open(self.dir.path().join("gate.gfg")).expect("open");
        let ins = Inputs::new().src("h", &self.h).edge("w", &self.w).param("p", &self.p);
        self.k.vjp_with(&file, &ins, &[("out", self.cot.view())], opts).expect("paged vjp")
    }

    fn check(&self, got: &tiga::Gradients, what: &str) {
        for (role, name) in [(Role::Param, "p"), (Role::Src, "h"), (Role::Edge, "w")] {
            let (a, b) = (self.want.get(role, name).expect("want"), got.get(role, name).expect("got"));
            assert_eq!(a.as_f32(), b.as_f32(), "gradient of {name}: {what}");
        }
    }
}

/// A parameter gradient sums over every row in fixed blocks (64 of them, of
/// 5 rows here): pages of 7 and 13 rows cut blocks in two, and the two
/// pieces may be taken by different threads. The sum must still be the
/// in-memory one, bit for bit, and so must the other gradients.
#[test]
fn parameter_blocks_cut_by_pages_sum_in_order() {
    let case = GateCase::new(320, 8, 3000, 31);
    for rows in [7usize, 13, 64] {
        for prefetch in [0usize, 1, 3] {
            let opts = Schedule::new().page_rows(rows).prefetch(prefetch);
            case.check(&case.paged(&opts), &format!("pages of {rows} rows, prefetch {prefetch}"));
        }
    }
}

/// Over the RAM budget, a paged VJP's source gradient (a row output of the
/// transposed stage) is accumulated in a file mapping rather than in RAM,
/// with the same bits; under it, in memory.
#[test]
fn source_gradient_over_the_budget_lives_in_a_file() {
    // The source gradient is 400 × 16 × 4 = 25,600 bytes.
    let case = GateCase::new(400, 16, 5000, 5);
    let opts = Schedule::new().page_rows(37).prefetch(2);
    for (budget, on_disk) in [(4096u64, true), (1 << 20, false)] {
        let got = tiga::with_ram_budget(budget, || case.paged(&opts));
        assert_eq!(got.get(Role::Src, "h").expect("gradient of h").is_file_backed(), on_disk, "budget {budget}");
        case.check(&got, &format!("budget {budget}"));
    }
}
