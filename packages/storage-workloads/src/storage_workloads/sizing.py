"""Dataset sizing for MLPerf Storage training runs.

The rule is the published text's (mlcommons/storage ``Submission_guidelines.md`` v2.0, commit
caa90c9): section 6.6, "the dataset size must be at least 5x larger than the sum of memory
across all of the MLPerf Storage nodes", and section 7, which computes ``min_samples =
max(500 * batch_size * accelerators, hosts * memory_GiB * 5 * 2**30 / record_length)`` and
``min_total_files = min_samples / num_samples_per_file`` without saying how a fraction of a
file rounds. Section 7 also says "The MLPerf Storage benchmark script **must be used** to run
the benchmarks since it calculates the minimum dataset size for each benchmark": the script's
arithmetic is the rule. mlpstorage 2.0 (``mlpstorage/rules.py``
``calculate_training_data_size``) floors both quotients (``//``), and so does this module, so
that no dataset passes one tool and fails the other: unet3d on 1 accelerator with 128 GiB
needs 4,687 files (4,687.53 by memory), resnet50 on 8 accelerators with 2 x 256 GiB 19,163
(19,163.4). ``tests/data/mlpstorage-sizing.json`` holds mlpstorage's own answers for 90
systems, and the tests compare.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction
from typing import Final

from storage_workloads.workloads import Workload

__all__ = [
    "ACCELERATOR_SAMPLES_FACTOR",
    "FILES_PER_SUBFOLDER",
    "HOST_MEMORY_FACTOR",
    "memory_term",
    "record_length",
    "required_num_files",
    "steps_term",
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


def memory_term(workload: Workload, total_host_memory_bytes: int) -> int:
    """Files that hold 5x the hosts' memory, floored as mlpstorage floors it:
    ``floor(5 * memory / (samples_per_file * record_bytes))``."""
    memory = _positive("total_host_memory_bytes", total_host_memory_bytes)
    file_bytes = workload.num_samples_per_file * record_length(workload)
    return math.floor(HOST_MEMORY_FACTOR * memory / file_bytes)


def steps_term(workload: Workload, num_accelerators: int) -> int:
    """Files that hold 500 steps of every accelerator, floored as mlpstorage floors it:
    ``floor(500 * accelerators * batch_size / samples_per_file)``."""
    accelerators = _positive("num_accelerators", num_accelerators)
    samples = ACCELERATOR_SAMPLES_FACTOR * accelerators * workload.batch_size
    return samples // workload.num_samples_per_file


def record_length(workload: Workload) -> Fraction:
    """The mean record length the sizing rule divides by, exactly: the published value
    (``record_length_bytes_exact`` where the workload has one, resnet50's 114,660.07), else the
    whole-byte ``record_length_bytes``."""
    exact = getattr(workload, "record_length_bytes_exact", None)
    if isinstance(exact, numbers.Real) and not isinstance(exact, bool) and exact > 0:
        return Fraction(str(exact))
    return Fraction(workload.record_length_bytes)


def required_num_files(
    workload: Workload, *, total_host_memory_bytes: int, num_accelerators: int
) -> int:
    """Files a closed run must generate for ``workload`` on the given system.

    ``max(floor(5 * host_memory / (samples_per_file * record_bytes)),
    floor(500 * accelerators * batch_size / samples_per_file))`` (:func:`memory_term`,
    :func:`steps_term`), computed exactly. ``total_host_memory_bytes`` is the memory of all
    client hosts together and ``num_accelerators`` the emulated accelerators of all of them.
    Both terms round down, as mlpstorage's, whose calculation the rules make normative (see
    the module docstring). ``record_bytes`` is :func:`record_length`, the published mean
    exactly (resnet50: 114,660.07, not 114,660), the value mlpstorage divides by.
    """
    return max(
        memory_term(workload, total_host_memory_bytes),
        steps_term(workload, num_accelerators),
    )


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
