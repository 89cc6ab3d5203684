"""What the data generation, training and checkpointing runs share.

A run directory is laid out as mlpstorage lays out its run folders
(:mod:`storage_workloads.layout`), and holds:

- ``run.json``: what was run (the parameters the rules checker reads, the config name, the
  Hydra overrides, the DLIO extensions used, the hosts and the memory read from them);
- ``configs/workload/storage_workloads_<name>.yaml``: the DLIO workload YAML;
- DLIO's output (``summary.json``, ``per_epoch_stats.json``, ``<rank>_output.json``,
  ``dlio.log``) and its Hydra record ``dlio_config/``;
- ``dlio-console.log``: DLIO's stdout and stderr;
- ``<training|checkpointing>_<datetime>_metadata.json`` and ``system-description.yaml``;
- ``results.json`` and ``results.csv`` (runs), ``datagen.json`` (data generation) or
  ``checkpoint-results.json`` (checkpointing), each written atomically, last.

With ``results_dir`` instead of ``run_dir`` the run directory is a new folder of a results
tree, ``ROOT/training/<model>/<datagen|run>/<datetime>`` or
``ROOT/checkpointing/<model>/<datetime>``.

A run directory that already holds results is refused, and so is a datagen into a data folder
that already holds files: nothing here overwrites an earlier run's results or dataset.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from storage_workloads._atomic import write_text_atomic
from storage_workloads.checker import RUN_RECORD
from storage_workloads.dlio.config import published_data_folder
from storage_workloads.dlio.keys import check_read_threads, checked_params
from storage_workloads.dlio.launch import (
    CONSOLE_LOG,
    DlioError,
    Log,
    _execute,
    _Launch,
    _Mpi,
    _prepare,
    _quiet,
    apply_params,
    check_engine,
    find_dlio,
    hydra_overrides,
)
from storage_workloads.dlio_ext import GENERATED_FORMATS
from storage_workloads.dlio_ext.sw_dlio_ext.formats import ParquetSchema, parquet_schema
from storage_workloads.hosts import (
    HostMemory,
    HostSpec,
    check_host_list,
    format_hosts,
    host_options_in,
    local_host_memory,
    read_host_memory,
    resolve_processes,
)
from storage_workloads.layout import (
    METADATA_SUFFIX,
    RunFacts,
    metadata,
    mlpstorage_args,
    run_datetime,
    system_description,
    tree_location,
    write_run_files,
)


def _mpi_options(
    processes: int | None,
    hosts: int | Sequence[HostSpec],
    *,
    dlio_venv: str | os.PathLike[str] | None,
    mpi: bool,
    mpi_args: Sequence[str],
) -> tuple[_Mpi, int]:
    """The launch options and the host count, validated: a host list needs mpirun and no
    host option in ``mpi_args``, and its slots must add up to ``processes`` (when given)."""
    host_list: tuple[HostSpec, ...] = ()
    if isinstance(hosts, bool) or not isinstance(hosts, int | Sequence) or isinstance(hosts, str):
        raise ValueError(f"hosts must be a host count or a list of HostSpec, got {hosts!r}")
    if isinstance(hosts, int):
        if hosts < 1:
            raise ValueError(f"--hosts must be a host count >= 1, got {hosts}")
        count = hosts
    else:
        host_list = tuple(hosts)
        if not host_list or not all(isinstance(h, HostSpec) for h in host_list):
            raise ValueError(f"hosts must be a host count or a list of HostSpec, got {hosts!r}")
        count = len(host_list)
        check_host_list(host_list, mpi=mpi, mpi_args=mpi_args)
    n = resolve_processes(processes, host_list)
    return _Mpi(n, host_list, dlio_venv, mpi, tuple(mpi_args)), count


@dataclass(frozen=True)
class _Options:
    """The launch options of a run as its caller gave them (see :func:`_validated_run`)."""

    processes: int | None
    hosts: int | Sequence[HostSpec]
    host_memory: HostMemory | None
    dlio_venv: str | os.PathLike[str] | None
    mpi: bool
    mpi_args: Sequence[str]
    timeout_s: float | None
    what_if: bool
    log: Log

    def launch(self) -> tuple[_Mpi, int]:
        """How DLIO is started, and the host count, validated (:func:`_mpi_options`)."""
        return _mpi_options(
            self.processes,
            self.hosts,
            dlio_venv=self.dlio_venv,
            mpi=self.mpi,
            mpi_args=self.mpi_args,
        )


def _refuse_unwritable(folder: Path, flag: str, purpose: str, given: Path | None = None) -> None:
    """Raise ``ValueError`` naming ``flag`` and ``given`` (default ``folder``) unless a file can
    be made in ``folder`` or, where it does not exist yet, in the nearest folder above it that
    does (where DLIO's ``makedirs`` would start). The probe is a file made and removed at
    once, the way the run will write: permission bits say nothing about a read-only mount,
    nor about what root may do."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{flag} {given or folder}: {existing} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".storage-workloads-probe-", dir=existing)
    except OSError as exc:
        raise ValueError(
            f"{flag} {given or folder}: cannot write in {existing} ({exc.strerror or exc}); "
            f"{purpose}"
        ) from None
    os.close(fd)
    os.unlink(probe)


def _validated_run(
    where: _Where,
    options: _Options,
    *,
    engine: str,
    fallback: str = "",
    writes: Sequence[tuple[str, Path, str]] = (),
) -> _Run:
    """The run, once its launch options are validated, DLIO has been found and is of the
    flavour ``engine`` writes for (a missing or mismatched DLIO is the cheaper error to
    report), the run folder and each of ``writes`` (flag, folder, what the run writes there)
    found writable (:func:`_refuse_unwritable`), and the hosts read (:func:`read_hosts`),
    unless ``options.host_memory`` holds a reading made before, or the run is only planned
    (``what_if``): a plan contacts no host, so a host list is not read and a note says so."""
    launch, host_count = options.launch()
    dlio = find_dlio(launch.dlio_venv)
    check_engine(dlio, engine, fallback=fallback)
    if where.root is None:
        _refuse_unwritable(where.run, "--run-dir", "the run folder goes there")
    else:
        _refuse_unwritable(
            where.run, "--results-dir", f"the run folder goes there ({where.run})", where.root
        )
    for flag, folder, purpose in writes:
        _refuse_unwritable(folder, flag, purpose)
    host_memory = options.host_memory
    notes: list[str] = []
    if host_memory is None and options.what_if and not isinstance(options.hosts, int):
        notes.append(
            f"the {host_count} host(s) of --hosts were not read: a plan contacts no host (the "
            "run reads each host's memory first)"
        )
    elif host_memory is None:
        host_memory = read_hosts(options.hosts, mpi_args=launch.mpi_args, log=options.log)
    if host_memory is not None and len(host_memory.hosts) != host_count:
        raise ValueError(
            f"the memory reading covers {len(host_memory.hosts)} host(s), the run has {host_count}"
        )
    return _Run(
        where,
        launch,
        host_count,
        host_memory,
        options.what_if,
        options.timeout_s,
        options.log,
        notes,
    )


def read_hosts(
    hosts: int | Sequence[HostSpec], *, mpi_args: Sequence[str] = (), log: Log = _quiet
) -> HostMemory | None:
    """The memory (and CPUs, OS) of the client hosts, read from them: for a host list, one
    mpirun launch per host (:func:`storage_workloads.hosts.read_host_memory`; raises
    :class:`DlioError` naming a host that cannot be read); otherwise this host, read
    directly, when it is the only client (``hosts`` 1 and no host option in ``mpi_args``),
    else ``None``: the other hosts are unknown here."""
    if isinstance(hosts, int):
        if hosts != 1 or host_options_in(mpi_args):
            log(
                f"{hosts} host(s) without a --hosts list: only a host list lets the hosts' "
                "memory be read; the rules check uses --host-memory-gb or DLIO's own figures"
            )
            return None
        return local_host_memory()
    try:
        memory = read_host_memory(hosts, mpi_args=mpi_args)
    except RuntimeError as exc:
        raise DlioError(str(exc)) from None
    machine = {h.host: h.hostname for h in memory.hosts}
    for names in memory.same_machine():
        log(
            f"hosts {', '.join(names)} are one machine ({machine[names[0]]}): its memory is "
            "counted once per host named"
        )
    return memory


@dataclass(frozen=True)
class RunPlan:
    """What a run would do (``plan_datagen``, ``plan_training``, ``plan_checkpointing``),
    validated as the run validates it, with nothing written.

    Attributes:
        command: DLIO's command line, with its Hydra overrides.
        config_file: where the run would write the workload YAML; config: its content.
        overrides: the run's changes to the published workload, passed as Hydra overrides.
        run_record: the ``run.json`` the run would write.
        dlio_extensions: the DLIO extensions the run needs; env: the environment they add
            (``PYTHONPATH``), empty without extensions.
        notes: what the plan could not do or found missing (hosts not read, data missing).
        missing_data: for a training run, why its dataset cannot be read yet (``None``: it
            can); a run refuses to start then.
    """

    command: list[str]
    config_file: str
    config: dict[str, Any]
    overrides: dict[str, Any]
    run_record: dict[str, Any]
    dlio_extensions: list[str]
    notes: list[str]
    env: dict[str, str]
    missing_data: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The plan as JSON data (``env`` only with extensions)."""
        plan: dict[str, Any] = {
            "command": list(self.command),
            "config_file": self.config_file,
            "config": copy.deepcopy(self.config),
            "overrides": dict(self.overrides),
            "run_record": dict(self.run_record),
            "dlio_extensions": list(self.dlio_extensions),
            "notes": list(self.notes),
        }
        if self.env:
            plan["env"] = dict(self.env)
        plan["missing_data"] = self.missing_data
        return plan


def _what_if(
    launch: _Launch, run_dir: Path, record: Mapping[str, Any], notes: Sequence[str]
) -> RunPlan:
    """What a run would do, for a plan: the command (with its Hydra overrides), the workload
    YAML's path and content, ``run.json`` and the notes. Nothing is written; the caller has
    validated everything."""
    return RunPlan(
        command=list(launch.cmd),
        config_file=str(run_dir / "configs" / "workload" / f"{launch.name}.yaml"),
        config=copy.deepcopy(launch.config),
        overrides=dict(launch.overrides),
        run_record=dict(record),
        dlio_extensions=list(launch.extensions),
        notes=list(notes),
        env={"PYTHONPATH": launch.env["PYTHONPATH"]} if launch.extensions else {},
    )


def _write_record(run_dir: Path, record: Mapping[str, Any]) -> None:
    write_text_atomic(run_dir / RUN_RECORD, json.dumps(record, indent=2) + "\n")


_RESULT_FILES: Final = (
    "results.json",
    "datagen.json",
    "checkpoint-results.json",
    "summary.json",
    "dlio/summary.json",
)


def _refuse_earlier_run(run_dir: Path) -> None:
    """A run directory that holds an earlier run's results, DLIO output or metadata file is
    not reused."""
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"--run-dir {run_dir} is a file, not a directory")
    found = [run_dir / f for f in _RESULT_FILES if (run_dir / f).exists()]
    found += sorted(run_dir.glob(f"*{METADATA_SUFFIX}"))
    if found:
        raise DlioError(
            f"{run_dir} already holds an earlier run ({found[0].name}); give a new --run-dir "
            "(nothing is overwritten)"
        )


@dataclass(frozen=True)
class _Where:
    """Where a run goes: its directory, its datetime, and whether the directory must be new
    (a results-tree folder, claimed when the run starts)."""

    run: Path
    stamp: str
    new: bool
    #: The results tree the run folder is in (``None``: a ``--run-dir`` of its own).
    root: Path | None = None


def _where(
    run_dir: str | os.PathLike[str] | None,
    results_dir: str | os.PathLike[str] | None,
    *,
    command: str,
    model: str,
) -> _Where:
    if (run_dir is None) == (results_dir is None):
        raise ValueError("give a run directory (--run-dir) or a results tree (--results-dir)")
    if results_dir is not None:
        root = Path(results_dir)
        if root.exists() and not root.is_dir():
            raise ValueError(f"--results-dir {results_dir} is a file, not a directory")
        try:
            folder, stamp = tree_location(root, command=command, model=model)
        except FileExistsError as exc:
            raise DlioError(str(exc)) from None
        return _Where(folder, stamp, True, root.resolve())
    assert run_dir is not None
    return _Where(Path(run_dir).resolve(), run_datetime(), False)


@dataclass(frozen=True)
class _Run:
    """A run whose inputs are validated: where it goes, how DLIO starts, the hosts (their
    count and what was read from them), and how the launch behaves."""

    where: _Where
    mpi: _Mpi
    host_count: int
    host_memory: HostMemory | None
    what_if: bool
    timeout_s: float | None
    log: Log
    #: What a plan (``what_if``) could not do or found missing, for the reader.
    notes: list[str]

    @property
    def hosts(self) -> int | tuple[HostSpec, ...]:
        return self.mpi.hosts if self.mpi.hosts else self.host_count


@dataclass(frozen=True)
class _Started:
    launch: _Launch
    record: dict[str, Any]
    wall: float


def _start(
    config: dict[str, Any],
    run: _Run,
    *,
    command: str,
    name: str,
    engine: str,
    params: Mapping[str, Any],
    extensions: Sequence[str] = (),
    overrides: Mapping[str, Any] | None = None,
    schema: ParquetSchema | None = None,
) -> _Started | RunPlan:
    """What :func:`run_datagen`, :func:`run_training` and :func:`run_checkpointing` share once
    their inputs are validated: prepare the launch (finding DLIO and mpirun), build
    ``run.json``, then either return the plan (``run.what_if``), or create the run directory,
    write ``run.json`` and run DLIO (:func:`_execute`)."""
    where = run.where
    launch = _prepare(
        config,
        run_dir=where.run,
        name=name,
        mpi=run.mpi,
        extensions=extensions,
        overrides=overrides,
    )
    record: dict[str, Any] = {
        "command": command,
        "engine": engine,
        "config_file": f"configs/workload/{name}.yaml",
        "params": dict(params),
        "run_datetime": where.stamp,
        "processes": run.mpi.processes,
        "hosts": format_hosts(run.mpi.hosts) if run.mpi.hosts else run.host_count,
        "host_memory": None if run.host_memory is None else run.host_memory.as_dict(),
        "dlio_overrides": launch.overrides,
        "dlio_extensions": list(extensions),
    }
    if schema is not None:
        record["parquet_schema"] = schema.as_dict()
    if run.what_if:
        return _what_if(launch, where.run, record, run.notes)
    try:
        where.run.mkdir(parents=True, exist_ok=not where.new)
    except FileExistsError:
        raise DlioError(f"{where.run} exists: another run started in the same second") from None
    _write_record(where.run, record)
    wall = _execute(launch, run_dir=where.run, timeout_s=run.timeout_s, log=run.log)
    return _Started(launch, record, wall)


def _write_mlperf_files(
    run: _Run,
    started: _Started,
    *,
    model: str,
    params: Mapping[str, Any],
    result_file: str,
    accelerator: str | None = None,
    end: str | None = None,
    verdict: str | None = None,
    division: str | None = None,
    host_memory_gb: float | None = None,
    data_folder: Path | None = None,
    checkpoint_folder: Path | None = None,
    checkpoints: tuple[int, int] | None = None,
) -> None:
    """The metadata file and the system description of a finished run (before its result
    file, which comes last)."""
    record = started.record
    command = str(record["command"])
    launch = started.launch
    dlio = find_dlio(run.mpi.dlio_venv)
    args = mlpstorage_args(
        command=command,
        model=model,
        processes=run.mpi.processes,
        hosts=run.hosts,
        params=params,
        dlio=dlio,
        mpi_cmd=launch.cmd if run.mpi.mpi else (),
        results_dir=None if run.where.root is None else str(run.where.root),
        accelerator=accelerator,
        data_dir=None if data_folder is None else str(data_folder),
        division=division,
        host_memory_gb=host_memory_gb,
        checkpoint_folder=None if checkpoint_folder is None else str(checkpoint_folder),
        num_checkpoints_write=None if checkpoints is None else checkpoints[0],
        num_checkpoints_read=None if checkpoints is None else checkpoints[1],
    )
    facts = RunFacts(
        command=command,
        model=model,
        stamp=run.where.stamp,
        run_dir=run.where.run,
        processes=run.mpi.processes,
        config_name=launch.name,
        written=launch.config,
        overrides={**launch.overrides, **params},
        ran=launch.expected,
        dlio=dlio,
        cmd=launch.cmd,
        console=run.where.run / CONSOLE_LOG,
        args=args,
        own_args={
            **record["params"],
            "command": command,
            "engine": record["engine"],
            "processes": run.mpi.processes,
            "hosts": record["hosts"],
            "num_hosts": run.host_count,
            "mpi": run.mpi.mpi,
            "mpi_args": list(run.mpi.mpi_args),
        },
        accelerator=accelerator,
        host_memory=run.host_memory,
        end=end,
        runtime_s=started.wall,
        result_file=result_file,
        verdict=verdict,
    )
    system = system_description(
        run.host_memory, run.hosts, mpi=run.mpi.mpi, mpi_args=run.mpi.mpi_args
    )
    write_run_files(run.where.run, metadata(facts), system)


@dataclass(frozen=True)
class _Configs:
    """A run's DLIO config (``config``: what DLIO is to run), the workload file it writes
    (``written``: the published one) and the Hydra overrides between the two."""

    config: dict[str, Any]
    written: dict[str, Any]
    overrides: dict[str, Any]


def _configs(
    build: Callable[..., dict[str, Any]],
    model: str,
    data_folder: Path,
    num_files: int | None,
    num_subfolders: int | None,
    engine: str,
    params: Mapping[str, Any] | None,
) -> _Configs:
    """``build`` (``to_dlio_config`` or ``to_datagen_config`` of one workload) with the run's
    data folder, files and checked ``params``, and as published; the run writes the published
    file and passes its changes on DLIO's command line, as mlpstorage does."""
    changes = checked_params(params, engine)
    config = build(
        data_folder=data_folder, num_files=num_files, num_subfolders=num_subfolders, engine=engine
    )
    apply_params(config, changes)
    check_read_threads(config)
    written = build(data_folder=published_data_folder(model), num_subfolders=0, engine=engine)
    return _Configs(config, written, hydra_overrides(written, config))


def _dataset_files(folder: Path, fmt: str) -> list[Path]:
    train = folder / "train"
    return sorted(p for p in train.rglob(f"*.{fmt}") if p.is_file()) if train.is_dir() else []


def _parquet(config: Mapping[str, Any]) -> ParquetSchema | None:
    dataset = config.get("dataset")
    if not isinstance(dataset, Mapping) or dataset.get("format") != "parquet":
        return None
    return parquet_schema(config)  # SchemaError (a ValueError) names the key


def _extensions(fmt: str, *, generate: bool, train: bool) -> list[str]:
    """The DLIO extensions a run of ``fmt`` needs (empty: plain ``dlio_benchmark``)."""
    found = []
    if generate and fmt in GENERATED_FORMATS:
        found.append(f"{fmt}-generator")
    if train and fmt == "parquet":
        found.append("parquet-reader")
    return found
