"""Batch reads of store directories through Spark: the five Java-written golden stores,
ranges, data loss, schema subsets, partitioning, and bad options."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from dledger.store.mmap_store import StoreConfig

from .conftest import SCENARIOS, committed_entries, golden_root, small_store

pytestmark = pytest.mark.spark


def _load(spark: Any, path: Path | str, schema: str | None = None, **options: str) -> Any:
    reader = spark.read.format("dledger")
    if schema:
        reader = reader.schema(schema)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(path))


def _error(exc: BaseException) -> str:
    return str(exc)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_golden_store_returns_exactly_the_committed_entries(spark: Any, scenario: str) -> None:
    df = _load(spark, golden_root() / scenario / "dledger-n0")
    assert df.columns == ["key", "value", "index", "term", "pos", "timestamp", "headers"]
    rows = sorted(df.collect(), key=lambda r: r["index"])
    expected = committed_entries(scenario)
    assert [(r["index"], r["term"], r["pos"]) for r in rows] == [(e["index"], e["term"], e["pos"]) for e in expected]
    assert [hashlib.sha256(r["value"]).hexdigest() for r in rows] == [e["bodySha256"] for e in expected]


def test_store_base_dir_and_one_partition_per_segment(spark: Any) -> None:
    df = _load(spark, golden_root() / "multi-term-rolled")  # the storeBaseDir holding dledger-n0
    expected = committed_entries("multi-term-rolled")
    assert df.rdd.getNumPartitions() == len({e["dataFile"] for e in expected})
    assert df.count() == len(expected) == 146


def test_index_ranges(spark: Any) -> None:
    base = golden_root() / "basic"
    rows = _load(spark, base, startingIndex="20", endingIndex="25").collect()
    assert sorted(r["index"] for r in rows) == [20, 21, 22, 23, 24]
    assert _load(spark, base, startingIndex="190", endingIndex="latest").count() == 10
    assert _load(spark, base, endingIndex="100000").count() == 200  # never past the committed index
    assert _load(spark, base, startingIndex="30", endingIndex="30").count() == 0
    assert _load(spark, base, startingIndex="500").count() == 0
    # truncated/: entries 71..76 exist but are not committed
    assert _load(spark, golden_root() / "truncated", startingIndex="60").count() == 11


def test_fail_on_data_loss(spark: Any) -> None:
    base = golden_root() / "head-deleted"
    with pytest.raises(Exception, match="log now starts at index 58") as info:
        _load(spark, base, startingIndex="10").collect()
    assert "failOnDataLoss=false" in _error(info.value)
    rows = _load(spark, base, startingIndex="10", endingIndex="60", failOnDataLoss="false").collect()
    assert sorted(r["index"] for r in rows) == [58, 59]
    assert _load(spark, base, startingIndex="58").count() == 82


def test_schema_subset_skips_bodies(spark: Any) -> None:
    base = golden_root() / "multi-term-rolled"
    df = _load(spark, base, "term long, index long")
    assert df.columns == ["term", "index"]
    expected = committed_entries("multi-term-rolled")
    assert sorted((r["index"], r["term"]) for r in df.collect()) == [(e["index"], e["term"]) for e in expected]
    bodies = _load(spark, base, "body binary, pos long", startingIndex="40", endingIndex="42").collect()
    assert sorted((r["pos"], hashlib.sha256(r["body"]).hexdigest()) for r in bodies) == [
        (e["pos"], e["bodySha256"]) for e in expected[40:42]
    ]


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ("index long, offset long", "unknown column 'offset'"),
        ("index long, timestamp long", "column 'timestamp' must be timestamp"),
        ("index int", "column 'index' must be long"),
        ("body string", "column 'body' must be binary"),
    ],
)
def test_bad_schema(spark: Any, schema: str, message: str) -> None:
    with pytest.raises(Exception, match=message):
        _load(spark, golden_root() / "basic", schema).collect()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"peers": "n0-127.0.0.1:20911"}, "mutually exclusive"),
        ({"startIndex": "3"}, "unknown option"),
        ({"startingIndex": "latest"}, "streaming reads only"),
    ],
)
def test_bad_read_options(spark: Any, options: dict[str, str], message: str) -> None:
    with pytest.raises(Exception, match=message):
        _load(spark, golden_root() / "basic", **options).collect()


def test_no_path_nor_peers_and_missing_store(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="needs a store directory"):
        spark.read.format("dledger").load().collect()
    with pytest.raises(Exception, match="is not a DLedger store"):
        _load(spark, tmp_path / "missing").collect()


def test_write_refusals(spark: Any) -> None:
    df = spark.createDataFrame([(b"a",)], "body binary")
    with pytest.raises(Exception, match="append-only"):
        df.write.format("dledger").option("peers", "n0-127.0.0.1:1").mode("overwrite").save()
    with pytest.raises(Exception, match="live cluster"):
        df.write.format("dledger").mode("append").save(str(golden_root() / "basic"))
    with pytest.raises(Exception, match="column 'value' must be binary or string, got bigint"):
        wrong = spark.createDataFrame([(1,)], "value long")
        wrong.write.format("dledger").option("peers", "n0-127.0.0.1:1").mode("append").save()


def test_large_range_spreads_over_default_parallelism(spark: Any, tmp_path: Path) -> None:
    # 40,000 entries of 100 bytes in one 16 MiB segment: about 6 MiB, split for 2 cores
    node = small_store(tmp_path / "log", 40_000, data_file_size=16 << 20)
    df = _load(spark, node)
    assert df.rdd.getNumPartitions() == 2
    stats = df.selectExpr("count(*) AS n", "min(index) AS lo", "max(index) AS hi", "count(DISTINCT index) AS d")
    assert stats.first().asDict() == {"n": 40_000, "lo": 0, "hi": 39_999, "d": 40_000}
    assert _load(spark, node, minPartitions="5").rdd.getNumPartitions() == 5
    assert _load(spark, node, "index long", endingIndex="10").rdd.getNumPartitions() == 1
    row = _load(spark, node, startingIndex="12345", endingIndex="12346").first()
    assert row["index"] == 12345 and row["value"].startswith(b"12345.")


def test_store_config_is_read_from_files(spark: Any, tmp_path: Path) -> None:
    # segment sizes other than the defaults are inferred from the files
    import dledger

    config = StoreConfig(data_file_size=8192, index_file_size=1024, warm_ahead_bytes=0)
    with dledger.open_log(tmp_path / "n", config) as log:
        log.append_many([b"x" * 500] * 100)
    assert _load(spark, tmp_path / "n").count() == 100


def test_noop_entries_are_left_out_unless_asked(spark: Any, tmp_path: Path) -> None:
    import dledger

    with dledger.open_log(tmp_path / "n") as log:
        log.append_many([b"a", b""])  # an empty body is a record, not a NOOP
        log.append_noop()  # what a new leader appends
        log.append(b"c")
    rows = sorted(_load(spark, tmp_path / "n").collect(), key=lambda r: r["index"])
    assert [(r["index"], r["value"]) for r in rows] == [(0, b"a"), (1, b""), (3, b"c")]
    df = _load(spark, tmp_path / "n", includeNoops="true")
    assert df.columns == ["key", "value", "index", "term", "pos", "timestamp", "headers", "magic"]
    assert sorted((r["index"], r["value"], r["magic"]) for r in df.collect()) == [
        (0, b"a", 1),
        (1, b"", 1),
        (2, b"", 2),
        (3, b"c", 1),
    ]
    # the index file carries magic too: reads without bodies tell NOOPs apart as well
    meta = _load(spark, tmp_path / "n", "magic int, index long")
    assert sorted((r["index"], r["magic"]) for r in meta.collect()) == [(0, 1), (1, 1), (3, 1)]
    meta_all = _load(spark, tmp_path / "n", "index long, magic int", includeNoops="true")
    assert sorted((r["index"], r["magic"]) for r in meta_all.collect()) == [(0, 1), (1, 1), (2, 2), (3, 1)]
    with pytest.raises(Exception, match="includeNoops must be true or false"):
        _load(spark, tmp_path / "n", includeNoops="sometimes").collect()
