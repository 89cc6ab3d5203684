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

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, overload

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
    "REPEATED_ROWS_WARNING_SHARE",
    "ROWS_PER_PARTITION",
    "TIMESTAMP_QUANTUM",
    "MappingKind",
    "MultiEventSummary",
    "SchemaError",
    "check_multi_event_columns",
    "check_multi_event_file",
    "check_multi_event_file_keeping_head",
    "check_multi_event_header",
    "check_multi_event_rows",
    "count_duplicate_rows",
    "count_duplicate_rows_in_file",
    "default_partitions",
    "duplicate_rows_warning",
    "mapping_path",
    "multi_event_path",
    "normalize_multi_event",
    "read_mapping",
    "read_multi_event",
    "uid_range_edges",
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

    def __reduce__(self) -> tuple:  # pickled (to another rank, a worker) with its fields
        return type(self), (self.source, self.column, self.problem)


@dataclass(frozen=True)
class MultiEventSummary:
    """What :func:`validate_multi_event` learned while checking a multi_event table."""

    source: str
    num_events: int
    num_users: int
    t_min: int | None
    t_max: int | None
    event_counts: dict[str, int]
    num_duplicate_rows: int
    """Rows identical in every column to an earlier row (:func:`count_duplicate_rows`)."""


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
    # A direct cast maps each distinct category (or string) once; going through strings would
    # build a string per row first.
    return frame.select(
        *[pl.col(name) for name in MULTI_EVENT_SCHEMA if name != "event_type"],
        pl.col("event_type").cast(EVENT_TYPE_DTYPE),
    )


def validate_multi_event(frame: FrameLike, *, source: str | None = None) -> MultiEventSummary:
    """Check a multi_event table against the public schema and its invariants.

    ``frame`` is a parquet path, a DataFrame or a LazyFrame; ``source`` names it in errors
    (default: the path, or ``<DataFrame>``). Checks, in order: every column present, no extra
    columns, dtypes (event_type may be Utf8, Categorical or Enum), then the row checks of
    :func:`check_multi_event_rows`. Raises :class:`SchemaError` naming the source and the
    column, and the first offending row (and value, where one is wrong) where there is one,
    and, for a file that cannot be read (truncated, not parquet), an
    :class:`~yambda_data.InputFileError` naming it. A file is checked in streaming passes
    (:func:`check_multi_event_file`, bounded memory); the checks of a frame run as one lazy
    query over the whole frame.
    """
    if not isinstance(frame, pl.DataFrame | pl.LazyFrame):
        path = Path(frame)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file")
        src = source or str(path)
        row = check_multi_event_file(path, source=src, aggs=_summary_aggs())
        duplicates = 0
        if row["__n"]:
            duplicates = count_duplicate_rows_in_file(
                path, num_rows=row["__n"], uid_min=row["__uid_min"], uid_max=row["__uid_max"]
            )
        return _summary(src, row, duplicates)
    lazy, src = _to_lazy(frame, source)
    check_multi_event_columns(lazy.collect_schema(), src)
    return check_multi_event_rows(lazy, src)


def check_multi_event_columns(schema: pl.Schema, source: str) -> None:
    """Check multi_event column names and dtypes (e.g. a parquet file's metadata schema)."""
    _check_columns(schema, MULTI_EVENT_SCHEMA, source)


def check_multi_event_header(path: str | Path) -> None:
    """Check what the parquet metadata of the multi_event file at ``path`` says (it can be
    read, its columns and dtypes), reading nothing else: a truncated or foreign file is
    named (InputFileError, SchemaError) at once, whatever its size."""
    from yambda_data._io import reading

    with reading(path):
        check_multi_event_columns(pl.scan_parquet(path).collect_schema(), str(path))


MAX_ID = 2**27 - 1
"""The largest uid, item_id, artist_id or album_id accepted. Arrays indexed by an id (the item
popularity, the item -> artist and album tables, the embedding tables) are sized by the
largest one, so an id is bounded before anything is allocated or written: at this bound the
largest such array takes 1 GiB (8 bytes an id). Yambda's ids stay below 10 million."""


def id_bound_problem(value: int) -> str:
    """Why an id above :data:`MAX_ID` is refused, with the size it would ask for."""
    gib = (value + 1) * 8 / 2**30
    return (
        f"id {value:,} is above {MAX_ID:,}, the largest accepted (an array indexed by it "
        f"would take {gib:,.1f} GiB)"
    )


def check_mapping_ids(mapping: pl.LazyFrame, kind: MappingKind, source: str) -> None:
    """SchemaError naming ``source``, the column and the value when an id of the artist or
    album mapping is above :data:`MAX_ID` (one pass over the file's two columns)."""
    _, expected = _mapping_spec(kind)
    names = list(expected)
    row = mapping.select(pl.col(c).max().cast(pl.Int64) for c in names).collect().row(0)
    for column, value in zip(names, row, strict=True):
        if value is not None and value > MAX_ID:
            raise SchemaError(source, column, id_bound_problem(value))


@dataclass(frozen=True)
class _RowCheck:
    """One row-level rule: the column it is about, what is wrong, the expression that is true
    on an offending row, and (where the value itself is wrong) the value to report."""

    column: str
    problem: str
    bad: pl.Expr
    value: pl.Expr | None = None

    def message(self, row: int, value: object = None) -> str:
        if self.value is None:
            return f"{self.problem} (first at row {row})"
        return self.problem.format(value=value) + f" (first at row {row})"


def _row_checks(schema: pl.Schema) -> list[_RowCheck]:
    """The checks of single rows, in the order their errors are reported.

    event_type is compared as stored: a Categorical compares its codes with those of the
    names, a string column its (short, inline) strings. A cast to strings or to the Enum per
    row would cost more than decoding the column.
    """
    etype = pl.col("event_type")
    is_listen = etype == "listen"
    if schema.get("event_type") == EVENT_TYPE_DTYPE:
        # The public Enum holds no other value.
        unknown = pl.lit(False)
    else:
        unknown = etype.is_not_null() & ~etype.is_in(list(EVENT_TYPES))
    checks = [
        _RowCheck(
            "event_type",
            "unknown event_type value {value!r}",
            unknown,
            pl.col("event_type").cast(pl.String),
        ),
    ]
    for name in ("uid", "timestamp", "item_id", "is_organic", "event_type"):
        checks.append(_RowCheck(name, "null value", pl.col(name).is_null()))
    for name in ("uid", "item_id"):
        checks.append(
            _RowCheck(
                name,
                f"id {{value:,}} is above {MAX_ID:,}, the largest accepted (arrays are indexed "
                "by the ids)",
                pl.col(name) > MAX_ID,
                pl.col(name),
            )
        )
    checks.append(
        _RowCheck(
            "is_organic",
            "value {value} is not 0 or 1",
            pl.col("is_organic") > 1,
            pl.col("is_organic"),
        )
    )
    for name in NULLABLE_LISTEN_COLUMNS:
        checks.append(_RowCheck(name, "null in a listen event", is_listen & pl.col(name).is_null()))
        checks.append(
            _RowCheck(
                name, "non-null in a non-listen event", ~is_listen & pl.col(name).is_not_null()
            )
        )
    checks.append(
        _RowCheck(
            "timestamp",
            f"value {{value}} is not a multiple of {TIMESTAMP_QUANTUM}",
            pl.col("timestamp") % TIMESTAMP_QUANTUM != 0,
            pl.col("timestamp"),
        )
    )
    return checks


_ORDER_COLUMNS = ("__uid", "__prev_uid", "__ts", "__prev_ts")


def _order_exprs() -> tuple[pl.Expr, list[pl.Expr]]:
    """The expression true on a row that comes before its predecessor in (uid, timestamp)
    order, and the values that describe it (uid, previous uid, timestamp, previous one)."""
    uid, ts = pl.col("uid"), pl.col("timestamp")
    prev_uid, prev_ts = uid.shift(1), ts.shift(1)
    unsorted = ((uid < prev_uid) | ((uid == prev_uid) & (ts < prev_ts))).fill_null(False)
    values = [uid, prev_uid, ts, prev_ts]
    return unsorted, [
        v.cast(pl.Int64).alias(n) for v, n in zip(values, _ORDER_COLUMNS, strict=True)
    ]


def _order_error(source: str, row: int, uid: int, prev_uid: int, ts: int, prev_ts: int):
    if uid < prev_uid:
        detail = f"uid {uid} after uid {prev_uid}"
        return SchemaError(
            source, "uid", f"rows not sorted by (uid, timestamp): {detail} (first at row {row})"
        )
    detail = f"timestamp {ts} after {prev_ts} of uid {uid}"
    return SchemaError(
        source, "timestamp", f"rows not sorted by (uid, timestamp): {detail} (first at row {row})"
    )


def _summary_aggs() -> list[pl.Expr]:
    etype = pl.col("event_type")
    return [
        pl.len().cast(pl.Int64).alias("__n"),
        pl.col("uid").n_unique().cast(pl.Int64).alias("__users"),
        pl.col("uid").min().cast(pl.Int64).alias("__uid_min"),
        pl.col("uid").max().cast(pl.Int64).alias("__uid_max"),
        pl.col("timestamp").min().cast(pl.Int64).alias("__t_min"),
        pl.col("timestamp").max().cast(pl.Int64).alias("__t_max"),
        *[(etype == name).sum().cast(pl.Int64).alias(f"__e_{name}") for name in EVENT_TYPES],
    ]


def _summary(source: str, row: dict, duplicates: int) -> MultiEventSummary:
    return MultiEventSummary(
        source=source,
        num_events=int(row["__n"]),
        num_users=int(row["__users"]),
        t_min=row["__t_min"],
        t_max=row["__t_max"],
        event_counts={name: int(row[f"__e_{name}"]) for name in EVENT_TYPES},
        num_duplicate_rows=duplicates,
    )


def _any_bad_flags(checks: Sequence[_RowCheck]) -> list[pl.Expr]:
    """Per check, whether any row fails it (``__c<i>``): far cheaper than finding the first
    offending row, which is only worth doing once a flag says there is one."""
    return [c.bad.fill_null(False).any().alias(f"__c{i}") for i, c in enumerate(checks)]


@overload
def check_multi_event_rows(
    frame: pl.DataFrame | pl.LazyFrame,
    source: str,
    *,
    row_index: str | None = None,
    summary: Literal[True] = True,
) -> MultiEventSummary: ...
@overload
def check_multi_event_rows(
    frame: pl.DataFrame | pl.LazyFrame,
    source: str,
    *,
    row_index: str | None = None,
    summary: Literal[False],
) -> None: ...
def check_multi_event_rows(
    frame: pl.DataFrame | pl.LazyFrame,
    source: str,
    *,
    row_index: str | None = None,
    summary: bool = True,
) -> MultiEventSummary | None:
    """The row checks of a multi_event frame whose columns and dtypes are already valid.

    Checks, in order: event_type values known; no nulls in uid/timestamp/item_id/is_organic/
    event_type; is_organic 0 or 1; played_ratio_pct and track_length_seconds null exactly for
    non-listens; timestamps multiples of 5; rows sorted by (uid, timestamp). Raises
    :class:`SchemaError` naming ``source``, the column, the first offending row and, where the
    value is what is wrong, that value. Rows are numbered by their position in ``frame``, or,
    with ``row_index``, by that column's value (e.g. the row's index in the file when
    ``frame`` is one partition of it); that column is otherwise ignored. The checks and the
    summary run as one lazy query. With ``summary=False`` it returns None and runs only a
    pass of yes/no flags (several times cheaper), then, when one is set, the full query for the
    same error. The summary counts the rows that repeat an earlier row
    (:func:`count_duplicate_rows`).
    """
    lazy = frame.lazy()
    schema = lazy.collect_schema()
    checks = _row_checks(schema)
    unsorted, order_values = _order_exprs()
    if not summary:
        flags = lazy.select(*_any_bad_flags(checks), unsorted.any().alias("__unsorted"))
        if not any(flags.collect().row(0)):
            return None

    if row_index is None:
        index = pl.int_range(pl.len(), dtype=pl.Int64)
    else:
        index = pl.col(row_index).cast(pl.Int64)
    aggs: list[pl.Expr] = []
    for i, check in enumerate(checks):
        bad = check.bad.fill_null(False)
        aggs.append(index.filter(bad).first().alias(f"__c{i}"))
        if check.value is not None:
            aggs.append(check.value.filter(bad).first().alias(f"__v{i}"))
    aggs.append(index.filter(unsorted).first().alias("__unsorted"))
    aggs += [value.filter(unsorted).first() for value in order_values]
    aggs += _summary_aggs()
    row = lazy.select(aggs).collect().row(0, named=True)

    for i, check in enumerate(checks):
        bad = row[f"__c{i}"]
        if bad is not None:
            raise SchemaError(source, check.column, check.message(bad, row.get(f"__v{i}")))
    if row["__unsorted"] is not None:
        raise _order_error(source, row["__unsorted"], *(row[n] for n in _ORDER_COLUMNS))
    return _summary(source, row, count_duplicate_rows(lazy)) if summary else None


_ROW = "__file_row"

ROWS_PER_PARTITION = 5_000_000
"""Rows of a file held in memory at once, about: files are read in ``ceil(rows / this)``
uid ranges (:func:`default_partitions`, :func:`uid_range_edges`)."""


def default_partitions(num_rows: int) -> int:
    """``ceil(num_rows / ROWS_PER_PARTITION)``, at least 1."""
    return max(1, math.ceil(num_rows / ROWS_PER_PARTITION))


def uid_range_edges(uid_min: int, uid_max: int, partitions: int) -> list[int]:
    """``partitions + 1`` edges cutting ``[uid_min, uid_max]`` into equal-width uid ranges
    ``[edges[k], edges[k + 1])``."""
    span = uid_max - uid_min + 1
    return [uid_min + (span * k) // partitions for k in range(partitions + 1)]


def count_duplicate_rows(frame: pl.DataFrame | pl.LazyFrame) -> int:
    """The rows of a multi_event frame sorted by (uid, timestamp) that are identical in every
    column of :data:`MULTI_EVENT_SCHEMA` to an earlier row (nulls equal nulls), exactly.

    Such rows share uid and timestamp, and sorted rows keep those together (though not
    necessarily adjacent: listen, like, listen, like at one timestamp), so only the rows whose
    (uid, timestamp) is also another row's are compared."""
    uid, ts = pl.col("uid"), pl.col("timestamp")
    same_as_previous = ((uid == uid.shift(1)) & (ts == ts.shift(1))).fill_null(False)
    shares_key = same_as_previous | same_as_previous.shift(-1).fill_null(False)
    repeats = pl.len() - pl.struct(list(MULTI_EVENT_SCHEMA)).n_unique()
    return int(frame.lazy().filter(shares_key).select(repeats).collect().item())


def count_duplicate_rows_in_file(
    path: str | Path, *, num_rows: int, uid_min: int, uid_max: int
) -> int:
    """:func:`count_duplicate_rows` of a valid multi_event file (sorted by (uid, timestamp)),
    one uid range of about :data:`ROWS_PER_PARTITION` rows in memory at a time."""
    from yambda_data._io import reading

    # A scan of its own, never asked for its schema, so the uid filter reaches the row groups.
    scan = pl.scan_parquet(path)
    uid = pl.col("uid").cast(pl.Int64)
    edges = uid_range_edges(uid_min, uid_max, default_partitions(num_rows))
    total = 0
    with reading(path):
        for lo, hi in itertools.pairwise(edges):
            total += count_duplicate_rows(scan.filter((uid >= lo) & (uid < hi)).collect())
    return total


REPEATED_ROWS_WARNING_SHARE = 0.001
"""The share of a file's rows repeating an earlier row from which they are warned about (fewer
are what real logs hold, a track skipped twice within 5 seconds); they are always counted."""


def duplicate_rows_warning(source: str, duplicates: int, rows: int) -> str | None:
    """The warning about rows that repeat an earlier row, e.g. ``warning: <file>: 1,234 rows
    (50.0%) repeat an earlier row in every column``; None below
    :data:`REPEATED_ROWS_WARNING_SHARE`."""
    if not rows or duplicates / rows < REPEATED_ROWS_WARNING_SHARE:
        return None
    share = 100 * duplicates / rows
    return f"warning: {source}: {duplicates:,} rows ({share:.1f}%) repeat an earlier row in every column"


def check_multi_event_file(
    path: str | Path,
    *,
    source: str | None = None,
    aggs: Sequence[pl.Expr] = (),
    check_order: bool = True,
) -> dict[str, Any]:
    """Check the multi_event parquet file at ``path`` in streaming passes of bounded memory,
    before anything is done with it: its columns and dtypes (metadata), then every row check
    of :func:`check_multi_event_rows` in one pass (which also computes ``aggs``, aliased
    expressions over the whole file), then the (uid, timestamp) order in a second pass
    (skipped with ``check_order=False``: a caller that sorts the rows itself).

    Returns the values of ``aggs`` by name. Raises :class:`SchemaError` as
    :func:`check_multi_event_rows` does (the first offending row of the first failing check,
    counted from 0 in the file), and :class:`~yambda_data.InputFileError` naming the file
    when it cannot be read (truncated, not parquet).
    """
    from yambda_data._io import reading

    path = Path(path)
    src = source or str(path)
    per_part, _ = check_multi_event_file_keeping_head(path, 0, source=src, aggs=aggs)
    with reading(path):
        # A scan of its own: the caller's scans keep their predicate pushdown (see preprocess).
        scan = pl.scan_parquet(path)
        # The order on its own: polars streams a shift in bounded memory only when it is
        # the query's sole expression.
        unsorted, order_values = _order_exprs()
        if check_order and scan.select(unsorted.any()).collect(engine="streaming").item():
            found = (
                scan.with_row_index(_ROW)
                .select(pl.col(_ROW), unsorted.alias("__unsorted"), *order_values)
                .filter(pl.col("__unsorted"))
                .select(pl.col(_ROW), *_ORDER_COLUMNS)
                .head(1)
                .collect(engine="streaming")
                .row(0)
            )
            raise _order_error(src, int(found[0]), *found[1:])
    return per_part.row(0, named=True)


def check_multi_event_file_keeping_head(
    path: str | Path,
    head_rows: int,
    *,
    source: str | None = None,
    aggs: Sequence[pl.Expr] = (),
) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """The checks of :func:`check_multi_event_file` but the order, in one pass that also
    hands back the file's first ``head_rows`` rows as it read them: a caller that reads the
    file again after the checks need not decode those rows twice. The head is read whole and
    checked in memory (about 21 bytes a row); the rest is checked in a streaming pass.

    Returns ``aggs`` computed on each part, one row for the head (when ``head_rows > 0``) and
    one for the rest (when the file has more rows), for the caller to combine (a minimum of
    the minimums, ...), and the head (None when ``head_rows`` is 0). Raises as
    :func:`check_multi_event_file` does, naming the offending row by its place in the file.
    """
    from yambda_data._io import reading

    path = Path(path)
    src = source or str(path)
    if head_rows < 0:
        raise ValueError(f"head_rows must be at least 0, got {head_rows}")
    with reading(path):
        # A scan of its own: the caller's scans keep their predicate pushdown (see preprocess).
        scan = pl.scan_parquet(path)
        schema = scan.collect_schema()
        check_multi_event_columns(schema, src)
        checks = _row_checks(schema)
        queries = [*_any_bad_flags(checks), *aggs]
        parts = []
        head = None
        if head_rows:
            head = scan.head(head_rows).collect()
            parts.append(head.lazy().select(queries).collect())
        if head is None or head_rows < scan.select(pl.len()).collect().item():
            rest = scan.slice(head_rows) if head_rows else scan
            parts.append(rest.select(queries).collect(engine="streaming"))
        per_part = pl.concat(parts)
        for i, check in enumerate(checks):
            if per_part[f"__c{i}"].any():
                bad = check.bad.fill_null(False)
                value = pl.lit(None) if check.value is None else check.value
                found = (
                    scan.with_row_index(_ROW)
                    .filter(bad)
                    .select(pl.col(_ROW).first(), value.first().alias("__value"))
                    .collect(engine="streaming")
                    .row(0)
                )
                raise SchemaError(src, check.column, check.message(int(found[0]), found[1]))
    return per_part.select(expr.meta.output_name() for expr in aggs), head


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
    check_mapping_ids(lazy, kind, src)
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
