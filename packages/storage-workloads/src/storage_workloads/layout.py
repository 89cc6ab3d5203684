"""The results layout of the MLPerf Storage tool (mlpstorage), so that a run of this package
and one of mlpstorage can be read by either tool.

Facts of mlcommons/storage that this module relies on (read from mlpstorage 2.0.0b1's code,
``mlpstorage/`` at caa90c9, and from the files it writes when run; the package's
docs/dlio-runs.md lists them, The mlpstorage layout):

- A results tree is ``ROOT/<benchmark type>/<model>/<command>/<datetime>/`` for training
  (``training/unet3d/run/20250115_143022``; the commands ``datagen`` and ``run``) and
  ``ROOT/checkpointing/<model>/<datetime>/`` for checkpointing, whose model names use a hyphen
  (``llama3-8b``). The datetime is the local start time as ``%Y%m%d_%H%M%S``.
- A run folder holds one ``<benchmark type>_<datetime>_metadata.json``, DLIO's
  ``summary.json`` (and its other output) and DLIO's Hydra record in ``dlio_config/``
  (``config.yaml``, ``overrides.yaml``, ``hydra.yaml``). mlpstorage's ``reports reportgen``
  walks a tree and takes every folder with exactly one ``*_metadata.json`` and a
  ``summary.json`` as a run (a datagen folder has no ``summary.json``): the benchmark type
  from the ``workflow`` flags of Hydra's ``config.yaml``, the parameters from its
  ``workload``, the changes from the ``++workload.KEY=VALUE`` lines of ``overrides.yaml``
  (each split at ``=`` into two), the accelerators, hosts' memory and metrics from
  ``summary.json``.
- The metadata file holds the attributes of mlpstorage's benchmark object (24 keys for a
  training run: :func:`metadata`); newer readers also take ``model``, ``command``,
  ``num_processes``, ``parameters`` and ``override_parameters``.
- The system description is a YAML file per system (``systems/<system-name>.yaml`` of a
  submission) with the sections and keys of the template ``system_configuration.yaml``.

The code here is this package's own.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import yaml

from storage_workloads._atomic import write_text_atomic
from storage_workloads._reading import load_json_file, parse_yaml_text, read_bounded_text
from storage_workloads.dlio import dump_yaml
from storage_workloads.hosts import HostMemory, HostSpec

__all__ = [
    "DATETIME_FORMAT",
    "HYDRA_SUBDIR",
    "METADATA_SUFFIX",
    "SYSTEM_DESCRIPTION",
    "TREE_TYPES",
    "RunFacts",
    "find_runs",
    "generates_data",
    "is_datagen",
    "metadata",
    "metadata_name",
    "mlpstorage_args",
    "read_metadata",
    "run_datetime",
    "system_description",
    "tree_location",
    "write_run_files",
]

#: The datetime of a run folder and of its metadata file name (local time).
DATETIME_FORMAT: Final = "%Y%m%d_%H%M%S"
#: Where DLIO's Hydra record goes in a run folder (mlpstorage's choice, ``hydra.output_subdir``).
HYDRA_SUBDIR: Final = "dlio_config"
#: A run folder's metadata file ends so: ``training_20250115_143022_metadata.json``.
METADATA_SUFFIX: Final = "_metadata.json"
#: The system description each run folder gets (the template's sections, measured parts filled).
SYSTEM_DESCRIPTION: Final = "system-description.yaml"
#: Benchmark types of a results tree, by this package's command.
TREE_TYPES: Final = {"datagen": "training", "run": "training", "checkpoint": "checkpointing"}
_METADATA_SCHEMA: Final = "storage-workloads/mlperf-metadata/1"


def run_datetime(when: datetime | None = None) -> str:
    """``when`` (default: now, local time) as a run folder's datetime, ``20250115_143022``."""
    return (when or datetime.now()).strftime(DATETIME_FORMAT)


def tree_model(command: str, model: str) -> str:
    """A model's folder name in a results tree: checkpointing models with hyphens
    (``llama3-8b``), training models as they are."""
    return model.replace("_", "-") if TREE_TYPES[command] == "checkpointing" else model


def tree_location(
    results_dir: str | os.PathLike[str], *, command: str, model: str, wait_s: float = 2.0
) -> tuple[Path, str]:
    """The run folder of a new run in the results tree ``results_dir`` and its datetime:
    ``ROOT/training/<model>/<datagen|run>/<datetime>`` or
    ``ROOT/checkpointing/<model>/<datetime>``. A folder of that second that exists already (an
    earlier run) is never reused: up to ``wait_s`` is waited for the next second."""
    if command not in TREE_TYPES:
        raise ValueError(f"command must be one of {', '.join(TREE_TYPES)}, got {command!r}")
    base = Path(results_dir).resolve() / TREE_TYPES[command] / tree_model(command, model)
    if TREE_TYPES[command] == "training":
        base = base / command
    deadline = time.monotonic() + wait_s
    while True:
        stamp = run_datetime()
        folder = base / stamp
        if not folder.exists():
            return folder, stamp
        if time.monotonic() >= deadline:
            raise FileExistsError(f"{folder} exists: an earlier run started in the same second")
        time.sleep(max(0.05, 1.0 - (time.time() % 1.0)))


def metadata_name(benchmark_type: str, stamp: str) -> str:
    """``<benchmark type>_<datetime>_metadata.json``."""
    return f"{benchmark_type}_{stamp}{METADATA_SUFFIX}"


def _cluster_information(memory: HostMemory | None) -> dict[str, Any] | None:
    """mlpstorage's ``ClusterInformation`` (``total_memory_bytes``, ``total_cores``), with
    each host as read."""
    if memory is None or not memory.hosts:
        return None
    totals = [h.mem_total_bytes for h in memory.hosts]
    return {
        "total_memory_bytes": memory.total_bytes,
        "total_cores": sum(h.cpus or 0 for h in memory.hosts),
        "num_hosts": len(memory.hosts),
        "min_memory_bytes": min(totals),
        "max_memory_bytes": max(totals),
        "collection_method": memory.method,
        "hosts": [
            {
                "hostname": h.hostname,
                "host": h.host,
                "slots": h.slots,
                "meminfo": {"MemTotal": h.mem_total_bytes // 1024},
                "cpu": {"num_logical_cores": h.cpus, "model": h.cpu_model, "sockets": h.sockets},
            }
            for h in memory.hosts
        ],
    }


@dataclass(frozen=True, kw_only=True)
class RunFacts:
    """What a finished run's metadata file records (:func:`metadata`)."""

    #: ``datagen``, ``run`` or ``checkpoint`` (this package's command).
    command: str
    model: str
    stamp: str
    run_dir: Path
    processes: int
    #: The workload config's name (``storage_workloads_unet3d_h100``) and its file's content.
    config_name: str
    written: Mapping[str, Any]
    #: The Hydra overrides (dotted) and the config DLIO ran (``written`` with them applied).
    overrides: Mapping[str, Any]
    ran: Mapping[str, Any]
    #: The ``dlio_benchmark`` executable, the command line and where its output went.
    dlio: Path
    cmd: Sequence[str]
    console: Path
    #: The arguments, in mlpstorage's names (:func:`mlpstorage_args`), and this package's own.
    args: Mapping[str, Any]
    own_args: Mapping[str, Any]
    accelerator: str | None = None
    host_memory: HostMemory | None = None
    end: str | None = None
    runtime_s: float | None = None
    result_file: str | None = None
    #: The checker's verdict (``CLOSED``, ``OPEN``, ``INVALID``); ``None``: not checked.
    verdict: str | None = None


def metadata(facts: RunFacts) -> dict[str, Any]:
    """The metadata mapping of a run folder: the 24 keys mlpstorage 2.0 writes (the
    attributes of its benchmark object), in its order and with this run's values, then the
    keys of newer mlpstorage readers and this package's own (``storage_workloads``).

    Values mlpstorage knows and this package does not have their nearest fact: ``debug`` is
    false, ``run_number`` 0 (mlpstorage never sets it), ``verification`` the checker's
    verdict in mlpstorage's words (``closed``, ``open``, ``invalid``; ``null`` for a datagen,
    which mlpstorage does not verify either), ``command_output_files`` the one console log
    that holds DLIO's stdout and stderr. Where mlpstorage writes ``null`` or an object's
    address, this package writes what it read: ``per_host_mem_kB`` (``MemTotal`` of each
    host, a list), ``total_mem_kB`` and ``cluster_information`` (``total_memory_bytes``,
    ``total_cores`` and the hosts)."""
    benchmark_type = TREE_TYPES[facts.command]
    name = metadata_name(benchmark_type, facts.stamp)
    memory = facts.host_memory
    per_host_kb = None if memory is None else [h.mem_total_bytes // 1024 for h in memory.hosts]
    executed = shlex.join(facts.cmd)
    config_dir = facts.run_dir / "configs"
    data: dict[str, Any] = {
        "args": dict(facts.args),
        "debug": False,
        "run_datetime": facts.stamp,
        "run_number": 0,
        "runtime": facts.runtime_s,
        "verification": None if facts.verdict is None else facts.verdict.lower(),
        "command_output_files": [
            {"command": executed, "stdout": str(facts.console), "stderr": str(facts.console)}
        ],
        "run_result_output": str(facts.run_dir),
        "metadata_filename": name,
        "metadata_file_path": str(facts.run_dir / name),
        "_config_name": facts.config_name,
        "base_command": facts.dlio.name,
        "base_path": str(facts.dlio.parent),
        "base_command_path": str(facts.dlio),
        "config_path": str(config_dir),
        "per_host_mem_kB": per_host_kb,
        "total_mem_kB": None if per_host_kb is None else sum(per_host_kb),
        "cluster_information": _cluster_information(memory),
        "config_file": f"{facts.config_name}.yaml",
        "params_dict": dict(facts.overrides),
        "yaml_params": dict(facts.written),
        "combined_params": dict(facts.ran),
        "executed_command": executed,
        "benchmark_type": benchmark_type,
        # read by newer mlpstorage (mlpstorage_py) and by this package's report
        "model": tree_model(facts.command, facts.model),
        "command": "run" if facts.command == "checkpoint" else facts.command,
        "num_processes": facts.processes,
        "parameters": dict(facts.ran),
        "override_parameters": dict(facts.overrides),
    }
    if facts.accelerator is not None:
        data["accelerator"] = facts.accelerator
    if facts.end is not None:
        data["end_datetime"] = facts.end
    data["storage_workloads"] = {
        "schema": _METADATA_SCHEMA,
        "command": facts.command,
        "args": dict(facts.own_args),
        "run_record": "run.json",
        "result": facts.result_file,
    }
    return data


def mlpstorage_args(
    *,
    command: str,
    model: str,
    processes: int,
    hosts: int | Sequence[HostSpec],
    params: Mapping[str, Any],
    dlio: Path,
    mpi_cmd: Sequence[str],
    results_dir: str | None,
    accelerator: str | None = None,
    data_dir: str | None = None,
    division: str | None = None,
    host_memory_gb: float | None = None,
    checkpoint_folder: str | None = None,
    num_checkpoints_write: int | None = None,
    num_checkpoints_read: int | None = None,
) -> dict[str, Any]:
    """The arguments of the mlpstorage command this run is, in mlpstorage 2.0's names (the
    ``args`` of its metadata file), so that a reader of mlpstorage's files finds them: the
    program and command, the model, the process count under the name its command uses
    (``num_accelerators``, ``num_processes``), the hosts, the declared memory, ``params`` as
    ``KEY=VALUE`` texts, the MPI choices that the run's mpirun line shows."""
    program = TREE_TYPES[command]
    names = [h.name for h in hosts] if not isinstance(hosts, int) else None
    args: dict[str, Any] = {
        "program": program,
        "command": "run" if command in ("run", "checkpoint") else command,
        "results_dir": results_dir,
        "loops": 1,
        "config_file": None,
        "closed": division == "closed",
        "debug": False,
        "verbose": False,
        "stream_log_level": "INFO",
        "allow_invalid_params": True,  # the runner runs what the checker calls INVALID
        "what_if": False,
        "hosts": names,
        "model": tree_model(command, model),
        "client_host_memory_in_gb": host_memory_gb,
        "exec_type": "mpi" if mpi_cmd else None,
        "mpi_bin": "mpirun" if mpi_cmd else None,
        "oversubscribe": "--oversubscribe" in mpi_cmd,
        "allow_run_as_root": "--allow-run-as-root" in mpi_cmd,
        "num_client_hosts": len(names) if names is not None else hosts,
        "params": [f"{k}={v}" for k, v in params.items()],
        "dlio_bin_path": str(dlio.parent),
        "num_processes": processes,
    }
    if command == "checkpoint":
        args.update(
            checkpoint_folder=checkpoint_folder,
            num_checkpoints_read=num_checkpoints_read,
            num_checkpoints_write=num_checkpoints_write,
        )
    else:
        args["data_dir"] = data_dir
        args["accelerator_type"] = accelerator
        args["num_accelerators" if command == "run" else "num_processes"] = processes
    return args


def _mpi_version() -> str | None:
    try:
        done = subprocess.run(
            ["mpirun", "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = done.stdout.strip().splitlines()[:1]
    return first[0].replace("mpirun (", "").replace(")", "") if first else None


#: Environment variables that configure Open MPI and PMIx (what the template's
#: ``mpi_configuration.environment_variables`` asks for).
_MPI_ENV_PREFIXES: Final = ("OMPI_MCA_", "PMIX_MCA_", "UCX_")


def system_description(
    host_memory: HostMemory | None,
    hosts: int | Sequence[HostSpec],
    *,
    mpi: bool,
    mpi_args: Sequence[str] = (),
) -> dict[str, Any]:
    """A system description with every key of mlpstorage's template
    (``system_configuration.yaml``), and what a run can know filled in: the client nodes'
    count, memory, CPU model, sockets and logical CPUs, operating system, kernel,
    architecture, the MPI version and its settings (``--mpi-arg`` and ``OMPI_MCA_*``, ``PMIX_MCA_*``,
    ``UCX_*`` variables), and the quantity of their power requirements. What only the
    submitter knows (the storage system, models, rack units, power supplies, networking,
    memory configuration, the OS release date, sysctl settings, power figures) is ``null``
    to be filled in. The template's sample values are not copied."""
    count = len(hosts) if not isinstance(hosts, int) else hosts
    readings = host_memory.hosts if host_memory is not None else ()
    first = readings[0] if readings else None

    def common(field: str) -> Any:  # a value every host shares, else null
        values = {getattr(h, field) for h in readings}
        return values.pop() if len(values) == 1 else None

    sizes = sorted({round(h.memory_gib, 2) for h in readings})
    memory = None if len(sizes) != 1 else f"{sizes[0]:g}GiB"
    settings = [*mpi_args] + [
        f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith(_MPI_ENV_PREFIXES)
    ]
    return {
        "System": {
            "name": None,
            "description": None,
            "type": None,
            "max_sequential_read": None,
            "max_sequential_write": None,
            "max_random_read": None,
            "max_random_write": None,
        },
        "Nodes": {
            "dlio_client": {
                "quantity": count,
                "hardware": {
                    "model": None,
                    "rack_units": None,
                    "power_supplies": None,
                    "psu_configuration": None,
                    "psu_rating": None,
                    "memory_capacity": memory,
                    "memory_configuration": None,
                    "cpu_qty": common("sockets"),
                    "cpu_model": common("cpu_model"),
                    "cpu_cores": common("cpus"),
                },
                "networking": {"management": {"model": None, "speed": None, "qty": None}},
                "operating_system": {
                    "name": first.os_name if first is not None else None,
                    "version": first.os_version if first is not None else None,
                    "release_date": None,
                    "kernel_version": first.kernel if first is not None else None,
                    "cpu_architecture": first.arch if first is not None else None,
                },
                "tuning": {
                    "mpi_configuration": {
                        "environment_variables": settings if mpi else None,
                        "version": _mpi_version() if mpi else None,
                    },
                    "sysctl_parameters": None,
                },
            }
        },
        "PowerRequirements": {
            "dlio_client": {
                "quantity": count,
                "psu1_nameplate_power": None,
                "psu2_nameplate_power": None,
                "psu3_nameplate_power": None,
                "design_power": None,
                "num_active_psus": None,
                "num_passive_psus": None,
            }
        },
    }


def write_run_files(run_dir: Path, meta: Mapping[str, Any], system: Mapping[str, Any]) -> None:
    """Write the system description and the metadata file into ``run_dir``, atomically (the
    caller writes its result file after them, last)."""
    write_text_atomic(run_dir / SYSTEM_DESCRIPTION, dump_yaml(system))
    name = metadata_name(str(meta["benchmark_type"]), str(meta["run_datetime"]))
    write_text_atomic(run_dir / name, json.dumps(meta, indent=2, allow_nan=False) + "\n")


def generates_data(config: Mapping[str, Any]) -> bool:
    """Whether a DLIO workload config (or Hydra's ``config.yaml`` with it under
    ``workload``) generates data and does not train: a datagen."""
    workload = config.get("workload", config)
    workflow = workload.get("workflow") if isinstance(workload, Mapping) else None
    if not isinstance(workflow, Mapping):
        return False
    return bool(workflow.get("generate_data")) and not workflow.get("train", True)


def is_datagen(folder: Path) -> bool:
    """Whether a run folder holds a data generation: this package's ``datagen.json``, a
    metadata file that says so, or DLIO's Hydra record of a config that generates data and
    does not train (:func:`generates_data`)."""
    if (folder / "datagen.json").is_file() or read_metadata(folder).get("command") == "datagen":
        return True
    try:
        config = parse_yaml_text(read_bounded_text(folder / HYDRA_SUBDIR / "config.yaml"))
    except (OSError, ValueError, yaml.YAMLError):
        return False
    return isinstance(config, Mapping) and generates_data(config)


def read_metadata(folder: Path) -> dict[str, Any]:
    """What the metadata file of a run folder says about the run, whichever tool wrote it:
    ``benchmark_type``, ``command`` (``datagen``, ``run``), ``model`` and ``accelerator``
    (``None`` where not said), from the file's own keys or, as mlpstorage 2.0 writes them,
    its ``args`` (``command``, ``model``, ``accelerator_type``); ``{}`` where the folder has
    no readable metadata file."""
    for candidate in sorted(folder.glob(f"*{METADATA_SUFFIX}")):
        try:
            data = load_json_file(candidate)
        except (OSError, ValueError):  # a FIFO, NaN, truncated: no metadata to go by
            continue
        if not isinstance(data, dict):
            continue
        args = data.get("args") if isinstance(data.get("args"), Mapping) else {}

        def said(key: str, arg: str, data: Mapping[str, Any] = data, args: Any = args) -> Any:
            value = data.get(key)
            return value if isinstance(value, str) else args.get(arg)

        return {
            "benchmark_type": data.get("benchmark_type"),
            "command": said("command", "command"),
            "model": said("model", "model"),
            "accelerator": said("accelerator", "accelerator_type"),
        }
    return {}


# ---------------------------------------------------------------------------------------------
# Finding runs


def _is_ours(path: Path, schema_prefix: str) -> bool | None:
    """Whether a JSON file carries this package's schema; ``None`` when it cannot be read as
    JSON at all (truncated, not UTF-8, unreadable), so whose it is cannot be told."""
    try:
        data = load_json_file(path)
    except (OSError, ValueError):
        return None
    return isinstance(data, dict) and str(data.get("schema", "")).startswith(schema_prefix)


def run_kind(folder: Path) -> str | None:
    """What a folder holds for a report: ``"training"`` (this package's ``results.json``),
    ``"checkpoint"`` (``checkpoint-results.json``), ``"dlio"`` (a DLIO training run with
    ``summary.json`` and a ``*_metadata.json``, as mlpstorage leaves it), ``"other"`` (a run
    folder without results: a datagen, a failed or unfinished run) or ``None`` (no run).

    A run folder's ``results.json`` that cannot be read is taken as this package's, damaged,
    so that the report names it rather than reading DLIO's ``summary.json`` in its place;
    a readable one of another schema (what mlpstorage's reportgen writes where it is
    pointed) is not."""
    has_metadata = any(folder.glob(f"*{METADATA_SUFFIX}"))
    results = folder / "results.json"
    # A FIFO or a dangling link named results.json is a damaged result, not an absent one.
    if os.path.lexists(results) and not results.is_dir():
        ours = _is_ours(results, "storage-workloads/dlio-results/")
        run_folder = has_metadata or any(
            (folder / name).is_file() for name in ("run.json", "summary.json")
        )
        if ours or (ours is None and run_folder):
            return "training"
    if (folder / "checkpoint-results.json").is_file():
        return "checkpoint"
    if (folder / "datagen.json").is_file():
        return "other"
    if (folder / "summary.json").is_file() and has_metadata:
        return "dlio"
    if has_metadata or (folder / "run.json").is_file():
        return "other"
    return None


def find_runs(path: str | os.PathLike[str]) -> list[tuple[Path, str]]:
    """The run folders at or below ``path``, with their :func:`run_kind`, in path order. A run
    folder is not searched further (its own subfolders hold DLIO's record, configs and step
    data); symbolic links to folders are not followed."""
    root = Path(path)
    found: list[tuple[Path, str]] = []
    kind = run_kind(root)
    if kind is not None:
        return [(root, kind)]
    for current, dirs, _ in os.walk(root):
        dirs.sort()
        keep = []
        for name in dirs:
            child = Path(current) / name
            kind = run_kind(child)
            if kind is None:
                keep.append(name)
            else:
                found.append((child, kind))
        dirs[:] = keep
    return sorted(found)
