"""DLIO workload configurations generated from :class:`storage_workloads.Workload`.

With ``engine="mlperf-dlio"`` the emitted mappings equal the official MLPerf Storage workload
files key for key (see ``tests/test_official_configs.py``). What an engine needs beyond the
file is added, never substituted: ``engine="dlio"`` (dlio-benchmark 2.0.0) repeats each
record-length key in the spelling it reads and the unet3d model size where it reads it, and a
parquet workload names the parquet reader of the DLIO extensions (no DLIO 2.0 reads parquet),
so that a run's config, as its Hydra record keeps it, carries every key the official file has
and mlpstorage reads.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

import yaml

from storage_workloads._atomic import write_text_atomic
from storage_workloads.dlio_ext import PARQUET_READER
from storage_workloads.sizing import suggested_subfolders
from storage_workloads.workloads import Datagen, Workload

__all__ = [
    "ENGINES",
    "ENGINE_NAMES",
    "RECORD_LENGTH_KEYS",
    "RECORD_RESIZE_KEYS",
    "UPSTREAM_SPELLINGS",
    "Engine",
    "dump_yaml",
    "published_data_folder",
    "to_datagen_config",
    "to_dlio_config",
    "with_spellings",
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
#: ``dataset`` key of the record resize, per engine (same split as the record length).
RECORD_RESIZE_KEYS: Final[dict[str, str]] = {
    "dlio": "record_length_resize",
    "mlperf-dlio": "record_length_bytes_resize",
}
ENGINES: Final = tuple(RECORD_LENGTH_KEYS)
#: Each engine in words, for messages.
ENGINE_NAMES: Final = {"dlio": "dlio-benchmark 2.0.0", "mlperf-dlio": "the MLPerf DLIO fork"}
#: The record-length keys of the official files (the MLPerf spelling), in their order.
_OFFICIAL_LENGTH_KEYS: Final = (
    "record_length_bytes",
    "record_length_bytes_stdev",
    "record_length_bytes_resize",
)
#: The official record-length keys (dotted) and dlio-benchmark 2.0.0's spelling of each.
UPSTREAM_SPELLINGS: Final[Mapping[str, str]] = {
    f"dataset.{key}": f"dataset.{key.replace('_bytes', '')}" for key in _OFFICIAL_LENGTH_KEYS
}
#: The data folders of the published files, where they are not ``data/<model>/``.
_PUBLISHED_DATA_FOLDERS: Final = {"resnet50": "data/resnet50", "cosmoflow": "data/cosmoflow"}


def published_data_folder(model: str) -> str:
    """``dataset.data_folder`` as the published workload files of ``model`` set it (a run
    overrides it with its data directory)."""
    return _PUBLISHED_DATA_FOLDERS.get(model, f"data/{model}/")


def with_spellings(params: Mapping[str, Any], engine: str) -> dict[str, Any]:
    """``params`` (dotted) as a run of ``engine`` sets them: for ``"dlio"``, whose config
    carries each record-length key in both spellings, a record length set in either spelling
    is set in both, so that the two never disagree."""
    out = dict(params)
    if _check_engine(engine) == "dlio":
        for official, upstream in UPSTREAM_SPELLINGS.items():
            for key, twin in ((official, upstream), (upstream, official)):
                if key in params and twin not in params:
                    out[twin] = params[key]
    return out


def _check_engine(engine: object) -> str:
    if engine not in RECORD_LENGTH_KEYS:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    return str(engine)


def _path(name: str, value: object) -> str:
    try:
        text = os.fspath(value)  # type: ignore[arg-type]
    except TypeError:
        text = None
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{name} must be a non-empty path, got {value!r}")
    return text


def _model_section(d: Datagen) -> dict[str, Any]:
    """``model``: the name, and ``type``/``model_size`` where the official file sets them."""
    model: dict[str, Any] = {"name": d.model}
    if d.model_type is not None:
        model["type"] = d.model_type
    if d.model_size is not None:
        model["model_size"] = d.model_size
    return model


def _dataset_section(
    d: Datagen,
    *,
    num_files: object,
    num_files_given: object,
    data_folder: object,
    num_subfolders: object,
    engine: str,
) -> dict[str, Any]:
    folder = _path("data_folder", data_folder)
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
    # The official mean where it has a fraction (resnet50), else the whole bytes.
    exact = d.record_length_bytes_exact
    lengths = (
        d.record_length_bytes if exact is None else exact,
        d.record_length_bytes_stdev,
        d.record_length_bytes_resize,
    )
    dataset: dict[str, Any] = {"data_folder": folder, "format": d.format}
    if d.compression is not None:
        dataset["compression"] = d.compression
    dataset["num_files_train"] = files
    dataset["num_samples_per_file"] = d.num_samples_per_file
    for i, (key, value) in enumerate(zip(_OFFICIAL_LENGTH_KEYS, lengths, strict=True)):
        if i == 0 or value:  # the stdev and resize only where the file sets them
            dataset[key] = value
            if engine == "dlio":  # and in the spelling dlio-benchmark 2.0.0 reads
                dataset[key.replace("_bytes", "")] = value
    if subfolders:
        dataset["num_subfolders_train"] = int(subfolders)
    if d.parquet is not None:
        dataset["parquet"] = d.parquet.as_dict()
    return dataset


def _reader_section(w: Workload) -> dict[str, Any]:
    reader: dict[str, Any] = {"data_loader": w.data_loader, "batch_size": w.batch_size}
    if w.format == "parquet":
        reader["reader_classname"] = PARQUET_READER
    for key in (
        "prefetch_size",
        "read_threads",
        "computation_threads",
        "file_shuffle",
        "sample_shuffle",
        "shuffle_size",
        "dont_use_mmap",
    ):
        value = getattr(w, key)
        if value is not None:
            reader[key] = value
    return reader


def to_dlio_config(
    workload: Workload,
    *,
    data_folder: str | os.PathLike[str],
    num_files: int | None = None,
    num_subfolders: int | None = None,
    engine: Engine = "dlio",
    generate_data: bool = False,
    train: bool = True,
    checkpoint_folder: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """The DLIO workload mapping for ``workload``, key for key the official MLPerf Storage file.

    Args:
        data_folder: ``dataset.data_folder``.
        num_files: ``dataset.num_files_train``; ``None`` keeps the workload's reference count
            (use :func:`storage_workloads.required_num_files` for a closed run).
        num_subfolders: ``dataset.num_subfolders_train``; ``None`` applies
            :func:`storage_workloads.suggested_subfolders`; 0 (and a suggestion of 0) leaves
            the key out, a flat folder.
        engine: ``"mlperf-dlio"`` (the MLPerf Storage fork): the official file's keys;
            ``"dlio"`` (dlio-benchmark 2.0.0): the same keys, plus each record-length key in
            the upstream spelling (:data:`RECORD_LENGTH_KEYS`, :data:`RECORD_RESIZE_KEYS`) and
            ``checkpoint.model_size`` (where dlio-benchmark 2.0.0 reads the model size).
        generate_data, train: the ``workflow`` flags (data generation vs. the timed run).
            ``workflow.checkpoint`` is the workload's own for a training run (left out where
            the official file leaves it out) and false otherwise.
        checkpoint_folder: ``checkpoint.checkpoint_folder`` for a workload with a
            ``checkpoint`` section (unet3d); ``None`` gives the official
            ``checkpoints/<model>``. Ignored for other workloads.

    A key the workload leaves at ``None`` is not written (DLIO's default applies), as in the
    official file. No DLIO 2.0 has a parquet format of its own: the package's DLIO extension
    (`storage_workloads.dlio_ext`, started by `storage_workloads.dlio.launch`) supplies the
    parquet generator and reader, which a parquet workload names in
    ``reader.reader_classname``, so both engines run the parquet workloads.
    """
    if not isinstance(workload, Workload):
        raise TypeError(f"workload must be a Workload, got {type(workload).__name__}")
    engine = _check_engine(engine)  # type: ignore[assignment]
    dataset = _dataset_section(
        workload.datagen,
        num_files=workload.num_files_train if num_files is None else num_files,
        num_files_given=num_files,
        data_folder=data_folder,
        num_subfolders=num_subfolders,
        engine=engine,
    )
    workflow: dict[str, Any] = {"generate_data": bool(generate_data), "train": bool(train)}
    if not train:
        workflow["checkpoint"] = False
    elif workload.workflow_checkpoint is not None:
        workflow["checkpoint"] = workload.workflow_checkpoint
    config: dict[str, Any] = {
        "model": _model_section(workload.datagen),
        "framework": workload.framework,
        "workflow": workflow,
        "dataset": dataset,
        "reader": _reader_section(workload),
        "train": {
            "epochs": workload.epochs,
            "computation_time": workload.computation_time_s,
        },
    }
    if workload.has_checkpoint_section:
        folder = (
            f"checkpoints/{workload.model}"
            if checkpoint_folder is None
            else _path("checkpoint_folder", checkpoint_folder)
        )
        checkpoint: dict[str, Any] = {
            "checkpoint_folder": folder,
            "checkpoint_after_epoch": workload.checkpoint_after_epoch,
            "epochs_between_checkpoints": workload.epochs_between_checkpoints,
        }
        if engine == "dlio" and workload.model_size is not None:
            checkpoint["model_size"] = workload.model_size
        config["checkpoint"] = checkpoint
    config["metric"] = {"au": workload.au_threshold}
    return config


def to_datagen_config(
    dataset: Workload | Datagen,
    *,
    data_folder: str | os.PathLike[str],
    num_files: int | None = None,
    num_subfolders: int | None = None,
    engine: Engine = "dlio",
) -> dict[str, Any]:
    """The DLIO mapping that generates ``dataset`` (a workload's, or a :class:`Datagen`).

    Sections ``model`` (name, and ``type``/``model_size`` where the official file sets them),
    ``framework``, ``workflow`` (``generate_data: true``, ``train`` and ``checkpoint`` false)
    and ``dataset``, with the same keys and rules as :func:`to_dlio_config`: the engine's
    record-length spelling, the stdev and resize only when non-zero, the compression and
    parquet schema where set, ``num_subfolders_train`` from
    :func:`storage_workloads.suggested_subfolders` unless given.
    """
    if isinstance(dataset, Workload):
        dataset = dataset.datagen
    if not isinstance(dataset, Datagen):
        raise TypeError(f"dataset must be a Workload or a Datagen, got {type(dataset).__name__}")
    engine = _check_engine(engine)  # type: ignore[assignment]
    return {
        "model": _model_section(dataset),
        "framework": dataset.framework,
        "workflow": {"generate_data": True, "train": False, "checkpoint": False},
        "dataset": _dataset_section(
            dataset,
            num_files=dataset.num_files_train if num_files is None else num_files,
            num_files_given=num_files,
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
