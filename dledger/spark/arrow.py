"""Column batches to Arrow record batches, without copying (pyarrow only, no Spark).

A `ColumnBatch` already has Arrow's layouts: native int64 arrays for index/term/pos,
int32 for magic and, for the bodies, int32 offsets (count + 1) over one bytes buffer. The
Arrow arrays are views of those buffers. NOOP entries (magic 2, written by a new leader)
are left out unless asked for; only a batch that holds one is copied.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from dledger.columns import ColumnBatch
from dledger.entry import MAGIC_NOOP

FIELD_TYPES: dict[str, Any] = {
    "index": pa.int64(),
    "term": pa.int64(),
    "pos": pa.int64(),
    "body": pa.binary(),
    "magic": pa.int32(),
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
        columns: canonical column names (index, term, pos, body, magic), in output order.
        schema: the Arrow schema to produce (see `arrow_schema`), matching `columns`.
    """
    n = batch.count
    arrays = []
    for col in columns:
        if col == "body":
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


def bodies_of(batch: Any, column: int = 0) -> list[bytes]:
    """The bodies in column `column` of an Arrow record batch (binary or string) as bytes,
    for the writers; nulls are refused."""
    array = batch.column(column)
    if array.null_count:
        raise ValueError("body must not be null")
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        array = array.cast(pa.binary() if pa.types.is_string(array.type) else pa.large_binary())
    return list(array.to_pylist())
