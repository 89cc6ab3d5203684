"""The MLPerf DLRMv4 reference model (`DlrmHSTU`), imported from a checkout and built at a shape.

The reference is never copied into this repository: `import_reference` imports it from the
checkout a caller names (the `recommendation_v4` directory of mlcommons/training, the one that
holds the `generative_recommenders` package). `build_config` and `build_tables` give it the
yambda-5b feature wiring (the same feature names, contextual features, merge mapping, action
weights and task as its own `get_hstu_configs("yambda-5b")`, which `check_wiring` compares
with) at the widths and table rows of a `ReferenceShape`; `build_model` builds it on CPU with
its PyTorch kernels. scripts/make_reference_fixtures.py (golden fixtures at tiny shapes) and
benchmarks/bench_train_step.py (the side-by-side training step) use it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import io
import sys
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from hstu_model.config import YAMBDA_5B_CONTEXTUAL_FEATURES, ModelConfig

MARKER = "generative_recommenders/modules/dlrm_hstu.py"

# Id tables and the features looked up in each; history feature first.
ID_TABLE_FEATURES: dict[str, tuple[str, ...]] = {
    "item_id": ("item_id", "item_candidate_id"),
    "artist_id": ("artist_id", "item_candidate_artist_id"),
    "album_id": ("album_id", "item_candidate_album_id"),
    "uid": ("uid",),
}
# The 7 hashed crosses, in the yambda-5b token order; each has a table of its own name.
CROSS_NAMES: list[str] = [f.name for f in YAMBDA_5B_CONTEXTUAL_FEATURES]

# The sequence features, the candidate features and how they pair up (yambda-5b).
UIH_SEQUENCE_KEYS = [
    "item_id",
    "artist_id",
    "album_id",
    "action_weight",
    "action_timestamp",
    "dummy_watch_time",
]
UIH_KEYS = ["uid", *CROSS_NAMES, *UIH_SEQUENCE_KEYS]  # the model's hstu_uih_feature_names
UIH_BATCH_KEYS = [*UIH_KEYS, "dummy_query_time"]  # the batch also carries the query time
CANDIDATE_KEYS = [
    "item_candidate_id",
    "item_candidate_artist_id",
    "item_candidate_album_id",
    "item_query_time",
    "item_action_weight",
    "item_dummy_watchtime",
]
MERGE_MAPPING = [
    ("item_id", "item_candidate_id"),
    ("artist_id", "item_candidate_artist_id"),
    ("album_id", "item_candidate_album_id"),
    ("action_weight", "item_action_weight"),
    ("action_timestamp", "item_query_time"),
    ("dummy_watch_time", "item_dummy_watchtime"),
]
ACTION_WEIGHTS = [1, 2, 4]  # listen_plus, like, skip bits
LISTEN_PLUS_BIT = 1

# Rows of the position and time tables, fixed inside the reference.
POSITION_TABLE_ROWS = 8192
TIME_TABLE_ROWS = 2048 + 1


@dataclasses.dataclass(frozen=True)
class ReferenceShape:
    """The widths and table rows of a reference model; the wiring is always yambda-5b's."""

    embedding_dim: int  # every table's dim and the transducer dim D
    num_heads: int
    attn_qk_dim: int
    attn_linear_dim: int
    num_layers: int
    preprocessor_hidden_dim: int
    max_seq_len: int
    max_num_candidates: int
    causal_multitask_weights: float
    table_rows: Mapping[str, int]  # every id table (ID_TABLE_FEATURES) and cross (CROSS_NAMES)


def shape_of(cfg: ModelConfig, vocab: Mapping[str, int]) -> ReferenceShape:
    """The reference shape that holds the weights of an `HSTURanker(cfg, vocab)`.

    Raises ValueError where `cfg` is not a model the reference can build: other crosses, action
    bits or position and time tables than the reference's, or dropout (which the reference
    would draw differently).
    """
    crosses = [f.name for f in cfg.contextual_features]
    problems = []
    if crosses != CROSS_NAMES:
        problems.append(f"contextual features {crosses} are not the yambda-5b crosses")
    if list(cfg.action_weights) != ACTION_WEIGHTS:
        problems.append(f"action_weights {cfg.action_weights} != {ACTION_WEIGHTS}")
    if cfg.position_buckets != POSITION_TABLE_ROWS:
        problems.append(f"position_buckets {cfg.position_buckets} != {POSITION_TABLE_ROWS}")
    if cfg.time_buckets + 1 != TIME_TABLE_ROWS:
        problems.append(f"time_buckets {cfg.time_buckets} != {TIME_TABLE_ROWS - 1}")
    if cfg.input_dropout or cfg.linear_dropout or cfg.attention_dropout:
        problems.append("dropout is not 0")
    if problems:
        raise ValueError("not a reference shape: " + "; ".join(problems))
    rows = {name: int(vocab[name]) for name in ID_TABLE_FEATURES}
    rows |= {f.name: f.num_embeddings for f in cfg.contextual_features}
    return ReferenceShape(
        embedding_dim=cfg.embedding_dim,
        num_heads=cfg.num_heads,
        attn_qk_dim=cfg.attention_dim,
        attn_linear_dim=cfg.linear_dim,
        num_layers=cfg.num_layers,
        preprocessor_hidden_dim=cfg.preprocessor_hidden_dim,
        max_seq_len=cfg.max_seq_len,
        max_num_candidates=cfg.num_candidates,
        causal_multitask_weights=cfg.loss_scale,
        table_rows=rows,
    )


def check_reference(root: Path) -> Path:
    """The resolved checkout root; exits with a one-line error when it is not the reference."""
    root = root.expanduser().resolve()
    if not (root / MARKER).is_file():
        print(
            f"error: --reference {root} does not contain {MARKER}; pass the reference's "
            "recommendation_v4 directory",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return root


class Reference(types.SimpleNamespace):
    """The reference's classes and helpers used here, imported from the checkout."""


IMPORT_NOTICES = ("WARNING: temporarily disabled some autotune configs for CUDA 12.8+",)
"""Lines the reference prints (print, not warnings) when its Triton attention module is
imported: notes on its own kernel configurations, nothing a user of ours can act on."""


def import_quietly(name: str) -> types.ModuleType:
    """`importlib.import_module(name)` without the reference's IMPORT_NOTICES on stdout; any
    other line it prints still reaches stdout, also when the import fails."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            return importlib.import_module(name)
    finally:
        lines = printed.getvalue().splitlines(keepends=True)
        sys.stdout.write("".join(x for x in lines if x.rstrip("\n") not in IMPORT_NOTICES))


def import_reference(root: Path) -> Reference:
    """Import the reference package from `root` (first on sys.path), fbgemm ops loaded first."""
    import fbgemm_gpu  # noqa: F401  (registers torch.ops.fbgemm.*)

    sys.path.insert(0, str(root))
    dlrm_hstu = import_quietly("generative_recommenders.modules.dlrm_hstu")
    loaded_from = Path(dlrm_hstu.__file__).resolve()
    if loaded_from != (root / MARKER).resolve():
        raise SystemExit(f"error: generative_recommenders was imported from {loaded_from}")
    common = importlib.import_module("generative_recommenders.common")
    multitask = importlib.import_module("generative_recommenders.modules.multitask_module")
    from torchrec import KeyedJaggedTensor
    from torchrec.modules.embedding_configs import DataType, EmbeddingConfig
    from torchrec.modules.embedding_modules import EmbeddingCollection

    return Reference(
        DlrmHSTU=dlrm_hstu.DlrmHSTU,
        DlrmHSTUConfig=dlrm_hstu.DlrmHSTUConfig,
        HammerKernel=common.HammerKernel,
        HammerModule=common.HammerModule,
        TaskConfig=multitask.TaskConfig,
        MultitaskTaskType=multitask.MultitaskTaskType,
        KeyedJaggedTensor=KeyedJaggedTensor,
        EmbeddingConfig=EmbeddingConfig,
        EmbeddingCollection=EmbeddingCollection,
        DataType=DataType,
    )


def forbid_triton() -> None:
    """Make any Triton kernel launch raise, so that a path left on Triton cannot go unnoticed."""
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    def refuse(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("a Triton kernel was launched; the reference must use PyTorch kernels")

    JITFunction.run = refuse  # type: ignore[method-assign]
    Autotuner.run = refuse  # type: ignore[method-assign]


# ---- Config ----


def build_config(ref: Reference, shape: ReferenceShape) -> Any:
    """A DlrmHSTUConfig with the yambda-5b wiring at `shape`."""
    return ref.DlrmHSTUConfig(
        max_seq_len=shape.max_seq_len,
        max_num_candidates=shape.max_num_candidates,
        max_num_candidates_inference=shape.max_num_candidates,
        hstu_num_heads=shape.num_heads,
        hstu_attn_linear_dim=shape.attn_linear_dim,
        hstu_attn_qk_dim=shape.attn_qk_dim,
        hstu_attn_num_layers=shape.num_layers,
        hstu_embedding_table_dim=shape.embedding_dim,
        hstu_preprocessor_hidden_dim=shape.preprocessor_hidden_dim,
        hstu_transducer_embedding_dim=shape.embedding_dim,
        hstu_group_norm=False,
        hstu_input_dropout_ratio=0.0,
        hstu_linear_dropout_rate=0.0,
        contextual_feature_to_max_length={"uid": 1, **dict.fromkeys(CROSS_NAMES, 1)},
        contextual_feature_to_min_uih_length={"uid": 0, **dict.fromkeys(CROSS_NAMES, 0)},
        candidates_weight_feature_name="item_action_weight",
        candidates_watchtime_feature_name="item_dummy_watchtime",
        candidates_querytime_feature_name="item_query_time",
        causal_multitask_weights=shape.causal_multitask_weights,
        multitask_configs=[
            ref.TaskConfig(
                task_name="listen_plus",
                task_weight=LISTEN_PLUS_BIT,
                task_type=ref.MultitaskTaskType.BINARY_CLASSIFICATION,
            )
        ],
        user_embedding_feature_names=["uid", *CROSS_NAMES, "item_id", "artist_id", "album_id"],
        item_embedding_feature_names=[
            "item_candidate_id",
            "item_candidate_artist_id",
            "item_candidate_album_id",
        ],
        uih_post_id_feature_name="item_id",
        uih_action_time_feature_name="action_timestamp",
        uih_weight_feature_name="action_weight",
        hstu_uih_feature_names=list(UIH_KEYS),
        hstu_candidate_feature_names=list(CANDIDATE_KEYS),
        merge_uih_candidate_feature_mapping=list(MERGE_MAPPING),
        action_weights=list(ACTION_WEIGHTS),
    )


def build_tables(ref: Reference, shape: ReferenceShape) -> dict[str, Any]:
    """The EmbeddingConfigs: the yambda-5b tables and features with `shape`'s row counts."""
    features = ID_TABLE_FEATURES | {name: (name,) for name in CROSS_NAMES}
    return {
        name: ref.EmbeddingConfig(
            num_embeddings=shape.table_rows[name],
            embedding_dim=shape.embedding_dim,
            name=name,
            data_type=ref.DataType.FP32,
            feature_names=list(names),
        )
        for name, names in features.items()
    }


WIRING_FIELDS = (
    "contextual_feature_to_max_length",
    "contextual_feature_to_min_uih_length",
    "candidates_weight_feature_name",
    "candidates_watchtime_feature_name",
    "candidates_querytime_feature_name",
    "causal_multitask_weights",
    "multitask_configs",
    "user_embedding_feature_names",
    "item_embedding_feature_names",
    "uih_post_id_feature_name",
    "uih_action_time_feature_name",
    "uih_weight_feature_name",
    "hstu_uih_feature_names",
    "hstu_candidate_feature_names",
    "merge_uih_candidate_feature_mapping",
    "action_weights",
    "action_embedding_init_std",
    "enable_postprocessor",
    "use_layer_norm_postprocessor",
    "hstu_group_norm",
)


def _passthrough_configurable(fn: Any = None, *_args: Any, **_kwargs: Any) -> Any:
    return fn if callable(fn) else (lambda f: f)


def check_wiring(cfg: Any, tables: dict[str, Any]) -> None:
    """Compare our wiring with the reference's own `get_hstu_configs("yambda-5b")`.

    The reference's configs module imports gin only to decorate its functions; when gin is not
    installed a pass-through stand-in is used for that one import.
    """
    stub = None
    if importlib.util.find_spec("gin") is None:
        stub = types.ModuleType("gin")
        stub.configurable = _passthrough_configurable  # type: ignore[attr-defined]
        sys.modules["gin"] = stub
    try:
        configs = importlib.import_module("generative_recommenders.dlrm_v4.configs")
    finally:
        if stub is not None and sys.modules.get("gin") is stub:
            del sys.modules["gin"]
    theirs = configs.get_hstu_configs("yambda-5b")
    for field in WIRING_FIELDS:
        a, b = getattr(cfg, field), getattr(theirs, field)
        if a != b:
            raise SystemExit(f"error: wiring differs from yambda-5b in {field}: {a!r} != {b!r}")
    if [n for n, *_ in configs.YAMBDA_5B_CROSS_SPECS] != CROSS_NAMES:
        raise SystemExit("error: the cross features differ from YAMBDA_5B_CROSS_SPECS")
    their_tables = configs.get_embedding_table_config("yambda-5b")
    ours = {n: list(t.feature_names) for n, t in tables.items()}
    if ours != {n: list(t.feature_names) for n, t in their_tables.items()}:
        raise SystemExit("error: the embedding tables differ from yambda-5b's")


# ---- Model ----


def build_model(ref: Reference, cfg: Any, tables: dict[str, Any], seed: int) -> Any:
    """The seeded reference model on CPU, with its PyTorch kernels.

    The reference builds its EmbeddingCollection on the meta device; the same tables are made
    on CPU here, filled like its own table init (uniform in +-sqrt(1 / rows)) from a generator
    seeded with `seed + 1`.
    """
    torch.manual_seed(seed)
    model = ref.DlrmHSTU(
        hstu_configs=cfg, embedding_tables=tables, is_inference=False, bf16_training=False
    )
    model._embedding_collection = ref.EmbeddingCollection(
        tables=list(tables.values()), need_indices=False, device=torch.device("cpu")
    )
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, config in tables.items():
            bound = (1.0 / config.num_embeddings) ** 0.5
            weight = model._embedding_collection.embeddings[name].weight
            weight.copy_(torch.rand(weight.shape, generator=gen) * (2 * bound) - bound)
    model.set_hammer_kernel(ref.HammerKernel.PYTORCH)
    for name, module in model.named_modules():
        if isinstance(module, ref.HammerModule) and module.hammer_kernel() is not (
            ref.HammerKernel.PYTORCH
        ):
            raise SystemExit(f"error: module {name!r} does not use the PyTorch kernels")
    # The reference selects additional (non-post-id) features by string identity.
    if model._additional_embedding_features != ["artist_id", "album_id"]:
        raise SystemExit(f"error: unexpected {model._additional_embedding_features=}")
    return model
