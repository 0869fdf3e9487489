"""`LogCore` of the pure-Python twin: appends and reads over a data and an index table.

Part of `dledger._store_py` (see there); the compiled counterpart is `dledger/_core*.pxi`.
The recovery walks are in `dledger._store_py_scan`.
"""

from __future__ import annotations

import errno
import operator
import os
import struct
import threading
from collections.abc import Callable, Iterable
from typing import Any

from dledger._store_py_codec import (
    BLANK,
    FAIL_AFTER_DATA_BEFORE_INDEX,
    FAIL_NONE,
    HEADER,
    STATE_DISK_ERROR,
    STATE_DISK_FULL,
    STATE_OK,
    UNIT,
    crc_field,
    encode_entry,
    put_unit,
)
from dledger._store_py_record import check_append_magic, decode_record, split_batch
from dledger._store_py_scan import find_unit_conflicts, scan_entries, walk_entries
from dledger._store_py_table import MappedTable, mapped_at
from dledger.codes import DLedgerError, ResponseCode
from dledger.entry import (
    HEADER_SIZE,
    INDEX_UNIT_SIZE,
    MAGIC_BLANK,
    MAGIC_NOOP,
    MAGIC_NORMAL,
    MAGIC_RECORD,
    MAX_ENTRY_SIZE,
    MIN_BLANK_LEN,
    Entry,
    ScanResult,
)

STAGE_MAX_BYTES = 1 << 20  # write_through: staged bytes written per pwrite at most


class LogCore:
    """Appends and reads entries over a data table and an index table (see the compiled core)."""

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
        self.allow_records = True
        self.write_through = False
        self._on_write_failure: Callable[[BaseException], None] | None = None
        self._stage: list[bytes] = []
        self._stage_len = 0
        self._stage_pos = 0
        self._stage_state = (-1, -1, -1)  # begin, end index, end term before the stage

    def _init_core(
        self,
        data: MappedTable,
        index: MappedTable,
        roller: Callable[[int, int], None],
        on_write_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        self._data = data
        self._index = index
        self._roller = roller
        self._on_write_failure = on_write_failure

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
            view, at = mapped_at(self._data, pos, len(data))
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
        fd, rel = self._data._fd_at(pos)
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
        failed = DLedgerError(
            ResponseCode.DISK_FULL if full else ResponseCode.DISK_ERROR,
            f"writing {len(blob)} bytes at data position {pos} failed: {os.strerror(err)}",
        )
        if not full and self._on_write_failure is not None:
            self._on_write_failure(failed)
        raise failed

    def _unit_slot(self, idx: int) -> tuple[memoryview, int]:
        off = idx * INDEX_UNIT_SIZE
        loc = self._index._locate(off, INDEX_UNIT_SIZE)
        if loc is None:
            if self._index.count and off != self._index.end_offset:
                raise DLedgerError(ResponseCode.DISK_ERROR, f"index slot {idx} is not mapped")
            self._roll(1, off - off % self._index.file_size)
            loc = self._index._locate(off, INDEX_UNIT_SIZE)
            if loc is None:
                raise DLedgerError(ResponseCode.DISK_ERROR, f"roller did not map index offset {off}")
        return loc

    def _pre_append(self, size: int) -> int:
        fs = self._data.file_size
        if self._data.count == 0 or self.write_pos >= self._data.end_offset:
            self._roll(0, self.write_pos)
        rel = (self.write_pos - self._data.first_offset) % fs
        remaining = fs - rel
        if size + MIN_BLANK_LEN > remaining:
            view, at = mapped_at(self._data, self.write_pos, remaining)
            view[at : at + remaining] = BLANK.pack(MAGIC_BLANK, remaining) + bytes(remaining - 8)
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
        put_unit(uview, uat, magic, pos, size, idx, self.term)
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
            self._check_writable()  # again: a close() the lock waited for ends writing
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
            self._check_writable()
            try:
                return self._append_one(b"", MAGIC_NOOP)
            finally:
                self._flush_stage()

    def append_many(self, bodies: Iterable[bytes], magic: int = MAGIC_NORMAL) -> int:
        """Append several bodies as consecutive entries of `magic` (1 normal, 16 record:
        every body must then be a valid record body); returns the first index."""
        items = tuple(bodies)
        magic = operator.index(magic)
        self._check_writable()
        check_append_magic(magic, self.allow_records)
        for i, b in enumerate(items):
            if type(b) is not bytes:
                raise TypeError("bodies must be bytes")
            self._check_size(HEADER_SIZE + len(b))
            if magic == MAGIC_RECORD:
                try:
                    decode_record(b)
                except ValueError as exc:
                    raise DLedgerError(
                        ResponseCode.UNEXPECTED_ARGUMENT, f"body {i}: {exc} (nothing was appended)"
                    ) from None
        with self._lock_obj:
            self._check_writable()
            first = self.end_index + 1
            try:
                for b in items:
                    self._append_one(b, magic)
            finally:
                self._flush_stage()
            return first

    def append_encoded(self, run: Any) -> int:
        """Append a run of already-encoded entries verbatim after validating every header."""
        self._check_writable()
        data = memoryview(run).cast("B")
        total = len(data)
        with self._lock_obj:
            self._check_writable()
            fs = self._data.file_size
            idx, term, wp, off = self.end_index, self.end_term, self.write_pos, 0
            while off < total:
                if off + HEADER_SIZE > total:
                    raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"run ends inside a header at {off}")
                magic, size, e_idx, e_term, pos, _, _, crc, bsize = HEADER.unpack_from(data, off)
                if magic not in (MAGIC_NORMAL, MAGIC_NOOP, MAGIC_RECORD):
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
                if crc != 0 and self.verify_crc and crc_field(data[off + HEADER_SIZE : off + size]) != crc:
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
                    magic, size, _, e_term, *_ = HEADER.unpack_from(data, off)
                    idx = self.end_index + 1
                    uview, uat = self._unit_slot(idx)
                    pos = self._pre_append(size)
                    self._write_entry(pos, data[off : off + size])
                    self._failpoint_after_data()
                    put_unit(uview, uat, magic, pos, size, idx, e_term)
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
        uloc = self._index._locate(idx * INDEX_UNIT_SIZE, INDEX_UNIT_SIZE)
        if uloc is None:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"index unit {idx} is not mapped")
        _, pos, size, _, _ = UNIT.unpack_from(*uloc)
        loc = self._data._locate(pos, size) if size >= HEADER_SIZE else None
        if loc is None:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"entry {idx} does not match its index unit (pos {pos})")
        view, at = loc
        _, h_size, h_idx, _, _, _, _, crc, _ = HEADER.unpack_from(view, at)
        if h_idx != idx or h_size != size:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"entry {idx} does not match its index unit (pos {pos})")
        if crc != 0 and self.verify_crc and crc_field(view[at + HEADER_SIZE : at + size]) != crc:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"body CRC mismatch for entry {idx} at pos {pos}")
        return view, at, pos, size

    def get(self, idx: int) -> Entry:
        """The entry at `idx` (raises DLedgerError INDEX_OUT_OF_RANGE outside the log)."""
        idx = operator.index(idx)
        with self._lock_obj:
            view, at, pos, size = self._locate(idx)
            magic, _, _, term, _, _, _, crc, _ = HEADER.unpack_from(view, at)
            return Entry(idx, term, pos, magic, bytes(view[at + HEADER_SIZE : at + size]), crc)

    def get_body(self, idx: int) -> bytes:
        """The body of the entry at `idx`."""
        idx = operator.index(idx)
        with self._lock_obj:
            view, at, _, size = self._locate(idx)
            return bytes(view[at + HEADER_SIZE : at + size])

    def term_at(self, idx: int) -> int:
        """Term of the entry at `idx`, read from its index unit."""
        idx = operator.index(idx)
        with self._lock_obj:
            if idx < self.begin_index or idx > self.end_index or self.begin_index < 0:
                raise DLedgerError(
                    ResponseCode.INDEX_OUT_OF_RANGE, f"index {idx} outside [{self.begin_index}, {self.end_index}]"
                )
            uloc = self._index._locate(idx * INDEX_UNIT_SIZE, INDEX_UNIT_SIZE)
            if uloc is None:
                raise DLedgerError(ResponseCode.DISK_ERROR, f"index unit {idx} is not mapped")
            return int(UNIT.unpack_from(*uloc)[4])

    def read_run(self, from_index: int, max_bytes: int) -> tuple[bytes, int]:
        """Already-encoded entries from `from_index` on within one segment and `max_bytes`."""
        with self._lock_obj:
            view, at, start, size = self._locate(from_index)
            cur, idx = start + size, from_index
            while idx < self.end_index:
                loc = self._data._locate(cur, HEADER_SIZE)
                if loc is None:
                    break
                magic, size, h_idx, *_ = HEADER.unpack_from(*loc)
                if magic == MAGIC_BLANK or cur + size - start > max_bytes or h_idx != idx + 1 or size < HEADER_SIZE:
                    break
                cur += size
                idx += 1
            return bytes(view[at : at + cur - start]), idx - from_index + 1

    def read_columns(self, from_index: int, max_count: int, max_bytes: int) -> tuple[Any, ...]:
        """Column-wise batch: (count, index, term, pos, offsets, bodies, magic) as in the
        compiled twin."""
        from_index, max_count, max_bytes = map(operator.index, (from_index, max_count, max_bytes))
        with self._lock_obj:
            if max_count <= 0 or from_index > self.end_index:
                return (0, bytearray(), bytearray(), bytearray(), bytearray(4), bytearray(), bytearray())
            self._locate(from_index)
            last = min(self.end_index, from_index + max_count - 1)
            sizes: list[int] = []
            total = 0
            for idx in range(from_index, last + 1):
                uloc = self._index._locate(idx * INDEX_UNIT_SIZE, INDEX_UNIT_SIZE)
                if uloc is None:
                    break
                size = UNIT.unpack_from(*uloc)[2] - HEADER_SIZE
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
                header = HEADER.unpack_from(view, at)
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

    def read_records(self, from_index: int, max_count: int, max_bytes: int) -> tuple[Any, ...]:
        """The entries of `read_columns` with their record columns instead of their
        bodies: (count, index, term, pos, magic, record columns), as in the compiled
        twin (whose values are always a copy; a bad record is named by its index)."""
        n, index, term, pos, offsets, bodies, magic = self.read_columns(from_index, max_count, max_bytes)
        return (n, index, term, pos, magic, split_batch(n, offsets, bodies, magic, from_index))

    # -- recovery support (the walks are in _store_py_scan; the caller holds the lock)

    def scan(self, start: int, prev_index: int, prev_term: int, check_crc: bool, check_index: bool) -> ScanResult:
        """Walk and validate entries from data position `start` (see the compiled core)."""
        return scan_entries(self._data, self._index, start, prev_index, prev_term, check_crc, check_index)

    def write_units(self, start: int, from_index: int, to_index: int) -> None:
        """Rewrite index units for from_index..to_index walking the data from `start`."""
        for idx, pos, magic, size, h_idx, term in walk_entries(self._data, start, from_index, to_index):
            uview, uat = self._unit_slot(idx)
            put_unit(uview, uat, magic, pos, size, h_idx, term)

    def unit_conflicts(
        self, start: int, from_index: int, to_index: int, prev_term: int, prev_end: int
    ) -> list[tuple[int, int, int, int, int]]:
        """Entries whose index unit is there but describes another entry (see the
        compiled core): [(index, pos, prev_term, prev_end, next_term)]."""
        return find_unit_conflicts(self._data, self._index, start, from_index, to_index, prev_term, prev_end)
