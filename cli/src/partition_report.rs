//! `tigac explain --ranks R`: how a graph would be sharded over R ranks,
//! computed in this one process (no MPI needed): per rank, the rows and
//! edges it owns, its ghosts, the rows it sends and the bytes of one halo
//! exchange; and the partition's edge cut.

use std::path::Path;

use tiga::runtime::shard::{edge_cut, partitions, plan_all, PartitionChoice, HEADER_BYTES};
use tiga::Kernel;

use crate::inputs::{open_graph, GraphSource};
use crate::report::Failure;

/// `--partition`'s values.
pub fn choice(name: &str) -> Result<PartitionChoice, Failure> {
    match name {
        "contiguous" => Ok(PartitionChoice::Contiguous),
        "balanced" => Ok(PartitionChoice::Balanced),
        "metis" => Ok(PartitionChoice::Metis),
        other => Err(Failure::new(format!("--partition {other}: expected contiguous, balanced or metis"))),
    }
}

/// Bytes of one slot's row in a halo message: the kernel's source fields,
/// vectors `width` wide, in `dtype`.
pub fn row_bytes(kernels: &[Kernel], width: usize, dtype: tiga::DType) -> usize {
    kernels
        .iter()
        .flat_map(|k| k.captured().fields.iter().filter(|f| f.role == tiga::compiler::ir::Role::Src))
        .map(|f| match f.ty {
            tiga::compiler::ir::Type::Vector(_) | tiga::compiler::ir::Type::Mask(_) => width * dtype.size(),
            tiga::compiler::ir::Type::Matrix(_, _) => width * width * dtype.size(),
            _ => dtype.size(),
        })
        .sum()
}

/// The report's text.
pub fn report(
    path: &Path,
    edges: &tiga::EdgeListOptions,
    ranks: usize,
    partition: &str,
    depth: usize,
    row_bytes: usize,
    assumed: &str,
) -> Result<String, Failure> {
    let choice = choice(partition)?;
    let graph = match open_graph(path, edges, &crate::inputs::any_size)? {
        GraphSource::Memory(g) => g,
        // A partition is of the caller's numbering, whatever order the
        // file's rows are stored in.
        GraphSource::Paged(f) => f.load_caller_graph().map_err(|e| Failure::new(e.to_string()))?,
    };
    let (dst, src) = partitions(&graph, &choice, ranks).map_err(|e| Failure::new(format!("--partition {partition}: {e}")))?;
    let plans = plan_all(&graph, &dst, &src, depth).map_err(|e| Failure::new(e.to_string()))?;
    let mut out = format!(
        "partition: {} over {ranks} ranks, halo depth {depth} ({} sources, {} destinations, {} edges)\n  \
         row bytes per exchanged slot: {row_bytes} ({assumed}); header {HEADER_BYTES} bytes per peer\n  \
         {:>5} {:>12} {:>12} {:>10} {:>10} {:>14} {:>14}\n",
        dst.method().name(),
        graph.num_src(),
        graph.num_dst(),
        graph.num_edges(),
        "rank",
        "owned rows",
        "edges",
        "ghosts",
        "sent rows",
        "bytes in",
        "bytes out"
    );
    for p in &plans {
        let l = &p.local;
        let peers = l.world.saturating_sub(1);
        let _ = std::fmt::Write::write_fmt(
            &mut out,
            format_args!(
                "  {:>5} {:>12} {:>12} {:>10} {:>10} {:>14} {:>14}\n",
                l.rank,
                l.owned_rows,
                l.owned_edges,
                p.ghost_rows(),
                p.sent_rows(),
                p.ghost_rows() * row_bytes + peers * HEADER_BYTES,
                p.sent_rows() * row_bytes + peers * HEADER_BYTES
            ),
        );
    }
    let cut = edge_cut(&graph, &dst, &src);
    let _ = std::fmt::Write::write_fmt(
        &mut out,
        format_args!(
            "  edge cut: {cut} of {} edges ({:.2}%); every reducer runs sharded: each rank owns its rows whole\n",
            graph.num_edges(),
            if graph.num_edges() == 0 { 0.0 } else { 100.0 * cut as f64 / graph.num_edges() as f64 }
        ),
    );
    Ok(out)
}
