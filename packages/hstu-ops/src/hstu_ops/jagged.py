"""Jagged primitives, dispatched to the PYTORCH reference, the NATIVE or the TRITON kernels.

1-D primitives (``complete_cumsum``, ``concat_1d_jagged``, ``split_1d_jagged``): PYTORCH and
NATIVE; see :mod:`hstu_ops.pytorch.pt_jagged` for the layout (values + offsets) and the exact
semantics. 2-D jagged ops (``concat_2D_jagged``, ``split_2D_jagged``,
``jagged_dense_bmm_broadcast_add``): PYTORCH and TRITON; see
:mod:`hstu_ops.pytorch.pt_jagged_2d`. Every kernel validates its arguments and raises
ValueError/TypeError naming the bad argument and value. Floating-point values are
differentiable with every kernel.
"""

from __future__ import annotations

import torch

from hstu_ops._kernel import Kernel, dispatch
from hstu_ops._native import native_ops
from hstu_ops.pytorch import pt_jagged, pt_jagged_2d

__all__ = [
    "complete_cumsum",
    "concat_1d_jagged",
    "concat_2D_jagged",
    "jagged_dense_bmm_broadcast_add",
    "split_1d_jagged",
    "split_2D_jagged",
]


def complete_cumsum(lengths: torch.Tensor, *, kernel: Kernel | str | None = None) -> torch.Tensor:
    """Offsets ``[0, l0, l0 + l1, ...]`` (N + 1 entries) from lengths (N entries).

    lengths: 1-D int32 or int64, no negative entry; the result has the same dtype (int32 sums
    that overflow are an error).
    """
    _, impl = dispatch(
        "complete_cumsum",
        kernel,
        pytorch=pt_jagged.pytorch_complete_cumsum,
        native=_native_complete_cumsum,
    )
    return impl(lengths)


def _native_complete_cumsum(lengths: torch.Tensor) -> torch.Tensor:
    return native_ops("complete_cumsum", lengths.device).complete_cumsum(lengths)


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
    _, impl = dispatch(
        "concat_1d_jagged",
        kernel,
        pytorch=pt_jagged.pytorch_concat_1d_jagged,
        native=_native_concat_1d_jagged,
    )
    return impl(values_a, offsets_a, values_b, offsets_b)


def _native_concat_1d_jagged(values_a, offsets_a, values_b, offsets_b):
    ops = native_ops("concat_1d_jagged", values_a.device)
    return ops.concat_1d_jagged(values_a, offsets_a, values_b, offsets_b)


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
    _, impl = dispatch(
        "split_1d_jagged",
        kernel,
        pytorch=pt_jagged.pytorch_split_1d_jagged,
        native=_native_split_1d_jagged,
    )
    return impl(values, offsets, offsets_a)


def _native_split_1d_jagged(values, offsets, offsets_a):
    return native_ops("split_1d_jagged", values.device).split_1d_jagged(values, offsets, offsets_a)


# --------------------------------------------------------------------------------------------
# 2-D jagged ops (op family 4)
# --------------------------------------------------------------------------------------------
def concat_2D_jagged(
    max_seq_len: int,
    values_left: torch.Tensor,
    values_right: torch.Tensor,
    max_len_left: int | None = None,
    max_len_right: int | None = None,
    offsets_left: torch.Tensor | None = None,
    offsets_right: torch.Tensor | None = None,
    kernel: Kernel | str | None = None,
    *,
    rows_per_program: int | None = None,
) -> torch.Tensor:
    """Joins two 2-D jagged tensors sequence by sequence: left sequence b, then right sequence b.

    Args:
        max_seq_len: bound on every joined sequence's length (checked).
        values_left: [rows_left, D]; values_right: [rows_right, D], same dtype and D.
        max_len_left, max_len_right: a dense side's fixed sequence length (required when its
            offsets are None); for a jagged side an optional bound on its sequences (checked).
        offsets_left, offsets_right: int32/int64 [B + 1], or None for a dense side, whose values
            are [B * max_len, D].
        kernel: ``Kernel.PYTORCH``, ``Kernel.TRITON`` or None for the process default.
        rows_per_program: TRITON only (PYTORCH checks and ignores it): 1 selects the single-row
            kernel, a power of 2 up to 256 the multi-row kernel with that many rows per program,
            None picks by row width and GPU (see :mod:`hstu_ops.triton.triton_jagged`).

    Returns:
        [rows_left + rows_right, D]; its offsets are offsets_left + offsets_right.
    """
    op = "concat_2D_jagged"
    chosen, impl = dispatch(
        op, kernel, pytorch=pt_jagged_2d.pytorch_concat_2D_jagged, triton="triton_jagged"
    )
    pt_jagged_2d.check_rows_per_program(op, rows_per_program)
    # The tiling choice is the Triton kernel's alone (the reference checks it above).
    extra = {"rows_per_program": rows_per_program} if chosen is Kernel.TRITON else {}
    return impl(
        max_seq_len,
        values_left,
        values_right,
        max_len_left,
        max_len_right,
        offsets_left,
        offsets_right,
        **extra,
    )


def split_2D_jagged(
    max_seq_len: int,
    values: torch.Tensor,
    total_len_left: int | None = None,
    total_len_right: int | None = None,
    max_len_left: int | None = None,
    max_len_right: int | None = None,
    offsets_left: torch.Tensor | None = None,
    offsets_right: torch.Tensor | None = None,
    kernel: Kernel | str | None = None,
    *,
    rows_per_program: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of :func:`concat_2D_jagged`: cuts sequence b after its first len_left[b] rows.

    Args:
        max_seq_len: bound on every sequence's length (checked).
        values: [rows_left + rows_right, D], offsets offsets_left + offsets_right.
        total_len_left, total_len_right: optional row counts of the two results (checked).
        max_len_left, max_len_right, offsets_left, offsets_right: as in
            :func:`concat_2D_jagged`; at least one side must be jagged.
        kernel, rows_per_program: as in :func:`concat_2D_jagged`.

    Returns:
        ``(values_left [rows_left, D], values_right [rows_right, D])``.
    """
    op = "split_2D_jagged"
    chosen, impl = dispatch(
        op, kernel, pytorch=pt_jagged_2d.pytorch_split_2D_jagged, triton="triton_jagged"
    )
    pt_jagged_2d.check_rows_per_program(op, rows_per_program)
    extra = {"rows_per_program": rows_per_program} if chosen is Kernel.TRITON else {}
    return impl(
        max_seq_len,
        values,
        total_len_left,
        total_len_right,
        max_len_left,
        max_len_right,
        offsets_left,
        offsets_right,
        **extra,
    )


def jagged_dense_bmm_broadcast_add(
    max_seq_len: int,
    seq_offsets: torch.Tensor,
    jagged: torch.Tensor,
    dense: torch.Tensor,
    bias: torch.Tensor,
    kernel: Kernel | str | None = None,
) -> torch.Tensor:
    """``out[rows of sequence b] = jagged[rows of b] @ dense[b] + bias[b]``.

    Args:
        max_seq_len: bound on every sequence's length (checked).
        seq_offsets: int32/int64 [B + 1].
        jagged: [total, K]; dense: [B, K, N]; bias: [B, N]; one floating dtype.
        kernel: ``Kernel.PYTORCH``, ``Kernel.TRITON`` (float16, bfloat16, float32 on CUDA/ROCm
            tensors) or None for the process default.

    Returns:
        [total, N] in jagged's dtype, accumulated in float32 (16-bit inputs) and rounded once.
    """
    _, impl = dispatch(
        "jagged_dense_bmm_broadcast_add",
        kernel,
        pytorch=pt_jagged_2d.pytorch_jagged_dense_bmm_broadcast_add,
        triton="triton_jagged",
    )
    return impl(max_seq_len, seq_offsets, jagged, dense, bias)
