"""TorchRec batches of DLRMv4 samples (the modules of the package that import torch are this
one and :mod:`yambda_data.loader`).

A batch of B samples is two KeyedJaggedTensors and the labels, with the reference's key names
and order:

* ``uih`` (user interaction history), keys :data:`UIH_KEYS`: ``uid`` and the seven hashed
  cross features (:data:`~yambda_data.crosses.CROSS_FEATURE_NAMES`), one value per sample;
  ``item_id``, ``artist_id``, ``album_id``, ``action_weight``, ``action_timestamp`` and
  ``dummy_watch_time`` (zeros) with the sample's history, oldest first; ``dummy_query_time``,
  one value per sample: the last history timestamp (the anchor's time for an empty history).
* ``candidates``, keys :data:`CANDIDATE_KEYS`, one value per sample: the anchor's item, its
  artist and album features, the query time (``item_query_time``: the same value as
  ``dummy_query_time``, i.e. the last history timestamp, not the anchor's own time, as in the
  reference; it drives the model's time buckets and time features), its supervision bits
  (``item_action_weight``: only the listen_plus bit, 1 for a listen_plus anchor and 0
  otherwise; the label, not a model input) and ``item_dummy_watchtime`` (1).
* ``labels``: float32 [B], listen_plus of the anchor.

All values are int64.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from yambda_data.crosses import CROSS_FEATURE_NAMES, CROSS_FEATURES, CrossFeature, cross_features
from yambda_data.samples import ACTION_LISTEN_PLUS, Samples

__all__ = [
    "CANDIDATE_KEYS",
    "CROSS_FEATURE_NAMES",
    "HISTORY_KEYS",
    "KEY_ACTION_TIMESTAMP",
    "KEY_ACTION_WEIGHT",
    "KEY_ALBUM_ID",
    "KEY_ARTIST_ID",
    "KEY_CANDIDATE_ACTION_WEIGHT",
    "KEY_CANDIDATE_ALBUM_ID",
    "KEY_CANDIDATE_ARTIST_ID",
    "KEY_CANDIDATE_ITEM_ID",
    "KEY_CANDIDATE_WATCH_TIME",
    "KEY_DUMMY_QUERY_TIME",
    "KEY_DUMMY_WATCH_TIME",
    "KEY_ITEM_ID",
    "KEY_QUERY_TIME",
    "KEY_UID",
    "UIH_KEYS",
    "BatchIterator",
    "HSTUBatch",
    "make_batch",
    "uih_keys",
]

KEY_UID = "uid"
KEY_ITEM_ID = "item_id"
KEY_ARTIST_ID = "artist_id"
KEY_ALBUM_ID = "album_id"
KEY_ACTION_WEIGHT = "action_weight"
KEY_ACTION_TIMESTAMP = "action_timestamp"
KEY_DUMMY_WATCH_TIME = "dummy_watch_time"
KEY_DUMMY_QUERY_TIME = "dummy_query_time"
HISTORY_KEYS: tuple[str, ...] = (
    KEY_ITEM_ID,
    KEY_ARTIST_ID,
    KEY_ALBUM_ID,
    KEY_ACTION_WEIGHT,
    KEY_ACTION_TIMESTAMP,
    KEY_DUMMY_WATCH_TIME,
)
"""The UIH keys with one value per history event."""
UIH_KEYS: tuple[str, ...] = (KEY_UID, *CROSS_FEATURE_NAMES, *HISTORY_KEYS, KEY_DUMMY_QUERY_TIME)
"""The UIH keys of batches with the reference's crosses (see :func:`uih_keys` for others)."""


def uih_keys(crosses: tuple[CrossFeature, ...] = CROSS_FEATURES) -> tuple[str, ...]:
    """The UIH keys of batches made with the cross features ``crosses``."""
    return (KEY_UID, *(c.name for c in crosses), *HISTORY_KEYS, KEY_DUMMY_QUERY_TIME)


KEY_CANDIDATE_ITEM_ID = "item_candidate_id"
KEY_CANDIDATE_ARTIST_ID = "item_candidate_artist_id"
KEY_CANDIDATE_ALBUM_ID = "item_candidate_album_id"
KEY_QUERY_TIME = "item_query_time"
KEY_CANDIDATE_ACTION_WEIGHT = "item_action_weight"
KEY_CANDIDATE_WATCH_TIME = "item_dummy_watchtime"
CANDIDATE_KEYS: tuple[str, ...] = (
    KEY_CANDIDATE_ITEM_ID,
    KEY_CANDIDATE_ARTIST_ID,
    KEY_CANDIDATE_ALBUM_ID,
    KEY_QUERY_TIME,
    KEY_CANDIDATE_ACTION_WEIGHT,
    KEY_CANDIDATE_WATCH_TIME,
)


@dataclass
class HSTUBatch:
    uih: KeyedJaggedTensor
    candidates: KeyedJaggedTensor
    labels: torch.Tensor

    @property
    def batch_size(self) -> int:
        return int(self.labels.shape[0])

    def to(self, device: torch.device | str, non_blocking: bool = False) -> HSTUBatch:
        return HSTUBatch(
            uih=self.uih.to(device, non_blocking=non_blocking),
            candidates=self.candidates.to(device, non_blocking=non_blocking),
            labels=self.labels.to(device, non_blocking=non_blocking),
        )

    def pin_memory(self) -> HSTUBatch:
        return HSTUBatch(
            uih=self.uih.pin_memory(),
            candidates=self.candidates.pin_memory(),
            labels=self.labels.pin_memory(),
        )


def _raw_ids(features: np.ndarray) -> np.ndarray:
    """Artist/album features (id + 1, 0 = none) back to the raw ids the crosses hash, with 0
    for "none" as in the reference."""
    return np.maximum(features.astype(np.int64) - 1, 0)


def _filled(parts: list[np.ndarray], total: int) -> torch.Tensor:
    """One int64 tensor holding ``parts`` back to back, written in place (no temporaries)."""
    out = torch.empty(total, dtype=torch.int64)
    view = out.numpy()
    at = 0
    for part in parts:
        view[at : at + part.size] = part
        at += part.size
    return out


def make_batch(
    samples: Samples,
    indices: np.ndarray | None = None,
    *,
    crosses: tuple[CrossFeature, ...] = CROSS_FEATURES,
) -> HSTUBatch:
    """The batch of ``samples[indices]`` (in that order), or of all ``samples``, with the
    cross features ``crosses`` (default: the reference's seven and their table sizes; a
    smaller model passes the same crosses with smaller tables)."""
    part = samples if indices is None else samples.take(np.asarray(indices, dtype=np.int64))
    b = len(part)
    lengths = part.history_lengths
    n_hist = int(part.history_offsets[-1])
    ones = np.ones(b, dtype=np.int64)
    crossed = cross_features(
        uid=part.uid,
        item_id=part.item_id,
        artist_id=_raw_ids(part.artist_id),
        album_id=_raw_ids(part.album_id),
        timestamp=part.anchor_timestamp,
        is_organic=part.is_organic,
        features=crosses,
    )
    # The query time is the last history event's time (the anchor's own time only for an
    # empty history): the reference's, shared by dummy_query_time and item_query_time.
    query_time = part.anchor_timestamp.astype(np.int64)
    has_history = lengths > 0
    query_time[has_history] = part.history_timestamp[part.history_offsets[1:][has_history] - 1]
    per_sample = [part.uid, *(crossed[c.name] for c in crosses)]
    history = [
        part.history_item_id,
        part.history_artist_id,
        part.history_album_id,
        part.history_action_weight,
        part.history_timestamp,
        np.zeros(n_hist, dtype=np.int64),
    ]
    uih = KeyedJaggedTensor(
        keys=list(uih_keys(crosses)),
        values=_filled(
            [*per_sample, *history, query_time], b * (len(per_sample) + 1) + n_hist * len(history)
        ),
        lengths=torch.from_numpy(
            np.concatenate([ones] * len(per_sample) + [lengths] * len(history) + [ones])
        ),
        stride=b,
    )
    # The supervision bits: only the listen_plus bit (the one task), so a skip anchor has 0.
    action = np.where(part.label == 1, ACTION_LISTEN_PLUS, 0)
    candidate_values = [
        part.item_id,
        part.artist_id,
        part.album_id,
        query_time,
        action,
        ones,
    ]
    candidates = KeyedJaggedTensor(
        keys=list(CANDIDATE_KEYS),
        values=_filled(candidate_values, b * len(CANDIDATE_KEYS)),
        lengths=torch.ones(b * len(CANDIDATE_KEYS), dtype=torch.int64),
        stride=b,
    )
    labels = torch.from_numpy(part.label.astype(np.float32))
    return HSTUBatch(uih=uih, candidates=candidates, labels=labels)


class BatchIterator:
    """Batches over ``samples``; the order of epoch ``e`` is a permutation drawn from
    ``(seed, e)`` when ``shuffle`` (else the sample order). Like a distributed sampler, the
    epoch is set explicitly with :meth:`set_epoch`; iterating twice without it repeats the
    same batches."""

    def __init__(
        self,
        samples: Samples,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size: must be a positive int, got {batch_size!r}")
        if seed < 0:
            raise ValueError(f"seed: must be >= 0, got {seed}")
        self.samples = samples
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        if epoch < 0:
            raise ValueError(f"epoch: must be >= 0, got {epoch}")
        self.epoch = epoch

    def order(self, epoch: int | None = None) -> np.ndarray:
        """The sample order of ``epoch`` (default: the current one)."""
        e = self.epoch if epoch is None else epoch
        n = len(self.samples)
        if not self.shuffle:
            return np.arange(n, dtype=np.int64)
        return np.random.default_rng([self.seed, e]).permutation(n).astype(np.int64)

    def __len__(self) -> int:
        n = len(self.samples)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[HSTUBatch]:
        order = self.order()
        for i in range(len(self)):
            yield make_batch(self.samples, order[i * self.batch_size : (i + 1) * self.batch_size])

    def epochs(self, start_epoch: int = 0) -> Iterator[tuple[int, HSTUBatch]]:
        """(epoch, batch) pairs without end: epoch ``start_epoch``, then the next, and so on."""
        if len(self) == 0:
            raise ValueError(
                f"no batch of {self.batch_size} in {len(self.samples)} samples "
                f"(drop_last={self.drop_last})"
            )
        epoch = start_epoch
        while True:
            self.set_epoch(epoch)
            for batch in self:
                yield epoch, batch
            epoch += 1
