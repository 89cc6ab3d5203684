"""Every command line of the repository, run as a user runs it: a refused input is the same one
line on stderr with the same status whatever DLRMV4_DEBUG holds, and the traceback comes only
with a value that asks for it. A command whose package is not installed (this package's tests
run alone) is skipped; the workspace's test run has them all."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import dlrmv4_cli

ROOT = Path(__file__).resolve().parents[3]
VALUES = [None, "", "0", "false", "no", "off", "1", "yes"]
ONE_LINE = re.compile(r"^[\w./-]+( [\w-]+)?: error: \S[^\n]*\n\Z")
"""The shape of every error: `PROG[ COMMAND]: error: MESSAGE`, one line."""


@dataclass(frozen=True)
class Refusal:
    needs: str | None
    """The module the command needs installed (None: only this package)."""
    argv: tuple[str, ...]
    line: str
    """Its stderr without debugging ({tmp} is the test's folder)."""
    debug_status: int | None = 2
    """The status with a traceback asked for; None: it prints no traceback, ever."""

    def run(self, tmp: Path, value: str | None) -> subprocess.CompletedProcess:
        if self.needs is not None and importlib.util.find_spec(self.needs) is None:
            pytest.skip(f"{self.needs} is not installed here")
        env = {k: v for k, v in os.environ.items() if k != dlrmv4_cli.DEBUG_ENV}
        if value is not None:
            env[dlrmv4_cli.DEBUG_ENV] = value
        env["PYTHON"] = sys.executable
        argv = [a.format(tmp=tmp, python=sys.executable, root=ROOT) for a in self.argv]
        return subprocess.run(
            argv, capture_output=True, text=True, env=env, cwd=tmp, timeout=120, check=False
        )


def argument_error(needs: str, argv: tuple[str, ...], line: str):
    """A refusal through the command's parser: never a traceback, whatever DLRMV4_DEBUG says
    (slow: eight more processes each)."""
    return pytest.param(Refusal(needs, argv, line, debug_status=None), marks=pytest.mark.slow)


DATA_STEPS_CHECK = ("{tmp}/e.json", "{tmp}/d", "50m", "{tmp}/p.json", "{tmp}/s.json")
"""EXPECTED DATA_DIR SIZE PREPROCESS_REPORT STORE_REPORT, none of them there."""

REFUSALS = {
    "mlperf-compliance": Refusal(
        "mlperf_compliance",
        ("{python}", "-m", "mlperf_compliance", "check", "{tmp}/none.log"),
        "mlperf-compliance check: error: no MLPerf log at {tmp}/none.log",
    ),
    "mlperf-compliance argument": argument_error(
        "mlperf_compliance",
        ("{python}", "-m", "mlperf_compliance", "check", "--format", "xml", "x.log"),
        "mlperf-compliance check: error: argument --format: invalid choice: 'xml' (choose from "
        "'text', 'json') (see mlperf-compliance check --help)",
    ),
    "yambda-data": Refusal(
        "yambda_data",
        ("{python}", "-m", "yambda_data", "validate", "--root", "{tmp}/none", "--size", "50m"),
        "yambda-data validate: error: --root {tmp}/none: no such directory",
    ),
    "yambda-data argument": argument_error(
        "yambda_data",
        ("{python}", "-m", "yambda_data", "synth", "--out", "{tmp}/x"),
        "yambda-data synth: error: the following arguments are required: --seed "
        "(see yambda-data synth --help)",
    ),
    "storage-workloads": Refusal(
        "storage_workloads",
        ("{python}", "-m", "storage_workloads.cli", "show", "nomodel"),
        "storage-workloads: error: unknown model 'nomodel'; known models: unet3d, resnet50, "
        "cosmoflow, dlrm, retinanet, flux, hstu_yambda",
        debug_status=None,  # its errors are never a traceback
    ),
    "data_steps.py": Refusal(
        None,
        ("{python}", "{root}/tools/mlperf/data_steps.py", "check", *DATA_STEPS_CHECK),
        "data_steps.py check: error: [Errno 2] No such file or directory: '{tmp}/p.json'",
        debug_status=1,  # a tool re-raises: Python's own traceback and status
    ),
    "check.sh": Refusal(
        None,
        ("bash", "{root}/tools/gpu/check.sh"),
        "check.sh: error: OUT_DIR is missing (see check.sh --help)",
        debug_status=None,
    ),
    "train.py": argument_error(  # its options are checked before the run is assembled
        "hstu_model",
        ("{python}", "{root}/tools/train.py", "--steps", "0", "--out", "{tmp}/run"),
        "train.py: error: --steps: must be >= 1, got 0 (see --help)",
    ),
}


@pytest.mark.parametrize("value", VALUES, ids=lambda v: "unset" if v is None else repr(v))
@pytest.mark.parametrize("refusal", REFUSALS.values(), ids=REFUSALS.keys())
def test_a_refused_input_is_one_line_unless_debugging(refusal: Refusal, value, tmp_path):
    done = refusal.run(tmp_path, value)
    line = refusal.line.format(tmp=tmp_path) + "\n"
    debug = dlrmv4_cli.debug_requested(environ={} if value is None else {"DLRMV4_DEBUG": value})
    assert done.stdout == ""
    if debug and refusal.debug_status is not None:
        assert done.returncode == refusal.debug_status, done.stderr
        assert done.stderr.startswith("Traceback (most recent call last):\n"), done.stderr
        if refusal.debug_status == dlrmv4_cli.EXIT_REFUSED:  # the traceback, then the line
            assert done.stderr.endswith(line), done.stderr
    else:
        assert done.returncode == 2, done.stderr
        assert done.stderr == line
        assert ONE_LINE.match(done.stderr), done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []
