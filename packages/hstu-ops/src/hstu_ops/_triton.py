"""Lazy loading of the Triton backend: ``import hstu_ops`` never imports ``triton``.

The Triton kernels live in :mod:`hstu_ops.triton` (one module per op family), which import
``triton`` at module level. They are imported on the first ``kernel=Kernel.TRITON`` call; when
triton is not installed (or fails to import) that call raises :class:`TritonUnavailableError`
and the other kernels keep working.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import sys
from types import ModuleType

__all__ = [
    "TritonUnavailableError",
    "load_triton_module",
    "triton_available",
    "triton_interpreter_problem",
]


class TritonUnavailableError(RuntimeError):
    """The TRITON kernel of an op cannot run in this process (triton is missing or broken)."""


def load_triton_module(op: str, module: str) -> ModuleType:
    """Imports ``hstu_ops.triton.<module>`` for ``op``; TritonUnavailableError if triton is absent
    or the module cannot be imported (one reason: ``TRITON_INTERPRET`` changed after another
    Triton module of hstu_ops was imported; see :mod:`hstu_ops.triton._common`)."""
    name = f"hstu_ops.triton.{module}"
    loaded = sys.modules.get(name)
    if loaded is not None:  # a plain lookup, which torch.compile traces (an import it cannot)
        return loaded
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


def triton_interpreter_problem(
    triton_version: str | None = None, numpy_version: str | None = None
) -> str | None:
    """Why Triton's CPU interpreter (``TRITON_INTERPRET=1``) cannot run the kernels with these
    versions (by default the installed ones), or None; a GPU run does not use the interpreter.

    Triton before 3.7 takes ``int()`` of a one-element array for a scalar argument, which numpy
    2.4 refuses: every kernel that loops over one fails ("only 0-dimensional arrays can be
    converted to Python scalars"). Seen with Triton 3.6.0 and numpy 2.4.6 and 2.5.2.
    """
    triton_version = triton_version or _installed_version("triton")
    numpy_version = numpy_version or _installed_version("numpy")
    if not triton_version or not numpy_version:
        return None
    if _version_tuple(triton_version) < (3, 7) and _version_tuple(numpy_version) >= (2, 4):
        return (
            f"Triton {triton_version}'s interpreter does not run with numpy {numpy_version} "
            "(Triton before 3.7 converts one-element arrays with int(), which numpy 2.4 "
            "refuses): for TRITON_INTERPRET=1 use numpy<2.4 or triton>=3.7; a GPU run does not "
            "use the interpreter"
        )
    return None


def _installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _version_tuple(version: str) -> tuple[int, ...]:
    """The leading numbers of a version string: '2.11.0+cu130' -> (2, 11, 0)."""
    numbers = []
    for part in version.split("+")[0].split("."):
        digits = re.match(r"\d+", part)
        if not digits:
            break
        numbers.append(int(digits.group()))
    return tuple(numbers)
