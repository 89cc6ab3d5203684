"""Wall time, throughput and peak memory of ``preprocess`` at several input sizes and partition
counts.

For each ``USERS`` value, synthesizes that many users (``--median`` listens per user, the
SynthConfig default when omitted; cached under ``--work DIR`` when given, else in a temporary
directory), then runs each case in its own child process and reads the child's peak RSS from
its resource usage (``os.wait4``), so cases do not share an allocator or a high-water mark.
Cases: ``import`` (the interpreter with yambda_data and polars imported, the floor under every
other figure; once), ``validate`` (``validate_multi_event`` on the whole file, the
pre-partition validation, for comparison; skipped with ``--no-validate``) and one
``preprocess`` run per ``--partitions`` value (``default`` = ``default_partitions`` of the row
count, one partition per 5M rows). Throughput is input events per second of wall time, the
child's interpreter start and imports included.

Run from the repository root::

    uv run python packages/yambda-data/benchmarks/bench_preprocess.py 2000 --partitions default 8
    uv run python packages/yambda-data/benchmarks/bench_preprocess.py 200 2000 10000 \\
        --median 2900 --partitions default --work /tmp/yambda-bench
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from contextlib import nullcontext
from pathlib import Path

import _common

from yambda_data.preprocess import default_partitions
from yambda_data.schema import multi_event_path

_IMPORT = "import yambda_data.preprocess"
_VALIDATE = (
    "import sys\n"
    "from yambda_data.schema import multi_event_path, validate_multi_event\n"
    "validate_multi_event(multi_event_path(sys.argv[1], sys.argv[2]))\n"
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "users", nargs="*", type=int, default=[2000], help="synthetic users, one size per value"
    )
    parser.add_argument("--median", type=int, default=None, help="median listens per user")
    parser.add_argument(
        "--partitions",
        nargs="+",
        default=["default", "8"],
        help="partition counts to run ('default' = default_partitions of the row count)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, help="cache the synthetic inputs here")
    parser.add_argument("--no-validate", action="store_true", help="skip the whole-file case")
    args = parser.parse_args(argv)
    for p in args.partitions:
        if p != "default" and not (p.isdigit() and int(p) > 0):
            parser.error(f"--partitions: {p!r} is neither 'default' nor a positive integer")
    return args


def setup(work: Path, users: int, args: argparse.Namespace) -> tuple[Path, int]:
    """The synthetic input of ``users`` users under ``work`` (cached); (root, row count)."""
    raw, synth_s = _common.synth_cached(work, users, args.median, args.seed)
    rows = _common.count_rows(raw)
    size = multi_event_path(raw, _common.SIZE).stat().st_size / 2**20
    how = "cached" if synth_s is None else f"synthesized in {synth_s:.1f} s"
    print(f"input: {users:,} users, {rows:,} rows, {size:.1f} MiB parquet ({how})")
    return raw, rows


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    table = []
    floor = _common.run_code(_IMPORT, [])
    table.append(
        ("-", "-", "import (Python + polars)", "-", floor.wall_s, None, floor.peak_rss_mib)
    )
    holder = tempfile.TemporaryDirectory(prefix="bench-preprocess-") if args.work is None else None
    with holder or nullcontext():
        work = Path(holder.name) if holder else args.work
        for users in args.users:
            raw, rows = setup(work, users, args)
            cases = []
            if not args.no_validate:
                cases.append(("whole-file `validate_multi_event`", "-", None))
            cases += [("preprocess", p, p) for p in args.partitions]
            for case, shown, parts in cases:
                if parts is None:
                    r = _common.run_code(_VALIDATE, [str(raw), _common.SIZE])
                else:
                    out = work / f"bench-preprocess-out-{users}"
                    shutil.rmtree(out, ignore_errors=True)
                    r = _common.run_preprocess(raw, out, parts)
                    shutil.rmtree(out)
                    if parts == "default":
                        shown = f"{default_partitions(rows)} (default)"
                table.append((users, rows, case, shown, r.wall_s, rows / r.wall_s, r.peak_rss_mib))

    print(
        "\n| users | events | case | partitions | wall s | events/s | peak RSS MiB |\n"
        "|---:|---:|---|---|---:|---:|---:|"
    )
    for users, rows, case, parts, wall, rate, rss in table:
        users_s = users if users == "-" else f"{users:,}"
        rows_s = rows if rows == "-" else f"{rows:,}"
        rate_s = "-" if rate is None else f"{rate / 1e6:.2f}M"
        print(f"| {users_s} | {rows_s} | {case} | {parts} | {wall:.2f} | {rate_s} | {rss:,.0f} |")


if __name__ == "__main__":
    main()
