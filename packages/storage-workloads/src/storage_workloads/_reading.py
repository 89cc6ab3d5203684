"""How a file that cannot be decoded or parsed is named in a one-line message."""

from __future__ import annotations

import json
import math
import os
import stat
from typing import Any

import yaml


def not_utf8(exc: UnicodeDecodeError) -> str:
    """``not UTF-8 text (byte 0xff at offset 24)``: the first byte that is not, and where."""
    return f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"


def malformed_json(exc: json.JSONDecodeError) -> str:
    """``malformed JSON at line 1, column 12: Unterminated string starting at``: where first,
    since the parser's own message may end in "at"."""
    return f"malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"


MAX_RESULT_BYTES = 64 << 20
"""The largest results or metadata file read: these hold figures, a few KiB (DLIO's
per-rank outputs a few MiB); more is not such a file."""
MAX_RESULT_DEPTH = 64
"""The deepest nesting of objects and lists read from such a file."""


class UnusableFile(ValueError):
    """A file that exists but is not one to read (a FIFO, too large, NaN in it, ...): the
    message says why, without the path."""


def read_bounded_text(path: str | os.PathLike[str], limit: int = MAX_RESULT_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes. A FIFO, a device or a
    folder raises :class:`UnusableFile` without waiting on it (opened non-blocking, then
    checked); so does a larger file or one that is not UTF-8. ``OSError`` as ``open``."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = (
                "a FIFO"
                if stat.S_ISFIFO(mode)
                else "a folder"
                if stat.S_ISDIR(mode)
                else ("a device or socket")
            )
            raise UnusableFile(f"{kind}, not a regular file")
        raw = fh.read(limit + 1)
    if len(raw) > limit:
        raise UnusableFile(f"larger than {limit:,} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnusableFile(not_utf8(exc)) from None


def _refuse_constant(name: str) -> float:
    raise UnusableFile(f"{name} is not a finite number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise UnusableFile(f"{text[:40]} is not a finite number")
    return value


def _check_depth(data: Any) -> None:
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth > MAX_RESULT_DEPTH:
                raise UnusableFile(f"nested deeper than {MAX_RESULT_DEPTH} levels")
            stack.extend(
                (c, depth + 1) for c in (node.values() if isinstance(node, dict) else node)
            )


def load_json_file(path: str | os.PathLike[str], limit: int = MAX_RESULT_BYTES) -> Any:
    """The JSON data of a results or metadata file, read by :func:`read_bounded_text`.
    Raises :class:`UnusableFile` for malformed JSON, NaN or Infinity (``1e400`` included),
    nesting past :data:`MAX_RESULT_DEPTH` and integers of more digits than Python converts;
    ``OSError`` as ``open``."""
    return parse_json_text(read_bounded_text(path, limit))


# The twin of mlperf_compliance.records._decode (see there why each package keeps its own).
def parse_json_text(text: str) -> Any:
    """The JSON data of ``text``, refused as :func:`load_json_file` refuses it."""
    try:
        data = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite)
    except json.JSONDecodeError as exc:
        raise UnusableFile(malformed_json(exc)) from None
    except RecursionError:
        raise UnusableFile(f"nested deeper than {MAX_RESULT_DEPTH} levels") from None
    except UnusableFile:
        raise
    except ValueError as exc:  # more digits than int() converts
        raise UnusableFile(" ".join(str(exc).split())) from None
    _check_depth(data)
    return data


MAX_YAML_VALUES = 100_000
"""The most values a YAML parameters or config file may hold with every alias expanded: such
a file holds a few hundred, and a few hundred bytes of nested aliases ("billion laughs")
expand to 10^9."""


def parse_yaml_text(text: str) -> Any:
    """The YAML data of ``text`` (PyYAML's safe loader). Raises :class:`UnusableFile` for a
    document nested past :data:`MAX_RESULT_DEPTH` levels, one whose aliases expand past
    :data:`MAX_YAML_VALUES` values or that contains itself through an alias, both found on
    the composed nodes, where an alias is the node it names (so each is measured once), before
    anything is built; ``yaml.YAMLError`` for malformed YAML."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is None:
        return None
    measured: dict[int, tuple[int, int] | None] = {}

    def measure(node: Any, depth: int) -> tuple[int, int]:
        """The values under ``node`` and its height, aliases expanded."""
        if depth > MAX_RESULT_DEPTH:
            raise UnusableFile(f"nested deeper than {MAX_RESULT_DEPTH} levels")
        key = id(node)
        if key in measured:
            known = measured[key]
            if known is None:
                raise UnusableFile("an alias contains the node it names")
            if depth + known[1] > MAX_RESULT_DEPTH:
                raise UnusableFile(f"nested deeper than {MAX_RESULT_DEPTH} levels")
            return known
        measured[key] = None
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            children = []
        values, height = 1, 0
        for child in children:
            child_values, child_height = measure(child, depth + 1)
            values += child_values
            height = max(height, child_height + 1)
            if values > MAX_YAML_VALUES:
                raise UnusableFile(
                    f"its aliases expand to more than {MAX_YAML_VALUES:,} values; such a "
                    "file holds a few hundred"
                )
        measured[key] = (values, height)
        return values, height

    measure(root, 1)
    return yaml.safe_load(text)
