"""Triton kernels of the timestamp positional embeddings, forward and backward (op family 5).

Semantics are those of the PyTorch reference :mod:`hstu_ops.pytorch.pt_position`:

    out[r] = alpha * seq_embeddings[r] + (P[pos(r)] + T[bucket(r)])

with the same position indices (counted from the end of the history, targets and contextual
tokens, clamped to P's last row) and time buckets (gap to the sequence's last timestamp, in
minutes, through sqrt or log, clamped to T's last row).

Layout of the work:

* forward: one program per (sequence, block of rows). It computes the rows' position index and
  time bucket once, then loops over the embedding width in BLOCK_D chunks, gathering the two
  table rows and adding them in float32. When a table needs a gradient, the indices are written
  out (int32, one per row and table), so the backward does not recompute them.
* backward: ``d seq_embeddings = alpha * dout``, written by the first table's sum below from
  the loads it makes anyway (every row of ``dout`` is read once there), or a torch expression
  when no table needs a gradient. The table gradients are
  scatter-sums of ``dout`` rows, computed deterministically, without atomics: the rows are
  sorted by table index (a stable ``torch.sort``), the segment of each table row is found with
  ``torch.searchsorted``. The sorted rows are cut into pieces of at most ``rows_per_piece``
  rows, each inside one segment; one program per (piece, BLOCK_D chunk) adds its rows in
  float32 into a partial row, then one program per (table row, BLOCK_D chunk) adds its
  segment's partial rows. Both sums go in sorted-row order (loads unrolled by
  ``rows_per_step``); table rows that no token reads get zeros; the result depends on
  ``rows_per_piece`` only, and repeated runs are bit-identical. A table row read by a large
  part of the batch (all targets share one position; with the time buckets, every token whose
  gap falls in the first buckets) is thus summed by many programs, not one: with a single
  program per table row (``rows_per_piece=0``, the former layout, kept selectable) its time
  grew with the batch, which made this backward slower than PyTorch's on a GPU.
  The number of pieces is bounded without reading the indices on the host (rows / rows_per_piece
  + table rows), so the backward never synchronises with the GPU.

Importing this module imports ``triton``. As in :mod:`hstu_ops.triton.triton_hstu_attention`,
the mode (compiled for CUDA/ROCm tensors, or Triton's interpreter for CPU tensors) is fixed by
``TRITON_INTERPRET`` when this module is imported: the kernels call only ``triton.language``
builtins and the package's own ``@triton.jit`` helpers (this module's and
:mod:`hstu_ops.triton._common`'s; never the library's jit-compiled ``tl.sum``, ``tl.zeros``,
...), so there is no reduction inside a kernel.
"""

# Kernels branch on tl.constexpr flags with if/else statements, which Triton resolves at compile
# time; they stay statements rather than the conditional expressions SIM108 asks for.
# ruff: noqa: SIM108

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from hstu_ops._index_checks import index_value_checks
from hstu_ops.pytorch.pt_position import TIME_BUCKET_INCREMENT, _check_inputs
from hstu_ops.triton import _common
from hstu_ops.triton._common import cast, sequence

__all__ = [
    "INTERPRETED",
    "AddTimestampPositionalEmbeddingsFunction",
    "PositionBlockConfig",
    "default_position_block_config",
    "triton_add_timestamp_positional_embeddings",
]

_OP = "add_timestamp_positional_embeddings"


INTERPRETED: bool = _common.kernel_module_mode(__name__)
"""Whether the kernels of this module were created for Triton's interpreter (CPU tensors)."""


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------
@triton.jit
def _position_index(
    p, n, num_targets, b, c, position_rows, HAS_TARGETS: tl.constexpr, INTERLEAVE: tl.constexpr
):
    """Position index of token(s) p of sequence b (length n): see the reference's docstring."""
    high = n
    if HAS_TARGETS:
        t = tl.load(num_targets + b).to(tl.int32)
        if INTERLEAVE:
            high = n - 2 * t
        else:
            high = n - t
    pos = high - tl.minimum(p, high) + c
    pos = tl.minimum(pos, position_rows - 1)
    return tl.where(p < c, p, pos)


@triton.jit
def _time_bucket(gap, time_bucket_rows, increment, LOG_BUCKETS: tl.constexpr):
    """Bucket of an int64 gap in seconds: int(f(max(gap, 1e-6) / increment)), clamped.

    Division and square root are the correctly rounded ones (``/`` and ``tl.sqrt`` are
    approximate on NVIDIA GPUs), so that a gap of exactly 60 * k**2 seconds lands in bucket k
    as in the reference.
    """
    x = tl.div_rn(tl.maximum(gap.to(tl.float32), 1e-6), increment)
    if LOG_BUCKETS:
        f = tl.log(x)
    else:
        f = tl.sqrt_rn(x)
    bucket = tl.maximum(f, 0.0).to(tl.int32)
    return tl.minimum(bucket, time_bucket_rows - 1)


# --------------------------------------------------------------------------------------------
# Forward
# --------------------------------------------------------------------------------------------
@triton.jit
def _add_timestamp_pos_emb_fwd_kernel(
    SeqEmb,
    PosTable,
    TsTable,
    Timestamps,
    seq_offsets,
    num_targets,
    Out,
    PosIdx,
    TsIdx,
    stride_sn,
    stride_pn,
    stride_tn,
    stride_on,
    alpha,
    increment,
    c,
    position_rows,
    time_bucket_rows,
    D,
    HAS_TARGETS: tl.constexpr,
    INTERLEAVE: tl.constexpr,
    LOG_BUCKETS: tl.constexpr,
    SAVE_INDICES: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    INTERPRET_BF16: tl.constexpr,
):
    b = tl.program_id(0)
    seq_start, n = sequence(seq_offsets, b)
    n0 = tl.program_id(1) * BLOCK_N
    if n0 < n:
        p = n0 + tl.arange(0, BLOCK_N)
        row_ok = p < n
        rows = seq_start + p  # int64
        pos = _position_index(p, n, num_targets, b, c, position_rows, HAS_TARGETS, INTERLEAVE)
        query_time = tl.load(Timestamps + seq_start + n - 1).to(tl.int64)
        stamps = tl.load(Timestamps + rows, mask=row_ok, other=0).to(tl.int64)
        bucket = _time_bucket(query_time - stamps, time_bucket_rows, increment, LOG_BUCKETS)
        if SAVE_INDICES:
            tl.store(PosIdx + rows, pos, mask=row_ok)
            tl.store(TsIdx + rows, bucket, mask=row_ok)
        seq_ptrs = SeqEmb + rows[:, None] * stride_sn
        pos_ptrs = PosTable + pos.to(tl.int64)[:, None] * stride_pn
        ts_ptrs = TsTable + bucket.to(tl.int64)[:, None] * stride_tn
        out_ptrs = Out + rows[:, None] * stride_on
        for d0 in range(0, D, BLOCK_D):
            offs_d = d0 + tl.arange(0, BLOCK_D)
            mask = row_ok[:, None] & (offs_d[None, :] < D)
            x = tl.load(seq_ptrs + offs_d[None, :], mask=mask, other=0.0).to(tl.float32)
            pe = tl.load(pos_ptrs + offs_d[None, :], mask=mask, other=0.0).to(tl.float32)
            te = tl.load(ts_ptrs + offs_d[None, :], mask=mask, other=0.0).to(tl.float32)
            out = x * alpha + (pe + te)
            tl.store(
                out_ptrs + offs_d[None, :],
                cast(out, Out.dtype.element_ty, INTERPRET_BF16),
                mask=mask,
            )


# --------------------------------------------------------------------------------------------
# Backward: deterministic segment sums of dout rows into table rows
# --------------------------------------------------------------------------------------------
@triton.jit
def _segment_sum_rows_kernel(
    DOut,
    order,
    segment_starts,
    DTable,
    DScaled,
    stride_don,
    stride_dtn,
    stride_dsn,
    scale,
    D,
    ROWS_PER_STEP: tl.constexpr,
    BLOCK_D: tl.constexpr,
    GATHER: tl.constexpr,
    WRITE_SCALED: tl.constexpr,
    INTERPRET_BF16: tl.constexpr,
    SCALED_INTERPRET_BF16: tl.constexpr,
):
    """DTable[k] = sum of DOut[order[i]] for i in [segment_starts[k], segment_starts[k + 1])
    (DOut[i] without GATHER; ``order`` is not read then). With WRITE_SCALED (and GATHER, the
    segments covering every row once), also DScaled[row] = scale * DOut[row] for each row
    read: the gradient of seq_embeddings, from the same load.

    The rows are added one after the other in segment order, in float32: the result is the
    plain sequential sum, whatever the tiles. ROWS_PER_STEP row loads are issued per step
    (unrolled), which keeps that many loads in flight; only the additions are sequential.
    """
    k = tl.program_id(0)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    start = tl.load(segment_starts + k)
    end = tl.load(segment_starts + k + 1)
    acc = tl.full([BLOCK_D], 0.0, dtype=tl.float32)
    for r0 in range(start, end, ROWS_PER_STEP):
        for u in tl.static_range(ROWS_PER_STEP):
            in_segment = r0 + u < end
            if GATHER:
                row = tl.load(order + r0 + u, mask=in_segment, other=0).to(tl.int64)
            else:
                # Through the loaded start, a tensor (the interpreter's loop index is an int).
                row = start.to(tl.int64) + (r0 - start + u)
            row_ok = d_ok & in_segment
            x = tl.load(DOut + row * stride_don + offs_d, mask=row_ok, other=0.0).to(tl.float32)
            acc += x
            if WRITE_SCALED:
                tl.store(
                    DScaled + row * stride_dsn + offs_d,
                    cast(x * scale, DScaled.dtype.element_ty, SCALED_INTERPRET_BF16),
                    mask=row_ok,
                )
    tl.store(
        DTable + k.to(tl.int64) * stride_dtn + offs_d,
        cast(acc, DTable.dtype.element_ty, INTERPRET_BF16),
        mask=d_ok,
    )


# --------------------------------------------------------------------------------------------
# Launchers
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class PositionBlockConfig:
    """Tiles and warps of the two kernels.

    ``block_n``: rows per forward program; ``block_d``: embedding columns per step (forward)
    or per program (backward), both powers of 2 >= 16; ``rows_per_step``: row loads issued per
    step of the backward's sequential sums (unrolled; >= 1); ``rows_per_piece``: the most
    sorted rows one backward program adds before the per-table-row sum of the pieces (>= 1),
    or 0 for one program per table row adding its whole segment (no partial sums).
    """

    block_n: int = 32
    block_d: int = 64
    rows_per_step: int = 16
    fwd_warps: int = 4
    bwd_warps: int = 4
    rows_per_piece: int = 64

    def __post_init__(self) -> None:
        _common.check_power_of_2(self, ("block_n", "block_d"))
        for name in ("rows_per_step", "rows_per_piece"):
            least = 1 if name == "rows_per_step" else 0
            if getattr(self, name) < least:
                raise ValueError(
                    f"PositionBlockConfig.{name} must be >= {least}, got {getattr(self, name)}"
                )


def default_position_block_config(dim: int) -> PositionBlockConfig:
    """Tiles used when ``block_config`` is not given (not autotuned, not yet timed on a GPU).

    Under the interpreter: 16-wide tiles and pieces of 8 rows (several blocks per sequence, per
    row and per segment, which the tests want). On a GPU: 32 rows by up to 256 columns
    forward (8 warps); backward one warp per 256 columns, so that each lane loads 16 bytes of
    a 16-bit row at once (sm90 code: 0.22 warp-instructions per element for the sum that also
    writes d_seq, against 0.66 with 4 warps on 128 columns, which loaded 2 bytes per lane;
    bench_compiled_loops.py), 16 row loads in flight per step, pieces of 64 rows (a batch of
    32 sequences of 4,096 tokens: about 2,000 pieces, each of the hottest table row's at most
    2,048 partial rows read 16 at a time).
    """
    if INTERPRETED:
        return PositionBlockConfig(16, 16, 4, 1, 1, rows_per_piece=8)
    block_d = min(max(16, triton.next_power_of_2(dim)), 256)
    return PositionBlockConfig(32, block_d, 16, 8, 1, rows_per_piece=64)


@dataclasses.dataclass(frozen=True)
class _Problem:
    """What the backward needs besides the saved indices."""

    alpha: float
    seq_dtype: torch.dtype
    position_shape: tuple[int, int]
    position_dtype: torch.dtype
    time_bucket_shape: tuple[int, int]
    time_bucket_dtype: torch.dtype
    config: PositionBlockConfig


def add_timestamp_positional_embeddings_fwd(
    alpha: float,
    max_len: int,
    max_contextual_seq_len: int,
    position_embeddings_weight: torch.Tensor,
    timestamp_embeddings_weight: torch.Tensor,
    seq_offsets: torch.Tensor,
    seq_embeddings: torch.Tensor,
    timestamps: torch.Tensor,
    num_targets: torch.Tensor | None,
    interleave_targets: bool,
    time_bucket_fn: str,
    config: PositionBlockConfig,
    save_indices: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Forward launcher: (out, position indices, time buckets); indices only if save_indices.

    Inputs as validated by the reference's checks, last dimensions contiguous; max_len bounds
    the sequence lengths (the grid's rows per sequence).
    """
    total, dim = seq_embeddings.shape
    out = torch.empty_like(seq_embeddings, memory_format=torch.contiguous_format)
    pos_idx = ts_idx = None
    if save_indices:
        pos_idx = torch.empty(total, dtype=torch.int32, device=seq_embeddings.device)
        ts_idx = torch.empty(total, dtype=torch.int32, device=seq_embeddings.device)
    batch = seq_offsets.numel() - 1
    if total == 0 or dim == 0 or max_len == 0:
        return out, pos_idx, ts_idx
    grid = (batch, triton.cdiv(max_len, config.block_n))
    _add_timestamp_pos_emb_fwd_kernel[grid](
        seq_embeddings,
        position_embeddings_weight,
        timestamp_embeddings_weight,
        timestamps,
        seq_offsets,
        seq_offsets if num_targets is None else num_targets,  # not read without targets
        out,
        out if pos_idx is None else pos_idx,  # not written unless SAVE_INDICES
        out if ts_idx is None else ts_idx,
        seq_embeddings.stride(0),
        position_embeddings_weight.stride(0),
        timestamp_embeddings_weight.stride(0),
        out.stride(0),
        float(alpha),
        TIME_BUCKET_INCREMENT,
        int(max_contextual_seq_len),
        position_embeddings_weight.shape[0],
        timestamp_embeddings_weight.shape[0],
        dim,
        HAS_TARGETS=num_targets is not None,
        INTERLEAVE=bool(interleave_targets),
        LOG_BUCKETS=time_bucket_fn == "log",
        SAVE_INDICES=save_indices,
        BLOCK_N=config.block_n,
        BLOCK_D=config.block_d,
        INTERPRET_BF16=INTERPRETED and seq_embeddings.dtype == torch.bfloat16,
        num_warps=config.fwd_warps,
    )
    return out, pos_idx, ts_idx


def table_gradient(
    dout: torch.Tensor,
    indices: torch.Tensor,
    table_rows: int,
    dtype: torch.dtype,
    config: PositionBlockConfig,
    scaled: tuple[torch.Tensor, float] | None = None,
) -> torch.Tensor:
    """[table_rows, D] with row k = sum of dout[r] over the rows r with indices[r] == k.

    Deterministic: sums in row order within each table row, in float32, rounded once to dtype.
    dout: [total, D], last dimension contiguous; indices: int [total], in [0, table_rows).
    ``scaled = (target, scale)``: also target = (scale * dout in float32) in target's dtype,
    written from the loads of the sum (every row of dout is read once), which saves reading
    dout again for the gradient of seq_embeddings.
    """
    total, dim = dout.shape
    grad = torch.empty((table_rows, dim), dtype=dtype, device=dout.device)
    if table_rows == 0 or dim == 0 or total == 0:
        if scaled is not None:
            target, scale = scaled
            target.copy_(dout.to(torch.float32) * scale)
        return grad.zero_()
    sorted_idx, order = torch.sort(indices, stable=True)
    if total < 2**31:  # int32 row numbers: half the bytes of each lookup
        order = order.to(torch.int32)
    boundaries = torch.arange(table_rows + 1, dtype=sorted_idx.dtype, device=dout.device)
    segment_starts = torch.searchsorted(sorted_idx, boundaries)
    if config.rows_per_piece == 0:
        _segment_sums(dout, order, segment_starts, grad, config, scaled)
        return grad
    piece_starts, table_piece_starts = _pieces(sorted_idx, segment_starts, config.rows_per_piece)
    partial = torch.empty((piece_starts.numel() - 1, dim), dtype=torch.float32, device=dout.device)
    _segment_sums(dout, order, piece_starts, partial, config, scaled)
    _segment_sums(partial, None, table_piece_starts, grad, config)
    return grad


def _pieces(
    sorted_idx: torch.Tensor, segment_starts: torch.Tensor, rows_per_piece: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(piece_starts, table_piece_starts): the sorted rows cut where a segment starts and every
    ``rows_per_piece`` rows; piece p is rows [piece_starts[p], piece_starts[p + 1]), and the
    pieces of table row k are [table_piece_starts[k], table_piece_starts[k + 1]).

    Only device tensors, sized by a bound (every piece boundary is a segment start or a
    multiple of rows_per_piece), never by a count read back from the GPU; pieces past the last
    one are empty.
    """
    total, table_rows = sorted_idx.numel(), segment_starts.numel() - 1
    device = sorted_idx.device
    row = torch.arange(total, device=device)
    starts = row % rows_per_piece == 0
    starts[1:] |= sorted_idx[1:] != sorted_idx[:-1]
    pieces_through = torch.cumsum(starts, 0)  # pieces starting at or before each row
    bound = triton.cdiv(total, rows_per_piece) + table_rows
    piece_starts = torch.full((bound + 1,), total, dtype=torch.int64, device=device)
    # Indices within the table never reach the clamp (the bound holds); it keeps indices that
    # were never written (launches recorded, not run: hstu_ops.gpu_compile) in the buffer.
    piece = (pieces_through - 1).clamp_(max=bound - 1)
    piece_starts.scatter_reduce_(0, piece, row, reduce="amin")
    pieces_before = torch.cat([pieces_through.new_zeros(1), pieces_through])
    return piece_starts, pieces_before[segment_starts]


def _segment_sums(
    rows: torch.Tensor,
    order: torch.Tensor | None,
    segment_starts: torch.Tensor,
    out: torch.Tensor,
    config: PositionBlockConfig,
    scaled: tuple[torch.Tensor, float] | None = None,
) -> None:
    """out[k] = the sum of rows[order[i]] (rows[i] when order is None) over segment k; with
    ``scaled = (target, scale)`` (order given, the segments covering every row), also
    target[r] = scale * rows[r] for every row."""
    assert scaled is None or order is not None
    target, scale = scaled if scaled is not None else (out, 1.0)  # not written without it
    grid = (segment_starts.numel() - 1, triton.cdiv(rows.shape[1], config.block_d))
    _segment_sum_rows_kernel[grid](
        rows,
        rows if order is None else order,  # not read without GATHER
        segment_starts,
        out,
        target,
        rows.stride(0),
        out.stride(0),
        target.stride(0),
        float(scale),
        rows.shape[1],
        ROWS_PER_STEP=config.rows_per_step,
        BLOCK_D=config.block_d,
        GATHER=order is not None,
        WRITE_SCALED=scaled is not None,
        INTERPRET_BF16=INTERPRETED and out.dtype == torch.bfloat16,
        SCALED_INTERPRET_BF16=INTERPRETED and target.dtype == torch.bfloat16,
        num_warps=config.bwd_warps,
    )


class AddTimestampPositionalEmbeddingsFunction(torch.autograd.Function):
    """Autograd wrapper: saves the per-row table indices (int32) when a table needs a gradient."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx,
        seq_embeddings,
        position_embeddings_weight,
        timestamp_embeddings_weight,
        timestamps,
        seq_offsets,
        num_targets,
        fwd_args: dict,
        problem: _Problem,
    ):
        save = bool(ctx.needs_input_grad[1] or ctx.needs_input_grad[2])
        out, pos_idx, ts_idx = add_timestamp_positional_embeddings_fwd(
            position_embeddings_weight=position_embeddings_weight,
            timestamp_embeddings_weight=timestamp_embeddings_weight,
            seq_offsets=seq_offsets,
            seq_embeddings=seq_embeddings,
            timestamps=timestamps,
            num_targets=num_targets,
            save_indices=save,
            **fwd_args,
        )
        ctx.save_for_backward(pos_idx, ts_idx)
        ctx.problem = problem
        return out

    @staticmethod
    def backward(ctx, dout):  # type: ignore[override]
        pos_idx, ts_idx = ctx.saved_tensors
        p: _Problem = ctx.problem
        needs_seq, needs_pos, needs_ts = ctx.needs_input_grad[:3]
        d_seq = d_pos = d_ts = None
        if needs_pos or needs_ts:
            dout = _common.last_dim_contiguous(dout)
            # The first table's sum reads every row of dout once: it writes d_seq as well.
            if needs_seq:
                d_seq = torch.empty(dout.shape, dtype=p.seq_dtype, device=dout.device)
            scaled = (d_seq, p.alpha) if needs_seq else None
        elif needs_seq:
            d_seq = (dout.to(torch.float32) * p.alpha).to(p.seq_dtype)
        if needs_pos:
            d_pos = table_gradient(
                dout, pos_idx, p.position_shape[0], p.position_dtype, p.config, scaled
            )
            scaled = None
        if needs_ts:
            d_ts = table_gradient(
                dout, ts_idx, p.time_bucket_shape[0], p.time_bucket_dtype, p.config, scaled
            )
        return d_seq, d_pos, d_ts, None, None, None, None, None


def triton_add_timestamp_positional_embeddings(
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
    *,
    block_config: PositionBlockConfig | None = None,
) -> torch.Tensor:
    """The op with the Triton kernels; arguments as
    ``hstu_ops.add_timestamp_positional_embeddings``.

    seq_embeddings and the tables: float16, bfloat16 or float32 (any mix); the sums are in
    float32. ``block_config`` overrides :func:`default_position_block_config`.
    """
    lengths = _check_inputs(
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
        values=index_value_checks(),
    )
    for name, x in (
        ("seq_embeddings", seq_embeddings),
        ("position_embeddings_weight", position_embeddings_weight),
        ("timestamp_embeddings_weight", timestamp_embeddings_weight),
    ):
        _common.check_float_dtype(_OP, x.dtype, f"{x.dtype} for {name}")
    _common.check_device(_OP, seq_embeddings.device, INTERPRETED)
    # On a GPU the grid covers max_seq_len rows per sequence, known without reading the offsets
    # back (programs past a sequence's end return at once); CPU offsets (the interpreter,
    # which pays for every program) are read for free.
    max_len = int(max_seq_len)
    if seq_offsets.device.type == "cpu":
        max_len = int(lengths.max()) if lengths.numel() else 0
    config = block_config or default_position_block_config(seq_embeddings.shape[1])
    if triton.cdiv(max_len, config.block_n) > 65535:
        raise ValueError(
            f"{_OP}: the TRITON kernel's grid holds at most 65535 blocks of {config.block_n} "
            f"rows per sequence; the grid covers {max_len} rows (on a GPU max_seq_len, under "
            "the interpreter the longest sequence)"
        )
    problem = _Problem(
        alpha=float(alpha),
        seq_dtype=seq_embeddings.dtype,
        position_shape=tuple(position_embeddings_weight.shape),
        position_dtype=position_embeddings_weight.dtype,
        time_bucket_shape=tuple(timestamp_embeddings_weight.shape),
        time_bucket_dtype=timestamp_embeddings_weight.dtype,
        config=config,
    )
    fwd_args = dict(
        alpha=float(alpha),
        max_len=max_len,
        max_contextual_seq_len=int(max_contextual_seq_len),
        interleave_targets=bool(interleave_targets),
        time_bucket_fn=time_bucket_fn,
        config=config,
    )
    return AddTimestampPositionalEmbeddingsFunction.apply(
        _common.last_dim_contiguous(seq_embeddings),
        _common.last_dim_contiguous(position_embeddings_weight),
        _common.last_dim_contiguous(timestamp_embeddings_weight),
        timestamps.contiguous(),
        seq_offsets.contiguous(),
        None if num_targets is None else num_targets.contiguous(),
        fwd_args,
        problem,
    )
