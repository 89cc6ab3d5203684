"""`StreamPosition`: where the training data stands (pass, source, samples consumed of it), so
that a resumed run skips exactly what was trained."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class StreamPosition:
    """Where a stream of batches over `sizes` sources stands, pass after pass.

    `sizes[i]`: samples source `i` yields per pass (whole global batches only; 0 for a source
    too small for one). After `advance(samples)` for each trained batch, (`epoch`, `source`,
    `consumed`) is the next sample to train: pass `epoch`, the `consumed`-th sample of source
    `source`. A resumed stream starts at source `source` of pass `epoch` and skips `consumed`
    samples of it (yambda-data: `BatchPlan(sources[source:], epoch=epoch, skip=consumed)`).
    Batches never span sources.
    """

    sizes: Sequence[int]
    epoch: int = 0
    source: int = 0
    consumed: int = 0

    def __post_init__(self) -> None:
        self.sizes = tuple(int(s) for s in self.sizes)
        if not self.sizes or min(self.sizes) < 0 or sum(self.sizes) == 0:
            raise ValueError(f"StreamPosition: no samples in sources of sizes {self.sizes[:8]}")
        if self.consumed == 0 and self.sizes[self.source] == 0:
            self._next_source()

    def _next_source(self) -> None:
        self.consumed = 0
        while True:
            self.source += 1
            if self.source == len(self.sizes):
                self.source, self.epoch = 0, self.epoch + 1
            if self.sizes[self.source] > 0:
                return

    def advance(self, samples: int) -> None:
        """Count `samples` more trained samples (one global batch)."""
        self.consumed += int(samples)
        size = self.sizes[self.source]
        if self.consumed > size:
            raise ValueError(
                f"StreamPosition: {self.consumed} samples consumed of source {self.source}, "
                f"which has {size}; a batch spans two sources"
            )
        if self.consumed == size:
            self._next_source()

    def _sizes_digest(self) -> str:
        return hashlib.sha256(json.dumps(self.sizes).encode()).hexdigest()

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "source": self.source,
            "consumed": self.consumed,
            "num_sources": len(self.sizes),
            "num_samples": sum(self.sizes),
            "sizes_sha256": self._sizes_digest(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from `state`; `ValueError` when it was counted over other source sizes
        (other data or batch size)."""
        if state["sizes_sha256"] != self._sizes_digest():
            raise ValueError(
                f"the data differs from the checkpoint's: {state['num_sources']} sources of "
                f"{state['num_samples']} samples then, {len(self.sizes)} of {sum(self.sizes)} now"
            )
        source, consumed = int(state["source"]), int(state["consumed"])
        if not 0 <= consumed < self.sizes[source]:
            raise ValueError(f"StreamPosition: {consumed} consumed of source {source}")
        self.epoch, self.source, self.consumed = int(state["epoch"]), source, consumed
