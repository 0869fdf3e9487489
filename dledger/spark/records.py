"""Kafka's columns in the `dledger` data source, without pyspark: the Arrow arrays of
`key`, `value`, `timestamp` and `headers` built over a batch's record columns (no
Python work per row), and the write side's row encoding (its schema check is
`dledger.spark.write_schema.write_columns_of`).

Reads: `value` (and its alias `body`) is the payload, `key` null when the record has
none, `timestamp` the record's event time (null for plain entries: DLedger stores no
time), `headers` a list<struct<key: string, value: binary>> (empty for plain entries).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from dledger.columns import ColumnBatch
from dledger.entry import MAGIC_NORMAL, MAGIC_RECORD
from dledger.record import encode_record, now_ms
from dledger.spark.write_schema import WriteColumns

RECORD_COLUMNS = ("key", "value", "timestamp", "headers")
"""Columns read from the record fields (`body` is the same data as `value`)."""


def record_array(batch: ColumnBatch, column: str, arrow_type: Any) -> Any:
    """The Arrow array of record column `column` (key, value/body, timestamp, headers)
    of `batch`, whose `records` must be set, as `arrow_type` (the type Spark expects)."""
    cols = batch.records
    assert cols is not None, "read with dledger.record.with_records first"
    n = batch.count
    if column in ("value", "body"):
        return pa.Array.from_buffers(arrow_type, n, [None, pa.py_buffer(cols.value_offsets), pa.py_buffer(cols.values)])
    if column == "key":
        return pa.Array.from_buffers(
            arrow_type, n, [pa.py_buffer(cols.key_valid), pa.py_buffer(cols.key_offsets), pa.py_buffer(cols.keys)]
        )
    if column == "timestamp":
        per_ms = {"ms": 1, "us": 1000, "ns": 1_000_000}.get(arrow_type.unit)
        values = cols.timestamps * per_ms if per_ms else cols.timestamps // 1000  # -1 rows are null anyway
        return pa.Array.from_buffers(arrow_type, n, [pa.py_buffer(cols.timestamp_valid), pa.py_buffer(values)])
    if column == "headers":
        struct_type = arrow_type.value_type
        h = len(cols.header_key_offsets) - 1
        keys = pa.Array.from_buffers(
            struct_type.field(0).type, h, [None, pa.py_buffer(cols.header_key_offsets), pa.py_buffer(cols.header_keys)]
        )
        values = pa.Array.from_buffers(
            struct_type.field(1).type,
            h,
            [None, pa.py_buffer(cols.header_value_offsets), pa.py_buffer(cols.header_values)],
        )
        pairs = pa.StructArray.from_arrays([keys, values], fields=list(struct_type))
        return pa.Array.from_buffers(arrow_type, n, [None, pa.py_buffer(cols.header_offsets)], children=[pairs])
    raise ValueError(f"{column} is not a record column")


# -- writes


def _binary(array: Any) -> Any:
    if pa.types.is_string(array.type):
        return array.cast(pa.binary())
    if pa.types.is_large_string(array.type):
        return array.cast(pa.large_binary())
    return array


def _millis(array: Any) -> list[int | None]:
    if pa.types.is_timestamp(array.type):
        array = array.cast(pa.timestamp("ms", tz=array.type.tz)).cast(pa.int64())
    return list(array.to_pylist())


def bodies_of_rows(batch: Any, columns: WriteColumns, as_records: bool = False) -> tuple[list[bytes], int]:
    """The entry bodies of an Arrow record batch and their magic: the values as plain
    bodies, or record bodies when the write has key/timestamp/headers columns (a null
    key: no key; a null timestamp: now; null headers: none) or `as_records` is set
    (exactly-once writes: the idempotent producer numbers records; a value alone is
    then a record with no key, no headers and the write time).

    Raises:
        ValueError: a null value, a negative timestamp or a field over its limit.
    """
    values = batch.column(columns.value)
    if values.null_count:
        raise ValueError("value (body) must not be null")
    bodies = list(_binary(values).to_pylist())
    if not columns.records:
        if not as_records:
            return bodies, MAGIC_NORMAL
        now = now_ms()
        return [encode_record(value, None, now) for value in bodies], MAGIC_RECORD
    n = len(bodies)
    keys = _binary(batch.column(columns.key)).to_pylist() if columns.key >= 0 else [None] * n
    stamps = _millis(batch.column(columns.timestamp)) if columns.timestamp >= 0 else [None] * n
    headers = batch.column(columns.headers).to_pylist() if columns.headers >= 0 else [None] * n
    now = now_ms()
    out = []
    for value, key, stamp, pairs in zip(bodies, keys, stamps, headers, strict=True):
        hs = [(h["key"], h["value"] if h["value"] is not None else b"") for h in pairs or ()]
        if any(name is None for name, _ in hs):
            raise ValueError("a header key must not be null")
        out.append(encode_record(value, key, now if stamp is None else stamp, hs))
    return out, MAGIC_RECORD
