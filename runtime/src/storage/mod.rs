//! Storage: graphs and fields that live on disk, in the `.gfg` format.
//!
//! A `.gfg` file holds one graph in CSR by destination (the layout every
//! back end reads), optionally its transpose (for the backward pass), the
//! CSR-position-to-user-edge-index map (so edge fields keep the user's edge
//! order), and named fields by role (`src`, `dst`, `edge`). Every array is a
//! section that starts on a 4096-byte boundary, so it can be memory-mapped
//! and read in place; a manifest at the end of the file, found through a
//! fixed header, describes the sections and is read alone on open. The byte
//! layout is specified in `docs/gfg.md`.
//!
//! This is the first layer of the memory hierarchy: a paged executor streams
//! [`Page`]s (the CSR of a row range) from a [`GfgFile`], and reads fields
//! through [`FieldHandle`]s, without ever materializing the whole graph.
//!
//! Invariants and guarantees:
//! - [`save_gfg`] / [`GfgWriter`] never leave a half-written file under the
//!   final name: they write a temporary file in the same directory, fsync it,
//!   rename it over the destination and fsync the directory. A crash before
//!   the rename leaves the old file intact (and possibly a stray
//!   `.NAME.*.tmp` beside it).
//! - [`GfgFile::open`] reads only the header, the manifest and the two ends
//!   of each row-offset array, verifies the manifest's checksum, and checks
//!   that the manifest agrees with itself and with the file (see
//!   `format::check_manifest`) and that the offsets start at 0 and end at
//!   `num_edges`. A file that passes is safe to map: every section lies
//!   inside the file, apart from the others, with its length equal to its
//!   shape times its element size. Section *contents* are checked before
//!   anything reads them: in a version 2 file every block a reader touches
//!   is checked against its CRC-32 (once per open file); each page's CSR
//!   invariants on its first visit; the edge ids (a permutation) on the
//!   first page that carries them; the stored transpose (that it is the
//!   transpose) on the first transposed page. [`GfgFile::check`] runs every
//!   check and reports each invariant (`tigac info`). The list, and who
//!   checks what when, is in `docs/gfg.md` ("What a reader checks").
//! - No input file makes this module panic; every problem is a [`GfgError`]
//!   naming the file.
//! - Memory maps assume the file is not truncated or rewritten in place while
//!   it is open (the writer never does either: it replaces the file by
//!   rename, which leaves open maps of the old file valid).

mod blocks;
mod external;
mod format;
mod invariants;
mod reader;
mod snapshot;
mod stream;
pub mod tensor_store;
mod writer;

use std::fmt;

use thiserror::Error;

use crate::graph::GraphError;

pub use external::{BuildOptions, BuildPhase, BuildStats, GfgBuilder};
pub use format::{
    ElemType, Manifest, SectionInfo, BLOCK_LOG2, FORMAT_MAJOR, FORMAT_MAJOR_ORDERED, FORMAT_MAJOR_V1, FORMAT_MINOR, HEADER_LEN,
    MAGIC, NODE_ORDER, NODE_ORDER_METHOD, SECTION_ALIGN,
};
pub use invariants::{CheckReport, Checked, Invariant, Violation, PERMUTATION_BITMAP_MAX_EDGES, TRANSPOSE_COUNTS_MAX_SOURCES};
pub use reader::{FieldHandle, FieldInfo, GfgFile, Page};
pub use snapshot::{Snapshot, SNAPSHOT_EXT};
pub use stream::{GfgStreamWriter, SectionPlan, SectionSink, StreamElem};
pub use tensor_store::{tensor_crc32, MappedTensor, SpilledTensor, TensorStore, TensorStoreError};
pub use writer::{save_gfg, GfgWriter, PendingGfg};

/// Which rows a field is indexed by: sources, destinations or edges (in the
/// user's edge order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FieldRole {
    Src,
    Dst,
    Edge,
}

impl FieldRole {
    /// The name used in section names (`field.src.NAME`) and messages.
    pub fn name(self) -> &'static str {
        match self {
            FieldRole::Src => "src",
            FieldRole::Dst => "dst",
            FieldRole::Edge => "edge",
        }
    }

    pub fn parse(s: &str) -> Option<FieldRole> {
        match s {
            "src" => Some(FieldRole::Src),
            "dst" => Some(FieldRole::Dst),
            "edge" => Some(FieldRole::Edge),
            _ => None,
        }
    }

    /// The section name of field `name` in this role.
    pub fn section_name(self, name: &str) -> String {
        format!("field.{}.{name}", self.name())
    }
}

impl fmt::Display for FieldRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

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
    Renumber(#[source] Box<crate::RenumberError>),
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
