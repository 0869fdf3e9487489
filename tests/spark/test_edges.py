"""Edges found by a hostile sweep, offline: a record time Spark cannot hold fails the
read naming the entry (was read back wrapped around); a stream whose checkpoint is past
the end of a replaced log fails, or with failOnDataLoss=false goes on from the log's end
(was silent, and skipped the new log's entries up to the old offset); a row the sink
cannot write fails its task naming the partition, column and row."""

from __future__ import annotations

import logging
import shutil
import struct
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pytest

import dledger
from dledger.spark.exactly_once import TaskIds
from dledger.spark.options import parse_write_options
from dledger.spark.records import MAX_TIMESTAMP_MS
from dledger.spark.write_schema import write_columns_of
from dledger.store.mmap_store import StoreConfig
from tests.spark.fake_leader import FakeClient, FakeLeader

pytestmark = pytest.mark.spark
pyspark = pytest.importorskip("pyspark")

from pyspark.sql.streaming.datasource import ReadAllAvailable  # noqa: E402
from pyspark.sql.types import BinaryType, LongType, StructField, StructType  # noqa: E402

from dledger.spark.planning import DataLossError  # noqa: E402
from dledger.spark.sink import write_task  # noqa: E402
from dledger.spark.source import DLedgerDataSource, DLedgerStreamReader  # noqa: E402
from dledger.spark.target import OptionError  # noqa: E402

CONFIG = StoreConfig(data_file_size=16 << 10, index_file_size=4096, warm_ahead_bytes=0, checkpoint_interval_ms=0)
SCHEMA = StructType([StructField("index", LongType()), StructField("body", BinaryType())])
TIMEOUT_S = 180


def set_timestamp(node: Path, index: int, stamp: int) -> None:
    """Rewrite record `index`'s event time in the data file (and its body CRC): a time
    encoding refuses, as a store written before that limit may hold."""
    with dledger.open_log(node, CONFIG) as log:
        pos = log.get(index).pos
    data = sorted((node / "data").iterdir())[0]
    raw = bytearray(data.read_bytes())
    size = struct.unpack_from(">i", raw, pos + 4)[0]
    struct.pack_into(">q", raw, pos + 48 + 1, stamp)  # the body: version byte, then the timestamp
    struct.pack_into(">I", raw, pos + 40, zlib.crc32(raw[pos + 48 : pos + size]))
    data.write_bytes(bytes(raw))


def test_a_time_spark_cannot_hold_fails_the_read_naming_the_entry(spark: Any, tmp_path: Path) -> None:
    node = tmp_path / "n"
    with dledger.open_log(node, CONFIG) as log:
        log.append(b"plain")
        for k in range(3):
            log.append_record(b"v%d" % k, timestamp=1000 + k)
    set_timestamp(node, 1, MAX_TIMESTAMP_MS)  # the last millisecond Spark holds
    set_timestamp(node, 3, 10**16)
    df = spark.read.format("dledger").load(str(node))
    with pytest.raises(Exception, match=r"entry 3 has event timestamp 10000000000000000 ms, past the latest"):
        df.selectExpr("index", "unix_millis(timestamp)").collect()
    set_timestamp(node, 3, 2**63 - 1)
    with pytest.raises(Exception, match=rf"entry 3 has event timestamp {2**63 - 1} ms.*\({MAX_TIMESTAMP_MS} ms"):
        df.selectExpr("index", "unix_millis(timestamp)").collect()
    set_timestamp(node, 3, 1002)
    rows = df.selectExpr("index", "unix_millis(timestamp) AS ms").orderBy("index").collect()
    assert [(r["index"], r["ms"]) for r in rows] == [(0, None), (1, MAX_TIMESTAMP_MS), (2, 1001), (3, 1002)]
    set_timestamp(node, 3, 10**16)  # a schema without the timestamp still reads
    values = spark.read.format("dledger").schema("index long, value binary").load(str(node)).collect()
    assert sorted(r["value"] for r in values) == [b"plain", b"v0", b"v1", b"v2"]


def write(node: Path, count: int) -> None:
    with dledger.open_log(node, CONFIG) as log:
        log.append_many([b"e%d" % k for k in range(count)])


def stream_reader(node: Path, **options: str) -> DLedgerStreamReader:
    made = DLedgerDataSource({"path": str(node), **options}).streamReader(SCHEMA)
    assert isinstance(made, DLedgerStreamReader)
    return made


def test_the_reader_refuses_a_checkpoint_past_the_log_end(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    node = tmp_path / "n"
    write(node, 300)
    checkpointed = {"group": "default", "index": 500}  # as a restart from a checkpoint gives it
    with pytest.raises(DataLossError, match=r"checkpoint is at index 500 but the log now ends at committed index 299"):
        stream_reader(node).latestOffset(checkpointed, ReadAllAvailable())
    going_on = stream_reader(node, failOnDataLoss="false")
    with caplog.at_level(logging.WARNING, logger="dledger.spark.planning"):
        assert going_on.latestOffset(checkpointed, ReadAllAvailable())["index"] == 300
    assert "some data may have been missed; failOnDataLoss=false: going on from index 300" in caplog.text
    assert going_on.partitions(checkpointed, {"group": "default", "index": 300}) == []
    # a new stream's startingIndex past the end is no loss: it waits for the log to get there
    waiting = stream_reader(node, startingIndex="400")
    start = waiting.initialOffset()
    assert waiting.latestOffset(start, ReadAllAvailable()) == start


def run_available_now(spark: Any, node: Path, checkpoint: Path, **options: str) -> list[int]:
    """An availableNow query from `checkpoint`; the indexes it read (foreachBatch runs in
    the driver: plain Python state)."""
    reader = spark.readStream.format("dledger").option("startingIndex", "earliest")
    for key, raw in options.items():
        reader = reader.option(key, raw)
    seen: list[int] = []

    def collect(df: Any, batch_id: int) -> None:
        seen.extend(r["index"] for r in df.select("index").collect())

    writer = reader.load(str(node)).writeStream.foreachBatch(collect)
    query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    assert query.awaitTermination(TIMEOUT_S), "availableNow query did not finish"  # raises what failed it
    return sorted(seen)


def test_a_restarted_stream_over_a_replaced_log(spark: Any, tmp_path: Path) -> None:
    node, checkpoint = tmp_path / "n", tmp_path / "cp"
    write(node, 500)
    assert run_available_now(spark, node, checkpoint) == list(range(500))
    shutil.rmtree(node)
    write(node, 300)  # a new log, shorter than the stream's position
    with pytest.raises(Exception, match=r"checkpoint is at index 500 but the log now ends at committed index 299"):
        run_available_now(spark, node, checkpoint)
    assert run_available_now(spark, node, checkpoint, failOnDataLoss="false") == []
    with dledger.open_log(node, CONFIG) as log:
        log.append_many([b"more"] * 400)
    assert run_available_now(spark, node, checkpoint, failOnDataLoss="false") == list(range(300, 700))


def test_a_row_the_sink_cannot_write_fails_its_task_naming_partition_column_and_row() -> None:
    peers = "n0-127.0.0.1:1"
    leader = FakeLeader()
    columns = write_columns_of([("value", "binary"), ("timestamp", "bigint")])
    batches = [
        pa.record_batch([pa.array([b"a", b"b"]), pa.array([1, 2], pa.int64())], names=["value", "timestamp"]),
        pa.record_batch([pa.array([b"c", b"d"]), pa.array([3, 10**16], pa.int64())], names=["value", "timestamp"]),
    ]
    options = parse_write_options({"peers": peers}, overwrite=False)
    with pytest.raises(ValueError, match=r"^dledger write, partition 7: column timestamp, row 3: timestamp 10{16} ms"):
        write_task(options, lambda *_: FakeClient(leader), columns, iter(batches), TaskIds("job", -1, 7, 0))


def test_load_names_a_batch_reads_misspelt_option_and_wants_one_path(spark: Any, tmp_path: Path) -> None:
    node = tmp_path / "n"
    write(node, 3)
    with pytest.raises(Exception, match=r"unknown option\(s\) for a dledger read: startingindx; valid options"):
        spark.read.format("dledger").option("startingIndx", "5").load(str(node))
    with pytest.raises(Exception, match=r"a dledger read takes one path"):
        spark.read.format("dledger").load([str(node), str(node)])
    with pytest.raises(Exception, match=r"option endingIndex \(1\) is before startingIndex \(2\)"):
        spark.read.format("dledger").option("startingIndex", "2").option("endingIndex", "1").load(str(node))


@pytest.mark.parametrize(
    ("options", "schema", "message"),
    [
        ({"maxEntriesPerTriger": "5"}, SCHEMA, "unknown option"),
        ({}, StructType([StructField("index", pyspark.sql.types.IntegerType())]), "column 'index' must be long"),
    ],
)
def test_a_stream_refused_at_its_start_raises_its_own_error(
    tmp_path: Path, options: dict[str, str], schema: Any, message: str
) -> None:
    """With a user schema Spark does not ask the source at `load()`; the query's start does
    (`streamReader`). An error raised there reached the user behind PySpark's own
    UnboundLocalError; the reader now raises it from its first call."""
    with dledger.open_log(tmp_path / "dledger-n0", StoreConfig(data_file_size=1 << 20)) as log:
        log.append(b"x")
    made = DLedgerDataSource({"path": str(tmp_path / "dledger-n0"), **options}).streamReader(schema)
    assert not isinstance(made, DLedgerStreamReader)
    with pytest.raises(OptionError, match=message):
        made.initialOffset()
    made.stop()  # what PySpark calls whatever failed


def test_a_stream_restarted_over_a_re_founded_longer_log_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A checkpoint at index 10 over a re-founded log of 30 entries: the stream went on
    from index 10 and never delivered the new log's first 10 entries, without a word
    (helper G). Offsets now record the term of the entry before them; a re-founded group
    starts in another (random) term."""
    node = tmp_path / "dledger-n0"
    config = StoreConfig(data_file_size=1 << 20)
    with dledger.open_log(node, config) as log:
        log.term = 7
        log.append_many([b"old%d" % k for k in range(10)])
    first = DLedgerDataSource({"path": str(node), "startingIndex": "earliest"}).streamReader(SCHEMA)
    start = first.initialOffset()
    end = first.latestOffset(start, ReadAllAvailable())
    assert (start, end) == ({"group": "default", "index": 0, "term": -1}, {"group": "default", "index": 10, "term": 7})
    assert first.latestOffset(end, ReadAllAvailable()) == end  # nothing new: the same offset
    shutil.rmtree(node)
    with dledger.open_log(node, config) as log:
        log.term = 9
        log.append_many([b"new%d" % k for k in range(30)])
    restarted = DLedgerDataSource({"path": str(node)}).streamReader(SCHEMA)
    with pytest.raises(DataLossError, match="entry 9 of the log now has term 9: the log was replaced"):
        restarted.latestOffset(end, ReadAllAvailable())
    lenient = DLedgerDataSource({"path": str(node), "failOnDataLoss": "false"}).streamReader(SCHEMA)
    with caplog.at_level(logging.WARNING, logger="dledger.spark.planning"):
        assert lenient.partitions(end, {"group": "default", "index": 30})
    assert "failOnDataLoss=false: going on from index 10" in caplog.text
    old_checkpoint = {"group": "default", "index": 10}  # written before offsets had a term: not checked
    assert DLedgerDataSource({"path": str(node)}).streamReader(SCHEMA).partitions(old_checkpoint, {"index": 30})


def test_a_stream_over_a_store_compacted_to_empty_starts_at_its_end(tmp_path: Path) -> None:
    """A store whose every entry a reset removed (first index -1): the offset's term
    lookup read the entry before the end as if it were there, and the stream failed."""
    node = tmp_path / "dledger-n0"
    with dledger.open_log(node, StoreConfig(data_file_size=1 << 20)) as log:
        log.term = 3
        log.append_many([b"e%d" % k for k in range(10)])
        log.reset(9, 3)
        assert (log.begin_index, log.end_index) == (-1, 9)
    reader = DLedgerDataSource({"path": str(node)}).streamReader(SCHEMA)
    assert reader.initialOffset() == {"group": "default", "index": 10}  # the term before it is gone: none recorded
