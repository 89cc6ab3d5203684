"""PyTorch reference of the timestamp positional embeddings (the specification of
``add_timestamp_positional_embeddings``).

For every row ``r`` of a jagged batch of token embeddings ``x`` ([total, D]):

    out[r] = alpha * x[r] + (P[pos(r)] + T[bucket(r)])

with ``P`` the position table ([num_positions, D]) and ``T`` the time-bucket table
([num_time_buckets, D]). The sum is computed in float32 (or the widest dtype involved) and
rounded once to the dtype of ``x``. Everything is differentiable: ``x``, ``P`` and ``T`` get
gradients (``alpha * dout``, and the scatter-sums of ``dout`` over the rows that read each
table row).

Position index
--------------
Token ``p`` (0-based) of sequence ``b`` of length ``n``, with ``c = max_contextual_seq_len``
and ``t = num_targets[b]`` (0 without ``num_targets``):

    high   = n - t                 (n - 2 * t with interleave_targets: each target brings two
                                    tokens, e.g. an item and its action)
    pos(p) = p                                        if p < c   (contextual tokens)
    pos(p) = min(high - min(p, high) + c, P_rows - 1) otherwise

Positions are counted from the end of the history: the last history token gets ``c + 1``, the
one before it ``c + 2``, ...; every target gets ``c`` (its ``min(p, high)`` is ``high``), and
positions beyond the table share its last row. Contextual tokens get their own index ``p``, so
the table must have at least ``c`` rows. Without targets, ``high = n`` and the last token gets
``c + 1``.

Time bucket
-----------
The query time of sequence ``b`` is the timestamp of its last token. For every token,

    gap    = query_time - timestamp                  (int64: seconds, as the caller's data)
    x      = max(float32(gap), 1e-6) / 60            (float32: minutes, never below 1e-6 / 60)
    f      = sqrt(x)          if time_bucket_fn == "sqrt"
             log(x)           if time_bucket_fn == "log"
    bucket = min(int(max(f, 0)), T_rows - 1)         (truncated, then clamped to the table)

So the last token is in bucket 0, a token 1 h earlier in bucket ``int(sqrt(60)) = 7``
("sqrt"), tokens later than the query time (unsorted data) in bucket 0, and every gap beyond the
table shares its last row. The float32 steps are IEEE operations (division and square root
correctly rounded), so every backend finds the same "sqrt" bucket; "log" uses each backend's
float32 logarithm, which may differ by an ulp, so a gap within rounding of a boundary
``60 * e**k`` seconds may land in the neighbouring bucket on another backend.

This is the operation of generative-recommenders' ``add_timestamp_positional_embeddings``
(``ops/position.py``), whose 60-second increments, divisor 1 and zero time delta are fixed
here as well. One deliberate difference: upstream's PyTorch path clamps buckets at
``T.size(1) - 1`` (the embedding width) while its Triton path clamps at ``T.size(0) - 1`` (the
last row of the table); every kernel here clamps at the last row of the table, which keeps
every index in range whatever the widths (upstream's module allocates ``num_time_buckets + 1``
rows, so its last row is bucket ``num_time_buckets``).
"""

from __future__ import annotations

import torch

from hstu_ops.pytorch.pt_jagged import check_offsets, row_sequence_ids

__all__ = [
    "TIME_BUCKET_FNS",
    "TIME_BUCKET_INCREMENT",
    "pytorch_add_timestamp_positional_embeddings",
    "timestamp_positional_indices",
]

_OP = "add_timestamp_positional_embeddings"

TIME_BUCKET_FNS = ("sqrt", "log")
TIME_BUCKET_INCREMENT = 60.0
"""Seconds per unit of the time-bucket function's argument (upstream's value)."""

_MIN_GAP = 1e-6
_INDEX_DTYPES = (torch.int32, torch.int64)
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _check_index_vector(name: str, t: torch.Tensor, batch: int) -> None:
    if t.dim() != 1 or t.numel() != batch:
        raise ValueError(
            f"{_OP}: {name} must be 1-D with one entry per sequence ({batch}), got shape "
            f"{list(t.shape)}"
        )
    if t.dtype not in _INDEX_DTYPES:
        raise TypeError(f"{_OP}: {name} must have dtype int32 or int64, got {_dtype_name(t.dtype)}")


def _check_inputs(
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
    time_bucket_fn: str,
    *,
    values: bool = True,
) -> torch.Tensor:
    """Validates the arguments (reading the offsets, lengths and targets, unless ``values`` is
    False: see :mod:`hstu_ops._index_checks`); returns the lengths.

    Shared by every kernel, so that all raise the same errors with the same messages.
    """
    if time_bucket_fn not in TIME_BUCKET_FNS:
        raise ValueError(f"{_OP}: time_bucket_fn must be 'sqrt' or 'log', got {time_bucket_fn!r}")
    if max_seq_len <= 0:
        raise ValueError(f"{_OP}: max_seq_len must be positive, got {max_seq_len}")
    if max_contextual_seq_len < 0:
        raise ValueError(
            f"{_OP}: max_contextual_seq_len must be >= 0, got {max_contextual_seq_len}"
        )
    if seq_embeddings.dim() != 2:
        raise ValueError(
            f"{_OP}: seq_embeddings must be 2-D [total, D], got shape {list(seq_embeddings.shape)}"
        )
    total, dim = seq_embeddings.shape
    tables = (
        ("position_embeddings_weight", position_embeddings_weight),
        ("timestamp_embeddings_weight", timestamp_embeddings_weight),
    )
    for name, x in (("seq_embeddings", seq_embeddings), *tables):
        if x.dtype not in _FLOAT_DTYPES:
            raise TypeError(f"{_OP}: {name} must have a floating dtype, got {_dtype_name(x.dtype)}")
    for name, table in tables:
        if table.dim() != 2 or table.shape[1] != dim:
            raise ValueError(
                f"{_OP}: {name} must be 2-D [rows, {dim}] (the width of seq_embeddings), got "
                f"shape {list(table.shape)}"
            )
    if timestamp_embeddings_weight.shape[0] < 1:
        raise ValueError(f"{_OP}: timestamp_embeddings_weight must have at least one row")
    position_rows = position_embeddings_weight.shape[0]
    if position_rows < max(max_contextual_seq_len, 1):
        raise ValueError(
            f"{_OP}: position_embeddings_weight has {position_rows} rows; it needs at least "
            f"max(1, max_contextual_seq_len = {max_contextual_seq_len}) (contextual tokens "
            "index it with their own positions)"
        )
    if timestamps.dim() != 1 or timestamps.numel() != total:
        raise ValueError(
            f"{_OP}: timestamps must be 1-D with one entry per row of seq_embeddings ({total}), "
            f"got shape {list(timestamps.shape)}"
        )
    if timestamps.dtype not in _INDEX_DTYPES:
        raise TypeError(
            f"{_OP}: timestamps must have dtype int32 or int64 (seconds), got "
            f"{_dtype_name(timestamps.dtype)}"
        )
    tensors = (
        ("position_embeddings_weight", position_embeddings_weight),
        ("timestamp_embeddings_weight", timestamp_embeddings_weight),
        ("seq_offsets", seq_offsets),
        ("seq_lengths", seq_lengths),
        ("timestamps", timestamps),
        ("num_targets", num_targets),
    )
    for name, x in tensors:
        if x is not None and x.device != seq_embeddings.device:
            raise ValueError(
                f"{_OP}: {name} is on {x.device} but seq_embeddings is on "
                f"{seq_embeddings.device}; all tensors must share a device"
            )
    check_offsets(_OP, "seq_offsets", seq_offsets, total, "seq_embeddings", values=values)
    batch = seq_offsets.numel() - 1
    lengths = seq_offsets[1:] - seq_offsets[:-1]
    _check_index_vector("seq_lengths", seq_lengths, batch)
    if num_targets is not None:
        _check_index_vector("num_targets", num_targets, batch)
    if not values:
        return lengths
    mismatch = (seq_lengths != lengths).nonzero()
    if mismatch.numel():
        b = int(mismatch[0, 0])
        raise ValueError(
            f"{_OP}: seq_lengths[{b}] = {int(seq_lengths[b])} does not match "
            f"seq_offsets[{b + 1}] - seq_offsets[{b}] = {int(lengths[b])}"
        )
    if batch and int(lengths.max()) > max_seq_len:
        b = int(torch.argmax(lengths))
        raise ValueError(
            f"{_OP}: sequence {b} has {int(lengths[b])} tokens, more than "
            f"max_seq_len = {max_seq_len}"
        )
    if num_targets is not None:
        tokens_per_target = 2 if interleave_targets else 1
        bad = ((num_targets < 0) | (num_targets * tokens_per_target > lengths)).nonzero()
        if bad.numel():
            b = int(bad[0, 0])
            limit = int(lengths[b]) // tokens_per_target
            extra = " with interleave_targets (two tokens per target)" if interleave_targets else ""
            raise ValueError(
                f"{_OP}: num_targets[{b}] = {int(num_targets[b])} is outside [0, {limit}]"
                f"{extra} for sequence {b} of {int(lengths[b])} tokens"
            )
    return lengths


def timestamp_positional_indices(
    max_contextual_seq_len: int,
    position_rows: int,
    time_bucket_rows: int,
    seq_offsets: torch.Tensor,
    timestamps: torch.Tensor,
    num_targets: torch.Tensor | None,
    interleave_targets: bool,
    time_bucket_fn: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(position index, time bucket) of every row, int64 [total] each; see the module docstring.

    No argument checks: the callers have made them.
    """
    total = timestamps.numel()
    offsets = seq_offsets.to(torch.int64)
    seq = row_sequence_ids(offsets, total)
    row = torch.arange(total, device=timestamps.device)
    p = row - offsets[seq]
    n = offsets[seq + 1] - offsets[seq]
    high = n
    if num_targets is not None:
        tokens_per_target = 2 if interleave_targets else 1
        high = n - tokens_per_target * num_targets.to(torch.int64)[seq]
    c = max_contextual_seq_len
    pos = (high - torch.minimum(p, high) + c).clamp(max=position_rows - 1)
    pos = torch.where(p < c, p, pos)

    stamps = timestamps.to(torch.int64)
    query_time = stamps[offsets[seq + 1] - 1]  # the last token of the row's sequence
    x = (query_time - stamps).to(torch.float32).clamp(min=_MIN_GAP) / TIME_BUCKET_INCREMENT
    f = torch.log(x) if time_bucket_fn == "log" else torch.sqrt(x)
    bucket = f.clamp(min=0).to(torch.int64).clamp(max=time_bucket_rows - 1)
    return pos, bucket


def pytorch_add_timestamp_positional_embeddings(
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
) -> torch.Tensor:
    """``alpha * seq_embeddings + position and time-bucket embeddings``, jagged.

    seq_embeddings: [total, D]; position_embeddings_weight: [num_positions, D];
    timestamp_embeddings_weight: [num_time_buckets, D]; seq_offsets: int [B + 1];
    seq_lengths: int [B] (must equal the differences of seq_offsets); timestamps: int [total],
    seconds; num_targets: optional int [B]. Returns [total, D] in the dtype of seq_embeddings.
    See the module docstring for the indices.
    """
    _check_inputs(
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
    pos, bucket = timestamp_positional_indices(
        max_contextual_seq_len,
        position_embeddings_weight.shape[0],
        timestamp_embeddings_weight.shape[0],
        seq_offsets,
        timestamps,
        num_targets,
        interleave_targets,
        time_bucket_fn,
    )
    compute = torch.promote_types(
        torch.promote_types(seq_embeddings.dtype, position_embeddings_weight.dtype),
        torch.promote_types(timestamp_embeddings_weight.dtype, torch.float32),
    )
    # The tables are widened before the gather so that their gradients accumulate in the
    # compute dtype and are rounded to the table's dtype once.
    position = position_embeddings_weight.to(compute).index_select(0, pos)
    time = timestamp_embeddings_weight.to(compute).index_select(0, bucket)
    out = seq_embeddings.to(compute) * alpha + (position + time)
    return out.to(seq_embeddings.dtype)
