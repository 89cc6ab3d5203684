"""A Yambda-sized run end to end on one machine: the time, peak memory and disk of each step,
and what each costs per input event.

Steps, each in a child process of its own: ``synth`` (a synthetic raw dataset with the shape of
a published Yambda size, :func:`yambda_data.yambda_shape`, written with ``stream=True``),
``preprocess`` (:func:`yambda_data.prepare_preprocessed`), ``build-store``
(:func:`yambda_data.prepare_store`, reusing that preprocess output) and, with
``--train-steps N``, ``train`` (``tools/train.py --data RAW --size SIZE`` for N steps of
``--preset``, reading the store through the streaming windows, one loader worker). The run
folder's ``prepared/`` is where the train script looks for its store, so it reuses the two
steps before it.

Memory: ``peak RSS`` is the child's own high-water mark (``os.wait4``; for a process with
loader workers, the larger of it and its largest worker's). ``tree PSS`` is the peak of the
child's whole process tree, sampled every 0.2 s from ``/proc/PID/smaps_rollup`` as the
proportional set size (a page shared by the trainer and its forked loader worker counts
once, where summed RSS would count it twice), and ``tree anon`` the same for anonymous
memory only (Pss_Anon): the memory-mapped store's pages are file-backed, so the kernel can
reclaim them; anonymous memory is what must fit.

The raw dataset is cached in ``--work`` (reused while its stamp matches the config); every
other step is run again, from scratch. ``--from STEP`` starts at a later step, reusing what the
steps before it wrote (they must have run), to measure again after a change. ``--json FILE``
also writes the figures, after each step.

Run from the repository root (each line about ten times the events of the one before)::

    uv run python packages/yambda-data/benchmarks/bench_scale.py --users 700 --work /tmp/scale
    uv run python packages/yambda-data/benchmarks/bench_scale.py --users 6900 \\
        --train-steps 2000 --work /tmp/scale
    uv run python packages/yambda-data/benchmarks/bench_scale.py --users 100000 \\
        --train-steps 2000 --work /tmp/scale
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import threading
from pathlib import Path

import _common

ROOT = Path(__file__).resolve().parents[3]

_SYNTH = (
    "import json, sys\n"
    "from yambda_data.synth import SynthConfig, synthesize\n"
    "synthesize(sys.argv[1], SynthConfig(**json.loads(sys.argv[2])), stream=True)\n"
)
_PREPROCESS = (
    "import sys\n"
    "from yambda_data import prepare_preprocessed\n"
    "prepare_preprocessed(sys.argv[1], sys.argv[2], sys.argv[3])\n"
)
_STORE = (
    "import sys\n"
    "from yambda_data import prepare_store\n"
    "prepare_store(sys.argv[1], sys.argv[2], sys.argv[3], min_history=int(sys.argv[4]))\n"
)


STEPS = ("synth", "preprocess", "build-store", "train")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="500m", help="published Yambda size to imitate")
    parser.add_argument("--users", type=int, default=None, help="users (default: the shape's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, required=True, help="folder for every output")
    parser.add_argument("--train-steps", type=int, default=0, help="0 skips the training step")
    parser.add_argument("--preset", default="tiny", help="model preset of the training step")
    parser.add_argument("--min-history", type=int, default=16)
    parser.add_argument(
        "--from",
        dest="first",
        choices=STEPS,
        default=STEPS[0],
        help="start at this step, reusing the outputs of the steps before it",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.users is not None and args.users < 1:
        parser.error(f"--users: must be >= 1, got {args.users}")
    if args.train_steps < 0:
        parser.error(f"--train-steps: must be >= 0, got {args.train_steps}")
    if args.first == "train" and not args.train_steps:
        parser.error("--from train: needs --train-steps N")
    return args


class TreeMemory:
    """Samples the summed Pss and Pss_Anon of every descendant of this process."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.peak_rss = self.peak_anon = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = os.getpid()
        while not self._stop.wait(self.interval):
            rss = anon = 0
            for pid in _descendants(me):
                fields = _rollup_kib(pid)
                rss += fields.get("Pss", 0)
                anon += fields.get("Pss_Anon", 0)
            self.peak_rss, self.peak_anon = max(self.peak_rss, rss), max(self.peak_anon, anon)


def _descendants(pid: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _rollup_kib(pid: int) -> dict[str, int]:
    try:
        lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        key, _, value = line.partition(":")
        if value.strip().endswith("kB"):
            out[key] = int(value.split()[0])
    return out


@dataclasses.dataclass
class Step:
    name: str
    wall_s: float
    cpu_s: float
    peak_rss_mib: float
    tree_pss_mib: float
    tree_anon_mib: float
    disk_bytes: int
    others_cores: float | None


def measured(name: str, argv: list[str], output: Path | None) -> Step:
    with TreeMemory() as tree:
        child = _common.run_child(argv)
    disk = _common.dir_bytes(output) if output is not None and output.exists() else 0
    return Step(
        name,
        child.wall_s,
        child.cpu_s,
        child.peak_rss_mib,
        tree.peak_rss / 1024,
        tree.peak_anon / 1024,
        disk,
        child.others_cores,
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from yambda_data import yambda_shape
    from yambda_data.schema import multi_event_path

    config = yambda_shape(args.shape, seed=args.seed, users=args.users)
    work = args.work.resolve()
    raw = work / f"raw-{config.size}-u{config.users}-s{config.seed}"
    run = work / f"run-{config.size}-u{config.users}-s{config.seed}"
    prepared = run / "prepared"
    steps: list[Step] = []
    events = 0

    def done(step: Step) -> None:
        # Each step's figures are printed and saved as soon as it ends: a long run that is
        # stopped later keeps what it measured.
        steps.append(step)
        print(
            f"{step.name}: {step.wall_s:.1f} s wall, {step.cpu_s:.1f} CPU s, peak RSS "
            f"{step.peak_rss_mib:.0f} MiB, tree anon {step.tree_anon_mib:.0f} MiB",
            flush=True,
        )
        if args.json is not None:
            figures = {
                "config": wanted,
                "events": events,
                "steps": [dataclasses.asdict(s) for s in steps],
            }
            partial = args.json.with_name(args.json.name + ".tmp")
            partial.write_text(json.dumps(figures, indent=2) + "\n")
            partial.replace(args.json)

    stamp = raw / _common.SYNTH_STAMP
    wanted = dataclasses.asdict(config)
    first = STEPS.index(args.first)
    synthesized = stamp.is_file() and json.loads(stamp.read_text()) == wanted
    # What a later start reuses must be there before anything is removed.
    needed = [(1, synthesized, raw), (2, (prepared / "preprocessed").is_dir(), prepared)]
    needed.append((3, (prepared / "store").is_dir(), prepared / "store"))
    for step, there, path in needed:
        if first >= step and not there:
            raise SystemExit(
                f"bench_scale: --from {args.first}: {path} has no output of "
                f"{STEPS[step - 1]} for this config; start from an earlier step"
            )
    if not synthesized:
        shutil.rmtree(raw, ignore_errors=True)
        raw.mkdir(parents=True)
        done(measured("synth", ["-c", _SYNTH, str(raw), json.dumps(wanted)], raw))
        stamp.write_text(json.dumps(wanted, indent=2) + "\n")
    events = count_events(multi_event_path(raw, config.size))
    if first <= STEPS.index("preprocess"):
        shutil.rmtree(run, ignore_errors=True)
        done(
            measured(
                "preprocess",
                ["-c", _PREPROCESS, str(raw), config.size, str(prepared)],
                prepared / "preprocessed",
            )
        )
    if first <= STEPS.index("build-store"):
        shutil.rmtree(prepared / "store", ignore_errors=True)
        store_args = [str(raw), config.size, str(prepared), str(args.min_history)]
        done(measured("build-store", ["-c", _STORE, *store_args], prepared / "store"))
    if args.train_steps:
        train = [str(ROOT / "tools" / "train.py"), "--data", str(raw), "--size", config.size]
        train += ["--out", str(run), "--preset", args.preset, "--steps", str(args.train_steps)]
        train += ["--evals", "1", "--workers", "1", "--min-history", str(args.min_history)]
        train += ["--overwrite"]
        step = measured("train", train, run)
        step.disk_bytes -= _common.dir_bytes(prepared)
        done(step)
    print_table(config, events, steps)


def count_events(path: Path) -> int:
    import polars as pl

    return int(pl.scan_parquet(path).select(pl.len()).collect().item())


def print_table(config, events: int, steps: list[Step]) -> None:
    millions = events / 1e6
    print(f"{config.size} shape, {config.users:,} users, {events:,} events (seed {config.seed})")
    head = (
        f"{'step':<12}{'wall s':>9}{'CPU s':>9}{'peak RSS MiB':>14}{'tree PSS MiB':>14}"
        f"{'tree anon MiB':>15}{'disk GiB':>10}{'s/Mev':>8}{'CPU s/Mev':>11}{'disk B/ev':>11}"
        f"{'busy':>6}"
    )
    print(head)
    for s in steps:
        busy = "-" if s.others_cores is None else f"{s.others_cores:.1f}"
        print(
            f"{s.name:<12}{s.wall_s:>9.1f}{s.cpu_s:>9.1f}{s.peak_rss_mib:>14.0f}"
            f"{s.tree_pss_mib:>14.0f}{s.tree_anon_mib:>15.0f}{s.disk_bytes / 2**30:>10.2f}"
            f"{s.wall_s / millions:>8.2f}{s.cpu_s / millions:>11.2f}"
            f"{s.disk_bytes / events:>11.1f}{busy:>6}"
        )
    print("busy: cores other processes kept busy meanwhile (above ~0.1 the figures are noisy)")


if __name__ == "__main__":
    main()
