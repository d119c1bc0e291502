//! The PTX back end's first increment: scalar kernels (reducers sum, max,
//! min, mean) lower to modules that validate, NeighborSum's text is golden
//! (`TIGA_BLESS=1` rewrites it), each module assembles with `ptxas` for
//! sm_80 and sm_90 where one is found, and everything else is refused by
//! name.

use tiga_compiler::back::ptx::{lower, lower_reducer, PtxError};
use tiga_compiler::front::parse_kernel_file;
use tiga_compiler::ir::{DType, Kernel};
use tiga_compiler::loops::{schedule, LoopKernel};
use tiga_compiler::passes::run_pipeline;

mod common;
use common::{check_golden, GNN};

/// Scalar kernels beyond gnn.rs's, covering each supported reducer and the
/// operations that map: destination and edge fields, relu, leaky_relu,
/// abs, sqrt, division, min/max, and mean's degree.
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
        src.x
    }
}
"#;

fn kernels() -> Vec<Kernel> {
    let mut ks = parse_kernel_file(GNN).expect("gnn.rs parses");
    ks.extend(parse_kernel_file(SCALARS).expect("scalar kernels parse"));
    ks
}

fn compile(ks: &[Kernel], name: &str) -> (Kernel, LoopKernel) {
    let k = ks.iter().find(|k| k.name == name).unwrap_or_else(|| panic!("kernel {name}")).clone();
    let c = run_pipeline(k.clone()).unwrap_or_else(|e| panic!("passes on {name}: {e}"));
    let lk = schedule(&c.lowered).unwrap_or_else(|e| panic!("schedule of {name}: {e}"));
    (k, lk)
}

const LOWERED: [&str; 5] = ["NeighborSum", "Smoothing", "ScalarMax", "ScalarMin", "ScalarMean"];

#[test]
fn scalar_kernels_lower_and_validate() {
    let ks = kernels();
    for name in LOWERED {
        let (k, lk) = compile(&ks, name);
        for dtype in [DType::F32, DType::F64] {
            let m = lower_reducer(k.reducer.kind, &lk, dtype, 80).unwrap_or_else(|e| panic!("{name} {dtype}: {e}"));
            tiga_ptx::validate(&m).unwrap_or_else(|e| panic!("{name} {dtype}: {e:?}\n{}", m.print()));
            let text = m.print();
            assert!(text.contains(&format!(".visible .entry {name}(")), "{name}: {text}");
            // Sums are `add.rn` in edge order: never contracted into an fma.
            assert!(!text.contains("fma"), "{name}: {text}");
        }
    }
}

#[test]
fn neighbor_sum_f32_sm80_golden() {
    let ks = kernels();
    let (_, lk) = compile(&ks, "NeighborSum");
    let m = lower(&lk, DType::F32, 80).expect("lowers");
    let text = m.print();
    assert!(text.contains("add.rn.f32"), "{text}");
    check_golden("NeighborSum.ptx", &text);
}

#[test]
fn vector_kernels_are_refused() {
    let ks = kernels();
    for name in ["VecSum", "GcnNorm", "MaxPool", "GatAttention", "EdgeGate"] {
        let (_, lk) = compile(&ks, name);
        match lower(&lk, DType::F32, 80) {
            Err(PtxError::Unsupported(what)) => assert!(what.contains(name) || what.contains("Vector"), "{name}: {what}"),
            other => panic!("{name}: expected Unsupported, got {other:?}"),
        }
    }
}

#[test]
fn unsupported_reducers_are_refused() {
    let ks = kernels();
    for (name, reducer) in [("ScalarProd", "prod"), ("Top2Sum", "monoid")] {
        let (k, lk) = compile(&ks, name);
        match lower_reducer(k.reducer.kind, &lk, DType::F32, 80) {
            Err(PtxError::Unsupported(what)) => assert!(what.contains(reducer), "{name}: {what}"),
            other => panic!("{name}: expected Unsupported, got {other:?}"),
        }
    }
}

#[test]
fn lowered_modules_assemble_with_ptxas() {
    let Some(ptxas) = tiga_ptx::find_ptxas() else {
        eprintln!("skipped: no ptxas ($TIGA_PTXAS, PATH, or pip's nvidia-cuda-nvcc wheel)");
        return;
    };
    let ks = kernels();
    let dir = std::env::temp_dir().join(format!("tiga-ptx-lowering-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut failures = Vec::new();
    let mut assembled = 0;
    for name in LOWERED {
        let (k, lk) = compile(&ks, name);
        for dtype in [DType::F32, DType::F64] {
            for sm in [80, 90] {
                let m = lower_reducer(k.reducer.kind, &lk, dtype, sm).expect("lowers");
                let file = dir.join(format!("{name}_{dtype}_sm{sm}.ptx"));
                std::fs::write(&file, m.print()).expect("write ptx");
                match tiga_ptx::assemble(&ptxas, &file, sm) {
                    Ok(()) => assembled += 1,
                    Err(e) => failures.push(format!("{name} {dtype} sm_{sm}: {e}")),
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "ptxas ({}) refused:\n{}", ptxas.display(), failures.join("\n"));
    eprintln!("ptxas {} assembled {assembled} modules (sm_80 and sm_90)", ptxas.display());
}
