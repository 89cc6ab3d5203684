from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrec")

from yambda_data.batching import (  # noqa: E402
    CANDIDATE_KEYS,
    CROSS_FEATURE_NAMES,
    HISTORY_KEYS,
    UIH_KEYS,
    BatchIterator,
    HSTUBatch,
    make_batch,
)
from yambda_data.crosses import cross_features  # noqa: E402
from yambda_data.samples import ItemFeatures, SampleConfig, Samples, build_samples  # noqa: E402


def tiny_samples() -> Samples:
    # Three samples with histories of lengths 2, 0, 3.
    return Samples(
        uid=np.array([7, 7, 9], dtype=np.uint32),
        anchor_timestamp=np.array([100, 105, 300], dtype=np.uint32),
        item_id=np.array([11, 12, 13], dtype=np.uint32),
        artist_id=np.array([1, 0, 2], dtype=np.uint32),
        album_id=np.array([3, 4, 0], dtype=np.uint32),
        label=np.array([1, 0, 1], dtype=np.uint8),
        is_organic=np.array([0, 1, 1], dtype=np.uint8),
        history_offsets=np.array([0, 2, 2, 5], dtype=np.int64),
        history_item_id=np.array([21, 22, 31, 32, 33], dtype=np.uint32),
        history_artist_id=np.array([1, 2, 3, 4, 5], dtype=np.uint32),
        history_album_id=np.array([6, 7, 8, 9, 10], dtype=np.uint32),
        history_action_weight=np.array([1, 4, 2, 1, 4], dtype=np.uint8),
        history_timestamp=np.array([90, 95, 200, 250, 295], dtype=np.uint32),
    )


def test_key_constants():
    # The seven crosses, in the reference's order (test_crosses.py spells them out).
    history = ("item_id", "artist_id", "album_id", "action_weight", "action_timestamp")
    expected = ("uid", *CROSS_FEATURE_NAMES, *history, "dummy_watch_time", "dummy_query_time")
    assert expected == UIH_KEYS
    assert CANDIDATE_KEYS == (
        "item_candidate_id",
        "item_candidate_artist_id",
        "item_candidate_album_id",
        "item_query_time",
        "item_action_weight",
        "item_dummy_watchtime",
    )


def test_make_batch_tiny():
    batch = make_batch(tiny_samples(), np.array([2, 0, 1]))
    assert isinstance(batch, HSTUBatch) and batch.batch_size == 3
    uih = batch.uih
    assert uih.keys() == list(UIH_KEYS)
    assert uih.stride() == 3
    assert uih.values().dtype == torch.int64
    d = uih.to_dict()
    for key in ("uid", *CROSS_FEATURE_NAMES, "dummy_query_time"):
        assert d[key].lengths().tolist() == [1, 1, 1], key
    for key in HISTORY_KEYS:
        assert d[key].lengths().tolist() == [3, 2, 0], key
    assert d["uid"].values().tolist() == [9, 7, 7]
    assert d["item_id"].values().tolist() == [31, 32, 33, 21, 22]
    assert d["artist_id"].values().tolist() == [3, 4, 5, 1, 2]
    assert d["album_id"].values().tolist() == [8, 9, 10, 6, 7]
    assert d["action_weight"].values().tolist() == [2, 1, 4, 1, 4]
    assert d["action_timestamp"].values().tolist() == [200, 250, 295, 90, 95]
    assert d["dummy_watch_time"].values().tolist() == [0] * 5
    # The last history timestamp; the anchor's own time for the empty history.
    assert d["dummy_query_time"].values().tolist() == [295, 95, 105]

    # Crosses hash the raw ids: features are id + 1 with 0 = none, and none hashes as 0.
    expected = cross_features(
        uid=np.array([9, 7, 7]),
        item_id=np.array([13, 11, 12]),
        artist_id=np.array([1, 0, 0]),
        album_id=np.array([0, 2, 3]),
        timestamp=np.array([300, 100, 105]),
        is_organic=np.array([1, 0, 1]),
    )
    for name in CROSS_FEATURE_NAMES:
        assert d[name].values().tolist() == expected[name].tolist(), name

    cand = batch.candidates
    assert cand.keys() == list(CANDIDATE_KEYS)
    c = cand.to_dict()
    for key in CANDIDATE_KEYS:
        assert c[key].lengths().tolist() == [1, 1, 1]
    assert c["item_candidate_id"].values().tolist() == [13, 11, 12]
    assert c["item_candidate_artist_id"].values().tolist() == [2, 1, 0]
    assert c["item_candidate_album_id"].values().tolist() == [0, 3, 4]
    # The query time is dummy_query_time's (the last history timestamp, the anchor's own time
    # only for the empty history), not the candidate's timestamp [300, 100, 105].
    assert c["item_query_time"].values().tolist() == [295, 95, 105]
    # Only the listen_plus bit: 1 for a listen_plus anchor, 0 (not skip's 4) otherwise.
    assert c["item_action_weight"].values().tolist() == [1, 1, 0]
    assert c["item_dummy_watchtime"].values().tolist() == [1, 1, 1]
    assert batch.labels.dtype == torch.float32
    assert batch.labels.tolist() == [1.0, 1.0, 0.0]

    moved = batch.to("cpu")
    assert moved.labels.tolist() == batch.labels.tolist()


def test_make_batch_of_all_samples_equals_the_indexed_one():
    s = tiny_samples()
    whole, indexed = make_batch(s), make_batch(s, np.arange(len(s)))
    assert torch.equal(whole.uih.values(), indexed.uih.values())
    assert torch.equal(whole.uih.lengths(), indexed.uih.lengths())
    assert torch.equal(whole.candidates.values(), indexed.candidates.values())


def test_empty_histories():
    s = tiny_samples()
    batch = make_batch(s, np.array([1]))
    assert batch.uih.to_dict()["item_id"].lengths().tolist() == [0]
    assert batch.uih.to_dict()["uid"].values().tolist() == [7]


def _many(n: int) -> Samples:
    s = tiny_samples()
    return s.take(np.arange(n) % len(s))


def _ids(batches) -> list[list[int]]:
    return [b.candidates.to_dict()["item_candidate_id"].values().tolist() for b in batches]


def _numbered(n: int) -> Samples:
    """``n`` samples whose candidate item ids are 0..n-1 (to follow them through batches)."""
    s = _many(n)
    return Samples(**{**s.__dict__, "item_id": np.arange(n, dtype=np.uint32)})


def flat(batches: list[list[int]]) -> list[int]:
    return [x for b in batches for x in b]


def test_iterator_determinism_and_epochs():
    s = _numbered(10)
    it = BatchIterator(s, 4, shuffle=True, seed=3)
    assert len(it) == 3
    first = _ids(it)
    assert _ids(it) == first  # same epoch, same order
    assert [len(b) for b in first] == [4, 4, 2]
    assert sorted(flat(first)) == list(range(10))
    assert _ids(BatchIterator(s, 4, shuffle=True, seed=3)) == first
    it.set_epoch(1)
    second = _ids(it)
    assert second != first and sorted(flat(second)) == list(range(10))
    assert _ids(BatchIterator(s, 4, shuffle=True, seed=4)) != first
    assert np.array_equal(it.order(0), np.array(flat(first)))

    plain = BatchIterator(s, 4, shuffle=False, drop_last=True)
    assert len(plain) == 2
    assert _ids(plain) == [[0, 1, 2, 3], [4, 5, 6, 7]]

    with pytest.raises(ValueError, match="batch_size"):
        BatchIterator(s, 0)
    with pytest.raises(ValueError, match="epoch"):
        it.set_epoch(-1)


def test_epochs_run_on_across_epoch_boundaries():
    s = _numbered(10)
    it = BatchIterator(s, 4, shuffle=True, seed=3, drop_last=True)
    stream = it.epochs()
    pairs = [next(stream) for _ in range(5)]
    assert [epoch for epoch, _ in pairs] == [0, 0, 1, 1, 2]
    got = _ids(b for _, b in pairs)
    assert got[:2] == [list(o) for o in it.order(0)[:8].reshape(2, 4)]
    assert got[2:4] == [list(o) for o in it.order(1)[:8].reshape(2, 4)]
    with pytest.raises(ValueError, match="no batch of 11 in 10 samples"):
        next(BatchIterator(s, 11, drop_last=True).epochs())


def test_smaller_cross_tables():
    from yambda_data.batching import uih_keys
    from yambda_data.crosses import CROSS_FEATURES, CrossFeature

    small = tuple(CrossFeature(c.name, c.keys, 97, c.salt) for c in CROSS_FEATURES[:3])
    batch = make_batch(tiny_samples(), crosses=small)
    assert batch.uih.keys() == list(uih_keys(small))
    assert uih_keys() == UIH_KEYS
    d = batch.uih.to_dict()
    s = tiny_samples()
    expected = cross_features(
        uid=s.uid,
        item_id=s.item_id,
        artist_id=np.maximum(s.artist_id.astype(np.int64) - 1, 0),
        album_id=np.maximum(s.album_id.astype(np.int64) - 1, 0),
        timestamp=s.anchor_timestamp,
        is_organic=s.is_organic,
        features=small,
    )
    for c in small:
        assert d[c.name].values().tolist() == expected[c.name].tolist()
        assert int(d[c.name].values().max()) < 97
    assert "user_x_artist_x_hour" not in d


@pytest.mark.parametrize("strategy", ["interleaved", "last_n"])
def test_query_time_and_candidate_bits_on_generated_data(tiny_data, strategy):
    """On the package's own synthetic data, every batch's item_query_time is the sample's last
    history timestamp (the anchor's time for an empty history), the same value as the UIH's
    dummy_query_time, and item_action_weight is exactly the label (the listen_plus bit)."""
    items = ItemFeatures.from_mappings(tiny_data.artist_item_mapping, tiny_data.album_item_mapping)
    # min_history 0 admits anchors without history (a user's first listen).
    config = SampleConfig(history_length=10, min_history=0, strategy=strategy)
    samples = build_samples(tiny_data.events, None, items, config)
    lengths = samples.history_lengths
    assert (lengths == 0).any() and (lengths > 0).any()
    assert set(samples.label.tolist()) == {0, 1}
    it = BatchIterator(samples, 64, shuffle=True, seed=1)
    order = it.order()
    seen = 0
    for i, batch in enumerate(it):
        rows = order[i * 64 : (i + 1) * 64]
        expected = []
        for j in rows.tolist():
            a, b = samples.history_offsets[j], samples.history_offsets[j + 1]
            last = samples.history_timestamp[b - 1] if b > a else samples.anchor_timestamp[j]
            expected.append(int(last))
        c, u = batch.candidates.to_dict(), batch.uih.to_dict()
        query = c["item_query_time"].values().tolist()
        assert query == expected
        assert u["dummy_query_time"].values().tolist() == query
        # The batch's own history agrees: the query time is its last action_timestamp.
        stamps = u["action_timestamp"]
        ends = np.cumsum(stamps.lengths().numpy())
        full = stamps.lengths().numpy() > 0
        assert np.array_equal(stamps.values().numpy()[ends[full] - 1], np.array(query)[full])
        bits = c["item_action_weight"].values()
        assert bits.tolist() == batch.labels.long().tolist()
        assert bits.tolist() == samples.label[rows].tolist()
        assert set(bits.tolist()) <= {0, 1}
        seen += batch.batch_size
    assert seen == len(samples)
