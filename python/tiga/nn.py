"""Graph layers as ``torch.nn.Module``s with PyTorch Geometric's
constructor arguments and ``forward(x, edge_index)``: the message passing
runs in tiga kernels (through ``tiga.torch.apply``, so autograd reaches
them), the dense parts in torch. Parameters are ``torch.nn.Parameter``s
named as PyG names them, so ``torch.optim`` trains them and
``conv.load_state_dict(pyg_conv.state_dict())`` loads a PyG layer's
weights.

Each layer documents the PyG arguments it supports; any other argument, or
a supported one with a value it does not implement, is refused with
``tiga.UnsupportedError`` naming it, never ignored.

The graph a layer runs on is built from ``edge_index`` (and, where the
layer adds self loops or normalizes, from what PyG builds from it) once and
kept while the same ``edge_index`` tensor comes back unchanged (same
storage, shape and version counter), as a training loop passes it. Every
layer also takes a ``tiga.Graph`` in place of ``edge_index`` (a sampled
batch's ``batch.graph``, built by the loader): ``SAGEConv`` and ``GINConv``
run on it as it is, ``GCNConv`` and ``GATConv`` build their normalized or
self-looped graph from its edges once per graph object.
"""

from __future__ import annotations


import torch
from torch import Tensor
from torch.nn import Linear, Module, Parameter

from . import _tiga
from . import torch as tiga_torch
from .errors import InputError, UnsupportedError
from .graph import Graph
from .graph_ops import add_remaining_self_loops, gcn_norm

_layer_kernels = None
# GAT's softmax keeps its row statistics (max, denominator, weighted sum:
# 2 + F values per row) from the forward, so its backward does not refold
# every edge: measured 145 ms against 215 ms for a 4-head forward and
# backward on the 100k-node SBM graph.
_SAVED = None
_gat_kernels = {}


def _kernels():
    global _layer_kernels
    if _layer_kernels is None:
        from .kernels import load_source

        _layer_kernels = load_source(_tiga.layer_source(), origin="tiga.nn kernels")
    return _layer_kernels


def _saved():
    global _SAVED
    if _SAVED is None:
        _SAVED = _tiga.Schedule(residuals=True)
    return _SAVED


def _gat_kernel(slope: float):
    """GatAttention with LeakyReLU slope ``slope`` (the shipped kernel's is 0.2;
    another slope compiles the same kernel text with that constant)."""
    import tiga

    if slope == 0.2:
        return tiga.gnn.GatAttention
    if slope not in _gat_kernels:
        from .kernels import load_source

        src = _tiga.gnn_source()
        start = src.index("#[message_passing(reduce = softmax)]")
        end = src.index("/// A user monoid", start)
        text = src[start:end].replace("leaky_relu(src.a_src + dst.a_dst, 0.2)", f"leaky_relu(src.a_src + dst.a_dst, {float(slope)!r})")
        _gat_kernels[slope] = load_source(text, origin=f"GatAttention(slope={slope})").GatAttention
    return _gat_kernels[slope]


def _refuse(layer: str, kwargs: dict, **fixed):
    """Refuse unknown arguments and unsupported values of known ones, by name."""
    for k in kwargs:
        raise UnsupportedError(f"{layer}: argument `{k}` is not supported by tiga.nn.{layer}")
    for k, (value, ok, what) in fixed.items():
        if not ok:
            raise UnsupportedError(f"{layer}: {k}={value!r} is not supported ({what})")


def _glorot(w: Tensor):
    if w is not None:
        torch.nn.init.xavier_uniform_(w)


class _GraphCache:
    """The graph (and edge weights) built from the last ``edge_index``."""

    __slots__ = ("key", "value")

    def __init__(self):
        self.key = None
        self.value = None

    @staticmethod
    def key_of(edge_index: Tensor, *extra):
        return (edge_index.data_ptr(), tuple(edge_index.shape), edge_index._version, edge_index.dtype) + extra

    def get(self, edge_index, extra, build):
        if isinstance(edge_index, Graph):
            # The graph object itself (compared by identity) is the key.
            key = (edge_index,) + tuple(extra)
        elif isinstance(edge_index, Tensor):
            key = self.key_of(edge_index, *extra)
        else:
            raise InputError(f"edge_index: expected a torch tensor or a tiga.Graph, got {type(edge_index).__name__}")
        if self.key != key:
            self.value = build()
            self.key = key
        return self.value


def _edge_index(edge_index) -> Tensor:
    """PyG's ``edge_index`` of a ``tiga.Graph`` (or the tensor itself)."""
    if isinstance(edge_index, Graph):
        return torch.as_tensor(edge_index.edge_index())
    return edge_index


def _graph(edge_index, n, num_dst=None) -> Graph:
    """The graph a plain aggregation runs on: a given ``tiga.Graph`` as it
    is; else ``n`` nodes, or ``n`` sources and ``num_dst`` destinations."""
    if isinstance(edge_index, Graph):
        return edge_index
    if num_dst is None or num_dst == n:
        return Graph.from_edge_index(edge_index, n)
    return Graph.from_edge_index(edge_index, size=(n, num_dst))


def _check_x(layer, x, in_channels):
    if not isinstance(x, Tensor):
        raise InputError(f"{layer}: x must be a torch tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise InputError(f"{layer}: x must be [num_nodes, {in_channels}], got {list(x.shape)}")
    if in_channels > 0 and x.shape[1] != in_channels:
        raise InputError(f"{layer}: x has {x.shape[1]} channels, the layer was built for {in_channels}")


class GCNConv(Module):
    """PyG's ``GCNConv``: ``out = Â (x Wᵀ) + b``, ``Â`` the symmetric GCN
    normalization (``tiga.gcn_norm``: remaining self loops, weights
    ``deg^-1/2 · w · deg^-1/2``). Supported: ``in_channels``,
    ``out_channels``, ``improved``, ``cached``, ``add_self_loops``,
    ``normalize``, ``bias``; ``forward(x, edge_index, edge_weight=None)``."""

    def __init__(self, in_channels: int, out_channels: int, improved: bool = False, cached: bool = False, add_self_loops=None, normalize: bool = True, bias: bool = True, **kwargs):
        super().__init__()
        _refuse("GCNConv", kwargs, in_channels=(in_channels, isinstance(in_channels, int) and in_channels > 0, "a positive number of channels; lazy -1 is not supported"))
        if add_self_loops is None:
            add_self_loops = normalize
        if add_self_loops and not normalize:
            raise UnsupportedError("GCNConv: add_self_loops=True with normalize=False is not supported (PyG refuses it too)")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.improved, self.cached, self.add_self_loops, self.normalize = improved, cached, add_self_loops, normalize
        self.lin = Linear(in_channels, out_channels, bias=False)
        self.bias = Parameter(torch.empty(out_channels)) if bias else None
        self._graphs = _GraphCache()
        self.reset_parameters()

    def reset_parameters(self):
        _glorot(self.lin.weight)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)
        self._graphs = _GraphCache()

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor = None) -> Tensor:
        _check_x("GCNConv", x, self.in_channels)
        n = x.shape[0]

        def build():
            ei, w = _edge_index(edge_index), edge_weight
            if self.normalize:
                ei, w = gcn_norm(ei, w, n, self.improved, self.add_self_loops, dtype=x.dtype)
            if w is None:
                w = torch.ones(ei.shape[1], dtype=x.dtype)
            return Graph.from_edge_index(ei, n), w.to(x.dtype).contiguous()

        wkey = () if edge_weight is None else (edge_weight.data_ptr(), edge_weight._version)
        if self.cached or edge_weight is None or not edge_weight.requires_grad:
            g, w = self._graphs.get(edge_index, (n, x.dtype) + wkey, build)
        else:
            g, w = build()
        h = self.lin(x)
        out = tiga_torch.apply(_kernels().WeightedSum, g, src={"h": h}, edge={"w": w})["out"]
        if self.bias is not None:
            out = out + self.bias
        return out

    def __repr__(self):
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels})"


class SAGEConv(Module):
    """PyG's ``SAGEConv``: ``out = lin_l(mean_{j→i} x_j) + lin_r(x_i)``.
    Supported: ``in_channels``, ``out_channels``, ``aggr`` ("mean", "sum" or
    "add"), ``normalize``, ``root_weight``, ``bias``; ``project=True`` is
    refused."""

    def __init__(self, in_channels: int, out_channels: int, aggr="mean", normalize: bool = False, root_weight: bool = True, project: bool = False, bias: bool = True, **kwargs):
        super().__init__()
        _refuse(
            "SAGEConv",
            kwargs,
            in_channels=(in_channels, isinstance(in_channels, int) and in_channels > 0, "a positive number of channels; bipartite tuples and lazy -1 are not supported"),
            aggr=(aggr, aggr in ("mean", "sum", "add"), "mean, sum or add"),
            project=(project, not project, "no projection"),
        )
        self.in_channels, self.out_channels, self.aggr = in_channels, out_channels, aggr
        self.normalize, self.root_weight = normalize, root_weight
        self.lin_l = Linear(in_channels, out_channels, bias=bias)
        self.lin_r = Linear(in_channels, out_channels, bias=False) if root_weight else None
        self._graphs = _GraphCache()
        self.reset_parameters()

    def reset_parameters(self):
        self.lin_l.reset_parameters()
        if self.lin_r is not None:
            self.lin_r.reset_parameters()

    def forward(self, x, edge_index: Tensor, size=None) -> Tensor:
        """``x`` is ``[N, in_channels]``, or, as in PyG, a pair ``(x_src,
        x_dst)`` for a bipartite layer (a sampled block's: messages from
        ``x_src``'s rows to the ``x_dst`` rows, which the root weight reads):
        the output then has ``x_dst``'s rows only."""
        import tiga

        if isinstance(x, (tuple, list)) and len(x) != 2:
            raise InputError(f"SAGEConv: x as a pair (x_src, x_dst), got {len(x)} items")
        x_src, x_dst = x if isinstance(x, (tuple, list)) else (x, x)
        _check_x("SAGEConv", x_src, self.in_channels)
        _check_x("SAGEConv", x_dst, self.in_channels)
        shape = (x_src.shape[0], x_dst.shape[0])
        if size is not None and tuple(size) != shape:
            raise InputError(f"SAGEConv: size {tuple(size)} does not match x's rows {shape}")
        if isinstance(edge_index, Graph) and (edge_index.num_src, edge_index.num_dst) != shape:
            raise InputError(f"SAGEConv: the graph has {edge_index.num_src} sources and {edge_index.num_dst} destinations, x has rows {shape}")
        g = self._graphs.get(edge_index, shape, lambda: _graph(edge_index, *shape))
        k = tiga.gnn.SageMean if self.aggr == "mean" else tiga.gnn.VecSum
        agg = tiga_torch.apply(k, g, src={"h": x_src})["out"]
        out = self.lin_l(agg)
        if self.lin_r is not None:
            out = out + self.lin_r(x_dst)
        if self.normalize:
            out = torch.nn.functional.normalize(out, p=2.0, dim=-1)
        return out

    def __repr__(self):
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, aggr={self.aggr})"


class GINConv(Module):
    """PyG's ``GINConv``: ``out = nn((1 + eps) · x_i + Σ_{j→i} x_j)``.
    Supported: ``nn``, ``eps``, ``train_eps``."""

    def __init__(self, nn: Module, eps: float = 0.0, train_eps: bool = False, **kwargs):
        super().__init__()
        _refuse("GINConv", kwargs)
        self.nn = nn
        self.initial_eps = eps
        if train_eps:
            self.eps = Parameter(torch.empty(1))
        else:
            self.register_buffer("eps", torch.empty(1))
        self._graphs = _GraphCache()
        self.reset_parameters()

    def reset_parameters(self):
        if hasattr(self.nn, "reset_parameters"):
            self.nn.reset_parameters()
        self.eps.data.fill_(self.initial_eps)

    def forward(self, x: Tensor, edge_index: Tensor, size=None) -> Tensor:
        import tiga

        if size is not None:
            raise UnsupportedError("GINConv: forward(size=...) is not supported")
        _check_x("GINConv", x, 0)
        n = x.shape[0]
        g = self._graphs.get(edge_index, (n,), lambda: _graph(edge_index, n))
        agg = tiga_torch.apply(tiga.gnn.VecSum, g, src={"h": x})["out"]
        return self.nn(agg + (1 + self.eps) * x)

    def __repr__(self):
        return f"{type(self).__name__}(nn={self.nn})"


class GATConv(Module):
    """PyG's ``GATConv``: per head, ``α_ij = softmax_i(LeakyReLU(a_srcᵀ W x_j +
    a_dstᵀ W x_i))`` and ``out_i = Σ_j α_ij W x_j``; heads concatenated (or
    averaged with ``concat=False``), plus a bias. Supported: ``in_channels``,
    ``out_channels``, ``heads``, ``concat``, ``negative_slope``,
    ``add_self_loops`` (PyG's: existing loops removed, one per node added),
    ``bias``; ``dropout`` only 0, no ``edge_dim``, no ``residual``.

    Every head runs in one call of the GatAttention kernel, over the graph
    with heads (``Graph.with_heads``): its softmax normalises per head. The
    forward keeps the softmax's row statistics for the backward
    (``Schedule(residuals=True)``)."""

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, concat: bool = True, negative_slope: float = 0.2, dropout: float = 0.0, add_self_loops: bool = True, edge_dim=None, fill_value="mean", bias: bool = True, residual: bool = False, **kwargs):
        super().__init__()
        _refuse(
            "GATConv",
            kwargs,
            in_channels=(in_channels, isinstance(in_channels, int) and in_channels > 0, "a positive number of channels; bipartite tuples and lazy -1 are not supported"),
            heads=(heads, isinstance(heads, int) and heads >= 1, "at least one head"),
            dropout=(dropout, dropout == 0.0, "attention dropout is not implemented"),
            edge_dim=(edge_dim, edge_dim is None, "edge features are not implemented"),
            residual=(residual, not residual, "no residual connection"),
        )
        self.in_channels, self.out_channels, self.heads, self.concat = in_channels, out_channels, heads, concat
        self.negative_slope, self.add_self_loops = float(negative_slope), add_self_loops
        self.lin = Linear(in_channels, heads * out_channels, bias=False)
        self.att_src = Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = Parameter(torch.empty(1, heads, out_channels))
        size = heads * out_channels if concat else out_channels
        self.bias = Parameter(torch.empty(size)) if bias else None
        self._graphs = _GraphCache()
        self.reset_parameters()

    def reset_parameters(self):
        _glorot(self.lin.weight)
        _glorot(self.att_src)
        _glorot(self.att_dst)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr=None, size=None, return_attention_weights=None) -> Tensor:
        for name, v in (("edge_attr", edge_attr), ("size", size), ("return_attention_weights", return_attention_weights)):
            if v is not None:
                raise UnsupportedError(f"GATConv: forward({name}=...) is not supported")
        _check_x("GATConv", x, self.in_channels)
        n = x.shape[0]

        H, C = self.heads, self.out_channels

        def build():
            if not self.add_self_loops:
                return _graph(edge_index, n).with_heads(H)
            ei = _edge_index(edge_index)
            ei, _ = add_remaining_self_loops(ei[:, ei[0] != ei[1]], None, None, n)
            return Graph.from_edge_index(ei, n).with_heads(H)

        g = self._graphs.get(edge_index, (n, self.add_self_loops, H), build)
        k = _gat_kernel(self.negative_slope)
        xh = self.lin(x).view(n, H, C)
        a_src = (xh * self.att_src).sum(dim=-1)
        a_dst = (xh * self.att_dst).sum(dim=-1)
        # Every head in one call: [N, H, ...] fields are the headed graph's
        # [N * H, ...] ones (views, no copies).
        src = {"h": xh.reshape(n * H, C), "a_src": a_src.reshape(n * H)}
        out = tiga_torch.apply(k, g, src=src, dst={"a_dst": a_dst.reshape(n * H)}, schedule=_saved())["out"].view(n, H, C)
        out = out.reshape(n, H * C) if self.concat else out.mean(dim=1)
        if self.bias is not None:
            out = out + self.bias
        return out

    def __repr__(self):
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


__all__ = ["GCNConv", "SAGEConv", "GINConv", "GATConv"]
