"""The write schema of the `dledger` sink, checked without Spark: value (or body), and
Kafka's key, timestamp and headers."""

from __future__ import annotations

import pytest

from dledger.spark.target import OptionError
from dledger.spark.write_schema import HEADERS_TYPE, WriteColumns, write_columns_of


def test_write_schema() -> None:
    assert write_columns_of([("body", "binary")]) == WriteColumns(0)
    assert not write_columns_of([("value", "string")]).records
    both = write_columns_of(
        [("headers", HEADERS_TYPE), ("KEY", "string"), ("value", "binary"), ("timestamp", "bigint")]
    )
    assert both == WriteColumns(2, key=1, timestamp=3, headers=0, timestamp_type="bigint") and both.records
    with pytest.raises(OptionError, match="needs a value column"):
        write_columns_of([("key", "binary")])
    with pytest.raises(OptionError, match="cannot write column 'index'"):
        write_columns_of([("index", "bigint"), ("body", "binary")])
    with pytest.raises(OptionError, match="given twice"):
        write_columns_of([("value", "binary"), ("body", "binary")])
    with pytest.raises(OptionError, match="must be binary or string"):
        write_columns_of([("body", "int")])
    with pytest.raises(OptionError, match="must be timestamp or long"):
        write_columns_of([("body", "binary"), ("timestamp", "string")])
