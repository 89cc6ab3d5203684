"""The workload registry against the MLPerf Storage training table (h100 and a100)."""

from __future__ import annotations

import dataclasses

import pytest

from storage_workloads import (
    ACCELERATORS,
    MODELS,
    WORKLOADS,
    UnknownWorkloadError,
    Workload,
    workload,
)

# model: format, files, samples/file, record bytes, stdev, batch, threads, h100 s, a100 s, AU,
# epochs -- restated from the MLPerf Storage workload table.
TABLE = {
    "unet3d": ("npz", 168, 1, 146_600_628, 68_341_808, 7, 4, 0.323, 0.636, 0.90, 5),
    "resnet50": ("tfrecord", 1024, 1251, 114_660, 0, 400, 8, 0.224, 0.435, 0.90, 5),
    "cosmoflow": ("tfrecord", 524_288, 1, 2_828_486, 71_311, 1, 4, 0.00350, 0.00551, 0.70, 5),
    "dlrm": ("npz", 65_536, 1, 512, 0, 8192, 8, 0.005, 0.007, 0.70, 1),
    "retinanet": ("jpeg", 1_743_042, 1, 153_600, 51_200, 16, 8, 0.180, 0.210, 0.85, 5),
    "flux": ("jpeg", 1_099_776, 1, 307_200, 102_400, 8, None, 0.850, 1.100, 0.80, 5),
}
FRAMEWORK = {
    "unet3d": "pytorch",
    "resnet50": "tensorflow",
    "cosmoflow": "tensorflow",
    "dlrm": "pytorch",
    "retinanet": "pytorch",
    "flux": "pytorch",
}


def test_registry_holds_exactly_the_table() -> None:
    assert set(MODELS) == set(TABLE)
    assert ACCELERATORS == ("h100", "a100")
    assert set(WORKLOADS) == {(m, a) for m in TABLE for a in ("h100", "a100")}
    with pytest.raises(TypeError):
        WORKLOADS[("x", "y")] = WORKLOADS[("dlrm", "h100")]  # type: ignore[index]


@pytest.mark.parametrize("model", sorted(TABLE))
@pytest.mark.parametrize("accelerator", ["h100", "a100"])
def test_every_field(model: str, accelerator: str) -> None:
    fmt, files, spf, record, stdev, batch, threads, h100, a100, au, epochs = TABLE[model]
    w = workload(model, accelerator)
    assert w == WORKLOADS[(model, accelerator)]
    assert w.key == (model, accelerator)
    assert w.format == fmt
    assert w.num_files_train == files
    assert w.num_samples_per_file == spf
    assert w.record_length_bytes == record
    assert w.record_length_bytes_stdev == stdev
    assert w.batch_size == batch
    assert w.read_threads == threads
    assert w.computation_time_s == (h100 if accelerator == "h100" else a100)
    assert w.au_threshold == au
    assert w.epochs == epochs
    assert w.framework == w.data_loader == FRAMEWORK[model]


def test_lookup_is_case_insensitive() -> None:
    assert workload(" UNet3D ", "H100") is WORKLOADS[("unet3d", "h100")]


def test_unknown_names_are_reported_with_the_known_ones() -> None:
    with pytest.raises(UnknownWorkloadError) as exc:
        workload("bert", "h100")
    assert str(exc.value) == (
        "unknown model 'bert'; known models: unet3d, resnet50, cosmoflow, dlrm, retinanet, flux"
    )
    with pytest.raises(
        KeyError, match=r"unknown accelerator 'b200'; known accelerators: h100, a100"
    ):
        workload("unet3d", "b200")


def test_workloads_are_frozen() -> None:
    w = workload("dlrm", "h100")
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.batch_size = 1  # type: ignore[misc]
    assert w.dataset_bytes == 65_536 * 512


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("model", ""),
        ("model", "UNet3D"),
        ("accelerator", " "),
        ("framework", "jax"),
        ("data_loader", "numpy"),
        ("format", "zip"),
        ("num_files_train", 0),
        ("num_files_train", 1.0),
        ("num_samples_per_file", True),
        ("record_length_bytes", 0),
        ("record_length_bytes_stdev", -1),
        ("batch_size", 0),
        ("read_threads", -1),
        ("computation_time_s", 0.0),
        ("computation_time_s", float("nan")),
        ("au_threshold", 1.5),
        ("au_threshold", "0.9"),
        ("epochs", 0),
    ],
)
def test_validation_names_the_field(field: str, value: object) -> None:
    with pytest.raises((TypeError, ValueError), match=f"Workload.{field} "):
        dataclasses.replace(workload("unet3d", "h100"), **{field: value})


def test_a_new_workload_can_be_defined() -> None:
    w = Workload(
        model="unet3d",
        accelerator="b200",
        framework="pytorch",
        data_loader="pytorch",
        format="npz",
        num_files_train=7200,
        num_samples_per_file=1,
        record_length_bytes=146_600_628,
        record_length_bytes_stdev=68_341_808,
        batch_size=7,
        read_threads=4,
        computation_time_s=0.162,
        au_threshold=0.90,
        epochs=5,
    )
    assert w.key == ("unet3d", "b200")
    assert ("unet3d", "b200") not in WORKLOADS
