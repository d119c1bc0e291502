//! The kernel IR: one typed expression DAG per region, held in an arena.
//!
//! A [`Kernel`] is what the front end captures from `#[message_passing]`:
//! declared fields (by role), solved width symbols, an `edge` region (the
//! message), a [`Reducer`] and an optional `node` region. Passes rewrite it in
//! place; `lower-csr-to-gather-segment` adds a [`Segment`] (accumulator state,
//! its init, its per-edge step and its finish), and `fuse-edge-node-regions`
//! inlines `edge` into the step and `node` into the finish, after which the
//! loop scheduler builds the loop IR from the fused segment alone.
//!
//! Values are referenced by [`ValueId`], an index into a region's `nodes`;
//! operands always precede their users, so a region is topologically ordered
//! by construction and evaluation is one forward sweep.

pub mod print;
mod verify;

pub use verify::{verify, VerifyError};

use serde::{Deserialize, Serialize};

/// Where a construct came from in the user's source: 1-based line, 0-based
/// column (proc-macro2's convention), so `tigac` can print a caret.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Span {
    pub line: u32,
    pub col: u32,
}

/// The precision a variant runs in. Kernels are precision-generic: the
/// declared type documents intent, a call picks one dtype for all fields.
/// The same enum as the runtime's tensors ([`tiga_abi::DType`]).
pub use tiga_abi::DType;
/// How a field or output is stored: its call's dtype, or a half type
/// (`f16`, `bf16`) loaded as f32 and stored rounded to nearest even.
pub use tiga_abi::FieldType;

/// A width symbol, solved at call time from the fields passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WidthId(pub u32);

/// How a width symbol is bound at call time: by the trailing dimension of a
/// field, or by one dimension of a matrix parameter.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WidthDecl {
    /// A readable name, `F` for the first, then `F1`, `F2`, ...
    pub name: String,
    /// The field that binds it (first one found) and which of its dimensions.
    pub bound_by: (FieldId, usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Type {
    Bool,
    Scalar,
    Vector(WidthId),
    Matrix(WidthId, WidthId),
    /// One boolean per feature: an elementwise comparison of vectors (used
    /// by adjoints: relu masks, max winners).
    Mask(WidthId),
}

impl Type {
    /// The type of an elementwise operation of two numbers: a scalar
    /// broadcasts against a vector, vectors must share their width. The one
    /// rule the verifier and the adjoints type with.
    pub fn elementwise(a: Type, b: Type) -> Option<Type> {
        match (a, b) {
            (Type::Scalar, Type::Scalar) => Some(Type::Scalar),
            (Type::Scalar, Type::Vector(w)) | (Type::Vector(w), Type::Scalar) => Some(Type::Vector(w)),
            (Type::Vector(x), Type::Vector(y)) if x == y => Some(Type::Vector(x)),
            _ => None,
        }
    }

    pub fn is_numeric(self) -> bool {
        !matches!(self, Type::Bool | Type::Mask(_))
    }
    pub fn is_boolean(self) -> bool {
        matches!(self, Type::Bool | Type::Mask(_))
    }
    /// The feature width, for vectors and masks.
    pub fn width(self) -> Option<WidthId> {
        match self {
            Type::Vector(w) | Type::Mask(w) => Some(w),
            _ => None,
        }
    }
}

pub use tiga_abi::Role;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FieldId(pub u32);

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FieldDecl {
    pub name: String,
    pub role: Role,
    /// `Scalar`, `Vector` or (params only) `Matrix`.
    pub ty: Type,
    /// The element type the kernel declares (`f32`, `f64`, `f16`, `bf16`).
    /// Kernels are precision-generic: a call's tensors say how each field
    /// is stored; this documents the intent (and types the macro path's
    /// functions).
    pub declared: FieldType,
    pub span: Span,
}

/// A kernel output. Destination outputs (the usual kind) are written per
/// row; edge outputs per edge, in the user's edge order; parameter outputs
/// are sums over every edge and row (gradients of parameters), reduced
/// deterministically.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutputDecl {
    pub name: String,
    pub ty: Type,
    #[serde(default = "dst_role")]
    pub role: Role,
    /// The element type the kernel declares for it. A half type (`f16`,
    /// `bf16`) makes an f32 call store this output at half width, rounded
    /// to nearest even; otherwise (and in an f64 call) the output is in the
    /// call's dtype.
    #[serde(default = "f32_type")]
    pub declared: FieldType,
}

fn dst_role() -> Role {
    Role::Dst
}

fn f32_type() -> FieldType {
    FieldType::F32
}

impl OutputDecl {
    /// An output declared `f32` (as every adjoint stage's: gradients are
    /// computed and accumulated in the call's dtype, and the facade
    /// converts a half field's gradient at the end).
    pub fn new(name: String, ty: Type, role: Role) -> OutputDecl {
        OutputDecl { name, ty, role, declared: FieldType::F32 }
    }

    /// How a call in `dtype` stores it: at half width when declared half
    /// and the call computes in f32, else in `dtype`.
    pub fn stored_as(&self, dtype: DType) -> FieldType {
        if self.declared.is_half() && dtype == DType::F32 {
            self.declared
        } else {
            dtype.into()
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ValueId(pub u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UnOp {
    Neg,
    Abs,
    Exp,
    Ln,
    Sqrt,
    Tanh,
    Sigmoid,
    Relu,
    Not,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Min,
    Max,
    /// `leaky_relu(x, slope)`: x if x > 0 else slope * x.
    LeakyRelu,
    And,
    Or,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CmpOp {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

/// One operation. Elementwise operations broadcast a scalar against a vector.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Op {
    Const(#[serde(with = "f64_exact")] f64),
    /// Read a field: a source field at the edge's source j, a destination field
    /// at the row i, an edge field at the edge, a parameter as a whole.
    Field(FieldId),
    /// The k-th input of the region (node: aggregate components; combine: the
    /// components of `a` then `b`; finalize: the state components).
    Input(u32),
    /// The k-th accumulator component (segment step and finish only).
    State(u32),
    /// The k-th message component, read from a materialized message buffer
    /// (segment step before fusion only).
    Message(u32),
    /// The number of edges of the current row (segment finish only).
    Degree,
    /// The position of the current edge within its destination row, 0..degree
    /// (edge and step regions only).
    Rank,
    /// A scalar repeated across a width.
    Broadcast(ValueId, WidthId),
    /// The row's exclusive scan of the reducer state: state component k
    /// before this edge is folded in (edge region, monoid reducers only).
    /// Adjoints of monoids read the prefix (and, on the row-reversed graph,
    /// the suffix) of each edge through it.
    Scan(u32),
    Unary(UnOp, ValueId),
    Binary(BinOp, ValueId, ValueId),
    Powi(ValueId, i32),
    Cmp(CmpOp, ValueId, ValueId),
    Select(ValueId, ValueId, ValueId),
    /// Sum over the feature axis.
    Sum(ValueId),
    Dot(ValueId, ValueId),
    /// Matrix (param) times vector.
    MatVec(ValueId, ValueId),
    /// Transposed matrix times vector (adjoints of `matvec`).
    MatTVec(ValueId, ValueId),
    /// Outer product `a bᵀ`, a matrix: only as a parameter output (the
    /// gradient of a matrix parameter), possibly summed with `add`.
    Outer(ValueId, ValueId),
}

impl Op {
    /// Operands in order; used by every walk over the DAG.
    pub fn operands(&self) -> Vec<ValueId> {
        match *self {
            Op::Const(_) | Op::Field(_) | Op::Input(_) | Op::State(_) | Op::Message(_) | Op::Degree | Op::Rank | Op::Scan(_) => {
                vec![]
            }
            Op::Unary(_, a) | Op::Powi(a, _) | Op::Sum(a) | Op::Broadcast(a, _) => vec![a],
            Op::Binary(_, a, b) | Op::Cmp(_, a, b) | Op::Dot(a, b) | Op::MatVec(a, b) | Op::MatTVec(a, b) | Op::Outer(a, b) => {
                vec![a, b]
            }
            Op::Select(c, a, b) => vec![c, a, b],
        }
    }

    /// The same operation with operands renamed through `f`.
    pub fn map_operands(&self, mut f: impl FnMut(ValueId) -> ValueId) -> Op {
        match *self {
            Op::Const(_) | Op::Field(_) | Op::Input(_) | Op::State(_) | Op::Message(_) | Op::Degree | Op::Rank | Op::Scan(_) => {
                self.clone()
            }
            Op::Broadcast(a, w) => Op::Broadcast(f(a), w),
            Op::Unary(u, a) => Op::Unary(u, f(a)),
            Op::Powi(a, n) => Op::Powi(f(a), n),
            Op::Sum(a) => Op::Sum(f(a)),
            Op::Binary(o, a, b) => Op::Binary(o, f(a), f(b)),
            Op::Cmp(o, a, b) => Op::Cmp(o, f(a), f(b)),
            Op::Dot(a, b) => Op::Dot(f(a), f(b)),
            Op::MatVec(a, b) => Op::MatVec(f(a), f(b)),
            Op::MatTVec(a, b) => Op::MatTVec(f(a), f(b)),
            Op::Outer(a, b) => Op::Outer(f(a), f(b)),
            Op::Select(c, a, b) => Op::Select(f(c), f(a), f(b)),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub op: Op,
    pub ty: Type,
    pub span: Span,
}

/// An expression DAG: `nodes` in topological order, `outputs` the values the
/// region yields (a tuple when there are several).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Region {
    pub inputs: Vec<Type>,
    pub nodes: Vec<Node>,
    pub outputs: Vec<ValueId>,
}

impl Region {
    pub fn new(inputs: Vec<Type>) -> Region {
        Region { inputs, nodes: Vec::new(), outputs: Vec::new() }
    }

    pub fn push(&mut self, op: Op, ty: Type, span: Span) -> ValueId {
        let id = ValueId(self.nodes.len() as u32);
        self.nodes.push(Node { op, ty, span });
        id
    }

    pub fn node(&self, v: ValueId) -> &Node {
        &self.nodes[v.0 as usize]
    }

    pub fn ty(&self, v: ValueId) -> Type {
        self.nodes[v.0 as usize].ty
    }

    /// A copy of this region in which each node that `subst` answers (it
    /// gets the region being built and the node) becomes the value it
    /// returns; the other nodes are copied with their operands remapped.
    pub fn rewrite(&self, mut subst: impl FnMut(&mut Region, &Node) -> Option<ValueId>) -> Region {
        let mut out = Region::new(self.inputs.clone());
        let map = out.append_copies(self, 0..self.nodes.len(), |r, n, _| subst(r, n));
        out.outputs = self.outputs.iter().map(|o| map[o.0 as usize]).collect();
        out
    }

    /// The one copy-with-remap loop: append copies of `other`'s nodes
    /// `which` (in order, closed under operands) to this region. Each node
    /// is first offered to `copy` (with this region and the images so far),
    /// which may push its own image and return it; otherwise it is copied
    /// with its operands remapped. Returns the image of every node of
    /// `other` (entries outside `which` are meaningless).
    pub fn append_copies(
        &mut self,
        other: &Region,
        which: impl IntoIterator<Item = usize>,
        mut copy: impl FnMut(&mut Region, &Node, &[ValueId]) -> Option<ValueId>,
    ) -> Vec<ValueId> {
        let mut map = vec![ValueId(0); other.nodes.len()];
        for i in which {
            let n = &other.nodes[i];
            map[i] = match copy(self, n, &map) {
                Some(v) => v,
                None => {
                    let op = n.op.map_operands(|a| map[a.0 as usize]);
                    self.push(op, n.ty, n.span)
                }
            };
        }
        map
    }

    /// Append copies of `other`'s nodes `cone` (in order, closed under
    /// operands, as [`Region::cone`] gives), each op passed through `op_map`
    /// first (a field renumbering, say). Returns the copies' ids, indexed by
    /// `other`'s (entries outside the cone are meaningless).
    pub fn copy_cone(&mut self, other: &Region, cone: &[usize], mut op_map: impl FnMut(&Op) -> Op) -> Vec<ValueId> {
        self.append_copies(other, cone.iter().copied(), |r, n, map| {
            Some(r.push(op_map(&n.op).map_operands(|a| map[a.0 as usize]), n.ty, n.span))
        })
    }

    /// Which nodes `roots` depend on, themselves included (a backward walk:
    /// operands precede their uses).
    pub fn live_from(&self, roots: impl IntoIterator<Item = ValueId>) -> Vec<bool> {
        let mut live = vec![false; self.nodes.len()];
        for v in roots {
            if let Some(l) = live.get_mut(v.0 as usize) {
                *l = true;
            }
        }
        for i in (0..self.nodes.len()).rev() {
            if live[i] {
                for a in self.nodes[i].op.operands() {
                    live[a.0 as usize] = true;
                }
            }
        }
        live
    }

    /// The nodes `v` depends on, itself included, in region order.
    pub fn cone(&self, v: ValueId) -> Vec<usize> {
        let live = self.live_from([v]);
        (0..self.nodes.len()).filter(|&i| live[i]).collect()
    }

    /// The operations of `cone` other than field reads and constants (what
    /// computing it again costs), when all of its values are scalars or
    /// booleans; `None` when one is a vector or matrix (a row of work).
    pub fn scalar_cone_ops(&self, cone: &[usize]) -> Option<usize> {
        cone.iter()
            .all(|&i| matches!(self.nodes[i].ty, Type::Scalar | Type::Bool))
            .then(|| cone.iter().filter(|&&i| !matches!(self.nodes[i].op, Op::Field(_) | Op::Const(_))).count())
    }

    /// Whether the nodes `cone` (of this region, in a kernel with `fields`)
    /// depend on nothing but the current row: destination and parameter
    /// fields and constants, no state, input, message, degree, rank or scan.
    /// Such values the row's finish (or another kernel's row) can compute.
    pub fn reads_only_row(&self, cone: &[usize], fields: &[FieldDecl]) -> bool {
        cone.iter().all(|&i| match &self.nodes[i].op {
            Op::Field(f) => fields.get(f.0 as usize).is_some_and(|d| matches!(d.role, Role::Dst | Role::Param)),
            Op::State(_) | Op::Input(_) | Op::Message(_) | Op::Degree | Op::Rank | Op::Scan(_) => false,
            _ => true,
        })
    }

    pub fn output_types(&self) -> Vec<Type> {
        self.outputs.iter().map(|&v| self.ty(v)).collect()
    }

    /// Copy `other` into `self`, replacing its `Input(k)` nodes by `inputs[k]`,
    /// and return the images of `other`'s outputs. This is how regions are
    /// composed (fusion, monoid inlining) without a message buffer.
    pub fn inline(&mut self, other: &Region, inputs: &[ValueId]) -> Vec<ValueId> {
        self.inline_with(other, |op| match op {
            Op::Input(k) => inputs.get(*k as usize).copied(),
            _ => None,
        })
    }

    /// Like [`Region::inline`], with a caller-chosen substitution for leaf
    /// operations (inputs, states, messages).
    pub fn inline_with(&mut self, other: &Region, mut subst: impl FnMut(&Op) -> Option<ValueId>) -> Vec<ValueId> {
        let map = self.append_copies(other, 0..other.nodes.len(), |_, n, _| subst(&n.op));
        other.outputs.iter().map(|o| map[o.0 as usize]).collect()
    }
}

/// The reducer's kind, as written by the user.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReducerKind {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    Softmax,
    Monoid,
}

impl ReducerKind {
    pub fn name(self) -> &'static str {
        match self {
            ReducerKind::Sum => "sum",
            ReducerKind::Mean => "mean",
            ReducerKind::Max => "max",
            ReducerKind::Min => "min",
            ReducerKind::Prod => "prod",
            ReducerKind::Softmax => "softmax",
            ReducerKind::Monoid => "monoid",
        }
    }
}

/// The class `analyze-reducer-algebra` assigns; later passes (partial
/// aggregation across pages and halos, adjoint rules) key off it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReducerClass {
    Additive,
    Multiplicative,
    Idempotent,
    Softmax,
    General,
}

impl ReducerClass {
    pub fn name(self) -> &'static str {
        match self {
            ReducerClass::Additive => "additive",
            ReducerClass::Multiplicative => "multiplicative",
            ReducerClass::Idempotent => "idempotent",
            ReducerClass::Softmax => "softmax",
            ReducerClass::General => "general",
        }
    }
}

/// Algebraic properties: declared by the user (monoids) or proved by
/// `analyze-reducer-algebra`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Properties {
    pub associative: bool,
    pub commutative: bool,
    pub idempotent: bool,
    pub invertible: bool,
    pub linear: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reducer {
    pub kind: ReducerKind,
    pub span: Span,
    /// What the user declared (monoids) and, after analysis, what was proved.
    pub declared: Properties,
    pub proved: Option<Properties>,
    pub class: Option<ReducerClass>,
    /// Monoid regions: `identity` has no inputs; `combine` takes the state
    /// components of `a` then of `b`; `finalize` takes the state.
    pub identity: Option<Region>,
    pub combine: Option<Region>,
    pub finalize: Option<Region>,
}

/// The gather/segment form of the reduction over a destination row, built by
/// `lower-csr-to-gather-segment`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    pub state: Vec<Type>,
    /// Outputs: the initial state (the reducer's identity).
    pub init: Region,
    /// Reads `State(k)`, `Message(k)` (before fusion) or fields (after);
    /// outputs the new state.
    pub step: Region,
    /// Reads `State(k)` and `Degree`; outputs the aggregate (before fusion)
    /// or the kernel outputs (after).
    pub finish: Region,
    /// A first pass over the row's edges, before `step`'s: reads and
    /// outputs the state like `step` (no extra outputs). Set by
    /// `precompute-row-max`, so that the main pass sees a row maximum that
    /// no longer moves (one exponential per edge, no rescaling).
    #[serde(default)]
    pub pre_step: Option<Region>,
    /// Set by `fuse-edge-node-regions`: `edge` lives inside `step` and `node`
    /// inside `finish`, and no message buffer exists.
    pub fused: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Kernel {
    pub name: String,
    pub span: Span,
    pub fields: Vec<FieldDecl>,
    pub widths: Vec<WidthDecl>,
    pub outputs: Vec<OutputDecl>,
    /// No inputs; outputs are the message components.
    pub edge: Region,
    pub reducer: Reducer,
    /// Inputs are the aggregate components; outputs are the kernel outputs.
    /// `None` means identity.
    pub node: Option<Region>,
    pub segment: Option<Segment>,
}

impl Kernel {
    pub fn field(&self, id: FieldId) -> &FieldDecl {
        &self.fields[id.0 as usize]
    }

    pub fn field_by_name(&self, role: Role, name: &str) -> Option<FieldId> {
        self.fields.iter().position(|f| f.role == role && f.name == name).map(|i| FieldId(i as u32))
    }

    /// Outputs of one role, with their indices in `outputs`.
    pub fn outputs_of(&self, role: Role) -> Vec<(usize, &OutputDecl)> {
        self.outputs.iter().enumerate().filter(|(_, o)| o.role == role).collect()
    }

    /// How many of the edge region's outputs are messages: the rest are
    /// edge outputs, then per-edge contributions to parameter outputs.
    pub fn num_messages(&self) -> usize {
        let extra = self.outputs_of(Role::Edge).len() + self.outputs_of(Role::Param).len();
        self.edge.outputs.len().saturating_sub(extra)
    }

    /// The message component types.
    pub fn message_types(&self) -> Vec<Type> {
        let t = self.edge.output_types();
        t[..self.num_messages().min(t.len())].to_vec()
    }

    /// The aggregate's component types: what `node` receives.
    pub fn aggregate_types(&self) -> Vec<Type> {
        let msg = self.message_types();
        match self.reducer.kind {
            ReducerKind::Softmax => msg.get(1).copied().into_iter().collect(),
            ReducerKind::Monoid => match (&self.reducer.finalize, &self.reducer.identity) {
                (Some(f), _) => f.output_types(),
                (None, Some(id)) => id.output_types(),
                (None, None) => msg,
            },
            _ => msg,
        }
    }

    pub fn width_name(&self, w: WidthId) -> &str {
        self.widths.get(w.0 as usize).map(|d| d.name.as_str()).unwrap_or("?")
    }
}

/// JSON has no infinities or NaN: non-finite constants travel as strings
/// (`"inf"`, `"-inf"`, `"nan"`), finite ones as numbers (exact round trip).
mod f64_exact {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            s.serialize_f64(*v)
        } else if v.is_nan() {
            s.serialize_str("nan")
        } else if *v > 0.0 {
            s.serialize_str("inf")
        } else {
            s.serialize_str("-inf")
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumOrText {
        Num(f64),
        Text(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        match NumOrText::deserialize(d)? {
            NumOrText::Num(x) => Ok(x),
            NumOrText::Text(t) => match t.as_str() {
                "inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                "nan" => Ok(f64::NAN),
                other => Err(serde::de::Error::custom(format!("not a number: `{other}`"))),
            },
        }
    }
}
