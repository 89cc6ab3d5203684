"""DLRMv4 run values and the hyperparameter records that training ruleset 6.1.0 requires.

The numbers here restate the rules shipped with mlperf-logging (``compliance_checker/
training_6.1.0/{common,closed_common,closed_dlrmv4,open_dlrmv4}.yaml``); the tests compare them
with the installed YAML so that a rules update shows up as a failing test.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from mlperf_logging.mllog import constants as C

__all__ = [
    "DLRMV4_EVAL_SAMPLES",
    "DLRMV4_TARGET_ACCURACY",
    "DLRMV4_TRAIN_SAMPLES",
    "PRECISIONS",
    "REFERENCE_GLOBAL_BATCH_SIZE",
    "REFERENCE_LEARNING_RATE",
    "DLRMv4RunConfig",
    "dlrmv4_run_start_keys",
    "eval_interval_samples",
    "first_eval_samples",
    "learning_rate_band",
]

#: Training samples of one DLRMv4 pass (closed and open rules).
DLRMV4_TRAIN_SAMPLES: Final = 2_290_835_423
#: Evaluation samples (closed and open rules).
DLRMV4_EVAL_SAMPLES: Final = 2_058_204
#: AUC that ends a closed run.
DLRMV4_TARGET_ACCURACY: Final = 0.75
#: The learning rate of the reference recipe at :data:`REFERENCE_GLOBAL_BATCH_SIZE`.
REFERENCE_LEARNING_RATE: Final = 1e-6
REFERENCE_GLOBAL_BATCH_SIZE: Final = 8192
#: Fraction of the training samples between two evaluations.
EVAL_EVERY_DATA_PCT: Final = 0.001

#: Values the 6.1.0 rules accept for the ``lowest_numerical_precision_in_*`` records.
PRECISIONS: Final = (
    "fp64",
    "fp32",
    "tf32",
    "fp16",
    "fp8",
    "mxfp6",
    "nvfp4",
    "mxfp4",
    "bfloat16",
    "Graphcore FLOAT 16.16",
    "int8",
    "uint8",
    "int4",
    "uint4",
)


def _positive_int(name: str, value: object, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _finite(name: str, value: object, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r}")
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(f"{name} must be finite, got {value}")
    if positive and out <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    if not positive and out < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return out


def eval_interval_samples(
    global_batch_size: int,
    *,
    train_samples: int = DLRMV4_TRAIN_SAMPLES,
    eval_every_data_pct: float = EVAL_EVERY_DATA_PCT,
) -> int:
    """Training samples between two evaluations: the grid every ``eval_accuracy`` must lie on.

    ``ceil(eval_every_data_pct * train_samples / global_batch_size)`` steps, at least one,
    times the global batch size (2,293,760 at global batch 8192). The arithmetic is the same
    floating-point expression the closed rule evaluates.
    """
    gbs = _positive_int("global_batch_size", global_batch_size)
    steps = max(1, math.ceil(eval_every_data_pct * train_samples / gbs))
    return steps * gbs


def first_eval_samples(
    global_batch_size: int,
    *,
    train_samples: int = DLRMV4_TRAIN_SAMPLES,
    eval_every_data_pct: float = EVAL_EVERY_DATA_PCT,
) -> int:
    """``samples_count`` the rules require of the FIRST ``eval_accuracy`` record.

    The closed rule resolves ``floor((4480 * gbs + 135_331_840) / 3)`` upwards onto the eval
    grid: 57,344,000 at global batch 8192 (the 25th eval). For a run on a different number of
    training samples (the ``dev`` ruleset) the threshold is scaled by
    ``train_samples / DLRMV4_TRAIN_SAMPLES``, so it is the same fraction of the data, and the
    first eval is never before the first grid point.
    """
    gbs = _positive_int("global_batch_size", global_batch_size)
    interval = eval_interval_samples(
        gbs, train_samples=train_samples, eval_every_data_pct=eval_every_data_pct
    )
    threshold: float = math.floor((4480 * gbs + 135_331_840) / 3)
    if train_samples != DLRMV4_TRAIN_SAMPLES:
        threshold = threshold * train_samples / DLRMV4_TRAIN_SAMPLES
    return max(1, math.ceil(threshold / interval)) * interval


def learning_rate_band(global_batch_size: int) -> tuple[float, float]:
    """The closed/open band for ``opt_base_learning_rate``: 0.5x..1.5x of 1e-6 * gbs / 8192."""
    gbs = _positive_int("global_batch_size", global_batch_size)
    return 0.5e-6 * gbs / 8192, 1.5e-6 * gbs / 8192


@dataclass(frozen=True, kw_only=True)
class DLRMv4RunConfig:
    """The values a DLRMv4 run reports before ``run_start``.

    Fields without a default describe the run and must be given. Fields with a default are the
    reference recipe (what the closed division pins); a run that differs passes its own value,
    the logger never invents one. ``sparse_learning_rate`` defaults to ``learning_rate``.
    """

    global_batch_size: int
    learning_rate: float
    micro_batch_size: int
    config_filename: str
    precision_linear: str
    precision_attn: str
    precision_comm: str
    gradient_accumulation_steps: int = 1
    tensor_parallelism: int = 1
    pipeline_parallelism: int = 1
    context_parallelism: int = 1
    expert_parallelism: int = 1
    train_samples: int = DLRMV4_TRAIN_SAMPLES
    eval_samples: int = DLRMV4_EVAL_SAMPLES
    max_sequence_length: int = 4096
    eval_every_data_pct: float = EVAL_EVERY_DATA_PCT
    optimizer: str = "Adam"
    adam_beta_1: float = 0.95
    adam_beta_2: float = 0.999
    adam_epsilon: float = 1e-8
    weight_decay: float = 0.0
    gradient_clip_norm: float = 1.0
    sparse_optimizer: str = "RowWiseAdagrad"
    sparse_learning_rate: float | None = None
    warmup_steps: int = 24_000
    warmup_start_lr: float = 0.0
    seed: int | None = None

    def __post_init__(self) -> None:
        for name in (
            "global_batch_size",
            "micro_batch_size",
            "gradient_accumulation_steps",
            "tensor_parallelism",
            "pipeline_parallelism",
            "context_parallelism",
            "expert_parallelism",
            "train_samples",
            "eval_samples",
            "max_sequence_length",
        ):
            _positive_int(name, getattr(self, name))
        _positive_int("warmup_steps", self.warmup_steps, minimum=0)
        if self.seed is not None:
            _positive_int("seed", self.seed, minimum=0)
        _finite("learning_rate", self.learning_rate, positive=True)
        if self.sparse_learning_rate is not None:
            _finite("sparse_learning_rate", self.sparse_learning_rate, positive=True)
        _finite("eval_every_data_pct", self.eval_every_data_pct, positive=True)
        if self.eval_every_data_pct > 1:
            raise ValueError(f"eval_every_data_pct must be <= 1, got {self.eval_every_data_pct}")
        for name in ("adam_beta_1", "adam_beta_2"):
            beta = _finite(name, getattr(self, name))
            if beta >= 1:
                raise ValueError(f"{name} must be in [0, 1), got {beta}")
        _finite("adam_epsilon", self.adam_epsilon, positive=True)
        for name in ("weight_decay", "gradient_clip_norm", "warmup_start_lr"):
            _finite(name, getattr(self, name))
        for name in ("precision_linear", "precision_attn", "precision_comm"):
            if getattr(self, name) not in PRECISIONS:
                raise ValueError(f"{name} must be one of {PRECISIONS}, got {getattr(self, name)!r}")
        for name in ("config_filename", "optimizer", "sparse_optimizer"):
            text = getattr(self, name)
            if not isinstance(text, str) or not text:
                raise ValueError(f"{name} must be a non-empty string, got {text!r}")

    @classmethod
    def from_values(cls, values: Any, *, strict: bool = True) -> DLRMv4RunConfig:
        """Build from a mapping or a dataclass instance whose keys/fields use the names above.

        With ``strict`` (the default) an unknown key raises ``ValueError`` (it catches typos
        such as ``lr``); ``strict=False`` ignores keys this class does not know, so a training
        config carrying many other values can be passed as is.
        """
        if isinstance(values, cls):
            return values
        if dataclasses.is_dataclass(values) and not isinstance(values, type):
            data = {f.name: getattr(values, f.name) for f in dataclasses.fields(values)}
        elif isinstance(values, Mapping):
            data = dict(values)
        else:
            raise TypeError(
                f"expected a mapping or a dataclass instance, got {type(values).__name__}"
            )
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown and strict:
            raise ValueError(f"unknown DLRMv4 run values {unknown}; known: {sorted(known)}")
        missing = sorted(
            f.name
            for f in dataclasses.fields(cls)
            if f.name not in data
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        )
        if missing:
            raise ValueError(f"missing DLRMv4 run values {missing}")
        return cls(**{k: v for k, v in data.items() if k in known})


def dlrmv4_run_start_keys(config: Any, *, strict: bool = True) -> list[tuple[str, Any]]:
    """The ordered ``(key, value)`` records a DLRMv4 run logs before ``run_start``.

    ``config`` is a :class:`DLRMv4RunConfig`, a mapping, or a dataclass instance (see
    :meth:`DLRMv4RunConfig.from_values`). The list holds every EXACTLY_ONE hyperparameter of
    the 6.1.0 common, closed and open DLRMv4 rules, except the ``submission_*`` records
    (:meth:`MLPerfLogger.submission_info`). ``global_batch_size`` comes first, because the rules
    derive the learning-rate band from it, and ``opt_sparse_base_learning_rate`` comes after
    ``opt_base_learning_rate``, because the closed rule compares the two. ``seed`` is appended
    when set (it is not required).
    """
    cfg = DLRMv4RunConfig.from_values(config, strict=strict)
    sparse_lr = cfg.learning_rate if cfg.sparse_learning_rate is None else cfg.sparse_learning_rate
    keys: list[tuple[str, Any]] = [
        (C.GLOBAL_BATCH_SIZE, cfg.global_batch_size),
        (C.GRADIENT_ACCUMULATION_STEPS, cfg.gradient_accumulation_steps),
        (C.MICRO_BATCH_SIZE, cfg.micro_batch_size),
        (C.TRAIN_SAMPLES, cfg.train_samples),
        (C.EVAL_SAMPLES, cfg.eval_samples),
        (C.MAX_SEQUENCE_LENGTH, cfg.max_sequence_length),
        (C.EVAL_EVERY_DATA_PCT, cfg.eval_every_data_pct),
        (C.OPT_NAME, cfg.optimizer),
        (C.OPT_BASE_LR, cfg.learning_rate),
        (C.OPT_ADAM_BETA_1, cfg.adam_beta_1),
        (C.OPT_ADAM_BETA_2, cfg.adam_beta_2),
        (C.OPT_ADAM_EPSILON, cfg.adam_epsilon),
        (C.OPT_WEIGHT_DECAY, cfg.weight_decay),
        (C.OPT_GRADIENT_CLIP_NORM, cfg.gradient_clip_norm),
        (C.OPT_SPARSE_NAME, cfg.sparse_optimizer),
        (C.OPT_SPARSE_BASE_LR, sparse_lr),
        (C.OPT_LR_WARMUP_STEPS, cfg.warmup_steps),
        (C.OPT_LR_WARMUP_START_LR, cfg.warmup_start_lr),
        (C.LOWEST_NUMERICAL_PRECISION_IN_LINEAR, cfg.precision_linear),
        (C.LOWEST_NUMERICAL_PRECISION_IN_ATTN, cfg.precision_attn),
        (C.LOWEST_NUMERICAL_PRECISION_IN_COMM, cfg.precision_comm),
        (C.TENSOR_PARALLELISM, cfg.tensor_parallelism),
        (C.PIPELINE_PARALLELISM, cfg.pipeline_parallelism),
        (C.CONTEXT_PARALLELISM, cfg.context_parallelism),
        (C.EXPERT_PARALLELISM, cfg.expert_parallelism),
        (C.CONFIG_FILENAME, cfg.config_filename),
    ]
    if cfg.seed is not None:
        keys.append((C.SEED, cfg.seed))
    return keys
