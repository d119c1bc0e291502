//! The bytes of a `.gfg` file: the fixed header, the manifest's binary
//! encoding, and the checks that a manifest agrees with itself and with the
//! file it came from. `docs/gfg.md` is the normative description; this module
//! is its one implementation, shared by the writer and the reader.
//!
//! Nothing here touches a file: the reader hands in the header bytes, the
//! manifest bytes and the file length, and gets back a checked [`Manifest`]
//! or a [`Problem`] that it turns into an error naming the file.

use std::collections::HashMap;
use std::fmt;

use tiga_runtime::graph::MAX_NODES;
use tiga_runtime::tensor::DType;

use tiga_runtime::FieldRole;

/// The first eight bytes of every `.gfg` file.
pub const MAGIC: [u8; 8] = *b"TIGAGFG\0";
/// The major version this tiga_runtime writes. It reads this one and
/// [`FORMAT_MAJOR_V1`]; any other major version is refused, and a larger
/// minor version of a known major is read.
pub const FORMAT_MAJOR: u16 = 2;
/// The first version: whole-section checksums only, so a paged run over a
/// version 1 file cannot check the blocks it reads (only `verify` can).
pub const FORMAT_MAJOR_V1: u16 = 1;
/// Version 2 plus a stored node order (`node_order`): the file's node ids
/// are a renumbering of the caller's. A new major version, not a minor
/// one, because a reader that ignored the order would read every node
/// field and output in the wrong numbering; files without an order are
/// still written as version 2.
pub const FORMAT_MAJOR_ORDERED: u16 = 3;
/// The section that holds a file's node order (`perm[old] = new`, u32,
/// `[num_dst]`), and the one that says which method made it (u32 `[1]`,
/// [`tiga_runtime::Renumber::code`]).
pub const NODE_ORDER: &str = "node_order";
pub const NODE_ORDER_METHOD: &str = "node_order_method";
/// The minor version this tiga_runtime writes (of either major).
pub const FORMAT_MINOR: u16 = 0;
/// Version 2 checksums every block of this many bytes (log2) of every
/// section: a paged run reads a page, not a section, and verifies just the
/// blocks under it. 1 MiB is the writers' I/O block (`blocks::FILE_BLOCK`):
/// a page's first visit hashes at most a block past each end of its span.
pub const BLOCK_LOG2: u8 = 20;
/// The block sizes a reader accepts (log2): 4 KiB to 1 GiB.
pub const BLOCK_LOG2_RANGE: std::ops::RangeInclusive<u8> = 12..=30;
/// Bytes in the fixed header.
pub const HEADER_LEN: usize = 64;
/// Every section starts at a multiple of this, so it can be mapped on its own.
pub const SECTION_ALIGN: u64 = 4096;
/// The largest manifest a reader accepts (a sanity bound, so a corrupt
/// header cannot make the reader allocate the whole file).
pub const MAX_MANIFEST_LEN: u64 = 64 << 20;
/// The largest rank of any section.
pub const MAX_RANK: usize = 4;
/// Index widths in bytes: row offsets, column indices, edge ids.
pub const OFFSET_WIDTH: u8 = 8;
pub const COL_WIDTH: u8 = 4;
pub const EDGE_ID_WIDTH: u8 = 8;

/// The element type of a section, as stored in the manifest (one byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElemType {
    U32,
    U64,
    F32,
    F64,
}

impl ElemType {
    pub fn code(self) -> u8 {
        match self {
            ElemType::U32 => 1,
            ElemType::U64 => 2,
            ElemType::F32 => 3,
            ElemType::F64 => 4,
        }
    }

    pub fn from_code(code: u8) -> Option<ElemType> {
        Some(match code {
            1 => ElemType::U32,
            2 => ElemType::U64,
            3 => ElemType::F32,
            4 => ElemType::F64,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            ElemType::U32 | ElemType::F32 => 4,
            ElemType::U64 | ElemType::F64 => 8,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ElemType::U32 => "u32",
            ElemType::U64 => "u64",
            ElemType::F32 => "f32",
            ElemType::F64 => "f64",
        }
    }

    /// The tensor dtype of a float section.
    pub fn dtype(self) -> Option<DType> {
        match self {
            ElemType::F32 => Some(DType::F32),
            ElemType::F64 => Some(DType::F64),
            ElemType::U32 | ElemType::U64 => None,
        }
    }
}

impl From<DType> for ElemType {
    fn from(d: DType) -> ElemType {
        match d {
            DType::F32 => ElemType::F32,
            DType::F64 => ElemType::F64,
        }
    }
}

impl fmt::Display for ElemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One entry of the section table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionInfo {
    pub name: String,
    pub elem: ElemType,
    /// Row-major shape; the section holds `product(shape)` elements.
    pub shape: Vec<u64>,
    /// Byte offset from the start of the file, a multiple of [`SECTION_ALIGN`].
    pub offset: u64,
    /// Byte length, `product(shape) * elem.size()`.
    pub length: u64,
    /// CRC-32 (IEEE, as zlib and `crc32fast`) of the section's bytes.
    pub crc32: u32,
    /// Version 2: the CRC-32 of each block of the section (block `k` holds
    /// its bytes `k·B .. min((k+1)·B, length)`, `B` the manifest's block
    /// size). Empty in version 1.
    pub blocks: Vec<u32>,
}

impl SectionInfo {
    /// The element count; fits `usize` once the manifest has been checked.
    pub fn elements(&self) -> usize {
        self.shape.iter().product::<u64>() as usize
    }
}

/// The CRC-32s of a byte stream, whole and per block of `1 << log2` bytes
/// counted from its start: what a version 2 writer stores for a section.
/// Each byte is hashed once; the whole CRC is the blocks' CRCs combined.
#[derive(Debug, Clone)]
pub struct BlockCrcs {
    log2: u8,
    /// Bytes hashed so far.
    len: u64,
    block: crc32fast::Hasher,
    whole: crc32fast::Hasher,
    done: Vec<u32>,
}

impl BlockCrcs {
    pub fn new(log2: u8) -> BlockCrcs {
        BlockCrcs { log2, len: 0, block: crc32fast::Hasher::new(), whole: crc32fast::Hasher::new(), done: Vec::new() }
    }

    pub fn update(&mut self, mut bytes: &[u8]) {
        let size = 1u64 << self.log2;
        while !bytes.is_empty() {
            let room = (size - self.len % size) as usize;
            let n = room.min(bytes.len());
            self.block.update(&bytes[..n]);
            self.len += n as u64;
            bytes = &bytes[n..];
            if n == room {
                self.close_block();
            }
        }
    }

    fn close_block(&mut self) {
        let b = std::mem::replace(&mut self.block, crc32fast::Hasher::new());
        self.whole.combine(&b);
        self.done.push(b.finalize());
    }

    /// (whole CRC, block CRCs).
    pub fn finish(mut self) -> (u32, Vec<u32>) {
        if !self.len.is_multiple_of(1u64 << self.log2) {
            self.close_block();
        }
        (self.whole.finalize(), self.done)
    }
}

/// What a `.gfg` file says about itself: read alone on open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The format version of the file (from the header).
    pub major: u16,
    pub minor: u16,
    pub num_src: u64,
    pub num_dst: u64,
    pub num_edges: u64,
    /// Index widths in bytes (8, 4, 8 in versions 1 and 2).
    pub offset_width: u8,
    pub col_width: u8,
    pub edge_id_width: u8,
    /// Version 2: log2 of the checksum block size (the manifest byte that
    /// version 1 reserves, zero there).
    pub block_log2: u8,
    /// In file order of the table (the writer's order).
    pub sections: Vec<SectionInfo>,
}

impl Manifest {
    pub fn section(&self, name: &str) -> Option<&SectionInfo> {
        self.sections.iter().find(|s| s.name == name)
    }

    /// The checksum block size in bytes; `None` in version 1, which has no
    /// block checksums.
    pub fn block_size(&self) -> Option<u64> {
        (self.major >= FORMAT_MAJOR).then(|| 1u64 << self.block_log2)
    }
}

impl fmt::Display for Manifest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "format: gfg {}.{}", self.major, self.minor)?;
        writeln!(f, "nodes: {} sources, {} destinations", self.num_src, self.num_dst)?;
        writeln!(f, "edges: {}", self.num_edges)?;
        writeln!(
            f,
            "index widths: offsets u{}, cols u{}, edge ids u{}",
            u32::from(self.offset_width) * 8,
            u32::from(self.col_width) * 8,
            u32::from(self.edge_id_width) * 8
        )?;
        match self.block_size() {
            Some(b) if b >= 1 << 20 => writeln!(f, "block checksums: crc32 per {} MiB block of each section", b >> 20)?,
            Some(b) => writeln!(f, "block checksums: crc32 per {} KiB block of each section", b >> 10)?,
            None => writeln!(f, "block checksums: none (version 1: whole-section checksums only)")?,
        }
        writeln!(f, "sections:")?;
        for s in &self.sections {
            write!(
                f,
                "  {:<24} {:<4} {:<16} offset {:>12}  length {:>12}  crc32 {:08x}",
                s.name,
                s.elem.name(),
                format!("{:?}", s.shape),
                s.offset,
                s.length,
                s.crc32
            )?;
            if self.block_size().is_some() {
                write!(f, "  {} block(s)", s.blocks.len())?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// The fixed header at offset 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub major: u16,
    pub minor: u16,
    pub manifest_offset: u64,
    pub manifest_len: u64,
    pub manifest_crc32: u32,
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..8].copy_from_slice(&MAGIC);
        h[8..10].copy_from_slice(&self.major.to_le_bytes());
        h[10..12].copy_from_slice(&self.minor.to_le_bytes());
        // 12..16 reserved (zero).
        h[16..24].copy_from_slice(&self.manifest_offset.to_le_bytes());
        h[24..32].copy_from_slice(&self.manifest_len.to_le_bytes());
        h[32..36].copy_from_slice(&self.manifest_crc32.to_le_bytes());
        // 36..60 reserved (zero).
        let crc = crc32fast::hash(&h[..60]);
        h[60..64].copy_from_slice(&crc.to_le_bytes());
        h
    }
}

/// Why the header, the manifest or the file do not agree; the reader adds
/// the file's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    BadMagic,
    UnsupportedVersion { major: u16, minor: u16 },
    Truncated { what: String, needed: u64 },
    Checksum { what: &'static str, stored: u32, computed: u32 },
    Manifest(String),
}

/// Little-endian integers at byte `at` of a header already checked to be
/// long enough (the `.gfg` header and the `.tensor` descriptor both read
/// with these).
pub(crate) fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
pub(crate) fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
pub(crate) fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Reads the header from the first `min(file_len, 64)` bytes, checking in
/// the order that gives the most useful message: magic, version, length,
/// checksum, then where the manifest lies.
pub fn decode_header(bytes: &[u8], file_len: u64) -> Result<Header, Problem> {
    let n = bytes.len().min(MAGIC.len());
    if bytes[..n] != MAGIC[..n] {
        return Err(Problem::BadMagic);
    }
    if bytes.len() >= 12 {
        let (major, minor) = (le_u16(bytes, 8), le_u16(bytes, 10));
        if ![FORMAT_MAJOR_V1, FORMAT_MAJOR, FORMAT_MAJOR_ORDERED].contains(&major) {
            return Err(Problem::UnsupportedVersion { major, minor });
        }
    }
    if bytes.len() < HEADER_LEN {
        return Err(Problem::Truncated { what: "the header".into(), needed: HEADER_LEN as u64 });
    }
    let stored = le_u32(bytes, 60);
    let computed = crc32fast::hash(&bytes[..60]);
    if stored != computed {
        return Err(Problem::Checksum { what: "the header", stored, computed });
    }
    let h = Header {
        major: le_u16(bytes, 8),
        minor: le_u16(bytes, 10),
        manifest_offset: le_u64(bytes, 16),
        manifest_len: le_u64(bytes, 24),
        manifest_crc32: le_u32(bytes, 32),
    };
    if h.manifest_offset < HEADER_LEN as u64 {
        return Err(Problem::Manifest(format!(
            "the header puts the manifest at offset {}, inside the header",
            h.manifest_offset
        )));
    }
    if h.manifest_len > MAX_MANIFEST_LEN {
        return Err(Problem::Manifest(format!(
            "the header says the manifest is {} bytes long, more than the {} a reader accepts",
            h.manifest_len, MAX_MANIFEST_LEN
        )));
    }
    let end = h.manifest_offset.checked_add(h.manifest_len).ok_or_else(|| {
        Problem::Manifest(format!("the manifest's offset {} plus its length {} overflows", h.manifest_offset, h.manifest_len))
    })?;
    if end > file_len {
        return Err(Problem::Truncated { what: "the manifest".into(), needed: end });
    }
    if end < file_len {
        return Err(Problem::Manifest(format!("{} unexpected bytes after the manifest (it must end the file)", file_len - end)));
    }
    Ok(h)
}

/// Encodes the manifest body (the header is separate).
pub fn encode_manifest(m: &Manifest) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + m.sections.len() * 64);
    out.extend_from_slice(&m.num_src.to_le_bytes());
    out.extend_from_slice(&m.num_dst.to_le_bytes());
    out.extend_from_slice(&m.num_edges.to_le_bytes());
    let block_log2 = if m.major >= FORMAT_MAJOR { m.block_log2 } else { 0 };
    out.extend_from_slice(&[m.offset_width, m.col_width, m.edge_id_width, block_log2]);
    out.extend_from_slice(&(m.sections.len() as u32).to_le_bytes());
    for s in &m.sections {
        out.extend_from_slice(&(s.name.len() as u16).to_le_bytes());
        out.extend_from_slice(s.name.as_bytes());
        out.extend_from_slice(&[s.elem.code(), s.shape.len() as u8, 0, 0]);
        for d in &s.shape {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&s.offset.to_le_bytes());
        out.extend_from_slice(&s.length.to_le_bytes());
        out.extend_from_slice(&s.crc32.to_le_bytes());
        if m.major >= FORMAT_MAJOR {
            for crc in &s.blocks {
                out.extend_from_slice(&crc.to_le_bytes());
            }
        }
    }
    out
}

/// A bounds-checked little-endian reader over the manifest bytes.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], Problem> {
        match self.at.checked_add(n) {
            Some(end) if end <= self.bytes.len() => {
                let s = &self.bytes[self.at..end];
                self.at = end;
                Ok(s)
            }
            _ => Err(Problem::Manifest(format!("the manifest ends inside {what} (at byte {} of {})", self.at, self.bytes.len()))),
        }
    }
    fn u8(&mut self, what: &str) -> Result<u8, Problem> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16, Problem> {
        Ok(le_u16(self.take(2, what)?, 0))
    }
    fn u32(&mut self, what: &str) -> Result<u32, Problem> {
        Ok(le_u32(self.take(4, what)?, 0))
    }
    fn u64(&mut self, what: &str) -> Result<u64, Problem> {
        Ok(le_u64(self.take(8, what)?, 0))
    }
}

/// Decodes the manifest body; `header` supplies the version. Trailing bytes
/// are an error unless the file's minor version is newer than ours (a newer
/// minor version may append to the manifest).
pub fn decode_manifest(bytes: &[u8], header: &Header) -> Result<Manifest, Problem> {
    let mut c = Cursor { bytes, at: 0 };
    let num_src = c.u64("num_src")?;
    let num_dst = c.u64("num_dst")?;
    let num_edges = c.u64("num_edges")?;
    let offset_width = c.u8("the index widths")?;
    let col_width = c.u8("the index widths")?;
    let edge_id_width = c.u8("the index widths")?;
    let block_log2 = c.u8("the block size")?;
    let v2 = header.major >= FORMAT_MAJOR;
    if v2 && !BLOCK_LOG2_RANGE.contains(&block_log2) {
        return Err(Problem::Manifest(format!(
            "the block size is 2^{block_log2} bytes; a reader accepts 2^{} to 2^{}",
            BLOCK_LOG2_RANGE.start(),
            BLOCK_LOG2_RANGE.end()
        )));
    }
    let count = c.u32("the section count")?;
    let mut sections = Vec::new();
    for k in 0..count {
        let what = format!("section entry {k}");
        let name_len = c.u16(&what)? as usize;
        let name = std::str::from_utf8(c.take(name_len, &what)?)
            .map_err(|_| Problem::Manifest(format!("the name of section entry {k} is not UTF-8")))?
            .to_string();
        let code = c.u8(&what)?;
        let elem = ElemType::from_code(code)
            .ok_or_else(|| Problem::Manifest(format!("section `{name}` has unknown element type code {code}")))?;
        let rank = c.u8(&what)? as usize;
        c.u16(&what)?;
        if rank > MAX_RANK {
            return Err(Problem::Manifest(format!("section `{name}` has rank {rank}; at most {MAX_RANK} is allowed")));
        }
        let mut shape = Vec::with_capacity(rank);
        for _ in 0..rank {
            shape.push(c.u64(&what)?);
        }
        let offset = c.u64(&what)?;
        let length = c.u64(&what)?;
        let crc32 = c.u32(&what)?;
        let mut blocks = Vec::new();
        if v2 {
            // The table's length follows from the section's: the cursor
            // refuses one that runs past the manifest before anything is
            // allocated for it.
            let n = length.div_ceil(1u64 << block_log2);
            let table = n
                .checked_mul(4)
                .and_then(|b| usize::try_from(b).ok())
                .ok_or_else(|| Problem::Manifest(format!("section `{name}` is too long for its block table")))?;
            let table = c.take(table, &format!("the block table of section `{name}`"))?;
            blocks = table.chunks_exact(4).map(|b| le_u32(b, 0)).collect();
        }
        sections.push(SectionInfo { name, elem, shape, offset, length, crc32, blocks });
    }
    let newer_minor = header.minor > FORMAT_MINOR;
    if c.at != bytes.len() && !newer_minor {
        return Err(Problem::Manifest(format!("{} unexpected bytes after the section table", bytes.len() - c.at)));
    }
    Ok(Manifest {
        major: header.major,
        minor: header.minor,
        num_src,
        num_dst,
        num_edges,
        offset_width,
        col_width,
        edge_id_width,
        block_log2: if v2 { block_log2 } else { 0 },
        sections,
    })
}

/// What a known section must look like.
struct Expect {
    elem: &'static [ElemType],
    /// `Some(n)`: rank 1 with `n` elements. `None` (fields): rank 1 or 2
    /// with `rows` rows.
    len: Option<u64>,
    rows: u64,
    what: String,
}

/// A field's role and name from a section name `field.ROLE.NAME`.
pub fn parse_field_name(section: &str) -> Option<Result<(FieldRole, &str), String>> {
    let rest = section.strip_prefix("field.")?;
    let Some((role, name)) = rest.split_once('.') else {
        return Some(Err(format!("field section `{section}` has no `ROLE.NAME` after `field.`")));
    };
    let role = match FieldRole::parse(role) {
        Some(r) => r,
        None => return Some(Err(format!("field section `{section}` has unknown role `{role}` (expected src, dst or edge)"))),
    };
    if let Err(rule) = check_field_name(name) {
        return Some(Err(format!("field section `{section:?}` breaks the name rule: {rule}")));
    }
    Some(Ok((role, name)))
}

/// The longest field name, in bytes.
pub const MAX_FIELD_NAME: usize = 1024;

/// The spec's rule for a field name (`docs/gfg.md`), checked on write and
/// on read: non-empty, at most [`MAX_FIELD_NAME`] bytes, no control
/// characters (a newline in a name would break every line-based listing).
pub fn check_field_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the name is empty".into());
    }
    if name.len() > MAX_FIELD_NAME || name.chars().any(char::is_control) {
        return Err(format!("names are at most {MAX_FIELD_NAME} bytes without control characters"));
    }
    Ok(())
}

/// Checks everything a reader relies on before mapping a byte of the file:
/// counts in range, known sections of the right type and shape, lengths
/// equal to shape × element size, offsets aligned, sections inside the file,
/// apart from each other and from the header and manifest.
pub fn check_manifest(m: &Manifest, header: &Header, file_len: u64) -> Result<(), Problem> {
    let bad = |s: String| Err(Problem::Manifest(s));
    if (m.offset_width, m.col_width, m.edge_id_width) != (OFFSET_WIDTH, COL_WIDTH, EDGE_ID_WIDTH) {
        return bad(format!(
            "index widths are {}/{}/{} bytes (offsets/cols/edge ids); version {} has {OFFSET_WIDTH}/{COL_WIDTH}/{EDGE_ID_WIDTH}",
            m.offset_width, m.col_width, m.edge_id_width, m.major
        ));
    }
    for (side, n) in [("num_src", m.num_src), ("num_dst", m.num_dst)] {
        if n > MAX_NODES as u64 {
            return bad(format!("{side} = {n} exceeds the maximum of {MAX_NODES} (node ids are u32)"));
        }
    }
    if usize::try_from(m.num_edges).is_err() {
        return bad(format!("num_edges = {} does not fit this machine's address space", m.num_edges));
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut ranges: Vec<(u64, u64, &str)> = Vec::new();
    for s in &m.sections {
        let name = s.name.as_str();
        if name.is_empty() {
            return bad("a section has an empty name".into());
        }
        if seen.insert(name, 0).is_some() {
            return bad(format!("section `{name}` appears twice"));
        }
        let elements = s
            .shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .and_then(|n| n.checked_mul(s.elem.size() as u64))
            .filter(|&bytes| usize::try_from(bytes).is_ok());
        let Some(needed) = elements else {
            return bad(format!("section `{name}` has shape {:?}, too large to address", s.shape));
        };
        if s.length != needed {
            return bad(format!(
                "section `{name}` is {} bytes long, but its shape {:?} of {} needs {needed}",
                s.length, s.shape, s.elem
            ));
        }
        if s.offset % SECTION_ALIGN != 0 || s.offset < SECTION_ALIGN {
            return bad(format!(
                "section `{name}` starts at offset {}, which is not a non-zero multiple of {SECTION_ALIGN}",
                s.offset
            ));
        }
        let Some(end) = s.offset.checked_add(s.length) else {
            return bad(format!("section `{name}`: offset {} plus length {} overflows", s.offset, s.length));
        };
        if end > file_len {
            return Err(Problem::Truncated { what: format!("section `{name}`"), needed: end });
        }
        if s.length > 0 {
            ranges.push((s.offset, end, name));
        }
        if let Some(e) = expectation(m, name)? {
            if !e.elem.contains(&s.elem) {
                let allowed: Vec<&str> = e.elem.iter().map(|t| t.name()).collect();
                return bad(format!("section `{name}` holds {}, but {} must be {}", s.elem, e.what, allowed.join(" or ")));
            }
            match e.len {
                Some(n) => {
                    if s.shape != [n] {
                        return bad(format!("section `{name}` has shape {:?}, but {} must have shape [{n}]", s.shape, e.what));
                    }
                }
                None => {
                    if s.shape.is_empty() || s.shape.len() > 2 || s.shape[0] != e.rows {
                        return bad(format!(
                            "section `{name}` has shape {:?}, but {} must have shape [{r}] or [{r}, F]",
                            s.shape,
                            e.what,
                            r = e.rows
                        ));
                    }
                }
            }
        }
    }
    for required in ["offsets", "cols"] {
        if !seen.contains_key(required) {
            return bad(format!("the required section `{required}` is missing"));
        }
    }
    let has = |n: &str| seen.contains_key(n);
    if has("t_offsets") != has("t_cols") {
        return bad("the transposed CSR needs both `t_offsets` and `t_cols`".into());
    }
    if has("t_edge_ids") && !has("t_offsets") {
        return bad("`t_edge_ids` is present without `t_offsets` and `t_cols`".into());
    }
    let ordered = m.major == FORMAT_MAJOR_ORDERED;
    if ordered != has(NODE_ORDER) || ordered != has(NODE_ORDER_METHOD) {
        return bad(if ordered {
            format!("a version {FORMAT_MAJOR_ORDERED} file stores its node order: `{NODE_ORDER}` and `{NODE_ORDER_METHOD}` are required")
        } else {
            format!(
                "`{NODE_ORDER}` and `{NODE_ORDER_METHOD}` belong to version {FORMAT_MAJOR_ORDERED} files (a version {} reader would \
                 ignore the order and read the nodes in the wrong numbering)",
                m.major
            )
        });
    }
    let manifest_end = header.manifest_offset + header.manifest_len;
    ranges.push((0, HEADER_LEN as u64, "the header"));
    if header.manifest_len > 0 {
        ranges.push((header.manifest_offset, manifest_end, "the manifest"));
    }
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        if w[1].0 < w[0].1 {
            return bad(format!(
                "{} (bytes {}..{}) overlaps {} (bytes {}..{})",
                describe(w[1].2),
                w[1].0,
                w[1].1,
                describe(w[0].2),
                w[0].0,
                w[0].1
            ));
        }
    }
    Ok(())
}

fn describe(name: &str) -> String {
    if name.starts_with("the ") {
        name.to_string()
    } else {
        format!("section `{name}`")
    }
}

fn expectation(m: &Manifest, name: &str) -> Result<Option<Expect>, Problem> {
    use ElemType::*;
    let fixed = |elem: &'static [ElemType], len: u64, what: &str| {
        Ok(Some(Expect { elem, len: Some(len), rows: len, what: what.to_string() }))
    };
    match name {
        "offsets" => fixed(&[U64], m.num_dst + 1, "the row offsets (num_dst + 1)"),
        "cols" => fixed(&[U32], m.num_edges, "the column indices (num_edges)"),
        "edge_ids" => fixed(&[U64], m.num_edges, "the edge ids (num_edges)"),
        "t_offsets" => fixed(&[U64], m.num_src + 1, "the transposed row offsets (num_src + 1)"),
        "t_cols" => fixed(&[U32], m.num_edges, "the transposed column indices (num_edges)"),
        "t_edge_ids" => fixed(&[U64], m.num_edges, "the transposed edge ids (num_edges)"),
        NODE_ORDER => fixed(&[U32], m.num_dst, "the node order (num_dst)"),
        NODE_ORDER_METHOD => fixed(&[U32], 1, "the node order's method"),
        _ => match parse_field_name(name) {
            None => Ok(None),
            Some(Err(message)) => Err(Problem::Manifest(message)),
            Some(Ok((role, _))) => {
                let (rows, count) = match role {
                    FieldRole::Src => (m.num_src, "num_src"),
                    FieldRole::Dst => (m.num_dst, "num_dst"),
                    FieldRole::Edge => (m.num_edges, "num_edges"),
                };
                Ok(Some(Expect { elem: &[F32, F64], len: None, rows, what: format!("a {role} field ({count} rows)") }))
            }
        },
    }
}
