"""Triton kernels of jagged HSTU attention, forward and backward (op family 1).

Semantics are those of the PyTorch reference :mod:`hstu_ops.pytorch.pt_hstu_attention`: for
each sequence and head, ``out = (silu(alpha * q k^T) / max_seq_len, masked) @ v`` with the
same mask (causal, ``num_targets``, ``max_attn_len``, ``contextual_seq_len``) and the same
dropout: while ``training`` with ``dropout_pr = p > 0``, every masked weight is kept with
probability 1 - p and scaled by 1 / (1 - p), as ``F.dropout`` does in the reference.

Layout of the work:

* forward: one program per (query block, head, sequence). It loads its query block once, loops
  over the key blocks that the mask can reach and accumulates ``w @ v`` in float32, ``w`` being
  the masked SiLU weights, which are never written to memory.
* the inner loops are kept short, as the compiled code shows
  (``benchmarks/bench_compiled_loops.py``): causal without ``max_attn_len``, the key (or query)
  blocks wholly inside the allowed region get a loop without any mask, and only the diagonal,
  target and last blocks a masked one; the mask is a 0/1 factor (times dropout's) computed from
  positions before q k^T is used; sigmoid is one approximate exp2 and one approximate
  reciprocal on GPUs (``_common.fast_exp2``, ``fast_reciprocal``; exact under the
  interpreter); alpha / max_seq_len multiplies the accumulators once, after the loops; the
  column masks go where the head dimension fills its block; key and query tiles are a scalar
  step from loop-invariant 32-bit offsets.
* backward, deterministic, no atomics: one kernel with a program per (key block, head,
  sequence) that loops over query blocks and accumulates dk and dv; a second kernel with a
  program per (query block, head, sequence) that loops over key blocks and accumulates dq. Both
  recompute the weights from q and k (nothing but q, k, v and the offsets is saved).
* dropout: the keep/drop decision of weight (query i, key j) of head h of sequence b is the
  first word of Philox4x32-10 at counter (j, i, h, b) under a 64-bit key, the seed (drawn from
  torch's default generator on the host unless given). Being a pure function of those
  indices, it is recomputed tile by tile in the forward and in both backward kernels; no mask
  is stored. The cost is one Philox evaluation (10 rounds of two 32-bit multiplications) per
  weight and kernel, like Triton's own ``tl.rand``; :func:`dropout_keep_mask` materialises
  the mask for tests and debugging.

Key (or query) ranges are derived from the ranks of the mask (see the reference's docstring):
ranks never decrease along a sequence, so a causal query block needs keys up to its own last
row only (all keys when it holds contextual rows), and ``max_attn_len`` bounds the ranks, hence
the positions, a block can reach from either side. Blocks outside those ranges are never loaded;
the element mask is applied inside the ranges.

Importing this module imports ``triton``. Whether the kernels run compiled (CUDA/ROCm tensors)
or in Triton's interpreter (CPU tensors) is fixed when this module is imported, by the
environment variable ``TRITON_INTERPRET=1`` (read by ``triton.jit``). The kernels call only
``triton.language`` builtins, this module's own ``@triton.jit`` helpers and those of
:mod:`hstu_ops.triton._common` (imported in the same mode, which the import checks), never the
library's jit-compiled functions (``tl.sigmoid``, ``tl.zeros``, ...), which are fixed when
``triton`` itself is imported: so the mode depends on the variable at this module's import alone.
"""

# Kernels branch on tl.constexpr flags with if/else statements, which Triton resolves at compile
# time; they stay statements rather than the conditional expressions SIM108 asks for.
# ruff: noqa: SIM108

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from hstu_ops import triton_ops
from hstu_ops.pytorch.pt_hstu_attention import _check_dropout_pr, _check_inputs
from hstu_ops.triton import _common
from hstu_ops.triton._common import (
    cast,
    dot,
    fast_exp2,
    fast_reciprocal,
    philox4x32_10,
    sequence,
)

__all__ = [
    "INTERPRETED",
    "BlockConfig",
    "default_block_config",
    "draw_dropout_seed",
    "dropout_keep_mask",
    "hstu_attention_bwd",
    "hstu_attention_fwd",
    "triton_hstu_mha",
]

_OP = "hstu_mha"


INTERPRETED: bool = _common.kernel_module_mode(__name__)
"""Whether the kernels of this module were created for Triton's interpreter (CPU tensors)."""


# --------------------------------------------------------------------------------------------
# The mask, as in the reference: ranks, then the rule on rank differences.
# --------------------------------------------------------------------------------------------
@triton.jit
def _rank(pos, c, h, HAS_CTX: tl.constexpr, HAS_TARGETS: tl.constexpr):
    """Rank of position(s) ``pos``: contextual tokens share rank 0, targets share rank h."""
    if HAS_CTX:
        pos = tl.maximum(pos - c + 1, 0)
    if HAS_TARGETS:
        pos = tl.minimum(pos, h)
    return pos


@triton.jit
def _first_pos_with_rank_ge(r, c, HAS_CTX: tl.constexpr):
    """A position p such that every position of rank >= r is >= p (r may be <= 0)."""
    if HAS_CTX:
        p = r + c - 1
    else:
        p = r
    return tl.where(r <= 0, 0, p)


@triton.jit
def _end_pos_with_rank_le(r, c, h, n, HAS_CTX: tl.constexpr, HAS_TARGETS: tl.constexpr):
    """An exclusive end e <= n such that every position of rank <= r is < e."""
    if HAS_CTX:
        e = r + c
    else:
        e = r + 1
    e = tl.where(r < 0, 0, e)
    if HAS_TARGETS:
        # The targets all have rank h: when h <= r they are all in, and they end the sequence.
        e = tl.where(h <= r, n, e)
    return tl.minimum(e, n)


@triton.jit
def _allowed(
    pos_q,
    pos_k,
    c,
    h,
    max_attn_len,
    CAUSAL: tl.constexpr,
    HAS_CTX: tl.constexpr,
    HAS_TARGETS: tl.constexpr,
    HAS_MAX_ATTN_LEN: tl.constexpr,
):
    """Whether query pos_q may attend key pos_k (broadcast shapes), both real tokens.

    Positions past the sequence are not refused here: the kernels read their rows of q, k, v
    and dout as zeros, whose weights and gradients are zero, and never store them."""
    # The ranks of _rank, inlined: this runs in every iteration of the inner loops.
    r_q = pos_q
    r_k = pos_k
    if HAS_CTX:
        r_q = tl.maximum(r_q - c + 1, 0)
        r_k = tl.maximum(r_k - c + 1, 0)
    if HAS_TARGETS:
        r_q = tl.minimum(r_q, h)
        r_k = tl.minimum(r_k, h)
    d = r_q - r_k
    if CAUSAL:
        ok = d > 0
    else:
        ok = d != 0
    if HAS_MAX_ATTN_LEN:
        ok = ok & (tl.abs(d) <= max_attn_len)
    ok = ok | (pos_q == pos_k)
    if HAS_CTX:
        # Contextual tokens (rank 0) see every non-target token.
        ok = ok | ((r_q == 0) & (r_k < h))
    return ok


@triton.jit
def _key_range(
    m0,
    n,
    c,
    h,
    max_attn_len,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    HAS_CTX: tl.constexpr,
    HAS_TARGETS: tl.constexpr,
    HAS_MAX_ATTN_LEN: tl.constexpr,
):
    """[lo, hi): the keys that query rows [m0, m0 + BLOCK_M) may attend (a superset)."""
    m_last = tl.minimum(m0 + BLOCK_M, n) - 1
    lo = m0 * 0
    if CAUSAL:
        hi = m_last + 1  # causal: rank(key) < rank(query) implies key < query
    else:
        hi = n
    if HAS_MAX_ATTN_LEN:
        lo = _first_pos_with_rank_ge(
            _rank(m0, c, h, HAS_CTX, HAS_TARGETS) - max_attn_len, c, HAS_CTX
        )
        if not CAUSAL:
            hi = _end_pos_with_rank_le(
                _rank(m_last, c, h, HAS_CTX, HAS_TARGETS) + max_attn_len,
                c,
                h,
                n,
                HAS_CTX,
                HAS_TARGETS,
            )
    if HAS_CTX:
        # A block holding contextual rows sees every non-target key.
        lo = tl.where(m0 < c, 0, lo)
        hi = tl.where(m0 < c, n, hi)
    lo = (lo // BLOCK_N) * BLOCK_N
    return lo, hi


@triton.jit
def _sequence(seq_offsets, num_targets, b, c, HAS_CTX: tl.constexpr, HAS_TARGETS: tl.constexpr):
    """(first row, length, target rank h) of sequence b."""
    seq_start, n = sequence(seq_offsets, b)
    if HAS_TARGETS:
        t = tl.load(num_targets + b).to(tl.int32)
    else:
        t = 0
    if HAS_CTX:
        h = n - t - c + 1
    else:
        h = n - t
    return seq_start, n, h


# --------------------------------------------------------------------------------------------
# Programs: one per (block of rows, head, sequence)
# --------------------------------------------------------------------------------------------
@triton.jit
def _program_block(
    seq_offsets,
    num_targets,
    c,
    BLOCK: tl.constexpr,
    HAS_CTX: tl.constexpr,
    HAS_TARGETS: tl.constexpr,
):
    """(head, sequence b, its first row, length n and target rank h, the first row of the
    block) of a program of the grid (blocks of BLOCK rows, heads, sequences)."""
    pid = tl.program_id(0)
    head = tl.program_id(1)
    b = tl.program_id(2)
    seq_start, n, h = _sequence(seq_offsets, num_targets, b, c, HAS_CTX, HAS_TARGETS)
    return head, b, seq_start, n, h, pid * BLOCK


# --------------------------------------------------------------------------------------------
# Dropout: a counter-based RNG, so that the backward regenerates the forward's mask.
# --------------------------------------------------------------------------------------------
PHILOX_ROUNDS = _common.PHILOX_ROUNDS
"""Rounds of the Philox4x32 of the mask (:func:`hstu_ops.triton._common.philox4x32_10`)."""

_THRESHOLD_BITS = 24
DROPOUT_THRESHOLD_BITS = tl.constexpr(_THRESHOLD_BITS)
"""A weight is dropped when the top 24 bits of its random word are below round(p * 2**24)."""

# A new seed every call must not mean a new compilation (Triton specialises integer arguments
# equal to 1 or divisible by 16), so the kernels do not specialise on these.
_DROPOUT_SEEDS = ["seed_lo", "seed_hi", "drop_threshold"]


@triton.jit
def _dropout_keep(b, head, pos_q, pos_k, seed_lo, seed_hi, drop_threshold):
    """Whether the weight (query pos_q, key pos_k) of head ``head`` of sequence b is kept.

    One Philox draw per weight: counter (key, query, head, sequence), key the 64-bit seed,
    so the mask depends on nothing else (not the tiles, not the kernel): the forward and both
    backward kernels regenerate it. pos_q and pos_k broadcast to the tile's shape.
    """
    zero = (pos_q + pos_k) * 0
    r, _, _, _ = philox4x32_10(
        (pos_k + zero).to(tl.uint32),
        (pos_q + zero).to(tl.uint32),
        (head + zero).to(tl.uint32),
        (b + zero).to(tl.uint32),
        seed_lo.to(tl.uint32, bitcast=True),
        seed_hi.to(tl.uint32, bitcast=True),
    )
    return (r >> (32 - DROPOUT_THRESHOLD_BITS)).to(tl.int32) >= drop_threshold


@triton.jit
def _dropout_scale(b, head, pos_q, pos_k, seed_lo, seed_hi, drop_threshold, inv_keep):
    """1 / (1 - p) where the weight is kept, 0 where it is dropped (F.dropout's factor)."""
    keep = _dropout_keep(b, head, pos_q, pos_k, seed_lo, seed_hi, drop_threshold)
    return tl.where(keep, inv_keep, 0.0)


@triton.jit(do_not_specialize=_DROPOUT_SEEDS)
def _dropout_mask_kernel(
    Mask,
    seq_offsets,
    stride_mb,
    stride_mh,
    stride_mq,
    seed_lo,
    seed_hi,
    drop_threshold,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Debug helper: writes the keep mask (1/0) of every (query, key) pair of a sequence."""
    pid_m = tl.program_id(0)
    head = tl.program_id(1)
    b = tl.program_id(2)
    _, n = sequence(seq_offsets, b)
    m0 = pid_m * BLOCK_M
    if m0 < n:
        Mask += b.to(tl.int64) * stride_mb + head.to(tl.int64) * stride_mh
        offs_m = m0 + tl.arange(0, BLOCK_M)
        for start_n in range(0, n, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            keep = _dropout_keep(
                b, head, offs_m[:, None], offs_n[None, :], seed_lo, seed_hi, drop_threshold
            )
            tl.store(
                Mask + offs_m[:, None].to(tl.int64) * stride_mq + offs_n[None, :],
                keep.to(tl.int8),
                mask=(offs_m[:, None] < n) & (offs_n[None, :] < n),
            )


@triton.jit
def _pair_factor(
    pos_q,
    pos_k,
    b,
    head,
    c,
    h,
    max_attn_len,
    seed_lo,
    seed_hi,
    drop_threshold,
    inv_keep,
    CAUSAL: tl.constexpr,
    HAS_CTX: tl.constexpr,
    HAS_TARGETS: tl.constexpr,
    HAS_MAX_ATTN_LEN: tl.constexpr,
    HAS_DROPOUT: tl.constexpr,
    MASKED: tl.constexpr,
):
    """The factor of the weights of the (query pos_q, key pos_k) pairs of a tile: 0 where the
    mask (MASKED tiles only: the others are wholly allowed) refuses the pair, else dropout's
    1 / (1 - p) or 0 (1.0 without dropout). The forward and both backward kernels ask it the
    same question, so they agree on every pair. It depends on positions only, not on q k^T, so
    the compiler computes it while the tensor cores do."""
    if HAS_DROPOUT:
        factor = _dropout_scale(b, head, pos_q, pos_k, seed_lo, seed_hi, drop_threshold, inv_keep)
    else:
        factor = 1.0
    if MASKED:
        ok = _allowed(
            pos_q, pos_k, c, h, max_attn_len, CAUSAL, HAS_CTX, HAS_TARGETS, HAS_MAX_ATTN_LEN
        )
        factor = tl.where(ok, factor, 0.0)
    return factor


@triton.jit
def _sigmoid_of_scaled(qk, neg_alpha_log2e, FAST_MATH: tl.constexpr):
    """sigmoid(alpha * qk) = 1 / (1 + 2**(-alpha * log2(e) * qk)): one multiplication, one
    exp2, one addition and one reciprocal per element (approximate ones on GPUs)."""
    return fast_reciprocal(1.0 + fast_exp2(qk * neg_alpha_log2e, FAST_MATH), FAST_MATH)


@triton.jit
def _load_tile(ptrs, row_ok, col_ok, MASK_ROWS: tl.constexpr, FULL_D: tl.constexpr):
    """A tile of rows: rows where ``row_ok`` is False read as 0 (MASK_ROWS only: the callers
    leave it off where every row is in the sequence), and so do columns where ``col_ok`` is
    False (unless FULL_D: the head dimension fills the block)."""
    if MASK_ROWS:
        if FULL_D:
            return tl.load(ptrs, mask=row_ok[:, None], other=0.0)
        return tl.load(ptrs, mask=row_ok[:, None] & col_ok[None, :], other=0.0)
    if FULL_D:
        return tl.load(ptrs)
    return tl.load(ptrs, mask=col_ok[None, :], other=0.0)


@triton.jit
def _first_target(c, h, HAS_CTX: tl.constexpr):
    """The position of the first target (the sequence's length without targets), the first
    position of rank h."""
    if HAS_CTX:
        return h + c - 1
    return h


@triton.jit
def _unmasked_key_end(m0, lo, c, h, BLOCK_N: tl.constexpr, HAS_CTX: tl.constexpr):
    """Causal, without max_attn_len: the end of the key blocks [lo, end) that every query from
    m0 on attends whole: the keys before m0 and before the first target (a key of rank r < h
    is seen by every later query, of rank r' > r, or a contextual one). A sequence whose
    contextual rows and targets leave no rank (h <= 0) gets none (lo)."""
    end = (tl.minimum(m0, _first_target(c, h, HAS_CTX)) // BLOCK_N) * BLOCK_N
    return tl.where(h > 0, tl.maximum(end, lo), lo)


# --------------------------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------------------------
@triton.jit
def _fwd_tile(
    acc,
    q,
    K,
    V,
    k_tile,
    v_tile,
    start_n,
    offs_m,
    dqk_ok,
    dv_ok,
    b,
    head,
    n,
    c,
    h,
    max_attn_len,
    seed_lo,
    seed_hi,
    drop_threshold,
    inv_keep,
    neg_alpha_log2e,
    stride_kt,
    stride_vt,
    CAUSAL: tl.constexpr,
    HAS_CTX: tl.constexpr,
    HAS_TARGETS: tl.constexpr,
    HAS_MAX_ATTN_LEN: tl.constexpr,
    HAS_DROPOUT: tl.constexpr,
    BLOCK_N: tl.constexpr,
    FULL_DQK: tl.constexpr,
    FULL_DV: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    INTERPRET_BF16: tl.constexpr,
    FAST_MATH: tl.constexpr,
    MASKED: tl.constexpr,
):
    """acc + (silu(alpha q k^T) / alpha, times the pair factors) @ v over keys
    [start_n, start_n + BLOCK_N); alpha / max_seq_len is applied once, after the loop.
    MASKED: the tile holds pairs the mask refuses, or keys past the sequence."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    factor = _pair_factor(
        offs_m[:, None], offs_n[None, :], b, head, c, h, max_attn_len, seed_lo, seed_hi,
        drop_threshold, inv_keep, CAUSAL, HAS_CTX, HAS_TARGETS, HAS_MAX_ATTN_LEN, HAS_DROPOUT,
        MASKED,
    )  # fmt: skip
    key_ok = offs_n < n
    k = _load_tile(K + start_n * stride_kt + k_tile, key_ok, dqk_ok, MASKED, FULL_DQK)
    qk = dot(q, tl.trans(k), DOT_PRECISION, INTERPRET_BF16)
    w = qk * _sigmoid_of_scaled(qk, neg_alpha_log2e, FAST_MATH) * factor
    v = _load_tile(V + start_n * stride_vt + v_tile, key_ok, dv_ok, MASKED, FULL_DV)
    return acc + dot(cast(w, v.dtype, INTERPRET_BF16), v, DOT_PRECISION, INTERPRET_BF16)


@triton.jit(do_not_specialize=_DROPOUT_SEEDS)
def _hstu_attn_fwd_kernel(
    Q,
    K,
    V,
    Out,
    seq_offsets,
    num_targets,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_ot,
    stride_oh,
    alpha,
    inv_max_seq_len,
    max_attn_len,
    c,
    ATTN_DIM,
    HIDDEN_DIM,
    seed_lo,
    seed_hi,
    drop_threshold,
    inv_keep,
    CAUSAL: tl.constexpr,
    HAS_CTX: tl.constexpr,
    HAS_TARGETS: tl.constexpr,
    HAS_MAX_ATTN_LEN: tl.constexpr,
    HAS_DROPOUT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_DQK: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    FULL_DQK: tl.constexpr,
    FULL_DV: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    INTERPRET_BF16: tl.constexpr,
    FAST_MATH: tl.constexpr,
):
    head, b, seq_start, n, h, m0 = _program_block(
        seq_offsets, num_targets, c, BLOCK_M, HAS_CTX, HAS_TARGETS
    )
    if m0 < n:
        # Scalar (64-bit) offset to the sequence and head; tile offsets below stay 32-bit and
        # are loop-invariant: a key block is a scalar step from the first.
        Q += seq_start * stride_qt + head * stride_qh
        K += seq_start * stride_kt + head * stride_kh
        V += seq_start * stride_vt + head * stride_vh
        Out += seq_start * stride_ot + head * stride_oh
        offs_m = m0 + tl.arange(0, BLOCK_M)
        offs_dqk = tl.arange(0, BLOCK_DQK)
        offs_dv = tl.arange(0, BLOCK_DV)
        dqk_ok = offs_dqk < ATTN_DIM
        dv_ok = offs_dv < HIDDEN_DIM
        q = _load_tile(
            Q + offs_m[:, None] * stride_qt + offs_dqk[None, :], offs_m < n, dqk_ok, True,
            FULL_DQK,
        )  # fmt: skip
        rows = tl.arange(0, BLOCK_N)
        k_tile = rows[:, None] * stride_kt + offs_dqk[None, :]
        v_tile = rows[:, None] * stride_vt + offs_dv[None, :]
        neg_alpha_log2e = alpha * -1.4426950408889634
        acc = tl.full([BLOCK_M, BLOCK_DV], 0.0, dtype=tl.float32)
        lo, hi = _key_range(
            m0, n, c, h, max_attn_len, BLOCK_M, BLOCK_N, CAUSAL, HAS_CTX, HAS_TARGETS,
            HAS_MAX_ATTN_LEN,
        )  # fmt: skip
        split = lo
        if CAUSAL and not HAS_MAX_ATTN_LEN:
            split = _unmasked_key_end(m0, lo, c, h, BLOCK_N, HAS_CTX)
        # Keys [lo, split) are attended by every row of the block: no mask; the block's
        # diagonal, the targets and the keys past the sequence are masked. The phases are
        # unrolled at compile time: two loops, each with its own tile code.
        for phase in tl.static_range(2):
            if phase == 0:
                start, end = lo, split
            else:
                start, end = split, hi
            for start_n in range(start, end, BLOCK_N):
                acc = _fwd_tile(
                    acc, q, K, V, k_tile, v_tile, start_n, offs_m, dqk_ok, dv_ok, b, head, n, c,
                    h, max_attn_len, seed_lo, seed_hi, drop_threshold, inv_keep,
                    neg_alpha_log2e, stride_kt, stride_vt, CAUSAL, HAS_CTX, HAS_TARGETS,
                    HAS_MAX_ATTN_LEN, HAS_DROPOUT, BLOCK_N, FULL_DQK, FULL_DV, DOT_PRECISION,
                    INTERPRET_BF16, FAST_MATH, phase == 1,
                )  # fmt: skip
        acc *= alpha * inv_max_seq_len
        tl.store(
            Out + offs_m[:, None] * stride_ot + offs_dv[None, :],
            cast(acc, Out.dtype.element_ty, INTERPRET_BF16),
            mask=(offs_m[:, None] < n) & dv_ok[None, :],
        )


# --------------------------------------------------------------------------------------------
# Backward: a kernel for dk, dv per key block, a kernel for dq per query block
# --------------------------------------------------------------------------------------------
@triton.jit
def _silu_grad(dw, qk, sig, alpha):
    """d silu(z) / dz at z = alpha * qk, times dw: sig + z * sig * (1 - sig), written as
    sig + (qk * sig) * (alpha - alpha * sig) (two fused multiply-adds)."""
    return dw * ((qk * sig) * (alpha - alpha * sig) + sig)


@triton.jit
def _dkdv_tile(
    dk,
    dv,
    k,
    v,
    Q,
    DO,
    q_tile,
    do_tile,
    start_m,
    row_hi,
    offs_n,
    dqk_ok,
    dv_ok,
    b,
    head,
    c,
    h,
    max_attn_len,
    seed_lo,
    seed_hi,
    drop_threshold,
    inv_keep,
    alpha,
    neg_alpha_log2e,
    stride_qt,
    stride_dot,
    CAUSAL: tl.constexpr,
    HAS_CTX: tl.constexpr,
    HAS_TARGETS: tl.constexpr,
    HAS_MAX_ATTN_LEN: tl.constexpr,
    HAS_DROPOUT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    FULL_DQK: tl.constexpr,
    FULL_DV: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    INTERPRET_BF16: tl.constexpr,
    FAST_MATH: tl.constexpr,
    MASKED: tl.constexpr,
):
    """(dk, dv) plus the contributions of query rows [start_m, start_m + BLOCK_M) (those below
    row_hi), in transposed tiles (keys by queries), all without the factor alpha /
    max_seq_len, which the caller applies once. MASKED: as in _fwd_tile."""
    offs_m = start_m + tl.arange(0, BLOCK_M)
    factor_t = _pair_factor(
        offs_m[None, :], offs_n[:, None], b, head, c, h, max_attn_len, seed_lo, seed_hi,
        drop_threshold, inv_keep, CAUSAL, HAS_CTX, HAS_TARGETS, HAS_MAX_ATTN_LEN, HAS_DROPOUT,
        MASKED,
    )  # fmt: skip
    row_ok = offs_m < row_hi
    q = _load_tile(Q + start_m * stride_qt + q_tile, row_ok, dqk_ok, MASKED, FULL_DQK)
    do = _load_tile(DO + start_m * stride_dot + do_tile, row_ok, dv_ok, MASKED, FULL_DV)
    qk_t = dot(k, tl.trans(q), DOT_PRECISION, INTERPRET_BF16)
    sig_t = _sigmoid_of_scaled(qk_t, neg_alpha_log2e, FAST_MATH)
    w_t = qk_t * sig_t * factor_t
    dv += dot(cast(w_t, do.dtype, INTERPRET_BF16), do, DOT_PRECISION, INTERPRET_BF16)
    dw_t = dot(v, tl.trans(do), DOT_PRECISION, INTERPRET_BF16)
    dz_t = _silu_grad(dw_t, qk_t, sig_t, alpha) * factor_t
    dk += dot(cast(dz_t, q.dtype, INTERPRET_BF16), q, DOT_PRECISION, INTERPRET_BF16)
    return dk, dv


@triton.jit(do_not_specialize=_DROPOUT_SEEDS)
def _hstu_attn_bwd_dkdv_kernel(
    Q,
    K,
    V,
    DO,
    DK,
    DV,
    seq_offsets,
    num_targets,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_dot,
    stride_doh,
    stride_dkt,
    stride_dkh,
    stride_dvt,
    stride_dvh,
    alpha,
    inv_max_seq_len,
    max_attn_len,
    c,
    ATTN_DIM,
    HIDDEN_DIM,
    seed_lo,
    seed_hi,
    drop_threshold,
    inv_keep,
    CAUSAL: tl.constexpr,
    HAS_CTX: tl.constexpr,
    HAS_TARGETS: tl.constexpr,
    HAS_MAX_ATTN_LEN: tl.constexpr,
    HAS_DROPOUT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_DQK: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    FULL_DQK: tl.constexpr,
    FULL_DV: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    INTERPRET_BF16: tl.constexpr,
    FAST_MATH: tl.constexpr,
):
    head, b, seq_start, n, h, n0 = _program_block(
        seq_offsets, num_targets, c, BLOCK_N, HAS_CTX, HAS_TARGETS
    )
    if n0 < n:
        # Scalar (64-bit) offset to the sequence and head; tile offsets below stay 32-bit.
        Q += seq_start * stride_qt + head * stride_qh
        K += seq_start * stride_kt + head * stride_kh
        V += seq_start * stride_vt + head * stride_vh
        DO += seq_start * stride_dot + head * stride_doh
        DK += seq_start * stride_dkt + head * stride_dkh
        DV += seq_start * stride_dvt + head * stride_dvh
        offs_n = n0 + tl.arange(0, BLOCK_N)
        offs_dqk = tl.arange(0, BLOCK_DQK)
        offs_dv = tl.arange(0, BLOCK_DV)
        dqk_ok = offs_dqk < ATTN_DIM
        dv_ok = offs_dv < HIDDEN_DIM
        key_ok = offs_n < n
        k = _load_tile(
            K + offs_n[:, None] * stride_kt + offs_dqk[None, :], key_ok, dqk_ok, True, FULL_DQK
        )
        v = _load_tile(
            V + offs_n[:, None] * stride_vt + offs_dv[None, :], key_ok, dv_ok, True, FULL_DV
        )
        rows = tl.arange(0, BLOCK_M)
        q_tile = rows[:, None] * stride_qt + offs_dqk[None, :]
        do_tile = rows[:, None] * stride_dot + offs_dv[None, :]
        neg_alpha_log2e = alpha * -1.4426950408889634
        # Query rows that may attend these keys, apart from the contextual rows: [lo, hi).
        n_last = tl.minimum(n0 + BLOCK_N, n) - 1
        if CAUSAL:
            lo = n0  # rank(query) > rank(key) implies query > key
        else:
            lo = n0 * 0
        hi = n + 0 * n0
        if HAS_MAX_ATTN_LEN:
            lo = tl.maximum(
                lo,
                _first_pos_with_rank_ge(
                    _rank(n0, c, h, HAS_CTX, HAS_TARGETS) - max_attn_len, c, HAS_CTX
                ),
            )
            hi = _end_pos_with_rank_le(
                _rank(n_last, c, h, HAS_CTX, HAS_TARGETS) + max_attn_len,
                c,
                h,
                n,
                HAS_CTX,
                HAS_TARGETS,
            )
        lo = (lo // BLOCK_M) * BLOCK_M
        # Query blocks [lo, first) hold the diagonal, [first, last) attend every key of the
        # block (when it holds no target) and lie inside the sequence: no mask there.
        first = hi
        last = hi
        if CAUSAL and not HAS_MAX_ATTN_LEN:
            # A key block wholly before the first target (so inside the sequence) is attended
            # whole by every later query (see _unmasked_key_end).
            whole = (n0 + BLOCK_N <= _first_target(c, h, HAS_CTX)) & (h > 0)
            first = tl.where(
                whole, tl.minimum((n0 + BLOCK_N + BLOCK_M - 1) // BLOCK_M * BLOCK_M, hi), hi
            )
            last = tl.where(whole, tl.maximum((n // BLOCK_M) * BLOCK_M, first), hi)
        dk = tl.full([BLOCK_N, BLOCK_DQK], 0.0, dtype=tl.float32)
        dv = tl.full([BLOCK_N, BLOCK_DV], 0.0, dtype=tl.float32)
        # Masked [lo, first), unmasked [first, last), masked [last, hi): unrolled.
        for phase in tl.static_range(3):
            if phase == 0:
                start, end = lo, first
            elif phase == 1:
                start, end = first, last
            else:
                start, end = last, hi
            for start_m in range(start, end, BLOCK_M):
                dk, dv = _dkdv_tile(
                    dk, dv, k, v, Q, DO, q_tile, do_tile, start_m, hi, offs_n, dqk_ok, dv_ok, b,
                    head, c, h, max_attn_len, seed_lo, seed_hi, drop_threshold, inv_keep, alpha,
                    neg_alpha_log2e, stride_qt, stride_dot, CAUSAL, HAS_CTX, HAS_TARGETS,
                    HAS_MAX_ATTN_LEN, HAS_DROPOUT, BLOCK_M, FULL_DQK, FULL_DV, DOT_PRECISION,
                    INTERPRET_BF16, FAST_MATH, phase != 1,
                )  # fmt: skip
        if HAS_CTX:
            # The contextual rows below lo, which see every non-target key.
            for start_m in range(0, tl.minimum(tl.minimum(lo, c), n), BLOCK_M):
                dk, dv = _dkdv_tile(
                    dk, dv, k, v, Q, DO, q_tile, do_tile, start_m,
                    tl.minimum(tl.minimum(lo, c), n), offs_n, dqk_ok, dv_ok, b, head, c, h,
                    max_attn_len, seed_lo, seed_hi, drop_threshold, inv_keep, alpha,
                    neg_alpha_log2e, stride_qt, stride_dot, CAUSAL, HAS_CTX, HAS_TARGETS,
                    HAS_MAX_ATTN_LEN, HAS_DROPOUT, BLOCK_M, FULL_DQK, FULL_DV, DOT_PRECISION,
                    INTERPRET_BF16, FAST_MATH, True,
                )  # fmt: skip
        scale = alpha * inv_max_seq_len
        tl.store(
            DK + offs_n[:, None] * stride_dkt + offs_dqk[None, :],
            cast(dk * scale, DK.dtype.element_ty, INTERPRET_BF16),
            mask=key_ok[:, None] & dqk_ok[None, :],
        )
        tl.store(
            DV + offs_n[:, None] * stride_dvt + offs_dv[None, :],
            cast(dv * scale, DV.dtype.element_ty, INTERPRET_BF16),
            mask=key_ok[:, None] & dv_ok[None, :],
        )


# --------------------------------------------------------------------------------------------
# Backward: dq per query block
# --------------------------------------------------------------------------------------------
@triton.jit
def _dq_tile(
    dq,
    q,
    do,
    K,
    V,
    k_tile,
    v_tile,
    start_n,
    offs_m,
    dqk_ok,
    dv_ok,
    b,
    head,
    n,
    c,
    h,
    max_attn_len,
    seed_lo,
    seed_hi,
    drop_threshold,
    inv_keep,
    alpha,
    neg_alpha_log2e,
    stride_kt,
    stride_vt,
    CAUSAL: tl.constexpr,
    HAS_CTX: tl.constexpr,
    HAS_TARGETS: tl.constexpr,
    HAS_MAX_ATTN_LEN: tl.constexpr,
    HAS_DROPOUT: tl.constexpr,
    BLOCK_N: tl.constexpr,
    FULL_DQK: tl.constexpr,
    FULL_DV: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    INTERPRET_BF16: tl.constexpr,
    FAST_MATH: tl.constexpr,
    MASKED: tl.constexpr,
):
    """dq plus the contributions of keys [start_n, start_n + BLOCK_N), without the factor
    alpha / max_seq_len. MASKED: as in _fwd_tile."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    factor = _pair_factor(
        offs_m[:, None], offs_n[None, :], b, head, c, h, max_attn_len, seed_lo, seed_hi,
        drop_threshold, inv_keep, CAUSAL, HAS_CTX, HAS_TARGETS, HAS_MAX_ATTN_LEN, HAS_DROPOUT,
        MASKED,
    )  # fmt: skip
    key_ok = offs_n < n
    k = _load_tile(K + start_n * stride_kt + k_tile, key_ok, dqk_ok, MASKED, FULL_DQK)
    v = _load_tile(V + start_n * stride_vt + v_tile, key_ok, dv_ok, MASKED, FULL_DV)
    qk = dot(q, tl.trans(k), DOT_PRECISION, INTERPRET_BF16)
    sig = _sigmoid_of_scaled(qk, neg_alpha_log2e, FAST_MATH)
    dw = dot(do, tl.trans(v), DOT_PRECISION, INTERPRET_BF16)
    dz = _silu_grad(dw, qk, sig, alpha) * factor
    return dq + dot(cast(dz, k.dtype, INTERPRET_BF16), k, DOT_PRECISION, INTERPRET_BF16)


@triton.jit(do_not_specialize=_DROPOUT_SEEDS)
def _hstu_attn_bwd_dq_kernel(
    Q,
    K,
    V,
    DO,
    DQ,
    seq_offsets,
    num_targets,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_dot,
    stride_doh,
    stride_dqt,
    stride_dqh,
    alpha,
    inv_max_seq_len,
    max_attn_len,
    c,
    ATTN_DIM,
    HIDDEN_DIM,
    seed_lo,
    seed_hi,
    drop_threshold,
    inv_keep,
    CAUSAL: tl.constexpr,
    HAS_CTX: tl.constexpr,
    HAS_TARGETS: tl.constexpr,
    HAS_MAX_ATTN_LEN: tl.constexpr,
    HAS_DROPOUT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_DQK: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    FULL_DQK: tl.constexpr,
    FULL_DV: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    INTERPRET_BF16: tl.constexpr,
    FAST_MATH: tl.constexpr,
):
    head, b, seq_start, n, h, m0 = _program_block(
        seq_offsets, num_targets, c, BLOCK_M, HAS_CTX, HAS_TARGETS
    )
    if m0 < n:
        # Scalar (64-bit) offset to the sequence and head; tile offsets below stay 32-bit.
        Q += seq_start * stride_qt + head * stride_qh
        K += seq_start * stride_kt + head * stride_kh
        V += seq_start * stride_vt + head * stride_vh
        DO += seq_start * stride_dot + head * stride_doh
        DQ += seq_start * stride_dqt + head * stride_dqh
        offs_m = m0 + tl.arange(0, BLOCK_M)
        offs_dqk = tl.arange(0, BLOCK_DQK)
        offs_dv = tl.arange(0, BLOCK_DV)
        dqk_ok = offs_dqk < ATTN_DIM
        dv_ok = offs_dv < HIDDEN_DIM
        row_ok = offs_m < n
        q = _load_tile(
            Q + offs_m[:, None] * stride_qt + offs_dqk[None, :], row_ok, dqk_ok, True, FULL_DQK
        )
        do = _load_tile(
            DO + offs_m[:, None] * stride_dot + offs_dv[None, :], row_ok, dv_ok, True, FULL_DV
        )
        rows = tl.arange(0, BLOCK_N)
        k_tile = rows[:, None] * stride_kt + offs_dqk[None, :]
        v_tile = rows[:, None] * stride_vt + offs_dv[None, :]
        neg_alpha_log2e = alpha * -1.4426950408889634
        dq = tl.full([BLOCK_M, BLOCK_DQK], 0.0, dtype=tl.float32)
        lo, hi = _key_range(
            m0, n, c, h, max_attn_len, BLOCK_M, BLOCK_N, CAUSAL, HAS_CTX, HAS_TARGETS,
            HAS_MAX_ATTN_LEN,
        )  # fmt: skip
        split = lo
        if CAUSAL and not HAS_MAX_ATTN_LEN:
            split = _unmasked_key_end(m0, lo, c, h, BLOCK_N, HAS_CTX)
        # As in the forward: unmasked keys [lo, split), then masked [split, hi), unrolled.
        for phase in tl.static_range(2):
            if phase == 0:
                start, end = lo, split
            else:
                start, end = split, hi
            for start_n in range(start, end, BLOCK_N):
                dq = _dq_tile(
                    dq, q, do, K, V, k_tile, v_tile, start_n, offs_m, dqk_ok, dv_ok, b, head, n,
                    c, h, max_attn_len, seed_lo, seed_hi, drop_threshold, inv_keep, alpha,
                    neg_alpha_log2e, stride_kt, stride_vt, CAUSAL, HAS_CTX, HAS_TARGETS,
                    HAS_MAX_ATTN_LEN, HAS_DROPOUT, BLOCK_N, FULL_DQK, FULL_DV, DOT_PRECISION,
                    INTERPRET_BF16, FAST_MATH, phase == 1,
                )  # fmt: skip
        tl.store(
            DQ + offs_m[:, None] * stride_dqt + offs_dqk[None, :],
            cast(dq * (alpha * inv_max_seq_len), DQ.dtype.element_ty, INTERPRET_BF16),
            mask=row_ok[:, None] & dqk_ok[None, :],
        )


# --------------------------------------------------------------------------------------------
# Launchers
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class BlockConfig:
    """Tile sizes (powers of 2, >= 16) and warps of the three kernels.

    ``fwd``: forward, tiles of BLOCK_M queries by BLOCK_N keys. ``dkdv``: program per key block
    of ``dkdv_block_n`` rows, looping over query blocks of ``dkdv_block_m``. ``dq``: program per
    query block of ``dq_block_m`` rows, looping over key blocks of ``dq_block_n``.
    """

    fwd_block_m: int = 64
    fwd_block_n: int = 32
    dkdv_block_m: int = 32
    dkdv_block_n: int = 32
    dq_block_m: int = 32
    dq_block_n: int = 32
    fwd_warps: int = 4
    dkdv_warps: int = 4
    dq_warps: int = 4
    num_stages: int = 2

    def __post_init__(self) -> None:
        tiles = tuple(f.name for f in dataclasses.fields(self) if f.name.endswith(("_m", "_n")))
        _common.check_power_of_2(self, tiles)


def default_block_config(
    attn_dim: int, hidden_dim: int, dtype: torch.dtype, dropout: bool = False
) -> BlockConfig:
    """The tiles used when ``block_config`` is not given.

    Under the interpreter: 16 x 16 tiles (many blocks per sequence, which is what the tests
    want). On a GPU: not autotuned. For head dims in (64, 128], 16-bit and no dropout, the
    tiles are the fastest of a sweep on an H100 at the yambda-5b shape (32 sequences of 4,095
    tokens, 4 heads of 128, bf16; ``bench_triton_attention.py --sweep``, one kernel changed at
    a time): forward 64 x 32 with 4 warps (3.28 ms against 3.80 for the 128 x 64 before), dk/dv
    32 x 64 with 4 warps (7.3 ms against 10.1 for 64 x 32; no spills on sm_90 where the old
    tile spilled 8 bytes with Triton 3.6); dq kept (no variant was faster; it spills 8 bytes).
    The other tiles are not yet timed: ones for which ``ptxas`` reports no local memory (no
    register spills) on sm_90 with bfloat16. For head dims <= 64 the shapes of Triton's
    fused-attention tutorial (tall query tiles forward and for dq, tall key tiles for dk/dv);
    above 128, short key tiles for dk/dv, whose two float32 accumulators spill otherwise.
    float32 (exact IEEE products, no tensor cores) gets small tiles.
    ``dropout``: the Philox state (six 32-bit words per weight while it is drawn) needs more
    registers; for head dims <= 128 the forward (and for <= 64 the dk/dv kernel) gets more
    warps or smaller tiles, again without spills on sm_90. (Head dims > 128: the dq kernel
    spills a few bytes with or without dropout.)
    """
    if INTERPRETED:
        return BlockConfig(16, 16, 16, 16, 16, 16, 1, 1, 1, num_stages=1)
    d = max(attn_dim, hidden_dim)
    if dtype == torch.float32:
        return BlockConfig(32, 32, 32, 32, 32, 32, 4, 4, 4)
    if d <= 64:
        if dropout:
            return BlockConfig(128, 64, 32, 128, 128, 64, 8, 8, 8)
        return BlockConfig(128, 64, 64, 128, 128, 64, 4, 8, 8)
    if d <= 128:
        if dropout:
            return BlockConfig(128, 32, 64, 32, 64, 64, 8, 4, 4)
        return BlockConfig(64, 32, 32, 64, 64, 64, 4, 4, 4)
    return BlockConfig(64, 64, 64, 32, 32, 32, 8, 8, 4)


def _block_d(dim: int) -> int:
    return max(16, triton.next_power_of_2(dim))


def _check_tile_offsets(max_len: int, *tensors: torch.Tensor) -> None:
    """The kernels address rows within one sequence with 32-bit offsets (tiles overhang the
    sequence by fewer than 256 rows; a row spans all heads)."""
    for x in tensors:
        _common.check_32bit_rows(_OP, max_len, x.stride(0), 256, x.stride(1) * x.shape[1])


def _dropout_args(dropout_pr: float, seed: int) -> tuple[int, int, int, float]:
    """(seed_lo, seed_hi, drop_threshold, inv_keep): the kernels' dropout scalars.

    Every value has a fixed Triton type whatever p and the seed (int32, int32, int32, fp32), so
    no call compiles a new variant. A weight is kept when the top DROPOUT_THRESHOLD_BITS of its
    random word are >= drop_threshold = round(p * 2**bits): keep probability 1 - p up to
    2**-25; p = 1 drops everything (and inv_keep = 0, not inf).
    """
    threshold = round(dropout_pr * (1 << _THRESHOLD_BITS))
    inv_keep = 1.0 / (1.0 - dropout_pr) if dropout_pr < 1.0 else 0.0
    return *_common.seed_words(seed), threshold, inv_keep


def draw_dropout_seed() -> int:
    """A 63-bit seed from torch's default (CPU) generator, so ``torch.manual_seed`` fixes it.

    Drawn on the host: no GPU synchronisation, and the GPU generators' states are untouched.
    """
    return int(_draw_seed_tensor())


def _draw_seed_tensor() -> torch.Tensor:
    """:func:`draw_dropout_seed`'s seed as an int64 CPU scalar (what the op takes, so that a
    traced call reads no value)."""
    return torch.randint(0, 2**63 - 1, (), dtype=torch.int64)


def dropout_keep_mask(
    seed: int,
    seq_offsets: torch.Tensor,
    heads: int,
    dropout_pr: float,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The dropout mask the kernels use for ``seed``: bool [B, heads, n, n] (query, key).

    ``n`` is the longest sequence of the batch; entries beyond a sequence's length are False.
    A debug and test helper: the kernels never materialise the mask. The attention's output
    with ``dropout_seed=seed`` is the reference formula with ``F.dropout`` replaced by
    ``weights * mask / (1 - dropout_pr)``.
    """
    _check_dropout_pr(dropout_pr)
    device = torch.device(device) if device is not None else seq_offsets.device
    seq_offsets = seq_offsets.to(device).contiguous()
    batch = seq_offsets.numel() - 1
    lengths = seq_offsets[1:] - seq_offsets[:-1]
    n = int(lengths.max()) if batch else 0
    mask = torch.zeros((batch, heads, n, n), dtype=torch.int8, device=device)
    if n == 0 or heads == 0:
        return mask.bool()
    seed_lo, seed_hi, threshold, _ = _dropout_args(dropout_pr, seed)
    block_m = block_n = 64  # large tiles under the interpreter too, where each op is costly
    grid = (triton.cdiv(n, block_m), heads, batch)
    _dropout_mask_kernel[grid](
        mask,
        seq_offsets,
        mask.stride(0),
        mask.stride(1),
        mask.stride(2),
        seed_lo,
        seed_hi,
        threshold,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
    )
    return mask.bool()


@dataclasses.dataclass(frozen=True)
class _Problem:
    """Scalar arguments shared by the three kernels."""

    seq_offsets: torch.Tensor
    num_targets: torch.Tensor | None
    max_len: int  # longest sequence of the batch (sets the grid)
    max_seq_len: int
    alpha: float
    causal: bool
    max_attn_len: int
    contextual_seq_len: int
    config: BlockConfig
    dropout_pr: float = 0.0  # 0 unless training
    dropout_seed: int = 0

    def kernel_args(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *others) -> tuple:
        """The positional arguments of a kernel: q, k, v and its other tensors, the offsets and
        targets, the (row, head) strides of each tensor, then the scalars."""
        tensors = (q, k, v, *others)
        # num_targets is never read when HAS_TARGETS is False; any tensor of the device will do.
        targets = self.num_targets if self.num_targets is not None else self.seq_offsets
        return (
            *tensors,
            self.seq_offsets,
            targets,
            *(stride for x in tensors for stride in (x.stride(0), x.stride(1))),
            float(self.alpha),
            1.0 / float(self.max_seq_len),
            int(self.max_attn_len),
            int(self.contextual_seq_len),
            q.shape[2],
            v.shape[2],
            *_dropout_args(self.dropout_pr, self.dropout_seed),
        )

    def flags(self, dtype: torch.dtype, attn_dim: int, hidden_dim: int) -> dict:
        return {
            "CAUSAL": bool(self.causal),
            "HAS_CTX": self.contextual_seq_len > 0,
            "HAS_TARGETS": self.num_targets is not None,
            # A bound at least as long as every sequence bounds nothing.
            "HAS_MAX_ATTN_LEN": 0 < self.max_attn_len < self.max_len,
            "HAS_DROPOUT": self.dropout_pr > 0.0,
            "BLOCK_DQK": _block_d(attn_dim),
            "BLOCK_DV": _block_d(hidden_dim),
            # Head dims that fill their blocks need no column masks.
            "FULL_DQK": attn_dim == _block_d(attn_dim),
            "FULL_DV": hidden_dim == _block_d(hidden_dim),
            "FAST_MATH": _common.fast_math(INTERPRETED),
            # float32 inputs: exact float32 products (no TF32), like the reference. 16-bit
            # inputs: the backend's default (naming "tf32" would be refused by AMD backends).
            "DOT_PRECISION": "ieee" if dtype == torch.float32 else None,
            "INTERPRET_BF16": INTERPRETED and dtype == torch.bfloat16,
            "num_stages": self.config.num_stages,
        }


def hstu_attention_fwd(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, p: _Problem
) -> torch.Tensor:
    """Forward launcher: q, k [total, heads, attn_dim], v [total, heads, hidden_dim]."""
    total, heads, attn_dim = q.shape
    hidden_dim = v.shape[2]
    out = torch.empty((total, heads, hidden_dim), dtype=v.dtype, device=v.device)
    batch = p.seq_offsets.numel() - 1
    if total == 0 or heads == 0 or p.max_len == 0 or hidden_dim == 0:
        return out.zero_()
    cfg = p.config
    grid = (triton.cdiv(p.max_len, cfg.fwd_block_m), heads, batch)
    _hstu_attn_fwd_kernel[grid](
        *p.kernel_args(q, k, v, out),
        BLOCK_M=cfg.fwd_block_m,
        BLOCK_N=cfg.fwd_block_n,
        num_warps=cfg.fwd_warps,
        **p.flags(q.dtype, attn_dim, hidden_dim),
    )
    return out


def hstu_attention_bwd(
    dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, p: _Problem
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Backward launchers: (dq, dk, dv) from the output gradient, deterministic."""
    total, heads, attn_dim = q.shape
    hidden_dim = v.shape[2]
    dq = torch.empty_like(q, memory_format=torch.contiguous_format)
    dk = torch.empty_like(k, memory_format=torch.contiguous_format)
    dv = torch.empty_like(v, memory_format=torch.contiguous_format)
    batch = p.seq_offsets.numel() - 1
    if total == 0 or heads == 0 or p.max_len == 0 or attn_dim == 0 or hidden_dim == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    dout = _common.last_dim_contiguous(dout)
    _check_tile_offsets(p.max_len, dout)
    cfg = p.config
    flags = p.flags(q.dtype, attn_dim, hidden_dim)
    grid = (triton.cdiv(p.max_len, cfg.dkdv_block_n), heads, batch)
    _hstu_attn_bwd_dkdv_kernel[grid](
        *p.kernel_args(q, k, v, dout, dk, dv),
        BLOCK_M=cfg.dkdv_block_m,
        BLOCK_N=cfg.dkdv_block_n,
        num_warps=cfg.dkdv_warps,
        **flags,
    )
    grid = (triton.cdiv(p.max_len, cfg.dq_block_m), heads, batch)
    _hstu_attn_bwd_dq_kernel[grid](
        *p.kernel_args(q, k, v, dout, dq),
        BLOCK_M=cfg.dq_block_m,
        BLOCK_N=cfg.dq_block_n,
        num_warps=cfg.dq_warps,
        **flags,
    )
    return dq, dk, dv


def triton_hstu_mha(
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
    *,
    block_config: BlockConfig | None = None,
    dropout_seed: int | None = None,
) -> torch.Tensor:
    """Jagged HSTU attention with the Triton kernels; arguments as ``hstu_ops.hstu_mha``.

    float16, bfloat16 and float32 inputs, accumulated in float32. ``block_config`` overrides
    :func:`default_block_config`.

    Dropout (``dropout_pr > 0`` while ``training``) is the reference's ``F.dropout`` on the
    masked weights: each weight is kept with probability 1 - dropout_pr and scaled by
    1 / (1 - dropout_pr). The mask comes from Philox keyed by ``dropout_seed`` (64 bits) and
    counted by (sequence, head, query, key), and is regenerated by the backward, never stored.
    ``dropout_seed=None`` draws the seed from torch's default generator
    (:func:`draw_dropout_seed`), so ``torch.manual_seed`` makes a run reproducible; the
    generator is not touched when dropout is off. :func:`dropout_keep_mask` returns the mask
    of a seed.
    """
    # Shapes, dtypes and scalars here; the offsets' and targets' values inside the op, where
    # they can be read (hstu_ops.triton_ops): no host synchronisation on this path.
    lengths = _check_inputs(
        max_seq_len, q, k, v, seq_offsets, dropout_pr, num_targets, max_attn_len,
        contextual_seq_len, values=False,
    )  # fmt: skip
    _common.check_float_dtype(_OP, q.dtype)
    _common.check_device(_OP, q.device, INTERPRETED)
    if not (q.device == k.device == v.device):
        raise ValueError(
            f"{_OP}: q, k, v must be on one device, got {q.device}, {k.device}, {v.device}"
        )
    _common.check_batch(_OP, lengths.numel())
    dropout = training and dropout_pr > 0.0
    seed = None
    if dropout:
        seed = (
            _draw_seed_tensor()
            if dropout_seed is None
            else torch.tensor(int(dropout_seed), dtype=torch.int64)
        )
    config = block_config or default_block_config(q.shape[2], v.shape[2], q.dtype, dropout)
    q, k, v = (_common.last_dim_contiguous(x) for x in (q, k, v))
    _check_tile_offsets(int(max_seq_len), q, k, v)
    return triton_ops.hstu_mha_fwd(
        q,
        k,
        v,
        seq_offsets.to(q.device).contiguous(),
        None if num_targets is None else num_targets.to(q.device).contiguous(),
        int(max_seq_len),
        float(alpha),
        bool(causal),
        float(dropout_pr) if dropout else 0.0,
        int(max_attn_len),
        int(contextual_seq_len),
        seed,
        list(dataclasses.astuple(config)),
    )
