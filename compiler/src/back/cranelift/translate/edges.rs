//! Loops: the header-style loop skeleton, and the CSR edge loops (plain,
//! several edges per iteration, or in tiles for bodies that call math
//! functions, as the plan says).

use super::*;

impl Translator<'_> {
    /// Open `for counter in start..end` as a header-style loop (the shape
    /// that lets Cranelift fold loads into arithmetic and keep accumulators
    /// in registers): jump to a header taking the counter as a block
    /// parameter, branch to the body or the exit, and leave the builder in
    /// the body.
    pub(super) fn open_loop(&mut self, start: Value, end: Bound) -> OpenLoop {
        let header = self.b.create_block();
        let body = self.b.create_block();
        let exit = self.b.create_block();
        let counter = self.b.append_block_param(header, types::I64);
        self.b.ins().jump(header, &[BlockArg::Value(start)]);
        self.b.switch_to_block(header);
        let more = match end {
            Bound::Value(v) => self.b.ins().icmp(IntCC::UnsignedLessThan, counter, v),
            Bound::Imm(n) => self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, counter, n),
        };
        self.b.ins().brif(more, body, &[], exit, &[]);
        self.b.seal_block(body);
        self.b.seal_block(exit);
        self.b.switch_to_block(body);
        OpenLoop { header, exit, counter }
    }

    /// Step the counter, jump back to the header and continue after the loop.
    pub(super) fn close_loop(&mut self, l: OpenLoop, step: i64) {
        let next = self.b.ins().iadd_imm_s(l.counter, step);
        self.close_loop_at(l, next);
    }

    /// Jump back to the header with the counter's next value `next` and
    /// continue after the loop.
    pub(super) fn close_loop_at(&mut self, l: OpenLoop, next: Value) {
        self.b.ins().jump(l.header, &[BlockArg::Value(next)]);
        self.b.seal_block(l.header);
        self.b.switch_to_block(l.exit);
    }

    /// The CSR edge loop of one row: `for p in first..end`, with `j` and
    /// `e` loaded for `which` (the body, or the pre-pass, which touches
    /// ahead the source fields it reads when the body touches its rows:
    /// it is the first to gather them).
    pub(super) fn csr_edges(
        &mut self,
        first: Value,
        end: Value,
        cols: Option<Value>,
        edge_ids: Option<Value>,
        which: StmtList,
    ) -> TResult<()> {
        let main = which == StmtList::Body;
        if main && self.plan.tiles.is_some() {
            return self.tiled_edges(first, end, cols, edge_ids);
        }
        let list = which.of(self.k);
        let touch = if main { Touch::Main } else { Touch::Pre };
        let unroll = if main { self.plan.edge_unroll.body } else { self.plan.edge_unroll.pre_pass };
        let unroll = unroll.ok_or("internal: an edge loop the plan has not")?;
        let mut start = first;
        if unroll > 1 {
            // The first `degree % unroll` edges one at a time, the rest
            // `unroll` per iteration: the edges in order, as LLVM unrolls
            // the ahead-of-time variant's loop.
            let n = self.b.ins().isub(end, first);
            let rest = self.b.ins().band_imm_s(n, unroll - 1);
            start = self.b.ins().iadd(first, rest);
            let edge = self.open_loop(first, Bound::Value(start));
            self.edge_cursor(edge.counter, first, cols, edge_ids, touch)?;
            self.list(which, list)?;
            self.close_loop(edge, 1);
        }
        let edge = self.open_loop(start, Bound::Value(end));
        for k in 0..unroll {
            let p = if k == 0 { edge.counter } else { self.b.ins().iadd_imm_s(edge.counter, k) };
            self.edge_cursor(p, first, cols, edge_ids, touch)?;
            self.list(which, list)?;
        }
        self.close_loop(edge, unroll);
        Ok(())
    }

    /// The main edge loop of a split body ([`crate::loops::split_calls`]):
    /// per tile of [`crate::loops::EDGE_TILE`] edges, the scalar part for
    /// each edge (its carried values stored in a stack buffer), then the
    /// feature loops for each edge with no call among them, so promoted
    /// accumulators stay in registers (GatAttention's weights: one `exp`
    /// call per edge, which clobbers every vector register).
    pub(super) fn tiled_edges(&mut self, first: Value, end: Value, cols: Option<Value>, edge_ids: Option<Value>) -> TResult<()> {
        let tiles = self.plan.tiles.as_ref().ok_or("internal: no edge tiles")?;
        let (split, tile) = (&tiles.split, tiles.edges as i64);
        let size = 1i64 << self.shift;
        let n = split.carried.len() as i64;
        let slot = match self.tile_slot {
            Some(s) => s,
            None => {
                let bytes = u32::try_from((tile * n * size).max(size)).map_err(|_| "tile buffer too large")?;
                let s = self.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, bytes, 4));
                self.tile_slot = Some(s);
                s
            }
        };
        let outer = self.open_loop(first, Bound::Value(end));
        let p0 = outer.counter;
        let p0t = self.b.ins().iadd_imm_s(p0, tile);
        let p1 = self.b.ins().umin(p0t, end);
        let base = self.b.ins().stack_addr(types::I64, slot, 0);
        let at = |t: &mut Self, p: Value| {
            let k = t.b.ins().isub(p, p0);
            let k = t.b.ins().imul_imm_s(k, n * size);
            t.b.ins().iadd(base, k)
        };
        // The scalar part, keeping the carried values.
        let l1 = self.open_loop(p0, Bound::Value(p1));
        self.edge_cursor(l1.counter, first, cols, edge_ids, Touch::Nothing)?;
        let run = self.list(StmtList::Body, &split.scalar).and_then(|_| {
            let a = at(self, l1.counter);
            for (c, v) in split.carried.iter().enumerate() {
                let x = self.use_var(*v)?;
                self.b.ins().store(flags(), x, a, c as i32 * size as i32);
            }
            Ok(())
        });
        self.close_loop(l1, 1);
        // The loops, reading them back: once per feature block (each pass
        // over the tile's edges updates its block's registers), or once.
        let blocks: Vec<Option<i64>> = match self.plan.feature_blocks {
            Some(b) => b.starts().map(Some).collect(),
            None => vec![None],
        };
        let mut run = run;
        for start in blocks {
            self.block_start = start;
            let l2 = self.open_loop(p0, Bound::Value(p1));
            run = run.and_then(|_| self.edge_cursor(l2.counter, first, cols, edge_ids, Touch::Main)).and_then(|_| {
                let a = at(self, l2.counter);
                for (c, v) in split.carried.iter().enumerate() {
                    let x = self.b.ins().load(self.num, flags(), a, c as i32 * size as i32);
                    let var = self.var(*v)?;
                    self.b.try_def_var(var, x).map_err(|e| format!("v{}: {e}", v.0))?;
                }
                self.list(StmtList::Body, &split.loops)
            });
            self.close_loop(l2, 1);
        }
        self.block_start = None;
        self.close_loop_at(outer, p1);
        run
    }

    /// Inside an edge loop at position `p` of a row starting at `first`:
    /// load `j` and `e`, set the cursor, and (`touch`) touch rows ahead.
    pub(super) fn edge_cursor(
        &mut self,
        p: Value,
        first: Value,
        cols: Option<Value>,
        edge_ids: Option<Value>,
        touch: Touch,
    ) -> TResult<()> {
        if let Some(cols) = cols {
            let a = self.b.ins().ishl_imm_u(p, 2);
            let a = self.b.ins().iadd(cols, a);
            let j = self.b.ins().uload32(flags(), a, 0);
            self.cur.src = Some(j);
            let plan = self.plan;
            match (&plan.touch_ahead, self.chunk_end, touch) {
                (Some(t), Some(chunk_end), Touch::Main) => self.touch_ahead(p, cols, t.edges, &t.fields, chunk_end)?,
                (None, _, Touch::Main) => self.touch_later_blocks(j)?,
                (Some(t), Some(chunk_end), Touch::Pre) => self.touch_ahead(p, cols, t.edges, &t.pre_fields, chunk_end)?,
                _ => {}
            }
        }
        self.cur.edge = Some(match edge_ids {
            Some(ids) => {
                let a = self.b.ins().ishl_imm_u(p, 3);
                let a = self.b.ins().iadd(ids, a);
                self.b.ins().load(types::I64, flags(), a, 0)
            }
            None => p,
        });
        self.cur.rank = Some((p, first));
        Ok(())
    }
}
