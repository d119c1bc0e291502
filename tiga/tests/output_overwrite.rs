//! An output the kernel stores in every row skips the zero fill: it may
//! reuse a dropped tensor's mapping with the old values in it
//! (`Tensor::for_overwrite`). Here the mapping it reuses is poisoned (NaN
//! everywhere) before each call, for every kernel of
//! `examples/kernels/gnn.rs` (outputs of 8 MiB and more are the ones that
//! reuse mappings), and the outputs must still equal the f64 reference
//! interpreter's: no stale value shows through, in the forward call or in
//! the backward's stages. The spare mapping is process-wide, so the tests of
//! this file (their own process) take turns (`SERIAL`).

use tiga::runtime::{DType, DataMut};
use tiga::{Graph, Inputs, Kernel, Tensor};

mod common;
use common::{random_edges, random_fields, Field, Rng};

const GNN: &str = include_str!("../../examples/kernels/gnn.rs");
const KERNELS: [&str; 10] =
    ["NeighborSum", "Smoothing", "VecSum", "GcnNorm", "SageMean", "MaxPool", "GinSum", "GatAttention", "Top2Sum", "EdgeGate"];

/// Held by each test for its whole run: the spare mapping is shared.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Drop a NaN-filled tensor of this shape: its mapping becomes the spare
/// the next tensor of the same size reuses (checked, for the sizes that
/// get mappings: a test that poisoned nothing would prove nothing).
fn poison(shape: &[usize]) {
    let fill = |t: &mut Tensor| match t.data_mut() {
        DataMut::F32(s) => s.fill(f32::NAN),
        DataMut::F64(s) => s.fill(f64::NAN),
        DataMut::F16(s) => s.fill(tiga::half::f16::NAN),
        DataMut::BF16(s) => s.fill(tiga::half::bf16::NAN),
    };
    // A kept spare of another size would keep this one from being kept.
    tiga::runtime::tensor::release_spares();
    let mut t = Tensor::zeros(DType::F32, shape.to_vec()).expect("tensor");
    fill(&mut t);
    drop(t);
    let mut again = Tensor::for_overwrite(DType::F32, shape.to_vec()).expect("tensor");
    if shape.iter().product::<usize>() * 4 >= 8 << 20 {
        assert!(again.to_f64_vec().iter().all(|x| x.is_nan()), "the poisoned mapping was not reused");
    }
    fill(&mut again);
}

fn f32_tensors(fields: &[Field]) -> Vec<Tensor> {
    fields
        .iter()
        .map(|(_, _, shape, data)| Tensor::from_f32(shape.clone(), data.iter().map(|&x| x as f32).collect()).expect("shape"))
        .collect()
}

fn inputs<'a>(fields: &'a [Field], tensors: &'a [Tensor]) -> Inputs<'a> {
    fields.iter().zip(tensors).fold(Inputs::new(), |ins, ((role, nm, _, _), t)| ins.with_role(*role, nm, t))
}

#[test]
fn overwritten_outputs_show_no_stale_values() {
    let _turn = serial();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    // 33,000 rows of 64 f32: 8.4 MiB outputs, over the mapping threshold.
    let (n, f) = (33_000usize, 64usize);
    let (src, dst) = random_edges(&mut rng, n, n - 1, 4 * n);
    let g = Graph::from_edges(n, n, &src, &dst).expect("graph");
    for name in KERNELS {
        let k = Kernel::from_source(GNN, name).expect("kernel");
        let fields = random_fields(&k, &g, f, || rng.uniform());
        let tensors = f32_tensors(&fields);
        let ins = inputs(&fields, &tensors);
        let shapes = k.output_shapes(&g, &ins).expect("shapes");
        let (_, big) = shapes.iter().max_by_key(|(_, s)| s.iter().product::<usize>()).expect("an output");
        poison(big);
        let got = k.run(&g, &ins).expect("run");
        let want = k.run_reference(&g, &ins).expect("reference");
        for ((o, a), (_, b)) in got.items.iter().zip(&want.items) {
            for (i, (x, y)) in a.to_f64_vec().iter().zip(b.to_f64_vec()).enumerate() {
                assert!((x - y).abs() <= 1e-4 * y.abs().max(1.0), "{name} output {o}[{i}]: {x}, reference {y}");
            }
        }
        // The backward's stages allocate their outputs the same way: its
        // gradients must stay finite (the fields are finite) and equal a
        // second VJP's after a poison of every gradient's size.
        let out = shapes.iter().find(|(o, _)| o == "out").map(|(o, _)| o.clone()).unwrap_or_else(|| shapes[0].0.clone());
        let g1 = k.grad(&g, &ins, &out).expect("grad");
        for (role, nm, t) in &g1.items {
            poison(t.shape());
            let g2 = k.grad(&g, &ins, &out).expect("grad");
            let again = g2.items.iter().find(|(r2, n2, _)| r2 == role && n2 == nm).map(|(_, _, t2)| t2).expect("same gradient");
            assert!(t.to_f64_vec().iter().all(|x| x.is_finite()), "{name} gradient {nm}: not finite");
            let (a, b) = (t.to_f64_vec(), again.to_f64_vec());
            let diff = a.iter().zip(&b).position(|(x, y)| x.to_bits() != y.to_bits());
            assert!(
                diff.is_none(),
                "{name} gradient {nm}: differs after a poisoned spare at {diff:?}: {:?} vs {:?}",
                diff.map(|i| a[i]),
                diff.map(|i| b[i])
            );
        }
    }
}

/// A row longer than a split segment (65,536 edges) is summed in parallel
/// segments whose partial rows are then added into the output: that row
/// must start from zero even when the output reused a poisoned mapping.
#[test]
fn split_rows_start_from_zero_in_a_reused_output() {
    let _turn = serial();
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    // 33,000 rows of 64 f32 (8.4 MiB), row 7 with 200,000 in-edges.
    let (n, f, hub) = (33_000usize, 64usize, 200_000usize);
    let (mut src, mut dst) = random_edges(&mut rng, n, n - 1, 2 * n);
    src.extend((0..hub).map(|_| rng.below(n) as u32));
    dst.extend(std::iter::repeat_n(7u32, hub));
    let g = Graph::from_edges(n, n, &src, &dst).expect("graph");
    let k = Kernel::from_source(GNN, "VecSum").expect("kernel");
    let fields = random_fields(&k, &g, f, || rng.uniform());
    let tensors = f32_tensors(&fields);
    let ins = inputs(&fields, &tensors);
    poison(&[n, f]);
    let reused = k.run(&g, &ins).expect("run");
    // The same call into a fresh (zero) mapping: the spare is held apart.
    let _holder = Tensor::zeros(tiga::runtime::DType::F32, vec![n, f]).expect("tensor");
    let fresh = k.run(&g, &ins).expect("run");
    let want = k.run_reference(&g, &ins).expect("reference");
    let (a, b, r) = (reused.items[0].1.to_f64_vec(), fresh.items[0].1.to_f64_vec(), want.items[0].1.to_f64_vec());
    for (i, ((x, y), z)) in a.iter().zip(&b).zip(&r).enumerate() {
        assert_eq!(x.to_bits(), y.to_bits(), "out[{i}] (row {}): {x} into a reused output, {y} into a fresh one", i / f);
        // f32 sums of up to 200,000 terms in [-1, 1): an absolute bound.
        assert!((x - z).abs() <= 2e-2, "out[{i}] (row {}): {x}, reference {z}", i / f);
    }
}

/// The other callers that allocate overwritten outputs: a paged run
/// (pages of 5,000 rows, read-ahead faulting the output rows in) and the
/// generated stencil's forward and backward, each after a poisoned spare,
/// against the same call on the in-memory CSR (bit for bit).
#[test]
fn paged_and_generated_stencil_outputs_show_no_stale_values() {
    let _turn = serial();
    use tiga::runtime::storage::{save_gfg, GfgFile};
    use tiga::{Schedule, Stencil2d};
    // A 1,500 x 1,500 grid: scalar outputs of 9 MB, over the mapping threshold.
    let side = 1500usize;
    let n = side * side;
    let offsets = vec![(-1i64, 0i64), (1, 0), (0, -1), (0, 1)];
    let neigh: Vec<Vec<i64>> = offsets.iter().map(|&(r, c)| vec![r, c]).collect();
    let g = Graph::stencil(&[side, side], &neigh, false).expect("stencil graph");
    let st = Stencil2d { rows: side as u64, cols: side as u64, offsets, periodic: false };
    let k = Kernel::from_source(GNN, "Smoothing").expect("kernel");
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let x = Tensor::from_f32(vec![n], (0..n).map(|_| rng.uniform() as f32).collect()).expect("x");
    let ins = Inputs::new().src("x", &x);
    let want = k.run(&g, &ins).expect("in-memory run");
    let same = |what: &str, a: &Tensor, b: &Tensor| {
        let (a, b) = (a.to_f64_vec(), b.to_f64_vec());
        let diff = a.iter().zip(&b).position(|(p, q)| p.to_bits() != q.to_bits());
        assert!(diff.is_none(), "{what}: differs at {diff:?}");
    };

    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("grid.gfg");
    save_gfg(&path, &g, true, &[]).expect("save");
    let file = GfgFile::open(&path).expect("open");
    let opts = Schedule::new().page_rows(5000).prefetch(2);
    poison(&[n]);
    let paged = k.run_with(&file, &ins, &opts).expect("paged run");
    same("paged forward", &want.items[0].1, &paged.items[0].1);

    poison(&[n]);
    let gen = k.run(&st, &ins).expect("generated run");
    same("generated forward", &want.items[0].1, &gen.items[0].1);

    let cot = Tensor::from_f32(vec![n], (0..n).map(|_| rng.uniform() as f32).collect()).expect("cotangent");
    let cots = [("out", cot.view())];
    let csr_grad = k.vjp(&g, &ins, &cots).expect("csr vjp");
    poison(&[n]);
    let gen_grad = k.vjp(&st, &ins, &cots).expect("generated vjp");
    same("generated backward", csr_grad.src("x").expect("grad"), gen_grad.src("x").expect("grad"));
}
