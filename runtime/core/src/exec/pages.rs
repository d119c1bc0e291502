//! The page stream: a call's rows taken from a [`PageSource`] one page of
//! rows at a time, run by every pool thread from one stream of pieces.
//!
//! Every pool thread takes pieces of rows from one stream, in row order,
//! with no barrier between pages; the read-ahead of the next `prefetch`
//! pages is the first piece of each page. A barrier per page (every thread
//! joining before the next page starts) put threads to sleep and woke them
//! again 200 times per five 4M-row steps in 100k-row pages, a fifth of a
//! paged run's extra time. Pieces are handed out at most one page past the
//! first page not yet released, which bounds the pages held at once (about
//! two); a worker that gets ahead of that sleeps until a page is released.
//!
//! The kernel sees absolute CSR positions: its `offsets`, `cols` and
//! `edge_ids` pointers are offset so that row `i` and position `p` of the
//! page land on the page's data.
//!
//! Outputs are bit-identical to a run over the whole graph at once for any
//! page plan: every row is computed by the same code over the same edges in
//! the same order, and parameter outputs are grouped in fixed row blocks
//! that do not depend on the plan ([`super::ParamPartials`]).

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use tiga_abi::RawArgs;

use super::rows::{ExecError, RowRunner, Work};
use crate::tensor::Tensor;

/// One page of rows as the kernel reads it: rows `rows`, their row offsets
/// (`rows.len() + 1` absolute CSR positions), and the columns (and user
/// edge ids, when the call reads them) of positions `offsets[0] ..
/// offsets[rows.len()]`.
#[derive(Clone, Copy, Debug)]
pub struct PageView<'p> {
    pub first_row: usize,
    pub offsets: &'p [u64],
    pub cols: &'p [u32],
    pub edge_ids: Option<&'p [u64]>,
}

impl PageView<'_> {
    /// The adjacency pointers of the argument block (fields and outputs are
    /// the caller's), offset so that absolute rows and positions land on
    /// this page.
    pub fn args(&self) -> RawArgs {
        let first = self.offsets.first().copied().unwrap_or(0) as usize;
        RawArgs {
            offsets: self.offsets.as_ptr().wrapping_sub(self.first_row),
            cols: self.cols.as_ptr().wrapping_sub(first),
            edge_ids: self.edge_ids.map(|e| e.as_ptr().wrapping_sub(first)).unwrap_or(std::ptr::null()),
            ..RawArgs::empty()
        }
    }
}

/// A page held for as long as its rows run; dropping it releases it (a
/// file's page leaves the resident set, a copied page's buffers go back to
/// a pool).
pub trait PageData: Send + Sync {
    fn view(&self) -> PageView<'_>;
}

/// Where a paged run's pages come from.
///
/// # Safety
/// The compiled kernel reads what a page holds without bounds checks, so an
/// implementation promises, for every page it returns for rows `r`:
/// `first_row == r.start`; `offsets` has `r.len() + 1` non-decreasing
/// entries; `cols` holds positions `offsets[0]..offsets[r.len()]`, each a
/// source below the realization's source count; `edge_ids`, when present,
/// the same positions, each a user edge below its edge count. A `.gfg`
/// page is checked against the file's counts on its first visit; a page
/// sliced out of a [`crate::graph::Graph`] holds them by construction.
pub unsafe trait PageSource: Sync {
    fn page(&self, rows: Range<usize>) -> Result<Box<dyn PageData + '_>, ExecError>;
}

/// A page of the stream: read by whoever needs it first (the read-ahead,
/// or the first worker to claim its rows), released (in page order) once
/// its pieces are done.
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
    page: Box<dyn PageData + 'a>,
    work: Vec<Work>,
}

/// What a worker takes next: read pages ahead, or run a piece of a page.
enum Claim<'a> {
    ReadAhead(usize),
    Piece(usize, Arc<Ready<'a>>, usize),
    /// Pages ahead are held back until an earlier one is released; the
    /// release count seen before looking.
    Wait(u64),
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

/// The call's rows as one stream of pieces (see the module doc).
struct Stream<'s, 'a> {
    source: &'a dyn PageSource,
    plan: &'s [Range<usize>],
    depth: usize,
    pages: Vec<PageState<'a>>,
    cursor: Mutex<Cursor>,
    /// Pages before this one are released. Pieces are handed out only up
    /// to the page after it.
    first_held: AtomicUsize,
    /// Taken while releasing, so that pages are released in order.
    releasing: Mutex<()>,
    /// How many times `first_held` moved or the stream failed (read
    /// without a lock by every claim), and the lock and condition a
    /// held-back worker sleeps on until it changes.
    progress: AtomicU64,
    progress_lock: Mutex<()>,
    progressed: Condvar,
    runner: &'s RowRunner<'s>,
    fields: SharedFields,
    /// Outputs with a row per page row: (address, bytes per row).
    touch: &'s [(usize, usize)],
    /// File-backed outputs, whose rows leave the resident set with their
    /// page.
    spilled: &'s [&'s Tensor],
    error: Mutex<Option<ExecError>>,
    failed: AtomicBool,
    /// The schedule's count of finished rows, if it keeps one.
    progress_report: Option<&'s crate::schedule::Progress>,
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
            self.stream.fail(ExecError::WorkerPanicked);
        }
    }
}

/// The kernel's field pointers, read by every worker.
struct SharedFields(*const *const u8);
// SAFETY: the pointers borrow the caller's field buffers, which outlive the
// stream (its workers end before `run_pages` returns); they are only read.
unsafe impl Sync for SharedFields {}
unsafe impl Send for SharedFields {}

impl<'a> Stream<'_, 'a> {
    fn fail(&self, e: ExecError) {
        if let Ok(mut first) = self.error.lock() {
            first.get_or_insert(e);
        }
        self.failed.store(true, Ordering::Release);
        self.progress();
    }

    /// Wake the held-back workers: a page was released, or the stream
    /// failed.
    fn progress(&self) {
        // Counted under the lock, so that a worker between its look at the
        // count and its sleep cannot miss the wake-up.
        let _held = self.progress_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.progress.fetch_add(1, Ordering::AcqRel);
        self.progressed.notify_all();
    }

    fn progress_seen(&self) -> u64 {
        self.progress.load(Ordering::Acquire)
    }

    /// Sleep until the progress count moves past `seen`.
    fn wait_for_progress(&self, seen: u64) {
        let mut held = self.progress_lock.lock().unwrap_or_else(|p| p.into_inner());
        while self.progress.load(Ordering::Acquire) == seen {
            held = self.progressed.wait(held).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Page `p`, read (and its work listed) now if no one has. `None` when
    /// it was released already: a read-ahead that was overtaken (the
    /// worker holding it was descheduled while the others went on). A
    /// read-ahead (`ahead`) also touches the page's output rows.
    fn ensure(&self, p: usize, ahead: bool) -> Result<Option<Arc<Ready<'a>>>, ExecError> {
        let ps = &self.pages[p];
        let mut held = ps.state.lock().map_err(|_| ExecError::WorkerPanicked)?;
        match &*held {
            Held::Ready(r) => return Ok(Some(r.clone())),
            Held::Released => return Ok(None),
            Held::Pending => {}
        }
        let page = self.source.page(self.plan[p].clone())?;
        let work = {
            let v = page.view();
            if v.first_row != self.plan[p].start || v.offsets.len() != self.plan[p].len() + 1 {
                return Err(ExecError::Internal("a page source gave rows other than the page's"));
            }
            self.runner.work(v.offsets, v.first_row)
        };
        ps.left.store(work.len(), Ordering::Release);
        if ahead {
            self.touch_outputs(self.plan[p].clone());
        }
        let ready = Arc::new(Ready { page, work });
        *held = Held::Ready(ready.clone());
        Ok(Some(ready))
    }

    /// Fault in the memory of these rows' outputs: one byte per OS page
    /// written back as it is (an output may hold zeros, or a reused
    /// mapping's old values that the kernel overwrites). A fresh output is
    /// faulted in by its first write, and a fault inside a piece holds back
    /// the release of its page and so the other workers; in the read-ahead
    /// it holds back nothing.
    fn touch_outputs(&self, rows: Range<usize>) {
        let os_page = crate::tensor::os_page_size();
        for &(base, row_bytes) in self.touch {
            let (start, end) = (base + rows.start * row_bytes, base + rows.end * row_bytes);
            let mut at = start.div_ceil(os_page) * os_page;
            while at < end {
                // SAFETY: `at` lies in these rows of a live output, which no
                // piece writes yet (the page's pieces are handed out after
                // it is read); other threads write other bytes only. The
                // byte keeps its value.
                unsafe { std::ptr::write_volatile(at as *mut u8, std::ptr::read_volatile(at as *const u8)) };
                at += os_page;
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
            // Read before looking, so that a release between the look and
            // the sleep is not missed.
            let seen = self.progress_seen();
            if c.page > self.first_held.load(Ordering::Acquire) + 1 {
                return Claim::Wait(seen);
            }
            if !c.read_ahead && self.depth > 0 {
                c.read_ahead = true;
                return Claim::ReadAhead(c.page);
            }
            let ready = match self.ensure(c.page, false) {
                Ok(Some(r)) => r,
                // Pages are released only after all their pieces ran.
                Ok(None) => {
                    self.fail(ExecError::Internal("a page was released before it ran"));
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
                Claim::Wait(seen) => self.wait_for_progress(seen),
                Claim::ReadAhead(p) => {
                    for q in p + 1..(p + 1 + self.depth).min(self.plan.len()) {
                        if let Err(e) = self.ensure(q, true) {
                            self.fail(e);
                        }
                    }
                }
                Claim::Piece(p, ready, i) => {
                    let view = ready.page.view();
                    let mut raw = view.args();
                    raw.fields = self.fields.0;
                    // SAFETY: the variant matches the kernel, dtype, widths
                    // and edge-id realization; the page holds every position
                    // of its rows (its source checked it) and stays held
                    // until its pieces are done; fields and outputs were
                    // checked against the graph's sizes; pieces have
                    // disjoint rows.
                    let guard = PieceGuard::enter(self);
                    let ran = unsafe { self.runner.run(raw, view.offsets, view.first_row, &ready.work[i]) };
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

    /// Page `p`'s work is done: release the done pages, in order.
    fn finished(&self, p: usize) {
        self.pages[p].done.store(true, Ordering::Release);
        // Rows of a failed stream are not done: the count stops there.
        if let Some(progress) = self.progress_report.filter(|_| !self.failed.load(Ordering::Acquire)) {
            progress.advance(self.plan[p].len() as u64);
        }
        let Ok(_order) = self.releasing.lock() else { return };
        let mut r = self.first_held.load(Ordering::Acquire);
        let moved = r;
        while r < self.pages.len() && self.pages[r].done.load(Ordering::Acquire) {
            self.release(r);
            r += 1;
            self.first_held.store(r, Ordering::Release);
        }
        if r != moved {
            self.progress();
        }
    }

    /// Drop the stream's hold on page `p` (the page itself goes when its
    /// last piece has dropped it too) and its rows of file-backed outputs.
    fn release(&self, p: usize) {
        for t in self.spilled {
            t.release_rows(self.plan[p].clone());
        }
        let Ok(mut held) = self.pages[p].state.lock() else { return };
        *held = Held::Released;
    }
}

/// Run `runner` over the rows of `plan` (row ranges covering the call's
/// rows once, in order), each page taken from `source`, with the
/// schedule's read-ahead and threads. `fields` is the kernel's field table;
/// `touch` lists the outputs with a row per row (address, bytes per row),
/// faulted in by the read-ahead; `spilled` the file-backed outputs, whose
/// rows are dropped from the resident set with their page.
///
/// # Safety
/// `fields` must point at the kernel's field pointers, valid and sized for
/// the graph the pages belong to, until this returns; the runner's outputs
/// must be alive and `touch` must name memory inside them.
pub unsafe fn run_pages(
    source: &dyn PageSource,
    plan: &[Range<usize>],
    schedule: &crate::schedule::Schedule,
    runner: &RowRunner<'_>,
    fields: *const *const u8,
    touch: &[(usize, usize)],
    spilled: &[&Tensor],
) -> Result<(), ExecError> {
    let stream = Stream {
        source,
        plan,
        depth: schedule.prefetch_depth(),
        pages: plan
            .iter()
            .map(|_| PageState { state: Mutex::new(Held::Pending), left: AtomicUsize::new(0), done: AtomicBool::new(false) })
            .collect(),
        cursor: Mutex::new(Cursor::default()),
        first_held: AtomicUsize::new(0),
        releasing: Mutex::new(()),
        progress: AtomicU64::new(0),
        progress_lock: Mutex::new(()),
        progressed: Condvar::new(),
        runner,
        fields: SharedFields(fields),
        touch,
        spilled,
        error: Mutex::new(None),
        failed: AtomicBool::new(false),
        progress_report: schedule.progress.as_ref(),
    };
    if let Some(p) = &schedule.progress {
        p.announce(plan.iter().map(|r| r.len() as u64).sum());
    }
    super::in_pool(schedule.threads, || {
        let workers = rayon::current_num_threads().max(1);
        rayon::scope(|s| {
            for _ in 0..workers {
                s.spawn(|_| stream.worker());
            }
        });
        // Pieces left when every worker job was taken by a thread inside a
        // piece (see `Stream::worker`): this thread finishes them.
        stream.worker();
    })?;
    if !stream.failed.load(Ordering::Acquire) && !stream.pages.iter().all(|p| p.done.load(Ordering::Acquire)) {
        stream.fail(ExecError::Internal("a paged run ended with pages not run"));
    }
    for p in 0..plan.len() {
        stream.release(p);
    }
    match stream.error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Check that `plan` covers rows `0..num_rows` once, in order, with no
/// empty page: a plan from a realization that skipped or repeated rows
/// would leave outputs unwritten or written twice.
pub fn check_plan(plan: &[Range<usize>], num_rows: usize) -> Result<(), ExecError> {
    let mut next = 0;
    for r in plan {
        if r.start != next || r.end <= r.start {
            return Err(ExecError::Plan { page: r.clone(), expected_start: next, num_rows });
        }
        next = r.end;
    }
    if next != num_rows {
        return Err(ExecError::Plan { page: next..next, expected_start: next, num_rows });
    }
    Ok(())
}
