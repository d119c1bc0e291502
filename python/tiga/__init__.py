"""tiga: message-passing graph kernels, compiled, called from Python.

    import numpy as np, tiga
    m = tiga.load("kernels.rs")              # a kernel file or a `tigac compile` artifact
    g = tiga.Graph.from_edge_index(edge_index, num_nodes)
    out = m["VecSum"](g, src={"h": h})       # {"out": array}

Arguments are NumPy arrays (float32, float64 or float16) or torch tensors;
NumPy in, NumPy out; torch in, torch out. C-contiguous CPU arrays are read
in place, without a copy; any other layout is made contiguous once (a copy)
before the call. The GIL is released while a kernel runs. For gradients
through PyTorch's autograd, see ``tiga.torch.apply``.
"""

from __future__ import annotations

from . import _tiga
from ._tiga import Schedule, Tape
from .graph import Graph
from .errors import (
    ExecError,
    FileError,
    GraphError,
    InputError,
    InternalError,
    KernelError,
    StoreError,
    TigaError,
    UnsupportedError,
)
from .graph_ops import add_remaining_self_loops, add_self_loops, degree, gcn_norm
from .kernels import Kernel, Kernels, load, load_source
from . import loader

_gnn = None


def __getattr__(name):
    # `tiga.gnn`, the kernels the package ships, compiled on first use.
    global _gnn
    if name == "gnn":
        if _gnn is None:
            _gnn = load_source(_tiga.gnn_source(), origin="tiga.gnn")
        return _gnn
    raise AttributeError(f"module 'tiga' has no attribute {name!r}")


__all__ = [
    "Graph",
    "Schedule",
    "Tape",
    "Kernel",
    "Kernels",
    "load",
    "load_source",
    "degree",
    "add_self_loops",
    "add_remaining_self_loops",
    "gcn_norm",
    "TigaError",
    "KernelError",
    "InputError",
    "GraphError",
    "FileError",
    "UnsupportedError",
    "ExecError",
    "StoreError",
    "InternalError",
    "loader",
]
