"""Dataset sizing: worked examples of the MLPerf Storage formula."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from storage_workloads import required_num_files, suggested_subfolders, workload
from storage_workloads.sizing import memory_term, record_length, steps_term

GiB = 2**30


MLPSTORAGE_SIZING = json.loads(
    (Path(__file__).parent / "data" / "mlpstorage-sizing.json").read_text(encoding="utf-8")
)


def test_accelerator_bound_unet3d() -> None:
    # memory: floor(5 * 128 GiB / 146,600,628 B) = floor(4687.53) = 4687
    # steps:  floor(500 * 8 * 7 / 1) = 28,000  -> the larger wins
    w = workload("unet3d", "h100")
    assert required_num_files(w, total_host_memory_bytes=128 * GiB, num_accelerators=8) == 28_000


def test_memory_bound_unet3d() -> None:
    # memory: floor(5 * 1024 GiB / 146,600,628 B) = floor(37,500.2) = 37,500 > 28,000
    w = workload("unet3d", "a100")
    assert required_num_files(w, total_host_memory_bytes=1024 * GiB, num_accelerators=8) == 37_500


def test_memory_bound_resnet50_many_samples_per_file() -> None:
    # memory: floor(5 * 512 GiB / (1251 * 114,660.07 B)) = floor(19,163.4) = 19,163
    # steps:  floor(500 * 8 * 400 / 1251) = floor(1278.98) = 1,278
    w = workload("resnet50", "a100")
    assert required_num_files(w, total_host_memory_bytes=512 * GiB, num_accelerators=8) == 19_163
    assert steps_term(w, 8) == 1278


def test_accelerator_bound_resnet50() -> None:
    # memory: floor(5 * 1 GiB / 143,439,747.57 B) = 37; steps: floor(500 * 64 * 400 / 1251)
    w = workload("resnet50", "h100")
    assert memory_term(w, GiB) == 37
    assert required_num_files(w, total_host_memory_bytes=GiB, num_accelerators=64) == 10_231


@pytest.mark.parametrize(
    "case",
    MLPSTORAGE_SIZING["cases"],
    ids=lambda c: (
        f"{c['model']}-{c['accelerator']}-{c['num_accelerators']}x-"
        f"{c['hosts']}x{c['host_memory_gib']}GiB"
    ),
)
def test_equals_mlpstorage(case: dict[str, Any]) -> None:
    # mlpstorage 2.0's own answers (tests/data/mlpstorage-sizing.json): the rules make the
    # script's calculation the rule (Submission_guidelines v2.0 7), so a dataset that passes
    # one tool passes the other.
    w = workload(case["model"], case["accelerator"])
    memory = case["hosts"] * case["host_memory_gib"] * GiB
    got = required_num_files(
        w, total_host_memory_bytes=memory, num_accelerators=case["num_accelerators"]
    )
    assert got == case["num_files"]


def test_the_issue_cases_floor_as_mlpstorage() -> None:
    # unet3d, 1 accelerator, 128 GiB: 4,687.53 -> 4,687; resnet50, 8 accelerators on
    # 2 x 256 GiB: 19,163.4 -> 19,163 (the floor holds 4.9999x the memory: the script's rule).
    unet3d = workload("unet3d", "h100")
    need = required_num_files(unet3d, total_host_memory_bytes=128 * GiB, num_accelerators=1)
    assert need == 4687
    assert (need + 1) * 146_600_628 > 5 * 128 * GiB > need * 146_600_628
    resnet50 = workload("resnet50", "h100")
    assert (
        required_num_files(resnet50, total_host_memory_bytes=512 * GiB, num_accelerators=8)
        == 19_163
    )


def test_divides_by_the_published_record_length() -> None:
    # resnet50's published mean is 114,660.07 B. At 28,687,940,000 B of memory the exact
    # quotient is 999.9997 files (floor 999); the whole-byte 114,660 gives 1,000.0003 (1,000).
    w: Any = SimpleNamespace(  # the fields required_num_files reads
        num_samples_per_file=1251,
        record_length_bytes=114_660,
        record_length_bytes_exact=114_660.07,
        batch_size=400,
    )
    assert record_length(w) == Fraction(11_466_007, 100)
    memory = 28_687_940_000
    assert required_num_files(w, total_host_memory_bytes=memory, num_accelerators=1) == 999
    plain: Any = SimpleNamespace(**{**vars(w), "record_length_bytes_exact": None})
    assert required_num_files(plain, total_host_memory_bytes=memory, num_accelerators=1) == 1000


def test_exact_division_is_exact() -> None:
    # 5 * 64 GiB / 512 B = 671,088,640 exactly; steps: 500 * 1 * 8192 = 4,096,000
    w = workload("dlrm", "h100")
    assert required_num_files(w, total_host_memory_bytes=64 * GiB, num_accelerators=1) == (
        671_088_640
    )


@pytest.mark.parametrize("memory", [1, 10**9 + 7, 3 * 10**12 + 1])
@pytest.mark.parametrize("accelerators", [1, 3, 128])
@pytest.mark.parametrize("model", ["unet3d", "resnet50", "cosmoflow", "retinanet"])
def test_matches_the_formula(model: str, memory: int, accelerators: int) -> None:
    w = workload(model, "h100")
    spf, rec, batch = w.num_samples_per_file, record_length(w), w.batch_size
    expected = max(
        math.floor(Fraction(5 * memory) / (spf * rec)),
        (500 * accelerators * batch) // spf,
    )
    got = required_num_files(w, total_host_memory_bytes=memory, num_accelerators=accelerators)
    assert got == expected
    # One more file would hold 5x host memory and 500 steps per accelerator.
    assert (got + 1) * spf * rec > 5 * memory
    assert (got + 1) * spf > 500 * accelerators * batch


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"total_host_memory_bytes": 0, "num_accelerators": 1}, "total_host_memory_bytes"),
        ({"total_host_memory_bytes": 1.5, "num_accelerators": 1}, "total_host_memory_bytes"),
        ({"total_host_memory_bytes": GiB, "num_accelerators": 0}, "num_accelerators"),
    ],
)
def test_bad_system_values(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises((TypeError, ValueError), match=name):
        required_num_files(workload("dlrm", "a100"), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("files", "subfolders"),
    [
        (1, 0),
        (168, 0),
        (10_000, 0),
        (10_001, 2),
        (20_000, 2),
        (20_001, 3),
        (65_536, 7),
        (524_288, 53),
        (1_743_042, 175),
    ],
)
def test_suggested_subfolders(files: int, subfolders: int) -> None:
    assert suggested_subfolders(files) == subfolders
    if subfolders:
        assert math.ceil(files / subfolders) <= 10_000


def test_suggested_subfolders_rejects_nonpositive() -> None:
    with pytest.raises(ValueError, match="num_files"):
        suggested_subfolders(0)


def test_the_readme_says_what_the_code_computes(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's `size` example is the command's output, and its Sizing section gives the
    rounding and the figures the code gives."""
    from storage_workloads.cli import main

    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    assert main(["size", "unet3d", "--accelerators", "8", "--host-memory-gb", "128"]) == 0
    assert capsys.readouterr().out in readme
    sizing = readme.split("### Sizing", 1)[1].split("\n### ", 1)[0]
    assert "Both round down" in sizing and "ceil(5" not in sizing
    w = workload("unet3d", "h100")
    for memory in (128 * GiB, 1024 * GiB):
        files = required_num_files(w, total_host_memory_bytes=memory, num_accelerators=8)
        assert f"{files:,}" in sizing
    assert f"{memory_term(w, 128 * GiB):,}" in sizing
