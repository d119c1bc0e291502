//! tiga's errors as Python exceptions.
//!
//! The exception classes live in Python (`tiga/errors.py`), so that each
//! kind can also derive from the built-in exception Python code already
//! catches (`InputError` is a `ValueError`, `FileError` an `OSError`) while
//! `tiga.TigaError` stays the base of all of them. Each `tiga::Error`
//! variant maps to one kind in one exhaustive `match`: a new variant cannot
//! compile without its kind.

use pyo3::prelude::*;
use pyo3::types::PyAnyMethods;

/// The exception classes of `tiga.errors`, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A kernel that does not compile, an adjoint that cannot be built.
    Kernel,
    /// A call's arguments: a field missing, extra or of the wrong shape or
    /// dtype, a cotangent that does not fit, a schedule setting.
    Input,
    /// A graph that cannot be built (an id out of range, too many nodes).
    Graph,
    /// A file that cannot be read or written (`.gfg`, artifact, spill).
    File,
    /// What this graph, kernel or schedule does not support.
    Unsupported,
    /// The rows could not run (memory for outputs, a worker, a peer).
    Exec,
    /// A graph store that cannot be reached, refused a call or closed.
    Store,
    /// A broken promise inside tiga: a bug, never the input's fault.
    Internal,
}

impl Kind {
    fn class_name(self) -> &'static str {
        match self {
            Kind::Kernel => "KernelError",
            Kind::Input => "InputError",
            Kind::Graph => "GraphError",
            Kind::File => "FileError",
            Kind::Unsupported => "UnsupportedError",
            Kind::Exec => "ExecError",
            Kind::Store => "StoreError",
            Kind::Internal => "InternalError",
        }
    }
}

/// The kind of each of the facade's errors.
pub fn kind_of(e: &tiga::Error) -> Kind {
    use tiga::Error as E;
    match e {
        E::Front(_) | E::Pass(_) | E::LoopSchedule(_) | E::Back(_) | E::Verify(_) | E::Adjoint(_) | E::UnknownKernel { .. } => {
            Kind::Kernel
        }
        E::Bind(_)
        | E::Cotangent(_)
        | E::TensorMismatch { .. }
        | E::NoOutput { .. }
        | E::OutputDtype { .. }
        | E::NoGradient { .. }
        | E::Schedule(_)
        | E::Tensor(_) => Kind::Input,
        E::Graph(_) | E::Renumber(_) => Kind::Graph,
        E::Offload { .. } | E::Gfg(_) | E::TensorStore(_) | E::Io { .. } | E::Artifact { .. } => Kind::File,
        E::Unsupported(_) | E::Gpu(_) | E::GpuLowering { .. } => Kind::Unsupported,
        E::Interp(_) | E::Scope(_) | E::Shard(_) | E::Exec(_) => Kind::Exec,
        E::Internal(_) => Kind::Internal,
    }
}

/// An exception of `kind` carrying `message`. Should `tiga.errors` itself
/// be unimportable (a broken install), the import's own error is raised.
pub fn error(py: Python<'_>, kind: Kind, message: impl Into<String>) -> PyErr {
    let message = message.into();
    let made = (|| -> PyResult<PyErr> {
        let class = py.import("tiga.errors")?.getattr(kind.class_name())?;
        Ok(PyErr::from_value(class.call1((message,))?))
    })();
    made.unwrap_or_else(|e| e)
}

/// A facade error as its Python exception, its message and every
/// `source()` below it that the message does not already say.
pub fn from_tiga(py: Python<'_>, e: &tiga::Error) -> PyErr {
    error(py, kind_of(e), chain(e))
}

/// An error's message followed by its causes, each once.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let s = c.to_string();
        if !text.contains(&s) {
            text.push_str(": ");
            text.push_str(&s);
        }
        cause = c.source();
    }
    text
}

/// A caller's mistake found before any work.
pub fn input(py: Python<'_>, message: impl Into<String>) -> PyErr {
    error(py, Kind::Input, message)
}

/// Runs `f` with the GIL released; its error becomes a Python exception
/// through `err`, and a panic (a bug) an `InternalError`, never an abort.
pub fn detached<T: Send, E: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> Result<T, E> + Send,
    err: impl FnOnce(Python<'_>, E) -> PyErr,
) -> PyResult<T> {
    match py.detach(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(err(py, e)),
        Err(payload) => {
            let what = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            Err(error(py, Kind::Internal, format!("internal error (a bug in tiga, please report it): {what}")))
        }
    }
}
