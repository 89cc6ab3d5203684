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
         "--threads", "1", "--profile"],
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
    # The profile: each side's step split into linear products / optimizer / rest (ms), and
    # the ceiling: the reference's step over our products and optimizer.
    profile = re.search(r"^tiny\s+native\s+(\d+)/(\d+)/(\d+)\s+(\d+)/(\d+)/(\d+)\s+([\d.]+)x",
                        result.stdout, re.M)  # fmt: skip
    assert profile, result.stdout
    *parts, ceiling = map(float, profile.groups())
    ours_products, ours_optimizer, _, *theirs = parts
    assert ours_optimizer > 0 and sum(theirs) > 0
    assert ceiling == pytest.approx(sum(theirs) / (ours_products + ours_optimizer), rel=0.05)
    assert "is_fx_tracing" not in result.stderr
