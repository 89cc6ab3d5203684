"""File-format facts shared by the DLIO extensions and the workspace (standard library only).

- The parquet schema of a workload (:func:`parquet_schema`): columns, row-group size, read mode
  and compression, from the ``dataset.parquet`` and ``dataset.compression`` keys of a workload
  config (storage-workloads emits those of the MLPerf Storage v3.0 dlrm and flux configs),
  else one binary column of the record length. :func:`compare_parquet` checks a file's footer
  (as :mod:`.parquet_info` describes it) against the schema.
- TFRecord framing and the index files of NVIDIA DALI's ``tfrecord2idx``
  (:func:`tfrecord_index`, :func:`check_tfrecord_index`): one ``"<offset> <size>\\n"`` line
  per record, the size counting the 8-byte length, its 4-byte CRC, the payload and its 4-byte
  CRC.
- JPEG padding to an exact size (:func:`pad_jpeg`): comment (COM) segments after the
  start-of-image marker, which decoders skip.

This module imports nothing outside the standard library, so the workspace (which has no
pyarrow, numpy or DLIO) and DLIO's own environment can both use it.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "DEFAULT_ROW_GROUP_SIZE",
    "DTYPE_BYTES",
    "PARQUET_COMPRESSIONS",
    "PARQUET_READ_MODES",
    "ParquetColumn",
    "ParquetSchema",
    "SchemaError",
    "check_tfrecord_index",
    "compare_parquet",
    "jpeg_padding_segments",
    "jpeg_pixels_for",
    "pad_jpeg",
    "parquet_schema",
    "record_length_of",
    "tfrecord_framed_size",
    "tfrecord_index",
    "tfrecord_records",
]

#: Bytes of one element of each column type the parquet generator writes.
DTYPE_BYTES: Final[Mapping[str, int]] = {
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "float16": 2,
    "float32": 4,
    "float64": 8,
}
#: ``dataset.compression`` values a parquet dataset may use (parquet codecs).
PARQUET_COMPRESSIONS: Final = ("none", "snappy", "gzip", "lz4", "zstd", "brotli")
#: ``dataset.parquet.read_mode`` values the reader implements. ``row_group`` (the default): a
#: sample's whole row group is read (the ``read: true`` columns only) and the following samples
#: of that row group come from memory, as the MLPerf Storage parquet reader does. ``file``: the
#: first sample of a file reads the whole file (those columns), the rest come from memory.
PARQUET_READ_MODES: Final = ("row_group", "file")
#: Rows per row group where the config sets none: the default of the MLPerf Storage parquet
#: generator (the v3.0 flux configs set none, so a flux file of 288 rows is one row group).
DEFAULT_ROW_GROUP_SIZE: Final = 1024


class SchemaError(ValueError):
    """A parquet schema key is missing, of the wrong type or inconsistent; the message names
    the key."""


@dataclass(frozen=True)
class ParquetColumn:
    """One column: ``size`` elements of ``dtype`` per row (``size`` > 1: a fixed-size binary
    value of ``size * bytes(dtype)`` bytes); ``read``: whether training reads it.
    ``dtype == "binary"`` is the variable-length column of the single-column default."""

    name: str
    dtype: str
    size: int = 1
    read: bool = True

    @property
    def row_bytes(self) -> int:
        """Bytes of this column in one row (the mean, for the variable binary column)."""
        return self.size * DTYPE_BYTES.get(self.dtype, 1)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "size": self.size, "read": self.read}


@dataclass(frozen=True)
class ParquetSchema:
    """What a parquet file of the workload holds and how training reads it.

    ``source`` says where the columns came from: ``"config"`` (the workload's
    ``dataset.parquet.columns``) or ``"default:binary"`` (one ``data`` column of the record
    length). ``stdev`` is only non-zero for the binary default, whose values then vary in
    length.
    """

    columns: tuple[ParquetColumn, ...]
    row_group_size: int
    read_mode: str
    compression: str
    source: str
    stdev: int = 0

    @property
    def row_bytes(self) -> int:
        """Bytes of one row (one sample) over all columns."""
        return sum(c.row_bytes for c in self.columns)

    @property
    def read_bytes(self) -> int:
        """Bytes of one row in the columns training reads."""
        return sum(c.row_bytes for c in self.columns if c.read)

    @property
    def read_columns(self) -> list[str]:
        return [c.name for c in self.columns if c.read]

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "columns": [c.as_dict() for c in self.columns],
            "row_group_size": self.row_group_size,
            "read_mode": self.read_mode,
            "compression": self.compression,
            "row_bytes": self.row_bytes,
            "read_bytes": self.read_bytes,
            "stdev": self.stdev,
        }


def _int(value: object, key: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SchemaError(f"{key} must be an integer >= {minimum}, got {value!r}")
    return value


def record_length_of(dataset: Mapping[str, Any]) -> tuple[int | None, int]:
    """``(record length, stdev)`` of a ``dataset`` section in either engine's spelling
    (``record_length`` for dlio-benchmark, ``record_length_bytes`` for the MLPerf forks)."""
    length = dataset.get("record_length", dataset.get("record_length_bytes"))
    stdev = dataset.get("record_length_stdev", dataset.get("record_length_bytes_stdev", 0))
    key = "record_length" if "record_length" in dataset else "record_length_bytes"
    if length is not None:
        length = _int(length, f"dataset.{key}", 1)
    return length, _int(stdev if stdev is not None else 0, f"dataset.{key}_stdev", 0)


def _columns(value: object) -> tuple[ParquetColumn, ...]:
    key = "dataset.parquet.columns"
    if not isinstance(value, Sequence) or isinstance(value, str | bytes) or not value:
        raise SchemaError(f"{key} must be a non-empty list of columns, got {value!r}")
    columns = []
    seen: set[str] = set()
    for i, spec in enumerate(value):
        where = f"{key}[{i}]"
        if not isinstance(spec, Mapping):
            raise SchemaError(f"{where} must be a mapping with name and dtype, got {spec!r}")
        unknown = set(spec) - {"name", "dtype", "size", "read"}
        if unknown:
            raise SchemaError(
                f"{where}: unknown key(s) {sorted(unknown)}; known: name, dtype, size, read"
            )
        name = spec.get("name")
        if not isinstance(name, str) or not name.strip():
            raise SchemaError(f"{where}.name must be a non-empty string, got {name!r}")
        if name in seen:
            raise SchemaError(f"{where}.name {name!r} repeats an earlier column")
        seen.add(name)
        dtype = spec.get("dtype")
        if dtype not in DTYPE_BYTES:
            raise SchemaError(
                f"{where}.dtype must be one of {', '.join(DTYPE_BYTES)}, got {dtype!r}"
            )
        size = _int(spec.get("size", 1), f"{where}.size", 1)
        read = spec.get("read", True)
        if not isinstance(read, bool):
            raise SchemaError(f"{where}.read must be true or false, got {read!r}")
        columns.append(ParquetColumn(name=name, dtype=dtype, size=size, read=read))
    if not any(c.read for c in columns):
        raise SchemaError(f"{key}: no column has read: true, so training would read nothing")
    return tuple(columns)


def parquet_schema(config: Mapping[str, Any]) -> ParquetSchema:
    """The parquet schema of a DLIO workload config (the whole mapping).

    ``dataset.parquet`` (``columns``, ``row_group_size`` and ``read_mode``, each optional) and
    ``dataset.compression`` as the config gives them; without ``columns``, one variable-length
    binary column ``data`` of the record length (and stdev). With columns, their bytes per row
    must equal the record length and the stdev must be 0. Raises :class:`SchemaError` naming
    the key.
    """
    dataset = config.get("dataset")
    if not isinstance(dataset, Mapping):
        raise SchemaError("the config has no dataset section")
    given = dataset.get("parquet", {})
    if given is None:
        given = {}
    if not isinstance(given, Mapping):
        raise SchemaError(f"dataset.parquet must be a mapping, got {given!r}")
    unknown = set(given) - {"columns", "row_group_size", "read_mode"}
    if unknown:
        raise SchemaError(
            f"dataset.parquet: unknown key(s) {sorted(unknown)}; known: columns, "
            "row_group_size, read_mode"
        )
    record, stdev = record_length_of(dataset)
    if "columns" in given:
        columns = _columns(given["columns"])
        source = "config"
        row_bytes = sum(c.row_bytes for c in columns)
        if stdev:
            raise SchemaError(
                f"dataset.record_length_stdev is {stdev}, but dataset.parquet.columns have a "
                "fixed size per row; drop the stdev"
            )
        if record is not None and record != row_bytes:
            raise SchemaError(
                f"dataset.record_length is {record:,} B, but dataset.parquet.columns hold "
                f"{row_bytes:,} B per row; make them agree"
            )
    else:
        if record is None:
            raise SchemaError(
                "dataset.record_length is needed for a parquet dataset without "
                "dataset.parquet.columns"
            )
        columns = (ParquetColumn(name="data", dtype="binary", size=record),)
        source = "default:binary"
    row_group = _int(
        given.get("row_group_size", DEFAULT_ROW_GROUP_SIZE), "dataset.parquet.row_group_size", 1
    )
    mode = given.get("read_mode", "row_group")
    if mode not in PARQUET_READ_MODES:
        raise SchemaError(
            f"dataset.parquet.read_mode must be one of {', '.join(PARQUET_READ_MODES)}, "
            f"got {mode!r}"
        )
    compression = dataset.get("compression", "none")
    compression = "none" if compression is None else str(compression).lower()
    if compression not in PARQUET_COMPRESSIONS:
        raise SchemaError(
            f"dataset.compression must be one of {', '.join(PARQUET_COMPRESSIONS)} for a "
            f"parquet dataset, got {compression!r}"
        )
    return ParquetSchema(
        columns=columns,
        row_group_size=row_group,
        read_mode=mode,
        compression=compression,
        source=source,
        stdev=stdev if source == "default:binary" else 0,
    )


def compare_parquet(info: Mapping[str, Any], schema: ParquetSchema, *, rows: int) -> list[str]:
    """What differs between a parquet file's description (``parquet_info.describe``) and the
    schema and row count it should have; an empty list when nothing does."""
    path = info.get("path", "?")
    problems = []
    if info.get("rows") != rows:
        problems.append(f"{path}: {info.get('rows')} rows, expected {rows}")
    names = [c["name"] for c in info.get("columns", [])]
    want = [c.name for c in schema.columns]
    if names != want:
        problems.append(f"{path}: columns {names[:5]}..., expected {want[:5]}... ({len(want)})")
    else:
        for got, col in zip(info["columns"], schema.columns, strict=True):
            if col.dtype != "binary" and got.get("row_bytes") != col.row_bytes:
                problems.append(
                    f"{path}: column {col.name} holds {got.get('row_bytes')} B per row "
                    f"({got.get('type')}), expected {col.row_bytes} ({col.size} x {col.dtype})"
                )
    groups = info.get("row_group_rows", [])
    if groups and any(n != schema.row_group_size for n in groups[:-1]):
        problems.append(
            f"{path}: row groups of {sorted(set(groups))} rows, expected {schema.row_group_size}"
        )
    if groups and groups[-1] > schema.row_group_size:
        problems.append(f"{path}: a row group of {groups[-1]} rows > {schema.row_group_size}")
    codecs = {str(c).lower() for c in info.get("compression", [])}
    expected = {"uncompressed"} if schema.compression == "none" else {schema.compression}
    if codecs and codecs != expected:
        problems.append(f"{path}: compression {sorted(codecs)}, expected {schema.compression}")
    return problems


# ---------------------------------------------------------------------------------------------
# TFRecord framing and DALI index files

_TFRECORD_FRAMING: Final = 8 + 4 + 4  # length, CRC of the length, CRC of the payload


def tfrecord_framed_size(payload_bytes: int) -> int:
    """Bytes one record of ``payload_bytes`` takes in a TFRecord file."""
    return payload_bytes + _TFRECORD_FRAMING


def tfrecord_index(payload_sizes: Sequence[int]) -> str:
    """The DALI ``tfrecord2idx`` index of a file whose records have these payload sizes, in
    order: ``"<offset> <framed size>\\n"`` per record."""
    lines = []
    offset = 0
    for size in payload_sizes:
        framed = tfrecord_framed_size(size)
        lines.append(f"{offset} {framed}\n")
        offset += framed
    return "".join(lines)


def tfrecord_records(path: str | os.PathLike[str]) -> list[tuple[int, int]]:
    """``(offset, framed size)`` of each record of a TFRecord file, read from its length
    fields (CRCs are not checked). Raises ``ValueError`` for a truncated file."""
    records = []
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        offset = 0
        while offset < size:
            head = fh.read(8)
            if len(head) < 8:
                raise ValueError(f"{path}: truncated record length at byte {offset}")
            (length,) = struct.unpack("<Q", head)
            framed = tfrecord_framed_size(length)
            if offset + framed > size:
                raise ValueError(f"{path}: record at byte {offset} runs past the end of the file")
            records.append((offset, framed))
            offset += framed
            fh.seek(offset)
    return records


def check_tfrecord_index(
    tfrecord: str | os.PathLike[str], index: str | os.PathLike[str]
) -> str | None:
    """``None`` when ``index`` is the DALI index of ``tfrecord``, else what differs."""
    try:
        with open(index, encoding="ascii") as fh:
            lines = fh.read().splitlines()
    except FileNotFoundError:
        return f"no index file {index} for {tfrecord}"
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot read index file {index}: {exc}"
    try:
        records = tfrecord_records(tfrecord)
    except (OSError, ValueError) as exc:
        return str(exc)
    expected = [f"{o} {s}" for o, s in records]
    if lines != expected:
        return (
            f"index {index} has {len(lines)} entries that do not match the {len(records)} "
            f"records of {tfrecord}"
        )
    return None


# ---------------------------------------------------------------------------------------------
# JPEG padding

_COM_MAX: Final = 2 + 65535  # marker + the largest length field, which counts itself
_COM_MIN: Final = 4  # marker + a length of 2 (no payload)


def jpeg_padding_segments(extra: int) -> list[int]:
    """Total sizes (marker included) of the comment segments that add exactly ``extra``
    bytes; ``extra`` must be 0 or at least 4."""
    if extra < 0 or 0 < extra < _COM_MIN:
        raise ValueError(f"cannot pad a JPEG by {extra} bytes (0 or >= {_COM_MIN})")
    sizes = []
    while extra:
        take = min(extra, _COM_MAX)
        if 0 < extra - take < _COM_MIN:
            take -= _COM_MIN
        sizes.append(take)
        extra -= take
    return sizes


def pad_jpeg(data: bytes, target: int, filler: Callable[[int], bytes]) -> bytes:
    """``data`` (a JPEG file) grown to exactly ``target`` bytes by comment segments inserted
    after its start-of-image marker, their payload from ``filler(n)`` (random bytes, so the
    file does not compress). ``target - len(data)`` must be 0 or at least 4."""
    if data[:2] != b"\xff\xd8":
        raise ValueError("not a JPEG file (no start-of-image marker)")
    segments = []
    for total in jpeg_padding_segments(target - len(data)):
        payload = filler(total - _COM_MIN)
        segments.append(b"\xff\xfe" + struct.pack(">H", total - 2) + payload)
    out = data[:2] + b"".join(segments) + data[2:]
    assert len(out) == target
    return out


def jpeg_pixels_for(target: int, bytes_per_pixel: float) -> tuple[int, int]:
    """Width and height of a noise image whose JPEG should come out near ``target`` bytes,
    given the bytes per pixel seen so far; at least 8 x 8."""
    pixels = max(64.0, target / max(bytes_per_pixel, 1e-3))
    width = max(8, round(math.sqrt(pixels)))
    height = max(8, math.ceil(pixels / width))
    return width, height
