"""Mini-batches for sampled training, as PyG's ``NeighborLoader`` gives them.

``NeighborLoader`` samples in this process with tiga's sampler (over a
graph in memory or a paged ``.gfg``); ``RemoteNeighborLoader`` samples
through a graph store (``tigac serve``), the batches made in the background
a few ahead. For the same graph, seeds, ``num_neighbors``, ``batch_size``,
``shuffle`` and ``seed`` the two give the same batches: a centre's sample
depends only on (sampling seed, centre, hop), and both visit the seeds of
epoch ``e`` in the order ``tiga._tiga.epoch_order(n, seed, e)`` and sample
it with seed ``seed + e``.

Each batch (``Batch``) carries what PyG's carries:

- ``n_id``: global ids of the batch's nodes, the seeds first (as given),
  then each new node in order of first appearance over the hops;
- ``batch_size``: how many of ``n_id`` are seeds;
- ``edge_index``: ``[2, E]`` local indices into ``n_id`` (row 0 the sampled
  neighbour, row 1 its centre), every hop's edges in hop order, and
  ``e_id`` their global edge ids; ``edge_index_per_hop`` the same split by
  hop, ``num_sampled_nodes`` and ``num_sampled_edges`` per hop as PyG has
  them;
- ``x``, ``y`` (and ``features``): rows of the given node arrays (or of the
  store's node features) for ``n_id``;
- ``graph``: the block as a ``tiga.Graph`` built once in Rust, which every
  ``tiga.nn`` layer takes in place of ``edge_index`` (no graph is built in
  the training step).

So ``out = model(batch.x, batch.edge_index)[:batch.batch_size]`` is the
usual PyG loop. Arrays are torch tensors when the graph was built from a
torch tensor or ``input_nodes``/``x`` is one, else NumPy.
"""

from __future__ import annotations

import numpy as np

from . import _tiga
from ._convert import as_caller, index_numpy, is_torch, to_numpy
from .errors import InputError
from .graph import Graph


class Batch:
    """One mini-batch (see the module doc)."""

    def __init__(self, raw, torch_out: bool, x=None, y=None, features=None):
        self._raw = raw
        self._torch = torch_out
        self.batch_size = raw.batch_size
        self.sample_seed = raw.sample_seed
        n_id = raw.n_id
        hops = [raw.hop(k) for k in range(raw.num_hops)]
        ei = np.concatenate([h[0] for h in hops], axis=1) if hops else np.zeros((2, 0), dtype=np.int64)
        eid = np.concatenate([h[1] for h in hops]) if hops else np.zeros(0, dtype=np.int64)
        sampled, seen = [self.batch_size], self.batch_size
        for h, _ in hops:
            # New nodes of a hop follow those known before it, in order.
            end = max(seen, int(h[0].max()) + 1) if h.shape[1] else seen
            sampled.append(end - seen)
            seen = end
        self.num_sampled_nodes = sampled
        self.num_sampled_edges = [h[0].shape[1] for h in hops]
        self.n_id = as_caller(n_id, torch_out)
        self.edge_index = as_caller(ei, torch_out)
        self.e_id = as_caller(eid, torch_out)
        self.edge_index_per_hop = [as_caller(h[0], torch_out) for h in hops]
        self.graph = Graph(raw.graph(), torch_out)
        self.x = _rows(x, n_id, torch_out)
        self.y = _rows(y, n_id, torch_out)
        self.features = features or {}

    @property
    def num_nodes(self) -> int:
        return len(self.n_id)

    def __repr__(self) -> str:
        return f"Batch(num_nodes={self.num_nodes}, batch_size={self.batch_size}, num_edges={self.edge_index.shape[1]}, num_sampled_nodes={self.num_sampled_nodes})"


def _rows(a, n_id, torch_out):
    if a is None:
        return None
    if is_torch(a):
        import torch

        return a[torch.from_numpy(n_id)]
    return as_caller(np.asarray(a)[n_id], torch_out)


def _fanouts(num_neighbors):
    try:
        fanouts = [int(f) for f in num_neighbors]
    except TypeError:
        raise InputError(f"num_neighbors: expected a list of counts per hop, got {num_neighbors!r}") from None
    if not fanouts:
        raise InputError("num_neighbors: give at least one hop")
    for f in fanouts:
        if f < -1:
            raise InputError(f"num_neighbors: {f} is not a count (a number >= 0, or -1 for every edge)")
    return fanouts


def _input_nodes(input_nodes, num_nodes):
    """Seeds as int64 ids: all nodes, ids, or a boolean mask (PyG's forms)."""
    if input_nodes is None:
        return np.arange(num_nodes, dtype=np.int64)
    a = to_numpy(input_nodes, "input_nodes")
    a = np.asarray(a)
    if a.dtype == np.bool_:
        if a.shape != (num_nodes,):
            raise InputError(f"input_nodes: a mask of shape {list(a.shape)} for {num_nodes} nodes")
        return np.flatnonzero(a).astype(np.int64)
    a = index_numpy(a, "input_nodes")
    if a.ndim != 1:
        raise InputError(f"input_nodes: expected one-dimensional ids, got shape {list(a.shape)}")
    bad = np.flatnonzero((a < 0) | (a >= num_nodes))
    if bad.size:
        raise InputError(f"input_nodes[{bad[0]}] = {a[bad[0]]} is not a node of the graph (it has {num_nodes} nodes)")
    return a


def _check_batch_size(batch_size):
    if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise InputError(f"batch_size: {batch_size!r} is not a positive count")
    return int(batch_size)


class NeighborLoader:
    """PyG's ``NeighborLoader`` over a ``tiga.Graph`` (or an ``edge_index``):
    ``num_neighbors`` per hop (-1: every edge), ``batch_size`` seeds a batch
    from ``input_nodes`` (ids or a boolean mask; default every node),
    ``shuffle`` with ``seed``; ``x``/``y`` gathered per batch; ``weights``
    (float, one per edge) samples edges weighted. Iterating the loader runs
    the next epoch; ``epoch(e)`` runs epoch ``e``."""

    def __init__(self, graph, num_neighbors, batch_size: int = 1, input_nodes=None, shuffle: bool = False, seed: int = 0, drop_last: bool = False, x=None, y=None, weights=None):
        if not isinstance(graph, Graph):
            n = None if x is None else int(x.shape[0])
            graph = Graph.from_edge_index(graph, n)
        self.graph = graph
        self.num_neighbors = _fanouts(num_neighbors)
        self.batch_size = _check_batch_size(batch_size)
        n = graph.num_dst
        for name, a in (("x", x), ("y", y)):
            if a is not None and a.shape[0] != n:
                raise InputError(f"{name}: {a.shape[0]} rows for a graph of {n} nodes")
        self._torch = graph._torch or is_torch(input_nodes) or is_torch(x)
        self.input_nodes = _input_nodes(input_nodes, n)
        self.shuffle, self.seed, self.drop_last = bool(shuffle), int(seed), bool(drop_last)
        self.x, self.y = x, y
        self.weights = None
        if weights is not None:
            w = np.ascontiguousarray(to_numpy(weights, "weights"), dtype=np.float64)
            if w.shape != (graph.num_edges,):
                raise InputError(f"weights: shape {list(w.shape)}; expected [{graph.num_edges}] (one per edge, in the graph's edge order)")
            self.weights = w
        self._next_epoch = 0

    def __len__(self) -> int:
        n = len(self.input_nodes)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def batch_seeds(self, epoch: int):
        """The seeds of epoch ``epoch``'s batches, in order."""
        n = len(self.input_nodes)
        order = _tiga.epoch_order(n, self.seed, epoch) if self.shuffle else np.arange(n)
        seeds = self.input_nodes[order]
        return [seeds[i * self.batch_size : (i + 1) * self.batch_size] for i in range(len(self))]

    def epoch(self, epoch: int):
        """Epoch ``epoch``'s batches (sampled with seed ``seed + epoch``)."""
        sample_seed = (self.seed + epoch) % (1 << 64)
        for seeds in self.batch_seeds(epoch):
            raw = _tiga.sample(self.graph._g, np.ascontiguousarray(seeds), self.num_neighbors, sample_seed, self.weights)
            yield Batch(raw, self._torch, self.x, self.y)

    def __iter__(self):
        e = self._next_epoch
        self._next_epoch += 1
        return self.epoch(e)


class RemoteNeighborLoader:
    """``NeighborLoader`` through a graph store: ``addresses`` are the
    ``host:port`` of every ``tigac serve`` of one graph (or a
    ``_tiga.RemoteDataset`` already open). Seeds are ``input_nodes`` (global
    ids or a mask; default: every node); ``node_features`` names store
    features gathered for each batch (``batch.features``), ``x``/``y`` the
    ones that become ``batch.x``/``batch.y``. Batches are made ``prefetch``
    ahead, in the background. ``close()`` releases the servers' state (so
    does leaving a ``with`` block)."""

    def __init__(self, addresses, num_neighbors, batch_size: int = 1, input_nodes=None, shuffle: bool = False, seed: int = 0, drop_last: bool = False, node_features=(), x=None, y=None, prefetch: int = 4, token=None, timeout: float = 30.0, torch_out=None):
        if isinstance(addresses, _tiga.RemoteDataset):
            self.dataset = addresses
        else:
            if isinstance(addresses, str):
                addresses = [addresses]
            self.dataset = _tiga.RemoteDataset(list(addresses), token, timeout)
        self.num_neighbors = _fanouts(num_neighbors)
        self.batch_size = _check_batch_size(batch_size)
        if not isinstance(prefetch, int) or prefetch < 1:
            raise InputError(f"prefetch: {prefetch!r} is not a positive count")
        names = list(node_features)
        for name in (x, y):
            if name is not None and name not in names:
                names.append(name)
        self.x_name, self.y_name, self.node_features = x, y, names
        self.input_nodes = _input_nodes(input_nodes, self.dataset.num_nodes)
        self._torch = is_torch(input_nodes) if torch_out is None else bool(torch_out)
        self._loader = _tiga.StoreLoader(self.dataset, self.input_nodes, self.num_neighbors, self.batch_size, bool(shuffle), int(seed), bool(drop_last), prefetch, names)
        self._next_epoch = 0

    def __len__(self) -> int:
        return len(self._loader)

    def epoch(self, epoch: int):
        for raw in self._loader.epoch(epoch):
            feats = {k: as_caller(v, self._torch) for k, v in raw.node_features().items()}
            b = Batch(raw, self._torch, features=feats)
            b.x = feats.get(self.x_name) if self.x_name else None
            b.y = feats.get(self.y_name) if self.y_name else None
            yield b

    def __iter__(self):
        e = self._next_epoch
        self._next_epoch += 1
        return self.epoch(e)

    def close(self):
        self._loader.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


__all__ = ["Batch", "NeighborLoader", "RemoteNeighborLoader"]
