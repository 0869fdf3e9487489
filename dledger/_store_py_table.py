"""`MappedTable` of the pure-Python twin: the mapped segments of one file list.

Part of `dledger._store_py` (see there); the compiled counterpart is `dledger/_table.pxi`,
whose pointer helpers (`at`, `segment_of`, `fd_at`) are the private `_locate`,
`_segment_of` and `_fd_at` here.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterable
from typing import Any

from dledger.codes import DLedgerError, ResponseCode
from dledger.entry import MIN_BLANK_LEN

_MADV_POPULATE_WRITE = 23


class MappedTable:
    """The contiguous, fixed-size mapped segments of one file list (data or index)."""

    def __init__(self, file_size: int) -> None:
        if file_size <= MIN_BLANK_LEN:
            raise ValueError("segment size too small")
        self.file_size = file_size
        self.first_offset = -1
        self.writable = True
        self._objs: list[Any] = []
        self._views: list[memoryview] = []
        self._fds: list[int] = []

    @property
    def count(self) -> int:
        return len(self._views)

    @property
    def end_offset(self) -> int:
        return -1 if not self._views else self.first_offset + len(self._views) * self.file_size

    def segments(self) -> list[Any]:
        """The mapped objects, first to last."""
        return list(self._objs)

    def push(self, obj: Any, from_offset: int, fd: int = -1) -> None:
        """Add a mapped segment after the last one (or as the first of an empty table);
        `fd`, when given, is an open descriptor of its file the table takes over."""
        if self._views and from_offset != self.end_offset:
            raise ValueError(f"segment offset {from_offset} does not follow the table")
        if from_offset % self.file_size:
            raise ValueError(f"segment offset {from_offset} is not a multiple of the size")
        view = memoryview(obj)
        if len(view) != self.file_size:
            view.release()
            raise ValueError(f"segment length {len(obj)} != configured size {self.file_size}")
        if view.readonly:
            self.writable = False
        if not self._views:
            self.first_offset = from_offset
        self._objs.append(obj)
        self._views.append(view)
        self._fds.append(fd)

    def pop_first(self) -> None:
        """Drop the first segment (prefix deletion)."""
        if not self._views:
            raise IndexError("empty table")
        self._views.pop(0).release()
        self._objs.pop(0)
        _close(self._fds.pop(0))
        self.first_offset = self.first_offset + self.file_size if self._views else -1

    def pop_last(self) -> None:
        """Drop the last segment (truncation)."""
        if not self._views:
            raise IndexError("empty table")
        self._views.pop().release()
        self._objs.pop()
        _close(self._fds.pop())
        if not self._views:
            self.first_offset = -1

    def _locate(self, offset: int, n: int) -> tuple[memoryview, int] | None:
        """(segment view, offset inside it) when one segment holds [offset, offset+n)."""
        k, inner = self._segment_of(offset)
        if k < 0 or inner + n > self.file_size:
            return None
        return self._views[k], inner

    def _segment_of(self, offset: int) -> tuple[int, int]:
        """(which segment holds `offset`, offset inside it), or (-1, -1)."""
        if not self._views or offset < self.first_offset:
            return -1, -1
        k, inner = divmod(offset - self.first_offset, self.file_size)
        return (k, inner) if k < len(self._views) else (-1, -1)

    def _fd_at(self, offset: int) -> tuple[int, int]:
        """(descriptor of the segment holding `offset`, -1 if none or not kept; the
        offset inside it)."""
        k, inner = self._segment_of(offset)
        return (-1 if k < 0 else self._fds[k]), inner

    def fd_of(self, offset: int) -> int:
        """The open descriptor of the segment holding `offset`, -1 when it has none."""
        return self._fd_at(offset)[0]

    def read(self, offset: int, n: int) -> bytes:
        """Copy of [offset, offset+n), which must lie inside one segment."""
        loc = self._locate(offset, n)
        if loc is None:
            raise IndexError(f"range {offset}+{n} is not mapped")
        view, inner = loc
        return bytes(view[inner : inner + n])

    def write(self, offset: int, data: bytes) -> None:
        """Overwrite [offset, offset+len(data)) inside one segment."""
        loc = self._locate(offset, len(data))
        if loc is None or not self.writable:
            raise IndexError(f"range {offset}+{len(data)} is not mapped writable")
        view, inner = loc
        view[inner : inner + len(data)] = data

    def zero(self, offset: int, n: int) -> None:
        """Zero [offset, offset+n) inside one segment."""
        self.write(offset, bytes(n))

    def _spans(self, frm: int, to: int) -> Iterable[tuple[Any, int, int]]:
        if not self._views or to <= frm:
            return
        start, end = max(frm, self.first_offset), min(to, self.end_offset)
        while start < end:
            if not self._views or start < self.first_offset:
                return
            k = (start - self.first_offset) // self.file_size
            if k >= len(self._objs):
                return
            seg_from = self.first_offset + k * self.file_size
            lo, hi = start - seg_from, min(end - seg_from, self.file_size)
            yield self._objs[k], lo, hi
            start = seg_from + hi

    def msync(self, frm: int, to: int) -> None:
        """Make [frm, to) durable (msync MS_SYNC)."""
        for obj, lo, hi in self._spans(frm, to):
            start = lo - lo % mmap.PAGESIZE
            obj.flush(start, hi - start)

    def prefault(self, frm: int, to: int) -> None:
        """Fault [frm, to) in writable without changing its bytes."""
        for obj, lo, hi in self._spans(frm, to):
            start = lo - lo % mmap.PAGESIZE
            try:
                obj.madvise(_MADV_POPULATE_WRITE, start, hi - start)
            except OSError:
                for off in range(start, hi, mmap.PAGESIZE):
                    obj[off]  # read fault: the page is in the cache afterwards

    def unmap_pages(self, frm: int, to: int) -> None:
        """Drop this mapping's page-table entries for the whole pages inside [frm, to)
        (MADV_DONTNEED): the page cache keeps them, dirty ones stay dirty, and the next
        access maps them again."""
        page = mmap.PAGESIZE
        for obj, lo, hi in self._spans(frm, to):
            start, end = -(-lo // page) * page, hi - hi % page
            if end > start:
                obj.madvise(mmap.MADV_DONTNEED, start, end - start)


def _close(fd: int) -> None:
    if fd >= 0:
        os.close(fd)


def mapped_at(table: MappedTable, pos: int, n: int) -> tuple[memoryview, int]:
    """(segment view, offset inside it) of [pos, pos+n) in `table`; DISK_ERROR when no
    one segment holds it."""
    loc = table._locate(pos, n)
    if loc is None:
        raise DLedgerError(ResponseCode.DISK_ERROR, f"data position {pos} is not mapped")
    return loc
