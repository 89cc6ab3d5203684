"""The published MLPerf Storage workload YAMLs, as far as a run may not change them:
:data:`OFFICIAL_WORKLOAD_VALUES`."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final


# The published workload YAMLs of mlcommons/storage, flattened to dotted keys: every key a run
# may not change (the tunables of rules.CLOSED_PARAMETERS, such as data_folder, num_files_train,
# read_threads and checkpoint_folder, are left out). SG v2.0 10.2 and Rules.md 3.6.2: the YAML
# is the workload, so these keys are part of it and never count as overrides, whether or not
# dlio.to_dlio_config emits them. Sources, configs/dlio/workload/ at: caa90c9 (v2.0) for
# unet3d, resnet50 and cosmoflow on h100/a100; the newest files seen (v3.0) for the rest:
# retinanet_h100 fa24012, retinanet_a100 c8d70b6, retinanet_b200 11460d0, retinanet_mi355
# 76f4545, dlrm_h100/a100 a65ba8c, dlrm_b200 0b42eb5, dlrm_mi355 11460d0, flux_h100 7e73663,
# flux_a100 bdc5462, flux_b200 c25079c, flux_mi355 0b42eb5, unet3d_b200 0d75b41.
# The record-length keys are respelled for the engine a run uses (record_length_bytes for the
# MLPerf DLIO fork, record_length upstream). dlrm's 200-column parquet schema
# (dataset.parquet.columns) is not listed: the emitted config has to carry it. The workflow
# flags are rules.check_overrides' business and not listed either.
def _yaml(model: str, framework: str, loader: str, **keys: object) -> dict[str, object]:
    return {"model.name": model, "framework": framework, "reader.data_loader": loader, **keys}


_SHUFFLED: Final = {"reader.file_shuffle": "seed", "reader.sample_shuffle": "seed"}

_UNET3D_YAML: Final = _yaml(
    "unet3d",
    "pytorch",
    "pytorch",
    **{
        "model.type": "cnn",
        "model.model_size": 499_153_191,
        "dataset.format": "npz",
        "dataset.num_samples_per_file": 1,
        "dataset.record_length_bytes": 146_600_628,
        "dataset.record_length_bytes_stdev": 68_341_808,
        "dataset.record_length_bytes_resize": 2_097_152,
        "reader.batch_size": 7,
        **_SHUFFLED,
        "train.epochs": 5,
        "checkpoint.checkpoint_after_epoch": 5,
        "checkpoint.epochs_between_checkpoints": 2,
        "metric.au": 0.90,
    },
)

_RESNET50_YAML: Final = _yaml(
    "resnet50",
    "tensorflow",
    "tensorflow",
    **{
        "model.type": "cnn",
        "dataset.format": "tfrecord",
        "dataset.num_samples_per_file": 1251,
        "dataset.record_length_bytes": 114_660.07,
        "dataset.record_length_bytes_resize": 150_528,
        "reader.batch_size": 400,
        "train.epochs": 5,
        "metric.au": 0.90,
    },
)

_COSMOFLOW_YAML: Final = _yaml(
    "cosmoflow",
    "tensorflow",
    "tensorflow",
    **{
        "dataset.format": "tfrecord",
        "dataset.num_samples_per_file": 1,
        "dataset.record_length_bytes": 2_828_486,
        "dataset.record_length_bytes_stdev": 71_311,
        "reader.batch_size": 1,
        **_SHUFFLED,
        "reader.shuffle_size": 2,
        "train.epochs": 5,
        "metric.au": 0.70,
    },
)

_RETINANET_YAML: Final = _yaml(
    "retinanet",
    "pytorch",
    "pytorch",
    **{
        "model.type": "cnn",
        "dataset.format": "jpeg",
        "dataset.num_samples_per_file": 1,
        **_SHUFFLED,
        "metric.au": 0.85,
    },
)

_RETINANET_V3_FILES: Final = {"dataset.record_length_bytes": 322_957, "train.epochs": 8}

_DLRM_YAML: Final = _yaml("dlrm", "pytorch", "pytorch", **{"train.epochs": 1, "metric.au": 0.70})

_DLRM_NPZ: Final = {
    "dataset.format": "npz",
    "dataset.num_samples_per_file": 1,
    "dataset.record_length_bytes": 512,
    "reader.batch_size": 8192,
    **_SHUFFLED,
}

_FLUX_YAML: Final = _yaml("flux", "pytorch", "pytorch")

_DLRM_PARQUET: Final = {
    "dataset.format": "parquet",
    "dataset.num_samples_per_file": 4_718_592,
    "dataset.record_length_bytes": 761,
    "dataset.compression": "none",
    "dataset.parquet.row_group_size": 6144,
    "dataset.parquet.read_mode": "row_group",
    "reader.batch_size": 16_384,
    "reader.file_shuffle": "seed",
}

_FLUX_PARQUET: Final = {
    "dataset.format": "parquet",
    "dataset.compression": "none",
    "dataset.num_samples_per_file": 288,
    "dataset.record_length": 2_164_832,  # the upstream spelling, as published
    "dataset.parquet.columns": [
        {"name": name, "dtype": "float32", "size": size}
        for name, size in (
            ("t5_encodings", 524_328),
            ("clip_encodings", 409),
            ("mean", 8232),
            ("logvar", 8232),
            ("timestamp", 7),
        )
    ],
    "reader.file_shuffle": "seed",
    "train.epochs": 1,
    "metric.au": 0.90,
}

_FLUX_JPEG: Final = {
    "dataset.format": "jpeg",
    "dataset.num_samples_per_file": 1,
    "dataset.record_length_bytes": 307_200,
    "dataset.record_length_bytes_stdev": 102_400,
    "reader.batch_size": 8,
    **_SHUFFLED,
    "train.epochs": 5,
    "metric.au": 0.80,
}

#: Per ``(model, accelerator)``: the keys of the published workload YAML that a run may not
#: change, with their values (see the comment above for the sources). Read-only.
OFFICIAL_WORKLOAD_VALUES: Final[Mapping[tuple[str, str], Mapping[str, object]]] = MappingProxyType(
    {
        key: MappingProxyType(values)
        for key, values in {
            ("unet3d", "h100"): {**_UNET3D_YAML, "train.computation_time": 0.323},
            ("unet3d", "a100"): {**_UNET3D_YAML, "train.computation_time": 0.636},
            ("unet3d", "b200"): {**_UNET3D_YAML, "train.computation_time": 0.162},
            ("resnet50", "h100"): {**_RESNET50_YAML, "train.computation_time": 0.224},
            ("resnet50", "a100"): {
                **_RESNET50_YAML,
                "reader.dont_use_mmap": True,
                "train.computation_time": 0.435,
            },
            ("cosmoflow", "h100"): {**_COSMOFLOW_YAML, "train.computation_time": 0.00350},
            ("cosmoflow", "a100"): {**_COSMOFLOW_YAML, "train.computation_time": 0.00551},
            ("retinanet", "h100"): {
                **_RETINANET_YAML,
                "dataset.record_length_bytes": 153_600,
                "dataset.record_length_bytes_stdev": 51_200,
                "reader.batch_size": 16,
                "train.epochs": 5,
                "train.computation_time": 0.180,
            },
            ("retinanet", "a100"): {
                **_RETINANET_YAML,
                "dataset.record_length_bytes": 153_600,
                "dataset.record_length_bytes_stdev": 51_200,
                "reader.batch_size": 16,
                "train.epochs": 5,
                "train.computation_time": 0.210,
            },
            ("retinanet", "b200"): {
                **_RETINANET_YAML,
                **_RETINANET_V3_FILES,
                "reader.batch_size": 24,
                "train.computation_time": 0.04755,
            },
            ("retinanet", "mi355"): {
                **_RETINANET_YAML,
                **_RETINANET_V3_FILES,
                "reader.batch_size": 32,
                "train.computation_time": 0.0634,
            },
            ("dlrm", "h100"): {**_DLRM_YAML, **_DLRM_NPZ, "train.computation_time": 0.005},
            ("dlrm", "a100"): {**_DLRM_YAML, **_DLRM_NPZ, "train.computation_time": 0.007},
            ("dlrm", "b200"): {**_DLRM_YAML, **_DLRM_PARQUET, "train.computation_time": 0.000375},
            ("dlrm", "mi355"): {**_DLRM_YAML, **_DLRM_PARQUET, "train.computation_time": 0.0005625},
            ("flux", "h100"): {**_FLUX_YAML, **_FLUX_JPEG, "train.computation_time": 0.850},
            ("flux", "a100"): {**_FLUX_YAML, **_FLUX_JPEG, "train.computation_time": 1.100},
            ("flux", "b200"): {
                **_FLUX_YAML,
                **_FLUX_PARQUET,
                "reader.batch_size": 48,
                "train.computation_time": 1.35,
            },
            ("flux", "mi355"): {
                **_FLUX_YAML,
                **_FLUX_PARQUET,
                "reader.batch_size": 72,
                "train.computation_time": 2.025,
            },
        }.items()
    }
)
