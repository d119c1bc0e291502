//! METIS partitioning of a graph's nodes into k parts (feature `metis`).
//!
//! A sharded run splits a graph's nodes into parts, one per worker, and pays
//! for every edge whose ends lie in different parts. [`metis_parts`] hands the
//! graph to METIS (the vendored C library, through the `metis` tiga_runtime), which
//! cuts few edges while keeping the parts balanced.
//!
//! METIS wants an undirected graph without self loops, in 32-bit CSR. Our
//! graphs are directed CSR by destination, so this module symmetrizes: the
//! directed edges between two nodes, either way, become one undirected edge
//! whose weight is their number, and self loops go. A node weighs
//! 1 + its in-degree (self loops included), the work of its row, so parts of
//! equal weight carry about equal numbers of edges.
//!
//! Invariants: the input CSR is checked as [`Graph::from_csr`] checks it
//! (with [`GraphError`]'s messages); every count that METIS would hold in an
//! `i32` is checked before any symmetric array is allocated; METIS's answer
//! is checked to lie in `0..parts`. Calls into METIS are serialized by one
//! lock: METIS sets the process's `SIGABRT` and `SIGTERM` handlers while it
//! runs, and two threads doing so at once could leave them set.
//!
//! [`Graph::from_csr`]: tiga_runtime::Graph::from_csr

use metis::option::Seed;
use metis::Idx;
use std::sync::Mutex;
use tiga_runtime::GraphError;

/// The seed METIS's randomized matching and refinement start from, fixed so
/// the same graph always gets the same parts.
const SEED: Idx = 4321;

/// Serializes calls into METIS (see the module documentation).
static METIS_LOCK: Mutex<()> = Mutex::new(());

/// Why METIS could not partition a graph.
#[derive(Debug, thiserror::Error)]
pub enum MetisError {
    #[error("cannot split a graph into 0 parts")]
    NoParts,
    #[error("the graph's CSR is invalid")]
    Csr(#[source] GraphError),
    #[error("{what} is {count}, more than METIS's 32-bit indices hold ({max})", max = Idx::MAX)]
    TooLarge { what: &'static str, count: u64 },
    #[error("METIS refused the symmetrized graph")]
    Graph(#[source] metis::NewGraphError),
    #[error("METIS failed to partition the graph")]
    Metis(#[source] metis::Error),
    #[error("METIS put node {node} in part {part}, outside 0..{parts}")]
    PartOutOfRange { node: usize, part: Idx, parts: usize },
}

/// Part of each node (0..parts), for `parts` parts of the graph whose
/// directed CSR is (`offsets`, `cols`) over `num_nodes` nodes (rows are
/// destinations, cols are sources, both in 0..num_nodes). The CSR is
/// symmetrized for METIS (an edge either way joins two nodes once; self
/// loops dropped; multi-edges merged, with edge weight = multiplicity in both
/// directions summed) and vertex weights are 1 + in-degree so balanced parts
/// carry balanced edges. Deterministic (same input, same parts: fixed seed option).
///
/// `parts == 1` gives all zeros and `parts >= num_nodes` node `i` in part
/// `i`, both without calling METIS; `num_nodes == 0` gives an empty vector.
/// METIS itself prints a notice to stdout when its initial bisection must
/// leave a part empty (a few very heavy nodes and many parts).
pub fn metis_parts(num_nodes: usize, offsets: &[u64], cols: &[u32], parts: usize) -> Result<Vec<u32>, MetisError> {
    let method = if parts <= 8 { Method::Recursive } else { Method::Kway };
    partition(num_nodes, offsets, cols, parts, method)
}

/// METIS's two partitioners. On 4-neighbour grids (32 x 32 to 100 x 100,
/// natural and randomly numbered, 2 to 8 parts) recursive bisection cut up
/// to 15% fewer edges than k-way in 29 of 35 cases and at most 4% more in
/// the rest; k-way is METIS's choice for many parts (faster, and better
/// balanced at 32 parts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Kway,
    Recursive,
}

fn partition(num_nodes: usize, offsets: &[u64], cols: &[u32], parts: usize, method: Method) -> Result<Vec<u32>, MetisError> {
    if parts == 0 {
        return Err(MetisError::NoParts);
    }
    check_csr(num_nodes, offsets, cols).map_err(MetisError::Csr)?;
    if parts == 1 {
        return Ok(vec![0; num_nodes]);
    }
    if parts >= num_nodes {
        // One node per part is as balanced as parts can be; METIS would get
        // there too, printing a notice for each part it must leave empty.
        return Ok((0..num_nodes).map(|v| v as u32).collect());
    }
    let self_loops = (0..num_nodes).map(|d| cols[row(offsets, d)].iter().filter(|&&s| s as usize == d).count()).sum::<usize>();
    let entries = check_sizes(num_nodes as u64, cols.len() as u64, self_loops as u64)?;
    // parts < num_nodes, which fits.
    let nparts = parts as Idx;
    let sym = Symmetric::new(num_nodes, offsets, cols, entries);
    let mut part: Vec<Idx> = vec![0; num_nodes];
    {
        let _guard = METIS_LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let graph = metis::Graph::new(1, nparts, &sym.xadj, &sym.adjncy)
            .map_err(MetisError::Graph)?
            .set_vwgt(&sym.vwgt)
            .set_adjwgt(&sym.adjwgt)
            .set_option(Seed(SEED));
        match method {
            Method::Kway => graph.part_kway(&mut part),
            Method::Recursive => graph.part_recursive(&mut part),
        }
        .map_err(MetisError::Metis)?;
    }
    part.iter()
        .enumerate()
        .map(|(node, &p)| match u32::try_from(p) {
            Ok(q) if (q as usize) < parts => Ok(q),
            _ => Err(MetisError::PartOutOfRange { node, part: p, parts }),
        })
        .collect()
}

fn row(offsets: &[u64], d: usize) -> std::ops::Range<usize> {
    offsets[d] as usize..offsets[d + 1] as usize
}

/// The number of symmetric entries (twice the non-loop edges), after
/// checking that every count METIS holds in an `i32` fits: xadj's
/// `num_nodes + 1` entries, the symmetric entries, and the total vertex
/// weight `num_nodes + edges`.
fn check_sizes(num_nodes: u64, edges: u64, self_loops: u64) -> Result<Idx, MetisError> {
    to_idx("the node count + 1", num_nodes + 1)?;
    to_idx("the total vertex weight (nodes + edges)", num_nodes + edges)?;
    to_idx("twice the non-loop edge count", 2 * (edges - self_loops))
}

/// The checks of [`tiga_runtime::Graph::from_csr`] for a square graph, on borrowed
/// arrays.
fn check_csr(num_nodes: usize, offsets: &[u64], cols: &[u32]) -> Result<(), GraphError> {
    if num_nodes > tiga_runtime::MAX_NODES {
        return Err(GraphError::TooManyNodes { side: "node", count: num_nodes });
    }
    let expected = num_nodes + 1;
    if offsets.len() != expected {
        return Err(GraphError::OffsetsLength { expected, actual: offsets.len() });
    }
    if offsets[0] != 0 {
        return Err(GraphError::OffsetsStart { first: offsets[0] });
    }
    if let Some(index) = (1..offsets.len()).find(|&i| offsets[i] < offsets[i - 1]) {
        return Err(GraphError::OffsetsDecreasing { index, prev: offsets[index - 1], value: offsets[index] });
    }
    let last = offsets[num_nodes];
    if last != cols.len() as u64 {
        return Err(GraphError::OffsetsEnd { last, num_dst: num_nodes, num_cols: cols.len() });
    }
    if let Some(position) = cols.iter().position(|&c| c as usize >= num_nodes) {
        return Err(GraphError::ColumnOutOfRange { position, src: cols[position], num_src: num_nodes });
    }
    Ok(())
}

fn to_idx(what: &'static str, count: u64) -> Result<Idx, MetisError> {
    Idx::try_from(count).map_err(|_| MetisError::TooLarge { what, count })
}

/// The undirected, loop-free, merged graph METIS partitions, with its
/// weights.
struct Symmetric {
    xadj: Vec<Idx>,
    adjncy: Vec<Idx>,
    adjwgt: Vec<Idx>,
    vwgt: Vec<Idx>,
}

impl Symmetric {
    /// Builds it from a checked CSR: counts, then scatters each directed
    /// edge into both ends' rows, then merges each row's repeated
    /// neighbours in place (first occurrence kept, weights summed), in
    /// O(nodes + edges) time.
    fn new(num_nodes: usize, offsets: &[u64], cols: &[u32], entries: Idx) -> Symmetric {
        let mut xadj: Vec<Idx> = vec![0; num_nodes + 1];
        for d in 0..num_nodes {
            for &s in &cols[row(offsets, d)] {
                if s as usize != d {
                    xadj[s as usize + 1] += 1;
                    xadj[d + 1] += 1;
                }
            }
        }
        for v in 0..num_nodes {
            xadj[v + 1] += xadj[v];
        }
        let mut cursor: Vec<Idx> = xadj[..num_nodes].to_vec();
        let mut adjncy: Vec<Idx> = vec![0; entries as usize];
        for d in 0..num_nodes {
            for &s in &cols[row(offsets, d)] {
                let s = s as usize;
                if s != d {
                    adjncy[cursor[s] as usize] = d as Idx;
                    cursor[s] += 1;
                    adjncy[cursor[d] as usize] = s as Idx;
                    cursor[d] += 1;
                }
            }
        }
        drop(cursor);

        // slot[u] = where u sits in the row being merged, if it is at or past
        // that row's start; earlier rows' slots all lie before it.
        let mut slot: Vec<Idx> = vec![-1; num_nodes];
        let mut adjwgt: Vec<Idx> = vec![0; entries as usize];
        let mut write: Idx = 0;
        let mut start = 0;
        for v in 0..num_nodes {
            let end = xadj[v + 1];
            let row_start = write;
            for k in start..end {
                let u = adjncy[k as usize];
                let at = slot[u as usize];
                if at >= row_start {
                    adjwgt[at as usize] += 1;
                } else {
                    slot[u as usize] = write;
                    adjncy[write as usize] = u;
                    adjwgt[write as usize] = 1;
                    write += 1;
                }
            }
            xadj[v] = row_start;
            start = end;
        }
        xadj[num_nodes] = write;
        adjncy.truncate(write as usize);
        adjwgt.truncate(write as usize);

        // In-degrees fit: their sum plus num_nodes was checked (check_sizes).
        let vwgt = (0..num_nodes).map(|d| 1 + (offsets[d + 1] - offsets[d]) as Idx).collect();
        Symmetric { xadj, adjncy, adjwgt, vwgt }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A directed CSR by destination from (source, destination) pairs.
    fn csr(n: usize, edges: &[(u32, u32)]) -> (Vec<u64>, Vec<u32>) {
        let mut sorted = edges.to_vec();
        sorted.sort_by_key(|&(s, d)| (d, s));
        let mut offsets = vec![0u64; n + 1];
        for &(_, d) in &sorted {
            offsets[d as usize + 1] += 1;
        }
        for v in 0..n {
            offsets[v + 1] += offsets[v];
        }
        (offsets, sorted.iter().map(|&(s, _)| s).collect())
    }

    /// The 4-neighbour `rows` x `cols` grid, every neighbour pair joined
    /// both ways.
    fn grid_edges(rows: u32, cols: u32) -> Vec<(u32, u32)> {
        let mut edges = Vec::new();
        for i in 0..rows {
            for j in 0..cols {
                let v = i * cols + j;
                if j + 1 < cols {
                    edges.extend([(v, v + 1), (v + 1, v)]);
                }
                if i + 1 < rows {
                    edges.extend([(v, v + cols), (v + cols, v)]);
                }
            }
        }
        edges
    }

    /// xorshift64*, so the tests need no random-number tiga_runtime.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
        }
    }

    fn permuted(n: usize, edges: &[(u32, u32)], seed: u64) -> Vec<(u32, u32)> {
        let mut rng = Rng(seed);
        let mut perm: Vec<u32> = (0..n as u32).collect();
        for i in (1..n).rev() {
            perm.swap(i, rng.below(i + 1));
        }
        edges.iter().map(|&(s, d)| (perm[s as usize], perm[d as usize])).collect()
    }

    /// Undirected edges cut: pairs in both directions count once.
    fn cut(edges: &[(u32, u32)], part: &[u32]) -> usize {
        let directed = edges.iter().filter(|&&(s, d)| part[s as usize] != part[d as usize]).count();
        assert_eq!(directed % 2, 0, "the test graphs are symmetric");
        directed / 2
    }

    fn blocks(n: usize, parts: usize) -> Vec<u32> {
        (0..n).map(|v| (v * parts / n) as u32).collect()
    }

    /// Each part's weight, 1 + in-degree counted from the edge list.
    fn part_weights(n: usize, edges: &[(u32, u32)], part: &[u32], parts: usize) -> Vec<usize> {
        let mut weight = vec![1usize; n];
        for &(_, d) in edges {
            weight[d as usize] += 1;
        }
        let mut sums = vec![0; parts];
        for v in 0..n {
            sums[part[v] as usize] += weight[v];
        }
        sums
    }

    fn assert_balanced(n: usize, edges: &[(u32, u32)], part: &[u32], parts: usize) {
        let sums = part_weights(n, edges, part, parts);
        let total: usize = sums.iter().sum();
        assert_eq!(total, n + edges.len());
        for &w in &sums {
            assert!(w * parts * 10 <= total * 11, "part weights {sums:?} of {total}: one is over 110% of the mean");
        }
    }

    fn parts_of(n: usize, edges: &[(u32, u32)], parts: usize) -> Vec<u32> {
        let (offsets, cols) = csr(n, edges);
        let part = metis_parts(n, &offsets, &cols, parts).expect("partitions");
        assert_eq!(part.len(), n);
        assert!(part.iter().all(|&p| (p as usize) < parts));
        part
    }

    #[test]
    fn grid_cut_is_at_most_the_row_blocks() {
        let edges = grid_edges(32, 32);
        assert_eq!(edges.len(), 2 * (2 * 32 * 31));
        // Four blocks of 8 rows cut 3 lines of 32 edges.
        assert_eq!(cut(&edges, &blocks(1024, 4)), 96);
        let part = parts_of(1024, &edges, 4);
        let c = cut(&edges, &part);
        // Quadrants cut 2 lines of 32: the best there is.
        assert!((64..=96).contains(&c), "cut {c}");
        assert_balanced(1024, &edges, &part, 4);
    }

    #[test]
    fn permuted_grid_cut_is_far_below_the_blocks() {
        let edges = permuted(1024, &grid_edges(32, 32), 7);
        let block_cut = cut(&edges, &blocks(1024, 4));
        // A random numbering's blocks cut about 3/4 of the 1984 edges.
        assert!(block_cut > 1300, "block cut {block_cut}");
        let part = parts_of(1024, &edges, 4);
        let c = cut(&edges, &part);
        assert!((64..=128).contains(&c) && c * 10 < block_cut, "cut {c}, blocks {block_cut}");
        assert_balanced(1024, &edges, &part, 4);
        for parts in [2, 3, 7, 8, 12] {
            let part = parts_of(1024, &edges, parts);
            let c = cut(&edges, &part);
            let block_cut = cut(&edges, &blocks(1024, parts));
            assert!(c * 8 < block_cut, "{parts} parts: cut {c}, blocks {block_cut}");
            assert_balanced(1024, &edges, &part, parts);
        }
    }

    #[test]
    fn deterministic() {
        let edges = permuted(1024, &grid_edges(32, 32), 11);
        for parts in [4, 7] {
            assert_eq!(parts_of(1024, &edges, parts), parts_of(1024, &edges, parts));
        }
    }

    #[test]
    fn isolated_nodes_are_placed_and_balanced() {
        // A 16 x 16 grid, then 64 nodes without edges.
        let edges = grid_edges(16, 16);
        let part = parts_of(256 + 64, &edges, 4);
        // The grid's own row blocks cut 3 lines of 16.
        assert!(cut(&edges, &part) <= 48, "cut {}", cut(&edges, &part));
        assert_balanced(256 + 64, &edges, &part, 4);
    }

    #[test]
    fn edgeless_graph() {
        let part = parts_of(10, &[], 4);
        let sizes = part_weights(10, &[], &part, 4);
        assert_eq!(sizes.iter().sum::<usize>(), 10);
        assert!(sizes.iter().all(|&s| (2..=3).contains(&s)), "sizes {sizes:?}");
    }

    #[test]
    fn one_part_more_parts_than_nodes_and_no_nodes() {
        let edges = grid_edges(4, 4);
        assert_eq!(parts_of(16, &edges, 1), vec![0; 16]);
        let singletons: Vec<u32> = (0..16).collect();
        assert_eq!(parts_of(16, &edges, 16), singletons);
        assert_eq!(parts_of(16, &edges, 40), singletons);
        assert_eq!(parts_of(3, &[(1, 0), (2, 1)], 7), vec![0, 1, 2]);
        for parts in [1, 3] {
            assert_eq!(metis_parts(0, &[0], &[], parts).expect("empty"), Vec::<u32>::new());
        }
    }

    #[test]
    fn self_loops_and_multi_edges() {
        // Only self loops: like no edges, each node weighing 3.
        let loops: Vec<(u32, u32)> = (0..6).flat_map(|v| [(v, v), (v, v)]).collect();
        let part = parts_of(6, &loops, 3);
        assert_eq!(part_weights(6, &loops, &part, 3), vec![6, 6, 6]);

        // 0-1 and 2-3 joined by five edges each, 1-2 by two, every node
        // with a loop: the halves {0, 1} and {2, 3} weigh 10 each and cut 2.
        let mut edges = vec![(0, 1), (0, 1), (0, 1), (1, 0), (1, 0), (2, 3), (2, 3), (2, 3), (3, 2), (3, 2)];
        edges.extend([(1, 2), (2, 1), (0, 0), (1, 1), (2, 2), (3, 3)]);
        let part = parts_of(4, &edges, 2);
        assert!(part[0] == part[1] && part[2] == part[3] && part[0] != part[2], "{part:?}");
        assert_eq!(part_weights(4, &edges, &part, 2), vec![10, 10]);
    }

    #[test]
    fn symmetrized_graph_merges_both_directions() {
        let n = 200;
        let mut rng = Rng(3);
        let edges: Vec<(u32, u32)> = (0..3000).map(|_| (rng.below(n) as u32, rng.below(n) as u32)).collect();
        let (offsets, cols) = csr(n, &edges);
        let self_loops = edges.iter().filter(|(s, d)| s == d).count();
        assert!(self_loops > 0);
        let entries = check_sizes(n as u64, edges.len() as u64, self_loops as u64).expect("fits");
        let sym = Symmetric::new(n, &offsets, &cols, entries);

        let mut expected: BTreeMap<(i32, i32), i32> = BTreeMap::new();
        for &(s, d) in edges.iter().filter(|(s, d)| s != d) {
            *expected.entry((s as i32, d as i32)).or_default() += 1;
            *expected.entry((d as i32, s as i32)).or_default() += 1;
        }
        let mut got = BTreeMap::new();
        for v in 0..n {
            for k in sym.xadj[v] as usize..sym.xadj[v + 1] as usize {
                assert!(got.insert((v as i32, sym.adjncy[k]), sym.adjwgt[k]).is_none(), "row {v} repeats a neighbour");
            }
        }
        assert_eq!(got, expected);
        assert_eq!(sym.xadj[n] as usize, expected.len());
        assert_eq!(sym.adjwgt.iter().sum::<i32>() as usize, 2 * (edges.len() - self_loops));
        let mut in_degree = vec![0; n];
        for &(_, d) in &edges {
            in_degree[d as usize] += 1;
        }
        assert_eq!(sym.vwgt, in_degree.iter().map(|&k| 1 + k).collect::<Vec<i32>>());
    }

    #[test]
    fn errors() {
        assert!(matches!(metis_parts(2, &[0, 1, 2], &[1, 0], 0), Err(MetisError::NoParts)));
        assert!(matches!(
            metis_parts(2, &[0, 1, 3], &[1, 0], 2),
            Err(MetisError::Csr(GraphError::OffsetsEnd { last: 3, num_dst: 2, num_cols: 2 }))
        ));
        assert!(matches!(
            metis_parts(2, &[0, 1, 2], &[1, 2], 2),
            Err(MetisError::Csr(GraphError::ColumnOutOfRange { position: 1, src: 2, num_src: 2 }))
        ));
        assert!(matches!(
            metis_parts(2, &[0, 2], &[1, 0], 2),
            Err(MetisError::Csr(GraphError::OffsetsLength { expected: 3, actual: 2 }))
        ));
        let max = i32::MAX as u64;
        assert!(
            matches!(check_sizes(max, 0, 0), Err(MetisError::TooLarge { what: "the node count + 1", count }) if count == max + 1)
        );
        assert!(matches!(check_sizes(10, 1 << 30, 0), Err(MetisError::TooLarge { count, .. }) if count == 1 << 31));
        assert_eq!(check_sizes(10, 1 << 30, 1).expect("fits"), i32::MAX - 1);
        assert!(matches!(check_sizes(1 << 30, 1 << 30, 1 << 30), Err(MetisError::TooLarge { count, .. }) if count == 1 << 31));
        let message = MetisError::TooLarge { what: "twice the non-loop edge count", count: 1 << 31 }.to_string();
        assert_eq!(message, "twice the non-loop edge count is 2147483648, more than METIS's 32-bit indices hold (2147483647)");
    }
}
