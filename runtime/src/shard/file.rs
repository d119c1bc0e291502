//! A sharded graph read from a `.gfg` file shared by every rank: each rank
//! reads its own rows' page of the adjacency and its own rows of the stored
//! fields, never the rest of the file.
//!
//! The partition is contiguous (each rank's rows are one range of the
//! file's rows, so its page is one read and its fields one range each): a
//! partition that needs the whole graph (edge-balanced, METIS) needs the
//! whole adjacency, so it is made from the graph in memory
//! ([`Sharded::from_graph`]). Ghosts are found from the rank's own rows and
//! asked of their owners, as for any sharded graph. Stored edge fields are
//! read by range too, which holds when the file's CSR order is the user's
//! edge order (no stored edge ids); with stored edge ids, a rank's edges
//! are scattered over the field and the ids must be checked as a whole, so
//! such a file is loaded whole instead.

use std::sync::Arc;

use super::{exchange_requests, take_rows, LocalShard, PlanError, ShardError, Sharded};
use crate::comm::{check_same, Communicator};
use crate::partition::{owned_range, Method, Partition};
use crate::storage::{FieldRole, GfgFile};
use crate::{Graph, Tensor};

/// A checksum of what ranks must agree on: the file's manifest (sizes,
/// sections and their CRCs).
fn manifest_checksum(file: &GfgFile) -> u64 {
    let text = format!("{:?}", file.manifest());
    u64::from(crc32fast::hash(text.as_bytes())) | ((text.len() as u64) << 32)
}

impl Sharded {
    /// This rank's part of the graph in `file`, which every rank opened
    /// (its manifest is compared across ranks), in contiguous blocks of
    /// rows, ghosts one hop deep. Fields the calls do not pass come from
    /// the file, each rank reading its own rows.
    pub fn from_gfg(file: GfgFile, comm: Arc<dyn Communicator>) -> Result<Sharded, ShardError> {
        check_same(comm.as_ref(), "graph file", manifest_checksum(&file))?;
        let (world, rank) = (comm.size(), comm.rank());
        let (ns, nd) = (file.num_src(), file.num_dst());
        let rows = owned_range(nd, world, rank);
        let page = if file.has_edge_ids() { file.page(rows.clone()) } else { file.page_without_ids(rows.clone(), false) }
            .map_err(|e| ShardError::Usage(e.to_string()))?;
        // A graph with this rank's rows and no others (the plan reads only
        // the owned rows' adjacency at depth 1).
        let first = page.offsets.first().copied().unwrap_or(0);
        let mut offsets = vec![0u64; nd + 1];
        for (k, &o) in page.offsets.iter().enumerate() {
            offsets[rows.start + k] = o - first;
        }
        let last = offsets[rows.end];
        for o in offsets.iter_mut().skip(rows.end + 1) {
            *o = last;
        }
        let partial = Graph::from_csr(ns, nd, offsets, page.cols.to_vec()).map_err(PlanError::from)?;
        let dst = Partition::contiguous(nd, world)?;
        let src = if ns == nd { dst.clone() } else { Partition::contiguous(ns, world)? };
        let mut local = LocalShard::build(&partial, &dst, &src, rank, 1)?;
        // Positions in the partial graph are positions in the page: the
        // page says which user edge each is.
        for id in local.edge_ids.iter_mut() {
            *id = page.edge_id(*id as usize);
        }
        file.release_page(&page);
        local.num_edges = file.num_edges();
        let plan = exchange_requests(comm.as_ref(), local)?;
        let mut sh = Sharded::from_plan(plan, comm, Method::Contiguous);
        sh.file = Some(file);
        Ok(sh)
    }

    /// The file this sharded graph was read from, if any.
    pub fn file(&self) -> Option<&GfgFile> {
        self.file.as_ref()
    }

    /// This rank's rows of the stored field `name` (owned sources,
    /// destinations or edges, in owned order), read from the file; `None`
    /// when the graph has no file or the file no such field.
    pub fn stored_owned(&self, role: FieldRole, name: &str) -> Option<Result<Tensor, ShardError>> {
        let file = self.file.as_ref()?;
        let h = file.field(role, name).ok()?;
        let read = || -> Result<Tensor, ShardError> {
            let usage = |e: crate::GfgError| ShardError::Usage(e.to_string());
            let ids: Vec<usize> = match role {
                FieldRole::Src => self.owned_src().iter().map(|&u| u as usize).collect(),
                FieldRole::Dst => self.owned_dst().iter().map(|&u| u as usize).collect(),
                FieldRole::Edge => self.owned_edges().iter().map(|&e| e as usize).collect(),
            };
            // Owned rows are one range in a contiguous partition (edges:
            // the owned rows' span); read just that range.
            let (lo, hi) = match (ids.first(), ids.last()) {
                (Some(&a), Some(&b)) => (a, b + 1),
                _ => (0, 0),
            };
            let data = h.rows(lo..hi).map_err(usage)?;
            let mut shape = h.shape().to_vec();
            shape[0] = hi - lo;
            let t = take_rows(data, &shape, ids.iter().map(|&i| i - lo))?;
            h.release();
            Ok(t)
        };
        Some(read())
    }
}
