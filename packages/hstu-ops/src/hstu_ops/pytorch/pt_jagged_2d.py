"""PyTorch reference of the 2-D jagged ops (op family 4): the specification the kernels follow.

A 2-D jagged tensor holds the rows of B sequences back to back: ``values`` is ``[total, D]``
and int32/int64 ``offsets`` of B + 1 entries say where each sequence starts (see
:mod:`hstu_ops.pytorch.pt_jagged`). Names and argument order follow generative-recommenders'
``ops/jagged_tensors.py``.

concat_2D_jagged / split_2D_jagged
----------------------------------
Two sides, *left* and *right*, with the same batch size B and row width D, are joined sequence
by sequence: sequence b of the joined tensor is left sequence b followed by right sequence b.
``split_2D_jagged`` is the exact inverse. Either side may be *dense* instead of jagged: its
offsets are None and every one of its sequences has exactly ``max_len_<side>`` rows, so its
values are ``[B * max_len_<side>, D]`` (sequence b is rows ``[b * max_len, (b + 1) * max_len)``).

* ``max_len_left`` / ``max_len_right``: required for a dense side (its fixed length); for a
  jagged side optional, and when given a bound that every sequence of that side must respect
  (checked; generative-recommenders' reference would silently truncate longer sequences).
* ``max_seq_len``: a bound on the length of every joined sequence (checked). The Triton
  kernels size their grid from the lengths actually present, so it is a contract, not a tile
  count.
* Batch size: from the offsets (both given: same length); a concat of two dense sides takes it
  from ``rows / max_len``. A split needs at least one jagged side.
* ``split_2D_jagged``'s ``total_len_left`` / ``total_len_right`` are optional row counts of the
  two results (generative-recommenders uses them to avoid reading ``offsets[-1]``); when given
  they must be right.
* Outputs are 2-D (a dense side's result is ``[B * max_len, D]``); gradients flow to the
  values (the concat's gradient is the split of the output gradient and vice versa).

jagged_dense_bmm_broadcast_add
------------------------------
``out[rows of sequence b] = jagged[rows of sequence b] @ dense[b] + bias[b]`` with jagged
``[total, K]``, dense ``[B, K, N]``, bias ``[B, N]``, out ``[total, N]`` in jagged's dtype.
Products and sums are taken in float32 for 16-bit inputs (in the input dtype for float32 and
float64), then rounded once, as generative-recommenders' reference does. Sequences must be at
most ``max_seq_len`` rows (checked).

The argument checks read tensor data (they synchronise with a GPU); the Triton kernels run the
same checks, so both kernels refuse the same arguments with the same messages.
"""

from __future__ import annotations

import dataclasses
import operator

import torch

from hstu_ops.pytorch.pt_jagged import (
    _check_index_tensor,
    _check_same_device,
    _dtype_name,
    _first_true,
    check_offsets,
    jagged_to_padded_dense,
    padded_dense_to_jagged,
    row_sequence_ids,
)

__all__ = [
    "MAX_ROWS_PER_PROGRAM",
    "JaggedSides",
    "check_jagged_dense_bmm_args",
    "check_rows_per_program",
    "pytorch_concat_2D_jagged",
    "pytorch_jagged_dense_bmm_broadcast_add",
    "pytorch_split_2D_jagged",
    "resolve_concat_sides",
    "resolve_split_sides",
]

_CONCAT = "concat_2D_jagged"
_SPLIT = "split_2D_jagged"
_BMM = "jagged_dense_bmm_broadcast_add"


# --------------------------------------------------------------------------------------------
# Argument checks
# --------------------------------------------------------------------------------------------
def _as_count(op: str, name: str, value: object, *, optional: bool = False) -> int | None:
    """A non-negative Python int (or None when ``optional``)."""
    if value is None:
        if optional:
            return None
        raise TypeError(f"{op}: {name} must be an int, got None")
    if isinstance(value, bool):
        raise TypeError(f"{op}: {name} must be an int, got {value!r}")
    try:
        count = operator.index(value)
    except TypeError:
        raise TypeError(f"{op}: {name} must be an int, got {value!r}") from None
    if count < 0:
        raise ValueError(f"{op}: {name} must be >= 0, got {count}")
    return count


def _check_2d(op: str, name: str, t: object) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a tensor, got {type(t).__name__}")
    if t.dim() != 2:
        raise ValueError(f"{op}: {name} must be 2-D [rows, D], got shape {list(t.shape)}")
    return t


@dataclasses.dataclass(frozen=True)
class JaggedSides:
    """The two sides of a 2-D concat or split, after the argument checks.

    ``offsets_left`` / ``offsets_right`` are int64 offsets for both kinds of side (``b *
    max_len`` for a dense one); ``dense_len_*`` is the fixed length of a dense side, None for a
    jagged one. ``longest`` is the longest joined sequence of the batch.
    """

    batch: int
    offsets_left: torch.Tensor
    offsets_right: torch.Tensor
    dense_len_left: int | None
    dense_len_right: int | None
    rows_left: int
    rows_right: int
    longest: int


def _check_side_offsets(
    op: str, side: str, offsets: torch.Tensor | None, values_name: str, values: torch.Tensor
) -> None:
    if offsets is None:
        return
    name = f"offsets_{side}"
    if not isinstance(offsets, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a tensor or None, got {type(offsets).__name__}")
    _check_index_tensor(op, name, offsets)
    _check_same_device(op, name, offsets, values_name, values)


def _dense_len_required(op: str, side: str, offsets: torch.Tensor | None, max_len: int | None):
    if offsets is None and max_len is None:
        raise ValueError(
            f"{op}: max_len_{side} is required when offsets_{side} is None (a dense {side} side "
            f"has max_len_{side} rows per sequence)"
        )


def _batch_from_offsets(
    op: str, offsets_left: torch.Tensor | None, offsets_right: torch.Tensor | None
) -> int | None:
    both = offsets_left is not None and offsets_right is not None
    if both and offsets_left.numel() != offsets_right.numel():
        raise ValueError(
            f"{op}: offsets_left and offsets_right must have the same length (batch size + 1), "
            f"got {offsets_left.numel()} and {offsets_right.numel()}"
        )
    for offsets in (offsets_left, offsets_right):
        if offsets is not None:
            return max(offsets.numel() - 1, 0)
    return None


def _int64_offsets(
    offsets: torch.Tensor | None, dense_len: int | None, batch: int, device: torch.device
) -> torch.Tensor:
    if offsets is not None:
        return offsets.to(torch.int64)
    return torch.arange(batch + 1, device=device, dtype=torch.int64) * dense_len


def _check_jagged_side_bound(
    op: str, side: str, values_name: str, lengths: torch.Tensor, max_len: int | None
) -> None:
    """A jagged side's max_len, when given, bounds its sequences."""
    if max_len is None or not lengths.numel():
        return
    bad = _first_true(lengths > max_len)
    if bad is not None:
        raise ValueError(
            f"{op}: sequence {bad} of {values_name} has {int(lengths[bad])} rows, more than "
            f"max_len_{side} = {max_len}"
        )


def _longest_joined(
    op: str, max_seq_len: int, lengths_left: torch.Tensor, lengths_right: torch.Tensor
) -> int:
    if not lengths_left.numel():
        return 0
    joined = lengths_left + lengths_right
    bad = _first_true(joined > max_seq_len)
    if bad is not None:
        raise ValueError(
            f"{op}: sequence {bad} has {int(lengths_left[bad])} + {int(lengths_right[bad])} = "
            f"{int(joined[bad])} rows, more than max_seq_len = {max_seq_len}"
        )
    return int(joined.max())


def _dense_rows_name(side: str, batch: int, dense_len: int) -> str:
    return f"batch size {batch} x max_len_{side} {dense_len} = {batch * dense_len}"


def _resolved_sides(
    op: str,
    max_seq_len: int,
    batch: int,
    device: torch.device,
    offsets: tuple[torch.Tensor | None, torch.Tensor | None],
    max_lens: tuple[int | None, int | None],
    rows: tuple[int, int],
    names: tuple[str, str],
) -> JaggedSides:
    """The JaggedSides of checked (left, right) arguments, after the length bounds: a jagged
    side's max_len (``names``: what the messages call each side's sequences) and
    max_seq_len."""
    int64_offsets, lengths = [], []
    sides = zip(("left", "right"), offsets, max_lens, names, strict=True)
    for side, side_offsets, max_len, name in sides:
        o = _int64_offsets(side_offsets, max_len, batch, device)
        int64_offsets.append(o)
        lengths.append(o[1:] - o[:-1])
        if side_offsets is not None:
            _check_jagged_side_bound(op, side, name, lengths[-1], max_len)
    return JaggedSides(
        batch=batch,
        offsets_left=int64_offsets[0],
        offsets_right=int64_offsets[1],
        dense_len_left=max_lens[0] if offsets[0] is None else None,
        dense_len_right=max_lens[1] if offsets[1] is None else None,
        rows_left=rows[0],
        rows_right=rows[1],
        longest=_longest_joined(op, max_seq_len, *lengths),
    )


def resolve_concat_sides(
    op: str,
    max_seq_len: int,
    values_left: torch.Tensor,
    values_right: torch.Tensor,
    max_len_left: int | None,
    max_len_right: int | None,
    offsets_left: torch.Tensor | None,
    offsets_right: torch.Tensor | None,
) -> JaggedSides:
    """Checks the arguments of a 2-D concat; raises ValueError/TypeError naming the argument."""
    _check_2d(op, "values_left", values_left)
    _check_2d(op, "values_right", values_right)
    if values_left.dtype != values_right.dtype:
        raise TypeError(
            f"{op}: values_left and values_right must have the same dtype, got "
            f"{_dtype_name(values_left.dtype)} and {_dtype_name(values_right.dtype)}"
        )
    if values_left.shape[1] != values_right.shape[1]:
        raise ValueError(
            f"{op}: values_left and values_right must have the same row width D, got shapes "
            f"{list(values_left.shape)} and {list(values_right.shape)}"
        )
    _check_same_device(op, "values_right", values_right, "values_left", values_left)
    max_seq_len = _as_count(op, "max_seq_len", max_seq_len)
    max_len_left = _as_count(op, "max_len_left", max_len_left, optional=True)
    max_len_right = _as_count(op, "max_len_right", max_len_right, optional=True)
    _check_side_offsets(op, "left", offsets_left, "values_left", values_left)
    _check_side_offsets(op, "right", offsets_right, "values_left", values_left)
    _dense_len_required(op, "left", offsets_left, max_len_left)
    _dense_len_required(op, "right", offsets_right, max_len_right)

    rows_left, rows_right = values_left.shape[0], values_right.shape[0]
    batch = _batch_from_offsets(op, offsets_left, offsets_right)
    if batch is None:  # two dense sides: the batch size is rows / max_len
        batch = 0
        for side, rows, dense_len in (
            ("left", rows_left, max_len_left),
            ("right", rows_right, max_len_right),
        ):
            if dense_len and rows % dense_len == 0:
                batch = rows // dense_len
                break
            if dense_len:
                raise ValueError(
                    f"{op}: values_{side} has {rows} rows, not a multiple of max_len_{side} = "
                    f"{dense_len} (a dense {side} side)"
                )
    for side, rows, offsets, dense_len in (
        ("left", rows_left, offsets_left, max_len_left),
        ("right", rows_right, offsets_right, max_len_right),
    ):
        if offsets is not None:
            check_offsets(op, f"offsets_{side}", offsets, rows, f"values_{side}")
        elif rows != batch * dense_len:
            raise ValueError(
                f"{op}: values_{side} has {rows} rows, expected "
                f"{_dense_rows_name(side, batch, dense_len)} (a dense {side} side)"
            )

    return _resolved_sides(
        op,
        max_seq_len,
        batch,
        values_left.device,
        (offsets_left, offsets_right),
        (max_len_left, max_len_right),
        (rows_left, rows_right),
        ("values_left", "values_right"),
    )


def resolve_split_sides(
    op: str,
    max_seq_len: int,
    values: torch.Tensor,
    total_len_left: int | None,
    total_len_right: int | None,
    max_len_left: int | None,
    max_len_right: int | None,
    offsets_left: torch.Tensor | None,
    offsets_right: torch.Tensor | None,
) -> JaggedSides:
    """Checks the arguments of a 2-D split; raises ValueError/TypeError naming the argument."""
    _check_2d(op, "values", values)
    max_seq_len = _as_count(op, "max_seq_len", max_seq_len)
    total_len_left = _as_count(op, "total_len_left", total_len_left, optional=True)
    total_len_right = _as_count(op, "total_len_right", total_len_right, optional=True)
    max_len_left = _as_count(op, "max_len_left", max_len_left, optional=True)
    max_len_right = _as_count(op, "max_len_right", max_len_right, optional=True)
    if offsets_left is None and offsets_right is None:
        raise ValueError(
            f"{op}: offsets_left and offsets_right cannot both be None (a split needs at least "
            "one jagged side to know the batch size)"
        )
    _check_side_offsets(op, "left", offsets_left, "values", values)
    _check_side_offsets(op, "right", offsets_right, "values", values)
    _dense_len_required(op, "left", offsets_left, max_len_left)
    _dense_len_required(op, "right", offsets_right, max_len_right)
    batch = _batch_from_offsets(op, offsets_left, offsets_right)
    assert batch is not None

    rows = {}
    for side, offsets, dense_len in (
        ("left", offsets_left, max_len_left),
        ("right", offsets_right, max_len_right),
    ):
        name = f"offsets_{side}"
        if offsets is not None:
            # Valid offsets over however many rows they claim.
            claimed = int(offsets[-1]) if offsets.numel() else 0
            check_offsets(op, name, offsets, claimed, name)
            rows[side], what = claimed, f"{name}[-1] = {claimed}"
        else:
            rows[side] = batch * dense_len
            what = _dense_rows_name(side, batch, dense_len)
        total = total_len_left if side == "left" else total_len_right
        if total is not None and total != rows[side]:
            raise ValueError(f"{op}: total_len_{side} = {total} but {what} (the {side} rows)")
    if rows["left"] + rows["right"] != values.shape[0]:
        raise ValueError(
            f"{op}: the left and right sides hold {rows['left']} + {rows['right']} = "
            f"{rows['left'] + rows['right']} rows but values.shape[0] = {values.shape[0]}"
        )

    return _resolved_sides(
        op,
        max_seq_len,
        batch,
        values.device,
        (offsets_left, offsets_right),
        (max_len_left, max_len_right),
        (rows["left"], rows["right"]),
        ("offsets_left", "offsets_right"),
    )


MAX_ROWS_PER_PROGRAM = 256
"""Largest ``rows_per_program`` of the Triton concat/split kernels."""


def check_rows_per_program(op: str, rows_per_program: int | None) -> None:
    """The TRITON-only layout argument of the concat/split dispatchers: None or a power of 2
    from 1 to MAX_ROWS_PER_PROGRAM. Checked whatever the kernel, so a bad value never passes
    silently."""
    r = rows_per_program
    if r is None:
        return
    if (
        isinstance(r, bool)
        or not isinstance(r, int)
        or not 1 <= r <= MAX_ROWS_PER_PROGRAM
        or (r & (r - 1))
    ):
        raise ValueError(
            f"{op}: rows_per_program must be None or a power of 2 from 1 to "
            f"{MAX_ROWS_PER_PROGRAM}, got {r!r}"
        )


def check_jagged_dense_bmm_args(
    max_seq_len: int,
    seq_offsets: torch.Tensor,
    jagged: torch.Tensor,
    dense: torch.Tensor,
    bias: torch.Tensor,
) -> torch.Tensor:
    """Checks the arguments of jagged_dense_bmm_broadcast_add; returns the sequence lengths."""
    op = _BMM
    max_seq_len = _as_count(op, "max_seq_len", max_seq_len)
    for name, t in (("jagged", jagged), ("dense", dense), ("bias", bias)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a tensor, got {type(t).__name__}")
    if jagged.dim() != 2:
        raise ValueError(f"{op}: jagged must be 2-D [total, K], got shape {list(jagged.shape)}")
    if dense.dim() != 3:
        raise ValueError(f"{op}: dense must be 3-D [B, K, N], got shape {list(dense.shape)}")
    batch, k, n = dense.shape
    if k != jagged.shape[1]:
        raise ValueError(
            f"{op}: dense.shape[1] = {k} must equal jagged.shape[1] = {jagged.shape[1]} (K)"
        )
    if list(bias.shape) != [batch, n]:
        raise ValueError(
            f"{op}: bias must have shape [B, N] = {[batch, n]} (from dense), got {list(bias.shape)}"
        )
    if not (jagged.dtype == dense.dtype == bias.dtype) or not jagged.is_floating_point():
        raise TypeError(
            f"{op}: jagged, dense and bias must share one floating dtype, got "
            f"{_dtype_name(jagged.dtype)}, {_dtype_name(dense.dtype)}, {_dtype_name(bias.dtype)}"
        )
    _check_same_device(op, "dense", dense, "jagged", jagged)
    _check_same_device(op, "bias", bias, "jagged", jagged)
    if not isinstance(seq_offsets, torch.Tensor):
        raise TypeError(f"{op}: seq_offsets must be a tensor, got {type(seq_offsets).__name__}")
    _check_index_tensor(op, "seq_offsets", seq_offsets)
    _check_same_device(op, "seq_offsets", seq_offsets, "jagged", jagged)
    if seq_offsets.numel() != batch + 1:
        raise ValueError(
            f"{op}: seq_offsets must have B + 1 = {batch + 1} entries (B = dense.shape[0]), got "
            f"{seq_offsets.numel()}"
        )
    check_offsets(op, "seq_offsets", seq_offsets, jagged.shape[0], "jagged")
    lengths = (seq_offsets[1:] - seq_offsets[:-1]).to(torch.int64)
    bad = _first_true(lengths > max_seq_len)
    if bad is not None:
        raise ValueError(
            f"{op}: sequence {bad} has {int(lengths[bad])} rows, more than "
            f"max_seq_len = {max_seq_len}"
        )
    return lengths


# --------------------------------------------------------------------------------------------
# The ops
# --------------------------------------------------------------------------------------------
def _joined_rows(sides: JaggedSides, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """For every left row and every right row, its row in the joined tensor (int64).

    Left row r of sequence b is preceded by the right rows of sequences < b; right row r of
    sequence b by the left rows of sequences <= b.
    """
    seq_left = row_sequence_ids(sides.offsets_left, sides.rows_left)
    seq_right = row_sequence_ids(sides.offsets_right, sides.rows_right)
    left = torch.arange(sides.rows_left, device=device) + sides.offsets_right[seq_left]
    right = torch.arange(sides.rows_right, device=device) + sides.offsets_left[seq_right + 1]
    return left, right


def pytorch_concat_2D_jagged(
    max_seq_len: int,
    values_left: torch.Tensor,
    values_right: torch.Tensor,
    max_len_left: int | None = None,
    max_len_right: int | None = None,
    offsets_left: torch.Tensor | None = None,
    offsets_right: torch.Tensor | None = None,
) -> torch.Tensor:
    """Joins two 2-D jagged (or dense) tensors sequence by sequence: left_b then right_b.

    values_left ``[rows_left, D]``, values_right ``[rows_right, D]`` (same dtype and D); a side
    with offsets None is dense with ``max_len_<side>`` rows per sequence. Returns ``[rows_left +
    rows_right, D]``. See the module docstring for every rule.
    """
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
    device = values_left.device
    rows_left, rows_right = sides.rows_left, sides.rows_right
    joined_left, joined_right = _joined_rows(sides, device)
    # Gather from cat([left, right]) with the inverse permutation (a differentiable gather).
    source = torch.empty(rows_left + rows_right, dtype=torch.int64, device=device)
    source[joined_left] = torch.arange(rows_left, device=device)
    source[joined_right] = torch.arange(rows_left, rows_left + rows_right, device=device)
    return torch.cat([values_left, values_right]).index_select(0, source)


def pytorch_split_2D_jagged(
    max_seq_len: int,
    values: torch.Tensor,
    total_len_left: int | None = None,
    total_len_right: int | None = None,
    max_len_left: int | None = None,
    max_len_right: int | None = None,
    offsets_left: torch.Tensor | None = None,
    offsets_right: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of :func:`pytorch_concat_2D_jagged`: returns ``(values_left, values_right)``.

    Sequence b of ``values`` (``[rows, D]``, its offsets being ``offsets_left + offsets_right``)
    is cut after its first ``len_left[b]`` rows. At least one side must be jagged; a dense side
    (offsets None) has ``max_len_<side>`` rows per sequence.
    """
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
    joined_left, joined_right = _joined_rows(sides, values.device)
    return values.index_select(0, joined_left), values.index_select(0, joined_right)


def pytorch_jagged_dense_bmm_broadcast_add(
    max_seq_len: int,
    seq_offsets: torch.Tensor,
    jagged: torch.Tensor,
    dense: torch.Tensor,
    bias: torch.Tensor,
) -> torch.Tensor:
    """``out[rows of b] = jagged[rows of b] @ dense[b] + bias[b]``, padded-dense reference.

    jagged ``[total, K]``, dense ``[B, K, N]``, bias ``[B, N]``, seq_offsets int ``[B + 1]``;
    returns ``[total, N]`` in jagged's dtype, computed in float32 for 16-bit inputs.
    """
    lengths = check_jagged_dense_bmm_args(max_seq_len, seq_offsets, jagged, dense, bias)
    compute = torch.promote_types(jagged.dtype, torch.float32)
    # Padding to the batch's longest sequence rather than max_seq_len: same result, less work.
    longest = int(lengths.max()) if lengths.numel() else 0
    padded = jagged_to_padded_dense(jagged.to(compute), seq_offsets, longest)  # [B, n, K]
    out = torch.bmm(padded, dense.to(compute)) + bias.to(compute)[:, None, :]
    return padded_dense_to_jagged(out, seq_offsets).to(jagged.dtype)
