"""A run's hold on the store it reads: :func:`hold_store` takes a shared record lock on the
store's sibling file ``.<store>.readers`` for the life of the process, and a build that would
replace the store refuses while another process holds it (:func:`check_no_readers`, naming
that process). Record locks belong to the process: the kernel drops them when it ends, however
it ends, and forked loader workers do not inherit them. Closing any descriptor of the file
would drop the lock, so this module opens it once per process (``_HELD``)."""

from __future__ import annotations

import fcntl
import os
import struct
import sys
from pathlib import Path

from yambda_data._store_read import StoreError


class StoreInUse(StoreError):
    """A build refused because another process holds the store for reading; names it."""


_HELD: dict[str, int] = {}
"""The readers files this process holds, by resolved path, with their descriptor."""


def _readers_file(store: Path) -> Path:
    return store.parent / f".{store.name}.readers"


def hold_store(store: str | Path) -> None:
    """Hold ``store`` for reading until this process ends: a build of another process into
    it is refused from now on. Waits while another process's build holds it; call it before
    preparing the store, so that what is prepared is what is held."""
    path = _readers_file(Path(store))
    path.parent.mkdir(parents=True, exist_ok=True)
    key = str(path.resolve())
    if key in _HELD:
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH)
    except BaseException:
        os.close(fd)
        raise
    _HELD[key] = fd


_FLOCK = "hhqqi"
"""Linux's `struct flock` (l_type, l_whence, l_start, l_len, l_pid), as F_GETLK fills it."""


def _other_reader(fd: int) -> int | None:
    """The pid of another process holding a lock on the file of ``fd`` (0 where the platform's
    `struct flock` is not laid out here but a lock is held), or None."""
    if sys.platform != "linux":
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0
        fcntl.lockf(fd, fcntl.LOCK_UN)
        return None
    query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    kind, _, _, _, pid = struct.unpack(_FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, query))
    return None if kind == fcntl.F_UNLCK else pid


def check_no_readers(store: str | Path) -> None:
    """StoreInUse, naming the process, when another process holds ``store`` for reading
    (:func:`hold_store`): a build must not replace a store under a run that reads it. This
    process's own hold does not count."""
    store = Path(store)
    path = _readers_file(store)
    if not path.is_file():
        return
    held = _HELD.get(str(path.resolve()))
    fd = held if held is not None else os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        pid = _other_reader(fd)
    finally:
        if held is None:
            os.close(fd)
    if pid is not None:
        holder = f"process {pid}" if pid else "another process"
        raise StoreInUse(
            f"{store}: in use by {holder}, a run that reads it; replacing it would change "
            "its data under it: wait for that run to end, or build the store elsewhere"
        )
