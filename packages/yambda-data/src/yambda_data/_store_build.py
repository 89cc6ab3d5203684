"""Building a sample store (its layout: :mod:`yambda_data.store`): :func:`build_store`,
which checks its inputs, reuses a store built from the same inputs, or writes the arrays one
preprocess partition at a time into a temporary directory and renames it into place."""

from __future__ import annotations

import hashlib
import json
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
    check_replaceable,
    exclusive_lock,
    fsync_tree,
    replace_dir,
)
from yambda_data._checksums import sha256_file, sha256_files
from yambda_data._io import InputFileError, first_line, reading, writing
from yambda_data._readers import writing_store
from yambda_data._store_read import (
    ARRAY_FILES,
    MANIFEST_FILE,
    POOLS,
    READY_FILE,
    STORE_FORMAT,
    SampleStore,
    StoreError,
)
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
    VocabSizes,
    event_arrays,
)
from yambda_data.schema import EVENT_TYPE_CODES, check_mapping_ids, mapping_path, read_mapping
from yambda_data.split import SplitMeta


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
            # an id sizes the item tables: bounded before any is allocated
            check_mapping_ids(read_mapping(raw_root, kind), kind, str(path))  # type: ignore[arg-type]


def _mapping_files(raw_root: Path) -> list[Path]:
    return [mapping_path(raw_root, "artist"), mapping_path(raw_root, "album")]


def check_store_out(preprocessed: Path, raw_root: Path, out: Path) -> None:
    """A store must not be, hold or lie inside its inputs (the preprocess output and the
    mapping files), nor be or hold the raw root (ValueError naming both)."""
    check_apart(out, [preprocessed, *_mapping_files(raw_root)], roots=[raw_root])


def _written_by_build_store(relative: str, is_dir: bool) -> bool:
    return not is_dir and relative in (*ARRAY_FILES, MANIFEST_FILE, READY_FILE)


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
    """Build (or reuse) the store of a preprocess output; see :mod:`yambda_data.store`.

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
        check_replaceable(
            out, MANIFEST_FILE, "a sample store", _written_by_build_store, "build_store"
        )
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
        check_replaceable(
            out, MANIFEST_FILE, "a sample store", _written_by_build_store, "build_store"
        )
        with writing_store(out):  # refused while another process's run reads it
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
