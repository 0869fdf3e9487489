"""Stamped records (record layout version 2): `stamp_record_body` and `record_stamp` in
`dledger.record`, and the client-facing `check_append` refusing them."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from dledger import entry
from dledger.codes import DLedgerError, ResponseCode
from dledger.entry import MAGIC_NORMAL, MAGIC_RECORD
from dledger.record import (
    STAMP_SIZE,
    check_append,
    encode_record,
    record_content,
    record_stamp,
    stamp_record_body,
)

pytestmark = pytest.mark.unit

BIG = 2**63 - 1


def test_stamp_layout_is_version_byte_stamp_then_the_v1_tail() -> None:
    body = encode_record(b"value", b"key", 1_700_000_000_000, [("h", b"1")])
    stamped = stamp_record_body(body, 7, 2, 40, 3, 1_700_000_000_123)
    assert STAMP_SIZE == 36
    assert len(stamped) == len(body) + STAMP_SIZE
    assert stamped[0] == 2
    assert stamped[1 : 1 + STAMP_SIZE] == struct.pack(">qqqIq", 7, 2, 40, 3, 1_700_000_000_123)
    assert stamped[1 + STAMP_SIZE :] == body[1:]
    assert record_stamp(stamped) == (7, 2, 40, 3, 1_700_000_000_123)


def test_extreme_fields_round_trip() -> None:
    body = encode_record(b"", None, 0)
    for fields in ((0, 0, 0, 1, 0), (BIG, BIG, BIG, 65_536, BIG)):
        assert record_stamp(stamp_record_body(body, *fields)) == fields


def test_version_1_and_other_bodies_have_no_stamp() -> None:
    assert record_stamp(encode_record(b"v", b"k", 5)) is None
    assert record_stamp(b"") is None
    assert record_stamp(b"plain body") is None


@pytest.mark.parametrize("cut", [1, 2, 20, 36])
def test_a_truncated_stamp_is_a_value_error(cut: int) -> None:
    stamped = stamp_record_body(encode_record(b"v", None, 1), 1, 1, 1, 1, 1)
    with pytest.raises(ValueError, match=r"truncated: its stamp needs 37"):
        record_stamp(stamped[:cut])
    assert record_stamp(stamped[:37]) == (1, 1, 1, 1, 1)  # the stamp alone is whole


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ((-1, 0, 0, 1, 0), "negative stamp field"),
        ((0, -1, 0, 1, 0), "negative stamp field"),
        ((0, 0, -5, 1, 0), "negative stamp field"),
        ((0, 0, 0, 1, -1), "negative stamp field"),
        ((0, 0, 0, 0, 0), "stamp count of 0"),
        ((0, 0, 0, 65_537, 0), "stamp count of 65537"),
    ],
)
def test_record_stamp_refuses_fields_out_of_range(fields: tuple[int, ...], message: str) -> None:
    forged = b"\x02" + struct.pack(">qqqIq", *fields) + encode_record(b"v", None, 1)[1:]
    with pytest.raises(ValueError, match=message):
        record_stamp(forged)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ((-1, 0, 0, 1, 0), "producer_id must be in 0..2"),
        ((2**63, 0, 0, 1, 0), "producer_id must be in 0..2"),
        ((0, -1, 0, 1, 0), "epoch must be in"),
        ((0, 0, -1, 1, 0), "first_seq must be in"),
        ((0, 0, 0, 1, -1), "append_time_ms must be in"),
        ((0, 0, 0, 0, 0), r"count must be in 1..65536, got 0"),
        ((0, 0, 0, 65_537, 0), r"count must be in 1..65536, got 65537"),
    ],
)
def test_stamp_record_body_refuses_fields_out_of_range(fields: tuple[int, int, int, int, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        stamp_record_body(encode_record(b"v", None, 1), *fields)


def test_stamp_record_body_refuses_what_is_not_a_v1_record_body() -> None:
    good = encode_record(b"value", b"k", 1)
    stamped = stamp_record_body(good, 1, 0, 0, 1, 0)
    for bad in (b"", b"plain", good[:5], good + b"x", stamped):
        with pytest.raises(ValueError, match=r"not a (valid )?version-1 record body"):
            stamp_record_body(bad, 1, 0, 0, 1, 0)


def test_check_append_refuses_stamped_bodies_from_clients() -> None:
    good = encode_record(b"v", b"k", 1)
    stamped = stamp_record_body(good, 1, 0, 0, 2, 5)
    with pytest.raises(DLedgerError, match=r"body 1: stamped records \(version 2\) are written by the leader") as err:
        check_append([good, stamped], MAGIC_RECORD, java_compat=False)
    assert err.value.code == ResponseCode.UNEXPECTED_ARGUMENT
    assert "nothing was appended" in str(err.value)
    check_append([good, good], MAGIC_RECORD, java_compat=False)
    check_append([stamped], MAGIC_NORMAL, java_compat=False)  # a plain entry's body is opaque


def test_stamp_constants_agree_with_the_c_layout() -> None:
    text = (Path(__file__).resolve().parents[2] / "native" / "dl_layout.h").read_text()
    defines = {k: int(v) for k, v in re.findall(r"#define (DL_REC_\w+)\s+(\d+)", text)}
    assert defines["DL_REC_VERSION"] == entry.RECORD_VERSION == 1
    assert defines["DL_REC_STAMPED"] == entry.RECORD_STAMPED == 2
    assert defines["DL_REC_STAMP_SIZE"] == entry.RECORD_STAMP_SIZE == STAMP_SIZE == struct.calcsize(">qqqIq")
    assert defines["DL_REC_MAX_STAMP_COUNT"] == entry.MAX_STAMP_COUNT == 65_536


def test_record_content_is_what_a_resent_record_keeps() -> None:
    """Key, headers and value; not the timestamp (a resend may take it anew) nor the
    leader's stamp (the idempotent producer's duplicate check compares these)."""
    body = encode_record(b"value", b"key", 1_000, [("h", b"v")])
    stamped = stamp_record_body(body, 7, 0, 0, 1, 2_000)
    assert (
        record_content(stamped)
        == record_content(body)
        == record_content(encode_record(b"value", b"key", 5, [("h", b"v")]))
    )
    assert record_content(body) != record_content(encode_record(b"other", b"key", 1_000, [("h", b"v")]))
    assert record_content(body).endswith(b"value")
