from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from yambda_data.samples import (
    HISTORY_STRATEGIES,
    ItemFeatures,
    SampleConfig,
    Samples,
    build_samples,
    compute_vocab_sizes,
)
from yambda_data.schema import (
    ALBUM_ITEM_MAPPING_SCHEMA,
    ARTIST_ITEM_MAPPING_SCHEMA,
    EVENT_TYPES,
    MULTI_EVENT_SCHEMA,
)
from yambda_data.split import temporal_split
from yambda_data.synth import SynthData, roc_auc

# User 1's stream; position: (timestamp, event type, played ratio, item)
USER1 = [
    (0, "listen", 80, 10),  # 0 listen_plus
    (5, "listen", 20, 11),  # 1 skip
    (5, "like", None, 11),  # 2 like
    (10, "dislike", None, 12),  # 3 not history
    (15, "listen", 100, 13),  # 4 listen_plus
    (20, "listen", 0, 14),  # 5 skip
    (20, "unlike", None, 11),  # 6 not history
    (25, "listen", 60, 15),  # 7 listen_plus
    (30, "like", None, 15),  # 8 like
    (35, "listen", 49, 16),  # 9 skip
]
USER2 = [(100, "listen", 50, 10), (105, "listen", 30, 12)]


def events(rows_by_user: dict[int, list]) -> pl.DataFrame:
    rows = [
        (uid, ts, item, 0, ratio, None if ratio is None else 200, etype)
        for uid, rows in rows_by_user.items()
        for ts, etype, ratio, item in rows
    ]
    return pl.DataFrame(rows, schema=MULTI_EVENT_SCHEMA, orient="row")


def features() -> ItemFeatures:
    artist = pl.DataFrame(
        {"artist_id": [7, 3, 0, 9], "item_id": [10, 10, 11, 15]},
        schema=ARTIST_ITEM_MAPPING_SCHEMA,
    )
    album = pl.DataFrame({"album_id": [5], "item_id": [10]}, schema=ALBUM_ITEM_MAPPING_SCHEMA)
    return ItemFeatures.from_mappings(artist, album)


def histories(s: Samples) -> list[list[tuple[int, int]]]:
    """(item, action bits) per sample."""
    out = []
    for i in range(len(s)):
        a, b = s.history_offsets[i], s.history_offsets[i + 1]
        out.append(
            list(
                zip(
                    s.history_item_id[a:b].tolist(),
                    s.history_action_weight[a:b].tolist(),
                    strict=True,
                )
            )
        )
    return out


STREAM = events({1: USER1, 2: USER2})


def test_last_n_hand_computed():
    cfg = SampleConfig(history_length=3, min_history=0, strategy="last_n")
    s = build_samples(STREAM, None, features(), cfg)
    assert s.uid.tolist() == [1, 1, 1, 1, 1, 1, 2, 2]
    assert s.anchor_timestamp.tolist() == [0, 5, 15, 20, 25, 35, 100, 105]
    assert s.item_id.tolist() == [10, 11, 13, 14, 15, 16, 10, 12]
    assert s.label.tolist() == [1, 0, 1, 0, 1, 0, 1, 0]
    assert histories(s) == [
        [],
        [(10, 1)],
        [(10, 1), (11, 4), (11, 2)],
        [(11, 4), (11, 2), (13, 1)],
        [(11, 2), (13, 1), (14, 4)],
        [(14, 4), (15, 1), (15, 2)],
        [],
        [(10, 1)],
    ]
    assert s.history_offsets.tolist() == [0, 0, 1, 4, 7, 10, 13, 13, 14]
    # Timestamps travel with the history.
    assert s.history_timestamp[s.history_offsets[5] : s.history_offsets[6]].tolist() == [20, 25, 30]


def test_min_history_counts_all_event_types():
    s = build_samples(STREAM, None, features(), SampleConfig(history_length=3, min_history=4))
    # Position 4 has 4 earlier events (one of them a dislike); user 2 has too few.
    assert s.anchor_timestamp.tolist() == [15, 20, 25, 35]
    s = build_samples(STREAM, None, features(), SampleConfig(history_length=3, min_history=5))
    assert s.anchor_timestamp.tolist() == [20, 25, 35]
    s = build_samples(STREAM, None, features(), SampleConfig(history_length=3, min_history=1))
    assert s.anchor_timestamp.tolist() == [5, 15, 20, 25, 35, 105]


def test_default_strategy_is_interleaved():
    assert SampleConfig().strategy == "interleaved" == HISTORY_STRATEGIES[0]
    assert set(HISTORY_STRATEGIES) == {"interleaved", "last_n"}
    # Same histories as naming the strategy; different from last_n on this stream.
    default = build_samples(STREAM, None, features(), SampleConfig(history_length=7, min_history=9))
    assert histories(default) == [[(11, 4), (11, 2), (13, 1), (14, 4), (15, 1), (15, 2)]]
    cfg = SampleConfig(history_length=7, min_history=9, strategy="last_n")
    last_n = [[(10, 1), (11, 4), (11, 2), (13, 1), (14, 4), (15, 1), (15, 2)]]
    assert histories(build_samples(STREAM, None, features(), cfg)) == last_n


def test_interleaved_hand_computed():
    cfg = SampleConfig(history_length=3, min_history=5, strategy="interleaved")
    s = build_samples(STREAM, None, features(), cfg)
    assert s.anchor_timestamp.tolist() == [20, 25, 35]
    assert histories(s) == [
        [(11, 4), (11, 2), (13, 1)],
        [(11, 2), (13, 1), (14, 4)],
        [(14, 4), (15, 1), (15, 2)],
    ]
    cfg = SampleConfig(history_length=7, min_history=9, strategy="interleaved")  # 2 per pool
    s = build_samples(STREAM, None, features(), cfg)
    assert histories(s) == [[(11, 4), (11, 2), (13, 1), (14, 4), (15, 1), (15, 2)]]
    # Pools are capped separately: with 1 per pool, the older like at position 2 stays.
    cfg = SampleConfig(history_length=3, min_history=9, strategy="interleaved")
    s = build_samples(STREAM, None, features(), cfg)
    assert histories(s) == [[(14, 4), (15, 1), (15, 2)]]


def test_causal_window():
    cfg = SampleConfig(history_length=10, min_history=9, causal_window=3, strategy="last_n")
    s = build_samples(STREAM, None, features(), cfg)
    assert histories(s) == [[(15, 1), (15, 2)]]  # window = positions 6..8
    cfg = SampleConfig(history_length=10, min_history=9, causal_window=4, strategy="interleaved")
    s = build_samples(STREAM, None, features(), cfg)
    assert histories(s) == [[(14, 4), (15, 1), (15, 2)]]


def test_test_anchors_use_train_context():
    history = events({1: USER1[:6], 2: USER2[:1]})
    anchors = events({1: USER1[6:], 2: USER2[1:], 3: [(200, "listen", 90, 10)]})
    cfg = SampleConfig(history_length=3, min_history=0)
    s = build_samples(history, anchors, features(), cfg)
    # Only listens from anchor_events; user 3 has no context but min_history=0 admits it.
    assert s.anchor_timestamp.tolist() == [25, 35, 105, 200]
    assert histories(s) == [
        [(11, 2), (13, 1), (14, 4)],
        [(14, 4), (15, 1), (15, 2)],
        [(10, 1)],
        [],
    ]
    full = build_samples(STREAM, None, features(), cfg)
    assert histories(full)[4:6] == histories(s)[:2]
    s = build_samples(history, anchors, features(), SampleConfig(history_length=3, min_history=2))
    assert s.anchor_timestamp.tolist() == [25, 35]
    # The same object twice means "anchors from history".
    same = build_samples(STREAM, STREAM, features(), cfg)
    assert histories(same) == histories(full)


def test_item_features():
    feats = features()
    artist, album = feats.lookup(np.array([10, 11, 12, 15, 16, 10_000]))
    assert artist.tolist() == [4, 1, 0, 10, 0, 0]  # smallest artist id + 1; unknown 0
    assert album.tolist() == [6, 0, 0, 0, 0, 0]
    assert (feats.artist_rows, feats.album_rows) == (11, 7)
    s = build_samples(STREAM, None, feats, SampleConfig(history_length=3, min_history=0))
    assert s.artist_id.tolist() == [4, 1, 0, 0, 10, 0, 4, 0]
    assert s.album_id.tolist() == [6, 0, 0, 0, 0, 0, 6, 0]
    assert s.history_artist_id[:4].tolist() == [4, 4, 1, 1]
    vocab = compute_vocab_sizes(STREAM, feats)
    assert vocab.as_dict() == {"uid": 3, "item_id": 17, "artist_id": 11, "album_id": 7}
    empty = ItemFeatures.from_mappings(
        pl.DataFrame(schema=ARTIST_ITEM_MAPPING_SCHEMA),
        pl.DataFrame(schema=ALBUM_ITEM_MAPPING_SCHEMA),
    )
    assert (empty.artist_rows, empty.album_rows) == (1, 1)
    assert empty.lookup(np.array([3]))[0].tolist() == [0]


def test_event_type_as_string():
    as_str = STREAM.with_columns(pl.col("event_type").cast(pl.String))
    cfg = SampleConfig(history_length=3, min_history=0)
    a = build_samples(STREAM, None, features(), cfg)
    b = build_samples(as_str, None, features(), cfg)
    assert histories(a) == histories(b) and a.label.tolist() == b.label.tolist()


def test_input_errors():
    cfg = SampleConfig(history_length=3, min_history=0)
    with pytest.raises(ValueError, match="not sorted"):
        build_samples(STREAM.reverse(), None, features(), cfg)
    late_history = events({1: [(50, "listen", 90, 1)]})
    early_anchor = events({1: [(45, "listen", 90, 2)]})
    with pytest.raises(ValueError, match="precedes"):
        build_samples(late_history, early_anchor, features(), cfg)
    with pytest.raises(ValueError, match="missing columns"):
        build_samples(STREAM.drop("played_ratio_pct"), None, features(), cfg)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"history_length": 0}, "history_length"),
        ({"min_history": -1}, "min_history"),
        ({"causal_window": 0}, "causal_window"),
        ({"strategy": "random"}, "strategy"),
        ({"history_length": 2, "strategy": "interleaved"}, "history_length"),
        ({"history_length": 2}, "history_length"),  # the default strategy is interleaved
        ({"history_length": 2.0}, "history_length"),
    ],
)
def test_config_validation(kwargs, field):
    with pytest.raises(ValueError, match=rf"SampleConfig\.{field}"):
        SampleConfig(**kwargs)


def test_short_histories_need_last_n():
    with pytest.raises(ValueError, match="strategy='last_n'"):
        SampleConfig(history_length=2)
    assert SampleConfig(history_length=1, strategy="last_n").history_length == 1


def test_take():
    s = build_samples(STREAM, None, features(), SampleConfig(history_length=3, min_history=0))
    t = s.take(np.array([5, 0, 2]))
    assert histories(t) == [histories(s)[5], [], histories(s)[2]]
    assert t.label.tolist() == [0, 1, 1]
    assert len(s.take(np.array([], dtype=np.int64))) == 0


# A per-anchor reference implementation, written for clarity, to check the vectorized one.
def reference(stream: list[tuple[int, int, str, int | None, int]], cfg: SampleConfig, anchor_from):
    out = []
    for g, (uid, _ts, etype, ratio, _item) in enumerate(stream):
        start = next(i for i in range(g + 1) if stream[i][0] == uid)
        if etype != "listen" or g < anchor_from or g - start < cfg.min_history:
            continue
        lo = max(start, g - cfg.causal_window)
        pools: dict[int, list[int]] = {1: [], 2: [], 4: []}
        hist = []
        for j in range(lo, g):
            e, r = stream[j][2], stream[j][3]
            if e == "listen":
                bit = 1 if r >= 50 else 4
            elif e == "like":
                bit = 2
            else:
                continue
            hist.append((j, bit))
            pools[bit].append(j)
        if cfg.strategy == "last_n":
            chosen = hist[len(hist) - min(len(hist), cfg.history_length) :]
        else:
            k = cfg.history_length // 3
            keep = {j for p in pools.values() for j in p[len(p) - min(len(p), k) :]}
            chosen = [(j, b) for j, b in hist if j in keep]
        out.append((uid, [(stream[j][4], b) for j, b in chosen], int(ratio >= 50)))
    return out


@settings(max_examples=40, deadline=None)
@given(
    data=st.lists(
        st.tuples(
            st.integers(0, 2),  # uid
            st.sampled_from(EVENT_TYPES),
            st.integers(0, 120),  # ratio
            st.integers(0, 30),  # item
        ),
        min_size=0,
        max_size=80,
    ),
    length=st.integers(3, 8),
    min_history=st.integers(0, 5),
    window=st.integers(1, 12),
    strategy=st.sampled_from(["last_n", "interleaved"]),
)
def test_matches_reference(data, length, min_history, window, strategy):
    data = sorted(data, key=lambda r: r[0])  # stable: keeps generation order per user
    stream = [
        (uid, 5 * i, etype, ratio if etype == "listen" else None, item)
        for i, (uid, etype, ratio, item) in enumerate(data)
    ]
    rows = {}
    for uid, ts, etype, ratio, item in stream:
        rows.setdefault(uid, []).append((ts, etype, ratio, item))
    frame = events(rows)
    cfg = SampleConfig(
        history_length=length, min_history=min_history, causal_window=window, strategy=strategy
    )
    s = build_samples(frame, None, features(), cfg)
    got = list(zip(s.uid.tolist(), histories(s), s.label.tolist(), strict=True))
    assert got == reference(stream, cfg, 0)


def with_extra_likes(frame: pl.DataFrame, every: int) -> pl.DataFrame:
    """``frame`` with a like right after every ``every``-th listen_plus listen (same user, time
    and item, as a like of what is playing): generated data whose like pool fills up."""
    plus = (pl.col("event_type") == "listen") & (pl.col("played_ratio_pct") >= 50)
    rows = frame.with_row_index("_row").with_columns(pl.lit(0).alias("_tie"))
    likes = (
        rows.filter(plus)
        .gather_every(every)
        .with_columns(
            pl.lit("like").cast(frame.schema["event_type"]).alias("event_type"),
            pl.lit(None, dtype=frame.schema["played_ratio_pct"]).alias("played_ratio_pct"),
            pl.lit(None, dtype=frame.schema["track_length_seconds"]).alias("track_length_seconds"),
            pl.lit(1).alias("_tie"),
        )
    )
    return pl.concat([rows, likes]).sort("_row", "_tie").drop("_row", "_tie")


def brute_force_interleaved(frame: pl.DataFrame, cfg: SampleConfig) -> list[tuple]:
    """Per anchor, in stream order: (uid, anchor time, history as (time, item, bit) oldest
    first, likes in the causal window), with one plain loop per anchor: the last
    ``L // 3`` events of each pool inside the window, merged by stream position."""
    per_user: dict[int, list[tuple]] = {}
    columns = ("uid", "timestamp", "item_id", "played_ratio_pct", "event_type")
    for row in frame.select(columns).with_columns(pl.col("event_type").cast(pl.String)).rows():
        per_user.setdefault(row[0], []).append(row)
    k = cfg.history_length // 3
    out = []
    for uid in sorted(per_user):
        stream = per_user[uid]
        for pos, (_uid, ts, _item, _ratio, etype) in enumerate(stream):
            if etype != "listen" or pos < cfg.min_history:
                continue
            pools: dict[int, list[tuple[int, int, int, int]]] = {1: [], 2: [], 4: []}
            for j in range(max(0, pos - cfg.causal_window), pos):
                _u, t, item, ratio, e = stream[j]
                if e == "listen":
                    bit = 1 if ratio >= 50 else 4
                elif e == "like":
                    bit = 2
                else:
                    continue
                pools[bit].append((j, t, item, bit))
            chosen = sorted(event for pool in pools.values() for event in pool[-k:])
            history = [(t, item, bit) for _j, t, item, bit in chosen]
            out.append((uid, ts, history, len(pools[2])))
    return out


@pytest.mark.parametrize(
    "cfg",
    [
        SampleConfig(),  # L = 64: 21 per pool, L not divisible by 3
        SampleConfig(history_length=10, min_history=16),  # 3 per pool
        SampleConfig(history_length=9, min_history=4, causal_window=40),  # the window binds
    ],
    ids=["default", "L10", "L9-window40"],
)
def test_default_interleaved_history_matches_a_brute_force(tiny_data: SynthData, cfg):
    """The default strategy is interleaved, and its history is exactly the last L // 3 events
    of each pool within the causal window, merged in stream (time) order."""
    assert cfg.strategy == "interleaved"
    frame = with_extra_likes(tiny_data.events, every=2)
    feats = ItemFeatures.from_mappings(tiny_data.artist_item_mapping, tiny_data.album_item_mapping)
    s = build_samples(frame, None, feats, cfg)
    expected = brute_force_interleaved(frame, cfg)
    assert len(s) == len(expected) > 1_000
    k = cfg.history_length // 3
    capped_likes = 0
    for i, (uid, ts, history, likes_in_window) in enumerate(expected):
        a, b = s.history_offsets[i], s.history_offsets[i + 1]
        got = list(
            zip(
                s.history_timestamp[a:b].tolist(),
                s.history_item_id[a:b].tolist(),
                s.history_action_weight[a:b].tolist(),
                strict=True,
            )
        )
        assert (int(s.uid[i]), int(s.anchor_timestamp[i]), got) == (uid, ts, history), i
        if likes_in_window > k:
            capped_likes += 1
            assert sum(bit == 2 for _t, _item, bit in got) == k
    # The like pool is not trivial: for many anchors it holds more likes than it may keep.
    assert capped_likes > len(expected) // 4
    # Oldest first, in time order.
    owner = np.repeat(np.arange(len(s)), s.history_lengths)
    step = np.diff(s.history_timestamp.astype(np.int64))
    assert np.all(step[owner[1:] == owner[:-1]] >= 0)


@pytest.mark.parametrize("strategy", ["interleaved", "last_n"])
def test_default_dataset_samples_learnable(default_data: SynthData, strategy):
    """The planted signal is visible in the samples of either strategy: a logistic regression
    on a few history features, fit on train samples, reaches a clearly better than chance test
    AUC (about 0.64 for interleaved, 0.65 for last_n)."""
    ev = default_data.events
    split = temporal_split(ev)
    feats = ItemFeatures.from_mappings(
        default_data.artist_item_mapping, default_data.album_item_mapping
    )
    cfg = SampleConfig(history_length=64, min_history=16, strategy=strategy)
    train = build_samples(split.train, None, feats, cfg)
    test = build_samples(split.train, split.test, feats, cfg)
    assert len(train) > 300_000 and len(test) > 3_000
    vocab = compute_vocab_sizes(ev, feats)
    for s in (train, test):
        assert s.uid.max() < vocab.uid and s.item_id.max() < vocab.item_id
        assert s.history_artist_id.max() < vocab.artist_id
        assert s.history_album_id.max() < vocab.album_id
    if strategy == "last_n":
        assert np.all(train.history_lengths <= 64) and train.history_lengths.mean() > 60
    else:  # 21 per pool; likes are rare, so the like part is often short
        assert np.all(train.history_lengths <= 63) and train.history_lengths.mean() > 50

    def x(s: Samples) -> np.ndarray:
        n, lengths = len(s), s.history_lengths
        owner = np.repeat(np.arange(n), lengths)
        bits = s.history_action_weight
        plus, skip, like = bits == 1, bits == 4, bits == 2
        ts = s.history_timestamp.astype(np.int64)
        # Interleaved histories hold as many listen_plus as skips whatever the user's rate;
        # after the later of the two pools' oldest times, though, the history holds every
        # listen of the window (each pool keeps its latest events), so rates are taken there.
        never = np.iinfo(np.int64).max
        first_plus, first_skip = np.full(n, never), np.full(n, never)
        np.minimum.at(first_plus, owner[plus], ts[plus])
        np.minimum.at(first_skip, owner[skip], ts[skip])
        cut = np.maximum(first_plus, first_skip)
        cut[cut == never] = 0
        inside = (plus | skip) & (ts > cut[owner])
        user_rate = (np.bincount(owner, inside & plus, n) + 1) / (np.bincount(owner, inside, n) + 2)
        artist = s.history_artist_id == np.repeat(s.artist_id, lengths)
        same = artist & inside
        artist_rate = (np.bincount(owner, same & plus, n) + 1.2) / (np.bincount(owner, same, n) + 2)
        liked = np.bincount(owner, artist & like, n) > 0  # likes follow liked artists' plays
        return np.c_[np.ones(n), user_rate, artist_rate, liked]

    rng = np.random.default_rng(0)
    sub = train.take(rng.choice(len(train), 50_000, replace=False))
    xt, y = x(sub), sub.label.astype(np.float64)
    w = np.zeros(xt.shape[1])
    for _ in range(20):  # Newton steps
        p = 1 / (1 + np.exp(-xt @ w))
        w += np.linalg.solve((xt * (p * (1 - p))[:, None]).T @ xt, xt.T @ (y - p))
    assert roc_auc(x(test) @ w, test.label) > 0.62
