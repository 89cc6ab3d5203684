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
import resource
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
    _clear_for_save,
    _fsync_path,
    _fsync_tree,
    _manifest,
    _read_json,
    _remove,
    _sha256,
    _write_json,
    _write_writer,
    is_ours,
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
    if rank == 0:  # before anything is written: what is in the way must be a save's own
        _clear_for_save(tmp)
        _clear_for_save(final)
    try:
        if rank == 0:
            directory.mkdir(parents=True, exist_ok=True)
            tmp.mkdir()
            _write_writer(tmp)  # first: from here on the directory is provably ours
            (tmp / RNG).mkdir()
        _barrier()
        writer = FileSystemWriter(tmp / TENSORS, single_file_per_rank=True, sync_files=True)
        with _dcp_quiet():
            dcp.save(tensors, storage_writer=writer, no_dist=not _distributed())
        _write_json(tmp / RNG / f"rank-{rank}.json", rng_state())
    except BaseException as error:  # dcp's CheckpointException is a BaseException
        raise _write_error(error, tmp, tensors) from _cause(error)
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
        except BaseException as error:
            raise _write_error(error, tmp, tensors) from _cause(error)
        if os.path.lexists(final):  # ours (checked above): an incomplete or replaced save
            _remove(final)
        os.rename(tmp, final)
        _fsync_path(directory)
        _write_json(final / COMPLETE, {"step": step, "manifest_sha256": manifest_sha256})
        _fsync_path(final)
        if keep is not None:
            prune(directory, keep)
    _barrier()
    return final


def _chain(error: BaseException) -> list[BaseException]:
    """`error`, what caused it, and what DCP's CheckpointException wraps (each rank's own)."""
    found, todo = [], [error]
    while todo and len(found) < 50:
        current = todo.pop(0)
        if current is None or any(current is seen for seen in found):
            continue
        found.append(current)
        todo += [current.__cause__, current.__context__]
        if isinstance(current, dcp.api.CheckpointException):
            todo += [wrapped for wrapped, _ in current.failures.values()]
    return found


def _interruption(error: BaseException) -> BaseException | None:
    """The signal or exit (a BaseException that is no Exception, such as the SystemExit a
    run's SIGTERM handler raises) that `error` is or wraps, if any."""
    return next(
        (e for e in _chain(error) if not isinstance(e, Exception | dcp.api.CheckpointException)),
        None,
    )


def _cause(error: BaseException) -> BaseException | None:
    """What a save's failure is raised from: nothing for an interruption (it is raised as
    itself), the error otherwise (shown under --debug)."""
    return None if _interruption(error) is not None else error


def _write_error(error: BaseException, tmp: Path, tensors: Mapping[str, Any]) -> BaseException:
    """What to raise for `error`, which stopped a save into `tmp`: a signal as itself, a
    failure of the file system (a full disk, a file-size limit, any other OSError) as a
    one-line CheckpointError; both after removing the partial save. Anything else (a fault
    of the program) is raised as it is, the partial save left for `prune`, as after a kill.

    torch's writers report a full disk in their own words (e.g. "unexpected pos" from the
    zip writer), so a save that failed with its file system (nearly) full counts as a full
    disk too: less free than a hundredth of it or than 1 MiB (or than the tensors to write).
    """
    interruption = _interruption(error)
    try:
        usage = shutil.disk_usage(tmp.parent)
    except OSError:
        usage = None
    chain = _chain(error)
    os_errors = [e for e in chain if isinstance(e, OSError)]
    enospc = any(e.errno == errno.ENOSPC for e in os_errors)
    enospc = enospc or any("no space left" in str(e).lower() for e in chain)
    needed = sum(
        t.numel() * t.element_size()
        for value in tensors.values()
        for _, t in _local_tensors(value)
        if isinstance(t, torch.Tensor)
    )
    nearly_full = usage is not None and usage.free < max(needed, usage.total // 100, 2**20)
    if interruption is None and not (os_errors or enospc or nearly_full):
        return error
    with contextlib.suppress(OSError, CheckpointError):
        if is_ours(tmp):
            _remove(tmp)
    if interruption is not None:
        return interruption
    if enospc or nearly_full:
        free = "unknown" if usage is None else f"{usage.free:,} bytes"
        last_line = str(error).strip().splitlines()[-1] if str(error).strip() else type(error)
        return CheckpointError(
            f"writing checkpoint {tmp}: no space left on its file system ({free} free when "
            f"the save failed, {needed:,} bytes of tensors to write); the partial save was "
            f"removed ({last_line})"
        )
    first = os_errors[0]
    if first.errno == errno.EFBIG:
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        shown = "unlimited now" if limit == resource.RLIM_INFINITY else f"{limit:,} bytes"
        why = f"a file reached this process's file-size limit (ulimit -f; {shown})"
    else:
        why = first.strerror or str(first)
        if first.filename:
            why += f": {first.filename}"
    return CheckpointError(f"writing checkpoint {tmp}: {why}; the partial save was removed")


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
