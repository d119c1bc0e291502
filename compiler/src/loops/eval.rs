//! A direct evaluator of the loop IR in f64, so the scheduler is checked
//! against the reference interpreter without any back end in between.

use super::{Addr, Inst, LoopKernel, Stmt};
use crate::interp::{apply_binary, apply_cmp, apply_unary, Array};
use crate::ir::{BinOp, Role, UnOp};

struct Machine<'a> {
    k: &'a LoopKernel,
    widths: &'a [usize],
    fields: &'a [Array],
    vars: Vec<f64>,
    lanes: Vec<usize>,
    scratch: Vec<Vec<f64>>,
    outputs: &'a mut [Array],
    i: usize,
    j: usize,
    e: usize,
    rank: usize,
    degree: usize,
}

impl Machine<'_> {
    fn index(&self, a: &Addr) -> (usize, usize) {
        match a {
            Addr::Field { field, lanes } => {
                let fd = &self.k.fields[field.0 as usize];
                let arr = &self.fields[field.0 as usize];
                let row_len: usize = arr.shape.iter().skip(1).product();
                let base = match fd.role {
                    Role::Src => self.j * row_len,
                    Role::Dst => self.i * row_len,
                    Role::Edge => self.e * row_len,
                    Role::Param => 0,
                };
                let off = match lanes.as_slice() {
                    [] => 0,
                    [l] => self.lanes[l.0 as usize],
                    [r, c] => self.lanes[r.0 as usize] * arr.shape[1] + self.lanes[c.0 as usize],
                    _ => 0,
                };
                (field.0 as usize, base + off)
            }
            _ => (0, 0),
        }
    }

    fn load(&self, a: &Addr) -> f64 {
        match a {
            Addr::Field { field, .. } => self.fields[field.0 as usize].data[self.index(a).1],
            Addr::Scratch { buf, lane } => self.scratch[*buf as usize][self.lanes[lane.0 as usize]],
            Addr::Output { out, lane } => {
                let o = &self.outputs[*out as usize];
                o.data[self.output_index(*out, *lane)]
            }
            Addr::OutputMatrix { out, row, col } => {
                let o = &self.outputs[*out as usize];
                o.data[self.lanes[row.0 as usize] * o.shape[1] + self.lanes[col.0 as usize]]
            }
        }
    }

    fn output_index(&self, out: u32, lane: Option<super::LoopVar>) -> usize {
        let o = &self.outputs[out as usize];
        let w: usize = match self.k.outputs[out as usize].role {
            Role::Param => 0,
            _ => o.shape.iter().skip(1).product(),
        };
        let row = match self.k.outputs[out as usize].role {
            Role::Edge => self.e,
            Role::Param => 0,
            _ => self.i,
        };
        row * w + lane.map(|l| self.lanes[l.0 as usize]).unwrap_or(0)
    }

    fn store(&mut self, a: &Addr, v: f64) {
        match a {
            Addr::Scratch { buf, lane } => {
                let l = self.lanes[lane.0 as usize];
                self.scratch[*buf as usize][l] = v;
            }
            Addr::Output { out, lane } => {
                let at = self.output_index(*out, *lane);
                self.outputs[*out as usize].data[at] = v;
            }
            Addr::OutputMatrix { out, row, col } => {
                let cols = self.outputs[*out as usize].shape[1];
                let at = self.lanes[row.0 as usize] * cols + self.lanes[col.0 as usize];
                self.outputs[*out as usize].data[at] = v;
            }
            Addr::Field { .. } => {}
        }
    }

    fn run(&mut self, stmts: &[Stmt]) {
        for s in stmts {
            match s {
                Stmt::Set(v, inst) => {
                    let g = |x: &super::Var| self.vars[x.0 as usize];
                    let b = |x: f64| x != 0.0;
                    let val = match inst {
                        Inst::Const(c) => *c,
                        Inst::Load(a) => self.load(a),
                        Inst::Copy(x) => g(x),
                        Inst::Degree => self.degree as f64,
                        Inst::Rank => self.rank as f64,
                        Inst::Unary(UnOp::Not, x) => f64::from(u8::from(!b(g(x)))),
                        Inst::Unary(u, x) => apply_unary(*u, g(x)),
                        Inst::Binary(BinOp::And, x, y) => f64::from(u8::from(b(g(x)) && b(g(y)))),
                        Inst::Binary(BinOp::Or, x, y) => f64::from(u8::from(b(g(x)) || b(g(y)))),
                        Inst::Binary(o, x, y) => apply_binary(*o, g(x), g(y)),
                        Inst::Powi(x, n) => g(x).powi(*n),
                        Inst::Cmp(c, x, y) => f64::from(u8::from(apply_cmp(*c, g(x), g(y)))),
                        Inst::Select(c, x, y) => {
                            if b(g(c)) {
                                g(x)
                            } else {
                                g(y)
                            }
                        }
                    };
                    self.vars[v.0 as usize] = val;
                }
                Stmt::Store(a, v) => {
                    let val = self.vars[v.0 as usize];
                    self.store(a, val);
                }
                Stmt::Loop { lane, width, body } => {
                    let n = self.widths.get(width.0 as usize).copied().unwrap_or(0);
                    for l in 0..n {
                        self.lanes[lane.0 as usize] = l;
                        self.run(body);
                    }
                }
            }
        }
    }
}

/// Run a loop kernel over CSR arrays in f64. `edge_ids[p]` maps CSR positions
/// to the user's edge order (identity when `None`). `outputs` must be shaped.
pub fn eval_loop_kernel(
    k: &LoopKernel,
    widths: &[usize],
    offsets: &[u64],
    cols: &[u32],
    edge_ids: Option<&[u64]>,
    fields: &[Array],
    outputs: &mut [Array],
) {
    let mut m = Machine {
        k,
        widths,
        fields,
        vars: vec![0.0; k.vars.len()],
        lanes: vec![0; k.num_loop_vars as usize],
        scratch: k.scratch.iter().map(|w| vec![0.0; widths.get(w.0 as usize).copied().unwrap_or(0)]).collect(),
        outputs,
        i: 0,
        j: 0,
        e: 0,
        rank: 0,
        degree: 0,
    };
    for i in 0..offsets.len().saturating_sub(1) {
        m.i = i;
        let (s, t) = (offsets[i] as usize, offsets[i + 1] as usize);
        m.degree = t - s;
        m.run(&k.init);
        for pass in k.edge_passes() {
            for p in s..t {
                m.j = cols[p] as usize;
                m.e = edge_ids.map(|ids| ids[p] as usize).unwrap_or(p);
                m.rank = p - s;
                m.run(pass);
            }
        }
        m.run(&k.finish);
    }
}
