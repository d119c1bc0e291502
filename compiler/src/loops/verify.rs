//! The loop IR's verifier: every handle in range and every statement in
//! the list where it can run, so that the back ends, which index the loop
//! kernel without checks, never meet a kernel they cannot compile. Run after
//! scheduling (`schedule` ends with it) and on every loop kernel built from
//! an artifact.
//!
//! What it checks, per statement list (`init`, `pre_body`, `body`,
//! `finish`):
//! - variables, feature-loop counters, width symbols, fields, scratch
//!   buffers and outputs name declared ones;
//! - a feature-loop counter is read only inside its loop, and loops over one
//!   counter do not nest;
//! - a field or output address has as many lanes as its type has axes;
//! - a scratch lane or output lane runs over the width of that buffer or
//!   output (a vector of `F` is never indexed by a loop over another width);
//! - source and edge fields, edge outputs and ranks appear only in the edge
//!   passes (`pre_body`, `body`), where an edge is current;
//! - a condition (`Select`'s first operand) is a boolean variable, a
//!   comparison's result is kept in one, and no boolean is stored to memory.

use super::{Addr, Inst, LoopKernel, LoopVar, Stmt, Var, VarKind};
use crate::ir::{Role, Type, WidthId};

/// A loop kernel that breaks one of the rules above: which kernel, which
/// statement list, and what.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("loop kernel `{kernel}`, {list}: {message}")]
pub struct LoopVerifyError {
    pub kernel: String,
    pub list: &'static str,
    pub message: String,
}

/// Check `k` (see the module doc).
pub fn verify(k: &LoopKernel) -> Result<(), LoopVerifyError> {
    let lists: [(&'static str, &[Stmt], bool); 4] =
        [("init", &k.init, false), ("pre_body", &k.pre_body, true), ("body", &k.body, true), ("finish", &k.finish, false)];
    for (name, list, edge) in lists {
        let mut v = Verifier { k, edge, open: Vec::new() };
        v.list(list).map_err(|message| LoopVerifyError { kernel: k.name.clone(), list: name, message })?;
    }
    Ok(())
}

struct Verifier<'k> {
    k: &'k LoopKernel,
    /// Whether an edge is current (the edge passes).
    edge: bool,
    /// The feature loops around the statement: counter and width.
    open: Vec<(LoopVar, WidthId)>,
}

type Check = Result<(), String>;

impl Verifier<'_> {
    fn list(&mut self, list: &[Stmt]) -> Check {
        list.iter().try_for_each(|st| self.stmt(st))
    }

    fn stmt(&mut self, st: &Stmt) -> Check {
        match st {
            Stmt::Set(x, inst) => {
                let kind = self.var(*x)?;
                self.inst(inst)?;
                if matches!(inst, Inst::Cmp(..)) && kind != VarKind::Bool {
                    return Err(format!("v{} holds a comparison but is not a boolean", x.0));
                }
                Ok(())
            }
            Stmt::Store(a, x) => {
                if self.var(*x)? == VarKind::Bool {
                    return Err(format!("v{} is a boolean: only numbers are stored", x.0));
                }
                self.addr(a)
            }
            Stmt::Loop { lane, width, body } => {
                if lane.0 >= self.k.num_loop_vars {
                    return Err(format!(
                        "feature loop over l{}, but the kernel has {} loop counters",
                        lane.0, self.k.num_loop_vars
                    ));
                }
                self.width(*width)?;
                if self.open.iter().any(|(l, _)| l == lane) {
                    return Err(format!("feature loop over l{} inside another loop over it", lane.0));
                }
                self.open.push((*lane, *width));
                let r = self.list(body);
                self.open.pop();
                r
            }
        }
    }

    fn var(&self, x: Var) -> Result<VarKind, String> {
        self.k
            .vars
            .get(x.0 as usize)
            .copied()
            .ok_or_else(|| format!("v{} is not a variable ({} declared)", x.0, self.k.vars.len()))
    }

    fn width(&self, w: WidthId) -> Check {
        if (w.0 as usize) < self.k.widths.len() {
            Ok(())
        } else {
            Err(format!("width symbol {} is not declared ({} declared)", w.0, self.k.widths.len()))
        }
    }

    /// The width of the open loop over `lane`.
    fn lane(&self, lane: LoopVar) -> Result<WidthId, String> {
        self.open.iter().find(|(l, _)| *l == lane).map(|(_, w)| *w).ok_or_else(|| format!("l{} is read outside its loop", lane.0))
    }

    fn lane_over(&self, lane: LoopVar, w: WidthId, what: &str) -> Check {
        match self.lane(lane)? {
            got if got == w => Ok(()),
            got => Err(format!("{what} of width symbol {} indexed by a loop over width symbol {}", w.0, got.0)),
        }
    }

    fn inst(&self, inst: &Inst) -> Check {
        for x in inst.operands() {
            self.var(x)?;
        }
        match inst {
            Inst::Load(a) => self.addr(a),
            Inst::Rank if !self.edge => Err("an edge's rank outside the edge passes".into()),
            Inst::Select(c, _, _) if self.var(*c)? != VarKind::Bool => Err(format!("select on v{}, which is not a boolean", c.0)),
            _ => Ok(()),
        }
    }

    fn addr(&self, a: &Addr) -> Check {
        match a {
            Addr::Field { field, lanes } => {
                let fd = self.k.fields.get(field.0 as usize).ok_or_else(|| format!("field {} is not declared", field.0))?;
                if matches!(fd.role, Role::Src | Role::Edge) && !self.edge {
                    return Err(format!("{} field `{}` read outside the edge passes", fd.role.name(), fd.name));
                }
                let axes: Vec<WidthId> = match fd.ty {
                    Type::Vector(w) => vec![w],
                    Type::Matrix(r, c) => vec![r, c],
                    _ => vec![],
                };
                if axes.len() != lanes.len() {
                    return Err(format!("field `{}` has {} axes but is read with {} lanes", fd.name, axes.len(), lanes.len()));
                }
                axes.iter().zip(lanes).try_for_each(|(w, l)| self.lane_over(*l, *w, &format!("field `{}`", fd.name)))
            }
            Addr::Scratch { buf, lane } => {
                let w = *self.k.scratch.get(*buf as usize).ok_or_else(|| format!("scratch buffer {buf} is not declared"))?;
                self.lane_over(*lane, w, &format!("scratch buffer {buf}"))
            }
            Addr::Output { out, lane } => {
                let o = self.k.outputs.get(*out as usize).ok_or_else(|| format!("output {out} is not declared"))?;
                if o.role == Role::Edge && !self.edge {
                    return Err(format!("edge output `{}` outside the edge passes", o.name));
                }
                match (o.ty, lane) {
                    (Type::Vector(w), Some(l)) => self.lane_over(*l, w, &format!("output `{}`", o.name)),
                    (Type::Scalar, None) => Ok(()),
                    _ => Err(format!("output `{}` of type {:?} addressed with lane {lane:?}", o.name, o.ty)),
                }
            }
            Addr::OutputMatrix { out, row, col } => {
                let o = self.k.outputs.get(*out as usize).ok_or_else(|| format!("output {out} is not declared"))?;
                match o.ty {
                    Type::Matrix(r, c) => {
                        self.lane_over(*row, r, &format!("output `{}`", o.name))?;
                        self.lane_over(*col, c, &format!("output `{}`", o.name))
                    }
                    t => Err(format!("output `{}` of type {t:?} addressed as a matrix", o.name)),
                }
            }
        }
    }
}
