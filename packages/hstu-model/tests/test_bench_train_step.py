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
        r"^tiny\s+native\s+4\s+\d+\s+1\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x.*\s([\d,]+)/([\d,]+)$",
        result.stdout,
        re.M,
    )
    assert row, result.stdout
    ours, reference, ratio = map(float, row.groups()[:3])
    assert ours > 0 and reference > 0
    # The row ends in each side's minor page faults per step (counts with thousands commas).
    assert all(int(x.replace(",", "")) >= 0 for x in row.groups()[3:])
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
    # The reference's own notice at import (a print) stays off the terminal.
    assert "temporarily disabled some autotune configs" not in result.stdout


REFAULTS = """
import sys
sys.path.insert(0, {benchmarks!r})
import torch
import bench_train_step as bench
if {retain!r}:
    bench.retain_freed_memory()
faults = []
for _ in range(12):
    before = bench.minor_faults()
    block = torch.ones(64 * 2**20 // 4)  # 64 MiB: above glibc's largest mmap threshold
    del block
    faults.append(bench.minor_faults() - before)
# The heap settles after the first few blocks (alignment padding); the fewest of the ten
# later blocks, since a block is now and then served from fresh pages all the same (seen on a
# machine after a long test session: every one of four later blocks refaulted).
print(min(faults[2:]))
"""


@pytest.mark.parametrize("retain", [False, True])
def test_retained_heap_serves_a_large_tensor_again_without_faulting_its_pages(retain):
    code = REFAULTS.format(benchmarks=str(SCRIPT.parent), retain=retain)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    faults = int(result.stdout.split()[-1])
    pages = 64 * 2**20 // 4096
    if retain:
        assert faults < pages // 10
    else:  # the C library's default: the block is mapped anew and every page faults again
        assert faults > pages // 2


def test_the_header_names_the_malloc_setting_and_a_row_follows():
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--presets", "tiny", "--kernels", "pytorch", "--steps", "1",
         "--repeat", "1", "--batch-size", "4", "--threads", "1", "--device", "cpu",
         "--malloc", "retain"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "malloc: heap retained (--malloc retain)" in result.stdout
    assert re.search(r"^tiny\s+pytorch\s+4\s+\d+\s+[\d.]+", result.stdout, re.M), result.stdout
