"""Pure-Python reference twin of the compiled `dledger._store`.

Same classes, functions and results, written for clarity. Property tests prove the
two agree byte for byte; set DLEDGER_NO_EXTENSIONS=1 to run the package on this one.
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from dledger.codes import DLedgerError, ResponseCode
from dledger.entry import (
    HEADER_SIZE,
    INDEX_UNIT_SIZE,
    MAGIC_BLANK,
    MAGIC_NOOP,
    MAGIC_NORMAL,
    MAX_ENTRY_SIZE,
    MIN_BLANK_LEN,
    Entry,
    ScanResult,
)

COMPILED = False
CRC_IMPL = "zlib"

STOP_END, STOP_BAD_HEADER, STOP_CRC, STOP_INDEX, STOP_TERM, STOP_POS = 0, 1, 2, 3, 4, 5
STOP_BLANK, STOP_NO_SEGMENT = 6, 7
STATE_OK, STATE_DISK_FULL, STATE_DISK_ERROR, STATE_READ_ONLY = 0, 1, 2, 3
FAIL_NONE, FAIL_AFTER_DATA_BEFORE_INDEX = 0, 1

_HEADER = struct.Struct(">iiqqqiiii")
_UNIT = struct.Struct(">iqiqq")
_BLANK = struct.Struct(">ii")
_MADV_POPULATE_WRITE = 23
STAGE_MAX_BYTES = 1 << 20  # write_through: staged bytes written per pwrite at most


def crc32(data: Any) -> int:
    """CRC-32 of `data` (the values of zlib and java.util.zip.CRC32)."""
    return zlib.crc32(data) & 0xFFFFFFFF


def _crc_field(body: Any) -> int:
    value = zlib.crc32(body)
    return value - (1 << 32) if value >= 1 << 31 else value


def encode_entry(magic: int, index: int, term: int, pos: int, body: bytes, write_crc: bool = True) -> bytes:
    """Encode one entry: the 48-byte big-endian header followed by the body."""
    crc = _crc_field(body) if write_crc else 0
    size = HEADER_SIZE + len(body)
    return _HEADER.pack(magic, size, index, term, pos, 0, 0, crc, len(body)) + body


def decode_header(data: Any, offset: int = 0) -> tuple[int, ...]:
    """Decode the header at `offset`: (magic, size, index, term, pos, channel, chain_crc,
    body_crc, body_size)."""
    if offset < 0 or offset + HEADER_SIZE > len(data):
        raise ValueError("header out of range")
    return _HEADER.unpack_from(data, offset)


def encode_index_unit(magic: int, pos: int, size: int, index: int, term: int) -> bytes:
    """Encode one 32-byte index unit."""
    return _UNIT.pack(magic, pos, size, index, term)


def decode_index_unit(data: Any, offset: int = 0) -> tuple[int, ...]:
    """Decode the index unit at `offset`: (magic, pos, size, index, term)."""
    if offset < 0 or offset + INDEX_UNIT_SIZE > len(data):
        raise ValueError("index unit out of range")
    return _UNIT.unpack_from(data, offset)


class Quota:
    """Per-second byte budget over a window of 5 one-second slots (DLedger's Quota)."""

    def __init__(self, max_per_second: int) -> None:
        self.max_per_second = max_per_second
        self._samples = [0] * 5
        self._seconds = [-1] * 5

    def sample(self, value: int, now_ms: int) -> None:
        """Account `value` bytes to the second containing `now_ms`."""
        sec = now_ms // 1000
        slot = sec % 5
        if self._seconds[slot] != sec:
            self._seconds[slot] = sec
            self._samples[slot] = value
        else:
            self._samples[slot] += value

    def validate_now(self, now_ms: int) -> bool:
        """True when this second's budget is used up (the caller must wait)."""
        sec = now_ms // 1000
        slot = sec % 5
        return self._seconds[slot] == sec and self._samples[slot] >= self.max_per_second

    def left_now_ms(self, now_ms: int) -> int:
        """Milliseconds until the next second starts."""
        return 1000 - now_ms % 1000


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

    def locate(self, offset: int, n: int) -> tuple[memoryview, int] | None:
        """(segment view, offset inside it) when one segment holds [offset, offset+n)."""
        k, inner = self.segment_of(offset)
        if k < 0 or inner + n > self.file_size:
            return None
        return self._views[k], inner

    def segment_of(self, offset: int) -> tuple[int, int]:
        """(which segment holds `offset`, offset inside it), or (-1, -1)."""
        if not self._views or offset < self.first_offset:
            return -1, -1
        k, inner = divmod(offset - self.first_offset, self.file_size)
        return (k, inner) if k < len(self._views) else (-1, -1)

    def fd_at(self, offset: int) -> tuple[int, int]:
        """(descriptor of the segment holding `offset`, -1 if none or not kept; the
        offset inside it)."""
        k, inner = self.segment_of(offset)
        return (-1 if k < 0 else self._fds[k]), inner

    def fd_of(self, offset: int) -> int:
        """The open descriptor of the segment holding `offset`, -1 when it has none."""
        return self.fd_at(offset)[0]

    def read(self, offset: int, n: int) -> bytes:
        """Copy of [offset, offset+n), which must lie inside one segment."""
        loc = self.locate(offset, n)
        if loc is None:
            raise IndexError(f"range {offset}+{n} is not mapped")
        view, inner = loc
        return bytes(view[inner : inner + n])

    def write(self, offset: int, data: bytes) -> None:
        """Overwrite [offset, offset+len(data)) inside one segment."""
        loc = self.locate(offset, len(data))
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


def _put_unit(view: memoryview, at: int, magic: int, pos: int, size: int, index: int, term: int) -> None:
    _UNIT.pack_into(view, at, magic, pos, size, index, term)


class LogCore:
    """Appends and reads entries over a data table and an index table (see the compiled twin)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._lock_obj = threading.Lock()
        self.begin_index = -1
        self.end_index = -1
        self.end_term = -1
        self.write_pos = 0
        self.shrinks = 0
        self.exclusive = 0
        self.term = 0
        self.write_crc = True
        self.verify_crc = True
        self.state = STATE_OK
        self.failpoint = FAIL_NONE
        self.max_entry_size = MAX_ENTRY_SIZE
        self.allow_noop = True
        self.write_through = False
        self._stage: list[bytes] = []
        self._stage_len = 0
        self._stage_pos = 0
        self._stage_state = (-1, -1, -1)  # begin, end index, end term before the stage

    def _init_core(self, data: MappedTable, index: MappedTable, roller: Callable[[int, int], None]) -> None:
        self._data = data
        self._index = index
        self._roller = roller

    def _acquire(self) -> None:
        """Take the lock for a multi-step change (reads always take it here)."""
        self._lock_obj.acquire()
        self.exclusive += 1

    def _release(self) -> None:
        self.exclusive -= 1
        self._lock_obj.release()

    def _set_state(self, begin_index: int, end_index: int, end_term: int, write_pos: int) -> None:
        """Set the ledger bounds (recovery, truncate, reset). Caller holds the lock.
        Counts in `shrinks` when the end moves back."""
        if end_index < self.end_index or write_pos < self.write_pos:
            self.shrinks += 1
        self.begin_index, self.end_index, self.end_term, self.write_pos = begin_index, end_index, end_term, write_pos

    # -- write path

    def _check_writable(self) -> None:
        if self.state == STATE_OK:
            return
        if self.state == STATE_DISK_FULL:
            raise DLedgerError(ResponseCode.DISK_FULL, "disk full: appends refused")
        if self.state == STATE_DISK_ERROR:
            raise DLedgerError(ResponseCode.DISK_ERROR, "store failed after an I/O error")
        raise DLedgerError(ResponseCode.DISK_ERROR, "store is read-only")

    def _check_size(self, size: int) -> None:
        if size > self.max_entry_size or size + MIN_BLANK_LEN > self._data.file_size:
            limit = min(self.max_entry_size, self._data.file_size - MIN_BLANK_LEN)
            raise DLedgerError(
                ResponseCode.UNEXPECTED_ARGUMENT, f"entry of {size} bytes exceeds the maximum entry size {limit}"
            )

    def _roll(self, kind: int, offset: int) -> None:
        self._flush_stage()
        self._roller(kind, offset)

    def _write_entry(self, pos: int, data: Any) -> None:
        """Write an entry's bytes at `pos`: into the mapping, or (write_through) the stage."""
        if not self.write_through:
            view, at = self._data_at(pos, len(data))
            view[at : at + len(data)] = data
            return
        if self._stage and (self._stage_pos + self._stage_len != pos or self._stage_len + len(data) > STAGE_MAX_BYTES):
            self._flush_stage()
        if not self._stage:
            self._stage_pos = pos
            self._stage_state = (self.begin_index, self.end_index, self.end_term)
        self._stage.append(bytes(data))
        self._stage_len += len(data)

    def _failpoint_after_data(self) -> None:
        """The `after_data_before_index` crash point: with it set, the entry's bytes
        reach their file and the process dies before its index unit is written."""
        if self.failpoint == FAIL_AFTER_DATA_BEFORE_INDEX:
            self._flush_stage()
            os._exit(137)

    def _flush_stage(self) -> None:
        """pwrite the staged entries (if any); on failure the log ends again before them."""
        if not self._stage:
            return
        blob, pos = b"".join(self._stage), self._stage_pos
        self._stage, self._stage_len = [], 0
        # os.pwrite releases the GIL: the ledger shows its state before the staged
        # entries until they are written (as the compiled core does)
        advanced = (self.begin_index, self.end_index, self.end_term, self.write_pos)
        self.begin_index, self.end_index, self.end_term = self._stage_state
        self.write_pos = pos
        fd, rel = self._data.fd_at(pos)
        err = errno.EBADF if fd < 0 or rel + len(blob) > self._data.file_size else 0
        view = memoryview(blob)
        while not err and view:
            try:  # os.pwrite retries EINTR itself (PEP 475)
                view = view[os.pwrite(fd, view, rel + len(blob) - len(view)) :]
            except OSError as exc:
                err = exc.errno or errno.EIO
        if not err:
            self.begin_index, self.end_index, self.end_term, self.write_pos = advanced
            return
        full = err in (errno.ENOSPC, errno.EDQUOT)
        self.state = STATE_DISK_FULL if full else STATE_DISK_ERROR
        raise DLedgerError(
            ResponseCode.DISK_FULL if full else ResponseCode.DISK_ERROR,
            f"writing {len(blob)} bytes at data position {pos} failed: {os.strerror(err)}",
        )

    def _unit_slot(self, idx: int) -> tuple[memoryview, int]:
        off = idx * INDEX_UNIT_SIZE
        loc = self._index.locate(off, INDEX_UNIT_SIZE)
        if loc is None:
            if self._index.count and off != self._index.end_offset:
                raise DLedgerError(ResponseCode.DISK_ERROR, f"index slot {idx} is not mapped")
            self._roll(1, off - off % self._index.file_size)
            loc = self._index.locate(off, INDEX_UNIT_SIZE)
            if loc is None:
                raise DLedgerError(ResponseCode.DISK_ERROR, f"roller did not map index offset {off}")
        return loc

    def _data_at(self, pos: int, n: int) -> tuple[memoryview, int]:
        loc = self._data.locate(pos, n)
        if loc is None:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"data position {pos} is not mapped")
        return loc

    def _pre_append(self, size: int) -> int:
        fs = self._data.file_size
        if self._data.count == 0 or self.write_pos >= self._data.end_offset:
            self._roll(0, self.write_pos)
        rel = (self.write_pos - self._data.first_offset) % fs
        remaining = fs - rel
        if size + MIN_BLANK_LEN > remaining:
            view, at = self._data_at(self.write_pos, remaining)
            view[at : at + remaining] = _BLANK.pack(MAGIC_BLANK, remaining) + bytes(remaining - 8)
            # roll first: without a next segment (disk full) the log still ends here
            self._roll(0, self.write_pos + remaining)
            self.write_pos += remaining
        return self.write_pos

    def _append_one(self, body: bytes, magic: int) -> int:
        if self.term < self.end_term:
            raise DLedgerError(
                ResponseCode.INCONSISTENT_TERM, f"term {self.term} is below the last entry's term {self.end_term}"
            )
        size = HEADER_SIZE + len(body)
        idx = self.end_index + 1
        uview, uat = self._unit_slot(idx)
        pos = self._pre_append(size)
        self._write_entry(pos, encode_entry(magic, idx, self.term, pos, body, self.write_crc))
        self._failpoint_after_data()
        _put_unit(uview, uat, magic, pos, size, idx, self.term)
        self._publish(idx, self.term, pos + size)
        return idx

    def _publish(self, idx: int, term: int, end_pos: int) -> None:
        """Move the log's end to entry `idx` (written in full, unit included)."""
        self.end_index, self.end_term, self.write_pos = idx, term, end_pos
        if self.begin_index < 0:
            self.begin_index = idx

    def append(self, body: bytes) -> int:
        """Append one entry with the current `term`; returns its index."""
        if not isinstance(body, bytes):
            raise TypeError("body must be bytes")
        self._check_writable()
        self._check_size(HEADER_SIZE + len(body))
        with self._lock_obj:
            try:
                return self._append_one(body, MAGIC_NORMAL)
            finally:
                self._flush_stage()

    def append_noop(self) -> int:
        """Append an empty NOOP entry (magic 2) with the current `term`; returns its index."""
        self._check_writable()
        if not self.allow_noop:
            raise DLedgerError(ResponseCode.UNSUPPORTED, "NOOP entries are disabled (java_compat)")
        with self._lock_obj:
            try:
                return self._append_one(b"", MAGIC_NOOP)
            finally:
                self._flush_stage()

    def append_many(self, bodies: Iterable[bytes]) -> int:
        """Append several bodies as consecutive entries; returns the first index."""
        items = tuple(bodies)
        self._check_writable()
        for b in items:
            if type(b) is not bytes:
                raise TypeError("bodies must be bytes")
            self._check_size(HEADER_SIZE + len(b))
        with self._lock_obj:
            first = self.end_index + 1
            try:
                for b in items:
                    self._append_one(b, MAGIC_NORMAL)
            finally:
                self._flush_stage()
            return first

    def append_encoded(self, run: Any) -> int:
        """Append a run of already-encoded entries verbatim after validating every header."""
        self._check_writable()
        data = memoryview(run).cast("B")
        total = len(data)
        with self._lock_obj:
            fs = self._data.file_size
            idx, term, wp, off = self.end_index, self.end_term, self.write_pos, 0
            while off < total:
                if off + HEADER_SIZE > total:
                    raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"run ends inside a header at {off}")
                magic, size, e_idx, e_term, pos, _, _, crc, bsize = _HEADER.unpack_from(data, off)
                if magic not in (MAGIC_NORMAL, MAGIC_NOOP):
                    raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"bad magic {magic} at run offset {off}")
                if size < HEADER_SIZE or bsize + HEADER_SIZE != size or off + size > total:
                    raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"bad size {size} at run offset {off}")
                self._check_size(size)
                if e_idx != idx + 1:
                    raise DLedgerError(ResponseCode.INCONSISTENT_INDEX, f"run entry index {e_idx}, expected {idx + 1}")
                if e_term < term:
                    raise DLedgerError(
                        ResponseCode.INCONSISTENT_TERM, f"run entry term goes backwards at index {idx + 1}"
                    )
                if crc != 0 and self.verify_crc and _crc_field(data[off + HEADER_SIZE : off + size]) != crc:
                    raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"body CRC mismatch at index {idx + 1}")
                rel = wp % fs if self._data.count == 0 else (wp - self._data.first_offset) % fs
                if size + MIN_BLANK_LEN > fs - rel:
                    wp += fs - rel
                if pos != wp:
                    raise DLedgerError(
                        ResponseCode.INCONSISTENT_STATE, f"entry {idx + 1} has pos {pos} but lands at {wp}"
                    )
                idx, term, wp, off = idx + 1, e_term, wp + size, off + size
            off = count = 0
            try:
                while off < total:
                    magic, size, _, e_term, *_ = _HEADER.unpack_from(data, off)
                    idx = self.end_index + 1
                    uview, uat = self._unit_slot(idx)
                    pos = self._pre_append(size)
                    self._write_entry(pos, data[off : off + size])
                    self._failpoint_after_data()
                    _put_unit(uview, uat, magic, pos, size, idx, e_term)
                    self._publish(idx, e_term, pos + size)
                    off += size
                    count += 1
            finally:
                self._flush_stage()
            return count

    # -- read path

    def _locate(self, idx: int) -> tuple[memoryview, int, int, int]:
        if idx < self.begin_index or idx > self.end_index or self.begin_index < 0:
            raise DLedgerError(
                ResponseCode.INDEX_OUT_OF_RANGE, f"index {idx} outside [{self.begin_index}, {self.end_index}]"
            )
        uloc = self._index.locate(idx * INDEX_UNIT_SIZE, INDEX_UNIT_SIZE)
        if uloc is None:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"index unit {idx} is not mapped")
        _, pos, size, _, _ = _UNIT.unpack_from(*uloc)
        loc = self._data.locate(pos, size) if size >= HEADER_SIZE else None
        if loc is None:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"entry {idx} does not match its index unit (pos {pos})")
        view, at = loc
        _, h_size, h_idx, _, _, _, _, crc, _ = _HEADER.unpack_from(view, at)
        if h_idx != idx or h_size != size:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"entry {idx} does not match its index unit (pos {pos})")
        if crc != 0 and self.verify_crc and _crc_field(view[at + HEADER_SIZE : at + size]) != crc:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"body CRC mismatch for entry {idx} at pos {pos}")
        return view, at, pos, size

    def get(self, idx: int) -> Entry:
        """The entry at `idx` (raises DLedgerError INDEX_OUT_OF_RANGE outside the log)."""
        with self._lock_obj:
            view, at, pos, size = self._locate(idx)
            magic, _, _, term, _, _, _, crc, _ = _HEADER.unpack_from(view, at)
            return Entry(idx, term, pos, magic, bytes(view[at + HEADER_SIZE : at + size]), crc)

    def get_body(self, idx: int) -> bytes:
        """The body of the entry at `idx`."""
        with self._lock_obj:
            view, at, _, size = self._locate(idx)
            return bytes(view[at + HEADER_SIZE : at + size])

    def term_at(self, idx: int) -> int:
        """Term of the entry at `idx`, read from its index unit."""
        with self._lock_obj:
            if idx < self.begin_index or idx > self.end_index or self.begin_index < 0:
                raise DLedgerError(
                    ResponseCode.INDEX_OUT_OF_RANGE, f"index {idx} outside [{self.begin_index}, {self.end_index}]"
                )
            uloc = self._index.locate(idx * INDEX_UNIT_SIZE, INDEX_UNIT_SIZE)
            if uloc is None:
                raise DLedgerError(ResponseCode.DISK_ERROR, f"index unit {idx} is not mapped")
            return int(_UNIT.unpack_from(*uloc)[4])

    def read_run(self, from_index: int, max_bytes: int) -> tuple[bytes, int]:
        """Already-encoded entries from `from_index` on within one segment and `max_bytes`."""
        with self._lock_obj:
            view, at, start, size = self._locate(from_index)
            cur, idx = start + size, from_index
            while idx < self.end_index:
                loc = self._data.locate(cur, HEADER_SIZE)
                if loc is None:
                    break
                magic, size, h_idx, *_ = _HEADER.unpack_from(*loc)
                if magic == MAGIC_BLANK or cur + size - start > max_bytes or h_idx != idx + 1 or size < HEADER_SIZE:
                    break
                cur += size
                idx += 1
            return bytes(view[at : at + cur - start]), idx - from_index + 1

    def read_columns(self, from_index: int, max_count: int, max_bytes: int) -> tuple[Any, ...]:
        """Column-wise batch: (count, index, term, pos, offsets, bodies, magic) as in the
        compiled twin."""
        with self._lock_obj:
            if max_count <= 0 or from_index > self.end_index:
                return (0, bytearray(), bytearray(), bytearray(), bytearray(4), bytearray(), bytearray())
            self._locate(from_index)
            last = min(self.end_index, from_index + max_count - 1)
            sizes: list[int] = []
            total = 0
            for idx in range(from_index, last + 1):
                uloc = self._index.locate(idx * INDEX_UNIT_SIZE, INDEX_UNIT_SIZE)
                if uloc is None:
                    break
                size = _UNIT.unpack_from(*uloc)[2] - HEADER_SIZE
                if sizes and total + size > max_bytes:
                    break
                total += size
                sizes.append(size)
            if total > 0x7FFFFFFF:
                raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "column batch over 2 GiB")
            n = len(sizes)
            indexes, terms, positions, offsets, magics = [], [], [], [0], []
            bodies = bytearray()
            for k in range(n):
                view, at, pos, size = self._locate(from_index + k)
                header = _HEADER.unpack_from(view, at)
                indexes.append(from_index + k)
                terms.append(header[3])
                positions.append(pos)
                magics.append(header[0])
                bodies += view[at + HEADER_SIZE : at + size]
                offsets.append(len(bodies))
            return (
                n,
                bytearray(struct.pack(f"={n}q", *indexes)),
                bytearray(struct.pack(f"={n}q", *terms)),
                bytearray(struct.pack(f"={n}q", *positions)),
                bytearray(struct.pack(f"={n + 1}i", *offsets)),
                bodies,
                bytearray(struct.pack(f"={n}i", *magics)),
            )

    # -- recovery support

    def scan(self, start: int, prev_index: int, prev_term: int, check_crc: bool, check_index: bool) -> ScanResult:
        """Walk and validate entries from data position `start` (see the compiled twin)."""
        fs = self._data.file_size
        cur, first, count, mismatch, mismatch_pos, reason = start, -1, 0, -1, -1, STOP_END
        last_end = -1
        while True:
            if self._data.count == 0 or cur >= self._data.end_offset:
                reason = STOP_END
                break
            loc = self._data.locate(cur, MIN_BLANK_LEN)
            if loc is None:
                reason = STOP_NO_SEGMENT
                break
            view, at = loc
            rel = (cur - self._data.first_offset) % fs
            magic, size = _BLANK.unpack_from(view, at)
            if magic == MAGIC_BLANK:
                head_blank = rel == 0 and cur == self._data.first_offset
                if size < MIN_BLANK_LEN or rel + size > fs or (rel + size != fs and not head_blank):
                    reason = STOP_BLANK
                    break
                cur += size
                continue
            if magic == 0 and size == 0:
                reason = STOP_END
                break
            if rel + HEADER_SIZE > fs:
                reason = STOP_BAD_HEADER
                break
            _, _, idx, term, pos, _, _, crc, bsize = _HEADER.unpack_from(view, at)
            if (
                magic not in (MAGIC_NORMAL, MAGIC_NOOP)
                or size <= 44
                or size < HEADER_SIZE
                or bsize + HEADER_SIZE != size
                or rel + size > fs
            ):
                reason = STOP_BAD_HEADER
                break
            if pos != cur:
                reason = STOP_POS
                break
            if (prev_index >= 0 and idx != prev_index + 1) or idx < 0:
                reason = STOP_INDEX
                break
            if term < prev_term:
                reason = STOP_TERM
                break
            if check_crc and crc != 0 and _crc_field(view[at + HEADER_SIZE : at + size]) != crc:
                reason = STOP_CRC
                break
            if check_index and mismatch < 0:
                uloc = self._index.locate(idx * INDEX_UNIT_SIZE, INDEX_UNIT_SIZE)
                if uloc is None or _UNIT.unpack_from(*uloc) != (magic, cur, size, idx, term):
                    mismatch, mismatch_pos = idx, cur
            if first < 0:
                first = idx
            prev_index, prev_term = idx, term
            count += 1
            cur += size
            last_end = cur
        return ScanResult(cur, first, prev_index, prev_term, count, reason, mismatch, mismatch_pos, last_end)

    def _walk(self, start: int, from_index: int, to_index: int) -> Iterator[tuple[int, int, int, int, int, int]]:
        """(index, pos, magic, size, header index, term) of the entries from_index..to_index,
        walking the data from `start` over blanks."""
        cur, idx = start, from_index
        while idx <= to_index:
            view, at = self._data_at(cur, MIN_BLANK_LEN)
            magic, size = _BLANK.unpack_from(view, at)
            if magic == MAGIC_BLANK:
                cur += size
                continue
            _, _, h_idx, term, *_ = _HEADER.unpack_from(view, at)
            yield idx, cur, magic, size, h_idx, term
            cur += size
            idx += 1

    def write_units(self, start: int, from_index: int, to_index: int) -> None:
        """Rewrite index units for from_index..to_index walking the data from `start`."""
        for idx, pos, magic, size, h_idx, term in self._walk(start, from_index, to_index):
            uview, uat = self._unit_slot(idx)
            _put_unit(uview, uat, magic, pos, size, h_idx, term)

    def unit_conflicts(
        self, start: int, from_index: int, to_index: int, prev_term: int, prev_end: int
    ) -> list[tuple[int, int, int, int, int]]:
        """Entries whose index unit is there but describes another entry (see the
        compiled twin): [(index, pos, prev_term, prev_end, next_term)]."""
        out: list[list[int]] = []
        for idx, cur, magic, size, _h_idx, term in self._walk(start, from_index, to_index):
            if out and out[-1][0] == idx - 1:
                out[-1][4] = term
            uloc = self._index.locate(idx * INDEX_UNIT_SIZE, INDEX_UNIT_SIZE)
            if uloc is not None:
                unit = bytes(uloc[0][uloc[1] : uloc[1] + INDEX_UNIT_SIZE])
                expected = _UNIT.pack(magic, cur, size, idx, term)
                j = next((k for k in range(INDEX_UNIT_SIZE) if unit[k] != expected[k]), INDEX_UNIT_SIZE)
                torn = not any(unit[j:])
                if not torn and _UNIT.unpack(unit)[1:] != (cur, size, idx, term):
                    out.append([idx, cur, prev_term, prev_end, -1])
            prev_term, prev_end = term, cur + size
        return [(c[0], c[1], c[2], c[3], c[4]) for c in out]
