"""Kernels from a kernel file or a ``tigac compile`` artifact, called on
NumPy arrays or torch tensors."""

from __future__ import annotations

import os

from . import _tiga
from ._convert import field_dicts, is_torch, outputs_as, to_numpy
from .errors import InputError, KernelError
from .graph import Graph


class UnknownKernelError(KernelError, KeyError, AttributeError):
    """No kernel of that name in the file (the message lists those there are)."""

    def __str__(self):
        return str(self.args[0]) if self.args else ""


def _graph(g):
    if isinstance(g, Graph):
        return g._g
    raise InputError(f"graph: expected a tiga.Graph, got {type(g).__name__}")


def _schedule(s):
    if s is None or isinstance(s, _tiga.Schedule):
        return s
    if isinstance(s, dict):
        return _tiga.Schedule(**s)
    raise InputError(f"schedule: expected a tiga.Schedule or a dict of its settings, got {type(s).__name__}")


class Kernel:
    """One compiled kernel. Call it as ``k(graph, src={...}, dst={...},
    edge={...}, params={...}, schedule=...)``: a dict of output name to array,
    NumPy for NumPy inputs, torch for torch inputs."""

    __slots__ = ("_k",)

    def __init__(self, raw):
        self._k = raw

    @property
    def name(self) -> str:
        return self._k.name

    @property
    def outputs(self) -> list:
        return self._k.outputs

    @property
    def fields(self) -> list:
        """``(role, name, kind)`` per declared field, ``kind`` one of scalar,
        vector, matrix."""
        return self._k.fields

    def __call__(self, graph, src=None, dst=None, edge=None, params=None, schedule=None) -> dict:
        (s, d, e, p), torch_in = field_dicts(src, dst, edge, params)
        out = self._k.run(_graph(graph), s, d, e, p, _schedule(schedule))
        return outputs_as(out, torch_in)

    def forward(self, graph, src=None, dst=None, edge=None, params=None, schedule=None):
        """The outputs and a ``Tape`` of what the backward needs (residuals,
        when the schedule keeps them)."""
        (s, d, e, p), torch_in = field_dicts(src, dst, edge, params)
        out, tape = self._k.forward(_graph(graph), s, d, e, p, _schedule(schedule))
        return outputs_as(out, torch_in), tape

    def vjp(self, graph, cotangents, src=None, dst=None, edge=None, params=None, schedule=None, tape=None, wrt=None) -> dict:
        """Gradients given each output's cotangent: ``{"src": {name: grad},
        "dst": {...}, "edge": {...}, "params": {...}}``, for the ``(role,
        name)`` pairs in ``wrt`` (default: every field)."""
        (s, d, e, p), torch_in = field_dicts(src, dst, edge, params)
        if not isinstance(cotangents, dict):
            raise InputError("cotangents: expected a dict of output name to array")
        torch_in = torch_in or any(is_torch(v) for v in cotangents.values())
        cots = {n: to_numpy(v, f"the cotangent of `{n}`") for n, v in cotangents.items()}
        g = self._k.vjp(_graph(graph), cots, s, d, e, p, _schedule(schedule), tape, None if wrt is None else list(wrt))
        return {role: outputs_as(grads, torch_in) for role, grads in g.items()}

    def explain(self) -> str:
        """What the compiler did with this kernel (``tigac explain``)."""
        return self._k.explain()

    def __repr__(self) -> str:
        return repr(self._k)


class Kernels:
    """The kernels of one file, by name: ``m["VecSum"]`` or ``m.VecSum``."""

    def __init__(self, kernels, origin: str):
        self._by_name = {k.name: Kernel(k) for k in kernels}
        self._origin = origin

    def _missing(self, name):
        return UnknownKernelError(f"no kernel named `{name}` in {self._origin} (it has: {', '.join(self._by_name)})")

    def __getitem__(self, name: str) -> Kernel:
        try:
            return self._by_name[name]
        except KeyError:
            raise self._missing(name) from None

    def __getattr__(self, name: str) -> Kernel:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._by_name[name]
        except KeyError:
            raise self._missing(name) from None

    def __contains__(self, name) -> bool:
        return name in self._by_name

    def __iter__(self):
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def names(self) -> list:
        return list(self._by_name)

    def __repr__(self) -> str:
        return f"Kernels({self._origin}: {', '.join(self._by_name)})"


def load(path) -> Kernels:
    """Every kernel of a kernel file or a ``tigac compile`` artifact."""
    p = os.fspath(path)
    return Kernels(_tiga.load(p), p)


def load_source(source: str, origin: str = "<source>") -> Kernels:
    """Every kernel of a kernel file's text."""
    return Kernels(_tiga.load_source(source, origin), origin)
