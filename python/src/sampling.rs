//! Mini-batches: tiga's neighbour sampler (`tiga::runtime::sampling`) on a
//! `tiga.Graph`, and the graph store's loader on `tigac serve`, both
//! giving the same `MiniBatch`, whose block is a graph kernels run on.
//! The loaders themselves (batching, shuffling, PyG-style attributes) are
//! Python (`tiga/loader.py`).

use std::sync::{Arc, Mutex};

use numpy::{PyReadonlyArray1, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tiga::runtime::sampling::{epoch_order as order_of, sample_mini_batch, MiniBatch, SampleError};
use tiga_graph_store::loader::Epoch;
use tiga_graph_store::{ConnectOptions, LoaderOptions, NeighborLoader, RemoteDataset, StoreError};

use crate::graph::{PyGraph, Rows};
use crate::{arrays, errors};

fn sample_err(py: Python<'_>, e: SampleError) -> PyErr {
    let kind = match e {
        SampleError::CentreOutOfRange { .. } | SampleError::BadFanout(_) | SampleError::WeightsLength { .. } => {
            errors::Kind::Input
        }
        SampleError::BadWeight { .. } | SampleError::NotSquare { .. } | SampleError::Block(_) => errors::Kind::Graph,
        SampleError::Generated | SampleError::PagedShard => errors::Kind::Unsupported,
        SampleError::Order { .. } => errors::Kind::File,
        SampleError::Rows(_) | SampleError::Comm(_) | SampleError::Corrupt(_) => errors::Kind::Exec,
    };
    errors::error(py, kind, errors::chain(&e))
}

fn store_err(py: Python<'_>, e: StoreError) -> PyErr {
    let kind = match e {
        StoreError::Options(_)
        | StoreError::NodeOutOfRange { .. }
        | StoreError::UnknownFeature { .. }
        | StoreError::FeatureKind { .. }
        | StoreError::Address { .. }
        | StoreError::NoServers => errors::Kind::Input,
        StoreError::Block(_) => errors::Kind::Graph,
        _ => errors::Kind::Store,
    };
    errors::error(py, kind, errors::chain(&e))
}

fn ids<'py>(py: Python<'py>, v: impl IntoIterator<Item = i64>) -> Bound<'py, PyAny> {
    numpy::PyArray1::from_vec(py, v.into_iter().collect()).into_any()
}

/// A sampled mini-batch (see `tiga::runtime::sampling::MiniBatch`): the
/// seeds and the nodes reached from them, numbered locally, and per hop
/// the sampled edges in local indices.
#[pyclass(name = "MiniBatch", module = "tiga._tiga", frozen)]
pub struct PyMiniBatch {
    batch: Arc<MiniBatch>,
}

#[pymethods]
impl PyMiniBatch {
    /// Global node ids (int64): the seeds first, then each new node in
    /// order of first appearance over the hops.
    #[getter]
    fn n_id<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        ids(py, self.batch.nodes.iter().copied())
    }
    /// How many of `n_id` are seeds.
    #[getter]
    fn batch_size(&self) -> usize {
        self.batch.num_seeds
    }
    #[getter]
    fn sample_seed(&self) -> u64 {
        self.batch.sample_seed
    }
    #[getter]
    fn num_hops(&self) -> usize {
        self.batch.hops.len()
    }
    /// Hop `k`'s edges as `[2, E_k]` int64 local indices (row 0 the sampled
    /// neighbours, row 1 their centres) and their global edge ids.
    fn hop<'py>(&self, py: Python<'py>, k: usize) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        let h = self.batch.hops.get(k).ok_or_else(|| {
            errors::input(py, format!("hop {k}: the batch has {} hops (0..{})", self.batch.hops.len(), self.batch.hops.len()))
        })?;
        let e = h.src.len();
        let flat = ids(py, h.src.iter().chain(&h.dst).map(|&x| i64::from(x)));
        let ei = flat.call_method1("reshape", ((2usize, e),))?;
        Ok((ei, ids(py, h.edge_ids.iter().map(|&x| x as i64))))
    }
    /// The block as a graph over `len(n_id)` nodes, every hop's edges in
    /// hop order (its edge order, that of `edge_index`).
    fn graph(&self) -> PyGraph {
        PyGraph { rows: Rows::Batch(self.batch.clone()) }
    }
    /// Features gathered for the batch's nodes (a store loader's
    /// `node_features`), name → array with a row per `n_id`.
    fn node_features<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        arrays::dict_of(py, self.batch.node_features.clone())
    }

    fn __repr__(&self) -> String {
        format!(
            "MiniBatch({} nodes, {} seeds, {} hops, {} edges)",
            self.batch.nodes.len(),
            self.batch.num_seeds,
            self.batch.hops.len(),
            self.batch.num_block_edges()
        )
    }
}

/// Samples `len(fanouts)` hops from `seeds` (int64 node ids) over `graph`
/// with sampling seed `seed`, optionally weighted by `weights` (float64, one
/// per edge in the graph's edge order).
#[pyfunction]
#[pyo3(signature = (graph, seeds, fanouts, seed, weights = None))]
pub fn sample<'py>(
    py: Python<'py>,
    graph: &Bound<'py, PyGraph>,
    seeds: &Bound<'py, PyAny>,
    fanouts: Vec<i64>,
    seed: u64,
    weights: Option<PyReadonlyArray1<'py, f64>>,
) -> PyResult<PyMiniBatch> {
    let s = arrays::index_array(py, "seeds", seeds)?;
    if s.ndim() != 1 {
        return Err(errors::input(py, format!("seeds: expected a one-dimensional array, got shape {:?}", s.shape())));
    }
    let s = s.as_slice().map_err(|_| errors::input(py, "seeds: not C-contiguous"))?;
    let g = graph.get();
    let r = g.realization();
    let n = r.num_dst();
    let seeds: Vec<u32> = s
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            u32::try_from(v)
                .ok()
                .filter(|&v| (v as usize) < n)
                .ok_or_else(|| errors::input(py, format!("seeds[{i}] = {v} is not a node of the graph (it has {n} nodes)")))
        })
        .collect::<PyResult<_>>()?;
    let w = match &weights {
        Some(w) => Some(w.as_slice().map_err(|_| errors::input(py, "weights: not C-contiguous"))?),
        None => None,
    };
    let b = errors::detached(py, || sample_mini_batch(r, &seeds, &fanouts, seed, w, None), sample_err)?;
    Ok(PyMiniBatch { batch: Arc::new(b) })
}

/// The order epoch `epoch` visits `n` seeds in (int64 positions): the
/// shuffle every tiga loader uses, keyed by (`seed`, `epoch`).
#[pyfunction]
pub fn epoch_order(py: Python<'_>, n: usize, seed: u64, epoch: u64) -> Bound<'_, PyAny> {
    ids(py, order_of(n, seed, epoch).into_iter().map(|i| i as i64))
}

/// A connection to a graph store: every `tigac serve` process of one
/// graph, opened as one dataset.
#[pyclass(name = "RemoteDataset", module = "tiga._tiga", frozen)]
pub struct PyRemoteDataset {
    ds: RemoteDataset,
}

#[pymethods]
impl PyRemoteDataset {
    #[new]
    #[pyo3(signature = (addresses, token = None, timeout = 30.0))]
    fn new(py: Python<'_>, addresses: Vec<String>, token: Option<String>, timeout: f64) -> PyResult<PyRemoteDataset> {
        if !(timeout.is_finite() && timeout > 0.0) {
            return Err(errors::input(py, format!("timeout: {timeout} is not a positive number of seconds")));
        }
        let opts = ConnectOptions {
            token,
            call_deadline: std::time::Duration::from_secs_f64(timeout),
            client_name: "tiga (Python)".into(),
            ..ConnectOptions::default()
        };
        let ds = errors::detached(py, || RemoteDataset::connect(&addresses, &opts), store_err)?;
        Ok(PyRemoteDataset { ds })
    }
    #[getter]
    fn num_nodes(&self) -> i64 {
        self.ds.num_nodes()
    }
    #[getter]
    fn num_edges(&self) -> i64 {
        self.ds.num_edges()
    }
    /// The features the store serves: (name, kind: "node" or "edge").
    fn features(&self) -> Vec<(String, String)> {
        self.ds.features().iter().map(|f| (f.name.clone(), f.kind.clone())).collect()
    }
    /// Compute rank `rank` of `world`'s node ids (of `split`, or all).
    #[pyo3(signature = (rank = 0, world = 1, split = None))]
    fn node_ids<'py>(&self, py: Python<'py>, rank: u32, world: u32, split: Option<String>) -> PyResult<Bound<'py, PyAny>> {
        let v = errors::detached(py, || self.ds.fetch_node_ids(rank, world, split.as_deref()), store_err)?;
        Ok(ids(py, v))
    }
    /// Closes the sessions at every server.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        errors::detached(py, || self.ds.clone().close().map(|_| ()), store_err)
    }
}

/// The store's neighbour loader (`tiga_graph_store::NeighborLoader`):
/// batches are made in the background, `prefetch` ahead.
#[pyclass(name = "StoreLoader", module = "tiga._tiga", frozen)]
pub struct PyStoreLoader {
    loader: Mutex<Option<NeighborLoader>>,
}

#[pymethods]
impl PyStoreLoader {
    #[new]
    #[pyo3(signature = (dataset, seeds, fanouts, batch_size, shuffle, seed, drop_last, prefetch, node_features))]
    #[allow(clippy::too_many_arguments)]
    fn new<'py>(
        py: Python<'py>,
        dataset: &Bound<'py, PyRemoteDataset>,
        seeds: &Bound<'py, PyAny>,
        fanouts: Vec<i64>,
        batch_size: usize,
        shuffle: bool,
        seed: u64,
        drop_last: bool,
        prefetch: usize,
        node_features: Vec<String>,
    ) -> PyResult<PyStoreLoader> {
        let s = arrays::index_array(py, "input_nodes", seeds)?;
        let seeds: Vec<i64> = s.as_slice().map_err(|_| errors::input(py, "input_nodes: not C-contiguous"))?.to_vec();
        let opts = LoaderOptions {
            batch_size,
            fanouts,
            shuffle,
            seed,
            drop_last,
            prefetch,
            sample_seed: seed,
            node_features,
            edge_features: Vec::new(),
        };
        let ds = &dataset.get().ds;
        let loader = errors::detached(py, || NeighborLoader::new(ds, seeds, opts), store_err)?;
        Ok(PyStoreLoader { loader: Mutex::new(Some(loader)) })
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, |l| l.num_batches())
    }

    /// Epoch `epoch`'s batches, an iterator.
    fn epoch(&self, py: Python<'_>, epoch: u64) -> PyResult<PyStoreEpoch> {
        let e = self.with(py, |l| l.epoch(epoch))?;
        Ok(PyStoreEpoch { epoch: Mutex::new(e) })
    }

    /// Releases the loader's state at the servers.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self.loader.lock().map_err(|_| errors::error(py, errors::Kind::Internal, "loader lock poisoned"))?.take();
        match taken {
            Some(l) => errors::detached(py, || l.close().map(|_| ()), store_err),
            None => Ok(()),
        }
    }
}

impl PyStoreLoader {
    fn with<T>(&self, py: Python<'_>, f: impl FnOnce(&NeighborLoader) -> T) -> PyResult<T> {
        let guard = self.loader.lock().map_err(|_| errors::error(py, errors::Kind::Internal, "loader lock poisoned"))?;
        match guard.as_ref() {
            Some(l) => Ok(f(l)),
            None => Err(errors::error(py, errors::Kind::Store, "the loader was closed")),
        }
    }
}

/// One epoch of a store loader: `next()` waits (without the GIL) for the
/// next batch made in the background.
#[pyclass(name = "StoreEpoch", module = "tiga._tiga", frozen)]
pub struct PyStoreEpoch {
    epoch: Mutex<Epoch<MiniBatch>>,
}

#[pymethods]
impl PyStoreEpoch {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PyMiniBatch>> {
        let next = py.detach(|| self.epoch.lock().ok().map(|mut e| e.next()));
        match next {
            None => Err(errors::error(py, errors::Kind::Internal, "epoch lock poisoned")),
            Some(None) => Ok(None),
            Some(Some(Ok(b))) => Ok(Some(PyMiniBatch { batch: Arc::new(b) })),
            Some(Some(Err(e))) => Err(store_err(py, e)),
        }
    }
}
