"""Out-of-core preprocessing of a Yambda ``multi_event`` file (the DLRMv4 reference's outputs).

``preprocess(raw_root, size, out_dir)`` reads ``<raw_root>/flat/<size>/multi_event.parquet`` and
writes, under ``out_dir``::

    split_meta.json                  SplitMeta (facts: size, t_min, ..., num_users)
    train_sessions/part-NNNNN.parquet   train events + session_id (UInt32)
    test_events/part-NNNNN.parquet      test events
    session_index/part-NNNNN.parquet    one row per train uid (see below)
    item_popularity.npy              int64 train event count per item_id
    checksums.json                   written last: size and sha256 of every other file, and
                                     the input's rows and repeated rows

The split and the sessions are those of :mod:`yambda_data.split` (global ``t_max`` over the
whole table, test ``[t_max - 86,400, t_max)``, 1,800 s gap, test rows only for uids with train
events; a new session where the gap to the uid's previous train event exceeds 1,800 s).

How it stays bounded in memory: it holds a few partitions' rows at a time, however large the
file (the figures end this paragraph). The column names and dtypes and the row count come from
the parquet metadata; one pass checks every row rule and yields ``t_min``/``t_max`` and the uid
and item_id bounds (:func:`~yambda_data.schema.check_multi_event_file_keeping_head`). Then the
uid axis ``[uid_min, uid_max]`` is cut into ``partitions`` equal-width ranges and each range is
read on its own with a lazy scan filtered on ``uid`` (polars pushes the filter down to the
parquet row groups, which a file sorted by uid keeps apart), split, sessionized and written
before the next one is read. The check pass decodes the first four partitions' worth of rows of
a file in uid order into memory and streams the rest: the partitions that lie whole in those
rows are taken from them instead of being decoded a second time (a file of up to four
partitions is decoded once). Within a partition, the split, the sessions, the session index and
the popularity are flat numpy passes over the sorted rows. Polars runs one query at a time on
its threads, so they read partition k + 1 (for a reader thread) and then write partition k's
files, its train part first (for a writer thread). Meanwhile the main thread finds partition
k's test rows, session index and repeated rows and then partition k + 1's train rows (numpy),
and a fourth thread hashes and syncs the files polars wrote. Peak memory is that of about four
partitions (one being split and its train rows, one read, the outputs of one being written),
or, at the start, the kept rows and two partitions, plus the item-popularity array.

Row order: the schema says the file is sorted by (uid, timestamp), but the reference sorts
the events itself and so takes a file in any order; so does preprocess. Each partition found
out of that order is sorted (stably: rows of equal (uid, timestamp) keep their file order) as
it is read, so any order of the same rows that keeps ties in their order gives the sorted
file's output byte for byte. A uid filter prunes none of the row groups of a file not in uid
order (a second streaming pass, of the uid column alone, tells), so such a file is first
written out by uid range in one streaming pass, as uncompressed Arrow IPC inside the
temporary output directory (about 22 bytes a row of disk, removed before the output is
complete), and each partition reads its own range from there.

``event_type`` may be stored as the public Enum, as Categorical or dictionary-encoded
strings, or as plain or large strings. Categorical codes (how polars reads a dictionary) go
to the Enum's through a table of the few names, not a string per row; the checks compare
codes too.

Validation comes first: the arguments (``partitions``, ``out_dir``), then the whole file (the
check pass above: nulls, listen-only nullability, is_organic 0 or 1, the 5-second grid,
known event types, at least one train event), all before any file or directory is created.
An error names the file, the column, the file row and, where the value is what is wrong, the
value; a file that cannot be read (truncated, not parquet) is named too
(:class:`~yambda_data.InputFileError`). A file that changes while it is read is refused
rather than half processed: the partitions must hold the rows counted, and the file's device,
inode, size and modification time must be those it had when it was checked.

Write errors (no space left, quota, I/O error) are reported as
:class:`~yambda_data.WriteError`, naming ``out_dir``, the file being written and the free
space left there.

Determinism: rows are in (uid, timestamp) order with ties in file order (a sorted file's rows
are not moved), partitions are fixed uid ranges and every file is
written from one contiguous chunk with fixed parquet settings, so two runs give byte-identical
files (``checksums.json`` included). Rows that repeat an earlier row in every column are kept,
as the reference keeps them, and counted per partition (they share their uid and timestamp).

Atomicity: everything is written into a temporary sibling directory ``.<out>.tmp-*`` that is
renamed onto ``out_dir`` at the end (an existing output is first moved aside and deleted after
the rename). An exception removes the temporary directory and leaves a previous output as it
was. ``out_dir``, when it exists, must be empty or a previous preprocess output (it has a
``split_meta.json``) holding only what preprocess writes; anything else is refused, naming the
entry, rather than replaced. ``out_dir`` may not be, hold or lie inside the raw file, nor be or
hold ``raw_root``. Runs into the same
``out_dir`` take turns through an exclusive lock on the sibling file ``.<out>.lock``; under it,
temporary directories left by a killed run are removed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
from polars.io.partition import FileProviderArgs

from yambda_data._atomic import (
    check_apart,
    check_replaceable,
    exclusive_lock,
    fsync_file,
    fsync_tree,
    replace_dir,
)
from yambda_data._checksums import checksum_problem, file_checksums
from yambda_data._column_rows import values_and_nulls_at
from yambda_data._io import InputFileError, reading, writing
from yambda_data.schema import (
    EVENT_TYPE_DTYPE,
    EVENT_TYPES,
    MULTI_EVENT_SCHEMA,
    NULLABLE_LISTEN_COLUMNS,
    ROWS_PER_PARTITION,
    SchemaError,
    check_multi_event_columns,
    check_multi_event_file_keeping_head,
    default_partitions,
    duplicate_rows_warning,
    multi_event_path,
    normalize_multi_event,
    uid_range_edges,
)
from yambda_data.split import (
    GAP_SECONDS,
    SESSION_GAP_SECONDS,
    TEST_SECONDS,
    SplitMeta,
)

__all__ = [
    "CHECKSUMS_FILE",
    "ITEM_POPULARITY_FILE",
    "ROWS_PER_PARTITION",
    "SESSION_INDEX_DIR",
    "SPLIT_META_FILE",
    "TEST_EVENTS_DIR",
    "TRAIN_SESSIONS_DIR",
    "checksums_problem",
    "default_partitions",
    "part_name",
    "preprocess",
    "read_checksums",
    "verify_checksums",
]

SPLIT_META_FILE = "split_meta.json"
TRAIN_SESSIONS_DIR = "train_sessions"
TEST_EVENTS_DIR = "test_events"
SESSION_INDEX_DIR = "session_index"
ITEM_POPULARITY_FILE = "item_popularity.npy"
CHECKSUMS_FILE = "checksums.json"
"""The record written last: the size and sha256 of every other file of the output (by its
path in the output), and the input's row count and the rows that repeat an earlier row."""
_PART_DIRS = (TRAIN_SESSIONS_DIR, TEST_EVENTS_DIR, SESSION_INDEX_DIR)
_PART_NAME = re.compile(r"part-\d{5,}\.parquet")

_ROW_GROUP_SIZE = 1_000_000
_PARQUET_OPTIONS = {
    "compression": "zstd",
    "compression_level": 1,
    "statistics": True,
    "row_group_size": _ROW_GROUP_SIZE,
}

SESSION_INDEX_SCHEMA = pl.Schema(
    [
        ("uid", pl.UInt32),
        ("row_start", pl.Int64),
        ("num_events", pl.Int64),
        ("session_id", pl.List(pl.UInt32)),
        ("session_offset", pl.List(pl.Int64)),
        ("session_length", pl.List(pl.Int64)),
    ]
)
"""One row per train uid: its first row in the same-numbered train_sessions part, its train
events, and its sessions in order with their offsets into its events and their lengths."""


_HEAD_PARTITIONS = 4
"""The partitions' worth of rows (of a file in uid order) that the check pass keeps as it
reads them: the partitions that lie whole in them are not read again, and a file of up to four
partitions is decoded once. The price is memory at the start, those rows and two converted
partitions (peak RSS 0.75 to 1.1 GiB on files of 13M to 34M rows, against 0.7 to 0.8 GiB when
every partition was read again); past four partitions it does not grow with the file."""


def part_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


@dataclass(frozen=True)
class _Bounds:
    identity: tuple[int, int, int, int]
    """The file's :func:`_identity` before it was read: it must not change until the end."""
    num_rows: int
    partitions: int
    """The uid ranges read one at a time."""
    uid_sorted: bool
    """Whether the rows are in uid order: then a partition's scan reads only its row groups."""
    t_min: int
    t_max: int
    uid_min: int
    uid_max: int
    item_max: int


@dataclass(frozen=True)
class _TrainRows:
    """A partition's train rows with their session ids (the frame written first), and where its
    users and sessions start, from which the test rows and the session index follow."""

    train: pl.DataFrame
    user_start: np.ndarray
    """The partition row where each uid's rows start."""
    user_has_train: np.ndarray
    """Per uid of ``user_start``: whether it has train rows (its first row is one)."""
    user_row: np.ndarray
    """The ``train`` row where each uid with train rows starts."""
    session_row: np.ndarray
    """The ``train`` row where each session starts."""
    session_user: np.ndarray
    """Per session: the index of its uid in ``user_row``."""
    session_id: np.ndarray
    """Per session: its ordinal within its uid (the ``session_id`` of its rows)."""


def _normalized(part: pl.DataFrame) -> pl.DataFrame:
    """The partition as :func:`~yambda_data.schema.normalize_multi_event` gives it, without the
    round trip through strings when ``event_type`` already is the Enum."""
    stored = part.schema["event_type"]
    if stored == EVENT_TYPE_DTYPE:
        part = part.select(list(MULTI_EVENT_SCHEMA))
    elif isinstance(stored, pl.Categorical):
        part = part.with_columns(_categorical_as_enum(part["event_type"]))
        part = part.select(list(MULTI_EVENT_SCHEMA))
    else:
        part = normalize_multi_event(part.lazy()).collect()
    # One contiguous chunk per column (the parquet reader hands back dozens): numpy then reads
    # the columns in place, and the filtered outputs need no further copy before writing.
    return part.rechunk()


def _categorical_as_enum(event_type: pl.Series) -> pl.Series:
    """A Categorical ``event_type`` (how polars reads dictionary-encoded strings) as
    :data:`EVENT_TYPE_DTYPE`, through a table from its codes to the Enum's: polars' own cast
    looks up the string of every row, three times the cost. The column has no nulls and no
    other value (the file was checked)."""
    names = pl.Series(EVENT_TYPES).cast(event_type.dtype).to_physical().to_numpy()
    codes = event_type.to_physical().to_numpy()
    size = max(int(codes.max(initial=0)), int(names.max())) + 1
    # A code of no event type maps to a value the Enum lacks, so the conversion fails on it.
    table = np.full(size, len(EVENT_TYPES), dtype=np.uint8)
    table[names] = np.arange(len(EVENT_TYPES), dtype=np.uint8)
    enum_codes = pl.Series("event_type", np.take(table, codes))
    return enum_codes.to_frame().select(pl.col("event_type").cat.to(EVENT_TYPE_DTYPE)).to_series()


def _in_order(part: pl.DataFrame) -> pl.DataFrame:
    """The partition sorted by (uid, timestamp), rows of equal keys in file order: the
    partition itself when it already is (a file sorted as the schema says), so that a sorted
    file and the same rows in any other order give the same output."""
    uid = part["uid"].to_numpy()
    ts = part["timestamp"].to_numpy()
    later_time = ts[1:] >= ts[:-1]
    new_uid = uid[1:] != uid[:-1]
    if np.all((uid[1:] > uid[:-1]) | (~new_uid & later_time)):
        return part
    if np.all(later_time):
        # A log in time order: a stable sort by uid alone gives (uid, timestamp) order, and
        # numpy sorts 16-bit digits by radix, in one pass over the rows per digit.
        return part[_stable_order_by(uid - uid.min())]
    order = _block_order(uid, new_uid, later_time)
    if order is None:
        # One 64-bit key, and numpy's stable sort (a merge of the runs the rows have): a
        # third of polars' stable two-column sort of the whole frame.
        key = (uid.astype(np.uint64) << np.uint64(32)) | ts
        order = np.argsort(key, kind="stable")
    return part[order]


def _block_order(uid: np.ndarray, new_uid: np.ndarray, later_time: np.ndarray) -> np.ndarray | None:
    """The (uid, timestamp) order of rows that come as one block per uid, each block in time
    order and the blocks in any order (a file sorted by some other key of the user, or written
    user by user): the blocks in uid order, a few flat passes where the general sort takes four
    times as long. None when a uid has more than one block or a block is out of time order.

    ``new_uid`` and ``later_time``: per pair of neighbouring rows, whether the uid changes and
    whether the timestamp does not go back.
    """
    if not np.all(new_uid | later_time):
        return None
    starts = np.flatnonzero(np.concatenate(([True], new_uid)))
    by_uid = np.argsort(uid[starts])
    block_uids = uid[starts[by_uid]]
    if np.any(block_uids[1:] == block_uids[:-1]):
        return None  # a uid in two blocks
    lengths = np.diff(starts, append=len(uid))[by_uid]
    # Row i of the result is row i - (where its block starts in the result) + (where it starts
    # in the partition).
    shift = starts[by_uid] - (np.cumsum(lengths) - lengths)
    return np.arange(len(uid)) + np.repeat(shift, lengths)


def _stable_order_by(values: np.ndarray) -> np.ndarray:
    """The stable sorting permutation of non-negative 32-bit ``values``, by 16-bit digits from
    the lowest (one digit when the values are below 65,536)."""
    order = np.argsort((values & 0xFFFF).astype(np.uint16), kind="stable")
    if values.max() < 1 << 16:
        return order
    return order[np.argsort((values[order] >> 16).astype(np.uint16), kind="stable")]


def _run_starts(values: np.ndarray) -> np.ndarray:
    """True at each row whose value differs from the previous row's (and at row 0)."""
    starts = np.empty(len(values), dtype=bool)
    starts[:1] = True
    np.not_equal(values[1:], values[:-1], out=starts[1:])
    return starts


_REPEAT_LAGS = 16
"""How far back within a run of rows of one (uid, timestamp) :func:`_repeated_rows` compares
row by row; runs longer than this are counted by
:func:`_repeats_within_runs`."""


def _repeated_rows(part: pl.DataFrame, user_start: np.ndarray) -> int:
    """:func:`~yambda_data.schema.count_duplicate_rows` of a partition sorted by (uid,
    timestamp); ``user_start``: the row where each uid's rows start (the split's
    :attr:`_TrainRows.user_start`), which stands for a comparison of the uid column.

    A row can only repeat an earlier row of its run of equal (uid, timestamp). Within a run
    rows mostly differ by item (skips of one track after another), so the item alone is
    compared first, lag by lag (each row with the row 1, 2, ... 16 before it in its run: lags
    1 and 2 over the whole partition, contiguous, the deeper ones over the rows still that deep
    in a run, a handful of passes over a shrinking set), and the other columns only for the
    few pairs of one item (a reaction next to its listen). A hash of every row sharing its key,
    or every column at every lag, cost ten times more.

    numpy only, no polars call: the count runs while polars writes the partition's train part,
    and a polars gather waits for polars' threads (:mod:`yambda_data._column_rows`).
    """
    ts = part["timestamp"].to_numpy()
    same_key = np.empty(len(ts), dtype=bool)  # the row continues the run of the row before
    same_key[:1] = False
    np.equal(ts[1:], ts[:-1], out=same_key[1:])
    same_key[user_start] = False
    if not same_key.any():
        return 0
    item = part["item_id"].to_numpy()
    two_deep = same_key[1:] & same_key[:-1]  # row i + 1 is at least 2 deep in its run
    later = [np.flatnonzero(same_key[1:] & (item[1:] == item[:-1])) + 1]
    later.append(np.flatnonzero(two_deep[1:] & (item[2:] == item[:-2])) + 2)
    earlier = [later[0] - 1, later[1] - 2]
    at = np.flatnonzero(two_deep[1:] & same_key[:-2]) + 2  # at least 3 deep in their run
    for lag in range(3, _REPEAT_LAGS + 1):
        if lag > 3:
            at = at[same_key[at - (lag - 1)]]  # rows at least ``lag`` deep in their run
        if not len(at):
            break
        one_item = at[item[at] == item[at - lag]]
        later.append(one_item)
        earlier.append(one_item - lag)
    else:
        at = at[same_key[at - _REPEAT_LAGS]]  # rows deeper than the lags compared
    later_rows, earlier_rows = np.concatenate(later), np.concatenate(earlier)
    long_runs = 0
    if len(at):
        run_starts = np.flatnonzero(~same_key)
        run_of_row = np.searchsorted(run_starts, at, side="right") - 1  # sorted, as ``at`` is
        first = run_starts[run_of_row[_run_starts(run_of_row)]]
        ends = np.append(run_starts, len(ts))[np.searchsorted(run_starts, first) + 1]
        bounds = np.zeros(len(ts) + 1, dtype=np.int8)
        bounds[first] += 1  # the runs are distinct, so are their starts and their ends
        bounds[ends] -= 1
        in_long = np.cumsum(bounds[:-1], dtype=np.int8).astype(bool)
        rows = np.flatnonzero(in_long)
        long_runs = _repeats_within_runs(part, rows, np.searchsorted(first, rows, side="right"))
        short = ~in_long[later_rows]
        later_rows, earlier_rows = later_rows[short], earlier_rows[short]
    # The columns without nulls in place; the nullable ones read for the few pairs left.
    event_type = part["event_type"].to_physical().to_numpy()
    is_organic = part["is_organic"].to_numpy()
    keep = event_type[later_rows] == event_type[earlier_rows]
    keep &= is_organic[later_rows] == is_organic[earlier_rows]
    later_rows, earlier_rows = later_rows[keep], earlier_rows[keep]
    if not len(later_rows):
        return long_runs
    pairs = len(later_rows)
    equal = np.ones(pairs, dtype=bool)
    for name in NULLABLE_LISTEN_COLUMNS:
        values, is_null = values_and_nulls_at(
            part[name], np.concatenate((later_rows, earlier_rows))
        )
        equal &= values[:pairs] == values[pairs:]
        equal &= is_null[:pairs] == is_null[pairs:]
    return long_runs + _distinct_count(later_rows[equal])


def _distinct_count(values: np.ndarray) -> int:
    """How many distinct values ``values`` holds (a row that repeats several earlier rows is
    one repeat). By a sort: numpy 2's hashed ``np.unique`` takes a microsecond or more per
    value at these sizes and grows faster than the values do, where the sort takes 15 ns."""
    if not len(values):
        return 0
    return int(np.count_nonzero(_run_starts(np.sort(values))))


def _repeats_within_runs(part: pl.DataFrame, rows: np.ndarray, run: np.ndarray) -> int:
    """How many of ``rows`` equal an earlier row of their run (``run``: a number per row, the
    same for the rows of one run, whose uid and timestamp are then equal) in every column.

    The rows are sorted by run and every other column, and a row equal to the one before it
    in that order is a repeat. Where the columns' ranges over these rows multiply to less than
    2**64, each row is one integer in mixed radix (equal integers, equal rows) and a sort of
    those integers does it, a fifth of the multi-key sort that wider values take. numpy only, as
    :func:`_repeated_rows`.
    """
    if len(rows) < 2:
        return 0
    keys = [run, part["item_id"].to_numpy()[rows], part["is_organic"].to_numpy()[rows]]
    keys.append(part["event_type"].to_physical().to_numpy()[rows])
    for name in NULLABLE_LISTEN_COLUMNS:
        values, is_null = values_and_nulls_at(part[name], rows)
        keys += [is_null, values]
    packed = _mixed_radix(keys)
    if packed is not None:
        packed.sort()
        return int(np.count_nonzero(packed[1:] == packed[:-1]))
    order = np.lexsort(keys[::-1])
    repeat = np.ones(len(rows) - 1, dtype=bool)
    for key in keys:
        ordered = key[order]
        repeat &= ordered[1:] == ordered[:-1]
    return int(repeat.sum())


def _mixed_radix(keys: list[np.ndarray]) -> np.ndarray | None:
    """One uint64 per row that orders and equals as the rows of ``keys`` (non-negative integer
    arrays of one length) do together, the first key most significant: each key's offset from
    its minimum, in the radix of its range. None when the ranges multiply to 2**64 or more."""
    bounds = [(int(key.min()), int(key.max())) for key in keys]
    if np.prod([float(hi - lo + 1) for lo, hi in bounds]) >= 2.0**63:
        return None  # in floats, so that no product overflows; 2**63 leaves rounding room
    packed = np.zeros(len(keys[0]), dtype=np.uint64)
    for key, (lo, hi) in zip(keys, bounds, strict=True):
        packed *= np.uint64(hi - lo + 1)
        packed += key.astype(np.uint64) - np.uint64(lo)
    return packed


def _train_rows(part: pl.DataFrame, train_end: int) -> _TrainRows:
    """The train rows of a partition sorted by (uid, timestamp) and their sessions: the rules of
    :func:`~yambda_data.split.split_at` and :func:`~yambda_data.split.session_ids`, with numpy.

    Sorted rows make each rule a pass over flat arrays instead of a polars group-by over uids
    (which cost most of the CPU time). A uid's train rows are a prefix of its rows, so a train
    row's previous row is the previous row of its uid, and the session starts of the train rows
    are those of all rows (where the uid changes or the time gap exceeds the session gap) at the
    train rows: boolean arrays are gathered, not the uid and time columns.
    """
    # Few, narrow temporaries: each fresh array of a partition's length costs page faults
    # (system time) about as much as the arithmetic on it.
    uid = part["uid"].to_numpy()
    ts = part["timestamp"].to_numpy()
    is_train = ts < train_end
    new_user = _run_starts(uid)
    user_start = np.flatnonzero(new_user)
    starts = np.empty(len(ts), dtype=bool)
    # uint32 differences wrap where the uid changes, but those rows start a session anyway, and
    # within a uid the times never decrease.
    np.greater(ts[1:] - ts[:-1], SESSION_GAP_SECONDS, out=starts[1:])
    starts[:1] = True
    starts |= new_user
    user_row = np.flatnonzero(new_user[is_train])
    session_row = np.flatnonzero(starts[is_train])
    num_train = int(np.count_nonzero(is_train))
    session_user = np.searchsorted(user_row, session_row, side="right") - 1
    # A session's ordinal within its uid, repeated over its rows.
    ordinal = np.arange(len(session_row)) - np.searchsorted(session_row, user_row)[session_user]
    ordinal = ordinal.astype(np.uint32)
    session_id = np.repeat(ordinal, np.diff(session_row, append=num_train))
    # A boolean filter copies the rows several times faster than a gather of their indices.
    train = part.filter(pl.Series(is_train))
    train = train.with_columns(pl.Series("session_id", session_id, dtype=pl.UInt32))
    return _TrainRows(
        train=train,
        user_start=user_start,
        user_has_train=is_train[user_start],
        user_row=user_row,
        session_row=session_row,
        session_user=session_user,
        session_id=ordinal,
    )


def _test_rows(part: pl.DataFrame, rows: _TrainRows, test_start: int, t_max: int) -> pl.DataFrame:
    """The partition's test rows: in ``[test_start, t_max)``, of a uid with train rows."""
    ts = part["timestamp"].to_numpy()
    is_test = np.repeat(rows.user_has_train, np.diff(rows.user_start, append=len(ts)))
    is_test &= ts >= test_start
    is_test &= ts < t_max
    return part.filter(pl.Series(is_test))


def _session_index(part: pl.DataFrame, rows: _TrainRows) -> pl.DataFrame:
    """One row per uid with train rows (:data:`SESSION_INDEX_SCHEMA`)."""
    num_train = rows.train.height
    user_row, session_row, session_user = rows.user_row, rows.session_row, rows.session_user
    sessions = pl.DataFrame(
        {
            "user": session_user,
            "session_id": rows.session_id,
            "session_offset": session_row - user_row[session_user],
            "session_length": np.diff(session_row, append=num_train),
        }
    )
    lists = sessions.group_by("user", maintain_order=True).agg(pl.exclude("user"))
    index = pl.DataFrame(
        {
            "uid": part["uid"].to_numpy()[rows.user_start[rows.user_has_train]],
            "row_start": user_row,
            "num_events": np.diff(user_row, append=num_train),
        }
    ).hstack(lists.drop("user"))
    return index.select(list(SESSION_INDEX_SCHEMA)).cast(dict(SESSION_INDEX_SCHEMA))


def _train_start(part: pl.DataFrame, rows: _TrainRows) -> int | None:
    """The earliest train time of the partition (None without train rows): each uid's first
    row is its earliest."""
    firsts = rows.user_start[rows.user_has_train]
    return int(part["timestamp"].to_numpy()[firsts].min()) if len(firsts) else None


def _write_parquet(frame: pl.DataFrame, path: Path) -> None:
    frame.rechunk().write_parquet(path, **_PARQUET_OPTIONS)


def _write_parts(
    frames: list[tuple[pl.DataFrame, str]],
    tmp: Path,
    out: Path,
    k: int,
    after: Future | None = None,
) -> list[str]:
    """Partition ``k``'s part files of ``frames`` (each with its directory) under the temporary
    output ``tmp``; their names relative to it. ``after``: the partition's write before this
    one; when it failed, this one raises its error and writes nothing."""
    if after is not None:
        after.result()
    names = []
    for frame, sub in frames:
        with writing(tmp / sub / part_name(k), output=out):
            _write_parquet(frame, tmp / sub / part_name(k))
        names.append(f"{sub}/{part_name(k)}")
    return names


def _finish_partition(tmp: Path, out: Path, files: tuple[Future, ...]) -> dict[str, dict]:
    """After :func:`_write_parts` (``files``): the files' :func:`file_checksums`, taken
    while they are in the page cache, and their fsync, now rather than all at once before the
    rename. Neither uses polars' threads, which read a later partition meanwhile."""
    names = [name for written in files for name in written.result()]
    checksums = file_checksums(tmp, names)
    for name in names:
        with writing(tmp / name, output=out):
            fsync_file(tmp / name)
    return checksums


def _write_totals(tmp: Path, out: Path, popularity: np.ndarray, meta: SplitMeta) -> dict:
    """The item popularity and the split metadata under ``tmp``, synced; their
    :func:`file_checksums`."""
    names = [ITEM_POPULARITY_FILE, SPLIT_META_FILE]
    with (
        writing(tmp / ITEM_POPULARITY_FILE, output=out),
        open(tmp / ITEM_POPULARITY_FILE, "wb") as f,
    ):
        np.save(f, popularity, allow_pickle=False)
    with writing(tmp / SPLIT_META_FILE, output=out):
        meta.to_json(tmp / SPLIT_META_FILE)
    for name in names:
        with writing(tmp / name, output=out):
            fsync_file(tmp / name)
    return file_checksums(tmp, names)


@dataclass(frozen=True)
class _Written:
    """A partition handed to the writer threads."""

    files: tuple[Future, ...]
    """Each done once polars has written its files (the train part first, then the others)."""
    checksums: Future
    """Its files' checksums, once they are hashed and synced."""


def _wait_files(written: _Written) -> None:
    """Until polars has written a partition's files (raising what their writing raised)."""
    for files in written.files:
        files.result()


def _wait_read(part: Future) -> pl.DataFrame:
    """A partition once the reader thread has read and sorted it (raising what it raised)."""
    return part.result()


def _wait_written(written: _Written) -> dict[str, dict]:
    """A partition's file checksums once the writer threads are done with it (raising what
    its writing raised)."""
    return written.checksums.result()


def _written_by_preprocess(relative: str, is_dir: bool) -> bool:
    """Whether an entry of an output directory is one that :func:`preprocess` writes."""
    parent, _, name = relative.rpartition("/")
    if not parent:
        if is_dir:
            return name in _PART_DIRS
        return name in (SPLIT_META_FILE, ITEM_POPULARITY_FILE, CHECKSUMS_FILE)
    return parent in _PART_DIRS and not is_dir and bool(_PART_NAME.fullmatch(name))


def _identity(path: Path) -> tuple[int, int, int, int]:
    """What changes when a file is rewritten or replaced: device, inode, size, mtime."""
    st = path.stat()
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


_SPILL_DIR = ".by-uid-range"
"""Where the rows of a file not in uid order are put, by uid range, inside the temporary
output directory (removed before the output is complete)."""


def _spill_uid_ranges(
    scan: pl.LazyFrame, path: Path, spill: Path, bounds: _Bounds, n_parts: int, out: Path
) -> None:
    """Write the rows of a file whose row groups mix uids into one uncompressed Arrow IPC
    file (or a few) per uid range under ``spill``, in one streaming pass, rows in file order.

    Without it every partition's scan would read every row group of such a file (the uid
    filter prunes none): a fraction of the rows kept for the decoding of all of them, once per
    partition. The spill costs one read and a write of about 22 bytes a row on disk.
    """
    # The index of the range of :func:`uid_range_edges` that holds the uid: the largest k
    # with uid_min + floor(span * k / n) <= uid, i.e. floor((n * (uid - uid_min + 1) - 1) /
    # span), elementwise as the partitioned sink wants it (no search in the edges).
    span = bounds.uid_max - bounds.uid_min + 1
    offset = pl.col("uid").cast(pl.UInt64) - bounds.uid_min + 1
    key = ((offset * n_parts - 1) // span).alias("__range")

    def file_path(args: FileProviderArgs) -> str:
        # Relative to ``spill``: polars joins the name to the base path, so a relative
        # ``spill`` given again here would nest (``spill/spill/...``) and the ranges would
        # then be found empty, which reads as the file having changed.
        k = args.partition_keys.item()
        return f"range-{k:05d}-{args.index_in_partition:05d}.ipc"

    target = pl.PartitionBy(spill, key=key, include_key=False, file_path_provider=file_path)
    spill.mkdir()
    with writing(spill, output=out), reading(path):
        # event_type as the Enum from here on: one byte a row to write and read back, where
        # strings take a 16-byte view each and would be cast once per partition later.
        normalize_multi_event(scan).sink_ipc(target, compression=None)


def _read_spilled(spill: Path, k: int, scan: pl.LazyFrame) -> pl.DataFrame:
    """The rows of uid range ``k`` that :func:`_spill_uid_ranges` wrote, in file order (an
    empty frame of the file's columns when it wrote none)."""
    files = sorted(spill.glob(f"range-{k:05d}-*.ipc"))
    if not files:
        return normalize_multi_event(scan).clear().collect()
    return pl.concat([pl.read_ipc(f) for f in files])


def _read_partition(
    scan: pl.LazyFrame, path: Path, spill: Path | None, edges: list[int], k: int
) -> pl.DataFrame:
    """The rows of uid range ``k`` in file order, normalized: from the file (its row groups
    that the uid filter keeps) or, for a file not in uid order, from the spill."""
    if spill is not None:
        return _normalized(_read_spilled(spill, k, scan))
    uid = pl.col("uid").cast(pl.Int64)
    with reading(path):
        part = scan.filter((uid >= edges[k]) & (uid < edges[k + 1])).collect()
    return _normalized(part)


def _changed(path: Path, num_rows: int, rows_read: int) -> InputFileError:
    return InputFileError(
        path,
        f"changed while it was read (checked with {num_rows} rows, the uid ranges read "
        f"{rows_read} so far); nothing was written",
    )


def _bounds(path: Path, src: str, partitions: int | None) -> tuple[_Bounds, pl.DataFrame | None]:
    """Row count (metadata), then the streaming validation passes of the whole file, which
    also yield the time, uid and item_id bounds; and, for a file in uid order, its first rows
    as the check pass read them (see :data:`_HEAD_PARTITIONS`), None otherwise."""
    identity = _identity(path)
    with reading(path):
        scan = pl.scan_parquet(path)
        check_multi_event_columns(scan.collect_schema(), src)
        num_rows = int(scan.select(pl.len()).collect().item())
    if num_rows == 0:
        raise SchemaError(src, None, "no events")
    if num_rows > 2**32 - 1 and pl.get_index_type() != pl.UInt64:
        raise ValueError(
            f"{src}: {num_rows} rows do not fit polars' 32-bit row index; install the 64-bit "
            "index build of polars (polars[rt64]) to preprocess this file"
        )
    n_parts = partitions if partitions is not None else default_partitions(num_rows)
    with reading(path):
        # uid alone: a streaming pass of one narrow column (a shift streams in bounded memory
        # only as the query's sole expression). Nulls and the like are the check pass's.
        uid = pl.col("uid")
        uid_sorted = (
            not pl.scan_parquet(path)
            .select((uid < uid.shift(1)).any())
            .collect(engine="streaming")
            .item()
        )
    # The order is not checked: each partition is put in (uid, timestamp) order as it is read.
    head_rows = _HEAD_PARTITIONS * -(-num_rows // n_parts) if uid_sorted else 0
    per_part, head = check_multi_event_file_keeping_head(
        path,
        head_rows,
        source=src,
        aggs=[
            pl.col("timestamp").min().cast(pl.Int64).alias("t_min"),
            pl.col("timestamp").max().cast(pl.Int64).alias("t_max"),
            pl.col("uid").min().cast(pl.Int64).alias("uid_min"),
            pl.col("uid").max().cast(pl.Int64).alias("uid_max"),
            pl.col("item_id").max().cast(pl.Int64).alias("item_max"),
        ],
    )
    row = per_part.select(
        pl.col("t_min", "uid_min").min(), pl.col("t_max", "uid_max", "item_max").max()
    ).row(0, named=True)
    bounds = _Bounds(identity, num_rows, n_parts, uid_sorted, **row)
    train_end = bounds.t_max - TEST_SECONDS - GAP_SECONDS
    if bounds.t_min >= train_end:
        raise ValueError(
            f"{src}: no event before train_end={train_end} (t_max={bounds.t_max}); nothing to train"
        )
    return bounds, head


def _partitions_in_head(
    head: pl.DataFrame | None, edges: list[int], num_rows: int
) -> dict[int, pl.DataFrame]:
    """The partitions that lie whole in ``head``, the first rows of a file in uid order, by
    index: each one's rows in file order, as the uid filter of :func:`_read_partition` would
    give them, sharing the head's memory (a partition's chunks are freed with it)."""
    if head is None:
        return {}
    uid = head["uid"]
    # polars searches the column's chunks in place (numpy would want them copied together
    # first); an edge above every uid the dtype holds is past every row.
    top = 2**32 - 1
    found = uid.search_sorted(pl.Series([min(e, top) for e in edges], dtype=uid.dtype))
    at = [int(i) if e <= top else uid.len() for i, e in zip(found, edges, strict=True)]
    whole = head.height == num_rows
    # A partition that reaches the head's last row may go on past it, unless the head is
    # the whole file.
    return {
        k: head.slice(at[k], at[k + 1] - at[k])
        for k in range(len(edges) - 1)
        if at[k + 1] < head.height or whole
    }


def preprocess(
    raw_root: str | Path,
    size: str,
    out_dir: str | Path,
    *,
    partitions: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> SplitMeta:
    """Validate, split, sessionize and write the reference outputs (see the module docstring).

    ``partitions`` (default :func:`default_partitions` of the file's row count) is the number of
    uid ranges processed one at a time. Everything is validated before any file or directory
    is created. Raises FileNotFoundError for a missing raw file, :class:`SchemaError` (naming
    the file, column, row and value) for an invalid one, :class:`~yambda_data.InputFileError`
    for one that cannot be read, ValueError for an unusable ``partitions``, an input with no
    train event, an ``out_dir`` that is, holds or lies inside the raw file (or is or holds
    ``raw_root``), or one that holds anything but a previous output, and
    :class:`~yambda_data.WriteError` (naming the path and the free space) when writing fails.
    Rows that repeat an earlier row in every column are kept, and counted: ``progress`` (if
    given) receives :func:`~yambda_data.schema.duplicate_rows_warning` when there are any.
    """
    path = multi_event_path(raw_root, size)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    if partitions is not None and (
        not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1
    ):
        raise ValueError(f"partitions must be a positive integer, got {partitions!r}")
    out = Path(out_dir)
    check_apart(out, [path], roots=[Path(raw_root)])
    check_replaceable(
        out, SPLIT_META_FILE, "a preprocess output", _written_by_preprocess, "preprocess"
    )

    src = str(path)
    # The checks scan the file on their own: with polars 2.1, collecting the schema of the
    # scan that is later filtered per partition stops the uid filter from reaching the
    # parquet reader, and every partition then reads the whole file.
    bounds, head = _bounds(path, src, partitions)
    with reading(path):  # a damaged item_id can ask for more memory than there is
        popularity = np.zeros(bounds.item_max + 1, dtype=np.int64)
    scan = pl.scan_parquet(path)
    n_parts = bounds.partitions
    edges = uid_range_edges(bounds.uid_min, bounds.uid_max, n_parts)
    kept = _partitions_in_head(head, edges, bounds.num_rows)
    del head  # each kept partition's memory goes once it is processed
    with writing(out.parent, output=out):
        out.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(out):
        # Under the lock no other run writes here: leftovers are from one that was killed.
        for stale in out.parent.glob(f".{out.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        meta, duplicates = _preprocess_locked(
            scan, bounds, popularity, src, path, size, out, edges, kept
        )
    warning = duplicate_rows_warning(src, duplicates, bounds.num_rows)
    if warning and progress is not None:
        progress(warning)
    return meta


def _preprocess_locked(
    scan: pl.LazyFrame,
    bounds: _Bounds,
    popularity: np.ndarray,
    src: str,
    path: Path,
    size: str,
    out: Path,
    edges: list[int],
    kept: dict[int, pl.DataFrame],
) -> tuple[SplitMeta, int]:
    """The output, written; returns its split metadata and the input rows that repeat an
    earlier row. ``kept``: the partitions the check pass read (:func:`_partitions_in_head`),
    taken from it rather than read again."""
    n_parts = bounds.partitions
    t_max = bounds.t_max
    test_start = t_max - TEST_SECONDS
    train_end = test_start - GAP_SECONDS
    with writing(out.parent, output=out):
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        umask = os.umask(0)
        os.umask(umask)
        with writing(tmp, output=out):
            tmp.chmod(0o777 & ~umask)  # mkdtemp makes it 0700; give it a plain directory's mode
            for sub in (TRAIN_SESSIONS_DIR, TEST_EVENTS_DIR, SESSION_INDEX_DIR):
                (tmp / sub).mkdir()
        num_train = num_test = num_sessions = num_users = duplicates = 0
        train_start: int | None = None
        rows_read = 0  # each row falls in one uid range
        spill = None
        checksums: dict[str, dict] = {}  # of the files written so far, by path in the output
        if not bounds.uid_sorted:
            spill = tmp / _SPILL_DIR
            _spill_uid_ranges(scan, path, spill, bounds, n_parts, out)
        # Polars runs one query at a time on its threads: a read waits for the write before
        # it. So a reader thread has polars read (and sorts) partition k + 1 while this thread
        # finds partition k's train rows (numpy) and polars writes partition k - 1. Partition
        # k's train part goes to a writer thread once k + 1 is read, and this thread finds its
        # test rows, session index and repeated rows while polars writes it; a fourth thread
        # hashes and syncs what polars wrote. The outputs of at most two partitions wait, so
        # memory stays that of about four.

        def read(k: int) -> pl.DataFrame:
            part = kept.pop(k, None)
            if part is None:
                return _in_order(_read_partition(scan, path, spill, edges, k))
            return _in_order(_normalized(part))

        def checked(part: pl.DataFrame) -> pl.DataFrame:
            nonlocal rows_read
            rows_read += part.height
            if _identity(path) != bounds.identity:
                raise _changed(path, bounds.num_rows, rows_read)
            return part

        with (
            ThreadPoolExecutor(1) as reader,
            ThreadPoolExecutor(1) as writer,
            ThreadPoolExecutor(1) as finisher,
        ):
            written: list[_Written] = []  # the partitions the two threads are not done with
            next_part = reader.submit(read, 0)
            for k in range(n_parts):
                part = checked(_wait_read(next_part))
                if k + 1 < n_parts:
                    next_part = reader.submit(read, k + 1)
                rows = _train_rows(part, train_end)
                if written:
                    _wait_files(written[-1])  # a failed write stops the run before the next
                if k + 1 < n_parts:
                    # Before this partition's write, which polars would otherwise take first,
                    # leaving this thread nothing to split meanwhile.
                    _wait_read(next_part)
                if len(written) == 2:
                    checksums.update(_wait_written(written.pop(0)))
                # The train part first: it is most of the writing, and the test rows, the
                # session index and the repeated rows are found while polars writes it.
                train = [(rows.train, TRAIN_SESSIONS_DIR)]
                train_file = writer.submit(_write_parts, train, tmp, out, k)
                test = _test_rows(part, rows, test_start, t_max)
                index = _session_index(part, rows)
                other = [(test, TEST_EVENTS_DIR), (index, SESSION_INDEX_DIR)]
                files = (train_file, writer.submit(_write_parts, other, tmp, out, k, train_file))
                finished = finisher.submit(_finish_partition, tmp, out, files)
                written.append(_Written(files, finished))
                duplicates += _repeated_rows(part, rows.user_start)
                # In place: a bincount would fault in a fresh array of every item each time.
                np.add.at(popularity, rows.train["item_id"].to_numpy(), 1)
                num_train += rows.train.height
                num_test += test.height
                num_users += index.height
                num_sessions += len(rows.session_row)
                first = _train_start(part, rows)
                if first is not None:
                    train_start = first if train_start is None else min(train_start, first)
                del part, rows, train, test, index, other
            # What the last partition's files do not need is done while polars writes them.
            if rows_read != bounds.num_rows:
                raise _changed(path, bounds.num_rows, rows_read)
            if spill is not None:
                shutil.rmtree(spill)
            if train_start is None:
                raise ValueError(
                    f"{path}: no event before train_end={train_end} (t_max={t_max}); "
                    "nothing to train"
                )
            meta = SplitMeta(
                size=size,
                t_min=bounds.t_min,
                t_max=t_max,
                train_start=train_start,
                train_end=train_end,
                test_start=test_start,
                test_end=t_max,
                train_days=(train_end - train_start) / 86_400,
                gap_minutes=GAP_SECONDS / 60,
                test_days=TEST_SECONDS / 86_400,
                session_gap_seconds=SESSION_GAP_SECONDS,
                num_train_events=num_train,
                num_test_events=num_test,
                num_sessions=num_sessions,
                num_users=num_users,
            )
            checksums.update(_write_totals(tmp, out, popularity, meta))
            for partition in written:
                checksums.update(_wait_written(partition))
        files = [p.relative_to(tmp).as_posix() for p in tmp.rglob("*") if p.is_file()]
        checksums.update(file_checksums(tmp, [f for f in files if f not in checksums]))
        record = {
            "files": dict(sorted(checksums.items())),
            "input": {"rows": bounds.num_rows, "duplicate_rows": duplicates},
        }
        with writing(tmp / CHECKSUMS_FILE, output=out):
            (tmp / CHECKSUMS_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        with writing(tmp, output=out):
            fsync_tree(tmp)
            replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return meta, duplicates


def read_checksums(out_dir: str | Path) -> dict:
    """The checksum record of a preprocess output (see :data:`CHECKSUMS_FILE`):
    ``{"files": {path: {"bytes", "sha256"}}, "input": {"rows", "duplicate_rows"}}``. Raises
    FileNotFoundError or InputFileError (malformed) naming it."""
    record = Path(out_dir) / CHECKSUMS_FILE
    if not record.is_file():
        raise FileNotFoundError(f"{record}: no such file (is {out_dir} a preprocess output?)")
    try:
        data = json.loads(record.read_text())
        if not isinstance(data["files"], dict) or not isinstance(data["input"], dict):
            raise TypeError("files and input must be objects")
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise InputFileError(record, f"malformed ({type(exc).__name__}: {exc})") from None
    return data


def checksums_problem(out_dir: str | Path) -> InputFileError | None:
    """What differs between a preprocess output and its checksum record, as an error naming
    the file (its message is one line): the record missing or malformed, a file missing, of
    another size or sha256, or a file the record does not list. None when they agree."""
    out = Path(out_dir)
    record = out / CHECKSUMS_FILE
    if not record.is_file():
        return InputFileError(record, "missing")
    try:
        files = read_checksums(out)["files"]
    except InputFileError as exc:
        return exc
    problem = checksum_problem(out, files, record)
    if problem is not None:
        return problem
    for path in sorted(out.rglob("*")):
        name = path.relative_to(out).as_posix()
        if path.is_file() and name not in files and name != CHECKSUMS_FILE:
            return InputFileError(path, f"not listed in {CHECKSUMS_FILE}")
    return None


def verify_checksums(out_dir: str | Path) -> None:
    """Raise :func:`checksums_problem` of a preprocess output, if any."""
    problem = checksums_problem(out_dir)
    if problem is not None:
        raise problem
