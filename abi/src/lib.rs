//! The compiled-kernel interface: what every back end compiles to and what
//! the runtime's executor calls, and the [`DType`] both speak. It is a crate of its own, with no
//! dependencies, so that the compiler's back ends (Cranelift, the Rust
//! source of the macro path) and the runtime agree on one definition
//! without the compiler depending on the runtime or the other way round;
//! the runtime re-exports it as `tiga_runtime::abi`.
//!
//! # The entry function
//!
//! A compiled variant is one [`EntryFn`],
//! `unsafe extern "C" fn(args: *const RawArgs, row_begin: u64, row_end: u64)`,
//! which runs the loop skeleton for the destination rows
//! `row_begin..row_end`:
//!
//! ```text
//! for i in row_begin..row_end:
//!     deg = offsets[i+1] - offsets[i]
//!     <init>
//!     for p in offsets[i]..offsets[i+1]:
//!         j = cols[p]; e = if edge_ids { edge_ids[p] } else { p }
//!         <body>
//!     <finish>
//! ```
//!
//! A variant compiled for the generated stencil realization runs the same
//! skeleton with each row's neighbours computed from its index instead of
//! read from the CSR (see [`Stencil2d`]): `offsets`, `cols` and `edge_ids`
//! are unused, `deg` is the count of neighbours that exist and the rank of
//! an edge is its place among them.
//!
//! # The argument block
//!
//! [`RawArgs`] holds six pointers; code generators read them at the byte
//! offsets [`RawArgs::OFFSETS`] and the others (from `offset_of!`, never
//! written by hand). Arrays of numbers are dense, row-major, in the
//! variant's dtype, aligned to it:
//!
//! | what                        | shape              | element read       |
//! |-----------------------------|--------------------|--------------------|
//! | source field, scalar/vector | `[num_src]`, `[num_src, F]` | `j*F + k`  |
//! | destination field           | `[num_dst]`, `[num_dst, F]` | `i*F + k`  |
//! | edge field                  | `[num_edges]`, `[num_edges, F]` | `e*F + k` |
//! | parameter, scalar           | `[1]`              | `0`                |
//! | parameter, vector           | `[F]`              | `k`                |
//! | parameter, matrix           | `[R, C]`           | `r*C + c`          |
//! | output                      | `[num_dst]`, `[num_dst, F]` | `i*F + k`  |
//!
//! `stencil` points at a [`RawStencil`] (the grid and its offsets) when the
//! call runs on a generated stencil, and is null otherwise. Variants that
//! bake the geometry in (the Cranelift JIT's, one per stencil) ignore it;
//! the ahead-of-time stencil variants of the macro path, compiled before
//! any grid is known, read it.
//!
//! Calls on disjoint row ranges write disjoint output rows and may run in
//! parallel. A caller may offset `offsets`, `cols` and `edge_ids` so that
//! absolute row numbers and CSR positions land on a slice of the graph (a
//! page of a file, one segment of a long row): the code only ever reads
//! `offsets[i]` for `i` in `row_begin..=row_end` and `cols[p]`, `edge_ids[p]`
//! for `p` in those rows' ranges.

use core::mem::offset_of;

pub mod half_bits;

/// Where a field or output of a kernel lives: on the source nodes, the
/// destination nodes, the edges, or once per call (a parameter). The
/// compiler's IR declares fields with it and every runtime layer places a
/// call's arrays by it, so it is defined once, here, below both.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Role {
    Src,
    Dst,
    Edge,
    Param,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Src => "src",
            Role::Dst => "dst",
            Role::Edge => "edge",
            Role::Param => "param",
        }
    }
}

/// The element type of every field, output and arithmetic operation of a
/// call (a call picks one for all its fields): what a variant is compiled
/// for and what a tensor holds. One enum for the compiler and the runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum DType {
    F32,
    F64,
}

impl DType {
    /// The Rust name (`f32`, `f64`), as kernels spell it.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F64 => 8,
        }
    }
}

impl core::fmt::Display for DType {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// How the elements of one field or output are stored in memory: the
/// call's [`DType`], or, in an f32 call, a half-precision type (`f16`,
/// IEEE binary16; `bf16`, the upper half of an f32). A half element is
/// converted exactly to f32 when it is loaded, every operation and
/// accumulator runs in f32, and a value stored into a half output is
/// rounded to nearest, ties to even. So a half field changes only the bytes
/// a kernel moves, never its arithmetic: a memory-bound gather reads half
/// the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum FieldType {
    F32,
    F64,
    F16,
    BF16,
}

impl FieldType {
    /// Every storage type, for tests and messages.
    pub const ALL: [FieldType; 4] = [FieldType::F32, FieldType::F64, FieldType::F16, FieldType::BF16];

    /// The Rust name (`f32`, `f64`, `f16`, `bf16`), as kernels spell it.
    pub fn name(self) -> &'static str {
        match self {
            FieldType::F32 => "f32",
            FieldType::F64 => "f64",
            FieldType::F16 => "f16",
            FieldType::BF16 => "bf16",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            FieldType::F32 => 4,
            FieldType::F64 => 8,
            FieldType::F16 | FieldType::BF16 => 2,
        }
    }

    /// The dtype its values are computed in: a half type computes in f32.
    pub fn dtype(self) -> DType {
        match self {
            FieldType::F64 => DType::F64,
            FieldType::F32 | FieldType::F16 | FieldType::BF16 => DType::F32,
        }
    }

    /// Whether it is one of the half-precision types.
    pub fn is_half(self) -> bool {
        matches!(self, FieldType::F16 | FieldType::BF16)
    }
}

impl From<DType> for FieldType {
    fn from(d: DType) -> FieldType {
        match d {
            DType::F32 => FieldType::F32,
            DType::F64 => FieldType::F64,
        }
    }
}

impl core::fmt::Display for FieldType {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// The signature of a compiled variant (see the crate doc).
pub type EntryFn = unsafe extern "C" fn(*const RawArgs, u64, u64);

/// The argument block of a compiled variant (see the crate doc for the
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
    /// The generated stencil the call runs on, or null (see the crate doc).
    pub stencil: *const RawStencil,
}

impl RawArgs {
    /// Byte offset of [`RawArgs::offsets`].
    pub const OFFSETS: i32 = offset_of!(RawArgs, offsets) as i32;
    /// Byte offset of [`RawArgs::cols`].
    pub const COLS: i32 = offset_of!(RawArgs, cols) as i32;
    /// Byte offset of [`RawArgs::edge_ids`].
    pub const EDGE_IDS: i32 = offset_of!(RawArgs, edge_ids) as i32;
    /// Byte offset of [`RawArgs::fields`].
    pub const FIELDS: i32 = offset_of!(RawArgs, fields) as i32;
    /// Byte offset of [`RawArgs::outputs`].
    pub const OUTPUTS: i32 = offset_of!(RawArgs, outputs) as i32;
    /// Byte offset of [`RawArgs::stencil`].
    pub const STENCIL: i32 = offset_of!(RawArgs, stencil) as i32;

    /// An argument block with every pointer null, to be filled in.
    pub const fn empty() -> RawArgs {
        RawArgs {
            offsets: core::ptr::null(),
            cols: core::ptr::null(),
            edge_ids: core::ptr::null(),
            fields: core::ptr::null(),
            outputs: core::ptr::null(),
            stencil: core::ptr::null(),
        }
    }
}

/// A generated stencil's geometry as a variant reads it at run time
/// ([`RawArgs::stencil`]): what [`Stencil2d`] holds, in a `repr(C)` layout
/// (a `Vec` of tuples has none). The caller guarantees `rows * cols` rows
/// exist (`rows`, `cols` > 0 and their product fits the address space),
/// and that `offsets` points at `num_offsets` pairs `[dr, dc]` that live as
/// long as the call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RawStencil {
    pub rows: u64,
    pub cols: u64,
    /// 1 when out-of-grid neighbours wrap around, 0 when they are skipped.
    pub periodic: u64,
    pub num_offsets: u64,
    /// `num_offsets` (row, column) deltas, in neighbour order.
    pub offsets: *const [i64; 2],
}

impl RawStencil {
    /// The descriptor of `st`, whose offsets the caller has laid out as
    /// `pairs` ([`Stencil2d::offset_pairs`]); `pairs` must outlive every
    /// call given the descriptor.
    pub fn new(st: &Stencil2d, pairs: &[[i64; 2]]) -> RawStencil {
        RawStencil {
            rows: st.rows,
            cols: st.cols,
            periodic: u64::from(st.periodic),
            num_offsets: pairs.len() as u64,
            offsets: pairs.as_ptr(),
        }
    }
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

    /// The offsets as the `[dr, dc]` pairs [`RawStencil::offsets`] points
    /// at.
    pub fn offset_pairs(&self) -> Vec<[i64; 2]> {
        self.offsets.iter().map(|&(dr, dc)| [dr, dc]).collect()
    }

    /// Each row's neighbours in reverse order (`Graph::row_reversed`).
    pub fn row_reversed(&self) -> Stencil2d {
        Stencil2d { offsets: self.offsets.iter().rev().copied().collect(), ..self.clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The offsets code generators bake in are those of the `repr(C)`
    /// struct on this target: six pointers, one after the other.
    #[test]
    fn offsets_follow_the_struct() {
        let p = core::mem::size_of::<*const u8>() as i32;
        assert_eq!(
            [RawArgs::OFFSETS, RawArgs::COLS, RawArgs::EDGE_IDS, RawArgs::FIELDS, RawArgs::OUTPUTS, RawArgs::STENCIL],
            [0, p, 2 * p, 3 * p, 4 * p, 5 * p]
        );
        assert_eq!(core::mem::size_of::<RawArgs>() as i32, 6 * p);
        // The stencil descriptor: four u64, then a pointer.
        assert_eq!(core::mem::offset_of!(RawStencil, offsets), 32);
    }

    #[test]
    fn transposed_stencil_reverses_and_sorts_offsets() {
        let st = Stencil2d { rows: 4, cols: 5, offsets: vec![(0, 1), (1, 0), (0, -1), (-1, 0)], periodic: false };
        let t = st.transposed().expect("non-periodic");
        // Negated, then in order of the flat offset dr * cols + dc: -5, -1, 1, 5.
        assert_eq!(t.offsets, vec![(-1, 0), (0, -1), (0, 1), (1, 0)]);
        assert!(Stencil2d { periodic: true, ..st.clone() }.transposed().is_none());
        assert_eq!(st.row_reversed().offsets, vec![(-1, 0), (0, -1), (1, 0), (0, 1)]);
    }
}
