//! Addresses and variables: element addresses of fields, scratch and
//! outputs, widths, loop counters, and the Cranelift variables of the loop
//! IR's.

use super::*;

impl Translator<'_> {
    pub(super) fn addr(&mut self, a: &Addr) -> TResult<Value> {
        match a {
            Addr::Field { field, lanes } => {
                let f = field.0 as usize;
                let decl = self.k.fields.get(f).ok_or_else(|| format!("unknown field {f}"))?;
                let base = self.fields.get(f).copied().flatten().ok_or_else(|| format!("field {} not loaded", decl.name))?;
                let row = match decl.role {
                    Role::Src => Some(self.cur.src.ok_or_else(|| format!("src.{} read outside the edge loop", decl.name))?),
                    Role::Edge => Some(self.cur.edge.ok_or_else(|| format!("edge.{} read outside the edge loop", decl.name))?),
                    Role::Dst => Some(self.cur.row.ok_or("row index missing")?),
                    Role::Param => None,
                };
                let shift = self.shift_of(a);
                self.element(base, decl.ty, row, lanes, shift).map_err(|e| format!("{}.{}: {e}", decl.role.name(), decl.name))
            }
            Addr::Scratch { buf, lane } => {
                let base = *self.scratch.get(*buf as usize).ok_or_else(|| format!("unknown scratch{buf}"))?;
                let idx = self.lane(*lane)?;
                let bytes = self.b.ins().ishl_imm_u(idx, self.shift);
                Ok(self.b.ins().iadd(base, bytes))
            }
            Addr::Output { out, lane } => {
                let o = *out as usize;
                let decl = self.k.outputs.get(o).ok_or_else(|| format!("unknown output {o}"))?;
                let base = self.outputs.get(o).copied().flatten().ok_or_else(|| format!("output {} not loaded", decl.name))?;
                // Destination outputs are written per row, edge outputs per
                // edge (user order), parameter outputs as one array.
                let row = match decl.role {
                    Role::Edge => {
                        Some(self.cur.edge.ok_or_else(|| format!("edge output {} written outside the edge loop", decl.name))?)
                    }
                    Role::Param => None,
                    _ => Some(self.cur.row.ok_or("row index missing")?),
                };
                let lanes: Vec<LoopVar> = lane.iter().copied().collect();
                let shift = self.shift_of(a);
                self.element(base, decl.ty, row, &lanes, shift).map_err(|e| format!("output {}: {e}", decl.name))
            }
            Addr::OutputMatrix { out, row, col } => {
                let o = *out as usize;
                let decl = self.k.outputs.get(o).ok_or_else(|| format!("unknown output {o}"))?;
                let base = self.outputs.get(o).copied().flatten().ok_or_else(|| format!("output {} not loaded", decl.name))?;
                let shift = self.shift_of(a);
                self.element(base, decl.ty, None, &[*row, *col], shift).map_err(|e| format!("output {}: {e}", decl.name))
            }
        }
    }

    /// The address of element `lanes` of row `row` of an array at `base`
    /// with `ty` elements of `1 << shift` bytes per row (`None`: the
    /// array's first row), as
    /// `(base + row · row_bytes) + lane_bytes`: the row's address is shared
    /// by every lane of the row (one multiply and add per row, not per
    /// lane), and a constant lane (an unrolled feature loop) becomes the
    /// load's displacement instead of an address computed in a register.
    pub(super) fn element(&mut self, base: Value, ty: Type, row: Option<Value>, lanes: &[LoopVar], shift: i64) -> TResult<Value> {
        let (per_row, inner) = match (ty, lanes) {
            (Type::Scalar, []) => (1, None),
            (Type::Vector(w), [k]) => (self.width(w)?, Some(self.lane(*k)?)),
            (Type::Matrix(r, c), [a, b]) => {
                let cols = self.width(c)?;
                let per_row = self.width(r)?.checked_mul(cols).ok_or("matrix too large")?;
                let a = self.lane(*a)?;
                let b = self.lane(*b)?;
                let a = self.scale(a, cols);
                (per_row, Some(self.b.ins().iadd(a, b)))
            }
            _ => return Err(format!("{} lane(s) for a {ty:?}", lanes.len())),
        };
        let mut addr = base;
        if let Some(row) = row {
            let row_bytes = per_row.checked_mul(1 << shift).ok_or("row too large")?;
            let off = self.scale(row, row_bytes);
            addr = self.b.ins().iadd(addr, off);
        }
        if let Some(inner) = inner {
            let off = self.b.ins().ishl_imm_u(inner, shift);
            addr = self.b.ins().iadd(addr, off);
        }
        Ok(addr)
    }

    pub(super) fn scale(&mut self, x: Value, by: i64) -> Value {
        if by == 1 {
            x
        } else if by > 0 && by.count_ones() == 1 {
            self.b.ins().ishl_imm_u(x, i64::from(by.trailing_zeros()))
        } else {
            self.b.ins().imul_imm_s(x, by)
        }
    }

    // --- names -----------------------------------------------------------

    pub(super) fn width(&self, w: WidthId) -> TResult<i64> {
        let n = self.key.widths.get(w.0 as usize).ok_or_else(|| format!("unknown width {}", w.0))?;
        i64::try_from(*n).map_err(|_| format!("width {n} too large"))
    }

    pub(super) fn lane(&self, l: LoopVar) -> TResult<Value> {
        self.lanes.get(l.0 as usize).copied().flatten().ok_or_else(|| format!("k{} used outside its loop", l.0))
    }

    pub(super) fn never_nan(&self, v: Var) -> bool {
        self.not_nan.get(v.0 as usize).copied().unwrap_or(false)
    }

    pub(super) fn kind(&self, v: Var) -> TResult<VarKind> {
        self.k.vars.get(v.0 as usize).copied().ok_or_else(|| format!("unknown variable v{}", v.0))
    }

    pub(super) fn var(&self, v: Var) -> TResult<Variable> {
        self.vars.get(v.0 as usize).copied().ok_or_else(|| format!("unknown variable v{}", v.0))
    }

    pub(super) fn use_var(&mut self, v: Var) -> TResult<Value> {
        let var = self.var(v)?;
        self.b.try_use_var(var).map_err(|e| format!("v{}: {e}", v.0))
    }

    pub(super) fn num_var(&mut self, v: Var) -> TResult<Value> {
        match self.kind(v)? {
            VarKind::Num => self.use_var(v),
            VarKind::Bool => Err(format!("boolean v{} used as a number", v.0)),
        }
    }

    pub(super) fn bool_var(&mut self, v: Var) -> TResult<Value> {
        match self.kind(v)? {
            VarKind::Bool => self.use_var(v),
            VarKind::Num => Err(format!("number v{} used as a boolean", v.0)),
        }
    }
}
