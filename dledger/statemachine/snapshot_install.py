"""Receiving a snapshot chunk by chunk into `install_tmp/` (the follower's half of the
chunked InstallSnapshot: dledger.node_snapshots feeds it the chunks it gets).

Each chunk carries its offset in `data` and zlib's CRC-32 of its bytes. A chunk is
written only when its CRC matches and its offset is the next expected one; otherwise it
is refused with a `DLedgerError` (INSTALL_SNAPSHOT_ERROR) and nothing received so far is
lost, so the sender restarts from `resume_offset()` after a broken stream, not from
zero. `finish` checks the whole file against the sender's CRC-32 and size and publishes
it as `snapshot_<lastIncludedIndex>` (as a save's commit does).

The file is streamed to disk as it arrives: each time another `STREAM_WINDOW` of bytes
has been written, the kernel is told to write that window back and to drop the one
before it from the page cache (`drop_cached`), so an install holds about two windows of
dirty or cached pages, not the whole snapshot, and its final fsync is short.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

from dledger.checksum import crc32 as crc32_of
from dledger.codes import DLedgerError, ResponseCode
from dledger.statemachine.snapshot_files import (
    DATA_FILE,
    STREAM_WINDOW,
    Snapshot,
    drop_cached,
    file_ops,
    remove_tree,
)

_ERR = ResponseCode.INSTALL_SNAPSHOT_ERROR


class SnapshotInstall:
    """One snapshot being received into `install_tmp/`; made by `SnapshotStore.begin_install`.

    Args:
        directory: the `install_tmp/` directory (recreated empty).
        last_index: the snapshot's lastIncludedIndex.
        last_term: its lastIncludedTerm.
        lock: the store's lock (one lock for installs, saves and retention).
        publish: the store's step that verifies freshness and publishes the directory
            (with the CRC-32 and size of the bytes written).
    """

    def __init__(
        self,
        directory: Path,
        last_index: int,
        last_term: int,
        lock: threading.RLock,
        publish: Callable[[Path, int, int, tuple[int, int]], Snapshot],
    ) -> None:
        self.directory = directory
        self.last_index = last_index
        self.last_term = last_term
        self._lock = lock
        self._publish = publish
        self._received = 0
        self._crc = 0  # CRC-32 of the bytes written so far (finish checks it: no read-back)
        self._window = (0, 0)  # the last two write-back marks (see _stream_out)
        self._state = "receiving"
        remove_tree(directory)
        file_ops().mkdir(directory)
        self._fd: int | None = file_ops().open_new(directory / DATA_FILE)

    @property
    def active(self) -> bool:
        """True while chunks are accepted (not finished, aborted or superseded)."""
        return self._state == "receiving"

    def resume_offset(self) -> int:
        """The offset the next chunk must start at: the bytes received and written so far."""
        with self._lock:
            return self._received

    def write_chunk(self, offset: int, data: bytes, crc32: int) -> int:
        """Write the chunk at `offset` after checking its CRC-32; returns the next offset.

        Raises:
            DLedgerError: INSTALL_SNAPSHOT_ERROR when the CRC does not match or `offset`
                is not `resume_offset()` (nothing is written; what was received stays),
                NEWER_INSTALL_SNAPSHOT_REQUEST_EXIST when a newer install superseded
                this one, DISK_ERROR when the write failed (the file is cut back to the
                last good offset).
        """
        with self._lock:
            fd = self._check_active()
            if offset != self._received:
                raise DLedgerError(_ERR, f"chunk at offset {offset}, expected {self._received}: resume from there")
            actual = crc32_of(data)
            if actual != crc32:
                raise DLedgerError(_ERR, f"chunk at offset {offset}: CRC-32 {actual:#010x}, sender says {crc32:#010x}")
            try:
                written = 0
                view = memoryview(data)
                while written < len(view):
                    written += os.pwrite(fd, view[written:], offset + written)
            except OSError as exc:
                os.ftruncate(fd, self._received)
                raise DLedgerError(ResponseCode.DISK_ERROR, f"writing snapshot chunk at {offset}: {exc}") from exc
            self._received += len(data)
            self._crc = crc32_of(data, self._crc)
            self._stream_out(fd)
            return self._received

    def _stream_out(self, fd: int) -> None:
        """Once a window past the last mark is written: queue it for write-back and drop
        the window before it (written back since the last mark, as a rule) from the cache."""
        older, last = self._window
        if self._received - last >= STREAM_WINDOW:
            drop_cached(fd, older, self._received)
            self._window = (last, self._received)

    def finish(self, last_index: int, last_term: int, crc32: int, size: int) -> Snapshot:
        """Check the whole `data` against the sender's CRC-32 and size, then publish it.

        Raises:
            DLedgerError: UNEXPECTED_ARGUMENT when index or term differ from the ones
                the install began with; INSTALL_SNAPSHOT_ERROR when fewer bytes arrived
                than `size` (the install stays: resume it), or more, or the CRC-32 does
                not match, or the snapshot is no longer newer than the latest one (the
                install is dropped); NEWER_INSTALL_SNAPSHOT_REQUEST_EXIST when
                superseded; DISK_ERROR when publishing failed.
        """
        with self._lock:
            fd = self._check_active()
            if (last_index, last_term) != (self.last_index, self.last_term):
                raise DLedgerError(
                    ResponseCode.UNEXPECTED_ARGUMENT,
                    f"finish for ({last_index}, {last_term}) but installing ({self.last_index}, {self.last_term})",
                )
            if size > self._received:
                raise DLedgerError(_ERR, f"received {self._received} of {size} bytes: resume from {self._received}")
            try:
                file_ops().fsync(fd, self.directory / DATA_FILE)
                self._close()
                actual = (self._crc, self._received)  # of the bytes written: the file is not read back
                if actual != (crc32, size):
                    raise DLedgerError(
                        _ERR,
                        f"snapshot data has CRC-32 {actual[0]:#010x} and {actual[1]} bytes, sender says "
                        f"{crc32:#010x} and {size}: install dropped",
                    )
                snapshot = self._publish(self.directory, last_index, last_term, actual)
            except BaseException:
                self._fail()
                raise
            self._state = "done"
            return snapshot

    def abort(self) -> None:
        """Drop the install and its directory (nothing when it has already ended)."""
        with self._lock:
            if self.active:
                self._fail()

    def supersede(self) -> None:
        """Mark this install as replaced by a newer one (called by the store, under its
        lock, before it recreates `install_tmp/`)."""
        with self._lock:
            if self.active:
                self._close()
                self._state = "superseded"

    def _check_active(self) -> int:
        if self._state == "superseded":
            raise DLedgerError(
                ResponseCode.NEWER_INSTALL_SNAPSHOT_REQUEST_EXIST,
                f"install of snapshot {self.last_index} was superseded by a newer one",
            )
        if self._state != "receiving" or self._fd is None:
            raise DLedgerError(_ERR, f"install of snapshot {self.last_index} has ended ({self._state})")
        return self._fd

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _fail(self) -> None:
        self._close()
        self._state = "failed"
        remove_tree(self.directory)
