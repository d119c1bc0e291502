//! Touching source rows ahead of the edge loop (rewritten into
//! `prefetcht0` after code generation, `prefetch.rs`).

use super::*;

impl Translator<'_> {
    /// The source fields whose rows [`Translator::touch_ahead`] touches:
    /// vectors of at least [`TOUCH_AHEAD_MIN_ROW_BYTES`], with their width,
    /// when the edge body calls no math function
    /// ([`Translator::edges_call_math`]: the touch's column pointer, chunk
    /// end and row base would be spilled around each call; attention
    /// measured 380 -> 494..619 ms forward with touches).
    pub(super) fn touched_fields(&self) -> Vec<(usize, i64)> {
        if self.edges_call_math() {
            return Vec::new();
        }
        let size = self.key.dtype.size() as i64;
        (0..self.k.fields.len())
            .filter_map(|f| {
                let decl = &self.k.fields[f];
                let n = match decl.ty {
                    Type::Vector(w) if decl.role == Role::Src => self.width(w).ok()?,
                    _ => return None,
                };
                (self.fields[f].is_some() && n * size >= TOUCH_AHEAD_MIN_ROW_BYTES).then_some((f, n))
            })
            .collect()
    }

    /// The source fields the pre-pass reads (with their row width), which
    /// it touches ahead when the body touches its rows: a softmax's score
    /// reads `a_src[j]` first in the pre-pass.
    pub(super) fn pre_touched_fields(&self) -> Vec<(usize, i64)> {
        // Not across math calls (the touch state would be spilled).
        if crate::loops::calls_math(&self.k.pre_body) {
            return Vec::new();
        }
        let read = crate::loops::fields_read(&self.k.pre_body, self.k.fields.len());
        (0..self.k.fields.len())
            .filter(|&f| read[f] && self.k.fields[f].role == Role::Src && self.fields[f].is_some())
            .filter_map(|f| match self.k.fields[f].ty {
                Type::Scalar => Some((f, 1)),
                Type::Vector(w) => self.width(w).ok().map(|n| (f, n)),
                _ => None,
            })
            .collect()
    }

    /// At edge `p`, touch the source rows of the edge [`TOUCH_AHEAD_EDGES`]
    /// further on in the chunk (past this row's end too; the chunk's last
    /// edge at most): one byte load per 64-byte line, which becomes a
    /// `prefetcht0` after code generation (`prefetch`), so that when the
    /// edge comes its row is in cache. Under feature blocking each pass
    /// touches its own block's lines. Wide rows only (a row of a line or
    /// two gained nothing: F = 16 sum 39-45 ms either way). Measured with
    /// prefetches, side by side: sum F = 64 forward 112 -> 62 ms (ahead
    /// 16/32/64 edges: 70/57/83 ms), max F = 64 forward 155 -> 83-90 ms,
    /// sum F = 128 backward 400 -> 290 ms (per-block touches).
    pub(super) fn touch_ahead(&mut self, p: Value, cols: Value, fields: &[(usize, i64)], chunk_end: Value) -> TResult<()> {
        let size = self.key.dtype.size() as i64;
        // Under feature blocking each pass touches the lines of its own
        // block: a hub row's edges outrun the cache, so lines touched by
        // the first pass for a later one are gone by the time it comes.
        let mut spans = Vec::new();
        for &(f, n) in fields {
            let Type::Vector(w) = self.k.fields[f].ty else {
                // A scalar field's element, once per edge.
                if self.block_start.unwrap_or(0) == 0 {
                    spans.push((f, n, 0, size));
                }
                continue;
            };
            let (start, lanes) = self.lane_range(w, n);
            let blocked = lanes < n;
            if blocked || self.block_start.unwrap_or(0) == 0 {
                spans.push((f, n, start * size, (start + lanes) * size));
            }
        }
        if spans.is_empty() {
            return Ok(());
        }
        let last = self.b.ins().iadd_imm_s(chunk_end, -1);
        let q = self.b.ins().iadd_imm_s(p, TOUCH_AHEAD_EDGES);
        let q = self.b.ins().umin(q, last);
        let a = self.b.ins().ishl_imm_u(q, 2);
        let a = self.b.ins().iadd(cols, a);
        let j = self.b.ins().uload32(flags(), a, 0);
        for (f, n, lo, hi) in spans {
            self.touch_lines(f, j, n, (lo..hi).step_by(64))?;
        }
        Ok(())
    }

    /// One kept (possibly trapping, so never removed) byte load at each of
    /// `offsets` in row `j` of field `f`, `n` elements wide; after code
    /// generation each becomes a `prefetcht0` where its machine code allows
    /// (`prefetch::rewrite_touch`).
    pub(super) fn touch_lines(&mut self, f: usize, j: Value, n: i64, offsets: impl IntoIterator<Item = i64>) -> TResult<()> {
        let base = self.fields.get(f).copied().flatten().ok_or("touched field not loaded")?;
        let row = self.b.ins().imul_imm_s(j, n * self.key.dtype.size() as i64);
        let row = self.b.ins().iadd(base, row);
        for off in offsets {
            let off = i32::try_from(off).map_err(|_| "row too wide")?;
            // Marked for the rewrite into `prefetcht0` (see `prefetch`).
            self.b.set_srcloc(super::super::prefetch::touch_srcloc());
            self.b.ins().load(types::I8, MemFlagsData::new(), row, off);
            self.b.set_srcloc(ir::SourceLoc::default());
        }
        Ok(())
    }

    /// In the first feature-block pass over a row's edges, touch the cache
    /// lines of source row `j` that the later blocks will read: one
    /// prefetch per 64-byte line (a marked byte load, see `prefetch`), for
    /// kernels without touch-ahead (math calls). The lines then arrive while
    /// the first block waits for its own, and the later passes, which
    /// re-walk the row's edges, find them in cache instead of paying a
    /// second round of random misses.
    pub(super) fn touch_later_blocks(&mut self, j: Value) -> TResult<()> {
        let (Some((w, n, bl)), Some(0)) = (self.blocking, self.block_start) else { return Ok(()) };
        let size = self.key.dtype.size() as i64;
        for f in 0..self.k.fields.len() {
            let decl = &self.k.fields[f];
            if decl.role != Role::Src || decl.ty != Type::Vector(w) || self.fields[f].is_none() {
                continue;
            }
            let (first, end) = (bl * size, n * size);
            let mut at: Vec<i64> = (first..end).step_by(64).collect();
            at.push(end - size);
            at.dedup();
            self.touch_lines(f, j, n, at)?;
        }
        Ok(())
    }
}
