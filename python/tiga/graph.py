"""``tiga.Graph``: the graph a kernel runs over, in memory or paged from a
``.gfg`` file. Edges ``j -> i`` go from a source ``j`` to a destination
``i`` and keep the order the caller gave them (the order edge fields
follow)."""

from __future__ import annotations

import os

from . import _tiga
from ._convert import as_caller, index_numpy, is_torch
from .errors import InputError


class Graph:
    """A graph; build one with ``from_edge_index``, ``from_csr`` or
    ``from_gfg``."""

    __slots__ = ("_g", "_torch")

    def __init__(self, raw, torch_made: bool = False):
        if not isinstance(raw, _tiga.Graph):
            raise TypeError("build a Graph with Graph.from_edge_index, Graph.from_csr or Graph.from_gfg")
        self._g = raw
        self._torch = torch_made

    @staticmethod
    def from_edge_index(edge_index, num_nodes=None, size=None) -> "Graph":
        """PyG's convention: an integer ``[2, E]`` tensor or array, row 0 the
        sources, row 1 the destinations, edges in column order; ``num_nodes``
        defaults to the largest id plus one. ``size=(num_src, num_dst)``
        (instead of ``num_nodes``) makes a bipartite graph, as PyG's
        ``size`` argument: a sampled block's layer with fewer destinations
        than sources. An id that is negative or not below its side's node
        count is a ``GraphError`` naming the edge."""
        ei = index_numpy(edge_index, "edge_index")
        if size is None:
            return Graph(_tiga.Graph.from_edge_index(ei, num_nodes), is_torch(edge_index))
        if num_nodes is not None:
            raise InputError("Graph.from_edge_index: give num_nodes or size, not both")
        try:
            num_src, num_dst = (int(v) for v in size)
        except (TypeError, ValueError):
            raise InputError(f"size: expected (num_src, num_dst), got {size!r}") from None
        if num_src < 0 or num_dst < 0:
            raise InputError(f"size: node counts are not negative, got {size!r}")
        return Graph(_tiga.Graph.from_edge_index(ei, num_src, num_dst), is_torch(edge_index))

    @staticmethod
    def from_csr(indptr, indices, num_src=None) -> "Graph":
        """A CSR by destination row: ``indptr`` (``[num_dst + 1]``) delimits
        each destination's edges in ``indices`` (their sources), edges in CSR
        order; ``num_src`` defaults to the number of destinations."""
        p = index_numpy(indptr, "indptr")
        i = index_numpy(indices, "indices")
        return Graph(_tiga.Graph.from_csr(p, i, num_src), is_torch(indptr))

    @staticmethod
    def from_gfg(path) -> "Graph":
        """A ``.gfg`` file (``tigac convert``), read in pages as kernels run
        over it; fields a call does not pass come from the file."""
        return Graph(_tiga.Graph.from_gfg(os.fspath(path)))

    @property
    def num_nodes(self) -> int:
        return self._g.num_nodes

    @property
    def num_src(self) -> int:
        return self._g.num_src

    @property
    def num_dst(self) -> int:
        return self._g.num_dst

    @property
    def num_edges(self) -> int:
        return self._g.num_edges

    @property
    def is_paged(self) -> bool:
        return self._g.is_paged

    def in_degree(self):
        """Each destination's number of in-edges (int64)."""
        return as_caller(self._g.in_degree(), self._torch)

    def out_degree(self):
        """Each source's number of out-edges (int64)."""
        return as_caller(self._g.out_degree(), self._torch)

    def edge_index(self):
        """The edges as ``[2, E]`` int64, in the caller's order."""
        return as_caller(self._g.edge_index(), self._torch)

    def with_heads(self, heads: int) -> "Graph":
        """The graph of ``heads`` interleaved copies of this one, so that a
        kernel runs once per head in one call (multi-head attention): node
        ``(v, h)`` is ``v * heads + h`` and edge ``(e, h)`` is
        ``e * heads + h``. A ``[N, H, F]`` field (PyG's multi-head layout)
        is passed as its ``[N * H, F]`` view, an edge field ``[E, H]`` as
        ``[E * H]``, without a copy; outputs come back ``[N * H, ...]``
        (``.view(N, H, ...)`` gives the heads). A softmax normalises over
        each head's own in-edges; a parameter's gradient is summed over the
        heads. The CSR is ``heads`` times this graph's; a paged graph has no
        heads (an ``UnsupportedError`` says so)."""
        if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1:
            raise InputError(f"with_heads: heads is a positive int, got {heads!r}")
        return Graph(self._g.with_heads(heads), self._torch)

    def __repr__(self) -> str:
        return repr(self._g)
