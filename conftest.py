"""The signals every test of the workspace starts with, and must leave as it found them.

A child process inherits the signals its parent ignores or blocks, and the commands keep an
ignored signal ignored (as ``nohup`` asks). A suite started in the background of a script
(``cmd &`` ignores SIGINT) or under ``nohup`` (SIGHUP) would have every child it interrupts
ignore the signal, and its Ctrl-C tests hang: the session starts with both signals handled as
in a terminal. A test that leaves them changed would do the same to the later tests of its
process, whichever file comes next: each test's signal dispositions and mask are compared
before and after it, put back, and a change fails it.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

_HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Signals whose Python handler a test may change only for its own duration."""


def _ignored_by_the_kernel() -> str:
    """The process's ignored-signal set as Linux reports it (``SigIgn``), '' elsewhere: it sees
    what a C library set, which ``signal.getsignal`` does not."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return ""
    return next((line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), "")


def _signal_state() -> tuple[dict[int, object], frozenset[int], str]:
    handlers = {signum: signal.getsignal(signum) for signum in _HANDLED}
    blocked = frozenset(signal.pthread_sigmask(signal.SIG_BLOCK, []))
    return handlers, blocked, _ignored_by_the_kernel()


def pytest_configure(config: pytest.Config) -> None:
    """Before the xdist workers start, which inherit it."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


@pytest.fixture(autouse=True)
def _signals_left_as_found():
    handlers, blocked, ignored = _signal_state()
    yield
    after_handlers, after_blocked, after_ignored = _signal_state()
    changed = [
        f"the {signal.Signals(signum).name} handler"
        for signum, handler in handlers.items()
        if after_handlers[signum] is not handler and handler is not None
    ]
    if after_blocked != blocked:
        changed.append(f"the blocked signals ({sorted(blocked)} -> {sorted(after_blocked)})")
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    for signum, handler in handlers.items():
        if handler is not None:
            signal.signal(signum, handler)
    if after_ignored != ignored and not changed:
        changed.append(f"the ignored signals (SigIgn {ignored} -> {after_ignored})")
    if changed:
        pytest.fail("the test left " + ", ".join(changed) + " changed", pytrace=False)
