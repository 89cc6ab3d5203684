"""The public Yambda file schemas, their validation, and readers.

``flat/<size>/multi_event.parquet`` holds one row per event, sorted by ``(uid, timestamp)``:

=====================  ==========  ==================================================
column                 dtype       notes
=====================  ==========  ==================================================
uid                    UInt32
timestamp              UInt32      seconds, a multiple of 5
item_id                UInt32      sparse ids
is_organic             UInt8       0 recommendation-driven, 1 organic
played_ratio_pct       UInt16      null exactly for non-listen events
track_length_seconds   UInt32      null exactly for non-listen events
event_type             Enum        listen, like, dislike, unlike, undislike
=====================  ==========  ==================================================

The mapping files at the dataset root (``artist_item_mapping.parquet``,
``album_item_mapping.parquet``) are many-to-many pairs of UInt32 ids.

Readers accept ``event_type`` stored as Utf8, Categorical or Enum and always hand it on as
:data:`EVENT_TYPE_DTYPE`, whose physical codes are the DLRMv4 event-type codes
(listen 0, like 1, dislike 2, unlike 3, undislike 4).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import polars as pl

__all__ = [
    "ALBUM_ITEM_MAPPING_FILE",
    "ALBUM_ITEM_MAPPING_SCHEMA",
    "ARTIST_ITEM_MAPPING_FILE",
    "ARTIST_ITEM_MAPPING_SCHEMA",
    "EVENT_TYPES",
    "EVENT_TYPE_CODES",
    "EVENT_TYPE_DTYPE",
    "MULTI_EVENT_FILE",
    "MULTI_EVENT_SCHEMA",
    "NULLABLE_LISTEN_COLUMNS",
    "TIMESTAMP_QUANTUM",
    "MappingKind",
    "MultiEventSummary",
    "SchemaError",
    "check_multi_event_columns",
    "check_multi_event_rows",
    "mapping_path",
    "multi_event_path",
    "normalize_multi_event",
    "read_mapping",
    "read_multi_event",
    "validate_mapping",
    "validate_multi_event",
]

EVENT_TYPES: tuple[str, ...] = ("listen", "like", "dislike", "unlike", "undislike")
"""Event types in code order: the position of a name is its DLRMv4 code."""

EVENT_TYPE_CODES: dict[str, int] = {name: code for code, name in enumerate(EVENT_TYPES)}
"""listen 0, like 1, dislike 2, unlike 3, undislike 4."""

EVENT_TYPE_DTYPE = pl.Enum(list(EVENT_TYPES))
"""The event_type dtype; its physical (UInt8-sized) codes equal :data:`EVENT_TYPE_CODES`."""

TIMESTAMP_QUANTUM = 5
"""Every timestamp is a multiple of this many seconds."""

MULTI_EVENT_SCHEMA = pl.Schema(
    [
        ("uid", pl.UInt32),
        ("timestamp", pl.UInt32),
        ("item_id", pl.UInt32),
        ("is_organic", pl.UInt8),
        ("played_ratio_pct", pl.UInt16),
        ("track_length_seconds", pl.UInt32),
        ("event_type", EVENT_TYPE_DTYPE),
    ]
)
"""Columns of ``flat/<size>/multi_event.parquet`` in physical order."""

NULLABLE_LISTEN_COLUMNS: tuple[str, ...] = ("played_ratio_pct", "track_length_seconds")
"""Columns that are null exactly for the non-listen events."""

ARTIST_ITEM_MAPPING_SCHEMA = pl.Schema([("artist_id", pl.UInt32), ("item_id", pl.UInt32)])
ALBUM_ITEM_MAPPING_SCHEMA = pl.Schema([("album_id", pl.UInt32), ("item_id", pl.UInt32)])

MULTI_EVENT_FILE = "multi_event.parquet"
ARTIST_ITEM_MAPPING_FILE = "artist_item_mapping.parquet"
ALBUM_ITEM_MAPPING_FILE = "album_item_mapping.parquet"

MappingKind = Literal["artist", "album"]

_MAPPINGS: dict[str, tuple[str, pl.Schema]] = {
    "artist": (ARTIST_ITEM_MAPPING_FILE, ARTIST_ITEM_MAPPING_SCHEMA),
    "album": (ALBUM_ITEM_MAPPING_FILE, ALBUM_ITEM_MAPPING_SCHEMA),
}

FrameLike = pl.DataFrame | pl.LazyFrame | str | Path


class SchemaError(ValueError):
    """A file or frame does not match the public Yambda schema.

    ``source`` names the file (or the frame's label), ``column`` the offending column (None
    when the problem is not tied to one column).
    """

    def __init__(self, source: str, column: str | None, problem: str) -> None:
        self.source = source
        self.column = column
        self.problem = problem
        where = f"{source}: column {column!r}" if column is not None else source
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True)
class MultiEventSummary:
    """What :func:`validate_multi_event` learned while checking a multi_event table."""

    source: str
    num_events: int
    num_users: int
    t_min: int | None
    t_max: int | None
    event_counts: dict[str, int]


def multi_event_path(root: str | Path, size: str) -> Path:
    """``<root>/flat/<size>/multi_event.parquet``."""
    return Path(root) / "flat" / size / MULTI_EVENT_FILE


def mapping_path(root: str | Path, kind: MappingKind) -> Path:
    """``<root>/artist_item_mapping.parquet`` or ``<root>/album_item_mapping.parquet``."""
    return Path(root) / _mapping_spec(kind)[0]


def _mapping_spec(kind: str) -> tuple[str, pl.Schema]:
    try:
        return _MAPPINGS[kind]
    except KeyError:
        raise ValueError(f"mapping kind must be 'artist' or 'album', got {kind!r}") from None


def _to_lazy(frame: FrameLike, source: str | None) -> tuple[pl.LazyFrame, str]:
    if isinstance(frame, pl.DataFrame):
        return frame.lazy(), source or "<DataFrame>"
    if isinstance(frame, pl.LazyFrame):
        return frame, source or "<LazyFrame>"
    path = Path(frame)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    return pl.scan_parquet(path), source or str(path)


def _check_columns(schema: pl.Schema, expected: pl.Schema, source: str) -> None:
    for name in expected:
        if name not in schema:
            raise SchemaError(source, name, "missing column")
    for name, dtype in expected.items():
        got = schema[name]
        if name == "event_type":
            if not (got == pl.String or isinstance(got, pl.Categorical | pl.Enum)):
                raise SchemaError(
                    source, name, f"dtype {got} is not Utf8, Categorical or Enum of event types"
                )
            if isinstance(got, pl.Enum):
                unknown = [c for c in got.categories.to_list() if c not in EVENT_TYPE_CODES]
                if unknown:
                    raise SchemaError(source, name, f"unknown event_type categories {unknown}")
        elif got != dtype:
            raise SchemaError(source, name, f"dtype {got}, expected {dtype}")
    extra = [name for name in schema if name not in expected]
    if extra:
        raise SchemaError(source, extra[0], "unexpected column")


def normalize_multi_event(frame: pl.LazyFrame) -> pl.LazyFrame:
    """Columns in physical order with ``event_type`` cast to :data:`EVENT_TYPE_DTYPE`.

    Lazy and cheap; it assumes the dtypes are already valid (see :func:`validate_multi_event`).
    """
    return frame.select(
        *[pl.col(name) for name in MULTI_EVENT_SCHEMA if name != "event_type"],
        pl.col("event_type").cast(pl.String).cast(EVENT_TYPE_DTYPE),
    )


def validate_multi_event(frame: FrameLike, *, source: str | None = None) -> MultiEventSummary:
    """Check a multi_event table against the public schema and its invariants.

    ``frame`` is a parquet path, a DataFrame or a LazyFrame; ``source`` names it in errors
    (default: the path, or ``<DataFrame>``). Checks, in order: every column present, no extra
    columns, dtypes (event_type may be Utf8, Categorical or Enum), then the row checks of
    :func:`check_multi_event_rows`. Raises :class:`SchemaError` naming the source and the
    column, and the first offending row where there is one. The data checks run as one lazy
    query over the whole table (memory grows with it; ``preprocess`` checks a file one
    partition at a time instead).
    """
    lazy, src = _to_lazy(frame, source)
    check_multi_event_columns(lazy.collect_schema(), src)
    return check_multi_event_rows(lazy, src)


def check_multi_event_columns(schema: pl.Schema, source: str) -> None:
    """Check multi_event column names and dtypes (e.g. a parquet file's metadata schema)."""
    _check_columns(schema, MULTI_EVENT_SCHEMA, source)


def check_multi_event_rows(
    frame: pl.DataFrame | pl.LazyFrame, source: str, *, row_index: str | None = None
) -> MultiEventSummary:
    """The row checks of a multi_event frame whose columns and dtypes are already valid.

    Checks, in order: event_type values known; no nulls in uid/timestamp/item_id/is_organic/
    event_type; played_ratio_pct and track_length_seconds null exactly for non-listens;
    timestamps multiples of 5; rows sorted by (uid, timestamp). Raises :class:`SchemaError`
    naming ``source``, the column and the first offending row. Rows are numbered by their
    position in ``frame``, or, with ``row_index``, by that column's value (e.g. the row's index
    in the file when ``frame`` is one partition of it); that column is otherwise ignored. The
    checks and the summary run as one lazy query.
    """
    lazy = frame.lazy()
    etype = pl.col("event_type").cast(pl.String)
    known = etype.is_in(list(EVENT_TYPES))
    is_listen = etype == "listen"
    uid, ts = pl.col("uid"), pl.col("timestamp")
    prev_uid, prev_ts = uid.shift(1), ts.shift(1)
    unsorted = (uid < prev_uid) | ((uid == prev_uid) & (ts < prev_ts))

    checks: list[tuple[str, str, pl.Expr]] = [
        ("event_type", "unknown event_type value", etype.is_not_null() & ~known),
    ]
    for name in ("uid", "timestamp", "item_id", "is_organic", "event_type"):
        checks.append((name, "null value", pl.col(name).is_null()))
    for name in NULLABLE_LISTEN_COLUMNS:
        checks.append((name, "null in a listen event", is_listen & pl.col(name).is_null()))
        checks.append(
            (name, "non-null in a non-listen event", ~is_listen & pl.col(name).is_not_null())
        )
    checks.append(
        ("timestamp", f"not a multiple of {TIMESTAMP_QUANTUM}", ts % TIMESTAMP_QUANTUM != 0)
    )
    checks.append(("timestamp", "rows not sorted by (uid, timestamp)", unsorted.fill_null(False)))

    if row_index is None:
        index = pl.int_range(pl.len(), dtype=pl.Int64)
    else:
        index = pl.col(row_index).cast(pl.Int64)
    aggs = [
        index.filter(expr.fill_null(False)).first().alias(f"c{i}")
        for i, (_, _, expr) in enumerate(checks)
    ]
    aggs += [
        pl.len().alias("n"),
        uid.n_unique().alias("users"),
        ts.min().cast(pl.Int64).alias("t_min"),
        ts.max().cast(pl.Int64).alias("t_max"),
    ]
    aggs += [(etype == name).sum().alias(f"e_{name}") for name in EVENT_TYPES]
    row = lazy.select(aggs).collect().row(0, named=True)

    for i, (column, problem, _) in enumerate(checks):
        bad = row[f"c{i}"]
        if bad is not None:
            raise SchemaError(source, column, f"{problem} (first at row {bad})")
    return MultiEventSummary(
        source=source,
        num_events=int(row["n"]),
        num_users=int(row["users"]),
        t_min=row["t_min"],
        t_max=row["t_max"],
        event_counts={name: int(row[f"e_{name}"]) for name in EVENT_TYPES},
    )


def validate_mapping(frame: FrameLike, kind: MappingKind, *, source: str | None = None) -> int:
    """Check an artist or album mapping (columns, UInt32 dtypes, no nulls); returns its rows."""
    _, expected = _mapping_spec(kind)
    lazy, src = _to_lazy(frame, source)
    _check_columns(lazy.collect_schema(), expected, src)
    index = pl.int_range(pl.len(), dtype=pl.Int64)
    names = list(expected)
    row = (
        lazy.select(
            pl.len().alias("n"),
            *[index.filter(pl.col(c).is_null()).first().alias(c) for c in names],
        )
        .collect()
        .row(0, named=True)
    )
    for c in names:
        if row[c] is not None:
            raise SchemaError(src, c, f"null value (first at row {row[c]})")
    return int(row["n"])


def read_multi_event(root: str | Path, size: str) -> pl.LazyFrame:
    """Lazily scan ``<root>/flat/<size>/multi_event.parquet``, normalized.

    The file's column names and dtypes are checked from its metadata (cheap; raises
    :class:`SchemaError`); the row-level invariants are not, use :func:`validate_multi_event`
    for those. ``event_type`` comes back as :data:`EVENT_TYPE_DTYPE`.
    """
    path = multi_event_path(root, size)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    lazy = pl.scan_parquet(path)
    _check_columns(lazy.collect_schema(), MULTI_EVENT_SCHEMA, str(path))
    return normalize_multi_event(lazy)


def read_mapping(root: str | Path, kind: MappingKind) -> pl.LazyFrame:
    """Lazily scan the artist or album mapping at the dataset root (schema checked)."""
    path = mapping_path(root, kind)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    lazy = pl.scan_parquet(path)
    _, expected = _mapping_spec(kind)
    _check_columns(lazy.collect_schema(), expected, str(path))
    return lazy.select(list(expected))
