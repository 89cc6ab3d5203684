"""The rules checker: is a run (or a set of run parameters) CLOSED, OPEN or INVALID?

:func:`check_path` takes one of three things:

- a **parameters file** (YAML or JSON) that declares a run (see :data:`TRAINING_KEYS` and
  :data:`CHECKPOINT_KEYS`);
- a **run directory**, as ``storage-workloads run`` writes it (``run.json``, the DLIO workload
  YAML, DLIO's ``summary.json``), or a DLIO output directory with its Hydra
  ``.hydra/config.yaml``;
- a **submission directory** whose subfolders are run directories; a submission is five runs;
- a **DLIO workload YAML** as mlpstorage ships it, or DLIO's **Hydra record** folder
  (``dlio_config/``), read as they are (:mod:`~storage_workloads.checker.files`), with what
  they do not hold (the accelerator count, the hosts' memory) given by the caller.

A run's DLIO config is compared with the workload: the config :func:`to_dlio_config` emits for
it and the published workload YAML (:data:`OFFICIAL_WORKLOAD_VALUES`); a value equal to either
is the workload's, anything else an override for :func:`storage_workloads.check_overrides`.

Every finding is an :class:`~storage_workloads.Issue` with the parameter, the expected and the
actual value and the rule's name. Nothing here raises for bad input: an unreadable or malformed
file, an unknown key, model or accelerator is an INVALID issue with a message naming the file,
the field and the value.

The rules of a training run are in :mod:`~storage_workloads.checker.training`, those of a
checkpointing run in :mod:`~storage_workloads.checker.checkpointing`, one function each;
:mod:`~storage_workloads.checker.runs` reads run and submission directories,
:mod:`~storage_workloads.checker.params` parameters files and their fields, and
:mod:`~storage_workloads.checker.official` holds the published workload values.
"""

from storage_workloads.checker.official import OFFICIAL_WORKLOAD_VALUES
from storage_workloads.checker.params import CHECKPOINT_KEYS, TRAINING_KEYS
from storage_workloads.checker.report import CheckReport, flatten
from storage_workloads.checker.runs import (
    RUN_RECORD,
    RUNS_PER_SUBMISSION,
    check_params,
    check_path,
)
from storage_workloads.checker.training import CLOSED_MODELS_BY_ACCELERATOR

__all__ = [
    "CHECKPOINT_KEYS",
    "CLOSED_MODELS_BY_ACCELERATOR",
    "OFFICIAL_WORKLOAD_VALUES",
    "RUNS_PER_SUBMISSION",
    "RUN_RECORD",
    "TRAINING_KEYS",
    "CheckReport",
    "check_params",
    "check_path",
    "flatten",
]
