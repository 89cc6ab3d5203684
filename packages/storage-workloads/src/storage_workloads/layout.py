"""The results layout of the MLPerf Storage tool (mlpstorage), so that a run of this package
and one of mlpstorage can be read by either tool.

Facts of mlcommons/storage that this module relies on (read from its mlpstorage code: v2.0
``mlpstorage/`` at caa90c9 and the newer ``mlpstorage_py/``; the package README lists them):

- A results tree is ``ROOT/<benchmark type>/<model>/<command>/<datetime>/`` for training
  (``training/unet3d/run/20250115_143022``; the commands ``datagen`` and ``run``) and
  ``ROOT/checkpointing/<model>/<datetime>/`` for checkpointing, whose model names use a hyphen
  (``llama3-8b``). The datetime is the local start time as ``%Y%m%d_%H%M%S``.
- A run folder holds one ``<benchmark type>_<datetime>_metadata.json``, DLIO's
  ``summary.json`` (and its other output) and DLIO's Hydra record in ``dlio_config/``
  (``config.yaml``, ``overrides.yaml``, ``hydra.yaml``). mlpstorage's report generator walks a
  tree and takes every folder with ``summary.json`` or exactly one ``*_metadata.json`` as a
  run; a metadata file with ``benchmark_type``, ``run_datetime``, ``num_processes`` and
  ``parameters`` (the workload config) describes the run by itself, and ``model``,
  ``command``, ``accelerator``, ``override_parameters``, ``args`` and
  ``cluster_information`` (``total_memory_bytes``, ``num_hosts``, ``hosts`` with a
  ``hostname`` and ``meminfo.MemTotal`` in kB each) are read where present.
- The system description is a YAML file per system (``systems/<system-name>.yaml`` of a
  submission) with the sections ``System``, ``Nodes`` and ``PowerRequirements`` of the
  template ``system_configuration.yaml``.

The code here is this package's own.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from storage_workloads._atomic import write_text_atomic
from storage_workloads.dlio import dump_yaml
from storage_workloads.hosts import HostMemory, HostSpec, format_hosts

__all__ = [
    "DATETIME_FORMAT",
    "HYDRA_SUBDIR",
    "METADATA_SUFFIX",
    "SYSTEM_DESCRIPTION",
    "TREE_TYPES",
    "find_runs",
    "metadata",
    "metadata_name",
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
            }
            for h in memory.hosts
        ],
    }


def metadata(
    *,
    command: str,
    model: str,
    stamp: str,
    processes: int,
    parameters: Mapping[str, Any],
    override_parameters: Mapping[str, Any],
    args: Mapping[str, Any],
    accelerator: str | None = None,
    host_memory: HostMemory | None = None,
    end: str | None = None,
    runtime_s: float | None = None,
    result_file: str | None = None,
) -> dict[str, Any]:
    """The metadata mapping of a run folder, in the keys mlpstorage reads (module docstring)
    plus ``storage_workloads`` (this package's schema and the files of the run)."""
    data: dict[str, Any] = {
        "benchmark_type": TREE_TYPES[command],
        "model": tree_model(command, model),
        "command": "run" if command == "checkpoint" else command,
        "run_datetime": stamp,
        "num_processes": processes,
        "parameters": dict(parameters),
        "override_parameters": dict(override_parameters),
        "args": dict(args),
    }
    if accelerator is not None:
        data["accelerator"] = accelerator
    cluster = _cluster_information(host_memory)
    if cluster is not None:
        data["cluster_information"] = cluster
    if end is not None:
        data["end_datetime"] = end
    if runtime_s is not None:
        data["runtime"] = runtime_s
    data["storage_workloads"] = {
        "schema": _METADATA_SCHEMA,
        "command": command,
        "run_record": "run.json",
        "result": result_file,
    }
    return data


def _mpi_version() -> str | None:
    try:
        done = subprocess.run(
            ["mpirun", "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = done.stdout.strip().splitlines()[:1]
    return first[0].replace("mpirun (", "").replace(")", "") if first else None


def system_description(
    host_memory: HostMemory | None, hosts: int | Sequence[HostSpec], *, mpi: bool
) -> dict[str, Any]:
    """A system description in the sections of mlpstorage's template, with what a run can read
    filled in: the client nodes (count, memory, CPUs, operating system, MPI version) and each
    client host as read. What only the submitter knows (the storage system, models, power) is
    left empty (``null``) to be filled in."""
    count = len(hosts) if not isinstance(hosts, int) else hosts
    readings = host_memory.hosts if host_memory is not None else ()
    first = readings[0] if readings else None
    sizes = sorted({round(h.memory_gib, 2) for h in readings})
    memory = (
        None
        if not sizes
        else f"{sizes[0]:g}GiB"
        if len(sizes) == 1
        else [f"{s:g}GiB" for s in sizes]
    )
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
                    "memory_capacity": memory,
                    "cpu_model": None,
                    "cpu_cores": first.cpus if first is not None else None,
                },
                "operating_system": {
                    "name": first.os_name if first is not None else None,
                    "version": first.os_version if first is not None else None,
                    "kernel_version": first.kernel if first is not None else None,
                    "cpu_architecture": first.arch if first is not None else None,
                },
                "tuning": {"mpi_configuration": {"version": _mpi_version() if mpi else None}},
                "measured_hosts": [
                    {
                        "host": h.host,
                        "hostname": h.hostname,
                        "slots": h.slots,
                        "memory_gib": round(h.memory_gib, 3),
                        "cpus": h.cpus,
                    }
                    for h in readings
                ],
                "host_list": None if isinstance(hosts, int) else format_hosts(hosts),
            }
        },
        "PowerRequirements": None,
    }


def write_run_files(run_dir: Path, meta: Mapping[str, Any], system: Mapping[str, Any]) -> None:
    """Write the system description and the metadata file into ``run_dir``, atomically (the
    caller writes its result file after them, last)."""
    write_text_atomic(run_dir / SYSTEM_DESCRIPTION, dump_yaml(system))
    name = metadata_name(str(meta["benchmark_type"]), str(meta["run_datetime"]))
    write_text_atomic(run_dir / name, json.dumps(meta, indent=2, allow_nan=False) + "\n")


# ---------------------------------------------------------------------------------------------
# Finding runs


def _is_ours(path: Path, schema_prefix: str) -> bool:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and str(data.get("schema", "")).startswith(schema_prefix)


def run_kind(folder: Path) -> str | None:
    """What a folder holds for a report: ``"training"`` (this package's ``results.json``),
    ``"checkpoint"`` (``checkpoint-results.json``), ``"dlio"`` (a DLIO training run with
    ``summary.json`` and a ``*_metadata.json``, as mlpstorage leaves it), ``"other"`` (a run
    folder without results: a datagen, a failed or unfinished run) or ``None`` (no run)."""
    if (folder / "results.json").is_file() and _is_ours(
        folder / "results.json", "storage-workloads/dlio-results/"
    ):
        return "training"
    if (folder / "checkpoint-results.json").is_file():
        return "checkpoint"
    if (folder / "datagen.json").is_file():
        return "other"
    has_metadata = any(folder.glob(f"*{METADATA_SUFFIX}"))
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
