"""bench_preprocess.py on an input it did not synthesize (``--raw``), in two layouts."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from yambda_data.schema import multi_event_path
from yambda_data.synth import SynthConfig, synthesize

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_preprocess.py"


@pytest.mark.slow
def test_a_raw_input_is_preprocessed_in_each_layout_with_identical_outputs(tmp_path):
    raw = tmp_path / "other-writer"
    synthesize(raw, SynthConfig(users=60, median_events_per_user=80, seed=3))
    events = multi_event_path(raw, "50m")
    before = events.read_bytes()
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--raw", str(raw), "--layout", "synth",
         "dictionary:700:unsorted", "--partitions", "3", "--no-validate",
         "--work", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "outputs of the 2 layouts byte-identical" in result.stdout, result.stdout
    rows = re.findall(
        r"^\| other-writer \| ([\d,]+) \| (\S+) \| preprocess \| 3 \|", result.stdout, re.M
    )
    assert [layout for _, layout in rows] == ["synth", "dictionary:700:unsorted"], result.stdout
    assert events.read_bytes() == before  # the input is read, never rewritten in place


def test_a_missing_raw_input_is_refused_in_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--raw", str(tmp_path / "absent")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert (
        "--raw:" in result.stderr and "absent" in result.stderr and "no such file" in result.stderr
    )
