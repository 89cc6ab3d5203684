"""TorchRec batches of DLRMv4 samples (the only module of the package that imports torch).

A batch of B samples is two KeyedJaggedTensors and the labels:

* ``uih`` (user interaction history), keys :data:`UIH_KEYS`: ``uid`` with one value per
  sample, then ``item_id``, ``artist_id``, ``album_id``, ``action_weight`` and
  ``action_timestamp`` with the sample's history (oldest first);
* ``candidates``, keys :data:`CANDIDATE_KEYS`, one value per sample: the anchor's item, its
  artist and album features, and its timestamp (``item_query_time``);
* ``labels``: float32 [B], listen_plus of the anchor.

All values are int64.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from .samples import Samples

__all__ = [
    "CANDIDATE_KEYS",
    "HISTORY_KEYS",
    "KEY_ACTION_TIMESTAMP",
    "KEY_ACTION_WEIGHT",
    "KEY_ALBUM_ID",
    "KEY_ARTIST_ID",
    "KEY_CANDIDATE_ALBUM_ID",
    "KEY_CANDIDATE_ARTIST_ID",
    "KEY_CANDIDATE_ITEM_ID",
    "KEY_ITEM_ID",
    "KEY_QUERY_TIME",
    "KEY_UID",
    "UIH_KEYS",
    "BatchIterator",
    "HSTUBatch",
    "make_batch",
]

KEY_UID = "uid"
KEY_ITEM_ID = "item_id"
KEY_ARTIST_ID = "artist_id"
KEY_ALBUM_ID = "album_id"
KEY_ACTION_WEIGHT = "action_weight"
KEY_ACTION_TIMESTAMP = "action_timestamp"
HISTORY_KEYS: tuple[str, ...] = (
    KEY_ITEM_ID,
    KEY_ARTIST_ID,
    KEY_ALBUM_ID,
    KEY_ACTION_WEIGHT,
    KEY_ACTION_TIMESTAMP,
)
UIH_KEYS: tuple[str, ...] = (KEY_UID, *HISTORY_KEYS)

KEY_CANDIDATE_ITEM_ID = "item_candidate_id"
KEY_CANDIDATE_ARTIST_ID = "item_candidate_artist_id"
KEY_CANDIDATE_ALBUM_ID = "item_candidate_album_id"
KEY_QUERY_TIME = "item_query_time"
CANDIDATE_KEYS: tuple[str, ...] = (
    KEY_CANDIDATE_ITEM_ID,
    KEY_CANDIDATE_ARTIST_ID,
    KEY_CANDIDATE_ALBUM_ID,
    KEY_QUERY_TIME,
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


def _i64(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))


def make_batch(samples: Samples, indices: np.ndarray) -> HSTUBatch:
    """The batch of ``samples[indices]`` (in that order)."""
    part = samples.take(np.asarray(indices, dtype=np.int64))
    b = len(part)
    lengths = part.history_lengths
    ones = np.ones(b, dtype=np.int64)
    uih_values = np.concatenate(
        [
            part.uid.astype(np.int64),
            part.history_item_id.astype(np.int64),
            part.history_artist_id.astype(np.int64),
            part.history_album_id.astype(np.int64),
            part.history_action_weight.astype(np.int64),
            part.history_timestamp.astype(np.int64),
        ]
    )
    uih_lengths = np.concatenate([ones] + [lengths] * len(HISTORY_KEYS))
    uih = KeyedJaggedTensor(
        keys=list(UIH_KEYS), values=_i64(uih_values), lengths=_i64(uih_lengths), stride=b
    )
    cand_values = np.concatenate(
        [
            part.item_id.astype(np.int64),
            part.artist_id.astype(np.int64),
            part.album_id.astype(np.int64),
            part.anchor_timestamp.astype(np.int64),
        ]
    )
    candidates = KeyedJaggedTensor(
        keys=list(CANDIDATE_KEYS),
        values=_i64(cand_values),
        lengths=_i64(np.ones(b * len(CANDIDATE_KEYS), dtype=np.int64)),
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
