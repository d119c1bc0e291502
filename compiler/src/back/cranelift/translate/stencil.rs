//! The generated-stencil realization: neighbours from the node index,
//! and rows run as vector lanes where the plan says (a stencil's interior,
//! a kernel with no edge work).

use super::*;

impl Translator<'_> {
    /// The edge loop of the generated-stencil realization: each neighbour
    /// offset in turn, its border test on the grid coordinates `(r, c)`, the
    /// body when the neighbour exists. The degree is the count of
    /// neighbours visited. Rows whose every neighbour is inside the grid
    /// (all but a border as wide as the largest offset) take a copy of the
    /// body with no tests and a constant degree where the plan says
    /// (`CodegenPlan::untested_interior`); the rest take the tested (or,
    /// periodic, wrapped) path.
    pub(super) fn generated_neighbours(&mut self, st: &tiga_abi::Stencil2d, i: Value, r: Value, c: Value) -> TResult<()> {
        let k = self.k;
        if k.reads_role(Role::Edge) {
            return Err("a generated stencil has no edge fields: use the CSR realization".into());
        }
        if !k.pre_body.is_empty() {
            self.generated_pass(st, i, r, c, StmtList::PreBody)?;
        }
        self.generated_pass(st, i, r, c, StmtList::Body)
    }

    /// One pass of [`Translator::generated_neighbours`] running list
    /// `which` per neighbour; it leaves the degree (the neighbours visited)
    /// set.
    pub(super) fn generated_pass(
        &mut self,
        st: &tiga_abi::Stencil2d,
        i: Value,
        r: Value,
        c: Value,
        which: StmtList,
    ) -> TResult<()> {
        let list = which.of(self.k);
        let (rows, cols) = (st.rows as i64, st.cols as i64);
        let count = self.b.declare_var(types::I64);
        let zero = self.b.ins().iconst(types::I64, 0);
        let (dr_lo, dc_lo, inner_r, inner_c) = st.interior();
        let join = self.b.create_block();
        if self.plan.untested_interior {
            // Interior: -dr_lo <= r < rows - dr_hi and likewise for c, as
            // one unsigned compare each.
            let fast = self.b.create_block();
            let slow = self.b.create_block();
            let rr = self.b.ins().iadd_imm_s(r, dr_lo);
            let ok_r = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, rr, inner_r);
            let cc = self.b.ins().iadd_imm_s(c, dc_lo);
            let ok_c = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, cc, inner_c);
            let inside = self.b.ins().band(ok_r, ok_c);
            self.b.ins().brif(inside, fast, &[], slow, &[]);
            self.b.seal_block(fast);
            self.b.seal_block(slow);
            self.b.switch_to_block(fast);
            for (n, &(dr, dc)) in st.offsets.iter().enumerate() {
                let j = self.b.ins().iadd_imm_s(i, dr * cols + dc);
                let seen = self.b.ins().iconst(types::I64, n as i64);
                self.cur.src = Some(j);
                self.cur.edge = None;
                self.cur.rank = Some((seen, zero));
                self.list(which, list)?;
            }
            let all = self.b.ins().iconst(types::I64, st.offsets.len() as i64);
            self.b.def_var(count, all);
            self.b.ins().jump(join, &[]);
            self.b.switch_to_block(slow);
        }
        self.b.def_var(count, zero);
        for &(dr, dc) in &st.offsets {
            let body = self.b.create_block();
            let next = self.b.create_block();
            let r2 = self.b.ins().iadd_imm_s(r, dr);
            let c2 = self.b.ins().iadd_imm_s(c, dc);
            let j = if st.periodic {
                // x mod n in [0, n) (an offset may exceed the grid: a
                // remainder, not one add or subtract).
                let wrap = |b: &mut FunctionBuilder<'_>, x: Value, n: i64| {
                    let m = b.ins().srem_imm_s(x, n);
                    let neg = b.ins().icmp_imm_s(IntCC::SignedLessThan, m, 0);
                    let up = b.ins().iadd_imm_s(m, n);
                    b.ins().select(neg, up, m)
                };
                let r3 = wrap(&mut self.b, r2, rows);
                let c3 = wrap(&mut self.b, c2, cols);
                let rr = self.b.ins().imul_imm_s(r3, cols);
                let j = self.b.ins().iadd(rr, c3);
                self.b.ins().jump(body, &[]);
                j
            } else {
                // Unsigned compares reject negatives too.
                let ok_r = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, r2, rows);
                let ok_c = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, c2, cols);
                let ok = self.b.ins().band(ok_r, ok_c);
                let j = self.b.ins().iadd_imm_s(i, dr * cols + dc);
                self.b.ins().brif(ok, body, &[], next, &[]);
                j
            };
            self.b.seal_block(body);
            self.b.switch_to_block(body);
            let seen = self.b.use_var(count);
            self.cur.src = Some(j);
            self.cur.edge = None;
            self.cur.rank = Some((seen, zero));
            self.list(which, list)?;
            let seen = self.b.use_var(count);
            let more = self.b.ins().iadd_imm_s(seen, 1);
            self.b.def_var(count, more);
            self.b.ins().jump(next, &[]);
            self.b.seal_block(next);
            self.b.switch_to_block(next);
        }
        self.b.ins().jump(join, &[]);
        self.b.seal_block(join);
        self.b.switch_to_block(join);
        self.cur.deg = Some(self.b.use_var(count));
        Ok(())
    }

    /// Rows `i .. i + vl` of a generated stencil's interior as one vector
    /// pass: the row's statements with every variable a vector, one lane
    /// per row, and the body once per neighbour offset (whose source rows
    /// `i + off .. i + off + vl` are one unaligned load).
    pub(super) fn vector_rows(&mut self, st: Option<&tiga_abi::Stencil2d>, i: Value) -> TResult<()> {
        let k = self.k;
        let (vty, _) = self.vlen();
        let vflags = MemFlagsData::new().with_notrap();
        let little = MemFlagsData::new().with_endianness(ir::Endianness::Little);
        let mut local: std::collections::HashMap<u32, Value> = std::collections::HashMap::new();
        let deg = st.map(|st| self.b.ins().iconst(types::I64, st.offsets.len() as i64));
        let zero = self.b.ins().iconst(types::I64, 0);
        self.cur = Cursor { row: Some(i), deg, src: None, edge: None, rank: None };
        let run = |t: &mut Self, list: &[Stmt], local: &mut std::collections::HashMap<u32, Value>| -> TResult<()> {
            for s in list {
                match s {
                    Stmt::Set(v, inst) => {
                        let val = t.vector_inst(inst, Axis::Rows, vty, vflags, little, local)?;
                        local.insert(v.0, val);
                    }
                    Stmt::Store(a, v) => {
                        let val = *local.get(&v.0).ok_or("a row vector stored before it was set")?;
                        let addr = t.addr(a)?;
                        t.store_vector(a, addr, val, vty, vflags)?;
                    }
                    Stmt::Loop { .. } => return Err("a feature loop in a row-vector pass".into()),
                }
            }
            Ok(())
        };
        run(self, &k.init, &mut local)?;
        let (cols, offsets) = st.map(|st| (st.cols as i64, &st.offsets[..])).unwrap_or((0, &[]));
        for (n, &(dr, dc)) in offsets.iter().enumerate() {
            let j = self.b.ins().iadd_imm_s(i, dr * cols + dc);
            let seen = self.b.ins().iconst(types::I64, n as i64);
            self.cur.src = Some(j);
            self.cur.rank = Some((seen, zero));
            run(self, &k.body, &mut local)?;
        }
        self.cur.src = None;
        self.cur.rank = None;
        run(self, &k.finish, &mut local)
    }

    // --- addresses -------------------------------------------------------
}
