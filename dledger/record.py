"""Records: entries with a key, an event timestamp and headers (magic 16).

A record's body is a compact, versioned layout (docs/FORMAT.md "Records") that the
compiled core encodes and decodes; this module is the façade the client, the embedded
API, the CLI and Spark use. Plain entries (magic 1) read as records too: no key, no
headers, their body as value and no timestamp (`timestamp` None: DLedger's entry
header stores no time, so there is no append time to report).

Limits, checked on encode and decode: a key of at most `MAX_RECORD_KEY` (65,536) bytes,
at most `MAX_RECORD_HEADERS` (1,024) headers, header keys of at most `MAX_HEADER_KEY`
(1,024) UTF-8 bytes, a timestamp in milliseconds >= 0; the whole body must fit an entry
(4 MiB with the 48-byte header).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from dledger._native import impl
from dledger.codes import DLedgerError, ResponseCode
from dledger.columns import ColumnBatch, RecordColumns
from dledger.entry import (
    MAGIC_NORMAL,
    MAGIC_RECORD,
    MAX_HEADER_KEY,
    MAX_RECORD_HEADERS,
    MAX_RECORD_KEY,
    Entry,
)

__all__ = [
    "MAX_HEADER_KEY",
    "MAX_RECORD_HEADERS",
    "MAX_RECORD_KEY",
    "Header",
    "Record",
    "decode_record",
    "encode_record",
    "now_ms",
    "check_append",
    "record_of",
    "split_records",
    "with_records",
]

Header = tuple[str, bytes]
"""One header: a string key (repeats allowed, order kept, as Kafka) and a binary value."""


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
        ValueError: a field over its limit, or a negative timestamp.
        TypeError: value or key not bytes, a header not a (str, bytes) pair.
    """
    return impl.encode_record(value, key, now_ms() if timestamp is None else timestamp, headers)


def decode_record(body: bytes) -> tuple[int, bytes | None, list[Header], bytes]:
    """Decode a record body: (timestamp, key, headers, value).

    Raises:
        ValueError: truncated, a length that lies, or a limit broken.
    """
    return impl.decode_record(body)


def record_of(entry: Entry) -> Record:
    """The record an entry holds: decoded for magic 16; a plain entry (or a NOOP) as a
    record with no key, no headers and no timestamp.

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

    Raises:
        DLedgerError: UNSUPPORTED (records in java_compat mode) or UNEXPECTED_ARGUMENT
            (another magic, or the first body that is not a valid record body).
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
        impl.check_records(bodies)
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
