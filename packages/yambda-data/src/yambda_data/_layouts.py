"""The same multi_event rows written in the layouts another writer may give the file: the
inputs of the layout tests and of ``bench_preprocess.py --layout``.

The public schema fixes the columns and their values, not how a writer stores them. Layouts:

* ``event_type``: ``enum`` (the public Enum, as polars writes it), ``dictionary`` (Arrow
  dictionary-encoded strings, read by polars as Categorical), ``string`` or ``large_string``
  (plain strings with 32- or 64-bit offsets);
* row groups of any number of rows;
* ``sorted`` (the schema's (uid, timestamp) order); ``unsorted``: the uids' blocks of rows in
  a random (seeded) order, each uid's rows in their order; or ``time``: every row in
  timestamp order, as a log is written (rows of one timestamp in uid order). Rows of one
  (uid, timestamp) keep their order in each, so that preprocess must give the sorted file's
  output byte for byte.

Every layout but ``enum`` is written with pyarrow (a development dependency: polars writes
neither 32-bit-offset strings nor a chosen dictionary index type), imported on use.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

EVENT_TYPE_LAYOUTS = ("enum", "dictionary", "string", "large_string")
ORDERS = ("sorted", "unsorted", "time")


def uid_blocks_shuffled(events: pl.DataFrame, seed: int) -> pl.DataFrame:
    """``events`` (sorted by uid) with its uids' blocks of rows in a random order."""
    uid = events["uid"].to_numpy()
    starts = np.flatnonzero(np.r_[True, uid[1:] != uid[:-1]])
    lengths = np.diff(np.r_[starts, len(uid)])
    order = np.random.default_rng(seed).permutation(len(starts))
    # Row i of the new order is row (start of its block) + (its rank within the block).
    new_starts = np.cumsum(lengths[order]) - lengths[order]
    rows = np.arange(len(uid)) + np.repeat(starts[order] - new_starts, lengths[order])
    return events[rows]


def write_layout(
    events: pl.DataFrame,
    path: str | Path,
    *,
    event_type: str = "enum",
    row_group_rows: int = 1_000_000,
    order: str = "sorted",
    seed: int = 0,
) -> None:
    """Write ``events`` (a multi_event frame sorted by (uid, timestamp), ``event_type`` the
    Enum) to ``path`` as zstd parquet in the given layout."""
    if event_type not in EVENT_TYPE_LAYOUTS:
        raise ValueError(
            f"event_type layout must be one of {EVENT_TYPE_LAYOUTS}, got {event_type!r}"
        )
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if order == "unsorted":
        events = uid_blocks_shuffled(events, seed)
    elif order == "time":
        events = events.sort("timestamp", maintain_order=True)
    if event_type == "enum":
        events.write_parquet(path, compression="zstd", row_group_size=row_group_rows)
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    stored = {
        "dictionary": pa.dictionary(pa.int32(), pa.string()),
        "string": pa.string(),
        "large_string": pa.large_string(),
    }[event_type]
    table = events.to_arrow()
    column = table.schema.get_field_index("event_type")
    values = table.column(column).cast(pa.string()).cast(stored)
    table = table.set_column(column, "event_type", values)
    pq.write_table(table, path, compression="zstd", row_group_size=row_group_rows)
