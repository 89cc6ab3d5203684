"""What polars' parquet writer costs, column by column, for a file of a preprocess output.

    uv run python packages/yambda-data/benchmarks/bench_write.py OUT [--file PATH] [--repeat N]

``OUT`` is a ``yambda-data preprocess`` output; its checksums are verified first. The file
(``--file``, relative to ``OUT``; by default the largest ``train_sessions`` part) is read,
then written again into a temporary directory with the settings and the code of preprocess's
own writes: the whole frame, then each column alone. For each it prints, best of ``--repeat``:
the wall time, the process's CPU time (polars' threads included), and that CPU time as a share
of the whole frame's. It also says whether the rewrite gave the file's bytes back: when it
did, the write timed is the one preprocess made (the exit status is 1 when it did not).

Preprocess writes while it splits and counts the next partition, and polars runs one query at
a time, so the writes of all partitions, one after another, are the floor under its wall time
(the ``write (beside)`` phase of ``bench_preprocess.py``); this names what that floor is made of.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import _common
import polars as pl

from yambda_data.preprocess import TRAIN_SESSIONS_DIR, _write_parquet, checksums_problem


def _largest_train_part(out: Path) -> Path:
    parts = sorted((out / TRAIN_SESSIONS_DIR).glob("part-*.parquet"))
    if not parts:
        raise SystemExit(f"bench_write.py: {out / TRAIN_SESSIONS_DIR}: no part files")
    return max(parts, key=lambda p: p.stat().st_size)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="a yambda-data preprocess output")
    parser.add_argument("--file", help="the file to rewrite, relative to OUT")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (the fastest shown)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    problem = checksums_problem(args.out)
    if problem is not None:
        print(f"bench_write.py: {problem}", file=sys.stderr)
        return 2
    path = args.out / args.file if args.file else _largest_train_part(args.out)
    if not path.is_file():
        print(f"bench_write.py: --file: {path}: no such file (or not a file)", file=sys.stderr)
        return 2
    try:
        frame = pl.read_parquet(path).rechunk()
    except (OSError, pl.exceptions.PolarsError) as exc:
        print(f"bench_write.py: {path}: not a readable parquet file ({exc})", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="bench-write-") as tmp:
        target = Path(tmp) / "rewritten.parquet"
        whole = _common.fastest_call(args.repeat, lambda: _write_parquet(frame, target))
        identical = target.read_bytes() == path.read_bytes()
        rows = [("all columns", whole)]
        for name in frame.columns:
            column = frame.select(name)
            timed = _common.fastest_call(args.repeat, lambda c=column: _write_parquet(c, target))
            rows.append((name, timed))

    print(f"{path}: {frame.height:,} rows, {path.stat().st_size / 2**20:.1f} MiB")
    print(f"rewritten with preprocess's settings: {'byte-identical' if identical else 'DIFFERENT'}")
    print()
    print("| columns written | wall s | CPU s | share of the whole frame's CPU |")
    print("|---|---:|---:|---:|")
    for name, (wall, cpu) in rows:
        print(f"| {name} | {wall:.3f} | {cpu:.2f} | {cpu / whole[1]:.0%} |")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
