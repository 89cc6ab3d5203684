"""Wall time and peak memory of ``preprocess`` for several partition counts.

Synthesizes ``--users`` users into a temporary directory, then runs each case in its own child
process and reads the child's peak RSS from its resource usage (``os.wait4``), so cases do not
share an allocator or a high-water mark. Cases: ``import`` (the interpreter with yambda_data and
polars imported, the floor under every other figure), ``validate`` (``validate_multi_event`` on
the whole file, the pre-partition validation, for comparison) and one ``preprocess`` run per
``--partitions`` value (``default`` = ``default_partitions`` of the row count).

Run from the repository root::

    uv run python packages/yambda-data/benchmarks/bench_preprocess.py 2000 --partitions default 8
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

from yambda_data.preprocess import default_partitions
from yambda_data.schema import multi_event_path

SIZE = "50m"

_CHILD = {
    "synth": (
        "import sys\n"
        "from yambda_data.synth import SynthConfig, synthesize\n"
        "synthesize(sys.argv[1], SynthConfig(users=int(sys.argv[2]), seed=int(sys.argv[3]), "
        "size=sys.argv[4]))\n"
    ),
    "import": "import yambda_data.preprocess",
    "validate": (
        "import sys\n"
        "from yambda_data.schema import multi_event_path, validate_multi_event\n"
        "validate_multi_event(multi_event_path(sys.argv[1], sys.argv[2]))\n"
    ),
    "preprocess": (
        "import sys\n"
        "from yambda_data.preprocess import preprocess\n"
        "parts = None if sys.argv[4] == 'default' else int(sys.argv[4])\n"
        "preprocess(sys.argv[1], sys.argv[2], sys.argv[3], partitions=parts)\n"
    ),
}


def run_child(kind: str, args: list[str]) -> tuple[float, float]:
    """Run one case; returns (wall seconds, peak RSS MiB) of the child."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _CHILD[kind], *args])
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} {args}: child exited with {proc.returncode}")
    # ru_maxrss is KiB on Linux, bytes on macOS
    scale = 1 if sys.platform == "darwin" else 1024
    return wall, usage.ru_maxrss * scale / 2**20


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("users", nargs="?", type=int, default=2000, help="synthetic users")
    parser.add_argument(
        "--partitions",
        nargs="+",
        default=["default", "8"],
        help="partition counts to run ('default' = default_partitions of the row count)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for p in args.partitions:
        if p != "default" and not (p.isdigit() and int(p) > 0):
            parser.error(f"--partitions: {p!r} is neither 'default' nor a positive integer")

    with tempfile.TemporaryDirectory(prefix="bench-preprocess-") as tmp:
        raw = Path(tmp) / "raw"
        # in a child too: on Linux a child's peak RSS starts from its parent's at fork, so
        # the parent must stay small
        synth_s, _ = run_child("synth", [str(raw), str(args.users), str(args.seed), SIZE])
        path = multi_event_path(raw, SIZE)
        rows = pl.scan_parquet(path).select(pl.len()).collect().item()
        print(
            f"synth: {args.users} users, {rows:,} rows, {path.stat().st_size / 2**20:.1f} MiB "
            f"parquet in {synth_s:.1f} s"
        )
        table = [("import", "-", *run_child("import", []))]
        table.append(("validate_multi_event", "-", *run_child("validate", [str(raw), SIZE])))
        for i, p in enumerate(args.partitions):
            out = Path(tmp) / f"out{i}"
            wall, rss = run_child("preprocess", [str(raw), SIZE, str(out), p])
            shown = f"{default_partitions(rows)} (default)" if p == "default" else p
            table.append(("preprocess", shown, wall, rss))

    print("\n| case | partitions | wall s | peak RSS MiB |\n|---|---|---:|---:|")
    for case, parts, wall, rss in table:
        print(f"| {case} | {parts} | {wall:.2f} | {rss:.0f} |")


if __name__ == "__main__":
    main()
