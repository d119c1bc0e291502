//! `tigac explain`: what the compiler did to a kernel, without running it.
//!
//! The report itself is the facade's `Kernel::explain` (reducer class,
//! fusion, each pass with its remarks, the loop nest), so the CLI, the
//! library and the docs describe a kernel in the same words. This command
//! only finds the kernels, from source or from an artifact, and adds how a
//! call would realize the graph: `in_memory` (a CSR in RAM; the default, and
//! what any text graph gives) or, with `--graph FILE.gfg`, `paged_csr`: the
//! backing file and the page plan (pages, rows per page, prefetch depth).
//! With `--width F`, the JIT variant for that width is compiled first, so
//! the report shows what code generation chose for it. With `--target
//! ptx`, the GPU schedule of every kernel and adjoint stage
//! (`gpu_report`).

use std::io::Write as _;
use std::path::Path;

use crate::inputs::{is_gfg, load_kernels, open_graph, GraphSource, PageArgs};
use crate::report::Failure;

/// `--ranks`: the sharding to report.
#[derive(Debug)]
pub struct Sharding {
    pub ranks: usize,
    pub partition: String,
    pub depth: usize,
    pub width: Option<usize>,
    pub dtype: tiga::DType,
}

/// What `tigac explain` was asked.
pub struct ExplainRequest<'a> {
    pub file: &'a Path,
    pub kernel: Option<&'a str>,
    pub graph: Option<&'a Path>,
    pub edges: tiga::EdgeListOptions,
    pub paging: PageArgs,
    /// `--width F --dtype T`: the variant to compile and show.
    pub variant: Option<(usize, tiga::DType)>,
    pub sharding: Option<Sharding>,
    /// `--target ptx --sm N`.
    pub gpu: Option<u32>,
}

pub fn explain(r: &ExplainRequest<'_>) -> Result<(), Failure> {
    let (file, kernel, graph, edges, paging, variant, gpu) = (r.file, r.kernel, r.graph, &r.edges, &r.paging, r.variant, r.gpu);
    let sharding = r.sharding.as_ref();
    if let Some(flag) = paging.given() {
        match graph {
            Some(g) if is_gfg(g) => {}
            Some(g) => {
                return Err(Failure::new(format!(
                    "{flag} applies only to a .gfg graph (a paged run); {} is read into memory",
                    g.display()
                )))
            }
            None => return Err(Failure::new(format!("{flag} describes a paged run: pass --graph FILE.gfg too"))),
        }
    }
    let kernels = load_kernels(file, kernel)?;
    let schedule = paging.schedule()?;
    let realization = match graph {
        None => "realization: in_memory (CSR in RAM; pass --graph FILE.gfg to see a paged plan)\n".to_string(),
        Some(path) => match open_graph(path, edges, &crate::inputs::any_size)? {
            GraphSource::Memory(g) => format!(
                "realization: in_memory\n  graph: {} ({} sources, {} destinations, {} edges, read into RAM)\n",
                path.display(),
                g.num_src(),
                g.num_dst(),
                g.num_edges()
            ),
            GraphSource::Paged(f) => {
                let (major, minor) = f.version();
                format!(
                    "realization: paged_csr\n  backing file: {} (gfg {major}.{minor}; {} sources, {} destinations, {} edges; edge ids {}; transpose {})\n  page plan: {}\n",
                    path.display(),
                    f.num_src(),
                    f.num_dst(),
                    f.num_edges(),
                    if f.has_edge_ids() { "stored" } else { "identity" },
                    if f.has_transpose() { "stored" } else { "not stored" },
                    paging.describe(&f, kernels.iter().any(|k| k.reads_edge_ids()))?
                )
            }
        },
    };
    // `--width`: compile the variant first, so the report lists it with
    // its code-generation notes.
    if let Some((width, dtype)) = variant {
        for k in &kernels {
            let widths = vec![width; k.captured().widths.len()];
            k.variant(dtype, &widths, false).map_err(|e| Failure::new(format!("kernel `{}` at width {width}: {e}", k.name())))?;
        }
    }
    let sharded = match (sharding, graph) {
        (Some(s), Some(path)) => {
            let width = s.width.unwrap_or(1);
            let assumed = match s.width {
                Some(w) => format!("source fields in {}, vectors {w} wide", s.dtype.name()),
                None => format!("source fields in {}, vectors taken 1 wide: pass --width F", s.dtype.name()),
            };
            let rb = crate::partition_report::row_bytes(&kernels, width, s.dtype);
            Some(crate::partition_report::report(path, edges, s.ranks, &s.partition, s.depth, rb, &assumed)?)
        }
        _ => None,
    };
    let gpu = match gpu {
        Some(sm) => {
            let (width, dtype) = variant.unwrap_or((crate::compile::EMIT_WIDTH, tiga::DType::F32));
            Some(crate::gpu_report::report(&kernels, sm, width, dtype)?)
        }
        None => None,
    };
    let text: Vec<String> = kernels.iter().map(|k| k.explain()).collect();
    let mut out = std::io::stdout().lock();
    // A closed pipe (`tigac explain .. | head`) is not an error worth a message.
    let _ = out.write_all(text.join("\n").as_bytes());
    let _ = out.write_all(b"\n");
    let _ = out.write_all(realization.as_bytes());
    let _ = writeln!(out, "schedule: {schedule}");
    if let Some(s) = sharded {
        let _ = out.write_all(s.as_bytes());
    }
    if let Some(g) = gpu {
        let _ = out.write_all(g.as_bytes());
    }
    let _ = out.flush();
    Ok(())
}
