"""Recovery on open (DLedgerMmapFileStore.recover, made safe).

1. Start at data segment max(0, n-3) and walk back to a segment whose first entry agrees
   with its index unit (a trustworthy start); without one, start at the first segment.
2. Scan forward validating headers (and CRCs), comparing index units.
3. A clean end (zero header or end of the last segment) ends the log. Anything else is a
   torn or corrupt tail: below the committed index it is a CorruptStoreError naming the
   file and offset; more than one segment before the end it is refused as well (DLedger's
   safety valve); otherwise the tail is cut and its bytes zeroed.
4. Index units that disagree with the data are rewritten from the data when they are
   missing (zero, torn, not mapped) or provably wrong (they name another index or
   position, a size the walk disproves, or a term out of order with the neighbouring
   entries). A unit that is plausible and still disagrees leaves the header in doubt: at
   or below the committed index that is a CorruptStoreError, above it the tail is cut at
   that entry. Stale units past the end are zeroed and index segments past it deleted.
5. The log ends where its last entry ends: a blank after it whose next segment holds
   nothing (a torn roll) is zeroed and the empty segment deleted.
6. The begin index is the first entry of the first data segment (after one leading blank
   record, as DLedger 0.4.0's reset writes: its bytes are zero, so a blank magic over a
   damaged first entry is refused, not skipped, unless the `reset` file shows a reset
   interrupted before the zeroing, which is finished). A first segment that does not
   start with an entry is refused too, also before the scanned segments. Index segments
   wholly below the begin index are deleted.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dledger._native import impl
from dledger.codes import CorruptStoreError
from dledger.entry import ENTRY_MAGICS, HEADER_SIZE, INDEX_UNIT_SIZE, MAGIC_BLANK, ScanResult
from dledger.store.layout import offset_to_name
from dledger.store.segment_list import SegmentList

log = logging.getLogger(__name__)

PROBE_BYTES = 64 * 1024  # how far past a clean end recovery looks for leftovers

# Stop reasons recovery adds to the scan's impl.STOP_* codes.
STOP_HEAD_BLANK = 16  # the first segment starts with a blank whose bytes are not zero
STOP_UNIT_CONFLICT = 17  # an entry header disagrees with a plausible index unit

STOP_NAMES = {
    impl.STOP_END: "end of log",
    impl.STOP_BAD_HEADER: "invalid entry header",
    impl.STOP_CRC: "body CRC mismatch",
    impl.STOP_INDEX: "index is not previous + 1",
    impl.STOP_TERM: "term lower than the previous entry's",
    impl.STOP_POS: "pos field does not match the entry's position",
    impl.STOP_BLANK: "blank record with an impossible length",
    impl.STOP_NO_SEGMENT: "position not covered by any segment",
    STOP_HEAD_BLANK: "leading blank record over non-zero bytes (a damaged first entry)",
    STOP_UNIT_CONFLICT: "entry header disagrees with its index unit",
}


def head_blank_is_genuine(directory: Path, seg_start: int, length: int) -> bool:
    """True when the blank record of `length` bytes at the start of the data segment at
    `seg_start` (in `directory`) can be a prefix reset's: reset (ours and DLedger 0.4.0's)
    zeroes what the blank covers, so non-zero bytes behind the blank header (checked up
    to PROBE_BYTES) mean a damaged entry whose magic now reads -1.

    Read from the file, not through the mapping: our reset punches those bytes out, and
    on a full tmpfs a read fault on a hole must allocate a page, which kills the process
    with SIGBUS; a file read of a hole returns zeros."""
    n = min(length - 8, PROBE_BYTES)
    if n <= 0:
        return True
    fd = os.open(directory / offset_to_name(seg_start), os.O_RDONLY)
    try:
        payload = os.pread(fd, n, 8)
    finally:
        os.close(fd)
    return len(payload) == n and payload.count(0) == n


def first_entry_header(table: Any, directory: Path, seg_start: int, check_blank: bool = True) -> tuple[int, ...] | None:
    """Header of the first entry of the data segment at `seg_start` (mapped in `table`,
    a file of `directory`), after one leading blank record as a 0.4.0 reset writes; None
    when it does not start with one. A leading blank over non-zero bytes is a damaged
    entry, not a reset's blank, unless `check_blank` is false (recovery has judged it
    already)."""
    header = impl.decode_header(table.read(seg_start, HEADER_SIZE))
    if header[0] == MAGIC_BLANK:
        skip = header[1]
        if skip < 8 or skip + HEADER_SIZE > table.file_size:
            return None
        if check_blank and not head_blank_is_genuine(directory, seg_start, skip):
            return None
    else:
        skip = 0
    header = impl.decode_header(table.read(seg_start + skip, HEADER_SIZE))
    magic, size, index, _, pos, *_, body_size = header
    valid = magic in ENTRY_MAGICS and body_size + HEADER_SIZE == size and HEADER_SIZE <= size <= table.file_size - skip
    if not valid or index < 0 or pos != seg_start + skip:
        return None
    return tuple(header)


@dataclass(frozen=True)
class RecoveryReport:
    """What recovery found.

    Attributes:
        begin_index, end_index, end_term, write_pos: the recovered ledger (write_pos is
            where the last entry ends) as the data holds it (see `index_stale_from`).
        stop_reason: why the scan ended (impl.STOP_*, or STOP_HEAD_BLANK /
            STOP_UNIT_CONFLICT of this module); STOP_END for a clean log.
        stop_file, stop_offset: where a torn or corrupt tail was cut (or "" / -1).
        index_rebuilt_from: first index whose unit was rewritten, or -1.
        index_stale_from: read-only: the first index whose unit is missing or names
            another entry (an index not flushed before the store stopped), which a
            writable open rebuilds from the data; -1 when none is. When the last
            entry's unit is one of them (an index tail not flushed), the store's log
            ends before it; else only the entries whose units are wrong fail to read.
    """

    begin_index: int
    end_index: int
    end_term: int
    write_pos: int
    stop_reason: int
    stop_file: str
    stop_offset: int
    index_rebuilt_from: int
    index_stale_from: int = -1

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
        core: impl.LogCore,
        data: SegmentList,
        index: SegmentList,
        verify_crc: bool,
        committed_index: int,
        checkpoint_end_index: int = -1,
        reset_before_begin: int = -1,
    ) -> None:
        self.core = core
        self.data = data
        self.index = index
        self.verify_crc = verify_crc
        self.committed_index = committed_index
        self.checkpoint_end_index = checkpoint_end_index
        self.reset_before_begin = reset_before_begin
        self.may_cut_unknown = True
        """False when nothing tells which entries are committed (no valid checkpoint):
        a damaged entry is then a CorruptStoreError, never a cut."""
        self.may_cut_committed = False
        """True when repairing (`--repair`): a damaged entry at or below the committed
        index is cut too; the member then lost committed entries and must rejoin
        (dledger.store.membership), and `cut_committed` says so."""
        self.cut_committed = False

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
            header = first_entry_header(table, self.data.directory, table.first_offset + k * table.file_size)
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

    def _no_data(self) -> RecoveryReport:
        """A store without data segments: empty, or (repair only) a log whose data is
        gone although its checkpoint says entries were committed (the member rejoins)."""
        data, index = self.data, self.index
        lost = 0 <= self.committed_index <= self.checkpoint_end_index
        if lost and not self.may_cut_committed:
            raise CorruptStoreError(
                str(data.directory), 0, f"no data segments, but entries up to {self.committed_index} are committed"
            )
        if not index.read_only:
            index.drop_all()
        self.core._set_state(-1, -1, -1, 0)
        if lost:
            log.warning("repair: no data segments: committed entries up to %d are lost here", self.committed_index)
            self.cut_committed = True
            return RecoveryReport(-1, -1, -1, 0, impl.STOP_NO_SEGMENT, str(data.directory), 0, -1)
        return RecoveryReport(-1, -1, -1, 0, impl.STOP_END, "", -1, -1)

    def run(self) -> RecoveryReport:
        """Recover and set the core's state; returns what was found."""
        core = self.core
        data, index = self.data, self.index
        if not data.read_only:
            self._drop_all_blank_first_segments()
        table = data.table
        if table.count == 0:
            return self._no_data()
        k = self._start_segment()
        start = table.first_offset + k * table.file_size
        if self._head_blank_is_damaged():
            # as if the scan had stopped at the first segment's first record
            scan = ScanResult(table.first_offset, -1, -1, -1, 0, STOP_HEAD_BLANK, -1, -1, -1)
        else:
            scan = core.scan(start, -1, -1, self.verify_crc, True)
        stop_pos, first, last, last_term, count, reason, mismatch, mismatch_pos, last_end = scan
        if count and mismatch >= 0:
            conflict = self._first_unit_conflict(first, last, mismatch, mismatch_pos)
            if conflict is not None:
                # the log ends before the entry whose header is in doubt
                at, at_pos, last_term, last_end = conflict
                last, count, stop_pos, reason = at - 1, at - first, at_pos, STOP_UNIT_CONFLICT
        path, offset = data.locate(stop_pos)
        stop_file, stop_offset = (str(path), offset) if reason != impl.STOP_END else ("", -1)
        lost_committed = self.committed_index >= 0 and (count == 0 or last < self.committed_index)
        if lost_committed and (reason != impl.STOP_END or self.committed_index <= self.checkpoint_end_index):
            # entries the checkpoint says are committed (and were flushed) are missing:
            # never drop them silently (a zeroed hole ends the scan like a clean end)
            if not self.may_cut_committed:
                raise CorruptStoreError(
                    str(path), offset, f"{STOP_NAMES[reason]} below the committed index {self.committed_index}"
                )
            log.warning("repair: committed entries after %d are lost here", last if count else -1)
            self.cut_committed = True
        if reason != impl.STOP_END and not self.may_cut_unknown:
            where = f"after entry {last}" if count else "at the first entry"
            raise CorruptStoreError(
                stop_file,
                stop_offset,
                f"{STOP_NAMES[reason]} ({where}), and no valid checkpoint "
                "says which entries are committed: nothing was cut (`dledger check --repair` shows what "
                "cutting the log there would lose, and does it when confirmed)",
            )
        if reason != impl.STOP_END and not self.may_cut_committed:
            last_seg_start = table.end_offset - table.file_size
            if last_seg_start - stop_pos > table.file_size:
                raise CorruptStoreError(
                    stop_file, stop_offset, f"{STOP_NAMES[reason]} more than one segment before the end of the log"
                )
        begin = first if k == 0 or not count else self._begin_index(k, first)
        # The log ends where its last entry ends, also when a blank follows it (a torn
        # roll: the entry that did not fit never reached the next segment).
        write_pos = last_end if count else stop_pos
        if data.read_only:
            if reason != impl.STOP_END:
                log.warning("read-only store: torn tail at %s offset %d left in place", stop_file, stop_offset)
        else:
            if reason != impl.STOP_END:
                log.warning("cutting torn tail: %s in %s at offset %d", STOP_NAMES[reason], stop_file, stop_offset)
            self._cut_after(write_pos, reason)
        if count == 0:
            begin, last, last_term = -1, -1, -1
        wrong_from = mismatch if count and 0 <= mismatch <= last else -1  # first index unit to rewrite
        stale = wrong_from if index.read_only else -1  # a writable open rebuilds them
        rebuilt = -1 if index.read_only else self._rebuild_index(begin, last, wrong_from, mismatch_pos)
        readable = (begin, last, last_term, write_pos)
        unindexed_tail = stale >= 0 and self._tail_unindexed(last, write_pos)
        core._set_state(*(self._indexed_part(begin, last, stale, mismatch_pos) if unindexed_tail else readable))
        return RecoveryReport(begin, last, last_term, write_pos, reason, stop_file, stop_offset, rebuilt, stale)

    def _tail_unindexed(self, last: int, last_end: int) -> bool:
        """Whether the last entry's index unit is missing or names another entry (an index
        tail not flushed), rather than one unit damaged before it (the units after that
        one agree again: the entries around it stay readable, that one fails)."""
        table, at = self.index.table, last * INDEX_UNIT_SIZE
        if not table.count or not table.first_offset <= at <= table.end_offset - INDEX_UNIT_SIZE:
            return True
        unit = impl.decode_index_unit(table.read(at, INDEX_UNIT_SIZE))
        return not (int(unit[3]) == last and int(unit[1]) + int(unit[2]) == last_end)

    def _indexed_part(self, begin: int, last: int, stale: int, stale_pos: int) -> tuple[int, int, int, int]:
        """A read-only store's log (begin, end, end term, write position): the entries
        before `stale`, the first whose index unit is missing or stale (at `stale_pos`).
        The data after it cannot be read by index; a writable open rebuilds the units.
        Before, the end was the data's and `get()` of those entries failed (helper J)."""
        log.info(
            "read-only store: the index units of entries %d..%d are missing or stale (not flushed before the "
            "store stopped, or its writer is ahead): the log is read up to entry %d",
            stale,
            last,
            stale - 1,
        )
        if stale <= begin:
            return -1, -1, -1, stale_pos
        unit = impl.decode_index_unit(self.index.table.read((stale - 1) * INDEX_UNIT_SIZE, INDEX_UNIT_SIZE))
        return begin, stale - 1, int(unit[4]), int(unit[1]) + int(unit[2])

    def _rebuild_index(self, begin: int, last: int, wrong_from: int, wrong_pos: int) -> int:
        """Rewrite the index units from `wrong_from` (at data position `wrong_pos`; -1:
        none is wrong) to `last`, then trim the index to [begin, last]; returns `wrong_from`."""
        index = self.index
        if wrong_from >= 0:
            if index.table.count and index.table.first_offset > wrong_from * INDEX_UNIT_SIZE:
                # the first index files are gone (the files cannot be prepended to)
                log.warning(
                    "index files before %s are missing: rebuilding every index file",
                    index.path_of(int(index.table.first_offset)),
                )
                index.drop_all()
            log.warning("rebuilding index units from index %d", wrong_from)
            self.core.write_units(wrong_pos, wrong_from, last)
        self._trim_index(begin, last)
        return wrong_from

    def _head_blank_is_damaged(self) -> bool:
        """True when the first data segment starts with a blank record that no reset
        wrote: its bytes are not zero, and it is not the blank of the last reset (the
        `reset` file's) caught before they were zeroed, which is finished here."""
        data = self.data
        table = data.table
        first = int(table.first_offset)
        magic, length = impl.decode_header(table.read(first, HEADER_SIZE))[:2]
        if magic != MAGIC_BLANK or not 8 <= length <= table.file_size:
            return False  # not a blank, or one the scan refuses by its length
        if head_blank_is_genuine(data.directory, first, length):
            return False
        if not self._follows_last_reset(first + length):
            return True
        if not data.read_only:
            log.warning("finishing an interrupted prefix reset: clearing the head blank at %s", data.locate(first)[0])
            data.clear_range(first + 8, first + length)
        return False

    def _follows_last_reset(self, pos: int) -> bool:
        """True when what follows a head blank ending at `pos` is what the last reset
        left: its first kept entry (beforeBeginIndex + 1), or nothing."""
        if self.reset_before_begin < 0:
            return False
        try:
            header = impl.decode_header(self.data.table.read(pos, HEADER_SIZE))
        except IndexError:
            return bool(pos >= self.data.table.end_offset)
        if header[0] == 0 and header[1] == 0:
            return True
        return header[0] in ENTRY_MAGICS and header[2] == self.reset_before_begin + 1

    def _first_unit_conflict(
        self, first: int, last: int, mismatch: int, mismatch_pos: int
    ) -> tuple[int, int, int, int] | None:
        """The first entry in mismatch..last whose index unit is plausible but disagrees
        with its header, as (index, pos, term and end of the entry before it); None when
        every disagreeing unit is missing or provably wrong (then it is rebuilt).

        Raises CorruptStoreError when that entry is at or below the committed index:
        one of the two was damaged and nothing tells which, so recovery must not pick.
        """
        prev_term, prev_end = -1, -1
        if mismatch > first:  # the entry before agreed with its unit in the scan
            unit = impl.decode_index_unit(self.index.table.read((mismatch - 1) * INDEX_UNIT_SIZE, INDEX_UNIT_SIZE))
            prev_term, prev_end = int(unit[4]), int(unit[1]) + int(unit[2])
        conflicts = self.core.unit_conflicts(mismatch_pos, mismatch, last, prev_term, prev_end)
        for idx, pos, before_term, before_end, next_term in conflicts:
            header = impl.decode_header(self.data.table.read(pos, HEADER_SIZE))
            unit = impl.decode_index_unit(self.index.table.read(idx * INDEX_UNIT_SIZE, INDEX_UNIT_SIZE))
            lower = before_term if idx > first else None
            upper = next_term if idx < last else None
            if self._unit_is_wrong(idx, pos, header, unit, lower, upper, size_proven=idx < last):
                continue
            if idx <= self.committed_index and not self.may_cut_committed:
                path, offset = self.data.locate(pos)
                raise CorruptStoreError(
                    str(path),
                    offset,
                    f"entry {idx}'s header (term {header[3]}, size {header[1]}) disagrees with its index unit "
                    f"(term {unit[4]}, size {unit[2]}) at or below the committed index {self.committed_index}",
                )
            log.warning("entry %d's header disagrees with its index unit; cutting the tail there", idx)
            # cut at its first entry, the log keeps nothing: it then ends where that entry began
            return int(idx), int(pos), int(before_term), (int(before_end) if idx > first else int(pos))
        return None

    def _unit_is_wrong(
        self,
        idx: int,
        pos: int,
        header: tuple[int, ...],
        unit: tuple[int, ...],
        lower: int | None,
        upper: int | None,
        size_proven: bool,
    ) -> bool:
        """True when the data walk proves the unit wrong, so it can be rewritten from the
        header: it names another index or position (the walk placed the entry), another
        size although the next entry or the body CRC confirms the header's, or a term
        out of order with the neighbouring entries' (terms never decrease)."""
        _, h_size, _, h_term, _, _, _, h_crc, _ = header
        _, u_pos, u_size, u_index, u_term = unit
        if u_index != idx or u_pos != pos:
            return True
        if u_size != h_size and (size_proven or (self.verify_crc and h_crc != 0)):
            return True
        return u_term != h_term and ((lower is not None and u_term < lower) or (upper is not None and u_term > upper))

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

    def _begin_index(self, k: int, fallback: int) -> int:
        """The first index when the scan started at segment k > 0: the first entry of the
        first segment (after its head blank, judged already), past leading segments that
        are one blank record (left in place by a read-only open). A first segment that
        does not start with an entry is damaged data more than one segment before the
        end: refused, never skipped (the log's begin would jump over whole segments)."""
        table = self.data.table
        for j in range(k):
            seg = table.first_offset + j * table.file_size
            magic, length = impl.decode_header(table.read(seg, HEADER_SIZE))[:2]
            if magic == MAGIC_BLANK and length == table.file_size:
                continue
            header = first_entry_header(table, self.data.directory, seg, check_blank=False)
            if header is None:
                raise CorruptStoreError(
                    str(self.data.path_of(seg)), 0, "the first data segment does not start with an entry"
                )
            return int(header[2])
        return fallback

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
