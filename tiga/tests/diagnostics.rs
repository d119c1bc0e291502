//! Compile-fail tests for `#[message_passing]`: each `tests/ui/<case>.rs` is a
//! kernel the front end must refuse, and its `.stderr` pins the diagnostic
//! (words and the span it points at). Regenerate with `TRYBUILD=overwrite`
//! and review the carets.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
