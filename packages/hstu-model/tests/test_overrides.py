import json
import sys

import pytest

from hstu_model import ConfigError, HSTURanker, flops, preset
from hstu_model.__main__ import build_parser, main
from hstu_model.config import SMALL_VOCAB, TINY_VOCAB, YAMBDA_5B_VOCAB
from hstu_model.memory import dense_parameter_count
from hstu_model.overrides import (
    env_overrides,
    load_overrides_file,
    parse_cli_overrides,
    resolve_config,
)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_file_formats_agree(tmp_path):
    toml = write(
        tmp_path,
        "c.toml",
        '[model]\nnum_layers = 2\naction_weights = [1, 2, 4]\n[model.features]\nuid = "user"\n'
        "[optimizer]\ndense_lr = 1\n[train]\nautocast_bf16 = true\n",
    )
    data = {
        "model": {"num_layers": 2, "action_weights": [1, 2, 4], "features": {"uid": "user"}},
        "optimizer": {"dense_lr": 1},
        "train": {"autocast_bf16": True},
    }
    js = write(tmp_path, "c.json", json.dumps(data))
    yml = write(
        tmp_path,
        "c.yaml",
        "model:\n  num_layers: 2\n  action_weights: [1, 2, 4]\n  features: {uid: user}\n"
        "optimizer: {dense_lr: 1}\ntrain: {autocast_bf16: true}\n",
    )
    expected = {
        "model": {"num_layers": 2, "action_weights": (1, 2, 4), "features": {"uid": "user"}},
        "optimizer": {"dense_lr": 1.0},
        "train": {"autocast_bf16": True},
    }
    for path in (toml, js, yml):
        assert load_overrides_file(path) == expected
    cfg = resolve_config("tiny", file=toml, environ={})
    assert cfg.model.features.uid == "user" and cfg.model.features.item_id == "item_id"


def test_yaml_without_pyyaml_names_file(tmp_path, monkeypatch):
    path = write(tmp_path, "c.yml", "model: {num_layers: 2}\n")
    monkeypatch.setitem(sys.modules, "yaml", None)
    with pytest.raises(ConfigError, match=r"c\.yml: YAML config files need PyYAML"):
        load_overrides_file(path)


def test_env_and_cli_values_are_typed():
    env = {
        "HSTU_MODEL__NUM_LAYERS": "2",
        "HSTU_OPTIMIZER__DENSE_LR": "1e-3",
        "HSTU_OPTIMIZER__BETAS": "0.9,0.99",
        "HSTU_TRAIN__AUTOCAST_BF16": "yes",
        "HSTU_MODEL__FEATURES__UID": "user",
        "HSTU_OPS_CUDA": "ON",
        "PATH": "/bin",
    }
    assert env_overrides(env) == {
        "model": {"num_layers": 2, "features": {"uid": "user"}},
        "optimizer": {"dense_lr": 1e-3, "betas": (0.9, 0.99)},
        "train": {"autocast_bf16": True},
    }
    assert parse_cli_overrides(
        ["model.action_weights=[1,2,8]", "model.kernel=native", "train.seed=3"]
    ) == {"model": {"action_weights": (1, 2, 8), "kernel": "native"}, "train": {"seed": 3}}


def test_two_spellings_of_one_variable_are_refused_naming_both():
    """Names are case-insensitive: HSTU_MODEL__NUM_LAYERS and HSTU_model__num_layers set one
    field, and which was meant is unknown."""
    env = {"HSTU_MODEL__NUM_LAYERS": "2", "HSTU_model__num_layers": "5"}
    with pytest.raises(ConfigError, match=r"HSTU_MODEL__NUM_LAYERS and environment variable "):
        env_overrides(env)


def test_precedence_cli_over_env_over_file(tmp_path):
    path = write(tmp_path, "c.toml", "[model]\nnum_layers = 4\n[train]\nseed = 1\n")
    env = {"HSTU_MODEL__NUM_LAYERS": "5", "HSTU_TRAIN__SEED": "2"}
    cfg = resolve_config("tiny", file=path, environ=env, cli=["model.num_layers=6"])
    assert cfg.model.num_layers == 6  # set in all three places: the command line wins
    assert cfg.train.seed == 2  # environment beats file
    only_file = resolve_config("tiny", file=path, environ={})
    assert (only_file.model.num_layers, only_file.train.seed) == (4, 1)
    assert resolve_config("tiny", environ={}).model.num_layers == preset("tiny").model.num_layers


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"environ": {"HSTU_MODEL__NUM_LAYERS": "two"}}, r"HSTU_MODEL__NUM_LAYERS: .*num_layers"),
        ({"environ": {"HSTU_MODEL__LAYERS": "2"}}, r"HSTU_MODEL__LAYERS: model: unknown field"),
        ({"environ": {"HSTU_MODLE__NUM_LAYERS": "2"}}, r"HSTU_MODLE__NUM_LAYERS: unknown .*sect"),
        ({"environ": {"HSTU_TRAIN__AUTOCAST_BF16": "maybe"}}, r"HSTU_TRAIN__AUTOCAST_BF16: .*b"),
        ({"environ": {"HSTU_MODEL__NUM_LAYERS": "0"}}, r"HSTU_MODEL__NUM_LAYERS: num_layers: "),
        ({"cli": ["model.num_layers=2.5"]}, r"'model.num_layers=2.5': model.num_layers: expec"),
        ({"cli": ["model.num_layers"]}, r"'model.num_layers': expected section.field=value"),
        ({"cli": ["model.features.nope=x"]}, r"'model.features.nope=x': model.features: unkn"),
        ({"cli": ["optimizer.betas=0.9,1.0"]}, r"'optimizer.betas=0.9,1.0': betas: "),
        ({"cli": ["train.seed.x=1"]}, r"'train.seed.x=1': train.seed.x: seed has no sub-fields"),
    ],
)
def test_errors_name_source_and_field(kwargs, pattern):
    kwargs.setdefault("environ", {})
    with pytest.raises(ConfigError, match=pattern):
        resolve_config("tiny", **kwargs)


@pytest.mark.parametrize(
    ("name", "text", "pattern"),
    [
        ("c.toml", "[model]\nnum_layers = 'x'\n", r"c\.toml: model\.num_layers: expected int"),
        ("c.toml", "[model]\nnum_layers = true\n", r"c\.toml: model\.num_layers: expected int"),
        ("c.json", '{"model": {"layers": 2}}', r"c\.json: model: unknown field 'layers'"),
        ("c.json", '{"model": {"num_layers": 0}}', r"c\.json: num_layers: must be >= 1"),
        ("c.json", "{not json", r"c\.json: cannot parse json"),
        ("c.ini", "", r"c\.ini: unknown config file type"),
        ("c.yaml", "- 1\n", r"c\.yaml: expected a mapping"),
        (
            "c.yaml",
            "model: [1, 2]\n",
            r"c\.yaml: model: expected a mapping of its fields, got list",
        ),
        # A file has its own types: a quoted number is refused, not parsed.
        ("c.toml", '[model]\nnum_layers = "3"\n', r"num_layers: expected int, got the string '3'"),
        (
            "c.json",
            '{"optimizer": {"betas": "0.9,0.99"}}',
            r"betas: expected tuple, got the string",
        ),
        (
            "c.yaml",
            "optimizer: {dense_lr: 1e-6}\n",
            r"dense_lr: .*YAML reads a number such as 1e-6",
        ),
    ],
)
def test_file_errors_name_file_and_field(tmp_path, name, text, pattern):
    path = write(tmp_path, name, text)
    with pytest.raises(ConfigError, match=pattern):
        resolve_config("tiny", file=path, environ={})


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.toml: cannot read"):
        resolve_config("tiny", file=tmp_path / "nope.toml", environ={})


def run_describe(capsys, *argv):
    assert main(["describe", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_describe_tiny_counts_match_a_built_model(capsys, monkeypatch):
    monkeypatch.delenv("HSTU_MODEL__NUM_LAYERS", raising=False)
    vocab = {"uid": 7, "item_id": 30, "artist_id": 5, "album_id": 9}
    text = ",".join(f"{k}={v}" for k, v in vocab.items())
    out = run_describe(capsys, "--preset", "tiny", "--vocab", text, "--set", "model.num_layers=1")
    cfg = preset("tiny").replace(model={"num_layers": 1})
    assert out["config"] == json.loads(json.dumps(cfg.to_dict()))
    model = HSTURanker(cfg.model, vocab)
    dim = cfg.model.embedding_dim
    assert out["embedding_tables"] == [
        {"name": t.name, "rows": t.num_embeddings, "dim": dim, "features": list(t.feature_names)}
        for t in model.tables
    ]
    params = out["parameters"]
    assert params["embedding_total"] == sum(p.numel() for p in model.embedding_parameters())
    assert params["dense"] == sum(p.numel() for p in model.dense_parameters())
    assert params["total"] == sum(p.numel() for p in model.parameters())
    assert out["notes"] == []


def test_dense_count_does_not_depend_on_vocab():
    cfg = preset("tiny").model
    small = HSTURanker(cfg, {"uid": 1, "item_id": 1, "artist_id": 1, "album_id": 1})
    large = HSTURanker(cfg, TINY_VOCAB)
    counts = {sum(p.numel() for p in m.dense_parameters()) for m in (small, large)}
    assert counts == {dense_parameter_count(cfg)}


def test_describe_yambda_5b_lists_all_eleven_tables(capsys, reference_table_rows):
    out = run_describe(capsys, "--preset", "yambda-5b")
    rows = {t["name"]: t["rows"] for t in out["embedding_tables"]}
    expected = reference_table_rows
    assert rows == expected and list(rows) == list(expected)
    assert {k: rows[k] for k in YAMBDA_5B_VOCAB} == YAMBDA_5B_VOCAB
    features = {t["name"]: t["features"] for t in out["embedding_tables"]}
    assert features["item_id"] == ["item_id", "item_candidate_id"]
    assert features["user_x_artist"] == ["user_x_artist"]
    assert all(t["dim"] == 512 for t in out["embedding_tables"])
    params = out["parameters"]
    assert params["embedding"] == {name: n * 512 for name, n in expected.items()}
    assert params["embedding_total"] == 293_051_712 * 512
    assert params["dense"] == dense_parameter_count(preset("yambda-5b").model) > 0
    assert params["total"] == params["embedding_total"] + params["dense"]
    assert out["config"]["model"]["contextual_seq_len"] == 8
    assert out["notes"] == []


def test_describe_counts_the_contextual_projection_per_token(capsys):
    eight = run_describe(capsys, "--preset", "tiny")
    one = run_describe(
        capsys,
        "--preset",
        "tiny",
        "--set",
        "model.contextual_features=",
        "--set",
        "model.contextual_seq_len=1",
    )
    dim = preset("tiny").model.embedding_dim
    assert [t["name"] for t in one["embedding_tables"]] == [
        "item_id",
        "artist_id",
        "album_id",
        "uid",
    ]
    assert eight["parameters"]["dense"] - one["parameters"]["dense"] == 7 * (dim * dim + dim)


def test_describe_has_the_flops_per_sample(capsys):
    out = run_describe(capsys, "--preset", "tiny", "--set", "model.num_layers=1")
    cfg = preset("tiny").replace(model={"num_layers": 1})
    section = out["flops_per_sample"]
    assert section == json.loads(json.dumps(flops.summary(cfg.model)))
    count = flops.flops_per_sample(cfg.model)
    assert section["forward"]["total"] == count.forward_total
    assert section["train_step"]["total"] == 3 * count.forward_total
    assert section["forward"]["embedding_lookups"] == 0


def test_describe_small_preset(capsys):
    out = run_describe(capsys, "--preset", "small")
    assert out["preset"] == "small"
    rows = {t["name"]: t["rows"] for t in out["embedding_tables"]}
    assert {k: rows[k] for k in SMALL_VOCAB} == SMALL_VOCAB
    assert all(t["dim"] == 256 for t in out["embedding_tables"])
    assert out["config"]["model"]["history_length"] == 512
    assert out["parameters"]["dense"] == dense_parameter_count(preset("small").model)
    assert out["flops_per_sample"]["sequence"]["tokens"] == 521
    assert out["flops_per_sample"]["train_step"]["total"] == 6_177_472_512


def test_describe_reports_errors(capsys):
    assert main(["describe", "--preset", "tiny", "--set", "model.layers=2"]) == 2
    assert "'model.layers=2': model: unknown field 'layers'" in capsys.readouterr().err
    assert main(["describe", "--preset", "tiny", "--vocab", "users=3"]) == 2
    assert "unknown table(s) users" in capsys.readouterr().err
    assert main(["describe", "--preset", "tiny", "--vocab", "user_x_hour=3"]) == 2
    assert "contextual tables take their rows from model.contextual_features" in (
        capsys.readouterr().err
    )
    bad = ["--set", "model.contextual_features=user_x_hour=5"]
    assert main(["describe", "--preset", "tiny", *bad]) == 2
    assert "contextual_seq_len: must equal the number of contextual tokens" in (
        capsys.readouterr().err
    )


def test_cli_surface_is_frozen():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert sorted(sub.choices) == ["describe"]
    options = [(a.option_strings, a.dest) for a in sub.choices["describe"]._actions]
    assert options == [
        (["-h", "--help"], "help"),
        (["--preset"], "preset"),
        (["--config"], "config"),
        (["--set"], "overrides"),
        (["--vocab"], "vocab"),
    ]


def test_contextual_features_from_every_layer(tmp_path):
    toml = write(
        tmp_path,
        "c.toml",
        "[model]\ncontextual_seq_len = 3\n"
        '[[model.contextual_features]]\nname = "user_x_artist"\nnum_embeddings = 100\n'
        '[[model.contextual_features]]\nname = "user_x_hour"\nnum_embeddings = 24\n',
    )
    js = write(
        tmp_path,
        "c.json",
        json.dumps(
            {
                "model": {
                    "contextual_seq_len": 3,
                    "contextual_features": [
                        {"name": "user_x_artist", "num_embeddings": 100},
                        "user_x_hour=24",
                    ],
                }
            }
        ),
    )
    expected = {"user_x_artist": 100, "user_x_hour": 24}
    for path in (toml, js):
        assert resolve_config("tiny", file=path, environ={}).model.contextual_tables() == expected
    env = {"HSTU_MODEL__CONTEXTUAL_FEATURES": "a=1_000,b=7", "HSTU_MODEL__CONTEXTUAL_SEQ_LEN": "3"}
    assert resolve_config("tiny", environ=env).model.contextual_tables() == {"a": 1000, "b": 7}
    cli = ["model.contextual_features=[a=5]", "model.contextual_seq_len=2"]
    assert resolve_config("tiny", environ={}, cli=cli).model.contextual_tables() == {"a": 5}
    # The saved form of a config (to_dict, then JSON) reads back as an overrides file.
    saved = preset("yambda-5b").save_json(tmp_path / "saved.json")
    model = json.loads(saved.read_text())["model"]
    path = write(
        tmp_path,
        "back.json",
        json.dumps(
            {
                "model": {
                    "contextual_features": model["contextual_features"],
                    "contextual_seq_len": model["contextual_seq_len"],
                }
            }
        ),
    )
    back = resolve_config("tiny", file=path, environ={}).model
    assert back.contextual_features == preset("yambda-5b").model.contextual_features


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        (
            {"cli": ["model.contextual_features=a"]},
            r"model\.contextual_features: expected name=rows, got 'a'",
        ),
        (
            {"cli": ["model.contextual_features=a=x"]},
            r"expected name=rows, got 'a=x'",
        ),
        (
            {"cli": ["model.contextual_features=a=0", "model.contextual_seq_len=2"]},
            r"ContextualFeature\[a\]\.num_embeddings: must be an int >= 1",
        ),
        (
            {"cli": ["model.contextual_features=a=1,a=2", "model.contextual_seq_len=3"]},
            r"contextual_features: duplicate name\(s\) \['a'\]",
        ),
        (
            {"cli": ["model.contextual_features=item_id=9", "model.contextual_seq_len=2"]},
            r"contextual_features: name\(s\) \['item_id'\] already name",
        ),
        (
            {"environ": {"HSTU_MODEL__CONTEXTUAL_SEQ_LEN": "2"}},
            r"HSTU_MODEL__CONTEXTUAL_SEQ_LEN: contextual_seq_len: must equal .* = 8, got 2",
        ),
    ],
)
def test_contextual_feature_errors_name_source_and_field(kwargs, pattern):
    kwargs.setdefault("environ", {})
    with pytest.raises(ConfigError, match=pattern):
        resolve_config("tiny", **kwargs)


def test_contextual_feature_file_errors(tmp_path):
    path = write(
        tmp_path, "c.json", json.dumps({"model": {"contextual_features": [{"name": "a"}]}})
    )
    with pytest.raises(ConfigError, match=r"c\.json: model\.contextual_features: .*exactly"):
        resolve_config("tiny", file=path, environ={})
    path = write(
        tmp_path,
        "d.json",
        json.dumps({"model": {"contextual_features": [{"name": "a", "num_embeddings": 1.5}]}}),
    )
    with pytest.raises(ConfigError, match=r"d\.json: model\.contextual_features: expected int"):
        resolve_config("tiny", file=path, environ={})


BILLION_LAUGHS = (
    "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    + "".join(
        f"{name}: &{name} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, "
        f"*{prev}, *{prev}]\n"
        for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
    )
    + "model: {num_layers: *i}\n"
)


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        # 10^9 values in about 700 bytes: refused before anything walks them.
        (BILLION_LAUGHS, r"c\.yaml: cannot parse yaml config: its aliases expand to more than"),
        ("model: &m [*m]\n", r"c\.yaml: model: expected a mapping of its fields, got list"),
        (
            "model: {num_layers: 2\n",
            r"c\.yaml: cannot parse yaml config: expected ',' or '}'.* at line 2, column 1$",
        ),
        ("model:\n  - [\n", r"c\.yaml: cannot parse yaml config: .* at line 3, column 1$"),
        (
            "model: " + "[" * 5000 + "]" * 5000 + "\n",
            r"c\.yaml: cannot parse yaml config: nested too deep",
        ),
    ],
)
def test_hostile_yaml_is_refused_in_one_line(tmp_path, text, pattern):
    path = write(tmp_path, "c.yaml", text)
    with pytest.raises(ConfigError, match=pattern) as caught:
        resolve_config("tiny", file=path, environ={})
    assert "\n" not in str(caught.value)


def test_yaml_aliases_within_the_bound_still_work(tmp_path):
    path = write(tmp_path, "c.yaml", "base: &n 3\nmodel: {num_layers: *n}\n")
    with pytest.raises(ConfigError, match=r"base"):  # an unknown section, named: not the alias
        resolve_config("tiny", file=path, environ={})
    path = write(tmp_path, "d.yaml", "model: &m {num_layers: 3}\n")
    assert resolve_config("tiny", file=path, environ={}).model.num_layers == 3
