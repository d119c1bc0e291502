//! A `.gfg` file as a [`PageSource`]: pages viewed in place in the file's
//! mapping ([`GfgFile::page`]: read ahead with `WillNeed` unless already in
//! memory; the blocks under the page verified against their CRC-32s in a
//! version 2 file, once per open file; checked against the counts on first
//! visit; the edge ids checked to be a permutation before the first page
//! that carries them, and the stored transpose checked to be the
//! transpose before the first transposed page) and unmapped again
//! once the kernel has passed them ([`GfgFile::release_page`]), so the
//! resident set holds about two pages of adjacency, not the pages passed.
//! Copying pages into buffers with positioned reads was measured first: on
//! a warm page cache the copy cost as much as the kernel. Rows with
//! reversed edges, which the file does not store, are copied out of the
//! mapped page into buffers recycled from page to page (a fresh
//! multi-megabyte allocation per page costs a page fault per 4 KiB).

use std::ops::Range;
use std::sync::Mutex;

use crate::{reader::GfgFile, reader::Page};
use tiga_runtime::exec::{ExecError, PageData, PageSource, PageView, Side};

/// The pages of one side of a `.gfg` file.
pub struct GfgPages<'f> {
    file: &'f GfgFile,
    side: Side,
    /// Whether pages carry their edge ids: the call reads them and the
    /// file stores them (rows reversed always carry them).
    edge_ids: bool,
    /// Reversed-row buffers of released pages, for the next pages.
    pool: Mutex<Vec<ReversedPage>>,
}

impl<'f> GfgPages<'f> {
    /// The pages of `side`; `edge_ids` whether the call reads edge ids (a
    /// page without them maps 8 bytes per edge less: a kernel with no edge
    /// fields or outputs never looks at them).
    pub fn new(file: &'f GfgFile, side: Side, edge_ids: bool) -> Result<GfgPages<'f>, ExecError> {
        let edge_ids = match side {
            Side::Forward => edge_ids && file.has_edge_ids(),
            Side::Transposed => edge_ids && file.t_edge_ids()?.is_some(),
            Side::RowReversed => true,
        };
        Ok(GfgPages { file, side, edge_ids, pool: Mutex::new(Vec::new()) })
    }
}

impl Drop for GfgPages<'_> {
    /// The call is over: the offsets the file mapped whole leave the
    /// resident set too.
    fn drop(&mut self) {
        self.file.release_adjacency();
    }
}

/// A page mapped in place, released from the resident set when dropped.
struct Mapped<'f> {
    file: &'f GfgFile,
    page: Page<'f>,
}

impl PageData for Mapped<'_> {
    fn view(&self) -> PageView<'_> {
        PageView {
            first_row: self.page.rows.start,
            offsets: self.page.offsets,
            cols: self.page.cols,
            edge_ids: self.page.edge_ids,
        }
    }
}

impl Drop for Mapped<'_> {
    fn drop(&mut self) {
        self.file.release_page(&self.page);
    }
}

/// One page's adjacency with each row's edges in reverse order (and their
/// user edge ids; absent ids are the positions themselves): what a right
/// fold walks, which the file does not store.
#[derive(Default)]
struct ReversedPage {
    rows: Range<usize>,
    offsets: Vec<u64>,
    cols: Vec<u32>,
    edge_ids: Vec<u64>,
}

impl ReversedPage {
    fn fill(&mut self, page: &Page<'_>) {
        let first = page.offsets[0] as usize;
        self.rows = page.rows.clone();
        self.offsets.clear();
        self.offsets.extend_from_slice(page.offsets);
        self.cols.clear();
        self.cols.extend_from_slice(page.cols);
        self.edge_ids.clear();
        match page.edge_ids {
            Some(ids) => self.edge_ids.extend_from_slice(ids),
            None => self.edge_ids.extend(first as u64..(first + page.cols.len()) as u64),
        }
        for w in page.offsets.windows(2) {
            let (s, e) = (w[0] as usize - first, w[1] as usize - first);
            self.cols[s..e].reverse();
            self.edge_ids[s..e].reverse();
        }
    }
}

/// A reversed page, whose buffers go back to the pool when dropped.
struct Reversed<'p> {
    pool: &'p Mutex<Vec<ReversedPage>>,
    page: Option<ReversedPage>,
}

impl PageData for Reversed<'_> {
    fn view(&self) -> PageView<'_> {
        match &self.page {
            Some(p) => PageView { first_row: p.rows.start, offsets: &p.offsets, cols: &p.cols, edge_ids: Some(&p.edge_ids) },
            None => PageView { first_row: 0, offsets: &[], cols: &[], edge_ids: None },
        }
    }
}

impl Drop for Reversed<'_> {
    fn drop(&mut self) {
        if let (Some(p), Ok(mut pool)) = (self.page.take(), self.pool.lock()) {
            pool.push(p);
        }
    }
}

impl tiga_runtime::realization::PagedRows for GfgPages<'_> {
    fn edge_ids(&self) -> bool {
        self.edge_ids
    }

    /// By rows, only the row count is needed; by bytes, the mapped offsets
    /// are scanned once (no copy).
    fn plan(&self, schedule: &tiga_runtime::Schedule) -> Result<Vec<Range<usize>>, ExecError> {
        let rows = match self.side {
            Side::Transposed => self.file.num_src(),
            _ => self.file.num_dst(),
        };
        if schedule.page_bytes.is_none() {
            return Ok(tiga_runtime::exec::plan_rows(rows, schedule.rows_per_page()));
        }
        let offsets: &[u64] = match self.side {
            Side::Transposed => self.file.t_offsets()?.unwrap_or(&[]),
            _ => self.file.offsets()?,
        };
        Ok(schedule.plan(offsets, 4 + if self.edge_ids { 8 } else { 0 }))
    }
}

// SAFETY: pages come from `GfgFile::page`, `transposed_page` and
// `page_without_ids`, which check each page against the file's counts
// (offsets monotone and in range, columns and edge ids below their counts)
// before handing it out; a reversed page permutes a checked page's rows.
// (The whole-file checks they also run, block checksums, edge ids a
// permutation, the transpose the transpose, are about right answers, not
// memory safety.)
unsafe impl PageSource for GfgPages<'_> {
    fn page(&self, rows: Range<usize>) -> Result<Box<dyn PageData + '_>, ExecError> {
        let transposed = self.side == Side::Transposed;
        let page = match (transposed, self.edge_ids) {
            (true, true) => self.file.transposed_page(rows)?,
            (false, true) => self.file.page(rows)?,
            (_, false) => self.file.page_without_ids(rows, transposed)?,
        };
        if self.side != Side::RowReversed {
            return Ok(Box::new(Mapped { file: self.file, page }));
        }
        let mut reversed = self.pool.lock().ok().and_then(|mut p| p.pop()).unwrap_or_default();
        reversed.fill(&page);
        self.file.release_page(&page);
        Ok(Box::new(Reversed { pool: &self.pool, page: Some(reversed) }))
    }
}
