"""MLPerf Storage training workloads: one typed record per (model, accelerator).

The values are those of the MLPerf Storage DLIO workload configurations (v2.0/v3.0) for the
emulated H100 and A100 accelerators, the v3.0 B200 and MI355 entries whose parameters are
public, and ``hstu_yambda``: the I/O pattern of this repository's DLRMv4 data path, derived from
measurements of yambda-data's sample store and loader (see the package README).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

__all__ = [
    "ACCELERATORS",
    "ASSUMED_FIELDS",
    "DATAGENS",
    "DATA_LOADERS",
    "FORMATS",
    "FRAMEWORKS",
    "MODELS",
    "WORKLOADS",
    "Datagen",
    "UnknownWorkloadError",
    "Workload",
    "datagen",
    "workload",
]

#: Dataset formats DLIO can generate and read.
FORMATS: Final = frozenset(
    {"npz", "npy", "tfrecord", "hdf5", "csv", "jpeg", "png", "parquet", "indexed_binary"}
)
#: DLIO ``framework`` values.
FRAMEWORKS: Final = frozenset({"pytorch", "tensorflow"})
#: DLIO ``reader.data_loader`` values.
DATA_LOADERS: Final = frozenset({"pytorch", "tensorflow", "dali", "native_dali"})


class UnknownWorkloadError(KeyError):
    """No workload of that model or accelerator; the message lists the known ones."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0]) if self.args else ""


def _int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"Workload.{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"Workload.{name} must be >= {minimum}, got {value}")


def _text(name: str, value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"Workload.{name} must be a non-empty string, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class Workload:
    """One MLPerf Storage training workload as DLIO emulates it.

    Attributes:
        model: workload name (``unet3d``, ``resnet50``, ...), lower case.
        accelerator: emulated accelerator (``h100``, ``a100``), lower case.
        framework: DLIO ``framework`` (``pytorch`` or ``tensorflow``).
        data_loader: DLIO ``reader.data_loader``.
        format: DLIO ``dataset.format`` (``npz``, ``tfrecord``, ``jpeg``, ...).
        num_files_train: files in the reference dataset (the closed division resizes it, see
            :func:`storage_workloads.required_num_files`).
        num_samples_per_file: samples in each file.
        record_length_bytes: mean bytes per sample.
        record_length_bytes_stdev: standard deviation of the sample size (0: fixed size).
        batch_size: samples per step and accelerator.
        read_threads: DLIO ``reader.read_threads``; ``None`` leaves DLIO's default.
        computation_time_s: emulated accelerator time per step, in seconds.
        au_threshold: accelerator utilisation (0..1] a run must sustain to be valid.
        epochs: training epochs.
    """

    model: str
    accelerator: str
    framework: str
    data_loader: str
    format: str
    num_files_train: int
    num_samples_per_file: int
    record_length_bytes: int
    record_length_bytes_stdev: int = 0
    batch_size: int
    read_threads: int | None
    computation_time_s: float
    au_threshold: float
    epochs: int

    def __post_init__(self) -> None:
        _text("model", self.model)
        _text("accelerator", self.accelerator)
        if self.model != self.model.lower():
            raise ValueError(f"Workload.model must be lower case, got {self.model!r}")
        if self.accelerator != self.accelerator.lower():
            raise ValueError(f"Workload.accelerator must be lower case, got {self.accelerator!r}")
        if self.framework not in FRAMEWORKS:
            raise ValueError(
                f"Workload.framework must be one of {sorted(FRAMEWORKS)}, got {self.framework!r}"
            )
        if self.data_loader not in DATA_LOADERS:
            raise ValueError(
                f"Workload.data_loader must be one of {sorted(DATA_LOADERS)}, "
                f"got {self.data_loader!r}"
            )
        if self.format not in FORMATS:
            raise ValueError(
                f"Workload.format must be one of {sorted(FORMATS)}, got {self.format!r}"
            )
        _int("num_files_train", self.num_files_train, 1)
        _int("num_samples_per_file", self.num_samples_per_file, 1)
        _int("record_length_bytes", self.record_length_bytes, 1)
        _int("record_length_bytes_stdev", self.record_length_bytes_stdev, 0)
        _int("batch_size", self.batch_size, 1)
        if self.read_threads is not None:
            _int("read_threads", self.read_threads, 0)
        _int("epochs", self.epochs, 1)
        for name in ("computation_time_s", "au_threshold"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"Workload.{name} must be a number, got {value!r}")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"Workload.{name} must be finite and > 0, got {value}")
        if self.au_threshold > 1:
            raise ValueError(f"Workload.au_threshold must be <= 1, got {self.au_threshold}")

    @property
    def key(self) -> tuple[str, str]:
        """``(model, accelerator)``: the workload's key in :data:`WORKLOADS`."""
        return (self.model, self.accelerator)

    @property
    def dataset_bytes(self) -> int:
        """Mean size of the reference dataset in bytes."""
        return self.num_files_train * self.num_samples_per_file * self.record_length_bytes

    @property
    def datagen(self) -> Datagen:
        """What DLIO's ``generate_data`` step needs to write this workload's dataset."""
        return Datagen(
            model=self.model,
            framework=self.framework,
            format=self.format,
            num_files_train=self.num_files_train,
            num_samples_per_file=self.num_samples_per_file,
            record_length_bytes=self.record_length_bytes,
            record_length_bytes_stdev=self.record_length_bytes_stdev,
        )


@dataclass(frozen=True, kw_only=True)
class Datagen:
    """The dataset DLIO's ``generate_data`` step writes for a workload.

    Only the shape of the data: the framework (DLIO picks the writer by format and, for
    tfrecord, needs TensorFlow), the format, the file and sample counts and the sample size.
    Every workload of a model that reads the same files shares one ``Datagen``; see
    :data:`DATAGENS`.

    Attributes:
        model: workload name the dataset belongs to.
        framework: DLIO ``framework`` for the generation run.
        format: DLIO ``dataset.format``.
        num_files_train: files of the reference dataset (resize with
            :func:`storage_workloads.required_num_files`).
        num_samples_per_file: samples in each file.
        record_length_bytes: mean bytes per sample.
        record_length_bytes_stdev: standard deviation of the sample size (0: fixed size).
    """

    model: str
    framework: str
    format: str
    num_files_train: int
    num_samples_per_file: int
    record_length_bytes: int
    record_length_bytes_stdev: int = 0

    def __post_init__(self) -> None:
        _text("model", self.model)
        if self.framework not in FRAMEWORKS:
            raise ValueError(
                f"Datagen.framework must be one of {sorted(FRAMEWORKS)}, got {self.framework!r}"
            )
        if self.format not in FORMATS:
            raise ValueError(
                f"Datagen.format must be one of {sorted(FORMATS)}, got {self.format!r}"
            )
        for name in ("num_files_train", "num_samples_per_file", "record_length_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"Datagen.{name} must be an integer >= 1, got {value!r}")
        stdev = self.record_length_bytes_stdev
        if isinstance(stdev, bool) or not isinstance(stdev, numbers.Integral) or stdev < 0:
            raise ValueError(
                f"Datagen.record_length_bytes_stdev must be an integer >= 0, got {stdev!r}"
            )

    @property
    def file_bytes(self) -> int:
        """Mean bytes of sample data in one file (``samples_per_file * record_length``)."""
        return self.num_samples_per_file * self.record_length_bytes

    @property
    def dataset_bytes(self) -> int:
        """Mean bytes of sample data in the reference dataset."""
        return self.num_files_train * self.file_bytes


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


_UNET3D: Final[dict[str, Any]] = {
    "framework": "pytorch",
    "data_loader": "pytorch",
    "format": "npz",
    "num_samples_per_file": 1,
    "record_length_bytes": 146_600_628,
    "record_length_bytes_stdev": 68_341_808,
    "batch_size": 7,
    "read_threads": 4,
    "au_threshold": 0.90,
    "epochs": 5,
}
_RETINANET: Final[dict[str, Any]] = {
    "framework": "pytorch",
    "data_loader": "pytorch",
    "format": "jpeg",
    "num_samples_per_file": 1,
    "au_threshold": 0.85,
}
_DLRM: Final[dict[str, Any]] = {
    "framework": "pytorch",
    "data_loader": "pytorch",
    "read_threads": 8,
    "au_threshold": 0.70,
    "epochs": 1,
}
_FLUX: Final[dict[str, Any]] = {
    "framework": "pytorch",
    "data_loader": "pytorch",
    "read_threads": None,
}

# hstu_yambda, derived in the README ("hstu_yambda: how the numbers were derived") from the
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
    *_variants("unet3d", {"h100": 0.323, "a100": 0.636}, num_files_train=168, **_UNET3D),
    *_variants(
        "resnet50",
        {"h100": 0.224, "a100": 0.435},
        framework="tensorflow",
        data_loader="tensorflow",
        format="tfrecord",
        num_files_train=1024,
        num_samples_per_file=1251,
        record_length_bytes=114_660,
        batch_size=400,
        read_threads=8,
        au_threshold=0.90,
        epochs=5,
    ),
    *_variants(
        "cosmoflow",
        {"h100": 0.00350, "a100": 0.00551},
        framework="tensorflow",
        data_loader="tensorflow",
        format="tfrecord",
        num_files_train=524_288,
        num_samples_per_file=1,
        record_length_bytes=2_828_486,
        record_length_bytes_stdev=71_311,
        batch_size=1,
        read_threads=4,
        au_threshold=0.70,
        epochs=5,
    ),
    *_variants(
        "dlrm",
        {"h100": 0.005, "a100": 0.007},
        format="npz",
        num_files_train=65_536,
        num_samples_per_file=1,
        record_length_bytes=512,
        batch_size=8192,
        **_DLRM,
    ),
    *_variants(
        "retinanet",
        {"h100": 0.180, "a100": 0.210},
        num_files_train=1_743_042,
        record_length_bytes=153_600,
        record_length_bytes_stdev=51_200,
        batch_size=16,
        read_threads=8,
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
        au_threshold=0.80,
        epochs=5,
        **_FLUX,
    ),
    # MLPerf Storage v3.0, B200 and MI355: only the values facts.md gives (see ASSUMED_FIELDS).
    *_variants("unet3d", {"b200": 0.162}, num_files_train=7_200, **_UNET3D),
    Workload(
        model="retinanet",
        accelerator="b200",
        num_files_train=1_170_301,
        record_length_bytes=322_957,
        batch_size=24,
        read_threads=None,
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
        read_threads=None,
        computation_time_s=0.0634,
        epochs=8,
        **_RETINANET,
    ),
    Workload(
        model="dlrm",
        accelerator="b200",
        format="parquet",
        num_files_train=1024,
        num_samples_per_file=4_718_592,
        record_length_bytes=761,
        batch_size=16_384,
        computation_time_s=0.000375,
        **_DLRM,
    ),
    Workload(
        model="flux",
        accelerator="b200",
        format="parquet",
        num_files_train=4_296,
        num_samples_per_file=288,
        record_length_bytes=2_164_832,
        batch_size=48,
        computation_time_s=1.35,
        au_threshold=0.90,
        epochs=1,
        **_FLUX,
    ),
    # This repository's DLRMv4 data path (the README derives every number).
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

#: Fields of an entry that its public source does not give, with what this registry does
#: instead. facts.md gives the v3.0 B200/MI355 entries only partly; the rest is either
#: carried over from the model's H100/A100 definition or left to DLIO's default.
ASSUMED_FIELDS: Final[Mapping[tuple[str, str], Mapping[str, str]]] = MappingProxyType(
    {
        ("unet3d", "b200"): MappingProxyType(
            {
                "record_length_bytes": "carried over from unet3d h100/a100",
                "record_length_bytes_stdev": "carried over from unet3d h100/a100",
                "batch_size": "carried over from unet3d h100/a100",
                "read_threads": "carried over from unet3d h100/a100",
                "au_threshold": "carried over from unet3d h100/a100",
                "epochs": "carried over from unet3d h100/a100",
            }
        ),
        **{
            ("retinanet", accelerator): MappingProxyType(
                {
                    "record_length_bytes_stdev": "not public: 0 (fixed size)",
                    "read_threads": "not public: DLIO's default",
                    "au_threshold": "carried over from retinanet h100/a100",
                }
            )
            for accelerator in ("b200", "mi355")
        },
        ("dlrm", "b200"): MappingProxyType(
            {
                "read_threads": "carried over from dlrm h100/a100",
                "au_threshold": "carried over from dlrm h100/a100",
                "epochs": "carried over from dlrm h100/a100",
            }
        ),
        ("flux", "b200"): MappingProxyType(
            {"record_length_bytes_stdev": "not public: 0 (fixed size)"}
        ),
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
#: (``retinanet_b200``, which mi355 shares; ``dlrm_b200``; ``flux_b200``). Workloads that
#: differ only in the file count share an entry (unet3d b200 reads unet3d files); the file
#: count here is the first workload's reference count. ``Workload.datagen`` gives a
#: workload's own.
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
