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
//! the report shows what code generation chose for it.

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

pub fn explain(
    file: &Path,
    kernel: Option<&str>,
    graph: Option<&Path>,
    edges: &tiga::EdgeListOptions,
    paging: &PageArgs,
    variant: Option<(usize, tiga::DType)>,
    sharding: Option<&Sharding>,
) -> Result<(), Failure> {
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
    let _ = out.flush();
    Ok(())
}
