"""tiga's kernels as differentiable PyTorch operations.

``tiga.torch.apply(kernel, graph, src=..., dst=..., edge=..., params=...)``
returns the kernel's outputs as a dict of tensors that autograd tracks:
their backward is the kernel's derived vector-Jacobian product, run by
tiga (with the forward's saved residuals where the schedule keeps them),
and it computes gradients only for the tensors that need them.

Why a ``torch.autograd.Function`` and not ``torch.library.custom_op``: a
kernel's arguments are dicts of named fields whose number, names and
shapes come from the kernel file at run time, while a custom op needs a
fixed schema registered once per operator name, and its autograd formula
would still be this same Python backward. With the Function, one
definition serves every kernel; ``torch.compile`` treats the call as a
graph break and runs it eagerly (correct, not fused).

Double backward (``create_graph=True`` through a tiga kernel) is refused
with ``tiga.UnsupportedError``: the adjoint stages are themselves kernels,
but their own adjoints are not derived yet.
"""

from __future__ import annotations

import numpy as np
import torch as _torch

from ._convert import to_numpy
from .errors import InputError, UnsupportedError
from .kernels import Kernel, _graph, _schedule

_ROLES = ("src", "dst", "edge", "params")


def _field_dicts(spec, tensors, numbers):
    """The four role dicts of NumPy views the extension module reads."""
    dicts = {r: {} for r in _ROLES}
    for (role, name), t in zip(spec, tensors):
        dicts[role][name] = to_numpy(t, f"{role} field `{name}`")
    for name, v in numbers:
        dicts["params"][name] = v
    return dicts


class _Apply(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, kernel, graph, schedule, spec, numbers, *tensors):
        # spec: (role, name) per tensor, in order; numbers: (name, value)
        # scalar parameters given as Python numbers (never differentiated).
        dicts = _field_dicts(spec, tensors, numbers)
        out, tape = kernel._k.forward(graph, dicts["src"], dicts["dst"], dicts["edge"], dicts["params"], schedule)
        ctx.kernel, ctx.graph, ctx.schedule, ctx.spec, ctx.numbers, ctx.tape = kernel, graph, schedule, spec, numbers, tape
        ctx.names = list(out)
        ctx.out_meta = {n: (v.shape, v.dtype) for n, v in out.items()}
        ctx.save_for_backward(*tensors)
        return tuple(_torch.from_numpy(v) for v in out.values())

    @staticmethod
    def backward(ctx, *grads):
        if _torch.is_grad_enabled():
            raise UnsupportedError(
                f"double backward through tiga kernel `{ctx.kernel.name}` (create_graph=True) is not supported: "
                "the adjoint of its adjoint is not derived"
            )
        tensors = ctx.saved_tensors
        wanted = [key for key, need in zip(ctx.spec, ctx.needs_input_grad[5:]) if need]
        none = (None,) * 5
        if not wanted:
            return none + (None,) * len(tensors)
        dicts = _field_dicts(ctx.spec, tensors, ctx.numbers)
        cots = {}
        for name, g in zip(ctx.names, grads):
            shape, dtype = ctx.out_meta[name]
            if g is None:
                # An output autograd did not reach: its cotangent is zero.
                cots[name] = np.zeros(shape, dtype=dtype)
            else:
                cots[name] = to_numpy(g, f"the cotangent of `{name}`").astype(dtype, copy=False)
        g = ctx.kernel._k.vjp(
            ctx.graph, cots, dicts["src"], dicts["dst"], dicts["edge"], dicts["params"], ctx.schedule, ctx.tape, wanted
        )
        result = []
        for (role, name), need in zip(ctx.spec, ctx.needs_input_grad[5:]):
            result.append(_torch.from_numpy(g[role][name]) if need else None)
        return none + tuple(result)


def apply(kernel: Kernel, graph, src=None, dst=None, edge=None, params=None, schedule=None) -> dict:
    """Run ``kernel`` as a differentiable operation: a dict of output name
    to tensor, whose backward calls the kernel's derived VJP. Fields are
    torch tensors on the CPU (NumPy arrays are taken as constants); scalar
    parameters may be Python numbers."""
    if not isinstance(kernel, Kernel):
        raise InputError(f"kernel: expected a tiga.Kernel, got {type(kernel).__name__}")
    g = _graph(graph)
    s = _schedule(schedule)
    spec, tensors, numbers = [], [], []
    for role, d in zip(_ROLES, (src, dst, edge, params)):
        if d is None:
            continue
        if not isinstance(d, dict):
            raise InputError(f"{role}: expected a dict of field name to tensor, got {type(d).__name__}")
        for name, v in d.items():
            if isinstance(v, _torch.Tensor):
                spec.append((role, name))
                tensors.append(v)
            elif isinstance(v, np.ndarray):
                spec.append((role, name))
                tensors.append(_torch.from_numpy(np.ascontiguousarray(v)))
            elif role == "params" and isinstance(v, (int, float)) and not isinstance(v, bool):
                numbers.append((name, float(v)))
            else:
                raise InputError(f"{role} field `{name}`: expected a torch tensor, got {type(v).__name__}")
    outs = _Apply.apply(kernel, g, s, tuple(spec), tuple(numbers), *tensors)
    names = kernel.outputs
    return dict(zip(names, outs))


__all__ = ["apply"]
