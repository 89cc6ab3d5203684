"""benchmarks/bench_side_by_side.py: it runs at tiny shapes in Triton's interpreter, so that the
GPU comparison cannot rot on a CPU-only CI; its peak table and its refusals of bad arguments.
With HSTU_REFERENCE_CHECKOUT naming a checkout of the MLPerf training repository (or its
recommendation_v4 directory), the reference's kernels run beside ours too."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_side_by_side.py"
REFERENCE = os.environ.get("HSTU_REFERENCE_CHECKOUT")


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_side_by_side", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


bench = load_bench()


def run_script(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"},  # --tiny sets it
    )


@pytest.mark.parametrize(
    ("name", "chip", "tflops", "gbps"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.4, 3350.0),
        ("NVIDIA H100 PCIe", "H100 PCIe", 756.0, 2000.0),
        ("NVIDIA H100 NVL", "H100 NVL", 835.0, 3900.0),
        ("NVIDIA H200", "H200 SXM", 989.4, 4800.0),
        ("AMD Instinct MI300X", "MI300X", 1307.4, 5300.0),
        ("AMD Instinct MI355X", "MI355X", 2516.6, 8000.0),
        ("AMD Instinct MI350X", "MI350X", 2306.9, 8000.0),
    ],
)
def test_chip_peaks(name, chip, tflops, gbps):
    peak = bench.chip_peak(name)
    assert (peak["chip"], peak["bf16_dense_tflops"], peak["memory_gbps"]) == (chip, tflops, gbps)
    assert "datasheet" in peak["source"]


def test_unknown_chip_has_no_peak():
    assert bench.chip_peak("NVIDIA GeForce RTX 4090") is None


def test_bad_arguments_are_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "new"
    result = run_script("--tiny", "--out", str(out), "--reference", str(tmp_path), timeout=120)
    assert result.returncode == 2
    assert f"--reference {tmp_path}: no generative_recommenders/ops/triton" in result.stderr
    assert not out.exists()
    result = run_script("--tiny", "--out", str(out), "--budget", "0", timeout=120)
    assert result.returncode == 2 and "--budget must be > 0" in result.stderr
    out.mkdir()
    (out / "side_by_side.json").write_text("{}")
    result = run_script("--tiny", "--out", str(out), timeout=120)
    assert result.returncode == 2
    assert "already holds side_by_side.json; pass --overwrite" in result.stderr
    assert (out / "side_by_side.json").read_text() == "{}"


@pytest.mark.slow
@pytest.mark.triton
@pytest.mark.skipif(torch.cuda.is_available(), reason="the tiny run is the CPU's (interpreter)")
def test_tiny_run_compares_every_family_and_sweeps(tmp_path):
    result = run_script(
        "--tiny", "--tokens", "8", "--batch", "1", "--sweep", "--sweep-variants", "2",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    record = json.loads((tmp_path / "side_by_side.json").read_text())
    assert record["header"]["triton"].endswith("(interpreter)")
    assert record["header"]["peak"] is None  # the CPU has no entry
    rows = record["rows"]
    assert {r["family"] for r in rows} == set(bench.FAMILIES)
    for row in rows:
        assert (row["batch"], row["tokens"]) == (1, 8)
        if row["kernel"] == "reference":
            assert row["note"] == "not run: no --reference checkout given" and row["ms"] is None
            continue
        assert row["ms"] > 0 and not row["failed"], row
        unit = 1e12 if row["family"] in bench.MATRIX_BOUND else 1e9
        assert row["rate"] == pytest.approx(row["work"] / (row["ms"] / 1e3) / unit)
        if row["kernel"] == "triton":
            assert row["note"].startswith("agrees with pytorch to ")
            assert row["vs_pytorch"] == pytest.approx(
                next(r["ms"] for r in rows if r["family"] == row["family"] and
                     r["kernel"] == "pytorch") / row["ms"]
            )  # fmt: skip
    assert set(record["sweep"]) == set(bench.SWEEP_FAMILIES)
    for family, found in record["sweep"].items():
        assert next(iter(found["variants"])) == "default", family
        assert len(found["variants"]) == 2
        assert found["fastest"] in found["variants"] and found["fastest_ms"] > 0
    ratios = record["backward_over_forward"]
    assert set(ratios) == {f"{f} {k} B=1 N=8" for f in ("attention", "norm-mul-dropout")
                           for k in ("triton", "pytorch")}  # fmt: skip
    ms = {(r["family"], r["kernel"]): r["ms"] for r in rows}
    forward = ms[("attention-fwd", "triton")]
    assert ratios["attention triton B=1 N=8"] == pytest.approx(
        (ms[("attention", "triton")] - forward) / forward
    )
    table = (tmp_path / "side_by_side.md").read_text()
    assert table.count("\n| ") == len(rows) + 1  # the heading and a line per row
    assert "Sweep positional-embeddings (batch 1, 8 tokens): fastest" in table


def test_attention_work_counts_the_causal_pairs():
    """One target after 7 history tokens: 7 * 8 / 2 causal pairs plus the target's 8."""
    case = bench.build_case("attention-fwd", 1, 8, bench.TINY, torch.device("cpu"), None)
    pairs = 7 * 8 // 2 + 8
    assert case.work == 2.0 * pairs * bench.TINY.heads * (16 + 16)
    forward_backward = bench.build_case("attention", 1, 8, bench.TINY, torch.device("cpu"), None)
    assert forward_backward.work == 3.5 * case.work
    assert math.isclose(forward_backward.work, 3.5 * 2 * 36 * 2 * 32)


@pytest.mark.slow
@pytest.mark.triton
@pytest.mark.skipif(not REFERENCE, reason="HSTU_REFERENCE_CHECKOUT names no reference checkout")
@pytest.mark.skipif(torch.cuda.is_available(), reason="the tiny run is the CPU's (interpreter)")
def test_tiny_run_beside_the_reference(tmp_path):
    checkout = Path(REFERENCE)
    if (checkout / "recommendation_v4").is_dir():
        checkout = checkout / "recommendation_v4"
    families = ["attention-fwd", "layer-norm", "addmm", "positional-embeddings", "concat-2d"]
    # 16 tokens, batch 2: at 8 tokens and batch 1 the reference's positional-embedding kernels
    # corrupt the interpreter's memory (the process aborts); on a GPU they run as written.
    result = run_script(
        "--tiny", "--tokens", "16", "--batch", "2", "--families", *families,
        "--reference", str(checkout), "--out", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    rows = json.loads((tmp_path / "side_by_side.json").read_text())["rows"]
    reference = {r["family"]: r for r in rows if r["kernel"] == "reference"}
    assert set(reference) == set(families)
    # Each reference kernel ran, or its row names why the interpreter could not run it.
    for family, row in reference.items():
        assert row["ms"] or row["note"].startswith("not run under Triton's interpreter"), family
        assert not row["failed"]
    for family in ("addmm", "positional-embeddings", "concat-2d"):
        assert reference[family]["note"].startswith("agrees with pytorch"), reference[family]
