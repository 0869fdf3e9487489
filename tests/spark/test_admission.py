"""The stream reader's admission control and progress report, driven without a Spark
session: the reader's offsets over a real store directory, on a manual clock; and the
driver's first contact with an unreachable cluster, which uses the connect timeout, for
reads and (in `writer()`, before any task runs) for writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import dledger
from dledger.codes import DLedgerError, ResponseCode
from dledger.store.mmap_store import StoreConfig

pytestmark = pytest.mark.spark
pyspark = pytest.importorskip("pyspark")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows  # noqa: E402
from pyspark.sql.types import BinaryType, LongType, StructField, StructType  # noqa: E402

from dledger.spark.source import DLedgerDataSource, DLedgerStreamReader  # noqa: E402

SCHEMA = StructType([StructField("index", LongType()), StructField("body", BinaryType())])
CONFIG = StoreConfig(data_file_size=16 << 10, index_file_size=4096, warm_ahead_bytes=0, checkpoint_interval_ms=0)


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def append(path: Path, count: int) -> None:
    with dledger.open_log(path, CONFIG) as log:
        log.append_many([b"x"] * count)


def reader(path: Path, clock: ManualClock, **options: str) -> DLedgerStreamReader:
    made = DLedgerDataSource({"path": str(path), "startingIndex": "earliest", **options}).streamReader(SCHEMA)
    assert isinstance(made, DLedgerStreamReader)
    made.clock = clock  # type: ignore[method-assign]
    made._last_trigger = clock()
    return made


def test_a_batch_waits_for_the_minimum_or_the_delay(tmp_path: Path) -> None:
    log, clock = tmp_path / "log", ManualClock()
    append(log, 3)
    stream = reader(log, clock, minEntriesPerTrigger="5", maxTriggerDelay="10s")
    start = stream.initialOffset()
    limit = stream.getDefaultReadLimit()
    assert stream.latestOffset(start, limit) == start  # 3 < 5, no time has passed
    assert stream.reportLatestOffset() == {"group": "default", "index": 3, "entriesBehindLatest": 3}
    append(log, 2)
    clock.now += 5
    end = stream.latestOffset(start, limit)
    assert end["index"] == 5  # the minimum is there
    assert stream.reportLatestOffset()["entriesBehindLatest"] == 0
    append(log, 1)
    clock.now += 9.9
    assert stream.latestOffset(end, limit) == end
    clock.now += 0.1  # 10 s since the last batch started (not since the stream did): whatever is there goes
    assert stream.latestOffset(end, limit)["index"] == 6


def test_the_maximum_caps_and_availablenow_never_waits(tmp_path: Path) -> None:
    log, clock = tmp_path / "log", ManualClock()
    append(log, 4)
    stream = reader(log, clock, minEntriesPerTrigger="2", maxEntriesPerTrigger="3")
    limit = stream.getDefaultReadLimit()
    assert isinstance(limit, ReadMaxRows)
    start = stream.initialOffset()
    first = stream.latestOffset(start, limit)
    assert first["index"] == 3
    assert stream.reportLatestOffset()["entriesBehindLatest"] == 1
    assert stream.latestOffset(first, limit) == first  # 1 left < 2
    stream.prepareForTriggerAvailableNow()
    assert stream.latestOffset(first, ReadAllAvailable())["index"] == 4


def unreachable_source(asked: list[float]) -> type[DLedgerDataSource]:
    """The dledger format whose clients never reach a member (each records its timeout
    in `asked`)."""

    def factory(peers: str, group: str, timeout_s: float) -> Any:
        asked.append(timeout_s)
        raise DLedgerError(ResponseCode.NETWORK_ERROR, f"no member of {peers} answered within {timeout_s} s")

    class Unreachable(DLedgerDataSource):
        @classmethod
        def client_factory(cls, target: Any) -> Any:
            return factory

    return Unreachable


def test_planning_against_an_unreachable_cluster_uses_the_connect_timeout() -> None:
    asked: list[float] = []
    Unreachable = unreachable_source(asked)
    peers = "n0-127.0.0.1:1"
    source = Unreachable({"peers": peers, "connectTimeoutMs": "1500", "rpcTimeoutMs": "20000"})
    batch = source.reader(SCHEMA)
    with pytest.raises(DLedgerError, match=r"within 1\.5 s"):
        batch.partitions()
    stream = Unreachable({"peers": peers}).streamReader(SCHEMA)
    with pytest.raises(DLedgerError, match=r"within 5\.0 s"):
        stream.initialOffset()
    assert asked == [1.5, 5.0]


def test_a_write_to_an_unreachable_cluster_fails_in_writer_within_the_connect_timeout() -> None:
    """Before, `writer()` asked nothing: each task failed after rpcTimeoutMs (30 s), and
    again in each of Spark's retries."""
    asked: list[float] = []
    Unreachable = unreachable_source(asked)
    peers = "n0-127.0.0.1:1"
    schema = StructType([StructField("value", BinaryType())])
    with pytest.raises(DLedgerError, match=r"within 1\.5 s"):
        Unreachable({"peers": peers, "connectTimeoutMs": "1500"}).writer(schema, False)
    with pytest.raises(DLedgerError, match=r"within 5\.0 s"):
        Unreachable({"peers": peers}).streamWriter(schema, False)
    with pytest.raises(DLedgerError, match=r"within 0\.5 s"):  # never longer than the rpc timeout
        Unreachable({"peers": peers, "rpcTimeoutMs": "500"}).writer(schema, False)
    assert asked == [1.5, 5.0, 0.5]
