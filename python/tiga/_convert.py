"""Arrays in and out: torch tensors and NumPy arrays to what the extension
module reads (C-contiguous NumPy arrays, borrowed without a copy), and
outputs back to the caller's kind."""

from __future__ import annotations

import numpy as np

from .errors import InputError


def is_torch(x) -> bool:
    # Without importing torch: the core works with NumPy alone.
    return type(x).__module__.startswith("torch") and hasattr(x, "detach") and hasattr(x, "numpy")


def to_numpy(x, what: str, numbers: bool = False):
    """The array the kernel reads for argument ``what``: a C-contiguous NumPy
    array, the caller's own buffer where it already is one (a CPU torch
    tensor's included); other layouts are copied once. Numbers pass as they
    are where ``numbers`` allows them."""
    if is_torch(x):
        import torch

        if x.layout != torch.strided:
            raise InputError(f"{what}: a {x.layout} tensor; tiga reads dense (strided) tensors")
        if x.device.type != "cpu":
            raise InputError(f"{what}: a tensor on {x.device}; tiga runs on the CPU here (call .cpu() first)")
        if x.dtype == torch.bfloat16:
            raise InputError(f"{what}: a bfloat16 tensor; NumPy has no bfloat16, so tiga's Python API reads float32, float64 and float16")
        x = x.detach()
        if not x.is_contiguous():
            x = x.contiguous()
        return x.numpy()
    if isinstance(x, np.ndarray):
        return x if x.flags.c_contiguous else np.ascontiguousarray(x)
    if isinstance(x, np.generic) and numbers:
        return float(x)
    return x


def index_numpy(x, what: str):
    """An integer array argument (``edge_index``, CSR offsets) as C-contiguous
    int64; floats and other kinds refused by name."""
    x = to_numpy(x, what)
    if not isinstance(x, np.ndarray):
        x = np.asarray(x)
    if x.dtype.kind not in "iu":
        raise InputError(f"{what}: expected an integer array, got {x.dtype}")
    if x.dtype != np.int64:
        if x.dtype.kind == "u" and x.size and int(x.max()) > np.iinfo(np.int64).max:
            raise InputError(f"{what}: ids beyond int64")
        x = x.astype(np.int64)
    return np.ascontiguousarray(x)


def field_dicts(src, dst, edge, params):
    """The four role dicts as NumPy, and whether any value was a torch tensor."""
    torch_in = False
    out = []
    for role, d in (("src", src), ("dst", dst), ("edge", edge), ("params", params)):
        if d is None:
            out.append(None)
            continue
        if not isinstance(d, dict):
            raise InputError(f"{role}: expected a dict of field name to array, got {type(d).__name__}")
        conv = {}
        for name, v in d.items():
            torch_in = torch_in or is_torch(v)
            conv[name] = to_numpy(v, f"{role} field `{name}`", numbers=(role == "params"))
        out.append(conv)
    return out, torch_in


def as_caller(a, torch_out: bool):
    """A NumPy result as the caller's kind: a torch tensor sharing its buffer
    when the caller passed torch tensors, else the array itself."""
    if not torch_out or a is None:
        return a
    import torch

    return torch.from_numpy(np.ascontiguousarray(a))


def outputs_as(d: dict, torch_out: bool) -> dict:
    return {k: as_caller(v, torch_out) for k, v in d.items()}
