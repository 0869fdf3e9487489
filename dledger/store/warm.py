"""Warm-ahead: pre-fault the pages just ahead of a file store's writer and prepare its
next segments, so that appends do not stop on page faults or on creating a segment.

A pass (`run_once`, the store's "dledger-warm" pass) faults the window ahead of the
writer in chunks, always at least one chunk in front of it: faulting the very pages the
writer is filling makes both wait on the same page locks (slower than no warming at
all). With appends written through the file (`write_through`) the pages are left alone
(faulted in here they would be mapped dirty) and only the next segment is prepared.
"""

from __future__ import annotations

import threading
from typing import Protocol

from dledger._native import impl
from dledger.entry import INDEX_UNIT_SIZE
from dledger.store.segment_list import SegmentList


class WarmedLog(Protocol):
    """What warm-ahead reads of the store it warms (MmapLogStore)."""

    @property
    def data_list(self) -> SegmentList: ...

    @property
    def index_list(self) -> SegmentList: ...

    @property
    def write_pos(self) -> int: ...

    @property
    def end_index(self) -> int: ...

    @property
    def write_through(self) -> bool: ...


class WarmAhead:
    """Warm-ahead of one store's data and index files.

    Args:
        log: the store.
        window: bytes to keep faulted ahead of the writer in the data (a quarter of it
            in the index); 0 disables the pass.
    """

    CHUNK_BYTES = 8 << 20
    IDLE_WAIT_MS = 50
    """How long the pass sleeps once the writer stood still since the last one (it runs
    every 5 ms while the writer moves). A member's 8 MiB window stays ahead of a
    100 MB/s burst for these 50 ms."""

    def __init__(self, log: WarmedLog, window: int) -> None:
        self.log = log
        self.window = window
        self._lock = threading.Lock()  # one pass at a time (the thread's or wait_warm's)
        self._warmed_to = 0  # data faulted up to here
        self._index_warmed_to = 0
        self._stopped = False
        self._seen = (-1, -1)  # the writer's (position, end index) at the last pass

    def run_once(self) -> int | None:
        """One pass: fault the window ahead of the writer, prepare the next segments.
        Returns `IDLE_WAIT_MS` when the writer has not moved since the last pass (the
        pass runs less often then), else None."""
        with self._lock:
            seen = (int(self.log.write_pos), int(self.log.end_index))
            if seen == self._seen:
                return self.IDLE_WAIT_MS
            self._seen = seen
            self._warm_ahead()
            return None

    def warm_now(self) -> None:
        """Fault the whole window from the writer's position now, in the caller's thread
        (benchmarks and tests measuring the steady state)."""
        log = self.log
        with self._lock:
            pos = int(log.write_pos)
            self._warm_list(log.data_list, pos, self.window, prefault=not log.write_through)
            if log.data_list.table.count:
                self._warmed_to = max(self._warmed_to, pos + self.window)
            self._warm_index(max(INDEX_UNIT_SIZE, self.window // 4), force=True)

    def reset(self) -> None:
        """The log shrank (truncation, reset): warm from the writer's position again."""
        self._warmed_to = self._index_warmed_to = 0
        self._seen = (-1, -1)

    def stop(self) -> None:
        """Make a pass under way end early (the store is closing)."""
        self._stopped = True

    def _warm_ahead(self) -> None:
        log = self.log
        if log.data_list.table.count == 0:
            return  # nothing mapped yet: the first append maps the first segment
        window = self.window
        pos = int(log.write_pos)
        if log.write_through:
            # appends write through the file and allocate their own pages: only prepare
            # the next segment (pages faulted in here would be mapped dirty)
            self._warm_list(log.data_list, pos, window, prefault=False)
        else:
            chunk = min(self.CHUNK_BYTES, max(window // 2, 4096))
            lo = max(self._warmed_to, pos + chunk)
            while lo < pos + window and not self._stopped:
                self._warm_list(log.data_list, lo, chunk)
                lo += chunk
                self._warmed_to = lo
                pos = int(log.write_pos)
                lo = max(lo, pos + chunk)
        self._warm_index(max(INDEX_UNIT_SIZE, window // 4), force=False)

    def _warm_index(self, window: int, force: bool) -> None:
        # the index advances 32 bytes per entry: warm it again only once the writer used
        # half of the warmed window, not on every pass (each pass would fault the whole
        # window, and map and fault the spare segment, over again)
        pos = (int(self.log.end_index) + 1) * INDEX_UNIT_SIZE
        if force or pos + window // 2 > self._index_warmed_to:
            self._warm_list(self.log.index_list, pos, window)
            self._index_warmed_to = pos + window

    def _warm_list(self, segments: SegmentList, pos: int, window: int, prefault: bool = True) -> None:
        table = segments.table
        if table.count == 0:
            return
        target = pos + window
        end = table.end_offset
        if prefault:
            table.prefault(pos, min(target, end))
        if target > end:
            segments.prepare_next()
            spare = segments.spare()
            if spare is not None and prefault:
                scratch = impl.MappedTable(segments.file_size)
                scratch.push(spare[1], spare[0])
                scratch.prefault(spare[0], min(target, spare[0] + segments.file_size))
                scratch.pop_last()
