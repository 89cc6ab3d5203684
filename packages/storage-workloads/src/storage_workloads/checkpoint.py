"""MLPerf Storage checkpointing workloads (llama3 8b, 70b, 405b, 1t) and their DLIO configs.

Each workload writes the model and optimizer state of one LLM training job ten times, with
fsync, and then reads it back ten times. The closed division fixes the number of processes
(one per emulated accelerator) at TP x PP x DP, or 8 in the single-host ``subset`` mode; the open
division allows any multiple of TP x PP.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from storage_workloads.workloads import UnknownWorkloadError

__all__ = [
    "CHECKPOINT_MODELS",
    "CHECKPOINT_WORKLOADS",
    "NUM_CHECKPOINTS",
    "SUBSET_PROCESSES",
    "CheckpointWorkload",
    "checkpoint_workload",
    "to_checkpoint_config",
]

#: Checkpoints written, then read, by one run.
NUM_CHECKPOINTS: Final = 10
#: Processes of the single-host ``subset`` mode (one host with 8 accelerators).
SUBSET_PROCESSES: Final = 8
#: Fewest processes (accelerators) per host the rules allow.
MIN_PROCESSES_PER_HOST: Final = 4


@dataclass(frozen=True, kw_only=True)
class CheckpointWorkload:
    """One checkpointing workload.

    Attributes:
        name: ``llama3_8b``, ``llama3_70b``, ``llama3_405b`` or ``llama3_1t``.
        dlio_model_name: ``model.name`` in the DLIO config (``llama_8b``, ...).
        model_gb: model state per checkpoint, GB (10^9 bytes).
        optimizer_gb: optimizer state per checkpoint, GB.
        tensor_parallelism, pipeline_parallelism, data_parallelism: TP, PP and DP; the closed
            division runs TP x PP x DP processes.
        zero_stage: ZeRO stage of the DLIO model config.
        num_layers, hidden_size, ffn_hidden_size, num_attention_heads, num_kv_heads,
        vocab_size: the transformer DLIO sizes the checkpoint from.
        model_datatype, optimizer_datatype: element types of the model and optimizer state.
        time_between_checkpoints_s: DLIO ``checkpoint.time_between_checkpoints``.
    """

    name: str
    dlio_model_name: str
    model_gb: int
    optimizer_gb: int
    tensor_parallelism: int
    pipeline_parallelism: int
    data_parallelism: int
    zero_stage: int
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    vocab_size: int = 128_256
    model_datatype: str = "fp16"
    optimizer_datatype: str = "fp32"
    time_between_checkpoints_s: int = 5

    def __post_init__(self) -> None:
        for field in (
            "model_gb",
            "optimizer_gb",
            "tensor_parallelism",
            "pipeline_parallelism",
            "data_parallelism",
            "num_layers",
            "hidden_size",
            "ffn_hidden_size",
            "num_attention_heads",
            "num_kv_heads",
            "vocab_size",
            "time_between_checkpoints_s",
        ):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(
                    f"CheckpointWorkload.{field} must be an integer >= 1, got {value!r}"
                )
        if self.zero_stage not in (0, 1, 2, 3):
            raise ValueError(
                f"CheckpointWorkload.zero_stage must be 0, 1, 2 or 3, got {self.zero_stage!r}"
            )

    @property
    def closed_processes(self) -> int:
        """Processes of a closed run at full scale: TP x PP x DP (8, 64, 512, 1024)."""
        return self.tensor_parallelism * self.pipeline_parallelism * self.data_parallelism

    @property
    def open_step(self) -> int:
        """The open division allows any multiple of this (TP x PP) as the process count."""
        return self.tensor_parallelism * self.pipeline_parallelism

    @property
    def subset_data_parallelism(self) -> int:
        """``model.parallelism.data`` of the subset mode, as mlpstorage 2.0 sets it: the closed
        process count over the processes of one data-parallel group, which it takes as TP x
        PP and at least the subset's 8 (8b: 1, 70b: 8, 405b: 2, 1t: 2)."""
        return self.closed_processes // max(self.open_step, SUBSET_PROCESSES)

    @property
    def checkpoint_gb(self) -> int:
        """Model plus optimizer state of one checkpoint, GB."""
        return self.model_gb + self.optimizer_gb

    def written_gb(self, num_processes: int) -> float:
        """GB one checkpoint of a run with ``num_processes`` processes writes.

        The whole checkpoint at ``closed_processes`` or more; in the ``subset`` mode (fewer
        processes) the share ``num_processes / closed_processes`` of it.
        """
        n = _processes(num_processes)
        return self.checkpoint_gb * min(1.0, n / self.closed_processes)


def _processes(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"num_processes must be an integer >= 1, got {value!r}")
    return int(value)


def _llama3(
    size: str,
    model_gb: int,
    optimizer_gb: int,
    tensor_parallelism: int,
    pipeline_parallelism: int,
    data_parallelism: int,
    zero_stage: int,
    num_layers: int,
    hidden_size: int,
    ffn_hidden_size: int,
    num_attention_heads: int,
    num_kv_heads: int,
) -> CheckpointWorkload:
    """The llama3 checkpointing workload of one model size (``8b``, ...)."""
    return CheckpointWorkload(
        name=f"llama3_{size}",
        dlio_model_name=f"llama_{size}",
        model_gb=model_gb,
        optimizer_gb=optimizer_gb,
        tensor_parallelism=tensor_parallelism,
        pipeline_parallelism=pipeline_parallelism,
        data_parallelism=data_parallelism,
        zero_stage=zero_stage,
        num_layers=num_layers,
        hidden_size=hidden_size,
        ffn_hidden_size=ffn_hidden_size,
        num_attention_heads=num_attention_heads,
        num_kv_heads=num_kv_heads,
    )


#: Model sizes and process counts are those of the MLPerf Storage checkpointing rules;
#: architecture and parallelism those of its llama3 DLIO workload configs.
CHECKPOINT_WORKLOADS: Final[Mapping[str, CheckpointWorkload]] = MappingProxyType(
    {
        w.name: w
        for w in (
            # size, model GB, optimizer GB, TP, PP, DP, ZeRO stage, layers, hidden size,
            # FFN hidden size, attention heads, KV heads
            _llama3("8b", 15, 90, 1, 1, 8, 3, 32, 4096, 14_336, 32, 8),
            _llama3("70b", 130, 781, 8, 1, 8, 3, 80, 8192, 28_672, 128, 8),
            _llama3("405b", 755, 4533, 8, 32, 2, 1, 126, 16_384, 53_248, 128, 8),
            _llama3("1t", 2571, 15_426, 8, 64, 2, 1, 128, 25_872, 98_304, 192, 32),
        )
    }
)
#: Checkpointing workload names.
CHECKPOINT_MODELS: Final = tuple(CHECKPOINT_WORKLOADS)


def checkpoint_workload(name: str) -> CheckpointWorkload:
    """Look up a checkpointing workload: ``llama3_8b``, ``llama3-8b`` and ``LLAMA3_8B`` match.

    Raises :class:`storage_workloads.UnknownWorkloadError` listing the known names.
    """
    key = str(name).strip().lower().replace("-", "_")
    try:
        return CHECKPOINT_WORKLOADS[key]
    except KeyError:
        raise UnknownWorkloadError(
            f"unknown checkpointing workload {name!r}; known: {', '.join(CHECKPOINT_MODELS)}"
        ) from None


def to_checkpoint_config(
    workload: CheckpointWorkload,
    *,
    checkpoint_folder: str | os.PathLike[str],
    num_processes: int | None = None,
    num_checkpoints_write: int = NUM_CHECKPOINTS,
    num_checkpoints_read: int = NUM_CHECKPOINTS,
    engine: str = "mlperf-dlio",
) -> dict[str, Any]:
    """The DLIO checkpointing workload mapping for ``workload``.

    Args:
        checkpoint_folder: ``checkpoint.checkpoint_folder``.
        num_processes: the MPI processes of the run (default: ``closed_processes``). Fewer
            than ``closed_processes`` selects ``checkpoint.mode: subset`` with
            ``model.parallelism.data`` set (``subset_data_parallelism``), as mlpstorage does.
        num_checkpoints_write, num_checkpoints_read: 10 and 10 in a submission; the write and
            read phases may run separately (0 for the other phase).
        engine: only ``"mlperf-dlio"``: dlio-benchmark 2.0.0 from PyPI has no checkpoint-only
            workflow (it reads none of ``checkpoint.num_checkpoints_write``,
            ``num_checkpoints_read``, ``fsync`` or ``model.parallelism``), so a config for it
            would silently do something else; ``"dlio"`` raises ``ValueError``.
    """
    if not isinstance(workload, CheckpointWorkload):
        raise TypeError(f"workload must be a CheckpointWorkload, got {type(workload).__name__}")
    if engine != "mlperf-dlio":
        raise ValueError(
            f"checkpointing needs engine 'mlperf-dlio', got {engine!r}: dlio-benchmark 2.0.0 "
            "reads none of checkpoint.num_checkpoints_write/num_checkpoints_read/fsync"
        )
    folder = os.fspath(checkpoint_folder)
    if not isinstance(folder, str) or not folder.strip():
        raise ValueError(f"checkpoint_folder must be a non-empty path, got {checkpoint_folder!r}")
    processes = workload.closed_processes if num_processes is None else _processes(num_processes)
    for name, value in (
        ("num_checkpoints_write", num_checkpoints_write),
        ("num_checkpoints_read", num_checkpoints_read),
    ):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    if num_checkpoints_write == 0 and num_checkpoints_read == 0:
        raise ValueError("num_checkpoints_write and num_checkpoints_read are both 0: nothing to do")
    parallelism: dict[str, int] = {
        "tensor": workload.tensor_parallelism,
        "pipeline": workload.pipeline_parallelism,
        "zero_stage": workload.zero_stage,
    }
    checkpoint: dict[str, Any] = {
        "checkpoint_folder": folder,
        "time_between_checkpoints": workload.time_between_checkpoints_s,
        "num_checkpoints_write": int(num_checkpoints_write),
        "num_checkpoints_read": int(num_checkpoints_read),
        "fsync": True,
    }
    if processes < workload.closed_processes:
        parallelism["data"] = workload.subset_data_parallelism
        checkpoint["mode"] = "subset"
    return {
        "model": {
            "name": workload.dlio_model_name,
            "type": "transformer",
            "num_layers": workload.num_layers,
            "model_datatype": workload.model_datatype,
            "optimizer_datatype": workload.optimizer_datatype,
            "parallelism": parallelism,
            "transformer": {
                "vocab_size": workload.vocab_size,
                "hidden_size": workload.hidden_size,
                "ffn_hidden_size": workload.ffn_hidden_size,
                "num_attention_heads": workload.num_attention_heads,
                "num_kv_heads": workload.num_kv_heads,
            },
        },
        "framework": "pytorch",
        "workflow": {"generate_data": False, "train": False, "checkpoint": True},
        "checkpoint": checkpoint,
    }
