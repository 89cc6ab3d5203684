"""The one way an op picks the function that runs it.

Every public op calls :func:`dispatch` with its implementations: the PYTORCH reference, the
NATIVE function where it has one (a function with the reference's arguments that calls the
compiled extension), and the module of :mod:`hstu_ops.triton` that holds its ``triton_<op>``
where it has a TRITON kernel (imported on first use, :func:`hstu_ops._triton.load_triton_module`).
Which one runs is :func:`hstu_ops._kernel.resolve_kernel`'s choice, so the process default
and an explicit ``kernel=`` follow the same rule for every op family.
"""

from __future__ import annotations

from collections.abc import Callable

from hstu_ops._kernel import Kernel, resolve_kernel
from hstu_ops._triton import load_triton_module

__all__ = ["dispatch"]


def dispatch(
    op: str,
    kernel: Kernel | str | None,
    *,
    pytorch: Callable,
    native: Callable | None = None,
    triton: str | None = None,
) -> tuple[Kernel, Callable]:
    """The kernel ``op`` runs for ``kernel`` (see :func:`resolve_kernel`) and its function:
    ``pytorch``, ``native``, or ``triton_<op>`` of ``hstu_ops.triton.<triton>``.

    The kernels given must be those :data:`hstu_ops.OP_KERNELS` lists for ``op`` (the tests
    hold every op to it); a chosen kernel given none is a RuntimeError naming the op.
    """
    chosen = resolve_kernel(op, kernel)
    if chosen is Kernel.TRITON:
        if triton is None:
            raise RuntimeError(f"{op}: OP_KERNELS lists a TRITON kernel that the op does not give")
        return chosen, getattr(load_triton_module(op, triton), f"triton_{op}")
    if chosen is Kernel.NATIVE:
        if native is None:
            raise RuntimeError(f"{op}: OP_KERNELS lists a NATIVE kernel that the op does not give")
        return chosen, native
    return chosen, pytorch
