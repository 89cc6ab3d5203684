"""The DLIO configuration keys a run may set with ``--param``, each with the kind and range of
value DLIO can run, per engine.

DLIO reads its workload config with a fixed list of keys and silently ignores any other, so a
misspelt key (``read_threads`` for ``reader.read_threads``) is a run of the unchanged workload;
and it passes values on unchecked, so ``reader.read_threads=[`` ends in a traceback deep in a
data loader. :func:`parse_param` and :func:`check_param` refuse both before anything runs,
with one line naming the key and the value.

The keys are those ``LoadConfig`` reads in dlio-benchmark 2.0.0 (engine ``dlio``) and in the
MLPerf Storage fork (branch ``mlperf_storage_v2.0``, engine ``mlperf-dlio``), plus the keys of
the published workload files and of this package's DLIO extensions (``dataset.parquet.*``).
The ranges are what DLIO's code accepts (a negative thread count fails in PyTorch's
DataLoader; -1 runs only as tf.data's AUTOTUNE, :func:`check_read_threads`); whether the
rules allow a change is :mod:`storage_workloads.rules`' question.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import yaml

from storage_workloads.dlio.config import ENGINE_NAMES, UPSTREAM_SPELLINGS, with_spellings

__all__ = [
    "DLIO_KEYS",
    "SECTIONS",
    "DlioKey",
    "check_param",
    "check_read_threads",
    "checked_params",
    "parse_param",
]

_BOTH: Final = frozenset({"dlio", "mlperf-dlio"})
_UPSTREAM: Final = frozenset({"dlio"})
_FORK: Final = frozenset({"mlperf-dlio"})


@dataclass(frozen=True)
class DlioKey:
    """One DLIO config key: the kind of its value (``int``, ``number``, ``bool``, ``text`` or
    ``choice``), the least value (numbers), the choices, and the engines that read it."""

    kind: str
    minimum: float | None = None
    choices: tuple[object, ...] = ()
    engines: frozenset[str] = _BOTH
    #: Why a run does not take this key from ``--param`` (``None``: it does).
    not_a_param: str | None = None
    #: The range in words, where the least value alone would mislead.
    described: str | None = None

    def describe(self) -> str:
        if self.described:
            return self.described
        if self.kind == "choice":
            return "one of " + ", ".join(str(c) for c in self.choices)
        if self.kind == "int":
            return "an integer" + (f" >= {self.minimum:g}" if self.minimum is not None else "")
        if self.kind == "number":
            return "a number" + (f" >= {self.minimum:g}" if self.minimum is not None else "")
        return {"bool": "true or false", "text": "a non-empty string"}[self.kind]

    def accepts(self, value: object) -> bool:
        if self.kind == "choice":
            return not isinstance(value, bool) and value in self.choices
        if self.kind == "bool":
            return isinstance(value, bool)
        if self.kind == "text":
            return isinstance(value, str) and bool(value.strip())
        integral = isinstance(value, numbers.Integral)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        if self.kind == "int" and not integral:
            return False
        if not math.isfinite(float(value)):
            return False
        return self.minimum is None or value >= self.minimum


def _int(minimum: int | None = None, engines: frozenset[str] = _BOTH) -> DlioKey:
    return DlioKey("int", minimum, engines=engines)


def _number(minimum: float | None = 0, engines: frozenset[str] = _BOTH) -> DlioKey:
    return DlioKey("number", minimum, engines=engines)


def _choice(*choices: object, engines: frozenset[str] = _BOTH) -> DlioKey:
    return DlioKey("choice", choices=choices, engines=engines)


_BOOL: Final = DlioKey("bool")
_TEXT: Final = DlioKey("text")
_SHUFFLE: Final = _choice("off", "seed", "random")
_DATATYPES: Final = ("int8", "uint8", "fp16", "bf16", "fp32", "fp64")
#: DLIO's FormatType, and the parquet of the DLIO extensions.
_FORMATS: Final = (
    "tfrecord",
    "hdf5",
    "csv",
    "npz",
    "npy",
    "hdf5_opt",
    "jpeg",
    "png",
    "indexed_binary",
    "mmap_indexed_binary",
    "synthetic",
    "parquet",
)
_SET_BY_COMMAND: Final = "is set by the command (datagen generates the data, run trains)"
#: ``reader.read_threads`` that DLIO hands to tf.data as ``AUTOTUNE``; see check_read_threads.
AUTOTUNE_READ_THREADS: Final = -1

#: Every key, dotted. DLIO's enums give the choices (FormatType plus the extensions' parquet).
DLIO_KEYS: Final[Mapping[str, DlioKey]] = {
    "framework": _choice("pytorch", "tensorflow"),
    "model.name": _TEXT,
    "model.type": _TEXT,
    "model.model_size": _int(0),  # in the unet3d workload files
    "model.model_size_bytes": _int(0, _FORK),
    "model.num_layers": _int(0, _FORK),
    "model.model_datatype": _choice(*_DATATYPES, engines=_FORK),
    "model.optimizer_datatype": _choice(*_DATATYPES, engines=_FORK),
    "model.parallelism.tensor": _int(1, _FORK),
    "model.parallelism.pipeline": _int(1, _FORK),
    "model.parallelism.data": _int(1, _FORK),
    "model.parallelism.zero_stage": _choice(0, 1, 2, 3, engines=_FORK),
    "model.transformer.vocab_size": _int(1, _FORK),
    "model.transformer.hidden_size": _int(1, _FORK),
    "model.transformer.ffn_hidden_size": _int(1, _FORK),
    "model.transformer.num_attention_heads": _int(1, _FORK),
    "model.transformer.num_kv_heads": _int(1, _FORK),
    "workflow.generate_data": DlioKey("bool", not_a_param=_SET_BY_COMMAND),
    "workflow.train": DlioKey("bool", not_a_param=_SET_BY_COMMAND),
    "workflow.checkpoint": _BOOL,
    "workflow.evaluation": _BOOL,
    "workflow.profiling": _BOOL,
    "dataset.data_folder": DlioKey("text", not_a_param="is set by --data-dir"),
    "dataset.format": _choice(*_FORMATS),
    "dataset.num_files_train": _int(1),
    "dataset.num_files_eval": _int(0),
    "dataset.num_samples_per_file": _int(1),
    "dataset.num_subfolders_train": _int(0),
    "dataset.num_subfolders_eval": _int(0),
    "dataset.record_length": _number(1, _UPSTREAM),
    "dataset.record_length_stdev": _number(0, _UPSTREAM),
    "dataset.record_length_resize": _number(0, _UPSTREAM),
    # dlio-benchmark 2.0.0's config carries both spellings; a run sets both (with_twins)
    "dataset.record_length_bytes": _number(1),
    "dataset.record_length_bytes_stdev": _number(0),
    "dataset.record_length_bytes_resize": _number(0),
    "dataset.compression": _choice("none", "gzip", "lzf", "bz2", "zip", "xz"),
    "dataset.compression_level": _int(0),
    "dataset.enable_chunking": _BOOL,
    "dataset.chunk_size": _int(1),
    "dataset.generation_buffer_size": _int(1),
    "dataset.file_prefix": _TEXT,
    "dataset.keep_files": _BOOL,
    "dataset.parquet.row_group_size": _int(1),
    "dataset.parquet.read_mode": _choice("row_group", "file"),
    "reader.data_loader": _choice("pytorch", "tensorflow", "dali", "native_dali", "synthetic"),
    "reader.batch_size": _int(1),
    "reader.batch_size_eval": _int(1),
    "reader.read_threads": DlioKey(
        "int",
        AUTOTUNE_READ_THREADS,
        described="an integer >= 0, or -1 (tf.data's AUTOTUNE) with the tensorflow data loader "
        "on tfrecord files",
    ),
    "reader.computation_threads": _int(1),
    "reader.prefetch_size": _int(0),
    "reader.transfer_size": _int(1),
    "reader.odirect": DlioKey("bool", engines=_FORK),
    "reader.dont_use_mmap": _BOOL,
    "reader.file_shuffle": _SHUFFLE,
    "reader.sample_shuffle": _SHUFFLE,
    "reader.shuffle_size": _int(1),
    "reader.read_type": _choice("memory", "on_demand"),
    "reader.file_access": _choice("multi", "shared", "collective", "mpio", "posix"),
    "reader.preprocess_time": _number(0),
    "reader.preprocess_time_stdev": _number(0),
    "reader.pin_memory": DlioKey("bool", engines=_FORK),
    "reader.multiprocessing_context": _choice("fork", "spawn", "forkserver"),
    "reader.reader_classname": _TEXT,
    "reader.data_loader_classname": _TEXT,
    "reader.data_loader_sampler": _choice("iterative", "index"),
    "train.epochs": _int(1),
    "train.computation_time": _number(0),
    "train.computation_time_stdev": _number(0),
    "train.total_training_steps": _int(-1),
    "train.seed": _int(),
    "train.seed_change_epoch": _BOOL,
    "evaluation.eval_time": _number(0),
    "evaluation.eval_time_stdev": _number(0),
    "evaluation.eval_after_epoch": _int(0),
    "evaluation.epochs_between_evals": _int(1),
    "checkpoint.checkpoint_folder": _TEXT,
    "checkpoint.checkpoint_after_epoch": _int(0),
    "checkpoint.epochs_between_checkpoints": _int(1),
    "checkpoint.steps_between_checkpoints": _int(),
    "checkpoint.type": _choice("rank_zero", "all_ranks"),
    "checkpoint.checkpoint_mechanism_classname": _TEXT,
    "checkpoint.model_size": _int(0, _UPSTREAM),
    "checkpoint.fsync": DlioKey("bool", engines=_FORK),
    "checkpoint.time_between_checkpoints": _number(0, _FORK),
    "checkpoint.num_checkpoints_write": _int(0, _FORK),
    "checkpoint.num_checkpoints_read": _int(0, _FORK),
    "checkpoint.mode": _choice("default", "subset", engines=_FORK),
    "checkpoint.rank_sync": DlioKey("bool", engines=_FORK),
    "checkpoint.randomize_tensor": DlioKey("bool", engines=_FORK),
    "output.folder": DlioKey(
        "text", not_a_param="is the run directory (--run-dir or --results-dir)"
    ),
    "output.log_file": _TEXT,
    "profiling.profiler": _choice("none", "iostat", "darshan", "tensorboard"),
    "metric.au": _number(0),
    "storage.storage_type": _choice("local_fs", "parallel_fs", "s3"),
    "storage.storage_root": _TEXT,
    "storage.storage_options.prefetch_window": _int(0),
}

#: Every section (a key whose value is a mapping of keys), dotted.
SECTIONS: Final = frozenset(
    ".".join(key.split(".")[:i]) for key in DLIO_KEYS for i in range(1, key.count(".") + 1)
)


def _unknown(key: str) -> str:
    leaf = key.rsplit(".", 1)[-1]
    near = sorted(k for k in DLIO_KEYS if k.rsplit(".", 1)[-1] == leaf)
    if near:
        return f"unknown DLIO key {key!r}; did you mean {' or '.join(near)}?"
    section = key.rsplit(".", 1)[0] if "." in key else None
    if section in SECTIONS:
        keys = sorted(k.rsplit(".", 1)[-1] for k in DLIO_KEYS if k.startswith(f"{section}."))
        return f"unknown DLIO key {key!r}; the keys of {section} are: {', '.join(keys)}"
    return (
        f"unknown DLIO key {key!r} (DLIO would ignore it); keys are dotted, in the sections "
        + ", ".join(sorted(s for s in SECTIONS if "." not in s))
    )


def check_param(key: object, value: object, *, engine: str) -> None:
    """Raise ``ValueError`` (one line naming ``--param KEY`` and the value) unless ``engine``'s
    DLIO reads ``key`` and can run ``value``."""
    if not isinstance(key, str) or not key or any(not part for part in key.split(".")):
        raise ValueError(f"--param takes a dotted DLIO key like reader.read_threads, got {key!r}")
    if key in SECTIONS:
        example = next(
            k for k, spec in DLIO_KEYS.items() if k.startswith(f"{key}.") and not spec.not_a_param
        )
        raise ValueError(
            f"--param {key}={value!r}: {key} is a section of the DLIO config, not a value; "
            f"set a key in it (--param {example}=...)"
        )
    spec = DLIO_KEYS.get(key)
    if spec is None:
        raise ValueError(f"--param {key}: {_unknown(key)}")
    if spec.not_a_param:
        raise ValueError(f"--param {key}: {key} {spec.not_a_param}")
    if engine not in spec.engines:
        official = {v: k for k, v in UPSTREAM_SPELLINGS.items()}.get(key)
        hint = f"; it reads {official}" if official else ""
        raise ValueError(
            f"--param {key}: {ENGINE_NAMES[engine]} (--engine {engine}) does not read {key}, "
            f"so it would have no effect{hint}"
        )
    if not spec.accepts(value):
        raise ValueError(f"--param {key}={value!r}: {key} must be {spec.describe()}")


def parse_param(text: str, *, engine: str) -> tuple[str, Any]:
    """``"reader.read_threads=8"`` as ``("reader.read_threads", 8)``: the value read as YAML
    (a text key takes the text as it is), then :func:`check_param`. Raises ``ValueError``."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ValueError(f"--param takes KEY=VALUE (a dotted DLIO key), got {text!r}")
    spec = DLIO_KEYS.get(key)
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        if spec is None or spec.kind != "text":
            problem = getattr(exc, "problem", None) or "not a YAML value"
            check_param(key, raw, engine=engine)  # an unknown key is the first thing to say
            raise ValueError(
                f"--param {key}={raw}: the value does not parse ({problem}); {key} must be "
                f"{spec.describe() if spec else 'a value'}"
            ) from None
        value = raw
    if spec is not None and spec.kind == "text" and isinstance(value, int | float | bool):
        value = raw.strip()  # a name or path that happens to read as a number
    if value is None:
        raise ValueError(f"--param {key}= has no value")
    check_param(key, value, engine=engine)
    return key, value


def checked_params(params: Mapping[str, Any] | None, engine: str) -> dict[str, Any]:
    """``params`` (dotted DLIO keys) checked with :func:`check_param`, as the run of ``engine``
    sets them (:func:`storage_workloads.dlio.config.with_spellings`). Raises ``ValueError``."""
    if params is not None and not isinstance(params, Mapping):
        raise ValueError(f"params must map dotted DLIO keys to values, got {params!r}")
    for key, value in (params or {}).items():
        check_param(key, value, engine=engine)
    return with_spellings(params or {}, engine)


def check_read_threads(config: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` for a training config whose ``reader.read_threads`` is -1 where
    DLIO cannot run it.

    The rules give the thread count no range, so the checker calls -1 CLOSED, as mlpstorage
    does. DLIO (2.0.0 and the MLPerf fork alike) runs it in one place: the tensorflow data
    loader on tfrecord files passes it to ``TFRecordDataset`` as ``num_parallel_reads``, where
    -1 is tf.data's ``AUTOTUNE``. Every other loader hands it to PyTorch's ``DataLoader`` as
    the worker count, or to tf.data as the size of a thread pool and of the reader list, none
    of which can be negative.
    """
    reader = config.get("reader") if isinstance(config.get("reader"), Mapping) else {}
    workflow = config.get("workflow") if isinstance(config.get("workflow"), Mapping) else {}
    if reader.get("read_threads") != AUTOTUNE_READ_THREADS or not workflow.get("train", True):
        return
    dataset = config.get("dataset") if isinstance(config.get("dataset"), Mapping) else {}
    loader, fmt = reader.get("data_loader"), dataset.get("format")
    if (loader, fmt) != ("tensorflow", "tfrecord"):
        raise ValueError(
            f"--param reader.read_threads=-1: DLIO runs -1 (tf.data's AUTOTUNE) only with the "
            f"tensorflow data loader on tfrecord files (resnet50, cosmoflow); this run's "
            f"{loader} loader on {fmt} files needs a count >= 0 (the rules checker calls -1 "
            "CLOSED, as mlpstorage does, since the rules give the count no range)"
        )
