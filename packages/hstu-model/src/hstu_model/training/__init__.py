"""Training machinery: the optimizer step and evaluation (`hstu_model.training.trainer`:
`Trainer`) and the process group a multi-rank run shares (`hstu_model.training.distributed`).
The end-to-end run on Yambda with an MLPerf log is assembled elsewhere (the dlrmv4-train
package); this package works with any data that comes as its batches.

Every name loads its module when first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hstu_model.training.trainer import Batch, EvalResult, Trainer, seed_everything

_LAZY = dict.fromkeys(("Batch", "EvalResult", "Trainer", "seed_everything"), "trainer")
"""Public names -> the module of this package that holds them."""

__all__ = ["Batch", "EvalResult", "Trainer", "seed_everything"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"hstu_model.training.{_LAZY[name]}"), name)
    globals()[name] = value
    return value
