"""Atomic file output: a reader sees the old file or the complete new one, never a part."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it is synced and renamed onto
    ``path`` with the permissions a plain new file would get, on failure it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(name)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        os.close(fd)
        yield tmp
        with open(tmp, "rb") as written:
            os.fsync(written.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_paths(paths: list[Path]) -> Iterator[list[Path]]:
    """:func:`atomic_path` for several files at once: a temporary path next to each; on
    success every one is synced before any is renamed onto its path, so a failure while
    writing (or syncing) any of them leaves all of the old files as they were."""
    temps: list[Path] = []
    try:
        umask = os.umask(0)
        os.umask(umask)
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            temps.append(Path(name))
            os.fchmod(fd, 0o666 & ~umask)
            os.close(fd)
        yield list(temps)
        for tmp in temps:
            with open(tmp, "rb") as written:
                os.fsync(written.fileno())
        for tmp, path in zip(temps, paths, strict=True):
            os.replace(tmp, path)
    except BaseException:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
        raise


def fsync_file(path: str | os.PathLike[str]) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def fsync_tree(root: Path) -> None:
    """fsync every file and directory under ``root``, so a rename publishes durable data."""
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            fsync_file(os.path.join(dirpath, name))
        fd = os.open(dirpath, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def replace_dir(tmp: Path, out: Path) -> None:
    """Rename the finished ``tmp`` onto ``out``, moving an existing ``out`` aside first."""
    if not out.exists():
        os.rename(tmp, out)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    old.rmdir()
    os.rename(out, old)
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(old, out)
        raise
    shutil.rmtree(old)


@contextlib.contextmanager
def exclusive_lock(path: str | Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the sibling file ``.<name>.lock`` of ``path``: processes
    that produce ``path`` at the same time take turns. The lock file stays (it is tiny);
    the kernel drops the lock when its holder dies."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def check_apart(out: Path, inputs: Iterable[Path], *, roots: Iterable[Path] = ()) -> None:
    """Refuse an output ``out`` that is, holds or lies inside one of ``inputs``, or that is or
    holds one of ``roots`` (dataset roots: an output may go inside one, beside the files it
    reads, as the MLPerf layout ``DATA/prepared/SIZE`` does). Paths are compared resolved;
    the one-line ValueError names both as given."""

    target = Path(out).resolve()
    for path, nested_ok in [(p, False) for p in inputs] + [(p, True) for p in roots]:
        source = Path(path).resolve()
        if target == source:
            relation = "is"
        elif target in source.parents:
            relation = "holds"
        elif source in target.parents and not nested_ok:
            relation = "lies inside"
        else:
            continue
        raise ValueError(
            f"{out}: the output {relation} the input {path}; refusing to write it (choose an "
            "output apart from the inputs)"
        )


def check_only_ours(out: Path, ours: Callable[[str, bool], bool], command: str) -> None:
    """Refuse to replace an existing directory ``out`` that holds an entry ``command`` does
    not write: ``ours(relative POSIX path, is_dir)`` says which entries it writes (a directory
    it accepts is searched too). The ValueError names the first other entry."""
    for dirpath, dirnames, filenames in os.walk(out):
        dirnames.sort()
        base = Path(dirpath).relative_to(out)
        entries = [(name, True) for name in dirnames] + [(name, False) for name in filenames]
        for name, is_dir in sorted(entries):
            relative = (base / name).as_posix()
            if not ours(relative, is_dir and not os.path.islink(os.path.join(dirpath, name))):
                raise ValueError(
                    f"{out}: holds {relative}, which {command} did not write; refusing to "
                    f"replace {out} (move that away or choose another output)"
                )


def check_creatable(path: Path) -> None:
    """Refuse (ValueError naming it) a ``path`` whose nearest existing ancestor is not a
    directory, so that it cannot be created there."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"{path}: cannot be created, {parent} is not a directory")
            return


def check_replaceable(
    out: Path, marker: str, what: str, ours: Callable[[str, bool], bool], command: str
) -> None:
    """``out`` may be missing (and creatable), an empty directory, or an earlier output of
    ``command`` to replace: ``what`` (e.g. "a sample store"), recognised by its ``marker``
    file and holding nothing ``command`` did not write (:func:`check_only_ours`)."""
    if not out.exists():
        check_creatable(out)
        return
    if not out.is_dir():
        raise ValueError(f"{out}: exists and is not a directory")
    if any(out.iterdir()) and not (out / marker).is_file():
        raise ValueError(f"{out}: not empty and not {what} (no {marker}); refusing to replace it")
    check_only_ours(out, ours, command)
