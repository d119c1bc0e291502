//! Writing a `.gfg` file section by section, without the graph in memory.
//!
//! [`GfgWriter`](crate::writer::GfgWriter) needs a whole [`Graph`](tiga_runtime::Graph);
//! an out-of-core builder (`tigac convert`, [`GfgBuilder`](crate::external::GfgBuilder))
//! knows only the counts up front and then produces each array as a stream.
//! [`GfgStreamWriter`] takes the section table first (names, types,
//! shapes), lays the sections out exactly as the in-memory writer does (each
//! on a 4096-byte boundary, in table order, the manifest right after the
//! last one), and hands out one [`SectionSink`] per section; sinks write at
//! their own offsets, so several can be filled at once (a merge produces
//! `offsets`, `cols` and `edge_ids` together), and each computes its
//! section's CRC-32 and its blocks' (format version 2) as the bytes go by. [`GfgStreamWriter::finish`] then
//! writes the manifest and, last, the header, and fsyncs: the result is a
//! [`PendingGfg`] to commit (rename over the destination), with the same
//! crash safety as `save_gfg`. The bytes are those `save_gfg` would write
//! for the same arrays.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use crate::blocks::room_to_block;
use crate::error::GfgError;
use crate::format::{
    check_manifest, encode_manifest, BlockCrcs, ElemType, Header, Manifest, SectionInfo, BLOCK_LOG2, COL_WIDTH, EDGE_ID_WIDTH,
    FORMAT_MAJOR, FORMAT_MINOR, HEADER_LEN, MAX_MANIFEST_LEN, OFFSET_WIDTH, SECTION_ALIGN,
};
use crate::reader::problem;
use crate::writer::{create_temp, finish_temp, PendingGfg};

/// An element a section can hold, written little-endian.
pub trait StreamElem: Copy {
    const ELEM: ElemType;
    fn put(self, out: &mut Vec<u8>);
}

impl StreamElem for u32 {
    const ELEM: ElemType = ElemType::U32;
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}
impl StreamElem for u64 {
    const ELEM: ElemType = ElemType::U64;
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}
impl StreamElem for f32 {
    const ELEM: ElemType = ElemType::F32;
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}
impl StreamElem for f64 {
    const ELEM: ElemType = ElemType::F64;
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

/// One planned section: name, element type, shape (row-major).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionPlan {
    pub name: String,
    pub elem: ElemType,
    pub shape: Vec<u64>,
}

impl SectionPlan {
    pub fn new(name: impl Into<String>, elem: ElemType, shape: Vec<u64>) -> SectionPlan {
        SectionPlan { name: name.into(), elem, shape }
    }
}

/// A `.gfg` file being written section by section into a temporary file
/// beside its destination. Dropping it before [`finish`](Self::finish)
/// removes the temporary file and leaves the destination untouched.
#[derive(Debug)]
pub struct GfgStreamWriter {
    path: PathBuf,
    name: String,
    tmp: tempfile::NamedTempFile,
    /// The planned manifest; CRCs are filled in as sections complete.
    manifest: Manifest,
    done: Vec<bool>,
    opened: Vec<bool>,
    manifest_offset: u64,
    buf_bytes: usize,
}

/// Writes one section's elements in order, at the section's offset, and
/// computes its CRC-32. Hand it back with [`GfgStreamWriter::complete`].
#[derive(Debug)]
pub struct SectionSink<T> {
    index: usize,
    section: String,
    path: String,
    file: File,
    buf: Vec<u8>,
    cap: usize,
    /// The file position of `buf[0]`.
    pos: u64,
    /// The buffer is written out when it holds this many bytes: it then
    /// ends on an aligned block (`room_to_block`; sections start on 4096-byte
    /// boundaries and elements are 4 or 8 bytes, so the buffer reaches the
    /// point exactly).
    flush_at: usize,
    crcs: BlockCrcs,
    /// Elements still expected.
    left: u64,
    _t: PhantomData<T>,
}

impl<T: StreamElem> SectionSink<T> {
    /// Appends one element.
    #[inline]
    pub fn push(&mut self, x: T) -> Result<(), GfgError> {
        if self.left == 0 {
            return Err(self.overflow());
        }
        self.left -= 1;
        x.put(&mut self.buf);
        if self.buf.len() >= self.flush_at {
            self.flush_buf()?;
        }
        Ok(())
    }

    /// Appends elements in order.
    pub fn extend(&mut self, xs: &[T]) -> Result<(), GfgError> {
        for &x in xs {
            self.push(x)?;
        }
        Ok(())
    }

    /// Elements still to be written.
    pub fn remaining(&self) -> u64 {
        self.left
    }

    fn overflow(&self) -> GfgError {
        GfgError::Write {
            path: self.path.clone(),
            section: self.section.clone(),
            message: "more elements were written than its shape holds".into(),
        }
    }

    fn flush_buf(&mut self) -> Result<(), GfgError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        self.crcs.update(&self.buf);
        self.file.write_all(&self.buf).map_err(|source| GfgError::Io { path: self.path.clone(), source })?;
        self.pos += self.buf.len() as u64;
        self.flush_at = room_to_block(self.pos, self.cap);
        self.buf.clear();
        Ok(())
    }
}

impl GfgStreamWriter {
    /// Plans a file with these counts and sections (in file order: the
    /// in-memory writer's order is `offsets`, `cols`, `edge_ids`,
    /// `t_offsets`, `t_cols`, `t_edge_ids`, then fields), checks the plan
    /// against the format (required sections, known sections' types and
    /// shapes, field names), and creates the temporary file beside `path`.
    /// `buf_bytes` is each sink's write buffer.
    pub fn create(
        path: impl AsRef<Path>,
        num_src: u64,
        num_dst: u64,
        num_edges: u64,
        plan: &[SectionPlan],
        buf_bytes: usize,
    ) -> Result<GfgStreamWriter, GfgError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let mut pos = HEADER_LEN as u64;
        let mut sections = Vec::with_capacity(plan.len());
        let too_big =
            || GfgError::Manifest { path: name.clone(), message: "the planned sections overflow a u64 file size".into() };
        for s in plan {
            let elements = s.shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)).ok_or_else(too_big)?;
            let length = elements.checked_mul(s.elem.size() as u64).ok_or_else(too_big)?;
            let offset = pos.div_ceil(SECTION_ALIGN).checked_mul(SECTION_ALIGN).ok_or_else(too_big)?;
            pos = offset.checked_add(length).ok_or_else(too_big)?;
            // The block table's length follows from the section's; its
            // entries are filled in as the section completes.
            let blocks = vec![0; usize::try_from(length.div_ceil(1 << BLOCK_LOG2)).map_err(|_| too_big())?];
            sections.push(SectionInfo {
                name: s.name.clone(),
                elem: s.elem,
                shape: s.shape.clone(),
                offset,
                length,
                crc32: 0,
                blocks,
            });
        }
        let manifest = Manifest {
            major: FORMAT_MAJOR,
            minor: FORMAT_MINOR,
            num_src,
            num_dst,
            num_edges,
            offset_width: OFFSET_WIDTH,
            col_width: COL_WIDTH,
            edge_id_width: EDGE_ID_WIDTH,
            block_log2: BLOCK_LOG2,
            sections,
        };
        // The plan is checked as a reader would check the finished file.
        let body_len = encode_manifest(&manifest).len() as u64;
        if body_len > MAX_MANIFEST_LEN {
            return Err(GfgError::Manifest {
                path: name,
                message: format!(
                    "the manifest would be {body_len} bytes (the block tables of sections this large), more than the {MAX_MANIFEST_LEN} a reader accepts"
                ),
            });
        }
        let header =
            Header { major: FORMAT_MAJOR, minor: FORMAT_MINOR, manifest_offset: pos, manifest_len: body_len, manifest_crc32: 0 };
        check_manifest(&manifest, &header, pos + body_len).map_err(|p| problem(&name, pos + body_len, p))?;
        let io = |source| GfgError::Io { path: name.clone(), source };
        let tmp = create_temp(path).map_err(io)?;
        // Gaps between sections read as zeros, as the format requires.
        tmp.as_file().set_len(pos).map_err(io)?;
        let n = manifest.sections.len();
        Ok(GfgStreamWriter {
            path: path.to_path_buf(),
            name,
            tmp,
            manifest,
            done: vec![false; n],
            opened: vec![false; n],
            manifest_offset: pos,
            buf_bytes: buf_bytes.clamp(64, 64 << 20),
        })
    }

    /// The planned manifest (CRCs of unfinished sections are 0).
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Where the temporary file is.
    pub fn temp_path(&self) -> &Path {
        self.tmp.path()
    }

    /// A sink for section `name`, whose element type must be `T`. Each
    /// section is opened once.
    pub fn sink<T: StreamElem>(&mut self, name: &str) -> Result<SectionSink<T>, GfgError> {
        let bad = |message: String| GfgError::Write { path: self.name.clone(), section: name.to_string(), message };
        let Some(index) = self.manifest.sections.iter().position(|s| s.name == name) else {
            return Err(bad("the section is not in the plan".into()));
        };
        let s = &self.manifest.sections[index];
        if s.elem != T::ELEM {
            return Err(bad(format!("the section holds {}, not {}", s.elem, T::ELEM)));
        }
        if self.opened[index] {
            return Err(bad("the section is already being written".into()));
        }
        let io = |source| GfgError::Io { path: self.name.clone(), source };
        let mut file = OpenOptions::new().write(true).open(self.tmp.path()).map_err(io)?;
        file.seek(SeekFrom::Start(s.offset)).map_err(io)?;
        self.opened[index] = true;
        let cap = self.buf_bytes;
        Ok(SectionSink {
            index,
            section: name.to_string(),
            path: self.name.clone(),
            file,
            buf: Vec::with_capacity(cap + 8),
            cap,
            pos: s.offset,
            flush_at: room_to_block(s.offset, cap),
            crcs: BlockCrcs::new(BLOCK_LOG2),
            left: s.elements() as u64,
            _t: PhantomData,
        })
    }

    /// Finishes a section: every element must have been written.
    pub fn complete<T: StreamElem>(&mut self, mut sink: SectionSink<T>) -> Result<(), GfgError> {
        if sink.left != 0 {
            return Err(GfgError::Write {
                path: self.name.clone(),
                section: sink.section.clone(),
                message: format!("{} elements short of its shape", sink.left),
            });
        }
        sink.flush_buf()?;
        let (crc, blocks) = std::mem::replace(&mut sink.crcs, BlockCrcs::new(BLOCK_LOG2)).finish();
        let s = &mut self.manifest.sections[sink.index];
        s.crc32 = crc;
        s.blocks = blocks;
        self.done[sink.index] = true;
        Ok(())
    }

    /// Writes a whole section at once.
    pub fn write_section<T: StreamElem>(&mut self, name: &str, data: &[T]) -> Result<(), GfgError> {
        let mut sink = self.sink::<T>(name)?;
        sink.extend(data)?;
        self.complete(sink)
    }

    /// Writes the manifest and the header, fsyncs the temporary file, and
    /// returns it ready to replace the destination.
    pub fn finish(self) -> Result<PendingGfg, GfgError> {
        if let Some(k) = self.done.iter().position(|d| !d) {
            return Err(GfgError::Write {
                path: self.name.clone(),
                section: self.manifest.sections[k].name.clone(),
                message: "the section was never completed".into(),
            });
        }
        let io = |source| GfgError::Io { path: self.name.clone(), source };
        let body = encode_manifest(&self.manifest);
        let header = Header {
            major: FORMAT_MAJOR,
            minor: FORMAT_MINOR,
            manifest_offset: self.manifest_offset,
            manifest_len: body.len() as u64,
            manifest_crc32: crc32fast::hash(&body),
        };
        let mut f = self.tmp.as_file();
        f.seek(SeekFrom::Start(self.manifest_offset)).map_err(io)?;
        f.write_all(&body).map_err(io)?;
        f.flush().map_err(io)?;
        // The header goes last: until it is there, the file is not a .gfg.
        f.seek(SeekFrom::Start(0)).map_err(io)?;
        f.write_all(&header.encode()).map_err(io)?;
        finish_temp(f).map_err(io)?;
        Ok(PendingGfg::new(self.tmp, self.path))
    }

    /// [`finish`](Self::finish), then replace the destination.
    pub fn save(self) -> Result<(), GfgError> {
        self.finish()?.commit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{reader::GfgFile, writer::save_gfg};
    use tiga_runtime::graph::Graph;
    use tiga_runtime::tensor::TensorView;
    use tiga_runtime::FieldRole;

    #[test]
    fn streamed_sections_match_save_gfg_and_plans_are_checked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let g = Graph::from_edges(3, 3, &[1, 0, 0, 2], &[0, 1, 0, 2]).expect("graph");
        let x = [1.5f32, -0.0, f32::NAN];
        let reference = dir.path().join("r.gfg");
        save_gfg(&reference, &g, false, &[(FieldRole::Src, "x", TensorView::from_slice_f32(vec![3], &x).expect("view"))])
            .expect("save");
        let out = dir.path().join("s.gfg");
        let plan = [
            SectionPlan::new("offsets", ElemType::U64, vec![4]),
            SectionPlan::new("cols", ElemType::U32, vec![4]),
            SectionPlan::new("edge_ids", ElemType::U64, vec![4]),
            SectionPlan::new("field.src.x", ElemType::F32, vec![3]),
        ];
        let mut w = GfgStreamWriter::create(&out, 3, 3, 4, &plan, 64).expect("create");
        // Sections may be filled in any order, several at once.
        let mut ids = w.sink::<u64>("edge_ids").expect("sink");
        let mut cols = w.sink::<u32>("cols").expect("sink");
        for p in 0..4 {
            cols.push(g.cols()[p]).expect("push");
            ids.push(g.edge_id(p)).expect("push");
        }
        assert!(ids.push(0).is_err(), "overflow is refused");
        w.complete(cols).expect("complete");
        w.complete(ids).expect("complete");
        w.write_section("field.src.x", &x).expect("field");
        assert!(w.sink::<u32>("offsets").is_err(), "wrong element type");
        let short = w.sink::<u64>("offsets").expect("sink");
        assert!(w.complete(short).is_err(), "short section");
        let w2 = GfgStreamWriter::create(&out, 3, 3, 4, &plan, 64).expect("create");
        assert!(w2.finish().is_err(), "unfinished sections");
        drop(w);
        let mut w = GfgStreamWriter::create(&out, 3, 3, 4, &plan, 64).expect("create");
        w.write_section("offsets", g.offsets()).expect("offsets");
        w.write_section("cols", g.cols()).expect("cols");
        w.write_section("edge_ids", g.edge_ids().expect("ids")).expect("ids");
        w.write_section("field.src.x", &x).expect("field");
        w.save().expect("save");
        assert_eq!(std::fs::read(&out).expect("read"), std::fs::read(&reference).expect("read"));
        GfgFile::open(&out).expect("open").validate().expect("valid");

        let e = GfgStreamWriter::create(&out, 3, 3, 4, &plan[1..], 64).expect_err("no offsets");
        assert!(e.to_string().contains("offsets"), "{e}");
        let bad = [SectionPlan::new("offsets", ElemType::U64, vec![5]), SectionPlan::new("cols", ElemType::U32, vec![4])];
        assert!(GfgStreamWriter::create(&out, 3, 3, 4, &bad, 64).is_err(), "offsets of the wrong shape");
    }
}
