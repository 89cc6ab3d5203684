"""Checking a run's parameters (:func:`check_params`), and a parameters file, a run directory
or a submission directory (:func:`check_path`)."""

from __future__ import annotations

import dataclasses
import numbers
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from storage_workloads.checker.checkpointing import _check_checkpointing
from storage_workloads.checker.files import (
    Assumed,
    checkpoint_name,
    datagen_params,
    is_hydra_record,
    is_workload,
    workload_params,
)
from storage_workloads.checker.params import TRAINING_KEYS, _load_mapping, _unknown_keys
from storage_workloads.checker.report import CheckReport, _invalid, _same, flatten
from storage_workloads.checker.training import _check_training
from storage_workloads.checkpoint import CHECKPOINT_WORKLOADS
from storage_workloads.dotted import apply_params
from storage_workloads.layout import generates_data, read_metadata
from storage_workloads.rules import Issue, verdict
from storage_workloads.workloads import MODELS, WORKLOADS

#: No value given on the command line.
_NOTHING: Final = Assumed()
#: Runs one submission must hold.
RUNS_PER_SUBMISSION: Final = 5


def check_params(
    params: Mapping[str, Any], *, source: str = "params", datagen: bool = False
) -> CheckReport:
    """Check the parameters of one run (a mapping with the keys of :data:`TRAINING_KEYS` or,
    for a llama3 model, :data:`CHECKPOINT_KEYS`). ``source`` names it in messages."""
    issues: list[Issue] = []
    skipped: list[str] = []
    model: str | None = None
    accelerator: str | None = None
    name = params.get("model")
    if isinstance(name, str) and name.strip().lower().replace("-", "_") in CHECKPOINT_WORKLOADS:
        cw = _check_checkpointing(params, source, issues, skipped)
        model = cw.name if cw else None
    elif name is None:
        issues.append(
            _invalid(
                "model",
                f"{source}: model not declared",
                "model-recognized",
                expected="a model name",
            )
        )
        _unknown_keys(params, TRAINING_KEYS, source, issues)
    else:
        w = _check_training(params, source, issues, skipped, datagen)
        if w is not None:
            model, accelerator = w.model, w.accelerator
    return CheckReport(
        path=source,
        kind="params",
        verdict=verdict(issues),
        issues=tuple(issues),
        skipped=tuple(skipped),
        model=model,
        accelerator=accelerator,
    )


#: Where a run directory keeps what the checker reads.
RUN_RECORD: Final = "run.json"

_HYDRA_CONFIGS: Final = (".hydra/config.yaml", "dlio/.hydra/config.yaml", "dlio_config/config.yaml")


def _is_run_dir(path: Path) -> bool:
    return (
        (path / RUN_RECORD).is_file()
        or (path / "summary.json").is_file()
        or any((path / c).is_file() for c in _HYDRA_CONFIGS)
    )


def _summary(path: Path) -> Path | None:
    for candidate in (path / "summary.json", path / "dlio" / "summary.json"):
        if candidate.is_file():
            return candidate
    return None


def _infer_accelerator(config: Mapping[str, Any]) -> str | None:
    flat = flatten(config)
    model = str(flat.get("model.name", flat.get("model", ""))).lower()
    compute = flat.get("train.computation_time")
    for (m, a), w in WORKLOADS.items():
        if (
            m == model
            and isinstance(compute, numbers.Real)
            and _same(compute, w.computation_time_s)
        ):
            return a
    return None


def _hydra_workload(path: Path, issues: list[Issue]) -> dict[str, Any] | None:
    """The workload config DLIO ran, from its Hydra record (``dlio_config/config.yaml``, or
    ``.hydra/`` of older runs), or ``None`` where there is none."""
    hydra = next((path / c for c in _HYDRA_CONFIGS if (path / c).is_file()), None)
    if hydra is None:
        return None
    loaded = _load_mapping(hydra, issues)
    if loaded is None:
        return None
    config = loaded.get("workload", loaded)
    if not isinstance(config, Mapping):
        issues.append(_invalid("workload", f"{hydra}: 'workload' is not a mapping", "parse"))
        return None
    return dict(config)


def _run_config(
    path: Path, record: Mapping[str, Any], issues: list[Issue]
) -> dict[str, Any] | None:
    """A run's DLIO config: what DLIO ran (its Hydra record), else the workload file the run
    wrote with the Hydra overrides ``run.json`` records applied (a run that has not started)."""
    found = len(issues)
    ran = _hydra_workload(path, issues)
    if ran is not None or len(issues) > found:
        return ran
    config_file = record.get("config_file")
    if not isinstance(config_file, str):
        return None
    written = _load_mapping(path / config_file, issues)
    if written is None:
        return None
    overrides = record.get("dlio_overrides") or {}
    if not isinstance(overrides, Mapping):
        issues.append(
            _invalid(
                "dlio_overrides", f"{path / RUN_RECORD}: dlio_overrides is not a mapping", "parse"
            )
        )
        return None
    try:
        return apply_params(written, overrides)
    except ValueError as exc:
        issues.append(_invalid("dlio_overrides", f"{path / RUN_RECORD}: {exc}", "parse"))
        return None


def _described_params(
    path: Path, config: Mapping[str, Any], skipped: list[str]
) -> tuple[dict[str, Any], bool]:
    """The parameters of a run folder without ``run.json`` (as mlpstorage leaves one), from
    the config DLIO ran and the folder's metadata file, and whether it is a datagen. The
    accelerator is the metadata's, else the one whose workload has the run's computation
    time; a datagen has none, and is checked against its model's published datagen."""
    meta = read_metadata(path)
    flat = flatten(config)
    model = flat.get("model.name", config.get("model")) or meta.get("model")
    checkpoint = checkpoint_name(model, str(meta.get("model") or ""))
    if checkpoint is not None:  # DLIO's llama_8b is the workload llama3_8b
        return {"model": checkpoint, "config": dict(config)}, False
    params: dict[str, Any] = {"model": model, "config": dict(config)}
    datagen = meta.get("command") == "datagen" or generates_data(config)
    if datagen:
        datagen_params(params, skipped)
        return params, True
    accelerator = meta.get("accelerator") or _infer_accelerator(config)
    params["accelerator"] = accelerator or (
        f"unknown (computation_time {flat.get('train.computation_time')!r}, and no "
        "accelerator in a metadata file)"
    )
    return params, False


def _check_run_dir(path: Path, given: Assumed = _NOTHING) -> CheckReport:
    issues: list[Issue] = []
    skipped: list[str] = []
    assumed: list[str] = []
    record_path = path / RUN_RECORD
    params: dict[str, Any] | None
    datagen = False
    summary_path = _summary(path)
    summary: dict[str, Any] | None = None
    if summary_path is not None:
        summary = _load_mapping(summary_path, issues)
    read_problems = len(issues)  # a damaged summary.json is its own finding; the rest is judged
    if record_path.is_file():
        record = _load_mapping(record_path, issues)
        if record is None:
            return CheckReport(str(path), "run", "INVALID", tuple(issues))
        params = record.get("params") if isinstance(record.get("params"), Mapping) else None
        if params is None:
            issues.append(_invalid("params", f"{record_path}: no 'params' mapping", "parse"))
            return CheckReport(str(path), "run", "INVALID", tuple(issues))
        params = dict(params)
        config = _run_config(path, record, issues)
        if config is None and len(issues) > read_problems:
            return CheckReport(str(path), "run", "INVALID", tuple(issues))
        if config is not None:
            params["config"] = config
        datagen = record.get("command") == "datagen"
        if datagen:
            skipped.append("au: a datagen run has no accelerator utilisation")
    else:
        config = _hydra_workload(path, issues)
        if config is None:
            if len(issues) == read_problems:
                issues.append(
                    _invalid(
                        str(path),
                        f"{path}: no {RUN_RECORD} and no DLIO Hydra config.yaml",
                        "readable",
                    )
                )
            return CheckReport(str(path), "run", "INVALID", tuple(issues))
        params, datagen = _described_params(path, config, skipped)
    checkpointing = _is_checkpointing(params)
    if summary is not None:
        n = summary.get("num_accelerators")
        count_key = "num_processes" if checkpointing else "num_accelerators"
        declared = params.get(count_key)
        if isinstance(n, int) and not isinstance(n, bool):
            if declared is None:
                params[count_key] = n
            elif declared != n:
                issues.append(
                    _invalid(
                        count_key,
                        f"declared {declared} accelerators, but DLIO ran {n} processes",
                        "num-accelerators",
                        expected=declared,
                        actual=n,
                    )
                )
        host_memory = summary.get("host_memory_GB")
        if (
            not checkpointing
            and isinstance(host_memory, list)
            and host_memory
            and params.get("host_memory_gb") is None
            and params.get("measured_host_memory_gb") is None
        ):
            values = [
                v for v in host_memory if isinstance(v, int | float) and not isinstance(v, bool)
            ]
            if values:
                params["host_memory_gb"] = max(values)
                params.setdefault("hosts", len(values))
    given.fill(params, assumed, checkpointing=checkpointing)
    report = check_params(params, source=str(path), datagen=datagen)
    issues = [*issues, *report.issues]
    skipped = [*skipped, *report.skipped]
    if summary is not None and report.model in MODELS and report.accelerator:
        metric = summary.get("metric") if isinstance(summary.get("metric"), Mapping) else {}
        mean = metric.get("train_au_mean_percentage")
        w = WORKLOADS[(report.model, report.accelerator)]
        if isinstance(mean, int | float) and not isinstance(mean, bool):
            if mean < w.au_threshold * 100:
                issues.append(
                    _invalid(
                        "metric.au",
                        f"mean accelerator utilisation {mean:.2f}% is below the workload's "
                        f"{w.au_threshold * 100:g}%",
                        "au",
                        expected=f">= {w.au_threshold * 100:g}%",
                        actual=round(float(mean), 4),
                    )
                )
        elif not any(s.startswith("au:") for s in skipped):
            skipped.append("au: summary.json has no train_au_mean_percentage")
    elif summary_path is None and not any(s.startswith("au:") for s in skipped):
        skipped.append("au: no summary.json (DLIO did not finish, or this is not a DLIO run)")
    return CheckReport(
        path=str(path),
        kind="datagen" if datagen else "run",
        verdict=verdict(issues),
        issues=tuple(issues),
        skipped=tuple(skipped),
        model=report.model,
        accelerator=None if datagen else report.accelerator,
        assumed=tuple(assumed),
    )


def _check_submission(path: Path, runs: Sequence[Path], given: Assumed) -> CheckReport:
    reports = tuple(_check_run_dir(run, given) for run in runs)
    issues: list[Issue] = []
    if len(reports) != RUNS_PER_SUBMISSION:
        issues.append(
            _invalid(
                "runs",
                f"a submission is {RUNS_PER_SUBMISSION} runs; {path} has {len(reports)} "
                f"({', '.join(r.name for r in runs) or 'none'})",
                "five-runs",
                expected=RUNS_PER_SUBMISSION,
                actual=len(reports),
            )
        )
    kinds = {(r.model, r.accelerator) for r in reports}
    if len(kinds) > 1:
        issues.append(
            _invalid(
                "model",
                "the runs of one submission must be of one workload, got "
                + ", ".join(sorted(f"{m} {a}" for m, a in kinds if m)),
                "one-workload",
                expected="one workload",
                actual=sorted(f"{m} {a}" for m, a in kinds if m),
            )
        )
    levels = [*issues, *(Issue("run", r.verdict, "") for r in reports if r.verdict != "CLOSED")]
    model, accelerator = next(iter(kinds)) if len(kinds) == 1 else (None, None)
    return CheckReport(
        path=str(path),
        kind="submission",
        verdict=verdict(levels),
        issues=tuple(issues),
        runs=reports,
        model=model,
        accelerator=accelerator,
    )


def _is_checkpointing(params: Mapping[str, Any]) -> bool:
    name = params.get("model")
    return isinstance(name, str) and name.strip().lower().replace("-", "_") in CHECKPOINT_WORKLOADS


def _check_workload(
    config: Mapping[str, Any], source: Path, given: Assumed, issues: list[Issue]
) -> CheckReport:
    """Check a DLIO workload mapping as it is (a shipped YAML, or what a Hydra record says
    DLIO ran), with what it does not hold taken from ``given`` (:mod:`.files`)."""
    assumed: list[str] = []
    skipped: list[str] = []
    params, datagen = workload_params(config, source, given, assumed)
    if datagen:
        datagen_params(params, skipped)
    report = check_params(params, source=str(source), datagen=datagen)
    found = [*issues, *report.issues]
    return CheckReport(
        path=str(source),
        kind="datagen" if datagen else "params",
        verdict=verdict(found),
        issues=tuple(found),
        skipped=(*skipped, *report.skipped),
        model=report.model,
        accelerator=None if datagen else report.accelerator,
        assumed=tuple(assumed),
    )


def check_path(path: str | os.PathLike[str], *, given: Assumed | None = None) -> CheckReport:
    """Check a parameters file, a DLIO workload YAML as shipped, a Hydra record folder
    (``dlio_config/``), a run directory or a submission directory (see the module
    docstring). ``given`` (the command line's accelerator, counts and memory) fills what the
    file or run does not say; the report's ``assumed`` lists each value so taken. Never
    raises for bad content: problems are INVALID issues."""
    given = given or _NOTHING
    p = Path(path)
    if p.is_file():
        issues: list[Issue] = []
        params = _load_mapping(p, issues)
        if params is None:
            return CheckReport(str(p), "params", "INVALID", tuple(issues))
        if is_workload(params):
            return _check_workload(params, p, given, issues)
        assumed: list[str] = []
        given.fill(params, assumed, checkpointing=_is_checkpointing(params))
        if given.accelerator is not None and params.get("accelerator") is None:
            params["accelerator"] = given.accelerator
            assumed.append(f"accelerator: {given.accelerator} (--accelerator)")
        report = check_params(params, source=str(p))
        return dataclasses.replace(report, assumed=tuple(assumed))
    if not p.is_dir():
        return CheckReport(
            str(p),
            "params",
            "INVALID",
            (_invalid(str(p), f"{p} does not exist", "readable"),),
        )
    if is_hydra_record(p) and not _is_run_dir(p):
        issues = []
        loaded = _load_mapping(p / "config.yaml", issues)
        config = None if loaded is None else loaded.get("workload", loaded)
        if not isinstance(config, Mapping):
            if not issues:
                issues.append(
                    _invalid("workload", f"{p / 'config.yaml'}: no workload mapping", "parse")
                )
            return CheckReport(str(p), "params", "INVALID", tuple(issues))
        return _check_workload(config, p, given, issues)
    if _is_run_dir(p):
        return _check_run_dir(p, given)
    runs = sorted(child for child in p.iterdir() if child.is_dir() and _is_run_dir(child))
    return _check_submission(p, runs, given)
