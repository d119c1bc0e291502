//! The kernel-file reader never panics: random token soup, and the example
//! kernel files mutated (bytes cut, spans duplicated, tokens inserted, lines
//! swapped), go through `parse_kernel_file`, the pass pipeline, the loop
//! scheduler and the adjoint generator; each may refuse the input, none may
//! panic. A fixed number of cases keeps the run to a few seconds.

use std::panic::{catch_unwind, AssertUnwindSafe};

use proptest::prelude::*;
use tiga_compiler::front::parse_kernel_file;

const EXAMPLES: [&str; 3] = [
    include_str!("../../examples/kernels/gnn.rs"),
    include_str!("../../examples/kernels/dense.rs"),
    include_str!("../../examples/kernels/reducers.rs"),
];

const VOCABULARY: &[&str] = &[
    "src",
    "dst",
    "edge",
    "x",
    "h",
    "w",
    "agg",
    "a",
    "b",
    "s",
    "Src",
    "Dst",
    "Edge",
    "Params",
    "Out",
    "f32",
    "f64",
    "Vector",
    "Matrix",
    "fn",
    "pub",
    "mod",
    "struct",
    "let",
    "if",
    "else",
    "use",
    "for",
    "as",
    "relu",
    "exp",
    "max",
    "min",
    "sum",
    "dot",
    "matvec",
    "powi",
    "identity",
    "combine",
    "finalize",
    "node",
    "monoid",
    "reduce",
    "softmax",
    "mean",
    "prod",
    "associative",
    "message_passing",
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    "<",
    ">",
    "+",
    "-",
    "*",
    "/",
    ",",
    ";",
    ":",
    "::",
    ".",
    "=",
    "==",
    "->",
    "&",
    "#",
    "!",
    "|",
    "&&",
    "||",
    "'",
    "?",
    "1",
    "0.5",
    "-1.0",
    "1e40",
    "2",
    "\"s\"",
    "_",
    "f32::INFINITY",
    "\n",
];

/// Every stage a kernel file goes through in `tigac compile` and the macro.
fn compile_everything(source: &str) {
    let Ok(kernels) = parse_kernel_file(source) else { return };
    for k in kernels {
        if let Ok(c) = tiga_compiler::passes::run_pipeline(k.clone()) {
            let _ = tiga_compiler::loops::schedule(&c.lowered);
        }
        let _ = tiga_compiler::adjoint::kernel::generate_adjoint(&k);
    }
}

#[track_caller]
fn never_panics(source: &str) {
    let outcome = catch_unwind(AssertUnwindSafe(|| compile_everything(source)));
    assert!(outcome.is_ok(), "the compiler panicked on:\n{source}");
}

fn soup() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(VOCABULARY), 0..120).prop_map(|t| t.join(" "))
}

#[derive(Clone, Debug)]
enum Mutation {
    Cut(usize, usize),
    Duplicate(usize, usize),
    Insert(usize, &'static str),
    SwapLines(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1usize..40).prop_map(|(at, n)| Mutation::Cut(at, n)),
        (any::<usize>(), 1usize..200).prop_map(|(at, n)| Mutation::Duplicate(at, n)),
        (any::<usize>(), prop::sample::select(VOCABULARY)).prop_map(|(at, t)| Mutation::Insert(at, t)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
    ]
}

/// Apply mutations on characters, so the text stays valid UTF-8 (the
/// examples' comments are not all ASCII).
fn mutate(source: &str, mutations: &[Mutation]) -> String {
    let mut chars: Vec<char> = source.chars().collect();
    for m in mutations {
        let len = chars.len().max(1);
        match *m {
            Mutation::Cut(at, n) => {
                let at = at % len;
                let end = (at + n).min(chars.len());
                chars.drain(at.min(end)..end);
            }
            Mutation::Duplicate(at, n) => {
                let at = at % len;
                let end = (at + n).min(chars.len());
                let copy: Vec<char> = chars[at.min(end)..end].to_vec();
                chars.splice(at.min(end)..at.min(end), copy);
            }
            Mutation::Insert(at, t) => {
                let at = (at % len).min(chars.len());
                chars.splice(at..at, format!(" {t} ").chars());
            }
            Mutation::SwapLines(a, b) => {
                let text: String = chars.iter().collect();
                let mut lines: Vec<&str> = text.lines().collect();
                if !lines.is_empty() {
                    let n = lines.len();
                    lines.swap(a % n, b % n);
                }
                chars = lines.join("\n").chars().collect();
            }
        }
    }
    chars.into_iter().collect()
}

fn in_kernel(body: &str) -> String {
    format!("#[message_passing(reduce = sum)]\npub mod K {{\n    pub struct Src {{ pub x: f32 }}\n    pub fn edge(src: &Src) -> f32 {{\n        {body}\n    }}\n}}\n")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn token_soup_never_panics(body in soup(), wrap in 0u8..3) {
        let source = match wrap {
            0 => body,
            1 => in_kernel(&body),
            _ => format!("#[message_passing(reduce = sum)]\npub mod K {{ {body} }}\n"),
        };
        never_panics(&source);
    }

    #[test]
    fn mutated_examples_never_panic(which in 0usize..EXAMPLES.len(), mutations in prop::collection::vec(mutation(), 1..6)) {
        never_panics(&mutate(EXAMPLES[which], &mutations));
    }
}

#[test]
fn the_examples_themselves_compile() {
    for source in EXAMPLES {
        let kernels = parse_kernel_file(source).expect("an example parses");
        assert!(!kernels.is_empty());
        never_panics(source);
    }
}
