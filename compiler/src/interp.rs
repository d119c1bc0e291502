//! The reference interpreter: kernel IR evaluated directly, in f64.
//!
//! It reads the captured kernel (before lowering), walks the edges of each
//! destination row in the user's order, and applies each reducer by its
//! textbook definition (softmax in two passes, mean as sum over count), so it
//! shares no code path with the lowering it checks. It is slow on purpose.

use crate::bind::{bind_shapes, output_shapes, BindError, Extents};
use crate::ir::{BinOp, CmpOp, FieldId, Kernel, Op, ReducerKind, Region, Role, Type, UnOp};

/// A dense f64 array: a field's or an output's values.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

impl Array {
    pub fn new(shape: Vec<usize>, data: Vec<f64>) -> Array {
        Array { shape, data }
    }
    /// Row `i` of a `[N]` or `[N, F]` array.
    fn row(&self, i: usize) -> &[f64] {
        let w: usize = self.shape.iter().skip(1).product();
        &self.data[i * w..(i + 1) * w]
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Bool(bool),
    Mask(Vec<bool>),
    Scalar(f64),
    Vector(Vec<f64>),
    Matrix { rows: usize, cols: usize, data: Vec<f64> },
}

#[derive(Debug, thiserror::Error)]
pub enum InterpError {
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error("edge {index} ({src}→{dst}) is out of range for {num_src} sources and {num_dst} destinations")]
    Edge { index: usize, src: u32, dst: u32, num_src: usize, num_dst: usize },
    #[error("internal error: {0}")]
    Internal(String),
}

fn num(v: &Value) -> Result<&Value, InterpError> {
    match v {
        Value::Scalar(_) | Value::Vector(_) => Ok(v),
        _ => Err(InterpError::Internal("expected a number".into())),
    }
}

fn map1(v: &Value, f: impl Fn(f64) -> f64) -> Result<Value, InterpError> {
    Ok(match num(v)? {
        Value::Scalar(x) => Value::Scalar(f(*x)),
        Value::Vector(x) => Value::Vector(x.iter().map(|&a| f(a)).collect()),
        _ => unreachable_value()?,
    })
}

fn unreachable_value() -> Result<Value, InterpError> {
    Err(InterpError::Internal("unexpected value kind".into()))
}

fn map2(a: &Value, b: &Value, f: impl Fn(f64, f64) -> f64) -> Result<Value, InterpError> {
    Ok(match (num(a)?, num(b)?) {
        (Value::Scalar(x), Value::Scalar(y)) => Value::Scalar(f(*x, *y)),
        (Value::Scalar(x), Value::Vector(y)) => Value::Vector(y.iter().map(|&b| f(*x, b)).collect()),
        (Value::Vector(x), Value::Scalar(y)) => Value::Vector(x.iter().map(|&a| f(a, *y)).collect()),
        (Value::Vector(x), Value::Vector(y)) => {
            if x.len() != y.len() {
                return Err(InterpError::Internal("vector widths differ".into()));
            }
            Value::Vector(x.iter().zip(y).map(|(&a, &b)| f(a, b)).collect())
        }
        _ => unreachable_value()?,
    })
}

/// The scalar semantics of each operation, shared by every evaluation of
/// the IR in f64 (the back ends implement the same formulas).
pub fn apply_unary(u: UnOp, x: f64) -> f64 {
    match u {
        UnOp::Neg => -x,
        UnOp::Abs => x.abs(),
        UnOp::Exp => x.exp(),
        UnOp::Ln => x.ln(),
        UnOp::Sqrt => x.sqrt(),
        UnOp::Tanh => x.tanh(),
        UnOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnOp::Relu => {
            if x > 0.0 {
                x
            } else {
                0.0
            }
        }
        UnOp::Not => x,
    }
}

pub fn apply_binary(b: BinOp, x: f64, y: f64) -> f64 {
    match b {
        BinOp::Add => x + y,
        BinOp::Sub => x - y,
        BinOp::Mul => x * y,
        BinOp::Div => x / y,
        BinOp::Min => x.min(y),
        BinOp::Max => x.max(y),
        BinOp::LeakyRelu => {
            if x > 0.0 {
                x
            } else {
                y * x
            }
        }
        BinOp::And | BinOp::Or => f64::NAN,
    }
}

pub fn apply_cmp(c: CmpOp, x: f64, y: f64) -> bool {
    match c {
        CmpOp::Lt => x < y,
        CmpOp::Le => x <= y,
        CmpOp::Gt => x > y,
        CmpOp::Ge => x >= y,
        CmpOp::Eq => x == y,
        CmpOp::Ne => x != y,
    }
}

/// Evaluate a region. `leaf` answers the leaf operations (fields, inputs,
/// states, messages, degree) for the current row/edge.
/// Elementwise boolean of two numbers (scalar → bool, vector → mask).
fn cmp2(a: &Value, b: &Value, f: impl Fn(f64, f64) -> bool) -> Result<Value, InterpError> {
    Ok(match map2(a, b, |x, y| if f(x, y) { 1.0 } else { 0.0 })? {
        Value::Scalar(x) => Value::Bool(x != 0.0),
        Value::Vector(v) => Value::Mask(v.iter().map(|&x| x != 0.0).collect()),
        _ => unreachable_value()?,
    })
}

fn bool2(a: &Value, b: &Value, f: impl Fn(bool, bool) -> bool) -> Result<Value, InterpError> {
    Ok(match (a, b) {
        (Value::Bool(x), Value::Bool(y)) => Value::Bool(f(*x, *y)),
        (Value::Mask(x), Value::Mask(y)) => Value::Mask(x.iter().zip(y).map(|(p, q)| f(*p, *q)).collect()),
        _ => unreachable_value()?,
    })
}

/// Evaluate a region. `widths` are the call's width values; `leaf` answers
/// the leaf operations (fields, inputs, states, messages, degree, rank) for
/// the current row/edge.
pub fn eval_region(
    r: &Region,
    widths: &[usize],
    leaf: &mut dyn FnMut(&Op) -> Result<Value, InterpError>,
) -> Result<Vec<Value>, InterpError> {
    let mut vals: Vec<Value> = Vec::with_capacity(r.nodes.len());
    for n in &r.nodes {
        let g = |v: crate::ir::ValueId| &vals[v.0 as usize];
        let v = match &n.op {
            Op::Const(c) => Value::Scalar(*c),
            Op::Field(_) | Op::Input(_) | Op::State(_) | Op::Message(_) | Op::Degree | Op::Rank | Op::Scan(_) => leaf(&n.op)?,
            Op::Broadcast(a, w) => match g(*a) {
                Value::Scalar(x) => Value::Vector(vec![*x; widths.get(w.0 as usize).copied().unwrap_or(0)]),
                _ => unreachable_value()?,
            },
            Op::Unary(UnOp::Not, a) => match g(*a) {
                Value::Bool(b) => Value::Bool(!b),
                Value::Mask(m) => Value::Mask(m.iter().map(|b| !b).collect()),
                _ => unreachable_value()?,
            },
            Op::Unary(u, a) => map1(g(*a), |x| apply_unary(*u, x))?,
            Op::Binary(BinOp::Add, a, b) if matches!(g(*a), Value::Matrix { .. }) => match (g(*a), g(*b)) {
                (Value::Matrix { rows, cols, data }, Value::Matrix { data: d2, .. }) => {
                    Value::Matrix { rows: *rows, cols: *cols, data: data.iter().zip(d2).map(|(p, q)| p + q).collect() }
                }
                _ => unreachable_value()?,
            },
            Op::Binary(BinOp::And, a, b) => bool2(g(*a), g(*b), |x, y| x && y)?,
            Op::Binary(BinOp::Or, a, b) => bool2(g(*a), g(*b), |x, y| x || y)?,
            Op::Binary(op, a, b) => map2(g(*a), g(*b), |x, y| apply_binary(*op, x, y))?,
            Op::Powi(a, p) => map1(g(*a), |x| x.powi(*p))?,
            Op::Cmp(c, a, b) => cmp2(g(*a), g(*b), |x, y| apply_cmp(*c, x, y))?,
            Op::Select(c, a, b) => match g(*c) {
                Value::Bool(true) => map2(g(*a), g(*b), |x, _| x)?,
                Value::Bool(false) => map2(g(*a), g(*b), |_, y| y)?,
                Value::Mask(m) => {
                    let both = map2(g(*a), g(*b), |x, _| x)?;
                    let other = map2(g(*a), g(*b), |_, y| y)?;
                    // Two scalar arms are broadcast over the mask's width.
                    let lanes = |v: Value| match v {
                        Value::Vector(x) => Ok(x),
                        Value::Scalar(x) => Ok(vec![x]),
                        _ => Err(InterpError::Internal("masked select of non-numbers".into())),
                    };
                    let (p, q) = (lanes(both)?, lanes(other)?);
                    let w = m.len();
                    let pick = |v: &Vec<f64>, l: usize| if v.len() == 1 { v[0] } else { v[l] };
                    Value::Vector((0..w).map(|l| if m[l] { pick(&p, l) } else { pick(&q, l) }).collect())
                }
                _ => unreachable_value()?,
            },
            Op::Sum(a) => match g(*a) {
                Value::Vector(x) => Value::Scalar(x.iter().sum()),
                _ => unreachable_value()?,
            },
            Op::Dot(a, b) => match (g(*a), g(*b)) {
                (Value::Vector(x), Value::Vector(y)) => Value::Scalar(x.iter().zip(y).map(|(a, b)| a * b).sum()),
                _ => unreachable_value()?,
            },
            Op::MatTVec(m, v) => match (g(*m), g(*v)) {
                (Value::Matrix { rows, cols, data }, Value::Vector(x)) => {
                    Value::Vector((0..*cols).map(|c| (0..*rows).map(|r| data[r * cols + c] * x[r]).sum()).collect())
                }
                _ => unreachable_value()?,
            },
            Op::Outer(a, b) => match (g(*a), g(*b)) {
                (Value::Vector(x), Value::Vector(y)) => Value::Matrix {
                    rows: x.len(),
                    cols: y.len(),
                    data: x.iter().flat_map(|p| y.iter().map(move |q| p * q)).collect(),
                },
                _ => unreachable_value()?,
            },
            Op::MatVec(m, v) => match (g(*m), g(*v)) {
                (Value::Matrix { rows, cols, data }, Value::Vector(x)) => {
                    Value::Vector((0..*rows).map(|r| (0..*cols).map(|c| data[r * cols + c] * x[c]).sum()).collect())
                }
                _ => unreachable_value()?,
            },
        };
        vals.push(v);
    }
    Ok(r.outputs.iter().map(|o| vals[o.0 as usize].clone()).collect())
}

fn zero_of(t: Type, widths: &[usize], c: f64) -> Value {
    match t {
        Type::Vector(w) => Value::Vector(vec![c; widths.get(w.0 as usize).copied().unwrap_or(0)]),
        _ => Value::Scalar(c),
    }
}

/// Run `k` on the graph given by `edges` (source, destination) in the user's
/// edge order. `fields[i]` is the value of field `i` (declaration order).
pub fn interpret(
    k: &Kernel,
    num_src: usize,
    num_dst: usize,
    edges: &[(u32, u32)],
    fields: &[Array],
) -> Result<Vec<Array>, InterpError> {
    interpret_in_order(k, num_src, num_dst, edges, None, fields)
}

/// Like [`interpret`], with the edges listed in the order rows visit them
/// and `edge_ids[p]` the user index of the `p`-th listed edge (which edge
/// fields and edge outputs are indexed by). A realization that reorders a
/// row (the row-reversed graph of a monoid's suffix) is run this way.
pub fn interpret_in_order(
    k: &Kernel,
    num_src: usize,
    num_dst: usize,
    edges: &[(u32, u32)],
    edge_ids: Option<&[usize]>,
    fields: &[Array],
) -> Result<Vec<Array>, InterpError> {
    let ext = Extents { num_src, num_dst, num_edges: edges.len() };
    let shapes: Vec<&[usize]> = fields.iter().map(|a| a.shape.as_slice()).collect();
    let widths = bind_shapes(k, &ext, &shapes)?;
    let mut rows: Vec<Vec<usize>> = vec![Vec::new(); num_dst];
    for (e, &(s, d)) in edges.iter().enumerate() {
        if s as usize >= num_src || d as usize >= num_dst {
            return Err(InterpError::Edge { index: e, src: s, dst: d, num_src, num_dst });
        }
        rows[d as usize].push(e);
    }
    let field_value = |f: FieldId, row: usize| -> Value {
        let fd = k.field(f);
        let a = &fields[f.0 as usize];
        match fd.ty {
            Type::Scalar if fd.role == Role::Param => Value::Scalar(a.data.first().copied().unwrap_or(0.0)),
            Type::Scalar => Value::Scalar(a.row(row)[0]),
            Type::Vector(_) if fd.role == Role::Param => Value::Vector(a.data.clone()),
            Type::Vector(_) => Value::Vector(a.row(row).to_vec()),
            Type::Matrix(..) => Value::Matrix { rows: a.shape[0], cols: a.shape[1], data: a.data.clone() },
            Type::Bool | Type::Mask(_) => Value::Bool(false),
        }
    };
    let msg_types = k.message_types();
    let nm = msg_types.len();
    let out_shapes = output_shapes(k, &ext, &widths);
    let mut outs: Vec<Array> =
        out_shapes.iter().map(|s| Array { shape: s.clone(), data: vec![0.0; s.iter().product()] }).collect();
    let edge_outs: Vec<usize> = k.outputs_of(Role::Edge).iter().map(|(i, _)| *i).collect();
    let param_outs: Vec<usize> = k.outputs_of(Role::Param).iter().map(|(i, _)| *i).collect();
    let dst_outs: Vec<usize> = k.outputs_of(Role::Dst).iter().map(|(i, _)| *i).collect();
    let identity = match &k.reducer.identity {
        Some(r) => Some(eval_region(r, &widths, &mut |_| Err(InterpError::Internal("identity reads nothing".into())))?),
        None => None,
    };
    // Write `v` as row/edge `at` of output `o` (or add it, for parameter sums).
    let put = |outs: &mut Vec<Array>, o: usize, at: usize, v: &Value, add: bool| -> Result<(), InterpError> {
        let arr = &mut outs[o];
        let w: usize = if add { arr.data.len() } else { arr.shape.iter().skip(1).product() };
        let base = if add { 0 } else { at * w };
        let vals: Vec<f64> = match v {
            Value::Scalar(x) => vec![*x; w.max(1)],
            Value::Vector(x) => x.clone(),
            Value::Matrix { data, .. } => data.clone(),
            _ => return Err(InterpError::Internal("output is not a number".into())),
        };
        for (l, x) in vals.iter().enumerate().take(w) {
            if add {
                arr.data[base + l] += x;
            } else {
                arr.data[base + l] = *x;
            }
        }
        Ok(())
    };
    // A monoid folds as the edges are visited, so an edge region may read
    // the row's exclusive scan (`scan k`: the state before this edge).
    let monoid = k.reducer.kind == ReducerKind::Monoid;
    for (i, row) in rows.iter().enumerate() {
        let mut msgs: Vec<Vec<Value>> = Vec::with_capacity(row.len());
        let mut running: Option<Vec<Value>> = identity.clone();
        for (rank, &p) in row.iter().enumerate() {
            let (s, _) = edges[p];
            let e = edge_ids.and_then(|ids| ids.get(p).copied()).unwrap_or(p);
            let scan = running.clone().unwrap_or_default();
            let mut all = eval_region(&k.edge, &widths, &mut |op| match op {
                Op::Field(f) => Ok(field_value(
                    *f,
                    match k.field(*f).role {
                        Role::Src => s as usize,
                        Role::Dst => i,
                        Role::Edge => e,
                        Role::Param => 0,
                    },
                )),
                Op::Rank => Ok(Value::Scalar(rank as f64)),
                Op::Scan(c) => scan.get(*c as usize).cloned().ok_or_else(|| InterpError::Internal("scan needs a monoid".into())),
                _ => Err(InterpError::Internal("edge reads only fields, its rank and the scan".into())),
            })?;
            let extra = all.split_off(nm.min(all.len()));
            for (slot, v) in edge_outs.iter().chain(&param_outs).zip(&extra) {
                let is_param = k.outputs[*slot].role == Role::Param;
                put(&mut outs, *slot, e, v, is_param)?;
            }
            if monoid {
                if let (Some(acc), Some(comb)) = (&running, &k.reducer.combine) {
                    let both: Vec<Value> = acc.iter().chain(all.iter()).cloned().collect();
                    running = Some(eval_region(comb, &widths, &mut |op| match op {
                        Op::Input(j) => both.get(*j as usize).cloned().ok_or_else(|| InterpError::Internal("input".into())),
                        _ => Err(InterpError::Internal("combine reads only its inputs".into())),
                    })?);
                }
            }
            msgs.push(all);
        }
        let agg = reduce(k, &msg_types, &widths, &msgs, identity.as_deref())?;
        let result = match &k.node {
            Some(n) => eval_region(n, &widths, &mut |op| match op {
                Op::Field(f) => Ok(field_value(*f, i)),
                Op::Input(j) => agg.get(*j as usize).cloned().ok_or_else(|| InterpError::Internal("input".into())),
                _ => Err(InterpError::Internal("node reads fields and inputs".into())),
            })?,
            None => agg,
        };
        for (slot, v) in dst_outs.iter().chain(&param_outs).zip(&result) {
            let is_param = k.outputs[*slot].role == Role::Param;
            put(&mut outs, *slot, i, v, is_param)?;
        }
    }
    Ok(outs)
}

/// Each reducer by its definition.
fn reduce(
    k: &Kernel,
    msg_types: &[Type],
    widths: &[usize],
    msgs: &[Vec<Value>],
    identity: Option<&[Value]>,
) -> Result<Vec<Value>, InterpError> {
    let fold = |c: usize, init: f64, f: fn(f64, f64) -> f64| -> Result<Value, InterpError> {
        let mut acc = zero_of(msg_types[c], widths, init);
        for m in msgs {
            acc = map2(&acc, &m[c], f)?;
        }
        Ok(acc)
    };
    let comps = 0..msg_types.len();
    match k.reducer.kind {
        ReducerKind::Sum => comps.map(|c| fold(c, 0.0, |a, b| a + b)).collect(),
        ReducerKind::Prod => comps.map(|c| fold(c, 1.0, |a, b| a * b)).collect(),
        ReducerKind::Mean => comps
            .map(|c| {
                if msgs.is_empty() {
                    return Ok(zero_of(msg_types[c], widths, 0.0));
                }
                let n = msgs.len() as f64;
                map1(&fold(c, 0.0, |a, b| a + b)?, |x| x / n)
            })
            .collect(),
        ReducerKind::Max | ReducerKind::Min => comps
            .map(|c| {
                if msgs.is_empty() {
                    return Ok(zero_of(msg_types[c], widths, 0.0));
                }
                if k.reducer.kind == ReducerKind::Max {
                    fold(c, f64::NEG_INFINITY, f64::max)
                } else {
                    fold(c, f64::INFINITY, f64::min)
                }
            })
            .collect(),
        ReducerKind::Softmax => {
            let t = msg_types[1];
            if msgs.is_empty() {
                return Ok(vec![zero_of(t, widths, 0.0)]);
            }
            let score = |m: &Vec<Value>| match m[0] {
                Value::Scalar(s) => s,
                _ => f64::NAN,
            };
            let mx = msgs.iter().map(score).fold(f64::NEG_INFINITY, f64::max);
            let mut den = 0.0;
            let mut acc = zero_of(t, widths, 0.0);
            for m in msgs {
                let w = (score(m) - mx).exp();
                den += w;
                acc = map2(&acc, &m[1], |a, v| a + w * v)?;
            }
            Ok(vec![map1(&acc, |a| a / den)?])
        }
        ReducerKind::Monoid => {
            let (Some(id), Some(comb)) = (identity, &k.reducer.combine) else {
                return Err(InterpError::Internal("monoid without identity/combine".into()));
            };
            let mut acc: Vec<Value> = id.to_vec();
            for m in msgs {
                let both: Vec<Value> = acc.iter().chain(m.iter()).cloned().collect();
                acc = eval_region(comb, widths, &mut |op| match op {
                    Op::Input(j) => both.get(*j as usize).cloned().ok_or_else(|| InterpError::Internal("input".into())),
                    _ => Err(InterpError::Internal("combine reads only its inputs".into())),
                })?;
            }
            match &k.reducer.finalize {
                Some(f) => eval_region(f, widths, &mut |op| match op {
                    Op::Input(j) => acc.get(*j as usize).cloned().ok_or_else(|| InterpError::Internal("input".into())),
                    _ => Err(InterpError::Internal("finalize reads only its input".into())),
                }),
                None => Ok(acc),
            }
        }
    }
}
