//! The verifier: every invariant a back end relies on, checked in one place,
//! so that verified IR never makes a back end panic.

use super::*;

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("kernel `{kernel}`, region `{region}`, %{value}: {message}")]
pub struct VerifyError {
    pub kernel: String,
    pub region: String,
    pub value: u32,
    pub message: String,
}

struct Ctx<'a> {
    k: &'a Kernel,
    region: &'a str,
    /// Which leaf operations the region may hold.
    allow_state: bool,
    allow_message: bool,
    allow_degree: bool,
    allow_fields: bool,
    num_state: usize,
    num_message: usize,
}

fn elementwise(a: Type, b: Type) -> Option<Type> {
    match (a, b) {
        (Type::Scalar, Type::Scalar) => Some(Type::Scalar),
        (Type::Scalar, Type::Vector(w)) | (Type::Vector(w), Type::Scalar) => Some(Type::Vector(w)),
        (Type::Vector(x), Type::Vector(y)) if x == y => Some(Type::Vector(x)),
        _ => None,
    }
}

fn check_region(c: &Ctx<'_>, r: &Region) -> Result<(), VerifyError> {
    let err = |v: usize, m: String| VerifyError {
        kernel: c.k.name.clone(),
        region: c.region.to_string(),
        value: v as u32,
        message: m,
    };
    let nw = c.k.widths.len() as u32;
    let width_ok = |t: Type| match t {
        Type::Vector(w) => w.0 < nw,
        Type::Matrix(a, b) => a.0 < nw && b.0 < nw,
        _ => true,
    };
    for (i, n) in r.nodes.iter().enumerate() {
        if !width_ok(n.ty) {
            return Err(err(i, "type names an undeclared width".into()));
        }
        for o in n.op.operands() {
            if o.0 as usize >= i {
                return Err(err(i, format!("operand %{} does not precede its use", o.0)));
            }
        }
        let ty = |v: ValueId| r.nodes[v.0 as usize].ty;
        let expect: Option<Type> = match &n.op {
            Op::Const(_) => Some(Type::Scalar),
            Op::Field(f) => {
                if !c.allow_fields {
                    return Err(err(i, "fields cannot be read in this region".into()));
                }
                match c.k.fields.get(f.0 as usize) {
                    Some(fd) => Some(fd.ty),
                    None => return Err(err(i, format!("field #{} does not exist", f.0))),
                }
            }
            Op::Input(k) => match r.inputs.get(*k as usize) {
                Some(t) => Some(*t),
                None => return Err(err(i, format!("input {k} out of range ({} inputs)", r.inputs.len()))),
            },
            Op::State(k) => {
                if !c.allow_state || *k as usize >= c.num_state {
                    return Err(err(i, format!("state {k} is not available here")));
                }
                Some(n.ty)
            }
            Op::Message(k) => {
                if !c.allow_message || *k as usize >= c.num_message {
                    return Err(err(i, format!("message {k} is not available here")));
                }
                Some(n.ty)
            }
            Op::Degree => {
                if !c.allow_degree {
                    return Err(err(i, "degree is only available when finishing a segment".into()));
                }
                Some(Type::Scalar)
            }
            Op::Unary(UnOp::Not, a) => (ty(*a) == Type::Bool).then_some(Type::Bool),
            Op::Unary(_, a) => matches!(ty(*a), Type::Scalar | Type::Vector(_)).then(|| ty(*a)),
            Op::Binary(BinOp::And | BinOp::Or, a, b) => {
                (ty(*a) == Type::Bool && ty(*b) == Type::Bool).then_some(Type::Bool)
            }
            Op::Binary(_, a, b) => elementwise(ty(*a), ty(*b)),
            Op::Powi(a, _) => matches!(ty(*a), Type::Scalar | Type::Vector(_)).then(|| ty(*a)),
            Op::Cmp(_, a, b) => (ty(*a) == Type::Scalar && ty(*b) == Type::Scalar).then_some(Type::Bool),
            Op::Select(cnd, a, b) => {
                if ty(*cnd) != Type::Bool {
                    None
                } else {
                    elementwise(ty(*a), ty(*b))
                }
            }
            Op::Sum(a) => matches!(ty(*a), Type::Vector(_)).then_some(Type::Scalar),
            Op::Dot(a, b) => match (ty(*a), ty(*b)) {
                (Type::Vector(x), Type::Vector(y)) if x == y => Some(Type::Scalar),
                _ => None,
            },
            Op::MatVec(m, v) => match (ty(*m), ty(*v)) {
                (Type::Matrix(rw, cw), Type::Vector(vw)) if cw == vw => Some(Type::Vector(rw)),
                _ => None,
            },
        };
        match expect {
            Some(t) if t == n.ty => {}
            Some(t) => {
                return Err(err(i, format!("declared type {:?} but the operation yields {:?}", n.ty, t)));
            }
            None => return Err(err(i, "operand types do not fit the operation".into())),
        }
    }
    for o in &r.outputs {
        if o.0 as usize >= r.nodes.len() {
            return Err(err(o.0 as usize, "output refers to a missing value".into()));
        }
    }
    Ok(())
}

/// Values fit slots of these types, a scalar filling a whole vector.
fn broadcastable(values: &[Type], slots: &[Type]) -> bool {
    values.len() == slots.len()
        && values.iter().zip(slots).all(|(v, s)| v == s || (*v == Type::Scalar && matches!(s, Type::Vector(_))))
}

/// Check the whole kernel: every region's types and ordering, and that the
/// regions fit together (message, aggregate and output types).
pub fn verify(k: &Kernel) -> Result<(), VerifyError> {
    let top = |region: &str, m: String| VerifyError { kernel: k.name.clone(), region: region.into(), value: 0, message: m };
    let base = Ctx {
        k,
        region: "edge",
        allow_state: false,
        allow_message: false,
        allow_degree: false,
        allow_fields: true,
        num_state: 0,
        num_message: 0,
    };
    for w in &k.widths {
        if w.bound_by.0 .0 as usize >= k.fields.len() {
            return Err(top("widths", format!("width {} is bound by a missing field", w.name)));
        }
    }
    let fused = k.segment.as_ref().is_some_and(|s| s.fused);
    if !fused {
        check_region(&base, &k.edge)?;
        if k.edge.outputs.is_empty() {
            return Err(top("edge", "the edge region yields no message".into()));
        }
        if k.reducer.kind == ReducerKind::Softmax {
            let t = k.edge.output_types();
            if t.len() != 2 || t[0] != Type::Scalar {
                return Err(top("edge", "softmax needs a message (score: scalar, value)".into()));
            }
        }
        let noio = Ctx { allow_fields: false, ..base };
        for (name, r) in [
            ("identity", &k.reducer.identity),
            ("combine", &k.reducer.combine),
            ("finalize", &k.reducer.finalize),
        ] {
            if let Some(r) = r {
                check_region(&Ctx { region: name, ..noio }, r)?;
            }
        }
        if let Some(n) = &k.node {
            check_region(&Ctx { region: "node", ..base }, n)?;
            if n.inputs != k.aggregate_types() {
                return Err(top("node", "node inputs differ from the aggregate's types".into()));
            }
            if n.output_types() != k.outputs.iter().map(|o| o.ty).collect::<Vec<_>>() {
                return Err(top("node", "node outputs differ from the declared outputs".into()));
            }
        }
    }
    if let Some(seg) = &k.segment {
        let ns = seg.state.len();
        let nm = k.edge.outputs.len();
        check_region(&Ctx { region: "init", allow_fields: false, ..base }, &seg.init)?;
        if !broadcastable(&seg.init.output_types(), &seg.state) {
            return Err(top("init", "init does not yield the state's types".into()));
        }
        check_region(
            &Ctx { region: "step", allow_state: true, allow_message: !seg.fused, num_state: ns, num_message: nm, ..base },
            &seg.step,
        )?;
        if !broadcastable(&seg.step.output_types(), &seg.state) {
            return Err(top("step", "step does not yield the state's types".into()));
        }
        check_region(
            &Ctx { region: "finish", allow_state: true, allow_degree: true, num_state: ns, ..base },
            &seg.finish,
        )?;
        if seg.fused && seg.finish.output_types() != k.outputs.iter().map(|o| o.ty).collect::<Vec<_>>() {
            return Err(top("finish", "fused finish does not yield the kernel's outputs".into()));
        }
    }
    Ok(())
}
