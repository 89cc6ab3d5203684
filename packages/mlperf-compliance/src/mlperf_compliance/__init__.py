"""MLPerf logging and compliance checks for DLRMv4 (MLPerf Training ruleset 6.1.0).

- :class:`MLPerfLogger` writes ``:::MLLOG`` records through ``mlperf_logging.mllog``.
- :func:`dlrmv4_run_start_keys` lists the hyperparameter records the DLRMv4 rules require.
- :class:`RunTracker` drives a logger from ``init_start`` to ``run_stop`` (order, convergence,
  abort on exception or signal, resume); :func:`eval_schedule` lists the eval positions.
- :func:`check_log` runs the official compliance checker on a log; :func:`read_log` reads one.

No torch here: the package imports with only mlperf-logging installed.
"""

from mlperf_compliance.checker import DEV_RULESET, CheckResult, check_log, dev_rules_dir
from mlperf_compliance.dlrmv4 import (
    DLRMV4_EVAL_SAMPLES,
    DLRMV4_TARGET_ACCURACY,
    DLRMV4_TRAIN_SAMPLES,
    PRECISIONS,
    REFERENCE_GLOBAL_BATCH_SIZE,
    REFERENCE_LEARNING_RATE,
    DLRMv4RunConfig,
    dlrmv4_run_start_keys,
    eval_interval_samples,
    first_eval_samples,
    learning_rate_band,
)
from mlperf_compliance.logger import RUN_STATUSES, SUBMISSION_DIVISIONS, MLPerfLogger
from mlperf_compliance.records import MLLOG_PREFIX, read_log
from mlperf_compliance.tracker import (
    RUN_STATES,
    RunInterrupted,
    RunTracker,
    TrackerStateError,
    eval_schedule,
)

__version__ = "0.1.0"

__all__ = [
    "DEV_RULESET",
    "DLRMV4_EVAL_SAMPLES",
    "DLRMV4_TARGET_ACCURACY",
    "DLRMV4_TRAIN_SAMPLES",
    "MLLOG_PREFIX",
    "PRECISIONS",
    "REFERENCE_GLOBAL_BATCH_SIZE",
    "REFERENCE_LEARNING_RATE",
    "RUN_STATES",
    "RUN_STATUSES",
    "SUBMISSION_DIVISIONS",
    "CheckResult",
    "DLRMv4RunConfig",
    "MLPerfLogger",
    "RunInterrupted",
    "RunTracker",
    "TrackerStateError",
    "__version__",
    "check_log",
    "dev_rules_dir",
    "dlrmv4_run_start_keys",
    "eval_interval_samples",
    "eval_schedule",
    "first_eval_samples",
    "learning_rate_band",
    "read_log",
]
