//! The row executor: a call's destination rows cut into pieces of work and
//! run by the compiled entry on rayon workers.
//!
//! Pieces are chunks balanced by edge count ([`super::row_chunks`], about
//! four per thread). Three things bend that rule, each so that the numbers
//! come out the same on every machine and for every page plan:
//!
//! - A kernel with parameter outputs (sums over every row) runs its rows in
//!   64 fixed blocks, each accumulating into its own partial sums, and the
//!   blocks are added in order at the end ([`ParamPartials`]). A block cut
//!   by a page boundary runs as two pieces, the second after the first.
//! - A row longer than [`SPLIT_EDGES`] edges (a power-law hub, or the
//!   transpose of one) of a kernel whose output is the plain sum of its
//!   messages is cut into segments of that many edges, run in parallel and
//!   added in segment order, so one huge row does not leave one worker
//!   doing it alone.
//! - Nothing waits by spinning: a piece waiting for the earlier piece of
//!   its parameter block sleeps on the block's condition variable.

use std::ops::Range;
use std::sync::{Condvar, Mutex};

use tiga_abi::{EntryFn, RawArgs};

use crate::{tensor::DType, tensor::Data, tensor::DataMut, tensor::Tensor, tensor::TensorError};

/// Why a call's rows could not run. Kernels themselves cannot fail; what
/// fails is memory for outputs and partial sums, the source of the rows
/// (a page of a file), or a worker.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("could not allocate a call's outputs or partial sums")]
    Alloc(#[from] TensorError),
    /// The storage under the rows failed (a `.gfg` file's page: its
    /// error, boxed, because storage lives in a crate above this one).
    #[error(transparent)]
    Storage(Box<dyn std::error::Error + Send + Sync>),
    /// Rows collected into a graph (for the reference interpreter) that do
    /// not form one.
    #[error(transparent)]
    Graph(#[from] crate::graph::GraphError),
    /// A page source other than a file failed.
    #[error("rows {rows:?}: {source}")]
    Source {
        rows: Range<usize>,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("rows {rows:?}: an earlier piece of their parameter block failed")]
    EarlierPieceFailed { rows: Range<usize> },
    /// The realization cannot give these rows (a file without its stored
    /// transpose, the transpose of a periodic stencil); the message says
    /// what would.
    #[error("{0}")]
    Unavailable(String),
    /// A page plan that does not cover the rows once, in order.
    #[error("a page plan must cover rows 0..{num_rows} once, in order: page {page:?} where rows from {expected_start} were due")]
    Plan { page: Range<usize>, expected_start: usize, num_rows: usize },
    #[error("a worker panicked while running rows")]
    WorkerPanicked,
    #[error("could not start a pool of {threads} threads: {message}")]
    Pool { threads: usize, message: String },
    /// A broken promise inside the executor (a bug, never the input's
    /// fault); the message says which.
    #[error("internal error in the row executor: {0}")]
    Internal(&'static str),
}

type Result<T, E = ExecError> = std::result::Result<T, E>;

/// How many row blocks a call with parameter outputs uses: fixed, so that
/// parameter sums are reduced in the same order on every machine.
const PARAM_CHUNKS: usize = 64;

/// A row with more edges than this is cut into segments of this many edges
/// (when the kernel allows it). Fixed, so results do not depend on the
/// machine.
pub const SPLIT_EDGES: u64 = 1 << 16;

/// `BlockPart::next_row` of a block whose earlier piece failed.
const FAILED_BLOCK: usize = usize::MAX;

/// One piece of a call's rows (absolute row numbers), in the order a paged
/// run claims them.
#[derive(Clone, Debug, PartialEq)]
pub enum Work {
    /// Whole rows.
    Rows(Range<usize>),
    /// Rows of one parameter block (its index), added to that block's sums.
    Block(usize, Range<usize>),
    /// One row longer than [`SPLIT_EDGES`], cut into edge segments.
    Split(usize),
}

/// One block's partial sums, and the row its next piece must start at.
struct BlockPart {
    next_row: usize,
    sums: Option<Vec<Tensor>>,
}

/// A block's state and the condition its later piece waits on.
struct Block {
    part: Mutex<BlockPart>,
    ready: Condvar,
}

/// Partial sums of parameter outputs: one set of buffers per fixed block of
/// rows. Blocks depend only on the number of rows (64 of them), each block
/// accumulates its rows in order, and the blocks are added in order at the
/// end, so a parameter gradient has the same bits however the rows were
/// visited: all at once in memory, or page by page from disk.
pub struct ParamPartials {
    block_rows: usize,
    outs: Vec<usize>,
    blocks: Vec<Block>,
    /// Whether rows longer than [`SPLIT_EDGES`] may be cut into segments.
    split: bool,
}

impl ParamPartials {
    /// Partials for a call over `num_rows` rows whose outputs `param_outs`
    /// (indices into the call's outputs) are parameter sums.
    pub fn new(num_rows: usize, param_outs: &[usize]) -> ParamPartials {
        let block_rows = num_rows.div_ceil(PARAM_CHUNKS).max(1);
        let blocks = num_rows.div_ceil(block_rows);
        let blocks = (0..blocks)
            .map(|b| Block { part: Mutex::new(BlockPart { next_row: b * block_rows, sums: None }), ready: Condvar::new() })
            .collect();
        ParamPartials { block_rows, outs: param_outs.to_vec(), blocks, split: false }
    }

    /// Allow cutting huge rows: only for a kernel whose output row is the
    /// plain sum of its messages (reducer `sum`, no `node` or an identity
    /// one, destination outputs only, nothing row-relative), whose segment
    /// outputs add up to the row's.
    pub fn with_split(mut self, split: bool) -> ParamPartials {
        self.split = split;
        self
    }

    /// The work for rows `base .. base + offsets.len() - 1` (`offsets` is
    /// their slice of row offsets), in row order: the parameter blocks they
    /// meet when the kernel has parameter outputs; otherwise chunks balanced
    /// by edge count (about four per thread), huge rows apart.
    pub fn work(&self, offsets: &[u64], base: usize) -> Vec<Work> {
        let n = offsets.len().saturating_sub(1);
        let end = base + n;
        if !self.outs.is_empty() {
            let br = self.block_rows;
            return (base / br..end.div_ceil(br))
                .map(|b| Work::Block(b, (b * br).max(base)..((b + 1) * br).min(end)))
                .filter(|w| matches!(w, Work::Block(_, r) if !r.is_empty()))
                .collect();
        }
        let mut work = Vec::new();
        for rows in super::row_chunks(offsets) {
            let mut s = rows.start;
            if self.split {
                for r in rows.clone() {
                    if offsets[r + 1] - offsets[r] > SPLIT_EDGES {
                        if s < r {
                            work.push(Work::Rows(base + s..base + r));
                        }
                        work.push(Work::Split(base + r));
                        s = r + 1;
                    }
                }
            }
            if s < rows.end {
                work.push(Work::Rows(base + s..base + rows.end));
            }
        }
        work
    }

    /// Add every block's partials into `outs`, in block order.
    fn finish(self, outs: &mut [Tensor]) {
        for block in self.blocks {
            let part = block.part.into_inner().unwrap_or_else(|p| p.into_inner());
            for (t, &o) in part.sums.iter().flatten().zip(&self.outs) {
                add_into(&mut outs[o], t);
            }
        }
    }
}

/// `acc += part`, element by element (same dtype and length: both come
/// from the same output shape).
fn add_into(acc: &mut Tensor, part: &Tensor) {
    match (acc.data_mut(), part.data()) {
        (DataMut::F32(a), Data::F32(p)) => a.iter_mut().zip(p).for_each(|(x, y)| *x += y),
        (DataMut::F64(a), Data::F64(p)) => a.iter_mut().zip(p).for_each(|(x, y)| *x += y),
        // Partials are allocated in the outputs' dtype and shape
        // (`RowRunner::run`).
        _ => unreachable!("parameter partials share their output's dtype"),
    }
}

/// An output's base pointer, for the argument block.
pub fn data_ptr(t: &mut Tensor) -> *mut u8 {
    t.data_mut().as_mut_ptr()
}

struct SharedPtrs(Vec<*mut u8>);
// SAFETY: only copied per piece of work; each piece swaps in its own
// parameter buffers and writes destination/edge rows no other piece writes.
unsafe impl Sync for SharedPtrs {}
unsafe impl Send for SharedPtrs {}

/// Raw pointers handed to compiled code. Rows are disjoint across pieces,
/// so concurrent calls write disjoint output rows.
struct SharedArgs(RawArgs);
// SAFETY: the pointers stay valid for the whole parallel loop (they borrow
// buffers owned by the caller's frame), inputs are only read, and each piece
// writes only its own output rows.
unsafe impl Sync for SharedArgs {}
unsafe impl Send for SharedArgs {}

/// What runs pieces of work: the compiled entry, the output buffers and the
/// parameter partials. Shared by the workers of a call.
pub struct RowRunner<'a> {
    entry: EntryFn,
    shapes: std::borrow::Cow<'a, [Vec<usize>]>,
    dtype: DType,
    out_ptrs: SharedPtrs,
    partials: ParamPartials,
}

impl<'a> RowRunner<'a> {
    /// A runner writing `outs`, which must outlive every [`RowRunner::run`]
    /// and not be touched otherwise until the runner is finished (moving
    /// the tensors is fine: their elements stay where they are). `shapes`:
    /// the outputs' shapes, borrowed, or owned by a runner kept beside its
    /// outputs.
    pub fn new(
        entry: EntryFn,
        shapes: impl Into<std::borrow::Cow<'a, [Vec<usize>]>>,
        dtype: DType,
        outs: &mut [Tensor],
        partials: ParamPartials,
    ) -> RowRunner<'a> {
        RowRunner { entry, shapes: shapes.into(), dtype, out_ptrs: SharedPtrs(outs.iter_mut().map(data_ptr).collect()), partials }
    }

    /// The pieces of work for rows `base ..` ([`ParamPartials::work`]).
    pub fn work(&self, offsets: &[u64], base: usize) -> Vec<Work> {
        self.partials.work(offsets, base)
    }

    /// Run one piece of work. `offsets` is the slice of row offsets for the
    /// rows `base ..` that hold the piece's rows.
    ///
    /// # Safety
    /// `raw` (except `outputs`, set here) must hold pointers valid for every
    /// row and edge position of the piece's rows, as `entry`'s variant
    /// expects; pieces running at the same time must not share rows; the
    /// outputs given to [`RowRunner::new`] must still be alive.
    pub unsafe fn run(&self, mut raw: RawArgs, offsets: &[u64], base: usize, work: &Work) -> Result<()> {
        match work {
            Work::Rows(rows) => {
                raw.outputs = self.out_ptrs.0.as_ptr();
                // SAFETY: the caller's contract; these rows are this piece's.
                unsafe { (self.entry)(&raw, rows.start as u64, rows.end as u64) };
                Ok(())
            }
            Work::Split(r) => {
                let (first, last) = (offsets[r - base], offsets[r - base + 1]);
                // SAFETY: the caller's contract, for the row's edge segments.
                unsafe { self.split_row(raw, first, last, *r) }
            }
            Work::Block(b, rows) => {
                let block = self.partials.blocks.get(*b).ok_or(ExecError::Internal("a parameter block out of range"))?;
                // The block's earlier piece runs first (it was claimed
                // first, and is running or done): sleep until it is.
                let mut part = block.part.lock().map_err(|_| ExecError::WorkerPanicked)?;
                while part.next_row != rows.start {
                    if part.next_row == FAILED_BLOCK {
                        return Err(ExecError::EarlierPieceFailed { rows: rows.clone() });
                    }
                    part = block.ready.wait(part).map_err(|_| ExecError::WorkerPanicked)?;
                }
                if part.sums.is_none() {
                    let sums = self
                        .partials
                        .outs
                        .iter()
                        .map(|&o| Tensor::zeros(self.dtype, self.shapes[o].clone()))
                        .collect::<std::result::Result<Vec<_>, _>>();
                    match sums {
                        Ok(s) => part.sums = Some(s),
                        Err(e) => {
                            // The block's later pieces would wait forever.
                            part.next_row = FAILED_BLOCK;
                            block.ready.notify_all();
                            return Err(e.into());
                        }
                    }
                }
                let mut ptrs = self.out_ptrs.0.clone();
                for (t, &o) in part.sums.iter_mut().flatten().zip(&self.partials.outs) {
                    ptrs[o] = data_ptr(t);
                }
                raw.outputs = ptrs.as_ptr();
                // SAFETY: the caller's contract; this block's parameter
                // outputs point at buffers only this piece writes now (the
                // lock is held), its rows are its own.
                unsafe { (self.entry)(&raw, rows.start as u64, rows.end as u64) };
                part.next_row = rows.end;
                block.ready.notify_all();
                Ok(())
            }
        }
    }

    /// One huge row `i`, in segments of [`SPLIT_EDGES`] edges run in
    /// parallel: each sees a one-row CSR (its `offsets[i], offsets[i+1]`
    /// are the segment's bounds) and writes row `i` of private outputs; the
    /// segments' rows are then added in order.
    ///
    /// # Safety
    /// As [`RowRunner::run`].
    unsafe fn split_row(&self, raw: RawArgs, first: u64, last: u64, i: usize) -> Result<()> {
        use rayon::prelude::*;
        let (entry, dtype) = (self.entry, self.dtype);
        let widths: Vec<usize> = self.shapes.iter().map(|s| s.iter().skip(1).product::<usize>()).collect();
        let segs: Vec<(u64, u64)> =
            (first..last).step_by(SPLIT_EDGES as usize).map(|a| (a, (a + SPLIT_EDGES).min(last))).collect();
        let shared = SharedArgs(raw);
        let shared = &shared;
        let parts: Vec<Result<Vec<Tensor>>> = segs
            .par_iter()
            .map(|&(a, b)| -> Result<Vec<Tensor>> {
                let mut mine: Vec<Tensor> =
                    widths.iter().map(|&w| Tensor::zeros(dtype, vec![w.max(1)])).collect::<std::result::Result<_, _>>()?;
                let bounds = [a, b];
                // Row i of these arrays is element 0 of the segment's buffers.
                let ptrs: Vec<*mut u8> =
                    mine.iter_mut().zip(&widths).map(|(t, &w)| data_ptr(t).wrapping_sub(i * w * dtype.size())).collect();
                let mut args = shared.0;
                args.offsets = bounds.as_ptr().wrapping_sub(i);
                args.outputs = ptrs.as_ptr();
                // SAFETY: the kernel reads offsets[i], offsets[i+1] (the
                // bounds), edges a..b of the real CSR and row i of the real
                // fields, and writes row i of the outputs (the private
                // buffers).
                unsafe { entry(&args, i as u64, i as u64 + 1) };
                Ok(mine)
            })
            .collect();
        let parts = parts.into_iter().collect::<Result<Vec<_>>>()?;
        for (o, (&out, &w)) in self.out_ptrs.0.iter().zip(&widths).enumerate() {
            // Row i starts from zero here, not from what the output held: an
            // output the kernel overwrites comes without a zero fill.
            // SAFETY: row i of each output is this piece's alone, and the
            // output holds it (the caller's contract).
            match dtype {
                DType::F32 => {
                    let row = unsafe { std::slice::from_raw_parts_mut((out as *mut f32).add(i * w), w) };
                    sum_into(row, parts.iter().filter_map(|p| p[o].as_f32()));
                }
                DType::F64 => {
                    let row = unsafe { std::slice::from_raw_parts_mut((out as *mut f64).add(i * w), w) };
                    sum_into(row, parts.iter().filter_map(|p| p[o].as_f64()));
                }
            }
        }
        Ok(())
    }

    /// Add the parameter partials into the outputs.
    pub fn finish(self, outs: &mut [Tensor]) {
        self.partials.finish(outs);
    }
}

/// `row = Σ parts`, in order, from zero.
fn sum_into<'p, T: Copy + Default + std::ops::AddAssign + 'p>(row: &mut [T], parts: impl Iterator<Item = &'p [T]>) {
    row.fill(T::default());
    for p in parts {
        row.iter_mut().zip(p).for_each(|(x, y)| *x += *y);
    }
}

/// Run every piece of [`RowRunner::work`] for the rows
/// `base .. base + offsets.len() - 1` (absolute row numbers; `offsets` is
/// the slice of row offsets for them) in parallel, on a pool of `threads`
/// workers ([`super::in_pool`]).
///
/// # Safety
/// As [`RowRunner::run`], for every row.
pub unsafe fn execute_rows(
    runner: &RowRunner<'_>,
    raw: RawArgs,
    offsets: &[u64],
    base: usize,
    threads: Option<usize>,
) -> Result<()> {
    use rayon::prelude::*;
    if threads == Some(1) {
        // One thread: the caller's own. (Ranks run as threads would
        // otherwise take turns on the one shared single-thread pool.)
        for w in runner.work(offsets, base) {
            // SAFETY: the caller's contract.
            unsafe { runner.run(raw, offsets, base, &w)? };
        }
        return Ok(());
    }
    let shared = SharedArgs(raw);
    let shared = &shared;
    super::in_pool(threads, || {
        runner
            .work(offsets, base)
            .into_par_iter()
            // SAFETY: the caller's contract; pieces have disjoint rows.
            .map(|w| unsafe { runner.run(shared.0, offsets, base, &w) })
            .collect::<Result<Vec<()>>>()
    })??;
    Ok(())
}

/// Run the rows of `runs` (ranges of rows, in order, of the CSR whose
/// row offsets are `offsets`), cut into pieces of about equal edge counts
/// (about four per thread), each piece running its runs in order: the rows
/// of a sharded rank that read no ghost, while the ghosts travel. For a
/// runner without parameter outputs (whose blocks must be visited in row
/// order); huge rows are not split.
///
/// # Safety
/// As [`RowRunner::run`], for every row of `runs`.
pub unsafe fn execute_row_runs(
    runner: &RowRunner<'_>,
    raw: RawArgs,
    offsets: &[u64],
    runs: &[Range<usize>],
    threads: Option<usize>,
) -> Result<()> {
    use rayon::prelude::*;
    if !runner.partials.outs.is_empty() {
        return Err(ExecError::Internal("rows in runs for a kernel with parameter outputs"));
    }
    let edges = |r: &Range<usize>| (offsets[r.end] - offsets[r.start]) as usize + r.len();
    let total: usize = runs.iter().map(edges).sum();
    let pieces = if threads == Some(1) { 1 } else { 4 * threads.unwrap_or_else(rayon::current_num_threads).max(1) };
    let target = total.div_ceil(pieces).max(1);
    let mut cut: Vec<Vec<Range<usize>>> = vec![Vec::new()];
    let mut filled = 0;
    for r in runs {
        if filled >= target {
            cut.push(Vec::new());
            filled = 0;
        }
        filled += edges(r);
        if let Some(c) = cut.last_mut() {
            c.push(r.clone());
        }
    }
    let shared = SharedArgs(raw);
    let shared = &shared;
    let piece = |p: &Vec<Range<usize>>| -> Result<()> {
        for r in p {
            // SAFETY: the caller's contract; pieces hold disjoint rows.
            unsafe { runner.run(shared.0, offsets, 0, &Work::Rows(r.clone()))? };
        }
        Ok(())
    };
    if threads == Some(1) {
        return cut.iter().try_for_each(piece);
    }
    super::in_pool(threads, || cut.par_iter().map(piece).collect::<Result<Vec<()>>>())??;
    Ok(())
}

/// Run rows `0..rows` of a generated realization (no CSR: `raw` points at
/// no adjacency, and the variant computes each row's neighbours from its
/// index) in equal row ranges, about four per thread: generated rows are
/// uniform, so equal ranges balance.
///
/// # Safety
/// `raw` must hold every field and output pointer `entry`'s variant
/// expects, valid for `rows` rows; the outputs are not touched otherwise
/// until this returns. `threads` as [`execute_rows`].
pub unsafe fn execute_generated(entry: EntryFn, raw: RawArgs, rows: usize, threads: Option<usize>) -> Result<()> {
    use rayon::prelude::*;
    let args = SharedArgs(raw);
    let args = &args;
    super::in_pool(threads, || {
        let parts = (rayon::current_num_threads() * 4).max(1);
        let step = rows.div_ceil(parts).max(1);
        (0..rows).step_by(step).collect::<Vec<_>>().par_iter().for_each(|&start| {
            let end = (start + step).min(rows);
            // SAFETY: the caller's contract; ranges are disjoint.
            unsafe { entry(&args.0, start as u64, end as u64) };
        });
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks cover the rows once, in order, whatever the page boundaries.
    #[test]
    fn blocks_do_not_depend_on_pages() {
        let offsets: Vec<u64> = (0..=1000u64).collect();
        let p = ParamPartials::new(1000, &[0]);
        let whole = p.work(&offsets, 0);
        let mut paged = p.work(&offsets[..=300], 0);
        paged.extend(p.work(&offsets[300..], 300));
        let rows = |w: &[Work]| -> Vec<usize> {
            w.iter()
                .flat_map(|x| match x {
                    Work::Block(_, r) => r.clone(),
                    _ => 0..0,
                })
                .collect()
        };
        assert_eq!(rows(&whole), (0..1000).collect::<Vec<_>>());
        assert_eq!(rows(&paged), (0..1000).collect::<Vec<_>>());
        // 1000 rows in blocks of 16: the page boundary at 300 cuts block 18.
        assert_eq!(whole.len(), 63);
        assert_eq!(paged.len(), 64);
        assert!(paged.contains(&Work::Block(18, 288..300)) && paged.contains(&Work::Block(18, 300..304)));
    }

    /// A huge row of a splittable kernel is a piece of its own.
    #[test]
    fn huge_rows_are_split_apart() {
        let big = SPLIT_EDGES + 5;
        let offsets = vec![0, 1, 1 + big, 2 + big];
        let w = ParamPartials::new(3, &[]).with_split(true).work(&offsets, 10);
        assert!(w.contains(&Work::Split(11)), "{w:?}");
        let w = ParamPartials::new(3, &[]).work(&offsets, 10);
        assert!(!w.iter().any(|x| matches!(x, Work::Split(_))), "{w:?}");
    }
}
