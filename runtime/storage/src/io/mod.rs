//! Graphs read from text files: SNAP-style edge lists and Matrix Market.
//!
//! Both readers stream the file line by line (edge lists reach billions of
//! lines) and report every problem as `path:line: message`, so a user can go
//! straight to the offending line. In-memory variants (`parse_*`) serve tests
//! and callers that already hold the text; their errors name `<input>`.

pub mod edge_list;
pub mod matrix_market;

pub use edge_list::{
    parse_edge_line, parse_edge_list, parse_edge_list_with, read_edge_list, read_edge_list_coo, read_edge_list_with, EdgeListCoo,
    EdgeListOptions,
};
pub use matrix_market::{parse_matrix_market, read_matrix_market, MatrixMarketLines, MtxLine};

use std::io::BufRead;
use std::path::Path;

use tiga_runtime::graph::GraphError;

/// The name errors give to in-memory text.
pub(crate) const INPUT: &str = "<input>";

/// The longest line a text graph file may have. An edge-list or Matrix
/// Market line is a few dozen bytes; a longer one means the file is not a
/// text graph (`/dev/zero`, a binary file), and reading on would not end.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// Calls `f(line_number, line)` for every line of the file (1-based numbers,
/// line endings stripped), turning read failures and non-UTF-8 lines into
/// errors that name the path and line. Returns the number of lines.
pub(crate) fn for_each_file_line(path: &Path, f: impl FnMut(usize, &str) -> Result<(), GraphError>) -> Result<usize, GraphError> {
    walk_file_lines(path, f, |_| {})
}

/// [`for_each_file_line`] for callers with errors of their own, calling
/// `tick(bytes_read)` every 65536 lines and at the end (a progress bar's
/// feed). A line ends at LF, CR or CRLF: files from old Macs (CR only)
/// are read line by line, not as one line with extra columns. A line
/// longer than [`MAX_LINE_BYTES`] is an error naming it.
pub fn walk_file_lines<E: From<GraphError>>(
    path: &Path,
    mut f: impl FnMut(usize, &str) -> Result<(), E>,
    mut tick: impl FnMut(u64),
) -> Result<usize, E> {
    let name = path.display().to_string();
    let io = |source| GraphError::Io { path: name.clone(), source };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let mut line = Vec::new();
    let mut line_no = 0usize;
    let mut bytes = 0u64;
    // Whether the last line ended with CR, so that an LF right after it
    // (CRLF, maybe split across two reads) ends nothing more.
    let mut after_cr = false;
    loop {
        let chunk = reader.fill_buf().map_err(io)?;
        if chunk.is_empty() {
            if !line.is_empty() {
                line_no += 1;
                emit(&name, line_no, &line, &mut f)?;
            }
            tick(bytes);
            return Ok(line_no);
        }
        let skip = usize::from(after_cr && chunk[0] == b'\n');
        after_cr = false;
        let chunk = &chunk[skip..];
        let (used, ended) = match memchr::memchr2(b'\n', b'\r', chunk) {
            Some(i) => {
                line.extend_from_slice(&chunk[..i]);
                after_cr = chunk[i] == b'\r';
                (skip + i + 1, true)
            }
            None => {
                line.extend_from_slice(chunk);
                (skip + chunk.len(), false)
            }
        };
        reader.consume(used);
        bytes += used as u64;
        if line.len() > MAX_LINE_BYTES {
            return Err(GraphError::Parse {
                path: name.clone(),
                line: line_no + 1,
                message: format!("line is longer than {MAX_LINE_BYTES} bytes: not a text graph file"),
            }
            .into());
        }
        if ended {
            line_no += 1;
            emit(&name, line_no, &line, &mut f)?;
            line.clear();
            if line_no & 0xffff == 0 {
                tick(bytes);
            }
        }
    }
}

/// One line to `f`, once it is known to be UTF-8.
fn emit<E: From<GraphError>>(
    name: &str,
    line_no: usize,
    bytes: &[u8],
    f: &mut impl FnMut(usize, &str) -> Result<(), E>,
) -> Result<(), E> {
    let text = std::str::from_utf8(bytes).map_err(|_| GraphError::Parse {
        path: name.to_string(),
        line: line_no,
        message: "line is not valid UTF-8".into(),
    })?;
    f(line_no, text)
}

/// The same walk over text already in memory (the same line ends: LF, CR
/// or CRLF, and the same longest line).
pub(crate) fn for_each_text_line(
    text: &str,
    mut f: impl FnMut(usize, &str) -> Result<(), GraphError>,
) -> Result<usize, GraphError> {
    let mut count = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let (line, next) = match memchr::memchr2(b'\n', b'\r', rest.as_bytes()) {
            Some(i) => {
                let crlf = rest.as_bytes()[i] == b'\r' && rest.as_bytes().get(i + 1) == Some(&b'\n');
                (&rest[..i], &rest[i + 1 + usize::from(crlf)..])
            }
            None => (rest, ""),
        };
        count += 1;
        if line.len() > MAX_LINE_BYTES {
            return Err(GraphError::Parse {
                path: INPUT.to_string(),
                line: count,
                message: format!("line is longer than {MAX_LINE_BYTES} bytes: not a text graph file"),
            });
        }
        f(count, line)?;
        rest = next;
    }
    Ok(count)
}
