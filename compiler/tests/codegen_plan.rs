//! The Cranelift back end's code-generation plan (`back::cranelift::plan`)
//! for a few canonical kernels, printed as `explain` shows it and compared
//! with golden files (`tests/golden/*.plan.txt`; any diff fails, re-bless
//! with `TIGA_BLESS=1 cargo test -p tiga-compiler --test codegen_plan` after
//! checking the change is intended), and the choices that must follow from
//! the kernel and the variant, asserted one by one.

#![cfg(feature = "cranelift")]

use tiga_compiler::back::cranelift::plan::{plan_codegen, CodegenPlan, FeatureBlocks, LoopForm, ScalarWhy, Target};
use tiga_compiler::back::cranelift::{compile, VariantKey};
use tiga_compiler::front::parse_kernel_file;
use tiga_compiler::ir::DType;
use tiga_compiler::loops::{schedule, LoopKernel};
use tiga_compiler::passes::run_pipeline;

mod common;
use common::{check_golden as check, GNN};

const DENSE: &str = include_str!("../../examples/kernels/dense.rs");

fn loop_kernel(name: &str) -> LoopKernel {
    let mut ks = parse_kernel_file(GNN).expect("parses");
    ks.extend(parse_kernel_file(DENSE).expect("parses"));
    let k = ks.into_iter().find(|k| k.name == name).unwrap_or_else(|| panic!("no kernel {name}"));
    schedule(&run_pipeline(k).expect("passes").lowered).expect("schedules")
}

fn key(lk: &LoopKernel, dtype: DType, f: usize, stencil: Option<tiga_abi::Stencil2d>) -> VariantKey {
    VariantKey {
        kernel: lk.name.clone(),
        dtype,
        widths: vec![f; lk.widths.len()],
        edge_ids: false,
        stencil,
        storage: Default::default(),
    }
}

fn plan(name: &str, dtype: DType, f: usize) -> CodegenPlan {
    let lk = loop_kernel(name);
    plan_codegen(&lk, &key(&lk, dtype, f, None), &Target::CRANELIFT).expect("plans")
}

fn grid() -> tiga_abi::Stencil2d {
    tiga_abi::Stencil2d { rows: 64, cols: 64, offsets: vec![(-1, 0), (1, 0), (0, -1), (0, 1)], periodic: false }
}

#[test]
fn plans_of_canonical_kernels() {
    let mut text = String::new();
    for (name, dtype, f) in [
        ("Smoothing", DType::F32, 1),
        ("VecSum", DType::F32, 4),
        ("VecSum", DType::F32, 16),
        ("VecSum", DType::F32, 64),
        ("VecSum", DType::F32, 128),
        ("MaxPool", DType::F32, 64),
        ("GcnNorm", DType::F64, 16),
        ("GatAttention", DType::F32, 64),
        ("EdgeGate", DType::F32, 6),
        // Nested loops (a matrix times a vector) and vector partial sums.
        ("Linear", DType::F32, 8),
    ] {
        text.push_str(&plan(name, dtype, f).to_string());
        text.push('\n');
    }
    let lk = loop_kernel("Smoothing");
    let stencil = plan_codegen(&lk, &key(&lk, DType::F32, 1, Some(grid())), &Target::CRANELIFT).expect("plans");
    text.push_str(&stencil.to_string());
    check("canonical.plan.txt", &text);
}

/// Feature blocking follows from the registers the accumulators need: a
/// max (temporaries per vector) blocks 64 f32 lanes in 4 vectors, a sum
/// (adds straight from memory) keeps 16 vectors and only blocks past them.
#[test]
fn feature_blocks_follow_from_width_and_reducer() {
    let blocks = |name: &str, dtype: DType, f: usize| plan(name, dtype, f).feature_blocks.map(|b| (b.lanes, b.block));
    assert_eq!(blocks("MaxPool", DType::F32, 64), Some((64, 16)));
    assert_eq!(blocks("MaxPool", DType::F32, 16), None, "one block's worth: no blocking");
    assert_eq!(blocks("VecSum", DType::F32, 64), None);
    assert_eq!(blocks("VecSum", DType::F32, 128), Some((128, 64)));
    assert_eq!(blocks("VecSum", DType::F64, 64), Some((64, 32)));
    assert_eq!(blocks("MaxPool", DType::F32, 66), None, "a width that is no whole number of blocks");
    // Blocked accumulators take one register per vector of a block.
    let p = plan("MaxPool", DType::F32, 64);
    assert_eq!(p.promoted, vec![Some(4)]);
    assert!(matches!(p.feature_blocks, Some(FeatureBlocks { block: 16, .. })));
    // A generated stencil has no feature blocks.
    let lk = loop_kernel("MaxPool");
    let st = plan_codegen(&lk, &key(&lk, DType::F32, 64, Some(grid())), &Target::CRANELIFT).expect("plans");
    assert_eq!(st.feature_blocks, None);
}

/// A scalar edge loop runs 4 edges per iteration; one that touches rows
/// ahead (wide rows) runs one; a generated stencil and a tiled body have no
/// CSR edge loop to unroll.
#[test]
fn edge_unrolling_follows_from_the_body() {
    assert_eq!(plan("Smoothing", DType::F32, 1).edge_unroll.body, Some(4));
    assert_eq!(plan("VecSum", DType::F32, 16).edge_unroll.body, Some(4), "16 f32 lanes: one cache line");
    assert_eq!(plan("VecSum", DType::F64, 16).edge_unroll.body, Some(1), "16 f64 lanes: two cache lines");
    let wide = plan("VecSum", DType::F32, 64);
    assert_eq!(wide.edge_unroll.body, Some(1));
    assert!(wide.touch_ahead.is_some());
    let gat = plan("GatAttention", DType::F32, 64);
    assert!(gat.tiles.is_some());
    assert_eq!(gat.edge_unroll.body, None, "the tiled body has no plain edge loop");
    assert_eq!(gat.edge_unroll.pre_pass, Some(1));
    let lk = loop_kernel("Smoothing");
    let st = plan_codegen(&lk, &key(&lk, DType::F32, 1, Some(grid())), &Target::CRANELIFT).expect("plans");
    assert_eq!((st.edge_unroll.body, st.row_vectors), (None, Some(4)));
}

/// The vector's lanes follow from the dtype; a feature loop is SIMD only
/// when its width is a whole number of them.
#[test]
fn simd_lanes_follow_from_dtype_and_width() {
    assert_eq!(plan("VecSum", DType::F32, 16).vector.lanes, 4);
    assert_eq!(plan("VecSum", DType::F64, 16).vector.lanes, 2);
    let forms = |dtype: DType, f: usize| -> Vec<LoopForm> {
        plan("VecSum", dtype, f).feature_loops.into_iter().map(|l| l.form).collect()
    };
    assert!(forms(DType::F32, 8).iter().all(|f| matches!(f, LoopForm::Simd { .. })));
    assert!(forms(DType::F32, 6).iter().all(|f| *f == LoopForm::Scalar(ScalarWhy::Ragged)));
    assert!(forms(DType::F64, 6).iter().all(|f| matches!(f, LoopForm::Simd { .. })));
    assert!(forms(DType::F32, 2).iter().all(|f| *f == LoopForm::Scalar(ScalarWhy::Narrow)));
    assert!(forms(DType::F32, 0).iter().all(|f| *f == LoopForm::Scalar(ScalarWhy::Empty)));
}

/// The compiled variant keeps the plan it was translated from, and its
/// notes agree with it.
#[test]
fn the_variant_follows_its_plan() {
    for (name, dtype, f) in [("MaxPool", DType::F32, 64), ("VecSum", DType::F32, 6), ("Smoothing", DType::F32, 1)] {
        let lk = loop_kernel(name);
        let key = key(&lk, dtype, f, None);
        let v = compile(&lk, &key).expect("compiles");
        let p = plan_codegen(&lk, &key, &Target::CRANELIFT).expect("plans");
        assert_eq!(v.plan, p, "{name}");
        let notes = v.notes.join("\n");
        assert_eq!(notes.contains("feature blocks:"), p.feature_blocks.is_some(), "{name}: {notes}");
        assert_eq!(notes.contains("4 edges per iteration"), p.edge_unroll.body == Some(4), "{name}: {notes}");
        // Every copy of a loop (per block, per unrolled edge) is emitted in
        // the plan's form: all SIMD, or none.
        let simd = p.feature_loops.iter().filter(|l| matches!(l.form, LoopForm::Simd { .. })).count();
        let counts = notes.lines().find_map(|l| l.strip_prefix("feature loops: ")).map(|rest| {
            let words: Vec<&str> = rest.split(' ').collect();
            (words[0].parse::<usize>().expect("count"), words[2].parse::<usize>().expect("count"))
        });
        match counts {
            Some((emitted_simd, emitted)) if simd == p.feature_loops.len() => assert_eq!(emitted_simd, emitted, "{name}"),
            Some((emitted_simd, _)) if simd == 0 => assert_eq!(emitted_simd, 0, "{name}"),
            Some(_) => {}
            None => assert!(p.feature_loops.is_empty(), "{name}: {notes}"),
        }
    }
}

/// A target whose vectors hold no whole number of lanes is refused, not
/// planned.
#[test]
fn a_target_without_whole_lanes_is_refused() {
    let lk = loop_kernel("VecSum");
    let e = plan_codegen(&lk, &key(&lk, DType::F64, 4, None), &Target { vector_bits: 96 }).expect_err("refused");
    assert!(e.to_string().contains("96-bit vectors"), "{e}");
    let mut short = key(&lk, DType::F32, 4, None);
    short.widths.clear();
    assert!(plan_codegen(&lk, &short, &Target::CRANELIFT).is_err());
}
