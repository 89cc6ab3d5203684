"""ShardingConfig: validation, presets, and the override layers (file, environment, CLI)."""

import json

import pytest

from hstu_model import ConfigError, HSTUConfig, preset
from hstu_model.config import ShardingConfig, TableOption
from hstu_model.overrides import parse_cli_overrides, resolve_config


def options(text):
    return tuple(TableOption.parse(item) for item in text.split(","))


def test_defaults_and_presets():
    assert HSTUConfig().sharding == ShardingConfig()
    tiny = preset("tiny").sharding
    assert (tiny.compute_device, tiny.fp16_all_to_all) == ("cpu", False)
    assert tiny.sharding_types == tiny.compute_kernels == () and tiny.hbm_cap_gb == 0
    big = preset("yambda-5b").sharding
    assert (big.compute_device, big.fp16_all_to_all) == ("cuda", True)


def test_lookups():
    cfg = ShardingConfig(
        compute_device="cuda",
        sharding_types=options("item_id=row_wise,uid=data_parallel"),
        compute_kernels=options("album_id=fused_uvm_caching"),
    )
    assert cfg.sharding_type_of("item_id") == "row_wise"
    assert cfg.sharding_type_of("album_id") is None
    assert cfg.compute_kernel_of("album_id") == "fused_uvm_caching"
    assert cfg.tables() == {"item_id", "uid", "album_id"}


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"compute_device": "tpu"}, r"^compute_device: must be one of cpu, cuda"),
        (
            {"sharding_types": options("item_id=grid")},
            r"^sharding_types: item_id=grid: unknown value 'grid'; allowed: row_wise, "
            r"column_wise, table_wise, data_parallel",
        ),
        (
            {"sharding_types": options("item_id=row_wise,item_id=table_wise")},
            r"^sharding_types: table\(s\) \['item_id'\] given more than once",
        ),
        (
            {"compute_kernels": options("item_id=dense")},
            r"^compute_kernels: item_id=dense: unknown value 'dense'",
        ),
        (
            {"compute_kernels": options("item_id=fused_uvm_caching")},
            r"^compute_kernels: item_id=fused_uvm_caching needs compute_device cuda",
        ),
        (
            {"sharding_types": options("uid=data_parallel")},
            r"^sharding_types: uid: data_parallel needs compute_device cuda: on CPU fbgemm",
        ),
        (
            {
                "compute_device": "cuda",
                "sharding_types": options("uid=data_parallel"),
                "compute_kernels": options("uid=fused"),
            },
            r"^compute_kernels: table\(s\) \['uid'\] are data_parallel",
        ),
        ({"hbm_cap_gb": -1.0}, r"^hbm_cap_gb: must be a number >= 0"),
        ({"fp16_all_to_all": "yes"}, r"^fp16_all_to_all: must be a bool"),
        ({"sharding_types": ("item_id=row_wise",)}, r"^sharding_types: must be a tuple of"),
    ],
)
def test_invalid_field_is_named(kwargs, pattern):
    with pytest.raises(ConfigError, match=pattern):
        ShardingConfig(**kwargs)


def test_table_option_parse_errors():
    with pytest.raises(ConfigError, match=r"^sharding_types: expected table=value, got 'x'"):
        TableOption.parse("x", "sharding_types")
    with pytest.raises(ConfigError, match=r"TableOption\.value: must be a non-empty string"):
        TableOption("item_id", "")


def test_tables_must_be_the_models():
    cfg = preset("tiny")
    with pytest.raises(ConfigError, match=r"^sharding_types: unknown table\(s\) \['items'\]"):
        cfg.replace(sharding={"sharding_types": options("items=row_wise")})
    # Contextual tables are tables of the model.
    ok = cfg.replace(sharding={"sharding_types": options("user_x_hour=table_wise")})
    assert ok.sharding.sharding_type_of("user_x_hour") == "table_wise"


def test_cli_and_environment_overrides():
    cli = [
        "sharding.sharding_types=item_id=row_wise,uid=table_wise",
        "sharding.fp16_all_to_all=true",
        "sharding.hbm_cap_gb=70",
    ]
    assert parse_cli_overrides(cli)["sharding"]["sharding_types"] == options(
        "item_id=row_wise,uid=table_wise"
    )
    cfg = resolve_config("tiny", environ={}, cli=cli)
    assert cfg.sharding.sharding_types == options("item_id=row_wise,uid=table_wise")
    assert cfg.sharding.fp16_all_to_all and cfg.sharding.hbm_cap_gb == 70.0
    env = {
        "HSTU_SHARDING__COMPUTE_DEVICE": "cuda",
        "HSTU_SHARDING__COMPUTE_KERNELS": "item_id=fused_uvm_caching",
    }
    cfg = resolve_config("tiny", environ=env)
    assert cfg.sharding.compute_kernels == options("item_id=fused_uvm_caching")


def test_override_errors_name_source_and_field():
    with pytest.raises(
        ConfigError,
        match=r"command-line override 'sharding\.sharding_types=item_id': "
        r"sharding\.sharding_types: expected table=value, got 'item_id'",
    ):
        resolve_config("tiny", environ={}, cli=["sharding.sharding_types=item_id"])
    with pytest.raises(
        ConfigError,
        match=r"environment variable HSTU_SHARDING__SHARDING_TYPES: sharding_types: "
        r"unknown table\(s\) \['nope'\]",
    ):
        resolve_config("tiny", environ={"HSTU_SHARDING__SHARDING_TYPES": "nope=row_wise"})


def test_file_overrides_mapping_and_list_forms(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text(
        "[sharding]\nfp16_all_to_all = true\nhbm_cap_gb = 40\n"
        '[sharding.sharding_types]\nitem_id = "row_wise"\nuid = "table_wise"\n'
    )
    cfg = resolve_config("tiny", file=toml, environ={})
    assert cfg.sharding.sharding_types == options("item_id=row_wise,uid=table_wise")
    assert cfg.sharding.fp16_all_to_all and cfg.sharding.hbm_cap_gb == 40.0
    js = tmp_path / "run.json"
    js.write_text(
        json.dumps(
            {
                "sharding": {
                    "sharding_types": [
                        "album_id=column_wise",
                        {"table": "uid", "value": "table_wise"},
                    ]
                }
            }
        )
    )
    cfg = resolve_config("tiny", file=js, environ={})
    assert cfg.sharding.sharding_types == options("album_id=column_wise,uid=table_wise")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"sharding": {"sharding_types": [{"table": "uid"}]}}))
    with pytest.raises(ConfigError, match=r"bad\.json: .*needs exactly the keys table and value"):
        resolve_config("tiny", file=bad, environ={})


def test_saved_config_reads_back(tmp_path):
    cfg = preset("tiny").replace(
        sharding={"sharding_types": options("item_id=row_wise"), "fp16_all_to_all": True}
    )
    saved = cfg.save_json(tmp_path / "saved.json")
    sharding = json.loads(saved.read_text())["sharding"]
    path = tmp_path / "back.json"
    path.write_text(json.dumps({"sharding": sharding}))
    assert resolve_config("tiny", file=path, environ={}).sharding == cfg.sharding
