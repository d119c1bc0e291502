//! Element types of arrays that are not kernel fields: partitioned tensors
//! (f32, f64, i32, i64: features, embeddings, ids) and the `.npy` arrays
//! that fill and save them.
//!
//! Kernel fields keep [`crate::tensor::DType`] (f32 or f64): a kernel computes in
//! floats; a field may be stored at half width ([`crate::tensor::FieldType`],
//! `f16`/`bf16`), which is also an element type here, so that `.npy` files
//! and partitioned tensors carry half-precision features. A partitioned tensor also holds integer ids (a CSR's columns, a
//! label table), so it carries an [`ElementType`]; its rows are moved as
//! bytes (gather, scatter, messages, files) and read as [`Element`]s only
//! where a value is computed (optimizers, checks).

use std::fmt;

/// The element type of a partitioned tensor or a general `.npy` array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElementType {
    F32,
    F64,
    I32,
    I64,
    /// IEEE binary16 (numpy's `<f2`).
    F16,
    /// bfloat16, which numpy has no type code for: see
    /// [`ElementType::npy_descr`].
    BF16,
}

impl ElementType {
    /// Every element type, for tests and messages.
    pub const ALL: [ElementType; 6] =
        [ElementType::F32, ElementType::F64, ElementType::I32, ElementType::I64, ElementType::F16, ElementType::BF16];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            ElementType::F32 | ElementType::I32 => 4,
            ElementType::F64 | ElementType::I64 => 8,
            ElementType::F16 | ElementType::BF16 => 2,
        }
    }

    /// The Rust name (`f32`, `i64`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ElementType::F32 => "f32",
            ElementType::F64 => "f64",
            ElementType::I32 => "i32",
            ElementType::I64 => "i64",
            ElementType::F16 => "f16",
            ElementType::BF16 => "bf16",
        }
    }

    /// numpy's little-endian type string (`<f4`, `<i8`, `<f2`, ...).
    ///
    /// bfloat16 has no numpy type code. `np.save` of an `ml_dtypes.bfloat16`
    /// array writes the dtype's `str`, `|V2` (two opaque bytes), and
    /// `np.load` gives a `V2` array that `.view(ml_dtypes.bfloat16)` turns
    /// back; so tiga writes bf16 as `|V2` and reads a `|V2` (or `<V2`)
    /// array as bf16, the one two-byte opaque type a float field can be.
    pub fn npy_descr(self) -> &'static str {
        match self {
            ElementType::F32 => "<f4",
            ElementType::F64 => "<f8",
            ElementType::I32 => "<i4",
            ElementType::I64 => "<i8",
            ElementType::F16 => "<f2",
            ElementType::BF16 => "|V2",
        }
    }

    /// The element type of a numpy type string, if it is one of these
    /// (`<V2` is read as bf16 too, see [`ElementType::npy_descr`]).
    pub fn from_npy_descr(descr: &str) -> Option<ElementType> {
        if descr == "<V2" {
            return Some(ElementType::BF16);
        }
        ElementType::ALL.into_iter().find(|t| t.npy_descr() == descr)
    }

    /// Whether it is a floating-point type (what a kernel field can be).
    pub fn is_float(self) -> bool {
        !matches!(self, ElementType::I32 | ElementType::I64)
    }
}

impl fmt::Display for ElementType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl From<crate::tensor::DType> for ElementType {
    fn from(d: crate::tensor::DType) -> ElementType {
        match d {
            crate::tensor::DType::F32 => ElementType::F32,
            crate::tensor::DType::F64 => ElementType::F64,
        }
    }
}

impl From<crate::tensor::FieldType> for ElementType {
    fn from(d: crate::tensor::FieldType) -> ElementType {
        match d {
            crate::tensor::FieldType::F32 => ElementType::F32,
            crate::tensor::FieldType::F64 => ElementType::F64,
            crate::tensor::FieldType::F16 => ElementType::F16,
            crate::tensor::FieldType::BF16 => ElementType::BF16,
        }
    }
}

/// A Rust type that is one of the [`ElementType`]s: plain bytes with no
/// padding, any bit pattern valid, so rows can move as bytes.
///
/// # Safety
/// Implemented only for f32, f64, i32, i64, f16 and bf16 (sealed by
/// `private::Sealed`).
pub unsafe trait Element: Copy + Default + PartialEq + fmt::Debug + Send + Sync + 'static + private::Sealed {
    const TYPE: ElementType;
}

mod private {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for i32 {}
    impl Sealed for i64 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

// SAFETY: no padding, every bit pattern valid.
unsafe impl Element for f32 {
    const TYPE: ElementType = ElementType::F32;
}
// SAFETY: as for f32.
unsafe impl Element for f64 {
    const TYPE: ElementType = ElementType::F64;
}
// SAFETY: as for f32.
unsafe impl Element for i32 {
    const TYPE: ElementType = ElementType::I32;
}
// SAFETY: as for f32.
unsafe impl Element for i64 {
    const TYPE: ElementType = ElementType::I64;
}
// SAFETY: a `u16` inside (`repr(transparent)`): no padding, every bit
// pattern a value.
unsafe impl Element for half::f16 {
    const TYPE: ElementType = ElementType::F16;
}
// SAFETY: as for f16.
unsafe impl Element for half::bf16 {
    const TYPE: ElementType = ElementType::BF16;
}

/// The floating-point [`Element`]s, which optimizers update (in f64).
pub trait Float: Element {
    fn to_f64(self) -> f64;
    /// The nearest value (round to nearest even).
    fn from_f64(x: f64) -> Self;
}

impl Float for f32 {
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(x: f64) -> f32 {
        x as f32
    }
}

impl Float for f64 {
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(x: f64) -> f64 {
        x
    }
}

impl Float for half::f16 {
    fn to_f64(self) -> f64 {
        half::f16::to_f64(self)
    }
    fn from_f64(x: f64) -> half::f16 {
        half::f16::from_f32(crate::tensor::round_to_odd_f32(x))
    }
}

impl Float for half::bf16 {
    fn to_f64(self) -> f64 {
        half::bf16::to_f64(self)
    }
    fn from_f64(x: f64) -> half::bf16 {
        half::bf16::from_f32(crate::tensor::round_to_odd_f32(x))
    }
}

/// The bytes of `values`, in this machine's byte order.
pub fn bytes_of<T: Element>(values: &[T]) -> &[u8] {
    // SAFETY: `Element` types have no padding; u8 has alignment 1; the
    // length is the slice's size in bytes.
    unsafe { std::slice::from_raw_parts(values.as_ptr() as *const u8, std::mem::size_of_val(values)) }
}

/// The bytes of `values`, writable.
pub fn bytes_of_mut<T: Element>(values: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `bytes_of`, and any bytes written are a valid `T`.
    unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr() as *mut u8, std::mem::size_of_val(values)) }
}

/// `bytes` (native byte order, any alignment) as elements; `None` when the
/// length is not a whole number of elements.
pub fn values_of<T: Element>(bytes: &[u8]) -> Option<Vec<T>> {
    let size = std::mem::size_of::<T>();
    if !bytes.len().is_multiple_of(size) {
        return None;
    }
    let mut out = vec![T::default(); bytes.len() / size];
    bytes_of_mut(&mut out).copy_from_slice(bytes);
    Some(out)
}

/// Convert `bytes` of elements of `size` bytes between this machine's byte
/// order and little-endian (files are little-endian); nothing to do on a
/// little-endian machine.
pub fn swap_to_little_endian(bytes: &mut [u8], size: usize) {
    if cfg!(target_endian = "big") && size > 1 {
        for e in bytes.chunks_exact_mut(size) {
            e.reverse();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descr_round_trips_and_sizes() {
        for t in ElementType::ALL {
            assert_eq!(ElementType::from_npy_descr(t.npy_descr()), Some(t));
        }
        assert_eq!(ElementType::from_npy_descr(">f4"), None);
        assert_eq!(ElementType::from_npy_descr("<f2"), Some(ElementType::F16));
        assert_eq!(ElementType::from_npy_descr("<V2"), Some(ElementType::BF16));
        assert_eq!(ElementType::from_npy_descr("|V4"), None);
        assert_eq!(ElementType::BF16.size(), 2);
        assert_eq!(ElementType::I32.size(), 4);
        assert_eq!(ElementType::I64.size(), 8);
    }

    #[test]
    fn values_round_trip_through_bytes() {
        let v = [1.5f64, -2.0, f64::MAX];
        assert_eq!(values_of::<f64>(bytes_of(&v)), Some(v.to_vec()));
        assert_eq!(values_of::<i32>(&[0u8; 5]), None);
    }
}
