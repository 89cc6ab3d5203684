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

Where the text is silent, the verdict is mlpstorage's (``mlpstorage/rules.py`` at caa90c9, the
2.0 tool); where its code decides differently from a sentence of the text, the text wins, and
the package's docs/rules.md quotes that sentence ("Agreement with mlpstorage").
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from storage_workloads.workloads import MODELS, WORKLOADS, UnknownWorkloadError

__all__ = [
    "CHECKPOINTING_TRAINING_MODELS",
    "CLOSED_PARAMETERS",
    "DIVISIONS",
    "ODIRECT_MODELS",
    "OPEN_PARAMETERS",
    "PREFETCH_SIZES",
    "SAMPLES_PER_FILE_FORMAT",
    "SAMPLES_PER_FILE_LOADER",
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


def _is_int(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, numbers.Integral)


def _is_text(value: object) -> bool:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    return isinstance(value, str) and bool(value.strip())


def _is_bool(value: object) -> bool:
    return isinstance(value, bool)


# The kind of value each parameter takes, as the tables describe it (a number of files or
# threads is an integer, ODIRECT's default False makes it a flag, a path or name is text), and
# a range only where the text gives one: reader.prefetch_size "with values of 0, 1, or 2"
# (SG v2.0 10.1). Where the text gives no range, none is imposed, as mlpstorage imposes none:
# reader.read_threads -1 is CLOSED. Whether DLIO can run a value is the runner's question
# (storage_workloads.dlio.keys), not the rules'.
_VALUE_RULES: Final[dict[str, tuple[Callable[[object], bool], str]]] = {
    "dataset.num_files_train": (_is_int, "an integer"),  # "Number of files for the training set"
    "dataset.num_subfolders_train": (_is_int, "an integer"),
    "dataset.data_folder": (_is_text, "a non-empty path"),
    "reader.read_threads": (_is_int, "an integer"),  # "Number of threads to load the data"
    "reader.computation_threads": (_is_int, "an integer"),
    "reader.transfer_size": (_is_int, "an integer (bytes)"),  # "an int64 scalar"
    "reader.odirect": (_is_bool, "true or false"),  # "Enable ODIRECT mode", default False
    "reader.prefetch_size": (
        lambda v: _is_int(v) and v in PREFETCH_SIZES,
        "0, 1 or 2",
    ),
    "checkpoint.checkpoint_folder": (_is_text, "a non-empty path"),
    "storage.storage_type": (_is_text, "a non-empty string"),
    "storage.storage_root": (_is_text, "a non-empty path"),
    "storage.storage_options.prefetch_window": (_is_int, "an integer"),
    # The OPEN table names no values: "The machine learning framework", "Format of the
    # dataset", and "OPEN submissions can have custom data loaders".
    "framework": (_is_text, "a framework name"),
    "dataset.format": (_is_text, "a format name"),
    "dataset.num_samples_per_file": (_is_int, "an integer"),
    "reader.data_loader": (_is_text, "a data loader name"),
    "workflow.generate_data": (_is_bool, "true or false"),
    "workflow.train": (_is_bool, "true or false"),
    "workflow.checkpoint": (_is_bool, "true or false"),
}

#: SG v2.0 10.2 on ``dataset.num_samples_per_file``: "Changing this parameter is supported only
#: with Tensorflow, using tfrecord datasets. Currently, the benchmark code only supports
#: num_samples_per_file = 1 for Pytorch data loader." A change is OPEN with the tensorflow
#: data loader on tfrecord files, and INVALID otherwise.
SAMPLES_PER_FILE_LOADER: Final = "tensorflow"
SAMPLES_PER_FILE_FORMAT: Final = "tfrecord"


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
    - ``dataset.num_samples_per_file`` changed without the tensorflow loader on tfrecord
      files: an ``INVALID`` issue (``samples-per-file``);
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
    flat = flatten_overrides(overrides)
    for name, value in flat.items():
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
        elif name == "dataset.num_samples_per_file":
            issues.extend(_samples_per_file_issues(m, flat, value))
    return issues


def _samples_per_file_issues(
    model: str, overrides: Mapping[str, object], value: object
) -> list[Issue]:
    """A changed ``dataset.num_samples_per_file`` needs the tensorflow data loader on tfrecord
    files (:data:`SAMPLES_PER_FILE_LOADER`): the run's own values where it overrides them,
    else the model's published ones."""
    published = [w for (mod, _), w in WORKLOADS.items() if mod == model]
    loader = overrides.get("reader.data_loader", published[0].data_loader)
    formats = {w.format for w in published}
    fmt = overrides.get("dataset.format", formats.pop() if len(formats) == 1 else None)
    if loader == SAMPLES_PER_FILE_LOADER and fmt == SAMPLES_PER_FILE_FORMAT:
        return []
    return [
        Issue(
            "dataset.num_samples_per_file",
            "INVALID",
            f"dataset.num_samples_per_file {value!r} with the {loader} data loader on {fmt} "
            "files: changing it is supported only with Tensorflow, using tfrecord datasets "
            "(SG v2.0 10.2)",
            expected=f"the workload's value, or the {SAMPLES_PER_FILE_LOADER} loader on "
            f"{SAMPLES_PER_FILE_FORMAT}",
            actual=value,
            rule="samples-per-file",
        )
    ]


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
