//! A mini-batch: the block format of `tigac sample` plus the features
//! gathered for it, and a realization kernels run on directly.
//!
//! **The block.** `nodes` are global ids, the seeds first (as given), then
//! each node in order of first appearance over the hops; hop `k`'s edges
//! `src[e] → dst[e]` are indices into `nodes` (dst the centre, src the
//! sampled neighbour) with the graph's edge ids beside them: exactly what
//! `tigac sample` writes for the same seeds, fanouts and seed.
//!
//! **The realization.** [`MiniBatch`] is a [`Graph`] over the local
//! indices (`nodes.len()` sources and destinations) holding every hop's
//! edges, hop 0's first, in hop order: that order is its user edge order,
//! so an edge feature gathered for the batch (`edge_features`, in the same
//! order) is an edge field of a call. A node field of a call is a row per
//! entry of `nodes` (`node_features` are gathered that way). A layer-wise
//! model that wants only the first hops uses [`MiniBatch::hops_graph`].

use tiga_runtime::exec::{ExecError, Side};
use tiga_runtime::realization::{Realization, Rows};
use tiga_runtime::{Graph, GraphError, Tensor};

/// One hop's edges: `dst` the centre, `src` the sampled neighbour, both
/// indices into [`super::MultiHop::nodes`], and the user edge id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hop {
    pub src: Vec<u32>,
    pub dst: Vec<u32>,
    pub edge_ids: Vec<u64>,
}

/// See the module doc.
#[derive(Debug, Clone)]
pub struct MiniBatch {
    /// Global node ids: the seeds first, then new nodes by first appearance.
    pub nodes: Vec<i64>,
    /// How many of `nodes` are the batch's seeds.
    pub num_seeds: usize,
    /// Per hop, the sampled edges in local indices, with global edge ids.
    pub hops: Vec<Hop>,
    /// The seed the hops were sampled with.
    pub sample_seed: u64,
    /// Rows per entry of `nodes`.
    pub node_features: Vec<(String, Tensor)>,
    /// Rows per edge of the block, in hop order.
    pub edge_features: Vec<(String, Tensor)>,
    graph: Graph,
}

impl MiniBatch {
    /// The block of `nodes` and `hops` (local indices, checked).
    pub fn new(nodes: Vec<i64>, num_seeds: usize, hops: Vec<Hop>, sample_seed: u64) -> Result<MiniBatch, GraphError> {
        let graph = block_graph(nodes.len(), &hops, hops.len())?;
        Ok(MiniBatch { nodes, num_seeds, hops, sample_seed, node_features: Vec::new(), edge_features: Vec::new(), graph })
    }

    /// The block as a graph (every hop).
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The block of the first `k` hops only (same nodes).
    pub fn hops_graph(&self, k: usize) -> Result<Graph, GraphError> {
        block_graph(self.nodes.len(), &self.hops, k.min(self.hops.len()))
    }

    /// Edges of the block (all hops).
    pub fn num_block_edges(&self) -> usize {
        self.hops.iter().map(|h| h.src.len()).sum()
    }

    pub fn node_feature(&self, name: &str) -> Option<&Tensor> {
        self.node_features.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    pub fn edge_feature(&self, name: &str) -> Option<&Tensor> {
        self.edge_features.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// The global ids of the block's edges, in hop order (the order of
    /// `edge_features` and of the block graph's edges).
    pub fn block_edge_ids(&self) -> Vec<u64> {
        self.hops.iter().flat_map(|h| h.edge_ids.iter().copied()).collect()
    }
}

fn block_graph(n: usize, hops: &[Hop], k: usize) -> Result<Graph, GraphError> {
    let src: Vec<u32> = hops[..k].iter().flat_map(|h| h.src.iter().copied()).collect();
    let dst: Vec<u32> = hops[..k].iter().flat_map(|h| h.dst.iter().copied()).collect();
    Graph::from_edges(n, n, &src, &dst)
}

impl Realization for MiniBatch {
    fn num_src(&self) -> usize {
        self.graph.num_src()
    }
    fn num_dst(&self) -> usize {
        self.graph.num_dst()
    }
    fn num_edges(&self) -> usize {
        self.graph.num_edges()
    }
    fn rows(&self, side: Side, edge_ids: bool) -> Result<Rows<'_>, ExecError> {
        Realization::rows(&self.graph, side, edge_ids)
    }
    fn describe(&self) -> String {
        format!(
            "mini_batch ({} nodes of which {} seeds, {} hops, {} edges; CSR in RAM)",
            self.nodes.len(),
            self.num_seeds,
            self.hops.len(),
            self.graph.num_edges()
        )
    }
}
