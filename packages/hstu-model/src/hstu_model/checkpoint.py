"""Crash-exact checkpoints of a `Trainer`: weights, both optimizers, step, RNG and run state.

A checkpoint is the directory `<dir>/step-<N>`, `N` the trainer's step:

    step-<N>/
      tensors/          model and optimizer tensors, torch.distributed.checkpoint (DCP) format
      rng/rank-<r>.json  Python, NumPy, torch CPU (and CUDA) generator states of rank r
      meta.json         step, world size, optimizer param_groups, the caller's `extra` dict
      config.json       the effective config (JSON)
      manifest.json     size and sha256 of every file above (written after them)
      COMPLETE          written last, holding the manifest's own sha256

Saving writes everything into `<dir>/.tmp-step-<N>`, fsyncs every file and directory, renames
it to `step-<N>`, and only then writes `COMPLETE`. `latest(dir)` returns the newest checkpoint
that has `COMPLETE`, so a process killed at any point of a save leaves the previous checkpoint
as the latest one. `verify_checkpoint` checks a checkpoint's files against its manifest (a file
truncated, changed or lost later, by a disk or a person), and `latest_verified(dir)` returns
the newest checkpoint that verifies together with the newer ones it skipped and why. `keep` prunes to the newest complete checkpoints (and removes debris of
interrupted saves).

Tensors are keyed by name (`model/<fqn>`, `optimizer/<dense|sparseI>/<param fqn>/<state>`),
not by position, and DCP writes one file per rank and loads in place, so the same format holds
the ShardedTensors of a sharded model. With a process group every rank calls `save_checkpoint`
and `load_checkpoint` (DCP is collective), each rank writes its own RNG file and rank 0 writes
the rest; without one, DCP runs in its single-process mode. Tested: one process without a
process group, and a one-rank gloo group with sharded tables.

`StreamPosition` counts where the training data stands (pass, source, samples consumed of it)
so that a resumed run skips exactly what was trained; `CheckpointSchedule` decides when to save
(every N steps and/or every T seconds, the time decision taken on rank 0 and broadcast);
`Checkpointer` ties these together; `state_digest` hashes weights and optimizer state.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import json
import math
import os
import random
import re
import shutil
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torchrec.optim.keyed import KeyedOptimizer

__all__ = [
    "COMPLETE",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointSchedule",
    "Checkpointer",
    "StreamPosition",
    "config_differences",
    "latest",
    "latest_verified",
    "list_checkpoint_dirs",
    "list_checkpoints",
    "load_checkpoint",
    "prune",
    "read_checkpoint",
    "rewind_file",
    "rng_state",
    "save_checkpoint",
    "set_rng_state",
    "state_digest",
    "verify_checkpoint",
]

FORMAT_VERSION = 1
COMPLETE = "COMPLETE"
"""Marker file of a finished checkpoint, written after everything else."""
META = "meta.json"
CONFIG = "config.json"
MANIFEST = "manifest.json"
"""Relative path -> {"bytes", "sha256"} of every file of a checkpoint but itself and COMPLETE."""
TENSORS = "tensors"
RNG = "rng"
_STEP_DIR = re.compile(r"^step-(\d+)$")
_TMP_PREFIX = ".tmp-"
_TRASH_PREFIX = ".trash-"


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete, or does not fit the trainer or run."""


# --------------------------------------------------------------------------- process group


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


# --------------------------------------------------------------------------- files


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    """fsync every file and directory under `root` (directories after their entries)."""
    for dirpath, _dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames:
            _fsync_path(Path(dirpath) / name)
        _fsync_path(Path(dirpath))


def _write_json(path: Path, value: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())


def _read_json(path: Path) -> Any:
    """The JSON of `path`; CheckpointError naming the file when it is missing or damaged."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path}: unreadable ({error})") from None


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _manifest(root: Path) -> dict[str, dict[str, Any]]:
    """Size and sha256 of every file under `root`, by path relative to it."""
    files = {}
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath) / name
            relative = path.relative_to(root).as_posix()
            if relative not in (MANIFEST, COMPLETE):
                files[relative] = {"bytes": path.stat().st_size, "sha256": _sha256(path)}
    return dict(sorted(files.items()))


def verify_checkpoint(path: str | os.PathLike[str]) -> list[str]:
    """What is wrong with the checkpoint at `path`, each naming the file (empty: it verifies).

    Checks the COMPLETE marker, the manifest against the sha256 COMPLETE holds, and every file
    of the manifest: present, of its size, of its sha256. Reads every byte of the checkpoint.
    """
    path = Path(path)
    try:
        marker = _read_json(path / COMPLETE)
        manifest_path = path / MANIFEST
        if not manifest_path.is_file():
            return [f"{manifest_path}: missing"]
        if marker.get("manifest_sha256") != _sha256(manifest_path):
            return [f"{manifest_path}: does not match the sha256 in {path / COMPLETE}"]
        manifest = _read_json(manifest_path)
    except (CheckpointError, AttributeError) as error:
        return [str(error) if isinstance(error, CheckpointError) else f"{path}: bad marker"]
    problems = []
    for relative, expected in manifest.items():
        file = path / relative
        if not file.is_file():
            problems.append(f"{file}: missing")
        elif file.stat().st_size != expected["bytes"]:
            problems.append(
                f"{file}: {file.stat().st_size} bytes, the manifest says {expected['bytes']}"
            )
        elif _sha256(file) != expected["sha256"]:
            problems.append(f"{file}: sha256 differs from the manifest's")
    return problems


def _remove(path: Path) -> None:
    """Remove a directory so that no reader sees it half deleted: rename it away first."""
    trash = path.with_name(f"{_TRASH_PREFIX}{path.name}")
    if trash.exists():
        shutil.rmtree(trash)
    os.rename(path, trash)
    shutil.rmtree(trash)


def rewind_file(path: str | os.PathLike[str], size: int) -> int:
    """Cut the append-only file `path` back to its first `size` bytes; returns how many bytes
    were dropped. The dropped tail is appended to `<path>.discarded`, not lost. Used on resume
    for records a crashed process wrote after its last checkpoint. Raises `CheckpointError`
    when the file is shorter than `size` (it is not the file the checkpoint saw)."""
    path = Path(path)
    actual = path.stat().st_size if path.exists() else 0
    if actual < size:
        raise CheckpointError(
            f"{path} has {actual} bytes but had {size} when the checkpoint was taken; "
            "it is not the file of the checkpointed run"
        )
    if actual == size:
        return 0
    with open(path, "r+b") as f:
        f.seek(size)
        tail = f.read()
        with open(path.with_name(path.name + ".discarded"), "ab") as out:
            out.write(tail)
            out.flush()
            os.fsync(out.fileno())
        f.truncate(size)
        f.flush()
        os.fsync(f.fileno())
    return actual - size


# --------------------------------------------------------------------------- RNG


def _b64(tensor: torch.Tensor) -> str:
    return base64.b64encode(tensor.cpu().numpy().tobytes()).decode("ascii")


def _unb64(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)


def rng_state() -> dict[str, Any]:
    """The states of Python's, NumPy's (global) and torch's CPU (and CUDA) generators, as JSON
    data."""
    version, internal, gauss = random.getstate()
    np_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "numpy": {
            "bit_generator": np_state["bit_generator"],
            "key": np_state["state"]["key"].tolist(),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "torch": _b64(torch.get_rng_state()),
        "cuda": None,
    }
    if torch.cuda.is_available():
        state["cuda"] = [_b64(s) for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what `rng_state` returned. CUDA states are restored when CUDA is available and
    has as many devices as were saved; otherwise `CheckpointError` (saved with CUDA) or nothing
    (saved without)."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np_state = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": np_state["bit_generator"],
            "state": {"key": np.asarray(np_state["key"], dtype=np.uint32), "pos": np_state["pos"]},
            "has_gauss": np_state["has_gauss"],
            "gauss": np_state["gauss"],
        }
    )
    torch.set_rng_state(_unb64(state["torch"]))
    cuda = state.get("cuda")
    if cuda is not None:
        if not torch.cuda.is_available() or torch.cuda.device_count() != len(cuda):
            raise CheckpointError(
                f"the checkpoint holds the RNG states of {len(cuda)} CUDA device(s); this "
                f"process has {torch.cuda.device_count() if torch.cuda.is_available() else 0}"
            )
        torch.cuda.set_rng_state_all([_unb64(s) for s in cuda])


# --------------------------------------------------------------------------- trainer state


def _named_optimizers(trainer: Any) -> list[tuple[str, torch.optim.Optimizer]]:
    return [("dense", trainer.dense_optimizer)] + [
        (f"sparse{i}", opt) for i, opt in enumerate(trainer.sparse_optimizers)
    ]


def _param_names(model: torch.nn.Module) -> dict[torch.nn.Parameter, str]:
    return {p: name for name, p in model.named_parameters(remove_duplicate=False)}


def _param_list(optimizer: torch.optim.Optimizer) -> list[torch.nn.Parameter]:
    # torch.optim state_dict numbers the parameters of all groups in order from 0.
    return [p for group in optimizer.param_groups for p in group["params"]]


def _jsonable(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return {"__tensor__": value.tolist(), "dtype": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise CheckpointError(f"optimizer value of type {type(value).__name__} is not supported")


def _like(saved: Any, live: Any) -> Any:
    """`saved` (from JSON) in the type of the live value it replaces."""
    if isinstance(saved, Mapping) and "__tensor__" in saved:
        return torch.tensor(saved["__tensor__"], dtype=getattr(torch, saved["dtype"]))
    if isinstance(live, tuple) and isinstance(saved, list):
        return tuple(saved)
    return saved


def _optimizer_state(
    name: str, optimizer: torch.optim.Optimizer, names: Mapping[torch.nn.Parameter, str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(tensors keyed `optimizer/<name>/<param fqn>/<key>`, JSON part) of one optimizer."""
    keyed = isinstance(optimizer, KeyedOptimizer)
    sd = optimizer.state_dict()
    if keyed:  # torchrec: already keyed by parameter name (ShardedTensor states when sharded)
        state, groups = sd["state"], sd.get("param_groups")
    else:
        params = _param_list(optimizer)
        try:
            state = {names[params[i]]: s for i, s in sd["state"].items()}
            groups = [
                {**g, "params": [names[params[i]] for i in g["params"]]} for g in sd["param_groups"]
            ]
        except KeyError:
            raise CheckpointError(
                f"optimizer {name!r} holds a parameter that is not the model's"
            ) from None
    tensors: dict[str, Any] = {}
    scalars: dict[str, Any] = {}
    for fqn, entry in state.items():
        if "/" in fqn:
            raise CheckpointError(f"parameter name {fqn!r} contains '/'")
        for key, value in entry.items():
            path = f"optimizer/{name}/{fqn}/{key}"
            if isinstance(value, torch.Tensor):
                tensors[path] = value
            else:
                scalars[path] = _jsonable(value)
    meta = {"keyed": keyed, "param_groups": _jsonable(groups), "scalars": scalars}
    return tensors, meta


def _trainer_state(trainer: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Flat name -> tensor dict of model and optimizers, and the JSON part of the optimizers."""
    tensors = {f"model/{k}": v for k, v in trainer.model.state_dict().items()}
    names = _param_names(trainer.model)
    optimizers = {}
    for name, optimizer in _named_optimizers(trainer):
        part, meta = _optimizer_state(name, optimizer, names)
        tensors |= part
        optimizers[name] = meta
    return tensors, optimizers


def _local_tensors(value: Any) -> list[tuple[str, torch.Tensor]]:
    """The plain tensors a state value holds on this rank (a ShardedTensor's local shards)."""
    if isinstance(value, torch.Tensor) and hasattr(value, "local_shards"):
        return [(f"shard{list(s.metadata.shard_offsets)}", s.tensor) for s in value.local_shards()]
    if hasattr(value, "to_local"):  # DTensor
        return [("local", value.to_local())]
    return [("", value)]


def state_digest(trainer: Any) -> str:
    """sha256 (hex) of the trainer's step, model state and optimizer states.

    Deterministic: entries in sorted name order, each tensor as name, dtype, shape and its raw
    bytes; optimizer hyperparameters as canonical JSON. Two runs that agree on it hold
    bit-identical weights and optimizer state. Sharded tensors contribute this rank's shards.
    """
    tensors, optimizers = _trainer_state(trainer)
    h = hashlib.sha256()
    h.update(f"step={int(trainer.step)}\n".encode())
    for name in sorted(tensors):
        for suffix, t in _local_tensors(tensors[name]):
            t = t.detach().cpu().contiguous()
            h.update(f"{name}{suffix} {t.dtype!s} {list(t.shape)}\n".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    h.update(json.dumps(optimizers, sort_keys=True, allow_nan=True).encode())
    return h.hexdigest()


# --------------------------------------------------------------------------- checkpoints


@dataclass(frozen=True)
class CheckpointInfo:
    """A complete checkpoint on disk (its tensors are read by `load_checkpoint`)."""

    path: Path
    step: int
    world_size: int
    extra: dict[str, Any]
    """The caller's state (data position, tracker state, metrics ...), as saved."""
    config: dict[str, Any] | None
    """The effective config the run saved with it."""
    meta: dict[str, Any] = field(repr=False, default_factory=dict)


def _step_of(path: Path) -> int | None:
    match = _STEP_DIR.match(path.name)
    return int(match.group(1)) if match and path.is_dir() else None


def read_checkpoint(path: str | os.PathLike[str]) -> CheckpointInfo:
    """The checkpoint at `path` (a `step-<N>` directory); `CheckpointError` unless complete."""
    path = Path(path)
    if not (path / COMPLETE).is_file():
        raise CheckpointError(f"{path} is not a complete checkpoint (no {COMPLETE} marker)")
    meta = _read_json(path / META)
    if meta.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: unknown checkpoint format {meta.get('format')!r}")
    config = _read_json(path / CONFIG) if (path / CONFIG).is_file() else None
    return CheckpointInfo(
        path=path,
        step=int(meta["step"]),
        world_size=int(meta["world_size"]),
        extra=meta.get("extra", {}),
        config=config,
        meta=meta,
    )


def list_checkpoint_dirs(directory: str | os.PathLike[str]) -> list[Path]:
    """The `step-<N>` directories in `directory` that have COMPLETE, oldest first, unread."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [
        (step, path)
        for path in directory.iterdir()
        if (step := _step_of(path)) is not None and (path / COMPLETE).is_file()
    ]
    return [path for _, path in sorted(found)]


def list_checkpoints(directory: str | os.PathLike[str]) -> list[CheckpointInfo]:
    """The complete checkpoints in `directory`, oldest first (incomplete ones are ignored)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        step = _step_of(path)
        if step is not None and (path / COMPLETE).is_file():
            found.append((step, path))
    return [read_checkpoint(path) for _, path in sorted(found)]


def latest(directory: str | os.PathLike[str]) -> CheckpointInfo | None:
    """The newest complete checkpoint in `directory`, or None."""
    directory = Path(directory)
    if not directory.is_dir():
        return None
    steps = [
        (step, path)
        for path in directory.iterdir()
        if (step := _step_of(path)) is not None and (path / COMPLETE).is_file()
    ]
    return read_checkpoint(max(steps)[1]) if steps else None


def latest_verified(
    directory: str | os.PathLike[str],
) -> tuple[CheckpointInfo | None, list[tuple[Path, str]]]:
    """The newest complete checkpoint in `directory` that verifies (`verify_checkpoint`), or
    None, and the newer complete ones skipped on the way, each with what is wrong with it."""
    directory = Path(directory)
    if not directory.is_dir():
        return None, []
    steps = sorted(
        (
            (step, path)
            for path in directory.iterdir()
            if (step := _step_of(path)) is not None and (path / COMPLETE).is_file()
        ),
        reverse=True,
    )
    skipped = []
    for _, path in steps:
        problems = verify_checkpoint(path)
        if not problems:
            try:
                return read_checkpoint(path), skipped
            except CheckpointError as error:
                problems = [str(error)]
        skipped.append((path, "; ".join(problems)))
    return None, skipped


def prune(directory: str | os.PathLike[str], keep: int) -> list[Path]:
    """Delete all but the newest `keep` complete checkpoints, every incomplete `step-<N>`,
    and leftovers of interrupted saves. Call from one process (rank 0) while no save runs.
    Returns the removed paths."""
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    directory = Path(directory)
    complete, removed = [], []
    for path in directory.iterdir():
        step = _step_of(path)
        if step is not None and (path / COMPLETE).is_file():
            complete.append((step, path))
        elif step is not None or path.name.startswith((_TMP_PREFIX, _TRASH_PREFIX)):
            removed.append(path)
    removed += [path for _, path in sorted(complete)[:-keep]]
    for path in removed:
        if path.name.startswith(_TRASH_PREFIX):
            shutil.rmtree(path)
        else:
            _remove(path)
    return removed


def save_checkpoint(
    directory: str | os.PathLike[str],
    trainer: Any,
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


def _load_optimizer(
    name: str,
    optimizer: torch.optim.Optimizer,
    meta: Mapping[str, Any],
    loaded: Mapping[str, Any],
    names: Mapping[torch.nn.Parameter, str],
) -> None:
    prefix = f"optimizer/{name}/"
    state: dict[str, dict[str, Any]] = {}
    for path, value in loaded.items():
        if path.startswith(prefix):
            fqn, key = path[len(prefix) :].rsplit("/", 1)
            state.setdefault(fqn, {})[key] = value
    for path, value in meta["scalars"].items():
        fqn, key = path[len(prefix) :].rsplit("/", 1)
        state.setdefault(fqn, {})[key] = _like(value, None)
    saved_groups = meta["param_groups"]
    if isinstance(optimizer, KeyedOptimizer):
        sd: dict[str, Any] = {"state": state}
        if saved_groups is not None:
            sd["param_groups"] = saved_groups
        optimizer.load_state_dict(sd)
        return
    params = _param_list(optimizer)
    index = {names[p]: i for i, p in enumerate(params)}
    unknown = sorted(set(state) - set(index))
    if unknown:
        raise CheckpointError(f"optimizer {name!r}: the checkpoint has state for {unknown[:3]}")
    live_groups = optimizer.param_groups
    if len(saved_groups) != len(live_groups):
        raise CheckpointError(
            f"optimizer {name!r}: {len(saved_groups)} param groups saved, {len(live_groups)} now"
        )
    groups = []
    for saved, live in zip(saved_groups, live_groups, strict=True):
        if saved["params"] != [names[p] for p in live["params"]]:
            raise CheckpointError(f"optimizer {name!r}: the parameters of a group differ")
        group = {k: _like(v, live.get(k)) for k, v in saved.items() if k != "params"}
        groups.append(group | {"params": [index[fqn] for fqn in saved["params"]]})
    optimizer.load_state_dict(
        {"state": {index[fqn]: entry for fqn, entry in state.items()}, "param_groups": groups}
    )


def load_checkpoint(
    checkpoint: CheckpointInfo | str | os.PathLike[str],
    trainer: Any,
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


# --------------------------------------------------------------------------- data position


@dataclass
class StreamPosition:
    """Where a stream of batches over `sizes` sources stands, pass after pass.

    `sizes[i]`: samples source `i` yields per pass (whole global batches only; 0 for a source
    too small for one). After `advance(samples)` for each trained batch, (`epoch`, `source`,
    `consumed`) is the next sample to train: pass `epoch`, the `consumed`-th sample of source
    `source`. A resumed stream starts at source `source` of pass `epoch` and skips `consumed`
    samples of it (yambda-data: `BatchPlan(sources[source:], epoch=epoch, skip=consumed)`).
    Batches never span sources.
    """

    sizes: Sequence[int]
    epoch: int = 0
    source: int = 0
    consumed: int = 0

    def __post_init__(self) -> None:
        self.sizes = tuple(int(s) for s in self.sizes)
        if not self.sizes or min(self.sizes) < 0 or sum(self.sizes) == 0:
            raise ValueError(f"StreamPosition: no samples in sources of sizes {self.sizes[:8]}")
        if self.consumed == 0 and self.sizes[self.source] == 0:
            self._next_source()

    def _next_source(self) -> None:
        self.consumed = 0
        while True:
            self.source += 1
            if self.source == len(self.sizes):
                self.source, self.epoch = 0, self.epoch + 1
            if self.sizes[self.source] > 0:
                return

    def advance(self, samples: int) -> None:
        """Count `samples` more trained samples (one global batch)."""
        self.consumed += int(samples)
        size = self.sizes[self.source]
        if self.consumed > size:
            raise ValueError(
                f"StreamPosition: {self.consumed} samples consumed of source {self.source}, "
                f"which has {size}; a batch spans two sources"
            )
        if self.consumed == size:
            self._next_source()

    def _sizes_digest(self) -> str:
        return hashlib.sha256(json.dumps(self.sizes).encode()).hexdigest()

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "source": self.source,
            "consumed": self.consumed,
            "num_sources": len(self.sizes),
            "num_samples": sum(self.sizes),
            "sizes_sha256": self._sizes_digest(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from `state`; `ValueError` when it was counted over other source sizes
        (other data or batch size)."""
        if state["sizes_sha256"] != self._sizes_digest():
            raise ValueError(
                f"the data differs from the checkpoint's: {state['num_sources']} sources of "
                f"{state['num_samples']} samples then, {len(self.sizes)} of {sum(self.sizes)} now"
            )
        source, consumed = int(state["source"]), int(state["consumed"])
        if not 0 <= consumed < self.sizes[source]:
            raise ValueError(f"StreamPosition: {consumed} consumed of source {source}")
        self.epoch, self.source, self.consumed = int(state["epoch"]), source, consumed


# --------------------------------------------------------------------------- cadence


class CheckpointSchedule:
    """When to save: every `every_steps` steps and/or every `every_seconds` seconds (0 = off).

    `due(step)` is called after each step, on every rank. The time decision is taken on rank 0
    and broadcast when a process group exists, so all ranks save at the same step.
    `saved()` restarts the timer.
    """

    def __init__(
        self,
        every_steps: int = 0,
        every_seconds: float = 0.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if every_steps < 0 or not every_seconds >= 0 or math.isinf(every_seconds):
            raise ValueError(
                f"every_steps and every_seconds must be >= 0, got {every_steps}, {every_seconds}"
            )
        self.every_steps = int(every_steps)
        self.every_seconds = float(every_seconds)
        self._clock = clock
        self._last = clock()

    @property
    def enabled(self) -> bool:
        return self.every_steps > 0 or self.every_seconds > 0

    def due(self, step: int) -> bool:
        by_steps = self.every_steps > 0 and step % self.every_steps == 0
        by_time = False
        if self.every_seconds > 0:
            by_time = self._clock() - self._last >= self.every_seconds
            if _distributed():
                decision = [by_time]
                dist.broadcast_object_list(decision, src=0)
                by_time = bool(decision[0])
        return by_steps or by_time

    def saved(self) -> None:
        self._last = self._clock()


class Checkpointer:
    """Saves a trainer into `directory` on a `CheckpointSchedule` and keeps the newest `keep`.

    `config`: the effective config saved with every checkpoint (default: the trainer's).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        every_steps: int = 0,
        every_seconds: float = 0.0,
        keep: int | None = None,
        config: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if keep is not None and keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.directory = Path(directory)
        self.schedule = CheckpointSchedule(every_steps, every_seconds, clock=clock)
        self.keep = keep
        self.config = config

    def latest(self) -> CheckpointInfo | None:
        return latest(self.directory)

    def save(self, trainer: Any, extra: Mapping[str, Any] | None = None) -> Path:
        path = save_checkpoint(
            self.directory, trainer, extra=extra, config=self.config, keep=self.keep
        )
        self.schedule.saved()
        return path

    def maybe_save(
        self, trainer: Any, extra: Callable[[], Mapping[str, Any]] | None = None
    ) -> Path | None:
        """Save if the schedule says so at `trainer.step`; `extra` is called only then."""
        if not self.schedule.due(trainer.step):
            return None
        return self.save(trainer, extra() if extra is not None else None)

    def restore(self, checkpoint: CheckpointInfo, trainer: Any) -> CheckpointInfo:
        info = load_checkpoint(checkpoint, trainer)
        self.schedule.saved()
        return info
