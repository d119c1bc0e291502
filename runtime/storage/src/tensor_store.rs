//! Named tensors on disk: spill a tensor under a name, reattach it later,
//! from this process or another one.
//!
//! A [`TensorStore`] is a directory. [`TensorStore::spill`] writes a tensor
//! to `DIR/NAME.tensor` crash-safely (a temporary file `.NAME.tensor.XXXXXX.tmp`
//! in the same directory, fsynced, renamed over the final name, then the
//! directory fsynced), so a reader sees the old tensor or the new one, never
//! half of one. It returns a [`SpilledTensor`]: the name, path, shape, dtype
//! and CRC-32 of the data, which can [`load`](SpilledTensor::load) the tensor
//! into memory (checking the CRC) or [`map`](SpilledTensor::view_mapped) it
//! (nothing is read until the data is touched). [`TensorStore::reattach`]
//! opens a tensor another store value or another process wrote, by name.
//!
//! Where the directory is:
//! - [`TensorStore::at`]`(dir)`: that directory (created if missing); the
//!   tensors outlive the process.
//! - [`TensorStore::process`]: one directory per process, created on first
//!   use under the system temporary directory (`tiga-spill-PID-XXXXXX`), and
//!   removed, with everything in it, when the process exits normally
//!   (returning from `main` or `std::process::exit`). The guard is a
//!   process-wide static: the directory's path lives in a `static Mutex`,
//!   and the first call registers an `atexit` handler that removes it, so
//!   every store value made by `process()` shares the one directory and no
//!   value's drop removes it early. A process killed by a signal or aborted
//!   leaves the directory behind (its name carries the process id).
//! - [`TensorStore::from_env`]: `TIGA_SPILL_DIR` when it is set and not
//!   empty (the tensors outlive the process), else `process()`.
//!
//! # The `.tensor` file format (version 1.0)
//!
//! Little-endian throughout; CRC-32 is the IEEE/zlib one (`crc32fast`, the
//! same as `.gfg`, `docs/gfg.md`). One file holds one tensor:
//!
//! | offset | size | type | field |
//! |---:|---:|---|---|
//! | 0 | 8 | bytes | magic `TIGATEN\0` |
//! | 8 | 2 | u16 | major version (1) |
//! | 10 | 2 | u16 | minor version (0) |
//! | 12 | 1 | u8 | element type: 3 = f32, 4 = f64 (the `.gfg` codes) |
//! | 13 | 1 | u8 | rank `R` (0 to 8) |
//! | 14 | 2 | u16 | name length `L` in bytes (1 to 200) |
//! | 16 | 8 | u64 | data offset (a multiple of 64, at least `64 + 8R + L`) |
//! | 24 | 8 | u64 | data length in bytes (`product(shape)` × element size) |
//! | 32 | 4 | u32 | CRC-32 of the data bytes |
//! | 36 | 4 | u32 | CRC-32 of the descriptor (bytes `64 .. 64 + 8R + L`) |
//! | 40 | 20 | | reserved, zero |
//! | 60 | 4 | u32 | CRC-32 of bytes 0..60 |
//! | 64 | 8R | u64 × R | the shape, outermost first (row-major data) |
//! | 64 + 8R | L | bytes | the name, UTF-8 |
//! | … | | | zero padding up to the data offset |
//! | data offset | data length | | the elements, IEEE 754, bit for bit |
//!
//! The file ends exactly at `data offset + data length`. A reader refuses a
//! file that does not start with the magic, a major version other than 1, a
//! failed header, descriptor or data CRC, a file shorter than the header
//! says (*truncated*), bytes after the data, a shape whose size disagrees
//! with the data length, and a stored name other than the one asked for.
//!
//! Names are non-empty UTF-8 of at most 200 bytes, without `/`, `\`, `..`,
//! NUL or other control characters, so a name always stays inside its
//! directory. The file name is `NAME.tensor`.
//!
//! Memory maps ([`SpilledTensor::view_mapped`]) rely on the file not being
//! truncated or rewritten in place while mapped; this module never does
//! either (it replaces files by rename and removes them by unlink, which
//! leave open maps of the old file valid).

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use memmap2::{Mmap, MmapOptions};
use thiserror::Error;

use tiga_runtime::tensor::{element_count, DType, Data, Tensor, TensorView};

use crate::blocks::BlockWriter;

/// The magic bytes a `.tensor` file starts with.
pub const TENSOR_MAGIC: [u8; 8] = *b"TIGATEN\0";
/// The format version written.
pub const TENSOR_FORMAT_MAJOR: u16 = 1;
pub const TENSOR_FORMAT_MINOR: u16 = 0;
/// The fixed header's length.
const HEADER: usize = 64;
/// The data offset's alignment (enough for any element type).
const DATA_ALIGN: u64 = 64;
/// The longest name accepted, in bytes.
pub const MAX_TENSOR_NAME: usize = 200;
/// The highest rank accepted.
pub const MAX_TENSOR_RANK: usize = 8;
/// The file name extension of a stored tensor.
pub const TENSOR_EXT: &str = "tensor";
pub use tiga_runtime::schedule::SPILL_DIR_ENV;

const CODE_F32: u8 = 3;
const CODE_F64: u8 = 4;

/// Why a tensor could not be spilled, reattached or read. Every variant
/// names the tensor or the file.
#[derive(Debug, Error)]
pub enum TensorStoreError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("bad tensor name {name:?}: {why}")]
    BadName { name: String, why: &'static str },
    #[error("no tensor named `{name}` in {dir} ({available})")]
    Missing { name: String, dir: String, available: String },
    #[error("{path}: not a spilled tensor file (it does not start with the magic bytes TIGATEN\\0)")]
    BadMagic { path: String },
    #[error("{path}: tensor format version {major}.{minor} is not supported: this reader reads major version {supported}", supported = TENSOR_FORMAT_MAJOR)]
    UnsupportedVersion { path: String, major: u16, minor: u16 },
    #[error("{path}: truncated: {what} needs the file to be at least {needed} bytes long, but it has {actual}")]
    Truncated { path: String, what: &'static str, needed: u64, actual: u64 },
    #[error("{path}: checksum mismatch in {what}: stored crc32 {stored:08x}, computed {computed:08x} (the file is corrupt)")]
    Checksum { path: String, what: &'static str, stored: u32, computed: u32 },
    #[error("{path}: corrupt: {message}")]
    Corrupt { path: String, message: String },
    #[error("cannot spill `{name}`: {message}")]
    Unsupported { name: String, message: String },
    #[error("{path}: the file changed since it was spilled or reattached: {message}")]
    Changed { path: String, message: String },
    #[error("{path}: spilled tensors are little-endian and mapped in place; this big-endian target cannot read them")]
    BigEndian { path: String },
}

type Result<T> = std::result::Result<T, TensorStoreError>;

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> TensorStoreError + '_ {
    move |source| TensorStoreError::Io { path: path.display().to_string(), source }
}

/// Checks a tensor name: non-empty, at most 200 bytes, no `/`, `\`, `..`,
/// NUL or control characters.
pub fn validate_tensor_name(name: &str) -> Result<()> {
    let bad = |why| Err(TensorStoreError::BadName { name: name.to_string(), why });
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > MAX_TENSOR_NAME {
        return bad("it is longer than 200 bytes");
    }
    if name.contains('/') || name.contains('\\') {
        return bad("it contains a path separator");
    }
    if name.contains("..") {
        return bad("it contains `..`");
    }
    if name == "." {
        return bad("it is `.`");
    }
    if name.chars().any(char::is_control) {
        return bad("it contains a control character");
    }
    Ok(())
}

/// The CRC-32 of a tensor's elements as they are stored: little-endian
/// bytes, bit for bit (what [`SpilledTensor::crc32`] reports).
pub fn tensor_crc32(data: Data<'_>) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for_each_le_chunk(data, |bytes| h.update(bytes));
    h.finalize()
}

/// Calls `f` with the little-endian bytes of `data`, a bounded chunk at a
/// time (portable: no reinterpretation of memory).
fn for_each_le_chunk(data: Data<'_>, mut f: impl FnMut(&[u8])) {
    const CHUNK: usize = 64 * 1024;
    fn go<T: Copy, const N: usize>(d: &[T], le: impl Fn(T) -> [u8; N], f: &mut impl FnMut(&[u8])) {
        let mut buf = Vec::with_capacity(CHUNK.min(d.len()) * N);
        for chunk in d.chunks(CHUNK) {
            buf.clear();
            for &x in chunk {
                buf.extend_from_slice(&le(x));
            }
            f(&buf);
        }
    }
    match data {
        Data::F32(d) => go(d, f32::to_le_bytes, &mut f),
        Data::F64(d) => go(d, f64::to_le_bytes, &mut f),
        Data::F16(d) => go(d, tiga_runtime::f16::to_le_bytes, &mut f),
        Data::BF16(d) => go(d, tiga_runtime::bf16::to_le_bytes, &mut f),
    }
}

/// The process's spill directory, once made.
static PROCESS_DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

extern "C" {
    fn atexit(f: extern "C" fn()) -> std::os::raw::c_int;
}

/// Removes the process's spill directory: run by `atexit`.
extern "C" fn remove_process_dir() {
    // Never unwind out of an `extern "C"` function; a poisoned lock still
    // holds the path.
    let _ = std::panic::catch_unwind(|| {
        let dir = match PROCESS_DIR.lock() {
            Ok(mut g) => g.take(),
            Err(p) => p.into_inner().take(),
        };
        if let Some(dir) = dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    });
}

/// A directory of named tensors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorStore {
    dir: PathBuf,
}

impl TensorStore {
    /// The store at `dir`, created (with its parents) if missing. Tensors
    /// spilled here outlive the process.
    pub fn at(dir: impl AsRef<Path>) -> Result<TensorStore> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        if !dir.is_dir() {
            return Err(TensorStoreError::Io {
                path: dir.display().to_string(),
                source: std::io::Error::other("not a directory"),
            });
        }
        Ok(TensorStore { dir })
    }

    /// The per-process store: a directory under the system temporary
    /// directory, made on the first call and shared by every later one,
    /// removed with its contents when the process exits normally (an
    /// `atexit` handler; the guard is process-wide, not owned by the value).
    pub fn process() -> Result<TensorStore> {
        let mut g = PROCESS_DIR.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(dir) = g.as_ref() {
            // Someone may have removed it under us: make it again.
            std::fs::create_dir_all(dir).map_err(io_err(dir))?;
            return Ok(TensorStore { dir: dir.clone() });
        }
        let tmp = std::env::temp_dir();
        let dir = tempfile::Builder::new()
            .prefix(&format!("tiga-spill-{}-", std::process::id()))
            .tempdir_in(&tmp)
            .map_err(io_err(&tmp))?
            .keep();
        // SAFETY: registering a plain `extern "C"` function with the C
        // library's `atexit`; it takes no arguments and does not unwind.
        let registered = unsafe { atexit(remove_process_dir) } == 0;
        if !registered {
            let _ = std::fs::remove_dir(&dir);
            return Err(TensorStoreError::Io {
                path: dir.display().to_string(),
                source: std::io::Error::other("could not register the exit handler that removes it"),
            });
        }
        *g = Some(dir.clone());
        Ok(TensorStore { dir })
    }

    /// `TIGA_SPILL_DIR` when set and not empty (tensors outlive the
    /// process), else [`TensorStore::process`]: for programs that ask for
    /// the environment, as [`tiga_runtime::Schedule::from_env`] is (the library
    /// itself never reads it).
    pub fn from_env() -> Result<TensorStore> {
        match std::env::var_os(SPILL_DIR_ENV).filter(|d| !d.is_empty()) {
            Some(d) => TensorStore::at(PathBuf::from(d)),
            None => TensorStore::process(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file a tensor of this name is stored in.
    pub fn path_of(&self, name: &str) -> Result<PathBuf> {
        validate_tensor_name(name)?;
        Ok(self.dir.join(format!("{name}.{TENSOR_EXT}")))
    }

    /// Whether a tensor of this name is stored (a bad name is not).
    pub fn contains(&self, name: &str) -> bool {
        self.path_of(name).map(|p| p.is_file()).unwrap_or(false)
    }

    /// The names stored, sorted (files `NAME.tensor` with a valid name;
    /// temporary files of saves in progress are not listed).
    pub fn names(&self) -> Result<Vec<String>> {
        self.files_named(TENSOR_EXT, |n| validate_tensor_name(n).is_ok())
    }

    /// Stems of the regular files `STEM.EXT` in the store whose stem passes
    /// `valid`, sorted.
    pub(super) fn files_named(&self, ext: &str, valid: impl Fn(&str) -> bool) -> Result<Vec<String>> {
        let mut names = Vec::new();
        let suffix = format!(".{ext}");
        for entry in std::fs::read_dir(&self.dir).map_err(io_err(&self.dir))? {
            let entry = entry.map_err(io_err(&self.dir))?;
            let file_name = entry.file_name();
            let Some(name) = file_name.to_str().and_then(|f| f.strip_suffix(suffix.as_str())) else { continue };
            if valid(name) && entry.file_type().map(|t| t.is_file()).unwrap_or(false) {
                names.push(name.to_string());
            }
        }
        names.sort();
        Ok(names)
    }

    /// Removes the tensor `name`. Maps of it stay valid.
    pub fn remove(&self, name: &str) -> Result<()> {
        let path = self.path_of(name)?;
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(self.missing(name)),
            Err(e) => Err(io_err(&path)(e)),
        }
    }

    fn missing(&self, name: &str) -> TensorStoreError {
        let available = match self.names() {
            Ok(n) if n.is_empty() => "the store is empty".to_string(),
            Ok(n) if n.len() <= 20 => format!("it holds: {}", n.join(", ")),
            Ok(n) => format!("it holds {} tensors: {}, …", n.len(), n[..20].join(", ")),
            Err(e) => format!("cannot list it: {e}"),
        };
        TensorStoreError::Missing { name: name.to_string(), dir: self.dir.display().to_string(), available }
    }

    /// Writes `tensor` under `name`, replacing any tensor of that name
    /// atomically, and returns its handle.
    pub fn spill(&self, name: &str, tensor: &TensorView<'_>) -> Result<SpilledTensor> {
        let path = self.path_of(name)?;
        if cfg!(target_endian = "big") {
            return Err(TensorStoreError::BigEndian { path: path.display().to_string() });
        }
        let shape = tensor.shape().to_vec();
        if shape.len() > MAX_TENSOR_RANK {
            return Err(TensorStoreError::Unsupported {
                name: name.to_string(),
                message: format!("rank {} is above the format's limit of {MAX_TENSOR_RANK}", shape.len()),
            });
        }
        if tensor.field_type().is_half() {
            return Err(TensorStoreError::Unsupported {
                name: name.to_string(),
                message: format!("{} tensors have no code in the spill format (f32 and f64 only)", tensor.field_type()),
            });
        }
        let dtype = tensor.dtype();
        let data_len = (tensor.len() * dtype.size()) as u64;
        let mut descriptor = Vec::with_capacity(shape.len() * 8 + name.len());
        for &d in &shape {
            descriptor.extend_from_slice(&(d as u64).to_le_bytes());
        }
        descriptor.extend_from_slice(name.as_bytes());
        let data_offset = (HEADER as u64 + descriptor.len() as u64).div_ceil(DATA_ALIGN) * DATA_ALIGN;

        let io = io_err(&path);
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}.{TENSOR_EXT}."))
            .suffix(".tmp")
            .tempfile_in(&self.dir)
            .map_err(io_err(&self.dir))?;
        let crc32 = {
            let mut w = BlockWriter::new(tmp.as_file());
            // The header's place, written last.
            w.write_all(&[0u8; HEADER]).map_err(&io)?;
            w.write_all(&descriptor).map_err(&io)?;
            let pad = data_offset - (HEADER + descriptor.len()) as u64;
            w.write_all(&vec![0u8; pad as usize]).map_err(&io)?;
            let mut h = crc32fast::Hasher::new();
            let mut err = None;
            for_each_le_chunk(tensor.data(), |bytes| {
                if err.is_none() {
                    h.update(bytes);
                    if let Err(e) = w.write_all(bytes) {
                        err = Some(e);
                    }
                }
            });
            if let Some(e) = err {
                return Err(io(e));
            }
            let crc32 = h.finalize();
            let header = encode_header(dtype, shape.len(), name.len(), data_offset, data_len, crc32, &descriptor);
            w.seek(SeekFrom::Start(0)).map_err(&io)?;
            w.write_all(&header).map_err(&io)?;
            w.flush().map_err(&io)?;
            crc32
        };
        tmp.as_file().sync_all().map_err(&io)?;
        tmp.persist(&path).map_err(|e| io(e.error))?;
        // Make the rename durable where the platform allows; a file system
        // that refuses to sync a directory does not undo it.
        if let Ok(d) = File::open(&self.dir) {
            let _ = d.sync_all();
        }
        drop(io);
        Ok(SpilledTensor { name: name.to_string(), path, shape, dtype, crc32, data_offset, data_len })
    }

    /// Opens the tensor `name` (written by any store value or process on
    /// this directory): checks its header and descriptor, and reads the data
    /// once, in bounded chunks, to check its CRC-32. The data stays on disk.
    pub fn reattach(&self, name: &str) -> Result<SpilledTensor> {
        let t = self.reattach_lazy(name)?;
        t.verify()?;
        Ok(t)
    }

    /// Like [`reattach`](TensorStore::reattach), but reads only the header
    /// and descriptor; the data's CRC is checked by [`SpilledTensor::load`]
    /// or [`SpilledTensor::verify`].
    pub fn reattach_lazy(&self, name: &str) -> Result<SpilledTensor> {
        let path = self.path_of(name)?;
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(self.missing(name)),
            Err(e) => return Err(io_err(&path)(e)),
        };
        let h = read_header(&file, &path)?;
        if h.name != name {
            return Err(TensorStoreError::Corrupt {
                path: path.display().to_string(),
                message: format!("it holds tensor `{}`, not `{name}`", h.name),
            });
        }
        Ok(SpilledTensor {
            name: h.name,
            path,
            shape: h.shape,
            dtype: h.dtype,
            crc32: h.crc32,
            data_offset: h.data_offset,
            data_len: h.data_len,
        })
    }
}

#[allow(clippy::too_many_arguments)]
fn encode_header(
    dtype: DType,
    rank: usize,
    name_len: usize,
    data_offset: u64,
    data_len: u64,
    crc32: u32,
    descriptor: &[u8],
) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[0..8].copy_from_slice(&TENSOR_MAGIC);
    h[8..10].copy_from_slice(&TENSOR_FORMAT_MAJOR.to_le_bytes());
    h[10..12].copy_from_slice(&TENSOR_FORMAT_MINOR.to_le_bytes());
    h[12] = match dtype {
        DType::F32 => CODE_F32,
        DType::F64 => CODE_F64,
    };
    h[13] = rank as u8;
    h[14..16].copy_from_slice(&(name_len as u16).to_le_bytes());
    h[16..24].copy_from_slice(&data_offset.to_le_bytes());
    h[24..32].copy_from_slice(&data_len.to_le_bytes());
    h[32..36].copy_from_slice(&crc32.to_le_bytes());
    h[36..40].copy_from_slice(&crc32fast::hash(descriptor).to_le_bytes());
    let hc = crc32fast::hash(&h[0..60]);
    h[60..64].copy_from_slice(&hc.to_le_bytes());
    h
}

/// What a file's header and descriptor say, checked against the file.
struct Header {
    dtype: DType,
    shape: Vec<usize>,
    name: String,
    data_offset: u64,
    data_len: u64,
    crc32: u32,
}

use crate::format::{le_u16 as u16_at, le_u32 as u32_at, le_u64 as u64_at};

fn read_header(file: &File, path: &Path) -> Result<Header> {
    let name_s = path.display().to_string();
    if cfg!(target_endian = "big") {
        return Err(TensorStoreError::BigEndian { path: name_s });
    }
    let io = io_err(path);
    let file_len = file.metadata().map_err(&io)?.len();
    let corrupt = |message: String| TensorStoreError::Corrupt { path: name_s.clone(), message };
    let truncated = |what, needed| TensorStoreError::Truncated { path: name_s.clone(), what, needed, actual: file_len };
    let mut h = [0u8; HEADER];
    let head = file_len.min(HEADER as u64) as usize;
    file.read_exact_at(&mut h[..head], 0).map_err(&io)?;
    // A strict prefix of the magic (an empty file included) is truncated.
    if head < 8 {
        if h[..head] == TENSOR_MAGIC[..head] {
            return Err(truncated("the header", HEADER as u64));
        }
        return Err(TensorStoreError::BadMagic { path: name_s });
    }
    if h[0..8] != TENSOR_MAGIC {
        return Err(TensorStoreError::BadMagic { path: name_s });
    }
    if head < HEADER {
        return Err(truncated("the header", HEADER as u64));
    }
    let (major, minor) = (u16_at(&h, 8), u16_at(&h, 10));
    if major != TENSOR_FORMAT_MAJOR {
        return Err(TensorStoreError::UnsupportedVersion { path: name_s, major, minor });
    }
    let stored = u32_at(&h, 60);
    let computed = crc32fast::hash(&h[0..60]);
    if stored != computed {
        return Err(TensorStoreError::Checksum { path: name_s, what: "the header", stored, computed });
    }
    let dtype = match h[12] {
        CODE_F32 => DType::F32,
        CODE_F64 => DType::F64,
        c => return Err(corrupt(format!("unknown element type code {c}"))),
    };
    let rank = h[13] as usize;
    if rank > MAX_TENSOR_RANK {
        return Err(corrupt(format!("rank {rank} is above {MAX_TENSOR_RANK}")));
    }
    let name_len = u16_at(&h, 14) as usize;
    if name_len == 0 || name_len > MAX_TENSOR_NAME {
        return Err(corrupt(format!("name length {name_len} is not in 1..={MAX_TENSOR_NAME}")));
    }
    let data_offset = u64_at(&h, 16);
    let data_len = u64_at(&h, 24);
    let crc32 = u32_at(&h, 32);
    let desc_crc = u32_at(&h, 36);
    // A newer minor version may give reserved bytes a meaning; ours are zero.
    let newer_minor = minor > TENSOR_FORMAT_MINOR;
    if h[40..60].iter().any(|&b| b != 0) && !newer_minor {
        return Err(corrupt("reserved header bytes 40..60 are not zero".into()));
    }
    let desc_len = rank * 8 + name_len;
    let desc_end = (HEADER + desc_len) as u64;
    #[allow(clippy::manual_is_multiple_of)] // `is_multiple_of` is newer than the MSRV (1.85)
    let misaligned = data_offset % DATA_ALIGN != 0;
    if misaligned || data_offset < desc_end {
        return Err(corrupt(format!(
            "data offset {data_offset} is not a multiple of {DATA_ALIGN} at or after the descriptor's end {desc_end}"
        )));
    }
    if file_len < desc_end {
        return Err(truncated("the descriptor", desc_end));
    }
    let mut desc = vec![0u8; desc_len];
    file.read_exact_at(&mut desc, HEADER as u64).map_err(&io)?;
    let computed = crc32fast::hash(&desc);
    if computed != desc_crc {
        return Err(TensorStoreError::Checksum { path: name_s, what: "the descriptor", stored: desc_crc, computed });
    }
    let mut shape = Vec::with_capacity(rank);
    for k in 0..rank {
        let d = u64_at(&desc, k * 8);
        shape.push(usize::try_from(d).map_err(|_| corrupt(format!("dimension {k} = {d} does not fit in memory")))?);
    }
    let name = std::str::from_utf8(&desc[rank * 8..]).map_err(|_| corrupt("the name is not UTF-8".into()))?.to_string();
    validate_tensor_name(&name).map_err(|e| corrupt(format!("stored name: {e}")))?;
    let count = element_count(&shape).map_err(|e| corrupt(e.to_string()))?;
    let want = (count as u64).checked_mul(dtype.size() as u64);
    if want != Some(data_len) {
        return Err(corrupt(format!(
            "shape {shape:?} of {dtype} needs {} data bytes, the header says {data_len}",
            want.map_or("more than 2^64".to_string(), |w| w.to_string())
        )));
    }
    let end = data_offset.checked_add(data_len).ok_or_else(|| corrupt("data offset + length overflows".into()))?;
    if file_len < end {
        return Err(truncated("the data", end));
    }
    if file_len > end {
        return Err(corrupt(format!("{} bytes after the data's end at {end}", file_len - end)));
    }
    Ok(Header { dtype, shape, name, data_offset, data_len, crc32 })
}

/// A tensor stored on disk under a name: its description, and the means to
/// read it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpilledTensor {
    name: String,
    path: PathBuf,
    shape: Vec<usize>,
    dtype: DType,
    crc32: u32,
    data_offset: u64,
    data_len: u64,
}

impl SpilledTensor {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The CRC-32 of the stored data (little-endian elements): the same as
    /// [`tensor_crc32`] of the tensor spilled.
    pub fn crc32(&self) -> u32 {
        self.crc32
    }

    /// The element count.
    pub fn len(&self) -> usize {
        (self.data_len / self.dtype.size() as u64) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.data_len == 0
    }

    /// The data's size in bytes.
    pub fn byte_len(&self) -> u64 {
        self.data_len
    }

    /// Opens the file and checks that it is still the tensor this handle
    /// describes (same header, same size).
    fn open_checked(&self) -> Result<File> {
        let file = File::open(&self.path).map_err(io_err(&self.path))?;
        let h = read_header(&file, &self.path)?;
        if h.name != self.name
            || h.shape != self.shape
            || h.dtype != self.dtype
            || h.crc32 != self.crc32
            || h.data_offset != self.data_offset
            || h.data_len != self.data_len
        {
            return Err(TensorStoreError::Changed {
                path: self.path.display().to_string(),
                message: format!(
                    "it now holds `{}` {} {:?} with crc32 {:08x}, the handle describes `{}` {} {:?} with crc32 {:08x}",
                    h.name, h.dtype, h.shape, h.crc32, self.name, self.dtype, self.shape, self.crc32
                ),
            });
        }
        Ok(file)
    }

    /// Streams the data through `f`, a bounded chunk at a time, and checks
    /// its CRC-32.
    fn stream(&self, file: &File, mut f: impl FnMut(&[u8])) -> Result<()> {
        const CHUNK: usize = 1 << 20;
        let mut buf = vec![0u8; CHUNK.min(self.data_len as usize)];
        let mut h = crc32fast::Hasher::new();
        let mut at = 0u64;
        while at < self.data_len {
            let n = (self.data_len - at).min(CHUNK as u64) as usize;
            file.read_exact_at(&mut buf[..n], self.data_offset + at).map_err(io_err(&self.path))?;
            h.update(&buf[..n]);
            f(&buf[..n]);
            at += n as u64;
        }
        let computed = h.finalize();
        if computed != self.crc32 {
            return Err(TensorStoreError::Checksum {
                path: self.path.display().to_string(),
                what: "the data",
                stored: self.crc32,
                computed,
            });
        }
        Ok(())
    }

    /// Reads the whole file once (in bounded chunks) and checks every
    /// checksum; nothing stays in memory.
    pub fn verify(&self) -> Result<()> {
        let file = self.open_checked()?;
        self.stream(&file, |_| {})
    }

    /// Reads the tensor into memory, checking the data's CRC-32.
    pub fn load(&self) -> Result<Tensor> {
        let file = self.open_checked()?;
        let shape = self.shape.clone();
        let n = self.len();
        let bad = |e: tiga_runtime::tensor::TensorError| TensorStoreError::Corrupt {
            path: self.path.display().to_string(),
            message: e.to_string(),
        };
        // Chunks are a multiple of 8 bytes long, so no element straddles two.
        match self.dtype {
            DType::F32 => {
                let mut v = Vec::with_capacity(n);
                self.stream(&file, |b| v.extend(b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))))?;
                Tensor::from_f32(shape, v).map_err(bad)
            }
            DType::F64 => {
                let mut v = Vec::with_capacity(n);
                self.stream(&file, |b| {
                    v.extend(b.chunks_exact(8).map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])))
                })?;
                Tensor::from_f64(shape, v).map_err(bad)
            }
        }
    }

    /// Maps the tensor read-only: nothing is read until the data is touched
    /// (and then only the pages touched). The data's CRC is not checked
    /// here (that would read it all): call [`MappedTensor::verify`], or
    /// reattach with [`TensorStore::reattach`], which checks it once.
    pub fn view_mapped(&self) -> Result<MappedTensor> {
        let file = self.open_checked()?;
        let len = (self.data_offset + self.data_len) as usize;
        // SAFETY: a read-only map of the whole file, whose length was just
        // checked against the header. Like every file map it relies on the
        // file not being truncated or rewritten in place while mapped; this
        // module never does either (module doc).
        let map = unsafe { MmapOptions::new().len(len).map(&file) }.map_err(io_err(&self.path))?;
        Ok(MappedTensor { map, spilled: self.clone() })
    }
}

/// A spilled tensor, memory-mapped: [`view`](MappedTensor::view) it like an
/// in-memory tensor.
#[derive(Debug)]
pub struct MappedTensor {
    map: Mmap,
    spilled: SpilledTensor,
}

impl MappedTensor {
    pub fn spilled(&self) -> &SpilledTensor {
        &self.spilled
    }

    fn bytes(&self) -> &[u8] {
        let s = &self.spilled;
        &self.map[s.data_offset as usize..(s.data_offset + s.data_len) as usize]
    }

    /// The elements, in place.
    pub fn data(&self) -> Data<'_> {
        let bytes = self.bytes();
        // SAFETY: f32 and f64 accept every bit pattern; `align_to` returns a
        // correctly aligned middle, and the map starts on a page boundary
        // with the data at a multiple of 64, so the middle is all of it
        // (checked below). The file is little-endian and big-endian targets
        // are refused when the header is read.
        match self.spilled.dtype {
            DType::F32 => {
                let (pre, mid, post) = unsafe { bytes.align_to::<f32>() };
                assert!(pre.is_empty() && post.is_empty(), "mapped tensor data is not aligned");
                Data::F32(mid)
            }
            DType::F64 => {
                let (pre, mid, post) = unsafe { bytes.align_to::<f64>() };
                assert!(pre.is_empty() && post.is_empty(), "mapped tensor data is not aligned");
                Data::F64(mid)
            }
        }
    }

    /// The tensor, viewed in place (what a kernel call accepts).
    pub fn view(&self) -> TensorView<'_> {
        TensorView::new(self.spilled.shape.clone(), self.data())
            .expect("the header's shape and data length were checked to agree")
    }

    /// Checks the data's CRC-32 (reads every mapped page).
    pub fn verify(&self) -> Result<()> {
        let computed = crc32fast::hash(self.bytes());
        if computed != self.spilled.crc32 {
            return Err(TensorStoreError::Checksum {
                path: self.spilled.path.display().to_string(),
                what: "the data",
                stored: self.spilled.crc32,
                computed,
            });
        }
        Ok(())
    }
}
