//! Paged execution: a kernel over a graph that stays on disk (`.gfg`),
//! streamed through the unchanged compiled kernel one page of destination
//! rows at a time.
//!
//! Nothing is read whole. Pages are viewed in place in the file's mapping
//! ([`GfgFile::page`]: read ahead with `WillNeed` unless already in memory,
//! checked against the counts on first visit) and unmapped again once the
//! kernel has passed them ([`GfgFile::release_page`]), so the resident set
//! holds about two pages of adjacency, not the pages passed. A pool task
//! reads page i + `prefetch` while page i's rows run. Copying pages into
//! buffers with positioned reads was measured first: on a warm page cache
//! the copy cost as much as the kernel. Rows with reversed edges, which the
//! file does not store, are copied out of the mapped page into recycled
//! buffers.
//! The kernel sees absolute CSR positions: its `cols`/`edge_ids` pointers
//! are offset so that position `p` of the page lands on the page's data.
//!
//! Outputs are bit-identical to the in-memory run for any page size: every
//! row is computed by the same code over the same edges in the same order,
//! and parameter outputs (sums over all rows) are grouped in fixed row blocks
//! that do not depend on the page plan (`call::ParamPartials`). The same runner walks the file's stored transpose (a paged
//! backward's source stage) and rows in reverse edge order (a monoid's
//! suffix stage).


use tiga_compiler::back::abi::EntryFn;
use tiga_compiler::back::cranelift::RawArgs;
use tiga_compiler::bind::{output_shapes, Extents};
use tiga_compiler::ir::Role;
use tiga_runtime::storage::{FieldHandle, FieldRole, GfgFile, Page};

use crate::call::{bind_extents, execute_rows, splittable, zeroed_outputs, Inputs, Outputs, ParamPartials};
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
/// copied out of it. No copy otherwise: on a warm page cache a copy per page
/// cost as much as the kernel itself.
struct Source<'a> {
    file: &'a GfgFile,
    side: Side,
}

/// One page in flight: mapped, or copied with its rows reversed.
#[derive(Default)]
struct Slot<'a> {
    mapped: Option<Page<'a>>,
    reversed: ReversedPage,
}

impl<'a> Source<'a> {
    fn prepare(&self, rows: std::ops::Range<usize>, slot: &mut Slot<'a>) -> std::result::Result<(), String> {
        let page = match self.side {
            Side::Transposed => self.file.transposed_page(rows),
            _ => self.file.page(rows),
        }
        .map_err(|e| e.to_string())?;
        if self.side == Side::RowReversed {
            slot.reversed.fill(&page);
            self.file.release_page(&page);
        } else {
            slot.mapped = Some(page);
        }
        Ok(())
    }

    fn release(&self, page: Option<Page<'a>>) {
        if let Some(page) = page {
            self.file.release_page(&page);
        }
    }
}

impl Slot<'_> {
    /// The kernel's adjacency pointers (absolute positions land on the page;
    /// fields and outputs are filled in by the caller), the page's offsets
    /// and its first row.
    fn args(&self) -> (RawArgs, &[u64], usize) {
        use std::ptr::null;
        match &self.mapped {
            Some(p) => {
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
            None => {
                let p = &self.reversed;
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

/// Moves the paged pipeline (which holds the kernel's raw field pointers)
/// onto a pool thread.
struct AssertSend<F>(F);
// SAFETY: the pointers borrow buffers owned by the calling frame, which
// waits for the pipeline to finish (`rayon::scope` returns only then).
unsafe impl<F> Send for AssertSend<F> {}
impl<F: FnOnce() -> R, R> AssertSend<F> {
    fn call(self) -> R {
        (self.0)()
    }
}

/// The file's own fields for the kernel's fields not in `inputs` (mapped
/// lazily when viewed).
pub(crate) fn file_fields(k: &tiga_compiler::ir::Kernel, file: &GfgFile, inputs: &Inputs<'_>) -> Vec<(Role, String, FieldHandle)> {
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
        let has_ids = match side {
            Side::Forward => file.has_edge_ids(),
            Side::Transposed => file.t_edge_ids().map_err(gfg_err)?.is_some(),
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
        let mut outs = zeroed_outputs(b.dtype, &shapes)?;
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
        let source = Source { file, side };
        let param_outs: Vec<usize> = k.outputs_of(Role::Param).iter().map(|(i, _)| *i).collect();
        let mut partials = ParamPartials::new(nd, &param_outs).with_split(splittable(k));
        let run_page = |slot: &Slot<'_>, partials: &mut ParamPartials, outs: &mut [tiga_runtime::Tensor]| -> Result<()> {
            let (mut raw, sub, start) = slot.args();
            raw.fields = field_ptrs.as_ptr();
            // SAFETY: the variant matches the kernel, dtype, widths and
            // edge-id realization; the page holds every position of its rows
            // (checked against the file's sizes when it was read); fields and
            // outputs were checked against the file's sizes.
            unsafe { execute_rows(entry, raw, sub, start, partials, &shapes, b.dtype, outs) }
        };
        // The pipeline runs on a pool thread, so that each page's parallel
        // rows and the reader's task are split there (no hand-off from this
        // thread per page). Beside page i's rows, one task reads page
        // i + depth into the slot page i - 1 used and releases page i - 2.
        // Release lags a page because a fault maps the 64 KiB around it:
        // page i's first touches map the tail of page i - 1 again, so page
        // i - 1 is released only after page i has run. At most depth + 2
        // pages are held, and only two of them mapped.
        let ring = depth + 1;
        let pipeline = AssertSend(|| -> Result<()> {
            let mut slots: Vec<Slot<'_>> = (0..ring).map(|_| Slot::default()).collect();
            let mut ran_before: Option<Page<'_>> = None;
            for (j, rows) in plan.iter().take(depth).enumerate() {
                source.prepare(rows.clone(), &mut slots[j]).map_err(Error::Call)?;
            }
            for (i, rows) in plan.iter().enumerate() {
                let cur = i % ring;
                if depth == 0 {
                    source.prepare(rows.clone(), &mut slots[cur]).map_err(Error::Call)?;
                    run_page(&slots[cur], &mut partials, &mut outs)?;
                    source.release(std::mem::replace(&mut ran_before, slots[cur].mapped.take()));
                    continue;
                }
                // The slot of page i - 1, where page i + depth goes.
                let back = (i + depth) % ring;
                let mut next = std::mem::take(&mut slots[back]);
                let older = std::mem::replace(&mut ran_before, next.mapped.take());
                let ahead = plan.get(i + depth).cloned();
                let mut read = Ok(());
                let mut ran = Ok(());
                rayon::in_place_scope(|s| {
                    let (source, next, read) = (&source, &mut next, &mut read);
                    s.spawn(move |_| {
                        source.release(older);
                        if let Some(r) = ahead {
                            *read = source.prepare(r, next);
                        }
                    });
                    ran = run_page(&slots[cur], &mut partials, &mut outs);
                });
                slots[back] = next;
                ran?;
                read.map_err(Error::Call)?;
            }
            source.release(ran_before.take());
            for slot in &mut slots {
                source.release(slot.mapped.take());
            }
            file.release_adjacency();
            Ok(())
        });
        rayon::scope(move |_| pipeline.call())?;
        // A field read from the file does not stay resident after the call.
        for (_, _, h) in &handles {
            h.release();
        }
        partials.finish(&mut outs);
        let names = k.outputs.iter().map(|o| o.name.clone());
        Ok(Outputs { items: names.zip(outs).collect() })
    }
}
