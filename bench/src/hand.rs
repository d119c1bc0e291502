//! The hand-written baselines: what a careful Rust programmer writes for each
//! case without tiga, and the STREAM copy that says what the memory can do.
//!
//! They are the yardstick for the JIT, so they get every advantage a
//! hand-writer would take: the feature width is a const generic (the
//! accumulators are a `[f32; F]` the compiler keeps in registers), and the
//! row loops are compiled a second time with AVX2 and FMA through
//! `#[target_feature]` and picked at run time with `is_x86_feature_detected!`
//! (what `-C target-cpu=native` would give, without changing the workspace's
//! flags). Rows are split across rayon workers like tiga's executor does
//! (contiguous ranges of equal `degree + 1` cost, about four per thread).
//! Each call returns its output as a `Vec`, taken from the outputs of
//! earlier calls once they are dropped ([`Out`]), as a program that runs a
//! loop many times reuses its buffers (and as tiga's calls reuse a dropped
//! output's mapping without zeroing it, every loop here writing each
//! element). A fresh buffer costs page faults and the kernel's zeroing:
//! through `vec![0.0; n]` a 256 MB output took 65,536 faults and the same
//! loop measured 121 and 226 ms in two runs; even in transparent huge pages
//! (`zeroed_vec`) the F = 64 sum measured 86 to 191 ms from run to run on
//! this machine, whose fresh memory is slow and uneven to fault in.
//!
//! Loops over rows of at least 256 bytes prefetch the source row 32 edges
//! ahead (`_mm_prefetch`), as tiga's back ends do: without it the F = 64
//! sum took 74-83 ms instead of 69, max 93-106 instead of 80, attention
//! 208-301 instead of 173, F = 128 170-190 instead of 117.
//!
//! Each baseline is checked against tiga's output by the caller, so a number
//! here is known to be the same computation.
//!
//! The max backward is the one baseline that is not a pull: one fused pass
//! per row (winners, then the scatter into their gradient rows) with the
//! lanes split between threads. Measured beside tiga's two stages (winner
//! ranks, then a scatter of them) it was no faster (1.09 s against 0.98 s at
//! F = 64 on the power-law graph): both are bound by the random
//! read-modify-write of a gradient row per edge, so it is a yardstick of
//! the design, not a proof of the machine's limit.

use std::ops::Range;
use std::time::Instant;

use rayon::prelude::*;
use tiga_runtime::tensor::zeroed_vec;
use tiga_runtime::{balanced_row_chunks, Graph};

/// Outputs of dropped [`Out`]s, for the next call of the same size.
static SPARE_OUTPUTS: std::sync::Mutex<Vec<Vec<f32>>> = std::sync::Mutex::new(Vec::new());

/// At most this many spare outputs (a forward and a backward contender
/// each hold one while computing the next).
const SPARE_KEEP: usize = 2;

/// A buffer of `n` floats for a loop that writes every one of them: a
/// spare of that size when there is one (old values in it), else zeros.
fn output(n: usize) -> Vec<f32> {
    if let Ok(mut spares) = SPARE_OUTPUTS.lock() {
        if let Some(i) = spares.iter().position(|v| v.len() == n) {
            return spares.swap_remove(i);
        }
    }
    zeroed_vec(n)
}

/// A hand-written loop's output; its buffer becomes a spare when dropped.
pub struct Out(pub Vec<f32>);

impl Drop for Out {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.0);
        if let (false, Ok(mut spares)) = (v.is_empty(), SPARE_OUTPUTS.lock()) {
            if spares.len() < SPARE_KEEP {
                spares.push(v);
            }
        }
    }
}

impl std::ops::Deref for Out {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &self.0
    }
}

/// Widths the baselines are compiled for.
pub const WIDTHS: [usize; 4] = [1, 16, 64, 128];

/// Whether the AVX2+FMA copies of the loops run on this machine.
pub fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// What the baselines were compiled for, in words.
pub fn isa() -> &'static str {
    if has_avx2_fma() {
        "avx2+fma (#[target_feature])"
    } else {
        "baseline ISA (no avx2+fma)"
    }
}

/// Runs `$body::<F>` (an `#[inline(always)]` function) through its AVX2+FMA
/// twin `$fast::<F>` when the CPU has both.
macro_rules! dispatch {
    ($body:ident, $fast:ident, $F:ident, ($($arg:expr),*)) => {{
        #[cfg(target_arch = "x86_64")]
        {
            if has_avx2_fma() {
                // SAFETY: the CPU supports avx2 and fma (checked just above);
                // that is the only requirement of the target_feature twin.
                unsafe { $fast::<$F>($($arg),*) };
                return;
            }
        }
        $body::<$F>($($arg),*)
    }};
}

/// Picks the const-generic instance for a run-time width.
macro_rules! by_width {
    ($f:expr, $run:ident, ($($arg:expr),*)) => {
        match $f {
            1 => $run::<1>($($arg),*),
            16 => $run::<16>($($arg),*),
            64 => $run::<64>($($arg),*),
            128 => $run::<128>($($arg),*),
            other => return Err(format!("the hand-written loops are compiled for F in {WIDTHS:?}, not {other}")),
        }
    };
}

/// Splits `out` (rows × `width`) into tiga's balanced row ranges and runs
/// `body` on them in parallel.
fn par_rows(offsets: &[u64], width: usize, out: &mut [f32], body: impl Fn(Range<usize>, &mut [f32]) + Sync) {
    let parts = rayon::current_num_threads().saturating_mul(4);
    let mut pieces = Vec::new();
    let mut rest = out;
    for rows in balanced_row_chunks(offsets, parts) {
        let (head, tail) = rest.split_at_mut(rows.len() * width);
        pieces.push((rows, head));
        rest = tail;
    }
    pieces.into_par_iter().for_each(|(rows, o)| body(rows, o));
}

/// What happens to a row's sum before it is stored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Post {
    /// `sum`: nothing.
    None,
    /// `Smoothing`: times a constant.
    Scale(f32),
    /// `mean`: divided by the degree (0 for an empty row).
    Mean,
}

// ----------------------------------------------------------------- prefetch

/// Edges ahead whose source rows the loops over wide rows prefetch, as
/// both of tiga's back ends do (the same distance): the gathers of random
/// rows are what these loops wait on.
const PREFETCH_EDGES: usize = 32;

/// The first edge of a chunk of rows and the chunk's columns.
#[inline(always)]
fn chunk_edges<'c>(offsets: &[u64], cols: &'c [u32], rows: &Range<usize>) -> (usize, &'c [u32]) {
    let (b, e) = (offsets[rows.start] as usize, offsets[rows.end] as usize);
    (b, &cols[b..e])
}

/// Prefetch the source row of edge `p + PREFETCH_EDGES` (within `cols`,
/// which is the chunk's edges) when rows are at least 256 bytes; narrower
/// rows are left to the hardware, as tiga leaves them (unless the loop
/// also reads wide rows: [`prefetch_narrow`]).
#[inline(always)]
fn prefetch_ahead<const F: usize>(x: &[f32], cols: &[u32], p: usize) {
    if F * 4 >= 256 {
        prefetch_narrow::<F>(x, cols, p);
    }
}

/// Prefetch the source row of edge `p + PREFETCH_EDGES`, whatever its width
/// (GatAttention's `a_src[j]`, read before the edge's exponential, as the
/// ahead-of-time back end does once a loop prefetches).
#[inline(always)]
fn prefetch_narrow<const F: usize>(x: &[f32], cols: &[u32], p: usize) {
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (x, cols, p);
    #[cfg(target_arch = "x86_64")]
    {
        if let Some(&j) = cols.get(p + PREFETCH_EDGES) {
            let row = j as usize * F;
            if row + F <= x.len() {
                for l in (0..F).step_by(16) {
                    // SAFETY: `row + l < x.len()` (checked above); a
                    // prefetch reads nothing and never faults.
                    unsafe {
                        ::core::arch::x86_64::_mm_prefetch::<{ ::core::arch::x86_64::_MM_HINT_T0 }>(
                            x.as_ptr().add(row + l) as *const i8
                        )
                    };
                }
            }
        }
    }
}

// ---------------------------------------------------------------- sum / mean

#[inline(always)]
fn sum_rows<const F: usize>(
    offsets: &[u64],
    cols: &[u32],
    x: &[f32],
    weight: Option<&[f32]>,
    post: Post,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let (base, chunk) = chunk_edges(offsets, cols, &rows);
    for (k, i) in rows.enumerate() {
        let (s, e) = (offsets[i] as usize, offsets[i + 1] as usize);
        let mut acc = [0.0f32; F];
        match weight {
            None => {
                for (p, &j) in (s..e).zip(&cols[s..e]) {
                    prefetch_ahead::<F>(x, chunk, p - base);
                    let xj = &x[j as usize * F..j as usize * F + F];
                    for f in 0..F {
                        acc[f] += xj[f];
                    }
                }
            }
            Some(w) => {
                for (p, &j) in (s..e).zip(&cols[s..e]) {
                    prefetch_ahead::<F>(x, chunk, p - base);
                    let (wj, xj) = (w[j as usize], &x[j as usize * F..j as usize * F + F]);
                    for f in 0..F {
                        acc[f] += wj * xj[f];
                    }
                }
            }
        }
        let scale = match post {
            Post::None => 1.0,
            Post::Scale(c) => c,
            Post::Mean if e > s => 1.0 / (e - s) as f32,
            Post::Mean => 0.0,
        };
        let o = &mut out[k * F..k * F + F];
        for f in 0..F {
            o[f] = if post == Post::None { acc[f] } else { scale * acc[f] };
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn sum_rows_avx2<const F: usize>(
    offsets: &[u64],
    cols: &[u32],
    x: &[f32],
    weight: Option<&[f32]>,
    post: Post,
    rows: Range<usize>,
    out: &mut [f32],
) {
    sum_rows::<F>(offsets, cols, x, weight, post, rows, out)
}

fn sum_rows_best<const F: usize>(
    offsets: &[u64],
    cols: &[u32],
    x: &[f32],
    weight: Option<&[f32]>,
    post: Post,
    rows: Range<usize>,
    out: &mut [f32],
) {
    dispatch!(sum_rows, sum_rows_avx2, F, (offsets, cols, x, weight, post, rows, out))
}

fn sum_graph<const F: usize>(g: &Graph, x: &[f32], weight: Option<&[f32]>, post: Post, out: &mut [f32]) {
    let (offsets, cols) = (g.offsets(), g.cols());
    par_rows(offsets, F, out, |rows, o| sum_rows_best::<F>(offsets, cols, x, weight, post, rows, o));
}

/// `out[i] = post(Σ_{j→i} x[j])`, x of width `f`.
pub fn csr_sum(g: &Graph, x: &[f32], f: usize, post: Post) -> Result<Vec<f32>, String> {
    let mut out = output(g.num_dst() * f);
    by_width!(f, sum_graph, (g, x, None, post, &mut out));
    Ok(out)
}

/// The gradient of `sum(out)` for `out = post(Σ_{j→i} x[j])`, given the
/// output's cotangent `gout`: the scatter `gx[j] += c_i · gout[i]` over the
/// forward edges, done as a pull over the transposed CSR `gt` (rows are
/// sources) so that it needs no atomics. For `mean`, `c_i = 1/deg(i)` is a
/// per-column weight of the transposed rows.
pub fn csr_sum_backward(g: &Graph, gt: &Graph, gout: &[f32], f: usize, post: Post) -> Result<Vec<f32>, String> {
    let mut gx = output(gt.num_dst() * f);
    match post {
        Post::Mean => {
            let inv: Vec<f32> =
                g.offsets().windows(2).map(|w| if w[1] > w[0] { 1.0 / (w[1] - w[0]) as f32 } else { 0.0 }).collect();
            by_width!(f, sum_graph, (gt, gout, Some(&inv), Post::None, &mut gx));
        }
        _ => by_width!(f, sum_graph, (gt, gout, None, post, &mut gx)),
    }
    Ok(gx)
}

// ---------------------------------------------------------------------- max

/// `MaxPool`: out[i] = max_{j→i} relu(h[j]), 0 for an empty row. Starting
/// the accumulator at 0 is the relu and the empty-row rule at once.
#[inline(always)]
fn max_rows<const F: usize>(offsets: &[u64], cols: &[u32], x: &[f32], rows: Range<usize>, out: &mut [f32]) {
    let (base, chunk) = chunk_edges(offsets, cols, &rows);
    for (k, i) in rows.enumerate() {
        let (s, e) = (offsets[i] as usize, offsets[i + 1] as usize);
        let mut acc = [0.0f32; F];
        for (p, &j) in (s..e).zip(&cols[s..e]) {
            prefetch_ahead::<F>(x, chunk, p - base);
            let xj = &x[j as usize * F..j as usize * F + F];
            for f in 0..F {
                acc[f] = if xj[f] > acc[f] { xj[f] } else { acc[f] };
            }
        }
        out[k * F..k * F + F].copy_from_slice(&acc);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn max_rows_avx2<const F: usize>(offsets: &[u64], cols: &[u32], x: &[f32], rows: Range<usize>, out: &mut [f32]) {
    max_rows::<F>(offsets, cols, x, rows, out)
}

fn max_rows_best<const F: usize>(offsets: &[u64], cols: &[u32], x: &[f32], rows: Range<usize>, out: &mut [f32]) {
    dispatch!(max_rows, max_rows_avx2, F, (offsets, cols, x, rows, out))
}

fn max_graph<const F: usize>(g: &Graph, x: &[f32], out: &mut [f32]) {
    let (offsets, cols) = (g.offsets(), g.cols());
    par_rows(offsets, F, out, |rows, o| max_rows_best::<F>(offsets, cols, x, rows, o));
}

pub fn csr_max_relu(g: &Graph, x: &[f32], f: usize) -> Result<Vec<f32>, String> {
    let mut out = output(g.num_dst() * f);
    by_width!(f, max_graph, (g, x, &mut out));
    Ok(out)
}

/// The gradient buffer shared by the lane tasks of [`csr_max_relu_backward`].
#[derive(Clone, Copy)]
struct LanePtr(*mut f32);
// SAFETY: each task writes only its own lane range of every row (see
// `max_backward_lanes`), so no two tasks touch one element.
unsafe impl Send for LanePtr {}
unsafe impl Sync for LanePtr {}

/// Prefetch `lanes` of row `j` of a `F`-wide buffer (a hint).
#[inline(always)]
fn prefetch_lanes<const F: usize>(base: *const f32, len: usize, j: usize, lanes: &Range<usize>) {
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (base, len, j, lanes);
    #[cfg(target_arch = "x86_64")]
    for l in lanes.clone().step_by(16) {
        if j * F + l < len {
            // SAFETY: in bounds (checked); a prefetch reads nothing.
            unsafe {
                ::core::arch::x86_64::_mm_prefetch::<{ ::core::arch::x86_64::_MM_HINT_T0 }>(base.add(j * F + l) as *const i8)
            };
        }
    }
}

/// One task's `L` lanes from `lo` of every row: a first pass over the
/// row's edges finds, per lane, the first edge with the largest positive h
/// (the maximum of relu from 0, strictly greater to replace, so ties go to
/// the earlier edge), touching the gradient rows it will add to; a second
/// pass adds the row's cotangent lanes into the winners' gradient rows.
/// Lanes no edge won (an empty row, or no positive h: relu' = 0) add
/// nothing.
#[inline(always)]
fn max_backward_lanes<const F: usize, const L: usize>(
    offsets: &[u64],
    cols: &[u32],
    x: &[f32],
    gout: &[f32],
    lo: usize,
    out: LanePtr,
    len: usize,
) {
    let lanes = lo..lo + L;
    for (i, w) in offsets.windows(2).enumerate() {
        let (s, e) = (w[0] as usize, w[1] as usize);
        if s == e {
            continue;
        }
        let mut m = [0.0f32; L];
        let mut r = [u32::MAX; L];
        for (k, p) in (s..e).enumerate() {
            if let Some(&ja) = cols.get(p + PREFETCH_EDGES) {
                prefetch_lanes::<F>(x.as_ptr(), x.len(), ja as usize, &lanes);
            }
            let j = cols[p] as usize;
            prefetch_lanes::<F>(out.0, len, j, &lanes);
            let xj: &[f32; L] = x[j * F + lo..j * F + lo + L].try_into().expect("L lanes");
            for f in 0..L {
                let better = xj[f] > m[f];
                m[f] = if better { xj[f] } else { m[f] };
                r[f] = if better { k as u32 } else { r[f] };
            }
        }
        let g: &[f32; L] = gout[i * F + lo..i * F + lo + L].try_into().expect("L lanes");
        for (k, p) in (s..e).enumerate() {
            let j = cols[p] as usize;
            if j * F + F > len {
                continue;
            }
            // SAFETY: row `j` is in bounds (checked above), and these lanes
            // are this task's, which no other task's range holds.
            let o = unsafe { &mut *(out.0.add(j * F + lo) as *mut [f32; L]) };
            // Every lane, the others adding +0 (a sum from +0 is never -0):
            // it vectorizes, where a branch per lane does not.
            for f in 0..L {
                o[f] += if r[f] == k as u32 { g[f] } else { 0.0 };
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn max_backward_lanes_avx2<const F: usize, const L: usize>(
    offsets: &[u64],
    cols: &[u32],
    x: &[f32],
    gout: &[f32],
    lo: usize,
    out: LanePtr,
    len: usize,
) {
    max_backward_lanes::<F, L>(offsets, cols, x, gout, lo, out, len)
}

fn max_backward_best<const F: usize, const L: usize>(
    offsets: &[u64],
    cols: &[u32],
    x: &[f32],
    gout: &[f32],
    lo: usize,
    out: LanePtr,
    len: usize,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx2_fma() {
            // SAFETY: the CPU supports avx2 and fma (checked just above).
            unsafe { max_backward_lanes_avx2::<F, L>(offsets, cols, x, gout, lo, out, len) };
            return;
        }
    }
    max_backward_lanes::<F, L>(offsets, cols, x, gout, lo, out, len)
}

/// `L` lanes per task, `F / L` tasks (one per thread when the width splits
/// evenly; `L = F` is one task).
fn max_backward_split<const F: usize, const L: usize>(g: &Graph, x: &[f32], gout: &[f32], out: &mut [f32]) {
    let (offsets, cols) = (g.offsets(), g.cols());
    let (ptr, len) = (LanePtr(out.as_mut_ptr()), out.len());
    rayon::scope(|sc| {
        for t in 0..F / L {
            sc.spawn(move |_| max_backward_best::<F, L>(offsets, cols, x, gout, t * L, ptr, len));
        }
    });
}

fn max_backward_graph<const F: usize>(g: &Graph, x: &[f32], gout: &[f32], out: &mut [f32]) {
    let two = rayon::current_num_threads() >= 2;
    match F {
        16 if two => max_backward_split::<16, 8>(g, x, gout, out),
        64 if two => max_backward_split::<64, 32>(g, x, gout, out),
        128 if two => max_backward_split::<128, 64>(g, x, gout, out),
        _ => max_backward_split::<F, F>(g, x, gout, out),
    }
}

/// `MaxPool`'s source gradient in one pass over the forward CSR: per row,
/// each lane's cotangent goes to the first edge attaining the row's maximum
/// of relu(h) when that maximum is positive. Threads split the lanes (each
/// reads its part of every gathered row and owns its part of every gradient
/// row), so the scatter needs no atomics, and each gradient element adds
/// its terms in row order, as tiga's does.
pub fn csr_max_relu_backward(g: &Graph, x: &[f32], gout: &[f32], f: usize) -> Result<Vec<f32>, String> {
    let mut out = output(g.num_src() * f);
    out.fill(0.0);
    by_width!(f, max_backward_graph, (g, x, gout, &mut out));
    Ok(out)
}

// ---------------------------------------------------------------------- gat

/// `GatAttention`: s_e = leaky_relu(a_src[j] + a_dst[i], 0.2), out[i] =
/// Σ softmax_i(s)_e · h[j]. The scores of a row go to a scratch vector
/// (one pass over the cheap scalars for the max, one for the exponentials),
/// then one pass over the wide rows; the division by the denominator is
/// done once per row.
#[inline(always)]
fn gat_rows<const F: usize>(
    offsets: &[u64],
    cols: &[u32],
    h: &[f32],
    a_src: &[f32],
    a_dst: &[f32],
    rows: Range<usize>,
    out: &mut [f32],
) {
    let (base, chunk) = chunk_edges(offsets, cols, &rows);
    let mut w: Vec<f32> = Vec::new();
    for (k, i) in rows.enumerate() {
        let (s, e) = (offsets[i] as usize, offsets[i + 1] as usize);
        let o = &mut out[k * F..k * F + F];
        if s == e {
            o.fill(0.0);
            continue;
        }
        let ad = a_dst[i];
        w.clear();
        let mut m = f32::NEG_INFINITY;
        for (p, &j) in (s..e).zip(&cols[s..e]) {
            prefetch_narrow::<1>(a_src, chunk, p - base);
            let z = a_src[j as usize] + ad;
            let z = if z > 0.0 { z } else { 0.2 * z };
            m = m.max(z);
            w.push(z);
        }
        let mut den = 0.0f32;
        for z in w.iter_mut() {
            *z = (*z - m).exp();
            den += *z;
        }
        let mut acc = [0.0f32; F];
        for ((p, &j), &wj) in (s..e).zip(&cols[s..e]).zip(&w) {
            prefetch_ahead::<F>(h, chunk, p - base);
            let xj = &h[j as usize * F..j as usize * F + F];
            for f in 0..F {
                acc[f] += wj * xj[f];
            }
        }
        let inv = 1.0 / den;
        for f in 0..F {
            o[f] = acc[f] * inv;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gat_rows_avx2<const F: usize>(
    offsets: &[u64],
    cols: &[u32],
    h: &[f32],
    a_src: &[f32],
    a_dst: &[f32],
    rows: Range<usize>,
    out: &mut [f32],
) {
    gat_rows::<F>(offsets, cols, h, a_src, a_dst, rows, out)
}

fn gat_rows_best<const F: usize>(
    offsets: &[u64],
    cols: &[u32],
    h: &[f32],
    a_src: &[f32],
    a_dst: &[f32],
    rows: Range<usize>,
    out: &mut [f32],
) {
    dispatch!(gat_rows, gat_rows_avx2, F, (offsets, cols, h, a_src, a_dst, rows, out))
}

fn gat_graph<const F: usize>(g: &Graph, h: &[f32], a_src: &[f32], a_dst: &[f32], out: &mut [f32]) {
    let (offsets, cols) = (g.offsets(), g.cols());
    par_rows(offsets, F, out, |rows, o| gat_rows_best::<F>(offsets, cols, h, a_src, a_dst, rows, o));
}

pub fn csr_gat(g: &Graph, h: &[f32], a_src: &[f32], a_dst: &[f32], f: usize) -> Result<Vec<f32>, String> {
    let mut out = output(g.num_dst() * f);
    by_width!(f, gat_graph, (g, h, a_src, a_dst, &mut out));
    Ok(out)
}

// -------------------------------------------------------- generated stencil

/// One grid row of Jacobi smoothing with no graph at all: the neighbours are
/// index arithmetic. Missing rows above/below read a zero row and missing
/// columns are skipped, so the sums are formed in the CSR stencil's order
/// (up, down, left, right) and agree with it.
#[inline(always)]
fn stencil_row(up: &[f32], mid: &[f32], down: &[f32], out: &mut [f32]) {
    let n = mid.len();
    if n == 1 {
        out[0] = 0.25 * (up[0] + down[0]);
        return;
    }
    out[0] = 0.25 * ((up[0] + down[0]) + mid[1]);
    let (u, d, l, r) = (&up[1..n - 1], &down[1..n - 1], &mid[..n - 2], &mid[2..]);
    let o = &mut out[1..n - 1];
    for c in 0..n - 2 {
        o[c] = 0.25 * (((u[c] + d[c]) + l[c]) + r[c]);
    }
    out[n - 1] = 0.25 * ((up[n - 1] + down[n - 1]) + mid[n - 2]);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn stencil_row_avx2(up: &[f32], mid: &[f32], down: &[f32], out: &mut [f32]) {
    stencil_row(up, mid, down, out)
}

fn stencil_row_best(up: &[f32], mid: &[f32], down: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx2_fma() {
            // SAFETY: the CPU supports avx2 and fma (checked just above).
            unsafe { stencil_row_avx2(up, mid, down, out) };
            return;
        }
    }
    stencil_row(up, mid, down, out)
}

/// One Jacobi step on a `side × side` grid, `out = 0.25 · Σ neighbours`,
/// parallel over grid rows. The 4-neighbour stencil is symmetric, so the
/// same loop applied to the output's cotangent is the backward pass.
pub fn stencil_generated(side: usize, x: &[f32]) -> Vec<f32> {
    let mut out = output(side * side);
    if side == 0 {
        return out;
    }
    let zeros = vec![0.0f32; side];
    out.par_chunks_mut(side).enumerate().for_each(|(r, o)| {
        let mid = &x[r * side..(r + 1) * side];
        let up = if r > 0 { &x[(r - 1) * side..r * side] } else { &zeros[..] };
        let down = if r + 1 < side { &x[(r + 1) * side..(r + 2) * side] } else { &zeros[..] };
        stencil_row_best(up, mid, down, o);
    });
    out
}

// ------------------------------------------------------------------ STREAM

/// STREAM copy: `b[i] = a[i]` over `mib` MiB of f32, in parallel chunks on
/// the current rayon pool, counting 2 × size bytes per copy (read + write,
/// as STREAM does). One warm-up copy, then five: returns the best (STREAM's
/// convention, and what the ratios use) and the median (how noisy the
/// machine was).
pub fn stream_copy_gbs(mib: usize) -> (f64, f64) {
    let n = mib * (1 << 20) / 4;
    let a: Vec<f32> = (0..n).into_par_iter().map(|i| i as f32).collect();
    let mut b = vec![1.0f32; n]; // touched, so no page faults are timed
    let chunk = 1 << 16;
    let mut times = Vec::new();
    for _ in 0..6 {
        let t = Instant::now();
        b.par_chunks_mut(chunk).zip(a.par_chunks(chunk)).for_each(|(d, s)| d.copy_from_slice(s));
        times.push(t.elapsed().as_secs_f64());
    }
    std::hint::black_box(&b);
    let mut timed = times.split_off(1);
    timed.sort_by(f64::total_cmp);
    let gbs = |s: f64| 2.0 * (n * 4) as f64 / s / 1e9;
    (gbs(timed[0]), gbs(timed[timed.len() / 2]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Graph {
        // 0→1, 2→1, 1→0, 2→0, 0→0; row 2 empty.
        Graph::from_csr(3, 3, vec![0, 3, 5, 5], vec![1, 2, 0, 0, 2]).expect("valid")
    }

    #[test]
    fn sum_mean_max_by_hand() {
        let g = tiny();
        let x = [1.0f32, -2.0, 4.0];
        assert_eq!(csr_sum(&g, &x, 1, Post::None).expect("ok"), vec![3.0, 5.0, 0.0]);
        assert_eq!(csr_sum(&g, &x, 1, Post::Mean).expect("ok"), vec![1.0, 2.5, 0.0]);
        assert_eq!(csr_max_relu(&g, &x, 1).expect("ok"), vec![4.0, 4.0, 0.0]);
        // d sum(out)/dx[j] = number of out-edges of j.
        let gt = g.transposed();
        assert_eq!(csr_sum_backward(&g, &gt, &[1.0; 3], 1, Post::None).expect("ok"), vec![2.0, 1.0, 2.0]);
        // mean: Σ over out-edges of 1/deg(dst).
        let gm = csr_sum_backward(&g, &gt, &[1.0; 3], 1, Post::Mean).expect("ok");
        assert_eq!(gm, vec![1.0 / 3.0 + 0.5, 1.0 / 3.0, 1.0 / 3.0 + 0.5]);
        // max of relus: each row's cotangent goes to its first largest
        // positive source (x[2] = 4 wins both rows; row 2 is empty).
        assert_eq!(csr_max_relu_backward(&g, &x, &[1.0, 2.0, 5.0], 1).expect("ok"), vec![0.0, 0.0, 3.0]);
        assert!(csr_sum(&g, &x, 3, Post::None).is_err());
    }

    #[test]
    fn generated_stencil_matches_csr_stencil() {
        for side in [1, 2, 5] {
            let g = Graph::stencil_2d_4(side, side).expect("valid");
            let x: Vec<f32> = (0..side * side).map(|i| (i as f32 * 0.37).sin()).collect();
            assert_eq!(stencil_generated(side, &x), csr_sum(&g, &x, 1, Post::Scale(0.25)).expect("ok"), "side {side}");
        }
    }

    #[test]
    fn gat_weights_sum_to_one() {
        let g = tiny();
        let h = [1.0f32; 3 * 16];
        let out = csr_gat(&g, &h, &[0.1, -3.0, 2.0], &[0.0, 1.0, 0.5], 16).expect("ok");
        assert!(out[..32].iter().all(|v| (v - 1.0).abs() < 1e-6), "{out:?}");
        assert!(out[32..].iter().all(|&v| v == 0.0));
    }
}
