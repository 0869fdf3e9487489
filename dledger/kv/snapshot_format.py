"""The key-value store's snapshot format: a versioned, checksummed stream of its map.

Layout (integers big-endian):

- header, 26 bytes: the magic `DLKVSNAP`, the format version (u16, 1), the last applied
  log index (i64, -1 when unknown) and the number of keys (u64);
- one record per key: key length (u32), key, value length (u32), value;
- trailer, 20 bytes: the magic `DLKVEND!`, the number of records again (u64) and the
  CRC-32 (zlib's) of every byte before the trailer (u32).

Nothing may follow the trailer. A reader of a truncated, extended or altered stream
raises `ValueError` before anything is handed out: `read_snapshot` builds the whole map
and returns it only when the trailer matches.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable
from typing import BinaryIO

MAGIC = b"DLKVSNAP"
END_MAGIC = b"DLKVEND!"
VERSION = 1
_HEADER = struct.Struct(">8sHqQ")
_TRAILER = struct.Struct(">8sQI")
_LENGTH = struct.Struct(">I")
_FLUSH_BYTES = 1 << 20
MAX_FIELD = (1 << 32) - 1


def write_snapshot(writer: BinaryIO, applied_index: int, count: int, items: Iterable[tuple[bytes, bytes]]) -> int:
    """Stream `count` (key, value) pairs to `writer` in this format; returns the bytes
    written.

    Raises:
        ValueError: `items` did not yield exactly `count` pairs, or a field is longer
            than 4 GiB - 1 (nothing valid is left behind: the trailer is never written).
    """
    crc, total = 0, 0
    buffer = bytearray(_HEADER.pack(MAGIC, VERSION, applied_index, count))
    written = 0
    pack = _LENGTH.pack
    for key, value in items:
        if len(key) > MAX_FIELD or len(value) > MAX_FIELD:
            raise ValueError(f"a key or value of {max(len(key), len(value))} bytes does not fit the format")
        buffer += pack(len(key))
        buffer += key
        buffer += pack(len(value))
        buffer += value
        written += 1
        if len(buffer) >= _FLUSH_BYTES:
            crc = zlib.crc32(buffer, crc)
            writer.write(buffer)
            total += len(buffer)
            buffer = bytearray()
    if written != count:
        raise ValueError(f"the captured view yielded {written} keys, expected {count}")
    crc = zlib.crc32(buffer, crc)
    buffer += _TRAILER.pack(END_MAGIC, count, crc)
    writer.write(buffer)
    return total + len(buffer)


class _Stream:
    """Buffered exact reads of a snapshot, with the CRC-32 of what was consumed."""

    def __init__(self, reader: BinaryIO) -> None:
        self.reader = reader
        self.buf = b""
        self.pos = 0
        self.base = 0  # the stream offset of buf[0]
        self.crc = 0
        self.crc_from = 0  # buf[:crc_from] is in crc already

    def fill(self, n: int) -> None:
        """Make buf[pos:pos + n] available (or as much as the stream still has)."""
        self.crc = zlib.crc32(memoryview(self.buf)[self.crc_from : self.pos], self.crc)
        pieces, have = [self.buf[self.pos :]], len(self.buf) - self.pos
        while have < n and (piece := self.reader.read(max(_FLUSH_BYTES, min(n - have, _FLUSH_BYTES)))):
            pieces.append(piece)
            have += len(piece)
        self.base += self.pos
        self.buf, self.pos, self.crc_from = b"".join(pieces), 0, 0

    def exact(self, n: int, what: str) -> bytes:
        if self.pos + n > len(self.buf):
            self.fill(n)
            if n > len(self.buf):
                raise ValueError(
                    f"key-value snapshot truncated: {what} at offset {self.base} needs {n} bytes, got {len(self.buf)}"
                )
        data = self.buf[self.pos : self.pos + n]
        self.pos += n
        return data

    def checksum(self) -> int:
        """The CRC-32 of everything consumed so far."""
        self.crc = zlib.crc32(memoryview(self.buf)[self.crc_from : self.pos], self.crc)
        self.crc_from = self.pos
        return self.crc

    @property
    def offset(self) -> int:
        return self.base + self.pos


def _records(stream: _Stream, count: int, state: dict[bytes, bytes]) -> None:
    """Read `count` records into `state` (a fast path while a whole record is buffered)."""
    unpack = _LENGTH.unpack_from
    for n in range(count):
        buf, pos = stream.buf, stream.pos
        if pos + 4 <= len(buf):
            (key_end,) = unpack(buf, pos)
            key_end += pos + 4
            if key_end + 4 <= len(buf):
                (value_end,) = unpack(buf, key_end)
                value_end += key_end + 4
                if value_end <= len(buf):
                    key, value = buf[pos + 4 : key_end], buf[key_end + 4 : value_end]
                    stream.pos = value_end
                    size = len(state)
                    state[key] = value
                    if len(state) == size:
                        raise ValueError(f"key-value snapshot holds key {key[:40]!r} twice")
                    continue
        (key_length,) = _LENGTH.unpack(stream.exact(4, f"record {n}"))
        key = stream.exact(key_length, f"key {n}")
        (value_length,) = _LENGTH.unpack(stream.exact(4, f"record {n}"))
        value = stream.exact(value_length, f"value {n}")
        if key in state:
            raise ValueError(f"key-value snapshot holds key {key[:40]!r} twice")
        state[key] = value


def read_snapshot(reader: BinaryIO) -> tuple[int, dict[bytes, bytes]]:
    """Read a whole snapshot: (last applied index, the map).

    Raises:
        ValueError: not this format, another version, truncated, a duplicate key,
            trailing bytes, or a checksum or count that does not match.
    """
    stream = _Stream(reader)
    magic, version, applied_index, count = _HEADER.unpack(stream.exact(_HEADER.size, "the header"))
    if magic != MAGIC:
        raise ValueError(f"not a key-value snapshot: it starts with {magic!r}, not {MAGIC!r}")
    if version != VERSION:
        raise ValueError(f"key-value snapshot format version {version}, this reader knows {VERSION}")
    state: dict[bytes, bytes] = {}
    _records(stream, count, state)
    crc = stream.checksum()
    end, end_count, stored_crc = _TRAILER.unpack(stream.exact(_TRAILER.size, "the trailer"))
    if end != END_MAGIC or end_count != count:
        raise ValueError(f"key-value snapshot trailer damaged at offset {stream.offset - _TRAILER.size}")
    if stored_crc != crc:
        raise ValueError(f"key-value snapshot checksum {crc:#010x} does not match the stored {stored_crc:#010x}")
    if stream.pos < len(stream.buf) or reader.read(1):
        raise ValueError(f"key-value snapshot has bytes after its trailer (offset {stream.offset})")
    return applied_index, state


__all__ = ["read_snapshot", "write_snapshot"]
