"""The checker's report (:class:`CheckReport`) and the helpers every rule uses."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Literal

from storage_workloads.dotted import flatten
from storage_workloads.rules import Issue, Verdict

__all__ = ["CheckReport", "flatten"]


@dataclass(frozen=True)
class CheckReport:
    """The verdict on one parameters file, run or submission.

    Attributes:
        path: what was checked.
        kind: ``"params"``, ``"run"``, ``"datagen"`` (a run folder of a data generation) or
            ``"submission"``.
        verdict: ``CLOSED``, ``OPEN`` or ``INVALID``: the worst of the issues, and of the runs
            for a submission.
        issues: the findings about this item itself.
        runs: for a submission, the report of each run, by folder name order.
        skipped: checks that could not be made, each with the reason (they do not change the
            verdict).
        model, accelerator: what the run is, where known.
        assumed: what the checked file does not say and was taken from the command line or
            guessed from the file (its name, its computation time), each with its source.
    """

    path: str
    kind: Literal["params", "run", "datagen", "submission"]
    verdict: Verdict
    issues: tuple[Issue, ...] = ()
    runs: tuple[CheckReport, ...] = ()
    skipped: tuple[str, ...] = ()
    model: str | None = None
    accelerator: str | None = None
    assumed: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready mapping."""
        out: dict[str, Any] = {
            "path": self.path,
            "kind": self.kind,
            "verdict": self.verdict,
            "model": self.model,
            "accelerator": self.accelerator,
            "issues": [issue.as_dict() for issue in self.issues],
            "skipped": list(self.skipped),
            "assumed": list(self.assumed),
        }
        if self.kind == "submission":
            out["runs"] = [run.as_dict() for run in self.runs]
        return out

    def to_text(self, indent: str = "") -> str:
        """A readable report: the verdict line, then one line per issue and per run."""
        what = " ".join(x for x in (self.model, self.accelerator) if x)
        lines = [f"{indent}{self.verdict}  {self.path} ({self.kind}{', ' + what if what else ''})"]
        for note in self.assumed:
            lines.append(f"{indent}  [assumed] {note}")
        for issue in self.issues:
            detail = []
            if issue.expected is not None:
                detail.append(f"expected {issue.expected}")
            if issue.actual is not None:
                detail.append(f"actual {issue.actual!r}")
            tail = f" ({'; '.join(detail)})" if detail else ""
            lines.append(
                f"{indent}  [{issue.level}] {issue.rule}: {issue.parameter}: {issue.message}{tail}"
            )
        for note in self.skipped:
            lines.append(f"{indent}  [skipped] {note}")
        for run in self.runs:
            lines.append(run.to_text(indent + "  "))
        return "\n".join(lines)


def _invalid(
    parameter: str, message: str, rule: str, expected: object = None, actual: object = None
) -> Issue:
    return Issue(parameter, "INVALID", message, expected=expected, actual=actual, rule=rule)


def _same(a: object, b: object) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, numbers.Real) and isinstance(b, numbers.Real):
        return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=0.0)
    return a == b
