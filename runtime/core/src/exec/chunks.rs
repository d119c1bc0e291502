//! Balanced row chunks: destination rows split across rayon workers.
//!
//! Rows are independent (each destination folds only its own in-edges), so a
//! kernel parallelizes by handing each worker a contiguous range of rows; no
//! two workers write the same output row and no atomics are needed. Ranges
//! are contiguous so that a worker streams CSR and the output linearly.
//!
//! Splitting by row count would starve workers on power-law graphs, where a
//! few rows hold most edges; splitting by edge count alone would lump
//! thousands of empty rows (which still cost a `node` call and a store)
//! into one range. The cost of a row is therefore `degree + 1`. A row is
//! never split, so a single huge row stays one chunk; splitting it would need
//! a partial-aggregate combine, which belongs to the kernel, not here.

use std::ops::Range;

use rayon::prelude::*;

/// Chunks per worker thread: more than one, so that a worker finishing early
/// can steal, and few enough that per-chunk overhead stays negligible.
const CHUNKS_PER_THREAD: usize = 4;

/// Splits the rows of CSR `offsets` into at most `parts` contiguous, non-empty,
/// in-order ranges of about equal cost (`degree + 1` per row). Returns no
/// ranges for a graph without rows, and at most one range per row.
///
/// The boundary between chunk `k-1` and `k` is the row border whose prefix
/// cost is nearest to `k * total / parts`; each chunk's cost is therefore
/// within one row's cost of the ideal share.
pub fn balanced_row_chunks(offsets: &[u64], parts: usize) -> Vec<Range<usize>> {
    let rows = offsets.len().saturating_sub(1);
    if rows == 0 {
        return Vec::new();
    }
    let parts = parts.clamp(1, rows);
    let base = offsets[0];
    // Prefix cost of rows 0..r: the edges before row r plus r.
    let prefix = |r: usize| -> u128 { u128::from(offsets[r].saturating_sub(base)) + r as u128 };
    let total = prefix(rows);
    let mut chunks = Vec::with_capacity(parts);
    let mut start = 0usize;
    for k in 1..parts {
        let target = total * k as u128 / parts as u128;
        // First border at or past the target, then the nearer of it and the
        // one before.
        let (mut lo, mut hi) = (start, rows);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if prefix(mid) < target {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let mut border = lo;
        if border > start + 1 && prefix(border) - target > target - prefix(border - 1) {
            border -= 1;
        }
        if border > start && border < rows {
            chunks.push(start..border);
            start = border;
        }
    }
    chunks.push(start..rows);
    chunks
}

/// The balanced row ranges for the current rayon pool (about four chunks
/// per thread).
pub fn row_chunks(offsets: &[u64]) -> Vec<Range<usize>> {
    balanced_row_chunks(offsets, rayon::current_num_threads().saturating_mul(CHUNKS_PER_THREAD))
}

/// Runs `f` on balanced row ranges in parallel on the current rayon pool
/// ([`row_chunks`]). Every row is in exactly one call; an empty graph makes
/// no call.
pub fn for_each_row_chunk<F: Fn(Range<usize>) + Sync>(offsets: &[u64], f: F) {
    row_chunks(offsets).into_par_iter().for_each(&f);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn cost(offsets: &[u64], r: &Range<usize>) -> u64 {
        offsets[r.end] - offsets[r.start] + r.len() as u64
    }

    fn assert_cover(chunks: &[Range<usize>], rows: usize) {
        let mut next = 0;
        for c in chunks {
            assert_eq!(c.start, next, "chunks {chunks:?}");
            assert!(c.end > c.start, "empty chunk in {chunks:?}");
            next = c.end;
        }
        assert_eq!(next, rows);
    }

    #[test]
    fn uniform_rows_split_evenly() {
        // 100 rows of degree 3: cost 4 each, 400 in all, 100 per part.
        let offsets: Vec<u64> = (0..=100).map(|i| 3 * i).collect();
        let chunks = balanced_row_chunks(&offsets, 4);
        assert_eq!(chunks, vec![0..25, 25..50, 50..75, 75..100]);
    }

    #[test]
    fn small_and_empty_graphs() {
        assert!(balanced_row_chunks(&[], 8).is_empty());
        assert!(balanced_row_chunks(&[0], 8).is_empty());
        // Three rows, many parts: one chunk per row at most.
        assert_eq!(balanced_row_chunks(&[0, 0, 0, 0], 16), vec![0..1, 1..2, 2..3]);
        assert_eq!(balanced_row_chunks(&[0, 5, 5], 0), vec![0..2]);
        // Offsets that do not start at 0 (a sub-range of a larger CSR).
        assert_eq!(balanced_row_chunks(&[10, 11, 12, 13, 14], 2), vec![0..2, 2..4]);
    }

    #[test]
    fn skewed_rows_balance_by_edges() {
        // Row 0 holds 3000 edges, rows 1..=3000 hold one each.
        // Costs: 3001, then 3000 rows of 2 = 6000; total 9001.
        let mut offsets = vec![0u64, 3000];
        for i in 1..=3000 {
            offsets.push(3000 + i);
        }
        let rows = offsets.len() - 1;
        let chunks = balanced_row_chunks(&offsets, 3);
        assert_cover(&chunks, rows);
        // The huge row is a chunk on its own (3001, the ideal 3000.33 share);
        // the other two split the 3000 light rows evenly.
        assert_eq!(chunks, vec![0..1, 1..1501, 1501..3001]);
        let costs: Vec<u64> = chunks.iter().map(|c| cost(&offsets, c)).collect();
        assert_eq!(costs, vec![3001, 3000, 3000]);

        // With many parts, no chunk exceeds the ideal share by more than the
        // largest row's cost.
        let parts = 64;
        let chunks = balanced_row_chunks(&offsets, parts);
        assert_cover(&chunks, rows);
        let total = 9001u64;
        for c in &chunks {
            assert!(cost(&offsets, c) <= total / parts as u64 + 3001, "{c:?}");
        }
        // The huge row takes the first 21 shares; after the remainder chunk,
        // the light rows split into chunks of about total/64 = 140 cost (70 rows).
        assert_eq!(chunks[1], 1..48);
        assert!(chunks.iter().skip(2).all(|c| (60..=80).contains(&c.len())), "{chunks:?}");
    }

    #[test]
    fn for_each_visits_every_row_once() {
        let offsets: Vec<u64> = (0..=1000u64).map(|i| i * (i % 7)).collect();
        let seen = Mutex::new(vec![0u32; 1000]);
        for_each_row_chunk(&offsets, |rows| {
            let mut s = seen.lock().expect("no poisoning");
            for r in rows {
                s[r] += 1;
            }
        });
        assert_eq!(seen.into_inner().expect("no poisoning"), vec![1; 1000]);
        let calls = Mutex::new(0);
        for_each_row_chunk(&[0], |_| *calls.lock().expect("no poisoning") += 1);
        assert_eq!(calls.into_inner().expect("no poisoning"), 0);
    }

    proptest::proptest! {
        #[test]
        fn chunks_cover_rows(degrees in proptest::collection::vec(0u64..50, 0..200), parts in 0usize..40) {
            let mut offsets = vec![0u64];
            for d in &degrees {
                offsets.push(offsets[offsets.len() - 1] + d);
            }
            let chunks = balanced_row_chunks(&offsets, parts);
            if degrees.is_empty() {
                proptest::prop_assert!(chunks.is_empty());
            } else {
                assert_cover(&chunks, degrees.len());
                proptest::prop_assert!(chunks.len() <= parts.max(1));
                let total: u64 = degrees.iter().map(|d| d + 1).sum();
                let max_row = degrees.iter().max().map_or(0, |d| d + 1);
                let share = total / parts.clamp(1, degrees.len()) as u64;
                for c in &chunks {
                    proptest::prop_assert!(cost(&offsets, c) <= share + 2 * max_row + 1);
                }
            }
        }
    }
}
