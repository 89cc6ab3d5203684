"""MLPerf Storage training workloads as one typed source of truth.

- :data:`WORKLOADS` / :func:`workload`: the DLIO parameters of each (model, accelerator);
  :data:`DATAGENS` / :func:`datagen`: the datasets they read.
- :data:`CHECKPOINT_WORKLOADS` / :func:`checkpoint_workload`: the llama3 checkpointing
  workloads; :func:`to_checkpoint_config` their DLIO configs.
- :func:`required_num_files` / :func:`suggested_subfolders`: dataset sizing for a system.
- :func:`check_overrides` / :func:`verdict`: which parameter changes each division allows.
- :func:`to_dlio_config` / :func:`to_datagen_config` / :func:`write_dlio_config`: DLIO
  workload YAML for either engine.
- :func:`check_path` / :func:`check_params`: the rules checker (CLOSED, OPEN or INVALID) for a
  parameters file, a run or a submission.
- :mod:`storage_workloads.dliorun`: real DLIO runs (datagen, run, results, reports);
  :mod:`storage_workloads.hosts`: the client hosts of a multi-host run and the memory read
  from them; :mod:`storage_workloads.layout`: the results layout of mlpstorage.
- :data:`OBJECT_WORKLOADS` / :func:`object_workload`: the object-storage workloads (sai3-bench
  ResNet50 and UNet3D); :data:`OBJECT_PRESETS` / :func:`object_preset`: their 1-, 4- and
  8-host configurations; :mod:`storage_workloads.s3` runs them against an S3 endpoint (boto3,
  the ``s3`` extra; several hosts: :mod:`storage_workloads.s3.multihost`) and
  :mod:`storage_workloads.objresults` holds their results format.

No torch here: the package imports with only PyYAML installed (boto3 only when a run starts).
"""

from storage_workloads.checker import CheckReport, check_params, check_path
from storage_workloads.checkpoint import (
    CHECKPOINT_MODELS,
    CHECKPOINT_WORKLOADS,
    CheckpointWorkload,
    checkpoint_workload,
    to_checkpoint_config,
)
from storage_workloads.dlio import (
    ENGINES,
    RECORD_LENGTH_KEYS,
    RECORD_RESIZE_KEYS,
    Engine,
    dump_yaml,
    to_datagen_config,
    to_dlio_config,
    write_dlio_config,
    write_yaml,
)
from storage_workloads.objects import (
    OBJECT_WORKLOADS,
    OPS,
    SIZE_DISTRIBUTIONS,
    ObjectWorkload,
    clipped_lognormal_mean,
    draw_sizes,
    draw_uniform_sizes,
    lognormal_params,
    object_workload,
    parse_mix,
)
from storage_workloads.objpresets import OBJECT_PRESETS, ObjectPreset, object_preset
from storage_workloads.rules import (
    CLOSED_PARAMETERS,
    DIVISIONS,
    ODIRECT_MODELS,
    OPEN_PARAMETERS,
    Issue,
    Level,
    Verdict,
    check_overrides,
    verdict,
)
from storage_workloads.sizing import (
    ACCELERATOR_SAMPLES_FACTOR,
    FILES_PER_SUBFOLDER,
    HOST_MEMORY_FACTOR,
    required_num_files,
    suggested_subfolders,
)
from storage_workloads.workloads import (
    ACCELERATORS,
    ASSUMED_FIELDS,
    COMPRESSIONS,
    DATA_LOADERS,
    DATAGENS,
    FORMATS,
    FRAMEWORKS,
    MODELS,
    SHUFFLES,
    WORKLOADS,
    Datagen,
    ParquetColumn,
    ParquetSchema,
    UnknownWorkloadError,
    Workload,
    datagen,
    workload,
)

__version__ = "0.1.0"

__all__ = [
    "ACCELERATORS",
    "ACCELERATOR_SAMPLES_FACTOR",
    "ASSUMED_FIELDS",
    "CHECKPOINT_MODELS",
    "CHECKPOINT_WORKLOADS",
    "CLOSED_PARAMETERS",
    "COMPRESSIONS",
    "DATAGENS",
    "DATA_LOADERS",
    "DIVISIONS",
    "ENGINES",
    "FILES_PER_SUBFOLDER",
    "FORMATS",
    "FRAMEWORKS",
    "HOST_MEMORY_FACTOR",
    "MODELS",
    "OBJECT_PRESETS",
    "OBJECT_WORKLOADS",
    "ODIRECT_MODELS",
    "OPEN_PARAMETERS",
    "OPS",
    "RECORD_LENGTH_KEYS",
    "RECORD_RESIZE_KEYS",
    "SHUFFLES",
    "SIZE_DISTRIBUTIONS",
    "WORKLOADS",
    "CheckReport",
    "CheckpointWorkload",
    "Datagen",
    "Engine",
    "Issue",
    "Level",
    "ObjectPreset",
    "ObjectWorkload",
    "ParquetColumn",
    "ParquetSchema",
    "UnknownWorkloadError",
    "Verdict",
    "Workload",
    "__version__",
    "check_overrides",
    "check_params",
    "check_path",
    "checkpoint_workload",
    "clipped_lognormal_mean",
    "datagen",
    "draw_sizes",
    "draw_uniform_sizes",
    "dump_yaml",
    "lognormal_params",
    "object_preset",
    "object_workload",
    "parse_mix",
    "required_num_files",
    "suggested_subfolders",
    "to_checkpoint_config",
    "to_datagen_config",
    "to_dlio_config",
    "verdict",
    "workload",
    "write_dlio_config",
    "write_yaml",
]
