"""Yambda data for DLRMv4: the public schema, a synthetic generator, the temporal split,
out-of-core preprocessing (:mod:`yambda_data.preprocess`; its function is not re-exported
here, so the submodule stays importable by name), samples (in memory, the spec, or cut from the
memory-mapped sample store), hashed cross features, the streaming order over time windows and
(in :mod:`yambda_data.batching` and :mod:`yambda_data.loader`, which need torch) TorchRec
batches and a multi-worker loader.

Importing this package imports none of its modules (nor torch): each public name is imported
from its module, listed in ``__init__.pyi``, when it is first used, so that a command loads
only what it runs (``yambda-data preprocess`` loads neither the generator nor the store).
"""

import ast
import importlib
from pathlib import Path
from typing import Any

__version__ = "0.1.0"


def _stub() -> tuple[dict[str, str], list[str]]:
    """Each public name's module, from the stub's ``from MODULE import NAME`` lines, and the
    stub's ``__all__``."""
    stub = ast.parse((Path(__file__).parent / "__init__.pyi").read_text(encoding="utf-8"))
    exports = {
        alias.name: node.module
        for node in stub.body
        if isinstance(node, ast.ImportFrom) and node.module is not None
        for alias in node.names
    }
    (names,) = [
        ast.literal_eval(node.value)
        for node in stub.body
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__"
    ]
    return exports, names


_EXPORTS, __all__ = _stub()


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'yambda_data' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
