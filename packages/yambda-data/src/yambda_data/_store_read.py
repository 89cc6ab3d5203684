"""Reading a sample store (its layout: :mod:`yambda_data.store`): the format's constants,
:class:`SampleStore`, which memory-maps a built store and cuts samples from it, and the
vectorized searches a cut is made of."""

from __future__ import annotations

import hashlib
import json
import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np

from yambda_data._checksums import sha256_files
from yambda_data._io import StoreError as StoreError  # defined beside the other errors
from yambda_data.samples import (
    ACTION_LIKE,
    ACTION_LISTEN_PLUS,
    ACTION_SKIP,
    ItemFeatures,
    SampleConfig,
    Samples,
    VocabSizes,
)
from yambda_data.split import SplitMeta

STORE_FORMAT = 1
MANIFEST_FILE = "manifest.json"
READY_FILE = "READY"
POOLS: tuple[tuple[str, int], ...] = (
    ("listen_plus", ACTION_LISTEN_PLUS),
    ("like", ACTION_LIKE),
    ("skip", ACTION_SKIP),
)
"""History pools in the order of the interleaved strategy, with their action bit."""

ARRAY_FILES: tuple[str, ...] = (
    "user_uid",
    "user_offset",
    "event_timestamp",
    "event_item_id",
    "event_action",
    "event_is_organic",
    "test_anchor",
    *(f"pool_{pool}_{kind}" for pool, _ in POOLS for kind in ("position", "offset")),
    "train_anchor",
    "train_window_offset",
    "item_artist_id",
    "item_album_id",
)
"""The arrays of a store; with :data:`MANIFEST_FILE` and :data:`READY_FILE`, every file in it."""


class SampleStore:
    """A built store, memory-mapped read-only; cut samples with :meth:`samples`.

    Memory: samples are read all over the event arrays, and on kernels whose page cache holds
    large folios (Linux 6.x on ext4, for one) a read maps the whole folio around it, up to
    2 MiB. Without a bound, a reader's RSS would grow towards the store's size (9.8 GiB at
    Yambda-500m size) with clean file pages. So between the steps of a cut, once this
    process's file-backed resident memory passes :attr:`mapped_budget_bytes`, the store's
    mapped pages are released (:meth:`release_mapped_pages`). They stay in the page cache;
    the next read maps them again.
    """

    mapped_budget_bytes: int = 1 << 30
    """File-backed resident bytes of this process (``/proc/self/statm``) above which a cut
    releases the store's mapped pages; 0 (or no ``/proc``): never."""

    def __init__(self, path: Path, manifest: dict[str, Any]) -> None:
        self.path = path
        self.manifest = manifest
        self.arrays: dict[str, np.ndarray] = {}
        self._mappings: list[mmap.mmap] = []
        for name, entry in manifest["files"].items():
            file = path / name
            if not file.is_file():
                raise StoreError(f"{file}: missing from the store")
            expected = entry["length"] * np.dtype(entry["dtype"]).itemsize
            if file.stat().st_size != expected:
                raise StoreError(
                    f"{file}: {file.stat().st_size} bytes, the manifest says {expected}"
                )
            if entry["length"] == 0:
                self.arrays[name] = np.zeros(0, dtype=entry["dtype"])
            else:
                with open(file, "rb") as f:
                    mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                self._mappings.append(mapping)
                self.arrays[name] = np.frombuffer(
                    mapping, dtype=entry["dtype"], count=entry["length"]
                )
        self.vocab = VocabSizes(**manifest["vocab"])
        self.split = SplitMeta(**manifest["split"])
        self._item_features = ItemFeatures(
            artist_of=self.arrays["item_artist_id"],
            album_of=self.arrays["item_album_id"],
            artist_rows=self.vocab.artist_id,
            album_rows=self.vocab.album_id,
            max_item_id=self.arrays["item_artist_id"].size - 1,
        )

    @classmethod
    def open(cls, path: str | Path) -> SampleStore:
        """Open a complete store (one with its READY marker); StoreError otherwise."""
        path = Path(path)
        ready, manifest_file = path / READY_FILE, path / MANIFEST_FILE
        if not ready.is_file():
            raise StoreError(f"{ready}: missing; {path} is not a complete sample store")
        if not manifest_file.is_file():
            raise StoreError(f"{manifest_file}: missing; {path} is not a complete sample store")
        text = manifest_file.read_text(encoding="utf-8", errors="replace")
        if ready.read_text(errors="replace").strip() != hashlib.sha256(text.encode()).hexdigest():
            raise StoreError(f"{manifest_file}: does not match {ready}")
        try:
            manifest = json.loads(text)
        except json.JSONDecodeError as exc:
            raise StoreError(f"{manifest_file}: not valid JSON: {exc}") from None
        if not isinstance(manifest, dict) or manifest.get("format") != STORE_FORMAT:
            found = manifest.get("format") if isinstance(manifest, dict) else None
            raise StoreError(
                f"{manifest_file}: store format {found!r}, this code reads "
                f"{STORE_FORMAT}; rebuild the store"
            )
        try:
            return cls(path, manifest)
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreError(
                f"{manifest_file}: malformed ({type(exc).__name__}: {exc}); rebuild the store"
            ) from None

    def release_mapped_pages(self) -> None:
        """Drop this process's mappings of the store's pages (``MADV_DONTNEED``; the data
        stays on disk and in the page cache, and reads map it again)."""
        if hasattr(mmap, "MADV_DONTNEED"):
            for mapping in self._mappings:
                mapping.madvise(mmap.MADV_DONTNEED)

    def _keep_mapped_pages_within_budget(self) -> None:
        if self.mapped_budget_bytes and _file_backed_resident_bytes() > self.mapped_budget_bytes:
            self.release_mapped_pages()

    def verify(self) -> None:
        """Recompute the sha256 of every array (a few files at a time, in threads);
        StoreError naming the first one, in manifest order, that differs."""
        names = list(self.manifest["files"])
        digests = sha256_files([self.path / name for name in names])
        for name, actual in zip(names, digests, strict=True):
            if actual != self.manifest["files"][name]["sha256"]:
                raise StoreError(f"{self.path / name}: sha256 differs from {MANIFEST_FILE}")

    # Sizes -------------------------------------------------------------------------------

    @property
    def min_history(self) -> int:
        return int(self.manifest["min_history"])

    @property
    def window_seconds(self) -> int:
        return int(self.manifest["window_seconds"])

    @property
    def first_window_start(self) -> int:
        return int(self.manifest["first_window_start"])

    @property
    def num_windows(self) -> int:
        return int(self.manifest["num_windows"])

    @property
    def num_users(self) -> int:
        return int(self.manifest["num_users"])

    @property
    def num_events(self) -> int:
        return int(self.manifest["num_events"])

    @property
    def train_anchors(self) -> np.ndarray:
        """Event index of every train anchor, grouped by window."""
        return self.arrays["train_anchor"]

    @property
    def test_anchors(self) -> np.ndarray:
        return self.arrays["test_anchor"]

    def window(self, w: int) -> np.ndarray:
        """The train anchors of window ``w`` (by user, then time)."""
        if not 0 <= w < self.num_windows:
            raise IndexError(f"window {w} outside [0, {self.num_windows})")
        offsets = self.arrays["train_window_offset"]
        return self.train_anchors[offsets[w] : offsets[w + 1]]

    def window_sizes(self) -> np.ndarray:
        return np.diff(self.arrays["train_window_offset"])

    def disk_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.path.iterdir() if p.is_file())

    # Samples ------------------------------------------------------------------------------

    def users_of(self, events: np.ndarray) -> np.ndarray:
        """Row in ``user_*`` of each event index."""
        offsets = self.arrays["user_offset"]
        return np.searchsorted(offsets, events, side="right") - 1

    def samples(self, anchors: np.ndarray, config: SampleConfig) -> Samples:
        """The samples of the anchor event indices ``anchors`` (in that order) under
        ``config`` (its strategy, history length and causal window; its ``min_history`` must
        be the store's), equal to what :func:`~yambda_data.samples.build_samples` gives for
        the same anchors."""
        if config.min_history != self.min_history:
            raise ValueError(
                f"SampleConfig.min_history={config.min_history}, but the store at {self.path} "
                f"was built with min_history={self.min_history}; rebuild it or match it"
            )
        self._keep_mapped_pages_within_budget()
        a = self.arrays
        anchors = np.asarray(anchors, dtype=np.int64)
        user = self.users_of(anchors)
        first = a["user_offset"][user]
        pos = anchors - first
        window_lo = np.maximum(pos - config.causal_window, 0)
        if config.strategy == "last_n":
            runs = [self._pool_tail(p, user, window_lo, pos, config.history_length) for p in POOLS]
            positions, lengths = _merge_runs(runs, keep_last=config.history_length)
        else:  # interleaved: the last L // 3 of each pool, merged in stream (time) order
            per_pool = config.history_length // 3
            runs = [self._pool_tail(p, user, window_lo, pos, per_pool) for p in POOLS]
            positions, lengths = _merge_runs(runs, keep_last=None)
        offsets = np.zeros(anchors.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        history = np.repeat(first, lengths) + positions
        # Each gather of an event array may map up to a folio per event read: the budget is
        # checked between them, so a large batch cannot map several arrays whole.
        gathered = {}
        for name in ("event_item_id", "event_action", "event_timestamp"):
            self._keep_mapped_pages_within_budget()
            gathered[name] = a[name][anchors], a[name][history]
        self._keep_mapped_pages_within_budget()
        (item, history_item), (action, history_action), (timestamp, history_timestamp) = (
            gathered.values()
        )
        artist, album = self._item_features.lookup(item)
        history_artist, history_album = self._item_features.lookup(history_item)
        return Samples(
            uid=a["user_uid"][user],
            anchor_timestamp=timestamp,
            item_id=item,
            artist_id=artist,
            album_id=album,
            label=(action == ACTION_LISTEN_PLUS).astype(np.uint8),
            is_organic=a["event_is_organic"][anchors],
            history_offsets=offsets,
            history_item_id=history_item,
            history_artist_id=history_artist,
            history_album_id=history_album,
            history_action_weight=history_action,
            history_timestamp=history_timestamp,
        )

    def _pool_tail(
        self,
        pool: tuple[str, int],
        user: np.ndarray,
        window_lo: np.ndarray,
        pos: np.ndarray,
        k: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Positions of the last ``k`` pool events in ``[window_lo, pos)`` of each anchor
        (concatenated, oldest first) and their counts."""
        self._keep_mapped_pages_within_budget()
        name = pool[0]
        positions = self.arrays[f"pool_{name}_position"]
        offsets = self.arrays[f"pool_{name}_offset"]
        lo, hi = offsets[user], offsets[user + 1]
        end = _segment_searchsorted(positions, lo, hi, pos)
        begin = _segment_searchsorted(positions, lo, hi, window_lo)
        lengths = np.minimum(end - begin, k)
        run_offsets = np.zeros(user.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=run_offsets[1:])
        flat = np.repeat(end - lengths - run_offsets[:-1], lengths) + np.arange(
            int(run_offsets[-1]), dtype=np.int64
        )
        return positions[flat].astype(np.int64), lengths


_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _file_backed_resident_bytes() -> int:
    """This process's resident file-backed and shared memory (Linux); 0 elsewhere."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[2]) * _PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return 0


def _segment_searchsorted(
    values: np.ndarray, lo: np.ndarray, hi: np.ndarray, query: np.ndarray
) -> np.ndarray:
    """For each i, the first index j in ``[lo[i], hi[i])`` with ``values[j] >= query[i]``
    (``hi[i]`` when none): a binary search per segment, vectorized across segments."""
    lo, hi = lo.astype(np.int64, copy=True), hi.astype(np.int64, copy=True)
    query = query.astype(np.int64)
    while True:
        active = lo < hi
        if not active.any():
            return lo
        mid = (lo + hi) // 2
        probe = np.where(active, mid, 0)
        below = active & (values[probe].astype(np.int64) < query) if values.size else active
        lo = np.where(below, mid + 1, lo)
        hi = np.where(active & ~below, mid, hi)


def _merge_runs(
    runs: list[tuple[np.ndarray, np.ndarray]], keep_last: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Merge per-anchor sorted position runs into one sorted run per anchor (keeping the last
    ``keep_last`` when given)."""
    lengths = sum(r[1] for r in runs)
    owner = np.concatenate([np.repeat(np.arange(r[1].size, dtype=np.int64), r[1]) for r in runs])
    merged = np.concatenate([r[0] for r in runs])
    # Positions are < 2**32 (uint32 in the store): one int64 key sorts by (owner, position).
    order = np.argsort((owner << 32) | merged, kind="stable")
    merged, owner = merged[order], owner[order]
    if keep_last is None:
        return merged, lengths
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    from_end = offsets[1:][owner] - np.arange(merged.size)
    keep = from_end <= keep_last
    return merged[keep], np.minimum(lengths, keep_last)
