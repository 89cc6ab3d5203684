"""DLIO workload configurations generated from :class:`storage_workloads.Workload`."""

from __future__ import annotations

import numbers
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

import yaml

from storage_workloads._atomic import write_text_atomic
from storage_workloads.sizing import suggested_subfolders
from storage_workloads.workloads import Datagen, Workload

__all__ = [
    "ENGINES",
    "RECORD_LENGTH_KEYS",
    "Engine",
    "dump_yaml",
    "to_datagen_config",
    "to_dlio_config",
    "write_dlio_config",
    "write_yaml",
]

Engine = Literal["dlio", "mlperf-dlio"]

#: ``dataset`` keys for the mean record length and its standard deviation, per engine.
#: Upstream DLIO (the dlio-benchmark package) reads ``record_length``/``record_length_stdev``;
#: the MLPerf Storage forks read ``record_length_bytes``/``record_length_bytes_stdev``. Either
#: engine silently ignores the other's spelling and falls back to its default size.
RECORD_LENGTH_KEYS: Final[dict[str, tuple[str, str]]] = {
    "dlio": ("record_length", "record_length_stdev"),
    "mlperf-dlio": ("record_length_bytes", "record_length_bytes_stdev"),
}
ENGINES: Final = tuple(RECORD_LENGTH_KEYS)


def _dataset_section(
    *,
    format: str,
    num_files: object,
    num_files_given: object,
    num_samples_per_file: int,
    record: int,
    stdev: int,
    data_folder: str | os.PathLike[str],
    num_subfolders: object,
    engine: str,
) -> dict[str, Any]:
    if engine not in RECORD_LENGTH_KEYS:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    folder = os.fspath(data_folder)
    if not isinstance(folder, str) or not folder.strip():
        raise ValueError(f"data_folder must be a non-empty path, got {data_folder!r}")
    if isinstance(num_files, bool) or not isinstance(num_files, numbers.Integral) or num_files < 1:
        raise ValueError(f"num_files must be an integer >= 1, got {num_files_given!r}")
    files = int(num_files)
    subfolders = suggested_subfolders(files) if num_subfolders is None else num_subfolders
    if (
        isinstance(subfolders, bool)
        or not isinstance(subfolders, numbers.Integral)
        or subfolders < 0
    ):
        raise ValueError(f"num_subfolders must be an integer >= 0, got {num_subfolders!r}")
    length_key, stdev_key = RECORD_LENGTH_KEYS[engine]
    dataset: dict[str, Any] = {
        "data_folder": folder,
        "format": format,
        "num_files_train": files,
        "num_samples_per_file": num_samples_per_file,
        length_key: record,
    }
    if stdev:
        dataset[stdev_key] = stdev
    if subfolders:
        dataset["num_subfolders_train"] = int(subfolders)
    return dataset


def to_dlio_config(
    workload: Workload,
    *,
    data_folder: str | os.PathLike[str],
    num_files: int | None = None,
    num_subfolders: int | None = None,
    engine: Engine = "dlio",
    generate_data: bool = False,
    train: bool = True,
) -> dict[str, Any]:
    """The DLIO workload mapping for ``workload``.

    Args:
        data_folder: ``dataset.data_folder``.
        num_files: ``dataset.num_files_train``; ``None`` keeps the workload's reference count
            (use :func:`storage_workloads.required_num_files` for a closed run).
        num_subfolders: ``dataset.num_subfolders_train``; ``None`` applies
            :func:`storage_workloads.suggested_subfolders`; 0 (and a suggestion of 0) leaves
            the key out, a flat folder.
        engine: ``"dlio"`` (upstream) or ``"mlperf-dlio"`` (the MLPerf Storage fork); decides
            the record-length keys (:data:`RECORD_LENGTH_KEYS`).
        generate_data, train: the ``workflow`` flags (data generation vs. the timed run).

    The record-length stdev is written only when it is non-zero; ``reader.read_threads`` only
    when the workload sets it.
    """
    if not isinstance(workload, Workload):
        raise TypeError(f"workload must be a Workload, got {type(workload).__name__}")
    dataset = _dataset_section(
        format=workload.format,
        num_files=workload.num_files_train if num_files is None else num_files,
        num_files_given=num_files,
        num_samples_per_file=workload.num_samples_per_file,
        record=workload.record_length_bytes,
        stdev=workload.record_length_bytes_stdev,
        data_folder=data_folder,
        num_subfolders=num_subfolders,
        engine=engine,
    )
    reader: dict[str, Any] = {
        "data_loader": workload.data_loader,
        "batch_size": workload.batch_size,
    }
    if workload.read_threads is not None:
        reader["read_threads"] = workload.read_threads
    return {
        "model": {"name": workload.model},
        "framework": workload.framework,
        "workflow": {
            "generate_data": bool(generate_data),
            "train": bool(train),
            "checkpoint": False,
        },
        "dataset": dataset,
        "reader": reader,
        "train": {
            "epochs": workload.epochs,
            "computation_time": workload.computation_time_s,
        },
        "metric": {"au": workload.au_threshold},
    }


def to_datagen_config(
    dataset: Workload | Datagen,
    *,
    data_folder: str | os.PathLike[str],
    num_files: int | None = None,
    num_subfolders: int | None = None,
    engine: Engine = "dlio",
) -> dict[str, Any]:
    """The DLIO mapping that generates ``dataset`` (a workload's, or a :class:`Datagen`).

    Sections ``model.name``, ``framework``, ``workflow`` (``generate_data: true``, ``train`` and
    ``checkpoint`` false) and ``dataset``, with the same keys and rules as
    :func:`to_dlio_config`: the engine's record-length spelling, the stdev only when non-zero,
    ``num_subfolders_train`` from :func:`storage_workloads.suggested_subfolders` unless given.
    """
    if isinstance(dataset, Workload):
        dataset = dataset.datagen
    if not isinstance(dataset, Datagen):
        raise TypeError(f"dataset must be a Workload or a Datagen, got {type(dataset).__name__}")
    return {
        "model": {"name": dataset.model},
        "framework": dataset.framework,
        "workflow": {"generate_data": True, "train": False, "checkpoint": False},
        "dataset": _dataset_section(
            format=dataset.format,
            num_files=dataset.num_files_train if num_files is None else num_files,
            num_files_given=num_files,
            num_samples_per_file=dataset.num_samples_per_file,
            record=dataset.record_length_bytes,
            stdev=dataset.record_length_bytes_stdev,
            data_folder=data_folder,
            num_subfolders=num_subfolders,
            engine=engine,
        ),
    }


def dump_yaml(config: Mapping[str, Any]) -> str:
    """``config`` as block-style YAML, keys in their order."""
    return yaml.safe_dump(dict(config), sort_keys=False, default_flow_style=False)


def write_yaml(path: str | os.PathLike[str], config: Mapping[str, Any]) -> Path:
    """Write ``config`` to ``path`` as YAML, atomically (temporary file, fsync, rename)."""
    return write_text_atomic(path, dump_yaml(config))


def write_dlio_config(path: str | os.PathLike[str], workload: Workload, **options: Any) -> Path:
    """Write ``to_dlio_config(workload, **options)`` to ``path`` as YAML, atomically.

    The YAML goes to a temporary file in the same directory, which is flushed, synced and
    renamed over ``path``; a reader never sees a partial file. Returns ``path``.
    """
    return write_yaml(path, to_dlio_config(workload, **options))
