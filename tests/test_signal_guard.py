"""The workspace conftest's signal guard: what it fails, what it lets pass, and that the next
test of the process starts as the failing one found it."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

_GUARDED_TESTS = """
import signal

def test_ignores_sigusr1():
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)

def test_sees_sigusr1_handled_as_by_default():
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL

def test_replaces_the_sigint_handler():
    signal.signal(signal.SIGINT, signal.SIG_DFL)

def test_sees_the_sigint_handler_python_starts_with():
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

def test_blocks_sigusr2():
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])

def test_sees_nothing_blocked():
    assert signal.SIGUSR2 not in signal.pthread_sigmask(signal.SIG_BLOCK, [])

def test_handles_sigxfsz_that_python_ignores():
    # What LLVM's crash handlers do the first time a process compiles: not a test's doing.
    signal.signal(signal.SIGXFSZ, lambda signum, frame: None)
"""


def test_a_test_that_leaves_a_signal_ignored_handled_or_blocked_fails_and_the_next_is_clean(
    pytester: pytest.Pytester,
):
    pytester.makeconftest((Path(__file__).parents[1] / "conftest.py").read_text())
    pytester.makepyfile(test_guarded=_GUARDED_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=7, errors=3)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_ignores_sigusr1*",
            "the test left SIGUSR1 ignored",
            "*ERROR at teardown of test_replaces_the_sigint_handler*",
            "the test left the SIGINT handler changed",
            "*ERROR at teardown of test_blocks_sigusr2*",
            "the test left the blocked signals changed (*SIGUSR2*",
        ]
    )
