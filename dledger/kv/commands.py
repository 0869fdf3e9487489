"""The key-value store's wire format: commands (log entry bodies and query requests) and
answers, a compact versioned binary encoding.

Every message starts with a 3-byte header: the magic byte `K` (0x4B), the format
version (1) and a tag saying what follows. Byte strings are a length (unsigned LEB128
varint, minimal form, at most 10 bytes) followed by the bytes; an optional byte string
("absent" allowed) is a flag byte (0 absent, 1 present) and then, when present, the
string. Nothing may follow the last field.

=====  ==========  ====================================================
tag    message     fields
=====  ==========  ====================================================
0x01   PUT         key, value
0x02   GET         key
0x03   DELETE      key
0x04   CAS         key, expected (optional: absent), new value
0x05   LEN         (none): how many keys
0x06   SCAN        prefix, limit (varint): keys in byte order
0x81   OK          (none)
0x82   VALUE       value
0x83   NOT_FOUND   (none)
0x84   CAS_FAILED  current (optional: absent)
0x85   COUNT       n (varint)
0x86   PAIRS       count (varint), then count x (key, value)
0x87   ERROR       message (UTF-8)
=====  ==========  ====================================================

`decode_command` / `decode_answer` are strict: any other byte string (a bad header, an
unknown version or tag, a truncated field, a non-minimal varint, trailing bytes, a
command where an answer is expected and the reverse) raises `ValueError` with a message
saying what is wrong. They never raise anything else for bad bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

MAGIC = 0x4B
VERSION = 1
MAX_KEY_SIZE = 64 * 1024
"""The longest key a command may hold (values are bounded only by the entry size)."""
MAX_VARINT = (1 << 70) - 1
"""The largest number a message may carry (a scan limit, a count): what a varint of at
most 10 bytes holds, the most `decode_command` and `decode_answer` read."""

_T_PUT, _T_GET, _T_DELETE, _T_CAS, _T_LEN, _T_SCAN = 0x01, 0x02, 0x03, 0x04, 0x05, 0x06
_T_OK, _T_VALUE, _T_NOT_FOUND, _T_CAS_FAILED, _T_COUNT, _T_PAIRS, _T_ERROR = 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87


@dataclass(frozen=True)
class Put:
    """Set `key` to `value`; answered `Ok`."""

    key: bytes
    value: bytes


@dataclass(frozen=True)
class Get:
    """Read `key`; answered `Value` or `NotFound`."""

    key: bytes


@dataclass(frozen=True)
class Delete:
    """Remove `key`; answered `Ok` when it was there, `NotFound` when not."""

    key: bytes


@dataclass(frozen=True)
class Cas:
    """Set `key` to `new` if its value is `expected` (None: only if it is absent);
    answered `Ok`, or `CasFailed` with the current value (None: absent)."""

    key: bytes
    expected: bytes | None
    new: bytes


@dataclass(frozen=True)
class Len:
    """How many keys the store holds; answered `Count` (a query only)."""


@dataclass(frozen=True)
class Scan:
    """At most `limit` keys starting with `prefix`, in byte order, with their values;
    answered `Pairs` (a query only)."""

    prefix: bytes
    limit: int


Command = Put | Get | Delete | Cas | Len | Scan
WRITES = (Put, Delete, Cas)
"""The commands that change the state (only through the log)."""


@dataclass(frozen=True)
class Ok:
    """A write was applied."""


@dataclass(frozen=True)
class Value:
    """The value of a key."""

    value: bytes


@dataclass(frozen=True)
class NotFound:
    """The key is absent."""


@dataclass(frozen=True)
class CasFailed:
    """A compare-and-set did not match; `current` is the key's value (None: absent)."""

    current: bytes | None


@dataclass(frozen=True)
class Count:
    """A number of keys."""

    n: int


@dataclass(frozen=True)
class Pairs:
    """Keys and values, in byte order of the keys."""

    items: tuple[tuple[bytes, bytes], ...]


@dataclass(frozen=True)
class Error:
    """The request was not a valid command (or not one this path serves); nothing changed."""

    message: str


Answer = Ok | Value | NotFound | CasFailed | Count | Pairs | Error


def _varint(n: int) -> bytes:
    if n < 0:
        raise ValueError(f"cannot encode a negative length {n}")
    if n > MAX_VARINT:
        raise ValueError(f"cannot encode {n}: above 2^70 - 1, the most a 10-byte varint holds")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string(data: bytes, name: str) -> bytes:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"{name} must be bytes, not {type(data).__name__}")
    return _varint(len(data)) + bytes(data)


def _optional(data: bytes | None, name: str) -> bytes:
    return b"\x00" if data is None else b"\x01" + _string(data, name)


def _limit(limit: int) -> bytes:
    """A scan limit's varint (TypeError: not an int; ValueError: out of range)."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"scan limit must be an int, not {type(limit).__name__}")
    if limit < 0:
        raise ValueError(f"scan limit {limit} is negative")
    if limit > MAX_VARINT:
        raise ValueError(f"scan limit {limit} is above MAX_VARINT (2^70 - 1), the most decode_command reads back")
    return _varint(limit)


def _header(tag: int) -> bytes:
    return bytes((MAGIC, VERSION, tag))


def encode_command(command: Command) -> bytes:
    """The bytes of a command (a log entry body, or a query request).

    Raises:
        ValueError: a key longer than `MAX_KEY_SIZE`, or a scan limit not in
            0..`MAX_VARINT` (what `decode_command` reads back).
        TypeError: not a command, a field that is not bytes, a scan limit not an int.
    """
    key = getattr(command, "key", b"")
    key_field = _string(key, "key")
    if len(key) > MAX_KEY_SIZE:
        raise ValueError(f"key of {len(key)} bytes is longer than {MAX_KEY_SIZE}")
    if isinstance(command, Put):
        return _header(_T_PUT) + key_field + _string(command.value, "value")
    if isinstance(command, Get):
        return _header(_T_GET) + key_field
    if isinstance(command, Delete):
        return _header(_T_DELETE) + key_field
    if isinstance(command, Cas):
        return _header(_T_CAS) + key_field + _optional(command.expected, "expected") + _string(command.new, "new")
    if isinstance(command, Len):
        return _header(_T_LEN)
    if isinstance(command, Scan):
        prefix = _string(command.prefix, "prefix")
        if len(command.prefix) > MAX_KEY_SIZE:
            raise ValueError(f"prefix of {len(command.prefix)} bytes is longer than {MAX_KEY_SIZE}")
        return _header(_T_SCAN) + prefix + _limit(command.limit)
    raise TypeError(f"not a key-value command: {command!r}")


def encode_answer(answer: Answer) -> bytes:
    """The bytes of an answer.

    Raises:
        TypeError: not an answer.
    """
    if isinstance(answer, Ok):
        return _header(_T_OK)
    if isinstance(answer, Value):
        return _header(_T_VALUE) + _string(answer.value, "value")
    if isinstance(answer, NotFound):
        return _header(_T_NOT_FOUND)
    if isinstance(answer, CasFailed):
        return _header(_T_CAS_FAILED) + _optional(answer.current, "current")
    if isinstance(answer, Count):
        return _header(_T_COUNT) + _varint(answer.n)
    if isinstance(answer, Pairs):
        body = b"".join(_string(k, "key") + _string(v, "value") for k, v in answer.items)
        return _header(_T_PAIRS) + _varint(len(answer.items)) + body
    if isinstance(answer, Error):
        return _header(_T_ERROR) + _string(answer.message.encode("utf-8"), "message")
    raise TypeError(f"not a key-value answer: {answer!r}")


class _Reader:
    """Strict field reader over one message."""

    def __init__(self, data: bytes | bytearray | memoryview, what: str) -> None:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"a {what} must be bytes, not {type(data).__name__}")
        self.data = bytes(data)
        self.pos = 0
        self.what = what

    def fail(self, why: str) -> ValueError:
        return ValueError(f"bad {self.what} ({len(self.data)} bytes): {why} at offset {self.pos}")

    def header(self) -> int:
        if len(self.data) < 3:
            raise self.fail("shorter than its 3-byte header")
        magic, version, tag = self.data[0], self.data[1], self.data[2]
        if magic != MAGIC:
            raise self.fail(f"magic byte {magic:#04x}, not {MAGIC:#04x}")
        if version != VERSION:
            raise self.fail(f"format version {version}, this reader knows {VERSION}")
        self.pos = 3
        return tag

    def varint(self) -> int:
        value, shift, start = 0, 0, self.pos
        while True:
            if self.pos >= len(self.data):
                raise self.fail("truncated varint")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
            shift += 7
            if self.pos - start >= 10:
                raise self.fail("varint longer than 10 bytes")
        if self.pos - start > 1 and byte == 0:
            raise self.fail("non-minimal varint")
        return value

    def string(self, limit: int | None = None) -> bytes:
        length = self.varint()
        if limit is not None and length > limit:
            raise self.fail(f"a field of {length} bytes, more than {limit}")
        if length > len(self.data) - self.pos:
            raise self.fail(f"a field of {length} bytes with {len(self.data) - self.pos} left")
        out = self.data[self.pos : self.pos + length]
        self.pos += length
        return out

    def optional(self, limit: int | None = None) -> bytes | None:
        if self.pos >= len(self.data):
            raise self.fail("truncated optional field")
        flag = self.data[self.pos]
        self.pos += 1
        if flag == 0:
            return None
        if flag != 1:
            raise self.fail(f"optional flag {flag}, not 0 or 1")
        return self.string(limit)

    def end(self) -> None:
        if self.pos != len(self.data):
            raise self.fail(f"{len(self.data) - self.pos} trailing bytes")


def decode_command(data: bytes | bytearray | memoryview) -> Command:
    """Parse a command.

    Raises:
        ValueError: the bytes are not exactly one valid command (see the module docstring).
        TypeError: `data` is not bytes, bytearray or memoryview.
    """
    reader = _Reader(data, "key-value command")
    tag = reader.header()
    command: Command
    if tag == _T_PUT:
        command = Put(reader.string(MAX_KEY_SIZE), reader.string())
    elif tag == _T_GET:
        command = Get(reader.string(MAX_KEY_SIZE))
    elif tag == _T_DELETE:
        command = Delete(reader.string(MAX_KEY_SIZE))
    elif tag == _T_CAS:
        key = reader.string(MAX_KEY_SIZE)
        expected = reader.optional()
        command = Cas(key, expected, reader.string())
    elif tag == _T_LEN:
        command = Len()
    elif tag == _T_SCAN:
        command = Scan(reader.string(MAX_KEY_SIZE), reader.varint())
    else:
        reader.pos = 2
        raise reader.fail(f"unknown command tag {tag:#04x}")
    reader.end()
    return command


def decode_answer(data: bytes | bytearray | memoryview) -> Answer:
    """Parse an answer.

    Raises:
        ValueError: the bytes are not exactly one valid answer (see the module docstring).
        TypeError: `data` is not bytes, bytearray or memoryview.
    """
    reader = _Reader(data, "key-value answer")
    tag = reader.header()
    answer: Answer
    if tag == _T_OK:
        answer = Ok()
    elif tag == _T_VALUE:
        answer = Value(reader.string())
    elif tag == _T_NOT_FOUND:
        answer = NotFound()
    elif tag == _T_CAS_FAILED:
        answer = CasFailed(reader.optional())
    elif tag == _T_COUNT:
        answer = Count(reader.varint())
    elif tag == _T_PAIRS:
        count = reader.varint()
        if count > len(reader.data) - reader.pos:  # each pair takes at least 2 bytes
            raise reader.fail(f"{count} pairs announced in fewer bytes")
        answer = Pairs(tuple((reader.string(), reader.string()) for _ in range(count)))
    elif tag == _T_ERROR:
        raw = reader.string()
        try:
            answer = Error(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise reader.fail("error message is not UTF-8") from None
    else:
        reader.pos = 2
        raise reader.fail(f"unknown answer tag {tag:#04x}")
    reader.end()
    return answer


def put(key: bytes, value: bytes) -> bytes:
    """The bytes of `Put(key, value)`."""
    return encode_command(Put(key, value))


def get(key: bytes) -> bytes:
    """The bytes of `Get(key)`."""
    return encode_command(Get(key))


def delete(key: bytes) -> bytes:
    """The bytes of `Delete(key)`."""
    return encode_command(Delete(key))


def cas(key: bytes, expected: bytes | None, new: bytes) -> bytes:
    """The bytes of `Cas(key, expected, new)` (expected None: only if absent)."""
    return encode_command(Cas(key, expected, new))


__all__ = [
    "MAX_KEY_SIZE",
    "MAX_VARINT",
    "WRITES",
    "Answer",
    "Cas",
    "CasFailed",
    "Command",
    "Count",
    "Delete",
    "Error",
    "Get",
    "Len",
    "NotFound",
    "Ok",
    "Pairs",
    "Put",
    "Scan",
    "Value",
    "cas",
    "decode_answer",
    "decode_command",
    "delete",
    "encode_answer",
    "encode_command",
    "get",
    "put",
]
