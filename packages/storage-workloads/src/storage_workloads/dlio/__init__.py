"""The DLIO engine: its workload configs, its launch, runs, results and reports.

- :mod:`~storage_workloads.dlio.config`: the workload YAML of a :class:`~storage_workloads.Workload`
  for either DLIO flavour (re-exported here);
- :mod:`~storage_workloads.dlio.launch`: finding DLIO, its command line, starting it and
  checking that it ran the config that was written;
- :mod:`~storage_workloads.dlio.runs`: what every run shares: its directory, hosts, launch
  options, ``run.json`` and MLPerf files;
- :mod:`~storage_workloads.dlio.datagen`, :mod:`~storage_workloads.dlio.training` and
  :mod:`~storage_workloads.dlio.checkpointing`: the three runs;
- :mod:`~storage_workloads.dlio.results`: a training run's result from DLIO's output;
- :mod:`~storage_workloads.dlio.report`: one report over many runs.

:mod:`storage_workloads.dliorun` gathers the public names of the runs in one place.
"""

from storage_workloads.dlio.config import (
    ENGINE_NAMES,
    ENGINES,
    RECORD_LENGTH_KEYS,
    RECORD_RESIZE_KEYS,
    Engine,
    dump_yaml,
    published_data_folder,
    to_datagen_config,
    to_dlio_config,
    write_dlio_config,
    write_yaml,
)

__all__ = [
    "ENGINES",
    "ENGINE_NAMES",
    "RECORD_LENGTH_KEYS",
    "RECORD_RESIZE_KEYS",
    "Engine",
    "dump_yaml",
    "published_data_folder",
    "to_datagen_config",
    "to_dlio_config",
    "write_dlio_config",
    "write_yaml",
]
