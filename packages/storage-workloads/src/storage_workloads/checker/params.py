"""Reading a parameters file and its fields; each problem is an INVALID issue."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from storage_workloads._reading import (
    UnusableFile,
    parse_json_text,
    parse_yaml_text,
    read_bounded_text,
)
from storage_workloads.checker.report import _invalid, _same, flatten
from storage_workloads.rules import CLOSED_PARAMETERS, DIVISIONS, OPEN_PARAMETERS, Issue

#: Keys of a training parameters file and what each holds.
TRAINING_KEYS: Final[Mapping[str, str]] = {
    "model": "training workload name (unet3d, resnet50, ...)",
    "accelerator": "emulated accelerator (h100, a100, b200, mi355, any)",
    "division": "closed (default) or open",
    "num_accelerators": "emulated accelerators (MPI processes) of all hosts, >= 1",
    "hosts": "client hosts, >= 1 (default 1)",
    "host_memory_gb": "memory of one client host in GiB (2^30 bytes), > 0",
    "measured_host_memory_gb": "memory of each client host in GiB as read from the hosts "
    "(a list, one value per host); the sizing rule uses its sum",
    "overrides": "changed DLIO parameters, dotted or nested",
    "config": "the whole DLIO workload mapping of the run; its changes are the overrides",
}

#: Keys of a checkpointing parameters file.
CHECKPOINT_KEYS: Final[Mapping[str, str]] = {
    "model": "checkpointing workload (llama3_8b, llama3_70b, llama3_405b, llama3_1t)",
    "division": "closed (default) or open",
    "num_processes": "MPI processes, one per emulated accelerator",
    "hosts": "client hosts, >= 1 (default 1)",
    "accelerator_memory_gb": "memory of one emulated accelerator in GB",
    "num_checkpoints_write": "checkpoints written (10; 0 in a read-only phase)",
    "num_checkpoints_read": "checkpoints read (10; 0 in a write-only phase)",
    "fsync": "whether writes are fsynced (must be true)",
    "overrides": "changed DLIO parameters, dotted or nested",
    "config": "the whole DLIO checkpointing mapping of the run",
}

# Keys only `storage-workloads run` writes into run.json next to the parameters.
_RUN_RECORD_KEYS: Final = frozenset({"engine", "command"})


def _load_mapping(path: Path, issues: list[Issue]) -> dict[str, Any] | None:
    """The mapping in a YAML or JSON file, or ``None`` with an INVALID issue saying why."""
    try:
        text = read_bounded_text(path)
    except OSError as exc:
        issues.append(_invalid(str(path), f"cannot read it: {exc.strerror or exc}", "readable"))
        return None
    except UnusableFile as exc:
        issues.append(_invalid(str(path), f"cannot read it: {exc}", "readable"))
        return None
    try:
        data = parse_json_text(text) if path.suffix == ".json" else parse_yaml_text(text)
    except UnusableFile as exc:
        issues.append(_invalid(str(path), f"cannot parse it: {exc}", "parse"))
        return None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        issues.append(_invalid(str(path), f"malformed YAML: {problem}{where}", "parse"))
        return None
    if not isinstance(data, Mapping):
        issues.append(
            _invalid(
                str(path),
                f"{path}: expected a mapping at the top level, got {type(data).__name__}",
                "parse",
                expected="a mapping",
                actual=type(data).__name__,
            )
        )
        return None
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        issues.append(_invalid(str(path), f"keys must be strings, got {bad[0]!r}", "parse"))
        return None
    return dict(data)


def _int_field(
    params: Mapping[str, Any], key: str, source: str, issues: list[Issue], minimum: int = 1
) -> int | None:
    if key not in params or params[key] is None:
        return None
    value = params[key]
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        issues.append(
            _invalid(
                key,
                f"{source}: {key} must be an integer >= {minimum}, got {value!r}",
                "value-kind",
                expected=f"an integer >= {minimum}",
                actual=value,
            )
        )
        return None
    return int(value)


def _positive_number(
    params: Mapping[str, Any], key: str, source: str, issues: list[Issue]
) -> float | None:
    if key not in params or params[key] is None:
        return None
    value = params[key]
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or value <= 0
    ):
        issues.append(
            _invalid(
                key,
                f"{source}: {key} must be a number > 0, got {value!r}",
                "value-kind",
                expected="a number > 0",
                actual=value,
            )
        )
        return None
    return float(value)


def _measured_memory(
    params: Mapping[str, Any], hosts: int | None, source: str, issues: list[Issue]
) -> list[float] | None:
    """``measured_host_memory_gb``: one number > 0 per host (``hosts`` of them when given)."""
    value = params.get("measured_host_memory_gb")
    if value is None:
        return None
    good = isinstance(value, list) and all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0
        for v in value
    )
    if not good or not value or (hosts is not None and len(value) != hosts):
        issues.append(
            _invalid(
                "measured_host_memory_gb",
                f"{source}: measured_host_memory_gb must be a list of numbers > 0, one per host "
                f"({hosts or 'hosts'}), got {value!r}",
                "value-kind",
                expected=f"{hosts or 'a'} number(s) > 0",
                actual=value,
            )
        )
        return None
    return [float(v) for v in value]


def _division(params: Mapping[str, Any], source: str, issues: list[Issue]) -> str:
    division = params.get("division", "closed")
    if division not in DIVISIONS:
        issues.append(
            _invalid(
                "division",
                f"{source}: division must be one of {', '.join(DIVISIONS)}, got {division!r}",
                "value-kind",
                expected=" or ".join(DIVISIONS),
                actual=division,
            )
        )
        return "closed"
    return str(division)


def _unknown_keys(
    params: Mapping[str, Any], known: Mapping[str, str], source: str, issues: list[Issue]
) -> None:
    for key in params:
        if key not in known and key not in _RUN_RECORD_KEYS:
            issues.append(
                _invalid(
                    key,
                    f"{source}: unknown key {key!r}; known keys: {', '.join(known)}",
                    "known-keys",
                    expected="a known key",
                    actual=key,
                )
            )


def _config_overrides(
    config: Mapping[str, Any],
    reference: Mapping[str, Any],
    source: str,
    issues: list[Issue],
    official: Mapping[str, object] | None = None,
) -> dict[str, Any]:
    """The parameters in which ``config`` differs from the workload (workflow flags aside).

    The workload is ``reference`` (the project's emitted config) together with ``official``
    (the published YAML's keys, :data:`OFFICIAL_WORKLOAD_VALUES`): a value equal to either is
    the workload's, not an override. A key the run's config lacks is INVALID when the emitted
    config sets it, unless a division may change it or the published YAML does without it.
    """
    actual = flatten(config)
    expected = flatten(reference)
    published = official or {}
    changed: dict[str, Any] = {}
    for key, value in actual.items():
        if key.startswith("workflow."):
            continue
        accepted = [m[key] for m in (expected, published) if key in m]
        if not any(_same(value, a) for a in accepted):
            changed[key] = value
    for key, value in expected.items():
        if key.startswith("workflow.") or key in actual:
            continue
        if key in CLOSED_PARAMETERS or key in OPEN_PARAMETERS:
            continue  # left to DLIO's default: allowed where a change is
        if official is not None and key not in official:
            continue  # the published YAML does without it too
        issues.append(
            _invalid(
                key,
                f"{source}: {key} is missing from the run's DLIO config (the workload sets "
                f"{value!r})",
                "allowed-overrides",
                expected=value,
                actual=None,
            )
        )
    return changed
