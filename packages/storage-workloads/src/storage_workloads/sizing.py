"""Dataset sizing for MLPerf Storage training runs."""

from __future__ import annotations

import numbers
from typing import Final

from storage_workloads.workloads import Workload

__all__ = [
    "ACCELERATOR_SAMPLES_FACTOR",
    "FILES_PER_SUBFOLDER",
    "HOST_MEMORY_FACTOR",
    "required_num_files",
    "suggested_subfolders",
]

#: The dataset must be at least this many times the host memory (so it cannot be cached).
HOST_MEMORY_FACTOR: Final = 5
#: ... and hold at least this many steps' worth of samples for every accelerator.
ACCELERATOR_SAMPLES_FACTOR: Final = 500
#: Most files :func:`suggested_subfolders` puts in one directory.
FILES_PER_SUBFOLDER: Final = 10_000


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return int(value)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def required_num_files(
    workload: Workload, *, total_host_memory_bytes: int, num_accelerators: int
) -> int:
    """Files a closed run must generate for ``workload`` on the given system.

    ``max(ceil(5 * host_memory / (samples_per_file * record_bytes)),
    ceil(500 * accelerators * batch_size / samples_per_file))``, computed in exact integer
    arithmetic. ``total_host_memory_bytes`` is the memory of all client hosts together and
    ``num_accelerators`` the emulated accelerators of all of them.
    """
    memory = _positive("total_host_memory_bytes", total_host_memory_bytes)
    accelerators = _positive("num_accelerators", num_accelerators)
    file_bytes = workload.num_samples_per_file * workload.record_length_bytes
    by_memory = _ceil_div(HOST_MEMORY_FACTOR * memory, file_bytes)
    by_steps = _ceil_div(
        ACCELERATOR_SAMPLES_FACTOR * accelerators * workload.batch_size,
        workload.num_samples_per_file,
    )
    return max(by_memory, by_steps)


def suggested_subfolders(num_files: int) -> int:
    """Subfolders to spread ``num_files`` over (DLIO ``dataset.num_subfolders_train``).

    Rule: up to 10,000 files stay in one flat folder (0 subfolders); above that, the fewest
    subfolders that keep each at or below 10,000 files, i.e. ``ceil(num_files / 10_000)``.
    DLIO spreads the files evenly over the subfolders.
    """
    files = _positive("num_files", num_files)
    if files <= FILES_PER_SUBFOLDER:
        return 0
    return _ceil_div(files, FILES_PER_SUBFOLDER)
