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
use tiga_runtime::renumber::Renumbered;
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

/// The node order `file` was written in, if any: user node `u` is file row
/// `perm[u]`, file row `r` user node `inv[r]` (the sources share it when the
/// graph is square, else keep their ids).
fn stored_order(file: &GfgFile) -> Result<Option<Arc<Renumbered>>, ShardError> {
    file.node_order().map_err(file_error)
}

/// The destination partition of `file`'s rows, in the caller's numbering:
/// contiguous blocks at once; a partition that needs the adjacency
/// computed at rank 0 and shared. A file in a node order is balanced on
/// the caller's degrees and METIS-partitioned as stored (the same graph,
/// relabelled), each node then given its stored row's part.
fn file_partition(
    file: &GfgFile,
    order: Option<&Renumbered>,
    comm: &dyn Communicator,
    choice: &PartitionChoice,
) -> Result<Partition, ShardError> {
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
        let perm = order.map(|o| o.dst.perm());
        let p = match method {
            Method::Balanced => match perm {
                None => Partition::balanced(offsets, world)?,
                Some(perm) => {
                    let mut user = Vec::with_capacity(nd + 1);
                    user.push(0u64);
                    for &r in perm {
                        let r = r as usize;
                        user.push(user[user.len() - 1] + (offsets[r + 1] - offsets[r]));
                    }
                    Partition::balanced(&user, world)?
                }
            },
            _ => {
                if file.num_src() != nd {
                    return Err(PartitionError::NotSquare { num_src: file.num_src(), num_dst: nd }.into());
                }
                let stored = Partition::metis(nd, offsets, file.cols().map_err(file_error)?, world)?;
                match perm {
                    None => stored,
                    Some(perm) => {
                        let parts = perm.iter().map(|&r| stored.part_of(r as usize) as u32).collect();
                        Partition::from_parts(parts, world)?.with_method(Method::Metis)
                    }
                }
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
/// run of consecutive rows of the file at a time. The result is a graph in
/// the caller's numbering over all the file's rows in which the rows not
/// read are empty (each row's edges in the file's order), and `ids[p]` the
/// user edge of its position `p`. A file in a node order is read at its
/// stored rows (`perm[u]`) and relabelled back (rows and, when square,
/// columns through `inv`).
fn read_rows(file: &GfgFile, order: Option<&Renumbered>, owned: &[u32], depth: usize) -> Result<(Graph, Vec<u64>), ShardError> {
    let (ns, nd) = (file.num_src(), file.num_dst());
    let to_file = |u: u32| order.map_or(u, |o| o.dst.perm()[u as usize]) as usize;
    let row_of = |r: usize| order.map_or(r, |o| o.dst.inv()[r] as usize);
    let col_inv = order.and_then(|o| o.src_order()).map(|o| o.inv());
    // Runs as read (file rows, offsets from 0, columns, edge ids), not a
    // vector per row: a rank reads each run once and copies it once.
    let mut read: Vec<ReadRun> = Vec::new();
    let mut seen = vec![false; nd];
    let mut level: Vec<usize> = owned.iter().map(|&u| to_file(u)).collect();
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
    // Each read row's length at its caller's row, then the rows' edges at
    // their offsets.
    let mut offsets = vec![0u64; nd + 1];
    for (run, o, ..) in &read {
        for (k, w) in o.windows(2).enumerate() {
            offsets[row_of(run.start + k) + 1] = w[1] - w[0];
        }
    }
    for i in 0..nd {
        offsets[i + 1] += offsets[i];
    }
    let total = offsets[nd] as usize;
    let (mut cols, mut ids) = (vec![0u32; total], vec![0u64; total]);
    for (run, o, c, e) in &read {
        for (k, w) in o.windows(2).enumerate() {
            let at = offsets[row_of(run.start + k)] as usize;
            let (a, b) = (w[0] as usize, w[1] as usize);
            match col_inv {
                Some(inv) => {
                    for (dst, &src) in cols[at..at + b - a].iter_mut().zip(&c[a..b]) {
                        *dst = inv[src as usize];
                    }
                }
                None => cols[at..at + b - a].copy_from_slice(&c[a..b]),
            }
            ids[at..at + b - a].copy_from_slice(&e[a..b]);
        }
    }
    Ok((Graph::from_csr(ns, nd, offsets, cols).map_err(PlanError::from)?, ids))
}

/// The caller's rows `rows` of `file` (stored in a node order or not),
/// read a run of consecutive stored rows at a time: a graph in the
/// caller's numbering over every row of the file, the rows not asked for
/// empty, and the user edge id of each of its positions. What a process
/// that serves some rows of a file reads (a graph-store server).
pub fn read_caller_rows(file: &GfgFile, rows: &[u32]) -> Result<(Graph, Vec<u64>), ShardError> {
    let order = stored_order(file)?;
    read_rows(file, order.as_deref(), rows, 1)
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
        let order = stored_order(&file)?;
        let dst = file_partition(&file, order.as_deref(), comm.as_ref(), choice)?;
        let src = if ns == nd { dst.clone() } else { Partition::contiguous(ns, world)? };
        let (partial, ids) = read_rows(&file, order.as_deref(), dst.owned(rank), depth)?;
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
    /// consecutive stored rows at a time (a file in a node order stores
    /// node `u`'s row at `perm[u]`); `None` when the graph has no file or
    /// the file no such field.
    pub fn stored_owned(&self, role: FieldRole, name: &str) -> Option<Result<Tensor, ShardError>> {
        let file = self.file.as_ref()?;
        let h = file.field(role, name).ok()?;
        let read = || -> Result<Tensor, ShardError> {
            let order = stored_order(file)?;
            let (ids, order): (Vec<usize>, Option<&tiga_runtime::Order>) = match role {
                FieldRole::Src => {
                    (self.owned_src().iter().map(|&u| u as usize).collect(), order.as_deref().and_then(|o| o.src_order()))
                }
                FieldRole::Dst => (self.owned_dst().iter().map(|&u| u as usize).collect(), order.as_deref().map(|o| &o.dst)),
                FieldRole::Edge => (self.owned_edges().iter().map(|&e| e as usize).collect(), None),
            };
            // (stored row, position in owned order), by stored row.
            let mut at: Vec<(usize, usize)> =
                ids.iter().enumerate().map(|(p, &u)| (order.map_or(u, |o| o.perm()[u] as usize), p)).collect();
            at.sort_unstable();
            let mut shape = h.shape().to_vec();
            shape[0] = ids.len();
            let width: usize = shape[1..].iter().product();
            let mut v32 = if h.dtype() == tiga_runtime::DType::F32 { vec![0f32; ids.len() * width] } else { Vec::new() };
            let mut v64 = if h.dtype() == tiga_runtime::DType::F64 { vec![0f64; ids.len() * width] } else { Vec::new() };
            let mut next = 0;
            for run in runs(at.iter().map(|&(r, _)| r)) {
                let dest = &at[next..next + run.len()];
                next += run.len();
                match h.rows(run).map_err(file_error)? {
                    Data::F32(d) => scatter_rows(&mut v32, d, dest, width),
                    Data::F64(d) => scatter_rows(&mut v64, d, dest, width),
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

/// Row `k` of `rows` into row `dest[k].1` of `out`, rows `width` wide.
fn scatter_rows<T: Copy>(out: &mut [T], rows: &[T], dest: &[(usize, usize)], width: usize) {
    for (row, &(_, p)) in rows.chunks_exact(width.max(1)).zip(dest) {
        out[p * width..(p + 1) * width].copy_from_slice(&row[..width]);
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
