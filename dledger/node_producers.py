"""NodeProducers: a member's idempotent producers (Kafka's idempotent producer).

A client numbers the records it sends as a producer (`producer_id`, `epoch`, sequence
numbers from 0); the leader checks each numbered request against its producer table
(`dledger.raft.producers`) before appending it:

- new records are appended, the first one stamped (a version-2 record body carrying the
  producer, epoch, first sequence number, count and the leader's append time: the table
  is rebuilt from these stamps, `dledger.raft.producer_log`);
- records the log already holds are not appended again: the answer gives their indexes
  (once they are committed), so a retry after an unknown outcome is safe;
- a gap, an older epoch or a producer the leader does not know is refused
  (OUT_OF_ORDER_SEQUENCE, PRODUCER_FENCED, UNKNOWN_PRODUCER), and so is one producer
  more than `max_producers` (TOO_MANY_PRODUCERS).

Every member folds the committed log's stamps into its committed table in the
background (`fold_pass`) and saves it in `<node dir>/producers` (the folded index, then
the table's checksummed image), written atomically; a restart reads it back and folds
on from there. Retention keeps every entry the saved image does not cover yet. A leader
whose table lags the commit index by more than `LEADER_FOLD_LIMIT` entries refuses
numbered requests with LEADER_NOT_READY (retried by clients) until the background fold
has caught up.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from dledger.codes import DLedgerError, ResponseCode
from dledger.config import DLedgerConfig
from dledger.entry import HEADER_SIZE, MAGIC_RECORD, MAX_ENTRY_SIZE
from dledger.raft.driver import RaftDriver
from dledger.raft.log import LogStore
from dledger.raft.producer_ids import ProducerIdBlocks
from dledger.raft.producer_log import FOLD_BATCH_ENTRIES, ProducerLog, StampFold
from dledger.raft.producers import MAX_ID, ProducerTable, Stamp, Verdict
from dledger.record import STAMP_SIZE, record_content, record_stamp, stamp_record_body
from dledger.store.kvfile import fsync_dir, write_synced

log = logging.getLogger(__name__)

IMAGE_FILE = "producers"
SAVE_EVERY_MS = 1000
"""How often a changed committed table is saved at most."""
SAVE_DUTY = 20
"""A save waits at least this many times as long as the last one took after it (a large
table is saved less often: a save takes a member's CPU, from appends too, for as long as
it encodes and writes the image)."""
LEADER_FOLD_LIMIT = 2 * FOLD_BATCH_ENTRIES
"""A leader's first numbered request of a term folds what the background has not folded
yet, under the node's lock; with more committed entries than this still to fold (a
restart without a saved table, on a long log) it is refused with LEADER_NOT_READY, which
clients retry, rather than hold the lock (and heartbeats) for that long."""


@dataclass(frozen=True)
class StampedAppend:
    """The leader's answer to a numbered request.

    Attributes:
        runs: (first index, count) runs holding the request's records, in sequence
            order; empty for records older than the kept requests (their indexes are no
            longer known).
        duplicate: every record was in the log already; nothing was appended.
        future: completes with the highest index of `runs` once it is committed.
    """

    runs: tuple[tuple[int, int], ...]
    duplicate: bool
    future: Future[int]


def _elapsed_s() -> float:
    """Seconds on a monotonic clock: how long a save takes (tests replace it)."""
    return time.monotonic()


def read_stamp(body: bytes) -> Stamp | None:
    """The stamp of a record body, None for an unstamped one."""
    fields = record_stamp(body)
    return Stamp(*fields) if fields is not None else None


def _done(value: int) -> Future[int]:
    future: Future[int] = Future()
    future.set_result(value)
    return future


class NodeProducers:
    """The producer tables of one member and the leader's admission of numbered requests.

    Args:
        store: the member's log.
        node_dir: where the saved image lives (None: not saved, folded from the log).
        config: `producer_id_expiration_ms` (log time after which an idle producer is
            forgotten), `max_producers` (the leader's limit) and `java_compat` (no
            records there).
        committed_index: the member's commit index now.
        wall_ms: the clock a leader stamps appends with (ms since the epoch).
    """

    def __init__(
        self,
        store: LogStore,
        node_dir: Path | None,
        config: DLedgerConfig,
        committed_index: Callable[[], int],
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.store = store
        self.wall_ms = wall_ms
        self.path = node_dir / IMAGE_FILE if node_dir is not None else None
        self.committed_index = committed_index
        self.lock = threading.Lock()
        self._save_lock = threading.Lock()
        """One save at a time (each takes its image under `lock` and writes it outside)."""
        fold = self._load(config.producer_id_expiration_ms)
        self.log = ProducerLog(store, fold)
        self.saved_index = fold.next_index - 1
        self._saved_at_ms = 0.0
        self.save_every_ms = float(SAVE_EVERY_MS)
        """The least time between two saves (`SAVE_DUTY` times the last save's)."""
        self._clean = True
        """No stamp folded since the last save: entries folded since hold none, so the
        saved image covers them too (retention may take them)."""
        self._inflight: dict[int, Future[int]] = {}
        self._ids = ProducerIdBlocks()
        self.java_compat = config.store.java_compat
        self.max_producers = config.max_producers

    def _load(self, expiration_ms: int) -> StampFold:
        begin, end = max(self.store.begin_index, 0), self.store.end_index
        if self.path is not None and self.path.exists():
            try:
                fold = StampFold.decode(self.path.read_bytes(), read_stamp)
                if fold.next_index > end + 1:
                    raise ValueError(f"it covers up to {fold.next_index - 1}, past the log's end {end}")
                fold.table.expiration_ms = expiration_ms
                if fold.next_index < begin:
                    # entries between the image and the log's start held no stamps (retention
                    # takes only what the image covers or what holds none)
                    fold.finish()
                    fold.next_index = begin
                return fold
            except (OSError, ValueError) as exc:
                log.warning("%s is unusable (%s): the producer table is rebuilt from the log", self.path, exc)
        if begin > 0:
            log.warning("the log starts at %d: producers stamped before it are not known", begin)
        return StampFold(ProducerTable(expiration_ms), begin, read_stamp)

    # -- the background pass

    def fold_pass(self) -> float | None:
        """Fold newly committed entries and save the table when due; the milliseconds
        until the next pass wants to run (0: more to fold)."""
        with self.lock:
            folded = self._fold()
            due = self.wall_ms() - self._saved_at_ms >= self.save_every_ms and not self._clean
        if due:
            self.save()
        return 0 if folded else None

    def close(self) -> None:
        """Fold what is committed and save the table (at shutdown, and before the log is
        compacted: the saved table then covers every committed entry)."""
        with self.lock:
            while self._fold():
                pass
        self.save()

    def _fold(self, up_to: int | None = None) -> int:
        """Fold a batch of committed entries, up to `up_to` (default: the commit index),
        keeping track of whether the saved image still covers them (caller holds
        `lock`); how many."""
        before = self.log.committed.changes
        folded = self.log.fold_committed(self.committed_index() if up_to is None else up_to)
        if self.log.committed.changes == before and self._clean:
            self.saved_index = self.log.folded_index  # nothing stamped: the saved image still holds
        else:
            self._clean = False
        return folded

    # -- snapshots (dledger.statemachine.snapshot_manager.SnapshotCompanion)

    def capture(self, index: int) -> bytes | None:
        """The committed table at exactly `index` (the apply thread, as a snapshot at
        `index` is captured: the background fold never passes the applied index)."""
        with self.lock:
            while self.log.folded_index < index and self._fold(index):
                pass
            if self.log.folded_index != index:
                log.warning(
                    "the producer table is at %d, not %d: snapshot %d does not carry it",
                    self.log.folded_index,
                    index,
                    index,
                )
                return None
            image = self.log.committed.image()
        return image.encode()

    def load(self, image: bytes) -> None:
        """Adopt the table a snapshot carried when it is ahead of this member's."""
        fold = StampFold.decode(image, read_stamp)
        with self.lock:
            if fold.next_index <= self.log.committed.next_index:
                return
            fold.table.expiration_ms = self.log.committed.table.expiration_ms
            self.log.committed = fold
            self.log.drop_leader_table()
            self._clean = False
        self.save()

    def save(self) -> None:
        """Write the committed table atomically when it changed since the last save
        (the caller does not hold `lock`). Its image is taken under `lock`, packed and
        written outside it, one save at a time. Where retention may cut the log: up to
        `saved_index`, after which the image folds on."""
        with self._save_lock:
            with self.lock:
                if self._clean:
                    return
                fold, index, changes = self.log.committed, self.log.folded_index, self.log.committed.changes
                if self.path is None:
                    self.saved_index = index
                    return
                image = fold.image()
            started = _elapsed_s()
            tmp = self.path.with_name(IMAGE_FILE + ".tmp")
            try:
                write_synced(tmp, image.encode())
                tmp.replace(self.path)
                fsync_dir(self.path.parent)
            except OSError as exc:
                log.warning("cannot save the producer table: %s", exc)
                return
            with self.lock:
                self.saved_index = max(self.saved_index, index)
                self._saved_at_ms = self.wall_ms()
                self.save_every_ms = max(float(SAVE_EVERY_MS), SAVE_DUTY * 1000 * (_elapsed_s() - started))
                # clean when nothing was folded in since the image (a snapshot's table adopted counts)
                self._clean = fold is self.log.committed and fold.changes == changes and not fold.open_run

    def retention_floor(self) -> int:
        """The lowest index retention must keep: what the saved table does not cover."""
        return self.saved_index + 1

    # -- the leader's admission

    def allocate(self, driver: RaftDriver, now_ms: int) -> tuple[int | None, bool]:
        """A producer id for an idempotent producer (`InitProducer`; the node's lock
        held), from the leader's blocks (`dledger.raft.producer_ids`): unique in the
        group however many are asked for, in [2^61, 2^62).

        Returns (the id, False), or (None, whether a NOOP was appended) when the leader
        needs an entry of its term committed first: a NOOP is appended (and pushed)
        unless the log already ends in an uncommitted entry of the term. The caller
        answers LEADER_NOT_READY then, which clients retry.

        Raises:
            DLedgerError: NOT_LEADER; UNSUPPORTED in java_compat mode (no records);
                LEADER_PENDING_FULL past the scheme's last index; LEADER_TRANSFERRING
                when a NOOP is needed during a leadership transfer.
        """
        member = driver.core.member_state
        if not member.is_leader:
            raise DLedgerError(ResponseCode.NOT_LEADER, f"leader is {member.leader_id}")
        if self.java_compat:
            raise DLedgerError(ResponseCode.UNSUPPORTED, "idempotent producers need records (off in java_compat)")
        store, term, committed = self.store, member.current_term, member.committed_index
        try:
            committed_term = store.term_at(committed)
        except DLedgerError:  # not in the log (before its start, or no entry yet)
            committed_term = -1
        producer_id = self._ids.allocate(term, committed, committed_term)
        if producer_id is not None:
            return producer_id, False
        if store.end_index > committed and store.end_term == term:
            return None, False  # an entry of the term is on its way
        driver.append_noop(now_ms)
        driver.dispatch_all(now_ms)
        return None, True

    def append(
        self, driver: RaftDriver, bodies: Sequence[bytes], producer_id: int, epoch: int, first_seq: int, now_ms: int
    ) -> StampedAppend:
        """Check and append one numbered request as leader (the node's lock held).

        Raises:
            DLedgerError: OUT_OF_ORDER_SEQUENCE, PRODUCER_FENCED, UNKNOWN_PRODUCER, TOO_MANY_PRODUCERS,
                UNEXPECTED_ARGUMENT (a field out of range), or what the leader's append
                raises; nothing was appended.
        """
        if not bodies:
            raise DLedgerError(ResponseCode.REQUEST_WITH_EMPTY_BODYS)
        if not (0 <= producer_id <= MAX_ID and 0 <= epoch <= MAX_ID and 0 <= first_seq <= MAX_ID - len(bodies) + 1):
            raise DLedgerError(
                ResponseCode.UNEXPECTED_ARGUMENT,
                f"producer id, epoch and sequence numbers (first_seq + count - 1 too) must be in 0..{MAX_ID}",
            )
        member = driver.core.member_state
        if not member.is_leader:
            raise DLedgerError(ResponseCode.NOT_LEADER, f"leader is {member.leader_id}")
        with self.lock:
            behind = self.log.leader_backlog(member.current_term, member.committed_index)
            if behind > LEADER_FOLD_LIMIT:
                raise DLedgerError(
                    ResponseCode.LEADER_NOT_READY,
                    f"the producer table is still being rebuilt from the log ({behind} committed entries "
                    f"to go; nothing was appended): retry",
                )
            table = self.log.leader_table(member.current_term, member.committed_index)
            check = table.check(Stamp(producer_id, epoch, first_seq, len(bodies)))
            verdict = check.verdict
            if verdict is Verdict.FENCED:
                raise DLedgerError(
                    ResponseCode.PRODUCER_FENCED,
                    f"producer {producer_id}: epoch {epoch} is older than its current epoch {check.epoch}",
                )
            if verdict is Verdict.UNKNOWN_PRODUCER:
                raise DLedgerError(
                    ResponseCode.UNKNOWN_PRODUCER,
                    f"producer {producer_id} epoch {epoch} is not known here (expired, or never started at "
                    f"sequence 0): start it again at sequence 0 or with a new epoch",
                )
            if verdict is Verdict.OUT_OF_ORDER:
                raise DLedgerError(
                    ResponseCode.OUT_OF_ORDER_SEQUENCE,
                    f"producer {producer_id}: sequence {first_seq} after a gap; expected sequence {check.expected_seq}",
                )
            if check.runs:  # DUPLICATE, PARTIAL: the numbers the log holds must name these records
                self._same_records(check.runs, bodies, producer_id, epoch, first_seq)
            if verdict in (Verdict.DUPLICATE, Verdict.STALE):
                return StampedAppend(check.runs, True, self._committed(driver, check.runs, now_ms))
            if not table.admits(producer_id, self.max_producers, max(table.clock_ms, self.wall_ms())):
                raise DLedgerError(
                    ResponseCode.TOO_MANY_PRODUCERS,
                    f"the leader keeps {self.max_producers} idempotent producers already (maxProducers; one is "
                    f"forgotten {table.expiration_ms} ms of log time after its last write): nothing was appended",
                )
            skip = check.expected_seq - first_seq if verdict is Verdict.PARTIAL else 0
            run, future = self._append_new(driver, table, bodies[skip:], producer_id, epoch, first_seq + skip, now_ms)
            if verdict is Verdict.PARTIAL and check.runs:
                future = _both(self._committed(driver, check.runs, now_ms), future)
            return StampedAppend((*check.runs, run), False, future)

    def _same_records(
        self, runs: tuple[tuple[int, int], ...], bodies: Sequence[bytes], producer_id: int, epoch: int, first_seq: int
    ) -> None:
        """Refuse a request whose sequence numbers the log holds for other records: a
        producer that started again under the same id and epoch with new records (a
        restarted process, two processes with one derived id). Before, its records were
        answered as duplicates, acknowledged at the old records' indexes and never
        appended (helper H #1). The records' keys, headers and values are compared, not
        their timestamps. Records no longer in the log cannot be compared (STALE stays a
        duplicate: a Spark task's retry resends its whole partition).

        Raises:
            DLedgerError: PRODUCER_FENCED, naming the first sequence number that differs.
        """
        k = 0  # the request's record the run starts with
        for first, count in runs:
            try:
                held = self.store.get_range(first, first + count)
            except DLedgerError:  # compacted away (a log compacted to empty has no range to read)
                held = []
            for entry, body in zip(held if len(held) == count else (), bodies[k : k + count], strict=False):
                if record_content(entry.body) != record_content(body):
                    raise DLedgerError(
                        ResponseCode.PRODUCER_FENCED,
                        f"producer {producer_id} epoch {epoch}: sequence {first_seq + k + entry.index - first} is "
                        f"the record at index {entry.index}, and this request's record differs: an id and epoch "
                        "number one stream of records, so a producer that starts again with other records needs "
                        "a higher epoch or a new id (nothing was appended)",
                    )
            k += count

    def _append_new(
        self,
        driver: RaftDriver,
        table: ProducerTable,
        bodies: Sequence[bytes],
        producer_id: int,
        epoch: int,
        first_seq: int,
        now_ms: int,
    ) -> tuple[tuple[int, int], Future[int]]:
        append_time = max(table.clock_ms, self.wall_ms())
        count = len(bodies)
        try:
            first_body = stamp_record_body(bodies[0], producer_id, epoch, first_seq, count, append_time)
        except ValueError as exc:
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"body 0: {exc} (nothing was appended)") from None
        if len(first_body) > MAX_ENTRY_SIZE - HEADER_SIZE:
            raise DLedgerError(
                ResponseCode.UNEXPECTED_ARGUMENT,
                f"body 0 is {len(first_body)} bytes with its {STAMP_SIZE}-byte producer stamp; "
                f"an entry body holds at most {MAX_ENTRY_SIZE - HEADER_SIZE} (nothing was appended)",
            )
        first = self.store.end_index + 1
        try:
            future = driver.append_requests([[first_body, *bodies[1:]]], now_ms, [MAGIC_RECORD])[0]
        except BaseException:
            self.log.drop_leader_table()  # rebuilt from the log on the next request
            raise
        driver.dispatch_all(now_ms)  # the pushes go out now, as for any client append
        last = first + count - 1
        self.log.leader_recorded(Stamp(producer_id, epoch, first_seq, count, append_time), first)
        self._inflight[last] = future
        future.add_done_callback(lambda _f: self._inflight.pop(last, None))
        return (first, count), future

    def _committed(self, driver: RaftDriver, runs: tuple[tuple[int, int], ...], now_ms: int) -> Future[int]:
        """A future for the moment the highest index of `runs` is committed."""
        if not runs:
            return _done(-1)
        last = max(first + count - 1 for first, count in runs)
        member = driver.core.member_state
        if last <= member.committed_index:
            return _done(last)
        inflight = self._inflight.get(last)
        if inflight is not None:
            return inflight
        return driver.core.quorum.wait_committed(member.current_term, last)


def _both(first: Future[int], second: Future[int]) -> Future[int]:
    """A future completing with `second`'s result once both completed (or the first error)."""
    out: Future[int] = Future()
    lock = threading.Lock()

    def settle(_f: Future[int]) -> None:
        with lock:
            if out.done() or not (first.done() and second.done()):
                return
            error = first.exception() or second.exception()
            if error is not None:
                out.set_exception(error)
            else:
                out.set_result(second.result())

    first.add_done_callback(settle)
    second.add_done_callback(settle)
    return out
