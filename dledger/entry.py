"""The log entry, the on-disk layout constants (same values as native/dl_layout.h) and
the result of a recovery scan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

HEADER_SIZE = 48  # DLedger's BODY_OFFSET: magic, size, index, term, pos, channel, 2 CRCs, bodySize
INDEX_UNIT_SIZE = 32
MAGIC_BLANK = -1
MAGIC_NORMAL = 1
MAGIC_NOOP = 2
MAGIC_RECORD = 16  # dledger-py: the body is a record (key, timestamp, headers, value)
ENTRY_MAGICS = (MAGIC_NORMAL, MAGIC_NOOP, MAGIC_RECORD)  # every magic an entry may have
MIN_BLANK_LEN = 8
MAX_ENTRY_SIZE = 4 * 1024 * 1024

RECORD_VERSION = 1  # the first byte of a record body
RECORD_STAMPED = 2  # the first byte of a stamped record body (leader-written, see dledger.record)
RECORD_STAMP_SIZE = 36  # producer id, epoch, first seq (int64 each), count (uint32), append time (int64)
MAX_STAMP_COUNT = 65536  # records one stamp covers
MAX_RECORD_KEY = 65536  # key bytes
MAX_TIMESTAMP_MS = 9_223_372_036_854_775  # a record timestamp: the most an int64 of microseconds holds (Spark)
MAX_RECORD_HEADERS = 1024  # headers per record
MAX_HEADER_KEY = 1024  # UTF-8 bytes of one header key

OFF_MAGIC, OFF_SIZE, OFF_INDEX, OFF_TERM, OFF_POS = 0, 4, 8, 16, 24
OFF_CHANNEL, OFF_CHAIN_CRC, OFF_BODY_CRC, OFF_BODY_SIZE = 32, 36, 40, 44
IDX_OFF_MAGIC, IDX_OFF_POS, IDX_OFF_SIZE, IDX_OFF_INDEX, IDX_OFF_TERM = 0, 4, 12, 16, 24


@dataclass(frozen=True, slots=True)
class Entry:
    """One log entry as stored.

    Attributes:
        index: Raft log index (0-based, contiguous).
        term: the leader term that created it.
        pos: absolute byte position in the data log.
        magic: 1 for a normal entry, 2 for a NOOP, 16 for a record (the body is a
            record body: see `dledger.record`).
        body: the payload.
        body_crc: the stored CRC-32 of the body (0 when not written, as Java does).
    """

    index: int
    term: int
    pos: int
    magic: int
    body: bytes
    body_crc: int = 0

    @property
    def size(self) -> int:
        """Encoded size in bytes (header + body)."""
        return HEADER_SIZE + len(self.body)

    @property
    def is_noop(self) -> bool:
        """True for the NOOP entry a new leader appends."""
        return self.magic == MAGIC_NOOP


class ScanResult(NamedTuple):
    """Where and why a validating walk of the data log (`LogCore.scan`) stopped.

    Attributes:
        stop_pos: data position the walk stopped at.
        first_index: index of the first entry walked (-1 without entries).
        last_index: index of the last valid entry (the `prev_index` given without entries).
        last_term: term of the last valid entry (the `prev_term` given without entries).
        entry_count: how many valid entries the walk passed.
        stop_reason: why it stopped: one of the core's STOP_* codes.
        mismatch_index: first index whose index unit disagrees with the data (-1 when all
            agree or units were not checked).
        mismatch_pos: data position of that entry (-1 without a mismatch).
        last_end: where the last valid entry ends (-1 without entries); before
            `stop_pos` when a blank follows it.
    """

    stop_pos: int
    first_index: int
    last_index: int
    last_term: int
    entry_count: int
    stop_reason: int
    mismatch_index: int
    mismatch_pos: int
    last_end: int
