"""Which DLIO parameters an MLPerf Storage training submission may change, per division."""

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
    "CLOSED_PARAMETERS",
    "DIVISIONS",
    "ODIRECT_MODELS",
    "OPEN_PARAMETERS",
    "Issue",
    "Level",
    "Verdict",
    "check_overrides",
    "verdict",
]

Level = Literal["OPEN", "INVALID"]
Verdict = Literal["CLOSED", "OPEN", "INVALID"]

#: Divisions :func:`check_overrides` knows.
DIVISIONS: Final = ("closed", "open")

#: Parameters the closed division lets a submitter set (dotted DLIO config paths).
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
    }
)
#: Parameters the open division lets a submitter set in addition to the closed ones.
OPEN_PARAMETERS: Final = frozenset(
    {"framework", "dataset.format", "dataset.num_samples_per_file", "reader.data_loader"}
)
#: Models for which ``reader.odirect`` may be set.
ODIRECT_MODELS: Final = frozenset({"unet3d"})


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
        rule: short name of the rule (``closed-parameters``, ``odirect``, ``sizing``, ...).
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


# Kind of value each parameter takes: a test and its description for the message.
_VALUE_RULES: Final[dict[str, tuple[Callable[[object], bool], str]]] = {
    "dataset.num_files_train": (lambda v: _is_int(v, 1), "an integer >= 1"),
    "dataset.num_subfolders_train": (lambda v: _is_int(v, 0), "an integer >= 0"),
    "dataset.data_folder": (_is_text, "a non-empty path"),
    "reader.read_threads": (lambda v: _is_int(v, 0), "an integer >= 0"),
    "reader.computation_threads": (lambda v: _is_int(v, 1), "an integer >= 1"),
    "reader.transfer_size": (lambda v: _is_int(v, 1), "an integer >= 1 (bytes)"),
    "reader.odirect": (lambda v: isinstance(v, bool), "true or false"),
    "reader.prefetch_size": (lambda v: _is_int(v, 0), "an integer >= 0"),
    "checkpoint.checkpoint_folder": (_is_text, "a non-empty path"),
    "storage.storage_type": (_is_text, "a non-empty string"),
    "storage.storage_root": (_is_text, "a non-empty path"),
    "framework": (lambda v: v in FRAMEWORKS, f"one of {sorted(FRAMEWORKS)}"),
    "dataset.format": (lambda v: v in FORMATS, f"one of {sorted(FORMATS)}"),
    "dataset.num_samples_per_file": (lambda v: _is_int(v, 1), "an integer >= 1"),
    "reader.data_loader": (lambda v: v in DATA_LOADERS, f"one of {sorted(DATA_LOADERS)}"),
}


def _flatten(overrides: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    """``{"reader": {"read_threads": 8}}`` and ``{"reader.read_threads": 8}`` are the same."""
    flat: dict[str, object] = {}
    for key, value in overrides.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"override keys must be non-empty strings, got {key!r}")
        name = f"{prefix}{key}"
        nested = _flatten(value, f"{name}.") if isinstance(value, Mapping) else {name: value}
        for nested_name, nested_value in nested.items():
            if nested_name in flat:
                raise ValueError(f"override {nested_name!r} is given more than once")
            flat[nested_name] = nested_value
    return flat


def check_overrides(
    model: str, overrides: Mapping[str, object], division: str = "closed"
) -> list[Issue]:
    """Check the parameters a submitter changed for ``model`` against the division rules.

    ``overrides`` maps dotted DLIO parameters (``"reader.read_threads"``) to values; nested
    mappings (``{"reader": {"read_threads": 8}}``) are flattened first. Findings:

    - a closed-division parameter: no issue (unless its value is of the wrong kind);
    - an open-division parameter: an ``OPEN`` issue (the run can only be an open submission;
      in ``division="closed"`` the message says it cannot be submitted as closed);
    - ``reader.odirect`` for a model other than unet3d, any other parameter, or a value of the
      wrong kind: an ``INVALID`` issue.

    Issues come in the order of ``overrides``. Raises :class:`UnknownWorkloadError` for an
    unknown model and ``ValueError`` for an unknown division.
    """
    m = str(model).strip().lower()
    if m not in MODELS:
        raise UnknownWorkloadError(f"unknown model {model!r}; known models: {', '.join(MODELS)}")
    if division not in DIVISIONS:
        raise ValueError(f"division must be one of {DIVISIONS}, got {division!r}")
    issues: list[Issue] = []
    for name, value in _flatten(overrides).items():
        if name == "reader.odirect" and m not in ODIRECT_MODELS:
            issues.append(
                Issue(
                    name,
                    "INVALID",
                    f"{name} may only be set for {', '.join(sorted(ODIRECT_MODELS))}, not {m}",
                    expected="not set",
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
        test, kind = _VALUE_RULES[name]
        if not test(value):
            issues.append(
                Issue(
                    name,
                    "INVALID",
                    f"{name} must be {kind}, got {value!r}",
                    expected=kind,
                    actual=value,
                    rule="value-kind",
                )
            )
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
