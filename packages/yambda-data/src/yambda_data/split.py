"""The global temporal split of the DLRMv4 reference preprocessing.

With ``t_max`` the largest timestamp of the input (all event types):

* test  = events with ``t_max - 86,400 <= timestamp < t_max`` (events at exactly ``t_max`` are
  dropped), kept only for the uids that have at least one train event;
* gap   = the 1,800 s before the test window; its events belong to neither part;
* train = events with ``timestamp < t_max - 86,400 - 1,800``.

Both parts keep the input's row order (the (uid, timestamp) order of multi_event).

Sessions (computed on train events): per uid, a new session starts at the uid's first event and
wherever the gap to the uid's previous event exceeds 1,800 s (a gap of exactly 1,800 s stays in
the session). :func:`session_ids` numbers them per uid from 0.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import polars as pl

from yambda_data._atomic import atomic_path

__all__ = [
    "GAP_SECONDS",
    "SESSION_GAP_SECONDS",
    "TEST_SECONDS",
    "SplitMeta",
    "SplitResult",
    "WindowTooSmall",
    "busiest_window_listens",
    "session_ids",
    "session_starts",
    "split_at",
    "temporal_split",
]

TEST_SECONDS = 86_400
"""Length of the test window (one day)."""
GAP_SECONDS = 1_800
"""Gap between the end of train and the start of the test window."""
SESSION_GAP_SECONDS = 1_800
"""A gap to the previous event of the same uid larger than this starts a new session."""


@dataclass(frozen=True)
class SplitMeta:
    """The split_meta.json fields of the reference that the split itself determines.

    Times are seconds on the dataset's axis; ``*_end`` bounds are exclusive. ``t_min`` and
    ``t_max`` are over the whole input, ``train_start`` is the first train timestamp,
    ``train_end`` = ``test_start - gap``, ``test_end`` = ``t_max``. ``num_users`` counts the
    uids with train events (the test users are a subset of them). ``train_days`` is
    ``(train_end - train_start) / 86,400``. ``num_sessions`` counts the train sessions (see
    :func:`session_ids`) split at gaps above ``session_gap_seconds``.
    """

    size: str | None
    t_min: int
    t_max: int
    train_start: int
    train_end: int
    test_start: int
    test_end: int
    train_days: float
    gap_minutes: float
    test_days: float
    session_gap_seconds: int
    num_train_events: int
    num_test_events: int
    num_sessions: int
    num_users: int

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self, path: str | Path) -> Path:
        """Write the fields as JSON, atomically (temporary file, then rename)."""
        path = Path(path)
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def from_json(cls, path: str | Path) -> SplitMeta:
        """Read a split_meta.json; a malformed file raises ValueError naming it and the field
        (a missing or unknown one, or one of the wrong type)."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path}: not valid JSON: {exc}") from None
        expected = {f.name for f in fields(cls)}
        if not isinstance(data, dict) or set(data) != expected:
            got = set(data) if isinstance(data, dict) else set()
            missing, unknown = sorted(expected - got), sorted(got - expected)
            raise ValueError(f"{path}: missing field(s) {missing}, unknown field(s) {unknown}")
        for f in fields(cls):
            value = data[f.name]
            if f.type == "str | None":
                ok = value is None or isinstance(value, str)
            elif f.type == "int":
                ok = isinstance(value, int) and not isinstance(value, bool)
            else:  # float
                ok = isinstance(value, int | float) and not isinstance(value, bool)
            if not ok:
                raise ValueError(f"{path}: field {f.name!r}: expected {f.type}, got {value!r}")
        return cls(**data)


def session_starts(*, session_gap_seconds: int = SESSION_GAP_SECONDS) -> pl.Expr:
    """True where a row of a (uid, timestamp)-sorted frame starts a session: the uid's first
    row, or a timestamp more than ``session_gap_seconds`` after the previous row's."""
    uid, ts = pl.col("uid"), pl.col("timestamp").cast(pl.Int64)
    new_uid = (uid != uid.shift(1)).fill_null(True)
    return new_uid | ((ts - ts.shift(1)) > session_gap_seconds).fill_null(True)


def session_ids(*, session_gap_seconds: int = SESSION_GAP_SECONDS) -> pl.Expr:
    """Per-uid session ordinal (UInt32, from 0, named ``session_id``) of a frame sorted by
    (uid, timestamp), split as :func:`session_starts` says.

    Evaluate it on all of each uid's rows (a uid must not be split across frames).
    """
    starts = session_starts(session_gap_seconds=session_gap_seconds).cast(pl.UInt32)
    return (starts.cum_sum() - 1).over("uid").cast(pl.UInt32).alias("session_id")


def split_at(
    events: pl.LazyFrame | pl.DataFrame,
    t_max: int,
    *,
    test_seconds: int = TEST_SECONDS,
    gap_seconds: int = GAP_SECONDS,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Train and test rows of ``events`` for a given global ``t_max`` (input order kept).

    This is the rule of :func:`temporal_split` without computing ``t_max``: it can run on any
    subset of whole uids (a uid-range partition) with the ``t_max`` of the full table.
    """
    lazy = events.lazy()
    test_start = t_max - test_seconds
    train_end = test_start - gap_seconds
    ts = pl.col("timestamp").cast(pl.Int64)
    train = lazy.filter(ts < train_end).collect()
    train_users = train.select(pl.col("uid").unique())
    test = (
        lazy.filter((ts >= test_start) & (ts < t_max))
        .join(train_users.lazy(), on="uid", how="semi", maintain_order="left")
        .collect()
    )
    return train, test


@dataclass(frozen=True)
class SplitResult:
    train: pl.DataFrame
    test: pl.DataFrame
    meta: SplitMeta


def temporal_split(
    events: pl.LazyFrame | pl.DataFrame,
    *,
    size: str | None = None,
    test_seconds: int = TEST_SECONDS,
    gap_seconds: int = GAP_SECONDS,
) -> SplitResult:
    """Split multi_event rows into train and test by time (see the module docstring).

    ``events`` needs at least ``uid`` and ``timestamp``; other columns pass through. ``size``
    is only recorded in the meta. Raises ValueError on an empty input or when no event falls
    before the train end.
    """
    if test_seconds <= 0 or gap_seconds < 0:
        raise ValueError("test_seconds must be positive and gap_seconds non-negative")
    lazy = events.lazy()
    bounds = lazy.select(
        pl.col("timestamp").min().cast(pl.Int64).alias("t_min"),
        pl.col("timestamp").max().cast(pl.Int64).alias("t_max"),
    ).collect()
    t_min, t_max = bounds.row(0)
    if t_max is None:
        raise ValueError("temporal_split: no events")
    test_start = t_max - test_seconds
    train_end = test_start - gap_seconds
    train, test = split_at(lazy, t_max, test_seconds=test_seconds, gap_seconds=gap_seconds)
    if train.height == 0:
        raise ValueError(f"temporal_split: no event before train_end={train_end} (t_max={t_max})")
    num_sessions = int(train.select(session_starts().sum()).item())
    train_start = int(train["timestamp"].min())
    meta = SplitMeta(
        size=size,
        t_min=int(t_min),
        t_max=int(t_max),
        train_start=train_start,
        train_end=int(train_end),
        test_start=int(test_start),
        test_end=int(t_max),
        train_days=(train_end - train_start) / 86_400,
        gap_minutes=gap_seconds / 60,
        test_days=test_seconds / 86_400,
        session_gap_seconds=SESSION_GAP_SECONDS,
        num_train_events=train.height,
        num_test_events=test.height,
        num_sessions=num_sessions,
        num_users=train["uid"].n_unique(),
    )
    return SplitResult(train=train, test=test, meta=meta)


_BINS_PER_WINDOW = 64
"""The time resolution of :func:`busiest_window_listens`: a window's listens are counted in
bins of 1/64 of its length, so the bound exceeds the busiest window by at most the listens of
one bin at either end."""


def _check_count(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_window_request(needed: int | None, window_seconds: int) -> None:
    """ValueError naming the argument when ``needed`` (None: no check) or ``window_seconds``
    is not a positive integer: for a caller that checks its arguments before it writes."""
    if needed is not None:
        _check_count("min_window_anchors", needed)
    _check_count("window_seconds", window_seconds)


def busiest_window_listens(events: pl.LazyFrame | pl.DataFrame, window_seconds: int) -> int:
    """The most train listens (listens before ``train_end``, from the ``t_max`` of all of
    ``events``) that any time interval of ``window_seconds`` holds, wherever it starts: an
    upper bound, known from the raw events before they are split, on the train anchors of
    each time window of a sample store built from them (an anchor is a train listen; a window
    starts at the first anchor). One streaming pass over ``timestamp`` and ``event_type``;
    the rows are not validated (nulls are not counted), 0 for no train listen."""
    _check_count("window_seconds", window_seconds)
    width = max(1, window_seconds // _BINS_PER_WINDOW)
    ts = pl.col("timestamp").cast(pl.Int64)
    per_bin = (
        events.lazy()
        .filter(ts.is_not_null())
        .group_by((ts // width).alias("bin"))
        .agg(
            (pl.col("event_type") == "listen").sum().cast(pl.Int64).alias("listens"),
            ts.max().alias("t_max"),
        )
        .collect(engine="streaming")
    )
    if per_bin.height == 0:
        return 0
    train_end = int(per_bin["t_max"].max()) - TEST_SECONDS - GAP_SECONDS
    # The bin that holds train_end counts whole: its later listens only raise the bound.
    train = per_bin.filter(pl.col("bin") * width < train_end)
    if train.height == 0:
        return 0
    bins = train["bin"].to_numpy()
    counts = np.zeros(int(bins.max() - bins.min()) + 1, dtype=np.int64)
    counts[bins - bins.min()] = train["listens"].to_numpy()
    # An interval of window_seconds meets at most this many consecutive bins.
    span = -(-window_seconds // width) + 1
    total = np.concatenate([[0], np.cumsum(counts)])
    if span >= counts.size:
        return int(total[-1])
    return int((total[span:] - total[:-span]).max())


class WindowTooSmall(ValueError):
    """Data in which no time window can hold the train anchors a caller needs, found from the
    raw events (:func:`busiest_window_listens`) before they were synthesized or preprocessed:
    nothing was written."""

    def __init__(self, source: str, needed: int, most: int, window_seconds: int) -> None:
        self.source, self.needed, self.most = source, needed, most
        self.window_seconds = window_seconds
        super().__init__(
            f"{source}: no time window of {window_seconds:,} s can hold {needed:,} train "
            f"anchors: the busiest holds {most:,} train listens or fewer (an anchor is one)"
        )

    def __reduce__(self) -> tuple:  # pickled (to another rank, a worker) with its fields
        return type(self), (self.source, self.needed, self.most, self.window_seconds)


def check_window_room(
    events: pl.LazyFrame | pl.DataFrame, source: str, needed: int | None, window_seconds: int
) -> None:
    """WindowTooSmall when no window of ``events`` can hold ``needed`` train anchors (nothing
    is checked for None)."""
    check_window_request(needed, window_seconds)
    if needed is None:
        return
    most = busiest_window_listens(events, window_seconds)
    if most < needed:
        raise WindowTooSmall(source, needed, most, window_seconds)
