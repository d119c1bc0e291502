//! The loop IR's text form (`--emit loop`, golden files).

use std::fmt::{self, Display, Formatter, Write as _};

use super::*;
use crate::ir::print::fmt_f64;

fn addr_text(k: &LoopKernel, a: &Addr) -> String {
    let lane = |l: &LoopVar| format!("k{}", l.0);
    match a {
        Addr::Field { field, lanes } => {
            let f = &k.fields[field.0 as usize];
            let row = match f.role {
                crate::ir::Role::Src => "j",
                crate::ir::Role::Dst => "i",
                crate::ir::Role::Edge => "e",
                crate::ir::Role::Param => "",
            };
            let mut idx: Vec<String> = if row.is_empty() { vec![] } else { vec![row.to_string()] };
            idx.extend(lanes.iter().map(lane));
            format!("{}.{}[{}]", f.role.name(), f.name, idx.join(", "))
        }
        Addr::Scratch { buf, lane: l } => format!("scratch{buf}[{}]", lane(l)),
        Addr::OutputMatrix { out, row, col } => {
            let name = k.outputs.get(*out as usize).map(|o| o.name.as_str()).unwrap_or("?");
            format!("out.{name}[{}, {}]", lane(row), lane(col))
        }
        Addr::Output { out, lane: l } => {
            let decl = k.outputs.get(*out as usize);
            let name = decl.map(|o| o.name.as_str()).unwrap_or("?");
            let row = match decl.map(|o| o.role) {
                Some(crate::ir::Role::Edge) => "e",
                Some(crate::ir::Role::Param) => "",
                _ => "i",
            };
            let mut idx: Vec<String> = if row.is_empty() { vec![] } else { vec![row.to_string()] };
            idx.extend(l.iter().map(lane));
            format!("out.{name}[{}]", idx.join(", "))
        }
    }
}

fn inst_text(k: &LoopKernel, i: &Inst) -> String {
    let v = |v: &Var| format!("v{}", v.0);
    match i {
        Inst::Const(c) => fmt_f64(*c),
        Inst::Load(a) => format!("load {}", addr_text(k, a)),
        Inst::Copy(a) => v(a),
        Inst::Degree => "degree".into(),
        Inst::Rank => "rank".into(),
        Inst::Unary(u, a) => format!("{u:?} {}", v(a)).to_lowercase(),
        Inst::Binary(b, x, y) => format!("{} {}, {}", format!("{b:?}").to_lowercase(), v(x), v(y)),
        Inst::Powi(a, n) => format!("powi {}, {n}", v(a)),
        Inst::Cmp(c, x, y) => format!("cmp.{} {}, {}", format!("{c:?}").to_lowercase(), v(x), v(y)),
        Inst::Select(c, x, y) => format!("select {}, {}, {}", v(c), v(x), v(y)),
    }
}

fn stmts_text(k: &LoopKernel, s: &[Stmt], depth: usize, out: &mut String) {
    let pad = "    ".repeat(depth);
    for st in s {
        match st {
            Stmt::Set(v, i) => {
                let _ = writeln!(out, "{pad}v{} = {}", v.0, inst_text(k, i));
            }
            Stmt::Store(a, v) => {
                let _ = writeln!(out, "{pad}store {} = v{}", addr_text(k, a), v.0);
            }
            Stmt::Loop { lane, width, body } => {
                let w = k.widths.get(width.0 as usize).map(|w| w.name.as_str()).unwrap_or("?");
                let _ = writeln!(out, "{pad}for k{} in 0..{w} {{", lane.0);
                stmts_text(k, body, depth + 1, out);
                let _ = writeln!(out, "{pad}}}");
            }
        }
    }
}

impl Display for LoopKernel {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        let _ = writeln!(s, "loop kernel {} {{", self.name);
        for (b, w) in self.scratch.iter().enumerate() {
            let name = self.widths.get(w.0 as usize).map(|w| w.name.as_str()).unwrap_or("?");
            let _ = writeln!(s, "  scratch{b}: [{name}]");
        }
        let _ = writeln!(s, "  for i in rows {{");
        let _ = writeln!(s, "    degree = off[i+1] - off[i]");
        stmts_text(self, &self.init, 1, &mut s);
        for list in self.edge_passes() {
            let _ = writeln!(s, "    for p in off[i]..off[i+1] {{");
            let _ = writeln!(s, "      j = col[p]; e = edge_id[p]");
            let mut body = String::new();
            stmts_text(self, list, 0, &mut body);
            for line in body.lines() {
                let _ = writeln!(s, "      {line}");
            }
            let _ = writeln!(s, "    }}");
        }
        stmts_text(self, &self.finish, 1, &mut s);
        let _ = writeln!(s, "  }}");
        s.push_str("}\n");
        f.write_str(&s)
    }
}
