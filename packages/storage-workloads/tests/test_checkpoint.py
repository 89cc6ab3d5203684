"""The llama3 checkpointing workloads and their DLIO configs."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from storage_workloads import (
    CHECKPOINT_MODELS,
    UnknownWorkloadError,
    check_path,
    checkpoint_workload,
    to_checkpoint_config,
)
from storage_workloads.cli import main
from storage_workloads.dliorun import plan_checkpointing, run_checkpointing

# name: model GB, optimizer GB, closed processes (MLPerf Storage checkpointing rules)
SIZES = {
    "llama3_8b": (15, 90, 8),
    "llama3_70b": (130, 781, 64),
    "llama3_405b": (755, 4533, 512),
    "llama3_1t": (2571, 15_426, 1024),
}


@pytest.mark.parametrize("name", sorted(SIZES))
def test_sizes_and_process_counts(name: str) -> None:
    model_gb, optimizer_gb, processes = SIZES[name]
    w = checkpoint_workload(name)
    assert (w.model_gb, w.optimizer_gb, w.closed_processes) == (model_gb, optimizer_gb, processes)
    assert w.checkpoint_gb == model_gb + optimizer_gb
    assert w.written_gb(processes) == w.checkpoint_gb
    assert w.written_gb(8) == pytest.approx(w.checkpoint_gb * min(1, 8 / processes))
    assert w.closed_processes % w.open_step == 0


def test_names() -> None:
    assert CHECKPOINT_MODELS == ("llama3_8b", "llama3_70b", "llama3_405b", "llama3_1t")
    assert checkpoint_workload("LLaMA3-405B") is checkpoint_workload("llama3_405b")
    with pytest.raises(UnknownWorkloadError, match="unknown checkpointing workload 'gpt'"):
        checkpoint_workload("gpt")
    with pytest.raises(ValueError, match=r"CheckpointWorkload\.zero_stage"):
        dataclasses.replace(checkpoint_workload("llama3_8b"), zero_stage=4)


def test_full_scale_config() -> None:
    config = to_checkpoint_config(checkpoint_workload("llama3_70b"), checkpoint_folder="ckpt")
    assert config == {
        "model": {
            "name": "llama_70b",
            "type": "transformer",
            "num_layers": 80,
            "model_datatype": "fp16",
            "optimizer_datatype": "fp32",
            "parallelism": {"tensor": 8, "pipeline": 1, "zero_stage": 3},
            "transformer": {
                "vocab_size": 128_256,
                "hidden_size": 8192,
                "ffn_hidden_size": 28_672,
                "num_attention_heads": 128,
                "num_kv_heads": 8,
            },
        },
        "framework": "pytorch",
        "workflow": {"generate_data": False, "train": False, "checkpoint": True},
        "checkpoint": {
            "checkpoint_folder": "ckpt",
            "time_between_checkpoints": 5,
            "num_checkpoints_write": 10,
            "num_checkpoints_read": 10,
            "fsync": True,
        },
    }


def test_subset_mode_and_phases() -> None:
    w = checkpoint_workload("llama3_405b")
    config = to_checkpoint_config(w, checkpoint_folder="c", num_processes=8)
    assert config["checkpoint"]["mode"] == "subset"
    assert config["model"]["parallelism"] == {
        "tensor": 8,
        "pipeline": 32,
        "zero_stage": 1,
        "data": 2,
    }
    write_only = to_checkpoint_config(w, checkpoint_folder="c", num_checkpoints_read=0)
    assert write_only["checkpoint"]["num_checkpoints_read"] == 0
    assert "mode" not in write_only["checkpoint"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"engine": "dlio"}, "checkpointing needs engine 'mlperf-dlio'"),
        ({"checkpoint_folder": ""}, "checkpoint_folder must be a non-empty path"),
        ({"num_processes": 0}, "num_processes must be an integer >= 1"),
        ({"num_checkpoints_write": -1}, "num_checkpoints_write must be an integer >= 0"),
        ({"num_checkpoints_write": 0, "num_checkpoints_read": 0}, "nothing to do"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], match: str) -> None:
    options: dict[str, object] = {"checkpoint_folder": "c", **kwargs}
    with pytest.raises(ValueError, match=match):
        to_checkpoint_config(checkpoint_workload("llama3_8b"), **options)  # type: ignore[arg-type]


def test_subset_data_parallelism_as_mlpstorage_sets_it() -> None:
    # mlpstorage 2.0: the closed count over the GPUs of one data-parallel group.
    got = {name: checkpoint_workload(name).subset_data_parallelism for name in SIZES}
    assert got == {"llama3_8b": 1, "llama3_70b": 8, "llama3_405b": 2, "llama3_1t": 2}


# ---------------------------------------------------------------------------------------------
# Runs: the MLPerf DLIO fork as mlpstorage runs it; the emulation only when asked for


def test_a_fork_run_as_mlpstorage_configures_it(
    tmp_path: Path, venv: Path, fake_dlio: None, capsys: pytest.CaptureFixture[str]
) -> None:
    w = checkpoint_workload("llama3_70b")
    folder = tmp_path / "ckpt"
    common: dict[str, Any] = {"checkpoint_folder": folder, "dlio_venv": venv, "mpi": True}
    plan = plan_checkpointing(w, run_dir=tmp_path / "plan", processes=8, **common)
    # The published workload file, and mlpstorage's changes on the command line.
    assert plan.config == to_checkpoint_config(w, checkpoint_folder="checkpoints/llama_70b")
    assert plan.overrides == {
        "checkpoint.checkpoint_folder": str(folder.resolve()),
        "checkpoint.mode": "subset",
        "model.parallelism.data": 8,
    }
    assert plan.run_record["engine"] == "mlperf-dlio" and not (tmp_path / "plan").exists()
    with pytest.raises(TypeError, match="what_if"):  # a plan is plan_checkpointing's
        run_checkpointing(w, run_dir=tmp_path / "plan", what_if=True, **common)
    assert not (tmp_path / "plan").exists()

    result = run_checkpointing(w, run_dir=tmp_path / "run", processes=8, **common)
    assert (result.engine, result.emulation, result.mode) == (
        "mlperf-dlio",
        False,
        "subset",
    )
    assert result.bytes_per_checkpoint == 2**29  # DLIO's 0.5 GB are GiB
    assert result.write.count == 10 and result.read.count == 10
    assert result.write.gb_per_s_mean == pytest.approx(2 * 2**30 / 1e9)
    assert result.write.seconds == [0.25] * 10
    assert result.verdict == "CLOSED", result.issues
    run = tmp_path / "run"
    meta = json.loads(next(run.glob("checkpointing_*_metadata.json")).read_text())
    assert meta["verification"] == "closed" and meta["args"]["num_checkpoints_write"] == 10
    assert meta["params_dict"]["checkpoint.mode"] == "subset"
    # The checker reads the run folder as mlpstorage left it (DLIO's llama_70b is llama3_70b).
    assert check_path(run).verdict == "CLOSED"
    # --param changes the model (a smaller trial): the checker says what that makes the run.
    small = run_checkpointing(
        w,
        run_dir=tmp_path / "small",
        processes=8,
        params={"model.num_layers": 2},
        **{**common, "checkpoint_folder": tmp_path / "ckpt2"},
    )
    assert small.verdict == "INVALID"
    assert [i["parameter"] for i in small.issues or []] == ["model.num_layers"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"engine": "dlio"}, "has no checkpoint-only workflow: run --engine mlperf-dlio"),
        ({"engine": "mlperf-dlio", "emulation": True}, "--emulation runs on --engine dlio"),
        ({"scale": 0.5}, "--scale 0.5 is the emulation's"),
        ({"engine": "dlio", "emulation": True, "params": {"x": 1}}, "--param is not taken"),
    ],
)
def test_the_emulation_only_when_asked_for(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        run_checkpointing(
            checkpoint_workload("llama3_8b"),
            run_dir=tmp_path / "r",
            checkpoint_folder=tmp_path / "c",
            **kwargs,
        )
    assert not (tmp_path / "r").exists()


def test_cli_checkpoint_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["checkpoint", "llama3_8b", "--run-dir", str(tmp_path / "r")]
    args += ["--checkpoint-folder", str(tmp_path / "c"), "--engine", "dlio"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--emulation (this package's emulation" in err
