//! Dense fields: the node, edge and parameter tensors a kernel reads and
//! writes.
//!
//! A call runs in one dtype (f32 or f64) chosen by the fields passed, so a
//! tensor carries its element type at run time rather than as a type
//! parameter; the kernel interface checks that all fields agree. A tensor
//! of `f16` or `bf16` elements ([`FieldType`]) is a field of an f32 call,
//! stored at half width: its [`Tensor::dtype`] is f32 (what its values are
//! computed in), its [`Tensor::field_type`] the half type. Data is row-major: a
//! `[n, F]` field stores node `i`'s row at `i*F..(i+1)*F`. The one invariant
//! is that the product of the shape equals the element count, checked once
//! at construction so that later code can slice rows without checks.

use thiserror::Error;

/// The half-precision element types (the `half` crate's).
pub use half::{bf16, f16};
/// The element type of a tensor: the one enum the compiler's variants use
/// too.
pub use tiga_abi::DType;
/// How a tensor's elements are stored (its dtype, or a half type).
pub use tiga_abi::FieldType;

/// Why a tensor could not be built.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum TensorError {
    #[error("shape {shape:?} holds {expected} elements, but the data has {actual}")]
    LengthMismatch { shape: Vec<usize>, expected: usize, actual: usize },
    #[error("shape {shape:?} has more elements than fit in memory")]
    ShapeOverflow { shape: Vec<usize> },
    #[error("cannot make a file-backed tensor in {dir}: {message}")]
    File { dir: String, message: String },
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
impl ZeroBits for f16 {}
impl ZeroBits for bf16 {}

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
    F16(Vec<f16>),
    BF16(Vec<bf16>),
}

/// Borrowed elements of one dtype.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Data<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
    F16(&'a [f16]),
    BF16(&'a [bf16]),
}

impl Data<'_> {
    /// The dtype the elements are computed in (f32 for the half types).
    pub fn dtype(&self) -> DType {
        self.field_type().dtype()
    }

    /// How the elements are stored.
    pub fn field_type(&self) -> FieldType {
        match self {
            Data::F32(_) => FieldType::F32,
            Data::F64(_) => FieldType::F64,
            Data::F16(_) => FieldType::F16,
            Data::BF16(_) => FieldType::BF16,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Data::F32(d) => d.len(),
            Data::F64(d) => d.len(),
            Data::F16(d) => d.len(),
            Data::BF16(d) => d.len(),
        }
    }

    /// The elements' first byte (what a compiled kernel is given).
    pub fn as_ptr(&self) -> *const u8 {
        match self {
            Data::F32(d) => d.as_ptr() as *const u8,
            Data::F64(d) => d.as_ptr() as *const u8,
            Data::F16(d) => d.as_ptr() as *const u8,
            Data::BF16(d) => d.as_ptr() as *const u8,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements copied into an owned buffer.
    pub fn to_buffer(&self) -> Buffer {
        match self {
            Data::F32(d) => Buffer::F32(d.to_vec()),
            Data::F64(d) => Buffer::F64(d.to_vec()),
            Data::F16(d) => Buffer::F16(d.to_vec()),
            Data::BF16(d) => Buffer::BF16(d.to_vec()),
        }
    }
}

impl<'a> Data<'a> {
    /// The elements' bytes, in this machine's byte order (what a halo
    /// message carries: every rank of a job shares one byte order).
    pub fn as_bytes(self) -> &'a [u8] {
        let bytes = self.len() * self.field_type().size();
        // SAFETY: f32, f64, f16 and bf16 have no padding and every byte is
        // initialized; u8 has alignment 1, and the length is the slice's
        // size in bytes.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), bytes) }
    }
}

/// An owned, row-major tensor (a kernel output, or a field read from disk).
/// Its elements are in memory, or in a file mapping
/// ([`Tensor::zeros_in_file`]): an output too large for the RAM budget,
/// whose pages the operating system writes back and drops as the kernel
/// moves on. Both read and write the same way.
#[derive(Debug)]
pub struct Tensor {
    shape: Vec<usize>,
    data: Storage,
}

#[derive(Debug)]
enum Storage {
    Memory(Buffer),
    Mapped(MappedBuffer),
}

/// Elements in a mapping of their own: anonymous memory (a large
/// [`Tensor::zeros`]), or a shared mapping of an unnamed temporary file
/// ([`Tensor::zeros_in_file`]; the file has no name from the start, so it
/// disappears with the mapping, even when the process is killed). Either
/// goes back to the system when the tensor is dropped.
#[derive(Debug)]
struct MappedBuffer {
    /// Taken in `drop` (to become a spare).
    map: std::mem::ManuallyDrop<memmap2::MmapMut>,
    dtype: FieldType,
    len: usize,
    /// The directory of its file, for a file mapping.
    in_file: Option<std::path::PathBuf>,
}

impl Drop for MappedBuffer {
    fn drop(&mut self) {
        // SAFETY: taken once, here; `self.map` is not used after.
        let map = unsafe { std::mem::ManuallyDrop::take(&mut self.map) };
        if self.in_file.is_none() {
            Spares::give(map);
        }
    }
}

/// The anonymous mapping of a dropped tensor, kept for the next
/// [`Tensor::zeros`] of the same byte size: a chain of kernel calls (each
/// output the next call's input) then cycles through buffers instead of
/// faulting a fresh one in every call, which cost a paged stencil step
/// about 1 ms per 16 MiB output. Zeroing a spare costs a write of its
/// bytes, as `calloc` of reused memory does. One spare of at most
/// [`SPARE_BYTES`]: with two, a chain's peak resident set held a third
/// output (the spare waiting while the first call of a chain read its
/// input from a file).
struct Spares;

const SPARE_COUNT: usize = 1;
const SPARE_BYTES: usize = 256 << 20;

static SPARES: std::sync::Mutex<Vec<memmap2::MmapMut>> = std::sync::Mutex::new(Vec::new());

/// Give the kept spare mapping (see [`Spares`]) back to the system: its
/// memory leaves the resident set now rather than when the next tensor of
/// its size is made.
pub fn release_spares() {
    if let Ok(mut spares) = SPARES.lock() {
        spares.clear();
    }
}

impl Spares {
    fn take(bytes: usize) -> Option<memmap2::MmapMut> {
        let mut spares = SPARES.lock().ok()?;
        let i = spares.iter().position(|m| m.len() == bytes)?;
        Some(spares.swap_remove(i))
    }

    fn give(map: memmap2::MmapMut) {
        if map.is_empty() || map.len() > SPARE_BYTES {
            return;
        }
        let Ok(mut spares) = SPARES.lock() else { return };
        let held: usize = spares.iter().map(|m| m.len()).sum();
        if spares.len() < SPARE_COUNT && held + map.len() <= SPARE_BYTES {
            spares.push(map);
        }
    }
}

impl MappedBuffer {
    fn new(map: memmap2::MmapMut, dtype: FieldType, len: usize, in_file: Option<std::path::PathBuf>) -> MappedBuffer {
        MappedBuffer { map: std::mem::ManuallyDrop::new(map), dtype, len, in_file }
    }

    fn data(&self) -> Data<'_> {
        let ptr = self.map.as_ptr();
        // SAFETY: the mapping is page-aligned, holds `len` elements of
        // `dtype` (its length was set so), and any bit pattern is a float.
        unsafe {
            match self.dtype {
                FieldType::F32 => Data::F32(std::slice::from_raw_parts(ptr as *const f32, self.len)),
                FieldType::F64 => Data::F64(std::slice::from_raw_parts(ptr as *const f64, self.len)),
                FieldType::F16 => Data::F16(std::slice::from_raw_parts(ptr as *const f16, self.len)),
                FieldType::BF16 => Data::BF16(std::slice::from_raw_parts(ptr as *const bf16, self.len)),
            }
        }
    }

    fn data_mut(&mut self) -> DataMut<'_> {
        let ptr = self.map.as_mut_ptr();
        // SAFETY: as in `data`, and the borrow is exclusive.
        unsafe {
            match self.dtype {
                FieldType::F32 => DataMut::F32(std::slice::from_raw_parts_mut(ptr as *mut f32, self.len)),
                FieldType::F64 => DataMut::F64(std::slice::from_raw_parts_mut(ptr as *mut f64, self.len)),
                FieldType::F16 => DataMut::F16(std::slice::from_raw_parts_mut(ptr as *mut f16, self.len)),
                FieldType::BF16 => DataMut::BF16(std::slice::from_raw_parts_mut(ptr as *mut bf16, self.len)),
            }
        }
    }
}

impl Clone for Tensor {
    /// A copy in memory (of a file-backed tensor too).
    fn clone(&self) -> Tensor {
        self.view().to_tensor()
    }
}

impl PartialEq for Tensor {
    fn eq(&self, other: &Tensor) -> bool {
        self.shape == other.shape && self.data() == other.data()
    }
}

impl Tensor {
    /// One number, shaped `[1]` (a scalar parameter).
    pub fn scalar_f32(x: f32) -> Tensor {
        Tensor { shape: vec![1], data: Storage::Memory(Buffer::F32(vec![x])) }
    }

    /// One number, shaped `[1]` (a scalar parameter).
    pub fn scalar_f64(x: f64) -> Tensor {
        Tensor { shape: vec![1], data: Storage::Memory(Buffer::F64(vec![x])) }
    }

    pub fn from_f32(shape: impl Into<Vec<usize>>, data: Vec<f32>) -> Result<Tensor, TensorError> {
        let shape = shape.into();
        check_len(&shape, data.len())?;
        Ok(Tensor { shape, data: Storage::Memory(Buffer::F32(data)) })
    }

    pub fn from_f64(shape: impl Into<Vec<usize>>, data: Vec<f64>) -> Result<Tensor, TensorError> {
        let shape = shape.into();
        check_len(&shape, data.len())?;
        Ok(Tensor { shape, data: Storage::Memory(Buffer::F64(data)) })
    }

    /// A tensor of IEEE binary16 elements (a half-width field of an f32
    /// call).
    pub fn from_f16(shape: impl Into<Vec<usize>>, data: Vec<f16>) -> Result<Tensor, TensorError> {
        let shape = shape.into();
        check_len(&shape, data.len())?;
        Ok(Tensor { shape, data: Storage::Memory(Buffer::F16(data)) })
    }

    /// A tensor of bfloat16 elements (a half-width field of an f32 call).
    pub fn from_bf16(shape: impl Into<Vec<usize>>, data: Vec<bf16>) -> Result<Tensor, TensorError> {
        let shape = shape.into();
        check_len(&shape, data.len())?;
        Ok(Tensor { shape, data: Storage::Memory(Buffer::BF16(data)) })
    }

    /// The elements converted to `to`, each rounded once to nearest, ties
    /// to even (from f64 straight to the half type, so never rounded
    /// twice); exact when widening.
    pub fn converted(&self, to: FieldType) -> Tensor {
        self.view().converted(to)
    }

    /// Fails only when the shape's element count overflows `usize`.
    ///
    /// Several huge pages or more get an anonymous mapping of their own,
    /// backed by transparent huge pages where the system allows (see
    /// [`zeroed_vec`]). Through the allocator, whether a dropped output's
    /// memory went back to the system depended on what else lay on the
    /// heap: the same paged run peaked at 42 or 56 MiB from one build to the
    /// next. A dropped mapping is kept as a spare for the next tensor of the
    /// same size (zeroed again; see [`Spares`]), else unmapped.
    pub fn zeros(dtype: DType, shape: impl Into<Vec<usize>>) -> Result<Tensor, TensorError> {
        Tensor::alloc(dtype.into(), shape.into(), true)
    }

    /// [`Tensor::zeros`] of any element type (a half-width output).
    pub fn zeros_of(ty: FieldType, shape: impl Into<Vec<usize>>) -> Result<Tensor, TensorError> {
        Tensor::alloc(ty, shape.into(), true)
    }

    /// [`Tensor::for_overwrite`] of any element type.
    pub fn for_overwrite_of(ty: FieldType, shape: impl Into<Vec<usize>>) -> Result<Tensor, TensorError> {
        Tensor::alloc(ty, shape.into(), false)
    }

    /// A tensor its caller overwrites completely before anything reads it
    /// (a kernel output whose every element the kernel stores): as
    /// [`Tensor::zeros`], except that a reused spare mapping keeps the
    /// values of the tensor it belonged to instead of being zeroed, which
    /// saves a write of the whole tensor per call in a chain of calls. The
    /// stale values are floats this process computed; nothing outside it
    /// can show through.
    pub fn for_overwrite(dtype: DType, shape: impl Into<Vec<usize>>) -> Result<Tensor, TensorError> {
        Tensor::alloc(dtype.into(), shape.into(), false)
    }

    fn alloc(dtype: FieldType, shape: Vec<usize>, zero_spare: bool) -> Result<Tensor, TensorError> {
        let n = element_count(&shape)?;
        let bytes = n.saturating_mul(dtype.size());
        if bytes >= 4 * HUGE_PAGE {
            let map = match Spares::take(bytes) {
                Some(mut map) => {
                    if zero_spare {
                        // In parallel, as a fresh mapping's first touches would be.
                        use rayon::prelude::*;
                        map.par_chunks_mut(1 << 20).for_each(|c| c.fill(0));
                    }
                    Some(map)
                }
                None => memmap2::MmapOptions::new().len(bytes).map_anon().ok().map(|mut map| {
                    advise_huge_pages(map.as_mut_ptr(), bytes);
                    map
                }),
            };
            if let Some(map) = map {
                return Ok(Tensor { shape, data: Storage::Mapped(MappedBuffer::new(map, dtype, n, None)) });
            }
        }
        let data = match dtype {
            FieldType::F32 => Buffer::F32(zeroed_vec(n)),
            FieldType::F64 => Buffer::F64(zeroed_vec(n)),
            FieldType::F16 => Buffer::F16(zeroed_vec(n)),
            FieldType::BF16 => Buffer::BF16(zeroed_vec(n)),
        };
        Ok(Tensor { shape, data: Storage::Memory(data) })
    }

    /// Zeros in a file in `dir` rather than in memory: an unnamed
    /// temporary file (removed when the tensor is dropped), its blocks
    /// reserved up front (a full disk is an error here, not a crash later),
    /// mapped shared so that written pages can leave the resident
    /// set ([`Tensor::release_rows`]) and be written back by the operating
    /// system. An empty tensor stays in memory.
    pub fn zeros_in_file(dtype: DType, shape: impl Into<Vec<usize>>, dir: &std::path::Path) -> Result<Tensor, TensorError> {
        let shape = shape.into();
        let len = element_count(&shape)?;
        let bytes = len.checked_mul(dtype.size()).ok_or_else(|| TensorError::ShapeOverflow { shape: shape.clone() })?;
        if bytes == 0 {
            return Tensor::zeros(dtype, shape);
        }
        let io = |e: std::io::Error| TensorError::File { dir: dir.display().to_string(), message: e.to_string() };
        let file = tempfile::tempfile_in(dir).map_err(io)?;
        file.set_len(bytes as u64).map_err(io)?;
        // Reserve the blocks now: a write through the mapping to a file
        // the disk cannot hold is a SIGBUS, not an error.
        allocate(&file, bytes).map_err(io)?;
        // SAFETY: the file is unnamed and private to this tensor: nothing
        // else can truncate or write it while it is mapped.
        let map = unsafe { memmap2::MmapOptions::new().len(bytes).map_mut(&file) }.map_err(io)?;
        Ok(Tensor { shape, data: Storage::Mapped(MappedBuffer::new(map, dtype.into(), len, Some(dir.to_path_buf()))) })
    }

    /// Whether the elements live in a mapping of their own (a large
    /// tensor's anonymous memory, or a file): their address stays put for
    /// as long as the tensor lives, wherever the tensor moves.
    pub fn is_mapped(&self) -> bool {
        matches!(&self.data, Storage::Mapped(_))
    }

    /// Whether the elements live in a file mapping.
    pub fn is_file_backed(&self) -> bool {
        matches!(&self.data, Storage::Mapped(m) if m.in_file.is_some())
    }

    /// The directory of a file-backed tensor's file (where a tensor made
    /// from it, as large, goes too).
    pub fn file_dir(&self) -> Option<&std::path::Path> {
        match &self.data {
            Storage::Mapped(m) => m.in_file.as_deref(),
            Storage::Memory(_) => None,
        }
    }

    /// Drop rows `rows` (of the first dimension) of a file-backed tensor
    /// from the resident set: the OS pages wholly inside them, written back
    /// to the file as needed and read again when touched. Contents do not
    /// change. Nothing happens for a tensor in memory.
    pub fn release_rows(&self, rows: std::ops::Range<usize>) {
        let Storage::Mapped(f) = &self.data else { return };
        if f.in_file.is_none() {
            return;
        }
        let row_bytes = self.shape.iter().skip(1).product::<usize>() * f.dtype.size();
        let (start, end) = (rows.start.saturating_mul(row_bytes), rows.end.saturating_mul(row_bytes).min(f.map.len()));
        let page = os_page_size();
        let (start, end) = (start.div_ceil(page) * page, end / page * page);
        if start < end {
            // SAFETY (of the advice): a shared file mapping keeps every
            // written byte in the file; MADV_DONTNEED only unmaps pages,
            // which are read back from the page cache or the file.
            let _ = unsafe { f.map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start) };
        }
    }

    pub fn view(&self) -> TensorView<'_> {
        TensorView { shape: self.shape.clone(), data: self.data() }
    }

    /// The dtype the elements are computed in (f32 for half types).
    pub fn dtype(&self) -> DType {
        self.data().dtype()
    }

    /// How the elements are stored.
    pub fn field_type(&self) -> FieldType {
        self.data().field_type()
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
            Storage::Memory(Buffer::F32(v)) => Data::F32(v),
            Storage::Memory(Buffer::F64(v)) => Data::F64(v),
            Storage::Memory(Buffer::F16(v)) => Data::F16(v),
            Storage::Memory(Buffer::BF16(v)) => Data::BF16(v),
            Storage::Mapped(f) => f.data(),
        }
    }

    /// Mutable elements; the length cannot change, so the invariant holds.
    pub fn data_mut(&mut self) -> DataMut<'_> {
        match &mut self.data {
            Storage::Memory(Buffer::F32(v)) => DataMut::F32(v),
            Storage::Memory(Buffer::F64(v)) => DataMut::F64(v),
            Storage::Memory(Buffer::F16(v)) => DataMut::F16(v),
            Storage::Memory(Buffer::BF16(v)) => DataMut::BF16(v),
            Storage::Mapped(f) => f.data_mut(),
        }
    }

    /// The shape and the elements, in memory (a file-backed tensor's are
    /// copied out).
    pub fn into_parts(self) -> (Vec<usize>, Buffer) {
        match self.data {
            Storage::Memory(b) => (self.shape, b),
            Storage::Mapped(f) => (self.shape, f.data().to_buffer()),
        }
    }

    pub fn as_f32(&self) -> Option<&[f32]> {
        match self.data() {
            Data::F32(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<&[f64]> {
        match self.data() {
            Data::F64(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_f16(&self) -> Option<&[f16]> {
        match self.data() {
            Data::F16(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_bf16(&self) -> Option<&[bf16]> {
        match self.data() {
            Data::BF16(v) => Some(v),
            _ => None,
        }
    }

    /// The elements widened to f64, as the reference interpreter compares.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        self.view().to_f64_vec()
    }
}

/// `x` rounded to an f32 by round-to-odd (truncate, then set the last
/// mantissa bit when anything was cut off). An f32 has more than two bits
/// beyond f16's and bf16's mantissas, so rounding this to a half type to
/// nearest, ties to even, gives the correctly rounded half of `x`, where
/// `x as f32` first would round twice (the `half` crate's own `from_f64`
/// drops the low 32 bits of the f64 before rounding, which misplaces ties).
pub fn round_to_odd_f32(x: f64) -> f32 {
    let r = x as f32;
    if !r.is_finite() || f64::from(r) == x {
        // NaN, an exact value, or beyond f32's range (which is beyond any
        // half type's too, so infinity rounds the same).
        return r;
    }
    // Toward zero: step back one ulp when rounding went away from zero.
    let t = if f64::from(r).abs() > x.abs() { f32::from_bits(r.to_bits() - 1) } else { r };
    f32::from_bits(t.to_bits() | 1)
}

/// Reserve `bytes` of disk blocks for `file` (`posix_fallocate`).
#[cfg(target_os = "linux")]
fn allocate(file: &std::fs::File, bytes: usize) -> std::io::Result<()> {
    use std::os::unix::io::AsRawFd;
    let len = libc::off_t::try_from(bytes).map_err(|_| std::io::Error::other("file too large"))?;
    // SAFETY: a valid open descriptor and a non-negative range.
    match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) } {
        0 => Ok(()),
        // A file system without it: the file stays sparse.
        libc::EOPNOTSUPP | libc::EINVAL => Ok(()),
        e => Err(std::io::Error::from_raw_os_error(e)),
    }
}

#[cfg(not(target_os = "linux"))]
fn allocate(_file: &std::fs::File, _bytes: usize) -> std::io::Result<()> {
    Ok(())
}

/// The OS page size (what `madvise`, `mincore` and first-touch faults work
/// in).
pub fn os_page_size() -> usize {
    // SAFETY: `sysconf` has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1)
}

/// Mutable borrowed elements of one dtype (a kernel's output buffer).
#[derive(Debug, PartialEq)]
pub enum DataMut<'a> {
    F32(&'a mut [f32]),
    F64(&'a mut [f64]),
    F16(&'a mut [f16]),
    BF16(&'a mut [bf16]),
}

impl<'a> DataMut<'a> {
    /// The elements' bytes, writable (what a device-to-host copy fills).
    pub fn into_bytes(self) -> &'a mut [u8] {
        let (ptr, bytes) = match self {
            DataMut::F32(d) => (d.as_mut_ptr() as *mut u8, std::mem::size_of_val(d)),
            DataMut::F64(d) => (d.as_mut_ptr() as *mut u8, std::mem::size_of_val(d)),
            DataMut::F16(d) => (d.as_mut_ptr() as *mut u8, std::mem::size_of_val(d)),
            DataMut::BF16(d) => (d.as_mut_ptr() as *mut u8, std::mem::size_of_val(d)),
        };
        // SAFETY: f32, f64, f16 and bf16 have no padding and every bit
        // pattern is a valid value, so any bytes written leave valid
        // elements; u8 has alignment 1, and the length is the slice's size
        // in bytes, borrowed exclusively for 'a.
        unsafe { std::slice::from_raw_parts_mut(ptr, bytes) }
    }

    /// The elements' first byte, writable (what a compiled kernel is
    /// given).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        match self {
            DataMut::F32(d) => d.as_mut_ptr() as *mut u8,
            DataMut::F64(d) => d.as_mut_ptr() as *mut u8,
            DataMut::F16(d) => d.as_mut_ptr() as *mut u8,
            DataMut::BF16(d) => d.as_mut_ptr() as *mut u8,
        }
    }
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

    /// The dtype the elements are computed in (f32 for half types).
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// How the elements are stored.
    pub fn field_type(&self) -> FieldType {
        self.data.field_type()
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements widened to f64 (exactly: every f32, f16 and bf16 is an
    /// f64).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match self.data {
            Data::F32(d) => d.iter().map(|&x| f64::from(x)).collect(),
            Data::F64(d) => d.to_vec(),
            Data::F16(d) => d.iter().map(|&x| x.to_f64()).collect(),
            Data::BF16(d) => d.iter().map(|&x| x.to_f64()).collect(),
        }
    }

    /// The elements converted to `to` (see [`Tensor::converted`]).
    pub fn converted(&self, to: FieldType) -> Tensor {
        let buffer = match (self.data, to) {
            (Data::F32(d), FieldType::F32) => Buffer::F32(d.to_vec()),
            (Data::F64(d), FieldType::F64) => Buffer::F64(d.to_vec()),
            (Data::F16(d), FieldType::F16) => Buffer::F16(d.to_vec()),
            (Data::BF16(d), FieldType::BF16) => Buffer::BF16(d.to_vec()),
            (Data::F32(d), FieldType::F16) => Buffer::F16(d.iter().map(|&x| f16::from_f32(x)).collect()),
            (Data::F32(d), FieldType::BF16) => Buffer::BF16(d.iter().map(|&x| bf16::from_f32(x)).collect()),
            _ => {
                let wide = self.to_f64_vec();
                match to {
                    FieldType::F32 => Buffer::F32(wide.iter().map(|&x| x as f32).collect()),
                    FieldType::F64 => Buffer::F64(wide),
                    FieldType::F16 => Buffer::F16(wide.iter().map(|&x| f16::from_f32(round_to_odd_f32(x))).collect()),
                    FieldType::BF16 => Buffer::BF16(wide.iter().map(|&x| bf16::from_f32(round_to_odd_f32(x))).collect()),
                }
            }
        };
        Tensor { shape: self.shape.clone(), data: Storage::Memory(buffer) }
    }

    pub fn to_tensor(&self) -> Tensor {
        Tensor { shape: self.shape.clone(), data: Storage::Memory(self.data.to_buffer()) }
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
    fn half_tensors_convert_exactly_and_round_to_nearest_even() {
        // 1 + 2^-8 is a tie for bf16 (8 significant bits: after 1 comes 1 + 2^-7, the
        // next): even rounds down; 1 + 3·2^-8 rounds up to 1 + 2^-6.
        let t = Tensor::from_f32([4], vec![1.0 + 2f32.powi(-8), 1.0 + 3.0 * 2f32.powi(-8), -0.0, 65520.0]).expect("shape");
        let b = t.converted(FieldType::BF16);
        assert_eq!(b.field_type(), FieldType::BF16);
        assert_eq!(b.dtype(), DType::F32);
        assert_eq!(b.to_f64_vec(), vec![1.0, 1.0 + 2f64.powi(-6), -0.0, 65536.0]);
        // f16: 65520 is the tie between 65504 (max) and overflow: infinity.
        let h = t.converted(FieldType::F16);
        assert_eq!(h.as_f16().map(|d| d[3].to_f64()), Some(f64::INFINITY));
        assert_eq!(h.as_f16().map(|d| d[0].to_f64()), Some(1.0 + 2f64.powi(-8)));
        // From f64 with a tie in the f32 bits and a sticky bit below them:
        // rounding once goes up; rounding to f32 first would lose the bit.
        let x = 1.0 + 2f64.powi(-8) + 2f64.powi(-40);
        let w = Tensor::from_f64([1], vec![x]).expect("shape").converted(FieldType::BF16);
        assert_eq!(w.to_f64_vec(), vec![1.0 + 2f64.powi(-7)]);
        assert_eq!(round_to_odd_f32(x).to_bits() & 1, 1);
        assert_eq!(round_to_odd_f32(-x), -round_to_odd_f32(x));
        assert_eq!(round_to_odd_f32(1.5), 1.5);
        // Bytes and zeros.
        assert_eq!(b.data().as_bytes().len(), 8);
        let z = Tensor::zeros_of(FieldType::F16, vec![3, 2]).expect("zeros");
        assert_eq!(z.to_f64_vec(), vec![0.0; 6]);
        assert_eq!(z.converted(FieldType::F32).as_f32(), Some(&[0.0f32; 6][..]));
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
        // A dropped large tensor's mapping comes back for the next one of
        // its size (the spare), zeroed again.
        for round in 0..3 {
            let mut t = Tensor::zeros(DType::F32, vec![3 << 20]).expect("zeros");
            assert!(t.as_f32().is_some_and(|d| d.iter().all(|&x| x.to_bits() == 0)), "round {round}");
            if let DataMut::F32(d) = t.data_mut() {
                d.iter_mut().for_each(|x| *x = -2.5);
            }
        }
    }

    #[test]
    fn file_backed_tensors_read_and_write_like_memory_ones() {
        let dir = tempfile::tempdir().expect("tempdir");
        // 3 OS pages and a bit of f32 rows of width 5, and an empty one.
        let rows = 3 * 4096 / 20 + 7;
        let mut t = Tensor::zeros_in_file(DType::F32, vec![rows, 5], dir.path()).expect("file tensor");
        assert!(t.is_file_backed());
        assert_eq!((t.shape(), t.len(), t.dtype()), (&[rows, 5][..], rows * 5, DType::F32));
        assert!(t.as_f32().is_some_and(|d| d.iter().all(|&x| x.to_bits() == 0)));
        if let DataMut::F32(d) = t.data_mut() {
            d.iter_mut().enumerate().for_each(|(i, x)| *x = i as f32 * 0.5);
        }
        let want: Vec<f32> = (0..rows * 5).map(|i| i as f32 * 0.5).collect();
        // Released rows are read back from the file, unchanged.
        t.release_rows(0..rows);
        t.release_rows(rows / 3..rows + 10);
        assert_eq!(t.as_f32(), Some(&want[..]));
        let copy = t.clone();
        assert!(!copy.is_file_backed());
        assert_eq!(copy, t);
        assert_eq!(t.clone().into_parts().1, Buffer::F32(want));
        // The file has no name: the directory stays empty.
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
        let e = Tensor::zeros_in_file(DType::F64, vec![0, 3], dir.path()).expect("empty");
        assert!(!e.is_file_backed() && e.is_empty());
        let missing = dir.path().join("no-such-dir");
        let err = Tensor::zeros_in_file(DType::F64, vec![4], &missing).expect_err("no directory");
        assert!(err.to_string().contains("no-such-dir"), "{err}");
    }
}
