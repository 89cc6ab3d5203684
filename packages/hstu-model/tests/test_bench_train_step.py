"""bench_train_step.py --reference: the training step beside the reference's DlrmHSTU, run
where HSTU_REFERENCE_CHECKOUT names a checkout of the MLPerf training repository (or its
recommendation_v4 directory)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_train_step.py"
REFERENCE = os.environ.get("HSTU_REFERENCE_CHECKOUT")


@pytest.mark.slow
@pytest.mark.skipif(not REFERENCE, reason="HSTU_REFERENCE_CHECKOUT names no reference checkout")
def test_a_tiny_step_beside_the_reference_prints_both_rates_and_their_ratio():
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--reference", REFERENCE, "--presets", "tiny",
         "--kernels", "native", "--steps", "1", "--rounds", "1", "--batch-size", "4",
         "--threads", "1"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    row = re.search(
        r"^tiny\s+native\s+4\s+\d+\s+1\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x", result.stdout, re.M
    )
    assert row, result.stdout
    ours, reference, ratio = map(float, row.groups())
    assert ours > 0 and reference > 0
    assert ratio == pytest.approx(ours / reference, abs=0.01)
