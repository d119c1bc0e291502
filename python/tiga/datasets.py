"""Graphs to train on offline: Zachary's karate club (from networkx, which
ships it) and a planted-partition graph (a stochastic block model) with
noisy features, generated from a seed. Each is a ``Dataset`` of NumPy
arrays (``torch()`` converts it)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import UnsupportedError


@dataclass
class Dataset:
    """``edge_index`` ``[2, E]`` int64 (both directions of each undirected
    edge), features ``x`` ``[N, F]`` float32, labels ``y`` ``[N]`` int64, and
    boolean train / test masks."""

    edge_index: np.ndarray
    x: np.ndarray
    y: np.ndarray
    train_mask: np.ndarray
    test_mask: np.ndarray
    num_classes: int

    @property
    def num_nodes(self) -> int:
        return self.x.shape[0]

    def torch(self) -> "Dataset":
        import torch

        return Dataset(*(torch.from_numpy(a) for a in (self.edge_index, self.x, self.y, self.train_mask, self.test_mask)), self.num_classes)


def _split(n, rng, train_fraction):
    perm = rng.permutation(n)
    train = np.zeros(n, dtype=bool)
    train[perm[: max(1, int(train_fraction * n))]] = True
    return train, ~train


def _both_directions(src, dst):
    return np.stack([np.concatenate([src, dst]), np.concatenate([dst, src])]).astype(np.int64)


def karate_club(seed: int = 0, train_fraction: float = 0.2) -> Dataset:
    """Zachary's karate club (34 members, 78 ties; label: the club each
    joined), identity features, a random ``train_fraction`` of the members
    labelled for training."""
    try:
        import networkx as nx
    except ImportError as e:
        raise UnsupportedError("karate_club needs networkx (pip install networkx), which ships the graph") from e
    g = nx.karate_club_graph()
    src, dst = (np.array(a, dtype=np.int64) for a in zip(*g.edges()))
    y = np.array([0 if g.nodes[i]["club"] == "Mr. Hi" else 1 for i in g.nodes], dtype=np.int64)
    n = g.number_of_nodes()
    train, test = _split(n, np.random.default_rng(seed), train_fraction)
    return Dataset(_both_directions(src, dst), np.eye(n, dtype=np.float32), y, train, test, 2)


def sbm(num_nodes: int = 2000, num_classes: int = 4, avg_degree: float = 10.0, p_in_share: float = 0.8, num_features: int = 32, noise: float = 5.0, seed: int = 0, train_fraction: float = 0.1) -> Dataset:
    """A planted partition: ``num_classes`` equal blocks, each node with
    about ``avg_degree`` neighbours of which a share ``p_in_share`` lie in its
    own block; features are a per-class mean vector (unit entries) plus
    Gaussian noise of standard deviation ``noise``, so that a node's own
    features classify it poorly and its neighbourhood's well."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, num_classes, size=num_nodes).astype(np.int64)
    m = int(num_nodes * avg_degree / 2)
    src = rng.integers(0, num_nodes, size=m)
    same = rng.random(m) < p_in_share
    # A partner in the same block for `same` edges, anywhere else otherwise.
    by_class = [np.flatnonzero(y == c) for c in range(num_classes)]
    dst = rng.integers(0, num_nodes, size=m)
    for c in range(num_classes):
        pick = same & (y[src] == c)
        dst[pick] = by_class[c][rng.integers(0, len(by_class[c]), size=int(pick.sum()))]
    keep = src != dst
    src, dst = src[keep], dst[keep]
    means = rng.standard_normal((num_classes, num_features)).astype(np.float32)
    x = means[y] + noise * rng.standard_normal((num_nodes, num_features)).astype(np.float32)
    train, test = _split(num_nodes, rng, train_fraction)
    return Dataset(_both_directions(src, dst), x.astype(np.float32), y, train, test, num_classes)


__all__ = ["Dataset", "karate_club", "sbm"]
