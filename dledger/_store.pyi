"""Typed stub of the compiled `dledger._store` (`_store.pyx` and its `.pxi` parts).

The pure-Python twin `dledger._store_py` has the same names and parameters;
`tests/unit/test_twin_api.py` checks both against this file. `dledger._native.impl` is
typed as this module.
"""

import mmap
from collections.abc import Callable, Iterable
from typing import Any, Final

from _typeshed import ReadableBuffer

from dledger.entry import Entry, ScanResult

COMPILED: Final[bool]
"""True here, False in the twin."""
CRC_IMPL: Final[str]
"""Which CRC-32 code the module uses ("libdeflate", "zlib", ...)."""

# Why `LogCore.scan` stopped (`ScanResult.stop_reason`).
STOP_END: Final[int]
STOP_BAD_HEADER: Final[int]
STOP_CRC: Final[int]
STOP_INDEX: Final[int]
STOP_TERM: Final[int]
STOP_POS: Final[int]
STOP_BLANK: Final[int]
STOP_NO_SEGMENT: Final[int]

# `LogCore.state`: appends are refused in any state but STATE_OK.
STATE_OK: Final[int]
STATE_DISK_FULL: Final[int]
STATE_DISK_ERROR: Final[int]
STATE_READ_ONLY: Final[int]

# `LogCore.failpoint`: crash points for recovery tests.
FAIL_NONE: Final[int]
FAIL_AFTER_DATA_BEFORE_INDEX: Final[int]

_Header = tuple[int, int, int, int, int, int, int, int, int]
"""magic, size, index, term, pos, channel, chain_crc, body_crc, body_size."""
_IndexUnit = tuple[int, int, int, int, int]
"""magic, pos, size, index, term."""
_Columns = tuple[int, bytearray, bytearray, bytearray, bytearray, bytearray, bytearray]
"""count, index, term, pos (native int64), offsets (native int32, count + 1), bodies, magic (native int32)."""

def crc32(data: ReadableBuffer, value: int = 0) -> int:
    """CRC-32 of `data` (the values of zlib and java.util.zip.CRC32); with `value`, the
    CRC-32 of earlier bytes continued over `data` (as `zlib.crc32(data, value)`)."""

def encode_entry(magic: int, index: int, term: int, pos: int, body: bytes, write_crc: bool = True) -> bytes:
    """Encode one entry: the 48-byte big-endian header followed by the body."""

def decode_header(data: ReadableBuffer, offset: int = 0) -> _Header:
    """Decode the 48-byte header at `offset` (ValueError when it does not fit)."""

def encode_index_unit(magic: int, pos: int, size: int, index: int, term: int) -> bytes:
    """Encode one 32-byte index unit."""

def decode_index_unit(data: ReadableBuffer, offset: int = 0) -> _IndexUnit:
    """Decode the index unit at `offset` (ValueError when it does not fit)."""

_Record = tuple[int, bytes | None, list[tuple[str, bytes]], bytes]
"""timestamp (ms), key (None: no key), headers ((key, value) pairs, in order), value."""
_RecordColumns = tuple[
    Any,
    Any,
    bytearray,
    bytearray,
    bytearray,
    bytearray,
    bytearray,
    bytearray,
    bytearray,
    bytearray,
    bytearray,
    bytearray,
]
"""value offsets, values, key offsets, keys, key validity bitmap, timestamps (native int64, -1 when none),
timestamp validity bitmap, header list offsets, header key offsets, header keys, header value offsets,
header values (offsets native int32; bitmaps Arrow's, LSB first)."""
_RecordBatch = tuple[int, bytearray, bytearray, bytearray, bytearray, _RecordColumns]
"""count, index, term, pos, magic and the record columns of `LogCore.read_records`."""

def encode_record(value: bytes, key: bytes | None, timestamp: int, headers: Iterable[tuple[str, bytes]] = ()) -> bytes:
    """Encode a record body (docs/FORMAT.md "Records"); ValueError over a limit, TypeError for a wrong type."""

def encode_records(
    count: int,
    value_offsets: ReadableBuffer,
    values: ReadableBuffer,
    key_offsets: ReadableBuffer,
    keys: ReadableBuffer,
    key_valid: ReadableBuffer,
    timestamps: ReadableBuffer,
    now: int,
) -> list[bytes]:
    """Record bodies (no headers) of `count` rows given as Arrow-layout columns (int32
    offsets; empty key offsets: no keys; empty key validity: every key present; empty
    timestamps: `now`); ValueError for a column that lies, a negative time or a long key."""

def decode_record(body: ReadableBuffer) -> _Record:
    """Decode a record body; ValueError when it is truncated, lies about a length or breaks a limit."""

def check_records(bodies: Iterable[ReadableBuffer], allow_stamped: bool = True) -> None:
    """Validate record bodies without decoding them: ValueError naming the first bad one
    (with `allow_stamped` False, a stamped body, version 2, is one)."""

def split_records(count: int, offsets: ReadableBuffer, bodies: ReadableBuffer, magic: ReadableBuffer) -> _RecordColumns:
    """The record columns of a column batch (plain entries: no key, no timestamp, no headers, the body as value)."""

class Quota:
    """Per-second byte budget over a window of 5 one-second slots (DLedger's Quota)."""

    max_per_second: int
    def __init__(self, max_per_second: int) -> None: ...
    def sample(self, value: int, now_ms: int) -> None:
        """Account `value` bytes to the second containing `now_ms`."""

    def validate_now(self, now_ms: int) -> bool:
        """True when this second's budget is used up (the caller must wait)."""

    def left_now_ms(self, now_ms: int) -> int:
        """Milliseconds until the next second starts."""

class MappedTable:
    """The contiguous, fixed-size mapped segments of one file list (data or index).

    Segment k covers [first_offset + k*file_size, ... + file_size); a segment may come
    with an open file descriptor the table closes when the segment leaves.
    """

    @property
    def file_size(self) -> int: ...
    @property
    def first_offset(self) -> int:
        """Offset of the first segment (-1 when the table is empty)."""

    @property
    def count(self) -> int:
        """How many segments the table holds."""

    @property
    def writable(self) -> bool:
        """False once a read-only mapping was pushed."""

    @property
    def end_offset(self) -> int:
        """Offset just past the last segment (-1 when the table is empty)."""

    def __init__(self, file_size: int) -> None: ...
    def segments(self) -> list[mmap.mmap]:
        """The mapped objects, first to last."""

    def push(self, obj: mmap.mmap, from_offset: int, fd: int = -1) -> None:
        """Add a mapped segment after the last one; the table takes over `fd` if given."""

    def pop_first(self) -> None:
        """Drop the first segment (prefix deletion)."""

    def pop_last(self) -> None:
        """Drop the last segment (truncation)."""

    def fd_of(self, offset: int) -> int:
        """The open descriptor of the segment holding `offset`, -1 when it has none."""

    def read(self, offset: int, n: int) -> bytes:
        """Copy of [offset, offset+n), which must lie inside one segment (IndexError)."""

    def write(self, offset: int, data: bytes) -> None:
        """Overwrite [offset, offset+len(data)) inside one segment (IndexError)."""

    def zero(self, offset: int, n: int) -> None:
        """Zero [offset, offset+n) inside one segment (IndexError)."""

    def msync(self, frm: int, to: int) -> None:
        """Make [frm, to) durable (msync MS_SYNC)."""

    def prefault(self, frm: int, to: int) -> None:
        """Fault [frm, to) in writable without changing its bytes."""

    def unmap_pages(self, frm: int, to: int) -> None:
        """Drop the page-table entries of the whole pages inside [frm, to) (MADV_DONTNEED)."""

class LogCore:
    """Appends and reads entries over a data table and an index table (see `_core.pxi`).

    The ledger bounds are read-only here: appends move them, and the Python layer sets
    them with `_set_state` while it holds the lock (`_acquire` / `_release`).
    """

    term: int
    """The term new entries get."""
    write_crc: bool
    verify_crc: bool
    state: int
    """One of the STATE_* codes."""
    failpoint: int
    """One of the FAIL_* codes."""
    max_entry_size: int
    allow_noop: bool
    allow_records: bool
    """False refuses record entries (java_compat)."""
    write_through: bool
    """Appends write through the segment file (pwrite) instead of the mapping."""
    @property
    def exclusive(self) -> int:
        """> 0 while a multi-step change holds the lock (`_acquire`)."""

    @property
    def begin_index(self) -> int: ...
    @property
    def end_index(self) -> int: ...
    @property
    def end_term(self) -> int: ...
    @property
    def write_pos(self) -> int: ...
    @property
    def shrinks(self) -> int:
        """Times the log's end moved back (truncation)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    def _init_core(
        self,
        data: MappedTable,
        index: MappedTable,
        roller: Callable[[int, int], None],
        on_write_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        """Attach the tables; `roller(kind, offset)` (kind 0 = data, 1 = index) must push
        a segment starting at `offset` when an append needs one; `on_write_failure(error)`
        is told when a write into the data files failed (not for a full disk)."""

    def _acquire(self) -> None:
        """Take the lock for a multi-step change (truncate, reset, recovery, retention, close)."""

    def _release(self) -> None: ...
    def _set_state(self, begin_index: int, end_index: int, end_term: int, write_pos: int) -> None:
        """Set the ledger bounds (recovery, truncate, reset). Caller holds the lock."""

    def append(self, body: bytes) -> int:
        """Append one entry with the current `term`; returns its index."""

    def append_noop(self) -> int:
        """Append an empty NOOP entry (magic 2) with the current `term`; returns its index."""

    def append_many(self, bodies: Iterable[bytes], magic: int = 1) -> int:
        """Append several bodies as consecutive entries of `magic` (1 normal, 16 record:
        each body must be a valid record body; UNSUPPORTED when `allow_records` is off);
        returns the first index."""

    def append_encoded(self, run: ReadableBuffer) -> int:
        """Append a run of already-encoded entries verbatim once all are valid; returns the count."""

    def get(self, idx: int) -> Entry:
        """The entry at `idx` (DLedgerError INDEX_OUT_OF_RANGE outside the log)."""

    def get_body(self, idx: int) -> bytes:
        """The body of the entry at `idx`."""

    def term_at(self, idx: int) -> int:
        """Term of the entry at `idx`, read from its index unit."""

    def read_run(self, from_index: int, max_bytes: int) -> tuple[bytes, int]:
        """Encoded entries from `from_index` within one segment and `max_bytes`: (bytes, count)."""

    def read_columns(self, from_index: int, max_count: int, max_bytes: int) -> _Columns:
        """Column-wise batch from `from_index`."""

    def read_records(self, from_index: int, max_count: int, max_bytes: int) -> _RecordBatch:
        """The entries of `read_columns` with their record columns instead of their bodies."""

    def scan(self, start: int, prev_index: int, prev_term: int, check_crc: bool, check_index: bool) -> ScanResult:
        """Walk and validate entries from data position `start` the way recovery does."""

    def write_units(self, start: int, from_index: int, to_index: int) -> None:
        """Rewrite the index units of from_index..to_index from the data. Caller holds the lock."""

    def unit_conflicts(
        self, start: int, from_index: int, to_index: int, prev_term: int, prev_end: int
    ) -> list[tuple[int, int, int, int, int]]:
        """Entries whose index unit describes another entry: [(index, pos, prev_term,
        prev_end, next_term)]. Caller holds the lock."""
