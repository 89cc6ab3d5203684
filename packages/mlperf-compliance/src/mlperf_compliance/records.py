"""Reading ``:::MLLOG`` records back from a log file, and finding the lines that are broken."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "MLLOG_PREFIX",
    "LogLine",
    "LogProblem",
    "LogScan",
    "bounded_lines",
    "not_a_file",
    "read_log",
    "scan_log",
]

#: Every MLPerf record line starts with this token (the checker also finds it mid-line).
MLLOG_PREFIX = ":::MLLOG "

# The fields mlperf_logging's parser reads from every record (``string_to_logline``).
_REQUIRED_FIELDS = ("time_ms", "key", "value", "metadata")

#: The longest ``:::MLLOG`` line read (characters). A record of this repository's logger is
#: under 1 KiB; the official checker's time grows with the square of a record's size (a
#: 1.6 MB value keeps it busy for minutes), so a longer line is refused before it runs.
MAX_RECORD_CHARS = 16 * 1024
#: The deepest nesting of objects and lists in a record (the logger writes 3 levels).
MAX_RECORD_DEPTH = 32


class _RecordRefused(ValueError):
    """A record that parses as JSON but that no MLPerf tool can judge (see ``_decode``)."""


def _refuse_constant(name: str) -> float:
    raise _RecordRefused(f"the record holds {name}, not a finite number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _RecordRefused(f"the number {text[:40]} is not finite as a float")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # JSON parsers disagree on a repeated name (Python keeps the last, others the first), so
    # a record that says two things about one field is no record.
    record: dict[str, Any] = {}
    for name, value in pairs:
        if name in record:
            raise _RecordRefused(f"the record gives {name!r} twice")
        record[name] = value
    return record


def _check_tree(record: Any) -> None:
    """Refuse nesting deeper than MAX_RECORD_DEPTH and integers no float can hold (the
    checker computes with floats: ``float(10**400)`` raises OverflowError)."""
    stack: list[tuple[Any, int]] = [(record, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth > MAX_RECORD_DEPTH:
                raise _RecordRefused(f"the record nests deeper than {MAX_RECORD_DEPTH} levels")
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(node, int) and not isinstance(node, bool) and abs(node) > 2**1023:
            raise _RecordRefused("the record holds an integer too large for a float")


# The twin of storage_workloads._reading.parse_json_text (finite numbers, bounded depth):
# the two packages share only dlrmv4-cli, the command lines' error convention, and their
# bounds differ (a record's 32 levels and float-sized integers for the official checker, a
# results file's 64 levels), so each keeps its own.
def _decode(body: str) -> Any:
    """``json.loads`` of one record, refusing what parses but means nothing: NaN and
    Infinity, numbers that overflow a float, a key given twice, nesting past
    MAX_RECORD_DEPTH. Raises ``json.JSONDecodeError`` for bad JSON, ``_RecordRefused`` for
    the rest."""
    try:
        record = json.loads(
            body,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            object_pairs_hook=_unique_keys,
        )
    except RecursionError:
        raise _RecordRefused(f"the record nests deeper than {MAX_RECORD_DEPTH} levels") from None
    except json.JSONDecodeError:
        raise
    except ValueError as exc:
        if isinstance(exc, _RecordRefused):
            raise
        # int() of more digits than Python converts (sys.get_int_max_str_digits).
        raise _RecordRefused("the record holds an integer too large for a float") from None
    _check_tree(record)
    return record


def bounded_lines(fh: Any) -> Iterator[str]:
    """The lines of a text file, each cut to MAX_RECORD_CHARS + 1 characters (the rest of
    a longer line is read and dropped), so that one huge line costs no memory."""
    while True:
        line = fh.readline(MAX_RECORD_CHARS + 1)
        if not line:
            return
        if len(line) > MAX_RECORD_CHARS and not line.endswith(("\n", "\r")):
            while (rest := fh.readline(MAX_RECORD_CHARS)) and not rest.endswith(("\n", "\r")):
                pass
        yield line


def _what_is(path: Path) -> str | None:
    """What ``path`` is when it is no regular file (``a FIFO``), ``None`` when it is one."""
    if path.is_file():
        return None
    if path.is_symlink() and not path.exists():
        return "a dangling symbolic link"
    if path.is_fifo():
        return "a FIFO"
    if path.is_dir():
        return "a directory"
    return "not a regular file" if path.exists() else "no such file"


def not_a_file(path: Path) -> str | None:
    """Why ``path`` cannot be read as a log without waiting or failing (a FIFO would block
    its reader forever), or ``None`` for a regular file."""
    what = _what_is(path)
    return None if what is None else f"{path}: {what}, not a log file"


def why_not_a_log(log: Path) -> str:
    """The message of the ``FileNotFoundError`` for a log that is not a regular file."""
    what = _what_is(log)
    return f"no MLPerf log at {log}" + ("" if what in (None, "no such file") else f" ({what})")


def read_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Return the records of an MLPerf log, in file order, as dictionaries.

    Lines without the ``:::MLLOG`` token are skipped, as the official parser skips them; text
    before the token on a line is ignored. A record that is not valid JSON raises
    ``ValueError`` naming its line number.
    """
    records: list[dict[str, Any]] = []
    with Path(path).open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            at = line.find(MLLOG_PREFIX)
            if at < 0:
                continue
            try:
                records.append(_decode(line[at + len(MLLOG_PREFIX) :]))
            except ValueError as exc:
                raise ValueError(f"{path}:{lineno}: malformed MLLOG record: {exc}") from exc
    return records


@dataclass(frozen=True)
class LogProblem:
    """One ``:::MLLOG`` line that the official tools cannot use.

    Attributes:
        path: the log file.
        line: the 1-based line number in the file.
        message: what is wrong with the line.
        fatal: ``True`` when mlperf_logging's parser would crash on the line (a record without
            ``key``, say) rather than skip it as a parse error.
    """

    path: str
    line: int
    message: str
    fatal: bool = False

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass(frozen=True)
class LogLine:
    """One well-formed record and where it is.

    Attributes:
        line: the 1-based line number in the file.
        index: the record's position among the ``:::MLLOG`` lines of the file, counting from 0
            (what the official checker calls the line number, as in ``failed in line 50``).
        record: the parsed JSON object.
        text: the record as the official parser sees it (from the token, stripped).
    """

    line: int
    index: int
    record: dict[str, Any]
    text: str

    @property
    def key(self) -> str:
        return str(self.record.get("key"))

    @property
    def time_ms(self) -> float:
        return float(self.record["time_ms"])

    @property
    def metadata(self) -> dict[str, Any]:
        meta = self.record.get("metadata")
        return meta if isinstance(meta, dict) else {}


@dataclass(frozen=True)
class LogScan:
    """A log read the way mlperf_logging reads it, with the line number of every record.

    Attributes:
        path: the log file.
        lines: the well-formed records, in file order.
        problems: every ``:::MLLOG`` line that is malformed, truncated or lacks a field the
            official parser needs.
        token_lines: the 1-based file line number of each ``:::MLLOG`` line, in order (the
            official checker's line ``i`` is ``token_lines[i]`` here).
    """

    path: str
    lines: list[LogLine] = field(default_factory=list)
    problems: list[LogProblem] = field(default_factory=list)
    token_lines: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No problems: every ``:::MLLOG`` line is a usable record."""
        return not self.problems

    @property
    def fatal(self) -> bool:
        """Some line would crash mlperf_logging's parser (not merely be skipped by it)."""
        return any(p.fatal for p in self.problems)

    def file_line(self, index: int) -> int | None:
        """The file line number of the official checker's line ``index`` (0-based)."""
        if 0 <= index < len(self.token_lines):
            return self.token_lines[index]
        return None

    def find_line(self, text: str) -> int | None:
        """The file line number of the record whose text is ``text`` (first match)."""
        wanted = text.strip()
        for entry in self.lines:
            if entry.text == wanted:
                return entry.line
        return None

    def first(self, key: str) -> LogLine | None:
        """The first record with ``key``."""
        for entry in self.lines:
            if entry.key == key:
                return entry
        return None

    def all(self, key: str) -> list[LogLine]:
        """Every record with ``key``, in order."""
        return [entry for entry in self.lines if entry.key == key]


def _problem(record: Any) -> tuple[str, bool] | None:
    """What mlperf_logging's ``string_to_logline`` would make of a decoded record, if wrong."""
    if not isinstance(record, dict):
        return f"the record is a JSON {type(record).__name__}, not an object", True
    missing = [name for name in _REQUIRED_FIELDS if name not in record]
    if missing:
        return "the record has no " + ", ".join(repr(m) for m in missing), True
    time_ms = record["time_ms"]
    if isinstance(time_ms, (dict, list)) or time_ms is None:
        return f"time_ms must be a number, got {json.dumps(time_ms)}", True
    try:
        seconds = float(time_ms)
    except (ValueError, OverflowError):
        return f"time_ms must be a number, got {json.dumps(time_ms)}", False
    if not math.isfinite(seconds):  # "NaN" as a string: the parser takes it, every sum is NaN
        return f"time_ms must be a finite number, got {json.dumps(time_ms)}", True
    return None


def scan_log(path: str | os.PathLike[str]) -> LogScan:
    """Read ``path`` as mlperf_logging's parser does and report each line it cannot use.

    Like the official parser, the file is read as Latin-1 (any bytes decode), lines without
    the ``:::MLLOG`` token are ignored, and a line's record starts after the *last* token on
    the line. A line whose JSON does not parse (a record cut short by a crash, say) is a
    problem; so is a record that lacks ``time_ms``, ``key``, ``value`` or ``metadata``.

    Raises ``FileNotFoundError`` if ``path`` is not a file.
    """
    log = Path(path)
    if not log.is_file():
        raise FileNotFoundError(why_not_a_log(log))
    name = os.fspath(path)
    scan = LogScan(path=name)
    # Iterate the file object as the official parser does (universal newlines), so that line
    # numbers match its own; str.splitlines would also split at form feeds and U+0085.
    with log.open(encoding="latin-1") as fh:
        texts = list(bounded_lines(fh))
    for lineno, line in enumerate(texts, start=1):
        at = line.rfind(MLLOG_PREFIX)
        if at < 0:
            continue
        index = len(scan.token_lines)
        scan.token_lines.append(lineno)
        if len(line) > MAX_RECORD_CHARS:
            scan.problems.append(
                LogProblem(
                    name,
                    lineno,
                    f"bad MLLOG record: the line is longer than {MAX_RECORD_CHARS:,} characters",
                    fatal=True,
                )
            )
            continue
        text = line[at:].strip()
        body = text[len(MLLOG_PREFIX) :]
        try:
            record = _decode(body)
        except _RecordRefused as exc:
            scan.problems.append(LogProblem(name, lineno, f"bad MLLOG record: {exc}", fatal=True))
            continue
        except json.JSONDecodeError as exc:
            last = lineno == len(texts) and not line.endswith(("\n", "\r"))
            what = (
                "truncated MLLOG record (the file ends inside it)"
                if last
                else "malformed MLLOG record"
            )
            scan.problems.append(
                LogProblem(
                    name,
                    lineno,
                    f"{what}: {exc.msg}: column {at + len(MLLOG_PREFIX) + exc.pos + 1}",
                )
            )
            continue
        wrong = _problem(record)
        if wrong is not None:
            message, fatal = wrong
            scan.problems.append(LogProblem(name, lineno, f"bad MLLOG record: {message}", fatal))
            continue
        scan.lines.append(LogLine(line=lineno, index=index, record=record, text=text))
    return scan
