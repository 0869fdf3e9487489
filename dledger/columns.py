"""ColumnBatch: committed entries read column-wise, shared by the store, the transport,
the client and the Spark data source; RecordColumns: their record fields (key,
timestamp, headers, value) in Arrow's layouts."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from dledger.entry import MAGIC_NOOP, MAGIC_NORMAL, MAGIC_RECORD

_NORMAL_MAGIC: npt.NDArray[np.int32] = np.zeros(0, dtype=np.int32)
"""Sentinel default of `ColumnBatch.magic`: every entry is a normal one."""


def _bits(bitmap: Any, count: int) -> npt.NDArray[np.bool_]:
    return np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), count=count, bitorder="little").astype(bool)


def _position(k: int, count: int) -> int:
    """Entry `k` of `count` as a sequence takes it (a negative k counts from the end).
    Before, -1 read an empty body and -3 a missing key (helper E), silently."""
    at = operator.index(k)
    at += count if at < 0 else 0
    if not 0 <= at < count:
        raise IndexError(f"entry {k} of a batch of {count}")
    return at


@dataclass(frozen=True)
class RecordColumns:
    """The record fields of a batch's entries in Arrow's layouts (built in C by
    `dledger.record.split_records`; a plain entry has no key, no timestamp, no headers
    and its body as value; a stamped record body, layout version 2, gives the columns of
    the record it carries: the stamp is no column). Offsets are int32; bitmaps are
    Arrow validity bitmaps (LSB first, 1 = present). The headers are Arrow's
    list<struct<key: string, value: binary>>: entry k's headers are h in
    [header_offsets[k], header_offsets[k+1]), header h's key
    header_keys[header_key_offsets[h]:header_key_offsets[h+1]], its value alike.

    Attributes:
        value_offsets, values: the values (count + 1 offsets); the batch's own offsets
            and bodies when it holds no record entries.
        key_offsets, keys, key_valid: the keys (null where key_valid's bit is 0).
        timestamps, timestamp_valid: event times in ms (int64; -1 and bit 0 where none).
        header_offsets, header_key_offsets, header_keys, header_value_offsets,
            header_values: the headers.
    """

    value_offsets: npt.NDArray[np.int32]
    values: Any
    key_offsets: npt.NDArray[np.int32]
    keys: bytearray
    key_valid: bytearray
    timestamps: npt.NDArray[np.int64]
    timestamp_valid: bytearray
    header_offsets: npt.NDArray[np.int32]
    header_key_offsets: npt.NDArray[np.int32]
    header_keys: bytearray
    header_value_offsets: npt.NDArray[np.int32]
    header_values: bytearray

    @classmethod
    def from_raw(cls, raw: tuple[Any, ...], count: int) -> RecordColumns:
        """Wrap the tuple `split_records` returns without copying."""
        i32, i64 = np.int32, np.int64
        headers = len(raw[8]) // 4 - 1
        return cls(
            np.frombuffer(raw[0], dtype=i32, count=count + 1),
            raw[1],
            np.frombuffer(raw[2], dtype=i32, count=count + 1),
            raw[3],
            raw[4],
            np.frombuffer(raw[5], dtype=i64, count=count),
            raw[6],
            np.frombuffer(raw[7], dtype=i32, count=count + 1),
            np.frombuffer(raw[8], dtype=i32, count=headers + 1),
            raw[9],
            np.frombuffer(raw[10], dtype=i32, count=headers + 1),
            raw[11],
        )

    def has_key(self) -> npt.NDArray[np.bool_]:
        """One bool per entry: whether it has a key."""
        return _bits(self.key_valid, len(self.timestamps))

    def value(self, k: int) -> bytes:
        """Entry k's value (k as a sequence takes it: -1 is the last; IndexError outside)."""
        k = _position(k, len(self.timestamps))
        return bytes(self.values[self.value_offsets[k] : self.value_offsets[k + 1]])

    def key(self, k: int) -> bytes | None:
        """Entry k's key (None without one; k as in `value`)."""
        k = _position(k, len(self.timestamps))
        if not self.key_valid[k >> 3] >> (k & 7) & 1:
            return None
        return bytes(self.keys[self.key_offsets[k] : self.key_offsets[k + 1]])

    def headers(self, k: int) -> list[tuple[str, bytes]]:
        """Entry k's headers, in order (k as in `value`)."""
        k = _position(k, len(self.timestamps))
        ko, vo = self.header_key_offsets, self.header_value_offsets
        return [
            (bytes(self.header_keys[ko[h] : ko[h + 1]]).decode(), bytes(self.header_values[vo[h] : vo[h + 1]]))
            for h in range(self.header_offsets[k], self.header_offsets[k + 1])
        ]


@dataclass(frozen=True)
class ColumnBatch:
    """Committed entries read column-wise (Arrow's binary layout for the bodies).

    Attributes:
        index, term, pos: int64 arrays, one value per entry.
        offsets: int32 array of count+1 values; body k is bodies[offsets[k]:offsets[k+1]].
        bodies: all bodies back to back.
        magic: int32 array, one value per entry: MAGIC_NORMAL (1), MAGIC_NOOP (2, the
            empty entry a new leader appends) or MAGIC_RECORD (16, a record body).
            Omitted: every entry is normal.
        records: the record columns, when read with them (`dledger.record.with_records`,
            or `StoreView.read_records`, which reads them instead of the bodies); None
            otherwise (the bodies then hold record bodies as stored).
    """

    index: npt.NDArray[np.int64]
    term: npt.NDArray[np.int64]
    pos: npt.NDArray[np.int64]
    offsets: npt.NDArray[np.int32]
    bodies: bytearray
    magic: npt.NDArray[np.int32] = field(default_factory=lambda: _NORMAL_MAGIC)
    records: RecordColumns | None = None

    def __post_init__(self) -> None:
        if self.magic is _NORMAL_MAGIC:
            object.__setattr__(self, "magic", np.full(len(self.index), MAGIC_NORMAL, dtype=np.int32))

    @property
    def count(self) -> int:
        """Number of entries."""
        return len(self.index)

    @property
    def noop_count(self) -> int:
        """Number of NOOP entries."""
        return int(np.count_nonzero(self.magic == MAGIC_NOOP))

    @property
    def record_count(self) -> int:
        """Number of record entries (magic 16)."""
        return int(np.count_nonzero(self.magic == MAGIC_RECORD))

    def body(self, k: int) -> bytes:
        """The k-th body (k as a sequence takes it: -1 is the last; IndexError outside)."""
        k = _position(k, len(self.index))
        return bytes(self.bodies[self.offsets[k] : self.offsets[k + 1]])

    @classmethod
    def empty(cls) -> ColumnBatch:
        """A batch of no entries."""
        none = np.zeros(0, dtype=np.int64)
        return cls(none, none, none, np.zeros(1, dtype=np.int32), bytearray(), np.zeros(0, dtype=np.int32))

    @classmethod
    def from_raw(cls, raw: tuple[object, ...]) -> ColumnBatch:
        """Wrap the tuple returned by the core's `read_columns` without copying:
        (count, index, term, pos, offsets, bodies, magic)."""
        n = int(raw[0])  # type: ignore[call-overload]
        return cls(
            np.frombuffer(raw[1], dtype=np.int64, count=n),  # type: ignore[call-overload]
            np.frombuffer(raw[2], dtype=np.int64, count=n),  # type: ignore[call-overload]
            np.frombuffer(raw[3], dtype=np.int64, count=n),  # type: ignore[call-overload]
            np.frombuffer(raw[4], dtype=np.int32, count=n + 1),  # type: ignore[call-overload]
            raw[5],  # type: ignore[arg-type]
            np.frombuffer(raw[6], dtype=np.int32, count=n),  # type: ignore[call-overload]
        )

    @classmethod
    def from_record_raw(cls, raw: tuple[Any, ...]) -> ColumnBatch:
        """Wrap the tuple returned by the core's `read_records` without copying: (count,
        index, term, pos, magic, record columns). The batch has its `records` and no
        bodies (`offsets` all zero, `bodies` empty, as a read of the index file alone)."""
        n = int(raw[0])
        return cls(
            np.frombuffer(raw[1], dtype=np.int64, count=n),
            np.frombuffer(raw[2], dtype=np.int64, count=n),
            np.frombuffer(raw[3], dtype=np.int64, count=n),
            np.zeros(n + 1, dtype=np.int32),
            bytearray(),
            np.frombuffer(raw[4], dtype=np.int32, count=n),
            RecordColumns.from_raw(raw[5], n),
        )
