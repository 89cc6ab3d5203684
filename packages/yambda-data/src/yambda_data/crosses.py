"""Hashed cross features of DLRMv4 samples, vectorized with numpy.

Definitions (facts of the reference, made precise here):

* **Cross value.** For one sample and one :class:`CrossFeature`, the XXH64 digest (seeded with
  the feature's ``salt``) of its key values packed as consecutive little-endian int64s, the
  bytes of ``struct.pack(f"<{len(keys)}q", *values)``, modulo ``table_size``.
* **Keys.** ``uid``, ``item_id``, ``is_organic`` of the anchor (candidate) event; its item's
  ``artist_id`` and ``album_id`` as raw ids (0 for an item without a mapping, unlike the
  ``+ 1`` item features of :mod:`yambda_data.samples`); ``hour``, the anchor's hour of day
  ``(timestamp // 3600) % 24``.
* **Features.** The seven of :data:`CROSS_FEATURES`, salt 0, in that order.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "CROSS_FEATURES",
    "CROSS_FEATURE_NAMES",
    "CROSS_KEYS",
    "CrossFeature",
    "cross_features",
    "hour_of_day",
    "xxh64_int64",
]

CROSS_KEYS: frozenset[str] = frozenset(
    {"uid", "item_id", "artist_id", "album_id", "hour", "is_organic"}
)
"""The per-sample values a cross feature may combine."""

_MAX_COLUMNS = 3
"""Three int64s are 24 bytes, inside XXH64's short-input (< 32 bytes) path."""

_U64 = 1 << 64
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5


@dataclass(frozen=True)
class CrossFeature:
    """One hashed cross: the keys it combines, its table size and its hash seed."""

    name: str
    keys: tuple[str, ...]
    table_size: int
    salt: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.keys, tuple):
            raise TypeError(f"keys of {self.name!r} must be a tuple, got {self.keys!r}")
        if not 2 <= len(self.keys) <= _MAX_COLUMNS:
            raise ValueError(
                f"keys of {self.name!r} must hold 2 to {_MAX_COLUMNS} keys, got {self.keys!r}"
            )
        unknown = [key for key in self.keys if key not in CROSS_KEYS]
        if unknown:
            raise ValueError(
                f"keys of {self.name!r} has unknown keys {unknown!r}; known: {sorted(CROSS_KEYS)}"
            )
        # bool is an int subclass; True as a size or seed is surely a mistake.
        if (
            not isinstance(self.table_size, int)
            or isinstance(self.table_size, bool)
            or self.table_size < 1
        ):
            raise ValueError(
                f"table_size of {self.name!r} must be an int >= 1, got {self.table_size!r}"
            )
        if (
            not isinstance(self.salt, int)
            or isinstance(self.salt, bool)
            or not 0 <= self.salt < _U64
        ):
            raise ValueError(
                f"salt of {self.name!r} must be an int in [0, 2**64), got {self.salt!r}"
            )


CROSS_FEATURES: tuple[CrossFeature, ...] = (
    CrossFeature("user_x_artist", ("uid", "artist_id"), 100_000_000),
    CrossFeature("user_x_album", ("uid", "album_id"), 40_000_000),
    CrossFeature("user_x_hour", ("uid", "hour"), 24_000_000),
    CrossFeature("item_x_hour", ("item_id", "hour"), 40_000_000),
    CrossFeature("artist_x_hour", ("artist_id", "hour"), 32_000_000),
    CrossFeature("user_x_is_organic", ("uid", "is_organic"), 2_000_000),
    CrossFeature("user_x_artist_x_hour", ("uid", "artist_id", "hour"), 40_000_000),
)
"""The DLRMv4 reference's cross features, in its order."""

CROSS_FEATURE_NAMES: tuple[str, ...] = tuple(feature.name for feature in CROSS_FEATURES)


def _as_int64(values: ArrayLike, what: str) -> np.ndarray:
    array = np.asarray(values)
    if not (np.issubdtype(array.dtype, np.integer) or array.dtype == np.bool_):
        raise TypeError(f"{what} must have an integer dtype, got {array.dtype}")
    # Wrapping (not checked) casts: uint64 above 2**63 keeps its bits, as C's cast would.
    return array.astype(np.int64, copy=False)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def xxh64_int64(columns: Sequence[ArrayLike], seed: int = 0) -> np.ndarray:
    """XXH64, per row, of the columns' values packed as consecutive little-endian int64s.

    Row ``i`` hashes the bytes of ``struct.pack(f"<{len(columns)}q", *(c[i] for c in
    columns))`` with ``seed``; the result equals ``xxhash.xxh64_intdigest`` of those bytes.

    Args:
        columns: 1 to 3 arrays (or scalars) of an integer or bool dtype, broadcastable to one
            1-D shape. Values are cast to int64, so negatives hash as their two's complement.
        seed: XXH64 seed in ``[0, 2**64)``.

    Returns:
        A 1-D uint64 array of digests.

    Raises:
        ValueError: no columns, more than 3, shapes that do not broadcast to 1-D, or a seed
            out of range.
        TypeError: a column of a non-integer dtype, or a seed that is not an integer.
    """
    if not 1 <= len(columns) <= _MAX_COLUMNS:
        raise ValueError(
            f"columns must hold 1 to {_MAX_COLUMNS} arrays (the short-input path of XXH64), "
            f"got {len(columns)}"
        )
    if isinstance(seed, bool) or not 0 <= operator.index(seed) < _U64:
        raise ValueError(f"seed must be an int in [0, 2**64), got {seed!r}")
    arrays = [_as_int64(column, f"columns[{i}]") for i, column in enumerate(columns)]
    try:
        arrays = np.broadcast_arrays(*arrays)
    except ValueError as error:
        shapes = [array.shape for array in arrays]
        raise ValueError(f"columns do not broadcast to one shape: {shapes}") from error
    if arrays[0].ndim > 1:
        raise ValueError(f"columns must be 1-D, got shape {arrays[0].shape}")
    n = arrays[0].size if arrays[0].ndim == 1 else 1

    # The constants are folded in Python ints so no numpy scalar arithmetic can overflow;
    # numpy array arithmetic on uint64 wraps silently, which is XXH64's mod-2**64 arithmetic.
    start = (operator.index(seed) + _P5 + 8 * len(arrays)) % _U64
    h = np.full(n, start, dtype=np.uint64)
    p1, p2, p3, p4 = (np.uint64(p) for p in (_P1, _P2, _P3, _P4))
    lane = np.empty(n, dtype=np.uint64)
    for array in arrays:
        # A little-endian int64 read back as a little-endian u64 is the value's bit pattern.
        np.multiply(array.reshape(-1).view(np.uint64), p2, out=lane)
        lane = _rotl(lane, 31)
        lane *= p1
        h ^= lane
        h = _rotl(h, 27)
        h *= p1
        h += p4
    h ^= h >> np.uint64(33)
    h *= p2
    h ^= h >> np.uint64(29)
    h *= p3
    h ^= h >> np.uint64(32)
    return h


def hour_of_day(timestamp: ArrayLike) -> np.ndarray:
    """Hour of day, ``(timestamp // 3600) % 24``, of timestamps in seconds, as int64 in [0, 24).

    Floor division, so a negative timestamp counts back from the previous day.
    """
    ts = np.atleast_1d(_as_int64(timestamp, "timestamp"))
    return (ts // 3600) % 24


def cross_features(
    *,
    uid: ArrayLike,
    item_id: ArrayLike,
    artist_id: ArrayLike,
    album_id: ArrayLike,
    timestamp: ArrayLike,
    is_organic: ArrayLike,
    features: Sequence[CrossFeature] = CROSS_FEATURES,
) -> dict[str, np.ndarray]:
    """The hashed cross features of samples, one value per sample and feature.

    Args:
        uid: Anchor events' user ids.
        item_id: Anchor events' item ids.
        artist_id: Raw artist id of each anchor's item (0 for an item without an artist).
        album_id: Raw album id of each anchor's item (0 for an item without an album).
        timestamp: Anchor events' timestamps in seconds; only their hour of day is used.
        is_organic: Anchor events' is_organic flags.
        features: The crosses to compute; names must be unique.

    All inputs are integer (or bool) arrays, or scalars, broadcastable to one 1-D shape.

    Returns:
        ``{name: values}`` in ``features`` order; each value an int64 in ``[0, table_size)``.

    Raises:
        ValueError: duplicate feature names, or inputs that do not broadcast to 1-D.
        TypeError: an input of a non-integer dtype.
    """
    names = [feature.name for feature in features]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"features has duplicate names: {duplicates}")
    values = {
        "uid": uid,
        "item_id": item_id,
        "artist_id": artist_id,
        "album_id": album_id,
        "hour": hour_of_day(timestamp),
        "is_organic": is_organic,
    }
    # Broadcast all keys together, so a feature's output length does not depend on which keys
    # it happens to combine.
    arrays = [np.atleast_1d(_as_int64(value, key)) for key, value in values.items()]
    try:
        arrays = np.broadcast_arrays(*arrays)
    except ValueError as error:
        shapes = {key: array.shape for key, array in zip(values, arrays, strict=True)}
        raise ValueError(f"inputs do not broadcast to one shape: {shapes}") from error
    if arrays[0].ndim != 1:
        raise ValueError(f"inputs must be 1-D, got shape {arrays[0].shape}")
    by_key = dict(zip(values, arrays, strict=True))
    out: dict[str, np.ndarray] = {}
    for feature in features:
        digest = xxh64_int64([by_key[key] for key in feature.keys], seed=feature.salt)
        out[feature.name] = (digest % np.uint64(feature.table_size)).astype(np.int64)
    return out
