"""Mini-batches (tiga.loader): every batch's edges are edges of the graph,
fanouts bound them, epochs cover the seeds once, and with every edge taken
a kernel over the batch's block equals the full graph at the seeds (a NumPy
scatter as the reference). Over `tigac serve`, the same batches."""

import os
import pathlib
import subprocess

import numpy as np
import pytest

import tiga
from tiga.loader import NeighborLoader, RemoteNeighborLoader

REPO = pathlib.Path(__file__).resolve().parents[2]


def random_graph(n=300, e=2400, seed=0):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, size=e)
    dst = rng.integers(0, n, size=e)
    # A hub with many in-edges and a few nodes with none.
    dst[: e // 10] = 0
    dst[dst >= n - 5] = 1
    return np.stack([src, dst]).astype(np.int64)


def test_batches_are_edges_of_the_graph_and_cover_the_seeds():
    n = 300
    ei = random_graph(n)
    g = tiga.Graph.from_edge_index(ei, n)
    loader = NeighborLoader(g, num_neighbors=[4, 3], batch_size=64, shuffle=True, seed=5)
    assert len(loader) == 5
    seen = []
    for b in loader:
        seeds = b.n_id[: b.batch_size]
        seen.extend(seeds.tolist())
        assert b.num_nodes == len(b.n_id) == len(set(b.n_id.tolist()))
        assert sum(b.num_sampled_nodes) == b.num_nodes
        assert sum(b.num_sampled_edges) == b.edge_index.shape[1] == len(b.e_id)
        assert b.graph.num_edges == b.edge_index.shape[1] and b.graph.num_nodes == b.num_nodes
        # Each local edge is the graph's edge e_id, in global ids.
        glob = b.n_id[b.edge_index]
        np.testing.assert_array_equal(glob, ei[:, b.e_id])
        # The block graph holds the same edges, in the same order.
        np.testing.assert_array_equal(b.graph.edge_index(), b.edge_index)
        # Hop 0: at most 4 edges per seed, all of a seed's edges when it has <= 4.
        h0 = b.edge_index_per_hop[0]
        counts = np.bincount(h0[1], minlength=b.batch_size)
        indeg = np.bincount(ei[1], minlength=n)
        np.testing.assert_array_equal(counts[: b.batch_size], np.minimum(indeg[seeds], 4))
        # Hop 1's centres are the nodes first reached at hop 0.
        h1 = b.edge_index_per_hop[1]
        lo, hi = b.batch_size, b.batch_size + b.num_sampled_nodes[1]
        assert h1.shape[1] == 0 or (h1[1].min() >= lo and h1[1].max() < hi)
    assert sorted(seen) == list(range(n))
    # A second epoch visits the seeds in another order; epoch(0) again is the first.
    first = [b.n_id.copy() for b in loader.epoch(0)]
    again = [b.n_id.copy() for b in loader.epoch(0)]
    other = [b.n_id.copy() for b in loader.epoch(1)]
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not np.array_equal(first[0][:64], other[0][:64])


def test_every_edge_taken_gives_the_full_graphs_rows_at_the_seeds():
    n, f = 250, 3
    ei = random_graph(n, 1500, seed=2)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, f))
    g = tiga.Graph.from_edge_index(ei, n)
    loader = NeighborLoader(g, num_neighbors=[-1, -1], batch_size=40, input_nodes=np.arange(0, n, 3), x=x)

    def layer(h, e, m):
        out = np.zeros((m, f))
        np.add.at(out, e[1], h[e[0]])
        return out

    full = layer(layer(x, ei, n), ei, n)
    k = tiga.gnn.VecSum
    for b in loader:
        np.testing.assert_array_equal(b.x, x[b.n_id])
        once = k(b.graph, src={"h": b.x})["out"]
        twice = k(b.graph, src={"h": once})["out"]
        np.testing.assert_allclose(twice[: b.batch_size], full[b.n_id[: b.batch_size]], rtol=1e-12, atol=1e-12)


def test_zero_weight_edges_are_never_sampled_and_masks_select_seeds():
    n = 200
    ei = random_graph(n, 1600, seed=3)
    w = np.where(np.arange(ei.shape[1]) % 2 == 0, 0.0, 1.0)
    mask = np.zeros(n, dtype=bool)
    mask[::7] = True
    g = tiga.Graph.from_edge_index(ei, n)
    loader = NeighborLoader(g, [3, 2], batch_size=16, input_nodes=mask, weights=w, seed=9)
    indeg = np.bincount(ei[1], minlength=n)
    seeds = []
    for b in loader:
        # A row of more edges than the fanout never gives a zero-weight one
        # (a row of at most the fanout gives all its edges, as documented).
        at = 0
        for fanout, h in zip([3, 2], b.edge_index_per_hop):
            ids = b.e_id[at : at + h.shape[1]]
            at += h.shape[1]
            big = indeg[b.n_id[h[1]]] > fanout
            assert big.any() and np.all(w[ids[big]] > 0)
        seeds.extend(b.n_id[: b.batch_size].tolist())
    assert seeds == np.flatnonzero(mask).tolist()


def test_bad_loader_arguments_are_refused():
    n = 50
    g = tiga.Graph.from_edge_index(random_graph(n, 300), n)
    with pytest.raises(tiga.InputError, match="not a count"):
        NeighborLoader(g, [-2])
    with pytest.raises(tiga.InputError, match="at least one hop"):
        NeighborLoader(g, [])
    with pytest.raises(tiga.InputError, match="batch_size"):
        NeighborLoader(g, [2], batch_size=0)
    with pytest.raises(tiga.InputError, match=r"input_nodes\[1\] = 50"):
        NeighborLoader(g, [2], input_nodes=np.array([3, 50]))
    with pytest.raises(tiga.InputError, match="mask"):
        NeighborLoader(g, [2], input_nodes=np.ones(7, dtype=bool))
    with pytest.raises(tiga.InputError, match="weights"):
        NeighborLoader(g, [2], weights=np.ones(3))
    with pytest.raises(tiga.InputError, match="rows"):
        NeighborLoader(g, [2], x=np.ones((3, 2)))
    bad = np.ones(g.num_edges)
    bad[4] = -1.0
    with pytest.raises(tiga.GraphError, match="non-negative"):
        next(iter(NeighborLoader(g, [2], weights=bad)))
    with pytest.raises(tiga.InputError, match="is not a node"):
        tiga._tiga.sample(g._g, np.array([0, 99]), [2], 0)
    with pytest.raises(tiga.InputError, match="hop 5"):
        next(iter(NeighborLoader(g, [2], batch_size=4)))._raw.hop(5)


def tigac():
    """The tigac binary: $TIGAC, or the workspace's release build."""
    given = os.environ.get("TIGAC")
    path = given or str(REPO / "target" / "release" / "tigac")
    if not os.access(path, os.X_OK):
        # CI sets TIGAC, so there a missing binary fails the test.
        assert not given, f"TIGAC={given} is not an executable"
        pytest.skip("tigac is not built (cargo build --release, or set TIGAC)")
    return path


def serve(binary, gfg, features, parts=2):
    procs, addrs = [], []
    for r in range(parts):
        cmd = [binary, "serve", "--graph", str(gfg), "--partition", f"{r}/{parts}", "--listen", "127.0.0.1:0", "--sessions", "1"]
        for name, path in features.items():
            cmd += ["--features", f"node:{name}={path}"]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        assert line.startswith("listening on "), line
        procs.append(p)
        addrs.append(line.split()[2])
    return procs, addrs


def test_a_graph_store_gives_the_batches_of_the_file(tmp_path):
    binary = tigac()
    n, f = 240, 4
    ei = random_graph(n, 1800, seed=6)
    txt = tmp_path / "g.txt"
    txt.write_text("".join(f"{s} {d}\n" for s, d in ei.T))
    gfg = tmp_path / "g.gfg"
    subprocess.run([binary, "convert", str(txt), str(gfg)], check=True, stdout=subprocess.DEVNULL)
    x = np.random.default_rng(0).standard_normal((n, f)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    procs, addrs = serve(binary, gfg, {"x": tmp_path / "x.npy"})
    try:
        file = tiga.Graph.from_gfg(gfg)
        seeds = np.arange(0, n, 2)
        local = list(NeighborLoader(file, [3, 2], batch_size=32, input_nodes=seeds, shuffle=True, seed=8, x=x).epoch(1))
        memory = list(NeighborLoader(tiga.Graph.from_edge_index(ei, n), [3, 2], batch_size=32, input_nodes=seeds, shuffle=True, seed=8).epoch(1))
        for a, b in zip(memory, local):
            np.testing.assert_array_equal(a.n_id, b.n_id)
            np.testing.assert_array_equal(a.e_id, b.e_id)
        with RemoteNeighborLoader(addrs, [3, 2], batch_size=32, input_nodes=seeds, shuffle=True, seed=8, x="x", prefetch=2) as remote:
            assert len(remote) == len(local) == 4
            got = list(remote.epoch(1))
            with pytest.raises(tiga.InputError, match="unknown feature"):
                RemoteNeighborLoader(remote.dataset, [2], node_features=["nope"])
        assert len(got) == len(local)
        for a, b in zip(got, local):
            np.testing.assert_array_equal(a.n_id, b.n_id)
            np.testing.assert_array_equal(a.edge_index, b.edge_index)
            np.testing.assert_array_equal(a.e_id, b.e_id)
            np.testing.assert_array_equal(a.x, b.x)
            assert a.num_sampled_nodes == b.num_sampled_nodes
        remote.dataset.close()
        for p in procs:
            assert p.wait(timeout=20) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def test_an_unreachable_store_is_a_store_error():
    with pytest.raises(tiga.StoreError, match="cannot connect"):
        RemoteNeighborLoader(["127.0.0.1:1"], [2], timeout=1.0)
