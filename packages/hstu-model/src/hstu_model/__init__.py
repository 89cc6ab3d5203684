"""The DLRMv4 HSTU ranking model on TorchRec, configured by typed dataclasses.

Importing the package is cheap: the configuration (`hstu_model.config`) needs neither torch nor
TorchRec, and the model, the sharding and the training machinery load when first named.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from hstu_model.config import (
    ConfigError,
    ContextualFeature,
    EmbeddingTable,
    FeatureNames,
    HSTUConfig,
    ModelConfig,
    OptimizerConfig,
    ShardingConfig,
    TableOption,
    TrainConfig,
    preset,
)

if TYPE_CHECKING:
    from hstu_model.metrics import BinnedAUC, binary_auc, normalized_entropy
    from hstu_model.model import (
        HSTURanker,
        Jagged,
        ModelOutput,
        PlainTableRanker,
        embedding_tables,
        time_features,
    )
    from hstu_model.sharding import ShardingError, shard_model
    from hstu_model.training import EvalResult, Trainer, seed_everything

__version__ = "0.1.0"

_LAZY = {
    "BinnedAUC": "hstu_model.metrics",
    "binary_auc": "hstu_model.metrics",
    "normalized_entropy": "hstu_model.metrics",
    "HSTURanker": "hstu_model.model",
    "Jagged": "hstu_model.model",
    "ModelOutput": "hstu_model.model",
    "PlainTableRanker": "hstu_model.model",
    "embedding_tables": "hstu_model.model",
    "time_features": "hstu_model.model",
    "ShardingError": "hstu_model.sharding",
    "shard_model": "hstu_model.sharding",
    "EvalResult": "hstu_model.training.trainer",
    "Trainer": "hstu_model.training.trainer",
    "seed_everything": "hstu_model.training.trainer",
}
"""Public names loaded on first use (name -> module), with torch (the model module loads
TorchRec only when an `HSTURanker` is built or run; the sharding and training machinery load it
at once)."""


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "BinnedAUC",
    "ConfigError",
    "ContextualFeature",
    "EmbeddingTable",
    "EvalResult",
    "FeatureNames",
    "HSTUConfig",
    "HSTURanker",
    "Jagged",
    "ModelConfig",
    "ModelOutput",
    "OptimizerConfig",
    "PlainTableRanker",
    "ShardingConfig",
    "ShardingError",
    "TableOption",
    "TrainConfig",
    "Trainer",
    "binary_auc",
    "embedding_tables",
    "normalized_entropy",
    "preset",
    "seed_everything",
    "shard_model",
    "time_features",
]
