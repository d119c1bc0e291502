//! Automatic offload: graphs over a RAM budget live on disk.
//!
//! Inside [`with_ram_budget`] (or [`with_schedule`], whose schedule names a
//! budget), the builders here return an [`AnyGraph`]: the CSR in memory
//! when it fits the budget, else persisted as a `.gfg` (with its transpose,
//! so gradients run paged too) and reopened paged. Offloaded files go to
//! the schedule's spill directory when it names one (they outlive the
//! process; the path is kept in the handle) or to a private temporary
//! directory removed when the last handle to the graph is dropped. The
//! library reads no environment variable: a program that wants
//! `TIGA_GRAPH_RAM_BUDGET` and `TIGA_SPILL_DIR` passes
//! [`tiga_runtime::Schedule::from_env`] to [`with_schedule`].
//!
//! The kernel is the same either way: an [`AnyGraph`] is a
//! [`Realization`], so `kernel.run(&any, ..)` and `kernel.vjp(&any, ..)`
//! run in memory or paged, with the same numbers (see `tiga/tests/paged.rs`).
//!
//! A builder whose CSR would be over the budget never builds it: it streams
//! the edges (in the user's order) through the external sort of `tigac
//! convert` ([`GfgBuilder`], its memory bounded by the budget) straight into
//! the file, transpose included. The file is byte for byte what saving the
//! in-memory graph would write. Whether a graph is over the budget is
//! decided from its sizes before building: `from_edges` and `concat` know
//! their exact CSR bytes; `stencil` uses its most edges (nodes × offsets),
//! so a stencil whose borders bring it just under the budget is streamed
//! too. `from_csr` gets the CSR already built by the caller; what it avoids
//! is a second copy (the transpose).

use std::path::PathBuf;
use std::sync::Arc;

use tiga_runtime::exec::{ExecError, Side};
use tiga_runtime::{FieldRole, Graph, GraphError, Realization, Rows, Schedule, StencilPlan};

use crate::error::GfgError;
use crate::external::{BuildOptions, GfgBuilder};
use crate::reader::GfgFile;

/// Why a graph could not be built under the budget.
#[derive(Debug, thiserror::Error)]
pub enum OffloadError {
    /// The graph itself is refused (an id out of range, too many nodes).
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// The spill directory could not be made.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// Writing the offloaded `.gfg`.
    #[error("offloading a graph over the RAM budget: {source}")]
    Write {
        #[source]
        source: GfgError,
    },
    /// Reopening the offloaded `.gfg`.
    #[error(transparent)]
    Open(GfgError),
}

type Result<T, E = OffloadError> = std::result::Result<T, E>;

/// One scope's settings: its RAM budget and spill directory.
type Scope = (Option<u64>, Option<PathBuf>);

thread_local! {
    /// The budget and spill directory in force on this thread, innermost
    /// scope last.
    static AMBIENT: std::cell::RefCell<Vec<Scope>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Run `f` with one more scope in force, on a rayon pool whose every worker
/// starts with this thread's scopes plus the new one. A thread local alone
/// would hold on the calling thread only, and a process-wide setting would
/// leak into calls running concurrently under another budget (other
/// threads, other tests); a pool per scope gives `f` and every parallel
/// iterator it runs on that pool the same view, and nothing else sees it.
/// The pool has as many threads as the pool the scope is entered from. The
/// last few pools are kept (see [`scope_pool`]), so a loop that enters the
/// same scope each step, or scopes nested inside a `par_iter`, start no new
/// threads.
fn with_ambient<R: Send>(scope: Scope, f: impl FnOnce() -> R + Send) -> R {
    let mut seed = AMBIENT.with(|a| a.borrow().clone());
    seed.push(scope.clone());
    match scope_pool(rayon::current_num_threads(), seed) {
        Some(pool) => pool.install(f),
        // No threads to be had: the scope still holds on this thread (and
        // so for every call made from it), as it did before workers saw it.
        None => {
            let depth = AMBIENT.with(|a| {
                let mut a = a.borrow_mut();
                let depth = a.len();
                a.push(scope);
                depth
            });
            let _guard = AmbientGuard(depth);
            f()
        }
    }
}

/// Pools kept for scopes, most recently used last.
static SCOPE_POOLS: std::sync::Mutex<Vec<ScopePool>> = std::sync::Mutex::new(Vec::new());
/// How many pools [`SCOPE_POOLS`] keeps; the least recently used goes (its
/// threads end once their work is done).
const KEPT_POOLS: usize = 8;

/// A pool whose workers see `scopes`, with `threads` threads.
struct ScopePool {
    threads: usize,
    scopes: Vec<Scope>,
    pool: Arc<rayon::ThreadPool>,
}

/// The pool for `scopes` with `threads` threads: a kept one, else a new
/// one (kept in turn). `None` when no thread can be started.
fn scope_pool(threads: usize, scopes: Vec<Scope>) -> Option<Arc<rayon::ThreadPool>> {
    let mut kept = SCOPE_POOLS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(i) = kept.iter().position(|p| p.threads == threads && p.scopes == scopes) {
        let hit = kept.remove(i);
        let pool = hit.pool.clone();
        kept.push(hit);
        return Some(pool);
    }
    let seed = scopes.clone();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("tiga-budget-{i}"))
        .start_handler(move |_| AMBIENT.with(|a| *a.borrow_mut() = seed.clone()))
        .build()
        .ok()
        .map(Arc::new)?;
    if kept.len() >= KEPT_POOLS {
        kept.remove(0);
    }
    kept.push(ScopePool { threads, scopes, pool: pool.clone() });
    Some(pool)
}

/// Ends a scope pushed on this thread when dropped: on return and on a
/// panic alike.
struct AmbientGuard(usize);

impl Drop for AmbientGuard {
    fn drop(&mut self) {
        AMBIENT.with(|a| a.borrow_mut().truncate(self.0));
    }
}

/// Run `f` with a RAM budget for graphs built inside it and for the row
/// outputs of paged calls made inside it (sugar for a [`Schedule`] with
/// that budget, for code that builds graphs far from where it calls
/// kernels). The budget holds for `f` and for the rayon parallel iterators
/// `f` runs on its pool (a graph built inside a `par_iter` of `f` sees it;
/// work sent to another pool, such as a call whose schedule names its own
/// thread count, does not), and ends when `f` returns or panics; the
/// innermost scope wins.
///
/// `f` runs on a worker of the scope's rayon pool (the size of the pool it
/// is called from), not on the calling thread: hence the `Send` bounds, and
/// so a lock the caller holds across the call (a `StdoutLock`, a `RefCell`
/// borrow) or a thread local it set is not seen inside `f`: printing to
/// stdout inside `f` while holding its lock deadlocks. Where no thread can
/// be started, `f` runs on the calling thread and only it sees the budget.
pub fn with_ram_budget<R: Send>(bytes: u64, f: impl FnOnce() -> R + Send) -> R {
    with_ambient((Some(bytes), None), f)
}

/// Run `f` with the RAM budget and spill directory of `schedule` in force,
/// as [`with_ram_budget`] does.
pub fn with_schedule<R: Send>(schedule: &Schedule, f: impl FnOnce() -> R + Send) -> R {
    with_ambient((schedule.ram_budget, schedule.spill_dir.clone()), f)
}

/// The budget in force: the innermost [`with_ram_budget`] or
/// [`with_schedule`] that names one, else none.
pub fn ram_budget() -> Option<u64> {
    AMBIENT.with(|a| a.borrow().iter().rev().find_map(|(b, _)| *b))
}

/// The spill directory in force: the innermost [`with_schedule`] that
/// names one, else none.
fn ambient_spill_dir() -> Option<PathBuf> {
    AMBIENT.with(|a| a.borrow().iter().rev().find_map(|(_, d)| d.clone()))
}

/// Where a paged call puts row outputs that are over the budget together
/// (`bytes`): the schedule's spill directory, else the ambient one, else
/// the system's temporary directory. `None` (keep them in memory) without a
/// budget or under it.
pub fn output_spill_dir(bytes: u64, schedule: &Schedule) -> Option<PathBuf> {
    let budget = schedule.ram_budget.or_else(ram_budget)?;
    if bytes <= budget {
        return None;
    }
    Some(spill_dir(schedule))
}

/// Where a call's spilled tensors go: the schedule's spill directory, else
/// the ambient one, else the system's temporary directory.
pub fn spill_dir(schedule: &Schedule) -> PathBuf {
    schedule.spill_dir.clone().or_else(ambient_spill_dir).unwrap_or_else(std::env::temp_dir)
}

/// Bytes a CSR graph holds in memory.
pub fn graph_bytes(g: &Graph) -> u64 {
    csr_bytes(g.num_dst(), g.num_edges(), g.edge_ids().is_some())
}

/// A graph in memory or on disk (paged).
#[derive(Debug, Clone)]
pub enum AnyGraph {
    Memory(Arc<Graph>),
    Paged(Arc<PagedGraph>),
}

/// An offloaded graph: its file, and the temporary directory that holds it
/// when it is not in the schedule's spill directory (removed with the last
/// handle).
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

/// Bytes of a CSR with these counts (row offsets, columns, and edge ids
/// when the user's edge order is not CSR order).
fn csr_bytes(num_dst: usize, num_edges: usize, edge_ids: bool) -> u64 {
    let ids = if edge_ids { num_edges as u64 * 8 } else { 0 };
    (num_dst as u64 + 1) * 8 + num_edges as u64 * 4 + ids
}

/// Keep `g` in memory if it fits the budget, else persist it and return the
/// paged handle.
pub fn offload(g: Graph) -> Result<AnyGraph> {
    let Some(budget) = ram_budget() else { return Ok(AnyGraph::Memory(Arc::new(g))) };
    if graph_bytes(&g) <= budget {
        return Ok(AnyGraph::Memory(Arc::new(g)));
    }
    let (ns, nd) = (g.num_src(), g.num_dst());
    stream_to_disk(ns, nd, budget, |b| {
        match g.edge_ids() {
            // CSR order is the user's order: rows as they are.
            None => {
                for (d, w) in g.offsets().windows(2).enumerate() {
                    for &s in &g.cols()[w[0] as usize..w[1] as usize] {
                        b.push(s, d as u32)?;
                    }
                }
            }
            Some(_) => {
                let (src, dst) = g.coo_in_user_order();
                for (&s, &d) in src.iter().zip(&dst) {
                    b.push(s, d)?;
                }
            }
        }
        Ok(())
    })
}

/// Stream edges (pushed by `push_all` in the user's order) into a new
/// offloaded `.gfg` with its transpose, sorting within `budget` bytes.
fn stream_to_disk(
    num_src: usize,
    num_dst: usize,
    budget: u64,
    push_all: impl FnOnce(&mut GfgBuilder) -> std::result::Result<(), GfgError>,
) -> Result<AnyGraph> {
    let n = SPILL_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("graph-{}-{n}.gfg", std::process::id());
    let (dir, path) = match ambient_spill_dir() {
        Some(d) => {
            std::fs::create_dir_all(&d)
                .map_err(|source| OffloadError::Io { what: format!("spill directory {}", d.display()), source })?;
            (None, d.join(name))
        }
        None => {
            let t = tempfile::Builder::new()
                .prefix("tiga-spill-")
                .tempdir()
                .map_err(|source| OffloadError::Io { what: "cannot create a spill directory".into(), source })?;
            let p = t.path().join(name);
            (Some(t), p)
        }
    };
    let gfg = |source: GfgError| OffloadError::Write { source };
    let memory_bytes = usize::try_from(budget).unwrap_or(usize::MAX);
    let mut b = GfgBuilder::new(&path, BuildOptions { memory_bytes, transpose: true }).map_err(gfg)?;
    push_all(&mut b).map_err(gfg)?;
    b.save(num_src as u64, num_dst as u64, &mut |_, _, _| {}).map_err(gfg)?;
    let file = GfgFile::open(&path).map_err(OffloadError::Open)?;
    Ok(AnyGraph::Paged(Arc::new(PagedGraph { file, path, _dir: dir })))
}

/// Builders that respect the budget.
pub mod build {
    use super::*;

    pub fn from_edges(num_src: usize, num_dst: usize, src: &[u32], dst: &[u32]) -> Result<AnyGraph> {
        let over = |budget| {
            let sorted = dst.windows(2).all(|w| w[0] <= w[1]);
            src.len() == dst.len() && csr_bytes(num_dst, src.len(), !sorted) > budget
        };
        match ram_budget() {
            // Out-of-range ids and counts over the limits are refused as the
            // in-memory builder refuses them, before anything is written.
            Some(budget) if over(budget) => {
                Graph::check_edges(num_src, num_dst, src, dst)?;
                stream_to_disk(num_src, num_dst, budget, |b| {
                    for (&s, &d) in src.iter().zip(dst) {
                        b.push(s, d)?;
                    }
                    Ok(())
                })
            }
            _ => offload(Graph::from_edges(num_src, num_dst, src, dst)?),
        }
    }
    pub fn from_csr(num_src: usize, num_dst: usize, offsets: Vec<u64>, cols: Vec<u32>) -> Result<AnyGraph> {
        offload(Graph::from_csr(num_src, num_dst, offsets, cols)?)
    }
    pub fn stencil(shape: &[usize], neighbors: &[Vec<i64>], periodic: bool) -> Result<AnyGraph> {
        let plan = StencilPlan::new(shape, neighbors, periodic)?;
        let n = plan.nodes();
        match ram_budget() {
            Some(budget) if csr_bytes(n, plan.max_edges(), false) > budget => stream_to_disk(n, n, budget, |b| {
                let mut d = 0u32;
                plan.rows(|row| {
                    for &s in row {
                        b.push(s, d)?;
                    }
                    d += 1;
                    Ok(())
                })
            }),
            _ => offload(Graph::stencil(shape, neighbors, periodic)?),
        }
    }
    /// Graphs side by side: node ids of each part are shifted past the
    /// previous parts' (a block-diagonal union), edges in part order.
    pub fn concat(parts: &[&Graph]) -> Result<AnyGraph> {
        let (mut ns, mut nd) = (0usize, 0usize);
        let mut shifts = Vec::with_capacity(parts.len());
        for g in parts {
            let (Ok(so), Ok(dof)) = (u32::try_from(ns), u32::try_from(nd)) else {
                return Err(OffloadError::Graph(GraphError::TooManyNodes { side: "source", count: ns.max(nd) }));
            };
            shifts.push((so, dof));
            ns += g.num_src();
            nd += g.num_dst();
        }
        let edges: usize = parts.iter().map(|g| g.num_edges()).sum();
        // Parts in CSR order concatenate to CSR order (shifted rows follow).
        let ids = parts.iter().any(|g| g.edge_ids().is_some());
        if let Some(budget) = ram_budget().filter(|&b| csr_bytes(nd, edges, ids) > b) {
            if u32::try_from(ns).is_err() || u32::try_from(nd).is_err() {
                return Err(OffloadError::Graph(GraphError::TooManyNodes { side: "source", count: ns.max(nd) }));
            }
            return stream_to_disk(ns, nd, budget, |b| {
                for (g, &(so, dof)) in parts.iter().zip(&shifts) {
                    let (s, d) = g.coo_in_user_order();
                    for (&s, &d) in s.iter().zip(&d) {
                        b.push(s + so, d + dof)?;
                    }
                }
                Ok(())
            });
        }
        let (mut src, mut dst) = (Vec::with_capacity(edges), Vec::with_capacity(edges));
        for (g, &(so, dof)) in parts.iter().zip(&shifts) {
            let (s, d) = g.coo_in_user_order();
            src.extend(s.iter().map(|x| x + so));
            dst.extend(d.iter().map(|x| x + dof));
        }
        from_edges(ns, nd, &src, &dst)
    }
}

/// A graph in memory or offloaded runs as the one it holds.
impl Realization for AnyGraph {
    fn num_src(&self) -> usize {
        AnyGraph::num_src(self)
    }
    fn num_dst(&self) -> usize {
        AnyGraph::num_dst(self)
    }
    fn num_edges(&self) -> usize {
        AnyGraph::num_edges(self)
    }
    fn rows(&self, side: Side, edge_ids: bool) -> std::result::Result<Rows<'_>, ExecError> {
        match self {
            AnyGraph::Memory(g) => g.rows(side, edge_ids),
            AnyGraph::Paged(p) => p.file.rows(side, edge_ids),
        }
    }
    fn has_side(&self, side: Side) -> bool {
        match self {
            AnyGraph::Memory(g) => g.has_side(side),
            AnyGraph::Paged(p) => p.file.has_side(side),
        }
    }
    fn stored_field(&self, role: FieldRole, name: &str) -> Option<Box<dyn tiga_runtime::StoredField>> {
        match self {
            AnyGraph::Memory(g) => g.stored_field(role, name),
            AnyGraph::Paged(p) => p.file.stored_field(role, name),
        }
    }
    fn renumbered(
        &self,
        method: tiga_runtime::Renumber,
    ) -> std::result::Result<Option<tiga_runtime::RenumberedGraph<'_>>, tiga_runtime::RenumberError> {
        match self {
            AnyGraph::Memory(g) => Realization::renumbered(g.as_ref(), method),
            AnyGraph::Paged(p) => p.file.renumbered(method),
        }
    }
    fn renumbered_layout(&self) -> bool {
        match self {
            AnyGraph::Memory(g) => g.renumbered_layout(),
            AnyGraph::Paged(p) => p.file.renumbered_layout(),
        }
    }
    fn describe(&self) -> String {
        match self {
            AnyGraph::Memory(g) => g.describe(),
            AnyGraph::Paged(p) => p.file.describe(),
        }
    }
}
