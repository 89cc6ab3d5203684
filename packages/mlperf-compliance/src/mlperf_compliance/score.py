"""Time-to-train scores of a set of result logs, the olympic score, and the RCP check.

The score of one run is what mlperf_logging's result summarizer computes: (``run_stop`` time
- ``run_start`` time) in minutes. The benchmark's score is the summarizer's olympic mean: the
runs that did not succeed are dropped first, then the fastest ``max_dropped`` runs and the
slowest ``max_dropped - failed`` runs, and the rest are averaged. The summarizer's own entry
points cannot be used with the mlperf-logging 4.1.68 wheel (its ``config.yaml`` is not
packaged, and ``compute_score`` unpacks five return values into four), so the mean is computed
here; its numbers come from the installed package where it has them (see
:func:`olympic_rule`). The RCP verdict is the installed ``mlperf_logging.rcp_checker``'s own
``check_directory``, run in-process on copies of the logs named ``result_<i>.txt``.

This module reads the logs and puts the score together from
:mod:`mlperf_compliance.olympic` (the olympic numbers and mean), :mod:`mlperf_compliance.rcp`
(the RCP check) and :mod:`mlperf_compliance.score_report` (the per-run and per-set results);
it re-exports ``OlympicRule``, ``olympic_rule``, ``olympic_mean``, ``RcpVerdict``,
``RunScore`` and ``ScoreReport``.
"""

from __future__ import annotations

import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from mlperf_compliance.checker import (
    DEV_RULESET,
    CheckResult,
    check_log,
    check_ruleset,
    time_order_verdicts,
)
from mlperf_compliance.olympic import OlympicRule, olympic_mean, olympic_rule
from mlperf_compliance.rcp import RcpVerdict, rcp_check
from mlperf_compliance.records import LogScan, not_a_file, scan_log
from mlperf_compliance.score_report import RunScore, ScoreReport

__all__ = [
    "RESULT_PATTERNS",
    "OlympicRule",
    "RcpVerdict",
    "RunScore",
    "ScoreReport",
    "find_result_logs",
    "olympic_mean",
    "olympic_rule",
    "score_results",
]

#: File names of result logs, as MLPerf packages them (``result_<i>.txt``) or as runs write them.
RESULT_PATTERNS = ("result_*.txt", "result_*.log")


def _natural_key(path: Path) -> list[object]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.as_posix())]


RUN_FOLDER_LOG = "mlperf.log"
"""The log of a run folder."""


def find_result_logs(directory: str | os.PathLike[str]) -> list[Path]:
    """The result logs in ``directory``, in natural name order.

    These are the ``result_*.txt`` and ``result_*.log`` files if there are any (MLPerf packages
    results as ``result_<i>.txt``), else every ``*.log``, else the ``mlperf.log`` of each run
    folder in it (``runs/`` of tools/train.py holds ``train-<date-time>/mlperf.log``). Raises
    ``FileNotFoundError`` naming the directory if it does not exist or holds none.
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise FileNotFoundError(f"no directory {folder}")
    # Whatever is named as a log and is not a folder is one: a FIFO or a dangling link among
    # them is a run that does not count (named by _read_run), not a run that is not there.
    found = {p for pattern in RESULT_PATTERNS for p in folder.glob(pattern) if not p.is_dir()}
    for fallback in ("*.log", f"*/{RUN_FOLDER_LOG}"):
        if not found:
            found = {p for p in folder.glob(fallback) if not p.is_dir()}
    if not found:
        raise FileNotFoundError(
            f"{folder}: no result logs (result_*.txt, result_*.log, *.log or */{RUN_FOLDER_LOG})"
        )
    return sorted(found, key=_natural_key)


def _value(scan: LogScan, key: str) -> tuple[Any, int | None]:
    entry = scan.first(key)
    return (entry.record.get("value"), entry.line) if entry is not None else (None, None)


def _read_run(path: Path, benchmark: str) -> RunScore:
    """Read one log's run_start/run_stop, status and samples; note why it would not count."""
    name = os.fspath(path)
    run = RunScore(path=name)
    unreadable = not_a_file(path)
    if unreadable is not None:
        run.problems.append(unreadable)
        return run
    scan = scan_log(path)
    run.problems.extend(str(p) for p in scan.problems)
    run.problems.extend(v.detail for v in time_order_verdicts(scan))  # as check says it
    logged, where = _value(scan, "submission_benchmark")
    run.benchmark = logged if isinstance(logged, str) else None
    if logged is not None and logged != benchmark:
        run.problems.append(
            f"{name}:{where}: submission_benchmark is {logged!r}, not {benchmark!r}"
        )
    division, _ = _value(scan, "submission_division")
    run.division = division if isinstance(division, str) else None
    gbs, _ = _value(scan, "global_batch_size")
    if isinstance(gbs, int) and not isinstance(gbs, bool):
        run.global_batch_size = gbs
    start = scan.first("run_start")
    stop = scan.first("run_stop")
    if start is not None:
        run.run_start_ms = start.time_ms
    if stop is not None:
        run.run_stop_ms = stop.time_ms
        status = stop.metadata.get("status")
        run.status = status if isinstance(status, str) else None
    if start is None:
        run.problems.append(f"{name}: run_start not recorded")
    if stop is None:
        run.problems.append(f"{name}: run_stop not recorded")
    if start is not None and stop is not None:
        if stop.time_ms >= start.time_ms:  # else time_order_verdicts named the line
            run.minutes = (stop.time_ms - start.time_ms) / 60.0 / 1000.0
        if run.status != "success":
            run.problems.append(f"{name}:{stop.line}: run_stop status is {run.status!r}")
        else:
            before = [e for e in scan.all("eval_accuracy") if e.index < stop.index]
            count = before[-1].metadata.get("samples_count") if before else None
            if isinstance(count, int) and not isinstance(count, bool):
                run.samples_to_converge = count
    return run


def _checked(path: Path, ruleset: str, usage: str) -> CheckResult | str:
    """:func:`check_log`'s result, or why the ruleset cannot check the log at all."""
    unreadable = not_a_file(path)
    if unreadable is not None:
        return unreadable
    try:
        return check_log(path, ruleset=ruleset, usage=usage)
    except ValueError as exc:
        return str(exc)
    except subprocess.TimeoutExpired as exc:  # this log gets no verdict; the others do
        return f"{path}: the compliance checker ran longer than {exc.timeout:g} s and was stopped"


def score_results(
    directory: str | os.PathLike[str],
    *,
    benchmark: str = "dlrmv4",
    ruleset: str = "6.1.0",
    usage: str = "training",
    check: bool = True,
    jobs: int | None = None,
) -> ScoreReport:
    """Score the result logs in ``directory`` (see :func:`find_result_logs`).

    Each log's time to train is ``(run_stop - run_start)`` in minutes. A run counts only if
    every ``:::MLLOG`` line parses, it logs ``run_start`` and a ``run_stop`` with status
    ``success``, its ``submission_benchmark`` is ``benchmark``, and (with ``check``) the
    official compliance checker passes it, as the result summarizer requires. The score is the
    summarizer's olympic mean (:func:`olympic_mean`, numbers from :func:`olympic_rule`).

    The RCP check runs for closed-division runs on an official ruleset (the RCPs are for the
    reference data; ``ruleset="dev"`` skips it). ``jobs`` compliance checks run at once
    (default: the CPU count, at most 8).

    Raises ``FileNotFoundError`` naming the directory when it has no result logs, and
    ``ValueError`` for a benchmark, usage or ruleset mlperf-logging does not know.
    """
    check_ruleset(ruleset, usage)
    rule = olympic_rule(benchmark, usage)
    paths = find_result_logs(directory)
    runs = [_read_run(path, benchmark) for path in paths]

    if check:
        workers = max(1, min(jobs or os.cpu_count() or 1, 8, len(paths)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(lambda p: _checked(p, ruleset, usage), paths))
        for run, result in zip(runs, results, strict=True):
            if isinstance(result, str):  # the ruleset cannot judge it (another benchmark)
                run.compliant = False
                if run.benchmark == benchmark:
                    run.problems.append(result)
                continue
            run.compliant = result.passed
            if not result.passed:
                # A problem the run already lists (in the same words) is not repeated.
                failed = [f for f in result.failed_rules if f.detail not in run.problems]
                first = failed[0] if failed else None
                where = f"{run.path}:{first.line}" if first and first.line else run.path
                what = f"{first.rule}: {first.message}" if first else "checker failed"
                more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
                if failed or not result.failed_rules:
                    run.problems.append(f"{where}: not compliant with {ruleset}: {what}{more}")

    succeeded = [r for r in runs if r.succeeded]
    failed = len(runs) - len(succeeded)
    minutes = [r.minutes for r in succeeded if r.minutes is not None]
    score, kept = olympic_mean(minutes, failed, rule.max_dropped)
    if score is not None:
        kept_set = set(kept)
        order = sorted(range(len(minutes)), key=lambda i: (minutes[i], i))
        for i, run in enumerate(succeeded):
            if i in kept_set:
                run.olympic = "counted"
            elif order.index(i) < rule.max_dropped:
                run.olympic = "dropped (fastest)"
            else:
                run.olympic = "dropped (slowest)"
    else:
        for run in succeeded:
            run.olympic = "not scored"

    problems: list[str] = []
    folder = os.fspath(directory)
    if len(runs) < rule.required_runs:
        problems.append(
            f"{folder}: too few runs: {len(runs)} result logs, {benchmark} needs "
            f"{rule.required_runs}"
        )
    elif len(runs) > rule.required_runs:
        problems.append(
            f"{folder}: too many runs: {len(runs)} result logs, the package checker wants "
            f"exactly {rule.required_runs}"
        )
    if failed > rule.max_dropped:
        problems.append(
            f"{folder}: too many runs did not succeed: {failed}, the olympic score drops at "
            f"most {rule.max_dropped}"
        )
    elif score is None:
        problems.append(f"{folder}: no runs left to average after dropping")
    if runs and all(r.run_stop_ms is None and r.benchmark != benchmark for r in runs):
        named = ", ".join(sorted({repr(r.benchmark) for r in runs}))
        problems.append(
            f"{folder}: no log records run_stop and they name the benchmark {named}: the "
            "reference's convergence runs look so (mlperf-compliance score --reference reads "
            "them as an RCP)"
        )
    sizes = {r.global_batch_size for r in runs if r.global_batch_size is not None}
    if len(sizes) > 1:
        problems.append(
            f"{folder}: the runs log different global_batch_size values {sorted(sizes)}"
        )

    divisions = {r.division for r in runs}
    division = divisions.pop() if len(divisions) == 1 else None
    if ruleset == DEV_RULESET:
        rcp = RcpVerdict("skipped", "the dev ruleset's runs are not compared with RCPs")
    elif any(r.benchmark != benchmark for r in runs):
        seen = ", ".join(sorted({str(r.benchmark) for r in runs if r.benchmark != benchmark}))
        rcp = RcpVerdict("skipped", f"not every run is {benchmark} (also: {seen})")
    elif division != "closed":
        seen = ", ".join(sorted(str(d) for d in {r.division for r in runs}))
        rcp = RcpVerdict("skipped", f"RCPs apply to the closed division (runs: {seen})")
    else:
        rcp = rcp_check(paths, usage, ruleset, benchmark)

    normalized = score * rcp.scaling_factor if score is not None else None
    return ScoreReport(
        directory=folder,
        benchmark=benchmark,
        usage=usage,
        ruleset=ruleset,
        division=division,
        runs=runs,
        rule=rule,
        score=score,
        normalized_score=normalized,
        mean=sum(minutes) / len(minutes) if minutes else None,
        rcp=rcp,
        problems=problems,
        checked=check,
    )
