//! Automatic offload: graphs over a RAM budget live on disk.
//!
//! Inside [`with_ram_budget`] (or with `TIGA_GRAPH_RAM_BUDGET` set, in
//! bytes), the builders here return an [`AnyGraph`]: the CSR in memory when
//! it fits the budget, else persisted as a `.gfg` (with its transpose, so
//! gradients run paged too) and reopened paged. Offloaded files go to
//! `TIGA_SPILL_DIR` when set (they outlive the process; the path is kept in
//! the handle) or to a private temporary directory removed when the last
//! handle to the graph is dropped.
//!
//! The kernel is the same either way: [`Kernel::run_any`] and
//! [`Kernel::vjp_any`] dispatch to the in-memory or the paged runner, and
//! give the same numbers (see `tests/paged.rs`).
//!
//! This increment builds the CSR in memory before deciding (the budget
//! bounds what is *kept*); builders that stream straight to disk
//! (`tigac convert`'s external sort) are the next step for graphs whose
//! construction itself does not fit.

use std::cell::Cell;
use std::path::PathBuf;
use std::sync::Arc;

use tiga_runtime::storage::{save_gfg, GfgFile};
use tiga_runtime::{Graph, TensorView};

use crate::call::{Inputs, Outputs};
use crate::vjp::Gradients;
use crate::{Error, Kernel, PageOptions, Result};

thread_local! {
    static BUDGET: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Run `f` with a RAM budget for graphs built inside it (on this thread).
pub fn with_ram_budget<R>(bytes: u64, f: impl FnOnce() -> R) -> R {
    let prev = BUDGET.with(|b| b.replace(Some(bytes)));
    let r = f();
    BUDGET.with(|b| b.set(prev));
    r
}

/// The budget in force: the innermost [`with_ram_budget`], else
/// `TIGA_GRAPH_RAM_BUDGET`, else none.
pub fn ram_budget() -> Option<u64> {
    BUDGET.with(|b| b.get()).or_else(|| std::env::var("TIGA_GRAPH_RAM_BUDGET").ok().and_then(|v| v.trim().parse().ok()))
}

/// Bytes a CSR graph holds in memory.
pub fn graph_bytes(g: &Graph) -> u64 {
    (g.offsets().len() * 8 + g.cols().len() * 4 + g.edge_ids().map(|e| e.len() * 8).unwrap_or(0)) as u64
}

/// A graph in memory or on disk (paged).
#[derive(Debug, Clone)]
pub enum AnyGraph {
    Memory(Arc<Graph>),
    Paged(Arc<PagedGraph>),
}

/// An offloaded graph: its file, and the temporary directory that holds it
/// when it is not in `TIGA_SPILL_DIR` (removed with the last handle).
#[derive(Debug)]
pub struct PagedGraph {
    pub file: GfgFile,
    pub path: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl AnyGraph {
    pub fn is_paged(&self) -> bool {
        matches!(self, AnyGraph::Paged(_))
    }
    pub fn num_src(&self) -> usize {
        match self {
            AnyGraph::Memory(g) => g.num_src(),
            AnyGraph::Paged(p) => p.file.num_src(),
        }
    }
    pub fn num_dst(&self) -> usize {
        match self {
            AnyGraph::Memory(g) => g.num_dst(),
            AnyGraph::Paged(p) => p.file.num_dst(),
        }
    }
    pub fn num_edges(&self) -> usize {
        match self {
            AnyGraph::Memory(g) => g.num_edges(),
            AnyGraph::Paged(p) => p.file.num_edges(),
        }
    }
    /// Where an offloaded graph lives.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            AnyGraph::Memory(_) => None,
            AnyGraph::Paged(p) => Some(&p.path),
        }
    }
}

static SPILL_COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Keep `g` in memory if it fits the budget, else persist it and return the
/// paged handle.
pub fn offload(g: Graph) -> Result<AnyGraph> {
    let Some(budget) = ram_budget() else { return Ok(AnyGraph::Memory(Arc::new(g))) };
    if graph_bytes(&g) <= budget {
        return Ok(AnyGraph::Memory(Arc::new(g)));
    }
    let n = SPILL_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("graph-{}-{n}.gfg", std::process::id());
    let (dir, path) = match std::env::var_os("TIGA_SPILL_DIR") {
        Some(d) => {
            let d = PathBuf::from(d);
            std::fs::create_dir_all(&d).map_err(|e| Error::Call(format!("TIGA_SPILL_DIR {}: {e}", d.display())))?;
            (None, d.join(name))
        }
        None => {
            let t = tempfile::Builder::new()
                .prefix("tiga-spill-")
                .tempdir()
                .map_err(|e| Error::Call(format!("cannot create a spill directory: {e}")))?;
            let p = t.path().join(name);
            (Some(t), p)
        }
    };
    let empty: [(tiga_runtime::storage::FieldRole, &str, TensorView<'_>); 0] = [];
    save_gfg(&path, &g, true, &empty).map_err(|e| Error::Call(e.to_string()))?;
    drop(g);
    let file = GfgFile::open(&path).map_err(|e| Error::Call(e.to_string()))?;
    Ok(AnyGraph::Paged(Arc::new(PagedGraph { file, path, _dir: dir })))
}

/// Builders that respect the budget.
pub mod build {
    use super::*;

    pub fn from_edges(num_src: usize, num_dst: usize, src: &[u32], dst: &[u32]) -> Result<AnyGraph> {
        offload(Graph::from_edges(num_src, num_dst, src, dst)?)
    }
    pub fn from_csr(num_src: usize, num_dst: usize, offsets: Vec<u64>, cols: Vec<u32>) -> Result<AnyGraph> {
        offload(Graph::from_csr(num_src, num_dst, offsets, cols)?)
    }
    pub fn stencil(shape: &[usize], neighbors: &[Vec<i64>], periodic: bool) -> Result<AnyGraph> {
        offload(Graph::stencil(shape, neighbors, periodic)?)
    }
    /// Graphs side by side: node ids of each part are shifted past the
    /// previous parts' (a block-diagonal union), edges in part order.
    pub fn concat(parts: &[&Graph]) -> Result<AnyGraph> {
        let (mut src, mut dst) = (Vec::new(), Vec::new());
        let (mut ns, mut nd) = (0usize, 0usize);
        for g in parts {
            let (s, d) = g.coo_in_user_order();
            let (so, dof) = (u32::try_from(ns), u32::try_from(nd));
            let (Ok(so), Ok(dof)) = (so, dof) else {
                return Err(Error::Call("concatenated graph has more than 2^32 nodes".into()));
            };
            src.extend(s.iter().map(|x| x + so));
            dst.extend(d.iter().map(|x| x + dof));
            ns += g.num_src();
            nd += g.num_dst();
        }
        from_edges(ns, nd, &src, &dst)
    }
}

impl Kernel {
    /// Run on a graph in memory or offloaded (paged with `opts`).
    pub fn run_any(&self, g: &AnyGraph, inputs: &Inputs<'_>, opts: &PageOptions) -> Result<Outputs> {
        match g {
            AnyGraph::Memory(m) => self.run(m, inputs),
            AnyGraph::Paged(p) => self.run_paged(&p.file, inputs, opts),
        }
    }

    /// The VJP on a graph in memory or offloaded.
    pub fn vjp_any(
        &self,
        g: &AnyGraph,
        inputs: &Inputs<'_>,
        cotangents: &[(&str, TensorView<'_>)],
        opts: &PageOptions,
    ) -> Result<Gradients> {
        match g {
            AnyGraph::Memory(m) => self.vjp(m, inputs, cotangents),
            AnyGraph::Paged(p) => self.vjp_paged(&p.file, inputs, cotangents, opts),
        }
    }
}
