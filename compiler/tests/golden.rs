//! Golden files: the IR after each pass, the loop IR and the CLIF of a few
//! canonical kernels, and the same for every stage of their adjoints
//! (`generate-adjoint`). Any diff fails; re-bless with `TIGA_BLESS=1 cargo test
//! -p tiga-compiler --test golden` after checking the change is intended.

use tiga_compiler::front::parse_kernel_file;
use tiga_compiler::passes::run_pipeline;

mod common;
use common::{check_golden as check, GNN};

#[test]
fn ir_after_each_pass_and_loop_ir() {
    let ks = parse_kernel_file(GNN).expect("parses");
    for name in ["Smoothing", "GcnNorm", "MaxPool", "GatAttention", "Top2Sum", "EdgeGate"] {
        let k = ks.iter().find(|k| k.name == name).expect("kernel").clone();
        let c = run_pipeline(k).expect("passes");
        let mut text = String::new();
        text.push_str(";; captured\n");
        text.push_str(&c.captured.to_string());
        for p in &c.passes {
            text.push_str(&format!(";; after {}\n", p.name));
            text.push_str(&p.ir_after);
        }
        check(&format!("{name}.passes.txt"), &text);
        let lk = tiga_compiler::loops::schedule(&c.lowered).expect("schedules");
        check(&format!("{name}.loop.txt"), &lk.to_string());
    }
}

/// Every stage of `generate-adjoint`'s output: its bindings, the captured
/// stage IR, the IR after each pass and the loop IR, one file per kernel.
#[test]
fn adjoint_ir_after_each_pass_and_loop_ir() {
    use std::fmt::Write;
    use tiga_compiler::adjoint::kernel::generate_adjoint;
    let ks = parse_kernel_file(GNN).expect("parses");
    for name in ["Smoothing", "GcnNorm", "SageMean", "MaxPool", "GatAttention", "Top2Sum"] {
        let k = ks.iter().find(|k| k.name == name).expect("kernel").clone();
        let adj = generate_adjoint(&k).unwrap_or_else(|e| panic!("generate-adjoint of {name}: {e}"));
        let mut text = String::new();
        writeln!(text, ";; adjoint of {name}: {} stage(s)", adj.stages.len()).expect("write");
        if let Some(sides) = adj.source_sides {
            writeln!(
                text,
                ";; source sides: stage {} (scatter) or stage {} (transposed), one per call",
                sides.scatter, sides.transposed
            )
            .expect("write");
        }
        for g in &adj.gradients {
            let parts: Vec<String> = g.parts.iter().map(|(s, o)| format!("stage {s} `{o}`")).collect();
            // A part from each source side: one of them runs.
            let alternatives = adj.source_sides.is_some() && g.parts.len() > 1;
            let parts = if parts.is_empty() { "zero".to_string() } else { parts.join(if alternatives { " or " } else { " + " }) };
            writeln!(text, ";; gradient {}.{} = {parts}", g.role.name(), g.name).expect("write");
        }
        for n in &adj.notes {
            writeln!(text, ";; note: {n}").expect("write");
        }
        for (si, stage) in adj.stages.iter().enumerate() {
            writeln!(text, ";; stage {} ({}, graph {:?})", stage.kernel.name, stage.purpose, stage.graph).expect("write");
            writeln!(text, ";; stage index {si}; bindings:").expect("write");
            assert_eq!(stage.kernel.fields.len(), stage.bindings.len(), "{}: one binding per field", stage.kernel.name);
            for (fd, b) in stage.kernel.fields.iter().zip(&stage.bindings) {
                writeln!(text, ";;   {} {} <- {b:?}", fd.role.name(), fd.name).expect("write");
            }
            let c = run_pipeline(stage.kernel.clone()).unwrap_or_else(|e| panic!("passes on {}: {e}", stage.kernel.name));
            text.push_str(";; captured\n");
            text.push_str(&c.captured.to_string());
            for p in &c.passes {
                writeln!(text, ";; after {}", p.name).expect("write");
                text.push_str(&p.ir_after);
            }
            let lk =
                tiga_compiler::loops::schedule(&c.lowered).unwrap_or_else(|e| panic!("schedule of {}: {e}", stage.kernel.name));
            text.push_str(";; loop\n");
            text.push_str(&lk.to_string());
        }
        check(&format!("{name}.adjoint.txt"), &text);
    }
}

#[cfg(feature = "cranelift")]
#[test]
fn clif_of_canonical_kernels() {
    use tiga_compiler::back::cranelift::{compile, VariantKey};
    use tiga_compiler::ir::DType;
    let ks = parse_kernel_file(GNN).expect("parses");
    for (name, edge_ids) in [("Smoothing", false), ("GcnNorm", true), ("GatAttention", false)] {
        let k = ks.iter().find(|k| k.name == name).expect("kernel").clone();
        let c = run_pipeline(k).expect("passes");
        let lk = tiga_compiler::loops::schedule(&c.lowered).expect("schedules");
        let key = VariantKey {
            kernel: name.into(),
            dtype: DType::F32,
            widths: vec![4; lk.widths.len()],
            edge_ids,
            stencil: None,
            storage: Default::default(),
        };
        let v = compile(&lk, &key).expect("compiles");
        check(&format!("{name}.f32.F4.clif"), &v.clif);
    }
}

/// The saved-residual plan of each canonical kernel: which residuals the
/// forward keeps (or why none), the forward that keeps them (captured,
/// lowered and loop IR), the backward's stages and their bindings, and
/// the node-wise stage that replaces the statistics pass where one
/// remains (lowered and loop IR).
#[test]
fn residual_plans() {
    use std::fmt::Write;
    use tiga_compiler::adjoint::kernel::{generate_adjoint, residual_plan, GraphUse, ResidualChoice, StageKind};
    let ks = parse_kernel_file(GNN).expect("parses");
    for name in ["Smoothing", "SageMean", "MaxPool", "GatAttention", "Top2Sum"] {
        let k = ks.iter().find(|k| k.name == name).expect("kernel").clone();
        let adj = generate_adjoint(&k).unwrap_or_else(|e| panic!("generate-adjoint of {name}: {e}"));
        let mut text = String::new();
        let plan = match residual_plan(&k, &adj).unwrap_or_else(|e| panic!("residual plan of {name}: {e}")) {
            ResidualChoice::Recompute(why) => {
                writeln!(text, ";; {name} keeps no residuals: {why}").expect("write");
                check(&format!("{name}.residuals.txt"), &text);
                continue;
            }
            ResidualChoice::Keep(p) => p,
        };
        for r in &plan.residuals {
            writeln!(text, ";; residual {} (state component {}): {:?}", r.name, r.component, r.ty).expect("write");
        }
        let fwd = run_pipeline(plan.forward.clone()).unwrap_or_else(|e| panic!("passes on {}: {e}", plan.forward.name));
        text.push_str(";; forward, captured\n");
        text.push_str(&fwd.captured.to_string());
        text.push_str(";; forward, lowered\n");
        text.push_str(&fwd.lowered.to_string());
        text.push_str(";; forward, loop\n");
        text.push_str(&tiga_compiler::loops::schedule(&fwd.lowered).expect("schedules").to_string());
        for g in &plan.adjoint.gradients {
            let parts: Vec<String> = g.parts.iter().map(|(s, o)| format!("stage {s} `{o}`")).collect();
            writeln!(text, ";; gradient {}.{} = {}", g.role.name(), g.name, parts.join(" | ")).expect("write");
        }
        let folded = plan.in_memory.as_ref().map(|f| ("in memory: ", &f.adjoint, &f.origin));
        for (variant, adjoint, origins) in [("", &plan.adjoint, &plan.origin)].into_iter().chain(folded) {
            if !variant.is_empty() {
                for g in &adjoint.gradients {
                    let parts: Vec<String> = g.parts.iter().map(|(s, o)| format!("stage {s} `{o}`")).collect();
                    writeln!(text, ";; {variant}gradient {}.{} = {}", g.role.name(), g.name, parts.join(" | ")).expect("write");
                }
            }
            for (stage, origin) in adjoint.stages.iter().zip(origins) {
                writeln!(
                    text,
                    ";; {variant}stage {} (graph {:?}, recomputing plan's stage {origin:?}); bindings:",
                    stage.kernel.name, stage.graph
                )
                .expect("write");
                for (fd, b) in stage.kernel.fields.iter().zip(&stage.bindings) {
                    writeln!(text, ";;   {} {} <- {b:?}", fd.role.name(), fd.name).expect("write");
                }
                // The node-wise stage (the same in both variants: once),
                // and the row sums of folded edge terms.
                let node_wise = variant.is_empty() && stage.graph == GraphUse::DestinationRows;
                if node_wise || stage.kind == StageKind::DestinationSums {
                    let c = run_pipeline(stage.kernel.clone()).unwrap_or_else(|e| panic!("passes on {}: {e}", stage.kernel.name));
                    text.push_str(";; lowered\n");
                    text.push_str(&c.lowered.to_string());
                    text.push_str(";; loop\n");
                    text.push_str(&tiga_compiler::loops::schedule(&c.lowered).expect("schedules").to_string());
                }
            }
            for n in adjoint.notes.iter().filter(|n| n.starts_with("saved residuals") || n.starts_with("edge side folded")) {
                writeln!(text, ";; {variant}note: {n}").expect("write");
            }
        }
        check(&format!("{name}.residuals.txt"), &text);
    }
}
