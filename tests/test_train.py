"""tools/train.py: its command-line surface, and short end-to-end runs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from mlperf_compliance import check_log, read_log

ROOT = Path(__file__).resolve().parents[1]


def load_train():
    spec = importlib.util.spec_from_file_location("train_tool", ROOT / "tools" / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


train = load_train()


def test_command_line_surface_is_frozen():
    defaults = vars(train.parse_args([]))
    assert defaults == {
        "preset": "tiny",
        "data": None,
        "size": "50m",
        "users": 400,
        "seed": 0,
        "steps": 600,
        "evals": 3,
        "kernel": "native",
        "workers": 1,
        "target_auc": None,
        "out": Path("runs/train"),
    }


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--steps", "2", "--evals", "3"]])
def test_bad_schedule_is_refused(argv, capsys):
    with pytest.raises(SystemExit):
        train.parse_args(argv)
    assert "--evals <= --steps" in capsys.readouterr().err


def short_run(out: Path, seed: int = 0, kernel: str = "native") -> dict:
    args = ["--users", "40", "--steps", "12", "--evals", "2", "--seed", str(seed)]
    return train.main([*args, "--kernel", kernel, "--out", str(out)])


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    return out, short_run(out)


def test_short_run_reports_and_logs(first_run, capsys):
    out, summary = first_run
    assert set(summary) >= {"eval_auc", "train_samples", "samples_per_s", "mlperf_log"}
    assert 0.0 <= summary["eval_auc"] <= 1.0
    assert summary["train_samples"] == 12 * 256
    records = read_log(summary["mlperf_log"])
    keys = [r["key"] for r in records]
    for key in ("init_start", "init_stop", "run_start", "eval_accuracy", "run_stop"):
        assert key in keys
    assert keys.count("run_start") == 1 and keys.count("run_stop") == 1
    assert {r["metadata"]["file"] for r in records} == {"tools/train.py"}
    assert keys.index("global_batch_size") < keys.index("opt_base_learning_rate")
    accuracies = [r for r in records if r["key"] == "eval_accuracy"]
    assert [r["metadata"]["samples_count"] for r in accuracies] == [6 * 256, 12 * 256]
    assert accuracies[-1]["value"] == pytest.approx(summary["eval_auc"], abs=1e-6)
    config = json.loads((out / "config.json").read_text())
    assert config["model"]["history_length"] == 32 and config["run"]["seed"] == 0


def test_log_passes_the_dev_ruleset(first_run):
    _, summary = first_run
    result = check_log(summary["mlperf_log"], ruleset="dev")
    assert result.passed, result.summary()


def test_same_seed_same_result(first_run, tmp_path):
    _, summary = first_run
    again = short_run(tmp_path)
    assert again["eval_auc"] == summary["eval_auc"]


def test_kernels_give_the_same_run(first_run, tmp_path):
    _, summary = first_run
    assert short_run(tmp_path, kernel="pytorch")["eval_auc"] == summary["eval_auc"]


def test_missing_dataset_is_named_and_the_run_is_logged_aborted(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(FileNotFoundError, match=r"multi_event\.parquet"):
        train.main(["--data", str(tmp_path), "--steps", "1", "--evals", "1", "--out", str(out)])
    records = read_log(out / "mlperf.log")
    assert records[-1]["key"] == "run_stop"
    assert records[-1]["metadata"]["status"] == "aborted"
