//! Touching source rows ahead of the edge loop (rewritten into
//! `prefetcht0` after code generation, `prefetch.rs`).

use super::*;

impl Translator<'_> {
    /// At edge `p`, touch the source rows of `fields` of the edge `ahead`
    /// positions further on in the chunk (past this row's end too; the chunk's last
    /// edge at most): one byte load per 64-byte line, which becomes a
    /// `prefetcht0` after code generation (`prefetch`), so that when the
    /// edge comes its row is in cache. Under feature blocking each pass
    /// touches its own block's lines. Wide rows only (a row of a line or
    /// two gained nothing: F = 16 sum 39-45 ms either way). Measured with
    /// prefetches, side by side: sum F = 64 forward 112 -> 62 ms (ahead
    /// 16/32/64 edges: 70/57/83 ms), max F = 64 forward 155 -> 83-90 ms,
    /// sum F = 128 backward 400 -> 290 ms (per-block touches).
    pub(super) fn touch_ahead(
        &mut self,
        p: Value,
        cols: Value,
        ahead: i64,
        fields: &[TouchedField],
        chunk_end: Value,
    ) -> TResult<()> {
        // Under feature blocking each pass touches the lines of its own
        // block: a hub row's edges outrun the cache, so lines touched by
        // the first pass for a later one are gone by the time it comes.
        let mut spans = Vec::new();
        for &TouchedField { field: f, lanes: n, .. } in fields {
            let size = self.key.storage.field(f, self.key.dtype).size() as i64;
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
        let q = self.b.ins().iadd_imm_s(p, ahead);
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
        let row = self.b.ins().imul_imm_s(j, n * self.key.storage.field(f, self.key.dtype).size() as i64);
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
    /// lines of source row `j` that the later blocks will read
    /// (`CodegenPlan::touch_later_blocks`): one prefetch per 64-byte line
    /// (a marked byte load, see `prefetch`).
    pub(super) fn touch_later_blocks(&mut self, j: Value) -> TResult<()> {
        let plan = self.plan;
        let (Some(b), Some(0)) = (plan.feature_blocks, self.block_start) else { return Ok(()) };
        for &TouchedField { field: f, lanes: n, .. } in &plan.touch_later_blocks {
            let size = self.key.storage.field(f, self.key.dtype).size() as i64;
            let (first, end) = (b.block * size, n * size);
            let mut at: Vec<i64> = (first..end).step_by(64).collect();
            at.push(end - size);
            at.dedup();
            self.touch_lines(f, j, n, at)?;
        }
        Ok(())
    }
}
