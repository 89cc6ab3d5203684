"""Nested config mappings and their dotted keys (``reader.batch_size``), both ways."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["apply_params", "flatten"]


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


def apply_params(config: dict[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """Set dotted parameters (``{"train.epochs": 1}``) in a nested mapping, in place; returns
    it. A parameter whose path runs through a value that is not a mapping raises
    ``ValueError``."""
    for key, value in params.items():
        if not isinstance(key, str) or not key or any(not part for part in key.split(".")):
            raise ValueError(f"parameter names are dotted DLIO keys like train.epochs, got {key!r}")
        node: dict[str, Any] = config
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(f"parameter {key}: {part} is a value ({child!r}), not a section")
            node = child
        node[parts[-1]] = value
    return config
