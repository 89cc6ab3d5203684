"""Dataset sizing for MLPerf Storage training runs.

The rule is the published text's (mlcommons/storage): ``Submission_guidelines.md`` v2.0
(commit caa90c9) section 6.6, "the dataset size must be at least 5x larger than the sum of
memory across all of the MLPerf Storage nodes", and section 7, which computes
``min_samples = max(500 * batch_size * accelerators, hosts * memory_GiB * 5 * 2**30 /
record_length)`` and ``min_total_files = min_samples / num_samples_per_file``, of which "a
minimum of min_total_files files are required" (``Rules.md`` 3.1.2 repeats it, at d3220b6 and at
the newest, 0366ccf). A whole number of files that is at least that quotient is its ceiling.

mlpstorage's v2.0 code (``mlpstorage/rules.py`` ``calculate_training_data_size`` at caa90c9)
floors both quotients, one file short whenever the division is not exact: unet3d on 1
accelerator with 128 GiB needs 4,687.53 files by memory; the text asks for 4,688, v2.0
mlpstorage for 4,687. The newest mlpstorage (``mlpstorage_py/rules/utils.py``) rounds up, as
here. The text decides: this module rounds up.
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
    "record_length",
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

    ``max(ceil(5 * host_memory / (samples_per_file * record_bytes)),
    ceil(500 * accelerators * batch_size / samples_per_file))``, computed in exact integer
    arithmetic. ``total_host_memory_bytes`` is the memory of all client hosts together and
    ``num_accelerators`` the emulated accelerators of all of them. Both terms round up: the
    rules ask for "at least" the quotient (see the module docstring; mlpstorage v2.0 rounds
    down). ``record_bytes`` is :func:`record_length`, the published mean exactly (resnet50:
    114,660.07, not 114,660), as the rules text divides by it.
    """
    memory = _positive("total_host_memory_bytes", total_host_memory_bytes)
    accelerators = _positive("num_accelerators", num_accelerators)
    file_bytes = workload.num_samples_per_file * record_length(workload)
    by_memory = math.ceil(HOST_MEMORY_FACTOR * memory / file_bytes)
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
