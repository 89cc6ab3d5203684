"""POSIX record locks (``fcntl.lockf``) as the commands' folder and data locks use them: a
probe that never waits, and the pid of the process whose lock blocks a write lock.

Record locks, not ``flock``: they also hold on network file systems, and the kernel says who
holds them (F_GETLK). Standard library only, like the rest of this package.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import sys

__all__ = ["blocking_pid", "try_lock"]

_FLOCK = "hhqqi"
"""Linux's `struct flock` (l_type, l_whence, l_start, l_len, l_pid), as F_GETLK fills it."""


def try_lock(fd: int, kind: int = fcntl.LOCK_EX) -> bool:
    """Take a whole-file lock of `kind` (``fcntl.LOCK_EX`` or ``LOCK_SH``) on the file of `fd`
    if no other process's lock conflicts; False instead of waiting when one does."""
    try:
        fcntl.lockf(fd, kind | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno in (errno.EACCES, errno.EAGAIN):
            return False
        raise
    return True


def blocking_pid(fd: int) -> int | None:
    """The pid of the process whose lock on the file of `fd` blocks a whole-file write lock,
    as the kernel knows it (never this process's own locks). None: no lock blocks it, or a
    platform whose `struct flock` this module does not lay out."""
    if sys.platform != "linux":
        return None
    query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    lock_type, _, _, _, pid = struct.unpack(_FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, query))
    return None if lock_type == fcntl.F_UNLCK else pid
