"""The JSON form of the package's typed results, written only where a file or a ``--format
json`` output needs it."""

from __future__ import annotations

import dataclasses
from typing import Any


def json_data(value: Any) -> Any:
    """``value`` as JSON data: a result by its own ``as_dict`` (which may order or flatten its
    fields), any other dataclass field by field, lists, tuples and mappings item by item, copied
    so that changing the data leaves the result alone."""
    as_dict = getattr(value, "as_dict", None)
    if callable(as_dict) and not isinstance(value, type):
        return as_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: json_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return type(value)(json_data(item) for item in value)
    if isinstance(value, dict):
        return {key: json_data(item) for key, item in value.items()}
    return value


class JsonRecord:
    """A result whose JSON form is its fields in their order (mixed into frozen dataclasses)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            f.name: json_data(getattr(self, f.name))
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
        }
