"""Triton kernels of the 2-D jagged ops (op family 4), forward and backward.

Semantics and argument checks are those of the PyTorch reference
:mod:`hstu_ops.pytorch.pt_jagged_2d`: ``concat_2D_jagged`` / ``split_2D_jagged`` (either side
jagged or dense) and ``jagged_dense_bmm_broadcast_add``.

Concat and split
----------------
Both move the same rows: row n of joined sequence b is row n of left sequence b when n <
len_left[b], else row n - len_left[b] of right sequence b. A concat copies parts -> joined, a
split joined -> parts, so one kernel per layout serves both (constexpr ``SPLIT``), and each op's
backward is the other one's launch. Two layouts:

* single-row: one program per (joined row, sequence). It knows which side its row belongs to
  and moves it with one load and one store per ``BLOCK_D`` chunk.
* multi-row: one program per (block of ``ROWS`` joined rows, sequence). The rows of a block may
  come from both sides, so a concat issues two masked loads (a split two masked stores) per
  ``[ROWS, BLOCK_D]`` tile. Fewer, fuller programs: meant for short rows, where one row leaves
  most of a program idle, and for AMD GPUs, where it is the layout of choice.

``rows_per_program`` selects: 1 is the single-row kernel, a power of 2 from 2 to 256 the
multi-row kernel with that many rows; None (default) picks by size: the multi-row kernel on
ROCm and for rows of fewer than 256 elements, the single-row kernel otherwise (a choice not
timed yet: no GPU was available).

The grid covers the longest joined sequence actually in the batch (the argument checks read
the offsets anyway), not just the caller's ``max_seq_len``: a grid sized from ``max_seq_len``
alone leaves the tail rows of any longer sequence unwritten, in an uninitialised buffer.

jagged_dense_bmm_broadcast_add
------------------------------
* forward: one program per (block of N columns, block of rows, sequence): the rows' product
  with ``dense[b]`` over K blocks, accumulated in float32, plus ``bias[b]``.
* backward, deterministic (no atomics): ``d_jagged = d_out @ dense[b]^T`` by the forward kernel
  (dense read through swapped strides, no bias); ``d_dense[b] = jagged_b^T @ d_out_b`` by a
  kernel with one program per (block of K, block of N, sequence) that loops over the sequence's
  rows; the same programs sum d_out's rows into ``d_bias[b]`` and those of the first K block
  store it.
* float32 inputs multiply in IEEE float32 unless ``torch.backends.cuda.matmul.allow_tf32`` is
  set (then TF32 where the GPU has it), like ``torch.mm``.

Importing this module imports ``triton``; ``TRITON_INTERPRET=1`` at that import selects Triton's
CPU interpreter (see :mod:`hstu_ops.triton.triton_hstu_attention`, whose rules this module
follows: only ``triton.language`` builtins and the package's own ``@triton.jit`` helpers inside
kernels, so that this module's import alone fixes the mode). The helpers ``dot`` and ``cast``
are those of :mod:`hstu_ops.triton._common`, which is imported in this module's mode (checked
at the import).
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from hstu_ops.pytorch.pt_jagged_2d import (
    MAX_ROWS_PER_PROGRAM,
    JaggedSides,
    check_jagged_dense_bmm_args,
    check_rows_per_program,
    resolve_concat_sides,
    resolve_split_sides,
)
from hstu_ops.triton import _common
from hstu_ops.triton._common import add, cast, dot, sequence

__all__ = [
    "INTERPRETED",
    "BmmBlockConfig",
    "default_bmm_block_config",
    "default_rows_per_program",
    "triton_concat_2D_jagged",
    "triton_jagged_dense_bmm_broadcast_add",
    "triton_split_2D_jagged",
]

_CONCAT = "concat_2D_jagged"
_SPLIT = "split_2D_jagged"
_BMM = "jagged_dense_bmm_broadcast_add"


INTERPRETED: bool = _common.kernel_module_mode(__name__)
"""Whether the kernels of this module were created for Triton's interpreter (CPU tensors)."""


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------
@triton.jit
def _part(Offsets, dense_len, b, IS_DENSE: tl.constexpr):
    """(first row, number of rows) of sequence b on one side, as int64 scalars."""
    if IS_DENSE:
        start = b.to(tl.int64) * dense_len
        length = start * 0 + dense_len
    else:
        start = tl.load(Offsets + b).to(tl.int64)
        length = tl.load(Offsets + b + 1).to(tl.int64) - start
    return start, length


# --------------------------------------------------------------------------------------------
# Concat / split
# --------------------------------------------------------------------------------------------
@triton.jit
def _move_row(Joined, Part, D, SPLIT: tl.constexpr, BLOCK_D: tl.constexpr):
    """Copies one row of D elements Part -> Joined (concat) or Joined -> Part (split)."""
    for d0 in range(0, D, BLOCK_D):
        offs_d = d0 + tl.arange(0, BLOCK_D)
        in_row = offs_d < D
        if SPLIT:
            tl.store(Part + offs_d, tl.load(Joined + offs_d, mask=in_row), mask=in_row)
        else:
            tl.store(Joined + offs_d, tl.load(Part + offs_d, mask=in_row), mask=in_row)


@triton.jit
def _jagged_2d_single_row_kernel(
    Joined,
    Left,
    Right,
    OffsetsLeft,
    OffsetsRight,
    dense_len_left,
    dense_len_right,
    D,
    stride_joined,
    stride_left,
    stride_right,
    SPLIT: tl.constexpr,
    IS_DENSE_LEFT: tl.constexpr,
    IS_DENSE_RIGHT: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    n = tl.program_id(0)
    b = tl.program_id(1)
    start_l, len_l = _part(OffsetsLeft, dense_len_left, b, IS_DENSE_LEFT)
    start_r, len_r = _part(OffsetsRight, dense_len_right, b, IS_DENSE_RIGHT)
    if n < len_l + len_r:
        joined = Joined + (start_l + start_r + n) * stride_joined
        # Each branch builds and uses its own pointer: a pointer merged from two branches is
        # what AMD's pointer canonicalisation has failed to lower in the past.
        if n < len_l:
            _move_row(joined, Left + (start_l + n) * stride_left, D, SPLIT, BLOCK_D)
        else:
            _move_row(joined, Right + (start_r + n - len_l) * stride_right, D, SPLIT, BLOCK_D)


@triton.jit
def _jagged_2d_multi_row_kernel(
    Joined,
    Left,
    Right,
    OffsetsLeft,
    OffsetsRight,
    dense_len_left,
    dense_len_right,
    D,
    stride_joined,
    stride_left,
    stride_right,
    SPLIT: tl.constexpr,
    IS_DENSE_LEFT: tl.constexpr,
    IS_DENSE_RIGHT: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    pid = tl.program_id(0)
    b = tl.program_id(1)
    start_l, len_l = _part(OffsetsLeft, dense_len_left, b, IS_DENSE_LEFT)
    start_r, len_r = _part(OffsetsRight, dense_len_right, b, IS_DENSE_RIGHT)
    n0 = pid * ROWS
    if n0 < len_l + len_r:
        offs_n = n0 + tl.arange(0, ROWS)
        in_seq = offs_n < len_l + len_r
        from_left = offs_n < len_l
        rows_l = in_seq & from_left
        rows_r = in_seq & (offs_n >= len_l)
        # Row offsets in int64 (the tensors may exceed 2**31 elements); masked lanes may point
        # outside their tensor, they are never accessed.
        joined_rows = (start_l + start_r + offs_n) * stride_joined
        left_rows = (start_l + offs_n) * stride_left
        right_rows = (start_r + offs_n - len_l) * stride_right
        for d0 in range(0, D, BLOCK_D):
            offs_d = d0 + tl.arange(0, BLOCK_D)
            in_d = offs_d[None, :] < D
            joined_ptrs = Joined + joined_rows[:, None] + offs_d[None, :]
            left_ptrs = Left + left_rows[:, None] + offs_d[None, :]
            right_ptrs = Right + right_rows[:, None] + offs_d[None, :]
            if SPLIT:
                x = tl.load(joined_ptrs, mask=in_seq[:, None] & in_d)
                tl.store(left_ptrs, x, mask=rows_l[:, None] & in_d)
                tl.store(right_ptrs, x, mask=rows_r[:, None] & in_d)
            else:
                x_l = tl.load(left_ptrs, mask=rows_l[:, None] & in_d)
                x_r = tl.load(right_ptrs, mask=rows_r[:, None] & in_d)
                x = tl.where(from_left[:, None], x_l, x_r)
                tl.store(joined_ptrs, x, mask=in_seq[:, None] & in_d)


_COPY_DTYPES = (
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
)


def _row_block(d: int) -> int:
    """BLOCK_D: a row is moved in chunks of this many elements."""
    cap = 32 if INTERPRETED else 1024  # the interpreter's small chunks exercise the D loop
    return min(triton.next_power_of_2(max(d, 1)), cap)


def default_rows_per_program(d: int) -> int:
    """The layout used when ``rows_per_program`` is None, for rows of ``d`` elements.

    1 (single-row kernel) for rows of at least 256 elements on CUDA; otherwise the multi-row
    kernel with about 4096 elements per program (2 to 256 rows). Under the interpreter: 16 rows,
    or 1 for rows of at least 256 elements. Not timed yet.
    """
    if INTERPRETED:
        return 1 if d >= 256 else 16
    if d >= 256 and not torch.version.hip:
        return 1
    return max(2, min(MAX_ROWS_PER_PROGRAM, 4096 // _row_block(d)))


@dataclasses.dataclass(frozen=True)
class _RowMoves:
    """What a concat or split launch needs; kept for the backward."""

    sides: JaggedSides
    offsets_left: torch.Tensor | None  # the caller's offsets (None: dense side)
    offsets_right: torch.Tensor | None
    width: int  # D
    rows_per_program: int


def _move_rows(
    moves: _RowMoves,
    joined: torch.Tensor,
    left: torch.Tensor,
    right: torch.Tensor,
    split: bool,
) -> None:
    """Launches the concat (parts -> joined) or split (joined -> parts) kernel."""
    sides = moves.sides
    d = moves.width
    if sides.batch == 0 or sides.longest == 0 or d == 0:
        return
    # A dense side's offsets are never read; any tensor of the device fills the argument.
    placeholder = joined
    args = (
        joined,
        left,
        right,
        placeholder if moves.offsets_left is None else moves.offsets_left,
        placeholder if moves.offsets_right is None else moves.offsets_right,
        sides.dense_len_left or 0,
        sides.dense_len_right or 0,
        d,
        joined.stride(0),
        left.stride(0),
        right.stride(0),
    )
    block_d = _row_block(d)
    flags = {
        "SPLIT": split,
        "IS_DENSE_LEFT": moves.offsets_left is None,
        "IS_DENSE_RIGHT": moves.offsets_right is None,
        "BLOCK_D": block_d,
    }
    rows = moves.rows_per_program
    if rows == 1:
        warps = 1 if INTERPRETED else max(1, min(4, block_d // 256))
        grid = (sides.longest, sides.batch)
        _jagged_2d_single_row_kernel[grid](*args, **flags, num_warps=warps)
    else:
        warps = 1 if INTERPRETED else max(1, min(4, rows * block_d // 1024))
        grid = (triton.cdiv(sides.longest, rows), sides.batch)
        _jagged_2d_multi_row_kernel[grid](*args, **flags, ROWS=rows, num_warps=warps)


def _concat(moves: _RowMoves, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    left, right = _common.last_dim_contiguous(left), _common.last_dim_contiguous(right)
    joined = left.new_empty((moves.sides.rows_left + moves.sides.rows_right, moves.width))
    _move_rows(moves, joined, left, right, split=False)
    return joined


def _split(moves: _RowMoves, joined: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    joined = _common.last_dim_contiguous(joined)
    left = joined.new_empty((moves.sides.rows_left, moves.width))
    right = joined.new_empty((moves.sides.rows_right, moves.width))
    _move_rows(moves, joined, left, right, split=True)
    return left, right


class _Concat2DJaggedFunction(torch.autograd.Function):
    """Concat forward; its backward is the split of the output gradient."""

    @staticmethod
    def forward(ctx, values_left, values_right, moves: _RowMoves):  # type: ignore[override]
        ctx.moves = moves
        return _concat(moves, values_left, values_right)

    @staticmethod
    def backward(ctx, d_joined):  # type: ignore[override]
        d_left, d_right = _split(ctx.moves, d_joined)
        return d_left, d_right, None


class _Split2DJaggedFunction(torch.autograd.Function):
    """Split forward; its backward is the concat of the two gradients."""

    @staticmethod
    def forward(ctx, values, moves: _RowMoves):  # type: ignore[override]
        ctx.moves = moves
        return _split(moves, values)

    @staticmethod
    def backward(ctx, d_left, d_right):  # type: ignore[override]
        # Autograd materialises the gradient of an unused output as zeros.
        return _concat(ctx.moves, d_left, d_right), None


def _check_copy_dtype(op: str, dtype: torch.dtype) -> None:
    if dtype not in _COPY_DTYPES:
        names = ", ".join(str(t).removeprefix("torch.") for t in _COPY_DTYPES)
        raise TypeError(f"{op}: the TRITON kernel supports values of dtype {names}; got {dtype}")


def _contiguous_offsets(offsets: torch.Tensor | None) -> torch.Tensor | None:
    return None if offsets is None else offsets.contiguous()


def triton_concat_2D_jagged(
    max_seq_len: int,
    values_left: torch.Tensor,
    values_right: torch.Tensor,
    max_len_left: int | None = None,
    max_len_right: int | None = None,
    offsets_left: torch.Tensor | None = None,
    offsets_right: torch.Tensor | None = None,
    *,
    rows_per_program: int | None = None,
) -> torch.Tensor:
    """concat_2D_jagged with the Triton kernels; arguments as ``hstu_ops.concat_2D_jagged``.

    ``rows_per_program``: 1 for the single-row kernel, a power of 2 up to 256 for the multi-row
    kernel, None for :func:`default_rows_per_program`.
    """
    check_rows_per_program(_CONCAT, rows_per_program)
    sides = resolve_concat_sides(
        _CONCAT,
        max_seq_len,
        values_left,
        values_right,
        max_len_left,
        max_len_right,
        offsets_left,
        offsets_right,
    )
    moves = _row_moves(_CONCAT, sides, values_left, offsets_left, offsets_right, rows_per_program)
    return _Concat2DJaggedFunction.apply(values_left, values_right, moves)


def triton_split_2D_jagged(
    max_seq_len: int,
    values: torch.Tensor,
    total_len_left: int | None = None,
    total_len_right: int | None = None,
    max_len_left: int | None = None,
    max_len_right: int | None = None,
    offsets_left: torch.Tensor | None = None,
    offsets_right: torch.Tensor | None = None,
    *,
    rows_per_program: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """split_2D_jagged with the Triton kernels; arguments as ``hstu_ops.split_2D_jagged``.

    ``rows_per_program`` as in :func:`triton_concat_2D_jagged`.
    """
    check_rows_per_program(_SPLIT, rows_per_program)
    sides = resolve_split_sides(
        _SPLIT,
        max_seq_len,
        values,
        total_len_left,
        total_len_right,
        max_len_left,
        max_len_right,
        offsets_left,
        offsets_right,
    )
    moves = _row_moves(_SPLIT, sides, values, offsets_left, offsets_right, rows_per_program)
    return _Split2DJaggedFunction.apply(values, moves)


def _row_moves(
    op: str,
    sides: JaggedSides,
    values: torch.Tensor,
    offsets_left: torch.Tensor | None,
    offsets_right: torch.Tensor | None,
    rows_per_program: int | None,
) -> _RowMoves:
    """The Triton-side checks of a 2-D jagged concat or split of `values`, and its row moves."""
    _check_copy_dtype(op, values.dtype)
    _common.check_device(op, values.device, INTERPRETED)
    _common.check_batch(op, sides.batch)
    d = values.shape[1]
    return _RowMoves(
        sides=sides,
        offsets_left=_contiguous_offsets(offsets_left),
        offsets_right=_contiguous_offsets(offsets_right),
        width=d,
        rows_per_program=rows_per_program or default_rows_per_program(d),
    )


# --------------------------------------------------------------------------------------------
# jagged_dense_bmm_broadcast_add
# --------------------------------------------------------------------------------------------
@triton.jit
def _jagged_dense_mm_kernel(
    seq_offsets,
    Jagged,
    Dense,
    Bias,
    Out,
    N,
    K,
    stride_jm,
    stride_db,
    stride_dk,
    stride_dn,
    stride_bias_b,
    stride_om,
    HAS_BIAS: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    INTERPRET_BF16: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """Out[rows of b] = Jagged[rows of b] @ Dense[b] (+ Bias[b]).

    Jagged [total, K] and Out [total, N] have unit column stride; Dense [B, K, N] any strides.
    """
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    b = tl.program_id(2)
    seq_start, seq_len = sequence(seq_offsets, b)
    m0 = pid_m * BLOCK_M
    if m0 < seq_len:
        # 64-bit offsets to the sequence and matrix; tile offsets within stay 32-bit (checked).
        Jagged += seq_start * stride_jm
        Out += seq_start * stride_om
        Dense += b.to(tl.int64) * stride_db
        offs_m = m0 + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        acc = tl.full([BLOCK_M, BLOCK_N], 0.0, dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            ks = k0 + offs_k
            x = tl.load(
                Jagged + offs_m[:, None] * stride_jm + ks[None, :],
                mask=(offs_m[:, None] < seq_len) & (ks[None, :] < K),
                other=0.0,
            )
            w = tl.load(
                Dense + ks[:, None] * stride_dk + offs_n[None, :] * stride_dn,
                mask=(ks[:, None] < K) & (offs_n[None, :] < N),
                other=0.0,
            )
            acc += dot(x, w, DOT_PRECISION, INTERPRET_BF16)
        if HAS_BIAS:
            bias = tl.load(Bias + b.to(tl.int64) * stride_bias_b + offs_n, mask=offs_n < N)
            acc += bias[None, :].to(tl.float32)
        tl.store(
            Out + offs_m[:, None] * stride_om + offs_n[None, :],
            cast(acc, Out.dtype.element_ty, INTERPRET_BF16),
            mask=(offs_m[:, None] < seq_len) & (offs_n[None, :] < N),
        )


@triton.jit
def _jagged_jagged_mm_kernel(
    seq_offsets,
    Jagged,
    DOut,
    DDense,
    DBias,
    K,
    N,
    stride_jm,
    stride_om,
    stride_ddb,
    stride_ddk,
    stride_ddn,
    stride_dbias_b,
    DOT_PRECISION: tl.constexpr,
    INTERPRET_BF16: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """DDense[b] = Jagged[rows of b]^T @ DOut[rows of b]; DBias[b] = DOut's column sums.

    One program per (K block, N block, sequence) reduces over all the sequence's rows, so each
    output element is written once (deterministic). An empty sequence gets zeros.
    """
    pid_k = tl.program_id(0)
    pid_n = tl.program_id(1)
    b = tl.program_id(2)
    seq_start, seq_len = sequence(seq_offsets, b)
    Jagged += seq_start * stride_jm
    DOut += seq_start * stride_om
    offs_k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    acc = tl.full([BLOCK_K, BLOCK_N], 0.0, dtype=tl.float32)
    bias_acc = tl.full([BLOCK_N], 0.0, dtype=tl.float32)
    for m0 in range(0, seq_len, BLOCK_M):
        rows = m0 + offs_m
        x_t = tl.load(  # [BLOCK_K, BLOCK_M]: the jagged rows, transposed by the addressing
            Jagged + offs_k[:, None] + rows[None, :] * stride_jm,
            mask=(offs_k[:, None] < K) & (rows[None, :] < seq_len),
            other=0.0,
        )
        g = tl.load(
            DOut + rows[:, None] * stride_om + offs_n[None, :],
            mask=(rows[:, None] < seq_len) & (offs_n[None, :] < N),
            other=0.0,
        )
        acc += dot(x_t, g, DOT_PRECISION, INTERPRET_BF16)
        # Cheap next to the product; only the first K block's sums are stored. tl.reduce with
        # add rather than row_sum: under the interpreter row_sum would sum with numpy, in
        # another order than this kernel always has.
        bias_acc += tl.reduce(g.to(tl.float32), 0, add)
    DDense += b.to(tl.int64) * stride_ddb
    tl.store(
        DDense + offs_k[:, None] * stride_ddk + offs_n[None, :] * stride_ddn,
        cast(acc, DDense.dtype.element_ty, INTERPRET_BF16),
        mask=(offs_k[:, None] < K) & (offs_n[None, :] < N),
    )
    if pid_k == 0:
        tl.store(
            DBias + b.to(tl.int64) * stride_dbias_b + offs_n,
            cast(bias_acc, DBias.dtype.element_ty, INTERPRET_BF16),
            mask=offs_n < N,
        )


@dataclasses.dataclass(frozen=True)
class BmmBlockConfig:
    """Tiles (powers of 2, >= 16) and launch options of the jagged-dense matmul kernels.

    Forward and d_jagged: programs of ``block_m`` rows by ``block_n`` output columns, reducing
    over blocks of ``block_k``. d_dense: programs of ``block_k`` by ``block_n`` outputs,
    reducing over the sequence's rows in blocks of ``block_m``. Tiles wider than a matrix are
    shrunk to it (not below 16).
    """

    block_m: int = 64
    block_n: int = 64
    block_k: int = 64
    num_warps: int = 4
    num_stages: int = 2

    def __post_init__(self) -> None:
        _common.check_power_of_2(self, ("block_m", "block_n", "block_k"))


def default_bmm_block_config(dtype: torch.dtype) -> BmmBlockConfig:
    """Tiles used when ``block_config`` is not given: 32 x 32 x 32 in the interpreter; on a GPU
    64 x 64 x 64 for 16-bit inputs and 32 x 32 x 32 for float32 (not autotuned, not timed)."""
    if INTERPRETED:
        return BmmBlockConfig(32, 32, 32, num_warps=1, num_stages=1)
    if dtype == torch.float32:
        return BmmBlockConfig(32, 32, 32, num_warps=4, num_stages=2)
    return BmmBlockConfig(64, 64, 64, num_warps=4, num_stages=2)


def _check_32bit_tiles(longest: int, block: int, *row_strides: int) -> None:
    """The kernels address rows within one sequence with 32-bit offsets."""
    for stride in row_strides:
        _common.check_32bit_rows(_BMM, longest, stride, block)


@dataclasses.dataclass(frozen=True)
class _BmmProblem:
    seq_offsets: torch.Tensor
    longest: int
    config: BmmBlockConfig


def _bmm_flags(cfg: BmmBlockConfig, dtype: torch.dtype, device: torch.device) -> dict:
    return {
        "DOT_PRECISION": _common.dot_precision(
            dtype, None if INTERPRETED else _common.device_arch(device)
        ),
        "INTERPRET_BF16": INTERPRETED and dtype == torch.bfloat16,
        "num_warps": cfg.num_warps,
        "num_stages": cfg.num_stages,
    }


def _jagged_dense_mm(
    p: _BmmProblem,
    jagged: torch.Tensor,
    dense: torch.Tensor,
    dense_strides: tuple[int, int, int],
    bias: torch.Tensor | None,
    n: int,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """[total, K] jagged @ per-sequence [K, n] (dense read through ``dense_strides``) + bias."""
    total, k = jagged.shape
    batch = p.seq_offsets.numel() - 1
    out = torch.empty((total, n), dtype=out_dtype, device=jagged.device)
    if total == 0 or n == 0:
        return out
    if k == 0 or batch == 0:
        return out.zero_() if bias is None else out.copy_(_bias_rows(p.seq_offsets, bias, total))
    cfg = p.config
    block_m, block_n, block_k = (
        cfg.block_m,
        _common.fit_block(cfg.block_n, n),
        _common.fit_block(cfg.block_k, k),
    )
    _check_32bit_tiles(p.longest, block_m, jagged.stride(0), out.stride(0))
    grid = (triton.cdiv(n, block_n), triton.cdiv(p.longest, block_m), batch)
    _jagged_dense_mm_kernel[grid](
        p.seq_offsets,
        jagged,
        dense,
        jagged if bias is None else bias,  # never read without a bias
        out,
        n,
        k,
        jagged.stride(0),
        *dense_strides,
        0 if bias is None else bias.stride(0),
        out.stride(0),
        HAS_BIAS=bias is not None,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        **_bmm_flags(cfg, jagged.dtype, jagged.device),
    )
    return out


def _bias_rows(seq_offsets: torch.Tensor, bias: torch.Tensor, total: int) -> torch.Tensor:
    """bias[b] for every row of sequence b (the whole result when K == 0)."""
    lengths = (seq_offsets[1:] - seq_offsets[:-1]).to(torch.int64)
    return bias.repeat_interleave(lengths, dim=0, output_size=total)


def _jagged_jagged_mm(
    p: _BmmProblem, jagged: torch.Tensor, d_out: torch.Tensor, dense: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(d_dense [B, K, N], d_bias [B, N]) from jagged [total, K] and d_out [total, N]."""
    batch, k, n = dense.shape
    d_dense = torch.empty((batch, k, n), dtype=dense.dtype, device=dense.device)
    d_bias = torch.empty((batch, n), dtype=dense.dtype, device=dense.device)
    if batch == 0 or n == 0:
        return d_dense, d_bias
    if jagged.shape[0] == 0:
        return d_dense.zero_(), d_bias.zero_()
    cfg = p.config
    block_k, block_n = _common.fit_block(cfg.block_k, k), _common.fit_block(cfg.block_n, n)
    _check_32bit_tiles(p.longest, cfg.block_m, jagged.stride(0), d_out.stride(0))
    # K == 0 still needs one K block: its programs write d_bias.
    grid = (max(1, triton.cdiv(k, block_k)), triton.cdiv(n, block_n), batch)
    _jagged_jagged_mm_kernel[grid](
        p.seq_offsets,
        jagged,
        d_out,
        d_dense,
        d_bias,
        k,
        n,
        jagged.stride(0),
        d_out.stride(0),
        d_dense.stride(0),
        d_dense.stride(1),
        d_dense.stride(2),
        d_bias.stride(0),
        BLOCK_M=cfg.block_m,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        **_bmm_flags(cfg, jagged.dtype, jagged.device),
    )
    return d_dense, d_bias


class _JaggedDenseBmmBroadcastAddFunction(torch.autograd.Function):
    """Forward kernel; backward: d_jagged by the forward kernel, d_dense and d_bias by one."""

    @staticmethod
    def forward(ctx, jagged, dense, bias, problem: _BmmProblem):  # type: ignore[override]
        ctx.save_for_backward(jagged, dense)
        ctx.problem = problem
        strides = (dense.stride(0), dense.stride(1), dense.stride(2))
        return _jagged_dense_mm(problem, jagged, dense, strides, bias, dense.shape[2], jagged.dtype)

    @staticmethod
    def backward(ctx, d_out):  # type: ignore[override]
        jagged, dense = ctx.saved_tensors
        p = ctx.problem
        d_out = _common.last_dim_contiguous(d_out)
        d_jagged = d_dense = d_bias = None
        if ctx.needs_input_grad[0]:
            # d_out [total, N] @ dense[b]^T: dense read as [B, N, K] by swapping its strides.
            strides = (dense.stride(0), dense.stride(2), dense.stride(1))
            d_jagged = _jagged_dense_mm(
                p, d_out, dense, strides, None, dense.shape[1], jagged.dtype
            )
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            d_dense, d_bias = _jagged_jagged_mm(p, jagged, d_out, dense)
        return d_jagged, d_dense, d_bias, None


def triton_jagged_dense_bmm_broadcast_add(
    max_seq_len: int,
    seq_offsets: torch.Tensor,
    jagged: torch.Tensor,
    dense: torch.Tensor,
    bias: torch.Tensor,
    *,
    block_config: BmmBlockConfig | None = None,
) -> torch.Tensor:
    """jagged_dense_bmm_broadcast_add with the Triton kernels.

    Arguments as ``hstu_ops.jagged_dense_bmm_broadcast_add``; float16, bfloat16 or float32,
    accumulated in float32. ``block_config`` overrides :func:`default_bmm_block_config`.
    """
    lengths = check_jagged_dense_bmm_args(max_seq_len, seq_offsets, jagged, dense, bias)
    _common.check_float_dtype(_BMM, jagged.dtype)
    _common.check_device(_BMM, jagged.device, INTERPRETED)
    _common.check_batch(_BMM, lengths.numel())
    problem = _BmmProblem(
        seq_offsets=seq_offsets.contiguous(),
        longest=int(lengths.max()) if lengths.numel() else 0,
        config=block_config or default_bmm_block_config(jagged.dtype),
    )
    jagged = _common.last_dim_contiguous(jagged)
    bias = _common.last_dim_contiguous(bias)
    return _JaggedDenseBmmBroadcastAddFunction.apply(jagged, dense, bias, problem)
