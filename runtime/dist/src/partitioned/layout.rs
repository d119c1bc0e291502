//! Which rank owns which rows of a partitioned tensor.
//!
//! The first dimension is cut into contiguous blocks in rank order: rank
//! `r` owns rows `offsets[r]..offsets[r + 1]`. Blocks are whole records of
//! `granularity` rows (a node's several feature rows, say), so that a
//! record never straddles two ranks. Every rank holds the whole table of
//! offsets, so any rank answers "who owns row i" (a binary search) and
//! "where does rank r start" without asking.

use std::ops::Range;
use std::path::{Path, PathBuf};

use super::error::PartitionedError;
use crate::partition::owned_range;

/// How the rows are split over the ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowSplit {
    /// Records spread evenly: the first `records % ranks` ranks hold one
    /// more (as [`owned_range`] cuts rows).
    Even,
    /// Rank `r` holds `rows[r]` rows (each a multiple of the granularity,
    /// summing to the tensor's rows): uneven splits, and ranks with none.
    Rows(Vec<usize>),
}

/// Contiguous blocks of a range `0..total`, one per part, by their starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocks {
    /// `starts[p]..starts[p + 1]` is part `p`'s block; `parts + 1` entries.
    starts: Vec<usize>,
}

impl Blocks {
    /// Blocks of the given lengths, in order.
    pub fn from_lengths(lengths: &[usize]) -> Option<Blocks> {
        let mut starts = Vec::with_capacity(lengths.len() + 1);
        let mut at = 0usize;
        starts.push(0);
        for &l in lengths {
            at = at.checked_add(l)?;
            starts.push(at);
        }
        Some(Blocks { starts })
    }

    /// `total` cut into `parts` blocks as [`owned_range`] cuts it.
    pub fn even(total: usize, parts: usize) -> Blocks {
        let lengths: Vec<usize> = (0..parts).map(|p| owned_range(total, parts, p).len()).collect();
        // Cannot overflow: the lengths sum to `total`.
        Blocks::from_lengths(&lengths).unwrap_or(Blocks { starts: vec![0] })
    }

    pub fn parts(&self) -> usize {
        self.starts.len() - 1
    }

    pub fn total(&self) -> usize {
        self.starts[self.starts.len() - 1]
    }

    /// Part `p`'s block.
    pub fn block(&self, p: usize) -> Range<usize> {
        self.starts[p]..self.starts[p + 1]
    }

    /// The part whose block holds `i` (`i < total`); the last of several
    /// candidates when blocks are empty, which is the one holding `i`.
    pub fn part_of(&self, i: usize) -> usize {
        self.starts.partition_point(|&s| s <= i) - 1
    }
}

/// The rows every rank owns (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowLayout {
    blocks: Blocks,
    granularity: usize,
}

impl RowLayout {
    /// `rows` rows over `ranks` ranks in records of `granularity` rows.
    pub fn new(rows: usize, ranks: usize, granularity: usize, split: &RowSplit) -> Result<RowLayout, PartitionedError> {
        let bad = |reason: String| PartitionedError::BadPartition { reason };
        if granularity == 0 {
            return Err(bad("the granularity (rows per record) must be at least 1".into()));
        }
        if !rows.is_multiple_of(granularity) {
            return Err(bad(format!("{rows} rows are not whole records of {granularity} rows")));
        }
        let blocks = match split {
            RowSplit::Even => {
                let records = Blocks::even(rows / granularity, ranks);
                let lengths: Vec<usize> = (0..ranks).map(|p| records.block(p).len() * granularity).collect();
                Blocks::from_lengths(&lengths).ok_or_else(|| bad("the row counts overflow".into()))?
            }
            RowSplit::Rows(per_rank) => {
                if per_rank.len() != ranks {
                    return Err(bad(format!("{} row counts given for {ranks} ranks", per_rank.len())));
                }
                if let Some((r, n)) = per_rank.iter().enumerate().find(|(_, &n)| !n.is_multiple_of(granularity)) {
                    return Err(bad(format!("rank {r}'s {n} rows are not whole records of {granularity} rows")));
                }
                let b = Blocks::from_lengths(per_rank).ok_or_else(|| bad("the row counts overflow".into()))?;
                if b.total() != rows {
                    return Err(bad(format!("the ranks' row counts {per_rank:?} sum to {}, not {rows}", b.total())));
                }
                b
            }
        };
        Ok(RowLayout { blocks, granularity })
    }

    pub fn rows(&self) -> usize {
        self.blocks.total()
    }

    pub fn ranks(&self) -> usize {
        self.blocks.parts()
    }

    pub fn granularity(&self) -> usize {
        self.granularity
    }

    /// Rank `r`'s rows.
    pub fn rows_of(&self, r: usize) -> Range<usize> {
        self.blocks.block(r)
    }

    /// The rank that owns row `i` (`i < rows()`).
    pub fn owner(&self, i: usize) -> usize {
        self.blocks.part_of(i)
    }
}

/// The file of rank `r` of `ranks` in a per-rank set named `prefix`:
/// where each rank's rows go on disk.
pub fn part_path(prefix: &Path, r: usize, ranks: usize) -> PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(format!("_part_{r}_of_{ranks}.npy"));
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_split_keeps_records_whole() {
        let l = RowLayout::new(30, 4, 3, &RowSplit::Even).expect("layout");
        // 10 records over 4 ranks: 3, 3, 2, 2.
        let rows: Vec<_> = (0..4).map(|r| l.rows_of(r)).collect();
        assert_eq!(rows, vec![0..9, 9..18, 18..24, 24..30]);
        for i in 0..30 {
            assert!(l.rows_of(l.owner(i)).contains(&i));
        }
    }

    #[test]
    fn given_rows_allow_empty_ranks() {
        let l = RowLayout::new(5, 3, 1, &RowSplit::Rows(vec![0, 5, 0])).expect("layout");
        assert_eq!((0..5).map(|i| l.owner(i)).collect::<Vec<_>>(), vec![1; 5]);
        assert_eq!(l.rows_of(2), 5..5);
    }

    #[test]
    fn bad_splits_are_errors() {
        for (rows, g, split) in [
            (10, 3, RowSplit::Even),
            (10, 0, RowSplit::Even),
            (10, 1, RowSplit::Rows(vec![5, 4, 0])),
            (10, 2, RowSplit::Rows(vec![5, 5, 0])),
            (10, 1, RowSplit::Rows(vec![10])),
        ] {
            assert!(RowLayout::new(rows, 3, g, &split).is_err(), "{rows} {g} {split:?}");
        }
    }

    #[test]
    fn more_ranks_than_records_leaves_some_empty() {
        let l = RowLayout::new(2, 4, 1, &RowSplit::Even).expect("layout");
        assert_eq!((0..4).map(|r| l.rows_of(r).len()).collect::<Vec<_>>(), vec![1, 1, 0, 0]);
        assert_eq!(l.owner(1), 1);
    }
}
