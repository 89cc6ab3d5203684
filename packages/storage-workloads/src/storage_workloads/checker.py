"""The rules checker: is a run (or a set of run parameters) CLOSED, OPEN or INVALID?

:func:`check_path` takes one of three things:

- a **parameters file** (YAML or JSON) that declares a run (see :data:`TRAINING_KEYS` and
  :data:`CHECKPOINT_KEYS`);
- a **run directory**, as ``storage-workloads run`` writes it (``run.json``, the DLIO workload
  YAML, DLIO's ``summary.json``), or a DLIO output directory with its Hydra
  ``.hydra/config.yaml``;
- a **submission directory** whose subfolders are run directories; a submission is five runs.

A run's DLIO config is compared with the workload: the config :func:`to_dlio_config` emits for
it and the published workload YAML (:data:`OFFICIAL_WORKLOAD_VALUES`); a value equal to either
is the workload's, anything else an override for :func:`storage_workloads.check_overrides`.

Every finding is an :class:`~storage_workloads.Issue` with the parameter, the expected and the
actual value and the rule's name. Nothing here raises for bad input: an unreadable or malformed
file, an unknown key, model or accelerator is an INVALID issue with a message naming the file,
the field and the value.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Literal

import yaml

from storage_workloads.checkpoint import (
    CHECKPOINT_MODELS,
    CHECKPOINT_WORKLOADS,
    MIN_PROCESSES_PER_HOST,
    NUM_CHECKPOINTS,
    SUBSET_PROCESSES,
    CheckpointWorkload,
    to_checkpoint_config,
)
from storage_workloads.dlio import RECORD_LENGTH_KEYS, to_datagen_config, to_dlio_config
from storage_workloads.hosts import HOST_MEMORY_TOLERANCE
from storage_workloads.rules import (
    CLOSED_PARAMETERS,
    DIVISIONS,
    OPEN_PARAMETERS,
    Issue,
    Verdict,
    check_overrides,
    flatten_overrides,
    verdict,
)
from storage_workloads.sizing import required_num_files
from storage_workloads.workloads import ACCELERATORS, MODELS, WORKLOADS, Workload

__all__ = [
    "CHECKPOINT_KEYS",
    "CLOSED_MODELS_BY_ACCELERATOR",
    "OFFICIAL_WORKLOAD_VALUES",
    "RUNS_PER_SUBMISSION",
    "RUN_RECORD",
    "TRAINING_KEYS",
    "CheckReport",
    "check_params",
    "check_path",
    "flatten",
]

#: Runs one submission must hold.
RUNS_PER_SUBMISSION: Final = 5
#: Accelerators on which the closed division admits only some models (MLPerf Storage v3.0:
#: unet3d and retinanet on b200 and mi355).
CLOSED_MODELS_BY_ACCELERATOR: Final[Mapping[str, frozenset[str]]] = {
    "b200": frozenset({"unet3d", "retinanet"}),
    "mi355": frozenset({"unet3d", "retinanet"}),
}

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

# Checkpointing: parameters a run may change in either division.
_CHECKPOINT_FREE: Final = frozenset(
    {"checkpoint.checkpoint_folder", "storage.storage_type", "storage.storage_root"}
)


# The published workload YAMLs of mlcommons/storage, flattened to dotted keys: every key a run
# may not change (the tunables of rules.CLOSED_PARAMETERS, such as data_folder, num_files_train,
# read_threads and checkpoint_folder, are left out). SG v2.0 10.2 and Rules.md 3.6.2: the YAML
# is the workload, so these keys are part of it and never count as overrides, whether or not
# dlio.to_dlio_config emits them. Sources, configs/dlio/workload/ at: caa90c9 (v2.0) for
# unet3d, resnet50 and cosmoflow on h100/a100; the newest files seen (v3.0) for the rest:
# retinanet_h100 fa24012, retinanet_a100 c8d70b6, retinanet_b200 11460d0, retinanet_mi355
# 76f4545, dlrm_h100/a100 a65ba8c, dlrm_b200 0b42eb5, dlrm_mi355 11460d0, flux_h100 7e73663,
# flux_a100 bdc5462, flux_b200 c25079c, flux_mi355 0b42eb5, unet3d_b200 0d75b41.
# The record-length keys are respelled for the engine a run uses (record_length_bytes for the
# MLPerf DLIO fork, record_length upstream). dlrm's 200-column parquet schema
# (dataset.parquet.columns) is not listed: the emitted config has to carry it. The workflow
# flags are rules.check_overrides' business and not listed either.
def _yaml(model: str, framework: str, loader: str, **keys: object) -> dict[str, object]:
    return {"model.name": model, "framework": framework, "reader.data_loader": loader, **keys}


_SHUFFLED: Final = {"reader.file_shuffle": "seed", "reader.sample_shuffle": "seed"}
_UNET3D_YAML: Final = _yaml(
    "unet3d",
    "pytorch",
    "pytorch",
    **{
        "model.type": "cnn",
        "model.model_size": 499_153_191,
        "dataset.format": "npz",
        "dataset.num_samples_per_file": 1,
        "dataset.record_length_bytes": 146_600_628,
        "dataset.record_length_bytes_stdev": 68_341_808,
        "dataset.record_length_bytes_resize": 2_097_152,
        "reader.batch_size": 7,
        **_SHUFFLED,
        "train.epochs": 5,
        "checkpoint.checkpoint_after_epoch": 5,
        "checkpoint.epochs_between_checkpoints": 2,
        "metric.au": 0.90,
    },
)
_RESNET50_YAML: Final = _yaml(
    "resnet50",
    "tensorflow",
    "tensorflow",
    **{
        "model.type": "cnn",
        "dataset.format": "tfrecord",
        "dataset.num_samples_per_file": 1251,
        "dataset.record_length_bytes": 114_660.07,
        "dataset.record_length_bytes_resize": 150_528,
        "reader.batch_size": 400,
        "train.epochs": 5,
        "metric.au": 0.90,
    },
)
_COSMOFLOW_YAML: Final = _yaml(
    "cosmoflow",
    "tensorflow",
    "tensorflow",
    **{
        "dataset.format": "tfrecord",
        "dataset.num_samples_per_file": 1,
        "dataset.record_length_bytes": 2_828_486,
        "dataset.record_length_bytes_stdev": 71_311,
        "reader.batch_size": 1,
        **_SHUFFLED,
        "reader.shuffle_size": 2,
        "train.epochs": 5,
        "metric.au": 0.70,
    },
)
_RETINANET_YAML: Final = _yaml(
    "retinanet",
    "pytorch",
    "pytorch",
    **{
        "model.type": "cnn",
        "dataset.format": "jpeg",
        "dataset.num_samples_per_file": 1,
        **_SHUFFLED,
        "metric.au": 0.85,
    },
)
_RETINANET_V3_FILES: Final = {"dataset.record_length_bytes": 322_957, "train.epochs": 8}
_DLRM_YAML: Final = _yaml("dlrm", "pytorch", "pytorch", **{"train.epochs": 1, "metric.au": 0.70})
_DLRM_NPZ: Final = {
    "dataset.format": "npz",
    "dataset.num_samples_per_file": 1,
    "dataset.record_length_bytes": 512,
    "reader.batch_size": 8192,
    **_SHUFFLED,
}
_FLUX_YAML: Final = _yaml("flux", "pytorch", "pytorch")
_DLRM_PARQUET: Final = {
    "dataset.format": "parquet",
    "dataset.num_samples_per_file": 4_718_592,
    "dataset.record_length_bytes": 761,
    "dataset.compression": "none",
    "dataset.parquet.row_group_size": 6144,
    "dataset.parquet.read_mode": "row_group",
    "reader.batch_size": 16_384,
    "reader.file_shuffle": "seed",
}
_FLUX_PARQUET: Final = {
    "dataset.format": "parquet",
    "dataset.compression": "none",
    "dataset.num_samples_per_file": 288,
    "dataset.record_length": 2_164_832,  # the upstream spelling, as published
    "dataset.parquet.columns": [
        {"name": name, "dtype": "float32", "size": size}
        for name, size in (
            ("t5_encodings", 524_328),
            ("clip_encodings", 409),
            ("mean", 8232),
            ("logvar", 8232),
            ("timestamp", 7),
        )
    ],
    "reader.file_shuffle": "seed",
    "train.epochs": 1,
    "metric.au": 0.90,
}
_FLUX_JPEG: Final = {
    "dataset.format": "jpeg",
    "dataset.num_samples_per_file": 1,
    "dataset.record_length_bytes": 307_200,
    "dataset.record_length_bytes_stdev": 102_400,
    "reader.batch_size": 8,
    **_SHUFFLED,
    "train.epochs": 5,
    "metric.au": 0.80,
}

#: Per ``(model, accelerator)``: the keys of the published workload YAML that a run may not
#: change, with their values (see the comment above for the sources). Read-only.
OFFICIAL_WORKLOAD_VALUES: Final[Mapping[tuple[str, str], Mapping[str, object]]] = MappingProxyType(
    {
        key: MappingProxyType(values)
        for key, values in {
            ("unet3d", "h100"): {**_UNET3D_YAML, "train.computation_time": 0.323},
            ("unet3d", "a100"): {**_UNET3D_YAML, "train.computation_time": 0.636},
            ("unet3d", "b200"): {**_UNET3D_YAML, "train.computation_time": 0.162},
            ("resnet50", "h100"): {**_RESNET50_YAML, "train.computation_time": 0.224},
            ("resnet50", "a100"): {
                **_RESNET50_YAML,
                "reader.dont_use_mmap": True,
                "train.computation_time": 0.435,
            },
            ("cosmoflow", "h100"): {**_COSMOFLOW_YAML, "train.computation_time": 0.00350},
            ("cosmoflow", "a100"): {**_COSMOFLOW_YAML, "train.computation_time": 0.00551},
            ("retinanet", "h100"): {
                **_RETINANET_YAML,
                "dataset.record_length_bytes": 153_600,
                "dataset.record_length_bytes_stdev": 51_200,
                "reader.batch_size": 16,
                "train.epochs": 5,
                "train.computation_time": 0.180,
            },
            ("retinanet", "a100"): {
                **_RETINANET_YAML,
                "dataset.record_length_bytes": 153_600,
                "dataset.record_length_bytes_stdev": 51_200,
                "reader.batch_size": 16,
                "train.epochs": 5,
                "train.computation_time": 0.210,
            },
            ("retinanet", "b200"): {
                **_RETINANET_YAML,
                **_RETINANET_V3_FILES,
                "reader.batch_size": 24,
                "train.computation_time": 0.04755,
            },
            ("retinanet", "mi355"): {
                **_RETINANET_YAML,
                **_RETINANET_V3_FILES,
                "reader.batch_size": 32,
                "train.computation_time": 0.0634,
            },
            ("dlrm", "h100"): {**_DLRM_YAML, **_DLRM_NPZ, "train.computation_time": 0.005},
            ("dlrm", "a100"): {**_DLRM_YAML, **_DLRM_NPZ, "train.computation_time": 0.007},
            ("dlrm", "b200"): {**_DLRM_YAML, **_DLRM_PARQUET, "train.computation_time": 0.000375},
            ("dlrm", "mi355"): {**_DLRM_YAML, **_DLRM_PARQUET, "train.computation_time": 0.0005625},
            ("flux", "h100"): {**_FLUX_YAML, **_FLUX_JPEG, "train.computation_time": 0.850},
            ("flux", "a100"): {**_FLUX_YAML, **_FLUX_JPEG, "train.computation_time": 1.100},
            ("flux", "b200"): {
                **_FLUX_YAML,
                **_FLUX_PARQUET,
                "reader.batch_size": 48,
                "train.computation_time": 1.35,
            },
            ("flux", "mi355"): {
                **_FLUX_YAML,
                **_FLUX_PARQUET,
                "reader.batch_size": 72,
                "train.computation_time": 2.025,
            },
        }.items()
    }
)


@dataclass(frozen=True)
class CheckReport:
    """The verdict on one parameters file, run or submission.

    Attributes:
        path: what was checked.
        kind: ``"params"``, ``"run"`` or ``"submission"``.
        verdict: ``CLOSED``, ``OPEN`` or ``INVALID``: the worst of the issues, and of the runs
            for a submission.
        issues: the findings about this item itself.
        runs: for a submission, the report of each run, by folder name order.
        skipped: checks that could not be made, each with the reason (they do not change the
            verdict).
        model, accelerator: what the run is, where known.
    """

    path: str
    kind: Literal["params", "run", "submission"]
    verdict: Verdict
    issues: tuple[Issue, ...] = ()
    runs: tuple[CheckReport, ...] = ()
    skipped: tuple[str, ...] = ()
    model: str | None = None
    accelerator: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready mapping."""
        out: dict[str, Any] = {
            "path": self.path,
            "kind": self.kind,
            "verdict": self.verdict,
            "model": self.model,
            "accelerator": self.accelerator,
            "issues": [issue.as_dict() for issue in self.issues],
            "skipped": list(self.skipped),
        }
        if self.kind == "submission":
            out["runs"] = [run.as_dict() for run in self.runs]
        return out

    def to_text(self, indent: str = "") -> str:
        """A readable report: the verdict line, then one line per issue and per run."""
        what = " ".join(x for x in (self.model, self.accelerator) if x)
        lines = [f"{indent}{self.verdict}  {self.path} ({self.kind}{', ' + what if what else ''})"]
        for issue in self.issues:
            detail = []
            if issue.expected is not None:
                detail.append(f"expected {issue.expected}")
            if issue.actual is not None:
                detail.append(f"actual {issue.actual!r}")
            tail = f" ({'; '.join(detail)})" if detail else ""
            lines.append(
                f"{indent}  [{issue.level}] {issue.rule}: {issue.parameter}: {issue.message}{tail}"
            )
        for note in self.skipped:
            lines.append(f"{indent}  [skipped] {note}")
        for run in self.runs:
            lines.append(run.to_text(indent + "  "))
        return "\n".join(lines)


def _invalid(
    parameter: str, message: str, rule: str, expected: object = None, actual: object = None
) -> Issue:
    return Issue(parameter, "INVALID", message, expected=expected, actual=actual, rule=rule)


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"reader": {"batch_size": 7}}`` as ``{"reader.batch_size": 7}`` (leaves only)."""
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _same(a: object, b: object) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, numbers.Real) and isinstance(b, numbers.Real):
        return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=0.0)
    return a == b


# ---------------------------------------------------------------------------------------------
# Reading files


def _load_mapping(path: Path, issues: list[Issue]) -> dict[str, Any] | None:
    """The mapping in a YAML or JSON file, or ``None`` with an INVALID issue saying why."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        issues.append(_invalid(str(path), f"cannot read it: {exc.strerror or exc}", "readable"))
        return None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        issues.append(
            _invalid(str(path), f"malformed JSON: {exc.msg} at line {exc.lineno}", "parse")
        )
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


# ---------------------------------------------------------------------------------------------
# Parameters


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
            engine = "mlperf-dlio" if RECORD_LENGTH_KEYS["mlperf-dlio"][0] in dataset else "dlio"
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

    # Sizing: the dataset must be 5x the memory of all hosts and hold 500 steps per accelerator
    # (SG v2.0 6.6 and 7; Rules.md 3.1.2), rounded up: see sizing.required_num_files.
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
    return w


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
    if processes is not None and processes // hosts < MIN_PROCESSES_PER_HOST:
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

    w_count = NUM_CHECKPOINTS if writes is None else writes
    r_count = NUM_CHECKPOINTS if reads is None else reads
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
    if fsync is not True:
        issues.append(
            _invalid(
                "fsync", "checkpoint writes must be fsynced", "fsync", expected=True, actual=fsync
            )
        )

    if processes is not None:
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

    config = params.get("config")
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
    return w


def check_params(
    params: Mapping[str, Any], *, source: str = "params", datagen: bool = False
) -> CheckReport:
    """Check the parameters of one run (a mapping with the keys of :data:`TRAINING_KEYS` or,
    for a llama3 model, :data:`CHECKPOINT_KEYS`). ``source`` names it in messages."""
    issues: list[Issue] = []
    skipped: list[str] = []
    model: str | None = None
    accelerator: str | None = None
    name = params.get("model")
    if isinstance(name, str) and name.strip().lower().replace("-", "_") in CHECKPOINT_WORKLOADS:
        cw = _check_checkpointing(params, source, issues, skipped)
        model = cw.name if cw else None
    elif name is None:
        issues.append(
            _invalid(
                "model",
                f"{source}: model not declared",
                "model-recognized",
                expected="a model name",
            )
        )
        _unknown_keys(params, TRAINING_KEYS, source, issues)
    else:
        w = _check_training(params, source, issues, skipped, datagen)
        if w is not None:
            model, accelerator = w.model, w.accelerator
    return CheckReport(
        path=source,
        kind="params",
        verdict=verdict(issues),
        issues=tuple(issues),
        skipped=tuple(skipped),
        model=model,
        accelerator=accelerator,
    )


# ---------------------------------------------------------------------------------------------
# Run and submission directories

#: Where a run directory keeps what the checker reads.
RUN_RECORD: Final = "run.json"
_HYDRA_CONFIGS: Final = (".hydra/config.yaml", "dlio/.hydra/config.yaml", "dlio_config/config.yaml")


def _is_run_dir(path: Path) -> bool:
    return (
        (path / RUN_RECORD).is_file()
        or (path / "summary.json").is_file()
        or any((path / c).is_file() for c in _HYDRA_CONFIGS)
    )


def _summary(path: Path) -> Path | None:
    for candidate in (path / "summary.json", path / "dlio" / "summary.json"):
        if candidate.is_file():
            return candidate
    return None


def _infer_accelerator(config: Mapping[str, Any]) -> str | None:
    flat = flatten(config)
    model = str(flat.get("model.name", flat.get("model", ""))).lower()
    compute = flat.get("train.computation_time")
    for (m, a), w in WORKLOADS.items():
        if (
            m == model
            and isinstance(compute, numbers.Real)
            and _same(compute, w.computation_time_s)
        ):
            return a
    return None


def _check_run_dir(path: Path) -> CheckReport:
    issues: list[Issue] = []
    skipped: list[str] = []
    record_path = path / RUN_RECORD
    params: dict[str, Any] | None
    datagen = False
    summary_path = _summary(path)
    summary: dict[str, Any] | None = None
    if summary_path is not None:
        summary = _load_mapping(summary_path, issues)
    if record_path.is_file():
        record = _load_mapping(record_path, issues)
        if record is None:
            return CheckReport(str(path), "run", "INVALID", tuple(issues))
        params = record.get("params") if isinstance(record.get("params"), Mapping) else None
        if params is None:
            issues.append(_invalid("params", f"{record_path}: no 'params' mapping", "parse"))
            return CheckReport(str(path), "run", "INVALID", tuple(issues))
        params = dict(params)
        config_file = record.get("config_file")
        if isinstance(config_file, str):
            config = _load_mapping(path / config_file, issues)
            if config is None:
                return CheckReport(str(path), "run", "INVALID", tuple(issues))
            params["config"] = config
        datagen = record.get("command") == "datagen"
        if datagen:
            skipped.append("au: a datagen run has no accelerator utilisation")
    else:
        hydra = next((path / c for c in _HYDRA_CONFIGS if (path / c).is_file()), None)
        if hydra is None:
            issues.append(
                _invalid(
                    str(path), f"{path}: no {RUN_RECORD} and no DLIO Hydra config.yaml", "readable"
                )
            )
            return CheckReport(str(path), "run", "INVALID", tuple(issues))
        loaded = _load_mapping(hydra, issues)
        if loaded is None:
            return CheckReport(str(path), "run", "INVALID", tuple(issues))
        config = loaded.get("workload", loaded)
        if not isinstance(config, Mapping):
            issues.append(_invalid("workload", f"{hydra}: 'workload' is not a mapping", "parse"))
            return CheckReport(str(path), "run", "INVALID", tuple(issues))
        flat = flatten(config)
        model = flat.get("model.name", config.get("model"))
        params = {"model": model, "accelerator": _infer_accelerator(config), "config": dict(config)}
        if params["accelerator"] is None:
            params["accelerator"] = (
                f"unknown (computation_time {flat.get('train.computation_time')!r})"
            )
    if summary is not None:
        n = summary.get("num_accelerators")
        declared = params.get("num_accelerators")
        if isinstance(n, int) and not isinstance(n, bool):
            if declared is None:
                params["num_accelerators"] = n
            elif declared != n:
                issues.append(
                    _invalid(
                        "num_accelerators",
                        f"declared {declared} accelerators, but DLIO ran {n} processes",
                        "num-accelerators",
                        expected=declared,
                        actual=n,
                    )
                )
        host_memory = summary.get("host_memory_GB")
        if (
            isinstance(host_memory, list)
            and host_memory
            and params.get("host_memory_gb") is None
            and params.get("measured_host_memory_gb") is None
        ):
            values = [
                v for v in host_memory if isinstance(v, int | float) and not isinstance(v, bool)
            ]
            if values:
                params["host_memory_gb"] = max(values)
                params.setdefault("hosts", len(values))
    report = check_params(params, source=str(path), datagen=datagen)
    issues = [*issues, *report.issues]
    skipped = [*skipped, *report.skipped]
    if summary is not None and report.model in MODELS and report.accelerator:
        metric = summary.get("metric") if isinstance(summary.get("metric"), Mapping) else {}
        mean = metric.get("train_au_mean_percentage")
        w = WORKLOADS[(report.model, report.accelerator)]
        if isinstance(mean, int | float) and not isinstance(mean, bool):
            if mean < w.au_threshold * 100:
                issues.append(
                    _invalid(
                        "metric.au",
                        f"mean accelerator utilisation {mean:.2f}% is below the workload's "
                        f"{w.au_threshold * 100:g}%",
                        "au",
                        expected=f">= {w.au_threshold * 100:g}%",
                        actual=round(float(mean), 4),
                    )
                )
        elif not any(s.startswith("au:") for s in skipped):
            skipped.append("au: summary.json has no train_au_mean_percentage")
    elif summary is None and not any(s.startswith("au:") for s in skipped):
        skipped.append("au: no summary.json (DLIO did not finish, or this is not a DLIO run)")
    return CheckReport(
        path=str(path),
        kind="run",
        verdict=verdict(issues),
        issues=tuple(issues),
        skipped=tuple(skipped),
        model=report.model,
        accelerator=report.accelerator,
    )


def _check_submission(path: Path, runs: Sequence[Path]) -> CheckReport:
    reports = tuple(_check_run_dir(run) for run in runs)
    issues: list[Issue] = []
    if len(reports) != RUNS_PER_SUBMISSION:
        issues.append(
            _invalid(
                "runs",
                f"a submission is {RUNS_PER_SUBMISSION} runs; {path} has {len(reports)} "
                f"({', '.join(r.name for r in runs) or 'none'})",
                "five-runs",
                expected=RUNS_PER_SUBMISSION,
                actual=len(reports),
            )
        )
    kinds = {(r.model, r.accelerator) for r in reports}
    if len(kinds) > 1:
        issues.append(
            _invalid(
                "model",
                "the runs of one submission must be of one workload, got "
                + ", ".join(sorted(f"{m} {a}" for m, a in kinds if m)),
                "one-workload",
                expected="one workload",
                actual=sorted(f"{m} {a}" for m, a in kinds if m),
            )
        )
    levels = [*issues, *(Issue("run", r.verdict, "") for r in reports if r.verdict != "CLOSED")]
    model, accelerator = next(iter(kinds)) if len(kinds) == 1 else (None, None)
    return CheckReport(
        path=str(path),
        kind="submission",
        verdict=verdict(levels),
        issues=tuple(issues),
        runs=reports,
        model=model,
        accelerator=accelerator,
    )


def check_path(path: str | os.PathLike[str]) -> CheckReport:
    """Check a parameters file, a run directory or a submission directory (see the module
    docstring). Never raises for bad content: problems are INVALID issues."""
    p = Path(path)
    if p.is_file():
        issues: list[Issue] = []
        params = _load_mapping(p, issues)
        if params is None:
            return CheckReport(str(p), "params", "INVALID", tuple(issues))
        report = check_params(params, source=str(p))
        return report
    if not p.is_dir():
        return CheckReport(
            str(p),
            "params",
            "INVALID",
            (_invalid(str(p), f"{p} does not exist", "readable"),),
        )
    if _is_run_dir(p):
        return _check_run_dir(p)
    runs = sorted(child for child in p.iterdir() if child.is_dir() and _is_run_dir(child))
    return _check_submission(p, runs)
