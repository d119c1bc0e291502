//! Matrix Market coordinate files (`.mtx`, as SuiteSparse distributes them).
//!
//! An entry `i j v` is `A[i][j] = v` (1-based). tiga reads it as an edge from
//! source `j` to destination `i` with weight `v`, so that a sum kernel with
//! message `w * x[src]` computes `out = A · x`, the product scipy computes on
//! the same file. Hence `num_dst` is the row count and `num_src` the column
//! count.
//!
//! Accepted: `%%MatrixMarket matrix coordinate {real|double|integer|pattern}
//! {general|symmetric}`. A symmetric file stores one triangle; each
//! off-diagonal entry is followed by its mirror `A[j][i]`, so the user's edge
//! order is "entry, then its mirror". Dense `array` files, `complex` values
//! and `skew-symmetric`/`hermitian` symmetry are refused by name.

use std::path::Path;

use super::{for_each_file_line, for_each_text_line, INPUT};
use tiga_runtime::graph::{Graph, GraphError, MAX_NODES};

/// Reads a Matrix Market file: the graph, and the values in the graph's user
/// edge order (`None` for `pattern` files, which have none).
pub fn read_matrix_market(path: impl AsRef<Path>) -> Result<(Graph, Option<Vec<f64>>), GraphError> {
    let path = path.as_ref();
    let name = path.display().to_string();
    let mut acc = Accumulator::new(&name);
    let lines = for_each_file_line(path, |line_no, text| acc.line(line_no, text))?;
    acc.finish(lines)
}

/// Parses Matrix Market text held in memory; errors name `<input>`.
pub fn parse_matrix_market(text: &str) -> Result<(Graph, Option<Vec<f64>>), GraphError> {
    let mut acc = Accumulator::new(INPUT);
    let lines = for_each_text_line(text, |line_no, line| acc.line(line_no, line))?;
    acc.finish(lines)
}

#[derive(Clone, Copy, PartialEq)]
enum Field {
    Real,
    Integer,
    Pattern,
}

#[derive(Clone, Copy)]
struct Size {
    rows: usize,
    cols: usize,
    nnz: usize,
}

/// What one line of a Matrix Market file holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MtxLine {
    /// The banner, a comment or a blank line.
    Skip,
    /// The size line: `rows` destinations, `cols` sources, `nnz` entries.
    Size { rows: usize, cols: usize, nnz: usize },
    /// An entry: the edge `src -> dst` (0-based) with its value (`None` in a
    /// `pattern` file); `mirrored`: a symmetric file's off-diagonal entry,
    /// whose mirror `dst -> src` follows it in the user's edge order.
    Entry { src: u32, dst: u32, value: Option<f64>, mirrored: bool },
}

/// A Matrix Market file read line by line, checked as it goes: what the
/// in-memory reader accumulates and `tigac convert` streams to disk.
pub struct MatrixMarketLines<'a> {
    path: &'a str,
    /// Set once the banner line is read.
    kind: Option<(Field, bool)>,
    size: Option<Size>,
    entries: usize,
}

impl<'a> MatrixMarketLines<'a> {
    /// A reader whose errors name `path`.
    pub fn new(path: &'a str) -> Self {
        MatrixMarketLines { path, kind: None, size: None, entries: 0 }
    }

    /// The path errors name.
    pub fn path(&self) -> &str {
        self.path
    }

    fn error(&self, line: usize, message: impl Into<String>) -> GraphError {
        GraphError::Parse { path: self.path.to_string(), line, message: message.into() }
    }

    fn banner(&mut self, line: usize, text: &str) -> Result<MtxLine, GraphError> {
        let tokens: Vec<String> = text.split_whitespace().map(str::to_ascii_lowercase).collect();
        let expected = "expected `%%MatrixMarket matrix coordinate <real|integer|pattern> <general|symmetric>`";
        if tokens.first().map(String::as_str) != Some("%%matrixmarket") {
            return Err(self.error(line, format!("missing the Matrix Market header; {expected}")));
        }
        if tokens.len() != 5 {
            return Err(self.error(line, format!("the header has {} words; {expected}", tokens.len())));
        }
        if tokens[1] != "matrix" {
            return Err(self.error(line, format!("object `{}` is not supported; only `matrix` is", tokens[1])));
        }
        match tokens[2].as_str() {
            "coordinate" => {}
            "array" => return Err(self.error(line, "dense `array` format is not supported; only sparse `coordinate` is")),
            other => return Err(self.error(line, format!("format `{other}` is not supported; only `coordinate` is"))),
        }
        let field = match tokens[3].as_str() {
            "real" | "double" => Field::Real,
            "integer" => Field::Integer,
            "pattern" => Field::Pattern,
            "complex" => return Err(self.error(line, "`complex` values are not supported; accepted: real, integer, pattern")),
            other => return Err(self.error(line, format!("field `{other}` is not supported; accepted: real, integer, pattern"))),
        };
        let symmetric = match tokens[4].as_str() {
            "general" => false,
            "symmetric" => true,
            other => return Err(self.error(line, format!("symmetry `{other}` is not supported; accepted: general, symmetric"))),
        };
        self.kind = Some((field, symmetric));
        Ok(MtxLine::Skip)
    }

    fn number(&self, line: usize, token: &str, what: &str) -> Result<usize, GraphError> {
        token.parse().map_err(|_| self.error(line, format!("{what} `{token}` is not a non-negative integer")))
    }

    fn size_line(&mut self, line: usize, text: &str, symmetric: bool) -> Result<MtxLine, GraphError> {
        let tokens: Vec<&str> = text.split_whitespace().collect();
        if tokens.len() != 3 {
            return Err(self.error(line, format!("expected the size line `rows columns entries`, found {} fields", tokens.len())));
        }
        let rows = self.number(line, tokens[0], "row count")?;
        let cols = self.number(line, tokens[1], "column count")?;
        let nnz = self.number(line, tokens[2], "entry count")?;
        for (what, n) in [("rows", rows), ("columns", cols)] {
            if n > MAX_NODES {
                return Err(self.error(line, format!("the matrix has {n} {what}; at most {MAX_NODES} are supported")));
            }
        }
        if symmetric && rows != cols {
            return Err(self.error(line, format!("a symmetric matrix must be square, but it is {rows} x {cols}")));
        }
        self.size = Some(Size { rows, cols, nnz });
        Ok(MtxLine::Size { rows, cols, nnz })
    }

    /// Whether the banner declared a symmetric matrix (each off-diagonal
    /// entry then stands for two edges).
    pub fn symmetric(&self) -> bool {
        self.kind.is_some_and(|(_, s)| s)
    }

    /// Reads line `line` (1-based, for errors).
    pub fn line(&mut self, line: usize, text: &str) -> Result<MtxLine, GraphError> {
        let Some((field, symmetric)) = self.kind else {
            return self.banner(line, text);
        };
        let trimmed = text.trim();
        if trimmed.is_empty() || trimmed.starts_with('%') {
            return Ok(MtxLine::Skip);
        }
        let Some(Size { rows, cols, nnz }) = self.size else {
            return self.size_line(line, trimmed, symmetric);
        };
        if self.entries == nnz {
            return Err(self.error(line, format!("more entries than the {nnz} the size line declares")));
        }
        let tokens: Vec<&str> = trimmed.split_whitespace().collect();
        let want = if field == Field::Pattern { 2 } else { 3 };
        if tokens.len() != want {
            let form = if want == 2 { "`row column`" } else { "`row column value`" };
            return Err(self.error(line, format!("expected an entry {form}, found {} fields", tokens.len())));
        }
        let i = self.number(line, tokens[0], "row index")?;
        let j = self.number(line, tokens[1], "column index")?;
        if i == 0 || i > rows {
            return Err(self.error(line, format!("row index {i} is out of range 1..={rows}")));
        }
        if j == 0 || j > cols {
            return Err(self.error(line, format!("column index {j} is out of range 1..={cols}")));
        }
        let value = match field {
            Field::Pattern => None,
            Field::Real => Some(
                tokens[2].parse::<f64>().map_err(|_| self.error(line, format!("value `{}` is not a real number", tokens[2])))?,
            ),
            Field::Integer => {
                Some(tokens[2].parse::<i64>().map_err(|_| self.error(line, format!("value `{}` is not an integer", tokens[2])))?
                    as f64)
            }
        };
        self.entries += 1;
        // In range 1..=MAX_NODES, so the 0-based ids fit in u32.
        let (r, c) = ((i - 1) as u32, (j - 1) as u32);
        Ok(MtxLine::Entry { src: c, dst: r, value, mirrored: symmetric && r != c })
    }

    /// Checks that the file was whole after `lines` lines: `(rows, cols,
    /// whether entries carry values)`.
    pub fn finish(&self, lines: usize) -> Result<(usize, usize, bool), GraphError> {
        let Some((field, _)) = self.kind else {
            return Err(self.error(1, "the file is empty; expected a `%%MatrixMarket` header"));
        };
        let Some(size) = self.size else {
            return Err(self.error(lines, "the file ends before the size line `rows columns entries`"));
        };
        if self.entries < size.nnz {
            return Err(self
                .error(lines, format!("the file ends after {} entries, but the size line declares {}", self.entries, size.nnz)));
        }
        Ok((size.rows, size.cols, field != Field::Pattern))
    }
}

/// The in-memory reader: edges and values in the user's order.
struct Accumulator<'a> {
    lines: MatrixMarketLines<'a>,
    src: Vec<u32>,
    dst: Vec<u32>,
    values: Vec<f64>,
}

impl<'a> Accumulator<'a> {
    fn new(path: &'a str) -> Self {
        Accumulator { lines: MatrixMarketLines::new(path), src: Vec::new(), dst: Vec::new(), values: Vec::new() }
    }

    fn line(&mut self, line: usize, text: &str) -> Result<(), GraphError> {
        match self.lines.line(line, text)? {
            MtxLine::Skip => {}
            MtxLine::Size { nnz, .. } => {
                // The header's count is not trusted for allocation: a corrupt
                // file must not make us reserve terabytes before the first
                // entry.
                let reserve = nnz.min(1 << 20) * if self.lines.symmetric() { 2 } else { 1 };
                self.src.reserve(reserve);
                self.dst.reserve(reserve);
            }
            MtxLine::Entry { src, dst, value, mirrored } => {
                self.push(src, dst, value);
                if mirrored {
                    self.push(dst, src, value);
                }
            }
        }
        Ok(())
    }

    fn push(&mut self, src: u32, dst: u32, value: Option<f64>) {
        self.src.push(src);
        self.dst.push(dst);
        if let Some(v) = value {
            self.values.push(v);
        }
    }

    fn finish(self, lines: usize) -> Result<(Graph, Option<Vec<f64>>), GraphError> {
        let (rows, cols, has_values) = self.lines.finish(lines)?;
        let graph = Graph::from_edges(cols, rows, &self.src, &self.dst)?;
        Ok((graph, has_values.then_some(self.values)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        match parse_matrix_market(text) {
            Ok(g) => panic!("expected an error, got {g:?}"),
            Err(e) => e.to_string(),
        }
    }

    /// out = A·x computed from the graph and values, to check the direction
    /// convention against the matrix written by hand.
    fn spmv(g: &Graph, values: &[f64], x: &[f64]) -> Vec<f64> {
        (0..g.num_dst()).map(|i| g.row(i).map(|p| values[g.edge_id(p) as usize] * x[g.cols()[p] as usize]).sum()).collect()
    }

    #[test]
    fn general_real() {
        // A (2x3) = [[1, 0, 2], [0, 3, 0]].
        let text = "%%MatrixMarket matrix coordinate real general\n% comment\n2 3 3\n1 3 2.0\n2 2 3\n1 1 1e0\n";
        let (g, v) = parse_matrix_market(text).expect("valid");
        let v = v.expect("real values");
        assert_eq!((g.num_dst(), g.num_src(), g.num_edges()), (2, 3, 3));
        assert_eq!(v, vec![2.0, 3.0, 1.0]);
        assert_eq!(g.coo_in_user_order(), (vec![2, 1, 0], vec![0, 1, 0]));
        // A·[1, 10, 100] = [1 + 200, 30].
        assert_eq!(spmv(&g, &v, &[1.0, 10.0, 100.0]), vec![201.0, 30.0]);
    }

    #[test]
    fn symmetric_mirrors_off_diagonal() {
        // Lower triangle of [[4, 1, 0], [1, 5, 2], [0, 2, 6]].
        let text = "%%MatrixMarket matrix coordinate integer symmetric\n3 3 5\n1 1 4\n2 1 1\n2 2 5\n3 2 2\n3 3 6\n";
        let (g, v) = parse_matrix_market(text).expect("valid");
        let v = v.expect("integer values");
        // Entry then mirror: (2,1),(1,2) and (3,2),(2,3).
        assert_eq!(v, vec![4.0, 1.0, 1.0, 5.0, 2.0, 2.0, 6.0]);
        assert_eq!(g.coo_in_user_order(), (vec![0, 0, 1, 1, 1, 2, 2], vec![0, 1, 0, 1, 2, 1, 2]));
        // A·[1, 2, 3] = [4+2, 1+10+6, 4+18].
        assert_eq!(spmv(&g, &v, &[1.0, 2.0, 3.0]), vec![6.0, 17.0, 22.0]);
    }

    #[test]
    fn pattern_has_no_values() {
        let text = "%%MatrixMarket MATRIX Coordinate PATTERN general\n\n3 3 2\n1 2\n3 1\n";
        let (g, v) = parse_matrix_market(text).expect("valid");
        assert_eq!(v, None);
        assert_eq!(g.coo_in_user_order(), (vec![1, 0], vec![0, 2]));
        let (g, _) = parse_matrix_market("%%MatrixMarket matrix coordinate pattern symmetric\n2 2 1\n2 1\n").expect("valid");
        assert_eq!(g.coo_in_user_order(), (vec![0, 1], vec![1, 0]));
    }

    #[test]
    fn errors_name_line_and_problem() {
        let h = "%%MatrixMarket matrix coordinate real general\n";
        assert_eq!(err(""), "<input>:1: the file is empty; expected a `%%MatrixMarket` header");
        assert_eq!(
            err("1 2 3\n"),
            "<input>:1: missing the Matrix Market header; expected `%%MatrixMarket matrix coordinate <real|integer|pattern> <general|symmetric>`"
        );
        assert_eq!(
            err("%%MatrixMarket matrix array real general\n"),
            "<input>:1: dense `array` format is not supported; only sparse `coordinate` is"
        );
        assert_eq!(
            err("%%MatrixMarket matrix coordinate complex general\n"),
            "<input>:1: `complex` values are not supported; accepted: real, integer, pattern"
        );
        assert_eq!(
            err("%%MatrixMarket matrix coordinate real hermitian\n"),
            "<input>:1: symmetry `hermitian` is not supported; accepted: general, symmetric"
        );
        assert_eq!(err(h), "<input>:1: the file ends before the size line `rows columns entries`");
        assert_eq!(err(&format!("{h}2 2\n")), "<input>:2: expected the size line `rows columns entries`, found 2 fields");
        assert_eq!(
            err("%%MatrixMarket matrix coordinate real symmetric\n2 3 0\n"),
            "<input>:2: a symmetric matrix must be square, but it is 2 x 3"
        );
        assert_eq!(
            err(&format!("{h}2 2 2\n1 1 1.0\n")),
            "<input>:3: the file ends after 1 entries, but the size line declares 2"
        );
        assert_eq!(err(&format!("{h}2 2 1\n1 1 1.0\n2 2 1.0\n")), "<input>:4: more entries than the 1 the size line declares");
        assert_eq!(err(&format!("{h}2 2 1\n3 1 1.0\n")), "<input>:3: row index 3 is out of range 1..=2");
        assert_eq!(err(&format!("{h}2 2 1\n1 0 1.0\n")), "<input>:3: column index 0 is out of range 1..=2");
        assert_eq!(err(&format!("{h}2 2 1\n1 1\n")), "<input>:3: expected an entry `row column value`, found 2 fields");
        assert_eq!(err(&format!("{h}2 2 1\n1 1 x\n")), "<input>:3: value `x` is not a real number");
        assert_eq!(
            err("%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 1 1.5\n"),
            "<input>:3: value `1.5` is not an integer"
        );
        assert_eq!(
            err(&format!("{h}4294967297 1 0\n")),
            "<input>:2: the matrix has 4294967297 rows; at most 4294967296 are supported"
        );
        // A huge declared count with few entries is a clean error, not an
        // allocation failure.
        assert_eq!(
            err(&format!("{h}2 2 18446744073709551615\n")),
            "<input>:2: the file ends after 0 entries, but the size line declares 18446744073709551615"
        );
    }

    #[test]
    fn reads_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.mtx");
        std::fs::write(&path, "%%MatrixMarket matrix coordinate real general\n1 1 1\n1 1 -2.5\n").expect("write");
        let (g, v) = read_matrix_market(&path).expect("valid");
        assert_eq!((g.cols(), v), (&[0u32][..], Some(vec![-2.5])));
        std::fs::write(&path, "%%MatrixMarket matrix coordinate real general\n1 1 2\n1 1 -2.5\n").expect("write");
        assert_eq!(
            read_matrix_market(&path).map(|_| ()).err().map(|e| e.to_string()),
            Some(format!("{}:3: the file ends after 1 entries, but the size line declares 2", path.display()))
        );
    }
}
