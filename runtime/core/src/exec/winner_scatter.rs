//! The winner scatter of a max/min backward (`Binding::WinnerScatter`; the
//! plan is `tiga_compiler::adjoint::scatter`'s).
//!
//! Per destination row `i` and lane `f`, the lane's cotangent goes to the
//! source of the row's winning edge: `out[col(i, winner[i][f])][f] +=
//! value[i][f]`. Rows are read in order, so each source's sum adds its
//! terms in increasing row order, whatever the thread count. Threads split
//! the lanes, not the rows: each owns a contiguous lane range of every
//! output row, so no two threads write one element and no atomics are
//! needed (and no two threads write one cache line at the widths where
//! each range covers whole lines).

use crate::tensor::{Data, DataMut, Tensor, TensorError, TensorView};

/// Why a winner scatter could not run.
#[derive(Debug, thiserror::Error)]
pub enum ScatterError {
    /// Rows whose ranks f32 cannot hold exactly.
    #[error("a row has more than 2^24 edges: the f32 backward of max/min cannot name its winning edge exactly; run in f64")]
    InexactRanks,
    #[error(transparent)]
    Alloc(#[from] TensorError),
    /// A broken promise of the caller (a bug, never the input's fault).
    #[error("{0}")]
    Internal(String),
}

type Result<T, E = ScatterError> = std::result::Result<T, E>;

/// The output pointer shared by the lane tasks.
struct Lanes<T>(*mut T);
impl<T> Clone for Lanes<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Lanes<T> {}
// SAFETY: every task writes only the elements of its own lane range (see
// `scatter_lanes`), so the tasks never touch one element concurrently.
unsafe impl<T: Send> Send for Lanes<T> {}
unsafe impl<T: Send> Sync for Lanes<T> {}

/// `out[col(i, winner[i][f])][f] += value[i][f]` into `num_src` rows of
/// the width of the winners (a vector per row, or a scalar), the forward
/// CSR's rows given in order, all at once or a block (a page) at a time.
pub struct WinnerScatter<'v> {
    winner: TensorView<'v>,
    value: TensorView<'v>,
    width: usize,
    out: Tensor,
    /// Which sources have an out-edge (the rows the per-source stage runs:
    /// a source with none gets no gradient from the edge function at all,
    /// as over the transposed graph, where its row is empty).
    has_edges: Vec<bool>,
    /// The next row expected.
    next_row: usize,
}

impl<'v> WinnerScatter<'v> {
    pub fn new(num_src: usize, num_dst: usize, winner: TensorView<'v>, value: TensorView<'v>) -> Result<Self> {
        let shape = winner.shape();
        if shape != value.shape() || shape.first() != Some(&num_dst) || shape.len() > 2 || winner.dtype() != value.dtype() {
            return Err(ScatterError::Internal(format!(
                "winner scatter over {num_dst} rows got {} winners of shape {:?} and {} cotangents of shape {:?}",
                winner.dtype(),
                shape,
                value.dtype(),
                value.shape()
            )));
        }
        let width = shape.get(1).copied().unwrap_or(1);
        let mut out_shape = shape.to_vec();
        out_shape[0] = num_src;
        let out = Tensor::zeros(value.dtype(), out_shape)?;
        Ok(WinnerScatter { winner, value, width, out, has_edges: vec![false; num_src], next_row: 0 })
    }

    /// The rows from `first_row` on whose absolute CSR positions are
    /// `offsets` (one more than the rows), `cols` the columns of positions
    /// `offsets[0]..offsets[last]`. Rows come in order, each once.
    pub fn add_rows(&mut self, first_row: usize, offsets: &[u64], cols: &[u32]) -> Result<()> {
        let base = offsets.first().copied().unwrap_or(0) as usize;
        let end = offsets.last().copied().unwrap_or(0) as usize;
        if first_row != self.next_row || end.saturating_sub(base) != cols.len() {
            return Err(ScatterError::Internal(format!(
                "winner scatter expected row {} with its columns, got row {first_row} with {} columns for {} edges",
                self.next_row,
                cols.len(),
                end.saturating_sub(base)
            )));
        }
        self.next_row += offsets.len().saturating_sub(1);
        let g = Rows { offsets, cols, base, first_row, width: self.width };
        let seen = &mut self.has_edges;
        match (self.winner.data(), self.value.data(), self.out.data_mut()) {
            (Data::F32(w), Data::F32(v), DataMut::F32(o)) => {
                f32_ranks_exact(offsets)?;
                g.scatter(w, v, o, seen);
            }
            (Data::F64(w), Data::F64(v), DataMut::F64(o)) => g.scatter(w, v, o, seen),
            _ => return Err(ScatterError::Internal("winner scatter of mixed element types".into())),
        }
        Ok(())
    }

    /// The sums, and which sources have an out-edge.
    pub fn finish(self) -> (Tensor, Vec<bool>) {
        (self.out, self.has_edges)
    }
}

/// A block of the forward CSR's rows and the row width.
struct Rows<'g> {
    /// Absolute positions, one more than the rows.
    offsets: &'g [u64],
    /// The columns of positions `base..`.
    cols: &'g [u32],
    base: usize,
    /// The row of `offsets[0]`.
    first_row: usize,
    width: usize,
}

/// Refuse rows whose ranks f32 cannot hold exactly (a max/min's winner is
/// named by its rank in the row, in the call's dtype).
pub fn f32_ranks_exact(offsets: &[u64]) -> Result<()> {
    if offsets.windows(2).any(|r| r[1].saturating_sub(r[0]) > 1 << 24) {
        return Err(ScatterError::InexactRanks);
    }
    Ok(())
}

/// An element type of the scatter: a rank compares exactly (ranks below
/// 2^24 in f32, which `f32_ranks_exact` checks).
trait Lane: Copy + Send + Sync + PartialEq + std::ops::Add<Output = Self> {
    const ZERO: Self;
    fn rank(k: usize) -> Self;
}
impl Lane for f32 {
    const ZERO: f32 = 0.0;
    fn rank(k: usize) -> f32 {
        k as f32
    }
}
impl Lane for f64 {
    const ZERO: f64 = 0.0;
    fn rank(k: usize) -> f64 {
        k as f64
    }
}

/// Edges ahead whose output rows are touched before they are added to.
const TOUCH_AHEAD: usize = 16;

impl Rows<'_> {
    fn scatter<T: Lane>(&self, winner: &[T], value: &[T], out: &mut [T], seen: &mut [bool]) {
        let tasks = rayon::current_num_threads().clamp(1, self.width.max(1));
        let ptr = Lanes(out.as_mut_ptr());
        let len = out.len();
        rayon::scope(|s| {
            // The sources with edges, beside the lane tasks.
            s.spawn(|_| {
                for &j in self.cols {
                    if let Some(x) = seen.get_mut(j as usize) {
                        *x = true;
                    }
                }
            });
            for t in 0..tasks {
                let lanes = t * self.width / tasks..(t + 1) * self.width / tasks;
                s.spawn(move |_| self.scatter_lanes(lanes, winner, value, ptr, len));
            }
        });
    }

    /// One task's lanes of every row, rows in increasing order. Per edge,
    /// the lanes the edge won add their cotangents into its source's row;
    /// the others add +0, which changes no sum (a sum from +0 is never -0),
    /// so each edge is one contiguous read-modify-write of the source's
    /// lanes, touched `TOUCH_AHEAD` edges ahead. A rank no edge has (an
    /// empty row's, or NaN) adds nothing anywhere.
    fn scatter_lanes<T: Lane>(&self, lanes: std::ops::Range<usize>, winner: &[T], value: &[T], out: Lanes<T>, len: usize) {
        let w = self.width;
        let n = lanes.len();
        if n == 0 || w == 0 {
            return;
        }
        let num_src = len / w;
        for (k, row) in self.offsets.windows(2).enumerate() {
            let i = self.first_row + k;
            let (start, end) = ((row[0] as usize).saturating_sub(self.base), (row[1] as usize).saturating_sub(self.base));
            let at = i * w + lanes.start..i * w + lanes.end;
            let (Some(wrow), Some(vrow)) = (winner.get(at.clone()), value.get(at)) else { continue };
            for p in start..end {
                if let Some(&ahead) = self.cols.get(p + TOUCH_AHEAD) {
                    touch(out, ahead as usize * w + lanes.start, n, len);
                }
                let Some(&j) = self.cols.get(p) else { continue };
                let j = j as usize;
                if j >= num_src {
                    continue;
                }
                // SAFETY: `out` points at `len` = num_src * w elements that
                // outlive the tasks; `j < num_src`, so lanes `lanes` of row
                // `j` are in bounds, and no other task's lane range overlaps
                // them, so this is the only reference to those elements.
                let orow = unsafe { std::slice::from_raw_parts_mut(out.0.add(j * w + lanes.start), n) };
                let r = T::rank(p - start);
                for ((o, &win), &v) in orow.iter_mut().zip(wrow).zip(vrow) {
                    *o = *o + if win == r { v } else { T::ZERO };
                }
            }
        }
    }
}

/// Ask for the cache lines of `n` elements at `at` (a hint; nothing is read).
fn touch<T>(out: Lanes<T>, at: usize, n: usize, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let line = 64 / std::mem::size_of::<T>().max(1);
        let mut k = 0;
        while k < n && at + k < len {
            // SAFETY: a prefetch of an in-bounds address reads nothing and
            // cannot fault.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(out.0.add(at + k) as *const i8);
            }
            k += line;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (out, at, n, len);
}
