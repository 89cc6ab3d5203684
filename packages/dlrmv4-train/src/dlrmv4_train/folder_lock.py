"""One process per folder: a lock that a run holds on its run folder and its checkpoint
directory for as long as it lives.

The lock is a POSIX record lock (`fcntl` F_SETLK) on the file `.lock` inside the folder. Such
a lock belongs to the process: the kernel drops it when the process ends, however it ends
(`kill -9` included), so nothing is left to clean up, and a child forked from it (a data
loader worker) does not inherit it, so a worker that outlives its parent cannot keep the
folder locked. The holder writes its pid and host into the file, which a refused process
names; the kernel says which process holds the lock (F_GETLK), so a record left by an earlier
holder, killed before it could clear it, is never named in place of a new holder that has not
written its own yet. One rule comes with record locks: closing any descriptor of the file
releases the lock, so this module opens a lock file at most once per process and answers
questions about the locks this process holds from memory (`_HELD`).
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from dlrmv4_cli.record_locks import blocking_pid, try_lock

__all__ = ["LOCK_FILE", "FolderInUse", "FolderLock", "ensure_free", "holder", "lock_folder"]

LOCK_FILE = ".lock"


class FolderInUse(RuntimeError):
    """Another process holds the folder's lock; the message names it."""


@dataclass
class FolderLock:
    """A lock this process holds on `folder`; `release()` (or the process's end) drops it."""

    folder: Path
    fd: int

    def release(self) -> None:
        if self.fd < 0:
            return
        _HELD.pop(_key(self.folder), None)
        os.ftruncate(self.fd, 0)
        os.close(self.fd)  # closing drops the record lock
        self.fd = -1

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


_HELD: dict[tuple[int, int], FolderLock] = {}
"""The locks of this process by (device, inode) of their folder."""


def _key(folder: Path) -> tuple[int, int]:
    stat = folder.stat()
    return stat.st_dev, stat.st_ino


def _describe_holder(lock_file: Path, fd: int) -> str:
    pid = blocking_pid(fd)
    try:
        record = json.loads(lock_file.read_text())
        local = record["host"] == socket.gethostname()
        # A record of this host with another pid than the kernel's is an earlier holder's,
        # left by a process killed while it held the lock: the new holder has not written its
        # own yet. (Across hosts, on a network file system, the kernel's pid means nothing.)
        if pid is None or not local or record["pid"] == pid:
            where = "" if local else f" on {record['host']}"
            return f"process {record['pid']}{where} (since {record['since']})"
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no record yet
    return "another process" if pid is None else f"process {pid}"


def lock_folder(folder: str | os.PathLike[str], what: str) -> FolderLock:
    """Lock `folder` (created if missing) for the life of this process; FolderInUse, naming
    `what` the folder is and the holder's pid, when another process holds it. Taking a lock
    this process already holds returns that lock."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    held = _HELD.get(_key(folder))
    if held is not None:
        return held
    lock_file = folder / LOCK_FILE
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        if not try_lock(fd):
            raise FolderInUse(_in_use(what, folder, _describe_holder(lock_file, fd)))
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": since})
        os.ftruncate(fd, 0)
        os.pwrite(fd, (record + "\n").encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    lock = FolderLock(folder, fd)
    _HELD[_key(folder)] = lock
    return lock


def ensure_free(folder: str | os.PathLike[str], what: str) -> None:
    """FolderInUse (as `lock_folder` raises it) when another process holds `folder`'s lock;
    creates nothing."""
    held_by = holder(folder)
    if held_by is not None:
        raise FolderInUse(_in_use(what, Path(folder), held_by))


def _in_use(what: str, folder: Path, held_by: str) -> str:
    return f"{what} {folder} is in use by {held_by}; wait for it to end, or use another folder"


def holder(folder: str | os.PathLike[str]) -> str | None:
    """Who holds `folder`'s lock, when another process does (as FolderInUse would name it);
    None when the folder is free, has no lock file, or this process holds it."""
    folder = Path(folder)
    lock_file = folder / LOCK_FILE
    if not lock_file.is_file() or _key(folder) in _HELD:
        return None
    try:
        fd = os.open(lock_file, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if try_lock(fd):
            return None  # free: closing the descriptor below drops the probe's lock
        return _describe_holder(lock_file, fd)
    finally:
        os.close(fd)
