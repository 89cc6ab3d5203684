"""Which DLIO parameters an MLPerf Storage training submission may change, per division.

The rules come from the published MLPerf Storage rules text in mlcommons/storage (facts only;
the wording and the code here are this project's own):

- ``SG v2.0``: ``Submission_guidelines.md`` ("MLPerf Storage V2.0 Benchmark Rules"), commit
  caa90c9 (main, June 2025). Section 10.1 lists the parameters a CLOSED run may set, 10.2 the
  ones OPEN adds, and says the workload YAML files cannot be changed.
- ``Rules.md v2.0``: ``Rules.md`` ("V2.0 Benchmark Validation Rules"), commit d3220b6. Section
  3.6.2 is the CLOSED table (it adds ``reader.odirect``, "Enable ODIRECT mode for Unet3D
  Training"), 3.6.3 the OPEN table; any other change "must ... fail the validation".
- ``Rules.md newest``: ``Rules.md`` at commit 0366ccf, the newest seen (it describes the v3.0
  release). Its 3.6.2 adds ``storage.storage_options.prefetch_window``.

Where mlpstorage's code (``mlpstorage/rules.py`` at caa90c9; ``mlpstorage_py/rules/`` in the
newest tree) decides differently from the text, the text wins; the package README lists each
difference ("Agreement with mlpstorage").
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from storage_workloads.workloads import (
    DATA_LOADERS,
    FORMATS,
    FRAMEWORKS,
    MODELS,
    UnknownWorkloadError,
)

__all__ = [
    "CHECKPOINTING_TRAINING_MODELS",
    "CLOSED_PARAMETERS",
    "DIVISIONS",
    "ODIRECT_MODELS",
    "OPEN_PARAMETERS",
    "PREFETCH_SIZES",
    "WORKFLOW_FLAGS",
    "Issue",
    "Level",
    "Verdict",
    "check_overrides",
    "flatten_overrides",
    "verdict",
]

Level = Literal["OPEN", "INVALID"]
Verdict = Literal["CLOSED", "OPEN", "INVALID"]

#: Divisions :func:`check_overrides` knows.
DIVISIONS: Final = ("closed", "open")

#: Parameters the closed division lets a submitter set (dotted DLIO config paths).
#: SG v2.0 section 10.1 table, plus ``reader.odirect`` (Rules.md v2.0 and newest, 3.6.2) and
#: ``storage.storage_options.prefetch_window`` (Rules.md newest, 3.6.2: the s3dlio client's
#: prefetch depth for object-storage runs). ``checkpoint.checkpoint_folder`` is in SG v2.0
#: 10.1 though the Rules.md training tables leave it out; mlpstorage allows it too.
CLOSED_PARAMETERS: Final = frozenset(
    {
        "dataset.num_files_train",
        "dataset.num_subfolders_train",
        "dataset.data_folder",
        "reader.read_threads",
        "reader.computation_threads",
        "reader.transfer_size",
        "reader.odirect",
        "reader.prefetch_size",
        "checkpoint.checkpoint_folder",
        "storage.storage_type",
        "storage.storage_root",
        "storage.storage_options.prefetch_window",
    }
)
#: Parameters the open division lets a submitter set in addition to the closed ones
#: (SG v2.0 section 10.2; Rules.md 3.6.3).
OPEN_PARAMETERS: Final = frozenset(
    {"framework", "dataset.format", "dataset.num_samples_per_file", "reader.data_loader"}
)
#: Models for which ``reader.odirect`` may be enabled: Rules.md 3.6.2 describes the parameter
#: as "Enable ODIRECT mode for Unet3D Training", default False. Setting it to False (the
#: default) for another model enables nothing and is not an issue.
ODIRECT_MODELS: Final = frozenset({"unet3d"})
#: Values ``reader.prefetch_size`` may take: SG v2.0 10.1 and Rules.md 3.6.2 give "values of 0,
#: 1, or 2".
PREFETCH_SIZES: Final = (0, 1, 2)
#: ``workflow`` flags. They are not parameters of the tables: the workload YAML sets them
#: (SG v2.0 10.2: "The .yaml files cannot be changed"). ``generate_data`` and ``train`` select
#: the phase (datagen or run) and may be either; ``checkpoint`` is the workload's: see
#: :data:`CHECKPOINTING_TRAINING_MODELS`. Any other ``workflow.*`` key (DLIO's ``evaluation``,
#: ``profiling``, ...) changes the workload and is INVALID.
WORKFLOW_FLAGS: Final = frozenset(
    {"workflow.generate_data", "workflow.train", "workflow.checkpoint"}
)
#: Models whose published training YAMLs include DLIO's checkpoint step. The unet3d YAMLs of
#: v2.0 (commit caa90c9) set ``workflow.checkpoint: True`` with a ``checkpoint`` section; the
#: later ones (v3.0: unet3d_h100 at 7e73663, unet3d_b200 at 0d75b41) keep that section and set
#: False, so both values are the published unet3d workload. Every other training YAML leaves
#: checkpointing off (False or unset), so ``True`` there adds checkpoint writes to the workload:
#: a change no table allows (Rules.md 3.6.2/3.6.3), hence INVALID.
CHECKPOINTING_TRAINING_MODELS: Final = frozenset({"unet3d"})


@dataclass(frozen=True)
class Issue:
    """One finding about a run's parameters.

    Attributes:
        parameter: the dotted DLIO parameter (``reader.read_threads``) or the run setting
            (``num_processes``) the finding is about.
        level: ``"OPEN"`` (allowed, but only in the open division) or ``"INVALID"`` (allowed
            in no division, or a value of the wrong kind).
        message: what is wrong, naming the parameter.
        expected: what the rule wants, in words or as a value (``None``: not applicable).
        actual: the value found (``None``: not applicable or missing).
        rule: short name of the rule (``open-parameters``, ``odirect``, ``sizing``, ...).
    """

    parameter: str
    level: Level
    message: str
    expected: object = None
    actual: object = None
    rule: str = ""

    def as_dict(self) -> dict[str, object]:
        """The issue as a JSON-ready mapping (values that JSON cannot hold become text)."""
        return {
            "parameter": self.parameter,
            "level": self.level,
            "rule": self.rule,
            "expected": _jsonable(self.expected),
            "actual": _jsonable(self.actual),
            "message": self.message,
        }


def _jsonable(value: object) -> object:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


def _is_int(value: object, minimum: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, numbers.Integral) and value >= minimum


def _is_text(value: object) -> bool:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    return isinstance(value, str) and bool(value.strip())


def _is_bool(value: object) -> bool:
    return isinstance(value, bool)


# Kind of value each parameter takes: a test and its description for the message. The tables
# give a meaning, not a range; a value outside the meaning (a negative "number of threads") is
# no setting of the parameter and cannot run (PyTorch's DataLoader refuses a negative worker
# count), so it is INVALID.
_VALUE_RULES: Final[dict[str, tuple[Callable[[object], bool], str]]] = {
    # "Number of files for the training set"
    "dataset.num_files_train": (lambda v: _is_int(v, 1), "an integer >= 1"),
    # "Number of subfolders that the training set is stored", default 0
    "dataset.num_subfolders_train": (lambda v: _is_int(v, 0), "an integer >= 0"),
    "dataset.data_folder": (_is_text, "a non-empty path"),
    # "Number of threads to load the data"; 0 loads in the main process
    "reader.read_threads": (lambda v: _is_int(v, 0), "an integer >= 0"),
    "reader.computation_threads": (lambda v: _is_int(v, 1), "an integer >= 1"),
    # "the number of bytes in the read buffer"
    "reader.transfer_size": (lambda v: _is_int(v, 1), "an integer >= 1 (bytes)"),
    "reader.odirect": (_is_bool, "true or false"),
    # "with values of 0, 1, or 2"
    "reader.prefetch_size": (
        lambda v: not isinstance(v, bool) and v in PREFETCH_SIZES,
        "0, 1 or 2",
    ),
    "checkpoint.checkpoint_folder": (_is_text, "a non-empty path"),
    "storage.storage_type": (_is_text, "a non-empty string"),
    "storage.storage_root": (_is_text, "a non-empty path"),
    # a prefetch depth ("Uncapped, matching reader.read_threads")
    "storage.storage_options.prefetch_window": (lambda v: _is_int(v, 0), "an integer >= 0"),
    "framework": (lambda v: v in FRAMEWORKS, f"one of {sorted(FRAMEWORKS)}"),
    "dataset.format": (lambda v: v in FORMATS, f"one of {sorted(FORMATS)}"),
    "dataset.num_samples_per_file": (lambda v: _is_int(v, 1), "an integer >= 1"),
    # Rules.md newest 3.6.3: "Supported options: Tensorflow or PyTorch" (DLIO also has DALI)
    "reader.data_loader": (lambda v: v in DATA_LOADERS, f"one of {sorted(DATA_LOADERS)}"),
    "workflow.generate_data": (_is_bool, "true or false"),
    "workflow.train": (_is_bool, "true or false"),
    "workflow.checkpoint": (_is_bool, "true or false"),
}


def flatten_overrides(overrides: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    """``{"reader": {"read_threads": 8}}`` and ``{"reader.read_threads": 8}`` are the same.

    Raises ``TypeError`` for a key that is not a non-empty string and ``ValueError`` for a
    parameter given more than once (nested and dotted), naming it.
    """
    flat: dict[str, object] = {}
    for key, value in overrides.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"override keys must be non-empty strings, got {key!r}")
        name = f"{prefix}{key}"
        nested = (
            flatten_overrides(value, f"{name}.") if isinstance(value, Mapping) else {name: value}
        )
        for nested_name, nested_value in nested.items():
            if nested_name in flat:
                raise ValueError(f"override {nested_name!r} is given more than once")
            flat[nested_name] = nested_value
    return flat


def _value_issue(name: str, value: object) -> Issue | None:
    test, kind = _VALUE_RULES[name]
    if test(value):
        return None
    return Issue(
        name,
        "INVALID",
        f"{name} must be {kind}, got {value!r}",
        expected=kind,
        actual=value,
        rule="value-kind",
    )


def _workflow_issues(model: str, name: str, value: object) -> list[Issue]:
    if name not in WORKFLOW_FLAGS:
        return [
            Issue(
                name,
                "INVALID",
                f"{name} is not a workflow flag of the published training workloads; it "
                "changes the workload, which no division allows",
                expected="not set",
                actual=value,
                rule="workflow",
            )
        ]
    bad = _value_issue(name, value)
    if bad is not None:
        return [bad]
    if (
        name == "workflow.checkpoint"
        and value is True
        and model not in CHECKPOINTING_TRAINING_MODELS
    ):
        return [
            Issue(
                name,
                "INVALID",
                f"{name} true adds checkpoint writes to the {model} workload, whose published "
                f"YAML leaves checkpointing off (only "
                f"{', '.join(sorted(CHECKPOINTING_TRAINING_MODELS))} trains with checkpoints)",
                expected=False,
                actual=value,
                rule="workflow",
            )
        ]
    return []


def check_overrides(
    model: str, overrides: Mapping[str, object], division: str = "closed"
) -> list[Issue]:
    """Check the parameters a submitter changed for ``model`` against the division rules.

    ``overrides`` maps dotted DLIO parameters (``"reader.read_threads"``) to values; nested
    mappings (``{"reader": {"read_threads": 8}}``) are flattened first. Findings:

    - a closed-division parameter: no issue (unless its value is of the wrong kind);
    - an open-division parameter: an ``OPEN`` issue (the run can only be an open submission;
      in ``division="closed"`` the message says it cannot be submitted as closed);
    - ``reader.odirect: true`` for a model other than unet3d: an ``INVALID`` issue (false, the
      default, is no issue);
    - a ``workflow`` flag: no issue for ``generate_data``/``train`` (the phase) and for
      ``checkpoint`` where the model's published YAML trains with checkpoints (unet3d) or it is
      false; ``workflow.checkpoint: true`` for another model, or any other ``workflow.*`` key,
      is ``INVALID``;
    - any other parameter, or a value of the wrong kind: an ``INVALID`` issue.

    Issues come in the order of ``overrides``. Raises :class:`UnknownWorkloadError` for an
    unknown model, ``ValueError`` for an unknown division or a parameter given twice (nested
    and dotted) and ``TypeError`` for a key that is not a non-empty string.
    """
    m = str(model).strip().lower()
    if m not in MODELS:
        raise UnknownWorkloadError(f"unknown model {model!r}; known models: {', '.join(MODELS)}")
    if division not in DIVISIONS:
        raise ValueError(f"division must be one of {DIVISIONS}, got {division!r}")
    issues: list[Issue] = []
    for name, value in flatten_overrides(overrides).items():
        if name.startswith("workflow."):
            issues.extend(_workflow_issues(m, name, value))
            continue
        if name == "reader.odirect" and m not in ODIRECT_MODELS and value is not False:
            bad = _value_issue(name, value)
            issues.append(
                bad
                or Issue(
                    name,
                    "INVALID",
                    f"{name} may only be enabled for {', '.join(sorted(ODIRECT_MODELS))}, not {m}",
                    expected=False,
                    actual=value,
                    rule="odirect",
                )
            )
            continue
        if name in CLOSED_PARAMETERS:
            pass
        elif name in OPEN_PARAMETERS:
            if division == "closed":
                text = f"{name} may only be changed in the open division; the run cannot be closed"
            else:
                text = f"{name} is an open-division change"
            issues.append(
                Issue(
                    name,
                    "OPEN",
                    text,
                    expected="the workload's value",
                    actual=value,
                    rule="open-parameters",
                )
            )
        else:
            issues.append(
                Issue(
                    name,
                    "INVALID",
                    f"{name} may not be changed in the closed or open division",
                    expected="the workload's value",
                    actual=value,
                    rule="allowed-overrides",
                )
            )
            continue
        bad = _value_issue(name, value)
        if bad is not None:
            issues.append(bad)
    return issues


def verdict(issues: Iterable[Issue]) -> Verdict:
    """``"INVALID"`` if any issue is INVALID, else ``"OPEN"`` if any is OPEN, else ``"CLOSED"``."""
    levels = {issue.level for issue in issues}
    unknown = levels - {"OPEN", "INVALID"}
    if unknown:
        raise ValueError(f"unknown issue levels {sorted(unknown)}")
    if "INVALID" in levels:
        return "INVALID"
    if "OPEN" in levels:
        return "OPEN"
    return "CLOSED"
