"""CPU timings of the jagged primitives, NATIVE against PYTORCH. Prints a table; asserts nothing.

Run from the workspace root:  uv run --package hstu-ops python packages/hstu-ops/benchmarks/bench_jagged.py
Options: --threads N (torch.set_num_threads), --min-run-time SECONDS (per measurement).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import torch

import hstu_ops
from hstu_ops import Kernel


def _jagged(gen: torch.Generator, batch: int, max_len: int, dim: int):
    lengths = torch.randint(0, max_len + 1, (batch,), generator=gen)
    offsets = hstu_ops.complete_cumsum(lengths)
    values = torch.randn(int(offsets[-1]), dim, generator=gen)
    return lengths, values, offsets


def _time(stmt, min_run_time: float) -> float:
    """Median seconds per call, over repeated blocks of calls lasting about 10 ms each."""
    stmt()  # warm-up
    start = time.perf_counter()
    stmt()
    per_call = max(time.perf_counter() - start, 1e-7)
    number = max(1, int(0.01 / per_call))
    samples = []
    deadline = time.perf_counter() + min_run_time
    while len(samples) < 3 or time.perf_counter() < deadline:
        start = time.perf_counter()
        for _ in range(number):
            stmt()
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--min-run-time", type=float, default=0.2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if not hstu_ops.native_available():
        raise SystemExit(f"native extension unavailable: {hstu_ops.native_build_info()['error']}")

    gen = torch.Generator().manual_seed(0)
    rows = []

    for n in (1_000, 100_000, 1_000_000):
        lengths = torch.randint(0, 512, (n,), generator=gen)
        times = {
            k: _time(
                functools.partial(hstu_ops.complete_cumsum, lengths, kernel=k), args.min_run_time
            )
            for k in (Kernel.PYTORCH, Kernel.NATIVE)
        }
        rows.append(("complete_cumsum", f"N={n:,}", times))

    # History (up to max_len rows) + a few candidates per sequence, embedding dim `dim`.
    for batch, max_len, dim in ((32, 256, 128), (256, 512, 128), (1024, 512, 64)):
        _, a, oa = _jagged(gen, batch, max_len, dim)
        _, b, ob = _jagged(gen, batch, 4, dim)
        times = {
            k: _time(
                functools.partial(hstu_ops.concat_1d_jagged, a, oa, b, ob, kernel=k),
                args.min_run_time,
            )
            for k in (Kernel.PYTORCH, Kernel.NATIVE)
        }
        mib = (a.numel() + b.numel()) * a.element_size() / 2**20
        rows.append(("concat_1d_jagged", f"B={batch} L<={max_len} D={dim} ({mib:.0f} MiB)", times))

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU")
    print(f"{'op':<18} {'size':<34} {'PYTORCH':>11} {'NATIVE':>11} {'speed-up':>9}")
    for op, size, times in rows:
        pt, nat = times[Kernel.PYTORCH], times[Kernel.NATIVE]
        print(f"{op:<18} {size:<34} {pt * 1e6:>9.1f}us {nat * 1e6:>9.1f}us {pt / nat:>8.1f}x")


if __name__ == "__main__":
    main()
