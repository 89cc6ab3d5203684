"""Triton kernels of the HSTU normalisations, forward and backward (op family 3).

Semantics are those of the PyTorch references :mod:`hstu_ops.pytorch.pt_norms`: layer norm,
RMS norm and swish layer norm (``x * sigmoid(layer_norm(x))``) over the last dimension, each
weighted (``weight`` and, for the layer norms, ``bias``) or plain (``weight=None``).
Arithmetic is in float32 whatever the dtype of ``x``; outputs and ``dx`` are rounded once to it,
``dweight`` and ``dbias`` to the dtype of the weight.

Layout of the work (``x`` is viewed as ``[N, D]`` rows):

* every kernel holds whole rows: ``BLOCK_D``, the power of 2 at or above D, columns, and
  ``BLOCK_N`` rows per tile ("multi-row"). Narrow rows (HSTU's D is often 64 to 512) would leave
  most lanes of a one-row program idle and launch N tiny programs, which costs most on AMD
  GPUs (wave64); a tile of several rows keeps every lane busy.
* forward: one program per tile of BLOCK_N rows. It writes y, and the mean (layer norms) and
  1/std of every row, in float32, which the backward reuses instead of recomputing.
* backward: each program owns a contiguous run of tiles and writes their dx. For a weighted
  norm it also sums its rows' contributions to dweight (and dbias) into its own row of a
  float32 ``[programs, D]`` buffer; a second kernel adds those rows up in a fixed order. No
  atomics, so gradients are bitwise reproducible for a given device and shape.

Importing this module imports ``triton``. Whether the kernels run compiled (CUDA/ROCm tensors)
or in Triton's interpreter (CPU tensors) is fixed when this module is imported, by the
environment variable ``TRITON_INTERPRET=1``, exactly as for
:mod:`hstu_ops.triton.triton_hstu_attention`: the kernels call only ``triton.language`` builtins
and the package's own ``@triton.jit`` helpers (this module's and those of
:mod:`hstu_ops.triton._common`). The one library object they touch is the combine function
handed to ``tl.reduce`` for row sums, and only under the interpreter (see
``hstu_ops.triton._common.SUM_COMBINE``), where it is recognised by identity and never called.
"""

# Kernels branch on tl.constexpr flags with if/else statements, which Triton resolves at compile
# time; they stay statements rather than the conditional expressions SIM108 asks for.
# ruff: noqa: SIM108

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable

from hstu_ops.pytorch.pt_norms import check_norm_inputs
from hstu_ops.triton import _common
from hstu_ops.triton._common import cast, row_sum

__all__ = [
    "INTERPRETED",
    "MAX_D",
    "LayerNormFunction",
    "NormConfig",
    "RMSNormFunction",
    "SwishLayerNormFunction",
    "default_norm_config",
    "layer_norm_bwd",
    "layer_norm_fwd",
    "rms_norm_bwd",
    "rms_norm_fwd",
    "triton_layer_norm",
    "triton_rms_norm",
    "triton_swish_layer_norm",
]


INTERPRETED: bool = _common.kernel_module_mode(__name__)
"""Whether the kernels of this module were created for Triton's interpreter (CPU tensors)."""

MAX_D = 16384
"""Widest rows the kernels take: a program holds whole rows in registers (the backward spills
registers from 8192 features on, see :func:`default_norm_config`)."""


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------
@triton.jit
def _sigmoid(z):
    # exp(-z) overflows to inf for very negative z, which gives the right limit, 0.
    return 1.0 / (1.0 + tl.exp(-z))


@triton.jit
def _tile(pid, N, D, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """(rows, cols, row mask, element mask) of row tile ``pid``."""
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    row_ok = rows < N
    mask = row_ok[:, None] & (cols < D)[None, :]
    return rows, cols, row_ok, mask


@triton.jit
def _tile_offsets(rows, cols, stride):
    # int64: N * D may exceed 2**31 elements.
    return rows.to(tl.int64)[:, None] * stride + cols[None, :]


# --------------------------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------------------------
@triton.jit
def _layer_norm_fwd_kernel(
    X,
    W,
    B,
    Y,
    Mean,
    Rstd,
    N,
    D,
    eps,
    stride_x,
    stride_y,
    WEIGHTED: tl.constexpr,
    IS_SWISH: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    INTERPRET_BF16: tl.constexpr,
):
    """y = layer_norm(x) (IS_SWISH: x * sigmoid(layer_norm(x))) for one tile of rows."""
    rows, cols, row_ok, mask = _tile(tl.program_id(0), N, D, BLOCK_N, BLOCK_D)
    x = tl.load(X + _tile_offsets(rows, cols, stride_x), mask=mask, other=0.0).to(tl.float32)
    mean = row_sum(x, 1) / D
    centered = tl.where(mask, x - mean[:, None], 0.0)
    rstd = tl.rsqrt(row_sum(centered * centered, 1) / D + eps)
    z = centered * rstd[:, None]
    if WEIGHTED:
        col_ok = cols < D
        w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
        b = tl.load(B + cols, mask=col_ok, other=0.0).to(tl.float32)
        z = z * w[None, :] + b[None, :]
    if IS_SWISH:
        y = x * _sigmoid(z)
    else:
        y = z
    tl.store(
        Y + _tile_offsets(rows, cols, stride_y),
        cast(y, Y.dtype.element_ty, INTERPRET_BF16),
        mask=mask,
    )
    tl.store(Mean + rows, mean, mask=row_ok)
    tl.store(Rstd + rows, rstd, mask=row_ok)


@triton.jit
def _rms_norm_fwd_kernel(
    X,
    W,
    Y,
    Rstd,
    N,
    D,
    eps,
    stride_x,
    stride_y,
    WEIGHTED: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    INTERPRET_BF16: tl.constexpr,
):
    """y = x / sqrt(mean(x^2) + eps) * weight for one tile of rows."""
    rows, cols, row_ok, mask = _tile(tl.program_id(0), N, D, BLOCK_N, BLOCK_D)
    x = tl.load(X + _tile_offsets(rows, cols, stride_x), mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(row_sum(x * x, 1) / D + eps)
    y = x * rstd[:, None]
    if WEIGHTED:
        w = tl.load(W + cols, mask=cols < D, other=0.0).to(tl.float32)
        y = y * w[None, :]
    tl.store(
        Y + _tile_offsets(rows, cols, stride_y),
        cast(y, Y.dtype.element_ty, INTERPRET_BF16),
        mask=mask,
    )
    tl.store(Rstd + rows, rstd, mask=row_ok)


# --------------------------------------------------------------------------------------------
# Backward
# --------------------------------------------------------------------------------------------
@triton.jit
def _layer_norm_bwd_kernel(
    X,
    W,
    B,
    DY,
    DX,
    Mean,
    Rstd,
    DW_partial,
    DB_partial,
    N,
    D,
    tiles_per_program,
    stride_x,
    stride_dy,
    stride_dx,
    WEIGHTED: tl.constexpr,
    IS_SWISH: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    INTERPRET_BF16: tl.constexpr,
):
    """dx of the tiles [pid * tiles_per_program, (pid + 1) * tiles_per_program); WEIGHTED: the
    sums of their rows' dweight and dbias contributions, into row pid of the partial buffers.

    With xhat = (x - mean) * rstd, z = xhat * w + b and g the gradient reaching z times w
    (w = 1 when not WEIGHTED): dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), plus, for the
    swish, the direct path dy * sigmoid(z), where z gets dy * x * sigmoid'(z).
    """
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_D)
    col_ok = cols < D
    if WEIGHTED:
        dw = tl.full([BLOCK_N, BLOCK_D], 0.0, tl.float32)
        db = tl.full([BLOCK_N, BLOCK_D], 0.0, tl.float32)
    for i in range(tiles_per_program):
        rows, cols, row_ok, mask = _tile(pid * tiles_per_program + i, N, D, BLOCK_N, BLOCK_D)
        if WEIGHTED:
            # Loaded again in every iteration (from cache) rather than held: for wide rows the
            # registers are needed by the two accumulators, which must live across iterations.
            w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
            b = tl.load(B + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        x = tl.load(X + _tile_offsets(rows, cols, stride_x), mask=mask, other=0.0)
        x = x.to(tl.float32)
        dy = tl.load(DY + _tile_offsets(rows, cols, stride_dy), mask=mask, other=0.0)
        dy = dy.to(tl.float32)
        mean = tl.load(Mean + rows, mask=row_ok, other=0.0)[:, None]
        rstd = tl.load(Rstd + rows, mask=row_ok, other=0.0)[:, None]
        # Zero outside the rows and columns, so padding adds nothing to the sums below.
        xhat = tl.where(mask, (x - mean) * rstd, 0.0)
        if IS_SWISH:
            if WEIGHTED:
                gate = _sigmoid(xhat * w + b)
            else:
                gate = _sigmoid(xhat)
            dz = dy * x * gate * (1.0 - gate)
        else:
            dz = dy
        if WEIGHTED:
            g = dz * w
        else:
            g = dz
        mean_g = row_sum(g, 1)[:, None] / D
        mean_gx = row_sum(g * xhat, 1)[:, None] / D
        dx = (g - mean_g - xhat * mean_gx) * rstd
        if IS_SWISH:
            dx += dy * gate
        tl.store(
            DX + _tile_offsets(rows, cols, stride_dx),
            cast(dx, DX.dtype.element_ty, INTERPRET_BF16),
            mask=mask,
        )
        if WEIGHTED:
            dw += dz * xhat
            db += dz
    if WEIGHTED:
        partial = pid.to(tl.int64) * D + cols
        tl.store(DW_partial + partial, row_sum(dw, 0), mask=col_ok)
        tl.store(DB_partial + partial, row_sum(db, 0), mask=col_ok)


@triton.jit
def _rms_norm_bwd_kernel(
    X,
    W,
    DY,
    DX,
    Rstd,
    DW_partial,
    N,
    D,
    tiles_per_program,
    stride_x,
    stride_dy,
    stride_dx,
    WEIGHTED: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    INTERPRET_BF16: tl.constexpr,
):
    """As _layer_norm_bwd_kernel, for xhat = x * rstd: dx = rstd * (g - xhat * mean(g * xhat))."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_D)
    col_ok = cols < D
    if WEIGHTED:
        dw = tl.full([BLOCK_N, BLOCK_D], 0.0, tl.float32)
    for i in range(tiles_per_program):
        rows, cols, row_ok, mask = _tile(pid * tiles_per_program + i, N, D, BLOCK_N, BLOCK_D)
        if WEIGHTED:
            w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        x = tl.load(X + _tile_offsets(rows, cols, stride_x), mask=mask, other=0.0)
        dy = tl.load(DY + _tile_offsets(rows, cols, stride_dy), mask=mask, other=0.0)
        dy = dy.to(tl.float32)
        rstd = tl.load(Rstd + rows, mask=row_ok, other=0.0)[:, None]
        xhat = tl.where(mask, x.to(tl.float32) * rstd, 0.0)
        if WEIGHTED:
            g = dy * w
        else:
            g = dy
        mean_gx = row_sum(g * xhat, 1)[:, None] / D
        dx = (g - xhat * mean_gx) * rstd
        tl.store(
            DX + _tile_offsets(rows, cols, stride_dx),
            cast(dx, DX.dtype.element_ty, INTERPRET_BF16),
            mask=mask,
        )
        if WEIGHTED:
            dw += dy * xhat
    if WEIGHTED:
        tl.store(DW_partial + pid.to(tl.int64) * D + cols, row_sum(dw, 0), mask=col_ok)


@triton.jit
def _sum_partials_kernel(
    Partial,
    Out,
    P,
    D,
    BLOCK_P: tl.constexpr,
    BLOCK_C: tl.constexpr,
    INTERPRET_BF16: tl.constexpr,
):
    """Out[c] = sum over p of Partial[p, c] (float32, fixed order), for BLOCK_C columns."""
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    col_ok = cols < D
    acc = tl.full([BLOCK_P, BLOCK_C], 0.0, tl.float32)
    for p0 in range(0, P, BLOCK_P):
        rows = p0 + tl.arange(0, BLOCK_P)
        mask = (rows < P)[:, None] & col_ok[None, :]
        acc += tl.load(Partial + _tile_offsets(rows, cols, D), mask=mask, other=0.0)
    tl.store(Out + cols, cast(row_sum(acc, 0), Out.dtype.element_ty, INTERPRET_BF16), mask=col_ok)


# --------------------------------------------------------------------------------------------
# Launch shapes
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class NormConfig:
    """Launch shape of the norm kernels for one feature width.

    ``block_n``: rows per tile (a power of 2); a tile is ``block_n`` x ``next_power_of_2(D)``.
    ``num_warps``: warps per program, forward and backward. ``bwd_programs``: upper bound on the
    programs of a weighted backward, each of which writes one row of partial dweight (dbias)
    sums; None picks it from the device (see :func:`default_norm_config`).
    """

    block_n: int
    num_warps: int
    bwd_programs: int | None = None

    def __post_init__(self) -> None:
        _common.check_power_of_2(self, ("block_n",), minimum=1)
        if self.num_warps < 1 or self.num_warps > 32 or self.num_warps & (self.num_warps - 1):
            raise ValueError(
                f"NormConfig.num_warps must be a power of 2 in [1, 32], got {self.num_warps}"
            )
        if self.bwd_programs is not None and self.bwd_programs < 1:
            raise ValueError(
                f"NormConfig.bwd_programs must be >= 1 or None, got {self.bwd_programs}"
            )


def _block_d(d: int) -> int:
    return triton.next_power_of_2(d)


def default_norm_config(d: int) -> NormConfig:
    """The launch shape used for rows of ``d`` features when ``config`` is not given.

    On a GPU: tiles of about 2048 elements (``block_n = 2048 // BLOCK_D`` rows, at most 64, at
    least 1), 8 warps for such a tile, i.e. 8 elements of each live array per thread, and up to
    16 warps for rows wider than 2048. The weighted backward gets 4 programs per multiprocessor.
    Not autotuned and not yet timed (no GPU was available). Checked offline with ``ptxas`` on
    sm_90: no register spills up to 2048 features in any kernel (bfloat16 and float32), nor at
    4096 except 40 bytes in the float32 swish backward; from 8192 features the weighted
    backward spills (it keeps two float32 accumulators of a whole row across its loop), which
    costs speed, not correctness. Under the interpreter: tiles of about 4096 elements, one
    warp, at most 4 backward programs (few, large programs are what makes the interpreter fast).
    """
    block_d = _block_d(d)
    if INTERPRETED:
        return NormConfig(block_n=max(1, min(64, 4096 // block_d)), num_warps=1, bwd_programs=4)
    block_n = max(1, min(64, 2048 // block_d))
    num_warps = max(1, min(16, block_n * block_d // 256))
    return NormConfig(block_n=block_n, num_warps=num_warps)


def _bwd_grid(n: int, cfg: NormConfig, device: torch.device) -> tuple[int, int]:
    """(programs, tiles per program) of a weighted backward over n rows (n > 0)."""
    tiles = triton.cdiv(n, cfg.block_n)
    limit = cfg.bwd_programs
    if limit is None:
        if device.type == "cuda":
            index = device.index if device.index is not None else torch.cuda.current_device()
            limit = 4 * _common.multiprocessors(index)
        else:
            limit = 4
    tiles_per_program = triton.cdiv(tiles, min(limit, tiles))
    # Recomputed so that no program is left without a tile.
    return triton.cdiv(tiles, tiles_per_program), tiles_per_program


# --------------------------------------------------------------------------------------------
# Launchers
# --------------------------------------------------------------------------------------------
def _rows(x: torch.Tensor) -> torch.Tensor:
    """x as [N, D] with unit column stride (a view when possible)."""
    x2d = x.reshape(-1, x.shape[-1])
    return x2d if x2d.stride(1) == 1 else x2d.contiguous()


def _interpret_bf16(dtype: torch.dtype) -> bool:
    return INTERPRETED and dtype == torch.bfloat16


def layer_norm_fwd(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
    is_swish: bool,
    cfg: NormConfig,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Forward launcher of the layer norms: x [N, D] (unit column stride) -> (y, mean, rstd).

    y: [N, D] contiguous, dtype of x; mean, rstd: float32 [N]. is_swish: x * sigmoid(norm).
    """
    n, d = x.shape
    y = torch.empty((n, d), dtype=x.dtype, device=x.device)
    mean = torch.empty(n, dtype=torch.float32, device=x.device)
    rstd = torch.empty(n, dtype=torch.float32, device=x.device)
    if n == 0:
        return y, mean, rstd
    weighted = weight is not None
    _layer_norm_fwd_kernel[(triton.cdiv(n, cfg.block_n),)](
        x,
        weight if weighted else x,  # never read when not WEIGHTED
        bias if weighted else x,
        y,
        mean,
        rstd,
        n,
        d,
        float(eps),
        x.stride(0),
        y.stride(0),
        WEIGHTED=weighted,
        IS_SWISH=is_swish,
        BLOCK_N=cfg.block_n,
        BLOCK_D=_block_d(d),
        INTERPRET_BF16=_interpret_bf16(x.dtype),
        num_warps=cfg.num_warps,
    )
    return y, mean, rstd


def _sum_partials(partial: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Column sums of the float32 [P, D] partials, as a [D] tensor of ``dtype``."""
    p, d = partial.shape
    out = torch.empty(d, dtype=dtype, device=partial.device)
    block_c = min(_block_d(d), 128)
    _sum_partials_kernel[(triton.cdiv(d, block_c),)](
        partial,
        out,
        p,
        d,
        BLOCK_P=16,
        BLOCK_C=block_c,
        INTERPRET_BF16=_interpret_bf16(dtype),
        num_warps=4,
    )
    return out


def layer_norm_bwd(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    is_swish: bool,
    cfg: NormConfig,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Backward launcher of the layer norms: (dx [N, D], dweight, dbias), deterministic.

    dy and x: [N, D] with unit column stride; mean, rstd from :func:`layer_norm_fwd`. dweight
    and dbias have the dtypes of weight and bias, and are None for the plain norm.
    """
    n, d = x.shape
    weighted = weight is not None
    dx = torch.empty((n, d), dtype=x.dtype, device=x.device)
    if n == 0:
        if not weighted:
            return dx, None, None
        return dx, torch.zeros_like(weight), torch.zeros_like(bias)
    if weighted:
        programs, tiles_per_program = _bwd_grid(n, cfg, x.device)
        dw_partial = torch.empty((programs, d), dtype=torch.float32, device=x.device)
        db_partial = torch.empty((programs, d), dtype=torch.float32, device=x.device)
    else:  # every tile is independent: one program each
        programs, tiles_per_program = triton.cdiv(n, cfg.block_n), 1
        dw_partial = db_partial = rstd  # never written when not WEIGHTED
    _layer_norm_bwd_kernel[(programs,)](
        x,
        weight if weighted else x,
        bias if weighted else x,
        dy,
        dx,
        mean,
        rstd,
        dw_partial,
        db_partial,
        n,
        d,
        tiles_per_program,
        x.stride(0),
        dy.stride(0),
        dx.stride(0),
        WEIGHTED=weighted,
        IS_SWISH=is_swish,
        BLOCK_N=cfg.block_n,
        BLOCK_D=_block_d(d),
        INTERPRET_BF16=_interpret_bf16(x.dtype),
        num_warps=cfg.num_warps,
    )
    if not weighted:
        return dx, None, None
    return dx, _sum_partials(dw_partial, weight.dtype), _sum_partials(db_partial, bias.dtype)


def rms_norm_fwd(
    x: torch.Tensor, weight: torch.Tensor | None, eps: float, cfg: NormConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward launcher of the RMS norm: x [N, D] (unit column stride) -> (y, rstd float32)."""
    n, d = x.shape
    y = torch.empty((n, d), dtype=x.dtype, device=x.device)
    rstd = torch.empty(n, dtype=torch.float32, device=x.device)
    if n == 0:
        return y, rstd
    weighted = weight is not None
    _rms_norm_fwd_kernel[(triton.cdiv(n, cfg.block_n),)](
        x,
        weight if weighted else x,
        y,
        rstd,
        n,
        d,
        float(eps),
        x.stride(0),
        y.stride(0),
        WEIGHTED=weighted,
        BLOCK_N=cfg.block_n,
        BLOCK_D=_block_d(d),
        INTERPRET_BF16=_interpret_bf16(x.dtype),
        num_warps=cfg.num_warps,
    )
    return y, rstd


def rms_norm_bwd(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    rstd: torch.Tensor,
    cfg: NormConfig,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Backward launcher of the RMS norm: (dx [N, D], dweight or None), deterministic."""
    n, d = x.shape
    weighted = weight is not None
    dx = torch.empty((n, d), dtype=x.dtype, device=x.device)
    if n == 0:
        return dx, torch.zeros_like(weight) if weighted else None
    if weighted:
        programs, tiles_per_program = _bwd_grid(n, cfg, x.device)
        dw_partial = torch.empty((programs, d), dtype=torch.float32, device=x.device)
    else:
        programs, tiles_per_program = triton.cdiv(n, cfg.block_n), 1
        dw_partial = rstd  # never written when not WEIGHTED
    _rms_norm_bwd_kernel[(programs,)](
        x,
        weight if weighted else x,
        dy,
        dx,
        rstd,
        dw_partial,
        n,
        d,
        tiles_per_program,
        x.stride(0),
        dy.stride(0),
        dx.stride(0),
        WEIGHTED=weighted,
        BLOCK_N=cfg.block_n,
        BLOCK_D=_block_d(d),
        INTERPRET_BF16=_interpret_bf16(x.dtype),
        num_warps=cfg.num_warps,
    )
    return dx, _sum_partials(dw_partial, weight.dtype) if weighted else None


# --------------------------------------------------------------------------------------------
# Autograd
# --------------------------------------------------------------------------------------------
def _layer_norm_forward(ctx, x, weight, bias, eps, cfg, is_swish: bool) -> torch.Tensor:
    y, mean, rstd = layer_norm_fwd(_rows(x), weight, bias, eps, is_swish, cfg)
    ctx.save_for_backward(x, weight, bias, mean, rstd)
    ctx.cfg = cfg
    ctx.is_swish = is_swish
    return y.view(x.shape)


def _layer_norm_backward(ctx, dy: torch.Tensor) -> tuple:
    x, weight, bias, mean, rstd = ctx.saved_tensors
    dx, dweight, dbias = layer_norm_bwd(
        _rows(dy), _rows(x), weight, bias, mean, rstd, ctx.is_swish, ctx.cfg
    )
    return dx.view(x.shape), dweight, dbias, None, None


class LayerNormFunction(torch.autograd.Function):
    """Layer norm; saves x, weight, bias and the float32 mean and rstd of every row."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps, cfg):  # type: ignore[override]
        return _layer_norm_forward(ctx, x, weight, bias, eps, cfg, is_swish=False)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):  # type: ignore[override]
        return _layer_norm_backward(ctx, dy)


class SwishLayerNormFunction(torch.autograd.Function):
    """``x * sigmoid(layer_norm(x))``: the layer norm's kernels with the gate fused in."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps, cfg):  # type: ignore[override]
        return _layer_norm_forward(ctx, x, weight, bias, eps, cfg, is_swish=True)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):  # type: ignore[override]
        return _layer_norm_backward(ctx, dy)


class RMSNormFunction(torch.autograd.Function):
    """RMS norm; saves x, weight and the float32 rstd of every row."""

    @staticmethod
    def forward(ctx, x, weight, eps, cfg):  # type: ignore[override]
        y, rstd = rms_norm_fwd(_rows(x), weight, eps, cfg)
        ctx.save_for_backward(x, weight, rstd)
        ctx.cfg = cfg
        return y.view(x.shape)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):  # type: ignore[override]
        x, weight, rstd = ctx.saved_tensors
        dx, dweight = rms_norm_bwd(_rows(dy), _rows(x), weight, rstd, ctx.cfg)
        return dx.view(x.shape), dweight, None, None


# --------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------
def _checked_config(
    op: str,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
    config: NormConfig | None,
    *,
    has_bias: bool = True,
) -> NormConfig:
    """The reference's argument checks, then the TRITON kernel's; returns the launch shape."""
    check_norm_inputs(op, x, weight, bias, eps, has_bias=has_bias)
    for name, t in (("x", x), ("weight", weight), ("bias", bias)):
        if t is not None:
            _common.check_float_dtype(op, t.dtype, f"{name} of dtype {t.dtype}")
    _common.check_device(op, x.device, INTERPRETED)
    if x.shape[-1] > MAX_D:
        raise ValueError(
            f"{op}: the TRITON kernel takes at most {MAX_D} features per row (it holds whole "
            f"rows), got {x.shape[-1]}; use Kernel.PYTORCH"
        )
    return config or default_norm_config(x.shape[-1])


def triton_layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float = 1e-5,
    *,
    config: NormConfig | None = None,
) -> torch.Tensor:
    """Layer norm with the Triton kernels; arguments as ``hstu_ops.layer_norm``.

    ``config`` overrides :func:`default_norm_config`.
    """
    cfg = _checked_config("layer_norm", x, weight, bias, eps, config)
    return LayerNormFunction.apply(x, weight, bias, float(eps), cfg)


def triton_swish_layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float = 1e-5,
    *,
    config: NormConfig | None = None,
) -> torch.Tensor:
    """``x * sigmoid(layer_norm(x))`` with the Triton kernels; as ``hstu_ops.swish_layer_norm``."""
    cfg = _checked_config("swish_layer_norm", x, weight, bias, eps, config)
    return SwishLayerNormFunction.apply(x, weight, bias, float(eps), cfg)


def triton_rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float = 1e-5,
    *,
    config: NormConfig | None = None,
) -> torch.Tensor:
    """RMS norm with the Triton kernels; arguments as ``hstu_ops.rms_norm``."""
    cfg = _checked_config("rms_norm", x, weight, None, eps, config, has_bias=False)
    return RMSNormFunction.apply(x, weight, float(eps), cfg)
