"""The workload registry against the MLPerf Storage training tables (h100, a100, b200, mi355)
and the derived hstu_yambda workload."""

from __future__ import annotations

import dataclasses

import pytest

from storage_workloads import (
    ACCELERATORS,
    ASSUMED_FIELDS,
    DATAGENS,
    MODELS,
    WORKLOADS,
    Datagen,
    UnknownWorkloadError,
    Workload,
    datagen,
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


# (model, accelerator): format, files, samples/file, record bytes, stdev, batch, threads,
# compute s, AU, epochs -- MLPerf Storage v3.0 as facts.md gives it; the values facts.md does
# not give are those ASSUMED_FIELDS names (carried over, or DLIO's default / 0).
NEW = {
    ("unet3d", "b200"): ("npz", 7_200, 1, 146_600_628, 68_341_808, 7, 4, 0.162, 0.90, 5),
    ("retinanet", "b200"): ("jpeg", 1_170_301, 1, 322_957, 0, 24, None, 0.04755, 0.85, 8),
    ("retinanet", "mi355"): ("jpeg", 1_170_301, 1, 322_957, 0, 32, None, 0.0634, 0.85, 8),
    ("dlrm", "b200"): ("parquet", 1024, 4_718_592, 761, 0, 16_384, 8, 0.000375, 0.70, 1),
    ("flux", "b200"): ("parquet", 4_296, 288, 2_164_832, 0, 48, None, 1.35, 0.90, 1),
    # Derived from docs/benchmarks.md (yambda-data bench_store.py): see the README.
    ("hstu_yambda", "any"): ("npz", 328_113, 128, 49_544, 0, 1024, 2, 0.11773, 0.90, 1),
}


def test_registry_holds_exactly_the_tables() -> None:
    assert set(MODELS) == {*TABLE, "hstu_yambda"}
    assert ACCELERATORS == ("h100", "a100", "b200", "mi355", "any")
    assert set(WORKLOADS) == {(m, a) for m in TABLE for a in ("h100", "a100")} | set(NEW)
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


@pytest.mark.parametrize("key", sorted(NEW))
def test_b200_mi355_and_hstu_fields(key: tuple[str, str]) -> None:
    fmt, files, spf, record, stdev, batch, threads, compute, au, epochs = NEW[key]
    w = workload(*key)
    assert (w.format, w.num_files_train, w.num_samples_per_file) == (fmt, files, spf)
    assert (w.record_length_bytes, w.record_length_bytes_stdev) == (record, stdev)
    assert (w.batch_size, w.read_threads, w.computation_time_s) == (batch, threads, compute)
    assert (w.au_threshold, w.epochs) == (au, epochs)
    assert w.framework == w.data_loader == "pytorch"
    assert key in ASSUMED_FIELDS  # every value facts.md does not give is named


def test_assumed_fields_name_real_fields_of_known_workloads() -> None:
    fields = {f.name for f in dataclasses.fields(Workload)}
    for key, notes in ASSUMED_FIELDS.items():
        assert key in WORKLOADS
        assert set(notes) <= fields and notes
    assert ASSUMED_FIELDS[("retinanet", "b200")]["read_threads"].startswith("not public")


def test_hstu_yambda_derivation() -> None:
    """Record = mean history (2,326 events) x 21.3 store bytes per event; compute time = the
    batch of 1024 at one loader worker's 8,698 samples/s; files = train anchors / 128."""
    w = workload("hstu_yambda", "any")
    assert w.record_length_bytes == round(2_326 * 21.3)
    assert w.computation_time_s == round(1024 / 8_698, 5)
    assert w.num_files_train == -(-41_998_451 // 128)


def test_datagen_definitions() -> None:
    assert list(DATAGENS) == [
        "unet3d",
        "resnet50",
        "cosmoflow",
        "dlrm",
        "retinanet",
        "flux",
        "retinanet_b200",
        "dlrm_b200",
        "flux_b200",
        "hstu_yambda",
    ]
    assert datagen("retinanet", "mi355") == datagen("retinanet", "b200")
    assert DATAGENS["retinanet_b200"] == datagen("RETINANET_B200")
    unet = datagen("unet3d", "b200")
    assert unet.num_files_train == 7_200 and unet.record_length_bytes == 146_600_628
    assert DATAGENS["unet3d"].num_files_train == 168
    assert DATAGENS["resnet50"] == Datagen(
        model="resnet50",
        framework="tensorflow",
        format="tfrecord",
        num_files_train=1024,
        num_samples_per_file=1251,
        record_length_bytes=114_660,
    )
    assert DATAGENS["resnet50"].file_bytes == 1251 * 114_660
    with pytest.raises(
        UnknownWorkloadError, match="unknown dataset 'bert'; known datasets: unet3d"
    ):
        datagen("bert")
    with pytest.raises(ValueError, match=r"Datagen\.num_files_train must be an integer >= 1"):
        dataclasses.replace(DATAGENS["dlrm"], num_files_train=0)


def test_lookup_is_case_insensitive() -> None:
    assert workload(" UNet3D ", "H100") is WORKLOADS[("unet3d", "h100")]


def test_unknown_names_are_reported_with_the_known_ones() -> None:
    with pytest.raises(UnknownWorkloadError) as exc:
        workload("bert", "h100")
    assert str(exc.value) == (
        "unknown model 'bert'; known models: unet3d, resnet50, cosmoflow, dlrm, retinanet, flux,"
        " hstu_yambda"
    )
    with pytest.raises(
        KeyError, match=r"unknown accelerator 'v100'; known accelerators: h100, a100, b200, mi355"
    ):
        workload("unet3d", "v100")
    with pytest.raises(
        KeyError, match=r"no resnet50 workload for accelerator 'b200'; resnet50 is defined for: "
    ):
        workload("resnet50", "b200")


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
        accelerator="b300",
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
    assert w.key == ("unet3d", "b300")
    assert ("unet3d", "b300") not in WORKLOADS
