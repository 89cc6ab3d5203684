"""The types of the training workload registry (:mod:`storage_workloads.workloads`):
:class:`Workload`, :class:`Datagen`, :class:`ParquetSchema` and :class:`ParquetColumn`, the
values DLIO accepts for their fields, and :class:`UnknownWorkloadError`. The registry
re-exports every public name here.
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
    "COMPRESSIONS",
    "DATA_LOADERS",
    "FORMATS",
    "FRAMEWORKS",
    "PARQUET_DTYPES",
    "PARQUET_READ_MODES",
    "SHUFFLES",
    "Datagen",
    "ParquetColumn",
    "ParquetSchema",
    "UnknownWorkloadError",
    "Workload",
]

#: Dataset formats DLIO can generate and read (parquet only in the MLPerf Storage DLIO).
FORMATS: Final = frozenset(
    {"npz", "npy", "tfrecord", "hdf5", "csv", "jpeg", "png", "parquet", "indexed_binary"}
)
#: DLIO ``framework`` values.
FRAMEWORKS: Final = frozenset({"pytorch", "tensorflow"})
#: DLIO ``reader.data_loader`` values.
DATA_LOADERS: Final = frozenset({"pytorch", "tensorflow", "dali", "native_dali"})
#: DLIO ``reader.file_shuffle`` / ``reader.sample_shuffle`` values.
SHUFFLES: Final = frozenset({"off", "seed", "random"})
#: DLIO ``dataset.compression`` values (its ``Compression`` enumeration).
COMPRESSIONS: Final = frozenset({"none", "gzip", "lzf", "bz2", "zip", "xz"})
#: Bytes per element of the fixed-size parquet column types the MLPerf DLIO generates.
PARQUET_DTYPES: Final[Mapping[str, int]] = MappingProxyType(
    {
        "int8": 1,
        "uint8": 1,
        "int16": 2,
        "uint16": 2,
        "float16": 2,
        "int32": 4,
        "uint32": 4,
        "float32": 4,
        "int64": 8,
        "uint64": 8,
        "float64": 8,
    }
)
#: ``dataset.parquet.read_mode`` values.
PARQUET_READ_MODES: Final = frozenset({"row_group", "file"})


class UnknownWorkloadError(KeyError):
    """No workload of that model or accelerator; the message lists the known ones."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0]) if self.args else ""


def _int(name: str, value: object, minimum: int, owner: str = "Workload") -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{owner}.{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{owner}.{name} must be >= {minimum}, got {value}")


def _optional_int(name: str, value: object, minimum: int, owner: str = "Workload") -> None:
    if value is not None:
        _int(name, value, minimum, owner)


def _text(name: str, value: object, owner: str = "Workload") -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{owner}.{name} must be a non-empty string, got {value!r}")


def _choice(name: str, value: object, allowed: frozenset[str], owner: str) -> None:
    if value is not None and value not in allowed:
        raise ValueError(f"{owner}.{name} must be one of {sorted(allowed)}, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class ParquetColumn:
    """One column of a parquet dataset (DLIO ``dataset.parquet.columns`` entry).

    Attributes:
        name: column name.
        dtype: element type, a key of :data:`PARQUET_DTYPES`.
        size: elements per row (a fixed-size list when > 1); ``None`` leaves the key out
            (DLIO's default: 1, a scalar).
        read: whether the reader reads the column; ``None`` leaves the key out.
    """

    name: str
    dtype: str
    size: int | None = None
    read: bool | None = None

    def __post_init__(self) -> None:
        _text("name", self.name, "ParquetColumn")
        _choice("dtype", self.dtype, frozenset(PARQUET_DTYPES), "ParquetColumn")
        _optional_int("size", self.size, 1, "ParquetColumn")
        if self.read is not None and not isinstance(self.read, bool):
            raise TypeError(f"ParquetColumn.read must be a bool or None, got {self.read!r}")

    @property
    def row_bytes(self) -> int:
        """Bytes of one row of this column: element size times ``size``."""
        return PARQUET_DTYPES[self.dtype] * (1 if self.size is None else self.size)

    def as_dict(self) -> dict[str, Any]:
        """The DLIO mapping: ``name``, ``dtype`` and whichever of ``size``/``read`` are set."""
        out: dict[str, Any] = {"name": self.name, "dtype": self.dtype}
        if self.size is not None:
            out["size"] = self.size
        if self.read is not None:
            out["read"] = self.read
        return out


@dataclass(frozen=True, kw_only=True)
class ParquetSchema:
    """DLIO's ``dataset.parquet`` section: the columns and how files are laid out and read.

    Attributes:
        columns: the columns, in file order (at least one, names unique).
        row_group_size: rows per row group; ``None`` leaves the key out (DLIO's default).
        read_mode: ``row_group`` or ``file``; ``None`` leaves the key out.
    """

    columns: tuple[ParquetColumn, ...]
    row_group_size: int | None = None
    read_mode: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.columns, tuple) or not self.columns:
            raise ValueError(
                f"ParquetSchema.columns must be a non-empty tuple, got {self.columns!r}"
            )
        for column in self.columns:
            if not isinstance(column, ParquetColumn):
                raise TypeError(
                    f"ParquetSchema.columns must hold ParquetColumn, got {type(column).__name__}"
                )
        names = [c.name for c in self.columns]
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate is not None:
            raise ValueError(f"ParquetSchema.columns names {duplicate!r} twice")
        _optional_int("row_group_size", self.row_group_size, 1, "ParquetSchema")
        _choice("read_mode", self.read_mode, PARQUET_READ_MODES, "ParquetSchema")

    @property
    def row_bytes(self) -> int:
        """Bytes of one row (one sample) over all columns."""
        return sum(c.row_bytes for c in self.columns)

    def as_dict(self) -> dict[str, Any]:
        """The DLIO ``dataset.parquet`` mapping."""
        out: dict[str, Any] = {}
        if self.row_group_size is not None:
            out["row_group_size"] = self.row_group_size
        if self.read_mode is not None:
            out["read_mode"] = self.read_mode
        out["columns"] = [c.as_dict() for c in self.columns]
        return out


def _check_dataset_extras(owner: str, obj: Any) -> None:
    """Validate the fields a Workload and its Datagen share beyond the file shape."""
    if obj.model_type is not None:
        _text("model_type", obj.model_type, owner)
    _optional_int("model_size", obj.model_size, 1, owner)
    exact = obj.record_length_bytes_exact
    if exact is not None:
        if isinstance(exact, bool) or not isinstance(exact, numbers.Real):
            raise TypeError(f"{owner}.record_length_bytes_exact must be a number, got {exact!r}")
        if not math.isfinite(exact) or exact <= 0:
            raise ValueError(
                f"{owner}.record_length_bytes_exact must be finite and > 0, got {exact}"
            )
        if round(exact) != obj.record_length_bytes:
            raise ValueError(
                f"{owner}.record_length_bytes_exact {exact} does not round to "
                f"record_length_bytes {obj.record_length_bytes}"
            )
    _int("record_length_bytes_resize", obj.record_length_bytes_resize, 0, owner)
    _choice("compression", obj.compression, COMPRESSIONS, owner)
    if obj.parquet is not None:
        if not isinstance(obj.parquet, ParquetSchema):
            raise TypeError(
                f"{owner}.parquet must be a ParquetSchema or None, got {type(obj.parquet).__name__}"
            )
        if obj.format != "parquet":
            raise ValueError(f"{owner}.parquet is set but format is {obj.format!r}, not parquet")
        if obj.parquet.row_bytes != obj.record_length_bytes:
            raise ValueError(
                f"{owner}.parquet columns hold {obj.parquet.row_bytes} bytes per row, but "
                f"record_length_bytes is {obj.record_length_bytes}"
            )


@dataclass(frozen=True, kw_only=True)
class Workload:
    """One MLPerf Storage training workload as DLIO emulates it.

    Every optional field left at ``None`` is not written to the DLIO configuration, so DLIO's
    default applies, as in an official file that does not set the key.

    Attributes:
        model: workload name (``unet3d``, ``resnet50``, ...), lower case.
        accelerator: emulated accelerator (``h100``, ``a100``, ``b200``, ``mi355``), lower case.
        framework: DLIO ``framework`` (``pytorch`` or ``tensorflow``).
        data_loader: DLIO ``reader.data_loader``.
        format: DLIO ``dataset.format`` (``npz``, ``tfrecord``, ``jpeg``, ``parquet``, ...).
        num_files_train: files in the reference dataset (the closed division resizes it, see
            :func:`storage_workloads.required_num_files`).
        num_samples_per_file: samples in each file.
        record_length_bytes: mean bytes per sample, in whole bytes (sizing and checks use it).
        record_length_bytes_stdev: standard deviation of the sample size (0: fixed size).
        record_length_bytes_exact: the mean as the official file writes it where it is not
            whole (resnet50: 114660.07), which the DLIO config carries.
        record_length_bytes_resize: DLIO ``record_length_bytes_resize`` (0: not written).
        batch_size: samples per step and accelerator.
        read_threads: DLIO ``reader.read_threads``; ``None`` leaves DLIO's default (1).
        computation_time_s: emulated accelerator time per step, in seconds.
        au_threshold: accelerator utilisation (0..1] a run must sustain to be valid.
        epochs: training epochs.
        model_type: DLIO ``model.type`` (``cnn``).
        model_size: DLIO ``model.model_size`` in bytes.
        compression: DLIO ``dataset.compression``.
        parquet: DLIO ``dataset.parquet`` (parquet workloads only).
        prefetch_size: DLIO ``reader.prefetch_size``.
        computation_threads: DLIO ``reader.computation_threads``.
        file_shuffle, sample_shuffle: DLIO ``reader.file_shuffle`` / ``reader.sample_shuffle``
            (``seed``: shuffle with the run's seed; DLIO's default is ``off``).
        shuffle_size: DLIO ``reader.shuffle_size``.
        dont_use_mmap: DLIO ``reader.dont_use_mmap``.
        workflow_checkpoint: DLIO ``workflow.checkpoint`` of the training run; ``None`` leaves
            the key out (DLIO's default, false).
        checkpoint_after_epoch, epochs_between_checkpoints: DLIO's ``checkpoint`` section
            (both or neither).
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
    record_length_bytes_exact: float | None = None
    record_length_bytes_resize: int = 0
    batch_size: int
    read_threads: int | None
    computation_time_s: float
    au_threshold: float
    epochs: int
    model_type: str | None = None
    model_size: int | None = None
    compression: str | None = None
    parquet: ParquetSchema | None = None
    prefetch_size: int | None = None
    computation_threads: int | None = None
    file_shuffle: str | None = None
    sample_shuffle: str | None = None
    shuffle_size: int | None = None
    dont_use_mmap: bool | None = None
    workflow_checkpoint: bool | None = None
    checkpoint_after_epoch: int | None = None
    epochs_between_checkpoints: int | None = None

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
        _optional_int("read_threads", self.read_threads, 0)
        _int("epochs", self.epochs, 1)
        for name in ("computation_time_s", "au_threshold"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"Workload.{name} must be a number, got {value!r}")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"Workload.{name} must be finite and > 0, got {value}")
        if self.au_threshold > 1:
            raise ValueError(f"Workload.au_threshold must be <= 1, got {self.au_threshold}")
        _check_dataset_extras("Workload", self)
        _optional_int("prefetch_size", self.prefetch_size, 0)
        _optional_int("computation_threads", self.computation_threads, 1)
        _choice("file_shuffle", self.file_shuffle, SHUFFLES, "Workload")
        _choice("sample_shuffle", self.sample_shuffle, SHUFFLES, "Workload")
        _optional_int("shuffle_size", self.shuffle_size, 1)
        for name in ("dont_use_mmap", "workflow_checkpoint"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise TypeError(f"Workload.{name} must be a bool or None, got {value!r}")
        _optional_int("checkpoint_after_epoch", self.checkpoint_after_epoch, 1)
        _optional_int("epochs_between_checkpoints", self.epochs_between_checkpoints, 1)
        if (self.checkpoint_after_epoch is None) != (self.epochs_between_checkpoints is None):
            raise ValueError(
                "Workload.checkpoint_after_epoch and Workload.epochs_between_checkpoints must "
                "be set together, got "
                f"{self.checkpoint_after_epoch!r} and {self.epochs_between_checkpoints!r}"
            )
        if self.workflow_checkpoint and self.checkpoint_after_epoch is None:
            raise ValueError(
                "Workload.workflow_checkpoint is true but checkpoint_after_epoch is not set"
            )

    @property
    def key(self) -> tuple[str, str]:
        """``(model, accelerator)``: the workload's key in :data:`WORKLOADS`."""
        return (self.model, self.accelerator)

    @property
    def dataset_bytes(self) -> int:
        """Mean size of the reference dataset in bytes."""
        return self.num_files_train * self.num_samples_per_file * self.record_length_bytes

    @property
    def has_checkpoint_section(self) -> bool:
        """Whether the workload's DLIO configuration has a ``checkpoint`` section."""
        return self.checkpoint_after_epoch is not None

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
            record_length_bytes_exact=self.record_length_bytes_exact,
            record_length_bytes_resize=self.record_length_bytes_resize,
            model_type=self.model_type,
            model_size=self.model_size,
            compression=self.compression,
            parquet=self.parquet,
        )


@dataclass(frozen=True, kw_only=True)
class Datagen:
    """The dataset DLIO's ``generate_data`` step writes for a workload.

    The shape of the data: the framework (DLIO picks the writer by format and, for tfrecord,
    needs TensorFlow), the format, the file and sample counts, the sample size, and what the
    official data-generation files also carry (``model.type``/``model_size``, the record
    resize, the compression and the parquet schema). Every workload of a model that reads the
    same files shares one ``Datagen``; see :data:`DATAGENS`.

    Attributes:
        model: workload name the dataset belongs to.
        framework: DLIO ``framework`` for the generation run.
        format: DLIO ``dataset.format``.
        num_files_train: files of the reference dataset (resize with
            :func:`storage_workloads.required_num_files`).
        num_samples_per_file: samples in each file.
        record_length_bytes: mean bytes per sample, in whole bytes.
        record_length_bytes_stdev: standard deviation of the sample size (0: fixed size).
        record_length_bytes_exact, record_length_bytes_resize, model_type, model_size,
            compression, parquet: as in :class:`Workload`.
    """

    model: str
    framework: str
    format: str
    num_files_train: int
    num_samples_per_file: int
    record_length_bytes: int
    record_length_bytes_stdev: int = 0
    record_length_bytes_exact: float | None = None
    record_length_bytes_resize: int = 0
    model_type: str | None = None
    model_size: int | None = None
    compression: str | None = None
    parquet: ParquetSchema | None = None

    def __post_init__(self) -> None:
        _text("model", self.model, "Datagen")
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
        _check_dataset_extras("Datagen", self)

    @property
    def file_bytes(self) -> int:
        """Mean bytes of sample data in one file (``samples_per_file * record_length``)."""
        return self.num_samples_per_file * self.record_length_bytes

    @property
    def dataset_bytes(self) -> int:
        """Mean bytes of sample data in the reference dataset."""
        return self.num_files_train * self.file_bytes

    @property
    def name(self) -> str:
        """The key of :data:`DATAGENS` whose files have this shape (``dlrm_b200`` for the
        parquet dlrm data, which mi355 shares); the model name for a shape not registered.
        A unique name for the data-generation YAML and run records."""
        from storage_workloads.workloads import DATAGENS  # the registry imports this module

        shape = dataclasses.replace(self, num_files_train=1)
        for key, known in DATAGENS.items():
            if dataclasses.replace(known, num_files_train=1) == shape:
                return key
        return self.model
