"""The least memory a training run of a config needs, and the memory a device has: a run whose
tables cannot fit is refused before it builds anything.

The need counted is a floor, never a guess from above: the embedding tables in fp32 with their
row-wise Adagrad state (one fp32 per row), split over the ranks that shard them, plus the dense
parameters with their gradients and Adam's two moments on every rank. Activations, the data
loader and the framework come on top of it, so a run refused here could not have run, and a run
let through may still need more.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from hstu_model.config import ID_TABLES, ContextualFeature, ModelConfig
from hstu_model.model import HSTURanker, embedding_tables

__all__ = [
    "MemoryNeed",
    "available_memory",
    "dense_parameter_count",
    "format_bytes",
    "training_memory",
]

FP32_BYTES = 4
ADAM_BYTES_PER_PARAMETER = 4 * FP32_BYTES
"""A dense parameter, its gradient and Adam's two moments."""


def dense_parameter_count(model: ModelConfig) -> int:
    """Parameters outside the embedding tables, counted without allocating them: models built
    on the meta device over one-row tables (the dense part does not depend on the table
    sizes), with one and two STU layers, the count of more layers being linear in them."""
    import torchrec  # noqa: F401  (imported under the meta device, its module code would fail)

    one_row = tuple(ContextualFeature(f.name, 1) for f in model.contextual_features)

    def count(num_layers: int) -> int:
        shape = dataclasses.replace(model, contextual_features=one_row, num_layers=num_layers)
        # The model builds its modules on the CPU before moving them; under the meta device
        # nothing of any size is allocated.
        with torch.device("meta"):
            ranker = HSTURanker(shape, dict.fromkeys(ID_TABLES, 1), device=torch.device("meta"))
        return sum(p.numel() for p in ranker.dense_parameters())

    one = count(1)
    return one if model.num_layers == 1 else one + (model.num_layers - 1) * (count(2) - one)


@dataclass(frozen=True)
class MemoryNeed:
    """The floor of a run's memory (see the module docstring)."""

    embedding_bytes: int
    """Every table with its row-wise Adagrad state, all ranks together."""
    dense_bytes: int
    """The dense parameters with their gradients and Adam moments, on each rank."""

    def per_rank(self, world_size: int) -> int:
        return math.ceil(self.embedding_bytes / world_size) + self.dense_bytes


def training_memory(model: ModelConfig, vocab: Mapping[str, int]) -> MemoryNeed:
    """The floor of the memory a run of `model` needs with id tables of `vocab` rows."""
    tables = embedding_tables(model.features, vocab, model.contextual_features)
    rows = sum(t.num_embeddings for t in tables)
    return MemoryNeed(
        embedding_bytes=rows * (model.embedding_dim + 1) * FP32_BYTES,
        dense_bytes=dense_parameter_count(model) * ADAM_BYTES_PER_PARAMETER,
    )


def _cgroup_room() -> int | None:
    """What this process's cgroup (v2) may still allocate, when it has a limit."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else max(int(limit) - used, 0)


def _host_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def available_memory(device: torch.device, ranks_on_host: int = 1) -> tuple[int, str] | None:
    """The memory one rank on `device` can have, and where it was read: the device's free
    memory on a GPU; on the CPU the host's available memory (and its cgroup's room, whichever
    is less) shared by the `ranks_on_host` ranks of this host. None where it cannot be read."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free, f"free on {torch.cuda.get_device_name(device)}"
    found = [b for b in (_host_available(), _cgroup_room()) if b is not None]
    if not found:
        return None
    share = f", shared by {ranks_on_host} ranks" if ranks_on_host > 1 else ""
    return min(found) // ranks_on_host, f"available on this host{share}"


def format_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(count) < 1024 or unit == "PiB":
            return f"{count:,.0f} {unit}" if unit == "B" else f"{count:,.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")
