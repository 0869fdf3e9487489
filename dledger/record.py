"""Records: entries with a key, an event timestamp and headers (magic 16).

A record's body is a compact, versioned layout (docs/FORMAT.md "Records") that the
compiled core encodes and decodes; this module is the façade the client, the embedded
API, the CLI and Spark use. Plain entries (magic 1) read as records too: no key, no
headers, their body as value and no timestamp (`timestamp` None: DLedger's entry
header stores no time, so there is no append time to report).

Limits, checked on encode and decode: a key of at most `MAX_RECORD_KEY` (65,536) bytes,
at most `MAX_RECORD_HEADERS` (1,024) headers, header keys of at most `MAX_HEADER_KEY`
(1,024) UTF-8 bytes, a timestamp in milliseconds >= 0 (and on encode at most
`MAX_TIMESTAMP_MS`, the last millisecond an int64 of microseconds holds: Spark's
timestamps); the whole body must fit an entry (4 MiB with the 48-byte header).

Stamped records (version 2): the leader of an idempotent request stamps its first
record with the producer's id, epoch, first sequence number, the request's record count
and the append time (`stamp_record_body`, `record_stamp`); every reader reads a stamped
body as the record it carries. Clients never send them (`check_append` refuses them).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dledger._native import impl
from dledger.codes import DLedgerError, ResponseCode
from dledger.columns import ColumnBatch, RecordColumns
from dledger.entry import (
    MAGIC_NORMAL,
    MAGIC_RECORD,
    MAX_HEADER_KEY,
    MAX_RECORD_HEADERS,
    MAX_RECORD_KEY,
    MAX_STAMP_COUNT,
    MAX_TIMESTAMP_MS,
    RECORD_STAMP_SIZE,
    RECORD_STAMPED,
    RECORD_VERSION,
    Entry,
)

__all__ = [
    "MAX_HEADER_KEY",
    "MAX_RECORD_HEADERS",
    "MAX_RECORD_KEY",
    "MAX_TIMESTAMP_MS",
    "STAMP_SIZE",
    "Header",
    "Record",
    "decode_record",
    "encode_record",
    "encode_record_objects",
    "encode_records",
    "now_ms",
    "check_append",
    "record_content",
    "record_of",
    "record_stamp",
    "split_records",
    "stamp_record_body",
    "with_records",
]

Header = tuple[str, bytes]
"""One header: a string key (repeats allowed, order kept, as Kafka) and a binary value."""


STAMP_SIZE = RECORD_STAMP_SIZE
"""Bytes of a stamped record's stamp (after its version byte 2): producer id, epoch and
first sequence number (int64 each), count (uint32), append time (int64), big-endian."""

STAMPED_VERSION = RECORD_STAMPED
"""The first byte of a stamped record body (a plain record body starts with 1)."""

_STAMP = struct.Struct(">qqqIq")
_INT63 = (1 << 63) - 1

_STAMPED_FIRST = bytes((STAMPED_VERSION,))


def now_ms() -> int:
    """The wall-clock time in milliseconds: a record's default timestamp."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class Record:
    """One record as read back.

    Attributes:
        value: the payload (a plain entry's body).
        key: the key, None when the record has none (always None for plain entries).
        timestamp: event time in ms since the epoch; None for plain entries.
        headers: (key, value) pairs in the order written.
        index, term: where the log holds it (-1 before it is appended).
    """

    value: bytes
    key: bytes | None = None
    timestamp: int | None = None
    headers: tuple[Header, ...] = field(default=())
    index: int = -1
    term: int = -1


def encode_record(
    value: bytes, key: bytes | None = None, timestamp: int | None = None, headers: Iterable[Header] = ()
) -> bytes:
    """Encode a record body (`timestamp` None: now).

    Raises:
        ValueError: a field over its limit, a negative timestamp, or a header key that
            is not valid Unicode text (a lone surrogate such as '\\udc80' has no UTF-8).
        TypeError: value or key not bytes, a header not a (str, bytes) pair.
    """
    try:
        return impl.encode_record(value, key, now_ms() if timestamp is None else timestamp, headers)
    except UnicodeEncodeError as exc:  # only a header key is text
        raise ValueError(
            f"header key {exc.object!r} is not valid UTF-8 text ({exc.reason} at position {exc.start})"
        ) from None


def encode_record_objects(records: Iterable[Record], method: str) -> list[bytes]:
    """The bodies of `records` (their value, key, timestamp (None: now) and headers),
    for `method`'s messages.

    Raises:
        TypeError: `records` is not an iterable of Records (a bare Record, bytes or
            str included), or an item has no record fields (`records[i]` named).
        ValueError / TypeError: a field over its limit or of the wrong type (see
            `encode_record`).
    """
    if isinstance(records, Record | bytes | bytearray | str) or not isinstance(records, Iterable):
        raise TypeError(f"{method}: records must be a sequence of Record objects, not {type(records).__name__}")
    records = records if isinstance(records, list | tuple) else list(records)
    try:
        return [encode_record(r.value, r.key, r.timestamp, r.headers) for r in records]
    except AttributeError:  # an item without a record's fields (raised by nothing else here)
        for n, item in enumerate(records):
            if not all(hasattr(item, name) for name in ("value", "key", "timestamp", "headers")):
                raise TypeError(
                    f"{method}: records[{n}] must be a Record (dledger.record.Record), not {type(item).__name__}"
                ) from None
        raise


def encode_records(
    count: int,
    value_offsets: Any,
    values: Any,
    key_offsets: Any,
    keys: Any,
    key_valid: Any,
    timestamps: Any,
    now: int,
) -> list[bytes]:
    """Record bodies (no headers) of `count` rows held as Arrow-layout columns, in one
    compiled pass (a writer of whole column batches: the Spark sink): `value_offsets`
    (count + 1 native int32) into `values`; `key_offsets` (count + 1 native int32) into
    `keys`, or empty for no keys; `key_valid` (count bytes, 0 = no key), or empty when
    every row has its key; `timestamps` (count native int64 ms), or empty for `now` on
    every row. Body k equals `encode_record(value k, key k, timestamp k)`.

    Raises:
        ValueError: offsets out of order or outside their data, a short column, a
            negative timestamp or a key over the limit.
    """
    return impl.encode_records(count, value_offsets, values, key_offsets, keys, key_valid, timestamps, now)


def decode_record(body: bytes) -> tuple[int, bytes | None, list[Header], bytes]:
    """Decode a record body: (timestamp, key, headers, value); a stamped (version 2)
    body decodes as the record it carries (see `record_stamp` for its stamp).

    Raises:
        ValueError: truncated, a length that lies, or a limit broken.
    """
    return impl.decode_record(body)


def record_of(entry: Entry) -> Record:
    """The record an entry holds: decoded for magic 16 (a stamped body as the record it
    carries); a plain entry (or a NOOP) as a record with no key, no headers and no
    timestamp.

    Raises:
        ValueError: a magic-16 entry whose body is not a valid record body.
    """
    if entry.magic != MAGIC_RECORD:
        return Record(entry.body, index=entry.index, term=entry.term)
    timestamp, key, headers, value = impl.decode_record(entry.body)
    return Record(value, key, timestamp, tuple(headers), entry.index, entry.term)


def check_append(bodies: Sequence[bytes], magic: int, java_compat: bool) -> None:
    """Check a client request before anything is appended: `magic` is 1 (normal) or
    16 (record: every body must decode, and records are off in java_compat mode).
    Stamped records (version 2) are written by the leader only: a client's is refused.

    Raises:
        DLedgerError: UNSUPPORTED (records in java_compat mode) or UNEXPECTED_ARGUMENT
            (another magic, a stamped record body, or the first body that is not a
            valid record body).
    """
    if magic == MAGIC_NORMAL:
        return
    if magic != MAGIC_RECORD:
        raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"clients append magic 1 or 16, not {magic}")
    if java_compat:
        raise DLedgerError(
            ResponseCode.UNSUPPORTED, "record entries are disabled (java_compat): Java DLedger cannot read them"
        )
    try:
        impl.check_records(bodies, False)
    except ValueError as exc:
        raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"{exc} (nothing was appended)") from None


split_records = impl.split_records
"""`split_records(count, offsets, bodies, magic)`: a column batch's record columns in
Arrow's layouts, built in C (see `dledger.columns.RecordColumns`)."""


def with_records(batch: ColumnBatch) -> ColumnBatch:
    """`batch` with its record columns (`ColumnBatch.records`), built in C: no Python
    work per entry. The bodies stay as stored.

    Raises:
        ValueError: a record entry whose body is not a valid record body.
    """
    if batch.records is not None:
        return batch
    raw = impl.split_records(batch.count, batch.offsets.data, batch.bodies, batch.magic.data)
    return replace(batch, records=RecordColumns.from_raw(raw, batch.count))


def stamp_record_body(
    body: bytes, producer_id: int, epoch: int, first_seq: int, count: int, append_time_ms: int
) -> bytes:
    """The stamped (version 2) body of the version-1 record body `body`: byte 2, the
    36-byte stamp, then `body` from its byte 1 on (docs/FORMAT.md "Records").

    Args:
        body: a valid version-1 record body.
        producer_id, epoch, first_seq: 0..2^63 - 1.
        count: records of the request the stamp covers, 1..65,536.
        append_time_ms: the leader's append time, >= 0 (and < 2^63).

    Raises:
        ValueError: `body` is not a valid version-1 record body, or a field is out of range.
    """
    if not isinstance(body, bytes) or body[:1] != bytes((RECORD_VERSION,)):
        raise ValueError("stamp_record_body: not a version-1 record body")
    try:
        impl.check_records((body,))
    except ValueError as exc:
        raise ValueError(f"stamp_record_body: not a valid version-1 record body ({exc})") from None
    for name, value in (
        ("producer_id", producer_id),
        ("epoch", epoch),
        ("first_seq", first_seq),
        ("append_time_ms", append_time_ms),
    ):
        if not 0 <= value <= _INT63:
            raise ValueError(f"stamp_record_body: {name} must be in 0..2^63 - 1, got {value}")
    if not 1 <= count <= MAX_STAMP_COUNT:
        raise ValueError(f"stamp_record_body: count must be in 1..{MAX_STAMP_COUNT}, got {count}")
    return bytes((STAMPED_VERSION,)) + _STAMP.pack(producer_id, epoch, first_seq, count, append_time_ms) + body[1:]


def record_content(body: bytes) -> bytes:
    """The key, headers and value of a record body (version 1 or stamped), as its bytes:
    what a record sent again keeps, though its timestamp may be taken anew and the leader
    stamps a request's first record (docs/FORMAT.md "Records")."""
    stamp = STAMP_SIZE if body[:1] == _STAMPED_FIRST else 0
    return body[1 + stamp + 8 :]  # version, stamp, timestamp (int64)


def record_stamp(body: bytes) -> tuple[int, int, int, int, int] | None:
    """The stamp of a stamped (version 2) record body: (producer_id, epoch, first_seq,
    count, append_time_ms); None for any other body (a version-1 record).

    Raises:
        ValueError: a version-2 body too short for its stamp, or a stamp field out of
            range (a negative field, count not in 1..65,536).
    """
    if body[:1] != _STAMPED_FIRST:
        return None
    if len(body) < 1 + STAMP_SIZE:
        raise ValueError(f"stamped record body ({len(body)} bytes) is truncated: its stamp needs {1 + STAMP_SIZE}")
    stamp: tuple[int, int, int, int, int] = _STAMP.unpack_from(body, 1)
    if min(stamp[0], stamp[1], stamp[2], stamp[4]) < 0:
        raise ValueError(f"stamped record body has a negative stamp field: {stamp}")
    if not 1 <= stamp[3] <= MAX_STAMP_COUNT:
        raise ValueError(f"stamped record body has a stamp count of {stamp[3]}, not in 1..{MAX_STAMP_COUNT}")
    return stamp
