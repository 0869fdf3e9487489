"""Spark drivers for the exactly-once sink tests, run as their own processes (so that a
test can use a master of its own, `local[2,4]`: task retries, and SIGKILL a driver):

    python -m tests.spark.sink_jobs retry PEERS GROUP ROWS MARKS EXACTLY_ONCE
        a batch write of ROWS rows (`v<k>`, 4 partitions) whose partitions 1 and 3 fail
        on their first attempt after 3 append requests (a prefix of their rows is in the
        log); MARKS: a directory where each attempt leaves a marker file.
    python -m tests.spark.sink_jobs stream PEERS GROUP SOURCE CHECKPOINT MODE
        a stream from the local log SOURCE into the cluster; MODE `run`: micro-batches
        until killed; `finish`: availableNow, then exit 0.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from dledger.spark import local_session
from dledger.spark.live import default_client_factory
from dledger.spark.source import DLedgerDataSource

CONF = {
    "spark.default.parallelism": "2",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}
MARKS_ENV = "DLEDGER_SINK_TEST_MARKS"
FAIL_AFTER = 3
"""Requests a failing attempt appends before its injected failure."""


class FailingClient:
    """A client that fails its task after `FAIL_AFTER` successful append requests (the
    injected failure: a prefix of the task's rows is then in the log)."""

    def __init__(self, inner: Any, partition: int) -> None:
        self.inner = inner
        self.partition = partition
        self.sent = 0

    def _after(self, result: Any) -> Any:
        self.sent += 1
        if self.sent == FAIL_AFTER:
            Path(os.environ[MARKS_ENV], f"p{self.partition}-a0-failed").touch()
            raise RuntimeError(f"injected failure of partition {self.partition}, attempt 0")
        return result

    def append_records(self, records: Any, *, stamp: Any = None) -> Any:
        """Exactly-once appends."""
        return self._after(self.inner.append_records(records, stamp=stamp))

    def append_many(self, bodies: Any) -> Any:
        """At-least-once plain appends."""
        return self._after(self.inner.append_many(bodies))

    def append_batch(self, bodies: Any, magic: int) -> Any:
        """At-least-once record appends."""
        return self._after(self.inner.append_batch(bodies, magic))

    def close(self) -> None:
        """Close the real client."""
        self.inner.close()


def failing_factory(peers: str, group: str, timeout_s: float) -> Any:
    """Clients of the retry job: partitions 1 and 3 fail on their first attempt."""
    from pyspark import TaskContext

    client = default_client_factory(peers, group, timeout_s)
    ctx = TaskContext.get()
    if ctx is None:
        return client
    part, attempt = ctx.partitionId(), ctx.attemptNumber()
    Path(os.environ[MARKS_ENV], f"p{part}-a{attempt}").touch()
    return FailingClient(client, part) if part in (1, 3) and attempt == 0 else client


class RetrySource(DLedgerDataSource):
    """The dledger format with the failing clients."""

    @classmethod
    def client_factory(cls, target: Any) -> Any:
        """`failing_factory`."""
        return failing_factory


def retry(peers: str, group: str, rows: int, marks: str, exactly_once: str) -> None:
    """The batch job with injected first-attempt failures (local[2,4]: 4 attempts per task)."""
    os.environ[MARKS_ENV] = marks  # the executors (local mode) inherit it
    spark = local_session("dledger-sink-retry", master="local[2,4]", conf=CONF)
    spark.dataSource.register(RetrySource)
    df = spark.range(0, rows, numPartitions=4).selectExpr("concat('v', id) AS value")
    df.write.format("dledger").option("peers", peers).option("group", group).option("batchEntries", "50").option(
        "exactlyOnce", exactly_once
    ).mode("append").save()
    spark.stop()


def stream(peers: str, group: str, source: str, checkpoint: str, mode: str) -> None:
    """The stream from a local log into the cluster."""
    spark = local_session("dledger-sink-stream", conf=CONF)
    df = (
        spark.readStream.format("dledger")
        .option("startingIndex", "earliest")
        .option("maxEntriesPerTrigger", "300")
        .load(source)
        .select("value")
    )
    writer = (
        df.writeStream.format("dledger")
        .option("peers", peers)
        .option("group", group)
        .option("batchEntries", "20")
        .option("checkpointLocation", checkpoint)
    )
    query = (
        writer.trigger(availableNow=True) if mode == "finish" else writer.trigger(processingTime="0 seconds")
    ).start()
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "retry":
        retry(args[0], args[1], int(args[2]), args[3], args[4])
    else:
        stream(*args)
