from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from yambda_data.schema import EVENT_TYPES, MULTI_EVENT_SCHEMA
from yambda_data.split import (
    GAP_SECONDS,
    TEST_SECONDS,
    SplitMeta,
    busiest_window_listens,
    temporal_split,
)

T_MAX = 1_000_000
TEST_START = T_MAX - 86_400
TRAIN_END = TEST_START - 1_800


def frame(rows: list[tuple[int, int]]) -> pl.DataFrame:
    """Listen events from (uid, timestamp) pairs, sorted as multi_event is."""
    rows = sorted(rows)
    n = len(rows)
    return pl.DataFrame(
        {
            "uid": [r[0] for r in rows],
            "timestamp": [r[1] for r in rows],
            "item_id": list(range(n)),
            "is_organic": [0] * n,
            "played_ratio_pct": [100] * n,
            "track_length_seconds": [200] * n,
            "event_type": ["listen"] * n,
        },
        schema=MULTI_EVENT_SCHEMA,
    )


def test_boundaries():
    events = frame(
        [
            (1, 1_000),  # train
            (1, TRAIN_END - 5),  # last train second
            (1, TRAIN_END),  # in the gap: dropped
            (1, TEST_START - 5),  # in the gap: dropped
            (1, TEST_START),  # first test second
            (1, T_MAX - 5),  # last test second
            (1, T_MAX),  # exactly t_max: dropped
            (2, 500),  # user 2: train only
            (3, TEST_START + 100),  # user 3: no train event, test dropped
            (3, TRAIN_END),  # user 3: gap only
        ]
    )
    result = temporal_split(events, size="50m")
    assert result.train["timestamp"].to_list() == [1_000, TRAIN_END - 5, 500]
    assert result.train["uid"].to_list() == [1, 1, 2]
    assert result.test["timestamp"].to_list() == [TEST_START, T_MAX - 5]
    assert result.test["uid"].to_list() == [1, 1]
    assert result.train.schema == events.schema and result.test.schema == events.schema
    meta = result.meta
    assert meta.size == "50m"
    assert (meta.t_min, meta.t_max) == (500, T_MAX)
    assert meta.train_start == 500 and meta.train_end == TRAIN_END
    assert meta.test_start == TEST_START and meta.test_end == T_MAX
    assert meta.gap_minutes == 30 and meta.test_days == 1
    assert meta.train_days == pytest.approx((TRAIN_END - 500) / 86_400)
    assert (meta.num_train_events, meta.num_test_events, meta.num_users) == (3, 2, 2)


def test_lazy_input_and_order_kept():
    events = frame([(u, t) for u in (5, 9) for t in (0, 5, 5, 10, T_MAX - 10, T_MAX)])
    eager = temporal_split(events)
    lazy = temporal_split(events.lazy())
    assert eager.train.equals(lazy.train) and eager.test.equals(lazy.test)
    assert eager.meta == lazy.meta
    assert eager.train["item_id"].to_list() == [0, 1, 2, 3, 6, 7, 8, 9]


def test_small_t_max_does_not_underflow():
    events = frame([(1, 0), (1, 5), (1, 100)])
    with pytest.raises(ValueError, match="no event before train_end"):
        temporal_split(events)


def test_empty():
    with pytest.raises(ValueError, match="no events"):
        temporal_split(frame([]))


def test_meta_json_round_trip(tmp_path: Path):
    meta = temporal_split(frame([(1, 0), (1, T_MAX - 50), (1, T_MAX)])).meta
    path = meta.to_json(tmp_path / "sub" / "split_meta.json")
    data = json.loads(path.read_text())
    assert data["num_test_events"] == 1 and data["t_max"] == T_MAX
    assert set(data) == {
        "size",
        "t_min",
        "t_max",
        "train_start",
        "train_end",
        "test_start",
        "test_end",
        "train_days",
        "gap_minutes",
        "test_days",
        "session_gap_seconds",
        "num_train_events",
        "num_test_events",
        "num_sessions",
        "num_users",
    }
    assert SplitMeta.from_json(path) == meta
    assert [p.name for p in path.parent.iterdir()] == ["split_meta.json"]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 5),
            st.integers(0, 60_000).map(lambda t: 5 * t),
        ),
        min_size=1,
        max_size=60,
    )
)
def test_split_invariants(rows):
    events = frame(rows)
    t_max = max(t for _, t in rows)
    if not any(t < t_max - TEST_SECONDS - GAP_SECONDS for _, t in rows):
        with pytest.raises(ValueError):
            temporal_split(events)
        return
    result = temporal_split(events)
    train, test, meta = result.train, result.test, result.meta
    train_ts = train["timestamp"].to_numpy().astype(np.int64)
    test_ts = test["timestamp"].to_numpy().astype(np.int64)
    assert meta.t_max == t_max
    assert (train_ts < meta.train_end).all()
    assert ((test_ts >= meta.test_start) & (test_ts < meta.test_end)).all()
    assert meta.test_start - meta.train_end == GAP_SECONDS
    assert meta.test_end - meta.test_start == TEST_SECONDS
    assert set(test["uid"].to_list()) <= set(train["uid"].to_list())
    # Nothing is lost but the gap, t_max itself and test rows of users without train rows.
    all_ts = np.array([t for _, t in rows])
    assert train.height == int((all_ts < meta.train_end).sum())
    train_users = set(train["uid"].to_list())
    expected_test = sum(1 for u, t in rows if meta.test_start <= t < t_max and u in train_users)
    assert test.height == expected_test
    assert meta.num_users == len(train_users)
    assert meta.num_train_events == train.height and meta.num_test_events == test.height
    # Row order is the input's (sorted by uid, timestamp).
    assert train.sort(["uid", "timestamp"], maintain_order=True).equals(train)


def test_split_meta_from_json_names_the_file_and_field(tmp_path):
    import json

    from yambda_data.split import SplitMeta

    path = tmp_path / "split_meta.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match=r"split_meta\.json: not valid JSON"):
        SplitMeta.from_json(path)
    path.write_text(json.dumps({"size": "50m", "t_min": 0}))
    with pytest.raises(ValueError, match=r"split_meta\.json: missing field\(s\) \[.*'t_max'"):
        SplitMeta.from_json(path)


# busiest_window_listens: the bound on a window's train anchors, from the raw events --------


def _train_listen_times(events: pl.DataFrame, bin_width: int = 1) -> np.ndarray:
    """The listens before train_end (rounded up to a multiple of ``bin_width``), sorted."""
    ts = events["timestamp"].cast(pl.Int64).to_numpy()
    listen = (events["event_type"].cast(pl.String) == "listen").to_numpy()
    train_end = ts.max() - TEST_SECONDS - GAP_SECONDS
    end = -(-train_end // bin_width) * bin_width
    return np.sort(ts[listen & (ts < end)])


def _sliding_most(times: np.ndarray, seconds: int) -> int:
    """The most of ``times`` in any [t, t + seconds): brute force over every start."""
    if times.size == 0:
        return 0
    ends = np.searchsorted(times, times + seconds, side="left")
    return int((ends - np.arange(times.size)).max())


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    rows=st.integers(1, 400),
    span_days=st.integers(2, 9),
    window_seconds=st.sampled_from([1, 7, 64, 3_600, 86_399, 86_400, 200_000]),
    dtype=st.sampled_from([pl.String, pl.Categorical, pl.Enum(EVENT_TYPES)]),
)
def test_busiest_window_listens_bounds_every_window_and_is_tight_to_one_bin(
    seed, rows, span_days, window_seconds, dtype
):
    """Never below the most train listens of any interval of window_seconds (wherever it
    starts), and never above those of an interval longer by a bin at either end; clustered
    times, ties and every event type; the event_type dtypes a raw file can have."""
    rng = np.random.default_rng(seed)
    centers = rng.integers(0, span_days * 86_400, size=4)
    ts = np.clip(centers[rng.integers(0, 4, rows)] + rng.integers(-5_000, 5_000, rows), 0, None)
    ts = (ts // 5) * 5  # the data's quantum: many ties
    kinds = rng.choice(np.array(EVENT_TYPES), size=rows, p=[0.7, 0.1, 0.1, 0.05, 0.05])
    events = pl.DataFrame(
        {"timestamp": ts.astype(np.uint32), "event_type": pl.Series(kinds).cast(dtype)}
    )
    bound = busiest_window_listens(events.lazy(), window_seconds)
    width = max(1, window_seconds // 64)
    assert _sliding_most(_train_listen_times(events), window_seconds) <= bound
    # at most a bin more at either end, and the bin that holds train_end counted whole
    wider = _sliding_most(_train_listen_times(events, width), window_seconds + 2 * width)
    assert bound <= wider


def test_busiest_window_listens_bounds_the_windows_of_a_store_at_every_min_history(
    tmp_path, tiny_config
):
    """The bound against what build_store makes of the same events: above every window."""
    from yambda_data import SampleStore, prepare_store, synthesize

    root = tmp_path / "raw"
    paths = synthesize(root, tiny_config)
    bound = busiest_window_listens(pl.scan_parquet(paths.multi_event), 86_400)
    for min_history in (0, 16, 200):
        store = prepare_store(root, "50m", tmp_path / f"mh{min_history}", min_history=min_history)
        largest = int(SampleStore.open(store.path).window_sizes().max())
        assert largest <= bound
    # at min_history 0 a window starts at the first train listen: the bound is near the truth
    first = prepare_store(root, "50m", tmp_path / "mh0", min_history=0)
    assert bound <= 1.2 * int(first.window_sizes().max())


def test_busiest_window_listens_without_train_listens_is_zero():
    assert busiest_window_listens(pl.DataFrame(schema=MULTI_EVENT_SCHEMA), 86_400) == 0
    likes = pl.DataFrame({"timestamp": [0, 900_000], "event_type": ["like", "listen"]})
    assert busiest_window_listens(likes, 86_400) == 0  # the listen lies in the test day
    with pytest.raises(ValueError, match="window_seconds must be a positive integer, got 0"):
        busiest_window_listens(likes, 0)
