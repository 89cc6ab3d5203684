from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import yambda_data.preprocess as prep
from yambda_data import InputFileError, WriteError
from yambda_data.cli import main
from yambda_data.preprocess import (
    CHECKSUMS_FILE,
    ITEM_POPULARITY_FILE,
    SESSION_INDEX_DIR,
    SPLIT_META_FILE,
    TEST_EVENTS_DIR,
    TRAIN_SESSIONS_DIR,
    default_partitions,
    preprocess,
)
from yambda_data.schema import (
    EVENT_TYPE_DTYPE,
    EVENT_TYPES,
    MULTI_EVENT_SCHEMA,
    SchemaError,
    count_duplicate_rows,
    multi_event_path,
)
from yambda_data.split import SplitMeta, temporal_split

T_MAX = 1_000_000
TEST_START = T_MAX - 86_400
TRAIN_END = TEST_START - 1_800


def write_raw(root: Path, events: pl.DataFrame, size: str = "50m") -> Path:
    path = multi_event_path(root, size)
    path.parent.mkdir(parents=True, exist_ok=True)
    events.write_parquet(path)
    return root


def listens(rows: list[tuple[int, int]]) -> pl.DataFrame:
    """Listen events from (uid, timestamp) pairs, sorted; item_id = row number."""
    rows = sorted(rows)
    n = len(rows)
    return pl.DataFrame(
        {
            "uid": [r[0] for r in rows],
            "timestamp": [r[1] for r in rows],
            "item_id": [i % 7 for i in range(n)],
            "is_organic": [0] * n,
            "played_ratio_pct": [100] * n,
            "track_length_seconds": [200] * n,
            "event_type": ["listen"] * n,
        },
        schema=MULTI_EVENT_SCHEMA,
    )


def read_dir(out: Path, sub: str) -> pl.DataFrame:
    files = sorted((out / sub).glob("part-*.parquet"))
    return pl.concat([pl.read_parquet(f) for f in files])


def file_bytes(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def tiny_raw(tiny_data, tmp_path_factory) -> Path:
    return write_raw(tmp_path_factory.mktemp("raw"), tiny_data.events)


@pytest.fixture(scope="module")
def tiny_out(tiny_raw, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("prep") / "out"
    preprocess(tiny_raw, "50m", out, partitions=3)
    return out


def test_layout_and_agreement_with_temporal_split(tiny_data, tiny_out):
    out = tiny_out
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [
            CHECKSUMS_FILE,
            ITEM_POPULARITY_FILE,
            SPLIT_META_FILE,
            TRAIN_SESSIONS_DIR,
            TEST_EVENTS_DIR,
            SESSION_INDEX_DIR,
        ]
    )
    for sub in (TRAIN_SESSIONS_DIR, TEST_EVENTS_DIR, SESSION_INDEX_DIR):
        assert [p.name for p in sorted((out / sub).iterdir())] == [
            f"part-{k:05d}.parquet" for k in range(3)
        ]
    expected = temporal_split(tiny_data.events, size="50m")
    train = read_dir(out, TRAIN_SESSIONS_DIR)
    assert train.drop("session_id").equals(expected.train)
    assert read_dir(out, TEST_EVENTS_DIR).equals(expected.test)
    meta = SplitMeta.from_json(out / SPLIT_META_FILE)
    assert meta == expected.meta
    assert meta.num_sessions == train.select(pl.struct("uid", "session_id").n_unique()).item()
    assert meta.session_gap_seconds == 1_800


def test_split_boundaries_and_session_gaps(tmp_path):
    rows = [
        (1, 0),
        (1, 1_800),  # gap == 1,800: same session
        (1, 3_605),  # gap 1,805: new session
        (1, 3_605),  # tie: same session
        (1, TRAIN_END - 1_805),  # new session
        (1, TRAIN_END - 5),  # gap 1,800: same session, last train second
        (1, TRAIN_END),  # = test_start - 1,800: in the gap, dropped
        (1, TEST_START - 5),  # gap, dropped
        (1, TEST_START),  # first test second
        (1, T_MAX - 5),  # last test second
        (1, T_MAX),  # exactly t_max: dropped
        (2, 10),  # train-only user
        (3, TEST_START + 50),  # no train events: test dropped
    ]
    raw = write_raw(tmp_path / "raw", listens(rows))
    meta = preprocess(raw, "50m", tmp_path / "out", partitions=2)
    train = read_dir(tmp_path / "out", TRAIN_SESSIONS_DIR)
    test = read_dir(tmp_path / "out", TEST_EVENTS_DIR)
    assert train["uid"].to_list() == [1, 1, 1, 1, 1, 1, 2]
    assert train["timestamp"].to_list() == [
        0,
        1_800,
        3_605,
        3_605,
        TRAIN_END - 1_805,
        TRAIN_END - 5,
        10,
    ]
    assert train["session_id"].to_list() == [0, 0, 1, 1, 2, 2, 0]
    assert test["uid"].to_list() == [1, 1]
    assert test["timestamp"].to_list() == [TEST_START, T_MAX - 5]
    assert (meta.train_end, meta.test_start, meta.test_end) == (TRAIN_END, TEST_START, T_MAX)
    assert (meta.num_train_events, meta.num_test_events) == (7, 2)
    assert (meta.num_sessions, meta.num_users) == (4, 2)
    index = read_dir(tmp_path / "out", SESSION_INDEX_DIR).sort("uid")
    assert index.row(0) == (1, 0, 6, [0, 1, 2], [0, 2, 4], [2, 2, 2])


def test_a_partition_without_train_rows(tmp_path):
    # uids 1 and 2 fall in the first of two uid ranges, 9 and 10 in the second, which has
    # rows but none before train_end: its parts are empty, and its test rows are dropped.
    rows = [
        (1, 5),
        (1, 3_000),
        (1, TEST_START),
        (2, TRAIN_END - 5),
        (9, TEST_START + 5),
        (10, TRAIN_END),
        (10, T_MAX),
    ]
    events = listens(rows)
    raw = write_raw(tmp_path / "raw", events)
    out = tmp_path / "out"
    meta = preprocess(raw, "50m", out, partitions=2)
    expected = temporal_split(events, size="50m")
    assert meta == expected.meta
    assert read_dir(out, TRAIN_SESSIONS_DIR).drop("session_id").equals(expected.train)
    assert read_dir(out, TEST_EVENTS_DIR).equals(expected.test)
    for sub in (TRAIN_SESSIONS_DIR, TEST_EVENTS_DIR, SESSION_INDEX_DIR):
        assert pl.read_parquet(out / sub / "part-00001.parquet").height == 0
    index = read_dir(out, SESSION_INDEX_DIR)
    assert index.rows() == [(1, 0, 2, [0, 1], [0, 1], [1, 1]), (2, 2, 1, [0], [0], [1])]
    assert (meta.num_sessions, meta.num_users, meta.train_start) == (3, 2, 5)


def test_session_index_matches_train_sessions(tiny_out):
    for k in range(3):
        train = pl.read_parquet(tiny_out / TRAIN_SESSIONS_DIR / f"part-{k:05d}.parquet")
        index = pl.read_parquet(tiny_out / SESSION_INDEX_DIR / f"part-{k:05d}.parquet")
        assert index["num_events"].sum() == train.height
        uid = train["uid"].to_numpy()
        sid = train["session_id"].to_numpy()
        row = 0
        for u, start, n, ids, offsets, lengths in index.iter_rows():
            assert start == row
            assert ids == list(range(len(ids)))
            assert offsets == list(np.cumsum([0, *lengths[:-1]]))
            assert sum(lengths) == n
            for s, off, length in zip(ids, offsets, lengths, strict=True):
                lo, hi = start + off, start + off + length
                assert (uid[lo:hi] == u).all() and (sid[lo:hi] == s).all()
            row += n
        assert row == train.height


def test_item_popularity(tiny_data, tiny_out):
    popularity = np.load(tiny_out / ITEM_POPULARITY_FILE)
    assert popularity.dtype == np.int64
    assert popularity.size == int(tiny_data.events["item_id"].max()) + 1
    train = read_dir(tiny_out, TRAIN_SESSIONS_DIR)
    counts = train["item_id"].value_counts()
    expected = np.zeros_like(popularity)
    expected[counts["item_id"].to_numpy()] = counts["count"].to_numpy()
    assert np.array_equal(popularity, expected)


def test_partition_count_does_not_change_content(tiny_raw, tiny_out, tmp_path):
    one = tmp_path / "one"
    assert preprocess(tiny_raw, "50m", one, partitions=1) == SplitMeta.from_json(
        tiny_out / SPLIT_META_FILE
    )
    for sub in (TRAIN_SESSIONS_DIR, TEST_EVENTS_DIR):
        assert read_dir(one, sub).equals(read_dir(tiny_out, sub))
    # row_start is relative to the part file; the rest of the index is partition-free.
    a = read_dir(one, SESSION_INDEX_DIR).drop("row_start")
    b = read_dir(tiny_out, SESSION_INDEX_DIR).drop("row_start")
    assert a.equals(b)
    assert (one / ITEM_POPULARITY_FILE).read_bytes() == (
        tiny_out / ITEM_POPULARITY_FILE
    ).read_bytes()


def test_byte_identical_and_idempotent(tiny_raw, tiny_out, tmp_path):
    out = tmp_path / "out"
    preprocess(tiny_raw, "50m", out, partitions=3)
    first = file_bytes(out)
    assert first == file_bytes(tiny_out)
    preprocess(tiny_raw, "50m", out, partitions=3)  # re-run onto the existing output
    assert file_bytes(out) == first
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.lock", "out"]


def test_interrupted_run_keeps_previous_output(tiny_raw, tmp_path, monkeypatch):
    out = tmp_path / "out"
    preprocess(tiny_raw, "50m", out, partitions=2)
    before = file_bytes(out)
    real = prep._write_parquet
    calls = []

    def flaky(frame, path):
        calls.append(path)
        if len(calls) == 4:
            raise OSError("disk full (simulated)")
        real(frame, path)

    monkeypatch.setattr(prep, "_write_parquet", flaky)
    with pytest.raises(OSError, match="simulated"):
        preprocess(tiny_raw, "50m", out, partitions=3)
    assert len(calls) == 4
    assert file_bytes(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.lock", "out"]


def test_errors(tiny_raw, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"multi_event\.parquet"):
        preprocess(tmp_path / "nothing", "50m", tmp_path / "out")
    with pytest.raises(ValueError, match="partitions"):
        preprocess(tiny_raw, "50m", tmp_path / "out", partitions=0)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "precious.txt").write_text("keep")
    with pytest.raises(ValueError, match="refusing"):
        preprocess(tiny_raw, "50m", busy)
    assert (busy / "precious.txt").read_text() == "keep"
    bad = listens([(1, 0), (1, T_MAX)]).with_columns(pl.col("item_id").cast(pl.Int64))
    raw = write_raw(tmp_path / "bad", bad)
    with pytest.raises(SchemaError, match=r"multi_event\.parquet: column 'item_id'"):
        preprocess(raw, "50m", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def six_users() -> pl.DataFrame:
    """Listens of uids 1..6, four train events each plus one test event, sorted."""
    return listens([(u, t) for u in range(1, 7) for t in (0, 10, 20, 30, TEST_START)])


def six_users_with_ties() -> pl.DataFrame:
    """:func:`six_users` with a second event at uid 3's and uid 5's first timestamp, of another
    item: rows of equal (uid, timestamp) whose file order the output keeps."""
    events = six_users()
    ties = events.filter(pl.col("uid").is_in([3, 5]) & (pl.col("timestamp") == 0))
    ties = ties.with_columns(pl.col("item_id") + 100)
    return pl.concat([events, ties]).sort("uid", "timestamp", maintain_order=True)


def unsorted_orders(events: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """The rows of a sorted file in orders the schema does not allow; rows of one (uid,
    timestamp) keep their order."""
    blocks = {u: events.filter(pl.col("uid") == u) for u in range(1, 7)}
    n = events.height
    return {
        # uid 2's rows are split around uid 4's: every uid range is sorted on its own
        "split_uid": pl.concat(
            [blocks[1], blocks[2][:2], blocks[4], blocks[2][2:], blocks[3], blocks[5], blocks[6]]
        ),
        # uid 4 comes first: the rows of the low uids start late in the file
        "late_block": pl.concat([blocks[4], blocks[1], blocks[2], blocks[3], blocks[5], blocks[6]]),
        # every uid's rows from the latest to the earliest
        "reversed_times": pl.concat(
            [b.sort("timestamp", descending=True, maintain_order=True) for b in blocks.values()]
        ),
        # rows in random order; within a (uid, timestamp) the random keys are handed out in
        # the rows' order, so that ties stay in order
        "shuffled": events.with_columns(key=pl.Series(np.random.default_rng(3).random(n)))
        .with_columns(pl.col("key").sort().over("uid", "timestamp"))
        .sort("key")
        .drop("key"),
        # a log: every row in time order (rows of one timestamp in uid order)
        "time_ordered": events.sort("timestamp", maintain_order=True),
    }


@pytest.mark.parametrize("partitions", [None, 2, 3])
@pytest.mark.parametrize(
    "order", ["split_uid", "late_block", "reversed_times", "shuffled", "time_ordered"]
)
def test_unsorted_file_gives_the_sorted_files_output(tmp_path, partitions, order):
    """The reference sorts the events itself and so accepts a file in any order; so does
    preprocess, each uid range sorted by (uid, timestamp) as it is read, rows of equal keys in
    file order: the output is that of the sorted file, byte for byte."""
    events = six_users_with_ties()
    raw_sorted = write_raw(tmp_path / "sorted", events)
    raw = write_raw(tmp_path / "raw", unsorted_orders(events)[order])
    expected = preprocess(raw_sorted, "50m", tmp_path / "expected", partitions=partitions)
    assert preprocess(raw, "50m", tmp_path / "out", partitions=partitions) == expected
    assert file_bytes(tmp_path / "out") == file_bytes(tmp_path / "expected")


@pytest.mark.parametrize("order", ["late_block", "time_ordered"])
def test_unsorted_file_with_a_relative_out_dir(tmp_path, monkeypatch, order):
    """A file not in uid order is first spilled by uid range under the output's temporary
    directory; with a relative ``out_dir`` (and raw root) the ranges must be found there, not
    read as empty and the input taken for a file that changed while it was read."""
    events = six_users_with_ties()
    write_raw(tmp_path / "sorted", events)
    write_raw(tmp_path / "raw", unsorted_orders(events)[order])
    monkeypatch.chdir(tmp_path)
    expected = preprocess("sorted", "50m", "expected", partitions=2)
    assert preprocess("raw", "50m", "out", partitions=2) == expected
    assert file_bytes(tmp_path / "out") == file_bytes(tmp_path / "expected")
    argv = ["preprocess", "--raw", "raw", "--size", "50m", "--out", "cli-out", "--partitions", "2"]
    assert main(argv) == 0
    assert file_bytes(tmp_path / "cli-out") == file_bytes(tmp_path / "expected")


def test_a_categorical_event_type_becomes_the_enum_as_the_cast_gives_it():
    """The lookup of Categorical codes gives what polars' cast gives, whatever codes the
    process's categories gave the names (here other strings came first), and refuses a value
    that is no event type rather than mapping it to one."""
    pl.Series(["other", "names", "first", "undislike"], dtype=pl.Categorical)
    rng = np.random.default_rng(3)
    names = rng.choice(EVENT_TYPES, 1_001)
    stored = pl.Series("event_type", names, dtype=pl.Categorical)
    expected = stored.cast(EVENT_TYPE_DTYPE)
    assert prep._categorical_as_enum(stored).equals(expected)
    assert prep._categorical_as_enum(stored[:0]).equals(expected[:0])
    with pytest.raises(pl.exceptions.ComputeError):
        prep._categorical_as_enum(pl.Series("event_type", ["like", "play"], dtype=pl.Categorical))


@pytest.mark.parametrize("uid_span", [1_000, 70_000, 3_000_000_000])
def test_a_partition_in_time_order_is_sorted_as_the_general_sort_does(uid_span):
    """The time-ordered path (a stable radix sort by uid, one 16-bit digit or two) puts the rows
    in the order of the stable (uid, timestamp) sort, ties in file order."""
    rng = np.random.default_rng(uid_span)
    n = 5_000
    part = pl.DataFrame(
        {
            "uid": rng.integers(7, 7 + uid_span, n, dtype=np.uint32),
            "timestamp": np.sort(rng.integers(0, 400, n)).astype(np.uint32) * 5,
            "item_id": np.arange(n, dtype=np.uint32),  # tells the ties apart
        }
    )
    expected = part.sort("uid", "timestamp", maintain_order=True)
    assert prep._in_order(part).equals(expected)
    reversed_times = part.reverse()  # not in time order: the general sort
    assert prep._in_order(reversed_times).equals(
        reversed_times.sort("uid", "timestamp", maintain_order=True)
    )


def test_a_partition_in_uid_blocks_is_sorted_as_the_general_sort_does():
    """The uid-block path (one block per uid, each in time order, blocks in any order: the
    blocks are put in uid order) gives the stable (uid, timestamp) order, ties in file order;
    a uid in two blocks or a block out of time order takes the general sort, to the same
    result."""
    rng = np.random.default_rng(5)
    sizes = rng.integers(1, 40, 300)
    uids = rng.permutation(np.arange(10, 10 + 3 * len(sizes), 3))  # unique, shuffled
    part = pl.DataFrame(
        {
            "uid": np.repeat(uids, sizes).astype(np.uint32),
            "timestamp": np.concatenate(
                [np.sort(rng.integers(0, 30, k)) * 5 for k in sizes]
            ).astype(np.uint32),
            "item_id": np.arange(sizes.sum(), dtype=np.uint32),  # tells the ties apart
        }
    )
    new_uid = part["uid"].to_numpy()[1:] != part["uid"].to_numpy()[:-1]
    later = part["timestamp"].to_numpy()[1:] >= part["timestamp"].to_numpy()[:-1]
    assert prep._block_order(part["uid"].to_numpy(), new_uid, later) is not None
    second_block = pl.concat([part, part.head(3).with_columns(pl.col("item_id") + 10**6)])
    backwards = part.with_columns(pl.col("timestamp").reverse().over("uid"))
    for frame in (part, second_block, backwards):
        expected = frame.sort("uid", "timestamp", maintain_order=True)
        assert prep._in_order(frame).equals(expected)
    for frame in (second_block, backwards):
        uid, ts = frame["uid"].to_numpy(), frame["timestamp"].to_numpy()
        assert prep._block_order(uid, uid[1:] != uid[:-1], ts[1:] >= ts[:-1]) is None


def test_unsorted_file_with_empty_uid_ranges(tmp_path):
    """A file not in uid order whose uids leave uid ranges empty: those give empty parts, as
    they do for the sorted file."""
    events = six_users_with_ties()
    far = pl.when(pl.col("uid") > 3).then(pl.col("uid") + 100).otherwise(pl.col("uid"))
    events = events.with_columns(far.cast(pl.UInt32))
    raw_sorted = write_raw(tmp_path / "sorted", events)
    raw = write_raw(tmp_path / "raw", events.sort("uid", descending=True, maintain_order=True))
    expected = preprocess(raw_sorted, "50m", tmp_path / "expected", partitions=4)
    assert preprocess(raw, "50m", tmp_path / "out", partitions=4) == expected
    assert file_bytes(tmp_path / "out") == file_bytes(tmp_path / "expected")
    assert read_dir(tmp_path / "out", TRAIN_SESSIONS_DIR).height == expected.num_train_events
    assert pl.read_parquet(tmp_path / "out" / TRAIN_SESSIONS_DIR / "part-00001.parquet").is_empty()


@pytest.mark.parametrize(
    ("head_partitions", "read_again"),
    # 32 rows in three partitions of 10, 11 and 11 rows, so 11 rows kept per partition's worth:
    # a partition is taken from them when they go on past it (else it may go on after them),
    # or when they are the whole file.
    [(0, [0, 1, 2]), (1, [1, 2]), (2, [2]), (3, []), (prep._HEAD_PARTITIONS, [])],
)
def test_partitions_kept_from_the_check_pass_are_not_read_again(
    tmp_path, monkeypatch, head_partitions, read_again
):
    """The partitions that lie whole in the rows the check pass kept are taken from them, the
    others read from the file; the output is the same byte for byte."""
    raw = write_raw(tmp_path / "raw", six_users_with_ties())
    monkeypatch.setattr(prep, "_HEAD_PARTITIONS", 0)
    expected = preprocess(raw, "50m", tmp_path / "expected", partitions=3)
    read = prep._read_partition
    reads = []

    def read_partition(scan, path, spill, edges, k):
        reads.append(k)
        return read(scan, path, spill, edges, k)

    monkeypatch.setattr(prep, "_HEAD_PARTITIONS", head_partitions)
    monkeypatch.setattr(prep, "_read_partition", read_partition)
    assert preprocess(raw, "50m", tmp_path / "out", partitions=3) == expected
    assert reads == read_again
    assert file_bytes(tmp_path / "out") == file_bytes(tmp_path / "expected")


def test_partitions_in_head_cut_at_the_edges_of_a_32_bit_uid_range():
    """The last edge of a range that ends at the largest uid lies past every uint32 value."""
    top = 2**32 - 1
    head = pl.DataFrame({"uid": [0, 5, 5, top - 1, top]}, schema={"uid": pl.UInt32})
    parts = prep._partitions_in_head(head, [0, 5, top, top + 1], num_rows=5)
    assert {k: part["uid"].to_list() for k, part in parts.items()} == {
        0: [0],
        1: [5, 5, top - 1],
        2: [top],
    }
    # Not the whole file: the range that reaches the last kept row may go on after it.
    parts = prep._partitions_in_head(head, [0, 5, top, top + 1], num_rows=6)
    assert sorted(parts) == [0, 1]
    assert prep._partitions_in_head(None, [0, 5], num_rows=5) == {}


@pytest.mark.parametrize("head_partitions", [0, prep._HEAD_PARTITIONS])
@pytest.mark.parametrize("change", ["fewer_rows", "same_rows"])
def test_file_changed_after_the_checks_is_refused(tmp_path, monkeypatch, change, head_partitions):
    """The guard of a file that changes after it was checked (simulated by rewriting it after
    the checks): the uid ranges must hold the rows counted, and the file must be the same
    (device, inode, size, mtime), even when the new rows are as many and as valid; and so
    whether the partitions are read again or were kept from the check pass."""
    monkeypatch.setattr(prep, "_HEAD_PARTITIONS", head_partitions)
    events = six_users()
    raw = write_raw(tmp_path / "raw", events)
    check = prep.check_multi_event_file_keeping_head

    def check_then_change(path, *args, **kwargs):
        row = check(path, *args, **kwargs)
        if change == "fewer_rows":
            events.head(events.height - 1).write_parquet(path)
        else:
            events.with_columns(pl.col("item_id") + 1).write_parquet(path)
            os.utime(path, ns=(0, 0))
        return row

    monkeypatch.setattr(prep, "check_multi_event_file_keeping_head", check_then_change)
    with pytest.raises(InputFileError, match="changed while it was read") as info:
        preprocess(raw, "50m", tmp_path / "out", partitions=2)
    assert info.value.path == multi_event_path(raw, "50m")
    # partitions [1, 4) and [4, 7): the change is seen after the first
    assert "checked with 30 rows, the uid ranges read 15 so far" in str(info.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("head_partitions", [0, 1, prep._HEAD_PARTITIONS])
@pytest.mark.parametrize(
    ("column", "value", "problem"),
    [
        ("timestamp", 12, "not a multiple of 5"),
        ("played_ratio_pct", None, "null in a listen event"),
    ],
)
def test_bad_row_in_last_partition_reports_file_row(
    tmp_path, monkeypatch, column, value, problem, head_partitions
):
    """Whether the row lies in the rows the check pass keeps or after them (one partition's
    worth, 10 rows, keeps rows 0 to 9 only)."""
    monkeypatch.setattr(prep, "_HEAD_PARTITIONS", head_partitions)
    events = six_users()
    row = 27  # uid 6's third row (timestamp 20): in the last of three partitions
    assert events["uid"][row] == 6 and events["timestamp"][row] == 20
    values = events[column].to_list()
    values[row] = value
    bad = events.with_columns(pl.Series(column, values, dtype=MULTI_EVENT_SCHEMA[column]))
    raw = write_raw(tmp_path / "raw", bad)
    with pytest.raises(SchemaError) as info:
        preprocess(raw, "50m", tmp_path / "out", partitions=3)
    err = info.value
    assert err.source.endswith("multi_event.parquet") and err.column == column
    assert problem in str(err) and f"(first at row {row})" in str(err)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("head_partitions", [0, 1, prep._HEAD_PARTITIONS])
def test_null_uid_reports_file_row(tmp_path, monkeypatch, head_partitions):
    monkeypatch.setattr(prep, "_HEAD_PARTITIONS", head_partitions)
    events = six_users()
    uids = events["uid"].to_list()
    uids[13] = None
    raw = write_raw(tmp_path / "raw", events.with_columns(pl.Series("uid", uids, pl.UInt32)))
    with pytest.raises(SchemaError, match=r"column 'uid': null value \(first at row 13\)"):
        preprocess(raw, "50m", tmp_path / "out", partitions=2)


def test_no_train_event_is_rejected_before_writing(tmp_path):
    raw = write_raw(tmp_path / "raw", listens([(1, TRAIN_END), (2, T_MAX)]))
    with pytest.raises(ValueError, match=f"no event before train_end={TRAIN_END}"):
        preprocess(raw, "50m", tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw"]


def test_empty_file_is_rejected(tmp_path):
    raw = write_raw(tmp_path / "raw", listens([]))
    with pytest.raises(SchemaError, match="no events"):
        preprocess(raw, "50m", tmp_path / "out")


def test_default_partitions():
    assert default_partitions(0) == 1
    assert default_partitions(5_000_000) == 1
    assert default_partitions(5_000_001) == 2


def test_cli(tiny_raw, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["preprocess", "--raw", str(tiny_raw), "--size", "50m", "--out", str(out)]
    assert main([*argv, "--partitions", "2"]) == 0
    assert "sessions" in capsys.readouterr().out
    assert (out / SPLIT_META_FILE).is_file()
    missing = ["preprocess", "--raw", str(tmp_path / "none"), "--size", "50m", "--out", str(out)]
    assert main(missing) == 2
    err = capsys.readouterr().err
    assert "yambda-data preprocess: error" in err and "--raw" in err and "no such directory" in err
    assert main([*missing[:2], str(tiny_raw), "--size", "5b", *missing[5:]]) == 2
    assert "multi_event.parquet: no such file" in capsys.readouterr().err


def test_leftovers_of_a_killed_run_are_removed(tiny_raw, tmp_path):
    stale = tmp_path / ".out.tmp-killed"
    (stale / "train_sessions").mkdir(parents=True)
    (stale / "train_sessions" / "part-00000.parquet").write_bytes(b"half")
    preprocess(tiny_raw, "50m", tmp_path / "out", partitions=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.lock", "out"]


@pytest.mark.slow
def test_sigterm_during_preprocessing_removes_its_temporary_output(tmp_path):
    """SIGTERM while `yambda-data preprocess` writes: status 143, one line, and no
    `.OUT.tmp-*` left beside the output."""
    import signal
    import subprocess
    import sys
    import time

    from yambda_data.synth import SynthConfig, synthesize

    raw = tmp_path / "raw"
    synthesize(raw, SynthConfig(users=3000, median_events_per_user=200, seed=1))
    command = [sys.executable, "-m", "yambda_data", "preprocess", "--raw", str(raw)]
    command += ["--size", "50m", "--out", str(tmp_path / "out"), "--partitions", "8"]
    child = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not list(tmp_path.glob(".out.tmp-*")) and child.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=300)
    if child.returncode == 0:
        pytest.skip("the preprocessing ended before the signal")
    assert child.returncode == 143, err
    assert err.strip().splitlines() == ["yambda-data preprocess: terminated"]
    assert not list(tmp_path.glob(".out.tmp-*")) and not (tmp_path / "out").exists()


# hostile inputs and faults: nothing a user has is lost, every failure says what and where ----


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` (directories as None) with its bytes."""
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("value", [2, 255])
def test_is_organic_other_than_0_or_1_is_rejected_before_writing(tmp_path, capsys, value):
    events = six_users()
    organic = events["is_organic"].to_list()
    organic[17] = value
    raw = write_raw(
        tmp_path / "raw", events.with_columns(pl.Series("is_organic", organic, pl.UInt8))
    )
    path = multi_event_path(raw, "50m")
    with pytest.raises(SchemaError) as info:
        preprocess(raw, "50m", tmp_path / "new" / "out", partitions=3)
    err = info.value
    assert err.source == str(path) and err.column == "is_organic"
    assert f"value {value} is not 0 or 1 (first at row 17)" in str(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw"]  # not even the lock file

    # a previous output in --out stays exactly as it was; the CLI says it in one line
    out = tmp_path / "out"
    preprocess(write_raw(tmp_path / "good", events), "50m", out, partitions=2)
    before = tree(tmp_path)
    argv = ["preprocess", "--raw", str(raw), "--size", "50m", "--out", str(out)]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err == (
        f"yambda-data preprocess: error: {path}: column 'is_organic': value {value} is not 0 "
        "or 1 (first at row 17)\n"
    )
    assert tree(tmp_path) == before


@pytest.mark.parametrize(("column", "value"), [("item_id", 2**31), ("uid", 2**32 - 2)])
def test_an_id_that_would_size_a_huge_array_is_refused_before_writing(tmp_path, column, value):
    """An item_id of 2^31 would make a 16 GiB item_popularity.npy, a uid near 2^32 a table as
    large: refused naming the file, the column, the row and the value, with nothing created."""
    events = six_users()
    ids = events[column].to_list()
    ids[-1] = value  # the last row: the file stays in uid order
    raw = write_raw(
        tmp_path / "raw", events.with_columns(pl.Series(column, ids, events[column].dtype))
    )
    path = multi_event_path(raw, "50m")
    with pytest.raises(SchemaError) as info:
        preprocess(raw, "50m", tmp_path / "out", partitions=2)
    assert info.value.source == str(path) and info.value.column == column
    assert f"id {value:,} is above 134,217,727, the largest accepted" in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw"]


@pytest.mark.parametrize(
    "failure",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        # how polars reports it: no errno attribute, the number in the message
        pl.exceptions.ComputeError(
            "parquet: File out of specification: underlying IO error: No space left on device "
            "(os error 28)"
        ),
    ],
    ids=["OSError", "polars"],
)
def test_no_space_while_writing_is_a_write_error(tiny_raw, tmp_path, monkeypatch, capsys, failure):
    out = tmp_path / "out"
    preprocess(tiny_raw, "50m", out, partitions=2)
    before = tree(tmp_path)
    real = prep._write_parquet
    calls = []

    def full(frame, path):
        calls.append(path)
        if len(calls) == 2:
            raise failure
        real(frame, path)

    monkeypatch.setattr(prep, "_write_parquet", full)
    with pytest.raises(WriteError) as info:
        preprocess(tiny_raw, "50m", out, partitions=3)
    err = info.value
    assert err.errno == errno.ENOSPC and err.output == out and err.filename == str(calls[1])
    assert err.free_bytes is not None and err.free_bytes > 0
    assert str(err).startswith(f"writing {out} (at {calls[1]}): No space left on device")
    assert f"bytes free in {tmp_path}" in str(err)
    assert tree(tmp_path) == before  # the previous output is untouched, nothing left over

    calls.clear()
    argv = ["preprocess", "--raw", str(tiny_raw), "--size", "50m", "--out", str(out)]
    assert main([*argv, "--partitions", "3"]) == 2
    line = capsys.readouterr().err
    assert line.startswith(f"yambda-data preprocess: error: writing {out} (at ")
    assert "No space left on device [errno 28]" in line and f"bytes free in {tmp_path}" in line
    assert "reading" not in line and line.count("\n") == 1
    assert tree(tmp_path) == before


def test_no_space_on_a_full_file_system(tiny_raw, tmp_path):
    """A real ENOSPC: a 48 KiB tmpfs mounted in a user and mount namespace of its own (no
    root needed where unprivileged user namespaces are allowed)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1) to mount a private tmpfs")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    probe = subprocess.run(
        [unshare, "--user", "--map-root-user", "--mount", "sh", "-c",
         'mount -t tmpfs -o size=48k tmpfs "$1"', "sh", str(mnt)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs in a user namespace here: {probe.stderr.strip()}")
    script = (
        'mount -t tmpfs -o size=48k tmpfs "$1" && mkdir "$1/out" && '
        'echo previous > "$1/out/split_meta.json" && '
        '"$2" -m yambda_data preprocess --raw "$3" --size 50m --out "$1/out"; status=$?; '
        'cat "$1/out/split_meta.json"; ls -A "$1"; exit $status'
    )
    done = subprocess.run(
        [unshare, "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh",
         str(mnt), sys.executable, str(tiny_raw)],
        capture_output=True, text=True, timeout=300,
        env=os.environ | {"DLRMV4_DEBUG": "0"},
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(f"yambda-data preprocess: error: writing {mnt}/out (at ")
    # (polars reports ENOSPC, numpy a short write without an errno, whichever writes first)
    assert re.search(
        r"No space left on device \[errno 28\]|\(the file system is full\)", done.stderr
    )
    assert (
        re.search(rf"; [\d,]+ bytes free in {re.escape(str(mnt))}\n$", done.stderr)
        and done.stderr.count("\n") == 1
    )
    # the previous output is kept and no temporary directory is left
    assert done.stdout.split() == ["previous", ".out.lock", "out"]


def test_truncated_input_names_the_file(tiny_raw, tmp_path, capsys):
    raw = tmp_path / "raw"
    shutil.copytree(tiny_raw, raw)
    path = multi_event_path(raw, "50m")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(InputFileError) as info:
        preprocess(raw, "50m", tmp_path / "out")
    assert info.value.path == path
    argv = ["preprocess", "--raw", str(raw), "--size", "50m", "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    line = capsys.readouterr().err
    assert line.startswith(f"yambda-data preprocess: error: {path}: cannot read it: ")
    assert line.count("\n") == 1 and f"reading {raw}:" not in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw"]


DAMAGED_BYTE = 112
"""A byte of the first dictionary-encoded data page of the tiny dataset's file (written as
below), found by changing each byte of the file in turn: the parquet reader panics on it."""


def test_a_damaged_data_page_is_one_line_naming_the_file(tiny_data, tmp_path):
    raw = tmp_path / "raw"
    path = multi_event_path(raw, "50m")
    path.parent.mkdir(parents=True)
    tiny_data.events.write_parquet(path, compression="zstd", statistics=True)
    data = bytearray(path.read_bytes())
    data[DAMAGED_BYTE] = (data[DAMAGED_BYTE] + 1) % 256
    path.write_bytes(bytes(data))
    # In a child process: other damaged bytes can make the reader abort its process.
    argv = [sys.executable, "-m", "yambda_data", "preprocess", "--raw", str(raw), "--size", "50m"]
    done = subprocess.run(
        [*argv, "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RUST_BACKTRACE": "0"},
    )
    assert done.returncode == 2, done.stderr
    # (the reader's own panic messages come first, from native code)
    assert done.stderr.splitlines()[-1] == (
        f"yambda-data preprocess: error: {path}: cannot read it: the parquet reader failed: "
        "internal error: entered unreachable code: invalid num_bits 174"
    )
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw"]


def test_reading_turns_a_panic_or_a_memory_error_into_one_line_naming_the_file():
    from yambda_data._io import reading

    with pytest.raises(InputFileError) as info, reading("raw/x.parquet"):
        raise MemoryError("Unable to allocate 30.5 GiB for an array with shape (4093640726,)")
    assert str(info.value) == (
        "raw/x.parquet: out of memory while reading it (Unable to allocate 30.5 GiB for an "
        "array with shape (4093640726,)); is the file damaged?"
    )
    nested = (
        'called `Result::unwrap()` on an `Err` value: JoinError::Panic(Id(9), "called '
        '`Result::unwrap()` on an `Err` value: JoinError::Panic(Id(8), \\"assertion failed: '
        'offset + length <= self.length\\", ...)", ...)'
    )
    with pytest.raises(InputFileError) as info, reading("raw/x.parquet"):
        raise pl.exceptions.PanicException(nested)
    assert str(info.value) == (
        "raw/x.parquet: cannot read it: the parquet reader failed: assertion failed: "
        "offset + length <= self.length"
    )
    assert info.value.path == Path("raw/x.parquet")


# checksums, outputs apart from the inputs, duplicated rows ------------------------------------


def test_the_checksum_record_names_what_differs(tiny_raw, tiny_out, tmp_path):
    from yambda_data.preprocess import checksums_problem, read_checksums

    record = read_checksums(tiny_out)
    files = sorted(p.relative_to(tiny_out).as_posix() for p in tiny_out.rglob("*") if p.is_file())
    assert sorted(record["files"]) == [name for name in files if name != CHECKSUMS_FILE]
    assert (
        record["input"]["rows"]
        == pl.scan_parquet(multi_event_path(tiny_raw, "50m")).select(pl.len()).collect().item()
    )
    assert checksums_problem(tiny_out) is None

    out = tmp_path / "out"
    shutil.copytree(tiny_out, out)
    part = out / TEST_EVENTS_DIR / "part-00001.parquet"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] = (data[len(data) // 2] + 1) % 256
    part.write_bytes(bytes(data))
    assert str(checksums_problem(out)) == f"{part}: sha256 differs from {CHECKSUMS_FILE}"
    part.unlink()
    assert str(checksums_problem(out)) == f"{part}: missing (listed in {CHECKSUMS_FILE})"
    shutil.copy(tiny_out / TEST_EVENTS_DIR / "part-00001.parquet", part)
    extra = out / TRAIN_SESSIONS_DIR / "part-00003.parquet"
    extra.write_bytes(b"PAR1")
    assert str(checksums_problem(out)) == f"{extra}: not listed in {CHECKSUMS_FILE}"
    extra.unlink()
    (out / CHECKSUMS_FILE).unlink()
    assert str(checksums_problem(out)) == f"{out / CHECKSUMS_FILE}: missing"
    assert main(["verify", str(out)]) == 1


def test_verify_checks_the_checksums(tiny_out, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(tiny_out, out)
    assert main(["verify", str(out)]) == 0
    assert f"every file with {CHECKSUMS_FILE}" in capsys.readouterr().out
    # a byte of a part changed: the row counts still agree, the checksum does not
    part = out / TRAIN_SESSIONS_DIR / "part-00000.parquet"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] = (data[len(data) // 2] + 1) % 256
    part.write_bytes(bytes(data))
    assert main(["verify", str(out)]) == 1
    err = capsys.readouterr().err
    assert err == f"yambda-data verify: FAILED: {part}: sha256 differs from {CHECKSUMS_FILE}\n"


def test_an_output_never_is_holds_or_lies_inside_its_input(tiny_raw, tmp_path, capsys):
    nest = tmp_path / "nest"
    shutil.copytree(tiny_raw, nest / "raw")
    raw_file = multi_event_path(nest / "raw", "50m")
    before = tree(tmp_path)
    cases = [
        (nest, "holds", raw_file),
        (nest / "raw", "holds", raw_file),
        (raw_file.parent, "holds", raw_file),
        (raw_file, "is", raw_file),
        (raw_file / "out", "lies inside", raw_file),
    ]
    for out, relation, what in cases:
        with pytest.raises(ValueError) as refused:
            preprocess(nest / "raw", "50m", out)
        assert str(refused.value).startswith(f"{out}: the output {relation} the input {what};")
        assert tree(tmp_path) == before
    assert (
        main(["preprocess", "--raw", str(nest / "raw"), "--size", "50m", "--out", str(nest)]) == 2
    )
    err = capsys.readouterr().err
    assert err == (
        f"yambda-data preprocess: error: {nest}: the output holds the input {raw_file}; "
        "refusing to write it (choose an output apart from the inputs)\n"
    )
    assert tree(tmp_path) == before
    # through a symbolic link: the resolved paths are compared
    (tmp_path / "link").symlink_to(nest)
    with pytest.raises(ValueError, match="the output holds the input"):
        preprocess(nest / "raw", "50m", tmp_path / "link")
    # inside the raw root, beside the raw files, is fine
    preprocess(nest / "raw", "50m", nest / "raw" / "prepared" / "pre")


def test_an_earlier_output_holding_other_files_is_never_replaced(tiny_raw, tmp_path):
    """The reported loss: an earlier output that the raw data was then moved into."""
    nest = tmp_path / "nest"
    preprocess(tiny_raw, "50m", nest, partitions=2)
    shutil.copytree(tiny_raw, nest / "raw")
    before = tree(tmp_path)
    with pytest.raises(ValueError, match="the output holds the input"):
        preprocess(nest / "raw", "50m", nest)
    with pytest.raises(ValueError, match=rf"{re.escape(str(nest))}: holds raw, which preprocess"):
        preprocess(tiny_raw, "50m", nest)
    shutil.rmtree(nest / "raw")
    (nest / TRAIN_SESSIONS_DIR / "mine.parquet").write_bytes(b"mine")
    with pytest.raises(ValueError, match=f"holds {TRAIN_SESSIONS_DIR}/mine.parquet, which"):
        preprocess(tiny_raw, "50m", nest)
    assert (nest / TRAIN_SESSIONS_DIR / "mine.parquet").read_bytes() == b"mine"
    assert tree(tmp_path) == {k: v for k, v in before.items() if not k.startswith("nest/raw")} | {
        f"nest/{TRAIN_SESSIONS_DIR}/mine.parquet": b"mine"
    }


def _every_row_twice(events: pl.DataFrame) -> pl.DataFrame:
    """Each row twice; at a shared (uid, timestamp) the copies interleave (listen, like,
    listen, like), so a repeat is not always next to its first row."""
    return pl.concat([events, events]).sort("uid", "timestamp", maintain_order=True)


def test_duplicated_rows_are_counted_and_kept(tiny_data, tmp_path, capsys):
    events = tiny_data.events
    doubled = _every_row_twice(events)
    at_one_time = doubled.filter(pl.struct("uid", "timestamp").is_duplicated())
    assert not at_one_time.equals(at_one_time.unique(maintain_order=True))  # not adjacent
    raw = write_raw(tmp_path / "raw", doubled)
    said: list[str] = []
    meta = preprocess(raw, "50m", tmp_path / "out", partitions=3, progress=said.append)
    repeats = doubled.height - events.unique().height
    share = 100 * repeats / doubled.height
    src = multi_event_path(raw, "50m")
    assert said == [
        f"warning: {src}: {repeats:,} rows ({share:.1f}%) repeat an earlier row in every column"
    ]
    assert meta.num_train_events == 2 * temporal_split(events).meta.num_train_events
    record = json.loads((tmp_path / "out" / CHECKSUMS_FILE).read_text())
    assert record["input"] == {"rows": doubled.height, "duplicate_rows": repeats}

    argv = ["preprocess", "--raw", str(raw), "--size", "50m", "--out", str(tmp_path / "o2")]
    assert main(argv) == 0
    assert f"warning: {src}: {repeats:,} rows (50.0%) repeat" in capsys.readouterr().err
    tiny_data.artist_item_mapping.write_parquet(raw / "artist_item_mapping.parquet")
    tiny_data.album_item_mapping.write_parquet(raw / "album_item_mapping.parquet")
    assert main(["validate", "--root", str(raw), "--size", "50m"]) == 0
    captured = capsys.readouterr()
    assert captured.err == (
        f"warning: {src}: {repeats:,} rows (50.0%) repeat an earlier row in every column\n"
    )
    assert "ok:" in captured.out


def test_a_few_repeated_rows_are_counted_without_a_warning(tiny_data, tmp_path, capsys):
    """Below 0.1% of the file, repeats are what real logs hold: validate counts them, and
    neither validate nor preprocess warns."""
    events = tiny_data.events
    few = pl.concat([events, events.head(1)]).sort("uid", "timestamp", maintain_order=True)
    assert 1 / few.height < 0.001
    raw = write_raw(tmp_path / "raw", few)
    tiny_data.artist_item_mapping.write_parquet(raw / "artist_item_mapping.parquet")
    tiny_data.album_item_mapping.write_parquet(raw / "album_item_mapping.parquet")
    said: list[str] = []
    preprocess(raw, "50m", tmp_path / "out", progress=said.append)
    assert said == []
    assert json.loads((tmp_path / "out" / CHECKSUMS_FILE).read_text())["input"] == {
        "rows": few.height,
        "duplicate_rows": 1,
    }
    assert main(["validate", "--root", str(raw), "--size", "50m"]) == 0
    captured = capsys.readouterr()
    assert "  1 rows repeat an earlier row in every column" in captured.out
    assert captured.err == ""


def _repeated_rows(frame: pl.DataFrame) -> int:
    """preprocess's count of the repeated rows of ``frame``, given its uid starts as the split
    gives them."""
    return prep._repeated_rows(frame, np.flatnonzero(prep._run_starts(frame["uid"].to_numpy())))


def test_repeated_rows_agree_with_the_reference_count():
    """The run-by-run count of repeated rows equals count_duplicate_rows, on random sorted
    frames dense in repeats, with nulls, and with runs of equal (uid, timestamp) longer than
    the lags it compares."""
    rng = np.random.default_rng(0)
    for case in range(200):
        n = int(rng.integers(1, 120))

        def small(high, null_share=0.0, n=n):
            values = pl.Series(rng.integers(0, high, n))
            return values.set(pl.Series(rng.random(n) < null_share), None)

        frame = pl.DataFrame(
            {
                "uid": small(3),
                "timestamp": small(3) * 5,
                "item_id": small(3),
                "is_organic": small(2),
                "played_ratio_pct": small(2, 0.3),
                "track_length_seconds": small(2, 0.3),
                "event_type": rng.choice(["listen", "like"], n),
            },
            schema=MULTI_EVENT_SCHEMA,
        )
        if case % 3 == 0:  # one run of every row
            frame = frame.with_columns(uid=pl.lit(1, pl.UInt32), timestamp=pl.lit(5, pl.UInt32))
        frame = frame.sort("uid", "timestamp", maintain_order=True)
        assert _repeated_rows(frame) == count_duplicate_rows(frame), case


def test_repeats_in_long_runs_agree_whether_packed_in_one_integer_or_not():
    """Runs longer than the lags compared are counted by one sort of the rows packed in mixed
    radix, or, when the columns' ranges do not fit 64 bits, by a sort on every column: both
    give count_duplicate_rows."""
    rng = np.random.default_rng(1)
    n = 400
    base = pl.DataFrame(
        {
            "uid": np.repeat([3, 9], n // 2),
            "timestamp": np.full(n, 10),
            "item_id": rng.integers(0, 6, n),
            "is_organic": rng.integers(0, 2, n),
            "played_ratio_pct": pl.Series(rng.integers(0, 3, n)).set(
                pl.Series(rng.random(n) < 0.3), None
            ),
            "track_length_seconds": rng.integers(0, 2, n),
            "event_type": rng.choice(["listen", "like"], n),
        },
        schema=MULTI_EVENT_SCHEMA,
    )
    wide = base.with_columns(  # ranges of about 2**32 each: no room left in 64 bits
        item_id=pl.col("item_id") * (2**32 // 6),
        track_length_seconds=pl.col("track_length_seconds") * (2**32 - 1),
    )
    assert prep._mixed_radix([base[c].to_numpy() for c in ("uid", "item_id")]) is not None
    assert (
        prep._mixed_radix([wide[c].to_numpy() for c in ("item_id", "track_length_seconds")]) is None
    )
    for frame in (base, wide):
        expected = count_duplicate_rows(frame)
        assert expected > n // 4  # dense in repeats, most of them far from their first row
        assert _repeated_rows(frame) == expected
