"""The checkpoints of a directory: read, list, find the newest (verified) one, prune.

Only `step-<N>` directories that hold `COMPLETE` count; `.tmp-step-<N>` (a save in progress,
or killed) and `.trash-step-<N>` (a removal in progress, or killed) are debris for `prune`,
which removes only directories a save wrote (`files.is_ours`), whatever else is there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hstu_model.checkpoint.files import (
    _OWN_DEBRIS,
    _STEP_DIR,
    COMPLETE,
    CONFIG,
    FORMAT_VERSION,
    META,
    CheckpointError,
    _read_json,
    _remove,
    is_ours,
    verify_checkpoint,
)


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
    return [read_checkpoint(path) for path in list_checkpoint_dirs(directory)]


def latest(directory: str | os.PathLike[str]) -> CheckpointInfo | None:
    """The newest complete checkpoint in `directory`, or None."""
    paths = list_checkpoint_dirs(directory)
    return read_checkpoint(paths[-1]) if paths else None


def latest_verified(
    directory: str | os.PathLike[str],
) -> tuple[CheckpointInfo | None, list[tuple[Path, str]]]:
    """The newest complete checkpoint in `directory` that verifies (`verify_checkpoint`), or
    None, and the newer complete ones skipped on the way, each with what is wrong with it."""
    skipped = []
    for path in reversed(list_checkpoint_dirs(directory)):
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
    and leftovers of interrupted saves and removals; only directories a save wrote
    (`is_ours`): anything else in `directory` stays, whatever its name. Call from one process
    (rank 0) while no save runs. Returns the removed paths."""
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    directory = Path(directory)
    complete, removed = [], []
    for path in directory.iterdir():
        step = _step_of(path)
        if (step is None and not _OWN_DEBRIS.match(path.name)) or not is_ours(path):
            continue
        if step is not None and (path / COMPLETE).is_file():
            complete.append((step, path))
        else:
            removed.append(path)
    removed += [path for _, path in sorted(complete)[:-keep]]
    for path in removed:
        _remove(path)
    return removed


def in_the_way(directory: str | os.PathLike[str], last_step: int | None) -> list[Path]:
    """What in `directory` a save of a step up to `last_step` (None: any) would have to replace
    and may not, not being a save's own (`is_ours`): a `step-<N>`, `.tmp-step-<N>` or
    `.trash-step-<N>` that a person or another program made (an empty directory holds nothing
    to lose and is not counted)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for path in sorted(directory.iterdir()):
        match = _STEP_DIR.match(path.name) or _OWN_DEBRIS.match(path.name)
        if match is None or (last_step is not None and int(match.group(1)) > last_step):
            continue
        empty = path.is_dir() and not path.is_symlink() and not any(path.iterdir())
        if not empty and not is_ours(path):
            found.append(path)
    return found
