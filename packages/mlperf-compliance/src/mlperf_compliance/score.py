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
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlperf_compliance.checker import DEV_RULESET, check_log, check_ruleset
from mlperf_compliance.records import LogScan, scan_log

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

# What mlperf-logging 4.1.68 writes in result_summarizer._compute_strong_score_standalone, the
# only place the number of dropped scores is set (a local variable, not importable). Used when
# the installed source no longer has this line.
_DROPPED_LINE = re.compile(
    r"max_dropped_scores\s*=\s*(?P<special>\d+)\s+if\s+benchmark\s*==\s*['\"](?P<bench>\w+)['\"]"
    r"\s+else\s+(?P<default>\d+)"
)
_DROPPED_FALLBACK = {"unet3d": 4}
_DROPPED_DEFAULT = 1


@dataclass(frozen=True)
class OlympicRule:
    """The numbers of the olympic score for one benchmark, and where each came from.

    Attributes:
        benchmark: the benchmark.
        required_runs: how many result logs a submission has.
        max_dropped: how many scores are dropped at each end.
        required_runs_source: where ``required_runs`` was read.
        max_dropped_source: where ``max_dropped`` was read.
    """

    benchmark: str
    required_runs: int
    max_dropped: int
    required_runs_source: str
    max_dropped_source: str


def _module_file(module: str, name: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / name


def olympic_rule(benchmark: str = "dlrmv4", usage: str = "training") -> OlympicRule:
    """The olympic-score numbers for ``benchmark``, read from the installed mlperf-logging.

    ``required_runs`` is ``mlperf_logging.benchmark_meta.get_result_file_counts(usage)``
    (what the package checker and ``compute_score`` require). ``max_dropped`` is read from the
    line of the installed ``result_summarizer.py`` that sets it (``max_dropped_scores = 4 if
    benchmark == "unet3d" else 1`` in 4.1.68); if that line is not found, the 4.1.68 values
    are used and the source says so. Raises ``ValueError`` for a benchmark the installed
    package does not know.
    """
    from mlperf_logging.benchmark_meta import get_result_file_counts

    counts = get_result_file_counts(usage)
    if benchmark not in counts:
        known = ", ".join(sorted(counts))
        raise ValueError(f"mlperf-logging knows no {usage} benchmark {benchmark!r} ({known})")
    source = _module_file("mlperf_logging.result_summarizer", "result_summarizer.py")
    match = None
    if source is not None and source.is_file():
        match = _DROPPED_LINE.search(source.read_text(encoding="utf-8", errors="replace"))
    if match is not None:
        special = {match["bench"]: int(match["special"])}
        max_dropped = special.get(benchmark, int(match["default"]))
        where = (
            f"mlperf_logging/result_summarizer/result_summarizer.py "
            f"({' '.join(match.group(0).split())})"
        )
    else:
        max_dropped = _DROPPED_FALLBACK.get(benchmark, _DROPPED_DEFAULT)
        where = (
            "the result summarizer rule of mlperf-logging 4.1.68 (4 for unet3d, else 1); "
            "not found in the installed package"
        )
    return OlympicRule(
        benchmark=benchmark,
        required_runs=int(counts[benchmark]),
        max_dropped=max_dropped,
        required_runs_source=(
            f"mlperf_logging.benchmark_meta.get_result_file_counts({usage!r})[{benchmark!r}]"
        ),
        max_dropped_source=where,
    )


def olympic_mean(
    scores: Sequence[float], failed: int, max_dropped: int
) -> tuple[float | None, list[int]]:
    """The result summarizer's olympic mean of ``scores`` (the successful runs' minutes).

    ``failed`` runs did not succeed and count as dropped slowest runs. The fastest
    ``max_dropped`` scores and the slowest ``max_dropped - failed`` are dropped and the rest
    averaged (``_compute_olympic_average`` in mlperf_logging's result summarizer). Returns the
    mean (``None`` when more than ``max_dropped`` runs failed or nothing is left) and the
    indices into ``scores`` of the runs averaged.
    """
    if failed > max_dropped:
        return None, []
    order = sorted(range(len(scores)), key=lambda i: (scores[i], i))
    kept = order[max_dropped : len(order) - (max_dropped - failed)]
    if not kept:
        return None, []
    return sum(scores[i] for i in kept) / len(kept), sorted(kept)


@dataclass
class RunScore:
    """One result log.

    Attributes:
        path: the log file.
        status: the ``run_stop`` status (``success``/``aborted``), or ``None``.
        run_start_ms, run_stop_ms: the times of the first ``run_start`` and ``run_stop``.
        minutes: the time to train, ``(run_stop - run_start) / 60000``, when both are logged.
        samples_to_converge: the ``samples_count`` of the last ``eval_accuracy`` before
            ``run_stop`` in a successful run (what the RCP checker reads for dlrmv4).
        global_batch_size, benchmark, division: as logged.
        compliant: the compliance checker's verdict, or ``None`` when not checked.
        problems: why the run does not count, each naming the file (and line when known).
        olympic: ``counted``, ``dropped (fastest)``, ``dropped (slowest)`` or ``excluded``.
    """

    path: str
    status: str | None = None
    run_start_ms: float | None = None
    run_stop_ms: float | None = None
    minutes: float | None = None
    samples_to_converge: int | None = None
    global_batch_size: int | None = None
    benchmark: str | None = None
    division: str | None = None
    compliant: bool | None = None
    problems: list[str] = field(default_factory=list)
    olympic: str = "excluded"

    @property
    def name(self) -> str:
        return Path(self.path).name

    @property
    def succeeded(self) -> bool:
        """The run counts for the score: readable, ``success``, compliant if checked."""
        return not self.problems and self.status == "success" and self.minutes is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "status": self.status,
            "succeeded": self.succeeded,
            "minutes": self.minutes,
            "run_start_ms": self.run_start_ms,
            "run_stop_ms": self.run_stop_ms,
            "samples_to_converge": self.samples_to_converge,
            "global_batch_size": self.global_batch_size,
            "benchmark": self.benchmark,
            "division": self.division,
            "compliant": self.compliant,
            "olympic": self.olympic,
            "problems": list(self.problems),
        }


@dataclass
class RcpVerdict:
    """The RCP check of a set of runs (``mlperf_logging.rcp_checker.check_directory``).

    Attributes:
        status: ``passed``, ``failed``, ``skipped`` (not applicable) or ``error``.
        message: the RCP checker's message (``RCP found``, ``RCP Interpolation``,
            ``Insufficient convergence``, ...) or why the check was skipped or failed to run.
        global_batch_size: the batch size the RCP checker read.
        rcp_batch_size: the batch size of the RCP record compared with (interpolated or not).
        rcp_mean: that record's olympic mean of samples to converge.
        min_acceptable_mean: the smallest submission mean that passes (``RCP Mean / Max
            Speedup``).
        submission_mean: the olympic mean of the runs' samples to converge, as the RCP checker
            computed it.
        scaling_factor: ``rcp_mean / submission_mean`` when the runs converge faster than the
            RCP mean but pass, else 1.0; the summarizer multiplies the score by it.
        samples_to_converge: per run, what the RCP checker read (``None``: did not converge).
        source: the function and RCP file used.
    """

    status: str
    message: str = ""
    global_batch_size: int | None = None
    rcp_batch_size: int | None = None
    rcp_mean: float | None = None
    min_acceptable_mean: float | None = None
    submission_mean: float | None = None
    scaling_factor: float = 1.0
    samples_to_converge: list[float | None] = field(default_factory=list)
    source: str = ""

    @property
    def passed(self) -> bool | None:
        """``True``/``False`` when the check ran, ``None`` when it was skipped or failed."""
        return {"passed": True, "failed": False}.get(self.status)

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "passed": self.passed,
            "message": self.message,
            "global_batch_size": self.global_batch_size,
            "rcp_batch_size": self.rcp_batch_size,
            "rcp_mean": self.rcp_mean,
            "min_acceptable_mean": self.min_acceptable_mean,
            "submission_mean": self.submission_mean,
            "scaling_factor": self.scaling_factor,
            "samples_to_converge": list(self.samples_to_converge),
            "source": self.source,
        }


@dataclass
class ScoreReport:
    """The scores of a directory of result logs.

    Attributes:
        directory: the directory.
        benchmark, usage, ruleset: what was scored and checked.
        division: the runs' ``submission_division`` (``None`` if they disagree or omit it).
        runs: one entry per log, in natural file-name order.
        rule: the olympic-score numbers and their sources.
        score: the olympic mean in minutes, or ``None``.
        normalized_score: ``score * rcp.scaling_factor`` (what the summarizer reports).
        mean: the plain mean of the successful runs' minutes.
        rcp: the RCP verdict.
        problems: why the set is not a valid result (too few runs, too many failed, ...).
        checked: whether each log was run through the compliance checker.
    """

    directory: str
    benchmark: str
    usage: str
    ruleset: str
    division: str | None
    runs: list[RunScore]
    rule: OlympicRule
    score: float | None
    normalized_score: float | None
    mean: float | None
    rcp: RcpVerdict
    problems: list[str] = field(default_factory=list)
    checked: bool = True

    @property
    def failed_runs(self) -> int:
        return sum(not r.succeeded for r in self.runs)

    @property
    def valid(self) -> bool:
        """A complete set with an olympic score whose RCP check passed (or does not apply)."""
        return (
            not self.problems
            and self.score is not None
            and self.rcp.status in ("passed", "skipped")
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data (what ``score --format json`` prints)."""
        return {
            "directory": self.directory,
            "benchmark": self.benchmark,
            "usage": self.usage,
            "ruleset": self.ruleset,
            "division": self.division,
            "valid": self.valid,
            "score_minutes": self.score,
            "normalized_score_minutes": self.normalized_score,
            "mean_minutes": self.mean,
            "runs_found": len(self.runs),
            "runs_succeeded": len(self.runs) - self.failed_runs,
            "runs_failed": self.failed_runs,
            "compliance_checked": self.checked,
            "rule": {
                "required_runs": self.rule.required_runs,
                "required_runs_source": self.rule.required_runs_source,
                "max_dropped": self.rule.max_dropped,
                "max_dropped_source": self.rule.max_dropped_source,
            },
            "rcp": self.rcp.to_dict(),
            "problems": list(self.problems),
            "runs": [r.to_dict() for r in self.runs],
        }

    def format_table(self) -> str:
        """A human-readable table of the runs, the score, the RCP verdict and the sources."""
        rows = [("run", "status", "compliant", "minutes", "samples", "olympic")]
        for run in self.runs:
            compliant = {True: "yes", False: "no", None: "-"}[run.compliant]
            rows.append(
                (
                    run.name,
                    run.status or "-",
                    compliant,
                    f"{run.minutes:.3f}" if run.minutes is not None else "-",
                    f"{run.samples_to_converge:,}" if run.samples_to_converge is not None else "-",
                    run.olympic,
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = [
            f"{self.benchmark} results in {self.directory} ({self.usage} ruleset {self.ruleset}, "
            f"{self.division or 'unknown'} division)",
            "",
        ]
        for row in rows:
            cells = [
                cell.rjust(w) if i in (3, 4) else cell.ljust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            ]
            lines.append("  ".join(cells).rstrip())
        lines.append("")
        for run in self.runs:
            for problem in run.problems:
                lines.append(f"excluded: {problem}")
        rule = self.rule
        lines.append(f"runs required: {rule.required_runs}  [{rule.required_runs_source}]")
        lines.append(f"dropped at each end: {rule.max_dropped}  [{rule.max_dropped_source}]")
        if self.score is not None:
            counted = sum(r.olympic == "counted" for r in self.runs)
            lines.append(f"score: {self.score:.3f} minutes (olympic mean of {counted} runs)")
            if self.rcp.scaling_factor != 1.0 and self.normalized_score is not None:
                lines.append(
                    f"normalized score: {self.normalized_score:.3f} minutes "
                    f"(x {self.rcp.scaling_factor:.4f} RCP scaling)"
                )
        else:
            lines.append("score: none")
        lines.append(_rcp_line(self.rcp))
        for problem in self.problems:
            lines.append(f"problem: {problem}")
        checked = "" if self.checked else " (compliance not checked)"
        lines.append(
            f"{'VALID' if self.valid else 'INVALID'}: {self.directory}: "
            f"{len(self.runs) - self.failed_runs} of {len(self.runs)} runs succeeded{checked}"
        )
        return "\n".join(lines)


def _millions(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:.2f}M"


def _rcp_line(rcp: RcpVerdict) -> str:
    if rcp.status in ("skipped", "error"):
        return f"RCP: {rcp.status}: {rcp.message}"
    parts = [f"RCP: {rcp.status.upper()} ({rcp.message})"]
    if rcp.submission_mean is not None:
        parts.append(
            f"samples to converge {_millions(rcp.submission_mean)} (olympic mean) vs RCP mean "
            f"{_millions(rcp.rcp_mean)} at batch {rcp.rcp_batch_size}, at least "
            f"{_millions(rcp.min_acceptable_mean)}"
        )
    line = ": ".join(parts)
    return f"{line}  [{rcp.source}]" if rcp.source else line


def _natural_key(path: Path) -> list[object]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.name)]


def find_result_logs(directory: str | os.PathLike[str]) -> list[Path]:
    """The result logs in ``directory``, in natural name order.

    These are the ``result_*.txt`` and ``result_*.log`` files if there are any (MLPerf packages
    results as ``result_<i>.txt``), else every ``*.log``. Raises ``FileNotFoundError`` naming
    the directory if it does not exist or holds none.
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise FileNotFoundError(f"no directory {folder}")
    found = {p for pattern in RESULT_PATTERNS for p in folder.glob(pattern) if p.is_file()}
    if not found:
        found = {p for p in folder.glob("*.log") if p.is_file()}
    if not found:
        raise FileNotFoundError(f"{folder}: no result logs (result_*.txt, result_*.log or *.log)")
    return sorted(found, key=_natural_key)


def _value(scan: LogScan, key: str) -> tuple[Any, int | None]:
    entry = scan.first(key)
    return (entry.record.get("value"), entry.line) if entry is not None else (None, None)


def _read_run(path: Path, benchmark: str) -> RunScore:
    """Read one log's run_start/run_stop, status and samples; note why it would not count."""
    name = os.fspath(path)
    run = RunScore(path=name)
    scan = scan_log(path)
    run.problems.extend(str(p) for p in scan.problems)
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
        if stop.time_ms < start.time_ms:
            run.problems.append(
                f"{name}:{stop.line}: run_stop is logged before run_start (line {start.line})"
            )
        else:
            run.minutes = (stop.time_ms - start.time_ms) / 60.0 / 1000.0
        if run.status != "success":
            run.problems.append(f"{name}:{stop.line}: run_stop status is {run.status!r}")
        else:
            before = [e for e in scan.all("eval_accuracy") if e.index < stop.index]
            count = before[-1].metadata.get("samples_count") if before else None
            if isinstance(count, int) and not isinstance(count, bool):
                run.samples_to_converge = count
    return run


@contextmanager
def _root_records() -> Iterator[list[logging.LogRecord]]:
    """Collect what is logged to the root logger (where the RCP checker logs), and only that."""
    records: list[logging.LogRecord] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    root.handlers = [_Collect(level=logging.DEBUG)]
    root.setLevel(logging.INFO)
    try:
        yield records
    finally:
        root.handlers = saved_handlers
        root.setLevel(saved_level)


def _stage(paths: list[Path], folder: Path) -> list[Path]:
    """Copy the logs to ``folder`` as ``result_<i>.txt``, leaving out unreadable MLLOG lines.

    The RCP checker only looks at ``result_*.txt`` and crashes on a record that is not JSON;
    the compliance parser skips such lines, and so do these copies.
    """
    staged: list[Path] = []
    for i, path in enumerate(paths):
        target = folder / f"result_{i}.txt"
        scan = scan_log(path)
        if scan.ok:
            shutil.copyfile(path, target)
        else:
            bad = {p.line for p in scan.problems}
            with path.open(encoding="latin-1") as src, target.open("w", encoding="latin-1") as dst:
                for lineno, line in enumerate(src, start=1):
                    if lineno not in bad:
                        dst.write(line)
        staged.append(target)
    return staged


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _rcp_check(paths: list[Path], usage: str, ruleset: str, benchmark: str) -> RcpVerdict:
    """Run ``mlperf_logging.rcp_checker.check_directory`` on copies of ``paths``."""
    rcp_file = _module_file("mlperf_logging.rcp_checker", f"{usage}_{ruleset}")
    rcp_json = rcp_file / f"rcps_{benchmark}.json" if rcp_file is not None else None
    if rcp_json is None or not rcp_json.is_file():
        return RcpVerdict("skipped", f"mlperf-logging has no RCPs for {benchmark} in {ruleset}")
    source = (
        f"mlperf_logging.rcp_checker.check_directory, pruned_rcps, "
        f"rcp_checker/{usage}_{ruleset}/rcps_{benchmark}.json"
    )
    from mlperf_logging.rcp_checker import rcp_checker  # numpy and scipy: import when used

    with tempfile.TemporaryDirectory(prefix="mlperf-rcp-") as tmp:
        staged = _stage(paths, Path(tmp))
        per_run: list[float | None] = []
        sizes: list[int] = []
        with _root_records() as records:
            for original, copy in zip(paths, staged, strict=True):
                try:
                    not_converged, epochs, bs, _ = rcp_checker.read_submission_file(
                        str(copy), ruleset, False
                    )
                except (ValueError, KeyError, TypeError) as exc:
                    return RcpVerdict(
                        "error",
                        f"{original}: the RCP checker cannot read it: {exc!r}",
                        source=source,
                    )
                per_run.append(None if not_converged else _float(epochs))
                if isinstance(bs, int) and bs > 0:
                    sizes.append(bs)
            try:
                passed, message, factor = rcp_checker.check_directory(
                    tmp,
                    usage,
                    ruleset,
                    False,
                    False,
                    rcp_file=None,
                    rcp_pass="pruned_rcps",
                    rcp_bypass=False,
                    set_scaling=False,
                )
            except Exception as exc:  # the checker's own failure, reported not raised
                return RcpVerdict(
                    "error",
                    f"the RCP checker failed: {exc!r}",
                    samples_to_converge=per_run,
                    source=source,
                )
    verdict = RcpVerdict(
        "passed" if passed else "failed",
        str(message),
        global_batch_size=sizes[0] if sizes and len(set(sizes)) == 1 else None,
        scaling_factor=float(factor),
        samples_to_converge=per_run,
        source=source,
    )
    for record in records:
        if record.msg == " RCP Record: %s" and record.args:
            rcp = record.args[0] if isinstance(record.args, tuple) else record.args
            if isinstance(rcp, dict):
                verdict.rcp_batch_size = int(rcp["BS"]) if "BS" in rcp else None
                verdict.rcp_mean = _float(rcp.get("RCP Mean"))
                speedup = _float(rcp.get("Max Speedup"))
                if verdict.rcp_mean is not None and speedup:
                    verdict.min_acceptable_mean = verdict.rcp_mean / speedup
        elif record.msg == " Submission mean epochs: %.4f" and record.args:
            args = record.args if isinstance(record.args, tuple) else (record.args,)
            verdict.submission_mean = _float(args[0])
    return verdict


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
            results = list(pool.map(lambda p: check_log(p, ruleset=ruleset, usage=usage), paths))
        for run, result in zip(runs, results, strict=True):
            run.compliant = result.passed
            if not result.passed:
                failed = result.failed_rules
                first = failed[0] if failed else None
                where = f"{run.path}:{first.line}" if first and first.line else run.path
                what = f"{first.rule}: {first.message}" if first else "checker failed"
                more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
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
        rcp = _rcp_check(paths, usage, ruleset, benchmark)

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
