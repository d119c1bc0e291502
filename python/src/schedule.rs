//! `tiga.Schedule`: how a call runs (threads, pages, back end, RAM budget,
//! renumbering, saved residuals), a value passed with the call.

use pyo3::prelude::*;
use tiga::{Backend, Renumber, Schedule};

use crate::errors;

/// How a call runs; every argument optional, the defaults those of
/// `tiga::Schedule::default()` (every thread of the pool, the fastest
/// back end, no budget, no renumbering, no residuals kept).
#[pyclass(name = "Schedule", module = "tiga._tiga", frozen)]
#[derive(Clone)]
pub struct PySchedule {
    pub schedule: Schedule,
}

fn bytes(py: Python<'_>, what: &str, v: &Bound<'_, PyAny>) -> PyResult<u64> {
    if let Ok(n) = v.extract::<u64>() {
        return Ok(n);
    }
    match v.extract::<String>() {
        Ok(s) => tiga::runtime::schedule::parse_bytes(&s).map_err(|m| errors::input(py, format!("{what}: {m}"))),
        Err(_) => Err(errors::input(py, format!("{what}: expected a number of bytes or a string such as \"2G\""))),
    }
}

#[pymethods]
impl PySchedule {
    #[new]
    #[pyo3(signature = (*, threads = None, backend = "auto", page_rows = None, page_bytes = None, prefetch = None,
                        ram_budget = None, spill_dir = None, renumber = "none", residuals = false))]
    #[allow(clippy::too_many_arguments)] // keyword arguments, one per setting
    fn new(
        py: Python<'_>,
        threads: Option<usize>,
        backend: &str,
        page_rows: Option<usize>,
        page_bytes: Option<usize>,
        prefetch: Option<usize>,
        ram_budget: Option<&Bound<'_, PyAny>>,
        spill_dir: Option<std::path::PathBuf>,
        renumber: &str,
        residuals: bool,
    ) -> PyResult<PySchedule> {
        let mut s = Schedule::new();
        if let Some(n) = threads {
            if n == 0 {
                return Err(errors::input(py, "threads: at least 1"));
            }
            s = s.threads(n);
        }
        s = s.backend(match backend {
            "auto" => Backend::Auto,
            "aot" => Backend::Aot,
            "jit" => Backend::Jit,
            "reference" => Backend::Reference,
            other => return Err(errors::input(py, format!("backend `{other}`: expected auto, aot, jit or reference"))),
        });
        match (page_rows, page_bytes) {
            (Some(_), Some(_)) => return Err(errors::input(py, "page_rows and page_bytes: give one, not both")),
            (Some(0), _) | (_, Some(0)) => return Err(errors::input(py, "page_rows / page_bytes: at least 1")),
            (Some(n), None) => s = s.page_rows(n),
            (None, Some(n)) => s = s.page_bytes(n),
            (None, None) => {}
        }
        if let Some(d) = prefetch {
            s = s.prefetch(d);
        }
        if let Some(b) = ram_budget {
            s = s.ram_budget(bytes(py, "ram_budget", b)?);
        }
        if let Some(d) = spill_dir {
            s = s.spill_dir(d);
        }
        s = s.renumber(Renumber::parse(renumber).map_err(|m| errors::input(py, format!("renumber {m}")))?);
        s = s.residuals(residuals);
        Ok(PySchedule { schedule: s })
    }

    #[getter]
    fn threads(&self) -> Option<usize> {
        self.schedule.threads
    }
    #[getter]
    fn backend(&self) -> &'static str {
        self.schedule.backend.name()
    }
    #[getter]
    fn renumber(&self) -> &'static str {
        self.schedule.renumber.name()
    }
    #[getter]
    fn residuals(&self) -> bool {
        self.schedule.residuals
    }
    #[getter]
    fn ram_budget(&self) -> Option<u64> {
        self.schedule.ram_budget
    }

    fn __repr__(&self) -> String {
        let s = &self.schedule;
        format!(
            "Schedule(threads={:?}, backend={:?}, renumber={:?}, residuals={}, ram_budget={:?})",
            s.threads,
            s.backend.name(),
            s.renumber.name(),
            s.residuals,
            s.ram_budget
        )
    }
}
