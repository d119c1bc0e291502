//! `.npy` files: how fields move between tiga and numpy/PyTorch peers.
//!
//! Kernel fields ([`read_npy`], [`write_npy`]) accept only what fields
//! need: little-endian `<f4`/`<f8`, `<f2` (read as an f16 field) or a
//! two-byte opaque `|V2` (bf16, see [`ElementType::npy_descr`]), C order,
//! 1-D (`[n]`) or 2-D (`[n, F]`).
//! Node and edge ids (seeds, samples) are 1-D `<i8` (or `<i4`, widened)
//! through [`read_npy_ids`] and [`write_npy_ids`]. General arrays ([`read_npy_array`], [`NpyFile`], [`NpyWriter`]: ids,
//! batches of gradients, partitioned tensors) accept `<f4`, `<f8`, `<i4`
//! and `<i8` in C order with up to [`MAX_ARRAY_DIMS`] dimensions. Anything
//! else is refused with the dtype or shape found and what is accepted,
//! rather than converted silently, because a big-endian or Fortran-ordered
//! array read as if it were ours gives wrong numbers without any error.
//!
//! The format (numpy's `format.py`): the magic `\x93NUMPY`, a major and minor
//! version byte, the header length (u16 little-endian in 1.0, u32 in 2.0 and
//! 3.0), then a Python dict literal such as
//! `{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }`
//! padded with spaces and a newline, then the raw elements. The dict parser
//! here reads exactly that literal subset and returns an error (never panics)
//! on anything else. Writing uses version 1.0, padded to 64 bytes as numpy
//! does, falling back to 2.0 only if a header could not fit in 1.0.
//!
//! Why not a tiga_runtime: `npyz` (0.8.4 and 0.9.1) was measured against this
//! reader (2026-12-01, a `[1000000, 64]` f32 file of 256 MB in the page
//! cache, three rounds in turn): it read it in 0.82–1.06× this reader's
//! time, but for a
//! header declaring shape `(4294967296, 4294967296)` over 16 bytes of data
//! it returned an empty array and no error (the element count overflows),
//! where this reader refuses the shape. Fields are user input, so the
//! reader that refuses stays.

use std::io::Write;
use std::path::Path;

use thiserror::Error;

use tiga_runtime::element::{swap_to_little_endian, ElementType};
use tiga_runtime::tensor::{element_count, DType, Data, Tensor, TensorView};

const MAGIC: &[u8] = b"\x93NUMPY";

/// The name used in errors for in-memory input.
const MEMORY: &str = "<memory>";

/// Why a `.npy` file could not be read or written.
#[derive(Debug, Error)]
pub enum NpyError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a .npy file (it does not start with \\x93NUMPY)")]
    BadMagic { path: String },
    #[error("{path}: .npy format version {major}.{minor} is not supported (accepted: 1.0, 2.0, 3.0)")]
    UnsupportedVersion { path: String, major: u8, minor: u8 },
    #[error("{path}: malformed .npy header: {message}")]
    BadHeader { path: String, message: String },
    #[error(
        "{path}: dtype '{found}' is not supported; accepted: '<f4' (little-endian float32), '<f8' (float64), '<f2' (float16) or '|V2' (bfloat16)"
    )]
    UnsupportedDtype { path: String, found: String },
    #[error("{path}: fortran_order is True; only C-order (row-major) arrays are accepted")]
    FortranOrder { path: String },
    #[error("{path}: shape {shape:?} has {rank} dimensions; only 0-D, 1-D and 2-D arrays are accepted")]
    UnsupportedRank { path: String, shape: Vec<usize>, rank: usize },
    #[error("{path}: shape {shape:?} is too large to hold in memory")]
    TooLarge { path: String, shape: Vec<usize> },
    #[error("{path}: data section is truncated: expected {expected} bytes, found {actual}")]
    Truncated { path: String, expected: usize, actual: usize },
    #[error("{path}: {extra} unexpected bytes after the {expected} bytes of data")]
    TrailingBytes { path: String, expected: usize, extra: usize },
    #[error("{path}: cannot write a {rank}-D tensor (shape {shape:?}); only 1-D and 2-D are written")]
    WriteRank { path: String, shape: Vec<usize>, rank: usize },
    #[error("{path}: ids must be a 1-D array; shape is {shape:?}")]
    IdsShape { path: String, shape: Vec<usize> },
    #[error("{path}: ids must be integers ('<i8' int64 or '<i4' int32); dtype is '{found}'")]
    IdsDtype { path: String, found: String },
    #[error("{path}: dtype '{found}' is not supported; accepted: '<f4', '<f8', '<i4', '<i8' (little-endian float32, float64, int32, int64)")]
    UnsupportedArrayDtype { path: String, found: String },
    #[error("{path}: shape {shape:?} has {rank} dimensions; at most {MAX_ARRAY_DIMS} are accepted")]
    TooManyDims { path: String, shape: Vec<usize>, rank: usize },
    #[error("{path}: rows {start}..{end} asked for, but the array has {rows} rows")]
    RowsOutOfRange { path: String, start: usize, end: usize, rows: usize },
    #[error("{path}: {written} bytes of data written, but shape {shape:?} of {dtype} needs {expected}")]
    WrongDataLength { path: String, shape: Vec<usize>, dtype: ElementType, expected: usize, written: usize },
}

/// The most dimensions a general array may have (as WholeGraph's tensors).
pub const MAX_ARRAY_DIMS: usize = 8;

/// What a reader accepts: kernel fields, ids, or general arrays (module
/// doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Accept {
    Fields,
    Ids,
    Arrays,
}

/// A general `.npy` array: its element type, shape and elements (in this
/// machine's byte order, C order).
#[derive(Debug, Clone, PartialEq)]
pub struct NpyArray {
    pub dtype: ElementType,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

impl NpyArray {
    /// An array of `shape` holding `data`; an error when the lengths
    /// disagree.
    pub fn new(dtype: ElementType, shape: Vec<usize>, data: Vec<u8>) -> Result<NpyArray, NpyError> {
        let expected = array_bytes(dtype, &shape, MEMORY)?;
        if expected != data.len() {
            return Err(NpyError::WrongDataLength { path: MEMORY.into(), shape, dtype, expected, written: data.len() });
        }
        Ok(NpyArray { dtype, shape, data })
    }

    /// The elements as `T`, when that is the array's type.
    pub fn values<T: tiga_runtime::element::Element>(&self) -> Option<Vec<T>> {
        if T::TYPE != self.dtype {
            return None;
        }
        tiga_runtime::element::values_of(&self.data)
    }
}

/// Bytes of data an array of `shape` and `dtype` has.
fn array_bytes(dtype: ElementType, shape: &[usize], name: &str) -> Result<usize, NpyError> {
    element_count(shape)
        .ok()
        .and_then(|n| n.checked_mul(dtype.size()))
        .ok_or_else(|| NpyError::TooLarge { path: name.to_string(), shape: shape.to_vec() })
}

/// The most bytes a header may have. numpy writes headers of a few dozen
/// bytes (at most 65535 in version 1.0); a longer one is not a field.
const MAX_HEADER: usize = 1 << 20;

/// Reads a 1-D or 2-D `<f4`/`<f8` C-order array.
///
/// The file is read in order, and never further than its header says: the
/// magic first (so `/dev/zero` or a text file is refused after a few
/// bytes), then the header, then exactly the data the shape needs and one
/// byte more to tell trailing bytes. A regular file whose size cannot hold
/// that data is refused before the data is allocated; memory is asked for
/// fallibly, so a shape too large for this machine is an error, not an
/// abort.
pub fn read_npy(path: impl AsRef<Path>) -> Result<Tensor, NpyError> {
    let path = path.as_ref();
    let name = path.display().to_string();
    let (info, data) = read_whole(path, Accept::Fields)?;
    tensor_of(info, &data, &name)
}

/// Reads a 1-D `<i8` (or `<i4`) array of ids, as [`read_npy`] reads fields.
pub fn read_npy_ids(path: impl AsRef<Path>) -> Result<Vec<i64>, NpyError> {
    let path = path.as_ref();
    let (info, data) = read_whole(path, Accept::Ids)?;
    ids_of(info, &data, &path.display().to_string())
}

/// Parses a 1-D `<i8` (or `<i4`) array held in memory.
pub fn parse_npy_ids(bytes: &[u8]) -> Result<Vec<i64>, NpyError> {
    let (info, data_at) = parse_head(bytes, MEMORY, Accept::Ids)?;
    ids_of(info, &bytes[data_at..], MEMORY)
}

/// Where a float field's data lies in `.npy` bytes (a memory-mapped file):
/// a server that serves rows of a large field reads only the rows it is
/// asked for, so it needs the layout without parsing the data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyLayout {
    pub dtype: DType,
    /// `[N]` or `[N, F]` (a 0-D array is refused by [`npy_layout`]'s callers
    /// that need rows; it is reported as `[]`).
    pub shape: Vec<usize>,
    /// The byte offset of the first element.
    pub data_at: usize,
}

/// The layout of a float field held in `bytes` (header and data), checking
/// that the data is all there and nothing follows; `name` names it in
/// errors.
pub fn npy_layout(bytes: &[u8], name: &str) -> Result<NpyLayout, NpyError> {
    let (info, data_at) = parse_head(bytes, name, Accept::Fields)?;
    let have = bytes.len() - data_at;
    if have < info.bytes {
        return Err(NpyError::Truncated { path: name.to_string(), expected: info.bytes, actual: have });
    }
    if have > info.bytes {
        return Err(NpyError::TrailingBytes { path: name.to_string(), expected: info.bytes, extra: have - info.bytes });
    }
    let dtype = match info.dtype {
        ElementType::F32 => DType::F32,
        ElementType::F64 => DType::F64,
        // A row server moves f32 and f64 rows; `Accept::Fields` admits
        // floats only.
        other => return Err(NpyError::UnsupportedDtype { path: name.to_string(), found: other.npy_descr().to_string() }),
    };
    Ok(NpyLayout { dtype, shape: info.shape, data_at })
}

/// Reads a general array: `<f4`, `<f8`, `<i4` or `<i8`, C order, up to
/// [`MAX_ARRAY_DIMS`] dimensions, read as [`read_npy`] reads (in order,
/// never past what the header declares, memory asked for fallibly).
pub fn read_npy_array(path: impl AsRef<Path>) -> Result<NpyArray, NpyError> {
    let (info, mut data) = read_whole(path.as_ref(), Accept::Arrays)?;
    swap_to_little_endian(&mut data, info.dtype.size());
    Ok(NpyArray { dtype: info.dtype, shape: info.shape, data })
}

/// The header and the data of the file at `path` (data little-endian).
fn read_whole(path: &Path, accept: Accept) -> Result<(DataInfo, Vec<u8>), NpyError> {
    use std::io::Read as _;
    let mut f = NpyFile::open_with(path, accept)?;
    let name = f.name.clone();
    let io = |source| NpyError::Io { path: name.clone(), source };
    let bytes = f.info.bytes;
    let mut data = Vec::new();
    data.try_reserve_exact(bytes.saturating_add(1))
        .map_err(|_| NpyError::TooLarge { path: name.clone(), shape: f.info.shape.clone() })?;
    (&mut f.reader).take(bytes as u64 + 1).read_to_end(&mut data).map_err(io)?;
    if data.len() < bytes {
        return Err(NpyError::Truncated { path: name, expected: bytes, actual: data.len() });
    }
    if data.len() > bytes {
        // Count what follows (bounded: a regular file's size is known).
        let extra = match f.file_len {
            Some(len) => len.saturating_sub(f.data_at as u64 + bytes as u64).max(1) as usize,
            None => 1,
        };
        return Err(NpyError::TrailingBytes { path: name, expected: bytes, extra });
    }
    Ok((f.info, data))
}

/// A general `.npy` file opened for reading rows (a rank's share of a
/// table): its header is read and checked at [`NpyFile::open`], then
/// [`NpyFile::read_rows`] reads any range of first-dimension rows.
#[derive(Debug)]
pub struct NpyFile {
    name: String,
    reader: std::io::BufReader<std::fs::File>,
    info: DataInfo,
    data_at: usize,
    file_len: Option<u64>,
}

impl NpyFile {
    /// Open `path` and read its header (a general array's; see
    /// [`read_npy_array`]). A regular file too short for the data the
    /// header declares is refused here.
    pub fn open(path: impl AsRef<Path>) -> Result<NpyFile, NpyError> {
        Self::open_with(path.as_ref(), Accept::Arrays)
    }

    fn open_with(path: &Path, accept: Accept) -> Result<NpyFile, NpyError> {
        use std::io::Read as _;
        let name = path.display().to_string();
        let io = |source| NpyError::Io { path: name.clone(), source };
        let file = std::fs::File::open(path).map_err(io)?;
        let file_len = file.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
        let mut r = std::io::BufReader::new(file);
        // Magic and version, then exactly the header length field the
        // version has (u16 in 1.0, u32 after), then exactly the header:
        // nothing past it is read before the header says how much data
        // follows (so /dev/zero or a text file is refused after a few bytes).
        let mut head = Vec::with_capacity(12);
        (&mut r).take(MAGIC.len() as u64 + 2).read_to_end(&mut head).map_err(io)?;
        header_length(&head, &name)?;
        let len_size: u64 = if head[MAGIC.len()] == 1 { 2 } else { 4 };
        (&mut r).take(len_size).read_to_end(&mut head).map_err(io)?;
        let Some(header_len) = header_length(&head, &name)? else {
            return Err(NpyError::BadHeader { path: name.clone(), message: "file ends inside the header length".into() });
        };
        if header_len > MAX_HEADER {
            return Err(NpyError::BadHeader {
                path: name.clone(),
                message: format!("header length is {header_len} bytes; a .npy header is at most {MAX_HEADER} here"),
            });
        }
        (&mut r).take(header_len as u64).read_to_end(&mut head).map_err(io)?;
        let (info, data_at) = parse_head(&head, &name, accept)?;
        if let Some(len) = file_len {
            let have = len.saturating_sub(data_at as u64);
            if have < info.bytes as u64 {
                return Err(NpyError::Truncated { path: name.clone(), expected: info.bytes, actual: have as usize });
            }
        }
        Ok(NpyFile { name, reader: r, info, data_at, file_len })
    }

    pub fn dtype(&self) -> ElementType {
        self.info.dtype
    }

    pub fn shape(&self) -> &[usize] {
        &self.info.shape
    }

    /// Rows along the first dimension (1 for a 0-D array).
    pub fn rows(&self) -> usize {
        self.info.shape.first().copied().unwrap_or(1)
    }

    /// Bytes per first-dimension row.
    pub fn row_bytes(&self) -> usize {
        match self.info.shape.split_first() {
            // Cannot overflow: the whole array's byte count did not.
            Some((_, rest)) => rest.iter().product::<usize>() * self.info.dtype.size(),
            None => self.info.dtype.size(),
        }
    }

    /// Read rows `start..start + out.len() / row_bytes` into `out` (this
    /// machine's byte order). `out`'s length must be a whole number of
    /// rows; rows past the end are an error naming the range.
    pub fn read_rows(&mut self, start: usize, out: &mut [u8]) -> Result<(), NpyError> {
        use std::io::{Read as _, Seek as _, SeekFrom};
        let rb = self.row_bytes();
        let count = out.len().checked_div(rb).unwrap_or(0);
        let end = start.saturating_add(count);
        if (rb > 0 && !out.len().is_multiple_of(rb)) || end > self.rows() {
            return Err(NpyError::RowsOutOfRange { path: self.name.clone(), start, end, rows: self.rows() });
        }
        let name = self.name.clone();
        let io = |source| NpyError::Io { path: name.clone(), source };
        let at = self.data_at as u64 + (start as u64) * rb as u64;
        self.reader.seek(SeekFrom::Start(at)).map_err(io)?;
        let mut got = 0;
        while got < out.len() {
            match self.reader.read(&mut out[got..]) {
                Ok(0) => return Err(NpyError::Truncated { path: self.name.clone(), expected: out.len(), actual: got }),
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io(e)),
            }
        }
        swap_to_little_endian(out, self.info.dtype.size());
        Ok(())
    }
}

/// Parses `.npy` bytes held in memory; errors name the input `<memory>`.
pub fn parse_npy(bytes: &[u8]) -> Result<Tensor, NpyError> {
    parse_npy_named(bytes, MEMORY)
}

fn parse_npy_named(bytes: &[u8], name: &str) -> Result<Tensor, NpyError> {
    let (info, data_at) = parse_head(bytes, name, Accept::Fields)?;
    tensor_of(info, &bytes[data_at..], name)
}

/// The header length a file starting with `prefix` declares: `None` when
/// the prefix ends before it.
fn header_length(prefix: &[u8], name: &str) -> Result<Option<usize>, NpyError> {
    if prefix.len() < MAGIC.len() || &prefix[..MAGIC.len()] != MAGIC {
        return Err(NpyError::BadMagic { path: name.to_string() });
    }
    let rest = &prefix[MAGIC.len()..];
    let (major, minor) = match rest {
        [a, b, ..] => (*a, *b),
        _ => return Err(NpyError::BadHeader { path: name.to_string(), message: "file ends inside the version bytes".into() }),
    };
    let rest = &rest[2..];
    Ok(match (major, minor) {
        (1, 0) => match rest {
            [a, b, ..] => Some(u16::from_le_bytes([*a, *b]) as usize),
            _ => None,
        },
        (2, 0) | (3, 0) => match rest {
            [a, b, c, d, ..] => Some(u32::from_le_bytes([*a, *b, *c, *d]) as usize),
            _ => None,
        },
        _ => return Err(NpyError::UnsupportedVersion { path: name.to_string(), major, minor }),
    })
}

/// What a header says the data is.
#[derive(Debug)]
struct DataInfo {
    dtype: ElementType,
    shape: Vec<usize>,
    /// Bytes of data the shape needs.
    bytes: usize,
}

/// Magic, version and header of `bytes` (which must hold at least the
/// whole header): what the data is and where it starts.
fn parse_head(bytes: &[u8], name: &str, accept: Accept) -> Result<(DataInfo, usize), NpyError> {
    let bad = |message: String| NpyError::BadHeader { path: name.to_string(), message };
    let header_len = header_length(bytes, name)?.ok_or_else(|| bad("file ends inside the header length".into()))?;
    let header_start = if bytes[MAGIC.len()] == 1 { MAGIC.len() + 4 } else { MAGIC.len() + 6 };
    let rest = &bytes[header_start..];
    if rest.len() < header_len {
        return Err(bad(format!("header length is {header_len} bytes, but only {} remain", rest.len())));
    }
    let header = &rest[..header_len];
    // Version 1.0 and 2.0 headers are latin-1, 3.0 is UTF-8; every valid
    // header is ASCII, so requiring UTF-8 refuses nothing numpy writes.
    let header = std::str::from_utf8(header).map_err(|_| bad("header is not valid text".into()))?;
    let dict = parse_header(header).map_err(bad)?;

    let dtype = match (ElementType::from_npy_descr(&dict.descr), accept) {
        (Some(t @ (ElementType::F32 | ElementType::F64 | ElementType::F16 | ElementType::BF16)), Accept::Fields)
        | (Some(t @ (ElementType::I32 | ElementType::I64)), Accept::Ids)
        | (Some(t), Accept::Arrays) => t,
        (_, Accept::Fields) => return Err(NpyError::UnsupportedDtype { path: name.to_string(), found: dict.descr }),
        (_, Accept::Ids) => return Err(NpyError::IdsDtype { path: name.to_string(), found: dict.descr }),
        (None, Accept::Arrays) => return Err(NpyError::UnsupportedArrayDtype { path: name.to_string(), found: dict.descr }),
    };
    if dict.fortran_order {
        return Err(NpyError::FortranOrder { path: name.to_string() });
    }
    let rank = dict.shape.len();
    // 0-D arrays are scalars (numpy writes them for `np.float32(2)`): scalar
    // parameters arrive that way.
    match accept {
        Accept::Fields if rank > 2 => return Err(NpyError::UnsupportedRank { path: name.to_string(), shape: dict.shape, rank }),
        Accept::Ids if rank != 1 => return Err(NpyError::IdsShape { path: name.to_string(), shape: dict.shape }),
        Accept::Arrays if rank > MAX_ARRAY_DIMS => {
            return Err(NpyError::TooManyDims { path: name.to_string(), shape: dict.shape, rank })
        }
        _ => {}
    }
    let bytes_needed = array_bytes(dtype, &dict.shape, name)?;
    Ok((DataInfo { dtype, shape: dict.shape, bytes: bytes_needed }, header_start + header_len))
}

/// The tensor of `data`, which must be exactly the bytes `info` needs.
fn tensor_of(info: DataInfo, data: &[u8], name: &str) -> Result<Tensor, NpyError> {
    let expected = info.bytes;
    if data.len() < expected {
        return Err(NpyError::Truncated { path: name.to_string(), expected, actual: data.len() });
    }
    if data.len() > expected {
        return Err(NpyError::TrailingBytes { path: name.to_string(), expected, extra: data.len() - expected });
    }
    let too_large = || NpyError::TooLarge { path: name.to_string(), shape: info.shape.clone() };
    let tensor = match info.dtype {
        ElementType::F32 => {
            let mut v = Vec::new();
            v.try_reserve_exact(expected / 4).map_err(|_| too_large())?;
            v.extend(data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])));
            Tensor::from_f32(info.shape, v)
        }
        ElementType::F64 => {
            let mut v = Vec::new();
            v.try_reserve_exact(expected / 8).map_err(|_| too_large())?;
            v.extend(data.chunks_exact(8).map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])));
            Tensor::from_f64(info.shape, v)
        }
        ElementType::F16 => {
            let mut v = Vec::new();
            v.try_reserve_exact(expected / 2).map_err(|_| too_large())?;
            v.extend(data.chunks_exact(2).map(|c| tiga_runtime::f16::from_bits(u16::from_le_bytes([c[0], c[1]]))));
            Tensor::from_f16(info.shape, v)
        }
        ElementType::BF16 => {
            let mut v = Vec::new();
            v.try_reserve_exact(expected / 2).map_err(|_| too_large())?;
            v.extend(data.chunks_exact(2).map(|c| tiga_runtime::bf16::from_bits(u16::from_le_bytes([c[0], c[1]]))));
            Tensor::from_bf16(info.shape, v)
        }
        // `Accept::Fields` admits floats only.
        other => return Err(NpyError::UnsupportedDtype { path: name.to_string(), found: other.npy_descr().into() }),
    };
    // The length was checked against the shape above, so this cannot fail;
    // map it anyway rather than unwrap.
    tensor.map_err(|e| NpyError::BadHeader { path: name.to_string(), message: e.to_string() })
}

/// The ids of `data` (a 1-D `<i8` or `<i4` array, `info`'s bytes exactly).
fn ids_of(info: DataInfo, data: &[u8], name: &str) -> Result<Vec<i64>, NpyError> {
    let expected = info.bytes;
    if data.len() < expected {
        return Err(NpyError::Truncated { path: name.to_string(), expected, actual: data.len() });
    }
    if data.len() > expected {
        return Err(NpyError::TrailingBytes { path: name.to_string(), expected, extra: data.len() - expected });
    }
    let mut v = Vec::new();
    v.try_reserve_exact(info.shape[0]).map_err(|_| NpyError::TooLarge { path: name.to_string(), shape: info.shape.clone() })?;
    match info.dtype {
        ElementType::I64 => {
            v.extend(data.chunks_exact(8).map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])))
        }
        ElementType::I32 => v.extend(data.chunks_exact(4).map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))),
        // `Accept::Ids` admits integers only.
        other => return Err(NpyError::IdsDtype { path: name.to_string(), found: other.npy_descr().to_string() }),
    }
    Ok(v)
}

/// The three keys of a `.npy` header.
#[derive(Debug, PartialEq)]
struct Header {
    descr: String,
    fortran_order: bool,
    shape: Vec<usize>,
}

/// A value of the Python literal subset used by `.npy` headers.
#[derive(Debug, PartialEq)]
enum Value {
    Str(String),
    Bool(bool),
    Tuple(Vec<usize>),
}

fn parse_header(text: &str) -> Result<Header, String> {
    let mut p = Parser { s: text.as_bytes(), i: 0 };
    p.skip_ws();
    p.expect(b'{')?;
    let mut descr = None;
    let mut fortran_order = None;
    let mut shape = None;
    loop {
        p.skip_ws();
        if p.eat(b'}') {
            break;
        }
        let key = p.string()?;
        p.skip_ws();
        p.expect(b':')?;
        p.skip_ws();
        let value = p.value()?;
        let slot_ok = match (key.as_str(), value) {
            ("descr", Value::Str(s)) => descr.replace(s).is_none(),
            ("fortran_order", Value::Bool(b)) => fortran_order.replace(b).is_none(),
            ("shape", Value::Tuple(t)) => shape.replace(t).is_none(),
            ("descr" | "fortran_order" | "shape", v) => {
                return Err(format!("key '{key}' has an unexpected value {v:?}"));
            }
            _ => return Err(format!("unexpected key '{key}'")),
        };
        if !slot_ok {
            return Err(format!("key '{key}' appears twice"));
        }
        p.skip_ws();
        if p.eat(b',') {
            continue;
        }
        p.skip_ws();
        p.expect(b'}')?;
        break;
    }
    p.skip_ws();
    if p.i != p.s.len() {
        return Err(format!("unexpected text after the header dict at byte {}", p.i));
    }
    Ok(Header {
        descr: descr.ok_or("missing key 'descr'")?,
        fortran_order: fortran_order.ok_or("missing key 'fortran_order'")?,
        shape: shape.ok_or("missing key 'shape'")?,
    })
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(match self.peek() {
                Some(found) => format!("expected '{}' at byte {}, found '{}'", c as char, self.i, found.escape_ascii()),
                None => format!("expected '{}' at byte {}, found the end of the header", c as char, self.i),
            })
        }
    }

    fn string(&mut self) -> Result<String, String> {
        let quote = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => return Err(format!("expected a quoted string at byte {}", self.i)),
        };
        self.i += 1;
        let start = self.i;
        while let Some(c) = self.peek() {
            if c == quote {
                let s = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
                self.i += 1;
                return Ok(s);
            }
            if c == b'\\' {
                return Err(format!("escape sequences are not supported (byte {})", self.i));
            }
            self.i += 1;
        }
        Err(format!("unterminated string starting at byte {}", start - 1))
    }

    fn word(&mut self) -> &[u8] {
        let start = self.i;
        while matches!(self.peek(), Some(c) if c.is_ascii_alphanumeric() || c == b'_') {
            self.i += 1;
        }
        &self.s[start..self.i]
    }

    fn value(&mut self) -> Result<Value, String> {
        match self.peek() {
            Some(b'\'' | b'"') => Ok(Value::Str(self.string()?)),
            Some(b'(') => {
                self.i += 1;
                let mut dims = Vec::new();
                loop {
                    self.skip_ws();
                    if self.eat(b')') {
                        break;
                    }
                    let at = self.i;
                    let digits = self.word();
                    // numpy on some platforms wrote `3L` for Python 2 longs.
                    let digits = digits.strip_suffix(b"L").unwrap_or(digits);
                    let n = std::str::from_utf8(digits)
                        .ok()
                        .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
                        .and_then(|d| d.parse::<usize>().ok())
                        .ok_or_else(|| format!("expected a dimension (a non-negative integer) at byte {at}"))?;
                    dims.push(n);
                    self.skip_ws();
                    if self.eat(b',') {
                        continue;
                    }
                    self.expect(b')')?;
                    break;
                }
                Ok(Value::Tuple(dims))
            }
            _ => {
                let at = self.i;
                match self.word() {
                    b"True" => Ok(Value::Bool(true)),
                    b"False" => Ok(Value::Bool(false)),
                    _ => Err(format!("expected a string, True, False or a tuple at byte {at}")),
                }
            }
        }
    }
}

/// The `.npy` bytes of a 1-D or 2-D tensor (version 1.0, `<f4`/`<f8`).
pub fn encode_npy(tensor: &TensorView<'_>) -> Result<Vec<u8>, NpyError> {
    encode_npy_named(tensor, MEMORY)
}

fn encode_npy_named(tensor: &TensorView<'_>, name: &str) -> Result<Vec<u8>, NpyError> {
    let shape = tensor.shape();
    if shape.len() != 1 && shape.len() != 2 {
        return Err(NpyError::WriteRank { path: name.to_string(), shape: shape.to_vec(), rank: shape.len() });
    }
    let mut out = header_bytes(tensor.field_type().into(), shape, name)?;
    out.reserve(tensor.len() * tensor.field_type().size());
    match tensor.data() {
        Data::F32(d) => d.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Data::F64(d) => d.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Data::F16(d) => d.iter().for_each(|x| out.extend_from_slice(&x.to_bits().to_le_bytes())),
        Data::BF16(d) => d.iter().for_each(|x| out.extend_from_slice(&x.to_bits().to_le_bytes())),
    }
    Ok(out)
}

/// Magic, version and header of an array of `dtype` and `shape` (version
/// 1.0, padded so that the data starts at a multiple of 64 as numpy does;
/// 2.0 only if the header does not fit 1.0).
fn header_bytes(dtype: ElementType, shape: &[usize], name: &str) -> Result<Vec<u8>, NpyError> {
    let dims = match shape {
        [n] => format!("({n},)"),
        _ => format!("({})", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
    };
    let dict = format!("{{'descr': '{}', 'fortran_order': False, 'shape': {dims}, }}", dtype.npy_descr());
    // Pad with spaces so that magic + version + length + header is a multiple
    // of 64 (numpy aligns the data this way), ending in a newline.
    let encode = |len_bytes: usize| {
        let prefix = MAGIC.len() + 2 + len_bytes;
        let unpadded = prefix + dict.len() + 1;
        let pad = (64 - unpadded % 64) % 64;
        let mut header = dict.clone();
        header.extend(std::iter::repeat_n(' ', pad));
        header.push('\n');
        header
    };
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(MAGIC);
    let header = encode(2);
    if let Ok(len) = u16::try_from(header.len()) {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(header.as_bytes());
    } else {
        let header = encode(4);
        let len = u32::try_from(header.len())
            .map_err(|_| NpyError::BadHeader { path: name.to_string(), message: "header too long to write".into() })?;
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(header.as_bytes());
    }
    Ok(out)
}

/// Writes `.npy` atomically: the bytes go to a temporary file in the same
/// directory, which is synced and then renamed over `path`, so a crash or a
/// full disk leaves either the old file or the new one, never a torn one.
pub fn write_npy(path: impl AsRef<Path>, tensor: &TensorView<'_>) -> Result<(), NpyError> {
    let path = path.as_ref();
    let bytes = encode_npy_named(tensor, &path.display().to_string())?;
    let mut w = AtomicFile::create(path)?;
    w.write(&bytes)?;
    w.commit()
}

/// The `.npy` bytes of a 1-D `<i8` array of ids.
pub fn encode_npy_ids(ids: &[i64]) -> Result<Vec<u8>, NpyError> {
    let mut out = header_bytes(ElementType::I64, &[ids.len()], MEMORY)?;
    out.reserve(ids.len() * 8);
    ids.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
    Ok(out)
}

/// Writes ids as a 1-D `<i8` `.npy`, atomically as [`write_npy`].
pub fn write_npy_ids(path: impl AsRef<Path>, ids: &[i64]) -> Result<(), NpyError> {
    let bytes = encode_npy_ids(ids)?;
    let mut w = AtomicFile::create(path.as_ref())?;
    w.write(&bytes)?;
    w.commit()
}

/// Writes a general array atomically, as [`write_npy`] does.
pub fn write_npy_array(path: impl AsRef<Path>, array: &NpyArray) -> Result<(), NpyError> {
    let mut w = NpyWriter::create(path, array.dtype, &array.shape)?;
    w.write(&array.data)?;
    w.finish()
}

/// A file written under a temporary name in its destination's directory
/// and renamed over the destination at [`AtomicFile::commit`] (after an
/// fsync; the directory is fsynced after the rename), so that a crash, a
/// full disk or an error leaves the old file or the new one, never a torn
/// one. Dropped uncommitted, the temporary file is removed.
struct AtomicFile {
    name: String,
    path: std::path::PathBuf,
    dir: std::path::PathBuf,
    tmp: std::io::BufWriter<tempfile::NamedTempFile>,
}

impl AtomicFile {
    fn create(path: &Path) -> Result<AtomicFile, NpyError> {
        let name = path.display().to_string();
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => Path::new(".").to_path_buf(),
        };
        let tmp = tempfile::NamedTempFile::new_in(&dir).map_err(|source| NpyError::Io { path: name.clone(), source })?;
        Ok(AtomicFile { name, path: path.to_path_buf(), dir, tmp: std::io::BufWriter::with_capacity(1 << 20, tmp) })
    }

    fn io(&self, source: std::io::Error) -> NpyError {
        NpyError::Io { path: self.name.clone(), source }
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), NpyError> {
        self.tmp.write_all(bytes).map_err(|e| self.io(e))
    }

    fn commit(self) -> Result<(), NpyError> {
        let AtomicFile { name, path, dir, tmp } = self;
        let io = |source| NpyError::Io { path: name.clone(), source };
        let tmp = tmp.into_inner().map_err(|e| io(e.into_error()))?;
        // Temp files start owner-only; a saved array is an ordinary file.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            tmp.as_file().set_permissions(std::fs::Permissions::from_mode(0o644)).map_err(io)?;
        }
        tmp.as_file().sync_all().map_err(io)?;
        tmp.persist(&path).map_err(|e| io(e.error))?;
        // Make the rename itself durable where the platform allows; some
        // file systems refuse to sync a directory, which does not undo the
        // write.
        #[cfg(unix)]
        if let Ok(d) = std::fs::File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

/// A general array written in pieces (rows as they arrive from ranks),
/// atomically as [`write_npy`] writes: the header at
/// [`NpyWriter::create`], the data by [`NpyWriter::write`] in this
/// machine's byte order, and the rename at [`NpyWriter::finish`], which
/// refuses a data length other than the shape's.
pub struct NpyWriter {
    file: AtomicFile,
    dtype: ElementType,
    shape: Vec<usize>,
    expected: usize,
    written: usize,
}

impl std::fmt::Debug for NpyWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NpyWriter({}, {} of {} bytes)", self.file.name, self.written, self.expected)
    }
}

impl NpyWriter {
    pub fn create(path: impl AsRef<Path>, dtype: ElementType, shape: &[usize]) -> Result<NpyWriter, NpyError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        if shape.len() > MAX_ARRAY_DIMS {
            return Err(NpyError::TooManyDims { path: name, shape: shape.to_vec(), rank: shape.len() });
        }
        let expected = array_bytes(dtype, shape, &name)?;
        let header = header_bytes(dtype, shape, &name)?;
        let mut file = AtomicFile::create(path)?;
        file.write(&header)?;
        Ok(NpyWriter { file, dtype, shape: shape.to_vec(), expected, written: 0 })
    }

    /// Append elements' bytes (this machine's byte order; whole elements).
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), NpyError> {
        let written = self.written.saturating_add(bytes.len());
        if written > self.expected || !bytes.len().is_multiple_of(self.dtype.size()) {
            return Err(NpyError::WrongDataLength {
                path: self.file.name.clone(),
                shape: self.shape.clone(),
                dtype: self.dtype,
                expected: self.expected,
                written,
            });
        }
        self.written = written;
        if cfg!(target_endian = "big") {
            let mut le = bytes.to_vec();
            swap_to_little_endian(&mut le, self.dtype.size());
            self.file.write(&le)
        } else {
            self.file.write(bytes)
        }
    }

    /// Check the length, sync and rename over the destination.
    pub fn finish(self) -> Result<(), NpyError> {
        if self.written != self.expected {
            return Err(NpyError::WrongDataLength {
                path: self.file.name.clone(),
                shape: self.shape,
                dtype: self.dtype,
                expected: self.expected,
                written: self.written,
            });
        }
        self.file.commit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `.npy` file with the given version and header text, padded the way
    /// numpy pads it, followed by `data`.
    fn file(major: u8, header: &str, data: &[u8]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&[major, 0]);
        if major == 1 {
            out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        } else {
            out.extend_from_slice(&(header.len() as u32).to_le_bytes());
        }
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out
    }

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn err(bytes: &[u8]) -> String {
        match parse_npy(bytes) {
            Ok(t) => panic!("expected an error, got {t:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn encodes_like_numpy() {
        // np.save of np.array([1, 2, 3], dtype='<f4'): a 118-byte header
        // (0x76 = 'v'), so the data starts at byte 128.
        let t = Tensor::from_f32([3], vec![1.0, 2.0, 3.0]).expect("valid");
        let bytes = encode_npy(&t.view()).expect("1-D");
        let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }";
        let mut expected = b"\x93NUMPY\x01\x00v\x00".to_vec();
        expected.extend_from_slice(dict.as_bytes());
        expected.extend(std::iter::repeat_n(b' ', 118 - dict.len() - 1));
        expected.push(b'\n');
        expected.extend_from_slice(&f32_bytes(&[1.0, 2.0, 3.0]));
        assert_eq!(bytes.len(), 128 + 12);
        assert_eq!(bytes, expected);
        // 1.0f32 little-endian is 00 00 80 3f.
        assert_eq!(&bytes[128..132], &[0x00, 0x00, 0x80, 0x3f]);
    }

    #[test]
    fn round_trips() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = Tensor::from_f32([4], vec![0.5, -1.25, 3.0e-8, f32::MAX]).expect("valid");
        let b = Tensor::from_f64([2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, -6.5e100]).expect("valid");
        let c = Tensor::from_f32([0, 5], vec![]).expect("valid");
        let d = Tensor::from_f64([3, 1], vec![0.1, 0.2, 0.3]).expect("valid");
        for (i, t) in [a, b, c, d].iter().enumerate() {
            let path = dir.path().join(format!("t{i}.npy"));
            write_npy(&path, &t.view()).expect("write");
            let back = read_npy(&path).expect("read");
            assert_eq!(&back, t);
        }
        // Overwriting replaces the whole file, and no temporary is left behind.
        let path = dir.path().join("t0.npy");
        let small = Tensor::from_f64([1], vec![7.0]).expect("valid");
        write_npy(&path, &small.view()).expect("write");
        assert_eq!(read_npy(&path).expect("read").as_f64(), Some(&[7.0][..]));
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 4);
    }

    #[test]
    fn half_fields_read_and_write() {
        // np.save(p, np.array([1, -2.5, 65504], dtype='<f2')): f16 bits
        // 0x3c00, 0xc100, 0x7bff.
        let data: Vec<u8> = [0x3c00u16, 0xc100, 0x7bff].iter().flat_map(|b| b.to_le_bytes()).collect();
        let h = "{'descr': '<f2', 'fortran_order': False, 'shape': (3,), }\n";
        let t = parse_npy(&file(1, h, &data)).expect("f16 reads");
        assert_eq!(t.field_type(), tiga_runtime::FieldType::F16);
        assert_eq!(t.to_f64_vec(), vec![1.0, -2.5, 65504.0]);
        // np.save of an ml_dtypes.bfloat16 array writes '|V2'; bf16 1.0 is
        // 0x3f80, -3.0 is 0xc040.
        let data: Vec<u8> = [0x3f80u16, 0xc040].iter().flat_map(|b| b.to_le_bytes()).collect();
        for descr in ["|V2", "<V2"] {
            let h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': (2, 1), }}\n");
            let t = parse_npy(&file(1, &h, &data)).expect("bf16 reads");
            assert_eq!(t.field_type(), tiga_runtime::FieldType::BF16);
            assert_eq!((t.shape(), t.to_f64_vec()), (&[2usize, 1][..], vec![1.0, -3.0]));
        }
        // Both round-trip through tiga's writer, bit for bit.
        let dir = tempfile::tempdir().expect("tempdir");
        let x = Tensor::from_f32([2, 2], vec![0.1, -7.25, 1e-6, 3.0e4]).expect("valid");
        for ty in [tiga_runtime::FieldType::F16, tiga_runtime::FieldType::BF16] {
            let t = x.converted(ty);
            let path = dir.path().join(format!("{ty}.npy"));
            write_npy(&path, &t.view()).expect("write");
            let back = read_npy(&path).expect("read");
            assert_eq!(back, t);
            let descr = if ty == tiga_runtime::FieldType::F16 { "'<f2'" } else { "'|V2'" };
            let bytes = std::fs::read(&path).expect("bytes");
            assert!(String::from_utf8_lossy(&bytes[..128]).contains(descr), "{ty}");
        }
    }

    #[test]
    fn reads_versions_2_and_3_and_python2_longs() {
        let data = f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        for major in [2, 3] {
            let h = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }   \n";
            let t = parse_npy(&file(major, h, &data)).expect("valid");
            assert_eq!(t.shape(), &[2, 3]);
            assert_eq!(t.as_f32(), Some(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0][..]));
        }
        let h = "{\"shape\": (2L, 3L), \"fortran_order\": False, \"descr\": \"<f4\"}\n";
        let t = parse_npy(&file(1, h, &data)).expect("valid");
        assert_eq!(t.shape(), &[2, 3]);
    }

    #[test]
    fn refuses_what_fields_cannot_be() {
        let h = |descr: &str, fortran: &str, shape: &str| {
            format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}\n")
        };
        let data = f32_bytes(&[0.0; 8]);
        assert_eq!(
            err(&file(1, &h("<i4", "False", "(8,)"), &data)),
            "<memory>: dtype '<i4' is not supported; accepted: '<f4' (little-endian float32), '<f8' (float64), '<f2' (float16) or '|V2' (bfloat16)"
        );
        assert!(err(&file(1, &h(">f4", "False", "(8,)"), &data)).contains("dtype '>f4' is not supported"));
        assert_eq!(
            err(&file(1, &h("<f4", "True", "(2, 4)"), &data)),
            "<memory>: fortran_order is True; only C-order (row-major) arrays are accepted"
        );
        assert_eq!(
            err(&file(1, &h("<f4", "False", "(2, 2, 2)"), &data)),
            "<memory>: shape [2, 2, 2] has 3 dimensions; only 0-D, 1-D and 2-D arrays are accepted"
        );
        // A 0-D array is one scalar (a scalar parameter).
        let scalar = parse_npy(&file(1, &h("<f4", "False", "()"), &data[..4])).expect("0-D reads");
        assert_eq!(scalar.shape(), &[] as &[usize]);
        assert_eq!(scalar.as_f32().map(|s| s.len()), Some(1));
        assert_eq!(
            err(&file(1, &h("<f4", "False", "(3,)"), &data[..8])),
            "<memory>: data section is truncated: expected 12 bytes, found 8"
        );
        assert_eq!(err(&file(1, &h("<f8", "False", "(3,)"), &data)), "<memory>: 8 unexpected bytes after the 24 bytes of data");
        assert_eq!(
            err(&file(1, &h("<f4", "False", "(4294967296, 4294967296)"), &data)),
            "<memory>: shape [4294967296, 4294967296] is too large to hold in memory"
        );
        assert_eq!(err(b"\x93NUMPY\x04\x00"), "<memory>: .npy format version 4.0 is not supported (accepted: 1.0, 2.0, 3.0)");
        assert_eq!(err(b"PK\x03\x04"), "<memory>: not a .npy file (it does not start with \\x93NUMPY)");
        let t = Tensor::from_f32([2, 2, 1], vec![0.0; 4]).expect("valid");
        assert_eq!(
            encode_npy(&t.view()).map(|_| ()).err().map(|e| e.to_string()),
            Some("<memory>: cannot write a 3-D tensor (shape [2, 2, 1]); only 1-D and 2-D are written".into())
        );
        let missing = tempfile::tempdir().expect("tempdir").path().join("nope.npy");
        assert!(read_npy(&missing).map(|_| ()).err().map(|e| e.to_string()).is_some_and(|m| m.contains("nope.npy")));
    }

    #[test]
    fn garbage_headers_are_errors() {
        let cases = [
            ("", "expected '{' at byte 0, found the end of the header"),
            ("{", "expected a quoted string at byte 1"),
            ("{'descr': '<f4'", "expected '}' at byte 15, found the end of the header"),
            ("{'descr': <f4}", "expected a string, True, False or a tuple at byte 10"),
            ("{'descr': '<f4, }", "unterminated string starting at byte 10"),
            ("{'descr': '<f4', 'extra': 'x'}", "unexpected key 'extra'"),
            ("{'descr': '<f4', 'descr': '<f4'}", "key 'descr' appears twice"),
            ("{'descr': '<f4', 'fortran_order': False}", "missing key 'shape'"),
            ("{'shape': (-1,)}", "expected a dimension (a non-negative integer) at byte 11"),
            ("{'shape': (99999999999999999999999,)}", "expected a dimension (a non-negative integer) at byte 11"),
            ("{'shape': (3,, )}", "expected a dimension (a non-negative integer) at byte 13"),
            ("{'shape': 'x', 'fortran_order': False}", "key 'shape' has an unexpected value Str(\"x\")"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x", "unexpected text after the header dict at byte 56"),
        ];
        for (header, message) in cases {
            assert_eq!(err(&file(1, header, &[])), format!("<memory>: malformed .npy header: {message}"), "{header}");
        }
        let mut long = file(1, "{}", &[]);
        long[8] = 200;
        assert_eq!(err(&long), "<memory>: malformed .npy header: header length is 200 bytes, but only 2 remain");
        assert_eq!(err(b"\x93NUMPY\x01"), "<memory>: malformed .npy header: file ends inside the version bytes");
        assert_eq!(err(b"\x93NUMPY\x02\x00\x01"), "<memory>: malformed .npy header: file ends inside the header length");
        assert!(err(&file(1, "{'descr': '\u{fffd}\\x'}", &[])).contains("escape sequences are not supported"));
        assert!(err(&[0x93, b'N', b'U', b'M', b'P', b'Y', 1, 0, 2, 0, 0xff, 0xfe]).contains("header is not valid text"));
    }

    proptest::proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = parse_npy(&bytes);
        }

        #[test]
        fn random_headers_never_panic(header in "[{}()',: a-z<>0-9TrueFalsL\"]{0,80}", data in proptest::collection::vec(proptest::num::u8::ANY, 0..40)) {
            let _ = parse_npy(&file(1, &header, &data));
        }

        #[test]
        fn encode_parse_round_trip(rows in 0usize..6, cols in 1usize..6, seed in proptest::num::f64::NORMAL) {
            let data: Vec<f64> = (0..rows * cols).map(|i| seed * i as f64).collect();
            let t = Tensor::from_f64([rows, cols], data).expect("valid");
            let bytes = encode_npy(&t.view()).expect("2-D");
            proptest::prop_assert_eq!((bytes.len() - rows * cols * 8) % 64, 0);
            proptest::prop_assert_eq!(parse_npy(&bytes).expect("valid"), t);
        }
    }

    #[test]
    fn ids_round_trip_and_int32_widens() {
        let ids = [0i64, -5, 1 << 40, 7];
        assert_eq!(parse_npy_ids(&encode_npy_ids(&ids).expect("encode")).expect("parse"), ids);
        let i4: Vec<u8> = [3i32, -1].iter().flat_map(|x| x.to_le_bytes()).collect();
        let bytes = file(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", &i4);
        assert_eq!(parse_npy_ids(&bytes).expect("parse"), vec![3, -1]);
    }

    #[test]
    fn ids_and_fields_refuse_each_other() {
        let f4 = file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", &f32_bytes(&[1.0]));
        assert!(matches!(parse_npy_ids(&f4), Err(NpyError::IdsDtype { .. })), "{:?}", parse_npy_ids(&f4));
        let i8s = encode_npy_ids(&[1, 2]).expect("encode");
        assert!(matches!(parse_npy(&i8s), Err(NpyError::UnsupportedDtype { .. })));
        let two_d = file(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (1, 1), }", &1i64.to_le_bytes());
        assert!(matches!(parse_npy_ids(&two_d), Err(NpyError::IdsShape { .. })));
        let short = file(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", &1i64.to_le_bytes());
        assert!(matches!(parse_npy_ids(&short), Err(NpyError::Truncated { .. })));
    }
}
