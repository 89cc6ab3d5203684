"""Parquet datasets for DLIO 2.0.0: a generator and a reader on pyarrow.

The schema (columns, row-group size, read mode, compression) is the workload's, resolved by
:func:`.formats.parquet_schema` from the workload config DLIO loaded.

Generation writes each file row group by row group (``row_group_size`` rows, random bytes in
every column, no dictionary encoding and no statistics, as the MLPerf Storage generator does)
into a temporary name, then renames it. Vectors (``size`` > 1) are fixed-size binary values
of ``size x dtype`` bytes; the binary default column is variable-length when the record
length has a stdev.

Reading, ``read_mode: row_group`` (the default): a sample's row group is read from storage, only
the columns marked ``read: true``; the next samples of the same row group come from memory.
``read_mode: file``: the whole file (those columns) at its first sample. The open
``ParquetFile`` (its footer) is kept across DLIO's per-sample open/close.
"""

from __future__ import annotations

import bisect
import logging
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from dlio_benchmark.data_generator.data_generator import DataGenerator
from dlio_benchmark.reader.reader_handler import FormatReader
from dlio_benchmark.utils.utility import progress
from sw_dlio_ext._dlio import (
    file_rng,
    partial_path,
    raw_config,
    replace_into,
    require_local_storage,
)
from sw_dlio_ext.formats import ParquetColumn, ParquetSchema, parquet_schema

_ARROW_TYPES = {
    "int8": pa.int8(),
    "uint8": pa.uint8(),
    "int16": pa.int16(),
    "uint16": pa.uint16(),
    "int32": pa.int32(),
    "uint32": pa.uint32(),
    "int64": pa.int64(),
    "uint64": pa.uint64(),
    "float16": pa.float16(),
    "float32": pa.float32(),
    "float64": pa.float64(),
}


def arrow_type(column: ParquetColumn) -> pa.DataType:
    if column.dtype == "binary":
        return pa.large_binary()
    if column.size > 1:
        return pa.binary(column.row_bytes)
    return _ARROW_TYPES[column.dtype]


def arrow_schema(schema: ParquetSchema) -> pa.Schema:
    return pa.schema([pa.field(c.name, arrow_type(c), nullable=False) for c in schema.columns])


def column_array(
    column: ParquetColumn,
    rows: int,
    rng: np.random.Generator,
    lengths: np.ndarray | None = None,
) -> pa.Array:
    """``rows`` random values of ``column``; ``lengths`` for the variable binary column."""
    kind = arrow_type(column)
    if column.dtype == "binary":
        if lengths is None:
            lengths = np.full(rows, column.size, dtype=np.int64)
        offsets = np.zeros(rows + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        data = rng.bytes(int(offsets[-1]))
        return pa.Array.from_buffers(kind, rows, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return pa.Array.from_buffers(
        kind, rows, [None, pa.py_buffer(rng.bytes(rows * column.row_bytes))]
    )


class ParquetGenerator(DataGenerator):
    """Writes ``num_files_train`` (+ eval) parquet files of ``num_samples_per_file`` rows."""

    def __init__(self) -> None:
        super().__init__()
        self.schema = parquet_schema(raw_config(self._args))

    def generate(self) -> None:
        super().generate()
        require_local_storage(self._args, "the parquet generator")
        schema = self.schema
        target = arrow_schema(schema)
        codec = "NONE" if schema.compression == "none" else schema.compression.upper()
        if self.my_rank == 0:
            logging.info(
                f"parquet: {len(schema.columns)} columns ({schema.source}), {schema.row_bytes} "
                f"B per row, row groups of {schema.row_group_size}, compression "
                f"{schema.compression}"
            )
        rows_total = int(self.num_samples)
        for i in range(self.my_rank, int(self.total_files_to_generate), self.comm_size):
            progress(i + 1, self.total_files_to_generate, "Generating parquet data")
            path = self.storage.get_uri(self._file_list[i])
            rng = file_rng(i)
            lengths = None
            if schema.stdev:
                drawn = rng.normal(schema.columns[0].size, schema.stdev, rows_total)
                lengths = np.maximum(1, np.rint(drawn)).astype(np.int64)
            tmp = partial_path(path)
            with pq.ParquetWriter(
                tmp,
                target,
                compression=codec,
                use_dictionary=False,
                write_statistics=False,
            ) as writer:
                for start in range(0, rows_total, schema.row_group_size):
                    rows = min(schema.row_group_size, rows_total - start)
                    part = None if lengths is None else lengths[start : start + rows]
                    arrays = [column_array(c, rows, rng, part) for c in schema.columns]
                    writer.write_table(
                        pa.Table.from_arrays(arrays, schema=target),
                        row_group_size=schema.row_group_size,
                    )
            replace_into(tmp, path)


class ParquetReader(FormatReader):
    """DLIO reader (``reader.reader_classname``) of the parquet files above."""

    def __init__(self, dataset_type: Any, thread_index: int, epoch: int) -> None:
        super().__init__(dataset_type, thread_index)
        self.schema = parquet_schema(raw_config(self._args))
        self.columns = self.schema.read_columns
        self._file: tuple[str, pq.ParquetFile, list[int]] | None = None
        self._group: tuple[str, int, pa.Table] | None = None
        self.row_groups_read = 0
        self.bytes_read = 0

    def open(self, filename: str) -> pq.ParquetFile:
        if self._file is None or self._file[0] != filename:
            handle = pq.ParquetFile(filename)
            meta = handle.metadata
            starts = [0]
            for g in range(meta.num_row_groups):
                starts.append(starts[-1] + meta.row_group(g).num_rows)
            self._file = (filename, handle, starts)
        return self._file[1]

    def close(self, filename: str) -> None:
        # The handle stays in self._file: DLIO opens and closes a file for every sample when it
        # reads by index, and re-reading the footer each time would be I/O the workload lacks.
        pass

    def get_sample(self, filename: str, sample_index: int) -> None:
        if self._file is None or self._file[0] != filename:
            self.open(filename)
        assert self._file is not None
        _, handle, starts = self._file
        if not 0 <= sample_index < starts[-1]:
            raise IndexError(f"{filename}: sample {sample_index} of {starts[-1]} rows")
        if self.schema.read_mode == "file":
            group = -1  # the whole file is one unit
        else:
            group = bisect.bisect_right(starts, sample_index) - 1
        if self._group is None or self._group[0] != filename or self._group[1] != group:
            if group < 0:
                table = handle.read(columns=self.columns, use_threads=False)
            else:
                table = handle.read_row_group(group, columns=self.columns, use_threads=False)
            self._group = (filename, group, table)
            self.row_groups_read += 1
            self.bytes_read += table.nbytes

    def next(self) -> Any:
        yield from super().next()

    def read_index(self, image_idx: int, step: int) -> Any:
        return super().read_index(image_idx, step)

    def finalize(self) -> None:
        self._group = None
        self._file = None

    def is_index_based(self) -> bool:
        return True

    def is_iterator_based(self) -> bool:
        return True
