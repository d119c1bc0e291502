//! The `.gfg` format read and written from `docs/gfg.md` alone, independent
//! of the crate's own reader and writer (it also checks that the document
//! is enough to read and write the format), and the sample files the
//! robustness tests patch. Shared by the test files that include it; each
//! uses part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use tiga_runtime::{FieldRole, Graph};
use tiga_storage::{GfgError, GfgFile, GfgWriter};

#[derive(Debug, Clone, PartialEq)]
pub struct RawSection {
    pub name: String,
    pub code: u8,
    pub shape: Vec<u64>,
    pub offset: u64,
    pub length: u64,
    pub crc: u32,
    /// Version 2: the block table.
    pub blocks: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RawManifest {
    /// From the header.
    pub major: u16,
    pub num_src: u64,
    pub num_dst: u64,
    pub num_edges: u64,
    /// Index widths, then (version 2) log2 of the block size.
    pub widths: [u8; 4],
    pub sections: Vec<RawSection>,
}

impl RawManifest {
    pub fn section(&self, name: &str) -> &RawSection {
        self.sections.iter().find(|s| s.name == name).expect("section")
    }
}

pub fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}
pub fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The manifest's (offset, length) from a valid header.
pub fn manifest_range(file: &[u8]) -> (usize, usize) {
    (u64_at(file, 16) as usize, u64_at(file, 24) as usize)
}

pub fn read_raw(file: &[u8]) -> RawManifest {
    assert_eq!(&file[..8], b"TIGAGFG\0");
    let major = u16_at(file, 8);
    let (mo, ml) = manifest_range(file);
    let m = &file[mo..mo + ml];
    assert_eq!(crc32fast::hash(m), u32_at(file, 32));
    assert_eq!(crc32fast::hash(&file[..60]), u32_at(file, 60));
    let widths: [u8; 4] = m[24..28].try_into().expect("4 bytes");
    let mut at = 32;
    let count = u32_at(m, 28);
    let mut sections = Vec::new();
    for _ in 0..count {
        let len = u16_at(m, at) as usize;
        let name = String::from_utf8(m[at + 2..at + 2 + len].to_vec()).expect("utf-8");
        at += 2 + len;
        let (code, rank) = (m[at], m[at + 1] as usize);
        at += 4;
        let shape = (0..rank).map(|k| u64_at(m, at + 8 * k)).collect();
        at += 8 * rank;
        let (offset, length, crc) = (u64_at(m, at), u64_at(m, at + 8), u32_at(m, at + 16));
        at += 20;
        let mut blocks = Vec::new();
        if major >= 2 {
            let n = length.div_ceil(1 << widths[3]) as usize;
            blocks = (0..n).map(|k| u32_at(m, at + 4 * k)).collect();
            at += 4 * n;
        }
        sections.push(RawSection { name, code, shape, offset, length, crc, blocks });
    }
    assert_eq!(at, ml, "the manifest has trailing bytes");
    RawManifest { major, num_src: u64_at(m, 0), num_dst: u64_at(m, 8), num_edges: u64_at(m, 16), widths, sections }
}

pub fn encode_raw(m: &RawManifest) -> Vec<u8> {
    let mut out = Vec::new();
    for v in [m.num_src, m.num_dst, m.num_edges] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&m.widths);
    out.extend_from_slice(&(m.sections.len() as u32).to_le_bytes());
    for s in &m.sections {
        out.extend_from_slice(&(s.name.len() as u16).to_le_bytes());
        out.extend_from_slice(s.name.as_bytes());
        out.extend_from_slice(&[s.code, s.shape.len() as u8, 0, 0]);
        for d in &s.shape {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&s.offset.to_le_bytes());
        out.extend_from_slice(&s.length.to_le_bytes());
        out.extend_from_slice(&s.crc.to_le_bytes());
        if m.major >= 2 {
            for b in &s.blocks {
                out.extend_from_slice(&b.to_le_bytes());
            }
        }
    }
    out
}

/// Replaces the manifest (at the end of the file) by `body` and rewrites
/// the header's manifest fields and checksums.
pub fn replace_manifest_bytes(file: &mut Vec<u8>, body: &[u8]) {
    let (mo, _) = manifest_range(file);
    file.truncate(mo);
    file.extend_from_slice(body);
    file[24..32].copy_from_slice(&(body.len() as u64).to_le_bytes());
    file[32..36].copy_from_slice(&crc32fast::hash(body).to_le_bytes());
    fix_header_crc(file);
}

pub fn write_raw(file: &mut Vec<u8>, m: &RawManifest) {
    file[8..10].copy_from_slice(&m.major.to_le_bytes());
    replace_manifest_bytes(file, &encode_raw(m));
}

pub fn fix_header_crc(file: &mut [u8]) {
    let crc = crc32fast::hash(&file[..60]);
    file[60..64].copy_from_slice(&crc.to_le_bytes());
}

/// Recomputes the manifest's checksum after its bytes were edited in place.
pub fn fix_manifest_crc(file: &mut [u8]) {
    let (mo, ml) = manifest_range(file);
    let crc = crc32fast::hash(&file[mo..mo + ml]);
    file[32..36].copy_from_slice(&crc.to_le_bytes());
    fix_header_crc(file);
}

fn section_bytes<'f>(file: &'f [u8], s: &RawSection) -> &'f [u8] {
    &file[s.offset as usize..(s.offset + s.length) as usize]
}

/// Recomputes every section's checksums (whole and blocks) after section
/// bytes were edited: only the invariant checks can then catch the edit.
pub fn fix_section_crcs(file: &mut Vec<u8>) {
    let mut m = read_raw(file);
    let block = 1usize << m.widths[3];
    for s in &mut m.sections {
        let bytes = section_bytes(file, s);
        s.crc = crc32fast::hash(bytes);
        if m.major >= 2 {
            s.blocks = bytes.chunks(block).map(crc32fast::hash).collect();
        }
    }
    write_raw(file, &m);
}

/// Recomputes only the whole-section checksums, as a version 1 tool
/// would: the block table still tells.
pub fn fix_whole_crcs_only(file: &mut Vec<u8>) {
    let mut m = read_raw(file);
    for s in &mut m.sections {
        s.crc = crc32fast::hash(section_bytes(file, s));
    }
    write_raw(file, &m);
}

/// The same file in format version 1: no block tables, byte 27 zero.
pub fn to_version_1(file: &[u8]) -> Vec<u8> {
    let mut m = read_raw(file);
    m.major = 1;
    m.widths[3] = 0;
    for s in &mut m.sections {
        s.blocks.clear();
    }
    let mut b = file.to_vec();
    write_raw(&mut b, &m);
    b
}

/// The element offset of `name` in `file`.
pub fn at(file: &[u8], name: &str) -> usize {
    read_raw(file).section(name).offset as usize
}

/// A small graph with edge ids, a transpose and fields of every role.
pub fn sample_graph() -> Graph {
    Graph::from_edges(4, 5, &[1, 2, 0, 3, 1, 2, 2, 0], &[0, 3, 0, 1, 3, 0, 0, 4]).expect("graph")
}

pub fn sample(dir: &Path, transpose: bool) -> (PathBuf, Vec<u8>) {
    let g = sample_graph();
    let h: Vec<f32> = (0..8).map(|k| k as f32 * 0.5).collect();
    let d = [1.0f64, -2.0, 3.5, 0.0, 9.0];
    let w: Vec<f32> = (0..8).map(|k| k as f32).collect();
    let path = dir.join("sample.gfg");
    GfgWriter::new(&g)
        .with_transpose(transpose)
        .field(FieldRole::Src, "h", tiga_runtime::TensorView::from_slice_f32(vec![4, 2], &h).expect("h"))
        .field(FieldRole::Dst, "d", &d[..])
        .field(FieldRole::Edge, "w", &w)
        .save(&path)
        .expect("save");
    let bytes = std::fs::read(&path).expect("read");
    (path, bytes)
}

/// The bytes of `sample`, made once per process.
pub fn sample_bytes(transpose: bool) -> Vec<u8> {
    static CACHE: std::sync::OnceLock<[Vec<u8>; 2]> = std::sync::OnceLock::new();
    let cache = CACHE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        [sample(dir.path(), false).1, sample(dir.path(), true).1]
    });
    cache[usize::from(transpose)].clone()
}

pub fn open_bytes(path: &Path, bytes: &[u8]) -> Result<GfgFile, GfgError> {
    std::fs::write(path, bytes).expect("write");
    GfgFile::open(path)
}

pub fn open_err(path: &Path, bytes: &[u8]) -> GfgError {
    match open_bytes(path, bytes) {
        Ok(_) => panic!("expected {} to be refused", path.display()),
        Err(e) => e,
    }
}
