"""What every test of the workspace must leave as it found it.

Signals: a child process inherits the signals its parent ignores or blocks, so a test that
leaves SIGINT ignored in a test process makes every later test there that interrupts a child
hang or pass for the wrong reason, whichever test file comes next. Each test's signal
dispositions and mask are compared before and after it, put back, and a change fails it.
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
