"""What the integrity checks cost.

    uv run python packages/yambda-data/benchmarks/bench_checksums.py --work /tmp/bench-checksums

Prints, best of ``--repeat`` runs each, with the page cache warm (every file is read once
before it is timed):

* sha256 throughput: one ``--file-gib`` GiB file (random bytes) in one thread, and
  ``--store-gib`` GiB of files in the threads the checks use (``HASH_THREADS``);
* each check at the size of the default training run (``tools/train.py``: 400 synthetic
  users, min_history 16): the synthetic cache (``synthesize_cached``), the preprocess output
  (``checksums_problem``), the sample store (``SampleStore.verify``) and the whole reuse of
  ``prepare_store`` (the preprocess checksums, the store's fingerprint and arrays);
* ``SampleStore.verify`` of a store the size of a Yambda-500m store: sparse files with that
  store's array sizes (9.8 GiB by default; a hole reads as zeros without the disk, so this is
  the hashing cost, as with a warm page cache; a cold cache adds the disk's read time);
* counting the rows that repeat an earlier row: ``count_duplicate_rows`` of one partition
  (about 4.8M events of the 500m shape) and ``count_duplicate_rows_in_file``, the extra pass of
  ``validate``, next to the row checks (``check_multi_event_file``) of the same file.

Inputs are made once under ``--work`` and reused.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

import _common
import polars as pl

import yambda_data as yd
from yambda_data._checksums import HASH_THREADS, sha256_files
from yambda_data.preprocess import checksums_problem
from yambda_data.schema import (
    check_multi_event_file,
    count_duplicate_rows,
    count_duplicate_rows_in_file,
    multi_event_path,
)

GIB = 1 << 30

STORE_500M_BYTES_PER_EVENT = {
    "train_anchor": 7.29,
    "event_item_id": 4.0,
    "event_timestamp": 4.0,
    "pool_listen_plus_position": 2.43,
    "pool_skip_position": 1.46,
    "event_action": 1.0,
    "event_is_organic": 1.0,
    "pool_like_position": 0.08,
    "test_anchor": 0.05,
}
"""The large arrays of a store, in bytes per event (docs/benchmarks.md, the store at Yambda-50m
size); their sizes at 500m are these shares of the store's total."""


def best_of(repeat: int, run: Callable[[], object]) -> float:
    return _common.fastest_call(repeat, run)[0]


def tree_bytes(*paths: Path) -> int:
    total = 0
    for path in paths:
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        total += sum(p.stat().st_size for p in files)
    return total


def warm(*paths: Path) -> None:
    files = [p for path in paths for p in ([path] if path.is_file() else path.rglob("*"))]
    sha256_files([p for p in files if p.is_file()])


def row(name: str, size: int, seconds: float, note: str = "") -> None:
    per_gb = seconds / (size / 1e9) if size else float("nan")
    print(f"| {name} | {size / 1e6:,.1f} | {seconds:.3f} | {per_gb:.2f} | {note} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="folder for the inputs")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--file-gib", type=float, default=1.0, help="size of the random file")
    parser.add_argument("--store-gib", type=float, default=9.8, help="size of the large store")
    parser.add_argument(
        "--skip-duplicates", action="store_true", help="leave out the repeated-rows cases"
    )
    args = parser.parse_args()
    work: Path = args.work
    work.mkdir(parents=True, exist_ok=True)
    print(f"{os.cpu_count()} cores, HASH_THREADS {HASH_THREADS}, best of {args.repeat}")
    print("| check | MB | s | s per GB | note |")
    print("|---|---:|---:|---:|---|")

    one = work / "random"
    size = int(args.file_gib * GIB)
    if not one.is_file() or one.stat().st_size != size:
        with open(one, "wb") as f:
            for start in range(0, size, 1 << 24):
                f.write(os.urandom(min(1 << 24, size - start)))
    warm(one)
    row("sha256, 1 thread", size, best_of(args.repeat, lambda: sha256_files([one], threads=1)))

    # The default training run's data: the synthetic cache, its preprocess output and store.
    config = yd.SynthConfig(users=400, seed=0, size="50m")
    root, prepared = work / "cache", work / "prepared"
    yd.synthesize_cached(root, config)
    store = yd.prepare_store(root, config.size, prepared, min_history=16)
    pre = prepared / "preprocessed"
    warm(root, pre, store.path)
    synth_files = [p for p in root.rglob("*.parquet")]
    row(
        "synthesize_cached, reused",
        tree_bytes(*synth_files),
        best_of(args.repeat, lambda: yd.synthesize_cached(root, config)),
        "3 files",
    )
    row(
        "preprocess output: checksums_problem",
        tree_bytes(pre),
        best_of(args.repeat, lambda: checksums_problem(pre)),
        f"{sum(1 for p in pre.rglob('*') if p.is_file())} files",
    )
    row(
        "store: SampleStore.verify",
        store.disk_bytes(),
        best_of(args.repeat, store.verify),
        f"{len(store.manifest['files'])} arrays",
    )
    row(
        "prepare_store, reused",
        tree_bytes(pre, store.path),
        best_of(args.repeat, lambda: yd.prepare_store(root, config.size, prepared, min_history=16)),
        "preprocess checksums, fingerprint, store arrays",
    )

    # A Yambda-500m-sized store, as sparse files of its arrays' sizes.
    large = work / "store-500m-sparse"
    large.mkdir(exist_ok=True)
    per_event = sum(STORE_500M_BYTES_PER_EVENT.values())
    paths = []
    for name, share in STORE_500M_BYTES_PER_EVENT.items():
        path = large / name
        size = int(args.store_gib * GIB * share / per_event)
        if not path.is_file() or path.stat().st_size != size:
            with open(path, "wb") as f:
                f.truncate(size)
        paths.append(path)
    total = tree_bytes(*paths)
    row(
        f"500m-sized store (sparse), {HASH_THREADS} threads",
        total,
        best_of(args.repeat, lambda: sha256_files(paths)),
        f"{len(paths)} files",
    )
    row(
        "500m-sized store (sparse), 1 thread",
        total,
        best_of(1, lambda: sha256_files(paths, threads=1)),
        "best of 1",
    )

    if args.skip_duplicates:
        return
    raw = work / "raw-500m-shape"
    if not multi_event_path(raw, "500m").is_file():
        yd.synthesize(raw, yd.yambda_shape("500m", users=1_000), stream=True)
    path = multi_event_path(raw, "500m")
    frame = pl.read_parquet(path)
    print(f"\nrepeated rows: {frame.height:,} events, {count_duplicate_rows(frame):,} repeats")
    print("| step | M events | s | s per M events |")
    print("|---|---:|---:|---:|")
    for name, run in (
        ("count_duplicate_rows (one partition in memory)", lambda: count_duplicate_rows(frame)),
        (
            "count_duplicate_rows_in_file (validate's extra pass)",
            lambda: count_duplicate_rows_in_file(
                path, num_rows=frame.height, uid_min=0, uid_max=int(frame["uid"].max())
            ),
        ),
        (
            "check_multi_event_file (the row checks, for scale)",
            lambda: check_multi_event_file(path),
        ),
    ):
        seconds = best_of(args.repeat, run)
        millions = frame.height / 1e6
        print(f"| {name} | {millions:.2f} | {seconds:.3f} | {seconds / millions:.3f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
