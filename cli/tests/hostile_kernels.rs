//! Kernel files built to break the front end: nesting thousands of levels
//! deep, and chains tens of thousands of terms long. `tigac` must refuse
//! each as a user error (exit 1, `file:line:col`, the limit named), never
//! die of a signal (a stack overflow aborts) nor panic (exit 101); a long
//! chain within the limit compiles.

use std::path::Path;
use std::process::Output;

mod common;
use common::*;

/// A kernel whose `edge` returns `body`, which starts on line 7, column 8.
fn kernel(body: &str) -> String {
    format!(
        "#[message_passing(reduce = sum)]\npub mod K {{\n    pub struct Src {{\n        pub x: f32,\n    }}\n    pub fn edge(src: &Src) -> f32 {{\n        {body}\n    }}\n}}\n"
    )
}

fn compile(dir: &Path, name: &str, source: &str) -> Output {
    std::fs::write(dir.join(name), source).expect("write kernel");
    tigac(dir, &["compile", name, "-o", "k.tiga"])
}

#[track_caller]
fn refused(o: &Output, file: &str, words: &[&str]) {
    assert!(o.status.code().is_some(), "tigac died of a signal: {:?}\nstderr:\n{}", o.status, stderr(o));
    fails_with(o, words);
    let err = stderr(o);
    let at = format!("{file}:7:");
    assert!(err.contains(&at), "stderr lacks `{at}` (file, line, column):\n{err}");
}

#[test]
fn deep_nesting_is_refused_at_its_span() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shapes = [
        ("parens.rs", format!("{}src.x{}", "(".repeat(3000), ")".repeat(3000))),
        ("calls.rs", format!("{}src.x{}", "relu(".repeat(3000), ")".repeat(3000))),
        ("ifs.rs", format!("{}src.x{}", "if src.x > 0.0 { ".repeat(2000), " } else { 0.0 }".repeat(2000))),
        ("blocks.rs", format!("{}src.x{}", "{".repeat(5000), "}".repeat(5000))),
        ("minus.rs", format!("{}src.x", "-".repeat(10_000))),
    ];
    for (file, body) in shapes {
        let o = compile(dir.path(), file, &kernel(&body));
        refused(&o, file, &["expression nested deeper than 256 levels"]);
    }
}

#[test]
fn a_chain_past_the_limit_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = compile(dir.path(), "chain.rs", &kernel(&vec!["src.x"; 20_000].join(" + ")));
    refused(&o, "chain.rs", &["expression chains more than 16384 terms"]);
    let o = compile(dir.path(), "methods.rs", &kernel(&format!("src.x{}", ".relu()".repeat(20_000))));
    refused(&o, "methods.rs", &["expression chains more than 16384 terms"]);
}

#[test]
fn a_long_chain_within_the_limit_compiles() {
    let dir = tempfile::tempdir().expect("tempdir");
    let terms: Vec<String> = (1..=10_000).map(|i| format!("src.x * {i}.0")).collect();
    ok(&compile(dir.path(), "chain.rs", &kernel(&terms.join(" + "))));
    // A type error at its end is reported at the chain's start.
    let o = compile(dir.path(), "bad.rs", &kernel(&format!("{} + (src.x < 1.0)", vec!["src.x"; 9_000].join(" + "))));
    refused(&o, "bad.rs", &["bad.rs:7:9:", "type mismatch: `+`"]);
}

#[test]
fn a_method_chain_deeper_than_the_limit_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = compile(dir.path(), "methods.rs", &kernel(&format!("src.x{}", ".relu()".repeat(300))));
    refused(&o, "methods.rs", &["methods.rs:7:9:", "expression nested deeper than 256 levels"]);
}
