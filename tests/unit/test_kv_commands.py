"""dledger.kv.commands: the command and answer encoding round-trips, is compact, and
decoding is strict: bad bytes always give a clear ValueError, never another exception."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger.kv import commands as c

pytestmark = pytest.mark.unit

keys = st.binary(max_size=40)
values = st.binary(max_size=200)
command_strategy = st.one_of(
    st.builds(c.Put, keys, values),
    st.builds(c.Get, keys),
    st.builds(c.Delete, keys),
    st.builds(c.Cas, keys, st.none() | values, values),
    st.just(c.Len()),
    st.builds(c.Scan, keys, st.integers(0, 1 << 40)),
)
answer_strategy = st.one_of(
    st.just(c.Ok()),
    st.builds(c.Value, values),
    st.just(c.NotFound()),
    st.builds(c.CasFailed, st.none() | values),
    st.builds(c.Count, st.integers(0, 1 << 63)),
    st.builds(c.Pairs, st.lists(st.tuples(keys, values), max_size=5).map(tuple)),
    st.builds(c.Error, st.text(max_size=50)),
)


@given(command_strategy)
def test_commands_round_trip(command: c.Command) -> None:
    assert c.decode_command(c.encode_command(command)) == command


@given(answer_strategy)
def test_answers_round_trip(answer: c.Answer) -> None:
    assert c.decode_answer(c.encode_answer(answer)) == answer


def test_the_encoding_is_compact_and_versioned() -> None:
    assert c.put(b"k", b"v") == b"K\x01\x01\x01k\x01v"  # magic, version, tag, then length-prefixed fields
    assert c.get(b"k") == b"K\x01\x02\x01k"
    assert c.delete(b"k") == b"K\x01\x03\x01k"
    assert c.cas(b"k", None, b"v") == b"K\x01\x04\x01k\x00\x01v"
    assert c.cas(b"k", b"", b"v") == b"K\x01\x04\x01k\x01\x00\x01v"  # empty differs from absent
    assert len(c.put(b"key", b"x" * 300)) == 3 + 1 + 3 + 2 + 300  # a 2-byte varint for 300


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "shorter than its 3-byte header"),
        (b"K\x01", "shorter than its 3-byte header"),
        (b"X\x01\x01\x01k\x01v", "magic byte 0x58"),
        (b"K\x02\x01\x01k\x01v", "format version 2"),
        (b"K\x01\x7f", "unknown command tag 0x7f"),
        (b"K\x01\x81", "unknown command tag 0x81"),  # an answer is not a command
        (b"K\x01\x01\x05k", "a field of 5 bytes with 1 left"),
        (b"K\x01\x01\x01k", "truncated varint"),
        (b"K\x01\x01\x01k\x01vX", "1 trailing bytes"),
        (b"K\x01\x02\x81\x00k", "non-minimal varint"),
        (b"K\x01\x02" + b"\xff" * 10 + b"\x01", "varint longer than 10 bytes"),
        (b"K\x01\x04\x01k\x02\x01v", "optional flag 2"),
        (b"K\x01\x04\x01k", "truncated optional field"),
        (b"K\x01\x02\x81\x80\x04" + b"k" * 65537, "more than 65536"),
    ],
)
def test_bad_command_bytes_give_a_clear_value_error(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match="bad key-value command") as info:
        c.decode_command(data)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"K\x01\x01\x01k\x01v", "unknown answer tag 0x01"),
        (b"K\x01\x87\x02\xff\xfe", "error message is not UTF-8"),
        (b"K\x01\x86\x7f", "127 pairs announced"),
        (b"K\x01\x81\x00", "1 trailing bytes"),
    ],
)
def test_bad_answer_bytes_give_a_clear_value_error(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match="bad key-value answer") as info:
        c.decode_answer(data)
    assert message in str(info.value)


def test_encoding_refuses_what_it_cannot_write() -> None:
    with pytest.raises(ValueError, match="longer than 65536"):
        c.put(b"k" * 65537, b"")
    with pytest.raises(ValueError, match="negative"):
        c.encode_command(c.Scan(b"", -1))
    with pytest.raises(TypeError, match="not a key-value command"):
        c.encode_command("PUT k v")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a key-value answer"):
        c.encode_answer(c.Put(b"k", b"v"))  # type: ignore[arg-type]


def test_a_scan_limit_encodes_only_when_decode_reads_it_back() -> None:
    """The decoders read varints of at most 10 bytes: the largest limit that encodes is
    the largest that decodes (2^70 encoded fine and was refused by every member)."""
    largest = c.encode_command(c.Scan(b"p", c.MAX_VARINT))
    assert c.decode_command(largest) == c.Scan(b"p", (1 << 70) - 1)
    with pytest.raises(ValueError, match="MAX_VARINT"):
        c.encode_command(c.Scan(b"", 1 << 70))
    with pytest.raises(ValueError, match="cannot encode"):
        c.encode_answer(c.Count(1 << 70))
    with pytest.raises(TypeError, match="scan limit must be an int, not float"):
        c.encode_command(c.Scan(b"", 1.5))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("command", "name"),
    [
        (c.Put("k", b"v"), "key"),  # type: ignore[arg-type]
        (c.Put(b"k", None), "value"),  # type: ignore[arg-type]
        (c.Cas(b"k", "old", b"new"), "expected"),  # type: ignore[arg-type]
        (c.Scan(None, 1), "prefix"),  # type: ignore[arg-type]
    ],
)
def test_a_field_that_is_not_bytes_is_a_type_error_naming_it(command: c.Command, name: str) -> None:
    with pytest.raises(TypeError, match=f"^{name} must be bytes"):
        c.encode_command(command)


def test_decoding_what_is_not_bytes_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="must be bytes, not str"):
        c.decode_command("K\x01\x05")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be bytes, not int"):
        c.decode_answer(5)  # type: ignore[arg-type]


@settings(max_examples=400)
@given(st.binary(max_size=64))
def test_garbage_never_crashes_the_decoders(data: bytes) -> None:
    for decode in (c.decode_command, c.decode_answer):
        try:
            decoded = decode(data)
        except ValueError:
            continue
        encode = c.encode_command if decode is c.decode_command else c.encode_answer
        assert encode(decoded) == data  # what decodes is canonical: it encodes back to the same bytes


@settings(max_examples=300)
@given(command_strategy, st.data())
def test_mutated_commands_decode_canonically_or_fail_cleanly(command: c.Command, data: st.DataObject) -> None:
    raw = bytearray(c.encode_command(command))
    position = data.draw(st.integers(0, len(raw) - 1))
    raw[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    for candidate in (bytes(raw), bytes(raw[:cut])):
        try:
            decoded = c.decode_command(candidate)
        except ValueError:
            continue
        assert c.encode_command(decoded) == candidate
