"""benchmarks/bench_gpu.py: it runs (tiny shapes, Triton's interpreter) and reports every
family and kernel, so that the GPU benchmark cannot rot on a CPU-only CI."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gpu.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


bench = load_bench()


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the tiny run is the CPU's (interpreter)")
def test_tiny_run_times_every_family_and_kernel(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny", "--json", str(tmp_path / "rows.json")],
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"},  # --tiny sets it
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "triton 3." in result.stdout and "(interpreter)" in result.stdout
    rows = json.loads((tmp_path / "rows.json").read_text())["rows"]
    timed = {(r["family"], r["kernel"]) for r in rows if r["ms"] is not None and r["ms"] > 0}
    expected = {(f, k) for f, kernels in bench.FAMILY_KERNELS.items() for k in kernels}
    assert timed == expected  # on the CPU under the interpreter every kernel runs
    assert {r["family"] for r in rows} == set(bench.FAMILIES)
    printed = result.stdout.splitlines()
    for family, kernel in expected:
        assert any(line.startswith(f"{family:<22}{kernel:<9}B=2 ") for line in printed), (
            family,
            kernel,
        )
    for row in rows:
        if row["kernel"] == "pytorch":
            assert row["speedup"] == 1.0
        else:
            assert row["speedup"] == pytest.approx(
                next(
                    r["ms"]
                    for r in rows
                    if r["family"] == row["family"] and r["kernel"] == "pytorch"
                )
                / row["ms"]
            )
        assert row["samples_per_s"] == pytest.approx(row["batch"] / (row["ms"] / 1000))


def test_a_batch_that_runs_out_of_memory_is_skipped_with_a_note(monkeypatch):
    def runners(family, batch, setting, device):
        def run(kernel):
            if kernel == "triton":
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 64 GiB")
            return lambda: None

        return run

    monkeypatch.setattr(bench, "make_runners", runners)
    monkeypatch.setattr(bench, "unavailable", lambda family, kernel, device_type: None)
    rows = bench.bench_family("attention", 1024, bench.tiny_setting(), torch.device("cpu"), 0, 1)
    by_kernel = {r.kernel: r for r in rows}
    assert by_kernel["triton"].ms is None and by_kernel["triton"].note == "skipped: out of memory"
    assert not by_kernel["triton"].failed
    assert by_kernel["pytorch"].ms is not None and by_kernel["native"].speedup is not None


def test_inputs_that_do_not_fit_skip_the_batch_size(monkeypatch):
    def runners(family, batch, setting, device):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 TB")

    monkeypatch.setattr(bench, "make_runners", runners)
    rows = bench.bench_family("norms", 1024, bench.tiny_setting(), torch.device("cpu"), 0, 1)
    assert [r.kernel for r in rows] == ["pytorch", "triton"]
    assert all(r.note == "skipped: out of memory for the inputs" and not r.failed for r in rows)


def test_a_kernel_that_fails_otherwise_is_a_failure(monkeypatch):
    def runners(family, batch, setting, device):
        def run(kernel):
            if kernel == "triton":
                raise ValueError("addmm: mat2.shape[0] = 4 must equal mat1.shape[1] = 3")
            return lambda: None

        return run

    monkeypatch.setattr(bench, "make_runners", runners)
    monkeypatch.setattr(bench, "unavailable", lambda family, kernel, device_type: None)
    rows = bench.bench_family("addmm", 2, bench.tiny_setting(), torch.device("cpu"), 0, 1)
    assert rows[-1].failed and rows[-1].note.startswith("FAILED: ValueError: addmm: mat2")


def test_kernels_that_cannot_run_on_the_device_are_named():
    assert "CPU tensors only" in bench.unavailable("attention", "native", "cuda")
    assert bench.unavailable("model-step", "native", "cuda") is not None
    assert bench.unavailable("layer-projections", "pytorch", "cuda") is None
    assert bench.unavailable("model-step", "triton", "cuda") is None
