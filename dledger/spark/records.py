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

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from dledger.columns import ColumnBatch
from dledger.config_bounds import INT64_MAX
from dledger.entry import MAGIC_NORMAL, MAGIC_RECORD
from dledger.record import MAX_TIMESTAMP_MS, encode_record, encode_records, now_ms
from dledger.spark.write_schema import WriteColumns

__all__ = ["MAX_TIMESTAMP_MS", "RECORD_COLUMNS", "bodies_of_rows", "record_array"]

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
        if per_ms:
            _check_representable(batch, INT64_MAX // per_ms, arrow_type.unit)
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


def _check_representable(batch: ColumnBatch, limit_ms: int, unit: str) -> None:
    """Refuse a batch holding an event time past `limit_ms` (one that `unit` cannot hold
    in int64: multiplied, it would wrap around to a wrong time).

    Raises:
        ValueError: naming the first such entry's index, its time and the limit.
    """
    cols = batch.records
    assert cols is not None
    over = cols.timestamps > limit_ms
    if not over.any():
        return
    k = int(np.argmax(over))
    raise ValueError(
        f"entry {int(batch.index[k])} has event timestamp {int(cols.timestamps[k])} ms, past the latest the "
        f"timestamp column can hold ({limit_ms} ms since the epoch: Spark's timestamps are {unit} in a long); "
        "read it with a schema without the timestamp column"
    )


# -- writes


def _binary(array: Any) -> Any:
    """A binary or string column as binary with int32 offsets (Arrow's `binary`)."""
    if not pa.types.is_binary(array.type):
        array = array.cast(pa.binary())  # string, large_string, large_binary
    return array


def _binary_buffers(array: Any) -> tuple[Any, Any]:
    """The offsets (len + 1 native int32, into the data) and data of a binary column, as
    `dledger.record.encode_records` takes them (no copy; a sliced array's offsets start at
    its slice)."""
    if len(array) == 0:
        return bytes(4), b""
    _, offsets, data = array.buffers()
    start = array.offset * 4
    return memoryview(offsets).cast("B")[start : start + (len(array) + 1) * 4], data if data is not None else b""


def _millis(array: Any, now: int, name: str, first_row: int) -> Any:
    """Event times in ms since the epoch (native int64; a null: `now`): a timestamp
    column of any unit, sub-millisecond precision cut off (Spark's are microseconds), or
    a long column of ms.

    Raises:
        ValueError: a time past MAX_TIMESTAMP_MS, naming column `name` and the row
            (`first_row` is the row number of the batch's first row).
    """
    raw = pc.fill_null(array.cast(pa.int64()), 0).to_numpy()  # a timestamp: in its own unit
    unit = array.type.unit if pa.types.is_timestamp(array.type) else "ms"
    if unit in ("s", "ms"):  # microseconds and nanoseconds cannot be that late
        per_ms = 1000 if unit == "s" else 1
        over = raw > MAX_TIMESTAMP_MS // per_ms
        if over.any():
            k = int(np.argmax(over))
            raise ValueError(
                f"column {name}, row {first_row + k}: timestamp {int(raw[k]) * per_ms} ms is past the latest a "
                f"record may carry ({MAX_TIMESTAMP_MS} ms since the epoch: Spark's timestamps are microseconds in "
                "a long)"
            )
        millis = raw * per_ms
    else:
        millis = raw // {"us": 1000, "ns": 1_000_000}[unit]
    millis = np.ascontiguousarray(millis, dtype=np.int64)
    if array.null_count:
        millis[np.asarray(array.is_null())] = now
    return millis


def _header_key(raw: Any, name: str, row: int) -> str:
    if raw is None:
        raise ValueError(f"column {name}, row {row}: a header key must not be null")
    try:
        return str(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"column {name}, row {row}: header key {raw!r} is not valid UTF-8 ({exc.reason})") from None


def _headers_of(pairs: Any, name: str, row: int) -> list[tuple[str, bytes]]:
    """One row's headers from a list of {key: bytes, value: bytes} (keys as raw bytes,
    so that one that is not UTF-8 is refused here, naming its row).

    Raises:
        ValueError: a null header, a null or non-UTF-8 key, or a null value.
    """
    out: list[tuple[str, bytes]] = []
    for j, pair in enumerate(pairs or ()):
        if pair is None:
            raise ValueError(f"column {name}, row {row}: header {j} is null (give a key and a value)")
        key = _header_key(pair["key"], name, row)
        if pair["value"] is None:
            raise ValueError(
                f"column {name}, row {row}: header {key!r} has a null value; a record's header value cannot be "
                "null (Kafka's can): write an empty value or leave the header out"
            )
        out.append((key, pair["value"]))
    return out


def _raw_headers(column: Any) -> list[Any]:
    """The headers column as Python lists, keys as bytes (not decoded by Arrow, which
    raises a bare UnicodeDecodeError on a key that is not UTF-8)."""
    pair_type = column.type.value_type
    raw = {pa.string(): pa.binary(), pa.large_string(): pa.large_binary()}
    fields = [pa.field(f.name, raw.get(f.type, f.type)) for f in pair_type]
    return list(column.cast(pa.list_(pa.struct(fields))).to_pylist())


def bodies_of_rows(
    batch: Any, columns: WriteColumns, as_records: bool = False, first_row: int = 0
) -> tuple[list[bytes], int]:
    """The entry bodies of an Arrow record batch and their magic: the values as plain
    bodies, or record bodies when the write has key/timestamp/headers columns (a null
    key: no key; a null timestamp: now; null headers: none) or `as_records` is set
    (exactly-once writes: the idempotent producer numbers records; a value alone is
    then a record with no key, no headers and the write time). Rows without headers are
    encoded by the compiled hot path, with no Python work per row. `first_row`: the row
    number of the batch's first row, for error messages.

    Raises:
        ValueError: a null value, a negative or too late timestamp, a bad header (null,
            a null or non-UTF-8 key, a null value) or a field over its limit.
    """
    values = batch.column(columns.value)
    if values.null_count:
        row = first_row + values.is_null().to_pylist().index(True)
        name = batch.schema.field(columns.value).name
        raise ValueError(f"column {name}, row {row}: the value must not be null (an empty value is b'')")
    values = _binary(values)
    n = len(values)
    if not columns.records and not as_records:
        return values.to_pylist(), MAGIC_NORMAL
    now = now_ms()
    if columns.headers >= 0:
        return _bodies_with_headers(batch, columns, values, now, first_row), MAGIC_RECORD
    key_offsets: Any = b""
    keys: Any = b""
    key_valid: Any = b""
    if columns.key >= 0:
        key_column = _binary(batch.column(columns.key))
        key_offsets, keys = _binary_buffers(key_column)
        if key_column.null_count:
            key_valid = np.asarray(key_column.is_valid()).view(np.uint8)
    stamps: Any = _stamps(batch, columns, now, first_row) if columns.timestamp >= 0 else b""
    bodies = encode_records(n, *_binary_buffers(values), key_offsets, keys, key_valid, stamps, now)
    return bodies, MAGIC_RECORD


def _stamps(batch: Any, columns: WriteColumns, now: int, first_row: int) -> Any:
    name = batch.schema.field(columns.timestamp).name
    return _millis(batch.column(columns.timestamp), now, name, first_row)


def _bodies_with_headers(batch: Any, columns: WriteColumns, values: Any, now: int, first_row: int) -> list[bytes]:
    """Record bodies of rows with a headers column (one `encode_record` per row)."""
    n = len(values)
    keys = _binary(batch.column(columns.key)).to_pylist() if columns.key >= 0 else [None] * n
    stamps = _stamps(batch, columns, now, first_row).tolist() if columns.timestamp >= 0 else [now] * n
    name = batch.schema.field(columns.headers).name
    headers = _raw_headers(batch.column(columns.headers))
    return [
        encode_record(value, key, stamp, _headers_of(pairs, name, first_row + k))
        for k, (value, key, stamp, pairs) in enumerate(zip(values.to_pylist(), keys, stamps, headers, strict=True))
    ]
