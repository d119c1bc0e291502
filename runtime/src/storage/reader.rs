//! Reading `.gfg` files: open reads the header and the manifest only;
//! sections are memory-mapped on first use, one map per section.
//!
//! A [`GfgFile`] is a cheap handle (`Arc` inside) that is `Send + Sync`, so a
//! background reader can prefetch pages while a kernel computes; a
//! [`FieldHandle`] owns its own reference to the file, so it can outlive the
//! `GfgFile` it came from.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use memmap2::{Mmap, MmapOptions};

use crate::graph::Graph;
use crate::tensor::{DType, Data, Tensor, TensorView};

use super::format::{
    check_manifest, decode_header, decode_manifest, parse_field_name, ElemType, Manifest, Problem, SectionInfo, HEADER_LEN,
};
use super::{FieldRole, GfgError};

/// An open `.gfg` file: its manifest, and its sections mapped lazily.
#[derive(Debug, Clone)]
pub struct GfgFile {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    name: String,
    file: File,
    manifest: Manifest,
    index: HashMap<String, usize>,
    /// One lazily made map per section (`None` for an empty section).
    maps: Vec<OnceLock<Option<Mmap>>>,
    /// Pages (side, rows) whose offsets, columns and edge ids have been
    /// checked against the counts. A paged run passes over the same pages
    /// every step; the check reads the page from memory a second time, which
    /// on a memory-bound kernel cost as much as the kernel. A `.gfg` is
    /// replaced by rename, never rewritten in place, so a page checked once
    /// stays valid for the life of this open file (the same trust the
    /// mapping itself needs).
    checked: std::sync::Mutex<std::collections::HashSet<(Side, usize, usize, bool)>>,
}

/// How a mapped byte range will be used (a hint: a kernel that refuses it
/// changes nothing but speed). Mapping a page's pages ahead
/// (`MADV_POPULATE_READ`) was measured slower than letting the kernel's
/// first touches fault them in (a fault maps 16 at once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Advice {
    /// Read soon, cheaply: `WillNeed` unless a sample of the range's pages
    /// (first, middle, last) is already in memory. On a warm page cache
    /// `WillNeed` walks every page of the range for nothing, which on
    /// 100k-row pages of a stencil cost a sixth of the kernel's time.
    ReadAhead,
    /// Done with: drop its pages from this process's resident set; they
    /// are read again from the page cache or the file if touched.
    Done,
}

/// A field stored in a file, as the manifest describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldInfo {
    pub role: FieldRole,
    pub name: String,
    pub dtype: DType,
    /// `[N]` or `[N, F]`.
    pub shape: Vec<usize>,
}

/// The CSR of a contiguous range of destination rows: what a paged executor
/// streams. Every column is `< num_src` and every edge id `< num_edges`
/// (checked when the page is made).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<'a> {
    /// The rows of this page.
    pub rows: Range<usize>,
    /// `rows.len() + 1` absolute CSR positions: row `rows.start + k` has its
    /// edges at positions `offsets[k]..offsets[k + 1]`.
    pub offsets: &'a [u64],
    /// The column (source) of each edge of the page, positions
    /// `offsets[0]..offsets[rows.len()]`.
    pub cols: &'a [u32],
    /// The user's edge index of each edge of the page, aligned with `cols`;
    /// `None` when the file stores none (CSR order is the user's order, so
    /// the id of position `p` is `p`).
    pub edge_ids: Option<&'a [u64]>,
    /// Which CSR of the file the page is from (for [`GfgFile::release_page`]).
    side: Side,
}

impl Page<'_> {
    pub fn num_rows(&self) -> usize {
        self.rows.len()
    }

    pub fn num_edges(&self) -> usize {
        self.cols.len()
    }

    /// The absolute CSR positions of this page's edges.
    pub fn edge_range(&self) -> Range<usize> {
        let first = self.offsets.first().copied().unwrap_or(0) as usize;
        first..first + self.cols.len()
    }

    /// Positions *within this page's* `cols` of the `k`th row of the page.
    ///
    /// # Panics
    /// If `k >= num_rows()`, like slice indexing.
    pub fn local_row(&self, k: usize) -> Range<usize> {
        let base = self.offsets[0];
        (self.offsets[k] - base) as usize..(self.offsets[k + 1] - base) as usize
    }

    /// The user's edge index of the page's `local`th edge.
    ///
    /// # Panics
    /// If `local >= num_edges()`.
    pub fn edge_id(&self, local: usize) -> u64 {
        match self.edge_ids {
            Some(ids) => ids[local],
            None => {
                assert!(local < self.cols.len(), "page edge {local} out of range");
                self.edge_range().start as u64 + local as u64
            }
        }
    }
}

/// Elements a section may be viewed as: every bit pattern is a value.
trait Element: Copy {
    const ELEM: ElemType;
}
impl Element for u32 {
    const ELEM: ElemType = ElemType::U32;
}
impl Element for u64 {
    const ELEM: ElemType = ElemType::U64;
}
impl Element for f32 {
    const ELEM: ElemType = ElemType::F32;
}
impl Element for f64 {
    const ELEM: ElemType = ElemType::F64;
}

/// Which CSR a page or accessor reads: the graph or its transpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Side {
    Forward,
    Transposed,
}

impl Side {
    fn names(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Side::Forward => ("offsets", "cols", "edge_ids"),
            Side::Transposed => ("t_offsets", "t_cols", "t_edge_ids"),
        }
    }
}

pub(super) fn problem(path: &str, file_len: u64, p: Problem) -> GfgError {
    let path = path.to_string();
    match p {
        Problem::BadMagic => GfgError::BadMagic { path },
        Problem::UnsupportedVersion { major, minor } => GfgError::UnsupportedVersion { path, major, minor },
        Problem::Truncated { what, needed } => GfgError::Truncated { path, what, needed, actual: file_len },
        Problem::Checksum { what, stored, computed } => GfgError::Checksum { path, what, stored, computed },
        Problem::Manifest(message) => GfgError::Manifest { path, message },
    }
}

impl GfgFile {
    /// Opens `path`, reading only the header and the manifest, and checks
    /// that the manifest agrees with the file. Sections are not read.
    pub fn open(path: impl AsRef<Path>) -> Result<GfgFile, GfgError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        if cfg!(target_endian = "big") {
            return Err(GfgError::BigEndian { path: name });
        }
        let io = |source| GfgError::Io { path: name.clone(), source };
        let mut file = File::open(path).map_err(io)?;
        let file_len = file.metadata().map_err(io)?.len();
        let head_len = file_len.min(HEADER_LEN as u64) as usize;
        let mut head = vec![0u8; head_len];
        file.read_exact(&mut head).map_err(io)?;
        let header = decode_header(&head, file_len).map_err(|p| problem(&name, file_len, p))?;
        // `decode_header` bounded the manifest by the file and by
        // MAX_MANIFEST_LEN, so this allocation is bounded too.
        let mut body = vec![0u8; header.manifest_len as usize];
        file.seek(SeekFrom::Start(header.manifest_offset)).map_err(io)?;
        file.read_exact(&mut body).map_err(io)?;
        let computed = crc32fast::hash(&body);
        if computed != header.manifest_crc32 {
            return Err(GfgError::Checksum { path: name, what: "the manifest", stored: header.manifest_crc32, computed });
        }
        let manifest = decode_manifest(&body, &header).map_err(|p| problem(&name, file_len, p))?;
        check_manifest(&manifest, &header, file_len).map_err(|p| problem(&name, file_len, p))?;
        let index = manifest.sections.iter().enumerate().map(|(k, s)| (s.name.clone(), k)).collect();
        let maps = manifest.sections.iter().map(|_| OnceLock::new()).collect();
        Ok(GfgFile {
            inner: Arc::new(Inner { path: path.to_path_buf(), name, file, manifest, index, maps, checked: Default::default() }),
        })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    pub fn manifest(&self) -> &Manifest {
        &self.inner.manifest
    }

    /// The file's format version (major, minor).
    pub fn version(&self) -> (u16, u16) {
        (self.inner.manifest.major, self.inner.manifest.minor)
    }

    pub fn num_src(&self) -> usize {
        self.inner.manifest.num_src as usize
    }

    pub fn num_dst(&self) -> usize {
        self.inner.manifest.num_dst as usize
    }

    pub fn num_edges(&self) -> usize {
        self.inner.manifest.num_edges as usize
    }

    pub fn sections(&self) -> &[SectionInfo] {
        &self.inner.manifest.sections
    }

    pub fn has_edge_ids(&self) -> bool {
        self.inner.index.contains_key("edge_ids")
    }

    pub fn has_transpose(&self) -> bool {
        self.inner.index.contains_key("t_offsets")
    }

    /// The stored fields, in file order.
    pub fn fields(&self) -> Vec<FieldInfo> {
        self.inner
            .manifest
            .sections
            .iter()
            .filter_map(|s| {
                let (role, name) = parse_field_name(&s.name)?.ok()?;
                Some(FieldInfo {
                    role,
                    name: name.to_string(),
                    dtype: s.elem.dtype()?,
                    shape: s.shape.iter().map(|&d| d as usize).collect(),
                })
            })
            .collect()
    }

    /// Checks every section's CRC-32; the error names the first section that
    /// fails.
    pub fn verify(&self) -> Result<(), GfgError> {
        for s in &self.inner.manifest.sections {
            self.verify_section(&s.name)?;
        }
        Ok(())
    }

    /// Checks one section's CRC-32.
    pub fn verify_section(&self, name: &str) -> Result<(), GfgError> {
        let k = self.inner.section_index(name)?;
        self.inner.verify(k)
    }

    /// Checks everything: checksums, then the contents: both CSRs' invariants
    /// (offsets from 0, non-decreasing, ending at `num_edges`; columns in
    /// range; edge ids a permutation), and that the stored transpose has
    /// exactly the reversed edges with the same edge ids. Materializes the
    /// graph (and its transpose) in memory to do so.
    pub fn validate(&self) -> Result<(), GfgError> {
        self.verify()?;
        let g = self.load_graph()?;
        if let Some(t) = self.load_transposed()? {
            let (src, dst) = g.coo_in_user_order();
            if t.coo_in_user_order() != (dst, src) {
                return Err(self.inner.corrupt(
                    "t_cols",
                    "the transposed CSR does not hold the reversed edges of the graph with the same edge ids".into(),
                ));
            }
        }
        Ok(())
    }

    /// The row offsets (`num_dst + 1`), mapped.
    pub fn offsets(&self) -> Result<&[u64], GfgError> {
        self.inner.typed("offsets")
    }

    /// The column indices (`num_edges`), mapped.
    pub fn cols(&self) -> Result<&[u32], GfgError> {
        self.inner.typed("cols")
    }

    /// CSR position to the user's edge index; `None` when CSR order is the
    /// user's order.
    pub fn edge_ids(&self) -> Result<Option<&[u64]>, GfgError> {
        self.inner.typed_opt("edge_ids")
    }

    /// The transposed CSR's row offsets (`num_src + 1`), if stored.
    pub fn t_offsets(&self) -> Result<Option<&[u64]>, GfgError> {
        self.inner.typed_opt("t_offsets")
    }

    pub fn t_cols(&self) -> Result<Option<&[u32]>, GfgError> {
        self.inner.typed_opt("t_cols")
    }

    /// The transposed CSR's positions to user edge indices; `None` when not
    /// stored (no transpose, or its order is the user's order).
    pub fn t_edge_ids(&self) -> Result<Option<&[u64]>, GfgError> {
        self.inner.typed_opt("t_edge_ids")
    }

    /// A handle on field `name` of `role`; nothing is read until its data is.
    pub fn field(&self, role: FieldRole, name: &str) -> Result<FieldHandle, GfgError> {
        let section = role.section_name(name);
        let Some(&index) = self.inner.index.get(&section) else {
            let mut names: Vec<String> = self.fields().into_iter().filter(|f| f.role == role).map(|f| f.name).collect();
            names.sort();
            let available = if names.is_empty() {
                format!("the file has no {role} fields")
            } else {
                format!("its {role} fields are: {}", names.join(", "))
            };
            return Err(GfgError::MissingField { path: self.inner.name.clone(), role, name: name.to_string(), available });
        };
        let s = &self.inner.manifest.sections[index];
        let dtype = s.elem.dtype().ok_or_else(|| self.inner.corrupt(&section, "not a float section".into()))?;
        let shape: Vec<usize> = s.shape.iter().map(|&d| d as usize).collect();
        Ok(FieldHandle { file: self.inner.clone(), index, role, name: name.to_string(), dtype, shape })
    }

    /// Reads the whole graph into memory (checking every CSR invariant).
    pub fn load_graph(&self) -> Result<Graph, GfgError> {
        self.inner.load(Side::Forward)
    }

    /// Reads the stored transpose into memory, if the file has one.
    pub fn load_transposed(&self) -> Result<Option<Graph>, GfgError> {
        if !self.has_transpose() {
            return Ok(None);
        }
        self.inner.load(Side::Transposed).map(Some)
    }

    /// The CSR of destination rows `rows`.
    pub fn page(&self, rows: Range<usize>) -> Result<Page<'_>, GfgError> {
        self.inner.page(Side::Forward, rows, true)
    }

    /// The transposed CSR of `rows` (source nodes, the transpose's
    /// destinations): what a paged backward streams. An error if the file
    /// has no transpose.
    pub fn transposed_page(&self, rows: Range<usize>) -> Result<Page<'_>, GfgError> {
        self.inner.page(Side::Transposed, rows, true)
    }

    /// [`GfgFile::page`] (or, `transposed`, [`GfgFile::transposed_page`])
    /// without the edge ids, which are then neither read nor checked (the
    /// page's `edge_ids` is `None`): for a kernel with no edge fields or
    /// outputs, which never looks at them. Edge ids are 8 bytes per edge,
    /// twice the column indices.
    pub fn page_without_ids(&self, rows: Range<usize>, transposed: bool) -> Result<Page<'_>, GfgError> {
        self.inner.page(if transposed { Side::Transposed } else { Side::Forward }, rows, false)
    }

    /// Drop a page's adjacency from the process's resident set once it has
    /// been used (its views stay valid: what is touched again is read back).
    /// A paged run releases each page after its rows are computed, so its
    /// resident memory is the pages in flight, not the pages passed.
    pub fn release_page(&self, page: &Page<'_>) {
        self.inner.release(page);
    }

    /// Drop every mapped page of the adjacency (both CSRs, edge ids) from
    /// the resident set: the end of a paged run, which leaves behind at most
    /// what its last page's faults mapped past its end.
    pub fn release_adjacency(&self) {
        for side in [Side::Forward, Side::Transposed] {
            let (o, c, e) = side.names();
            for name in [o, c, e] {
                if let Ok(k) = self.inner.section_index(name) {
                    self.inner.advise(k, 0..usize::MAX, Advice::Done);
                }
            }
        }
    }
}

/// How far below a released page the release reaches (see `Inner::release`).
const RELEASE_MARGIN: usize = 2 << 20;

/// Whether the OS pages holding the first, middle and last byte of
/// `map[start..start + len]` are in memory (`mincore`).
fn sample_resident(map: &Mmap, start: usize, len: usize) -> bool {
    let page = crate::tensor::os_page_size();
    let base = map.as_ptr() as usize;
    [start, start + len / 2, start + len.saturating_sub(1)].iter().all(|&off| {
        let addr = (base + off) / page * page;
        let mut vec = 0u8;
        // SAFETY: `addr` is the page-aligned start of a page of this live
        // mapping (`off < map.len()`); `vec` holds the one byte that a
        // one-page query writes.
        let r = unsafe { libc::mincore(addr as *mut libc::c_void, 1, &mut vec) };
        r == 0 && vec & 1 == 1
    })
}

impl Inner {
    fn corrupt(&self, section: &str, message: String) -> GfgError {
        GfgError::Corrupt { path: self.name.clone(), section: section.to_string(), message }
    }

    fn release(&self, page: &Page<'_>) {
        let (o, c, e) = page.side.names();
        let span = page.edge_range();
        let rows = page.rows.clone();
        // From 2 MiB below the page: a fault maps around the address it
        // touches (64 KiB of small pages, or a whole 2 MiB folio with one
        // entry), so the next page's first touches map the tail of this one
        // again; releasing each page with this margin unmaps what the pages
        // after it mapped below their start.
        let below = |at: usize| at.saturating_sub(RELEASE_MARGIN);
        for (name, bytes) in [
            (o, below(rows.start * 8)..(rows.end + 1) * 8),
            (c, below(span.start * 4)..span.end * 4),
            (e, below(span.start * 8)..span.end * 8),
        ] {
            if let Ok(k) = self.section_index(name) {
                self.advise(k, bytes, Advice::Done);
            }
        }
    }

    fn advise(&self, k: usize, bytes: std::ops::Range<usize>, advice: Advice) {
        let Some(Some(map)) = self.maps[k].get() else { return };
        let end = bytes.end.min(map.len());
        if bytes.start >= end {
            return;
        }
        let len = end - bytes.start;
        let r = match advice {
            Advice::ReadAhead if sample_resident(map, bytes.start, len) => Ok(()),
            Advice::ReadAhead => map.advise_range(memmap2::Advice::WillNeed, bytes.start, len),
            // SAFETY: the map is a read-only, shared file mapping: dropping
            // its pages loses nothing (they are reloaded from the file), and
            // whoever still reads them faults them back in.
            Advice::Done => unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, bytes.start, len) },
        };
        // Advice is a hint; a kernel that refuses it changes nothing.
        let _ = r;
    }

    fn section_index(&self, name: &str) -> Result<usize, GfgError> {
        self.index
            .get(name)
            .copied()
            .ok_or_else(|| GfgError::MissingSection { path: self.name.clone(), section: name.to_string() })
    }

    /// The bytes of section `k`, mapping it on first use.
    fn bytes(&self, k: usize) -> Result<&[u8], GfgError> {
        let cell = &self.maps[k];
        if cell.get().is_none() {
            let s = &self.manifest.sections[k];
            let map = if s.length == 0 {
                None
            } else {
                let io = |source| GfgError::Io { path: self.name.clone(), source };
                // Refuse to map past a file that shrank since open (a read of
                // such a map would fault rather than fail).
                let len = self.file.metadata().map_err(io)?.len();
                let end = s.offset + s.length;
                if end > len {
                    return Err(GfgError::Truncated {
                        path: self.name.clone(),
                        what: format!("section `{}`", s.name),
                        needed: end,
                        actual: len,
                    });
                }
                // SAFETY: the map is read-only and lies inside the file
                // (checked just above and at open). Like every file map, it
                // relies on the file not being truncated or rewritten in
                // place while mapped; the module doc states that contract
                // and the writer keeps it (it replaces files by rename).
                let map = unsafe { MmapOptions::new().offset(s.offset).len(s.length as usize).map(&self.file) }.map_err(io)?;
                Some(map)
            };
            // A racing thread may have set it first; either map is the same.
            let _ = cell.set(map);
        }
        Ok(cell.get().and_then(|m| m.as_deref()).unwrap_or(&[]))
    }

    /// Section `k` as elements of `T` (its element type, checked at open).
    fn cast<T: Element>(&self, k: usize) -> Result<&[T], GfgError> {
        let s = &self.manifest.sections[k];
        if s.elem != T::ELEM {
            return Err(self.corrupt(&s.name, format!("holds {}, not {}", s.elem, T::ELEM)));
        }
        let bytes = self.bytes(k)?;
        if bytes.is_empty() {
            return Ok(&[]);
        }
        // SAFETY: `T` is one of u32, u64, f32, f64, for which every bit
        // pattern is a valid value; `align_to` only returns a middle part that
        // is correctly aligned for `T`, and we use it only when it covers all
        // bytes. Maps start on page boundaries, so it always does. The file
        // is little-endian, and `open` refuses big-endian targets.
        let (pre, mid, post) = unsafe { bytes.align_to::<T>() };
        if !pre.is_empty() || !post.is_empty() {
            return Err(self.corrupt(&s.name, "its map is not aligned for its element type".into()));
        }
        Ok(mid)
    }

    fn typed<T: Element>(&self, name: &str) -> Result<&[T], GfgError> {
        let k = self.section_index(name)?;
        self.cast(k)
    }

    fn typed_opt<T: Element>(&self, name: &str) -> Result<Option<&[T]>, GfgError> {
        match self.index.get(name) {
            Some(&k) => self.cast(k).map(Some),
            None => Ok(None),
        }
    }

    fn verify(&self, k: usize) -> Result<(), GfgError> {
        let s = &self.manifest.sections[k];
        let computed = crc32fast::hash(self.bytes(k)?);
        if computed != s.crc32 {
            return Err(GfgError::SectionChecksum {
                path: self.name.clone(),
                section: s.name.clone(),
                stored: s.crc32,
                computed,
            });
        }
        Ok(())
    }

    fn counts(&self, side: Side) -> (usize, usize) {
        let m = &self.manifest;
        match side {
            Side::Forward => (m.num_src as usize, m.num_dst as usize),
            Side::Transposed => (m.num_dst as usize, m.num_src as usize),
        }
    }

    fn load(&self, side: Side) -> Result<Graph, GfgError> {
        let (o, c, e) = side.names();
        let (num_src, num_dst) = self.counts(side);
        let offsets = self.typed::<u64>(o)?.to_vec();
        let cols = self.typed::<u32>(c)?.to_vec();
        let ids = self.typed_opt::<u64>(e)?.map(<[u64]>::to_vec);
        Graph::from_csr_with_edge_ids(num_src, num_dst, offsets, cols, ids)
            .map_err(|source| GfgError::Graph { path: self.name.clone(), source })
    }

    fn page(&self, side: Side, rows: Range<usize>, with_ids: bool) -> Result<Page<'_>, GfgError> {
        let (o, c, e) = side.names();
        let (num_src, num_dst) = self.counts(side);
        if rows.start > rows.end || rows.end > num_dst {
            return Err(GfgError::RowsOutOfRange {
                path: self.name.clone(),
                what: format!("`{o}`"),
                start: rows.start,
                end: rows.end,
                len: num_dst,
            });
        }
        let (ko, kc) = (self.section_index(o)?, self.section_index(c)?);
        let ke = if with_ids { self.index.get(e).copied() } else { None };
        // Start reading what is not in memory; the checks below (first
        // visit) or the kernel (later visits) fault the pages in.
        self.advise(ko, rows.start * 8..(rows.end + 1) * 8, Advice::ReadAhead);
        let all = self.typed::<u64>(o)?;
        let offsets = &all[rows.start..=rows.end];
        let num_edges = self.manifest.num_edges;
        // Checked with its ids covers a visit without them.
        let key = (side, rows.start, rows.end, with_ids);
        let checked =
            self.checked.lock().map(|c| c.contains(&key) || c.contains(&(side, rows.start, rows.end, true))).unwrap_or(false);
        if !checked {
            for (k, w) in offsets.windows(2).enumerate() {
                if w[1] < w[0] {
                    let i = rows.start + k + 1;
                    return Err(self.corrupt(o, format!("offsets decrease at row {i}: {} > {}", w[0], w[1])));
                }
            }
        }
        let (first, last) = (offsets[0], offsets[offsets.len() - 1]);
        if last > num_edges {
            return Err(self.corrupt(o, format!("offsets[{}] = {last} exceeds num_edges = {num_edges}", rows.end)));
        }
        let span = first as usize..last as usize;
        self.advise(kc, span.start * 4..span.end * 4, Advice::ReadAhead);
        if let Some(ke) = ke {
            self.advise(ke, span.start * 8..span.end * 8, Advice::ReadAhead);
        }
        let cols = &self.typed::<u32>(c)?[span.clone()];
        let edge_ids = if with_ids { self.typed_opt::<u64>(e)?.map(|ids| &ids[span.clone()]) } else { None };
        if checked {
            return Ok(Page { rows, offsets, cols, edge_ids, side });
        }
        // A maximum first (it vectorizes); the search only names the culprit.
        if !cols.is_empty() && cols.iter().fold(0u32, |m, &s| m.max(s)) as usize >= num_src {
            if let Some(p) = cols.iter().position(|&s| s as usize >= num_src) {
                return Err(
                    self.corrupt(c, format!("{c}[{}] = {} is out of range for {num_src} sources", span.start + p, cols[p]))
                );
            }
        }
        if let Some(ids) = edge_ids {
            if !ids.is_empty() && ids.iter().fold(0u64, |m, &id| m.max(id)) >= num_edges {
                if let Some(p) = ids.iter().position(|&id| id >= num_edges) {
                    return Err(
                        self.corrupt(e, format!("{e}[{}] = {} is out of range for {num_edges} edges", span.start + p, ids[p]))
                    );
                }
            }
        }
        if let Ok(mut c) = self.checked.lock() {
            c.insert(key);
        }
        // The checks mapped the whole page; unmap it again (it stays in the
        // page cache) so that a page read ahead is not resident before its
        // turn: a paged run then holds one page's mapping, not depth + 1.
        let page = Page { rows, offsets, cols, edge_ids, side };
        self.release(&page);
        Ok(page)
    }
}

/// A field in a file, read lazily: the section is mapped on first access and
/// rows are viewed in place.
#[derive(Debug, Clone)]
pub struct FieldHandle {
    file: Arc<Inner>,
    index: usize,
    role: FieldRole,
    name: String,
    dtype: DType,
    shape: Vec<usize>,
}

impl FieldHandle {
    pub fn role(&self) -> FieldRole {
        self.role
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// `[N]` or `[N, F]`.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn num_rows(&self) -> usize {
        self.shape[0]
    }

    /// Elements per row (`F`, or 1 for `[N]`).
    pub fn row_width(&self) -> usize {
        self.shape.get(1).copied().unwrap_or(1)
    }

    /// The file this field is stored in.
    pub fn path(&self) -> &Path {
        &self.file.path
    }

    /// The elements of rows `rows` (row-major, `rows.len() * row_width()`),
    /// viewed in place.
    pub fn rows(&self, rows: Range<usize>) -> Result<Data<'_>, GfgError> {
        let n = self.num_rows();
        if rows.start > rows.end || rows.end > n {
            return Err(GfgError::RowsOutOfRange {
                path: self.file.name.clone(),
                what: format!("{} field `{}`", self.role, self.name),
                start: rows.start,
                end: rows.end,
                len: n,
            });
        }
        let w = self.row_width();
        let span = rows.start * w..rows.end * w;
        Ok(match self.dtype {
            DType::F32 => Data::F32(&self.file.cast::<f32>(self.index)?[span]),
            DType::F64 => Data::F64(&self.file.cast::<f64>(self.index)?[span]),
        })
    }

    /// The whole field, viewed in place.
    pub fn view(&self) -> Result<TensorView<'_>, GfgError> {
        let data = self.rows(0..self.num_rows())?;
        TensorView::new(self.shape.clone(), data)
            .map_err(|e| self.file.corrupt(&self.file.manifest.sections[self.index].name, e.to_string()))
    }

    /// The whole field, copied into memory.
    pub fn to_tensor(&self) -> Result<Tensor, GfgError> {
        Ok(self.view()?.to_tensor())
    }

    /// Drop this field's pages from the process's resident set (views stay
    /// valid: what they touch again is read back from the page cache or the
    /// file). A paged run does this for the file fields it read, so a field
    /// on disk does not stay resident after the call.
    pub fn release(&self) {
        self.file.advise(self.index, 0..usize::MAX, Advice::Done);
    }

    /// Checks this field's CRC-32.
    pub fn verify(&self) -> Result<(), GfgError> {
        self.file.verify(self.index)
    }
}
