"""Random batches in the models' input formats, for tests and benchmarks: `random_batch` as
`HSTURanker` takes them (KeyedJaggedTensors, needs TorchRec), `random_plain_batch` as
`PlainTableRanker` takes them (plain tensors), the same numbers for the same arguments; and
`ThreadRanks`, ranks as threads with stand-ins for the collectives a multi-rank run uses."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from hstu_model.config import TINY_CONTEXTUAL_FEATURES, FeatureNames
from hstu_model.model import Jagged, keyed_jagged

if TYPE_CHECKING:
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

DUMMY_WATCH_TIME = "dummy_watch_time"
"""UIH key the model does not read: zeros, one per history event (as yambda-data emits it)."""
DUMMY_QUERY_TIME = "dummy_query_time"
"""UIH key the model does not read: the last history timestamp, one per sample."""
CANDIDATE_ACTION_WEIGHT = "item_action_weight"
"""Candidate key the model must not read: the candidate's action bits, i.e. its label."""
CANDIDATE_WATCH_TIME = "item_dummy_watchtime"
"""Candidate key the model does not read: ones."""

LISTEN_PLUS = 1
"""Action bits of the candidate's item_action_weight for a positive and a negative label."""


@dataclass
class Batch:
    """A batch as the model and Trainer take it."""

    uih: KeyedJaggedTensor
    candidates: KeyedJaggedTensor
    labels: torch.Tensor


@dataclass
class PlainBatch:
    """A batch as `PlainTableRanker` takes it: each key's values and lengths."""

    uih: dict[str, Jagged]
    candidates: dict[str, Jagged]
    labels: torch.Tensor

    def to(self, device: torch.device) -> PlainBatch:
        """The same batch on `device`."""

        def moved(features: dict[str, Jagged]) -> dict[str, Jagged]:
            return {
                k: Jagged(j.values.to(device), j.lengths.to(device)) for k, j in features.items()
            }

        return PlainBatch(moved(self.uih), moved(self.candidates), self.labels.to(device))


def random_batch(
    history_lengths: list[int],
    vocab_sizes: Mapping[str, int],
    seed: int = 0,
    names: FeatureNames | None = None,
    contextual_tables: Mapping[str, int] | None = None,
) -> Batch:
    """`random_plain_batch` of the same arguments as KeyedJaggedTensors."""
    plain = random_plain_batch(history_lengths, vocab_sizes, seed, names, contextual_tables)
    return Batch(keyed_jagged(plain.uih), keyed_jagged(plain.candidates), plain.labels)


def random_plain_batch(
    history_lengths: list[int],
    vocab_sizes: Mapping[str, int],
    seed: int = 0,
    names: FeatureNames | None = None,
    contextual_tables: Mapping[str, int] | None = None,
) -> PlainBatch:
    """Uniform ids below the table sizes, one candidate per sample, times on a 5 s grid.

    The keys and their order are yambda-data's: UIH `uid`, the contextual features of
    `contextual_tables` (name -> rows; default: the `tiny` preset's seven crosses), `item_id`,
    `artist_id`, `album_id`, `action_weight`, `action_timestamp`, `dummy_watch_time`,
    `dummy_query_time`; candidates `item_candidate_id`, `item_candidate_artist_id`,
    `item_candidate_album_id`, `item_query_time` (the last history time, as
    `dummy_query_time`; the anchor's time for an empty history), `item_action_weight` (the
    listen_plus bit of the label: 1 or 0), `item_dummy_watchtime`. `vocab_sizes` gives the rows of uid, item_id, artist_id and
    album_id.
    """
    names = names or FeatureNames()
    if contextual_tables is None:
        contextual_tables = {f.name: f.num_embeddings for f in TINY_CONTEXTUAL_FEATURES}
    g = torch.Generator().manual_seed(seed)
    batch_size, total = len(history_lengths), sum(history_lengths)
    lengths = torch.tensor(history_lengths, dtype=torch.int64)
    ones = torch.ones(batch_size, dtype=torch.int64)

    def ids(rows: int, n: int) -> torch.Tensor:
        return torch.randint(0, rows, (n,), generator=g)

    anchor_time = 1_000_000 + 5 * torch.randint(0, 100_000, (batch_size,), generator=g)
    per_sample_times = [
        torch.sort(anchor_time[b] - 5 * torch.randint(1, 50_000, (n,), generator=g)).values
        for b, n in enumerate(history_lengths)
    ]
    action_time = torch.cat(per_sample_times or [torch.empty(0, dtype=torch.int64)])
    last_time = torch.tensor(
        [int(t[-1] if t.numel() else anchor_time[b]) for b, t in enumerate(per_sample_times)],
        dtype=torch.int64,
    )
    # Drawn in this order, which fixes the numbers of a seed.
    contextual = {name: ids(rows, batch_size) for name, rows in contextual_tables.items()}
    uid = ids(vocab_sizes["uid"], batch_size)
    history = {
        names.item_id: ids(vocab_sizes["item_id"], total),
        names.artist_id: ids(vocab_sizes["artist_id"], total),
        names.album_id: ids(vocab_sizes["album_id"], total),
        names.action_weight: torch.tensor([1, 2, 4, 3], dtype=torch.int64)[
            torch.randint(0, 4, (total,), generator=g)
        ],
        names.action_timestamp: action_time,
        DUMMY_WATCH_TIME: torch.zeros(total, dtype=torch.int64),
    }
    labels = torch.randint(0, 2, (batch_size,), generator=g).to(torch.float32)
    candidate_ids = {
        names.candidate_item_id: ids(vocab_sizes["item_id"], batch_size),
        names.candidate_artist_id: ids(vocab_sizes["artist_id"], batch_size),
        names.candidate_album_id: ids(vocab_sizes["album_id"], batch_size),
    }
    uih = {
        names.uid: Jagged(uid, ones),
        **{name: Jagged(values, ones) for name, values in contextual.items()},
        **{name: Jagged(values, lengths) for name, values in history.items()},
        DUMMY_QUERY_TIME: Jagged(last_time, ones),
    }
    candidates = {
        **{name: Jagged(values, ones) for name, values in candidate_ids.items()},
        names.query_time: Jagged(last_time, ones),
        CANDIDATE_ACTION_WEIGHT: Jagged(
            torch.where(labels > 0, LISTEN_PLUS, 0).to(torch.int64), ones
        ),
        CANDIDATE_WATCH_TIME: Jagged(ones, ones),
    }
    return PlainBatch(uih, candidates, labels)


def _slice_kjt(kjt: KeyedJaggedTensor, start: int, stop: int) -> KeyedJaggedTensor:
    from torchrec.sparse.jagged_tensor import JaggedTensor, KeyedJaggedTensor

    jts = {}
    for key, jt in kjt.to_dict().items():
        offsets = jt.offsets()
        lo, hi = int(offsets[start]), int(offsets[stop])
        jts[key] = JaggedTensor(values=jt.values()[lo:hi], lengths=jt.lengths()[start:stop])
    return KeyedJaggedTensor.from_jt_dict(jts)


def slice_batch(batch: Batch, start: int, stop: int) -> Batch:
    """Samples `[start, stop)` of `batch` (same keys in the same order), e.g. one rank's share
    of a global batch: `slice_batch(b, rank * n, (rank + 1) * n)`."""
    size = batch.labels.shape[0]
    if not 0 <= start <= stop <= size:
        raise ValueError(f"slice_batch: [{start}, {stop}) is not within a batch of {size}")
    return Batch(
        _slice_kjt(batch.uih, start, stop),
        _slice_kjt(batch.candidates, start, stop),
        batch.labels[start:stop],
    )


class ThreadRanks:
    """`n` ranks as threads, with stand-ins for the collectives of `Distributed`: `sum_array`
    (the elementwise sum of every rank's array) and `concat` (every rank's array, concatenated
    in rank order)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._barrier = threading.Barrier(n, timeout=60)
        self._parts: list[np.ndarray | None] = [None] * n

    def _exchange(self, rank: int, values: np.ndarray) -> list[np.ndarray]:
        self._parts[rank] = np.array(values, copy=True)
        self._barrier.wait()
        parts = list(self._parts)
        self._barrier.wait()  # nobody overwrites a part before everyone read them
        return parts

    def sum_array(self, rank: int):
        return lambda values: np.sum(self._exchange(rank, values), axis=0)

    def concat(self, rank: int):
        return lambda values: np.concatenate(self._exchange(rank, values))

    def run(self, work) -> list:
        """work(rank) on every rank at once; the ranks' results."""
        results: list = [None] * self.n
        errors: list[BaseException] = []

        def target(rank: int) -> None:
            try:
                results[rank] = work(rank)
            except BaseException as error:  # re-raised in the caller
                errors.append(error)
                self._barrier.abort()

        threads = [threading.Thread(target=target, args=(r,)) for r in range(self.n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return results
