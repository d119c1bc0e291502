//! Writing `.gfg` files, crash-safely.
//!
//! The file is written to a temporary file in the destination's directory
//! (`.NAME.XXXXXX.tmp`), in one pass: the header's place is reserved, each
//! section is streamed to its aligned offset while its CRC-32 and its
//! blocks' CRC-32s (format version 2) are computed,
//! the manifest is appended, and the header is written last. The temporary
//! file is then fsynced, renamed over the destination (atomic on POSIX file
//! systems) and the directory is fsynced. Until the rename the destination is
//! untouched; after it, the destination is the whole new file.
//!
//! [`GfgWriter::write_pending`] stops before the rename and hands back a
//! [`PendingGfg`]: committing it finishes the save, dropping it removes the
//! temporary file and leaves the destination as it was.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use tiga_runtime::graph::Graph;
use tiga_runtime::tensor::{Data, TensorView};

use crate::blocks::BlockWriter;
use crate::error::GfgError;
use crate::format::{
    encode_manifest, BlockCrcs, ElemType, Header, Manifest, SectionInfo, BLOCK_LOG2, COL_WIDTH, EDGE_ID_WIDTH, FORMAT_MAJOR,
    FORMAT_MAJOR_ORDERED, FORMAT_MAJOR_V1, FORMAT_MINOR, HEADER_LEN, NODE_ORDER, NODE_ORDER_METHOD, OFFSET_WIDTH, SECTION_ALIGN,
};
use tiga_runtime::renumber::{RenumberError, Renumbered};
use tiga_runtime::tensor::Tensor;
use tiga_runtime::FieldRole;

/// Saves `graph` (with its transpose when `with_transpose`, for a backward
/// pass read from disk) and `fields` to `path`, replacing any file there
/// atomically. Edge fields are in the user's edge order, as for a kernel
/// call.
pub fn save_gfg(
    path: impl AsRef<Path>,
    graph: &Graph,
    with_transpose: bool,
    fields: &[(FieldRole, &str, TensorView<'_>)],
) -> Result<(), GfgError> {
    let mut w = GfgWriter::new(graph).with_transpose(with_transpose);
    for (role, name, view) in fields {
        w = w.field(*role, *name, view.clone());
    }
    w.save(path)
}

/// A `.gfg` file to be written: a graph, whether to store its transpose,
/// and named fields. Checked when written.
#[derive(Debug, Clone)]
pub struct GfgWriter<'a> {
    graph: &'a Graph,
    transpose: bool,
    fields: Vec<(FieldRole, String, TensorView<'a>)>,
    /// The format's major version to write ([`FORMAT_MAJOR`] unless a test
    /// or a benchmark asks for version 1; [`FORMAT_MAJOR_ORDERED`] with a
    /// node order).
    major: u16,
    /// Written in a node order: the caller's graph and its renumbering
    /// (`graph` is then the renumbered CSR).
    order: Option<(&'a Graph, &'a Renumbered)>,
}

/// A fully written and fsynced temporary file that has not yet replaced the
/// destination. Dropping it removes the temporary file.
#[derive(Debug)]
pub struct PendingGfg {
    tmp: tempfile::NamedTempFile,
    path: PathBuf,
}

impl PendingGfg {
    pub(super) fn new(tmp: tempfile::NamedTempFile, path: PathBuf) -> PendingGfg {
        PendingGfg { tmp, path }
    }

    /// Where the temporary file is.
    pub fn temp_path(&self) -> &Path {
        self.tmp.path()
    }

    /// The destination it will replace.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the temporary file over the destination and makes the rename
    /// durable.
    pub fn commit(self) -> Result<(), GfgError> {
        let name = self.path.display().to_string();
        self.tmp.persist(&self.path).map_err(|e| GfgError::Io { path: name, source: e.error })?;
        // Make the rename itself durable where the platform allows; some
        // file systems refuse to sync a directory, which does not undo it.
        #[cfg(unix)]
        if let Ok(d) = File::open(parent_dir(&self.path)) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    /// Leaves the temporary file on disk and forgets it, as a process killed
    /// at this point would; returns its path. For crash tests.
    #[doc(hidden)]
    pub fn abandon(self) -> Result<PathBuf, GfgError> {
        let name = self.path.display().to_string();
        self.tmp.into_temp_path().keep().map_err(|e| GfgError::Io { path: name, source: e.error })
    }
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// The source of one section's elements.
enum Elems<'a> {
    U32(&'a [u32]),
    U64(&'a [u64]),
    F32(&'a [f32]),
    F64(&'a [f64]),
}

impl Elems<'_> {
    fn elem(&self) -> ElemType {
        match self {
            Elems::U32(_) => ElemType::U32,
            Elems::U64(_) => ElemType::U64,
            Elems::F32(_) => ElemType::F32,
            Elems::F64(_) => ElemType::F64,
        }
    }
}

/// Streams `data` as little-endian bytes, returning (bytes, crc32, block
/// crc32s).
fn write_elems<W: Write>(w: &mut W, data: &Elems<'_>) -> std::io::Result<(u64, u32, Vec<u32>)> {
    // Convert in chunks: portable (no reinterpretation of memory), and the
    // buffer stays small however large the section.
    const CHUNK: usize = 16 * 1024;
    fn put<W: Write, T: Copy, const N: usize>(
        w: &mut W,
        data: &[T],
        bytes: impl Fn(T) -> [u8; N],
    ) -> std::io::Result<(u64, u32, Vec<u32>)> {
        let mut crcs = BlockCrcs::new(BLOCK_LOG2);
        let mut buf = Vec::with_capacity(CHUNK * N);
        for chunk in data.chunks(CHUNK) {
            buf.clear();
            for &x in chunk {
                buf.extend_from_slice(&bytes(x));
            }
            crcs.update(&buf);
            w.write_all(&buf)?;
        }
        let (crc, blocks) = crcs.finish();
        Ok(((data.len() * N) as u64, crc, blocks))
    }
    match data {
        Elems::U32(d) => put(w, d, u32::to_le_bytes),
        Elems::U64(d) => put(w, d, u64::to_le_bytes),
        Elems::F32(d) => put(w, d, f32::to_le_bytes),
        Elems::F64(d) => put(w, d, f64::to_le_bytes),
    }
}

/// A writer that fails after `left` bytes: the failpoint of crash tests.
struct Budget<W> {
    inner: W,
    left: Option<u64>,
}

impl<W: Write> Write for Budget<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = match self.left {
            None => buf.len(),
            Some(0) => return Err(std::io::Error::new(std::io::ErrorKind::Interrupted, "simulated crash")),
            Some(left) => buf.len().min(usize::try_from(left).unwrap_or(usize::MAX)),
        };
        let n = self.inner.write(&buf[..n])?;
        if let Some(left) = &mut self.left {
            *left -= n as u64;
        }
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl<W: Seek> Seek for Budget<W> {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.inner.seek(pos)
    }
}

/// `write_all` that does not retry `Interrupted` (the failpoint's error).
fn write_bytes<W: Write>(w: &mut W, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        let n = w.write(buf)?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n..];
    }
    Ok(())
}

/// Adapts a writer so that `write_all` inside `write_elems` stops at the
/// failpoint instead of retrying it.
struct NoRetry<'w, W>(&'w mut W);

impl<W: Write> Write for NoRetry<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        write_bytes(self.0, buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl<'a> GfgWriter<'a> {
    pub fn new(graph: &'a Graph) -> GfgWriter<'a> {
        GfgWriter { graph, transpose: false, fields: Vec::new(), major: FORMAT_MAJOR, order: None }
    }

    /// `base` written in the numbering of `renumbered` (built from `base`,
    /// [`Graph::renumbered`]): the renumbered CSR (each row's edges in their
    /// old order, the caller's edge ids), the renumbered *old* transpose,
    /// the order (format version 3), and node fields moved into the new
    /// numbering as they are written (given in the caller's). A paged call
    /// over the file takes and gives fields in the caller's numbering, with
    /// the bits of a call over `base`.
    pub fn renumbered(base: &'a Graph, renumbered: &'a Renumbered) -> Result<GfgWriter<'a>, GfgError> {
        let renumber = |e: RenumberError| GfgError::Renumber(Box::new(e));
        let graph = renumbered.forward().ok_or_else(|| renumber(RenumberError::StoredLayout))?;
        if (graph.num_src(), graph.num_dst(), graph.num_edges()) != (base.num_src(), base.num_dst(), base.num_edges()) {
            return Err(renumber(RenumberError::OtherGraph {
                made_for: (graph.num_src(), graph.num_dst(), graph.num_edges()),
                given: (base.num_src(), base.num_dst(), base.num_edges()),
            }));
        }
        Ok(GfgWriter {
            graph,
            transpose: false,
            fields: Vec::new(),
            major: FORMAT_MAJOR_ORDERED,
            order: Some((base, renumbered)),
        })
    }

    /// Writes format version 1 (whole-section checksums, no block table):
    /// for tests that version 1 files keep loading, and for benchmarks
    /// that measure what the block checks cost.
    /// A writer in a node order stays at version 3 (version 1 has no
    /// node order).
    #[doc(hidden)]
    pub fn version_1(mut self) -> GfgWriter<'a> {
        if self.order.is_none() {
            self.major = FORMAT_MAJOR_V1;
        }
        self
    }

    /// Also store the transposed CSR (`t_offsets`, `t_cols`, `t_edge_ids`),
    /// which a backward pass over a file needs.
    pub fn with_transpose(mut self, yes: bool) -> GfgWriter<'a> {
        self.transpose = yes;
        self
    }

    /// Adds a field: `[N]` or `[N, F]` rows of f32 or f64, where `N` is the
    /// source, destination or edge count (edges in the user's order).
    pub fn field(mut self, role: FieldRole, name: impl Into<String>, data: impl Into<TensorView<'a>>) -> GfgWriter<'a> {
        self.fields.push((role, name.into(), data.into()));
        self
    }

    /// Writes and atomically replaces `path`.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), GfgError> {
        self.write_pending(path)?.commit()
    }

    /// Writes the whole file to a fsynced temporary file beside `path`,
    /// without replacing `path` yet.
    pub fn write_pending(&self, path: impl AsRef<Path>) -> Result<PendingGfg, GfgError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let io = |source| GfgError::Io { path: name.clone(), source };
        self.check_fields(&name)?;
        let tmp = create_temp(path).map_err(io)?;
        self.write_into(tmp.as_file(), None).map_err(io)?;
        finish_temp(tmp.as_file()).map_err(io)?;
        Ok(PendingGfg { tmp, path: path.to_path_buf() })
    }

    /// Simulates a process killed after writing `after_bytes` bytes of the
    /// temporary file: the write stops there, the temporary file is left on
    /// disk and its path returned; the destination is never touched. For
    /// crash tests.
    #[doc(hidden)]
    pub fn write_interrupted(&self, path: impl AsRef<Path>, after_bytes: u64) -> Result<PathBuf, GfgError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let io = |source| GfgError::Io { path: name.clone(), source };
        self.check_fields(&name)?;
        let tmp = create_temp(path).map_err(io)?;
        match self.write_into(tmp.as_file(), Some(after_bytes)) {
            Ok(()) => finish_temp(tmp.as_file()).map_err(io)?,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io(e)),
        }
        tmp.into_temp_path().keep().map_err(|e| io(e.error))
    }

    fn check_fields(&self, name: &str) -> Result<(), GfgError> {
        let g = self.graph;
        for (k, (role, field, view)) in self.fields.iter().enumerate() {
            let bad = |message: String| GfgError::BadField { path: name.to_string(), role: *role, name: field.clone(), message };
            crate::format::check_field_name(field).map_err(bad)?;
            if self.fields[..k].iter().any(|(r, n, _)| r == role && n == field) {
                return Err(bad("it is given twice".into()));
            }
            let (rows, count) = match role {
                FieldRole::Src => (g.num_src(), "num_src"),
                FieldRole::Dst => (g.num_dst(), "num_dst"),
                FieldRole::Edge => (g.num_edges(), "num_edges"),
            };
            if view.field_type().is_half() {
                return Err(bad(format!("it is {}; a .gfg stores f32 and f64 fields", view.field_type())));
            }
            let shape = view.shape();
            if shape.is_empty() || shape.len() > 2 || shape[0] != rows {
                return Err(bad(format!(
                    "its shape is {shape:?}, but a {role} field must have shape [{rows}] or [{rows}, F] ({count} = {rows})"
                )));
            }
        }
        Ok(())
    }

    /// Writes the whole file into `file` (from its start), failing with
    /// `Interrupted` once `budget` bytes are written, if given.
    fn write_into(&self, file: &File, budget: Option<u64>) -> std::io::Result<()> {
        let g = self.graph;
        // Built for the save and dropped after it, rather than cached on the
        // graph: a graph saved to free memory should not grow by a transpose.
        // A renumbered graph's is the renumbered old transpose (kept with
        // its renumbering), so that source gradients keep their bits.
        let t: Option<std::sync::Arc<Graph>> = match (self.transpose, self.order) {
            (false, _) => None,
            (true, None) => Some(std::sync::Arc::new(g.transpose())),
            (true, Some((base, r))) => Some(r.transposed(base).map_err(std::io::Error::other)?),
        };
        // Node fields in the new numbering, moved as they are written.
        let moved: Vec<Option<Tensor>> = self
            .fields
            .iter()
            .map(|(role, _, view)| {
                let order = match (self.order, role) {
                    (Some((_, r)), FieldRole::Dst) => Some(&r.dst),
                    (Some((_, r)), FieldRole::Src) => r.src_order(),
                    _ => None,
                };
                order.map(|o| o.to_new(view)).transpose().map_err(std::io::Error::other)
            })
            .collect::<std::io::Result<_>>()?;
        let method = [self.order.map_or(0, |(_, r)| r.method.code())];
        let e = g.num_edges() as u64;
        let mut plan: Vec<(String, Vec<u64>, Elems<'_>)> = vec![
            ("offsets".into(), vec![g.offsets().len() as u64], Elems::U64(g.offsets())),
            ("cols".into(), vec![e], Elems::U32(g.cols())),
        ];
        if let Some(ids) = g.edge_ids() {
            plan.push(("edge_ids".into(), vec![e], Elems::U64(ids)));
        }
        if let Some(t) = &t {
            plan.push(("t_offsets".into(), vec![t.offsets().len() as u64], Elems::U64(t.offsets())));
            plan.push(("t_cols".into(), vec![e], Elems::U32(t.cols())));
            if let Some(ids) = t.edge_ids() {
                plan.push(("t_edge_ids".into(), vec![e], Elems::U64(ids)));
            }
        }
        if let Some((_, r)) = self.order {
            plan.push((NODE_ORDER.into(), vec![r.dst.len() as u64], Elems::U32(r.dst.perm())));
            plan.push((NODE_ORDER_METHOD.into(), vec![1], Elems::U32(&method)));
        }
        for ((role, field, view), moved) in self.fields.iter().zip(&moved) {
            let view = moved.as_ref().map_or_else(|| view.clone(), Tensor::view);
            let shape = view.shape().iter().map(|&d| d as u64).collect();
            let data = match view.data() {
                Data::F32(d) => Elems::F32(d),
                Data::F64(d) => Elems::F64(d),
                // Refused by `check_fields` before anything is written.
                Data::F16(_) | Data::BF16(_) => {
                    return Err(std::io::Error::other(format!("field `{field}` is half-precision; a .gfg stores f32 and f64")))
                }
            };
            plan.push((role.section_name(field), shape, data));
        }

        let mut w = Budget { inner: BlockWriter::new(file), left: budget };
        let mut out = NoRetry(&mut w);
        // The header's place, rewritten once the manifest is known.
        write_bytes(&mut out, &[0u8; HEADER_LEN])?;
        let mut pos = HEADER_LEN as u64;
        let mut sections = Vec::with_capacity(plan.len());
        for (section, shape, data) in &plan {
            let offset = pos.div_ceil(SECTION_ALIGN) * SECTION_ALIGN;
            write_zeros(&mut out, offset - pos)?;
            let (length, crc32, mut blocks) = write_elems(&mut out, data)?;
            if self.major == FORMAT_MAJOR_V1 {
                blocks.clear();
            }
            pos = offset + length;
            sections.push(SectionInfo {
                name: section.clone(),
                elem: data.elem(),
                shape: shape.clone(),
                offset,
                length,
                crc32,
                blocks,
            });
        }
        let manifest = Manifest {
            major: self.major,
            minor: FORMAT_MINOR,
            num_src: g.num_src() as u64,
            num_dst: g.num_dst() as u64,
            num_edges: e,
            offset_width: OFFSET_WIDTH,
            col_width: COL_WIDTH,
            edge_id_width: EDGE_ID_WIDTH,
            block_log2: BLOCK_LOG2,
            sections,
        };
        let body = encode_manifest(&manifest);
        let header = Header {
            major: self.major,
            minor: FORMAT_MINOR,
            manifest_offset: pos,
            manifest_len: body.len() as u64,
            manifest_crc32: crc32fast::hash(&body),
        };
        write_bytes(&mut out, &body)?;
        w.flush()?;
        w.seek(SeekFrom::Start(0))?;
        write_bytes(&mut w, &header.encode())?;
        w.flush()
    }
}

pub(super) fn create_temp(path: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    tempfile::Builder::new().prefix(&temp_prefix(path)).suffix(".tmp").tempfile_in(parent_dir(path))
}

/// Makes a written temporary file an ordinary, durable file.
pub(super) fn finish_temp(file: &File) -> std::io::Result<()> {
    // Temp files start owner-only; a saved graph is an ordinary file.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
    }
    file.sync_all()
}

/// `.NAME.` for destination `dir/NAME`: temporary files are hidden and
/// recognisably the destination's.
fn temp_prefix(path: &Path) -> String {
    let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    format!(".{file}.")
}

fn write_zeros<W: Write>(w: &mut W, n: u64) -> std::io::Result<()> {
    const ZEROS: [u8; SECTION_ALIGN as usize] = [0; SECTION_ALIGN as usize];
    let mut left = n;
    while left > 0 {
        let k = left.min(ZEROS.len() as u64) as usize;
        w.write_all(&ZEROS[..k])?;
        left -= k as u64;
    }
    Ok(())
}
