"""The llama3 checkpointing workloads and their DLIO configs."""

from __future__ import annotations

import dataclasses

import pytest

from storage_workloads import (
    CHECKPOINT_MODELS,
    UnknownWorkloadError,
    checkpoint_workload,
    to_checkpoint_config,
)

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
