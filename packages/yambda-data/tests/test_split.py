from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from yambda_data.schema import MULTI_EVENT_SCHEMA
from yambda_data.split import GAP_SECONDS, TEST_SECONDS, SplitMeta, temporal_split

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
