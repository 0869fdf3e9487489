"""The log entry and the on-disk layout constants (same values as native/dl_layout.h)."""

from __future__ import annotations

from dataclasses import dataclass

HEADER_SIZE = 48  # DLedger's BODY_OFFSET: magic, size, index, term, pos, channel, 2 CRCs, bodySize
INDEX_UNIT_SIZE = 32
MAGIC_BLANK = -1
MAGIC_NORMAL = 1
MAGIC_NOOP = 2
MIN_BLANK_LEN = 8
MAX_ENTRY_SIZE = 4 * 1024 * 1024

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
        magic: 1 for a normal entry, 2 for a NOOP.
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
