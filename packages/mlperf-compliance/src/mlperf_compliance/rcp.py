"""The RCP check of a set of result logs, by the installed ``mlperf_logging.rcp_checker``.

:func:`rcp_check` runs the checker's own ``check_directory`` in-process on copies of the logs
named ``result_<i>.txt`` and returns an :class:`RcpVerdict` with the figures it logged.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlperf_compliance.olympic import package_file
from mlperf_compliance.records import bounded_lines, not_a_file, scan_log

__all__ = ["RcpVerdict", "rcp_check"]


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
            RCP mean but pass, else 1.0; the summarizer multiplies the score by it. On a failed
            check it is 1.0: the checker computes a factor but writes no ``scaling.json``, so
            the summarizer reports the raw score.
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
        if not_a_file(path) is not None:  # a FIFO or dangling link: a run with no records
            target.touch()
            staged.append(target)
            continue
        scan = scan_log(path)
        if scan.ok:
            shutil.copyfile(path, target)
        else:
            bad = {p.line for p in scan.problems}
            with path.open(encoding="latin-1") as src, target.open("w", encoding="latin-1") as dst:
                for lineno, line in enumerate(bounded_lines(src), start=1):
                    if lineno not in bad:
                        dst.write(line)
        staged.append(target)
    return staged


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def rcp_check(paths: list[Path], usage: str, ruleset: str, benchmark: str) -> RcpVerdict:
    """Run ``mlperf_logging.rcp_checker.check_directory`` on copies of ``paths``."""
    rcp_file = package_file("mlperf_logging.rcp_checker", f"{usage}_{ruleset}")
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
        scaling_factor=float(factor) if passed else 1.0,
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
