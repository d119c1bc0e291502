//! SNAP-style text edge lists.
//!
//! The format, as SNAP and most graph dumps write it:
//! - one edge per line, `src dst`, separated by any whitespace; the edge goes
//!   from `src` to `dst`;
//! - a line has exactly two columns unless the reader is asked to ignore
//!   more ([`EdgeListOptions::ignore_extra_columns`], `tigac`'s
//!   `--ignore-extra-columns`): a weight column read as nothing, or a file
//!   with another layout, would otherwise give a wrong answer without a
//!   word. Ignored columns must still parse as numbers (weights,
//!   timestamps; edge fields are passed as tensors);
//! - a line ends at LF, CR or CRLF, and is at most
//!   [`super::MAX_LINE_BYTES`] long;
//! - lines whose first non-blank character is `#` or `%` are comments, and
//!   blank lines are skipped;
//! - ids are non-negative integers that must fit in `u32`.
//!
//! The graph is square (`num_src = num_dst = N`). `N` is given, or else the
//! largest id plus one (an empty file is then the empty graph). The user's
//! edge order is the line order, recorded in the graph's `edge_ids`, so a
//! weight column read separately lines up with the edges.

use std::path::Path;

use super::{for_each_file_line, for_each_text_line, INPUT};
use tiga_runtime::graph::{Graph, GraphError, MAX_NODES};

/// How an edge list is read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EdgeListOptions {
    /// The node count (default: the largest id + 1).
    pub num_nodes: Option<usize>,
    /// Read the first two columns of lines that have more (which must be
    /// numbers), instead of refusing them.
    pub ignore_extra_columns: bool,
}

impl EdgeListOptions {
    pub fn nodes(num_nodes: Option<usize>) -> EdgeListOptions {
        EdgeListOptions { num_nodes, ignore_extra_columns: false }
    }
}

/// Reads an edge list file of exactly two columns; see the module doc for
/// the format.
pub fn read_edge_list(path: impl AsRef<Path>, num_nodes: Option<usize>) -> Result<Graph, GraphError> {
    read_edge_list_with(path, &EdgeListOptions::nodes(num_nodes))
}

/// Reads an edge list file as `options` say.
pub fn read_edge_list_with(path: impl AsRef<Path>, options: &EdgeListOptions) -> Result<Graph, GraphError> {
    read_edge_list_coo(path, options)?.build()
}

/// An edge list as read, before its CSR is built: the node count and the
/// edges in line order. A caller can check what depends on the node count
/// (the rows of node fields) here, before memory proportional to it is
/// asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EdgeListCoo {
    pub num_nodes: usize,
    pub src: Vec<u32>,
    pub dst: Vec<u32>,
}

impl EdgeListCoo {
    /// The graph (square, `num_nodes` on each side, edges in line order).
    pub fn build(&self) -> Result<Graph, GraphError> {
        Graph::from_edges(self.num_nodes, self.num_nodes, &self.src, &self.dst)
    }
}

/// Reads an edge list file as `options` say, without building its CSR.
pub fn read_edge_list_coo(path: impl AsRef<Path>, options: &EdgeListOptions) -> Result<EdgeListCoo, GraphError> {
    let path = path.as_ref();
    let name = path.display().to_string();
    let mut acc = Accumulator::new(&name, *options)?;
    for_each_file_line(path, |line_no, text| acc.line(line_no, text))?;
    Ok(acc.finish())
}

/// Parses edge-list text of exactly two columns held in memory; errors
/// name `<input>`.
pub fn parse_edge_list(text: &str, num_nodes: Option<usize>) -> Result<Graph, GraphError> {
    parse_edge_list_with(text, &EdgeListOptions::nodes(num_nodes))
}

/// Parses edge-list text held in memory as `options` say.
pub fn parse_edge_list_with(text: &str, options: &EdgeListOptions) -> Result<Graph, GraphError> {
    let mut acc = Accumulator::new(INPUT, *options)?;
    for_each_text_line(text, |line_no, line| acc.line(line_no, line))?;
    acc.finish().build()
}

/// One line of a SNAP edge list: `Some((src, dst))`, or `None` for a
/// comment (`#`, `%`) or blank line. Columns after `src dst` are refused,
/// or ignored when `options` say so (they must then be numbers); ids must
/// be below the node count when one is given. `tigac convert` streams a
/// file through this, line by line.
pub fn parse_edge_line(path: &str, options: &EdgeListOptions, line: usize, text: &str) -> Result<Option<(u32, u32)>, GraphError> {
    let trimmed = text.trim_start();
    if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('%') {
        return Ok(None);
    }
    let error = |message: String| GraphError::Parse { path: path.to_string(), line, message };
    let id = |token: Option<&str>, what: &str| -> Result<u32, GraphError> {
        let token = token.ok_or_else(|| error(format!("expected `src dst`, but the {what} id is missing")))?;
        let id: u64 = token.parse().map_err(|_| error(format!("{what} id `{token}` is not a non-negative integer")))?;
        if let Some(n) = options.num_nodes {
            if id >= n as u64 {
                return Err(GraphError::NodeIdOutOfRange { path: path.to_string(), line, id, num_nodes: n });
            }
        }
        u32::try_from(id).map_err(|_| error(format!("{what} id {id} does not fit in 32 bits (the largest id is {})", u32::MAX)))
    };
    let mut tokens = trimmed.split_whitespace();
    let s = id(tokens.next(), "source")?;
    let d = id(tokens.next(), "destination")?;
    for (k, extra) in tokens.enumerate() {
        if !options.ignore_extra_columns {
            return Err(error(format!(
                "column {} is `{extra}`: an edge-list line has two columns, `src dst`; extra columns (weights) are \
                 refused unless asked to be ignored (tigac: --ignore-extra-columns)",
                k + 3
            )));
        }
        if extra.parse::<f64>().is_err() {
            return Err(error(format!("column {} is `{extra}`; columns after `src dst` must be numbers", k + 3)));
        }
    }
    Ok(Some((s, d)))
}

struct Accumulator<'a> {
    path: &'a str,
    options: EdgeListOptions,
    src: Vec<u32>,
    dst: Vec<u32>,
    max_id: Option<u32>,
}

impl<'a> Accumulator<'a> {
    fn new(path: &'a str, options: EdgeListOptions) -> Result<Self, GraphError> {
        if let Some(n) = options.num_nodes {
            if n > MAX_NODES {
                return Err(GraphError::TooManyNodes { side: "edge list", count: n });
            }
        }
        Ok(Accumulator { path, options, src: Vec::new(), dst: Vec::new(), max_id: None })
    }

    fn line(&mut self, line: usize, text: &str) -> Result<(), GraphError> {
        if let Some((s, d)) = parse_edge_line(self.path, &self.options, line, text)? {
            self.max_id = Some(self.max_id.map_or(s.max(d), |m| m.max(s).max(d)));
            self.src.push(s);
            self.dst.push(d);
        }
        Ok(())
    }

    fn finish(self) -> EdgeListCoo {
        let num_nodes = self.options.num_nodes.unwrap_or(self.max_id.map_or(0, |m| m as usize + 1));
        EdgeListCoo { num_nodes, src: self.src, dst: self.dst }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(r: Result<Graph, GraphError>) -> String {
        match r {
            Ok(g) => panic!("expected an error, got {g:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn parses_comments_blank_lines_and_weights() {
        let text = "# Directed graph\n% another comment\n\n  3 1\n0\t2 0.5\n\n1   0 7 -2e3\r\n   # indented\n3 3\n";
        let ignore = EdgeListOptions { num_nodes: None, ignore_extra_columns: true };
        let g = parse_edge_list_with(text, &ignore).expect("valid");
        // Edges in line order: 0:3->1, 1:0->2, 2:1->0, 3:3->3.
        assert_eq!((g.num_src(), g.num_dst(), g.num_edges()), (4, 4, 4));
        assert_eq!(g.offsets(), &[0, 1, 2, 3, 4]);
        assert_eq!(g.cols(), &[1, 3, 0, 3]);
        assert_eq!(g.edge_ids(), Some(&[2u64, 0, 1, 3][..]));
        assert_eq!(g.coo_in_user_order(), (vec![3, 0, 1, 3], vec![1, 2, 0, 3]));
    }

    #[test]
    fn num_nodes_given_or_empty() {
        let g = parse_edge_list("0 1\n", Some(5)).expect("valid");
        assert_eq!((g.num_src(), g.offsets()), (5, &[0u64, 0, 1, 1, 1, 1][..]));
        let g = parse_edge_list("# nothing\n\n", None).expect("valid");
        assert_eq!((g.num_src(), g.num_dst(), g.num_edges()), (0, 0, 0));
        let g = parse_edge_list("", Some(3)).expect("valid");
        assert_eq!(g.offsets(), &[0, 0, 0, 0]);
    }

    #[test]
    fn errors_name_line_and_problem() {
        assert_eq!(err(parse_edge_list("0 1\n2 7\n", Some(5))), "<input>:2: node id 7 is out of range for 5 nodes");
        assert_eq!(err(parse_edge_list("0 1\n\n5\n", None)), "<input>:3: expected `src dst`, but the destination id is missing");
        assert_eq!(err(parse_edge_list("a 1\n", None)), "<input>:1: source id `a` is not a non-negative integer");
        assert_eq!(err(parse_edge_list("1 -1\n", None)), "<input>:1: destination id `-1` is not a non-negative integer");
        let ignore = EdgeListOptions { num_nodes: None, ignore_extra_columns: true };
        assert_eq!(
            err(parse_edge_list_with("1 2 w\n", &ignore)),
            "<input>:1: column 3 is `w`; columns after `src dst` must be numbers"
        );
        // Without the option, any third column is refused, a weight too.
        let e = err(parse_edge_list("1 2 0.5\n", None));
        assert!(e.starts_with("<input>:1: column 3 is `0.5`: an edge-list line has two columns"), "{e}");
        assert_eq!(
            err(parse_edge_list("4294967296 0\n", None)),
            "<input>:1: source id 4294967296 does not fit in 32 bits (the largest id is 4294967295)"
        );
        assert_eq!(
            err(parse_edge_list("", Some(MAX_NODES + 1))),
            "edge list node count 4294967297 exceeds the maximum of 4294967296 (node ids are u32)"
        );
    }

    #[test]
    fn lines_end_at_lf_cr_or_crlf() {
        // CR-only (old Mac) text is three lines, not one line of six columns.
        for text in ["0 1\r1 2\r2 0\r", "0 1\n1 2\n2 0", "0 1\r\n1 2\r\n2 0\r\n", "0 1\r1 2\n2 0\r\n"] {
            let g = parse_edge_list(text, None).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(g.coo_in_user_order(), (vec![0, 1, 2], vec![1, 2, 0]), "{text:?}");
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("g.txt");
        // Line numbers count every kind of line end; a CRLF split across the
        // reader's buffer is one end.
        let mut text = String::from("0 1\r1 2\r\n");
        text.push_str(&"# pad\r\n".repeat(200_000));
        text.push_str("2 x\r");
        std::fs::write(&path, &text).expect("write");
        assert_eq!(
            err(read_edge_list(&path, None)),
            format!("{}:200003: destination id `x` is not a non-negative integer", path.display())
        );
        // A line that never ends (`/dev/zero`, a binary file) is refused
        // after MAX_LINE_BYTES, not read forever.
        std::fs::write(&path, vec![0u8; 3 * super::super::MAX_LINE_BYTES]).expect("write");
        let e = err(read_edge_list(&path, None));
        assert!(e.contains(":1: line is longer than 65536 bytes"), "{e}");
    }

    #[test]
    fn reads_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("g.txt");
        std::fs::write(&path, "# FromNodeId\tToNodeId\n0\t1\r\n1\t2\n2\t0\n").expect("write");
        let g = read_edge_list(&path, None).expect("valid");
        assert_eq!(g.offsets(), &[0, 1, 2, 3]);
        assert_eq!(g.cols(), &[2, 0, 1]);
        assert_eq!(g.edge_ids(), Some(&[2u64, 0, 1][..]));

        std::fs::write(&path, "0 1\n1 x\n").expect("write");
        assert_eq!(
            err(read_edge_list(&path, None)),
            format!("{}:2: destination id `x` is not a non-negative integer", path.display())
        );
        std::fs::write(&path, b"0 1\n\xff 2\n").expect("write");
        assert_eq!(err(read_edge_list(&path, None)), format!("{}:2: line is not valid UTF-8", path.display()));
        let missing = dir.path().join("missing.txt");
        assert!(err(read_edge_list(&missing, None)).starts_with(&format!("{}: ", missing.display())));
    }
}
