//! SNAP-style text edge lists.
//!
//! The format, as SNAP and most graph dumps write it:
//! - one edge per line, `src dst`, separated by any whitespace; the edge goes
//!   from `src` to `dst`;
//! - further columns are allowed only if each parses as a number (weights,
//!   timestamps): they are ignored here, since edge fields are passed as
//!   tensors; anything else after the two ids is an error rather than a
//!   silently dropped token, because it usually means a wrong file;
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
use crate::graph::{Graph, GraphError, MAX_NODES};

/// Reads an edge list file; see the module doc for the format.
pub fn read_edge_list(path: impl AsRef<Path>, num_nodes: Option<usize>) -> Result<Graph, GraphError> {
    let path = path.as_ref();
    let name = path.display().to_string();
    let mut acc = Accumulator::new(&name, num_nodes)?;
    for_each_file_line(path, |line_no, text| acc.line(line_no, text))?;
    acc.finish()
}

/// Parses edge-list text held in memory; errors name `<input>`.
pub fn parse_edge_list(text: &str, num_nodes: Option<usize>) -> Result<Graph, GraphError> {
    let mut acc = Accumulator::new(INPUT, num_nodes)?;
    for_each_text_line(text, |line_no, line| acc.line(line_no, line))?;
    acc.finish()
}

/// One line of a SNAP edge list: `Some((src, dst))`, or `None` for a
/// comment (`#`, `%`) or blank line. Columns after `src dst` must be
/// numbers (weights, ignored); ids must be below `num_nodes` when given.
/// `tigac convert` streams a file through this, line by line.
pub fn parse_edge_line(path: &str, num_nodes: Option<usize>, line: usize, text: &str) -> Result<Option<(u32, u32)>, GraphError> {
    let trimmed = text.trim_start();
    if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('%') {
        return Ok(None);
    }
    let error = |message: String| GraphError::Parse { path: path.to_string(), line, message };
    let id = |token: Option<&str>, what: &str| -> Result<u32, GraphError> {
        let token = token.ok_or_else(|| error(format!("expected `src dst`, but the {what} id is missing")))?;
        let id: u64 = token.parse().map_err(|_| error(format!("{what} id `{token}` is not a non-negative integer")))?;
        if let Some(n) = num_nodes {
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
        if extra.parse::<f64>().is_err() {
            return Err(error(format!("column {} is `{extra}`; columns after `src dst` must be numbers", k + 3)));
        }
    }
    Ok(Some((s, d)))
}

struct Accumulator<'a> {
    path: &'a str,
    num_nodes: Option<usize>,
    src: Vec<u32>,
    dst: Vec<u32>,
    max_id: Option<u32>,
}

impl<'a> Accumulator<'a> {
    fn new(path: &'a str, num_nodes: Option<usize>) -> Result<Self, GraphError> {
        if let Some(n) = num_nodes {
            if n > MAX_NODES {
                return Err(GraphError::TooManyNodes { side: "edge list", count: n });
            }
        }
        Ok(Accumulator { path, num_nodes, src: Vec::new(), dst: Vec::new(), max_id: None })
    }

    fn line(&mut self, line: usize, text: &str) -> Result<(), GraphError> {
        if let Some((s, d)) = parse_edge_line(self.path, self.num_nodes, line, text)? {
            self.max_id = Some(self.max_id.map_or(s.max(d), |m| m.max(s).max(d)));
            self.src.push(s);
            self.dst.push(d);
        }
        Ok(())
    }

    fn finish(self) -> Result<Graph, GraphError> {
        let n = self.num_nodes.unwrap_or(self.max_id.map_or(0, |m| m as usize + 1));
        Graph::from_edges(n, n, &self.src, &self.dst)
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
        let g = parse_edge_list(text, None).expect("valid");
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
        assert_eq!(err(parse_edge_list("1 2 w\n", None)), "<input>:1: column 3 is `w`; columns after `src dst` must be numbers");
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
