//! Paged execution: a kernel over a graph that stays on disk (`.gfg`),
//! streamed through the unchanged compiled kernel one page of destination
//! rows at a time.
//!
//! Nothing is read whole. Pages are viewed in place in the file's mapping
//! ([`GfgFile::page`]: read ahead with `WillNeed` unless already in memory,
//! checked against the counts on first visit) and unmapped again once the
//! kernel has passed them ([`GfgFile::release_page`]), so the resident set
//! holds about two pages of adjacency, not the pages passed. Copying pages
//! into buffers with positioned reads was measured first: on a warm page
//! cache the copy cost as much as the kernel. Rows with reversed edges,
//! which the file does not store, are copied out of the mapped page into
//! recycled buffers.
//!
//! Every pool thread takes pieces of rows from one stream, in row order,
//! with no barrier between pages ([`Stream`]); the read-ahead of the next
//! `prefetch` pages is the first piece of each page. Pieces are handed out
//! at most one page past the first page not yet released, which bounds the
//! pages mapped at once. A parameter block cut by a page boundary runs as
//! two pieces, the second after the first (`call::RowRunner`).
//!
//! The kernel sees absolute CSR positions: its `cols`/`edge_ids` pointers
//! are offset so that position `p` of the page lands on the page's data.
//!
//! Outputs are bit-identical to the in-memory run for any page size: every
//! row is computed by the same code over the same edges in the same order,
//! and parameter outputs (sums over all rows) are grouped in fixed row blocks
//! that do not depend on the page plan (`call::ParamPartials`). The same
//! runner walks the file's stored transpose (a paged backward's source
//! stage) and rows in reverse edge order (a monoid's
//! suffix stage).

use tiga_compiler::back::abi::EntryFn;
use tiga_compiler::back::cranelift::RawArgs;
use tiga_compiler::bind::{output_shapes, Extents};
use tiga_compiler::ir::Role;
use tiga_runtime::storage::{FieldHandle, FieldRole, GfgFile, Page};
use tiga_runtime::Tensor;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::call::{bind_extents, output_buffers, splittable, Inputs, Outputs, ParamPartials, RowRunner, Work};
use crate::{Error, Kernel, Result};

/// How a paged call cuts the graph.
#[derive(Clone, Debug, Default)]
pub struct PageOptions {
    /// Rows per page (default: `TIGA_PAGED_PAGE_ROWS`, else 1,000,000).
    pub page_rows: Option<usize>,
    /// Or: the most bytes of column indices and edge ids per page.
    pub page_bytes: Option<usize>,
    /// Pages read ahead by the background reader (default:
    /// `TIGA_PAGED_PREFETCH_DEPTH`, else 2); 0 reads each page when needed.
    pub prefetch: Option<usize>,
}

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

impl PageOptions {
    /// Pages read ahead: `prefetch`, else `TIGA_PAGED_PREFETCH_DEPTH`, else 2.
    pub fn prefetch_depth(&self) -> usize {
        self.prefetch.or_else(|| env_usize("TIGA_PAGED_PREFETCH_DEPTH")).unwrap_or(2)
    }

    /// A page plan by rows alone.
    pub fn plan_rows(&self, n: usize) -> Vec<std::ops::Range<usize>> {
        let rows = self.page_rows.or_else(|| env_usize("TIGA_PAGED_PAGE_ROWS")).unwrap_or(1_000_000).max(1);
        (0..n).step_by(rows).map(|s| s..(s + rows).min(n)).collect()
    }

    /// The page plan: row ranges covering every row once, in order.
    pub fn plan(&self, offsets: &[u64], edge_bytes: usize) -> Vec<std::ops::Range<usize>> {
        let n = offsets.len().saturating_sub(1);
        let mut pages = Vec::new();
        if let Some(budget) = self.page_bytes {
            let budget = budget.max(1);
            let mut start = 0;
            while start < n {
                let mut end = start + 1;
                while end < n && ((offsets[end + 1] - offsets[start]) as usize) * edge_bytes <= budget {
                    end += 1;
                }
                pages.push(start..end);
                start = end;
            }
            return pages;
        }
        self.plan_rows(n)
    }
}

/// Which CSR of the file a paged run walks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// Rows are destinations (the file's `offsets`/`cols`/`edge_ids`).
    Forward,
    /// Rows are sources (the file's stored transpose).
    Transposed,
    /// Forward rows with each row's edges in reverse order (a right fold).
    RowReversed,
}

/// One page's adjacency with each row's edges in reverse order (and their
/// user edge ids; absent ids are the positions themselves): what a right
/// fold walks, which the file does not store. Copied from the checked,
/// mapped page into buffers recycled from page to page (a fresh
/// multi-megabyte allocation per page costs a page fault per 4 KiB).
#[derive(Default)]
struct ReversedPage {
    rows: std::ops::Range<usize>,
    first: usize,
    offsets: Vec<u64>,
    cols: Vec<u32>,
    edge_ids: Vec<u64>,
}

impl ReversedPage {
    fn fill(&mut self, page: &Page<'_>) {
        let first = page.offsets[0] as usize;
        self.rows = page.rows.clone();
        self.first = first;
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

/// Where a paged run's pages come from: the file's mapping, viewed in
/// place ([`GfgFile::page`] reads it ahead and checks it) and dropped from
/// the resident set after ([`GfgFile::release_page`]); reversed rows are
/// copied out of it into buffers recycled from page to page. No copy
/// otherwise: on a warm page cache a copy per page cost as much as the
/// kernel itself.
struct Source<'a> {
    file: &'a GfgFile,
    side: Side,
    /// Whether pages carry their edge ids (the kernel has edge fields or
    /// outputs, or rows are reversed).
    edge_ids: bool,
    /// Reversed-row buffers of released pages, for the next pages.
    pool: Mutex<Vec<ReversedPage>>,
}

/// One page in flight: mapped, or copied with its rows reversed.
enum Slot<'a> {
    Mapped(Page<'a>),
    Reversed(ReversedPage),
}

impl<'a> Source<'a> {
    fn prepare(&self, rows: std::ops::Range<usize>) -> std::result::Result<Slot<'a>, String> {
        let transposed = self.side == Side::Transposed;
        let page = match (transposed, self.edge_ids) {
            (true, true) => self.file.transposed_page(rows),
            (false, true) => self.file.page(rows),
            (_, false) => self.file.page_without_ids(rows, transposed),
        }
        .map_err(|e| e.to_string())?;
        if self.side != Side::RowReversed {
            return Ok(Slot::Mapped(page));
        }
        let mut reversed = self.pool.lock().ok().and_then(|mut p| p.pop()).unwrap_or_default();
        reversed.fill(&page);
        self.file.release_page(&page);
        Ok(Slot::Reversed(reversed))
    }

    fn release(&self, slot: Slot<'a>) {
        match slot {
            Slot::Mapped(page) => self.file.release_page(&page),
            Slot::Reversed(buffers) => {
                if let Ok(mut pool) = self.pool.lock() {
                    pool.push(buffers);
                }
            }
        }
    }
}

impl Slot<'_> {
    /// The kernel's adjacency pointers (absolute positions land on the page;
    /// fields and outputs are filled in by the caller), the page's offsets
    /// and its first row.
    fn args(&self) -> (RawArgs, &[u64], usize) {
        use std::ptr::null;
        match self {
            Slot::Mapped(p) => {
                let first = p.offsets[0] as usize;
                let raw = RawArgs {
                    offsets: p.offsets.as_ptr().wrapping_sub(p.rows.start),
                    cols: p.cols.as_ptr().wrapping_sub(first),
                    edge_ids: p.edge_ids.map(|e| e.as_ptr().wrapping_sub(first)).unwrap_or(null()),
                    fields: null(),
                    outputs: null(),
                };
                (raw, p.offsets, p.rows.start)
            }
            Slot::Reversed(p) => {
                let raw = RawArgs {
                    offsets: p.offsets.as_ptr().wrapping_sub(p.rows.start),
                    cols: p.cols.as_ptr().wrapping_sub(p.first),
                    edge_ids: p.edge_ids.as_ptr().wrapping_sub(p.first),
                    fields: null(),
                    outputs: null(),
                };
                (raw, &p.offsets, p.rows.start)
            }
        }
    }
}

/// A page of the stream: read and listed by whoever needs it first (the
/// read-ahead, or the first worker to claim its rows), released (in page
/// order) once its pieces are done.
struct PageState<'a> {
    state: Mutex<Held<'a>>,
    /// Pieces of its work not finished yet (set when it is read).
    left: AtomicUsize,
    done: AtomicBool,
}

enum Held<'a> {
    Pending,
    Ready(Arc<Ready<'a>>),
    Released,
}

/// A read page and its work, in row order.
struct Ready<'a> {
    slot: Slot<'a>,
    work: Vec<Work>,
}

/// What a worker takes next: read pages ahead, or run a piece of a page.
enum Claim<'a> {
    ReadAhead(usize),
    Piece(usize, Arc<Ready<'a>>, usize),
    /// The page before the cursor's is still running.
    Wait,
    Done,
}

/// Where the workers are: the page whose pieces are being handed out, the
/// next piece, and whether that page's read-ahead was handed out.
#[derive(Default)]
struct Cursor {
    page: usize,
    piece: usize,
    /// The page's piece count, once it was read.
    pieces: Option<usize>,
    read_ahead: bool,
}

/// A paged run's rows as one stream of pieces that every pool thread takes
/// from in row order, with no barrier between pages: a worker that finishes
/// the last piece of a page goes on to the next page's first one, and the
/// read-ahead is a piece like the others (the first one of each page). A
/// barrier per page (every thread joining before the next page starts) put
/// threads to sleep and woke them again 200 times per five 4M-row steps in
/// 100k-row pages, a fifth of the paged run's extra time.
struct Stream<'s, 'a> {
    source: &'s Source<'a>,
    plan: &'s [std::ops::Range<usize>],
    depth: usize,
    pages: Vec<PageState<'a>>,
    cursor: Mutex<Cursor>,
    /// Pages before this one are released. Pieces are handed out only up
    /// to the page after it, so at most two pages are mapped while their
    /// rows run (a worker that stalled on one piece holds the others back,
    /// rather than letting pages pile up behind it).
    first_held: AtomicUsize,
    /// Taken while releasing, so that pages are released in order.
    releasing: Mutex<()>,
    runner: &'s RowRunner<'s>,
    fields: SharedFields,
    /// Outputs with a row per page row: (address, bytes per row).
    touch: SharedRows,
    /// File-backed outputs, whose rows leave the resident set with their
    /// page.
    spilled: Vec<&'s Tensor>,
    error: Mutex<Option<Error>>,
    failed: AtomicBool,
}

thread_local! {
    /// Whether this thread is running a piece of a paged stream.
    static IN_PIECE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks this thread as inside a piece, and fails the stream if the piece
/// panics (so that the other workers stop instead of waiting for a page
/// that will never be done; the panic then surfaces from the scope).
struct PieceGuard<'g, 's, 'a> {
    stream: &'g Stream<'s, 'a>,
}

impl<'g, 's, 'a> PieceGuard<'g, 's, 'a> {
    fn enter(stream: &'g Stream<'s, 'a>) -> Self {
        IN_PIECE.with(|f| f.set(true));
        PieceGuard { stream }
    }
}

impl Drop for PieceGuard<'_, '_, '_> {
    fn drop(&mut self) {
        IN_PIECE.with(|f| f.set(false));
        if std::thread::panicking() {
            self.stream.fail(Error::Call("a paged worker panicked".into()));
        }
    }
}

/// Output rows the read-ahead faults in.
struct SharedRows(Vec<(usize, usize)>);

/// The kernel's field pointers, read by every worker.
struct SharedFields(*const *const u8);
// SAFETY: the pointers borrow the caller's field buffers, which outlive the
// stream (its workers end before the call returns); they are only read.
unsafe impl Sync for SharedFields {}
unsafe impl Send for SharedFields {}

impl<'a> Stream<'_, 'a> {
    fn fail(&self, e: Error) {
        if let Ok(mut first) = self.error.lock() {
            first.get_or_insert(e);
        }
        self.failed.store(true, Ordering::Release);
    }

    /// Page `p`, read (and its work listed) now if no one has. `None` when
    /// it was released already: a read-ahead that was overtaken (the
    /// worker holding it was descheduled while the others went on). A
    /// read-ahead (`ahead`) also touches the page's output rows.
    fn ensure(&self, p: usize, ahead: bool) -> Result<Option<Arc<Ready<'a>>>> {
        let ps = &self.pages[p];
        let mut held = ps.state.lock().map_err(|_| Error::Call("internal: a paged worker panicked".into()))?;
        match &*held {
            Held::Ready(r) => return Ok(Some(r.clone())),
            Held::Released => return Ok(None),
            Held::Pending => {}
        }
        let slot = self.source.prepare(self.plan[p].clone()).map_err(Error::Call)?;
        let work = {
            let (_, offsets, start) = slot.args();
            self.runner.partials.work(offsets, start)
        };
        ps.left.store(work.len(), Ordering::Release);
        if ahead {
            self.touch_outputs(self.plan[p].clone());
        }
        let ready = Arc::new(Ready { slot, work });
        *held = Held::Ready(ready.clone());
        Ok(Some(ready))
    }

    /// Fault in the memory of these rows' outputs: one byte per OS page
    /// written back as it is (an output may hold zeros, or a reused
    /// mapping's old values that the kernel overwrites). A fresh output is
    /// faulted in by its
    /// first write, 2 MiB at a time ([`tiga_runtime::Tensor::zeros`]),
    /// and a fault inside a piece holds back the release of its page and so
    /// the other workers; in the read-ahead it holds back nothing.
    fn touch_outputs(&self, rows: std::ops::Range<usize>) {
        const OS_PAGE: usize = 4096;
        for &(base, row_bytes) in &self.touch.0 {
            let (start, end) = (base + rows.start * row_bytes, base + rows.end * row_bytes);
            let mut at = start.div_ceil(OS_PAGE) * OS_PAGE;
            while at < end {
                // SAFETY: `at` lies in these rows of a live output, which no
                // piece writes yet (the page's pieces are handed out after
                // it is read); other threads write other bytes only. The
                // byte keeps its value.
                unsafe { std::ptr::write_volatile(at as *mut u8, std::ptr::read_volatile(at as *const u8)) };
                at += OS_PAGE;
            }
        }
    }

    fn claim(&self) -> Claim<'a> {
        let Ok(mut c) = self.cursor.lock() else { return Claim::Done };
        loop {
            if self.failed.load(Ordering::Acquire) || c.page >= self.plan.len() {
                return Claim::Done;
            }
            // Every piece of this page was handed out (and the page may be
            // done and released since): go on to the next.
            if c.pieces.is_some_and(|n| c.piece >= n) {
                *c = Cursor { page: c.page + 1, ..Cursor::default() };
                continue;
            }
            if c.page > self.first_held.load(Ordering::Acquire) + 1 {
                return Claim::Wait;
            }
            if !c.read_ahead && self.depth > 0 {
                c.read_ahead = true;
                return Claim::ReadAhead(c.page);
            }
            let ready = match self.ensure(c.page, false) {
                Ok(Some(r)) => r,
                // Pages are released only after all their pieces ran.
                Ok(None) => {
                    self.fail(Error::Call(format!("internal: page {} was released before it ran", c.page)));
                    return Claim::Done;
                }
                Err(e) => {
                    self.fail(e);
                    return Claim::Done;
                }
            };
            c.pieces = Some(ready.work.len());
            if ready.work.is_empty() {
                self.finished(c.page);
                continue;
            }
            c.piece += 1;
            return Claim::Piece(c.page, ready, c.piece - 1);
        }
    }

    /// Take pieces until the stream is done. A no-op on a thread already
    /// inside a piece: a piece that calls into rayon (a split row's
    /// segments, a spare zeroed in parallel) may be handed another of this
    /// stream's worker jobs while it waits, and that worker, stacked on the
    /// unfinished piece, could wait for it forever (for the release it holds
    /// back, or its block's lock). The caller runs [`Stream::worker`] once
    /// more after the workers, in case every job was taken that way.
    fn worker(&self) {
        if IN_PIECE.with(|f| f.get()) {
            return;
        }
        loop {
            match self.claim() {
                Claim::Done => return,
                Claim::Wait => std::thread::yield_now(),
                Claim::ReadAhead(p) => {
                    for q in p + 1..(p + 1 + self.depth).min(self.plan.len()) {
                        if let Err(e) = self.ensure(q, true) {
                            self.fail(e);
                        }
                    }
                }
                Claim::Piece(p, ready, i) => {
                    let (mut raw, offsets, start) = ready.slot.args();
                    raw.fields = self.fields.0;
                    // SAFETY: the variant matches the kernel, dtype, widths
                    // and edge-id realization; the page holds every position
                    // of its rows (checked against the file's sizes when it
                    // was read) and stays read until its pieces are done;
                    // fields and outputs were checked against the file's
                    // sizes; pieces have disjoint rows.
                    let guard = PieceGuard::enter(self);
                    let ran = unsafe { self.runner.run(raw, offsets, start, &ready.work[i]) };
                    drop(guard);
                    drop(ready);
                    if let Err(e) = ran {
                        self.fail(e);
                    }
                    if self.pages[p].left.fetch_sub(1, Ordering::AcqRel) == 1 {
                        self.finished(p);
                    }
                }
            }
        }
    }

    /// Page `p`'s work is done: release the done pages, in order. A page
    /// whose neighbour's first touches map its tail again (a fault maps
    /// the 64 KiB around it) loses that tail with the neighbour's release,
    /// which reaches below its page ([`GfgFile::release_page`]).
    fn finished(&self, p: usize) {
        self.pages[p].done.store(true, Ordering::Release);
        let Ok(_order) = self.releasing.lock() else { return };
        let mut r = self.first_held.load(Ordering::Acquire);
        while r < self.pages.len() && self.pages[r].done.load(Ordering::Acquire) {
            self.release(r);
            r += 1;
            self.first_held.store(r, Ordering::Release);
        }
    }

    fn release(&self, p: usize) {
        for t in &self.spilled {
            t.release_rows(self.plan[p].clone());
        }
        let Ok(mut held) = self.pages[p].state.lock() else { return };
        if let Held::Ready(ready) = std::mem::replace(&mut *held, Held::Released) {
            // Every piece has dropped its handle by now; were one still
            // held, a mapped page is released all the same (its reversed
            // buffers would be freed rather than recycled).
            match Arc::try_unwrap(ready) {
                Ok(ready) => self.source.release(ready.slot),
                Err(shared) => {
                    if let Slot::Mapped(page) = &shared.slot {
                        self.source.file.release_page(page);
                    }
                }
            }
        }
    }
}

/// The file's own fields for the kernel's fields not in `inputs` (mapped
/// lazily when viewed).
pub(crate) fn file_fields(
    k: &tiga_compiler::ir::Kernel,
    file: &GfgFile,
    inputs: &Inputs<'_>,
) -> Vec<(Role, String, FieldHandle)> {
    k.fields
        .iter()
        .filter(|f| !inputs.has(f.role, &f.name))
        .filter_map(|f| {
            let role = match f.role {
                Role::Src => FieldRole::Src,
                Role::Dst => FieldRole::Dst,
                Role::Edge => FieldRole::Edge,
                Role::Param => return None,
            };
            file.field(role, &f.name).ok().map(|h| (f.role, f.name.clone(), h))
        })
        .collect()
}

/// `inputs` plus the views of these file fields.
pub(crate) fn with_file_fields<'a>(inputs: &Inputs<'a>, handles: &'a [(Role, String, FieldHandle)]) -> Result<Inputs<'a>> {
    let mut all = inputs.clone();
    for (r, n, h) in handles {
        all = all.with_role(*r, n, h.view().map_err(|e| Error::Call(e.to_string()))?);
    }
    Ok(all)
}

impl Kernel {
    /// Whether a paged run reads the graph's edge ids: only a kernel with
    /// edge fields or edge outputs looks at them (they are 8 bytes per
    /// edge, twice the column indices, so a page of the others is smaller).
    pub fn reads_edge_ids(&self) -> bool {
        let k = self.captured();
        k.fields.iter().any(|f| f.role == Role::Edge) || k.outputs.iter().any(|o| o.role == Role::Edge)
    }

    /// Run over a graph on disk, in pages. Fields come from `inputs`, or,
    /// when absent there, from the file's own fields of the same role and
    /// name.
    pub fn run_paged(&self, file: &GfgFile, inputs: &Inputs<'_>, opts: &PageOptions) -> Result<Outputs> {
        self.run_paged_side(file, Side::Forward, inputs, opts)
    }

    pub(crate) fn run_paged_side(&self, file: &GfgFile, side: Side, inputs: &Inputs<'_>, opts: &PageOptions) -> Result<Outputs> {
        let k = self.captured();
        let gfg_err = |e: tiga_runtime::storage::GfgError| Error::Call(e.to_string());
        // Fields not given are the file's own (a forward run's; adjoint
        // stages get theirs from the VJP).
        let handles = if side == Side::Forward { file_fields(k, file, inputs) } else { Vec::new() };
        let all = with_file_fields(inputs, &handles)?;
        let (ns, nd) = match side {
            Side::Transposed => (file.num_dst(), file.num_src()),
            _ => (file.num_src(), file.num_dst()),
        };
        let extents = Extents { num_src: ns, num_dst: nd, num_edges: file.num_edges() };
        let b = bind_extents(k, extents, &all)?;
        if side == Side::Transposed && !file.has_transpose() {
            return Err(Error::Call(format!(
                "{} has no transposed CSR, which a paged backward reads: rebuild it with `tigac convert --transpose` (or save with a transpose)",
                file.path().display()
            )));
        }
        // A kernel with no edge fields or outputs never looks at edge ids:
        // pages are read without them (8 bytes per edge, twice the columns).
        let uses_ids = self.reads_edge_ids();
        let has_ids = match side {
            Side::Forward => uses_ids && file.has_edge_ids(),
            Side::Transposed => uses_ids && file.t_edge_ids().map_err(gfg_err)?.is_some(),
            Side::RowReversed => true,
        };
        let entry: EntryFn;
        let jit_variant;
        match self.aot_variant(b.dtype, &b.widths) {
            Some(v) => entry = v.entry,
            None => {
                jit_variant = self.variant(b.dtype, &b.widths, has_ids)?.0;
                entry = jit_variant.entry();
            }
        }
        let shapes = output_shapes(k, &b.extents, &b.widths);
        // Row outputs (a row per page row) over the RAM budget together go
        // to a file mapping, released page by page as the rows are done (a
        // paged backward's source gradient over the budget).
        let is_row_output = |i: usize| k.outputs[i].role == Role::Dst && shapes[i].first() == Some(&nd);
        let row_output_bytes: u64 = (0..shapes.len())
            .filter(|&i| is_row_output(i))
            .map(|i| (shapes[i].iter().product::<usize>() * b.dtype.size()) as u64)
            .sum();
        let mut outs = match crate::offload::output_spill_dir(row_output_bytes) {
            None => output_buffers(self.loop_kernel(), b.dtype, &shapes)?,
            Some(dir) => {
                std::fs::create_dir_all(&dir).map_err(|e| Error::Call(format!("spill directory {}: {e}", dir.display())))?;
                (0..shapes.len())
                    .map(|i| match is_row_output(i) {
                        true => Tensor::zeros_in_file(b.dtype, shapes[i].clone(), &dir),
                        false => Tensor::zeros(b.dtype, shapes[i].clone()),
                    })
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| Error::Call(e.to_string()))?
            }
        };
        let field_ptrs = b.field_ptrs();
        // Plan pages. By rows, only the row count is needed; by bytes, the
        // mapped offsets are scanned once (no copy).
        let plan = if opts.page_bytes.is_some() {
            let offs: &[u64] = match side {
                Side::Transposed => file.t_offsets().map_err(gfg_err)?.unwrap_or(&[]),
                _ => file.offsets().map_err(gfg_err)?,
            };
            opts.plan(offs, 4 + if has_ids { 8 } else { 0 })
        } else {
            opts.plan_rows(nd)
        };
        let depth = opts.prefetch_depth();
        let source = Source { file, side, edge_ids: has_ids, pool: Mutex::new(Vec::new()) };
        let param_outs: Vec<usize> = k.outputs_of(Role::Param).iter().map(|(i, _)| *i).collect();
        let partials = ParamPartials::new(nd, &param_outs).with_split(splittable(k));
        // Destination outputs (a row per page row), for the read-ahead.
        let touch: Vec<(usize, usize)> = (0..shapes.len())
            .filter(|&i| is_row_output(i))
            .map(|i| (crate::call::data_ptr(&mut outs[i]) as usize, shapes[i][1..].iter().product::<usize>() * b.dtype.size()))
            .collect();
        let runner = RowRunner::new(entry, &shapes, b.dtype, &mut outs, partials);
        let stream = Stream {
            source: &source,
            plan: &plan,
            depth,
            pages: plan
                .iter()
                .map(|_| PageState { state: Mutex::new(Held::Pending), left: AtomicUsize::new(0), done: AtomicBool::new(false) })
                .collect(),
            cursor: Mutex::new(Cursor::default()),
            first_held: AtomicUsize::new(0),
            releasing: Mutex::new(()),
            runner: &runner,
            fields: SharedFields(field_ptrs.as_ptr()),
            touch: SharedRows(touch),
            spilled: outs.iter().filter(|t| t.is_file_backed()).collect(),
            error: Mutex::new(None),
            failed: AtomicBool::new(false),
        };
        let workers = rayon::current_num_threads().max(1);
        rayon::scope(|s| {
            for _ in 0..workers {
                s.spawn(|_| stream.worker());
            }
        });
        // Pieces left when every worker job was taken by a thread inside a
        // piece (see `Stream::worker`): this thread finishes them.
        stream.worker();
        if !stream.failed.load(Ordering::Acquire) && !stream.pages.iter().all(|p| p.done.load(Ordering::Acquire)) {
            stream.fail(Error::Call("internal: a paged run ended with pages not run".into()));
        }
        for p in 0..plan.len() {
            stream.release(p);
        }
        file.release_adjacency();
        for t in &stream.spilled {
            t.release_rows(0..nd);
        }
        if let Some(e) = stream.error.into_inner().unwrap_or_else(|p| p.into_inner()) {
            return Err(e);
        }
        runner.finish(&mut outs);
        // A field read from the file does not stay resident after the call.
        for (_, _, h) in &handles {
            h.release();
        }
        let names = k.outputs.iter().map(|o| o.name.clone());
        Ok(Outputs { items: names.zip(outs).collect() })
    }
}
