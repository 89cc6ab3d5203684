"""Tests of yambda_data.crosses against the xxhash package (the reference's hash)."""

from __future__ import annotations

import struct
import warnings

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from yambda_data.crosses import (
    CROSS_FEATURE_NAMES,
    CROSS_FEATURES,
    CrossFeature,
    cross_features,
    hour_of_day,
    xxh64_int64,
)

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
SEEDS = [0, 1, 2**63 + 5]
EDGE_VALUES = [0, 1, -1, -2, INT64_MIN, INT64_MAX, 2**32 - 1, 2**31, -(2**31), 255, 256]


def reference_digest(values: list[int], seed: int = 0) -> int:
    return xxhash.xxh64_intdigest(struct.pack(f"<{len(values)}q", *values), seed=seed)


def reference_cross(feature: CrossFeature, row: dict[str, int]) -> int:
    values = [row[key] for key in feature.keys]
    return reference_digest(values, feature.salt) % feature.table_size


def random_columns(n_columns: int, n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    columns = []
    for j in range(n_columns):
        column = rng.integers(INT64_MIN, INT64_MAX, size=n, dtype=np.int64, endpoint=True)
        # Each column sees every edge value, at positions that differ between columns.
        edges = np.array(EDGE_VALUES, dtype=np.int64)
        column[j : j + len(edges)] = edges
        column[-len(edges) :] = np.roll(edges, j + 1)
        columns.append(column)
    return columns


@pytest.fixture(scope="module")
def sample_rows() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    n = 2_000
    return {
        "uid": rng.integers(0, 1_000_000, n, dtype=np.uint32),
        "item_id": rng.integers(0, 9_500_000, n, dtype=np.uint32),
        # 0: an item without an artist or album, as in the reference.
        "artist_id": np.where(rng.random(n) < 0.1, 0, rng.integers(1, 1_300_000, n)),
        "album_id": np.where(rng.random(n) < 0.1, 0, rng.integers(1, 3_400_000, n)),
        "timestamp": (rng.integers(0, 300 * 86_400 // 5, n) * 5).astype(np.uint32),
        "is_organic": rng.integers(0, 2, n, dtype=np.uint8),
    }


# --- xxh64_int64 ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n_columns", [1, 2, 3])
def test_xxh64_matches_xxhash(n_columns: int, seed: int) -> None:
    columns = random_columns(n_columns, 300, seed=n_columns)
    got = xxh64_int64(columns, seed=seed)
    assert got.dtype == np.uint64
    assert got.shape == (300,)
    expected = [reference_digest([int(column[i]) for column in columns], seed) for i in range(300)]
    assert got.tolist() == expected


def test_xxh64_edge_value_grid() -> None:
    a, b = np.meshgrid(EDGE_VALUES, EDGE_VALUES, indexing="ij")
    got = xxh64_int64([a.ravel(), b.ravel()])
    expected = [
        reference_digest([int(x), int(y)]) for x, y in zip(a.ravel(), b.ravel(), strict=True)
    ]
    assert got.tolist() == expected


def test_xxh64_known_vector() -> None:
    # Independent of the xxhash package: XXH64 of 8 zero bytes with seed 0.
    assert int(xxh64_int64([np.zeros(1, dtype=np.int64)])[0]) == 0x34C96ACDCADB1BBB
    assert reference_digest([0]) == 0x34C96ACDCADB1BBB


@pytest.mark.parametrize(
    "dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.bool_]
)
def test_xxh64_casts_integer_dtypes_to_int64(dtype: type) -> None:
    info_values = [0, 1] if dtype is np.bool_ else [0, 1, np.iinfo(dtype).min, np.iinfo(dtype).max]
    column = np.array(info_values, dtype=dtype)
    got = xxh64_int64([column, column.astype(np.int64)])
    expected = [reference_digest([int(v), int(v)]) for v in info_values]
    assert got.tolist() == expected


def test_xxh64_uint64_wraps_to_twos_complement() -> None:
    column = np.array([2**64 - 1, 2**63], dtype=np.uint64)
    assert xxh64_int64([column]).tolist() == [
        reference_digest([-1]),
        reference_digest([INT64_MIN]),
    ]


def test_xxh64_broadcasts_scalars() -> None:
    column = np.arange(-5, 5, dtype=np.int64)
    got = xxh64_int64([7, column, np.int64(-3)], seed=1)
    assert got.tolist() == [reference_digest([7, int(v), -3], 1) for v in column]
    assert xxh64_int64([7, -3]).tolist() == [reference_digest([7, -3])]


def test_xxh64_non_contiguous_input() -> None:
    base = np.arange(40, dtype=np.int64).reshape(20, 2) * -7919
    got = xxh64_int64([base[:, 0], base[::-1, 1]])
    expected = [
        reference_digest([int(x), int(y)]) for x, y in zip(base[:, 0], base[::-1, 1], strict=True)
    ]
    assert got.tolist() == expected


def test_xxh64_empty_rows() -> None:
    got = xxh64_int64([np.array([], dtype=np.int64)] * 2)
    assert got.dtype == np.uint64
    assert got.shape == (0,)


def test_xxh64_no_overflow_warnings() -> None:
    columns = random_columns(3, 50, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="raise"):
            xxh64_int64(columns, seed=2**64 - 1)


def test_xxh64_does_not_modify_inputs() -> None:
    columns = random_columns(3, 50, seed=4)
    copies = [column.copy() for column in columns]
    xxh64_int64(columns)
    for column, copy in zip(columns, copies, strict=True):
        np.testing.assert_array_equal(column, copy)


@pytest.mark.parametrize("n_columns", [0, 4])
def test_xxh64_rejects_column_count(n_columns: int) -> None:
    with pytest.raises(ValueError, match="columns must hold 1 to 3"):
        xxh64_int64([np.zeros(3, dtype=np.int64)] * n_columns)


@pytest.mark.parametrize("seed", [-1, 2**64])
def test_xxh64_rejects_seed_out_of_range(seed: int) -> None:
    with pytest.raises(ValueError, match="seed"):
        xxh64_int64([np.zeros(3, dtype=np.int64)], seed=seed)


def test_xxh64_rejects_float_column() -> None:
    with pytest.raises(TypeError, match=r"columns\[1\].*integer dtype"):
        xxh64_int64([np.zeros(3, dtype=np.int64), np.zeros(3)])


def test_xxh64_rejects_mismatched_and_2d_shapes() -> None:
    with pytest.raises(ValueError, match="broadcast"):
        xxh64_int64([np.zeros(3, dtype=np.int64), np.zeros(4, dtype=np.int64)])
    with pytest.raises(ValueError, match="1-D"):
        xxh64_int64([np.zeros((2, 3), dtype=np.int64)])


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(
        st.lists(st.integers(INT64_MIN, INT64_MAX), min_size=3, max_size=3),
        min_size=1,
        max_size=20,
    ),
    n_columns=st.integers(1, 3),
    seed=st.integers(0, 2**64 - 1),
)
def test_xxh64_property(rows: list[list[int]], n_columns: int, seed: int) -> None:
    table = np.array(rows, dtype=np.int64)[:, :n_columns]
    got = xxh64_int64(list(table.T), seed=seed)
    assert got.tolist() == [reference_digest(row[:n_columns], seed) for row in rows]


# --- hour_of_day -----------------------------------------------------------------------------


def test_hour_of_day() -> None:
    timestamps = np.array([0, 3599, 3600, 86_399, 86_400, 23 * 3600 + 5, -1], dtype=np.int64)
    assert hour_of_day(timestamps).tolist() == [0, 0, 1, 23, 0, 23, 23]
    assert hour_of_day(np.array([4_000_000_000], dtype=np.uint32)).tolist() == [
        (4_000_000_000 // 3600) % 24
    ]
    assert hour_of_day(7200).tolist() == [2]


# --- CrossFeature and CROSS_FEATURES ---------------------------------------------------------


def test_cross_feature_specs() -> None:
    assert [(f.name, f.keys, f.table_size, f.salt) for f in CROSS_FEATURES] == [
        ("user_x_artist", ("uid", "artist_id"), 100_000_000, 0),
        ("user_x_album", ("uid", "album_id"), 40_000_000, 0),
        ("user_x_hour", ("uid", "hour"), 24_000_000, 0),
        ("item_x_hour", ("item_id", "hour"), 40_000_000, 0),
        ("artist_x_hour", ("artist_id", "hour"), 32_000_000, 0),
        ("user_x_is_organic", ("uid", "is_organic"), 2_000_000, 0),
        ("user_x_artist_x_hour", ("uid", "artist_id", "hour"), 40_000_000, 0),
    ]
    assert tuple(f.name for f in CROSS_FEATURES) == CROSS_FEATURE_NAMES


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"name": "", "keys": ("uid", "hour"), "table_size": 10}, ValueError, "name"),
        ({"name": "x", "keys": ("uid",), "table_size": 10}, ValueError, "keys"),
        ({"name": "x", "keys": ("uid", "hour") * 2, "table_size": 10}, ValueError, "keys"),
        ({"name": "x", "keys": ["uid", "hour"], "table_size": 10}, TypeError, "keys"),
        ({"name": "x", "keys": ("uid", "genre"), "table_size": 10}, ValueError, r"keys.*genre"),
        ({"name": "x", "keys": ("uid", "hour"), "table_size": 0}, ValueError, "table_size"),
        ({"name": "x", "keys": ("uid", "hour"), "table_size": 2.0}, ValueError, "table_size"),
        ({"name": "x", "keys": ("uid", "hour"), "table_size": True}, ValueError, "table_size"),
        ({"name": "x", "keys": ("uid", "hour"), "table_size": 9, "salt": -1}, ValueError, "salt"),
        (
            {"name": "x", "keys": ("uid", "hour"), "table_size": 9, "salt": 2**64},
            ValueError,
            "salt",
        ),
    ],
)
def test_cross_feature_validation(kwargs: dict, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        CrossFeature(**kwargs)


def test_cross_feature_accepts_limits() -> None:
    feature = CrossFeature("x", ("uid", "item_id", "hour"), 1, salt=2**64 - 1)
    assert feature.table_size == 1
    assert feature.salt == 2**64 - 1


# --- cross_features --------------------------------------------------------------------------


def test_cross_features_order_dtype_and_range(sample_rows: dict[str, np.ndarray]) -> None:
    out = cross_features(**sample_rows)
    assert tuple(out) == CROSS_FEATURE_NAMES
    n = len(sample_rows["uid"])
    for feature in CROSS_FEATURES:
        values = out[feature.name]
        assert values.dtype == np.int64
        assert values.shape == (n,)
        assert values.min() >= 0
        assert values.max() < feature.table_size
        # A hash spreads 2,000 rows over millions of buckets: nearly all distinct.
        assert len(np.unique(values)) > 0.5 * n


def test_cross_features_match_reference_rows(sample_rows: dict[str, np.ndarray]) -> None:
    out = cross_features(**sample_rows)
    for i in [0, 1, 17, 999, len(sample_rows["uid"]) - 1]:
        ts = int(sample_rows["timestamp"][i])
        row = {
            "uid": int(sample_rows["uid"][i]),
            "item_id": int(sample_rows["item_id"][i]),
            "artist_id": int(sample_rows["artist_id"][i]),
            "album_id": int(sample_rows["album_id"][i]),
            "hour": (ts // 3600) % 24,
            "is_organic": int(sample_rows["is_organic"][i]),
        }
        for feature in CROSS_FEATURES:
            assert int(out[feature.name][i]) == reference_cross(feature, row), (i, feature.name)


def test_cross_features_hand_computed_row() -> None:
    # uid 42 listening to item 7 (artist 3, no album) at 13:20 on day 2, organically.
    timestamp = 2 * 86_400 + 13 * 3600 + 20 * 60
    out = cross_features(
        uid=[42], item_id=[7], artist_id=[3], album_id=[0], timestamp=[timestamp], is_organic=[1]
    )
    packed = {
        "user_x_artist": (struct.pack("<2q", 42, 3), 100_000_000),
        "user_x_album": (struct.pack("<2q", 42, 0), 40_000_000),
        "user_x_hour": (struct.pack("<2q", 42, 13), 24_000_000),
        "item_x_hour": (struct.pack("<2q", 7, 13), 40_000_000),
        "artist_x_hour": (struct.pack("<2q", 3, 13), 32_000_000),
        "user_x_is_organic": (struct.pack("<2q", 42, 1), 2_000_000),
        "user_x_artist_x_hour": (struct.pack("<3q", 42, 3, 13), 40_000_000),
    }
    assert list(out) == list(packed)
    for name, (data, size) in packed.items():
        assert out[name].tolist() == [xxhash.xxh64_intdigest(data, seed=0) % size], name


def test_cross_features_custom_features_and_salt(sample_rows: dict[str, np.ndarray]) -> None:
    features = (
        CrossFeature("organic_x_item", ("is_organic", "item_id"), 1_000, salt=2**63 + 5),
        CrossFeature("album_x_hour", ("album_id", "hour"), 7),
    )
    out = cross_features(**sample_rows, features=features)
    assert list(out) == ["organic_x_item", "album_x_hour"]
    hours = (sample_rows["timestamp"].astype(np.int64) // 3600) % 24
    for i in range(0, 2_000, 97):
        assert (
            int(out["organic_x_item"][i])
            == reference_digest(
                [int(sample_rows["is_organic"][i]), int(sample_rows["item_id"][i])], 2**63 + 5
            )
            % 1_000
        )
        assert (
            int(out["album_x_hour"][i])
            == reference_digest([int(sample_rows["album_id"][i]), int(hours[i])]) % 7
        )


def test_cross_features_salt_changes_values(sample_rows: dict[str, np.ndarray]) -> None:
    plain = CrossFeature("a", ("uid", "item_id"), 2**40)
    salted = CrossFeature("b", ("uid", "item_id"), 2**40, salt=1)
    out = cross_features(**sample_rows, features=(plain, salted))
    assert not np.array_equal(out["a"], out["b"])


def test_cross_features_empty() -> None:
    empty = np.array([], dtype=np.int64)
    out = cross_features(
        uid=empty, item_id=empty, artist_id=empty, album_id=empty, timestamp=empty, is_organic=empty
    )
    assert tuple(out) == CROSS_FEATURE_NAMES
    assert all(values.shape == (0,) and values.dtype == np.int64 for values in out.values())


def test_cross_features_rejects_duplicate_names(sample_rows: dict[str, np.ndarray]) -> None:
    feature = CrossFeature("dup", ("uid", "hour"), 10)
    with pytest.raises(ValueError, match=r"duplicate.*dup"):
        cross_features(**sample_rows, features=(feature, feature))


def test_cross_features_rejects_mismatched_lengths(sample_rows: dict[str, np.ndarray]) -> None:
    rows = dict(sample_rows, uid=sample_rows["uid"][:-1])
    with pytest.raises(ValueError, match="broadcast"):
        cross_features(**rows)


def test_cross_features_rejects_float_input(sample_rows: dict[str, np.ndarray]) -> None:
    rows = dict(sample_rows, timestamp=sample_rows["timestamp"].astype(np.float64))
    with pytest.raises(TypeError, match="timestamp"):
        cross_features(**rows)
