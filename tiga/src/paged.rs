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
//! the copy cost as much as the kernel (it is still how rows with reversed
//! edges, which the file does not store, are read, into recycled buffers).
//! The kernel sees absolute CSR positions: its `cols`/`edge_ids` pointers
//! are offset so that position `p` of the page lands on the page's data.
//!
//! Outputs are bit-identical to the in-memory run for any page size: every
//! row is computed by the same code over the same edges in the same order,
//! and parameter outputs (sums over all rows) are grouped in fixed row blocks
//! that do not depend on the page plan (`call::ParamPartials`). The same runner walks the file's stored transpose (a paged
//! backward's source stage) and rows in reverse edge order (a monoid's
//! suffix stage).

use std::fs::File;
use std::os::unix::fs::FileExt;

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
    fn prefetch_depth(&self) -> usize {
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
        let rows = self.page_rows.or_else(|| env_usize("TIGA_PAGED_PAGE_ROWS")).unwrap_or(1_000_000).max(1);
        (0..n).step_by(rows).map(|s| s..(s + rows).min(n)).collect()
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

/// One page's adjacency, read from disk: its rows' offsets (absolute CSR
/// positions), column indices and edge ids.
///
/// Buffers are recycled from page to page (the consumer hands each finished
/// page back to the reader): a fresh multi-megabyte allocation per page
/// costs a page fault per 4 KiB and a zero fill, which on a warm page cache
/// took longer than the read itself. The vectors only grow; `edges` is the
/// page's logical length.
#[derive(Default)]
struct PageBuf {
    rows: std::ops::Range<usize>,
    first: usize,
    edges: usize,
    offsets: Vec<u64>,
    cols: Vec<u32>,
    edge_ids: Vec<u64>,
    has_ids: bool,
}

/// Read `count` little-endian elements of `T` at byte `at` into the front of
/// `v`, growing it (zero-filled, once) when it is shorter. The format is
/// little-endian and the reader refuses big-endian hosts, so the bytes are
/// the values.
fn read_into<T: Copy + Default>(file: &File, path: &str, at: u64, count: usize, v: &mut Vec<T>) -> std::result::Result<(), String> {
    if v.len() < count {
        v.resize(count, T::default());
    }
    let bytes = count * std::mem::size_of::<T>();
    // SAFETY: `v` holds at least `count` initialized `T`s (u32/u64 here:
    // every bit pattern is valid), viewed as their `bytes` bytes for the read.
    let buf = unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, bytes) };
    file.read_exact_at(buf, at).map_err(|e| format!("{path}: reading a page: {e}"))
}

/// Where a side's sections start in the file.
#[derive(Clone, Copy)]
struct SectionsAt {
    offsets: u64,
    cols: u64,
    ids: Option<u64>,
    /// Bounds every value read must respect: the compiled kernel indexes
    /// fields with them unchecked, so a damaged file must fail here.
    num_src: usize,
    num_edges: usize,
}

/// Fill `page` with the adjacency of `rows`.
fn read_page(
    file: &File,
    path: &str,
    at: SectionsAt,
    rows: std::ops::Range<usize>,
    reverse_rows: bool,
    page: &mut PageBuf,
) -> std::result::Result<(), String> {
    let nr = rows.len();
    read_into(file, path, at.offsets + rows.start as u64 * 8, nr + 1, &mut page.offsets)?;
    let offsets = &page.offsets[..=nr];
    if let Some(w) = offsets.windows(2).position(|w| w[1] < w[0]) {
        return Err(format!("{path}: row offsets decrease at row {}", rows.start + w));
    }
    let (first, last) = (offsets[0] as usize, offsets[nr] as usize);
    if last > at.num_edges {
        return Err(format!("{path}: row offset {last} is past the {} edges", at.num_edges));
    }
    let n = last - first;
    read_into(file, path, at.cols + first as u64 * 4, n, &mut page.cols)?;
    let cols = &mut page.cols[..n];
    // A max first (it vectorizes); the search only names the culprit.
    if n > 0 && cols.iter().fold(0u32, |m, &c| m.max(c)) as usize >= at.num_src {
        if let Some(c) = cols.iter().find(|&&c| c as usize >= at.num_src) {
            return Err(format!("{path}: column {c} in rows {rows:?} is out of range for {} sources", at.num_src));
        }
    }
    page.has_ids = at.ids.is_some() || reverse_rows;
    match at.ids {
        Some(a) => {
            read_into(file, path, a + first as u64 * 8, n, &mut page.edge_ids)?;
            let ids = &page.edge_ids[..n];
            if n > 0 && ids.iter().fold(0u64, |m, &e| m.max(e)) as usize >= at.num_edges {
                if let Some(e) = ids.iter().find(|&&e| e as usize >= at.num_edges) {
                    return Err(format!("{path}: edge id {e} in rows {rows:?} is out of range for {} edges", at.num_edges));
                }
            }
        }
        None if reverse_rows => {
            // Absent ids are the positions themselves.
            page.edge_ids.clear();
            page.edge_ids.extend(first as u64..last as u64);
        }
        None => {}
    }
    if reverse_rows {
        // Each row's edges in reverse order, with their user ids.
        let ids = &mut page.edge_ids[..n];
        for w in page.offsets[..=nr].windows(2) {
            let (s, e) = (w[0] as usize - first, w[1] as usize - first);
            cols[s..e].reverse();
            ids[s..e].reverse();
        }
    }
    page.rows = rows;
    page.first = first;
    page.edges = n;
    Ok(())
}

/// Where a paged run's pages come from.
enum Source<'a> {
    /// Viewed in place in the file's mapping: mapped ahead of the kernel
    /// ([`GfgFile::page`] populates and checks it) and dropped from the
    /// resident set after ([`GfgFile::release_page`]). No copy: on a warm
    /// page cache a copy per page cost as much as the kernel itself.
    Mapped { file: &'a GfgFile, transposed: bool },
    /// Read into recycled buffers: rows whose edges run in reverse order (a
    /// right fold), which the file does not store.
    Read { fh: File, pname: String, at: SectionsAt, reverse: bool },
}

/// One page in flight.
#[derive(Default)]
struct Slot<'a> {
    mapped: Option<Page<'a>>,
    buf: PageBuf,
}

impl<'a> Source<'a> {
    fn prepare(&self, rows: std::ops::Range<usize>, slot: &mut Slot<'a>) -> std::result::Result<(), String> {
        match self {
            Source::Mapped { file, transposed } => {
                let page = if *transposed { file.transposed_page(rows) } else { file.page(rows) };
                slot.mapped = Some(page.map_err(|e| e.to_string())?);
                Ok(())
            }
            Source::Read { fh, pname, at, reverse } => read_page(fh, pname, *at, rows, *reverse, &mut slot.buf),
        }
    }

    fn release(&self, page: Option<Page<'a>>) {
        if let (Source::Mapped { file, .. }, Some(page)) = (self, page) {
            file.release_page(&page);
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
                let p = &self.buf;
                let raw = RawArgs {
                    offsets: p.offsets.as_ptr().wrapping_sub(p.rows.start),
                    cols: p.cols.as_ptr().wrapping_sub(p.first),
                    edge_ids: if p.has_ids { p.edge_ids.as_ptr().wrapping_sub(p.first) } else { null() },
                    fields: null(),
                    outputs: null(),
                };
                (raw, &p.offsets[..=p.rows.len()], p.rows.start)
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
        let path = file.path().to_path_buf();
        let pname = path.display().to_string();
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
        let (off_name, cols_name, ids_name) = match side {
            Side::Transposed => ("t_offsets", "t_cols", "t_edge_ids"),
            _ => ("offsets", "cols", "edge_ids"),
        };
        let section = |name: &str| file.sections().iter().find(|s| s.name == name).map(|s| s.offset);
        if side == Side::Transposed && section("t_offsets").is_none() {
            return Err(Error::Call(format!(
                "{pname} has no transposed CSR, which a paged backward reads: rebuild it with `tigac convert --transpose` (or save with a transpose)"
            )));
        }
        let offsets_at = section(off_name).ok_or_else(|| Error::Call(format!("{pname}: no `{off_name}` section")))?;
        let ids_at = section(ids_name);
        let has_ids = ids_at.is_some() || side == Side::RowReversed;
        let cols_at = section(cols_name).ok_or_else(|| Error::Call(format!("{pname}: no `{cols_name}` section")))?;
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
        let at = SectionsAt { offsets: offsets_at, cols: cols_at, ids: ids_at, num_src: ns, num_edges: file.num_edges() };
        let depth = opts.prefetch_depth();
        let source = if side == Side::RowReversed {
            let fh = File::open(&path).map_err(|e| Error::Call(format!("{pname}: {e}")))?;
            Source::Read { fh, pname: pname.clone(), at, reverse: side == Side::RowReversed }
        } else {
            Source::Mapped { file, transposed: side == Side::Transposed }
        };
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
            if let Source::Mapped { file, .. } = &source {
                file.release_adjacency();
            }
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
