"""The rules of a training run's parameters: which workload it is, the overrides it makes,
the models a closed accelerator admits, the declared host memory and the dataset size."""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from storage_workloads.checker.official import OFFICIAL_WORKLOAD_VALUES
from storage_workloads.checker.params import (
    TRAINING_KEYS,
    _config_overrides,
    _division,
    _int_field,
    _measured_memory,
    _positive_number,
    _unknown_keys,
)
from storage_workloads.checker.report import _invalid, flatten
from storage_workloads.checkpoint import CHECKPOINT_MODELS
from storage_workloads.dlio import RECORD_LENGTH_KEYS, to_datagen_config, to_dlio_config
from storage_workloads.hosts import HOST_MEMORY_TOLERANCE
from storage_workloads.rules import Issue, check_overrides, flatten_overrides
from storage_workloads.sizing import required_num_files
from storage_workloads.workloads import ACCELERATORS, MODELS, WORKLOADS, Workload

#: Accelerators on which the closed division admits only some models (MLPerf Storage v3.0:
#: unet3d and retinanet on b200 and mi355).
CLOSED_MODELS_BY_ACCELERATOR: Final[Mapping[str, frozenset[str]]] = {
    "b200": frozenset({"unet3d", "retinanet"}),
    "mi355": frozenset({"unet3d", "retinanet"}),
}


def _respelled(values: Mapping[str, object], engine: str) -> dict[str, object]:
    """``values`` with the record-length keys in ``engine``'s spelling."""
    out: dict[str, object] = {}
    for key, value in values.items():
        twin = _engine_twin(key)
        ours = {f"dataset.{k}" for k in RECORD_LENGTH_KEYS[engine]}
        out[twin if twin != key and twin in ours else key] = value
    return out


def _official_values(w: Workload, engine: str) -> dict[str, object] | None:
    values = OFFICIAL_WORKLOAD_VALUES.get(w.key)
    return None if values is None else _respelled(values, engine)


def _engine_twin(key: str) -> str:
    """The other engine's spelling of a record-length key (or the key itself)."""
    for (length, stdev), (other_length, other_stdev) in (
        (RECORD_LENGTH_KEYS["dlio"], RECORD_LENGTH_KEYS["mlperf-dlio"]),
        (RECORD_LENGTH_KEYS["mlperf-dlio"], RECORD_LENGTH_KEYS["dlio"]),
    ):
        if key == f"dataset.{length}":
            return f"dataset.{other_length}"
        if key == f"dataset.{stdev}":
            return f"dataset.{other_stdev}"
    return key


def _training_workload(
    model: object, accelerator: object, source: str, issues: list[Issue]
) -> Workload | None:
    m = str(model).strip().lower() if isinstance(model, str) else None
    if m not in MODELS:
        issues.append(
            _invalid(
                "model",
                f"{source}: unknown model {model!r}; known models: {', '.join(MODELS)}, "
                f"{', '.join(CHECKPOINT_MODELS)}",
                "model-recognized",
                expected="a known model",
                actual=model,
            )
        )
        return None
    a = str(accelerator).strip().lower() if isinstance(accelerator, str) else None
    have = [acc for mod, acc in WORKLOADS if mod == m]
    if a not in have:
        known = "unknown" if a not in ACCELERATORS else "no public workload for"
        issues.append(
            _invalid(
                "accelerator",
                f"{source}: {known} accelerator {accelerator!r} for {m}; {m} is defined for: "
                f"{', '.join(have)}",
                "accelerator-recognized",
                expected="one of " + ", ".join(have),
                actual=accelerator,
            )
        )
        return None
    return WORKLOADS[(m, a)]


@dataclass(frozen=True)
class _System:
    """What a training run declares about its clients (``None``: not declared)."""

    #: Emulated accelerators (MPI processes) of all hosts.
    accelerators: int | None
    #: Client hosts.
    hosts: int | None
    #: Memory of one host in GiB, as declared.
    memory_gb: float | None
    #: Memory of each host in GiB, as read from the hosts.
    measured: list[float] | None


def _check_training(
    params: Mapping[str, Any],
    source: str,
    issues: list[Issue],
    skipped: list[str],
    datagen: bool = False,
) -> Workload | None:
    _unknown_keys(params, TRAINING_KEYS, source, issues)
    division = _division(params, source, issues)
    w = _training_workload(params.get("model"), params.get("accelerator"), source, issues)
    accelerators = _int_field(params, "num_accelerators", source, issues)
    hosts = _int_field(params, "hosts", source, issues)
    memory_gb = _positive_number(params, "host_memory_gb", source, issues)
    measured = _measured_memory(params, hosts, source, issues)
    if w is None:
        return None
    system = _System(accelerators, hosts, memory_gb, measured)
    overrides, official = _run_overrides(w, params, source, issues, datagen)
    _overrides_rule(w, overrides, division, official, source, issues)
    _closed_models_rule(w, issues)
    _host_memory_rule(system, source, issues)
    _sizing_rule(w, overrides, system, source, issues, skipped, datagen)
    return w


def _run_overrides(
    w: Workload, params: Mapping[str, Any], source: str, issues: list[Issue], datagen: bool
) -> tuple[dict[str, Any], dict[str, object] | None]:
    """The parameters the run changes: where its ``config`` differs from the workload, its
    workflow flags, and its ``overrides``; with the published values it was compared with."""
    overrides: dict[str, Any] = {}
    official: dict[str, object] | None = _official_values(w, "mlperf-dlio")
    config = params.get("config")
    if config is not None:
        if not isinstance(config, Mapping):
            issues.append(
                _invalid(
                    "config",
                    f"{source}: config must be a mapping, got {type(config).__name__}",
                    "parse",
                )
            )
        else:
            dataset = config.get("dataset") if isinstance(config.get("dataset"), Mapping) else {}
            # A config for dlio-benchmark 2.0.0 carries the upstream spelling (beside the
            # official one); the official files and the MLPerf DLIO fork's configs do not.
            engine = "dlio" if RECORD_LENGTH_KEYS["dlio"][0] in dataset else "mlperf-dlio"
            make = to_datagen_config if datagen else to_dlio_config
            reference = make(w, data_folder="data", engine=engine)  # type: ignore[operator]
            official = _official_values(w, engine)
            overrides.update(_config_overrides(config, reference, source, issues, official))
            # The workflow flags the config sets go to the rules (rules.WORKFLOW_FLAGS).
            overrides.update(
                (k, v) for k, v in flatten(config).items() if k.startswith("workflow.")
            )
    extra = params.get("overrides")
    if extra is not None:
        if not isinstance(extra, Mapping):
            issues.append(
                _invalid(
                    "overrides",
                    f"{source}: overrides must be a mapping, got {type(extra).__name__}",
                    "parse",
                )
            )
        else:
            try:
                overrides.update(flatten_overrides(extra))
            except (TypeError, ValueError) as exc:
                issues.append(_invalid("overrides", f"{source}: {exc}", "parse"))
    return overrides, official


def _overrides_rule(
    w: Workload,
    overrides: Mapping[str, Any],
    division: str,
    official: Mapping[str, object] | None,
    source: str,
    issues: list[Issue],
) -> None:
    """Which of the overrides ``division`` allows (:func:`storage_workloads.check_overrides`)."""
    try:
        found = check_overrides(w.model, overrides, division=division)
    except (TypeError, ValueError) as exc:
        found = [_invalid("overrides", f"{source}: {exc}", "parse")]
    # Name the workload's own value where the rule only says "the workload's value".
    reference_values = {**(official or {}), **flatten(to_dlio_config(w, data_folder="data"))}
    for issue in found:
        if issue.expected == "the workload's value":
            key = issue.parameter
            value = reference_values.get(key, reference_values.get(_engine_twin(key), "not set"))
            issue = dataclasses.replace(issue, expected=value)
        issues.append(issue)


def _closed_models_rule(w: Workload, issues: list[Issue]) -> None:
    """On some accelerators the closed division admits only some models
    (:data:`CLOSED_MODELS_BY_ACCELERATOR`)."""
    allowed = CLOSED_MODELS_BY_ACCELERATOR.get(w.accelerator)
    if allowed is not None and w.model not in allowed:
        issues.append(
            Issue(
                "model",
                "OPEN",
                f"the closed division admits only {', '.join(sorted(allowed))} on "
                f"{w.accelerator}; {w.model} can only be an open submission",
                expected=" or ".join(sorted(allowed)),
                actual=w.model,
                rule="closed-models",
            )
        )


def _host_memory_rule(system: _System, source: str, issues: list[Issue]) -> None:
    """The declared host memory may not understate what was read from the hosts."""
    hosts, memory_gb, measured = system.hosts, system.memory_gb, system.measured
    if measured is not None and memory_gb is not None:
        declared, have = (hosts or 1) * memory_gb, sum(measured)
        if declared < have * (1 - HOST_MEMORY_TOLERANCE):
            issues.append(
                _invalid(
                    "host_memory_gb",
                    f"{source}: {hosts or 1} host(s) of {memory_gb:g} GiB declared "
                    f"({declared:,.2f} GiB), but {have:,.2f} GiB were read from them: the "
                    "declared memory understates the clients' memory",
                    "host-memory",
                    expected=f">= {have * (1 - HOST_MEMORY_TOLERANCE):,.2f} GiB in all",
                    actual=f"{declared:,.2f} GiB",
                )
            )


def _sizing_rule(
    w: Workload,
    overrides: Mapping[str, Any],
    system: _System,
    source: str,
    issues: list[Issue],
    skipped: list[str],
    datagen: bool,
) -> None:
    """The dataset must be 5x the memory of all hosts and hold 500 steps per accelerator
    (SG v2.0 6.6 and 7; Rules.md 3.1.2), rounded up: see sizing.required_num_files."""
    accelerators, hosts = system.accelerators, system.hosts
    memory_gb, measured = system.memory_gb, system.measured
    memory_known = memory_gb is not None or measured is not None
    if datagen and (accelerators is None or not memory_known):
        skipped.append(
            "sizing: a datagen run declares no accelerators and host memory; check the run"
        )
    elif accelerators is None or not memory_known:
        missing = [
            k
            for k, known in (
                ("num_accelerators", accelerators is not None),
                ("host_memory_gb", memory_known),
            )
            if not known
        ]
        issues.append(
            _invalid(
                missing[0],
                f"{source}: {' and '.join(missing)} not declared: the dataset size cannot be "
                "checked against the sizing rule",
                "sizing",
                expected="declared",
                actual=None,
            )
        )
    else:
        files = overrides.get("dataset.num_files_train", w.num_files_train)
        if isinstance(files, numbers.Integral) and not isinstance(files, bool):
            if measured is not None:  # read from the hosts: the rule's own figure
                total_memory = math.ceil(sum(measured) * 2**30)
                memory_text = (
                    f"{len(measured)} host(s) of "
                    f"{' + '.join(f'{m:,.2f}' for m in measured)} GiB (read from them)"
                )
            else:
                assert memory_gb is not None
                total_memory = math.ceil((hosts or 1) * memory_gb * 2**30)
                memory_text = f"{hosts or 1} host(s) of {memory_gb:g} GiB"
            need = required_num_files(
                w, total_host_memory_bytes=total_memory, num_accelerators=accelerators
            )
            if files < need:
                issues.append(
                    _invalid(
                        "dataset.num_files_train",
                        f"{files:,} files are fewer than the {need:,} that {memory_text} and "
                        f"{accelerators} accelerator(s) need (5x host memory, 500 steps per "
                        "accelerator)",
                        "sizing",
                        expected=f">= {need}",
                        actual=files,
                    )
                )
