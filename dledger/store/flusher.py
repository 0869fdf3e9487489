"""Durability of a file store: msyncs of the data and the index, and group commit.

Sync mode returns from an append only once its bytes are durable, and concurrent
appenders share msyncs. One data msync is in flight at a time; it covers everything
appended when it starts. Appenders that arrive meanwhile sleep. When it ends, the ones
it made durable are woken, and so is the first one still waiting, which starts the
next msync for everything appended so far: a pipelined group commit, where the next
group gathers while the current one is written. Each sleeper has its own lock, so a
flush wakes only the threads it concerns. The msync runs without the GIL and without
the store's lock, so appends go on meanwhile.

Left at that, concurrent appenders split into two halves that take turns (one appends
while the other's msync runs), and each msync covers half of them. When msyncs are
slow (their latency, not their size, dominates: a busy or remote disk), fewer and
larger ones are faster, so before an msync starts its starter waits a little for the
threads the previous msync released to append again: until all of them are back, at
most GATHER_FRACTION of the recent msync time (and MAX_GATHER_S). That pays only when
the pages were written through the mapping (an msync then also write-protects every
page it cleans); with appends written through the file (`write_through`, the default
of sync mode) msyncs are cheap enough that the wait costs more than it saves, so the
next msync starts at once.

What is durable is what msyncs have covered, in log order: the data prefix
[0, `_flushed_data`) and the entries up to `_durable_end_index`. The index is flushed
apart (in sync mode only with the checkpoint): recovery rebuilds missing index units
from the data. When the log's end moves back (a truncation, counted by the core's
`shrinks`) while an msync is in flight, that msync publishes nothing.

After a failed msync nothing is acknowledged any more (fsyncgate): the store fails and
every waiter gets DISK_ERROR.

With `release_behind_bytes` set, the flush thread also hands flushed pages that far
behind the end of each file back to the kernel, so that the pages faulted in ahead of
the writer reuse memory the guest already has instead of memory the host took back.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from dledger._native import impl
from dledger.codes import DLedgerError, ResponseCode
from dledger.entry import INDEX_UNIT_SIZE
from dledger.store.segment_list import SegmentList

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Flush:
    """One data msync of [frm, to): it makes the entries up to end_index durable unless
    the log shrank (the core's `shrinks` moved on) before it ended."""

    frm: int
    to: int
    end_index: int
    shrinks: int


class FlushOptions(Protocol):
    """The options (StoreConfig's) the flush pass reads."""

    @property
    def checkpoint_interval_ms(self) -> int: ...

    @property
    def release_behind_bytes(self) -> int: ...


class Durability:
    """The flush and group-commit part of MmapLogStore, a mixin over the compiled core
    (which provides end_index, write_pos, shrinks and state)."""

    GATHER_FRACTION = 0.5
    """The longest wait for released appenders before an msync, as a fraction of the
    recent msync time (0 disables the wait)."""
    MAX_GATHER_S = 0.001

    appends_wait: bool = False
    """True when every append waits for durability (sync mode): the flush thread then
    leaves the data to the appenders."""

    # provided by the core and by MmapLogStore
    write_through: bool
    state: int
    config: FlushOptions
    data_list: SegmentList
    index_list: SegmentList
    failure: BaseException | None
    node_dir: Path
    _flushed_data: int
    _flushed_index: int
    _durable_end_index: int
    _last_checkpoint_ms: float

    if TYPE_CHECKING:  # read-only attributes of the core

        @property
        def end_index(self) -> int: ...
        @property
        def write_pos(self) -> int: ...
        @property
        def shrinks(self) -> int: ...

    def _init_durability(self) -> None:
        self._durable_lock = threading.Lock()  # guards the fields below and publishing
        self._in_flight: _Flush | None = None
        self._sleepers: list[tuple[int, threading.Lock]] = []  # (target index, its wake-up)
        self._gathered = threading.Condition(self._durable_lock)
        self._gathering = False
        self._expected = 0  # threads the last msync released (they may append again)
        self._arrived = 0  # callers that came since it ended
        self._msync_s = 0.0  # recent data msync time (moving average)
        self._index_lock = threading.Lock()
        self._released_data = 0  # pages before these offsets went back to the kernel
        self._released_index = 0
        self._release_refused = False
        self._checkpoint_failing: str | None = None  # why the last checkpoint write failed

    def write_checkpoint(self) -> None:  # pragma: no cover - MmapLogStore's
        raise NotImplementedError

    def try_checkpoint(self) -> bool:
        """`write_checkpoint`, where a full disk (ENOSPC, EDQUOT) or no file descriptor to
        spare (EMFILE, ENFILE: helper M held 20,000 idle connections to a member, and its
        store failed for good) is not the store's failure: the old checkpoint stays
        (recovery reads the data after it) and the next pass tries again, logged once per
        cause and once when it works again. Any other error (the directory gone, a
        read-only or failing disk) raises as before: the flush pass fails the store.
        Returns whether the checkpoint is written."""
        try:
            self.write_checkpoint()
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE):
                raise
            reason = exc.strerror or str(exc)
            if reason != self._checkpoint_failing:
                log.warning(
                    "cannot write the checkpoint of %s: %s (the previous one stays; retrying)", self.node_dir, reason
                )
            self._checkpoint_failing = reason
            return False
        if self._checkpoint_failing is not None:
            log.warning("the checkpoint of %s is written again", self.node_dir)
            self._checkpoint_failing = None
        return True

    @property
    def health(self) -> str:
        """ "" while the store takes writes, else why not: `disk full` (appends get
        DISK_FULL until space comes back) or `failed: <error>` (until it is reopened)."""
        if self.failure is not None or self.state == impl.STATE_DISK_ERROR:
            return f"failed: {self.failure}"
        if self.state == impl.STATE_DISK_FULL:
            return "disk full: appends refused until space comes back"
        return ""

    # -- data

    @property
    def durable_index(self) -> int:
        """The last entry the msyncs have covered (at most `end_index`); never blocks."""
        return min(self._durable_end_index, int(self.end_index))

    def wait_durable(self) -> None:
        """Return once every entry appended so far is on disk (group commit)."""
        self._make_durable(int(self.end_index), whole=False)

    def flush(self, data_only: bool = False) -> None:
        """msync everything written so far: the data (shared with group commit), then
        the index unless `data_only` (the index can always be rebuilt from the data).
        Fail-stop on I/O errors (DLedgerError DISK_ERROR)."""
        self._make_durable(int(self.end_index), whole=True)
        if not data_only:
            self._flush_index()

    def _make_durable(self, target: int, whole: bool) -> None:
        # whole: also the bytes written past the last entry (a blank, a rewritten tail)
        end_pos = int(self.write_pos) if whole else -1
        arrived = False
        while True:
            sleeper: threading.Lock | None = None
            with self._durable_lock:
                if self.failure is not None:
                    raise DLedgerError(ResponseCode.DISK_ERROR, f"store failed after an I/O error: {self.failure}")
                end_index, write_pos = int(self.end_index), int(self.write_pos)
                if self._durable_end_index >= min(target, end_index) and self._flushed_data >= min(end_pos, write_pos):
                    return
                if not arrived:
                    arrived = True
                    self._arrived += 1
                    if self._gathering:
                        self._gathered.notify()
                if self._in_flight is None and not self._gathering:
                    self._gather()
                    # shrinks first: a truncation after this read voids the flush
                    shrinks = int(self.shrinks)
                    end_index, write_pos = int(self.end_index), int(self.write_pos)
                    job = self._in_flight = _Flush(min(self._flushed_data, write_pos), write_pos, end_index, shrinks)
                else:
                    sleeper = threading.Lock()
                    sleeper.acquire()
                    self._sleepers.append((target, sleeper))
            if sleeper is not None:
                sleeper.acquire()  # released once `target` is durable, or to start the next msync
            else:
                self._run(job)

    def _gather(self) -> None:
        # Under _durable_lock, before an msync starts: wait (bounded) for the threads the
        # last msync released to come back, so that this msync covers their appends too.
        if self._arrived >= self._expected or self.GATHER_FRACTION <= 0 or self.write_through:
            return
        self._gathering = True
        try:
            deadline = time.monotonic() + min(self._msync_s * self.GATHER_FRACTION, self.MAX_GATHER_S)
            while self._arrived < self._expected:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._gathered.wait(left)
        finally:
            self._gathering = False

    def _run(self, job: _Flush) -> None:
        started = time.monotonic()
        try:
            self._msync(self.data_list, job.frm, job.to)
        except BaseException as exc:
            with self._durable_lock:
                self._in_flight = None
                if isinstance(exc, OSError):
                    self._fail(exc)
                self._wake(everyone=True)
            if isinstance(exc, OSError):
                raise DLedgerError(ResponseCode.DISK_ERROR, f"flush failed: {exc}") from exc
            raise
        took = time.monotonic() - started
        with self._durable_lock:
            self._in_flight = None
            self._msync_s = took if not self._msync_s else 0.8 * self._msync_s + 0.2 * took
            voided = job.shrinks != self.shrinks
            if not voided:
                self._flushed_data = job.to
                self._durable_end_index = job.end_index
            self._wake(everyone=voided)

    def _wake(self, everyone: bool) -> None:
        # Under _durable_lock: release the sleepers that are durable now, and the first
        # one that is not (it starts the next msync); `everyone` to let all re-check.
        durable, end_index = self._durable_end_index, int(self.end_index)
        waiting: list[tuple[int, threading.Lock]] = []
        for target, sleeper in self._sleepers:
            if everyone or durable >= min(target, end_index):
                sleeper.release()
            else:
                waiting.append((target, sleeper))
        # who may append again: the released ones and the caller (none after a failure
        # or a truncation: nothing to wait for)
        self._expected = 0 if everyone else len(self._sleepers) - len(waiting) + 1
        self._arrived = 0
        if waiting:
            waiting.pop(0)[1].release()
        self._sleepers = waiting

    @staticmethod
    def _msync(segments: SegmentList, frm: int, to: int) -> None:
        # the one place data becomes durable (tests inject I/O errors here)
        segments.table.msync(frm, to)

    # -- index

    def _flush_index(self) -> None:
        with self._index_lock:
            to = (int(self.end_index) + 1) * INDEX_UNIT_SIZE
            try:
                self._msync(self.index_list, min(self._flushed_index, to), to)
            except OSError as exc:
                self._fail(exc)
                raise DLedgerError(ResponseCode.DISK_ERROR, f"flush failed: {exc}") from exc
            self._flushed_index = to

    # -- the flush thread

    def _flush_once(self) -> None:
        """One pass of the flush thread: flush what was appended (async mode; in sync
        mode the appends flush the data themselves and the index goes with the
        checkpoint), hand pages far behind back to the kernel (`release_behind_bytes`),
        then write the checkpoint when it is due."""
        if self.state == impl.STATE_DISK_ERROR:
            return
        now = time.monotonic() * 1000
        checkpoint_due = now - self._last_checkpoint_ms >= self.config.checkpoint_interval_ms
        index_to = (int(self.end_index) + 1) * INDEX_UNIT_SIZE
        if not self.appends_wait:
            if self.write_pos != self._flushed_data or index_to != self._flushed_index:
                self.flush()
        elif checkpoint_due and index_to != self._flushed_index:
            self._flush_index()
        self._release_behind()
        if checkpoint_due:
            self._last_checkpoint_ms = now
            self.try_checkpoint()

    RELEASE_STEP_BYTES = 4 << 20
    """Pages go back to the kernel in steps of at least this many bytes (a quarter of
    `release_behind_bytes` when that is smaller), not on every flush."""
    RELEASE_OVERLAP_BYTES = 2 << 20
    """Each step starts this far before the previous one ended: the page cache drops
    only whole folios (up to 2 MiB), so a folio across the previous end goes now."""

    def _release_behind(self) -> None:
        """Hand the flushed pages more than `release_behind_bytes` behind the end of the
        data and of the index back to the kernel (StoreConfig.release_behind_bytes).
        Only advice: when the kernel refuses it, a warning and the pages stay."""
        keep = self.config.release_behind_bytes
        if keep <= 0 or self._release_refused:
            return
        step = max(min(self.RELEASE_STEP_BYTES, keep // 4), 4096)
        data_end = min(self._flushed_data, int(self.write_pos))
        index_end = min(self._flushed_index, (int(self.end_index) + 1) * INDEX_UNIT_SIZE)
        try:
            self._released_data = self._release_pages(self.data_list, self._released_data, data_end - keep, step)
            self._released_index = self._release_pages(self.index_list, self._released_index, index_end - keep, step)
        except OSError as exc:
            log.warning("cannot hand flushed pages back to the kernel, keeping them cached: %s", exc)
            self._release_refused = True

    def _release_pages(self, segments: SegmentList, released: int, to: int, step: int) -> int:
        # Returns the new released position (it follows the log back when it shrank).
        frm = min(released, max(to, 0))
        if to - frm < step:
            return frm
        segments.release(max(frm - self.RELEASE_OVERLAP_BYTES, 0), to)
        return to

    def _fail(self, exc: BaseException) -> None:
        # fsyncgate: after a failed flush nothing may be acknowledged any more.
        if isinstance(exc, OSError | DLedgerError):
            log.error("store failed, refusing further writes: %s", exc)
            self.failure = exc
            self.state = impl.STATE_DISK_ERROR
