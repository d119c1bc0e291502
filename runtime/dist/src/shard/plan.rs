//! The halo plan of one rank: which rows it computes, which sources it
//! reads (its own and its ghosts), and which rows it sends to and receives
//! from each peer.
//!
//! Built in two steps, because a rank knows its own ghosts but not who
//! needs its rows: [`LocalShard::build`] gives the rank's rows, slots and
//! local CSR and the ghosts it will ask each owner for
//! ([`LocalShard::requests`]); [`ShardPlan::finish`] takes the peers'
//! requests (exchanged over a communicator, or computed for every rank at
//! once by [`plan_all`], which `explain` uses) and turns them into send
//! lists.
//!
//! Local numbering. Rows: the owned rows in increasing user id (so a
//! rank's outputs are its local rows as they are, in the order users see),
//! then, at depth k > 1, the ghost rows of levels 1..k-1 (computed
//! redundantly so that k steps need one exchange). The owned rows that read
//! no ghost (interior) and those that do (boundary) are listed as runs of
//! local rows: the interior runs compute while the ghosts travel. Slots (the columns of
//! the local CSR): the owned sources in increasing user id, then the ghosts
//! grouped by owner in increasing rank, each group in increasing user id,
//! so that a peer's rows land in one contiguous range. Each local row keeps
//! its edges in the whole graph's order, so it computes the same bits as
//! one process does.

use std::ops::Range;

use crate::partition::Partition;
use tiga_runtime::{Graph, GraphError};

/// Why a plan could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("the partition covers {partition} nodes, but the graph has {graph} {side}")]
    PartitionSize { partition: usize, graph: usize, side: &'static str },
    #[error("rank {rank} is not in a world of {world}")]
    Rank { rank: usize, world: usize },
    #[error("a halo of depth {0} is not supported: depth is at least 1 (and at most 255)")]
    Depth(usize),
    #[error(
        "a halo deeper than 1 needs a square graph partitioned once (sources and destinations the same nodes); this one \
         has {num_src} sources and {num_dst} destinations"
    )]
    DepthNeedsSquare { num_src: usize, num_dst: usize },
    #[error("rank {peer} asked for node {node}, which this rank ({rank}) does not own: the ranks' plans differ")]
    BadRequest { peer: usize, node: u32, rank: usize },
    #[error("{0} requests lists for a world of {1}")]
    Requests(usize, usize),
    #[error(transparent)]
    Graph(#[from] GraphError),
}

/// One rank's rows, slots and local CSR, before the send lists are known.
#[derive(Debug, Clone)]
pub struct LocalShard {
    pub rank: usize,
    pub world: usize,
    pub depth: usize,
    pub num_src: usize,
    pub num_dst: usize,
    pub num_edges: usize,
    /// User ids of the local rows (see the module doc for their order).
    pub rows: Vec<u32>,
    /// Runs of owned rows that read no ghost, and of those that do; they
    /// cover `0..owned_rows` once, in order.
    pub interior: Vec<Range<usize>>,
    pub boundary: Vec<Range<usize>>,
    pub owned_rows: usize,
    /// User ids of the slots: owned sources, then ghosts by owner.
    pub slots: Vec<u32>,
    pub owned_slots: usize,
    /// Ghost slots received from each peer.
    pub recv: Vec<Range<usize>>,
    /// The local CSR: rows × slots; `None` once the rows were written to a
    /// local file and run from its pages ([`crate::shard::Sharded::page_local`]).
    pub graph: Option<Graph>,
    /// Edges of the local CSR (all local rows).
    pub local_edges: usize,
    /// The user edge id of each local CSR position.
    pub edge_ids: Vec<u64>,
    /// Edges of the owned rows: local positions `0..owned_edges`.
    pub owned_edges: usize,
    /// For a square graph, the slot of each local row's node (the output of
    /// a row feeds that slot when a kernel is iterated).
    pub row_slot: Option<Vec<u32>>,
}

impl LocalShard {
    /// Rank `rank`'s part of `graph` (rows by destination, user numbering):
    /// destinations owned as `dst` says, sources as `src` says (the same
    /// partition for a square graph), ghosts `depth` hops deep.
    pub fn build(graph: &Graph, dst: &Partition, src: &Partition, rank: usize, depth: usize) -> Result<LocalShard, PlanError> {
        let (ns, nd) = (graph.num_src(), graph.num_dst());
        if dst.num_nodes() != nd {
            return Err(PlanError::PartitionSize { partition: dst.num_nodes(), graph: nd, side: "destinations" });
        }
        if src.num_nodes() != ns {
            return Err(PlanError::PartitionSize { partition: src.num_nodes(), graph: ns, side: "sources" });
        }
        let world = dst.parts();
        if rank >= world || src.parts() != world {
            return Err(PlanError::Rank { rank, world });
        }
        if depth == 0 || depth > 255 {
            return Err(PlanError::Depth(depth));
        }
        let square = ns == nd && src == dst;
        if depth > 1 && !square {
            return Err(PlanError::DepthNeedsSquare { num_src: ns, num_dst: nd });
        }
        // Levels: 0 owned, l the hops (against the edges) from an owned
        // row; u8::MAX not needed. Rows of levels < depth are computed,
        // sources of levels <= depth are read.
        const FAR: u8 = u8::MAX;
        let owned_rows_user = dst.owned(rank);
        let owned_src_user = src.owned(rank);
        let mut src_level = vec![FAR; ns];
        for &u in owned_src_user {
            src_level[u as usize] = 0;
        }
        let mut frontier: Vec<u32> = owned_rows_user.to_vec();
        let mut ghost_rows: Vec<u32> = Vec::new();
        for level in 1..=depth {
            let mut next = Vec::new();
            for &v in &frontier {
                for p in graph.row(v as usize) {
                    let u = graph.cols()[p];
                    if src_level[u as usize] == FAR {
                        src_level[u as usize] = level as u8;
                        next.push(u);
                    }
                }
            }
            if level < depth {
                // Square: a source node is a row too.
                ghost_rows.extend_from_slice(&next);
            }
            frontier = next;
        }
        // Slots: owned sources, then ghosts by (owner, user id).
        let mut ghosts: Vec<u32> =
            (0..ns as u32).filter(|&u| src_level[u as usize] != FAR && src_level[u as usize] != 0).collect();
        ghosts.sort_by_key(|&u| (src.part_of(u as usize), u));
        let mut slots = owned_src_user.to_vec();
        let owned_slots = slots.len();
        let mut recv = Vec::with_capacity(world);
        let mut at = owned_slots;
        for p in 0..world {
            let count = ghosts[at - owned_slots..].iter().take_while(|&&u| src.part_of(u as usize) == p).count();
            recv.push(at..at + count);
            at += count;
        }
        slots.extend_from_slice(&ghosts);
        let mut slot_of = vec![u32::MAX; ns];
        for (i, &u) in slots.iter().enumerate() {
            slot_of[u as usize] = i as u32;
        }
        // Rows: the owned ones, then ghost rows; interior and boundary runs.
        let reads_ghost = |v: u32| graph.row(v as usize).any(|p| slot_of[graph.cols()[p] as usize] as usize >= owned_slots);
        let mut rows = owned_rows_user.to_vec();
        let owned_rows = rows.len();
        let (mut interior, mut boundary): (Vec<Range<usize>>, Vec<Range<usize>>) = (Vec::new(), Vec::new());
        for (i, &v) in rows.iter().enumerate() {
            let runs = if reads_ghost(v) { &mut boundary } else { &mut interior };
            match runs.last_mut() {
                Some(r) if r.end == i => r.end += 1,
                _ => runs.push(i..i + 1),
            }
        }
        ghost_rows.sort_by_key(|&u| slot_of[u as usize]);
        rows.extend_from_slice(&ghost_rows);
        // The local CSR, each row's edges in the graph's order.
        let mut offsets = Vec::with_capacity(rows.len() + 1);
        offsets.push(0u64);
        let mut cols = Vec::new();
        let mut edge_ids = Vec::new();
        let mut owned_edges = 0;
        for (i, &v) in rows.iter().enumerate() {
            for p in graph.row(v as usize) {
                cols.push(slot_of[graph.cols()[p] as usize]);
                edge_ids.push(graph.edge_id(p));
            }
            offsets.push(cols.len() as u64);
            if i + 1 == owned_rows {
                owned_edges = cols.len();
            }
        }
        let row_slot = square.then(|| rows.iter().map(|&v| slot_of[v as usize]).collect());
        let local = Graph::from_csr(slots.len(), rows.len(), offsets, cols)?;
        let local_edges = local.num_edges();
        Ok(LocalShard {
            rank,
            world,
            depth,
            num_src: ns,
            num_dst: nd,
            num_edges: graph.num_edges(),
            rows,
            interior,
            boundary,
            owned_rows,
            slots,
            owned_slots,
            recv,
            graph: Some(local),
            local_edges,
            edge_ids,
            owned_edges,
            row_slot,
        })
    }

    /// The ghosts this rank asks each peer for: `requests()[p]` are user
    /// ids that rank `p` owns, in the order they fill this rank's slots.
    pub fn requests(&self) -> Vec<Vec<u32>> {
        self.recv.iter().map(|r| self.slots[r.clone()].to_vec()).collect()
    }
}

/// A rank's complete halo plan: its [`LocalShard`] and, for each peer, the
/// owned slots whose rows that peer reads (in the order of the peer's
/// ghost slots).
#[derive(Debug, Clone)]
pub struct ShardPlan {
    pub local: LocalShard,
    pub send: Vec<Vec<u32>>,
}

impl ShardPlan {
    /// The plan, given what each peer asked of this rank
    /// (`requests_from[p]`: user ids, see [`LocalShard::requests`]).
    pub fn finish(local: LocalShard, requests_from: Vec<Vec<u32>>) -> Result<ShardPlan, PlanError> {
        if requests_from.len() != local.world {
            return Err(PlanError::Requests(requests_from.len(), local.world));
        }
        let owned = &local.slots[..local.owned_slots];
        let mut send = Vec::with_capacity(local.world);
        for (peer, req) in requests_from.into_iter().enumerate() {
            let mut list = Vec::with_capacity(req.len());
            for node in req {
                // Owned slots are in increasing user id.
                let at = owned.binary_search(&node).map_err(|_| PlanError::BadRequest { peer, node, rank: local.rank })?;
                list.push(at as u32);
            }
            send.push(list);
        }
        Ok(ShardPlan { local, send })
    }

    /// Rows this rank sends per exchange, over all peers.
    pub fn sent_rows(&self) -> usize {
        self.send.iter().map(Vec::len).sum()
    }
    /// Ghost rows this rank receives per exchange.
    pub fn ghost_rows(&self) -> usize {
        self.local.slots.len() - self.local.owned_slots
    }
    /// Peers this rank exchanges with (sends to or receives from).
    pub fn peers(&self) -> usize {
        (0..self.local.world)
            .filter(|&p| p != self.local.rank && (!self.send[p].is_empty() || !self.local.recv[p].is_empty()))
            .count()
    }
}

/// Every rank's plan, computed in one process (for `explain` and tests;
/// a sharded run asks its peers instead).
pub fn plan_all(graph: &Graph, dst: &Partition, src: &Partition, depth: usize) -> Result<Vec<ShardPlan>, PlanError> {
    let world = dst.parts();
    let locals = (0..world).map(|r| LocalShard::build(graph, dst, src, r, depth)).collect::<Result<Vec<_>, _>>()?;
    let requests: Vec<Vec<Vec<u32>>> = locals.iter().map(LocalShard::requests).collect();
    locals
        .into_iter()
        .enumerate()
        .map(|(r, l)| ShardPlan::finish(l, requests.iter().map(|req| req[r].clone()).collect()))
        .collect()
}

/// Edges whose source and destination are owned by different ranks (the
/// edge cut of a square graph's partition).
pub fn edge_cut(graph: &Graph, dst: &Partition, src: &Partition) -> usize {
    (0..graph.num_dst()).map(|v| graph.row(v).filter(|&p| src.part_of(graph.cols()[p] as usize) != dst.part_of(v)).count()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 8-node ring with self loops: rank 0 owns 0..4, rank 1 4..8.
    fn ring() -> Graph {
        let (mut s, mut d) = (Vec::new(), Vec::new());
        for i in 0..8u32 {
            for j in [(i + 7) % 8, i, (i + 1) % 8] {
                s.push(j);
                d.push(i);
            }
        }
        Graph::from_edges(8, 8, &s, &d).expect("ring")
    }

    #[test]
    fn ring_plan_on_two_ranks() {
        let g = ring();
        let p = Partition::contiguous(8, 2).expect("partition");
        let plans = plan_all(&g, &p, &p, 1).expect("plans");
        let r0 = &plans[0];
        assert_eq!(r0.local.rows, vec![0, 1, 2, 3]);
        assert_eq!(r0.local.interior, vec![1..3]);
        assert_eq!(r0.local.boundary, vec![0..1, 3..4]);
        assert_eq!(r0.local.slots, vec![0, 1, 2, 3, 4, 7]);
        assert_eq!(r0.local.recv, vec![4..4, 4..6]);
        // Rank 1 reads nodes 3 and 0 of rank 0: slots 0 and 3, in rank 1's
        // ghost order (increasing user id).
        assert_eq!(plans[1].send[0], vec![0, 3]);
        assert_eq!(r0.send[1], vec![0, 3]);
        assert_eq!(plans[1].local.slots, vec![4, 5, 6, 7, 0, 3]);
        assert_eq!(r0.ghost_rows(), 2);
        assert_eq!(edge_cut(&g, &p, &p), 4);
        // Row 0 of rank 0 reads 7, 0, 1: slots 5, 0, 1.
        let g = r0.local.graph.as_ref().expect("in memory");
        let row = g.row(0);
        assert_eq!(&g.cols()[row], &[5, 0, 1]);
    }

    #[test]
    fn depth_two_adds_ghost_rows() {
        let g = ring();
        let p = Partition::contiguous(8, 2).expect("partition");
        let plans = plan_all(&g, &p, &p, 2).expect("plans");
        let r0 = &plans[0].local;
        // Ghosts at 1 hop: 4, 7; at 2 hops: 5, 6. Ghost rows: 4 and 7.
        assert_eq!(r0.slots, vec![0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(r0.rows[r0.owned_rows..], [4, 7]);
        assert_eq!(r0.row_slot.as_deref().map(|s| s[r0.owned_rows..].to_vec()), Some(vec![4, 7]));
        assert!(matches!(LocalShard::build(&g, &p, &Partition::contiguous(8, 2).expect("p"), 0, 0), Err(PlanError::Depth(0))));
    }

    #[test]
    fn requests_for_unowned_nodes_are_refused() {
        let g = ring();
        let p = Partition::contiguous(8, 2).expect("partition");
        let l = LocalShard::build(&g, &p, &p, 0, 1).expect("local");
        let err = ShardPlan::finish(l, vec![vec![], vec![5]]).expect_err("not owned");
        assert!(matches!(err, PlanError::BadRequest { peer: 1, node: 5, rank: 0 }), "{err}");
    }
}
