"""What a user sees in the terminal: only the project's own lines, --help without torch, a
closed pipe handled quietly."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRAIN = [sys.executable, str(ROOT / "tools" / "train.py")]

PROJECT_LINES = [
    r"run folder: .+",
    r"synthesizing .+",
    r".+: synthetic data up to date",
    r"preprocessing .+",
    r"partition \d+/\d+: .+",
    r".+: up to date",
    r"warning: a global batch of .+",
    r"data: \d+ train anchors .+",
    r"plan: \d+ steps of \d+ samples.+",
    r"step \d+/\d+ · loss .+",
    r"eval at step \d+: auc .+",
]
"""Every line tools/train.py prints on stderr in a run that nothing disturbs."""


def foreign_lines(stderr: str) -> list[str]:
    return [
        line
        for line in stderr.splitlines()
        if line.strip() and not any(re.fullmatch(p, line) for p in PROJECT_LINES)
    ]


@pytest.mark.slow
def test_a_run_prints_only_the_projects_lines(tmp_path):
    """With a loader worker (a second process where TorchRec's jagged tensors are built). Ten
    steps print every kind of line a longer run does: the last step writes a metrics row."""
    args = ["--users", "40", "--steps", "10", "--evals", "1", "--workers", "1"]
    result = subprocess.run(
        [*TRAIN, *args, "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert foreign_lines(result.stderr) == []
    assert "step 10/10 · loss" in result.stderr  # the progress line is there


@pytest.mark.slow
def test_a_two_process_torchrun_prints_only_the_projects_lines(tmp_path):
    """As the README launches it: OMP_NUM_THREADS given, so torchrun prints no banner."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", "2", str(ROOT / "tools" / "train.py")]
    command += ["--users", "40", "--steps", "4", "--evals", "1", "--workers", "1"]
    result = subprocess.run(
        [*command, "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert foreign_lines(result.stderr) == []


def test_help_and_a_refused_argument_do_not_import_torch():
    """They answer before the run imports torch and TorchRec (seconds of imports)."""
    probe = (
        "import runpy, sys\n"
        f"sys.argv = [{str(ROOT / 'tools' / 'train.py')!r}, *sys.argv[1:]]\n"
        "try:\n"
        "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
        "except SystemExit as done:\n"
        "    print('torch' in sys.modules, done.code, file=sys.stderr)\n"
    )
    for argv, status in ((["--help"], 0), (["--users", "0"], 2)):
        result = subprocess.run(
            [sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=120
        )
        assert result.stderr.strip().splitlines()[-1] == f"False {status}", result.stderr
    shown = subprocess.run([*TRAIN, "--help"], capture_output=True, text=True, timeout=120)
    assert "--users USERS         users of the synthetic dataset (default: 400)" in shown.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        ["-m", "hstu_model", "describe", "--preset", "tiny"],
        ["-m", "yambda_data", "synth", "--users", "4", "--seed", "0", "--out", "{tmp}/data"],
    ],
    ids=["hstu-model describe", "yambda-data synth"],
)
def test_a_closed_pipe_is_handled_quietly(command, tmp_path):
    """`... | head -0`: the reader is gone before the command writes; it stops without a
    traceback, with the status of a process that SIGPIPE ended."""
    command = [sys.executable, *(part.replace("{tmp}", str(tmp_path)) for part in command)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    process.stdout.close()
    stderr = process.stderr.read()
    status = process.wait(timeout=300)
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr
    assert status == 128 + signal.SIGPIPE, stderr
