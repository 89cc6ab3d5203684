"""The emitted DLIO configurations against the official MLPerf Storage workload files.

The facts below were read from mlcommons/storage, ``configs/dlio/workload/<model>_<acc>.yaml``,
and written down here as flattened keys and values (Python data, not the files). ``SOURCES``
names the version followed for each file:

- unet3d, resnet50 and cosmoflow on h100/a100, and their ``*_datagen.yaml``: the v2.0 release,
  tag ``v2.0-rc0`` (commit 19fe145ac6b4bc89c214c3d45a267930a2ed95ee); branch ``v2.0-branch``
  (0bfbd3aa4772643193db403b86e50300372bc226) holds the same files.
- dlrm, retinanet and flux on h100/a100 (no v2.0 file exists) and every b200/mi355 entry: the
  newest published file found, at the commit given. Where stored versions disagree, the
  comment at the entry says which one is followed and why.

The comparison is against the official files' DLIO flavour (``engine="mlperf-dlio"``, the
``record_length_bytes`` spelling), after a YAML round trip, key for key and value for value
(types included: ``True`` is not ``1``). ``DELIBERATE`` and ``RENAMED`` list the only keys the
project sets differently, each with its reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from storage_workloads.dlio import (
    RECORD_LENGTH_KEYS,
    RECORD_RESIZE_KEYS,
    dump_yaml,
    to_datagen_config,
    to_dlio_config,
)
from storage_workloads.sizing import suggested_subfolders
from storage_workloads.workloads import DATAGENS, WORKLOADS, Workload, workload

V20 = "tag v2.0-rc0, 19fe145ac6b4bc89c214c3d45a267930a2ed95ee"

#: (model, accelerator) -> (version followed, path in mlcommons/storage).
SOURCES: dict[tuple[str, str], tuple[str, str]] = {
    ("unet3d", "h100"): (V20, "configs/dlio/workload/unet3d_h100.yaml"),
    ("unet3d", "a100"): (V20, "configs/dlio/workload/unet3d_a100.yaml"),
    ("resnet50", "h100"): (V20, "configs/dlio/workload/resnet50_h100.yaml"),
    ("resnet50", "a100"): (V20, "configs/dlio/workload/resnet50_a100.yaml"),
    ("cosmoflow", "h100"): (V20, "configs/dlio/workload/cosmoflow_h100.yaml"),
    ("cosmoflow", "a100"): (V20, "configs/dlio/workload/cosmoflow_a100.yaml"),
    ("dlrm", "h100"): (
        "a65ba8c32bc67219bd391664836f5d67c649fba7",
        "configs/dlio/workload/dlrm_h100.yaml",
    ),
    ("dlrm", "a100"): (
        "a65ba8c32bc67219bd391664836f5d67c649fba7",
        "configs/dlio/workload/dlrm_a100.yaml",
    ),
    ("retinanet", "h100"): (
        "fa2401266740333baf04de5faff67f0cc74dde19",
        "configs/dlio/workload/retinanet_h100.yaml",
    ),
    ("retinanet", "a100"): (
        "c8d70b666796b73b8ddd4bd525c505432dfe52f0",
        "configs/dlio/workload/retinanet_a100.yaml",
    ),
    ("flux", "h100"): (
        "7e73663b64a7b49ad542527bc3b2040c7e7a446e",
        "configs/dlio/workload/flux_h100.yaml",
    ),
    ("flux", "a100"): (
        "bdc54624fe4cf21cae738fabe5cc8bb218c8dc27",
        "configs/dlio/workload/flux_a100.yaml",
    ),
    ("unet3d", "b200"): (
        "0d75b41708cf30b991186aa58c53890cb3b7956e",
        "configs/dlio/workload/unet3d_b200.yaml",
    ),
    ("retinanet", "b200"): (
        "11460d004cc3127ba943a79cdc6fa0d9339eb7f8",
        "configs/dlio/workload/retinanet_b200.yaml",
    ),
    ("retinanet", "mi355"): (
        "76f45459b8a0ea67cffff896ae82af96cfcdab6c",
        "configs/dlio/workload/retinanet_mi355.yaml",
    ),
    ("dlrm", "b200"): (
        "0b42eb505324d197f48ea1900e2976c32ffa43ef",
        "configs/dlio/workload/dlrm_b200.yaml",
    ),
    ("dlrm", "mi355"): (
        "11460d004cc3127ba943a79cdc6fa0d9339eb7f8",
        "configs/dlio/workload/dlrm_mi355.yaml",
    ),
    ("flux", "b200"): (
        "c25079c2400ca62c360cbf1e970295d0e2250029",
        "configs/dlio/workload/flux_b200.yaml",
    ),
    ("flux", "mi355"): (
        "0b42eb505324d197f48ea1900e2976c32ffa43ef",
        "configs/dlio/workload/flux_mi355.yaml",
    ),
}

# --------------------------------------------------------------------------------------------
# v2.0 (tag v2.0-rc0). unet3d: later files (7e73663b for h100, d70e0b6f for a100) set
# workflow.checkpoint False; v2.0 sets True, and v2.0 is followed for h100/a100.

UNET3D = {
    "model.name": "unet3d",
    "model.type": "cnn",
    "model.model_size": 499153191,
    "framework": "pytorch",
    "workflow.generate_data": False,
    "workflow.train": True,
    "workflow.checkpoint": True,
    "dataset.data_folder": "data/unet3d/",
    "dataset.format": "npz",
    "dataset.num_files_train": 168,
    "dataset.num_samples_per_file": 1,
    "dataset.record_length_bytes": 146600628,
    "dataset.record_length_bytes_stdev": 68341808,
    "dataset.record_length_bytes_resize": 2097152,
    "reader.data_loader": "pytorch",
    "reader.batch_size": 7,
    "reader.read_threads": 4,
    "reader.file_shuffle": "seed",
    "reader.sample_shuffle": "seed",
    "train.epochs": 5,
    "checkpoint.checkpoint_folder": "checkpoints/unet3d",
    "checkpoint.checkpoint_after_epoch": 5,
    "checkpoint.epochs_between_checkpoints": 2,
    "metric.au": 0.90,
}
# resnet50 v2.0 sets no shuffle keys, and its record length has a fraction.
RESNET50 = {
    "model.name": "resnet50",
    "model.type": "cnn",
    "framework": "tensorflow",
    "workflow.generate_data": False,
    "workflow.train": True,
    "dataset.num_files_train": 1024,
    "dataset.num_samples_per_file": 1251,
    "dataset.record_length_bytes": 114660.07,
    "dataset.record_length_bytes_resize": 150528,
    "dataset.data_folder": "data/resnet50",
    "dataset.format": "tfrecord",
    "train.epochs": 5,
    "reader.data_loader": "tensorflow",
    "reader.read_threads": 8,
    "reader.computation_threads": 8,
    "reader.batch_size": 400,
    "metric.au": 0.90,
}
COSMOFLOW = {
    "model.name": "cosmoflow",
    "framework": "tensorflow",
    "workflow.generate_data": False,
    "workflow.train": True,
    "dataset.data_folder": "data/cosmoflow",
    "dataset.num_files_train": 524288,
    "dataset.num_samples_per_file": 1,
    "dataset.record_length_bytes": 2828486,
    "dataset.record_length_bytes_stdev": 71311,
    "dataset.format": "tfrecord",
    "reader.data_loader": "tensorflow",
    "reader.read_threads": 4,
    "reader.batch_size": 1,
    "reader.file_shuffle": "seed",
    "reader.sample_shuffle": "seed",
    "reader.shuffle_size": 2,
    "train.epochs": 5,
    "metric.au": 0.70,
}

# --------------------------------------------------------------------------------------------
# dlrm, retinanet, flux on h100/a100 (one stored version each).

DLRM = {
    "model.name": "dlrm",
    "framework": "pytorch",
    "workflow.generate_data": False,
    "workflow.train": True,
    "workflow.checkpoint": False,
    "dataset.data_folder": "data/dlrm/",
    "dataset.format": "npz",
    "dataset.num_files_train": 65536,
    "dataset.num_samples_per_file": 1,
    "dataset.record_length_bytes": 512,
    "reader.data_loader": "pytorch",
    "reader.batch_size": 8192,
    "reader.read_threads": 8,
    "reader.file_shuffle": "seed",
    "reader.sample_shuffle": "seed",
    "train.epochs": 1,
    "metric.au": 0.70,
}
RETINANET = {
    "model.name": "retinanet",
    "model.type": "cnn",
    "framework": "pytorch",
    "workflow.generate_data": False,
    "workflow.train": True,
    "workflow.checkpoint": False,
    "dataset.data_folder": "data/retinanet/",
    "dataset.format": "jpeg",
    "dataset.num_files_train": 1743042,
    "dataset.num_samples_per_file": 1,
    "dataset.record_length_bytes": 153600,
    "dataset.record_length_bytes_stdev": 51200,
    "reader.data_loader": "pytorch",
    "reader.batch_size": 16,
    "reader.read_threads": 8,
    "reader.file_shuffle": "seed",
    "reader.sample_shuffle": "seed",
    "train.epochs": 5,
    "metric.au": 0.85,
}
FLUX = {
    "model.name": "flux",
    "framework": "pytorch",
    "workflow.generate_data": False,
    "workflow.train": True,
    "workflow.checkpoint": False,
    "dataset.data_folder": "data/flux/",
    "dataset.format": "jpeg",
    "dataset.num_files_train": 1099776,
    "dataset.num_samples_per_file": 1,
    "dataset.record_length_bytes": 307200,
    "dataset.record_length_bytes_stdev": 102400,
    "reader.data_loader": "pytorch",
    "reader.batch_size": 8,
    "reader.read_threads": 8,
    "reader.file_shuffle": "seed",
    "reader.sample_shuffle": "seed",
    "train.epochs": 5,
    "metric.au": 0.80,
}

# --------------------------------------------------------------------------------------------
# b200 / mi355.

# unet3d_b200 keeps the checkpoint section but sets workflow.checkpoint False.
UNET3D_B200 = {
    **UNET3D,
    "workflow.checkpoint": False,
    "dataset.num_files_train": 7200,
    "train.computation_time": 0.162,
}
RETINANET_B200_MI355 = {
    **{k: v for k, v in RETINANET.items() if k != "dataset.record_length_bytes_stdev"},
    "dataset.num_files_train": 1170301,
    "dataset.record_length_bytes": 322957,
    "train.epochs": 8,
}

# The parquet dlrm columns feature_000..feature_199 (dlrm_b200.yaml, dlrm_mi355.yaml), by
# element type; each column has ``read: false`` unless listed in DLRM_READ_COLUMNS.
DLRM_COLUMN_DTYPES = {
    "float16": (0, 1, 5, 8, 15, 19, 24, 27, 28, 34, 35, 40, 42, 58, 61, 65, 68, 70, 72, 76,
                84, 86, 92, 97, 99, 100, 102, 105, 106, 113, 114, 120, 121, 125, 130, 133, 134,
                136, 140, 159, 161, 163, 165, 167, 171, 178, 179, 184, 188, 199),
    "float32": (4, 6, 10, 11, 13, 16, 17, 18, 25, 26, 29, 31, 33, 41, 43, 49, 50, 53, 54, 55,
                57, 59, 64, 67, 69, 71, 73, 74, 78, 82, 83, 88, 90, 91, 93, 96, 103, 107, 109,
                118, 128, 131, 137, 141, 145, 147, 155, 156, 158, 160, 162, 168, 189, 193, 195,
                196),
    "float64": (2, 3, 12, 20, 21, 22, 23, 30, 32, 36, 44, 46, 47, 48, 60, 62, 75, 79, 94, 95,
                101, 104, 108, 110, 111, 117, 132, 135, 138, 139, 144, 146, 148, 149, 153, 154,
                164, 166, 170, 173, 181, 182, 183, 185, 190, 192, 194, 197, 198),
    "int8": (7, 9, 14, 37, 38, 39, 45, 51, 52, 56, 63, 66, 77, 80, 81, 85, 87, 89, 98, 112, 115,
             116, 119, 122, 123, 124, 126, 127, 129, 142, 143, 150, 151, 152, 157, 169, 172,
             174, 175, 176, 177, 180, 186, 187, 191),
}  # fmt: skip
DLRM_READ_COLUMNS = (11, 17, 18, 20, 25, 31, 41, 43, 49, 53, 58, 59, 67, 68, 71, 74, 75, 88, 90,
                     91, 92, 93, 94, 96, 97, 116, 117, 137, 141, 147, 154, 155, 158, 160, 162,
                     169, 180, 186, 189, 195)  # fmt: skip


def _dlrm_columns() -> dict[str, Any]:
    dtype = {i: name for name, indices in DLRM_COLUMN_DTYPES.items() for i in indices}
    assert sorted(dtype) == list(range(200))
    flat: dict[str, Any] = {}
    for i in range(200):
        flat[f"dataset.parquet.columns.{i}.name"] = f"feature_{i:03d}"
        flat[f"dataset.parquet.columns.{i}.dtype"] = dtype[i]
        flat[f"dataset.parquet.columns.{i}.read"] = i in DLRM_READ_COLUMNS
    return flat


# dlrm_b200: an earlier stored version (8349485bdea2ffd38199f43c1d4486c107803de9) had 160-byte
# records, 4,194,304 samples per file, three columns, row groups of 8,192 and 0.0005 s; the
# version followed (0b42eb50) has the 761-byte, 200-column schema of the v3.0 figures.
DLRM_PARQUET = {
    "model.name": "dlrm",
    "framework": "pytorch",
    "workflow.generate_data": False,
    "workflow.train": True,
    "workflow.checkpoint": False,
    "dataset.data_folder": "data/dlrm/",
    "dataset.format": "parquet",
    "dataset.num_files_train": 1024,
    "dataset.num_samples_per_file": 4718592,
    "dataset.record_length_bytes": 761,
    "dataset.compression": "none",
    "dataset.parquet.row_group_size": 6144,
    "dataset.parquet.read_mode": "row_group",
    **_dlrm_columns(),
    "reader.data_loader": "pytorch",
    "reader.batch_size": 16384,
    "reader.prefetch_size": 2,
    "reader.read_threads": 4,
    "reader.file_shuffle": "seed",
    "train.epochs": 1,
    "metric.au": 0.70,
}

FLUX_COLUMNS = (
    ("t5_encodings", 524328),
    ("clip_encodings", 409),
    ("mean", 8232),
    ("logvar", 8232),
    ("timestamp", 7),
)
# flux_b200: an earlier stored version (e3ffed051b176a5acc82196127d11d4bab69664c) had 256
# samples per file, batch 64 and 1.8 s; the one followed (c25079c2) has 288, 48 and 1.35 s,
# the v3.0 figures. The official flux parquet files spell the record length
# ``dataset.record_length`` (see RENAMED).
FLUX_PARQUET = {
    "model.name": "flux",
    "framework": "pytorch",
    "workflow.generate_data": False,
    "workflow.train": True,
    "workflow.checkpoint": False,
    "dataset.data_folder": "data/flux/",
    "dataset.format": "parquet",
    "dataset.compression": "none",
    "dataset.num_files_train": 4296,
    "dataset.num_samples_per_file": 288,
    "dataset.record_length": 2164832,
    **{
        f"dataset.parquet.columns.{i}.{field}": value
        for i, (name, size) in enumerate(FLUX_COLUMNS)
        for field, value in (("name", name), ("dtype", "float32"), ("size", size))
    },
    "reader.data_loader": "pytorch",
    "reader.read_threads": 8,
    "reader.file_shuffle": "seed",
    "train.epochs": 1,
    "metric.au": 0.90,
}

#: (model, accelerator) -> the official file, flattened (list items by index).
OFFICIAL: dict[tuple[str, str], dict[str, Any]] = {
    ("unet3d", "h100"): {**UNET3D, "train.computation_time": 0.323},
    ("unet3d", "a100"): {**UNET3D, "train.computation_time": 0.636},
    ("resnet50", "h100"): {**RESNET50, "train.computation_time": 0.224},
    ("resnet50", "a100"): {
        **RESNET50,
        "train.computation_time": 0.435,
        "reader.dont_use_mmap": True,
    },
    ("cosmoflow", "h100"): {**COSMOFLOW, "train.computation_time": 0.00350},
    ("cosmoflow", "a100"): {**COSMOFLOW, "train.computation_time": 0.00551},
    ("dlrm", "h100"): {**DLRM, "train.computation_time": 0.005},
    ("dlrm", "a100"): {**DLRM, "train.computation_time": 0.007},
    ("retinanet", "h100"): {**RETINANET, "train.computation_time": 0.180},
    ("retinanet", "a100"): {**RETINANET, "train.computation_time": 0.210},
    ("flux", "h100"): {**FLUX, "train.computation_time": 0.850},
    ("flux", "a100"): {**FLUX, "train.computation_time": 1.100},
    ("unet3d", "b200"): UNET3D_B200,
    ("retinanet", "b200"): {
        **RETINANET_B200_MI355,
        "reader.batch_size": 24,
        "train.computation_time": 0.04755,
    },
    ("retinanet", "mi355"): {
        **RETINANET_B200_MI355,
        "reader.batch_size": 32,
        "train.computation_time": 0.0634,
    },
    ("dlrm", "b200"): {**DLRM_PARQUET, "train.computation_time": 0.000375},
    # dlrm_mi355: the stored versions differ in reader.batch_size: 16,384 (11460d00, followed)
    # and 18,432 (52714a9b604d320815d9cd1e6503375137b53615); the compute time is 0.0005625 in
    # both.
    ("dlrm", "mi355"): {**DLRM_PARQUET, "train.computation_time": 0.0005625},
    ("flux", "b200"): {**FLUX_PARQUET, "reader.batch_size": 48, "train.computation_time": 1.35},
    ("flux", "mi355"): {**FLUX_PARQUET, "reader.batch_size": 72, "train.computation_time": 2.025},
}

#: The official v2.0 data-generation files (``<model>_datagen.yaml``, tag v2.0-rc0), flattened.
OFFICIAL_DATAGEN: dict[str, dict[str, Any]] = {
    name: {
        **{k: v for k, v in facts.items() if k.startswith(("model.", "framework", "dataset."))},
        "workflow.generate_data": True,
        "workflow.train": False,
        "workflow.checkpoint": False,
    }
    for name, facts in (("unet3d", UNET3D), ("resnet50", RESNET50), ("cosmoflow", COSMOFLOW))
}
# The newer datagen files disagree with their own training files: dlrm_datagen.yaml
# (3d193498d9e3ac0dda27503e6a1d26858478cec0) has 1,536,000 samples per file and
# parquet.use_s3dlio_gen; flux_datagen.yaml (7e73663b) 256 samples per file; and
# retinanet_datagen.yaml (7e73663b) is the b200/mi355 shape. The project generates exactly the
# dataset section of each training file instead (test_datagen_matches_the_training_dataset).

#: Keys the project writes that the official files do not have, and why.
DELIBERATE: dict[str, str] = {
    "dataset.num_subfolders_train": (
        "written by the project when the dataset has more than 10,000 files "
        "(suggested_subfolders), so no folder holds more; num_subfolders=0 gives the official "
        "flat folder"
    ),
    "reader.reader_classname": (
        "parquet workloads name the parquet reader of the DLIO extensions: no DLIO 2.0 reads "
        "parquet, and the key keeps the workload's own keys as they are"
    ),
}
#: Keys the caller sets (paths). The official value is passed in here, so they compare equal.
CALLER_SET: dict[str, str] = {
    "dataset.data_folder": "the data directory of the run (the data_folder argument)",
    "checkpoint.checkpoint_folder": (
        "the checkpoint directory (the checkpoint_folder argument; default checkpoints/<model>, "
        "the official value)"
    ),
}
#: Official keys the project spells differently, per workload: official key -> project key.
RENAMED: dict[tuple[str, str], dict[str, str]] = {
    # The flux parquet files spell the record length ``record_length``, which the MLPerf DLIO
    # (mlcommons/DLIO_local_changes, LoadConfig) does not read: it reads only
    # ``record_length_bytes`` and would fall back to its 64 KiB default. The project writes the
    # spelling the engine reads, with the official value.
    ("flux", "b200"): {"dataset.record_length": "dataset.record_length_bytes"},
    ("flux", "mi355"): {"dataset.record_length": "dataset.record_length_bytes"},
}


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves of nested mappings and lists, keyed ``a.b.0.c``."""
    if isinstance(value, Mapping):
        items = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, list):
        items = [(str(i), v) for i, v in enumerate(value)]
    else:
        return {prefix[:-1]: value}
    flat: dict[str, Any] = {}
    for key, item in items:
        flat.update(_flatten(item, f"{prefix}{key}."))
    return flat


def _emitted(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` as DLIO reads it: dumped to YAML, loaded back, flattened."""
    return _flatten(yaml.safe_load(dump_yaml(config)))


def _differences(
    emitted: Mapping[str, Any], official: Mapping[str, Any], renamed: Mapping[str, str]
) -> list[str]:
    """Every key and value in which ``emitted`` differs from ``official``, deliberate ones aside."""
    expected = {renamed.get(k, k): v for k, v in official.items()}
    found = []
    for key in sorted(set(expected) | set(emitted)):
        if key not in emitted:
            found.append(f"{key}: missing (official {expected[key]!r})")
        elif key not in expected:
            if key not in DELIBERATE:
                found.append(f"{key}: not in the official file (emitted {emitted[key]!r})")
        elif type(emitted[key]) is not type(expected[key]) or emitted[key] != expected[key]:
            found.append(f"{key}: emitted {emitted[key]!r}, official {expected[key]!r}")
    return found


def _official_config(key: tuple[str, str], w: Workload | None = None) -> dict[str, Any]:
    facts = OFFICIAL[key]
    return to_dlio_config(
        workload(*key) if w is None else w,
        data_folder=facts["dataset.data_folder"],
        checkpoint_folder=facts.get("checkpoint.checkpoint_folder"),
        engine="mlperf-dlio",
    )


def test_every_official_workload_is_defined_and_sourced() -> None:
    mlperf = {key for key in WORKLOADS if key != ("hstu_yambda", "any")}
    assert set(OFFICIAL) == mlperf == set(SOURCES)
    for version, path in SOURCES.values():
        assert path.startswith("configs/dlio/workload/") and path.endswith(".yaml")
        assert len(version.split()[-1]) == 40  # a full commit hash


@pytest.mark.parametrize("key", sorted(OFFICIAL), ids="_".join)
def test_emitted_config_equals_the_official_file(key: tuple[str, str]) -> None:
    emitted = _emitted(_official_config(key))
    assert _differences(emitted, OFFICIAL[key], RENAMED.get(key, {})) == []
    files = emitted["dataset.num_files_train"]
    if "dataset.num_subfolders_train" in emitted:
        assert emitted["dataset.num_subfolders_train"] == suggested_subfolders(files) > 0
    flat = to_dlio_config(
        workload(*key),
        data_folder=OFFICIAL[key]["dataset.data_folder"],
        num_subfolders=0,
        engine="mlperf-dlio",
    )
    assert "num_subfolders_train" not in flat["dataset"]


def test_the_comparison_finds_a_changed_missing_or_extra_key() -> None:
    key = ("cosmoflow", "h100")
    w = workload(*key)
    changed = dataclasses.replace(w, shuffle_size=3, sample_shuffle=None, dont_use_mmap=False)
    found = _differences(_emitted(_official_config(key, changed)), OFFICIAL[key], {})
    assert found == [
        "reader.dont_use_mmap: not in the official file (emitted False)",
        "reader.sample_shuffle: missing (official 'seed')",
        "reader.shuffle_size: emitted 3, official 2",
    ]
    # A value of the right size but the wrong type is a difference too.
    assert _differences({"metric.au": 1}, {"metric.au": 1.0}, {}) == [
        "metric.au: emitted 1, official 1.0"
    ]
    # Without the rename, the flux spelling would be reported.
    flux = ("flux", "b200")
    assert "dataset.record_length: missing (official 2164832)" in _differences(
        _emitted(_official_config(flux)), OFFICIAL[flux], {}
    )


@pytest.mark.parametrize("key", sorted(OFFICIAL), ids="_".join)
def test_datagen_matches_the_training_dataset(key: tuple[str, str]) -> None:
    official = OFFICIAL[key]
    emitted = _emitted(
        to_datagen_config(
            workload(*key), data_folder=official["dataset.data_folder"], engine="mlperf-dlio"
        )
    )
    expected = {
        **{k: v for k, v in official.items() if k.startswith(("model.", "framework", "dataset."))},
        "workflow.generate_data": True,
        "workflow.train": False,
        "workflow.checkpoint": False,
    }
    assert _differences(emitted, expected, RENAMED.get(key, {})) == []


@pytest.mark.parametrize("name", sorted(OFFICIAL_DATAGEN))
def test_v20_datagen_files(name: str) -> None:
    official = OFFICIAL_DATAGEN[name]
    emitted = _emitted(
        to_datagen_config(
            DATAGENS[name], data_folder=official["dataset.data_folder"], engine="mlperf-dlio"
        )
    )
    assert _differences(emitted, official, {}) == []


@pytest.mark.parametrize("key", sorted(OFFICIAL), ids="_".join)
def test_upstream_flavour_adds_its_spelling(key: tuple[str, str]) -> None:
    """dlio-benchmark 2.0.0 gets the official config plus each record-length key in its own
    spelling (the official one stays, for mlpstorage's reportgen) and the model size where it
    reads it."""
    w = workload(*key)
    fork = _flatten(to_dlio_config(w, data_folder="d", engine="mlperf-dlio"))
    upstream = _flatten(to_dlio_config(w, data_folder="d", engine="dlio"))
    names = dict(
        zip(
            (*RECORD_LENGTH_KEYS["mlperf-dlio"], RECORD_RESIZE_KEYS["mlperf-dlio"]),
            (*RECORD_LENGTH_KEYS["dlio"], RECORD_RESIZE_KEYS["dlio"]),
            strict=True,
        )
    )
    added = {
        f"dataset.{names[k.split('.')[1]]}": v
        for k, v in fork.items()
        if k.startswith("dataset.") and k.split(".")[1] in names
    }
    if w.has_checkpoint_section and w.model_size is not None:
        # dlio-benchmark 2.0.0 reads the model size from the checkpoint section.
        added["checkpoint.model_size"] = w.model_size
    assert added and not set(added) & set(fork)
    assert upstream == {**fork, **added}


def test_caller_set_paths_are_the_only_other_differences() -> None:
    key = ("unet3d", "h100")
    config = to_dlio_config(
        workload(*key), data_folder="/mnt/x", checkpoint_folder="/mnt/ck", engine="mlperf-dlio"
    )
    found = _differences(_emitted(config), OFFICIAL[key], {})
    assert [line.split(":")[0] for line in found] == sorted(CALLER_SET)
