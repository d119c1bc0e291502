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

/// Floats that are zero when all their bytes are (f32, f64).
pub trait ZeroBits: Copy + Default {}
impl ZeroBits for f32 {}
impl ZeroBits for f64 {}

/// Transparent huge pages are 2 MiB on x86-64 and most arm64 kernels.
const HUGE_PAGE: usize = 2 << 20;

/// `n` zeros. A buffer of several huge pages asks the kernel for
/// transparent huge pages (`MADV_HUGEPAGE`) before its first touch: a kernel
/// output is written once per call, and in 4 KiB pages a fresh 16 MiB
/// output costs 4096 page faults, as much time as a memory-bound kernel's
/// step; in 2 MiB pages it costs 8. Smaller buffers, or a kernel without
/// THP, get ordinary pages (the advice is a hint).
pub fn zeroed_vec<T: ZeroBits>(n: usize) -> Vec<T> {
    let bytes = n.saturating_mul(std::mem::size_of::<T>());
    if bytes < 4 * HUGE_PAGE {
        return vec![T::default(); n];
    }
    let Ok(layout) = std::alloc::Layout::array::<T>(n) else { return vec![T::default(); n] };
    // SAFETY: the layout has a non-zero size (checked above).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) } as *mut T;
    if ptr.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    advise_huge_pages(ptr as *mut u8, bytes);
    // SAFETY: `ptr` comes from the global allocator with the layout of `n`
    // `T`s, all zero bytes, which for `ZeroBits` types are valid zeros.
    unsafe { Vec::from_raw_parts(ptr, n, n) }
}

/// Hint that the whole huge pages inside `[ptr, ptr + bytes)` be backed by
/// transparent huge pages. Only the hint changes; contents do not.
#[cfg(target_os = "linux")]
fn advise_huge_pages(ptr: *mut u8, bytes: usize) {
    let start = (ptr as usize).div_ceil(HUGE_PAGE) * HUGE_PAGE;
    let end = (ptr as usize + bytes) / HUGE_PAGE * HUGE_PAGE;
    if end > start {
        // SAFETY: the range lies inside an allocation this caller owns;
        // MADV_HUGEPAGE changes how it is backed, never what it holds.
        let _ = unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_ptr: *mut u8, _bytes: usize) {}

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
            DType::F32 => Buffer::F32(zeroed_vec(n)),
            DType::F64 => Buffer::F64(zeroed_vec(n)),
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

    #[test]
    fn large_zeroed_buffers_are_zero_and_writable() {
        // Above the huge-page threshold (the allocator path) and below it.
        for n in [3usize, (9 << 20) / 4 + 7] {
            let mut v: Vec<f32> = zeroed_vec(n);
            assert_eq!(v.len(), n);
            assert!(v.iter().all(|&x| x.to_bits() == 0));
            v[n - 1] = 1.5;
            assert_eq!(v.iter().map(|&x| f64::from(x)).sum::<f64>(), 1.5);
            let w: Vec<f64> = zeroed_vec(n);
            assert!(w.iter().all(|&x| x.to_bits() == 0));
        }
        let t = Tensor::zeros(DType::F64, vec![1 << 20, 3]).expect("zeros");
        assert_eq!(t.as_f64().map(|d| d.iter().filter(|&&x| x != 0.0).count()), Some(0));
    }
}
