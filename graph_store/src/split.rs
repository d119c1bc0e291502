//! Splits made at storage, with a seed, and the share of a server's ids
//! that each compute rank fetches.
//!
//! **Hashed, so partition-free.** Whether node `i` is in train, val or test
//! depends only on (seed, `i`): a server decides for the nodes it owns
//! without talking to the others, and the same node lands in the same split
//! whatever the number of servers (as GiGL's hashed splitters do). The
//! fractions are met in expectation, not exactly; fractions that sum below
//! 1 leave the rest in no split.
//!
//! - A **node split** puts node `i` in a split by the hash of `i`.
//! - A **node-anchor link split** makes every destination row with at least
//!   one incoming edge an anchor, its positive labels the sources of those
//!   edges (row order, repeats kept), and puts the anchor, with all its
//!   labels, in a split by the hash of the anchor (another salt than the
//!   node split's): the supervision edges of one anchor never straddle two
//!   splits. Random negatives, on request, are `k` node ids per anchor drawn
//!   uniformly (with replacement, positives not excluded) from a stream
//!   keyed by (negative seed, anchor): the same at every server and rank.

use std::ops::Range;
pub(crate) use tiga_dist::sampling::mix;

use thiserror::Error;

/// What kind of split a [`SplitSpec`] makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SplitKind {
    Node,
    Link,
}

impl SplitKind {
    pub fn name(self) -> &'static str {
        match self {
            SplitKind::Node => "node",
            SplitKind::Link => "link",
        }
    }
}

/// One of the three parts of a split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    Train,
    Val,
    Test,
}

impl Part {
    /// `"train"`, `"val"` or `"test"` (the protocol's `split` strings).
    pub fn parse(s: &str) -> Option<Part> {
        match s {
            "train" => Some(Part::Train),
            "val" => Some(Part::Val),
            "test" => Some(Part::Test),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Part::Train => "train",
            Part::Val => "val",
            Part::Test => "test",
        }
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum SplitError {
    #[error("`{0}`: a split is KIND:TRAIN,VAL,TEST[:SEED] with KIND `node` or `link` (e.g. node:0.8,0.1,0.1:7)")]
    Syntax(String),
    #[error("`{spec}`: the fraction `{value}` is not a number in [0, 1]")]
    Fraction { spec: String, value: String },
    #[error("`{spec}`: the fractions sum to {sum}, over 1")]
    Sum { spec: String, sum: f64 },
    #[error("`{spec}`: the seed `{value}` is not a whole number ≥ 0")]
    Seed { spec: String, value: String },
}

/// A split as `tigac serve --split` gives it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SplitSpec {
    pub kind: SplitKind,
    pub train: f64,
    pub val: f64,
    pub test: f64,
    pub seed: u64,
}

impl SplitSpec {
    /// `node:0.8,0.1,0.1:7` or `link:0.8,0.1,0.1` (seed 0).
    pub fn parse(s: &str) -> Result<SplitSpec, SplitError> {
        let syntax = || SplitError::Syntax(s.to_string());
        let mut parts = s.split(':');
        let kind = match parts.next() {
            Some("node") => SplitKind::Node,
            Some("link") => SplitKind::Link,
            _ => return Err(syntax()),
        };
        let fractions = parts.next().ok_or_else(syntax)?;
        let seed = match parts.next() {
            None => 0,
            Some(v) => v.trim().parse().map_err(|_| SplitError::Seed { spec: s.to_string(), value: v.to_string() })?,
        };
        if parts.next().is_some() {
            return Err(syntax());
        }
        let f: Vec<f64> = fractions
            .split(',')
            .map(|v| {
                v.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|x| (0.0..=1.0).contains(x))
                    .ok_or_else(|| SplitError::Fraction { spec: s.to_string(), value: v.to_string() })
            })
            .collect::<Result<_, _>>()?;
        let [train, val, test] = f[..] else { return Err(syntax()) };
        let sum = train + val + test;
        if sum > 1.0 + 1e-9 {
            return Err(SplitError::Sum { spec: s.to_string(), sum });
        }
        Ok(SplitSpec { kind, train, val, test, seed })
    }

    /// Which part `key` (a node, or an anchor) falls in, if any.
    pub fn part_of(&self, key: u64) -> Option<Part> {
        let salt = match self.kind {
            SplitKind::Node => 0x4E4F_4445_5350_4C54,
            SplitKind::Link => 0x4C49_4E4B_5350_4C54,
        };
        let u = unit(mix(mix(self.seed ^ salt) ^ key));
        if u < self.train {
            Some(Part::Train)
        } else if u < self.train + self.val {
            Some(Part::Val)
        } else if u < self.train + self.val + self.test {
            Some(Part::Test)
        } else {
            None
        }
    }
}

/// Uniform in [0, 1) from the high 53 bits.
fn unit(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// `k` random negative labels of `anchor` among `num_nodes` nodes (see the
/// module doc).
pub fn negatives(seed: u64, anchor: u64, k: usize, num_nodes: u64) -> Vec<u64> {
    if num_nodes == 0 {
        return Vec::new();
    }
    let mut state = mix(mix(seed ^ 0x4E45_4741_5449_5645) ^ anchor);
    (0..k)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            ((u128::from(mix(state)) * u128::from(num_nodes)) >> 64) as u64
        })
        .collect()
}

/// Which of a server's `n` items (its node ids, its anchors: a list in a
/// fixed order) compute rank `rank` of `world` fetches, when server
/// `server` of `servers` answers. Storage servers go to compute ranks in
/// contiguous blocks, as GiGL assigns them: with at least as many servers
/// as compute ranks, rank `r` takes every item of the servers
/// `owned_range(servers, world, r)`; with fewer, each server is shared by
/// the ranks `owned_range(world, servers, s)`, which cut its list into
/// contiguous slices (`n / m` each, the last taking the rest). Every item
/// goes to exactly one rank. `world == 0` means "every item".
pub fn share(server: usize, servers: usize, rank: usize, world: usize, n: usize) -> Range<usize> {
    use tiga_dist::partition::owned_range;
    if world == 0 {
        return 0..n;
    }
    if servers >= world {
        return if owned_range(servers, world, rank).contains(&server) { 0..n } else { 0..0 };
    }
    let ranks = owned_range(world, servers, server);
    if !ranks.contains(&rank) {
        return 0..0;
    }
    let (k, m) = (rank - ranks.start, ranks.len());
    let per = n / m;
    let start = k * per;
    start..if k + 1 == m { n } else { start + per }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        let s = SplitSpec::parse("node:0.8,0.1,0.1:7").expect("a node split");
        assert_eq!((s.kind, s.train, s.val, s.test, s.seed), (SplitKind::Node, 0.8, 0.1, 0.1, 7));
        assert_eq!(SplitSpec::parse("link:0.5,0.25,0.25").map(|s| s.seed), Ok(0));
        assert!(matches!(SplitSpec::parse("edge:0.5,0.5,0"), Err(SplitError::Syntax(_))));
        assert!(matches!(SplitSpec::parse("node:0.5,0.5"), Err(SplitError::Syntax(_))));
        assert!(matches!(SplitSpec::parse("node:0.9,0.5,0"), Err(SplitError::Sum { .. })));
        assert!(matches!(SplitSpec::parse("node:x,0.5,0"), Err(SplitError::Fraction { .. })));
        assert!(matches!(SplitSpec::parse("node:0.5,0.5,0:-1"), Err(SplitError::Seed { .. })));
    }

    #[test]
    fn fractions_hold_roughly() {
        let s = SplitSpec { kind: SplitKind::Node, train: 0.7, val: 0.2, test: 0.1, seed: 3 };
        let mut c = [0usize; 4];
        for i in 0..100_000u64 {
            c[match s.part_of(i) {
                Some(Part::Train) => 0,
                Some(Part::Val) => 1,
                Some(Part::Test) => 2,
                None => 3,
            }] += 1;
        }
        assert!((c[0] as f64 / 1e5 - 0.7).abs() < 0.01, "{c:?}");
        assert!((c[1] as f64 / 1e5 - 0.2).abs() < 0.01, "{c:?}");
        assert_eq!(c[3], 0);
    }

    #[test]
    fn every_item_goes_to_one_rank() {
        for servers in 1..=4 {
            for world in 1..=5 {
                for n in [0usize, 1, 7, 20] {
                    let mut seen = vec![0u32; servers * n];
                    for s in 0..servers {
                        for r in 0..world {
                            for i in share(s, servers, r, world, n) {
                                seen[s * n + i] += 1;
                            }
                        }
                    }
                    assert!(seen.iter().all(|&c| c == 1), "servers {servers} world {world} n {n}: {seen:?}");
                }
            }
        }
    }

    #[test]
    fn negatives_are_in_range_and_keyed() {
        let a = negatives(1, 5, 10, 7);
        assert_eq!(a.len(), 10);
        assert!(a.iter().all(|&x| x < 7));
        assert_eq!(a, negatives(1, 5, 10, 7));
        assert_ne!(negatives(1, 5, 10, 1000), negatives(1, 6, 10, 1000));
    }
}
