"""MLPerf Storage training workloads as one typed source of truth.

- :data:`WORKLOADS` / :func:`workload`: the DLIO parameters of each (model, accelerator).
- :func:`required_num_files` / :func:`suggested_subfolders`: dataset sizing for a system.
- :func:`check_overrides` / :func:`verdict`: which parameter changes each division allows.
- :func:`to_dlio_config` / :func:`write_dlio_config`: DLIO workload YAML for either engine.
- :data:`OBJECT_WORKLOADS` / :func:`object_workload`: the object-storage workloads (sai3-bench
  ResNet50 and UNet3D); :mod:`storage_workloads.s3` runs them against an S3 endpoint (boto3,
  the ``s3`` extra) and :mod:`storage_workloads.objresults` holds their results format.

No torch here: the package imports with only PyYAML installed (boto3 only when a run starts).
"""

from storage_workloads.dlio import (
    ENGINES,
    RECORD_LENGTH_KEYS,
    Engine,
    to_dlio_config,
    write_dlio_config,
)
from storage_workloads.objects import (
    OBJECT_WORKLOADS,
    ObjectWorkload,
    clipped_lognormal_mean,
    draw_sizes,
    lognormal_params,
    object_workload,
)
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
    DATA_LOADERS,
    FORMATS,
    FRAMEWORKS,
    MODELS,
    WORKLOADS,
    UnknownWorkloadError,
    Workload,
    workload,
)

__version__ = "0.1.0"

__all__ = [
    "ACCELERATORS",
    "ACCELERATOR_SAMPLES_FACTOR",
    "CLOSED_PARAMETERS",
    "DATA_LOADERS",
    "DIVISIONS",
    "ENGINES",
    "FILES_PER_SUBFOLDER",
    "FORMATS",
    "FRAMEWORKS",
    "HOST_MEMORY_FACTOR",
    "MODELS",
    "OBJECT_WORKLOADS",
    "ODIRECT_MODELS",
    "OPEN_PARAMETERS",
    "RECORD_LENGTH_KEYS",
    "WORKLOADS",
    "Engine",
    "Issue",
    "Level",
    "ObjectWorkload",
    "UnknownWorkloadError",
    "Verdict",
    "Workload",
    "__version__",
    "check_overrides",
    "clipped_lognormal_mean",
    "draw_sizes",
    "lognormal_params",
    "object_workload",
    "required_num_files",
    "suggested_subfolders",
    "to_dlio_config",
    "verdict",
    "workload",
    "write_dlio_config",
]
