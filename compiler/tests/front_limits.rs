//! The front end on hostile kernel text: nesting past
//! [`MAX_NESTING`] and chains past [`MAX_CHAIN`] are user errors at their
//! line and column, chains within the limit capture with one IR node per
//! term and every node's span at the chain's first token. These run on the
//! test harness's 2 MiB threads, so they also check that the front end does
//! not depend on its caller's stack.

use tiga_compiler::front::{parse_kernel_file, MAX_CHAIN, MAX_NESTING};
use tiga_compiler::ir::{BinOp, Op};

/// A kernel whose `edge` returns `body`, which starts on line 7, column 8.
fn kernel(body: &str) -> String {
    format!(
        "#[message_passing(reduce = sum)]\npub mod K {{\n    pub struct Src {{\n        pub x: f32,\n    }}\n    pub fn edge(src: &Src) -> f32 {{\n        {body}\n    }}\n}}\n"
    )
}

#[test]
fn every_deep_shape_is_refused_on_line_7() {
    let shapes = [
        format!("{}src.x{}", "(".repeat(3000), ")".repeat(3000)),
        format!("{}src.x{}", "relu(".repeat(3000), ")".repeat(3000)),
        format!("{}src.x{}", "if src.x > 0.0 { ".repeat(2000), " } else { 0.0 }".repeat(2000)),
        format!("{}src.x{}", "{".repeat(5000), "}".repeat(5000)),
        format!("{}src.x", "-".repeat(10_000)),
        format!("{}src.x", "!".repeat(10_000)),
        format!("{}src.x", "&".repeat(10_000)),
        format!("src.x as {}f32{}", "Vector<".repeat(3000), ">".repeat(3000)),
        format!("if src.x > 0.0 {{ 1.0 }} {} {{ 0.0 }}", "else if src.x > 0.0 { 1.0 }".repeat(3000)),
    ];
    for body in shapes {
        let e = parse_kernel_file(&kernel(&body)).expect_err("refused");
        assert_eq!(e.line, 7, "{}: {}", &body[..30], e.message);
        assert!(e.message.contains(&format!("nested deeper than {MAX_NESTING} levels")), "{}", e.message);
    }
}

#[test]
fn nesting_just_within_the_limit_captures() {
    // `fn`, `->` and the function's braces are 3 levels, the module's and
    // the file's 2 more; the body may nest the rest.
    let n = MAX_NESTING - 8;
    let k = parse_kernel_file(&kernel(&format!("{}src.x{}", "(".repeat(n), ")".repeat(n)))).expect("captures");
    assert_eq!(k.len(), 1);
    let k = parse_kernel_file(&kernel(&format!("{}src.x", "- ".repeat(n - 1)))).expect("captures");
    assert_eq!(k[0].edge.nodes.len(), n);
}

#[test]
fn a_chain_at_the_limit_captures_with_its_first_token_as_span() {
    let k = parse_kernel_file(&kernel(&vec!["src.x"; MAX_CHAIN].join(" + "))).expect("captures");
    let adds: Vec<_> = k[0].edge.nodes.iter().filter(|n| matches!(n.op, Op::Binary(BinOp::Add, ..))).collect();
    assert_eq!(adds.len(), MAX_CHAIN - 1);
    assert!(adds.iter().all(|n| (n.span.line, n.span.col) == (7, 8)), "every link starts where the chain does");
}

#[test]
fn a_chain_past_the_limit_is_refused() {
    let e = parse_kernel_file(&kernel(&vec!["src.x"; MAX_CHAIN + 2].join(" + "))).expect_err("refused");
    assert_eq!(e.line, 7);
    assert!(e.message.contains(&format!("chains more than {MAX_CHAIN} terms")), "{}", e.message);
}

#[test]
fn an_error_at_the_end_of_a_long_chain_is_reported_without_overflow() {
    let body = format!("{} + (src.x < 1.0)", vec!["src.x"; MAX_CHAIN - 10].join(" + "));
    let e = parse_kernel_file(&kernel(&body)).expect_err("type error");
    assert_eq!((e.line, e.col), (7, 8));
    assert!(e.message.contains("type mismatch: `+`"), "{}", e.message);
}

#[test]
fn a_method_chain_is_refused_past_the_nesting_limit() {
    let ok = parse_kernel_file(&kernel(&format!("src.x{}", ".relu()".repeat(MAX_NESTING - 8)))).expect("captures");
    assert_eq!(ok.len(), 1);
    let e = parse_kernel_file(&kernel(&format!("src.x{}", ".relu()".repeat(MAX_NESTING + 1)))).expect_err("refused");
    assert_eq!((e.line, e.col), (7, 8));
    assert!(e.message.contains(&format!("nested deeper than {MAX_NESTING} levels")), "{}", e.message);
}

#[test]
fn a_byte_order_mark_or_a_shebang_line_does_not_skip_the_check() {
    let deep = kernel(&format!("{}src.x{}", "(".repeat(3000), ")".repeat(3000)));
    for prefix in ["\u{feff}", "#!/usr/bin/env tigac\n"] {
        let e = parse_kernel_file(&format!("{prefix}{deep}")).expect_err("refused");
        assert!(e.message.contains("nested deeper"), "{}", e.message);
    }
    let ok = kernel("src.x");
    assert_eq!(parse_kernel_file(&format!("#!/usr/bin/env tigac\n{ok}")).expect("captures").len(), 1);
}
