//! Building a `.gfg` from an edge stream larger than memory: an external
//! sort.
//!
//! [`GfgBuilder`] takes edges `src -> dst` one at a time, in the user's edge
//! order (edge `e` is the `e`-th pushed). It keeps at most a chunk of
//! `memory_bytes / 2` worth of `(dst, src, e)` records (16 bytes each, in a
//! buffer allocated once at its final size, so it never grows past the
//! budget); a full chunk is sorted in place by `(dst, e)` (so edges of one
//! row stay in the user's order: the stable sort the in-memory
//! `Graph::from_edges` does) and spilled as a sorted run to a temporary file
//! beside the destination; with a transpose, the same chunk is then sorted
//! by `(src, dst, e)` (the order of `Graph::transpose`: rows by source,
//! within a row in CSR order of the original) and spilled to a second file.
//!
//! [`GfgBuilder::finish`] merges the runs (a k-way merge; when there are
//! more runs than the budget's fan-in, intermediate passes merge groups of
//! them into longer runs first) and streams the merged edges straight into
//! the `offsets`, `cols` and `edge_ids` sections of a
//! [`GfgStreamWriter`](crate::stream::GfgStreamWriter) (and the transposed ones
//! from the second merge). The file is byte for byte what `save_gfg` writes
//! for the graph `Graph::from_edges` builds from the same edges: `edge_ids`
//! (or `t_edge_ids`) is omitted when it is the identity, which the builder
//! knows from the input order alone (destinations non-decreasing; `(src,
//! dst)` pairs non-decreasing).
//!
//! Memory: the chunk (`memory_bytes / 2`), then, once it is freed, the merge
//! buffers (fan-in × an I/O buffer of at most `memory_bytes / 64`, at
//! least 4 KiB, at most 1 MiB; fan-in at least 4, at most 128) and the
//! sinks' buffers. Disk: 16 bytes per edge per sort for the runs (twice
//! that during an intermediate pass), plus the output.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use tiga_runtime::graph::MAX_NODES;

use crate::error::GfgError;
use crate::format::ElemType;
use crate::stream::{GfgStreamWriter, SectionPlan, SectionSink};
use crate::writer::PendingGfg;

/// How a [`GfgBuilder`] uses memory, and what it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildOptions {
    /// The memory budget in bytes: half of it holds the chunk being sorted,
    /// and the merge's buffers fit in the other half.
    pub memory_bytes: usize,
    /// Also write the transposed CSR (`t_offsets`, `t_cols`, `t_edge_ids`).
    pub transpose: bool,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions { memory_bytes: 1 << 30, transpose: false }
    }
}

/// What [`GfgBuilder::finish`] is doing, for progress reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildPhase {
    /// An intermediate pass merging groups of runs into longer runs.
    MergeRuns,
    /// The final merge, writing `offsets`, `cols`, `edge_ids`.
    Csr,
    /// The final merge of the transposed runs.
    TransposedCsr,
}

impl BuildPhase {
    pub fn name(self) -> &'static str {
        match self {
            BuildPhase::MergeRuns => "merging runs",
            BuildPhase::Csr => "writing CSR",
            BuildPhase::TransposedCsr => "writing transposed CSR",
        }
    }
}

/// What a build did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuildStats {
    pub num_src: u64,
    pub num_dst: u64,
    pub num_edges: u64,
    /// Edges per sorted chunk.
    pub chunk_edges: usize,
    /// Sorted runs spilled (per sort).
    pub runs: usize,
    /// Merge passes over the forward runs, the final one included.
    pub merge_passes: usize,
    /// The most runs merged at once.
    pub fan_in: usize,
    /// Whether `edge_ids` / `t_edge_ids` were stored (not the identity).
    pub edge_ids: bool,
    pub t_edge_ids: bool,
}

/// One edge in a run: `row` is the CSR row (destination, or source for the
/// transpose), `col` the other end, `e` the user's edge index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rec {
    row: u32,
    col: u32,
    e: u64,
}

const REC_BYTES: usize = 16;

impl Rec {
    fn encode(self) -> [u8; REC_BYTES] {
        let mut b = [0u8; REC_BYTES];
        b[0..4].copy_from_slice(&self.row.to_le_bytes());
        b[4..8].copy_from_slice(&self.col.to_le_bytes());
        b[8..16].copy_from_slice(&self.e.to_le_bytes());
        b
    }
    fn decode(b: &[u8; REC_BYTES]) -> Rec {
        Rec {
            row: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            col: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            e: u64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]),
        }
    }
}

/// The sort order of runs: unique per edge (it ends in `e`).
type Key = fn(&Rec) -> (u32, u32, u64);

/// The CSR order: by row, then the user's order.
fn csr_key(r: &Rec) -> (u32, u32, u64) {
    (r.row, 0, r.e)
}

/// The transposed order: by row (source), then column (destination), then
/// the user's order, i.e. `Graph::transpose`'s CSR order of the original.
fn transposed_key(r: &Rec) -> (u32, u32, u64) {
    (r.row, r.col, r.e)
}

#[derive(Debug, Clone, Copy)]
struct Run {
    /// First record and record count in the spill file.
    start: u64,
    len: u64,
}

/// A temporary file of sorted runs, written sequentially.
#[derive(Debug)]
struct Spill {
    file: tempfile::NamedTempFile,
    w: BufWriter<File>,
    runs: Vec<Run>,
    written: u64,
}

impl Spill {
    fn new(dir: &Path, prefix: &str, io_buf: usize) -> std::io::Result<Spill> {
        let file = tempfile::Builder::new().prefix(prefix).suffix(".run").tempfile_in(dir)?;
        let w = BufWriter::with_capacity(io_buf, file.as_file().try_clone()?);
        Ok(Spill { file, w, runs: Vec::new(), written: 0 })
    }

    fn push(&mut self, r: Rec) -> std::io::Result<()> {
        self.w.write_all(&r.encode())?;
        self.written += 1;
        Ok(())
    }

    /// Ends the run that started at record `start`.
    fn end_run(&mut self, start: u64) {
        if self.written > start {
            self.runs.push(Run { start, len: self.written - start });
        }
    }
}

/// Reads one run back.
struct RunReader {
    r: BufReader<File>,
    left: u64,
}

impl RunReader {
    fn next(&mut self) -> std::io::Result<Option<Rec>> {
        if self.left == 0 {
            return Ok(None);
        }
        let mut b = [0u8; REC_BYTES];
        self.r.read_exact(&mut b)?;
        self.left -= 1;
        Ok(Some(Rec::decode(&b)))
    }
}

/// Builds a `.gfg` from edges pushed in the user's order, within a memory
/// budget; see the module doc. Dropping it removes its temporary files.
#[derive(Debug)]
pub struct GfgBuilder {
    out: PathBuf,
    name: String,
    dir: PathBuf,
    prefix: String,
    transpose: bool,
    chunk: Vec<Rec>,
    chunk_cap: usize,
    io_buf: usize,
    fan_in: usize,
    fwd: Option<Spill>,
    tr: Option<Spill>,
    num_edges: u64,
    max_src: Option<u32>,
    max_dst: Option<u32>,
    prev: Option<(u32, u32)>,
    dst_sorted: bool,
    pairs_sorted: bool,
}

/// Progress callback: `(phase, done, total)` in edges.
pub type Progress<'a> = &'a mut dyn FnMut(BuildPhase, u64, u64);

impl GfgBuilder {
    /// A builder for `out`; creates its temporary run files in `out`'s
    /// directory now, so an unwritable destination fails before any input
    /// is read.
    pub fn new(out: impl AsRef<Path>, opts: BuildOptions) -> Result<GfgBuilder, GfgError> {
        let out = out.as_ref();
        let name = out.display().to_string();
        let dir = match out.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let file = out.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        let prefix = format!(".{file}.");
        let half = opts.memory_bytes / 2;
        let chunk_cap = (half / std::mem::size_of::<Rec>()).max(16);
        let io_buf = (opts.memory_bytes / 64).clamp(4 << 10, 1 << 20);
        let fan_in = (half / io_buf).clamp(4, 128);
        let spill = |what: &str| {
            Spill::new(&dir, &prefix, io_buf).map_err(|source| GfgError::Io {
                path: format!("{name}: cannot create a temporary {what} file in {}", dir.display()),
                source,
            })
        };
        let fwd = spill("run")?;
        let tr = if opts.transpose { Some(spill("run")?) } else { None };
        Ok(GfgBuilder {
            out: out.to_path_buf(),
            name: name.clone(),
            dir: dir.clone(),
            prefix: prefix.clone(),
            transpose: opts.transpose,
            // Allocated once at its final size: a growing Vec would overshoot
            // the budget (capacity doubling, and old + new during a move).
            chunk: Vec::with_capacity(chunk_cap),
            chunk_cap,
            io_buf,
            fan_in,
            fwd: Some(fwd),
            tr,
            num_edges: 0,
            max_src: None,
            max_dst: None,
            prev: None,
            dst_sorted: true,
            pairs_sorted: true,
        })
    }

    /// Edges pushed so far.
    pub fn num_edges(&self) -> u64 {
        self.num_edges
    }

    /// Sorted runs spilled so far (per sort).
    pub fn runs(&self) -> usize {
        self.fwd.as_ref().map_or(0, |f| f.runs.len())
    }

    /// The largest source and destination ids pushed so far.
    pub fn max_ids(&self) -> (Option<u32>, Option<u32>) {
        (self.max_src, self.max_dst)
    }

    fn io(&self, source: std::io::Error) -> GfgError {
        GfgError::Io { path: format!("{} (temporary run file in {})", self.name, self.dir.display()), source }
    }

    /// Adds edge `src -> dst`, the next in the user's order.
    #[inline]
    pub fn push(&mut self, src: u32, dst: u32) -> Result<(), GfgError> {
        if let Some((ps, pd)) = self.prev {
            if dst < pd {
                self.dst_sorted = false;
            }
            if (src, dst) < (ps, pd) {
                self.pairs_sorted = false;
            }
        }
        self.prev = Some((src, dst));
        self.max_src = Some(self.max_src.map_or(src, |m| m.max(src)));
        self.max_dst = Some(self.max_dst.map_or(dst, |m| m.max(dst)));
        self.chunk.push(Rec { row: dst, col: src, e: self.num_edges });
        self.num_edges += 1;
        if self.chunk.len() >= self.chunk_cap {
            self.spill_chunk()?;
        }
        Ok(())
    }

    fn spill_chunk(&mut self) -> Result<(), GfgError> {
        if self.chunk.is_empty() {
            return Ok(());
        }
        // Keys are unique (they end in the edge index), so an unstable,
        // in-place sort gives the stable order without a scratch buffer.
        self.chunk.sort_unstable_by_key(csr_key);
        if let Some(fwd) = self.fwd.as_mut() {
            let start = fwd.written;
            let mut err = None;
            for &r in &self.chunk {
                if let Err(e) = fwd.push(r) {
                    err = Some(e);
                    break;
                }
            }
            if let Some(e) = err {
                return Err(self.io(e));
            }
            fwd.end_run(start);
        }
        if let Some(tr) = &mut self.tr {
            for r in &mut self.chunk {
                std::mem::swap(&mut r.row, &mut r.col);
            }
            self.chunk.sort_unstable_by_key(transposed_key);
            let start = tr.written;
            let mut err = None;
            for &r in &self.chunk {
                if let Err(e) = tr.push(r) {
                    err = Some(e);
                    break;
                }
            }
            if let Some(e) = err {
                return Err(self.io(e));
            }
            tr.end_run(start);
        }
        self.chunk.clear();
        Ok(())
    }

    /// Merges the runs and writes the file, for a graph of `num_src`
    /// sources and `num_dst` destinations (every pushed id must be in
    /// range); returns it ready to replace the destination, and what the
    /// build did.
    pub fn finish(mut self, num_src: u64, num_dst: u64, progress: Progress<'_>) -> Result<(PendingGfg, BuildStats), GfgError> {
        let name = self.name.clone();
        let bad = |message: String| GfgError::Build { path: name.clone(), message };
        for (what, n) in [("sources", num_src), ("destinations", num_dst)] {
            if n > MAX_NODES as u64 {
                return Err(bad(format!("{n} {what} exceed the maximum of {MAX_NODES} (node ids are u32)")));
            }
        }
        if let Some(m) = self.max_src.filter(|&m| u64::from(m) >= num_src) {
            return Err(bad(format!("source id {m} is out of range for {num_src} sources")));
        }
        if let Some(m) = self.max_dst.filter(|&m| u64::from(m) >= num_dst) {
            return Err(bad(format!("destination id {m} is out of range for {num_dst} destinations")));
        }
        self.spill_chunk()?;
        // Free the chunk before the merge buffers are allocated.
        self.chunk = Vec::new();
        let mut fwd = self.fwd.take().ok_or_else(|| bad("the builder was already finished".into()))?;
        fwd.w.flush().map_err(|e| self.io(e))?;
        let mut tr = self.tr.take();
        if let Some(tr) = &mut tr {
            tr.w.flush().map_err(|e| self.io(e))?;
        }

        let e = self.num_edges;
        let edge_ids = !self.dst_sorted;
        let t_edge_ids = self.transpose && !self.pairs_sorted;
        let mut plan =
            vec![SectionPlan::new("offsets", ElemType::U64, vec![num_dst + 1]), SectionPlan::new("cols", ElemType::U32, vec![e])];
        if edge_ids {
            plan.push(SectionPlan::new("edge_ids", ElemType::U64, vec![e]));
        }
        if self.transpose {
            plan.push(SectionPlan::new("t_offsets", ElemType::U64, vec![num_src + 1]));
            plan.push(SectionPlan::new("t_cols", ElemType::U32, vec![e]));
            if t_edge_ids {
                plan.push(SectionPlan::new("t_edge_ids", ElemType::U64, vec![e]));
            }
        }
        let mut w = GfgStreamWriter::create(&self.out, num_src, num_dst, e, &plan, self.io_buf)?;
        let mut stats = BuildStats {
            num_src,
            num_dst,
            num_edges: e,
            chunk_edges: self.chunk_cap,
            runs: fwd.runs.len(),
            merge_passes: 0,
            fan_in: fwd.runs.len().min(self.fan_in),
            edge_ids,
            t_edge_ids,
        };

        let (fwd, passes) = self.reduce(fwd, csr_key, progress)?;
        stats.merge_passes = passes + 1;
        self.write_csr(&mut w, &fwd, csr_key, ["offsets", "cols", "edge_ids"], num_dst, edge_ids, BuildPhase::Csr, progress)?;
        drop(fwd);
        if let Some(tr) = tr {
            let (tr, _) = self.reduce(tr, transposed_key, progress)?;
            self.write_csr(
                &mut w,
                &tr,
                transposed_key,
                ["t_offsets", "t_cols", "t_edge_ids"],
                num_src,
                t_edge_ids,
                BuildPhase::TransposedCsr,
                progress,
            )?;
        }
        let pending = w.finish()?;
        Ok((pending, stats))
    }

    /// [`finish`](Self::finish), then replace the destination.
    pub fn save(self, num_src: u64, num_dst: u64, progress: Progress<'_>) -> Result<BuildStats, GfgError> {
        let (pending, stats) = self.finish(num_src, num_dst, progress)?;
        pending.commit()?;
        Ok(stats)
    }

    fn fresh_spill(&self) -> Result<Spill, GfgError> {
        Spill::new(&self.dir, &self.prefix, self.io_buf).map_err(|e| self.io(e))
    }

    /// Intermediate passes until at most `fan_in` runs remain; returns the
    /// spill holding them and the number of passes.
    fn reduce(&self, mut spill: Spill, key: Key, progress: Progress<'_>) -> Result<(Spill, usize), GfgError> {
        let mut passes = 0;
        while spill.runs.len() > self.fan_in {
            let mut next = self.fresh_spill()?;
            let total = spill.written;
            let mut done = 0u64;
            for group in spill.runs.chunks(self.fan_in) {
                let start = next.written;
                self.merge(&spill, group, key, &mut |r| {
                    next.push(r).map_err(|e| self.io(e))?;
                    done += 1;
                    if done & 0xffff == 0 {
                        progress(BuildPhase::MergeRuns, done, total);
                    }
                    Ok(())
                })?;
                next.end_run(start);
            }
            next.w.flush().map_err(|e| self.io(e))?;
            progress(BuildPhase::MergeRuns, total, total);
            spill = next;
            passes += 1;
        }
        Ok((spill, passes))
    }

    /// Merges `runs` of `spill` in `key` order into `emit`.
    fn merge(
        &self,
        spill: &Spill,
        runs: &[Run],
        key: Key,
        emit: &mut dyn FnMut(Rec) -> Result<(), GfgError>,
    ) -> Result<(), GfgError> {
        let io = |e| self.io(e);
        let buf = (self.io_buf).max(REC_BYTES);
        let mut readers = Vec::with_capacity(runs.len());
        let mut heap = BinaryHeap::with_capacity(runs.len());
        for (k, run) in runs.iter().enumerate() {
            let mut f = spill.file.reopen().map_err(io)?;
            f.seek(SeekFrom::Start(run.start * REC_BYTES as u64)).map_err(io)?;
            let mut r = RunReader { r: BufReader::with_capacity(buf, f), left: run.len };
            if let Some(rec) = r.next().map_err(io)? {
                heap.push(Reverse((key(&rec), k, rec.row, rec.col)));
            }
            readers.push(r);
        }
        while let Some(Reverse(((_, _, e), k, row, col))) = heap.pop() {
            emit(Rec { row, col, e })?;
            if let Some(rec) = readers[k].next().map_err(io)? {
                heap.push(Reverse((key(&rec), k, rec.row, rec.col)));
            }
        }
        Ok(())
    }

    /// The final merge: streams rows in order into the three sections.
    #[allow(clippy::too_many_arguments)]
    fn write_csr(
        &self,
        w: &mut GfgStreamWriter,
        spill: &Spill,
        key: Key,
        names: [&str; 3],
        num_rows: u64,
        with_ids: bool,
        phase: BuildPhase,
        progress: Progress<'_>,
    ) -> Result<(), GfgError> {
        let mut offsets: SectionSink<u64> = w.sink(names[0])?;
        let mut cols: SectionSink<u32> = w.sink(names[1])?;
        let mut ids: Option<SectionSink<u64>> = if with_ids { Some(w.sink(names[2])?) } else { None };
        let total = spill.written;
        let mut next_row = 0u64;
        let mut pos = 0u64;
        self.merge(spill, &spill.runs, key, &mut |r| {
            while next_row <= u64::from(r.row) {
                offsets.push(pos)?;
                next_row += 1;
            }
            cols.push(r.col)?;
            if let Some(ids) = &mut ids {
                ids.push(r.e)?;
            }
            pos += 1;
            if pos & 0xffff == 0 {
                progress(phase, pos, total);
            }
            Ok(())
        })?;
        while next_row <= num_rows {
            offsets.push(pos)?;
            next_row += 1;
        }
        progress(phase, pos, total);
        w.complete(offsets)?;
        w.complete(cols)?;
        if let Some(ids) = ids {
            w.complete(ids)?;
        }
        Ok(())
    }
}

/// The tests' one generator (shared with the other suites).
#[cfg(test)]
#[path = "../../../compiler/tests/common/rng.rs"]
mod test_rng;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{reader::GfgFile, writer::save_gfg};
    use tiga_runtime::graph::Graph;

    use super::test_rng::Rng;

    fn build(dir: &Path, name: &str, n: u32, src: &[u32], dst: &[u32], memory: usize, transpose: bool) -> (PathBuf, BuildStats) {
        let out = dir.join(name);
        let mut b = GfgBuilder::new(&out, BuildOptions { memory_bytes: memory, transpose }).expect("builder");
        for (&s, &d) in src.iter().zip(dst) {
            b.push(s, d).expect("push");
        }
        let stats = b.save(u64::from(n), u64::from(n), &mut |_, _, _| {}).expect("save");
        (out, stats)
    }

    #[test]
    fn external_build_is_byte_identical_to_save_gfg() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut rng = Rng(7);
        for (case, (n, m, memory)) in
            [(1u32, 0usize, 4096usize), (5, 3, 4096), (37, 900, 4096), (200, 5000, 1 << 14), (64, 3000, 1 << 30)]
                .into_iter()
                .enumerate()
        {
            let src: Vec<u32> = (0..m).map(|_| (rng.next() % u64::from(n)) as u32).collect();
            let dst: Vec<u32> = (0..m).map(|_| (rng.next() % u64::from(n)) as u32).collect();
            let g = Graph::from_edges(n as usize, n as usize, &src, &dst).expect("graph");
            for transpose in [false, true] {
                let (out, stats) = build(dir.path(), &format!("c{case}{transpose}.gfg"), n, &src, &dst, memory, transpose);
                assert_eq!(stats.num_edges, m as u64);
                let reference = dir.path().join(format!("r{case}{transpose}.gfg"));
                save_gfg(&reference, &g, transpose, &[]).expect("save_gfg");
                assert_eq!(std::fs::read(&out).expect("read"), std::fs::read(&reference).expect("read"), "case {case}");
                let f = GfgFile::open(&out).expect("open");
                f.validate().expect("valid");
                assert_eq!(f.load_graph().expect("load"), g);
            }
        }
        // Sorted inputs store no edge ids; only temporary files were removed.
        let src: Vec<u32> = vec![0, 0, 1, 2, 2];
        let dst: Vec<u32> = vec![0, 1, 1, 0, 2];
        let (out, stats) = build(dir.path(), "sorted.gfg", 3, &src, &dst, 4096, true);
        assert!(stats.edge_ids && !stats.t_edge_ids);
        let f = GfgFile::open(&out).expect("open");
        assert!(!f.sections().iter().any(|s| s.name == "t_edge_ids"));
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".run") && !n.ends_with(".tmp")), "{names:?}");
    }

    #[test]
    fn many_runs_take_several_passes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut rng = Rng(3);
        let (n, m) = (50u32, 20_000usize);
        let src: Vec<u32> = (0..m).map(|_| (rng.next() % u64::from(n)) as u32).collect();
        let dst: Vec<u32> = (0..m).map(|_| (rng.next() % u64::from(n)) as u32).collect();
        let (out, stats) = build(dir.path(), "g.gfg", n, &src, &dst, 4096, true);
        assert!(stats.runs > 100 && stats.merge_passes >= 3, "{stats:?}");
        let g = Graph::from_edges(n as usize, n as usize, &src, &dst).expect("graph");
        let f = GfgFile::open(&out).expect("open");
        assert_eq!(f.load_graph().expect("load"), g);
        assert_eq!(f.load_transposed().expect("load").expect("transposed"), g.transpose());
    }

    #[test]
    fn out_of_range_ids_and_bad_destinations_are_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("g.gfg");
        let mut b = GfgBuilder::new(&out, BuildOptions::default()).expect("builder");
        b.push(0, 4).expect("push");
        let e = b.finish(5, 4, &mut |_, _, _| {}).expect_err("out of range");
        assert!(e.to_string().contains("destination id 4 is out of range for 4 destinations"), "{e}");
        assert!(!out.exists());
        let e = GfgBuilder::new(dir.path().join("missing/g.gfg"), BuildOptions::default()).expect_err("no dir");
        assert!(e.to_string().contains("cannot create a temporary run file"), "{e}");
    }
}
