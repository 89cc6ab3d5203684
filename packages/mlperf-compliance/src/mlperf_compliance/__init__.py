"""MLPerf logging and compliance checks for DLRMv4 (MLPerf Training ruleset 6.1.0).

- :class:`MLPerfLogger` writes ``:::MLLOG`` records through ``mlperf_logging.mllog``.
- :func:`dlrmv4_run_start_keys` lists the hyperparameter records the DLRMv4 rules require.
- :class:`RunTracker` drives a logger from ``init_start`` to ``run_stop`` (order, convergence,
  abort on exception or signal, resume); :func:`eval_schedule` lists the eval positions.
- :func:`check_log` runs the official compliance checker on a log and gives a verdict per rule;
  :func:`read_log` reads a log, :func:`scan_log` finds its malformed lines.
- :func:`score_results` scores a directory of result logs: time to train per run, the olympic
  score, and the RCP check of ``mlperf_logging.rcp_checker``.

No torch here: the package imports with only mlperf-logging installed.
"""

from mlperf_compliance.checker import (
    DEV_RULESET,
    CheckResult,
    RuleVerdict,
    check_log,
    dev_rules_dir,
)
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
from mlperf_compliance.records import (
    MLLOG_PREFIX,
    LogLine,
    LogProblem,
    LogScan,
    read_log,
    scan_log,
)
from mlperf_compliance.reference import ReferenceReport, score_reference
from mlperf_compliance.score import (
    RESULT_PATTERNS,
    OlympicRule,
    RcpVerdict,
    RunScore,
    ScoreReport,
    find_result_logs,
    olympic_mean,
    olympic_rule,
    score_results,
)
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
    "RESULT_PATTERNS",
    "RUN_STATES",
    "RUN_STATUSES",
    "SUBMISSION_DIVISIONS",
    "CheckResult",
    "DLRMv4RunConfig",
    "LogLine",
    "LogProblem",
    "LogScan",
    "MLPerfLogger",
    "OlympicRule",
    "RcpVerdict",
    "ReferenceReport",
    "RuleVerdict",
    "RunInterrupted",
    "RunScore",
    "RunTracker",
    "ScoreReport",
    "TrackerStateError",
    "__version__",
    "check_log",
    "dev_rules_dir",
    "dlrmv4_run_start_keys",
    "eval_interval_samples",
    "eval_schedule",
    "find_result_logs",
    "first_eval_samples",
    "learning_rate_band",
    "olympic_mean",
    "olympic_rule",
    "read_log",
    "scan_log",
    "score_reference",
    "score_results",
]
