"""PyTorch reference of jagged HSTU attention (the specification of ``hstu_mha``).

HSTU attention replaces softmax by a pointwise SiLU: for one sequence and one head,

    out_i = sum_j  mask(i, j) * silu(alpha * <q_i, k_j>) / max_seq_len * v_j

with no normalisation over j. ``max_seq_len`` is the caller's argument, not a property of the
data: any bound on the sequence lengths of the batch (every sequence must fit in it).

The attention mask
------------------
A sequence of length ``n`` is laid out as ``[contextual | history | targets]``: its first
``c = contextual_seq_len`` tokens are contextual features, its last ``t = num_targets[b]``
tokens are candidates (targets), the rest is the user history. Each position ``p`` gets a rank

    r(p) = p                           if c == 0
    r(p) = max(p - c + 1, 0)           if c > 0   (all contextual tokens share rank 0)
    r(p) = min(r(p), h)                if num_targets is given

where ``h = n - t`` (c == 0) or ``h = n - c + 1 - t`` (c > 0) is the rank shared by all targets,
one past the last history rank. With ``d = r(i) - r(j)``, query ``i`` may attend key ``j`` when

    i == j                                  (every token sees itself), or
    d > 0  (causal)  /  d != 0  (not causal),
    and, if max_attn_len > 0, |d| <= max_attn_len;
  or, when c > 0, regardless of the above:
    r(i) == 0 and r(j) < h                  (contextual tokens see every non-target token).

Consequences, for the usual causal case with ``n >= c + t``:
  * history token i sees the contextual tokens, the history tokens j <= i, itself;
  * a target sees the contextual tokens, the whole history and itself, but no other target
    (all targets share one rank, so d == 0 between them);
  * contextual tokens see each other and the whole history, but not the targets;
  * every non-contextual token sees the contextual tokens (they sit at rank 0 < its rank);
  * max_attn_len = m limits look-back in ranks: history token i sees history j with
    0 < i - j <= m, a target sees history j with (n - t) - j <= m, and a token sees the
    contextual tokens only while its rank is <= m. Contextual rows are not limited.
This is the mask of generative-recommenders' PyTorch ``hstu_mha`` (whose Triton kernel uses the
same rule); ``min_full_attn_seq_len`` and ``attn_scale`` of that API are not supported.

Dropout (``dropout_pr`` while ``training``) applies to the masked attention weights.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hstu_ops.pytorch.pt_jagged import (
    check_offsets,
    jagged_to_padded_dense,
    padded_dense_to_jagged,
)

__all__ = ["hstu_attention_mask", "pytorch_hstu_mha"]

_OP = "hstu_mha"


def hstu_attention_mask(
    lengths: torch.Tensor,
    n: int,
    *,
    causal: bool = True,
    num_targets: torch.Tensor | None = None,
    max_attn_len: int = 0,
    contextual_seq_len: int = 0,
) -> torch.Tensor:
    """The HSTU mask as a bool tensor [B, n, n] (query, key) for padded length ``n``.

    Positions at or beyond a sequence's length are masked out entirely.
    """
    device = lengths.device
    lengths = lengths.to(torch.int64)
    pos = torch.arange(n, device=device)
    c = contextual_seq_len
    if c > 0:
        rank = (pos - c + 1).clamp(min=0).expand(lengths.numel(), n)
        target_rank = lengths - c + 1
    else:
        rank = pos.expand(lengths.numel(), n)
        target_rank = lengths.clone()
    if num_targets is not None:
        target_rank = target_rank - num_targets.to(torch.int64)
        rank = torch.minimum(rank, target_rank[:, None])
    r_i = rank[:, :, None]
    r_j = rank[:, None, :]
    d = r_i - r_j
    allowed = d > 0 if causal else d != 0
    if max_attn_len > 0:
        allowed = allowed & (d.abs() <= max_attn_len)
    allowed = allowed | torch.eye(n, dtype=torch.bool, device=device)
    if c > 0:
        allowed = allowed | ((r_i == 0) & (r_j < target_rank[:, None, None]))
    real = pos[None, :] < lengths[:, None]
    return allowed & real[:, :, None] & real[:, None, :]


def _check_dropout_pr(dropout_pr: float) -> None:
    if not 0.0 <= dropout_pr <= 1.0:
        raise ValueError(f"{_OP}: dropout_pr must be in [0, 1], got {dropout_pr}")


def _check_inputs(
    max_seq_len: int,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    seq_offsets: torch.Tensor,
    dropout_pr: float,
    num_targets: torch.Tensor | None,
    max_attn_len: int,
    contextual_seq_len: int,
    *,
    values: bool = True,
) -> torch.Tensor:
    """Validates the arguments; returns the sequence lengths. ``values``: also the checks that
    read the offsets and targets (see :mod:`hstu_ops._index_checks`)."""
    if max_seq_len <= 0:
        raise ValueError(f"{_OP}: max_seq_len must be positive, got {max_seq_len}")
    if q.dim() != 3:
        raise ValueError(f"{_OP}: q must be 3-D [total, heads, attn_dim], got {list(q.shape)}")
    if k.shape != q.shape:
        raise ValueError(f"{_OP}: k must have the shape of q {list(q.shape)}, got {list(k.shape)}")
    if v.dim() != 3 or v.shape[:2] != q.shape[:2]:
        raise ValueError(
            f"{_OP}: v must be 3-D [total, heads, hidden_dim] with total and heads of q "
            f"{list(q.shape[:2])}, got {list(v.shape)}"
        )
    if not (q.dtype == k.dtype == v.dtype) or not q.is_floating_point():
        raise TypeError(
            f"{_OP}: q, k, v must share one floating dtype, got {q.dtype}, {k.dtype}, {v.dtype}"
        )
    _check_dropout_pr(dropout_pr)
    if max_attn_len < 0:
        raise ValueError(f"{_OP}: max_attn_len must be >= 0, got {max_attn_len}")
    if contextual_seq_len < 0:
        raise ValueError(f"{_OP}: contextual_seq_len must be >= 0, got {contextual_seq_len}")
    check_offsets(_OP, "seq_offsets", seq_offsets, q.shape[0], "q", values=values)
    lengths = seq_offsets[1:] - seq_offsets[:-1]
    if values and lengths.numel() and int(lengths.max()) > max_seq_len:
        b = int(torch.argmax(lengths))
        raise ValueError(
            f"{_OP}: sequence {b} has {int(lengths[b])} tokens, more than "
            f"max_seq_len = {max_seq_len}"
        )
    if num_targets is not None:
        if num_targets.dim() != 1 or num_targets.numel() != lengths.numel():
            raise ValueError(
                f"{_OP}: num_targets must be 1-D with one entry per sequence "
                f"({lengths.numel()}), got shape {list(num_targets.shape)}"
            )
        if num_targets.dtype not in (torch.int32, torch.int64):
            raise TypeError(
                f"{_OP}: num_targets must have dtype int32 or int64, got {num_targets.dtype}"
            )
        bad = ((num_targets < 0) | (num_targets > lengths)).nonzero() if values else None
        if bad is not None and bad.numel():
            b = int(bad[0, 0])
            raise ValueError(
                f"{_OP}: num_targets[{b}] = {int(num_targets[b])} is outside "
                f"[0, {int(lengths[b])}] (the length of sequence {b})"
            )
    return lengths


def pytorch_hstu_mha(
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
) -> torch.Tensor:
    """Jagged HSTU multi-head attention, padded-dense reference.

    q, k: [total, heads, attn_dim]; v: [total, heads, hidden_dim]; seq_offsets: int [B + 1].
    Returns [total, heads, hidden_dim]. See the module docstring for the mask.
    """
    lengths = _check_inputs(
        max_seq_len,
        q,
        k,
        v,
        seq_offsets,
        dropout_pr,
        num_targets,
        max_attn_len,
        contextual_seq_len,
    )
    total, heads, attn_dim = q.shape
    hidden_dim = v.shape[2]
    batch = lengths.numel()
    # Padding to the longest sequence of the batch rather than to max_seq_len gives the same
    # result (padded keys are masked) at a fraction of the cost.
    n = int(lengths.max()) if batch and total else 0
    if n == 0:
        return v.new_zeros((total, heads, hidden_dim))

    def pad(x: torch.Tensor, dim: int) -> torch.Tensor:  # -> [B, heads, n, dim]
        dense = jagged_to_padded_dense(x.reshape(total, heads * dim), seq_offsets, n)
        return dense.view(batch, n, heads, dim).transpose(1, 2)

    qd, kd, vd = pad(q, attn_dim), pad(k, attn_dim), pad(v, hidden_dim)
    scores = torch.einsum("bhid,bhjd->bhij", qd, kd) * alpha
    weights = F.silu(scores) / max_seq_len
    mask = hstu_attention_mask(
        lengths,
        n,
        causal=causal,
        num_targets=num_targets,
        max_attn_len=max_attn_len,
        contextual_seq_len=contextual_seq_len,
    )
    weights = torch.where(mask[:, None], weights, weights.new_zeros(()))
    if dropout_pr > 0.0:
        weights = F.dropout(weights, p=dropout_pr, training=training)
    out = torch.einsum("bhij,bhjv->bhiv", weights, vd)  # [B, heads, n, hidden]
    out = out.transpose(1, 2).reshape(batch, n, heads * hidden_dim)
    return padded_dense_to_jagged(out, seq_offsets).view(total, heads, hidden_dim)
