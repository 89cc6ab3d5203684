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
from storage_workloads.workloads import ParquetColumn, ParquetSchema

# model: format, files, samples/file, record bytes, stdev, batch, threads, h100 s, a100 s, AU,
# epochs -- restated from the MLPerf Storage workload table.
TABLE = {
    "unet3d": ("npz", 168, 1, 146_600_628, 68_341_808, 7, 4, 0.323, 0.636, 0.90, 5),
    "resnet50": ("tfrecord", 1024, 1251, 114_660, 0, 400, 8, 0.224, 0.435, 0.90, 5),
    "cosmoflow": ("tfrecord", 524_288, 1, 2_828_486, 71_311, 1, 4, 0.00350, 0.00551, 0.70, 5),
    "dlrm": ("npz", 65_536, 1, 512, 0, 8192, 8, 0.005, 0.007, 0.70, 1),
    "retinanet": ("jpeg", 1_743_042, 1, 153_600, 51_200, 16, 8, 0.180, 0.210, 0.85, 5),
    "flux": ("jpeg", 1_099_776, 1, 307_200, 102_400, 8, 8, 0.850, 1.100, 0.80, 5),
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
# compute s, AU, epochs -- the official MLPerf Storage b200/mi355 files (every key of them is
# compared in test_official_configs.py; no field is assumed).
NEW = {
    ("unet3d", "b200"): ("npz", 7_200, 1, 146_600_628, 68_341_808, 7, 4, 0.162, 0.90, 5),
    ("retinanet", "b200"): ("jpeg", 1_170_301, 1, 322_957, 0, 24, 8, 0.04755, 0.85, 8),
    ("retinanet", "mi355"): ("jpeg", 1_170_301, 1, 322_957, 0, 32, 8, 0.0634, 0.85, 8),
    ("dlrm", "b200"): ("parquet", 1024, 4_718_592, 761, 0, 16_384, 4, 0.000375, 0.70, 1),
    ("dlrm", "mi355"): ("parquet", 1024, 4_718_592, 761, 0, 16_384, 4, 0.0005625, 0.70, 1),
    ("flux", "b200"): ("parquet", 4_296, 288, 2_164_832, 0, 48, 8, 1.35, 0.90, 1),
    ("flux", "mi355"): ("parquet", 4_296, 288, 2_164_832, 0, 72, 8, 2.025, 0.90, 1),
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
    # Only the derived workload has values no official file gives.
    assert (key in ASSUMED_FIELDS) == (key == ("hstu_yambda", "any"))


def test_assumed_fields_name_real_fields_of_known_workloads() -> None:
    fields = {f.name for f in dataclasses.fields(Workload)}
    for key, notes in ASSUMED_FIELDS.items():
        assert key in WORKLOADS
        assert set(notes) <= fields and notes
    assert list(ASSUMED_FIELDS) == [("hstu_yambda", "any")]


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
        record_length_bytes_exact=114_660.07,
        record_length_bytes_resize=150_528,
        model_type="cnn",
    )
    assert DATAGENS["resnet50"].file_bytes == 1251 * 114_660
    # mi355 reads the b200 files; the name tells the parquet dlrm data from the npz one.
    assert datagen("dlrm", "mi355") == DATAGENS["dlrm_b200"]
    assert datagen("flux", "mi355") == DATAGENS["flux_b200"]
    assert [d.name for d in DATAGENS.values()] == list(DATAGENS)
    assert datagen("dlrm", "mi355").name == "dlrm_b200"
    assert datagen("unet3d", "b200").name == "unet3d"
    assert dataclasses.replace(DATAGENS["dlrm"], record_length_bytes=1).name == "dlrm"
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
        ("record_length_bytes_exact", 146_600_629.5),
        ("record_length_bytes_exact", float("inf")),
        ("record_length_bytes_exact", "1"),
        ("record_length_bytes_resize", -1),
        ("model_type", ""),
        ("model_size", 0),
        ("compression", "snappy"),
        ("parquet", "columns"),
        ("prefetch_size", -1),
        ("computation_threads", 0),
        ("file_shuffle", "yes"),
        ("sample_shuffle", True),
        ("shuffle_size", 0),
        ("dont_use_mmap", 1),
        ("workflow_checkpoint", "true"),
        ("checkpoint_after_epoch", None),
        ("epochs_between_checkpoints", 0),
    ],
)
def test_validation_names_the_field(field: str, value: object) -> None:
    with pytest.raises((TypeError, ValueError), match=f"Workload.{field} "):
        dataclasses.replace(workload("unet3d", "h100"), **{field: value})


def test_official_extras_of_the_workloads() -> None:
    """The keys beyond the file shape, as the official files set them (all compared key for
    key in test_official_configs.py)."""
    unet = workload("unet3d", "h100")
    assert (unet.model_type, unet.model_size, unet.record_length_bytes_resize) == (
        "cnn",
        499_153_191,
        2_097_152,
    )
    assert (unet.workflow_checkpoint, workload("unet3d", "b200").workflow_checkpoint) == (
        True,
        False,
    )
    assert (unet.checkpoint_after_epoch, unet.epochs_between_checkpoints) == (5, 2)
    resnet = workload("resnet50", "a100")
    assert resnet.record_length_bytes_exact == 114_660.07
    assert (resnet.computation_threads, resnet.dont_use_mmap) == (8, True)
    assert workload("resnet50", "h100").dont_use_mmap is None
    assert resnet.file_shuffle is None and resnet.workflow_checkpoint is None  # v2.0 sets none
    cosmo = workload("cosmoflow", "a100")
    assert (cosmo.file_shuffle, cosmo.sample_shuffle, cosmo.shuffle_size) == ("seed", "seed", 2)
    dlrm = workload("dlrm", "b200")
    assert (dlrm.file_shuffle, dlrm.sample_shuffle, dlrm.prefetch_size) == ("seed", None, 2)
    assert dlrm.compression == "none" and dlrm.parquet is not None
    assert (dlrm.parquet.row_group_size, dlrm.parquet.read_mode) == (6144, "row_group")
    assert len(dlrm.parquet.columns) == 200 and dlrm.parquet.row_bytes == 761
    assert sum(c.read is True for c in dlrm.parquet.columns) == 40
    flux = workload("flux", "mi355")
    assert flux.parquet is not None and flux.parquet.row_bytes == 2_164_832
    assert [c.size for c in flux.parquet.columns] == [524_328, 409, 8_232, 8_232, 7]
    assert workload("hstu_yambda", "any").file_shuffle is None


def test_parquet_schema_validation() -> None:
    column = ParquetColumn(name="a", dtype="float32", size=2, read=True)
    assert column.row_bytes == 8
    assert column.as_dict() == {"name": "a", "dtype": "float32", "size": 2, "read": True}
    assert ParquetColumn(name="b", dtype="int8").as_dict() == {"name": "b", "dtype": "int8"}
    schema = ParquetSchema(columns=(column,), row_group_size=4, read_mode="row_group")
    assert schema.as_dict() == {
        "row_group_size": 4,
        "read_mode": "row_group",
        "columns": [column.as_dict()],
    }
    with pytest.raises(ValueError, match=r"ParquetColumn\.dtype must be one of .* 'float128'"):
        ParquetColumn(name="a", dtype="float128")
    with pytest.raises(ValueError, match=r"ParquetColumn\.size must be >= 1, got 0"):
        ParquetColumn(name="a", dtype="int8", size=0)
    with pytest.raises(TypeError, match=r"ParquetColumn\.read must be a bool"):
        ParquetColumn(name="a", dtype="int8", read="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"ParquetSchema\.columns names 'a' twice"):
        ParquetSchema(columns=(column, column))
    with pytest.raises(ValueError, match=r"ParquetSchema\.columns must be a non-empty tuple"):
        ParquetSchema(columns=())
    with pytest.raises(ValueError, match=r"ParquetSchema\.read_mode must be one of"):
        ParquetSchema(columns=(column,), read_mode="page")
    dlrm = workload("dlrm", "b200")
    assert dlrm.parquet is not None
    with pytest.raises(ValueError, match=r"Workload\.parquet columns hold 8 bytes per row, but"):
        dataclasses.replace(dlrm, parquet=schema)
    with pytest.raises(ValueError, match=r"Workload\.parquet is set but format is 'npz'"):
        dataclasses.replace(dlrm, format="npz")
    with pytest.raises(ValueError, match=r"Datagen\.parquet columns hold"):
        dataclasses.replace(dlrm.datagen, record_length_bytes=760)


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
