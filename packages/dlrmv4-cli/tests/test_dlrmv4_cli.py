"""The convention itself: the line, the statuses, the one reading of DLRMV4_DEBUG."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import dlrmv4_cli

OFF = [None, "", "0", "false", "no", "off", "FALSE", " Off ", "No"]
ON = ["1", "yes", "true", "on", "2", "debug", " 1 "]


@pytest.mark.parametrize("value", OFF)
def test_debug_off_values(value):
    environ = {} if value is None else {"DLRMV4_DEBUG": value}
    assert dlrmv4_cli.debug_requested(environ=environ) is False
    assert dlrmv4_cli.debug_requested(True, environ=environ) is True  # --debug wins


@pytest.mark.parametrize("value", ON)
def test_debug_on_values(value):
    assert dlrmv4_cli.debug_requested(environ={"DLRMV4_DEBUG": value}) is True


def test_debug_reads_the_process_environment(monkeypatch):
    monkeypatch.setenv("DLRMV4_DEBUG", "false")
    assert not dlrmv4_cli.debug_requested()
    monkeypatch.setenv("DLRMV4_DEBUG", "yes")
    assert dlrmv4_cli.debug_requested()


def test_statuses():
    assert (dlrmv4_cli.EXIT_FAILED, dlrmv4_cli.EXIT_REFUSED) == (1, 2)
    assert dlrmv4_cli.EXIT_INTERRUPTED == 130
    assert dlrmv4_cli.signal_status(signal.SIGTERM) == 143
    assert dlrmv4_cli.signal_status(signal.SIGPIPE) == 141


def test_lines():
    assert dlrmv4_cli.error_line("tool cmd", "--x: bad") == "tool cmd: error: --x: bad"
    assert dlrmv4_cli.error_line("tool", "m", "(hint)") == "tool: error: m (hint)"
    assert dlrmv4_cli.usage_line("tool", "m") == "tool: error: m (see tool --help)"
    assert dlrmv4_cli.usage_line("tool", "m", "tool cmd") == "tool: error: m (see tool cmd --help)"
    assert dlrmv4_cli.usage_line("train.py", "m", "") == "train.py: error: m (see --help)"


def parser() -> argparse.ArgumentParser:
    p = dlrmv4_cli.OneLineParser(prog="tool")
    dlrmv4_cli.add_debug_option(p)
    common = argparse.ArgumentParser(add_help=False)
    dlrmv4_cli.add_debug_option(common, subcommand=True)
    sub = p.add_subparsers(dest="command", required=True, parser_class=dlrmv4_cli.OneLineParser)
    run = sub.add_parser("run", parents=[common])
    run.add_argument("--steps", type=int, required=True)
    return p


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        ([], "tool: error: the following arguments are required: command (see tool --help)"),
        (["run"], "tool run: error: the following arguments are required: --steps "
         "(see tool run --help)"),
        (["run", "--steps", "x"], "tool run: error: argument --steps: invalid int value: 'x' "
         "(see tool run --help)"),
    ],
)  # fmt: skip
def test_an_argument_error_is_one_line_with_status_2(argv, line, capsys):
    with pytest.raises(SystemExit) as info:
        parser().parse_args(argv)
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", line + "\n")


def test_debug_before_or_after_the_subcommand():
    assert parser().parse_args(["--debug", "run", "--steps", "1"]).debug is True
    assert parser().parse_args(["run", "--steps", "1", "--debug"]).debug is True
    assert parser().parse_args(["run", "--steps", "1"]).debug is False


def test_describe():
    assert dlrmv4_cli.describe(ValueError("a\n  b\n")) == "a b"
    assert dlrmv4_cli.describe(FileNotFoundError()) == "FileNotFoundError"
    assert dlrmv4_cli.describe(KeyError("k")) == "unexpected KeyError: 'k'"
    assert dlrmv4_cli.describe(KeyError("k"), (KeyError,)) == "'k'"


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_report_error(capsys):
    assert dlrmv4_cli.report_error("tool cmd", raised(ValueError("--x: bad")), debug=False) == 2
    assert capsys.readouterr().err == "tool cmd: error: --x: bad\n"
    assert dlrmv4_cli.report_error("tool", raised(RuntimeError("a\nb")), debug=False) == 2
    assert capsys.readouterr().err == (
        "tool: error: unexpected RuntimeError: a b (traceback: --debug or DLRMV4_DEBUG=1)\n"
    )
    dlrmv4_cli.report_error("tool", raised(RuntimeError("boom")), debug=True)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "Traceback (most recent call last):"
    assert err[-2:] == ["RuntimeError: boom", "tool: error: unexpected RuntimeError: boom"]
    dlrmv4_cli.report_error("tool", raised(OSError("x")), debug=False, message="said otherwise")
    assert capsys.readouterr().err == "tool: error: said otherwise\n"


def test_interrupted(capsys):
    assert dlrmv4_cli.interrupted("tool cmd") == 130
    assert capsys.readouterr().err == "tool cmd: interrupted\n"


def test_reader_gone_ends_quietly_with_sigpipes_status():
    code = (
        "import sys, dlrmv4_cli\n"
        "try:\n"
        "    for _ in range(100_000):\n"
        "        print('x' * 100)\n"
        "    sys.stdout.flush()\n"
        "except BrokenPipeError:\n"
        "    sys.exit(dlrmv4_cli.reader_gone())\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.read(10)
    proc.stdout.close()
    assert proc.wait(timeout=60) == 141
    assert proc.stderr.read() == b""


def test_imports_nothing_outside_the_standard_library():
    code = (
        "import sys; before = set(sys.modules); import dlrmv4_cli\n"
        "new = {m.split('.')[0] for m in set(sys.modules) - before} - {'dlrmv4_cli'}\n"
        "outside = sorted(m for m in new if m not in sys.stdlib_module_names)\n"
        "assert not outside, outside\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_run_child_ends_its_whole_group_on_timeout(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild"
    script = f"sleep 60 & echo $! > {pid_file}; wait"
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        dlrmv4_cli.run_child(["sh", "-c", script], timeout=1.0, grace_s=1.0)
    assert time.monotonic() - started < 10
    grandchild = int(pid_file.read_text())
    stat = Path(f"/proc/{grandchild}/stat")
    # Gone, or a zombie waiting for init: not a sleeping orphan.
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_stop_on_signals_raises_stopped_and_restores() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(dlrmv4_cli.Stopped) as caught, dlrmv4_cli.stop_on_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        signal.pause()
    assert caught.value.status == 143 and str(caught.value) == "stopped by SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before


def test_too_many_open_files_names_the_limit():
    import errno
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    line = dlrmv4_cli.describe(OSError(errno.EMFILE, "Too many open files"))
    assert line.startswith("[Errno 24] Too many open files (this process may have ")
    assert f"may have {soft:,} files open (ulimit -n; at most " in line and line.endswith(
        "raise it)"
    )


_SLOW_IMPORT = """
import sys, time
print("importing", flush=True)
time.sleep(60)
def run():
    sys.exit(0)
"""


def test_ctrl_c_while_a_command_is_imported_is_one_line_and_130(tmp_path: Path) -> None:
    """A console script loaded through `launch`: SIGINT while its module is still being
    imported (polars, torch: seconds) ends with `PROG: interrupted`, status 130."""
    (tmp_path / "slow_command.py").write_text(_SLOW_IMPORT)
    script = "import dlrmv4_cli; dlrmv4_cli.launch('slow', 'slow_command', 'run')"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        assert proc.stdout.readline() == b"importing\n"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert (proc.returncode, err) == (130, b"slow: interrupted\n")
