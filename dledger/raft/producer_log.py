"""ProducerLog: the idempotent producers' table folded from a member's log, without I/O
beyond reading its `LogStore`.

The leader stamps the first record of an idempotent request (a version-2 record body,
docs/FORMAT.md "Records") with the producer, its epoch, the first sequence number, the
request's record count and the leader's append time; the request's records follow at
consecutive indexes, all of the leader's term. `fold` reads entries in index order and
records each run in a `ProducerTable`. A member may hold only a prefix of a run (its
leader failed while replicating it; a new leader then commits what it has): the run ends
at the first entry of another term, at the next stamped entry or after `count` entries,
so the table records exactly the records the log holds. A run whose end is not in the
log yet stays open until it is.

Two tables are kept:
- the committed table, folded up to the commit index (every member, in the background);
  it is what snapshots and saved images carry;
- the leader's table: a copy of the committed table plus the leader's own uncommitted
  tail, built when a member starts serving idempotent requests in a term, and then kept
  current by the leader itself (`leader_recorded`) as it appends stamped requests, so a
  retry that arrives while its first attempt is still uncommitted is a duplicate too.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dledger.columns import ColumnBatch
from dledger.entry import MAGIC_RECORD, RECORD_STAMPED
from dledger.raft.log import LogStore
from dledger.raft.producers import ProducerTable, Stamp, TableImage

log = logging.getLogger(__name__)

StampReader = Callable[[bytes], "Stamp | None"]
"""Parses the stamp of a record body (None for an unstamped one); raises ValueError for
a damaged stamp."""

_FOLD = struct.Struct(">q?")  # next index, open run follows
_RUN = struct.Struct(">qqqIqqqI")  # the open run's stamp, first index, term, entries seen

FOLD_BATCH_ENTRIES = 65_536
FOLD_BATCH_BYTES = 16 << 20


@dataclass(slots=True)
class _OpenRun:
    stamp: Stamp
    first_index: int
    term: int
    seen: int


@dataclass(frozen=True)
class FoldImage:
    """A fold's state at one moment (`StampFold.image`), packed by `encode`."""

    head: bytes
    table: TableImage

    def encode(self) -> bytes:
        """`StampFold.encode`'s bytes."""
        return self.head + self.table.encode()


class StampFold:
    """Folds stamped runs into `table` in index order (entries from `next_index` on).

    Args:
        table: the table to fold into.
        next_index: the first index not folded yet.
        read_stamp: how to parse a stamped record body.
    """

    def __init__(self, table: ProducerTable, next_index: int, read_stamp: StampReader) -> None:
        self.table = table
        self.next_index = next_index
        self.read_stamp = read_stamp
        self._open: _OpenRun | None = None
        self.changes = 0
        """How many runs were folded into the table (a change counter)."""

    @property
    def open_run(self) -> bool:
        """A stamped run whose end is not folded yet."""
        return self._open is not None

    def encode(self) -> bytes:
        """The fold's state: where it is, its open run and its table (for saved copies
        and snapshots; `decode` reads it back)."""
        return self.image().encode()

    def image(self) -> FoldImage:
        """What `encode` writes, its table not packed yet (`ProducerTable.image`)."""
        run = self._open
        head = _FOLD.pack(self.next_index, run is not None)
        if run is not None:
            s = run.stamp
            head += _RUN.pack(
                s.producer_id, s.epoch, s.first_seq, s.count, s.append_time_ms, run.first_index, run.term, run.seen
            )
        return FoldImage(head, self.table.image())

    @classmethod
    def decode(cls, data: bytes, read_stamp: StampReader) -> StampFold:
        """The fold `encode` wrote.

        Raises:
            ValueError: the image is truncated or damaged.
        """
        try:
            next_index, has_run = _FOLD.unpack_from(data)
            offset = _FOLD.size
            run = None
            if has_run:
                pid, epoch, first_seq, count, time_ms, first_index, term, seen = _RUN.unpack_from(data, offset)
                run = _OpenRun(Stamp(pid, epoch, first_seq, count, time_ms), first_index, term, seen)
                offset += _RUN.size
        except struct.error as exc:
            raise ValueError(f"producer fold image is truncated: {exc}") from None
        fold = cls(ProducerTable.decode(data[offset:]), next_index, read_stamp)
        fold._open = run
        return fold

    def copy(self) -> StampFold:
        """An independent fold at the same point (its table and open run copied)."""
        fold = StampFold(self.table.copy(), self.next_index, self.read_stamp)
        run = self._open
        fold._open = None if run is None else _OpenRun(run.stamp, run.first_index, run.term, run.seen)
        return fold

    def feed(self, batch: ColumnBatch) -> None:
        """Fold the entries of `batch`, which must start at `next_index`."""
        count = batch.count
        if count == 0:
            return
        if int(batch.index[0]) != self.next_index:
            raise ValueError(f"fold expects index {self.next_index}, got {int(batch.index[0])}")
        terms = batch.term
        stamped = self._stamped_positions(batch)
        pos = 0
        if self._open is not None:
            pos = self._extend(terms, 0, stamped[0] if stamped else count)
        for k, at in enumerate(stamped):
            if at < pos:
                continue
            body = bytes(batch.bodies[int(batch.offsets[at]) : int(batch.offsets[at + 1])])
            try:
                stamp = self.read_stamp(body)
            except ValueError as exc:
                log.warning("index %d: a damaged producer stamp is ignored: %s", int(batch.index[at]), exc)
                continue
            if stamp is None:
                continue
            self._open = _OpenRun(stamp, int(batch.index[at]), int(terms[at]), 1)
            self.changes += 1
            stop = stamped[k + 1] if k + 1 < len(stamped) else count
            pos = self._extend(terms, at + 1, stop)
        self.next_index += count

    def _stamped_positions(self, batch: ColumnBatch) -> list[int]:
        records = np.flatnonzero(batch.magic == MAGIC_RECORD)
        if len(records) == 0:
            return []
        starts = batch.offsets[records]
        nonempty = starts < batch.offsets[records + 1]
        records, starts = records[nonempty], starts[nonempty]
        first_bytes = np.frombuffer(batch.bodies, dtype=np.uint8)[starts]
        return [int(p) for p in records[first_bytes == RECORD_STAMPED]]

    def _extend(self, terms: np.ndarray, start: int, stop: int) -> int:
        """Count the open run's entries in terms[start:stop] (the next stamped entry or
        the batch's end is `stop`); close it when it ends there. Returns the position
        after the run's last entry seen."""
        run = self._open
        assert run is not None
        want = min(run.stamp.count - run.seen, stop - start)
        segment = terms[start : start + want]
        other = np.flatnonzero(segment != run.term)
        taken = int(other[0]) if len(other) else want
        run.seen += taken
        ended = len(other) > 0 or run.seen == run.stamp.count or start + taken < len(terms)
        if ended:
            self._close()
        return start + taken

    def _close(self) -> None:
        run = self._open
        self._open = None
        if run is None:
            return
        s = run.stamp
        stamp = Stamp(s.producer_id, s.epoch, s.first_seq, run.seen, s.append_time_ms)
        try:
            self.table.record(stamp, run.first_index)
        except ValueError as exc:  # never written by a leader that checked: keep going
            log.warning("the producer table skips the run at index %d: %s", run.first_index, exc)

    def finish(self) -> None:
        """Close an open run at the end of what was fed (a leader appends after it in a
        later term, so it cannot grow)."""
        self._close()


class ProducerLog:
    """The committed table and the leader's table of one member.

    Args:
        store: the member's log.
        fold: the committed fold (from a saved image or the log's start).
    """

    def __init__(self, store: LogStore, fold: StampFold) -> None:
        self.store = store
        self.committed = fold
        self._leader: ProducerTable | None = None
        self._leader_term = -1

    @property
    def folded_index(self) -> int:
        """The last index the committed table covers."""
        return self.committed.next_index - 1

    def fold_committed(self, committed_index: int, max_entries: int = FOLD_BATCH_ENTRIES) -> int:
        """Fold committed entries past `folded_index`, at most `max_entries`; how many."""
        return _fold_range(self.store, self.committed, committed_index, max_entries)

    def leader_backlog(self, term: int, committed_index: int) -> int:
        """How many committed entries `leader_table` would still fold before a leader of
        `term` can check its first request (0 once that table is built)."""
        if self._leader is not None and self._leader_term == term:
            return 0
        return max(0, committed_index - self.folded_index)

    def leader_table(self, term: int, committed_index: int) -> ProducerTable:
        """The table a leader of `term` checks requests against; built on the first
        call in a term from the committed table and the log's uncommitted tail."""
        if self._leader is None or self._leader_term != term:
            while self.fold_committed(committed_index):
                pass
            tail = self.committed.copy()
            while _fold_range(self.store, tail, self.store.end_index, FOLD_BATCH_ENTRIES):
                pass
            tail.finish()
            self._leader, self._leader_term = tail.table, term
        return self._leader

    def leader_recorded(self, stamp: Stamp, first_index: int) -> None:
        """The leader appended a stamped request at `first_index`."""
        if self._leader is not None:
            self._leader.record(stamp, first_index)

    def drop_leader_table(self) -> None:
        """Forget the leader's table (leadership lost, or its log changed under it)."""
        self._leader, self._leader_term = None, -1


def _fold_range(store: LogStore, fold: StampFold, last_index: int, max_entries: int) -> int:
    begin, end = store.begin_index, store.end_index
    present = end + 1 if begin < 0 or begin > end else begin  # the first entry the log holds
    start = max(fold.next_index, present, 0)
    if start > fold.next_index:  # the prefix went (retention or compaction) before it was folded
        log.warning("entries %d..%d left the log before the producer table read them", fold.next_index, start - 1)
        fold.finish()
        fold.next_index = start
    count = min(max_entries, min(last_index, end) - start + 1)
    if count <= 0:
        return 0
    batch = store.read_columns(start, count, FOLD_BATCH_BYTES)
    fold.feed(batch)
    return batch.count
