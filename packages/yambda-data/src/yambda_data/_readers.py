"""A run's hold on what it reads: its sample store and its raw dataset.

A run holds each with a shared record lock for the life of its process (:func:`hold_store`,
:func:`hold_data`); a command that would replace what is held (a store build, a synthesis, a
download) holds the same lock exclusively while it writes (:func:`writing_store`,
:func:`writing_data`) and is refused, naming the process, while another process holds it.
Many runs may read one dataset at once; a run that starts while a command writes what it
would read waits for that command, and says so. The lock of a store is on its sibling file
``.<store>.readers`` (a build replaces the store folder itself), that of a dataset on
``<root>/.readers``.

Record locks belong to the process: the kernel drops them when it ends, however it ends, and
forked loader workers do not inherit them. Closing any descriptor of the file would drop the
lock, so this module opens each file once per process (``_HELD``); a process that holds a
file shared and then writes what it holds converts its lock to exclusive and back."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from dlrmv4_cli.record_locks import blocking_pid, try_lock
from yambda_data._io import StoreError


class StoreInUse(StoreError):
    """A build refused because another process holds the store for reading; names it."""


class DataInUse(ValueError):
    """A synthesis or download refused because another process holds the dataset for
    reading; names it."""


DATA_READERS_FILE = ".readers"
"""The file inside a dataset root whose lock its readers hold."""

_HELD: dict[str, int] = {}
"""The readers files this process holds shared, by resolved path, with their descriptor."""


def _store_readers(store: Path) -> Path:
    return store.parent / f".{store.name}.readers"


def _hold(path: Path, what: str, progress: Callable[[str], None] | None) -> None:
    key = str(path.resolve())
    if key in _HELD:
        return
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as error:
        if error.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        # Data this process may not write: a shared lock needs only to read the file, and
        # where there is none yet, no writer has taken it either.
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
    try:
        if not try_lock(fd, fcntl.LOCK_SH):
            if progress is not None:
                progress(f"waiting for {_holder(fd)}, which is writing {what}")
            fcntl.lockf(fd, fcntl.LOCK_SH)
    except BaseException:
        os.close(fd)
        raise
    _HELD[key] = fd


def _holder(fd: int) -> str:
    """The process whose lock on the file of ``fd`` blocks an exclusive one."""
    pid = blocking_pid(fd)
    return "another process" if pid is None else f"process {pid}"


@contextlib.contextmanager
def _writing(path: Path, refusal: Callable[[str], Exception]) -> Iterator[None]:
    held = _HELD.get(str(path.resolve())) if path.exists() else None
    fd = held if held is not None else os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        if not try_lock(fd, fcntl.LOCK_EX):
            raise refusal(_holder(fd))
        yield
    finally:
        if held is None:
            os.close(fd)  # drops the lock
        else:
            fcntl.lockf(fd, fcntl.LOCK_SH)  # back to this process's hold (never waits)


def hold_store(store: str | Path, progress: Callable[[str], None] | None = None) -> None:
    """Hold ``store`` for reading until this process ends: a build of another process into
    it is refused from now on. Waits while another process builds it, telling ``progress``
    whom it waits for; call it before preparing the store, so that what is prepared is what
    is held."""
    store = Path(store)
    store.parent.mkdir(parents=True, exist_ok=True)
    _hold(_store_readers(store), str(store), progress)


def writing_store(store: str | Path) -> contextlib.AbstractContextManager[None]:
    """Hold ``store`` exclusively while a build replaces it: StoreInUse, naming the process,
    when another process holds it for reading (:func:`hold_store`); this process's own hold
    does not count."""
    store = Path(store)

    def refusal(holder: str) -> Exception:
        return StoreInUse(
            f"{store}: in use by {holder}, a run that reads it; replacing it would change "
            "its data under it: wait for that run to end, or build the store elsewhere"
        )

    return _writing(_store_readers(store), refusal)


def hold_data(root: str | Path, progress: Callable[[str], None] | None = None) -> None:
    """Hold the dataset ``root`` for reading until this process ends: a synthesis or
    download of another process into it is refused from now on. Waits while another process
    writes it, telling ``progress`` whom it waits for. A root this process may not write is
    held only where its readers file exists (where it does not, no writer took it either)."""
    root = Path(root)
    _hold(root / DATA_READERS_FILE, str(root), progress)


def writing_data(root: str | Path, command: str) -> contextlib.AbstractContextManager[None]:
    """Hold the dataset ``root`` exclusively while ``command`` ("a synthesis", "a download")
    writes into it: DataInUse, naming the process, when another process holds it for reading
    (:func:`hold_data`); this process's own hold does not count."""
    root = Path(root)

    def refusal(holder: str) -> Exception:
        return DataInUse(
            f"{root}: in use by {holder}, a run that reads it; {command} into it would change "
            "its data under it: wait for that run to end, or write the data elsewhere"
        )

    return _writing(root / DATA_READERS_FILE, refusal)
