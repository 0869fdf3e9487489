"""Column batches to Arrow record batches, without copying (pyarrow only, no Spark).

A `ColumnBatch` already has Arrow's layouts: native int64 arrays for index/term/pos,
int32 for magic and, for the bodies, int32 offsets (count + 1) over one bytes buffer. The
Arrow arrays are views of those buffers. The record columns (key, value, timestamp,
headers: `dledger.spark.records`) are views of the buffers built in C by
`StoreView.read_records` (offline reads of them) or else by `dledger.record.with_records`,
made only when one of them is read. NOOP entries (magic 2, written by a new
leader) are left out unless asked for; only a batch that holds one is copied.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from dledger.columns import ColumnBatch
from dledger.entry import MAGIC_NOOP
from dledger.record import with_records
from dledger.spark.records import RECORD_COLUMNS, record_array

FIELD_TYPES: dict[str, Any] = {
    "index": pa.int64(),
    "term": pa.int64(),
    "pos": pa.int64(),
    "body": pa.binary(),
    "magic": pa.int32(),
    "key": pa.binary(),
    "value": pa.binary(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "headers": pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())]))),
}


def arrow_schema(columns: Sequence[str], names: Sequence[str] | None = None) -> Any:
    """The Arrow schema of a read projecting `columns` (nullable fields, as Spark's
    conversion of a StructType gives). `names` are the output names (default: `columns`)."""
    out = names if names is not None else columns
    return pa.schema([pa.field(name, FIELD_TYPES[col], nullable=True) for col, name in zip(columns, out, strict=True)])


def to_record_batch(batch: ColumnBatch, columns: Sequence[str], schema: Any) -> Any:
    """A `pyarrow.RecordBatch` of `columns` over the buffers of `batch` (zero-copy).

    Args:
        batch: the entries.
        columns: canonical column names (index, term, pos, body, magic, key, value,
            timestamp, headers), in output order.
        schema: the Arrow schema to produce (see `arrow_schema`), matching `columns`.
    """
    n = batch.count
    if batch.records is None and (
        any(col in RECORD_COLUMNS for col in columns) or ("body" in columns and batch.record_count)
    ):
        batch = with_records(batch)  # `body` is `value`: a record's payload
    arrays = []
    for k, col in enumerate(columns):
        if col in RECORD_COLUMNS or (col == "body" and batch.records is not None):
            arrays.append(record_array(batch, col, schema.field(k).type))
        elif col == "body":
            arrays.append(
                pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(batch.offsets), pa.py_buffer(batch.bodies)])
            )
        else:
            arrays.append(pa.Array.from_buffers(FIELD_TYPES[col], n, [None, pa.py_buffer(getattr(batch, col))]))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def record_batches(
    batches: Iterable[ColumnBatch], columns: Sequence[str], schema: Any, include_noops: bool = False
) -> Iterator[Any]:
    """`to_record_batch` over a stream of column batches (empty ones skipped), without
    the NOOP entries unless `include_noops`."""
    for batch in batches:
        if not batch.count:
            continue
        if include_noops or not batch.noop_count:
            yield to_record_batch(batch, columns, schema)
            continue
        kept = to_record_batch(batch, columns, schema).filter(pa.array(batch.magic != MAGIC_NOOP))
        if kept.num_rows:
            yield kept
