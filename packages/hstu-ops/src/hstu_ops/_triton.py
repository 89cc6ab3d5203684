"""Lazy loading of the Triton backend: ``import hstu_ops`` never imports ``triton``.

The Triton kernels live in :mod:`hstu_ops.triton` (one module per op family), which import
``triton`` at module level. They are imported on the first ``kernel=Kernel.TRITON`` call; when
triton is not installed (or fails to import) that call raises :class:`TritonUnavailableError`
and the other kernels keep working.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["TritonUnavailableError", "load_triton_module", "triton_available"]


class TritonUnavailableError(RuntimeError):
    """The TRITON kernel of an op cannot run in this process (triton is missing or broken)."""


def load_triton_module(op: str, module: str) -> ModuleType:
    """Imports ``hstu_ops.triton.<module>`` for ``op``; TritonUnavailableError if triton is absent."""
    name = f"hstu_ops.triton.{module}"
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing = exc.name or ""
        if missing == "triton" or missing.startswith("triton."):
            raise TritonUnavailableError(
                f"{op}: the TRITON kernel needs the `triton` package, which is not installed "
                f"({type(exc).__name__}: {exc}); install triton (Linux, next to a CUDA or ROCm "
                "build of torch) or use Kernel.PYTORCH"
            ) from exc
        raise TritonUnavailableError(
            f"{op}: the TRITON kernel could not be loaded: importing {name} failed with "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def triton_available() -> bool:
    """Whether the Triton kernels can be imported (triton installed and importable).

    Imports triton on the first call. The kernels still need CUDA or ROCm tensors (or
    ``TRITON_INTERPRET=1``, Triton's CPU interpreter, set before the first TRITON call).
    """
    try:
        load_triton_module("triton_available", "triton_hstu_attention")
    except TritonUnavailableError:
        return False
    return True
