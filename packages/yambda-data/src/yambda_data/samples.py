"""DLRMv4 training samples, built in memory with numpy.

Definitions (facts of the reference, made precise here):

* **Stream.** Per user, the events ordered by (uid, timestamp) with ties in input order. With
  ``anchor_events=None`` the stream is ``history_events`` itself and every listen in it may be
  an anchor (train samples). Otherwise the stream is the user's ``history_events`` followed by
  the user's ``anchor_events`` (each in its own row order), and only listens from
  ``anchor_events`` are anchors (test samples: train events, then earlier test events, are the
  context of a test listen). Each user's anchor events must not be earlier than the user's
  history events, and each input must be sorted by (uid, timestamp); ValueError otherwise.
  Passing the same frame object as both arguments is the same as ``anchor_events=None``.
* **Anchor.** A listen at stream position ``pos`` (0-based within its user) with
  ``pos >= min_history``: at least ``min_history`` earlier events of any type.
* **Causal window.** Stream positions ``[max(0, pos - causal_window), pos)`` (20,000 events).
* **History.** The listen and like events of the window (dislike, unlike and undislike are
  not history), each with one action bit: listen_plus 1 (listen, played_ratio_pct >= 50),
  like 2, skip 4 (listen, played_ratio_pct < 50). ``interleaved`` (the default, and the
  strategy the reference trains with) takes the last ``history_length // 3`` of each pool
  (listen_plus, like, skip) and re-sorts them by stream position (time order), so a history
  holds at most ``3 * (history_length // 3)`` events; ``last_n`` takes the last
  ``history_length`` of them whatever their pool.
* **Label.** listen_plus of the anchor listen (played_ratio_pct >= 50).
* **Item features.** Mappings are many-to-many: an item's artist is its smallest artist_id and
  its album its smallest album_id. Features are those ids plus 1; 0 is reserved for "no
  mapping". Item ids and uids are used as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal

import numpy as np
import polars as pl

from yambda_data._io import reading
from yambda_data.schema import EVENT_TYPE_CODES, EVENT_TYPE_DTYPE, mapping_path, read_mapping

__all__ = [
    "ACTION_LIKE",
    "ACTION_LISTEN_PLUS",
    "ACTION_SKIP",
    "CAUSAL_WINDOW",
    "HISTORY_STRATEGIES",
    "LISTEN_PLUS_MIN_RATIO",
    "ItemFeatures",
    "SampleConfig",
    "Samples",
    "VocabSizes",
    "build_samples",
    "compute_vocab_sizes",
]

ACTION_LISTEN_PLUS = 1
ACTION_LIKE = 2
ACTION_SKIP = 4
LISTEN_PLUS_MIN_RATIO = 50
"""A listen is listen_plus when played_ratio_pct >= this."""
CAUSAL_WINDOW = 20_000
"""Events before the anchor that the history may be drawn from."""

Strategy = Literal["interleaved", "last_n"]
HISTORY_STRATEGIES: tuple[Strategy, ...] = ("interleaved", "last_n")
"""The values of :attr:`SampleConfig.strategy`, the default (the reference's) first."""
FrameIn = pl.DataFrame | pl.LazyFrame


@dataclass(frozen=True)
class SampleConfig:
    """How samples are cut, by :func:`build_samples` and
    :meth:`~yambda_data.store.SampleStore.samples` alike (the reference's values: L = 4086,
    min_history 4086, interleaved, causal window 20,000)."""

    history_length: int = 64
    """History length ``L``: at most ``L`` events per sample (``3 * (L // 3)`` under the
    interleaved strategy)."""
    min_history: int = 16
    """Minimum number of earlier events (any type) of an anchor."""
    strategy: Strategy = "interleaved"
    """``"interleaved"`` (the reference's): the last ``history_length // 3`` events of each pool,
    merged in time order; ``"last_n"``: the last ``history_length`` history events of any pool."""
    causal_window: int = CAUSAL_WINDOW
    """Stream events before the anchor (any type) that the history may be drawn from."""

    def __post_init__(self) -> None:
        for name in ("history_length", "min_history", "causal_window"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"SampleConfig.{name}: not an int, got {value!r}")
        if self.history_length < 1:
            raise ValueError(
                f"SampleConfig.history_length: must be >= 1, got {self.history_length}"
            )
        if self.min_history < 0:
            raise ValueError(f"SampleConfig.min_history: must be >= 0, got {self.min_history}")
        if self.causal_window < 1:
            raise ValueError(f"SampleConfig.causal_window: must be >= 1, got {self.causal_window}")
        if self.strategy not in HISTORY_STRATEGIES:
            raise ValueError(
                f"SampleConfig.strategy: must be 'interleaved' or 'last_n', got {self.strategy!r}"
            )
        if self.strategy == "interleaved" and self.history_length < 3:
            raise ValueError(
                "SampleConfig.history_length: must be >= 3 for the interleaved strategy "
                f"(one event per pool), got {self.history_length}; pass strategy='last_n' "
                "for shorter histories"
            )


@dataclass(frozen=True)
class VocabSizes:
    """Embedding table rows (largest feature value + 1) shared by train and eval."""

    uid: int
    item_id: int
    artist_id: int
    album_id: int

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class ItemFeatures:
    """Artist and album features per item id (see the module docstring for the rule).

    ``artist_of[item_id]`` / ``album_of[item_id]`` hold the feature (id + 1, 0 = unknown) for
    the item ids up to the largest mapped one; :meth:`lookup` returns 0 beyond that.
    ``artist_rows`` / ``album_rows`` are the embedding rows the features need: the largest
    id in the whole mapping + 2 (1 for an empty mapping).
    """

    artist_of: np.ndarray
    album_of: np.ndarray
    artist_rows: int
    album_rows: int
    max_item_id: int
    """Largest item id in either mapping (-1 for empty mappings)."""

    @classmethod
    def from_mappings(cls, artist_mapping: FrameIn, album_mapping: FrameIn) -> ItemFeatures:
        return cls._from_tables(
            _feature_table(artist_mapping.lazy(), "artist_id"),
            _feature_table(album_mapping.lazy(), "album_id"),
        )

    @classmethod
    def _from_tables(
        cls, artist: tuple[np.ndarray, int, int], album: tuple[np.ndarray, int, int]
    ) -> ItemFeatures:
        (artist_of, artist_rows, max_a), (album_of, album_rows, max_b) = artist, album
        size = max(artist_of.size, album_of.size)
        return cls(
            artist_of=_pad(artist_of, size),
            album_of=_pad(album_of, size),
            artist_rows=artist_rows,
            album_rows=album_rows,
            max_item_id=max(max_a, max_b),
        )

    @classmethod
    def from_root(cls, root: str | Path) -> ItemFeatures:
        """Read ``artist_item_mapping.parquet`` and ``album_item_mapping.parquet`` at root (a
        file that cannot be read raises :class:`~yambda_data.InputFileError` naming it)."""
        tables = []
        for kind in ("artist", "album"):
            with reading(mapping_path(root, kind)):
                mapping = read_mapping(root, kind)  # type: ignore[arg-type]
                tables.append(_feature_table(mapping, f"{kind}_id"))
        return cls._from_tables(*tables)

    def lookup(self, item_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(artist feature, album feature) of every item id, uint32."""
        item_ids = np.asarray(item_ids)
        size = self.artist_of.size
        if size == 0:
            zeros = np.zeros(item_ids.shape, dtype=np.uint32)
            return zeros, zeros.copy()
        inside = item_ids < size
        clipped = np.where(inside, item_ids, 0)
        artist = np.where(inside, self.artist_of[clipped], 0).astype(np.uint32)
        album = np.where(inside, self.album_of[clipped], 0).astype(np.uint32)
        return artist, album


def _feature_table(mapping: pl.LazyFrame, key: str) -> tuple[np.ndarray, int, int]:
    smallest = mapping.group_by("item_id").agg(pl.col(key).min()).collect().sort("item_id")
    max_key = mapping.select(pl.col(key).max().cast(pl.Int64)).collect().item()
    if smallest.height == 0:
        return np.zeros(0, dtype=np.uint32), 1, -1
    if max_key >= 2**32 - 1:
        raise ValueError(f"{key} {max_key} does not fit uint32 after the +1 shift")
    items = smallest["item_id"].to_numpy().astype(np.int64)
    table = np.zeros(int(items[-1]) + 1, dtype=np.uint32)
    table[items] = smallest[key].to_numpy().astype(np.uint32) + 1
    return table, int(max_key) + 2, int(items[-1])


def _pad(table: np.ndarray, size: int) -> np.ndarray:
    if table.size == size:
        return table
    out = np.zeros(size, dtype=np.uint32)
    out[: table.size] = table
    return out


def compute_vocab_sizes(events: FrameIn, item_features: ItemFeatures) -> VocabSizes:
    """Table rows for uid and item_id (from the full events, e.g. multi_event before the
    split, and the mappings) and for the artist and album features."""
    row = (
        events.lazy()
        .select(
            pl.col("uid").max().cast(pl.Int64).alias("uid"),
            pl.col("item_id").max().cast(pl.Int64).alias("item_id"),
        )
        .collect()
        .row(0, named=True)
    )
    max_uid = -1 if row["uid"] is None else row["uid"]
    max_item = max(-1 if row["item_id"] is None else row["item_id"], item_features.max_item_id)
    return VocabSizes(
        uid=max_uid + 1,
        item_id=max_item + 1,
        artist_id=item_features.artist_rows,
        album_id=item_features.album_rows,
    )


@dataclass(frozen=True)
class Samples:
    """N samples as numpy arrays; the history of sample i is
    ``history_*[history_offsets[i]:history_offsets[i + 1]]``, oldest first.

    Candidate and id arrays are uint32 (the source dtypes; artist/album are features, i.e.
    id + 1 with 0 unknown), ``label``, ``is_organic`` (of the anchor event) and
    ``history_action_weight`` uint8, offsets int64.
    """

    uid: np.ndarray
    anchor_timestamp: np.ndarray
    item_id: np.ndarray
    artist_id: np.ndarray
    album_id: np.ndarray
    label: np.ndarray
    is_organic: np.ndarray
    history_offsets: np.ndarray
    history_item_id: np.ndarray
    history_artist_id: np.ndarray
    history_album_id: np.ndarray
    history_action_weight: np.ndarray
    history_timestamp: np.ndarray

    def __post_init__(self) -> None:
        n = self.uid.shape[0]
        for name in ("anchor_timestamp", "item_id", "artist_id", "album_id", "label", "is_organic"):
            if getattr(self, name).shape != (n,):
                raise ValueError(f"Samples.{name}: shape {getattr(self, name).shape} != ({n},)")
        off = self.history_offsets
        if off.shape != (n + 1,) or off[0] != 0 or (np.diff(off) < 0).any():
            raise ValueError("Samples.history_offsets: must be [N+1], start at 0, non-decreasing")
        total = int(off[-1])
        for name in (
            "history_item_id",
            "history_artist_id",
            "history_album_id",
            "history_action_weight",
            "history_timestamp",
        ):
            if getattr(self, name).shape != (total,):
                raise ValueError(f"Samples.{name}: shape {getattr(self, name).shape} != ({total},)")

    def __len__(self) -> int:
        return int(self.uid.shape[0])

    @property
    def history_lengths(self) -> np.ndarray:
        return np.diff(self.history_offsets)

    def take(self, indices: np.ndarray) -> Samples:
        """The samples at ``indices`` (in that order), histories gathered."""
        idx = np.asarray(indices, dtype=np.int64)
        lengths = self.history_lengths[idx]
        offsets = np.zeros(idx.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = _ragged_ranges(self.history_offsets[idx], lengths, offsets)
        return Samples(
            uid=self.uid[idx],
            anchor_timestamp=self.anchor_timestamp[idx],
            item_id=self.item_id[idx],
            artist_id=self.artist_id[idx],
            album_id=self.album_id[idx],
            label=self.label[idx],
            is_organic=self.is_organic[idx],
            history_offsets=offsets,
            history_item_id=self.history_item_id[flat],
            history_artist_id=self.history_artist_id[flat],
            history_album_id=self.history_album_id[flat],
            history_action_weight=self.history_action_weight[flat],
            history_timestamp=self.history_timestamp[flat],
        )


def _ragged_ranges(starts: np.ndarray, lengths: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Concatenation of ``range(starts[i], starts[i] + lengths[i])`` for all i."""
    total = int(offsets[-1])
    return np.repeat(starts - offsets[:-1], lengths) + np.arange(total, dtype=np.int64)


_COLUMNS = ["uid", "timestamp", "item_id", "is_organic", "played_ratio_pct", "event_type"]


def event_arrays(frame: FrameIn, what: str) -> dict[str, np.ndarray]:
    """The columns samples are cut from, as numpy arrays of their narrowest exact dtypes (ids
    and timestamps uint32, ``played_ratio_pct`` int32 with -1 for null, ``event_type`` its
    uint8 code), after checking that the rows are sorted by (uid, timestamp); errors name
    ``what``."""
    lazy = frame.lazy()
    schema = lazy.collect_schema()
    missing = [c for c in _COLUMNS if c not in schema]
    if missing:
        raise ValueError(f"{what}: missing columns {missing}")
    etype = pl.col("event_type")
    if schema["event_type"] != EVENT_TYPE_DTYPE:
        etype = etype.cast(pl.String).cast(EVENT_TYPE_DTYPE)
    df = lazy.select(
        pl.col("uid").cast(pl.UInt32),
        pl.col("timestamp").cast(pl.UInt32),
        pl.col("item_id").cast(pl.UInt32),
        pl.col("is_organic").cast(pl.UInt8),
        pl.col("played_ratio_pct").cast(pl.Int32).fill_null(-1),
        etype.to_physical().cast(pl.UInt8).alias("event_type"),
    ).collect()
    out = {c: df[c].to_numpy() for c in _COLUMNS}
    uid, ts = out["uid"].astype(np.int64), out["timestamp"].astype(np.int64)
    if uid.size > 1:
        du, dt = np.diff(uid), np.diff(ts)
        if ((du < 0) | ((du == 0) & (dt < 0))).any():
            raise ValueError(f"{what}: rows are not sorted by (uid, timestamp)")
    return out


def build_samples(
    history_events: FrameIn,
    anchor_events: FrameIn | None,
    item_features: ItemFeatures,
    config: SampleConfig,
) -> Samples:
    """Build the samples of the listens in ``anchor_events`` (or of ``history_events`` when
    ``anchor_events`` is None); see the module docstring for the exact semantics."""
    hist = event_arrays(history_events, "history_events")
    if anchor_events is None or anchor_events is history_events:
        ev = hist
        anchor_part = np.ones(hist["uid"].size, dtype=bool)
    else:
        anch = event_arrays(anchor_events, "anchor_events")
        merged = {c: np.concatenate([hist[c], anch[c]]) for c in _COLUMNS}
        part = np.concatenate(
            [np.zeros(hist["uid"].size, dtype=bool), np.ones(anch["uid"].size, dtype=bool)]
        )
        order = np.argsort(merged["uid"], kind="stable")
        ev = {c: v[order] for c, v in merged.items()}
        anchor_part = part[order]
        same = ev["uid"][1:] == ev["uid"][:-1]
        if (same & (ev["timestamp"][1:] < ev["timestamp"][:-1])).any():
            raise ValueError(
                "anchor_events: a user's anchor event precedes one of the user's history events"
            )
    return _build(ev, anchor_part, item_features, config)


def _build(
    ev: dict[str, np.ndarray],
    anchor_part: np.ndarray,
    item_features: ItemFeatures,
    config: SampleConfig,
) -> Samples:
    uid, ts, item = ev["uid"], ev["timestamp"], ev["item_id"]
    ratio, code = ev["played_ratio_pct"], ev["event_type"]
    n = uid.size
    new_user = np.ones(n, dtype=bool)
    if n > 1:
        new_user[1:] = uid[1:] != uid[:-1]
    user_first = np.maximum.accumulate(np.where(new_user, np.arange(n), 0))
    pos = np.arange(n) - user_first

    listen = code == EVENT_TYPE_CODES["listen"]
    plus = listen & (ratio >= LISTEN_PLUS_MIN_RATIO)
    like = code == EVENT_TYPE_CODES["like"]
    skip = listen & ~plus

    anchors = np.flatnonzero(listen & anchor_part & (pos >= config.min_history))
    window_lo = np.maximum(user_first[anchors], anchors - config.causal_window)

    length = config.history_length
    if config.strategy == "last_n":
        hist_idx, lengths = _last_events(plus | like | skip, anchors, window_lo, length)
    else:
        per_pool = length // 3
        parts = [_last_events(m, anchors, window_lo, per_pool) for m in (plus, like, skip)]
        lengths = parts[0][1] + parts[1][1] + parts[2][1]
        idx = np.concatenate([p[0] for p in parts])
        owner = np.concatenate([np.repeat(np.arange(anchors.size), p[1]) for p in parts])
        # Each pool's part is sorted by (owner, position): three sorted runs, which the
        # stable (run-merging) sort combines in linear time.
        hist_idx = idx[np.argsort(owner * max(n, 1) + idx, kind="stable")]

    offsets = np.zeros(anchors.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    # Per-event features first (cheap), then one gather per history array.
    action = np.where(plus, ACTION_LISTEN_PLUS, np.where(like, ACTION_LIKE, ACTION_SKIP))
    action = action.astype(np.uint8)
    item32 = item.astype(np.uint32)
    ts32 = ts.astype(np.uint32)
    artist, album = item_features.lookup(item32)
    return Samples(
        uid=uid[anchors].astype(np.uint32),
        anchor_timestamp=ts32[anchors],
        item_id=item32[anchors],
        artist_id=artist[anchors],
        album_id=album[anchors],
        label=plus[anchors].astype(np.uint8),
        is_organic=ev["is_organic"][anchors],
        history_offsets=offsets,
        history_item_id=item32[hist_idx],
        history_artist_id=artist[hist_idx],
        history_album_id=album[hist_idx],
        history_action_weight=action[hist_idx],
        history_timestamp=ts32[hist_idx],
    )


def _last_events(
    mask: np.ndarray, anchors: np.ndarray, window_lo: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Stream indices of the last ``k`` events with ``mask`` in ``[window_lo, anchor)`` of
    every anchor (concatenated, oldest first per anchor), and their counts."""
    positions = np.flatnonzero(mask)
    before = np.zeros(mask.size + 1, dtype=np.int64)
    np.cumsum(mask, out=before[1:])
    end = before[anchors]
    lengths = np.minimum(end - before[window_lo], k)
    offsets = np.zeros(anchors.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return positions[_ragged_ranges(end - lengths, lengths, offsets)], lengths
