"""Jagged primitives, dispatched to the PYTORCH reference or the NATIVE kernels.

See :mod:`hstu_ops.pytorch.pt_jagged` for the layout (values + offsets) and the exact
semantics. Both kernels validate their arguments and raise ValueError/TypeError naming the bad
argument and value. Floating-point values are differentiable with either kernel.
"""

from __future__ import annotations

import torch

from hstu_ops._kernel import Kernel, resolve_kernel
from hstu_ops._native import native_ops
from hstu_ops.pytorch import pt_jagged

__all__ = ["complete_cumsum", "concat_1d_jagged", "split_1d_jagged"]

_KERNELS = (Kernel.PYTORCH, Kernel.NATIVE)


def complete_cumsum(lengths: torch.Tensor, *, kernel: Kernel | str | None = None) -> torch.Tensor:
    """Offsets ``[0, l0, l0 + l1, ...]`` (N + 1 entries) from lengths (N entries).

    lengths: 1-D int32 or int64, no negative entry; the result has the same dtype (int32 sums
    that overflow are an error).
    """
    k = resolve_kernel("complete_cumsum", kernel, _KERNELS)
    if k is Kernel.NATIVE:
        return native_ops("complete_cumsum", lengths.device).complete_cumsum(lengths)
    return pt_jagged.pytorch_complete_cumsum(lengths)


def concat_1d_jagged(
    values_a: torch.Tensor,
    offsets_a: torch.Tensor,
    values_b: torch.Tensor,
    offsets_b: torch.Tensor,
    *,
    kernel: Kernel | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sequence concatenation: sequence i of the result is a_i followed by b_i.

    values_a [rows_a, *row] and values_b [rows_b, *row] share dtype and row shape; offsets_a
    and offsets_b share dtype (int32/int64) and length B + 1. Returns ``(values, offsets)``
    with ``values`` of shape [rows_a + rows_b, *row] and ``offsets = offsets_a + offsets_b``.
    """
    k = resolve_kernel("concat_1d_jagged", kernel, _KERNELS)
    if k is Kernel.NATIVE:
        ops = native_ops("concat_1d_jagged", values_a.device)
        return ops.concat_1d_jagged(values_a, offsets_a, values_b, offsets_b)
    return pt_jagged.pytorch_concat_1d_jagged(values_a, offsets_a, values_b, offsets_b)


def split_1d_jagged(
    values: torch.Tensor,
    offsets: torch.Tensor,
    offsets_a: torch.Tensor,
    *,
    kernel: Kernel | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inverse of :func:`concat_1d_jagged`: splits sequence i after its first
    ``offsets_a[i + 1] - offsets_a[i]`` rows.

    Returns ``(values_a, values_b, offsets_b)`` with ``offsets_b = offsets - offsets_a``, so
    ``concat_1d_jagged(values_a, offsets_a, values_b, offsets_b) == (values, offsets)``.
    """
    k = resolve_kernel("split_1d_jagged", kernel, _KERNELS)
    if k is Kernel.NATIVE:
        ops = native_ops("split_1d_jagged", values.device)
        return ops.split_1d_jagged(values, offsets, offsets_a)
    return pt_jagged.pytorch_split_1d_jagged(values, offsets, offsets_a)
