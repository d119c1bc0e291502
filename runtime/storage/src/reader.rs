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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use memmap2::{Mmap, MmapOptions};

use tiga_runtime::graph::Graph;
use tiga_runtime::tensor::{DType, Data, Tensor, TensorView};

use crate::error::GfgError;
use crate::format::{
    check_manifest, decode_header, decode_manifest, parse_field_name, ElemType, Manifest, Problem, SectionInfo, HEADER_LEN,
};
use crate::invariants::{
    cols_in_range, CheckReport, Checked, Invariant, Monotone, Permutation, TripleHash, Violation, PERMUTATION_BITMAP_MAX_EDGES,
    TRANSPOSE_COUNTS_MAX_SOURCES,
};
use tiga_runtime::FieldRole;

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
    checked: Mutex<std::collections::HashSet<(Side, usize, usize, bool)>>,
    /// Version 2: one bit per checksum block of each section, set once the
    /// block matched its CRC-32. A block is hashed the first time anything
    /// reads it and never again for this open file (the trust `checked`
    /// rests on); testing the bits is all a later visit costs.
    verified: Vec<Vec<AtomicU64>>,
    /// Whole-section checks a paged run needs before it reads the data
    /// they protect, each run once per open file (`true` once passed; the
    /// lock also makes a second reader wait for the first one's pass):
    /// forward edge ids a permutation, transposed ones, the transpose the
    /// transpose.
    ids_checked: [Mutex<bool>; 2],
    transpose_checked: Mutex<bool>,
    /// Whether open checked the offsets' ends (else every page does).
    ends_checked: bool,
    /// The stored node order, read and checked on first use.
    node_order: OnceLock<Arc<tiga_runtime::Renumbered>>,
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

    /// This side's invariants: offsets start, end, monotone; columns in
    /// range; edge ids a permutation.
    fn invariants(self) -> [Invariant; 5] {
        use Invariant::*;
        match self {
            Side::Forward => [OffsetsStart, OffsetsEnd, OffsetsMonotone, ColsInRange, EdgeIdsPermutation],
            Side::Transposed => [TOffsetsStart, TOffsetsEnd, TOffsetsMonotone, TColsInRange, TEdgeIdsPermutation],
        }
    }

    fn index(self) -> usize {
        match self {
            Side::Forward => 0,
            Side::Transposed => 1,
        }
    }
}

/// Rows per chunk of a whole-section pass, and ids per chunk: each chunk's
/// blocks are verified, checked and released before the next, so a pass
/// over a file larger than memory holds a chunk of it.
const PASS_ROWS: usize = 1 << 16;
const PASS_IDS: usize = 1 << 17;

/// When open finds a wrong value at element `index` of the u64 section `s`:
/// in a version 2 file, whether the block holding it fails its CRC (then
/// the error is that, the more precise one: the bytes are not the ones
/// written). Read only on this failure path, so open stays four reads.
fn block_at_fault(file: &File, path: &str, m: &Manifest, s: &SectionInfo, index: u64) -> Result<(), GfgError> {
    use std::os::unix::fs::FileExt;
    let Some(size) = m.block_size() else { return Ok(()) };
    let b = index * 8 / size;
    let (lo, hi) = (b * size, ((b + 1) * size).min(s.length));
    let mut bytes = vec![0u8; (hi - lo) as usize];
    file.read_exact_at(&mut bytes, s.offset + lo).map_err(|source| GfgError::Io { path: path.to_string(), source })?;
    let computed = crc32fast::hash(&bytes);
    let stored = s.blocks.get(b as usize).copied().unwrap_or(0);
    if computed != stored {
        return Err(GfgError::BlockChecksum {
            path: path.to_string(),
            section: s.name.clone(),
            block: b,
            start: s.offset + lo,
            end: s.offset + hi,
            stored,
            computed,
        });
    }
    Ok(())
}

/// Element `index` of the u64 section `s`, read with one positioned read
/// (open checks the ends of the offsets without mapping them).
fn read_u64_at(file: &File, s: &SectionInfo, index: u64) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let mut b = [0u8; 8];
    file.read_exact_at(&mut b, s.offset + index * 8)?;
    Ok(u64::from_le_bytes(b))
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
        GfgFile::open_with(path.as_ref(), true)
    }

    /// [`GfgFile::open`] without refusing a file whose row offsets do not
    /// start at 0 or end at `num_edges`, so that `tigac info` can print the
    /// manifest and report those with every other invariant. Pages of such a
    /// file are still refused: each page read checks the ends first.
    pub fn open_for_inspection(path: impl AsRef<Path>) -> Result<GfgFile, GfgError> {
        GfgFile::open_with(path.as_ref(), false)
    }

    fn open_with(path: &Path, check_ends: bool) -> Result<GfgFile, GfgError> {
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
        // The cheap invariants, so that no page of a file whose rows do not
        // cover its edges exactly is ever read: four positioned reads.
        let (m, n_edges) = (&manifest, manifest.num_edges);
        let sides = if check_ends { &[(Side::Forward, m.num_dst), (Side::Transposed, m.num_src)][..] } else { &[] };
        for &(side, rows) in sides {
            let [start, end, ..] = side.invariants();
            let Some(s) = m.section(side.names().0) else { continue };
            let first = read_u64_at(&file, s, 0).map_err(io)?;
            if first != 0 {
                block_at_fault(&file, &name, m, s, 0)?;
                let v = Violation::new(start, Some(0), format!("{}[0] = {first}, not 0", s.name));
                return Err(GfgError::Invariant { path: name, violation: v });
            }
            let last = read_u64_at(&file, s, rows).map_err(io)?;
            if last != n_edges {
                block_at_fault(&file, &name, m, s, rows)?;
                let v = Violation::new(end, Some(rows), format!("{}[{rows}] = {last}, not num_edges = {n_edges}", s.name));
                return Err(GfgError::Invariant { path: name, violation: v });
            }
        }
        let index = manifest.sections.iter().enumerate().map(|(k, s)| (s.name.clone(), k)).collect();
        let maps = manifest.sections.iter().map(|_| OnceLock::new()).collect();
        let verified =
            manifest.sections.iter().map(|s| (0..s.blocks.len().div_ceil(64)).map(|_| AtomicU64::new(0)).collect()).collect();
        Ok(GfgFile {
            inner: Arc::new(Inner {
                path: path.to_path_buf(),
                name,
                file,
                manifest,
                index,
                maps,
                checked: Default::default(),
                verified,
                ends_checked: check_ends,
                ids_checked: Default::default(),
                transpose_checked: Default::default(),
                node_order: OnceLock::new(),
            }),
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

    /// Bytes of each section read so far through this open file, by name:
    /// the blocks verified on first read (version 2 files; a version 1 file
    /// has no blocks and counts nothing). What a sharded rank reads of a
    /// shared file is measured with it.
    pub fn bytes_read(&self) -> Vec<(String, u64)> {
        let m = &self.inner.manifest;
        let Some(size) = m.block_size() else { return Vec::new() };
        m.sections
            .iter()
            .zip(&self.inner.verified)
            .map(|(sec, bits)| {
                let mut n = 0u64;
                for (w, word) in bits.iter().enumerate() {
                    let word = word.load(Ordering::Relaxed);
                    for bit in 0..64u64 {
                        if word & (1 << bit) != 0 {
                            let b = w as u64 * 64 + bit;
                            n += ((b + 1) * size).min(sec.length).saturating_sub(b * size);
                        }
                    }
                }
                (sec.name.clone(), n)
            })
            .collect()
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

    /// Whether the file was written in a node order (format version 3).
    pub fn has_node_order(&self) -> bool {
        self.inner.index.contains_key(crate::format::NODE_ORDER)
    }

    /// The node order the file was written in (`perm[old] = new`; the
    /// sources share it when the graph is square, else keep their ids),
    /// read and checked to be a permutation on first use and kept; `None`
    /// for a file in the caller's numbering. Its CSRs, its transpose and
    /// its node fields are in the new numbering; edge fields and edge ids
    /// stay the caller's.
    pub fn node_order(&self) -> Result<Option<Arc<tiga_runtime::Renumbered>>, GfgError> {
        if let Some(o) = self.inner.node_order.get() {
            return Ok(Some(o.clone()));
        }
        let Some(perm) = self.inner.verified_typed_opt::<u32>(crate::format::NODE_ORDER)? else { return Ok(None) };
        let code = self.inner.verified_typed::<u32>(crate::format::NODE_ORDER_METHOD)?.first().copied().unwrap_or(0);
        let method = tiga_runtime::Renumber::from_code(code).filter(|&m| m != tiga_runtime::Renumber::None).ok_or_else(|| {
            self.inner.corrupt(
                crate::format::NODE_ORDER_METHOD,
                format!("{code} is not a renumbering method (1 degree, 2 rcm, 3 cluster)"),
            )
        })?;
        let order = tiga_runtime::Order::from_perm(perm.to_vec())
            .map_err(|e| self.inner.corrupt(crate::format::NODE_ORDER, e.to_string()))?;
        // Read once into RAM: the mapping can go.
        if let Ok(k) = self.inner.section_index(crate::format::NODE_ORDER) {
            self.inner.advise(k, 0..usize::MAX, Advice::Done);
        }
        let stored = tiga_runtime::Renumbered::stored(method, order, self.num_src() == self.num_dst());
        Ok(Some(self.inner.node_order.get_or_init(|| Arc::new(stored)).clone()))
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

    /// Checks every section's CRC-32 and, in version 2, every block's; the
    /// error names the first section (and block) that fails.
    pub fn verify(&self) -> Result<(), GfgError> {
        for s in &self.inner.manifest.sections {
            self.verify_section(&s.name)?;
        }
        Ok(())
    }

    /// Checks one section's CRC-32 (and, in version 2, its blocks').
    pub fn verify_section(&self, name: &str) -> Result<(), GfgError> {
        let k = self.inner.section_index(name)?;
        self.inner.verify(k)
    }

    /// Checks everything: checksums, then every invariant of the contents
    /// ([`GfgFile::check`]); the error is the first failure. Bounded memory
    /// (see [`GfgFile::check`]).
    pub fn validate(&self) -> Result<(), GfgError> {
        self.verify()?;
        let report = self.check();
        if let Some(v) = report.first_violation() {
            return Err(GfgError::Invariant { path: self.inner.name.clone(), violation: v.clone() });
        }
        if let Some((inv, Checked::NotChecked(why))) = report.results.iter().find(|(_, c)| matches!(c, Checked::NotChecked(_))) {
            return Err(self.inner.corrupt(inv.section(), format!("`{inv}` could not be checked: {why}")));
        }
        Ok(())
    }

    /// Checks every invariant of the contents and reports each one (what
    /// `tigac info` prints): both CSRs' offsets (from 0, to `num_edges`,
    /// non-decreasing), columns in range, edge ids a permutation, and that
    /// the stored transpose holds the reversed edges with the same edge ids.
    /// Streams each section in chunks, verifying (version 2) and releasing
    /// its blocks as it goes, so memory stays bounded: a bitmap of
    /// `num_edges` bits for a permutation (above
    /// [`PERMUTATION_BITMAP_MAX_EDGES`], a sum of hashes) and 8 bytes per
    /// source for the transpose's row counts (above
    /// [`TRANSPOSE_COUNTS_MAX_SOURCES`], its triple hash alone).
    pub fn check(&self) -> CheckReport {
        let inner = &self.inner;
        let mut results = Vec::with_capacity(Invariant::ALL.len());
        let mut sides_ok = true;
        for side in [Side::Forward, Side::Transposed] {
            let [start, end, monotone, cols, ids] = side.invariants();
            if side == Side::Transposed && !self.has_transpose() {
                for inv in side.invariants() {
                    results.push((inv, Checked::NotApplicable("no stored transpose")));
                }
                continue;
            }
            let ends = inner.check_ends(side);
            let mono = inner.check_offsets(side);
            let in_range = inner.check_cols(side);
            let perm = if inner.index.contains_key(side.names().2) {
                checked(inner.check_ids(side))
            } else {
                Checked::NotApplicable("not stored: the identity")
            };
            let (s, e) = match ends {
                Ok([s, e]) => (violated(s), violated(e)),
                Err(err) => (Checked::NotChecked(err.to_string()), Checked::NotChecked(err.to_string())),
            };
            for (inv, c) in [(start, s), (end, e), (monotone, checked(mono)), (cols, checked(in_range)), (ids, perm)] {
                sides_ok &= matches!(c, Checked::Ok | Checked::NotApplicable(_));
                results.push((inv, c));
            }
        }
        let transpose = if !self.has_transpose() {
            Checked::NotApplicable("no stored transpose")
        } else if !sides_ok {
            Checked::NotChecked("it needs every invariant above".into())
        } else {
            checked(inner.check_transpose())
        };
        results.push((Invariant::TransposeMatches, transpose));
        CheckReport { results }
    }
    /// The row offsets (`num_dst + 1`), mapped. The whole-section
    /// accessors verify every block of the section first (version 2); their
    /// contents are not checked against the invariants (pages and
    /// [`GfgFile::check`] are).
    pub fn offsets(&self) -> Result<&[u64], GfgError> {
        self.inner.verified_typed("offsets")
    }

    /// The column indices (`num_edges`), mapped.
    pub fn cols(&self) -> Result<&[u32], GfgError> {
        self.inner.verified_typed("cols")
    }

    /// CSR position to the user's edge index; `None` when CSR order is the
    /// user's order.
    pub fn edge_ids(&self) -> Result<Option<&[u64]>, GfgError> {
        self.inner.verified_typed_opt("edge_ids")
    }

    /// The transposed CSR's row offsets (`num_src + 1`), if stored.
    pub fn t_offsets(&self) -> Result<Option<&[u64]>, GfgError> {
        self.inner.verified_typed_opt("t_offsets")
    }

    pub fn t_cols(&self) -> Result<Option<&[u32]>, GfgError> {
        self.inner.verified_typed_opt("t_cols")
    }

    /// The transposed CSR's positions to user edge indices; `None` when not
    /// stored (no transpose, or its order is the user's order).
    pub fn t_edge_ids(&self) -> Result<Option<&[u64]>, GfgError> {
        self.inner.verified_typed_opt("t_edge_ids")
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

    /// Reads the whole graph into memory (checking every CSR invariant), in
    /// the file's numbering: a file written in a node order gives the
    /// renumbered graph ([`GfgFile::node_order`] says how to get back).
    pub fn load_graph(&self) -> Result<Graph, GfgError> {
        self.inner.load(Side::Forward)
    }

    /// Reads the forward CSR into memory in the caller's numbering: the
    /// stored rows of a file written in a node order moved back
    /// ([`tiga_runtime::Renumbered::caller_graph`]); otherwise
    /// [`GfgFile::load_graph`].
    pub fn load_caller_graph(&self) -> Result<Graph, GfgError> {
        let g = self.load_graph()?;
        match self.node_order()? {
            None => Ok(g),
            Some(order) => order.caller_graph(&g).map_err(|e| GfgError::Renumber(Box::new(e))),
        }
    }

    /// Reads the stored transpose into memory, if the file has one.
    pub fn load_transposed(&self) -> Result<Option<Graph>, GfgError> {
        if !self.has_transpose() {
            return Ok(None);
        }
        self.inner.load(Side::Transposed).map(Some)
    }

    /// The CSR of destination rows `rows`. Before it is returned: the
    /// blocks under it are verified (version 2, once per open file), its
    /// offsets and columns (and edge ids) are checked (first visit), and,
    /// the first time a page carries edge ids, the whole `edge_ids` section
    /// is checked to be a permutation.
    pub fn page(&self, rows: Range<usize>) -> Result<Page<'_>, GfgError> {
        self.inner.page(Side::Forward, rows, true)
    }

    /// The transposed CSR of `rows` (source nodes, the transpose's
    /// destinations): what a paged backward streams. An error if the file
    /// has no transpose. The first transposed page (of an open file) first
    /// checks that the transpose is the graph's transpose (a pass over both
    /// CSRs: see [`GfgFile::check`]).
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

    /// The whole-file checks a page of this side (`transposed`) with its
    /// edge ids relies on, each run once per open file: for a reader that
    /// reads the rows through the whole-section accessors rather than
    /// [`GfgFile::page`].
    pub fn require_page_checks(&self, transposed: bool) -> Result<(), GfgError> {
        if transposed && !self.has_transpose() {
            return Ok(()); // no transposed page to check for
        }
        let side = if transposed { Side::Transposed } else { Side::Forward };
        let ids = self.inner.index.contains_key(side.names().2);
        self.inner.require_whole_file(side, ids)
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
    let page = tiga_runtime::tensor::os_page_size();
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
    /// The whole-file checks a page of `side` relies on, each once per
    /// open file: the offsets' ends (when open did not check them), the
    /// edge ids a permutation (`ids`: the page carries them), the transpose
    /// the transpose.
    fn require_whole_file(&self, side: Side, ids: bool) -> Result<(), GfgError> {
        if !self.ends_checked {
            self.require_ends(side)?;
        }
        if side == Side::Transposed {
            self.require_transpose()?;
        }
        if ids {
            self.require_ids(side)?;
        }
        Ok(())
    }

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

    /// The whole section's CRC-32, and in version 2 each block's, in one
    /// pass (the whole CRC is the blocks' combined). A block that matches is
    /// marked verified.
    fn verify(&self, k: usize) -> Result<(), GfgError> {
        let s = &self.manifest.sections[k];
        let bytes = self.bytes(k)?;
        let computed = match self.manifest.block_size() {
            None => crc32fast::hash(bytes),
            Some(size) => {
                let mut whole = crc32fast::Hasher::new();
                let size = usize::try_from(size).unwrap_or(usize::MAX);
                for (b, chunk) in bytes.chunks(size).enumerate() {
                    let mut h = crc32fast::Hasher::new();
                    h.update(chunk);
                    self.check_block(k, b as u64, h.clone().finalize())?;
                    whole.combine(&h);
                }
                whole.finalize()
            }
        };
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

    /// Compares block `b` of section `k`'s computed CRC with the stored one
    /// and marks it verified.
    fn check_block(&self, k: usize, b: u64, computed: u32) -> Result<(), GfgError> {
        let s = &self.manifest.sections[k];
        let size = self.manifest.block_size().unwrap_or(u64::MAX);
        let stored = s.blocks.get(b as usize).copied();
        if stored != Some(computed) {
            let start = b.saturating_mul(size);
            return Err(GfgError::BlockChecksum {
                path: self.name.clone(),
                section: s.name.clone(),
                block: b,
                start: s.offset + start,
                end: s.offset + start.saturating_add(size).min(s.length),
                stored: stored.unwrap_or(0),
                computed,
            });
        }
        if let Some(word) = self.verified[k].get((b / 64) as usize) {
            word.fetch_or(1 << (b % 64), Ordering::Relaxed);
        }
        Ok(())
    }

    /// Verifies the blocks of section `k` under its bytes `range` that are
    /// not verified yet (version 2; nothing in version 1). `release` drops
    /// each freshly hashed block from the resident set again, for a reader
    /// that will touch only part of it (a page), so that a page's first
    /// visit leaves no more mapped than a later one.
    fn ensure_blocks(&self, k: usize, range: Range<usize>, release: bool) -> Result<(), GfgError> {
        let Some(size) = self.manifest.block_size() else { return Ok(()) };
        let length = self.manifest.sections[k].length;
        let end = (range.end as u64).min(length);
        if range.start as u64 >= end {
            return Ok(());
        }
        let (first, last) = (range.start as u64 / size, (end - 1) / size);
        let bits = &self.verified[k];
        for b in first..=last {
            let done = bits.get((b / 64) as usize).is_some_and(|w| w.load(Ordering::Relaxed) & (1 << (b % 64)) != 0);
            if done {
                continue;
            }
            let (lo, hi) = ((b * size) as usize, ((b + 1) * size).min(length) as usize);
            let computed = crc32fast::hash(&self.bytes(k)?[lo..hi]);
            self.check_block(k, b, computed)?;
            if release {
                self.advise(k, lo..hi, Advice::Done);
            }
        }
        Ok(())
    }

    /// A whole section, every block verified (version 2).
    fn verified_typed<T: Element>(&self, name: &str) -> Result<&[T], GfgError> {
        let k = self.section_index(name)?;
        self.ensure_blocks(k, 0..usize::MAX, true)?;
        self.cast(k)
    }

    fn verified_typed_opt<T: Element>(&self, name: &str) -> Result<Option<&[T]>, GfgError> {
        match self.index.get(name) {
            Some(_) => self.verified_typed(name).map(Some),
            None => Ok(None),
        }
    }

    fn invariant(&self, violation: Violation) -> GfgError {
        GfgError::Invariant { path: self.name.clone(), violation }
    }

    /// `offsets[0] = 0` and `offsets[rows] = num_edges` of a side (outer
    /// error: the data could not be read or failed its checksum).
    fn check_ends(&self, side: Side) -> Result<[Result<(), Violation>; 2], GfgError> {
        let (o, _, _) = side.names();
        let [start, end, ..] = side.invariants();
        let rows = self.counts(side).1;
        let k = self.section_index(o)?;
        self.ensure_blocks(k, 0..8, true)?;
        self.ensure_blocks(k, rows * 8..(rows + 1) * 8, true)?;
        let offsets = self.typed::<u64>(o)?;
        let n = self.manifest.num_edges;
        let (first, last) = (offsets.first().copied().unwrap_or(0), offsets.get(rows).copied().unwrap_or(n));
        let s = if first == 0 { Ok(()) } else { Err(Violation::new(start, Some(0), format!("{o}[0] = {first}, not 0"))) };
        let e = if last == n {
            Ok(())
        } else {
            Err(Violation::new(end, Some(rows as u64), format!("{o}[{rows}] = {last}, not num_edges = {n}")))
        };
        Ok([s, e])
    }

    /// Both ends of a side's offsets, as one error (what a page needs).
    fn require_ends(&self, side: Side) -> Result<(), GfgError> {
        let [s, e] = self.check_ends(side)?;
        s.and(e).map_err(|v| self.invariant(v))
    }

    /// Passes over section `name` in chunks of `step` elements: each
    /// chunk's blocks are verified before `f(chunk, first index)` sees it
    /// and the chunk is released after, so a pass over a file larger than
    /// memory holds one chunk of it. Returns the whole section.
    fn pass<T: Element>(
        &self,
        name: &str,
        step: usize,
        mut f: impl FnMut(&[T], u64) -> Result<(), Violation>,
    ) -> Result<&[T], GfgError> {
        let k = self.section_index(name)?;
        let all = self.typed::<T>(name)?;
        let size = T::ELEM.size();
        for start in (0..all.len()).step_by(step) {
            let end = (start + step).min(all.len());
            self.ensure_blocks(k, start * size..end * size, true)?;
            f(&all[start..end], start as u64).map_err(|v| self.invariant(v))?;
            self.advise(k, start * size..end * size, Advice::Done);
        }
        Ok(all)
    }

    /// A side's offsets never decrease.
    fn check_offsets(&self, side: Side) -> Result<(), GfgError> {
        let mut mono = Monotone::new(side.invariants()[2]);
        self.pass::<u64>(side.names().0, PASS_ROWS, |chunk, base| mono.feed(chunk, base)).map(|_| ())
    }

    /// A side's columns are below its source count.
    fn check_cols(&self, side: Side) -> Result<(), GfgError> {
        let (bound, what) = match side {
            Side::Forward => (self.manifest.num_src, "sources"),
            Side::Transposed => (self.manifest.num_dst, "destinations"),
        };
        let inv = side.invariants()[3];
        self.pass::<u32>(side.names().1, PASS_IDS, |chunk, base| cols_in_range(inv, chunk, base, bound, what)).map(|_| ())
    }

    /// A side's stored edge ids are a permutation of `0..num_edges` (see
    /// [`PERMUTATION_BITMAP_MAX_EDGES`]). A repeated id is named with the
    /// position it first appeared at (a second look, on failure only).
    fn check_ids(&self, side: Side) -> Result<(), GfgError> {
        let e = side.names().2;
        let inv = side.invariants()[4];
        let mut perm = Permutation::new(inv, self.manifest.num_edges, PERMUTATION_BITMAP_MAX_EDGES);
        match self.pass::<u64>(e, PASS_IDS, |chunk, base| perm.feed(chunk, base)) {
            Ok(_) => perm.finish().map_err(|v| self.invariant(v)),
            Err(GfgError::Invariant { path, mut violation }) => {
                if let (Some(at), Some(id)) = (violation.position, perm.repeated()) {
                    let ids = self.typed::<u64>(e)?;
                    if let Some(first) = ids.iter().take(at as usize).position(|&x| x == id) {
                        violation.detail = format!("{e}[{at}] = {id} repeats {e}[{first}]: not a permutation");
                    }
                }
                Err(GfgError::Invariant { path, violation })
            }
            Err(other) => Err(other),
        }
    }

    /// Runs `check` once per open file behind `slot` (a failure is not
    /// remembered: the next reader checks again and fails again).
    fn once(&self, slot: &Mutex<bool>, check: impl FnOnce() -> Result<(), GfgError>) -> Result<(), GfgError> {
        let mut done = slot.lock().unwrap_or_else(PoisonError::into_inner);
        if !*done {
            check()?;
            *done = true;
        }
        Ok(())
    }

    /// Before the first page that carries a side's stored edge ids: the ids
    /// are a permutation (a kernel scatters edge outputs by them; a repeated
    /// id would write one edge twice and leave another unwritten).
    fn require_ids(&self, side: Side) -> Result<(), GfgError> {
        if !self.index.contains_key(side.names().2) {
            return Ok(());
        }
        self.once(&self.ids_checked[side.index()], || self.check_ids(side))
    }

    /// Before the first transposed page: the transpose is the transpose.
    fn require_transpose(&self) -> Result<(), GfgError> {
        self.once(&self.transpose_checked, || {
            self.require_ids(Side::Forward)?;
            self.require_ids(Side::Transposed)?;
            self.check_transpose()
        })
    }

    /// Walks a side's CSR row by row in chunks of rows, verifying each
    /// chunk's blocks and checking its invariants (offsets in range and
    /// non-decreasing, columns and edge ids in range) before `row` sees
    /// it: `row(r, first position, columns, edge ids)`.
    fn scan_rows(
        &self,
        side: Side,
        mut row: impl FnMut(usize, u64, &[u32], Option<&[u64]>) -> Result<(), Violation>,
    ) -> Result<(), GfgError> {
        let (o, c, e) = side.names();
        let (num_src, rows) = self.counts(side);
        let [_, _, monotone, in_range, perm] = side.invariants();
        let (ko, kc, ke) = (self.section_index(o)?, self.section_index(c)?, self.index.get(e).copied());
        let offsets = self.typed::<u64>(o)?;
        let cols = self.typed::<u32>(c)?;
        let ids = self.typed_opt::<u64>(e)?;
        let n = self.manifest.num_edges;
        let what = if side == Side::Forward { "sources" } else { "destinations" };
        let mut mono = Monotone::new(monotone);
        for start in (0..rows).step_by(PASS_ROWS) {
            let end = (start + PASS_ROWS).min(rows);
            self.ensure_blocks(ko, start * 8..(end + 1) * 8, true)?;
            let off = &offsets[start..=end];
            mono.feed(off, start as u64).map_err(|v| self.invariant(v))?;
            let (a, b) = (off[0], off[off.len() - 1]);
            if b > n {
                let v = Violation::new(monotone, Some(end as u64), format!("{o}[{end}] = {b} exceeds num_edges = {n}"));
                return Err(self.invariant(v));
            }
            let span = a as usize..b as usize;
            self.ensure_blocks(kc, span.start * 4..span.end * 4, true)?;
            cols_in_range(in_range, &cols[span.clone()], a, num_src as u64, what).map_err(|v| self.invariant(v))?;
            let chunk_ids = match (ids, ke) {
                (Some(ids), Some(ke)) => {
                    self.ensure_blocks(ke, span.start * 8..span.end * 8, true)?;
                    let chunk = &ids[span.clone()];
                    if let Some(p) = chunk.iter().position(|&id| id >= n) {
                        let at = a + p as u64;
                        let v = Violation::new(perm, Some(at), format!("{e}[{at}] = {} is out of range for {n} edges", chunk[p]));
                        return Err(self.invariant(v));
                    }
                    Some(ids)
                }
                _ => None,
            };
            for r in start..end {
                let (p, q) = (offsets[r] as usize, offsets[r + 1] as usize);
                row(r, p as u64, &cols[p..q], chunk_ids.map(|ids| &ids[p..q])).map_err(|v| self.invariant(v))?;
            }
            self.advise(ko, start * 8..(end + 1) * 8, Advice::Done);
            self.advise(kc, span.start * 4..span.end * 4, Advice::Done);
            if let Some(ke) = ke {
                self.advise(ke, span.start * 8..span.end * 8, Advice::Done);
            }
        }
        Ok(())
    }

    /// The stored transpose holds exactly the graph's edges reversed, with
    /// the same edge ids: the keyed hashes of the `(source, destination,
    /// edge id)` triples of both CSRs agree, and (up to
    /// [`TRANSPOSE_COUNTS_MAX_SOURCES`] sources) each source's row in the
    /// transpose has as many edges as the source has out-edges in the
    /// graph, which names the first row that differs. Two passes, one per
    /// CSR, in bounded memory.
    fn check_transpose(&self) -> Result<(), GfgError> {
        let inv = Invariant::TransposeMatches;
        let num_src = self.manifest.num_src;
        let mut counts: Option<Vec<u64>> =
            (num_src <= TRANSPOSE_COUNTS_MAX_SOURCES).then(|| vec![0; usize::try_from(num_src).unwrap_or(0)]);
        let (mut forward, mut backward) = TripleHash::pair();
        self.scan_rows(Side::Forward, |dst, first, cols, ids| {
            for (k, &src) in cols.iter().enumerate() {
                forward.add(src, dst as u32, ids.map_or(first + k as u64, |ids| ids[k]));
                if let Some(c) = counts.as_mut().and_then(|c| c.get_mut(src as usize)) {
                    *c += 1;
                }
            }
            Ok(())
        })?;
        self.scan_rows(Side::Transposed, |src, first, cols, ids| {
            if let Some(&want) = counts.as_ref().and_then(|c| c.get(src)) {
                if want != cols.len() as u64 {
                    return Err(Violation::new(
                        inv,
                        Some(src as u64),
                        format!(
                            "source {src} has {want} out-edge(s) in the graph but {} in its transposed row (t_offsets[{src}..={}]): the transposed CSR does not hold the reversed edges of the graph",
                            cols.len(),
                            src + 1
                        ),
                    ));
                }
            }
            for (k, &dst) in cols.iter().enumerate() {
                backward.add(src as u32, dst, ids.map_or(first + k as u64, |ids| ids[k]));
            }
            Ok(())
        })?;
        if forward != backward {
            return Err(self.invariant(Violation::new(
                inv,
                None,
                "the transposed CSR does not hold the reversed edges of the graph with the same edge ids (the hashes of their (source, destination, edge id) triples differ)".into(),
            )));
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
        let offsets = self.verified_typed::<u64>(o)?.to_vec();
        let cols = self.verified_typed::<u32>(c)?.to_vec();
        let ids = self.verified_typed_opt::<u64>(e)?.map(<[u64]>::to_vec);
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
        self.require_whole_file(side, ke.is_some())?;
        // Start reading what is not in memory; the checks below (first
        // visit) or the kernel (later visits) fault the pages in.
        self.advise(ko, rows.start * 8..(rows.end + 1) * 8, Advice::ReadAhead);
        self.ensure_blocks(ko, rows.start * 8..(rows.end + 1) * 8, true)?;
        let all = self.typed::<u64>(o)?;
        let offsets = &all[rows.start..=rows.end];
        let num_edges = self.manifest.num_edges;
        let [_, _, monotone, in_range, perm] = side.invariants();
        // Checked with its ids covers a visit without them.
        let key = (side, rows.start, rows.end, with_ids);
        let checked =
            self.checked.lock().map(|c| c.contains(&key) || c.contains(&(side, rows.start, rows.end, true))).unwrap_or(false);
        if !checked {
            Monotone::new(monotone).feed(offsets, rows.start as u64).map_err(|v| self.invariant(v))?;
        }
        let (first, last) = (offsets[0], offsets[offsets.len() - 1]);
        if last > num_edges {
            let v = Violation::new(
                monotone,
                Some(rows.end as u64),
                format!("{o}[{}] = {last} exceeds num_edges = {num_edges}", rows.end),
            );
            return Err(self.invariant(v));
        }
        let span = first as usize..last as usize;
        self.advise(kc, span.start * 4..span.end * 4, Advice::ReadAhead);
        self.ensure_blocks(kc, span.start * 4..span.end * 4, true)?;
        if let Some(ke) = ke {
            self.advise(ke, span.start * 8..span.end * 8, Advice::ReadAhead);
            self.ensure_blocks(ke, span.start * 8..span.end * 8, true)?;
        }
        let cols = &self.typed::<u32>(c)?[span.clone()];
        let edge_ids = if with_ids { self.typed_opt::<u64>(e)?.map(|ids| &ids[span.clone()]) } else { None };
        if checked {
            return Ok(Page { rows, offsets, cols, edge_ids, side });
        }
        let what = if side == Side::Forward { "sources" } else { "destinations" };
        cols_in_range(in_range, cols, first, num_src as u64, what).map_err(|v| self.invariant(v))?;
        if let Some(ids) = edge_ids {
            if !ids.is_empty() && ids.iter().fold(0u64, |m, &id| m.max(id)) >= num_edges {
                if let Some(p) = ids.iter().position(|&id| id >= num_edges) {
                    let at = first + p as u64;
                    let v =
                        Violation::new(perm, Some(at), format!("{e}[{at}] = {} is out of range for {num_edges} edges", ids[p]));
                    return Err(self.invariant(v));
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

/// What a full check's pass found, as a report line.
fn checked(r: Result<(), GfgError>) -> Checked {
    match r {
        Ok(()) => Checked::Ok,
        Err(GfgError::Invariant { violation, .. }) => Checked::Violated(violation),
        Err(e) => Checked::NotChecked(e.to_string()),
    }
}

fn violated(r: Result<(), Violation>) -> Checked {
    match r {
        Ok(()) => Checked::Ok,
        Err(v) => Checked::Violated(v),
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
        let size = self.dtype.size();
        self.file.ensure_blocks(self.index, span.start * size..span.end * size, false)?;
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
