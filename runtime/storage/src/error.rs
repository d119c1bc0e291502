//! Why a `.gfg` file could not be written, opened or read.

use thiserror::Error;

use tiga_runtime::graph::GraphError;
use tiga_runtime::FieldRole;

use crate::format::{FORMAT_MAJOR, FORMAT_MAJOR_ORDERED, FORMAT_MAJOR_V1};
use crate::invariants::Violation;

/// Why a `.gfg` file could not be written, opened or read. Every variant
/// names the file.
#[derive(Debug, Error)]
pub enum GfgError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a .gfg file (it does not start with the magic bytes TIGAGFG\\0)")]
    BadMagic { path: String },
    #[error("{path}: .gfg format version {major}.{minor} is not supported: this reader reads major versions {FORMAT_MAJOR_V1}, {FORMAT_MAJOR} and {FORMAT_MAJOR_ORDERED}{hint}", hint = if *.major > FORMAT_MAJOR_ORDERED { " (the file was written by a newer tiga)" } else { "" })]
    UnsupportedVersion { path: String, major: u16, minor: u16 },
    #[error("{path}: truncated: {what} needs the file to be at least {needed} bytes long, but it has {actual}")]
    Truncated { path: String, what: String, needed: u64, actual: u64 },
    #[error("{path}: checksum mismatch in {what}: stored crc32 {stored:08x}, computed {computed:08x} (the file is corrupt)")]
    Checksum { path: String, what: &'static str, stored: u32, computed: u32 },
    #[error("{path}: checksum mismatch in section `{section}`: stored crc32 {stored:08x}, computed {computed:08x} (the file is corrupt)")]
    SectionChecksum { path: String, section: String, stored: u32, computed: u32 },
    /// A version 2 block whose bytes do not match its stored CRC-32: what a
    /// paged run reports when the block it is about to read is corrupt.
    #[error("{path}: checksum mismatch in section `{section}`, block {block} (bytes {start}..{end} of the file): stored crc32 {stored:08x}, computed {computed:08x} (the file is corrupt)")]
    BlockChecksum { path: String, section: String, block: u64, start: u64, end: u64, stored: u32, computed: u32 },
    /// Section contents that break an invariant of the format (checksums
    /// can be right and the contents still wrong: a buggy writer, or an
    /// edit that recomputed them).
    #[error("{path}: {violation}")]
    Invariant {
        path: String,
        #[source]
        violation: Violation,
    },
    #[error("{path}: the manifest contradicts the file: {message}")]
    Manifest { path: String, message: String },
    #[error("{path}: has no section `{section}`")]
    MissingSection { path: String, section: String },
    #[error("{path}: has no {role} field `{name}` ({available})")]
    MissingField { path: String, role: FieldRole, name: String, available: String },
    #[error("{path}: section `{section}` is corrupt: {message}")]
    Corrupt { path: String, section: String, message: String },
    #[error("{path}: the stored graph is invalid: {source}")]
    Graph {
        path: String,
        #[source]
        source: GraphError,
    },
    #[error("{path}: cannot save {role} field `{name}`: {message}")]
    BadField { path: String, role: FieldRole, name: String, message: String },
    #[error("{path}: rows {start}..{end} are out of range for {what} with {len} rows")]
    RowsOutOfRange { path: String, what: String, start: usize, end: usize, len: usize },
    #[error("cannot write a graph in a node order: {0}")]
    Renumber(#[source] Box<tiga_runtime::RenumberError>),
    #[error("{path}: cannot write section `{section}`: {message}")]
    Write { path: String, section: String, message: String },
    #[error("{path}: {message}")]
    Build { path: String, message: String },
    #[error("{path}: .gfg sections are little-endian and read in place; this big-endian target cannot read them")]
    BigEndian { path: String },
}

impl GfgError {
    /// The section a checksum or content error is about, if any: what
    /// `verify` names.
    pub fn section(&self) -> Option<&str> {
        match self {
            GfgError::SectionChecksum { section, .. }
            | GfgError::BlockChecksum { section, .. }
            | GfgError::Corrupt { section, .. }
            | GfgError::MissingSection { section, .. } => Some(section),
            GfgError::Invariant { violation, .. } => Some(violation.section),
            _ => None,
        }
    }
}
