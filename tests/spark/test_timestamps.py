"""Spark reads from a time, offline (store directories written with the embedded API):
`startingTimestamp` / `endingTimestamp` for batch reads, `startingTimestamp` for streams
(only the first start: a restart continues from its checkpoint), a compacted log, a
time past every record, and the options refused at load(). The live path is in
`test_live` (its cluster)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import dledger
from dledger.store.mmap_store import StoreConfig

pytestmark = pytest.mark.spark

CONFIG = StoreConfig(data_file_size=16 << 10, index_file_size=4096, warm_ahead_bytes=0, checkpoint_interval_ms=0)
TIMEOUT_S = 180
BASE = 1_700_000_000_000


def value(k: int) -> bytes:
    return b"r%04d" % k


def write(path: Path, first: int, count: int, plain_prefix: int = 0) -> None:
    """Plain entries, then records k = first..first+count-1 with timestamps BASE + 10 k
    (a plain entry after every 50th record; a NOOP after the 120th), in small segments."""
    with dledger.open_log(path, CONFIG) as log:
        log.append_many([b"plain-%d" % k for k in range(plain_prefix)])
        for k in range(first, first + count):
            log.append_record(value(k), key=b"k", timestamp=BASE + 10 * k)
            if k % 50 == 49:
                log.append(b"between-%d" % k)
            if k == 120:
                log.append_noop()


def read(spark: Any, path: Path, **options: str) -> list[bytes]:
    reader = spark.read.format("dledger")
    for key, raw in options.items():
        reader = reader.option(key, raw)
    rows = reader.load(str(path)).collect()
    return [r["value"] for r in sorted(rows, key=lambda r: r["index"])]


def test_batch_reads_between_two_times(spark: Any, tmp_path: Path) -> None:
    node = tmp_path / "n"
    write(node, 0, 300, plain_prefix=7)
    assert len(list((node / "data").iterdir())) > 1  # the search crosses segments
    got = read(spark, node, startingTimestamp=str(BASE + 995), endingTimestamp=str(BASE + 1500))
    # records 100..149 and the plain entry after record 149 is past the end (record 150)
    assert got == [value(k) for k in range(100, 150)] + [b"between-149"]
    assert read(spark, node, startingTimestamp=str(BASE + 2970)) == [value(297), value(298), value(299), b"between-299"]
    assert read(spark, node, startingTimestamp=str(BASE + 3000)) == []  # no record that late: empty
    assert read(spark, node, startingTimestamp="0", endingTimestamp=str(BASE + 20)) == [value(0), value(1)]
    # the plain prefix counts as older than any time
    assert read(spark, node, endingTimestamp=str(BASE))[:2] == [b"plain-0", b"plain-1"]
    assert len(read(spark, node, endingTimestamp=str(BASE))) == 7
    assert read(spark, node, startingIndex="3", endingTimestamp=str(BASE + 10)) == [
        b"plain-3",
        b"plain-4",
        b"plain-5",
        b"plain-6",
        value(0),
    ]


def test_a_compacted_log_starts_at_its_first_live_record(spark: Any, tmp_path: Path) -> None:
    node = tmp_path / "n"
    write(node, 0, 100)
    with dledger.open_log(node, CONFIG) as log:
        log.reset(59, log.get(59).term)  # entries before 60 are gone (record 59 is at 60)
    got = read(spark, node, startingTimestamp="0")
    assert got[0] == value(59) and got[-1] == b"between-99"


def test_stream_starts_at_a_time_and_restarts_from_its_checkpoint(spark: Any, tmp_path: Path) -> None:
    node = tmp_path / "n"
    write(node, 0, 100)
    df = spark.readStream.format("dledger").option("startingTimestamp", str(BASE + 905)).load(str(node))

    def run() -> list[bytes]:
        query = (
            df.writeStream.format("parquet")
            .option("checkpointLocation", str(tmp_path / "cp"))
            .option("path", str(tmp_path / "out"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(TIMEOUT_S)
        assert query.exception() is None
        rows = spark.read.parquet(str(tmp_path / "out")).collect()
        return [r["value"] for r in sorted(rows, key=lambda r: r["index"])]

    assert run() == [value(k) for k in range(91, 100)] + [b"between-99"]
    write(node, 100, 5)  # the restart continues from its checkpoint (no new search)
    assert run() == [value(k) for k in range(91, 100)] + [b"between-99"] + [value(k) for k in range(100, 105)]


def test_timestamp_options_are_refused_at_load(spark: Any, tmp_path: Path) -> None:
    node = tmp_path / "n"
    write(node, 0, 3)
    reader = spark.read.format("dledger").option("startingIndex", "1").option("startingTimestamp", "5")
    with pytest.raises(Exception, match="options startingIndex and startingTimestamp both say where the read starts"):
        reader.load(str(node))
    with pytest.raises(Exception, match="option startingTimestamp must be >= 0"):
        spark.readStream.format("dledger").option("startingTimestamp", "-1").load(str(node))
    stream = spark.readStream.format("dledger").option("endingTimestamp", "5").option("maxEntriesPerTrigger", "5")
    with pytest.raises(Exception, match="option endingTimestamp is for batch reads and maxEntriesPerTrigger"):
        stream.load(str(node))
    assert read(spark, node) == [value(0), value(1), value(2)]  # nothing was changed
