"""Writers of the `dledger` data source: `df.write.format("dledger").mode("append")` and
`writeStream.format("dledger")`.

Exactly-once by default (`dledger.spark.exactly_once`): each task numbers its rows and
appends them as records with the idempotent producer, its producer id derived from the
batch job's id (made once, in `writer()`, and pickled to every task and retry) or the
streaming query's id and micro-batch id (Spark's local properties
`sql.streaming.queryId` and `streaming.sql.batchId`, which a restart from the checkpoint
keeps), and the partition. With `exactlyOnce=false` a value alone is written as plain
entries (and key, timestamp or headers as records), at-least-once. See docs/SPARK.md.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from dledger.entry import HEADER_SIZE, MAGIC_NORMAL, MAGIC_RECORD, MAX_ENTRY_SIZE
from dledger.spark.exactly_once import ProducerWriteError, StampedClient, TaskIds, send_numbered
from dledger.spark.live import ClientFactory, append_all, client_factory_for, close_client, fetch_view_once
from dledger.spark.options import WriteOptions, parse_write_options
from dledger.spark.records import bodies_of_rows
from dledger.spark.sink_report import abort_report, commit_report
from dledger.spark.target import Target
from dledger.spark.write_schema import WriteColumns, write_columns_of

log = logging.getLogger(__name__)

QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""The local property holding a streaming query's id (kept across checkpoint restarts)."""
BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""The local property holding the micro-batch id of a streaming write's tasks."""


@dataclass
class AppendedMessage(WriterCommitMessage):
    """What one write task left in the log.

    Attributes:
        first, last: the lowest and highest index known to hold its rows (-1: none known).
        count: its rows in the log (all of the task's rows: it finished).
        partition, attempt: the task.
        appended: rows this attempt appended; count - appended were in the log already
            (appended by an earlier or concurrent attempt, found as duplicates).
        runs: (first index, count) runs holding the rows, in row order (exactly-once).
        exactly_once: the rows were numbered (a retry cannot duplicate them).
    """

    first: int
    last: int
    count: int
    partition: int = -1
    attempt: int = 0
    appended: int = -1
    runs: tuple[tuple[int, int], ...] = ()
    exactly_once: bool = False


def writer_setup(
    options: Mapping[str, str],
    fields: Sequence[tuple[str, str]],
    overwrite: bool,
    factory_for: Callable[[Target], ClientFactory] = client_factory_for,
    streaming: bool = False,
) -> tuple[WriteOptions, ClientFactory, WriteColumns]:
    """Validate a write on the driver (`streaming`: of a streaming query): options,
    append mode, the columns, and that a member of the cluster answers within
    `connectTimeoutMs` (before, unreachable peers failed each task after `rpcTimeoutMs`,
    30 s, and again in each of Spark's retries); the clients of its tasks are made by
    `factory_for(target)`."""
    parsed = parse_write_options(options, overwrite, streaming)
    columns = write_columns_of(fields)
    factory = factory_for(parsed.target)
    fetch_view_once(parsed.target, factory, min(parsed.connect_timeout_ms, parsed.rpc_timeout_ms) / 1000)
    return parsed, factory, columns


def task_ids(job_id: str | None, writer_epoch: int | None = None) -> TaskIds:
    """The running Spark task's ids: the batch job's `job_id` (a writer's name with its
    `writer_epoch`), or (None) the streaming query id and micro-batch id from the task's
    local properties.

    Raises:
        ProducerWriteError: not in a Spark task, or a stream task without those properties.
    """
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        raise ProducerWriteError("a dledger write task must run inside a Spark task (no TaskContext)")
    if job_id is not None:
        return TaskIds(job_id, -1, ctx.partitionId(), ctx.attemptNumber(), writer_epoch)
    query, batch = ctx.getLocalProperty(QUERY_ID_PROPERTY), ctx.getLocalProperty(BATCH_ID_PROPERTY)
    if not query or batch is None:
        raise ProducerWriteError(
            f"this Spark gives the stream writer no query id or batch id ({QUERY_ID_PROPERTY}={query!r}, "
            f"{BATCH_ID_PROPERTY}={batch!r}): exactly-once is not possible; write with option exactlyOnce=false"
        )
    return TaskIds(query, int(batch), ctx.partitionId(), ctx.attemptNumber())


def plain_ids(write_id: str) -> TaskIds:
    """The running task's partition and attempt under `write_id` (at-least-once writes,
    which use no producer id)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return TaskIds(write_id, -1, ctx.partitionId() if ctx else -1, ctx.attemptNumber() if ctx else 0)


def write_task(
    options: WriteOptions, factory: ClientFactory, columns: WriteColumns, rows: Iterator[Any], ids: TaskIds
) -> AppendedMessage:
    """Append one task's rows (Arrow record batches): numbered with the producer id of
    `ids` when the write is exactly-once, else as they come."""
    client = factory(options.target.peers or "", options.target.group, options.rpc_timeout_ms / 1000)
    try:
        if options.exactly_once:
            chunks = _bodies(rows, columns, ids.partition, as_records=True)
            stamped = cast(StampedClient, client)
            pid, epoch = ids.producer_id(), ids.epoch
            out = send_numbered(stamped, chunks, options.batch_entries, options.batch_bytes, pid, epoch)
            return AppendedMessage(
                out.first, out.last, out.rows, ids.partition, ids.attempt, out.appended, out.runs, exactly_once=True
            )
        magic = MAGIC_RECORD if columns.records else MAGIC_NORMAL
        bodies = _bodies(rows, columns, ids.partition, as_records=False)
        done = append_all(client, bodies, options.batch_entries, options.batch_bytes, magic)
        return AppendedMessage(done.first, done.last, done.count, ids.partition, ids.attempt, done.count)
    finally:
        close_client(client)


MAX_BODY_BYTES = MAX_ENTRY_SIZE - HEADER_SIZE
"""The largest body any member takes (`ServiceLimits.max_body_bytes` with the default
`maxEntrySize`; a member configured lower refuses less)."""


RECORD_SLACK = 19
"""A record body's bytes besides its key and value, without headers: version and
timestamp (9), the key's length and the header count (varints, 5 each at most)."""


def _may_exceed(batch: Any, columns: WriteColumns) -> bool:
    """Whether a row of `batch` may make a body over MAX_BODY_BYTES: a bound from the
    longest value and key (vectorized, no Python work per row); rows with headers are
    measured one by one."""
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    if columns.headers >= 0:
        return True
    longest = [pc.max(pc.binary_length(batch.column(k))).as_py() or 0 for k in (columns.value, columns.key) if k >= 0]
    return RECORD_SLACK + sum(longest) > MAX_BODY_BYTES


def _bodies(rows: Iterator[Any], columns: WriteColumns, partition: int, as_records: bool) -> Iterator[list[bytes]]:
    """The bodies of a task's Arrow record batches (`bodies_of_rows`), rows numbered from
    0 in the partition.

    Raises:
        ValueError: a row that cannot be written, naming the partition (and the column
            and row where the encoding knows them); the task fails with it.
    """
    first_row = 0
    for batch in rows:
        try:
            bodies = bodies_of_rows(batch, columns, as_records, first_row)[0]
            if _may_exceed(batch, columns) and max(map(len, bodies), default=0) > MAX_BODY_BYTES:
                row = next(k for k, body in enumerate(bodies) if len(body) > MAX_BODY_BYTES)
                raise ValueError(
                    f"row {first_row + row}: its entry body would be {len(bodies[row])} bytes, over the "
                    f"{MAX_BODY_BYTES} a member takes (DLedger's 4 MiB entries, their header included)"
                )
        except ValueError as exc:
            raise ValueError(f"dledger write, partition {partition}: {exc}") from None
        first_row += batch.num_rows
        yield bodies


def _job_epoch() -> int:
    """A named writer's job epoch: the driver's clock in milliseconds, shifted left 20
    bits, with 20 random bits below, so that two jobs started in the same millisecond
    (jobs of one name run at once: a mistake) fence each other instead of sharing an
    epoch, in which each would take the other's rows for its own."""
    return (time.time_ns() // 1_000_000) << 20 | secrets.randbits(20)


def _pause(seconds: float) -> None:
    """Wait `seconds` (tests replace it)."""
    threading.Event().wait(seconds)


def _wait_for_cancelled_tasks(options: WriteOptions, messages: Sequence[WriterCommitMessage | None]) -> None:
    """Spark calls abort as soon as the job fails, while its other tasks may still run:
    they are cancelled, and a Python worker that holds rows keeps appending until Spark
    kills it, `spark.python.task.killTimeout` (2 s) after noticing. Waiting `abortWaitMs`
    here keeps the job's failure from reaching the caller before those tasks are gone
    (no wait when every task finished: none is left running)."""
    if options.abort_wait_ms > 0 and any(m is None for m in messages):
        _pause(options.abort_wait_ms / 1000)


class DLedgerArrowWriter(DataSourceArrowWriter):
    """Batch writer: each task appends its rows in order, in batches (exactly-once: the
    job id made here, on the driver, is pickled to every task and its retries; with
    `writerName`, the name and an epoch from the driver's clock, later than the job
    before's unless that clock went back)."""

    def __init__(self, options: WriteOptions, factory: ClientFactory, columns: WriteColumns) -> None:
        self.options = options
        self.factory = factory
        self.columns = columns
        name = options.writer_name
        self.job_id = name if name is not None else uuid.uuid4().hex
        self.writer_epoch = _job_epoch() if name is not None else None

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        """Append the task's rows; returns what they left in the log."""
        ids = task_ids(self.job_id, self.writer_epoch) if self.options.exactly_once else plain_ids(self.job_id)
        return write_task(self.options, self.factory, self.columns, iterator, ids)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Log what the job appended (entries are committed by the cluster already)."""
        log.info("%s", commit_report(messages, "dledger write"))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing can be undone: wait for the job's cancelled tasks, then log what stays
        in the log (finished tasks' rows; a prefix of each failed task's rows)."""
        _wait_for_cancelled_tasks(self.options, messages)
        log.warning("%s", abort_report(messages, "dledger write", self.options.exactly_once, streaming=False))


class DLedgerStreamArrowWriter(DataSourceStreamArrowWriter):
    """Streaming writer: each micro-batch task appends its rows (exactly-once: numbered
    under the query id and the batch id, so a batch replayed after a failure or a
    restart from the checkpoint re-sends the same numbered rows)."""

    def __init__(self, options: WriteOptions, factory: ClientFactory, columns: WriteColumns) -> None:
        self.options = options
        self.factory = factory
        self.columns = columns
        self.run_id = uuid.uuid4().hex  # at-least-once only: not the query's, changes every batch

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        """Append the task's rows; returns what they left in the log."""
        ids = task_ids(None) if self.options.exactly_once else plain_ids(self.run_id)
        return write_task(self.options, self.factory, self.columns, iterator, ids)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Log the micro-batch's total."""
        log.info("%s", commit_report(messages, f"dledger stream batch {batchId}"))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Log what stays in the log. The batch is run again under the same ids, which
        de-duplicates whatever its cancelled tasks still append when exactly-once; an
        at-least-once write first waits for them, as a batch write does."""
        if not self.options.exactly_once:
            _wait_for_cancelled_tasks(self.options, messages)
        what = f"dledger stream batch {batchId}"
        log.warning("%s", abort_report(messages, what, self.options.exactly_once, streaming=True))
