"""Streaming order over a sample store: time windows, seeded in-window shuffles, a user holdout
and the per-rank batches of a distributed run, with a skip for resuming mid-window.

The global sample order of a :class:`BatchPlan` is fixed by its fields alone: for each source in
turn (a train window, or the test split), the source's anchors, filtered by the user holdout,
in the permutation drawn from ``numpy.random.default_rng([seed, 1, window, epoch])``
(``[seed, 2, epoch]`` for the test split) or in store order without ``shuffle``. The first ``skip`` samples of the first
source are dropped (they were trained before a restart). The rest is cut into global batches of
``batch_size * world_size`` samples, and rank ``r`` takes the ``r``-th ``batch_size`` slice of
each; a last, incomplete global batch (kept for evaluation) is shared out as evenly as the ranks
allow. Every rank computes the same order without communication.

Time order is strict between sources: a window holds the anchors whose time falls in
``[first_window_start + w * window_seconds, ... + window_seconds)``, so every anchor of window
``T`` is earlier than every anchor of window ``T + 1``, and every train anchor is earlier than
the test split (the preprocessing leaves a 30-minute gap).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np

from yambda_data.crosses import xxh64_int64
from yambda_data.store import SampleStore

__all__ = ["HOLDOUT_BUCKETS", "TEST", "BatchPlan", "holdout_users"]

TEST = "test"
"""Source name of the test split (the day after the gap)."""
HOLDOUT_BUCKETS = 1_000_000
"""A uid is held out when ``xxh64(uid, seed=salt) % HOLDOUT_BUCKETS < fraction * this``."""

Source = int | Literal["test"]


def holdout_users(uid: np.ndarray, fraction: float, salt: int = 0) -> np.ndarray:
    """Boolean mask of the uids in the user holdout (a fixed hash of uid and salt)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"holdout fraction must be in [0, 1], got {fraction}")
    bucket = xxh64_int64([np.asarray(uid)], seed=salt) % np.uint64(HOLDOUT_BUCKETS)
    return bucket < np.uint64(round(fraction * HOLDOUT_BUCKETS))


@dataclass(frozen=True)
class BatchPlan:
    """Per-rank batches of anchor event indices over a sequence of sources (see the module
    docstring for the order). Plain data: it pickles into loader workers."""

    sources: tuple[Source, ...]
    """Train windows (ints) and/or ``"test"``, in training or evaluation order."""
    batch_size: int
    """Samples per rank per batch."""
    rank: int = 0
    world_size: int = 1
    shuffle: bool = True
    """Seeded in-source shuffle; off for evaluation."""
    seed: int = 0
    epoch: int = 0
    """Pass over the sources; each pass draws new in-source permutations."""
    drop_last: bool = True
    """Drop a final incomplete global batch (training); keep it (evaluation), shared out
    evenly: a rank's share is empty only when it holds fewer samples than there are ranks."""
    skip: int = 0
    """Samples of the first source's order consumed before a restart."""
    holdout_fraction: float = 0.0
    """Share of users held out by hash (0 = none)."""
    holdout_salt: int = 0
    holdout: Literal["exclude", "only"] = "exclude"
    """Train on the users outside the holdout ("exclude"), or evaluate on those in it ("only")."""

    def __post_init__(self) -> None:
        if isinstance(self.sources, list):
            object.__setattr__(self, "sources", tuple(self.sources))
        for source in self.sources:
            if source != TEST and (not isinstance(source, int) or isinstance(source, bool)):
                raise ValueError(f"BatchPlan.sources: {source!r} is neither a window nor 'test'")
            if isinstance(source, int) and source < 0:
                raise ValueError(f"BatchPlan.sources: negative window {source}")
        for name in ("batch_size", "world_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"BatchPlan.{name}: must be a positive int, got {value!r}")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"BatchPlan.rank: must be in [0, {self.world_size}), got {self.rank}")
        for name in ("seed", "epoch"):
            if getattr(self, name) < 0:
                raise ValueError(f"BatchPlan.{name}: must be >= 0, got {getattr(self, name)}")
        if self.skip < 0:
            raise ValueError(f"BatchPlan.skip: must be >= 0, got {self.skip}")
        if not 0.0 <= self.holdout_fraction <= 1.0:
            raise ValueError(
                f"BatchPlan.holdout_fraction: must be in [0, 1], got {self.holdout_fraction}"
            )
        if self.holdout not in ("exclude", "only"):
            raise ValueError(
                f"BatchPlan.holdout: must be 'exclude' or 'only', got {self.holdout!r}"
            )

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.world_size

    def source_anchors(self, store: SampleStore, source: Source) -> np.ndarray:
        """The anchors of ``source`` that this plan uses (holdout applied), in store order."""
        anchors = np.asarray(store.test_anchors if source == TEST else store.window(source))
        if self.holdout_fraction > 0.0:
            held = holdout_users(
                store.arrays["user_uid"][store.users_of(anchors)],
                self.holdout_fraction,
                self.holdout_salt,
            )
            anchors = anchors[held] if self.holdout == "only" else anchors[~held]
        return anchors

    def source_order(self, store: SampleStore, source: Source) -> np.ndarray:
        """The anchors of ``source`` in this plan's order (holdout applied, nothing skipped)."""
        anchors = self.source_anchors(store, source)
        if self.shuffle:
            if source == TEST:
                key = [self.seed, 2, self.epoch]
            else:
                key = [self.seed, 1, source, self.epoch]
            anchors = anchors[np.random.default_rng(key).permutation(anchors.size)]
        return anchors

    def _checked_skip(self, source: Source, size: int) -> int:
        if self.skip > size:
            raise ValueError(
                f"BatchPlan.skip={self.skip} exceeds the {size} samples of source {source!r}"
            )
        return self.skip

    def global_order(self, store: SampleStore) -> Iterator[np.ndarray]:
        """Each source's anchors in order, the first one without its skipped samples."""
        for i, source in enumerate(self.sources):
            order = self.source_order(store, source)
            if i == 0 and self.skip:
                order = order[self._checked_skip(source, order.size) :]
            yield order

    def source_sizes(self, store: SampleStore) -> list[int]:
        """The size of each order :meth:`global_order` yields, without drawing the orders."""
        sizes = [self.source_anchors(store, source).size for source in self.sources]
        if sizes and self.skip:
            sizes[0] -= self._checked_skip(self.sources[0], sizes[0])
        return sizes

    def batches(self, store: SampleStore) -> Iterator[np.ndarray]:
        """This rank's batches: int64 anchor event indices, ``batch_size`` each (the last one
        of a source may be shorter, or empty on some ranks, when ``drop_last`` is off)."""
        gbs = self.global_batch_size
        for order in self.global_order(store):
            full = order.size // gbs
            stop = full if self.drop_last else -(-order.size // gbs)
            for b in range(full):
                start = b * gbs + self.rank * self.batch_size
                yield order[start : start + self.batch_size]
            if stop > full:
                yield order[full * gbs :][self._tail_slice(order.size - full * gbs)]

    def _tail_slice(self, size: int) -> slice:
        """This rank's share of a last, incomplete global batch of `size` samples: the ranks
        take turns as evenly as they can (sizes differ by at most one), so a rank is left
        empty only when the batch holds fewer samples than there are ranks."""
        share, extra = divmod(size, self.world_size)
        start = self.rank * share + min(self.rank, extra)
        return slice(start, start + share + (self.rank < extra))

    def num_batches(self, store: SampleStore) -> int:
        """Number of batches :meth:`batches` yields (the same on every rank)."""
        gbs = self.global_batch_size
        sizes = self.source_sizes(store)
        return sum(n // gbs if self.drop_last else -(-n // gbs) for n in sizes)

    def num_samples(self, store: SampleStore) -> int:
        """Samples over all ranks (global batches times their size)."""
        gbs = self.global_batch_size
        sizes = self.source_sizes(store)
        return sum((n // gbs) * gbs if self.drop_last else n for n in sizes)
