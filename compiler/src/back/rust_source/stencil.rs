//! The generated-stencil variant of the Rust-source back end.
//!
//! The macro compiles its variants before any grid exists, so unlike the
//! Cranelift JIT (which bakes one stencil's rows, columns and offsets into
//! each variant) this variant reads the geometry from the argument block
//! at run time ([`tiga_abi::RawStencil`] behind `RawArgs::stencil`) and
//! serves every generated stencil. Per row it carries the grid coordinates
//! `(r, c)` and visits the offsets in order, exactly as
//! `translate/stencil.rs` and [`tiga_abi::Stencil2d`] define the
//! realization: an out-of-grid neighbour is skipped (or wrapped, periodic),
//! an edge's rank is its place among the neighbours visited and the degree
//! is their count. So each row runs the same scalar operations in the same
//! order as the JIT's stencil variant and as the CSR of `Graph::stencil`,
//! and the results agree bit for bit.
//!
//! Only kernels whose values are scalars per row get one (see
//! [`stencil_refusal`] for the measurements behind that). The emitted rows
//! function, abridged:
//!
//! ```text
//! interior bounds r_lo..r_hi, c_lo..c_hi from the offsets' extremes
//! for i in row_begin..row_end (carrying r, c):
//!     if (r, c) is interior:
//!         if whole blocks of rows fit before the interior's end in this
//!         grid row (or the chunk's end):
//!             per block of ROW_BLOCK rows: deg = num_offsets,
//!             <init>; for n: j = i + dr*cols + dc, rank = n, <body>; <finish>,
//!             each statement a loop over the block's rows (LLVM makes it
//!             SIMD); continue
//!         deg = num_offsets
//!         <init>; for n: j = i + dr*cols + dc, rank = n, <body>; <finish>
//!     else:
//!         deg = neighbours that exist
//!         <init>; for n: wrap or skip, j = r2*cols + c2, rank = seen++, <body>
//!         <finish>
//! ```

use std::fmt::Write as _;

use super::{close_variant, open_variant, Emitter, RustSourceError};
use crate::ir::{DType, Role};
use crate::loops::{verify, LoopKernel, Stmt, Storage, VarKind};

/// Bytes of one scalar per row block: 32 rows in f32, 16 in f64, four
/// 256-bit vectors per statement. Each neighbour's offset is read at run
/// time, once per block, so a longer block spreads that and the block's
/// loop overhead over more rows; with 8 rows the interior of a
/// four-neighbour `Smoothing` ran at 1.4x the JIT's time, with 32 at 0.9x.
/// The rows after a grid row's last block run in blocks of
/// [`SHORT_BLOCK_BYTES`], then one at a time.
const ROW_BLOCK_BYTES: usize = 128;

/// Bytes of one scalar per short block (8 rows in f32, 4 in f64, one
/// 256-bit vector), for the rows after a grid row's last long block: on
/// the benchmark's 500-wide grid 18 rows of each grid row's 498 are left
/// after the long blocks, and one at a time they took `Smoothing` to
/// 1.05-1.7x the JIT's time.
const SHORT_BLOCK_BYTES: usize = 32;

/// Why kernel `k` has no generated-stencil variant, or `None` when it has
/// one. A generated stencil has no edge ids (so no edge fields or edge
/// outputs), and the runtime refuses parameter outputs on it, so a variant
/// for those would be dead code in the user's crate.
///
/// And only kernels whose values are all scalars per row (no feature
/// loops, no scratch) get one: their interior runs in blocks of rows that
/// LLVM vectorizes (the module doc shows the loop), at 0.59-0.96x the
/// JIT's time on one thread (`Smoothing` 0.94-0.96x, with nine neighbours
/// 0.70-0.78x, `Top2Sum` 0.59-0.79x). A kernel with feature loops would loop over its
/// neighbours at run time, once per row, where the JIT unrolls the grid's
/// few offsets: at F = 4 that took 1.45-1.72x the JIT's time (`VecSum`,
/// `MaxPool`, `SageMean`, `GatAttention`), and 0.8-1.0x at F = 64, for
/// 65% (widths up to 16) to 120% (all widths) more build time of a crate
/// of such kernels. So those keep the JIT.
pub fn stencil_refusal(k: &LoopKernel) -> Option<&'static str> {
    if k.fields.iter().any(|f| f.role == Role::Edge) {
        return Some("it reads edge fields");
    }
    if k.outputs.iter().any(|o| o.role == Role::Edge) {
        return Some("it writes edge outputs");
    }
    if k.outputs.iter().any(|o| o.role == Role::Param) {
        return Some("it writes parameter outputs");
    }
    let lists = [&k.init, &k.pre_body, &k.body, &k.finish];
    if !k.scratch.is_empty() || lists.iter().any(|l| l.iter().any(|s| matches!(s, Stmt::Loop { .. }))) {
        return Some("it has feature loops, which the JIT's stencil variant runs faster (its grid baked in)");
    }
    None
}

/// The source of the generated-stencil variant of `k`: an
/// `unsafe extern "C" fn NAME(args, begin, end)` with the ABI of
/// [`tiga_abi`] that reads the grid from `RawArgs::stencil` (non-null, as
/// the ABI says for a call on a generated stencil) and ignores the CSR
/// pointers. Refused ([`RustSourceError::NotStencil`]) for kernels
/// [`stencil_refusal`] names.
pub fn emit_stencil_variant(
    k: &LoopKernel,
    dtype: DType,
    widths: &[usize],
    fn_name: &str,
    abi: &str,
) -> Result<String, RustSourceError> {
    verify(k)?;
    if let Some(why) = stencil_refusal(k) {
        return Err(RustSourceError::NotStencil { kernel: k.name.clone(), why });
    }
    let storage = Storage::default();
    let mut e = Emitter::new(k, dtype, widths, &storage, abi);
    let body_start = open_variant(
        &mut e,
        fn_name,
        &[
            ("st_rows: u64", "(*a.stencil).rows"),
            ("st_cols: u64", "(*a.stencil).cols"),
            ("st_periodic: bool", "(*a.stencil).periodic != 0"),
            ("st_offsets: *const [i64; 2]", "(*a.stencil).offsets"),
            ("st_num: usize", "(*a.stencil).num_offsets as usize"),
        ],
    );
    let t = e.t;
    let out = |e: &mut Emitter<'_>, line: &str| {
        let _ = writeln!(e.out, "{line}");
    };
    // The interior: the cells whose every neighbour is inside the grid
    // (saturating: an offset may be as large as i64 allows).
    out(&mut e, "    if row_begin >= row_end { return; }");
    out(&mut e, "    let (rows, cols) = (st_rows as i64, st_cols as i64);");
    out(&mut e, "    let (mut dr_lo, mut dr_hi, mut dc_lo, mut dc_hi) = (0i64, 0i64, 0i64, 0i64);");
    out(&mut e, "    for n in 0..st_num {");
    out(&mut e, "        let [dr, dc] = *st_offsets.add(n);");
    out(&mut e, "        dr_lo = dr_lo.min(dr); dr_hi = dr_hi.max(dr); dc_lo = dc_lo.min(dc); dc_hi = dc_hi.max(dc);");
    out(&mut e, "    }");
    out(&mut e, "    let (r_lo, r_hi) = (dr_lo.saturating_neg(), rows.saturating_sub(dr_hi));");
    out(&mut e, "    let (c_lo, c_hi) = (dc_lo.saturating_neg(), cols.saturating_sub(dc_hi));");
    // Each variable once per row of a block.
    let rows_per_block = ROW_BLOCK_BYTES / dtype.size();
    let l = rows_per_block;
    for (x, kind) in k.vars.iter().enumerate() {
        match kind {
            VarKind::Num => out(&mut e, &format!("    let mut w{x}: [{t}; {l}] = [0.0; {l}];")),
            VarKind::Bool => out(&mut e, &format!("    let mut w{x}: [bool; {l}] = [false; {l}];")),
        }
    }
    // Coordinates of the first row by one division, then carried.
    out(&mut e, "    let mut r = (row_begin / st_cols) as i64;");
    out(&mut e, "    let mut c = (row_begin % st_cols) as i64;");
    out(&mut e, "    let mut i = row_begin as usize;");
    out(&mut e, "    let rows_end = row_end as usize;");
    out(&mut e, "    while i < rows_end {");
    // The interior in long blocks, then short ones, then the rows left one
    // at a time, without tests.
    out(&mut e, "        if r >= r_lo && r < r_hi && c >= c_lo && c < c_hi {");
    interior_blocks(&mut e, rows_per_block)?;
    interior_blocks(&mut e, SHORT_BLOCK_BYTES / dtype.size())?;
    out(&mut e, "            let deg = st_num;");
    one_row(
        &mut e,
        None,
        &[
            "let [dr, dc] = *st_offsets.add(n);",
            "let j = (i as i64).wrapping_add(dr.wrapping_mul(cols).wrapping_add(dc)) as usize;",
            "let rank = n;",
        ],
    )?;
    out(&mut e, "        } else {");
    // A row of the border: each neighbour tested, wrapped or skipped; the
    // degree counted first, since `init` may read it.
    out(&mut e, "            let mut deg = 0usize;");
    out(&mut e, "            for n in 0..st_num {");
    out(&mut e, "                let [dr, dc] = *st_offsets.add(n);");
    out(&mut e, "                let inside = (r.wrapping_add(dr) as u64) < st_rows && (c.wrapping_add(dc) as u64) < st_cols;");
    out(&mut e, "                if st_periodic || inside {");
    out(&mut e, "                    deg += 1;");
    out(&mut e, "                }");
    out(&mut e, "            }");
    one_row(
        &mut e,
        Some("let mut seen = 0usize;"),
        &[
            "let [dr, dc] = *st_offsets.add(n);",
            "let (mut r2, mut c2) = (r.wrapping_add(dr), c.wrapping_add(dc));",
            "if st_periodic {",
            "    r2 = r2.rem_euclid(rows);",
            "    c2 = c2.rem_euclid(cols);",
            "} else if (r2 as u64) >= st_rows || (c2 as u64) >= st_cols {",
            "    continue;",
            "}",
            "let j = (r2 * cols + c2) as usize;",
            "let rank = seen;",
            "seen += 1;",
        ],
    )?;
    out(&mut e, "        }");
    out(&mut e, "        i += 1;");
    out(&mut e, "        c += 1;");
    out(&mut e, "        if c == cols { c = 0; r += 1; }");
    out(&mut e, "    }");
    Ok(close_variant(e, body_start, fn_name))
}

/// One row, inside the row loop's `if`: `init`; each edge pass (`pre_body`
/// when there is one, then `body`) after `before` in a loop over the
/// offsets `n` whose first lines are `header` (they define `j` and `rank`
/// and may `continue` past a neighbour); `finish`.
fn one_row(e: &mut Emitter<'_>, before: Option<&str>, header: &[&str]) -> Result<(), RustSourceError> {
    let k = e.k;
    e.stmts(&k.init, 3)?;
    for pass in k.edge_passes() {
        if let Some(line) = before {
            let _ = writeln!(e.out, "            {line}");
        }
        let _ = writeln!(e.out, "            for n in 0..st_num {{");
        for line in header {
            let _ = writeln!(e.out, "                {line}");
        }
        e.stmts(pass, 4)?;
        let _ = writeln!(e.out, "            }}");
    }
    e.stmts(&k.finish, 3)
}

/// The interior in blocks of `l` rows while the grid row's interior and
/// the chunk have them: every statement a loop over the block's rows,
/// every variable an array of `l` (the JIT's row vectors, left to LLVM to
/// vectorize), the same operations per row in the same order. Continues
/// the row loop after the blocks; fewer than `l` rows fall through to the
/// one-row path.
fn interior_blocks(e: &mut Emitter<'_>, l: usize) -> Result<(), RustSourceError> {
    let k = e.k;
    let out = |e: &mut Emitter<'_>, line: &str| {
        let _ = writeln!(e.out, "{line}");
    };
    // Whole blocks up to the end of this grid row's interior, or of the
    // chunk.
    out(e, &format!("            let run = ((c_hi - c) as usize).min(rows_end - i) / {l} * {l};"));
    out(e, "            if run > 0 {");
    out(e, "                let stop = i + run;");
    out(e, "                let deg = st_num;");
    out(e, "                while i < stop {");
    out(e, "                    let i0 = i;");
    e.block = true;
    let lanes = |e: &mut Emitter<'_>, list: &[Stmt], depth: usize, j: bool| -> Result<(), RustSourceError> {
        let pad = "    ".repeat(depth);
        let _ = writeln!(e.out, "{pad}for l in 0..{l}usize {{");
        let _ = writeln!(e.out, "{pad}    let i = i0 + l;");
        if j {
            let _ = writeln!(e.out, "{pad}    let j = i.wrapping_add(flat);");
        }
        e.stmts(list, depth + 1)?;
        let _ = writeln!(e.out, "{pad}}}");
        Ok(())
    };
    lanes(e, &k.init, 5, false)?;
    for pass in k.edge_passes() {
        out(e, "                    for n in 0..st_num {");
        out(e, "                        let [dr, dc] = *st_offsets.add(n);");
        out(e, "                        let flat = dr.wrapping_mul(cols).wrapping_add(dc) as usize;");
        out(e, "                        let rank = n;");
        lanes(e, pass, 6, true)?;
        out(e, "                    }");
    }
    lanes(e, &k.finish, 5, false)?;
    e.block = false;
    out(e, &format!("                    i += {l};"));
    out(e, "                }");
    out(e, "                c += run as i64;");
    out(e, "                if c == cols { c = 0; r += 1; }");
    out(e, "                continue;");
    out(e, "            }");
    Ok(())
}
