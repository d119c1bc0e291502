#!/usr/bin/env python3
"""Write a benchmark graph as CSR .npy files (the layout peers.py reads).

  make_graph.py stencil OUT [--side 2000] [--features 1] [--seed 7] [--edge-list]
  make_graph.py powerlaw OUT [--nodes 1000000] [--edges 16000000] [--features 64] [--seed 7] [--edge-list]

stencil: a side x side grid, four neighbours, not periodic (border rows have
fewer edges). powerlaw: sources drawn from a Zipf-like law (exponent 1.1 over
a random permutation of the nodes), destinations uniform; rows sorted by
destination (the generation order kept inside a row), duplicates kept.

Writes rowptr.npy (int64), col.npy (int32), x.npy (float32, uniform in
[-1, 1), [N] or [N, F]), a_src.npy and a_dst.npy (float32, standard normal),
and with --edge-list also edges.txt (one "src dst" line per edge, in CSR
order).

tiga-bench does not need this script: it builds the same kinds of graphs
itself (bench/src/graphs.rs, with its own generator, so the numbers differ
but the law does not) and writes them for peers.py. This is for running
peers.py alone.
"""
import argparse
import os

import numpy as np

ZIPF_EXPONENT = 1.1


def stencil(side):
    """(num_nodes, dst, src) of the four-neighbour side x side grid."""
    n = side * side
    ids = np.arange(n, dtype=np.int64).reshape(side, side)
    dst_parts, src_parts = [], []
    for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)):
        r0, r1 = max(0, -dr), side - max(0, dr)
        c0, c1 = max(0, -dc), side - max(0, dc)
        dst_parts.append(ids[r0:r1, c0:c1].ravel())
        src_parts.append(ids[r0 + dr : r1 + dr, c0 + dc : c1 + dc].ravel())
    return n, np.concatenate(dst_parts), np.concatenate(src_parts)


def powerlaw(nodes, edges, seed):
    """(num_nodes, dst, src): Zipf-like sources, uniform destinations."""
    rng = np.random.default_rng(seed)
    p = np.arange(1, nodes + 1, dtype=np.float64) ** -ZIPF_EXPONENT
    p /= p.sum()
    perm = rng.permutation(nodes)
    src = perm[rng.choice(nodes, size=edges, p=p)]
    dst = rng.integers(0, nodes, size=edges)
    return nodes, dst.astype(np.int64), src.astype(np.int64)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["stencil", "powerlaw"])
    ap.add_argument("out", help="directory to write (created if missing)")
    ap.add_argument("--side", type=int, default=2000, help="stencil: grid side (default 2000)")
    ap.add_argument("--nodes", type=int, default=1_000_000, help="powerlaw: nodes (default 1000000)")
    ap.add_argument("--edges", type=int, default=16_000_000, help="powerlaw: edges (default 16000000)")
    ap.add_argument("--features", type=int, default=1, help="width F of x (default 1: x is [N])")
    ap.add_argument("--seed", type=int, default=7, help="graph seed; the fields use seed + 1 (default 7)")
    ap.add_argument("--edge-list", action="store_true", help="also write edges.txt")
    return ap.parse_args(argv)


def main(argv=None):
    a = parse_args(argv)
    n, dst, src = stencil(a.side) if a.kind == "stencil" else powerlaw(a.nodes, a.edges, a.seed)
    order = np.argsort(dst, kind="stable")
    dst, src = dst[order], src[order]
    rowptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=rowptr[1:])
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed + 1)
    shape = (n,) if a.features == 1 else (n, a.features)
    np.save(os.path.join(a.out, "rowptr.npy"), rowptr)
    np.save(os.path.join(a.out, "col.npy"), src.astype(np.int32))
    np.save(os.path.join(a.out, "x.npy"), rng.uniform(-1, 1, size=shape).astype(np.float32))
    np.save(os.path.join(a.out, "a_src.npy"), rng.normal(size=n).astype(np.float32))
    np.save(os.path.join(a.out, "a_dst.npy"), rng.normal(size=n).astype(np.float32))
    if a.edge_list:
        np.savetxt(os.path.join(a.out, "edges.txt"), np.stack([src, dst], 1), fmt="%d")
    print(f"{a.kind}: {n} nodes, {len(src)} edges, x{shape} -> {a.out}")


if __name__ == "__main__":
    main()
