"""tools/gpu/check.sh: the GPU check, run on the CPU as CI runs it (--cpu-smoke)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "tools" / "gpu" / "check.sh"
FAMILIES = (
    "jagged-1d",
    "jagged-2d",
    "attention",
    "layer-projections",
    "norms",
    "positional-embeddings",
    "addmm",
)


def check(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(CHECK), *map(str, args)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "HOME": str(Path.home())},
        timeout=timeout,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [([], "OUT_DIR is missing"), (["--cpu-smoke"], "OUT_DIR is missing"),
     (["{tmp}/a-file"], "OUT_DIR {tmp}/a-file: not a directory"),
     (["{tmp}/out", "--reference", "{tmp}"], "--reference {tmp}: no "
      "generative_recommenders/ops/triton/triton_hstu_attention.py (the recommendation_v4 "
      "directory of the MLPerf training repository)")],
)  # fmt: skip
def test_bad_arguments_are_one_line_with_status_2(args, message, tmp_path):
    (tmp_path / "a-file").write_text("x")
    done = check(*(a.format(tmp=tmp_path) for a in args))
    assert done.returncode == 2, done
    assert done.stderr == f"check.sh: {message.format(tmp=tmp_path)} (see check.sh --help)\n"
    assert done.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


@pytest.mark.slow
def test_cpu_smoke_writes_one_json_and_one_table(tmp_path):
    out = tmp_path / "out"
    done = check(out, "--cpu-smoke")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert sorted(p.name for p in out.iterdir()) == [
        "gpu-check.json",
        "gpu-check.log",
        "gpu-check.md",
    ]
    result = json.loads((out / "gpu-check.json").read_text())
    assert result["mode"] == "cpu-smoke" and result["finished"]
    stages = {s["name"]: s["status"] for s in result["stages"]}
    assert stages == {
        "environment": "passed",
        "install": "skipped",
        "native-build": "passed",
        "correctness": "passed",
        "gpu-tests": "passed",
        "benchmarks": "passed",
        "tests": "passed",
    }
    families = result["correctness"]["families"]
    assert set(families) == set(FAMILIES)
    for family, kernels in families.items():
        for kernel, per_dtype in kernels.items():
            for dtype in ("float32", "bfloat16"):
                entry = per_dtype[dtype]
                assert entry["passed"] and entry["error"] <= entry["tolerance"], (family, kernel)
    # Triton in the interpreter everywhere but jagged-1d; the native CPU ops where they exist.
    assert "triton" in families["attention"] and "native" in families["attention"]
    assert set(families["jagged-1d"]) == {"native"}
    assert result["tests"]["gpu-tests"]["skipped"] > 0
    bench_families = {r["family"] for r in result["benchmarks"]["rows"]}
    assert set(FAMILIES) | {"attention-fwd"} <= bench_families
    assert any("no --reference CHECKOUT given" in s for s in result["skipped"])
    table = (out / "gpu-check.md").read_text()
    assert "| correctness | passed |" in table
    assert "| TFLOP/s | vs reference |" in table
    for family in FAMILIES:
        assert f"| {family} | " in table
    assert "Unfinished" not in table
