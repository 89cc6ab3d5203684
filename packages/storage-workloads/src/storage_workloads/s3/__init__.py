"""Run an :class:`~storage_workloads.ObjectWorkload` against an S3 endpoint through boto3.

- :func:`prepare`: create the bucket if it is missing and upload the dataset (or the objects
  that are not there yet, with ``skip_existing``).
- :func:`get`: ``clients`` processes, each with ``concurrency`` threads, run the workload's mix
  (GETs of uniformly random objects of the dataset by default; PUT, LIST, STAT and DELETE by
  weight) for ``duration_s`` seconds or ``ops`` operations in all, after an uncounted warm-up
  if the workload has one.
- :func:`run`: ``prepare``, ``get`` or ``prepare`` then ``get``, and write the results files.

:func:`prepare` returns a :class:`PrepareSummary`, :func:`get` a :class:`GetSummary` and
:func:`run` an :class:`~storage_workloads.objresults.ObjectResults`, typed; their ``as_dict()``
is what ``results.json`` holds.

boto3 is an optional dependency (the ``s3`` extra); it is imported only when a run starts.
Credentials come from boto3's usual chain: ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``
(and ``AWS_SESSION_TOKEN``), ``AWS_PROFILE`` and the shared config files. Every failure that
stops a run is raised as :class:`ObjectStoreError` with a message that names the endpoint,
bucket or key at fault.
"""

from storage_workloads.s3.phases import (
    COMMANDS,
    Command,
    GetSummary,
    ObjectSizes,
    PrepareSummary,
    WarmupSummary,
    get,
    prepare,
    run,
)
from storage_workloads.s3.target import ADDRESSING_STYLES, ObjectStoreError, S3Target
from storage_workloads.s3.worker import client_main

__all__ = [
    "ADDRESSING_STYLES",
    "COMMANDS",
    "Command",
    "GetSummary",
    "ObjectSizes",
    "ObjectStoreError",
    "PrepareSummary",
    "S3Target",
    "WarmupSummary",
    "client_main",
    "get",
    "prepare",
    "run",
]
