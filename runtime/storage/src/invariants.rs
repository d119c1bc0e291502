//! The invariants of a `.gfg` file's contents, and the streaming checks
//! that test them in bounded memory.
//!
//! A file's checksums say its bytes are the ones written; they do not say
//! the writer wrote a graph. Every invariant here is one a reader relies on
//! (a kernel reads pages without bounds checks, scatters edge outputs by
//! edge id, and runs a backward over the stored transpose), so each is
//! checked before anything reads the data it protects: `docs/gfg.md`
//! ("What a reader checks") says who checks which one when. The checks
//! here are pure: they take slices (a chunk of a section at a time, so the
//! reader can verify, hash and release the file block by block) and return
//! a [`Violation`] naming the section and the first position that breaks
//! the invariant.

use std::fmt;
use std::hash::BuildHasher;

use thiserror::Error;

/// Above this many edges, the edge-id permutation check keeps a keyed sum
/// and xor of hashes instead of a bitmap of `num_edges` bits (64 MiB at
/// this size): the check stays within that memory however large the file.
/// The hash check cannot name the duplicated id, and misses a
/// non-permutation with probability about 2^-64 per check (the hash key
/// is drawn at random for every check, so no file can be made to collide
/// on purpose).
pub const PERMUTATION_BITMAP_MAX_EDGES: u64 = 1 << 29;

/// Above this many sources, the transpose check does not count each
/// source's out-edges (8 bytes per source: 64 MiB at this size) and relies
/// on the hash of the `(source, destination, edge id)` triples alone, which
/// covers the counts too (a source's edges are among its triples) but
/// cannot name the first source whose row differs.
pub const TRANSPOSE_COUNTS_MAX_SOURCES: u64 = 1 << 23;

/// One invariant of a `.gfg` file's contents. `T*` are the stored
/// transpose's (rows by source).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Invariant {
    OffsetsStart,
    OffsetsEnd,
    OffsetsMonotone,
    ColsInRange,
    EdgeIdsPermutation,
    TOffsetsStart,
    TOffsetsEnd,
    TOffsetsMonotone,
    TColsInRange,
    TEdgeIdsPermutation,
    /// The stored transpose holds exactly the reversed edges of the graph,
    /// with the same edge ids.
    TransposeMatches,
}

impl Invariant {
    /// Every invariant, in the order `tigac info` reports them.
    pub const ALL: [Invariant; 11] = [
        Invariant::OffsetsStart,
        Invariant::OffsetsEnd,
        Invariant::OffsetsMonotone,
        Invariant::ColsInRange,
        Invariant::EdgeIdsPermutation,
        Invariant::TOffsetsStart,
        Invariant::TOffsetsEnd,
        Invariant::TOffsetsMonotone,
        Invariant::TColsInRange,
        Invariant::TEdgeIdsPermutation,
        Invariant::TransposeMatches,
    ];

    /// The invariant as `docs/gfg.md` states it.
    pub fn statement(self) -> &'static str {
        match self {
            Invariant::OffsetsStart => "offsets[0] = 0",
            Invariant::OffsetsEnd => "offsets[num_dst] = num_edges",
            Invariant::OffsetsMonotone => "offsets are non-decreasing",
            Invariant::ColsInRange => "cols[p] < num_src",
            Invariant::EdgeIdsPermutation => "edge_ids is a permutation of 0..num_edges",
            Invariant::TOffsetsStart => "t_offsets[0] = 0",
            Invariant::TOffsetsEnd => "t_offsets[num_src] = num_edges",
            Invariant::TOffsetsMonotone => "t_offsets are non-decreasing",
            Invariant::TColsInRange => "t_cols[q] < num_dst",
            Invariant::TEdgeIdsPermutation => "t_edge_ids is a permutation of 0..num_edges",
            Invariant::TransposeMatches => "the transpose holds the reversed edges with the same edge ids",
        }
    }

    /// The section whose contents the invariant is about.
    pub fn section(self) -> &'static str {
        match self {
            Invariant::OffsetsStart | Invariant::OffsetsEnd | Invariant::OffsetsMonotone => "offsets",
            Invariant::ColsInRange => "cols",
            Invariant::EdgeIdsPermutation => "edge_ids",
            Invariant::TOffsetsStart | Invariant::TOffsetsEnd | Invariant::TOffsetsMonotone => "t_offsets",
            Invariant::TColsInRange | Invariant::TransposeMatches => "t_cols",
            Invariant::TEdgeIdsPermutation => "t_edge_ids",
        }
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.statement())
    }
}

/// Contents that break an invariant: the section, the first position (an
/// element index of the section, where one can be named) and what is there.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("section `{section}` is corrupt: {detail} (breaks `{invariant}`)")]
pub struct Violation {
    pub invariant: Invariant,
    pub section: &'static str,
    /// The element index of the section where the violation was found.
    pub position: Option<u64>,
    pub detail: String,
}

impl Violation {
    pub fn new(invariant: Invariant, position: Option<u64>, detail: String) -> Violation {
        Violation { invariant, section: invariant.section(), position, detail }
    }
}

/// What a full check found for one invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    Ok,
    Violated(Violation),
    /// The invariant is about a section the file does not have (why).
    NotApplicable(&'static str),
    /// The invariant could not be checked (why: a checksum failed under it,
    /// or an invariant it needs is broken).
    NotChecked(String),
}

/// Every invariant of a file and what [`GfgFile::check`](crate::reader::GfgFile::check)
/// found for it, in [`Invariant::ALL`]'s order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    pub results: Vec<(Invariant, Checked)>,
}

impl CheckReport {
    /// Whether every invariant holds or does not apply.
    pub fn is_ok(&self) -> bool {
        self.results.iter().all(|(_, c)| matches!(c, Checked::Ok | Checked::NotApplicable(_)))
    }

    pub fn get(&self, invariant: Invariant) -> Option<&Checked> {
        self.results.iter().find(|(i, _)| *i == invariant).map(|(_, c)| c)
    }

    /// The first violation, in report order.
    pub fn first_violation(&self) -> Option<&Violation> {
        self.results.iter().find_map(|(_, c)| match c {
            Checked::Violated(v) => Some(v),
            _ => None,
        })
    }
}

impl fmt::Display for CheckReport {
    /// One line per invariant: `ok`, `n/a (why)`, `VIOLATED: ...` or
    /// `NOT CHECKED: ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (inv, c) in &self.results {
            let what = inv.statement();
            match c {
                Checked::Ok => writeln!(f, "  {what:<62} ok")?,
                Checked::NotApplicable(why) => writeln!(f, "  {what:<62} n/a ({why})")?,
                Checked::Violated(v) => writeln!(f, "  {what:<62} VIOLATED: {}", v.detail)?,
                Checked::NotChecked(why) => writeln!(f, "  {what:<62} NOT CHECKED: {why}")?,
            }
        }
        Ok(())
    }
}

/// Checks that `chunk` (elements `base..` of an offsets section) does not
/// decrease, continuing from the previous chunk's last element.
#[derive(Debug, Clone)]
pub(crate) struct Monotone {
    invariant: Invariant,
    prev: Option<u64>,
}

impl Monotone {
    pub(crate) fn new(invariant: Invariant) -> Monotone {
        Monotone { invariant, prev: None }
    }

    pub(crate) fn feed(&mut self, chunk: &[u64], base: u64) -> Result<(), Violation> {
        let Some(&last) = chunk.last() else { return Ok(()) };
        let prev = self.prev.unwrap_or(chunk[0]);
        // A pass over pairs that vectorizes; the search only names the culprit.
        let ok = prev <= chunk[0] && chunk.windows(2).all(|w| w[0] <= w[1]);
        if !ok {
            let mut before = prev;
            for (k, &x) in chunk.iter().enumerate() {
                if x < before {
                    let i = base + k as u64;
                    let name = self.invariant.section();
                    return Err(Violation::new(
                        self.invariant,
                        Some(i),
                        format!("offsets decrease at row {i}: {name}[{}] = {before} > {name}[{i}] = {x}", i - 1),
                    ));
                }
                before = x;
            }
        }
        self.prev = Some(last);
        Ok(())
    }
}

/// The first element of `chunk` (elements `base..` of a column section)
/// that is not below `bound`.
pub(crate) fn cols_in_range(invariant: Invariant, chunk: &[u32], base: u64, bound: u64, what: &str) -> Result<(), Violation> {
    // A maximum first (it vectorizes); the search only names the culprit.
    if chunk.is_empty() || u64::from(chunk.iter().fold(0u32, |m, &s| m.max(s))) < bound {
        return Ok(());
    }
    let p = chunk.iter().position(|&s| u64::from(s) >= bound).unwrap_or(0);
    let section = invariant.section();
    Err(Violation::new(
        invariant,
        Some(base + p as u64),
        format!("{section}[{}] = {} is out of range for {bound} {what}", base + p as u64, chunk[p]),
    ))
}

/// The splitmix64 finalizer: a bijection of `u64` that mixes every input
/// bit into every output bit.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Keys drawn from the standard library's per-process random state (and a
/// counter), so that no file can be built to make two different multisets
/// hash alike.
fn random_keys() -> [u64; 3] {
    let s = std::collections::hash_map::RandomState::new();
    [s.hash_one(1u64), s.hash_one(2u64), s.hash_one(3u64)]
}

/// Whether a stream of edge ids is a permutation of `0..n`: every id below
/// `n`, none twice (with `n` ids in all, that is every id once). A bitmap
/// of `n` bits up to [`PERMUTATION_BITMAP_MAX_EDGES`] (exact, and names the
/// first repeated position), else a keyed sum and xor of hashes compared
/// with those of `0..n` (bounded memory; see the constant).
pub(crate) struct Permutation {
    invariant: Invariant,
    n: u64,
    seen: u64,
    mode: PermutationMode,
    /// The id found twice, once `feed` has reported it.
    repeated: Option<u64>,
}

enum PermutationMode {
    Bitmap(Vec<u64>),
    Hash { key: u64, sum: u64, xor: u64 },
}

impl Permutation {
    pub(crate) fn new(invariant: Invariant, n: u64, bitmap_max: u64) -> Permutation {
        let mode = match usize::try_from(n.div_ceil(64)) {
            Ok(words) if n <= bitmap_max => PermutationMode::Bitmap(vec![0; words]),
            _ => PermutationMode::Hash { key: random_keys()[0], sum: 0, xor: 0 },
        };
        Permutation { invariant, n, seen: 0, mode, repeated: None }
    }

    /// Feeds ids `base..base + chunk.len()` of the section.
    pub(crate) fn feed(&mut self, chunk: &[u64], base: u64) -> Result<(), Violation> {
        let (n, inv) = (self.n, self.invariant);
        let section = inv.section();
        if !chunk.is_empty() && chunk.iter().fold(0u64, |m, &x| m.max(x)) >= n {
            let p = chunk.iter().position(|&x| x >= n).unwrap_or(0);
            let at = base + p as u64;
            return Err(Violation::new(inv, Some(at), format!("{section}[{at}] = {} is out of range for {n} edges", chunk[p])));
        }
        self.seen += chunk.len() as u64;
        match &mut self.mode {
            PermutationMode::Bitmap(bits) => {
                for (k, &id) in chunk.iter().enumerate() {
                    // `id < n` was checked above, so the word exists.
                    let (w, bit) = ((id / 64) as usize, 1u64 << (id % 64));
                    let Some(word) = bits.get_mut(w) else { continue };
                    if *word & bit != 0 {
                        let at = base + k as u64;
                        self.repeated = Some(id);
                        return Err(Violation::new(inv, Some(at), format!("{section}[{at}] = {id} is a duplicate")));
                    }
                    *word |= bit;
                }
            }
            PermutationMode::Hash { key, sum, xor } => {
                for &id in chunk {
                    let h = mix(id ^ *key);
                    *sum = sum.wrapping_add(h);
                    *xor ^= h;
                }
            }
        }
        Ok(())
    }

    /// The id `feed` found twice (bitmap mode), for naming where it first
    /// appeared.
    pub(crate) fn repeated(&self) -> Option<u64> {
        self.repeated
    }

    /// After every id was fed: the hash check compares with `0..n` (every
    /// id below `n` and none twice in the bitmap already means a
    /// permutation).
    pub(crate) fn finish(self) -> Result<(), Violation> {
        let inv = self.invariant;
        if self.seen != self.n {
            return Err(Violation::new(inv, None, format!("{} ids were checked, not {}", self.seen, self.n)));
        }
        if let PermutationMode::Hash { key, sum, xor } = self.mode {
            let (mut want_sum, mut want_xor) = (0u64, 0u64);
            for id in 0..self.n {
                let h = mix(id ^ key);
                want_sum = want_sum.wrapping_add(h);
                want_xor ^= h;
            }
            if (sum, xor) != (want_sum, want_xor) {
                return Err(Violation::new(
                    inv,
                    None,
                    format!(
                        "{} is not a permutation of 0..{}: some id is repeated (found by its sum of hashes; with more than {PERMUTATION_BITMAP_MAX_EDGES} edges the check keeps no bitmap to name it)",
                        inv.section(),
                        self.n
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// A keyed sum and xor of hashes of `(source, destination, edge id)`
/// triples, and their count: equal for two multisets of triples that are
/// equal, and for different ones with probability about 2^-64.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TripleHash {
    key: [u64; 3],
    sum: u64,
    xor: u64,
    count: u64,
}

impl TripleHash {
    /// A new pair of accumulators shares one key.
    pub(crate) fn pair() -> (TripleHash, TripleHash) {
        let t = TripleHash { key: random_keys(), sum: 0, xor: 0, count: 0 };
        (t.clone(), t)
    }

    #[inline]
    pub(crate) fn add(&mut self, src: u32, dst: u32, id: u64) {
        let nodes = (u64::from(src) << 32) | u64::from(dst);
        let h = mix(mix(nodes ^ self.key[0]).wrapping_add(id ^ self.key[1]) ^ self.key[2]);
        self.sum = self.sum.wrapping_add(h);
        self.xor ^= h;
        self.count += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotone_continues_across_chunks_and_names_the_row() {
        let mut m = Monotone::new(Invariant::OffsetsMonotone);
        m.feed(&[0, 1, 1], 0).expect("ok");
        let v = m.feed(&[0, 3], 3).expect_err("decreases across the chunk boundary");
        assert_eq!(v.position, Some(3));
        assert!(v.detail.contains("offsets decrease at row 3: offsets[2] = 1 > offsets[3] = 0"), "{}", v.detail);
    }

    #[test]
    fn permutations_by_bitmap_and_by_hash() {
        for bitmap_max in [u64::MAX, 0] {
            let check = |chunks: &[&[u64]]| {
                let n = chunks.iter().map(|c| c.len() as u64).sum();
                let mut p = Permutation::new(Invariant::EdgeIdsPermutation, n, bitmap_max);
                let mut base = 0;
                for c in chunks {
                    p.feed(c, base)?;
                    base += c.len() as u64;
                }
                p.finish()
            };
            check(&[&[2, 0], &[3, 1]]).expect("a permutation");
            check(&[]).expect("empty");
            let v = check(&[&[2, 0], &[0, 1]]).expect_err("duplicate");
            assert_eq!(v.invariant, Invariant::EdgeIdsPermutation);
            if bitmap_max == 0 {
                assert_eq!(v.position, None, "the hash check cannot name it");
                assert!(v.detail.contains("some id is repeated"), "{}", v.detail);
            } else {
                assert_eq!(v.position, Some(2));
                assert!(v.detail.contains("edge_ids[2] = 0 is a duplicate"), "{}", v.detail);
            }
            let v = check(&[&[2, 0], &[4, 1]]).expect_err("out of range");
            assert!(v.detail.contains("edge_ids[2] = 4 is out of range for 4 edges"), "{}", v.detail);
        }
    }

    #[test]
    fn triple_hashes_compare_multisets() {
        let (mut a, mut b) = TripleHash::pair();
        for (s, d, e) in [(0, 1, 0), (1, 0, 1), (1, 1, 2)] {
            a.add(s, d, e);
        }
        for (s, d, e) in [(1, 1, 2), (0, 1, 0), (1, 0, 1)] {
            b.add(s, d, e);
        }
        assert_eq!(a, b);
        let (mut c, mut d) = TripleHash::pair();
        c.add(0, 1, 0);
        c.add(1, 0, 1);
        d.add(0, 1, 1);
        d.add(1, 0, 0);
        assert_ne!(c, d, "swapped edge ids");
    }
}
