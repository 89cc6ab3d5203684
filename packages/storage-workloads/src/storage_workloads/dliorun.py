"""Real runs of the DLIO engine: data generation, training and checkpointing runs, their
results and reports.

DLIO (``dlio_benchmark``) is an external program, run as a subprocess from its own virtual
environment (``scripts/install-dlio.sh`` makes one), under ``mpirun -n N`` (on the hosts of a
``--hosts`` list: :mod:`storage_workloads.hosts`) or as one process. This module writes the
workload YAML into a run directory, starts DLIO on it, checks that DLIO ran that config (its
Hydra record ``dlio_config/config.yaml``), checks what it wrote and turns DLIO's
``summary.json`` and per-rank ``<rank>_output.json`` into a result.

Where DLIO 2.0.0 lacks something a workload needs (the parquet format, tfrecord generation
without DALI, jpeg files of the declared size, the checkpointing workload), DLIO is started
through the launcher of :mod:`storage_workloads.dlio_ext` with that package on its
``PYTHONPATH``; see there.

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

import contextlib
import copy
import csv
import io
import json
import math
import numbers
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from storage_workloads._atomic import write_text_atomic
from storage_workloads.checker import RUN_RECORD, check_path
from storage_workloads.checkpoint import NUM_CHECKPOINTS, CheckpointWorkload
from storage_workloads.dlio import (
    RECORD_LENGTH_KEYS,
    Engine,
    dump_yaml,
    to_datagen_config,
    to_dlio_config,
)
from storage_workloads.dlio_ext import (
    CHECKPOINT_MECHANISM,
    CHECKPOINT_TIMINGS,
    GENERATED_FORMATS,
    LAUNCHER,
    PARQUET_READER,
    PLUGIN_PATH,
)
from storage_workloads.dlio_ext.sw_dlio_ext.formats import (
    ParquetSchema,
    check_tfrecord_index,
    compare_parquet,
    parquet_schema,
)
from storage_workloads.hosts import (
    HostMemory,
    HostSpec,
    check_declared_memory,
    check_host_list,
    format_hosts,
    host_options_in,
    local_host_memory,
    mpirun_prefix,
    read_host_memory,
    resolve_processes,
)
from storage_workloads.layout import (
    HYDRA_SUBDIR,
    METADATA_SUFFIX,
    find_runs,
    metadata,
    run_datetime,
    system_description,
    tree_location,
    write_run_files,
)
from storage_workloads.workloads import WORKLOADS, Datagen, Workload

__all__ = [
    "CHECKPOINT_REPORT_CSV_COLUMNS",
    "CONFIG_PREFIX",
    "DLIO_VENV_ENV",
    "REPORT_CSV_COLUMNS",
    "RESULTS_CSV_COLUMNS",
    "SIZE_CHECKED_FORMATS",
    "DlioError",
    "aggregate_results",
    "apply_params",
    "checkpoint_config",
    "config_name",
    "dlio_command",
    "find_dlio",
    "parse_dlio_output",
    "parse_param",
    "read_hosts",
    "run_checkpointing",
    "run_datagen",
    "run_training",
    "verify_dataset",
    "verify_effective_config",
    "write_report",
    "write_results",
]

#: Environment variable naming the DLIO virtual environment (``--dlio-venv`` wins over it).
DLIO_VENV_ENV: Final = "STORAGE_WORKLOADS_DLIO_VENV"
#: Formats whose files hold the declared sample bytes, so their size can be checked: the
#: sample bytes as they are, or (jpeg) files padded to the declared size by the generator of
#: :mod:`storage_workloads.dlio_ext`. Parquet files are checked against their schema instead.
SIZE_CHECKED_FORMATS: Final = frozenset(
    {"npz", "npy", "hdf5", "tfrecord", "indexed_binary", "jpeg"}
)
#: Prefix of the workload config names this module writes. DLIO 2.0.0 ships configs named
#: ``<model>_<accelerator>`` (unet3d_h100, resnet50_a100, ...), and Hydra's search path finds
#: DLIO's own before the run's ``--config-dir``: a config of the same name would silently run
#: DLIO's workload instead.
CONFIG_PREFIX: Final = "storage_workloads_"
#: Most files whose content (parquet footer, tfrecord index) a datagen check reads.
_CONTENT_CHECKED_FILES: Final = 8
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
_RESULTS_SCHEMA: Final = "storage-workloads/dlio-results/1"
_DATAGEN_SCHEMA: Final = "storage-workloads/dlio-datagen/1"
_CHECKPOINT_SCHEMA: Final = "storage-workloads/dlio-checkpoint/1"

Log = Callable[[str], None]


class DlioError(RuntimeError):
    """DLIO could not be found, started, or did not produce what a run needs."""


def _quiet(_: str) -> None:
    pass


# ---------------------------------------------------------------------------------------------
# Finding and starting DLIO


def find_dlio(dlio_venv: str | os.PathLike[str] | None = None) -> Path:
    """The ``dlio_benchmark`` executable: in ``dlio_venv``, else in the virtual environment
    named by ``$STORAGE_WORKLOADS_DLIO_VENV``, else on ``PATH``.

    Raises :class:`DlioError` naming where it looked and how to install DLIO.
    """
    venv = dlio_venv if dlio_venv is not None else os.environ.get(DLIO_VENV_ENV) or None
    hint = "install it with packages/storage-workloads/scripts/install-dlio.sh VENV_DIR"
    if venv is not None:
        exe = Path(os.path.abspath(venv)) / "bin" / "dlio_benchmark"
        if not exe.is_file():
            source = "--dlio-venv" if dlio_venv is not None else f"${DLIO_VENV_ENV}"
            raise DlioError(f"no dlio_benchmark in {venv} ({source}); {hint}")
        return exe
    found = shutil.which("dlio_benchmark")
    if found is None:
        raise DlioError(
            f"dlio_benchmark is not on PATH and neither --dlio-venv nor ${DLIO_VENV_ENV} is set; "
            + hint
        )
    return Path(os.path.abspath(found))


def _hydra_value(value: object) -> str:
    """A Hydra override value: strings (paths, class names) single-quoted, numbers and booleans
    as YAML reads them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    if "'" in text or "\\" in text:
        raise DlioError(f"path {text!r} contains a quote or backslash, which Hydra cannot take")
    return f"'{text}'"


def config_name(model: str, suffix: str) -> str:
    """The name of a run's workload config: ``storage_workloads_<model>_<suffix>``, unique
    against the configs DLIO ships (see :data:`CONFIG_PREFIX`)."""
    return f"{CONFIG_PREFIX}{model}_{suffix}"


def dlio_command(
    dlio: str | os.PathLike[str] | Sequence[str],
    *,
    config_dir: str | os.PathLike[str],
    workload_name: str,
    output_dir: str | os.PathLike[str],
    processes: int = 1,
    mpi: bool = True,
    mpi_args: Sequence[str] = (),
    hosts: Sequence[HostSpec] = (),
    overrides: Mapping[str, Any] | None = None,
) -> list[str]:
    """The command line that runs DLIO on ``config_dir/workload/<workload_name>.yaml``.

    ``dlio`` is the ``dlio_benchmark`` executable, or the program as a list (the extension
    launcher: ``[python, "-m", "sw_dlio_ext.launch"]``). With ``mpi`` (required for more than
    one process, and for a host list) it is :func:`storage_workloads.hosts.mpirun_prefix`:
    ``mpirun -n PROCESSES``, ``--host h1:2,h2:2`` for ``hosts``, ``--allow-run-as-root`` when
    run as root, ``--oversubscribe`` when more processes than CPUs run on this host, and
    ``mpi_args``. Hydra's run directory is ``output_dir``, which is also DLIO's output folder
    (DLIO's default, so no ``output.folder`` override is needed), with Hydra's record in its
    ``dlio_config/``, as mlpstorage runs DLIO; ``overrides`` are further workload keys
    (``{"reader.reader_classname": ...}``), passed as ``++workload.KEY=VALUE``.
    """
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise ValueError(f"processes must be an integer >= 1, got {processes!r}")
    if processes > 1 and not mpi:
        raise ValueError(f"{processes} processes need mpirun; drop --no-mpi")
    check_host_list(hosts, mpi=mpi, mpi_args=mpi_args)
    out = Path(output_dir).resolve()
    cmd: list[str] = []
    if mpi:
        try:
            cmd = mpirun_prefix(processes, hosts=hosts, mpi_args=mpi_args)
        except RuntimeError as exc:
            raise DlioError(str(exc)) from None
    program = [os.fspath(dlio)] if isinstance(dlio, str | os.PathLike) else list(dlio)
    cmd += [
        *program,
        "--config-dir",
        str(Path(config_dir).resolve()),
        f"workload={workload_name}",
        f"hydra.run.dir={_hydra_value(out)}",
        f"hydra.output_subdir={HYDRA_SUBDIR}",
    ]
    for key, value in (overrides or {}).items():
        cmd.append(f"++workload.{key}={_hydra_value(value)}")
    return cmd


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(no output)"
    return "\n".join(text[-lines:]) or "(no output)"


def _dlio_python(dlio: Path) -> Path:
    """The interpreter of DLIO's environment: ``python`` beside ``dlio_benchmark``, else the
    one its ``#!`` line names."""
    beside = dlio.parent / "python"
    if beside.is_file():
        return beside
    try:
        first = dlio.read_text(encoding="utf-8", errors="replace").splitlines()[0]
    except (OSError, IndexError):
        first = ""
    if first.startswith("#!"):
        candidate = Path(first[2:].strip().split()[0]) if first[2:].strip() else None
        if candidate is not None and candidate.name.startswith("python") and candidate.is_file():
            return candidate
    raise DlioError(
        f"cannot find the Python interpreter of DLIO's environment (no {beside}); the DLIO "
        "extensions (parquet, tfrecord and jpeg generation, checkpointing) run in it"
    )


def _flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def verify_effective_config(
    output_dir: str | os.PathLike[str], *, name: str, expected: Mapping[str, Any]
) -> None:
    """Check that DLIO ran the workload config ``expected`` under the name ``name``.

    Hydra records the config it composed in ``output_dir/dlio_config/config.yaml`` (the
    workload under ``workload``; ``.hydra/`` in runs made before this layout) and the config
    it chose in ``hydra.yaml`` beside it (``hydra.runtime.choices.workload``). Both must
    match: same name, and every key with the same value, no key missing or added. Raises
    :class:`DlioError` naming the differences, which is what happens when Hydra finds another
    config of the same name first.
    """
    record = Path(output_dir) / HYDRA_SUBDIR
    if not record.is_dir() and (Path(output_dir) / ".hydra").is_dir():
        record = Path(output_dir) / ".hydra"
    try:
        composed = yaml.safe_load((record / "config.yaml").read_text(encoding="utf-8"))
        hydra = yaml.safe_load((record / "hydra.yaml").read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise DlioError(
            f"DLIO left no Hydra record ({exc.filename}): cannot confirm which config it ran"
        ) from None
    except (OSError, yaml.YAMLError) as exc:
        raise DlioError(f"cannot read DLIO's Hydra record in {record}: {exc}") from None
    choices = (
        hydra.get("hydra", {}).get("runtime", {}).get("choices", {})
        if isinstance(hydra, Mapping)
        else {}
    )
    chosen = choices.get("workload") if isinstance(choices, Mapping) else None
    workload = composed.get("workload") if isinstance(composed, Mapping) else None
    problems = []
    if chosen != name:
        problems.append(f"Hydra chose workload {chosen!r}, not {name!r}")
    if not isinstance(workload, Mapping):
        problems.append(f"{record / 'config.yaml'} has no workload mapping")
    else:
        ran, wrote = _flatten(workload), _flatten(expected)
        # Values that differ first, then keys missing, then keys DLIO had and the run did not.
        problems += [
            f"{key}: written {wrote[key]!r}, DLIO ran {ran[key]!r}"
            for key in sorted(set(ran) & set(wrote))
            if ran[key] != wrote[key]
        ]
        problems += [
            f"{key}: written {wrote[key]!r}, missing from what DLIO ran"
            for key in sorted(set(wrote) - set(ran))
        ]
        problems += [
            f"{key}: not written, DLIO ran {ran[key]!r}" for key in sorted(set(ran) - set(wrote))
        ]
    if problems:
        shown = "; ".join(problems[:6])
        more = f" (and {len(problems) - 6} more)" if len(problems) > 6 else ""
        raise DlioError(
            f"DLIO did not run the workload config that was written ({name}.yaml): {shown}"
            f"{more}. Another config named {name} on Hydra's search path (DLIO's packaged "
            "configs come first) would do this."
        )


@dataclass(frozen=True)
class _Mpi:
    """How DLIO is started: its environment, the process count and hosts, and MPI."""

    processes: int
    hosts: tuple[HostSpec, ...]
    dlio_venv: str | os.PathLike[str] | None
    mpi: bool
    mpi_args: tuple[str, ...]


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


def _validated_run(
    where: _Where,
    options: _Mpi,
    host_count: int,
    hosts: int | Sequence[HostSpec],
    *,
    host_memory: HostMemory | None,
    what_if: bool,
    timeout_s: float | None,
    log: Log,
) -> _Run:
    """The run, once DLIO has been found (a missing DLIO is the cheaper error to report) and
    the hosts read (:func:`read_hosts`), unless ``host_memory`` holds a reading made before."""
    find_dlio(options.dlio_venv)
    if host_memory is None:
        host_memory = read_hosts(hosts, mpi_args=options.mpi_args, log=log)
    if host_memory is not None and len(host_memory.hosts) != host_count:
        raise ValueError(
            f"the memory reading covers {len(host_memory.hosts)} host(s), the run has {host_count}"
        )
    return _Run(where, options, host_count, host_memory, what_if, timeout_s, log)


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
class _Launch:
    """Everything needed to start DLIO, prepared (and validated) before any file is written."""

    cmd: list[str]
    env: dict[str, str]
    name: str
    config: dict[str, Any]
    overrides: dict[str, Any]
    extensions: tuple[str, ...]
    python: Path | None

    @property
    def expected(self) -> dict[str, Any]:
        return apply_params(copy.deepcopy(self.config), self.overrides)


def _prepare(
    config: dict[str, Any],
    *,
    run_dir: Path,
    name: str,
    mpi: _Mpi,
    extensions: Sequence[str] = (),
    overrides: Mapping[str, Any] | None = None,
) -> _Launch:
    dlio = find_dlio(mpi.dlio_venv)
    all_overrides = dict(overrides or {})
    env = dict(os.environ)
    env["PATH"] = f"{dlio.parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    env.setdefault("PYTHONUNBUFFERED", "1")
    python: Path | None = None
    program: list[str] = [str(dlio)]
    if extensions:
        python = _dlio_python(dlio)
        program = [str(python), "-m", LAUNCHER]
        previous = env.get("PYTHONPATH")
        env["PYTHONPATH"] = str(PLUGIN_PATH) + (f"{os.pathsep}{previous}" if previous else "")
    cmd = dlio_command(
        program,
        config_dir=run_dir / "configs",
        workload_name=name,
        output_dir=run_dir,
        processes=mpi.processes,
        mpi=mpi.mpi,
        mpi_args=mpi.mpi_args,
        hosts=mpi.hosts,
        overrides=overrides,
    )
    return _Launch(
        cmd=cmd,
        env=env,
        name=name,
        config=config,
        overrides=all_overrides,
        extensions=tuple(extensions),
        python=python,
    )


def _execute(launch: _Launch, *, run_dir: Path, timeout_s: float | None, log: Log) -> float:
    """Write the workload YAML into ``run_dir``, run DLIO on it and check that DLIO ran it;
    returns the wall time. Raises :class:`DlioError` when DLIO fails, times out or ran another
    config."""
    write_text_atomic(
        run_dir / "configs" / "workload" / f"{launch.name}.yaml", dump_yaml(launch.config)
    )
    out = run_dir
    console = run_dir / "dlio-console.log"
    log(f"running: {' '.join(launch.cmd)}")
    record = out / HYDRA_SUBDIR / "config.yaml"
    launched_at = time.time()
    started = time.monotonic()
    try:
        with console.open("w", encoding="utf-8") as fh:
            done = subprocess.run(
                launch.cmd,
                cwd=run_dir,
                env=launch.env,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                timeout=timeout_s,
                check=False,
            )
    except subprocess.TimeoutExpired:
        raise DlioError(
            f"dlio_benchmark ran past {timeout_s:g} s and was stopped; last lines of {console}:\n"
            + _tail(console)
        ) from None
    except OSError as exc:
        raise DlioError(f"cannot start {launch.cmd[0]}: {exc}") from None
    wall = time.monotonic() - started

    def fresh() -> bool:  # Hydra's record of this launch, not of an earlier, failed one
        try:
            return record.stat().st_mtime >= launched_at - 2
        except OSError:
            return False

    if done.returncode != 0:
        tail = _tail(console)
        if fresh():
            try:  # a config clash is the likelier cause of the failure: say so first
                verify_effective_config(out, name=launch.name, expected=launch.expected)
            except DlioError as exc:
                raise DlioError(f"{exc}\nlast lines of {console}:\n{tail}") from None
        hint = ""
        if "No module named 'torch'" in tail:
            hint = (
                "\nhint: the pytorch framework needs torch in DLIO's environment "
                "(DLIO_WITH_TORCH=1 install-dlio.sh VENV_DIR), or run the tensorflow framework "
                "and data loader (--param framework=tensorflow --param "
                "reader.data_loader=tensorflow, an open-division change)"
            )
        elif "No module named 'pyarrow'" in tail:
            hint = (
                "\nhint: parquet needs pyarrow in DLIO's environment; re-run "
                "scripts/install-dlio.sh VENV_DIR"
            )
        raise DlioError(
            f"dlio_benchmark exited with status {done.returncode}; last lines of {console}:\n"
            + tail
            + hint
        )
    if record.exists() and not fresh():
        raise DlioError(f"{record} predates this run: DLIO left no record of the config it ran")
    verify_effective_config(out, name=launch.name, expected=launch.expected)
    log(f"dlio_benchmark finished in {wall:.1f} s")
    return wall


def _what_if(launch: _Launch, run_dir: Path, record: Mapping[str, Any]) -> dict[str, Any]:
    """What a run would do, for ``what_if=True``: the command, the workload YAML's path and
    content, and ``run.json``. Nothing is written; the caller has validated everything."""
    plan: dict[str, Any] = {
        "what_if": True,
        "command": list(launch.cmd),
        "config_file": str(run_dir / "configs" / "workload" / f"{launch.name}.yaml"),
        "config": copy.deepcopy(launch.config),
        "run_record": dict(record),
        "dlio_extensions": list(launch.extensions),
    }
    if launch.extensions:
        plan["env"] = {"PYTHONPATH": launch.env["PYTHONPATH"]}
    return plan


def apply_params(config: dict[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """Set dotted parameters (``{"train.epochs": 1}``) in a DLIO mapping, in place; returns it.

    A parameter whose path runs through a value that is not a mapping raises ``ValueError``.
    """
    for key, value in params.items():
        if not isinstance(key, str) or not key or any(not part for part in key.split(".")):
            raise ValueError(f"parameter names are dotted DLIO keys like train.epochs, got {key!r}")
        node: dict[str, Any] = config
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(f"parameter {key}: {part} is a value ({child!r}), not a section")
            node = child
        node[parts[-1]] = value
    return config


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
        return _Where(folder, stamp, True)
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
) -> _Started | dict[str, Any]:
    """What :func:`run_datagen`, :func:`run_training` and :func:`run_checkpointing` share once
    their inputs are validated: prepare the launch (finding DLIO and mpirun), build
    ``run.json``, then either return the ``what_if`` plan, or create the run directory, write
    ``run.json`` and run DLIO (:func:`_execute`)."""
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
        return _what_if(launch, where.run, record)
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
) -> None:
    """The metadata file and the system description of a finished run (before its result
    file, which comes last)."""
    record = started.record
    command = str(record["command"])
    meta = metadata(
        command=command,
        model=model,
        stamp=run.where.stamp,
        processes=run.mpi.processes,
        parameters=started.launch.expected,
        override_parameters={**started.launch.overrides, **params},
        args={
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
    )
    system = system_description(run.host_memory, run.hosts, mpi=run.mpi.mpi)
    write_run_files(run.where.run, meta, system)


def _refuse_existing_dataset(folder: Path) -> None:
    for part in ("train", "valid"):
        sub = folder / part
        if sub.is_dir() and any(p.is_file() for p in sub.rglob("*")):
            raise DlioError(
                f"{sub} already holds files; datagen writes into an empty --data-dir only "
                "(DLIO would overwrite an existing dataset)"
            )


def _dataset_files(folder: Path, fmt: str) -> list[Path]:
    train = folder / "train"
    return sorted(p for p in train.rglob(f"*.{fmt}") if p.is_file()) if train.is_dir() else []


def _parquet(config: Mapping[str, Any]) -> ParquetSchema | None:
    dataset = config.get("dataset")
    if not isinstance(dataset, Mapping) or dataset.get("format") != "parquet":
        return None
    return parquet_schema(config)  # SchemaError (a ValueError) names the key


# ---------------------------------------------------------------------------------------------
# Data generation


def _spread(files: Sequence[Path], count: int) -> list[Path]:
    """Up to ``count`` of ``files``, first and last included, evenly spread."""
    if len(files) <= count:
        return list(files)
    step = (len(files) - 1) / (count - 1)
    return [files[round(i * step)] for i in range(count)]


def verify_dataset(
    data_folder: str | os.PathLike[str],
    dataset: Datagen,
    *,
    num_files: int,
) -> dict[str, Any]:
    """Count and measure the files DLIO generated under ``data_folder/train``.

    DLIO ignores keys it does not know, so a misspelt record length silently gives files of
    its default size: this is the check that the emitted YAML took effect. The file count must
    equal ``num_files``. For :data:`SIZE_CHECKED_FORMATS` the mean file size must be within 2%
    plus 4 KiB of ``num_samples_per_file * record_length_bytes`` (plus a margin for the
    standard deviation of the sizes); for png, csv and parquet the sizes are reported, not
    compared (:func:`run_datagen` checks parquet files against their schema). For tfrecord,
    up to 8 files must have a DALI index in ``data_folder/index/train`` that matches their
    records. Returns ``{"passed": bool, "problems": [...], ...}``.
    """
    folder = Path(data_folder)
    train = folder / "train"
    files = _dataset_files(folder, dataset.format)
    sizes = [p.stat().st_size for p in files]
    expected_bytes = dataset.file_bytes
    problems: list[str] = []
    if len(files) != num_files:
        problems.append(
            f"{len(files):,} .{dataset.format} files in {train}, expected {num_files:,}"
        )
    mean = statistics.fmean(sizes) if sizes else 0.0
    compared = dataset.format in SIZE_CHECKED_FORMATS
    tolerance = 0.02 * expected_bytes + 4096
    if dataset.record_length_bytes_stdev and sizes:
        tolerance += (
            4
            * dataset.record_length_bytes_stdev
            * dataset.num_samples_per_file
            / math.sqrt(len(sizes))
        )
    if compared and sizes and abs(mean - expected_bytes) > tolerance:
        problems.append(
            f"mean file size {mean:,.0f} B, expected {expected_bytes:,} B "
            f"({dataset.num_samples_per_file} x {dataset.record_length_bytes:,} B) within "
            f"{tolerance:,.0f} B: DLIO did not take the record length (wrong key for this engine?)"
        )
    content_checked = 0
    if dataset.format == "tfrecord":
        for path in _spread(files, _CONTENT_CHECKED_FILES):
            content_checked += 1
            problem = check_tfrecord_index(path, folder / "index" / "train" / f"{path.name}.idx")
            if problem:
                problems.append(problem)
    return {
        "data_folder": str(folder),
        "format": dataset.format,
        "files_expected": num_files,
        "files_found": len(files),
        "bytes_total": sum(sizes),
        "file_bytes_mean": mean,
        "file_bytes_min": min(sizes) if sizes else 0,
        "file_bytes_max": max(sizes) if sizes else 0,
        "file_bytes_expected": expected_bytes,
        "size_compared": compared,
        "content_checked_files": content_checked,
        "passed": not problems,
        "problems": problems,
    }


def _check_parquet_files(
    python: Path, files: Sequence[Path], schema: ParquetSchema, rows: int, timeout_s: float
) -> tuple[int, list[str]]:
    """Read the footers of up to 8 of ``files`` with pyarrow (in DLIO's environment) and
    compare them with ``schema``; returns ``(files checked, problems)``."""
    chosen = _spread(files, _CONTENT_CHECKED_FILES)
    if not chosen:
        return 0, []
    env = dict(os.environ)
    previous = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(PLUGIN_PATH) + (f"{os.pathsep}{previous}" if previous else "")
    try:
        done = subprocess.run(
            [str(python), "-m", "sw_dlio_ext.parquet_info", *map(str, chosen)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 0, [f"cannot read the parquet footers with {python}: {exc}"]
    if done.returncode != 0:
        return 0, [f"reading the parquet footers failed: {done.stderr.strip()[-500:]}"]
    problems: list[str] = []
    for line in done.stdout.splitlines():
        info = json.loads(line)
        if "error" in info:
            problems.append(f"{info['path']}: {info['error']}")
        else:
            problems.extend(compare_parquet(info, schema, rows=rows))
    return len(chosen), problems


def _extensions(fmt: str, *, generate: bool, train: bool) -> list[str]:
    """The DLIO extensions a run of ``fmt`` needs (empty: plain ``dlio_benchmark``)."""
    found = []
    if generate and fmt in GENERATED_FORMATS:
        found.append(f"{fmt}-generator")
    if train and fmt == "parquet":
        found.append("parquet-reader")
    return found


def run_datagen(
    dataset: Workload | Datagen,
    *,
    run_dir: str | os.PathLike[str] | None = None,
    results_dir: str | os.PathLike[str] | None = None,
    data_folder: str | os.PathLike[str],
    num_files: int | None = None,
    num_subfolders: int | None = None,
    engine: Engine = "dlio",
    processes: int | None = None,
    hosts: int | Sequence[HostSpec] = 1,
    host_memory: HostMemory | None = None,
    params: Mapping[str, Any] | None = None,
    dlio_venv: str | os.PathLike[str] | None = None,
    mpi: bool = True,
    mpi_args: Sequence[str] = (),
    timeout_s: float | None = None,
    what_if: bool = False,
    log: Log = _quiet,
) -> dict[str, Any]:
    """Generate ``dataset`` with DLIO into ``data_folder`` and verify the files on disk.

    Writes ``run.json``, the datagen YAML, the metadata file, the system description and,
    last, ``datagen.json`` (this function's return value: the command, wall time and
    :func:`verify_dataset`'s findings, plus the parquet footer check) into ``run_dir``, or
    into a new ``results_dir/training/<model>/datagen/<datetime>`` (give one of the two).
    ``hosts`` is a host count or a host list (``HostSpec``), whose slots give the process
    count when ``processes`` is ``None``. Parquet, tfrecord and jpeg datasets are written by
    the generators of :mod:`storage_workloads.dlio_ext`. Everything is validated first: a
    ``run_dir`` with an earlier run's results, or a ``data_folder`` that already holds files,
    is refused before any file is written. Then the hosts are read (:func:`read_hosts`;
    ``host_memory`` gives a reading made before). Raises :class:`DlioError` if DLIO fails or
    runs another config; a failed verification is reported, not raised. With ``what_if``,
    returns after that validation what the run would do (the command, the config and
    ``run.json``, see ``_what_if``) without creating any file or folder.
    """
    d = dataset.datagen if isinstance(dataset, Workload) else dataset
    where = _where(run_dir, results_dir, command="datagen", model=d.model)
    folder = Path(data_folder).resolve()
    config = to_datagen_config(
        d, data_folder=folder, num_files=num_files, num_subfolders=num_subfolders, engine=engine
    )
    apply_params(config, params or {})
    fmt = str(config["dataset"].get("format", d.format))
    schema = _parquet(config)
    _refuse_earlier_run(where.run)
    _refuse_existing_dataset(folder)
    launch_options, host_count = _mpi_options(
        processes, hosts, dlio_venv=dlio_venv, mpi=mpi, mpi_args=mpi_args
    )
    ctx = _validated_run(
        where,
        launch_options,
        host_count,
        hosts,
        host_memory=host_memory,
        what_if=what_if,
        timeout_s=timeout_s,
        log=log,
    )
    name = config_name(d.model, "datagen")
    extensions = _extensions(fmt, generate=True, train=False)
    record_params: dict[str, Any] = {"model": d.model}
    if isinstance(dataset, Workload):
        record_params["accelerator"] = dataset.accelerator
    started = _start(
        config,
        ctx,
        command="datagen",
        name=name,
        engine=engine,
        params=record_params,
        extensions=extensions,
        schema=schema,
    )
    if isinstance(started, dict):
        return started
    files = config["dataset"]["num_files_train"]
    shape = Datagen(
        model=d.model,
        framework=str(config.get("framework", d.framework)),
        format=fmt,
        num_files_train=files,
        num_samples_per_file=int(
            config["dataset"].get("num_samples_per_file", d.num_samples_per_file)
        ),
        record_length_bytes=int(
            config["dataset"].get(RECORD_LENGTH_KEYS[engine][0], d.record_length_bytes)
        ),
        record_length_bytes_stdev=int(
            config["dataset"].get(RECORD_LENGTH_KEYS[engine][1], d.record_length_bytes_stdev)
        ),
    )
    verification = verify_dataset(folder, shape, num_files=files)
    if schema is not None and started.launch.python is not None:
        checked, problems = _check_parquet_files(
            started.launch.python,
            _dataset_files(folder, fmt),
            schema,
            shape.num_samples_per_file,
            timeout_s or 300.0,
        )
        verification["content_checked_files"] = checked
        verification["problems"].extend(problems)
        verification["passed"] = not verification["problems"]
    result = {
        "schema": _DATAGEN_SCHEMA,
        "command": started.launch.cmd,
        "wall_s": started.wall,
        "engine": engine,
        "processes": launch_options.processes,
        "hosts": started.record["hosts"],
        "run_dir": str(where.run),
        "dlio_extensions": list(extensions),
        "verification": verification,
    }
    if schema is not None:
        result["parquet_schema"] = schema.as_dict()
    _write_mlperf_files(
        ctx,
        started,
        model=d.model,
        params=params or {},
        result_file="datagen.json",
        accelerator=record_params.get("accelerator"),
    )
    write_text_atomic(where.run / "datagen.json", json.dumps(result, indent=2) + "\n")
    return result


# ---------------------------------------------------------------------------------------------
# Results


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise DlioError(f"{what} is not a finite number: {value!r}")
    return float(value)


def _load_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DlioError(f"{path} is missing: DLIO did not finish the run") from None
    except (OSError, ValueError) as exc:
        raise DlioError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise DlioError(f"{path}: expected a JSON object, got {type(data).__name__}")
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
) -> dict[str, Any]:
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
            {
                "epoch": int(key),
                "au_percent": au,
                "samples_per_s": samples,
                "mb_per_s": samples * record_length_bytes / 2**20,
                "steps": sum(r[2] for r in per_rank),
            }
        )
    au_mean = statistics.fmean(e["au_percent"] for e in epochs)
    samples_mean = statistics.fmean(e["samples_per_s"] for e in epochs)
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
            close(e["au_percent"], v)
            for e, v in zip(epochs, dlio["train_au_percentage"], strict=False)
        )
    )
    threshold = au_threshold * 100
    return {
        "num_accelerators": n,
        "epochs": epochs,
        "au_mean_percent": au_mean,
        "au_stdev_percent": statistics.pstdev(e["au_percent"] for e in epochs),
        "samples_per_s_mean": samples_mean,
        "mb_per_s_mean": samples_mean * record_length_bytes / 2**20,
        "record_length_bytes": record_length_bytes,
        "au_threshold_percent": threshold,
        "passed": au_mean >= threshold,
        "consistent_with_summary": consistent,
        "dlio_summary": dlio,
        "host_memory_gb": summary.get("host_memory_GB"),
        "start": summary.get("start"),
        "end": summary.get("end"),
    }


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


def write_results(run_dir: str | os.PathLike[str], result: Mapping[str, Any]) -> dict[str, Path]:
    """Write ``results.csv`` and then ``results.json`` into ``run_dir``, each atomically."""
    run = Path(run_dir)
    paths = {"results.csv": run / "results.csv", "results.json": run / "results.json"}
    write_text_atomic(paths["results.csv"], _results_csv(result))
    write_text_atomic(paths["results.json"], json.dumps(result, indent=2, allow_nan=False) + "\n")
    return paths


def run_training(
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
) -> dict[str, Any]:
    """Run ``workload`` with DLIO on an existing dataset and write its results.

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
    named to DLIO by the Hydra override ``reader.reader_classname`` (recorded in ``run.json``,
    not in the workload YAML). Everything is validated before any file is written: the dataset
    must hold the files the run reads, and ``run_dir`` must not hold an earlier run's results.
    With ``what_if``, returns after that validation what the run would do (the command, the
    config and ``run.json``) without creating any file or folder.
    """
    where = _where(run_dir, results_dir, command="run", model=workload.model)
    folder = Path(data_folder).resolve()
    config = to_dlio_config(
        workload,
        data_folder=folder,
        num_files=num_files,
        num_subfolders=num_subfolders,
        engine=engine,
    )
    apply_params(config, params or {})
    dataset = config.get("dataset", {})
    fmt = str(dataset.get("format", workload.format))
    schema = _parquet(config)
    _refuse_earlier_run(where.run)
    storage = config.get("storage") if isinstance(config.get("storage"), Mapping) else {}
    if storage.get("storage_type", "local_fs") in ("local_fs", "parallel_fs"):
        needed = int(dataset.get("num_files_train", workload.num_files_train))
        found = len(_dataset_files(folder, fmt))
        if found < needed:
            raise DlioError(
                f"{folder / 'train'} holds {found:,} .{fmt} files and the run reads {needed:,}: "
                "generate them first (storage-workloads datagen, same --data-dir and --num-files)"
            )
    if host_memory_gb is not None and (
        isinstance(host_memory_gb, bool)
        or not isinstance(host_memory_gb, int | float)
        or not math.isfinite(host_memory_gb)
        or host_memory_gb <= 0
    ):
        raise ValueError(f"--host-memory-gb must be a number > 0, got {host_memory_gb!r}")
    launch_options, host_count = _mpi_options(
        processes, hosts, dlio_venv=dlio_venv, mpi=mpi, mpi_args=mpi_args
    )
    ctx = _validated_run(
        where,
        launch_options,
        host_count,
        hosts,
        host_memory=host_memory,
        what_if=what_if,
        timeout_s=timeout_s,
        log=log,
    )
    memory = ctx.host_memory
    warning = check_declared_memory(host_memory_gb, host_count, memory)
    if warning:
        log(f"warning: {warning}")
    overrides: dict[str, Any] = {}
    reader = config.get("reader") if isinstance(config.get("reader"), Mapping) else {}
    if schema is not None and "reader_classname" not in reader:
        overrides["reader.reader_classname"] = PARQUET_READER
    name = config_name(workload.model, workload.accelerator)
    workflow = config.get("workflow") if isinstance(config.get("workflow"), Mapping) else {}
    extensions = _extensions(
        fmt, generate=bool(workflow.get("generate_data")), train=bool(workflow.get("train", True))
    )
    run_params: dict[str, Any] = {
        "model": workload.model,
        "accelerator": workload.accelerator,
        "division": division,
        "num_accelerators": launch_options.processes,
        "hosts": host_count,
    }
    if host_memory_gb is not None:
        run_params["host_memory_gb"] = host_memory_gb
    if memory is not None:
        run_params["measured_host_memory_gb"] = memory.per_host_gib
    started = _start(
        config,
        ctx,
        command="run",
        name=name,
        engine=engine,
        params=run_params,
        extensions=extensions,
        overrides=overrides,
        schema=schema,
    )
    if isinstance(started, dict):
        return started
    record_key = RECORD_LENGTH_KEYS[engine][0]
    length = dataset.get(record_key, workload.record_length_bytes)
    result = parse_dlio_output(
        where.run,
        au_threshold=workload.au_threshold,
        record_length_bytes=int(length),
    )
    report = check_path(where.run)
    result = {
        "schema": _RESULTS_SCHEMA,
        "model": workload.model,
        "accelerator": workload.accelerator,
        "engine": engine,
        "processes": launch_options.processes,
        "hosts": started.record["hosts"],
        "measured_host_memory_gib": None if memory is None else memory.per_host_gib,
        "run_dir": str(where.run),
        "params": dict(params or {}),
        "command": started.launch.cmd,
        "wall_s": started.wall,
        "dlio_extensions": list(extensions),
        **result,
        "verdict": report.verdict,
        "issues": [issue.as_dict() for issue in report.issues],
    }
    _write_mlperf_files(
        ctx,
        started,
        model=workload.model,
        params=params or {},
        result_file="results.json",
        accelerator=workload.accelerator,
        end=result.get("end"),
    )
    write_results(where.run, result)
    return result


# ---------------------------------------------------------------------------------------------
# Checkpointing

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


def _phase(durations: object, bytes_per_checkpoint: int, what: str) -> dict[str, Any]:
    if not isinstance(durations, list):
        raise DlioError(f"{CHECKPOINT_TIMINGS}: {what} is not a list")
    seconds = [_number(d, f"{CHECKPOINT_TIMINGS}: {what}") for d in durations]
    rates = [bytes_per_checkpoint / s / 1e9 if s > 0 else math.inf for s in seconds]
    finite = [r for r in rates if math.isfinite(r)]
    return {
        "count": len(seconds),
        "seconds": seconds,
        "gb_per_s": [r if math.isfinite(r) else None for r in rates],
        "seconds_mean": statistics.fmean(seconds) if seconds else None,
        "gb_per_s_mean": statistics.fmean(finite) if finite else None,
    }


def run_checkpointing(
    workload: CheckpointWorkload,
    *,
    run_dir: str | os.PathLike[str] | None = None,
    results_dir: str | os.PathLike[str] | None = None,
    checkpoint_folder: str | os.PathLike[str],
    processes: int | None = None,
    hosts: int | Sequence[HostSpec] = 1,
    host_memory: HostMemory | None = None,
    scale: float = 1.0,
    num_checkpoints_write: int = NUM_CHECKPOINTS,
    num_checkpoints_read: int = NUM_CHECKPOINTS,
    dlio_venv: str | os.PathLike[str] | None = None,
    mpi: bool = True,
    mpi_args: Sequence[str] = (),
    timeout_s: float | None = None,
    what_if: bool = False,
    log: Log = _quiet,
) -> dict[str, Any]:
    """Run a checkpointing workload with dlio-benchmark 2.0.0 (:func:`checkpoint_config`).

    Writes ``run.json``, the config, DLIO's output, the metadata file, the system description
    and, last, ``checkpoint-results.json`` into ``run_dir`` or a new
    ``results_dir/checkpointing/<model>/<datetime>`` (give one of the two): per phase
    (``write``, ``read``) the seconds of each checkpoint over all ranks, between barriers, and
    GB/s (10^9 bytes), plus DLIO's own checkpoint durations from ``per_epoch_stats.json``
    (rank 0, two decimals) as a cross-check. ``hosts`` is a host count or a host list
    (``HostSpec``), whose slots give the process count when ``processes`` is ``None``; the
    hosts are read (:func:`read_hosts`) and recorded. ``checkpoint_folder`` must be empty or
    missing: earlier checkpoints are never overwritten. A run with ``scale`` below 1 or with
    fewer processes than the closed count is no submission; the rules checker is not run on
    it (it judges configs of the MLPerf DLIO, which this engine lacks). With ``what_if``,
    returns after validation what the run would do (the command, the config and ``run.json``)
    without creating any file or folder.
    """
    where = _where(run_dir, results_dir, command="checkpoint", model=workload.name)
    run = where.run
    folder = Path(checkpoint_folder).resolve()
    launch_options, host_count = _mpi_options(
        processes, hosts, dlio_venv=dlio_venv, mpi=mpi, mpi_args=mpi_args
    )
    config = checkpoint_config(
        workload,
        checkpoint_folder=folder,
        steps_folder=run / "steps-data",
        processes=launch_options.processes,
        scale=scale,
        num_checkpoints_write=num_checkpoints_write,
        num_checkpoints_read=num_checkpoints_read,
    )
    _refuse_earlier_run(run)
    if folder.is_dir() and any(folder.iterdir()):
        raise DlioError(
            f"{folder} is not empty; checkpoints go into an empty folder (nothing is overwritten)"
        )
    if (run / "steps-data").exists():
        raise DlioError(f"{run / 'steps-data'} exists: give a new run directory")
    ctx = _validated_run(
        where,
        launch_options,
        host_count,
        hosts,
        host_memory=host_memory,
        what_if=what_if,
        timeout_s=timeout_s,
        log=log,
    )
    name = config_name(workload.name, "checkpoint")
    record_params = {
        "model": workload.name,
        "num_processes": launch_options.processes,
        "hosts": host_count,
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
    if isinstance(started, dict):
        return started
    processes = launch_options.processes
    wall = started.wall
    timings = _load_json(run / CHECKPOINT_TIMINGS)
    total = timings.get("bytes_per_checkpoint")
    if isinstance(total, bool) or not isinstance(total, int) or total < 1:
        raise DlioError(f"{CHECKPOINT_TIMINGS}: bytes_per_checkpoint is {total!r}")
    write = _phase(timings.get("writes_s"), total, "writes_s")
    read = _phase(timings.get("reads_s"), total, "reads_s")
    if write["count"] != num_checkpoints_write or read["count"] != num_checkpoints_read:
        raise DlioError(
            f"DLIO wrote {write['count']} and read {read['count']} checkpoints, expected "
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
    result = {
        "schema": _CHECKPOINT_SCHEMA,
        "model": workload.name,
        "engine": "dlio",
        "processes": processes,
        "scale": scale,
        "closed_processes": workload.closed_processes,
        "bytes_per_checkpoint": total,
        "bytes_per_checkpoint_full_scale": round(workload.written_gb(processes) * 1e9),
        "model_bytes_per_rank": timings.get("model_bytes_per_rank"),
        "optimizer_bytes_per_rank": timings.get("optimizer_bytes_per_rank"),
        "fsync": timings.get("fsync"),
        "write": write,
        "read": read,
        "dlio_checkpoint_durations_s": dlio_durations,
        "files_written": len(files),
        "bytes_on_disk": sum(p.stat().st_size for p in files),
        "hosts": started.record["hosts"],
        "run_dir": str(run),
        "command": started.launch.cmd,
        "wall_s": wall,
        "verdict": "not checked: a dlio-benchmark 2.0.0 emulation"
        + (f" at scale {scale:g}" if scale != 1 else ""),
    }
    _write_mlperf_files(
        ctx, started, model=workload.name, params={}, result_file="checkpoint-results.json"
    )
    write_text_atomic(
        run / "checkpoint-results.json", json.dumps(result, indent=2, allow_nan=False) + "\n"
    )
    return result


# ---------------------------------------------------------------------------------------------
# Reports over several runs

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


def _training_row(path: Path) -> dict[str, Any]:
    data = _load_json(path / "results.json")
    return {
        "run": str(path),
        "source": "storage-workloads",
        "model": data.get("model"),
        "accelerator": data.get("accelerator"),
        "processes": data.get("processes"),
        "hosts": data.get("hosts"),
        "epochs": len(data.get("epochs", [])),
        "au_mean_percent": data.get("au_mean_percent"),
        "samples_per_s_mean": data.get("samples_per_s_mean"),
        "mb_per_s_mean": data.get("mb_per_s_mean"),
        "passed": data.get("passed"),
        "verdict": data.get("verdict"),
    }


def _metadata_of(path: Path) -> dict[str, Any]:
    for candidate in sorted(path.glob(f"*{METADATA_SUFFIX}")):
        with contextlib.suppress(DlioError):
            return _load_json(candidate)
    return {}


def _dlio_row(path: Path) -> dict[str, Any] | str:
    """A report row from DLIO's ``summary.json`` of a run folder that has no ``results.json``
    (as mlpstorage leaves one), or why it is no training run."""
    meta = _metadata_of(path)
    if meta.get("command") == "datagen":
        return "data generation"
    if meta.get("benchmark_type") not in (None, "training") or meta.get("command") not in (
        None,
        "run",
        "run_benchmark",
    ):
        return (
            f"a {meta.get('benchmark_type')} {meta.get('command')} run: its summary.json is "
            "not read here"
        )
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
    return {
        "run": str(path),
        "source": "dlio-summary",
        "model": model,
        "accelerator": accelerator,
        "processes": summary.get("num_accelerators"),
        "hosts": summary.get("num_hosts"),
        "epochs": len(epochs) if isinstance(epochs, list) else None,
        "au_mean_percent": au,
        "samples_per_s_mean": metric.get("train_throughput_mean_samples_per_second"),
        "mb_per_s_mean": metric.get("train_io_mean_MB_per_second"),
        "passed": passed,
        "verdict": checked.verdict,
    }


def _checkpoint_row(path: Path) -> dict[str, Any]:
    data = _load_json(path / "checkpoint-results.json")
    if data.get("schema") != _CHECKPOINT_SCHEMA:
        raise DlioError(f"{path / 'checkpoint-results.json'} is not a storage-workloads result")
    write = data.get("write") if isinstance(data.get("write"), Mapping) else {}
    read = data.get("read") if isinstance(data.get("read"), Mapping) else {}
    return {
        "run": str(path),
        "model": data.get("model"),
        "processes": data.get("processes"),
        "hosts": data.get("hosts", 1),
        "scale": data.get("scale"),
        "bytes_per_checkpoint": data.get("bytes_per_checkpoint"),
        "write_count": write.get("count"),
        "write_seconds_mean": write.get("seconds_mean"),
        "write_gb_per_s_mean": write.get("gb_per_s_mean"),
        "read_count": read.get("count"),
        "read_seconds_mean": read.get("seconds_mean"),
        "read_gb_per_s_mean": read.get("gb_per_s_mean"),
        "verdict": data.get("verdict"),
    }


def _stats(rows: Sequence[Mapping[str, Any]], key: str) -> dict[str, float]:
    values = [
        float(r[key])
        for r in rows
        if isinstance(r.get(key), int | float) and not isinstance(r.get(key), bool)
    ]
    if not values:
        return {}
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values)}


def aggregate_results(run_dirs: Sequence[str | os.PathLike[str]]) -> dict[str, Any]:
    """Gather the results of runs into one report.

    Each path is a run directory or any folder above run directories: a submission, the
    ``loop-1`` .. folders of ``run --loops``, or the root (or any part) of a results tree
    (``training/<model>/<command>/<datetime>``, ``checkpointing/<model>/<datetime>``), walked
    down to its run folders (:func:`storage_workloads.layout.find_runs`). A training run
    contributes its ``results.json`` or, where it has none but a ``summary.json`` and a
    ``*_metadata.json`` (a run mlpstorage made), DLIO's own figures and the rules checker's
    verdict; a checkpointing run its ``checkpoint-results.json``. Data generation runs and
    runs without results are listed under ``skipped``.

    The report lists each run and, over the training runs, the count, whether all passed
    (``None`` without training runs), the mean, minimum and maximum of the mean AU, samples/s
    and MB/s, and the workloads seen; over the checkpointing runs, their count and the mean,
    minimum and maximum of the write and read GB/s. Raises :class:`DlioError` for a path that
    does not exist, holds no run, or a result file that cannot be read.
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
    rows: list[dict[str, Any]] = []
    checkpoints: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    for path, kind in found:
        if kind == "training":
            rows.append(_training_row(path))
        elif kind == "checkpoint":
            checkpoints.append(_checkpoint_row(path))
        elif kind == "dlio":
            row = _dlio_row(path)
            if isinstance(row, str):
                skipped.append({"run": str(path), "reason": row})
            else:
                rows.append(row)
        else:
            reason = (
                "data generation"
                if (path / "datagen.json").is_file()
                or _metadata_of(path).get("command") == "datagen"
                else "no results (an unfinished or failed run)"
            )
            skipped.append({"run": str(path), "reason": reason})
    if not rows and not checkpoints:
        names = ", ".join(str(Path(g)) for g in run_dirs)
        raise DlioError(
            f"{names} has no results.json, checkpoint-results.json or DLIO summary.json with a "
            f"*{METADATA_SUFFIX} (in it or below)"
            + (f"; skipped: {skipped[0]['run']} ({skipped[0]['reason']})" if skipped else "")
        )
    return {
        "runs": rows,
        "count": len(rows),
        "all_passed": all(r["passed"] is True for r in rows) if rows else None,
        "workloads": sorted({f"{r['model']} {r['accelerator']}" for r in rows}),
        "au_mean_percent": _stats(rows, "au_mean_percent"),
        "samples_per_s_mean": _stats(rows, "samples_per_s_mean"),
        "mb_per_s_mean": _stats(rows, "mb_per_s_mean"),
        "checkpoint_runs": checkpoints,
        "checkpoint_count": len(checkpoints),
        "checkpoint_write_gb_per_s": _stats(checkpoints, "write_gb_per_s_mean"),
        "checkpoint_read_gb_per_s": _stats(checkpoints, "read_gb_per_s_mean"),
        "skipped": skipped,
    }


def _csv(columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for r in rows:
        writer.writerow([_fmt(r.get(c)) for c in columns])
    return buf.getvalue()


def write_report(out_dir: str | os.PathLike[str], report: Mapping[str, Any]) -> dict[str, Path]:
    """Write ``report.csv`` (one row per training run), ``checkpoint-report.csv`` (one row per
    checkpointing run, when there are any) and then ``report.json``, each atomically."""
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


def parse_param(text: str) -> tuple[str, Any]:
    """``"train.epochs=1"`` as ``("train.epochs", 1)``: the value is read as YAML."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--param takes KEY=VALUE (a dotted DLIO key), got {text!r}")
    try:
        parsed = yaml.safe_load(value) if value.strip() else ""
    except yaml.YAMLError:
        parsed = value
    return key.strip(), parsed
