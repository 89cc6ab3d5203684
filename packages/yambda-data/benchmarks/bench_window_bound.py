"""What the early window refusal costs: ``busiest_window_listens`` on raw events files.

    uv run python packages/yambda-data/benchmarks/bench_window_bound.py ROOT [ROOT ...] \\
        [--size 50m] [--window-seconds 86400] [--repeat N]

Each ``ROOT/flat/SIZE/multi_event.parquet`` is read by the same one-pass query that
``tools/train.py`` runs before it preprocesses a raw file it has not prepared yet (the
``min_window_anchors`` of ``prepare_store``). For each it prints the bound, then, best of
``--repeat``, the wall time and the process's CPU time (polars' threads included): the price a
first preparation pays on top of the preprocessing (``bench_preprocess.py`` times that).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import _common
import polars as pl

from yambda_data.schema import multi_event_path
from yambda_data.split import busiest_window_listens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", type=Path, nargs="+", help="raw data roots (flat/SIZE/...)")
    parser.add_argument("--size", default="50m")
    parser.add_argument("--window-seconds", type=int, default=86_400)
    parser.add_argument("--repeat", type=int, default=3, help="runs per file (the fastest shown)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    if args.window_seconds < 1:
        parser.error(f"--window-seconds must be at least 1, got {args.window_seconds}")
    paths = [multi_event_path(root, args.size) for root in args.roots]
    for path in paths:
        if not path.is_file():
            parser.error(f"{path}: no such file")
    print("| file | rows | busiest window: train listens at most | wall s | CPU s |")
    print("|---|---:|---:|---:|---:|")
    for path in paths:
        rows = pl.scan_parquet(path).select(pl.len()).collect().item()
        found: list[int] = []

        def bound(path: Path = path, found: list[int] = found) -> None:
            found.append(busiest_window_listens(pl.scan_parquet(path), args.window_seconds))

        wall, cpu = _common.fastest_call(args.repeat, bound)
        print(f"| {path} | {rows:,} | {found[-1]:,} | {wall:.3f} | {cpu:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
