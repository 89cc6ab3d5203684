"""Timestamp positional embeddings of HSTU, dispatched by kernel.

Kernels: PYTORCH (the reference, :mod:`hstu_ops.pytorch.pt_position`, which states how the
position indices and time buckets are computed) and TRITON
(:mod:`hstu_ops.triton.triton_position`, imported on first use).
"""

from __future__ import annotations

import torch

from hstu_ops._kernel import Kernel, dispatch
from hstu_ops.pytorch.pt_position import pytorch_add_timestamp_positional_embeddings

__all__ = ["add_timestamp_positional_embeddings"]

_OP = "add_timestamp_positional_embeddings"


def add_timestamp_positional_embeddings(
    alpha: float,
    max_seq_len: int,
    max_contextual_seq_len: int,
    position_embeddings_weight: torch.Tensor,
    timestamp_embeddings_weight: torch.Tensor,
    seq_offsets: torch.Tensor,
    seq_lengths: torch.Tensor,
    seq_embeddings: torch.Tensor,
    timestamps: torch.Tensor,
    num_targets: torch.Tensor | None,
    interleave_targets: bool,
    time_bucket_fn: str = "sqrt",
    kernel: Kernel | str | None = None,
) -> torch.Tensor:
    """``alpha * seq_embeddings + P[position] + T[time bucket]`` over a jagged batch.

    Args:
        alpha: scale of seq_embeddings (HSTU uses sqrt(D)).
        max_seq_len: a bound on the sequence lengths (every sequence must fit in it).
        max_contextual_seq_len: number of leading contextual tokens; token p < this gets
            position index p.
        position_embeddings_weight: P, [num_positions, D], at least max(1,
            max_contextual_seq_len) rows; positions beyond it share its last row.
        timestamp_embeddings_weight: T, [num_time_buckets, D]; buckets beyond it share its last
            row (in every kernel).
        seq_offsets: int32/int64 [B + 1], offsets of the B sequences.
        seq_lengths: int32/int64 [B], equal to the differences of seq_offsets (checked).
        seq_embeddings: [total, D], float16/bfloat16/float32 (float64 for PYTORCH).
        timestamps: int32/int64 [total], seconds; a sequence's query time is its last token's.
        num_targets: optional int [B]; the last num_targets[b] tokens of sequence b (twice
            that many with interleave_targets) are targets, which all get position index
            max_contextual_seq_len.
        interleave_targets: each target is two tokens (e.g. an item and its action).
        time_bucket_fn: "sqrt" or "log" of the gap to the query time in minutes.
        kernel: ``Kernel.PYTORCH``, ``Kernel.TRITON`` or None for the process default. TRITON
            needs CUDA/ROCm tensors (or ``TRITON_INTERPRET=1``) of float16, bfloat16 or float32
            and raises TritonUnavailableError when triton is not installed.

    Returns:
        [total, D] in the dtype of seq_embeddings; differentiable in seq_embeddings and both
        tables.
    """
    _, impl = dispatch(
        _OP, kernel, pytorch=pytorch_add_timestamp_positional_embeddings, triton="triton_position"
    )
    return impl(
        alpha,
        max_seq_len,
        max_contextual_seq_len,
        position_embeddings_weight,
        timestamp_embeddings_weight,
        seq_offsets,
        seq_lengths,
        seq_embeddings,
        timestamps,
        num_targets,
        interleave_targets,
        time_bucket_fn,
    )
