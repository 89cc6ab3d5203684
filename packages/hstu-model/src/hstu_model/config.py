"""Typed, validated configuration of the HSTU ranking model and its training.

Every config is a frozen dataclass whose fields carry a docstring; `__post_init__` rejects
inconsistent values with a message that names the field. Presets are plain functions.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hstu_model.atomic_files import atomic_write_text
from hstu_ops import Kernel, kernel_family


class ConfigError(ValueError):
    """A configuration value is out of range or inconsistent with another one."""


def _require(condition: bool, field_name: str, message: str) -> None:
    if not condition:
        raise ConfigError(f"{field_name}: {message}")


def _require_finite(config: object) -> None:
    """Every float of `config`'s fields (alone or in a tuple) is finite: an infinite rate,
    weight or size passes `> 0` and every other bound, and then ruins a run that has
    started."""
    for spec in dataclasses.fields(config):
        value = getattr(config, spec.name)
        values = value if isinstance(value, tuple) else (value,)
        for item in values:
            _require(
                not isinstance(item, float) or math.isfinite(item),
                spec.name,
                f"must be finite, got {value}",
            )


@dataclass(frozen=True)
class EmbeddingTable:
    """One embedding table of the model's EmbeddingCollection."""

    name: str
    """Table name (also the name of the sharded parameter)."""
    num_embeddings: int
    """Rows: the largest id the table can look up, plus one."""
    feature_names: tuple[str, ...]
    """KeyedJaggedTensor keys looked up in this table."""

    def __post_init__(self) -> None:
        _require(bool(self.name), "EmbeddingTable.name", "must not be empty")
        _require(
            self.num_embeddings >= 1,
            f"EmbeddingTable[{self.name}].num_embeddings",
            f"must be >= 1, got {self.num_embeddings}",
        )
        _require(
            len(self.feature_names) >= 1,
            f"EmbeddingTable[{self.name}].feature_names",
            "must name at least one feature",
        )


@dataclass(frozen=True)
class FeatureNames:
    """KeyedJaggedTensor keys the model reads; the defaults are yambda-data's batch keys."""

    uid: str = "uid"
    """Contextual user id (one value per sample)."""
    item_id: str = "item_id"
    """History item ids."""
    artist_id: str = "artist_id"
    """History artist ids."""
    album_id: str = "album_id"
    """History album ids."""
    action_weight: str = "action_weight"
    """History action bits (listen_plus, like, skip)."""
    action_timestamp: str = "action_timestamp"
    """History event times in seconds."""
    candidate_item_id: str = "item_candidate_id"
    """Candidate item ids."""
    candidate_artist_id: str = "item_candidate_artist_id"
    """Candidate artist ids."""
    candidate_album_id: str = "item_candidate_album_id"
    """Candidate album ids."""
    query_time: str = "item_query_time"
    """Time of the request for which the candidates are scored, in seconds."""


ID_TABLES: tuple[str, ...] = ("item_id", "artist_id", "album_id", "uid")
"""The id tables whose rows the data decides (the model's `vocab_sizes` keys)."""


@dataclass(frozen=True)
class ContextualFeature:
    """A contextual feature after the user id: one id per sample, looked up in its own table.

    In the DLRMv4 reference these are the seven hashed crosses (user_x_artist, ...); the data
    pipeline hashes each into `[0, num_embeddings)`, so both sides must agree on the sizes
    (`ModelConfig.contextual_tables()` lists them for the data side).
    """

    name: str
    """UIH KeyedJaggedTensor key (one value per sample) and name of its embedding table."""
    num_embeddings: int
    """Rows of its table; every id must be below it (for a hashed cross: the hash modulus)."""

    def __post_init__(self) -> None:
        _require(
            isinstance(self.name, str) and bool(self.name),
            "ContextualFeature.name",
            f"must be a non-empty string, got {self.name!r}",
        )
        _require(
            isinstance(self.num_embeddings, int)
            and not isinstance(self.num_embeddings, bool)
            and self.num_embeddings >= 1,
            f"ContextualFeature[{self.name}].num_embeddings",
            f"must be an int >= 1, got {self.num_embeddings!r}",
        )

    @classmethod
    def parse(cls, text: str) -> ContextualFeature:
        """`"user_x_artist=100000"` (underscores allowed in the number) -> a ContextualFeature."""
        name, sep, rows = text.partition("=")
        try:
            if not sep:
                raise ValueError
            num_embeddings = int(rows.strip())
        except ValueError:
            raise ConfigError(
                f"contextual_features: expected name=rows, got {text.strip()!r}"
            ) from None
        return cls(name.strip(), num_embeddings)


@dataclass(frozen=True)
class ModelConfig:
    """Shape and regularisation of the HSTU ranking model."""

    embedding_dim: int = 512
    """Width D of every embedding table and of the transducer (the STU stack)."""
    num_layers: int = 3
    """Number of STU layers."""
    num_heads: int = 4
    """Attention heads per STU layer."""
    attention_dim: int = 128
    """Per-head width of queries and keys."""
    linear_dim: int = 128
    """Per-head width of values and of the gating projection u."""
    preprocessor_hidden_dim: int = 256
    """Hidden width of the three token MLPs (content, additional, action)."""
    action_embedding_dim: int = 8
    """Width of the vector of each action bit in a history token's action encoding (which is
    len(action_weights) of them, concatenated)."""
    item_hidden_dim: int = 512
    """Hidden width of the item MLP on the candidate's [item, artist, album] embeddings."""
    head_hidden_dim: int = 512
    """Hidden width of the prediction head on user * item."""
    max_seq_len: int = 4096
    """Longest token sequence: contextual tokens + history + candidates."""
    history_length: int = 4086
    """Longest user history fed to the model."""
    contextual_seq_len: int = 1
    """Leading contextual tokens per sequence: the user id, then one token per entry of
    `contextual_features`, so it must equal 1 + len(contextual_features). They are plain causal
    tokens in attention (they do not see the history) and keep their own positions."""
    contextual_features: tuple[ContextualFeature, ...] = ()
    """Contextual features after the user id, in token order, each with its own table (the
    reference's seven hashed crosses in the presets). The uid table's rows come from the
    model's `vocab_sizes`, as the data decides them; these tables' rows are fixed here."""
    num_candidates: int = 1
    """Candidate items appended after each history."""
    input_dropout: float = 0.2
    """Dropout on the summed input embeddings."""
    linear_dropout: float = 0.1
    """Dropout before each STU output projection."""
    attention_dropout: float = 0.0
    """Dropout on attention weights (PyTorch kernel only)."""
    action_weights: tuple[int, ...] = (1, 2, 4)
    """Bit of each action kind in action_weight: listen_plus, like, skip."""
    position_buckets: int = 8192
    """Rows of the position embedding table."""
    time_buckets: int = 2048
    """sqrt(minutes) buckets of the time gap to the query time; the table has one more row
    (bucket `time_buckets`, where longer gaps are clamped)."""
    num_tasks: int = 1
    """Binary tasks of the head (listen_plus)."""
    task_weights: tuple[float, ...] = (1.0,)
    """Loss weight of each task."""
    loss_scale: float = 0.2
    """Factor on the weighted task loss."""
    kernel: Kernel = Kernel.PYTORCH
    """hstu_ops kernel family: pytorch (every op), native (the jagged primitives and the
    attention in C++ on CPU tensors) or triton (the layers, the positional embeddings and the
    attention; CUDA/ROCm tensors); each op without it runs its pytorch reference."""
    features: FeatureNames = field(default_factory=FeatureNames)
    """Names of the input features."""
    recompute_layers: bool = False
    """Training keeps only each STU layer's input for the backward, which runs the layer's
    forward again (activation recomputation): the layers' activations are most of what a step
    keeps for its backward (benchmarks/bench_saved_memory.py measures both ways). The function,
    its values and gradients are unchanged (dropout draws the same masks again). The `yambda-5b`
    preset turns it on, where GPU memory binds the batch (the reference's Triton STU layers
    recompute their normed input, uvqk and output in the backward); off elsewhere, because on
    the CPU it costs time (the `tiny` run trains about 30% slower with it) and saves memory
    the host has, as the reference's PyTorch path recomputes nothing."""

    def __post_init__(self) -> None:
        _require_finite(self)
        for name in ("embedding_dim", "num_layers", "num_heads", "attention_dim", "linear_dim"):
            _require(getattr(self, name) >= 1, name, f"must be >= 1, got {getattr(self, name)}")
        for name in (
            "preprocessor_hidden_dim",
            "action_embedding_dim",
            "item_hidden_dim",
            "head_hidden_dim",
        ):
            _require(getattr(self, name) >= 1, name, f"must be >= 1, got {getattr(self, name)}")
        _require(self.history_length >= 1, "history_length", "must be >= 1")
        _require(self.num_candidates >= 1, "num_candidates", "must be >= 1")
        self._check_contextual_features()
        needed = self.contextual_seq_len + self.history_length + self.num_candidates
        _require(
            needed <= self.max_seq_len,
            "max_seq_len",
            f"contextual_seq_len + history_length + num_candidates = {needed} must fit "
            f"max_seq_len = {self.max_seq_len}",
        )
        _require(
            self.position_buckets >= self.max_seq_len,
            "position_buckets",
            f"must cover max_seq_len = {self.max_seq_len}, got {self.position_buckets}",
        )
        _require(self.time_buckets >= 1, "time_buckets", "must be >= 1")
        for name in ("input_dropout", "linear_dropout", "attention_dropout"):
            value = getattr(self, name)
            _require(0.0 <= value < 1.0, name, f"must be in [0, 1), got {value}")
        _require(
            len(self.action_weights) >= 1 and all(w > 0 for w in self.action_weights),
            "action_weights",
            f"must be positive bits, got {self.action_weights}",
        )
        _require(
            len(set(self.action_weights)) == len(self.action_weights),
            "action_weights",
            f"must be distinct, got {self.action_weights}",
        )
        _require(self.loss_scale > 0, "loss_scale", f"must be > 0, got {self.loss_scale}")
        _require(self.num_tasks >= 1, "num_tasks", "must be >= 1")
        _require(
            len(self.task_weights) == self.num_tasks,
            "task_weights",
            f"needs one weight per task ({self.num_tasks}), got {self.task_weights}",
        )
        _require(
            all(w >= 0 for w in self.task_weights) and sum(self.task_weights) > 0,
            "task_weights",
            f"must be >= 0 and not all 0, got {self.task_weights}",
        )
        try:  # hstu-ops owns what a family is
            object.__setattr__(self, "kernel", kernel_family(self.kernel))
        except ValueError as error:
            raise ConfigError(f"kernel: {error}") from None

    def _check_contextual_features(self) -> None:
        features = self.contextual_features
        _require(
            isinstance(features, tuple) and all(isinstance(f, ContextualFeature) for f in features),
            "contextual_features",
            f"must be a tuple of ContextualFeature, got {features!r}",
        )
        names = [f.name for f in features]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        _require(not duplicates, "contextual_features", f"duplicate name(s) {duplicates}")
        # A contextual table must not share a name with an id table or a KJT key of the model.
        taken = set(ID_TABLES) | set(dataclasses.asdict(self.features).values())
        clashes = sorted(set(names) & taken)
        _require(
            not clashes,
            "contextual_features",
            f"name(s) {clashes} already name an id table or input feature of the model",
        )
        expected = 1 + len(features)
        _require(
            self.contextual_seq_len == expected,
            "contextual_seq_len",
            f"must equal the number of contextual tokens, 1 (the uid) + len(contextual_features) "
            f"= {expected}, got {self.contextual_seq_len}",
        )

    def contextual_tables(self) -> dict[str, int]:
        """Rows of each table of `contextual_features`, in token order: name -> rows. The data
        side hashes its cross features into these sizes."""
        return {f.name: f.num_embeddings for f in self.contextual_features}


@dataclass(frozen=True)
class OptimizerConfig:
    """Dense Adam and sparse row-wise Adagrad with a shared linear warmup."""

    dense_lr: float = 1e-6
    """Peak learning rate of the dense Adam optimizer."""
    sparse_lr: float = 1e-6
    """Peak learning rate of the row-wise Adagrad of the embedding tables."""
    betas: tuple[float, float] = (0.95, 0.999)
    """Adam betas."""
    eps: float = 1e-8
    """Adam epsilon."""
    sparse_eps: float = 1e-8
    """Epsilon of the sparse row-wise Adagrad (the reference's; used by the unsharded Trainer
    and by the sharded tables' fused kernel alike, so that both take the same step)."""
    weight_decay: float = 0.0
    """Adam weight decay."""
    warmup_steps: int = 24_000
    """Steps of the linear warmup from lr 0 to the peak, shared by both optimizers."""
    grad_clip_norm: float = 1.0
    """Global gradient-norm clip of the dense parameters (0 disables it)."""

    def __post_init__(self) -> None:
        _require_finite(self)
        _require(self.dense_lr > 0, "dense_lr", f"must be > 0, got {self.dense_lr}")
        _require(self.sparse_lr > 0, "sparse_lr", f"must be > 0, got {self.sparse_lr}")
        _require(
            len(self.betas) == 2 and all(0.0 <= b < 1.0 for b in self.betas),
            "betas",
            f"must be two values in [0, 1), got {self.betas}",
        )
        _require(self.eps > 0, "eps", "must be > 0")
        _require(self.sparse_eps > 0, "sparse_eps", f"must be > 0, got {self.sparse_eps}")
        _require(self.weight_decay >= 0, "weight_decay", "must be >= 0")
        _require(self.warmup_steps >= 0, "warmup_steps", "must be >= 0")
        _require(self.grad_clip_norm >= 0, "grad_clip_norm", "must be >= 0")

    def lr_factor(self, step: int) -> float:
        """Multiplier of the peak learning rate at optimizer step `step` (0-based): linear
        from 0 at step 0 to 1 at `warmup_steps`."""
        if self.warmup_steps == 0:
            return 1.0
        return min(1.0, step / self.warmup_steps)


@dataclass(frozen=True)
class TrainConfig:
    """The parts of a run that are neither model nor optimizer."""

    batch_size: int = 1024
    """Samples per step on one process."""
    eval_batch_size: int = 1024
    """Samples per evaluation step on one process."""
    seed: int = 0
    """Seed of initialisation, dropout and data order."""
    autocast_bf16: bool = False
    """Run the forward pass under bf16 autocast (the reference's bf16_training): the model then
    keeps its item MLP and head in float32, so only the sequence part (token MLPs, STU layers,
    postprocessor) runs in bf16, as in the reference."""

    def __post_init__(self) -> None:
        _require(self.batch_size >= 1, "batch_size", "must be >= 1")
        _require(self.eval_batch_size >= 1, "eval_batch_size", "must be >= 1")
        _require(self.seed >= 0, "seed", "must be >= 0")


SHARDING_TYPES: tuple[str, ...] = ("row_wise", "column_wise", "table_wise", "data_parallel")
"""Sharding types a table may be given (TorchRec `ShardingType` values that its
EmbeddingCollection sharder supports on both CPU and CUDA)."""

COMPUTE_KERNELS: dict[str, tuple[str, ...]] = {
    "cpu": ("fused",),
    "cuda": ("fused", "fused_uvm", "fused_uvm_caching"),
}
"""Compute kernels (weight placements) a sharded table may be given on each compute device
(TorchRec `EmbeddingComputeKernel` values): `fused` keeps the weights in device memory (host
memory on CPU), `fused_uvm` in unified (host) memory, `fused_uvm_caching` in host memory with
a device-memory cache. A data_parallel table always uses the `dense` kernel."""


@dataclass(frozen=True)
class TableOption:
    """One per-table choice: `table=value` (a sharding type or a compute kernel)."""

    table: str
    """Embedding table name: an id table (uid, item_id, artist_id, album_id) or a contextual
    feature's table."""
    value: str
    """The choice for that table."""

    def __post_init__(self) -> None:
        for name in ("table", "value"):
            value = getattr(self, name)
            _require(
                isinstance(value, str) and bool(value.strip()),
                f"TableOption.{name}",
                f"must be a non-empty string, got {value!r}",
            )

    @classmethod
    def parse(cls, text: str, field_name: str = "table option") -> TableOption:
        """`"item_id=row_wise"` -> TableOption("item_id", "row_wise")."""
        table, sep, value = text.partition("=")
        if not sep or not table.strip() or not value.strip():
            raise ConfigError(f"{field_name}: expected table=value, got {text.strip()!r}")
        return cls(table.strip(), value.strip())


def _check_table_options(
    options: tuple[TableOption, ...], field_name: str, allowed: tuple[str, ...]
) -> None:
    _require(
        isinstance(options, tuple) and all(isinstance(o, TableOption) for o in options),
        field_name,
        f"must be a tuple of TableOption, got {options!r}",
    )
    tables = [o.table for o in options]
    duplicates = sorted({t for t in tables if tables.count(t) > 1})
    _require(not duplicates, field_name, f"table(s) {duplicates} given more than once")
    for option in options:
        _require(
            option.value in allowed,
            field_name,
            f"{option.table}={option.value}: unknown value {option.value!r}; "
            f"allowed: {', '.join(allowed)}",
        )


@dataclass(frozen=True)
class ShardingConfig:
    """How `hstu_model.sharding.shard_model` distributes the embedding tables (TorchRec
    DistributedModelParallel). Tables without an override are left to TorchRec's planner."""

    compute_device: str = "cpu"
    """Device the model runs on: "cpu" (with a gloo process group) or "cuda" (one GPU per
    rank, NCCL). It decides which sharding types and compute kernels the planner may use."""
    sharding_types: tuple[TableOption, ...] = ()
    """Per-table sharding type, `table=type` with type one of row_wise, column_wise, table_wise,
    data_parallel (the planner may pick any of them for the other tables). data_parallel
    needs compute_device cuda (on cpu the planner is not offered it either)."""
    compute_kernels: tuple[TableOption, ...] = ()
    """Per-table compute kernel, i.e. where the weights are placed: `table=kernel` with kernel
    `fused` (device memory; host memory on CPU), or on cuda also `fused_uvm` (unified host
    memory) or `fused_uvm_caching` (host memory behind a device cache). Not allowed for a
    data_parallel table, whose kernel is always `dense`."""
    hbm_cap_gb: float = 0.0
    """Device memory (HBM) per rank the planner may fill, in GB (10^9 bytes); 0 keeps
    TorchRec's default (32 GiB). Used with compute_device "cuda"; a CPU topology has no HBM
    (tables go to host memory), so the planner ignores it there."""
    fp16_all_to_all: bool = False
    """Send the embedding all-to-all in fp16 in forward and backward (TorchRec qcomm codecs).
    When set, `shard_model` raises on every rank unless every table's lookup really goes
    through an fp16 all-to-all."""

    def __post_init__(self) -> None:
        _require_finite(self)
        _require(
            self.compute_device in COMPUTE_KERNELS,
            "compute_device",
            f"must be one of {', '.join(COMPUTE_KERNELS)}, got {self.compute_device!r}",
        )
        _check_table_options(self.sharding_types, "sharding_types", SHARDING_TYPES)
        _check_table_options(
            self.compute_kernels,
            "compute_kernels",
            COMPUTE_KERNELS["cuda"],
        )
        for option in self.compute_kernels:
            _require(
                option.value in COMPUTE_KERNELS[self.compute_device],
                "compute_kernels",
                f"{option.table}={option.value} needs compute_device cuda (on "
                f"{self.compute_device} only {', '.join(COMPUTE_KERNELS[self.compute_device])})",
            )
        data_parallel = {o.table for o in self.sharding_types if o.value == "data_parallel"}
        _require(
            not data_parallel or self.compute_device != "cpu",
            "sharding_types",
            f"{', '.join(sorted(data_parallel))}: data_parallel needs compute_device cuda: "
            "on CPU fbgemm's dense kernel returns pooled embeddings (one per sample and "
            "feature) instead of one per id, so TorchRec's data_parallel EmbeddingCollection "
            "computes wrong embeddings",
        )
        clash = sorted(data_parallel & {o.table for o in self.compute_kernels})
        _require(
            not clash,
            "compute_kernels",
            f"table(s) {clash} are data_parallel, whose kernel is always dense; "
            "drop their compute kernel",
        )
        _require(
            isinstance(self.hbm_cap_gb, int | float)
            and not isinstance(self.hbm_cap_gb, bool)
            and self.hbm_cap_gb >= 0,
            "hbm_cap_gb",
            f"must be a number >= 0 (0: the planner's default), got {self.hbm_cap_gb!r}",
        )
        _require(
            isinstance(self.fp16_all_to_all, bool),
            "fp16_all_to_all",
            f"must be a bool, got {self.fp16_all_to_all!r}",
        )

    def sharding_type_of(self, table: str) -> str | None:
        """The sharding type override of `table`, or None when the planner chooses."""
        return next((o.value for o in self.sharding_types if o.table == table), None)

    def compute_kernel_of(self, table: str) -> str | None:
        """The compute kernel override of `table`, or None when the planner chooses."""
        return next((o.value for o in self.compute_kernels if o.table == table), None)

    def tables(self) -> set[str]:
        """Every table named by an override."""
        return {o.table for o in (*self.sharding_types, *self.compute_kernels)}


@dataclass(frozen=True)
class HSTUConfig:
    """Everything needed to build and train the model."""

    model: ModelConfig = field(default_factory=ModelConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    sharding: ShardingConfig = field(default_factory=ShardingConfig)
    """Distribution of the embedding tables over ranks (`hstu_model.sharding.shard_model`)."""

    def __post_init__(self) -> None:
        known = (*ID_TABLES, *self.model.contextual_tables())
        for field_name in ("sharding_types", "compute_kernels"):
            options = getattr(self.sharding, field_name)
            unknown = sorted({o.table for o in options} - set(known))
            _require(
                not unknown,
                field_name,
                f"unknown table(s) {unknown}; the model's tables are {', '.join(known)}",
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def save_json(self, path: str | os.PathLike[str], **extra: Any) -> Path:
        """Write the config (plus `extra` top-level entries) as JSON, atomically."""
        text = json.dumps(self.to_dict() | extra, indent=2, sort_keys=True, default=str) + "\n"
        return atomic_write_text(path, text)

    def replace(self, **sections: Mapping[str, Any]) -> HSTUConfig:
        """A copy with fields of named sections replaced: `cfg.replace(model={"num_layers": 2})`."""
        updates = {}
        for section, values in sections.items():
            current = getattr(self, section, None)
            if current is None or not dataclasses.is_dataclass(current):
                raise ConfigError(f"unknown config section {section!r}")
            known = {f.name for f in dataclasses.fields(current)}
            unknown = sorted(set(values) - known)
            if unknown:
                raise ConfigError(f"{section}: unknown field(s) {', '.join(unknown)}")
            updates[section] = dataclasses.replace(current, **values)
        return dataclasses.replace(self, **updates)


YAMBDA_5B_CONTEXTUAL_FEATURES: tuple[ContextualFeature, ...] = (
    ContextualFeature("user_x_artist", 100_000_000),
    ContextualFeature("user_x_album", 40_000_000),
    ContextualFeature("user_x_hour", 24_000_000),
    ContextualFeature("item_x_hour", 40_000_000),
    ContextualFeature("artist_x_hour", 32_000_000),
    ContextualFeature("user_x_is_organic", 2_000_000),
    ContextualFeature("user_x_artist_x_hour", 40_000_000),
)
"""The reference's seven hashed cross features and their table sizes (facts.md section 3), in
its order; with the uid they are its 8 contextual tokens."""

TINY_CONTEXTUAL_FEATURES: tuple[ContextualFeature, ...] = tuple(
    ContextualFeature(f.name, max(f.num_embeddings // 10_000, 2_000))
    for f in YAMBDA_5B_CONTEXTUAL_FEATURES
)
"""The same crosses with 1/10,000 of the reference's rows, at least 2,000 (10,000 for
user_x_artist down to 2,000 for user_x_is_organic): small enough to train on a CPU."""


def yambda_5b() -> HSTUConfig:
    """The MLPerf DLRMv4 reference defaults (8 contextual tokens, 3 layers, batch 1024/rank,
    tables sharded over GPUs by the planner with an fp16 embedding all-to-all)."""
    return HSTUConfig(
        model=ModelConfig(
            contextual_seq_len=1 + len(YAMBDA_5B_CONTEXTUAL_FEATURES),
            contextual_features=YAMBDA_5B_CONTEXTUAL_FEATURES,
            history_length=4086,
            max_seq_len=4096,
            recompute_layers=True,
        ),
        optimizer=OptimizerConfig(),
        train=TrainConfig(batch_size=1024, eval_batch_size=1024, autocast_bf16=True),
        sharding=ShardingConfig(compute_device="cuda", fp16_all_to_all=True),
    )


def tiny() -> HSTUConfig:
    """A model that trains to a useful AUC on two CPU cores in about a minute.

    It sees each sample at most once in that time, so it runs without dropout.
    """
    return HSTUConfig(
        model=ModelConfig(
            embedding_dim=64,
            num_layers=2,
            num_heads=2,
            attention_dim=32,
            linear_dim=32,
            preprocessor_hidden_dim=64,
            max_seq_len=64,
            history_length=32,
            contextual_seq_len=1 + len(TINY_CONTEXTUAL_FEATURES),
            contextual_features=TINY_CONTEXTUAL_FEATURES,
            position_buckets=64,
            input_dropout=0.0,
            linear_dropout=0.0,
        ),
        optimizer=OptimizerConfig(dense_lr=2e-3, sparse_lr=0.2, warmup_steps=50),
        train=TrainConfig(batch_size=256, eval_batch_size=1024),
    )


def small() -> HSTUConfig:
    """A mid-size model between `tiny` and `yambda-5b` that still trains on a CPU.

    It keeps the reference's layer shape (3 STU layers of 4 heads) at half its width (D 256,
    per-head dims 64, preprocessor hidden 128) and an eighth of its sequence (history 512, 521
    tokens), over the `tiny` crosses. What it is for: benchmarks and checks in which attention
    is a real share of the step (20% of its model FLOPs, against 6% in `tiny` and 50% in
    `yambda-5b`) and the kernels see sequences of reference-like length, without a GPU. It
    costs 2.06 GFLOP per sample forward and 6.18 per training step (`hstu_model.flops`); see
    docs/benchmarks.md for what two CPU cores train it at. Like `tiny` it runs without
    dropout: a CPU run sees each sample at most once.
    """
    return HSTUConfig(
        model=ModelConfig(
            embedding_dim=256,
            num_layers=3,
            num_heads=4,
            attention_dim=64,
            linear_dim=64,
            preprocessor_hidden_dim=128,
            max_seq_len=528,
            history_length=512,
            contextual_seq_len=1 + len(TINY_CONTEXTUAL_FEATURES),
            contextual_features=TINY_CONTEXTUAL_FEATURES,
            position_buckets=528,
            input_dropout=0.0,
            linear_dropout=0.0,
        ),
        optimizer=OptimizerConfig(dense_lr=1e-3, sparse_lr=0.1, warmup_steps=100),
        train=TrainConfig(batch_size=32, eval_batch_size=128),
    )


PRESETS = {"yambda-5b": yambda_5b, "small": small, "tiny": tiny}

YAMBDA_5B_VOCAB: dict[str, int] = {
    "item_id": 9_390_624,
    "artist_id": 1_293_395,
    "album_id": 3_367_692,
    "uid": 1_000_001,
}
"""Rows of the id tables of the reference (facts.md section 3). The seven hashed cross tables are
part of the preset's config (`YAMBDA_5B_CONTEXTUAL_FEATURES`), not of the vocabulary."""

TINY_VOCAB: dict[str, int] = {"uid": 400, "item_id": 80_000, "artist_id": 8_000, "album_id": 20_000}
"""Default table rows for the `tiny` preset (the ones its benchmark trains with)."""

SMALL_VOCAB: dict[str, int] = {
    "uid": 2_000,
    "item_id": 100_000,
    "artist_id": 10_000,
    "album_id": 25_000,
}
"""Default table rows for the `small` preset (the ones its benchmark trains with)."""

DEFAULT_VOCABS: dict[str, dict[str, int]] = {
    "yambda-5b": YAMBDA_5B_VOCAB,
    "small": SMALL_VOCAB,
    "tiny": TINY_VOCAB,
}
"""Table rows `python -m hstu_model describe` uses for each preset unless --vocab says otherwise."""


def preset(name: str) -> HSTUConfig:
    """The named preset, or a ConfigError listing the known names."""
    try:
        return PRESETS[name]()
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}; known: {', '.join(sorted(PRESETS))}") from None


CLOSED_FREE_FIELDS: dict[str, tuple[str, ...]] = {
    "model": ("kernel", "recompute_layers"),
    "optimizer": ("dense_lr", "sparse_lr"),
    "train": ("batch_size", "eval_batch_size", "seed", "autocast_bf16"),
}
"""Fields of a closed run's config that may differ from the `yambda-5b` preset: the kernel
implementation and the activation recomputation (neither changes the function), the learning
rates (the compliance check of the log holds them to the rules'
band for the global batch), the batch sizes, the seed and the precision. Every `sharding` field
is free too (where the tables live does not change the function)."""


def reference_departures(config: HSTUConfig) -> list[str]:
    """What `config` changes in the reference's function or recipe: one `section.field=value
    (reference: value)` entry per field that differs from the `yambda-5b` preset and is not one
    of `CLOSED_FREE_FIELDS`. Empty for every config a closed run may train."""
    reference = yambda_5b()
    departures = []
    for section, free in CLOSED_FREE_FIELDS.items():
        ours, theirs = getattr(config, section), getattr(reference, section)
        for f in dataclasses.fields(ours):
            if f.name in free:
                continue
            value, expected = getattr(ours, f.name), getattr(theirs, f.name)
            if value != expected:
                departures.append(f"{section}.{f.name}={value!r} (reference: {expected!r})")
    return departures
