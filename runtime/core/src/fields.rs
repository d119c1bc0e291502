//! The values a call is given: the fields and parameters by role and name
//! ([`Inputs`]), which gradients a backward is asked for ([`Wrt`]), what it
//! starts from ([`Seed`]) and what its forward kept for it ([`Tape`]).
//! Every way of running a kernel (in memory, paged, sharded, renumbered,
//! on a device, from saved residuals) speaks these, so they sit below all
//! of them, in the core. (What a call gives back, with the facade's
//! errors, is the facade's `Outputs` and `Gradients`.)

use std::sync::Arc;

use crate::tensor::{FieldType, Tensor, TensorView};
use tiga_abi::Role;

/// One field or parameter of a call: a view of the caller's data, or a
/// value the call holds itself (a scalar parameter given as a number).
#[derive(Debug, Clone)]
pub enum Input<'a> {
    View(TensorView<'a>),
    Owned(Tensor),
}

impl Input<'_> {
    pub fn view(&self) -> TensorView<'_> {
        match self {
            Input::View(v) => v.clone(),
            Input::Owned(t) => t.view(),
        }
    }
}

impl<'a> From<TensorView<'a>> for Input<'a> {
    fn from(v: TensorView<'a>) -> Self {
        Input::View(v)
    }
}
impl<'a> From<&'a Tensor> for Input<'a> {
    fn from(t: &'a Tensor) -> Self {
        Input::View(t.view())
    }
}
impl<'a> From<&'a [f32]> for Input<'a> {
    fn from(d: &'a [f32]) -> Self {
        Input::View(d.into())
    }
}
impl<'a> From<&'a [f64]> for Input<'a> {
    fn from(d: &'a [f64]) -> Self {
        Input::View(d.into())
    }
}
impl<'a> From<&'a Vec<f32>> for Input<'a> {
    fn from(d: &'a Vec<f32>) -> Self {
        Input::View(d.into())
    }
}
impl<'a> From<&'a Vec<f64>> for Input<'a> {
    fn from(d: &'a Vec<f64>) -> Self {
        Input::View(d.into())
    }
}
/// A vector parameter (`[N]`), e.g. `.param("a", &[0.5f32, 1.0, 2.0, 4.0])`.
impl<'a, const N: usize> From<&'a [f32; N]> for Input<'a> {
    fn from(d: &'a [f32; N]) -> Self {
        Input::View(d.as_slice().into())
    }
}
impl<'a, const N: usize> From<&'a [f64; N]> for Input<'a> {
    fn from(d: &'a [f64; N]) -> Self {
        Input::View(d.as_slice().into())
    }
}
/// A scalar parameter given as a number, e.g. `.param("damping", 0.85f32)`.
impl From<f32> for Input<'_> {
    fn from(x: f32) -> Self {
        Input::Owned(Tensor::scalar_f32(x))
    }
}
impl From<f64> for Input<'_> {
    fn from(x: f64) -> Self {
        Input::Owned(Tensor::scalar_f64(x))
    }
}

/// The fields and parameters of one call, by role and name, in the order
/// given (a field given twice is an error when the call binds them).
#[derive(Debug, Default, Clone)]
pub struct Inputs<'a> {
    pub fields: Vec<(Role, String, Input<'a>)>,
}

impl<'a> Inputs<'a> {
    pub fn new() -> Inputs<'a> {
        Inputs::default()
    }
    fn with(mut self, role: Role, name: &str, v: impl Into<Input<'a>>) -> Self {
        self.fields.push((role, name.to_string(), v.into()));
        self
    }
    /// A source-node field (`[num_src]` or `[num_src, F]`).
    pub fn src(self, name: &str, v: impl Into<Input<'a>>) -> Self {
        self.with(Role::Src, name, v)
    }
    /// A destination-node field (`[num_dst]` or `[num_dst, F]`).
    pub fn dst(self, name: &str, v: impl Into<Input<'a>>) -> Self {
        self.with(Role::Dst, name, v)
    }
    /// An edge field in the user's edge order (`[num_edges]` or `[num_edges, F]`).
    pub fn edge(self, name: &str, v: impl Into<Input<'a>>) -> Self {
        self.with(Role::Edge, name, v)
    }
    /// A parameter: a number (`0.85f32`), an array or slice (`[F]`), or a
    /// tensor (`[]`/`[1]`, `[F]` or `[R, C]`).
    pub fn param(self, name: &str, v: impl Into<Input<'a>>) -> Self {
        self.with(Role::Param, name, v)
    }
    /// Whether a field of this role and name was given.
    pub fn has(&self, role: Role, name: &str) -> bool {
        self.fields.iter().any(|(r, n, _)| *r == role && n == name)
    }

    /// How the given fields are stored, in the order given.
    pub fn field_types(&self) -> impl Iterator<Item = FieldType> + '_ {
        self.fields.iter().map(|(_, _, v)| v.view().field_type())
    }

    /// These inputs with each field that `moved` holds (one entry per
    /// field, in order) in place of the original.
    pub fn with_moved<'m>(&'m self, moved: &'m [Option<Tensor>]) -> Inputs<'m> {
        self.fields.iter().zip(moved).fold(Inputs::new(), |acc, ((role, name, v), m)| match m {
            Some(t) => acc.with_role(*role, name, t.view()),
            None => acc.with_role(*role, name, v.view()),
        })
    }

    /// Add a field by role (for tools that read roles from flags).
    pub fn with_role(self, role: Role, name: &str, v: impl Into<Input<'a>>) -> Self {
        self.with(role, name, v)
    }
}

/// Which gradients a backward computes: every field's, or only those
/// named (a parameter's alone, say, when nothing upstream needs the
/// inputs'). Adjoint stages that feed none of them do not run, so asking
/// for parameters only skips a source-side stage over the transposed
/// graph; what is computed is the same bits as in a full backward.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Wrt {
    #[default]
    All,
    Only(Vec<(Role, String)>),
}

impl Wrt {
    /// Only these `(role, name)` fields' gradients.
    pub fn only<'n>(fields: impl IntoIterator<Item = (Role, &'n str)>) -> Wrt {
        Wrt::Only(fields.into_iter().map(|(r, n)| (r, n.to_string())).collect())
    }
    pub fn wants(&self, role: Role, name: &str) -> bool {
        match self {
            Wrt::All => true,
            Wrt::Only(v) => v.iter().any(|(r, n)| *r == role && n == name),
        }
    }
}

/// What a backward starts from.
#[derive(Clone, Copy)]
pub enum Seed<'c, 'v> {
    /// A cotangent per output (over a sharded graph: whole, or per owned
    /// row and edge).
    Cotangents(&'c [(&'c str, TensorView<'v>)]),
    /// The gradient of the sum of this output (over a sharded graph: of
    /// every rank's rows).
    SumOf(&'c str),
}

/// What a forward kept for its backward: the residuals by name (empty
/// when it kept none), with the content hash of the kernel that wrote
/// them.
#[derive(Debug, Clone, Default)]
pub struct Tape {
    kernel: String,
    items: Vec<(String, Arc<Tensor>)>,
}

impl Tape {
    pub fn new(kernel: String, items: Vec<(String, Arc<Tensor>)>) -> Tape {
        Tape { kernel, items }
    }
    /// The content hash of the kernel whose forward wrote it.
    pub fn kernel(&self) -> &str {
        &self.kernel
    }
    /// Whether the forward kept nothing (the backward recomputes).
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    /// The residuals, by name, as the plan names them.
    pub fn items(&self) -> &[(String, Arc<Tensor>)] {
        &self.items
    }
    pub fn into_items(self) -> Vec<(String, Arc<Tensor>)> {
        self.items
    }
    pub fn view(&self, name: &str) -> Option<TensorView<'_>> {
        self.items.iter().find(|(n, _)| n == name).map(|(_, t)| t.view())
    }
    /// The same tape with each residual replaced by `f`'s (a renumbering
    /// moving them into its numbering).
    pub fn mapped<E>(&self, mut f: impl FnMut(&Tensor) -> Result<Tensor, E>) -> Result<Tape, E> {
        let items = self.items.iter().map(|(n, t)| Ok((n.clone(), Arc::new(f(t)?)))).collect::<Result<_, E>>()?;
        Ok(Tape { kernel: self.kernel.clone(), items })
    }
}
