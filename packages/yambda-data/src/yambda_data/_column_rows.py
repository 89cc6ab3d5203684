"""A numeric polars column's values and nulls at some rows, read by numpy from the column's
own buffers (the Arrow C stream interface, ``__arrow_c_stream__``) rather than by a polars
gather.

Why not polars: a gather, ``is_null`` or ``fill_null`` runs on polars' thread pool, and while
another thread has polars write a file those calls queue behind the write's tasks (in
preprocess, tens of milliseconds each, most of the repeated-row count's wall time). Reading the
buffers takes no polars thread: the values are a numpy view of the column's memory, the nulls
its validity bitmap, and only the rows asked for are copied.
"""

from __future__ import annotations

import ctypes

import numpy as np
import polars as pl


class _ArrowArray(ctypes.Structure):
    """``struct ArrowArray`` of the Arrow C data interface."""


_ArrowArray._fields_ = [
    ("length", ctypes.c_int64),
    ("null_count", ctypes.c_int64),
    ("offset", ctypes.c_int64),
    ("n_buffers", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("buffers", ctypes.POINTER(ctypes.c_void_p)),
    ("children", ctypes.c_void_p),
    ("dictionary", ctypes.c_void_p),
    ("release", ctypes.CFUNCTYPE(None, ctypes.POINTER(_ArrowArray))),
    ("private_data", ctypes.c_void_p),
]


class _ArrowArrayStream(ctypes.Structure):
    """``struct ArrowArrayStream`` of the Arrow C stream interface."""


_ArrowArrayStream._fields_ = [
    ("get_schema", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)),
    (
        "get_next",
        ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_ArrowArray)),
    ),
    ("get_last_error", ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p)),
    ("release", ctypes.CFUNCTYPE(None, ctypes.c_void_p)),
    ("private_data", ctypes.c_void_p),
]

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def values_and_nulls_at(column: pl.Series, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The values of the integer ``column`` at ``rows`` (0 where null) and whether each is
    null: ``column.gather(rows).fill_null(0)`` and ``column.gather(rows).is_null()``, as
    numpy arrays."""
    dtype = column.head(0).to_numpy().dtype  # the numpy type of the column's values
    if not np.issubdtype(dtype, np.integer):
        raise TypeError(f"{column.name}: {column.dtype} is not an integer type")
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) and (rows.min() < 0 or rows.max() >= len(column)):
        raise IndexError(f"{column.name}: rows outside 0..{len(column) - 1}")
    if not len(rows):
        return np.zeros(0, dtype=dtype), np.zeros(0, dtype=bool)
    capsule = column.rechunk().__arrow_c_stream__()
    stream = _ArrowArrayStream.from_address(_capsule_pointer(capsule, b"arrow_array_stream"))
    array = _ArrowArray()
    if stream.get_next(ctypes.addressof(stream), ctypes.byref(array)) != 0 or not array.release:
        raise RuntimeError(f"{column.name}: polars exported no array")
    try:
        if array.length != len(column) or array.n_buffers != 2:
            raise RuntimeError(f"{column.name}: not one flat array of {len(column)} values")
        end = array.offset + array.length
        memory = (ctypes.c_char * (end * dtype.itemsize)).from_address(array.buffers[1])
        values = np.frombuffer(memory, dtype=dtype)[array.offset :][rows]
        if array.null_count and array.buffers[0]:
            bitmap = (ctypes.c_char * ((end + 7) // 8)).from_address(array.buffers[0])
            bits = np.frombuffer(bitmap, dtype=np.uint8)
            at = rows + array.offset
            is_null = ((bits[at >> 3] >> (at & 7).astype(np.uint8)) & 1) == 0
            values[is_null] = 0  # what is stored under a null is unspecified
        else:
            is_null = np.zeros(len(rows), dtype=bool)
    finally:
        array.release(ctypes.byref(array))
    return values, is_null
