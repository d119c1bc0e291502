//! Every lowered kernel and adjoint stage, run by the PTX simulator
//! (`tiga_ptx::sim`) on random graphs (empty rows, self loops, repeated
//! edges, more sources than rows and fewer), against the loop IR's own f64
//! evaluator: bit for bit in f64 where no math function is called and no
//! lane group adds partial sums across threads (the same operations in the
//! same order), within 1e-12 where one does, and within f32 rounding in
//! f32. Widths cover one
//! thread per row, lane groups with 16-byte loads, and groups with a
//! partial last chunk.

use tiga_compiler::adjoint::kernel::generate_adjoint;
use tiga_compiler::back::ptx::{group_reductions, lower_kernel};
use tiga_compiler::front::parse_kernel_file;
use tiga_compiler::interp::Array;
use tiga_compiler::ir::{BinOp, DType, Kernel, Role, Type};
use tiga_compiler::loops::eval::eval_loop_kernel;
use tiga_compiler::loops::{calls_math, schedule, LoopKernel, Stmt};
use tiga_compiler::passes::run_pipeline;
use tiga_ptx::sim::{launch, Arg, LaunchConfig, Memory};

mod common;
use common::{csr, Rng, GNN};

const EXTRA: &str = r#"
#[message_passing(reduce = prod)]
pub mod MathProd {
    use tiga::lang::*;
    pub struct Src {
        pub x: f32,
    }
    pub fn edge(src: &Src) -> f32 {
        tanh(src.x) + exp(src.x) * ln(abs(src.x) + 1.0) + sigmoid(src.x)
    }
}

#[message_passing(reduce = min)]
pub mod VecMin {
    use tiga::lang::*;
    pub struct Src {
        pub h: Vector<f32>,
    }
    pub struct Edge {
        pub w: f32,
    }
    pub fn edge(src: &Src, edge: &Edge) -> Vector<f32> {
        edge.w * &src.h
    }
}
"#;

fn loop_kernel(k: &Kernel) -> LoopKernel {
    let c = run_pipeline(k.clone()).unwrap_or_else(|e| panic!("passes on {}: {e}", k.name));
    schedule(&c.lowered).unwrap_or_else(|e| panic!("schedule of {}: {e}", k.name))
}

fn units() -> Vec<LoopKernel> {
    let mut ks = parse_kernel_file(GNN).expect("gnn.rs parses");
    ks.extend(parse_kernel_file(EXTRA).expect("extra kernels parse"));
    let mut out = Vec::new();
    for k in ks {
        out.push(loop_kernel(&k));
        for stage in generate_adjoint(&k).unwrap_or_else(|e| panic!("adjoint of {}: {e}", k.name)).stages {
            out.push(loop_kernel(&stage.kernel));
        }
    }
    out
}

struct Case {
    num_src: usize,
    num_dst: usize,
    offsets: Vec<u64>,
    cols: Vec<u32>,
}

fn graph(rng: &mut Rng, num_src: usize, num_dst: usize, edges: usize) -> Case {
    let mut list: Vec<(u32, u32)> = Vec::new();
    for _ in 0..edges {
        // Rows past the first third are the only ones with edges, so the
        // first third are empty; sources repeat, so some edges repeat.
        let d = num_dst / 3 + rng.below(num_dst - num_dst / 3);
        let s = if rng.below(5) == 0 { d.min(num_src - 1) } else { rng.below(num_src) };
        list.push((s as u32, d as u32));
    }
    let (offsets, cols, _) = csr(num_dst, &list);
    Case { num_src, num_dst, offsets, cols }
}

fn len(ty: Type, widths: &[usize]) -> usize {
    match ty {
        Type::Bool | Type::Scalar => 1,
        Type::Vector(w) | Type::Mask(w) => widths[w.0 as usize],
        Type::Matrix(a, b) => widths[a.0 as usize] * widths[b.0 as usize],
    }
}

fn rows(role: Role, c: &Case) -> usize {
    match role {
        Role::Src => c.num_src,
        Role::Dst => c.num_dst,
        Role::Edge => c.cols.len(),
        Role::Param => 1,
    }
}

fn shape(role: Role, ty: Type, c: &Case, widths: &[usize]) -> Vec<usize> {
    let mut s = if role == Role::Param { Vec::new() } else { vec![rows(role, c)] };
    match ty {
        Type::Vector(w) | Type::Mask(w) => s.push(widths[w.0 as usize]),
        Type::Matrix(a, b) => s.extend([widths[a.0 as usize], widths[b.0 as usize]]),
        _ if s.is_empty() => s.push(1),
        _ => {}
    }
    s
}

fn upload(mem: &mut Memory, dtype: DType, data: &[f64]) -> u64 {
    let bytes: Vec<u8> = match dtype {
        DType::F32 => data.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect(),
        DType::F64 => data.iter().flat_map(|&x| x.to_le_bytes()).collect(),
    };
    let at = mem.alloc(bytes.len().max(1));
    mem.write(at, &bytes).expect("write");
    at
}

fn download(mem: &Memory, dtype: DType, at: u64, n: usize) -> Vec<f64> {
    let size = if dtype == DType::F32 { 4 } else { 8 };
    let mut bytes = vec![0u8; n * size];
    mem.read(at, &mut bytes).expect("read");
    match dtype {
        DType::F32 => bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64).collect(),
        DType::F64 => bytes.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes"))).collect(),
    }
}

/// The outputs of `lk` on `c` by the simulator, parameter partials summed
/// in thread order.
fn simulate(lk: &LoopKernel, dtype: DType, widths: &[usize], c: &Case, fields: &[Array], init: &[Array]) -> Vec<Vec<f64>> {
    let p = lower_kernel(lk, dtype, widths, 80).unwrap_or_else(|e| panic!("{}: {e}", lk.name));
    let mut mem = Memory::new();
    let cfg = LaunchConfig { grid: 3, block: p.block };
    let threads = (cfg.grid * cfg.block) as usize;
    let off_bytes: Vec<u8> = c.offsets.iter().flat_map(|x| x.to_le_bytes()).collect();
    let off = mem.alloc(off_bytes.len());
    mem.write(off, &off_bytes).expect("offsets");
    let col_bytes: Vec<u8> = c.cols.iter().flat_map(|x| x.to_le_bytes()).collect();
    let cols = mem.alloc(col_bytes.len().max(1));
    mem.write(cols, &col_bytes).expect("cols");
    let mut args = vec![Arg::U64(off), Arg::U64(cols)];
    args.extend(fields.iter().map(|a| Arg::U64(upload(&mut mem, dtype, &a.data))));
    let mut outs = Vec::new();
    for (o, a) in lk.outputs.iter().zip(init) {
        let at = if o.role == Role::Param {
            upload(&mut mem, dtype, &vec![0.0; threads * len(o.ty, widths)])
        } else {
            upload(&mut mem, dtype, &a.data)
        };
        outs.push(at);
        args.push(Arg::U64(at));
    }
    args.push(Arg::U32(c.num_dst as u32));
    launch(&p.module, &p.entry, cfg, &args, &mut mem).unwrap_or_else(|e| panic!("{} {dtype} {widths:?}: {e}", lk.name));
    lk.outputs
        .iter()
        .zip(&outs)
        .zip(init)
        .map(|((o, &at), a)| {
            if o.role == Role::Param {
                let n = len(o.ty, widths);
                let partials = download(&mem, dtype, at, threads * n);
                let mut sum = a.data.clone();
                for t in 0..threads {
                    for (s, x) in sum.iter_mut().zip(&partials[t * n..(t + 1) * n]) {
                        *s = round(dtype, *s + x);
                    }
                }
                sum
            } else {
                download(&mem, dtype, at, a.data.len())
            }
        })
        .collect()
}

/// Whether a lane group of `lk` adds partial sums across threads (a tree
/// instead of the evaluator's lane order).
fn tree_sums(lk: &LoopKernel, dtype: DType, widths: &[usize]) -> bool {
    let p = lower_kernel(lk, dtype, widths, 80).expect("lowers");
    let mut adds = false;
    let mut visit = |list: &[Stmt]| {
        tiga_compiler::loops::for_each_loop(list, &mut |body: &[Stmt]| {
            adds |= group_reductions(body).iter().any(|(_, op)| *op == BinOp::Add);
        })
    };
    for list in [&lk.init, &lk.pre_body, &lk.body, &lk.finish] {
        visit(list);
    }
    adds && p.threads_per_row > 1
}

fn round(dtype: DType, x: f64) -> f64 {
    if dtype == DType::F32 {
        x as f32 as f64
    } else {
        x
    }
}

#[test]
fn every_kernel_and_stage_matches_the_loop_evaluator() {
    let mut rng = Rng(0x0005_eed0_f9c0);
    let mut checked = 0;
    for lk in units() {
        let math = calls_math(&lk.init) || calls_math(&lk.pre_body) || calls_math(&lk.body) || calls_math(&lk.finish);
        for (num_src, num_dst, edges) in [(29, 37, 120), (61, 13, 90)] {
            let c = graph(&mut rng, num_src, num_dst, edges);
            for width in [1, 6, 16, 40] {
                let widths = vec![width; lk.widths.len()];
                let fields: Vec<Array> = lk
                    .fields
                    .iter()
                    .map(|f| {
                        let s = shape(f.role, f.ty, &c, &widths);
                        let n = s.iter().product();
                        Array::new(s, (0..n).map(|_| rng.f()).collect())
                    })
                    .collect();
                let init: Vec<Array> = lk
                    .outputs
                    .iter()
                    .map(|o| {
                        let s = shape(o.role, o.ty, &c, &widths);
                        let n = s.iter().product();
                        let zero = o.role == Role::Param;
                        Array::new(s, (0..n).map(|_| if zero { 0.0 } else { rng.f() }).collect())
                    })
                    .collect();
                let mut expected = init.clone();
                eval_loop_kernel(&lk, &widths, &c.offsets, &c.cols, None, &fields, &mut expected);
                for dtype in [DType::F64, DType::F32] {
                    // f32 inputs are the f64 ones rounded; the reference stays f64.
                    let got = simulate(&lk, dtype, &widths, &c, &fields, &init);
                    let exact = !math && !tree_sums(&lk, dtype, &widths);
                    for ((o, e), g) in lk.outputs.iter().zip(&expected).zip(&got) {
                        for (i, (x, y)) in e.data.iter().zip(g).enumerate() {
                            let ok = x == y
                                || match (dtype, exact) {
                                    (DType::F64, true) => x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
                                    (DType::F64, false) => (x - y).abs() <= 1e-12 * (1.0 + x.abs()),
                                    (DType::F32, _) => (x - y).abs() <= 2e-4 * (1.0 + x.abs()) || (x.is_nan() && y.is_nan()),
                                };
                            assert!(
                                ok,
                                "{} output `{}` [{i}] {dtype} F={width} ({num_src}x{num_dst}): evaluator {x}, PTX {y}",
                                lk.name, o.name
                            );
                        }
                    }
                    checked += 1;
                }
            }
        }
    }
    eprintln!("{checked} kernel/graph/width/dtype cases matched");
    assert!(checked > 600, "{checked}");
}
