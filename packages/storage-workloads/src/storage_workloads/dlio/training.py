"""Training runs with DLIO: :func:`run_training`."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from storage_workloads.checker import check_path
from storage_workloads.dlio.config import RECORD_LENGTH_KEYS, Engine, to_dlio_config
from storage_workloads.dlio.launch import DlioError, Log, _quiet, config_name
from storage_workloads.dlio.results import TrainingResult, parse_dlio_output, write_results
from storage_workloads.dlio.runs import (
    RunPlan,
    _configs,
    _dataset_files,
    _extensions,
    _Options,
    _parquet,
    _refuse_earlier_run,
    _start,
    _validated_run,
    _where,
    _write_mlperf_files,
)
from storage_workloads.hosts import HostMemory, HostSpec, check_declared_memory
from storage_workloads.workloads import Workload


def _missing_data(config: Mapping[str, Any], folder: Path, fmt: str, workload: Workload) -> str:
    """Why the dataset cannot be read yet (fewer files under ``train/`` than the run reads), or
    ``""``. Only a file system is counted: object storage is not listed here."""
    storage = config.get("storage") if isinstance(config.get("storage"), Mapping) else {}
    if storage.get("storage_type", "local_fs") not in ("local_fs", "parallel_fs"):
        return ""
    dataset = config.get("dataset", {})
    needed = int(dataset.get("num_files_train", workload.num_files_train))
    found = len(_dataset_files(folder, fmt))
    if found >= needed:
        return ""
    return (
        f"{folder / 'train'} holds {found:,} .{fmt} files and the run reads {needed:,}: "
        "generate them first (storage-workloads datagen, same --data-dir and --num-files)"
    )


def _training(
    workload: Workload,
    *,
    run_dir: str | os.PathLike[str] | None = None,
    results_dir: str | os.PathLike[str] | None = None,
    data_folder: str | os.PathLike[str],
    num_files: int | None = None,
    num_subfolders: int | None = None,
    engine: Engine = "dlio",
    processes: int | None = None,
    division: str = "closed",
    hosts: int | Sequence[HostSpec] = 1,
    host_memory_gb: float | None = None,
    host_memory: HostMemory | None = None,
    params: Mapping[str, Any] | None = None,
    dlio_venv: str | os.PathLike[str] | None = None,
    mpi: bool = True,
    mpi_args: Sequence[str] = (),
    timeout_s: float | None = None,
    what_if: bool = False,
    log: Log = _quiet,
) -> TrainingResult | RunPlan:
    """Run ``workload`` with DLIO on an existing dataset and write its results (see
    :func:`run_training`), or with ``what_if`` return its plan (:func:`plan_training`).

    ``params`` are dotted DLIO parameters set on top of the workload (``train.epochs``; the
    rules checker judges them). The result (:func:`parse_dlio_output` plus the workload, the
    command, the wall time and the checker's verdict on the run) is written to
    ``results.json``/``results.csv`` in ``run_dir``, or in a new
    ``results_dir/training/<model>/run/<datetime>`` (give one of the two), after the metadata
    file and the system description, and returned. ``hosts`` is a host count or a host list
    (``HostSpec``), whose slots give the process count when ``processes`` is ``None``.

    The memory of the client hosts is read from them before the run (:func:`read_hosts`;
    ``host_memory`` gives a reading made before) and recorded in ``run.json``; the rules
    check sizes the dataset on its sum. A ``host_memory_gb`` (per host, GiB) whose total is
    below it by more than 5% is refused with ``ValueError``; one above it is reported through
    ``log``. A parquet workload is read by the reader of :mod:`storage_workloads.dlio_ext`,
    named to DLIO in the workload YAML's ``reader.reader_classname``. Everything is
    validated before any file is written: the dataset must hold the files the run reads, and
    ``run_dir`` must not hold an earlier run's results. A plan notes a missing dataset instead
    (``RunPlan.missing_data``): it may come before the data generation it needs.
    """
    where = _where(run_dir, results_dir, command="run", model=workload.model)
    folder = Path(data_folder).resolve()
    build = functools.partial(to_dlio_config, workload)
    configs = _configs(build, workload.model, folder, num_files, num_subfolders, engine, params)
    config, written, overrides = configs.config, configs.written, configs.overrides
    dataset = config.get("dataset", {})
    fmt = str(dataset.get("format", workload.format))
    schema = _parquet(config)
    _refuse_earlier_run(where.run)
    if host_memory_gb is not None and (
        isinstance(host_memory_gb, bool)
        or not isinstance(host_memory_gb, int | float)
        or not math.isfinite(host_memory_gb)
        or host_memory_gb <= 0
    ):
        raise ValueError(f"--host-memory-gb must be a number > 0, got {host_memory_gb!r}")
    missing = _missing_data(config, folder, fmt, workload)
    if missing and not what_if:
        raise DlioError(missing)
    options = _Options(
        processes, hosts, host_memory, dlio_venv, mpi, mpi_args, timeout_s, what_if, log
    )
    ctx = _validated_run(where, options, engine=engine)
    if missing:  # a plan of datagen and run together: the data comes before the run
        ctx.notes.append(f"the dataset is missing: {missing}")
    memory = ctx.host_memory
    warning = check_declared_memory(host_memory_gb, ctx.host_count, memory)
    if warning:
        log(f"warning: {warning}")
    name = config_name(workload.model, workload.accelerator)
    workflow = config.get("workflow") if isinstance(config.get("workflow"), Mapping) else {}
    extensions = _extensions(
        fmt, generate=bool(workflow.get("generate_data")), train=bool(workflow.get("train", True))
    )
    run_params: dict[str, Any] = {
        "model": workload.model,
        "accelerator": workload.accelerator,
        "division": division,
        "num_accelerators": ctx.mpi.processes,
        "hosts": ctx.host_count,
    }
    if host_memory_gb is not None:
        run_params["host_memory_gb"] = host_memory_gb
    if memory is not None:
        run_params["measured_host_memory_gb"] = memory.per_host_gib
    started = _start(
        written,
        ctx,
        command="run",
        name=name,
        engine=engine,
        params=run_params,
        extensions=extensions,
        overrides=overrides,
        schema=schema,
    )
    if isinstance(started, RunPlan):
        return dataclasses.replace(started, missing_data=missing or None)
    record_key = RECORD_LENGTH_KEYS[engine][0]
    length = dataset.get(record_key, workload.record_length_bytes)
    figures = parse_dlio_output(
        where.run,
        au_threshold=workload.au_threshold,
        record_length_bytes=int(length),
    )
    report = check_path(where.run)
    result = TrainingResult(
        model=workload.model,
        accelerator=workload.accelerator,
        engine=engine,
        processes=ctx.mpi.processes,
        hosts=started.record["hosts"],
        measured_host_memory_gib=None if memory is None else memory.per_host_gib,
        run_dir=str(where.run),
        params=dict(params or {}),
        command=started.launch.cmd,
        wall_s=started.wall,
        dlio_extensions=list(extensions),
        figures=figures,
        verdict=report.verdict,
        issues=[issue.as_dict() for issue in report.issues],
    )
    _write_mlperf_files(
        ctx,
        started,
        model=workload.model,
        params=params or {},
        result_file="results.json",
        accelerator=workload.accelerator,
        end=figures.end,
        verdict=report.verdict,
        division=division,
        host_memory_gb=host_memory_gb,
        data_folder=folder,
    )
    write_results(where.run, result)
    return result


def run_training(workload: Workload, **options: Any) -> TrainingResult:
    """Run ``workload`` with DLIO on an existing dataset and write its results.

    ``options`` are the keywords of the run (``run_dir`` or ``results_dir``, ``data_folder``,
    ``num_files``, ``num_subfolders``, ``engine``, ``processes``, ``division``, ``hosts``,
    ``host_memory_gb``, ``host_memory``, ``params``, ``dlio_venv``, ``mpi``, ``mpi_args``,
    ``timeout_s``, ``log``; see :func:`_training`). Returns the result written to
    ``results.json`` (:meth:`TrainingResult.as_dict`).
    """
    result = _training(workload, what_if=False, **options)
    assert isinstance(result, TrainingResult)
    return result


def plan_training(workload: Workload, **options: Any) -> RunPlan:
    """What :func:`run_training` with the same ``options`` would do, validated as the run
    validates it (a plan contacts no host of a host list), without creating any file or
    folder; a missing dataset is noted, not refused."""
    plan = _training(workload, what_if=True, **options)
    assert isinstance(plan, RunPlan)
    return plan
