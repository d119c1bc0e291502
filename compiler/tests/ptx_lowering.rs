//! The PTX back end: every kernel of gnn.rs and of the scalar set below,
//! and every adjoint stage of each, lowers for f32 and f64 at several
//! widths to modules that validate; the launch shapes follow from the
//! kernels; a few modules' text is golden (`TIGA_BLESS=1` rewrites it);
//! where `ptxas` is found, every module assembles for sm_80 and sm_90 and
//! the registers and spills ptxas reports are a golden snapshot.

use tiga_compiler::adjoint::kernel::generate_adjoint;
use tiga_compiler::back::ptx::{lower_kernel, LaneShape, PtxError, PtxKernel};
use tiga_compiler::front::parse_kernel_file;
use tiga_compiler::ir::{DType, Kernel};
use tiga_compiler::loops::{schedule, LoopKernel};
use tiga_compiler::passes::run_pipeline;

mod common;
use common::{check_golden, GNN};

/// Kernels beyond gnn.rs's: each reducer on scalars, the operations that
/// map (destination and edge fields, relu, leaky_relu, abs, sqrt,
/// division, min/max, mean's degree) and the math functions.
const SCALARS: &str = r#"
#[message_passing(reduce = max)]
pub mod ScalarMax {
    use tiga::lang::*;
    pub struct Src {
        pub x: f32,
    }
    pub struct Edge {
        pub w: f32,
    }
    pub fn edge(src: &Src, edge: &Edge) -> f32 {
        relu(src.x * edge.w)
    }
}

#[message_passing(reduce = min)]
pub mod ScalarMin {
    use tiga::lang::*;
    pub struct Src {
        pub x: f32,
    }
    pub struct Dst {
        pub y: f32,
    }
    pub fn edge(src: &Src, dst: &Dst) -> f32 {
        abs(src.x - dst.y) / 3.0
    }
}

#[message_passing(reduce = mean)]
pub mod ScalarMean {
    use tiga::lang::*;
    pub struct Src {
        pub x: f32,
    }
    pub struct Dst {
        pub b: f32,
    }
    pub fn edge(src: &Src) -> f32 {
        sqrt(abs(src.x))
    }
    pub fn node(dst: &Dst, agg: f32) -> f32 {
        leaky_relu(agg + dst.b, 0.2)
    }
}

#[message_passing(reduce = prod)]
pub mod ScalarProd {
    use tiga::lang::*;
    pub struct Src {
        pub x: f32,
    }
    pub fn edge(src: &Src) -> f32 {
        tanh(src.x) + exp(src.x) * ln(abs(src.x) + 1.0)
    }
}

#[message_passing(reduce = max)]
pub mod VecMaxTanh {
    use tiga::lang::*;
    pub struct Src {
        pub h: Vector<f32>,
    }
    pub fn edge(src: &Src) -> Vector<f32> {
        tanh(&src.h)
    }
}
"#;

fn kernels() -> Vec<Kernel> {
    let mut ks = parse_kernel_file(GNN).expect("gnn.rs parses");
    ks.extend(parse_kernel_file(SCALARS).expect("scalar kernels parse"));
    ks
}

fn loop_kernel(k: &Kernel) -> LoopKernel {
    let c = run_pipeline(k.clone()).unwrap_or_else(|e| panic!("passes on {}: {e}", k.name));
    schedule(&c.lowered).unwrap_or_else(|e| panic!("schedule of {}: {e}", k.name))
}

/// Every kernel and every adjoint stage, as loop kernels, named as the
/// stages are (`Kernel.vjp.src`).
fn units() -> Vec<(String, bool, LoopKernel)> {
    let mut out = Vec::new();
    for k in kernels() {
        let gnn = !k.name.starts_with("Scalar") && k.name != "VecMaxTanh";
        out.push((k.name.clone(), gnn, loop_kernel(&k)));
        let adjoint = generate_adjoint(&k).unwrap_or_else(|e| panic!("adjoint of {}: {e}", k.name));
        for stage in &adjoint.stages {
            out.push((stage.kernel.name.clone(), gnn, loop_kernel(&stage.kernel)));
        }
    }
    out
}

fn lower(lk: &LoopKernel, dtype: DType, width: usize, sm: u32) -> PtxKernel {
    let widths = vec![width; lk.widths.len()];
    let p = lower_kernel(lk, dtype, &widths, sm).unwrap_or_else(|e| panic!("{} {dtype} F={width}: {e}", lk.name));
    tiga_ptx::validate(&p.module).unwrap_or_else(|e| panic!("{} {dtype} F={width}: {e:?}\n{}", lk.name, p.module.print()));
    p
}

#[test]
fn every_kernel_and_stage_lowers_and_validates() {
    let units = units();
    assert!(units.len() > 40, "{} units", units.len());
    for (name, _, lk) in &units {
        for dtype in [DType::F32, DType::F64] {
            for width in [1, 3, 16, 64] {
                let p = lower(lk, dtype, width, 80);
                let text = p.module.print();
                assert!(text.contains(&format!(".visible .entry {}(", p.entry)), "{name}: {text}");
                assert!(p.threads_per_row.is_power_of_two() && p.threads_per_row <= 32, "{name}");
            }
        }
    }
}

#[test]
fn sums_are_never_contracted_into_fma() {
    // Kernels that call no math function: their adds and multiplies stay
    // separate, as on the CPU, so they match bit for bit.
    for (name, _, lk) in units().iter().filter(|(n, ..)| ["NeighborSum", "VecSum", "GcnNorm", "SageMean"].contains(&n.as_str())) {
        let text = lower(lk, DType::F32, 16, 80).module.print();
        assert!(!text.contains("fma"), "{name}: {text}");
    }
}

#[test]
fn launch_shapes_follow_from_the_kernels() {
    let units = units();
    let shape = |name: &str, dtype, width| {
        let (_, _, lk) = units.iter().find(|(n, ..)| n == name).unwrap_or_else(|| panic!("{name}"));
        let p = lower(lk, dtype, width, 80);
        LaneShape { threads: p.threads_per_row, vector: p.vector }
    };
    // Scalars: a thread per row.
    assert_eq!(shape("NeighborSum", DType::F32, 16), LaneShape::ONE);
    // Vectors: 16-byte loads, enough threads to cover the row once, up to a warp.
    assert_eq!(shape("VecSum", DType::F32, 64), LaneShape { threads: 16, vector: 4 });
    assert_eq!(shape("VecSum", DType::F32, 256), LaneShape { threads: 32, vector: 4 });
    assert_eq!(shape("VecSum", DType::F64, 64), LaneShape { threads: 32, vector: 2 });
    assert_eq!(shape("VecSum", DType::F32, 6), LaneShape { threads: 8, vector: 1 });
    assert_eq!(shape("GatAttention", DType::F32, 64), LaneShape { threads: 16, vector: 4 });
    assert_eq!(shape("MaxPool", DType::F32, 16), LaneShape { threads: 4, vector: 4 });
    // A dot product is reduced across the group with shuffles.
    assert_eq!(shape("EdgeGate", DType::F32, 64), LaneShape { threads: 16, vector: 4 });
    assert_eq!(shape("GcnNorm.vjp.src", DType::F32, 64), LaneShape { threads: 16, vector: 4 });
}

#[test]
fn a_width_too_wide_to_unroll_is_refused() {
    let units = units();
    let (_, _, lk) = units.iter().find(|(n, ..)| n == "EdgeGate").expect("EdgeGate");
    match lower_kernel(lk, DType::F32, &[1 << 20], 80) {
        Err(PtxError::Unsupported(what)) => assert!(what.contains("unroll"), "{what}"),
        other => panic!("expected Unsupported, got {other:?}"),
    }
}

#[test]
fn goldens() {
    let units = units();
    for (name, dtype, width, file) in [
        ("NeighborSum", DType::F32, 1, "NeighborSum.ptx"),
        ("VecSum", DType::F32, 16, "VecSum.f32.F16.ptx"),
        ("GatAttention", DType::F32, 8, "GatAttention.f32.F8.ptx"),
    ] {
        let (_, _, lk) = units.iter().find(|(n, ..)| n == name).expect(name);
        check_golden(file, &lower(lk, dtype, width, 80).module.print());
    }
}

/// Assembles every unit at F = 16 (f32 for sm_80 and sm_90, f64 for sm_80)
/// and F = 64 (f32, sm_80), and compares the registers and spills of the
/// gnn.rs units with `golden/ptx_resources.txt`, which records the ptxas
/// it was made with (`TIGA_BLESS=1` rewrites it).
#[test]
fn lowered_modules_assemble_with_ptxas() {
    let Some(ptxas) = tiga_ptx::find_ptxas() else {
        eprintln!("skipped: no ptxas ($TIGA_PTXAS, PATH, or pip's nvidia-cuda-nvcc wheel)");
        return;
    };
    let version = tiga_ptx::ptxas_version(&ptxas).expect("ptxas --version");
    let dir = std::env::temp_dir().join(format!("tiga-ptx-lowering-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut failures = Vec::new();
    let mut snapshot = format!(
        "# ptxas -v per kernel and adjoint stage of gnn.rs: registers, stack, spill stores, spill loads (bytes)\n# {version}\n"
    );
    let mut assembled = 0;
    for (name, gnn, lk) in units() {
        for (dtype, width, sm) in [(DType::F32, 16, 80), (DType::F32, 16, 90), (DType::F64, 16, 80), (DType::F32, 64, 80)] {
            let p = lower(&lk, dtype, width, sm);
            let file = dir.join(format!("{}_{dtype}_F{width}_sm{sm}.ptx", p.entry));
            std::fs::write(&file, p.module.print()).expect("write ptx");
            match tiga_ptx::resources(&ptxas, &file, sm) {
                Ok(rs) => {
                    assembled += 1;
                    if gnn {
                        for r in rs {
                            snapshot.push_str(&format!(
                                "{name} {dtype} F={width} sm_{sm} threads/row={}: {} registers, {} stack, {} spill stores, {} spill loads\n",
                                p.threads_per_row, r.registers, r.stack_frame_bytes, r.spill_store_bytes, r.spill_load_bytes
                            ));
                        }
                    }
                }
                Err(e) => failures.push(format!("{name} {dtype} F={width} sm_{sm}: {e}")),
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "ptxas ({}) refused:\n{}", ptxas.display(), failures.join("\n"));
    eprintln!("ptxas {} assembled {assembled} modules (sm_80 and sm_90)", ptxas.display());
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/ptx_resources.txt");
    let pinned_version = std::fs::read_to_string(&golden).ok().and_then(|t| t.lines().nth(1).map(str::to_string));
    if std::env::var_os("TIGA_BLESS").is_none() && pinned_version.as_deref() != Some(&format!("# {version}")) {
        eprintln!(
            "note: ptx_resources.txt was made with `{}`, this ptxas is `{version}`: register counts not compared",
            pinned_version.unwrap_or_default()
        );
        return;
    }
    check_golden("ptx_resources.txt", &snapshot);
}
