"""Reading the reference's convergence runs: the runs a benchmark's RCPs are made of.

A reference convergence log is a run of the reference implementation trained past the target
and logged without ``run_stop`` (the reference's own logs name the benchmark ``hstu``). What
counts in it is where it first reached the target: the ``samples_count`` of the first
``eval_accuracy`` at or above it, for dlrmv4 the samples that the RCP file calls "Epochs to
converge". :func:`score_reference` reads a folder of such logs (its ``*.log`` files or those
one folder down, as ``rcp_logs/gbs_<N>/``), groups the runs by ``global_batch_size`` and gives
for each group what mlperf_logging's RCP checker would make of it as an RCP record (the
olympic mean and the least mean a submission may have, computed by the installed
``RCP_Checker`` itself), next to the installed record of that batch size.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlperf_compliance.checker import check_ruleset
from mlperf_compliance.dlrmv4 import DLRMV4_TARGET_ACCURACY
from mlperf_compliance.olympic import package_file
from mlperf_compliance.records import LogScan, not_a_file, scan_log
from mlperf_compliance.score import find_result_logs

__all__ = [
    "REFERENCE_TARGETS",
    "ReferenceGroup",
    "ReferenceReport",
    "ReferenceRun",
    "find_reference_logs",
    "score_reference",
]

#: The ``eval_accuracy`` that ends a run, per benchmark this module can read.
REFERENCE_TARGETS: dict[str, float] = {"dlrmv4": DLRMV4_TARGET_ACCURACY}
#: Runs an olympic mean that drops one at each end needs (the RCP checker's rule, but unet3d's).
_LEAST_RUNS = 3


@dataclass
class ReferenceRun:
    """One convergence log.

    Attributes:
        path: the log file.
        benchmark: the ``submission_benchmark`` it logs (``hstu`` in the reference's logs).
        global_batch_size, learning_rate, train_samples: as logged.
        samples_to_target: the ``samples_count`` of the first ``eval_accuracy`` at or above
            the target, ``None`` when none reached it.
        evals: how many ``eval_accuracy`` records it has; best: the highest of them.
        problems: why it cannot be used, naming the file.
    """

    path: str
    benchmark: str | None = None
    global_batch_size: int | None = None
    learning_rate: float | None = None
    train_samples: int | None = None
    samples_to_target: int | None = None
    evals: int = 0
    best: float | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def epochs_to_target(self) -> float | None:
        if self.samples_to_target is None or not self.train_samples:
            return None
        return self.samples_to_target / self.train_samples

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "benchmark": self.benchmark,
            "global_batch_size": self.global_batch_size,
            "learning_rate": self.learning_rate,
            "train_samples": self.train_samples,
            "samples_to_target": self.samples_to_target,
            "epochs_to_target": self.epochs_to_target,
            "evals": self.evals,
            "best": self.best,
            "problems": list(self.problems),
        }


@dataclass
class ReferenceGroup:
    """The runs of one global batch size, as an RCP record.

    Attributes:
        global_batch_size: the batch size.
        runs: the runs that reached the target.
        learning_rates: the learning rates they log.
        rcp_mean: the olympic mean of their samples to the target, ``rcp_stdev`` their
            standard deviation and ``min_acceptable_mean`` the least mean a submission at this
            batch size may have (``RCP Mean / Max Speedup``), each as the installed
            ``RCP_Checker`` computes them for a record.
        epochs_mean: the olympic mean of their epochs to the target (samples / train_samples).
        installed_name, installed_mean, installed_min_acceptable_mean: the installed RCP
            record of this batch size and the same figures of it (``None``: there is none).
        closed_min_mean: the least mean a closed submission at this batch size may have, as
            the official RCP check takes it: from the installed record of the batch size if
            pruning kept it, else interpolated between the pruned records around it
            (``None``: the check finds no RCP); ``closed_rcp`` says which.
        verdict: ``matches`` (the runs' samples to the target are the installed record's),
            ``differs``, or ``no installed RCP``.
    """

    global_batch_size: int
    runs: list[ReferenceRun]
    learning_rates: list[float]
    rcp_mean: float
    rcp_stdev: float
    min_acceptable_mean: float
    epochs_mean: float | None
    installed_name: str | None = None
    installed_mean: float | None = None
    installed_min_acceptable_mean: float | None = None
    closed_min_mean: float | None = None
    closed_rcp: str = ""
    verdict: str = "no installed RCP"

    def to_dict(self) -> dict[str, Any]:
        return {
            "global_batch_size": self.global_batch_size,
            "runs": len(self.runs),
            "learning_rates": list(self.learning_rates),
            "samples_to_target": sorted(r.samples_to_target or 0 for r in self.runs),
            "rcp_mean": self.rcp_mean,
            "rcp_stdev": self.rcp_stdev,
            "min_acceptable_mean": self.min_acceptable_mean,
            "epochs_mean": self.epochs_mean,
            "installed_name": self.installed_name,
            "installed_mean": self.installed_mean,
            "installed_min_acceptable_mean": self.installed_min_acceptable_mean,
            "closed_min_mean": self.closed_min_mean,
            "closed_rcp": self.closed_rcp,
            "verdict": self.verdict,
        }


@dataclass
class ReferenceReport:
    """A folder of convergence logs read as RCP records (see :func:`score_reference`)."""

    directory: str
    benchmark: str
    target: float
    usage: str
    ruleset: str
    runs: list[ReferenceRun]
    groups: list[ReferenceGroup]
    problems: list[str]
    source: str

    @property
    def logged_benchmarks(self) -> list[str]:
        return sorted({r.benchmark for r in self.runs if r.benchmark is not None})

    @property
    def valid(self) -> bool:
        """Every run reached the target and every batch size is its installed RCP record."""
        return (
            bool(self.groups)
            and not self.problems
            and all(g.verdict == "matches" for g in self.groups)
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "benchmark": self.benchmark,
            "logged_benchmarks": self.logged_benchmarks,
            "target": self.target,
            "usage": self.usage,
            "ruleset": self.ruleset,
            "valid": self.valid,
            "source": self.source,
            "groups": [g.to_dict() for g in self.groups],
            "problems": list(self.problems),
            "runs": [r.to_dict() for r in self.runs],
        }

    def format_table(self) -> str:
        named = ", ".join(repr(b) for b in self.logged_benchmarks) or "no benchmark"
        lines = [
            f"reference convergence runs: {self.directory}",
            f"benchmark {self.benchmark} (the logs name it {named}), target eval_accuracy >= "
            f"{self.target:g}; RCP figures by {self.source}",
        ]
        rows = [["global batch", "runs", "lr", "samples to target (olympic mean)", "min mean",
                 "epochs", "installed RCP", "closed submission's least mean"]]  # fmt: skip
        for g in self.groups:
            installed = (
                f"{g.installed_name}: {g.verdict} (mean {g.installed_mean:,.1f})"
                if g.installed_name is not None and g.installed_mean is not None
                else g.verdict
            )
            rows.append(
                [
                    f"{g.global_batch_size:,}",
                    str(len(g.runs)),
                    ", ".join(f"{lr:g}" for lr in g.learning_rates),
                    f"{g.rcp_mean:,.1f}",
                    f"{g.min_acceptable_mean:,.1f}",
                    "-" if g.epochs_mean is None else f"{g.epochs_mean:.4f}",
                    installed,
                    "-"
                    if g.closed_min_mean is None
                    else f"{g.closed_min_mean:,.1f} ({g.closed_rcp})",
                ]
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines += [
            "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
        ]
        lines += [f"problem: {p}" for p in self.problems]
        word = "MATCHES" if self.valid else "DIFFERS"
        lines.append(
            f"{word}: {self.directory}: {len(self.runs)} runs, {len(self.groups)} batch "
            f"size(s), {sum(g.verdict == 'matches' for g in self.groups)} the installed RCP"
        )
        return "\n".join(lines)


def find_reference_logs(directory: str | os.PathLike[str]) -> list[Path]:
    """The logs of ``directory`` (:func:`~mlperf_compliance.score.find_result_logs`), else
    the ``*.log`` files one folder down (``rcp_logs/gbs_8192/seed<N>.log``). Raises
    ``FileNotFoundError`` naming the directory."""
    try:
        return find_result_logs(directory)
    except FileNotFoundError:
        found = sorted(p for p in Path(directory).glob("*/*.log") if p.is_file())
        if not found:
            raise FileNotFoundError(
                f"{directory}: no convergence logs (*.log in it or one folder down)"
            ) from None
        return found


def _logged(scan: LogScan, key: str) -> Any:
    entry = scan.first(key)
    return entry.record.get("value") if entry is not None else None


def _read_reference_run(path: Path, target: float) -> ReferenceRun:
    run = ReferenceRun(path=os.fspath(path))
    unreadable = not_a_file(path)
    if unreadable is not None:
        run.problems.append(unreadable)
        return run
    scan = scan_log(path)
    run.problems.extend(str(p) for p in scan.problems)
    benchmark = _logged(scan, "submission_benchmark")
    run.benchmark = benchmark if isinstance(benchmark, str) else None
    for key, attr in (
        ("global_batch_size", "global_batch_size"),
        ("train_samples", "train_samples"),
    ):
        value = _logged(scan, key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            setattr(run, attr, value)
    lr = _logged(scan, "opt_base_learning_rate")
    if isinstance(lr, int | float) and not isinstance(lr, bool):
        run.learning_rate = float(lr)
    if run.global_batch_size is None:
        run.problems.append(f"{run.path}: no global_batch_size logged")
    evals = scan.all("eval_accuracy")
    run.evals = len(evals)
    values = [e.record.get("value") for e in evals]
    numbers = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    run.best = max(numbers) if numbers else None
    for entry, value in zip(evals, values, strict=True):
        count = entry.metadata.get("samples_count")
        if isinstance(value, int | float) and value >= target and isinstance(count, int):
            run.samples_to_target = count
            break
    if run.samples_to_target is None:
        best = "none" if run.best is None else f"{run.best:g}"
        run.problems.append(
            f"{run.path}: no eval_accuracy reached {target:g} ({run.evals} evals, best {best})"
        )
    return run


def _rcp_checker(records: dict[str, dict[str, Any]], benchmark: str, usage: str, ruleset: str):
    """The installed ``RCP_Checker`` over ``records``: each record's ``RCP Mean``, ``RCP
    Stdev`` and ``Min Epochs`` (the least acceptable submission mean) computed as it computes
    its own, and the pruned records the RCP check uses."""
    from mlperf_logging.rcp_checker import rcp_checker  # numpy and scipy: import when used

    return rcp_checker.RCP_Checker(
        usage, ruleset, benchmark, False, rcp_file=io.StringIO(json.dumps(records))
    )


def _closed_bound(checker: Any, global_batch_size: int) -> tuple[float | None, str]:
    """The least submission mean the RCP check (``check_directory`` on the pruned records)
    accepts at ``global_batch_size``, and which record gives it; the same choice of record."""
    found = checker._find_rcp(global_batch_size, "pruned_rcps")
    if found is not None:
        return float(found["Min Epochs"]), "its pruned record"
    low = checker._find_top_min_rcp(global_batch_size, "pruned_rcps")
    high = checker._find_bottom_max_rcp(global_batch_size, "pruned_rcps")
    if low is not None and high is not None:
        _, record = checker._create_interp_rcp(global_batch_size, low, high)
        return float(record["Min Epochs"]), f"interpolated from {low['BS']} and {high['BS']}"
    if low is None and high is not None:
        record = checker._find_min_rcp("pruned_rcps")
        return float(record["Min Epochs"]), f"the record of {record['BS']}"
    return None, "no RCP"


def score_reference(
    directory: str | os.PathLike[str],
    *,
    benchmark: str = "dlrmv4",
    ruleset: str = "6.1.0",
    usage: str = "training",
) -> ReferenceReport:
    """Read the convergence logs of ``directory`` (:func:`find_reference_logs`) as the
    reference runs of ``benchmark``, whatever benchmark name they log.

    Per ``global_batch_size``: the samples to the target (:data:`REFERENCE_TARGETS`) of each
    run that reached it, their olympic mean, standard deviation and least acceptable
    submission mean as the installed ``mlperf_logging.rcp_checker.RCP_Checker`` computes them
    for an RCP record, the olympic mean of the epochs to the target, and the installed RCP
    record of that batch size with the same figures: ``matches`` when the runs' samples to
    the target are that record's, else ``differs``. A run that never reached the target, or
    logs no batch size, is a problem naming its file.

    Raises ``FileNotFoundError`` naming the directory when it holds no logs, and
    ``ValueError`` for a usage or ruleset the checker does not know or a benchmark whose
    target, or RCPs, are not known here.
    """
    check_ruleset(ruleset, usage)
    if benchmark not in REFERENCE_TARGETS:
        raise ValueError(
            f"benchmark {benchmark!r}: its target accuracy is not known here (known: "
            f"{', '.join(f'{b} {t:g}' for b, t in REFERENCE_TARGETS.items())})"
        )
    folder = package_file("mlperf_logging.rcp_checker", f"{usage}_{ruleset}")
    rcp_json = folder / f"rcps_{benchmark}.json" if folder is not None else None
    if rcp_json is None or not rcp_json.is_file():
        raise ValueError(f"mlperf-logging has no {usage} {ruleset} RCPs for {benchmark}")
    target = REFERENCE_TARGETS[benchmark]
    runs = [_read_reference_run(p, target) for p in find_reference_logs(directory)]
    problems = [p for r in runs for p in r.problems]
    by_batch: dict[int, list[ReferenceRun]] = {}
    for run in runs:
        if run.samples_to_target is not None and run.global_batch_size is not None:
            by_batch.setdefault(run.global_batch_size, []).append(run)
    installed_records = json.loads(rcp_json.read_text(encoding="utf-8"))
    installed = _rcp_checker(installed_records, benchmark, usage, ruleset)
    installed_figures = installed.rcp_data
    for gbs, group in sorted(by_batch.items()):
        if len(group) < _LEAST_RUNS:
            problems.append(
                f"{os.fspath(directory)}: global batch {gbs:,}: {len(group)} run(s) reached the "
                f"target; an RCP's olympic mean drops one at each end, so it needs {_LEAST_RUNS}"
            )
            del by_batch[gbs]
    ours = {
        f"reference_{gbs}": {
            "Benchmark": benchmark,
            "BS": gbs,
            "Hyperparams": {},
            "Epochs to converge": [r.samples_to_target for r in group],
        }
        for gbs, group in sorted(by_batch.items())
    }
    our_figures = _rcp_checker(ours, benchmark, usage, ruleset).rcp_data if ours else {}
    groups: list[ReferenceGroup] = []
    for gbs, group in sorted(by_batch.items()):
        figures = our_figures[f"reference_{gbs}"]
        epochs = sorted(e for e in (r.epochs_to_target for r in group) if e is not None)
        kept = epochs[1:-1] if len(epochs) > 2 else epochs
        entry = ReferenceGroup(
            global_batch_size=gbs,
            runs=group,
            learning_rates=sorted({r.learning_rate for r in group if r.learning_rate is not None}),
            rcp_mean=float(figures["RCP Mean"]),
            rcp_stdev=float(figures["RCP Stdev"]),
            min_acceptable_mean=float(figures["Min Epochs"]),
            epochs_mean=sum(kept) / len(kept) if kept else None,
        )
        entry.closed_min_mean, entry.closed_rcp = _closed_bound(installed, gbs)
        for name, record in installed_records.items():
            if record.get("BS") != gbs:
                continue
            mine = installed_figures[name]
            entry.installed_name = name
            entry.installed_mean = float(mine["RCP Mean"])
            entry.installed_min_acceptable_mean = float(mine["Min Epochs"])
            same = sorted(record.get("Epochs to converge", [])) == sorted(
                r.samples_to_target for r in group
            )
            entry.verdict = "matches" if same else "differs"
        groups.append(entry)
    return ReferenceReport(
        directory=os.fspath(directory),
        benchmark=benchmark,
        target=target,
        usage=usage,
        ruleset=ruleset,
        runs=runs,
        groups=groups,
        problems=problems,
        source=f"mlperf_logging.rcp_checker.RCP_Checker, rcp_checker/{usage}_{ruleset}/"
        f"rcps_{benchmark}.json",
    )
