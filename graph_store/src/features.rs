//! Feature rows at a storage server: node and edge fields stored in the
//! `.gfg`, or given as `.npy` files, read a row at a time from a memory
//! map so that a server touches only the pages of the rows it is asked
//! for (its own rows: ownership is checked before any read).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;
use thiserror::Error;
use tiga_runtime::{DType, Data, FieldRole, Renumbered};
use tiga_storage::{FieldHandle, GfgError, NpyError};

/// Whether a feature has a row per node or per edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeatureKind {
    Node,
    Edge,
}

impl FeatureKind {
    pub fn name(self) -> &'static str {
        match self {
            FeatureKind::Node => "node",
            FeatureKind::Edge => "edge",
        }
    }

    pub fn parse(s: &str) -> Option<FeatureKind> {
        match s {
            "node" => Some(FeatureKind::Node),
            "edge" => Some(FeatureKind::Edge),
            _ => None,
        }
    }
}

/// The protocol's name of a dtype (`"f32"`, `"f64"`).
pub fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::F64 => "f64",
    }
}

#[derive(Debug, Error)]
pub enum FeatureError {
    #[error("feature {name}: {source}")]
    Npy {
        name: String,
        #[source]
        source: NpyError,
    },
    #[error("feature {name}: {source}")]
    Gfg {
        name: String,
        #[source]
        source: GfgError,
    },
    #[error("feature {name}: {path}: {source}")]
    Io {
        name: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("feature {name}: {path} has shape {shape:?}; a feature is [N] or [N, F] with N = {expected} ({kind}s of the graph)")]
    Shape { name: String, path: PathBuf, shape: Vec<usize>, expected: usize, kind: &'static str },
}

enum Backing {
    /// A field of the graph file; with the file's node order when it has
    /// one (a node's row is then stored at `perm[node]`).
    Stored(FieldHandle, Option<Arc<Renumbered>>),
    /// A mapped `.npy`: rows start at `data_at`.
    Npy { map: Mmap, data_at: usize },
}

/// One feature a server serves (see the module doc).
pub struct Feature {
    pub name: String,
    pub kind: FeatureKind,
    pub dtype: DType,
    /// Values per row.
    pub dim: usize,
    pub num_rows: usize,
    backing: Backing,
}

impl std::fmt::Debug for Feature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feature")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("dtype", &self.dtype)
            .field("dim", &self.dim)
            .field("num_rows", &self.num_rows)
            .finish()
    }
}

impl Feature {
    /// A field stored in the graph file (a source or destination field is
    /// a node feature, an edge field an edge feature). `order` is the
    /// file's node order, if it was written in one: node rows are read at
    /// their stored rows, edge rows (by user edge id) as they are.
    pub fn stored(handle: FieldHandle, order: Option<Arc<Renumbered>>) -> Feature {
        let kind = if handle.role() == FieldRole::Edge { FeatureKind::Edge } else { FeatureKind::Node };
        Feature {
            name: handle.name().to_string(),
            kind,
            dtype: handle.dtype(),
            dim: handle.row_width(),
            num_rows: handle.num_rows(),
            backing: Backing::Stored(handle, order),
        }
    }

    /// A `.npy` file of `rows` rows (the graph's nodes or edges), mapped.
    pub fn npy(name: &str, kind: FeatureKind, path: &Path, rows: usize) -> Result<Feature, FeatureError> {
        let io = |source| FeatureError::Io { name: name.to_string(), path: path.to_path_buf(), source };
        let file = File::open(path).map_err(io)?;
        // SAFETY: the map is read-only and private to this server; a file
        // changed under a running server is outside its contract (as for
        // the `.gfg`, which is replaced by rename, never in place).
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let layout = tiga_storage::npy_layout(&map, &path.display().to_string())
            .map_err(|source| FeatureError::Npy { name: name.to_string(), source })?;
        let dim = match layout.shape[..] {
            [n] if n == rows => 1,
            [n, f] if n == rows => f,
            _ => {
                return Err(FeatureError::Shape {
                    name: name.to_string(),
                    path: path.to_path_buf(),
                    shape: layout.shape,
                    expected: rows,
                    kind: kind.name(),
                })
            }
        };
        Ok(Feature {
            name: name.to_string(),
            kind,
            dtype: layout.dtype,
            dim,
            num_rows: rows,
            backing: Backing::Npy { map, data_at: layout.data_at },
        })
    }

    /// Bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.dim * self.dtype.size()
    }

    /// Appends rows `ids` (each `< num_rows`, checked by the caller) to
    /// `out`, little-endian, in order.
    pub fn append_rows(&self, ids: &[u64], out: &mut Vec<u8>) -> Result<(), FeatureError> {
        let rb = self.row_bytes();
        out.reserve(ids.len() * rb);
        match &self.backing {
            Backing::Npy { map, data_at } => {
                for &i in ids {
                    let at = data_at + i as usize * rb;
                    out.extend_from_slice(&map[at..at + rb]);
                }
            }
            Backing::Stored(h, order) => {
                let perm = order.as_ref().filter(|_| self.kind == FeatureKind::Node).map(|o| o.dst.perm());
                for &i in ids {
                    let i = perm.map_or(i as usize, |p| p[i as usize] as usize);
                    let rows = h.rows(i..i + 1).map_err(|source| FeatureError::Gfg { name: self.name.clone(), source })?;
                    match rows {
                        Data::F32(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
                        Data::F64(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
                        // A `.gfg` stores f32 and f64 fields only; a half
                        // row would go out as its own bytes.
                        Data::F16(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
                        Data::BF16(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
                    }
                }
            }
        }
        Ok(())
    }
}
