"""Jagged HSTU multi-head attention, dispatched by kernel.

Kernels: PYTORCH (the reference, :mod:`hstu_ops.pytorch.pt_hstu_attention`, which states the
semantics and the exact mask), NATIVE (C++ for CPU tensors, ``torch.ops.hstu_ops.hstu_mha_fwd``
and ``hstu_mha_bwd`` of the compiled extension) and TRITON
(:mod:`hstu_ops.triton.triton_hstu_attention`, imported on first use).
"""

from __future__ import annotations

import torch

from hstu_ops._kernel import Kernel, dispatch
from hstu_ops._native import native_ops
from hstu_ops.pytorch.pt_hstu_attention import _check_inputs, pytorch_hstu_mha

__all__ = ["hstu_mha"]

_OP = "hstu_mha"
_NATIVE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def hstu_mha(
    max_seq_len: int,
    alpha: float,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    seq_offsets: torch.Tensor,
    causal: bool = True,
    dropout_pr: float = 0.0,
    training: bool = True,
    num_targets: torch.Tensor | None = None,
    max_attn_len: int = 0,
    contextual_seq_len: int = 0,
    kernel: Kernel | str | None = None,
) -> torch.Tensor:
    """HSTU attention over a jagged batch.

    out = (silu(alpha * q k^T) / max_seq_len, masked) @ v, per sequence and head.

    Args:
        max_seq_len: divisor of the attention weights; every sequence must be at most this long.
        alpha: scale of q k^T before the SiLU (the DLRMv4 reference uses 1/sqrt(attn_dim)).
        q, k: [total, heads, attn_dim]. v: [total, heads, hidden_dim].
        seq_offsets: int32/int64 [B + 1], offsets of the B sequences in the first dimension.
        causal: token i sees tokens of lower rank (see the mask); otherwise any other rank.
        dropout_pr: dropout probability on the attention weights, applied while ``training``.
        num_targets: optional int [B]; the last num_targets[b] tokens of sequence b are
            candidates that see the history and themselves but not each other.
        max_attn_len: if > 0, the largest rank distance a token looks across.
        contextual_seq_len: number of leading contextual tokens, which see all non-target
            tokens and are seen by all tokens.
        kernel: ``Kernel.PYTORCH``, ``Kernel.NATIVE``, ``Kernel.TRITON`` or None for the
            process default. NATIVE needs CPU tensors (q, k, v, seq_offsets, num_targets) of
            dtype float16, bfloat16 or float32, computes in float32 and is differentiable
            (its backward recomputes the weights; q, k, v and the offsets are all it saves);
            it does not implement dropout (``dropout_pr`` must be 0 while ``training``,
            NotImplementedError otherwise). TRITON needs CUDA/ROCm tensors of those dtypes; its
            dropout has the reference's distribution but its own random stream (Philox,
            seeded from torch's default generator, so ``torch.manual_seed`` makes it
            reproducible); it raises TritonUnavailableError when triton is not installed.

    Returns:
        [total, heads, hidden_dim].
    """
    _, impl = dispatch(
        _OP,
        kernel,
        pytorch=pytorch_hstu_mha,
        native=_native_hstu_mha,
        triton="triton_hstu_attention",
    )
    return impl(
        max_seq_len,
        alpha,
        q,
        k,
        v,
        seq_offsets,
        causal=causal,
        dropout_pr=dropout_pr,
        training=training,
        num_targets=num_targets,
        max_attn_len=max_attn_len,
        contextual_seq_len=contextual_seq_len,
    )


def _native_hstu_mha(
    max_seq_len: int, alpha: float, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    seq_offsets: torch.Tensor, causal: bool, dropout_pr: float, training: bool,
    num_targets: torch.Tensor | None, max_attn_len: int, contextual_seq_len: int,
) -> torch.Tensor:  # fmt: skip
    """The NATIVE kernel, called as the reference is (every argument given)."""
    ops = _native_ops_for(q, k, v)
    _check_inputs(
        max_seq_len, q, k, v, seq_offsets, dropout_pr, num_targets, max_attn_len,
        contextual_seq_len,
    )  # fmt: skip
    _check_native_support(q, seq_offsets, num_targets, dropout_pr, training)
    scalars = (int(max_attn_len), int(contextual_seq_len))
    return ops.hstu_mha_fwd(
        int(max_seq_len), float(alpha), q, k, v, seq_offsets, bool(causal), num_targets, *scalars
    )


def _native_ops_for(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    """The NATIVE kernel's ops, for CPU tensors only."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.device.type != "cpu":
            raise ValueError(
                f"{_OP}: the NATIVE kernel runs on CPU tensors only, but {name} is on "
                f"{t.device}; use kernel=Kernel.TRITON (or Kernel.PYTORCH) for GPU tensors"
            )
    return native_ops(_OP, q.device)


def _check_native_support(
    q: torch.Tensor,
    seq_offsets: torch.Tensor,
    num_targets: torch.Tensor | None,
    dropout_pr: float,
    training: bool,
) -> None:
    """What the NATIVE kernel needs beyond the reference's checks: no dropout while training,
    a float dtype it computes, offsets on the CPU."""
    if dropout_pr > 0.0 and training:
        raise NotImplementedError(
            f"{_OP}: the NATIVE kernel does not implement dropout (dropout_pr = {dropout_pr} "
            "while training); use Kernel.PYTORCH, dropout_pr=0.0 or training=False"
        )
    if q.dtype not in _NATIVE_DTYPES:
        raise TypeError(
            f"{_OP}: the NATIVE kernel supports float16, bfloat16 and float32, got {q.dtype}"
        )
    for name, t in (("seq_offsets", seq_offsets), ("num_targets", num_targets)):
        if t is not None and t.device.type != "cpu":
            raise ValueError(
                f"{_OP}: the NATIVE kernel runs on CPU tensors only, but {name} is on {t.device}"
            )
