//! Realizations: how a graph's rows, edges and fields are made available
//! to the executor. One kernel runs unchanged over any of them, with the
//! same numbers; a realization changes where rows come from and when work
//! happens, never what is computed.
//!
//! A [`Realization`] says how many sources, destinations and edges there
//! are, gives the rows of each [`Side`] a call walks (the forward graph,
//! its transpose for a backward's source gradients, its rows with their
//! edges reversed for a right fold) as [`Rows`], and may hold fields of its
//! own. Where a call over it is more than its rows (a shard's halo
//! exchange), it gives a [`Layer`] that runs the [`Call`] around them
//! (`crate::layer` says which layer a call goes through). Rows come in
//! three kinds, which the executor knows how to run:
//!
//! - [`Rows::Memory`]: one CSR resident in RAM (a [`Graph`], or a graph
//!   derived from it and kept with it, such as its transpose);
//! - [`Rows::Pages`]: pages of rows from a [`PagedRows`] source, viewed or
//!   copied on demand and released once their rows are done (a `.gfg`
//!   file; any source that can hand out row ranges of a CSR);
//! - [`Rows::Generated`]: neighbours computed from the node index (a
//!   [`Stencil2d`]); no CSR exists.
//!
//! Edge fields always follow the user's edge order: rows say, through their
//! edge ids, which user edge each CSR position is.
//!
//! Implemented here for [`Graph`] and [`Stencil2d`]; the crates above
//! implement it for what they hold (`tiga_storage` for a `.gfg` file,
//! `tiga_dist` for a rank's shard of a halo-sharded graph), and a new
//! realization is one more implementation (the facade's offloaded graph is
//! one; `tiga/tests/realization.rs` writes one in a test).

use std::ops::{Deref, Range};
use std::sync::Arc;

use tiga_abi::Stencil2d;

use tiga_abi::Role;

use crate::exec::{ExecError, PageSource, PageView, Side};
use crate::fields::{Inputs, Seed, Tape, Wrt};
use crate::renumber::{RenumberError, Renumbered};
use crate::{graph::Graph, schedule::Schedule, tensor::DType, tensor::Tensor, tensor::TensorView};

/// Which rows a field is indexed by: sources, destinations or edges (in the
/// user's edge order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FieldRole {
    Src,
    Dst,
    Edge,
}

impl FieldRole {
    /// The rows a field of kernel role `role` is indexed by (`None` for a
    /// parameter, which has no rows and is never stored).
    pub fn of(role: tiga_abi::Role) -> Option<FieldRole> {
        match role {
            tiga_abi::Role::Src => Some(FieldRole::Src),
            tiga_abi::Role::Dst => Some(FieldRole::Dst),
            tiga_abi::Role::Edge => Some(FieldRole::Edge),
            tiga_abi::Role::Param => None,
        }
    }

    /// The name used in section names (`field.src.NAME`) and messages.
    pub fn name(self) -> &'static str {
        match self {
            FieldRole::Src => "src",
            FieldRole::Dst => "dst",
            FieldRole::Edge => "edge",
        }
    }

    pub fn parse(s: &str) -> Option<FieldRole> {
        match s {
            "src" => Some(FieldRole::Src),
            "dst" => Some(FieldRole::Dst),
            "edge" => Some(FieldRole::Edge),
            _ => None,
        }
    }

    /// The section name of field `name` in this role (a `.gfg` file's
    /// `field.src.NAME`).
    pub fn section_name(self, name: &str) -> String {
        format!("field.{}.{name}", self.name())
    }
}

impl std::fmt::Display for FieldRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A field a realization stores itself (a `.gfg` file's), mapped when a
/// call views it. The trait keeps the executor's crate free of any one
/// storage: a file's field is one implementation.
pub trait StoredField: Send + Sync {
    /// The whole field, viewed in place.
    fn view(&self) -> Result<TensorView<'_>, ExecError>;
    /// Drop the field's pages from the process's resident set once a call
    /// has read them (views stay valid; what they touch again is read
    /// back). Nothing to do for a field in RAM.
    fn release(&self) {}
}

/// An error crossing a layer: the call's own (the facade's, which it
/// takes back as it was) or the layer's (a shard's exchange, a
/// renumbering's move).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A call's outputs by name, in declaration order.
pub type Named = Vec<(String, Tensor)>;

/// A backward's gradients by role and name.
pub type Grads = Vec<(Role, String, Tensor)>;

/// The extents of the rows a call runs over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    pub num_src: usize,
    pub num_dst: usize,
    pub num_edges: usize,
}

/// A call prepared once (its variant, its output buffers) whose rows run
/// in runs, as their fields become ready: a shard's interior rows while
/// its halo travels, its boundary rows after.
pub trait RowRuns {
    /// Run rows `runs` of the rows the call was prepared for, with
    /// `inputs` over the first `num_src` sources (the slots ready now).
    fn run(&self, inputs: &Inputs<'_>, runs: &[Range<usize>], num_src: usize) -> Result<(), BoxError>;
    /// The outputs, once every row has run.
    fn finish(self: Box<Self>) -> Result<Named, BoxError>;
}

/// The call a layer wraps, as far as a layer may see it: a kernel bound by
/// the facade, which a layer runs again over the rows it contributes
/// (a shard's local rows, a renumbering's view).
pub trait Call {
    fn kernel_name(&self) -> &str;
    /// The content hash of the lowered kernel (what every rank of a
    /// sharded call must agree on).
    fn content_hash(&self) -> Result<u64, BoxError>;
    /// The kernel's fields, by role and name, in declaration order.
    fn field_roles(&self) -> Vec<(Role, String)>;
    /// Its outputs, by role and name, in declaration order.
    fn output_roles(&self) -> Vec<(Role, String)>;
    /// Whether it declares half-precision outputs.
    fn half_outputs(&self) -> bool;
    /// The call over `side` of `r` (through `r`'s own layers).
    fn run_call(&self, r: &dyn Realization, side: Side, inputs: &Inputs<'_>, schedule: &Schedule) -> Result<Named, BoxError>;
    /// Its backward over `r` from a cotangent per output, reading `tape`'s
    /// residuals where given.
    fn vjp_call(
        &self,
        r: &dyn Realization,
        inputs: &Inputs<'_>,
        cotangents: &[(&str, TensorView<'_>)],
        wrt: &Wrt,
        tape: Option<&Tape>,
        schedule: &Schedule,
    ) -> Result<Grads, BoxError>;
    /// Refuse cotangents named for no output, or missing for one.
    fn check_cotangents(&self, names: &[&str]) -> Result<(), BoxError>;
    /// Refuse `name` if it is not one of the outputs.
    fn check_output(&self, name: &str) -> Result<(), BoxError>;
    /// The call's dtype and its outputs' shapes over rows of `sizes`.
    fn output_shapes_at(&self, sizes: Sizes, inputs: &Inputs<'_>) -> Result<(DType, Vec<Vec<usize>>), BoxError>;
    /// The call over `rows` (of `sizes`, with `inputs` giving every
    /// field's shape), prepared to run in runs; for a kernel without
    /// parameter outputs.
    fn prepare_runs<'g>(
        &'g self,
        rows: &'g Graph,
        sizes: Sizes,
        inputs: &Inputs<'_>,
        schedule: &Schedule,
    ) -> Result<Box<dyn RowRuns + 'g>, BoxError>;
}

/// What a realization contributes around the rows of a call over it,
/// where a call over it is more than its rows (a shard: its fields placed
/// on the rank, its halo exchanged, its outputs and gradients put back in
/// owned order). Found through [`Realization::layer`].
pub trait Layer {
    /// `call` over `side` of the realization.
    fn run(&self, call: &dyn Call, side: Side, inputs: &Inputs<'_>, schedule: &Schedule) -> Result<Named, BoxError>;
    /// `call`'s backward from `seed`, reading `tape`'s residuals where
    /// given.
    fn vjp(
        &self,
        call: &dyn Call,
        inputs: &Inputs<'_>,
        seed: Seed<'_, '_>,
        wrt: &Wrt,
        tape: Option<&Tape>,
        schedule: &Schedule,
    ) -> Result<Grads, BoxError>;
    /// Whether a forward over it returns every residual its backward
    /// reads (a deep shard computes ghost rows whose residuals it does
    /// not return: its backward recomputes).
    fn keeps_residuals(&self) -> bool {
        true
    }
}

/// What a realization gives the executor (see the module doc).
pub trait Realization: Sync {
    fn num_src(&self) -> usize;
    fn num_dst(&self) -> usize;
    fn num_edges(&self) -> usize;

    /// The rows of `side`. `edge_ids`: whether the call reads edge fields or
    /// writes edge outputs (a source may leave the user's edge ids out of
    /// its pages otherwise; rows reversed always carry them). An error when
    /// this realization cannot give that side (a file without its stored
    /// transpose; the transpose of a periodic stencil).
    fn rows(&self, side: Side, edge_ids: bool) -> Result<Rows<'_>, ExecError>;

    /// Whether [`Realization::rows`] can give `side` at all, asked before
    /// choosing between two forms of a backward.
    fn has_side(&self, side: Side) -> bool {
        let _ = side;
        true
    }

    /// A field this realization stores itself (a `.gfg` file's), used for
    /// a kernel field that the call does not pass.
    fn stored_field(&self, role: FieldRole, name: &str) -> Option<Box<dyn StoredField>> {
        let _ = (role, name);
        None
    }

    /// This realization as its own type, for the crate that defined it to
    /// recognize it behind a `dyn Realization` (sampling asks whether a
    /// realization is a rank's shard, to sample across ranks). `None` for a
    /// realization that borrows (a view), which nothing asks about.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }

    /// This realization with its nodes renumbered by `method`, for a call
    /// whose schedule asks for it ([`Schedule::renumber`]): `None` where
    /// this realization runs in its own order (a generated stencil, whose
    /// index order is already local; a file written without an order; a
    /// shard, whose partition renumbers its rows already). A file written
    /// in a node order gives that order's view whatever `method` is,
    /// except another method, which is an error.
    fn renumbered(&self, method: crate::schedule::Renumber) -> Result<Option<RenumberedGraph<'_>>, RenumberError> {
        let _ = method;
        Ok(None)
    }

    /// Whether this realization is laid out in a renumbering of the
    /// caller's numbering (a `.gfg` written with a node order), so that
    /// every call over it, on every side, goes through
    /// [`Realization::renumbered`], whatever the schedule asks.
    fn renumbered_layout(&self) -> bool {
        false
    }

    /// When this realization is a renumbered view: the renumbering its rows
    /// are in (a call over it takes and gives fields in that numbering).
    fn renumbering(&self) -> Option<&RenumberedGraph<'_>> {
        None
    }

    /// What a call over this realization goes through before its rows,
    /// where that is more than its rows (a shard's halo exchange).
    fn layer(&self) -> Option<&dyn Layer> {
        None
    }

    /// One line for `explain`: what kind of realization, and its sizes.
    fn describe(&self) -> String {
        format!("{} sources, {} destinations, {} edges", self.num_src(), self.num_dst(), self.num_edges())
    }
}

/// A graph in RAM that rows read: borrowed from the realization, or derived
/// from it and shared (its transpose, kept with the graph).
#[derive(Debug, Clone)]
pub enum GraphRows<'r> {
    Borrowed(&'r Graph),
    Shared(Arc<Graph>),
}

impl Deref for GraphRows<'_> {
    type Target = Graph;
    fn deref(&self) -> &Graph {
        match self {
            GraphRows::Borrowed(g) => g,
            GraphRows::Shared(g) => g,
        }
    }
}

/// A source of pages of rows (see [`PageSource`]) that also says how it
/// cuts them and what its pages carry.
pub trait PagedRows: PageSource {
    /// Whether the pages carry user edge ids (the variant reads edge
    /// fields through them); `false` means CSR position = user edge.
    fn edge_ids(&self) -> bool;
    /// The pages, as row ranges covering every row once, in order.
    fn plan(&self, schedule: &Schedule) -> Result<Vec<Range<usize>>, ExecError>;
    /// Whether the pages live outside RAM (a file), so that a call's row
    /// outputs over the schedule's RAM budget go to a file as well.
    fn out_of_core(&self) -> bool {
        true
    }
}

/// The rows a call walks (see the module doc).
pub enum Rows<'r> {
    Memory(GraphRows<'r>),
    Pages(Box<dyn PagedRows + 'r>),
    Generated(Stencil2d),
}

impl Rows<'_> {
    /// Visit every row's adjacency in order, a page at a time (the whole
    /// graph at once in memory), each page released after. `None` for
    /// generated rows, which have no CSR.
    pub fn for_each_page<E: From<ExecError>>(
        &self,
        schedule: &Schedule,
        mut f: impl FnMut(PageView<'_>) -> Result<(), E>,
    ) -> Option<Result<(), E>> {
        Some(match self {
            Rows::Memory(g) => f(PageView { first_row: 0, offsets: g.offsets(), cols: g.cols(), edge_ids: g.edge_ids() }),
            Rows::Pages(p) => (|| {
                let plan = p.plan(schedule)?;
                crate::exec::check_plan(&plan, plan.last().map_or(0, |r| r.end))?;
                for rows in plan {
                    let page = p.page(rows)?;
                    f(page.view())?;
                }
                Ok(())
            })(),
            Rows::Generated(_) => return None,
        })
    }

    /// The rows as one CSR in RAM (what the reference interpreter walks):
    /// borrowed when they are one already, else collected page by page or
    /// built from the stencil. `num_src`: the sources the columns index.
    pub fn to_graph(&self, num_src: usize, schedule: &Schedule) -> Result<GraphRows<'_>, ExecError> {
        let (mut offsets, mut cols, mut ids) = (vec![0u64], Vec::new(), Vec::new());
        match self {
            Rows::Memory(g) => return Ok(g.clone()),
            Rows::Generated(st) => {
                let too_large =
                    || ExecError::Unavailable(format!("a {}x{} stencil is too large for this machine", st.rows, st.cols));
                let rows = usize::try_from(st.rows).map_err(|_| too_large())?;
                let c = usize::try_from(st.cols).map_err(|_| too_large())?;
                let neighbors: Vec<Vec<i64>> = st.offsets.iter().map(|&(dr, dc)| vec![dr, dc]).collect();
                return Ok(GraphRows::Shared(Arc::new(Graph::stencil(&[rows, c], &neighbors, st.periodic)?)));
            }
            Rows::Pages(p) => {
                let plan = p.plan(schedule)?;
                crate::exec::check_plan(&plan, plan.last().map_or(0, |r| r.end))?;
                for rows in plan {
                    let page = p.page(rows)?;
                    let v = page.view();
                    let first = v.offsets.first().copied().unwrap_or(0);
                    let base = cols.len() as u64;
                    offsets.extend(v.offsets.iter().skip(1).map(|&o| o - first + base));
                    cols.extend_from_slice(v.cols);
                    match v.edge_ids {
                        Some(e) => ids.extend_from_slice(e),
                        None => ids.extend(first..first + v.cols.len() as u64),
                    }
                }
            }
        }
        let num_dst = offsets.len() - 1;
        Ok(GraphRows::Shared(Arc::new(Graph::from_csr_with_edge_ids(num_src, num_dst, offsets, cols, Some(ids))?)))
    }

    /// Whether the rows carry user edge ids.
    pub fn edge_ids(&self) -> bool {
        match self {
            Rows::Memory(g) => g.edge_ids().is_some(),
            Rows::Pages(p) => p.edge_ids(),
            Rows::Generated(_) => false,
        }
    }
}

impl Realization for Graph {
    fn num_src(&self) -> usize {
        Graph::num_src(self)
    }
    fn num_dst(&self) -> usize {
        Graph::num_dst(self)
    }
    fn num_edges(&self) -> usize {
        Graph::num_edges(self)
    }
    fn rows(&self, side: Side, _edge_ids: bool) -> Result<Rows<'_>, ExecError> {
        Ok(Rows::Memory(match side {
            Side::Forward => GraphRows::Borrowed(self),
            Side::Transposed => GraphRows::Shared(self.try_transposed()?),
            Side::RowReversed => GraphRows::Shared(self.row_reversed()),
        }))
    }
    fn renumbered(&self, method: crate::schedule::Renumber) -> Result<Option<RenumberedGraph<'_>>, RenumberError> {
        Ok(Graph::renumbered(self, method)?.map(|renumbered| RenumberedGraph::of_graph(self, renumbered)))
    }
    fn describe(&self) -> String {
        format!("in_memory (CSR in RAM; {} sources, {} destinations, {} edges)", self.num_src(), self.num_dst(), self.num_edges())
    }
}

/// The number of in-grid neighbours of a generated stencil: its edge count
/// (saturating: a grid too large for this machine is refused when run).
pub fn stencil_edges(st: &Stencil2d) -> usize {
    let (r, c) = (st.rows as i64, st.cols as i64);
    st.offsets
        .iter()
        .map(|&(dr, dc)| {
            if st.periodic {
                r.saturating_mul(c) as usize
            } else {
                ((r - dr.abs()).max(0)).saturating_mul((c - dc.abs()).max(0)) as usize
            }
        })
        .fold(0usize, usize::saturating_add)
}

impl Realization for Stencil2d {
    fn num_src(&self) -> usize {
        usize::try_from(self.rows.saturating_mul(self.cols)).unwrap_or(usize::MAX)
    }
    fn num_dst(&self) -> usize {
        Realization::num_src(self)
    }
    fn num_edges(&self) -> usize {
        stencil_edges(self)
    }
    fn rows(&self, side: Side, _edge_ids: bool) -> Result<Rows<'_>, ExecError> {
        Ok(Rows::Generated(match side {
            Side::Forward => self.clone(),
            Side::Transposed => self.transposed().ok_or_else(|| {
                ExecError::Unavailable(
                    "the backward of a periodic generated stencil needs the CSR realization (Graph::stencil): its transpose \
                     is not a stencil in CSR order"
                        .into(),
                )
            })?,
            Side::RowReversed => self.row_reversed(),
        }))
    }
    fn has_side(&self, side: Side) -> bool {
        side != Side::Transposed || !self.periodic
    }
    fn describe(&self) -> String {
        format!(
            "generated ({}x{} stencil, {} offsets{})",
            self.rows,
            self.cols,
            self.offsets.len(),
            if self.periodic { ", periodic" } else { "" }
        )
    }
}

/// A graph seen through one of its renumberings: a realization whose rows
/// are the renumbered graph's (each side's, see [`Renumbered`]). A call
/// over it takes fields in the new numbering; its layer
/// ([`crate::layer::Layered::Renumbered`]) moves them.
#[derive(Debug, Clone)]
pub struct RenumberedGraph<'g> {
    base: Base<'g>,
    pub renumbered: Arc<Renumbered>,
}

/// The graph in the caller's numbering, which the renumbering was made
/// from: rows for the sums that add rows in the caller's order.
#[derive(Clone)]
enum Base<'g> {
    Memory(&'g Graph),
    /// A realization laid out in the new numbering (a file written in a
    /// node order): its own rows are the renumbered ones, and `user_order`
    /// reads the same graph back in the caller's order (a file's a page at
    /// a time).
    Layout {
        layout: &'g (dyn Realization + 'g),
        user_order: Arc<dyn Realization + Send + 'g>,
    },
}

impl std::fmt::Debug for Base<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Base::Memory(g) => f.debug_tuple("Memory").field(g).finish(),
            Base::Layout { layout, .. } => f.debug_tuple("Layout").field(&layout.describe()).finish(),
        }
    }
}

impl<'g> RenumberedGraph<'g> {
    /// `base` renumbered in memory as `renumbered` says.
    pub fn of_graph(base: &'g Graph, renumbered: Arc<Renumbered>) -> RenumberedGraph<'g> {
        RenumberedGraph { base: Base::Memory(base), renumbered }
    }

    /// A realization laid out in its stored order `renumbered` (a file
    /// written in a node order), with `user_order` its rows in the
    /// caller's order.
    pub fn of_layout(
        layout: &'g (dyn Realization + 'g),
        user_order: Arc<dyn Realization + Send + 'g>,
        renumbered: Arc<Renumbered>,
    ) -> RenumberedGraph<'g> {
        RenumberedGraph { base: Base::Layout { layout, user_order }, renumbered }
    }

    /// The graph in the caller's numbering (a call over it takes fields in
    /// that numbering).
    pub fn base(&self) -> &(dyn Realization + 'g) {
        match &self.base {
            Base::Memory(g) => *g,
            Base::Layout { user_order, .. } => &**user_order,
        }
    }

    /// Whether the renumbering is the realization's own layout (a file
    /// written in a node order), which every call goes through, rather
    /// than a choice a schedule made for a forward.
    pub fn is_layout(&self) -> bool {
        matches!(self.base, Base::Layout { .. })
    }
}

impl Realization for RenumberedGraph<'_> {
    fn num_src(&self) -> usize {
        self.base().num_src()
    }
    fn num_dst(&self) -> usize {
        self.base().num_dst()
    }
    fn num_edges(&self) -> usize {
        self.base().num_edges()
    }
    fn rows(&self, side: Side, edge_ids: bool) -> Result<Rows<'_>, ExecError> {
        let g = match &self.base {
            Base::Layout { layout, .. } => return layout.rows(side, edge_ids),
            Base::Memory(g) => *g,
        };
        let r = &self.renumbered;
        let forward = r.forward().ok_or_else(|| ExecError::Unavailable(RenumberError::StoredLayout.to_string()))?;
        Ok(Rows::Memory(GraphRows::Shared(match side {
            Side::Forward => forward.clone(),
            Side::Transposed => r.transposed(g).map_err(|e| ExecError::Unavailable(e.to_string()))?,
            Side::RowReversed => forward.row_reversed(),
        })))
    }
    fn has_side(&self, side: Side) -> bool {
        self.base().has_side(side)
    }
    /// A file's stored fields, which it holds in its stored numbering.
    fn stored_field(&self, role: FieldRole, name: &str) -> Option<Box<dyn StoredField>> {
        match &self.base {
            Base::Layout { layout, .. } => layout.stored_field(role, name),
            Base::Memory(_) => None,
        }
    }
    fn renumbering(&self) -> Option<&RenumberedGraph<'_>> {
        Some(self)
    }
    fn describe(&self) -> String {
        let what = if self.is_layout() { "stored in the node order of" } else { "renumbered by" };
        let base = match &self.base {
            Base::Memory(g) => Realization::describe(*g),
            Base::Layout { layout, .. } => layout.describe(),
        };
        format!("{base}, {what} {}", self.renumbered.method.name())
    }
}
