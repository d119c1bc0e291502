//! Node groups: the ranks of a world split by node, and across nodes.
//!
//! Two-level schemes (hierarchy partitioned tensors, the node-local cache)
//! talk inside a node through shared memory and across nodes by messages.
//! [`NodeGroups`] gives both communicators: `local`, the ranks of this
//! rank's node ([`Communicator::split_local`]: `MPI_COMM_TYPE_SHARED`, or
//! the simulated nodes below), and `cross`, one rank per node — the ranks
//! whose local rank equals this one's, ranked by node — so that a message
//! for another node goes to the rank there with the same local rank, and
//! each pair of nodes talks through as many channels as a node has ranks.
//!
//! Nodes are numbered by their lowest world rank, and the local ranks of a
//! node follow world order, so every rank computes the same numbering. A
//! rank of `cross` is a node's number only when every node has the same
//! number of ranks ([`NodeGroups::uniform`]); two-level schemes check that.
//!
//! One host can hold several simulated nodes, so that the cross-node paths
//! run in tests: in process, `InProcess::world_on_hosts` (or
//! `InProcess::run_on_hosts`) gives each rank a host number; on MPI,
//! `TIGA_RANKS_PER_NODE=k` in the environment of `mpirun` makes
//! `Mpi::init` group consecutive world ranks of each host k at a time.

use std::sync::Arc;

use super::communicator::{read_u64s, write_u64s, CommError, Communicator};

/// A world split by node and across nodes (see the module doc).
#[derive(Debug, Clone)]
pub struct NodeGroups {
    /// The ranks of this rank's node, in world order.
    pub local: Arc<dyn Communicator>,
    /// The ranks with this rank's local rank, one per node, by node
    /// (missing nodes where a node has fewer ranks).
    pub cross: Arc<dyn Communicator>,
    /// Each world rank's (node, local rank).
    placement: Vec<(usize, usize)>,
    /// Each node's world ranks, by local rank.
    members: Vec<Vec<usize>>,
    rank: usize,
}

impl NodeGroups {
    /// Split `world` (collective over it).
    pub fn new(world: &dyn Communicator) -> Result<NodeGroups, CommError> {
        let local = world.split_local()?;
        // The node's world ranks, by local rank: its leader is the first.
        let peers = local.all_gather_bytes(&(world.rank() as u64).to_le_bytes())?;
        let leader = match peers.first().and_then(|b| read_u64s(b)).as_deref() {
            Some(&[w]) => w,
            _ => return Err(CommError::Mismatch("a node-local group without a readable first rank".into())),
        };
        let all = world.all_gather_bytes(&write_u64s(&[leader, local.rank() as u64]))?;
        let mut seen: Vec<(u64, u64)> = Vec::with_capacity(all.len());
        for (p, b) in all.iter().enumerate() {
            match read_u64s(b).as_deref() {
                Some(&[l, r]) => seen.push((l, r)),
                _ => return Err(CommError::WrongSize { peer: p, during: "node grouping".into(), expected: 16, got: b.len() }),
            }
        }
        let mut leaders: Vec<u64> = seen.iter().map(|s| s.0).collect();
        leaders.sort_unstable();
        leaders.dedup();
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); leaders.len()];
        let mut placement = Vec::with_capacity(seen.len());
        for (w, &(l, r)) in seen.iter().enumerate() {
            let node = leaders.binary_search(&l).map_err(|_| CommError::Mismatch("a node leader vanished".into()))?;
            placement.push((node, r as usize));
            members[node].push(w);
        }
        for (node, m) in members.iter().enumerate() {
            let ranks: Vec<usize> = m.iter().map(|&w| placement[w].1).collect();
            if ranks.iter().enumerate().any(|(i, &r)| i != r) {
                return Err(CommError::Mismatch(format!("node {node}'s ranks {m:?} report local ranks {ranks:?}")));
            }
        }
        let (node, local_rank) = placement[world.rank()];
        let cross = world.split(local_rank, node)?;
        Ok(NodeGroups { local, cross, placement, members, rank: world.rank() })
    }

    /// How many nodes.
    pub fn nodes(&self) -> usize {
        self.members.len()
    }

    /// This rank's node.
    pub fn node(&self) -> usize {
        self.placement[self.rank].0
    }

    /// World rank `w`'s (node, local rank).
    pub fn placement(&self, w: usize) -> Option<(usize, usize)> {
        self.placement.get(w).copied()
    }

    /// Node `n`'s world ranks, by local rank.
    pub fn members(&self, n: usize) -> &[usize] {
        self.members.get(n).map_or(&[], Vec::as_slice)
    }

    /// Whether every node has the same number of ranks (then `cross`'s
    /// rank `n` is on node `n`, for every rank).
    pub fn uniform(&self) -> bool {
        self.members.iter().all(|m| m.len() == self.members[0].len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::InProcess;

    #[test]
    fn two_nodes_of_two_give_a_cross_group_per_local_rank() {
        // World ranks 0 and 2 on host 5, 1 and 3 on host 9: nodes are
        // numbered by their lowest world rank (host 5 is node 0).
        let res = InProcess::run_on_hosts(&[5, 9, 5, 9], |c| {
            let g = NodeGroups::new(&c).expect("groups");
            let mut x = [c.rank() as f64];
            g.cross.all_reduce_f64(&mut x).expect("reduce");
            (g.node(), g.local.rank(), g.cross.rank(), g.cross.size(), x[0], g.uniform(), g.members(1).to_vec())
        });
        let res: Vec<_> = res.into_iter().map(|r| r.expect("thread")).collect();
        assert_eq!(
            res,
            vec![
                (0, 0, 0, 2, 1.0, true, vec![1, 3]),
                (1, 0, 1, 2, 1.0, true, vec![1, 3]),
                (0, 1, 0, 2, 5.0, true, vec![1, 3]),
                (1, 1, 1, 2, 5.0, true, vec![1, 3]),
            ]
        );
    }

    #[test]
    fn uneven_nodes_are_not_uniform() {
        let res = InProcess::run_on_hosts(&[0, 0, 0, 1], |c| {
            let g = NodeGroups::new(&c).expect("groups");
            (g.nodes(), g.local.size(), g.cross.size(), g.uniform(), g.placement(3))
        });
        let res: Vec<_> = res.into_iter().map(|r| r.expect("thread")).collect();
        assert_eq!(res[0], (2, 3, 2, false, Some((1, 0))));
        assert_eq!(res[2], (2, 3, 1, false, Some((1, 0))));
        assert_eq!(res[3], (2, 1, 2, false, Some((1, 0))));
    }
}
