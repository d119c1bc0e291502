//! `tigac run`: one kernel, one graph, `.npy` fields in, `.npy` outputs out.
//!
//! This is the path a user without a Rust toolchain takes to run a kernel on
//! their data, and the path benchmarks take (`--repeat`, `--timing`), so it
//! checks everything it can before any compile or run (outputs named, files
//! readable) and times only what it claims to: the JIT compile of the
//! variant, then each `Kernel::run` alone, never file I/O.
//!
//! With `--grads DIR` it then runs the kernel's vector-Jacobian product
//! (`Kernel::vjp`, the adjoint stages `tigac explain` lists) against the
//! cotangents given with `--cotangent` (or ones, for a kernel with a single
//! output: the gradient of the sum of that output), and writes one `.npy`
//! per input field, `ROLE.NAME.npy`, shaped like the field and in the
//! inputs' dtype. `--timing` then also reports the median of the `vjp`
//! calls alone. With `--grads` the forward keeps what its backward needs
//! (`Schedule::residuals`, `Kernel::forward`: a max/min's winning edges, a
//! softmax's row maximum and denominator; `tigac explain` lists them) and
//! the backward reads them instead of refolding every row, with the same
//! gradients bit for bit; `--timing` says so (`"residuals": true`, and
//! their bytes) when the kernel keeps any (on the CPU).
//!
//! A `.gfg` graph (by extension or content) is not loaded: the call runs
//! paged (`Kernel::run_with` over the `GfgFile`), streaming pages of destination rows from
//! the file (`--page-rows` or `--page-bytes`, `--prefetch`). Fields not
//! given on the command line are read from the file's own fields of the
//! same role and name; edge fields are in the order of the edge list the
//! file was built from (its stored edge ids). `--grads` on a `.gfg` runs
//! the backward paged too (`Kernel::vjp_with` over the file): the file needs its
//! transpose (`tigac convert --transpose`) unless the kernel is a max/min
//! whose messages read only source fields (its source gradient is a
//! scatter over the forward pages), and fields must be given on the
//! command line.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use tiga::compiler::bind::{bind_shapes, Extents};
use tiga::compiler::ir::Role;
use tiga::{Inputs, Kernel, Tensor};

use crate::inputs::{common_dtype, is_gfg, load_field, load_kernels, open_graph, Binding, GraphSource, OutSpec, PageArgs};
use crate::output_paths::output_path;
use crate::report::Failure;

/// Everything `tigac run` was asked to do.
#[derive(Debug)]
pub struct RunRequest {
    pub file: PathBuf,
    pub kernel: String,
    pub graph: PathBuf,
    /// How an edge-list graph is read (its node count, extra columns).
    pub edges: tiga::EdgeListOptions,
    pub fields: Vec<(Role, Binding)>,
    pub outs: Vec<OutSpec>,
    pub repeat: usize,
    pub timing: bool,
    /// Where gradients go (`--grads`); `None`: no backward.
    pub grads: Option<PathBuf>,
    /// `--cotangent` flags: one per output (a plain path for a single output).
    pub cotangents: Vec<OutSpec>,
    /// How a `.gfg` graph is paged.
    pub paging: PageArgs,
    /// Under `mpirun` with more than one rank: how rows are cut, and the
    /// halo depth.
    pub partition: String,
    pub halo_depth: usize,
    /// Where the kernel runs (`--device`).
    pub device: tiga::Device,
    /// How the graph's nodes are renumbered for locality (`--renumber`).
    pub renumber: tiga::Renumber,
}

/// Where the output cotangents of `--grads` come from.
pub(crate) enum Cotangents {
    /// Ones shaped like the kernel's single output.
    Ones,
    /// One file per output, by output name.
    Files(Vec<(String, PathBuf)>),
}

/// Match `--out` flags to the kernel's outputs: a plain path for a kernel
/// with one output, `NAME=PATH` for each output otherwise.
pub(crate) fn plan_outputs(k: &Kernel, outs: &[OutSpec]) -> Result<Vec<(String, PathBuf)>, Failure> {
    plan_per_output(k, outs, "--out")
}

/// Match `FLAG [NAME=]FILE` values to the kernel's outputs (`--out`,
/// `--cotangent`): a plain path for a kernel with one output, `NAME=PATH`
/// for each output otherwise; every output exactly once.
fn plan_per_output(k: &Kernel, outs: &[OutSpec], flag: &str) -> Result<Vec<(String, PathBuf)>, Failure> {
    let names: Vec<String> = k.output_names().iter().map(|s| s.to_string()).collect();
    let listed = names.join(", ");
    if outs.is_empty() {
        return Err(Failure::new(format!("kernel `{}` has outputs {listed}; pass {flag}", k.name())));
    }
    if let [OutSpec { name: None, path }] = outs {
        if names.len() == 1 {
            return Ok(vec![(names[0].clone(), path.clone())]);
        }
    }
    let mut plan: Vec<(String, PathBuf)> = Vec::new();
    for o in outs {
        let Some(name) = &o.name else {
            return Err(Failure::new(format!(
                "kernel `{}` has {} outputs ({listed}); name each one: {flag} NAME=FILE.npy (got `{}`)",
                k.name(),
                names.len(),
                o.path.display()
            )));
        };
        if !names.contains(name) {
            return Err(Failure::new(format!(
                "{flag} {name}=...: kernel `{}` has no output `{name}`; its outputs: {listed}",
                k.name()
            )));
        }
        if plan.iter().any(|(n, _)| n == name) {
            return Err(Failure::new(format!("{flag} {name}=... is given twice")));
        }
        plan.push((name.clone(), o.path.clone()));
    }
    let missing: Vec<&str> = names.iter().filter(|n| !plan.iter().any(|(p, _)| p == *n)).map(String::as_str).collect();
    if !missing.is_empty() {
        return Err(Failure::new(format!(
            "kernel `{}` has outputs {listed}; missing {flag} for {} (use {flag} NAME=FILE.npy for each)",
            k.name(),
            missing.join(", ")
        )));
    }
    Ok(plan)
}

/// What `--grads` and `--cotangent` ask for; `None` when there is no backward.
pub(crate) fn plan_cotangents(k: &Kernel, req: &RunRequest) -> Result<Option<(PathBuf, Cotangents)>, Failure> {
    let Some(dir) = &req.grads else {
        if !req.cotangents.is_empty() {
            return Err(Failure::new(
                "--cotangent is only used for gradients: pass --grads DIR too (the folder the gradients are written to)",
            ));
        }
        return Ok(None);
    };
    let names = k.output_names();
    if req.cotangents.is_empty() {
        if names.len() == 1 {
            return Ok(Some((dir.clone(), Cotangents::Ones)));
        }
        return Err(Failure::new(format!(
            "--grads needs the cotangent of each output of kernel `{}` ({}): pass --cotangent NAME=FILE.npy for each \
             (a cotangent of ones is the default only for a kernel with one output)",
            k.name(),
            names.join(", ")
        )));
    }
    Ok(Some((dir.clone(), Cotangents::Files(plan_per_output(k, &req.cotangents, "--cotangent")?))))
}

/// Every file the command reads.
pub(crate) fn input_paths(req: &RunRequest) -> Vec<&Path> {
    let mut inputs: Vec<&Path> = vec![&req.file, &req.graph];
    inputs.extend(req.fields.iter().map(|(_, b)| b.path.as_path()));
    inputs.extend(req.cotangents.iter().map(|o| o.path.as_path()));
    inputs
}

/// Where each output and gradient is written.
pub(crate) struct OutputTargets {
    /// Per kernel output: its file (`--out` through its links).
    pub outs: Vec<(String, PathBuf)>,
    /// Per kernel field, with `--grads`: `(role, name, file)`.
    pub grads: Vec<(&'static str, String, PathBuf)>,
}

/// Where each output is written, checked before anything runs: no output
/// or gradient (one per kernel field) may be an input, and no two of them
/// may be one file, however their paths are spelled.
pub(crate) fn output_targets(
    k: &Kernel,
    req: &RunRequest,
    plan: &[(String, PathBuf)],
    grads: Option<&Path>,
) -> Result<OutputTargets, Failure> {
    let inputs = input_paths(req);
    let mut taken: Vec<(PathBuf, String)> = Vec::new();
    let mut claim = |flag: &str, path: &Path, what: String| -> Result<PathBuf, Failure> {
        let target = output_path(flag, path, &inputs)?;
        let key = crate::output_paths::output_key(&target);
        if let Some((_, other)) = taken.iter().find(|(k, _)| *k == key) {
            return Err(Failure::new(format!(
                "{flag} {}: {other} and {what} would both be written to this file",
                path.display()
            )));
        }
        taken.push((key, what));
        Ok(target)
    };
    let mut outs = Vec::with_capacity(plan.len());
    for (name, path) in plan {
        outs.push((name.clone(), claim("--out", path, format!("output `{name}`"))?));
    }
    let mut files = Vec::new();
    // (A --grads that exists and is not a folder is refused by
    // `prepare_dir`, which says so.)
    if let Some(dir) = grads.filter(|d| !d.exists() || d.is_dir()) {
        for f in &k.captured().fields {
            let (role, name) = (f.role.name(), f.name.clone());
            let path = dir.join(format!("{role}.{name}.npy"));
            let target = claim("--grads", &path, format!("the gradient of {role} field `{name}`"))?;
            files.push((role, name, target));
        }
    }
    Ok(OutputTargets { outs, grads: files })
}

/// Create the gradient folder (and its parents) and check that a file can
/// be written there, before anything runs.
pub(crate) fn prepare_dir(dir: &std::path::Path) -> Result<(), Failure> {
    if dir.exists() && !dir.is_dir() {
        return Err(Failure::new(format!("--grads {}: exists and is not a directory", dir.display())));
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| Failure::new(format!("--grads {}: cannot create the directory: {e}", dir.display())))?;
    tempfile::NamedTempFile::new_in(dir)
        .map_err(|e| Failure::new(format!("--grads {}: cannot write into the directory: {e}", dir.display())))?;
    Ok(())
}

/// One cotangent file, read (shape and dtype are checked against the call).
pub(crate) fn load_cotangent(output: &str, path: &std::path::Path) -> Result<Tensor, Failure> {
    let what = format!("--cotangent of output `{output}`");
    match tiga::read_npy(path) {
        Ok(t) => Ok(t),
        Err(tiga::NpyError::UnsupportedDtype { path, found }) => Err(Failure::new(format!(
            "{what}: {path} has dtype '{found}'; expected '<f4' (float32), '<f8' (float64), '<f2' (float16) or '|V2' \
             (bfloat16), little-endian, in the inputs' precision"
        ))),
        Err(e) => Err(Failure::new(format!("{what}: {e}"))),
    }
}

/// A cotangent must be shaped like its output and in the inputs' dtype.
pub(crate) fn check_cotangent(
    output: &str,
    path: &std::path::Path,
    t: &Tensor,
    shape: &[usize],
    dtype: tiga::DType,
) -> Result<(), Failure> {
    if t.shape() != shape {
        return Err(Failure::new(format!(
            "--cotangent of output `{output}` ({}) has shape {:?}; expected {shape:?}, the shape of the output",
            path.display(),
            t.shape()
        )));
    }
    if t.dtype() != dtype {
        return Err(Failure::new(format!(
            "--cotangent of output `{output}` ({}) is {}, but the inputs are {}; save it as {}",
            path.display(),
            t.dtype().name(),
            dtype.name(),
            if dtype == tiga::DType::F32 { "float32 ('<f4')" } else { "float64 ('<f8')" }
        )));
    }
    Ok(())
}

pub(crate) fn ones_like(t: &Tensor) -> Result<Tensor, Failure> {
    let n = t.len();
    match t.dtype() {
        tiga::DType::F32 => Tensor::from_f32(t.shape().to_vec(), vec![1.0; n]),
        tiga::DType::F64 => Tensor::from_f64(t.shape().to_vec(), vec![1.0; n]),
    }
    .map_err(|e| Failure::new(format!("cannot build the default cotangent: {e}")))
}

/// `--timing`'s one JSON line on stdout (a closed pipe is not an error
/// worth a message).
pub(crate) fn print_json_line(line: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

pub(crate) fn median_ms(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    match xs.len() {
        0 => 0.0,
        n if n % 2 == 1 => xs[n / 2],
        n => 0.5 * (xs[n / 2 - 1] + xs[n / 2]),
    }
}

/// The schedule a command line asks for: the `TIGA_*` environment
/// variables, then the paging flags, the device and the renumbering.
pub(crate) fn schedule_of(req: &RunRequest) -> Result<tiga::Schedule, Failure> {
    let mut schedule = req.paging.schedule()?;
    schedule.device = req.device;
    schedule.renumber = req.renumber;
    Ok(schedule)
}

pub fn run(req: &RunRequest) -> Result<(), Failure> {
    let paged = is_gfg(&req.graph);
    if let (false, Some(flag)) = (paged, req.paging.given()) {
        return Err(Failure::new(format!(
            "{flag} applies only to a .gfg graph (a paged run); {} is read into memory \
             (convert it first: tigac convert {} OUT.gfg)",
            req.graph.display(),
            req.graph.display()
        )));
    }
    let mut kernels = load_kernels(&req.file, Some(&req.kernel))?;
    let kernel = kernels.pop().ok_or_else(|| Failure::new(format!("no kernel named `{}`", req.kernel)))?;
    let plan = plan_outputs(&kernel, &req.outs)?;
    let backward = plan_cotangents(&kernel, req)?;
    if backward.is_some() {
        // Build the adjoint stages now: a kernel that cannot be
        // differentiated is refused before anything runs.
        kernel.adjoint_plan().map_err(|e| Failure::new(format!("kernel `{}`: cannot compute gradients: {e}", kernel.name())))?;
    }

    let mut seen: Vec<(Role, &str)> = Vec::new();
    for (role, b) in &req.fields {
        if seen.contains(&(*role, b.name.as_str())) {
            return Err(Failure::new(format!("{} field `{}` is given twice", role.name(), b.name)));
        }
        seen.push((*role, &b.name));
    }
    let targets = output_targets(&kernel, req, &plan, backward.as_ref().map(|(dir, _)| dir.as_path()))?;
    // The fields first: their shapes are checked against the graph's sizes
    // as soon as those are known, before memory proportional to the node
    // count is asked for (a 50-row field is refused at once on a graph of
    // 300 million nodes, not after the graph is built).
    let tensors: Vec<(Role, &Binding, Tensor)> =
        req.fields.iter().map(|(r, b)| Ok((*r, b, load_field(*r, b)?))).collect::<Result<_, Failure>>()?;
    let cot_files: Vec<(String, PathBuf, Tensor)> = match &backward {
        Some((_, Cotangents::Files(files))) => {
            files.iter().map(|(n, p)| Ok((n.clone(), p.clone(), load_cotangent(n, p)?))).collect::<Result<_, Failure>>()?
        }
        _ => Vec::new(),
    };
    let inputs = tensors.iter().fold(Inputs::new(), |acc, (r, b, t)| acc.with_role(*r, &b.name, t));
    let file_of = |role: &str, name: &str| {
        tensors.iter().find(|(r, b, _)| r.name() == role && b.name == name).map(|(_, b, _)| b.path.display().to_string())
    };
    // An error of a call in the user's words: which file a field came
    // from, and a hint where the graph's size is the likely cause.
    let explain_sized = |e: tiga::Error, (num_src, num_dst): (usize, usize)| -> Failure {
        use tiga::compiler::bind::BindError;
        let extra = match &e {
            tiga::Error::Bind(BindError::Shape { role, name, actual, .. }) => {
                let read = file_of(role, name).map(|p| format!(" (read from {p})")).unwrap_or_default();
                // An edge list's node count is its largest id + 1 unless
                // --num-nodes says otherwise: a node field with more rows
                // usually means isolated nodes at the end.
                let edge_list = !paged
                    && req.edges.num_nodes.is_none()
                    && !req.graph.extension().is_some_and(|x| x.eq_ignore_ascii_case("mtx"));
                let nodes = if *role == "dst" { num_dst } else { num_src };
                let hint = match actual.first() {
                    Some(&rows) if edge_list && (*role == "src" || *role == "dst") && rows != nodes => format!(
                        "; the edge list's node count was taken as its largest id + 1 = {nodes}: if the graph has {rows} nodes, pass --num-nodes {rows}"
                    ),
                    _ => String::new(),
                };
                format!("{read}{hint}")
            }
            tiga::Error::Bind(BindError::Width { role, name, .. }) => {
                file_of(role, name).map(|p| format!(" (read from {p})")).unwrap_or_default()
            }
            tiga::Error::Bind(BindError::MissingField { role, name, .. }) if paged => format!(
                "; pass it with --{role} {name}=FILE.npy (the graph file {} has no {role} field `{name}` either)",
                req.graph.display()
            ),
            tiga::Error::Bind(BindError::MissingField { role, name, .. }) => format!("; pass it with --{role} {name}=FILE.npy"),
            _ => String::new(),
        };
        Failure::new(format!("{e}{extra}"))
    };
    // Every field the kernel declares given on the command line: their
    // shapes are checked against the graph's sizes before it is built.
    let k_ir = kernel.captured();
    // Each declared field's tensor, where the command line gives it.
    let given: Vec<Option<&Tensor>> = k_ir
        .fields
        .iter()
        .map(|f| tensors.iter().find(|(r, b, _)| *r == f.role && b.name == f.name).map(|(_, _, t)| t))
        .collect();
    let given_shapes: Option<Vec<&[usize]>> = given.iter().map(|t| t.map(|t| t.shape())).collect();
    let check_sizes = |extents: Extents| -> Result<(), Failure> {
        match &given_shapes {
            Some(shapes) => bind_shapes(k_ir, &extents, shapes)
                .map(|_| ())
                .map_err(|e| explain_sized(tiga::Error::Bind(e), (extents.num_src, extents.num_dst))),
            None => Ok(()),
        }
    };
    let graph = open_graph(&req.graph, &req.edges, &check_sizes)?;
    let explain_call = |e: tiga::Error| explain_sized(e, (graph.num_src(), graph.num_dst()));

    // Compile the variant up front, so --timing reports the JIT compile on
    // its own. When the fields do not fit the kernel, skip this: the first
    // run then reports exactly what is wrong.
    let extents = Extents { num_src: graph.num_src(), num_dst: graph.num_dst(), num_edges: graph.num_edges() };
    // Each declared field's shape and dtype: given on the command line, or
    // (for a .gfg) stored in the graph file.
    let file_fields = match &graph {
        GraphSource::Paged(f) => f.fields(),
        GraphSource::Memory(_) => Vec::new(),
    };
    let declared: Option<Vec<(Vec<usize>, tiga::DType)>> = k_ir
        .fields
        .iter()
        .zip(&given)
        .map(|(f, t)| {
            t.map(|t| (t.shape().to_vec(), t.dtype())).or_else(|| {
                file_fields
                    .iter()
                    .find(|s| s.role.name() == f.role.name() && s.name == f.name)
                    .map(|s| (s.shape.clone(), s.dtype))
            })
        })
        .collect();
    let given_used = tensors.iter().filter(|(r, b, _)| k_ir.fields.iter().any(|f| f.role == *r && f.name == b.name)).count();
    let mut compile_ms = None;
    let mut call = None;
    if let Some(ds) = declared.filter(|_| given_used == tensors.len()) {
        let shapes: Vec<&[usize]> = ds.iter().map(|(s, _)| s.as_slice()).collect();
        let dtype = ds.first().map_or(Some(tiga::DType::F32), |(_, d)| ds.iter().all(|(_, e)| e == d).then_some(*d));
        if let (Some(dtype), Ok(widths)) = (dtype, bind_shapes(k_ir, &extents, &shapes)) {
            let half = given.iter().flatten().any(|t| t.field_type().is_half());
            if req.device == tiga::Device::Cpu && half {
                // A half-width variant is keyed by each field's storage:
                // the first run compiles it (and reports its errors).
            } else if req.device == tiga::Device::Cpu {
                // The JIT's own time for this variant (measured when it was built).
                let (variant, _hit) = kernel.variant(dtype, &widths, graph.has_edge_ids()).map_err(explain_call)?;
                compile_ms = Some(variant.compile_ms);
            } else {
                // On a GPU: lowering to PTX and loading the module (a kernel
                // the PTX back end does not lower is refused here).
                let start = Instant::now();
                kernel.prepare_device(req.device, dtype, &widths).map_err(explain_call)?;
                compile_ms = Some(start.elapsed().as_secs_f64() * 1e3);
            }
            call = Some((dtype, widths));
        }
    }

    // Cotangents that do not fit the outputs are refused before the forward
    // runs. (When the fields do not bind, the forward reports that first.)
    if let (false, GraphSource::Memory(graph)) = (cot_files.is_empty(), &graph) {
        if let (Ok(shapes), Some(dtype)) = (kernel.output_shapes(graph, &inputs), common_dtype(tensors.iter().map(|(_, _, t)| t)))
        {
            for (name, path, t) in &cot_files {
                if let Some((_, shape)) = shapes.iter().find(|(n, _)| n == name) {
                    check_cotangent(name, path, t, shape, dtype)?;
                }
            }
        }
    }
    if let Some((dir, _)) = &backward {
        prepare_dir(dir)?;
    }

    let mut schedule = schedule_of(req)?;
    // The renumbering is built once, before the timed calls, and kept with
    // the graph (the calls reuse it): --timing reports its cost apart.
    // A file written in a node order runs in it (its layout), and takes
    // that method or none; a file without one runs as written.
    let stored_order = match &graph {
        GraphSource::Paged(f) => f.node_order().map_err(|e| Failure::new(e.to_string()))?.map(|o| o.method),
        GraphSource::Memory(_) => None,
    };
    let renumber_ms = match (&graph, req.renumber, stored_order) {
        (_, tiga::Renumber::None, _) => None,
        (GraphSource::Paged(f), method, Some(s)) if method != s => {
            return Err(Failure::new(format!(
                "--renumber {}: {} was written in the node order `{}` and runs in it; drop --renumber (or give \
                 --renumber {}), or convert the input again with --renumber {}",
                method.name(),
                f.path().display(),
                s.name(),
                s.name(),
                method.name()
            )))
        }
        // Asked for by name: paid when the file was written.
        (GraphSource::Paged(_), _, Some(_)) => Some(0.0),
        (GraphSource::Paged(_), method, None) => {
            return Err(Failure::new(format!(
                "--renumber {}: a .gfg graph runs paged in the order it was written; write it in a node order \
                 (`tigac convert --renumber {}`), renumber an edge list or .mtx graph (read into memory), or drop \
                 --renumber",
                method.name(),
                method.name()
            )))
        }
        (GraphSource::Memory(g), method, _) => {
            g.renumbered(method).map_err(|e| Failure::new(format!("--renumber {}: {e}", method.name())))?.map(|r| r.build_ms)
        }
    };
    // A forward that will be differentiated keeps its residuals (the CPU
    // back ends; a GPU call's backward recomputes).
    schedule.residuals = backward.is_some() && req.device == tiga::Device::Cpu;
    // On a GPU, each call's launches are timed with events.
    let timer = tiga::DeviceTimer::new();
    if req.device != tiga::Device::Cpu {
        schedule.device_timer = Some(timer.clone());
    }
    // A paged run counts the rows its pages finish; on a terminal a bar
    // shows them (forward, then the backward's stages).
    let progress = tiga::Progress::new();
    if paged {
        schedule.progress = Some(progress.clone());
    }
    let watch = if paged { crate::progress::Watch::start(&progress, "running (paged)") } else { None };
    let mut times = Vec::with_capacity(req.repeat);
    let mut kernel_times = Vec::with_capacity(req.repeat);
    let mut outputs = None;
    for _ in 0..req.repeat.max(1) {
        timer.reset();
        let start = Instant::now();
        let o = kernel.forward(graph.realization(), &inputs, &schedule).map_err(explain_call)?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
        kernel_times.push(timer.times().kernel_ms);
        outputs = Some(o);
    }
    let (outputs, tape) = outputs.ok_or_else(|| Failure::new("the kernel did not run"))?;

    for (name, path) in &targets.outs {
        let t =
            outputs.get(name).ok_or_else(|| Failure::new(format!("kernel `{}` produced no output `{name}`", kernel.name())))?;
        tiga::write_npy(path, &t.view()).map_err(|e| Failure::new(format!("output `{name}`: {e}")))?;
    }

    // The backward: the VJP against the cotangents, timed alone.
    let mut vjp_times = Vec::new();
    let mut vjp_kernel_times = Vec::new();
    let mut written_grads: Vec<String> = Vec::new();
    if let Some((dir, source)) = &backward {
        let cots: Vec<(String, Tensor)> = match source {
            Cotangents::Ones => {
                let name = kernel.output_names().first().map(|s| s.to_string()).unwrap_or_default();
                let t = outputs
                    .get(&name)
                    .ok_or_else(|| Failure::new(format!("kernel `{}` produced no output `{name}`", kernel.name())))?;
                vec![(name, ones_like(t)?)]
            }
            Cotangents::Files(_) => {
                for (name, path, t) in &cot_files {
                    if let Some(out) = outputs.get(name) {
                        check_cotangent(name, path, t, out.shape(), out.dtype())?;
                    }
                }
                cot_files.iter().map(|(n, _, t)| (n.clone(), t.clone())).collect()
            }
        };
        let views: Vec<(&str, tiga::TensorView<'_>)> = cots.iter().map(|(n, t)| (n.as_str(), t.view())).collect();
        let mut grads = None;
        for _ in 0..req.repeat.max(1) {
            timer.reset();
            let start = Instant::now();
            // Over a .gfg every adjoint stage runs paged; the source stage
            // reads the file's stored transpose (`tigac convert
            // --transpose`), except a max/min's scatter, which reads the
            // forward pages.
            let g = kernel
                .vjp_taped(graph.realization(), &inputs, &tape, &views, &schedule)
                .map_err(|e| Failure::new(format!("gradients of kernel `{}`: {e}", kernel.name())))?;
            vjp_times.push(start.elapsed().as_secs_f64() * 1e3);
            vjp_kernel_times.push(timer.times().kernel_ms);
            grads = Some(g);
        }
        let grads = grads.ok_or_else(|| Failure::new("the vjp did not run"))?;
        for (role, name, t) in &grads.items {
            let path = match targets.grads.iter().find(|(r, n, _)| *r == role.name() && n == name) {
                Some((_, _, target)) => target.clone(),
                None => output_path("--grads", &dir.join(format!("{}.{name}.npy", role.name())), &input_paths(req))?,
            };
            tiga::write_npy(&path, &t.view())
                .map_err(|e| Failure::new(format!("gradient of {} field `{name}`: {e}", role.name())))?;
            written_grads.push(format!("{}.{name} -> {}", role.name(), path.display()));
        }
    }

    drop(watch);
    let runs = times.len();
    let median = median_ms(times);
    if req.timing {
        let mut line = serde_json::json!({
            "compile_ms": compile_ms.unwrap_or(0.0),
            "run_ms_median": median,
            "runs": runs,
        });
        if backward.is_some() {
            line["vjp_ms_median"] = serde_json::json!(median_ms(vjp_times));
            line["residuals"] = serde_json::json!(!tape.is_empty());
            line["residual_bytes"] = serde_json::json!(tape.bytes());
        }
        if let Some(method) = stored_order {
            // Paid when the file was written: no renumber_ms here.
            line["renumber"] = serde_json::json!(method.name());
            line["renumber_stored"] = serde_json::json!(true);
        }
        if let Some(ms) = renumber_ms {
            line["renumber"] = serde_json::json!(req.renumber.name());
            line["renumber_ms"] = serde_json::json!(ms);
        }
        if req.device != tiga::Device::Cpu {
            // Device time alone (CUDA events around each launch; the
            // simulator's wall clock), median over the runs.
            line["device"] = serde_json::json!(req.device.name());
            line["kernel_ms"] = serde_json::json!(median_ms(kernel_times));
            if backward.is_some() {
                line["vjp_kernel_ms"] = serde_json::json!(median_ms(vjp_kernel_times));
            }
        }
        print_json_line(&line);
    } else {
        let (dtype, widths) = call.map(|(d, w)| (d.name(), format!("{w:?}"))).unwrap_or(("?", "?".into()));
        let wrote: Vec<String> = plan.iter().map(|(n, p)| format!("{n} -> {}", p.display())).collect();
        let how = match &graph {
            GraphSource::Paged(f) => {
                format!(" (paged from {}: {})", f.path().display(), req.paging.describe(f, kernel.reads_edge_ids())?)
            }
            GraphSource::Memory(_) => String::new(),
        };
        let _ = writeln!(
            std::io::stderr(),
            "ran {} ({dtype}, widths {widths}){} on {} nodes / {} edges{how}: {runs} run(s), median {median:.3} ms; wrote {}",
            kernel.name(),
            if req.device == tiga::Device::Cpu { String::new() } else { format!(" on {}", req.device.name()) },
            graph.num_dst(),
            graph.num_edges(),
            wrote.join(", ")
        );
        if backward.is_some() {
            let kept: Vec<&str> = tape.residuals().map(|(n, _)| n).collect();
            let _ = writeln!(
                std::io::stderr(),
                "gradients ({} vjp run(s), median {:.3} ms; {}): {}",
                vjp_times.len(),
                median_ms(vjp_times.clone()),
                if kept.is_empty() {
                    "the backward recomputed its statistics".to_string()
                } else {
                    format!("read the forward's residuals {} ({} bytes)", kept.join(", "), tape.bytes())
                },
                if written_grads.is_empty() { "none (the kernel reads no fields)".to_string() } else { written_grads.join(", ") }
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::median_ms;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median_ms(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median_ms(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median_ms(vec![]), 0.0);
    }
}
