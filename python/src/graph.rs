//! `tiga.Graph`: a graph in memory (from PyG's `edge_index` or a CSR) or a
//! `.gfg` file read in pages, as one Python type that every kernel call
//! takes.

use std::sync::Arc;

use numpy::PyUntypedArrayMethods;
use pyo3::prelude::*;
use tiga::runtime::sampling::MiniBatch;
use tiga::runtime::GfgFile;
use tiga::{Graph, Realization};

use crate::{arrays, errors};

/// How the graph's rows are held.
pub enum Rows {
    Memory(Arc<Graph>),
    File(Arc<GfgFile>),
    /// A sampled mini-batch's block, shared with the `MiniBatch` it came
    /// from (no copy).
    Batch(Arc<MiniBatch>),
}

/// A directed graph over which kernels run: edges `j → i` from a source
/// `j` to a destination `i`, kept in the order the caller gave them (the
/// order edge fields follow).
#[pyclass(name = "Graph", module = "tiga._tiga", frozen)]
pub struct PyGraph {
    pub rows: Rows,
}

impl PyGraph {
    pub fn realization(&self) -> &dyn Realization {
        match &self.rows {
            Rows::Memory(g) => g.as_ref(),
            Rows::File(f) => f.as_ref(),
            Rows::Batch(b) => b.as_ref(),
        }
    }

    fn memory(&self, py: Python<'_>, what: &str) -> PyResult<&Graph> {
        match &self.rows {
            Rows::Memory(g) => Ok(g),
            Rows::Batch(b) => Ok(b.graph()),
            Rows::File(f) => Err(errors::error(
                py,
                errors::Kind::Unsupported,
                format!("{what} needs a graph in memory; {} is read in pages", f.path().display()),
            )),
        }
    }
}

fn graph_err(py: Python<'_>, e: tiga::GraphError) -> PyErr {
    errors::error(py, errors::Kind::Graph, errors::chain(&e))
}

fn u64_array(py: Python<'_>, v: Vec<u64>) -> PyResult<Bound<'_, PyAny>> {
    // Counts of a graph's edges fit i64 (`Graph` refuses more).
    let v: Vec<i64> = v.into_iter().map(|d| d as i64).collect();
    Ok(numpy::PyArray1::from_vec(py, v).into_any())
}

#[pymethods]
impl PyGraph {
    /// A graph from PyG's `edge_index`: an int64 `[2, E]` array, row 0 the
    /// sources, row 1 the destinations, edges in column order, over
    /// `num_nodes` nodes (default: the largest id plus one, PyG's
    /// convention); with `num_dst`, a bipartite graph of `num_nodes`
    /// sources and `num_dst` destinations.
    #[staticmethod]
    #[pyo3(signature = (edge_index, num_nodes = None, num_dst = None))]
    fn from_edge_index(
        py: Python<'_>,
        edge_index: &Bound<'_, PyAny>,
        num_nodes: Option<usize>,
        num_dst: Option<usize>,
    ) -> PyResult<PyGraph> {
        let ei = arrays::index_array(py, "edge_index", edge_index)?;
        let shape = ei.shape().to_vec();
        if shape.len() != 2 || shape[0] != 2 {
            return Err(errors::input(py, format!("edge_index: expected shape [2, E], got {shape:?}")));
        }
        let ids = ei.as_slice().map_err(|_| errors::input(py, "edge_index: not C-contiguous"))?;
        let n = match num_nodes {
            Some(n) => n,
            None => ids.iter().copied().max().map_or(0, |m| if m < 0 { 0 } else { m as usize + 1 }),
        };
        let g = py.detach(|| tiga::from_edge_index_sized(n, num_dst.unwrap_or(n), ids)).map_err(|e| graph_err(py, e))?;
        Ok(PyGraph { rows: Rows::Memory(Arc::new(g)) })
    }

    /// A graph from a CSR by destination row: `indptr` (`[num_dst + 1]`)
    /// delimits each destination's edges in `indices` (`[E]`, their
    /// sources); edges in CSR order. `num_src` defaults to `num_dst`.
    #[staticmethod]
    #[pyo3(signature = (indptr, indices, num_src = None))]
    fn from_csr(
        py: Python<'_>,
        indptr: &Bound<'_, PyAny>,
        indices: &Bound<'_, PyAny>,
        num_src: Option<usize>,
    ) -> PyResult<PyGraph> {
        let ptr = arrays::index_array(py, "indptr", indptr)?;
        let idx = arrays::index_array(py, "indices", indices)?;
        if ptr.ndim() != 1 || idx.ndim() != 1 {
            return Err(errors::input(py, "indptr and indices must be one-dimensional"));
        }
        let ptr = ptr.as_slice().map_err(|_| errors::input(py, "indptr: not C-contiguous"))?;
        let idx = idx.as_slice().map_err(|_| errors::input(py, "indices: not C-contiguous"))?;
        if ptr.is_empty() {
            return Err(errors::input(py, "indptr: empty (a graph of n destinations has n + 1 offsets)"));
        }
        let num_dst = ptr.len() - 1;
        let offsets = ptr
            .iter()
            .enumerate()
            .map(|(i, &o)| u64::try_from(o).map_err(|_| format!("indptr[{i}] = {o} is negative")))
            .collect::<Result<Vec<u64>, String>>()
            .map_err(|m| errors::input(py, m))?;
        let cols = idx
            .iter()
            .enumerate()
            .map(|(e, &c)| u32::try_from(c).map_err(|_| format!("indices[{e}] = {c} is not a node id")))
            .collect::<Result<Vec<u32>, String>>()
            .map_err(|m| errors::input(py, m))?;
        let g = Graph::from_csr(num_src.unwrap_or(num_dst), num_dst, offsets, cols).map_err(|e| graph_err(py, e))?;
        Ok(PyGraph { rows: Rows::Memory(Arc::new(g)) })
    }

    /// A `.gfg` file, read in pages as kernels run over it (fields the
    /// call does not pass come from the file).
    #[staticmethod]
    fn from_gfg(py: Python<'_>, path: std::path::PathBuf) -> PyResult<PyGraph> {
        let f = py.detach(|| GfgFile::open(&path)).map_err(|e| errors::from_tiga(py, &tiga::Error::Gfg(e)))?;
        Ok(PyGraph { rows: Rows::File(Arc::new(f)) })
    }

    #[getter]
    fn num_src(&self) -> usize {
        self.realization().num_src()
    }
    #[getter]
    fn num_dst(&self) -> usize {
        self.realization().num_dst()
    }
    #[getter]
    fn num_edges(&self) -> usize {
        self.realization().num_edges()
    }
    /// The number of nodes of a square graph (sources and destinations
    /// the same nodes); an error otherwise.
    #[getter]
    fn num_nodes(&self, py: Python<'_>) -> PyResult<usize> {
        let r = self.realization();
        if r.num_src() != r.num_dst() {
            return Err(errors::error(
                py,
                errors::Kind::Graph,
                format!("num_nodes: the graph has {} sources and {} destinations; use num_src/num_dst", r.num_src(), r.num_dst()),
            ));
        }
        Ok(r.num_dst())
    }
    /// Whether the graph is read in pages from a file.
    #[getter]
    fn is_paged(&self) -> bool {
        matches!(self.rows, Rows::File(_))
    }

    /// Each destination's number of in-edges, int64 `[num_dst]`.
    fn in_degree<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let g = self.memory(py, "in_degree")?;
        u64_array(py, tiga::in_degree(g))
    }
    /// Each source's number of out-edges, int64 `[num_src]`.
    fn out_degree<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let g = self.memory(py, "out_degree")?;
        u64_array(py, tiga::out_degree(g))
    }
    /// The edges as PyG's `edge_index` (int64 `[2, E]`), in the caller's
    /// edge order.
    fn edge_index<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let g = self.memory(py, "edge_index")?;
        let (src, dst) = g.coo_in_user_order();
        let mut v: Vec<i64> = Vec::with_capacity(2 * src.len());
        v.extend(src.iter().map(|&s| i64::from(s)));
        v.extend(dst.iter().map(|&d| i64::from(d)));
        numpy::PyArray1::from_vec(py, v).into_any().call_method1("reshape", ((2usize, src.len()),))
    }

    /// The graph of `heads` copies of this one, interleaved, so a kernel
    /// runs once per head in one call: node `(v, h)` is `v * heads + h`,
    /// edge `(e, h)` is `e * heads + h`. A `[N, H, F]` field (PyG's
    /// multi-head layout) is passed as its `[N * H, F]` view (no copy),
    /// an edge field `[E, H]` as `[E * H]`; outputs come back
    /// `[N * H, ...]`. Its CSR is `heads` times this graph's.
    fn with_heads(&self, py: Python<'_>, heads: usize) -> PyResult<PyGraph> {
        let g = self.memory(py, "with_heads")?;
        let h = py.detach(|| g.with_heads(heads)).map_err(|e| graph_err(py, e))?;
        Ok(PyGraph { rows: Rows::Memory(Arc::new(h)) })
    }

    fn __repr__(&self) -> String {
        let r = self.realization();
        let how = match &self.rows {
            Rows::Memory(_) => "in memory".to_string(),
            Rows::Batch(b) => format!("a mini-batch's block of {} seeds", b.num_seeds),
            Rows::File(f) => format!("paged from {}", f.path().display()),
        };
        format!("Graph(num_src={}, num_dst={}, num_edges={}, {how})", r.num_src(), r.num_dst(), r.num_edges())
    }
}
