"""The error convention every command line of this repository follows.

- An error is one line on stderr: ``PROG: error: MESSAGE``; an argument error ends with
  ``(see PROG --help)`` (:class:`OneLineParser`), an error nobody foresaw names its type and
  says how to get its traceback (:func:`report_error`).
- Exit status: :data:`EXIT_FAILED` (1) the command ran and its outcome is negative or it
  failed, :data:`EXIT_REFUSED` (2) it refused its input (nothing was created or changed),
  ``128 + n`` ended by signal ``n`` (:func:`interrupted`, :func:`reader_gone`).
- A command that starts child processes ends them with itself: :func:`stop_on_signals` makes
  SIGTERM and SIGHUP raise :class:`Stopped` (as SIGINT raises ``KeyboardInterrupt``), and
  :func:`run_child` runs a child in its own process group, ended (SIGTERM, then SIGKILL after
  a grace period) when its parent is interrupted, stopped or out of time.
- ``--debug`` or the environment variable ``DLRMV4_DEBUG`` adds the traceback
  (:func:`debug_requested` is the one reading of that variable).

Standard library only, so that any tool can use it before anything else is installed.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import resource
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NoReturn

__all__ = [
    "DEBUG_ENV",
    "DEBUG_HELP",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_REFUSED",
    "EXPECTED",
    "TRACEBACK_HINT",
    "OneLineParser",
    "Stopped",
    "add_debug_option",
    "debug_requested",
    "describe",
    "error_line",
    "interrupted",
    "launch",
    "open_files_limit",
    "reader_gone",
    "report_error",
    "run_child",
    "signal_status",
    "stop_on_signals",
    "stopped",
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
    says what and where), else ``unexpected TYPE: message``; an error of too many open files
    says what the limit is (:func:`open_files_limit`)."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    if getattr(exc, "errno", None) in (errno.EMFILE, errno.ENFILE):
        text += f" ({open_files_limit()})"
    if isinstance(exc, expected):
        return text or type(exc).__name__
    return f"unexpected {type(exc).__name__}: {text}"


def open_files_limit() -> str:
    """What limits the files a process may have open, as a user can change it: ``ulimit -n``
    (the soft limit) and the most it may be raised to (the hard one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    most = "unlimited" if hard == resource.RLIM_INFINITY else f"{hard:,}"
    return f"this process may have {soft:,} files open (ulimit -n; at most {most}): raise it"


def launch(prog: str, module: str, function: str) -> NoReturn:
    """Run the command ``function`` of ``module`` (which exits with its status), importing the
    module here: a console script whose package takes seconds to import (polars, torch) has
    nothing of its own to catch Ctrl-C with until then. Ctrl-C while it loads ends with
    :func:`interrupted` (one line, 130), a lack of open files with one line naming the limit
    (exit 2)."""
    try:
        command = getattr(importlib.import_module(module), function)
    except KeyboardInterrupt:
        sys.exit(interrupted(prog))
    except OSError as exc:
        if exc.errno not in (errno.EMFILE, errno.ENFILE):
            raise
        print(error_line(prog, describe(exc)), file=sys.stderr)
        sys.exit(EXIT_REFUSED)
    try:
        command()
    except KeyboardInterrupt:  # before the command's own handling begins
        sys.exit(interrupted(prog))
    sys.exit(0)


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


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""The signals that :func:`stop_on_signals` turns into :class:`Stopped`."""
CHILD_GRACE_S = 5.0
"""How long :func:`run_child` gives a child's process group between SIGTERM and SIGKILL."""


class Stopped(BaseException):
    """SIGTERM or SIGHUP arrived inside :func:`stop_on_signals`. A ``BaseException``, like the
    ``KeyboardInterrupt`` of SIGINT, so that ``except Exception`` does not swallow it and
    every ``finally`` (children ended, temporary files removed) runs on the way out."""

    def __init__(self, signum: int) -> None:
        self.signum = int(signum)
        super().__init__(f"stopped by {signal.Signals(self.signum).name}")

    @property
    def status(self) -> int:
        """``128 + signum``, what a shell reports for a command the signal killed."""
        return signal_status(self.signum)


def _raise_stopped(signum: int, _frame: object) -> None:
    raise Stopped(signum)


@contextlib.contextmanager
def stop_on_signals(signals: Sequence[int] = STOP_SIGNALS) -> Iterator[None]:
    """Inside, each of ``signals`` raises :class:`Stopped` in the main thread; the previous
    handlers come back on exit. Elsewhere than the main thread it does nothing (Python runs
    handlers only there). A signal the caller ignores (``nohup``'s SIGHUP) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}
    try:
        for signum in signals:
            if signal.getsignal(signum) is signal.SIG_IGN:
                continue
            previous[signum] = signal.signal(signum, _raise_stopped)
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def stopped(prog: str, exc: Stopped) -> int:
    """``PROG: stopped by SIGTERM`` on stderr; returns ``128 + signum``."""
    print(f"{prog}: {exc}", file=sys.stderr)
    return exc.status


def _end_group(proc: subprocess.Popen[Any], grace_s: float) -> None:
    """SIGTERM to the child's process group, SIGKILL to it after ``grace_s`` if the child
    still runs; reaps the child. Grandchildren (mpirun's ranks) are in the group too."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:  # members that outlive the leader get the SIGKILL too
        try:
            os.killpg(proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[list[int]]:
    """SIGINT, SIGTERM and SIGHUP arriving inside are recorded in the yielded list instead of
    handled (main thread only; ignored signals stay ignored)."""
    pending: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield pending
        return
    previous: dict[int, Any] = {}
    try:
        for signum in (signal.SIGINT, *STOP_SIGNALS):
            if signal.getsignal(signum) not in (signal.SIG_IGN, None):
                previous[signum] = signal.signal(signum, lambda n, _f: pending.append(n))
        yield pending
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run_child(
    cmd: Sequence[str],
    *,
    timeout: float | None = None,
    grace_s: float = CHILD_GRACE_S,
    **popen: Any,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(cmd, timeout=timeout, **popen)``, with the child (and whatever it
    starts) in a process group of its own that is ended with the caller: on a timeout
    (``subprocess.TimeoutExpired``), Ctrl-C, :class:`Stopped` or any other exception, the
    group gets SIGTERM and, ``grace_s`` later, SIGKILL, before the exception propagates.
    In its own group a terminal's Ctrl-C reaches only the caller, which ends the group."""
    input_data = popen.pop("input", None)
    with _signals_deferred() as pending:  # a signal inside Popen() would orphan the child
        proc = subprocess.Popen(list(cmd), start_new_session=True, **popen)
    try:
        for signum in pending:
            signal.raise_signal(signum)  # its own handler, now that the child can be ended
        out, err = proc.communicate(input_data, timeout=timeout)
    except BaseException:
        _end_group(proc, grace_s)
        with contextlib.suppress(Exception):
            proc.communicate(timeout=grace_s)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
