//! A call's rows streamed through a device in pages: what the GPU arm of a
//! call runs once the facade has lowered the kernel to PTX and bound its
//! fields ([`run_rows`]).
//!
//! Source fields and parameters are uploaded once and stay resident (any
//! row may read any source). The rows, whether one CSR in memory or pages
//! of a file, are cut into sub-pages that fit the device budget
//! ([`Schedule::device_budget`]) and go through two slots: while sub-page k
//! computes on the compute stream, sub-page k+1 is staged in the other
//! slot's host buffer and copied on the copy stream; a slot's outputs are
//! downloaded when the slot comes round again (or at the end), so the host
//! reads the next page of a file while the device works. On the simulator
//! the same calls run one after the other.
//!
//! Per sub-page, the kernel sees a CSR of its own rows: row offsets rebased
//! to 0, its columns (global source ids), its destination fields' rows, and
//! its edge fields permuted from the user's edge order into CSR order (the
//! PTX ABI has no edge ids). Destination outputs come back into their rows;
//! edge outputs are permuted back to the user's order; parameter outputs are
//! per-thread partials, added on the host in thread order, sub-page after
//! sub-page, so a result does not depend on timing (it does on the page
//! plan: another split adds the same terms in another order).

use std::ops::Range;

use tiga_runtime::exec::PageView;
use tiga_runtime::{DType, Role, Rows, Schedule, Tensor, TensorView};

use crate::cache::LoadedKernel;
use crate::context::{DeviceBuffer, Event, GpuDevice, GpuError, HostBuffer, LaunchArg, LaunchShape, Result, Stream};

/// The arrays of one call: the bound fields in the kernel's field order
/// with their roles, and the outputs' roles and shapes. A role says where
/// an array lives on the device: source fields and parameters resident
/// for the whole call, destination fields and outputs by row, edge fields
/// and outputs by edge (in CSR order on the device), parameter outputs as
/// per-thread partials.
#[derive(Debug)]
pub struct CallArrays<'c> {
    /// The kernel's name, for messages.
    pub name: &'c str,
    pub fields: &'c [TensorView<'c>],
    pub field_roles: Vec<Role>,
    pub output_roles: Vec<Role>,
    pub shapes: &'c [Vec<usize>],
    pub dtype: DType,
}

/// Regions of a slot start at multiples of this (coalesced loads, and
/// every element type aligned).
const ALIGN: usize = 256;

/// The most blocks of one launch: rows beyond them are walked with the
/// grid stride. Enough threads to fill an H100/H200 several times over.
const MAX_GRID: u32 = 8192;
/// The most blocks of a kernel with parameter outputs, whose per-thread
/// partials take `grid × block × len` elements per sub-page.
const MAX_PARAM_GRID: u32 = 512;

fn align(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

/// Run `kernel` over every row of `rows` on `dev` (see the module doc),
/// writing `outs` (one buffer per output, shaped as `arrays.shapes`).
/// Every slot's work is finished and downloaded before anything is freed,
/// even after an error. Generated rows have no CSR: build it first.
pub fn run_rows(
    dev: &dyn GpuDevice,
    kernel: &LoadedKernel,
    arrays: &CallArrays<'_>,
    rows: &Rows<'_>,
    schedule: &Schedule,
    outs: &mut [Tensor],
) -> Result<()> {
    let mut call = DeviceCall::new(dev, kernel, arrays, schedule)?;
    let ran = rows
        .for_each_page(schedule, |page| call.page(&page, outs))
        .unwrap_or_else(|| Err(GpuError::Internal("generated rows reached the device path".into())));
    let finished = call.finish(outs);
    let synced = dev.synchronize();
    ran?;
    finished?;
    synced
}

/// Where each array of a sub-page lies in its slot, in bytes.
#[derive(Clone, Debug, Default)]
struct Layout {
    offsets: usize,
    cols: usize,
    /// Per kernel field: its offset in the slot (destination and edge
    /// fields), or `None` (resident: source fields and parameters).
    fields: Vec<Option<usize>>,
    /// End of what is uploaded.
    inputs_end: usize,
    /// Per output: offset and bytes in the slot.
    outputs: Vec<(usize, usize)>,
    total: usize,
}

/// One sub-page in flight in a slot: what to collect when it is done.
struct Pending {
    rows: Range<usize>,
    /// Its first CSR position, absolute.
    first_edge: usize,
    edges: usize,
    /// The user edge of each of its CSR positions (only when the kernel has
    /// edge outputs and the rows carry ids).
    edge_ids: Option<Vec<u64>>,
    layout: Layout,
    threads: usize,
    start: Event,
    end: Event,
}

/// A slot: device memory for one sub-page's inputs and outputs, the host
/// buffer its inputs are staged in, and the sub-page using it.
#[derive(Default)]
struct Slot {
    dev: Option<DeviceBuffer>,
    host: Option<HostBuffer>,
    pending: Option<Pending>,
}

/// Per output: its role and elements per row (per parameter output: in
/// all).
struct OutSpec {
    role: Role,
    len: usize,
}

/// The state of one call on a device.
struct DeviceCall<'c> {
    dev: &'c dyn GpuDevice,
    kernel: &'c LoadedKernel,
    name: String,
    views: &'c [TensorView<'c>],
    roles: Vec<Role>,
    /// Per field: elements per row (per parameter: in all).
    field_len: Vec<usize>,
    outs: Vec<OutSpec>,
    dtype: DType,
    /// Resident buffers (source fields and parameters), by field.
    resident: Vec<Option<DeviceBuffer>>,
    /// What a slot may hold.
    slot_budget: usize,
    slots: [Slot; 2],
    /// Sub-pages started so far.
    started: usize,
    /// Parameter sums, per output (f64 accumulators are not used: sums are
    /// added in the call's dtype, as the CPU's are).
    param_sums: Vec<Option<Vec<u8>>>,
    timer: Option<tiga_runtime::DeviceTimer>,
    progress: Option<tiga_runtime::Progress>,
    max_grid: u32,
    copied: u64,
}

fn row_len(shape: &[usize]) -> usize {
    shape.iter().skip(1).product()
}

impl<'c> DeviceCall<'c> {
    fn new(
        dev: &'c dyn GpuDevice,
        kernel: &'c LoadedKernel,
        arrays: &CallArrays<'c>,
        schedule: &Schedule,
    ) -> Result<DeviceCall<'c>> {
        let (views, shapes, dtype) = (arrays.fields, arrays.shapes, arrays.dtype);
        if arrays.field_roles.len() != views.len() || arrays.output_roles.len() != shapes.len() {
            return Err(GpuError::Internal(format!(
                "kernel `{}`: {} fields for {} places, {} outputs for {} places",
                arrays.name,
                views.len(),
                arrays.field_roles.len(),
                shapes.len(),
                arrays.output_roles.len()
            )));
        }
        let roles: Vec<Role> = arrays.field_roles.clone();
        let field_len =
            views.iter().zip(&roles).map(|(v, r)| if *r == Role::Param { v.len() } else { row_len(v.shape()) }).collect();
        let outs: Vec<OutSpec> = arrays
            .output_roles
            .iter()
            .zip(shapes)
            .map(|(&role, s)| OutSpec { role, len: if role == Role::Param { s.iter().product() } else { row_len(s) } })
            .collect();
        let budget = schedule.device_budget.unwrap_or_else(|| dev.default_budget());
        let mut resident = Vec::with_capacity(views.len());
        let mut resident_bytes = 0u64;
        for (v, r) in views.iter().zip(&roles) {
            if matches!(r, Role::Src | Role::Param) {
                resident_bytes += align(v.len() * dtype.size()) as u64;
            }
        }
        if resident_bytes > budget {
            return Err(GpuError::Budget {
                what: format!("kernel `{}`'s source fields and parameters", arrays.name),
                needed: resident_bytes,
                budget,
            });
        }
        let mut copied = 0u64;
        for (v, r) in views.iter().zip(&roles) {
            resident.push(match r {
                Role::Src | Role::Param => {
                    let bytes = v.data().as_bytes();
                    let buf = dev.alloc(bytes.len())?;
                    dev.upload(Stream::Copy, &buf, 0, bytes)?;
                    copied += bytes.len() as u64;
                    Some(buf)
                }
                Role::Dst | Role::Edge => None,
            });
        }
        let has_params = outs.iter().any(|o| o.role == Role::Param);
        let param_sums = outs.iter().map(|o| (o.role == Role::Param).then(|| vec![0u8; o.len * dtype.size()])).collect();
        Ok(DeviceCall {
            dev,
            kernel,
            name: arrays.name.to_string(),
            views,
            roles,
            field_len,
            outs,
            dtype,
            resident,
            slot_budget: usize::try_from((budget - resident_bytes) / 2).unwrap_or(usize::MAX),
            slots: Default::default(),
            started: 0,
            param_sums,
            timer: schedule.device_timer.clone(),
            progress: schedule.progress.clone(),
            max_grid: if has_params { MAX_PARAM_GRID } else { MAX_GRID },
            copied,
        })
    }

    /// The launch shape for `rows` rows.
    fn shape(&self, rows: usize) -> LaunchShape {
        let l = &self.kernel.launch;
        let threads = (rows as u64).saturating_mul(u64::from(l.threads_per_row.max(1)));
        let grid = threads.div_ceil(u64::from(l.block.max(1))).clamp(1, u64::from(self.max_grid)) as u32;
        LaunchShape { grid, block: l.block.max(1) }
    }

    /// Where a sub-page of `rows` rows and `edges` edges lies in a slot.
    fn layout(&self, rows: usize, edges: usize) -> Layout {
        let size = self.dtype.size();
        let mut at = 0usize;
        let mut take = |bytes: usize| {
            let here = at;
            at += align(bytes);
            here
        };
        let offsets = take((rows + 1) * 8);
        let cols = take(edges * 4);
        let fields = self
            .roles
            .iter()
            .zip(&self.field_len)
            .map(|(r, &len)| match r {
                Role::Dst => Some(take(rows * len * size)),
                Role::Edge => Some(take(edges * len * size)),
                Role::Src | Role::Param => None,
            })
            .collect();
        let inputs_end = take(0);
        let shape = self.shape(rows);
        let threads = shape.grid as usize * shape.block as usize;
        let outputs = self
            .outs
            .iter()
            .map(|o| {
                let bytes = match o.role {
                    Role::Dst | Role::Src => rows * o.len * size,
                    Role::Edge => edges * o.len * size,
                    Role::Param => threads * o.len * size,
                };
                (take(bytes), bytes)
            })
            .collect();
        let total = take(0);
        Layout { offsets, cols, fields, inputs_end, outputs, total }
    }

    /// Run one page of rows: cut into sub-pages that fit a slot.
    fn page(&mut self, page: &PageView<'_>, outs: &mut [Tensor]) -> Result<()> {
        let n = page.offsets.len().saturating_sub(1);
        let mut s = 0usize;
        while s < n {
            // The most rows from `s` whose sub-page fits a slot.
            let fits = |e: usize| self.layout(e - s, (page.offsets[e] - page.offsets[s]) as usize).total <= self.slot_budget;
            if !fits(s + 1) {
                let r = page.first_row + s;
                let need = self.layout(1, (page.offsets[s + 1] - page.offsets[s]) as usize).total;
                return Err(GpuError::Budget {
                    what: format!(
                        "row {r} of kernel `{}` ({} edges) in one page slot",
                        self.name,
                        page.offsets[s + 1] - page.offsets[s]
                    ),
                    needed: need as u64 * 2,
                    budget: self.slot_budget as u64 * 2,
                });
            }
            // Binary search over the end row, at most u32::MAX rows a launch.
            let (mut lo, mut hi) = (s + 1, n.min(s + u32::MAX as usize));
            while lo < hi {
                let mid = lo + (hi - lo).div_ceil(2);
                if fits(mid) {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            self.sub_page(page, s..lo, outs)?;
            s = lo;
        }
        Ok(())
    }

    /// Stage, copy and launch rows `local` (of the page) in the next slot.
    fn sub_page(&mut self, page: &PageView<'_>, local: Range<usize>, outs: &mut [Tensor]) -> Result<()> {
        let si = self.started % 2;
        // The slot's previous sub-page is collected first: its outputs
        // come back and its inputs are no longer read.
        if let Some(p) = self.slots[si].pending.take() {
            self.collect(si, p, outs)?;
        }
        let page_first = page.offsets.first().copied().unwrap_or(0);
        let (e0, e1) = (page.offsets[local.start], page.offsets[local.end]);
        let rows = local.len();
        let edges = (e1 - e0) as usize;
        let layout = self.layout(rows, edges);
        // Grow the slot when this sub-page needs more (up to the budget).
        let cap = self.slots[si].dev.as_ref().map_or(0, |d| d.bytes());
        if cap < layout.total {
            let want = layout.total.max(cap.saturating_mul(2)).min(self.slot_budget.max(layout.total));
            self.slots[si].dev = None;
            self.slots[si].host = None;
            self.slots[si].dev = Some(self.dev.alloc(want)?);
            self.slots[si].host = Some(self.dev.alloc_host(want)?);
        }
        let size = self.dtype.size();
        let edge_pos = |q: usize| (e0 - page_first) as usize + q;
        let user_edge = |q: usize| -> usize {
            match page.edge_ids {
                Some(ids) => ids[edge_pos(q)] as usize,
                None => e0 as usize + q,
            }
        };
        {
            let host = self.slots[si].host.as_mut().ok_or(GpuError::Internal("a page slot without a host buffer".into()))?;
            let buf = host.as_mut_slice()?;
            for (i, o) in page.offsets[local.start..=local.end].iter().enumerate() {
                buf[layout.offsets + 8 * i..layout.offsets + 8 * i + 8].copy_from_slice(&(o - e0).to_ne_bytes());
            }
            let cols = &page.cols[edge_pos(0)..edge_pos(edges)];
            for (q, c) in cols.iter().enumerate() {
                buf[layout.cols + 4 * q..layout.cols + 4 * q + 4].copy_from_slice(&c.to_ne_bytes());
            }
            for (f, at) in layout.fields.iter().enumerate() {
                let Some(at) = *at else { continue };
                let bytes = self.views[f].data().as_bytes();
                let row = self.field_len[f] * size;
                match self.roles[f] {
                    Role::Dst => {
                        let r0 = page.first_row + local.start;
                        buf[at..at + rows * row].copy_from_slice(&bytes[r0 * row..(r0 + rows) * row]);
                    }
                    _ => {
                        for q in 0..edges {
                            let u = user_edge(q);
                            buf[at + q * row..at + (q + 1) * row].copy_from_slice(&bytes[u * row..(u + 1) * row]);
                        }
                    }
                }
            }
        }
        let shape = self.shape(rows);
        let slot = &mut self.slots[si];
        let (Some(dbuf), Some(host)) = (slot.dev.as_ref(), slot.host.as_mut()) else {
            return Err(GpuError::Internal("a page slot without buffers".into()));
        };
        self.dev.upload_staged(Stream::Copy, dbuf, 0, host, layout.inputs_end)?;
        self.copied += layout.inputs_end as u64;
        let ready = self.dev.record(Stream::Copy)?;
        self.dev.wait(Stream::Compute, &ready)?;
        if let Some(&(first, _)) = layout.outputs.first() {
            self.dev.zero(Stream::Compute, dbuf, first, layout.total - first)?;
        }
        let mut args = vec![LaunchArg::U64(dbuf.addr_at(layout.offsets)?), LaunchArg::U64(dbuf.addr_at(layout.cols)?)];
        for (f, at) in layout.fields.iter().enumerate() {
            args.push(LaunchArg::U64(match (at, &self.resident[f]) {
                (Some(at), _) => dbuf.addr_at(*at)?,
                (None, Some(r)) => r.addr(),
                (None, None) => return Err(GpuError::Internal(format!("field {f} is neither resident nor in the page slot"))),
            }));
        }
        for &(at, _) in &layout.outputs {
            args.push(LaunchArg::U64(dbuf.addr_at(at)?));
        }
        args.push(LaunchArg::U32(u32::try_from(rows).map_err(|_| GpuError::TooLarge(format!("{rows} rows in one launch")))?));
        let start = self.dev.record(Stream::Compute)?;
        // SAFETY: the module was lowered from this kernel for this dtype and
        // these widths; every pointer is an address inside a live buffer of
        // this device: the slot's regions were sized by `layout` for these
        // rows and edges (offsets rebased to 0, columns below the source
        // count the rows promise, edge and destination fields of these
        // rows), resident fields were bound to the graph's sizes, and the
        // parameter partials hold `grid × block` threads' elements. The
        // buffers stay allocated until the sub-page is collected.
        unsafe { self.dev.launch(Stream::Compute, &self.kernel.module, &self.kernel.launch.entry, shape, &args)? };
        let end = self.dev.record(Stream::Compute)?;
        let edge_ids = match (self.outs.iter().any(|o| o.role == Role::Edge), page.edge_ids) {
            (true, Some(ids)) => Some(ids[edge_pos(0)..edge_pos(edges)].to_vec()),
            _ => None,
        };
        let r0 = page.first_row + local.start;
        slot.pending = Some(Pending {
            rows: r0..r0 + rows,
            first_edge: e0 as usize,
            edges,
            edge_ids,
            layout,
            threads: shape.grid as usize * shape.block as usize,
            start,
            end,
        });
        self.started += 1;
        Ok(())
    }

    /// Bring a finished sub-page's outputs home. They come over the copy
    /// stream once the sub-page's kernel is done, so the kernel of the
    /// other slot (queued after it on the compute stream) keeps running
    /// meanwhile.
    fn collect(&mut self, si: usize, p: Pending, outs: &mut [Tensor]) -> Result<()> {
        let size = self.dtype.size();
        let dbuf = self.slots[si].dev.as_ref().ok_or(GpuError::Internal("a pending sub-page without its slot".into()))?;
        self.dev.wait(Stream::Copy, &p.end)?;
        let mut copied = 0u64;
        for (o, (spec, &(at, bytes))) in self.outs.iter().zip(&p.layout.outputs).enumerate() {
            let row = spec.len * size;
            match spec.role {
                Role::Dst | Role::Src => {
                    let host = outs[o].data_mut().into_bytes();
                    let dst = host
                        .get_mut(p.rows.start * row..p.rows.end * row)
                        .ok_or(GpuError::Internal("an output row out of range".into()))?;
                    self.dev.download(Stream::Copy, dbuf, at, dst)?;
                }
                Role::Edge => {
                    let mut tmp = vec![0u8; bytes];
                    self.dev.download(Stream::Copy, dbuf, at, &mut tmp)?;
                    let host = outs[o].data_mut().into_bytes();
                    for q in 0..p.edges {
                        let u = p.edge_ids.as_ref().map_or(p.first_edge + q, |ids| ids[q] as usize);
                        host[u * row..(u + 1) * row].copy_from_slice(&tmp[q * row..(q + 1) * row]);
                    }
                }
                Role::Param => {
                    let mut tmp = vec![0u8; bytes];
                    self.dev.download(Stream::Copy, dbuf, at, &mut tmp)?;
                    let acc = self.param_sums[o].as_mut().ok_or(GpuError::Internal("a parameter output without sums".into()))?;
                    add_partials(acc, &tmp, p.threads, spec.len, self.dtype);
                }
            }
            copied += bytes as u64;
        }
        self.copied += copied;
        if let Some(t) = &self.timer {
            t.add(self.dev.elapsed_ms(&p.start, &p.end)?, 1, 0);
        }
        if let Some(pr) = &self.progress {
            pr.advance(p.rows.len() as u64);
        }
        Ok(())
    }

    /// Collect what is still in flight, in sub-page order, and write the
    /// parameter sums.
    fn finish(&mut self, outs: &mut [Tensor]) -> Result<()> {
        let mut first_err = None;
        for i in 0..2 {
            // The older of the two slots first.
            let si = (self.started + i) % 2;
            if let Some(p) = self.slots[si].pending.take() {
                if let Err(e) = self.collect(si, p, outs) {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        for (o, sums) in self.param_sums.iter().enumerate() {
            if let Some(s) = sums {
                let host = outs[o].data_mut().into_bytes();
                host.copy_from_slice(s);
            }
        }
        if let Some(t) = &self.timer {
            t.add(0.0, 0, self.copied);
        }
        Ok(())
    }
}

/// `acc[j] += Σ_t part[t·len + j]`, threads in order, in the call's dtype.
fn add_partials(acc: &mut [u8], part: &[u8], threads: usize, len: usize, dtype: DType) {
    fn go<T: Copy + std::ops::AddAssign>(
        acc: &mut [u8],
        part: &[u8],
        threads: usize,
        len: usize,
        from: impl Fn(&[u8]) -> T,
        to: impl Fn(T) -> Vec<u8>,
    ) {
        let n = std::mem::size_of::<T>();
        for j in 0..len {
            let mut s = from(&acc[j * n..(j + 1) * n]);
            for t in 0..threads {
                let at = (t * len + j) * n;
                if let Some(b) = part.get(at..at + n) {
                    s += from(b);
                }
            }
            acc[j * n..(j + 1) * n].copy_from_slice(&to(s));
        }
    }
    match dtype {
        DType::F32 => {
            go::<f32>(acc, part, threads, len, |b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]]), |x| x.to_ne_bytes().to_vec())
        }
        DType::F64 => go::<f64>(
            acc,
            part,
            threads,
            len,
            |b| f64::from_ne_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            |x| x.to_ne_bytes().to_vec(),
        ),
    }
}
