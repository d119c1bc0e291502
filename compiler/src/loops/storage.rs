//! How a variant stores its fields and outputs: the part of a compile
//! request that both CPU back ends read (the Cranelift JIT's variant key and
//! the Rust-source variants the macro emits), so it lives beside the loop
//! kernel rather than in either back end.

use crate::ir::{DType, FieldType};
use crate::loops::{Addr, LoopKernel};

/// How a variant's fields and outputs are stored: every one in the
/// variant's dtype (the default, and the only form when none is half), or
/// one [`FieldType`] each. Only an f32 variant has half-width ones.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Storage {
    fields: Vec<FieldType>,
    outputs: Vec<FieldType>,
}

impl Storage {
    /// The storage of fields `fields` and outputs `outputs` (each its
    /// call's dtype or a half type), normalized: empty when none is half,
    /// so that an all-f32 call keys the same variant as before.
    pub fn of(fields: &[FieldType], outputs: &[FieldType]) -> Storage {
        if fields.iter().chain(outputs).any(|t| t.is_half()) {
            Storage { fields: fields.to_vec(), outputs: outputs.to_vec() }
        } else {
            Storage::default()
        }
    }

    /// Why `k`'s variant of `dtype` cannot have this storage: half types
    /// compute in f32, so only an f32 variant has them, and a non-empty
    /// storage names one type per field and per output, each the dtype or
    /// a half type.
    pub fn check(&self, k: &LoopKernel, dtype: DType) -> Result<(), String> {
        if !self.has_half() {
            return Ok(());
        }
        if dtype != DType::F32 {
            return Err(format!("half-width fields and outputs compute in f32, not {dtype}"));
        }
        if self.fields.len() != k.fields.len() || self.outputs.len() != k.outputs.len() {
            return Err(format!(
                "storage names {} fields and {} outputs, the kernel has {} and {}",
                self.fields.len(),
                self.outputs.len(),
                k.fields.len(),
                k.outputs.len()
            ));
        }
        match self.fields.iter().chain(&self.outputs).find(|t| !t.is_half() && t.dtype() != dtype || **t == FieldType::F64) {
            Some(t) => Err(format!("a {t} field or output in an {dtype} variant")),
            None => Ok(()),
        }
    }

    /// Whether some field or output is stored at half width.
    pub fn has_half(&self) -> bool {
        !self.fields.is_empty() || !self.outputs.is_empty()
    }

    /// Field `f`'s element type in a variant of `dtype`.
    pub fn field(&self, f: usize, dtype: DType) -> FieldType {
        self.fields.get(f).copied().unwrap_or(dtype.into())
    }

    /// How the memory `a` addresses is stored in a variant of `dtype`
    /// (scratch is always in the dtype).
    pub fn stored(&self, a: &Addr, dtype: DType) -> FieldType {
        match a {
            Addr::Field { field, .. } => self.field(field.0 as usize, dtype),
            Addr::Output { out, .. } | Addr::OutputMatrix { out, .. } => self.output(*out as usize, dtype),
            Addr::Scratch { .. } => dtype.into(),
        }
    }

    /// Output `o`'s element type in a variant of `dtype`.
    pub fn output(&self, o: usize, dtype: DType) -> FieldType {
        self.outputs.get(o).copied().unwrap_or(dtype.into())
    }

    /// The storage an f32 call has when every field and output is given
    /// in the type the kernel declares for it (a half type where declared,
    /// else f32): what the macro's half-width ahead-of-time variants are
    /// compiled for. Empty when the kernel declares nothing half.
    pub fn declared(k: &LoopKernel) -> Storage {
        let fields: Vec<FieldType> =
            k.fields.iter().map(|f| if f.declared.is_half() { f.declared } else { FieldType::F32 }).collect();
        let outputs: Vec<FieldType> = k.outputs.iter().map(|o| o.stored_as(DType::F32)).collect();
        Storage::of(&fields, &outputs)
    }

    /// Every field's and output's element type, fields first (empty when
    /// nothing is half): the form the macro writes into its variant tables.
    pub fn types(&self) -> impl Iterator<Item = FieldType> + '_ {
        self.fields.iter().chain(&self.outputs).copied()
    }

    /// Whether this is the storage whose types, fields first, are `types`
    /// (a variant table's; empty for all in the dtype).
    pub fn is(&self, types: &[FieldType]) -> bool {
        self.types().eq(types.iter().copied())
    }

    /// A short text for plans and notes (`src.h: bf16, out: f16`), empty
    /// when nothing is half.
    pub fn describe(&self, k: &LoopKernel) -> String {
        let mut parts = Vec::new();
        for (f, t) in k.fields.iter().zip(&self.fields) {
            if t.is_half() {
                parts.push(format!("{}.{}: {t}", f.role.name(), f.name));
            }
        }
        for (o, t) in k.outputs.iter().zip(&self.outputs) {
            if t.is_half() {
                parts.push(format!("{}: {t}", o.name));
            }
        }
        parts.join(", ")
    }
}
