//! What a call gives back: its outputs by name ([`Outputs`]) and the
//! gradients a backward returns ([`Gradients`]), with the facade's errors.
//! What a call is given ([`Inputs`], [`Wrt`]) is the core's, so that every
//! realization layer speaks it; these are re-exported beside them.

use tiga_compiler::ir::Role;
use tiga_runtime::{DType, Data, DataMut, Tensor};

pub use tiga_runtime::fields::{Input, Inputs, Wrt};

use crate::error::{Error, Result};

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
        // Half-precision values are stored, never accumulated.
        _ => {
            return Err(Error::TensorMismatch {
                left: format!("{} {:?}", a.dtype(), a.shape()),
                right: "a half-precision sum".into(),
            })
        }
    }
    Ok(())
}
