"""The exceptions tiga raises: ``TigaError`` is the base of every one.

Each kind also derives from the built-in exception Python code already
catches for that kind of mistake (``InputError`` is a ``ValueError``,
``FileError`` an ``OSError``).
"""


class TigaError(Exception):
    """Base of every exception the tiga package raises."""


class KernelError(TigaError):
    """A kernel that does not compile, or whose adjoint cannot be built."""


class InputError(TigaError, ValueError):
    """A call's arguments: a field missing, extra, of the wrong shape or dtype,
    a cotangent that does not fit, a schedule setting that does not parse."""


class GraphError(TigaError, ValueError):
    """A graph that cannot be built (an id out of range, too many nodes)."""


class FileError(TigaError, OSError):
    """A file that cannot be read or written (``.gfg``, artifact, spill)."""


class UnsupportedError(TigaError):
    """What this graph, kernel or schedule does not support (the message says
    what would)."""


class ExecError(TigaError, RuntimeError):
    """The rows could not run (memory for outputs, a worker)."""


class StoreError(TigaError, ConnectionError):
    """A graph store (``tigac serve``) that cannot be reached, refused a call,
    missed its deadline or was closed."""


class InternalError(TigaError, RuntimeError):
    """A broken promise inside tiga: a bug, never the input's fault."""


__all__ = [
    "TigaError",
    "KernelError",
    "InputError",
    "GraphError",
    "FileError",
    "UnsupportedError",
    "ExecError",
    "StoreError",
    "InternalError",
]
