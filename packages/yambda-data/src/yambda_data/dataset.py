"""The DLRMv4 samples of a Yambda root in one call: in memory (small data), or through the
preprocessing and the sample store (any size)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from yambda_data._atomic import atomic_path, check_apart, check_replaceable, exclusive_lock
from yambda_data._io import reading, writing
from yambda_data._store_build import _BuildSettings, _written_by_build_store, check_store_out
from yambda_data._store_read import MANIFEST_FILE
from yambda_data.samples import (
    ItemFeatures,
    SampleConfig,
    Samples,
    VocabSizes,
    build_samples,
    compute_vocab_sizes,
)
from yambda_data.schema import (
    check_multi_event_header,
    duplicate_rows_warning,
    multi_event_path,
    normalize_multi_event,
    validate_multi_event,
)
from yambda_data.split import SplitMeta, check_window_request, check_window_room, temporal_split
from yambda_data.store import SampleStore, build_store


@dataclass(frozen=True)
class DLRMv4Samples:
    """Train samples (anchors before the split), eval samples (anchors in the test day)."""

    train: Samples
    eval: Samples
    vocab: VocabSizes
    split: SplitMeta


def load_dlrmv4_samples(root: str | Path, size: str, config: SampleConfig) -> DLRMv4Samples:
    """Validate ``<root>/flat/<size>/multi_event.parquet``, split it by time and build samples.

    Eval anchors see the user's train events and earlier test events as history. The whole
    table is held in memory: this is the path for synthetic and subsampled data.
    """
    path = multi_event_path(root, size)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    # Validate the file as stored (event_type may be Utf8 or Categorical), then normalize.
    with reading(path):
        raw = pl.read_parquet(path)
    validate_multi_event(raw, source=str(path))
    events = normalize_multi_event(raw.lazy()).collect()
    split = temporal_split(events, size=size)
    items = ItemFeatures.from_root(root)
    return DLRMv4Samples(
        train=build_samples(split.train, None, items, config),
        eval=build_samples(split.train, split.test, items, config),
        vocab=compute_vocab_sizes(events, items),
        split=split.meta,
    )


PREPROCESSED_DIR = "preprocessed"
STORE_DIR = "store"
_SOURCE_FILE = "preprocessed.source.json"


def prepare_preprocessed(
    root: str | Path,
    size: str,
    work_dir: str | Path,
    *,
    partitions: int | None = None,
    progress: Callable[[str], None] | None = None,
    min_window_anchors: int | None = None,
    window_seconds: int = 86_400,
) -> Path:
    """Preprocess ``<root>/flat/<size>/multi_event.parquet`` into ``<work_dir>/preprocessed``
    unless that output already comes from the same input (the raw file's size and
    modification time) and matches its checksum record (every file's size and sha256);
    returns the output folder. ``progress`` hears why it preprocesses (naming the file that
    differs) and, each time, the warning about rows that repeat an earlier row, if any. The
    first half of :func:`prepare_store`, on its own so that the two steps can run (and be
    measured) as separate processes. The arguments, the raw file's columns and where the
    output goes (apart from the inputs) are checked before anything is created (the rows are
    checked by the preprocessing, before it writes). With ``min_window_anchors``, a raw file
    in which no time window of ``window_seconds`` can hold that many train anchors
    (:func:`~yambda_data.split.busiest_window_listens`) is refused before it is preprocessed
    (WindowTooSmall naming it); an output that is current is not checked again."""
    from yambda_data.preprocess import checksums_problem, preprocess, read_checksums

    path = multi_event_path(root, size)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    if partitions is not None and (
        not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1
    ):
        raise ValueError(f"partitions must be a positive integer, got {partitions!r}")
    check_window_request(min_window_anchors, window_seconds)
    check_multi_event_header(path)
    work = Path(work_dir)
    if work.exists() and not work.is_dir():
        raise NotADirectoryError(f"{work}: exists and is not a directory")
    pre = work / PREPROCESSED_DIR
    check_apart(pre, [path], roots=[Path(root)])
    stat = path.stat()
    source = {"file": str(path.resolve()), "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    record = work / _SOURCE_FILE
    say = progress or (lambda _message: None)
    with exclusive_lock(record):
        try:
            current = json.loads(record.read_text())
        except (OSError, ValueError):  # missing or not JSON: preprocess again
            current = None
        if not pre.exists():
            why: str | None = ""
        elif current != source:
            why = f"{path} is not the file {pre} was made from"
        else:
            problem = checksums_problem(pre)
            why = None if problem is None else str(problem)
        if why is None:
            found = read_checksums(pre)["input"]
            warning = duplicate_rows_warning(str(path), found["duplicate_rows"], found["rows"])
            if warning:
                say(warning)
        else:
            with reading(path):
                check_window_room(
                    pl.scan_parquet(path), str(path), min_window_anchors, window_seconds
                )
            say(f"preprocessing {path}" + (f" ({why})" if why else ""))
            preprocess(root, size, pre, partitions=partitions, progress=say)
            with writing(record), atomic_path(record) as tmp:
                tmp.write_text(json.dumps(source) + "\n")
    return pre


def prepare_store(
    root: str | Path,
    size: str,
    work_dir: str | Path,
    *,
    min_history: int,
    window_seconds: int = 86_400,
    partitions: int | None = None,
    progress: Callable[[str], None] | None = None,
    min_window_anchors: int | None = None,
) -> SampleStore:
    """Preprocess ``<root>/flat/<size>/multi_event.parquet`` into ``<work_dir>/preprocessed``
    and build the sample store ``<work_dir>/store`` from it; each step is skipped when its
    output comes from the same input and matches its checksums (:func:`prepare_preprocessed`;
    the store's fingerprint and the sha256 of every array), and redone, saying why through
    ``progress``, when not. Safe to call from every rank at once: both steps are locked, and
    each rank must call it with the same arguments. The arguments, the raw file's columns and
    where the outputs go (apart from the inputs) are checked before anything is created (the
    rows are checked by the preprocessing, before it writes), and so is ``min_window_anchors``
    (see :func:`prepare_preprocessed`) when the raw file is preprocessed."""
    _BuildSettings(min_history=min_history, window_seconds=window_seconds)
    work = Path(work_dir)
    check_store_out(work / PREPROCESSED_DIR, Path(root), work / STORE_DIR)
    pre = prepare_preprocessed(
        root,
        size,
        work_dir,
        partitions=partitions,
        progress=progress,
        min_window_anchors=min_window_anchors,
        window_seconds=window_seconds,
    )
    return build_store(
        pre,
        root,
        work / STORE_DIR,
        min_history=min_history,
        window_seconds=window_seconds,
        progress=progress,
    )


def check_prepare_outputs(root: str | Path, size: str, work_dir: str | Path) -> None:
    """What :func:`prepare_store` refuses of its outputs before it creates anything, for a
    caller that checks everything before its first write (the raw files need not exist yet):
    ``work_dir`` is a directory or can be one, apart from the inputs, and its
    ``preprocessed`` and ``store`` hold nothing that the preprocessing or the store build did
    not write (ValueError naming the first such entry)."""
    from yambda_data.preprocess import SPLIT_META_FILE, _written_by_preprocess

    work = Path(work_dir)
    if work.exists() and not work.is_dir():
        raise NotADirectoryError(f"{work}: exists and is not a directory")
    pre, store = work / PREPROCESSED_DIR, work / STORE_DIR
    check_apart(pre, [multi_event_path(root, size)], roots=[Path(root)])
    check_store_out(pre, Path(root), store)
    check_replaceable(
        pre, SPLIT_META_FILE, "a preprocess output", _written_by_preprocess, "preprocess"
    )
    check_replaceable(
        store, MANIFEST_FILE, "a sample store", _written_by_build_store, "build_store"
    )
