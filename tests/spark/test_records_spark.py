"""Records through Spark: Kafka's columns (key, value, timestamp, headers; body as
value's alias) read offline and live from record and plain entries alike, and the sink
writing records from key/timestamp/headers columns (plain entries from a value alone).

The live round trip is in `test_live` (its cluster); Spark tests are slow."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import dledger
from dledger.columns import ColumnBatch
from dledger.record import encode_record, with_records
from dledger.spark.arrow import to_record_batch
from dledger.spark.options import SCHEMA_DDL

pytestmark = pytest.mark.spark

UTC = datetime.UTC
KAFKA_SCHEMA = (
    "key binary, value binary, timestamp timestamp, headers array<struct<key: string, value: binary>>, index long"
)


def _store(path: Path) -> None:
    with dledger.open_log(path) as log:
        log.append(b"plain")
        log.append_record(b"v1", key=b"k1", timestamp=1_700_000_000_123, headers=[("h", b"1"), ("h", b"2")])
        log.append_record(b"v2", timestamp=0)
        log.append_noop()
        log.append_record(b"", key=b"", timestamp=5, headers=[("only", b"")])


def _rows(df: Any) -> list[Any]:
    return sorted(df.collect(), key=lambda r: r["index"])


def test_offline_reads_return_kafka_columns(spark: Any, tmp_path: Path) -> None:
    _store(tmp_path / "n")
    rows = _rows(spark.read.format("dledger").schema(KAFKA_SCHEMA).load(str(tmp_path / "n")))
    assert [r["index"] for r in rows] == [0, 1, 2, 4]  # the NOOP is left out
    assert [r["key"] for r in rows] == [None, b"k1", None, b""]
    assert [r["value"] for r in rows] == [b"plain", b"v1", b"v2", b""]
    stamps = [r["timestamp"] for r in rows]
    assert stamps[0] is None
    assert stamps[1].astimezone(UTC) == datetime.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)
    assert [s.astimezone(UTC).timestamp() for s in stamps[2:]] == [0.0, 0.005]
    assert [[(h["key"], h["value"]) for h in r["headers"]] for r in rows] == [
        [],
        [("h", b"1"), ("h", b"2")],
        [],
        [("only", b"")],
    ]
    default = _rows(spark.read.format("dledger").load(str(tmp_path / "n")))
    assert [r["value"] for r in default] == [b"plain", b"v1", b"v2", b""]
    old = _rows(spark.read.format("dledger").schema("index long, body binary").load(str(tmp_path / "n")))
    assert [r["body"] for r in old] == [b"plain", b"v1", b"v2", b""]  # body: value's old name


def test_arrow_batches_match_spark_schema_without_spark() -> None:
    """The pure-Arrow path: a batch of record and plain entries against the default schema."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    types = {"key": BinaryType(), "value": BinaryType(), "body": BinaryType(), "timestamp": TimestampType()}
    types["headers"] = ArrayType(header)
    names = [part.split()[0] for part in SCHEMA_DDL.split(", ") if not part.startswith("value: ")] + ["body"]
    spark_schema = StructType([StructField(name, types.get(name, LongType())) for name in names])
    assert spark_schema.simpleString().startswith("struct<key:binary,value:binary,index:bigint,term:bigint")
    schema = to_arrow_schema(spark_schema, timezone="UTC")
    columns = [f.name for f in schema]
    bodies = [b"plain", encode_record(b"v", b"k", 2000, [("a", b"b")])]
    batch = ColumnBatch(
        np.array([0, 1], dtype=np.int64),
        np.array([1, 1], dtype=np.int64),
        np.array([0, 100], dtype=np.int64),
        np.cumsum([0, *map(len, bodies)], dtype=np.int32),
        bytearray(b"".join(bodies)),
        np.array([1, 16], dtype=np.int32),
    )
    out = to_record_batch(batch, columns, schema)
    out.validate(full=True)
    assert out.column("value").to_pylist() == out.column("body").to_pylist() == [b"plain", b"v"]
    assert out.column("timestamp").cast(pa.int64()).to_pylist() == [None, 2_000_000]
    assert out.column("headers").to_pylist() == [[], [{"key": "a", "value": b"b"}]]
    assert with_records(batch).records is not None
