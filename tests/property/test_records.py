"""Record bodies: the compiled codec and its twin agree, round-trip, and refuse garbage
with the same clear error (never a crash or an over-read); stamped (version 2) bodies
read as the records they carry, and their bad stamps are refused alike."""

from __future__ import annotations

import re
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger import _store_py
from dledger._native import impl
from dledger.entry import MAGIC_NOOP, MAGIC_NORMAL, MAGIC_RECORD, MAX_TIMESTAMP_MS
from dledger.record import record_stamp, stamp_record_body

pytestmark = pytest.mark.property

if not getattr(impl, "COMPILED", False):  # pragma: no cover - twin-only runs compare the twin to itself
    pytest.skip("compiled extension disabled", allow_module_level=True)

MODULES = (impl, _store_py)

keys = st.none() | st.binary(max_size=40)
headers = st.lists(st.tuples(st.text(max_size=12), st.binary(max_size=30)), max_size=6)
stamps = st.integers(min_value=0, max_value=MAX_TIMESTAMP_MS)
records = st.tuples(st.binary(max_size=200), keys, stamps, headers)


def _outcome(fn: Any, *args: Any) -> Any:
    """What `fn(*args)` gives: its result, or its exception's type and message."""
    try:
        return fn(*args)
    except (ValueError, TypeError, OverflowError) as exc:
        return (type(exc).__name__, str(exc))


@settings(max_examples=300, deadline=None)
@given(records)
def test_round_trip_and_twin_agree(record: tuple[bytes, bytes | None, int, list[tuple[str, bytes]]]) -> None:
    value, key, timestamp, pairs = record
    body = impl.encode_record(value, key, timestamp, pairs)
    assert _store_py.encode_record(value, key, timestamp, pairs) == body
    for mod in MODULES:
        assert mod.decode_record(body) == (timestamp, key, pairs, value)


@settings(max_examples=400, deadline=None)
@given(records, st.data())
def test_truncated_or_extended_bodies_are_refused_alike(record: Any, data: st.DataObject) -> None:
    body = impl.encode_record(*record[:1], record[1], record[2], record[3])
    cut = data.draw(st.integers(min_value=0, max_value=len(body) - 1))
    for bad in (body[:cut], body + data.draw(st.binary(min_size=1, max_size=4))):
        outcomes = [_outcome(mod.decode_record, bad) for mod in MODULES]
        assert outcomes[0] == outcomes[1]
        assert outcomes[0][0] == "ValueError"
        assert "bad record body" in outcomes[0][1]


@settings(max_examples=1500, deadline=None)
@given(
    st.binary(max_size=64)
    | st.builds(lambda v, b: bytes([1]) + v + b, st.binary(min_size=8, max_size=8), st.binary(max_size=40))
    | st.builds(lambda v, b: bytes([2]) + v + b, st.binary(min_size=36, max_size=45), st.binary(max_size=40))
)
def test_garbage_never_crashes_and_both_agree(garbage: bytes) -> None:
    outcomes = [_outcome(mod.decode_record, garbage) for mod in MODULES]
    assert outcomes[0] == outcomes[1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(records, st.binary(max_size=50)), max_size=12), st.booleans())
def test_split_records_agree_and_match_decode(rows: list[Any], noop_first: bool) -> None:
    bodies, magic = [], []
    for row in rows:
        if isinstance(row, bytes):
            bodies.append(row)
            magic.append(MAGIC_NORMAL)
        else:
            bodies.append(impl.encode_record(row[0], row[1], row[2], row[3]))
            magic.append(MAGIC_RECORD)
    if noop_first and rows:
        bodies[0], magic[0] = b"", MAGIC_NOOP
    offsets = np.cumsum([0, *map(len, bodies)], dtype=np.int32)
    blob, mg = bytearray(b"".join(bodies)), np.array(magic, dtype=np.int32)
    out = [mod.split_records(len(bodies), offsets.tobytes(), blob, mg.tobytes()) for mod in MODULES]
    assert [bytes(x) for x in out[0]] == [bytes(x) for x in out[1]]
    value_off = np.frombuffer(out[0][0], dtype=np.int32)
    stamps = np.frombuffer(out[0][5], dtype=np.int64)
    for k, body in enumerate(bodies):
        value = bytes(out[0][1][value_off[k] : value_off[k + 1]])
        if magic[k] == MAGIC_RECORD:
            assert (int(stamps[k]), value) == (impl.decode_record(body)[0], impl.decode_record(body)[3])
        else:
            assert (int(stamps[k]), value) == (-1, body)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=6))
def test_split_records_refuses_garbage_rows_alike(rows: list[bytes]) -> None:
    offsets = np.cumsum([0, *map(len, rows)], dtype=np.int32).tobytes()
    mg = np.full(len(rows), MAGIC_RECORD, dtype=np.int32).tobytes()
    outcomes = [_outcome(mod.split_records, len(rows), offsets, bytearray(b"".join(rows)), mg) for mod in MODULES]
    first = outcomes[0] if isinstance(outcomes[0], tuple) and isinstance(outcomes[0][0], str) else "ok"
    second = outcomes[1] if isinstance(outcomes[1], tuple) and isinstance(outcomes[1][0], str) else "ok"
    assert first == second


@pytest.mark.parametrize("mod", MODULES, ids=["compiled", "twin"])
def test_limits_and_types_are_clear_errors(mod: Any) -> None:
    with pytest.raises(ValueError, match="over the limit of 65536"):
        mod.encode_record(b"", b"k" * 65537, 0)
    with pytest.raises(ValueError, match="over the limit of 1024"):
        mod.encode_record(b"", None, 0, [("h", b"")] * 1025)
    with pytest.raises(ValueError, match="header key is 1025 bytes"):
        mod.encode_record(b"", None, 0, [("h" * 1025, b"")])
    with pytest.raises(ValueError, match="timestamp must be >= 0"):
        mod.encode_record(b"", None, -1)
    with pytest.raises(TypeError, match="key must be bytes"):
        mod.encode_record(b"", "k", 0)
    with pytest.raises(TypeError, match=r"\(str, bytes\) pair"):
        mod.encode_record(b"", None, 0, [(b"h", b"v")])
    assert mod.decode_record(mod.encode_record(b"v", b"k" * 65536, 5, [("h" * 1024, b"x")] * 1024))[0] == 5


@pytest.mark.parametrize("mod", MODULES, ids=["compiled", "twin"])
def test_lying_lengths_name_the_fault(mod: Any) -> None:
    good = mod.encode_record(b"value", b"key", 7, [("h", b"v")])
    with pytest.raises(ValueError, match="unsupported record version"):
        mod.decode_record(b"\x03" + good[1:])
    with pytest.raises(ValueError, match="negative timestamp"):
        mod.decode_record(b"\x01\xff" + good[2:])
    lying_key = good[:9] + b"\x7f" + good[10:]  # a key of 126 bytes in a 30-byte body
    with pytest.raises(ValueError, match="truncated at byte 10"):
        mod.decode_record(lying_key)
    with pytest.raises(ValueError, match="bad varint"):
        mod.decode_record(good[:9] + b"\xff\xff\xff\xff\x7f" + good[10:])
    with pytest.raises(ValueError, match="header key is not UTF-8"):
        mod.decode_record(mod.encode_record(b"", None, 0, [("ab", b"")]).replace(b"ab", b"\xc3\x28"))


@settings(max_examples=600, deadline=None)
@given(st.binary(max_size=8), st.binary(max_size=6))
def test_header_keys_must_be_strict_utf8_alike(raw_key: bytes, value: bytes) -> None:
    """A header key of arbitrary bytes: both accept exactly what Python's UTF-8 decoder
    accepts (no overlongs, surrogates, or code points over U+10FFFF)."""
    body = b"\x01" + bytes(8) + b"\x00\x01" + bytes([len(raw_key)]) + raw_key + bytes([len(value)]) + value + b"\x00"
    outcomes = [_outcome(mod.decode_record, body) for mod in MODULES]
    assert outcomes[0] == outcomes[1]
    try:
        name = raw_key.decode("utf-8")
    except UnicodeDecodeError:
        assert outcomes[0][0] == "ValueError" and "not UTF-8" in outcomes[0][1]
    else:
        assert outcomes[0] == (0, None, [(name, value)], b"")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(records.map(lambda r: impl.encode_record(*r)), st.binary(max_size=30)), max_size=5))
def test_check_records_agrees_with_decoding(bodies: list[bytes]) -> None:
    outcomes = [_outcome(mod.check_records, bodies) for mod in MODULES]
    assert outcomes[0] == outcomes[1]
    bad = [k for k, body in enumerate(bodies) if isinstance(_outcome(impl.decode_record, body)[0], str)]
    if bad:
        assert outcomes[0][0] == "ValueError" and outcomes[0][1].startswith(f"body {bad[0]}: bad record body")
    else:
        assert outcomes[0] is None


# ---------------------------------------------------------------- stamped records (version 2)

INT63 = 2**63 - 1
stamp_fields = st.tuples(
    st.integers(0, INT63), st.integers(0, INT63), st.integers(0, INT63), st.integers(1, 65_536), st.integers(0, INT63)
)


def _forge(fields: tuple[int, int, int, int, int], tail: bytes) -> bytes:
    """A version-2 body with any stamp fields (signed int64s, a uint32 count)."""
    return b"\x02" + struct.pack(">qqqIq", *fields) + tail


@settings(max_examples=300, deadline=None)
@given(records, stamp_fields)
def test_stamped_bodies_decode_as_the_record_they_carry(record: Any, fields: tuple[int, int, int, int, int]) -> None:
    value, key, timestamp, pairs = record
    plain = impl.encode_record(value, key, timestamp, pairs)
    stamped = stamp_record_body(plain, *fields)
    assert stamped == _forge(fields, plain[1:])
    assert record_stamp(stamped) == fields
    for mod in MODULES:
        assert mod.decode_record(stamped) == (timestamp, key, pairs, value)
        assert mod.check_records([plain, stamped]) is None


@settings(max_examples=400, deadline=None)
@given(records, stamp_fields, st.data())
def test_truncated_or_extended_stamped_bodies_are_refused_alike(
    record: Any, fields: tuple[int, int, int, int, int], data: st.DataObject
) -> None:
    stamped = stamp_record_body(impl.encode_record(*record), *fields)
    cut = data.draw(st.integers(min_value=1, max_value=len(stamped) - 1))
    for bad in (stamped[:cut], stamped + data.draw(st.binary(min_size=1, max_size=4))):
        outcomes = [_outcome(mod.decode_record, bad) for mod in MODULES]
        assert outcomes[0] == outcomes[1]
        assert outcomes[0][0] == "ValueError"
        assert "bad record body" in outcomes[0][1]
    if cut < 37:
        assert _outcome(impl.decode_record, stamped[:cut])[1].endswith("truncated stamp at byte 1")
        with pytest.raises(ValueError, match="truncated"):
            record_stamp(stamped[:cut])
    else:
        assert record_stamp(stamped[:cut]) == fields  # the stamp is whole: the tail is the decoders' job


@settings(max_examples=500, deadline=None)
@given(
    st.tuples(
        st.integers(-(2**63), INT63),
        st.integers(-(2**63), INT63),
        st.integers(-(2**63), INT63),
        st.integers(0, 2**32 - 1),
        st.integers(-(2**63), INT63),
    ),
    records,
)
def test_stamp_fields_out_of_range_are_refused_alike(fields: tuple[int, int, int, int, int], record: Any) -> None:
    body = _forge(fields, impl.encode_record(*record)[1:])
    producer_id, epoch, first_seq, count, append_time = fields
    negative = min(producer_id, epoch, first_seq, append_time) < 0
    valid = not negative and 1 <= count <= 65_536
    outcomes = [_outcome(mod.decode_record, body) for mod in MODULES]
    assert outcomes[0] == outcomes[1]
    assert [_outcome(mod.check_records, [body]) for mod in MODULES] == [_outcome(impl.check_records, [body])] * 2
    assert _outcome(record_stamp, body) == (fields if valid else ("ValueError", _outcome(record_stamp, body)[1]))
    if valid:
        assert outcomes[0] == impl.decode_record(impl.encode_record(*record))
    elif negative:
        assert "negative stamp field" in outcomes[0][1]
    else:
        assert outcomes[0][1].endswith("stamp count not in 1..65536 at byte 25")


@pytest.mark.parametrize("mod", MODULES, ids=["compiled", "twin"])
@pytest.mark.parametrize(
    ("fields", "fault"),
    [
        ((-1, 0, 0, 1, 0), "negative stamp field at byte 1"),
        ((0, -1, 0, 1, 0), "negative stamp field at byte 9"),
        ((0, 0, -1, 1, 0), "negative stamp field at byte 17"),
        ((0, 0, 0, 1, -(2**63)), "negative stamp field at byte 29"),
        ((0, 0, 0, 0, 0), "stamp count not in 1..65536 at byte 25"),
        ((0, 0, 0, 65_537, 0), "stamp count not in 1..65536 at byte 25"),
        ((0, 0, 0, 2**32 - 1, 0), "stamp count not in 1..65536 at byte 25"),
    ],
)
def test_bad_stamps_name_the_field(mod: Any, fields: tuple[int, int, int, int, int], fault: str) -> None:
    body = _forge(fields, impl.encode_record(b"v", b"k", 1)[1:])
    with pytest.raises(ValueError, match=re.escape(f"bad record body ({len(body)} bytes): {fault}")):
        mod.decode_record(body)
    with pytest.raises(ValueError, match=re.escape(f"body 1: bad record body ({len(body)} bytes): {fault}")):
        mod.check_records([impl.encode_record(b"", None, 0), body])


@pytest.mark.parametrize("mod", MODULES, ids=["compiled", "twin"])
def test_a_stamped_body_with_a_bad_tail_names_the_tail(mod: Any) -> None:
    stamped = stamp_record_body(impl.encode_record(b"value", b"key", 7), 1, 2, 3, 4, 5)
    with pytest.raises(ValueError, match=r"\(37 bytes\): truncated at byte 37"):
        mod.decode_record(stamped[:37])
    with pytest.raises(ValueError, match="negative timestamp at byte 37"):
        mod.decode_record(stamped[:37] + b"\xff" + stamped[38:])
    with pytest.raises(ValueError, match="truncated at byte 46"):
        mod.decode_record(stamped[:45] + b"\x7f" + stamped[46:])  # a key of 126 bytes
    with pytest.raises(ValueError, match="bytes after the value"):
        mod.decode_record(stamped + b"!")
    with pytest.raises(ValueError, match="unsupported record version"):
        mod.decode_record(b"\x03" + stamped[1:])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.tuples(records, st.none() | stamp_fields), st.binary(max_size=50)), max_size=12))
def test_split_records_read_stamped_bodies_as_their_records(rows: list[Any]) -> None:
    """The record columns of a batch with stamped bodies equal those of the same batch
    without the stamps, byte for byte, in the compiled module and the twin."""
    stamped, plain, magic = [], [], []
    for row in rows:
        if isinstance(row, bytes):
            stamped.append(row)
            plain.append(row)
            magic.append(MAGIC_NORMAL)
        else:
            body = impl.encode_record(*row[0])
            plain.append(body)
            stamped.append(body if row[1] is None else stamp_record_body(body, *row[1]))
            magic.append(MAGIC_RECORD)
    mg = np.array(magic, dtype=np.int32).tobytes()
    out = []
    for bodies in (stamped, plain):
        offsets = np.cumsum([0, *map(len, bodies)], dtype=np.int32).tobytes()
        for mod in MODULES:
            out.append([bytes(x) for x in mod.split_records(len(bodies), offsets, bytearray(b"".join(bodies)), mg)])
    assert out[0] == out[1] == out[2] == out[3]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            records.map(lambda r: impl.encode_record(*r)),
            st.tuples(records, stamp_fields).map(lambda rs: stamp_record_body(impl.encode_record(*rs[0]), *rs[1])),
            st.binary(max_size=45),
        ),
        max_size=5,
    )
)
def test_check_records_for_clients_refuses_stamped_bodies_alike(bodies: list[bytes]) -> None:
    """`check_records(bodies, allow_stamped=False)` (a client's request): the first body
    that is stamped or bad is named, alike in both modules."""
    for allow in (True, False):
        outcomes = [_outcome(mod.check_records, bodies, allow) for mod in MODULES]
        assert outcomes[0] == outcomes[1]
    first = next((k for k, b in enumerate(bodies) if b[:1] == b"\x02" or _outcome(impl.check_records, [b])), None)
    refused = _outcome(impl.check_records, bodies, False)
    if first is None:
        assert refused is None
    elif bodies[first][:1] == b"\x02":
        assert refused == (
            "ValueError",
            f"body {first}: stamped records (version 2) are written by the leader, not sent by clients",
        )
    else:
        assert refused[1].startswith(f"body {first}: bad record body")
