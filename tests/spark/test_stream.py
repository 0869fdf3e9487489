"""Streaming reads of a store directory: availableNow with a rate limit and a restart
from the checkpoint (including a micro-batch that has to be re-run), a processing-time
trigger following the directory's checkpointed committed index, and bad options."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

import dledger
from dledger.store.mmap_store import StoreConfig

pytestmark = pytest.mark.spark

CONFIG = StoreConfig(data_file_size=16 << 10, index_file_size=4096, warm_ahead_bytes=0, checkpoint_interval_ms=0)
TIMEOUT_S = 180


def body(index: int) -> bytes:
    return b"entry-%06d" % index


def append(path: Path, start: int, count: int) -> None:
    """Append entries start..start+count-1 (their bodies name their index); closing the
    log writes `checkpoint`, which is what a stream over the directory follows."""
    with dledger.open_log(path, CONFIG) as log:
        assert log.end_index + 1 == start
        log.append_many([body(i) for i in range(start, start + count)])


def stream(spark: Any, path: Path, **options: str) -> Any:
    reader = spark.readStream.format("dledger")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(path))


def run_available_now(df: Any, checkpoint: Path, out: Path) -> Any:
    query = (
        df.writeStream.format("parquet")
        .option("checkpointLocation", str(checkpoint))
        .option("path", str(out))
        .trigger(availableNow=True)
        .start()
    )
    return _finish(query)


def _finish(query: Any) -> Any:
    assert query.awaitTermination(TIMEOUT_S), "availableNow query did not finish"
    assert query.exception() is None
    return query


class Collector:
    """A foreachBatch sink that keeps every delivered micro-batch (batch id, rows), so a
    re-run batch shows up twice (it runs in the driver, so plain Python state works)."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[tuple[int, bytes]]]] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        self.batches.append((batch_id, sorted((r["index"], r["value"]) for r in df.collect())))

    def run(self, df: Any, checkpoint: Path) -> Any:
        query = df.writeStream.foreachBatch(self).option("checkpointLocation", str(checkpoint))
        return _finish(query.trigger(availableNow=True).start())


def batch_ranges(query: Any) -> list[tuple[int | None, int, int]]:
    """(start index, end index, rows read) of each micro-batch with a non-empty range (the
    start of a query's first batch is reported as None by Spark)."""
    out = []
    for progress in query.recentProgress:
        source = progress["sources"][0]
        start, end = _index(source["startOffset"]), _index(source["endOffset"])
        if start != end:
            out.append((start, end, progress["numInputRows"]))
    return out


def _index(offset: Any) -> Any:
    value = json.loads(offset) if isinstance(offset, str) else offset
    return None if value is None else int(value["index"])


def test_available_now_restart_without_gaps_or_duplicates(spark: Any, tmp_path: Path) -> None:
    log, checkpoint = tmp_path / "log", tmp_path / "checkpoint"
    append(log, 0, 300)
    df = stream(spark, log, startingIndex="earliest", maxEntriesPerTrigger="128")
    sink = Collector()

    first = sink.run(df, checkpoint)
    assert batch_ranges(first) == [(None, 128, 128), (128, 256, 128), (256, 300, 44)]
    assert [(b, rows[0][0], rows[-1][0], len(rows)) for b, rows in sink.batches] == [
        (0, 0, 127, 128),
        (1, 128, 255, 128),
        (2, 256, 299, 44),
    ]

    # a crash after batch 2 was planned but before it was committed: the restarted query
    # re-runs it with the logged offsets (the same entries), then reads what was appended
    (checkpoint / "commits" / "2").unlink()
    (checkpoint / "commits" / ".2.crc").unlink(missing_ok=True)
    append(log, 300, 200)
    second = sink.run(df, checkpoint)
    assert batch_ranges(second) == [(256, 300, 44), (300, 428, 128), (428, 500, 72)]
    assert [b for b, _ in sink.batches] == [0, 1, 2, 2, 3, 4]
    assert sink.batches[2] == sink.batches[3]  # the re-run delivered exactly the same rows

    delivered = {b: rows for b, rows in sink.batches}  # a sink keyed by batch id keeps one copy
    rows = [row for b in sorted(delivered) for row in delivered[b]]
    assert [i for i, _ in rows] == list(range(500))  # no gap, no duplicate, in order
    assert all(payload == body(i) for i, payload in rows)

    third = sink.run(df, checkpoint)  # nothing new
    assert batch_ranges(third) == [] and len(sink.batches) == 6


def test_available_now_into_parquet(spark: Any, tmp_path: Path) -> None:
    log, checkpoint, out = tmp_path / "log", tmp_path / "checkpoint", tmp_path / "out"
    append(log, 0, 100)
    df = stream(spark, log, startingIndex="earliest", maxEntriesPerTrigger="60")
    run_available_now(df, checkpoint, out)
    append(log, 100, 30)
    run_available_now(df, checkpoint, out)
    rows = spark.read.parquet(str(out)).collect()
    assert sorted(r["index"] for r in rows) == list(range(130))
    assert all(r["value"] == body(r["index"]) for r in rows)


def test_processing_time_trigger_follows_the_committed_index(spark: Any, tmp_path: Path) -> None:
    log = tmp_path / "log"
    append(log, 0, 50)
    latest = stream(spark, log)  # startingIndex defaults to latest: only new entries
    earliest = stream(spark, log, startingIndex="earliest")
    queries = [
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / name))
        .trigger(processingTime="200 milliseconds")
        .start()
        for name, df in (("dl_latest", latest), ("dl_earliest", earliest))
    ]
    for query in queries:
        query.processAllAvailable()
    assert spark.table("dl_latest").count() == 0
    assert spark.table("dl_earliest").count() == 50

    append(log, 50, 70)
    for query in queries:
        query.processAllAvailable()
    assert sorted(r["index"] for r in spark.table("dl_latest").collect()) == list(range(50, 120))
    assert sorted(r["index"] for r in spark.table("dl_earliest").collect()) == list(range(120))
    for query in queries:
        query.stop()


def test_stream_from_a_number_with_a_schema_subset(spark: Any, tmp_path: Path) -> None:
    log = tmp_path / "log"
    append(log, 0, 40)
    df = spark.readStream.format("dledger").schema("index long").option("startingIndex", "25").load(str(log))
    query = df.writeStream.format("memory").queryName("dl_subset").trigger(availableNow=True).start()
    assert query.awaitTermination(TIMEOUT_S)
    rows = spark.table("dl_subset").collect()
    assert sorted(r["index"] for r in rows) == list(range(25, 40))
    assert spark.table("dl_subset").columns == ["index"]


def test_restart_with_another_group_is_refused(spark: Any, tmp_path: Path) -> None:
    log, checkpoint, out = tmp_path / "log", tmp_path / "checkpoint", tmp_path / "out"
    append(log, 0, 10)
    run_available_now(stream(spark, log, startingIndex="earliest", group="a"), checkpoint, out)
    append(log, 10, 5)
    query = (
        stream(spark, log, group="b")
        .writeStream.format("parquet")
        .option("checkpointLocation", str(checkpoint))
        .option("path", str(out))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="written for group 'a' but option group is 'b'"):
        query.awaitTermination(TIMEOUT_S)


def test_stream_bad_options(spark: Any, tmp_path: Path) -> None:
    log = tmp_path / "log"
    append(log, 0, 3)
    for options, message in (  # wrong whatever the mode: load() refuses them
        ({"maxEntriesPerTrigger": "none"}, "must be an integer"),
        ({"maxEntriesPerTrigger": "0"}, "must be >= 1"),
        ({"endingIndex": "2", "maxEntriesPerTrigger": "5"}, "cannot have both"),
    ):
        with pytest.raises(Exception, match=message):
            stream(spark, log, **options)
    # only a stream may not have an end: known when the query starts
    with pytest.raises(Exception, match="batch reads only"):
        query = stream(spark, log, endingIndex="2").writeStream.format("noop").trigger(availableNow=True).start()
        query.awaitTermination(TIMEOUT_S)


def test_min_entries_per_trigger_holds_batches_back_and_progress_shows_the_lag(spark: Any, tmp_path: Path) -> None:
    log = tmp_path / "log"
    append(log, 0, 3)
    df = stream(spark, log, startingIndex="earliest", minEntriesPerTrigger="5", maxTriggerDelay="1h")
    collector = Collector()
    query = (
        df.writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        held = _wait_for(query, lambda p: _behind(p) == 3)
        assert held["numInputRows"] == 0
        assert all(rows == [] for _, rows in collector.batches)  # Spark's first batch has no range
        append(log, 3, 2)
        _wait_for(query, lambda p: _behind(p) == 0 and p["numInputRows"] == 5)
        assert [rows for _, rows in collector.batches if rows] == [[(i, body(i)) for i in range(5)]]
    finally:
        query.stop()


def _behind(progress: dict[str, Any]) -> int | None:
    latest = progress["sources"][0]["latestOffset"]
    value = json.loads(latest) if isinstance(latest, str) else latest
    return None if value is None else value.get("entriesBehindLatest")


def _wait_for(query: Any, condition: Any) -> dict[str, Any]:
    """Poll the query's progress reports until one satisfies `condition`."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        assert query.exception() is None
        for progress in query.recentProgress:
            if condition(progress):
                return dict(progress)
        time.sleep(0.05)
    raise AssertionError(f"no progress report matched; last: {query.lastProgress}")
