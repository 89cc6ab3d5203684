"""Helpers shared by the yambda-data benchmarks: child processes with their peak RSS, and a
cache of synthetic inputs and preprocess outputs under a work directory.

Not a benchmark itself; the ``bench_*.py`` scripts next to it import it (they are run as
scripts, so this directory is on ``sys.path``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

SIZE = "50m"
SYNTH_STAMP = "synth.json"
"""Written into a synthetic input directory once it is complete: the SynthConfig used."""

_SYNTH = (
    "import json, sys\n"
    "from yambda_data.synth import SynthConfig, synthesize\n"
    "synthesize(sys.argv[1], SynthConfig(**json.loads(sys.argv[2])))\n"
)
_PREPROCESS = (
    "import sys\n"
    "from yambda_data.preprocess import preprocess\n"
    "parts = None if sys.argv[4] == 'default' else int(sys.argv[4])\n"
    "preprocess(sys.argv[1], sys.argv[2], sys.argv[3], partitions=parts)\n"
)


@dataclasses.dataclass(frozen=True)
class ChildResult:
    wall_s: float
    peak_rss_mib: float
    """``ru_maxrss`` of the child: its own peak, or that of its largest waited-for descendant
    (a DataLoader worker), whichever is larger."""
    cpu_s: float
    """User plus system time of the child and its waited-for descendants."""
    others_cores: float | None
    """Mean number of cores that everything else on the machine kept busy while the child
    ran (from ``/proc/stat``; None elsewhere): above about 0.1 the figures are disturbed."""
    stdout: str


def _busy_seconds() -> float | None:
    """CPU seconds the whole machine has spent busy since boot (Linux), else None."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def run_child(argv: list[str], *, capture: bool = False) -> ChildResult:
    """Run ``python argv...`` in a fresh process; wall time and peak RSS from ``os.wait4``.

    A child of a big parent starts with the parent's RSS as its high-water mark on Linux, so
    callers keep the parent small and do all heavy work in children.
    """
    busy = _busy_seconds()
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, *argv], stdout=subprocess.PIPE if capture else None, text=True
    )
    out = proc.stdout.read() if capture and proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    busy_after = _busy_seconds()
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    if code != 0:
        raise SystemExit(f"child {argv[:3]}... exited with {code}")
    # ru_maxrss is KiB on Linux, bytes on macOS
    scale = 1 if sys.platform == "darwin" else 1024
    cpu = usage.ru_utime + usage.ru_stime
    others = None
    if busy is not None and busy_after is not None:
        others = max(0.0, (busy_after - busy - cpu) / wall)
    return ChildResult(wall, usage.ru_maxrss * scale / 2**20, cpu, others, out)


def best_of(runs: list[ChildResult]) -> ChildResult:
    """The fastest of repeated runs (the least disturbed on a shared machine), with the
    largest peak RSS of them all."""
    fastest = min(runs, key=lambda r: r.wall_s)
    return dataclasses.replace(fastest, peak_rss_mib=max(r.peak_rss_mib for r in runs))


def fastest_call(repeat: int, run: Callable[[], object]) -> tuple[float, float]:
    """The fastest of ``repeat`` calls of ``run`` in this process: its wall seconds and the
    process's CPU seconds during it (every thread's, so a library's own threads count)."""
    best = (float("inf"), 0.0)
    for _ in range(repeat):
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu, start = usage.ru_utime + usage.ru_stime, time.perf_counter()
        run()
        wall = time.perf_counter() - start
        usage = resource.getrusage(resource.RUSAGE_SELF)
        best = min(best, (wall, usage.ru_utime + usage.ru_stime - cpu))
    return best


def run_code(code: str, args: list[str], *, capture: bool = False) -> ChildResult:
    """:func:`run_child` of ``python -c code args...``."""
    return run_child(["-c", code, *args], capture=capture)


def synth_config(users: int, median: int | None, seed: int):
    from yambda_data.synth import SynthConfig

    extra = {} if median is None else {"median_events_per_user": median}
    return SynthConfig(users=users, seed=seed, size=SIZE, **extra)


def synth_dir(work: Path, users: int, median: int | None, seed: int) -> Path:
    m = "default" if median is None else median
    return work / f"raw-u{users}-m{m}-s{seed}"


def synth_cached(
    work: Path, users: int, median: int | None, seed: int
) -> tuple[Path, float | None]:
    """The synthetic input for (users, median, seed) under ``work``, generated in a child
    process unless a complete one (with its stamp) is there. Returns (root, synth wall s or
    None when cached)."""
    cfg = dataclasses.asdict(synth_config(users, median, seed))
    root = synth_dir(work, users, median, seed)
    stamp = root / SYNTH_STAMP
    if stamp.is_file() and json.loads(stamp.read_text()) == cfg:
        return root, None
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    wall = run_code(_SYNTH, [str(root), json.dumps(cfg)]).wall_s
    stamp.write_text(json.dumps(cfg, indent=2) + "\n")
    return root, wall


def run_preprocess(raw: Path, out: Path, partitions: str = "default") -> ChildResult:
    """``preprocess(raw, SIZE, out)`` in a child (``partitions``: 'default' or a count)."""
    return run_code(_PREPROCESS, [str(raw), SIZE, str(out), partitions])


def preprocess_cached(raw: Path, out: Path) -> tuple[Path, ChildResult | None]:
    """The default-partition preprocess output of ``raw`` at ``out``, run in a child unless
    ``out`` already holds one made from this input (its split metadata names the input's
    stamp). Returns (out, the child's result or None when cached)."""
    marker = out / "bench-source.json"
    source = (raw / SYNTH_STAMP).read_text()
    if marker.is_file() and marker.read_text() == source and (out / "split_meta.json").is_file():
        return out, None
    shutil.rmtree(out, ignore_errors=True)
    result = run_preprocess(raw, out)
    marker.write_text(source)
    return out, result


def count_rows(raw: Path) -> int:
    import polars as pl

    from yambda_data.schema import multi_event_path

    return int(pl.scan_parquet(multi_event_path(raw, SIZE)).select(pl.len()).collect().item())


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
