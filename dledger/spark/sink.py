"""Writers of the `dledger` data source: `df.write.format("dledger").mode("append")` and
`writeStream.format("dledger")`. Each task appends its rows through the leader in
batches: `value` (or `body`) alone as plain entries, with `key`, `timestamp` or
`headers` as records (magic 16); the semantics are at-least-once (see docs/SPARK.md)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from dledger.entry import MAGIC_NORMAL, MAGIC_RECORD
from dledger.spark.live import ClientFactory, append_all, close_client, default_client_factory
from dledger.spark.options import WriteOptions, parse_write_options
from dledger.spark.records import bodies_of_rows
from dledger.spark.write_schema import WriteColumns, write_columns_of

log = logging.getLogger(__name__)


@dataclass
class AppendedMessage(WriterCommitMessage):
    """What one write task appended (`first`/`last` are -1 when it appended nothing)."""

    first: int
    last: int
    count: int


def writer_setup(
    options: Mapping[str, str], fields: Sequence[tuple[str, str]], overwrite: bool, factory: ClientFactory | None = None
) -> tuple[WriteOptions, ClientFactory, WriteColumns]:
    """Validate a write on the driver: options, append mode and the columns."""
    parsed = parse_write_options(options, overwrite)
    columns = write_columns_of(fields)
    return parsed, factory or default_client_factory, columns


def _write(
    options: WriteOptions, factory: ClientFactory, columns: WriteColumns, rows: Iterator[Any]
) -> AppendedMessage:
    client = factory(options.target.peers or "", options.target.group, options.rpc_timeout_ms / 1000)
    magic = MAGIC_RECORD if columns.records else MAGIC_NORMAL
    try:
        bodies = (bodies_of_rows(b, columns)[0] for b in rows)
        done = append_all(client, bodies, options.batch_entries, options.batch_bytes, magic)
    finally:
        close_client(client)
    return AppendedMessage(done.first, done.last, done.count)


def _total(messages: Sequence[WriterCommitMessage | None]) -> int:
    return sum(m.count for m in messages if isinstance(m, AppendedMessage))


class DLedgerArrowWriter(DataSourceArrowWriter):
    """Batch writer: each task appends its bodies in order, in batches."""

    def __init__(self, options: WriteOptions, factory: ClientFactory, columns: WriteColumns) -> None:
        self.options = options
        self.factory = factory
        self.columns = columns

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        """Append the task's rows; returns what was appended."""
        return _write(self.options, self.factory, self.columns, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Log the total (entries are committed by the cluster already)."""
        log.info("dledger write appended %d entries", _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing can be undone: entries appended by finished tasks stay in the log."""
        log.warning("dledger write failed; %d entries appended by finished tasks stay in the log", _total(messages))


class DLedgerStreamArrowWriter(DataSourceStreamArrowWriter):
    """Streaming writer: each micro-batch task appends its bodies (at-least-once)."""

    def __init__(self, options: WriteOptions, factory: ClientFactory, columns: WriteColumns) -> None:
        self.options = options
        self.factory = factory
        self.columns = columns

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        """Append the task's rows; returns what was appended."""
        return _write(self.options, self.factory, self.columns, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Log the micro-batch's total."""
        log.info("dledger stream batch %d appended %d entries", batchId, _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Entries appended by finished tasks stay in the log (the batch is retried)."""
        log.warning(
            "dledger stream batch %d failed; %d entries appended by finished tasks stay", batchId, _total(messages)
        )
