"""The sample store: a memory-mapped, per-user columnar copy of the preprocessed events from
which DLRMv4 samples are cut at read time.

``build_store(preprocessed, raw_root, out_dir, min_history=...)`` reads the outputs of
:func:`yambda_data.preprocess.preprocess` one uid partition at a time and writes flat binary
arrays (little-endian, shapes and dtypes in ``manifest.json``):

================================  =========  =================================================
file                              dtype      content
================================  =========  =================================================
``user_uid``                      uint32     [U] uid of every stored user, increasing
``user_offset``                   int64      [U+1] first event of each user in the event arrays
``event_timestamp``               uint32     [E] per user: train events, then test events
``event_item_id``                 uint32     [E]
``event_action``                  uint8      [E] listen_plus 1, like 2, skip 4, else 0
``event_is_organic``              uint8      [E]
``pool_<p>_position``             uint32     [P] positions (within the user) of pool ``p``
``pool_<p>_offset``               int64      [U+1] per user, into ``pool_<p>_position``
``train_anchor``                  int64      [A] event index of every train anchor, grouped by
                                             window (then by user and time)
``train_window_offset``           int64      [W+1] window ``w`` is
                                             ``train_anchor[offset[w]:offset[w + 1]]``
``test_anchor``                   int64      [T] event index of every test anchor
``item_artist_id``                uint32     artist feature per item id (id + 1, 0 = none)
``item_album_id``                 uint32     album feature per item id (id + 1, 0 = none)
================================  =========  =================================================

with pools ``listen_plus``, ``like`` and ``skip`` (the three kinds of history events). A user's
stream is the user's train events followed by the user's test events (the split puts every test
event after every train event of the same user), which is exactly the stream of
:func:`yambda_data.samples.build_samples` for train anchors (train events alone) and test
anchors (train events, then earlier test events). Anchors are the listens with at least
``min_history`` earlier events of the user; train anchors come from train events and test
anchors from test events. Windows: ``window_seconds``-wide bins of train anchor time, counted
from the earliest train anchor.

Reading a sample costs a few binary searches and a gather of its history: the pool arrays lead
straight to the last ``k`` events of each pool inside the causal window, so the cost grows with
the history length, not with the causal window or the user's event count. The history strategy
(:attr:`~yambda_data.samples.SampleConfig.strategy`, interleaved by default), the history
length and the causal window are applied when reading, so one store serves every
:class:`~yambda_data.samples.SampleConfig` with its ``min_history``.

Integrity and concurrency:

* Everything is written into a temporary sibling directory and renamed onto ``out_dir``; the
  ``READY`` marker, holding the sha256 of the manifest, is the last file written, and readers
  refuse a directory without it. The manifest records the sha256 of every array
  (:meth:`SampleStore.verify` recomputes them) and a fingerprint of what the store was built
  from: the settings, the preprocess output's checksum record and the mapping files' sha256.
  A build first checks the preprocess output against its checksum record.
* Builders take an exclusive lock on the sibling file ``.<out_dir>.lock``, so many ranks can
  call :func:`build_store` at once: one builds, the others wait and then open the result. A
  store whose fingerprint matches and whose arrays all match their sha256 is reused
  (re-running is a no-op); any other is rebuilt, ``progress`` naming why; temporary
  directories left by a killed builder are removed under the lock. An ``out_dir`` holding
  anything but the store's own files is never replaced, nor one that is, holds or lies
  inside an input.
* Memory: one preprocess partition at a time, plus the item feature tables.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from yambda_data._atomic import (
    check_apart,
    check_only_ours,
    exclusive_lock,
    fsync_tree,
    replace_dir,
)
from yambda_data._checksums import sha256_file, sha256_files
from yambda_data._io import InputFileError, first_line, reading, writing
from yambda_data.preprocess import (
    CHECKSUMS_FILE,
    ITEM_POPULARITY_FILE,
    SPLIT_META_FILE,
    TEST_EVENTS_DIR,
    TRAIN_SESSIONS_DIR,
    part_name,
    verify_checksums,
)
from yambda_data.samples import (
    ACTION_LIKE,
    ACTION_LISTEN_PLUS,
    ACTION_SKIP,
    LISTEN_PLUS_MIN_RATIO,
    ItemFeatures,
    SampleConfig,
    Samples,
    VocabSizes,
    event_arrays,
)
from yambda_data.schema import EVENT_TYPE_CODES, mapping_path, read_mapping
from yambda_data.split import SplitMeta

__all__ = [
    "ARRAY_FILES",
    "MANIFEST_FILE",
    "POOLS",
    "READY_FILE",
    "STORE_FORMAT",
    "SampleStore",
    "StoreError",
    "build_store",
]

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


class StoreError(RuntimeError):
    """A store directory that is missing, incomplete, corrupt or built for other settings."""


class _Appender:
    """A flat binary array written in pieces, hashed as it goes."""

    def __init__(self, path: Path, dtype: np.dtype | type, output: Path | None = None) -> None:
        self.path = path
        self.output = output
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self.length = 0
        self._digest = hashlib.sha256()
        with writing(path, output):
            self._file = open(path, "wb")  # noqa: SIM115 (closed by close())

    def append(self, values: np.ndarray) -> None:
        data = np.ascontiguousarray(values, dtype=self.dtype)
        buffer = memoryview(data).cast("B")
        with writing(self.path, self.output):
            self._file.write(buffer)
        self._digest.update(buffer)
        self.length += data.size

    def close(self) -> dict[str, Any]:
        with writing(self.path, self.output):
            self._file.close()
        return _file_entry(self.dtype, self.length, self._digest.hexdigest())


def _file_entry(dtype: np.dtype, length: int, sha256: str) -> dict[str, Any]:
    return {"dtype": dtype.str, "length": int(length), "sha256": sha256}


@dataclass(frozen=True)
class _BuildSettings:
    min_history: int
    window_seconds: int

    def __post_init__(self) -> None:
        for name in ("min_history", "window_seconds"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"build_store: {name} must be an int, got {value!r}")
        if self.min_history < 0:
            raise ValueError(f"build_store: min_history must be >= 0, got {self.min_history}")
        if self.window_seconds < 1:
            raise ValueError(f"build_store: window_seconds must be >= 1, got {self.window_seconds}")


def _source_files(preprocessed: Path, raw_root: Path) -> list[Path]:
    meta = preprocessed / SPLIT_META_FILE
    if not meta.is_file():
        raise FileNotFoundError(f"{meta}: no such file (is {preprocessed} a preprocess output?)")
    files = [meta, preprocessed / CHECKSUMS_FILE, preprocessed / ITEM_POPULARITY_FILE]
    for sub in (TRAIN_SESSIONS_DIR, TEST_EVENTS_DIR):
        files += sorted((preprocessed / sub).glob("part-*.parquet"))
    files += _mapping_files(raw_root)
    for path in files:
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file")
    return files


def _check_inputs(preprocessed: Path, raw_root: Path) -> None:
    """What :func:`_build` reads, checked before anything is created: the split metadata
    parses, the train parts are part-00000.. with a test part each, the mappings have their
    schema (metadata only)."""
    SplitMeta.from_json(preprocessed / SPLIT_META_FILE)
    popularity = preprocessed / ITEM_POPULARITY_FILE
    try:
        np.load(popularity, mmap_mode="r")
    except ValueError as exc:
        raise InputFileError(popularity, f"cannot read it: {first_line(str(exc))}") from None
    parts = sorted(p.name for p in (preprocessed / TRAIN_SESSIONS_DIR).glob("part-*.parquet"))
    if not parts or parts != [part_name(k) for k in range(len(parts))]:
        raise StoreError(f"{preprocessed / TRAIN_SESSIONS_DIR}: parts are not part-00000..")
    for name in parts:
        test_path = preprocessed / TEST_EVENTS_DIR / name
        if not test_path.is_file():
            raise FileNotFoundError(f"{test_path}: no such file")
    for kind in ("artist", "album"):
        path = raw_root / f"{kind}_item_mapping.parquet"
        with reading(path):
            read_mapping(raw_root, kind)  # type: ignore[arg-type]


def _mapping_files(raw_root: Path) -> list[Path]:
    return [mapping_path(raw_root, "artist"), mapping_path(raw_root, "album")]


def check_store_out(preprocessed: Path, raw_root: Path, out: Path) -> None:
    """A store must not be, hold or lie inside its inputs (the preprocess output and the
    mapping files), nor be or hold the raw root (ValueError naming both)."""
    check_apart(out, [preprocessed, *_mapping_files(raw_root)], roots=[raw_root])


def _written_by_build_store(relative: str, is_dir: bool) -> bool:
    return not is_dir and relative in (*ARRAY_FILES, MANIFEST_FILE, READY_FILE)


def _check_out(out: Path) -> None:
    """``out`` may be missing, empty or a store (one with its manifest, holding nothing else)
    to replace; the directory it goes in must be creatable."""
    if out.exists():
        if not out.is_dir() or (any(out.iterdir()) and not (out / MANIFEST_FILE).is_file()):
            raise ValueError(
                f"{out}: exists and is not a sample store (no {MANIFEST_FILE}); "
                "refusing to replace it"
            )
        check_only_ours(out, _written_by_build_store, "build_store")
        return
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"{out}: cannot be created, {parent} is not a directory")
            return


def _fingerprint(preprocessed: Path, raw_root: Path, settings: _BuildSettings) -> str:
    """What a store was built from: the settings, the content of the preprocess output (its
    checksum record, which holds the sha256 of every file in it) and the sha256 of the two
    mapping files."""
    digest = hashlib.sha256()
    digest.update(json.dumps([STORE_FORMAT, settings.__dict__]).encode())
    _source_files(preprocessed, raw_root)  # names a missing input
    digest.update((preprocessed / CHECKSUMS_FILE).read_bytes())
    mappings = _mapping_files(raw_root)
    for path, sha256 in zip(mappings, sha256_files(mappings), strict=True):
        digest.update(f"{path.name}:{sha256}\n".encode())
    return digest.hexdigest()


def _recorded_fingerprint(out: Path) -> str | None:
    try:
        manifest = json.loads((out / MANIFEST_FILE).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return manifest.get("fingerprint") if isinstance(manifest, dict) else None


def _open_if_reusable(out: Path, fingerprint: str) -> tuple[SampleStore | None, str]:
    """The store at ``out`` when it can be reused, else None and why, as one line naming the
    file at fault: it does not open, was built from other inputs or settings, or an array's
    sha256 differs from its manifest."""
    try:
        store = SampleStore.open(out)
        if store.manifest.get("fingerprint") != fingerprint:
            return None, f"{out}: built from other inputs or settings"
        store.verify()
    except StoreError as exc:
        return None, str(exc)
    return store, ""


def build_store(
    preprocessed: str | Path,
    raw_root: str | Path,
    out_dir: str | Path,
    *,
    min_history: int,
    window_seconds: int = 86_400,
    progress: Callable[[str], None] | None = None,
) -> SampleStore:
    """Build (or reuse) the store of a preprocess output; see the module docstring.

    ``raw_root`` holds the two item mapping files. Returns the opened store. Everything given
    is checked before any file or directory is created. Raises FileNotFoundError for a missing
    input, ValueError for bad settings, an unreadable input or an ``out_dir`` that is neither
    empty nor a store, StoreError when there is no train anchor, and
    :class:`~yambda_data.WriteError` (naming the path and the free space) when writing fails.
    """
    settings = _BuildSettings(min_history=min_history, window_seconds=window_seconds)
    preprocessed, raw_root, out = Path(preprocessed), Path(raw_root), Path(out_dir)
    fingerprint = _fingerprint(preprocessed, raw_root, settings)
    _check_inputs(preprocessed, raw_root)
    check_store_out(preprocessed, raw_root, out)
    # A build reads every file of the preprocess output: they are checked against its record
    # before anything is created, unless the store was built from them and is only reused.
    inputs_checked = False
    if _recorded_fingerprint(out) != fingerprint:
        verify_checksums(preprocessed)
        inputs_checked = True
    if not (out / READY_FILE).is_file():  # (a complete store is checked under the lock)
        _check_out(out)
    say = progress or (lambda _message: None)
    with writing(out.parent, out):
        out.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(out):
        if (out / READY_FILE).is_file():
            store, problem = _open_if_reusable(out, fingerprint)
            if store is not None:
                say(f"{out}: up to date")
                return store
            say(f"{problem}; rebuilding {out}")
        _check_out(out)
        if not inputs_checked:  # the store was damaged: it is built after all
            verify_checksums(preprocessed)
        # Under the lock no other builder runs: leftovers are from one that died.
        for stale in out.parent.glob(f".{out.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        with writing(out.parent, out):
            tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        try:
            umask = os.umask(0)
            os.umask(umask)
            with writing(tmp, out):
                tmp.chmod(0o777 & ~umask)
            _build(preprocessed, raw_root, tmp, settings, fingerprint, say, out)
            with writing(tmp, out):
                fsync_tree(tmp)
                replace_dir(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return SampleStore.open(out)


def _actions(code: np.ndarray, ratio: np.ndarray) -> np.ndarray:
    listen = code == EVENT_TYPE_CODES["listen"]
    plus = listen & (ratio >= LISTEN_PLUS_MIN_RATIO)
    action = np.zeros(code.size, dtype=np.uint8)
    action[plus] = ACTION_LISTEN_PLUS
    action[listen & ~plus] = ACTION_SKIP
    action[code == EVENT_TYPE_CODES["like"]] = ACTION_LIKE
    return action


def _build(
    preprocessed: Path,
    raw_root: Path,
    tmp: Path,
    settings: _BuildSettings,
    fingerprint: str,
    say: Callable[[str], None],
    target: Path | None = None,
) -> None:
    split = SplitMeta.from_json(preprocessed / SPLIT_META_FILE)
    parts = sorted(p.name for p in (preprocessed / TRAIN_SESSIONS_DIR).glob("part-*.parquet"))
    if parts != [part_name(k) for k in range(len(parts))]:
        raise StoreError(f"{preprocessed / TRAIN_SESSIONS_DIR}: parts are not part-00000..")
    items = ItemFeatures.from_root(raw_root)
    popularity = np.load(preprocessed / ITEM_POPULARITY_FILE, mmap_mode="r")

    def appender(name: str, dtype: np.dtype | type) -> _Appender:
        return _Appender(tmp / name, dtype, target)

    out: dict[str, _Appender] = {
        "user_uid": appender("user_uid", np.uint32),
        "user_offset": appender("user_offset", np.int64),
        "event_timestamp": appender("event_timestamp", np.uint32),
        "event_item_id": appender("event_item_id", np.uint32),
        "event_action": appender("event_action", np.uint8),
        "event_is_organic": appender("event_is_organic", np.uint8),
        "test_anchor": appender("test_anchor", np.int64),
    }
    for pool, _bit in POOLS:
        out[f"pool_{pool}_position"] = appender(f"pool_{pool}_position", np.uint32)
        out[f"pool_{pool}_offset"] = appender(f"pool_{pool}_offset", np.int64)
    out["user_offset"].append(np.zeros(1, dtype=np.int64))
    pool_totals = {pool: 0 for pool, _ in POOLS}
    for pool, _ in POOLS:
        out[f"pool_{pool}_offset"].append(np.zeros(1, dtype=np.int64))

    staged = tmp / "_train_anchor_parts"
    with writing(staged, target):
        staged.mkdir()
    events_done = 0
    first_anchor_ts: int | None = None
    last_anchor_ts = 0
    max_uid = -1
    for k, name in enumerate(parts):
        train_path = preprocessed / TRAIN_SESSIONS_DIR / name
        with reading(train_path):
            train = event_arrays(pl.scan_parquet(train_path), str(train_path))
        test_path = preprocessed / TEST_EVENTS_DIR / name
        if not test_path.is_file():
            raise FileNotFoundError(f"{test_path}: no such file")
        with reading(test_path):
            test = event_arrays(pl.scan_parquet(test_path), str(test_path))
        n_train = train["uid"].size
        merged = {c: np.concatenate([train[c], test[c]]) for c in train}
        is_test = np.zeros(merged["uid"].size, dtype=bool)
        is_test[n_train:] = True
        del train, test
        # Both inputs are sorted by (uid, timestamp) and a user's test events come after the
        # user's train events, so a stable sort by uid yields each user's stream in time order.
        order = np.argsort(merged["uid"], kind="stable")
        ev = {c: v[order] for c, v in merged.items()}
        is_test = is_test[order]
        del merged, order
        if np.setdiff1d(ev["uid"][is_test], ev["uid"][~is_test]).size:
            raise StoreError(f"{test_path}: test events of a uid without train events")

        n = ev["uid"].size
        new_user = np.ones(n, dtype=bool)
        new_user[1:] = ev["uid"][1:] != ev["uid"][:-1]
        starts = np.flatnonzero(new_user)
        user_first = np.repeat(starts, np.diff(np.append(starts, n)))
        pos = np.arange(n, dtype=np.int64) - user_first
        user_of_event = np.cumsum(new_user) - 1
        action = _actions(ev["event_type"], ev["played_ratio_pct"])

        out["user_uid"].append(ev["uid"][starts])
        out["user_offset"].append(events_done + np.append(starts[1:], n))
        out["event_timestamp"].append(ev["timestamp"])
        out["event_item_id"].append(ev["item_id"])
        out["event_action"].append(action)
        out["event_is_organic"].append(ev["is_organic"])
        for pool, bit in POOLS:
            mask = action == bit
            out[f"pool_{pool}_position"].append(pos[mask])
            per_user = np.bincount(user_of_event[mask], minlength=starts.size)
            out[f"pool_{pool}_offset"].append(pool_totals[pool] + np.cumsum(per_user))
            pool_totals[pool] += int(per_user.sum())

        listen = ev["event_type"] == EVENT_TYPE_CODES["listen"]
        anchor = listen & (pos >= settings.min_history)
        test_anchor = np.flatnonzero(anchor & is_test)
        train_anchor = np.flatnonzero(anchor & ~is_test)
        out["test_anchor"].append(events_done + test_anchor)
        ts = ev["timestamp"][train_anchor]
        with writing(staged / f"{k}-event.npy", target):
            np.save(staged / f"{k}-event.npy", events_done + train_anchor)
        with writing(staged / f"{k}-time.npy", target):
            np.save(staged / f"{k}-time.npy", ts)
        if ts.size:
            low, high = int(ts.min()), int(ts.max())
            first_anchor_ts = low if first_anchor_ts is None else min(first_anchor_ts, low)
            last_anchor_ts = max(last_anchor_ts, high)
        if n:
            max_uid = max(max_uid, int(ev["uid"][-1]))
        events_done += n
        say(f"partition {k + 1}/{len(parts)}: {n:,} events, {train_anchor.size:,} train anchors")
        del ev, is_test, pos, user_first, user_of_event, action

    if first_anchor_ts is None:
        raise StoreError(
            f"{preprocessed}: no train anchor (a listen with >= min_history="
            f"{settings.min_history} earlier events of its user); lower min_history"
        )
    files = {name: appender.close() for name, appender in out.items()}
    num_windows = (last_anchor_ts - first_anchor_ts) // settings.window_seconds + 1
    files.update(
        _group_by_window(staged, len(parts), tmp, first_anchor_ts, num_windows, settings, target)
    )
    shutil.rmtree(staged)

    for name, table in (("item_artist_id", items.artist_of), ("item_album_id", items.album_of)):
        feature = appender(name, np.uint32)
        feature.append(table)
        files[name] = feature.close()

    vocab = VocabSizes(
        uid=max_uid + 1,
        item_id=max(int(popularity.shape[0]), items.max_item_id + 1),
        artist_id=items.artist_rows,
        album_id=items.album_rows,
    )
    manifest = {
        "format": STORE_FORMAT,
        "fingerprint": fingerprint,
        "min_history": settings.min_history,
        "window_seconds": settings.window_seconds,
        "first_window_start": first_anchor_ts,
        "num_windows": int(num_windows),
        "num_users": files["user_uid"]["length"],
        "num_events": events_done,
        "num_train_anchors": files["train_anchor"]["length"],
        "num_test_anchors": files["test_anchor"]["length"],
        "pool_events": pool_totals,
        "vocab": vocab.as_dict(),
        "split": split.to_dict(),
        "files": files,
    }
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    with writing(tmp / MANIFEST_FILE, target):
        (tmp / MANIFEST_FILE).write_text(text)
    with writing(tmp / READY_FILE, target):
        (tmp / READY_FILE).write_text(hashlib.sha256(text.encode()).hexdigest() + "\n")


def _group_by_window(
    staged: Path,
    num_parts: int,
    tmp: Path,
    first_anchor_ts: int,
    num_windows: int,
    settings: _BuildSettings,
    target: Path | None = None,
) -> dict[str, dict[str, Any]]:
    """Write ``train_anchor`` grouped by window from the per-partition anchors, one partition
    in memory at a time: a counting pass, then each partition scattered into its slots."""

    def windows(k: int) -> np.ndarray:
        ts = np.load(staged / f"{k}-time.npy").astype(np.int64)
        return (ts - first_anchor_ts) // settings.window_seconds

    counts = np.zeros((num_parts, num_windows), dtype=np.int64)
    for k in range(num_parts):
        counts[k] = np.bincount(windows(k), minlength=num_windows)
    per_window = counts.sum(axis=0)
    offsets = np.zeros(num_windows + 1, dtype=np.int64)
    np.cumsum(per_window, out=offsets[1:])
    total = int(offsets[-1])
    # Within a window, partitions in order: earlier partitions hold smaller uids.
    cursor = offsets[:-1] + np.cumsum(counts, axis=0) - counts
    path = tmp / "train_anchor"
    if total:
        with writing(path, target):
            with open(path, "wb") as f:
                f.truncate(total * 8)
            for k in range(num_parts):
                w = windows(k)
                event = np.load(staged / f"{k}-event.npy")
                order = np.argsort(w, kind="stable")
                w_sorted = w[order]
                first_of_window = np.searchsorted(w_sorted, w_sorted, side="left")
                rank = np.arange(w_sorted.size) - first_of_window
                # A mapping per partition: the pages a partition wrote leave this process
                # with it (written back and kept in the page cache), so the peak RSS is one
                # partition's pages, not the whole file's (3.7 GB at Yambda-500m size).
                anchors = np.memmap(path, dtype="<i8", mode="r+", shape=(total,))
                anchors[cursor[k][w_sorted] + rank] = event[order]
                anchors.flush()
                del anchors
    else:
        with writing(path, target):
            path.write_bytes(b"")
    anchor_entry = _file_entry(np.dtype("<i8"), total, sha256_file(path))
    offset_writer = _Appender(tmp / "train_window_offset", np.int64, target)
    offset_writer.append(offsets)
    return {"train_anchor": anchor_entry, "train_window_offset": offset_writer.close()}


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
    """File-backed resident bytes of this process (Linux: the shared pages of
    ``/proc/self/statm``) above which the store's mapped pages are released; 0: never. Where
    ``/proc`` does not exist they are never released."""

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
