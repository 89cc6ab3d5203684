"""What the sample store's mapped-page budget costs and saves: cut samples from a built store
with ``SampleStore.mapped_budget_bytes`` at each ``--budget`` (0: never release), each run in a
child process of its own, and print samples/s and the peak RSS.

The store is one built before (by ``bench_scale.py``, ``build-store`` or ``tools/train.py``);
its pages should be in the page cache (a first run warms it). Each run cuts ``--batches``
batches of ``--batch-size`` anchors, drawn with a fixed seed from the middle one of the
store's non-empty train windows, at ``SampleConfig(history_length=--history-length)``, and reports
samples/s, the peak of the process's file-backed resident memory (``RssFile``, sampled after
every batch) and its peak RSS (``wait4``). The budgets alternate, ``--repeat`` times each;
the table keeps each budget's fastest run and its largest peaks.

    uv run python packages/yambda-data/benchmarks/bench_store_memory.py STORE \\
        --history-length 32 --batch-size 256 --batches 200 --repeat 2
    uv run python packages/yambda-data/benchmarks/bench_store_memory.py STORE \\
        --history-length 4086 --batch-size 128 --batches 40 --repeat 2
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import _common

_CUT = """
import json, sys, time
import numpy as np
from yambda_data import SampleConfig
from yambda_data.store import SampleStore

store_path, budget, history, batch, batches = sys.argv[1], *map(int, sys.argv[2:6])
store = SampleStore.open(store_path)
store.mapped_budget_bytes = budget
config = SampleConfig(history_length=history, min_history=store.min_history)
filled = np.flatnonzero(store.window_sizes())
window = store.window(int(filled[filled.size // 2]))
picked = np.random.default_rng(0).permutation(window.size)[: batch * batches]
anchors = np.asarray(window[picked])


def file_backed_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssFile:"))


peak = 0
start = time.perf_counter()
for b in range(batches):
    store.samples(anchors[b * batch : (b + 1) * batch], config)
    peak = max(peak, file_backed_kib())
seconds = time.perf_counter() - start
print(json.dumps({"samples": int(anchors.size), "seconds": seconds, "peak_file_kib": peak}))
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store", type=Path, help="a built sample store")
    parser.add_argument("--budget", type=int, nargs="+", default=[0, 1 << 30], help="bytes")
    parser.add_argument("--history-length", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    if not (args.store / "manifest.json").is_file():
        parser.error(f"{args.store}: not a sample store (no manifest.json)")
    for name in ("history_length", "batch_size", "batches", "repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be >= 1")
    if any(b < 0 for b in args.budget):
        parser.error("--budget: must be >= 0")

    shape = [str(args.history_length), str(args.batch_size), str(args.batches)]
    runs: dict[int, list[tuple[_common.ChildResult, dict]]] = {b: [] for b in args.budget}
    for _ in range(args.repeat):
        for budget in args.budget:
            child = _common.run_code(_CUT, [str(args.store), str(budget), *shape], capture=True)
            runs[budget].append((child, json.loads(child.stdout.strip().splitlines()[-1])))

    print(
        f"store {args.store.name}: history {args.history_length}, {args.batches} batches of "
        f"{args.batch_size}, best of {args.repeat}"
    )
    print(
        f"{'budget MiB':>11}{'samples/s':>11}{'peak RssFile MiB':>18}{'peak RSS MiB':>14}{'busy':>6}"
    )
    for budget, results in runs.items():
        rate = max(r["samples"] / r["seconds"] for _, r in results)
        file_mib = max(r["peak_file_kib"] for _, r in results) / 1024
        rss_mib = max(child.peak_rss_mib for child, _ in results)
        busy = max((c.others_cores or 0.0) for c, _ in results)
        label = "off" if budget == 0 else f"{budget / 2**20:.0f}"
        print(f"{label:>11}{rate:>11,.0f}{file_mib:>18,.0f}{rss_mib:>14,.0f}{busy:>6.1f}")


if __name__ == "__main__":
    main()
