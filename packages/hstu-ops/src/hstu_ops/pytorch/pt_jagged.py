"""PyTorch reference of the jagged primitives: the specification the other kernels follow.

A jagged batch of B sequences is a ``values`` tensor of shape ``[total_rows, *row_shape]``
holding the rows of all sequences back to back, and an ``offsets`` tensor (int32 or int64) of
B + 1 entries: sequence ``i`` is ``values[offsets[i]:offsets[i + 1]]``. Valid offsets start at
0, never decrease and end at ``total_rows``.

Everything here is built from differentiable torch ops, so gradients need no extra code. The
argument checks read tensor data (they synchronise with a GPU); that is acceptable for a
reference.
"""

from __future__ import annotations

import torch

__all__ = [
    "check_lengths",
    "check_offsets",
    "jagged_to_padded_dense",
    "padded_dense_to_jagged",
    "pytorch_complete_cumsum",
    "pytorch_concat_1d_jagged",
    "pytorch_split_1d_jagged",
    "row_sequence_ids",
]

_INDEX_DTYPES = (torch.int32, torch.int64)


# --------------------------------------------------------------------------------------------
# Argument checks (their wording matches the NATIVE kernels': argument name and bad value).
# --------------------------------------------------------------------------------------------
def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _check_index_tensor(op: str, name: str, t: torch.Tensor) -> None:
    if t.dim() != 1:
        raise ValueError(f"{op}: {name} must be a 1-D tensor, got shape {list(t.shape)}")
    if t.dtype not in _INDEX_DTYPES:
        raise TypeError(f"{op}: {name} must have dtype int32 or int64, got {_dtype_name(t.dtype)}")


def _first_true(mask: torch.Tensor) -> int | None:
    hits = mask.nonzero()
    return int(hits[0, 0]) if hits.numel() else None


def check_lengths(op: str, name: str, lengths: torch.Tensor) -> None:
    """lengths: 1-D int32/int64, no negative entry, sum representable in its dtype."""
    _check_index_tensor(op, name, lengths)
    bad = _first_true(lengths < 0)
    if bad is not None:
        raise ValueError(f"{op}: {name}[{bad}] = {int(lengths[bad])} is negative")
    if lengths.dtype == torch.int32 and lengths.numel():
        running = torch.cumsum(lengths.to(torch.int64), 0)
        over = _first_true(running > torch.iinfo(torch.int32).max)
        if over is not None:
            raise ValueError(
                f"{op}: the running sum of {name} overflows int32 at {name}[{over}] "
                f"(sum {int(running[over])}); use int64 {name}"
            )


def check_offsets(
    op: str,
    name: str,
    offsets: torch.Tensor,
    rows: int,
    values_name: str = "values",
    *,
    values: bool = True,
) -> None:
    """offsets: 1-D int32/int64 with >= 1 entry, offsets[0] == 0, monotone, last == rows (the
    last three, which read the values, only with ``values``)."""
    _check_index_tensor(op, name, offsets)
    if offsets.numel() < 1:
        raise ValueError(
            f"{op}: {name} must have at least one entry (a batch of B sequences has B + 1 offsets)"
        )
    if not values:
        return
    first = int(offsets[0])
    if first != 0:
        raise ValueError(f"{op}: {name}[0] = {first}, expected 0")
    bad = _first_true(offsets[1:] < offsets[:-1])
    if bad is not None:
        i = bad + 1
        raise ValueError(
            f"{op}: {name} is not monotone: {name}[{i}] = {int(offsets[i])} < "
            f"{name}[{i - 1}] = {int(offsets[i - 1])}"
        )
    last = int(offsets[-1])
    if last != rows:
        raise ValueError(
            f"{op}: {name}[-1] = {last} does not match {values_name}.shape[0] = {rows}"
        )


def _check_values(op: str, name: str, values: torch.Tensor) -> None:
    if values.dim() < 1:
        raise ValueError(
            f"{op}: {name} must have at least one dimension (the jagged one), got a 0-d tensor"
        )


def _check_same_device(
    op: str, name: str, t: torch.Tensor, ref_name: str, ref: torch.Tensor
) -> None:
    if t.device != ref.device:
        raise ValueError(
            f"{op}: {name} is on {t.device} but {ref_name} is on {ref.device}; "
            "all tensors must share a device"
        )


def _check_fits(op: str, total: int, dtype: torch.dtype, what: str) -> None:
    if total > torch.iinfo(dtype).max:
        raise ValueError(
            f"{op}: {what} = {total} does not fit the offsets dtype ({_dtype_name(dtype)}); "
            "use int64 offsets"
        )


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------
def row_sequence_ids(offsets: torch.Tensor, rows: int) -> torch.Tensor:
    """For every row of a jagged tensor, the index of the sequence that holds it (int64).

    Row r belongs to the last sequence s with offsets[s] <= r (empty sequences are skipped
    because ``right=True`` passes over repeated offsets).
    """
    rows_idx = torch.arange(rows, device=offsets.device)
    return torch.searchsorted(offsets.to(torch.int64), rows_idx, right=True) - 1


def jagged_to_padded_dense(
    values: torch.Tensor, offsets: torch.Tensor, max_len: int, padding_value: float = 0.0
) -> torch.Tensor:
    """[total, *row] jagged -> [B, max_len, *row] padded. Sequences must fit in max_len."""
    batch = offsets.numel() - 1
    rows = values.shape[0]
    seq = row_sequence_ids(offsets, rows)
    pos = torch.arange(rows, device=values.device) - offsets.to(torch.int64)[seq]
    dense = values.new_full((batch, max_len, *values.shape[1:]), padding_value)
    return dense.index_put((seq, pos), values)


def padded_dense_to_jagged(dense: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """[B, N, *row] padded -> [total, *row] jagged, keeping the first len_i rows of each."""
    rows = int(offsets[-1])
    seq = row_sequence_ids(offsets, rows)
    pos = torch.arange(rows, device=dense.device) - offsets.to(torch.int64)[seq]
    return dense[seq, pos]


# --------------------------------------------------------------------------------------------
# The ops
# --------------------------------------------------------------------------------------------
def pytorch_complete_cumsum(lengths: torch.Tensor) -> torch.Tensor:
    """Offsets from lengths: ``[0, l0, l0 + l1, ...]``, N + 1 entries, dtype of lengths."""
    check_lengths("complete_cumsum", "lengths", lengths)
    offsets = lengths.new_zeros(lengths.numel() + 1)
    offsets[1:] = torch.cumsum(lengths, 0, dtype=lengths.dtype)
    return offsets


def pytorch_concat_1d_jagged(
    values_a: torch.Tensor,
    offsets_a: torch.Tensor,
    values_b: torch.Tensor,
    offsets_b: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sequence concatenation: sequence i of the result is a_i followed by b_i.

    values_a: [rows_a, *row], values_b: [rows_b, *row] (same dtype and row shape); offsets of
    the same length B + 1 and dtype. Returns (values [rows_a + rows_b, *row], offsets) with
    offsets = offsets_a + offsets_b.
    """
    op = "concat_1d_jagged"
    _check_values(op, "values_a", values_a)
    _check_values(op, "values_b", values_b)
    for name, o in (("offsets_a", offsets_a), ("offsets_b", offsets_b)):
        _check_index_tensor(op, name, o)
    if values_a.dtype != values_b.dtype:
        raise TypeError(
            f"{op}: values_a and values_b must have the same dtype, got "
            f"{_dtype_name(values_a.dtype)} and {_dtype_name(values_b.dtype)}"
        )
    if values_a.shape[1:] != values_b.shape[1:]:
        raise ValueError(
            f"{op}: values_a and values_b must agree beyond the jagged dimension, got shapes "
            f"{list(values_a.shape)} and {list(values_b.shape)}"
        )
    if offsets_a.dtype != offsets_b.dtype:
        raise TypeError(
            f"{op}: offsets_a and offsets_b must have the same dtype, got "
            f"{_dtype_name(offsets_a.dtype)} and {_dtype_name(offsets_b.dtype)}"
        )
    if offsets_a.numel() != offsets_b.numel():
        raise ValueError(
            f"{op}: offsets_a and offsets_b must have the same length (batch size + 1), got "
            f"{offsets_a.numel()} and {offsets_b.numel()}"
        )
    _check_same_device(op, "values_b", values_b, "values_a", values_a)
    _check_same_device(op, "offsets_a", offsets_a, "values_a", values_a)
    _check_same_device(op, "offsets_b", offsets_b, "values_a", values_a)
    rows_a, rows_b = values_a.shape[0], values_b.shape[0]
    check_offsets(op, "offsets_a", offsets_a, rows_a, "values_a")
    check_offsets(op, "offsets_b", offsets_b, rows_b, "values_b")
    _check_fits(op, rows_a + rows_b, offsets_a.dtype, "the concatenated number of rows")

    # Where each row lands in the output: a row of a_i is preceded by all rows of sequences
    # < i from b; a row of b_i by all rows of sequences <= i from a.
    oa = offsets_a.to(torch.int64)
    ob = offsets_b.to(torch.int64)
    seq_a = row_sequence_ids(offsets_a, rows_a)
    seq_b = row_sequence_ids(offsets_b, rows_b)
    dest_a = torch.arange(rows_a, device=values_a.device) + ob[seq_a]
    dest_b = torch.arange(rows_b, device=values_a.device) + oa[seq_b + 1]
    # Gather from cat([a, b]) with the inverse permutation (a differentiable index_select).
    source = torch.empty(rows_a + rows_b, dtype=torch.int64, device=values_a.device)
    source[dest_a] = torch.arange(rows_a, device=values_a.device)
    source[dest_b] = torch.arange(rows_a, rows_a + rows_b, device=values_a.device)
    values = torch.cat([values_a, values_b]).index_select(0, source)
    return values, offsets_a + offsets_b


def pytorch_split_1d_jagged(
    values: torch.Tensor, offsets: torch.Tensor, offsets_a: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inverse of :func:`pytorch_concat_1d_jagged`.

    Sequence i of ``values`` is split after its first ``offsets_a[i + 1] - offsets_a[i]`` rows.
    Returns (values_a, values_b, offsets_b) with offsets_b = offsets - offsets_a, so that
    ``concat(values_a, offsets_a, values_b, offsets_b) == (values, offsets)``.
    """
    op = "split_1d_jagged"
    _check_values(op, "values", values)
    _check_index_tensor(op, "offsets", offsets)
    _check_index_tensor(op, "offsets_a", offsets_a)
    if offsets.dtype != offsets_a.dtype:
        raise TypeError(
            f"{op}: offsets and offsets_a must have the same dtype, got "
            f"{_dtype_name(offsets.dtype)} and {_dtype_name(offsets_a.dtype)}"
        )
    if offsets.numel() != offsets_a.numel():
        raise ValueError(
            f"{op}: offsets and offsets_a must have the same length (batch size + 1), got "
            f"{offsets.numel()} and {offsets_a.numel()}"
        )
    _check_same_device(op, "offsets", offsets, "values", values)
    _check_same_device(op, "offsets_a", offsets_a, "values", values)
    rows = values.shape[0]
    check_offsets(op, "offsets", offsets, rows, "values")
    # offsets_a must be valid offsets over however many rows it claims.
    if offsets_a.numel() >= 1:
        check_offsets(op, "offsets_a", offsets_a, int(offsets_a[-1]), "offsets_a")
    lengths = offsets[1:] - offsets[:-1]
    lengths_a = offsets_a[1:] - offsets_a[:-1]
    bad = _first_true(lengths_a > lengths)
    if bad is not None:
        raise ValueError(
            f"{op}: offsets_a takes {int(lengths_a[bad])} rows from sequence {bad} but offsets "
            f"gives it only {int(lengths[bad])} rows"
        )

    offsets_b = offsets - offsets_a
    rows_a = int(offsets_a[-1])
    rows_b = rows - rows_a
    seq_a = row_sequence_ids(offsets_a, rows_a)
    seq_b = row_sequence_ids(offsets_b, rows_b)
    src_a = torch.arange(rows_a, device=values.device) + offsets_b.to(torch.int64)[seq_a]
    src_b = torch.arange(rows_b, device=values.device) + offsets_a.to(torch.int64)[seq_b + 1]
    return values.index_select(0, src_a), values.index_select(0, src_b), offsets_b
