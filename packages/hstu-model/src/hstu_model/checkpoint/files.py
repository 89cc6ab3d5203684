"""The files of a checkpoint: their names, JSON and fsync helpers, the manifest and its check.

`manifest.json` holds the size and sha256 of every file of a checkpoint but itself and
`COMPLETE`; `COMPLETE`, written last, holds the manifest's own sha256. `verify_checkpoint`
checks the files against both (a file truncated, changed or lost after the save, by a disk or
a person). `WRITER`, the first file a save writes into its directory, is how a directory is
proven to be a save's own (`is_ours`): only such directories are ever removed, whatever their
name, so a user's `step-100/` or `.tmp-mywork/` beside the checkpoints is left alone. `_remove`
deletes one so that no reader sees half of it and so that it stays provably ours until its
last file is gone; `rewind_file` cuts an append-only log back to what it held at a checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1
COMPLETE = "COMPLETE"
"""Marker file of a finished checkpoint, written after everything else."""
META = "meta.json"
CONFIG = "config.json"
MANIFEST = "manifest.json"
"""Relative path -> {"bytes", "sha256"} of every file of a checkpoint but itself and COMPLETE."""
TENSORS = "tensors"
RNG = "rng"
WRITER = "writer.json"
"""Written first into every save's directory: the proof that the directory is a save's own."""
_WRITER_RECORD = {"writer": "hstu_model.checkpoint"}
_STEP_DIR = re.compile(r"^step-(\d+)$")
_TMP_PREFIX = ".tmp-"
_TRASH_PREFIX = ".trash-"
_OWN_DEBRIS = re.compile(r"^\.(?:tmp|trash)-step-(\d+)$")
"""A save in progress (or killed), a removal in progress (or killed)."""


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete, or does not fit the trainer or run."""


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


def _write_writer(directory: Path) -> None:
    _write_json(directory / WRITER, _WRITER_RECORD)


def is_ours(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a directory a save wrote: it holds `WRITER`, or (a checkpoint saved
    before `WRITER` existed) a `COMPLETE` whose sha256 matches its manifest."""
    path = Path(path)
    if not path.is_dir() or path.is_symlink():
        return False
    try:
        if json.loads((path / WRITER).read_text(encoding="utf-8")) == _WRITER_RECORD:
            return True
    except (OSError, UnicodeDecodeError, ValueError):
        pass
    try:
        marker = json.loads((path / COMPLETE).read_text(encoding="utf-8"))
        return marker.get("manifest_sha256") == _sha256(path / MANIFEST)
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return False


def _delete_ours(path: Path) -> None:
    """Delete the directory `path` (one of ours), its `WRITER` last: a deletion cut short
    leaves a directory that is still provably ours, for the next `prune`."""
    for entry in path.iterdir():
        if entry.name == WRITER:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    (path / WRITER).unlink(missing_ok=True)
    path.rmdir()


def _clear_for_save(path: Path) -> None:
    """Make room for a save at `path` (its temporary or final directory): remove what a
    save left there; CheckpointError, having removed nothing, when something else is there
    (an empty directory holds nothing to lose)."""
    if not os.path.lexists(path):
        return
    if is_ours(path):
        _remove(path)
    elif path.is_dir() and not path.is_symlink() and not any(path.iterdir()):
        path.rmdir()  # a save killed between creating it and writing WRITER
    else:
        raise CheckpointError(
            f"{path} is in the way of a checkpoint and is not a checkpoint this package wrote; "
            "move it away or use another --checkpoint-dir"
        )


def _remove(path: Path) -> None:
    """Remove a directory of ours so that no reader sees it half deleted: rename it away
    first (over a trash of ours left by a removal cut short)."""
    if not (path / WRITER).is_file():  # saved before WRITER existed: it stays provably ours
        _write_writer(path)
    if path.name.startswith(_TRASH_PREFIX):
        _delete_ours(path)
        return
    trash = path.with_name(f"{_TRASH_PREFIX}{path.name}")
    if os.path.lexists(trash):
        if not is_ours(trash):
            raise CheckpointError(
                f"{trash} is in the way of removing {path} and is not a checkpoint this "
                "package wrote; move it away"
            )
        _delete_ours(trash)
    os.rename(path, trash)
    _delete_ours(trash)


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
