"""Saving and loading a trainer: `save_checkpoint`, `load_checkpoint`, `config_differences`.

A save writes everything into `<dir>/.tmp-step-<N>`, fsyncs every file and directory, renames
it to `step-<N>`, and only then writes `COMPLETE`, so a process killed at any point of it
leaves the previous checkpoint as the newest. DCP writes one file per rank and loads in place,
so the same format holds the ShardedTensors of a sharded model. With a process group every rank
calls `save_checkpoint` and `load_checkpoint` (DCP is collective), each rank writes its own RNG
file and rank 0 writes the rest; without one, DCP runs in its single-process mode. Tested: one
process without a process group, and a one-rank gloo group with sharded tables.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import time
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torchrec.optim.keyed import KeyedOptimizer

from hstu_model.checkpoint.directory import CheckpointInfo, prune, read_checkpoint
from hstu_model.checkpoint.files import (
    _TMP_PREFIX,
    COMPLETE,
    CONFIG,
    FORMAT_VERSION,
    MANIFEST,
    META,
    RNG,
    TENSORS,
    CheckpointError,
    _fsync_path,
    _fsync_tree,
    _manifest,
    _read_json,
    _remove,
    _sha256,
    _write_json,
)
from hstu_model.checkpoint.rng import rng_state, set_rng_state
from hstu_model.checkpoint.state import (
    CheckpointableTrainer,
    _load_optimizer,
    _local_tensors,
    _named_optimizers,
    _optimizer_state,
    _param_names,
    _trainer_state,
)


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _rank_and_world() -> tuple[int, int]:
    if _distributed():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _barrier() -> None:
    if _distributed():
        dist.barrier()


@contextlib.contextmanager
def _dcp_quiet() -> Iterator[None]:
    # Without a process group DCP warns on every call that it assumes a single process.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def save_checkpoint(
    directory: str | os.PathLike[str],
    trainer: CheckpointableTrainer,
    *,
    extra: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
    keep: int | None = None,
) -> Path:
    """Save `trainer` as `<directory>/step-<trainer.step>` (atomic, see the module docstring).

    `extra`: JSON data saved alongside (data position, tracker and metric state).
    `config`: the effective config as JSON data (default: `trainer.config.to_dict()`).
    `keep`: prune to the newest `keep` complete checkpoints afterwards (None keeps all).
    With a process group every rank must call it. Returns the checkpoint's path.
    """
    directory = Path(directory)
    step = int(trainer.step)
    rank, world = _rank_and_world()
    final = directory / f"step-{step}"
    tmp = directory / f"{_TMP_PREFIX}step-{step}"
    extra_text = json.dumps(dict(extra or {}), sort_keys=True)  # fail before writing anything
    if config is None:
        config = trainer.config.to_dict()
    config = json.loads(json.dumps(config, default=str))
    tensors, optimizers = _trainer_state(trainer)
    try:
        if rank == 0:
            directory.mkdir(parents=True, exist_ok=True)
            if tmp.exists():
                shutil.rmtree(tmp)
            (tmp / RNG).mkdir(parents=True)
        _barrier()
        writer = FileSystemWriter(tmp / TENSORS, single_file_per_rank=True, sync_files=True)
        with _dcp_quiet():
            dcp.save(tensors, storage_writer=writer, no_dist=not _distributed())
        _write_json(tmp / RNG / f"rank-{rank}.json", rng_state())
    except (Exception, dcp.api.CheckpointException) as error:  # the latter: a BaseException
        raise _write_error(error, tmp, tensors) from error
    _barrier()
    if rank == 0:
        meta = {
            "format": FORMAT_VERSION,
            "step": step,
            "world_size": world,
            "optimizers": optimizers,
            "extra": json.loads(extra_text),
            "saved_unix": time.time(),
            "torch": torch.__version__,
        }
        try:
            _write_json(tmp / META, meta)
            _write_json(tmp / CONFIG, config)
            _write_json(tmp / MANIFEST, _manifest(tmp))  # after every file it lists
            manifest_sha256 = _sha256(tmp / MANIFEST)
            _fsync_tree(tmp)
        except (Exception, dcp.api.CheckpointException) as error:
            raise _write_error(error, tmp, tensors) from error
        if final.exists():  # an incomplete save of this step, or a replaced one
            _remove(final)
        os.rename(tmp, final)
        _fsync_path(directory)
        _write_json(final / COMPLETE, {"step": step, "manifest_sha256": manifest_sha256})
        _fsync_path(final)
        if keep is not None:
            prune(directory, keep)
    _barrier()
    return final


def _write_error(error: BaseException, tmp: Path, tensors: Mapping[str, Any]) -> BaseException:
    """`error` of a save into `tmp`, as a CheckpointError that says when the disk is full.

    torch's writers report a full disk in their own words (e.g. "unexpected pos" from the
    zip writer), so besides an ENOSPC anywhere in the error's chain, a save that failed with
    its file system (nearly) full counts as a full disk: less free than a hundredth of it or
    than 1 MiB (or than the tensors to write). Then the partial save is removed to give the
    space back.
    """
    try:
        usage = shutil.disk_usage(tmp.parent)
    except OSError:
        usage = None
    chain, cause = [], error
    while cause is not None and len(chain) < 10:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    enospc = any(isinstance(e, OSError) and e.errno == errno.ENOSPC for e in chain)
    enospc = enospc or "no space left" in str(error).lower()
    needed = sum(
        t.numel() * t.element_size()
        for value in tensors.values()
        for _, t in _local_tensors(value)
        if isinstance(t, torch.Tensor)
    )
    nearly_full = usage is not None and usage.free < max(needed, usage.total // 100, 2**20)
    if not (enospc or nearly_full):
        return error  # the partial save stays for `prune`, as after a kill
    shutil.rmtree(tmp, ignore_errors=True)
    free = "unknown" if usage is None else f"{usage.free:,} bytes"
    last_line = str(error).strip().splitlines()[-1] if str(error).strip() else type(error)
    return CheckpointError(
        f"writing checkpoint {tmp}: no space left on its file system ({free} free when the "
        f"save failed, {needed:,} bytes of tensors to write); the partial save was removed "
        f"({last_line})"
    )


def config_differences(saved: Mapping[str, Any], live: Mapping[str, Any]) -> list[str]:
    """`section.field: <saved> then, <live> now` for every field of `live`'s sections (a
    config's `to_dict()`) that `saved` (its JSON form, as a checkpoint keeps it) holds
    otherwise."""
    live = json.loads(json.dumps(live, default=str))
    out = []
    for section, values in live.items():
        if not isinstance(values, Mapping):
            continue
        stored = saved.get(section, {})
        if not isinstance(stored, Mapping):
            stored = {}
        for key in sorted(set(values) | set(stored)):
            if values.get(key) != stored.get(key):
                out.append(f"{section}.{key}: {stored.get(key)!r} then, {values.get(key)!r} now")
    return out


def load_checkpoint(
    checkpoint: CheckpointInfo | str | os.PathLike[str],
    trainer: CheckpointableTrainer,
    *,
    restore_rng: bool = True,
    check_config: bool = True,
) -> CheckpointInfo:
    """Restore `trainer` (weights, optimizer states, step) and this rank's RNG states from a
    checkpoint; returns it (its `extra` is the caller's state). Call it after everything that
    draws random numbers at start-up (model init), so that the run continues the saved streams.

    `check_config`: refuse (`CheckpointError`) when the saved config's sections differ from
    `trainer.config`. With a process group every rank must call it.
    """
    info = checkpoint if isinstance(checkpoint, CheckpointInfo) else read_checkpoint(checkpoint)
    rank, world = _rank_and_world()
    if check_config and info.config is not None:
        differences = config_differences(info.config, trainer.config.to_dict())
        if differences:
            raise CheckpointError(
                f"{info.path} was saved with another config: " + "; ".join(differences[:5])
            )
    if restore_rng and info.world_size != world:
        raise CheckpointError(
            f"{info.path} holds the RNG states of {info.world_size} rank(s), this run has "
            f"{world}; load it with restore_rng=False"
        )
    reader = FileSystemReader(info.path / TENSORS)
    stored = reader.read_metadata().state_dict_metadata
    model_state = trainer.model.state_dict()
    template: dict[str, Any] = {f"model/{k}": v for k, v in model_state.items()}
    saved_model = {k for k in stored if k.startswith("model/")}
    if saved_model != set(template):
        missing = sorted(set(template) - saved_model)[:3]
        surplus = sorted(saved_model - set(template))[:3]
        raise CheckpointError(
            f"{info.path}: the model's tensors differ (missing {missing}, unexpected {surplus})"
        )
    optimizers = _named_optimizers(trainer)
    saved_optimizers = info.meta["optimizers"]
    if sorted(saved_optimizers) != sorted(name for name, _ in optimizers):
        raise CheckpointError(
            f"{info.path} holds optimizers {sorted(saved_optimizers)}, the trainer has "
            f"{[name for name, _ in optimizers]}"
        )
    for name, optimizer in optimizers:
        prefix = f"optimizer/{name}/"
        if isinstance(optimizer, KeyedOptimizer):
            # torchrec's keyed optimizers hold their (possibly sharded) state from the start
            # and load it in place.
            part, _ = _optimizer_state(name, optimizer, {})
            template |= part
        else:  # lazily created state (Adam): plain tensors shaped as saved
            for key, md in stored.items():
                if key.startswith(prefix) and isinstance(md, TensorStorageMetadata):
                    template[key] = torch.empty(tuple(md.size), dtype=md.properties.dtype)
    with _dcp_quiet():
        dcp.load(template, storage_reader=reader, no_dist=not _distributed())
    trainer.model.load_state_dict({k: template[f"model/{k}"] for k in model_state}, strict=True)
    names = _param_names(trainer.model)
    for name, optimizer in optimizers:
        _load_optimizer(name, optimizer, saved_optimizers[name], template, names)
    trainer.step = info.step
    if restore_rng:
        set_rng_state(_read_json(info.path / RNG / f"rank-{rank}.json"))
    _barrier()
    return info
