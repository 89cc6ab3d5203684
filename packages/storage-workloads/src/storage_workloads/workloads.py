"""MLPerf Storage training workloads: one typed record per (model, accelerator).

The values are those of the MLPerf Storage DLIO workload configurations (v2.0/v3.0) for the
emulated H100 and A100 accelerators.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

__all__ = [
    "ACCELERATORS",
    "DATA_LOADERS",
    "FORMATS",
    "FRAMEWORKS",
    "MODELS",
    "WORKLOADS",
    "UnknownWorkloadError",
    "Workload",
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


def _pair(
    model: str,
    *,
    framework: str,
    data_loader: str,
    format: str,
    files: int,
    samples_per_file: int,
    record: int,
    stdev: int = 0,
    batch: int,
    threads: int | None,
    compute_h100: float,
    compute_a100: float,
    au: float,
    epochs: int,
) -> list[Workload]:
    """The h100 and a100 variants of one model: only the computation time differs."""
    return [
        Workload(
            model=model,
            accelerator=accelerator,
            framework=framework,
            data_loader=data_loader,
            format=format,
            num_files_train=files,
            num_samples_per_file=samples_per_file,
            record_length_bytes=record,
            record_length_bytes_stdev=stdev,
            batch_size=batch,
            read_threads=threads,
            computation_time_s=compute,
            au_threshold=au,
            epochs=epochs,
        )
        for accelerator, compute in (("h100", compute_h100), ("a100", compute_a100))
    ]


_ALL: Final = [
    *_pair(
        "unet3d",
        framework="pytorch",
        data_loader="pytorch",
        format="npz",
        files=168,
        samples_per_file=1,
        record=146_600_628,
        stdev=68_341_808,
        batch=7,
        threads=4,
        compute_h100=0.323,
        compute_a100=0.636,
        au=0.90,
        epochs=5,
    ),
    *_pair(
        "resnet50",
        framework="tensorflow",
        data_loader="tensorflow",
        format="tfrecord",
        files=1024,
        samples_per_file=1251,
        record=114_660,
        batch=400,
        threads=8,
        compute_h100=0.224,
        compute_a100=0.435,
        au=0.90,
        epochs=5,
    ),
    *_pair(
        "cosmoflow",
        framework="tensorflow",
        data_loader="tensorflow",
        format="tfrecord",
        files=524_288,
        samples_per_file=1,
        record=2_828_486,
        stdev=71_311,
        batch=1,
        threads=4,
        compute_h100=0.00350,
        compute_a100=0.00551,
        au=0.70,
        epochs=5,
    ),
    *_pair(
        "dlrm",
        framework="pytorch",
        data_loader="pytorch",
        format="npz",
        files=65_536,
        samples_per_file=1,
        record=512,
        batch=8192,
        threads=8,
        compute_h100=0.005,
        compute_a100=0.007,
        au=0.70,
        epochs=1,
    ),
    *_pair(
        "retinanet",
        framework="pytorch",
        data_loader="pytorch",
        format="jpeg",
        files=1_743_042,
        samples_per_file=1,
        record=153_600,
        stdev=51_200,
        batch=16,
        threads=8,
        compute_h100=0.180,
        compute_a100=0.210,
        au=0.85,
        epochs=5,
    ),
    *_pair(
        "flux",
        framework="pytorch",
        data_loader="pytorch",
        format="jpeg",
        files=1_099_776,
        samples_per_file=1,
        record=307_200,
        stdev=102_400,
        batch=8,
        threads=None,
        compute_h100=0.850,
        compute_a100=1.100,
        au=0.80,
        epochs=5,
    ),
]

#: Every known workload, keyed by ``(model, accelerator)``. Read-only.
WORKLOADS: Final[Mapping[tuple[str, str], Workload]] = MappingProxyType({w.key: w for w in _ALL})
#: Known model names, in registry order.
MODELS: Final = tuple(dict.fromkeys(model for model, _ in WORKLOADS))
#: Known accelerator names, in registry order.
ACCELERATORS: Final = tuple(dict.fromkeys(accelerator for _, accelerator in WORKLOADS))


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
