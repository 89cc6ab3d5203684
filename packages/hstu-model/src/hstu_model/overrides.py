"""Overrides of a preset from a file, the environment and the command line.

Precedence, lowest first: preset < file < environment < command line. Each layer is a mapping
`{section: {field: value}}` with sections `model`, `optimizer`, `train` and `sharding`;
`model.features` may itself be a mapping `{name: value}`. Every layer is applied with
`HSTUConfig.replace`, which validates the result, and every error names where the bad value
came from (file path, variable name or command-line item) and the field.

- File: TOML (`.toml`), JSON (`.json`) or YAML (`.yaml`/`.yml`, needs PyYAML).
- Environment: `HSTU_<SECTION>__<FIELD>=value`, e.g. `HSTU_MODEL__NUM_LAYERS=2`,
  `HSTU_MODEL__FEATURES__UID=user_id` (double underscore between the parts, case-insensitive);
  `HSTU_` names without a double underscore (such as build switches) are ignored.
- Command line: `section.field=value`, e.g. `model.num_layers=2`, `optimizer.betas=0.9,0.99`.

Text values (environment, command line) are parsed to the field's type: int, float, bool
(true/false, 1/0, yes/no, on/off), str, and tuples written as comma-separated items (`1,2,4`,
brackets optional). A file gives values in its own types: a string where a number, a bool or a
list belongs is refused (a quoted "3" is a typo as often as not), except the text forms below. `model.contextual_features` items are
written `name=rows` (`user_x_artist=10000,user_x_hour=2400`); in a file they may also be tables
`{name = "...", num_embeddings = ...}`. Changing their number needs the matching
`model.contextual_seq_len` (1 + the number of items) in the same layer (each layer is
validated on its own). The per-table `sharding.sharding_types` and `sharding.compute_kernels`
are written `table=value,...` (`item_id=row_wise,uid=table_wise`); in a file also as a table
`{item_id = "row_wise"}` or a list of `{table = "...", value = "..."}`.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import stat
import tomllib
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hstu_model.config import ConfigError, ContextualFeature, HSTUConfig, TableOption, preset

SECTIONS = ("model", "optimizer", "train", "sharding")
NESTED = {("model", "features")}
"""(section, field) pairs whose value is itself a dataclass overridable field by field."""
TABLE_MAPPINGS = {("sharding", "sharding_types"), ("sharding", "compute_kernels")}
"""(section, field) pairs of `TableOption` tuples, which a file may also write as a mapping
`{table: value}`."""

Overrides = dict[str, dict[str, Any]]
_Path = tuple[str, ...]

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _section_class(section: str) -> type:
    return typing.get_type_hints(HSTUConfig)[section]


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _resolve_path(path: _Path, source: str) -> Any:
    """The type of the field at `path`, or a ConfigError naming `source`."""
    dotted = ".".join(path)
    if not path or path[0] not in SECTIONS:
        raise ConfigError(
            f"{source}: unknown config section {path[0] if path else ''!r} "
            f"(known: {', '.join(SECTIONS)})"
        )
    types = _field_types(_section_class(path[0]))
    if len(path) < 2 or path[1] not in types:
        field_name = path[1] if len(path) > 1 else ""
        raise ConfigError(f"{source}: {path[0]}: unknown field {field_name!r}")
    if (path[0], path[1]) in NESTED:
        if len(path) == 2:
            raise ConfigError(f"{source}: {dotted}: set its fields, e.g. {dotted}.uid=...")
        sub_types = _field_types(types[path[1]])
        if len(path) != 3 or path[2] not in sub_types:
            raise ConfigError(f"{source}: {'.'.join(path[:2])}: unknown field {path[2]!r}")
        return sub_types[path[2]]
    if len(path) != 2:
        raise ConfigError(f"{source}: {dotted}: {path[1]} has no sub-fields")
    return types[path[1]]


def _parse_scalar(text: str, kind: type, where: str) -> Any:
    text = text.strip()
    if kind is ContextualFeature:
        try:
            return ContextualFeature.parse(text)
        except ConfigError as exc:
            message = str(exc).removeprefix("contextual_features: ")
            raise ConfigError(f"{where}: {message}") from None
    if kind is TableOption:
        return TableOption.parse(text, where)
    if kind is bool:
        lowered = text.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ConfigError(f"{where}: expected a bool (true/false), got {text!r}")
    if kind is str:
        return text
    try:
        return kind(text)
    except ValueError:
        if _is_enum(kind):
            choices = ", ".join(member.value for member in kind)
            raise ConfigError(f"{where}: expected one of {choices}, got {text!r}") from None
        raise ConfigError(f"{where}: expected {kind.__name__}, got {text!r}") from None


def parse_value(text: str, field_type: Any, where: str) -> Any:
    """`text` parsed to `field_type` (int, float, bool, str or a tuple of those)."""
    if typing.get_origin(field_type) is tuple:
        args = typing.get_args(field_type)
        stripped = text.strip()
        if stripped[:1] in "([" and stripped[-1:] in ")]":
            stripped = stripped[1:-1]
        items = [item for item in stripped.split(",") if item.strip()] if stripped.strip() else []
        return tuple(
            _parse_scalar(
                item, args[0] if args[-1] is Ellipsis else args[min(i, len(args) - 1)], where
            )
            for i, item in enumerate(items)
        )
    return _parse_scalar(text, field_type, where)


_TEXT_FORMS = (ContextualFeature, TableOption)
"""Field types a file may also give as text (`name=rows`, `table=value`, or lists of them)."""


def _check_native(value: Any, field_type: Any, where: str) -> Any:
    """A value read from a file, checked against (and lightly converted to) `field_type`. A
    file has its own types: a string where a number, a bool or a list belongs is refused, as a
    typo would be, rather than parsed."""
    if isinstance(value, str) and field_type is not str:
        element = typing.get_args(field_type)[0] if typing.get_origin(field_type) else None
        if field_type in _TEXT_FORMS or element in _TEXT_FORMS or _is_enum(field_type):
            return parse_value(value, field_type, where)
        name = getattr(field_type, "__name__", str(field_type))
        hint = "write the value unquoted"
        if "e" in value.lower() and _is_float(value):
            hint += " (YAML reads a number such as 1e-6 as a string: write 1.0e-6)"
        raise ConfigError(f"{where}: expected {name}, got the string {value!r}; {hint}")
    if (
        isinstance(value, Mapping)
        and typing.get_origin(field_type) is tuple
        and typing.get_args(field_type)[0] is TableOption
    ):  # a file's {table: value}
        value = [{"table": k, "value": v} for k, v in value.items()]
    if typing.get_origin(field_type) is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        args = typing.get_args(field_type)
        elem = args[0]
        return tuple(_check_native(v, elem, where) for v in value)
    if field_type is ContextualFeature and isinstance(value, Mapping):
        known = {f.name for f in dataclasses.fields(ContextualFeature)}
        unknown = sorted(set(value) - known)
        missing = sorted(known - set(value))
        if unknown or missing:
            raise ConfigError(
                f"{where}: a contextual feature needs exactly the keys name and num_embeddings"
                f", got {sorted(value)}"
            )
        name = _check_native(value["name"], str, where)
        rows = _check_native(value["num_embeddings"], int, where)
        try:
            return ContextualFeature(name, rows)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    if field_type is TableOption and isinstance(value, Mapping):
        if sorted(value) != ["table", "value"]:
            raise ConfigError(
                f"{where}: a table option needs exactly the keys table and value, "
                f"got {sorted(value)}"
            )
        table = _check_native(value["table"], str, where)
        choice = _check_native(value["value"], str, where)
        try:
            return TableOption(table, choice)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    if field_type is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if field_type is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if field_type in (bool, str) and isinstance(value, field_type):
        return value
    name = getattr(field_type, "__name__", str(field_type))
    raise ConfigError(f"{where}: expected {name}, got {value!r}")


def _is_enum(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, enum.Enum)


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _put(overrides: Overrides, path: _Path, value: Any) -> None:
    section = overrides.setdefault(path[0], {})
    if len(path) == 3:
        section.setdefault(path[1], {})[path[2]] = value
    else:
        section[path[1]] = value


def _flatten(data: Any, source: str, prefix: _Path = ()) -> Iterable[tuple[_Path, Any]]:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a mapping of sections, got {type(data).__name__}")
    for key, value in data.items():
        path = (*prefix, str(key))
        if not prefix and path[0] in SECTIONS and not isinstance(value, Mapping):
            raise ConfigError(
                f"{source}: {path[0]}: expected a mapping of its fields, got "
                f"{type(value).__name__} {value!r}"
            )
        if isinstance(value, Mapping) and path not in TABLE_MAPPINGS:
            yield from _flatten(value, source, path)
        else:
            yield path, value


# Each layer is built as (overrides, sources): sources maps a field path to its origin label.
_Layer = tuple[Overrides, dict[_Path, str]]


MAX_CONFIG_BYTES = 1 << 20
"""A config file holds a few fields; anything larger is not one."""


class _GivenTwice(ValueError):
    """A key given twice in one mapping of a config file (the message names it); TOML refuses
    it itself, JSON and YAML would silently keep the last value."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's mapping; _GivenTwice for a key it repeats."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise _GivenTwice(key)
        found[key] = value
    return found


MAX_CONFIG_NODES = 100_000
"""The most values a config file may hold with every YAML alias expanded: a config holds a
few fields, and a few hundred bytes of nested aliases ("billion laughs") expand to 10^9."""


def _yaml_repeated_key(yaml: Any, raw: bytes) -> str | None:
    """The dotted path of the first key that a mapping of the YAML document `raw` repeats.
    Raises ConfigError-worthy ValueError for a document whose aliases expand past
    MAX_CONFIG_NODES values. An alias is the node it names, so each node is walked once."""
    expanded: dict[int, int] = {}

    def size(node: Any) -> int:
        if id(node) not in expanded:
            expanded[id(node)] = 0  # a node that contains itself (a recursive alias) ends here
            children = (
                [v for pair in node.value for v in pair]
                if isinstance(node, yaml.MappingNode)
                else node.value
                if isinstance(node, yaml.SequenceNode)
                else []
            )
            total = 1
            for child in children:
                total += size(child)
                if total > MAX_CONFIG_NODES:
                    break
            expanded[id(node)] = total
        return expanded[id(node)]

    walked: set[int] = set()

    def walk(node: Any, path: tuple[str, ...]) -> str | None:
        if id(node) in walked:
            return None
        walked.add(id(node))
        children: list[tuple[str, Any]] = []
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, value_node in node.value:
                key = str(key_node.value)
                if key in seen:
                    return ".".join((*path, key))
                seen.add(key)
                children.append((key, value_node))
        elif isinstance(node, yaml.SequenceNode):
            children = [(str(i), child) for i, child in enumerate(node.value)]
        for key, child in children:
            found = walk(child, (*path, key))
            if found is not None:
                return found
        return None

    root = yaml.compose(raw, Loader=yaml.SafeLoader)
    if root is None:
        return None
    if size(root) > MAX_CONFIG_NODES:
        raise _TooLarge(
            f"its aliases expand to more than {MAX_CONFIG_NODES:,} values; a config holds a "
            "few fields"
        )
    return walk(root, ())


class _TooLarge(ValueError):
    """A config document that expands past MAX_CONFIG_NODES values."""


def _yaml_problem(exc: Exception) -> str:
    """A PyYAML error in one line: its problem and where (its message quotes the document
    over several lines)."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
    return f"{problem}{where}"


def _file_layer(path: str | os.PathLike[str]) -> _Layer:
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".json", ".yaml", ".yml"):
        raise ConfigError(
            f"{path}: unknown config file type {suffix or '(none)'!r}; "
            "use .toml, .json, .yaml or .yml"
        )
    try:
        # A device or a pipe (/dev/zero, a FIFO) would be read forever or wait forever.
        status = path.stat()
        if not stat.S_ISREG(status.st_mode):
            raise ConfigError(f"{path}: cannot read config file: not a regular file")
        if status.st_size > MAX_CONFIG_BYTES:
            raise ConfigError(
                f"{path}: cannot read config file: larger than {MAX_CONFIG_BYTES:,} bytes"
            )
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror or exc}") from None
    try:
        if suffix == ".toml":
            data = tomllib.loads(raw.decode("utf-8"))
        elif suffix == ".json":
            data = json.loads(raw, object_pairs_hook=_unique_keys)
        elif suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise ConfigError(
                    f"{path}: YAML config files need PyYAML, which is not installed; "
                    "install it (`uv pip install pyyaml`) or use a .toml or .json file"
                ) from None
            repeated = _yaml_repeated_key(yaml, raw)
            if repeated is not None:
                raise _GivenTwice(repeated)
            data = yaml.safe_load(raw) or {}
        else:
            raise AssertionError(f"{suffix}: checked above")
    except ConfigError:
        raise
    except _GivenTwice as exc:
        raise ConfigError(f"{path}: {exc} is given twice; keep one of them") from None
    except _TooLarge as exc:
        raise ConfigError(f"{path}: cannot parse {suffix[1:]} config: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path}: cannot parse {suffix[1:]} config: nested too deep") from None
    except Exception as exc:  # the parsers' own errors, reported with the file name
        if suffix in (".yaml", ".yml") and hasattr(exc, "problem_mark"):
            raise ConfigError(f"{path}: cannot parse yaml config: {_yaml_problem(exc)}") from None
        raise ConfigError(f"{path}: cannot parse {suffix[1:]} config: {exc}") from None
    overrides: Overrides = {}
    sources: dict[_Path, str] = {}
    for key_path, value in _flatten(data, str(path)):
        where = f"{path}: {'.'.join(key_path)}"
        field_type = _resolve_path(key_path, str(path))
        _put(overrides, key_path, _check_native(value, field_type, where))
        sources[key_path] = str(path)
    return overrides, sources


def _env_layer(environ: Mapping[str, str], prefix: str) -> _Layer:
    overrides: Overrides = {}
    sources: dict[_Path, str] = {}
    for name in sorted(environ):
        # Only `<prefix>SECTION__FIELD` names are config; e.g. HSTU_OPS_CUDA is left alone.
        if not name.upper().startswith(prefix.upper()) or "__" not in name[len(prefix) :]:
            continue
        key_path = tuple(part.lower() for part in name[len(prefix) :].split("__"))
        if key_path in sources:  # names are case-insensitive: which one was meant is unknown
            raise ConfigError(
                f"{sources[key_path]} and environment variable {name} both set "
                f"{'.'.join(key_path)}; unset one of them"
            )
        field_type = _resolve_path(key_path, f"environment variable {name}")
        where = f"environment variable {name}: {'.'.join(key_path)}"
        _put(overrides, key_path, parse_value(environ[name], field_type, where))
        sources[key_path] = f"environment variable {name}"
    return overrides, sources


def _cli_layer(items: Iterable[str]) -> _Layer:
    overrides: Overrides = {}
    sources: dict[_Path, str] = {}
    for item in items:
        source = f"command-line override {item!r}"
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{source}: expected section.field=value")
        key_path = tuple(part.strip() for part in key.split("."))
        field_type = _resolve_path(key_path, source)
        _put(overrides, key_path, parse_value(text, field_type, f"{source}: {key.strip()}"))
        sources[key_path] = source
    return overrides, sources


def load_overrides_file(path: str | os.PathLike[str]) -> Overrides:
    """`{section: {field: value}}` from a TOML, JSON or YAML file, typed and checked."""
    return _file_layer(path)[0]


def env_overrides(environ: Mapping[str, str] = os.environ, prefix: str = "HSTU_") -> Overrides:
    """Overrides from variables `<prefix><SECTION>__<FIELD>[__<SUBFIELD>]`, typed and checked."""
    return _env_layer(environ, prefix)[0]


def parse_cli_overrides(items: Iterable[str]) -> Overrides:
    """Overrides from `section.field=value` items, typed and checked."""
    return _cli_layer(items)[0]


def apply_overrides(config: HSTUConfig, overrides: Mapping[str, Mapping[str, Any]]) -> HSTUConfig:
    """`config` with `overrides` applied (nested `model.features` merged field by field)."""
    sections: dict[str, dict[str, Any]] = {}
    for section, values in overrides.items():
        current = getattr(config, section, None)
        merged = dict(values)
        for sec, name in NESTED:
            if sec == section and isinstance(merged.get(name), Mapping):
                merged[name] = dataclasses.replace(getattr(current, name), **merged[name])
        sections[section] = merged
    return config.replace(**sections)


def _apply_layer(config: HSTUConfig, layer: _Layer) -> HSTUConfig:
    overrides, sources = layer
    if not overrides:
        return config
    try:
        return apply_overrides(config, overrides)
    except (ConfigError, TypeError) as exc:
        field_name = str(exc).split(":", 1)[0]
        named = [src for key, src in sources.items() if field_name in key]
        origin = ", ".join(dict.fromkeys(named or sources.values()))
        raise ConfigError(f"{origin}: {exc}") from None


def resolve_config(
    preset_name: str,
    *,
    file: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    cli: Iterable[str] = (),
) -> HSTUConfig:
    """The preset, then the file, then the environment (`os.environ` when `environ` is None),
    then the command-line items, each overriding the previous."""
    config = preset(preset_name)
    layers = []
    if file is not None:
        layers.append(_file_layer(file))
    layers.append(_env_layer(os.environ if environ is None else environ, "HSTU_"))
    layers.append(_cli_layer(cli))
    for layer in layers:
        config = _apply_layer(config, layer)
    return config
