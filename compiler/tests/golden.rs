//! Golden files: the IR after each pass, the loop IR and the CLIF of a few
//! canonical kernels. Any diff fails; re-bless with `TIGA_BLESS=1 cargo test
//! -p tiga-compiler --test golden` after checking the change is intended.

use std::path::PathBuf;

use tiga_compiler::front::parse_kernel_file;
use tiga_compiler::passes::run_pipeline;

const GNN: &str = include_str!("../../examples/kernels/gnn.rs");

fn check(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
    if std::env::var_os("TIGA_BLESS").is_some() {
        std::fs::write(&path, actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("missing golden file {} ({e}); run with TIGA_BLESS=1", path.display()));
    if expected != actual {
        let first = expected.lines().zip(actual.lines()).position(|(a, b)| a != b).unwrap_or(0);
        panic!(
            "{} differs from the golden file at line {}:\n  expected: {:?}\n  actual:   {:?}\n(re-bless with TIGA_BLESS=1 if intended)",
            name,
            first + 1,
            expected.lines().nth(first),
            actual.lines().nth(first)
        );
    }
}

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
        let key = VariantKey { kernel: name.into(), dtype: DType::F32, widths: vec![4; lk.widths.len()], edge_ids };
        let v = compile(&lk, &key).expect("compiles");
        check(&format!("{name}.f32.F4.clif"), &v.clif);
    }
}
