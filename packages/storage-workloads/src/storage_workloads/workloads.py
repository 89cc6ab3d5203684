"""MLPerf Storage training workloads: one typed record per (model, accelerator).

The values are those of the official MLPerf Storage DLIO workload configurations
(mlcommons/storage, ``configs/dlio/workload/``): the v2.0 release for unet3d, resnet50 and
cosmoflow on the emulated H100 and A100, the newest published files for dlrm, retinanet and
flux on H100/A100 and for every B200 and MI355 entry (the package's docs/workloads.md names
the version followed for each), and ``hstu_yambda``: the I/O pattern of this repository's DLRMv4 data
path, derived from measurements of yambda-data's sample store and loader.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from storage_workloads.workload_types import (
    COMPRESSIONS,
    DATA_LOADERS,
    FORMATS,
    FRAMEWORKS,
    PARQUET_DTYPES,
    PARQUET_READ_MODES,
    SHUFFLES,
    Datagen,
    ParquetColumn,
    ParquetSchema,
    UnknownWorkloadError,
    Workload,
)

__all__ = [
    "ACCELERATORS",
    "ASSUMED_FIELDS",
    "COMPRESSIONS",
    "DATAGENS",
    "DATA_LOADERS",
    "FORMATS",
    "FRAMEWORKS",
    "MODELS",
    "PARQUET_DTYPES",
    "PARQUET_READ_MODES",
    "SHUFFLES",
    "WORKLOADS",
    "Datagen",
    "ParquetColumn",
    "ParquetSchema",
    "UnknownWorkloadError",
    "Workload",
    "datagen",
    "workload",
]


def _variants(
    model: str,
    computes: Mapping[str, float],
    **fields: Any,
) -> list[Workload]:
    """The variants of one model that differ only in the accelerator's computation time."""
    return [
        Workload(model=model, accelerator=accelerator, computation_time_s=compute, **fields)
        for accelerator, compute in computes.items()
    ]


# ---------------------------------------------------------------------------------------------
# The official MLPerf Storage workloads (mlcommons/storage, configs/dlio/workload/<model>_<acc>).
# unet3d, resnet50, cosmoflow on h100/a100: the v2.0 release (tag v2.0-rc0, branch v2.0-branch;
# the files are the same on both). Everything else: the newest published file found (docs/workloads.md
# names the commit of each). A key an official file does not set is left at None here.

_SHUFFLED: Final[dict[str, Any]] = {"file_shuffle": "seed", "sample_shuffle": "seed"}

_UNET3D: Final[dict[str, Any]] = {
    "framework": "pytorch",
    "data_loader": "pytorch",
    "format": "npz",
    "model_type": "cnn",
    "model_size": 499_153_191,
    "num_samples_per_file": 1,
    "record_length_bytes": 146_600_628,
    "record_length_bytes_stdev": 68_341_808,
    "record_length_bytes_resize": 2_097_152,
    "batch_size": 7,
    "read_threads": 4,
    **_SHUFFLED,
    "checkpoint_after_epoch": 5,
    "epochs_between_checkpoints": 2,
    "au_threshold": 0.90,
    "epochs": 5,
}
_RESNET50: Final[dict[str, Any]] = {
    "framework": "tensorflow",
    "data_loader": "tensorflow",
    "format": "tfrecord",
    "model_type": "cnn",
    "num_files_train": 1024,
    "num_samples_per_file": 1251,
    # The official mean has a fraction; record_length_bytes is it in whole bytes.
    "record_length_bytes": 114_660,
    "record_length_bytes_exact": 114_660.07,
    "record_length_bytes_resize": 150_528,
    "batch_size": 400,
    "read_threads": 8,
    "computation_threads": 8,
    "au_threshold": 0.90,
    "epochs": 5,
}
_COSMOFLOW: Final[dict[str, Any]] = {
    "framework": "tensorflow",
    "data_loader": "tensorflow",
    "format": "tfrecord",
    "num_files_train": 524_288,
    "num_samples_per_file": 1,
    "record_length_bytes": 2_828_486,
    "record_length_bytes_stdev": 71_311,
    "batch_size": 1,
    "read_threads": 4,
    **_SHUFFLED,
    "shuffle_size": 2,
    "au_threshold": 0.70,
    "epochs": 5,
}
_RETINANET: Final[dict[str, Any]] = {
    "framework": "pytorch",
    "data_loader": "pytorch",
    "format": "jpeg",
    "model_type": "cnn",
    "num_samples_per_file": 1,
    "read_threads": 8,
    **_SHUFFLED,
    "workflow_checkpoint": False,
    "au_threshold": 0.85,
}
_DLRM: Final[dict[str, Any]] = {
    "framework": "pytorch",
    "data_loader": "pytorch",
    "workflow_checkpoint": False,
    "au_threshold": 0.70,
    "epochs": 1,
}
_FLUX: Final[dict[str, Any]] = {
    "framework": "pytorch",
    "data_loader": "pytorch",
    "read_threads": 8,
    "workflow_checkpoint": False,
}

# The 200 columns of the parquet dlrm data (dlrm_b200.yaml and dlrm_mi355.yaml carry the same
# list), named feature_000..feature_199. One letter per column, in order: h float16,
# f float32, d float64, b int8. 761 bytes per row, the record length.
_DLRM_PARQUET_TYPES: Final = (
    "hhddfhfbhbffdfbhfffhddddhffhhfdfdfhhdbbbhfhfdbdddffbbfffbfhfdhdbfhbfhfhfhffdhbfdbbffhbhb"
    "fbffhfddfhbhhdhfdhhfdfddbhhbbdfbhhbbbhbbfbhfdhhdhfddhfbbdfdfddbbbddffbfhfhfhdhdhfbdhbdbb"
    "bbhhbdddhdbbhfdbdfdffddh"
)
# The columns the reader reads (``read: true``); every other column is ``read: false``.
_DLRM_PARQUET_READ: Final = frozenset(
    {11, 17, 18, 20, 25, 31, 41, 43, 49, 53, 58, 59, 67, 68, 71, 74, 75, 88, 90, 91}
    | {92, 93, 94, 96, 97, 116, 117, 137, 141, 147, 154, 155, 158, 160, 162, 169, 180, 186}
    | {189, 195}
)
_TYPE_LETTERS: Final = {"h": "float16", "f": "float32", "d": "float64", "b": "int8"}
_DLRM_PARQUET: Final = ParquetSchema(
    row_group_size=6144,
    read_mode="row_group",
    columns=tuple(
        ParquetColumn(
            name=f"feature_{i:03d}", dtype=_TYPE_LETTERS[letter], read=i in _DLRM_PARQUET_READ
        )
        for i, letter in enumerate(_DLRM_PARQUET_TYPES)
    ),
)
# flux (parquet): five float32 columns, 541,208 elements = 2,164,832 bytes per row.
_FLUX_PARQUET: Final = ParquetSchema(
    columns=tuple(
        ParquetColumn(name=name, dtype="float32", size=size)
        for name, size in (
            ("t5_encodings", 524_328),
            ("clip_encodings", 409),
            ("mean", 8_232),
            ("logvar", 8_232),
            ("timestamp", 7),
        )
    )
)
_DLRM_PARQUET_WORKLOAD: Final[dict[str, Any]] = {
    **_DLRM,
    "format": "parquet",
    "compression": "none",
    "parquet": _DLRM_PARQUET,
    "num_files_train": 1024,
    "num_samples_per_file": 4_718_592,
    "record_length_bytes": 761,
    "batch_size": 16_384,
    "prefetch_size": 2,
    "read_threads": 4,
    "file_shuffle": "seed",
}
_FLUX_PARQUET_WORKLOAD: Final[dict[str, Any]] = {
    **_FLUX,
    "format": "parquet",
    "compression": "none",
    "parquet": _FLUX_PARQUET,
    "num_files_train": 4_296,
    "num_samples_per_file": 288,
    "record_length_bytes": 2_164_832,
    "file_shuffle": "seed",
    "au_threshold": 0.90,
    "epochs": 1,
}

# hstu_yambda, derived in docs/workloads.md (section "hstu_yambda") from the
# yambda-data sample-store benchmark in docs/benchmarks.md (bench_store.py, Yambda-50m size,
# cpu-2c): 41,998,451 train anchors; a mean history of 2,326 events per sample at history
# length 4,086; 21.3 store bytes per event; 8,698 samples/s from one loader worker.
HSTU_TRAIN_ANCHORS: Final = 41_998_451
HSTU_MEAN_HISTORY_EVENTS: Final = 2_326
HSTU_STORE_BYTES_PER_EVENT: Final = 21.3
HSTU_LOADER_SAMPLES_PER_S: Final = 8_698
HSTU_SAMPLES_PER_FILE: Final = 128  # one loader work unit: a batch of the benchmark's plan
HSTU_BATCH_SIZE: Final = 1024  # the DLRMv4 reference's batch per rank
HSTU_RECORD_BYTES: Final = round(HSTU_MEAN_HISTORY_EVENTS * HSTU_STORE_BYTES_PER_EVENT)
HSTU_COMPUTATION_TIME_S: Final = round(HSTU_BATCH_SIZE / HSTU_LOADER_SAMPLES_PER_S, 5)

_ALL: Final = [
    # v2.0: unet3d checkpoints during training (workflow.checkpoint true). Later files set it
    # false for h100/a100; this registry follows v2.0 there and the newest file on b200.
    *_variants(
        "unet3d",
        {"h100": 0.323, "a100": 0.636},
        num_files_train=168,
        workflow_checkpoint=True,
        **_UNET3D,
    ),
    Workload(model="resnet50", accelerator="h100", computation_time_s=0.224, **_RESNET50),
    Workload(
        model="resnet50",
        accelerator="a100",
        computation_time_s=0.435,
        dont_use_mmap=True,
        **_RESNET50,
    ),
    *_variants("cosmoflow", {"h100": 0.00350, "a100": 0.00551}, **_COSMOFLOW),
    *_variants(
        "dlrm",
        {"h100": 0.005, "a100": 0.007},
        format="npz",
        num_files_train=65_536,
        num_samples_per_file=1,
        record_length_bytes=512,
        batch_size=8192,
        read_threads=8,
        **_SHUFFLED,
        **_DLRM,
    ),
    *_variants(
        "retinanet",
        {"h100": 0.180, "a100": 0.210},
        num_files_train=1_743_042,
        record_length_bytes=153_600,
        record_length_bytes_stdev=51_200,
        batch_size=16,
        epochs=5,
        **_RETINANET,
    ),
    *_variants(
        "flux",
        {"h100": 0.850, "a100": 1.100},
        format="jpeg",
        num_files_train=1_099_776,
        num_samples_per_file=1,
        record_length_bytes=307_200,
        record_length_bytes_stdev=102_400,
        batch_size=8,
        **_SHUFFLED,
        au_threshold=0.80,
        epochs=5,
        **_FLUX,
    ),
    # MLPerf Storage v3.0 generation: B200 and MI355.
    *_variants(
        "unet3d", {"b200": 0.162}, num_files_train=7_200, workflow_checkpoint=False, **_UNET3D
    ),
    Workload(
        model="retinanet",
        accelerator="b200",
        num_files_train=1_170_301,
        record_length_bytes=322_957,
        batch_size=24,
        computation_time_s=0.04755,
        epochs=8,
        **_RETINANET,
    ),
    Workload(
        model="retinanet",
        accelerator="mi355",
        num_files_train=1_170_301,
        record_length_bytes=322_957,
        batch_size=32,
        computation_time_s=0.0634,
        epochs=8,
        **_RETINANET,
    ),
    # dlrm mi355: the stored versions of dlrm_mi355.yaml differ in the batch size (16,384 and
    # 18,432); this follows the one with 16,384, the same as b200 (see docs/workloads.md).
    *_variants("dlrm", {"b200": 0.000375, "mi355": 0.0005625}, **_DLRM_PARQUET_WORKLOAD),
    Workload(
        model="flux",
        accelerator="b200",
        batch_size=48,
        computation_time_s=1.35,
        **_FLUX_PARQUET_WORKLOAD,
    ),
    Workload(
        model="flux",
        accelerator="mi355",
        batch_size=72,
        computation_time_s=2.025,
        **_FLUX_PARQUET_WORKLOAD,
    ),
    # This repository's DLRMv4 data path (docs/workloads.md derives every number).
    Workload(
        model="hstu_yambda",
        accelerator="any",
        framework="pytorch",
        data_loader="pytorch",
        format="npz",
        num_files_train=-(-HSTU_TRAIN_ANCHORS // HSTU_SAMPLES_PER_FILE),
        num_samples_per_file=HSTU_SAMPLES_PER_FILE,
        record_length_bytes=HSTU_RECORD_BYTES,
        batch_size=HSTU_BATCH_SIZE,
        read_threads=2,
        computation_time_s=HSTU_COMPUTATION_TIME_S,
        au_threshold=0.90,
        epochs=1,
    ),
]

#: Fields of an entry that no official file gives, with what this registry does instead.
#: Every MLPerf entry now follows an official file key for key, so only the derived
#: ``hstu_yambda`` workload has assumed fields.
ASSUMED_FIELDS: Final[Mapping[tuple[str, str], Mapping[str, str]]] = MappingProxyType(
    {
        ("hstu_yambda", "any"): MappingProxyType(
            {
                "record_length_bytes_stdev": "not measured: 0 (fixed size)",
                "au_threshold": "a choice, as for unet3d and resnet50",
            }
        ),
    }
)

#: Every known workload, keyed by ``(model, accelerator)``. Read-only.
WORKLOADS: Final[Mapping[tuple[str, str], Workload]] = MappingProxyType({w.key: w for w in _ALL})
#: Known model names, in registry order.
MODELS: Final = tuple(dict.fromkeys(model for model, _ in WORKLOADS))
#: Known accelerator names, in registry order.
ACCELERATORS: Final = tuple(dict.fromkeys(accelerator for _, accelerator in WORKLOADS))


def _datagens() -> dict[str, Datagen]:
    """One entry per distinct file shape (everything but the file count) of each model."""
    found: dict[str, Datagen] = {}
    for w in _ALL:
        shape = dataclasses.replace(w.datagen, num_files_train=1)
        if any(dataclasses.replace(d, num_files_train=1) == shape for d in found.values()):
            continue
        found[w.model if w.model not in found else f"{w.model}_{w.accelerator}"] = w.datagen
    return found


#: One :class:`Datagen` per distinct file shape, keyed by model name, or by
#: ``model_accelerator`` where an accelerator's workload reads differently shaped files
#: (``retinanet_b200``, which mi355 shares; ``dlrm_b200`` and ``flux_b200``, likewise).
#: Workloads that differ only in the file count share an entry (unet3d b200 reads unet3d
#: files); the file count here is the first workload's reference count. ``Workload.datagen``
#: gives a workload's own.
DATAGENS: Final[Mapping[str, Datagen]] = MappingProxyType(_datagens())


def workload(model: str, accelerator: str) -> Workload:
    """Look up a workload; names are matched case-insensitively.

    Raises :class:`UnknownWorkloadError` (a ``KeyError``) naming the unknown model or accelerator and listing the known ones.
    """
    m = str(model).strip().lower()
    a = str(accelerator).strip().lower()
    if m not in MODELS:
        raise UnknownWorkloadError(f"unknown model {model!r}; known models: {', '.join(MODELS)}")
    if a not in ACCELERATORS:
        raise UnknownWorkloadError(
            f"unknown accelerator {accelerator!r}; known accelerators: {', '.join(ACCELERATORS)}"
        )
    try:
        return WORKLOADS[(m, a)]
    except KeyError:
        have = ", ".join(acc for mod, acc in WORKLOADS if mod == m)
        raise UnknownWorkloadError(
            f"no {m} workload for accelerator {a!r}; {m} is defined for: {have}"
        ) from None


def datagen(name: str, accelerator: str | None = None) -> Datagen:
    """The dataset definition ``name`` (a key of :data:`DATAGENS`, case-insensitive).

    With ``accelerator``, the dataset that workload ``(name, accelerator)`` reads, so
    ``datagen("retinanet", "mi355")`` is ``DATAGENS["retinanet_b200"]``. Raises
    :class:`UnknownWorkloadError` naming the unknown name and listing the known ones.
    """
    if accelerator is not None:
        return workload(name, accelerator).datagen
    key = str(name).strip().lower()
    try:
        return DATAGENS[key]
    except KeyError:
        raise UnknownWorkloadError(
            f"unknown dataset {name!r}; known datasets: {', '.join(DATAGENS)}"
        ) from None
