"""Triton kernels of the HSTU output block: fused (layer | group) norm * u * dropout (op family 2).

Semantics are those of the PyTorch reference :mod:`hstu_ops.pytorch.pt_hstu_compute`: for attn
and u ``[N, W]``::

    y = u * norm(attn)                       # layer norm over W, or group norm per head
    y = cat([u, attn, y], dim=1)             # with concat_ux
    y = dropout(y, dropout_ratio)            # while training
    out = x + y @ output_weight              # hstu_compute_output only

computed in float32 and rounded to the activations' dtype once (y), like the reference.

Layout of the work:

* forward: one program per block of rows, the whole row (all heads) in registers, so the
  statistics, the product and the dropout are one pass over attn and u. The tile is
  ``[rows, groups, group width]``: one group of W columns for the layer norm, ``num_heads``
  groups of ``linear_dim`` for the group norm. The mean and 1/std of every (row, group) are saved
  for the backward (8 bytes per row and group).
* backward, deterministic, no atomics: a fixed number of programs, each looping over row blocks
  (block ``pid``, ``pid + programs``, ...). It rebuilds the normalised attn from the saved
  statistics, computes d attn and d u, and keeps its partial sums of the norm weight and bias
  gradients in registers; they are written once per program (a ``[programs, W]`` or
  ``[programs, heads]`` float32 buffer) and summed by torch afterwards.
* the output projection ``x + y @ output_weight`` and its gradients are matmuls (forward: the
  package's Triton addmm, :mod:`hstu_ops.mm`, on GPU tensors; backward: ``torch.mm``). They sit
  in the same ``torch.autograd.Function`` so that ``recompute_y_in_backward`` can drop y after
  the forward: the backward kernel then writes y again, bit for bit, for the weight gradient
  ``y^T @ dout``.

Dropout
-------
The masks come from a counter-based generator, Philox-4x32-10 (Salmon et al., "Parallel random
numbers: as easy as 1, 2, 3", SC 2011), written here from integer operations: a keyed bijection
of a 128-bit counter. Element ``(row, col)`` of part ``s`` of y (s = 0 for u, 1 for attn, 2 for
u * norm(attn); without concat_ux only part 2 exists) uses the counter ``(low word, high word of
row * W + col, s, 0)`` and the key (low, high word of the seed); it is kept when the top 24 bits
of the first output word, as a fraction of 2^24, are >= dropout_ratio, and kept values are
scaled by ``1 / (1 - dropout_ratio)``. So the three parts draw from separate streams (no part
reuses another's numbers, whatever W), a row's numbers never overlap another row's, the mask of
the product part does not depend on concat_ux, and the backward regenerates exactly the
forward's masks from the seed instead of storing them. The seed (62 bits) is drawn from torch's
default generator on the host when not given, so ``torch.manual_seed`` makes runs repeatable.
:func:`dropout_keep_mask` returns the mask of one part (for tests and debugging).

Importing this module imports ``triton``. As in :mod:`hstu_ops.triton.triton_hstu_attention`,
whether the kernels run compiled (CUDA/ROCm tensors) or in Triton's interpreter (CPU tensors) is
fixed when this module is imported, by ``TRITON_INTERPRET=1``: the kernels call only
``triton.language`` builtins and the package's own ``@triton.jit`` helpers (no ``tl.sum``,
``tl.rand``: the library's jit functions are fixed when ``triton`` itself is imported). The
generator and the sums are those of :mod:`hstu_ops.triton._common`, which the attention's
dropout draws from too (with its own counters).
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from hstu_ops import mm, norms
from hstu_ops._kernel import Kernel
from hstu_ops.pytorch.pt_hstu_compute import (
    check_compute_output_args,
    check_compute_uqvk_args,
    check_norm_mul_dropout_args,
    split_uvqk,
)
from hstu_ops.triton import _common
from hstu_ops.triton._common import cast, row_sum

# Under its own name: this module's philox4x32_10 is the host-side function that runs it.
from hstu_ops.triton._common import philox4x32_10 as _philox4x32_10

__all__ = [
    "DROPOUT_STREAMS",
    "INTERPRETED",
    "HSTUComputeOutputFunction",
    "NormMulDropoutFunction",
    "TileConfig",
    "default_tile_config",
    "dropout_keep_mask",
    "norm_mul_dropout_bwd",
    "norm_mul_dropout_fwd",
    "philox4x32_10",
    "triton_hstu_compute_output",
    "triton_hstu_compute_uqvk",
    "triton_norm_mul_dropout",
]

_OP_UQVK = "hstu_compute_uqvk"
_OP_OUTPUT = "hstu_compute_output"
_OP_NORM = "norm_mul_dropout"


INTERPRETED: bool = _common.kernel_module_mode(__name__)
"""Whether the kernels of this module were created for Triton's interpreter (CPU tensors)."""

DROPOUT_STREAMS = {"u": 0, "attn": 1, "y": 2}
"""Counter word 2 of each part of y: the part's own random stream."""


# --------------------------------------------------------------------------------------------
# Helpers: the random numbers, the tiles
# --------------------------------------------------------------------------------------------
@triton.jit
def _keep(elem, stream, seed_lo, seed_hi, dropout_ratio):
    """Dropout keep mask of the elements ``elem`` (int64 indices within one part) of a stream."""
    zero = (elem * 0).to(tl.uint32)
    c0 = elem.to(tl.uint32)  # the low word (truncation)
    c1 = (elem >> 32).to(tl.uint32)
    k0 = seed_lo.to(tl.uint32, bitcast=True)
    k1 = seed_hi.to(tl.uint32, bitcast=True)
    bits, _, _, _ = _philox4x32_10(c0, c1, zero + stream, zero, k0, k1)
    uniform = (bits >> 8).to(tl.float32) * (1.0 / 16777216.0)  # [0, 1) in steps of 2^-24
    return uniform >= dropout_ratio


@triton.jit
def _dropped(v, keep, scale, DROPOUT: tl.constexpr):
    if DROPOUT:
        v = tl.where(keep, v * scale, 0.0)
    return v


@triton.jit
def _tile(
    pid_rows,
    N,
    H,
    L,
    BLOCK_N: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_L: tl.constexpr,
):
    """Indices of a [rows, groups, group width] tile: (int64 rows, groups, columns, mask)."""
    rows = pid_rows * BLOCK_N + tl.arange(0, BLOCK_N)[:, None, None]
    groups = tl.arange(0, BLOCK_H)[None, :, None]
    cols = groups * L + tl.arange(0, BLOCK_L)[None, None, :]  # column within a part of y
    mask = (rows < N) & (groups < H) & (tl.arange(0, BLOCK_L)[None, None, :] < L)
    return rows.to(tl.int64), groups, cols, mask


@triton.jit
def _stat_offsets(pid_rows, N, H, BLOCK_N: tl.constexpr, BLOCK_H: tl.constexpr):
    """Offsets and mask of the [rows, groups] statistics (mean, 1/std) of a tile."""
    rows = pid_rows * BLOCK_N + tl.arange(0, BLOCK_N)[:, None]
    groups = tl.arange(0, BLOCK_H)[None, :]
    return rows.to(tl.int64) * H + groups, (rows < N) & (groups < H)


@triton.jit
def _norm_params(W, B, groups, cols, H, L, GROUP_NORM: tl.constexpr):
    """The affine weight and bias: one per group (group norm) or per column (layer norm)."""
    if GROUP_NORM:
        ok = groups < H
        w = tl.load(W + groups, mask=ok, other=0.0).to(tl.float32)
        b = tl.load(B + groups, mask=ok, other=0.0).to(tl.float32)
    else:
        ok = cols < L  # a single group: the column is the position in the row
        w = tl.load(W + cols, mask=ok, other=0.0).to(tl.float32)
        b = tl.load(B + cols, mask=ok, other=0.0).to(tl.float32)
    return w, b


@triton.jit
def _normalized(x, mean, rstd, mask, W, B, groups, cols, H, L, GROUP_NORM: tl.constexpr):
    """(xhat, xhat * weight + bias, weight) from the statistics. The forward and the backward
    both take y from here, so that the y the backward writes again is the forward's, bit for
    bit."""
    xhat = tl.where(mask, (x - mean[:, :, None]) * rstd[:, :, None], 0.0)
    w, b = _norm_params(W, B, groups, cols, H, L, GROUP_NORM)
    return xhat, xhat * w + b, w


@triton.jit
def _keep_masks(
    rows,
    cols,
    W_total,
    seed_lo,
    seed_hi,
    dropout_ratio,
    mask,
    CONCAT_UX: tl.constexpr,
    DROPOUT: tl.constexpr,
):
    """Keep masks of the (u, attn, y) parts; placeholders (never read) without dropout."""
    keep_u = mask
    keep_x = mask
    keep_y = mask
    if DROPOUT:
        elem = rows * W_total + cols
        keep_y = _keep(elem, 2, seed_lo, seed_hi, dropout_ratio)
        if CONCAT_UX:
            keep_u = _keep(elem, 0, seed_lo, seed_hi, dropout_ratio)
            keep_x = _keep(elem, 1, seed_lo, seed_hi, dropout_ratio)
    return keep_u, keep_x, keep_y


@triton.jit
def _store_y(
    Y,
    rows,
    cols,
    mask,
    stride_y,
    W_total,
    u,
    x,
    y,
    keep_u,
    keep_x,
    keep_y,
    scale,
    CONCAT_UX: tl.constexpr,
    DROPOUT: tl.constexpr,
    INTERPRET_BF16: tl.constexpr,
):
    """Writes y (after dropout) as [u | attn | y] or [y]."""
    dtype = Y.dtype.element_ty
    Y = Y + rows * stride_y + cols
    if CONCAT_UX:
        tl.store(Y, cast(_dropped(u, keep_u, scale, DROPOUT), dtype, INTERPRET_BF16), mask=mask)
        tl.store(
            Y + W_total,
            cast(_dropped(x, keep_x, scale, DROPOUT), dtype, INTERPRET_BF16),
            mask=mask,
        )
        tl.store(
            Y + 2 * W_total,
            cast(_dropped(y, keep_y, scale, DROPOUT), dtype, INTERPRET_BF16),
            mask=mask,
        )
    else:
        tl.store(Y, cast(_dropped(y, keep_y, scale, DROPOUT), dtype, INTERPRET_BF16), mask=mask)


# --------------------------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------------------------
@triton.jit(do_not_specialize=["seed_lo", "seed_hi"])
def _norm_mul_dropout_fwd_kernel(
    ATTN,
    U,
    W,
    B,
    Y,
    Mean,
    Rstd,
    N,
    H,
    L,
    stride_attn,
    stride_u,
    stride_y,
    eps,
    dropout_ratio,
    dropout_scale,
    seed_lo,
    seed_hi,
    GROUP_NORM: tl.constexpr,
    CONCAT_UX: tl.constexpr,
    DROPOUT: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_L: tl.constexpr,
    INTERPRET_BF16: tl.constexpr,
):
    pid = tl.program_id(0)
    rows, groups, cols, mask = _tile(pid, N, H, L, BLOCK_N, BLOCK_H, BLOCK_L)
    W_total = H * L
    x = tl.load(ATTN + rows * stride_attn + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(U + rows * stride_u + cols, mask=mask, other=0.0).to(tl.float32)
    mean = row_sum(x, 2) / L  # [BLOCK_N, BLOCK_H]
    centred = tl.where(mask, x - mean[:, :, None], 0.0)
    rstd = 1.0 / tl.sqrt(row_sum(centred * centred, 2) / L + eps)
    stat_offs, stat_mask = _stat_offsets(pid, N, H, BLOCK_N, BLOCK_H)
    tl.store(Mean + stat_offs, mean, mask=stat_mask)
    tl.store(Rstd + stat_offs, rstd, mask=stat_mask)
    _, normed, _ = _normalized(x, mean, rstd, mask, W, B, groups, cols, H, L, GROUP_NORM)
    y = u * normed
    keep_u, keep_x, keep_y = _keep_masks(
        rows, cols, W_total, seed_lo, seed_hi, dropout_ratio, mask, CONCAT_UX, DROPOUT
    )
    _store_y(
        Y,
        rows,
        cols,
        mask,
        stride_y,
        W_total,
        u,
        x,
        y,
        keep_u,
        keep_x,
        keep_y,
        dropout_scale,
        CONCAT_UX,
        DROPOUT,
        INTERPRET_BF16,
    )


# --------------------------------------------------------------------------------------------
# Backward
# --------------------------------------------------------------------------------------------
@triton.jit(do_not_specialize=["seed_lo", "seed_hi"])
def _norm_mul_dropout_bwd_kernel(
    DY,
    ATTN,
    U,
    W,
    B,
    Mean,
    Rstd,
    DATTN,
    DU,
    DW_PARTIAL,
    DB_PARTIAL,
    Y,
    N,
    H,
    L,
    stride_dy,
    stride_attn,
    stride_u,
    stride_dattn,
    stride_du,
    stride_y,
    dropout_ratio,
    dropout_scale,
    seed_lo,
    seed_hi,
    GROUP_NORM: tl.constexpr,
    CONCAT_UX: tl.constexpr,
    DROPOUT: tl.constexpr,
    COMPUTE_Y: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_L: tl.constexpr,
    INTERPRET_BF16: tl.constexpr,
):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    W_total = H * L
    # Partial sums over this program's rows of d weight and d bias, per (group, column).
    acc_dw = tl.full([BLOCK_H, BLOCK_L], 0.0, dtype=tl.float32)
    acc_db = tl.full([BLOCK_H, BLOCK_L], 0.0, dtype=tl.float32)
    for block in range(pid, (N + BLOCK_N - 1) // BLOCK_N, programs):
        rows, groups, cols, mask = _tile(block, N, H, L, BLOCK_N, BLOCK_H, BLOCK_L)
        x = tl.load(ATTN + rows * stride_attn + cols, mask=mask, other=0.0).to(tl.float32)
        u = tl.load(U + rows * stride_u + cols, mask=mask, other=0.0).to(tl.float32)
        stat_offs, stat_mask = _stat_offsets(block, N, H, BLOCK_N, BLOCK_H)
        mean = tl.load(Mean + stat_offs, mask=stat_mask, other=0.0)
        rstd = tl.load(Rstd + stat_offs, mask=stat_mask, other=0.0)
        xhat, normed, w = _normalized(x, mean, rstd, mask, W, B, groups, cols, H, L, GROUP_NORM)
        keep_u, keep_x, keep_y = _keep_masks(
            rows, cols, W_total, seed_lo, seed_hi, dropout_ratio, mask, CONCAT_UX, DROPOUT
        )
        # The gradient of each part of y before the dropout: the kept entries, scaled.
        DY_rows = DY + rows * stride_dy + cols
        if CONCAT_UX:
            dy_u = tl.load(DY_rows, mask=mask, other=0.0).to(tl.float32)
            dy_x = tl.load(DY_rows + W_total, mask=mask, other=0.0).to(tl.float32)
            dy_y = tl.load(DY_rows + 2 * W_total, mask=mask, other=0.0).to(tl.float32)
            dy_u = _dropped(dy_u, keep_u, dropout_scale, DROPOUT)
            dy_x = _dropped(dy_x, keep_x, dropout_scale, DROPOUT)
        else:
            dy_y = tl.load(DY_rows, mask=mask, other=0.0).to(tl.float32)
        dy_y = _dropped(dy_y, keep_y, dropout_scale, DROPOUT)
        du = dy_y * normed
        d_normed = dy_y * u
        acc_dw += row_sum(d_normed * xhat, 0)
        acc_db += row_sum(d_normed, 0)
        # Through the normalisation, per (row, group) of L columns:
        # dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
        dxhat = d_normed * w
        c_mean = row_sum(dxhat, 2) / L
        c_proj = row_sum(dxhat * xhat, 2) / L
        dx = (dxhat - c_mean[:, :, None] - xhat * c_proj[:, :, None]) * rstd[:, :, None]
        if CONCAT_UX:
            du += dy_u
            dx += dy_x
        tl.store(
            DATTN + rows * stride_dattn + cols,
            cast(dx, DATTN.dtype.element_ty, INTERPRET_BF16),
            mask=mask,
        )
        tl.store(
            DU + rows * stride_du + cols,
            cast(du, DU.dtype.element_ty, INTERPRET_BF16),
            mask=mask,
        )
        if COMPUTE_Y:
            _store_y(
                Y,
                rows,
                cols,
                mask,
                stride_y,
                W_total,
                u,
                x,
                u * normed,
                keep_u,
                keep_x,
                keep_y,
                dropout_scale,
                CONCAT_UX,
                DROPOUT,
                INTERPRET_BF16,
            )
    groups = tl.arange(0, BLOCK_H)
    if GROUP_NORM:
        # One weight per group: also sum over the group's columns.
        tl.store(DW_PARTIAL + pid * H + groups, row_sum(acc_dw, 1), mask=groups < H)
        tl.store(DB_PARTIAL + pid * H + groups, row_sum(acc_db, 1), mask=groups < H)
    else:
        cols = tl.arange(0, BLOCK_L)[None, :]
        tl.store(DW_PARTIAL + pid * L + cols, acc_dw, mask=cols < L)
        tl.store(DB_PARTIAL + pid * L + cols, acc_db, mask=cols < L)


# --------------------------------------------------------------------------------------------
# Debugging and tests: the generator and the masks on their own
# --------------------------------------------------------------------------------------------
@triton.jit(do_not_specialize=["seed_lo", "seed_hi"])
def _keep_mask_kernel(Out, total, stream, seed_lo, seed_hi, dropout_ratio, BLOCK: tl.constexpr):
    elem = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    keep = _keep(elem, stream, seed_lo, seed_hi, dropout_ratio)
    tl.store(Out + elem, keep.to(tl.int8), mask=elem < total)


@triton.jit(do_not_specialize=["k0", "k1"])
def _philox_kernel(Counters, Out, n, k0, k1, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i < n
    c0 = tl.load(Counters + 4 * i, mask=ok, other=0).to(tl.uint32)
    c1 = tl.load(Counters + 4 * i + 1, mask=ok, other=0).to(tl.uint32)
    c2 = tl.load(Counters + 4 * i + 2, mask=ok, other=0).to(tl.uint32)
    c3 = tl.load(Counters + 4 * i + 3, mask=ok, other=0).to(tl.uint32)
    r0, r1, r2, r3 = _philox4x32_10(
        c0, c1, c2, c3, k0.to(tl.uint32, bitcast=True), k1.to(tl.uint32, bitcast=True)
    )
    tl.store(Out + 4 * i, r0.to(tl.int64), mask=ok)
    tl.store(Out + 4 * i + 1, r1.to(tl.int64), mask=ok)
    tl.store(Out + 4 * i + 2, r2.to(tl.int64), mask=ok)
    tl.store(Out + 4 * i + 3, r3.to(tl.int64), mask=ok)


def philox4x32_10(counters: torch.Tensor, key: tuple[int, int]) -> torch.Tensor:
    """The generator on its own: Philox-4x32-10 of int64 counters ``[n, 4]`` (words in
    [0, 2^32)) under ``key`` (two words); returns ``[n, 4]`` int64 words. For tests."""
    counters = counters.to(torch.int64).contiguous()
    out = torch.empty_like(counters)
    n = counters.shape[0]
    if n:
        block = 64
        _philox_kernel[(triton.cdiv(n, block),)](
            counters, out, n, _common.int32_bits(key[0]), _common.int32_bits(key[1]), BLOCK=block
        )
    return out


def dropout_keep_mask(
    seed: int,
    rows: int,
    width: int,
    part: str,
    dropout_ratio: float,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """The keep mask (bool ``[rows, width]``) of one part of y, ``part`` in ``"u"``,
    ``"attn"``, ``"y"``, for a call with this seed and dropout_ratio on attn of width W =
    ``width``: entries that are False are the zeros of that part. For tests and debugging."""
    if part not in DROPOUT_STREAMS:
        raise ValueError(
            f"dropout_keep_mask: part must be one of {list(DROPOUT_STREAMS)}, got {part!r}"
        )
    out = torch.empty((rows, width), dtype=torch.int8, device=device)
    total = rows * width
    if total:
        block = 4096 if INTERPRETED else 1024  # few programs: the interpreter runs them in turn
        _keep_mask_kernel[(triton.cdiv(total, block),)](
            out,
            total,
            DROPOUT_STREAMS[part],
            *_common.seed_words(seed),
            float(dropout_ratio),
            BLOCK=block,
        )
    return out.bool()


# --------------------------------------------------------------------------------------------
# Launchers
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class TileConfig:
    """Rows per program (a power of 2), warps, and the number of backward programs.

    ``bwd_programs``: programs of the backward kernel, each looping over row blocks (at most one
    per row block is used); it sets the size of the partial weight-gradient buffer.
    """

    block_n: int
    num_warps: int = 4
    bwd_programs: int = 1

    def __post_init__(self) -> None:
        _common.check_power_of_2(self, ("block_n", "num_warps"), minimum=1)
        if self.bwd_programs < 1:
            raise ValueError(f"TileConfig.bwd_programs must be >= 1, got {self.bwd_programs}")


# A row (all groups, padded to powers of 2) must fit in one program's registers: at 4096
# elements and 16 warps ptxas reports no spills on sm_90 (bfloat16, concat_ux and dropout, the
# heaviest variant); at 8192 it spills even with 32 warps.
_MAX_ROW_TILE = 4096


def default_tile_config(
    groups: int, group_width: int, device: torch.device | None = None
) -> TileConfig:
    """The tiles used when ``tile_config`` is not given.

    Under the interpreter: 8 rows per program and 3 backward programs (several row blocks per
    program, which is what the tests want). On a GPU, not tuned nor timed yet: about 2048
    elements per tile (fewer rows for wide rows), 4 to 16 warps so that each thread holds about 8
    elements of each tile-sized value, and 4 backward programs per multiprocessor.
    """
    if INTERPRETED:
        return TileConfig(block_n=8, num_warps=1, bwd_programs=3)
    row_tile = _block(groups) * _block(group_width)
    block_n = max(1, min(64, 2048 // row_tile))
    num_warps = min(16, max(4, block_n * row_tile // 256))
    sms = 132
    if device is not None and _common.on_gpu(device):
        sms = _common.multiprocessors(device.index if device.index is not None else 0)
    return TileConfig(block_n=block_n, num_warps=num_warps, bwd_programs=4 * sms)


def _block(n: int) -> int:
    return triton.next_power_of_2(max(n, 1))


@dataclasses.dataclass(frozen=True)
class _NormMulDropout:
    """Everything but the tensors: the norm's shape, the dropout and the launch."""

    eps: float
    dropout_ratio: float
    dropout: bool  # training and dropout_ratio > 0
    seed: int
    concat_ux: bool
    group_norm: bool
    groups: int  # num_heads for the group norm, 1 for the layer norm
    group_width: int  # linear_dim, or the width W of attn
    config: TileConfig

    @property
    def width(self) -> int:
        return self.groups * self.group_width

    @property
    def y_width(self) -> int:
        return 3 * self.width if self.concat_ux else self.width

    def dropout_args(self) -> tuple:
        scale = 1.0 / (1.0 - self.dropout_ratio) if self.dropout_ratio < 1.0 else 0.0
        return (float(self.dropout_ratio), scale, *_common.seed_words(self.seed))

    def flags(self, dtype: torch.dtype) -> dict:
        return {
            "GROUP_NORM": self.group_norm,
            "CONCAT_UX": self.concat_ux,
            "DROPOUT": self.dropout,
            "BLOCK_N": self.config.block_n,
            "BLOCK_H": _block(self.groups),
            "BLOCK_L": _block(self.group_width),
            "INTERPRET_BF16": INTERPRETED and dtype == torch.bfloat16,
            "num_warps": self.config.num_warps,
        }


def norm_mul_dropout_fwd(
    attn: torch.Tensor,
    u: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    p: _NormMulDropout,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Forward launcher: (y, mean, rstd); mean and rstd are float32 ``[N, groups]``."""
    rows = attn.shape[0]
    y = torch.empty((rows, p.y_width), dtype=attn.dtype, device=attn.device)
    mean = torch.empty((rows, p.groups), dtype=torch.float32, device=attn.device)
    rstd = torch.empty_like(mean)
    if rows == 0:
        return y, mean, rstd
    _norm_mul_dropout_fwd_kernel[(triton.cdiv(rows, p.config.block_n),)](
        attn,
        u,
        weight,
        bias,
        y,
        mean,
        rstd,
        rows,
        p.groups,
        p.group_width,
        attn.stride(0),
        u.stride(0),
        y.stride(0),
        float(p.eps),
        *p.dropout_args(),
        **p.flags(attn.dtype),
    )
    return y, mean, rstd


def norm_mul_dropout_bwd(
    dy: torch.Tensor,
    attn: torch.Tensor,
    u: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    p: _NormMulDropout,
    compute_y: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Backward launcher: (d attn, d u, d weight, d bias, y if compute_y else None)."""
    rows = attn.shape[0]
    dattn = torch.empty_like(attn, memory_format=torch.contiguous_format)
    du = torch.empty_like(u, memory_format=torch.contiguous_format)
    y = None
    if compute_y:
        y = torch.empty((rows, p.y_width), dtype=attn.dtype, device=attn.device)
    if rows == 0:
        return dattn, du, torch.zeros_like(weight), torch.zeros_like(bias), y
    dy = _common.last_dim_contiguous(dy)
    programs = min(p.config.bwd_programs, triton.cdiv(rows, p.config.block_n))
    params = p.groups if p.group_norm else p.width
    dw_partial = torch.empty((programs, params), dtype=torch.float32, device=attn.device)
    db_partial = torch.empty_like(dw_partial)
    _norm_mul_dropout_bwd_kernel[(programs,)](
        dy,
        attn,
        u,
        weight,
        bias,
        mean,
        rstd,
        dattn,
        du,
        dw_partial,
        db_partial,
        y if y is not None else dattn,  # not written without compute_y
        rows,
        p.groups,
        p.group_width,
        dy.stride(0),
        attn.stride(0),
        u.stride(0),
        dattn.stride(0),
        du.stride(0),
        y.stride(0) if y is not None else 0,
        *p.dropout_args(),
        COMPUTE_Y=compute_y,
        **p.flags(attn.dtype),
    )
    dweight = dw_partial.sum(0).to(weight.dtype)
    dbias = db_partial.sum(0).to(bias.dtype)
    return dattn, du, dweight, dbias, y


def _addmm(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x + y @ weight: the package's Triton addmm for GPU tensors, torch's on CPU tensors.

    Under the interpreter the other op family's Triton module would have to be interpreted as
    well, which only this module's own loading guarantees; torch.addmm stands in there.
    """
    if _common.on_gpu(x.device):
        return mm.addmm(x, y, weight, kernel=Kernel.TRITON)
    return torch.addmm(x, y, weight)


def _layer_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> torch.Tensor:
    """The layer norm of compute_uqvk: the package's Triton layer norm for GPU tensors, its
    PyTorch reference on CPU tensors (for the reason given in _addmm)."""
    kernel = Kernel.TRITON if _common.on_gpu(x.device) else Kernel.PYTORCH
    return norms.layer_norm(x, weight, bias, eps, kernel=kernel)


class NormMulDropoutFunction(torch.autograd.Function):
    """Autograd wrapper of the norm * u * dropout kernels (y is an output)."""

    @staticmethod
    def forward(ctx, attn, u, weight, bias, problem: _NormMulDropout):  # type: ignore[override]
        y, mean, rstd = norm_mul_dropout_fwd(attn, u, weight, bias, problem)
        ctx.save_for_backward(attn, u, weight, bias, mean, rstd)
        ctx.problem = problem
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):  # type: ignore[override]
        attn, u, weight, bias, mean, rstd = ctx.saved_tensors
        dattn, du, dweight, dbias, _ = norm_mul_dropout_bwd(
            dy, attn, u, weight, bias, mean, rstd, ctx.problem
        )
        return dattn, du, dweight, dbias, None


class HSTUComputeOutputFunction(torch.autograd.Function):
    """Autograd wrapper of ``x + norm_mul_dropout(attn, u) @ output_weight``.

    Saves attn, u, the norm parameters and statistics, output_weight and, unless
    ``recompute_y_in_backward``, y; otherwise the backward kernel writes y again.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx,
        attn,
        u,
        x,
        norm_weight,
        norm_bias,
        output_weight,
        problem: _NormMulDropout,
        recompute_y_in_backward: bool,
    ):
        y, mean, rstd = norm_mul_dropout_fwd(attn, u, norm_weight, norm_bias, problem)
        out = _addmm(x, y, output_weight)
        kept_y = None if recompute_y_in_backward else y
        ctx.save_for_backward(attn, u, norm_weight, norm_bias, mean, rstd, output_weight, kept_y)
        ctx.problem = problem
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dout):  # type: ignore[override]
        attn, u, norm_weight, norm_bias, mean, rstd, output_weight, y = ctx.saved_tensors
        needs = ctx.needs_input_grad
        p = ctx.problem
        dattn = du = dweight = dbias = d_output_weight = None
        if needs[0] or needs[1] or needs[3] or needs[4]:
            dy = dout.mm(output_weight.t())
            dattn, du, dweight, dbias, y_again = norm_mul_dropout_bwd(
                dy,
                attn,
                u,
                norm_weight,
                norm_bias,
                mean,
                rstd,
                p,
                compute_y=needs[5] and y is None,
            )
            if y is None:
                y = y_again
        elif needs[5] and y is None:
            y, _, _ = norm_mul_dropout_fwd(attn, u, norm_weight, norm_bias, p)
        if needs[5]:
            d_output_weight = y.t().mm(dout)
        dx = dout if needs[2] else None
        return dattn, du, dx, dweight, dbias, d_output_weight, None, None


def _check_triton_inputs(op: str, t: torch.Tensor) -> None:
    _common.check_float_dtype(op, t.dtype)
    _common.check_device(op, t.device, INTERPRETED)


def _draw_seed() -> int:
    """62 random bits from torch's default generator (CPU: no GPU synchronisation)."""
    return int(torch.randint(0, 2**62, (1,), dtype=torch.int64).item())


def _problem(
    op: str,
    attn: torch.Tensor,
    eps: float,
    dropout_ratio: float,
    training: bool,
    concat_ux: bool,
    group_norm: bool,
    num_heads: int,
    linear_dim: int,
    seed: int | None,
    tile_config: TileConfig | None,
) -> _NormMulDropout:
    """Checks what only the TRITON kernel requires and gathers the kernel's scalars."""
    _check_triton_inputs(op, attn)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ValueError(f"{op}: seed must be None or an int >= 0, got {seed!r}")
    width = attn.shape[1]
    groups, group_width = (num_heads, linear_dim) if group_norm else (1, width)
    if _block(groups) * _block(group_width) > _MAX_ROW_TILE:
        raise ValueError(
            f"{op}: the TRITON kernel holds a whole row in one program: at most "
            f"{_MAX_ROW_TILE} elements once each group and the group count are padded to powers "
            f"of 2, got {groups} group(s) of {group_width}"
        )
    dropout = bool(training) and dropout_ratio > 0.0
    if dropout and seed is None:
        seed = _draw_seed()
    return _NormMulDropout(
        eps=float(eps),
        dropout_ratio=float(dropout_ratio),
        dropout=dropout,
        seed=int(seed or 0) & (2**64 - 1),
        concat_ux=bool(concat_ux),
        group_norm=bool(group_norm),
        groups=groups,
        group_width=group_width,
        config=tile_config or default_tile_config(groups, group_width, attn.device),
    )


def _prepare(*tensors: torch.Tensor) -> list[torch.Tensor]:
    return [_common.last_dim_contiguous(t) if t.dim() == 2 else t.contiguous() for t in tensors]


def triton_norm_mul_dropout(
    x: torch.Tensor,
    u: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    eps: float,
    dropout_ratio: float,
    training: bool,
    concat_ux: bool = False,
    group_norm: bool = False,
    num_heads: int = 1,
    linear_dim: int = -1,
    seed: int | None = None,
    *,
    tile_config: TileConfig | None = None,
) -> torch.Tensor:
    """``dropout(cat?([u, x, u * norm(x)]))`` with the Triton kernels.

    Arguments as :func:`hstu_ops.pytorch.pytorch_norm_mul_dropout`; x, u float16, bfloat16 or
    float32. ``seed``: of the dropout masks (drawn from torch's default generator when None);
    ``tile_config`` overrides :func:`default_tile_config`.
    """
    check_norm_mul_dropout_args(
        _OP_NORM, x, u, weight, bias, eps, dropout_ratio, group_norm, num_heads, linear_dim
    )
    problem = _problem(
        _OP_NORM,
        x,
        eps,
        dropout_ratio,
        training,
        concat_ux,
        group_norm,
        num_heads,
        linear_dim,
        seed,
        tile_config,
    )
    x, u, weight, bias = _prepare(x, u, weight, bias)
    return NormMulDropoutFunction.apply(x, u, weight, bias, problem)


def triton_hstu_compute_output(
    attn: torch.Tensor,
    u: torch.Tensor,
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_bias: torch.Tensor,
    output_weight: torch.Tensor,
    eps: float,
    dropout_ratio: float,
    training: bool,
    concat_ux: bool = False,
    group_norm: bool = False,
    num_heads: int = 1,
    linear_dim: int = -1,
    seed: int | None = None,
    recompute_y_in_backward: bool = False,
    *,
    tile_config: TileConfig | None = None,
) -> torch.Tensor:
    """``x + dropout(cat?([u, attn, u * norm(attn)])) @ output_weight`` with the Triton kernels.

    Arguments as :func:`hstu_ops.pytorch.pytorch_hstu_compute_output` (``eps`` is the
    dispatcher's ``norm_eps``), plus ``seed`` (of the dropout masks; drawn from torch's default
    generator when None), ``recompute_y_in_backward`` (do not keep y for the backward; the
    backward kernel writes it again, same gradients) and ``tile_config``.
    """
    check_compute_output_args(
        _OP_OUTPUT,
        attn,
        u,
        x,
        norm_weight,
        norm_bias,
        output_weight,
        eps,
        dropout_ratio,
        concat_ux,
        group_norm,
        num_heads,
        linear_dim,
    )
    problem = _problem(
        _OP_OUTPUT,
        attn,
        eps,
        dropout_ratio,
        training,
        concat_ux,
        group_norm,
        num_heads,
        linear_dim,
        seed,
        tile_config,
    )
    attn, u, norm_weight, norm_bias = _prepare(attn, u, norm_weight, norm_bias)
    return HSTUComputeOutputFunction.apply(
        attn,
        u,
        x,
        norm_weight,
        norm_bias,
        output_weight.to(x.dtype),
        problem,
        bool(recompute_y_in_backward),
    )


def triton_hstu_compute_uqvk(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_bias: torch.Tensor,
    norm_eps: float,
    num_heads: int,
    attn_dim: int,
    hidden_dim: int,
    uvqk_weight: torch.Tensor,
    uvqk_bias: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(silu(u), q, k, v)`` of ``uvqk_bias + layer_norm(x) @ uvqk_weight``, arguments as
    :func:`hstu_ops.pytorch.pytorch_hstu_compute_uqvk`.

    A composition, no kernel of its own: on GPU tensors the package's Triton layer norm
    (``hstu_ops.norms.layer_norm``) and Triton addmm (``hstu_ops.mm.addmm``); under the
    interpreter (CPU tensors) the layer norm's PyTorch reference and ``torch.addmm``; then the
    split and the SiLU of u in torch.
    """
    check_compute_uqvk_args(
        _OP_UQVK,
        x,
        norm_weight,
        norm_bias,
        norm_eps,
        num_heads,
        attn_dim,
        hidden_dim,
        uvqk_weight,
        uvqk_bias,
    )
    _check_triton_inputs(_OP_UQVK, x)
    normed_x = _layer_norm(x, norm_weight, norm_bias, norm_eps)
    uvqk = _addmm(uvqk_bias.to(x.dtype), normed_x, uvqk_weight.to(x.dtype))
    return split_uvqk(uvqk, num_heads, attn_dim, hidden_dim)
