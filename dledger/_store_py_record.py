"""The record codec of the pure-Python twin (`dledger/_record.pxi` is the compiled one):
record bodies (magic 16; docs/FORMAT.md "Records") and `split_records`.

Part of `dledger._store_py` (see there). Errors match the compiled module's word for
word (tests/property/test_records.py).
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Iterable
from typing import Any

import numpy as np

from dledger.codes import DLedgerError, ResponseCode
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
)

_FIXED = 9  # version byte + int64 timestamp
_TS = struct.Struct(">q")
_STAMP = struct.Struct(">qqqIq")  # producer id, epoch, first seq, count, append time
_ERRORS = (
    "",
    "truncated",
    "unsupported record version",
    "negative timestamp",
    "bad varint (over 2^31 - 1, or not minimal)",
    f"key over {MAX_RECORD_KEY} bytes",
    f"more than {MAX_RECORD_HEADERS} headers",
    f"header key over {MAX_HEADER_KEY} bytes",
    "header key is not UTF-8",
    "bytes after the value",
    "truncated stamp",
    "negative stamp field",
    f"stamp count not in 1..{MAX_STAMP_COUNT}",
)
E_TRUNCATED, E_VERSION, E_TIMESTAMP, E_VARINT, E_KEY, E_HEADERS, E_HEADER_KEY, E_UTF8, E_TRAILING = range(1, 10)
E_STAMP_TRUNCATED, E_STAMP_NEGATIVE, E_STAMP_COUNT = range(10, 13)

Header = tuple[str, bytes]
Decoded = tuple[int, bytes | None, list[Header], bytes]


class _Bad(Exception):
    """A parse error: its code and where parsing stopped."""

    def __init__(self, code: int, at: int) -> None:
        super().__init__(code, at)
        self.code, self.at = code, at


def _varint(b: bytes, at: int) -> tuple[int, int]:
    """(value, next position) of the LEB128 varint at `at` (as `_record.pxi`)."""
    value, shift, i = 0, 0, at
    while True:
        if i >= len(b):
            raise _Bad(E_TRUNCATED, at)
        c = b[i]
        i += 1
        if shift == 28 and c > 7:
            raise _Bad(E_VARINT, at)
        value |= (c & 0x7F) << shift
        if c < 0x80:
            if c == 0 and shift > 0:
                raise _Bad(E_VARINT, at)
            return value, i
        shift += 7


def _put_varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _check_stamp(b: bytes) -> None:
    """Validate the stamp of a version-2 body (as `_record.pxi`'s `_rec_stamp`)."""
    if len(b) < 1 + RECORD_STAMP_SIZE:
        raise _Bad(E_STAMP_TRUNCATED, 1)
    producer_id, epoch, first_seq, count, append_time = _STAMP.unpack_from(b, 1)
    for value, at in ((producer_id, 1), (epoch, 9), (first_seq, 17), (append_time, 29)):
        if value < 0:
            raise _Bad(E_STAMP_NEGATIVE, at)
    if not 1 <= count <= MAX_STAMP_COUNT:
        raise _Bad(E_STAMP_COUNT, 25)


def _parse(b: bytes) -> tuple[int, int, int, list[tuple[int, int, int, int]], int]:
    """(timestamp, key offset or -1, key length, [(hkey off, len, hval off, len)], value offset).
    A stamped (version 2) body: its stamp validated, then the version-1 body after it."""
    n = len(b)
    if n < 1:
        raise _Bad(E_TRUNCATED, 0)
    base = fault = 0
    if b[0] != RECORD_VERSION:
        if b[0] != RECORD_STAMPED:
            raise _Bad(E_VERSION, 0)
        _check_stamp(b)
        base, fault = RECORD_STAMP_SIZE, RECORD_STAMP_SIZE + 1
    if n < base + _FIXED:
        raise _Bad(E_TRUNCATED, fault)
    (timestamp,) = _TS.unpack_from(b, base + 1)
    if timestamp < 0:
        raise _Bad(E_TIMESTAMP, fault)
    k, at = _varint(b, base + _FIXED)
    key_off, key_len = -1, 0
    if k > 0:
        if k - 1 > MAX_RECORD_KEY:
            raise _Bad(E_KEY, at)
        if k - 1 > n - at:
            raise _Bad(E_TRUNCATED, at)
        key_off, key_len, at = at, k - 1, at + k - 1
    count, at = _varint(b, at)
    if count > MAX_RECORD_HEADERS:
        raise _Bad(E_HEADERS, at)
    headers = []
    for _ in range(count):
        klen, at = _varint(b, at)
        if klen > MAX_HEADER_KEY:
            raise _Bad(E_HEADER_KEY, at)
        if klen > n - at:
            raise _Bad(E_TRUNCATED, at)
        try:
            b[at : at + klen].decode("utf-8")
        except UnicodeDecodeError:
            raise _Bad(E_UTF8, at) from None
        koff, at = at, at + klen
        vlen, at = _varint(b, at)
        if vlen > n - at:
            raise _Bad(E_TRUNCATED, at)
        headers.append((koff, klen, at, vlen))
        at += vlen
    vlen, at = _varint(b, at)
    if vlen > n - at:
        raise _Bad(E_TRUNCATED, at)
    if vlen < n - at:
        raise _Bad(E_TRAILING, at)
    return timestamp, key_off, key_len, headers, at


_REFUSED_STAMPED = "stamped records (version 2) are written by the leader, not sent by clients"


def check_records(bodies: Iterable[Any], allow_stamped: bool = True) -> None:
    """Validate record bodies without decoding them into objects: ValueError naming the
    first bad one ("body k: bad record body ..."). With `allow_stamped` False (a
    client's request) a stamped body (version 2) is refused."""
    for k, body in enumerate(bodies):
        b = bytes(body)
        if not allow_stamped and b[:1] == bytes((RECORD_STAMPED,)):
            raise ValueError(f"body {k}: {_REFUSED_STAMPED}")
        try:
            _parse(b)
        except _Bad as bad:
            raise ValueError(f"body {k}: {_error(bad, len(b))}") from None


def _error(bad: _Bad, n: int) -> ValueError:
    return ValueError(f"bad record body ({n} bytes): {_ERRORS[bad.code]} at byte {bad.at}")


def _check_timestamp(stamp: int, row: int) -> None:
    """A timestamp to encode: in [0, MAX_TIMESTAMP_MS] (row >= 0: named in the message)."""
    where = f"row {row}: " if row >= 0 else ""
    if stamp < 0:
        raise ValueError(f"{where}record timestamp must be >= 0, got {stamp}")
    if stamp > MAX_TIMESTAMP_MS:
        raise ValueError(
            f"{where}record timestamp {stamp} ms is past the last one a timestamp column holds, "
            f"{MAX_TIMESTAMP_MS} (year 294247)"
        )


def encode_record(value: bytes, key: bytes | None, timestamp: int, headers: Iterable[Header] = ()) -> bytes:
    """Encode a record body: version 1, `timestamp` (ms, >= 0), `key` (bytes or None),
    `headers` ((str, bytes) pairs; repeats allowed, order kept) and `value`. ValueError
    when a field breaks a limit, TypeError for a wrong type."""
    if type(value) is not bytes:
        raise TypeError(f"Argument 'value' has incorrect type (expected bytes, got {type(value).__name__})")
    timestamp = operator.index(timestamp)
    if timestamp >= 1 << 63:
        raise OverflowError("Python int too large to convert to C long")
    _check_timestamp(timestamp, -1)
    out = bytearray((RECORD_VERSION,)) + _TS.pack(timestamp)
    if key is not None:
        if type(key) is not bytes:
            raise TypeError(f"record key must be bytes or None, not {type(key).__name__}")
        if len(key) > MAX_RECORD_KEY:
            raise ValueError(f"record key is {len(key)} bytes, over the limit of {MAX_RECORD_KEY}")
    out += _put_varint(len(key) + 1 if key is not None else 0) + (key or b"")
    pairs = tuple(headers)
    if len(pairs) > MAX_RECORD_HEADERS:
        raise ValueError(f"record has {len(pairs)} headers, over the limit of {MAX_RECORD_HEADERS}")
    out += _put_varint(len(pairs))
    for pair in pairs:
        if type(pair) is not tuple or len(pair) != 2:
            raise TypeError("a record header must be a (str, bytes) pair")
        name, val = pair
        if type(name) is not str or type(val) is not bytes:
            raise TypeError(
                f"a record header must be a (str, bytes) pair, not ({type(name).__name__}, {type(val).__name__})"
            )
        raw = name.encode("utf-8")
        if len(raw) > MAX_HEADER_KEY:
            raise ValueError(f"record header key is {len(raw)} bytes, over the limit of {MAX_HEADER_KEY}")
        out += _put_varint(len(raw)) + raw + _put_varint(len(val)) + val
    out += _put_varint(len(value)) + value
    return bytes(out)


def _offsets(buffer: Any, count: int, size: int, short: str, what: str) -> Any:
    """int32 offsets [0..count] into `size` bytes: `short` when there are fewer, else
    checked as the compiled `_check_offsets` does (same messages)."""
    off = np.frombuffer(buffer, dtype=np.int32)
    if count < 0 or len(off) < count + 1:
        raise ValueError(short)
    off = off[: count + 1]
    if count and (off[0] < 0 or off[count] > size):
        raise ValueError(f"{what}: offsets outside the {size} bytes of data")
    below = np.flatnonzero(np.diff(off) < 0)
    if len(below):
        raise ValueError(f"{what}: offset {below[0] + 1} is below offset {below[0]}")
    return off


def _split(off: Any, data: bytes, count: int) -> list[bytes]:
    return [data[off[k] : off[k + 1]] for k in range(count)]


def encode_records(
    count: int, value_offsets: Any, values: Any, key_offsets: Any, keys: Any, key_valid: Any, timestamps: Any, now: int
) -> list[bytes]:
    """Record bodies (no headers) of rows given as Arrow-layout columns (see the compiled
    `encode_records`)."""
    vals = bytes(values)
    short = f"encode_records: value offsets shorter than {count} rows"
    voff = _offsets(value_offsets, count, len(vals), short, "encode_records: values")
    row_keys: list[bytes | None] = [None] * count
    if len(bytes(key_offsets)):
        kdata = bytes(keys)
        short = f"encode_records: key offsets shorter than {count} rows"
        row_keys = list(_split(_offsets(key_offsets, count, len(kdata), short, "encode_records: keys"), kdata, count))
    valid = bytes(key_valid)
    if valid:
        if len(valid) < count:
            raise ValueError(f"encode_records: key validity shorter than {count} rows")
        row_keys = [key if valid[k] else None for k, key in enumerate(row_keys)]
    stamps = [now] * count
    if len(bytes(timestamps)):
        ts = np.frombuffer(timestamps, dtype=np.int64)
        if len(ts) < count:
            raise ValueError(f"encode_records: timestamps shorter than {count} rows")
        stamps = [int(t) for t in ts[:count]]
    else:
        _check_timestamp(now, -1)
    out = []
    for k, (value, key, stamp) in enumerate(zip(_split(voff, vals, count), row_keys, stamps, strict=True)):
        _check_timestamp(stamp, k)
        if key is not None and len(key) > MAX_RECORD_KEY:
            raise ValueError(f"row {k}: record key is {len(key)} bytes, over the limit of {MAX_RECORD_KEY}")
        out.append(encode_record(value, key, stamp))
    return out


def decode_record(body: Any) -> Decoded:
    """Decode a record body: (timestamp, key or None, [(header key, value), ...], value).
    ValueError when it is truncated, lies about a length or breaks a limit."""
    b = bytes(body)
    try:
        timestamp, key_off, key_len, headers, value_off = _parse(b)
    except _Bad as bad:
        raise _error(bad, len(b)) from None
    key = None if key_off < 0 else b[key_off : key_off + key_len]
    pairs = [(b[ko : ko + kl].decode("utf-8"), b[vo : vo + vl]) for ko, kl, vo, vl in headers]
    return timestamp, key, pairs, b[value_off:]


def check_append_magic(magic: int, allow_records: bool) -> None:
    """`append_many`'s magic: normal, or record unless records are off (java_compat)."""
    if magic == MAGIC_RECORD:
        if not allow_records:
            raise DLedgerError(
                ResponseCode.UNSUPPORTED, "record entries are disabled (java_compat): Java DLedger cannot read them"
            )
    elif magic != MAGIC_NORMAL:
        raise DLedgerError(
            ResponseCode.UNEXPECTED_ARGUMENT,
            f"append_many writes magic {MAGIC_NORMAL} (normal) or {MAGIC_RECORD} (record), not {magic}",
        )


def _bitmap(flags: list[bool]) -> bytearray:
    return bytearray(np.packbits(np.array(flags, dtype=bool), bitorder="little").tobytes())


def _i32(values: list[int]) -> bytearray:
    return bytearray(np.array(values, dtype=np.int32).tobytes())


def split_records(count: int, offsets: Any, bodies: Any, magic: Any) -> tuple[Any, ...]:
    """Record columns of a column batch (see the compiled `split_records`)."""
    return split_batch(count, offsets, bodies, magic)


def split_batch(count: int, offsets: Any, bodies: Any, magic: Any, first_index: int = -1) -> tuple[Any, ...]:
    """`split_records`, or with `first_index` >= 0 the record columns of entries read
    from the log at `first_index` on (`LogCore.read_records`): the values always a copy
    and a bad record named by its index."""
    off = np.frombuffer(offsets, dtype=np.int32)
    mg = np.frombuffer(magic, dtype=np.int32)
    data = bytes(bodies)
    if count < 0 or len(off) < count + 1 or (len(mg) != 0 and len(mg) < count):
        raise ValueError(f"split_records: columns shorter than {count} entries")
    for k in range(count + 1):
        if off[k] < 0 or off[k] > len(data) or (k > 0 and off[k] < off[k - 1]):
            raise ValueError(f"split_records: offset {k} out of order or past the bodies")
    values, keys, hkeys, hvals = bytearray(), bytearray(), bytearray(), bytearray()
    val_off, key_off, hdr_off, hk_off, hv_off = [0], [0], [0], [0], [0]
    key_valid, stamp_valid, stamps, records = [], [], [], 0
    for k in range(count):
        b = data[off[k] : off[k + 1]]
        if len(mg) == 0 or mg[k] != MAGIC_RECORD:
            values += b
            stamps.append(-1)
            key_valid.append(False)
            stamp_valid.append(False)
        else:
            try:
                timestamp, ko, kl, headers, vo = _parse(b)
            except _Bad as bad:
                where = f"entry {first_index + k}" if first_index >= 0 else f"entry {k} of the batch"
                raise ValueError(f"{where}: {_error(bad, len(b))}") from None
            records += 1
            values += b[vo:]
            stamps.append(timestamp)
            stamp_valid.append(True)
            key_valid.append(ko >= 0)
            keys += b[ko : ko + kl] if ko >= 0 else b""
            for hko, hkl, hvo, hvl in headers:
                hkeys += b[hko : hko + hkl]
                hvals += b[hvo : hvo + hvl]
                hk_off.append(len(hkeys))
                hv_off.append(len(hvals))
        val_off.append(len(values))
        key_off.append(len(keys))
        hdr_off.append(len(hk_off) - 1)
    copy_values = records or first_index >= 0
    out_off: Any = _i32(val_off) if copy_values else offsets
    out_values: Any = values if copy_values else bodies
    return (
        out_off,
        out_values,
        _i32(key_off),
        keys,
        _bitmap(key_valid),
        bytearray(np.array(stamps, dtype=np.int64).tobytes()),
        _bitmap(stamp_valid),
        _i32(hdr_off),
        _i32(hk_off),
        hkeys,
        _i32(hv_off),
        hvals,
    )
