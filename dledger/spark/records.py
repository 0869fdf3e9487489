"""Kafka's columns in the `dledger` data source, without pyspark: the Arrow arrays of
`key`, `value`, `timestamp` and `headers` built over a batch's record columns (no
Python work per row), and the write side's schema check and row encoding.

Reads: `value` (and its alias `body`) is the payload, `key` null when the record has
none, `timestamp` the record's event time (null for plain entries: DLedger stores no
time), `headers` a list<struct<key: string, value: binary>> (empty for plain entries).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from dledger.columns import ColumnBatch
from dledger.entry import MAGIC_NORMAL, MAGIC_RECORD
from dledger.record import encode_record, now_ms
from dledger.spark.options import OptionError

RECORD_COLUMNS = ("key", "value", "timestamp", "headers")
"""Columns read from the record fields (`body` is the same data as `value`)."""
HEADERS_TYPE = "array<struct<key:string,value:binary>>"
"""Spark's simpleString of the headers column."""


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


@dataclass(frozen=True)
class WriteColumns:
    """Which columns a write's rows carry (positions in the Arrow batches).

    Attributes:
        value: the payload column (`value` or its alias `body`).
        key, timestamp, headers: -1 when absent. Without any of them the rows are
            written as plain entries (as before records existed).
        timestamp_type: "timestamp" (Spark TimestampType) or "bigint" (ms since the epoch).
    """

    value: int
    key: int = -1
    timestamp: int = -1
    headers: int = -1
    timestamp_type: str = "timestamp"

    @property
    def records(self) -> bool:
        """True when the rows are written as records (magic 16)."""
        return self.key >= 0 or self.timestamp >= 0 or self.headers >= 0


_WRITE_TYPES = {
    "key": ("binary", "string"),
    "value": ("binary", "string"),
    "body": ("binary", "string"),
    "timestamp": ("timestamp", "bigint"),
    "headers": (HEADERS_TYPE,),
}


def write_columns_of(fields: Sequence[tuple[str, str]]) -> WriteColumns:
    """Validate a write schema given as (name, Spark simpleString type) pairs: `value`
    (or its alias `body`; binary or string, required), and optionally `key` (binary or
    string), `timestamp` (timestamp, or long ms) and `headers`
    (array<struct<key:string,value:binary>>), in any order.

    Raises:
        OptionError: a missing value, another column, a repeated column or a wrong type.
    """
    at: dict[str, int] = {}
    types: dict[str, str] = {}
    for k, (name, type_name) in enumerate(fields):
        key = name.lower()
        if key not in _WRITE_TYPES:
            raise OptionError(
                f"cannot write column {name!r}: the dledger sink takes value (or body), key, timestamp, headers "
                "(use df.select(...) to keep only those)"
            )
        if key in at or (key in ("value", "body") and ("value" in at or "body" in at)):
            raise OptionError(f"column {name!r} is given twice (body is an alias of value)")
        if type_name.lower().replace(" ", "") not in _WRITE_TYPES[key]:
            wanted = " or ".join(_WRITE_TYPES[key])
            raise OptionError(f"column {name!r} must be {wanted.replace('bigint', 'long')}, got {type_name}")
        at[key], types[key] = k, type_name.lower()
    value = at.get("value", at.get("body", -1))
    if value < 0:
        raise OptionError(
            "writing to dledger needs a value column (or body), binary or string; "
            f"got {[n for n, _ in fields] or 'none'}"
        )
    return WriteColumns(
        value, at.get("key", -1), at.get("timestamp", -1), at.get("headers", -1), types.get("timestamp", "timestamp")
    )


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


def bodies_of_rows(batch: Any, columns: WriteColumns) -> tuple[list[bytes], int]:
    """The entry bodies of an Arrow record batch and their magic: the values as plain
    bodies, or record bodies when the write has key/timestamp/headers columns (a null
    key: no key; a null timestamp: now; null headers: none).

    Raises:
        ValueError: a null value, a negative timestamp or a field over its limit.
    """
    values = batch.column(columns.value)
    if values.null_count:
        raise ValueError("value (body) must not be null")
    bodies = list(_binary(values).to_pylist())
    if not columns.records:
        return bodies, MAGIC_NORMAL
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
