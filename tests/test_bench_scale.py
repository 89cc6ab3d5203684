"""The Yambda-sized benchmark at a tiny size, so that the script that measured the 500m run
keeps working: every step runs in its child, and the figures are printed and saved."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "packages" / "yambda-data" / "benchmarks" / "bench_scale.py"


@pytest.mark.slow
def test_a_tiny_500m_shaped_run_measures_every_step(tmp_path):
    figures = tmp_path / "figures.json"
    argv = [sys.executable, str(SCRIPT), "--users", "12", "--train-steps", "4"]
    argv += ["--work", str(tmp_path / "work"), "--json", str(figures)]
    quiet = {"capture_output": True, "text": True, "timeout": 600, "cwd": ROOT}
    done = subprocess.run(argv, **quiet)
    assert done.returncode == 0, done.stderr[-2000:]

    saved = json.loads(figures.read_text())
    assert saved["config"]["users"] == 12 and saved["config"]["size"] == "500m"
    assert saved["events"] > 12 * 100
    steps = {step["name"]: step for step in saved["steps"]}
    assert list(steps) == ["synth", "preprocess", "build-store", "train"]
    for name, step in steps.items():
        assert step["wall_s"] > 0 and step["cpu_s"] > 0, name
        assert 0 < step["peak_rss_mib"] < 4096, name
        assert step["disk_bytes"] > 0, name
    # The train step's disk excludes the store it reads, counted under build-store.
    assert steps["train"]["disk_bytes"] < steps["build-store"]["disk_bytes"]
    lines = done.stdout.splitlines()
    table = lines[lines.index(next(line for line in lines if line.startswith("step "))) :]
    assert [row.split()[0] for row in table[1:5]] == list(steps)
    assert not list(figures.parent.glob("*.tmp"))

    # A later start measures again from that step and reuses what came before.
    again = subprocess.run([*argv[:5], "0", *argv[6:], "--from", "build-store"], **quiet)
    assert again.returncode == 0, again.stderr[-2000:]
    assert [step["name"] for step in json.loads(figures.read_text())["steps"]] == ["build-store"]


def test_a_later_start_without_the_earlier_outputs_is_refused(tmp_path):
    argv = [sys.executable, str(SCRIPT), "--users", "12", "--work", str(tmp_path / "work")]
    done = subprocess.run([*argv, "--from", "build-store"], capture_output=True, text=True)
    assert done.returncode == 1
    assert "--from build-store:" in done.stderr and "output of synth" in done.stderr
    assert not (tmp_path / "work").exists() or not any((tmp_path / "work").iterdir())
