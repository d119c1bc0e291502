//! `tiga._tiga.Kernel`: one compiled kernel, called on NumPy arrays.
//!
//! A call binds every argument before any work (a field missing, extra,
//! of the wrong shape or dtype is an `InputError` and nothing runs),
//! releases the GIL while the kernel runs, and catches a panic so that it
//! reaches Python as `tiga.InternalError` rather than unwinding into the
//! interpreter.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use tiga::compiler::ir::Role;
use tiga::{DType, Inputs, Kernel, Schedule, Tape, TensorView, Wrt};

use crate::arrays::{self, Held};
use crate::errors;
use crate::graph::PyGraph;
use crate::schedule::PySchedule;

#[pyclass(name = "Kernel", module = "tiga._tiga", frozen)]
pub struct PyKernel {
    pub kernel: Arc<Kernel>,
}

/// What a forward kept for its backward (`Kernel.forward` with a schedule
/// that keeps residuals); empty otherwise.
#[pyclass(name = "Tape", module = "tiga._tiga", frozen)]
pub struct PyTape {
    tape: Tape,
}

#[pymethods]
impl PyTape {
    /// Bytes of residuals held.
    #[getter]
    fn bytes(&self) -> u64 {
        self.tape.bytes()
    }
    #[getter]
    fn is_empty(&self) -> bool {
        self.tape.is_empty()
    }
}

const ROLES: [(Role, &str); 4] = [(Role::Src, "src"), (Role::Dst, "dst"), (Role::Edge, "edge"), (Role::Param, "params")];

/// A call's arguments, borrowed from Python for as long as it runs.
struct Args<'py> {
    fields: Vec<(Role, String, Held<'py>)>,
    dtype: DType,
}

impl<'py> Args<'py> {
    fn new(py: Python<'py>, dicts: [Option<&Bound<'py, PyDict>>; 4]) -> PyResult<Args<'py>> {
        let mut fields = Vec::new();
        for ((role, role_name), d) in ROLES.iter().zip(dicts) {
            let Some(d) = d else { continue };
            for (k, v) in d.iter() {
                let name: String = k.extract().map_err(|_| {
                    errors::input(
                        py,
                        format!(
                            "{role_name}: field names are strings, got {}",
                            k.repr().map(|r| r.to_string()).unwrap_or_default()
                        ),
                    )
                })?;
                let held = arrays::hold(py, &format!("{role_name} field `{name}`"), &v, *role == Role::Param)?;
                fields.push((*role, name, held));
            }
        }
        // Numbers take the arrays' dtype (f32 when there are none).
        let dtype = fields.iter().find_map(|(_, _, h)| h.dtype()).unwrap_or(DType::F32);
        Ok(Args { fields, dtype })
    }

    fn inputs(&self, py: Python<'_>) -> PyResult<Inputs<'_>> {
        let mut ins = Inputs::new();
        for (role, name, held) in &self.fields {
            let input = held.input(self.dtype).map_err(|m| errors::input(py, format!("{} field `{name}`: {m}", role.name())))?;
            ins = ins.with_role(*role, name, input);
        }
        Ok(ins)
    }
}

/// Run `f` without the GIL, a panic caught and reported as an internal
/// error.
fn detached<T: Send>(py: Python<'_>, f: impl FnOnce() -> tiga::Result<T> + Send) -> PyResult<T> {
    errors::detached(py, f, |py, e| errors::from_tiga(py, &e))
}

fn schedule_of(s: Option<&Bound<'_, PySchedule>>) -> Schedule {
    s.map(|s| s.get().schedule.clone()).unwrap_or_default()
}

fn role_key(role: Role) -> &'static str {
    match role {
        Role::Src => "src",
        Role::Dst => "dst",
        Role::Edge => "edge",
        Role::Param => "params",
    }
}

/// The `(role, name)` pairs of `wrt` (`None`: every field).
fn wanted(py: Python<'_>, wrt: Option<&Bound<'_, PyAny>>) -> PyResult<Wrt> {
    let Some(wrt) = wrt else { return Ok(Wrt::All) };
    let mut out = Vec::new();
    for item in wrt.try_iter()? {
        let item = item?;
        let (role, name): (String, String) =
            item.extract().map_err(|_| errors::input(py, "wrt: expected (role, name) pairs such as (\"src\", \"h\")"))?;
        let role = match role.as_str() {
            "src" => Role::Src,
            "dst" => Role::Dst,
            "edge" => Role::Edge,
            "params" | "param" => Role::Param,
            other => return Err(errors::input(py, format!("wrt: role `{other}`: expected src, dst, edge or params"))),
        };
        out.push((role, name));
    }
    Ok(Wrt::Only(out))
}

impl PyKernel {
    /// Bind the arguments, then run `f` on them without the GIL.
    fn call<'py, T: Send>(
        &self,
        py: Python<'py>,
        graph: &Bound<'py, PyGraph>,
        dicts: [Option<&Bound<'py, PyDict>>; 4],
        schedule: Option<&Bound<'py, PySchedule>>,
        f: impl FnOnce(&Kernel, &dyn tiga::Realization, &Inputs<'_>, &Schedule) -> tiga::Result<T> + Send,
    ) -> PyResult<T> {
        let args = Args::new(py, dicts)?;
        let inputs = args.inputs(py)?;
        let schedule = schedule_of(schedule);
        let g = graph.get();
        let k = &self.kernel;
        detached(py, || f(k, g.realization(), &inputs, &schedule))
    }
}

#[pymethods]
impl PyKernel {
    #[getter]
    fn name(&self) -> &str {
        self.kernel.name()
    }

    /// The declared outputs' names, in order.
    #[getter]
    fn outputs(&self) -> Vec<String> {
        self.kernel.output_names().into_iter().map(String::from).collect()
    }

    /// The declared fields as `(role, name, kind)` tuples, `kind` being
    /// `scalar`, `vector` or `matrix`.
    #[getter]
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        use tiga::compiler::ir::Type;
        let items: Vec<Bound<'py, PyTuple>> = self
            .kernel
            .fields()
            .iter()
            .map(|f| {
                let kind = match f.ty {
                    Type::Scalar | Type::Bool => "scalar",
                    Type::Vector(_) | Type::Mask(_) => "vector",
                    Type::Matrix(..) => "matrix",
                };
                PyTuple::new(py, [role_key(f.role), f.name.as_str(), kind])
            })
            .collect::<PyResult<_>>()?;
        PyList::new(py, items)
    }

    /// Run the kernel: a dict of output name to NumPy array.
    #[pyo3(signature = (graph, src = None, dst = None, edge = None, params = None, schedule = None))]
    #[allow(clippy::too_many_arguments)] // the call's keyword arguments
    fn run<'py>(
        &self,
        py: Python<'py>,
        graph: &Bound<'py, PyGraph>,
        src: Option<&Bound<'py, PyDict>>,
        dst: Option<&Bound<'py, PyDict>>,
        edge: Option<&Bound<'py, PyDict>>,
        params: Option<&Bound<'py, PyDict>>,
        schedule: Option<&Bound<'py, PySchedule>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let out = self.call(py, graph, [src, dst, edge, params], schedule, |k, r, ins, s| k.run_with(r, ins, s))?;
        arrays::dict_of(py, out.items)
    }

    /// The forward of a call to be differentiated: its outputs, and a
    /// `Tape` of what the backward needs when the schedule keeps residuals.
    #[pyo3(signature = (graph, src = None, dst = None, edge = None, params = None, schedule = None))]
    #[allow(clippy::too_many_arguments)] // the call's keyword arguments
    fn forward<'py>(
        &self,
        py: Python<'py>,
        graph: &Bound<'py, PyGraph>,
        src: Option<&Bound<'py, PyDict>>,
        dst: Option<&Bound<'py, PyDict>>,
        edge: Option<&Bound<'py, PyDict>>,
        params: Option<&Bound<'py, PyDict>>,
        schedule: Option<&Bound<'py, PySchedule>>,
    ) -> PyResult<(Bound<'py, PyDict>, PyTape)> {
        let (out, tape) = self.call(py, graph, [src, dst, edge, params], schedule, |k, r, ins, s| k.forward(r, ins, s))?;
        Ok((arrays::dict_of(py, out.items)?, PyTape { tape }))
    }

    /// The vector-Jacobian product: given each output's cotangent, the
    /// gradients of the fields in `wrt` (`(role, name)` pairs; default
    /// every field) as `{"src": {..}, "dst": {..}, "edge": {..},
    /// "params": {..}}`. With the `tape` of `forward`, the backward reads
    /// its residuals instead of recomputing them.
    #[pyo3(signature = (graph, cotangents, src = None, dst = None, edge = None, params = None, schedule = None, tape = None, wrt = None))]
    #[allow(clippy::too_many_arguments)] // the call's keyword arguments
    fn vjp<'py>(
        &self,
        py: Python<'py>,
        graph: &Bound<'py, PyGraph>,
        cotangents: &Bound<'py, PyDict>,
        src: Option<&Bound<'py, PyDict>>,
        dst: Option<&Bound<'py, PyDict>>,
        edge: Option<&Bound<'py, PyDict>>,
        params: Option<&Bound<'py, PyDict>>,
        schedule: Option<&Bound<'py, PySchedule>>,
        tape: Option<&Bound<'py, PyTape>>,
        wrt: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let args = Args::new(py, [src, dst, edge, params])?;
        let inputs = args.inputs(py)?;
        let mut cots: Vec<(String, Held<'py>)> = Vec::new();
        for (k, v) in cotangents.iter() {
            let name: String = k.extract().map_err(|_| errors::input(py, "cotangents: output names are strings"))?;
            let held = arrays::hold(py, &format!("the cotangent of `{name}`"), &v, false)?;
            cots.push((name, held));
        }
        let cot_inputs = cots
            .iter()
            .map(|(n, h)| {
                h.input(args.dtype)
                    .map(|i| (n.as_str(), i))
                    .map_err(|m| errors::input(py, format!("the cotangent of `{n}`: {m}")))
            })
            .collect::<PyResult<Vec<_>>>()?;
        let cot_views: Vec<(&str, TensorView<'_>)> = cot_inputs.iter().map(|(n, i)| (*n, i.view())).collect();
        let wrt = wanted(py, wrt)?;
        let schedule = schedule_of(schedule);
        let g = graph.get();
        let k = &self.kernel;
        let tape = tape.map(|t| &t.get().tape);
        let grads = detached(py, || match tape {
            Some(t) => k.vjp_taped_wrt(g.realization(), &inputs, t, &cot_views, &wrt, &schedule),
            None => k.vjp_wrt(g.realization(), &inputs, &cot_views, &wrt, &schedule),
        })?;
        let by_role: Vec<(Role, Bound<'py, PyDict>)> = ROLES.iter().map(|(r, _)| (*r, PyDict::new(py))).collect();
        for (role, name, t) in grads.items {
            if let Some((_, d)) = by_role.iter().find(|(r, _)| *r == role) {
                d.set_item(name, arrays::to_numpy(py, t)?)?;
            }
        }
        let out = PyDict::new(py);
        for (role, d) in by_role {
            out.set_item(role_key(role), d)?;
        }
        Ok(out)
    }

    /// A human-readable account of what the compiler did (`tigac explain`).
    fn explain(&self) -> String {
        self.kernel.explain()
    }

    fn __repr__(&self) -> String {
        format!("Kernel({}, outputs={:?})", self.kernel.name(), self.kernel.output_names())
    }
}
