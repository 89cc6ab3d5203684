"""``yambda-data inspect`` and ``yambda-data verify``: the reports on a raw dataset, a
preprocess output or a sample store, and their text and JSON forms."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from yambda_data._cli_common import _check_dir_arg, _Failed, _progress
from yambda_data._io import InputFileError, first_line, reading, reading_any
from yambda_data._store_build import _BuildSettings, _fingerprint, _source_files
from yambda_data.preprocess import (
    CHECKSUMS_FILE,
    ITEM_POPULARITY_FILE,
    SESSION_INDEX_DIR,
    SPLIT_META_FILE,
    TEST_EVENTS_DIR,
    TRAIN_SESSIONS_DIR,
    verify_checksums,
)
from yambda_data.samples import LISTEN_PLUS_MIN_RATIO
from yambda_data.schema import (
    EVENT_TYPE_DTYPE,
    MULTI_EVENT_FILE,
    SchemaError,
    check_multi_event_columns,
    multi_event_path,
)
from yambda_data.split import GAP_SECONDS, TEST_SECONDS, SplitMeta
from yambda_data.store import MANIFEST_FILE, READY_FILE, SampleStore, StoreError

# inspect ------------------------------------------------------------------------------------

POOL_NAMES: tuple[str, ...] = ("listen_plus", "skip", "like", "other")
"""Pools of ``inspect``: listen_plus (listen, played_ratio_pct >= 50), skip (other listens),
like, and other (dislike, unlike, undislike)."""


def _pool_exprs(schema: pl.Schema) -> list[pl.Expr]:
    """Aggregations giving ``events`` and the listen_plus / skip / like counts.

    ``event_type`` of the public dtype is compared as it is (no per-row string cast); other
    dtypes (Utf8, Categorical with any categories) are compared as strings.
    """
    etype = pl.col("event_type")
    if schema.get("event_type") != EVENT_TYPE_DTYPE:
        etype = etype.cast(pl.String)
    listen = etype == "listen"
    ratio = pl.col("played_ratio_pct").cast(pl.Int64).fill_null(-1)
    plus = listen & (ratio >= LISTEN_PLUS_MIN_RATIO)
    return [
        pl.len().cast(pl.Int64).alias("events"),
        plus.sum().cast(pl.Int64).alias("listen_plus"),
        (listen & ~plus).sum().cast(pl.Int64).alias("skip"),
        (etype == "like").sum().cast(pl.Int64).alias("like"),
    ]


def _pools(scope: str, events: int, listen_plus: int, skip: int, like: int) -> dict[str, Any]:
    counts = {"listen_plus": listen_plus, "skip": skip, "like": like}
    counts["other"] = events - sum(counts.values())
    counts = {name: int(counts[name]) for name in POOL_NAMES}
    shares = {name: (c / events if events else 0.0) for name, c in counts.items()}
    return {"scope": scope, "events": int(events), "counts": counts, "shares": shares}


def _split_bounds(t_min: int, t_max: int, train_start: int | None) -> dict[str, int | None]:
    test_start = t_max - TEST_SECONDS
    return {
        "t_min": int(t_min),
        "t_max": int(t_max),
        "train_start": None if train_start is None else int(train_start),
        "train_end": int(test_start - GAP_SECONDS),
        "test_start": int(test_start),
        "test_end": int(t_max),
    }


def _meta_bounds(meta: SplitMeta) -> dict[str, int | None]:
    return {
        name: int(getattr(meta, name))
        for name in ("t_min", "t_max", "train_start", "train_end", "test_start", "test_end")
    }


def _report(
    kind: str,
    path: Path,
    *,
    size: str | None,
    num_events: int,
    num_train_events: int,
    num_test_events: int,
    num_sessions: int | None,
    num_users: int,
    num_items: int | None,
    split: dict[str, int | None],
    pools: dict[str, Any],
    store: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``inspect`` result: the same keys for every kind (None where a kind has no value)."""
    return {
        "kind": kind,
        "path": str(path),
        "size": size,
        "num_events": int(num_events),
        "num_train_events": int(num_train_events),
        "num_test_events": int(num_test_events),
        "num_sessions": None if num_sessions is None else int(num_sessions),
        "num_users": int(num_users),
        "num_items": None if num_items is None else int(num_items),
        "split": split,
        "pools": pools,
        "store": store,
    }


def _parts(directory: Path) -> list[Path]:
    parts = sorted(directory.glob("part-*.parquet"))
    if not parts:
        raise ValueError(f"{directory}: no part-*.parquet files")
    return parts


def _inspect_preprocessed(path: Path) -> dict[str, Any]:
    meta = SplitMeta.from_json(path / SPLIT_META_FILE)
    train_parts = _parts(path / TRAIN_SESSIONS_DIR)
    with reading_any(train_parts, path / TRAIN_SESSIONS_DIR):
        train = pl.scan_parquet(train_parts)
        row = (
            train.select(
                *_pool_exprs(train.collect_schema()),
                pl.col("item_id").n_unique().cast(pl.Int64).alias("items"),
            )
            .collect(engine="streaming")
            .row(0, named=True)
        )
    test_parts = _parts(path / TEST_EVENTS_DIR)
    with reading_any(test_parts, path / TEST_EVENTS_DIR):
        num_test = int(pl.scan_parquet(test_parts).select(pl.len()).collect().item())
    if row["events"] != meta.num_train_events or num_test != meta.num_test_events:
        _progress(
            f"warning: {path}: {row['events']:,} train / {num_test:,} test events in the "
            f"parquet parts, {SPLIT_META_FILE} says {meta.num_train_events:,} / "
            f"{meta.num_test_events:,}"
        )
    return _report(
        "preprocess",
        path,
        size=meta.size,
        num_events=meta.num_train_events + meta.num_test_events,
        num_train_events=meta.num_train_events,
        num_test_events=meta.num_test_events,
        num_sessions=meta.num_sessions,
        num_users=meta.num_users,
        num_items=row["items"],
        split=_meta_bounds(meta),
        pools=_pools("train", row["events"], row["listen_plus"], row["skip"], row["like"]),
    )


def _inspect_store(path: Path) -> dict[str, Any]:
    store = SampleStore.open(path)
    m, split = store.manifest, store.split
    sizes = store.window_sizes()
    pool_events = m["pool_events"]
    disk = store.disk_bytes()
    details = {
        "min_history": store.min_history,
        "window_seconds": store.window_seconds,
        "num_train_anchors": int(m["num_train_anchors"]),
        "num_test_anchors": int(m["num_test_anchors"]),
        "num_windows": store.num_windows,
        "first_window_start": store.first_window_start,
        "anchors_per_window": {
            "min": int(sizes.min()) if sizes.size else 0,
            "median": float(np.median(sizes)) if sizes.size else 0.0,
            "max": int(sizes.max()) if sizes.size else 0,
        },
        "vocab": {name: int(v) for name, v in store.vocab.as_dict().items()},
        "disk_bytes": disk,
        "bytes_per_event": disk / max(store.num_events, 1),
    }
    return _report(
        "store",
        path,
        size=split.size,
        num_events=store.num_events,
        num_train_events=split.num_train_events,
        num_test_events=split.num_test_events,
        num_sessions=split.num_sessions,
        num_users=store.num_users,
        num_items=None,
        split=_meta_bounds(split),
        # The store's pools hold every event (train and test), so the shares are of all events.
        pools=_pools(
            "all",
            store.num_events,
            int(pool_events["listen_plus"]),
            int(pool_events["skip"]),
            int(pool_events["like"]),
        ),
        store=details,
    )


def _inspect_raw(root: Path, size: str) -> dict[str, Any]:
    """Streaming passes: the time bounds, the train rows (pools, items; then users) and a semi
    join for the test rows (the split of :mod:`yambda_data.split`, never materializing the
    table)."""
    source = multi_event_path(root, size)
    with reading(source):
        return _inspect_raw_file(root, size, source)


def _inspect_raw_file(root: Path, size: str, source: Path) -> dict[str, Any]:
    scan = pl.scan_parquet(source)
    check_multi_event_columns(scan.collect_schema(), str(source))
    ts = pl.col("timestamp").cast(pl.Int64)
    num_rows, t_min, t_max = (
        scan.select(pl.len().cast(pl.Int64), ts.min().alias("t_min"), ts.max().alias("t_max"))
        .collect(engine="streaming")
        .row(0)
    )
    if not num_rows or t_max is None:
        raise SchemaError(str(source), None, "no events")
    split = _split_bounds(t_min, t_max, None)
    train = scan.filter(ts < split["train_end"])
    # One distinct count per query: polars 2.1 runs a select with two of them in memory.
    row = (
        train.select(
            *_pool_exprs(scan.collect_schema()),
            pl.col("item_id").n_unique().cast(pl.Int64).alias("items"),
            ts.min().alias("train_start"),
        )
        .collect(engine="streaming")
        .row(0, named=True)
    )
    num_users = int(
        train.select(pl.col("uid").n_unique().cast(pl.Int64)).collect(engine="streaming").item()
    )
    split["train_start"] = row["train_start"]
    num_test = int(
        scan.filter((ts >= split["test_start"]) & (ts < t_max))
        .join(train.select("uid").unique(), on="uid", how="semi")
        .select(pl.len())
        .collect(engine="streaming")
        .item()
    )
    return _report(
        "raw",
        root,
        size=size,
        num_events=num_rows,
        num_train_events=row["events"],
        num_test_events=num_test,
        num_sessions=None,
        num_users=num_users,
        num_items=row["items"],
        split=split,
        pools=_pools("train", row["events"], row["listen_plus"], row["skip"], row["like"]),
    )


def _inspect_report(path: Path, size: str | None) -> dict[str, Any]:
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such directory")
    if (path / MANIFEST_FILE).is_file() or (path / READY_FILE).is_file():
        return _inspect_store(path)  # SampleStore.open names what is missing
    if (path / SPLIT_META_FILE).is_file():
        return _inspect_preprocessed(path)
    if size is not None:
        if not multi_event_path(path, size).is_file():
            raise FileNotFoundError(
                f"{multi_event_path(path, size)}: no such file ({path} is not a raw dataset "
                f"root of size {size!r})"
            )
        return _inspect_raw(path, size)
    sizes = sorted(p.parent.name for p in path.glob(f"flat/*/{MULTI_EVENT_FILE}"))
    if sizes:
        raise ValueError(f"{path}: a raw dataset root; pass --size (one of {', '.join(sizes)})")
    raise ValueError(
        f"{path}: not a preprocess output (no {SPLIT_META_FILE}), a sample store (no "
        f"{MANIFEST_FILE} and {READY_FILE}) or a raw dataset root (no "
        f"flat/<size>/{MULTI_EVENT_FILE})"
    )


_KIND_NAMES = {"raw": "raw dataset", "preprocess": "preprocess output", "store": "sample store"}


def _print_report(r: dict[str, Any]) -> None:
    size = f" (size {r['size']})" if r["size"] is not None else ""
    print(f"{r['path']}: {_KIND_NAMES[r['kind']]}{size}")
    events = "rows in the file" if r["kind"] == "raw" else "events"
    print(
        f"  {events:<16} {r['num_events']:,} (train {r['num_train_events']:,}, "
        f"test {r['num_test_events']:,})"
    )
    if r["num_sessions"] is not None:
        print(f"  {'train sessions':<16} {r['num_sessions']:,}")
    print(f"  {'users':<16} {r['num_users']:,} (with train events)")
    store = r["store"]
    if r["num_items"] is not None:
        print(f"  {'items':<16} {r['num_items']:,} (distinct item_id of train)")
    else:
        print(f"  {'items':<16} vocab {store['vocab']['item_id']:,} (item_id < vocab)")
    s = r["split"]
    print(f"  {'time':<16} t_min {s['t_min']}, t_max {s['t_max']}")
    print(f"  {'train':<16} [{s['train_start']}, {s['train_end']})")
    print(f"  {'test':<16} [{s['test_start']}, {s['test_end']})")
    if store is not None:
        per = store["anchors_per_window"]
        median = per["median"]
        median_text = f"{int(median):,}" if float(median).is_integer() else f"{median:,.1f}"
        vocab = ", ".join(f"{k} {v:,}" for k, v in store["vocab"].items())
        print(
            f"  {'anchors':<16} train {store['num_train_anchors']:,}, "
            f"test {store['num_test_anchors']:,} (min_history {store['min_history']})"
        )
        print(
            f"  {'windows':<16} {store['num_windows']:,} of {store['window_seconds']:,} s from "
            f"{store['first_window_start']}; train anchors per window min {per['min']:,}, "
            f"median {median_text}, max {per['max']:,}"
        )
        print(f"  {'vocab':<16} {vocab}")
        print(
            f"  {'disk':<16} {store['disk_bytes']:,} bytes, "
            f"{store['bytes_per_event']:.1f} bytes/event"
        )
    p = r["pools"]
    scope = f"{p['events']:,} train events"
    if p["scope"] == "all":
        scope = f"all {p['events']:,} events (train + test)"
    print(f"  pools of {scope}:")
    for name in POOL_NAMES:
        print(f"    {name:<12} {p['counts'][name]:>14,}  {100 * p['shares'][name]:6.2f}%")


def _inspect(args: argparse.Namespace) -> None:
    report = _inspect_report(Path(args.path), args.size)
    if args.format == "json":
        print(json.dumps(report, indent=2))
    else:
        _print_report(report)


# verify ------------------------------------------------------------------------------------


def _verify_store(path: Path, preprocessed: str | None, raw: str | None) -> dict[str, Any]:
    """Open the store, recompute every array's sha256 and, given the inputs, check that they
    match their checksums and that the store was built from them (the fingerprint
    build_store records)."""
    store = SampleStore.open(path)
    store.verify()
    m = store.manifest
    if preprocessed is not None:
        verify_checksums(preprocessed)
        settings = _BuildSettings(
            min_history=store.min_history, window_seconds=store.window_seconds
        )
        if m.get("fingerprint") != _fingerprint(Path(preprocessed), Path(raw), settings):
            raise StoreError(
                f"{path}: not built from {preprocessed} and {raw} (their content differs from "
                f"what {MANIFEST_FILE} records); rebuild the store"
            )
    return {
        "kind": "store",
        "path": str(path),
        "inputs_checked": preprocessed is not None,
        "min_history": store.min_history,
        "window_seconds": store.window_seconds,
        "num_users": store.num_users,
        "num_events": store.num_events,
        "num_train_anchors": int(m["num_train_anchors"]),
        "num_test_anchors": int(m["num_test_anchors"]),
        "num_windows": store.num_windows,
        "arrays": {name: entry["sha256"] for name, entry in sorted(m["files"].items())},
    }


def _verify_preprocessed(path: Path) -> dict[str, Any]:
    """Check that the parts of a preprocess output are complete and agree with
    split_meta.json (row counts from the parquet metadata) and item_popularity.npy, then that
    every file matches its checksum record."""
    meta = SplitMeta.from_json(path / SPLIT_META_FILE)
    parts = {d: _parts(path / d) for d in (TRAIN_SESSIONS_DIR, TEST_EVENTS_DIR, SESSION_INDEX_DIR)}
    names = {d: [p.name for p in files] for d, files in parts.items()}
    if len({tuple(n) for n in names.values()}) != 1:
        raise ValueError(f"{path}: the part files differ between directories: {names}")

    def rows(directory: str) -> int:
        total = 0
        for part in parts[directory]:  # one at a time: an unreadable part is named
            with reading(part):
                total += int(pl.scan_parquet(part).select(pl.len()).collect().item())
        return total

    with reading_any(parts[SESSION_INDEX_DIR], path / SESSION_INDEX_DIR):
        index_events = int(
            pl.scan_parquet(parts[SESSION_INDEX_DIR])
            .select(pl.col("num_events").cast(pl.Int64).sum())
            .collect()
            .item()
        )
    popularity_file = path / ITEM_POPULARITY_FILE
    if not popularity_file.is_file():
        raise ValueError(f"{popularity_file}: missing")
    try:
        popularity = np.load(popularity_file, mmap_mode="r")
    except ValueError as exc:
        raise InputFileError(popularity_file, f"cannot read it: {first_line(str(exc))}") from None
    if popularity.dtype != np.int64 or popularity.ndim != 1:
        raise ValueError(
            f"{path / ITEM_POPULARITY_FILE}: {popularity.dtype} of shape {popularity.shape}, "
            "expected one int64 array"
        )
    found = {
        f"{TRAIN_SESSIONS_DIR} rows": (rows(TRAIN_SESSIONS_DIR), meta.num_train_events),
        f"{TEST_EVENTS_DIR} rows": (rows(TEST_EVENTS_DIR), meta.num_test_events),
        f"{SESSION_INDEX_DIR} rows": (rows(SESSION_INDEX_DIR), meta.num_users),
        f"{SESSION_INDEX_DIR} num_events": (index_events, meta.num_train_events),
        f"{ITEM_POPULARITY_FILE} total": (int(popularity.sum()), meta.num_train_events),
    }
    wrong = [
        f"{what} {got:,}, expected {want:,}" for what, (got, want) in found.items() if got != want
    ]
    if wrong:
        raise ValueError(f"{path}: does not match {SPLIT_META_FILE}: {'; '.join(wrong)}")
    verify_checksums(path)
    return {
        "kind": "preprocess",
        "path": str(path),
        "size": meta.size,
        "num_parts": len(names[TRAIN_SESSIONS_DIR]),
        "num_users": meta.num_users,
        "num_train_events": meta.num_train_events,
        "num_test_events": meta.num_test_events,
        "num_sessions": meta.num_sessions,
        "t_min": meta.t_min,
        "t_max": meta.t_max,
    }


def _verify(args: argparse.Namespace) -> None:
    path = Path(args.path)
    _check_dir_arg("PATH", path)
    is_store = (path / MANIFEST_FILE).is_file() or (path / READY_FILE).is_file()
    if not is_store and not (path / SPLIT_META_FILE).is_file():
        raise ValueError(
            f"{path}: not a sample store (no {MANIFEST_FILE} and {READY_FILE}) or a preprocess "
            f"output (no {SPLIT_META_FILE})"
        )
    if is_store:
        if (args.preprocessed is None) != (args.raw is None):
            raise ValueError("--preprocessed and --raw go together")
        if args.preprocessed is not None:
            _check_dir_arg("--preprocessed", Path(args.preprocessed))
            _check_dir_arg("--raw", Path(args.raw))
            _source_files(Path(args.preprocessed), Path(args.raw))  # names a missing input
    elif args.preprocessed is not None or args.raw is not None:
        raise ValueError("--preprocessed and --raw apply to a sample store only")
    # Everything it was given is usable: from here on, what is wrong is a verdict.
    try:
        if is_store:
            report = _verify_store(path, args.preprocessed, args.raw)
        else:
            report = _verify_preprocessed(path)
    except (StoreError, SchemaError, InputFileError, ValueError) as exc:
        raise _Failed(str(exc)) from exc
    if args.format == "json":
        print(json.dumps(report, indent=2))
    elif report["kind"] == "store":
        print(f"{path}: sample store ok: the sha256 of all {len(report['arrays'])} arrays match")
        print(
            f"  users {report['num_users']:,}, events {report['num_events']:,}, anchors train "
            f"{report['num_train_anchors']:,}, test {report['num_test_anchors']:,}, "
            f"{report['num_windows']:,} windows (min_history {report['min_history']})"
        )
        if report["inputs_checked"]:
            print(f"  built from {args.preprocessed} and {args.raw}")
    else:
        print(
            f"{path}: preprocess output ok: {report['num_parts']} parts agree with "
            f"{SPLIT_META_FILE} and every file with {CHECKSUMS_FILE}"
        )
        print(
            f"  users {report['num_users']:,}, train events {report['num_train_events']:,}, "
            f"test events {report['num_test_events']:,}, sessions {report['num_sessions']:,}"
        )
