"""The graph functions a PyTorch Geometric user reaches for, with PyG's
signatures and results (the same edge order, the same weights): ``degree``,
``add_self_loops``, ``add_remaining_self_loops`` and ``gcn_norm`` on
``edge_index`` arrays. Torch in, torch out; NumPy in, NumPy out. Weights
are computed in the dtype asked for (default: that of ``edge_weight``, else
float32), as PyG does."""

from __future__ import annotations

import numpy as np

from ._convert import as_caller, index_numpy, is_torch, to_numpy
from .errors import InputError


def _np_dtype(dtype, default=np.float32):
    if dtype is None:
        return np.dtype(default)
    if type(dtype).__module__.startswith("torch"):
        import torch

        return torch.empty((), dtype=dtype).numpy().dtype
    return np.dtype(dtype)


def _num_nodes(ei, num_nodes):
    if num_nodes is not None:
        return int(num_nodes)
    return int(ei.max()) + 1 if ei.size else 0


def _check_edge_index(ei):
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise InputError(f"edge_index: expected shape [2, E], got {list(ei.shape)}")


def degree(index, num_nodes=None, dtype=None):
    """How often each node id occurs in ``index`` (PyG's ``degree``): the
    in-degree for ``edge_index[1]``; float32 unless ``dtype`` says."""
    t = is_torch(index)
    idx = index_numpy(index, "index")
    if idx.ndim != 1:
        raise InputError(f"index: expected a one-dimensional array, got shape {list(idx.shape)}")
    n = _num_nodes(idx, num_nodes)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise InputError(f"index: ids must lie in [0, {n})")
    out = np.bincount(idx, minlength=n).astype(_np_dtype(dtype))
    return as_caller(out, t)


def _attr(edge_attr, what="edge_attr"):
    if edge_attr is None:
        return None
    a = to_numpy(edge_attr, what)
    if not isinstance(a, np.ndarray):
        raise InputError(f"{what}: expected an array")
    return a


def add_self_loops(edge_index, edge_attr=None, fill_value=None, num_nodes=None):
    """PyG's ``add_self_loops``: a loop ``i -> i`` for every node appended
    after the edges; the loops' ``edge_attr`` is ``fill_value`` (default 1).
    Returns ``(edge_index, edge_attr)``."""
    t = is_torch(edge_index)
    ei = index_numpy(edge_index, "edge_index")
    _check_edge_index(ei)
    n = _num_nodes(ei, num_nodes)
    loops = np.arange(n, dtype=np.int64)
    out = np.concatenate([ei, np.stack([loops, loops])], axis=1)
    a = _attr(edge_attr)
    if a is not None:
        if a.shape[0] != ei.shape[1]:
            raise InputError(f"edge_attr: {a.shape[0]} rows for {ei.shape[1]} edges")
        fill = np.full((n,) + a.shape[1:], 1.0 if fill_value is None else fill_value, dtype=a.dtype)
        a = np.concatenate([a, fill], axis=0)
    return as_caller(out, t), as_caller(a, t)


def add_remaining_self_loops(edge_index, edge_attr=None, fill_value=None, num_nodes=None):
    """PyG's ``add_remaining_self_loops``: the edges that are not loops, in
    order, then one loop per node; a node that had a loop keeps its
    ``edge_attr`` (the last one given), the others get ``fill_value``
    (default 1). Returns ``(edge_index, edge_attr)``."""
    t = is_torch(edge_index)
    ei = index_numpy(edge_index, "edge_index")
    _check_edge_index(ei)
    n = _num_nodes(ei, num_nodes)
    mask = ei[0] != ei[1]
    loops = np.arange(n, dtype=np.int64)
    out = np.concatenate([ei[:, mask], np.stack([loops, loops])], axis=1)
    a = _attr(edge_attr)
    if a is not None:
        if a.shape[0] != ei.shape[1]:
            raise InputError(f"edge_attr: {a.shape[0]} rows for {ei.shape[1]} edges")
        loop_attr = np.full((n,) + a.shape[1:], 1.0 if fill_value is None else fill_value, dtype=a.dtype)
        inv = ~mask
        loop_attr[ei[0][inv]] = a[inv]
        a = np.concatenate([a[mask], loop_attr], axis=0)
    return as_caller(out, t), as_caller(a, t)


def gcn_norm(edge_index, edge_weight=None, num_nodes=None, improved=False, add_self_loops=True, flow="source_to_target", dtype=None):
    """PyG's ``gcn_norm`` on an ``edge_index``: remaining self loops added
    (weight 2 with ``improved``, where edge weights are given), then each
    edge ``j -> i`` weighted ``deg(j)^-1/2 * w * deg(i)^-1/2``, ``deg`` the
    weighted in-degree (out-degree for ``flow="target_to_source"``), 0 where
    a degree is 0. Returns ``(edge_index, edge_weight)``."""
    if flow not in ("source_to_target", "target_to_source"):
        raise InputError(f"flow `{flow}`: expected source_to_target or target_to_source")
    t = is_torch(edge_index)
    ei = index_numpy(edge_index, "edge_index")
    _check_edge_index(ei)
    n = _num_nodes(ei, num_nodes)
    w = _attr(edge_weight, "edge_weight")
    if w is not None and w.ndim != 1:
        raise InputError(f"edge_weight: expected shape [E], got {list(w.shape)}")
    if w is not None and dtype is not None:
        w = w.astype(_np_dtype(dtype))
    if add_self_loops:
        ei, w = add_remaining_self_loops(ei, w, 2.0 if improved else 1.0, n)
    if w is None:
        w = np.ones(ei.shape[1], dtype=_np_dtype(dtype))
    row, col = ei[0], ei[1]
    idx = col if flow == "source_to_target" else row
    deg = np.zeros(n, dtype=w.dtype)
    np.add.at(deg, idx, w)
    with np.errstate(divide="ignore"):
        inv = deg ** -0.5
    inv[np.isinf(inv)] = 0
    w = inv[row] * w * inv[col]
    return as_caller(ei, t), as_caller(w, t)


__all__ = ["degree", "add_self_loops", "add_remaining_self_loops", "gcn_norm"]
