//! Storage: graphs and fields that live on disk, in the `.gfg` format,
//! and the files users bring (`.npy` arrays in [`npy`], edge lists and
//! Matrix Market in [`io`]).
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
mod error;
mod external;
mod format;
mod invariants;
pub mod io;
pub mod npy;
pub mod offload;
mod pages;
mod reader;
mod realization;
pub mod scope;
mod snapshot;
mod stream;
pub mod tensor_store;
mod user_order;
mod writer;

pub use error::GfgError;
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

pub use io::{parse_edge_list, parse_matrix_market, read_edge_list, read_edge_list_with, read_matrix_market, EdgeListOptions};
pub use npy::{
    encode_npy, encode_npy_ids, npy_layout, parse_npy, parse_npy_ids, read_npy, read_npy_array, read_npy_ids, write_npy,
    write_npy_array, write_npy_ids, NpyArray, NpyError, NpyFile, NpyLayout, NpyWriter,
};
pub use pages::GfgPages;
pub use tiga_runtime::FieldRole;
pub use user_order::UserOrderFile;
