//! How a failure reaches the person at the terminal.
//!
//! Every error `tigac` can hit on user input becomes a [`Failure`]: plain
//! text that names the file, field or flag at fault, or, for a kernel file
//! the front end refuses, a rustc-style diagnostic (`file:line:col: error:`,
//! the source line, a caret under the column). Keeping the rendering here
//! means each command only says *what* went wrong, never how to print it,
//! and `main` turns any failure into exit status 1 without a panic.

use std::fmt::Write as _;
use std::path::Path;

/// A user error: what went wrong, already phrased for the terminal.
#[derive(Debug)]
pub struct Failure {
    text: String,
}

impl Failure {
    /// A plain message; `main` prefixes it with `error: `.
    pub fn new(message: impl Into<String>) -> Failure {
        Failure { text: format!("error: {}", message.into()) }
    }

    /// A diagnostic pointing into a kernel file: `line` is 1-based, `col`
    /// 0-based (counted in characters, proc-macro2's convention). A line of
    /// 0 (no location known) prints just `file: error: message`.
    pub fn at_source(path: &Path, source: &str, line: u32, col: u32, message: &str) -> Failure {
        Failure { text: render_caret(path, source, line, col, message) }
    }
}

impl From<tiga::GraphError> for Failure {
    fn from(e: tiga::GraphError) -> Failure {
        Failure::new(e.to_string())
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// Render `file:line:col: error: message`, then the source line with a caret
/// under the column, the way rustc does (columns are printed 1-based).
pub fn render_caret(path: &Path, source: &str, line: u32, col: u32, message: &str) -> String {
    let mut s = String::new();
    let file = path.display();
    let Some(text) = (line as usize).checked_sub(1).and_then(|i| source.lines().nth(i)) else {
        let _ = write!(s, "{file}: error: {message}");
        return s;
    };
    let _ = writeln!(s, "{file}:{line}:{}: error: {message}", col + 1);
    let text = text.trim_end_matches('\r');
    let gutter = line.to_string().len();
    // Keep tabs before the column so the caret lines up with the source as
    // the terminal shows it.
    let pad: String = text.chars().take(col as usize).map(|c| if c == '\t' { '\t' } else { ' ' }).collect();
    let _ = writeln!(s, "{:gutter$} |", "");
    let _ = writeln!(s, "{line} | {text}");
    let _ = write!(s, "{:gutter$} | {pad}^", "");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caret_under_column() {
        let src = "fn a() {}\n    let x = y;\n";
        let r = render_caret(Path::new("k.rs"), src, 2, 12, "unknown name `y`");
        assert_eq!(r, "k.rs:2:13: error: unknown name `y`\n  |\n2 |     let x = y;\n  |             ^");
    }

    #[test]
    fn caret_keeps_tabs_and_survives_bad_lines() {
        let r = render_caret(Path::new("k.rs"), "\tx", 1, 1, "m");
        assert!(r.ends_with("| \t^"), "{r}");
        assert_eq!(render_caret(Path::new("k.rs"), "x", 0, 0, "m"), "k.rs: error: m");
        assert_eq!(render_caret(Path::new("k.rs"), "x", 9, 0, "m"), "k.rs: error: m");
    }
}
