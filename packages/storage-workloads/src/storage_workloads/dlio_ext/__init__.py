"""DLIO extensions: a parquet reader and generator, a tfrecord generator that needs no DALI, a
jpeg generator that writes files of the declared size, and a checkpoint mechanism.

The code DLIO loads is the package :mod:`storage_workloads.dlio_ext.sw_dlio_ext`, which DLIO
imports as the top-level package ``sw_dlio_ext`` with :data:`PLUGIN_PATH` on its
``PYTHONPATH`` (only that package lives there). Its :mod:`~.sw_dlio_ext.formats` module has no
dependencies, so the workspace uses it too (schemas, index and size checks).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from storage_workloads.dlio_ext.sw_dlio_ext import (
    CHECKPOINT_MECHANISM,
    CHECKPOINT_TIMINGS,
    GENERATED_FORMATS,
    LAUNCHER,
    PARQUET_READER,
)

__all__ = [
    "CHECKPOINT_MECHANISM",
    "CHECKPOINT_TIMINGS",
    "GENERATED_FORMATS",
    "LAUNCHER",
    "PARQUET_READER",
    "PLUGIN_PATH",
]

#: The folder to put on DLIO's ``PYTHONPATH``: it holds the ``sw_dlio_ext`` package only.
PLUGIN_PATH: Final = Path(__file__).resolve().parent
