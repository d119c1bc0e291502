//! The textual form of the kernel IR: what golden files and `--emit ir` hold.

use std::fmt::{self, Display, Formatter, Write as _};

use super::*;

/// A type printed with the kernel's width names.
pub struct TypeIn<'a>(pub &'a Kernel, pub Type);

impl Display for TypeIn<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self.1 {
            Type::Bool => f.write_str("bool"),
            Type::Scalar => f.write_str("scalar"),
            Type::Vector(w) => write!(f, "vector<{}>", self.0.width_name(w)),
            Type::Matrix(r, c) => write!(f, "matrix<{}, {}>", self.0.width_name(r), self.0.width_name(c)),
            Type::Mask(w) => write!(f, "mask<{}>", self.0.width_name(w)),
        }
    }
}

fn un_name(u: UnOp) -> &'static str {
    match u {
        UnOp::Neg => "neg",
        UnOp::Abs => "abs",
        UnOp::Exp => "exp",
        UnOp::Ln => "ln",
        UnOp::Sqrt => "sqrt",
        UnOp::Tanh => "tanh",
        UnOp::Sigmoid => "sigmoid",
        UnOp::Relu => "relu",
        UnOp::Not => "not",
    }
}

fn bin_name(b: BinOp) -> &'static str {
    match b {
        BinOp::Add => "add",
        BinOp::Sub => "sub",
        BinOp::Mul => "mul",
        BinOp::Div => "div",
        BinOp::Min => "min",
        BinOp::Max => "max",
        BinOp::LeakyRelu => "leaky_relu",
        BinOp::And => "and",
        BinOp::Or => "or",
    }
}

fn cmp_name(c: CmpOp) -> &'static str {
    match c {
        CmpOp::Lt => "lt",
        CmpOp::Le => "le",
        CmpOp::Gt => "gt",
        CmpOp::Ge => "ge",
        CmpOp::Eq => "eq",
        CmpOp::Ne => "ne",
    }
}

/// Print one operation the way the IR text shows it (shared with the loop IR
/// printer, which prints the same operations inside loops).
pub fn op_text(k: &Kernel, op: &Op, name: impl Fn(ValueId) -> String) -> String {
    match op {
        Op::Const(c) => format!("const {}", fmt_f64(*c)),
        Op::Field(id) => {
            let fd = k.field(*id);
            format!("field {}.{}", fd.role.name(), fd.name)
        }
        Op::Input(i) => format!("input {i}"),
        Op::State(i) => format!("state {i}"),
        Op::Message(i) => format!("message {i}"),
        Op::Degree => "degree".to_string(),
        Op::Rank => "rank".to_string(),
        Op::Scan(k) => format!("scan {k}"),
        Op::Broadcast(a, w) => format!("broadcast {}, {}", name(*a), k.width_name(*w)),
        Op::Unary(u, a) => format!("{} {}", un_name(*u), name(*a)),
        Op::Binary(b, x, y) => format!("{} {}, {}", bin_name(*b), name(*x), name(*y)),
        Op::Powi(a, n) => format!("powi {}, {n}", name(*a)),
        Op::Cmp(c, x, y) => format!("cmp.{} {}, {}", cmp_name(*c), name(*x), name(*y)),
        Op::Select(c, x, y) => format!("select {}, {}, {}", name(*c), name(*x), name(*y)),
        Op::Sum(a) => format!("sum {}", name(*a)),
        Op::Dot(x, y) => format!("dot {}, {}", name(*x), name(*y)),
        Op::MatVec(m, v) => format!("matvec {}, {}", name(*m), name(*v)),
        Op::MatTVec(m, v) => format!("mattvec {}, {}", name(*m), name(*v)),
        Op::Outer(a, b) => format!("outer {}, {}", name(*a), name(*b)),
    }
}

/// Floats print so that they read back exactly and stay short.
pub fn fmt_f64(c: f64) -> String {
    if c == f64::INFINITY {
        "inf".into()
    } else if c == f64::NEG_INFINITY {
        "-inf".into()
    } else if c.fract() == 0.0 && c.abs() < 1e15 {
        format!("{c:.1}")
    } else {
        format!("{c:?}")
    }
}

pub fn region_text(k: &Kernel, title: &str, r: &Region, out: &mut String) {
    let ins: Vec<String> = r.inputs.iter().enumerate().map(|(i, t)| format!("in{i}: {}", TypeIn(k, *t))).collect();
    let _ = writeln!(out, "  {title}({}) {{", ins.join(", "));
    for (i, n) in r.nodes.iter().enumerate() {
        let _ = writeln!(out, "    %{i}: {} = {}", TypeIn(k, n.ty), op_text(k, &n.op, |v| format!("%{}", v.0)));
    }
    let outs: Vec<String> = r.outputs.iter().map(|v| format!("%{}", v.0)).collect();
    let _ = writeln!(out, "    yield {}", outs.join(", "));
    let _ = writeln!(out, "  }}");
}

fn props_text(p: &Properties) -> String {
    let mut v = Vec::new();
    for (on, name) in [
        (p.associative, "associative"),
        (p.commutative, "commutative"),
        (p.idempotent, "idempotent"),
        (p.invertible, "invertible"),
        (p.linear, "linear"),
    ] {
        if on {
            v.push(name);
        }
    }
    format!("[{}]", v.join(", "))
}

impl Display for Kernel {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        let _ = writeln!(s, "kernel {} {{", self.name);
        for fd in &self.fields {
            let _ = writeln!(s, "  {} {}: {} ({})", fd.role.name(), fd.name, TypeIn(self, fd.ty), fd.declared);
        }
        for w in &self.widths {
            let fd = self.field(w.bound_by.0);
            let _ = writeln!(s, "  width {} = {}.{}.dim{}", w.name, fd.role.name(), fd.name, w.bound_by.1);
        }
        for o in &self.outputs {
            let role = if o.role == Role::Dst { String::new() } else { format!(" ({})", o.role.name()) };
            let _ = writeln!(s, "  output {}: {}{role}", o.name, TypeIn(self, o.ty));
        }
        let r = &self.reducer;
        let _ = write!(s, "  reduce {} declared {}", r.kind.name(), props_text(&r.declared));
        if let Some(p) = &r.proved {
            let _ = write!(s, " proved {}", props_text(p));
        }
        if let Some(c) = r.class {
            let _ = write!(s, " class {}", c.name());
        }
        let _ = writeln!(s);
        match &self.segment {
            Some(seg) if seg.fused => {}
            _ => {
                region_text(self, "edge", &self.edge, &mut s);
                if let Some(id) = &r.identity {
                    region_text(self, "identity", id, &mut s);
                }
                if let Some(c) = &r.combine {
                    region_text(self, "combine", c, &mut s);
                }
                if let Some(fz) = &r.finalize {
                    region_text(self, "finalize", fz, &mut s);
                }
                if let Some(n) = &self.node {
                    region_text(self, "node", n, &mut s);
                }
            }
        }
        if let Some(seg) = &self.segment {
            let st: Vec<String> = seg.state.iter().map(|t| TypeIn(self, *t).to_string()).collect();
            let _ = writeln!(s, "  segment state ({}) {}", st.join(", "), if seg.fused { "fused" } else { "unfused" });
            region_text(self, "init", &seg.init, &mut s);
            if let Some(pre) = &seg.pre_step {
                region_text(self, "pre_step", pre, &mut s);
            }
            region_text(self, "step", &seg.step, &mut s);
            region_text(self, "finish", &seg.finish, &mut s);
        }
        s.push_str("}\n");
        f.write_str(&s)
    }
}
