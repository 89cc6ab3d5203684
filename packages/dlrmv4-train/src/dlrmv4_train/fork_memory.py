"""Keeping the trainer's large tensors out of the processes it forks.

The data loader's workers are forked from the trainer after the model exists. A forked child
shares its parent's pages until either writes to them; the trainer then updates its embedding
tables every step, and each page it writes stays behind in every worker as a private copy of
the old contents, which no worker ever reads. At Yambda-500m size that was 1.2 GiB per worker.
`madvise(MADV_DONTFORK)` leaves those pages out of every child instead: a worker starts
without the tables and costs nothing when the trainer writes to them.

Only whole pages inside tensors of at least `MIN_BYTES` are marked. glibc serves allocations
above its largest mmap threshold (32 MiB) from mappings of their own, which are unmapped when
the tensor is freed: no later allocation can land on a marked page, and the allocator's header
in front of the data keeps its page. A child that read a marked tensor would fault; the loader's
workers touch only the dataset.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
from collections.abc import Iterable

import torch

__all__ = ["MIN_BYTES", "exclude_from_forks"]

MIN_BYTES = 64 * 2**20
"""Twice glibc's largest mmap threshold (``DEFAULT_MMAP_THRESHOLD_MAX``, 32 MiB on 64-bit)."""

_MADV_DONTFORK = 10  # <sys/mman.h>, Linux


def exclude_from_forks(tensors: Iterable[torch.Tensor]) -> int:
    """Mark the pages of each CPU tensor of at least `MIN_BYTES` so that a forked child does
    not inherit them; returns the bytes marked (0 where the platform has no MADV_DONTFORK)."""
    if not sys.platform.startswith("linux"):
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    page = mmap.PAGESIZE
    seen: set[int] = set()
    marked = 0
    for tensor in tensors:
        if tensor.device.type != "cpu" or tensor.layout != torch.strided:
            continue
        storage = tensor.untyped_storage()
        start, size = storage.data_ptr(), storage.nbytes()
        if size < MIN_BYTES or start in seen:
            continue
        seen.add(start)
        first = -(-start // page) * page
        end = (start + size) // page * page
        # A refusal (memory that is no private mapping) leaves the pages shared, as before.
        if libc.madvise(first, end - first, _MADV_DONTFORK) == 0:
            marked += end - first
    return marked
