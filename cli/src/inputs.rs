//! Everything `tigac` reads from disk: kernel files or artifacts, graphs,
//! `.npy` fields.
//!
//! Each loader turns the library's error into a [`Failure`] that says which
//! file (and, for fields, which kernel field) it concerns, so a user with
//! six `--src` flags knows which one is wrong. The library functions already
//! refuse bad input by value (no panics); this module only adds context and
//! the few CLI conventions (format chosen by content or extension,
//! `NAME=FILE` flags).

use std::path::{Path, PathBuf};

use tiga::compiler::bind::Extents;
use tiga::compiler::front::parse_kernel_file;
use tiga::compiler::ir::Role;
use tiga::compiler::passes::PassError;
use tiga::{DType, Graph, Kernel, NpyError, Schedule, Tensor};
use tiga_storage::GfgFile;

use crate::report::Failure;

/// A `NAME=FILE` flag value (`--src`, `--dst`, `--edge`, `--param`).
#[derive(Clone, Debug)]
pub struct Binding {
    pub name: String,
    pub path: PathBuf,
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_') && chars.all(|c| c.is_alphanumeric() || c == '_')
}

/// clap value parser for `NAME=FILE.npy`.
pub fn parse_binding(s: &str) -> Result<Binding, String> {
    match s.split_once('=') {
        Some((name, path)) if is_identifier(name) && !path.is_empty() => {
            Ok(Binding { name: name.to_string(), path: PathBuf::from(path) })
        }
        Some((name, _)) if !is_identifier(name) => {
            Err(format!("`{name}` is not a field name; expected NAME=FILE.npy, e.g. `x=x.npy`"))
        }
        Some(_) => Err(format!("`{s}` names no file; expected NAME=FILE.npy, e.g. `x=x.npy`")),
        None => Err(format!("expected NAME=FILE.npy (a field name, `=`, a .npy file), e.g. `x=x.npy`; got `{s}`")),
    }
}

/// An `--out` value: `FILE.npy`, or `NAME=FILE.npy` for one of several outputs.
#[derive(Clone, Debug)]
pub struct OutSpec {
    pub name: Option<String>,
    pub path: PathBuf,
}

/// clap value parser for `--out`.
pub fn parse_out(s: &str) -> Result<OutSpec, String> {
    if s.is_empty() {
        return Err("expected FILE.npy or NAME=FILE.npy".into());
    }
    match s.split_once('=') {
        Some((name, path)) if is_identifier(name) => {
            if path.is_empty() {
                return Err(format!("`{s}` names no file; expected NAME=FILE.npy"));
            }
            Ok(OutSpec { name: Some(name.to_string()), path: PathBuf::from(path) })
        }
        _ => Ok(OutSpec { name: None, path: PathBuf::from(s) }),
    }
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

/// Kernels read from a kernel file or a `tigac compile` artifact (told apart
/// by content, not extension). With `only`, just that kernel (an unknown
/// name lists the available ones); otherwise every kernel in the file.
///
/// From source, only the selected kernels go through the passes, so one
/// kernel can be run while another in the same file is still being written.
pub fn load_kernels(path: &Path, only: Option<&str>) -> Result<Vec<Kernel>, Failure> {
    let bytes = std::fs::read(path).map_err(|e| Failure::new(format!("cannot read {}: {e}", path.display())))?;
    if tiga::artifact::looks_like_artifact(&bytes) {
        let text =
            std::str::from_utf8(&bytes).map_err(|_| Failure::new(format!("artifact {}: not valid UTF-8", path.display())))?;
        let all = tiga::artifact::parse(path, text).map_err(|e| Failure::new(e.to_string()))?;
        let names: Vec<String> = all.iter().map(|k| k.name().to_string()).collect();
        return match only {
            None => Ok(all),
            Some(name) => match all.into_iter().find(|k| k.name() == name) {
                Some(k) => Ok(vec![k]),
                None => Err(unknown_kernel(path, name, &names)),
            },
        };
    }
    let source = String::from_utf8(bytes).map_err(|e| {
        Failure::new(format!(
            "{}: not a tiga artifact, and not valid UTF-8 kernel source (invalid byte at offset {})",
            path.display(),
            e.utf8_error().valid_up_to()
        ))
    })?;
    let captured = parse_kernel_file(&source).map_err(|e| Failure::at_source(path, &source, e.line, e.col, &e.message))?;
    if captured.is_empty() {
        return Err(Failure::new(format!(
            "{}: no kernels found (a kernel is a module marked `#[message_passing(reduce = ...)]`)",
            path.display()
        )));
    }
    let names: Vec<String> = captured.iter().map(|k| k.name.clone()).collect();
    let selected: Vec<_> = match only {
        None => captured,
        Some(name) => {
            let one: Vec<_> = captured.into_iter().filter(|k| k.name == name).collect();
            if one.is_empty() {
                return Err(unknown_kernel(path, name, &names));
            }
            one
        }
    };
    selected
        .into_iter()
        .map(|ir| {
            let kname = ir.name.clone();
            Kernel::from_ir(ir).map_err(|e| match e {
                tiga::Error::Front(f) => Failure::at_source(path, &source, f.line, f.col, &f.message),
                tiga::Error::Pass(PassError::Refused { message, span: Some(sp), .. }) => {
                    Failure::at_source(path, &source, sp.line, sp.col, &format!("kernel `{kname}`: {message}"))
                }
                other => Failure::new(format!("{}: kernel `{kname}`: {other}", path.display())),
            })
        })
        .collect()
}

fn unknown_kernel(path: &Path, name: &str, names: &[String]) -> Failure {
    Failure::new(format!("no kernel named `{name}` in {}; available kernels: {}", path.display(), list(names)))
}

/// A graph file: Matrix Market when the extension is `.mtx`, otherwise a
/// SNAP-style text edge list. Edge order (for edge fields) is the order of
/// the entries in the file. `edges.num_nodes` sizes an edge list (default: the
/// largest id + 1); a `.mtx` declares its own size, which must then agree.
/// `sizes` sees the graph's sizes before an edge list's CSR (memory
/// proportional to its node count) is built, and may refuse them.
pub fn load_graph(path: &Path, edges: &tiga::EdgeListOptions, sizes: &SizeCheck<'_>) -> Result<Graph, Failure> {
    let num_nodes = edges.num_nodes;
    let is_mtx = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("mtx"));
    if !is_mtx {
        let coo = tiga::runtime::io::read_edge_list_coo(path, edges)?;
        let n = coo.num_nodes;
        sizes(Extents { num_src: n, num_dst: n, num_edges: coo.src.len() })?;
        return coo.build().map_err(|e| graph_error(path, e));
    }
    let (graph, _values) = tiga::read_matrix_market(path).map_err(|e| graph_error(path, e))?;
    if let Some(n) = num_nodes {
        if graph.num_src() != n || graph.num_dst() != n {
            return Err(Failure::new(format!(
                "--num-nodes {n} does not match {}, which declares a {} x {} matrix ({} destination rows, {} source columns)",
                path.display(),
                graph.num_dst(),
                graph.num_src(),
                graph.num_dst(),
                graph.num_src()
            )));
        }
    }
    sizes(Extents { num_src: graph.num_src(), num_dst: graph.num_dst(), num_edges: graph.num_edges() })?;
    Ok(graph)
}

/// A graph error that names `path` (reading errors already do; building
/// errors, such as a CSR too large for this machine, do not).
fn graph_error(path: &Path, e: tiga::GraphError) -> Failure {
    let text = e.to_string();
    let name = path.display().to_string();
    if text.starts_with(&name) {
        Failure::new(text)
    } else {
        Failure::new(format!("{name}: {text}"))
    }
}

/// A check of a graph's sizes, run once they are known (see [`load_graph`]).
pub type SizeCheck<'a> = dyn Fn(Extents) -> Result<(), Failure> + 'a;

/// A [`SizeCheck`] that accepts every size.
pub fn any_size(_: Extents) -> Result<(), Failure> {
    Ok(())
}

/// One field's `.npy` file. Errors name the field as well as the file.
///
/// A 0-D array (`np.save("p.npy", np.float32(2))`) reads as shape `[]`, a
/// scalar parameter. A `<f2` array is a float16 field and a `|V2` one
/// (what `np.save` writes for an `ml_dtypes.bfloat16` array) a bfloat16
/// field: stored at half width, computed in f32.
pub fn load_field(role: Role, b: &Binding) -> Result<Tensor, Failure> {
    let what = format!("{} field `{}`", role.name(), b.name);
    match tiga::read_npy(&b.path) {
        Ok(t) => Ok(t),
        Err(NpyError::UnsupportedDtype { path, found }) => Err(Failure::new(format!(
            "{what}: {path} has dtype '{found}'; expected '<f4' (float32), '<f8' (float64), '<f2' (float16) or '|V2' \
             (bfloat16, as np.save writes ml_dtypes.bfloat16), little-endian"
        ))),
        Err(e) => Err(Failure::new(format!("{what}: {e}"))),
    }
}

/// The dtype every field of a call shares, or `None` when they disagree (the
/// facade then names the fields).
pub fn common_dtype<'a>(tensors: impl IntoIterator<Item = &'a Tensor>) -> Option<DType> {
    let mut it = tensors.into_iter().map(|t| t.dtype());
    let first = it.next().unwrap_or(DType::F32);
    it.all(|d| d == first).then_some(first)
}

/// Whether `path` names a `.gfg` file: by extension, or by its magic bytes
/// whatever its name.
pub fn is_gfg(path: &Path) -> bool {
    if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gfg")) {
        return true;
    }
    let mut head = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
        .is_ok_and(|()| head == tiga_storage::MAGIC)
}

/// A graph for `run` or `explain`: read into memory from text, or left on
/// disk in a `.gfg` for a paged run.
pub enum GraphSource {
    Memory(Graph),
    Paged(GfgFile),
}

impl GraphSource {
    /// The graph as the kernel runs over it: in memory, or paged from the
    /// file.
    pub fn realization(&self) -> &dyn tiga::Realization {
        match self {
            GraphSource::Memory(g) => g,
            GraphSource::Paged(f) => f,
        }
    }

    pub fn num_src(&self) -> usize {
        match self {
            GraphSource::Memory(g) => g.num_src(),
            GraphSource::Paged(f) => f.num_src(),
        }
    }
    pub fn num_dst(&self) -> usize {
        match self {
            GraphSource::Memory(g) => g.num_dst(),
            GraphSource::Paged(f) => f.num_dst(),
        }
    }
    pub fn num_edges(&self) -> usize {
        match self {
            GraphSource::Memory(g) => g.num_edges(),
            GraphSource::Paged(f) => f.num_edges(),
        }
    }
    pub fn has_edge_ids(&self) -> bool {
        match self {
            GraphSource::Memory(g) => g.edge_ids().is_some(),
            GraphSource::Paged(f) => f.has_edge_ids(),
        }
    }
}

/// Opens `--graph`: a `.gfg` (by extension or content) stays on disk; any
/// other file is read as text (see [`load_graph`]). `edges.num_nodes`, for a
/// `.gfg`, must agree with the file.
pub fn open_graph(path: &Path, edges: &tiga::EdgeListOptions, sizes: &SizeCheck<'_>) -> Result<GraphSource, Failure> {
    if !is_gfg(path) {
        return load_graph(path, edges, sizes).map(GraphSource::Memory);
    }
    let num_nodes = edges.num_nodes;
    let file = GfgFile::open(path).map_err(|e| Failure::new(e.to_string()))?;
    if let Some(n) = num_nodes {
        if file.num_src() != n || file.num_dst() != n {
            return Err(Failure::new(format!(
                "--num-nodes {n} does not match {}, which holds {} sources and {} destinations (a .gfg knows its size; drop --num-nodes)",
                path.display(),
                file.num_src(),
                file.num_dst()
            )));
        }
    }
    sizes(Extents { num_src: file.num_src(), num_dst: file.num_dst(), num_edges: file.num_edges() })?;
    Ok(GraphSource::Paged(file))
}

/// How a paged call cuts a `.gfg` (`--page-rows`, `--page-bytes`, `--prefetch`).
#[derive(Clone, Debug, Default)]
pub struct PageArgs {
    pub page_rows: Option<usize>,
    pub page_bytes: Option<usize>,
    pub prefetch: Option<usize>,
}

impl PageArgs {
    pub fn given(&self) -> Option<&'static str> {
        if self.page_rows.is_some() {
            Some("--page-rows")
        } else if self.page_bytes.is_some() {
            Some("--page-bytes")
        } else if self.prefetch.is_some() {
            Some("--prefetch")
        } else {
            None
        }
    }

    /// The schedule of a call: the `TIGA_*` environment variables
    /// ([`Schedule::from_env`], parsed as strictly as the flags), then the
    /// flags over them. A `--page-bytes` flag replaces a page row count from
    /// the environment, as `--page-rows` would.
    pub fn schedule(&self) -> Result<Schedule, Failure> {
        let mut s = Schedule::from_env().map_err(|e| Failure::new(format!("environment: {e}")))?;
        if self.page_rows.is_some() || self.page_bytes.is_some() {
            s.page_rows = self.page_rows;
            s.page_bytes = self.page_bytes;
        }
        if self.prefetch.is_some() {
            s.prefetch = self.prefetch;
        }
        Ok(s)
    }

    /// The page plan over `file` for kernels that read its edge ids or not
    /// ([`tiga::Kernel::reads_edge_ids`]), described in one line: number of
    /// pages, rows per page, prefetch depth.
    pub fn describe(&self, file: &GfgFile, edge_ids: bool) -> Result<String, Failure> {
        let offsets = file.offsets().map_err(|e| Failure::new(e.to_string()))?;
        let edge_ids = edge_ids && file.has_edge_ids();
        let edge_bytes = 4 + if edge_ids { 8 } else { 0 };
        let schedule = self.schedule()?;
        let plan = schedule.plan(offsets, edge_bytes);
        let (min, max) = plan.iter().fold((usize::MAX, 0), |(lo, hi), r| (lo.min(r.len()), hi.max(r.len())));
        let rows = match (plan.len(), plan.last()) {
            (0, _) => "no rows".to_string(),
            (1, _) => format!("{max} rows per page"),
            (_, Some(last)) if schedule.page_bytes.is_none() && last.len() != max => {
                format!("{max} rows per page (last page {} rows)", last.len())
            }
            _ if min == max => format!("{max} rows per page"),
            _ => format!("{min} to {max} rows per page"),
        };
        let cut = match schedule.page_bytes {
            Some(b) => format!(", pages of at most {b} bytes of adjacency"),
            None => String::new(),
        };
        let ids = match (file.has_edge_ids(), edge_ids) {
            (true, false) => ", edge ids not read (no edge fields or outputs)",
            _ => "",
        };
        let order = match file.node_order().map_err(|e| Failure::new(e.to_string()))? {
            Some(o) => format!(
                ", rows in the file's stored node order `{}` (node fields moved into it and outputs back; parameter sums \
                 and a max/min backward's scatter read the rows in the caller's order)",
                o.method.name()
            ),
            None => String::new(),
        };
        Ok(format!("{} page(s), {rows}{cut}, prefetch depth {}{ids}{order}", plan.len(), schedule.prefetch_depth()))
    }
}
