"""DLRMv4 run values against the rule files installed with mlperf-logging."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import mlperf_logging.compliance_checker as checker_pkg
import pytest
import yaml

from mlperf_compliance import (
    DLRMV4_EVAL_SAMPLES,
    DLRMV4_TRAIN_SAMPLES,
    PRECISIONS,
    DLRMv4RunConfig,
    dlrmv4_run_start_keys,
    eval_interval_samples,
    first_eval_samples,
    learning_rate_band,
)

RULES = Path(checker_pkg.__file__).parent / "training_6.1.0"
# Records logged by other MLPerfLogger methods, not by dlrmv4_run_start_keys.
STRUCTURAL = {
    "submission_org",
    "submission_platform",
    "submission_division",
    "submission_benchmark",
    "init_stop",
    "run_start",
    "run_stop",
}


def _rules(name: str) -> dict[str, dict[str, Any]]:
    # The checker reads its YAML with BaseLoader (every scalar a string); so do we.
    entries = yaml.load((RULES / name).read_text(), Loader=yaml.BaseLoader)
    return {e["KEY"]["NAME"]: e["KEY"] for e in entries if "KEY" in e}


def _exactly_one(*names: str) -> set[str]:
    return {
        key
        for name in names
        for key, rule in _rules(name).items()
        if rule.get("REQ") == "EXACTLY_ONE"
    }


@pytest.mark.parametrize("division", ["closed", "open"])
def test_keys_are_exactly_the_required_hyperparameters(
    division: str, closed_values: dict[str, Any]
) -> None:
    required = _exactly_one("common.yaml", f"{division}_common.yaml", f"{division}_dlrmv4.yaml")
    keys = [k for k, _ in dlrmv4_run_start_keys(closed_values)]
    assert len(keys) == len(set(keys))
    assert set(keys) - {"seed"} == required - STRUCTURAL


def test_order_satisfies_the_rules(closed_values: dict[str, Any]) -> None:
    keys = [k for k, _ in dlrmv4_run_start_keys(closed_values)]
    assert keys[0] == "global_batch_size"
    assert keys.index("opt_base_learning_rate") < keys.index("opt_sparse_base_learning_rate")


def test_closed_values_match_the_closed_rules(closed_values: dict[str, Any]) -> None:
    values = dict(dlrmv4_run_start_keys(closed_values))
    assert values["train_samples"] == DLRMV4_TRAIN_SAMPLES == 2_290_835_423
    assert values["eval_samples"] == DLRMV4_EVAL_SAMPLES == 2_058_204
    rules = _rules("closed_dlrmv4.yaml")
    pinned = {
        "max_sequence_length": 4096,
        "opt_name": "Adam",
        "opt_adam_beta_1": 0.95,
        "opt_adam_beta_2": 0.999,
        "opt_adam_epsilon": 1e-8,
        "opt_weight_decay": 0.0,
        "opt_gradient_clip_norm": 1.0,
        "opt_sparse_name": "RowWiseAdagrad",
        "opt_learning_rate_warmup_steps": 24000,
        "opt_learning_rate_warmup_start_lr": 0.0,
        "eval_every_data_pct": 0.001,
        "eval_samples": 2058204,
    }
    for key, expected in pinned.items():
        assert values[key] == expected
        # Each pinned rule reads "v['value'] == <expected>"; evaluate it as the checker does.
        assert eval(rules[key]["CHECK"].strip(), {}, {"v": {"value": values[key]}}), key
    assert values["opt_sparse_base_learning_rate"] == values["opt_base_learning_rate"] == 1e-6
    assert values["gradient_accumulation_steps"] == 1
    assert values["micro_batch_size"] == 1024
    assert values["seed"] == 1234


def test_eval_grid_at_reference_batch_sizes() -> None:
    assert eval_interval_samples(8192) == 280 * 8192 == 2_293_760
    assert first_eval_samples(8192) == 57_344_000 == 25 * 2_293_760
    # The rule comments name blocks 25, 31 and 41 at 8192, 16384 and 32768.
    for gbs, block in ((8192, 25), (16384, 31), (32768, 41)):
        assert first_eval_samples(gbs) == block * eval_interval_samples(gbs)
    assert eval_interval_samples(10**10) == 10**10  # at least one step
    lo, hi = learning_rate_band(16384)
    assert math.isclose(lo, 1e-6) and math.isclose(hi, 3e-6)


def test_sparse_learning_rate_override(closed_values: dict[str, Any]) -> None:
    values = dict(dlrmv4_run_start_keys({**closed_values, "sparse_learning_rate": 2e-6}))
    assert values["opt_sparse_base_learning_rate"] == 2e-6
    assert values["opt_base_learning_rate"] == 1e-6


def test_from_values_accepts_mappings_and_dataclasses(closed_values: dict[str, Any]) -> None:
    @dataclasses.dataclass
    class TrainConfig:
        global_batch_size: int = 8192
        learning_rate: float = 1e-6
        micro_batch_size: int = 1024
        config_filename: str = "a.gin"
        precision_linear: str = "bfloat16"
        precision_attn: str = "fp32"
        precision_comm: str = "fp32"
        num_layers: int = 3  # not a run value the rules ask for

    with pytest.raises(ValueError, match="num_layers"):
        dlrmv4_run_start_keys(TrainConfig())
    values = dict(dlrmv4_run_start_keys(TrainConfig(), strict=False))
    assert values["lowest_numerical_precision_in_attn"] == "fp32"
    assert "seed" not in values
    config = DLRMv4RunConfig(**closed_values)
    assert dlrmv4_run_start_keys(config) == dlrmv4_run_start_keys(closed_values)


def test_missing_and_misspelt_values_are_named(closed_values: dict[str, Any]) -> None:
    del closed_values["learning_rate"]
    with pytest.raises(ValueError, match=r"missing DLRMv4 run values \['learning_rate'\]"):
        dlrmv4_run_start_keys(closed_values)
    with pytest.raises(ValueError, match="'lr'"):
        dlrmv4_run_start_keys({**closed_values, "lr": 1e-6})
    with pytest.raises(TypeError, match="mapping or a dataclass"):
        dlrmv4_run_start_keys([("global_batch_size", 1)])


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"global_batch_size": 0}, "global_batch_size"),
        ({"global_batch_size": True}, "global_batch_size"),
        ({"micro_batch_size": 1.5}, "micro_batch_size"),
        ({"learning_rate": -1e-6}, "learning_rate"),
        ({"learning_rate": math.inf}, "learning_rate"),
        ({"precision_comm": "bf16"}, "precision_comm"),
        ({"config_filename": ""}, "config_filename"),
        ({"adam_beta_2": 1.0}, "adam_beta_2"),
        ({"tensor_parallelism": 0}, "tensor_parallelism"),
    ],
)
def test_invalid_values_name_the_field(
    closed_values: dict[str, Any], change: dict[str, Any], field: str
) -> None:
    with pytest.raises((TypeError, ValueError), match=field):
        DLRMv4RunConfig(**{**closed_values, **change})


def test_precisions_match_the_common_rule() -> None:
    rule = _rules("common.yaml")["lowest_numerical_precision_in_linear"]["CHECK"]
    for precision in PRECISIONS:
        assert eval(rule.strip(), {}, {"v": {"value": precision}})
    assert not eval(rule.strip(), {}, {"v": {"value": "bf16"}})
