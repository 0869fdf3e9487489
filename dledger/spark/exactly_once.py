"""Exactly-once appends of the `dledger` sink, without pyspark: a write task numbers its
rows 0, 1, 2, ... in partition order and appends them with the idempotent producer
(`DLedgerClient.append_records(records, stamp=ProducerStamp(pid, epoch, first_seq))`),
its producer id derived from the write's id and the partition, its epoch the micro-batch
id of a stream (0 for a batch job), never from the attempt. A retried or speculative
attempt of the task re-sends the same numbered rows and the leader answers those it has
as duplicates, so each row is in the log once. A stream's partition is one producer for
all its micro-batches (each batch a new epoch, which fences the attempts of earlier
batches), so a long-running query keeps one entry per partition in the leader's producer
table, not one per batch and partition. A batch write with `writerName` (Kafka's
`transactional.id`) does the same across jobs: the name and the partition make the
producer id, and each job's epoch, from the driver's clock, fences the jobs before it.

`dledger.client` (and so grpc) is imported only when a task sends (on executors).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from dledger.codes import DLedgerError, ResponseCode
from dledger.record import Record, decode_record
from dledger.spark.send_queue import requests_of, send_all

log = logging.getLogger(__name__)

RESENDS = 2
"""How many times a request whose outcome is unknown (`IndeterminateError`) is sent
again with the same stamp before the task fails (Spark's retry then re-sends it too)."""

_PRODUCER_CODES = {
    ResponseCode.OUT_OF_ORDER_SEQUENCE: "the leader expects another sequence number (rows of this task were lost "
    "or the partition's rows are not the same on this attempt)",
    ResponseCode.UNKNOWN_PRODUCER: "the leader no longer knows this task's producer id (it expired: "
    "producerIdExpirationMs of log time passed since the task's last write)",
    ResponseCode.TOO_MANY_PRODUCERS: "the leader keeps as many idempotent producers as it may (maxProducers); "
    "one is forgotten producerIdExpirationMs of log time after its last write",
    ResponseCode.PRODUCER_FENCED: "a newer epoch of this task's producer id has written (a later micro-batch of "
    "the query: this attempt is a leftover of an earlier batch; with writerName, a later job of the writer, or "
    "the job before ran on a driver whose clock was ahead of this one's; or another writer uses the id)",
}


class StampedClient(Protocol):
    """What a task needs of `dledger.client.DLedgerClient`."""

    def append_records(self, records: Sequence[Record], *, stamp: Any = None) -> Any:
        """Append `records` numbered from `stamp.first_seq` (an `AppendResult`); a
        `DLedgerClient` is given the encoded bodies (`append_record_bodies`) instead."""
        ...

    def close(self) -> None:
        """Close the channels."""
        ...


@dataclass(frozen=True)
class TaskIds:
    """What a write task's producer id and epoch are derived from (never the attempt).

    Attributes:
        write_id: the batch job's id (made once on the driver, shared by every task and
            retry of the job) or the streaming query's id (kept across restarts from the
            checkpoint).
        batch_id: the micro-batch id of a stream; -1 for a batch job.
        partition: the task's partition id.
        attempt: the attempt number (reported, not used in the id).
        writer_epoch: with a named batch writer (`writerName`, then `write_id`), the
            job's epoch; None otherwise.
    """

    write_id: str
    batch_id: int
    partition: int
    attempt: int = 0
    writer_epoch: int | None = None

    def producer_id(self) -> int:
        """The task's producer id, in [2^62, 2^63 - 1] (`dledger.client.derive_producer_id`):
        from the job and the partition, or from the query and the partition (the same for
        every micro-batch of the query: `epoch` tells them apart)."""
        from dledger.client import derive_producer_id

        if self.writer_epoch is not None:
            return derive_producer_id("dledger.spark.writer", self.write_id, self.partition)
        if self.batch_id < 0:
            return derive_producer_id("dledger.spark.job", self.write_id, self.partition)
        return derive_producer_id("dledger.spark.stream", self.write_id, self.partition)

    @property
    def epoch(self) -> int:
        """The producer epoch of the task's rows: the micro-batch id of a stream (a later
        batch fences what is left of the earlier ones), a named writer's job epoch (the
        same), 0 for another batch job."""
        if self.writer_epoch is not None:
            return self.writer_epoch
        return max(self.batch_id, 0)


@dataclass(frozen=True)
class TaskOutcome:
    """What one task attempt left in the log: its rows 0..rows-1, `appended` of them
    answered as new (the others were found as duplicates: appended by another attempt,
    or by this one in a request whose answer was lost and that was sent again),
    at the index runs `runs` ((first index, count), in row order; rows of an old
    duplicate whose indexes the leader no longer knows are in no run)."""

    rows: int
    appended: int
    runs: tuple[tuple[int, int], ...]

    @property
    def first(self) -> int:
        """The lowest index known to hold one of the rows, or -1."""
        return min((first for first, _ in self.runs), default=-1)

    @property
    def last(self) -> int:
        """The highest index known to hold one of the rows, or -1."""
        return max((first + count - 1 for first, count in self.runs), default=-1)


class ProducerWriteError(RuntimeError):
    """The leader refused a task's numbered rows (a task failure with a clear message)."""


def _refusal(exc: DLedgerError, producer_id: int, first_seq: int) -> BaseException:
    try:
        code = ResponseCode(exc.code)
    except ValueError:
        return exc
    why = _PRODUCER_CODES.get(code)
    if why is not None:
        return ProducerWriteError(
            f"dledger refused the rows numbered from {first_seq} of producer id {producer_id}: "
            f"{code.name}: {why}; {exc}"
        )
    if code == ResponseCode.UNSUPPORTED:
        return ProducerWriteError(
            f"the cluster refused records ({exc}): a java_compat cluster takes plain entries only, "
            "so exactly-once writes are not possible there; write with option exactlyOnce=false"
        )
    return exc


def _append_stamped(client: StampedClient, bodies: list[bytes], stamp: Any) -> Any:
    """`client.append_records(records, stamp=stamp)` for records already encoded: a
    `DLedgerClient` takes the bodies as they are (`append_record_bodies`: a row encoded
    once, no `Record` objects, which cost more than the rest of a task's work per row);
    another client gets the decoded `Record`s."""
    direct = getattr(client, "append_record_bodies", None)
    if direct is not None:
        return direct(bodies, stamp=stamp)
    records = []
    for body in bodies:
        timestamp, key, headers, value = decode_record(body)
        records.append(Record(value, key, timestamp, tuple(headers)))
    return client.append_records(records, stamp=stamp)


def send_request(client: StampedClient, producer_id: int, first_seq: int, bodies: list[bytes], epoch: int = 0) -> Any:
    """Append the record `bodies` numbered from `first_seq` in `epoch`, sending them
    again (same stamp, so never twice in the log) after an unknown outcome, at most
    `RESENDS` times (the client itself resends until its timeout first).

    Raises:
        ProducerWriteError: OUT_OF_ORDER_SEQUENCE, UNKNOWN_PRODUCER, PRODUCER_FENCED,
            TOO_MANY_PRODUCERS or a java_compat cluster's refusal.
        DLedgerError: another refusal, or still unknown after the resends.
    """
    from dledger.client import IndeterminateError, ProducerStamp

    stamp = ProducerStamp(producer_id, epoch, first_seq)
    for attempt in itertools.count():
        try:
            return _append_stamped(client, bodies, stamp)
        except IndeterminateError as exc:
            if attempt >= RESENDS:
                raise
            log.info("append of rows %d.. had an unknown outcome (%s); sending them again", first_seq, exc)
        except DLedgerError as exc:
            raise _refusal(exc, producer_id, first_seq) from exc
    raise AssertionError("unreachable")  # pragma: no cover


class _Outcome:
    """What the task's requests left in the log so far (see `TaskOutcome`)."""

    def __init__(self) -> None:
        self.rows = self.appended = 0
        self.runs: list[tuple[int, int]] = []

    def account(self, result: Any, count: int) -> None:
        """Add the answer `result` to a request of `count` rows."""
        runs = tuple(getattr(result, "runs", ()) or ())
        duplicate = bool(getattr(result, "duplicate", False))
        if not runs and not duplicate:
            runs = ((int(result.first_index), count),)
        for first, n in runs:
            if self.runs and self.runs[-1][0] + self.runs[-1][1] == first:
                self.runs[-1] = (self.runs[-1][0], self.runs[-1][1] + n)
            else:
                self.runs.append((int(first), int(n)))
        self.rows += count
        self.appended += 0 if duplicate else count


def send_numbered(
    client: StampedClient,
    chunks: Iterable[list[bytes]],
    batch_entries: int,
    batch_bytes: int,
    producer_id: int,
    epoch: int = 0,
) -> TaskOutcome:
    """Append every record body, numbered 0, 1, 2, ... in order in `epoch` of
    `producer_id`, in requests of at most `batch_entries` records and `batch_bytes`
    bytes (at least one record each), one in flight while the next is assembled
    (`dledger.spark.send_queue`). `chunks`: the bodies of each Arrow batch. The request
    boundaries depend only on the bodies, so a retried attempt sends the same requests.

    Raises:
        ProducerWriteError, DLedgerError: as `send_request`; the rows sent before stay in
            the log (a prefix of the task's rows) and nothing more is sent.
        ValueError: a bad row (from `chunks`); nothing more is sent.
    """
    outcome = _Outcome()

    def send(bodies: list[bytes]) -> None:  # in order: the rows sent so far number the next
        outcome.account(send_request(client, producer_id, outcome.rows, bodies, epoch), len(bodies))

    send_all(requests_of(chunks, batch_entries, batch_bytes), send, "dledger-spark-numbered")
    return TaskOutcome(outcome.rows, outcome.appended, tuple(outcome.runs))
