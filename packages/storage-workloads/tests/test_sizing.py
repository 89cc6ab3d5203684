"""Dataset sizing: worked examples of the MLPerf Storage formula."""

from __future__ import annotations

import math
from fractions import Fraction
from types import SimpleNamespace
from typing import Any

import pytest

from storage_workloads import required_num_files, suggested_subfolders, workload
from storage_workloads.sizing import record_length

GiB = 2**30


def test_accelerator_bound_unet3d() -> None:
    # memory: ceil(5 * 128 GiB / 146,600,628 B) = ceil(4687.53) = 4688
    # steps:  ceil(500 * 8 * 7 / 1) = 28,000  -> the larger wins
    w = workload("unet3d", "h100")
    assert required_num_files(w, total_host_memory_bytes=128 * GiB, num_accelerators=8) == 28_000


def test_memory_bound_unet3d() -> None:
    # memory: ceil(5 * 1024 GiB / 146,600,628 B) = ceil(37,500.2) = 37,501 > 28,000
    w = workload("unet3d", "a100")
    assert required_num_files(w, total_host_memory_bytes=1024 * GiB, num_accelerators=8) == 37_501


def test_memory_bound_resnet50_many_samples_per_file() -> None:
    # memory: ceil(5 * 512 GiB / (1251 * 114,660 B)) = ceil(19,163.31) = 19,164
    # steps:  ceil(500 * 8 * 400 / 1251) = ceil(1278.98) = 1,279
    w = workload("resnet50", "a100")
    assert required_num_files(w, total_host_memory_bytes=512 * GiB, num_accelerators=8) == 19_164


def test_accelerator_bound_resnet50() -> None:
    # memory: ceil(5 * 1 GiB / 143,439,660 B) = 38; steps: ceil(500 * 64 * 400 / 1251) = 10,232
    w = workload("resnet50", "h100")
    assert required_num_files(w, total_host_memory_bytes=GiB, num_accelerators=64) == 10_232


def test_rounds_up_where_mlpstorage_v2_rounds_down() -> None:
    # Submission_guidelines v2.0 6.6: "at least 5x larger than the sum of memory"; section 7:
    # min_total_files = hosts * GiB * 5 * 2**30 / record_length / samples_per_file, "a minimum
    # of min_total_files files". unet3d, 1 accelerator, 128 GiB: 4,687.53 -> 4,688 (mlpstorage
    # v2.0 floors to 4,687, which holds only 4.9993x the memory).
    w = workload("unet3d", "h100")
    need = required_num_files(w, total_host_memory_bytes=128 * GiB, num_accelerators=1)
    assert need == 4688
    assert need * 146_600_628 >= 5 * 128 * GiB > (need - 1) * 146_600_628
    # The steps term rounds up too: 500 steps of 400 samples over 1,251-sample files.
    w = workload("resnet50", "h100")
    assert required_num_files(w, total_host_memory_bytes=1, num_accelerators=1) == math.ceil(
        500 * 400 / 1251
    )


def test_divides_by_the_published_record_length() -> None:
    # resnet50's published mean is 114,660.07 B. At 28,687,940,000 B of memory the exact
    # quotient is 999.9997 files (1,000 needed); the whole-byte 114,660 would ask for 1,001.
    w: Any = SimpleNamespace(  # the fields required_num_files reads
        num_samples_per_file=1251,
        record_length_bytes=114_660,
        record_length_bytes_exact=114_660.07,
        batch_size=400,
    )
    assert record_length(w) == Fraction(11_466_007, 100)
    memory = 28_687_940_000
    assert required_num_files(w, total_host_memory_bytes=memory, num_accelerators=1) == 1000
    plain: Any = SimpleNamespace(**{**vars(w), "record_length_bytes_exact": None})
    assert required_num_files(plain, total_host_memory_bytes=memory, num_accelerators=1) == 1001


def test_exact_division_is_not_rounded_up() -> None:
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
        math.ceil(Fraction(5 * memory) / (spf * rec)),
        math.ceil(Fraction(500 * accelerators * batch, spf)),
    )
    got = required_num_files(w, total_host_memory_bytes=memory, num_accelerators=accelerators)
    assert got == expected
    # The run holds at least 5x host memory and 500 steps per accelerator.
    assert got * spf * rec >= 5 * memory
    assert got * spf >= 500 * accelerators * batch


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
