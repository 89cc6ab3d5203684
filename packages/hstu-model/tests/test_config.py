import pytest

from hstu_model import (
    ConfigError,
    ContextualFeature,
    FeatureNames,
    ModelConfig,
    OptimizerConfig,
    TrainConfig,
    preset,
)
from hstu_model.config import (
    DEFAULT_VOCABS,
    PRESETS,
    TINY_CONTEXTUAL_FEATURES,
    YAMBDA_5B_CONTEXTUAL_FEATURES,
)
from hstu_model.flops import flops_per_sample

CROSS_NAMES = [
    "user_x_artist",
    "user_x_album",
    "user_x_hour",
    "item_x_hour",
    "artist_x_hour",
    "user_x_is_organic",
    "user_x_artist_x_hour",
]


def test_sequence_budget_error_names_max_seq_len():
    with pytest.raises(ConfigError, match=r"max_seq_len: .*= 4088 must fit max_seq_len = 4086"):
        ModelConfig(
            history_length=4086, contextual_seq_len=1, max_seq_len=4086, position_buckets=8192
        )


@pytest.mark.parametrize(
    ("cls", "kwargs", "field"),
    [
        (ModelConfig, {"num_heads": 0}, "num_heads"),
        (ModelConfig, {"input_dropout": 1.0}, "input_dropout"),
        (ModelConfig, {"action_weights": (1, 1)}, "action_weights"),
        (ModelConfig, {"task_weights": (1.0, 2.0)}, "task_weights"),
        (ModelConfig, {"kernel": "cuda"}, "kernel"),
        (OptimizerConfig, {"dense_lr": 0.0}, "dense_lr"),
        (OptimizerConfig, {"betas": (0.9, 1.0)}, "betas"),
        (TrainConfig, {"batch_size": 0}, "batch_size"),
    ],
)
def test_invalid_field_is_named(cls, kwargs, field):
    with pytest.raises(ConfigError, match=rf"^{field}: "):
        cls(**kwargs)


def test_yambda_5b_preset_matches_reference_defaults():
    cfg = preset("yambda-5b")
    m, o, t = cfg.model, cfg.optimizer, cfg.train
    assert (m.embedding_dim, m.num_layers, m.num_heads, m.attention_dim, m.linear_dim) == (
        512,
        3,
        4,
        128,
        128,
    )
    assert (m.preprocessor_hidden_dim, m.max_seq_len, m.history_length) == (256, 4096, 4086)
    assert m.contextual_seq_len + m.history_length + m.num_candidates <= m.max_seq_len
    assert (m.input_dropout, m.linear_dropout) == (0.2, 0.1)
    assert m.action_weights == (1, 2, 4)
    assert (m.position_buckets, m.time_buckets) == (8192, 2048)
    assert (o.dense_lr, o.sparse_lr, o.betas, o.eps, o.weight_decay) == (
        1e-6,
        1e-6,
        (0.95, 0.999),
        1e-8,
        0.0,
    )
    assert (o.warmup_steps, o.grad_clip_norm) == (24_000, 1.0)
    assert t.batch_size == 1024 and t.autocast_bf16


def test_unknown_preset_lists_known_ones():
    with pytest.raises(ConfigError, match="known: small, tiny, yambda-5b"):
        preset("huge")


def test_small_preset_sits_between_tiny_and_yambda_5b():
    tiny, small, big = (preset(name) for name in ("tiny", "small", "yambda-5b"))
    m = small.model
    assert (m.embedding_dim, m.num_layers, m.num_heads, m.attention_dim, m.linear_dim) == (
        256,
        3,
        4,
        64,
        64,
    )
    assert (m.preprocessor_hidden_dim, m.history_length, m.max_seq_len) == (128, 512, 528)
    assert m.contextual_seq_len + m.history_length + m.num_candidates <= m.max_seq_len
    assert m.position_buckets >= m.max_seq_len
    for name in ("embedding_dim", "history_length", "max_seq_len", "preprocessor_hidden_dim"):
        assert getattr(tiny.model, name) < getattr(m, name) < getattr(big.model, name), name
    assert m.num_layers == big.model.num_layers and m.num_heads == big.model.num_heads
    train = [flops_per_sample(c.model).train_total for c in (tiny, small, big)]
    assert train == sorted(train)
    # Trains on a CPU (like tiny): no GPU sharding, fp32, a CPU-sized batch, a usable lr.
    assert small.sharding.compute_device == "cpu" and not small.sharding.fp16_all_to_all
    assert not small.train.autocast_bf16 and small.train.batch_size <= tiny.train.batch_size
    assert small.optimizer.dense_lr > big.optimizer.dense_lr
    assert small.optimizer.warmup_steps < big.optimizer.warmup_steps


def test_every_preset_has_default_vocab():
    assert sorted(DEFAULT_VOCABS) == sorted(PRESETS) == ["small", "tiny", "yambda-5b"]
    for name, vocab in DEFAULT_VOCABS.items():
        assert sorted(vocab) == ["album_id", "artist_id", "item_id", "uid"], name


def test_replace_rejects_unknown_field_and_revalidates():
    cfg = preset("tiny")
    with pytest.raises(ConfigError, match="model: unknown field"):
        cfg.replace(model={"layers": 3})
    with pytest.raises(ConfigError, match="num_layers"):
        cfg.replace(model={"num_layers": 0})
    assert cfg.replace(train={"seed": 7}).train.seed == 7


def test_warmup_is_linear_from_zero():
    opt = OptimizerConfig(warmup_steps=4)
    assert [opt.lr_factor(s) for s in range(6)] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    assert OptimizerConfig(warmup_steps=0).lr_factor(0) == 1.0


def test_save_json_round_trips_with_extra_entries(tmp_path):
    import json

    cfg = preset("tiny")
    path = cfg.save_json(tmp_path / "config.json", run={"seed": 3})
    saved = json.loads(path.read_text())
    assert saved["run"] == {"seed": 3}
    assert saved["model"]["history_length"] == cfg.model.history_length
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]


def test_presets_have_the_reference_contextual_features():
    big, tiny, small = preset("yambda-5b").model, preset("tiny").model, preset("small").model
    assert big.contextual_seq_len == tiny.contextual_seq_len == small.contextual_seq_len == 8
    assert small.contextual_features == TINY_CONTEXTUAL_FEATURES
    assert big.contextual_tables() == {
        "user_x_artist": 100_000_000,
        "user_x_album": 40_000_000,
        "user_x_hour": 24_000_000,
        "item_x_hour": 40_000_000,
        "artist_x_hour": 32_000_000,
        "user_x_is_organic": 2_000_000,
        "user_x_artist_x_hour": 40_000_000,
    }
    assert big.contextual_features == YAMBDA_5B_CONTEXTUAL_FEATURES
    assert tiny.contextual_features == TINY_CONTEXTUAL_FEATURES
    assert list(big.contextual_tables()) == list(tiny.contextual_tables()) == CROSS_NAMES
    for name, rows in tiny.contextual_tables().items():
        assert 2_000 <= rows <= 10_000, name
        assert rows == max(big.contextual_tables()[name] // 10_000, 2_000)
    # The default model has the uid as its only contextual token.
    assert ModelConfig().contextual_seq_len == 1 and ModelConfig().contextual_tables() == {}


def test_contextual_seq_len_must_match_the_features():
    one = (ContextualFeature("user_x_hour", 24),)
    assert ModelConfig(contextual_seq_len=2, contextual_features=one).contextual_tables() == {
        "user_x_hour": 24
    }
    with pytest.raises(
        ConfigError,
        match=r"^contextual_seq_len: must equal the number of contextual tokens, 1 \(the uid\) "
        r"\+ len\(contextual_features\) = 2, got 8",
    ):
        ModelConfig(contextual_seq_len=8, contextual_features=one)
    with pytest.raises(ConfigError, match=r"^contextual_seq_len: .* = 1, got 0"):
        ModelConfig(contextual_seq_len=0)
    with pytest.raises(ConfigError, match=r"^contextual_seq_len: .* = 8, got 1"):
        preset("tiny").replace(model={"contextual_seq_len": 1})


@pytest.mark.parametrize(
    ("features", "pattern"),
    [
        (
            (ContextualFeature("a", 5), ContextualFeature("a", 6)),
            r"^contextual_features: duplicate name\(s\) \['a'\]",
        ),
        ((ContextualFeature("uid", 5),), r"^contextual_features: name\(s\) \['uid'\] already"),
        (
            (ContextualFeature("item_candidate_id", 5),),
            r"^contextual_features: name\(s\) \['item_candidate_id'\] already",
        ),
        ([ContextualFeature("a", 5)], r"^contextual_features: must be a tuple of Contextual"),
        ((("a", 5),), r"^contextual_features: must be a tuple of ContextualFeature"),
    ],
)
def test_contextual_feature_names_are_checked(features, pattern):
    with pytest.raises(ConfigError, match=pattern):
        ModelConfig(contextual_seq_len=1 + len(features), contextual_features=features)


def test_contextual_names_may_not_shadow_renamed_inputs():
    with pytest.raises(ConfigError, match=r"\['user'\] already name"):
        ModelConfig(
            contextual_seq_len=2,
            contextual_features=(ContextualFeature("user", 3),),
            features=FeatureNames(uid="user"),
        )


def test_contextual_feature_is_validated_and_parsed():
    with pytest.raises(ConfigError, match=r"^ContextualFeature\[a\]\.num_embeddings: must be"):
        ContextualFeature("a", 0)
    with pytest.raises(ConfigError, match=r"^ContextualFeature\.name: must be a non-empty"):
        ContextualFeature("", 3)
    with pytest.raises(ConfigError, match=r"num_embeddings: must be an int >= 1, got True"):
        ContextualFeature("a", True)
    assert ContextualFeature.parse(" user_x_hour = 24_000 ") == ContextualFeature(
        "user_x_hour", 24_000
    )
    with pytest.raises(ConfigError, match=r"^contextual_features: expected name=rows, got 'x'"):
        ContextualFeature.parse("x")
