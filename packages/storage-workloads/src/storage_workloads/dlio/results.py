"""A training run's result from DLIO's output: :func:`parse_dlio_output` and
:func:`write_results`."""

from __future__ import annotations

import copy
import csv
import dataclasses
import io
import json
import math
import numbers
import os
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from storage_workloads._atomic import write_text_atomic
from storage_workloads._reading import UnusableFile, load_json_file
from storage_workloads._records import JsonRecord
from storage_workloads.dlio.launch import DlioError

#: The schema of ``results.json``.
TRAINING_RESULTS_SCHEMA: Final = "storage-workloads/dlio-results/1"

#: Columns of ``results.csv``: one row per epoch, then a ``mean`` row.
RESULTS_CSV_COLUMNS: Final = (
    "epoch",
    "au_percent",
    "samples_per_s",
    "mb_per_s",
    "steps",
    "au_threshold_percent",
    "passed",
)


@dataclass(frozen=True)
class EpochFigures:
    """One epoch of a training run over all ranks: the AU (%, the mean over ranks), samples/s
    (their sum), MB/s (samples/s x record length, in MiB as DLIO's "MB") and the steps."""

    epoch: int
    au_percent: float
    samples_per_s: float
    mb_per_s: float
    steps: int


@dataclass(frozen=True)
class DlioOutput(JsonRecord):
    """A training run's figures from DLIO's output (:func:`parse_dlio_output`).

    Attributes:
        num_accelerators: the processes DLIO ran.
        epochs: each epoch's figures.
        au_mean_percent, au_stdev_percent, samples_per_s_mean, mb_per_s_mean: over the
            epochs.
        record_length_bytes: what MB/s is computed with.
        au_threshold_percent: the workload's threshold; passed: the mean AU reaches it.
        consistent_with_summary: the rank files reproduce DLIO's ``summary.json``.
        dlio_summary: DLIO's own figures; host_memory_gb, start, end: as DLIO recorded them.
    """

    num_accelerators: int
    epochs: list[EpochFigures]
    au_mean_percent: float
    au_stdev_percent: float
    samples_per_s_mean: float
    mb_per_s_mean: float
    record_length_bytes: int
    au_threshold_percent: float
    passed: bool
    consistent_with_summary: bool
    dlio_summary: dict[str, Any]
    host_memory_gb: Any
    start: Any
    end: Any


@dataclass(frozen=True)
class TrainingResult:
    """A training run (:func:`~storage_workloads.dlio.training.run_training`), as
    ``results.json`` holds it (:meth:`as_dict`): what ran and where (the workload, engine,
    processes, hosts and the memory read from them, the run folder, the ``--param`` changes,
    DLIO's command line, the wall time, the DLIO extensions), DLIO's figures (``figures``), and
    the rules checker's verdict and issues."""

    model: str
    accelerator: str
    engine: str
    processes: int
    hosts: int | str
    measured_host_memory_gib: list[float] | None
    run_dir: str
    params: dict[str, Any]
    command: list[str]
    wall_s: float
    dlio_extensions: list[str]
    figures: DlioOutput
    verdict: str
    issues: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        """``results.json``: this package's schema, the run, DLIO's figures, the verdict."""
        run = {f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self)}
        verdict, issues = run.pop("verdict"), run.pop("issues")
        del run["figures"]
        return {
            "schema": TRAINING_RESULTS_SCHEMA,
            **run,
            **self.figures.as_dict(),
            "verdict": verdict,
            "issues": issues,
        }


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise DlioError(f"{what} is not a finite number: {value!r}")
    return float(value)


class UnreadableResult(DlioError):
    """A results file (this package's or DLIO's) that exists but cannot be used: ``path`` and
    the ``problem`` in words (not UTF-8, malformed or truncated JSON, not a JSON object)."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"cannot read {path}: {problem}")
        self.path = path
        self.problem = problem


def _load_json(path: Path) -> dict[str, Any]:
    try:
        data = load_json_file(path)
    except FileNotFoundError:
        if path.is_symlink():
            raise UnreadableResult(path, "a dangling symbolic link") from None
        raise DlioError(f"{path} is missing: DLIO did not finish the run") from None
    except OSError as exc:
        raise UnreadableResult(path, str(exc.strerror or exc)) from None
    except UnusableFile as exc:
        raise UnreadableResult(path, str(exc)) from None
    if not isinstance(data, dict):
        raise UnreadableResult(path, f"expected a JSON object, got {type(data).__name__}")
    return data


def _rank_epoch(output: Mapping[str, Any], epoch: str, source: Path) -> tuple[float, float, int]:
    """One rank's AU (%), samples/s and steps in one epoch, weighting blocks by their steps,
    as DLIO does."""
    stats = output.get(epoch)
    if not isinstance(stats, Mapping):
        raise DlioError(f"{source}: no statistics for epoch {epoch}")
    au, throughput, proc = stats.get("au"), stats.get("throughput"), stats.get("proc")
    if not (
        isinstance(au, Mapping) and isinstance(throughput, Mapping) and isinstance(proc, Mapping)
    ):
        raise DlioError(f"{source}: epoch {epoch} lacks the au, throughput or proc sections")
    blocks = [b for b in au if b != "eval"]
    steps = [len(proc.get(b, ())) for b in blocks]
    total = sum(steps)
    if total == 0:
        return 0.0, 0.0, 0
    au_w = sum(_number(au[b], f"{source}: au {b}") * s for b, s in zip(blocks, steps, strict=True))
    tp_w = sum(
        _number(throughput[b], f"{source}: throughput {b}") * s
        for b, s in zip(blocks, steps, strict=True)
    )
    return au_w / total, tp_w / total, total


def parse_dlio_output(
    output_dir: str | os.PathLike[str],
    *,
    au_threshold: float,
    record_length_bytes: int,
) -> DlioOutput:
    """The result of a DLIO training run from its output folder.

    Reads ``summary.json`` and every ``<rank>_output.json``. Per epoch, a rank's accelerator
    utilisation (AU) and samples/s are its block figures weighted by steps; the epoch's AU is
    the mean over ranks and its samples/s the sum, which is how DLIO builds ``summary.json``.
    MB/s is samples/s times ``record_length_bytes`` in MiB (DLIO's "MB"). The run passes when
    the mean AU reaches ``au_threshold`` (a fraction, 0.9 for 90%). The figures recomputed from
    the rank files are compared with ``summary.json`` (``consistent_with_summary``).

    Raises :class:`DlioError` for a missing or malformed file.
    """
    out = Path(output_dir)
    summary = _load_json(out / "summary.json")
    metric = summary.get("metric")
    if not isinstance(metric, Mapping) or "train_au_percentage" not in metric:
        raise DlioError(
            f"{out / 'summary.json'} has no training metrics (metric.train_au_percentage)"
        )
    n = summary.get("num_accelerators")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise DlioError(f"{out / 'summary.json'}: num_accelerators is {n!r}")
    ranks = []
    for rank in range(n):
        path = out / f"{rank}_output.json"
        ranks.append((path, _load_json(path)))
    epoch_keys = sorted({k for _, data in ranks for k in data if k.isdigit()}, key=int)
    if not epoch_keys:
        raise DlioError(f"{out}: the rank files hold no epochs")
    epochs = []
    for key in epoch_keys:
        per_rank = [_rank_epoch(data, key, path) for path, data in ranks]
        au = statistics.fmean(r[0] for r in per_rank)
        samples = sum(r[1] for r in per_rank)
        epochs.append(
            EpochFigures(
                epoch=int(key),
                au_percent=au,
                samples_per_s=samples,
                mb_per_s=samples * record_length_bytes / 2**20,
                steps=sum(r[2] for r in per_rank),
            )
        )
    au_mean = statistics.fmean(e.au_percent for e in epochs)
    samples_mean = statistics.fmean(e.samples_per_s for e in epochs)
    dlio = {
        key: metric.get(key)
        for key in (
            "train_au_percentage",
            "train_au_mean_percentage",
            "train_au_meet_expectation",
            "train_throughput_samples_per_second",
            "train_throughput_mean_samples_per_second",
            "train_io_mean_MB_per_second",
        )
    }

    def close(a: float, b: object) -> bool:
        return isinstance(b, int | float) and math.isclose(a, float(b), rel_tol=1e-6, abs_tol=1e-9)

    consistent = (
        close(au_mean, dlio["train_au_mean_percentage"])
        and close(samples_mean, dlio["train_throughput_mean_samples_per_second"])
        and isinstance(dlio["train_au_percentage"], list)
        and len(dlio["train_au_percentage"]) == len(epochs)
        and all(
            close(e.au_percent, v)
            for e, v in zip(epochs, dlio["train_au_percentage"], strict=False)
        )
    )
    threshold = au_threshold * 100
    return DlioOutput(
        num_accelerators=n,
        epochs=epochs,
        au_mean_percent=au_mean,
        au_stdev_percent=statistics.pstdev(e.au_percent for e in epochs),
        samples_per_s_mean=samples_mean,
        mb_per_s_mean=samples_mean * record_length_bytes / 2**20,
        record_length_bytes=record_length_bytes,
        au_threshold_percent=threshold,
        passed=au_mean >= threshold,
        consistent_with_summary=consistent,
        dlio_summary=dlio,
        host_memory_gb=summary.get("host_memory_GB"),
        start=summary.get("start"),
        end=summary.get("end"),
    )


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _results_csv(result: Mapping[str, Any]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(RESULTS_CSV_COLUMNS)
    threshold = result["au_threshold_percent"]
    for e in result["epochs"]:
        writer.writerow(
            [
                e["epoch"],
                _fmt(e["au_percent"]),
                _fmt(e["samples_per_s"]),
                _fmt(e["mb_per_s"]),
                e["steps"],
                _fmt(threshold),
                e["au_percent"] >= threshold,
            ]
        )
    writer.writerow(
        [
            "mean",
            _fmt(result["au_mean_percent"]),
            _fmt(result["samples_per_s_mean"]),
            _fmt(result["mb_per_s_mean"]),
            sum(e["steps"] for e in result["epochs"]),
            _fmt(threshold),
            result["passed"],
        ]
    )
    return buf.getvalue()


def write_results(
    run_dir: str | os.PathLike[str], result: TrainingResult | Mapping[str, Any]
) -> dict[str, Path]:
    """Write ``results.csv`` and then ``results.json`` into ``run_dir``, each atomically, from a
    :class:`TrainingResult` or its :meth:`~TrainingResult.as_dict`."""
    if isinstance(result, TrainingResult):
        result = result.as_dict()
    run = Path(run_dir)
    paths = {"results.csv": run / "results.csv", "results.json": run / "results.json"}
    write_text_atomic(paths["results.csv"], _results_csv(result))
    write_text_atomic(paths["results.json"], json.dumps(result, indent=2, allow_nan=False) + "\n")
    return paths
