//! Dense fields: the node, edge and parameter tensors a kernel reads and
//! writes.
//!
//! A call runs in one dtype (f32 or f64) chosen by the fields passed, so a
//! tensor carries its dtype at run time rather than as a type parameter; the
//! kernel interface checks that all fields agree. Data is row-major: a
//! `[n, F]` field stores node `i`'s row at `i*F..(i+1)*F`. The one invariant
//! is that the product of the shape equals the element count, checked once
//! at construction so that later code can slice rows without checks.

use thiserror::Error;

/// The element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F64,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F64 => 8,
        }
    }

    /// The Rust name (`f32`, `f64`), as kernels spell it.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a tensor could not be built.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum TensorError {
    #[error("shape {shape:?} holds {expected} elements, but the data has {actual}")]
    LengthMismatch { shape: Vec<usize>, expected: usize, actual: usize },
    #[error("shape {shape:?} has more elements than fit in memory")]
    ShapeOverflow { shape: Vec<usize> },
}

/// The number of elements of `shape`, or an error when it overflows.
pub fn element_count(shape: &[usize]) -> Result<usize, TensorError> {
    shape
        .iter()
        .try_fold(1usize, |acc, &s| acc.checked_mul(s))
        .ok_or_else(|| TensorError::ShapeOverflow { shape: shape.to_vec() })
}

fn check_len(shape: &[usize], actual: usize) -> Result<(), TensorError> {
    let expected = element_count(shape)?;
    if expected != actual {
        return Err(TensorError::LengthMismatch { shape: shape.to_vec(), expected, actual });
    }
    Ok(())
}

/// Owned elements of one dtype.
#[derive(Debug, Clone, PartialEq)]
pub enum Buffer {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

/// Borrowed elements of one dtype.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Data<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
}

impl Data<'_> {
    pub fn dtype(&self) -> DType {
        match self {
            Data::F32(_) => DType::F32,
            Data::F64(_) => DType::F64,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Data::F32(d) => d.len(),
            Data::F64(d) => d.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An owned, row-major tensor (a kernel output, or a field read from disk).
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    shape: Vec<usize>,
    data: Buffer,
}

impl Tensor {
    pub fn from_f32(shape: impl Into<Vec<usize>>, data: Vec<f32>) -> Result<Tensor, TensorError> {
        let shape = shape.into();
        check_len(&shape, data.len())?;
        Ok(Tensor { shape, data: Buffer::F32(data) })
    }

    pub fn from_f64(shape: impl Into<Vec<usize>>, data: Vec<f64>) -> Result<Tensor, TensorError> {
        let shape = shape.into();
        check_len(&shape, data.len())?;
        Ok(Tensor { shape, data: Buffer::F64(data) })
    }

    /// Fails only when the shape's element count overflows `usize`.
    pub fn zeros(dtype: DType, shape: impl Into<Vec<usize>>) -> Result<Tensor, TensorError> {
        let shape = shape.into();
        let n = element_count(&shape)?;
        let data = match dtype {
            DType::F32 => Buffer::F32(vec![0.0; n]),
            DType::F64 => Buffer::F64(vec![0.0; n]),
        };
        Ok(Tensor { shape, data })
    }

    pub fn view(&self) -> TensorView<'_> {
        TensorView { shape: self.shape.clone(), data: self.data() }
    }

    pub fn dtype(&self) -> DType {
        self.data().dtype()
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The element count (the product of the shape).
    pub fn len(&self) -> usize {
        self.data().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn data(&self) -> Data<'_> {
        match &self.data {
            Buffer::F32(v) => Data::F32(v),
            Buffer::F64(v) => Data::F64(v),
        }
    }

    pub fn buffer(&self) -> &Buffer {
        &self.data
    }

    /// Mutable elements; the length cannot change, so the invariant holds.
    pub fn data_mut(&mut self) -> DataMut<'_> {
        match &mut self.data {
            Buffer::F32(v) => DataMut::F32(v),
            Buffer::F64(v) => DataMut::F64(v),
        }
    }

    pub fn into_parts(self) -> (Vec<usize>, Buffer) {
        (self.shape, self.data)
    }

    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            Buffer::F32(v) => Some(v),
            Buffer::F64(_) => None,
        }
    }

    pub fn as_f64(&self) -> Option<&[f64]> {
        match &self.data {
            Buffer::F64(v) => Some(v),
            Buffer::F32(_) => None,
        }
    }

    /// The elements widened to f64, as the reference interpreter compares.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        self.view().to_f64_vec()
    }
}

/// Mutable borrowed elements of one dtype (a kernel's output buffer).
#[derive(Debug, PartialEq)]
pub enum DataMut<'a> {
    F32(&'a mut [f32]),
    F64(&'a mut [f64]),
}

/// A borrowed, row-major tensor: how a caller hands a field to a kernel
/// without copying it.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorView<'a> {
    shape: Vec<usize>,
    data: Data<'a>,
}

impl<'a> TensorView<'a> {
    pub fn new(shape: impl Into<Vec<usize>>, data: Data<'a>) -> Result<TensorView<'a>, TensorError> {
        let shape = shape.into();
        check_len(&shape, data.len())?;
        Ok(TensorView { shape, data })
    }

    pub fn from_slice_f32(shape: impl Into<Vec<usize>>, data: &'a [f32]) -> Result<TensorView<'a>, TensorError> {
        TensorView::new(shape, Data::F32(data))
    }

    pub fn from_slice_f64(shape: impl Into<Vec<usize>>, data: &'a [f64]) -> Result<TensorView<'a>, TensorError> {
        TensorView::new(shape, Data::F64(data))
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn data(&self) -> Data<'a> {
        self.data
    }

    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn to_f64_vec(&self) -> Vec<f64> {
        match self.data {
            Data::F32(d) => d.iter().map(|&x| f64::from(x)).collect(),
            Data::F64(d) => d.to_vec(),
        }
    }

    pub fn to_tensor(&self) -> Tensor {
        let data = match self.data {
            Data::F32(d) => Buffer::F32(d.to_vec()),
            Data::F64(d) => Buffer::F64(d.to_vec()),
        };
        Tensor { shape: self.shape.clone(), data }
    }
}

impl<'a> From<&'a [f32]> for TensorView<'a> {
    fn from(data: &'a [f32]) -> Self {
        TensorView { shape: vec![data.len()], data: Data::F32(data) }
    }
}

impl<'a> From<&'a [f64]> for TensorView<'a> {
    fn from(data: &'a [f64]) -> Self {
        TensorView { shape: vec![data.len()], data: Data::F64(data) }
    }
}

impl<'a> From<&'a Vec<f32>> for TensorView<'a> {
    fn from(data: &'a Vec<f32>) -> Self {
        TensorView::from(data.as_slice())
    }
}

impl<'a> From<&'a Vec<f64>> for TensorView<'a> {
    fn from(data: &'a Vec<f64>) -> Self {
        TensorView::from(data.as_slice())
    }
}

impl<'a> From<&'a Tensor> for TensorView<'a> {
    fn from(t: &'a Tensor) -> Self {
        t.view()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn construction_checks_length() {
        let t = Tensor::from_f32([2, 3], vec![0.0; 6]).expect("valid");
        assert_eq!((t.shape(), t.len(), t.dtype()), (&[2usize, 3][..], 6, DType::F32));
        assert_eq!(
            Tensor::from_f64(vec![2, 3], vec![0.0; 5]).err().map(|e| e.to_string()),
            Some("shape [2, 3] holds 6 elements, but the data has 5".to_string())
        );
        assert_eq!(
            Tensor::zeros(DType::F64, [usize::MAX, 2]).err(),
            Some(TensorError::ShapeOverflow { shape: vec![usize::MAX, 2] })
        );
        assert!(TensorView::from_slice_f32(&[4][..], &[1.0, 2.0, 3.0]).is_err());
    }

    #[test]
    fn views_and_conversion() {
        let t = Tensor::from_f32(vec![3], vec![1.5, -2.0, 0.25]).expect("valid");
        assert_eq!(t.to_f64_vec(), vec![1.5, -2.0, 0.25]);
        assert_eq!(t.as_f32(), Some(&[1.5f32, -2.0, 0.25][..]));
        assert_eq!(t.as_f64(), None);
        let v = TensorView::from(&t);
        assert_eq!(v.to_tensor(), t);
        let raw = [1.0f64, 2.0, 3.0, 4.0];
        let v = TensorView::from(&raw[..]);
        assert_eq!((v.shape(), v.dtype()), (&[4usize][..], DType::F64));
        let z = Tensor::zeros(DType::F32, vec![2, 0]).expect("valid");
        assert!(z.is_empty());
        let s = Tensor::zeros(DType::F64, Vec::new()).expect("scalar");
        assert_eq!(s.len(), 1);
    }
}
