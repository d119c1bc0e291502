//! The values a call takes and gives back: the fields and parameters it
//! is given by role and name ([`Inputs`]), its outputs by name
//! ([`Outputs`]), the gradients a backward returns ([`Gradients`]) and which
//! of them it is asked for ([`Wrt`]). Every way of running a kernel (in
//! memory, paged, sharded, renumbered, on a device, from saved residuals)
//! speaks these, so they sit below all of them.

use tiga_compiler::ir::Role;
use tiga_runtime::{DType, Data, DataMut, FieldType, Tensor, TensorView};

use crate::error::{Error, Result};

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
    pub(crate) fields: Vec<(Role, String, Input<'a>)>,
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
    pub(crate) fn field_types(&self) -> impl Iterator<Item = FieldType> + '_ {
        self.fields.iter().map(|(_, _, v)| v.view().field_type())
    }

    /// Add a field by role (for tools that read roles from flags).
    pub fn with_role(self, role: Role, name: &str, v: impl Into<Input<'a>>) -> Self {
        self.with(role, name, v)
    }
}

/// A call's outputs, by name, in declaration order.
#[derive(Debug, Clone)]
pub struct Outputs {
    pub items: Vec<(String, Tensor)>,
}

impl Outputs {
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.items.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// Output `name`, or an error naming the outputs there are.
    pub fn tensor(&self, name: &str) -> Result<&Tensor> {
        self.get(name).ok_or_else(|| Error::NoOutput {
            name: name.to_string(),
            outputs: self.items.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", "),
        })
    }

    /// Output `name`, moved out of the outputs (no copy), or an error
    /// naming the outputs there are.
    pub fn take(&mut self, name: &str) -> Result<Tensor> {
        self.tensor(name)?;
        let at =
            self.items.iter().position(|(n, _)| n == name).ok_or_else(|| Error::Internal(format!("output `{name}` vanished")))?;
        Ok(self.items.remove(at).1)
    }

    /// Output `name`'s values in f32: an error if there is no such output
    /// or the call ran in f64.
    pub fn f32(&self, name: &str) -> Result<&[f32]> {
        let t = self.tensor(name)?;
        t.as_f32().ok_or_else(|| Error::OutputDtype { name: name.to_string(), wanted: DType::F32, dtype: t.dtype() })
    }

    /// Output `name`'s values in f64 (see [`Outputs::f32`]).
    pub fn f64(&self, name: &str) -> Result<&[f64]> {
        let t = self.tensor(name)?;
        t.as_f64().ok_or_else(|| Error::OutputDtype { name: name.to_string(), wanted: DType::F64, dtype: t.dtype() })
    }
    /// The only output, or the one named `out`.
    pub fn out(&self) -> Option<&Tensor> {
        self.get("out").or(if self.items.len() == 1 { self.items.first().map(|(_, t)| t) } else { None })
    }
}

/// `outputs["out"]`: the output of that name (a panic naming the outputs
/// there are when it has none; [`Outputs::tensor`] returns an error
/// instead).
impl std::ops::Index<&str> for Outputs {
    type Output = Tensor;
    fn index(&self, name: &str) -> &Tensor {
        match self.get(name) {
            Some(t) => t,
            None => panic!("no output `{name}`; the outputs are: {:?}", self.items.iter().map(|(n, _)| n).collect::<Vec<_>>()),
        }
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

/// Gradients by input role and name, shaped like the inputs.
#[derive(Debug, Clone)]
pub struct Gradients {
    pub items: Vec<(Role, String, Tensor)>,
}

impl Gradients {
    pub fn get(&self, role: Role, name: &str) -> Option<&Tensor> {
        self.items.iter().find(|(r, n, _)| *r == role && n == name).map(|(_, _, t)| t)
    }
    /// The gradient of `(role, name)`, moved out (no copy).
    pub fn take(&mut self, role: Role, name: &str) -> Option<Tensor> {
        let at = self.items.iter().position(|(r, n, _)| *r == role && n == name)?;
        Some(self.items.remove(at).2)
    }
    pub fn src(&self, name: &str) -> Option<&Tensor> {
        self.get(Role::Src, name)
    }
    pub fn dst(&self, name: &str) -> Option<&Tensor> {
        self.get(Role::Dst, name)
    }
    pub fn edge(&self, name: &str) -> Option<&Tensor> {
        self.get(Role::Edge, name)
    }
    pub fn param(&self, name: &str) -> Option<&Tensor> {
        self.get(Role::Param, name)
    }

    /// One gradient for a tensor given in several roles (`h` as both the
    /// source and the destination field of a square graph, say): the sum,
    /// in the order listed, of the gradients of those fields. An error if
    /// one is missing or their shapes or dtypes differ.
    pub fn summed(&self, fields: &[(Role, &str)]) -> Result<Tensor> {
        let mut acc: Option<Tensor> = None;
        for &(role, name) in fields {
            let t = self.get(role, name).ok_or_else(|| Error::NoGradient { role: role.name(), name: name.to_string() })?;
            match &mut acc {
                None => acc = Some(t.clone()),
                Some(a) if a.shape() != t.shape() => {
                    return Err(Error::TensorMismatch {
                        left: format!("{} {:?}", a.dtype(), a.shape()),
                        right: format!("{} {:?}", t.dtype(), t.shape()),
                    })
                }
                Some(a) => add_tensors(a, t)?,
            }
        }
        acc.ok_or(Error::NoGradient { role: "any", name: "(no fields listed)".into() })
    }
}

/// `a += b`, element by element: an error when their lengths or dtypes
/// differ, never a silent no-op.
pub(crate) fn add_tensors(a: &mut Tensor, b: &Tensor) -> Result<()> {
    if a.len() != b.len() || a.dtype() != b.dtype() {
        return Err(Error::TensorMismatch {
            left: format!("{} {:?}", a.dtype(), a.shape()),
            right: format!("{} {:?}", b.dtype(), b.shape()),
        });
    }
    match (a.data_mut(), b.data()) {
        (DataMut::F32(x), Data::F32(y)) => x.iter_mut().zip(y).for_each(|(p, q)| *p += q),
        (DataMut::F64(x), Data::F64(y)) => x.iter_mut().zip(y).for_each(|(p, q)| *p += q),
        _ => unreachable!("dtypes checked above"),
    }
    Ok(())
}
