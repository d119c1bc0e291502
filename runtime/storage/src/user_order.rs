//! A `.gfg` written in a node order, read back in the caller's order.
//!
//! A file written renumbered (`tigac convert --renumber`) holds the
//! renumbered CSR: a paged call runs over its rows as they are, with its
//! node fields moved in and out (see `tiga_runtime::renumber`). Two sums add rows
//! in row order across rows, not within one: parameter outputs and the
//! winner scatter of a max/min backward. To keep their bits they must meet
//! the rows in the caller's order, which the file does not store. This
//! module gives those rows: caller row `i` is the file's row `perm[i]`,
//! each edge in its stored order, its column renamed back (`inv[c]`), its
//! edge id as stored, copied a page at a time. The copies gather scattered
//! rows (no locality, and no gain from the order for those two sums). The
//! copies hold a page; besides them, a call keeps where each caller row
//! starts (8 bytes a row), and the first call of an open file verifies the
//! checksums of the whole `offsets`, `cols` and `edge_ids` sections, which
//! it reads at random.

use std::ops::Range;
use std::sync::Arc;

use crate::error::GfgError;
use crate::reader::GfgFile;
use tiga_runtime::exec::{ExecError, PageData, PageSource, PageView, Side};
use tiga_runtime::realization::{PagedRows, Realization, Rows};
use tiga_runtime::renumber::{Order, Renumbered};

/// A file written in a node order, seen in the caller's numbering (the
/// base of its [`tiga_runtime::RenumberedGraph`]). It holds no fields: a call over
/// it is given them, moved out of the file's numbering by the facade.
#[derive(Debug, Clone)]
pub struct UserOrderFile<'f> {
    pub(crate) file: &'f GfgFile,
    pub(crate) renumbered: Arc<Renumbered>,
}

impl Realization for UserOrderFile<'_> {
    fn num_src(&self) -> usize {
        self.file.num_src()
    }
    fn num_dst(&self) -> usize {
        self.file.num_dst()
    }
    fn num_edges(&self) -> usize {
        self.file.num_edges()
    }
    fn rows(&self, side: Side, _edge_ids: bool) -> Result<Rows<'_>, ExecError> {
        Ok(Rows::Pages(Box::new(UserOrderPages::new(self.file, &self.renumbered, side)?)))
    }
    fn has_side(&self, side: Side) -> bool {
        Realization::has_side(self.file, side)
    }
    fn describe(&self) -> String {
        format!("{}, read in the caller's order", Realization::describe(self.file))
    }
}

/// The pages of one side of a renumbered file in the caller's order.
struct UserOrderPages<'f> {
    file: &'f GfgFile,
    /// Each row's edges reversed (a right fold's rows).
    reversed: bool,
    /// Caller row to file row (`None`: the same).
    rows: Option<&'f Order>,
    /// File column to caller column (`None`: the same).
    cols: Option<&'f Order>,
    offsets: &'f [u64],
    adj: &'f [u32],
    ids: Option<&'f [u64]>,
    section: &'static str,
    num_cols: usize,
    num_edges: usize,
    /// Where each caller row starts in the caller-order CSR (`rows + 1`
    /// positions): the absolute positions the pages carry.
    starts: Vec<u64>,
}

impl<'f> UserOrderPages<'f> {
    fn new(file: &'f GfgFile, r: &'f Renumbered, side: Side) -> Result<UserOrderPages<'f>, ExecError> {
        let (num_src, num_dst) = (file.num_src(), file.num_dst());
        // The whole-file checks a page of this side relies on (edge ids a
        // permutation, the transpose the transpose), once per open file.
        file.require_page_checks(side == Side::Transposed)?;
        let (offsets, adj, ids, rows, cols, num_rows, num_cols, section) = match side {
            Side::Forward | Side::RowReversed => {
                (file.offsets()?, file.cols()?, file.edge_ids()?, Some(&r.dst), r.src_order(), num_dst, num_src, "offsets")
            }
            Side::Transposed => {
                let missing = || ExecError::Unavailable(format!("{} has no transposed CSR", file.path().display()));
                let (o, c) = (file.t_offsets()?.ok_or_else(missing)?, file.t_cols()?.ok_or_else(missing)?);
                (o, c, file.t_edge_ids()?, r.src_order(), Some(&r.dst), num_src, num_dst, "t_offsets")
            }
        };
        let num_edges = file.num_edges();
        let corrupt =
            |message: String| GfgError::Corrupt { path: file.path().display().to_string(), section: section.into(), message };
        if offsets.len() != num_rows + 1 || rows.is_some_and(|o| o.len() != num_rows) || cols.is_some_and(|o| o.len() != num_cols)
        {
            return Err(
                corrupt(format!("{} row offsets for {num_rows} rows and a node order of other lengths", offsets.len())).into()
            );
        }
        let mut starts = Vec::with_capacity(num_rows + 1);
        let mut at = 0u64;
        starts.push(at);
        for i in 0..num_rows {
            let row = rows.map_or(i, |o| o.perm()[i] as usize);
            let (lo, hi) = (offsets[row], offsets[row + 1]);
            if lo > hi || hi > num_edges as u64 {
                return Err(corrupt(format!("row {row} spans positions {lo}..{hi}, not inside 0..{num_edges}")).into());
            }
            at += hi - lo;
            starts.push(at);
        }
        Ok(UserOrderPages {
            file,
            reversed: side == Side::RowReversed,
            rows,
            cols,
            offsets,
            adj,
            ids,
            section,
            num_cols,
            num_edges,
            starts,
        })
    }

    fn corrupt(&self, message: String) -> ExecError {
        GfgError::Corrupt { path: self.file.path().display().to_string(), section: self.section.into(), message }.into()
    }
}

impl Drop for UserOrderPages<'_> {
    /// The whole sections were mapped: they leave the resident set.
    fn drop(&mut self) {
        self.file.release_adjacency();
    }
}

/// A page copied into the caller's order.
struct Copied {
    first_row: usize,
    offsets: Vec<u64>,
    cols: Vec<u32>,
    ids: Vec<u64>,
}

impl PageData for Copied {
    fn view(&self) -> PageView<'_> {
        PageView { first_row: self.first_row, offsets: &self.offsets, cols: &self.cols, edge_ids: Some(&self.ids) }
    }
}

impl PagedRows for UserOrderPages<'_> {
    fn edge_ids(&self) -> bool {
        true
    }
    fn plan(&self, schedule: &tiga_runtime::Schedule) -> Result<Vec<Range<usize>>, ExecError> {
        if schedule.page_bytes.is_none() {
            return Ok(tiga_runtime::exec::plan_rows(self.starts.len() - 1, schedule.rows_per_page()));
        }
        Ok(schedule.plan(&self.starts, 12))
    }
}

// SAFETY: a page's `first_row` is its rows' start; its offsets are
// `starts[rows]`, non-decreasing, and span exactly the copied edges (each
// row's length was checked against the file's row offsets in `new`); every
// column was checked below the column count before it was renamed through
// an order of that length (a permutation), and every edge id below the
// edge count.
unsafe impl PageSource for UserOrderPages<'_> {
    fn page(&self, rows: Range<usize>) -> Result<Box<dyn PageData + '_>, ExecError> {
        if rows.start > rows.end || rows.end >= self.starts.len() {
            return Err(ExecError::Unavailable(format!("rows {rows:?} of {}", self.starts.len() - 1)));
        }
        let edges = (self.starts[rows.end] - self.starts[rows.start]) as usize;
        let mut page = Copied {
            first_row: rows.start,
            offsets: self.starts[rows.start..=rows.end].to_vec(),
            cols: Vec::with_capacity(edges),
            ids: Vec::with_capacity(edges),
        };
        for i in rows {
            let row = self.rows.map_or(i, |o| o.perm()[i] as usize);
            let span = self.offsets[row] as usize..self.offsets[row + 1] as usize;
            // A mapping rewritten since `new` may hold other offsets now.
            let stored = self.ids.map_or(self.adj.len(), |e| e.len().min(self.adj.len()));
            if span.start > span.end || span.end > stored {
                return Err(self.corrupt(format!("row {row} spans positions {span:?}, past the {stored} stored")));
            }
            let from = page.cols.len();
            for p in span {
                let c = self.adj[p] as usize;
                if c >= self.num_cols {
                    return Err(self.corrupt(format!("position {p} has column {c}, not below {}", self.num_cols)));
                }
                page.cols.push(self.cols.map_or(c as u32, |o| o.inv()[c]));
                let id = self.ids.map_or(p as u64, |e| e[p]);
                if id >= self.num_edges as u64 {
                    return Err(self.corrupt(format!("position {p} has edge id {id}, not below {}", self.num_edges)));
                }
                page.ids.push(id);
            }
            if self.reversed {
                page.cols[from..].reverse();
                page.ids[from..].reverse();
            }
        }
        // The spans were read again from the mapping: they must still add
        // up to the positions `starts` promised.
        if page.cols.len() != edges {
            return Err(self.corrupt(format!("rows copied {} edges where the row offsets give {edges}", page.cols.len())));
        }
        Ok(Box::new(page))
    }
}
