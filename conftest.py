"""The signals every test of the workspace starts with, and must leave as it found them.

A child process inherits the signals its parent ignores or blocks, and the commands keep an
ignored signal ignored (as ``nohup`` asks). A suite started in the background of a script
(``cmd &`` ignores SIGINT) or under ``nohup`` (SIGHUP) would have every child it interrupts
ignore the signal, and its Ctrl-C tests hang: the session starts with both signals handled as
in a terminal. A test that leaves them changed would do the same to the later tests of its
process, whichever file comes next: each test's Python handlers, blocked mask and ignored set
are compared before and after it, put back, and a change fails it.

Only a signal newly ignored counts in the ignored set: that is what every later child inherits.
One leaving it is not a test's doing: the first LLVM compile in a process (Triton's, on a cold
cache) installs LLVM's crash handlers, which replace the ignoring of SIGXFSZ that Python starts
with, once for the process, and a child's exec resets a handler anyway.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

_HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Signals whose Python handler a test may change only for its own duration."""


def _ignored_by_the_kernel() -> frozenset[int]:
    """The process's ignored signals as Linux reports them (``SigIgn``), none elsewhere: it sees
    what a C library set, which ``signal.getsignal`` does not."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return frozenset()
    mask = next(
        (line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), "0"
    )
    bits = int(mask, 16)
    return frozenset(
        signum for signum in range(1, bits.bit_length() + 1) if bits >> (signum - 1) & 1
    )


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _signal_state() -> tuple[dict[int, object], frozenset[int], frozenset[int]]:
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
        f"the {signal.Signals(signum).name} handler changed"
        for signum, handler in handlers.items()
        if after_handlers[signum] is not handler and handler is not None
    ]
    if after_blocked != blocked:
        changed.append(
            f"the blocked signals changed ({sorted(blocked)} -> {sorted(after_blocked)})"
        )
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    for signum, handler in handlers.items():
        if handler is not None:
            signal.signal(signum, handler)
    newly_ignored = sorted(after_ignored - ignored - set(handlers))
    if newly_ignored:
        changed.append(f"{', '.join(map(_signal_name, newly_ignored))} ignored")
        for signum in newly_ignored:
            signal.signal(signum, signal.SIG_DFL)
    if changed:
        pytest.fail("the test left " + ", ".join(changed), pytrace=False)
