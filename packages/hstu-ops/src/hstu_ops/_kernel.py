"""Kernel selection: which implementation of an op runs.

Every op has a ``PYTORCH`` kernel, the readable reference in :mod:`hstu_ops.pytorch`. Some ops
also have a ``NATIVE`` kernel (C++/CUDA/HIP, registered under ``torch.ops.hstu_ops``) or a
``TRITON`` kernel (:mod:`hstu_ops.triton`, imported only when first used).

An op called with ``kernel=None`` uses the process default (:func:`set_default_kernel`). When
an op has no kernel of the default kind it runs its ``PYTORCH`` kernel, so a process may set
``NATIVE`` as default and still call ops that only exist as references. An explicitly requested
kernel that the op does not have is an error.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

__all__ = ["Kernel", "get_default_kernel", "resolve_kernel", "set_default_kernel"]


class Kernel(enum.Enum):
    """Implementation families of the ops in this package."""

    PYTORCH = "pytorch"
    """Plain PyTorch reference; runs anywhere torch runs, differentiable through torch ops."""

    NATIVE = "native"
    """C++ (CPU, OpenMP) and CUDA/HIP kernels from the compiled extension ``hstu_ops._C``."""

    TRITON = "triton"
    """Triton kernels (:mod:`hstu_ops.triton`) for CUDA/ROCm tensors; needs the triton package."""


_default_kernel: Kernel = Kernel.PYTORCH


def _coerce(kernel: Kernel | str, what: str) -> Kernel:
    if isinstance(kernel, Kernel):
        return kernel
    if isinstance(kernel, str):
        for k in Kernel:
            if kernel.lower() in (k.value, k.name.lower()):
                return k
    names = ", ".join(k.name for k in Kernel)
    raise ValueError(f"{what}: unknown kernel {kernel!r}; expected one of {names}")


def set_default_kernel(kernel: Kernel | str) -> None:
    """Sets the kernel used by ops called with ``kernel=None`` (process-wide)."""
    global _default_kernel
    _default_kernel = _coerce(kernel, "set_default_kernel")


def get_default_kernel() -> Kernel:
    """The kernel used by ops called with ``kernel=None``; ``Kernel.PYTORCH`` unless set."""
    return _default_kernel


def resolve_kernel(op: str, kernel: Kernel | str | None, available: Iterable[Kernel]) -> Kernel:
    """Picks the kernel for one call of ``op``, which has the kernels ``available``.

    Raises ValueError, naming the op and its kernels, for an explicit kernel it does not have.
    """
    available = tuple(available)
    if kernel is None:
        default = _default_kernel
        return default if default in available else Kernel.PYTORCH
    chosen = _coerce(kernel, op)
    if chosen not in available:
        names = ", ".join(k.name for k in available)
        raise ValueError(f"{op} has no {chosen.name} kernel; kernels available for {op}: {names}")
    return chosen
