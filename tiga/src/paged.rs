//! Paged execution: a kernel over a graph that stays on disk (`.gfg`),
//! streamed through the unchanged compiled kernel one page of destination
//! rows at a time.
//!
//! Nothing is read whole: each page's row offsets, column indices and edge
//! ids are read with positioned reads (not memory
//! maps, whose touched pages would stay in the resident set) into buffers
//! that a background reader fills up to `prefetch` pages ahead. The kernel
//! sees absolute CSR positions: its `cols`/`edge_ids` pointers are offset so
//! that position `p` of the page lands on the page buffer. Resident memory is
//! about (prefetch + 1) page buffers plus the fields and outputs in RAM.
//!
//! Outputs are bit-identical to the in-memory run for any page size: every
//! row is computed by the same code over the same edges in the same order,
//! and parameter outputs (sums over all rows) are grouped in fixed row blocks
//! that do not depend on the page plan (`call::ParamPartials`). The same runner walks the file's stored transpose (a paged
//! backward's source stage) and rows in reverse edge order (a monoid's
//! suffix stage).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::mpsc;

use tiga_compiler::back::abi::EntryFn;
use tiga_compiler::back::cranelift::RawArgs;
use tiga_compiler::bind::{output_shapes, Extents};
use tiga_compiler::ir::Role;
use tiga_runtime::storage::{FieldHandle, FieldRole, GfgFile};

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
struct PageBuf {
    rows: std::ops::Range<usize>,
    first: usize,
    offsets: Vec<u64>,
    cols: Vec<u32>,
    edge_ids: Option<Vec<u64>>,
}

/// Read `count` little-endian elements of `T` at byte `at` straight into a
/// vector (no intermediate byte buffer). The format is little-endian and the
/// reader refuses big-endian hosts, so the bytes are the values.
fn read_vec<T: Copy + Default>(file: &File, path: &str, at: u64, count: usize) -> std::result::Result<Vec<T>, String> {
    let mut v: Vec<T> = vec![T::default(); count];
    let bytes = count * std::mem::size_of::<T>();
    // SAFETY: `v` owns `count` initialized `T`s (u32/u64 here: every bit
    // pattern is valid), viewed as their `bytes` bytes for the read.
    let buf = unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, bytes) };
    file.read_exact_at(buf, at).map_err(|e| format!("{path}: reading a page: {e}"))?;
    Ok(v)
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

fn read_page(
    file: &File,
    path: &str,
    at: SectionsAt,
    rows: std::ops::Range<usize>,
    reverse_rows: bool,
) -> std::result::Result<PageBuf, String> {
    let offsets: Vec<u64> = read_vec(file, path, at.offsets + rows.start as u64 * 8, rows.len() + 1)?;
    if let Some(w) = offsets.windows(2).position(|w| w[1] < w[0]) {
        return Err(format!("{path}: row offsets decrease at row {}", rows.start + w));
    }
    let (first, last) = (offsets[0] as usize, offsets[rows.len()] as usize);
    if last > at.num_edges {
        return Err(format!("{path}: row offset {last} is past the {} edges", at.num_edges));
    }
    let n = last - first;
    let mut cols: Vec<u32> = read_vec(file, path, at.cols + first as u64 * 4, n)?;
    if let Some(c) = cols.iter().find(|&&c| c as usize >= at.num_src) {
        return Err(format!("{path}: column {c} in rows {rows:?} is out of range for {} sources", at.num_src));
    }
    let mut edge_ids: Option<Vec<u64>> = match at.ids {
        Some(a) => Some(read_vec(file, path, a + first as u64 * 8, n)?),
        None => None,
    };
    if let Some(e) = edge_ids.as_ref().and_then(|ids| ids.iter().find(|&&e| e as usize >= at.num_edges)) {
        return Err(format!("{path}: edge id {e} in rows {rows:?} is out of range for {} edges", at.num_edges));
    }
    if reverse_rows {
        // Each row's edges in reverse order, with their user ids (absent
        // ids are the positions themselves).
        let mut ids: Vec<u64> = edge_ids.take().unwrap_or_else(|| (first as u64..last as u64).collect());
        for w in offsets.windows(2) {
            let (s, e) = (w[0] as usize - first, w[1] as usize - first);
            cols[s..e].reverse();
            ids[s..e].reverse();
        }
        edge_ids = Some(ids);
    }
    Ok(PageBuf { rows, first, offsets, cols, edge_ids })
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
        let fh = File::open(&path).map_err(|e| Error::Call(format!("{pname}: {e}")))?;
        let param_outs: Vec<usize> = k.outputs_of(Role::Param).iter().map(|(i, _)| *i).collect();
        let reverse = side == Side::RowReversed;
        let mut partials = ParamPartials::new(nd, &param_outs).with_split(splittable(k));
        let mut run_page = |page: &PageBuf| -> Result<()> {
            // Absolute positions p in [first, first + len) land on the buffer.
            let raw = RawArgs {
                // Row i's offsets at page.offsets[i - rows.start].
                offsets: page.offsets.as_ptr().wrapping_sub(page.rows.start),
                cols: page.cols.as_ptr().wrapping_sub(page.first),
                edge_ids: page.edge_ids.as_ref().map(|e| e.as_ptr().wrapping_sub(page.first)).unwrap_or(std::ptr::null()),
                fields: field_ptrs.as_ptr(),
                outputs: std::ptr::null(),
            };
            let sub = &page.offsets[..];
            // SAFETY: the variant matches the kernel, dtype, widths and
            // edge-id realization; the page holds every position of its rows;
            // fields and outputs were checked against the file's sizes.
            unsafe { execute_rows(entry, raw, sub, page.rows.start, &mut partials, &shapes, b.dtype, &mut outs) }
        };
        if depth == 0 {
            for rows in plan {
                let page = read_page(&fh, &pname, at, rows, reverse).map_err(Error::Call)?;
                run_page(&page)?;
            }
        } else {
            let (tx, rx) = mpsc::sync_channel::<std::result::Result<PageBuf, String>>(depth.saturating_sub(1));
            std::thread::scope(|scope| -> Result<()> {
                let fh = &fh;
                let pname = &pname;
                scope.spawn(move || {
                    for rows in plan {
                        let r = read_page(fh, pname, at, rows, reverse);
                        let stop = r.is_err();
                        if tx.send(r).is_err() || stop {
                            break;
                        }
                    }
                });
                for page in rx {
                    run_page(&page.map_err(Error::Call)?)?;
                }
                Ok(())
            })?;
        }
        partials.finish(&mut outs);
        let names = k.outputs.iter().map(|o| o.name.clone());
        Ok(Outputs { items: names.zip(outs).collect() })
    }
}
