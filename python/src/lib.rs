//! `tiga._tiga`: the extension module under the `tiga` Python package.
//!
//! It binds the facade and nothing more: kernels are loaded and run by
//! `tiga` (the Rust crate), graphs are `tiga::Graph`s or `.gfg` files,
//! schedules are `tiga::Schedule`s. What makes it Python (torch tensors,
//! `torch.autograd`, layers, loaders' batching) is Python code in `tiga/`, calling
//! these few types on NumPy arrays.

mod arrays;
mod errors;
mod graph;
mod kernel;
mod sampling;
mod schedule;

use std::sync::Arc;

use pyo3::prelude::*;

use crate::kernel::PyKernel;

/// The kernels the package ships (`tiga.gnn`): the canonical GNN kernels
/// of the repository's `examples/kernels/gnn.rs`, embedded at build time.
const GNN_KERNELS: &str = include_str!("../../examples/kernels/gnn.rs");

/// The kernels `tiga.nn`'s layers run besides those (`kernels/layers.rs`).
const LAYER_KERNELS: &str = include_str!("../kernels/layers.rs");

fn kernels_of(py: Python<'_>, all: tiga::Result<Vec<tiga::Kernel>>) -> PyResult<Vec<PyKernel>> {
    let all = all.map_err(|e| errors::from_tiga(py, &e))?;
    Ok(all.into_iter().map(|k| PyKernel { kernel: Arc::new(k) }).collect())
}

/// Every kernel of a kernel file or a `tigac compile` artifact (told apart
/// by content), in file order.
#[pyfunction]
fn load(py: Python<'_>, path: std::path::PathBuf) -> PyResult<Vec<PyKernel>> {
    let bytes = std::fs::read(&path)
        .map_err(|e| errors::error(py, errors::Kind::File, format!("cannot read {}: {e}", path.display())))?;
    if tiga::artifact::looks_like_artifact(&bytes) {
        let text = std::str::from_utf8(&bytes)
            .map_err(|_| errors::error(py, errors::Kind::File, format!("artifact {}: not valid UTF-8", path.display())))?;
        return kernels_of(py, py.detach(|| tiga::artifact::parse(&path, text)));
    }
    let source = String::from_utf8(bytes).map_err(|e| {
        errors::error(
            py,
            errors::Kind::File,
            format!(
                "{}: not a tiga artifact, and not valid UTF-8 kernel source (invalid byte at offset {})",
                path.display(),
                e.utf8_error().valid_up_to()
            ),
        )
    })?;
    load_text(py, &source, &path.display().to_string())
}

fn load_text(py: Python<'_>, source: &str, origin: &str) -> PyResult<Vec<PyKernel>> {
    let all = py.detach(|| tiga::Kernel::all_from_source(source));
    match all {
        // A front-end error names the place in the file.
        Err(tiga::Error::Front(d)) => {
            Err(errors::error(py, errors::Kind::Kernel, format!("{origin}:{}:{}: {}", d.line, d.col + 1, d.message)))
        }
        Ok(v) if v.is_empty() => Err(errors::error(
            py,
            errors::Kind::Kernel,
            format!("{origin}: no kernels found (a kernel is a module marked `#[message_passing(reduce = ...)]`)"),
        )),
        other => kernels_of(py, other),
    }
}

/// Every kernel of a kernel file's text.
#[pyfunction]
#[pyo3(signature = (source, origin = "<source>"))]
fn load_source(py: Python<'_>, source: &str, origin: &str) -> PyResult<Vec<PyKernel>> {
    load_text(py, source, origin)
}

/// The text of the kernels the package ships.
#[pyfunction]
fn gnn_source() -> &'static str {
    GNN_KERNELS
}

/// The text of the kernels `tiga.nn`'s layers add.
#[pyfunction]
fn layer_source() -> &'static str {
    LAYER_KERNELS
}

#[pymodule]
fn _tiga(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<graph::PyGraph>()?;
    m.add_class::<kernel::PyKernel>()?;
    m.add_class::<kernel::PyTape>()?;
    m.add_class::<schedule::PySchedule>()?;
    m.add_class::<sampling::PyMiniBatch>()?;
    m.add_class::<sampling::PyRemoteDataset>()?;
    m.add_class::<sampling::PyStoreLoader>()?;
    m.add_class::<sampling::PyStoreEpoch>()?;
    m.add_function(wrap_pyfunction!(sampling::sample, m)?)?;
    m.add_function(wrap_pyfunction!(sampling::epoch_order, m)?)?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(load_source, m)?)?;
    m.add_function(wrap_pyfunction!(gnn_source, m)?)?;
    m.add_function(wrap_pyfunction!(layer_source, m)?)?;
    Ok(())
}
