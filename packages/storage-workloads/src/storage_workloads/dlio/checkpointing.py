"""Checkpointing runs: :func:`run_checkpointing` on the MLPerf DLIO fork, as mlpstorage runs
them, or this package's emulation on dlio-benchmark 2.0.0 (:func:`checkpoint_config`), only
when asked for."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from storage_workloads._atomic import write_text_atomic
from storage_workloads._records import JsonRecord
from storage_workloads.checker import check_path
from storage_workloads.checker.report import flatten
from storage_workloads.checkpoint import NUM_CHECKPOINTS, CheckpointWorkload, to_checkpoint_config
from storage_workloads.dlio.config import ENGINES, Engine
from storage_workloads.dlio.keys import checked_params
from storage_workloads.dlio.launch import (
    DlioError,
    Log,
    _quiet,
    apply_params,
    config_name,
    hydra_overrides,
)
from storage_workloads.dlio.results import _load_json, _number
from storage_workloads.dlio.runs import (
    RunPlan,
    _Options,
    _refuse_earlier_run,
    _start,
    _validated_run,
    _where,
    _write_mlperf_files,
)
from storage_workloads.dlio_ext import CHECKPOINT_MECHANISM, CHECKPOINT_TIMINGS
from storage_workloads.hosts import HostMemory, HostSpec

_CHECKPOINT_SCHEMA: Final = "storage-workloads/dlio-checkpoint/1"

#: Bytes of each sample of the step dataset a checkpointing run trains on (one sample a step
#: and rank; only there to drive DLIO's training loop, which is where DLIO 2.0.0 checkpoints).
_STEP_RECORD_BYTES: Final = 4096


def checkpoint_config(
    workload: CheckpointWorkload,
    *,
    checkpoint_folder: str | os.PathLike[str],
    steps_folder: str | os.PathLike[str],
    processes: int,
    scale: float = 1.0,
    num_checkpoints_write: int = NUM_CHECKPOINTS,
    num_checkpoints_read: int = NUM_CHECKPOINTS,
) -> dict[str, Any]:
    """The dlio-benchmark 2.0.0 config that runs ``workload``'s checkpoints.

    DLIO 2.0.0 has no checkpoint-only workflow: it checkpoints between training steps. This
    config trains ``num_checkpoints_write`` steps (batch 1, no compute) on a tiny npz dataset
    that DLIO generates in ``steps_folder``, checkpointing after every step with the checkpoint
    mechanism of :mod:`storage_workloads.dlio_ext`. Each of the ``processes`` ranks writes
    ``written_gb(processes) / processes`` of the model and of the optimizer state (the closed
    division's share, or the subset mode's below ``closed_processes``), times ``scale``; then
    the last ``num_checkpoints_read`` checkpoints are read back.
    """
    if not isinstance(workload, CheckpointWorkload):
        raise TypeError(f"workload must be a CheckpointWorkload, got {type(workload).__name__}")
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise ValueError(f"processes must be an integer >= 1, got {processes!r}")
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not 0 < scale <= 1:
        raise ValueError(f"scale must be a number in (0, 1], got {scale!r}")
    for key, value, low in (
        ("num_checkpoints_write", num_checkpoints_write, 1),
        ("num_checkpoints_read", num_checkpoints_read, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{key} must be an integer >= {low}, got {value!r}")
    if num_checkpoints_read > num_checkpoints_write:
        raise ValueError(
            f"num_checkpoints_read {num_checkpoints_read} > num_checkpoints_write "
            f"{num_checkpoints_write}: only written checkpoints can be read"
        )
    share = min(1.0, processes / workload.closed_processes) * scale / processes
    model = round(workload.model_gb * 1e9 * share)
    optimizer = round(workload.optimizer_gb * 1e9 * share)
    if model + optimizer < 1:
        raise ValueError(f"scale {scale!r} leaves nothing to write")
    return {
        "model": {"name": workload.dlio_model_name},
        "framework": "tensorflow",
        "workflow": {"generate_data": True, "train": True, "checkpoint": True},
        "dataset": {
            "data_folder": os.fspath(steps_folder),
            "format": "npz",
            "num_files_train": processes * num_checkpoints_write,
            "num_samples_per_file": 1,
            "record_length": _STEP_RECORD_BYTES,
        },
        "reader": {"data_loader": "tensorflow", "batch_size": 1, "read_threads": 1},
        "train": {
            "epochs": 1,
            "computation_time": 0.0,
            "total_training_steps": num_checkpoints_write,
        },
        "checkpoint": {
            "checkpoint_folder": os.fspath(checkpoint_folder),
            "checkpoint_mechanism_classname": CHECKPOINT_MECHANISM,
            "type": "all_ranks",
            "steps_between_checkpoints": 1,
            "num_checkpoints_write": num_checkpoints_write,
            "num_checkpoints_read": num_checkpoints_read,
            "fsync": True,
            "model_bytes_per_rank": model,
            "optimizer_bytes_per_rank": optimizer,
        },
    }


@dataclass(frozen=True)
class CheckpointPhase(JsonRecord):
    """One phase of a checkpointing run (the writes or the reads): how many checkpoints, the
    seconds and GB/s (10^9 bytes) of each (``None``: not measured), and their means."""

    count: int
    seconds: list[float]
    gb_per_s: list[float | None]
    seconds_mean: float | None
    gb_per_s_mean: float | None


#: The keys of ``checkpoint-results.json`` of a run on the MLPerf DLIO fork, in order.
_FORK_KEYS: Final = (
    "schema", "model", "engine", "emulation", "processes", "mode", "closed_processes",
    "bytes_per_checkpoint", "bytes_per_checkpoint_full_scale", "write", "read", "dlio_metric",
    "files_written", "bytes_on_disk", "hosts", "run_dir", "params", "command", "wall_s",
    "verdict", "issues",
)  # fmt: skip
#: ... and of this package's emulation.
_EMULATION_KEYS: Final = (
    "schema", "model", "engine", "emulation", "processes", "scale", "closed_processes",
    "bytes_per_checkpoint", "bytes_per_checkpoint_full_scale", "model_bytes_per_rank",
    "optimizer_bytes_per_rank", "fsync", "write", "read", "dlio_checkpoint_durations_s",
    "files_written", "bytes_on_disk", "hosts", "run_dir", "command", "wall_s", "verdict",
)  # fmt: skip


@dataclass(frozen=True)
class CheckpointResult:
    """A checkpointing run (:func:`run_checkpointing`), as ``checkpoint-results.json`` holds
    it (:meth:`as_dict`).

    Attributes:
        model, engine, processes, closed_processes: what ran, and the closed process count.
        emulation: ``True`` for this package's emulation on dlio-benchmark 2.0.0 (not checked).
        bytes_per_checkpoint: what one checkpoint wrote; bytes_per_checkpoint_full_scale: what
            it writes at full scale with these processes.
        write, read: the two phases.
        files_written, bytes_on_disk: what the checkpoint folder holds after the run.
        hosts, run_dir, command, wall_s: where and how DLIO ran, and for how long.
        verdict: the rules checker's verdict (the emulation's says it is not checked).
        mode, dlio_metric, params, issues: the fork's run only: the checkpoint mode, DLIO's
            metric as it wrote it, the ``--param`` changes and the checker's issues.
        scale, model_bytes_per_rank, optimizer_bytes_per_rank, fsync,
        dlio_checkpoint_durations_s: the emulation only: its scale, what each rank wrote,
            whether it fsynced, and DLIO's own durations as a cross-check.
    """

    model: str
    engine: str
    emulation: bool
    processes: int
    closed_processes: int
    bytes_per_checkpoint: int | None
    bytes_per_checkpoint_full_scale: int
    write: CheckpointPhase
    read: CheckpointPhase
    files_written: int
    bytes_on_disk: int
    hosts: int | str
    run_dir: str
    command: list[str]
    wall_s: float
    verdict: str
    mode: str | None = None
    dlio_metric: dict[str, Any] | None = None
    params: dict[str, Any] | None = None
    issues: list[dict[str, Any]] | None = None
    scale: float | None = None
    model_bytes_per_rank: Any = None
    optimizer_bytes_per_rank: Any = None
    fsync: Any = None
    dlio_checkpoint_durations_s: list[float] | None = None

    def as_dict(self) -> dict[str, Any]:
        values: dict[str, Any] = {
            "schema": _CHECKPOINT_SCHEMA,
            **{f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self)},
            "write": self.write.as_dict(),
            "read": self.read.as_dict(),
        }
        return {key: values[key] for key in (_EMULATION_KEYS if self.emulation else _FORK_KEYS)}


def _phase(durations: object, bytes_per_checkpoint: int, what: str) -> CheckpointPhase:
    if not isinstance(durations, list):
        raise DlioError(f"{CHECKPOINT_TIMINGS}: {what} is not a list")
    seconds = [_number(d, f"{CHECKPOINT_TIMINGS}: {what}") for d in durations]
    rates = [bytes_per_checkpoint / s / 1e9 if s > 0 else math.inf for s in seconds]
    finite = [r for r in rates if math.isfinite(r)]
    return CheckpointPhase(
        count=len(seconds),
        seconds=seconds,
        gb_per_s=[r if math.isfinite(r) else None for r in rates],
        seconds_mean=statistics.fmean(seconds) if seconds else None,
        gb_per_s_mean=statistics.fmean(finite) if finite else None,
    )


#: What ``--engine dlio`` needs for checkpointing, said where it is refused.
_EMULATION_HINT: Final = (
    " --emulation (this package's emulation on dlio-benchmark 2.0.0: no submission)"
)


def _checkpoint_mode(
    engine: str, emulation: bool, scale: float, params: Mapping[str, Any] | None
) -> None:
    """The MLPerf DLIO fork runs the checkpointing workload itself; dlio-benchmark 2.0.0 has no
    checkpoint-only workflow, so it runs this package's emulation, and only when asked
    (``emulation``), never in its place silently."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "dlio" and not emulation:
        raise ValueError(
            "dlio-benchmark 2.0.0 (--engine dlio) has no checkpoint-only workflow: run "
            "--engine mlperf-dlio (the MLPerf DLIO fork, as mlpstorage does), or add"
            + _EMULATION_HINT
        )
    if emulation and engine != "dlio":
        raise ValueError(
            "--emulation runs on --engine dlio; the MLPerf DLIO fork runs the workload itself"
        )
    if not emulation and scale != 1:
        raise ValueError(
            f"--scale {scale:g} is the emulation's; the MLPerf DLIO fork writes the model as "
            "configured (a smaller one with --param model.num_layers=..., no submission)"
        )
    if emulation and params:
        raise ValueError("--param is not taken by the emulation (it writes its own config)")


def _checkpointing(
    workload: CheckpointWorkload,
    *,
    run_dir: str | os.PathLike[str] | None = None,
    results_dir: str | os.PathLike[str] | None = None,
    checkpoint_folder: str | os.PathLike[str],
    processes: int | None = None,
    hosts: int | Sequence[HostSpec] = 1,
    host_memory: HostMemory | None = None,
    engine: Engine = "mlperf-dlio",
    emulation: bool = False,
    params: Mapping[str, Any] | None = None,
    scale: float = 1.0,
    num_checkpoints_write: int = NUM_CHECKPOINTS,
    num_checkpoints_read: int = NUM_CHECKPOINTS,
    dlio_venv: str | os.PathLike[str] | None = None,
    mpi: bool = True,
    mpi_args: Sequence[str] = (),
    timeout_s: float | None = None,
    what_if: bool = False,
    log: Log = _quiet,
) -> CheckpointResult | RunPlan:
    """Run a checkpointing workload and write its results (see :func:`run_checkpointing`), or
    with ``what_if`` return the plan (:func:`plan_checkpointing`).

    With ``engine="mlperf-dlio"`` (the default) the MLPerf DLIO fork runs the workload as
    mlpstorage configures it (:func:`_run_fork`): the published workload file, and on DLIO's
    command line the checkpoint folder, the counts, and below the closed process count the
    subset mode (``checkpoint.mode: subset``, ``model.parallelism.data``); ``params`` are
    further dotted keys (checked against the fork's keys; the rules checker judges them).
    dlio-benchmark 2.0.0 (``engine="dlio"``) has no checkpoint-only workflow: it runs this
    package's emulation, and only with ``emulation=True`` (:func:`_run_emulation`, which
    takes ``scale``). Either way the run goes into ``run_dir`` or a new
    ``results_dir/checkpointing/<model>/<datetime>`` (give one of the two) and
    ``checkpoint-results.json`` comes last; ``checkpoint_folder`` must be empty or missing.
    ``hosts`` is a host count or a host list (``HostSpec``), whose slots give the process
    count when ``processes`` is ``None``.
    """
    _checkpoint_mode(engine, emulation, scale, params)
    kwargs: dict[str, Any] = {
        "run_dir": run_dir,
        "results_dir": results_dir,
        "checkpoint_folder": checkpoint_folder,
        "num_checkpoints_write": num_checkpoints_write,
        "num_checkpoints_read": num_checkpoints_read,
    }
    options = _Options(
        processes, hosts, host_memory, dlio_venv, mpi, mpi_args, timeout_s, what_if, log
    )
    if emulation:
        return _run_emulation(workload, options, scale=scale, **kwargs)
    return _run_fork(workload, options, params=params or {}, **kwargs)


def run_checkpointing(workload: CheckpointWorkload, **options: Any) -> CheckpointResult:
    """Run a checkpointing workload and write its results.

    ``options`` are the keywords of the run (``run_dir`` or ``results_dir``,
    ``checkpoint_folder``, ``processes``, ``hosts``, ``host_memory``, ``engine``,
    ``emulation``, ``params``, ``scale``, ``num_checkpoints_write``, ``num_checkpoints_read``,
    ``dlio_venv``, ``mpi``, ``mpi_args``, ``timeout_s``, ``log``; see
    :func:`_checkpointing`). Returns what ``checkpoint-results.json`` holds
    (:meth:`CheckpointResult.as_dict`).
    """
    result = _checkpointing(workload, what_if=False, **options)
    assert isinstance(result, CheckpointResult)
    return result


def plan_checkpointing(workload: CheckpointWorkload, **options: Any) -> RunPlan:
    """What :func:`run_checkpointing` with the same ``options`` would do, validated as the run
    validates it (a plan contacts no host of a host list), without creating any file or
    folder."""
    plan = _checkpointing(workload, what_if=True, **options)
    assert isinstance(plan, RunPlan)
    return plan


def _writes(folder: Path) -> list[tuple[str, Path, str]]:
    return [("--checkpoint-folder", folder, "the checkpoints are written there")]


def _refuse_used_folder(folder: Path) -> None:
    if folder.is_dir() and any(folder.iterdir()):
        raise DlioError(
            f"{folder} is not empty; checkpoints go into an empty folder (nothing is overwritten)"
        )


def _run_fork(
    workload: CheckpointWorkload,
    options: _Options,
    *,
    run_dir: str | os.PathLike[str] | None,
    results_dir: str | os.PathLike[str] | None,
    checkpoint_folder: str | os.PathLike[str],
    num_checkpoints_write: int,
    num_checkpoints_read: int,
    params: Mapping[str, Any],
) -> CheckpointResult | RunPlan:
    """A checkpointing run on the MLPerf DLIO fork, as mlpstorage runs it (see
    :func:`run_checkpointing`): the result has, per phase (``write``, ``read``), the seconds
    and GB/s (10^9 bytes) of each checkpoint from DLIO's per-epoch record, their means from
    its ``summary.json``, the checkpoint's size, and the rules checker's verdict."""
    where = _where(run_dir, results_dir, command="checkpoint", model=workload.name)
    folder = Path(checkpoint_folder).resolve()
    changes = checked_params(params, "mlperf-dlio")
    n = options.launch()[0].processes
    written = to_checkpoint_config(
        workload, checkpoint_folder=f"checkpoints/{workload.dlio_model_name}"
    )
    config = to_checkpoint_config(
        workload,
        checkpoint_folder=folder,
        num_processes=n,
        num_checkpoints_write=num_checkpoints_write,
        num_checkpoints_read=num_checkpoints_read,
    )
    apply_params(config, changes)
    overrides = hydra_overrides(written, config)
    _refuse_earlier_run(where.run)
    _refuse_used_folder(folder)
    ctx = _validated_run(
        where, options, engine="mlperf-dlio", fallback=_EMULATION_HINT, writes=_writes(folder)
    )
    record_params = {
        "model": workload.name,
        "num_processes": ctx.mpi.processes,
        "hosts": ctx.host_count,
        "num_checkpoints_write": num_checkpoints_write,
        "num_checkpoints_read": num_checkpoints_read,
    }
    started = _start(
        written,
        ctx,
        command="checkpoint",
        name=config_name(workload.name, "checkpoint"),
        engine="mlperf-dlio",
        params=record_params,
        overrides=overrides,
    )
    if isinstance(started, RunPlan):
        return started
    run = where.run
    summary = _load_json(run / "summary.json")
    metric = summary.get("metric") if isinstance(summary.get("metric"), Mapping) else {}
    stats = _epoch_stats(run)
    size_gib = metric.get("checkpoint_size_GB")
    report = check_path(run)
    result = CheckpointResult(
        model=workload.name,
        engine="mlperf-dlio",
        emulation=False,
        processes=ctx.mpi.processes,
        mode=flatten(config).get("checkpoint.mode", "default"),
        closed_processes=workload.closed_processes,
        bytes_per_checkpoint=(
            round(size_gib * _GIB) if isinstance(size_gib, int | float) else None
        ),
        bytes_per_checkpoint_full_scale=round(workload.written_gb(ctx.mpi.processes) * 1e9),
        write=_fork_phase(stats, metric, "save"),
        read=_fork_phase(stats, metric, "load"),
        dlio_metric=dict(metric),
        files_written=sum(1 for p in folder.rglob("*") if p.is_file()),
        bytes_on_disk=sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()),
        hosts=started.record["hosts"],
        run_dir=str(run),
        params=dict(params),
        command=started.launch.cmd,
        wall_s=started.wall,
        verdict=report.verdict,
        issues=[issue.as_dict() for issue in report.issues],
    )
    _write_mlperf_files(
        ctx,
        started,
        model=workload.name,
        params=params,
        result_file="checkpoint-results.json",
        checkpoint_folder=folder,
        checkpoints=(num_checkpoints_write, num_checkpoints_read),
        verdict=report.verdict,
    )
    _write_result(run, result)
    return result


def _write_result(run: Path, result: CheckpointResult) -> None:
    text = json.dumps(result.as_dict(), indent=2, allow_nan=False) + "\n"
    write_text_atomic(run / "checkpoint-results.json", text)


#: The fork's GB are 2^30 bytes (its checkpoint sizes divide by 1024 three times).
_GIB: Final = 2**30


def _epoch_stats(run: Path) -> dict[str, Any]:
    """DLIO's per-epoch record of rank 0 (``per_epoch_stats.json``, or the fork's
    ``0_per_epoch_stats.json``)."""
    for name in ("per_epoch_stats.json", "0_per_epoch_stats.json"):
        if (run / name).is_file():
            return _load_json(run / name)
    raise DlioError(f"{run} has no per_epoch_stats.json: DLIO did not finish the run")


def _fork_phase(stats: Mapping[str, Any], metric: Mapping[str, Any], kind: str) -> CheckpointPhase:
    """One phase (``save``: writes, ``load``: reads) of a fork run: each checkpoint's seconds
    and GB/s (10^9 bytes) from DLIO's per-epoch record (``save_ckpt1``, ...), and the means
    DLIO's ``summary.json`` gives over the ranks."""
    seconds: list[float] = []
    rates: list[float | None] = []
    for epoch in stats.values():
        if not isinstance(epoch, Mapping):
            continue
        for key, value in epoch.items():
            if key.startswith(f"{kind}_ckpt") and isinstance(value, Mapping):
                seconds.append(_number(value.get("duration"), f"{key}.duration"))
                rate = value.get("throughput")
                rates.append(rate * _GIB / 1e9 if isinstance(rate, int | float) else None)
    mean_s = metric.get(f"{kind}_checkpoint_duration_mean_seconds")
    mean_rate = metric.get(f"{kind}_checkpoint_io_mean_GB_per_second")
    return CheckpointPhase(
        count=len(seconds),
        seconds=seconds,
        gb_per_s=rates,
        seconds_mean=mean_s if isinstance(mean_s, int | float) else None,
        gb_per_s_mean=mean_rate * _GIB / 1e9 if isinstance(mean_rate, int | float) else None,
    )


def _run_emulation(
    workload: CheckpointWorkload,
    options: _Options,
    *,
    run_dir: str | os.PathLike[str] | None,
    results_dir: str | os.PathLike[str] | None,
    checkpoint_folder: str | os.PathLike[str],
    num_checkpoints_write: int,
    num_checkpoints_read: int,
    scale: float,
) -> CheckpointResult | RunPlan:
    """This package's emulation of a checkpointing workload on dlio-benchmark 2.0.0
    (:func:`checkpoint_config`), named so in its result (``emulation: true``).

    Writes ``run.json``, the config, DLIO's output, the metadata file, the system description
    and, last, ``checkpoint-results.json``: per phase (``write``, ``read``) the seconds of
    each checkpoint over all ranks, between barriers, and GB/s (10^9 bytes), plus DLIO's own
    checkpoint durations from ``per_epoch_stats.json`` (rank 0, two decimals) as a
    cross-check. The rules checker is not run on it (it judges configs of the MLPerf DLIO)."""
    where = _where(run_dir, results_dir, command="checkpoint", model=workload.name)
    run = where.run
    folder = Path(checkpoint_folder).resolve()
    config = checkpoint_config(
        workload,
        checkpoint_folder=folder,
        steps_folder=run / "steps-data",
        processes=options.launch()[0].processes,
        scale=scale,
        num_checkpoints_write=num_checkpoints_write,
        num_checkpoints_read=num_checkpoints_read,
    )
    _refuse_earlier_run(run)
    _refuse_used_folder(folder)
    if (run / "steps-data").exists():
        raise DlioError(f"{run / 'steps-data'} exists: give a new run directory")
    ctx = _validated_run(where, options, engine="dlio", writes=_writes(folder))
    name = config_name(workload.name, "checkpoint")
    record_params = {
        "model": workload.name,
        "num_processes": ctx.mpi.processes,
        "hosts": ctx.host_count,
        "scale": scale,
    }
    started = _start(
        config,
        ctx,
        command="checkpoint",
        name=name,
        engine="dlio",
        params=record_params,
        extensions=["checkpoint-mechanism"],
    )
    if isinstance(started, RunPlan):
        return started
    processes = ctx.mpi.processes
    wall = started.wall
    timings = _load_json(run / CHECKPOINT_TIMINGS)
    total = timings.get("bytes_per_checkpoint")
    if isinstance(total, bool) or not isinstance(total, int) or total < 1:
        raise DlioError(f"{CHECKPOINT_TIMINGS}: bytes_per_checkpoint is {total!r}")
    write = _phase(timings.get("writes_s"), total, "writes_s")
    read = _phase(timings.get("reads_s"), total, "reads_s")
    if write.count != num_checkpoints_write or read.count != num_checkpoints_read:
        raise DlioError(
            f"DLIO wrote {write.count} and read {read.count} checkpoints, expected "
            f"{num_checkpoints_write} and {num_checkpoints_read}"
        )
    stats_path = run / "per_epoch_stats.json"
    dlio_durations: list[float] = []
    if stats_path.is_file():
        stats = _load_json(stats_path)
        for epoch in stats.values():
            if isinstance(epoch, Mapping):
                for key, value in epoch.items():
                    if key.startswith("ckpt") and isinstance(value, Mapping):
                        with contextlib.suppress(TypeError, ValueError):
                            dlio_durations.append(float(value["duration"]))
    files = sorted(p for p in folder.glob("ckpt*.bin") if p.is_file())
    result = CheckpointResult(
        model=workload.name,
        engine="dlio",
        emulation=True,
        processes=processes,
        scale=scale,
        closed_processes=workload.closed_processes,
        bytes_per_checkpoint=total,
        bytes_per_checkpoint_full_scale=round(workload.written_gb(processes) * 1e9),
        model_bytes_per_rank=timings.get("model_bytes_per_rank"),
        optimizer_bytes_per_rank=timings.get("optimizer_bytes_per_rank"),
        fsync=timings.get("fsync"),
        write=write,
        read=read,
        dlio_checkpoint_durations_s=dlio_durations,
        files_written=len(files),
        bytes_on_disk=sum(p.stat().st_size for p in files),
        hosts=started.record["hosts"],
        run_dir=str(run),
        command=started.launch.cmd,
        wall_s=wall,
        verdict="not checked: this package's emulation on dlio-benchmark 2.0.0"
        + (f" at scale {scale:g}" if scale != 1 else ""),
    )
    _write_mlperf_files(
        ctx,
        started,
        model=workload.name,
        params={},
        result_file="checkpoint-results.json",
        checkpoint_folder=folder,
        checkpoints=(num_checkpoints_write, num_checkpoints_read),
    )
    _write_result(run, result)
    return result
