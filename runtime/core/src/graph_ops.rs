//! Ordinary functions on graphs, the ones a PyTorch Geometric user reaches
//! for: a graph from an `edge_index`, in- and out-degrees, self loops, the
//! symmetric GCN normalization, and a batch of small graphs as one
//! block-diagonal graph whose outputs split back per graph.
//!
//! Edge-valued results (weights) are in the user's edge order: the order
//! of the edge list the graph was built from, which is the order edge
//! fields follow.

use crate::{graph::Graph, graph::GraphError, tensor::Tensor, tensor::TensorError, tensor::TensorView};

/// A graph from PyG's `edge_index`: a `[2, E]` array, row-major (the `E`
/// sources, then the `E` destinations), over `num_nodes` nodes, edges in
/// its column order. Negative ids and ids of `num_nodes` or more are
/// errors naming the edge.
pub fn from_edge_index(num_nodes: usize, edge_index: &[i64]) -> Result<Graph, GraphError> {
    from_edge_index_sized(num_nodes, num_nodes, edge_index)
}

/// [`from_edge_index`] of a bipartite graph (PyG's `size=(num_src,
/// num_dst)`): sources below `num_src`, destinations below `num_dst`, as a
/// sampled block's layer has fewer destinations than sources.
pub fn from_edge_index_sized(num_src: usize, num_dst: usize, edge_index: &[i64]) -> Result<Graph, GraphError> {
    if !edge_index.len().is_multiple_of(2) {
        return Err(GraphError::EdgeIndexShape { len: edge_index.len() });
    }
    let e = edge_index.len() / 2;
    let id = |edge: usize, row: usize| -> Result<u32, GraphError> {
        let v = edge_index[row * e + edge];
        let num_nodes = if row == 0 { num_src } else { num_dst };
        u32::try_from(v).ok().filter(|&x| (x as usize) < num_nodes).ok_or(GraphError::EdgeIndexNode {
            edge,
            row: if row == 0 { "source" } else { "destination" },
            id: v,
            num_nodes,
        })
    };
    let (mut src, mut dst) = (Vec::with_capacity(e), Vec::with_capacity(e));
    for edge in 0..e {
        src.push(id(edge, 0)?);
        dst.push(id(edge, 1)?);
    }
    Graph::from_edges(num_src, num_dst, &src, &dst)
}

/// Each destination's number of in-edges (its CSR row length).
pub fn in_degree(g: &Graph) -> Vec<u64> {
    g.offsets().windows(2).map(|w| w[1] - w[0]).collect()
}

/// Each source's number of out-edges.
pub fn out_degree(g: &Graph) -> Vec<u64> {
    let mut d = vec![0u64; g.num_src()];
    for &c in g.cols() {
        d[c as usize] += 1;
    }
    d
}

/// The edge list in the user's order, then a self loop `i → i` for every
/// node (PyG's `add_self_loops`; a graph with `num_src != num_dst` loops
/// the first `min` nodes).
pub fn add_self_loops(g: &Graph) -> Result<Graph, GraphError> {
    let (mut src, mut dst) = g.coo_in_user_order();
    let n = g.num_src().min(g.num_dst());
    let ids = u32::try_from(n).map_err(|_| GraphError::TooManyNodes { side: "source", count: n })?;
    src.extend(0..ids);
    dst.extend(0..ids);
    Graph::from_edges(g.num_src(), g.num_dst(), &src, &dst)
}

/// What [`add_self_loops_first`] does with a row that already holds a loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExistingLoops {
    /// Insert one anyway (WholeGraph's `add_csr_self_loop`, which does not look).
    Insert,
    /// Leave that row as it is.
    Skip,
}

/// Each row's own id inserted first in its CSR row (WholeGraph's
/// `add_csr_self_loop`), so a sampler or kernel meets the loop before the
/// row's other edges. The graph's edges keep their user edge ids; the new
/// loops get the ids after them, in row order. Square graphs only.
pub fn add_self_loops_first(g: &Graph, existing: ExistingLoops) -> Result<Graph, GraphError> {
    if g.num_src() != g.num_dst() {
        return Err(GraphError::NotSquare { num_src: g.num_src(), num_dst: g.num_dst() });
    }
    let n = g.num_dst();
    let mut offsets = Vec::with_capacity(n + 1);
    let mut cols = Vec::with_capacity(g.num_edges() + n);
    let mut ids = Vec::with_capacity(g.num_edges() + n);
    let mut next_id = g.num_edges() as u64;
    offsets.push(0u64);
    for i in 0..n {
        let row = g.row(i);
        let has_loop = g.cols()[row.clone()].iter().any(|&c| c as usize == i);
        if existing == ExistingLoops::Insert || !has_loop {
            // `n` fits u32: `Graph` refuses more nodes.
            cols.push(i as u32);
            ids.push(next_id);
            next_id += 1;
        }
        for p in row {
            cols.push(g.cols()[p]);
            ids.push(g.edge_id(p));
        }
        offsets.push(cols.len() as u64);
    }
    Graph::from_csr_with_edge_ids(n, n, offsets, cols, Some(ids))
}

/// What [`gcn_norm`] does besides normalizing: PyG's `gcn_norm` arguments
/// of the same names (flow is source to target).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcnNormOptions {
    /// Replace each node's self loops by one loop (PyG's
    /// `add_remaining_self_loops`): the loop keeps the weight of the node's
    /// last existing loop, or gets the fill weight.
    pub add_self_loops: bool,
    /// The fill weight of an added loop is 2 rather than 1.
    pub improved: bool,
}

impl Default for GcnNormOptions {
    fn default() -> GcnNormOptions {
        GcnNormOptions { add_self_loops: true, improved: false }
    }
}

/// Why [`gcn_norm`] refused its input.
#[derive(Debug, thiserror::Error)]
pub enum GcnNormError {
    #[error(transparent)]
    Graph(#[from] GraphError),
    #[error("edge weights have shape {shape:?}, expected [{edges}] (one per edge, in the graph's edge order)")]
    WeightShape { shape: Vec<usize>, edges: usize },
    #[error(transparent)]
    Tensor(#[from] TensorError),
}

/// The symmetric GCN normalization of PyG's `gcn_norm` (flow source to
/// target), edge weights included: with `how.add_self_loops`, the edges
/// that are not self loops keep their order and one loop per node follows
/// them in node order, as PyG's `add_remaining_self_loops` builds it; then
/// each edge `j → i` of weight `w` (1 without weights) is weighted
/// `deg(j)^-1/2 · w · deg(i)^-1/2`, `deg` being the weighted in-degree of
/// that graph (0 where a degree is 0). Returns that graph and its weights
/// in its edge order as a `[E]` tensor of `dtype` (computed in f64, rounded
/// once; give the fields' dtype so the weights bind beside them). The
/// graph must be square (`num_src == num_dst`).
pub fn gcn_norm(
    g: &Graph,
    edge_weight: Option<TensorView<'_>>,
    dtype: crate::tensor::DType,
    how: GcnNormOptions,
) -> Result<(Graph, Tensor), GcnNormError> {
    if g.num_src() != g.num_dst() {
        return Err(GraphError::NotSquare { num_src: g.num_src(), num_dst: g.num_dst() }.into());
    }
    let n = g.num_dst();
    let (src, dst) = g.coo_in_user_order();
    let weights = match edge_weight {
        Some(v) if v.shape() != [src.len()] => {
            return Err(GcnNormError::WeightShape { shape: v.shape().to_vec(), edges: src.len() })
        }
        Some(v) => v.to_f64_vec(),
        None => vec![1.0; src.len()],
    };
    let (src, dst, weights) = if how.add_self_loops {
        let fill = if how.improved { 2.0 } else { 1.0 };
        let mut loop_weight = vec![fill; n];
        let (mut s2, mut d2, mut w2) = (Vec::new(), Vec::new(), Vec::new());
        for ((&s, &d), &w) in src.iter().zip(&dst).zip(&weights) {
            if s == d {
                loop_weight[s as usize] = w;
            } else {
                s2.push(s);
                d2.push(d);
                w2.push(w);
            }
        }
        // `n` fits u32: `Graph` refuses more nodes.
        s2.extend(0..n as u32);
        d2.extend(0..n as u32);
        w2.extend(loop_weight);
        (s2, d2, w2)
    } else {
        (src, dst, weights)
    };
    let h = Graph::from_edges(n, n, &src, &dst)?;
    let mut deg = vec![0.0f64; n];
    for (&d, &w) in dst.iter().zip(&weights) {
        deg[d as usize] += w;
    }
    let inv_sqrt: Vec<f64> = deg.iter().map(|&d| if d == 0.0 { 0.0 } else { 1.0 / d.sqrt() }).collect();
    let w: Vec<f64> =
        src.iter().zip(&dst).zip(&weights).map(|((&s, &d), &w)| inv_sqrt[s as usize] * w * inv_sqrt[d as usize]).collect();
    let t = match dtype {
        crate::tensor::DType::F32 => Tensor::from_f32(vec![w.len()], w.iter().map(|&x| x as f32).collect())?,
        crate::tensor::DType::F64 => Tensor::from_f64(vec![w.len()], w)?,
    };
    Ok((h, t))
}

/// Small graphs as one block-diagonal graph (PyG's `Batch`): the nodes of
/// graph `k` follow those of graphs `0..k`, edges in graph order. The
/// offsets are kept, so a batched field is built from the per-graph ones
/// and an output splits back.
#[derive(Debug, Clone)]
pub struct Batch {
    pub graph: Graph,
    /// Graph `k`'s sources are `src_offsets[k] .. src_offsets[k + 1]`.
    pub src_offsets: Vec<usize>,
    pub dst_offsets: Vec<usize>,
    pub edge_offsets: Vec<usize>,
}

impl Batch {
    pub fn new(graphs: &[&Graph]) -> Result<Batch, GraphError> {
        let (mut so, mut dof, mut eo) = (vec![0usize], vec![0usize], vec![0usize]);
        let (mut src, mut dst) = (Vec::new(), Vec::new());
        for g in graphs {
            let (s0, d0) = (*so.last().unwrap_or(&0), *dof.last().unwrap_or(&0));
            // Shifted ids must stay u32 node ids.
            for (side, count) in [("source", s0 + g.num_src()), ("destination", d0 + g.num_dst())] {
                if u32::try_from(count).is_err() {
                    return Err(GraphError::TooManyNodes { side, count });
                }
            }
            let (s, d) = g.coo_in_user_order();
            src.extend(s.iter().map(|&x| x + s0 as u32));
            dst.extend(d.iter().map(|&x| x + d0 as u32));
            so.push(s0 + g.num_src());
            dof.push(d0 + g.num_dst());
            eo.push(eo.last().unwrap_or(&0) + g.num_edges());
        }
        let graph = Graph::from_edges(*so.last().unwrap_or(&0), *dof.last().unwrap_or(&0), &src, &dst)?;
        Ok(Batch { graph, src_offsets: so, dst_offsets: dof, edge_offsets: eo })
    }

    /// The number of graphs.
    pub fn len(&self) -> usize {
        self.dst_offsets.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Per-graph fields, one row per node (or edge) each, stacked into the
    /// batched field; `offsets` is [`Batch::src_offsets`],
    /// [`Batch::dst_offsets`] or [`Batch::edge_offsets`], for the role.
    pub fn stack(offsets: &[usize], parts: &[TensorView<'_>]) -> Result<Tensor, BatchError> {
        let row = |v: &TensorView<'_>| v.shape().iter().skip(1).product::<usize>();
        let first = parts.first().ok_or(BatchError::Empty)?;
        if parts.len() + 1 != offsets.len() {
            return Err(BatchError::Count { graphs: offsets.len().saturating_sub(1), parts: parts.len() });
        }
        let mut shape = first.shape().to_vec();
        shape[0] = offsets[offsets.len() - 1];
        let mut data = Vec::with_capacity(shape.iter().product());
        for (k, v) in parts.iter().enumerate() {
            if v.shape().first() != Some(&(offsets[k + 1] - offsets[k])) || row(v) != row(first) || v.dtype() != first.dtype() {
                return Err(BatchError::Part { part: k, shape: v.shape().to_vec() });
            }
            data.extend(v.to_f64_vec());
        }
        Ok(match first.dtype() {
            crate::tensor::DType::F32 => Tensor::from_f32(shape, data.iter().map(|&x| x as f32).collect())?,
            crate::tensor::DType::F64 => Tensor::from_f64(shape, data)?,
        })
    }

    /// A batched output (one row per destination, or per edge with
    /// `offsets` = [`Batch::edge_offsets`]) split back per graph.
    pub fn split(offsets: &[usize], t: &Tensor) -> Result<Vec<Tensor>, BatchError> {
        let rows = *t.shape().first().ok_or(BatchError::Part { part: 0, shape: t.shape().to_vec() })?;
        if offsets.last() != Some(&rows) {
            return Err(BatchError::Part { part: 0, shape: t.shape().to_vec() });
        }
        let width: usize = t.shape().iter().skip(1).product();
        let all = t.to_f64_vec();
        offsets
            .windows(2)
            .map(|w| {
                let mut shape = t.shape().to_vec();
                shape[0] = w[1] - w[0];
                let part = all[w[0] * width..w[1] * width].to_vec();
                Ok(match t.dtype() {
                    crate::tensor::DType::F32 => Tensor::from_f32(shape, part.iter().map(|&x| x as f32).collect())?,
                    crate::tensor::DType::F64 => Tensor::from_f64(shape, part)?,
                })
            })
            .collect()
    }
}

/// Why fields could not be stacked into a batch or split back.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error("no parts to stack")]
    Empty,
    #[error("{parts} parts for a batch of {graphs} graphs")]
    Count { graphs: usize, parts: usize },
    #[error("part {part} has shape {shape:?}, which does not fit its graph's rows or the other parts' row width and dtype")]
    Part { part: usize, shape: Vec<usize> },
    #[error(transparent)]
    Tensor(#[from] TensorError),
}
