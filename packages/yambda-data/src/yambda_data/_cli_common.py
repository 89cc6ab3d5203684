"""What the command handlers of :mod:`yambda_data.cli` share: the argument checks, the
progress line on stderr and the verdict of ``validate`` and ``verify`` (exit status 1)."""

from __future__ import annotations

import sys
from pathlib import Path


class _Failed(Exception):
    """``validate`` or ``verify`` found the data wrong: exit status 1."""


def _check_dir_arg(flag: str, path: Path) -> None:
    """An existing directory given as ``flag``: exit 2 naming it otherwise."""
    if not path.exists():
        raise FileNotFoundError(f"{flag} {path}: no such directory")
    if not path.is_dir():
        raise NotADirectoryError(f"{flag} {path}: not a directory")


def _check_creatable(flag: str, path: Path) -> None:
    """``path`` can be a directory: it is one, or its nearest existing ancestor is one."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            if not candidate.is_dir():
                what = "" if candidate == path else f" ({candidate} is a file)"
                raise NotADirectoryError(f"{flag} {path}: not a directory{what}")
            return


def _check_int(flag: str, value: int | None, minimum: int) -> None:
    if value is not None and value < minimum:
        raise ValueError(f"{flag}: must be >= {minimum}, got {value}")


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
