"""Errors that say what failed and where: the file being read, or the path being written and
the free space left there. Every message is one line."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

import polars as pl

__all__ = [
    "InputFileError",
    "ReadError",
    "WriteError",
    "first_line",
    "free_space",
    "reading",
    "reading_any",
    "writing",
]

_OS_ERROR = re.compile(r"\(os error (\d+)\)")


class StoreError(RuntimeError):
    """A store directory that is missing, incomplete, corrupt or built for other settings."""


class InputFileError(ValueError):
    """A file that cannot be read as what it should be (truncated, not parquet, corrupt).

    ``path`` names the file; the message is ``<path>: <problem>``.
    """

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")

    def __reduce__(self) -> tuple:  # pickled (to another rank, a worker) with its fields
        return type(self), (self.path, self.problem)


class ReadError(OSError):
    """An operating system error while reading a file (polars reports those without the
    file's name): ``errno``, ``filename`` and a one-line message naming it."""

    def __str__(self) -> str:
        return f"reading {self.filename}: {self.strerror}"


class WriteError(OSError):
    """Writing an output failed (no space left, quota, read-only file system, I/O error...).

    ``errno`` is the operating system's error number when one is known, ``filename`` the path
    that was being written, ``output`` the result it was for (an output directory written
    through a temporary sibling, say) and ``free_bytes`` the space left there.
    """

    def __init__(
        self,
        code: int | None,
        reason: str,
        path: Path,
        output: Path | None,
        free_bytes: int | None,
        where: Path,
    ) -> None:
        super().__init__(code, reason, str(path))
        self.output = output
        self.free_bytes = free_bytes
        target = path if output is None else f"{output} (at {path})"
        number = f" [errno {code}]" if code is not None else ""
        free = "free space unknown" if free_bytes is None else f"{free_bytes:,} bytes free"
        self._message = f"writing {target}: {reason}{number}; {free} in {where}"
        self._fields = (code, reason, path, output, free_bytes, where)

    def __reduce__(self) -> tuple:
        return type(self), self._fields

    def __str__(self) -> str:
        return self._message


def first_line(text: str) -> str:
    """The first non-empty line of ``text`` (polars messages go on with the query plan)."""
    for line in str(text).splitlines():
        if line.strip():
            return line.strip()
    return ""


def _existing_dir(path: Path) -> Path:
    """``path`` itself when it is a directory, else its nearest existing ancestor."""
    for candidate in (path, *path.parents):
        if candidate.is_dir():
            return candidate
    return Path(".")


def free_space(path: str | Path) -> tuple[int | None, Path]:
    """The free bytes on the file system of ``path`` (None if unknown) and the directory
    they were measured at (``path``, or its nearest existing ancestor)."""
    where = _existing_dir(Path(os.path.abspath(path)))
    try:
        return shutil.disk_usage(where).free, where
    except OSError:
        return None, where


def _errno_of(exc: BaseException) -> int | None:
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno
    match = _OS_ERROR.search(str(exc))
    return int(match.group(1)) if match else None


def write_error(
    path: str | Path, exc: BaseException, output: str | Path | None = None
) -> WriteError:
    """The :class:`WriteError` for ``exc`` raised while writing ``path`` (for ``output``)."""
    code = _errno_of(exc)
    if code is not None:
        reason = os.strerror(code)
    elif isinstance(exc, OSError) and exc.strerror:
        reason = exc.strerror
    else:
        reason = first_line(str(exc)) or type(exc).__name__
    path = Path(path)
    # Measured where the result goes (the temporary directory beside it is removed).
    free, where = free_space(path.parent if output is None else Path(output).parent)
    if code is None and free == 0:
        # numpy reports a short write without an errno ("N requested and M written")
        reason += " (the file system is full)"
    return WriteError(code, reason, path, None if output is None else Path(output), free, where)


@contextlib.contextmanager
def writing(path: str | Path, output: str | Path | None = None) -> Iterator[None]:
    """Report an OSError (or a polars error, which is how polars reports one) raised inside as
    a :class:`WriteError` naming ``path`` (written for ``output``) and the free space there."""
    try:
        yield
    except WriteError:
        raise
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise write_error(path, exc, output) from exc


_INNERMOST_PANIC = re.compile(r'Id\(\d+\), \\*"(.*?)\\*"')


def _panic_message(text: str) -> str:
    """The innermost message of a polars panic: one that crosses threads is wrapped in
    ``JoinError::Panic(Id(n), "<message>", ...)`` once per thread."""
    found = _INNERMOST_PANIC.search(text.rsplit("JoinError::Panic(", 1)[-1])
    return found.group(1) if found else first_line(text)


@contextlib.contextmanager
def reading(path: str | Path) -> Iterator[None]:
    """Report a failure while reading (or sizing tables from) ``path`` as an
    :class:`InputFileError` naming it: a polars error (truncated, not parquet, corrupt), a
    panic of the parquet reader on damaged bytes, or a MemoryError (a damaged value, such as a
    huge id, can ask for a table larger than memory). An operating system error polars wraps
    becomes an OSError naming it."""
    try:
        yield
    except pl.exceptions.PanicException as exc:
        problem = _panic_message(str(exc))
        raise InputFileError(path, f"cannot read it: the parquet reader failed: {problem}") from exc
    except MemoryError as exc:
        problem = first_line(str(exc)) or "MemoryError"
        raise InputFileError(
            path, f"out of memory while reading it ({problem}); is the file damaged?"
        ) from exc
    except pl.exceptions.PolarsError as exc:
        code = _errno_of(exc)
        if code is not None:
            raise ReadError(code, os.strerror(code), str(path)) from exc
        raise InputFileError(path, f"cannot read it: {first_line(str(exc))}") from exc


def _unreadable(path: Path) -> BaseException | None:
    try:
        with reading(path):
            pl.scan_parquet(path).select(pl.all().first()).collect()
            pl.scan_parquet(path).select(pl.len()).collect()
    except (InputFileError, OSError) as exc:
        return exc
    return None


@contextlib.contextmanager
def reading_any(paths: Iterable[Path], what: str | Path) -> Iterator[None]:
    """Like :func:`reading` for a query over several files: the error names the first file
    that cannot be read on its own (else ``what``, e.g. their directory)."""
    paths = list(paths)
    try:
        yield
    except pl.exceptions.PolarsError as exc:
        for path in paths:
            found = _unreadable(path)
            if found is not None:
                raise found from exc
        with reading(what):
            raise
