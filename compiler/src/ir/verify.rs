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

#[derive(Clone, Copy)]
struct Ctx<'a> {
    k: &'a Kernel,
    region: &'a str,
    /// Which leaf operations the region may hold.
    allow_state: bool,
    allow_message: bool,
    allow_degree: bool,
    allow_fields: bool,
    allow_rank: bool,
    state: &'a [Type],
    messages: &'a [Type],
}

fn check_region(c: &Ctx<'_>, r: &Region) -> Result<(), VerifyError> {
    let err =
        |v: usize, m: String| VerifyError { kernel: c.k.name.clone(), region: c.region.to_string(), value: v as u32, message: m };
    let nw = c.k.widths.len() as u32;
    // Operands and outputs were checked in range by `check_handles`.
    for (i, n) in r.nodes.iter().enumerate() {
        if !width_ok(c.k, &n.ty) {
            return Err(err(i, "type names an undeclared width".into()));
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
            Op::State(k) => match c.state.get(*k as usize) {
                Some(t) if c.allow_state => Some(*t),
                _ => return Err(err(i, format!("state {k} is not available here"))),
            },
            Op::Message(k) => match c.messages.get(*k as usize) {
                Some(t) if c.allow_message => Some(*t),
                _ => return Err(err(i, format!("message {k} is not available here"))),
            },
            Op::Scan(k) => {
                let state = c.k.reducer.identity.as_ref().map(|r| r.output_types()).unwrap_or_default();
                match state.get(*k as usize) {
                    Some(t) if c.allow_rank && c.k.reducer.kind == crate::ir::ReducerKind::Monoid => Some(*t),
                    _ => return Err(err(i, format!("scan {k} needs a monoid reducer and an edge region"))),
                }
            }
            Op::Rank => {
                if !c.allow_rank {
                    return Err(err(i, "rank is only available per edge".into()));
                }
                Some(Type::Scalar)
            }
            Op::Broadcast(a, w) => (ty(*a) == Type::Scalar && w.0 < nw).then_some(Type::Vector(*w)),
            Op::Degree => {
                if !c.allow_degree {
                    return Err(err(i, "degree is only available when finishing a segment".into()));
                }
                Some(Type::Scalar)
            }
            Op::Unary(UnOp::Not, a) => ty(*a).is_boolean().then(|| ty(*a)),
            Op::Unary(_, a) => matches!(ty(*a), Type::Scalar | Type::Vector(_)).then(|| ty(*a)),
            Op::Binary(BinOp::And | BinOp::Or, a, b) => (ty(*a).is_boolean() && ty(*a) == ty(*b)).then(|| ty(*a)),
            Op::Binary(BinOp::Add, a, b) if matches!(ty(*a), Type::Matrix(..)) => (ty(*a) == ty(*b)).then(|| ty(*a)),
            Op::Binary(_, a, b) => Type::elementwise(ty(*a), ty(*b)),
            Op::Powi(a, _) => matches!(ty(*a), Type::Scalar | Type::Vector(_)).then(|| ty(*a)),
            Op::Cmp(_, a, b) => match Type::elementwise(ty(*a), ty(*b)) {
                Some(Type::Scalar) => Some(Type::Bool),
                Some(Type::Vector(w)) => Some(Type::Mask(w)),
                _ => None,
            },
            Op::Select(cnd, a, b) => match (ty(*cnd), Type::elementwise(ty(*a), ty(*b))) {
                (Type::Bool, t) => t,
                (Type::Mask(w), Some(Type::Scalar)) => Some(Type::Vector(w)),
                (Type::Mask(w), Some(Type::Vector(v))) if v == w => Some(Type::Vector(w)),
                _ => None,
            },
            Op::Sum(a) => matches!(ty(*a), Type::Vector(_)).then_some(Type::Scalar),
            Op::Dot(a, b) => match (ty(*a), ty(*b)) {
                (Type::Vector(x), Type::Vector(y)) if x == y => Some(Type::Scalar),
                _ => None,
            },
            Op::MatTVec(m, v) => match (ty(*m), ty(*v)) {
                (Type::Matrix(rw, cw), Type::Vector(vw)) if rw == vw => Some(Type::Vector(cw)),
                _ => None,
            },
            Op::Outer(a, b) => match (ty(*a), ty(*b)) {
                (Type::Vector(r), Type::Vector(c)) => Some(Type::Matrix(r, c)),
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
    Ok(())
}

/// Whether `t` names only widths `k` declares.
fn width_ok(k: &Kernel, t: &Type) -> bool {
    let nw = k.widths.len() as u32;
    match *t {
        Type::Vector(w) | Type::Mask(w) => w.0 < nw,
        Type::Matrix(a, b) => a.0 < nw && b.0 < nw,
        _ => true,
    }
}

/// Values written to outputs: exact types, or a scalar for a vector or matrix
/// output (a constant zero there means "no contribution" and is skipped).
fn contributes(values: &[Type], outputs: &[Type]) -> bool {
    values.len() == outputs.len()
        && values
            .iter()
            .zip(outputs)
            .all(|(v, o)| v == o || (*v == Type::Scalar && matches!(o, Type::Vector(_) | Type::Matrix(..))))
}

/// Values fit slots of these types, a scalar filling a whole vector.
fn broadcastable(values: &[Type], slots: &[Type]) -> bool {
    values.len() == slots.len()
        && values.iter().zip(slots).all(|(v, s)| v == s || (*v == Type::Scalar && matches!(s, Type::Vector(_))))
}

/// Every region of `k`, named as errors name them.
fn regions(k: &Kernel) -> Vec<(&'static str, &Region)> {
    let mut all = vec![("edge", &k.edge)];
    all.extend(k.node.as_ref().map(|n| ("node", n)));
    for (name, r) in [("identity", &k.reducer.identity), ("combine", &k.reducer.combine), ("finalize", &k.reducer.finalize)] {
        all.extend(r.as_ref().map(|r| (name, r)));
    }
    if let Some(seg) = &k.segment {
        all.extend([("init", &seg.init), ("step", &seg.step), ("finish", &seg.finish)]);
        all.extend(seg.pre_step.as_ref().map(|p| ("pre_step", p)));
    }
    all
}

/// Every value handle of every region in range: operands name earlier
/// values and outputs name values that exist. Checked before anything else
/// (the type checks below ask regions for their output types, which indexes
/// by those handles), so a kernel read from an artifact is refused, never
/// indexed out of bounds.
fn check_handles(k: &Kernel) -> Result<(), VerifyError> {
    let width_ok = |t: &Type| width_ok(k, t);
    let top = |region: &str, m: String| VerifyError { kernel: k.name.clone(), region: region.into(), value: 0, message: m };
    if let Some(f) = k.fields.iter().find(|f| !width_ok(&f.ty)) {
        return Err(top("fields", format!("field `{}` has a type of an undeclared width", f.name)));
    }
    if let Some(o) = k.outputs.iter().find(|o| !width_ok(&o.ty)) {
        return Err(top("outputs", format!("output `{}` has a type of an undeclared width", o.name)));
    }
    if let Some(seg) = &k.segment {
        if !seg.state.iter().all(width_ok) {
            return Err(top("segment", "a state slot has a type of an undeclared width".into()));
        }
    }
    for (name, r) in regions(k) {
        if !r.inputs.iter().all(width_ok) {
            return Err(top(name, "an input has a type of an undeclared width".into()));
        }
        let err =
            |v: usize, m: String| VerifyError { kernel: k.name.clone(), region: name.to_string(), value: v as u32, message: m };
        for (i, n) in r.nodes.iter().enumerate() {
            if let Some(o) = n.op.operands().into_iter().find(|o| o.0 as usize >= i) {
                return Err(err(i, format!("operand %{} does not precede its use", o.0)));
            }
            match n.op {
                Op::Field(f) if f.0 as usize >= k.fields.len() => {
                    return Err(err(i, format!("field #{} does not exist ({} fields)", f.0, k.fields.len())))
                }
                Op::Input(j) if j as usize >= r.inputs.len() => {
                    return Err(err(i, format!("input {j} out of range ({} inputs)", r.inputs.len())))
                }
                _ => {}
            }
        }
        if let Some((j, o)) = r.outputs.iter().enumerate().find(|(_, o)| o.0 as usize >= r.nodes.len()) {
            return Err(err(o.0 as usize, format!("output {j} refers to %{}, but the region has {} values", o.0, r.nodes.len())));
        }
    }
    Ok(())
}

/// Check the whole kernel: every handle in range, every region's types and
/// ordering, and that the regions fit together (message, aggregate and
/// output types).
pub fn verify(k: &Kernel) -> Result<(), VerifyError> {
    check_handles(k)?;
    let top = |region: &str, m: String| VerifyError { kernel: k.name.clone(), region: region.into(), value: 0, message: m };
    let out_types = |role: Role| -> Vec<Type> { k.outputs_of(role).iter().map(|(_, o)| o.ty).collect() };
    let (dst_outs, edge_outs, param_outs) = (out_types(Role::Dst), out_types(Role::Edge), out_types(Role::Param));
    let msgs = k.message_types();
    let none: [Type; 0] = [];
    let base = Ctx {
        k,
        region: "edge",
        allow_state: false,
        allow_message: false,
        allow_degree: false,
        allow_fields: true,
        allow_rank: true,
        state: &none,
        messages: &none,
    };
    for w in &k.widths {
        if w.bound_by.0 .0 as usize >= k.fields.len() {
            return Err(top("widths", format!("width {} is bound by a missing field", w.name)));
        }
    }
    for o in &k.outputs {
        if !o.ty.is_numeric() || (matches!(o.ty, Type::Matrix(..)) && o.role != Role::Param) {
            return Err(top("outputs", format!("output `{}` must be a scalar or a vector", o.name)));
        }
    }
    let fused = k.segment.as_ref().is_some_and(|s| s.fused);
    if !fused {
        check_region(&base, &k.edge)?;
        if msgs.is_empty() {
            return Err(top("edge", "the edge region yields no message".into()));
        }
        let extra: Vec<Type> = k.edge.output_types()[msgs.len()..].to_vec();
        let want: Vec<Type> = edge_outs.iter().chain(&param_outs).copied().collect();
        if !contributes(&extra, &want) {
            return Err(top("edge", "the edge region's extra outputs differ from the edge and parameter outputs".into()));
        }
        if k.reducer.kind == ReducerKind::Softmax && (msgs.len() != 2 || msgs[0] != Type::Scalar) {
            return Err(top("edge", "softmax needs a message (score: scalar, value)".into()));
        }
        let noio = Ctx { allow_fields: false, allow_rank: false, ..base };
        for (name, r) in [("identity", &k.reducer.identity), ("combine", &k.reducer.combine), ("finalize", &k.reducer.finalize)] {
            if let Some(r) = r {
                check_region(&Ctx { region: name, ..noio }, r)?;
            }
        }
        if let Some(n) = &k.node {
            check_region(&Ctx { region: "node", allow_rank: false, ..base }, n)?;
            if n.inputs != k.aggregate_types() {
                return Err(top("node", "node inputs differ from the aggregate's types".into()));
            }
            let want: Vec<Type> = dst_outs.iter().chain(&param_outs).copied().collect();
            if !contributes(&n.output_types(), &want) {
                return Err(top("node", "node outputs differ from the declared outputs".into()));
            }
        } else if !edge_outs.is_empty() || !param_outs.is_empty() || dst_outs != k.aggregate_types() {
            return Err(top("node", "without `node`, the outputs are exactly the aggregate".into()));
        }
    }
    if let Some(seg) = &k.segment {
        check_region(&Ctx { region: "init", allow_fields: false, allow_rank: false, ..base }, &seg.init)?;
        if !broadcastable(&seg.init.output_types(), &seg.state) {
            return Err(top("init", "init does not yield the state's types".into()));
        }
        let step_msgs: &[Type] = if seg.fused { &none } else { &msgs };
        check_region(
            &Ctx { region: "step", allow_state: true, allow_message: !seg.fused, state: &seg.state, messages: step_msgs, ..base },
            &seg.step,
        )?;
        let ns = seg.state.len();
        if let Some(pre) = &seg.pre_step {
            if !seg.fused {
                return Err(top("pre_step", "a pre-pass over the edges needs a fused segment".into()));
            }
            check_region(&Ctx { region: "pre_step", allow_state: true, state: &seg.state, messages: &none, ..base }, pre)?;
            let pt = pre.output_types();
            if pt.len() != ns || !broadcastable(&pt, &seg.state) {
                return Err(top("pre_step", "pre_step yields exactly the state's types".into()));
            }
        }
        let st = seg.step.output_types();
        if st.len() < ns || !broadcastable(&st[..ns], &seg.state) {
            return Err(top("step", "step does not yield the state's types".into()));
        }
        if seg.fused {
            let want: Vec<Type> = edge_outs.iter().chain(&param_outs).copied().collect();
            if !contributes(&st[ns..], &want) {
                return Err(top("step", "fused step's extra outputs differ from the edge and parameter outputs".into()));
            }
        }
        check_region(
            &Ctx { region: "finish", allow_state: true, allow_degree: true, allow_rank: false, state: &seg.state, ..base },
            &seg.finish,
        )?;
        if seg.fused {
            let want: Vec<Type> = dst_outs.iter().chain(&param_outs).copied().collect();
            if !contributes(&seg.finish.output_types(), &want) {
                return Err(top("finish", "fused finish does not yield the kernel's outputs".into()));
            }
        }
    }
    Ok(())
}
