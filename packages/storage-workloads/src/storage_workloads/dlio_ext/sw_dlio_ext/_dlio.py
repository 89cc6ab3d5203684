"""Helpers for the modules that run inside DLIO (they import DLIO and numpy)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
from dlio_benchmark.common.enumerations import StorageType
from sw_dlio_ext import LAUNCHER, RAW_CONFIG_ATTRIBUTE

#: Seed of the generators: file ``i`` draws from ``default_rng((SEED, i))``, so its content
#: does not depend on the number of ranks that generate the dataset.
SEED = 10


def raw_config(args: Any) -> Mapping[str, Any]:
    """The workload mapping DLIO loaded (kept by the launcher)."""
    config = getattr(args, RAW_CONFIG_ATTRIBUTE, None)
    if not isinstance(config, Mapping):
        raise RuntimeError(
            f"the storage-workloads DLIO extensions need DLIO started with `python -m {LAUNCHER}`"
        )
    return config


def require_local_storage(args: Any, what: str) -> None:
    if args.storage_type not in (StorageType.LOCAL_FS, StorageType.PARALLEL_FS):
        raise RuntimeError(
            f"{what} writes to a file system; storage.storage_type {args.storage_type} is not "
            "supported"
        )


def file_rng(index: int) -> np.random.Generator:
    return np.random.default_rng((SEED, index))


def sizes_for(args: Any, count: int, index: int) -> np.ndarray:
    """``count`` sizes drawn around ``args.record_length`` with ``args.record_length_stdev``
    (at least 1 byte), the same for a given file ``index`` on every run."""
    mean = int(args.record_length)
    stdev = int(args.record_length_stdev or 0)
    if stdev <= 0:
        return np.full(count, mean, dtype=np.int64)
    rng = np.random.default_rng((SEED, index, 1))
    return np.maximum(1, np.rint(rng.normal(mean, stdev, count))).astype(np.int64)


def replace_into(tmp: str, path: str) -> None:
    """Move a finished file into place (a reader never sees a partial one)."""
    os.replace(tmp, path)


def partial_path(path: str) -> str:
    # Ends in neither the format's extension nor anything DLIO lists.
    return f"{path}.partial-{os.getpid()}"
