"""The error convention every command line of this repository follows.

- An error is one line on stderr: ``PROG: error: MESSAGE``; an argument error ends with
  ``(see PROG --help)`` (:class:`OneLineParser`), an error nobody foresaw names its type and
  says how to get its traceback (:func:`report_error`).
- Exit status: :data:`EXIT_FAILED` (1) the command ran and its outcome is negative or it
  failed, :data:`EXIT_REFUSED` (2) it refused its input (nothing was created or changed),
  ``128 + n`` ended by signal ``n`` (:func:`interrupted`, :func:`reader_gone`).
- ``--debug`` or the environment variable ``DLRMV4_DEBUG`` adds the traceback
  (:func:`debug_requested` is the one reading of that variable).

Standard library only, so that any tool can use it before anything else is installed.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import traceback
from collections.abc import Mapping
from typing import NoReturn

__all__ = [
    "DEBUG_ENV",
    "DEBUG_HELP",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_REFUSED",
    "EXPECTED",
    "TRACEBACK_HINT",
    "OneLineParser",
    "add_debug_option",
    "debug_requested",
    "describe",
    "error_line",
    "interrupted",
    "reader_gone",
    "report_error",
    "signal_status",
    "usage_line",
]
__version__ = "0.1.0"

EXIT_FAILED = 1
"""The command ran: its verdict is negative (a failed check) or it failed after it started."""
EXIT_REFUSED = 2
"""The command refused its input (a bad argument, a missing or invalid file) before it created
or changed anything, or could not read or write what it needed."""


def signal_status(signum: int) -> int:
    """The exit status of a command ended by signal ``signum``, as a shell reports it."""
    return 128 + int(signum)


EXIT_INTERRUPTED = signal_status(signal.SIGINT)

DEBUG_ENV = "DLRMV4_DEBUG"
_DEBUG_OFF = frozenset({"", "0", "false", "no", "off"})
DEBUG_HELP = f"print the traceback of an error (or {DEBUG_ENV}=1)"
TRACEBACK_HINT = f"(traceback: --debug or {DEBUG_ENV}=1)"
EXPECTED: tuple[type[BaseException], ...] = (ValueError, OSError)
"""Errors whose message says what is wrong and where: reported without their type."""


def debug_requested(option: bool = False, environ: Mapping[str, str] | None = None) -> bool:
    """Whether an error should print its traceback: ``--debug`` was given (``option``) or
    ``DLRMV4_DEBUG`` holds any value but empty, ``0``, ``false``, ``no`` or ``off`` (any case,
    spaces around ignored)."""
    value = (os.environ if environ is None else environ).get(DEBUG_ENV, "")
    return option or value.strip().lower() not in _DEBUG_OFF


def add_debug_option(parser: argparse.ArgumentParser, *, subcommand: bool = False) -> None:
    """``--debug``. On a subcommand's parser (``subcommand=True``) it has no default, so that
    ``--debug`` given before the subcommand is not reset by the subcommand's parser."""
    default = {"default": argparse.SUPPRESS} if subcommand else {}
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP, **default)


def error_line(prog: str, message: str, hint: str | None = None) -> str:
    """``PROG: error: MESSAGE``, then `` HINT`` where there is one."""
    return f"{prog}: error: {message}" + (f" {hint}" if hint else "")


def usage_line(prog: str, message: str, help_command: str | None = None) -> str:
    """An argument error: ``PROG: error: MESSAGE (see HELP_COMMAND --help)``; ``help_command``
    defaults to ``prog`` (an empty one leaves ``(see --help)``)."""
    command = prog if help_command is None else help_command
    return error_line(prog, message, f"(see {command} --help)" if command else "(see --help)")


class OneLineParser(argparse.ArgumentParser):
    """An argument error is one line (:func:`usage_line`, no usage block), exit status 2.
    Subcommands get it too with ``add_subparsers(parser_class=OneLineParser)``."""

    def __init__(self, *args, help_command: str | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.help_command = help_command

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_REFUSED, usage_line(self.prog, message, self.help_command) + "\n")


def describe(exc: BaseException, expected: tuple[type[BaseException], ...] = EXPECTED) -> str:
    """``exc`` as one line: its message where it is one of ``expected`` (errors whose message
    says what and where), else ``unexpected TYPE: message``."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    if isinstance(exc, expected):
        return text or type(exc).__name__
    return f"unexpected {type(exc).__name__}: {text}"


def report_error(
    prog: str,
    exc: BaseException,
    *,
    debug: bool,
    expected: tuple[type[BaseException], ...] = EXPECTED,
    message: str | None = None,
) -> int:
    """Print ``exc`` in one line on stderr (after its traceback when ``debug``; with the hint
    how to get it when ``exc`` is none of ``expected``); returns :data:`EXIT_REFUSED`."""
    if debug:
        traceback.print_exception(exc)
    hint = None if debug or isinstance(exc, expected) else TRACEBACK_HINT
    text = describe(exc, expected) if message is None else message
    print(error_line(prog, text, hint), file=sys.stderr)
    return EXIT_REFUSED


def interrupted(prog: str) -> int:
    """Ctrl-C: ``PROG: interrupted`` on stderr; returns 130."""
    print(f"{prog}: interrupted", file=sys.stderr)
    return EXIT_INTERRUPTED


def reader_gone() -> int:
    """The reader of stdout went away (``| head``): stdout is pointed at /dev/null so that the
    interpreter's final flush stays quiet, and the status is SIGPIPE's, as if it had killed
    the command."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return signal_status(signal.SIGPIPE)
