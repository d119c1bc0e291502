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
