"""Writers of the `dledger` data source: `df.write.format("dledger").mode("append")` and
`writeStream.format("dledger")`. Each task appends its rows' `body` through the leader in
batches; the semantics are at-least-once (see docs/SPARK.md)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from dledger.spark.arrow import bodies_of
from dledger.spark.live import ClientFactory, append_all, close_client, default_client_factory
from dledger.spark.options import WriteOptions, parse_write_options, write_body_type

log = logging.getLogger(__name__)


@dataclass
class AppendedMessage(WriterCommitMessage):
    """What one write task appended (`first`/`last` are -1 when it appended nothing)."""

    first: int
    last: int
    count: int


def writer_setup(
    options: Mapping[str, str], fields: Sequence[tuple[str, str]], overwrite: bool, factory: ClientFactory | None = None
) -> tuple[WriteOptions, ClientFactory]:
    """Validate a write on the driver: options, append mode and the `body` column."""
    parsed = parse_write_options(options, overwrite)
    write_body_type(fields)
    return parsed, factory or default_client_factory


def _write(options: WriteOptions, factory: ClientFactory, iterator: Iterator[Any]) -> AppendedMessage:
    client = factory(options.target.peers or "", options.target.group, options.rpc_timeout_ms / 1000)
    try:
        done = append_all(client, (bodies_of(b) for b in iterator), options.batch_entries, options.batch_bytes)
    finally:
        close_client(client)
    return AppendedMessage(done.first, done.last, done.count)


def _total(messages: Sequence[WriterCommitMessage | None]) -> int:
    return sum(m.count for m in messages if isinstance(m, AppendedMessage))


class DLedgerArrowWriter(DataSourceArrowWriter):
    """Batch writer: each task appends its bodies in order, in batches."""

    def __init__(self, options: WriteOptions, factory: ClientFactory) -> None:
        self.options = options
        self.factory = factory

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        """Append the task's rows; returns what was appended."""
        return _write(self.options, self.factory, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Log the total (entries are committed by the cluster already)."""
        log.info("dledger write appended %d entries", _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing can be undone: entries appended by finished tasks stay in the log."""
        log.warning("dledger write failed; %d entries appended by finished tasks stay in the log", _total(messages))


class DLedgerStreamArrowWriter(DataSourceStreamArrowWriter):
    """Streaming writer: each micro-batch task appends its bodies (at-least-once)."""

    def __init__(self, options: WriteOptions, factory: ClientFactory) -> None:
        self.options = options
        self.factory = factory

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        """Append the task's rows; returns what was appended."""
        return _write(self.options, self.factory, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Log the micro-batch's total."""
        log.info("dledger stream batch %d appended %d entries", batchId, _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Entries appended by finished tasks stay in the log (the batch is retried)."""
        log.warning(
            "dledger stream batch %d failed; %d entries appended by finished tasks stay", batchId, _total(messages)
        )
