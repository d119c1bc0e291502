//! The calling convention every CPU back end compiles to: one
//! `unsafe extern "C" fn(args: *const RawArgs, row_begin: u64, row_end: u64)`
//! per variant, running the loop skeleton of [`crate::loops`] for the
//! destination rows `row_begin..row_end`. The runtime facade fills a
//! [`RawArgs`] once per call (and once per row chunk for parameter outputs).
//! Layouts of the arrays are documented in [`crate::back::cranelift`] and hold
//! for every back end.

/// The signature of a compiled variant.
pub type EntryFn = unsafe extern "C" fn(*const RawArgs, u64, u64);

/// The argument block of a compiled variant (see the module doc for the
/// layout of each array).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RawArgs {
    /// CSR row offsets, `num_dst + 1` of them.
    pub offsets: *const u64,
    /// Source id per CSR position.
    pub cols: *const u32,
    /// CSR position → user edge index. Ignored (may be null) when the
    /// variant was compiled with `edge_ids = false` (the identity).
    pub edge_ids: *const u64,
    /// One pointer per kernel field, in declaration order.
    pub fields: *const *const u8,
    /// One pointer per kernel output, in declaration order.
    pub outputs: *const *mut u8,
}

/// The generated two-dimensional stencil realization: node `i` is grid cell
/// `(i / cols, i % cols)` of a row-major `rows × cols` grid, and its in-edges
/// come from the cells at `offsets` (row, column deltas), computed from the
/// index instead of read from a CSR (`RawArgs::offsets`, `cols` and
/// `edge_ids` are unused). Out-of-grid neighbours are skipped, or wrap
/// around when `periodic`. The neighbour order is the order of `offsets`,
/// the same as `Graph::stencil` gives each CSR row, so results agree bit for
/// bit with the CSR realization of the same stencil.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Stencil2d {
    pub rows: u64,
    pub cols: u64,
    pub offsets: Vec<(i64, i64)>,
    pub periodic: bool,
}

impl Stencil2d {
    /// The interior: rows `-dr_lo .. -dr_lo + inner_r` and columns
    /// `-dc_lo .. -dc_lo + inner_c` of the grid are the cells whose every
    /// neighbour is inside it (a border as wide as the largest offset each
    /// way). Returns `(dr_lo, dc_lo, inner_r, inner_c)`; an extent is zero
    /// or negative when there is no interior.
    pub fn interior(&self) -> (i64, i64, i64, i64) {
        let (dr_lo, dr_hi) = self.offsets.iter().fold((0i64, 0i64), |(lo, hi), &(dr, _)| (lo.min(dr), hi.max(dr)));
        let (dc_lo, dc_hi) = self.offsets.iter().fold((0i64, 0i64), |(lo, hi), &(_, dc)| (lo.min(dc), hi.max(dc)));
        (dr_lo, dc_lo, self.rows as i64 - (dr_hi - dr_lo), self.cols as i64 - (dc_hi - dc_lo))
    }

    /// The transposed graph as a generated stencil: the edge `j → i` of
    /// offset `d` is the edge `i → j` of offset `-d`, and the transposed
    /// CSR lists each row's neighbours in increasing index, which on a
    /// non-periodic grid is the order of the flat offsets `dr · cols + dc`
    /// (a stable sort keeps repeated offsets in order). So the result runs
    /// bit for bit like the CSR transpose of `Graph::stencil`. Offsets that
    /// span the grid name no neighbour at all and are dropped. `None` when
    /// periodic (wrapped neighbours change the order near the borders).
    pub fn transposed(&self) -> Option<Stencil2d> {
        let (rows, cols) = (i64::try_from(self.rows).ok()?, i64::try_from(self.cols).ok()?);
        if self.periodic {
            return None;
        }
        let mut offsets: Vec<(i64, i64)> = self
            .offsets
            .iter()
            .filter(|&&(dr, dc)| dr.unsigned_abs() < rows as u64 && dc.unsigned_abs() < cols as u64)
            .map(|&(dr, dc)| (-dr, -dc))
            .collect();
        offsets.sort_by_key(|&(dr, dc)| dr.saturating_mul(cols).saturating_add(dc));
        Some(Stencil2d { offsets, ..self.clone() })
    }

    /// Each row's neighbours in reverse order (`Graph::row_reversed`).
    pub fn row_reversed(&self) -> Stencil2d {
        Stencil2d { offsets: self.offsets.iter().rev().copied().collect(), ..self.clone() }
    }
}
