//! Partitions: which rank owns which rows.
//!
//! A [`Partition`] assigns every node (in the user's numbering) to one of
//! `parts` ranks and renumbers the nodes so that each rank's are
//! contiguous: rank `p`'s nodes are new ids `starts[p]..starts[p+1]`, in
//! increasing user id. The renumbering never reaches the user: a sharded
//! call takes and gives arrays in the user's numbering, or per rank in
//! [`Partition::owned`] order.
//!
//! Three ways to make one: contiguous blocks of equal row counts
//! ([`owned_range`]), contiguous blocks of about equal edge counts
//! ([`Partition::balanced`]), and METIS's k-way partition of the
//! symmetrized graph (cargo feature `metis`).

#[cfg(feature = "metis")]
mod metis;
#[cfg(feature = "metis")]
pub use metis::{metis_parts, MetisError};

use std::ops::Range;

/// Why a partition could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    #[error("a partition needs at least one part")]
    NoParts,
    #[error("node {node} is assigned to part {part}, but there are {parts} parts")]
    PartOutOfRange { node: usize, part: u32, parts: usize },
    #[error("{nodes} nodes do not fit 32-bit node ids")]
    TooManyNodes { nodes: usize },
    #[error("METIS partitions a square graph (sources and destinations the same nodes); this one has {num_src} sources and {num_dst} destinations")]
    NotSquare { num_src: usize, num_dst: usize },
    #[error("METIS was not built into this binary: rebuild with `--features metis`")]
    MetisAbsent,
    #[cfg(feature = "metis")]
    #[error(transparent)]
    Metis(#[from] MetisError),
}

/// How a partition was made (for `explain` and the benchmark).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Contiguous,
    Balanced,
    Metis,
    Given,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Contiguous => "contiguous",
            Method::Balanced => "contiguous, balanced by edges",
            Method::Metis => "metis",
            Method::Given => "given",
        }
    }
}

/// Rank `rank`'s rows when `n` rows are cut into `world` contiguous blocks
/// of equal size (the first `n % world` ranks hold one more).
pub fn owned_range(n: usize, world: usize, rank: usize) -> Range<usize> {
    if world == 0 || rank >= world {
        return n..n;
    }
    let (q, r) = (n / world, n % world);
    let start = rank * q + rank.min(r);
    start..start + q + usize::from(rank < r)
}

/// Every node's part, and the renumbering that makes each part contiguous
/// (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct Partition {
    method: Method,
    parts: usize,
    part_of: Vec<u32>,
    /// New id → user id: part 0's nodes, then part 1's, each increasing.
    order: Vec<u32>,
    starts: Vec<usize>,
}

impl Partition {
    /// `n` nodes in `parts` contiguous blocks ([`owned_range`]).
    pub fn contiguous(n: usize, parts: usize) -> Result<Partition, PartitionError> {
        if parts == 0 {
            return Err(PartitionError::NoParts);
        }
        let mut part_of = Vec::with_capacity(n);
        for p in 0..parts {
            part_of.extend(std::iter::repeat_n(p as u32, owned_range(n, parts, p).len()));
        }
        Self::build(Method::Contiguous, part_of, parts)
    }

    /// The rows of a CSR (`offsets`, one more than rows) in `parts`
    /// contiguous blocks of about equal work, a row counting its edges plus
    /// one (so empty rows still spread).
    pub fn balanced(offsets: &[u64], parts: usize) -> Result<Partition, PartitionError> {
        if parts == 0 {
            return Err(PartitionError::NoParts);
        }
        let n = offsets.len().saturating_sub(1);
        let work = |i: usize| offsets[i] - offsets[0] + i as u64;
        let total = work(n);
        let mut part_of = Vec::with_capacity(n);
        for i in 0..n {
            // The part whose share of the work this row's midpoint falls in.
            let mid = (work(i) + work(i + 1)) as u128;
            let p = if total == 0 { 0 } else { (mid * parts as u128 / (2 * total as u128)).min(parts as u128 - 1) as u32 };
            part_of.push(p);
        }
        Self::build(Method::Balanced, part_of, parts)
    }

    /// METIS's k-way partition of the graph whose directed CSR is
    /// (`offsets`, `cols`) over `n` nodes, symmetrized.
    pub fn metis(n: usize, offsets: &[u64], cols: &[u32], parts: usize) -> Result<Partition, PartitionError> {
        #[cfg(feature = "metis")]
        {
            let part_of = metis_parts(n, offsets, cols, parts)?;
            Self::build(Method::Metis, part_of, parts)
        }
        #[cfg(not(feature = "metis"))]
        {
            let _ = (n, offsets, cols, parts);
            Err(PartitionError::MetisAbsent)
        }
    }

    /// A partition from each node's part (checked).
    pub fn from_parts(part_of: Vec<u32>, parts: usize) -> Result<Partition, PartitionError> {
        Self::build(Method::Given, part_of, parts)
    }

    fn build(method: Method, part_of: Vec<u32>, parts: usize) -> Result<Partition, PartitionError> {
        if parts == 0 {
            return Err(PartitionError::NoParts);
        }
        if u32::try_from(part_of.len()).is_err() {
            return Err(PartitionError::TooManyNodes { nodes: part_of.len() });
        }
        let mut starts = vec![0usize; parts + 1];
        for (node, &p) in part_of.iter().enumerate() {
            if p as usize >= parts {
                return Err(PartitionError::PartOutOfRange { node, part: p, parts });
            }
            starts[p as usize + 1] += 1;
        }
        for p in 0..parts {
            starts[p + 1] += starts[p];
        }
        let mut next = starts.clone();
        let mut order = vec![0u32; part_of.len()];
        for (node, &p) in part_of.iter().enumerate() {
            order[next[p as usize]] = node as u32;
            next[p as usize] += 1;
        }
        Ok(Partition { method, parts, part_of, order, starts })
    }

    /// The same partition, said to have been made by `method` (one made
    /// elsewhere and sent here, as a `.gfg`'s METIS parts are).
    pub fn with_method(mut self, method: Method) -> Partition {
        self.method = method;
        self
    }

    pub fn method(&self) -> Method {
        self.method
    }
    pub fn parts(&self) -> usize {
        self.parts
    }
    pub fn num_nodes(&self) -> usize {
        self.part_of.len()
    }
    /// The part that owns user node `node`.
    pub fn part_of(&self, node: usize) -> usize {
        self.part_of[node] as usize
    }
    /// Every node's part, by user id.
    pub fn parts_by_node(&self) -> &[u32] {
        &self.part_of
    }
    /// Part `p`'s nodes, as user ids, increasing.
    pub fn owned(&self, p: usize) -> &[u32] {
        &self.order[self.starts[p]..self.starts[p + 1]]
    }
    /// The new ids of part `p`'s nodes.
    pub fn new_ids(&self, p: usize) -> Range<usize> {
        self.starts[p]..self.starts[p + 1]
    }
    /// Whether the renumbering is the identity (contiguous partitions).
    pub fn is_identity(&self) -> bool {
        self.order.iter().enumerate().all(|(i, &u)| i == u as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_ranges_cover_the_rows_once() {
        for n in [0usize, 1, 7, 8, 100] {
            for world in 1..6 {
                let ranges: Vec<_> = (0..world).map(|r| owned_range(n, world, r)).collect();
                assert_eq!(ranges[0].start, 0);
                assert_eq!(ranges[world - 1].end, n);
                for w in ranges.windows(2) {
                    assert_eq!(w[0].end, w[1].start);
                }
                let sizes: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
                assert!(sizes.iter().max().unwrap_or(&0) - sizes.iter().min().unwrap_or(&0) <= 1, "{sizes:?}");
            }
        }
        assert_eq!(owned_range(8, 2, 1), 4..8);
    }

    #[test]
    fn balanced_blocks_follow_the_edges() {
        // Row 0 holds 90 of 100 edges: it is a part on its own.
        let mut offsets = vec![0u64, 90];
        offsets.extend((1..=10).map(|i| 90 + i));
        let p = Partition::balanced(&offsets, 2).expect("partition");
        assert_eq!(p.owned(0), &[0]);
        assert_eq!(p.owned(1), &(1..11).collect::<Vec<u32>>()[..]);
        assert!(p.is_identity());
    }

    #[test]
    fn given_parts_renumber_each_part_contiguously() {
        let p = Partition::from_parts(vec![1, 0, 1, 0, 2], 4).expect("partition");
        assert_eq!(p.owned(0), &[1, 3]);
        assert_eq!(p.owned(1), &[0, 2]);
        assert_eq!(p.owned(2), &[4]);
        assert!(p.owned(3).is_empty());
        assert_eq!(p.new_ids(1), 2..4);
        assert!(!p.is_identity());
        assert!(matches!(Partition::from_parts(vec![0, 3], 2), Err(PartitionError::PartOutOfRange { node: 1, part: 3, .. })));
        assert!(matches!(Partition::contiguous(3, 0), Err(PartitionError::NoParts)));
    }
}
