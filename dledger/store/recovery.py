"""Recovery on open (DLedgerMmapFileStore.recover, made safe).

1. Start at data segment max(0, n-3) and walk back to a segment whose first entry agrees
   with its index unit (a trustworthy start); without one, start at the first segment.
2. Scan forward validating headers (and CRCs), comparing index units.
3. A clean end (zero header or end of the last segment) ends the log. Anything else is a
   torn or corrupt tail: below the committed index it is a CorruptStoreError naming the
   file and offset; more than one segment before the end it is refused as well (DLedger's
   safety valve); otherwise the tail is cut and its bytes zeroed.
4. Index units that disagree with the data are rewritten from the data; stale units
   past the end are zeroed and index segments past it deleted.
5. The begin index is the first entry of the first data segment (after one leading blank
   record, as DLedger 0.4.0's reset writes); index segments wholly below it are deleted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from dledger._native import impl
from dledger.codes import CorruptStoreError
from dledger.entry import HEADER_SIZE, INDEX_UNIT_SIZE, MAGIC_BLANK
from dledger.store.segment_list import SegmentList

log = logging.getLogger(__name__)

PROBE_BYTES = 64 * 1024  # how far past a clean end recovery looks for leftovers

STOP_NAMES = {
    impl.STOP_END: "end of log",
    impl.STOP_BAD_HEADER: "invalid entry header",
    impl.STOP_CRC: "body CRC mismatch",
    impl.STOP_INDEX: "index is not previous + 1",
    impl.STOP_TERM: "term lower than the previous entry's",
    impl.STOP_POS: "pos field does not match the entry's position",
    impl.STOP_BLANK: "blank record with an impossible length",
    impl.STOP_NO_SEGMENT: "position not covered by any segment",
}


def first_entry_header(table: Any, seg_start: int) -> tuple[int, ...] | None:
    """Header of the first entry of the data segment at `seg_start` (after one leading
    blank record, as a 0.4.0 reset writes), or None when it does not start with one."""
    header = impl.decode_header(table.read(seg_start, HEADER_SIZE))
    if header[0] == MAGIC_BLANK:
        skip = header[1]
        if skip < 8 or skip + HEADER_SIZE > table.file_size:
            return None
        header = impl.decode_header(table.read(seg_start + skip, HEADER_SIZE))
    if header[0] not in (1, 2) or header[8] + HEADER_SIZE != header[1]:
        return None
    return tuple(header)


@dataclass(frozen=True)
class RecoveryReport:
    """What recovery found.

    Attributes:
        begin_index, end_index, end_term, write_pos: the recovered ledger.
        stop_reason: why the scan ended (impl.STOP_*); STOP_END for a clean log.
        stop_file, stop_offset: where a torn or corrupt tail was cut (or "" / -1).
        index_rebuilt_from: first index whose unit was rewritten, or -1.
    """

    begin_index: int
    end_index: int
    end_term: int
    write_pos: int
    stop_reason: int
    stop_file: str
    stop_offset: int
    index_rebuilt_from: int

    @property
    def problem(self) -> str:
        """A one-line description of the cut tail, or '' for a clean log."""
        if self.stop_reason == impl.STOP_END:
            return ""
        return f"{STOP_NAMES[self.stop_reason]} in {self.stop_file} at offset {self.stop_offset}"


class Recovery:
    """Runs recovery over a core and its two segment lists (all locked by the caller)."""

    def __init__(
        self,
        core: object,
        data: SegmentList,
        index: SegmentList,
        verify_crc: bool,
        committed_index: int,
        checkpoint_end_index: int = -1,
    ) -> None:
        self.core = core
        self.data = data
        self.index = index
        self.verify_crc = verify_crc
        self.committed_index = committed_index
        self.checkpoint_end_index = checkpoint_end_index

    def _agrees_with_index(self, header: tuple[int, ...]) -> bool:
        magic, size, idx, term, pos = header[:5]
        try:
            unit = impl.decode_index_unit(self.index.table.read(idx * INDEX_UNIT_SIZE, INDEX_UNIT_SIZE))
        except IndexError:
            return False
        return tuple(unit) == (magic, pos, size, idx, term)

    def _start_segment(self) -> int:
        table = self.data.table
        k = int(max(0, table.count - 3))
        while k > 0:
            header = first_entry_header(table, table.first_offset + k * table.file_size)
            if header is not None and self._agrees_with_index(header):
                return k
            k -= 1
        return 0

    def _drop_all_blank_first_segments(self) -> None:
        # DLedger 0.4.0 checkFirstFileAllBlank: a reset can leave a first file that is
        # one blank record; it holds nothing and is deleted.
        table = self.data.table
        while table.count > 1:
            header = impl.decode_header(table.read(table.first_offset, HEADER_SIZE))
            if header[0] == MAGIC_BLANK and header[1] == table.file_size:
                self.data.drop_first()
            else:
                return

    def run(self) -> RecoveryReport:
        """Recover and set the core's state; returns what was found."""
        core = self.core
        data, index = self.data, self.index
        if not data.read_only:
            self._drop_all_blank_first_segments()
        table = data.table
        if table.count == 0:
            if 0 <= self.committed_index <= self.checkpoint_end_index:
                raise CorruptStoreError(
                    str(data.directory), 0, f"no data segments, but entries up to {self.committed_index} are committed"
                )
            if not index.read_only:
                index.drop_all()
            core._set_state(-1, -1, -1, 0)  # type: ignore[attr-defined]
            return RecoveryReport(-1, -1, -1, 0, impl.STOP_END, "", -1, -1)
        k = self._start_segment()
        start = table.first_offset + k * table.file_size
        stop_pos, first, last, last_term, count, reason, mismatch, mismatch_pos = core.scan(  # type: ignore[attr-defined]
            start, -1, -1, self.verify_crc, True
        )
        begin = first if k == 0 else self._begin_index(first)
        path, offset = data.locate(stop_pos)
        stop_file, stop_offset = (str(path), offset) if reason != impl.STOP_END else ("", -1)
        lost_committed = self.committed_index >= 0 and (count == 0 or last < self.committed_index)
        if lost_committed and (reason != impl.STOP_END or self.committed_index <= self.checkpoint_end_index):
            # entries the checkpoint says are committed (and were flushed) are missing:
            # never drop them silently (a zeroed hole ends the scan like a clean end)
            raise CorruptStoreError(
                str(path), offset, f"{STOP_NAMES[reason]} below the committed index {self.committed_index}"
            )
        if reason != impl.STOP_END:
            last_seg_start = table.end_offset - table.file_size
            if last_seg_start - stop_pos > table.file_size:
                raise CorruptStoreError(
                    stop_file, stop_offset, f"{STOP_NAMES[reason]} more than one segment before the end of the log"
                )
        if data.read_only:
            if reason != impl.STOP_END:
                log.warning("read-only store: torn tail at %s offset %d left in place", stop_file, stop_offset)
        else:
            if reason != impl.STOP_END:
                log.warning("cutting torn tail: %s in %s at offset %d", STOP_NAMES[reason], stop_file, stop_offset)
            self._cut_after(stop_pos, reason)
        if count == 0:
            begin, last, last_term = -1, -1, -1
        write_pos = stop_pos
        rebuilt = -1
        if not index.read_only:
            if count and mismatch >= 0:
                log.warning("rebuilding index units from index %d", mismatch)
                core.write_units(mismatch_pos, mismatch, last)  # type: ignore[attr-defined]
                rebuilt = mismatch
            self._trim_index(begin, last)
        core._set_state(begin, last, last_term, write_pos)  # type: ignore[attr-defined]
        return RecoveryReport(begin, last, last_term, write_pos, reason, stop_file, stop_offset, rebuilt)

    def _cut_after(self, stop_pos: int, reason: int) -> None:
        """Delete segments after the end and zero what follows it in its segment, so
        that nothing past the end can ever be read as an entry again. After a clean end
        the rest of the segment is checked one chunk deep (a hole left by a torn write
        shows up right after the end); after a damaged entry it is zeroed entirely."""
        data = self.data
        table = data.table
        data.truncate_to(stop_pos)
        if not table.count or stop_pos >= table.end_offset:
            return
        seg_end = stop_pos - (stop_pos - table.first_offset) % table.file_size + table.file_size
        probe_end = min(seg_end, stop_pos + PROBE_BYTES)
        if reason != impl.STOP_END or (probe_end > stop_pos and any(table.read(stop_pos, probe_end - stop_pos))):
            data.zero_range(stop_pos, seg_end)

    def _begin_index(self, fallback: int) -> int:
        header = first_entry_header(self.data.table, self.data.table.first_offset)
        return int(header[2]) if header is not None else fallback

    def _trim_index(self, begin: int, last: int) -> None:
        index = self.index
        table = index.table
        end_off = (last + 1) * INDEX_UNIT_SIZE if last >= 0 else 0
        if last < 0:
            index.drop_all()
            return
        index.truncate_to(end_off)
        if table.count:
            seg_end = end_off - end_off % table.file_size + table.file_size
            index.zero_range(end_off, seg_end)
        floor = begin * INDEX_UNIT_SIZE
        while table.count and table.first_offset + table.file_size <= floor:
            index.drop_first()
