"""Entry and index-unit codecs of the pure-Python twin, and the constants of its API.

Part of `dledger._store_py` (see there); the compiled counterparts are
`dledger/_codec.pxi` and the constants of `dledger/_store.pyx`.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any, cast

from dledger.entry import HEADER_SIZE, INDEX_UNIT_SIZE

STOP_END, STOP_BAD_HEADER, STOP_CRC, STOP_INDEX, STOP_TERM, STOP_POS = 0, 1, 2, 3, 4, 5
STOP_BLANK, STOP_NO_SEGMENT = 6, 7
STATE_OK, STATE_DISK_FULL, STATE_DISK_ERROR, STATE_READ_ONLY = 0, 1, 2, 3
FAIL_NONE, FAIL_AFTER_DATA_BEFORE_INDEX = 0, 1

HEADER = struct.Struct(">iiqqqiiii")  # magic, size, index, term, pos, channel, chain CRC, body CRC, body size
UNIT = struct.Struct(">iqiqq")  # magic, pos, size, index, term
BLANK = struct.Struct(">ii")  # magic, size: what a blank record and an entry header share

Header = tuple[int, int, int, int, int, int, int, int, int]
Unit = tuple[int, int, int, int, int]


def crc32(data: Any, value: int = 0) -> int:
    """CRC-32 of `data` (the values of zlib and java.util.zip.CRC32); with `value`, the
    CRC-32 of earlier bytes continued over `data` (as `zlib.crc32(data, value)`)."""
    if not 0 <= value <= 0xFFFFFFFF:
        raise OverflowError(f"CRC-32 value {value} is not in 0..2^32-1")
    return zlib.crc32(data, value) & 0xFFFFFFFF


def crc_field(body: Any) -> int:
    """The CRC-32 of `body` as the signed 32-bit value a header stores."""
    value = zlib.crc32(body)
    return value - (1 << 32) if value >= 1 << 31 else value


def encode_entry(magic: int, index: int, term: int, pos: int, body: bytes, write_crc: bool = True) -> bytes:
    """Encode one entry: the 48-byte big-endian header followed by the body."""
    crc = crc_field(body) if write_crc else 0
    size = HEADER_SIZE + len(body)
    return HEADER.pack(magic, size, index, term, pos, 0, 0, crc, len(body)) + body


def decode_header(data: Any, offset: int = 0) -> Header:
    """Decode the header at `offset`: (magic, size, index, term, pos, channel, chain_crc,
    body_crc, body_size)."""
    if offset < 0 or offset + HEADER_SIZE > len(data):
        raise ValueError("header out of range")
    return cast(Header, HEADER.unpack_from(data, offset))


def encode_index_unit(magic: int, pos: int, size: int, index: int, term: int) -> bytes:
    """Encode one 32-byte index unit."""
    return UNIT.pack(magic, pos, size, index, term)


def decode_index_unit(data: Any, offset: int = 0) -> Unit:
    """Decode the index unit at `offset`: (magic, pos, size, index, term)."""
    if offset < 0 or offset + INDEX_UNIT_SIZE > len(data):
        raise ValueError("index unit out of range")
    return cast(Unit, UNIT.unpack_from(data, offset))


def put_unit(view: memoryview, at: int, magic: int, pos: int, size: int, index: int, term: int) -> None:
    """Write an index unit into `view` at `at`."""
    UNIT.pack_into(view, at, magic, pos, size, index, term)
