"""DLIO workload configurations generated from :class:`storage_workloads.Workload`."""

from __future__ import annotations

import contextlib
import numbers
import os
import tempfile
from pathlib import Path
from typing import Any, Final, Literal

import yaml

from storage_workloads.sizing import suggested_subfolders
from storage_workloads.workloads import Workload

__all__ = [
    "ENGINES",
    "RECORD_LENGTH_KEYS",
    "Engine",
    "to_dlio_config",
    "write_dlio_config",
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
    if engine not in RECORD_LENGTH_KEYS:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    folder = os.fspath(data_folder)
    if not isinstance(folder, str) or not folder.strip():
        raise ValueError(f"data_folder must be a non-empty path, got {data_folder!r}")
    files = workload.num_files_train if num_files is None else num_files
    if isinstance(files, bool) or not isinstance(files, numbers.Integral) or files < 1:
        raise ValueError(f"num_files must be an integer >= 1, got {num_files!r}")
    files = int(files)
    subfolders = suggested_subfolders(files) if num_subfolders is None else num_subfolders
    if (
        isinstance(subfolders, bool)
        or not isinstance(subfolders, numbers.Integral)
        or subfolders < 0
    ):
        raise ValueError(f"num_subfolders must be an integer >= 0, got {num_subfolders!r}")
    subfolders = int(subfolders)

    length_key, stdev_key = RECORD_LENGTH_KEYS[engine]
    dataset: dict[str, Any] = {
        "data_folder": folder,
        "format": workload.format,
        "num_files_train": files,
        "num_samples_per_file": workload.num_samples_per_file,
        length_key: workload.record_length_bytes,
    }
    if workload.record_length_bytes_stdev:
        dataset[stdev_key] = workload.record_length_bytes_stdev
    if subfolders:
        dataset["num_subfolders_train"] = subfolders
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


def write_dlio_config(path: str | os.PathLike[str], workload: Workload, **options: Any) -> Path:
    """Write ``to_dlio_config(workload, **options)`` to ``path`` as YAML, atomically.

    The YAML goes to a temporary file in the same directory, which is flushed, synced and
    renamed over ``path``; a reader never sees a partial file. Returns ``path``.
    """
    config = to_dlio_config(workload, **options)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(config, sort_keys=False, default_flow_style=False)
    # mkstemp creates the file private (0600); give it the mode of the file it replaces, or
    # the usual 0644 for a new one.
    mode = target.stat().st_mode & 0o777 if target.exists() else 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return target
