"""What scoring a directory of result logs found: one :class:`RunScore` per log, and the
:class:`ScoreReport` of the set, as JSON data or as the table ``mlperf-compliance score``
prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlperf_compliance.olympic import OlympicRule
from mlperf_compliance.rcp import RcpVerdict

__all__ = ["RunScore", "ScoreReport"]


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
