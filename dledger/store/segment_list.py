"""SegmentList: DLedger's MmapFileList — fixed-size segment files named by their 20-digit
start offset, mapped and registered in a compiled MappedTable.

New segments are preallocated with posix_fallocate (a write into a sparse mapping on a
full disk would kill the process with SIGBUS); ENOSPC becomes DISK_FULL. A spare next
segment can be prepared off the hot path (see `prepare_next`), so a roll only swaps it in.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import numpy as np

from dledger._native import impl
from dledger.codes import CorruptStoreError, DLedgerError, ResponseCode
from dledger.store import failpoints
from dledger.store.kvfile import fsync_dir
from dledger.store.layout import is_segment_name, offset_to_name

log = logging.getLogger(__name__)

_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_libc = ctypes.CDLL(None, use_errno=True)
_fallocate = getattr(_libc, "fallocate", None)
if _fallocate is not None:
    _fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    _fallocate.restype = ctypes.c_int


def punch_hole(fd: int, offset: int, length: int) -> bool:
    """Deallocate bytes [offset, offset + length) of the open file `fd`, keeping its
    size (Linux `fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)`): they read as
    zeros from now on, through every mapping too, and nothing is written. False when the
    system or the file system cannot (the bytes are unchanged then).

    Raises:
        OSError: the call failed for another reason (EIO, EBADF...).
    """
    if _fallocate is None or length <= 0:
        return False
    if _fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, offset, length) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):  # EINVAL: a file system without the mode
        return False
    raise OSError(err, os.strerror(err))


class SegmentList:
    """The segment files of one directory (data or index) and their mappings.

    Args:
        directory: where the segment files live (created unless read-only).
        file_size: the fixed size of every segment.
        read_only: map files read-only and never create, extend or delete any.
        keep_fds: give the table an open descriptor of each segment file beside its
            mapping, for appends written through the file (`LogCore.write_through`);
            the table closes it.
    """

    def __init__(
        self, directory: str | os.PathLike[str], file_size: int, read_only: bool = False, keep_fds: bool = False
    ) -> None:
        self.directory = Path(directory)
        self.file_size = file_size
        self.read_only = read_only
        self.keep_fds = keep_fds and not read_only
        self.table = impl.MappedTable(file_size)
        self.foreign_files: list[str] = []
        self._spare: tuple[int, Any] | None = None
        # Held while a segment file is created and installed (as the spare or by a
        # roll) and while one is removed: a warm-ahead pass creating the file at the end
        # must never race a truncation deleting the file at that offset, or the pass
        # could install a mapping of a deleted file, and appends written there vanish.
        self._files_lock = threading.RLock()

    # -- naming

    def path_of(self, offset: int) -> Path:
        """Path of the segment starting at `offset`."""
        return self.directory / offset_to_name(offset)

    def locate(self, offset: int) -> tuple[Path, int]:
        """(file, offset inside it) for a logical offset."""
        start = offset - offset % self.file_size
        return self.path_of(start), offset - start

    # -- loading

    def load(self) -> None:
        """Map every segment in the directory, checking names, sizes and contiguity.

        A last segment shorter than the configured size (a crash while creating it) is
        extended with zeros; any other size mismatch, a gap or an overlap is an error.
        """
        if not self.directory.is_dir():
            if self.directory.exists():
                raise CorruptStoreError(str(self.directory), 0, "is not a directory")
            return
        names = sorted(os.listdir(self.directory))
        segments = [n for n in names if is_segment_name(n)]
        self.foreign_files = [n for n in names if not is_segment_name(n) and not n.endswith(".tmp")]
        for name in self.foreign_files:
            log.warning("ignoring foreign file %s in %s", name, self.directory)
        for k, name in enumerate(segments):
            path = self.directory / name
            offset = int(name)
            if offset % self.file_size:
                raise CorruptStoreError(
                    str(path), 0, f"name is not a multiple of the segment size {self.file_size} (overlapping segments?)"
                )
            if self.table.count and offset != self.table.end_offset:
                raise CorruptStoreError(
                    str(path), 0, f"segment gap: expected {offset_to_name(self.table.end_offset)} before it"
                )
            if not path.is_file():  # a directory or a device by that name: no segment
                raise CorruptStoreError(str(path), 0, "is not a regular file")
            size = path.stat().st_size
            if size != self.file_size:
                if size < self.file_size and k == len(segments) - 1 and not self.read_only:
                    log.warning("extending short last segment %s from %d to %d bytes", path, size, self.file_size)
                    self._preallocate(path)
                elif size < self.file_size and k == len(segments) - 1:
                    raise CorruptStoreError(
                        str(path), size, f"last segment is short ({size} of {self.file_size} bytes)"
                    )
                else:
                    raise CorruptStoreError(
                        str(path), size, f"segment is {size} bytes, the configured size is {self.file_size}"
                    )
            self._push(self._map(path), offset)

    @staticmethod
    def _open(path: Path, flags: int) -> int:
        """os.open of a segment file; failing, DISK_ERROR naming the file."""
        try:
            return os.open(path, flags)
        except OSError as exc:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"cannot open segment {path}: {exc.strerror}") from exc

    def _map(self, path: Path) -> mmap.mmap:
        fd = self._open(path, os.O_RDONLY if self.read_only else os.O_RDWR)
        try:
            access = mmap.ACCESS_READ if self.read_only else mmap.ACCESS_WRITE
            return mmap.mmap(fd, self.file_size, access=access)
        finally:
            os.close(fd)

    def _push(self, mapped: mmap.mmap, offset: int) -> None:
        """Add a mapped segment to the table, with an open descriptor when keep_fds."""
        if not self.keep_fds:
            self.table.push(mapped, offset)
            return
        fd = self._open(self.path_of(offset), os.O_RDWR)
        try:
            self.table.push(mapped, offset, fd)
        except BaseException:
            os.close(fd)
            raise

    def _preallocate(self, path: Path) -> None:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"cannot create segment {path}: {exc.strerror}") from exc
        try:
            os.posix_fallocate(fd, 0, self.file_size)
        except OSError as exc:
            os.close(fd)
            fd = -1
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                path.unlink(missing_ok=True)
                free = shutil.disk_usage(path.parent).free
                raise DLedgerError(
                    ResponseCode.DISK_FULL,
                    f"no space to create segment {path}: it needs {self.file_size:,} bytes, {free:,} are free",
                ) from exc
            raise DLedgerError(ResponseCode.DISK_ERROR, f"cannot preallocate {path}: {exc}") from exc
        finally:
            if fd >= 0:
                os.close(fd)

    # -- growth

    def _create(self, offset: int) -> mmap.mmap:
        if self.read_only:
            raise DLedgerError(ResponseCode.DISK_ERROR, "store is read-only")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"cannot create {self.directory}: {exc.strerror}") from exc
        path = self.path_of(offset)
        self._preallocate(path)
        fsync_dir(self.directory)
        failpoints.hit("mid_segment_roll")
        return self._map(path)

    def prepare_next(self) -> None:
        """Create and map the segment after the last one ahead of time (warm-ahead).
        A roll or a truncation meanwhile waits for it (see `_files_lock`)."""
        if self.read_only:
            return
        with self._files_lock:
            if not self.table.count:
                return
            offset = self.table.end_offset
            if self._spare is None or self._spare[0] != offset:
                self._spare = (offset, self._create(offset))

    def spare(self) -> tuple[int, Any] | None:
        """The prepared next segment, if any: (offset, mapping)."""
        with self._files_lock:
            return self._spare

    def roll(self, offset: int) -> None:
        """Map a segment starting at `offset` as the new last one (the store's roller)."""
        with self._files_lock:
            spare, self._spare = self._spare, None
            mapped = spare[1] if spare is not None and spare[0] == offset else self._create(offset)
            self._push(mapped, offset)

    # -- the page cache

    def release(self, frm: int, to: int) -> None:
        """Hand the pages of [frm, to) back to the kernel: this store's mapping lets go
        of them and the clean ones leave the page cache (POSIX_FADV_DONTNEED). The bytes
        stay in the files and are read again on the next access. The kernel drops whole
        folios only: one that [frm, to) covers in part stays.

        Raises:
            OSError: the kernel refused (the pages stay where they are).
        """
        table = self.table
        if not table.count:
            return
        start, end = max(frm, table.first_offset), min(to, table.end_offset)
        if end <= start:
            return
        table.unmap_pages(start, end)
        pos = start
        while pos < end:
            path, lo = self.locate(pos)
            n = min(self.file_size - lo, end - pos)
            pos += n
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue  # deleted meanwhile (retention): nothing left to release
            try:
                os.posix_fadvise(fd, lo, n, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)

    # -- shrinking

    def drop_last(self) -> None:
        """Unmap and delete the last segment."""
        with self._files_lock:
            offset = self.table.end_offset - self.file_size
            self.table.pop_last()
            self._unlink(offset)

    def drop_first(self) -> None:
        """Unmap and delete the first segment."""
        with self._files_lock:
            offset = self.table.first_offset
            self.table.pop_first()
            self._unlink(offset)

    def truncate_to(self, offset: int) -> None:
        """Delete every segment that starts after `offset` (a segment starting exactly at
        `offset` is kept, as DLedger's truncateOffset does), and a prepared spare segment
        that no longer follows the last one (its file would leave a gap)."""
        with self._files_lock:
            while self.table.count and self.table.end_offset - self.file_size > offset:
                self.drop_last()
            self._forget_spare()

    def drop_all(self) -> None:
        """Delete every segment (and a prepared spare)."""
        with self._files_lock:
            while self.table.count:
                self.drop_last()
            self._forget_spare()

    def _forget_spare(self) -> None:
        """Drop a spare that no longer follows the last segment, and delete its file (its
        mapping goes with the last reference: a warm-ahead pass may still touch it)."""
        with self._files_lock:
            spare, self._spare = self._spare, None
            if spare is not None and spare[0] != self.table.end_offset:
                self._unlink(spare[0])

    def _unlink(self, offset: int) -> None:
        if not self.read_only:
            self.path_of(offset).unlink(missing_ok=True)

    def zero_range(self, start: int, end: int) -> None:
        """Zero [start, end), skipping 64 KiB chunks that are zero already (so untouched
        preallocated pages are not dirtied)."""
        chunk = 1 << 16
        pos = start
        while pos < end and self.table.count:
            seg_end = pos - (pos - self.table.first_offset) % self.file_size + self.file_size
            stop = min(end, seg_end, pos + chunk - pos % chunk)
            if self.table.first_offset <= pos < self.table.end_offset:
                data = np.frombuffer(self.table.read(pos, stop - pos), dtype=np.uint8)
                if data.any():
                    self.table.zero(pos, stop - pos)
            pos = stop

    def clear_range(self, start: int, end: int) -> None:
        """Make [start, end) read as zeros when nothing reads or writes those bytes again
        (the dead head of a prefix reset): the file system deallocates them
        (`punch_hole`: no write, and their disk space is freed) or, where it cannot or
        the punch fails, they are zeroed and msynced (`zero_range`). A punch is durable
        once the file system commits it: until then a crash may bring the old bytes
        back, which recovery clears again for the head blank of the last reset."""
        table = self.table
        if not table.count:
            return
        pos, end = max(start, int(table.first_offset)), min(end, int(table.end_offset))
        while pos < end:
            path, lo = self.locate(pos)
            n = min(self.file_size - lo, end - pos)
            fd = self._open(path, os.O_RDWR)
            try:
                punched = punch_hole(fd, lo, n)
            except OSError as exc:  # the zeros below still clear them, or fail as writes do
                log.warning("cannot punch a hole in %s (%s): zeroing the bytes instead", path, exc.strerror)
                punched = False
            finally:
                os.close(fd)
            if not punched:
                self.zero_range(pos, pos + n)
                table.msync(pos, pos + n)
            pos += n

    def close(self) -> None:
        """Unmap everything (files stay)."""
        with self._files_lock:
            while self.table.count:
                self.table.pop_last()
            self._spare = None
