"""The rules of a checkpointing run's parameters: the process count and hosts, the checkpoint
count, fsync, the accelerator memory and the parameters a run may change."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from storage_workloads.checker.params import (
    CHECKPOINT_KEYS,
    _config_overrides,
    _division,
    _int_field,
    _positive_number,
    _unknown_keys,
)
from storage_workloads.checker.report import _invalid, flatten
from storage_workloads.checkpoint import (
    CHECKPOINT_WORKLOADS,
    MIN_PROCESSES_PER_HOST,
    NUM_CHECKPOINTS,
    SUBSET_PROCESSES,
    CheckpointWorkload,
    to_checkpoint_config,
)
from storage_workloads.rules import Issue

# Checkpointing: parameters a run may change in either division.
_CHECKPOINT_FREE: Final = frozenset(
    {"checkpoint.checkpoint_folder", "storage.storage_type", "storage.storage_root"}
)


def _check_checkpointing(
    params: Mapping[str, Any], source: str, issues: list[Issue], skipped: list[str]
) -> CheckpointWorkload | None:
    _unknown_keys(params, CHECKPOINT_KEYS, source, issues)
    _division(params, source, issues)  # either division: the process count decides
    name = str(params.get("model", "")).strip().lower().replace("-", "_")
    w = CHECKPOINT_WORKLOADS[name]
    processes = _int_field(params, "num_processes", source, issues)
    hosts = _int_field(params, "hosts", source, issues) or 1
    memory_gb = _positive_number(params, "accelerator_memory_gb", source, issues)
    writes = _int_field(params, "num_checkpoints_write", source, issues, minimum=-1)
    reads = _int_field(params, "num_checkpoints_read", source, issues, minimum=-1)
    fsync = params.get("fsync", True)

    _processes_rule(w, params, processes, hosts, source, issues)
    if processes is not None:
        _processes_per_host_rule(processes, hosts, issues)
    w_count = NUM_CHECKPOINTS if writes is None else writes
    r_count = NUM_CHECKPOINTS if reads is None else reads
    _checkpoint_count_rule(w_count, r_count, issues)
    if fsync is not True:
        issues.append(
            _invalid(
                "fsync", "checkpoint writes must be fsynced", "fsync", expected=True, actual=fsync
            )
        )
    if processes is not None:
        _checkpoint_memory_rule(w, processes, memory_gb, issues, skipped)
    _checkpoint_config_rule(w, params.get("config"), processes, w_count, r_count, source, issues)
    return w


def _processes_rule(
    w: CheckpointWorkload,
    params: Mapping[str, Any],
    processes: int | None,
    hosts: int,
    source: str,
    issues: list[Issue],
) -> None:
    """The closed division runs the workload's process count, or the subset mode's on one
    host; the open division any multiple of TP x PP."""
    if processes is None:
        if "num_processes" not in params:
            issues.append(
                _invalid(
                    "num_processes",
                    f"{source}: num_processes not declared",
                    "checkpoint-processes",
                    expected=f"{SUBSET_PROCESSES} or {w.closed_processes}",
                )
            )
    elif processes in (SUBSET_PROCESSES, w.closed_processes):
        if processes == SUBSET_PROCESSES < w.closed_processes and hosts != 1:
            issues.append(
                _invalid(
                    "hosts",
                    f"the subset mode ({SUBSET_PROCESSES} processes) runs on one host, got {hosts}",
                    "checkpoint-processes",
                    expected=1,
                    actual=hosts,
                )
            )
    elif processes % w.open_step == 0:
        issues.append(
            Issue(
                "num_processes",
                "OPEN",
                f"{processes} processes: the closed division runs {w.name} on "
                f"{w.closed_processes} (or {SUBSET_PROCESSES} in the subset mode); a multiple of "
                f"TP x PP = {w.open_step} is open only",
                expected=f"{SUBSET_PROCESSES} or {w.closed_processes}",
                actual=processes,
                rule="checkpoint-processes",
            )
        )
    else:
        issues.append(
            _invalid(
                "num_processes",
                f"{processes} processes is neither {SUBSET_PROCESSES}, {w.closed_processes} nor a "
                f"multiple of TP x PP = {w.open_step}",
                "checkpoint-processes",
                expected=f"{SUBSET_PROCESSES}, {w.closed_processes} or a multiple of {w.open_step}",
                actual=processes,
            )
        )


def _processes_per_host_rule(processes: int, hosts: int, issues: list[Issue]) -> None:
    """At least :data:`~storage_workloads.checkpoint.MIN_PROCESSES_PER_HOST` processes run on
    each host."""
    if processes // hosts < MIN_PROCESSES_PER_HOST:
        issues.append(
            _invalid(
                "hosts",
                f"{processes} processes on {hosts} hosts is {processes / hosts:g} per host; the "
                f"rules want at least {MIN_PROCESSES_PER_HOST} accelerators per host",
                "processes-per-host",
                expected=f">= {MIN_PROCESSES_PER_HOST} per host",
                actual=processes / hosts,
            )
        )


def _checkpoint_count_rule(w_count: int, r_count: int, issues: list[Issue]) -> None:
    """A run writes 10 checkpoints then reads 10, or runs one of the two phases alone (a count
    of 0 or -1 for the other)."""
    phases = {
        (NUM_CHECKPOINTS, NUM_CHECKPOINTS),
        (NUM_CHECKPOINTS, 0),
        (NUM_CHECKPOINTS, -1),
        (0, NUM_CHECKPOINTS),
        (-1, NUM_CHECKPOINTS),
    }
    if (w_count, r_count) not in phases:
        issues.append(
            _invalid(
                "num_checkpoints_write",
                f"{w_count} writes and {r_count} reads: a run writes {NUM_CHECKPOINTS} checkpoints "
                f"then reads {NUM_CHECKPOINTS} (or does one of the two phases alone)",
                "checkpoint-count",
                expected=f"{NUM_CHECKPOINTS} writes, {NUM_CHECKPOINTS} reads",
                actual=f"{w_count} writes, {r_count} reads",
            )
        )


def _checkpoint_memory_rule(
    w: CheckpointWorkload,
    processes: int,
    memory_gb: float | None,
    issues: list[Issue],
    skipped: list[str],
) -> None:
    """The accelerators' memory must hold the checkpoint they write."""
    if memory_gb is None:
        skipped.append(
            "checkpoint-memory: accelerator_memory_gb not declared, so the memory that must "
            "hold the checkpoint cannot be checked"
        )
    else:
        need = w.written_gb(processes)
        have = processes * memory_gb
        if have < need:
            issues.append(
                _invalid(
                    "accelerator_memory_gb",
                    f"{processes} accelerators of {memory_gb:g} GB hold {have:,.0f} GB, less "
                    f"than the {need:,.0f} GB checkpoint they write",
                    "checkpoint-memory",
                    expected=f">= {need:,.1f} GB in all",
                    actual=f"{have:,.1f} GB",
                )
            )


def _checkpoint_config_rule(
    w: CheckpointWorkload,
    config: object,
    processes: int | None,
    w_count: int,
    r_count: int,
    source: str,
    issues: list[Issue],
) -> None:
    """A checkpointing run's DLIO config may change only the folder and the storage
    (:data:`_CHECKPOINT_FREE`)."""
    if isinstance(config, Mapping) and processes is not None:
        folder = flatten(config).get("checkpoint.checkpoint_folder", "checkpoints")
        reference = (
            to_checkpoint_config(
                w,
                checkpoint_folder=str(folder) or "checkpoints",
                num_processes=processes,
                num_checkpoints_write=max(w_count, 0),
                num_checkpoints_read=max(r_count, 0),
            )
            if (max(w_count, 0), max(r_count, 0)) != (0, 0)
            else None
        )
        if reference is not None:
            changed = _config_overrides(config, reference, source, issues)
            for key, value in changed.items():
                if key in _CHECKPOINT_FREE:
                    continue
                issues.append(
                    _invalid(
                        key,
                        f"{key} may not be changed in a checkpointing run",
                        "allowed-overrides",
                        expected=flatten(reference).get(key, "not set"),
                        actual=value,
                    )
                )
    elif config is not None and not isinstance(config, Mapping):
        issues.append(_invalid("config", f"{source}: config must be a mapping", "parse"))
