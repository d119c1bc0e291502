//! Graphs read from text files: SNAP-style edge lists and Matrix Market.
//!
//! Both readers stream the file line by line (edge lists reach billions of
//! lines) and report every problem as `path:line: message`, so a user can go
//! straight to the offending line. In-memory variants (`parse_*`) serve tests
//! and callers that already hold the text; their errors name `<input>`.

pub mod edge_list;
pub mod matrix_market;

pub use edge_list::{parse_edge_line, parse_edge_list, read_edge_list};
pub use matrix_market::{parse_matrix_market, read_matrix_market, MatrixMarketLines, MtxLine};

use std::io::BufRead;
use std::path::Path;

use crate::graph::GraphError;

/// The name errors give to in-memory text.
pub(crate) const INPUT: &str = "<input>";

/// Calls `f(line_number, line)` for every line of the file (1-based numbers,
/// line endings stripped), turning read failures and non-UTF-8 lines into
/// errors that name the path and line. Returns the number of lines.
pub(crate) fn for_each_file_line(
    path: &Path,
    mut f: impl FnMut(usize, &str) -> Result<(), GraphError>,
) -> Result<usize, GraphError> {
    let name = path.display().to_string();
    let io = |source| GraphError::Io { path: name.clone(), source };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let mut buf = Vec::new();
    let mut line_no = 0;
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf).map_err(io)? == 0 {
            return Ok(line_no);
        }
        line_no += 1;
        let bytes = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        let text = std::str::from_utf8(bytes).map_err(|_| GraphError::Parse {
            path: name.clone(),
            line: line_no,
            message: "line is not valid UTF-8".into(),
        })?;
        f(line_no, text)?;
    }
}

/// The same walk over text already in memory.
pub(crate) fn for_each_text_line(
    text: &str,
    mut f: impl FnMut(usize, &str) -> Result<(), GraphError>,
) -> Result<usize, GraphError> {
    let mut count = 0;
    for (i, line) in text.lines().enumerate() {
        count = i + 1;
        f(count, line)?;
    }
    Ok(count)
}
