"""DLIO configurations: every field, the engine's record-length keys, YAML round trip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from storage_workloads import (
    RECORD_LENGTH_KEYS,
    required_num_files,
    to_datagen_config,
    to_dlio_config,
    workload,
    write_dlio_config,
)


def test_unet3d_h100_mlperf_fork() -> None:
    config = to_dlio_config(
        workload("unet3d", "h100"), data_folder="data/unet3d", engine="mlperf-dlio"
    )
    assert config == {
        "model": {"name": "unet3d", "type": "cnn", "model_size": 499_153_191},
        "framework": "pytorch",
        "workflow": {"generate_data": False, "train": True, "checkpoint": True},
        "dataset": {
            "data_folder": "data/unet3d",
            "format": "npz",
            "num_files_train": 168,
            "num_samples_per_file": 1,
            "record_length_bytes": 146_600_628,
            "record_length_bytes_stdev": 68_341_808,
            "record_length_bytes_resize": 2_097_152,
        },
        "reader": {
            "data_loader": "pytorch",
            "batch_size": 7,
            "read_threads": 4,
            "file_shuffle": "seed",
            "sample_shuffle": "seed",
        },
        "train": {"epochs": 5, "computation_time": 0.323},
        "checkpoint": {
            "checkpoint_folder": "checkpoints/unet3d",
            "checkpoint_after_epoch": 5,
            "epochs_between_checkpoints": 2,
        },
        "metric": {"au": 0.90},
    }


def test_unet3d_upstream_dlio_spelling_and_checkpoint_folder() -> None:
    config = to_dlio_config(
        workload("unet3d", "b200"), data_folder="d", checkpoint_folder=Path("ck") / "u"
    )
    assert config["workflow"] == {"generate_data": False, "train": True, "checkpoint": False}
    assert config["dataset"]["record_length"] == 146_600_628
    assert config["dataset"]["record_length_stdev"] == 68_341_808
    assert config["dataset"]["record_length_resize"] == 2_097_152
    # dlio-benchmark 2.0.0 reads the model size from the checkpoint section.
    assert config["checkpoint"] == {
        "checkpoint_folder": os.path.join("ck", "u"),
        "checkpoint_after_epoch": 5,
        "epochs_between_checkpoints": 2,
        "model_size": 499_153_191,
    }
    # A datagen run never checkpoints; a workload without a checkpoint section ignores the folder.
    datagen = to_dlio_config(workload("unet3d", "h100"), data_folder="d", train=False)
    assert datagen["workflow"]["checkpoint"] is False
    resnet = to_dlio_config(workload("resnet50", "h100"), data_folder="d", checkpoint_folder="c")
    assert "checkpoint" not in resnet and "checkpoint" not in resnet["workflow"]


def test_resnet50_a100_upstream_dlio() -> None:
    config = to_dlio_config(
        workload("resnet50", "a100"), data_folder=Path("data") / "resnet50", engine="dlio"
    )
    assert config == {
        "model": {"name": "resnet50", "type": "cnn"},
        "framework": "tensorflow",
        "workflow": {"generate_data": False, "train": True},
        "dataset": {
            "data_folder": os.path.join("data", "resnet50"),
            "format": "tfrecord",
            "num_files_train": 1024,
            "num_samples_per_file": 1251,
            # the official spelling (for mlpstorage's reportgen), then dlio-benchmark 2.0.0's
            "record_length_bytes": 114_660.07,
            "record_length": 114_660.07,
            "record_length_bytes_resize": 150_528,
            "record_length_resize": 150_528,
        },
        "reader": {
            "data_loader": "tensorflow",
            "batch_size": 400,
            "read_threads": 8,
            "computation_threads": 8,
            "dont_use_mmap": True,
        },
        "train": {"epochs": 5, "computation_time": 0.435},
        "metric": {"au": 0.90},
    }
    h100 = to_dlio_config(workload("resnet50", "h100"), data_folder="d")
    assert "dont_use_mmap" not in h100["reader"]


def test_cosmoflow_gets_subfolders_and_shuffles() -> None:
    cosmo = to_dlio_config(workload("cosmoflow", "h100"), data_folder="d")
    assert cosmo["dataset"]["num_files_train"] == 524_288
    assert cosmo["dataset"]["num_subfolders_train"] == 53
    assert cosmo["dataset"]["record_length"] == 2_828_486
    assert cosmo["dataset"]["record_length_stdev"] == 71_311
    assert cosmo["reader"] == {
        "data_loader": "tensorflow",
        "batch_size": 1,
        "read_threads": 4,
        "file_shuffle": "seed",
        "sample_shuffle": "seed",
        "shuffle_size": 2,
    }
    assert cosmo["train"] == {"epochs": 5, "computation_time": 0.00350}
    assert cosmo["metric"] == {"au": 0.70}
    flat = to_dlio_config(workload("cosmoflow", "h100"), data_folder="d", num_subfolders=0)
    assert "num_subfolders_train" not in flat["dataset"]
    flux = to_dlio_config(workload("flux", "a100"), data_folder="d")
    assert flux["reader"]["read_threads"] == 8  # DLIO's default would be 1
    assert flux["train"] == {"epochs": 5, "computation_time": 1.100}
    hstu = to_dlio_config(workload("hstu_yambda", "any"), data_folder="d")
    assert hstu["reader"] == {"data_loader": "pytorch", "batch_size": 1024, "read_threads": 2}
    assert hstu["workflow"] == {"generate_data": False, "train": True}


@pytest.mark.parametrize("engine", ["dlio", "mlperf-dlio"])
def test_parquet_workloads(engine: str) -> None:
    dlrm = to_dlio_config(workload("dlrm", "mi355"), data_folder="d", engine=engine)  # type: ignore[arg-type]
    dataset = dlrm["dataset"]
    assert dataset["format"] == "parquet" and dataset["compression"] == "none"
    assert dataset[RECORD_LENGTH_KEYS[engine][0]] == 761
    assert dataset["num_samples_per_file"] == 4_718_592
    parquet = dataset["parquet"]
    assert (parquet["row_group_size"], parquet["read_mode"]) == (6144, "row_group")
    assert parquet["columns"][0] == {"name": "feature_000", "dtype": "float16", "read": False}
    assert parquet["columns"][11] == {"name": "feature_011", "dtype": "float32", "read": True}
    assert len(parquet["columns"]) == 200
    assert dlrm["reader"] == {
        "data_loader": "pytorch",
        "batch_size": 16_384,
        "reader_classname": "sw_dlio_ext.parquet.ParquetReader",
        "prefetch_size": 2,
        "read_threads": 4,
        "file_shuffle": "seed",
    }
    assert dlrm["train"] == {"epochs": 1, "computation_time": 0.0005625}
    flux = to_datagen_config(workload("flux", "b200"), data_folder="d", engine=engine)  # type: ignore[arg-type]
    assert flux["dataset"]["parquet"] == {
        "columns": [
            {"name": "t5_encodings", "dtype": "float32", "size": 524_328},
            {"name": "clip_encodings", "dtype": "float32", "size": 409},
            {"name": "mean", "dtype": "float32", "size": 8_232},
            {"name": "logvar", "dtype": "float32", "size": 8_232},
            {"name": "timestamp", "dtype": "float32", "size": 7},
        ]
    }
    assert flux["dataset"][RECORD_LENGTH_KEYS[engine][0]] == 2_164_832


@pytest.mark.parametrize("engine", ["dlio", "mlperf-dlio"])
def test_record_length_key_per_engine(engine: str) -> None:
    length_key, stdev_key = RECORD_LENGTH_KEYS[engine]
    dataset = to_dlio_config(workload("retinanet", "h100"), data_folder="d", engine=engine)[
        "dataset"
    ]
    assert dataset[length_key] == 153_600 and dataset[stdev_key] == 51_200
    # The official spelling is always there; the upstream one only for dlio-benchmark 2.0.0.
    assert set(RECORD_LENGTH_KEYS["mlperf-dlio"]) <= set(dataset)
    assert bool(set(RECORD_LENGTH_KEYS["dlio"]) & set(dataset)) == (engine == "dlio")
    assert RECORD_LENGTH_KEYS == {
        "dlio": ("record_length", "record_length_stdev"),
        "mlperf-dlio": ("record_length_bytes", "record_length_bytes_stdev"),
    }


def test_sized_datagen_config() -> None:
    w = workload("unet3d", "h100")
    files = required_num_files(w, total_host_memory_bytes=128 * 2**30, num_accelerators=8)
    config = to_dlio_config(w, data_folder="d", num_files=files, generate_data=True, train=False)
    assert config["workflow"] == {"generate_data": True, "train": False, "checkpoint": False}
    assert config["dataset"]["num_files_train"] == 28_000
    assert config["dataset"]["num_subfolders_train"] == 3


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"engine": "dlio2"}, "engine"),
        ({"num_files": 0}, "num_files"),
        ({"num_subfolders": -1}, "num_subfolders"),
        ({"data_folder": ""}, "data_folder"),
        ({"data_folder": 3}, "data_folder"),
        ({"checkpoint_folder": " "}, "checkpoint_folder"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], match: str) -> None:
    options: dict[str, object] = {"data_folder": "d", **kwargs}
    with pytest.raises(ValueError, match=match):
        to_dlio_config(workload("unet3d", "h100"), **options)  # type: ignore[arg-type]
    datagen_options = {k: v for k, v in options.items() if k != "checkpoint_folder"}
    if datagen_options != {"data_folder": "d"}:
        with pytest.raises(ValueError, match=match):
            to_datagen_config(workload("dlrm", "h100"), **datagen_options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "key", [("dlrm", "a100"), ("unet3d", "h100"), ("flux", "h100"), ("dlrm", "b200")]
)
def test_yaml_round_trip(tmp_path: Path, key: tuple[str, str]) -> None:
    w = workload(*key)
    path = write_dlio_config(
        tmp_path / "configs" / f"{w.model}_{w.accelerator}.yaml",
        w,
        data_folder="data/x",
        engine="mlperf-dlio",
    )
    assert path.is_file()
    loaded = yaml.safe_load(path.read_text())
    assert loaded == to_dlio_config(w, data_folder="data/x", engine="mlperf-dlio")
    sections = ["model", "framework", "workflow", "dataset", "reader", "train", "metric"]
    if w.model == "unet3d":
        sections.insert(-1, "checkpoint")
    assert list(loaded) == sections
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    assert path.stat().st_mode & 0o777 == 0o644


def test_write_replaces_atomically_and_cleans_up_on_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("old: true\n")
    write_dlio_config(path, workload("dlrm", "h100"), data_folder="d")
    assert yaml.safe_load(path.read_text())["model"] == {"name": "dlrm"}

    def failing_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        write_dlio_config(path, workload("unet3d", "h100"), data_folder="d")
    monkeypatch.undo()
    assert yaml.safe_load(path.read_text())["model"] == {"name": "dlrm"}  # old file intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.yaml"]  # temp file removed
    with pytest.raises(ValueError, match="engine"):
        write_dlio_config(path, workload("dlrm", "h100"), data_folder="d", engine="x")  # type: ignore[arg-type]


def test_import_does_not_load_torch() -> None:
    code = "import sys, storage_workloads\nassert 'torch' not in sys.modules, 'torch imported'\n"
    subprocess.run([sys.executable, "-c", code], check=True)
