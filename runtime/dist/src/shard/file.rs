//! A sharded graph read from a `.gfg` file shared by every rank: each rank
//! reads its own rows' pages of the adjacency and its own rows of the
//! stored fields, never the rest of the file.
//!
//! Contiguous blocks need nothing else: each rank's rows are one range of
//! the file's rows. An edge-balanced partition needs every row's degree and
//! METIS the whole adjacency: rank 0 reads them (the offsets; the offsets
//! and columns) to partition, and sends every rank each node's part; the
//! other ranks still read only their own rows, one page per run of
//! consecutive owned rows. Ghosts are found from the rank's own rows and
//! asked of their owners, as for any sharded graph. A halo k hops deep
//! reads, besides, the rows of the ghosts of levels 1..k-1 (whose rows the
//! rank computes too), a level at a time: still never the whole file.
//!
//! Stored fields are read by runs of consecutive owned rows too. A file
//! with stored edge ids (one converted from an edge list) costs more: its
//! edge-id section is checked as a whole once (it must be a permutation
//! before any read goes through it), and a rank's edges are scattered over
//! its stored edge fields (pass edge fields in the call to avoid reading
//! them there).

use std::ops::Range;
use std::sync::Arc;

use super::{exchange_requests, partition_at_root, LocalShard, PartitionChoice, PlanError, ShardError, ShardOptions, Sharded};
use crate::comm::{check_same, Communicator};
use crate::partition::{Method, Partition, PartitionError};
use tiga_runtime::{Data, Graph, Tensor};
use tiga_storage::{FieldRole, GfgFile};

/// A checksum of what ranks must agree on: the file's manifest (sizes,
/// sections and their CRCs).
fn manifest_checksum(file: &GfgFile) -> u64 {
    let text = format!("{:?}", file.manifest());
    u64::from(crc32fast::hash(text.as_bytes())) | ((text.len() as u64) << 32)
}

/// Maximal runs of consecutive values of an increasing list.
fn runs(ids: impl Iterator<Item = usize>) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    for i in ids {
        match out.last_mut() {
            Some(r) if r.end == i => r.end += 1,
            _ => out.push(i..i + 1),
        }
    }
    out
}

fn file_error(e: tiga_storage::GfgError) -> ShardError {
    ShardError::Usage(e.to_string())
}

/// The destination partition of `file`'s rows: contiguous blocks at once;
/// a partition that needs the adjacency computed at rank 0 and shared.
fn file_partition(file: &GfgFile, comm: &dyn Communicator, choice: &PartitionChoice) -> Result<Partition, ShardError> {
    let (world, nd) = (comm.size(), file.num_dst());
    let method = match choice {
        PartitionChoice::Contiguous => return Ok(Partition::contiguous(nd, world)?),
        PartitionChoice::Given(p) => {
            if p.num_nodes() != nd || p.parts() != world {
                return Err(ShardError::Usage(format!(
                    "a given partition of {} nodes into {} parts, for {nd} rows over {world} ranks",
                    p.num_nodes(),
                    p.parts()
                )));
            }
            return Ok(p.clone());
        }
        PartitionChoice::Balanced => Method::Balanced,
        PartitionChoice::Metis => Method::Metis,
    };
    partition_at_root(comm, nd, method, || {
        let offsets = file.offsets().map_err(file_error)?;
        let p = match method {
            Method::Balanced => Partition::balanced(offsets, world)?,
            _ => {
                if file.num_src() != nd {
                    return Err(PartitionError::NotSquare { num_src: file.num_src(), num_dst: nd }.into());
                }
                Partition::metis(nd, offsets, file.cols().map_err(file_error)?, world)?
            }
        };
        file.release_adjacency();
        Ok(p)
    })
}

/// A run of rows as read: the rows, their offsets from 0, columns and edge ids.
type ReadRun = (Range<usize>, Vec<u64>, Vec<u32>, Vec<u64>);

/// The rows [`LocalShard::build`] walks for a halo `depth` hops deep: the
/// owned rows, then the ghost rows of levels 1..depth-1 (the sources their
/// rows read, which are rows of a square graph), read level by level, a
/// run of consecutive rows at a time. The result is a graph over all the
/// file's rows in which the rows not read are empty, and `ids[p]` the
/// user edge of its position `p`.
fn read_rows(file: &GfgFile, owned: &[u32], depth: usize) -> Result<(Graph, Vec<u64>), ShardError> {
    let (ns, nd) = (file.num_src(), file.num_dst());
    // Runs as read (rows, offsets from 0, columns, edge ids), not a vector
    // per row: at depth 1 a rank reads its runs once and copies them once.
    let mut read: Vec<ReadRun> = Vec::new();
    let mut seen = vec![false; nd];
    let mut level: Vec<usize> = owned.iter().map(|&u| u as usize).collect();
    level.sort_unstable();
    for l in 0..depth {
        for &r in &level {
            seen[r] = true;
        }
        let mut next = Vec::new();
        for run in runs(level.iter().copied()) {
            let page = if file.has_edge_ids() { file.page(run.clone()) } else { file.page_without_ids(run.clone(), false) }
                .map_err(file_error)?;
            let first = page.offsets.first().copied().unwrap_or(0);
            if l + 1 < depth {
                next.extend(page.cols.iter().map(|&c| c as usize).filter(|&c| !seen[c]));
            }
            let offsets = page.offsets.iter().map(|&o| o - first).collect();
            let ids = (0..page.cols.len()).map(|p| page.edge_id(p)).collect();
            read.push((run, offsets, page.cols.to_vec(), ids));
            file.release_page(&page);
        }
        next.sort_unstable();
        next.dedup();
        if next.is_empty() {
            break;
        }
        level = next;
    }
    read.sort_unstable_by_key(|(run, ..)| run.start);
    let mut offsets = vec![0u64; nd + 1];
    let (mut cols, mut ids) = (Vec::new(), Vec::new());
    let mut next_row = 0;
    for (run, o, c, e) in &read {
        for x in offsets.iter_mut().take(run.start + 1).skip(next_row + 1) {
            *x = cols.len() as u64;
        }
        let base = cols.len() as u64;
        for (k, &v) in o.iter().enumerate().skip(1) {
            offsets[run.start + k] = base + v;
        }
        cols.extend_from_slice(c);
        ids.extend_from_slice(e);
        next_row = run.end;
    }
    for x in offsets.iter_mut().skip(next_row + 1) {
        *x = cols.len() as u64;
    }
    Ok((Graph::from_csr(ns, nd, offsets, cols).map_err(PlanError::from)?, ids))
}

impl Sharded {
    /// This rank's part of the graph in `file`, which every rank opened
    /// (its manifest is compared across ranks), in contiguous blocks of
    /// rows, ghosts one hop deep. Fields the calls do not pass come from
    /// the file, each rank reading its own rows.
    pub fn from_gfg(file: GfgFile, comm: Arc<dyn Communicator>) -> Result<Sharded, ShardError> {
        Self::from_gfg_with(file, comm, &PartitionChoice::Contiguous)
    }

    /// [`Sharded::from_gfg`] with the rows cut as `choice` says (see the
    /// module doc for what each partition reads).
    pub fn from_gfg_with(file: GfgFile, comm: Arc<dyn Communicator>, choice: &PartitionChoice) -> Result<Sharded, ShardError> {
        Self::from_gfg_options(file, comm, &ShardOptions { partition: choice.clone(), depth: 1 })
    }

    /// [`Sharded::from_gfg`] with the rows cut as `opts.partition` says and
    /// ghosts `opts.depth` hops deep: a rank reads its own rows, then the
    /// ghost rows of each level below the depth (a square graph's sources
    /// are rows too), one level at a time.
    pub fn from_gfg_options(file: GfgFile, comm: Arc<dyn Communicator>, opts: &ShardOptions) -> Result<Sharded, ShardError> {
        let (choice, depth) = (&opts.partition, opts.depth);
        if file.has_node_order() {
            return Err(ShardError::Usage(format!(
                "{} is stored in a node order (written with --renumber); a sharded run partitions the caller's numbering: \
                 shard a .gfg written without --renumber (each rank's partition orders its rows already)",
                file.path().display()
            )));
        }
        check_same(comm.as_ref(), "graph file", manifest_checksum(&file))?;
        let (world, rank) = (comm.size(), comm.rank());
        let (ns, nd) = (file.num_src(), file.num_dst());
        // Refused before any read, with the plan's own messages.
        if depth == 0 || depth > 255 {
            return Err(PlanError::Depth(depth).into());
        }
        if depth > 1 && ns != nd {
            return Err(PlanError::DepthNeedsSquare { num_src: ns, num_dst: nd }.into());
        }
        let dst = file_partition(&file, comm.as_ref(), choice)?;
        let src = if ns == nd { dst.clone() } else { Partition::contiguous(ns, world)? };
        let (partial, ids) = read_rows(&file, dst.owned(rank), depth)?;
        let mut local = LocalShard::build(&partial, &dst, &src, rank, depth)?;
        for id in local.edge_ids.iter_mut() {
            *id = ids[*id as usize];
        }
        local.num_edges = file.num_edges();
        let plan = exchange_requests(comm.as_ref(), local)?;
        let mut sh = Sharded::from_plan(plan, comm, dst.method());
        sh.file = Some(file);
        Ok(sh)
    }

    /// The file this sharded graph was read from, if any.
    pub fn file(&self) -> Option<&GfgFile> {
        self.file.as_ref()
    }

    /// This rank's rows of the stored field `name` (owned sources,
    /// destinations or edges, in owned order), read from the file a run of
    /// consecutive rows at a time; `None` when the graph has no file or the
    /// file no such field.
    pub fn stored_owned(&self, role: FieldRole, name: &str) -> Option<Result<Tensor, ShardError>> {
        let file = self.file.as_ref()?;
        let h = file.field(role, name).ok()?;
        let read = || -> Result<Tensor, ShardError> {
            let ids: Vec<usize> = match role {
                FieldRole::Src => self.owned_src().iter().map(|&u| u as usize).collect(),
                FieldRole::Dst => self.owned_dst().iter().map(|&u| u as usize).collect(),
                FieldRole::Edge => self.owned_edges().iter().map(|&e| e as usize).collect(),
            };
            let mut shape = h.shape().to_vec();
            shape[0] = ids.len();
            let (mut v32, mut v64) = (Vec::new(), Vec::new());
            for run in runs(ids.iter().copied()) {
                match h.rows(run).map_err(file_error)? {
                    Data::F32(d) => v32.extend_from_slice(d),
                    Data::F64(d) => v64.extend_from_slice(d),
                    // A `.gfg` stores f32 and f64 fields only.
                    Data::F16(_) | Data::BF16(_) => {
                        return Err(ShardError::Usage(format!(
                            "stored field `{name}` is half-precision; a .gfg holds f32 and f64"
                        )))
                    }
                }
            }
            let t = match h.dtype() {
                tiga_runtime::DType::F32 => Tensor::from_f32(shape, v32),
                tiga_runtime::DType::F64 => Tensor::from_f64(shape, v64),
            };
            h.release();
            t.map_err(|e| ShardError::Usage(format!("stored field `{name}`: {e}")))
        };
        Some(read())
    }
}

#[cfg(test)]
mod tests {
    use super::runs;

    #[test]
    fn runs_of_consecutive_ids() {
        assert_eq!(runs([0, 1, 2, 5, 6, 9].into_iter()), vec![0..3, 5..7, 9..10]);
        assert!(runs(std::iter::empty()).is_empty());
    }
}
