"""The DLRMv4 HSTU ranking model on TorchRec, configured by typed dataclasses."""

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
from hstu_model.metrics import BinnedAUC, binary_auc, normalized_entropy
from hstu_model.model import HSTURanker, ModelOutput, embedding_tables, time_features
from hstu_model.sharding import ShardingError, shard_model
from hstu_model.training import EvalResult, Trainer, seed_everything

__version__ = "0.1.0"

__all__ = [
    "BinnedAUC",
    "ConfigError",
    "ContextualFeature",
    "EmbeddingTable",
    "EvalResult",
    "FeatureNames",
    "HSTUConfig",
    "HSTURanker",
    "ModelConfig",
    "ModelOutput",
    "OptimizerConfig",
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
