"""One report over many runs: :func:`aggregate_results` and :func:`write_report`."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from storage_workloads._atomic import write_text_atomic
from storage_workloads._records import JsonRecord
from storage_workloads.checker import check_path
from storage_workloads.dlio.checkpointing import _CHECKPOINT_SCHEMA
from storage_workloads.dlio.launch import DlioError
from storage_workloads.dlio.results import UnreadableResult, _fmt, _load_json
from storage_workloads.layout import METADATA_SUFFIX, find_runs, is_datagen, read_metadata
from storage_workloads.workloads import WORKLOADS

REPORT_CSV_COLUMNS: Final = (
    "run",
    "source",
    "model",
    "accelerator",
    "processes",
    "epochs",
    "au_mean_percent",
    "samples_per_s_mean",
    "mb_per_s_mean",
    "passed",
    "verdict",
)

#: Columns of ``checkpoint-report.csv``: one row per checkpointing run.
CHECKPOINT_REPORT_CSV_COLUMNS: Final = (
    "run",
    "model",
    "processes",
    "hosts",
    "scale",
    "bytes_per_checkpoint",
    "write_count",
    "write_seconds_mean",
    "write_gb_per_s_mean",
    "read_count",
    "read_seconds_mean",
    "read_gb_per_s_mean",
    "verdict",
)


@dataclass(frozen=True)
class TrainingRow(JsonRecord):
    """One training run of a report: from this package's ``results.json`` (``source``
    ``storage-workloads``) or DLIO's ``summary.json`` of an mlpstorage run (``dlio-summary``),
    each figure as the file has it (``None``: absent)."""

    run: str
    source: str
    model: Any
    accelerator: Any
    processes: Any
    hosts: Any
    epochs: int | None
    au_mean_percent: Any
    samples_per_s_mean: Any
    mb_per_s_mean: Any
    passed: Any
    verdict: Any


@dataclass(frozen=True)
class CheckpointRow(JsonRecord):
    """One checkpointing run of a report, from its ``checkpoint-results.json``."""

    run: str
    model: Any
    processes: Any
    hosts: Any
    scale: Any
    bytes_per_checkpoint: Any
    write_count: Any
    write_seconds_mean: Any
    write_gb_per_s_mean: Any
    read_count: Any
    read_seconds_mean: Any
    read_gb_per_s_mean: Any
    verdict: Any


@dataclass(frozen=True)
class SkippedRun:
    """A run folder a report lists without figures, and why (data generation, unfinished)."""

    run: str
    reason: str


@dataclass(frozen=True)
class DamagedRun:
    """A run whose results ``file`` cannot be read, left out of a report, and why."""

    run: str
    file: str
    reason: str


@dataclass(frozen=True)
class Spread:
    """The mean, minimum and maximum of one figure over a report's runs."""

    mean: float
    min: float
    max: float


def _spread(values: Sequence[Any]) -> Spread | None:
    numbers = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if not numbers:
        return None
    return Spread(statistics.fmean(numbers), min(numbers), max(numbers))


def _spread_dict(spread: Spread | None) -> dict[str, float]:
    return {} if spread is None else dataclasses.asdict(spread)


@dataclass(frozen=True)
class Report:
    """A report over many runs (:func:`aggregate_results`): the training runs, the
    checkpointing runs, the folders skipped and the runs whose results are damaged, with the
    figures over them (``None``: no run has the figure). :meth:`as_dict` is ``report.json``."""

    runs: list[TrainingRow]
    checkpoint_runs: list[CheckpointRow]
    skipped: list[SkippedRun]
    damaged: list[DamagedRun]

    @property
    def count(self) -> int:
        return len(self.runs)

    @property
    def all_passed(self) -> bool | None:
        """Whether every training run passed (``None`` without training runs)."""
        return all(r.passed is True for r in self.runs) if self.runs else None

    @property
    def workloads(self) -> list[str]:
        return sorted({f"{r.model} {r.accelerator}" for r in self.runs})

    @property
    def au_mean_percent(self) -> Spread | None:
        return _spread([r.au_mean_percent for r in self.runs])

    @property
    def samples_per_s_mean(self) -> Spread | None:
        return _spread([r.samples_per_s_mean for r in self.runs])

    @property
    def mb_per_s_mean(self) -> Spread | None:
        return _spread([r.mb_per_s_mean for r in self.runs])

    @property
    def checkpoint_count(self) -> int:
        return len(self.checkpoint_runs)

    @property
    def checkpoint_write_gb_per_s(self) -> Spread | None:
        return _spread([r.write_gb_per_s_mean for r in self.checkpoint_runs])

    @property
    def checkpoint_read_gb_per_s(self) -> Spread | None:
        return _spread([r.read_gb_per_s_mean for r in self.checkpoint_runs])

    def as_dict(self) -> dict[str, Any]:
        return {
            "runs": [r.as_dict() for r in self.runs],
            "count": self.count,
            "all_passed": self.all_passed,
            "workloads": self.workloads,
            "au_mean_percent": _spread_dict(self.au_mean_percent),
            "samples_per_s_mean": _spread_dict(self.samples_per_s_mean),
            "mb_per_s_mean": _spread_dict(self.mb_per_s_mean),
            "checkpoint_runs": [r.as_dict() for r in self.checkpoint_runs],
            "checkpoint_count": self.checkpoint_count,
            "checkpoint_write_gb_per_s": _spread_dict(self.checkpoint_write_gb_per_s),
            "checkpoint_read_gb_per_s": _spread_dict(self.checkpoint_read_gb_per_s),
            "skipped": [dataclasses.asdict(s) for s in self.skipped],
            "damaged": [dataclasses.asdict(d) for d in self.damaged],
        }


_RESULT_FILES: Final = {
    "training": "results.json",
    "checkpoint": "checkpoint-results.json",
    "dlio": "summary.json",
}
"""The file each kind of run is reported from (what a ``damaged`` entry names)."""


def _training_row(path: Path) -> TrainingRow:
    data = _load_json(path / "results.json")
    return TrainingRow(
        run=str(path),
        source="storage-workloads",
        model=data.get("model"),
        accelerator=data.get("accelerator"),
        processes=data.get("processes"),
        hosts=data.get("hosts"),
        epochs=len(data.get("epochs", [])),
        au_mean_percent=data.get("au_mean_percent"),
        samples_per_s_mean=data.get("samples_per_s_mean"),
        mb_per_s_mean=data.get("mb_per_s_mean"),
        passed=data.get("passed"),
        verdict=data.get("verdict"),
    )


def _dlio_row(path: Path) -> TrainingRow | str:
    """A report row from DLIO's ``summary.json`` of a run folder that has no ``results.json``
    (as mlpstorage leaves one), or why it is no training run."""
    meta = read_metadata(path)
    if is_datagen(path):
        return "data generation"
    if meta.get("benchmark_type") not in (None, "training") or meta.get("command") not in (
        None,
        "run",
        "run_benchmark",
    ):
        what = meta.get("benchmark_type") or f"{meta.get('command')!r}"
        return f"a {what} run: its summary.json is not read here"
    summary = _load_json(path / "summary.json")
    metric = summary.get("metric") if isinstance(summary.get("metric"), Mapping) else {}
    au = metric.get("train_au_mean_percentage")
    if isinstance(au, bool) or not isinstance(au, int | float):
        return "summary.json holds no training metrics (train_au_mean_percentage)"
    checked = check_path(path)
    model = checked.model or meta.get("model")
    accelerator = checked.accelerator or meta.get("accelerator")
    workload = WORKLOADS.get((str(model), str(accelerator)))
    passed = (
        au >= workload.au_threshold * 100
        if workload is not None
        else metric.get("train_au_meet_expectation") == "success"
    )
    epochs = metric.get("train_au_percentage")
    return TrainingRow(
        run=str(path),
        source="dlio-summary",
        model=model,
        accelerator=accelerator,
        processes=summary.get("num_accelerators"),
        hosts=summary.get("num_hosts"),
        epochs=len(epochs) if isinstance(epochs, list) else None,
        au_mean_percent=au,
        samples_per_s_mean=metric.get("train_throughput_mean_samples_per_second"),
        mb_per_s_mean=metric.get("train_io_mean_MB_per_second"),
        passed=passed,
        verdict=checked.verdict,
    )


def _checkpoint_row(path: Path) -> CheckpointRow:
    data = _load_json(path / "checkpoint-results.json")
    if data.get("schema") != _CHECKPOINT_SCHEMA:
        raise UnreadableResult(
            path / "checkpoint-results.json",
            f"not a storage-workloads result (schema {data.get('schema')!r})",
        )
    write = data.get("write") if isinstance(data.get("write"), Mapping) else {}
    read = data.get("read") if isinstance(data.get("read"), Mapping) else {}
    return CheckpointRow(
        run=str(path),
        model=data.get("model"),
        processes=data.get("processes"),
        hosts=data.get("hosts", 1),
        scale=data.get("scale"),
        bytes_per_checkpoint=data.get("bytes_per_checkpoint"),
        write_count=write.get("count"),
        write_seconds_mean=write.get("seconds_mean"),
        write_gb_per_s_mean=write.get("gb_per_s_mean"),
        read_count=read.get("count"),
        read_seconds_mean=read.get("seconds_mean"),
        read_gb_per_s_mean=read.get("gb_per_s_mean"),
        verdict=data.get("verdict"),
    )


def aggregate_results(run_dirs: Sequence[str | os.PathLike[str]]) -> Report:
    """Gather the results of runs into one report.

    Each path is a run directory or any folder above run directories: a submission, the
    ``loop-1`` .. folders of ``run --loops``, or the root (or any part) of a results tree
    (``training/<model>/<command>/<datetime>``, ``checkpointing/<model>/<datetime>``), walked
    down to its run folders (:func:`storage_workloads.layout.find_runs`). A training run
    contributes its ``results.json`` or, where it has none but a ``summary.json`` and a
    ``*_metadata.json`` (a run mlpstorage made), DLIO's own figures and the rules checker's
    verdict; a checkpointing run its ``checkpoint-results.json``. Data generation runs and
    runs without results are listed under ``skipped``; a run whose results file (or, for an
    mlpstorage run, ``summary.json``) cannot be read (truncated, not UTF-8, not a JSON
    object) under ``damaged`` (``run``, ``file``, ``reason``), and no other file is read in
    its place.

    The report lists each run and, over the training runs, the count, whether all passed
    (``None`` without training runs), the mean, minimum and maximum of the mean AU, samples/s
    and MB/s, and the workloads seen; over the checkpointing runs, their count and the mean,
    minimum and maximum of the write and read GB/s. Raises :class:`DlioError` for a path that
    does not exist or holds no run whose results can be read.
    """
    found: list[tuple[Path, str]] = []
    for given in run_dirs:
        p = Path(given)
        if not p.exists():
            raise DlioError(f"{p}: does not exist")
        runs = find_runs(p) if p.is_dir() else []
        if not runs:
            raise DlioError(
                f"{p} has no results.json, checkpoint-results.json or DLIO summary.json with a "
                f"*{METADATA_SUFFIX} (in it or below)"
            )
        found.extend(runs)
    rows: list[TrainingRow] = []
    checkpoints: list[CheckpointRow] = []
    skipped: list[SkippedRun] = []
    damaged: list[DamagedRun] = []
    for path, kind in found:
        try:
            if kind == "training":
                rows.append(_training_row(path))
            elif kind == "checkpoint":
                checkpoints.append(_checkpoint_row(path))
            elif kind == "dlio":
                row = _dlio_row(path)
                if isinstance(row, str):
                    skipped.append(SkippedRun(str(path), row))
                else:
                    rows.append(row)
        except UnreadableResult as exc:
            damaged.append(
                DamagedRun(
                    str(path), exc.path.name, f"{exc.path.name}: cannot read it: {exc.problem}"
                )
            )
        except (DlioError, OSError, ValueError, TypeError, AttributeError) as exc:
            # A results file that parses but holds the wrong shapes ("epochs": 5), or a run
            # folder that cannot be listed: that run is named, the others are reported.
            damaged.append(DamagedRun(str(path), _RESULT_FILES.get(kind, path.name), str(exc)))
        if kind not in ("training", "checkpoint", "dlio"):
            reason = (
                "data generation"
                if is_datagen(path)
                else "no results (an unfinished or failed run)"
            )
            skipped.append(SkippedRun(str(path), reason))
    if not rows and not checkpoints:
        names = ", ".join(str(Path(g)) for g in run_dirs)
        first = (
            f"; damaged: {damaged[0].run} ({damaged[0].reason})"
            if damaged
            else f"; skipped: {skipped[0].run} ({skipped[0].reason})"
            if skipped
            else ""
        )
        raise DlioError(
            f"{names} has no results.json, checkpoint-results.json or DLIO summary.json with a "
            f"*{METADATA_SUFFIX} (in it or below) that can be read{first}"
        )
    return Report(runs=rows, checkpoint_runs=checkpoints, skipped=skipped, damaged=damaged)


def _csv(columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for r in rows:
        writer.writerow([_fmt(r.get(c)) for c in columns])
    return buf.getvalue()


def write_report(
    out_dir: str | os.PathLike[str], report: Report | Mapping[str, Any]
) -> dict[str, Path]:
    """Write ``report.csv`` (one row per training run), ``checkpoint-report.csv`` (one row per
    checkpointing run, when there are any) and then ``report.json``, each atomically, from a
    :class:`Report` or its :meth:`~Report.as_dict`."""
    if isinstance(report, Report):
        report = report.as_dict()
    out = Path(out_dir)
    paths = {"report.csv": out / "report.csv"}
    write_text_atomic(paths["report.csv"], _csv(REPORT_CSV_COLUMNS, report["runs"]))
    if report.get("checkpoint_runs"):
        paths["checkpoint-report.csv"] = out / "checkpoint-report.csv"
        write_text_atomic(
            paths["checkpoint-report.csv"],
            _csv(CHECKPOINT_REPORT_CSV_COLUMNS, report["checkpoint_runs"]),
        )
    paths["report.json"] = out / "report.json"
    write_text_atomic(paths["report.json"], json.dumps(report, indent=2, allow_nan=False) + "\n")
    return paths
