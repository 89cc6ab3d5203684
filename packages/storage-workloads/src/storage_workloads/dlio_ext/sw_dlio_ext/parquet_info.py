"""``python -m sw_dlio_ext.parquet_info FILE...``: each parquet file's footer as JSON lines.

Rows, row-group sizes, column names and arrow types with their bytes per row, and the
compression codecs; storage-workloads compares them with the workload's schema after a
datagen (:func:`.formats.compare_parquet`).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def _row_bytes(kind: pa.DataType) -> int | None:
    if pa.types.is_fixed_size_binary(kind):
        return kind.byte_width
    try:
        return kind.bit_width // 8
    except ValueError:
        return None


def describe(path: str) -> dict[str, Any]:
    handle = pq.ParquetFile(path)
    meta = handle.metadata
    schema = handle.schema_arrow
    codecs = set()
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            codecs.add(group.column(c).compression)
    return {
        "path": path,
        "rows": meta.num_rows,
        "row_group_rows": [meta.row_group(g).num_rows for g in range(meta.num_row_groups)],
        "columns": [
            {"name": f.name, "type": str(f.type), "row_bytes": _row_bytes(f.type)} for f in schema
        ],
        "compression": sorted(codecs),
    }


def main(paths: list[str]) -> int:
    for path in paths:
        try:
            info = describe(path)
        except (OSError, pa.ArrowException) as exc:
            info = {"path": path, "error": str(exc)}
        print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
