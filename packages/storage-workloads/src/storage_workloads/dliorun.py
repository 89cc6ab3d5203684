"""Real runs of the DLIO engine: data generation, training and checkpointing runs, their
results and reports, in one namespace.

The code lives in :mod:`storage_workloads.dlio`: :mod:`~storage_workloads.dlio.launch`
(finding and starting DLIO), :mod:`~storage_workloads.dlio.runs` (the run directory and what
every run shares), :mod:`~storage_workloads.dlio.datagen`,
:mod:`~storage_workloads.dlio.training` and :mod:`~storage_workloads.dlio.checkpointing` (the
runs), :mod:`~storage_workloads.dlio.results` (a training run's result) and
:mod:`~storage_workloads.dlio.report` (a report over many runs).
"""

from storage_workloads.dlio.checkpointing import (
    CheckpointPhase,
    CheckpointResult,
    checkpoint_config,
    plan_checkpointing,
    run_checkpointing,
)
from storage_workloads.dlio.datagen import (
    SIZE_CHECKED_FORMATS,
    DatagenResult,
    DatasetCheck,
    plan_datagen,
    run_datagen,
    verify_dataset,
)
from storage_workloads.dlio.keys import check_param, parse_param
from storage_workloads.dlio.launch import (
    CONFIG_PREFIX,
    DLIO_VENV_ENV,
    DlioError,
    apply_params,
    config_name,
    dlio_command,
    find_dlio,
    hydra_overrides,
    installed_engine,
    verify_effective_config,
)
from storage_workloads.dlio.report import (
    CHECKPOINT_REPORT_CSV_COLUMNS,
    REPORT_CSV_COLUMNS,
    CheckpointRow,
    DamagedRun,
    Report,
    SkippedRun,
    Spread,
    TrainingRow,
    aggregate_results,
    write_report,
)
from storage_workloads.dlio.results import (
    RESULTS_CSV_COLUMNS,
    DlioOutput,
    EpochFigures,
    TrainingResult,
    parse_dlio_output,
    write_results,
)
from storage_workloads.dlio.runs import RunPlan, read_hosts
from storage_workloads.dlio.training import plan_training, run_training

__all__ = [
    "CHECKPOINT_REPORT_CSV_COLUMNS",
    "CONFIG_PREFIX",
    "DLIO_VENV_ENV",
    "REPORT_CSV_COLUMNS",
    "RESULTS_CSV_COLUMNS",
    "SIZE_CHECKED_FORMATS",
    "CheckpointPhase",
    "CheckpointResult",
    "CheckpointRow",
    "DamagedRun",
    "DatagenResult",
    "DatasetCheck",
    "DlioError",
    "DlioOutput",
    "EpochFigures",
    "Report",
    "RunPlan",
    "SkippedRun",
    "Spread",
    "TrainingResult",
    "TrainingRow",
    "aggregate_results",
    "apply_params",
    "check_param",
    "checkpoint_config",
    "config_name",
    "dlio_command",
    "find_dlio",
    "hydra_overrides",
    "installed_engine",
    "parse_dlio_output",
    "parse_param",
    "plan_checkpointing",
    "plan_datagen",
    "plan_training",
    "read_hosts",
    "run_checkpointing",
    "run_datagen",
    "run_training",
    "verify_dataset",
    "verify_effective_config",
    "write_report",
    "write_results",
]
