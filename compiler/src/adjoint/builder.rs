//! What the stage builders and the reducer rules build with.
//!
//! Every stage of the plan is an ordinary kernel assembled by hand: its
//! fields (the forward's first, so widths bound by field index stay valid,
//! then what the stage reads from the cotangents and earlier stages), an
//! empty kernel around them, and regions written op by op. [`B`] pushes
//! each op with the type the verifier gives it, so a stage is well typed by
//! construction and the verifier after each plan rewrite checks only what
//! the rewrites change.

use super::plan::Binding;
use crate::ir::{
    BinOp, CmpOp, FieldDecl, FieldId, FieldType, Kernel, Op, OutputDecl, Properties, Reducer, ReducerKind, Region, Role, Span,
    Type, UnOp, ValueId,
};

/// A small builder with the verifier's typing rules.
pub(super) struct B<'r> {
    pub(super) r: &'r mut Region,
    pub(super) sp: Span,
}

fn ew(a: Type, b: Type) -> Type {
    match (a, b) {
        (Type::Vector(w), _) | (_, Type::Vector(w)) => Type::Vector(w),
        (Type::Mask(w), _) | (_, Type::Mask(w)) => Type::Vector(w),
        _ => Type::Scalar,
    }
}

impl B<'_> {
    pub(super) fn c(&mut self, v: f64) -> ValueId {
        self.r.push(Op::Const(v), Type::Scalar, self.sp)
    }
    pub(super) fn ty(&self, v: ValueId) -> Type {
        self.r.ty(v)
    }
    pub(super) fn bin(&mut self, op: BinOp, a: ValueId, b: ValueId) -> ValueId {
        let t = match op {
            BinOp::And | BinOp::Or => self.ty(a),
            _ => ew(self.ty(a), self.ty(b)),
        };
        self.r.push(Op::Binary(op, a, b), t, self.sp)
    }
    pub(super) fn un(&mut self, op: UnOp, a: ValueId) -> ValueId {
        let t = self.ty(a);
        self.r.push(Op::Unary(op, a), t, self.sp)
    }
    pub(super) fn cmp(&mut self, c: CmpOp, a: ValueId, b: ValueId) -> ValueId {
        let t = match ew(self.ty(a), self.ty(b)) {
            Type::Vector(w) => Type::Mask(w),
            _ => Type::Bool,
        };
        self.r.push(Op::Cmp(c, a, b), t, self.sp)
    }
    pub(super) fn sel(&mut self, c: ValueId, a: ValueId, b: ValueId) -> ValueId {
        let t = match (self.ty(c), ew(self.ty(a), self.ty(b))) {
            (Type::Mask(w), _) => Type::Vector(w),
            (_, t) => t,
        };
        self.r.push(Op::Select(c, a, b), t, self.sp)
    }
    /// A constant of type `t` (broadcast for vectors).
    pub(super) fn fill(&mut self, v: f64, t: Type) -> ValueId {
        let c = self.c(v);
        match t {
            Type::Vector(w) => self.r.push(Op::Broadcast(c, w), Type::Vector(w), self.sp),
            _ => c,
        }
    }
    pub(super) fn field(&mut self, f: usize, t: Type) -> ValueId {
        self.r.push(Op::Field(FieldId(f as u32)), t, self.sp)
    }
    pub(super) fn dot_or_mul(&mut self, a: ValueId, b: ValueId) -> ValueId {
        match (self.ty(a), self.ty(b)) {
            (Type::Vector(_), Type::Vector(_)) => self.r.push(Op::Dot(a, b), Type::Scalar, self.sp),
            _ => self.bin(BinOp::Mul, a, b),
        }
    }
}

/// Fields of a stage kernel under construction, with their bindings.
pub(super) struct FieldSet {
    pub(super) fields: Vec<FieldDecl>,
    pub(super) bindings: Vec<Binding>,
}

impl FieldSet {
    pub(super) fn add(&mut self, name: &str, role: Role, ty: Type, declared: impl Into<FieldType>, b: Binding) -> usize {
        let declared = declared.into();
        self.fields.push(FieldDecl { name: name.to_string(), role, ty, declared, span: Span::default() });
        self.bindings.push(b);
        self.fields.len() - 1
    }
}

/// The forward fields copied first, so widths (bound by field index) stay valid.
pub(super) fn forward_fields(k: &Kernel, role_map: impl Fn(Role) -> Role) -> FieldSet {
    let mut fs = FieldSet { fields: Vec::new(), bindings: Vec::new() };
    for f in &k.fields {
        fs.add(&f.name, role_map(f.role), f.ty, f.declared, Binding::Forward(f.role, f.name.clone()));
    }
    fs
}

/// A stage kernel around `fs` with the forward's span and widths, its
/// regions left to the stage builder: one place that says what a stage
/// inherits from the forward.
pub(super) fn empty_kernel(
    k: &Kernel,
    name: String,
    fs: FieldSet,
    reducer: Reducer,
    outputs: Vec<OutputDecl>,
) -> (Kernel, Vec<Binding>) {
    let kernel = Kernel {
        name,
        span: k.span,
        fields: fs.fields,
        widths: k.widths.clone(),
        outputs,
        edge: Region::new(vec![]),
        reducer,
        node: None,
        segment: None,
    };
    (kernel, fs.bindings)
}

/// A built-in reducer with nothing declared or proved: a stage kernel goes
/// through the same passes as any, which prove what they need.
pub(super) fn builtin(kind: ReducerKind, span: Span) -> Reducer {
    Reducer {
        kind,
        span,
        declared: Properties::default(),
        proved: None,
        class: None,
        identity: None,
        combine: None,
        finalize: None,
    }
}

/// A monoid the adjoint writes itself (a stats stage's augmented fold, a
/// suffix stage's opposite monoid), with the properties it is built to
/// have.
pub(super) fn monoid(span: Span, identity: Region, combine: Region, associative: bool, commutative: bool) -> Reducer {
    Reducer {
        kind: ReducerKind::Monoid,
        span,
        declared: Properties { associative, commutative, ..Properties::default() },
        proved: None,
        class: None,
        identity: Some(identity),
        combine: Some(combine),
        finalize: None,
    }
}

/// Inline `src` into `out`, mapping its field reads through `fmap` and
/// answering `Input`/`Scan`/`Rank` reads with `leaf`.
pub(super) fn inline_mapped(
    out: &mut Region,
    src: &Region,
    fmap: &[usize],
    fields: &[FieldDecl],
    mut leaf: impl FnMut(&Op) -> Option<ValueId>,
) -> Vec<ValueId> {
    let sp = Span::default();
    let pre: Vec<Option<ValueId>> = (0..fmap.len())
        .map(|f| {
            let used = src.nodes.iter().any(|n| n.op == Op::Field(FieldId(f as u32)));
            used.then(|| out.push(Op::Field(FieldId(fmap[f] as u32)), fields[fmap[f]].ty, sp))
        })
        .collect();
    out.inline_with(src, |op| match op {
        Op::Field(f) => pre.get(f.0 as usize).copied().flatten(),
        other => leaf(other),
    })
}

/// A node function that passes its aggregates `types` through as the
/// stage's outputs: the stages whose edge function already forms each
/// output's per-edge term.
pub(super) fn passthrough_node(types: &[Type], sp: Span) -> Region {
    let mut node = Region::new(types.to_vec());
    node.outputs = types.iter().enumerate().map(|(i, t)| node.push(Op::Input(i as u32), *t, sp)).collect();
    node
}

/// A zero of type `t`: the cotangent of what a rule or the edge function
/// never reached.
pub(super) fn zero_of(b: &mut B<'_>, t: Type) -> ValueId {
    b.fill(0.0, t)
}

/// The name of the stage output that carries a field's gradient;
/// gradient plans find their parts by it.
pub(super) fn grad_name(role: Role, name: &str) -> String {
    format!("grad.{}.{}", role.name(), name)
}
