"""storage-workloads' extensions of the DLIO engine (dlio-benchmark 2.0.0), loaded by DLIO.

This package runs inside DLIO's own environment: ``storage_workloads.dlio.launch`` puts the
folder that holds it on DLIO's ``PYTHONPATH`` and starts DLIO through :mod:`.launch`. It imports
nothing from ``storage_workloads``, only itself as the top-level package ``sw_dlio_ext``, so it
works without the workspace.

What DLIO 2.0.0 offers, and what is used:

- ``reader.reader_classname``: a :class:`FormatReader` subclass DLIO imports and uses for
  every read. :data:`PARQUET_READER` (:mod:`.parquet`) reads parquet with pyarrow.
- ``checkpoint.checkpoint_mechanism_classname``: a :class:`BaseCheckpointing` subclass.
  :data:`CHECKPOINT_MECHANISM` (:mod:`.checkpoint`) writes each rank's share of an LLM
  checkpoint with fsync and reads it back.
- Nothing for data generation: DLIO picks its generator from a closed ``FormatType`` enum in
  ``GeneratorFactory``. :mod:`.launch` therefore adds ``parquet`` to the enum and routes the
  parquet, tfrecord (no DALI ``tfrecord2idx``) and jpeg (files of the declared size)
  generators to :mod:`.parquet`, :mod:`.tfrecord` and :mod:`.jpeg` before it starts DLIO's
  own ``main``.
"""

from __future__ import annotations

#: ``python -m LAUNCHER ...`` starts DLIO with the extensions installed.
LAUNCHER = "sw_dlio_ext.launch"
#: ``reader.reader_classname`` of parquet datasets.
PARQUET_READER = "sw_dlio_ext.parquet.ParquetReader"
#: ``checkpoint.checkpoint_mechanism_classname`` of the checkpointing workloads.
CHECKPOINT_MECHANISM = "sw_dlio_ext.checkpoint.ShardCheckpointing"
#: Formats whose DLIO generator the launcher replaces.
GENERATED_FORMATS = ("parquet", "tfrecord", "jpeg")
#: Attribute of DLIO's ConfigArguments that holds the workload config as DLIO received it.
RAW_CONFIG_ATTRIBUTE = "sw_workload_config"
#: File in DLIO's output folder where the checkpoint mechanism writes its timings.
CHECKPOINT_TIMINGS = "checkpoint_timings.json"
