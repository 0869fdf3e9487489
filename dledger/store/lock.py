"""The `lock` file of a node directory: one writer per store.

A writable open of a store (a server, a cluster member, `dledger.open_log`, a writable
`MmapLogStore`) holds an exclusive `fcntl.flock` on `<node_dir>/lock` until it closes
the store; the file records the holder's pid. A second writer, in the same process or
another, fails at once with a `DLedgerError` naming that pid. The kernel drops the lock
when the holder's file is closed, also when the process is killed, so a crash never
leaves a store locked. The file itself stays (removing it would race with a new
holder); Java DLedger ignores files it does not know, so the directory stays
byte-compatible. Read-only opens take no lock and never create the file.

A child `fork()`ed while a store is open inherits the lock with the store's mappings,
and its appends went to the parent's next positions, which the parent then wrote again
(helper E: the child's acknowledged entries gone, or a store that no longer opened). So
in the child every store whose lock the parent held turns read-only at once (its owner's
`state`): it refuses writes, and its `close()` does nothing; open the store again in the
child after the parent closed it.
"""

from __future__ import annotations

import fcntl
import os
import weakref
from pathlib import Path
from typing import Any

from dledger._native import impl
from dledger.codes import DLedgerError, ResponseCode
from dledger.store.layout import LOCK_FILE

_HELD: weakref.WeakSet[StoreLock] = weakref.WeakSet()
"""The locks this process holds (the child of a fork inherits them)."""


def _after_fork_in_child() -> None:
    for held in list(_HELD):
        owner = held.owner() if held.owner is not None else None
        if owner is not None:
            owner.state = impl.STATE_READ_ONLY  # the parent writes this store, not us
            # and close() does nothing: the store's locks may have been held by the
            # parent's threads at the fork, and are held in this copy for good
            owner.close = _nothing


def _nothing() -> None:
    """A forked child's `close()` of its parent's store."""


os.register_at_fork(after_in_child=_after_fork_in_child)

__all__ = ["LOCK_FILE", "StoreLock", "lock_holder"]


def _read_pid(fd: int) -> int | None:
    try:
        raw = os.pread(fd, 64, 0)
    except OSError:
        return None
    text = raw.decode("ascii", "replace").strip()
    key, _, value = text.partition("=")
    return int(value) if key == "pid" and value.isdigit() else None


def lock_holder(node_dir: str | os.PathLike[str]) -> int | None:
    """The pid of the process holding `node_dir`'s store lock, 0 when it is held but
    the pid is not recorded (yet), None when nobody holds it. Takes no lock and writes
    nothing (a shared lock is tried and released at once)."""
    path = Path(node_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_pid(fd) or 0
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


class StoreLock:
    """An exclusive lock on a node directory, held from `acquire()` to `release()`.

    Args:
        node_dir: the store's directory (it must exist).
        owner: the store the lock is for: in a child forked while the lock is held its
            `state` becomes read-only (see the module docstring).
    """

    def __init__(self, node_dir: str | os.PathLike[str], owner: Any = None) -> None:
        self.path = Path(node_dir) / LOCK_FILE
        self._fd: int | None = None
        self.owner = weakref.ref(owner) if owner is not None else None

    @property
    def held(self) -> bool:
        """True between `acquire()` and `release()`."""
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock without waiting and record this process's pid in the file.

        Raises:
            DLedgerError: DISK_ERROR naming the holder's pid when another
                writer holds the store (in this process or another), or when the lock
                file cannot be opened.
        """
        if self._fd is not None:
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"cannot open the store lock {self.path}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            who = f"process {pid}" if pid else "another process"
            if pid == os.getpid():
                who += " (this process: the store is already open for writing)"
            raise DLedgerError(
                ResponseCode.DISK_ERROR,
                f"store {self.path.parent} is locked by {who}; stop that writer first, or open the store read-only",
            ) from None
        except OSError as exc:
            os.close(fd)
            raise DLedgerError(ResponseCode.DISK_ERROR, f"cannot lock {self.path}: {exc}") from exc
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid={os.getpid()}\n".encode("ascii"), 0)
        except OSError:
            pass  # the lock holds without the pid; a second writer then names no pid
        self._fd = fd
        _HELD.add(self)

    def release(self) -> None:
        """Drop the lock (closing the file releases it); the file stays."""
        fd, self._fd = self._fd, None
        _HELD.discard(self)
        if fd is not None:
            os.close(fd)
